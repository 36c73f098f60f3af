//! What the node's programmer learns from and what it tried: recorded examples of LLM-answered
//! requests, and every routine attempt.
//!
//! Examples are bounded: adding one deletes the protocol's oldest beyond the caller's `keep`, in
//! the same transaction, so a busy protocol never grows the table. Attempts are kept for good:
//! they are the audit trail of every routine the LLM wrote (source, test report, tokens).

use agora_protocol::ProtocolHash;
use serde_json::Value;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::records::parse_hash;
use crate::{ProtocolUsage, Store, StoreError};

const EXAMPLE_COLUMNS: &str = "id, protocol_hash, query_id, body, tool_calls, reply, created_at";
const ATTEMPT_COLUMNS: &str = "id, protocol_hash, job, attempt, reason, source, outcome, report, \
     examples_upto, prompt_tokens, completion_tokens, cost_usd, routine_id, created_at";

/// A request of a protocol the LLM answered, with its tool calls and reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// Assigned by the store; grows with time.
    pub id: i64,
    /// The protocol.
    pub protocol_hash: ProtocolHash,
    /// The request it was recorded from.
    pub query_id: String,
    /// The request body, as text.
    pub body: String,
    /// The tool calls, in order: a JSON array of `{"tool", "arguments", "result"}` or
    /// `{"tool", "arguments", "error"}` objects.
    pub tool_calls: Value,
    /// The reply body, as text.
    pub reply: String,
    /// When it was recorded (Unix ms).
    pub created_at_ms: i64,
}

/// One candidate routine the programmer asked the LLM for.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutineAttempt {
    /// Assigned by the store (0 in a new attempt).
    pub id: i64,
    /// The protocol.
    pub protocol_hash: ProtocolHash,
    /// The programmer run it belongs to.
    pub job: String,
    /// 1 for the first candidate of a run, then one more per repair.
    pub attempt: i64,
    /// Why the run started: `threshold` or `failures`.
    pub reason: String,
    /// The candidate's source; `None` when the LLM gave none.
    pub source: Option<String>,
    /// `passed`, `build_failed`, `tests_failed` or `llm_failed`.
    pub outcome: String,
    /// Why, in words.
    pub report: String,
    /// The newest example the run saw.
    pub examples_upto: i64,
    /// Prompt tokens this attempt spent.
    pub prompt_tokens: i64,
    /// Completion tokens this attempt spent.
    pub completion_tokens: i64,
    /// What this attempt cost.
    pub cost_usd: f64,
    /// The routine it became, if it passed and was stored.
    pub routine_id: Option<i64>,
    /// When it was recorded (Unix ms).
    pub created_at_ms: i64,
}

impl ProtocolUsage {
    /// LLM tokens the protocol's routines saved, estimated: requests a routine answered, times
    /// the mean LLM tokens of a request the LLM answered (directly or as a fallback). Zero until
    /// both have happened.
    pub fn tokens_saved_estimate(&self) -> i64 {
        let answered_by_llm = self.llm + self.fallback;
        if answered_by_llm == 0 {
            return 0;
        }
        let tokens = self.llm_prompt_tokens + self.llm_completion_tokens;
        (self.routine as f64 * tokens as f64 / answered_by_llm as f64).round() as i64
    }
}

/// What the programmer spent on one protocol.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProgrammingTotals {
    /// Attempts made.
    pub attempts: i64,
    /// Attempts that passed their examination.
    pub passed: i64,
    /// Prompt plus completion tokens of all attempts.
    pub tokens: i64,
    /// Their cost.
    pub cost_usd: f64,
}

impl Store {
    /// The programmer's totals per protocol, ordered by hash.
    pub async fn programming_totals(
        &self,
    ) -> Result<Vec<(ProtocolHash, ProgrammingTotals)>, StoreError> {
        let mut totals: std::collections::BTreeMap<ProtocolHash, ProgrammingTotals> =
            std::collections::BTreeMap::new();
        for attempt in self.attempts(None).await? {
            let entry = totals.entry(attempt.protocol_hash).or_default();
            entry.attempts += 1;
            entry.passed += i64::from(attempt.outcome == "passed");
            entry.tokens += attempt.prompt_tokens + attempt.completion_tokens;
            entry.cost_usd += attempt.cost_usd;
        }
        Ok(totals.into_iter().collect())
    }

    /// Records an example and keeps only the protocol's newest `keep`; returns its id.
    pub async fn add_example(&self, example: &Example, keep: i64) -> Result<i64, StoreError> {
        let _writer = self.writer().await;
        let hash = example.protocol_hash.to_hex();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::db("add_example: begin"))?;
        let row = sqlx::query(
            "INSERT INTO examples (protocol_hash, query_id, body, tool_calls, reply, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(&hash)
        .bind(&example.query_id)
        .bind(&example.body)
        .bind(example.tool_calls.to_string())
        .bind(&example.reply)
        .bind(example.created_at_ms)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db("add_example: insert"))?;
        let id: i64 = row
            .try_get("id")
            .map_err(StoreError::db("add_example: id"))?;
        sqlx::query(
            "DELETE FROM examples WHERE protocol_hash = $1 AND id NOT IN \
             (SELECT id FROM examples WHERE protocol_hash = $1 ORDER BY id DESC LIMIT $2)",
        )
        .bind(&hash)
        .bind(keep.max(1))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("add_example: prune"))?;
        tx.commit()
            .await
            .map_err(StoreError::db("add_example: commit"))?;
        Ok(id)
    }

    /// The protocol's newest `limit` examples, oldest first.
    pub async fn examples(
        &self,
        hash: &ProtocolHash,
        limit: i64,
    ) -> Result<Vec<Example>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {EXAMPLE_COLUMNS} FROM examples WHERE protocol_hash = $1 \
             ORDER BY id DESC LIMIT $2"
        ))
        .bind(hash.to_hex())
        .bind(limit.max(0))
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("examples: select"))?;
        let mut examples = rows
            .iter()
            .map(example_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        examples.reverse();
        Ok(examples)
    }

    /// How many of the protocol's examples are newer than the newest one its last programmer
    /// run saw (all of them when it never ran).
    pub async fn examples_since_last_attempt(
        &self,
        hash: &ProtocolHash,
    ) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "SELECT CAST(COUNT(*) AS BIGINT) AS n FROM examples WHERE protocol_hash = $1 AND id > \
             (SELECT CAST(COALESCE(MAX(examples_upto), 0) AS BIGINT) FROM routine_attempts \
              WHERE protocol_hash = $1)",
        )
        .bind(hash.to_hex())
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::db("examples_since_last_attempt"))?;
        row.try_get("n")
            .map_err(StoreError::db("examples_since_last_attempt: read"))
    }

    /// Programmer runs (jobs) for `hash` since its last attempt that passed: the node waits for
    /// more examples after each run that found no routine.
    pub async fn failed_jobs_since_success(&self, hash: &ProtocolHash) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "SELECT CAST(COUNT(DISTINCT job) AS BIGINT) AS n FROM routine_attempts \
             WHERE protocol_hash = $1 AND id > \
             (SELECT CAST(COALESCE(MAX(id), 0) AS BIGINT) FROM routine_attempts \
              WHERE protocol_hash = $1 AND outcome = 'passed')",
        )
        .bind(hash.to_hex())
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::db("failed_jobs_since_success"))?;
        row.try_get("n")
            .map_err(StoreError::db("failed_jobs_since_success: read"))
    }

    /// Records an attempt; returns its id.
    pub async fn add_attempt(&self, attempt: &RoutineAttempt) -> Result<i64, StoreError> {
        let _writer = self.writer().await;
        let row = sqlx::query(
            "INSERT INTO routine_attempts (protocol_hash, job, attempt, reason, source, outcome, \
             report, examples_upto, prompt_tokens, completion_tokens, cost_usd, routine_id, \
             created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
             RETURNING id",
        )
        .bind(attempt.protocol_hash.to_hex())
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
        .map_err(StoreError::db("add_attempt"))?;
        row.try_get("id").map_err(StoreError::db("add_attempt: id"))
    }

    /// The protocol's attempts, oldest first; every protocol's when `hash` is `None`.
    pub async fn attempts(
        &self,
        hash: Option<&ProtocolHash>,
    ) -> Result<Vec<RoutineAttempt>, StoreError> {
        let filter = if hash.is_some() {
            "WHERE protocol_hash = $1"
        } else {
            ""
        };
        let sql = format!("SELECT {ATTEMPT_COLUMNS} FROM routine_attempts {filter} ORDER BY id");
        let mut query = sqlx::query(&sql);
        if let Some(hash) = hash {
            query = query.bind(hash.to_hex());
        }
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("attempts: select"))?;
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

fn example_from_row(row: &AnyRow) -> Result<Example, StoreError> {
    let hash: String = get(row, "protocol_hash")?;
    let tool_calls: String = get(row, "tool_calls")?;
    Ok(Example {
        id: get(row, "id")?,
        protocol_hash: parse_hash("examples.protocol_hash", &hash)?,
        query_id: get(row, "query_id")?,
        body: get(row, "body")?,
        tool_calls: serde_json::from_str(&tool_calls).map_err(|error| {
            StoreError::Corrupt(format!("examples.tool_calls is not JSON: {error}"))
        })?,
        reply: get(row, "reply")?,
        created_at_ms: get(row, "created_at")?,
    })
}

fn attempt_from_row(row: &AnyRow) -> Result<RoutineAttempt, StoreError> {
    let hash: String = get(row, "protocol_hash")?;
    Ok(RoutineAttempt {
        id: get(row, "id")?,
        protocol_hash: parse_hash("routine_attempts.protocol_hash", &hash)?,
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
