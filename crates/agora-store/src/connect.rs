//! Opening a store: URL → backend, pool, per-connection settings, migrations.
//!
//! One code path serves SQLite and Postgres through sqlx's `Any` driver; the URL scheme picks
//! the backend. Queries use `$1, $2, ...` placeholders, which Postgres requires and sqlx's SQLite
//! driver maps by number (a unit test below checks that, reordered and repeated). Only the types
//! `Any` carries are bound or read: `i64`, `f64`, `String`, byte blobs and `Option`s of them;
//! booleans are stored as 0/1.
//!
//! Migrations live in `migrations/sqlite` and `migrations/postgres` at the workspace root: the same
//! tables, each in its own dialect. Both directories are embedded at compile time with
//! `sqlx::migrate!` and the one matching the backend runs on connect. An embedded `Migrator` runs
//! against an `AnyPool` as is in sqlx 0.8: `AnyConnection` implements `Migrate` by delegating to
//! the driver behind it (Postgres takes its advisory lock, SQLite needs none), so no second,
//! backend-specific pool is needed.
//!
//! SQLite settings are applied on every new connection (`after_connect`), because the `Any`
//! driver rebuilds each connection from the URL alone: WAL journal, `synchronous=NORMAL` (a
//! commit survives a process kill; only an OS crash may lose the last transactions), a 5 s busy
//! timeout so concurrent writers wait instead of failing, and foreign keys on. The file is created
//! when missing (`mode=rwc`). `sqlite::memory:` works too, but every connection to it would be a
//! different database, so the pool is pinned to one connection that never expires.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::Migrator;
use sqlx::{AnyConnection, AnyPool, Connection, Executor};

use crate::StoreError;
use crate::requests::{RequestWriter, WriterMode};

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("../../migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("../../migrations/postgres");

/// Pragmas run on every new SQLite connection; `busy_timeout` first, so the others wait for locks.
const SQLITE_PRAGMAS: &str = "PRAGMA busy_timeout = 5000; \
     PRAGMA journal_mode = WAL; \
     PRAGMA synchronous = NORMAL; \
     PRAGMA foreign_keys = ON;";

/// Pool size when [`StoreOptions::max_connections`] is not set. SQLite has one writer at a time,
/// so a few connections are enough for concurrent readers.
const DEFAULT_SQLITE_CONNECTIONS: u32 = 4;
const DEFAULT_POSTGRES_CONNECTIONS: u32 = 8;

/// The node's database: documents, decisions, conversations, requests and the LLM ledger.
///
/// Cloning is cheap: clones share one connection pool and one request writer.
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) pool: AnyPool,
    backend: Backend,
    /// Serializes write transactions on SQLite. SQLite allows one writer at a
    /// time; without this, concurrent writers collide and SQLite's busy
    /// handler sleeps in millisecond steps (measured: p50 3.4 ms, p99 84 ms
    /// per request at 8 concurrent requests). Waiting on an in-process lock
    /// instead costs microseconds. Postgres needs no such lock.
    writer: Arc<tokio::sync::Mutex<()>>,
    /// The background writer of [`Requests::record_request`](crate::Requests::record_request), which commits the requests recorded
    /// meanwhile together.
    pub(crate) request_writer: RequestWriter,
}

/// Which database a [`Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// A SQLite file (`sqlite:` URLs).
    Sqlite,
    /// A Postgres server (`postgres:` or `postgresql:` URLs).
    Postgres,
}

/// Tuning for [`Store::connect_with`].
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// Largest number of pooled connections (default 4 for SQLite, 8 for Postgres; at least 1).
    pub max_connections: Option<u32>,
    /// How long request records queued without waiting
    /// (`Store::requests().record_request_buffered`) may be held back to be written with later ones
    /// (default 5 ms). Longer means fewer, larger transactions on a busy node, and more records
    /// a crash can lose.
    pub request_linger: Option<std::time::Duration>,
    /// Most memory each SQLite connection keeps as its page cache, in KiB (default SQLite's own,
    /// about 2000). A process hosting many stores (the network demo's agents) keeps it small;
    /// pages beyond it are read again from the operating system's file cache.
    pub page_cache_kib: Option<u32>,
}

impl Backend {
    /// The backend a URL names, by its scheme.
    fn of_url(url: &str) -> Result<Backend, StoreError> {
        let scheme = url.split_once(':').map(|(scheme, _)| scheme);
        match scheme.map(str::to_ascii_lowercase).as_deref() {
            Some("sqlite") => Ok(Backend::Sqlite),
            Some("postgres" | "postgresql") => Ok(Backend::Postgres),
            _ => Err(StoreError::InvalidUrl(format!(
                "expected a sqlite: or postgres: url, got {:?}",
                redact(url)
            ))),
        }
    }
}

impl Store {
    /// Holds the SQLite writer lock for the caller's write; `None` on Postgres.
    pub(crate) async fn writer(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match self.backend {
            Backend::Sqlite => Some(self.writer.lock().await),
            Backend::Postgres => None,
        }
    }

    /// Opens the database at `url` with default options and brings its schema up to date.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        Self::connect_with(url, StoreOptions::default()).await
    }

    /// Opens the database at `url` and brings its schema up to date.
    ///
    /// SQLite URLs look like `sqlite://path/to/agora.db` or `sqlite:agora.db`; the file is
    /// created when missing. Postgres URLs look like `postgres://user:pass@host:5432/db`.
    pub async fn connect_with(url: &str, options: StoreOptions) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = Backend::of_url(url)?;
        let in_memory = backend == Backend::Sqlite && is_sqlite_memory(url);
        let url = match backend {
            Backend::Sqlite if !in_memory => sqlite_create_if_missing(url),
            _ => url.to_string(),
        };
        let connect_options = AnyConnectOptions::from_str(&url)
            .map_err(|error| StoreError::InvalidUrl(format!("{:?}: {error}", redact(&url))))?;

        let default_size = match backend {
            Backend::Sqlite => DEFAULT_SQLITE_CONNECTIONS,
            Backend::Postgres => DEFAULT_POSTGRES_CONNECTIONS,
        };
        let mut pool_options = AnyPoolOptions::new()
            .max_connections(options.max_connections.unwrap_or(default_size).max(1))
            .acquire_timeout(Duration::from_secs(30));
        if backend == Backend::Sqlite {
            let pragmas: Arc<str> = match options.page_cache_kib {
                Some(kib) => format!("{SQLITE_PRAGMAS} PRAGMA cache_size = -{kib};").into(),
                None => SQLITE_PRAGMAS.into(),
            };
            pool_options = pool_options.after_connect(move |connection, _meta| {
                let pragmas = pragmas.clone();
                Box::pin(async move {
                    connection.execute(&*pragmas).await?;
                    Ok(())
                })
            });
        }
        if in_memory {
            pool_options = pool_options
                .max_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        }
        // One plain connection first: the pool retries a refused connection until its acquire
        // timeout and then reports only "timed out", while this fails at once with the cause.
        let probe = AnyConnection::connect_with(&connect_options)
            .await
            .map_err(StoreError::db("connect"))?;
        probe
            .close()
            .await
            .map_err(StoreError::db("connect: close probe"))?;
        let pool = pool_options
            .connect_with(connect_options)
            .await
            .map_err(StoreError::db("connect"))?;

        let migrator = match backend {
            Backend::Sqlite => &SQLITE_MIGRATIONS,
            Backend::Postgres => &POSTGRES_MIGRATIONS,
        };
        if let Err(error) = migrator.run(&pool).await {
            pool.close().await;
            return Err(StoreError::Migration(error.to_string()));
        }
        tracing::debug!(?backend, "store connected and migrated");
        let writer = Arc::new(tokio::sync::Mutex::new(()));
        let mode = match backend {
            Backend::Sqlite => WriterMode::Sqlite {
                own_connection: !in_memory,
            },
            Backend::Postgres => WriterMode::Postgres,
        };
        let lock = (backend == Backend::Sqlite).then(|| writer.clone());
        let linger = options.request_linger.unwrap_or(crate::requests::LINGER);
        let request_writer = match RequestWriter::start(pool.clone(), mode, lock, linger).await {
            Ok(writer) => writer,
            Err(error) => {
                pool.close().await;
                return Err(error);
            }
        };
        Ok(Store {
            pool,
            backend,
            writer,
            request_writer,
        })
    }

    /// Which database this store talks to.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Writes the requests still queued for [`Requests::record_request`](crate::Requests::record_request), then closes every pooled
    /// connection, waiting for those in use to come back. Operations on this store (and its
    /// clones) fail afterwards with [`StoreError::Database`].
    pub async fn close(&self) {
        self.request_writer.close().await;
        self.pool.close().await;
    }

    /// Runs raw SQL (several statements allowed) and returns the rows affected. For tests that
    /// must reach behind the API, e.g. to tamper with a stored document; not for production use.
    #[doc(hidden)]
    pub async fn execute_raw_for_tests(&self, sql: &str) -> Result<u64, StoreError> {
        let result = sqlx::raw_sql(sql)
            .execute(&self.pool)
            .await
            .map_err(StoreError::db("execute_raw_for_tests"))?;
        Ok(result.rows_affected())
    }
}

/// True for SQLite URLs that name an in-memory database.
fn is_sqlite_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

/// Adds `mode=rwc` unless the URL already chooses a mode, so a missing file is created.
fn sqlite_create_if_missing(url: &str) -> String {
    match url.split_once('?') {
        Some((_, query)) if query.split('&').any(|pair| pair.starts_with("mode=")) => {
            url.to_string()
        }
        Some(_) => format!("{url}&mode=rwc"),
        None => format!("{url}?mode=rwc"),
    }
}

/// The URL without its password, for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            let authority = &url[start + 3..at];
            match authority.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..start + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// The store's parts by role: each gives the queries of one part of the node's records.
impl Store {
    /// The LLM ledger.
    pub fn ledger(&self) -> crate::Ledger<'_> {
        crate::Ledger { store: self }
    }

    /// The programmer's examples and attempts.
    pub fn programming(&self) -> crate::Programming<'_> {
        crate::Programming { store: self }
    }

    /// The sender's memory, runs, examples and routines.
    pub fn sender(&self) -> crate::SenderRecords<'_> {
        crate::SenderRecords { store: self }
    }

    /// A protocol database's catalogue and its peers.
    pub fn catalogue(&self) -> crate::Catalogue<'_> {
        crate::Catalogue { store: self }
    }

    /// The request ledger and the usage counters.
    pub fn requests(&self) -> crate::Requests<'_> {
        crate::Requests { store: self }
    }

    /// Idempotency keys and the replies they hold.
    pub fn idempotency(&self) -> crate::IdempotencyKeys<'_> {
        crate::IdempotencyKeys { store: self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Row;

    #[test]
    fn urls_pick_the_backend() {
        assert_eq!(Backend::of_url("sqlite://a.db").ok(), Some(Backend::Sqlite));
        assert_eq!(
            Backend::of_url("sqlite::memory:").ok(),
            Some(Backend::Sqlite)
        );
        assert_eq!(
            Backend::of_url("postgres://h/db").ok(),
            Some(Backend::Postgres)
        );
        assert_eq!(
            Backend::of_url("postgresql://h/db").ok(),
            Some(Backend::Postgres)
        );
        assert!(matches!(
            Backend::of_url("mysql://h/db"),
            Err(StoreError::InvalidUrl(_))
        ));
        assert!(matches!(
            Backend::of_url("agora.db"),
            Err(StoreError::InvalidUrl(_))
        ));
    }

    #[test]
    fn sqlite_urls_get_create_mode_once() {
        assert_eq!(
            sqlite_create_if_missing("sqlite://a.db"),
            "sqlite://a.db?mode=rwc"
        );
        assert_eq!(
            sqlite_create_if_missing("sqlite://a.db?cache=private"),
            "sqlite://a.db?cache=private&mode=rwc"
        );
        assert_eq!(
            sqlite_create_if_missing("sqlite://a.db?mode=ro"),
            "sqlite://a.db?mode=ro"
        );
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("sqlite://a.db"), "sqlite://a.db");
    }

    async fn temp_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("a temporary directory can be created");
        let url = format!("sqlite://{}", dir.path().join("unit.db").display());
        let store = Store::connect(&url)
            .await
            .expect("a fresh SQLite file opens");
        (dir, store)
    }

    #[tokio::test]
    async fn sqlite_accepts_numbered_placeholders_reordered_and_repeated() {
        let (_dir, store) = temp_store().await;
        let row = sqlx::query("SELECT $2 AS b, $1 AS a, $2 || $1 AS ba")
            .bind(7_i64)
            .bind("x")
            .fetch_one(&store.pool)
            .await
            .expect("numbered placeholders bind");
        assert_eq!(row.try_get::<String, _>("b").ok().as_deref(), Some("x"));
        assert_eq!(row.try_get::<i64, _>("a").ok(), Some(7));
        assert_eq!(row.try_get::<String, _>("ba").ok().as_deref(), Some("x7"));
    }

    #[tokio::test]
    async fn sqlite_connections_get_the_pragmas() {
        let (_dir, store) = temp_store().await;
        for connection in &mut every_connection(&store).await {
            assert_eq!(pragma(connection, "journal_mode").await, "wal");
            assert_eq!(pragma(connection, "synchronous").await, "1"); // NORMAL
            assert_eq!(pragma(connection, "busy_timeout").await, "5000");
            assert_eq!(pragma(connection, "foreign_keys").await, "1");
            assert_eq!(pragma(connection, "cache_size").await, "-2000"); // SQLite's default
        }
    }

    #[tokio::test]
    async fn a_smaller_page_cache_is_set_on_every_sqlite_connection() {
        let dir = tempfile::tempdir().expect("dir");
        let url = format!("sqlite://{}", dir.path().join("agora.db").display());
        let options = StoreOptions {
            page_cache_kib: Some(256),
            ..StoreOptions::default()
        };
        let store = Store::connect_with(&url, options).await.expect("store");
        for connection in &mut every_connection(&store).await {
            assert_eq!(pragma(connection, "cache_size").await, "-256");
            assert_eq!(pragma(connection, "journal_mode").await, "wal");
        }
    }

    /// Every pooled connection, held at once so that each one, not just the first, is checked.
    async fn every_connection(store: &Store) -> Vec<sqlx::pool::PoolConnection<sqlx::Any>> {
        let mut connections = Vec::new();
        for _ in 0..DEFAULT_SQLITE_CONNECTIONS {
            connections.push(store.pool.acquire().await.expect("a pooled connection"));
        }
        connections
    }

    async fn pragma(connection: &mut sqlx::AnyConnection, name: &str) -> String {
        let row = sqlx::query(&format!("PRAGMA {name}"))
            .fetch_one(connection)
            .await
            .expect("pragma reads");
        row.try_get::<String, _>(0)
            .or_else(|_| row.try_get::<i64, _>(0).map(|n| n.to_string()))
            .expect("pragma value is text or integer")
    }

    #[tokio::test]
    async fn in_memory_sqlite_keeps_its_data_across_operations() {
        let store = Store::connect("sqlite::memory:")
            .await
            .expect("memory db opens");
        store
            .execute_raw_for_tests("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);")
            .await
            .expect("raw sql runs");
        let affected = store
            .execute_raw_for_tests("UPDATE t SET x = 2")
            .await
            .expect("same database");
        assert_eq!(affected, 1);
    }
}
