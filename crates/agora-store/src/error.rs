//! The one error type of the store.
//!
//! API boundary: no sqlx type appears here. Database errors are stringified where they happen,
//! with the operation that failed as context, so callers depend on this crate alone and can still
//! branch on what went wrong: a database that misbehaves ([`StoreError::Database`]), data that
//! does not mean what it should ([`StoreError::Corrupt`]), a schema that cannot be brought up to
//! date ([`StoreError::Migration`]), a write that conflicts with what is stored
//! ([`StoreError::Conflict`]), or a URL this store does not understand ([`StoreError::InvalidUrl`]).

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The database refused or failed an operation (connection lost, constraint violated, pool
    /// closed, ...). The text names the operation and carries the driver's message.
    #[error("database error: {0}")]
    Database(String),
    /// A stored row does not mean what it should: a document whose text no longer hashes to its
    /// key, an unknown enum word, a malformed hash or JSON value. Someone or something changed the
    /// database behind the store's back.
    #[error("corrupt data in the store: {0}")]
    Corrupt(String),
    /// The schema could not be created or brought up to date.
    #[error("migration failed: {0}")]
    Migration(String),
    /// The operation conflicts with what is stored: a routine name already in use.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The URL names no supported database (`sqlite:` or `postgres:`), or cannot be parsed.
    #[error("invalid database url: {0}")]
    InvalidUrl(String),
}

impl StoreError {
    /// Wraps a driver error as [`StoreError::Database`], naming the operation that failed.
    pub(crate) fn db(operation: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
        move |error| StoreError::Database(format!("{operation}: {error}"))
    }

    /// A [`StoreError::Corrupt`] for a column whose stored value cannot be read back.
    pub(crate) fn corrupt(what: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt(what.to_string())
    }
}
