//! Shadow checks of active routines: each check's two answers and verdict, and the tally per
//! routine the dashboard and the metrics read.

use crate::records::parse_hash;
use crate::sql::{Columns, execute, fetch_all, from_columns};
use crate::{Programming, ShadowCheck, ShadowTally, StoreError};

const SHADOW_COLUMNS: &str = "id, routine_id, protocol_hash, query_id, body, routine_reply, \
                              llm_reply, agreed, difference, cost_usd, created_at";

impl Programming<'_> {
    /// Records a shadow check.
    pub async fn record_shadow_check(self, check: &ShadowCheck) -> Result<(), StoreError> {
        let statement = sqlx::query(
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
        let _writer = self.store.writer().await;
        execute(&self.store.pool, statement, "record_shadow_check").await?;
        Ok(())
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

    /// Every checked routine's tally, by routine id.
    pub async fn shadow_tallies(self) -> Result<Vec<ShadowTally>, StoreError> {
        let statement = sqlx::query(
            "SELECT routine_id, CAST(COUNT(*) AS BIGINT) AS checks, \
             CAST(SUM(1 - agreed) AS BIGINT) AS disagreements, \
             SUM(cost_usd) AS cost_usd \
             FROM shadow_checks GROUP BY routine_id ORDER BY routine_id",
        );
        fetch_all(
            &self.store.pool,
            statement,
            "shadow_tallies: select",
            |row| {
                let columns = Columns::new(row, "shadow_checks: read column");
                Ok(from_columns!(columns => ShadowTally {
                    routine_id, checks, disagreements, cost_usd,
                }))
            },
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
