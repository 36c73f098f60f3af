//! Multiround conversations: the LLM history that lets a follow-up continue where it left off.
//!
//! The history is opaque JSON to the store, kept as TEXT so both backends treat it alike. Expiry
//! is the caller's business: [`Store::conversation`] returns a conversation whatever its
//! `expires_at_ms`, because only the caller knows what time it is;
//! [`Store::purge_expired_conversations`] is the housekeeping that removes the dead ones.
//! A conversation is updated together with its request by `Store::requests().record_request`, so the
//! history and the request log never disagree after a crash.

use crate::records::parse_optional_hash;
use crate::sql::{Columns, execute, fetch_all, fetch_optional};
use crate::{Conversation, ConversationKind, Store, StoreError};

impl Store {
    /// Stores a new conversation; a duplicate id is a [`StoreError::Database`] error.
    pub async fn create_conversation(&self, conversation: &Conversation) -> Result<(), StoreError> {
        let row = ConversationRow::of(conversation)?;
        let _writer = self.writer().await;
        let statement = sqlx::query(
            "INSERT INTO conversations \
             (id, kind, protocol_hash, messages, created_at, last_active, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(row.id)
        .bind(row.kind)
        .bind(row.protocol_hash)
        .bind(row.messages)
        .bind(row.created_at_ms)
        .bind(row.last_active_ms)
        .bind(row.expires_at_ms);
        execute(&self.pool, statement, "create_conversation").await?;
        Ok(())
    }

    /// The conversation with this id, expired or not; `None` if unknown.
    pub async fn conversation(&self, id: &str) -> Result<Option<Conversation>, StoreError> {
        let statement = sqlx::query(
            "SELECT id, kind, protocol_hash, messages, created_at, last_active, expires_at \
             FROM conversations WHERE id = $1",
        )
        .bind(id);
        fetch_optional(
            &self.pool,
            statement,
            "conversation: select",
            conversation_from_row,
        )
        .await
    }

    /// The `limit` conversations active most recently (a negative limit means none), newest
    /// first, expired ones included: the caller compares `expires_at_ms` with its clock.
    pub async fn recent_conversations(&self, limit: i64) -> Result<Vec<Conversation>, StoreError> {
        self.requests().flush_requests().await;
        let statement = sqlx::query(
            "SELECT id, kind, protocol_hash, messages, created_at, last_active, expires_at \
             FROM conversations ORDER BY last_active DESC, id LIMIT $1",
        )
        .bind(limit.max(0));
        fetch_all(
            &self.pool,
            statement,
            "recent_conversations: select",
            conversation_from_row,
        )
        .await
    }

    /// Deletes a conversation; true if it existed.
    pub async fn delete_conversation(&self, id: &str) -> Result<bool, StoreError> {
        let _writer = self.writer().await;
        let statement = sqlx::query("DELETE FROM conversations WHERE id = $1").bind(id);
        Ok(execute(&self.pool, statement, "delete_conversation").await? > 0)
    }

    /// Deletes the conversations that expired at or before `now_ms`; returns how many.
    pub async fn purge_expired_conversations(&self, now_ms: i64) -> Result<u64, StoreError> {
        let _writer = self.writer().await;
        let statement =
            sqlx::query("DELETE FROM conversations WHERE expires_at <= $1").bind(now_ms);
        execute(&self.pool, statement, "purge_expired_conversations").await
    }
}

/// A conversation as its row holds it: the history already serialized, so that it can wait in
/// the request writer's queue (see `requests`) without borrowing the caller's [`Conversation`].
/// The writer creates the conversation, or replaces the history, `last_active` and `expires_at`
/// of the existing one (its id, kind, protocol and creation time stay).
#[derive(Debug, Clone)]
pub(crate) struct ConversationRow {
    pub(crate) id: String,
    pub(crate) kind: &'static str,
    pub(crate) protocol_hash: Option<String>,
    pub(crate) messages: String,
    pub(crate) created_at_ms: i64,
    pub(crate) last_active_ms: i64,
    pub(crate) expires_at_ms: i64,
}

impl ConversationRow {
    pub(crate) fn of(conversation: &Conversation) -> Result<Self, StoreError> {
        // Serializing a `serde_json::Value` cannot fail (its map keys are strings), but the
        // error is still mapped rather than unwrapped.
        let messages = serde_json::to_string(&conversation.messages).map_err(|error| {
            StoreError::Database(format!(
                "conversation {}: messages do not serialize: {error}",
                conversation.id
            ))
        })?;
        Ok(Self {
            id: conversation.id.clone(),
            kind: conversation.kind.as_str(),
            protocol_hash: conversation.protocol_hash.map(|hash| hash.to_hex()),
            messages,
            created_at_ms: conversation.created_at_ms,
            last_active_ms: conversation.last_active_ms,
            expires_at_ms: conversation.expires_at_ms,
        })
    }
}

fn conversation_from_row(row: &sqlx::any::AnyRow) -> Result<Conversation, StoreError> {
    let columns = Columns::new(row, "conversation: read column");
    let id: String = columns.get("id")?;
    let messages = serde_json::from_str(&columns.get::<String>("messages")?).map_err(|error| {
        StoreError::corrupt(format!("conversations.messages for {id:?}: {error}"))
    })?;
    Ok(Conversation {
        kind: ConversationKind::from_column("conversations.kind", &columns.get::<String>("kind")?)?,
        protocol_hash: parse_optional_hash(
            "conversations.protocol_hash",
            columns.get("protocol_hash")?,
        )?,
        messages,
        created_at_ms: columns.get("created_at")?,
        last_active_ms: columns.get("last_active")?,
        expires_at_ms: columns.get("expires_at")?,
        id,
    })
}
