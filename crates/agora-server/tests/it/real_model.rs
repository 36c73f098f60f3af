//! End-to-end tests over loopback HTTP with the real local model.
//!
//! Ignored by plain `cargo test`; `scripts/test.sh` starts llama-server
//! with the installed model and runs them one at a time with
//! `AGORA_TEST_LLM_URL` set. They are kept to a few LLM calls.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use crate::fixtures::{forecast_output, real_model_bob, weather_task};
use crate::support::Spawn;
use agora_node::tools::WeatherForecastTool;
use agora_protocol::{ProtocolHash, data_uri};
use agora_testkit::{NodeBuilder, suitability, temp_dir};
use serde_json::{Value, json};

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");

#[tokio::test]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_answers_a_weather_question_with_tool_data() {
    let dir = temp_dir();
    let server = real_model_bob(dir.path()).spawn().await;
    let (status, reply) = server
        .post("/", &json!({"protocolHash": null, "protocolSources": [], "body": "What is the weather forecast for London, UK on 2024-09-27?"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(reply["status"], "success", "{reply}");
    let answer = reply["body"].as_str().unwrap();
    let forecast = WeatherForecastTool::new(7).forecast("London, UK", "2024-09-27");
    let temperature = forecast["temperature_c"].as_f64().unwrap();
    eprintln!("answer: {answer}\nforecast: {forecast}");
    let numbers: Vec<f64> = answer
        .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .filter_map(|t| t.trim_end_matches('.').parse().ok())
        .collect();
    assert!(
        numbers.iter().any(|n| (n - temperature).abs() < 0.051),
        "the answer should carry the tool's temperature {temperature}: {answer}"
    );
    let calls = agora_testkit::llm_calls(&server.node).await;
    assert!(calls.len() >= 2, "a tool step and an answer step");
}

#[tokio::test]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_checks_suitability_of_a_fitting_and_an_unfitting_protocol() {
    let dir = temp_dir();
    let server = real_model_bob(dir.path()).spawn().await;
    let stocks = "---\nname: StockQuote\ndescription: Get the latest price of a stock.\nmultiround: false\n---\n\n\
        Request: {\"ticker\": string}. Reply: {\"price\": number, \"currency\": string}.\n";
    let air = "---\nname: AirQuality\ndescription: Air quality index for a city on a date.\nmultiround: false\n---\n\n\
        Request: {\"city\": string, \"date\": \"YYYY-MM-DD\"}. Reply: {\"aqi\": integer, \"pm25\": number}.\n";
    for (text, expected) in [(WEATHER_PD, true), (stocks, false), (air, false)] {
        let hash = ProtocolHash::of(text.as_bytes());
        let body = r#"{"location": "Rome, Italy", "date": "2025-06-01"}"#;
        let (_, reply) = server
            .post("/", &json!({"protocolHash": hash.to_base64(), "protocolSources": [data_uri::encode(text)], "body": body}))
            .await;
        let decision = suitability(&server.node, &hash).await;
        eprintln!("{}: {:?} / reply {}", hash, decision, reply);
        assert_eq!(decision.allowed, expected, "{}", decision.reason);
        let status = reply["status"].as_str().unwrap();
        assert_eq!(status == "rejected", !expected, "{reply}");
        if expected {
            let body: Value = serde_json::from_str(reply["body"].as_str().unwrap_or("null"))
                .unwrap_or(Value::Null);
            eprintln!("protocol reply body: {body}");
        }
    }
}

#[tokio::test]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_sender_runs_a_task_in_natural_language_and_under_the_protocol() {
    let bob_dir = temp_dir();
    let bob = real_model_bob(bob_dir.path()).spawn().await;
    let alice_dir = temp_dir();
    let alice = NodeBuilder::new(agora_testkit::local_llm(), alice_dir.path())
        .build()
        .await;
    let task = weather_task(forecast_output());
    let data = json!({"location": "Oslo, Norway", "date": "2025-02-03"});

    // Natural language: the output is schema-valid (the receiver may word the place its own way).
    let outcome = alice.send(&bob.url, &task, &data, None).await.unwrap();
    eprintln!(
        "natural language: {} from {:?}",
        outcome.output, outcome.reply_body
    );
    assert!(outcome.output["temperature"].is_number());

    // Under the protocol the body carries the place verbatim, so the output is the tool's data.
    let document = agora_protocol::VerifiedDocument::from_text(WEATHER_PD);
    let sources = vec![data_uri::encode(WEATHER_PD)];
    let outcome = alice
        .send(&bob.url, &task, &data, Some((&document, &sources)))
        .await
        .unwrap();
    eprintln!("protocol: {} from {:?}", outcome.output, outcome.reply_body);
    let forecast = WeatherForecastTool::new(7).forecast("Oslo, Norway", "2025-02-03");
    assert_eq!(
        outcome.output["temperature"].as_f64(),
        forecast["temperature_c"].as_f64()
    );
    assert_eq!(outcome.output["weatherCondition"], forecast["condition"]);
    let calls = agora_testkit::llm_calls(&alice).await;
    assert_eq!(calls.len(), 4, "two querier calls per task run");
}

/// The seed protocols answered by the LLM alone (no routine): an OSNAP `task_request` under
/// `osnap-weather-task.md` (which takes the weather protocol's forecast by reference) gets the
/// `status_update` the document prescribes, addressed back, with the weather tool's forecast under
/// the document's names. The responder's answer checks get it there (see
/// `agora_node::responder`); the other seed messages are measured, not tested, by the example
/// `seed_protocols_on_the_local_model`, because this model still gets their details wrong.
#[tokio::test]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_answers_an_osnap_task_request_with_no_routine() {
    let dir = temp_dir();
    let server = real_model_bob(dir.path()).spawn().await;
    let weather = server.node.add_document(WEATHER_PD, &[]).await.unwrap();
    assert_eq!(weather.hash(), ProtocolHash::of(WEATHER_PD.as_bytes()));
    let text = include_str!("../../../../protocols/osnap-weather-task.md");
    let hash = ProtocolHash::of(text.as_bytes());
    server
        .node
        .set_operator_decision(&hash, true, "a weather protocol")
        .await
        .unwrap();
    let (location, date) = ("Lisbon, Portugal", "2025-03-14");
    let message = json!({"sender_agent_id": "alice", "receiver_agent_id": "bob",
        "message_type": "task_request",
        "payload": {"task_id": "task-2", "task_name": "weather_forecast",
            "task_data": {"location": location, "date": date}}});
    let (status, reply) = server
        .post(
            "/",
            &json!({"protocolHash": hash.to_base64(),
            "protocolSources": [data_uri::encode(text)], "body": message.to_string()}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(reply["status"], "success", "{reply}");
    let answer: Value = serde_json::from_str(reply["body"].as_str().unwrap()).unwrap();
    eprintln!("answer: {answer}");
    assert_eq!(answer["message_type"], "status_update", "{answer}");
    assert_eq!(answer["receiver_agent_id"], "alice", "{answer}");
    assert_eq!(answer["payload"]["task_id"], "task-2", "{answer}");
    assert_eq!(answer["payload"]["task_status"], "completed", "{answer}");
    let forecast = WeatherForecastTool::new(7).forecast(location, date);
    let result = &answer["payload"]["task_result"];
    assert_eq!(
        result["temperature"].as_f64(),
        forecast["temperature_c"].as_f64(),
        "{answer}"
    );
    assert_eq!(
        result["precipitation"].as_f64(),
        forecast["precipitation_mm"].as_f64(),
        "{answer}"
    );
    assert_eq!(
        result["weatherCondition"], forecast["condition"],
        "{answer}"
    );
}

/// The llama-server behind `$AGORA_TEST_LLM_URL` renders `messages` with the model's chat
/// template and tokenizes the text: the tokens the model reads.
async fn prompt_tokens(messages: &Value) -> Vec<i64> {
    let url = std::env::var("AGORA_TEST_LLM_URL").unwrap();
    let server = url
        .trim_end_matches('/')
        .trim_end_matches("/v1")
        .to_string();
    let client = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        let request = client.post(format!("{server}/{path}")).json(&body);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let rendered = post("apply-template", json!({"messages": messages})).await;
    let tokens = post(
        "tokenize",
        json!({"content": rendered["prompt"], "add_special": false}),
    )
    .await;
    tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_i64().unwrap())
        .collect()
}

/// Two weather requests in a row on one node: the tool loop's first prompt of the second shares
/// its beginning (the node's rules, tools and the protocol) with the first's, and llama-server
/// reads that much of it from its prompt cache. The count comes from the server's reply, through
/// the node's backend, into the ledger.
#[tokio::test]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_second_request_reads_the_shared_prefix_from_the_cache() {
    let dir = temp_dir();
    let cassette = dir.path().join("calls.jsonl");
    let llm = agora_llm::RecordingLlm::open(&cassette, agora_testkit::local_llm()).unwrap();
    let server = NodeBuilder::new(std::sync::Arc::new(llm), dir.path())
        .config(|c| {
            c.description = crate::fixtures::BOB.into();
            c.tools = vec![agora_testkit::weather_tool()];
        })
        .spawn()
        .await;
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    for body in [
        json!({"location": "London, UK", "date": "2024-09-27"}),
        json!({"location": "Lima, Peru", "date": "2024-10-03"}),
    ] {
        let (status, reply) = server
            .post("/", &json!({"protocolHash": hash.to_base64(), "protocolSources": [data_uri::encode(WEATHER_PD)], "body": body.to_string()}))
            .await;
        assert_eq!(status, 200, "{reply}");
    }
    // The tool loop's first step of each request: a system prompt and the request alone.
    let firsts: Vec<Value> = std::fs::read_to_string(&cassette)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|entry| {
            let messages = entry["request"]["messages"].as_array().unwrap();
            messages.len() == 2
                && messages[0]["content"]
                    .as_str()
                    .unwrap()
                    .contains("Requests to you follow the protocol document below")
        })
        .collect();
    assert_eq!(firsts.len(), 2, "one first tool-loop step per request");
    let first = prompt_tokens(&firsts[0]["request"]["messages"]).await;
    let second = prompt_tokens(&firsts[1]["request"]["messages"]).await;
    let shared = first
        .iter()
        .zip(&second)
        .take_while(|(a, b)| a == b)
        .count();
    let usage = &firsts[1]["response"]["usage"];
    let cached = usage["cached_prompt_tokens"].as_u64().unwrap_or(0) as i64;
    eprintln!(
        "prompts of {} and {} tokens share {shared}; the second read {cached} from the cache ({usage})",
        first.len(),
        second.len()
    );
    assert!(shared > 200, "the prompts share the node's rules and tools");
    assert!(
        cached as f64 >= 0.8 * shared as f64,
        "{cached} cached of a {shared}-token shared prefix"
    );
    let calls = agora_testkit::llm_calls(&server.node).await;
    assert!(
        calls.iter().any(|c| c.cached_prompt_tokens == cached
            && c.prompt_tokens == usage["prompt_tokens"].as_i64().unwrap()),
        "the ledger keeps the cached count: {calls:?}"
    );
}
