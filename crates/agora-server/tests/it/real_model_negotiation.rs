//! Two nodes negotiate a protocol over loopback HTTP with the real local model on both sides.
//!
//! Ignored by plain `cargo test`; `scripts/test.sh` runs it with `AGORA_TEST_LLM_URL` pointing
//! at llama-server with the installed model (Qwen2.5-Coder-1.5B).

#![allow(clippy::unwrap_used)]

use crate::support::Spawn;
use agora_node::{Category, Task};
use agora_protocol::ProtocolDocument;
use agora_testkit::{NodeBuilder, suitability, temp_dir, weather_tool};
use serde_json::json;

#[tokio::test]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_two_nodes_negotiate_a_weather_forecast_protocol() {
    let (a, b) = (temp_dir(), temp_dir());
    let llm = agora_testkit::local_llm();
    let alice = NodeBuilder::new(llm.clone(), a.path())
        .config(|c| {
            c.name = "alice".into();
            c.negotiation.max_rounds = 4;
        })
        .spawn()
        .await;
    let bob = NodeBuilder::new(llm, b.path())
        .config(|c| {
            c.name = "bob".into();
            c.description = "Bob is a weather service. It gives weather forecasts (temperature, \
                precipitation, sky condition) for a location and a date."
                .into();
            c.tools = vec![weather_tool()];
        })
        .spawn()
        .await;
    let task = Task {
        name: "weather_forecast".into(),
        description: "Get the weather forecast for a location on a date.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City and country, e.g. London, UK"},
                "date": {"type": "string", "description": "The day, YYYY-MM-DD"}
            },
            "required": ["location", "date"]
        }),
        output_schema: json!({
            "type": "object",
            "properties": {
                "temperature": {"type": "number", "description": "degrees Celsius"},
                "precipitation": {"type": "number", "description": "millimetres"},
                "weatherCondition": {"type": "string", "enum": ["sunny", "cloudy", "rainy", "snowy"]}
            },
            "required": ["temperature", "precipitation", "weatherCondition"]
        }),
    };

    let negotiated = match alice.node.negotiate(&bob.url, &task).await {
        Ok(negotiated) => negotiated,
        Err(error) => panic!("the negotiation failed: {error}"),
    };
    let hash = negotiated.document.hash();
    eprintln!(
        "negotiated in {} rounds, registered by the receiver: {}\nhash {hash}\n{}",
        negotiated.rounds,
        negotiated.registered_by_receiver,
        negotiated.document.text()
    );
    let parsed = ProtocolDocument::parse(negotiated.document.text());
    assert!(parsed.metadata.name.is_some());
    assert!(negotiated.registered_by_receiver);
    let theirs = bob.node.store().document(&hash).await.unwrap().unwrap();
    assert_eq!(theirs.document.text(), negotiated.document.text());
    assert!(suitability(&bob.node, &hash).await.allowed);
    let bob_calls = agora_testkit::llm_calls(&bob.node).await;
    assert!(!bob_calls.is_empty());
    let alice_calls = agora_testkit::llm_calls(&alice.node).await;
    assert!(
        bob_calls
            .iter()
            .chain(&alice_calls)
            .all(|c| c.category == Category::Negotiation.as_str())
    );
    assert!(!alice_calls.is_empty());
}
