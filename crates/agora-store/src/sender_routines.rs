//! Sender-side routines: the examples they learn from, the routines, and every attempt.
//!
//! Everything here is keyed by [`SenderKey`]: one task sent to one target under one protocol.
//! Examples are the LLM's successful protocol runs (task data, body sent, reply received,
//! validated output), bounded per key like the receiver's examples: adding one prunes the
//! oldest in the same transaction. A routine is stored only after it passed its examination;
//! at most one per key is active (storing one disables the others in the same transaction, and
//! a partial unique index enforces it). Under the `review` activation policy it is stored
//! `pending` instead, and only the operator's approval, recorded in the same transaction, makes
//! it active. Attempts are kept for good, as the audit trail; they and the queries over them are
//! the receiver routines' ones (`crate::programming`), over this key.

use agora_protocol::ProtocolHash;
use serde_json::Value;
use sqlx::any::AnyRow;

use crate::programming::{get, key, prune_examples};
use crate::records::parse_hash;
use crate::sql::{Columns, commit, execute, fetch_all, fetch_optional};
use crate::{ReviewDecision, RoutineStatus, SenderRecords, SenderRoutineAttempt, StoreError};

const EXAMPLE_COLUMNS: &str =
    "id, target, task, protocol_hash, data, body, reply, output, created_at";
const ROUTINE_COLUMNS: &str = "id, target, task, protocol_hash, source, status, runs, failures, \
     last_error, created_at, updated_at";
const REVIEW_COLUMNS: &str = "id, sender_routine_id, target, task, protocol_hash, decision, \
     reason, reviewer, created_at";

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
    /// Whether it is used: `Active`; `Disabled` after run-time failures or when replaced;
    /// `Pending` while it waits for the operator's review, `Rejected` after it.
    pub status: RoutineStatus,
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

/// The operator's decision on a pending sender routine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SenderRoutineReview {
    /// Assigned by the store (0 in a new review).
    pub id: i64,
    /// The sender routine decided on.
    pub sender_routine_id: i64,
    /// Its key.
    pub key: SenderKey,
    /// The decision.
    pub decision: ReviewDecision,
    /// Why, in the reviewer's words (required for a rejection; for an edit, the new routine).
    pub reason: String,
    /// Who decided.
    pub reviewer: String,
    /// When (Unix ms).
    pub decided_at_ms: i64,
}

impl key::Columns for SenderKey {
    const EXAMPLES: &'static str = "sender_examples";
    const ATTEMPTS: &'static str = "sender_routine_attempts";
    const COLUMNS: &'static [&'static str] = &["target", "task", "protocol_hash"];

    fn bind<'q>(&'q self, query: key::AnyQuery<'q>) -> key::AnyQuery<'q> {
        query
            .bind(&self.target)
            .bind(&self.task)
            .bind(self.protocol_hash.to_hex())
    }

    fn read(row: &AnyRow, table: &str) -> Result<Self, StoreError> {
        let hash: String = get(row, "protocol_hash")?;
        Ok(SenderKey {
            target: get(row, "target")?,
            task: get(row, "task")?,
            protocol_hash: parse_hash(&format!("{table}.protocol_hash"), &hash)?,
        })
    }
}

impl SenderRecords<'_> {
    /// Records a sender example and keeps only the key's newest `keep`; returns its id.
    pub async fn add_sender_example(
        self,
        example: &SenderExample,
        keep: i64,
    ) -> Result<i64, StoreError> {
        let _writer = self.store.writer().await;
        let key = &example.key;
        let hash = key.protocol_hash.to_hex();
        let mut tx = self.store.begin("add_sender_example").await?;
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
        let id = Columns::new(&row, "add_sender_example").get("id")?;
        prune_examples(&mut tx, key, keep, "add_sender_example: prune").await?;
        commit(tx, "add_sender_example").await?;
        Ok(id)
    }

    /// The key's newest `limit` examples, oldest first.
    pub async fn sender_examples(
        self,
        key: &SenderKey,
        limit: i64,
    ) -> Result<Vec<SenderExample>, StoreError> {
        self.store
            .programming()
            .newest_examples(key, limit, EXAMPLE_COLUMNS, example_from_row)
            .await
    }

    /// Stores a routine that passed; returns its id. It is active, disabling the key's other
    /// routines, unless `pending` (the `review` activation policy): then it waits for
    /// [`review_sender_routine`](Self::review_sender_routine) and the active one stays.
    pub async fn add_sender_routine(
        self,
        key: &SenderKey,
        source: &str,
        component: &[u8],
        now_ms: i64,
        pending: bool,
    ) -> Result<i64, StoreError> {
        let _writer = self.store.writer().await;
        let mut tx = self.store.begin("add_sender_routine").await?;
        if !pending {
            disable_active(&mut tx, key, now_ms).await?;
        }
        let status = match pending {
            true => RoutineStatus::Pending,
            false => RoutineStatus::Active,
        };
        let id = insert_routine(&mut tx, key, (source, component), status, now_ms).await?;
        commit(tx, "add_sender_routine").await?;
        Ok(id)
    }

    /// The key's active routine, if it has one.
    pub async fn active_sender_routine(
        self,
        key: &SenderKey,
    ) -> Result<Option<SenderRoutine>, StoreError> {
        self.newest_with_status(key, RoutineStatus::Active).await
    }

    /// The key's newest routine waiting for the operator's review, if it has one.
    pub async fn pending_sender_routine(
        self,
        key: &SenderKey,
    ) -> Result<Option<SenderRoutine>, StoreError> {
        self.newest_with_status(key, RoutineStatus::Pending).await
    }

    async fn newest_with_status(
        self,
        key: &SenderKey,
        status: RoutineStatus,
    ) -> Result<Option<SenderRoutine>, StoreError> {
        let sql = format!(
            "SELECT {ROUTINE_COLUMNS} FROM sender_routines WHERE target = $1 AND task = $2 \
             AND protocol_hash = $3 AND status = $4 ORDER BY id DESC LIMIT 1"
        );
        let statement = sqlx::query(&sql)
            .bind(&key.target)
            .bind(&key.task)
            .bind(key.protocol_hash.to_hex())
            .bind(status.as_str());
        fetch_optional(
            &self.store.pool,
            statement,
            "sender_routine_with_status",
            routine_from_row,
        )
        .await
    }

    /// One sender routine (without its component), if it exists.
    pub async fn sender_routine(self, id: i64) -> Result<Option<SenderRoutine>, StoreError> {
        let sql = format!("SELECT {ROUTINE_COLUMNS} FROM sender_routines WHERE id = $1");
        let statement = sqlx::query(&sql).bind(id);
        fetch_optional(
            &self.store.pool,
            statement,
            "sender_routine",
            routine_from_row,
        )
        .await
    }

    /// Records `review` and sets its routine's status: approved makes it active (disabling the
    /// key's active routine), rejected or edited makes it rejected. An edit comes with the
    /// edited routine (source and component), stored pending in the same transaction, and the
    /// review's reason names it. Only a pending routine can be reviewed
    /// ([`StoreError::Conflict`] otherwise, and for an edit without its routine); `None` when
    /// there is no such routine. Returns the routine as it is now, or the edit's new routine.
    /// The key of `review` is the routine's, whatever it says.
    pub async fn review_sender_routine(
        self,
        review: &SenderRoutineReview,
        edit: Option<(&str, &[u8])>,
    ) -> Result<Option<SenderRoutine>, StoreError> {
        if (review.decision == ReviewDecision::Edited) != edit.is_some() {
            return Err(StoreError::Conflict(
                "an edit, and only an edit, comes with the edited routine".into(),
            ));
        }
        let _writer = self.store.writer().await;
        let mut tx = self.store.begin("review_sender_routine").await?;
        let sql = format!("SELECT {ROUTINE_COLUMNS} FROM sender_routines WHERE id = $1");
        let statement = sqlx::query(&sql).bind(review.sender_routine_id);
        let found = fetch_optional(
            &mut *tx,
            statement,
            "review_sender_routine: select",
            routine_from_row,
        )
        .await?;
        let Some(routine) = found else {
            return Ok(None);
        };
        if routine.status != RoutineStatus::Pending {
            return Err(StoreError::Conflict(format!(
                "the sender routine {} is {}, not pending: only a pending routine can be reviewed",
                routine.id, routine.status
            )));
        }
        let key = &routine.key;
        let now = review.decided_at_ms;
        let status = match review.decision {
            ReviewDecision::Approved => {
                disable_active(&mut tx, key, now).await?;
                RoutineStatus::Active
            }
            ReviewDecision::Rejected | ReviewDecision::Edited => RoutineStatus::Rejected,
        };
        let (edited, reason) = match edit {
            Some(edit) => {
                let id = insert_routine(&mut tx, key, edit, RoutineStatus::Pending, now).await?;
                (Some(id), format!("edited: the sender routine {id}"))
            }
            None => (None, review.reason.clone()),
        };
        let update =
            sqlx::query("UPDATE sender_routines SET status = $2, updated_at = $3 WHERE id = $1")
                .bind(routine.id)
                .bind(status.as_str())
                .bind(review.decided_at_ms);
        execute(&mut *tx, update, "review_sender_routine: update").await?;
        let insert = sqlx::query(
            "INSERT INTO sender_routine_reviews (sender_routine_id, target, task, protocol_hash, \
             decision, reason, reviewer, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(routine.id)
        .bind(&key.target)
        .bind(&key.task)
        .bind(key.protocol_hash.to_hex())
        .bind(review.decision.as_str())
        .bind(reason)
        .bind(&review.reviewer)
        .bind(now);
        execute(&mut *tx, insert, "review_sender_routine: insert").await?;
        commit(tx, "review_sender_routine").await?;
        self.sender_routine(edited.unwrap_or(routine.id)).await
    }

    /// The reviews of `key`'s routines (every key's when `None`), oldest first.
    pub async fn sender_reviews(
        self,
        key: Option<&SenderKey>,
    ) -> Result<Vec<SenderRoutineReview>, StoreError> {
        let read = |row: &AnyRow| {
            let decision: String = get(row, "decision")?;
            Ok(SenderRoutineReview {
                id: get(row, "id")?,
                sender_routine_id: get(row, "sender_routine_id")?,
                key: <SenderKey as key::Columns>::read(row, "sender_routine_reviews")?,
                decision: ReviewDecision::from_column(
                    "sender_routine_reviews.decision",
                    &decision,
                )?,
                reason: get(row, "reason")?,
                reviewer: get(row, "reviewer")?,
                decided_at_ms: get(row, "created_at")?,
            })
        };
        let pool = &self.store.pool;
        match key {
            Some(key) => {
                let sql = format!(
                    "SELECT {REVIEW_COLUMNS} FROM sender_routine_reviews WHERE target = $1 \
                     AND task = $2 AND protocol_hash = $3 ORDER BY id"
                );
                let statement = sqlx::query(&sql)
                    .bind(&key.target)
                    .bind(&key.task)
                    .bind(key.protocol_hash.to_hex());
                fetch_all(pool, statement, "sender_reviews", read).await
            }
            None => {
                let sql =
                    format!("SELECT {REVIEW_COLUMNS} FROM sender_routine_reviews ORDER BY id");
                fetch_all(pool, sqlx::query(&sql), "sender_reviews", read).await
            }
        }
    }

    /// Every sender routine, oldest first, without components.
    pub async fn sender_routines(self) -> Result<Vec<SenderRoutine>, StoreError> {
        let sql = format!("SELECT {ROUTINE_COLUMNS} FROM sender_routines ORDER BY id");
        let statement = sqlx::query(&sql);
        fetch_all(
            &self.store.pool,
            statement,
            "sender_routines",
            routine_from_row,
        )
        .await
    }

    /// The built component of a sender routine.
    pub async fn sender_routine_component(self, id: i64) -> Result<Vec<u8>, StoreError> {
        let statement = sqlx::query("SELECT component FROM sender_routines WHERE id = $1").bind(id);
        fetch_optional(
            &self.store.pool,
            statement,
            "sender_routine_component",
            |row| Columns::new(row, "sender_routine_component: read").get("component"),
        )
        .await?
        .ok_or_else(|| StoreError::corrupt(format!("no sender routine {id}")))
    }

    /// Counts a run of a sender routine (a failure when `error` is set); returns its failures.
    pub async fn record_sender_routine_run(
        self,
        id: i64,
        error: Option<&str>,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let _writer = self.store.writer().await;
        let failed = i64::from(error.is_some());
        let statement = sqlx::query(
            "UPDATE sender_routines SET runs = runs + 1, failures = failures + $2, \
             last_error = COALESCE($3, last_error), updated_at = $4 WHERE id = $1 \
             RETURNING failures",
        )
        .bind(id)
        .bind(failed)
        .bind(error)
        .bind(now_ms);
        let failures = fetch_optional(
            &self.store.pool,
            statement,
            "record_sender_routine_run",
            |row| Columns::new(row, "record_sender_routine_run: read").get("failures"),
        )
        .await?;
        Ok(failures.unwrap_or(0))
    }

    /// Disables a sender routine.
    pub async fn disable_sender_routine(self, id: i64, now_ms: i64) -> Result<(), StoreError> {
        let _writer = self.store.writer().await;
        let statement = sqlx::query(
            "UPDATE sender_routines SET status = 'disabled', updated_at = $2 WHERE id = $1",
        )
        .bind(id)
        .bind(now_ms);
        execute(&self.store.pool, statement, "disable_sender_routine").await?;
        Ok(())
    }

    /// Every sender routine attempt, oldest first.
    pub async fn sender_attempts(self) -> Result<Vec<SenderRoutineAttempt>, StoreError> {
        self.store.programming().attempts::<SenderKey>(None).await
    }
}

fn json_column(row: &AnyRow, column: &'static str) -> Result<Value, StoreError> {
    let text: String = get(row, column)?;
    serde_json::from_str(&text)
        .map_err(|error| StoreError::Corrupt(format!("sender_examples.{column}: {error}")))
}

fn example_from_row(row: &AnyRow) -> Result<SenderExample, StoreError> {
    Ok(SenderExample {
        id: get(row, "id")?,
        key: <SenderKey as key::Columns>::read(row, "sender_examples")?,
        data: json_column(row, "data")?,
        body: get(row, "body")?,
        reply: get(row, "reply")?,
        output: json_column(row, "output")?,
        created_at_ms: get(row, "created_at")?,
    })
}

/// Inserts a routine for `key` (its source and component) with `status`; returns its id.
async fn insert_routine(
    connection: &mut sqlx::AnyConnection,
    key: &SenderKey,
    (source, component): (&str, &[u8]),
    status: RoutineStatus,
    now_ms: i64,
) -> Result<i64, StoreError> {
    let row = sqlx::query(
        "INSERT INTO sender_routines (target, task, protocol_hash, source, component, status, \
         runs, failures, last_error, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, 0, 0, NULL, $7, $7) RETURNING id",
    )
    .bind(&key.target)
    .bind(&key.task)
    .bind(key.protocol_hash.to_hex())
    .bind(source)
    .bind(component)
    .bind(status.as_str())
    .bind(now_ms)
    .fetch_one(&mut *connection)
    .await
    .map_err(StoreError::db("sender routines: insert"))?;
    Columns::new(&row, "sender routines: insert").get("id")
}

/// Disables `key`'s active routine, in `tx`.
async fn disable_active(
    connection: &mut sqlx::AnyConnection,
    key: &SenderKey,
    now_ms: i64,
) -> Result<(), StoreError> {
    let statement = sqlx::query(
        "UPDATE sender_routines SET status = 'disabled', updated_at = $4 WHERE target = $1 \
         AND task = $2 AND protocol_hash = $3 AND status = 'active'",
    )
    .bind(&key.target)
    .bind(&key.task)
    .bind(key.protocol_hash.to_hex())
    .bind(now_ms);
    execute(
        &mut *connection,
        statement,
        "sender routines: disable the active one",
    )
    .await?;
    Ok(())
}

fn routine_from_row(row: &AnyRow) -> Result<SenderRoutine, StoreError> {
    let status: String = get(row, "status")?;
    Ok(SenderRoutine {
        id: get(row, "id")?,
        key: <SenderKey as key::Columns>::read(row, "sender_routines")?,
        source: get(row, "source")?,
        status: RoutineStatus::from_column("sender_routines.status", &status)?,
        runs: get(row, "runs")?,
        failures: get(row, "failures")?,
        last_error: get(row, "last_error")?,
        created_at_ms: get(row, "created_at")?,
        updated_at_ms: get(row, "updated_at")?,
    })
}
