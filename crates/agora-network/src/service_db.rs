//! A demo server's own SQL database: a SQLite file holding that server's tables (rooms,
//! bookings, ...), on which the server's LLM and its LLM-written routines run SQL through a
//! `run_sql_query(query, params)` tool ([`ServiceDatabase::run`]).
//!
//! This is a facility apart from the node's store (`agora_store::Store`): the node's own records
//! live there; a service database is the business data a demo server answers questions about. It talks to
//! SQLite directly (one connection per file) rather than through the store's `AnyPool`.
//!
//! The statements come from an LLM, so [`ServiceDatabase::run`] is bounded and confined:
//! - one statement, which must be a SELECT, INSERT, UPDATE, DELETE or WITH, naming only this
//!   database's tables (the `statement` module decides, before SQLite sees it; no PRAGMA, ATTACH,
//!   DDL, `sqlite_` schema tables or `load_extension`);
//! - at most [`MAX_ROWS`] result rows (further rows are dropped silently);
//! - at most [`STATEMENT_TIME_LIMIT`] of work: a SQLite progress handler aborts the statement at
//!   the deadline, so a runaway query stops inside SQLite rather than only being abandoned.

mod statement;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{BoxStream, StreamExt};
use serde_json::{Map, Value};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqlitePool, SqlitePoolOptions, SqliteRow,
};
use sqlx::{Column, ConnectOptions, Connection, Row, TypeInfo, ValueRef};

/// One table's name and its rows, as [`ServiceDatabase::read_tables`] gives them.
pub type TableRows = (String, Vec<Map<String, Value>>);

/// The most rows [`ServiceDatabase::run`] returns; the rest of a larger result is dropped.
pub const MAX_ROWS: usize = 200;

/// How long one statement may run before SQLite aborts it.
pub const STATEMENT_TIME_LIMIT: Duration = Duration::from_secs(2);

/// The longest statement accepted, in bytes.
pub const MAX_STATEMENT_BYTES: usize = 64 * 1024;

/// How many SQLite virtual-machine instructions run between two looks at the clock.
const PROGRESS_STEP: i32 = 10_000;

/// One table of a service database, as the demo's configuration describes it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ServiceTable {
    /// The table's name.
    pub name: String,
    /// The columns in order: name, then SQL type text (`INTEGER`, `TEXT`, `DATE`, ...).
    pub columns: Vec<(String, String)>,
    /// Table constraints, as SQL text (`PRIMARY KEY (RoomNumber, StartDate)`).
    pub constraints: Vec<String>,
    /// Seed rows: column name to value (a number, a string, `null`; a boolean is stored as 0/1,
    /// an array or object as its JSON text). DATE columns hold `YYYY-MM-DD` text.
    pub rows: Vec<Map<String, Value>>,
}

/// A demo server's SQL database: a SQLite file and the names of its tables. Clones share the
/// connection.
#[derive(Debug, Clone)]
pub struct ServiceDatabase {
    pool: SqlitePool,
    table_names: Arc<[String]>,
    /// A scratch copy's file, held to be removed when the last clone is dropped.
    _scratch_file: Option<Arc<ScratchFile>>,
}

/// A scratch copy's database file (see [`ServiceDatabase::scratch_copy`]).
#[derive(Debug)]
struct ScratchFile(std::path::PathBuf);

impl Drop for ScratchFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut file = self.0.as_os_str().to_owned();
            file.push(suffix);
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Why a service database operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceDbError {
    /// The statement is not allowed (the text says why), or it ran past
    /// [`STATEMENT_TIME_LIMIT`]. Nothing was run, or the run was rolled back.
    #[error("statement refused: {0}")]
    Refused(String),
    /// SQLite's own error text: a syntax error, no such column, a constraint that failed.
    #[error("{0}")]
    Sql(String),
    /// The database file could not be created or opened.
    #[error("cannot open the service database: {0}")]
    Open(String),
}

impl ServiceDatabase {
    /// Creates the SQLite file at `path` (replacing any existing file), creates the tables and
    /// inserts the seed rows with bound parameters, in one transaction.
    pub async fn create(
        path: &Path,
        tables: &[ServiceTable],
    ) -> Result<ServiceDatabase, ServiceDbError> {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut file = path.as_os_str().to_owned();
            file.push(suffix);
            match std::fs::remove_file(&file) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    return Err(ServiceDbError::Open(format!(
                        "removing {}: {error}",
                        Path::new(&file).display()
                    )));
                }
            }
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(|error| ServiceDbError::Open(format!("{}: {error}", path.display())))?;
        let mut transaction = pool.begin().await.map_err(sql_error)?;
        for table in tables {
            let definitions = table
                .columns
                .iter()
                .map(|(name, sql_type)| format!("{} {sql_type}", quote(name)))
                .chain(table.constraints.iter().cloned())
                .collect::<Vec<_>>()
                .join(", ");
            let create = format!("CREATE TABLE {} ({definitions})", quote(&table.name));
            sqlx::query(&create)
                .execute(&mut *transaction)
                .await
                .map_err(sql_error)?;
            for row in &table.rows {
                let columns: Vec<String> = row.keys().map(|c| quote(c)).collect();
                let placeholders = vec!["?"; columns.len()].join(", ");
                let insert = format!(
                    "INSERT INTO {} ({}) VALUES ({placeholders})",
                    quote(&table.name),
                    columns.join(", ")
                );
                let query = row.values().fold(sqlx::query(&insert), bind);
                query.execute(&mut *transaction).await.map_err(sql_error)?;
            }
        }
        transaction.commit().await.map_err(sql_error)?;
        Ok(ServiceDatabase {
            pool,
            table_names: tables.iter().map(|t| t.name.clone()).collect(),
            _scratch_file: None,
        })
    }

    /// A copy of the database as it is now, in a file of the system's temporary directory that
    /// is removed when the copy's last clone is dropped: what a shadow check writes instead.
    pub async fn scratch_copy(&self) -> Result<ServiceDatabase, ServiceDbError> {
        let path = std::env::temp_dir().join(format!("agora-scratch-{}.db", uuid::Uuid::new_v4()));
        let file = Arc::new(ScratchFile(path.clone()));
        let target = path.to_string_lossy().into_owned();
        sqlx::query("VACUUM INTO ?")
            .bind(target)
            .execute(&self.pool)
            .await
            .map_err(sql_error)?;
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(SqliteConnectOptions::new().filename(&path))
            .await
            .map_err(|error| ServiceDbError::Open(format!("a scratch copy: {error}")))?;
        Ok(ServiceDatabase {
            pool,
            table_names: self.table_names.clone(),
            _scratch_file: Some(file),
        })
    }

    /// Every row of every table, as JSON: `{table: [row, ...]}`, rows in rowid order.
    pub async fn state(&self) -> Result<Value, ServiceDbError> {
        let mut connection = self.pool.acquire().await.map_err(sql_error)?;
        let tables = read_every_table(&mut connection).await?;
        Ok(Value::Object(
            tables
                .into_iter()
                .map(|(name, rows)| {
                    let rows = rows.into_iter().map(Value::Object).collect();
                    (name, Value::Array(rows))
                })
                .collect(),
        ))
    }

    /// Runs one statement written by an LLM, with `params` bound to its `?` placeholders in
    /// order (a boolean as 0/1), and returns its result rows as JSON objects (column name to
    /// value: INTEGER and REAL as numbers, TEXT as a string, NULL as `null`, BLOB as a lowercase
    /// hex string). A result longer than [`MAX_ROWS`] is cut to its first [`MAX_ROWS`] rows
    /// without notice. A statement that writes and returns no rows returns one row,
    /// `{"changes": N}`: how many rows it inserted, updated or deleted (SQLite's `changes()`), so
    /// that a write does not read as "nothing happened".
    ///
    /// Refused before it runs: more than one statement, anything but SELECT, INSERT, UPDATE,
    /// DELETE or WITH, a table that is not this database's, SQLite's schema objects, PRAGMA,
    /// ATTACH and DDL; a count of `params` other than the count of placeholders (a `?` is never
    /// left to match NULL), and numbered or named placeholders. Refused while it runs: more than
    /// [`STATEMENT_TIME_LIMIT`] of work.
    pub async fn run(
        &self,
        sql: &str,
        params: &[Value],
    ) -> Result<Vec<Map<String, Value>>, ServiceDbError> {
        if sql.len() > MAX_STATEMENT_BYTES {
            return Err(ServiceDbError::Refused(format!(
                "the statement is longer than {MAX_STATEMENT_BYTES} bytes"
            )));
        }
        statement::check(sql, &self.table_names, params.len()).map_err(ServiceDbError::Refused)?;
        let mut connection = self.pool.acquire().await.map_err(sql_error)?;
        let deadline = Instant::now() + STATEMENT_TIME_LIMIT;
        connection
            .lock_handle()
            .await
            .map_err(sql_error)?
            .set_progress_handler(PROGRESS_STEP, move || Instant::now() < deadline);
        // The progress handler stops SQLite; this timeout is the backstop for time spent outside
        // it (waiting on the worker thread), with a little slack so the handler fires first.
        let limit = STATEMENT_TIME_LIMIT + Duration::from_millis(500);
        let fetched = tokio::time::timeout(limit, async {
            let query = params.iter().fold(sqlx::query(sql).persistent(false), bind);
            let mut rows: BoxStream<'_, Result<SqliteRow, sqlx::Error>> =
                query.fetch(&mut *connection);
            let mut json_rows = Vec::new();
            while let Some(row) = rows.next().await {
                if json_rows.len() == MAX_ROWS {
                    break;
                }
                json_rows.push(row_to_json(&row?)?);
            }
            drop(rows);
            if json_rows.is_empty() && statement::writes(sql) == Some(true) {
                let changes: i64 = sqlx::query_scalar("SELECT changes()")
                    .fetch_one(&mut *connection)
                    .await?;
                let mut row = Map::new();
                row.insert("changes".into(), Value::from(changes));
                json_rows.push(row);
            }
            Ok::<_, sqlx::Error>(json_rows)
        })
        .await;
        let timed_out = Instant::now() >= deadline;
        match fetched {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(_)) | Err(_) if timed_out => Err(ServiceDbError::Refused(format!(
                "the statement ran longer than {} s and was stopped",
                STATEMENT_TIME_LIMIT.as_secs_f32()
            ))),
            Ok(Err(error)) => Err(sql_error(error)),
            Err(_) => Err(ServiceDbError::Sql("the statement timed out".into())),
        }
    }

    /// Every row of every table of the service database file at `path`, table by table in
    /// name order, rows in rowid order, read over a read-only connection of its own: what a
    /// server's tools have written, for the demo's judge (a running server's connection is not
    /// needed, and nothing is written).
    pub async fn read_tables(path: &Path) -> Result<Vec<TableRows>, ServiceDbError> {
        // One connection, not a pool: a pool's maintenance task is not needed for two reads,
        // and sqlx 0.8's can spin when it races a connection's release (seen here, once, as a
        // replay that never ended).
        let mut connection = SqliteConnectOptions::new()
            .filename(path)
            .read_only(true)
            .busy_timeout(Duration::from_secs(5))
            .connect()
            .await
            .map_err(|error| ServiceDbError::Open(format!("{}: {error}", path.display())))?;
        let tables = read_every_table(&mut connection).await;
        // Closing only tells SQLite goodbye; the rows are read either way.
        let _ = connection.close().await;
        tables
    }

    /// Whether the statement `sql` writes (INSERT, UPDATE, DELETE): `Some(false)` when it only
    /// reads, `None` when it cannot be read. For a caller that asks whether a tool call changed
    /// anything, before or without running it.
    pub fn writes(sql: &str) -> Option<bool> {
        statement::writes(sql)
    }

    /// The names of this database's tables, in the order they were created.
    pub fn table_names(&self) -> &[String] {
        &self.table_names
    }

    /// Closes the connection; later calls to [`ServiceDatabase::run`] fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Every table's rows, tables in name order, rows in rowid order.
async fn read_every_table(
    connection: &mut SqliteConnection,
) -> Result<Vec<TableRows>, ServiceDbError> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )
    .fetch_all(&mut *connection)
    .await
    .map_err(sql_error)?;
    let mut tables = Vec::with_capacity(names.len());
    for name in names {
        let rows = sqlx::query(&format!("SELECT * FROM {} ORDER BY rowid", quote(&name)))
            .fetch_all(&mut *connection)
            .await
            .map_err(sql_error)?
            .iter()
            .map(row_to_json)
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql_error)?;
        tables.push((name, rows));
    }
    Ok(tables)
}

/// `query` with `value` bound to its next placeholder: a boolean as 0/1, an array or object as
/// its JSON text.
fn bind<'q>(
    query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    value: &'q Value,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    match value {
        Value::Null => query.bind(None::<String>),
        Value::Bool(flag) => query.bind(i64::from(*flag)),
        Value::Number(number) => match number.as_i64() {
            Some(integer) => query.bind(integer),
            None => query.bind(number.as_f64()),
        },
        Value::String(text) => query.bind(text.as_str()),
        Value::Array(_) | Value::Object(_) => query.bind(value.to_string()),
    }
}

/// One result row as a JSON object, by the type of each value (SQLite types values, not
/// columns: a TEXT column may hold an integer).
fn row_to_json(row: &SqliteRow) -> Result<Map<String, Value>, sqlx::Error> {
    let mut object = Map::new();
    for (index, column) in row.columns().iter().enumerate() {
        let raw = row.try_get_raw(index)?;
        let value = if raw.is_null() {
            Value::Null
        } else {
            match raw.type_info().name() {
                "INTEGER" | "BOOLEAN" => Value::from(row.try_get_unchecked::<i64, _>(index)?),
                "REAL" | "NUMERIC" => {
                    let real = row.try_get_unchecked::<f64, _>(index)?;
                    serde_json::Number::from_f64(real).map_or(Value::Null, Value::Number)
                }
                "BLOB" => {
                    let bytes = row.try_get_unchecked::<Vec<u8>, _>(index)?;
                    Value::String(bytes.iter().map(|b| format!("{b:02x}")).collect())
                }
                _ => Value::String(row.try_get_unchecked::<String, _>(index)?),
            }
        };
        object.insert(column.name().to_string(), value);
    }
    Ok(object)
}

/// A SQL identifier in double quotes, inner quotes doubled.
fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

/// SQLite's own message for a failed statement, without sqlx's wrapping.
fn sql_error(error: sqlx::Error) -> ServiceDbError {
    match error {
        sqlx::Error::Database(database) => ServiceDbError::Sql(database.message().to_string()),
        other => ServiceDbError::Sql(other.to_string()),
    }
}
