//! Routines: the registry, one active routine per protocol, the change counter, and run and
//! failure counts recorded with requests.

use agora_protocol::ProtocolHash;
use agora_store::{
    NewRoutine, RequestPath, ReviewDecision, Routine, RoutineCode, RoutineLanguage, RoutineOrigin,
    RoutineReview, RoutineStatus, Store, StoreError,
};

use super::{hash, recent, record, request};
use crate::Fixture;

/// A routine named `name` for `protocol_hash`, with a component that contains every byte value.
/// Adds an active routine `name` for `hash(protocol)` at `now_ms`.
async fn add_active(store: &Store, name: &str, protocol: u8, now_ms: i64) -> Routine {
    let routine = new_routine(name, hash(protocol), RoutineStatus::Active);
    store.add_routine(&routine, now_ms).await.expect("add")
}

pub fn new_routine(name: &str, protocol_hash: ProtocolHash, status: RoutineStatus) -> NewRoutine {
    NewRoutine {
        name: name.to_string(),
        protocol_hash,
        language: RoutineLanguage::JavaScript,
        code: RoutineCode {
            source: Some(format!("function handle(body) {{ return {name:?}; }}")),
            component: (0..=255u8).chain([0, 0, 255]).collect(),
        },
        tools: vec!["weather_forecast".to_string(), "b".to_string()],
        timeout_ms: 1000,
        memory_bytes: 64 << 20,
        origin: RoutineOrigin::Human,
        status,
    }
}

pub async fn routines_round_trip_with_their_code(fixture: Fixture) {
    let store = fixture.open().await;
    assert!(store.routines().await.expect("list").is_empty());
    let version = store.routines_version().await.expect("version");
    let new = new_routine("weather", hash(1), RoutineStatus::Active);
    let added = store.add_routine(&new, 1_000).await.expect("add");
    assert!(store.routines_version().await.expect("version") > version);

    let listed = store.routines().await.expect("list");
    assert_eq!(listed, vec![added.clone()]);
    assert_eq!(listed[0].tools, new.tools);
    assert_eq!(listed[0].status, RoutineStatus::Active);
    assert_eq!(listed[0].origin, RoutineOrigin::Human);
    assert_eq!((listed[0].runs, listed[0].failures), (0, 0));
    assert_eq!(
        store.routine(added.id).await.expect("get"),
        Some(added.clone())
    );
    assert_eq!(
        store.routine_named("weather").await.expect("get"),
        Some(added.clone())
    );
    assert_eq!(store.routine_named("nope").await.expect("get"), None);
    assert_eq!(
        store.routine_code(added.id).await.expect("code"),
        Some(new.code.clone())
    );

    let duplicate = store.add_routine(&new, 2_000).await;
    assert!(
        matches!(&duplicate, Err(StoreError::Conflict(message)) if message.contains("weather")),
        "{duplicate:?}"
    );

    // A wasm routine without source.
    let mut wasm = new_routine("wasm", hash(2), RoutineStatus::Disabled);
    wasm.language = RoutineLanguage::Wasm;
    wasm.code.source = None;
    wasm.origin = RoutineOrigin::Llm;
    let wasm = store.add_routine(&wasm, 3_000).await.expect("add");
    let code = store
        .routine_code(wasm.id)
        .await
        .expect("code")
        .expect("stored");
    assert_eq!(code.source, None);
    assert_eq!(
        store
            .routine(wasm.id)
            .await
            .expect("get")
            .expect("stored")
            .origin,
        RoutineOrigin::Llm
    );

    let before = store.routines_version().await.expect("version");
    assert!(store.delete_routine(added.id).await.expect("delete"));
    assert!(!store.delete_routine(added.id).await.expect("delete"));
    assert!(store.routines_version().await.expect("version") > before);
    assert_eq!(store.routine_code(added.id).await.expect("code"), None);
    assert_eq!(store.routines().await.expect("list").len(), 1);
}

pub async fn one_routine_is_active_per_protocol(fixture: Fixture) {
    let store = fixture.open().await;
    let first = add_active(&store, "first", 1, 1).await;
    let other_protocol = add_active(&store, "other", 2, 2).await;
    // Adding an active routine disables the protocol's active one, not other protocols'.
    let second = add_active(&store, "second", 1, 3).await;
    let status = |routines: &[agora_store::Routine], id: i64| {
        routines
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.status)
            .expect("listed")
    };
    let listed = store.routines().await.expect("list");
    assert_eq!(status(&listed, first.id), RoutineStatus::Disabled);
    assert_eq!(status(&listed, second.id), RoutineStatus::Active);
    assert_eq!(status(&listed, other_protocol.id), RoutineStatus::Active);

    // Enabling the first disables the second, in one step.
    let version = store.routines_version().await.expect("version");
    let enabled = store
        .set_routine_status(first.id, RoutineStatus::Active, 10)
        .await
        .expect("enable")
        .expect("exists");
    assert_eq!(enabled.status, RoutineStatus::Active);
    assert_eq!(enabled.updated_at_ms, 10);
    assert!(store.routines_version().await.expect("version") > version);
    let listed = store.routines().await.expect("list");
    assert_eq!(status(&listed, first.id), RoutineStatus::Active);
    assert_eq!(status(&listed, second.id), RoutineStatus::Disabled);

    // Setting the status it already has changes nothing.
    let version = store.routines_version().await.expect("version");
    store
        .set_routine_status(first.id, RoutineStatus::Active, 20)
        .await
        .expect("enable again");
    assert_eq!(store.routines_version().await.expect("version"), version);

    store
        .set_routine_status(first.id, RoutineStatus::Disabled, 30)
        .await
        .expect("disable");
    let listed = store.routines().await.expect("list");
    assert!(
        listed
            .iter()
            .filter(|r| r.protocol_hash == hash(1))
            .all(|r| r.status == RoutineStatus::Disabled)
    );
    assert_eq!(
        store
            .set_routine_status(9_999, RoutineStatus::Active, 40)
            .await
            .expect("unknown id"),
        None
    );

    // The database itself refuses a second active routine, whoever writes.
    let sneaky = store
        .execute_raw_for_tests(&format!(
            "UPDATE routines SET status = 'active' WHERE protocol_hash = '{}'",
            hash(1).to_hex()
        ))
        .await;
    assert!(matches!(sneaky, Err(StoreError::Database(_))), "{sneaky:?}");
}

pub async fn requests_count_routine_runs_and_failures(fixture: Fixture) {
    let store = fixture.open().await;
    let routine = add_active(&store, "r", 1, 1).await;
    let version = store.routines_version().await.expect("version");

    let mut answered = request(1, Some(hash(1)), RequestPath::Routine, 100);
    answered.routine_id = Some(routine.id);
    record(&store, &answered).await;
    let mut failed = request(2, Some(hash(1)), RequestPath::Fallback, 200);
    failed.routine_id = Some(routine.id);
    failed.routine_error = Some("routine trapped: unreachable".to_string());
    record(&store, &failed).await;

    let counted = store
        .routine(routine.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!((counted.runs, counted.failures), (2, 1));
    assert_eq!(
        counted.last_error.as_deref(),
        Some("routine trapped: unreachable")
    );
    assert_eq!(counted.last_failure_at_ms, Some(200));
    // Counting runs is not a change to the set of routines.
    assert_eq!(store.routines_version().await.expect("version"), version);

    let requests = recent(&store, 10).await;
    assert_eq!(requests[0], failed);
    assert_eq!(requests[1], answered);
    let usage = store.requests().usage(&hash(1)).await.expect("usage");
    assert_eq!((usage.routine, usage.fallback), (1, 1));

    // A request whose routine was removed meanwhile is still recorded.
    store.delete_routine(routine.id).await.expect("delete");
    let mut late = request(3, Some(hash(1)), RequestPath::Routine, 300);
    late.routine_id = Some(routine.id);
    record(&store, &late).await;
}

/// Reviews: approving a pending routine activates it (disabling the protocol's active one) and
/// records the decision in the same transaction; a routine that is not pending cannot be
/// reviewed; reviews are listed per protocol, oldest first.
pub async fn reviews_decide_pending_routines_once(fixture: Fixture) {
    let store = fixture.open().await;
    let active = add_active(&store, "human", 1, 1_000).await;
    let pending = new_routine("llm-a", hash(1), RoutineStatus::Pending);
    let pending = store.add_routine(&pending, 2_000).await.expect("add");
    let other = new_routine("llm-b", hash(2), RoutineStatus::Pending);
    let other = store.add_routine(&other, 2_000).await.expect("add");
    let version = store.routines_version().await.expect("version");
    let review = |routine_id, decision, reason: &str, at| RoutineReview {
        id: 0,
        routine_id,
        protocol_hash: hash(9), // the store takes the routine's own
        decision,
        reason: reason.to_string(),
        reviewer: "ada".to_string(),
        decided_at_ms: at,
    };

    let approved = store
        .programming()
        .review_routine(&review(pending.id, ReviewDecision::Approved, "", 3_000))
        .await
        .expect("review")
        .expect("the routine exists");
    assert_eq!(approved.status, RoutineStatus::Active);
    let human = store.routine(active.id).await.unwrap().unwrap();
    assert_eq!(
        human.status,
        RoutineStatus::Disabled,
        "one active per protocol"
    );
    assert!(store.routines_version().await.unwrap() > version);

    let twice = store
        .programming()
        .review_routine(&review(pending.id, ReviewDecision::Rejected, "no", 4_000))
        .await;
    assert!(matches!(twice, Err(StoreError::Conflict(_))), "{twice:?}");
    let missing = store
        .programming()
        .review_routine(&review(999, ReviewDecision::Approved, "", 4_000))
        .await;
    assert!(matches!(missing, Ok(None)), "{missing:?}");
    let rejected = store
        .programming()
        .review_routine(&review(
            other.id,
            ReviewDecision::Rejected,
            "too slow",
            5_000,
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rejected.status, RoutineStatus::Rejected);

    let first = store.programming().reviews(Some(&hash(1))).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(
        (
            first[0].protocol_hash,
            first[0].decision,
            first[0].decided_at_ms
        ),
        (hash(1), ReviewDecision::Approved, 3_000)
    );
    let all = store.programming().reviews(None).await.unwrap();
    let reasons: Vec<&str> = all.iter().map(|r| r.reason.as_str()).collect();
    assert_eq!(reasons, ["", "too slow"]);
}

/// Shadow checks: recorded with both answers, listed newest first (disagreements alone on
/// request), tallied per routine, and only a routine's newest kept.
pub async fn shadow_checks_are_listed_and_tallied_per_routine(fixture: Fixture) {
    let store = fixture.open().await;
    let check = |routine_id, agreed, at| agora_store::ShadowCheck {
        id: 0,
        routine_id,
        protocol_hash: hash(1),
        query_id: format!("q{at}"),
        body: "{\"a\": 1}".to_string(),
        routine_reply: "{\"b\": 1}".to_string(),
        llm_reply: "{\"b\": 2}".to_string(),
        agreed,
        difference: if agreed {
            String::new()
        } else {
            "replies differ".to_string()
        },
        cost_usd: 0.25,
        created_at_ms: at,
    };
    let programming = || store.programming();
    for (routine_id, agreed, at) in [(1, true, 1), (1, false, 2), (1, true, 3), (2, false, 4)] {
        programming()
            .record_shadow_check(&check(routine_id, agreed, at))
            .await
            .expect("record");
    }
    let all = programming()
        .shadow_checks(1, false, 10)
        .await
        .expect("list");
    let at: Vec<i64> = all.iter().map(|c| c.created_at_ms).collect();
    assert_eq!(at, [3, 2, 1]);
    assert_eq!(
        all[1],
        agora_store::ShadowCheck {
            id: all[1].id,
            ..check(1, false, 2)
        }
    );
    let disagreements = programming()
        .shadow_checks(1, true, 10)
        .await
        .expect("list");
    assert_eq!(disagreements.len(), 1);
    assert_eq!(
        programming()
            .shadow_checks(1, false, 1)
            .await
            .expect("list")
            .len(),
        1
    );
    let after = programming()
        .shadow_checks_after(all[1].id)
        .await
        .expect("after");
    let at: Vec<i64> = after.iter().map(|c| c.created_at_ms).collect();
    assert_eq!(at, [3, 4], "oldest first");
    let tallies = programming().shadow_tallies().await.expect("tallies");
    let tallies: Vec<(i64, i64, i64, f64)> = tallies
        .iter()
        .map(|t| (t.routine_id, t.checks, t.disagreements, t.cost_usd))
        .collect();
    assert_eq!(tallies, [(1, 3, 1, 0.75), (2, 1, 1, 0.25)]);

    // A routine's newest checks are kept; its tally counts every one.
    let kept = agora_store::SHADOW_CHECKS_KEPT;
    for at in 0..kept + 2 {
        programming()
            .record_shadow_check(&check(3, at % 2 == 0, 100 + at))
            .await
            .expect("record");
    }
    let listed = programming()
        .shadow_checks(3, false, 1_000)
        .await
        .expect("list");
    assert_eq!(listed.len() as i64, kept);
    assert_eq!(
        listed.last().unwrap().created_at_ms,
        102,
        "the two oldest went"
    );
    let tally = programming().shadow_tallies().await.expect("tallies");
    let tally = tally.iter().find(|t| t.routine_id == 3).unwrap();
    assert_eq!(
        (tally.checks, tally.disagreements),
        (kept + 2, (kept + 2) / 2)
    );
    let one = programming().shadow_tally(3).await.expect("tally");
    assert_eq!(one.as_ref(), Some(tally));
    assert_eq!(programming().shadow_tally(99).await.expect("tally"), None);
}
