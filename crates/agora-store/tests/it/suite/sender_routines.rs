//! Sender-side routines (examples, routines, attempts) through the store's public API, on a
//! temporary SQLite file and (ignored unless `AGORA_TEST_POSTGRES_URL` is set) on Postgres.
//!
//! The fixture mirrors the one in `sender_memory.rs`; it is repeated so this file stands alone.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use agora_protocol::VerifiedDocument;
use agora_store::{
    AttemptOutcome, JobReason, ReviewDecision, RoutineStatus, SenderExample, SenderKey,
    SenderRoutine, SenderRoutineAttempt, SenderRoutineReview, StoreError,
};
use serde_json::json;

use crate::Fixture;

fn key(target: &str) -> SenderKey {
    SenderKey {
        target: target.into(),
        task: "weather".into(),
        protocol_hash: VerifiedDocument::from_text("# Weather").hash(),
    }
}

fn example(key: &SenderKey, n: i64) -> SenderExample {
    SenderExample {
        id: 0,
        key: key.clone(),
        data: json!({"n": n}),
        body: format!("{{\"n\": {n}}}"),
        reply: "{\"t\": 1.5}".into(),
        output: json!({"t": 1.5}),
        created_at_ms: n,
    }
}

pub async fn examples_are_bounded_per_key_and_counted_since_the_last_attempt(fixture: Fixture) {
    let store = fixture.open().await;
    let (bob, carol) = (key("http://bob"), key("http://carol"));
    for n in 1..=4 {
        store
            .sender()
            .add_sender_example(&example(&bob, n), 3)
            .await
            .unwrap();
    }
    store
        .sender()
        .add_sender_example(&example(&carol, 9), 3)
        .await
        .unwrap();
    let kept = store.sender().sender_examples(&bob, 10).await.unwrap();
    let ns: Vec<i64> = kept.iter().map(|e| e.created_at_ms).collect();
    assert_eq!(ns, [2, 3, 4], "the oldest is pruned, oldest first");
    assert_eq!(kept[0].data, json!({"n": 2}));
    assert_eq!(kept[0].output, json!({"t": 1.5}));
    assert_eq!(
        store
            .programming()
            .examples_since_last_attempt(&bob)
            .await
            .unwrap(),
        3
    );

    let attempt = SenderRoutineAttempt {
        id: 0,
        key: bob.clone(),
        job: "j".into(),
        attempt: 1,
        reason: JobReason::Threshold,
        source: Some("function handle(input) {}".into()),
        outcome: AttemptOutcome::TestsFailed,
        report: "0/6 checks passed".into(),
        examples_upto: kept[2].id,
        prompt_tokens: 10,
        completion_tokens: 5,
        cost_usd: 0.5,
        routine_id: None,
        created_at_ms: 7,
    };
    let id = store.programming().add_attempt(&attempt).await.unwrap();
    assert_eq!(
        store
            .programming()
            .examples_since_last_attempt(&bob)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .programming()
            .examples_since_last_attempt(&carol)
            .await
            .unwrap(),
        1
    );
    store
        .sender()
        .add_sender_example(&example(&bob, 5), 3)
        .await
        .unwrap();
    assert_eq!(
        store
            .programming()
            .examples_since_last_attempt(&bob)
            .await
            .unwrap(),
        1
    );
    let attempts = store.sender().sender_attempts().await.unwrap();
    assert_eq!(attempts, [SenderRoutineAttempt { id, ..attempt }]);
}

pub async fn one_routine_per_key_is_active_and_counts_its_runs(fixture: Fixture) {
    let store = fixture.open().await;
    let sender = store.sender();
    let (bob, carol) = (key("http://bob"), key("http://carol"));
    let active = |key: &SenderKey| {
        let key = key.clone();
        async move { sender.active_sender_routine(&key).await.unwrap() }
    };
    let add = |key: &SenderKey, source: &'static str, component: &'static [u8], at: i64| {
        let key = key.clone();
        async move {
            let added = sender.add_sender_routine(&key, source, component, at, false);
            added.await.unwrap()
        }
    };
    assert_eq!(active(&bob).await, None);
    let first = add(&bob, "one", b"component-1", 1).await;
    let other = add(&carol, "c", b"c", 1).await;
    let run = |error: Option<&'static str>, at: i64| async move {
        sender
            .record_sender_routine_run(first, error, at)
            .await
            .unwrap()
    };
    assert_eq!(run(None, 2).await, 0);
    assert_eq!(run(Some("boom"), 3).await, 1);
    let now = active(&bob).await.unwrap();
    assert_eq!((now.id, now.runs, now.failures), (first, 2, 1));
    assert_eq!(now.last_error.as_deref(), Some("boom"));
    let component = sender.sender_routine_component(first).await.unwrap();
    assert_eq!(component, b"component-1");

    // A new routine for the key replaces the active one; the other key's stays.
    let second = add(&bob, "two", b"component-2", 4).await;
    let now = active(&bob).await.unwrap();
    assert_eq!((now.id, now.source.as_str()), (second, "two"));
    assert_eq!(active(&carol).await.unwrap().id, other);
    sender.disable_sender_routine(second, 5).await.unwrap();
    assert_eq!(active(&bob).await, None);
    let all = store.sender().sender_routines().await.unwrap();
    let states: Vec<(i64, &str)> = all.iter().map(|r| (r.id, r.status.as_str())).collect();
    assert_eq!(
        states,
        [(first, "disabled"), (other, "active"), (second, "disabled")]
    );
}

pub async fn a_pending_sender_routine_is_activated_only_by_its_approval(fixture: Fixture) {
    let store = fixture.open().await;
    let bob = key("http://bob");
    let sender = store.sender();
    let active = sender
        .add_sender_routine(&bob, "old", b"c", 1, false)
        .await
        .unwrap();
    let pending = sender
        .add_sender_routine(&bob, "new", b"c", 2, true)
        .await
        .unwrap();
    let is = |routine: Option<SenderRoutine>| routine.map(|r| (r.id, r.status));
    let found = sender.active_sender_routine(&bob).await.unwrap();
    assert_eq!(is(found), Some((active, RoutineStatus::Active)));
    let found = sender.pending_sender_routine(&bob).await.unwrap();
    assert_eq!(is(found), Some((pending, RoutineStatus::Pending)));

    let review = |id, decision, at| SenderRoutineReview {
        id: 0,
        sender_routine_id: id,
        key: bob.clone(),
        decision,
        reason: String::new(),
        reviewer: "ada".into(),
        decided_at_ms: at,
    };
    let approved = sender
        .review_sender_routine(&review(pending, ReviewDecision::Approved, 3), None)
        .await
        .unwrap();
    assert_eq!(is(approved), Some((pending, RoutineStatus::Active)));
    let old = sender.sender_routine(active).await.unwrap();
    assert_eq!(is(old), Some((active, RoutineStatus::Disabled)));
    let again = sender
        .review_sender_routine(&review(pending, ReviewDecision::Rejected, 4), None)
        .await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    let missing = sender
        .review_sender_routine(&review(99, ReviewDecision::Approved, 4), None)
        .await
        .unwrap();
    assert_eq!(missing, None);
    let decided = sender.sender_reviews(Some(&bob)).await.unwrap();
    assert_eq!(
        decided,
        [SenderRoutineReview {
            id: decided[0].id,
            ..review(pending, ReviewDecision::Approved, 3)
        }]
    );
    assert_eq!(
        sender
            .sender_reviews(Some(&key("http://carol")))
            .await
            .unwrap(),
        []
    );
    // An edit stores the edited routine pending, in the same transaction as the decision.
    let carol = key("http://carol");
    let waiting = sender
        .add_sender_routine(&carol, "draft", b"c", 5, true)
        .await
        .unwrap();
    let edit = SenderRoutineReview {
        key: carol.clone(),
        ..review(waiting, ReviewDecision::Edited, 6)
    };
    let unmatched = sender.review_sender_routine(&edit, None).await;
    assert!(
        matches!(unmatched, Err(StoreError::Conflict(_))),
        "{unmatched:?}"
    );
    let fixed = sender
        .review_sender_routine(&edit, Some(("fixed", b"c2")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (fixed.status, fixed.source.as_str()),
        (RoutineStatus::Pending, "fixed")
    );
    let old = sender.sender_routine(waiting).await.unwrap();
    assert_eq!(is(old), Some((waiting, RoutineStatus::Rejected)));
    let decided = sender.sender_reviews(Some(&carol)).await.unwrap();
    assert_eq!(
        decided[0].reason,
        format!("edited: the sender routine {}", fixed.id)
    );
}
