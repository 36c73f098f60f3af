//! The sender over real HTTP between two nodes on 127.0.0.1, with scripted LLMs: Alice runs a
//! weather task against Bob in natural language and under the weather protocol; bad input data,
//! a reply that cannot be read into the output schema, and a rejection are clear errors.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;

use crate::fixtures::{forecast_output, weather_task};
use crate::support::Spawn;
use agora_node::tools::WeatherForecastTool;
use agora_node::{Node, SendError, SendOutcome, Task};
use agora_protocol::{VerifiedDocument, data_uri};
use agora_testkit::{
    NodeBuilder, ScriptedLlm, TestServer, last_user_message, schema_name, system_prompt, temp_dir,
    weather_tool,
};
use serde_json::{Value, json};

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");

fn task() -> Task {
    weather_task(forecast_output())
}

/// Bob: a weather agent that answers in words (natural language) or in the protocol's JSON.
async fn bob(allow: bool) -> (TestServer, tempfile::TempDir) {
    let dir = temp_dir();
    let llm = ScriptedLlm::new(move |request| match schema_name(request) {
        Some("suitability") if allow => Ok(r#"{"suitable": "yes", "reason": "weather"}"#.into()),
        Some("suitability") => Ok(r#"{"suitable": "no", "reason": "not today"}"#.into()),
        Some("step") => {
            let last = last_user_message(request);
            let protocol = system_prompt(request).contains("protocol document");
            if let Some(result) = last.strip_prefix("Result of weather_forecast: ") {
                let f: Value = serde_json::from_str(result).unwrap();
                let answer = if protocol {
                    json!({"temperature": f["temperature_c"], "precipitation": f["precipitation_mm"], "weatherCondition": f["condition"]})
                } else {
                    json!(format!(
                        "Expect {} °C, {} mm of rain, {}.",
                        f["temperature_c"], f["precipitation_mm"], f["condition"]
                    ))
                };
                return Ok(json!({"tool": "final_answer", "answer": answer}).to_string());
            }
            // Bob's request parser: Alice's scripted messages always carry this JSON.
            let start = last.find('{').unwrap();
            let end = last.rfind('}').unwrap();
            let body: Value = serde_json::from_str(&last[start..=end]).unwrap();
            Ok(json!({"tool": "weather_forecast", "arguments": {"location": body["location"], "date": body["date"]}}).to_string())
        }
        other => panic!("Bob got an unexpected request {other:?}"),
    });
    let server = NodeBuilder::new(llm, dir.path())
        .config(|c| c.tools = vec![weather_tool()])
        .spawn()
        .await;
    (server, dir)
}

/// Alice's querier: writes the data into the body, reads numbers back from Bob's reply.
fn alice_llm(read: impl Fn(&str) -> String + Send + Sync + 'static) -> Arc<ScriptedLlm> {
    ScriptedLlm::new(move |request| {
        let last = last_user_message(request);
        match schema_name(request) {
            Some("task_output") => {
                let reply = last.split("Reply: ").nth(1).unwrap();
                Ok(read(reply))
            }
            None => {
                let data = last.split("Data: ").nth(1).unwrap().lines().next().unwrap();
                if system_prompt(request).contains("request bodies for a protocol") {
                    Ok(format!("```json\n{data}\n```"))
                } else {
                    Ok(format!("Please send the forecast for {data}."))
                }
            }
            other => panic!("Alice got an unexpected request {other:?}"),
        }
    })
}

/// Reads Bob's words or JSON back into the output schema, as a good model would.
fn faithful_reader(reply: &str) -> String {
    if let Ok(value) = serde_json::from_str::<Value>(reply) {
        return value.to_string();
    }
    let numbers: Vec<f64> = reply
        .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .filter_map(|t| t.trim_end_matches('.').parse().ok())
        .collect();
    let condition = ["sunny", "cloudy", "rainy", "snowy"]
        .into_iter()
        .find(|c| reply.contains(c))
        .unwrap();
    json!({"temperature": numbers[0], "precipitation": numbers[1], "weatherCondition": condition})
        .to_string()
}

fn expected() -> Value {
    let f = WeatherForecastTool::new(7).forecast("Oslo, Norway", "2025-02-03");
    json!({"temperature": f["temperature_c"], "precipitation": f["precipitation_mm"], "weatherCondition": f["condition"]})
}

fn data() -> Value {
    json!({"location": "Oslo, Norway", "date": "2025-02-03"})
}

#[tokio::test]
async fn a_task_runs_in_natural_language_and_its_output_is_validated() {
    let (bob, _bob_dir) = bob(true).await;
    let dir = temp_dir();
    let alice = NodeBuilder::new(alice_llm(faithful_reader), dir.path())
        .config(|c| c.tasks = vec![task()])
        .build()
        .await;
    let task = alice.task("weather").unwrap().clone();
    let outcome = alice.send(&bob.url, &task, &data(), None).await.unwrap();
    assert_eq!(outcome.output, expected());
    assert!(
        outcome.reply_body.starts_with("Expect "),
        "{}",
        outcome.reply_body
    );
    assert_eq!(outcome.llm_calls, 2, "write the message, read the reply");
    let calls = agora_testkit::llm_calls(&alice).await;
    assert!(calls.iter().all(|c| c.category == "conversation"));
    assert!(matches!(alice.task("nope"), Err(SendError::UnknownTask(_))));
}

/// Sends the task to Bob under the weather protocol, with its `data:` URI as the source.
async fn send_under_the_protocol(alice: &Node, bob: &TestServer) -> Result<SendOutcome, SendError> {
    let document = VerifiedDocument::from_text(WEATHER_PD);
    let sources = vec![data_uri::encode(WEATHER_PD)];
    let protocol = Some((&document, sources.as_slice()));
    alice.send(&bob.url, &task(), &data(), protocol).await
}

#[tokio::test]
async fn a_task_runs_under_a_protocol_the_receiver_fetches_from_its_source() {
    let (bob, _bob_dir) = bob(true).await;
    let dir = temp_dir();
    let alice = NodeBuilder::new(alice_llm(faithful_reader), dir.path())
        .build()
        .await;
    let outcome = send_under_the_protocol(&alice, &bob).await.unwrap();
    assert_eq!(outcome.output, expected());
    let hash = VerifiedDocument::from_text(WEATHER_PD).hash();
    let stored = bob.node.store().document(&hash).await.unwrap();
    assert!(
        stored.is_some(),
        "Bob resolved the PD from the data: source"
    );
}

#[tokio::test]
async fn bad_data_an_unreadable_reply_and_a_rejection_are_clear_errors() {
    let (bob, _bob_dir) = bob(false).await;
    let dir = temp_dir();
    // A reader that loses the precipitation: the output does not match the schema.
    let alice = NodeBuilder::new(
        alice_llm(|_| json!({"temperature": 1.0, "weatherCondition": "sunny"}).to_string()),
        dir.path(),
    )
    .build()
    .await;
    let error = alice
        .send(&bob.url, &task(), &json!({"location": "Oslo"}), None)
        .await
        .unwrap_err();
    assert!(matches!(error, SendError::InvalidInput(_)), "{error}");
    assert!(error.to_string().contains("date"), "{error}");

    let error = alice
        .send(&bob.url, &task(), &data(), None)
        .await
        .unwrap_err();
    assert!(matches!(error, SendError::InvalidOutput(_)), "{error}");
    assert!(error.to_string().contains("precipitation"), "{error}");

    let error = send_under_the_protocol(&alice, &bob).await.unwrap_err();
    assert!(matches!(error, SendError::Rejected(_)), "{error}");
    assert!(error.to_string().contains("not today"), "{error}");

    let error = alice
        .send("http://127.0.0.1:9/", &task(), &data(), None)
        .await
        .unwrap_err();
    assert!(matches!(error, SendError::Unreachable { .. }), "{error}");
}
