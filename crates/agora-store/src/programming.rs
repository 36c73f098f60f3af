//! What the node's programmer learns from and what it tried: recorded examples of LLM-answered
//! requests, and every routine attempt, for receiver routines (keyed by protocol) and sender
//! routines (keyed by [`SenderKey`]) alike.
//!
//! Examples are bounded: adding one deletes the key's oldest beyond the caller's `keep`, in the
//! same transaction, so a busy key never grows the table. Attempts are kept for good: they are
//! the audit trail of every routine the LLM wrote (source, test report, tokens). Both kinds share
//! one [`Attempt`] record and the queries over attempts; a [`ProgrammerKey`] names the tables and
//! key columns (`routine_attempts` by `protocol_hash`; `sender_routine_attempts` by `target`,
//! `task`, `protocol_hash`). Outcomes and reasons are enums, stored as the words they always were.

use agora_protocol::ProtocolHash;
use serde_json::Value;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::records::parse_hash;
use crate::{AttemptOutcome, JobReason, ProtocolUsage, SenderKey, Store, StoreError};

const EXAMPLE_COLUMNS: &str = "id, protocol_hash, query_id, body, tool_calls, reply, created_at";
/// An attempt's columns besides `id` and the key, in bind order.
const ATTEMPT_FIELDS: [&str; 12] = [
    "job",
    "attempt",
    "reason",
    "source",
    "outcome",
    "report",
    "examples_upto",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "routine_id",
    "created_at",
];

/// What a programmer job writes a routine for, as the store keys it: a [`ProtocolHash`]
/// (receiver routines) or a [`SenderKey`] (sender routines). Sealed: the store knows the tables.
pub trait ProgrammerKey: key::Columns + Clone + Send + Sync {}

impl ProgrammerKey for ProtocolHash {}
impl ProgrammerKey for SenderKey {}

pub(crate) mod key {
    //! The tables and key columns behind a [`super::ProgrammerKey`].

    use sqlx::any::AnyRow;

    use crate::StoreError;

    /// A query over the any-backend.
    pub(crate) type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

    /// Where a key's examples and attempts are, and how it is bound and read.
    pub trait Columns: Sized {
        /// The examples table.
        const EXAMPLES: &'static str;
        /// The attempts table.
        const ATTEMPTS: &'static str;
        /// The key's columns, in bind order.
        const COLUMNS: &'static [&'static str];
        /// Binds the key's columns, in order.
        fn bind<'q>(&'q self, query: AnyQuery<'q>) -> AnyQuery<'q>;
        /// Reads the key back from a row of `table`.
        fn read(row: &AnyRow, table: &str) -> Result<Self, StoreError>;
    }

    /// `col1 = $first AND col2 = $first+1 ...` over the key's columns.
    pub(crate) fn filter<K: Columns>(first: usize) -> String {
        let terms: Vec<String> = K::COLUMNS
            .iter()
            .enumerate()
            .map(|(i, column)| format!("{column} = ${}", first + i))
            .collect();
        terms.join(" AND ")
    }
}

impl key::Columns for ProtocolHash {
    const EXAMPLES: &'static str = "examples";
    const ATTEMPTS: &'static str = "routine_attempts";
    const COLUMNS: &'static [&'static str] = &["protocol_hash"];

    fn bind<'q>(&'q self, query: key::AnyQuery<'q>) -> key::AnyQuery<'q> {
        query.bind(self.to_hex())
    }

    fn read(row: &AnyRow, table: &str) -> Result<Self, StoreError> {
        let hash: String = get(row, "protocol_hash")?;
        parse_hash(&format!("{table}.protocol_hash"), &hash)
    }
}

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

/// One candidate routine a programmer job asked the LLM for, for key `K`.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt<K> {
    /// Assigned by the store (0 in a new attempt).
    pub id: i64,
    /// What it was written for: a protocol, or a [`SenderKey`].
    pub key: K,
    /// The job it belongs to.
    pub job: String,
    /// 1 for the first candidate of a job, then one more per repair.
    pub attempt: i64,
    /// Why the job started.
    pub reason: JobReason,
    /// The candidate's source; `None` when the LLM gave none.
    pub source: Option<String>,
    /// How it ended.
    pub outcome: AttemptOutcome,
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
    /// The routine it became, if it passed and was stored.
    pub routine_id: Option<i64>,
    /// When it was recorded (Unix ms).
    pub created_at_ms: i64,
}

/// An attempt at a receiver routine (keyed by protocol).
pub type RoutineAttempt = Attempt<ProtocolHash>;

/// An attempt at a sender routine.
pub type SenderRoutineAttempt = Attempt<SenderKey>;

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

impl Programming<'_> {
    /// The programmer's totals per protocol, ordered by hash.
    pub async fn programming_totals(
        self,
    ) -> Result<Vec<(ProtocolHash, ProgrammingTotals)>, StoreError> {
        let mut totals: std::collections::BTreeMap<ProtocolHash, ProgrammingTotals> =
            std::collections::BTreeMap::new();
        for attempt in self.attempts::<ProtocolHash>(None).await? {
            let entry = totals.entry(attempt.key).or_default();
            entry.attempts += 1;
            entry.passed += i64::from(attempt.outcome == AttemptOutcome::Passed);
            entry.tokens += attempt.prompt_tokens + attempt.completion_tokens;
            entry.cost_usd += attempt.cost_usd;
        }
        Ok(totals.into_iter().collect())
    }

    /// Records an example and keeps only the protocol's newest `keep`; returns its id.
    pub async fn add_example(self, example: &Example, keep: i64) -> Result<i64, StoreError> {
        let _writer = self.store.writer().await;
        let hash = example.protocol_hash.to_hex();
        let mut tx = self
            .store
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
        prune_examples(&mut tx, &example.protocol_hash, keep, "add_example: prune").await?;
        tx.commit()
            .await
            .map_err(StoreError::db("add_example: commit"))?;
        Ok(id)
    }

    /// The protocol's newest `limit` examples, oldest first.
    pub async fn examples(
        self,
        hash: &ProtocolHash,
        limit: i64,
    ) -> Result<Vec<Example>, StoreError> {
        self.newest_examples(hash, limit, EXAMPLE_COLUMNS, example_from_row)
            .await
    }

    /// The newest `limit` examples of `key`, oldest first, read by `read`.
    pub(crate) async fn newest_examples<K: ProgrammerKey, E>(
        self,
        key: &K,
        limit: i64,
        columns: &str,
        read: fn(&AnyRow) -> Result<E, StoreError>,
    ) -> Result<Vec<E>, StoreError> {
        let n = K::COLUMNS.len();
        let sql = format!(
            "SELECT {columns} FROM {} WHERE {} ORDER BY id DESC LIMIT ${}",
            K::EXAMPLES,
            key::filter::<K>(1),
            n + 1
        );
        let rows = key
            .bind(sqlx::query(&sql))
            .bind(limit.max(0))
            .fetch_all(&self.store.pool)
            .await
            .map_err(StoreError::db("examples: select"))?;
        let mut examples = rows.iter().map(read).collect::<Result<Vec<_>, _>>()?;
        examples.reverse();
        Ok(examples)
    }

    /// How many of the key's examples are newer than the newest one its last programmer job
    /// saw (all of them when none ran).
    pub async fn examples_since_last_attempt<K: ProgrammerKey>(
        self,
        key: &K,
    ) -> Result<i64, StoreError> {
        let filter = key::filter::<K>(1);
        let sql = format!(
            "SELECT CAST(COUNT(*) AS BIGINT) AS n FROM {} WHERE {filter} AND id > \
             (SELECT CAST(COALESCE(MAX(examples_upto), 0) AS BIGINT) FROM {} WHERE {filter})",
            K::EXAMPLES,
            K::ATTEMPTS
        );
        self.count(key, &sql, "examples_since_last_attempt").await
    }

    /// Programmer jobs for `key` since its last attempt that passed: the node waits for more
    /// examples after each job that found no routine.
    pub async fn failed_jobs_since_success<K: ProgrammerKey>(
        self,
        key: &K,
    ) -> Result<i64, StoreError> {
        let filter = key::filter::<K>(1);
        let sql = format!(
            "SELECT CAST(COUNT(DISTINCT job) AS BIGINT) AS n FROM {attempts} WHERE {filter} \
             AND id > (SELECT CAST(COALESCE(MAX(id), 0) AS BIGINT) FROM {attempts} \
             WHERE {filter} AND outcome = '{passed}')",
            attempts = K::ATTEMPTS,
            passed = AttemptOutcome::Passed.as_str(),
        );
        self.count(key, &sql, "failed_jobs_since_success").await
    }

    /// Runs `sql`, a count `n` over the key bound from `$1`.
    async fn count<K: ProgrammerKey>(
        self,
        key: &K,
        sql: &str,
        operation: &'static str,
    ) -> Result<i64, StoreError> {
        let row = key
            .bind(sqlx::query(sql))
            .fetch_one(&self.store.pool)
            .await
            .map_err(StoreError::db(operation))?;
        row.try_get("n").map_err(StoreError::db(operation))
    }

    /// Records an attempt; returns its id.
    pub async fn add_attempt<K: ProgrammerKey>(
        self,
        attempt: &Attempt<K>,
    ) -> Result<i64, StoreError> {
        let _writer = self.store.writer().await;
        let columns = K::COLUMNS.len() + ATTEMPT_FIELDS.len();
        let placeholders: Vec<String> = (1..=columns).map(|i| format!("${i}")).collect();
        let sql = format!(
            "INSERT INTO {} ({}, {}) VALUES ({}) RETURNING id",
            K::ATTEMPTS,
            K::COLUMNS.join(", "),
            ATTEMPT_FIELDS.join(", "),
            placeholders.join(", ")
        );
        let row = attempt
            .key
            .bind(sqlx::query(&sql))
            .bind(&attempt.job)
            .bind(attempt.attempt)
            .bind(attempt.reason.as_str())
            .bind(attempt.source.clone())
            .bind(attempt.outcome.as_str())
            .bind(&attempt.report)
            .bind(attempt.examples_upto)
            .bind(attempt.prompt_tokens)
            .bind(attempt.completion_tokens)
            .bind(attempt.cost_usd)
            .bind(attempt.routine_id)
            .bind(attempt.created_at_ms)
            .fetch_one(&self.store.pool)
            .await
            .map_err(StoreError::db("add_attempt"))?;
        row.try_get("id").map_err(StoreError::db("add_attempt: id"))
    }

    /// The key's attempts, oldest first; every key's when `key` is `None`.
    pub async fn attempts<K: ProgrammerKey>(
        self,
        key: Option<&K>,
    ) -> Result<Vec<Attempt<K>>, StoreError> {
        let filter = match key {
            Some(_) => format!("WHERE {}", key::filter::<K>(1)),
            None => String::new(),
        };
        let sql = format!(
            "SELECT id, {}, {} FROM {} {filter} ORDER BY id",
            K::COLUMNS.join(", "),
            ATTEMPT_FIELDS.join(", "),
            K::ATTEMPTS
        );
        let mut query = sqlx::query(&sql);
        if let Some(key) = key {
            query = key.bind(query);
        }
        let rows = query
            .fetch_all(&self.store.pool)
            .await
            .map_err(StoreError::db("attempts: select"))?;
        rows.iter().map(attempt_from_row).collect()
    }
}

/// Deletes the key's examples beyond its newest `keep` (at least one), in `tx`.
pub(crate) async fn prune_examples<K: ProgrammerKey>(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    key: &K,
    keep: i64,
    operation: &'static str,
) -> Result<(), StoreError> {
    let filter = key::filter::<K>(1);
    let sql = format!(
        "DELETE FROM {examples} WHERE {filter} AND id NOT IN \
         (SELECT id FROM {examples} WHERE {filter} ORDER BY id DESC LIMIT ${})",
        K::COLUMNS.len() + 1,
        examples = K::EXAMPLES,
    );
    key.bind(sqlx::query(&sql))
        .bind(keep.max(1))
        .execute(&mut **tx)
        .await
        .map_err(StoreError::db(operation))?;
    Ok(())
}
/// One column of a row, or an error naming it.
pub(crate) fn get<'r, T>(row: &'r AnyRow, column: &'static str) -> Result<T, StoreError>
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

fn attempt_from_row<K: ProgrammerKey>(row: &AnyRow) -> Result<Attempt<K>, StoreError> {
    let table = K::ATTEMPTS;
    let reason: String = get(row, "reason")?;
    let outcome: String = get(row, "outcome")?;
    Ok(Attempt {
        id: get(row, "id")?,
        key: K::read(row, table)?,
        job: get(row, "job")?,
        attempt: get(row, "attempt")?,
        reason: JobReason::from_column(&format!("{table}.reason"), &reason)?,
        source: get(row, "source")?,
        outcome: AttemptOutcome::from_column(&format!("{table}.outcome"), &outcome)?,
        report: get(row, "report")?,
        examples_upto: get(row, "examples_upto")?,
        prompt_tokens: get(row, "prompt_tokens")?,
        completion_tokens: get(row, "completion_tokens")?,
        cost_usd: get(row, "cost_usd")?,
        routine_id: get(row, "routine_id")?,
        created_at_ms: get(row, "created_at")?,
    })
}

/// The programmer's examples and attempts, for receiver and sender routines. Reached through [`Store::programming`].
#[derive(Clone, Copy)]
pub struct Programming<'a> {
    pub(crate) store: &'a Store,
}
