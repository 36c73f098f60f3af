//! Named counters that every replica of a node shares, such as the natural-language
//! conversations since the node last negotiated (the receiver's cue to ask for a negotiation).
//!
//! A bump is one upsert with `RETURNING`, so two replicas bumping at once get consecutive values
//! and none is lost, on SQLite and on PostgreSQL alike.

use crate::sql::{execute, fetch_optional};
use crate::{Store, StoreError};

impl Store {
    /// Adds one to the counter `name` (created at zero) and returns its new value.
    pub async fn bump_counter(&self, name: &str) -> Result<i64, StoreError> {
        let _writer = self.writer().await;
        let statement = sqlx::query(
            "INSERT INTO node_counters (name, value) VALUES ($1, 1) \
             ON CONFLICT (name) DO UPDATE SET value = node_counters.value + 1 \
             RETURNING value",
        )
        .bind(name.to_string());
        let value = fetch_optional(&self.pool, statement, "bump_counter", |row| {
            crate::sql::Columns::new(row, "node_counters: read column").get::<i64>("value")
        })
        .await?;
        value.ok_or_else(|| StoreError::Database("bump_counter: no row returned".into()))
    }

    /// The counter's value (zero when it was never bumped).
    pub async fn counter(&self, name: &str) -> Result<i64, StoreError> {
        let statement =
            sqlx::query("SELECT value FROM node_counters WHERE name = $1").bind(name.to_string());
        let value = fetch_optional(&self.pool, statement, "counter", |row| {
            crate::sql::Columns::new(row, "node_counters: read column").get::<i64>("value")
        })
        .await?;
        Ok(value.unwrap_or(0))
    }

    /// Sets the counter back to zero.
    pub async fn reset_counter(&self, name: &str) -> Result<(), StoreError> {
        let _writer = self.writer().await;
        let statement = sqlx::query("UPDATE node_counters SET value = 0 WHERE name = $1")
            .bind(name.to_string());
        execute(&self.pool, statement, "reset_counter").await?;
        Ok(())
    }
}
