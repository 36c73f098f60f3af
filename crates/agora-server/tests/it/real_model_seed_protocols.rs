//! The seed message protocols answered by the real local model: Bob has no routine for them, only
//! the PDs (fetched from `data:` sources, allowed by the operator so that the test is about the
//! answer, not the suitability check), the weather tool and `node_info`. One message per protocol,
//! and one under `osnap-weather-task.md`, which builds on the weather protocol by reference (Bob
//! has that document, so its LLM is shown it); each reply must be the protocol's answer type and
//! carry the weather tool's temperature.
//!
//! Ignored by plain `cargo test`: `scripts/test.sh` starts llama-server (temperature 0, fixed
//! seed, one slot) and runs it with `AGORA_TEST_LLM_URL` set.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use agora_node::tools::WeatherForecastTool;
use agora_protocol::data_uri;
use agora_testkit::temp_dir;
use serde_json::{Value, json};

use crate::fixtures::real_model_bob;
use crate::seed_protocols::{document, node_info_tool};
use crate::support::Spawn;

/// Every number in `text`.
fn numbers(text: &str) -> Vec<f64> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .filter_map(|t| t.trim_end_matches('.').parse().ok())
        .collect()
}

#[tokio::test]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_answers_the_seed_protocols_without_their_routines() {
    let dir = temp_dir();
    let bob = real_model_bob(dir.path())
        .config(|c| {
            c.name = "bob".into();
            c.tools.push(node_info_tool());
        })
        .spawn()
        .await;
    let (location, date) = ("Lisbon, Portugal", "2025-03-14");
    let forecast = WeatherForecastTool::new(7).forecast(location, date);
    let temperature = forecast["temperature_c"].as_f64().unwrap();
    let data = json!({"location": location, "date": date});
    let messages = [
        (
            "agent-dsl-weather",
            json!({"header": {"version": "1.0", "sender": "alice", "receiver": "bob",
                "type": "QUERY", "id": "msg-1", "timestamp": "2025-03-13T09:00:00Z",
                "content_type": "application/json", "conversation_id": "conv-1"},
                "body": data.to_string()}),
            "RESPONSE",
        ),
        (
            "agent-envelope-weather",
            json!({"message_id": "7e1a6b3e-3a74-4c7a-8c6f-2e21b8f59f44",
                "conversation_id": "conv-2", "sender": "alice", "receiver": "bob",
                "timestamp": "2025-03-13T09:00:00Z", "performative": "query",
                "schema_version": "1.0.0",
                "content": {"task": "weather_forecast", "location": location, "date": date}}),
            "inform",
        ),
        (
            "osnap-weather",
            json!({"sender_agent_id": "alice", "receiver_agent_id": "bob",
                "message_type": "task_request",
                "payload": {"task_id": "task-1", "task_name": "weather_forecast",
                    "task_data": data}}),
            "status_update",
        ),
        (
            "osnap-weather-task",
            json!({"sender_agent_id": "alice", "receiver_agent_id": "bob",
                "message_type": "task_request",
                "payload": {"task_id": "task-2", "task_name": "weather_forecast",
                    "task_data": data}}),
            "status_update",
        ),
    ];
    let weather = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../protocols/weather-forecast.md"
    ))
    .unwrap();
    bob.node.add_document(&weather, &[]).await.unwrap();
    let mut failures = Vec::new();
    for (seed, message, answer_type) in messages {
        let document = document(seed);
        bob.node
            .set_operator_decision(&document.hash(), true, "a weather protocol")
            .await
            .unwrap();
        let request = json!({"protocolHash": document.hash().to_base64(),
            "protocolSources": [data_uri::encode(document.text())],
            "body": message.to_string()});
        let (status, reply) = bob.post("/", &request).await;
        eprintln!("{seed}: {status} {reply}");
        let body = reply["body"].as_str().unwrap_or_default();
        let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        if reply["status"] != "success" || !parsed.is_object() {
            failures.push(format!("{seed}: not a JSON reply: {reply}"));
            continue;
        }
        if !body.contains(answer_type) {
            failures.push(format!("{seed}: expected a {answer_type}: {body}"));
        }
        if !numbers(body)
            .iter()
            .any(|n| (n - temperature).abs() < 0.051)
        {
            failures.push(format!("{seed}: no temperature {temperature}: {body}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let calls = bob.node.store().llm_calls(None).await.unwrap();
    assert!(
        calls.len() >= 6,
        "a tool step and an answer step per protocol"
    );
}
