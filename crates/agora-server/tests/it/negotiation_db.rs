//! The sender's ladder with a protocol database, over real HTTP on 127.0.0.1 with scripted
//! LLMs: a negotiation ends in a protocol stored by both agents and published to the database,
//! whose URL is the source from then on; a second sender finds it by searching the database.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use crate::support::Spawn;
use agora_llm::ChatRequest;
use agora_node::Task;
use agora_server::protocol_db::{ProtocolDbServerConfig, build_protocol_db, serve_protocol_db};
use agora_testkit::{NodeBuilder, ScriptedLlm, last_user_message, schema_name, temp_dir};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const NEGOTIATED: &str = "Request: a JSON object {\"location\": string, \"date\": \"YYYY-MM-DD\"}.\n\
    Reply: a JSON object {\"temperature\": number}.";

fn task() -> Task {
    serde_json::from_value(json!({
        "name": "weather",
        "description": "Get the weather forecast for a location on a date.",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object", "required": ["temperature"],
            "properties": {"temperature": {"type": "number"}}}
    }))
    .unwrap()
}

fn sender_llm() -> std::sync::Arc<ScriptedLlm> {
    ScriptedLlm::new(|request: &ChatRequest| {
        match schema_name(request) {
        None => Ok(json!({"location": "Oslo", "date": "2025-02-03"}).to_string()),
        Some("task_output") => Ok(json!({"temperature": 3.5}).to_string()),
        Some("task_fit") => Ok(json!({"suitable": "yes", "reason": "fits"}).to_string()),
        Some("negotiation_turn") if last_user_message(request).contains("The receiver answered") => {
            Ok(json!({"message": "Final.", "final_protocol": {"name": "WeatherByPlace", "description": "Weather forecast for a location on a date.", "document": NEGOTIATED}}).to_string())
        }
        Some("negotiation_turn") => {
            Ok(json!({"message": format!("I propose: {NEGOTIATED}"), "final_protocol": null}).to_string())
        }
        other => panic!("unexpected sender LLM request {other:?}"),
    }
    })
}

#[tokio::test]
async fn a_negotiated_protocol_is_stored_on_both_sides_and_in_the_database() {
    // The protocol database.
    let db_dir = temp_dir();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut config = ProtocolDbServerConfig {
        write_token: Some("t0ken".into()),
        sync_interval_secs: 0,
        sync_every_additions: 0,
        ..ProtocolDbServerConfig::default()
    };
    config.listen = listener.local_addr().unwrap();
    config.store = format!("sqlite://{}", db_dir.path().join("pdb.db").display());
    let running = build_protocol_db(config).await.unwrap();
    let db_url = running.config.public_url();
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move { serve_protocol_db(listener, &running, token).await });
    let _stop = shutdown.drop_guard();

    // Bob agrees to anything and answers in JSON.
    let bob_dir = temp_dir();
    let bob = NodeBuilder::new(
        ScriptedLlm::new(|request: &ChatRequest| match schema_name(request) {
            Some("negotiation_reply") => {
                Ok(json!({"verdict": "agree", "message": "Agreed."}).to_string())
            }
            Some("step") => {
                Ok(json!({"tool": "final_answer", "answer": {"temperature": 3.5}}).to_string())
            }
            Some("suitability") => Ok(json!({"suitable": "yes", "reason": "ok"}).to_string()),
            other => panic!("unexpected receiver LLM request {other:?}"),
        }),
        bob_dir.path(),
    )
    .spawn()
    .await;

    let sender = |dir: &std::path::Path, explore: i64, negotiate: i64| {
        let db_url = db_url.clone();
        NodeBuilder::new(sender_llm(), dir).config(move |c| {
            c.sender.explore_threshold = explore;
            c.sender.negotiate_threshold = negotiate;
            c.sender.protocol_db = Some(db_url);
            c.sender.protocol_db_token = Some("t0ken".into());
            c.sender.sender_routine_threshold = 0;
        })
    };
    let alice_dir = temp_dir();
    let alice = sender(alice_dir.path(), 100, 1).build().await;
    let run = alice.run_task(&bob.url, &task(), &json!({})).await.unwrap();
    assert!(
        run.steps.iter().any(|s| s == "published"),
        "{:?}",
        run.steps
    );
    let hash = run.protocol.unwrap();

    // Both agents hold the same verified text; the database serves it at the source Alice uses.
    let ours = alice.store().document(&hash).await.unwrap().unwrap();
    let bobs = bob.node.store().document(&hash).await.unwrap().unwrap();
    assert_eq!(ours.document.text(), bobs.document.text());
    let memory = alice
        .store()
        .sender_memory(&bob.url, "weather")
        .await
        .unwrap()
        .unwrap();
    let source = &memory.protocol_sources[0];
    assert_eq!(source, &format!("{db_url}/protocols/{}", hash.to_hex()));
    let served = reqwest::get(source).await.unwrap().text().await.unwrap();
    assert_eq!(served, ours.document.text());

    // Carol, another sender, finds it by searching the database when she explores.
    let carol_dir = temp_dir();
    let carol = sender(carol_dir.path(), 1, 100).build().await;
    let found = carol.run_task(&bob.url, &task(), &json!({})).await.unwrap();
    assert_eq!(found.protocol, Some(hash), "{:?}", found.steps);
    let hits: Value = reqwest::get(format!("{db_url}/protocols?q=weather"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(hits[0]["hash"], hash.to_hex());
}
