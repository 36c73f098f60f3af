//! Cases for the request log, usage counters, shared counters and the LLM ledger.

use std::time::Duration;

use agora_store::{
    LedgerTotals, ProtocolUsage, RequestPath, RoutineStatus, Store, StoreError, StoreOptions,
};

use super::{
    conversation, failing_conversation_trigger, hash, llm_call, new_routine, recent, record,
    refusing_conversation_trigger, request,
};
use crate::Fixture;

pub async fn record_request_bumps_usage_per_path(fixture: Fixture) {
    let store = fixture.open().await;
    let (a, b) = (hash(0xaa), hash(0x0b));
    let paths = [
        RequestPath::Llm,
        RequestPath::Llm,
        RequestPath::Routine,
        RequestPath::Routine,
        RequestPath::Routine,
        RequestPath::Fallback,
        RequestPath::Rejected,
        RequestPath::Failed,
    ];
    // Timestamps out of order: last_used is the latest, not the last recorded.
    for (n, path) in paths.iter().enumerate() {
        let n = n as i64 + 1;
        let created_at_ms = if n == 3 { 9_000 } else { 1_000 + n };
        record(&store, &request(n, Some(a), *path, created_at_ms)).await;
    }
    record(&store, &request(10, Some(b), RequestPath::Routine, 500)).await;
    record(&store, &request(11, None, RequestPath::Llm, 600)).await;

    // n = 1..=8: prompt 100·n, completion 10·n, cost 0.25·n; the sum of 1..=8 is 36.
    let expected_a = ProtocolUsage {
        requests: 8,
        llm: 2,
        routine: 3,
        fallback: 1,
        rejected: 1,
        failed: 1,
        llm_prompt_tokens: 3_600,
        llm_completion_tokens: 360,
        llm_cost_usd: 9.0,
        last_used_ms: 9_000,
    };
    let expected_b = ProtocolUsage {
        requests: 1,
        routine: 1,
        llm_prompt_tokens: 1_000,
        llm_completion_tokens: 100,
        llm_cost_usd: 2.5,
        last_used_ms: 500,
        ..ProtocolUsage::default()
    };
    assert_eq!(store.requests().usage(&a).await.expect("usage"), expected_a);
    assert_eq!(store.requests().usage(&b).await.expect("usage"), expected_b);
    assert_eq!(
        store.requests().usage(&hash(0x33)).await.expect("usage"),
        ProtocolUsage::default()
    );
    // Sorted by hash: 0b.. before aa..; the request without a protocol counts nowhere.
    assert_eq!(
        store.requests().usage_all().await.expect("usage_all"),
        vec![(b, expected_b), (a, expected_a)]
    );
    assert_eq!(recent(&store, 100).await.len(), 10);
    store.close().await;
}

pub async fn recent_requests_are_newest_first(fixture: Fixture) {
    let store = fixture.open().await;
    let first = request(1, None, RequestPath::Llm, 100);
    let second = request(2, Some(hash(1)), RequestPath::Routine, 300);
    let third = request(3, None, RequestPath::Failed, 200);
    // Same timestamp as `second`, recorded later: newer.
    let fourth = request(4, Some(hash(2)), RequestPath::Rejected, 300);
    for each in [&first, &second, &third, &fourth] {
        record(&store, each).await;
    }
    assert_eq!(
        recent(&store, 10).await,
        vec![fourth.clone(), second.clone(), third, first]
    );
    assert_eq!(recent(&store, 2).await, vec![fourth, second]);
    assert!(recent(&store, 0).await.is_empty());
    assert!(recent(&store, -1).await.is_empty());
    store.close().await;
}

pub async fn record_request_is_one_transaction(fixture: Fixture) {
    let store = fixture.open().await;
    let h = hash(3);
    record(&store, &request(1, Some(h), RequestPath::Llm, 10)).await;
    let before = store.requests().usage(&h).await.expect("usage");

    // The conversation write, the last in the transaction, fails: nothing of it may remain.
    store
        .execute_raw_for_tests(failing_conversation_trigger(&fixture))
        .await
        .expect("install trigger");
    let conv = conversation("doomed", Some(h), 20);
    let result = store
        .requests()
        .record_request(&request(2, Some(h), RequestPath::Routine, 20), Some(&conv))
        .await;
    assert!(
        matches!(&result, Err(StoreError::Database(message)) if message.contains("refused by test trigger")),
        "{result:?}"
    );
    assert_eq!(store.requests().usage(&h).await.expect("usage"), before);
    assert_eq!(recent(&store, 10).await.len(), 1);
    assert_eq!(store.conversation("doomed").await.expect("get"), None);

    // Without a conversation the same request goes through.
    record(&store, &request(2, Some(h), RequestPath::Routine, 20)).await;
    assert_eq!(store.requests().usage(&h).await.expect("usage").requests, 2);
    store.close().await;
}

pub async fn concurrent_requests_lose_no_updates(fixture: Fixture) {
    let store = fixture.open().await;
    // Three protocols served by routines, one without, and requests without a protocol.
    let protocols = [
        Some(hash(20)),
        Some(hash(21)),
        Some(hash(22)),
        Some(hash(23)),
        None,
    ];
    let mut routine_ids = Vec::new();
    for (n, protocol_hash) in protocols.iter().take(3).enumerate() {
        let routine = new_routine(
            &format!("r{n}"),
            protocol_hash.expect("a protocol"),
            RoutineStatus::Active,
        );
        routine_ids.push(store.add_routine(&routine, 1).await.expect("add").id);
    }

    // 500 requests at once, recorded while others are being written, so they share
    // transactions: some run a routine (every seventh fails), some carry a conversation.
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..500_i64 {
        let store = store.clone();
        let protocol_hash = protocols[n as usize % protocols.len()];
        let routine_id = routine_ids.get(n as usize % protocols.len()).copied();
        tasks.spawn(async move {
            let path = match (routine_id, n % 7) {
                (Some(_), 0) => RequestPath::Fallback,
                (Some(_), _) => RequestPath::Routine,
                (None, 1) => RequestPath::Rejected,
                (None, _) => RequestPath::Llm,
            };
            let mut record = request(n, protocol_hash, path, 1_000 + (n * 37) % 500);
            record.routine_id = routine_id;
            if path == RequestPath::Fallback {
                record.routine_error = Some(format!("failure {n}"));
            }
            let conv = (n % 3 == 0).then(|| {
                let mut conv = conversation(&format!("c{}", n % 10), protocol_hash, n);
                conv.messages = serde_json::json!({ "n": n });
                conv
            });
            store
                .requests()
                .record_request(&record, conv.as_ref())
                .await
                .expect("concurrent record");
            if n % 5 == 0 {
                store
                    .ledger()
                    .record_llm_call(&llm_call("alice", "querying", "m", None, n))
                    .await
                    .expect("call");
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("task finishes");
    }
    let (batches, _) = store.requests().request_batches_for_tests();
    assert!(batches > 0, "no transaction recorded more than one request");

    // The counters equal what the log says.
    let log = recent(&store, i64::MAX).await;
    assert_eq!(log.len(), 500);
    for protocol_hash in protocols.iter().flatten() {
        let mut expected = ProtocolUsage::default();
        for record in log
            .iter()
            .filter(|r| r.protocol_hash == Some(*protocol_hash))
        {
            expected.requests += 1;
            match record.path {
                RequestPath::Llm => expected.llm += 1,
                RequestPath::Routine => expected.routine += 1,
                RequestPath::Fallback => expected.fallback += 1,
                RequestPath::Rejected => expected.rejected += 1,
                RequestPath::Failed => expected.failed += 1,
            }
            expected.llm_prompt_tokens += record.prompt_tokens;
            expected.llm_completion_tokens += record.completion_tokens;
            expected.llm_cost_usd += record.cost_usd;
            expected.last_used_ms = expected.last_used_ms.max(record.created_at_ms);
        }
        assert_eq!(expected.requests, 100);
        assert_eq!(
            store.requests().usage(protocol_hash).await.expect("usage"),
            expected
        );
    }
    for routine_id in &routine_ids {
        let runs: Vec<_> = log
            .iter()
            .filter(|r| r.routine_id == Some(*routine_id))
            .collect();
        let failures: Vec<_> = runs.iter().filter(|r| r.routine_error.is_some()).collect();
        let routine = store
            .routine(*routine_id)
            .await
            .expect("get")
            .expect("exists");
        assert_eq!(
            (routine.runs, routine.failures),
            (100, failures.len() as i64)
        );
        assert!(!failures.is_empty());
        // The last error and its time come from one and the same failure.
        assert!(
            failures
                .iter()
                .any(|r| r.routine_error == routine.last_error
                    && Some(r.created_at_ms) == routine.last_failure_at_ms),
            "{:?} at {:?}",
            routine.last_error,
            routine.last_failure_at_ms
        );
    }
    // Each conversation holds the history and time of one of its requests.
    for id in 0..10 {
        let stored = store
            .conversation(&format!("c{id}"))
            .await
            .expect("get")
            .expect("exists");
        let n = stored.messages["n"].as_i64().expect("a number");
        assert_eq!((n % 10, n % 3), (id, 0));
        assert_eq!(stored.last_active_ms, n);
    }
    assert_eq!(
        store.ledger().ledger_totals().await.expect("totals")[0].calls,
        100
    );
    store.close().await;
}

pub async fn a_bad_request_in_a_batch_fails_alone(fixture: Fixture) {
    let store = fixture.open().await;
    let h = hash(30);
    store
        .execute_raw_for_tests(&refusing_conversation_trigger(&fixture, "doomed"))
        .await
        .expect("install trigger");
    // A batch forms only while the writer is busy, so a round may not put the bad request in
    // one; rounds repeat until one did (the first almost always does).
    let mut recorded = 0;
    for round in 0..10_i64 {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..100_i64 {
            let store = store.clone();
            let n = round * 100 + i;
            tasks.spawn(async move {
                let id = if i == 50 {
                    "doomed".to_string()
                } else {
                    format!("c{n}")
                };
                let conv = conversation(&id, Some(h), n);
                let result = store
                    .requests()
                    .record_request(&request(n, Some(h), RequestPath::Llm, n), Some(&conv))
                    .await;
                (i, result)
            });
        }
        while let Some(joined) = tasks.join_next().await {
            match joined.expect("task finishes") {
                (50, result) => assert!(
                    matches!(&result, Err(StoreError::Database(message)) if message.contains("refused by test trigger")),
                    "{result:?}"
                ),
                (_, result) => result.expect("a good request is recorded"),
            }
        }
        recorded += 99;
        if store.requests().request_batches_for_tests().1 > 0 {
            break;
        }
    }
    let (_, retried) = store.requests().request_batches_for_tests();
    assert!(retried > 0, "the bad request never shared a transaction");

    let log = recent(&store, i64::MAX).await;
    assert_eq!(log.len(), recorded);
    assert!(log.iter().all(|r| r.query_id != "q50"));
    let usage = store.requests().usage(&h).await.expect("usage");
    assert_eq!(usage.requests, recorded as i64);
    assert_eq!(store.conversation("doomed").await.expect("get"), None);
    assert!(store.conversation("c49").await.expect("get").is_some());
    store.close().await;
}

pub async fn closing_the_store_writes_queued_requests(fixture: Fixture) {
    let store = fixture.open().await;
    let h = hash(31);
    let started = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..300_i64 {
        let store = store.clone();
        let started = started.clone();
        tasks.spawn(async move {
            started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // Queued in the same poll: nothing awaits before the request is on the queue.
            store
                .requests()
                .record_request(&request(n, Some(h), RequestPath::Routine, n), None)
                .await
        });
    }
    // Close while requests are queued, and maybe while others are still coming.
    while started.load(std::sync::atomic::Ordering::SeqCst) < 150 {
        tokio::task::yield_now().await;
    }
    store.close().await;
    let mut acknowledged = 0;
    while let Some(joined) = tasks.join_next().await {
        match joined.expect("task finishes") {
            Ok(()) => acknowledged += 1,
            Err(StoreError::Database(_)) => {}
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }

    assert!(
        acknowledged >= 149,
        "only {acknowledged} of those queued were written"
    );
    let late = store
        .requests()
        .record_request(&request(300, Some(h), RequestPath::Routine, 300), None)
        .await;
    assert!(matches!(late, Err(StoreError::Database(_))), "{late:?}");
    // Every acknowledged request is there, and nothing else.
    let store = fixture.open().await;
    let log = recent(&store, i64::MAX).await;
    assert_eq!(log.len(), acknowledged);
    assert_eq!(
        store.requests().usage(&h).await.expect("usage").requests,
        acknowledged as i64
    );
    store.close().await;
}

pub async fn buffered_requests_are_read_back_and_survive_a_close(fixture: Fixture) {
    // A linger far beyond the test: only a read's flush, a waiting record or the close can get
    // the buffered records written, and a read that did not flush would hang (and time out).
    let options = StoreOptions {
        request_linger: Some(Duration::from_secs(600)),
        ..StoreOptions::default()
    };
    let store = fixture.open_with(options).await;
    let h = hash(32);
    let routine = store
        .add_routine(&new_routine("buffered", h, RoutineStatus::Active), 1)
        .await
        .expect("add");
    let answered = |n: i64| {
        let mut record = request(n, Some(h), RequestPath::Routine, n);
        record.routine_id = Some(routine.id);
        record
    };
    // Reads see what was recorded before them.
    for n in 1..=3 {
        store
            .requests()
            .record_request_buffered(answered(n))
            .await
            .expect("queued");
    }
    let usage = soon("usage", store.requests().usage(&h))
        .await
        .expect("usage");
    assert_eq!(usage.requests, 3);
    let counted = soon("routine", store.routine(routine.id)).await;
    assert_eq!(counted.expect("get").expect("exists").runs, 3);

    // A record someone waits for is written at once, with the buffered one before it.
    let batches = store.requests().request_batches_for_tests().0;
    store
        .requests()
        .record_request_buffered(answered(4))
        .await
        .expect("queued");
    let llm_answered = request(5, Some(h), RequestPath::Llm, 5);
    let waiting = store.requests().record_request(&llm_answered, None);
    soon("a waiting record", waiting).await.expect("recorded");
    assert_eq!(store.requests().request_batches_for_tests().0, batches + 1);

    // Closing writes what is still buffered.
    for n in 6..=7 {
        store
            .requests()
            .record_request_buffered(answered(n))
            .await
            .expect("queued");
    }
    soon("close", store.close()).await;
    let store = fixture.open().await;
    let log = recent(&store, i64::MAX).await;
    assert_eq!(log.len(), 7);
    assert_eq!(log[0].query_id, "q7");
    assert_eq!(store.requests().usage(&h).await.expect("usage").routine, 6);
    let counted = store
        .routine(routine.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(counted.runs, 6);
    store.close().await;
}

/// `future`'s output, or a panic naming `what` if it took 30 s (it waited for a linger).
async fn soon<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), future)
        .await
        .unwrap_or_else(|_| panic!("{what} waited for the linger"))
}

pub async fn ledger_totals_are_grouped_and_sorted(fixture: Fixture) {
    let store = fixture.open().await;
    let calls = [
        llm_call("bob", "checking", "small", Some("q2"), 50),
        llm_call("alice", "querying", "big", Some("q1"), 10),
        llm_call("alice", "conversation", "small", Some("q1"), 20),
        llm_call("alice", "querying", "big", Some("q1"), 30),
        llm_call("alice", "Querying", "big", None, 40),
        llm_call("alice", "querying", "Big", None, 5),
    ];
    for call in &calls {
        store
            .ledger()
            .record_llm_call(call)
            .await
            .expect("record call");
    }

    let totals = |node: &str, category: &str, model: &str, n: i64| LedgerTotals {
        node: node.to_string(),
        category: category.to_string(),
        model: model.to_string(),
        calls: n,
        prompt_tokens: 1000 * n,
        cached_prompt_tokens: 600 * n,
        completion_tokens: 50 * n,
        cost_usd: 0.125 * n as f64,
    };
    // Byte order: uppercase before lowercase, whatever the database's collation.
    assert_eq!(
        store.ledger().ledger_totals().await.expect("totals"),
        vec![
            totals("alice", "Querying", "big", 1),
            totals("alice", "conversation", "small", 1),
            totals("alice", "querying", "Big", 1),
            totals("alice", "querying", "big", 2),
            totals("bob", "checking", "small", 1),
        ]
    );

    let all = store.ledger().llm_calls(None).await.expect("all calls");
    let times: Vec<i64> = all.iter().map(|call| call.created_at_ms).collect();
    assert_eq!(times, vec![5, 10, 20, 30, 40, 50]);
    assert_eq!(
        store
            .ledger()
            .llm_calls(Some("q1"))
            .await
            .expect("q1 calls"),
        vec![calls[1].clone(), calls[2].clone(), calls[3].clone()]
    );
    assert!(
        store
            .ledger()
            .llm_calls(Some("q404"))
            .await
            .expect("none")
            .is_empty()
    );
    let mut without_hash = llm_call("carol", "implementing", "m", None, 60);
    without_hash.protocol_hash = None;
    store
        .ledger()
        .record_llm_call(&without_hash)
        .await
        .expect("record call");
    assert_eq!(
        store.ledger().llm_calls(None).await.expect("all").last(),
        Some(&without_hash)
    );
    store.close().await;
}

/// The dashboard's reads: requests bucketed by time and path, the newest LLM calls filtered by
/// category and protocol, the most recently active conversations, and every sender memory.
pub async fn dashboard_reads_bucket_filter_and_order(fixture: Fixture) {
    let store = fixture.open().await;
    let rows = [
        (1, RequestPath::Llm, 1_000),
        (2, RequestPath::Llm, 1_999),
        (3, RequestPath::Routine, 1_500),
        (4, RequestPath::Routine, 2_000),
        (5, RequestPath::Failed, 2_500),
        (6, RequestPath::Routine, 500),
    ];
    for (n, path, at) in rows {
        store
            .requests()
            .record_request(&request(n, Some(hash(1)), path, at), None)
            .await
            .expect("record request");
    }
    let series = store
        .requests()
        .request_series(1_000, 1_000)
        .await
        .expect("series");
    let shown: Vec<(i64, &str, i64, f64)> = series
        .iter()
        .map(|b| (b.start_ms, b.path.as_str(), b.requests, b.cost_usd))
        .collect();
    assert_eq!(
        shown,
        vec![
            (1_000, "llm", 2, 0.75),
            (1_000, "routine", 1, 0.75),
            (2_000, "failed", 1, 1.25),
            (2_000, "routine", 1, 1.0),
        ]
    );
    assert_eq!(series[0].llm_calls, 1 + 2);

    let mut calls = vec![
        llm_call("bob", "checking", "m", Some("q1"), 10),
        llm_call("bob", "conversation", "m", Some("q2"), 20),
        llm_call("bob", "conversation", "m", Some("q3"), 30),
    ];
    calls[2].protocol_hash = Some(hash(2));
    for call in &calls {
        store
            .ledger()
            .record_llm_call(call)
            .await
            .expect("record call");
    }
    let queries = |found: Vec<(i64, agora_store::LlmCallRecord)>| -> Vec<String> {
        found
            .into_iter()
            .map(|(_, c)| c.query_id.unwrap_or_default())
            .collect()
    };
    let all = store
        .ledger()
        .recent_llm_calls(None, None, 10)
        .await
        .expect("all");
    assert_eq!(queries(all), ["q3", "q2", "q1"]);
    let by_category = store
        .ledger()
        .recent_llm_calls(Some("conversation"), None, 10)
        .await
        .expect("by category");
    assert_eq!(queries(by_category), ["q3", "q2"]);
    let by_both = store
        .ledger()
        .recent_llm_calls(Some("conversation"), Some(&hash(9)), 10)
        .await
        .expect("by both");
    assert_eq!(queries(by_both), ["q2"]);
    assert_eq!(
        queries(
            store
                .ledger()
                .recent_llm_calls(None, None, 1)
                .await
                .expect("one")
        ),
        ["q3"]
    );

    for (id, at) in [("old", 100), ("new", 300), ("middle", 200)] {
        store
            .create_conversation(&conversation(id, None, at))
            .await
            .expect("create conversation");
    }
    let recent: Vec<String> = store
        .recent_conversations(2)
        .await
        .expect("recent")
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(recent, ["new", "middle"]);

    for (target, task) in [("http://b", "t"), ("http://a", "z"), ("http://a", "b")] {
        let memory = agora_store::SenderMemory {
            target: target.into(),
            task: task.into(),
            ..Default::default()
        };
        store
            .sender()
            .put_sender_memory(&memory)
            .await
            .expect("put memory");
    }
    let keys: Vec<(String, String)> = store
        .sender()
        .sender_memories()
        .await
        .expect("memories")
        .into_iter()
        .map(|m| (m.target, m.task))
        .collect();
    assert_eq!(
        keys,
        [("http://a", "b"), ("http://a", "z"), ("http://b", "t")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
    );
}

/// Idempotency keys: one claim wins, the reply is replayed, other content is refused, a stale
/// claim is taken over, a released one is claimed afresh, and old keys are purged.
pub async fn idempotency_keys_claim_replay_refuse_and_purge(fixture: Fixture) {
    use agora_store::IdempotencyClaim::{Claimed, InProgress, Mismatch, Replay};
    let store = fixture.open().await;
    let claim = |key: &'static str, fingerprint: &'static str, now: i64| {
        let store = store.clone();
        async move {
            store
                .idempotency()
                .claim_idempotency_key("ip:10.0.0.1", key, fingerprint, now, now - 1_000)
                .await
                .expect("claim")
        }
    };
    assert_eq!(claim("k1", "f1", 10_000).await, Claimed);
    assert_eq!(claim("k1", "f1", 10_100).await, InProgress);
    assert_eq!(claim("k1", "f2", 10_100).await, Mismatch);
    // Another client's scope is another key.
    assert_eq!(
        store
            .idempotency()
            .claim_idempotency_key("ip:10.0.0.2", "k1", "f9", 10_100, 9_100)
            .await
            .expect("claim"),
        Claimed
    );
    store
        .idempotency()
        .finish_idempotency_key("ip:10.0.0.1", "k1", 200, "{\"status\":\"success\"}")
        .await
        .expect("finish");
    assert_eq!(
        claim("k1", "f1", 10_200).await,
        Replay {
            status: 200,
            reply: "{\"status\":\"success\"}".into()
        }
    );
    // A finished key is replayed even once it is old; only an unfinished one goes stale.
    assert_eq!(
        claim("k1", "f1", 50_000).await,
        Replay {
            status: 200,
            reply: "{\"status\":\"success\"}".into()
        }
    );
    assert_eq!(claim("k2", "f1", 10_000).await, Claimed);
    assert_eq!(
        claim("k2", "f1", 11_500).await,
        Claimed,
        "stale claim taken over"
    );
    assert_eq!(claim("k2", "f1", 11_600).await, InProgress);
    store
        .idempotency()
        .release_idempotency_key("ip:10.0.0.1", "k2")
        .await
        .expect("release");
    assert_eq!(claim("k2", "f1", 11_700).await, Claimed);
    // k1 (10_000) and the other scope's k1 (10_100) are older than 11_000; k2 (11_700) is not.
    assert_eq!(
        store
            .idempotency()
            .purge_idempotency_keys(11_000)
            .await
            .expect("purge"),
        2
    );
    assert_eq!(claim("k1", "f2", 12_000).await, Claimed);
}

/// A request's client and error detail are kept and read back.
pub async fn request_client_and_error_detail_round_trip(fixture: Fixture) {
    let store = fixture.open().await;
    let mut failed = request(1, None, RequestPath::Failed, 1_000);
    failed.client = Some("token:partner".into());
    failed.error_detail = Some("llm unavailable: tcp connect error (os error 111)".into());
    record(&store, &failed).await;
    let mut buffered = request(2, None, RequestPath::Routine, 2_000);
    buffered.client = Some("ip:192.0.2.7".into());
    store
        .requests()
        .record_request_buffered(buffered.clone())
        .await
        .expect("record");
    assert_eq!(recent(&store, 10).await, vec![buffered, failed]);
}

/// Job leases: one holder at a time, renewed by its holder only, taken over once expired, and
/// free again once released.
pub async fn job_leases_have_one_holder_until_they_expire(fixture: Fixture) {
    let store = fixture.open().await;
    let job = "programmer:routine:abc";
    let take = |job: &'static str, holder: &'static str, now: i64| {
        let store = store.clone();
        async move { store.take_lease(job, holder, now, 60_000).await.unwrap() }
    };
    let renew = |holder: &'static str, now: i64| {
        let store = store.clone();
        async move { store.renew_lease(job, holder, now, 60_000).await.unwrap() }
    };
    assert!(take(job, "replica-a", 1_000).await);
    assert!(!take(job, "replica-b", 2_000).await);
    assert!(take(job, "replica-a", 2_000).await, "its own");
    assert!(renew("replica-a", 30_000).await);
    assert!(!renew("replica-b", 30_000).await);
    // replica-a dies: its lease runs out at 90_000.
    assert!(!take(job, "replica-b", 89_999).await);
    assert!(take(job, "replica-b", 90_001).await);
    assert!(!renew("replica-a", 90_002).await, "lost");
    store.release_lease(job, "replica-a").await.unwrap();
    assert!(!take(job, "replica-c", 90_003).await, "still b's");
    store.release_lease(job, "replica-b").await.unwrap();
    assert!(take(job, "replica-c", 90_004).await);
    assert!(take("another job", "replica-a", 90_005).await);
}

/// Shared counters: two handles on one database (two replicas) bumping at once lose no bump and
/// never see the same value twice; a reset starts again from zero.
pub async fn counters_are_shared_and_exact_across_handles(fixture: Fixture) {
    let a = fixture.open().await;
    let b = fixture.open().await;
    assert_eq!(a.counter("natural").await.unwrap(), 0);
    let bumps = |store: Store| async move {
        let mut seen = Vec::new();
        for _ in 0..25 {
            seen.push(store.bump_counter("natural").await.unwrap());
        }
        seen
    };
    let (mut seen, other) = tokio::join!(bumps(a.clone()), bumps(b.clone()));
    seen.extend(other);
    seen.sort_unstable();
    assert_eq!(seen, (1..=50).collect::<Vec<i64>>());
    assert_eq!(b.counter("natural").await.unwrap(), 50);
    assert_eq!(a.counter("another").await.unwrap(), 0);
    a.reset_counter("natural").await.unwrap();
    assert_eq!(b.bump_counter("natural").await.unwrap(), 1);
}
