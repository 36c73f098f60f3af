//! The store through its public API, against a temporary SQLite file and, when
//! `AGORA_TEST_POSTGRES_URL` is set, against Postgres.
//!
//! Every case in `suite/` runs on both backends: the `sqlite` module runs by default; the
//! `postgres` module is `#[ignore]`d and runs with
//! `AGORA_TEST_POSTGRES_URL=postgres://... cargo test -p agora-store -- --include-ignored`
//! (`scripts/postgres-test-db.sh` prepares such a database). Each Postgres case gets its own
//! schema, dropped and recreated at the start, so reruns start clean.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod suite;

use agora_store::{Backend, RequestPath, Store, StoreError, StoreOptions};

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
        let admin = Store::connect(&base)
            .await
            .expect("the Postgres test database is reachable");
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

    /// The database URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The backend the fixture uses.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Opens (and migrates) the fixture's database.
    pub async fn open(&self) -> Store {
        self.open_with(StoreOptions::default()).await
    }

    /// Opens the fixture's database with these options.
    pub async fn open_with(&self, options: StoreOptions) -> Store {
        let store = Store::connect_with(&self.url, options)
            .await
            .expect("the test database opens");
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
    idempotency_keys_claim_replay_refuse_and_purge,
    job_leases_have_one_holder_until_they_expire,
    counters_are_shared_and_exact_across_handles,
    request_client_and_error_detail_round_trip,
    a_schema_from_a_newer_agora_is_refused,
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
    a_bad_request_in_a_batch_fails_alone,
    closing_the_store_writes_queued_requests,
    buffered_requests_are_read_back_and_survive_a_close,
    ledger_totals_are_grouped_and_sorted,
    dashboard_reads_bucket_filter_and_order,
    data_survives_a_restart,
    routines_round_trip_with_their_code,
    one_routine_is_active_per_protocol,
    requests_count_routine_runs_and_failures,
    reviews_decide_pending_routines_once,
    shadow_checks_are_listed_and_tallied_per_routine,
    publishing_is_idempotent_and_numbers_entries,
    pages_follow_seq_order,
    search_narrows_by_lowercased_words,
    peer_pages_store_documents_and_move_the_cursor_forward,
    peer_errors_are_counted_until_a_success,
    tampered_text_is_reported_corrupt_and_repaired_by_publishing,
    catalogue_and_cursors_survive_a_restart,
    concurrent_publishes_get_distinct_seqs,
    a_fresh_memory_round_trips_with_no_protocol,
    a_full_memory_round_trips_with_sources_and_rejections,
    putting_again_replaces_the_whole_row,
    protocols_for_a_task_are_those_in_use_across_targets,
    runs_are_logged_totalled_and_listed_oldest_first,
    memory_and_log_survive_a_restart,
    examples_are_bounded_per_key_and_counted_since_the_last_attempt,
    one_routine_per_key_is_active_and_counts_its_runs,
    a_pending_sender_routine_is_activated_only_by_its_approval,
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
    for url in [
        "mysql://root@localhost/agora",
        "agora.db",
        "",
        "postgres://[::1",
    ] {
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
    assert!(matches!(
        clone.documents().await,
        Err(StoreError::Database(_))
    ));
}

/// Set in the child process of [`a_killed_writer_loses_nothing_committed`]: the database URL the
/// child writes to.
const KILL_CHILD_URL: &str = "AGORA_STORE_TEST_KILL_CHILD_URL";

/// The child half of [`a_killed_writer_loses_nothing_committed`]; returns at once when run as an
/// ordinary test. As the child it records requests until it is killed, announcing each commit.
#[tokio::test]
async fn child_writer_for_kill_test() {
    let Ok(url) = std::env::var(KILL_CHILD_URL) else {
        return;
    };
    let store = Store::connect(&url).await.expect("child opens the store");
    let h = suite::hash(1);
    for n in 1_i64.. {
        let mut conv = suite::conversation("c", Some(h), 0);
        conv.messages = serde_json::json!({ "last": n });
        conv.last_active_ms = n;
        store
            .requests()
            .record_request(
                &suite::request(n, Some(h), RequestPath::Routine, n),
                Some(&conv),
            )
            .await
            .expect("child records");
        println!("committed {n}");
    }
}

/// SIGKILLs a process in the middle of a stream of `record_request` transactions, then checks
/// that every transaction it saw committed is there and that no transaction is half-applied.
#[test]
fn a_killed_writer_loses_nothing_committed() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let fixture = Fixture::sqlite();
    let mut child = Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([
            "--exact",
            "child_writer_for_kill_test",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(KILL_CHILD_URL, &fixture.url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the child starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut acknowledged = 0_i64;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("child output");
        if let Some(n) = line.strip_prefix("committed ") {
            acknowledged = n.parse().expect("a count");
            if acknowledged >= 300 {
                break;
            }
        }
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("the child is reaped");
    assert!(
        acknowledged >= 300,
        "the child stopped early at {acknowledged}"
    );

    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let store = fixture.open().await;
        let requests = store
            .requests()
            .recent_requests(i64::MAX)
            .await
            .expect("requests");
        let recorded = requests.len() as i64;
        assert!(
            recorded >= acknowledged,
            "{recorded} recorded < {acknowledged} committed"
        );
        let usage = store
            .requests()
            .usage(&suite::hash(1))
            .await
            .expect("usage");
        assert_eq!(usage.requests, recorded);
        assert_eq!(usage.last_used_ms, recorded);
        let conv = store.conversation("c").await.expect("get").expect("exists");
        assert_eq!(conv.messages, serde_json::json!({ "last": recorded }));
        store.close().await;
    });
}
