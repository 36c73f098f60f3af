//! Group commit for `Store::requests().record_request`(crate::Store::record_request) and
//! `Store::requests().record_request_buffered`(crate::Store::record_request_buffered): one background
//! writer turns the requests recorded meanwhile into one transaction.
//!
//! Why: recorded one at a time, each request paid a transaction of a few statements under the
//! store's single-writer lock, and each statement a round trip to sqlx's SQLite worker thread and
//! back through the async scheduler; on a busy node each such hop waits its turn, which capped
//! the node's requests a second however cheap answering was (demo/network/RESULTS.md, "Findings
//! behind the node's checks"). Written together, a batch costs little more than one of its
//! requests.
//!
//! How: each call queues its request (with its conversation, serialized) on a bounded channel.
//! The writer task takes whatever is queued, up to [`MAX_BATCH`] entries, and writes it in one
//! transaction under the writer lock (taken once per batch): multi-row inserts into `requests`
//! ([`ROWS_PER_INSERT`] rows a statement), one counter update per routine (runs and failures
//! summed; `last_error` and `last_failure_at` from the batch's last failure, as if its requests
//! had been recorded one after the other), one usage upsert per protocol (counters summed,
//! `last_used` the latest), and the conversations in arrival order. A batch commits whole or not
//! at all, so the architecture invariant of `requests` holds batch by batch.
//!
//! Two kinds of callers:
//! - **waiting** (`record`): the caller hears back only after the commit, so its reply means its
//!   record is durable. A lone request is written at once: batches form only while the previous
//!   one is being written, which adds no waiting of its own. Requests with a conversation (whose
//!   id must work once the reply leaves) or with LLM calls use this.
//! - **buffered** (`record_buffered`): the caller goes on once its request is queued. While the
//!   writer has only buffered records in hand it keeps collecting for up to [`LINGER`] (or a
//!   full batch), so a node serving routines writes one transaction for many requests: waiting for
//!   the commit of every routine-served request costs throughput, because each commit is two
//!   thread hops for a small batch. A waiting record, a flush or a close ends the linger.
//!   Readers of what requests write (the log, the usage counters, the routines' counters) flush
//!   first (`flush`), so the process never reads a count that misses a request it answered; a
//!   crash can lose only the buffered records of the last [`LINGER`] and the batch in flight.
//!
//! Per dialect: on SQLite the whole transaction (`BEGIN IMMEDIATE` to `COMMIT`) is one
//! multi-statement query, so one round trip to the SQLite thread, with anonymous `?` placeholders
//! (sqlx's SQLite driver binds them in order across the statements, where a `$n` would name the
//! n-th argument of the whole query). A file database gets a connection of its own, taken from
//! the pool and detached from it: a connection whose page cache another connection's write made
//! stale reads its pages again, and the pool hands out its connections in turn. Postgres runs
//! one statement per round trip (a prepared statement holds one command), numbered `$1, $2, ...`,
//! on a pooled connection.
//!
//! When a batch fails, one bad entry (a conversation a trigger refuses, say) must not fail its
//! neighbours: its entries are retried one by one, each in its own transaction, and each caller
//! gets the outcome of its own. On Postgres a failed commit is reported to every entry instead:
//! whether a commit that failed took effect can be unknowable (a connection lost after `COMMIT`
//! was sent), and a retry could then record the same requests twice. SQLite has no such doubt.
//!
//! Lifetime: the task owns the receiving end; every clone of the store holds a sender. It ends
//! when [`RequestWriter::close`] asks (having written everything queued before, and refusing what
//! comes after), or when the last store clone is dropped (having written everything queued).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::{Any, AnyConnection, AnyPool, Connection};
use tokio::sync::{mpsc, oneshot};

use crate::conversations::ConversationRow;
use crate::{RequestPath, RequestRecord, StoreError};

/// Most requests written in one transaction.
pub(crate) const MAX_BATCH: usize = 256;
/// Requests that may wait for the writer; callers beyond this wait to queue.
const QUEUE_CAPACITY: usize = 4 * MAX_BATCH;
/// How long the writer may hold buffered records back to write them with later ones, unless
/// [`StoreOptions::request_linger`](crate::StoreOptions::request_linger) says otherwise. Bounds
/// what a crash can lose of them (see [`RequestWriter::record_buffered`]).
pub(crate) const LINGER: std::time::Duration = std::time::Duration::from_millis(5);
/// Rows per `INSERT INTO requests` statement: 14 parameters a row, so 64 rows stay under 999,
/// the smallest bind-parameter limit a SQLite build may have (Postgres allows 65535).
const ROWS_PER_INSERT: usize = 64;
/// Transactions between checkpoints of a SQLite file. A batch changes a handful of pages, so
/// this is about SQLite's own cadence (every 1000 pages written to the log).
const CHECKPOINT_EVERY: u32 = 128;

/// How the writer reaches the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriterMode {
    /// Postgres: a pooled connection per batch, one statement per round trip.
    Postgres,
    /// SQLite: a batch is one round trip. `own_connection` keeps a connection detached from the
    /// pool (a file database); an in-memory database has its one connection, shared with the
    /// pool.
    Sqlite {
        /// Whether the writer keeps a connection of its own.
        own_connection: bool,
    },
}

/// One request waiting to be written, and where its outcome goes: to a caller waiting for the
/// commit, or (`None`, a buffered record) to the log when it fails.
pub(crate) struct Pending {
    pub(crate) request: RequestRecord,
    pub(crate) conversation: Option<ConversationRow>,
    pub(crate) reply: Option<oneshot::Sender<Result<(), StoreError>>>,
}

impl Pending {
    /// Tells the caller, if one waits, how its request fared; a buffered record's failure is
    /// logged, as nobody else can hear of it.
    fn answer(self, outcome: Result<(), StoreError>) {
        match (self.reply, outcome) {
            (Some(reply), outcome) => {
                let _ = reply.send(outcome);
            }
            (None, Ok(())) => {}
            (None, Err(error)) => {
                let query_id = &self.request.query_id;
                tracing::error!(%error, %query_id, "a buffered request record was not written");
            }
        }
    }
}

enum Message {
    /// Boxed: a request is some 300 bytes, a close signal one pointer.
    Record(Box<Pending>),
    /// Write what is queued, then answer (readers call this first, see [`RequestWriter::flush`]).
    Flush(oneshot::Sender<()>),
    /// Write what is queued, refuse the rest, answer, and stop.
    Close(oneshot::Sender<()>),
}

impl Message {
    /// Whether the writer may hold this message back to write it with later ones: only a
    /// buffered record, which nobody waits on.
    fn can_linger(&self) -> bool {
        matches!(self, Message::Record(pending) if pending.reply.is_none())
    }
}

/// Counters of the writer's work, for tests and diagnostics.
#[derive(Debug, Default)]
struct Counters {
    /// Transactions begun for batches of more than one request.
    batches: AtomicU64,
    /// Batches that failed and were retried one request at a time.
    retried: AtomicU64,
}

/// The store's handle on its request writer. Cloning is cheap: clones share the writer.
#[derive(Debug, Clone)]
pub(crate) struct RequestWriter {
    queue: mpsc::Sender<Message>,
    counters: Arc<Counters>,
}

impl RequestWriter {
    /// Starts the writer task on the current tokio runtime. `writer` is the store's SQLite writer
    /// lock (`None` on Postgres), taken once per transaction. A file SQLite database gets the
    /// writer's own connection and a checkpoint task.
    pub(crate) async fn start(
        pool: AnyPool,
        mode: WriterMode,
        writer: Option<Arc<tokio::sync::Mutex<()>>>,
        linger: std::time::Duration,
    ) -> Result<Self, StoreError> {
        let (queue, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let counters = Arc::new(Counters::default());
        let mut task = WriterTask {
            pool: pool.clone(),
            mode,
            writer,
            connection: None,
            checkpoints: None,
            since_checkpoint: 0,
            counters: counters.clone(),
            linger,
        };
        // Both are tracked through their channels: the writer stops when asked by `close` or
        // when every sender is gone, after writing what it was given (it holds no sender, so it
        // cannot keep itself alive); the checkpoint task stops when the writer does.
        if matches!(
            mode,
            WriterMode::Sqlite {
                own_connection: true
            }
        ) {
            let mut connection = pool
                .acquire()
                .await
                .map_err(StoreError::db("connect: the request writer's connection"))?
                .detach();
            sqlx::query("PRAGMA wal_autocheckpoint = 0")
                .execute(&mut connection)
                .await
                .map_err(StoreError::db("connect: the request writer's connection"))?;
            task.connection = Some(connection);
            let (nudge, nudges) = mpsc::channel(1);
            task.checkpoints = Some(nudge);
            tokio::spawn(checkpoint_when_nudged(pool, nudges));
        }
        tokio::spawn(task.run(receiver));
        Ok(Self { queue, counters })
    }

    /// Queues a request and waits until it is committed (or has failed).
    pub(crate) async fn record(
        &self,
        request: RequestRecord,
        conversation: Option<ConversationRow>,
    ) -> Result<(), StoreError> {
        let (reply, outcome) = oneshot::channel();
        let pending = Pending {
            request,
            conversation,
            reply: Some(reply),
        };
        self.queue
            .send(Message::Record(Box::new(pending)))
            .await
            .map_err(|_| closed())?;
        outcome.await.map_err(|_| closed())?
    }

    /// Queues a request without waiting for its commit: it is written within the linger (or
    /// sooner, with the next batch someone waits on or a reader's flush). Waits only while the
    /// queue is full, so a writer that falls behind slows its callers down instead of growing.
    pub(crate) async fn record_buffered(&self, request: RequestRecord) -> Result<(), StoreError> {
        let pending = Pending {
            request,
            conversation: None,
            reply: None,
        };
        self.queue
            .send(Message::Record(Box::new(pending)))
            .await
            .map_err(|_| closed())
    }

    /// Waits until everything queued before this call is written (or has failed), so a read
    /// after it sees every request recorded before it. Returns at once if the writer has stopped.
    pub(crate) async fn flush(&self) {
        let (ack, done) = oneshot::channel();
        if self.queue.send(Message::Flush(ack)).await.is_ok() {
            let _ = done.await;
        }
    }

    /// Writes everything queued, then stops the writer; later requests fail with
    /// [`StoreError::Database`]. Returns at once if the writer has already stopped.
    pub(crate) async fn close(&self) {
        let (ack, done) = oneshot::channel();
        if self.queue.send(Message::Close(ack)).await.is_ok() {
            let _ = done.await;
        }
    }

    /// (batches of more than one request begun, of which retried one by one).
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.counters.batches.load(Ordering::Relaxed),
            self.counters.retried.load(Ordering::Relaxed),
        )
    }
}

fn closed() -> StoreError {
    StoreError::Database("record_request: the store is closed".into())
}

struct WriterTask {
    pool: AnyPool,
    mode: WriterMode,
    writer: Option<Arc<tokio::sync::Mutex<()>>>,
    /// The SQLite connection of its own (`WriterMode::Sqlite { own_connection }`), unless a
    /// failed batch left it unusable and it is to be replaced.
    connection: Option<AnyConnection>,
    /// Nudges the checkpoint task, when there is one.
    checkpoints: Option<mpsc::Sender<()>>,
    /// Transactions committed since the last nudge.
    since_checkpoint: u32,
    counters: Arc<Counters>,
    /// How long buffered records may wait for company (see [`linger`]).
    linger: std::time::Duration,
}

/// Why a batch's transaction failed, and whether its entries may be retried alone.
enum BatchError {
    /// Nothing was committed, so each entry can be tried again.
    Retryable(StoreError),
    /// Report to every entry, retry none: no connection, or a Postgres commit that failed.
    Final(StoreError),
}

impl WriterTask {
    async fn run(mut self, mut receiver: mpsc::Receiver<Message>) {
        let mut messages = Vec::with_capacity(MAX_BATCH);
        let mut closing = Vec::new();
        // `recv_many` returns 0 only when the queue is empty and no request can come any more:
        // every sender is gone, or `close` closed the channel.
        while receiver.recv_many(&mut messages, MAX_BATCH).await > 0 {
            linger(&mut receiver, &mut messages, self.linger).await;
            let mut batch = Vec::with_capacity(messages.len());
            let mut flushed = Vec::new();
            for message in messages.drain(..) {
                match message {
                    Message::Record(pending) => batch.push(*pending),
                    Message::Flush(ack) => flushed.push(ack),
                    Message::Close(ack) => {
                        // Refuse new requests; those already queued are still written.
                        receiver.close();
                        closing.push(ack);
                    }
                }
            }
            self.write(batch).await;
            for ack in flushed {
                let _ = ack.send(());
            }
        }
        if let Some(connection) = self.connection.take()
            && let Err(error) = connection.close().await
        {
            tracing::warn!(%error, "could not close the request writer's connection");
        }
        for ack in closing {
            let _ = ack.send(());
        }
        tracing::debug!("request writer stopped");
    }

    /// Writes a batch and tells each caller how its request fared.
    async fn write(&mut self, batch: Vec<Pending>) {
        if batch.is_empty() {
            return;
        }
        if batch.len() > 1 {
            self.counters.batches.fetch_add(1, Ordering::Relaxed);
        }
        let error = match self.transaction(&batch).await {
            Ok(()) => {
                for pending in batch {
                    pending.answer(Ok(()));
                }
                return;
            }
            Err(BatchError::Retryable(error)) if batch.len() > 1 => error,
            Err(BatchError::Retryable(error) | BatchError::Final(error)) => {
                for pending in batch {
                    pending.answer(Err(error.clone()));
                }
                return;
            }
        };
        tracing::debug!(%error, requests = batch.len(), "request batch failed; retrying one by one");
        self.counters.retried.fetch_add(1, Ordering::Relaxed);
        for pending in batch {
            let outcome = match self.transaction(std::slice::from_ref(&pending)).await {
                Ok(()) => Ok(()),
                Err(BatchError::Retryable(error) | BatchError::Final(error)) => Err(error),
            };
            pending.answer(outcome);
        }
    }

    /// Writes `batch` in one transaction under the writer lock.
    async fn transaction(&mut self, batch: &[Pending]) -> Result<(), BatchError> {
        let lock = self.writer.clone();
        let _writer = match &lock {
            Some(lock) => Some(lock.lock().await),
            None => None,
        };
        match self.mode {
            WriterMode::Postgres => self.postgres(batch).await,
            WriterMode::Sqlite { own_connection } => self.sqlite(batch, own_connection).await,
        }
    }

    async fn postgres(&mut self, batch: &[Pending]) -> Result<(), BatchError> {
        let statements = plan(batch);
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| BatchError::Final(StoreError::db("record_request: begin")(e)))?;
        for statement in &statements {
            let sql = numbered(&statement.sql);
            bind(&sql, &statement.args)
                .execute(&mut *tx)
                .await
                .map_err(|e| BatchError::Retryable(StoreError::db(statement.operation)(e)))?;
        }
        tx.commit()
            .await
            .map_err(|e| BatchError::Final(StoreError::db("record_request: commit")(e)))
    }

    async fn sqlite(&mut self, batch: &[Pending], own_connection: bool) -> Result<(), BatchError> {
        let mut sql = String::from("BEGIN IMMEDIATE; ");
        let mut args = Vec::new();
        for statement in plan(batch) {
            sql.push_str(&statement.sql);
            sql.push_str("; ");
            args.extend(statement.args);
        }
        sql.push_str("COMMIT;");
        let acquire = |e| BatchError::Final(StoreError::db("record_request: connect")(e));
        if !own_connection {
            let mut connection = self.pool.acquire().await.map_err(acquire)?;
            return run_sqlite(&mut connection, &sql, &args)
                .await
                .map_err(|(error, _)| BatchError::Retryable(error));
        }
        let mut connection = match self.connection.take() {
            Some(connection) => connection,
            None => {
                let mut connection = self.pool.acquire().await.map_err(acquire)?.detach();
                sqlx::query("PRAGMA wal_autocheckpoint = 0")
                    .execute(&mut connection)
                    .await
                    .map_err(acquire)?;
                connection
            }
        };
        match run_sqlite(&mut connection, &sql, &args).await {
            Ok(()) => {
                self.connection = Some(connection);
                self.since_checkpoint += 1;
                if self.since_checkpoint >= CHECKPOINT_EVERY
                    && let Some(checkpoints) = &self.checkpoints
                {
                    // A full channel means a checkpoint is already due.
                    let _ = checkpoints.try_send(());
                    self.since_checkpoint = 0;
                }
                Ok(())
            }
            Err((error, rolled_back)) => {
                // A connection that may still hold the failed transaction is not reused.
                if rolled_back {
                    self.connection = Some(connection);
                }
                Err(BatchError::Retryable(error))
            }
        }
    }
}

/// While everything received is buffered records (nobody waits on them), keeps receiving for up
/// to `linger` ([`LINGER`] unless configured) or until the batch is full, so that a busy node
/// writes its routine-served requests in few, large transactions. A record someone waits for, a
/// flush or a close ends the wait at once.
async fn linger(
    receiver: &mut mpsc::Receiver<Message>,
    messages: &mut Vec<Message>,
    linger: std::time::Duration,
) {
    let until = tokio::time::Instant::now() + linger;
    while messages.len() < MAX_BATCH && messages.iter().all(Message::can_linger) {
        let room = MAX_BATCH - messages.len();
        match tokio::time::timeout_at(until, receiver.recv_many(messages, room)).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

/// Checkpoints the WAL of a SQLite file each time the writer asks, on a pooled connection.
///
/// The writer's own connection does not checkpoint when it commits (`wal_autocheckpoint = 0`):
/// a checkpoint syncs the files, and inside the writer it stalled every request behind it for
/// milliseconds (measured: p99 of a batch 4.5 ms with, 0.3 ms without). A `PASSIVE` checkpoint
/// here runs beside the writer without blocking it. Other connections keep SQLite's automatic
/// checkpoints for their own, rare, writes.
async fn checkpoint_when_nudged(pool: AnyPool, mut nudges: mpsc::Receiver<()>) {
    while nudges.recv().await.is_some() {
        if pool.is_closed() {
            break;
        }
        if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .execute(&pool)
            .await
        {
            tracing::warn!(%error, "could not checkpoint the SQLite write-ahead log");
        }
    }
}

/// Runs one SQLite batch query; on failure rolls back whatever it left open, and says whether
/// the connection is known to be clean again.
async fn run_sqlite(
    connection: &mut AnyConnection,
    sql: &str,
    args: &[Arg<'_>],
) -> Result<(), (StoreError, bool)> {
    let Err(error) = bind(sql, args).execute(&mut *connection).await else {
        return Ok(());
    };
    let error = StoreError::db("record_request: write the batch")(error);
    // A failed statement leaves the transaction open; a failed `BEGIN` (busy) or an I/O error
    // leaves none, and then this `ROLLBACK` fails harmlessly.
    let rolled_back = sqlx::query("ROLLBACK")
        .execute(&mut *connection)
        .await
        .is_ok();
    Err((error, rolled_back))
}

/// A value bound to a placeholder of a planned statement.
#[derive(Debug, Clone)]
enum Arg<'a> {
    Int(i64),
    MaybeInt(Option<i64>),
    Real(f64),
    Text(&'a str),
    MaybeText(Option<&'a str>),
    String(String),
    MaybeString(Option<String>),
}

/// One statement of a batch, with `?` placeholders, and the values for them in order.
struct Statement<'a> {
    sql: String,
    args: Vec<Arg<'a>>,
    /// What failed, when it fails.
    operation: &'static str,
}

fn bind<'q>(sql: &'q str, args: &'q [Arg<'q>]) -> Query<'q, Any, AnyArguments<'q>> {
    let mut query = sqlx::query(sql);
    for arg in args {
        query = match arg {
            Arg::Int(value) => query.bind(*value),
            Arg::MaybeInt(value) => query.bind(*value),
            Arg::Real(value) => query.bind(*value),
            Arg::Text(value) => query.bind(*value),
            Arg::MaybeText(value) => query.bind(*value),
            Arg::String(value) => query.bind(value.as_str()),
            Arg::MaybeString(value) => query.bind(value.as_deref()),
        };
    }
    query
}

/// The statement with its `?` placeholders numbered `$1, $2, ...` (Postgres). The planned SQL
/// has no other question marks.
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + sql.len() / 4);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// The statements that write a batch, in order: requests, routine counters, usage counters,
/// conversations.
fn plan(batch: &[Pending]) -> Vec<Statement<'_>> {
    let mut statements = Vec::new();
    for chunk in batch.chunks(ROWS_PER_INSERT) {
        let mut sql = String::from(
            "INSERT INTO requests (query_id, node, protocol_hash, channel, path, status, \
             llm_calls, prompt_tokens, completion_tokens, cost_usd, latency_ms, created_at, \
             routine_id, routine_error, client, error_detail) VALUES ",
        );
        let mut args = Vec::with_capacity(chunk.len() * 16);
        for (row, Pending { request, .. }) in chunk.iter().enumerate() {
            if row > 0 {
                sql.push_str(", ");
            }
            sql.push_str("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
            args.extend([
                Arg::Text(&request.query_id),
                Arg::Text(&request.node),
                Arg::MaybeString(request.protocol_hash.map(|hash| hash.to_hex())),
                Arg::Text(&request.channel),
                Arg::Text(request.path.as_str()),
                Arg::Text(&request.status),
                Arg::Int(request.llm_calls),
                Arg::Int(request.prompt_tokens),
                Arg::Int(request.completion_tokens),
                Arg::Real(request.cost_usd),
                Arg::Int(request.latency_ms),
                Arg::Int(request.created_at_ms),
                Arg::MaybeInt(request.routine_id),
                Arg::MaybeText(request.routine_error.as_deref()),
                Arg::MaybeText(request.client.as_deref()),
                Arg::MaybeText(request.error_detail.as_deref()),
            ]);
        }
        statements.push(Statement {
            sql,
            args,
            operation: "record_request: insert requests",
        });
    }

    // Counting a removed routine's runs updates nothing, and is no error.
    for (routine_id, tally) in routine_tallies(batch) {
        statements.push(match tally.last_failure {
            None => Statement {
                sql: "UPDATE routines SET runs = runs + ? WHERE id = ?".into(),
                args: vec![Arg::Int(tally.runs), Arg::Int(routine_id)],
                operation: "record_request: count the routine runs",
            },
            Some((error, at_ms)) => Statement {
                sql: "UPDATE routines SET runs = runs + ?, failures = failures + ?, \
                      last_error = ?, last_failure_at = ? WHERE id = ?"
                    .into(),
                args: vec![
                    Arg::Int(tally.runs),
                    Arg::Int(tally.failures),
                    Arg::Text(error),
                    Arg::Int(at_ms),
                    Arg::Int(routine_id),
                ],
                operation: "record_request: count the routine runs",
            },
        });
    }

    for (hash, tally) in usage_tallies(batch) {
        // `CASE` rather than `max()`/`GREATEST()`, which differ between the dialects.
        statements.push(Statement {
            sql: "INSERT INTO protocol_usage (hash, requests, llm, routine, fallback, rejected, \
                  failed, llm_prompt_tokens, llm_completion_tokens, llm_cost_usd, last_used) \
                  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                  ON CONFLICT (hash) DO UPDATE SET \
                  requests = protocol_usage.requests + excluded.requests, \
                  llm = protocol_usage.llm + excluded.llm, \
                  routine = protocol_usage.routine + excluded.routine, \
                  fallback = protocol_usage.fallback + excluded.fallback, \
                  rejected = protocol_usage.rejected + excluded.rejected, \
                  failed = protocol_usage.failed + excluded.failed, \
                  llm_prompt_tokens = \
                      protocol_usage.llm_prompt_tokens + excluded.llm_prompt_tokens, \
                  llm_completion_tokens = \
                      protocol_usage.llm_completion_tokens + excluded.llm_completion_tokens, \
                  llm_cost_usd = protocol_usage.llm_cost_usd + excluded.llm_cost_usd, \
                  last_used = CASE WHEN excluded.last_used > protocol_usage.last_used \
                      THEN excluded.last_used ELSE protocol_usage.last_used END"
                .into(),
            args: vec![
                Arg::String(hash),
                Arg::Int(tally.requests),
                Arg::Int(tally.llm),
                Arg::Int(tally.routine),
                Arg::Int(tally.fallback),
                Arg::Int(tally.rejected),
                Arg::Int(tally.failed),
                Arg::Int(tally.prompt_tokens),
                Arg::Int(tally.completion_tokens),
                Arg::Real(tally.cost_usd),
                Arg::Int(tally.last_used_ms),
            ],
            operation: "record_request: bump usage",
        });
    }

    for conversation in batch.iter().filter_map(|p| p.conversation.as_ref()) {
        statements.push(Statement {
            sql: "INSERT INTO conversations \
                  (id, kind, protocol_hash, messages, created_at, last_active, expires_at) \
                  VALUES (?, ?, ?, ?, ?, ?, ?) \
                  ON CONFLICT (id) DO UPDATE SET messages = excluded.messages, \
                  last_active = excluded.last_active, expires_at = excluded.expires_at"
                .into(),
            args: vec![
                Arg::Text(&conversation.id),
                Arg::Text(conversation.kind),
                Arg::MaybeText(conversation.protocol_hash.as_deref()),
                Arg::Text(&conversation.messages),
                Arg::Int(conversation.created_at_ms),
                Arg::Int(conversation.last_active_ms),
                Arg::Int(conversation.expires_at_ms),
            ],
            operation: "record_request: upsert conversation",
        });
    }
    statements
}

/// A routine's runs in one batch.
#[derive(Debug, Default)]
struct RoutineTally<'a> {
    runs: i64,
    failures: i64,
    /// The error and time of the batch's last failure, in arrival order.
    last_failure: Option<(&'a str, i64)>,
}

/// The runs per routine, by id (so that rows are locked in one order).
fn routine_tallies(batch: &[Pending]) -> BTreeMap<i64, RoutineTally<'_>> {
    let mut tallies: BTreeMap<i64, RoutineTally<'_>> = BTreeMap::new();
    for Pending { request, .. } in batch {
        let Some(routine_id) = request.routine_id else {
            continue;
        };
        let tally = tallies.entry(routine_id).or_default();
        tally.runs += 1;
        if let Some(error) = &request.routine_error {
            tally.failures += 1;
            tally.last_failure = Some((error.as_str(), request.created_at_ms));
        }
    }
    tallies
}

/// A protocol's usage in one batch; the columns of `protocol_usage`.
#[derive(Debug, Default)]
struct UsageTally {
    requests: i64,
    llm: i64,
    routine: i64,
    fallback: i64,
    rejected: i64,
    failed: i64,
    prompt_tokens: i64,
    completion_tokens: i64,
    cost_usd: f64,
    last_used_ms: i64,
}

/// The usage per protocol (hex hash, sorted so that rows are locked in one order).
fn usage_tallies(batch: &[Pending]) -> BTreeMap<String, UsageTally> {
    let mut tallies: BTreeMap<String, UsageTally> = BTreeMap::new();
    for Pending { request, .. } in batch {
        let Some(hash) = request.protocol_hash else {
            continue;
        };
        let tally = tallies.entry(hash.to_hex()).or_insert(UsageTally {
            last_used_ms: request.created_at_ms,
            ..UsageTally::default()
        });
        tally.requests += 1;
        match request.path {
            RequestPath::Llm => tally.llm += 1,
            RequestPath::Routine => tally.routine += 1,
            RequestPath::Fallback => tally.fallback += 1,
            RequestPath::Rejected => tally.rejected += 1,
            RequestPath::Failed => tally.failed += 1,
        }
        tally.prompt_tokens += request.prompt_tokens;
        tally.completion_tokens += request.completion_tokens;
        tally.cost_usd += request.cost_usd;
        tally.last_used_ms = tally.last_used_ms.max(request.created_at_ms);
    }
    tallies
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(n: i64, routine_error: Option<&str>, created_at_ms: i64) -> Pending {
        let (reply, _) = oneshot::channel();
        let reply = Some(reply);
        Pending {
            request: RequestRecord {
                query_id: format!("q{n}"),
                node: "alice".into(),
                protocol_hash: Some(agora_protocol::ProtocolHash::from_digest([1; 20])),
                channel: "protocol".into(),
                path: if routine_error.is_some() {
                    RequestPath::Fallback
                } else {
                    RequestPath::Routine
                },
                status: "success".into(),
                llm_calls: 0,
                prompt_tokens: n,
                completion_tokens: 0,
                cost_usd: 0.5,
                latency_ms: 1,
                created_at_ms,
                routine_id: Some(7),
                routine_error: routine_error.map(str::to_string),
                client: None,
                error_detail: None,
            },
            conversation: None,
            reply,
        }
    }

    #[test]
    fn a_batch_counts_as_its_requests_one_after_the_other() {
        // The later failure in arrival order wins, even with an earlier timestamp, as it would
        // recorded alone; last_used is the latest timestamp.
        let batch = [
            pending(1, None, 10),
            pending(2, Some("first"), 50),
            pending(3, Some("second"), 20),
            pending(4, None, 30),
        ];
        let routines = routine_tallies(&batch);
        let tally = &routines[&7];
        assert_eq!((tally.runs, tally.failures), (4, 2));
        assert_eq!(tally.last_failure, Some(("second", 20)));
        let usage = usage_tallies(&batch);
        let tally = usage.values().next().expect("one protocol");
        assert_eq!(usage.len(), 1);
        assert_eq!((tally.requests, tally.routine, tally.fallback), (4, 2, 2));
        assert_eq!((tally.prompt_tokens, tally.cost_usd), (10, 2.0));
        assert_eq!(tally.last_used_ms, 50);
    }

    #[tokio::test]
    async fn an_in_memory_database_shares_its_one_connection_with_the_writer() {
        let store = crate::Store::connect("sqlite::memory:")
            .await
            .expect("memory db opens");
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..50 {
            let store = store.clone();
            tasks.spawn(async move {
                let pending = pending(n, None, n);
                store
                    .requests()
                    .record_request(&pending.request, None)
                    .await
            });
        }
        while let Some(joined) = tasks.join_next().await {
            joined.expect("task finishes").expect("recorded");
        }
        let hash = agora_protocol::ProtocolHash::from_digest([1; 20]);
        assert_eq!(
            store.requests().usage(&hash).await.expect("usage").requests,
            50
        );
        assert_eq!(
            store
                .requests()
                .recent_requests(100)
                .await
                .expect("log")
                .len(),
            50
        );
        store.close().await;
    }

    #[test]
    fn postgres_placeholders_are_numbered_in_order() {
        assert_eq!(
            numbered("INSERT INTO t VALUES (?, ?), (?, ?) ON CONFLICT DO NOTHING"),
            "INSERT INTO t VALUES ($1, $2), ($3, $4) ON CONFLICT DO NOTHING"
        );
    }
}
