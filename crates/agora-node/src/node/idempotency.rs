//! Idempotency keys carried in a protocol's own messages.
//!
//! Seed 001's envelope puts `idempotency_key` in the message body, and a receiver must answer a
//! repeat with its first reply and no second side effect. A routine keeps no state, so the node
//! does it: a PD that declares `idempotency_key_field: <field>` in its front matter
//! ([`Metadata::idempotency_key_field`](agora_protocol::Metadata::idempotency_key_field)) names
//! the top-level field of a JSON body that carries the key, and [`Node::admission`]
//! reads it from a request. The HTTP edge then treats that key as it treats an `Idempotency-Key`
//! header (claimed in the store before the engine runs, replies kept for the window), scoped by
//! the client and the protocol, so it works across replicas and whether a routine or the LLM
//! answers.
//!
//! Only documents already in the store are read: the first request under a document the node has
//! not resolved yet is answered without the check (no request under it can have been answered
//! before, unless by another replica that has by then stored it). Documents never change under
//! their hash, so each one's field is cached in memory after the first read, up to
//! [`MAX_CACHED`] documents.

use agora_protocol::{Body, ProtocolHash, ProtocolRef, Request};
use serde_json::Value;

use super::receiver::Receiver;

/// Documents whose declared field (or lack of one) is kept in memory; past this the cache is
/// emptied and refilled from the store.
pub(super) const MAX_CACHED: usize = 4096;

/// Longest key taken from a body, in bytes; a longer one is not a key.
const MAX_KEY_BYTES: usize = 255;

impl Receiver {
    /// The idempotency key `request` carries in its body, under a protocol that declares
    /// `idempotency_key_field`; `None` for other requests, or when the field is missing, not a
    /// string, empty or longer than 255 bytes.
    pub(crate) async fn idempotency_key_in(&self, request: &Request) -> Option<String> {
        let ProtocolRef::Protocol(hash) = &request.protocol else {
            return None;
        };
        let field = self.idempotency_field(hash).await?;
        let body = match &request.body {
            Body::Json(value) => value.clone(),
            Body::Text(text) => serde_json::from_str::<Value>(text).ok()?,
        };
        body.get(&field)
            .and_then(Value::as_str)
            .filter(|key| !key.is_empty() && key.len() <= MAX_KEY_BYTES)
            .map(str::to_string)
    }

    async fn idempotency_field(&self, hash: &ProtocolHash) -> Option<String> {
        if let Some(field) = self.cached_fields().get(hash) {
            return field.clone();
        }
        let stored = match self.core.store.document(hash).await {
            Ok(stored) => stored?,
            Err(error) => {
                tracing::warn!(%error, protocol_hash = %hash, "could not read a document's idempotency field");
                return None;
            }
        };
        let field = stored
            .document
            .metadata()
            .idempotency_key_field()
            .map(str::to_string);
        let mut cache = self.cached_fields();
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(*hash, field.clone());
        field
    }

    fn cached_fields(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<ProtocolHash, Option<String>>> {
        self.idempotency_fields
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
