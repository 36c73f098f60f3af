//! The request and reply envelopes.
//!
//! Requests are parsed leniently across dialects: the hash may be hex or
//! base64, `body` may be a string or any JSON value, `protocolSources` may be
//! `null`. Replies are written so that both the formal spec and the Python
//! library understand them: errors carry `status` (`failure` or `rejected`)
//! with both an `error` and a `message` key.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::hash::{HashDialect, ProtocolHash};

/// The name of the negotiation channel, used in place of a hash.
pub const NEGOTIATION_CHANNEL: &str = "negotiation";

/// What a request's `protocolHash` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolRef {
    /// `null`: natural language.
    NaturalLanguage,
    /// `"negotiation"`: the protocol negotiation channel.
    Negotiation,
    /// A protocol document, by hash.
    Protocol(ProtocolHash),
}

/// A request or reply body: a string, or (spec dialect) any JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// A string body, as every dialect allows.
    Text(String),
    /// A structured JSON body (not a string).
    Json(Value),
}

impl Body {
    /// The body as text: strings as they are, JSON values serialized.
    pub fn to_text(&self) -> String {
        match self {
            Body::Text(text) => text.clone(),
            Body::Json(value) => value.to_string(),
        }
    }

    /// Whether the body was sent as structured JSON.
    pub fn is_json(&self) -> bool {
        matches!(self, Body::Json(_))
    }

    fn to_value(&self) -> Value {
        match self {
            Body::Text(text) => Value::String(text.clone()),
            Body::Json(value) => value.clone(),
        }
    }
}

/// A parsed Agora request (`POST /`).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// What the request is about.
    pub protocol: ProtocolRef,
    /// How the sender spelled the hash (hex when there was none).
    pub hash_dialect: HashDialect,
    /// Where the protocol document can be fetched, in the sender's order.
    pub sources: Vec<String>,
    /// The request body.
    pub body: Body,
    /// Whether the sender opens a multiround conversation.
    pub multiround: bool,
}

/// Why a request envelope is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The request is not a JSON object.
    #[error("request must be a JSON object")]
    NotAnObject,
    /// A required key is absent.
    #[error("missing required key {0:?}")]
    MissingKey(&'static str),
    /// A key has the wrong JSON type.
    #[error("key {key:?} must be {expected}")]
    WrongType {
        /// The key.
        key: &'static str,
        /// What was expected.
        expected: &'static str,
    },
    /// The hash is not a hash.
    #[error("{0}")]
    BadHash(String),
}

impl Request {
    /// Parses a request from a JSON value.
    ///
    /// `protocolHash` and `body` are required; `protocolSources` may be absent
    /// or null (treated as no sources); `multiround` defaults to false.
    pub fn from_json(value: &Value) -> Result<Self, WireError> {
        let object = value.as_object().ok_or(WireError::NotAnObject)?;
        let (protocol, hash_dialect) = match object.get("protocolHash") {
            None => return Err(WireError::MissingKey("protocolHash")),
            Some(Value::Null) => (ProtocolRef::NaturalLanguage, HashDialect::Hex),
            Some(Value::String(s)) if s == NEGOTIATION_CHANNEL => {
                (ProtocolRef::Negotiation, HashDialect::Hex)
            }
            Some(Value::String(s)) => {
                let (hash, dialect) = ProtocolHash::parse_with_dialect(s)
                    .map_err(|e| WireError::BadHash(e.to_string()))?;
                (ProtocolRef::Protocol(hash), dialect)
            }
            Some(_) => {
                return Err(WireError::WrongType {
                    key: "protocolHash",
                    expected: "a string or null",
                });
            }
        };
        let sources = match object.get("protocolSources") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(str::to_string)
                        .ok_or(WireError::WrongType {
                            key: "protocolSources",
                            expected: "a list of strings",
                        })
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(WireError::WrongType {
                    key: "protocolSources",
                    expected: "a list of strings",
                });
            }
        };
        let body = parse_body(object)?;
        let multiround = match object.get("multiround") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(WireError::WrongType {
                    key: "multiround",
                    expected: "a boolean",
                });
            }
        };
        Ok(Self {
            protocol,
            hash_dialect,
            sources,
            body,
            multiround,
        })
    }

    /// Serializes the request for sending, with the hash in the given dialect.
    pub fn to_json(&self) -> Value {
        let hash = match self.protocol {
            ProtocolRef::NaturalLanguage => Value::Null,
            ProtocolRef::Negotiation => Value::String(NEGOTIATION_CHANNEL.into()),
            ProtocolRef::Protocol(hash) => Value::String(hash.to_dialect(self.hash_dialect)),
        };
        let mut object = Map::new();
        object.insert("protocolHash".into(), hash);
        let sources = if self.protocol == ProtocolRef::Negotiation && self.sources.is_empty() {
            Value::Null
        } else {
            Value::Array(self.sources.iter().cloned().map(Value::String).collect())
        };
        object.insert("protocolSources".into(), sources);
        object.insert("body".into(), self.body.to_value());
        if self.multiround {
            object.insert("multiround".into(), Value::Bool(true));
        }
        Value::Object(object)
    }
}

fn parse_body(object: &Map<String, Value>) -> Result<Body, WireError> {
    match object.get("body") {
        None => Err(WireError::MissingKey("body")),
        Some(Value::Null) => Err(WireError::WrongType {
            key: "body",
            expected: "a string or a JSON value other than null",
        }),
        Some(Value::String(s)) => Ok(Body::Text(s.clone())),
        Some(other) => Ok(Body::Json(other.clone())),
    }
}

/// A follow-up message in a multiround conversation
/// (`POST /conversations/{id}`). Only `body` is read; the Python library
/// repeats the whole envelope, which is ignored.
#[derive(Debug, Clone, PartialEq)]
pub struct FollowUp {
    /// The message body.
    pub body: Body,
}

impl FollowUp {
    /// Parses a follow-up from a JSON value.
    pub fn from_json(value: &Value) -> Result<Self, WireError> {
        let object = value.as_object().ok_or(WireError::NotAnObject)?;
        Ok(Self {
            body: parse_body(object)?,
        })
    }
}

/// The outcome a reply reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The request was handled; `body` holds the answer.
    Success,
    /// The request could not be handled for a reason outside the protocol.
    Failure,
    /// The receiver will not use the named protocol.
    Rejected,
}

impl Status {
    /// The wire spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Success => "success",
            Status::Failure => "failure",
            Status::Rejected => "rejected",
        }
    }

    /// Reads any dialect's status: `success`, `failure`/`error`, `rejected`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "success" | "ok" => Some(Status::Success),
            "failure" | "error" => Some(Status::Failure),
            "rejected" => Some(Status::Rejected),
            _ => None,
        }
    }
}

/// Machine-readable error codes carried in error replies as `code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The envelope is malformed.
    BadRequest,
    /// The request is larger than the node accepts.
    PayloadTooLarge,
    /// No such conversation (or it expired).
    ConversationNotFound,
    /// The protocol document could not be obtained or verified.
    ProtocolUnavailable,
    /// The receiver will not use this protocol.
    ProtocolRejected,
    /// The receiver's LLM or tools failed.
    HandlerFailed,
    /// The receiver is overloaded, or shutting down; try later.
    Busy,
    /// The client sent more requests than its budget allows; the HTTP reply's `Retry-After`
    /// says when to try again.
    RateLimited,
    /// The request was not answered (or its body not received) within the receiver's time limit.
    Timeout,
    /// An `Idempotency-Key` was used again for a request with other content.
    IdempotencyKeyReused,
    /// The admin credential is missing or wrong.
    Unauthorized,
    /// No such resource.
    NotFound,
    /// Anything else.
    Internal,
}

impl ErrorCode {
    /// The wire spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::ConversationNotFound => "conversation_not_found",
            ErrorCode::ProtocolUnavailable => "protocol_unavailable",
            ErrorCode::ProtocolRejected => "protocol_rejected",
            ErrorCode::HandlerFailed => "handler_failed",
            ErrorCode::Busy => "busy",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Timeout => "timeout",
            ErrorCode::IdempotencyKeyReused => "idempotency_key_reused",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Internal => "internal",
        }
    }
}

/// A reply to a request or follow-up.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The outcome.
    pub status: Status,
    /// The answer (success only).
    pub body: Option<Body>,
    /// The error text (failure and rejection only).
    pub error: Option<String>,
    /// The machine-readable error code (failure and rejection only).
    pub code: Option<ErrorCode>,
    /// The conversation opened by a multiround request.
    pub conversation_id: Option<String>,
    /// When that conversation expires if idle, in Unix seconds.
    pub conversation_expires: Option<i64>,
    /// The receiver asks the sender to negotiate a protocol (`negotiationRequested: true`, an
    /// extension; peers that do not know it ignore it). See [`crate::negotiation`].
    pub negotiation_requested: bool,
}

impl Reply {
    /// A successful reply.
    pub fn success(body: Body) -> Self {
        Self {
            status: Status::Success,
            body: Some(body),
            error: None,
            code: None,
            conversation_id: None,
            conversation_expires: None,
            negotiation_requested: false,
        }
    }

    /// A failure reply.
    pub fn failure(code: ErrorCode, error: impl Into<String>) -> Self {
        Self {
            status: Status::Failure,
            body: None,
            error: Some(error.into()),
            code: Some(code),
            conversation_id: None,
            conversation_expires: None,
            negotiation_requested: false,
        }
    }

    /// A rejection of a protocol.
    pub fn rejected(error: impl Into<String>) -> Self {
        Self {
            status: Status::Rejected,
            body: None,
            error: Some(error.into()),
            code: Some(ErrorCode::ProtocolRejected),
            conversation_id: None,
            conversation_expires: None,
            negotiation_requested: false,
        }
    }

    /// Attaches a conversation id and expiry.
    pub fn with_conversation(mut self, id: String, expires: i64) -> Self {
        self.conversation_id = Some(id);
        self.conversation_expires = Some(expires);
        self
    }

    /// Marks the reply as asking the sender to negotiate a protocol.
    pub fn with_negotiation_request(mut self) -> Self {
        self.negotiation_requested = true;
        self
    }

    /// The wire JSON. Errors carry both `error` (spec) and `message` (Python).
    pub fn to_json(&self) -> Value {
        let mut object = Map::new();
        object.insert("status".into(), Value::String(self.status.as_str().into()));
        if let Some(body) = &self.body {
            object.insert("body".into(), body.to_value());
        }
        if let Some(error) = &self.error {
            object.insert("error".into(), Value::String(error.clone()));
            object.insert("message".into(), Value::String(error.clone()));
        }
        if let Some(code) = self.code {
            object.insert("code".into(), Value::String(code.as_str().into()));
        }
        if let Some(id) = &self.conversation_id {
            object.insert("conversationId".into(), Value::String(id.clone()));
        }
        if let Some(expires) = self.conversation_expires {
            object.insert("conversationExpires".into(), Value::from(expires));
        }
        if self.negotiation_requested {
            object.insert(
                crate::negotiation::NEGOTIATION_REQUESTED_KEY.into(),
                Value::Bool(true),
            );
        }
        Value::Object(object)
    }

    /// Reads a reply in any dialect (`error`+`message`, `failure`+`error`,
    /// bare `rejected`). Returns `None` when `status` is absent or unknown.
    pub fn from_json(value: &Value) -> Option<Self> {
        let object = value.as_object()?;
        let status = Status::parse(object.get("status")?.as_str()?)?;
        let body = match object.get("body") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(Body::Text(s.clone())),
            Some(other) => Some(Body::Json(other.clone())),
        };
        let error = ["error", "message"]
            .iter()
            .find_map(|key| match object.get(*key) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Object(o)) => {
                    o.get("message").and_then(Value::as_str).map(str::to_string)
                }
                _ => None,
            });
        // The Python library reports rejections as a generic error.
        let status = match (&status, &error) {
            (Status::Failure, Some(e)) if e.contains("not suitable for execution") => {
                Status::Rejected
            }
            _ => status,
        };
        Some(Self {
            status,
            body,
            error,
            code: None,
            conversation_id: object
                .get("conversationId")
                .and_then(Value::as_str)
                .map(str::to_string),
            conversation_expires: object.get("conversationExpires").and_then(Value::as_i64),
            negotiation_requested: object
                .get(crate::negotiation::NEGOTIATION_REQUESTED_KEY)
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }
}

/// The `/.wellknown` listing: supported protocol hashes and their sources.
pub type WellKnown = BTreeMap<String, Vec<String>>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_dialect_request() {
        let r = Request::from_json(&json!({
            "protocolHash": "3HQgjbJjDV+v4Dxx8IpTPTlunqs=",
            "protocolSources": ["data:text/plain;charset=utf-8,x"],
            "body": "{\"city\": \"New York\"}"
        }))
        .unwrap();
        assert_eq!(r.hash_dialect, HashDialect::Base64);
        assert!(matches!(r.protocol, ProtocolRef::Protocol(_)));
        assert_eq!(r.body, Body::Text("{\"city\": \"New York\"}".into()));
        assert!(!r.multiround);
        // Serializing keeps the dialect.
        assert_eq!(r.to_json()["protocolHash"], "3HQgjbJjDV+v4Dxx8IpTPTlunqs=");
    }

    #[test]
    fn spec_dialect_request_with_object_body() {
        let r = Request::from_json(&json!({
            "protocolHash": "dc74208db2630d5fafe03c71f08a533d396e9eab",
            "protocolSources": ["https://example.org/pd"],
            "body": {"city": "Paris"},
            "multiround": true
        }))
        .unwrap();
        assert_eq!(r.hash_dialect, HashDialect::Hex);
        assert_eq!(r.body, Body::Json(json!({"city": "Paris"})));
        assert!(r.multiround);
    }

    #[test]
    fn natural_language_and_negotiation() {
        let nl =
            Request::from_json(&json!({"protocolHash": null, "protocolSources": [], "body": "hi"}))
                .unwrap();
        assert_eq!(nl.protocol, ProtocolRef::NaturalLanguage);
        let neg = Request::from_json(&json!({"protocolHash": "negotiation", "protocolSources": null, "body": "hi", "multiround": true})).unwrap();
        assert_eq!(neg.protocol, ProtocolRef::Negotiation);
        assert_eq!(neg.to_json()["protocolSources"], Value::Null);
    }

    #[test]
    fn malformed_requests() {
        assert_eq!(Request::from_json(&json!([])), Err(WireError::NotAnObject));
        assert_eq!(
            Request::from_json(&json!({"body": "x"})),
            Err(WireError::MissingKey("protocolHash"))
        );
        assert_eq!(
            Request::from_json(&json!({"protocolHash": null})),
            Err(WireError::MissingKey("body"))
        );
        assert!(matches!(
            Request::from_json(&json!({"protocolHash": 5, "body": "x"})),
            Err(WireError::WrongType { .. })
        ));
        assert!(matches!(
            Request::from_json(&json!({"protocolHash": "nope", "body": "x"})),
            Err(WireError::BadHash(_))
        ));
        assert!(matches!(
            Request::from_json(&json!({"protocolHash": null, "protocolSources": [1], "body": "x"})),
            Err(WireError::WrongType { .. })
        ));
        assert!(matches!(
            Request::from_json(&json!({"protocolHash": null, "body": null})),
            Err(WireError::WrongType { .. })
        ));
    }

    #[test]
    fn error_reply_speaks_both_dialects() {
        let j = Reply::failure(ErrorCode::BadRequest, "nope").to_json();
        assert_eq!(
            j,
            json!({"status": "failure", "error": "nope", "message": "nope", "code": "bad_request"})
        );
        let r = Reply::rejected("no").to_json();
        assert_eq!(r["status"], "rejected");
    }

    #[test]
    fn reads_python_replies() {
        let r = Reply::from_json(
            &json!({"status": "error", "message": "abc is not suitable for execution"}),
        )
        .unwrap();
        assert_eq!(r.status, Status::Rejected);
        let ok =
            Reply::from_json(&json!({"status": "success", "body": "x", "conversationId": "c"}))
                .unwrap();
        assert_eq!(ok.body, Some(Body::Text("x".into())));
        assert_eq!(ok.conversation_id.as_deref(), Some("c"));
        assert!(Reply::from_json(&json!({"body": "x"})).is_none());
    }
}
