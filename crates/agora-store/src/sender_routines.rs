//! Sender-side routines: the examples they learn from, the routines, and every attempt.
//!
//! Everything here is keyed by [`SenderKey`]: one task sent to one target under one protocol.
//! Examples are the LLM's successful protocol runs (task data, body sent, reply received,
//! validated output), bounded per key like the receiver's examples: adding one prunes the
//! oldest in the same transaction. A routine is stored only after it passed its examination;
//! at most one per key is active (storing one disables the others in the same transaction, and
//! a partial unique index enforces it). Attempts are kept for good, as the audit trail.

use agora_protocol::ProtocolHash;
use serde_json::Value;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::records::parse_hash;
use crate::{Store, StoreError};

const EXAMPLE_COLUMNS: &str =
    "id, target, task, protocol_hash, data, body, reply, output, created_at";
const ROUTINE_COLUMNS: &str = "id, target, task, protocol_hash, source, status, runs, failures, \
     last_error, created_at, updated_at";
const ATTEMPT_COLUMNS: &str = "id, target, task, protocol_hash, job, attempt, reason, source, \
     outcome, report, examples_upto, prompt_tokens, completion_tokens, cost_usd, routine_id, \
     created_at";

/// One task sent to one target under one protocol.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SenderKey {
    /// The receiver's endpoint URL.
    pub target: String,
    /// The task's name.
    pub task: String,
    /// The protocol.
    pub protocol_hash: ProtocolHash,
}

/// A successful protocol run written and read by the LLM.
#[derive(Debug, Clone, PartialEq)]
pub struct SenderExample {
    /// Assigned by the store; grows with time.
    pub id: i64,
    /// What it was a run of.
    pub key: SenderKey,
    /// The task's input data.
    pub data: Value,
    /// The request body sent, as text.
    pub body: String,
    /// The reply body received, as text.
    pub reply: String,
    /// The validated output.
    pub output: Value,
    /// When (Unix ms).
    pub created_at_ms: i64,
}

/// A sender routine that passed its examination (without its component).
#[derive(Debug, Clone, PartialEq)]
pub struct SenderRoutine {
    /// Assigned by the store.
    pub id: i64,
    /// What it serves.
    pub key: SenderKey,
    /// The JavaScript source.
    pub source: String,
    /// Whether it is used (`false`: disabled after run-time failures, or replaced).
    pub active: bool,
    /// Runs so far.
    pub runs: i64,
    /// Failed runs so far (each fell back to the LLM).
    pub failures: i64,
    /// The last failure's error.
    pub last_error: Option<String>,
    /// When it was stored (Unix ms).
    pub created_at_ms: i64,
    /// Last change (Unix ms).
    pub updated_at_ms: i64,
}

/// One candidate sender routine the LLM wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct SenderRoutineAttempt {
    /// Assigned by the store (0 in a new attempt).
    pub id: i64,
    /// What it was written for.
    pub key: SenderKey,
    /// The job it belongs to.
    pub job: String,
    /// 1 for the first candidate of a job, then one more per repair.
    pub attempt: i64,
    /// Why the job started: `threshold` or `failures`.
    pub reason: String,
    /// The candidate's source; `None` when the LLM gave none.
    pub source: Option<String>,
    /// `passed`, `build_failed`, `tests_failed` or `llm_failed`.
    pub outcome: String,
    /// Why, in words.
    pub report: String,
    /// The newest example the job saw.
    pub examples_upto: i64,
    /// Prompt tokens this attempt spent.
    pub prompt_tokens: i64,
    /// Completion tokens this attempt spent.
    pub completion_tokens: i64,
    /// What this attempt cost.
    pub cost_usd: f64,
    /// The routine it became, if it passed.
    pub routine_id: Option<i64>,
    /// When (Unix ms).
    pub created_at_ms: i64,
}

impl Store {
    /// Records a sender example and keeps only the key's newest `keep`; returns its id.
    pub async fn add_sender_example(
        &self,
        example: &SenderExample,
        keep: i64,
    ) -> Result<i64, StoreError> {
        let _writer = self.writer().await;
        let key = &example.key;
        let hash = key.protocol_hash.to_hex();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("add_sender_example: begin"))?;
        let row = sqlx::query(
            "INSERT INTO sender_examples (target, task, protocol_hash, data, body, reply, output, \
             created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        )
        .bind(&key.target)
        .bind(&key.task)
        .bind(&hash)
        .bind(example.data.to_string())
        .bind(&example.body)
        .bind(&example.reply)
        .bind(example.output.to_string())
        .bind(example.created_at_ms)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db("add_sender_example: insert"))?;
        let id: i64 = row
            .try_get("id")
            .map_err(StoreError::db("add_sender_example: id"))?;
        sqlx::query(
            "DELETE FROM sender_examples WHERE target = $1 AND task = $2 AND protocol_hash = $3 \
             AND id NOT IN (SELECT id FROM sender_examples WHERE target = $1 AND task = $2 \
             AND protocol_hash = $3 ORDER BY id DESC LIMIT $4)",
        )
        .bind(&key.target)
        .bind(&key.task)
        .bind(&hash)
        .bind(keep.max(1))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("add_sender_example: prune"))?;
        tx.commit()
            .await
            .map_err(StoreError::db("add_sender_example: commit"))?;
        Ok(id)
    }

    /// The key's newest `limit` examples, oldest first.
    pub async fn sender_examples(
        &self,
        key: &SenderKey,
        limit: i64,
    ) -> Result<Vec<SenderExample>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {EXAMPLE_COLUMNS} FROM sender_examples WHERE target = $1 AND task = $2 \
             AND protocol_hash = $3 ORDER BY id DESC LIMIT $4"
        ))
        .bind(&key.target)
        .bind(&key.task)
        .bind(key.protocol_hash.to_hex())
        .bind(limit.max(0))
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("sender_examples: select"))?;
        let mut examples = rows
            .iter()
            .map(example_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        examples.reverse();
        Ok(examples)
    }

    /// How many of the key's examples are newer than the newest one its last job saw.
    pub async fn sender_examples_since_last_attempt(
        &self,
        key: &SenderKey,
    ) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "SELECT CAST(COUNT(*) AS BIGINT) AS n FROM sender_examples WHERE target = $1 \
             AND task = $2 AND protocol_hash = $3 AND id > \
             (SELECT CAST(COALESCE(MAX(examples_upto), 0) AS BIGINT) FROM sender_routine_attempts \
              WHERE target = $1 AND task = $2 AND protocol_hash = $3)",
        )
        .bind(&key.target)
        .bind(&key.task)
        .bind(key.protocol_hash.to_hex())
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::db("sender_examples_since_last_attempt"))?;
        row.try_get("n")
            .map_err(StoreError::db("sender_examples_since_last_attempt: read"))
    }

    /// Sender routine jobs for `key` since its last attempt that passed (see
    /// [`Store::failed_jobs_since_success`]).
    pub async fn sender_failed_jobs_since_success(
        &self,
        key: &SenderKey,
    ) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "SELECT CAST(COUNT(DISTINCT job) AS BIGINT) AS n FROM sender_routine_attempts \
             WHERE target = $1 AND task = $2 AND protocol_hash = $3 AND id > \
             (SELECT CAST(COALESCE(MAX(id), 0) AS BIGINT) FROM sender_routine_attempts \
              WHERE target = $1 AND task = $2 AND protocol_hash = $3 AND outcome = 'passed')",
        )
        .bind(&key.target)
        .bind(&key.task)
        .bind(key.protocol_hash.to_hex())
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::db("sender_failed_jobs_since_success"))?;
        row.try_get("n")
            .map_err(StoreError::db("sender_failed_jobs_since_success: read"))
    }

    /// Stores a routine that passed, active, disabling the key's other routines; returns its id.
    pub async fn add_sender_routine(
        &self,
        key: &SenderKey,
        source: &str,
        component: &[u8],
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let _writer = self.writer().await;
        let hash = key.protocol_hash.to_hex();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("add_sender_routine: begin"))?;
        sqlx::query(
            "UPDATE sender_routines SET status = 'disabled', updated_at = $4 WHERE target = $1 \
             AND task = $2 AND protocol_hash = $3 AND status = 'active'",
        )
        .bind(&key.target)
        .bind(&key.task)
        .bind(&hash)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("add_sender_routine: disable"))?;
        let row = sqlx::query(
            "INSERT INTO sender_routines (target, task, protocol_hash, source, component, status, \
             runs, failures, last_error, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, 'active', 0, 0, NULL, $6, $6) RETURNING id",
        )
        .bind(&key.target)
        .bind(&key.task)
        .bind(&hash)
        .bind(source)
        .bind(component)
        .bind(now_ms)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db("add_sender_routine: insert"))?;
        let id: i64 = row
            .try_get("id")
            .map_err(StoreError::db("add_sender_routine: id"))?;
        tx.commit()
            .await
            .map_err(StoreError::db("add_sender_routine: commit"))?;
        Ok(id)
    }

    /// The key's active routine, if it has one.
    pub async fn active_sender_routine(
        &self,
        key: &SenderKey,
    ) -> Result<Option<SenderRoutine>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {ROUTINE_COLUMNS} FROM sender_routines WHERE target = $1 AND task = $2 \
             AND protocol_hash = $3 AND status = 'active'"
        ))
        .bind(&key.target)
        .bind(&key.task)
        .bind(key.protocol_hash.to_hex())
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::db("active_sender_routine"))?;
        row.as_ref().map(routine_from_row).transpose()
    }

    /// Every sender routine, oldest first, without components.
    pub async fn sender_routines(&self) -> Result<Vec<SenderRoutine>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {ROUTINE_COLUMNS} FROM sender_routines ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("sender_routines"))?;
        rows.iter().map(routine_from_row).collect()
    }

    /// The built component of a sender routine.
    pub async fn sender_routine_component(&self, id: i64) -> Result<Vec<u8>, StoreError> {
        let row = sqlx::query("SELECT component FROM sender_routines WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db("sender_routine_component"))?
            .ok_or_else(|| StoreError::corrupt(format!("no sender routine {id}")))?;
        row.try_get("component")
            .map_err(StoreError::db("sender_routine_component: read"))
    }

    /// Counts a run of a sender routine (a failure when `error` is set); returns its failures.
    pub async fn record_sender_routine_run(
        &self,
        id: i64,
        error: Option<&str>,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let _writer = self.writer().await;
        let failed = i64::from(error.is_some());
        let row = sqlx::query(
            "UPDATE sender_routines SET runs = runs + 1, failures = failures + $2, \
             last_error = COALESCE($3, last_error), updated_at = $4 WHERE id = $1 \
             RETURNING failures",
        )
        .bind(id)
        .bind(failed)
        .bind(error)
        .bind(now_ms)
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::db("record_sender_routine_run"))?;
        match row {
            Some(row) => row
                .try_get("failures")
                .map_err(StoreError::db("record_sender_routine_run: read")),
            None => Ok(0),
        }
    }

    /// Disables a sender routine.
    pub async fn disable_sender_routine(&self, id: i64, now_ms: i64) -> Result<(), StoreError> {
        let _writer = self.writer().await;
        sqlx::query(
            "UPDATE sender_routines SET status = 'disabled', updated_at = $2 WHERE id = $1",
        )
        .bind(id)
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .map_err(StoreError::db("disable_sender_routine"))?;
        Ok(())
    }

    /// Records an attempt; returns its id.
    pub async fn add_sender_attempt(
        &self,
        attempt: &SenderRoutineAttempt,
    ) -> Result<i64, StoreError> {
        let _writer = self.writer().await;
        let key = &attempt.key;
        let row = sqlx::query(
            "INSERT INTO sender_routine_attempts (target, task, protocol_hash, job, attempt, \
             reason, source, outcome, report, examples_upto, prompt_tokens, completion_tokens, \
             cost_usd, routine_id, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
             RETURNING id",
        )
        .bind(&key.target)
        .bind(&key.task)
        .bind(key.protocol_hash.to_hex())
        .bind(&attempt.job)
        .bind(attempt.attempt)
        .bind(&attempt.reason)
        .bind(attempt.source.clone())
        .bind(&attempt.outcome)
        .bind(&attempt.report)
        .bind(attempt.examples_upto)
        .bind(attempt.prompt_tokens)
        .bind(attempt.completion_tokens)
        .bind(attempt.cost_usd)
        .bind(attempt.routine_id)
        .bind(attempt.created_at_ms)
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::db("add_sender_attempt"))?;
        row.try_get("id")
            .map_err(StoreError::db("add_sender_attempt: id"))
    }

    /// Every sender routine attempt, oldest first.
    pub async fn sender_attempts(&self) -> Result<Vec<SenderRoutineAttempt>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM sender_routine_attempts ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("sender_attempts"))?;
        rows.iter().map(attempt_from_row).collect()
    }
}

/// One column of a row, or an error naming it.
fn get<'r, T>(row: &'r AnyRow, column: &'static str) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any>,
{
    row.try_get(column)
        .map_err(|error| StoreError::Database(format!("read column {column}: {error}")))
}

fn key_from_row(row: &AnyRow, table: &str) -> Result<SenderKey, StoreError> {
    let hash: String = get(row, "protocol_hash")?;
    Ok(SenderKey {
        target: get(row, "target")?,
        task: get(row, "task")?,
        protocol_hash: parse_hash(&format!("{table}.protocol_hash"), &hash)?,
    })
}

fn json_column(row: &AnyRow, column: &'static str) -> Result<Value, StoreError> {
    let text: String = get(row, column)?;
    serde_json::from_str(&text)
        .map_err(|error| StoreError::Corrupt(format!("sender_examples.{column}: {error}")))
}

fn example_from_row(row: &AnyRow) -> Result<SenderExample, StoreError> {
    Ok(SenderExample {
        id: get(row, "id")?,
        key: key_from_row(row, "sender_examples")?,
        data: json_column(row, "data")?,
        body: get(row, "body")?,
        reply: get(row, "reply")?,
        output: json_column(row, "output")?,
        created_at_ms: get(row, "created_at")?,
    })
}

fn routine_from_row(row: &AnyRow) -> Result<SenderRoutine, StoreError> {
    let status: String = get(row, "status")?;
    Ok(SenderRoutine {
        id: get(row, "id")?,
        key: key_from_row(row, "sender_routines")?,
        source: get(row, "source")?,
        active: status == "active",
        runs: get(row, "runs")?,
        failures: get(row, "failures")?,
        last_error: get(row, "last_error")?,
        created_at_ms: get(row, "created_at")?,
        updated_at_ms: get(row, "updated_at")?,
    })
}

fn attempt_from_row(row: &AnyRow) -> Result<SenderRoutineAttempt, StoreError> {
    Ok(SenderRoutineAttempt {
        id: get(row, "id")?,
        key: key_from_row(row, "sender_routine_attempts")?,
        job: get(row, "job")?,
        attempt: get(row, "attempt")?,
        reason: get(row, "reason")?,
        source: get(row, "source")?,
        outcome: get(row, "outcome")?,
        report: get(row, "report")?,
        examples_upto: get(row, "examples_upto")?,
        prompt_tokens: get(row, "prompt_tokens")?,
        completion_tokens: get(row, "completion_tokens")?,
        cost_usd: get(row, "cost_usd")?,
        routine_id: get(row, "routine_id")?,
        created_at_ms: get(row, "created_at")?,
    })
}
