//! The shapes every query in this crate takes, written once.
//!
//! A transaction is begun and committed, a statement executed, one or many rows fetched and
//! decoded, and a row's columns read, always with the operation that failed named in the
//! [`StoreError`]: the per-table modules only say what to ask and how a row becomes a record.

use sqlx::any::{Any, AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Executor, Row, Transaction};

use crate::{Store, StoreError};

/// A statement with its arguments bound, ready to run on the pool.
pub(crate) type Statement<'q> = Query<'q, Any, AnyArguments<'q>>;

/// A write (or read-snapshot) transaction on the store's pool.
pub(crate) type Tx = Transaction<'static, Any>;

impl Store {
    /// Begins a transaction; a failure reads `"{operation}: begin: …"`.
    pub(crate) async fn begin(&self, operation: &'static str) -> Result<Tx, StoreError> {
        self.pool
            .begin()
            .await
            .map_err(|error| StoreError::Database(format!("{operation}: begin: {error}")))
    }
}

/// Runs a statement on `executor` (the pool, or a transaction's connection) and returns the rows
/// it affected.
pub(crate) async fn execute<'c>(
    executor: impl Executor<'c, Database = Any>,
    statement: Statement<'_>,
    operation: &'static str,
) -> Result<u64, StoreError> {
    let result = statement.execute(executor).await;
    Ok(result.map_err(StoreError::db(operation))?.rows_affected())
}

/// Fetches at most one row and decodes it.
pub(crate) async fn fetch_optional<'c, T>(
    executor: impl Executor<'c, Database = Any>,
    statement: Statement<'_>,
    operation: &'static str,
    decode: impl FnOnce(&AnyRow) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    let row = statement.fetch_optional(executor).await;
    row.map_err(StoreError::db(operation))?
        .as_ref()
        .map(decode)
        .transpose()
}

/// Fetches every row and decodes each, in the order the statement returns them.
pub(crate) async fn fetch_all<'c, T>(
    executor: impl Executor<'c, Database = Any>,
    statement: Statement<'_>,
    operation: &'static str,
    decode: impl FnMut(&AnyRow) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let rows = statement.fetch_all(executor).await;
    rows.map_err(StoreError::db(operation))?
        .iter()
        .map(decode)
        .collect()
}

/// Commits a transaction; a failure reads `"{operation}: commit: …"`.
pub(crate) async fn commit(tx: Tx, operation: &'static str) -> Result<(), StoreError> {
    tx.commit()
        .await
        .map_err(|error| StoreError::Database(format!("{operation}: commit: {error}")))
}

/// A row whose columns are read with one context: a failure reads `"{context}: {column}: …"`.
pub(crate) struct Columns<'r> {
    row: &'r AnyRow,
    context: &'static str,
}

impl<'r> Columns<'r> {
    pub(crate) fn new(row: &'r AnyRow, context: &'static str) -> Self {
        Self { row, context }
    }

    /// The value of `column`, decoded as `T`.
    pub(crate) fn get<T>(&self, column: &str) -> Result<T, StoreError>
    where
        T: sqlx::Decode<'r, Any> + sqlx::Type<Any>,
    {
        self.row
            .try_get(column)
            .map_err(|error| StoreError::Database(format!("{}: {column}: {error}", self.context)))
    }
}

/// Builds a record from a row's [`Columns`]:
/// `from_columns!(columns => Record { a, b, c: value })` reads each bare field from the column of
/// the same name and takes a `field: value` as written (a renamed column, a parsed value). Fields
/// are evaluated in the order written. The call is not an expression list, so rustfmt leaves the
/// field list as written: several short names to a line.
macro_rules! from_columns {
    ($columns:expr => $record:ident { $($field:ident $(: $value:expr)?),* $(,)? }) => {
        $record { $($field: $crate::sql::from_columns!(@field $columns, $field $(, $value)?)),* }
    };
    (@field $columns:expr, $field:ident) => {
        $columns.get(stringify!($field))?
    };
    (@field $columns:expr, $field:ident, $value:expr) => {
        $value
    };
}
pub(crate) use from_columns;
