//! The request log and the per-protocol usage counters derived from it.
//!
//! Architecture invariant: a request row, its protocol's counters and its conversation are
//! written in one transaction by [`Store::record_request`], so after a crash the counters still
//! equal what the log says and a follow-up never sees a history its request log lacks.
//! The counters are kept in their own table (rather than summed over `requests` on demand) so
//! reading them stays cheap however long the log grows.

use agora_protocol::ProtocolHash;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::conversations::upsert_conversation;
use crate::records::{parse_hash, parse_optional_hash};
use crate::{Conversation, ProtocolUsage, RequestPath, RequestRecord, Store, StoreError};

const USAGE_COLUMNS: &str = "hash, requests, llm, routine, fallback, rejected, failed, \
     llm_prompt_tokens, llm_completion_tokens, llm_cost_usd, last_used";

impl Store {
    /// Records a finished request in one transaction: the request row, its protocol's usage
    /// counters (when it has a protocol), the run of its routine (when one ran: `runs`, and on
    /// failure `failures`, `last_error` and `last_failure_at_ms`; nothing if the routine was
    /// removed meanwhile), and the conversation if given (created, or its messages,
    /// `last_active_ms` and `expires_at_ms` replaced).
    pub async fn record_request(
        &self,
        request: &RequestRecord,
        conversation: Option<&Conversation>,
    ) -> Result<(), StoreError> {
        let _writer = self.writer().await;
        let protocol_hash = request.protocol_hash.map(|hash| hash.to_hex());
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("record_request: begin"))?;
        sqlx::query(
            "INSERT INTO requests (query_id, node, protocol_hash, channel, path, status, llm_calls, \
             prompt_tokens, completion_tokens, cost_usd, latency_ms, created_at, routine_id, \
             routine_error) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        )
        .bind(&request.query_id)
        .bind(&request.node)
        .bind(protocol_hash.clone())
        .bind(&request.channel)
        .bind(request.path.as_str())
        .bind(&request.status)
        .bind(request.llm_calls)
        .bind(request.prompt_tokens)
        .bind(request.completion_tokens)
        .bind(request.cost_usd)
        .bind(request.latency_ms)
        .bind(request.created_at_ms)
        .bind(request.routine_id)
        .bind(request.routine_error.clone())
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("record_request: insert request"))?;

        if let Some(routine_id) = request.routine_id {
            let counted = match &request.routine_error {
                None => {
                    sqlx::query("UPDATE routines SET runs = runs + 1 WHERE id = $1")
                        .bind(routine_id)
                        .execute(&mut *tx)
                        .await
                }
                Some(error) => {
                    sqlx::query(
                        "UPDATE routines SET runs = runs + 1, failures = failures + 1, \
                     last_error = $2, last_failure_at = $3 WHERE id = $1",
                    )
                    .bind(routine_id)
                    .bind(error)
                    .bind(request.created_at_ms)
                    .execute(&mut *tx)
                    .await
                }
            };
            counted.map_err(StoreError::db("record_request: count the routine run"))?;
        }

        if let Some(hash) = protocol_hash {
            let bump = |path: RequestPath| i64::from(request.path == path);
            // `CASE` rather than `max()`/`GREATEST()`, which differ between the dialects.
            sqlx::query(&format!(
                "INSERT INTO protocol_usage ({USAGE_COLUMNS}) \
                 VALUES ($1, 1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                 ON CONFLICT (hash) DO UPDATE SET \
                 requests = protocol_usage.requests + 1, \
                 llm = protocol_usage.llm + excluded.llm, \
                 routine = protocol_usage.routine + excluded.routine, \
                 fallback = protocol_usage.fallback + excluded.fallback, \
                 rejected = protocol_usage.rejected + excluded.rejected, \
                 failed = protocol_usage.failed + excluded.failed, \
                 llm_prompt_tokens = protocol_usage.llm_prompt_tokens + excluded.llm_prompt_tokens, \
                 llm_completion_tokens = \
                     protocol_usage.llm_completion_tokens + excluded.llm_completion_tokens, \
                 llm_cost_usd = protocol_usage.llm_cost_usd + excluded.llm_cost_usd, \
                 last_used = CASE WHEN excluded.last_used > protocol_usage.last_used \
                     THEN excluded.last_used ELSE protocol_usage.last_used END"
            ))
            .bind(hash)
            .bind(bump(RequestPath::Llm))
            .bind(bump(RequestPath::Routine))
            .bind(bump(RequestPath::Fallback))
            .bind(bump(RequestPath::Rejected))
            .bind(bump(RequestPath::Failed))
            .bind(request.prompt_tokens)
            .bind(request.completion_tokens)
            .bind(request.cost_usd)
            .bind(request.created_at_ms)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("record_request: bump usage"))?;
        }

        if let Some(conversation) = conversation {
            upsert_conversation(&mut tx, conversation).await?;
        }
        tx.commit()
            .await
            .map_err(StoreError::db("record_request: commit"))
    }

    /// The usage counters for `hash` (all zero when it was never used).
    pub async fn usage(&self, hash: &ProtocolHash) -> Result<ProtocolUsage, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {USAGE_COLUMNS} FROM protocol_usage WHERE hash = $1"
        ))
        .bind(hash.to_hex())
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::db("usage: select"))?;
        match row {
            Some(row) => usage_from_row(&row).map(|(_, usage)| usage),
            None => Ok(ProtocolUsage::default()),
        }
    }

    /// The usage counters of every protocol ever used, ordered by hash.
    pub async fn usage_all(&self) -> Result<Vec<(ProtocolHash, ProtocolUsage)>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {USAGE_COLUMNS} FROM protocol_usage"))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("usage_all: select"))?;
        let mut usage = rows
            .iter()
            .map(usage_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        // Sorted here rather than in SQL: Postgres may order text by locale, SQLite by bytes.
        usage.sort_by_key(|(hash, _)| *hash);
        Ok(usage)
    }

    /// The latest `limit` requests, newest first (a negative limit means none).
    pub async fn recent_requests(&self, limit: i64) -> Result<Vec<RequestRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT query_id, node, protocol_hash, channel, path, status, llm_calls, \
             prompt_tokens, completion_tokens, cost_usd, latency_ms, created_at, routine_id, \
             routine_error FROM requests ORDER BY created_at DESC, id DESC LIMIT $1",
        )
        .bind(limit.max(0))
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("recent_requests: select"))?;
        rows.iter().map(request_from_row).collect()
    }
}

fn usage_from_row(row: &AnyRow) -> Result<(ProtocolHash, ProtocolUsage), StoreError> {
    let int = |column: &'static str| -> Result<i64, StoreError> {
        row.try_get(column)
            .map_err(StoreError::db("usage: read column"))
    };
    let hash: String = row
        .try_get("hash")
        .map_err(StoreError::db("usage: read column"))?;
    let usage = ProtocolUsage {
        requests: int("requests")?,
        llm: int("llm")?,
        routine: int("routine")?,
        fallback: int("fallback")?,
        rejected: int("rejected")?,
        failed: int("failed")?,
        llm_prompt_tokens: int("llm_prompt_tokens")?,
        llm_completion_tokens: int("llm_completion_tokens")?,
        llm_cost_usd: row
            .try_get("llm_cost_usd")
            .map_err(StoreError::db("usage: read column"))?,
        last_used_ms: int("last_used")?,
    };
    Ok((parse_hash("protocol_usage.hash", &hash)?, usage))
}

fn request_from_row(row: &AnyRow) -> Result<RequestRecord, StoreError> {
    let int = |column: &'static str| -> Result<i64, StoreError> {
        row.try_get(column)
            .map_err(StoreError::db("requests: read column"))
    };
    let text = |column: &'static str| -> Result<String, StoreError> {
        row.try_get(column)
            .map_err(StoreError::db("requests: read column"))
    };
    let protocol_hash: Option<String> = row
        .try_get("protocol_hash")
        .map_err(StoreError::db("requests: read column"))?;
    Ok(RequestRecord {
        query_id: text("query_id")?,
        node: text("node")?,
        protocol_hash: parse_optional_hash("requests.protocol_hash", protocol_hash)?,
        channel: text("channel")?,
        path: RequestPath::from_column("requests.path", &text("path")?)?,
        status: text("status")?,
        llm_calls: int("llm_calls")?,
        prompt_tokens: int("prompt_tokens")?,
        completion_tokens: int("completion_tokens")?,
        cost_usd: row
            .try_get("cost_usd")
            .map_err(StoreError::db("requests: read column"))?,
        latency_ms: int("latency_ms")?,
        created_at_ms: int("created_at")?,
        routine_id: row
            .try_get("routine_id")
            .map_err(StoreError::db("requests: read column"))?,
        routine_error: row
            .try_get("routine_error")
            .map_err(StoreError::db("requests: read column"))?,
    })
}
