//! `Idempotency-Key`: a repeated request gets the stored reply, with no second LLM or tool call.
//!
//! Seed 001's guide asks senders to put an idempotency key on requests with effects, so that a
//! retry after a lost reply does not book twice. A node honours the HTTP header
//! `Idempotency-Key` (1–255 visible ASCII characters) on `POST /` and follow-ups:
//! - the key is claimed in the store before the engine runs, scoped by the client (its token's
//!   name or address), so replicas sharing a PostgreSQL store honour each other's keys;
//! - a repeat with the same content gets the stored status and body, marked
//!   `Idempotency-Replayed: true`;
//! - a repeat while the first is still being answered gets `409 busy` with `Retry-After: 1`;
//! - the same key with other content (method, path and JSON body, hashed) gets
//!   `422 idempotency_key_reused`;
//! - a reply a retry should not get (the node was busy, timed out, or its LLM or store failed)
//!   is not kept: the key is released and the retry is answered afresh;
//! - keys are kept for `edge.idempotency.window_secs`, then purged by the node's sweep.
//!
//! Without the header nothing is stored.
//!
//! A protocol may carry the key in its own messages instead (seed 001's envelope does): a PD
//! declaring `idempotency_key_field: <field>` names the body field, and the node reads it
//! (`Node::admission`, whose `Admission` explains the rules). Such an envelope key is handled as the
//! header is, with two differences: its scope is the client *and the protocol*, and it is matched
//! on the key alone, not the body's content, because a retry of such a message is a new message
//! (its own `message_id` and `timestamp`) with the same key. So any later message with the key
//! gets the first reply, as the guide asks. A header, when present, is used instead.

use agora_protocol::{ErrorCode, Reply, Status};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::app::AppState;
use crate::error::ApiError;

/// The header.
pub const HEADER: &str = "idempotency-key";
/// Marks a replayed reply.
pub const REPLAYED: &str = "idempotency-replayed";

/// A claimed key, to settle once the request is answered.
pub struct Held {
    scope: String,
    key: String,
}

/// What claiming found.
pub enum Claim {
    /// Answer the request; settle the key (if any) afterwards.
    Fresh(Option<Held>),
    /// The stored reply to a repeat.
    Replay(Response),
}

/// An idempotency key a protocol's message carries in its body (see the module docs).
pub struct EnvelopeKey {
    /// The protocol, which scopes the key.
    pub protocol_hash: agora_protocol::ProtocolHash,
    /// The key.
    pub key: String,
}

/// Claims the request's key (its header's, else its envelope's), if it has one.
pub async fn claim(
    state: &AppState,
    headers: &HeaderMap,
    client: &str,
    path: &str,
    body: &Value,
    envelope: Option<EnvelopeKey>,
) -> Result<Claim, ApiError> {
    let settings = &state.edge.settings().idempotency;
    if !settings.enabled {
        return Ok(Claim::Fresh(None));
    }
    let (scope, key, fingerprint) = match (headers.get(HEADER), envelope) {
        (Some(key), _) => {
            let key = key
                .to_str()
                .ok()
                .filter(|k| {
                    !k.is_empty() && k.len() <= 255 && k.bytes().all(|b| b.is_ascii_graphic())
                })
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "Idempotency-Key must be 1 to 255 visible ASCII characters",
                    )
                })?;
            (client.to_string(), key.to_string(), fingerprint(path, body))
        }
        (None, Some(envelope)) => {
            let hash = envelope.protocol_hash.to_hex();
            let scope = format!("{client} protocol {hash}");
            let fingerprint = fingerprint(path, &Value::String(hash));
            (scope, envelope.key, fingerprint)
        }
        (None, None) => return Ok(Claim::Fresh(None)),
    };
    let (scope, key) = (scope.as_str(), key.as_str());
    let now = agora_node::Clock::now_ms(&agora_node::SystemClock);
    let stale = now - 1000 * (state.edge.settings().request_timeout_secs as i64 + 5);
    let store = state.node.store();
    let claimed = store
        .idempotency()
        .claim_idempotency_key(scope, key, &fingerprint, now, stale)
        .await
        .map_err(|error| {
            tracing::error!(%error, "could not claim an idempotency key");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Busy,
                "this node could not check the Idempotency-Key; retry later",
            )
            .retry_after(1)
        })?;
    match claimed {
        agora_store::IdempotencyClaim::Claimed => Ok(Claim::Fresh(Some(Held {
            scope: scope.to_string(),
            key: key.to_string(),
        }))),
        agora_store::IdempotencyClaim::Replay { status, reply } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            let mut response = (
                status,
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                reply,
            )
                .into_response();
            response
                .headers_mut()
                .insert(REPLAYED, HeaderValue::from_static("true"));
            Ok(Claim::Replay(response))
        }
        agora_store::IdempotencyClaim::InProgress => Err(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::Busy,
            "a request with this Idempotency-Key is still being answered; retry shortly",
        )
        .retry_after(1)),
        agora_store::IdempotencyClaim::Mismatch => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::IdempotencyKeyReused,
            "this Idempotency-Key was used for a request with other content",
        )),
    }
}

/// Keeps the reply for repeats, or releases the key when a retry should be answered afresh.
pub async fn settle(state: &AppState, held: Option<Held>, answer: &Result<Reply, ApiError>) {
    let Some(held) = held else {
        return;
    };
    let store = state.node.store();
    let kept = match answer {
        Ok(reply) if worth_keeping(reply) => {
            store
                .idempotency()
                .finish_idempotency_key(&held.scope, &held.key, 200, &reply.to_json().to_string())
                .await
        }
        _ => {
            store
                .idempotency()
                .release_idempotency_key(&held.scope, &held.key)
                .await
        }
    };
    if let Err(error) = kept {
        // A repeat then waits for the claim to go stale, and is answered afresh.
        tracing::error!(%error, "could not settle an idempotency key");
    }
}

/// A reply is kept unless a retry could fare better: the node was busy, timed out, or failed.
fn worth_keeping(reply: &Reply) -> bool {
    reply.status != Status::Failure
        || !matches!(
            reply.code,
            Some(
                ErrorCode::HandlerFailed
                    | ErrorCode::Busy
                    | ErrorCode::Internal
                    | ErrorCode::Timeout
            )
        )
}

fn fingerprint(path: &str, body: &Value) -> String {
    let mut hash = Sha256::new();
    hash.update(b"POST ");
    hash.update(path.as_bytes());
    hash.update(b"\n");
    hash.update(body.to_string().as_bytes());
    hash.finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_failures_are_not_kept() {
        assert!(worth_keeping(&Reply::success(agora_protocol::Body::Text(
            "ok".into()
        ))));
        assert!(worth_keeping(&Reply::failure(ErrorCode::BadRequest, "no")));
        assert!(!worth_keeping(&Reply::failure(
            ErrorCode::HandlerFailed,
            "llm down"
        )));
        assert!(!worth_keeping(&Reply::failure(ErrorCode::Busy, "busy")));
    }

    #[test]
    fn the_fingerprint_covers_path_and_body() {
        let body = serde_json::json!({"a": 1});
        assert_eq!(fingerprint("/", &body), fingerprint("/", &body));
        assert_ne!(
            fingerprint("/", &body),
            fingerprint("/conversations/x", &body)
        );
        assert_ne!(
            fingerprint("/", &body),
            fingerprint("/", &serde_json::json!({"a": 2}))
        );
    }
}
