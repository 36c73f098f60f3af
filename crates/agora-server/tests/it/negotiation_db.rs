//! The sender's ladder with a protocol database, over real HTTP on 127.0.0.1 with scripted
//! LLMs: a negotiation ends in a protocol stored by both agents and published to the database,
//! whose URL is the source from then on; a second sender finds it by searching the database.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use crate::fixtures::{ProtocolDb, negotiating_sender, temperature_output, weather_task};
use crate::support::Spawn;
use agora_llm::ChatRequest;
use agora_node::Task;
use agora_server::protocol_db::ProtocolDbServerConfig;
use agora_testkit::{NodeBuilder, ScriptedLlm, schema_name, sender_memory, temp_dir};
use serde_json::{Value, json};

const NEGOTIATED: &str = "Request: a JSON object {\"location\": string, \"date\": \"YYYY-MM-DD\"}.\n\
    Reply: a JSON object {\"temperature\": number}.";

fn task() -> Task {
    Task {
        input_schema: json!({"type": "object"}),
        ..weather_task(temperature_output())
    }
}

fn sender_llm() -> std::sync::Arc<ScriptedLlm> {
    let body = json!({"location": "Oslo", "date": "2025-02-03"});
    let protocol = json!({"name": "WeatherByPlace",
        "description": "Weather forecast for a location on a date.", "document": NEGOTIATED});
    negotiating_sender(body, protocol)
}

#[tokio::test]
async fn a_negotiated_protocol_is_stored_on_both_sides_and_in_the_database() {
    // The protocol database.
    let db = ProtocolDb::start(ProtocolDbServerConfig {
        write_token: Some("t0ken".into()),
        sync_interval_secs: 0,
        sync_every_additions: 0,
        ..ProtocolDbServerConfig::default()
    })
    .await;
    let db_url = db.url.clone();

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
    let memory = sender_memory(&alice, &bob.url, "weather").await;
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
