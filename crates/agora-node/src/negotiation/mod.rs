//! Protocol negotiation: two agents' LLMs agree on a protocol document (PD).
//!
//! The sender knows a task (its name, description and input and output JSON Schemas); the
//! receiver knows its own description and tools. They talk over the `negotiation` channel, a
//! multiround conversation, for at most [`NegotiationConfig::max_rounds`] sender turns. Every
//! turn of either side is one schema-constrained LLM call (see [`prompt`]), so a small local
//! model keeps to the format: the sender's turn is `{message, final_protocol}`, where
//! `final_protocol` is `null` or `{name, description, document}`; the receiver's is
//! `{verdict: agree|change, message}`. The node, not the LLM, writes the PD's front matter, so a
//! finished negotiation always yields a PD in the project's front-matter form.
//!
//! A document the sender's LLM drafts is adopted only if it names every field of the task
//! (`sender::fit`).
//!
//! Unlike the Python reference library, the sender then tells the receiver the final PD (an
//! [`agora_protocol::negotiation::FinalProtocol`] message). The receiver checks it against its
//! hash and its shape, stores it, records an allow decision for it (its own negotiation implies
//! that it can serve it; no checker call) and confirms with the hash it stored, which the
//! sender compares with its own. A receiver that does not know the extension (the Python
//! library) answers with words: the sender keeps the PD all the same, and the receiver will
//! meet it, and judge it, on the first request that uses it.
//!
//! Every negotiation LLM call is recorded in the ledger under [`crate::Category::Negotiation`].
//! The sender side is [`crate::Node::negotiate`]; the receiver side runs inside
//! [`crate::Node::handle`] and [`crate::Node::follow_up`]. The HTTP exchange is [`channel`].
//!
//! A receiver also asks for negotiations: after [`NegotiationConfig::receiver_threshold`]
//! natural-language conversations (from any sender) since its last completed negotiation, its
//! natural-language replies carry `negotiationRequested: true`
//! ([`agora_protocol::Reply::negotiation_requested`]). The count is the store's shared counter
//! [`NATURAL_SINCE_NEGOTIATION`], so replicas sharing a store count together and a restart
//! keeps the count.

pub(crate) mod channel;
pub(crate) mod prompt;

use agora_protocol::{ProtocolDocument, ProtocolHash, VerifiedDocument};
use serde::Deserialize;
use serde_json::Value;

pub use crate::config::NegotiationConfig;
use crate::sender::ExchangeError;

/// What a finished negotiation produced (sender side).
#[derive(Debug, Clone, PartialEq)]
pub struct Negotiated {
    /// The agreed protocol document, stored in this node's store.
    pub document: VerifiedDocument,
    /// Sender turns it took, the closing one included.
    pub rounds: u32,
    /// Whether the receiver confirmed that it stored and registered the same document. False
    /// for receivers that do not know the final-protocol message (the Python library).
    pub registered_by_receiver: bool,
}

/// Why a negotiation ended without a protocol.
#[derive(Debug, thiserror::Error)]
pub enum NegotiationError {
    /// The receiver could not be reached, did not answer in time, or answered with something
    /// that is not an Agora reply.
    #[error(transparent)]
    Unanswered(#[from] ExchangeError),
    /// The receiver answered with a failure or a rejection.
    #[error("the receiver refused: {0}")]
    Refused(String),
    /// No final protocol within the round limit.
    #[error("no protocol was agreed within {rounds} rounds")]
    RoundLimit {
        /// The limit.
        rounds: u32,
    },
    /// The sender's LLM gave a final protocol that is not a usable PD.
    #[error("the final protocol document is malformed: {0}")]
    MalformedProtocol(String),
    /// The receiver registered a different document than the sender's.
    #[error("the receiver registered protocol {theirs}, not the agreed {ours}")]
    HashMismatch {
        /// The hash of the sender's document.
        ours: ProtocolHash,
        /// The hash the receiver reported.
        theirs: ProtocolHash,
    },
    /// The sender's LLM failed.
    #[error("the LLM failed: {0}")]
    Llm(#[from] agora_llm::LlmError),
    /// The sender's LLM answered outside its schema.
    #[error("the LLM gave an unreadable negotiation turn: {0}")]
    Unreadable(String),
    /// The store failed.
    #[error("store error: {0}")]
    Store(#[from] agora_store::StoreError),
}

/// The store counter of natural-language conversations answered since the node last completed a
/// negotiation (bumped and reset by every replica sharing the store).
pub(crate) const NATURAL_SINCE_NEGOTIATION: &str = "negotiation.natural_since_last";

/// Whether a natural-language reply should ask to negotiate, `count` conversations after the
/// last negotiation; a `threshold` of 0 never asks.
pub(crate) fn asks_to_negotiate(count: i64, threshold: u64) -> bool {
    threshold > 0 && u64::try_from(count).is_ok_and(|count| count >= threshold)
}

/// A draft final protocol as the sender's LLM wrote it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Draft {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) document: String,
}

/// One sender turn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SenderTurn {
    pub(crate) message: String,
    pub(crate) final_protocol: Option<Draft>,
}

/// One receiver turn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReceiverTurn {
    pub(crate) agrees: bool,
    pub(crate) message: String,
}

/// Reads a turn's JSON and its trimmed `message`, which every turn has; the error quotes the start
/// of the content.
fn parse_turn(content: &str) -> Result<(Value, String), String> {
    let value: Value =
        serde_json::from_str(content.trim()).map_err(|e| format!("{e}: {}", clip(content)))?;
    let message = value
        .get("message")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no message in {}", clip(content)))?
        .trim()
        .to_string();
    Ok((value, message))
}

/// Reads a sender turn; the error quotes the start of the content.
pub(crate) fn parse_sender_turn(content: &str) -> Result<SenderTurn, String> {
    let (value, message) = parse_turn(content)?;
    let final_protocol = match value.get("final_protocol") {
        None | Some(Value::Null) => None,
        Some(draft) => Some(
            serde_json::from_value::<Draft>(draft.clone())
                .map_err(|e| format!("final_protocol: {e}: {}", clip(content)))?,
        ),
    };
    Ok(SenderTurn {
        message,
        final_protocol,
    })
}

/// Reads a receiver turn.
pub(crate) fn parse_receiver_turn(content: &str) -> Result<ReceiverTurn, String> {
    let (value, message) = parse_turn(content)?;
    let agrees = value.get("verdict").and_then(Value::as_str) == Some("agree");
    Ok(ReceiverTurn { agrees, message })
}

/// The PD for a draft: front matter written by the node, the body from the LLM. A body that
/// already opens with front matter gives up its metadata to fill empty fields.
pub(crate) fn compose_document(draft: &Draft) -> Result<VerifiedDocument, String> {
    let written = ProtocolDocument::parse(draft.document.trim());
    let pick = |field: &str, fallback: Option<&String>| {
        let field = field.trim();
        if field.is_empty() {
            fallback.map(|s| s.trim().to_string()).unwrap_or_default()
        } else {
            field.to_string()
        }
    };
    let name = pick(&draft.name, written.metadata.name.as_ref());
    let description = pick(&draft.description, written.metadata.description.as_ref());
    let body = written.body.trim();
    if name.is_empty() || name.contains('\n') {
        return Err("it needs a one-line name".into());
    }
    if body.chars().filter(|c| !c.is_whitespace()).count() < 20 {
        return Err(format!(
            "its document is too short to describe a protocol ({} characters)",
            body.len()
        ));
    }
    let description = if description.is_empty() {
        "No description provided".to_string()
    } else {
        description.replace('\n', " ")
    };
    let text = ProtocolDocument::render(&name, &description, false, body);
    let document = VerifiedDocument::from_text(text.trim());
    check_document(&document)?;
    Ok(document)
}

/// What a final PD must have, on either side: front matter with a name, and a body.
pub(crate) fn check_document(document: &VerifiedDocument) -> Result<(), String> {
    let parsed = ProtocolDocument::parse(document.text());
    match parsed.metadata.name.as_deref() {
        Some(name) if !name.trim().is_empty() => {}
        _ => return Err("it has no front matter with a name (`---\\nname: ...\\n---`)".into()),
    }
    if parsed.body.trim().is_empty() {
        return Err("it has no protocol text after its front matter".into());
    }
    Ok(())
}

pub(crate) fn clip(text: &str) -> String {
    text.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(name: &str, document: &str) -> Draft {
        Draft {
            name: name.into(),
            description: "Weather by place and date.".into(),
            document: document.into(),
        }
    }

    #[test]
    fn a_draft_becomes_a_front_matter_pd() {
        let document = compose_document(&draft(
            "WeatherQuery",
            "Request: {\"location\": string, \"date\": \"YYYY-MM-DD\"}. Reply: {\"temperature\": number}.",
        ))
        .unwrap();
        let parsed = ProtocolDocument::parse(document.text());
        assert_eq!(parsed.metadata.name.as_deref(), Some("WeatherQuery"));
        assert!(!parsed.metadata.multiround);
        assert!(document.text().starts_with("---\n"));
        assert_eq!(document.text(), document.text().trim());
    }

    #[test]
    fn front_matter_written_by_the_llm_is_not_doubled() {
        let document = compose_document(&draft(
            "",
            "---\nname: Inner\ndescription: d\n---\n\nRequest: {\"a\": 1}. Reply: {\"b\": 2} always.",
        ))
        .unwrap();
        assert_eq!(document.text().matches("---").count(), 2);
        assert_eq!(
            ProtocolDocument::parse(document.text())
                .metadata
                .name
                .as_deref(),
            Some("Inner")
        );
    }

    #[test]
    fn malformed_drafts_are_refused() {
        assert!(
            compose_document(&draft("", "Request: {\"a\": 1}. Reply: {\"b\": 2} always."))
                .unwrap_err()
                .contains("name")
        );
        assert!(
            compose_document(&draft("X", "tbd"))
                .unwrap_err()
                .contains("too short")
        );
        let bare = VerifiedDocument::from_text("Request: a. Reply: b.");
        assert!(check_document(&bare).is_err());
    }

    #[test]
    fn turns_parse() {
        let turn = parse_sender_turn(r#"{"message": "Hi", "final_protocol": null}"#).unwrap();
        assert_eq!(turn.final_protocol, None);
        let turn = parse_sender_turn(
            r#"{"message": "Done", "final_protocol": {"name": "N", "description": "D", "document": "B"}}"#,
        )
        .unwrap();
        assert_eq!(turn.final_protocol.unwrap().name, "N");
        assert!(parse_sender_turn("hello").is_err());
        let turn = parse_receiver_turn(r#"{"verdict": "agree", "message": "Fine."}"#).unwrap();
        assert!(turn.agrees);
    }

    #[test]
    fn the_signal_fires_at_the_threshold() {
        assert!(!asks_to_negotiate(1, 2));
        assert!(asks_to_negotiate(2, 2));
        assert!(asks_to_negotiate(3, 2));
        assert!(!asks_to_negotiate(5, 0));
        assert!(!asks_to_negotiate(-1, 2));
    }
}
