//! The sender's memory per (target, task) and its run log, through the store's public API, on a
//! temporary SQLite file and (ignored unless `AGORA_TEST_POSTGRES_URL` is set) on Postgres.
//!
//! The fixture mirrors the one in `published.rs` (a fresh SQLite file, or a fresh schema per
//! case in the Postgres test database); it is repeated here so this file stands alone.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use agora_protocol::{ProtocolHash, VerifiedDocument};
use agora_store::{SenderMemory, SenderRun, SenderTotals, Store};

use crate::Fixture;

fn hash(name: &str) -> ProtocolHash {
    VerifiedDocument::from_text(&format!(
        "---\nname: {name}\ndescription: A protocol.\nmultiround: false\n---\nBody of {name}.\n"
    ))
    .hash()
}

fn memory(target: &str, task: &str) -> SenderMemory {
    SenderMemory {
        target: target.to_string(),
        task: task.to_string(),
        uses: 1,
        next_negotiation_at: 10,
        updated_at_ms: 1_000,
        ..SenderMemory::default()
    }
}

/// What `store` remembers of the task `weather` sent to Bob.
async fn bobs_weather(store: &Store) -> Option<SenderMemory> {
    store
        .sender()
        .sender_memory("http://bob.test/", "weather")
        .await
        .unwrap()
}

fn run(target: &str, task: &str, rung: &str, outcome: &str, at: i64) -> SenderRun {
    SenderRun {
        target: target.to_string(),
        task: task.to_string(),
        rung: rung.to_string(),
        steps: String::new(),
        protocol_hash: None,
        outcome: outcome.to_string(),
        error: None,
        llm_calls: 2,
        tokens: 100,
        cost_usd: 0.0015,
        created_at_ms: at,
    }
}

pub async fn a_fresh_memory_round_trips_with_no_protocol(fixture: Fixture) {
    let store = fixture.open().await;
    assert_eq!(
        bobs_weather(&store).await,
        None,
        "nothing before the first run"
    );
    let fresh = memory("http://bob.test/", "weather");
    store.sender().put_sender_memory(&fresh).await.unwrap();
    assert_eq!(bobs_weather(&store).await, Some(fresh));
    assert_eq!(
        store
            .sender()
            .sender_memory("http://bob.test/", "taxi")
            .await
            .unwrap(),
        None,
        "keyed by task as well as target"
    );
    assert_eq!(
        store
            .sender()
            .sender_memory("http://carol.test/", "weather")
            .await
            .unwrap(),
        None,
        "keyed by target as well as task"
    );
    assert!(
        store
            .sender()
            .sender_protocols_for_task("weather")
            .await
            .unwrap()
            .is_empty(),
        "a memory without a protocol in use is no candidate"
    );
}

pub async fn a_full_memory_round_trips_with_sources_and_rejections(fixture: Fixture) {
    let store = fixture.open().await;
    let full = SenderMemory {
        target: "http://bob.test/agora".to_string(),
        task: "weather".to_string(),
        uses: 12,
        protocol_hash: Some(hash("Weather")),
        protocol_sources: vec![
            "https://db.test/protocols/abc".to_string(),
            "data:text/plain;charset=utf-8,---%0Aname%3A%20Weather%0A---%0A°C".to_string(),
        ],
        explored: true,
        rejected: vec![hash("Old"), hash("Older")],
        negotiation_requested: true,
        next_negotiation_at: 22,
        updated_at_ms: 1_700_000_000_123,
    };
    store.sender().put_sender_memory(&full).await.unwrap();
    let read = store
        .sender()
        .sender_memory("http://bob.test/agora", "weather")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read, full);
    assert_eq!(
        read.rejected[0],
        hash("Old"),
        "the rejections keep their order"
    );
}

pub async fn putting_again_replaces_the_whole_row(fixture: Fixture) {
    let store = fixture.open().await;
    let target = "http://bob.test/";
    let first = SenderMemory {
        uses: 5,
        protocol_hash: Some(hash("Weather")),
        protocol_sources: vec!["https://db.test/protocols/w".to_string()],
        explored: true,
        negotiation_requested: true,
        ..memory(target, "weather")
    };
    store.sender().put_sender_memory(&first).await.unwrap();
    // The protocol was rejected: the ladder drops it, remembers the refusal, and goes back to
    // natural language. Every field is replaced, the cleared ones included.
    let second = SenderMemory {
        uses: 6,
        protocol_hash: None,
        protocol_sources: Vec::new(),
        explored: false,
        rejected: vec![hash("Weather")],
        negotiation_requested: false,
        next_negotiation_at: 16,
        updated_at_ms: 2_000,
        ..memory(target, "weather")
    };
    store.sender().put_sender_memory(&second).await.unwrap();
    assert_eq!(
        store
            .sender()
            .sender_memory(target, "weather")
            .await
            .unwrap(),
        Some(second)
    );
    assert!(
        store
            .sender()
            .sender_protocols_for_task("weather")
            .await
            .unwrap()
            .is_empty()
    );
    // Another task to the same target is a row of its own.
    store
        .sender()
        .put_sender_memory(&memory(target, "taxi"))
        .await
        .unwrap();
    assert_eq!(
        store
            .sender()
            .sender_memory(target, "weather")
            .await
            .unwrap()
            .unwrap()
            .uses,
        6
    );
}

pub async fn protocols_for_a_task_are_those_in_use_across_targets(fixture: Fixture) {
    let store = fixture.open().await;
    let with = |target: &str, task: &str, name: &str| SenderMemory {
        protocol_hash: Some(hash(name)),
        protocol_sources: vec![format!("https://db.test/protocols/{name}")],
        ..memory(target, task)
    };
    for remembered in [
        with("http://carol.test/", "weather", "WeatherB"),
        with("http://alice.test/", "weather", "WeatherA"),
        memory("http://bob.test/", "weather"),
        with("http://alice.test/", "taxi", "Taxi"),
    ] {
        store.sender().put_sender_memory(&remembered).await.unwrap();
    }

    let found = store
        .sender()
        .sender_protocols_for_task("weather")
        .await
        .unwrap();
    let targets: Vec<&str> = found.iter().map(|m| m.target.as_str()).collect();
    assert_eq!(
        targets,
        ["http://alice.test/", "http://carol.test/"],
        "only memories with a protocol in use, ordered by target"
    );
    assert_eq!(found[0].protocol_hash, Some(hash("WeatherA")));
    assert_eq!(
        found[1].protocol_sources,
        ["https://db.test/protocols/WeatherB"]
    );
    assert!(found.iter().all(|m| m.task == "weather"));
    assert!(
        store
            .sender()
            .sender_protocols_for_task("unknown")
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn runs_are_logged_totalled_and_listed_oldest_first(fixture: Fixture) {
    let store = fixture.open().await;
    assert!(store.sender().sender_totals().await.unwrap().is_empty());
    assert!(
        store
            .sender()
            .sender_runs("http://bob.test/", "weather", 10)
            .await
            .unwrap()
            .is_empty()
    );

    let bob = "http://bob.test/";
    let mut logged = Vec::new();
    for (i, (rung, outcome)) in [
        ("natural", "success"),
        ("natural", "invalid_output"),
        ("natural", "success"),
        ("protocol", "rejected"),
        ("natural", "success"),
        ("protocol", "success"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut entry = run(bob, "weather", rung, outcome, 1_000 + i as i64);
        if rung == "protocol" {
            entry.protocol_hash = Some(hash("Weather"));
            entry.steps = "explored,found".to_string();
        }
        if outcome != "success" {
            entry.error = Some(format!("{outcome} at run {i}"));
            entry.llm_calls = 0;
            entry.tokens = 0;
            entry.cost_usd = 0.0;
        }
        store.sender().record_sender_run(&entry).await.unwrap();
        logged.push(entry);
    }
    // Same timestamps on other (target, task) pairs: the listing filters by both.
    store
        .sender()
        .record_sender_run(&run(
            "http://carol.test/",
            "weather",
            "natural",
            "success",
            1_002,
        ))
        .await
        .unwrap();
    store
        .sender()
        .record_sender_run(&run(bob, "taxi", "natural", "failed", 1_003))
        .await
        .unwrap();

    let all = store
        .sender()
        .sender_runs(bob, "weather", 100)
        .await
        .unwrap();
    assert_eq!(all, logged, "every field round-trips, oldest first");
    let newest = store.sender().sender_runs(bob, "weather", 2).await.unwrap();
    assert_eq!(newest, logged[4..], "the newest two, still oldest first");
    assert!(
        store
            .sender()
            .sender_runs(bob, "weather", 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .sender()
            .sender_runs(bob, "weather", -5)
            .await
            .unwrap()
            .is_empty(),
        "a negative limit reads as none"
    );

    let totals = store.sender().sender_totals().await.unwrap();
    let row =
        |target: &str, task: &str, rung: &str, runs, successes, llm_calls, tokens| SenderTotals {
            target: target.to_string(),
            task: task.to_string(),
            rung: rung.to_string(),
            runs,
            successes,
            llm_calls,
            tokens,
        };
    assert_eq!(
        totals,
        [
            row(bob, "taxi", "natural", 1, 0, 2, 100),
            row(bob, "weather", "natural", 4, 3, 6, 300),
            row(bob, "weather", "protocol", 2, 1, 2, 100),
            row("http://carol.test/", "weather", "natural", 1, 1, 2, 100),
        ],
        "grouped per (target, task, rung) and ordered by them"
    );
}

pub async fn memory_and_log_survive_a_restart(fixture: Fixture) {
    let store = fixture.open().await;
    let kept = SenderMemory {
        uses: 3,
        protocol_hash: Some(hash("Weather")),
        protocol_sources: vec!["https://db.test/protocols/w".to_string()],
        rejected: vec![hash("Old")],
        ..memory("http://bob.test/", "weather")
    };
    store.sender().put_sender_memory(&kept).await.unwrap();
    let logged = run("http://bob.test/", "weather", "protocol", "success", 5_000);
    store.sender().record_sender_run(&logged).await.unwrap();
    store.close().await;

    let reopened = fixture.open().await;
    assert_eq!(bobs_weather(&reopened).await, Some(kept));
    assert_eq!(
        reopened
            .sender()
            .sender_runs("http://bob.test/", "weather", 10)
            .await
            .unwrap(),
        [logged]
    );
}
