//! Routines: code that answers one protocol without the LLM, with its manifest and counters.
//!
//! Architecture invariant: at most one routine per protocol is `active`. Activating a routine
//! (adding it active, or enabling it) disables the protocol's other routines in the same
//! transaction, and a partial unique index on `(protocol_hash) WHERE status = 'active'` holds the
//! line against any other writer.
//!
//! Every change to the set of routines bumps one version counter in the same transaction, so a
//! node that caches loaded routines polls [`Store::routines_version`] (one row, one read) and
//! reloads only when it moved, whichever process (the node's admin API, the `agora` CLI) made
//! the change. Run and failure counters are not changes to the set: they are bumped by
//! `Store::requests().record_request` with the request that ran the routine, so reading a routine first
//! writes the request records still queued (`Store::requests().flush_requests`).
//!
//! The code lives in a table of its own, `routine_code`: listing never reads it (a component is a
//! few MiB), only [`Store::routine_code`] does, and the counters bumped with every request update
//! a small row (SQLite rewrites a whole row to change one column).

use sqlx::AnyConnection;
use sqlx::any::AnyRow;

use crate::records::parse_hash;
use crate::sql::{Columns, commit, execute, fetch_all, fetch_optional};
use crate::{
    NewRoutine, Routine, RoutineCode, RoutineLanguage, RoutineOrigin, RoutineStatus, Store,
    StoreError,
};

pub(crate) const ROUTINE_COLUMNS: &str = "id, name, protocol_hash, language, tools, timeout_ms, \
     memory_bytes, origin, status, runs, failures, last_error, last_failure_at, created_at, \
     updated_at";

impl Store {
    /// Adds a routine. When it starts `Active`, the protocol's other active routine (if any) is
    /// disabled in the same transaction. A name already in use is a [`StoreError::Conflict`].
    pub async fn add_routine(
        &self,
        routine: &NewRoutine,
        now_ms: i64,
    ) -> Result<Routine, StoreError> {
        let _writer = self.writer().await;
        let tools = serde_json::to_string(&routine.tools)
            .map_err(|error| StoreError::Database(format!("add_routine: tools: {error}")))?;
        let mut tx = self.begin("add_routine").await?;
        let taken = sqlx::query("SELECT id FROM routines WHERE name = $1")
            .bind(&routine.name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::db("add_routine: check the name"))?;
        if taken.is_some() {
            return Err(StoreError::Conflict(format!(
                "a routine named {:?} already exists",
                routine.name
            )));
        }
        let hash = routine.protocol_hash.to_hex();
        if routine.status == RoutineStatus::Active {
            disable_active(&mut tx, &hash, now_ms).await?;
        }
        let row = sqlx::query(
            "INSERT INTO routines (name, protocol_hash, language, tools, timeout_ms, \
             memory_bytes, origin, status, runs, failures, last_error, last_failure_at, \
             created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, 0, NULL, NULL, $9, $9) \
             RETURNING id",
        )
        .bind(&routine.name)
        .bind(&hash)
        .bind(routine.language.as_str())
        .bind(tools)
        .bind(routine.timeout_ms)
        .bind(routine.memory_bytes)
        .bind(routine.origin.as_str())
        .bind(routine.status.as_str())
        .bind(now_ms)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::db("add_routine: insert"))?;
        let id: i64 = Columns::new(&row, "add_routine").get("id")?;
        sqlx::query("INSERT INTO routine_code (routine_id, source, component) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(routine.code.source.as_deref())
            .bind(routine.code.component.as_slice())
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db("add_routine: insert the code"))?;
        bump_version(&mut tx).await?;
        commit(tx, "add_routine").await?;
        Ok(Routine {
            id,
            name: routine.name.clone(),
            protocol_hash: routine.protocol_hash,
            language: routine.language,
            tools: routine.tools.clone(),
            timeout_ms: routine.timeout_ms,
            memory_bytes: routine.memory_bytes,
            origin: routine.origin,
            status: routine.status,
            runs: 0,
            failures: 0,
            last_error: None,
            last_failure_at_ms: None,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
        })
    }

    /// Every routine, oldest first, without code.
    pub async fn routines(&self) -> Result<Vec<Routine>, StoreError> {
        self.requests().flush_requests().await;
        let sql = format!("SELECT {ROUTINE_COLUMNS} FROM routines ORDER BY id");
        let statement = sqlx::query(&sql);
        fetch_all(&self.pool, statement, "routines: select", routine_from_row).await
    }

    /// The routine with this id, without code.
    pub async fn routine(&self, id: i64) -> Result<Option<Routine>, StoreError> {
        self.requests().flush_requests().await;
        let sql = format!("SELECT {ROUTINE_COLUMNS} FROM routines WHERE id = $1");
        fetch_optional(
            &self.pool,
            sqlx::query(&sql).bind(id),
            "routine: select",
            routine_from_row,
        )
        .await
    }

    /// The routine with this name, without code.
    pub async fn routine_named(&self, name: &str) -> Result<Option<Routine>, StoreError> {
        self.requests().flush_requests().await;
        let sql = format!("SELECT {ROUTINE_COLUMNS} FROM routines WHERE name = $1");
        let statement = sqlx::query(&sql).bind(name);
        fetch_optional(
            &self.pool,
            statement,
            "routine_named: select",
            routine_from_row,
        )
        .await
    }

    /// The code of the routine with this id.
    pub async fn routine_code(&self, id: i64) -> Result<Option<RoutineCode>, StoreError> {
        let statement =
            sqlx::query("SELECT source, component FROM routine_code WHERE routine_id = $1")
                .bind(id);
        fetch_optional(&self.pool, statement, "routine_code: select", |row| {
            let columns = Columns::new(row, "routine_code");
            Ok(RoutineCode {
                source: columns.get("source")?,
                component: columns.get("component")?,
            })
        })
        .await
    }

    /// Sets a routine's status; activating it disables the protocol's other active routine in
    /// the same transaction. Returns the routine as it is now, or `None` if there is no such id.
    pub async fn set_routine_status(
        &self,
        id: i64,
        status: RoutineStatus,
        now_ms: i64,
    ) -> Result<Option<Routine>, StoreError> {
        let _writer = self.writer().await;
        let mut tx = self.begin("set_routine_status").await?;
        let statement =
            sqlx::query("SELECT protocol_hash, status FROM routines WHERE id = $1").bind(id);
        let row = fetch_optional(&mut *tx, statement, "set_routine_status: select", |row| {
            let columns = Columns::new(row, "set_routine_status");
            Ok((
                columns.get::<String>("protocol_hash")?,
                columns.get::<String>("status")?,
            ))
        })
        .await?;
        let Some((hash, current)) = row else {
            return Ok(None);
        };
        if current != status.as_str() {
            if status == RoutineStatus::Active {
                disable_active(&mut tx, &hash, now_ms).await?;
            }
            sqlx::query("UPDATE routines SET status = $2, updated_at = $3 WHERE id = $1")
                .bind(id)
                .bind(status.as_str())
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db("set_routine_status: update"))?;
            bump_version(&mut tx).await?;
        }
        commit(tx, "set_routine_status").await?;
        self.routine(id).await
    }

    /// Removes a routine; true if there was one.
    pub async fn delete_routine(&self, id: i64) -> Result<bool, StoreError> {
        let _writer = self.writer().await;
        let mut tx = self.begin("delete_routine").await?;
        let statement = sqlx::query("DELETE FROM routines WHERE id = $1").bind(id);
        let deleted = execute(&mut *tx, statement, "delete_routine: delete").await? > 0;
        if deleted {
            bump_version(&mut tx).await?;
        }
        commit(tx, "delete_routine").await?;
        Ok(deleted)
    }

    /// A number that changes whenever a routine is added, enabled, disabled or removed.
    pub async fn routines_version(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT version FROM routine_registry WHERE id = 1")
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db("routines_version: select"))?;
        Columns::new(&row, "routines_version").get("version")
    }
}

/// Disables the active routine of a protocol, if any.
pub(crate) async fn disable_active(
    connection: &mut AnyConnection,
    protocol_hash: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    let statement = sqlx::query(
        "UPDATE routines SET status = 'disabled', updated_at = $2 \
         WHERE protocol_hash = $1 AND status = 'active'",
    )
    .bind(protocol_hash)
    .bind(now_ms);
    execute(&mut *connection, statement, "disable the active routine").await?;
    Ok(())
}

pub(crate) async fn bump_version(connection: &mut AnyConnection) -> Result<(), StoreError> {
    let statement = sqlx::query("UPDATE routine_registry SET version = version + 1 WHERE id = 1");
    execute(&mut *connection, statement, "bump the routines version").await?;
    Ok(())
}

pub(crate) fn routine_from_row(row: &AnyRow) -> Result<Routine, StoreError> {
    let columns = Columns::new(row, "routines: read column");
    let text = |column: &'static str| columns.get::<String>(column);
    let name = text("name")?;
    let tools: Vec<String> = serde_json::from_str(&text("tools")?)
        .map_err(|error| StoreError::corrupt(format!("routines.tools of {name:?}: {error}")))?;
    Ok(Routine {
        id: columns.get("id")?,
        protocol_hash: parse_hash("routines.protocol_hash", &text("protocol_hash")?)?,
        language: RoutineLanguage::from_column("routines.language", &text("language")?)?,
        tools,
        timeout_ms: columns.get("timeout_ms")?,
        memory_bytes: columns.get("memory_bytes")?,
        origin: RoutineOrigin::from_column("routines.origin", &text("origin")?)?,
        status: RoutineStatus::from_column("routines.status", &text("status")?)?,
        runs: columns.get("runs")?,
        failures: columns.get("failures")?,
        last_error: columns.get("last_error")?,
        last_failure_at_ms: columns.get("last_failure_at")?,
        created_at_ms: columns.get("created_at")?,
        updated_at_ms: columns.get("updated_at")?,
        name,
    })
}
