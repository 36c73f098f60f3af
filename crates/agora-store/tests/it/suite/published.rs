//! The protocol database's catalogue and peer cursors, through the store's public API, on a
//! temporary SQLite file and (ignored unless `AGORA_TEST_POSTGRES_URL` is set) on Postgres.
//!
//! The fixture mirrors the one in `store.rs` (a fresh SQLite file, or a fresh schema per case in
//! the Postgres test database); it is repeated here so this file stands alone.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use agora_protocol::VerifiedDocument;
use agora_store::{PeerPage, PublishedCounts, PublishedDocument, Store, StoreError};

use crate::Fixture;

/// The catalogue entry for `document`, which must be there.
async fn published(store: &Store, document: &VerifiedDocument) -> PublishedDocument {
    let entry = store
        .catalogue()
        .published_document(&document.hash())
        .await
        .unwrap();
    entry.expect("published")
}

fn pd(name: &str, description: &str) -> VerifiedDocument {
    VerifiedDocument::from_text(&format!(
        "---\nname: {name}\ndescription: {description}\nmultiround: false\n---\nBody of {name}.\n"
    ))
}

fn words(list: &[&str]) -> Vec<String> {
    list.iter().map(|w| w.to_string()).collect()
}

pub async fn publishing_is_idempotent_and_numbers_entries(fixture: Fixture) {
    let store = fixture.open().await;
    let weather = pd("Weather", "Forecasts");
    let taxi = pd("Taxi", "Rides");
    assert_eq!(
        store
            .catalogue()
            .publish_document(&weather, None, 10)
            .await
            .unwrap(),
        (1, true)
    );
    assert_eq!(
        store
            .catalogue()
            .publish_document(&weather, Some("http://peer"), 20)
            .await
            .unwrap(),
        (1, false)
    );
    assert_eq!(
        store
            .catalogue()
            .publish_document(&taxi, None, 30)
            .await
            .unwrap(),
        (2, true)
    );
    let stored = published(&store, &weather).await;
    assert_eq!(stored.document, weather);
    assert_eq!(stored.peer, None, "a known entry keeps its origin");
    assert_eq!(stored.published_at_ms, 10);
    assert_eq!(
        store.catalogue().published_counts().await.unwrap(),
        PublishedCounts {
            local: 2,
            from_peers: 0
        }
    );
    let unknown = VerifiedDocument::from_text("never published");
    assert_eq!(
        store
            .catalogue()
            .published_document(&unknown.hash())
            .await
            .unwrap(),
        None
    );
    store.close().await;
}

pub async fn pages_follow_seq_order(fixture: Fixture) {
    let store = fixture.open().await;
    for n in 1..=5 {
        store
            .catalogue()
            .publish_document(&pd(&format!("P{n}"), "d"), None, n)
            .await
            .unwrap();
    }
    let seqs = |page: Vec<agora_store::PublishedDocument>| -> Vec<i64> {
        page.iter().map(|entry| entry.seq).collect()
    };
    assert_eq!(
        seqs(store.catalogue().published_since(0, 2).await.unwrap()),
        [1, 2]
    );
    assert_eq!(
        seqs(store.catalogue().published_since(2, 10).await.unwrap()),
        [3, 4, 5]
    );
    assert!(
        store
            .catalogue()
            .published_since(5, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let first = store.catalogue().published_since(0, 1).await.unwrap();
    assert_eq!(
        first[0].document.metadata().name.as_deref(),
        Some("P1"),
        "entries carry their text"
    );
    store.close().await;
}

pub async fn search_narrows_by_lowercased_words(fixture: Fixture) {
    let store = fixture.open().await;
    let weather = pd("Weather Forecast", "Daily temperature and rain");
    let taxi = pd("Taxi booking", "Book a RIDE across town");
    let cafe = pd("Émile's café", "Menus; 100% coffee");
    let bare = VerifiedDocument::from_text("no front matter at all");
    for (n, document) in [&weather, &taxi, &cafe, &bare].into_iter().enumerate() {
        store
            .catalogue()
            .publish_document(document, None, n as i64)
            .await
            .unwrap();
    }
    let found = async |query: &[&str]| -> Vec<_> {
        let hits = store
            .catalogue()
            .search_published(&words(query), 10)
            .await
            .unwrap();
        hits.iter().map(|hit| hit.hash).collect()
    };
    assert_eq!(found(&["weather"]).await, [weather.hash()]);
    assert_eq!(
        found(&["RIDE"]).await,
        [taxi.hash()],
        "the query word is lowercased too"
    );
    assert_eq!(
        found(&["ÉMILE"]).await,
        [cafe.hash()],
        "case folding is Unicode, on both backends"
    );
    assert_eq!(
        found(&["rain", "taxi"]).await,
        [taxi.hash(), weather.hash()],
        "any word matches; newest first"
    );
    assert!(
        store
            .catalogue()
            .search_published(&words(&["_a%"]), 10)
            .await
            .unwrap()
            .is_empty(),
        "wildcards are literal"
    );
    assert_eq!(found(&["0%"]).await, [cafe.hash()]);
    let all = store.catalogue().search_published(&[], 10).await.unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(all[0].hash, bare.hash());
    assert_eq!(all[0].name, None);
    assert_eq!(all[3].name.as_deref(), Some("Weather Forecast"));
    assert_eq!(
        all[3].description.as_deref(),
        Some("Daily temperature and rain")
    );
    assert_eq!(
        store
            .catalogue()
            .search_published(&[], 2)
            .await
            .unwrap()
            .len(),
        2
    );
    store.close().await;
}

pub async fn peer_pages_store_documents_and_move_the_cursor_forward(fixture: Fixture) {
    let store = fixture.open().await;
    let peer = "http://127.0.0.1:9001";
    let mine = pd("Mine", "posted here");
    let theirs = pd("Theirs", "pulled");
    store
        .catalogue()
        .publish_document(&mine, None, 1)
        .await
        .unwrap();
    assert_eq!(
        store.catalogue().peer_state(peer).await.unwrap().last_seq,
        0
    );

    let documents = [mine.clone(), theirs.clone()];
    let page = PeerPage {
        url: peer,
        documents: &documents,
        last_seq: 7,
        rejected: 1,
    };
    assert_eq!(
        store.catalogue().ingest_peer_page(page, 50).await.unwrap(),
        1
    );
    let state = store.catalogue().peer_state(peer).await.unwrap();
    assert_eq!(
        (state.last_seq, state.synced_at_ms, state.rejected),
        (7, Some(50), 1)
    );
    let pulled = published(&store, &theirs).await;
    assert_eq!(pulled.peer.as_deref(), Some(peer));
    assert_eq!(published(&store, &mine).await.peer, None);

    // A peer that lost its data and serves lower seqs never moves the cursor back.
    let older = PeerPage {
        url: peer,
        documents: &[],
        last_seq: 3,
        rejected: 0,
    };
    assert_eq!(
        store.catalogue().ingest_peer_page(older, 60).await.unwrap(),
        0
    );
    let state = store.catalogue().peer_state(peer).await.unwrap();
    assert_eq!((state.last_seq, state.synced_at_ms), (7, Some(60)));
    assert_eq!(
        store.catalogue().published_counts().await.unwrap(),
        PublishedCounts {
            local: 1,
            from_peers: 1
        }
    );
    store.close().await;
}

pub async fn peer_errors_are_counted_until_a_success(fixture: Fixture) {
    let store = fixture.open().await;
    let peer = "http://peer.example";
    store
        .catalogue()
        .record_peer_error(peer, "timed out")
        .await
        .unwrap();
    store
        .catalogue()
        .record_peer_error(peer, "status 500")
        .await
        .unwrap();
    let state = store.catalogue().peer_state(peer).await.unwrap();
    assert_eq!(
        (state.errors, state.last_error.as_deref(), state.last_seq),
        (2, Some("status 500"), 0)
    );
    let page = PeerPage {
        url: peer,
        documents: &[],
        last_seq: 2,
        rejected: 0,
    };
    store.catalogue().ingest_peer_page(page, 5).await.unwrap();
    let states = store.catalogue().peer_states().await.unwrap();
    assert_eq!(states.len(), 1);
    assert_eq!(
        (
            states[0].errors,
            states[0].last_error.as_deref(),
            states[0].last_seq
        ),
        (2, None, 2)
    );
    store.close().await;
}

pub async fn tampered_text_is_reported_corrupt_and_repaired_by_publishing(fixture: Fixture) {
    let store = fixture.open().await;
    let document = pd("Genuine", "text");
    store
        .catalogue()
        .publish_document(&document, None, 1)
        .await
        .unwrap();
    store
        .execute_raw_for_tests("UPDATE published_documents SET text = 'forged'")
        .await
        .unwrap();
    assert!(matches!(
        store.catalogue().published_document(&document.hash()).await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        store.catalogue().published_since(0, 10).await,
        Err(StoreError::Corrupt(_))
    ));
    assert_eq!(
        store
            .catalogue()
            .publish_document(&document, None, 2)
            .await
            .unwrap(),
        (1, false)
    );
    assert_eq!(published(&store, &document).await.document, document);
    store.close().await;
}

pub async fn catalogue_and_cursors_survive_a_restart(fixture: Fixture) {
    let store = fixture.open().await;
    let first = pd("First", "before the restart");
    store
        .catalogue()
        .publish_document(&first, None, 1)
        .await
        .unwrap();
    let page = PeerPage {
        url: "http://peer",
        documents: &[],
        last_seq: 42,
        rejected: 0,
    };
    store.catalogue().ingest_peer_page(page, 2).await.unwrap();
    store.close().await;

    let store = fixture.open().await;
    assert_eq!(
        store
            .catalogue()
            .peer_state("http://peer")
            .await
            .unwrap()
            .last_seq,
        42
    );
    assert!(
        store
            .catalogue()
            .published_document(&first.hash())
            .await
            .unwrap()
            .is_some()
    );
    let (seq, created) = store
        .catalogue()
        .publish_document(&pd("Second", "after"), None, 3)
        .await
        .unwrap();
    assert!(created);
    assert!(seq > 1, "seqs keep growing across restarts: {seq}");
    store.close().await;
}

pub async fn concurrent_publishes_get_distinct_seqs(fixture: Fixture) {
    let store = fixture.open().await;
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..16 {
        let store = store.clone();
        tasks.spawn(async move {
            let document = pd(&format!("Concurrent {n}"), "racing");
            store
                .catalogue()
                .publish_document(&document, None, n)
                .await
                .unwrap()
        });
    }
    let mut seqs = Vec::new();
    while let Some(result) = tasks.join_next().await {
        let (seq, created) = result.unwrap();
        assert!(created);
        seqs.push(seq);
    }
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), 16);
    let listed: Vec<i64> = store
        .catalogue()
        .published_since(0, 100)
        .await
        .unwrap()
        .iter()
        .map(|entry| entry.seq)
        .collect();
    assert_eq!(listed, seqs);
    store.close().await;
}
