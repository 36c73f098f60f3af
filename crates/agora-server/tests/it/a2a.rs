//! The node as an A2A agent at the HTTP boundary: the agent card, `SendMessage` (text and the
//! Agora extension's data part), `GetTask`, `CancelTask`, `SendStreamingMessage`, tasks that
//! survive a restart, the request ledger's `a2a` channel, and every kind of bad input. The LLM
//! is scripted; `a2a_interop_*` drives the node with the official Python SDK's client. The
//! node as an A2A client is in `a2a_sender`.

use std::future::Future;
use std::pin::Pin;

use agora_a2a::{A2aFront, EXTENSION_URI, Limits};
use agora_protocol::{ProtocolHash, data_uri};
use agora_server::AppState;
use agora_store::{Conversation, ConversationKind};
use agora_testkit::{NodeBuilder, ScriptedLlm, Served, TestServer, temp_dir};
use serde_json::{Value, json};

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");

/// Small limits, so an oversized message fits in the body limit.
const LIMITS: Limits = Limits {
    max_message_bytes: 4096,
    max_parts: 4,
};

/// Serves a test node with the A2A front mounted.
pub(crate) fn serve(served: Served) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let mut state = AppState::new(served.node.clone(), None, 64 * 1024, 64);
        state.a2a = Some(A2aFront::new(served.node, LIMITS));
        let _ = agora_server::app::serve_state(served.listener, state, served.shutdown).await;
    })
}

/// Answers natural language with the question it was asked, and weather requests with JSON.
pub(crate) fn llm() -> std::sync::Arc<ScriptedLlm> {
    ScriptedLlm::new(|request| match agora_testkit::schema_name(request) {
        Some("suitability") => Ok(r#"{"reason": "fine", "suitable": "yes"}"#.into()),
        _ => {
            let asked = agora_testkit::last_user_message(request);
            let answer = if asked.contains("\"city\"") {
                json!({"temperature": 21, "weatherCondition": "sunny"})
            } else {
                json!(format!("You asked: {asked}"))
            };
            Ok(json!({"tool": "final_answer", "answer": answer}).to_string())
        }
    })
}

pub(crate) async fn node(dir: &std::path::Path) -> TestServer {
    NodeBuilder::new(llm(), dir)
        .config(|c| c.description = "A weather agent for European cities.".into())
        .spawn_with(serve)
        .await
}

/// Posts raw bytes to `/a2a`; returns (status, JSON body).
async fn post_raw(server: &TestServer, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/a2a", server.url))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// One JSON-RPC call; returns its whole response object (HTTP 200 checked).
async fn rpc(server: &TestServer, method: &str, params: Value) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let (status, response) = post_raw(server, request.to_string()).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["id"], 7, "{response}");
    response
}

pub(crate) fn text_message(text: &str) -> Value {
    json!({"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}]}})
}

fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {response}"))
}

#[tokio::test]
async fn the_card_names_the_interface_the_extension_and_a_skill_per_protocol() {
    let dir = temp_dir();
    let server = node(dir.path()).await;
    let card: Value =
        serde_json::from_str(&server.get_text("/.well-known/agent-card.json").await).unwrap();
    assert_eq!(card["name"], "test-node");
    assert_eq!(card["description"], "A weather agent for European cities.");
    let interface = &card["supportedInterfaces"][0];
    assert_eq!(interface["url"], format!("{}/a2a", server.url));
    assert_eq!(interface["protocolBinding"], "JSONRPC");
    assert_eq!(interface["protocolVersion"], "1.0");
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["capabilities"]["extensions"][0]["uri"], EXTENSION_URI);
    let skill_ids = |card: &Value| -> Vec<String> {
        card["skills"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(skill_ids(&card), ["natural-language"]);

    let document = server.node.add_document(WEATHER_PD, &[]).await.unwrap();
    let hash = document.hash();
    server
        .node
        .set_operator_decision(&hash, true, "tested")
        .await
        .unwrap();
    let card: Value =
        serde_json::from_str(&server.get_text("/.well-known/agent-card.json").await).unwrap();
    assert_eq!(
        skill_ids(&card),
        [
            "natural-language".to_string(),
            format!("protocol:{}", hash.to_hex())
        ]
    );
    let skill = &card["skills"][1];
    assert_eq!(skill["name"], document.display_name());
    let source = format!("{}/protocols/{}", server.url, hash.to_hex());
    assert!(
        skill["description"].as_str().unwrap().contains(&source),
        "{skill}"
    );
}

#[tokio::test]
async fn a_text_message_is_a_task_that_continues_survives_a_restart_and_is_recorded() {
    let dir = temp_dir();
    let server = node(dir.path()).await;
    let sent = rpc(
        &server,
        "SendMessage",
        text_message("Will it rain in Oslo?"),
    )
    .await;
    let task = &sent["result"]["task"];
    let task_id = task["id"].as_str().unwrap().to_string();
    assert_eq!(task["contextId"], task_id);
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let answer = task["artifacts"][0]["parts"][0]["text"].as_str().unwrap();
    assert!(
        answer.starts_with("You asked:") && answer.contains("Will it rain in Oslo?"),
        "{answer}"
    );
    assert_eq!(task["history"].as_array().unwrap().len(), 2);
    assert_eq!(task["history"][0]["role"], "ROLE_USER");
    assert_eq!(task["history"][1]["role"], "ROLE_AGENT");

    // The task id continues it.
    let mut follow = text_message("And in Bergen?");
    follow["message"]["taskId"] = json!(task_id);
    let continued = rpc(&server, "SendMessage", follow).await;
    let task = &continued["result"]["task"];
    assert_eq!(task["id"], task_id);
    assert_eq!(task["history"].as_array().unwrap().len(), 4);
    let answer = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(answer.contains("And in Bergen?"), "{answer}");

    // A context id alone continues it too.
    let mut follow = text_message("And in Tromsø?");
    follow["message"]["contextId"] = json!(task_id);
    let continued = rpc(&server, "SendMessage", follow).await;
    assert_eq!(continued["result"]["task"]["id"], task_id);
    assert_eq!(
        continued["result"]["task"]["history"]
            .as_array()
            .unwrap()
            .len(),
        6
    );

    // Every message is in the request ledger under the channel `a2a`.
    let requests = agora_testkit::recent_requests(&server.node, 10).await;
    assert_eq!(requests.len(), 3);
    assert!(
        requests
            .iter()
            .all(|r| r.channel == "a2a" && r.status == "success"),
        "{requests:?}"
    );

    // The task is the node's conversation: it survives a restart.
    server.stop().await;
    let server = node(dir.path()).await;
    let got = rpc(&server, "GetTask", json!({"id": task_id})).await;
    let task = &got["result"];
    assert_eq!(task["id"], task_id);
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(task["history"].as_array().unwrap().len(), 6);
    let got = rpc(
        &server,
        "GetTask",
        json!({"id": task_id, "historyLength": 1}),
    )
    .await;
    let history = got["result"]["history"].as_array().unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["role"], "ROLE_AGENT");
}

#[tokio::test]
async fn a_data_part_with_a_protocol_hash_is_answered_under_that_protocol() {
    let dir = temp_dir();
    let server = node(dir.path()).await;
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    let envelope = json!({
        "protocolHash": hash.to_hex(),
        "protocolSources": [data_uri::encode(WEATHER_PD)],
        "body": {"city": "Paris", "date": "2026-11-26"},
    });
    let message = json!({"message": {
        "messageId": "m-2",
        "role": "ROLE_USER",
        "extensions": [EXTENSION_URI],
        "parts": [{"data": envelope, "mediaType": "application/json"}],
    }});
    let sent = rpc(&server, "SendMessage", message).await;
    let answer = &sent["result"]["message"];
    assert_eq!(answer["role"], "ROLE_AGENT", "{sent}");
    assert_eq!(
        answer["parts"][0]["data"],
        json!({"temperature": 21, "weatherCondition": "sunny"})
    );
    let requests = agora_testkit::recent_requests(&server.node, 10).await;
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].channel, "a2a");
    assert_eq!(requests[0].protocol_hash, Some(hash));

    // A hash that its sources do not match is a failed task, with the node's sentence.
    let unknown_hash = ProtocolHash::of(b"a document no one serves");
    let wrong = json!({"message": {"messageId": "m-3", "role": "ROLE_USER", "parts": [{"data": {
        "protocolHash": unknown_hash.to_hex(),
        "protocolSources": [data_uri::encode("another document")],
        "body": "{}",
    }}]}});
    let sent = rpc(&server, "SendMessage", wrong).await;
    let task = &sent["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{sent}");
    assert!(task["status"]["message"]["parts"][0]["text"].is_string());
    let unknown = rpc(&server, "GetTask", json!({"id": task["id"]})).await;
    assert_eq!(error_code(&unknown), -32001);
}

#[tokio::test]
async fn a_canceled_task_ends_and_a_negotiation_cannot_be_canceled() {
    let dir = temp_dir();
    let server = node(dir.path()).await;
    let sent = rpc(&server, "SendMessage", text_message("Snow in Zurich?")).await;
    let task_id = sent["result"]["task"]["id"].clone();
    let canceled = rpc(&server, "CancelTask", json!({"id": task_id})).await;
    assert_eq!(canceled["result"]["id"], task_id);
    assert_eq!(canceled["result"]["status"]["state"], "TASK_STATE_CANCELED");
    for method in ["GetTask", "CancelTask"] {
        let after = rpc(&server, method, json!({"id": task_id})).await;
        assert_eq!(error_code(&after), -32001, "{method}: {after}");
    }
    let mut follow = text_message("Still there?");
    follow["message"]["taskId"] = task_id.clone();
    assert_eq!(
        error_code(&rpc(&server, "SendMessage", follow).await),
        -32001
    );

    let now = now_ms();
    server
        .node
        .store()
        .create_conversation(&Conversation {
            id: "negotiation-1".into(),
            kind: ConversationKind::Negotiation,
            protocol_hash: None,
            messages: json!([]),
            created_at_ms: now,
            last_active_ms: now,
            expires_at_ms: now + 600_000,
        })
        .await
        .unwrap();
    let refused = rpc(&server, "CancelTask", json!({"id": "negotiation-1"})).await;
    assert_eq!(error_code(&refused), -32002);
    let hidden = rpc(&server, "GetTask", json!({"id": "negotiation-1"})).await;
    assert_eq!(error_code(&hidden), -32001);
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// An LLM that answers as [`llm`] does, each call after `delay`: an answer that takes longer
/// than a client's read timeout.
struct SlowLlm {
    delay: std::time::Duration,
    inner: std::sync::Arc<ScriptedLlm>,
}

#[async_trait::async_trait]
impl agora_llm::Llm for SlowLlm {
    async fn chat(
        &self,
        request: &agora_llm::ChatRequest,
    ) -> Result<agora_llm::ChatResponse, agora_llm::LlmError> {
        tokio::time::sleep(self.delay).await;
        self.inner.chat(request).await
    }

    fn model(&self) -> String {
        self.inner.model()
    }
}

pub(crate) async fn slow_node(dir: &std::path::Path, delay: std::time::Duration) -> TestServer {
    let slow = std::sync::Arc::new(SlowLlm {
        delay,
        inner: llm(),
    });
    NodeBuilder::new(slow, dir)
        .config(|c| c.description = "A weather agent for European cities.".into())
        .spawn_with(serve)
        .await
}

/// A stream's events (its `data:` lines as JSON) and how many keep-alive comments it held.
async fn read_stream(server: &TestServer, request: &Value) -> (Vec<Value>, usize) {
    let response = reqwest::Client::new()
        .post(format!("{}/a2a", server.url))
        .json(request)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let text = response.text().await.unwrap();
    let events = text
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let comments = text.split("\n\n").filter(|e| e.starts_with(':')).count();
    (events, comments)
}

#[tokio::test]
async fn a_streamed_message_is_a_task_at_once_then_its_steps_then_its_answer() {
    let dir = temp_dir();
    // Longer than the stream's keep-alive interval, so the wait shows a comment.
    let server = slow_node(dir.path(), std::time::Duration::from_secs(3)).await;
    let request = json!({"jsonrpc": "2.0", "id": "s-1", "method": "SendStreamingMessage",
        "params": text_message("Fog in London?")});
    let (events, comments) = read_stream(&server, &request).await;
    assert!(
        events
            .iter()
            .all(|e| e["id"] == "s-1" && e["jsonrpc"] == "2.0"),
        "{events:?}"
    );
    let task = &events[0]["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_SUBMITTED",
        "{events:?}"
    );
    assert_eq!(task["history"][0]["parts"][0]["text"], "Fog in London?");
    let task_id = task["id"].clone();
    // Then a status update per step while it works: at least the start and the LLM's call.
    let working: Vec<&Value> = events
        .iter()
        .filter_map(|e| e["result"].get("statusUpdate"))
        .filter(|u| u["status"]["state"] == "TASK_STATE_WORKING")
        .collect();
    assert!(working.len() >= 2, "{events:?}");
    assert!(working.iter().all(|u| u["taskId"] == task_id));
    assert!(
        working
            .iter()
            .any(|u| u["status"]["message"]["parts"][0]["text"]
                .as_str()
                .unwrap()
                .contains("language model")),
        "{working:?}"
    );
    assert!(comments >= 1, "the wait kept the stream alive: {comments}");
    let n = events.len();
    let artifact = &events[n - 2]["result"]["artifactUpdate"];
    assert_eq!(artifact["taskId"], task_id);
    assert!(
        artifact["artifact"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Fog in London?")
    );
    let status = &events[n - 1]["result"]["statusUpdate"];
    assert_eq!(status["taskId"], task_id);
    assert_eq!(status["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let got = rpc(&server, "GetTask", json!({"id": task_id})).await;
    assert_eq!(got["result"]["history"].as_array().unwrap().len(), 2);
    assert_eq!(
        got["result"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
}

#[tokio::test]
async fn return_immediately_gives_a_working_task_whose_answer_get_task_reads_later() {
    let dir = temp_dir();
    let server = slow_node(dir.path(), std::time::Duration::from_millis(1500)).await;
    let mut params = text_message("Snow in Oslo?");
    params["configuration"] = json!({"returnImmediately": true});
    let sent = rpc(&server, "SendMessage", params.clone()).await;
    let task = &sent["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING", "{sent}");
    let task_id = task["id"].clone();

    // While it works: GetTask says so, and a second message to the task is refused.
    let got = rpc(&server, "GetTask", json!({"id": task_id})).await;
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_WORKING",
        "{got}"
    );
    let mut next = text_message("And in Bergen?");
    next["message"]["taskId"] = task_id.clone();
    let refused = rpc(&server, "SendMessage", next).await;
    assert_eq!(error_code(&refused), -32600, "{refused}");

    // Polling, as a client does, until it asks for input.
    let mut state = Value::Null;
    for _ in 0..100 {
        let got = rpc(&server, "GetTask", json!({"id": task_id})).await;
        state = got["result"]["status"]["state"].clone();
        if state != "TASK_STATE_WORKING" && state != "TASK_STATE_SUBMITTED" {
            let answer = got["result"]["artifacts"][0]["parts"][0]["text"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(answer.contains("Snow in Oslo?"), "{answer}");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(state, "TASK_STATE_INPUT_REQUIRED");

    // A stream asked to return at once carries the task alone.
    let request = json!({"jsonrpc": "2.0", "id": "s-2", "method": "SendStreamingMessage",
        "params": params});
    let (events, _) = read_stream(&server, &request).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        events[0]["result"]["task"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
}

#[tokio::test]
async fn bad_input_gets_json_rpc_errors_never_a_panic_or_a_500() {
    let dir = temp_dir();
    let server = node(dir.path()).await;
    let (status, parse) = post_raw(&server, "{not json").await;
    assert_eq!((status, error_code(&parse)), (200, -32700));
    assert_eq!(parse["id"], Value::Null);
    for (body, code) in [
        (
            json!([{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}]),
            -32600,
        ),
        (
            json!({"jsonrpc": "1.0", "id": 1, "method": "GetTask"}),
            -32600,
        ),
        (
            json!({"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "x"}}),
            -32600,
        ),
        (json!({"jsonrpc": "2.0", "id": 1, "method": 5}), -32600),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get"}),
            -32601,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"task": "x"}}),
            -32602,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x", "historyLength": -1}}),
            -32602,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"role": "ROLE_USER"}}}),
            -32602,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}}}),
            -32602,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"protocolHash": "not-a-hash", "body": "x"}}]}}}),
            -32602,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"url": "file:///etc/passwd"}]}}}),
            -32005,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "no-such-task"}}),
            -32001,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": "no-such-task"}}),
            -32001,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig", "params": {}}),
            -32003,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}),
            -32004,
        ),
    ] {
        let (status, response) = post_raw(&server, body.to_string()).await;
        assert_eq!(
            (status, error_code(&response)),
            (200, code),
            "{body} -> {response}"
        );
        let message = response["error"]["message"].as_str().unwrap();
        assert!(!message.contains("127.0.0.1"), "{message}");
    }

    // A message over the front's limit, inside the body limit: a clear sentence.
    let oversized = text_message(&"x".repeat(LIMITS.max_message_bytes + 1));
    let response = rpc(&server, "SendMessage", oversized).await;
    assert_eq!(error_code(&response), -32602);
    let message = response["error"]["message"].as_str().unwrap();
    assert!(message.contains("at most 4096 bytes"), "{message}");
    let parts: Vec<Value> = (0..5)
        .map(|i| json!({"text": format!("part {i}")}))
        .collect();
    let many = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": parts}});
    assert_eq!(error_code(&rpc(&server, "SendMessage", many).await), -32602);

    // A body over the server's limit: 413, with a JSON-RPC error.
    let huge = text_message(&"x".repeat(70 * 1024)).to_string();
    let (status, response) = post_raw(&server, huge).await;
    assert_eq!((status, error_code(&response)), (413, -32600), "{response}");

    // None of it reached the engine.
    assert!(
        agora_testkit::recent_requests(&server.node, 10)
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn a_failing_llm_is_a_failed_task_with_a_sentence() {
    let dir = temp_dir();
    let down = ScriptedLlm::new(|_| {
        Err(agora_llm::LlmError::Unavailable(
            "connection refused by 10.1.2.3:8081".into(),
        ))
    });
    let server = NodeBuilder::new(down, dir.path()).spawn_with(serve).await;
    let sent = rpc(&server, "SendMessage", text_message("Hello?")).await;
    let task = &sent["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{sent}");
    let sentence = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(sentence.contains("retry later"), "{sentence}");
    assert!(!sentence.contains("10.1.2.3"), "{sentence}");
    let requests = agora_testkit::recent_requests(&server.node, 10).await;
    assert_eq!(requests[0].channel, "a2a");
    assert_eq!(requests[0].status, "failure");
}

/// The official A2A Python SDK's client (`a2a-sdk`, installed by `scripts/install.sh`) against
/// the node: it reads the card, sends, continues, gets and cancels a task, and streams.
#[tokio::test]
#[ignore = "needs the A2A Python SDK from scripts/install.sh; run by scripts/test.sh"]
async fn a2a_interop_python_sdk_client() {
    let dir = temp_dir();
    let server = node(dir.path()).await;
    let seen = python_client("a2a_client.py", &server.url).await;

    assert_eq!(seen["card"]["name"], "test-node");
    assert_eq!(
        seen["card"]["capabilities"]["extensions"][0]["uri"],
        EXTENSION_URI
    );
    let sent = &seen["send"][0]["task"];
    assert_eq!(
        sent["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{seen}"
    );
    let task_id = sent["id"].as_str().unwrap();
    let answer = sent["artifacts"][0]["parts"][0]["text"].as_str().unwrap();
    assert!(answer.contains("Will it rain in Oslo?"), "{answer}");
    let continued = &seen["continue"][0]["task"];
    assert_eq!(continued["id"], task_id);
    assert_eq!(continued["history"].as_array().unwrap().len(), 4);
    assert_eq!(seen["get"]["id"], task_id);
    assert_eq!(seen["get"]["history"].as_array().unwrap().len(), 4);
    assert_eq!(seen["cancel"]["status"]["state"], "TASK_STATE_CANCELED");
    assert_eq!(seen["get_after_cancel"], "TaskNotFoundError");
    let stream = seen["stream"].as_array().unwrap();
    let n = stream.len();
    assert!(n >= 4, "{seen}");
    assert_eq!(stream[0]["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
    assert_eq!(
        stream[1]["statusUpdate"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    let streamed = stream[n - 2]["artifactUpdate"]["artifact"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(streamed.contains("Fog in London?"), "{streamed}");
    assert_eq!(
        stream[n - 1]["statusUpdate"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );

    let requests = agora_testkit::recent_requests(&server.node, 10).await;
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r.channel == "a2a"));
}

/// Runs `scripts/python/<script>` (a client of the official A2A Python SDK) against `url`; the
/// JSON object it prints.
async fn python_client(script: &str, url: &str) -> Value {
    let script = format!(
        "{}/../../scripts/python/{script}",
        env!("CARGO_MANIFEST_DIR")
    );
    // Async: the node under test is served by this test's runtime.
    let output = tokio::process::Command::new(agora_testkit::installed_peer("AGORA_A2A_PYTHON"))
        .args([&script, url])
        .output()
        .await;
    let stdout = crate::mcp::succeeded(output, "the Python A2A client");
    serde_json::from_slice(&stdout).unwrap()
}

/// The official A2A Python SDK's client at its default settings (a plain `httpx` client with
/// its 5-second timeout) against answers that take 12 s: a stream gets the task at once and
/// status updates while the LLM works; a polling client (`ClientConfig(polling=True)`) gets the
/// task at once and its answer through `GetTask`.
#[tokio::test]
#[ignore = "needs the A2A Python SDK from scripts/install.sh; run by scripts/test.sh"]
async fn a2a_interop_python_sdk_default_client_gets_a_slow_answer() {
    let dir = temp_dir();
    let server = slow_node(dir.path(), std::time::Duration::from_secs(12)).await;
    let seen = python_client("a2a_slow_client.py", &server.url).await;

    let stream = seen["stream"].as_array().unwrap();
    let n = stream.len();
    assert_eq!(
        stream[0]["task"]["status"]["state"], "TASK_STATE_SUBMITTED",
        "{seen}"
    );
    let updates_before_the_answer = stream[..n - 2]
        .iter()
        .filter(|e| e["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING")
        .count();
    assert!(updates_before_the_answer >= 1, "{seen}");
    let answer = stream[n - 2]["artifactUpdate"]["artifact"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(answer.contains("Rain in Lima?"), "{answer}");
    assert_eq!(
        stream[n - 1]["statusUpdate"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );

    let first = &seen["poll_first"][0]["task"];
    assert_eq!(first["status"]["state"], "TASK_STATE_WORKING", "{seen}");
    let states = seen["poll_states"].as_array().unwrap();
    assert_eq!(states[0], "TASK_STATE_WORKING", "{seen}");
    assert_eq!(
        states[states.len() - 1],
        "TASK_STATE_INPUT_REQUIRED",
        "{seen}"
    );
    let polled = seen["poll_final"]["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(polled.contains("Wind in Quito?"), "{polled}");
}

/// `/a2a` meets the edge of `POST /`: client tokens, the LLM budget (429 with `Retry-After`),
/// and the routine budget for a data part whose protocol a routine serves, with no LLM call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_applies_and_a_routine_answers_a_protocol_part_without_the_llm() {
    let dir = temp_dir();
    let mut edge = agora_server::EdgeSettings::default();
    edge.rate_limit.llm_per_minute = 1;
    edge.rate_limit.llm_burst = 1;
    edge.clients
        .tokens
        .insert("alice".into(), "alice-token".into());
    let llm = llm();
    let server = NodeBuilder::new(llm.clone(), dir.path())
        .routine_engine(std::sync::Arc::new(
            agora_testkit::ScriptedRoutineEngine::new()
                .routine("shout", |body, _| async move { Ok(body.to_uppercase()) }),
        ))
        .spawn_with(move |served: Served| {
            Box::pin(async move {
                let mut state = AppState::new(served.node.clone(), None, 64 * 1024, 64)
                    .with_edge(&edge)
                    .unwrap();
                state.a2a = Some(A2aFront::new(served.node, LIMITS));
                let _ =
                    agora_server::app::serve_state(served.listener, state, served.shutdown).await;
            })
        })
        .await;
    let spec = agora_testkit::human_routine("shout", WEATHER_PD, "shout", &[]);
    server.node.add_routine(spec).await.unwrap();
    let call = |body: Value, token: Option<&'static str>| {
        let url = format!("{}/a2a", server.url);
        async move {
            let mut request = reqwest::Client::new().post(url).json(&json!({
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": body
            }));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let retry = response.headers().get("retry-after").cloned();
            (status, retry, response.json::<Value>().await.unwrap())
        }
    };

    let (status, _, body) = call(text_message("Hi?"), None).await;
    assert_eq!((status, error_code(&body)), (401, -32603), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Bearer")
    );
    let (status, _, body) = call(text_message("Hi?"), Some("alice-token")).await;
    assert_eq!(status, 200, "{body}");
    let (status, retry, body) = call(text_message("Again?"), Some("alice-token")).await;
    assert_eq!((status, error_code(&body)), (429, -32603), "{body}");
    assert!(retry.is_some());

    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    let calls_before = llm.call_count();
    for _ in 0..3 {
        let part = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {
            "protocolHash": hash.to_hex(), "protocolSources": [], "body": "paris",
        }}]}});
        let (status, _, body) = call(part, Some("alice-token")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["result"]["message"]["parts"][0]["text"], "PARIS");
    }
    assert_eq!(llm.call_count(), calls_before);
    server.node.store().requests().flush_requests().await;
    let requests = agora_testkit::recent_requests(&server.node, 10).await;
    let routine_rows = requests
        .iter()
        .filter(|r| r.channel == "a2a" && r.path == agora_store::RequestPath::Routine)
        .count();
    assert_eq!(routine_rows, 3, "{requests:?}");
}
