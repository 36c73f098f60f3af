//! A measurement, not a test: the seed message protocols answered by an LLM alone, with no
//! routine. Bob has only the PDs (fetched from `data:` sources; the operator allowed them, so the
//! measurement is about the answer, not the suitability check), the weather tool and
//! `node_info`. It sends one message per protocol, and one under `osnap-weather-task.md` (which
//! builds on the weather protocol by reference; Bob has that document, so its LLM is shown it).
//!
//! ```sh
//! source ~/.cache/agora/env.sh   # then start llama-server as scripts/test.sh does
//! AGORA_TEST_LLM_URL=http://127.0.0.1:PORT/v1 \
//!     cargo run -p agora-server --example seed_protocols_on_the_local_model \
//!     [-- --code-as-action] [--verbose]
//! ```
//!
//! Each reply is judged as its document says a reply is: the answer type, addressed back to Alice
//! (`receiver`), answering her message (`reply_to`, `in_reply_to`, `task_id`), and the weather
//! tool's forecast under the document's member names. It exits 1 when any answer is wrong.
//!
//! Measured on Qwen2.5-Coder-1.5B-Instruct Q4_K_M (temperature 0, seed fixed, one slot),
//! 2026-11-26:
//! - Without the responder's answer checks (`responder.check_answers = false`; the tool loop as
//!   before): **0 of 4**. Each reply was the forecast alone, with figures no tool gave (15.0 °C
//!   where the tool says 4.0), in none of the protocols' envelopes. With code as action
//!   (`--code-as-action`, needs `AGORA_JS_ENGINE`) also 0 of 4: the DSL and envelope programs
//!   read the location from the wrong place and the tool loop answered as above; the OSNAP
//!   programs answered error 1004.
//! - With the checks (the default): **1 of 4**, and every reply in its envelope with the tool's
//!   figures. The model looked the forecast up once told its numbers came from nowhere, and
//!   wrapped the payload once told the message's members.
//!   - `osnap-weather-task`: correct in all five runs of the check's versions.
//!   - `agent-dsl-weather`: a `RESPONSE` to Alice with `reply_to`, but the body's JSON text keeps
//!     the tool's names (`temperature_c`): the model renames members in an object when told,
//!     not inside a JSON string.
//!   - `agent-envelope-weather`: an `inform`, but from `alice` to `bob`, without `in_reply_to`,
//!     and with the tool's member names in `content`.
//!   - `osnap-weather`: a `response` (the document's answer to a `request`) instead of the
//!     `status_update` a `task_request` gets.
//!
//! - With the checks and code as action (`--code-as-action`; the program's reply gets the same
//!   checks): also **1 of 4**. The DSL program reads `request.body.location` from the body's
//!   JSON text (a string), calls the tool with no arguments, and repeats itself when told; the
//!   tool loop then answers as above. The OSNAP program answers error 1004.
//!
//! With their human-written routines the same messages are answered correctly with no LLM call
//! (`tests/it/seed_protocols.rs`). The PDs are 3–7 KB each, with several message types and error
//! tables: more than this model follows in every detail.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a tool that fails loudly

use std::path::PathBuf;
use std::sync::Arc;

use agora_node::ToolConfig;
use agora_node::tools::WeatherForecastTool;
use agora_protocol::{Request, Status, VerifiedDocument, data_uri};
use agora_routines::{RuntimeConfig, WasmRuntime};
use agora_testkit::{NodeBuilder, local_llm, temp_dir, weather_tool};
use serde_json::{Value, json};

/// Prints each step of a request (`--verbose`).
struct Printer;

impl agora_node::Observer for Printer {
    fn observe(&self, step: agora_node::Step) {
        match step {
            agora_node::Step::LlmResult {
                category, content, ..
            } => {
                eprintln!("  llm ({}): {content}", category.as_str())
            }
            agora_node::Step::ToolCall {
                tool, arguments, ..
            } => {
                eprintln!("  tool call {tool}: {arguments}")
            }
            agora_node::Step::ToolResult { tool, result, .. } => {
                eprintln!("  tool result {tool}: {result:?}")
            }
            _ => {}
        }
    }
}

/// A protocol document of the repository.
fn document(name: &str) -> VerifiedDocument {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../protocols/{name}.md"));
    VerifiedDocument::from_text(&std::fs::read_to_string(path).unwrap())
}

#[tokio::main]
async fn main() {
    let code_as_action = std::env::args().any(|a| a == "--code-as-action");
    let verbose = std::env::args().any(|a| a == "--verbose");
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
    let forecast = WeatherForecastTool::new(7).forecast(location, date);
    let expected = json!({"temperature": forecast["temperature_c"],
        "precipitation": forecast["precipitation_mm"], "weatherCondition": forecast["condition"]});
    let data = json!({"location": location, "date": date});
    // Each protocol's reply, judged as its document says a reply is: the answer type, addressed
    // back to Alice, answering her message, and the tool's forecast under the document's names.
    type Reading = fn(&Value) -> Option<Value>;
    let messages: [(&str, Value, &str, Reading); 4] = [
        (
            "agent-dsl-weather",
            json!({"header": {"version": "1.0", "sender": "alice", "receiver": "bob",
                "type": "QUERY", "id": "msg-1", "timestamp": "2025-03-13T09:00:00Z",
                "content_type": "application/json", "conversation_id": "conv-1"},
                "body": data.to_string()}),
            "RESPONSE",
            |reply| {
                let header = &reply["header"];
                (header["type"] == "RESPONSE"
                    && header["receiver"] == "alice"
                    && header["reply_to"] == "msg-1")
                    .then(|| serde_json::from_str(reply["body"].as_str()?).ok())
                    .flatten()
            },
        ),
        (
            "agent-envelope-weather",
            json!({"message_id": "7e1a6b3e-3a74-4c7a-8c6f-2e21b8f59f44",
                "conversation_id": "conv-2", "sender": "alice", "receiver": "bob",
                "timestamp": "2025-03-13T09:00:00Z", "performative": "query",
                "schema_version": "1.0.0",
                "content": {"task": "weather_forecast", "location": location, "date": date}}),
            "inform",
            |reply| {
                (reply["performative"] == "inform"
                    && reply["receiver"] == "alice"
                    && reply["in_reply_to"] == "7e1a6b3e-3a74-4c7a-8c6f-2e21b8f59f44"
                    && reply["content"]["status"] == "ok")
                    .then(|| reply["content"].clone())
            },
        ),
        (
            "osnap-weather",
            json!({"sender_agent_id": "alice", "receiver_agent_id": "bob",
                "message_type": "task_request",
                "payload": {"task_id": "task-1", "task_name": "weather_forecast",
                    "task_data": data}}),
            "status_update",
            |reply| {
                (reply["message_type"] == "status_update"
                    && reply["receiver_agent_id"] == "alice"
                    && reply["payload"]["task_id"] == "task-1"
                    && reply["payload"]["task_status"] == "completed")
                    .then(|| reply["payload"]["task_result"].clone())
            },
        ),
        (
            "osnap-weather-task",
            json!({"sender_agent_id": "alice", "receiver_agent_id": "bob",
                "message_type": "task_request",
                "payload": {"task_id": "task-2", "task_name": "weather_forecast",
                    "task_data": data}}),
            "status_update",
            |reply| {
                (reply["message_type"] == "status_update"
                    && reply["receiver_agent_id"] == "alice"
                    && reply["payload"]["task_id"] == "task-2"
                    && reply["payload"]["task_status"] == "completed")
                    .then(|| reply["payload"]["task_result"].clone())
            },
        ),
    ];
    let weather = document("weather-forecast");
    bob.add_document(weather.text(), &[]).await.unwrap();
    let mut correct = 0;
    for (name, message, answer_type, reading) in &messages {
        let document = document(name);
        bob.set_operator_decision(&document.hash(), true, "a weather protocol")
            .await
            .unwrap();
        let request = Request::from_json(&json!({"protocolHash": document.hash().to_base64(),
            "protocolSources": [data_uri::encode(document.text())],
            "body": message.to_string()}))
        .unwrap();
        let hooks = agora_node::RequestHooks {
            observer: verbose.then(|| Arc::new(Printer) as Arc<dyn agora_node::Observer>),
            ..agora_node::RequestHooks::default()
        };
        eprintln!("{name}:");
        let reply = bob.handle_hooked(request, None, hooks).await;
        let body = reply.body.as_ref().map(|b| b.to_text()).unwrap_or_default();
        let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let same = |a: &Value, b: &Value| match (a.as_f64(), b.as_f64()) {
            (Some(a), Some(b)) => (a - b).abs() < 0.051,
            _ => a == b,
        };
        let verdict = if reply.status != Status::Success || !parsed.is_object() {
            "wrong: not a JSON reply"
        } else {
            match reading(&parsed) {
                None => "wrong: not the protocol's answer to Alice's message",
                Some(forecast)
                    if ["temperature", "precipitation", "weatherCondition"]
                        .iter()
                        .all(|key| same(&forecast[key], &expected[key])) =>
                {
                    correct += 1;
                    "correct"
                }
                Some(_) => "wrong: not the tool's forecast under the protocol's names",
            }
        };
        println!("{name}: {verdict} (expected a {answer_type} with {expected}): {body}");
    }
    println!("{correct} of {} correct", messages.len());
    std::process::exit(if correct == messages.len() { 0 } else { 1 });
}
