//! The operator's reviews of pending routines (the `review` activation policy): approving one
//! makes it active, rejecting one keeps it as `rejected` with the reason the programmer reads
//! next, and an edit replaces it. The status change and the record of the decision, with who
//! made it, are one transaction, so no routine is ever active without its approval on record.

use agora_protocol::ProtocolHash;

use crate::records::parse_hash;
use crate::routines::{ROUTINE_COLUMNS, bump_version, disable_active, routine_from_row};
use crate::sql::{Columns, commit, execute, fetch_all, fetch_optional};
use crate::{
    Programming, ReviewDecision, Routine, RoutineReview, RoutineStatus, StoreError,
    sql::from_columns,
};

const REVIEW_COLUMNS: &str =
    "id, routine_id, protocol_hash, decision, reason, reviewer, created_at";

impl Programming<'_> {
    /// Records `review` and sets its routine's status: approved makes it active (disabling the
    /// protocol's active routine), rejected or edited makes it rejected. Only a pending routine
    /// can be reviewed ([`StoreError::Conflict`] otherwise); `None` when there is no such
    /// routine. Returns the routine as it is now.
    pub async fn review_routine(
        self,
        review: &RoutineReview,
    ) -> Result<Option<Routine>, StoreError> {
        let store = self.store;
        let _writer = store.writer().await;
        let mut tx = store.begin("review_routine").await?;
        let sql = format!("SELECT {ROUTINE_COLUMNS} FROM routines WHERE id = $1");
        let statement = sqlx::query(&sql).bind(review.routine_id);
        let routine = fetch_optional(
            &mut *tx,
            statement,
            "review_routine: select",
            routine_from_row,
        )
        .await?;
        let Some(routine) = routine else {
            return Ok(None);
        };
        if routine.status != RoutineStatus::Pending {
            return Err(StoreError::Conflict(format!(
                "the routine {:?} is {}, not pending: only a pending routine can be reviewed",
                routine.name, routine.status
            )));
        }
        let hash = routine.protocol_hash.to_hex();
        let status = match review.decision {
            ReviewDecision::Approved => {
                disable_active(&mut tx, &hash, review.decided_at_ms).await?;
                RoutineStatus::Active
            }
            ReviewDecision::Rejected | ReviewDecision::Edited => RoutineStatus::Rejected,
        };
        let update = sqlx::query("UPDATE routines SET status = $2, updated_at = $3 WHERE id = $1")
            .bind(routine.id)
            .bind(status.as_str())
            .bind(review.decided_at_ms);
        execute(&mut *tx, update, "review_routine: update").await?;
        let insert = sqlx::query(
            "INSERT INTO routine_reviews \
             (routine_id, protocol_hash, decision, reason, reviewer, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(routine.id)
        .bind(hash)
        .bind(review.decision.as_str())
        .bind(&review.reason)
        .bind(&review.reviewer)
        .bind(review.decided_at_ms);
        execute(&mut *tx, insert, "review_routine: insert").await?;
        bump_version(&mut tx).await?;
        commit(tx, "review_routine").await?;
        store.routine(routine.id).await
    }

    /// The reviews of `hash`'s routines (every protocol's when `None`), oldest first.
    pub async fn reviews(
        self,
        hash: Option<&ProtocolHash>,
    ) -> Result<Vec<RoutineReview>, StoreError> {
        let (sql, bound) = match hash {
            Some(hash) => (
                format!(
                    "SELECT {REVIEW_COLUMNS} FROM routine_reviews WHERE protocol_hash = $1 \
                     ORDER BY id"
                ),
                Some(hash.to_hex()),
            ),
            None => (
                format!("SELECT {REVIEW_COLUMNS} FROM routine_reviews ORDER BY id"),
                None,
            ),
        };
        let mut statement = sqlx::query(&sql);
        if let Some(bound) = bound {
            statement = statement.bind(bound);
        }
        fetch_all(&self.store.pool, statement, "reviews: select", |row| {
            let columns = Columns::new(row, "routine_reviews: read column");
            let hash: String = columns.get("protocol_hash")?;
            let decision: String = columns.get("decision")?;
            Ok(from_columns!(columns => RoutineReview {
                id, routine_id, reason, reviewer,
                protocol_hash: parse_hash("routine_reviews.protocol_hash", &hash)?,
                decision: ReviewDecision::from_column("routine_reviews.decision", &decision)?,
                decided_at_ms: columns.get("created_at")?,
            }))
        })
        .await
    }
}
