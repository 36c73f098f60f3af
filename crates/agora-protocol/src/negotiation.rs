//! The negotiation channel's own messages.
//!
//! A negotiation is a multiround conversation opened with `protocolHash: "negotiation"`. Its
//! turns are plain strings written by the two sides' LLMs, as in the Python reference library,
//! so a Python sender can negotiate with an agora receiver unchanged. This module adds the
//! three machine-readable pieces the Python library lacks; each is an extension that a peer
//! which does not know it can ignore:
//!
//! * [`FinalProtocol`]: the sender's last message, carrying the agreed protocol document and
//!   its hash, so that the receiver can store and register exactly the bytes the sender will
//!   use. It is a string body holding the JSON object
//!   `{"finalProtocol": "<PD text>", "protocolHash": "<40 hex>"}`; a receiver without the
//!   extension reads it as one more (odd) message.
//! * [`Registration`]: the receiver's answer to it, the string body
//!   `{"registeredProtocol": "<40 hex>"}`, naming the hash it stored.
//! * [`NEGOTIATION_REQUESTED_KEY`]: the top-level reply key (`"negotiationRequested": true`)
//!   with which a receiver that has answered many natural-language conversations asks its
//!   senders to negotiate a protocol (read it as [`crate::Reply::negotiation_requested`]).

use serde_json::{Value, json};

use crate::document::{VerifiedDocument, VerifyError};
use crate::hash::ProtocolHash;

/// The reply key by which a receiver asks the sender to negotiate a protocol.
pub const NEGOTIATION_REQUESTED_KEY: &str = "negotiationRequested";

/// The sender's closing message: the agreed protocol document and its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct FinalProtocol {
    /// The agreed document, verified against its hash.
    pub document: VerifiedDocument,
}

/// Why a final-protocol message cannot be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FinalProtocolError {
    /// `protocolHash` is not a hash.
    #[error("the final protocol's hash is not a hash: {0}")]
    BadHash(String),
    /// The document's bytes do not hash to `protocolHash`.
    #[error("the final protocol does not match its hash: {0}")]
    Mismatch(#[from] VerifyError),
}

impl FinalProtocol {
    /// The message body for `document`.
    pub fn to_body(document: &VerifiedDocument) -> String {
        json!({
            "finalProtocol": document.text(),
            "protocolHash": document.hash().to_hex(),
        })
        .to_string()
    }

    /// Reads a negotiation message. `None`: it is an ordinary message, not a final protocol.
    pub fn from_body(body: &str) -> Option<Result<Self, FinalProtocolError>> {
        let value: Value = serde_json::from_str(body.trim()).ok()?;
        let text = value.get("finalProtocol")?.as_str()?;
        let hash = match value.get("protocolHash").and_then(Value::as_str) {
            Some(hash) => match ProtocolHash::parse(hash) {
                Ok(hash) => hash,
                Err(error) => return Some(Err(FinalProtocolError::BadHash(error.to_string()))),
            },
            None => {
                return Some(Err(FinalProtocolError::BadHash(
                    "protocolHash is missing".into(),
                )));
            }
        };
        Some(
            VerifiedDocument::verify(&hash, text.as_bytes())
                .map(|document| Self { document })
                .map_err(FinalProtocolError::from),
        )
    }
}

/// The receiver's confirmation that it stored and registered a final protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    /// The hash of the document the receiver stored.
    pub protocol_hash: ProtocolHash,
}

impl Registration {
    /// The reply body.
    pub fn to_body(&self) -> String {
        json!({"registeredProtocol": self.protocol_hash.to_hex()}).to_string()
    }

    /// Reads a reply body. `None`: not a registration (e.g. a receiver without the extension
    /// answered with its LLM's words).
    pub fn from_body(body: &str) -> Option<Self> {
        let value: Value = serde_json::from_str(body.trim()).ok()?;
        let hash = value.get("registeredProtocol")?.as_str()?;
        ProtocolHash::parse(hash)
            .ok()
            .map(|protocol_hash| Self { protocol_hash })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reply;
    use crate::wire::Body;

    const PD: &str = "---\nname: Echo\ndescription: Echo a word.\nmultiround: false\n---\n\nSend a word; get it back.";

    #[test]
    fn a_final_protocol_round_trips_and_ordinary_messages_are_not_one() {
        let document = VerifiedDocument::from_text(PD);
        let body = FinalProtocol::to_body(&document);
        let read = FinalProtocol::from_body(&body).unwrap().unwrap();
        assert_eq!(read.document, document);
        assert!(FinalProtocol::from_body("I propose a JSON protocol.").is_none());
        assert!(FinalProtocol::from_body(r#"{"location": "Oslo"}"#).is_none());
    }

    #[test]
    fn a_final_protocol_with_the_wrong_hash_is_refused() {
        let other = ProtocolHash::of(b"something else");
        let body = json!({"finalProtocol": PD, "protocolHash": other.to_base64()}).to_string();
        assert!(matches!(
            FinalProtocol::from_body(&body),
            Some(Err(FinalProtocolError::Mismatch(_)))
        ));
        let body = json!({"finalProtocol": PD, "protocolHash": "nope"}).to_string();
        assert!(matches!(
            FinalProtocol::from_body(&body),
            Some(Err(FinalProtocolError::BadHash(_)))
        ));
    }

    #[test]
    fn registrations_round_trip() {
        let registration = Registration {
            protocol_hash: ProtocolHash::of(PD.as_bytes()),
        };
        assert_eq!(
            Registration::from_body(&registration.to_body()),
            Some(registration)
        );
        assert_eq!(Registration::from_body("Sounds good to me."), None);
    }

    #[test]
    fn the_negotiation_request_is_an_optional_reply_key() {
        let reply = Reply::success(Body::Text("hi".into())).with_negotiation_request();
        let json = reply.to_json();
        assert_eq!(json[NEGOTIATION_REQUESTED_KEY], true);
        assert!(Reply::from_json(&json).unwrap().negotiation_requested);
        let plain = Reply::success(Body::Text("hi".into())).to_json();
        assert!(plain.get(NEGOTIATION_REQUESTED_KEY).is_none());
        assert!(!Reply::from_json(&plain).unwrap().negotiation_requested);
    }
}
