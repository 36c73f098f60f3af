//! Suitability decisions: whether this node accepts requests under a protocol.
//!
//! One decision per hash; setting a decision replaces the previous one, whoever made it (the
//! caller decides whether an LLM verdict may override an operator's). Decisions are not tied to a
//! stored document: an operator may allow or block a protocol before the node has fetched it.
//! `allowed` is stored as 0/1 so the `Any` driver reads it the same way on both backends.

use agora_protocol::ProtocolHash;

use crate::sql::{Columns, execute, fetch_optional};
use crate::{Decision, DecisionOrigin, Store, StoreError};

impl Store {
    /// The decision recorded for `hash`, if any.
    pub async fn suitability(&self, hash: &ProtocolHash) -> Result<Option<Decision>, StoreError> {
        let statement = sqlx::query(
            "SELECT allowed, origin, reason, decided_at FROM suitability WHERE hash = $1",
        )
        .bind(hash.to_hex());
        fetch_optional(&self.pool, statement, "suitability: select", |row| {
            let columns = Columns::new(row, "suitability");
            let allowed = match columns.get::<i64>("allowed")? {
                0 => false,
                1 => true,
                other => {
                    return Err(StoreError::corrupt(format!(
                        "suitability.allowed for {hash}: {other} is neither 0 nor 1"
                    )));
                }
            };
            Ok(Decision {
                allowed,
                origin: DecisionOrigin::from_column(
                    "suitability.origin",
                    &columns.get::<String>("origin")?,
                )?,
                reason: columns.get("reason")?,
                decided_at_ms: columns.get("decided_at")?,
            })
        })
        .await
    }

    /// Records the decision for `hash`, replacing any previous one.
    pub async fn set_suitability(
        &self,
        hash: &ProtocolHash,
        decision: &Decision,
    ) -> Result<(), StoreError> {
        let _writer = self.writer().await;
        let statement = sqlx::query(
            "INSERT INTO suitability (hash, allowed, origin, reason, decided_at) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (hash) DO UPDATE SET allowed = excluded.allowed, \
             origin = excluded.origin, reason = excluded.reason, decided_at = excluded.decided_at",
        )
        .bind(hash.to_hex())
        .bind(i64::from(decision.allowed))
        .bind(decision.origin.as_str())
        .bind(&decision.reason)
        .bind(decision.decided_at_ms);
        execute(&self.pool, statement, "set_suitability").await?;
        Ok(())
    }

    /// Forgets the decision for `hash`; true if there was one.
    pub async fn clear_suitability(&self, hash: &ProtocolHash) -> Result<bool, StoreError> {
        let _writer = self.writer().await;
        let statement = sqlx::query("DELETE FROM suitability WHERE hash = $1").bind(hash.to_hex());
        Ok(execute(&self.pool, statement, "clear_suitability").await? > 0)
    }
}
