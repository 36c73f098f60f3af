//! The sender's memory per (target, task), and the log of its task runs.
//!
//! The memory is what the sender's ladder climbs on: use counts, the protocol in use, the
//! protocols a target refused, whether the target asked to negotiate. It is one row per (target,
//! task), replaced whole by `Store::sender().put_sender_memory`. The log keeps one row per run for
//! `agora stats`.

use agora_protocol::ProtocolHash;
use sqlx::any::AnyRow;

use crate::records::parse_optional_hash;
use crate::sql::{Columns, execute, fetch_all, fetch_optional, from_columns};
use crate::{Store, StoreError};

/// What the sender remembers about one task sent to one target.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SenderMemory {
    /// The receiver's endpoint URL.
    pub target: String,
    /// The task's name.
    pub task: String,
    /// Runs so far.
    pub uses: i64,
    /// The protocol in use, if any.
    pub protocol_hash: Option<ProtocolHash>,
    /// Where the receiver can fetch it.
    pub protocol_sources: Vec<String>,
    /// Whether suitable protocols were looked for since the last change.
    pub explored: bool,
    /// Protocols this target refused.
    pub rejected: Vec<ProtocolHash>,
    /// Whether the target asked to negotiate.
    pub negotiation_requested: bool,
    /// The use count from which negotiating may be tried (again).
    pub next_negotiation_at: i64,
    /// Last change (Unix ms).
    pub updated_at_ms: i64,
}

/// One task run, for the log.
#[derive(Debug, Clone, PartialEq)]
pub struct SenderRun {
    /// The receiver's endpoint URL.
    pub target: String,
    /// The task's name.
    pub task: String,
    /// `natural`, `protocol` or `routine`.
    pub rung: String,
    /// The ladder's steps on the way, comma-separated (`explored`, `negotiated`, ...).
    pub steps: String,
    /// The protocol used, if any.
    pub protocol_hash: Option<ProtocolHash>,
    /// `success`, or what went wrong (`rejected`, `failed`, `invalid_output`, `error`).
    pub outcome: String,
    /// The error, if any.
    pub error: Option<String>,
    /// Sender-side LLM calls.
    pub llm_calls: i64,
    /// Their tokens.
    pub tokens: i64,
    /// Their cost.
    pub cost_usd: f64,
    /// When (Unix ms).
    pub created_at_ms: i64,
}

/// Totals of the log per (target, task, rung).
#[derive(Debug, Clone, PartialEq)]
pub struct SenderTotals {
    /// The receiver's endpoint URL.
    pub target: String,
    /// The task's name.
    pub task: String,
    /// The rung.
    pub rung: String,
    /// Runs.
    pub runs: i64,
    /// Runs that ended in `success`.
    pub successes: i64,
    /// Sender-side LLM calls.
    pub llm_calls: i64,
    /// Their tokens.
    pub tokens: i64,
}

fn hashes_to_json(hashes: &[ProtocolHash]) -> String {
    serde_json::Value::from(hashes.iter().map(|h| h.to_hex()).collect::<Vec<_>>()).to_string()
}

impl SenderRecords<'_> {
    /// The memory of `task` sent to `target`, if it was ever sent there.
    pub async fn sender_memory(
        self,
        target: &str,
        task: &str,
    ) -> Result<Option<SenderMemory>, StoreError> {
        let statement = sqlx::query(
            "SELECT target, task, uses, protocol_hash, protocol_sources, explored, rejected, \
             negotiation_requested, next_negotiation_at, updated_at FROM sender_memory \
             WHERE target = $1 AND task = $2",
        )
        .bind(target)
        .bind(task);
        fetch_optional(
            &self.store.pool,
            statement,
            "sender_memory: select",
            memory_from_row,
        )
        .await
    }

    /// Every memory of `task` (all targets) that has a protocol in use.
    pub async fn sender_protocols_for_task(
        self,
        task: &str,
    ) -> Result<Vec<SenderMemory>, StoreError> {
        let statement = sqlx::query(
            "SELECT target, task, uses, protocol_hash, protocol_sources, explored, rejected, \
             negotiation_requested, next_negotiation_at, updated_at FROM sender_memory \
             WHERE task = $1 AND protocol_hash IS NOT NULL ORDER BY target",
        )
        .bind(task);
        fetch_all(
            &self.store.pool,
            statement,
            "sender_protocols_for_task: select",
            memory_from_row,
        )
        .await
    }

    /// Every memory, ordered by target, then task.
    pub async fn sender_memories(self) -> Result<Vec<SenderMemory>, StoreError> {
        let statement = sqlx::query(
            "SELECT target, task, uses, protocol_hash, protocol_sources, explored, rejected, \
             negotiation_requested, next_negotiation_at, updated_at FROM sender_memory",
        );
        let mut memories = fetch_all(
            &self.store.pool,
            statement,
            "sender_memories: select",
            memory_from_row,
        )
        .await?;
        // Sorted here rather than in SQL: Postgres may order text by locale, SQLite by bytes.
        memories.sort_by(|a, b| (&a.target, &a.task).cmp(&(&b.target, &b.task)));
        Ok(memories)
    }

    /// Stores the memory of a (target, task), replacing what was there.
    pub async fn put_sender_memory(self, memory: &SenderMemory) -> Result<(), StoreError> {
        let _writer = self.store.writer().await;
        let sources = serde_json::Value::from(memory.protocol_sources.clone()).to_string();
        let statement = sqlx::query(
            "INSERT INTO sender_memory (target, task, uses, protocol_hash, protocol_sources, \
             explored, rejected, negotiation_requested, next_negotiation_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (target, task) DO UPDATE SET uses = excluded.uses, \
             protocol_hash = excluded.protocol_hash, protocol_sources = excluded.protocol_sources, \
             explored = excluded.explored, rejected = excluded.rejected, \
             negotiation_requested = excluded.negotiation_requested, \
             next_negotiation_at = excluded.next_negotiation_at, updated_at = excluded.updated_at",
        )
        .bind(&memory.target)
        .bind(&memory.task)
        .bind(memory.uses)
        .bind(memory.protocol_hash.map(|h| h.to_hex()))
        .bind(sources)
        .bind(i64::from(memory.explored))
        .bind(hashes_to_json(&memory.rejected))
        .bind(i64::from(memory.negotiation_requested))
        .bind(memory.next_negotiation_at)
        .bind(memory.updated_at_ms);
        execute(&self.store.pool, statement, "put_sender_memory").await?;
        Ok(())
    }

    /// Appends a task run to the log.
    pub async fn record_sender_run(self, run: &SenderRun) -> Result<(), StoreError> {
        let _writer = self.store.writer().await;
        let statement = sqlx::query(
            "INSERT INTO sender_runs (target, task, rung, steps, protocol_hash, outcome, error, \
             llm_calls, tokens, cost_usd, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(&run.target)
        .bind(&run.task)
        .bind(&run.rung)
        .bind(&run.steps)
        .bind(run.protocol_hash.map(|h| h.to_hex()))
        .bind(&run.outcome)
        .bind(run.error.clone())
        .bind(run.llm_calls)
        .bind(run.tokens)
        .bind(run.cost_usd)
        .bind(run.created_at_ms);
        execute(&self.store.pool, statement, "record_sender_run").await?;
        Ok(())
    }

    /// The log's totals per (target, task, rung), ordered by them.
    pub async fn sender_totals(self) -> Result<Vec<SenderTotals>, StoreError> {
        let statement = sqlx::query(
            "SELECT target, task, rung, CAST(COUNT(*) AS BIGINT) AS runs, \
             CAST(SUM(CASE WHEN outcome = 'success' THEN 1 ELSE 0 END) AS BIGINT) AS successes, \
             CAST(SUM(llm_calls) AS BIGINT) AS llm_calls, CAST(SUM(tokens) AS BIGINT) AS tokens \
             FROM sender_runs GROUP BY target, task, rung ORDER BY target, task, rung",
        );
        fetch_all(&self.store.pool, statement, "sender_totals", |row| {
            let columns = Columns::new(row, "sender_totals: read");
            Ok(from_columns!(columns => SenderTotals {
                target, task, rung, runs, successes, llm_calls, tokens,
            }))
        })
        .await
    }

    /// The log's newest `limit` runs of `task` to `target`, oldest first.
    pub async fn sender_runs(
        self,
        target: &str,
        task: &str,
        limit: i64,
    ) -> Result<Vec<SenderRun>, StoreError> {
        let statement = sqlx::query(
            "SELECT target, task, rung, steps, protocol_hash, outcome, error, llm_calls, tokens, \
             cost_usd, created_at FROM sender_runs WHERE target = $1 AND task = $2 \
             ORDER BY id DESC LIMIT $3",
        )
        .bind(target)
        .bind(task)
        .bind(limit.max(0));
        let mut runs = fetch_all(
            &self.store.pool,
            statement,
            "sender_runs: select",
            run_from_row,
        )
        .await?;
        runs.reverse();
        Ok(runs)
    }
}

fn run_from_row(row: &AnyRow) -> Result<SenderRun, StoreError> {
    let columns = Columns::new(row, "sender_runs: read");
    Ok(from_columns!(columns => SenderRun {
        target, task, rung, steps,
        protocol_hash: parse_optional_hash(
            "sender_runs.protocol_hash",
            columns.get("protocol_hash")?,
        )?,
        outcome, error, llm_calls, tokens, cost_usd,
        created_at_ms: columns.get("created_at")?,
    }))
}

fn memory_from_row(row: &AnyRow) -> Result<SenderMemory, StoreError> {
    let columns = Columns::new(row, "sender_memory: read");
    let hash: Option<String> = columns.get("protocol_hash")?;
    let sources: String = columns.get("protocol_sources")?;
    let rejected: String = columns.get("rejected")?;
    let explored: i64 = columns.get("explored")?;
    let requested: i64 = columns.get("negotiation_requested")?;
    let rejected: Vec<String> = serde_json::from_str(&rejected)
        .map_err(|e| StoreError::corrupt(format!("sender_memory.rejected: {e}")))?;
    Ok(from_columns!(columns => SenderMemory {
        target, task, uses,
        protocol_hash: parse_optional_hash("sender_memory.protocol_hash", hash)?,
        protocol_sources: serde_json::from_str(&sources)
            .map_err(|e| StoreError::corrupt(format!("sender_memory.protocol_sources: {e}")))?,
        explored: explored != 0,
        rejected: rejected
            .iter()
            .map(|h| {
                h.parse()
                    .map_err(|e| StoreError::corrupt(format!("sender_memory.rejected: {e}")))
            })
            .collect::<Result<_, _>>()?,
        negotiation_requested: requested != 0,
        next_negotiation_at,
        updated_at_ms: columns.get("updated_at")?,
    }))
}

/// The sender's memory per (target, task), its runs, its examples and its routines. Reached through [`Store::sender`].
#[derive(Clone, Copy)]
pub struct SenderRecords<'a> {
    pub(crate) store: &'a Store,
}
