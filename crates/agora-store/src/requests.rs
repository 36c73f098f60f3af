//! The request log and the per-protocol usage counters derived from it.
//!
//! Architecture invariant: a request row, its protocol's counters, its routine's run and its
//! conversation are written in one transaction by `Store::requests().record_request`, so after a crash the
//! counters still equal what the log says and a follow-up never sees a history its request log
//! lacks. Requests recorded concurrently are written together (group commit, see `batch`): one
//! transaction then holds several requests, each with all of its writes, and commits them all
//! or none. The counters are kept in their own table (rather than summed over `requests` on
//! demand) so reading them stays cheap however long the log grows.

use agora_protocol::ProtocolHash;
use sqlx::any::AnyRow;

use crate::conversations::ConversationRow;
use crate::records::{parse_hash, parse_optional_hash};
use crate::sql::{Columns, fetch_all, fetch_optional, from_columns};

mod batch;

use crate::{Conversation, ProtocolUsage, RequestPath, RequestRecord, Store, StoreError};
pub(crate) use batch::{LINGER, RequestWriter, WriterMode};

const USAGE_COLUMNS: &str = "hash, requests, llm, routine, fallback, rejected, failed, \
     llm_prompt_tokens, llm_completion_tokens, llm_cost_usd, last_used";

impl Requests<'_> {
    /// Records a finished request in one transaction: the request row, its protocol's usage
    /// counters (when it has a protocol), the run of its routine (when one ran: `runs`, and on
    /// failure `failures`, `last_error` and `last_failure_at_ms`; nothing if the routine was
    /// removed meanwhile), and the conversation if given (created, or its messages,
    /// `last_active_ms` and `expires_at_ms` replaced).
    ///
    /// Returns once the transaction has committed. Requests recorded concurrently may share it
    /// (see the `batch` module); the outcome is still each request's own.
    pub async fn record_request(
        self,
        request: &RequestRecord,
        conversation: Option<&Conversation>,
    ) -> Result<(), StoreError> {
        let conversation = conversation.map(ConversationRow::of).transpose()?;
        self.store
            .request_writer
            .record(request.clone(), conversation)
            .await
    }

    /// Records a finished request like `Store::requests().record_request` (without a conversation), but
    /// returns once it is queued rather than committed. For requests whose record is all the node
    /// keeps of them, answered without an LLM call, where waiting for a commit per request would
    /// cost most of the node's throughput (see the `batch` module).
    ///
    /// Every read of the request log, the usage counters or the routines' counters first waits
    /// for the records queued before it, so this process never reads a stale count. What a
    /// crash can lose is the records queued in the last few milliseconds
    /// ([`StoreOptions::request_linger`](crate::StoreOptions::request_linger), 5 ms by default)
    /// and the batch being written; `Store::requests().flush_requests` and [`Store::close`] write them.
    /// Takes the record by value: it is what the node keeps of the request, and the request path
    /// need not copy it.
    pub async fn record_request_buffered(self, request: RequestRecord) -> Result<(), StoreError> {
        self.store.request_writer.record_buffered(request).await
    }

    /// Waits until every request recorded before this call is written (or has failed). A node
    /// calls it on shutdown; readers in this crate call it before reading what requests write.
    pub async fn flush_requests(self) {
        self.store.request_writer.flush().await;
    }

    /// How many transactions recorded more than one request, and how many of those failed and
    /// were retried one request at a time. For tests that check batching happens.
    #[doc(hidden)]
    pub fn request_batches_for_tests(self) -> (u64, u64) {
        self.store.request_writer.counts()
    }

    /// The usage counters for `hash` (all zero when it was never used).
    pub async fn usage(self, hash: &ProtocolHash) -> Result<ProtocolUsage, StoreError> {
        self.flush_requests().await;
        let sql = format!("SELECT {USAGE_COLUMNS} FROM protocol_usage WHERE hash = $1");
        let statement = sqlx::query(&sql).bind(hash.to_hex());
        let usage =
            fetch_optional(&self.store.pool, statement, "usage: select", usage_from_row).await?;
        Ok(usage.map(|(_, usage)| usage).unwrap_or_default())
    }

    /// The usage counters of every protocol ever used, ordered by hash.
    pub async fn usage_all(self) -> Result<Vec<(ProtocolHash, ProtocolUsage)>, StoreError> {
        self.flush_requests().await;
        let sql = format!("SELECT {USAGE_COLUMNS} FROM protocol_usage");
        let mut usage = fetch_all(
            &self.store.pool,
            sqlx::query(&sql),
            "usage_all: select",
            usage_from_row,
        )
        .await?;
        // Sorted here rather than in SQL: Postgres may order text by locale, SQLite by bytes.
        usage.sort_by_key(|(hash, _)| *hash);
        Ok(usage)
    }

    /// The latest `limit` requests, newest first (a negative limit means none).
    pub async fn recent_requests(self, limit: i64) -> Result<Vec<RequestRecord>, StoreError> {
        self.flush_requests().await;
        let statement = sqlx::query(
            "SELECT query_id, node, protocol_hash, channel, path, status, llm_calls, \
             prompt_tokens, completion_tokens, cost_usd, latency_ms, created_at, routine_id, \
             routine_error, client, error_detail FROM requests ORDER BY created_at DESC, id DESC LIMIT $1",
        )
        .bind(limit.max(0));
        fetch_all(
            &self.store.pool,
            statement,
            "recent_requests: select",
            request_from_row,
        )
        .await
    }

    /// The request log since `since_ms`, in buckets of `bucket_ms` (at least 1) per path: for
    /// charts of traffic and cost over time. Ordered by bucket, then path.
    pub async fn request_series(
        self,
        since_ms: i64,
        bucket_ms: i64,
    ) -> Result<Vec<RequestBucket>, StoreError> {
        self.flush_requests().await;
        let bucket_ms = bucket_ms.max(1);
        let statement = sqlx::query(
            "SELECT CAST(created_at / $1 AS BIGINT) AS bucket, path, \
             CAST(COUNT(*) AS BIGINT) AS requests, CAST(SUM(llm_calls) AS BIGINT) AS llm_calls, \
             SUM(cost_usd) AS cost_usd FROM requests WHERE created_at >= $2 \
             GROUP BY 1, 2",
        )
        .bind(bucket_ms)
        .bind(since_ms);
        let mut buckets = fetch_all(&self.store.pool, statement, "request_series: select", |row| {
            let columns = Columns::new(row, "request_series: read column");
            let bucket: i64 = columns.get("bucket")?;
            Ok(from_columns!(columns => RequestBucket {
                start_ms: bucket * bucket_ms,
                path: RequestPath::from_column("requests.path", &columns.get::<String>("path")?)?,
                requests, llm_calls, cost_usd,
            }))
        })
        .await?;
        buckets.sort_by_key(|b| (b.start_ms, b.path.as_str()));
        Ok(buckets)
    }
}

/// The requests of one path in one time bucket (see `Store::requests().request_series`).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestBucket {
    /// The bucket's start (Unix ms).
    pub start_ms: i64,
    /// How the requests were answered.
    pub path: RequestPath,
    /// How many.
    pub requests: i64,
    /// Their LLM calls.
    pub llm_calls: i64,
    /// The cost of those calls.
    pub cost_usd: f64,
}

fn usage_from_row(row: &AnyRow) -> Result<(ProtocolHash, ProtocolUsage), StoreError> {
    let columns = Columns::new(row, "usage: read column");
    let hash: String = columns.get("hash")?;
    let usage = from_columns!(columns => ProtocolUsage {
        requests, llm, routine, fallback, rejected, failed, llm_prompt_tokens,
        llm_completion_tokens, llm_cost_usd,
        last_used_ms: columns.get("last_used")?,
    });
    Ok((parse_hash("protocol_usage.hash", &hash)?, usage))
}

fn request_from_row(row: &AnyRow) -> Result<RequestRecord, StoreError> {
    let columns = Columns::new(row, "requests: read column");
    Ok(from_columns!(columns => RequestRecord {
        query_id, node,
        protocol_hash: parse_optional_hash(
            "requests.protocol_hash",
            columns.get("protocol_hash")?,
        )?,
        channel,
        path: RequestPath::from_column("requests.path", &columns.get::<String>("path")?)?,
        status, llm_calls, prompt_tokens, completion_tokens, cost_usd, latency_ms,
        created_at_ms: columns.get("created_at")?,
        routine_id, routine_error, client, error_detail,
    }))
}

/// The request ledger and the usage counters. Reached through [`Store::requests`].
#[derive(Clone, Copy)]
pub struct Requests<'a> {
    pub(crate) store: &'a Store,
}
