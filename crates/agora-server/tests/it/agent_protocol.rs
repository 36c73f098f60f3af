//! The Agent Protocol front (`/agent-protocol`), tested from the seed's text ("Agent Protocol
//! (draft - 2025 edition)", supercog-ai) over a real loopback socket: discovery and `describe`,
//! `run` with and without `wait`, the minimum event set and the visible one (`TextOutput`,
//! `ToolCall`/`ToolResult`, `CompletionCall`/`CompletionResult`), threads continued by
//! `thread_id`, polling with `since`, SSE (`get_events?stream=true`, `stream_request`), cancel,
//! the optional endpoints, and bad input. The routine test runs the shipped JavaScript routine on
//! the real WebAssembly runtime (it needs `AGORA_JS_ENGINE`, as `wasm_routines` does).

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;
use std::time::Duration;

use crate::support::Spawn;
use agora_llm::ChatRequest;
use agora_node::tools::WeatherForecastTool;
use agora_node::{Tool, ToolError, ToolSpec};
use agora_protocol::ProtocolHash;
use agora_testkit::{
    NodeBuilder, ScriptedLlm, TestServer, last_user_message, schema_name, temp_dir, weather_tool,
};
use serde_json::{Value, json};

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");
const AGENT: &str = "/agent-protocol/test-node";

/// What the weather tool answers for London on the day the tests ask about.
fn london_forecast() -> Value {
    WeatherForecastTool::new(7).forecast("London, UK", "2024-09-27")
}

/// An LLM that looks the weather up when asked about it (or under a protocol), answers with the
/// tool's result, and otherwise echoes the message.
fn weather_llm() -> Arc<ScriptedLlm> {
    ScriptedLlm::new(|request: &ChatRequest| {
        let last = last_user_message(request);
        let lookup = json!({"tool": "weather_forecast",
            "arguments": {"location": "London, UK", "date": "2024-09-27"}});
        if let Some(result) = last.strip_prefix("Result of weather_forecast: ") {
            let forecast: Value = serde_json::from_str(result).unwrap();
            let answer = if request_is_protocol(request) {
                json!({"temperature": forecast["temperature_c"],
                    "precipitation": forecast["precipitation_mm"],
                    "weatherCondition": forecast["condition"]})
            } else {
                json!(format!(
                    "It will be {} °C in London.",
                    forecast["temperature_c"]
                ))
            };
            Ok(json!({"tool": "final_answer", "answer": answer}).to_string())
        } else if last.contains("weather") || last.starts_with("Request body:") {
            Ok(lookup.to_string())
        } else if last.contains("slowly") {
            Ok(json!({"tool": "slow", "arguments": {}}).to_string())
        } else {
            Ok(json!({"tool": "final_answer", "answer": format!("You said: {last}")}).to_string())
        }
    })
}

fn request_is_protocol(request: &ChatRequest) -> bool {
    request
        .messages
        .iter()
        .any(|m| format!("{m:?}").contains("Request body:"))
}

/// A tool that takes a minute: a run calling it is in progress long enough to cancel.
struct SlowTool(ToolSpec);

#[async_trait::async_trait]
impl Tool for SlowTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(json!("done"))
    }
}

/// [`server`] with the weather agent, knowing the weather protocol and serving it by the
/// operator's decision; the protocol's hash.
async fn weather_server() -> (TestServer, tempfile::TempDir, ProtocolHash) {
    let (server, dir) = server(weather_llm()).await;
    let document = server.node.add_document(WEATHER_PD, &[]).await.unwrap();
    let hash = document.hash();
    let decided = server.node.set_operator_decision(&hash, true, "ours").await;
    decided.unwrap();
    (server, dir, hash)
}

async fn server(llm: Arc<ScriptedLlm>) -> (TestServer, tempfile::TempDir) {
    let dir = temp_dir();
    let slow = SlowTool(ToolSpec {
        name: "slow".into(),
        description: "Takes a minute.".into(),
        parameters: json!({"type": "object"}),
        returns: None,
    });
    let server = NodeBuilder::new(llm, dir.path())
        .config(|c| {
            c.tools = vec![weather_tool()];
            c.description = "Forecasts the weather.".into();
        })
        .connected_tools(vec![Arc::new(slow) as Arc<dyn Tool>])
        .spawn()
        .await;
    (server, dir)
}

async fn send(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    body: Option<&str>,
) -> (u16, String) {
    let (status, text, _) = crate::support::raw(server, method, path, body).await;
    (status, text)
}

async fn post(server: &TestServer, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = send(server, reqwest::Method::POST, path, Some(&body.to_string())).await;
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// POSTs a run with `wait=true` and returns its `RunCompleted`, once checked that it succeeded.
async fn run_to_success(server: &TestServer, body: &Value) -> Value {
    let (status, completed) = post(server, &format!("{AGENT}/run?wait=true"), body).await;
    assert_eq!(status, 200, "{completed}");
    assert_eq!(completed["finish_reason"], "success", "{completed}");
    completed
}

async fn get(server: &TestServer, path: &str) -> (u16, Value) {
    let (status, text) = send(server, reqwest::Method::GET, path, None).await;
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The `(event, data)` pairs of a finished SSE body.
fn sse_events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event:") {
                    name = Some(value.trim().to_string());
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push_str(value.trim_start());
                }
            }
            Some((name?, serde_json::from_str(&data).ok()?))
        })
        .collect()
}

fn types(events: &Value) -> Vec<&str> {
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect()
}

/// Every event carries the seed's base members, ids count from 1, and the run ends last.
fn check_base(events: &Value, run_id: &str, thread_id: &str) {
    for (n, event) in events.as_array().unwrap().iter().enumerate() {
        assert_eq!(event["id"], json!(n + 1), "{event}");
        assert_eq!(event["run_id"], run_id, "{event}");
        assert_eq!(event["thread_id"], thread_id, "{event}");
        assert_eq!(event["agent"], "test-node", "{event}");
        assert_eq!(event["depth"], 0, "{event}");
        assert!(
            ["system", "user", "assistant", "tool"].contains(&event["role"].as_str().unwrap()),
            "{event}"
        );
    }
}

#[tokio::test]
async fn agents_are_listed_and_described_with_chat_and_the_protocols_served() {
    let (server, _dir, hash) = weather_server().await;

    for path in ["/agent-protocol", "/agent-protocol/"] {
        let (status, agents) = get(&server, path).await;
        assert_eq!(status, 200);
        assert_eq!(agents, json!([["test-node", AGENT]]));
    }
    let (status, descriptor) = get(&server, &format!("{AGENT}/describe")).await;
    assert_eq!(status, 200, "{descriptor}");
    assert_eq!(descriptor["name"], "test-node");
    assert_eq!(descriptor["purpose"], "Forecasts the weather.");
    for endpoint in ["/describe", "/run", "/get_events", "/stream_request"] {
        assert!(
            descriptor["endpoints"]
                .as_array()
                .unwrap()
                .contains(&json!(endpoint)),
            "{descriptor}"
        );
    }
    let tools = descriptor["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("weather_forecast")), "{descriptor}");
    let operations = descriptor["operations"].as_array().unwrap();
    assert_eq!(operations[0]["name"], "chat");
    assert_eq!(
        operations[0]["input_schema"]["properties"]["input"]["type"],
        "string"
    );
    let weather = operations
        .iter()
        .find(|o| o["name"] == "WeatherForecastQuery")
        .unwrap_or_else(|| panic!("the served protocol is an operation: {descriptor}"));
    assert_eq!(weather["protocol_hash"], hash.to_hex());
    assert_eq!(weather["answered_by"], "llm");
    assert!(
        weather["description"]
            .as_str()
            .unwrap()
            .contains("forecast")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_run_shows_its_llm_and_tool_calls_and_its_thread_continues() {
    let llm = weather_llm();
    let (server, _dir) = server(llm.clone()).await;

    // wait=true: the answer is the run's RunCompleted.
    let (status, completed) = post(
        &server,
        &format!("{AGENT}/run?wait=true"),
        &json!({"type": "ChatRequest", "input": "What is the weather in London?"}),
    )
    .await;
    assert_eq!(status, 200, "{completed}");
    assert_eq!(completed["type"], "RunCompleted");
    assert_eq!(completed["finish_reason"], "success");
    let temperature = london_forecast()["temperature_c"].to_string();
    let result = completed["result"].as_str().unwrap();
    assert!(
        result.contains(&temperature),
        "{result} lacks {temperature}"
    );
    let run_id = completed["run_id"].as_str().unwrap().to_string();
    let thread_id = completed["thread_id"].as_str().unwrap().to_string();

    // Polling: everything first, then only what is new.
    let events_path = format!("{AGENT}/get_events?run_id={run_id}");
    let (status, events) = get(&server, &events_path).await;
    assert_eq!(status, 200, "{events}");
    check_base(&events, &run_id, &thread_id);
    assert_eq!(
        types(&events),
        [
            "RunStarted",
            "ChatRequest",
            "CompletionCall",
            "CompletionResult",
            "ToolCall",
            "ToolResult",
            "CompletionCall",
            "CompletionResult",
            "TextOutput",
            "RunCompleted"
        ],
        "{events}"
    );
    let events = events.as_array().unwrap();
    assert_eq!(events[1]["input"], "What is the weather in London?");
    assert_eq!(events[1]["role"], "user");
    assert_eq!(events[2]["category"], "conversation");
    assert!(
        events[3]["content"]
            .as_str()
            .unwrap()
            .contains("weather_forecast")
    );
    assert_eq!(events[3]["model"], "scripted");
    assert_eq!(events[4]["function_name"], "weather_forecast");
    assert_eq!(events[4]["args"]["location"], "London, UK");
    assert_eq!(events[4]["caller"], "llm");
    let tool_result: Value =
        serde_json::from_str(events[5]["text_result"].as_str().unwrap()).unwrap();
    assert_eq!(tool_result, london_forecast(), "the tool's own data");
    assert_eq!(events[5]["role"], "tool");
    assert_eq!(events[8]["content"], result);
    assert_eq!(events[9], completed);
    let (_, again) = get(&server, &events_path).await;
    assert_eq!(again, json!([]), "nothing new since the last poll");
    let (_, since) = get(&server, &format!("{events_path}&since=8")).await;
    assert_eq!(types(&since), ["TextOutput", "RunCompleted"]);

    // The thread continues: the LLM sees the first turn.
    let calls_before = llm.call_count();
    let completed = run_to_success(
        &server,
        &json!({"input": "Thanks, and tomorrow?", "thread_id": thread_id}),
    )
    .await;
    assert_eq!(completed["thread_id"], thread_id);
    assert_ne!(completed["run_id"], run_id);
    let second = &llm.calls()[calls_before];
    let seen = format!("{:?}", second.messages);
    assert!(
        seen.contains("What is the weather in London?") && seen.contains(&temperature),
        "the second turn's LLM call holds the first turn: {seen}"
    );
    assert!(
        completed["result"]
            .as_str()
            .unwrap()
            .contains("Thanks, and tomorrow?")
    );

    // The optional endpoints: the run's status, the caller's threads, a thread's events.
    let (status, run) = get(&server, &format!("{AGENT}/runs/{run_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(
        run,
        json!({"run_id": run_id, "thread_id": thread_id, "status": "success"})
    );
    let (_, threads) = get(&server, &format!("{AGENT}/threads")).await;
    assert_eq!(threads.as_array().unwrap().len(), 1, "{threads}");
    assert_eq!(threads[0]["thread_id"], thread_id);
    assert_eq!(threads[0]["runs"].as_array().unwrap().len(), 2);
    let (_, thread_events) = get(&server, &format!("{AGENT}/get_events/{thread_id}")).await;
    let thread_types = types(&thread_events);
    assert_eq!(
        thread_types
            .iter()
            .filter(|t| **t == "RunCompleted")
            .count(),
        2,
        "{thread_events}"
    );
    let (_, by_path) = get(&server, &format!("{AGENT}/get_events/{run_id}?since=0")).await;
    assert_eq!(by_path.as_array().unwrap().len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_without_wait_is_accepted_then_read_over_sse() {
    let (server, _dir) = server(weather_llm()).await;
    let (status, started) = post(
        &server,
        &format!("{AGENT}/run"),
        &json!({"type": "ChatRequest", "input": "hello"}),
    )
    .await;
    assert_eq!(status, 202, "{started}");
    assert_eq!(started["type"], "RunStarted");
    assert_eq!(started["id"], 1);
    let run_id = started["run_id"].as_str().unwrap();

    // The stream ends after RunCompleted, so the whole body can be read.
    let (status, text) = send(
        &server,
        reqwest::Method::GET,
        &format!("{AGENT}/get_events?run_id={run_id}&stream=true"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let events = sse_events(&text);
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "RunStarted",
            "ChatRequest",
            "CompletionCall",
            "CompletionResult",
            "TextOutput",
            "RunCompleted"
        ],
        "{text}"
    );
    assert!(events.iter().all(|(name, data)| data["type"] == *name));
    assert_eq!(events[5].1["result"], "You said: hello");

    // `since` over SSE too.
    let (_, text) = send(
        &server,
        reqwest::Method::GET,
        &format!("{AGENT}/get_events?run_id={run_id}&stream=true&since=4"),
        None,
    )
    .await;
    let names: Vec<String> = sse_events(&text).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["TextOutput", "RunCompleted"]);

    // stream_request: a new run and its events in one call.
    let response = reqwest::Client::new()
        .post(format!("{}{AGENT}/stream_request", server.url))
        .json(&json!({"input": "again"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(events.first().unwrap().0, "RunStarted");
    let (last, data) = events.last().unwrap();
    assert_eq!(
        (last.as_str(), &data["result"]),
        ("RunCompleted", &json!("You said: again"))
    );
    assert_ne!(data["run_id"], run_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_progress_is_canceled() {
    let (server, _dir) = server(weather_llm()).await;
    let (status, started) = post(
        &server,
        &format!("{AGENT}/run"),
        &json!({"input": "do it slowly"}),
    )
    .await;
    assert_eq!(status, 202, "{started}");
    let run_id = started["run_id"].as_str().unwrap().to_string();
    let events_path = format!("{AGENT}/get_events?run_id={run_id}&since=0");
    // Wait until the run is inside the slow tool.
    let mut seen = json!([]);
    for _ in 0..200 {
        seen = get(&server, &events_path).await.1;
        if types(&seen).contains(&"ToolCall") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(types(&seen).contains(&"ToolCall"), "{seen}");
    let (_, status) = get(&server, &format!("{AGENT}/runs/{run_id}")).await;
    assert_eq!(status["status"], "running");

    let (code, canceled) = post(
        &server,
        &format!("{AGENT}/run?wait=true"),
        &json!({"type": "CancelRequest", "run_id": run_id}),
    )
    .await;
    assert_eq!(code, 200, "{canceled}");
    assert_eq!(canceled["status"], "canceled");
    let (_, events) = get(&server, &events_path).await;
    let events = events.as_array().unwrap();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RunCompleted");
    assert_eq!(last["finish_reason"], "canceled");
    assert!(!types(&json!(events)).contains(&"ToolResult"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_is_a_request_under_its_protocol() {
    let (server, _dir, hash) = weather_server().await;
    let forecast = london_forecast();
    let expected = json!({"temperature": forecast["temperature_c"],
        "precipitation": forecast["precipitation_mm"],
        "weatherCondition": forecast["condition"]});
    // By name, and by hash; the input is the body.
    for operation in ["WeatherForecastQuery".to_string(), hash.to_hex()] {
        let completed = run_to_success(
            &server,
            &json!({"type": "OperationRequest", "operation": operation,
                "input": {"location": "London, UK", "date": "2024-09-27"}}),
        )
        .await;
        assert_eq!(completed["output"], expected);
        let run_id = completed["run_id"].as_str().unwrap();
        let (_, events) = get(&server, &format!("{AGENT}/get_events?run_id={run_id}")).await;
        let names = types(&events);
        assert_eq!(names[1], "OperationRequest");
        assert!(names.contains(&"CompletionCall") && names.contains(&"ToolResult"));
    }
    let requests = agora_testkit::recent_requests(&server.node, 10).await;
    assert!(
        requests
            .iter()
            .all(|r| r.protocol_hash == Some(hash) && r.channel == "agent_protocol"),
        "operation runs are protocol requests"
    );
}

#[tokio::test]
async fn bad_input_is_a_clear_json_error() {
    let (server, _dir) = server(ScriptedLlm::unreachable()).await;
    let run = format!("{AGENT}/run");
    let unknown_run = "00000000-0000-4000-8000-000000000000";
    use reqwest::Method as M;
    #[rustfmt::skip]
    let cases: [(M, String, Option<String>, u16, &str); 16] = [
        (M::GET, "/agent-protocol/someone-else/describe".into(), None, 404, "no agent named"),
        (M::POST, run.clone(), Some("not json".into()), 400, "not valid JSON"),
        (M::POST, run.clone(), Some("[1, 2]".into()), 400, "JSON object"),
        (M::POST, run.clone(), Some(r#"{"type": "ChatRequest"}"#.into()), 400, "needs input"),
        (M::POST, run.clone(), Some(r#"{"type": "ResumeWithInput", "request_keys": {}}"#.into()), 422, "ResumeWithInput"),
        (M::POST, run.clone(), Some(r#"{"operation": "nope", "input": {}}"#.into()), 422, "no operation"),
        (M::POST, run.clone(), Some(format!(r#"{{"operation": "nope", "input": 1, "thread_id": "{unknown_run}"}}"#)), 422, "single-shot"),
        (M::POST, run.clone(), Some(format!(r#"{{"input": "hi", "thread_id": "{unknown_run}"}}"#)), 404, "thread not found"),
        (M::POST, run.clone(), Some(format!(r#"{{"type": "CancelRequest", "run_id": "{unknown_run}"}}"#)), 404, "no such run"),
        (M::POST, format!("{run}?wait=perhaps"), Some(r#"{"input": "hi"}"#.into()), 400, "wait must be"),
        (M::POST, run.clone(), Some(format!(r#"{{"input": "{}"}}"#, "x".repeat(2 * 1024 * 1024))), 413, "larger"),
        (M::GET, format!("{AGENT}/get_events"), None, 400, "needs run_id"),
        (M::GET, format!("{AGENT}/get_events?run_id={unknown_run}"), None, 404, "no such run"),
        (M::GET, format!("{AGENT}/get_events/{unknown_run}"), None, 404, "no run or thread"),
        (M::GET, format!("{AGENT}/runs/{unknown_run}"), None, 404, "no such run"),
        (M::GET, format!("{AGENT}/run"), None, 405, "method not allowed"),
    ];
    for (method, path, body, expected, words) in cases {
        let (status, text) = send(&server, method.clone(), &path, body.as_deref()).await;
        let shown: String = text.chars().take(300).collect();
        assert_eq!(status, expected, "{method} {path}: {shown}");
        let error: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{method} {path}: not JSON: {shown}"));
        assert_eq!(error["status"], "failure", "{error}");
        let message = error["message"].as_str().unwrap_or_default().to_string()
            + error["error"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{method} {path}: {error}");
    }
    // A bad `since` on a real run.
    let (_, started) = post(&server, &run, &json!({"operation": "chat", "input": "hi"})).await;
    let run_id = started["run_id"].as_str().unwrap_or_default();
    let (status, error) = get(
        &server,
        &format!("{AGENT}/get_events?run_id={run_id}&since=abc"),
    )
    .await;
    assert_eq!(status, 400, "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routine_answers_an_operation_with_no_llm_call_and_its_tool_calls_are_events() {
    let dir = temp_dir();
    let server = NodeBuilder::new(ScriptedLlm::unreachable(), dir.path())
        .config(|c| c.tools = vec![weather_tool()])
        .routine_engine(Arc::new(crate::wasm_routines::runtime()))
        .admin_token("secret-token")
        .spawn()
        .await;
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let source =
        std::fs::read_to_string(repo.join("routines/weather-forecast/routine.js")).unwrap();
    let added = reqwest::Client::new()
        .post(format!("{}/admin/routines", server.url))
        .bearer_auth("secret-token")
        .json(&json!({
            "name": "weather-forecast", "protocolText": WEATHER_PD, "source": source,
            "tools": ["weather_forecast"], "timeoutMs": 1000, "memoryMb": 64,
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(added.status().as_u16(), 201, "{:?}", added.text().await);

    let (_, descriptor) = get(&server, &format!("{AGENT}/describe")).await;
    let operation = descriptor["operations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "WeatherForecastQuery")
        .cloned()
        .unwrap_or_else(|| panic!("{descriptor}"));
    assert_eq!(operation["answered_by"], "routine");

    let completed = run_to_success(
        &server,
        &json!({"operation": "WeatherForecastQuery",
            "input": {"location": "London, UK", "date": "2024-09-27"}}),
    )
    .await;
    let forecast = london_forecast();
    // Numbers by value: the routine writes 0 where the tool said 0.0.
    let output = &completed["output"];
    assert_eq!(
        output["temperature"].as_f64(),
        forecast["temperature_c"].as_f64(),
        "{output}"
    );
    assert_eq!(
        output["precipitation"].as_f64(),
        forecast["precipitation_mm"].as_f64(),
        "{output}"
    );
    assert_eq!(output["weatherCondition"], forecast["condition"]);

    let run_id = completed["run_id"].as_str().unwrap();
    let (_, events) = get(&server, &format!("{AGENT}/get_events?run_id={run_id}")).await;
    assert_eq!(
        types(&events),
        [
            "RunStarted",
            "OperationRequest",
            "ToolCall",
            "ToolResult",
            "TextOutput",
            "RunCompleted"
        ],
        "no CompletionCall: {events}"
    );
    let call = &events[2];
    assert_eq!(
        (&call["function_name"], &call["caller"]),
        (&json!("weather_forecast"), &json!("routine"))
    );
    assert_eq!(call["args"]["location"], "London, UK");
    assert_eq!(call["args"]["date"], "2024-09-27");
    let result: Value = serde_json::from_str(events[3]["text_result"].as_str().unwrap()).unwrap();
    assert_eq!(result, forecast, "the tool's own data");

    let store = server.node.store();
    assert!(store.ledger().llm_calls(None).await.unwrap().is_empty());
}

/// Serves a node with the slow tool and `edge` settings.
async fn edge_server(edge: agora_server::EdgeSettings) -> (TestServer, tempfile::TempDir) {
    let dir = temp_dir();
    let slow = SlowTool(ToolSpec {
        name: "slow".into(),
        description: "Takes a minute.".into(),
        parameters: json!({"type": "object"}),
        returns: None,
    });
    let server = NodeBuilder::new(weather_llm(), dir.path())
        .connected_tools(vec![Arc::new(slow) as Arc<dyn Tool>])
        .spawn_with(move |served: agora_testkit::Served| {
            Box::pin(async move {
                let state =
                    agora_server::AppState::new(served.node, None, served.max_body_bytes, 64)
                        .with_edge(&edge)
                        .unwrap();
                let _ = agora_server::serve_state(served.listener, state, served.shutdown).await;
            })
        })
        .await;
    (server, dir)
}

async fn post_as(
    server: &TestServer,
    token: Option<&str>,
    path: &str,
    body: &Value,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}{path}", server.url))
        .json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn get_as(server: &TestServer, token: &str, path: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("{}{path}", server.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_meet_the_edge_and_are_read_only_by_their_client() {
    let mut edge = agora_server::EdgeSettings::default();
    edge.clients.tokens = [
        ("partner".to_string(), "p-token".to_string()),
        ("other".to_string(), "o-token".to_string()),
    ]
    .into();
    edge.rate_limit.enabled = true;
    edge.rate_limit.llm_burst = 2;
    edge.rate_limit.llm_per_minute = 1;
    let (server, _dir) = edge_server(edge).await;
    let run = format!("{AGENT}/run?wait=true");
    let chat = json!({"input": "hello"});

    let (status, refused) = post_as(&server, None, &run, &chat).await;
    assert_eq!((status, &refused["code"]), (401, &json!("unauthorized")));

    let (status, completed) = post_as(&server, Some("p-token"), &run, &chat).await;
    assert_eq!(status, 200, "{completed}");
    let run_id = completed["run_id"].as_str().unwrap();
    let thread_id = completed["thread_id"].as_str().unwrap();
    assert_eq!(
        get_as(&server, "p-token", &format!("{AGENT}/runs/{run_id}")).await,
        200
    );
    for path in [
        format!("{AGENT}/runs/{run_id}"),
        format!("{AGENT}/get_events?run_id={run_id}"),
        format!("{AGENT}/get_events/{thread_id}"),
    ] {
        assert_eq!(get_as(&server, "o-token", &path).await, 404, "{path}");
    }
    let (status, _) = post_as(
        &server,
        Some("o-token"),
        &run,
        &json!({"type": "CancelRequest", "run_id": run_id}),
    )
    .await;
    assert_eq!(status, 404, "another client cannot cancel it");

    // The LLM budget: a burst of 2, then 429.
    let (status, _) = post_as(&server, Some("p-token"), &run, &chat).await;
    assert_eq!(status, 200);
    let (status, limited) = post_as(&server, Some("p-token"), &run, &chat).await;
    assert_eq!((status, &limited["code"]), (429, &json!("rate_limited")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_the_request_deadline_ends_in_error() {
    let edge = agora_server::EdgeSettings {
        request_timeout_secs: 1,
        ..agora_server::EdgeSettings::default()
    };
    let (server, _dir) = edge_server(edge).await;
    let (status, completed) = post(
        &server,
        &format!("{AGENT}/run?wait=true"),
        &json!({"input": "do it slowly"}),
    )
    .await;
    assert_eq!(status, 200, "{completed}");
    assert_eq!(completed["finish_reason"], "error");
    assert!(
        completed["error"]
            .as_str()
            .unwrap()
            .contains("did not answer within"),
        "{completed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_survives_a_restart_but_its_runs_events_do_not() {
    let llm = weather_llm();
    let dir = temp_dir();
    let first = NodeBuilder::new(llm.clone(), dir.path()).spawn().await;
    let (status, completed) = post(
        &first,
        &format!("{AGENT}/run?wait=true"),
        &json!({"input": "Remember the word heliotrope."}),
    )
    .await;
    assert_eq!(status, 200, "{completed}");
    let run_id = completed["run_id"].as_str().unwrap().to_string();
    let thread_id = completed["thread_id"].as_str().unwrap().to_string();
    first.stop().await;

    let second = NodeBuilder::new(llm.clone(), dir.path()).spawn().await;
    let (status, _) = get(&second, &format!("{AGENT}/runs/{run_id}")).await;
    assert_eq!(status, 404, "runs are held in memory");
    let completed = run_to_success(
        &second,
        &json!({"input": "Which word was it?", "thread_id": thread_id}),
    )
    .await;
    assert_eq!(completed["thread_id"], thread_id);
    let last = llm.calls().last().cloned().unwrap();
    assert!(
        format!("{:?}", last.messages).contains("heliotrope"),
        "the stored conversation carries the first turn across the restart"
    );
}

/// Alice: an Agent Protocol agent with the weather task (a temperature), an admin token, and
/// task targets on loopback allowed. Her scripted LLM asks for London's weather and reads the
/// first number of the reply back.
async fn task_agent(admin_token: Option<&str>) -> (TestServer, tempfile::TempDir) {
    let dir = temp_dir();
    let llm = ScriptedLlm::new(|request: &ChatRequest| match schema_name(request) {
        Some("task_output") => {
            let last = last_user_message(request);
            let reply = last.split("Reply: ").nth(1).unwrap_or_default();
            let number: f64 = reply
                .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
                .find_map(|t| t.trim_end_matches('.').parse().ok())
                .unwrap();
            Ok(json!({"temperature": number}).to_string())
        }
        None => Ok("What will the weather be in London on 2024-09-27?".to_string()),
        other => panic!("Alice got an unexpected request {other:?}"),
    });
    let mut builder = NodeBuilder::new(llm, dir.path()).config(|c| {
        c.tasks = vec![crate::fixtures::weather_task(
            crate::fixtures::temperature_output(),
        )];
    });
    if let Some(token) = admin_token {
        builder = builder.admin_token(token);
    }
    let server = builder
        .spawn_with(|served: agora_testkit::Served| {
            Box::pin(async move {
                let mut state = agora_server::AppState::new(
                    served.node,
                    served.admin_token,
                    served.max_body_bytes,
                    64,
                );
                state.task_targets = Arc::new(agora_mcp::TargetRules {
                    allowed_targets: Vec::new(),
                    fetch: agora_fetch::FetchPolicy::default().allowing_loopback(),
                });
                let _ = agora_server::serve_state(served.listener, state, served.shutdown).await;
            })
        })
        .await;
    (server, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_an_operation_that_sends_to_its_target_with_the_token() {
    let (bob, _bob_dir) = server(weather_llm()).await;
    let (alice, _alice_dir) = task_agent(Some("secret-token")).await;
    let agent = AGENT;

    let (status, descriptor) = get(&alice, &format!("{agent}/describe")).await;
    assert_eq!(status, 200, "{descriptor}");
    let operation = descriptor["operations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "weather")
        .cloned()
        .unwrap_or_else(|| panic!("the task is an operation: {descriptor}"));
    assert_eq!(operation["task"], "weather");
    assert_eq!(
        operation["input_schema"]["properties"]["input"]["required"],
        json!(["location", "date"])
    );
    assert_eq!(
        operation["output_schema"]["required"],
        json!(["temperature"])
    );

    let run = json!({"operation": "weather", "input": {"target": bob.url,
        "input": {"location": "London, UK", "date": "2024-09-27"}}});
    let path = format!("{agent}/run?wait=true");
    // Without the token, or with a wrong one: refused, and nothing is sent.
    for token in [None, Some("wrong")] {
        let (status, error) = post_as(&alice, token, &path, &run).await;
        assert_eq!(status, 401, "{error}");
    }
    assert!(agora_testkit::llm_calls(&alice.node).await.is_empty());

    let (status, completed) = post_as(&alice, Some("secret-token"), &path, &run).await;
    assert_eq!(status, 200, "{completed}");
    assert_eq!(completed["finish_reason"], "success", "{completed}");
    assert_eq!(
        completed["output"]["temperature"].as_f64(),
        london_forecast()["temperature_c"].as_f64(),
        "Bob's tool's figure, read back by Alice: {completed}"
    );
    let run_id = completed["run_id"].as_str().unwrap();
    let (_, events) = get(&alice, &format!("{agent}/get_events?run_id={run_id}")).await;
    assert_eq!(
        types(&events),
        [
            "RunStarted",
            "OperationRequest",
            "CompletionCall",
            "CompletionResult",
            "CompletionCall",
            "CompletionResult",
            "TextOutput",
            "RunCompleted"
        ],
        "Alice's two LLM calls (write the message, read the reply): {events}"
    );
    check_base(&events, run_id, completed["thread_id"].as_str().unwrap());
    let alice_calls = agora_testkit::llm_calls(&alice.node).await;
    assert_eq!(alice_calls.len(), 2, "the ledger has what the events show");
    assert!(
        !agora_testkit::llm_calls(&bob.node).await.is_empty(),
        "Bob answered with his LLM"
    );
}

#[tokio::test]
async fn a_task_operation_refuses_bad_targets_and_input_and_needs_a_configured_token() {
    let (alice, _dir) = task_agent(Some("secret-token")).await;
    let path = &format!("{AGENT}/run?wait=true");
    let data = json!({"location": "London, UK", "date": "2024-09-27"});
    for (input, why) in [
        (
            json!({"target": "http://10.1.2.3/", "input": data}),
            "private address",
        ),
        (
            json!({"target": "ftp://example.org/", "input": data}),
            "not http(s)",
        ),
        (json!({"input": data}), "no target"),
        (
            json!({"target": "http://127.0.0.1:9/", "input": {"location": "London"}}),
            "no date",
        ),
    ] {
        let (status, error) = post_as(
            &alice,
            Some("secret-token"),
            path,
            &json!({"operation": "weather", "input": input}),
        )
        .await;
        assert_eq!(status, 422, "{why}: {error}");
        assert!(error["error"].as_str().is_some(), "{why}: {error}");
    }
    // An unreachable target: the run ends in error, with a sentence and no OS error.
    let (status, completed) = post_as(
        &alice,
        Some("secret-token"),
        path,
        &json!({"operation": "weather", "input": {"target": "http://127.0.0.1:9/", "input": data}}),
    )
    .await;
    assert_eq!(status, 200, "{completed}");
    assert_eq!(completed["finish_reason"], "error", "{completed}");
    let error = completed["error"].as_str().unwrap();
    assert!(error.contains("could not reach"), "{error}");
    assert!(
        !error.to_lowercase().contains("connection refused"),
        "{error}"
    );

    let (alice, _dir) = task_agent(None).await;
    let (status, error) = post_as(
        &alice,
        Some("anything"),
        path,
        &json!({"operation": "weather", "input": {"target": "http://127.0.0.1:9/", "input": data}}),
    )
    .await;
    assert_eq!(status, 403, "no token configured: tasks are off: {error}");
}
