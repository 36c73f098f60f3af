//! A measurement, not a test: the seed message protocols answered by an LLM alone, with no
//! routine. Bob has only the PDs (fetched from `data:` sources; the operator allowed them, so the
//! measurement is about the answer, not the suitability check), the weather tool and
//! `node_info`. It sends one message per protocol, and one under `osnap-weather-task.md` (which
//! builds on the weather protocol by reference; Bob has that document, so its LLM is shown it),
//! and judges each reply: the protocol's answer type, and the weather tool's temperature.
//!
//! ```sh
//! source ~/.cache/agora/env.sh   # then start llama-server as scripts/test.sh does
//! AGORA_TEST_LLM_URL=http://127.0.0.1:PORT/v1 \
//!     cargo run -p agora-server --example seed_protocols_on_the_local_model [-- --code-as-action]
//! ```
//!
//! It exits 1 when any answer is wrong. Measured on Qwen2.5-Coder-1.5B-Instruct Q4_K_M
//! (temperature 0, seed fixed, one slot), 2026-11-25: **0 of 4 correct**, with the tool loop and
//! with code as action alike.
//! - Tool loop: each reply is a bare forecast object whose figures are not the tool's (15.0 °C
//!   where the tool says 4.0), in none of the protocols' envelopes.
//! - Code as action (`--code-as-action`, which needs `AGORA_JS_ENGINE`): the DSL and envelope
//!   programs fail and the tool loop answers as above; the OSNAP programs read the task data from
//!   the wrong field and answer error 1004.
//!
//! With their human-written routines the same messages are answered correctly with no LLM call
//! (`tests/it/seed_protocols.rs`). The PDs are 3–7 KB each: more than this model follows.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a tool that fails loudly

use std::path::PathBuf;
use std::sync::Arc;

use agora_node::ToolConfig;
use agora_node::tools::WeatherForecastTool;
use agora_protocol::{Request, Status, VerifiedDocument, data_uri};
use agora_routines::{RuntimeConfig, WasmRuntime};
use agora_testkit::{NodeBuilder, local_llm, temp_dir, weather_tool};
use serde_json::{Value, json};

/// Every number in `text`.
fn numbers(text: &str) -> Vec<f64> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .filter_map(|t| t.trim_end_matches('.').parse().ok())
        .collect()
}

/// A protocol document of the repository.
fn document(name: &str) -> VerifiedDocument {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../protocols/{name}.md"));
    VerifiedDocument::from_text(&std::fs::read_to_string(path).unwrap())
}

#[tokio::main]
async fn main() {
    let code_as_action = std::env::args().any(|a| a == "--code-as-action");
    let dir = temp_dir();
    let mut builder = NodeBuilder::new(local_llm(), dir.path()).config(|c| {
        c.name = "bob".into();
        c.description = "Bob is a weather service. It gives weather forecasts (temperature, \
                         precipitation, sky condition) for a location and a date."
            .into();
        c.tools = vec![
            weather_tool(),
            ToolConfig::builtin("node_info", "node_info", 0),
        ];
        c.responder.code_as_action = code_as_action;
    });
    if code_as_action {
        let engine = std::env::var_os("AGORA_JS_ENGINE").expect("AGORA_JS_ENGINE is not set");
        let runtime = WasmRuntime::new(RuntimeConfig {
            js_engine: Some(PathBuf::from(engine)),
            ..RuntimeConfig::default()
        })
        .expect("the routine runtime starts");
        builder = builder.routine_engine(Arc::new(runtime));
    }
    let bob = builder.build().await;
    let (location, date) = ("Lisbon, Portugal", "2025-03-14");
    let temperature = WeatherForecastTool::new(7).forecast(location, date)["temperature_c"]
        .as_f64()
        .unwrap();
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
    let weather = document("weather-forecast");
    bob.add_document(weather.text(), &[]).await.unwrap();
    let mut correct = 0;
    for (name, message, answer_type) in &messages {
        let document = document(name);
        bob.set_operator_decision(&document.hash(), true, "a weather protocol")
            .await
            .unwrap();
        let request = Request::from_json(&json!({"protocolHash": document.hash().to_base64(),
            "protocolSources": [data_uri::encode(document.text())],
            "body": message.to_string()}))
        .unwrap();
        let reply = bob.handle(request).await;
        let body = reply.body.as_ref().map(|b| b.to_text()).unwrap_or_default();
        let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let verdict = if reply.status != Status::Success || !parsed.is_object() {
            "wrong: not a JSON reply"
        } else if !body.contains(answer_type) {
            "wrong: not the protocol's answer type"
        } else if !numbers(&body)
            .iter()
            .any(|n| (n - temperature).abs() < 0.051)
        {
            "wrong: not the tool's temperature"
        } else {
            correct += 1;
            "correct"
        };
        println!("{name}: {verdict} (expected a {answer_type} with {temperature} °C): {body}");
    }
    println!("{correct} of {} correct", messages.len());
    std::process::exit(if correct == messages.len() { 0 } else { 1 });
}
