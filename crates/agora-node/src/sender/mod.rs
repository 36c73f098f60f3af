//! The sender's parts that know nothing of the node: the querier's prompts and the HTTP
//! exchange with a receiver. `node::sending` ties them to the node's LLM and ledger.
//!
//! The querier has two jobs, both LLM calls: turning task data into a request body (a
//! natural-language message, or the body a protocol document prescribes), and reading the reply
//! into the task's output schema. The second is schema-constrained, and its result is validated
//! against the schema with a JSON Schema validator as well: a reply that cannot be read into the
//! schema is a [`SendError::InvalidOutput`], never a silently wrong answer.

pub(crate) mod fit;
pub(crate) mod routine;

use std::time::Duration;

use agora_fetch::{FetchError, TargetClient, TargetRequest, TargetResponse};
use agora_llm::Message;
use agora_protocol::{Body, HashDialect, ProtocolRef, Reply, Request, Status, VerifiedDocument};
use serde_json::Value;

use crate::task::Task;
use crate::text::first_chars;

/// Characters of a protocol document shown to the querier.
const MAX_PD_CHARS: usize = 6000;

/// What a sent task produced.
#[derive(Debug, Clone, PartialEq)]
pub struct SendOutcome {
    /// The output, valid against the task's output schema.
    pub output: Value,
    /// The reply body as received, as text.
    pub reply_body: String,
    /// LLM calls the sender made for this task.
    pub llm_calls: i64,
    /// Their tokens (prompt plus completion).
    pub llm_tokens: i64,
    /// Their cost.
    pub llm_cost_usd: f64,
    /// The receiver asked this sender to negotiate a protocol (`negotiationRequested`).
    pub negotiation_requested: bool,
}

/// Why a task could not be sent or its reply not read.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The node has no task by that name.
    #[error("unknown task {0:?}")]
    UnknownTask(String),
    /// The task's data does not match its input schema.
    #[error("the data does not match the task's input schema: {0}")]
    InvalidInput(String),
    /// The target could not be reached, or did not answer in time.
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
    /// The target answered with something that is not an Agora reply.
    #[error(transparent)]
    BadReply(#[from] BadReply),
    /// The target refused the protocol.
    #[error("the target rejected the request: {0}")]
    Rejected(String),
    /// The target tried and failed.
    #[error("the target failed: {0}")]
    Failed(String),
    /// The reply could not be read into the output schema.
    #[error("the reply does not give the task's output: {0}")]
    InvalidOutput(String),
    /// The sender's LLM failed.
    #[error("the LLM failed: {0}")]
    Llm(#[from] agora_llm::LlmError),
    /// A protocol database search with no database given and none configured.
    #[error("no protocol database is given or configured (sender.protocol_db)")]
    NoProtocolDatabase,
}

impl SendError {
    /// The error as a sentence for the caller of a task run, who may be a stranger: nothing
    /// internal (an LLM's URL, an OS error) is in it.
    pub fn public_message(&self) -> String {
        match self {
            SendError::Unreachable(unreachable) => format!(
                "could not reach {}: the agent did not answer (or not in time)",
                unreachable.target
            ),
            SendError::Llm(_) => "this node's LLM is not available right now".to_string(),
            other => other.to_string(),
        }
    }
}

/// The messages asking the LLM for a natural-language request.
pub(crate) fn compose_natural(task: &Task, data: &Value) -> Vec<Message> {
    vec![
        Message::system(
            "You write messages to other AI agents on behalf of your user. Write one short \
             message that asks the agent to do the task with the given data, and asks for every \
             item the expected answer must contain. Write only the message.",
        ),
        Message::user(format!(
            "Task: {}: {}\nData: {data}\nThe answer must give: {}",
            task.name,
            task.description,
            schema_summary(&task.output_schema)
        )),
    ]
}

/// A natural-language message with every value of `data` in it: when the LLM's message left
/// one out (or rewrote it: "October 5th" for "2023-10-05"), the data follows as JSON.
///
/// Why: the local model's messages often dropped the data the task is about. In the committed
/// run of 2026-11, "Ask the hotel if there is an open restaurant it recommends." carried no
/// date, and the receiver looked up a date of its own; "Please provide the temperature forecast
/// for Vienna on October 5th." lost the year, and the weather server used today's date.
pub(crate) fn with_all_data(message: &str, data: &Value) -> String {
    let text = message.to_lowercase();
    let mut values = Vec::new();
    leaf_values(data, &mut values);
    if values
        .iter()
        .all(|value| text.contains(&value.to_lowercase()))
    {
        return message.to_string();
    }
    format!("{}\n\nThe data: {data}", message.trim_end())
}

/// The strings and numbers in a JSON value, as text.
fn leaf_values(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) if !text.trim().is_empty() => out.push(text.trim().to_string()),
        Value::Number(number) => out.push(number.to_string()),
        Value::Array(items) => items.iter().for_each(|item| leaf_values(item, out)),
        Value::Object(fields) => fields.values().for_each(|item| leaf_values(item, out)),
        _ => {}
    }
}

/// The messages asking the LLM for a request body in a protocol's format.
pub(crate) fn compose_for_protocol(
    task: &Task,
    data: &Value,
    document: &VerifiedDocument,
) -> Vec<Message> {
    let text: String = document.text().chars().take(MAX_PD_CHARS).collect();
    vec![
        Message::system(
            "You write request bodies for a protocol between AI agents. Follow the protocol \
             document exactly and fill the request from the data. Answer with the request body \
             only: no explanation, no code fence.",
        ),
        Message::user(format!(
            "Protocol document:\n<<<\n{}\n>>>\n\nTask: {}: {}\nData: {data}\nWrite the request body.",
            text.trim(),
            task.name,
            task.description
        )),
    ]
}

/// The messages asking the LLM to read a reply into the task's output.
pub(crate) fn read_reply(task: &Task, data: &Value, reply: &str) -> Vec<Message> {
    vec![
        Message::system(
            "You read the reply another AI agent gave to your request and extract the answer \
             your user needs, as JSON in the given schema. Use only facts from the reply; copy \
             numbers exactly.",
        ),
        Message::user(format!(
            "Task: {}: {}\nData sent: {data}\nReply: {reply}",
            task.name, task.description
        )),
    ]
}

/// A short description of an output schema for a prompt: the property names and types.
fn schema_summary(schema: &Value) -> String {
    match schema.get("properties").and_then(Value::as_object) {
        Some(properties) => properties
            .iter()
            .map(|(name, property)| match property.get("type") {
                Some(kind) => format!("{name} ({})", kind.as_str().unwrap_or("value")),
                None => name.clone(),
            })
            .collect::<Vec<_>>()
            .join(", "),
        None => schema.to_string(),
    }
}

/// Removes a code fence the model may have put around a body anyway.
pub(crate) fn unfence(text: &str) -> String {
    let trimmed = text.trim();
    let Some(rest) = trimmed.strip_prefix("```") else {
        return trimmed.to_string();
    };
    let body = rest.split_once('\n').map(|(_, body)| body).unwrap_or("");
    body.trim_end()
        .strip_suffix("```")
        .unwrap_or(body)
        .trim()
        .to_string()
}

/// What a receiver said.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// `success`, with the body as text, and whether the receiver asks to negotiate.
    Success(String, bool),
    /// `rejected`, with the message.
    Rejected(String),
    /// `failure`, with the message.
    Failure(String),
}

/// An Agora target that could not be reached, or did not answer in time.
#[derive(Debug, thiserror::Error)]
#[error("could not reach {target}: {reason}")]
pub struct Unreachable {
    /// The target URL.
    pub target: String,
    /// What went wrong.
    pub reason: String,
}

/// An Agora target that answered with something that is not an Agora reply.
#[derive(Debug, thiserror::Error)]
#[error("{target} gave no Agora reply (HTTP {status}): {detail}")]
pub struct BadReply {
    /// The target URL.
    pub target: String,
    /// The HTTP status.
    pub status: u16,
    /// What was wrong.
    pub detail: String,
}

/// Why an Agora exchange (a request and its reply envelope) gave no reply.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The target could not be reached, or did not answer in time.
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
    /// The target answered with something that is not an Agora reply.
    #[error(transparent)]
    BadReply(#[from] BadReply),
}

impl From<ExchangeError> for SendError {
    fn from(error: ExchangeError) -> Self {
        match error {
            ExchangeError::Unreachable(error) => Self::Unreachable(error),
            ExchangeError::BadReply(error) => Self::BadReply(error),
        }
    }
}

/// Sends one Agora request to `target` and reads the reply envelope, within the request's
/// deadline and size limit. The sender and the negotiation channel both talk to receivers
/// through this.
pub(crate) async fn exchange(request: TargetRequest, target: &str) -> Result<Reply, ExchangeError> {
    let unreachable = |error: FetchError| {
        ExchangeError::Unreachable(Unreachable {
            target: target.to_string(),
            reason: error.to_string(),
        })
    };
    let response = request.send().await.map_err(unreachable)?;
    let status = response.status();
    let bad = |detail: String| {
        ExchangeError::BadReply(BadReply {
            target: target.to_string(),
            status,
            detail,
        })
    };
    let bytes = response.bytes().await.map_err(|error| match error {
        FetchError::TooLarge { limit } => bad(format!("the reply is over {limit} bytes")),
        other => unreachable(other),
    })?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    // `Reply::from_json` reads every dialect: the Python library's `error` + `message` (and its
    // "<hash> is not suitable for execution" as a rejection) as well as `failure` + `error`.
    Reply::from_json(&value).ok_or_else(|| {
        bad(format!(
            "no Agora status in {}",
            first_chars(&value.to_string(), 300)
        ))
    })
}

/// Posts one Agora request and reads the reply envelope.
pub(crate) async fn post(
    targets: &TargetClient,
    target: &str,
    envelope: &Value,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Answer, SendError> {
    let request = targets
        .post(target)
        .json(envelope)
        .timeout(timeout)
        .max_bytes(max_bytes);
    let reply = exchange(request, target).await?;
    let body = reply.body.as_ref().map(Body::to_text);
    let message = || {
        reply
            .error
            .clone()
            .or_else(|| body.clone())
            .unwrap_or_else(|| "no reason given".to_string())
    };
    Ok(match reply.status {
        Status::Success => Answer::Success(
            body.clone().unwrap_or_default(),
            reply.negotiation_requested,
        ),
        Status::Rejected => Answer::Rejected(message()),
        Status::Failure => Answer::Failure(message()),
    })
}

/// Reads a response's body and parses it as JSON; a non-2xx status is an error that shows the
/// start of the body.
async fn read_json(response: TargetResponse) -> Result<Value, String> {
    let status = response.status();
    let success = response.is_success();
    let bytes = response.bytes().await.map_err(|e| e.to_string())?;
    if !success {
        let text = String::from_utf8_lossy(&bytes);
        return Err(format!("HTTP {status}: {}", first_chars(&text, 300)));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("not JSON: {e}"))
}

/// GETs a small JSON document (a `/.wellknown` listing, a protocol database search).
pub(crate) async fn get_json(
    targets: &TargetClient,
    url: &str,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Value, String> {
    let request = targets.get(url).timeout(timeout).max_bytes(max_bytes);
    read_json(request.send().await.map_err(|e| e.to_string())?).await
}

/// POSTs a protocol document to a protocol database; returns the URL it serves it at. The
/// database's answer is read under `max_bytes`, like every reply.
pub(crate) async fn publish(
    targets: &TargetClient,
    database: &str,
    token: Option<&str>,
    text: &str,
    timeout: Duration,
    max_bytes: usize,
) -> Result<String, String> {
    let url = format!("{}/protocols", database.trim_end_matches('/'));
    let mut request = targets
        .post(&url)
        .text(text.to_string())
        .timeout(timeout)
        .max_bytes(max_bytes);
    if let Some(token) = token {
        request = request.bearer(token);
    }
    let response = request.send().await.map_err(|e| e.to_string())?;
    let value = read_json(response)
        .await
        .map_err(|error| format!("{url}: {error}"))?;
    value
        .get("url")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("no url in {value}"))
}

/// The request envelope in the wire's JSON shape. The hash is spelled in base64, as the Python
/// reference library writes and requires it (it compares the hash as a string); receivers that
/// follow this crate read either spelling.
pub(crate) fn envelope(
    protocol: Option<&VerifiedDocument>,
    sources: &[String],
    body: &str,
) -> Value {
    let (protocol, sources) = match protocol {
        Some(document) => (ProtocolRef::Protocol(document.hash()), sources.to_vec()),
        None => (ProtocolRef::NaturalLanguage, Vec::new()),
    };
    Request {
        protocol,
        hash_dialect: HashDialect::Base64,
        sources,
        body: Body::Text(body.to_string()),
        multiround: false,
    }
    .to_json()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fences_are_removed_and_plain_bodies_kept() {
        assert_eq!(unfence("```json\n{\"a\": 1}\n```"), "{\"a\": 1}");
        assert_eq!(unfence("  {\"a\": 1} "), "{\"a\": 1}");
    }

    #[test]
    fn validation_names_the_problem() {
        let schema =
            json!({"type": "object", "properties": {"t": {"type": "number"}}, "required": ["t"]});
        assert!(crate::task::validate(&schema, &json!({"t": 1.5})).is_ok());
        let error = crate::task::validate(&schema, &json!({"t": "warm"})).unwrap_err();
        assert!(error.contains("/t"), "{error}");
    }

    #[test]
    fn envelopes_are_in_the_python_dialect() {
        let document = VerifiedDocument::from_text("---\nname: X\n---\n\nBody.\n");
        let sources = vec!["https://db.test/x".to_string()];
        assert_eq!(
            envelope(Some(&document), &sources, "{\"a\": 1}"),
            json!({
                "protocolHash": document.hash().to_base64(),
                "protocolSources": ["https://db.test/x"],
                "body": "{\"a\": 1}"
            })
        );
        assert_eq!(
            envelope(None, &sources, "Hello?"),
            json!({"protocolHash": null, "protocolSources": [], "body": "Hello?"})
        );
    }

    #[tokio::test]
    async fn publishing_reads_the_databases_answer_under_the_size_limit() {
        let targets = TargetClient::new(agora_fetch::TargetPolicy::default()).unwrap();
        let timeout = Duration::from_secs(5);
        let answer = br#"{"url": "http://db.test/protocols/ab"}"#.to_vec();
        let limit = answer.len();
        let database = crate::test_peer::answering(201, answer).await;
        let url = publish(&targets, &database, None, "PD", timeout, limit).await;
        assert_eq!(url.unwrap(), "http://db.test/protocols/ab");

        let database = crate::test_peer::answering(201, vec![b' '; limit + 1]).await;
        let error = publish(&targets, &database, None, "PD", timeout, limit)
            .await
            .unwrap_err();
        assert_eq!(
            error,
            format!("{database}/protocols: response body exceeds {limit} bytes")
        );
    }

    #[test]
    fn the_natural_prompt_lists_the_output_items() {
        let task = Task {
            name: "weather".into(),
            description: "A forecast.".into(),
            input_schema: json!({"type": "object"}),
            output_schema: json!({"type": "object", "properties": {"temperature": {"type": "number"}}}),
        };
        let messages = compose_natural(&task, &json!({"location": "Oslo"}));
        assert!(messages[1].content.contains("temperature (number)"));
        assert!(messages[1].content.contains("Oslo"));
    }

    #[test]
    fn a_message_that_drops_or_rewrites_data_gets_the_data_appended() {
        let data = json!({"location": "Vienna", "date": "2023-10-05", "people": 2});
        let kept = "Forecast for vienna on 2023-10-05 for 2 people, please.";
        assert_eq!(with_all_data(kept, &data), kept);
        let rewritten = "Please give the forecast for Vienna on October 5th for 2 people.";
        assert_eq!(
            with_all_data(rewritten, &data),
            format!("{rewritten}\n\nThe data: {data}")
        );
        assert_eq!(with_all_data("Menu, please.", &json!({})), "Menu, please.");
    }
}
