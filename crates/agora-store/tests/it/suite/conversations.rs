//! Cases for conversations and for data surviving a restart.

use agora_store::{
    Conversation, ConversationKind, Decision, DecisionOrigin, LedgerTotals, RequestPath, StoreError,
};

use super::{conversation, document, hash, llm_call, recent, request, stored_document};
use crate::Fixture;

pub async fn conversation_lifecycle(fixture: Fixture) {
    let store = fixture.open().await;
    let first = conversation("conv-1", Some(hash(1)), 1_000);
    store.create_conversation(&first).await.expect("create");
    assert_eq!(
        store.conversation("conv-1").await.expect("get"),
        Some(first.clone())
    );
    assert_eq!(store.conversation("conv-404").await.expect("get"), None);
    assert!(matches!(
        store.create_conversation(&first).await,
        Err(StoreError::Database(_))
    ));

    // A follow-up replaces the history and the times; id, kind, protocol and start stay.
    let mut continued = first.clone();
    continued.kind = ConversationKind::Negotiation;
    continued.messages = serde_json::json!([{"role": "user", "content": "and then?"}]);
    continued.created_at_ms = 9_999;
    continued.last_active_ms = 2_000;
    continued.expires_at_ms = 62_000;
    store
        .requests()
        .record_request(
            &request(1, Some(hash(1)), RequestPath::Llm, 2_000),
            Some(&continued),
        )
        .await
        .expect("record with conversation");
    let stored = store
        .conversation("conv-1")
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(stored.messages, continued.messages);
    assert_eq!(stored.last_active_ms, 2_000);
    assert_eq!(stored.expires_at_ms, 62_000);
    assert_eq!(stored.kind, ConversationKind::Protocol);
    assert_eq!(stored.protocol_hash, Some(hash(1)));
    assert_eq!(stored.created_at_ms, 1_000);

    // record_request creates a conversation it does not know.
    let natural = conversation("conv-2", None, 3_000);
    store
        .requests()
        .record_request(&request(2, None, RequestPath::Llm, 3_000), Some(&natural))
        .await
        .expect("record creating a conversation");
    assert_eq!(
        store.conversation("conv-2").await.expect("get"),
        Some(natural)
    );

    // Expired conversations are still returned; purging removes those expired at or before now.
    let short = Conversation {
        expires_at_ms: 5_000,
        ..conversation("conv-3", None, 4_000)
    };
    store.create_conversation(&short).await.expect("create");
    assert!(store.conversation("conv-3").await.expect("get").is_some());
    assert_eq!(
        store
            .purge_expired_conversations(4_999)
            .await
            .expect("purge"),
        0
    );
    assert_eq!(
        store
            .purge_expired_conversations(5_000)
            .await
            .expect("purge"),
        1
    );
    assert_eq!(store.conversation("conv-3").await.expect("get"), None);
    assert_eq!(
        store
            .purge_expired_conversations(62_000)
            .await
            .expect("purge"),
        1
    ); // conv-1
    assert!(store.conversation("conv-2").await.expect("get").is_some()); // expires at 63_000

    assert!(store.delete_conversation("conv-2").await.expect("delete"));
    assert!(
        !store
            .delete_conversation("conv-2")
            .await
            .expect("delete again")
    );
    assert_eq!(store.conversation("conv-2").await.expect("get"), None);
    store.close().await;
}

pub async fn data_survives_a_restart(fixture: Fixture) {
    let doc = document(20);
    let decision = Decision {
        allowed: true,
        origin: DecisionOrigin::Operator,
        reason: "ok".to_string(),
        decided_at_ms: 3,
    };
    let conv = conversation("conv-r", Some(doc.hash()), 4);
    let req = request(5, Some(doc.hash()), RequestPath::Routine, 5);
    let call = llm_call("alice", "conversation", "qwen", Some("q5"), 6);

    let store = fixture.open().await;
    store
        .put_document(&doc, &["https://peer/pd".to_string()], 2)
        .await
        .expect("put");
    store
        .set_suitability(&doc.hash(), &decision)
        .await
        .expect("decide");
    store
        .requests()
        .record_request(&req, Some(&conv))
        .await
        .expect("record");
    store.ledger().record_llm_call(&call).await.expect("ledger");
    let usage = store.requests().usage(&doc.hash()).await.expect("usage");
    store.close().await;

    let store = fixture.open().await;
    let stored = stored_document(&store, &doc).await;
    assert_eq!(stored.document, doc);
    assert_eq!(stored.sources, vec!["https://peer/pd".to_string()]);
    assert_eq!(
        store.suitability(&doc.hash()).await.expect("get"),
        Some(decision)
    );
    assert_eq!(store.conversation("conv-r").await.expect("get"), Some(conv));
    assert_eq!(recent(&store, 10).await, vec![req]);
    assert_eq!(
        store.requests().usage(&doc.hash()).await.expect("usage"),
        usage
    );
    assert_eq!(usage.routine, 1);
    assert_eq!(
        store.ledger().llm_calls(None).await.expect("calls"),
        vec![call]
    );
    assert_eq!(
        store.ledger().ledger_totals().await.expect("totals"),
        vec![LedgerTotals {
            node: "alice".to_string(),
            category: "conversation".to_string(),
            model: "qwen".to_string(),
            calls: 1,
            prompt_tokens: 1000,
            cached_prompt_tokens: 600,
            completion_tokens: 50,
            cost_usd: 0.125,
        }]
    );
    store.close().await;
}
