//! Cases for opening, documents and suitability decisions.

use agora_store::{Backend, Decision, DecisionOrigin, ProtocolUsage, StoreError};

use super::{document, hash, recent, stored_document};
use crate::Fixture;

fn urls(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

pub async fn fresh_database_migrates_and_reopens(fixture: Fixture) {
    let store = fixture.open().await;
    assert!(
        store
            .documents()
            .await
            .expect("documents table exists")
            .is_empty()
    );
    assert_eq!(
        store
            .requests()
            .usage(&hash(1))
            .await
            .expect("usage table exists"),
        ProtocolUsage::default()
    );
    assert!(
        store
            .ledger()
            .ledger_totals()
            .await
            .expect("ledger table exists")
            .is_empty()
    );
    assert!(recent(&store, 10).await.is_empty());
    store
        .put_document(&document(1), &[], 10)
        .await
        .expect("put");

    // A second store on the same database while the first is open, then a reopen after closing:
    // the already-applied migration is recognised, not re-run.
    let second = fixture.open().await;
    assert_eq!(second.documents().await.expect("list").len(), 1);
    second.close().await;
    store.close().await;
    let reopened = fixture.open().await;
    assert_eq!(reopened.documents().await.expect("list").len(), 1);
    reopened.close().await;
}

pub async fn a_schema_from_a_newer_agora_is_refused(fixture: Fixture) {
    let store = fixture.open().await;
    let checksum = match fixture.backend() {
        Backend::Sqlite => "X'00'",
        Backend::Postgres => "'\\x00'::bytea",
    };
    store
        .execute_raw_for_tests(&format!(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (9999, 'from a newer agora', TRUE, {checksum}, 0)"
        ))
        .await
        .expect("pretend a newer binary migrated this database");
    store.close().await;
    let result = agora_store::Store::connect(fixture.url()).await;
    assert!(
        matches!(&result, Err(StoreError::Migration(message)) if message.contains("9999")),
        "{result:?}"
    );
}

pub async fn document_round_trip_keeps_sources_in_order(fixture: Fixture) {
    let store = fixture.open().await;
    let doc = document(1);
    assert_eq!(store.document(&doc.hash()).await.expect("get"), None);

    store
        .put_document(&doc, &urls(&["https://a/pd", "https://b/pd"]), 1_000)
        .await
        .expect("put");
    let stored = stored_document(&store, &doc).await;
    assert_eq!(stored.document, doc);
    assert_eq!(stored.document.text(), doc.text());
    assert_eq!(
        stored.document.metadata().name.as_deref(),
        Some("Test protocol 1")
    );
    assert!(stored.document.metadata().multiround);
    assert_eq!(stored.sources, urls(&["https://a/pd", "https://b/pd"]));
    assert_eq!(stored.created_at_ms, 1_000);

    // Re-putting is idempotent: the first timestamp stays, known sources keep their place and
    // new ones are appended in the given order, duplicates dropped.
    store
        .put_document(
            &doc,
            &urls(&[
                "https://c/pd",
                "https://a/pd",
                "https://d/pd",
                "https://c/pd",
            ]),
            2_000,
        )
        .await
        .expect("re-put");
    // Every source learnt below, in the order it was first learnt.
    let learnt = [
        "https://a/pd",
        "https://b/pd",
        "https://c/pd",
        "https://d/pd",
        "https://e/pd",
    ];
    let stored = stored_document(&store, &doc).await;
    assert_eq!(stored.created_at_ms, 1_000);
    assert_eq!(stored.sources, urls(&learnt[..4]));

    store
        .add_sources(&doc.hash(), &urls(&["https://b/pd", "https://e/pd"]))
        .await
        .expect("add sources");
    store
        .add_sources(&doc.hash(), &[])
        .await
        .expect("no sources");
    let stored = stored_document(&store, &doc).await;
    assert_eq!(stored.sources, urls(&learnt));

    // Sources for a document the store does not have are ignored, not an error.
    store
        .add_sources(&hash(7), &urls(&["https://x/pd"]))
        .await
        .expect("unknown hash is a no-op");
    assert_eq!(store.document(&hash(7)).await.expect("get"), None);
    assert_eq!(store.documents().await.expect("list").len(), 1);
    store.close().await;
}

pub async fn documents_are_listed_oldest_first(fixture: Fixture) {
    let store = fixture.open().await;
    let (old, middle, new) = (document(10), document(11), document(12));
    store
        .put_document(&new, &urls(&["https://new"]), 300)
        .await
        .expect("put");
    store
        .put_document(&old, &urls(&["https://old/1", "https://old/2"]), 100)
        .await
        .expect("put");
    store.put_document(&middle, &[], 200).await.expect("put");
    let listed = store.documents().await.expect("list");
    let hashes: Vec<_> = listed.iter().map(|stored| stored.document.hash()).collect();
    assert_eq!(hashes, vec![old.hash(), middle.hash(), new.hash()]);
    assert_eq!(listed[0].sources, urls(&["https://old/1", "https://old/2"]));
    assert!(listed[1].sources.is_empty());
    assert_eq!(listed[2].sources, urls(&["https://new"]));
    assert_eq!(listed[2].created_at_ms, 300);
    store.close().await;
}

pub async fn tampered_document_is_reported_corrupt(fixture: Fixture) {
    let store = fixture.open().await;
    let doc = document(3);
    store
        .put_document(&doc, &urls(&["https://a/pd"]), 5)
        .await
        .expect("put");
    let changed = store
        .execute_raw_for_tests(&format!(
            "UPDATE documents SET text = 'Send me your keys.' WHERE hash = '{}'",
            doc.hash().to_hex()
        ))
        .await
        .expect("tamper");
    assert_eq!(changed, 1);

    let single = store.document(&doc.hash()).await;
    assert!(
        matches!(&single, Err(StoreError::Corrupt(message)) if message.contains(&doc.hash().to_hex())),
        "{single:?}"
    );
    assert!(matches!(
        store.documents().await,
        Err(StoreError::Corrupt(_))
    ));

    // Putting the genuine document again repairs the row.
    store.put_document(&doc, &[], 6).await.expect("re-put");
    let stored = store
        .document(&doc.hash())
        .await
        .expect("repaired")
        .expect("stored");
    assert_eq!(stored.document, doc);
    assert_eq!(stored.sources, urls(&["https://a/pd"]));
    store.close().await;
}

pub async fn decisions_are_set_replaced_and_cleared(fixture: Fixture) {
    let store = fixture.open().await;
    let h = hash(4);
    assert_eq!(store.suitability(&h).await.expect("get"), None);

    let by_llm = Decision {
        allowed: true,
        origin: DecisionOrigin::Llm,
        reason: "Harmless weather lookup.".to_string(),
        decided_at_ms: 10,
    };
    store.set_suitability(&h, &by_llm).await.expect("set");
    assert_eq!(store.suitability(&h).await.expect("get"), Some(by_llm));

    let by_operator = Decision {
        allowed: false,
        origin: DecisionOrigin::Operator,
        reason: "Blocked by the operator.".to_string(),
        decided_at_ms: 20,
    };
    store
        .set_suitability(&h, &by_operator)
        .await
        .expect("replace");
    assert_eq!(store.suitability(&h).await.expect("get"), Some(by_operator));
    assert_eq!(store.suitability(&hash(5)).await.expect("other hash"), None);

    assert!(store.clear_suitability(&h).await.expect("clear"));
    assert!(!store.clear_suitability(&h).await.expect("clear again"));
    assert_eq!(store.suitability(&h).await.expect("get"), None);
    store.close().await;
}

pub async fn unknown_stored_words_are_reported_corrupt(fixture: Fixture) {
    let store = fixture.open().await;
    let h = hash(6);
    let decision = Decision {
        allowed: true,
        origin: DecisionOrigin::Llm,
        reason: String::new(),
        decided_at_ms: 1,
    };
    store.set_suitability(&h, &decision).await.expect("set");
    store
        .execute_raw_for_tests("UPDATE suitability SET origin = 'oracle'")
        .await
        .expect("tamper");
    let result = store.suitability(&h).await;
    assert!(
        matches!(&result, Err(StoreError::Corrupt(message)) if message.contains("oracle")),
        "{result:?}"
    );
    store
        .execute_raw_for_tests("UPDATE suitability SET origin = 'llm', allowed = 2")
        .await
        .expect("tamper");
    assert!(matches!(
        store.suitability(&h).await,
        Err(StoreError::Corrupt(_))
    ));

    store
        .create_conversation(&super::conversation("c1", None, 0))
        .await
        .expect("create");
    store
        .execute_raw_for_tests("UPDATE conversations SET messages = '{not json'")
        .await
        .expect("tamper");
    assert!(matches!(
        store.conversation("c1").await,
        Err(StoreError::Corrupt(_))
    ));
    store.close().await;
}
