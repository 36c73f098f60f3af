//! Leases on work that one replica of a node should do at a time (a programmer job).
//!
//! Replicas sharing a store take a named lease before the work, renew it while working, and drop
//! it after. Taking is one upsert that succeeds only when the lease is free, expired, or already
//! the caller's, so of two replicas racing for the same name exactly one wins, on SQLite and on
//! PostgreSQL alike. A replica killed mid-work stops renewing; once the lease expires, another
//! replica takes the work up.

use crate::sql::execute;
use crate::{Store, StoreError};

impl Store {
    /// Takes the lease `name` for `holder` until `now_ms + ttl_ms`; `false` when another holder
    /// has it and it has not expired.
    pub async fn take_lease(
        &self,
        name: &str,
        holder: &str,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        let _writer = self.writer().await;
        let statement = sqlx::query(
            "INSERT INTO job_leases (name, holder, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             expires_at = excluded.expires_at \
             WHERE job_leases.expires_at < $4 OR job_leases.holder = excluded.holder",
        )
        .bind(name.to_string())
        .bind(holder.to_string())
        .bind(now_ms + ttl_ms)
        .bind(now_ms);
        Ok(execute(&self.pool, statement, "take_lease").await? == 1)
    }

    /// Extends `holder`'s lease `name` to `now_ms + ttl_ms`; `false` when it is no longer held.
    pub async fn renew_lease(
        &self,
        name: &str,
        holder: &str,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        let _writer = self.writer().await;
        let statement =
            sqlx::query("UPDATE job_leases SET expires_at = $1 WHERE name = $2 AND holder = $3")
                .bind(now_ms + ttl_ms)
                .bind(name.to_string())
                .bind(holder.to_string());
        Ok(execute(&self.pool, statement, "renew_lease").await? == 1)
    }

    /// Drops `holder`'s lease `name` (nothing if another holder has it).
    pub async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        let _writer = self.writer().await;
        let statement = sqlx::query("DELETE FROM job_leases WHERE name = $1 AND holder = $2")
            .bind(name.to_string())
            .bind(holder.to_string());
        execute(&self.pool, statement, "release_lease").await?;
        Ok(())
    }
}
