//! Shadow checks of active routines: each check's two answers and verdict (a routine's newest
//! [`SHADOW_CHECKS_KEPT`]), and the tally per routine the dashboard and the metrics read.

use crate::records::parse_hash;
use crate::sql::{Columns, commit, execute, fetch_all, fetch_optional, from_columns};
use crate::{Programming, ShadowCheck, ShadowTally, StoreError};

/// The checks kept per routine, newest first; older ones are deleted (their tally stays).
pub const SHADOW_CHECKS_KEPT: i64 = 200;

const SHADOW_COLUMNS: &str = "id, routine_id, protocol_hash, query_id, body, routine_reply, \
                              llm_reply, agreed, difference, cost_usd, created_at";

impl Programming<'_> {
    /// Records a shadow check and counts it in its routine's tally, in one transaction, and
    /// deletes the routine's checks older than the newest [`SHADOW_CHECKS_KEPT`].
    pub async fn record_shadow_check(self, check: &ShadowCheck) -> Result<(), StoreError> {
        let store = self.store;
        let _writer = store.writer().await;
        let mut tx = store.begin("record_shadow_check").await?;
        let insert = sqlx::query(
            "INSERT INTO shadow_checks (routine_id, protocol_hash, query_id, body, \
             routine_reply, llm_reply, agreed, difference, cost_usd, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(check.routine_id)
        .bind(check.protocol_hash.to_hex())
        .bind(&check.query_id)
        .bind(&check.body)
        .bind(&check.routine_reply)
        .bind(&check.llm_reply)
        .bind(i64::from(check.agreed))
        .bind(&check.difference)
        .bind(check.cost_usd)
        .bind(check.created_at_ms);
        execute(&mut *tx, insert, "record_shadow_check: insert").await?;
        let tally = sqlx::query(
            "INSERT INTO shadow_tallies (routine_id, checks, disagreements, cost_usd) \
             VALUES ($1, 1, $2, $3) \
             ON CONFLICT (routine_id) DO UPDATE SET checks = shadow_tallies.checks + 1, \
             disagreements = shadow_tallies.disagreements + excluded.disagreements, \
             cost_usd = shadow_tallies.cost_usd + excluded.cost_usd",
        )
        .bind(check.routine_id)
        .bind(i64::from(!check.agreed))
        .bind(check.cost_usd);
        execute(&mut *tx, tally, "record_shadow_check: tally").await?;
        let prune = sqlx::query(
            "DELETE FROM shadow_checks WHERE routine_id = $1 AND id <= \
             (SELECT id FROM shadow_checks WHERE routine_id = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
        )
        .bind(check.routine_id)
        .bind(SHADOW_CHECKS_KEPT);
        execute(&mut *tx, prune, "record_shadow_check: prune").await?;
        commit(tx, "record_shadow_check").await
    }

    /// A routine's latest shadow checks, newest first; only disagreements with `disagreements`.
    pub async fn shadow_checks(
        self,
        routine_id: i64,
        disagreements: bool,
        limit: i64,
    ) -> Result<Vec<ShadowCheck>, StoreError> {
        let only = if disagreements { " AND agreed = 0" } else { "" };
        let sql = format!(
            "SELECT {SHADOW_COLUMNS} FROM shadow_checks WHERE routine_id = $1{only} \
             ORDER BY id DESC LIMIT $2"
        );
        let statement = sqlx::query(&sql).bind(routine_id).bind(limit);
        fetch_all(
            &self.store.pool,
            statement,
            "shadow_checks: select",
            check_from_row,
        )
        .await
    }

    /// Every shadow check recorded after the check `id`, oldest first (0: all of them).
    pub async fn shadow_checks_after(self, id: i64) -> Result<Vec<ShadowCheck>, StoreError> {
        let sql = format!("SELECT {SHADOW_COLUMNS} FROM shadow_checks WHERE id > $1 ORDER BY id");
        let statement = sqlx::query(&sql).bind(id);
        fetch_all(
            &self.store.pool,
            statement,
            "shadow_checks_after: select",
            check_from_row,
        )
        .await
    }

    /// One routine's tally; `None` before its first check.
    pub async fn shadow_tally(self, routine_id: i64) -> Result<Option<ShadowTally>, StoreError> {
        let statement = sqlx::query(
            "SELECT routine_id, checks, disagreements, cost_usd FROM shadow_tallies \
             WHERE routine_id = $1",
        )
        .bind(routine_id);
        fetch_optional(
            &self.store.pool,
            statement,
            "shadow_tally: select",
            tally_from_row,
        )
        .await
    }

    /// Every checked routine's tally, by routine id.
    pub async fn shadow_tallies(self) -> Result<Vec<ShadowTally>, StoreError> {
        let statement = sqlx::query(
            "SELECT routine_id, checks, disagreements, cost_usd FROM shadow_tallies \
             ORDER BY routine_id",
        );
        fetch_all(
            &self.store.pool,
            statement,
            "shadow_tallies: select",
            tally_from_row,
        )
        .await
    }
}

fn check_from_row(row: &sqlx::any::AnyRow) -> Result<ShadowCheck, StoreError> {
    let columns = Columns::new(row, "shadow_checks: read column");
    let hash: String = columns.get("protocol_hash")?;
    let agreed: i64 = columns.get("agreed")?;
    Ok(from_columns!(columns => ShadowCheck {
        id, routine_id, query_id, body, routine_reply, llm_reply, difference, cost_usd,
        protocol_hash: parse_hash("shadow_checks.protocol_hash", &hash)?,
        agreed: agreed != 0,
        created_at_ms: columns.get("created_at")?,
    }))
}

fn tally_from_row(row: &sqlx::any::AnyRow) -> Result<ShadowTally, StoreError> {
    let columns = Columns::new(row, "shadow_tallies: read column");
    Ok(from_columns!(columns => ShadowTally {
        routine_id, checks, disagreements, cost_usd,
    }))
}
