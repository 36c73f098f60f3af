//! Cases for the request log, usage counters and the LLM ledger.

use agora_store::{LedgerTotals, ProtocolUsage, RequestPath, StoreError};

use super::{conversation, failing_conversation_trigger, hash, llm_call, request};
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
        store
            .record_request(&request(n, Some(a), *path, created_at_ms), None)
            .await
            .expect("record");
    }
    store
        .record_request(&request(10, Some(b), RequestPath::Routine, 500), None)
        .await
        .expect("record");
    store
        .record_request(&request(11, None, RequestPath::Llm, 600), None)
        .await
        .expect("record");

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
    assert_eq!(store.usage(&a).await.expect("usage"), expected_a);
    assert_eq!(store.usage(&b).await.expect("usage"), expected_b);
    assert_eq!(
        store.usage(&hash(0x33)).await.expect("usage"),
        ProtocolUsage::default()
    );
    // Sorted by hash: 0b.. before aa..; the request without a protocol counts nowhere.
    assert_eq!(
        store.usage_all().await.expect("usage_all"),
        vec![(b, expected_b), (a, expected_a)]
    );
    assert_eq!(
        store.recent_requests(100).await.expect("requests").len(),
        10
    );
    store.close().await;
}

pub async fn recent_requests_are_newest_first(fixture: Fixture) {
    let store = fixture.open().await;
    let first = request(1, None, RequestPath::Llm, 100);
    let second = request(2, Some(hash(1)), RequestPath::Routine, 300);
    let third = request(3, None, RequestPath::Failed, 200);
    // Same timestamp as `second`, recorded later: newer.
    let fourth = request(4, Some(hash(2)), RequestPath::Rejected, 300);
    for record in [&first, &second, &third, &fourth] {
        store.record_request(record, None).await.expect("record");
    }
    assert_eq!(
        store.recent_requests(10).await.expect("requests"),
        vec![fourth.clone(), second.clone(), third, first]
    );
    assert_eq!(
        store.recent_requests(2).await.expect("requests"),
        vec![fourth, second]
    );
    assert!(store.recent_requests(0).await.expect("requests").is_empty());
    assert!(
        store
            .recent_requests(-1)
            .await
            .expect("requests")
            .is_empty()
    );
    store.close().await;
}

pub async fn record_request_is_one_transaction(fixture: Fixture) {
    let store = fixture.open().await;
    let h = hash(3);
    store
        .record_request(&request(1, Some(h), RequestPath::Llm, 10), None)
        .await
        .expect("record");
    let before = store.usage(&h).await.expect("usage");

    // The conversation write, the last in the transaction, fails: nothing of it may remain.
    store
        .execute_raw_for_tests(failing_conversation_trigger(&fixture))
        .await
        .expect("install trigger");
    let conv = conversation("doomed", Some(h), 20);
    let result = store
        .record_request(&request(2, Some(h), RequestPath::Routine, 20), Some(&conv))
        .await;
    assert!(
        matches!(&result, Err(StoreError::Database(message)) if message.contains("refused by test trigger")),
        "{result:?}"
    );
    assert_eq!(store.usage(&h).await.expect("usage"), before);
    assert_eq!(store.recent_requests(10).await.expect("requests").len(), 1);
    assert_eq!(store.conversation("doomed").await.expect("get"), None);

    // Without a conversation the same request goes through.
    store
        .record_request(&request(2, Some(h), RequestPath::Routine, 20), None)
        .await
        .expect("record");
    assert_eq!(store.usage(&h).await.expect("usage").requests, 2);
    store.close().await;
}

pub async fn concurrent_requests_lose_no_updates(fixture: Fixture) {
    let store = fixture.open().await;
    let h = hash(8);
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..8_i64 {
        let store = store.clone();
        tasks.spawn(async move {
            for i in 0..20_i64 {
                let n = task * 100 + i;
                let conv = conversation(&format!("c{task}"), Some(h), n);
                store
                    .record_request(&request(n, Some(h), RequestPath::Routine, n), Some(&conv))
                    .await
                    .expect("concurrent record");
                store
                    .record_llm_call(&llm_call("alice", "querying", "m", None, n))
                    .await
                    .expect("call");
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("task finishes");
    }
    let usage = store.usage(&h).await.expect("usage");
    assert_eq!(usage.requests, 160);
    assert_eq!(usage.routine, 160);
    assert_eq!(
        store.recent_requests(1_000).await.expect("requests").len(),
        160
    );
    assert_eq!(store.ledger_totals().await.expect("totals")[0].calls, 160);
    store.close().await;
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
        store.record_llm_call(call).await.expect("record call");
    }

    let totals = |node: &str, category: &str, model: &str, n: i64| LedgerTotals {
        node: node.to_string(),
        category: category.to_string(),
        model: model.to_string(),
        calls: n,
        prompt_tokens: 1000 * n,
        completion_tokens: 50 * n,
        cost_usd: 0.125 * n as f64,
    };
    // Byte order: uppercase before lowercase, whatever the database's collation.
    assert_eq!(
        store.ledger_totals().await.expect("totals"),
        vec![
            totals("alice", "Querying", "big", 1),
            totals("alice", "conversation", "small", 1),
            totals("alice", "querying", "Big", 1),
            totals("alice", "querying", "big", 2),
            totals("bob", "checking", "small", 1),
        ]
    );

    let all = store.llm_calls(None).await.expect("all calls");
    let times: Vec<i64> = all.iter().map(|call| call.created_at_ms).collect();
    assert_eq!(times, vec![5, 10, 20, 30, 40, 50]);
    assert_eq!(
        store.llm_calls(Some("q1")).await.expect("q1 calls"),
        vec![calls[1].clone(), calls[2].clone(), calls[3].clone()]
    );
    assert!(
        store
            .llm_calls(Some("q404"))
            .await
            .expect("none")
            .is_empty()
    );
    let mut without_hash = llm_call("carol", "implementing", "m", None, 60);
    without_hash.protocol_hash = None;
    store
        .record_llm_call(&without_hash)
        .await
        .expect("record call");
    assert_eq!(
        store.llm_calls(None).await.expect("all").last(),
        Some(&without_hash)
    );
    store.close().await;
}
