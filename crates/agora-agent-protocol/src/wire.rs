//! The Agent Protocol's JSON: run requests in, events and the agent descriptor out.
//!
//! The seed describes its types casually ("will be formalized via JSON Schemas"); this module
//! fixes one reading of them, in the seed's snake_case:
//! - a run request is an object with `type` `ChatRequest` (`input`: string), `CancelRequest`
//!   (`run_id`) or `OperationRequest` (`operation`: a name from `describe`, `input`: any JSON);
//!   without `type`, an `operation` member makes it an operation and an `input` string a chat.
//!   `thread_id` continues a thread; `logging_level` and `request_metadata` are accepted and
//!   ignored;
//! - an event is the seed's base `Event` (`id`, `run_id`, `thread_id`, `agent`, `type`, `role`,
//!   `depth`) with its type's members beside them.

use serde::Serialize;
use serde_json::{Map, Value};

/// Characters of a tool result, an LLM answer or a tool's arguments kept in an event.
pub const MAX_EVENT_TEXT: usize = 4000;

/// What `POST /run` (and `/stream_request`) asks.
#[derive(Debug, Clone, PartialEq)]
pub enum RunRequest {
    /// A chat message, starting a thread or continuing `thread_id`.
    Chat {
        /// The message.
        input: String,
        /// The thread to continue.
        thread_id: Option<String>,
    },
    /// One of the agent's operations (see `describe`).
    Operation {
        /// The operation's name.
        name: String,
        /// Its input: the request body.
        input: Value,
        /// A thread the caller asked to continue (refused: operation runs are single-shot).
        thread_id: Option<String>,
    },
    /// Cancel a run in progress.
    Cancel {
        /// The run.
        run_id: String,
    },
}

/// Why a run request cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RunRequestError {
    /// The body is not a JSON object.
    #[error("a run request is a JSON object")]
    NotAnObject,
    /// A member is missing or of the wrong JSON type.
    #[error("{request} needs {member} as {expected}")]
    Member {
        /// The request type.
        request: &'static str,
        /// The member.
        member: &'static str,
        /// Its JSON type.
        expected: &'static str,
    },
    /// `type` names a request this agent does not take.
    #[error(
        "this agent takes ChatRequest, OperationRequest and CancelRequest, not {0:?} \
         (human-in-the-loop and configure requests are not served)"
    )]
    UnknownType(String),
}

impl RunRequest {
    /// Reads a run request.
    pub fn parse(value: &Value) -> Result<Self, RunRequestError> {
        let object = value.as_object().ok_or(RunRequestError::NotAnObject)?;
        let kind = match object.get("type") {
            None | Some(Value::Null) if object.contains_key("operation") => "OperationRequest",
            None | Some(Value::Null) => "ChatRequest",
            Some(Value::String(kind)) => kind.as_str(),
            Some(_) => {
                return Err(RunRequestError::Member {
                    request: "a run request",
                    member: "type",
                    expected: "a string",
                });
            }
        };
        let thread_id = optional_string(object, "thread_id", "a run request")?;
        match kind {
            "ChatRequest" => Ok(RunRequest::Chat {
                input: string(object, "input", "ChatRequest")?,
                thread_id,
            }),
            "OperationRequest" => {
                let name = string(object, "operation", "OperationRequest")?;
                let input = object
                    .get("input")
                    .cloned()
                    .ok_or(RunRequestError::Member {
                        request: "OperationRequest",
                        member: "input",
                        expected: "any JSON value",
                    })?;
                match (name.as_str(), input) {
                    ("chat", Value::String(input)) => Ok(RunRequest::Chat { input, thread_id }),
                    ("chat", _) => Err(RunRequestError::Member {
                        request: "the chat operation",
                        member: "input",
                        expected: "a string",
                    }),
                    (_, input) => Ok(RunRequest::Operation {
                        name,
                        input,
                        thread_id,
                    }),
                }
            }
            "CancelRequest" => Ok(RunRequest::Cancel {
                run_id: string(object, "run_id", "CancelRequest")?,
            }),
            other => Err(RunRequestError::UnknownType(other.to_string())),
        }
    }
}

fn string(
    object: &Map<String, Value>,
    member: &'static str,
    request: &'static str,
) -> Result<String, RunRequestError> {
    optional_string(object, member, request)?.ok_or(RunRequestError::Member {
        request,
        member,
        expected: "a string",
    })
}

fn optional_string(
    object: &Map<String, Value>,
    member: &'static str,
    request: &'static str,
) -> Result<Option<String>, RunRequestError> {
    match object.get(member) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(RunRequestError::Member {
            request,
            member,
            expected: "a string",
        }),
    }
}

/// Why a run ended (`RunCompleted.finish_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The node answered.
    Success,
    /// The node answered with a failure or a refusal, or could not answer in time.
    Error,
    /// A `CancelRequest` stopped it.
    Canceled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Success => "success",
            FinishReason::Error => "error",
            FinishReason::Canceled => "canceled",
        }
    }
}

/// An event's own members, by type.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum EventKind {
    /// The run was accepted.
    RunStarted,
    /// The chat request the run answers (the user's turn).
    ChatRequest {
        /// The message.
        input: String,
    },
    /// The operation request the run answers.
    OperationRequest {
        /// The operation.
        operation: String,
        /// Its input.
        input: Value,
    },
    /// The node is asking its LLM.
    CompletionCall {
        /// What for, as the node's ledger names it (`conversation`, `checking`...).
        category: &'static str,
    },
    /// The LLM answered (or failed: `error` set, `content` empty).
    CompletionResult {
        /// What for.
        category: &'static str,
        /// The model.
        model: String,
        /// Its answer, clipped to [`MAX_EVENT_TEXT`] characters.
        content: String,
        /// Prompt tokens.
        prompt_tokens: i64,
        /// Completion tokens.
        completion_tokens: i64,
        /// Cost in US dollars at the node's price table.
        cost_usd: f64,
        /// How long the call took, in milliseconds.
        latency_ms: i64,
        /// Why the call failed, if it did.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A tool is called.
    ToolCall {
        /// The tool.
        function_name: String,
        /// Its arguments.
        args: Value,
        /// Who called it: `llm`, `routine` or `program` (an extension).
        caller: &'static str,
    },
    /// A tool returned.
    ToolResult {
        /// The tool.
        function_name: String,
        /// Its value as text, clipped to [`MAX_EVENT_TEXT`] characters.
        text_result: String,
        /// Who called it.
        caller: &'static str,
    },
    /// A tool failed.
    ToolError {
        /// The tool.
        function_name: String,
        /// A sentence; the tool's own words stay in the node's log (they can name internal
        /// addresses).
        content: String,
        /// Who called it.
        caller: &'static str,
    },
    /// The agent's answer.
    TextOutput {
        /// The answer as text.
        content: String,
    },
    /// The run is over; always the last event.
    RunCompleted {
        /// `success`, `error` or `canceled`.
        finish_reason: FinishReason,
        /// The answer as one string (success only).
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<String>,
        /// The answer as JSON, when an operation's reply is JSON (an extension).
        #[serde(skip_serializing_if = "Option::is_none")]
        output: Option<Value>,
        /// Why it failed, as a sentence (error only).
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Events left out because the run reached its cap (an extension; 0 is not shown).
        #[serde(skip_serializing_if = "is_zero")]
        events_dropped: u64,
    },
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl EventKind {
    /// The seed's `role` for the event.
    pub fn role(&self) -> &'static str {
        match self {
            EventKind::RunStarted | EventKind::RunCompleted { .. } => "system",
            EventKind::ChatRequest { .. } | EventKind::OperationRequest { .. } => "user",
            EventKind::ToolResult { .. } | EventKind::ToolError { .. } => "tool",
            EventKind::CompletionCall { .. }
            | EventKind::CompletionResult { .. }
            | EventKind::ToolCall { .. }
            | EventKind::TextOutput { .. } => "assistant",
        }
    }

    /// The type name, as in the JSON and the SSE `event:` line.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::RunStarted => "RunStarted",
            EventKind::ChatRequest { .. } => "ChatRequest",
            EventKind::OperationRequest { .. } => "OperationRequest",
            EventKind::CompletionCall { .. } => "CompletionCall",
            EventKind::CompletionResult { .. } => "CompletionResult",
            EventKind::ToolCall { .. } => "ToolCall",
            EventKind::ToolResult { .. } => "ToolResult",
            EventKind::ToolError { .. } => "ToolError",
            EventKind::TextOutput { .. } => "TextOutput",
            EventKind::RunCompleted { .. } => "RunCompleted",
        }
    }
}

/// One event of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// 1, 2, 3… within the run (`since=0` asks for all of them).
    pub id: u64,
    /// The run.
    pub run_id: String,
    /// The run's thread.
    pub thread_id: String,
    /// The agent's name.
    pub agent: String,
    /// `system`, `user`, `assistant` or `tool`.
    pub role: &'static str,
    /// Always 0: the node does not relay events of agents it calls.
    pub depth: u32,
    /// The type and its members.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// `text` cut to [`MAX_EVENT_TEXT`] characters, with a mark when cut.
pub fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_EVENT_TEXT) {
        Some((end, _)) => format!("{}… (clipped)", &text[..end]),
        None => text.to_string(),
    }
}

/// `value`, or its clipped text when it is longer than [`MAX_EVENT_TEXT`] characters.
pub fn clip_value(value: Value) -> Value {
    let text = value.to_string();
    if text.chars().count() > MAX_EVENT_TEXT {
        Value::String(clip(&text))
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_are_read_with_and_without_a_type() {
        let chat = RunRequest::parse(&json!({"input": "hi", "thread_id": "t"})).expect("chat");
        assert_eq!(
            chat,
            RunRequest::Chat {
                input: "hi".into(),
                thread_id: Some("t".into())
            }
        );
        let op = RunRequest::parse(&json!({"operation": "weather", "input": {"a": 1}}));
        assert!(matches!(op, Ok(RunRequest::Operation { name, .. }) if name == "weather"));
        let chat_op = RunRequest::parse(&json!({"operation": "chat", "input": "hi"}));
        assert!(matches!(chat_op, Ok(RunRequest::Chat { .. })));
        let cancel = RunRequest::parse(&json!({"type": "CancelRequest", "run_id": "r"}));
        assert_eq!(cancel, Ok(RunRequest::Cancel { run_id: "r".into() }));
    }

    #[test]
    fn bad_requests_are_named() {
        for (value, words) in [
            (json!([1]), "JSON object"),
            (json!({"type": "ChatRequest"}), "ChatRequest needs input"),
            (json!({"input": 3}), "ChatRequest needs input as a string"),
            (json!({"type": "ResumeWithInput"}), "\"ResumeWithInput\""),
            (json!({"type": "CancelRequest"}), "run_id"),
            (json!({"operation": "x"}), "OperationRequest needs input"),
            (json!({"input": "x", "thread_id": 4}), "thread_id"),
        ] {
            let error = RunRequest::parse(&value).expect_err("refused");
            assert!(error.to_string().contains(words), "{value}: {error}");
        }
    }

    #[test]
    fn events_flatten_their_type() {
        let event = Event {
            id: 3,
            run_id: "r".into(),
            thread_id: "t".into(),
            agent: "a".into(),
            role: "tool",
            depth: 0,
            kind: EventKind::ToolResult {
                function_name: "f".into(),
                text_result: "ok".into(),
                caller: "llm",
            },
        };
        let value = serde_json::to_value(&event).expect("json");
        assert_eq!(value["type"], "ToolResult");
        assert_eq!(value["function_name"], "f");
        assert_eq!(value["id"], 3);
        assert_eq!(
            clip(&"é".repeat(MAX_EVENT_TEXT + 5)).chars().count(),
            MAX_EVENT_TEXT + 11
        );
    }
}
