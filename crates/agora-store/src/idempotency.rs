//! Idempotency keys: a repeated request with the same key gets the stored reply, once.
//!
//! The HTTP edge claims a key with `Store::idempotency().claim_idempotency_key` before it answers, and
//! stores the reply with `Store::idempotency().finish_idempotency_key` after. The claim is one
//! `INSERT … ON CONFLICT DO NOTHING`, so two replicas (or two connections) racing on the same
//! key cannot both answer it: exactly one insert wins, on SQLite and on PostgreSQL alike. A claim
//! left unfinished by a crash is taken over once it is older than the caller's `stale_before_ms`
//! (the node's request timeout): the first request never got an answer, so answering the repeat
//! loses nothing. A reply the caller does not want kept (a transient failure) is released with
//! `Store::idempotency().release_idempotency_key`, so a retry is answered afresh.

use crate::sql::{execute, fetch_optional};
use crate::{Store, StoreError};

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdempotencyClaim {
    /// The key is new (or its earlier claim was stale): the caller answers, then finishes it.
    Claimed,
    /// The same request was answered before: here is its HTTP status and reply body.
    Replay {
        /// The HTTP status of the stored reply.
        status: u16,
        /// The stored reply body.
        reply: String,
    },
    /// The same request is being answered right now.
    InProgress,
    /// The key was used for a request with other content.
    Mismatch,
}

impl IdempotencyKeys<'_> {
    /// Claims `key` within `scope` (the client) for a request whose content hashes to
    /// `fingerprint`, at `now_ms`. An unfinished claim made before `stale_before_ms` is taken
    /// over; a finished one is replayed until `Store::idempotency().purge_idempotency_keys` removes it.
    pub async fn claim_idempotency_key(
        self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        now_ms: i64,
        stale_before_ms: i64,
    ) -> Result<IdempotencyClaim, StoreError> {
        let _writer = self.store.writer().await;
        let insert = sqlx::query(
            "INSERT INTO idempotency_keys (scope, key, fingerprint, status, reply, created_at) \
             VALUES ($1, $2, $3, NULL, NULL, $4) ON CONFLICT (scope, key) DO NOTHING",
        )
        .bind(scope.to_string())
        .bind(key.to_string())
        .bind(fingerprint.to_string())
        .bind(now_ms);
        if execute(&self.store.pool, insert, "claim_idempotency_key: insert").await? == 1 {
            return Ok(IdempotencyClaim::Claimed);
        }
        let select = sqlx::query(
            "SELECT fingerprint, status, reply, created_at FROM idempotency_keys \
             WHERE scope = $1 AND key = $2",
        )
        .bind(scope.to_string())
        .bind(key.to_string());
        let row = fetch_optional(
            &self.store.pool,
            select,
            "claim_idempotency_key: read",
            |row| {
                let columns = crate::sql::Columns::new(row, "idempotency_keys: read column");
                Ok((
                    columns.get::<String>("fingerprint")?,
                    columns.get::<Option<i64>>("status")?,
                    columns.get::<Option<String>>("reply")?,
                    columns.get::<i64>("created_at")?,
                ))
            },
        )
        .await?;
        let Some((stored, status, reply, created_at_ms)) = row else {
            // Purged between the two statements: nobody holds it now.
            return Ok(IdempotencyClaim::InProgress);
        };
        if stored != fingerprint {
            return Ok(IdempotencyClaim::Mismatch);
        }
        match (status, reply) {
            (Some(status), Some(reply)) => Ok(IdempotencyClaim::Replay {
                status: u16::try_from(status).unwrap_or(500),
                reply,
            }),
            _ if created_at_ms < stale_before_ms => {
                // Take over a claim whose request died with its process; only one taker wins.
                let take = sqlx::query(
                    "UPDATE idempotency_keys SET created_at = $1 \
                     WHERE scope = $2 AND key = $3 AND status IS NULL AND created_at = $4",
                )
                .bind(now_ms)
                .bind(scope.to_string())
                .bind(key.to_string())
                .bind(created_at_ms);
                if execute(&self.store.pool, take, "claim_idempotency_key: take over").await? == 1 {
                    Ok(IdempotencyClaim::Claimed)
                } else {
                    Ok(IdempotencyClaim::InProgress)
                }
            }
            _ => Ok(IdempotencyClaim::InProgress),
        }
    }

    /// Stores the reply to a claimed key, for repeats to get.
    pub async fn finish_idempotency_key(
        self,
        scope: &str,
        key: &str,
        status: u16,
        reply: &str,
    ) -> Result<(), StoreError> {
        let _writer = self.store.writer().await;
        let statement = sqlx::query(
            "UPDATE idempotency_keys SET status = $1, reply = $2 WHERE scope = $3 AND key = $4",
        )
        .bind(i64::from(status))
        .bind(reply.to_string())
        .bind(scope.to_string())
        .bind(key.to_string());
        execute(&self.store.pool, statement, "finish_idempotency_key").await?;
        Ok(())
    }

    /// Forgets a claimed key whose reply is not worth keeping, so a retry is answered afresh.
    pub async fn release_idempotency_key(self, scope: &str, key: &str) -> Result<(), StoreError> {
        let _writer = self.store.writer().await;
        let statement = sqlx::query(
            "DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2 AND status IS NULL",
        )
        .bind(scope.to_string())
        .bind(key.to_string());
        execute(&self.store.pool, statement, "release_idempotency_key").await?;
        Ok(())
    }

    /// Removes the keys claimed before `before_ms`; returns how many.
    pub async fn purge_idempotency_keys(self, before_ms: i64) -> Result<u64, StoreError> {
        let _writer = self.store.writer().await;
        let statement =
            sqlx::query("DELETE FROM idempotency_keys WHERE created_at < $1").bind(before_ms);
        execute(&self.store.pool, statement, "purge_idempotency_keys").await
    }
}

/// Idempotency keys and the replies they hold. Reached through [`Store::idempotency`].
#[derive(Clone, Copy)]
pub struct IdempotencyKeys<'a> {
    pub(crate) store: &'a Store,
}
