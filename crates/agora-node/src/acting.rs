//! Code as action: a single-shot protocol request answered by a program the LLM writes.
//!
//! The local 1.5B coder model drives a multi-step JSON tool loop poorly (wrong tools, today's
//! date instead of the requested one, surcharges skipped) but writes short JavaScript well. So,
//! when `responder.code_as_action` is on and the node has a routine engine, the node first asks
//! the model for `handle(body)`: the code that answers this request, and every later request of
//! the protocol, under the node's rules (its focused description), with the focused tools. The
//! node builds it and runs it in the routine sandbox on the request, with the real tools (the
//! granted ones only) and the programmer's limits. The tools are shown as calls, each argument's
//! type, allowed values and description in place of its value (shown the arguments' JSON Schema,
//! the model passed the schema itself as the arguments). A program that fails to build, throws,
//! replies outside the protocol (not a JSON object where the exchange is JSON, or against the
//! document's reply schema), loses a value (a `null` the document never mentions: JavaScript's
//! `NaN`), or, with `responder.check_answers`, leaves the request's envelope or uses member names
//! the document never mentions ([`crate::envelope`]), or, with `responder.require_effects`,
//! says the request was done while its tool calls only read ([`PROGRAM_NOT_DONE`]) gets the error back (with a hint for the JavaScript errors a small model does not
//! understand alone: a tool called as a function, a `const` changed), up to `program_attempts` programs; a program the model repeats
//! starts the conversation over once. When every attempt fails, the tool loop
//! ([`crate::responder`]) answers as before.
//!
//! A program that answered is most of a routine already: the node remembers the last one per
//! protocol until a programmer job takes it, and the job examines it on the kept examples before
//! it asks the model for anything (see `node::programming`). The memory is a hint: it is not
//! stored, and after a restart the programmer starts from the examples alone.
//!
//! The examination cannot catch a program whose own answers are its examples: their
//! correctness is the program's. What the local model gets wrong in its programs, and what code
//! as action changed on the network demo, is in `demo/network/RESULTS.md`.
//!
//! Running a program happens on the request path: its source is evaluated on the JavaScript
//! engine the routine runtime compiled once (nothing is built), small beside the LLM call that
//! wrote it.
//!
//! Not done: trying a program on scratch state first. A failed program's tool calls happened
//! (a database write stays written) before the next program or the tool loop runs.

use std::sync::{Arc, Mutex};

use agora_llm::{ChatRequest, Message};
use agora_protocol::VerifiedDocument;
use serde_json::Value;

use crate::accounting::{Accountant, Category, QueryContext};
use crate::config::ResponderConfig;
use crate::focus::Focus;
use crate::observer::{Observer, Step, ToolCaller};
use crate::programmer::load_program;
use crate::programmer::prompt::{body_and_tool_rules, plain_javascript_and_example};
use crate::programmer::{exam, prompt};
use crate::responder::{Answer, ToolCall};
use crate::routine_table::{GrantedTools, run_within};
use crate::routines::{RoutineEngine, RoutineLimits, ToolHost};
use crate::text::clip_to;
use crate::tools::{ToolRegistry, ToolSpec};

/// What a program is told, with `responder.require_effects`, when its reply says the request
/// was done while every tool call it made only read (the tool loop's [`crate::responder::NOT_DONE`]).
/// The local model's first booking programs looked the table up, found it free and replied
/// `success` without inserting anything.
pub const PROGRAM_NOT_DONE: &str = "Your code's reply says the request was done, but none of \
its tool calls changed anything: they only read. A request to do something is done only by a \
tool call that does it (in a database, a statement that writes it). If the request asks for \
something to be done, make the code do it with a tool call, then reply; if it cannot be done, \
reply that it failed and why.";

/// Characters of a PD shown; longer documents are cut.
const MAX_PD_CHARS: usize = 6000;
/// Characters of one tool result or error shown in a repair.
const MAX_SHOWN_CHARS: usize = 400;

/// The rules up to the reply's: the task, the body and tool rules, doing what the agent's rules
/// say, and where values come from.
macro_rules! rules_head {
    () => {
        concat!(
            "You are an expert JavaScript programmer. You write the code with which an \
agent answers requests of a protocol. Write a function `handle(body)`: the agent runs it on the \
request below and on every later request of the same protocol.\n\
Rules:\n",
            body_and_tool_rules!(),
            "- Do what the agent's rules say, step by step, with the tools they name. Check each condition \
with the tool it names.\n\
- Read every value from the request or from a tool result. Never write a value of this request \
into the code.\n\
"
        )
    };
}

/// The reply's rule and the closing.
macro_rules! rules_tail {
    () => {
        concat!(
            "- Return the reply the protocol prescribes: for a JSON protocol, an object with the reply's \
fields (it is sent as JSON); otherwise a string.\n\
",
            plain_javascript_and_example!()
        )
    };
}

const RULES: &str = concat!(rules_head!(), rules_tail!());

/// A program that answered a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Acted {
    /// The reply and the tool calls the program made.
    pub answer: Answer,
    /// The program.
    pub source: String,
}

/// Why no program answered.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    /// The LLM call failed.
    #[error("the LLM failed: {0}")]
    Llm(#[from] agora_llm::LlmError),
    /// Every program failed; the last failure.
    #[error("no program answered: {0}")]
    NoProgram(String),
}

/// What code as action needs, besides the request.
pub struct Actor<'a> {
    /// The ledger-recording LLM.
    pub accountant: &'a Accountant,
    /// The node's tools; a program may call only the focus's.
    pub tools: &'a ToolRegistry,
    /// The description and tools for this protocol.
    pub focus: &'a Focus,
    /// The routine engine that builds and runs the programs.
    pub engine: &'a dyn RoutineEngine,
    /// A program's running limits.
    pub limits: RoutineLimits,
    /// Attempts and token limits.
    pub config: &'a ResponderConfig,
}

impl Actor<'_> {
    /// Writes a program for `document`'s requests and runs it on `body`.
    pub async fn act(
        &self,
        context: &QueryContext,
        document: &VerifiedDocument,
        body: &str,
    ) -> Result<Acted, ActError> {
        let reply_schema = exam::reply_schema(document.text())
            .and_then(|schema| jsonschema::validator_for(&schema).ok());
        let json_reply = crate::responder::json_exchange(document, body);
        let check = |reply: &str, calls: &[ToolCall]| {
            check_reply(reply, json_reply, reply_schema.as_ref())
                .and_then(|value| no_lost_value(value, document.text()))
                .and_then(|value| {
                    if self.config.check_answers {
                        in_the_documents_terms(value, body, document.text(), json_reply)
                    } else {
                        Ok(value)
                    }
                })
                .and_then(|value| {
                    if self.config.require_effects
                        && crate::responder::claims_done(&value)
                        && crate::responder::only_read(self.tools, calls)
                    {
                        Err(PROGRAM_NOT_DONE.to_string())
                    } else {
                        Ok(value)
                    }
                })
        };
        let first = first_messages(self.focus, document, body);
        self.write_and_run(context, first, body, check).await
    }

    /// Asks for a program with `first`, runs it on `body`, and sends it back with its problem
    /// (a failed run or build, or what `check` says of its reply and tool calls) until one
    /// answers or the attempts run out.
    async fn write_and_run(
        &self,
        context: &QueryContext,
        first: Vec<Message>,
        body: &str,
        check: impl Fn(&str, &[ToolCall]) -> Result<Value, String>,
    ) -> Result<Acted, ActError> {
        let mut messages = first.clone();
        let mut last_problem = String::from("no attempt was allowed");
        let mut tried: Vec<String> = Vec::new();
        let mut started_over = false;
        let attempts = self.config.program_attempts.max(1);
        for attempt in 1..=attempts {
            let request =
                ChatRequest::new(messages.clone()).max_tokens(self.config.max_program_tokens);
            let response = self
                .accountant
                .chat(Category::Conversation, context, &request)
                .await?;
            let source = prompt::extract_code(&response.content);
            if tried.contains(&source) {
                // At temperature 0 the same conversation would repeat it again: start over once
                // from the first request, with the failure explained.
                if started_over || attempt == attempts {
                    return Err(ActError::NoProgram(format!(
                        "the model wrote a failed program again ({last_problem})"
                    )));
                }
                started_over = true;
                messages = start_over(first.clone(), &source, &last_problem);
                continue;
            }
            tried.push(source.clone());
            let recorder = Arc::new(Recorder {
                tools: GrantedTools::new(self.tools.clone(), &self.focus.tool_names()),
                calls: Mutex::new(Vec::new()),
                observer: context.observer(),
            });
            let outcome = self.run(&source, body, recorder.clone()).await;
            let calls = recorder.take();
            let problem = match outcome.and_then(|reply| check(&reply, &calls)) {
                Ok(value) => {
                    tracing::info!(attempt, tools = calls.len(), "a program answered");
                    return Ok(Acted {
                        answer: Answer {
                            value,
                            tool_calls: calls,
                        },
                        source,
                    });
                }
                Err(problem) => problem,
            };
            tracing::info!(attempt, %problem, "a program did not answer");
            tracing::debug!(%source, "the program that did not answer");
            let explained = explained(&problem, &calls, self.focus);
            messages = prompt::repair_messages(messages, &source, &explained);
            last_problem = problem;
        }
        Err(ActError::NoProgram(last_problem))
    }

    /// Builds, loads and runs `source` on `body`; the error is what the model is told.
    async fn run(&self, source: &str, body: &str, tools: Arc<Recorder>) -> Result<String, String> {
        let loaded = load_program(self.engine, source)
            .await
            .map_err(|unbuilt| unbuilt.problem)?;
        run_within(loaded.as_ref(), body, tools, self.limits)
            .await
            .map_err(|error| format!("Running your code on the request failed: {error}"))
    }
}

/// The first request: the rules, then the agent, the protocol, the tools and the request.
fn first_messages(focus: &Focus, document: &VerifiedDocument, body: &str) -> Vec<Message> {
    let text: String = document.text().chars().take(MAX_PD_CHARS).collect();
    let mut user = format!(
        "About this agent: {}\n\nProtocol document:\n<<<\n{}\n>>>\n\n",
        focus.description,
        text.trim()
    );
    if !focus.tools.is_empty() {
        user.push_str(&format!("Tools:\n{}\n\n", calls(&focus.tools)));
    }
    user.push_str(&format!(
        "Request body: {}\n\nWrite handle(body) now.",
        clip_to(body, MAX_PD_CHARS)
    ));
    vec![Message::system(RULES), Message::user(user)]
}

/// The first request again, after the model repeated a failed program in its repair.
fn start_over(mut first: Vec<Message>, source: &str, problem: &str) -> Vec<Message> {
    first.push(Message::assistant(format!("```javascript\n{source}\n```")));
    first.push(Message::user(format!(
        "This code is wrong, and fixing it in place did not work.\n{problem}\nWrite handle(body) \
         again from the start, in a different way: do what the rules say step by step, and give \
         each tool the arguments it takes. Answer with the complete code in one ```javascript \
         block."
    )));
    first
}

/// The tools as the program calls them: a call with each argument's type and description in
/// place of its value, and the result's schema. (Shown the arguments' JSON Schema, the small
/// model passed the schema itself as the arguments.)
fn calls(tools: &[ToolSpec]) -> String {
    tools
        .iter()
        .map(|spec| {
            let mut arguments = serde_json::Map::new();
            if let Some(properties) = spec.parameters.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    let mut shape = property
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("value")
                        .to_string();
                    if let Some(values) = property.get("enum").and_then(Value::as_array) {
                        let values: Vec<String> = values.iter().map(Value::to_string).collect();
                        shape.push_str(&format!(", one of {}", values.join(", ")));
                    }
                    if let Some(description) = property.get("description").and_then(Value::as_str) {
                        shape.push_str(&format!(": {description}"));
                    }
                    let shape = format!("<{shape}>");
                    arguments.insert(name.clone(), Value::String(shape));
                }
            }
            let mut line = format!(
                "- {}: {}\n  call: callTool(\"{}\", {})",
                spec.name,
                spec.description,
                spec.name,
                Value::Object(arguments)
            );
            if let Some(returns) = &spec.returns {
                line.push_str(&format!("\n  returns: {returns}"));
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A failed run explained for the repair: the failure, a hint for the JavaScript errors a small
/// model does not fix alone, and the tool calls the program made.
fn explained(problem: &str, calls: &[ToolCall], focus: &Focus) -> String {
    let mut text = problem.to_string();
    if problem.contains("is read-only") {
        // `const price = 30; price += 6;` came back unchanged after the bare TypeError.
        text.push_str("\nA variable that the code changes must be declared with let, not const.");
    }
    // A small model calls a tool as a function of its own (`currentDate()`), and given only the
    // ReferenceError, writes the same code again.
    for spec in &focus.tools {
        if problem.contains(&format!("ReferenceError: {} is not defined", spec.name)) {
            text.push_str(&format!(
                "\n{0} is a tool: call it as callTool(\"{0}\", {{...}}) with its arguments.",
                spec.name
            ));
        }
    }
    if !calls.is_empty() {
        text.push_str("\nIts tool calls:");
        for call in calls {
            let outcome = match &call.result {
                Ok(value) => format!("returned {}", clip_to(&value.to_string(), MAX_SHOWN_CHARS)),
                Err(error) => format!("failed: {}", clip_to(error, MAX_SHOWN_CHARS)),
            };
            text.push_str(&format!(
                "\ncallTool(\"{}\", {}) {outcome}",
                call.tool, call.arguments
            ));
        }
    }
    text
}

/// The program's reply as the answer's value, or what is wrong with it: a JSON exchange needs
/// a JSON object, valid against the document's reply schema when it has one.
fn check_reply(
    reply: &str,
    json_reply: bool,
    schema: Option<&jsonschema::Validator>,
) -> Result<Value, String> {
    if !json_reply {
        return Ok(match serde_json::from_str::<Value>(reply) {
            Ok(value) if !value.is_string() => value,
            _ => Value::String(reply.to_string()),
        });
    }
    let value = match serde_json::from_str::<Value>(reply) {
        Ok(value @ Value::Object(_)) => value,
        _ => {
            return Err(format!(
                "Your code returned {}, but the protocol's reply is a JSON object: return an \
                 object with the reply's fields.",
                clip_to(reply, MAX_SHOWN_CHARS)
            ));
        }
    };
    if let Some(schema) = schema
        && let Some(error) = schema.iter_errors(&value).next()
    {
        return Err(format!(
            "Your code returned {}, which the protocol's reply format does not allow: {error}.",
            clip_to(reply, MAX_SHOWN_CHARS)
        ));
    }
    Ok(value)
}

/// The reply, unless it leaves the request's envelope or uses member names the document never
/// mentions (the responder's answer checks, `responder.check_answers`; see [`crate::envelope`]).
fn in_the_documents_terms(
    value: Value,
    body: &str,
    document: &str,
    json_reply: bool,
) -> Result<Value, String> {
    if !json_reply {
        return Ok(value);
    }
    if let Ok(request) = serde_json::from_str::<Value>(body)
        && crate::envelope::envelope_of(document, &request).is_some()
        && !crate::envelope::keeps_envelope(&request, &value)
    {
        return Err(format!(
            "Your code returned {}, which is not a whole message of the protocol: its messages \
             have the members {}, as the protocol document's examples show. Return the whole \
             reply message, every member filled in as the document says for a reply.",
            clip_to(&value.to_string(), MAX_SHOWN_CHARS),
            crate::envelope::describe_frame(&request)
        ));
    }
    let unknown = crate::envelope::unknown_members(document, &value);
    if !unknown.is_empty() {
        return Err(format!(
            "Your code returned {}, with members the protocol document never names: {}. \
             Return the data under the document's member names{}.",
            clip_to(&value.to_string(), MAX_SHOWN_CHARS),
            unknown.join(", "),
            crate::envelope::suggested_names(document, &unknown)
        ));
    }
    Ok(value)
}

/// The reply, unless it has a `null` member and the document never speaks of null: JavaScript
/// writes a computation gone wrong (`NaN`, from a missing value) as `null`.
fn no_lost_value(value: Value, document: &str) -> Result<Value, String> {
    if document.to_ascii_lowercase().contains("null") {
        return Ok(value);
    }
    let lost: Vec<&String> = match &value {
        Value::Object(members) => members
            .iter()
            .filter(|(_, member)| member.is_null())
            .map(|(name, _)| name)
            .collect(),
        _ => Vec::new(),
    };
    match lost.first() {
        None => Ok(value),
        Some(name) => Err(format!(
            "Your code returned {value}: \"{name}\" is null, so its value was lost (a \
             computation on a missing value gives NaN, which JSON writes as null). Compute it \
             from the request and the tool results."
        )),
    }
}

/// The granted tools, with every call recorded for the example the answer leaves (and told to
/// the request's observer, if it has one).
struct Recorder {
    tools: GrantedTools,
    calls: Mutex<Vec<ToolCall>>,
    observer: Option<Arc<dyn Observer>>,
}

impl Recorder {
    fn take(&self) -> Vec<ToolCall> {
        match self.calls.lock() {
            Ok(mut calls) => std::mem::take(&mut *calls),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        }
    }
}

#[async_trait::async_trait]
impl ToolHost for Recorder {
    async fn call_tool(&self, name: &str, arguments: &str) -> Result<String, String> {
        let arguments_value: Value = serde_json::from_str(arguments)
            .unwrap_or_else(|_| Value::String(arguments.to_string()));
        if let Some(observer) = &self.observer {
            observer.observe(Step::ToolCall {
                tool: name.to_string(),
                arguments: arguments_value.clone(),
                caller: ToolCaller::Program,
            });
        }
        let result = self.tools.call_tool(name, arguments).await;
        let call = ToolCall {
            tool: name.to_string(),
            arguments: arguments_value,
            result: match &result {
                Ok(text) => Ok(serde_json::from_str(text).unwrap_or(Value::String(text.clone()))),
                Err(error) => Err(error.clone()),
            },
        };
        if let Some(observer) = &self.observer {
            observer.observe(Step::ToolResult {
                tool: name.to_string(),
                result: call.result.clone(),
                caller: ToolCaller::Program,
            });
        }
        match self.calls.lock() {
            Ok(mut calls) => calls.push(call),
            Err(poisoned) => poisoned.into_inner().push(call),
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_exchange_needs_an_object_that_fits_the_reply_schema() {
        let schema = jsonschema::validator_for(&serde_json::json!({
            "type": "object", "required": ["isOpen"],
            "properties": {"isOpen": {"enum": ["yes", "no"]}}
        }))
        .ok();
        assert_eq!(
            check_reply(r#"{"isOpen":"yes"}"#, true, schema.as_ref()),
            Ok(serde_json::json!({"isOpen": "yes"}))
        );
        let prose = check_reply("\"No restaurant\"", true, None).unwrap_err();
        assert!(prose.contains("JSON object"), "{prose}");
        let wrong = check_reply(r#"{"isOpen":"maybe"}"#, true, schema.as_ref()).unwrap_err();
        assert!(wrong.contains("does not allow"), "{wrong}");
        assert_eq!(
            check_reply("sunny", false, None),
            Ok(Value::String("sunny".into()))
        );
    }

    #[test]
    fn a_reply_out_of_the_envelope_or_in_other_words_goes_back_to_the_model() {
        let document = "```json\n{\"header\": {\"type\": \"QUERY\"}, \"body\": \"{}\"}\n```\n\
                        The body: `temperature` (number).";
        let body = r#"{"header": {"type": "QUERY"}, "body": "{}"}"#;
        let payload = serde_json::json!({"temperature": 4.0});
        let problem = in_the_documents_terms(payload, body, document, true).unwrap_err();
        assert!(
            problem.contains("header (an object), body (a string)"),
            "{problem}"
        );
        let misnamed = serde_json::json!({"header": {"type": "RESPONSE"},
            "body": "{\"temperature_c\": 4.0}"});
        let problem = in_the_documents_terms(misnamed, body, document, true).unwrap_err();
        assert!(
            problem.contains("(temperature for temperature_c)"),
            "{problem}"
        );
        let right = serde_json::json!({"header": {"type": "RESPONSE"},
            "body": "{\"temperature\": 4.0}"});
        assert_eq!(
            in_the_documents_terms(right.clone(), body, document, true),
            Ok(right)
        );
    }

    #[test]
    fn a_null_the_document_does_not_allow_is_a_lost_value() {
        let nan = serde_json::json!({"status": "success", "price": null});
        let problem = no_lost_value(nan.clone(), "reply: {status, price: number}").unwrap_err();
        assert!(problem.contains("\"price\" is null"), "{problem}");
        assert_eq!(
            no_lost_value(nan.clone(), "error is null on success"),
            Ok(nan)
        );
    }

    #[test]
    fn tools_are_shown_as_calls() {
        let spec = ToolSpec {
            name: "trafficInfo".into(),
            description: "The traffic.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {
                "time": {"type": "string", "description": "HH:MM"}, "city": {"type": "string", "enum": ["Leeds", "York"]}}}),
            returns: Some(serde_json::json!({"type": "object"})),
        };
        assert_eq!(
            calls(&[spec]),
            "- trafficInfo: The traffic.\n  call: callTool(\"trafficInfo\", \
             {\"time\":\"<string: HH:MM>\",\"city\":\"<string, one of \\\"Leeds\\\", \\\"York\\\">\"})\n  returns: {\"type\":\"object\"}"
        );
    }

    #[test]
    fn a_repair_names_the_failure_and_the_calls() {
        let calls = vec![ToolCall {
            tool: "dayOfTheWeek".into(),
            arguments: serde_json::json!({"date": "2024-07-25"}),
            result: Ok(serde_json::json!({"day": "Thursday"})),
        }];
        let focus = Focus::everything("", Vec::new());
        let text = explained(
            "Running your code on the request failed: boom",
            &calls,
            &focus,
        );
        assert_eq!(
            text,
            "Running your code on the request failed: boom\nIts tool calls:\n\
             callTool(\"dayOfTheWeek\", {\"date\":\"2024-07-25\"}) returned {\"day\":\"Thursday\"}"
        );
        let text = explained("TypeError: 'price' is read-only", &[], &focus);
        assert!(text.contains("declared with let, not const"), "{text}");
    }
}
