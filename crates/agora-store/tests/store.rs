//! The store through its public API, against a temporary SQLite file and, when
//! `AGORA_TEST_POSTGRES_URL` is set, against Postgres.
//!
//! Every case in `suite/` runs on both backends: the `sqlite` module runs by default; the
//! `postgres` module is `#[ignore]`d and runs with
//! `AGORA_TEST_POSTGRES_URL=postgres://... cargo test -p agora-store -- --include-ignored`
//! (`scripts/postgres-test-db.sh` prepares such a database). Each Postgres case gets its own
//! schema, dropped and recreated at the start, so reruns start clean.

mod suite;

use agora_store::{Backend, Store, StoreError};

/// Where one test case keeps its database.
pub struct Fixture {
    url: String,
    backend: Backend,
    // Keeps the SQLite file's directory alive until the test ends.
    _dir: Option<tempfile::TempDir>,
}

impl Fixture {
    /// A fresh SQLite file in a temporary directory (the file itself does not exist yet).
    pub fn sqlite() -> Fixture {
        let dir = tempfile::tempdir().expect("a temporary directory can be created");
        let url = format!("sqlite://{}", dir.path().join("agora.db").display());
        Fixture {
            url,
            backend: Backend::Sqlite,
            _dir: Some(dir),
        }
    }

    /// A fresh, empty schema named after the test case in the database at
    /// `AGORA_TEST_POSTGRES_URL`.
    pub async fn postgres(case: &str) -> Fixture {
        let Ok(base) = std::env::var("AGORA_TEST_POSTGRES_URL") else {
            panic!(
                "AGORA_TEST_POSTGRES_URL is not set: the Postgres tests need a database, e.g. \
                 AGORA_TEST_POSTGRES_URL=$(scripts/postgres-test-db.sh) \
                 cargo test -p agora-store -- --include-ignored"
            );
        };
        let schema = format!("agora_test_{case}");
        // The admin connection migrates the default schema too; harmless in a test database.
        let admin = Store::connect(&base).await.expect("the Postgres test database is reachable");
        admin
            .execute_raw_for_tests(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};"
            ))
            .await
            .expect("a test schema can be created");
        admin.close().await;
        let separator = if base.contains('?') { '&' } else { '?' };
        Fixture {
            url: format!("{base}{separator}options=-c%20search_path%3D{schema}"),
            backend: Backend::Postgres,
            _dir: None,
        }
    }

    /// The backend the fixture uses.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Opens (and migrates) the fixture's database.
    pub async fn open(&self) -> Store {
        let store = Store::connect(&self.url).await.expect("the test database opens");
        assert_eq!(store.backend(), self.backend);
        store
    }
}

/// Declares each case once per backend.
macro_rules! on_both_backends {
    ($($case:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::suite::$case(crate::Fixture::sqlite()).await;
                }
            )+
        }

        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs AGORA_TEST_POSTGRES_URL"]
                async fn $case() {
                    crate::suite::$case(crate::Fixture::postgres(stringify!($case)).await).await;
                }
            )+
        }
    };
}

on_both_backends!(
    fresh_database_migrates_and_reopens,
    document_round_trip_keeps_sources_in_order,
    documents_are_listed_oldest_first,
    tampered_document_is_reported_corrupt,
    decisions_are_set_replaced_and_cleared,
    unknown_stored_words_are_reported_corrupt,
    conversation_lifecycle,
    record_request_bumps_usage_per_path,
    recent_requests_are_newest_first,
    record_request_is_one_transaction,
    concurrent_requests_lose_no_updates,
    ledger_totals_are_grouped_and_sorted,
    data_survives_a_restart,
);

#[tokio::test]
async fn sqlite_file_is_created_and_journals_in_wal_mode() {
    let dir = tempfile::tempdir().expect("a temporary directory can be created");
    let path = dir.path().join("nested-name.db");
    assert!(!path.exists());
    let store = Store::connect(&format!("sqlite:{}", path.display()))
        .await
        .expect("a missing file is created");
    assert!(path.exists());
    store
        .put_document(&suite::document(1), &[], 1)
        .await
        .expect("a write succeeds");
    // In WAL mode a write lands in the `-wal` file beside the database.
    assert!(dir.path().join("nested-name.db-wal").exists());
    store.close().await;
}

#[tokio::test]
async fn unsupported_urls_are_invalid() {
    for url in ["mysql://root@localhost/agora", "agora.db", "", "postgres://[::1"] {
        let result = Store::connect(url).await;
        assert!(
            matches!(result, Err(StoreError::InvalidUrl(_))),
            "{url:?}: {result:?}"
        );
    }
}

#[tokio::test]
async fn unreachable_postgres_is_a_database_error() {
    // Port 1 on loopback refuses at once; nothing leaves the machine.
    let result = Store::connect("postgres://agora:secret@127.0.0.1:1/agora").await;
    match result {
        Err(StoreError::Database(message)) => assert!(!message.contains("secret"), "{message}"),
        other => panic!("expected a database error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_closed_store_refuses_work() {
    let fixture = Fixture::sqlite();
    let store = fixture.open().await;
    let clone = store.clone();
    store.close().await;
    assert!(matches!(clone.documents().await, Err(StoreError::Database(_))));
}
