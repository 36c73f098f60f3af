//! The LLM responder: answers a message, using the node's tools.
//!
//! Each step is one schema-constrained LLM call whose answer is either a
//! tool call `{"tool": NAME, "arguments": {...}}` (the arguments schema is
//! the tool's own) or `{"tool": "final_answer", "answer": ...}`. This works
//! on small local models whose native tool calling is unreliable, and on any
//! OpenAI-compatible endpoint. The loop is bounded: after
//! `max_tool_calls` calls only the final answer is allowed. A protocol request's first answer
//! given before every tool its rules name ([`Focus::rule_tools`]) was called is sent back once,
//! with a reminder to call them; so is one with numbers from nowhere (no tool called, and they
//! are in neither the request, the documents nor the description:
//! `programmer::grounding::unlooked_number`). A protocol answer that drops the request's
//! envelope ([`crate::envelope`]) is sent back once more, asking for the whole message, and one
//! in a JSON exchange with member names the documents never mention (a tool's `temperature_c`
//! for the protocol's `temperature`) once more again. All but the rules' tools are
//! `check_answers` (on by default). With `require_effects` (on by default), a protocol answer
//! that says the request was done (`"status": "success"`) while every tool call only read
//! ([`crate::tools::Tool::changes_state`]) is sent back once too, with [`NOT_DONE`]: a small
//! model looks a ski up, answers `success` and rents nothing, and told so, writes the rental
//! (the same rule in its system prompt does not do it).
//!
//! Why: without these checks a small model's first answers under the seed message protocols were
//! the payload alone, with figures no tool gave; told once to look it up and once to give the
//! whole message, it did both (`agora-server`'s example `seed_protocols_on_the_local_model`).

use agora_llm::{ChatRequest, Message, ToolDefinition};
use agora_protocol::VerifiedDocument;
use serde_json::{Value, json};

use crate::accounting::{Accountant, Category, QueryContext};
use crate::config::ResponderConfig;
use crate::focus::Focus;
use crate::observer::{Step, ToolCaller};
use crate::text::clip_to;
use crate::tools::{ToolRegistry, catalogue};

/// What the responder says, with `responder.require_effects`, to a protocol answer that claims
/// the request was done when every tool call it made only read.
pub const NOT_DONE: &str = "Not yet: your answer says the request was done, but none of your \
tool calls changed anything: they only read. A request to do something is done only by a tool \
call that does it (in a database, a statement that writes it). If the request asks for something \
to be done, do it with a tool now, then answer; if it cannot be done, answer that it failed and \
why. If it only asks for information, give the same answer again.";

/// Characters of a PD shown to the responder; longer documents are cut.
const MAX_PD_CHARS: usize = 8000;
/// The pseudo-tool that ends the loop.
const FINAL: &str = "final_answer";

/// What the request is about.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    /// A natural-language message.
    Natural,
    /// A message under a protocol document.
    Protocol(&'a VerifiedDocument),
}

pub use crate::tools::ToolCall;

/// The responder's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The final answer: a string for natural language, any JSON for a protocol.
    pub value: Value,
    /// The tool calls made, in order.
    pub tool_calls: Vec<ToolCall>,
}

/// Why the responder could not answer.
#[derive(Debug, thiserror::Error)]
pub enum RespondError {
    /// The LLM call failed.
    #[error("the LLM failed: {0}")]
    Llm(#[from] agora_llm::LlmError),
    /// The LLM's step did not match the schema.
    #[error("the LLM gave an unreadable step: {0}")]
    Unreadable(String),
}

/// Whether a protocol exchange is in JSON objects: the request body is one and the document
/// speaks of JSON or writes out an object's members (`reply: {temperature: number}`). The final
/// answer is then held to a JSON object by the grammar, because a small model otherwise answers
/// such a request in prose ("no"), which the protocol's programs on the other side cannot read.
pub(crate) fn json_exchange(document: &VerifiedDocument, body: &str) -> bool {
    let text = document.text();
    matches!(
        serde_json::from_str::<Value>(body.trim()),
        Ok(Value::Object(_))
    ) && (text.to_ascii_lowercase().contains("json") || writes_out_an_object(text))
}

/// Whether `text` has a `{` followed by a member name and a colon, quoted or not.
fn writes_out_an_object(text: &str) -> bool {
    text.match_indices('{').any(|(at, _)| {
        let rest = text[at + 1..].trim_start();
        let rest = rest.strip_prefix('"').unwrap_or(rest);
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if name_len == 0 {
            return false;
        }
        let after = &rest[name_len..];
        let after = after.strip_prefix('"').unwrap_or(after);
        after.trim_start().starts_with(':')
    })
}

/// The responder's inputs that do not change between steps.
pub struct Responder<'a> {
    /// The ledger-recording LLM.
    pub accountant: &'a Accountant,
    /// The node's tools (calls go through the registry's validation).
    pub tools: &'a ToolRegistry,
    /// Limits.
    pub config: &'a ResponderConfig,
    /// The node's description and the tools on offer for this request: the whole of both, or
    /// their focus on the request's protocol (see [`crate::focus`]).
    pub focus: &'a Focus,
    /// The documents the request's protocol references (see `agora_protocol::references`),
    /// shown after it; empty for natural language.
    pub references: &'a [VerifiedDocument],
}

impl Responder<'_> {
    /// Answers `message`, continuing `history` (earlier turns of a conversation).
    pub async fn respond(
        &self,
        context: &QueryContext,
        subject: Subject<'_>,
        history: &[Message],
        message: &str,
    ) -> Result<Answer, RespondError> {
        let mut system = self.system_prompt(subject);
        if let Subject::Protocol(_) = subject {
            // A protocol's body carries its dates as data; a natural-language message is the
            // sender's wording (and the committed natural-language runs replay unchanged).
            system.push_str(&dates_named(message));
        }
        let mut messages = vec![Message::system(system)];
        messages.extend(history.iter().cloned());
        messages.push(Message::user(match subject {
            Subject::Natural => message.to_string(),
            Subject::Protocol(_) => format!("Request body:\n{message}"),
        }));
        if self.config.native_tools && !self.focus.tools.is_empty() {
            return self.respond_native(context, subject, messages).await;
        }
        let answer_schema = match subject {
            Subject::Natural => json!({"type": "string"}),
            Subject::Protocol(document) if json_exchange(document, message) => {
                json!({"type": "object"})
            }
            Subject::Protocol(_) => json!({}),
        };
        let mut tool_calls: Vec<ToolCall> = Vec::new();
        let mut reminded = Reminded::default();
        loop {
            let tools_allowed = tool_calls.len() < self.config.max_tool_calls;
            if !tools_allowed {
                messages.push(Message::user(
                    "No more tool calls are allowed. Give your final answer now.",
                ));
            }
            let request = ChatRequest::new(messages.clone())
                .json_schema("step", self.step_schema(&answer_schema, tools_allowed))
                .max_tokens(self.config.max_step_tokens);
            let response = self
                .accountant
                .chat(Category::Conversation, context, &request)
                .await?;
            let step: Value = serde_json::from_str(response.content.trim()).map_err(|e| {
                RespondError::Unreadable(format!("{e}: {}", clip(&response.content)))
            })?;
            let tool = step.get("tool").and_then(Value::as_str).unwrap_or_default();
            if tool == FINAL {
                let value = step.get("answer").cloned().unwrap_or(Value::Null);
                if let Some(reminder) = self.reminder(
                    subject,
                    message,
                    &value,
                    &tool_calls,
                    tools_allowed,
                    &mut reminded,
                ) {
                    messages.push(Message::assistant(response.content.trim().to_string()));
                    messages.push(Message::user(reminder));
                    continue;
                }
                return Ok(Answer { value, tool_calls });
            }
            if !tools_allowed {
                return Err(RespondError::Unreadable(clip(&response.content)));
            }
            let arguments = step.get("arguments").cloned().unwrap_or_else(|| json!({}));
            let result = self.call(context, tool, arguments.clone()).await;
            tracing::info!(tool, ok = result.is_ok(), "tool call");
            let feedback = match &result {
                Ok(value) => format!(
                    "Result of {tool}: {}",
                    clip_to(&value.to_string(), self.config.max_tool_result_chars)
                ),
                Err(error) => error.feedback(),
            };
            let result = result.map_err(|error| error.to_string());
            messages.push(Message::assistant(response.content.trim().to_string()));
            messages.push(Message::user(feedback));
            tool_calls.push(ToolCall {
                tool: tool.to_string(),
                arguments,
                result,
            });
        }
    }

    /// The tool loop over the endpoint's native tool calling: tools are
    /// offered as OpenAI `tools`; a reply without tool calls is the answer.
    async fn respond_native(
        &self,
        context: &QueryContext,
        subject: Subject<'_>,
        mut messages: Vec<Message>,
    ) -> Result<Answer, RespondError> {
        let definitions: Vec<ToolDefinition> = self
            .focus
            .tools
            .iter()
            .map(|spec| ToolDefinition {
                name: spec.name.clone(),
                description: spec.description.clone(),
                parameters: spec.parameters.clone(),
            })
            .collect();
        let mut tool_calls = Vec::new();
        loop {
            let tools_allowed = tool_calls.len() < self.config.max_tool_calls;
            let mut request =
                ChatRequest::new(messages.clone()).max_tokens(self.config.max_step_tokens);
            if tools_allowed {
                request = request.tools(definitions.clone());
            } else {
                messages.push(Message::user(
                    "No more tool calls are allowed. Give your final answer now.",
                ));
                request =
                    ChatRequest::new(messages.clone()).max_tokens(self.config.max_step_tokens);
            }
            let response = self
                .accountant
                .chat(Category::Conversation, context, &request)
                .await?;
            let Some(call) = response.tool_calls.first().filter(|_| tools_allowed) else {
                let text = response.content.trim().to_string();
                let value = match subject {
                    Subject::Natural => Value::String(text),
                    Subject::Protocol(_) => {
                        serde_json::from_str(&text).unwrap_or(Value::String(text))
                    }
                };
                return Ok(Answer { value, tool_calls });
            };
            let result = self.call(context, &call.name, call.arguments.clone()).await;
            tracing::info!(tool = %call.name, ok = result.is_ok(), "native tool call");
            let feedback = match &result {
                Ok(value) => format!(
                    "Result of {}: {}",
                    call.name,
                    clip_to(&value.to_string(), self.config.max_tool_result_chars)
                ),
                Err(error) => error.feedback(),
            };
            let result = result.map_err(|error| error.to_string());
            messages.push(Message::assistant(
                json!({"tool": call.name, "arguments": call.arguments}).to_string(),
            ));
            messages.push(Message::user(feedback));
            tool_calls.push(ToolCall {
                tool: call.name.clone(),
                arguments: call.arguments.clone(),
                result,
            });
        }
    }

    /// What to tell the model when its protocol answer is not ready to send, each kind once per
    /// request (`reminded`): nothing for natural language (its focus is everything, so no rule
    /// is known to apply, and its answer is prose).
    /// - Too early (while tools may be called): the tools its rules name (see
    ///   [`Focus::rule_tools`]) that no call has used yet (the committed run's taxi fares had no
    ///   weather or traffic surcharge looked up), or numbers from nowhere with no tool called
    ///   (ski rentals never looked up; forecasts made up).
    /// - In other words: in a JSON exchange, member names the documents never mention (asked
    ///   first: the model renames members of a small answer, and then keeps the names when it
    ///   wraps them, but leaves names inside JSON text alone).
    /// - Out of its envelope: the answer is not in the frame of the request's messages.
    fn reminder(
        &self,
        subject: Subject<'_>,
        message: &str,
        answer: &Value,
        calls: &[ToolCall],
        tools_allowed: bool,
        reminded: &mut Reminded,
    ) -> Option<String> {
        let Subject::Protocol(document) = subject else {
            return None;
        };
        if tools_allowed && !reminded.too_early {
            let unused: Vec<String> = self
                .focus
                .rule_tools
                .iter()
                .filter(|tool| !calls.iter().any(|call| &&call.tool == tool))
                .cloned()
                .collect();
            if !unused.is_empty() {
                reminded.too_early = true;
                return Some(remind(&unused));
            }
            if self.config.check_answers
                && let Some(number) = self.unlooked_number(document, message, answer, calls)
            {
                reminded.too_early = true;
                let tools: Vec<&str> = self.focus.tools.iter().map(|s| s.name.as_str()).collect();
                return Some(format!(
                    "Not yet: {number} in your answer is in no tool result and not in the \
                     request. Look the data up with a tool ({}) first, then give the final \
                     answer with the tool's figures.",
                    tools.join(", ")
                ));
            }
        }
        if self.config.require_effects
            && tools_allowed
            && !reminded.effects
            && claims_done(answer)
            && self.only_read(calls)
        {
            reminded.effects = true;
            return Some(NOT_DONE.to_string());
        }
        if !self.config.check_answers {
            return None;
        }
        let request: Value = serde_json::from_str(message).ok()?;
        if !reminded.members && json_exchange(document, message) {
            let documents = self.documents(document);
            let unknown = crate::envelope::unknown_members(&documents, answer);
            if !unknown.is_empty() {
                reminded.members = true;
                let renames = crate::envelope::suggested_names(&documents, &unknown);
                return Some(format!(
                    "Not yet: the protocol document names no member {}. Write the data under \
                     the document's member names{renames}, as its example reply shows, and give \
                     the whole reply again.",
                    unknown.join(", ")
                ));
            }
        }
        if !reminded.envelope
            && crate::envelope::envelope_of(document.text(), &request).is_some()
            && !crate::envelope::keeps_envelope(&request, answer)
        {
            reminded.envelope = true;
            return Some(format!(
                "Not yet: your answer is not a whole message of the protocol. Its messages have \
                 the members {}, as the protocol document's examples show. Give the final \
                 answer again: the whole reply message, every member filled in as the document \
                 says for a reply to this request.",
                crate::envelope::describe_frame(&request)
            ));
        }
        None
    }

    /// Some tool was called, and every call that succeeded only read ([`only_read`]).
    fn only_read(&self, calls: &[ToolCall]) -> bool {
        only_read(self.tools, calls)
    }

    /// The texts of `document` and the documents it references, as one string to search.
    fn documents(&self, document: &VerifiedDocument) -> String {
        let mut documents = document.text().to_string();
        for referenced in self.references {
            documents.push_str(referenced.text());
        }
        documents
    }

    /// A number in `answer` from nowhere (see `programmer::grounding::unlooked_number`).
    fn unlooked_number(
        &self,
        document: &VerifiedDocument,
        message: &str,
        answer: &Value,
        calls: &[ToolCall],
    ) -> Option<String> {
        let documents = self.documents(document);
        let sources =
            crate::programmer::grounding::Sources::of(message, calls, &documents, self.focus);
        crate::programmer::grounding::unlooked_number(answer, &sources)
    }

    /// Calls a tool on offer (another name is unknown here, even if the node has it), and tells
    /// the request's observer of the call and its result.
    async fn call(
        &self,
        context: &QueryContext,
        tool: &str,
        arguments: Value,
    ) -> Result<Value, crate::tools::ToolError> {
        context.observe(|| Step::ToolCall {
            tool: tool.to_string(),
            arguments: arguments.clone(),
            caller: ToolCaller::Llm,
        });
        let result = if self.focus.tools.iter().any(|spec| spec.name == tool) {
            self.tools.call(tool, arguments).await
        } else {
            Err(crate::tools::ToolError::Unknown(tool.to_string()))
        };
        context.observe(|| Step::ToolResult {
            tool: tool.to_string(),
            result: result.clone().map_err(|error| error.to_string()),
            caller: ToolCaller::Llm,
        });
        result
    }

    fn system_prompt(&self, subject: Subject<'_>) -> String {
        let mut prompt = format!(
            "You are the assistant of an agent in an Agora network of AI agents.\n\
             About this agent: {}\n\n",
            self.focus.description
        );
        match subject {
            Subject::Natural => prompt.push_str(
                "Another agent writes to you in natural language. Answer helpfully and concisely.\n\n",
            ),
            Subject::Protocol(document) => {
                let text: String = document.text().chars().take(MAX_PD_CHARS).collect();
                prompt.push_str(&format!(
                    "Requests to you follow the protocol document below. Your final answer is the \
                     reply body the protocol prescribes, in exactly its format (for a JSON \
                     protocol, the JSON value itself).\n\nProtocol document:\n<<<\n{text}\n>>>\n\n"
                ));
                for referenced in self.references {
                    let text: String = referenced.text().chars().take(MAX_PD_CHARS).collect();
                    prompt.push_str(&format!(
                        "It builds on the protocol document with hash {}:\n<<<\n{text}\n>>>\n\n",
                        referenced.hash().to_hex()
                    ));
                }
            }
        }
        let specs = &self.focus.tools;
        if self.config.native_tools && !specs.is_empty() {
            prompt.push_str(
                "Call the tools you were given when they can supply facts; never invent data a \
                 tool can provide. When you have what you need, reply with the answer itself.",
            );
        } else if specs.is_empty() {
            prompt.push_str(
                "You have no tools. Reply with one JSON object: {\"tool\": \"final_answer\", \"answer\": ...}.",
            );
        } else {
            prompt.push_str(&format!(
                "Tools you can use:\n{}\n\nReply with one JSON object per turn. To use a tool: \
                 {{\"tool\": \"<name>\", \"arguments\": {{...}}}}. When you have the answer: \
                 {{\"tool\": \"final_answer\", \"answer\": ...}}. Take facts from tool results; \
                 never invent data that a tool can provide.",
                catalogue(specs)
            ));
        }
        prompt
    }

    fn step_schema(&self, answer_schema: &Value, tools_allowed: bool) -> Value {
        let final_step = json!({
            "type": "object",
            "properties": {
                "tool": {"type": "string", "enum": [FINAL]},
                "answer": answer_schema,
            },
            "required": ["tool", "answer"],
            "additionalProperties": false
        });
        if !tools_allowed || self.focus.tools.is_empty() {
            return final_step;
        }
        let mut variants: Vec<Value> = self
            .focus
            .tools
            .iter()
            .map(|spec| {
                json!({
                    "type": "object",
                    "properties": {
                        "tool": {"type": "string", "enum": [spec.name]},
                        "arguments": spec.parameters,
                    },
                    "required": ["tool", "arguments"],
                    "additionalProperties": false
                })
            })
            .collect();
        variants.push(final_step);
        json!({"anyOf": variants})
    }
}

/// The reminders already given for one request.
#[derive(Debug, Default)]
struct Reminded {
    /// To call the rules' tools, or to look up numbers from nowhere.
    too_early: bool,
    /// To give the whole message of an envelope protocol.
    envelope: bool,
    /// To use the document's member names.
    members: bool,
    /// To do what the answer says was done.
    effects: bool,
}

/// Whether a protocol answer says the request was done: a top-level `status` of `success`, or a
/// `success` or `done` member that is `true`.
/// Some tool was called, and every call that succeeded is known only to have read
/// ([`crate::tools::Tool::changes_state`]): nothing was done.
pub(crate) fn only_read(tools: &ToolRegistry, calls: &[ToolCall]) -> bool {
    !calls.is_empty()
        && calls
            .iter()
            .filter(|call| call.result.is_ok())
            .all(|call| tools.changes_state(&call.tool, &call.arguments) == Some(false))
}

/// The answer says the request was done: `"status": "success"`, or `success`/`done` true.
pub(crate) fn claims_done(answer: &Value) -> bool {
    let status = answer.get("status").and_then(Value::as_str).map(str::trim);
    status.is_some_and(|s| s.eq_ignore_ascii_case("success"))
        || ["success", "done"]
            .iter()
            .any(|member| answer.get(member) == Some(&Value::Bool(true)))
}

/// The reminder given once when an answer comes before the rules' tools were called.
fn remind(unused: &[String]) -> String {
    format!(
        "Not yet: the rules for this request use {}, and you have not called {}. Call {} \
         first, then give the final answer.",
        unused.join(", "),
        if unused.len() == 1 { "it" } else { "them" },
        if unused.len() == 1 { "it" } else { "them" },
    )
}

/// The weekday of every `YYYY-MM-DD` date in `message`, as a line for the prompt ("" when it has
/// none): a small model asked about a date otherwise guesses the weekday, or uses today's date.
fn dates_named(message: &str) -> String {
    let named: Vec<String> = dates_in(message)
        .into_iter()
        .map(|(text, date)| format!("{text} is a {:?}", date.weekday()))
        .collect();
    if named.is_empty() {
        String::new()
    } else {
        format!("\n\nDates in the request: {}.", named.join("; "))
    }
}

/// The calendar dates written `YYYY-MM-DD` in `text` (not inside a longer run of digits), in
/// order, each once, with their text.
pub(crate) fn dates_in(text: &str) -> Vec<(&str, jiff::civil::Date)> {
    let mut dates: Vec<(&str, jiff::civil::Date)> = Vec::new();
    let bytes = text.as_bytes();
    for start in 0..bytes.len().saturating_sub(9) {
        let Some(candidate) = text.get(start..start + 10) else {
            continue;
        };
        let boundary = |at: usize| bytes.get(at).is_none_or(|b| !b.is_ascii_digit());
        let shaped = candidate.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
        if !shaped || (start > 0 && !boundary(start - 1)) || !boundary(start + 10) {
            continue;
        }
        if let Ok(date) = candidate.parse::<jiff::civil::Date>()
            && !dates.iter().any(|(seen, _)| *seen == candidate)
        {
            dates.push((candidate, date));
        }
    }
    dates
}

fn clip(text: &str) -> String {
    clip_to(text, 200)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_in_a_request_are_named_with_their_weekday() {
        assert_eq!(
            dates_named(r#"{"date": "2024-01-05", "end": "2024-01-08", "again": "2024-01-05"}"#),
            "\n\nDates in the request: 2024-01-05 is a Friday; 2024-01-08 is a Monday."
        );
        assert_eq!(
            dates_named("no date, 12024-01-05, 2024-13-01, 2024-02-30"),
            ""
        );
    }

    #[test]
    fn a_document_that_writes_out_an_object_makes_a_json_exchange() {
        let shapes = VerifiedDocument::from_text(
            "request: {location: string, date: string}, reply: {temperature: number}",
        );
        assert!(json_exchange(&shapes, r#"{"location": "Vienna"}"#));
        assert!(!json_exchange(&shapes, "Weather in Vienna?"));
        let quoted = VerifiedDocument::from_text(r#"Reply with { "open": "yes" | "no" }."#);
        assert!(json_exchange(&quoted, r#"{"date": "2024-01-01"}"#));
        let json = VerifiedDocument::from_text("Send a JSON object, get one back.");
        assert!(json_exchange(&json, r#"{"a": 1}"#));
        let prose = VerifiedDocument::from_text("Ask in English; {braces} are not members.");
        assert!(!json_exchange(&prose, r#"{"a": 1}"#));
    }
}
