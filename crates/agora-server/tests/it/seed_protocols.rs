//! The seed message protocols as PDs (`protocols/agent-dsl-weather.md`,
//! `agent-envelope-weather.md`, `osnap-weather.md`) between two nodes over HTTP on 127.0.0.1: Bob
//! serves each with its shipped JavaScript routine (`routines/<name>/`), Alice sends messages she
//! composed (`Node::send_protocol_message`). Neither node may call its LLM (both are scripted to
//! panic if they do, and both ledgers are checked empty). Answers are checked against the weather
//! tool's data and the node's own facts (`node_info`), errors against each protocol's own shape,
//! and the envelope's `idempotency_key` against the forecast tool's call count.
//!
//! Like `wasm_routines`, these need the JavaScript engine (`AGORA_JS_ENGINE`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::fixtures::{expected_forecast, js_runtime};
use crate::support::Spawn;
use crate::wasm_routines::same;
use agora_node::tools::WeatherForecastTool;
use agora_node::{Node, Tool, ToolConfig, ToolError, ToolSpec};
use agora_protocol::{ProtocolHash, VerifiedDocument};
use agora_server::manifest::RoutineFolder;
use agora_store::RequestPath;
use agora_testkit::{NodeBuilder, ScriptedLlm, TestServer, temp_dir, weather_tool};
use serde_json::{Value, json};

/// The seed protocols' routine folders (each names its PD).
pub(crate) const SEEDS: [&str; 3] = [
    "agent-dsl-weather",
    "agent-envelope-weather",
    "osnap-weather",
];

const BOB_DESCRIPTION: &str = "Bob is a weather service. It gives weather forecasts \
                               (temperature, precipitation, sky condition) for a location and a date.";

/// The `node_info` built-in as a node configures it.
pub(crate) fn node_info_tool() -> ToolConfig {
    ToolConfig::builtin("node_info", "node_info", 0)
}

/// A routine folder of the repository, read as `agora routine add` reads it.
pub(crate) fn folder(name: &str) -> RoutineFolder {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../routines")
        .join(name);
    RoutineFolder::read(&dir).unwrap()
}

/// The folder's protocol document.
pub(crate) fn document(name: &str) -> VerifiedDocument {
    VerifiedDocument::from_text(&std::fs::read_to_string(folder(name).protocol_path()).unwrap())
}

/// Adds the routine folder `name` to `node` as a human-written routine, as `agora routine add`
/// does.
pub(crate) async fn add_folder(node: &Node, name: &str) -> ProtocolHash {
    let folder = folder(name);
    let spec = folder.spec(folder.source().unwrap()).unwrap();
    node.add_routine(spec).await.unwrap();
    ProtocolHash::of(folder.protocol_text().unwrap().as_bytes())
}

/// Bob: the weather tool (or `weather`, when given), `node_info`, the seed routines, no LLM.
async fn bob(dir: &std::path::Path, weather: Option<Arc<dyn Tool>>) -> TestServer {
    let builder = NodeBuilder::new(ScriptedLlm::unreachable(), dir)
        .routine_engine(Arc::new(js_runtime()))
        .config(|c| c.name = "bob".into())
        .config(|c| c.description = BOB_DESCRIPTION.into());
    let builder = match weather {
        Some(tool) => builder
            .config(|c| c.tools = vec![node_info_tool()])
            .connected_tools(vec![tool]),
        None => builder.config(|c| c.tools = vec![weather_tool(), node_info_tool()]),
    };
    let bob = builder.spawn().await;
    for seed in SEEDS {
        add_folder(&bob.node, seed).await;
    }
    bob
}

/// Alice sends; she has no LLM either.
async fn alice(dir: &std::path::Path) -> Node {
    NodeBuilder::new(ScriptedLlm::unreachable(), dir)
        .config(|c| c.name = "alice".into())
        .build()
        .await
}

/// Alice sends `message` under the seed protocol `seed` to Bob; the reply body as JSON.
async fn exchange(alice: &Node, bob: &TestServer, seed: &str, message: &Value) -> Value {
    let reply = alice
        .send_protocol_message(&bob.url, &document(seed), &[], &message.to_string())
        .await
        .unwrap_or_else(|e| panic!("{seed}: {e}"));
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{seed}: {e}: {}", reply.body))
}

/// Both nodes made no LLM call; Bob answered `answered` requests, every one with a routine.
async fn assert_no_llm(alice: &Node, bob: &TestServer, answered: usize) {
    assert!(agora_testkit::llm_calls(alice).await.is_empty());
    assert!(agora_testkit::llm_calls(&bob.node).await.is_empty());
    let requests = agora_testkit::recent_requests(&bob.node, 100).await;
    assert_eq!(requests.len(), answered);
    assert!(
        requests
            .iter()
            .all(|r| r.path == RequestPath::Routine && r.llm_calls == 0),
        "{requests:?}"
    );
}

fn is_uuid(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|id| id.len() == 36 && uuid::Uuid::parse_str(id).is_ok())
}

/// Now, to the second, as senders write it.
fn now() -> String {
    let now = jiff::Timestamp::now().as_second();
    jiff::Timestamp::from_second(now).unwrap().to_string()
}

/// A timestamp within a minute of now.
fn is_now(value: &Value) -> bool {
    let Some(time) = value
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    else {
        return false;
    };
    (jiff::Timestamp::now().as_second() - time.as_second()).abs() < 60
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_protocols_are_answered_by_their_routines_with_no_llm_on_either_side() {
    let (bob_dir, alice_dir) = (temp_dir(), temp_dir());
    let bob = bob(bob_dir.path(), None).await;
    let alice = alice(alice_dir.path()).await;
    let places = [("London, UK", "2024-09-27"), ("Oslo, Norway", "2025-01-15")];

    // The FIPA-style DSL: a QUERY gets a RESPONSE linked to it, the forecast in its body.
    let mut ids = Vec::new();
    for (n, (location, date)) in places.iter().enumerate() {
        let query = json!({
            "header": {"version": "1.0", "sender": "alice", "receiver": "bob", "type": "QUERY",
                "id": format!("msg-{n}"), "timestamp": "2024-09-26T10:00:00Z",
                "content_type": "application/json", "conversation_id": "conv-7"},
            "body": json!({"location": location, "date": date}).to_string(),
        });
        let reply = exchange(&alice, &bob, "agent-dsl-weather", &query).await;
        let header = &reply["header"];
        assert_eq!(header["type"], "RESPONSE", "{reply}");
        assert_eq!(
            (&header["sender"], &header["receiver"]),
            (&json!("bob"), &json!("alice"))
        );
        assert_eq!(header["reply_to"], format!("msg-{n}"));
        assert_eq!(header["conversation_id"], "conv-7");
        assert_eq!(
            (&header["version"], &header["content_type"]),
            (&json!("1.0"), &json!("application/json"))
        );
        assert!(
            is_uuid(&header["id"]) && is_now(&header["timestamp"]),
            "{header}"
        );
        ids.push(header["id"].clone());
        let body: Value = serde_json::from_str(reply["body"].as_str().unwrap()).unwrap();
        let expected = expected_forecast(location, date);
        assert!(same(&body, &expected), "{body} != {expected}");
    }
    assert_ne!(ids[0], ids[1], "every reply has its own id");

    // The guide's envelope: a query (and a request) gets an inform with the forecast.
    for (performative, (location, date)) in ["query", "request"].iter().zip(places) {
        let message_id = uuid::Uuid::new_v4().to_string();
        let query = json!({
            "message_id": message_id, "conversation_id": "conv-8", "sender": "alice@agora",
            "receiver": "bob", "timestamp": now(),
            "performative": performative, "schema_version": "1.0.0", "ttl": 60,
            "content": {"task": "weather_forecast", "location": location, "date": date},
        });
        let reply = exchange(&alice, &bob, "agent-envelope-weather", &query).await;
        assert_eq!(reply["performative"], "inform", "{reply}");
        assert_eq!(reply["in_reply_to"], message_id.as_str());
        assert_eq!(
            (
                &reply["sender"],
                &reply["receiver"],
                &reply["conversation_id"]
            ),
            (&json!("bob"), &json!("alice@agora"), &json!("conv-8"))
        );
        assert_eq!(reply["schema_version"], "1.0.0");
        assert!(
            is_uuid(&reply["message_id"]) && is_now(&reply["timestamp"]),
            "{reply}"
        );
        assert_ne!(reply["message_id"], message_id.as_str());
        let mut expected = expected_forecast(location, date);
        expected["status"] = json!("ok");
        assert!(same(&reply["content"], &expected), "{reply}");
    }

    // OSNAP: the capabilities name Bob's own description, URL and protocols; a task_request gets
    // a completed status_update and a get_weather request a response, with the forecast.
    let query = json!({"sender_agent_id": "alice", "receiver_agent_id": "bob",
        "message_type": "capabilities_query", "metadata": {"priority": "low"}});
    let reply = exchange(&alice, &bob, "osnap-weather", &query).await;
    assert_eq!(reply["message_type"], "capabilities_response", "{reply}");
    assert_eq!(
        (&reply["sender_agent_id"], &reply["receiver_agent_id"]),
        (&json!("bob"), &json!("alice"))
    );
    let payload = &reply["payload"];
    assert_eq!(payload["agent_description"], BOB_DESCRIPTION);
    assert_eq!(payload["agent_url"], bob.url.as_str());
    assert_eq!(
        payload["information_capabilities"][0]["name"],
        "get_weather"
    );
    assert_eq!(payload["task_capabilities"][0]["name"], "weather_forecast");
    let mut listed: Vec<&str> = payload["protocols"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["hash"].as_str().unwrap())
        .collect();
    listed.sort();
    let mut served: Vec<String> = SEEDS.iter().map(|s| document(s).hash().to_hex()).collect();
    served.sort();
    assert_eq!(listed, served, "{payload}");
    assert!(
        payload["protocols"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "OsnapWeather")
    );
    assert!(is_now(&reply["metadata"]["timestamp"]), "{reply}");

    let (location, date) = places[0];
    let task = json!({"sender_agent_id": "alice", "receiver_agent_id": "bob",
        "message_type": "task_request",
        "payload": {"task_id": "task-1", "task_name": "weather_forecast",
            "task_data": {"location": location, "date": date}}});
    let reply = exchange(&alice, &bob, "osnap-weather", &task).await;
    assert_eq!(reply["message_type"], "status_update", "{reply}");
    assert_eq!(reply["payload"]["task_id"], "task-1");
    assert_eq!(reply["payload"]["task_status"], "completed");
    let expected = expected_forecast(location, date);
    assert!(same(&reply["payload"]["task_result"], &expected), "{reply}");

    let (location, date) = places[1];
    let request = json!({"sender_agent_id": "alice", "receiver_agent_id": "bob",
        "message_type": "request",
        "payload": {"request_id": "r-1", "request_action": "get_weather",
            "request_data": {"location": location, "date": date}}});
    let reply = exchange(&alice, &bob, "osnap-weather", &request).await;
    assert_eq!(reply["message_type"], "response", "{reply}");
    assert_eq!(
        (&reply["payload"]["request_id"], &reply["payload"]["status"]),
        (&json!("r-1"), &json!("success"))
    );
    let expected = expected_forecast(location, date);
    assert!(
        same(&reply["payload"]["response_data"], &expected),
        "{reply}"
    );

    assert_no_llm(&alice, &bob, 7).await;
    let runs = agora_testkit::sender_runs(&alice, &bob.url, "(message)", 10).await;
    assert_eq!(runs.len(), 7);
    assert!(
        runs.iter()
            .all(|r| r.rung == "protocol" && r.llm_calls == 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_protocols_answer_bad_messages_in_their_own_error_shapes() {
    let (bob_dir, alice_dir) = (temp_dir(), temp_dir());
    let bob = bob(bob_dir.path(), None).await;
    let alice = alice(alice_dir.path()).await;

    // DSL: an ERROR message whose body is {"error": code, "message"}, linked to the message.
    let header = json!({"version": "1.0", "sender": "alice", "receiver": "bob", "type": "REQUEST",
        "id": "m-1", "timestamp": "2024-09-26T10:00:00Z", "content_type": "application/json"});
    let body = json!({"location": "London, UK", "date": "2024-09-27"}).to_string();
    let reply = exchange(
        &alice,
        &bob,
        "agent-dsl-weather",
        &json!({"header": header.clone(), "body": body}),
    )
    .await;
    assert_eq!(
        (&reply["header"]["type"], &reply["header"]["reply_to"]),
        (&json!("ERROR"), &json!("m-1")),
        "{reply}"
    );
    let error: Value = serde_json::from_str(reply["body"].as_str().unwrap()).unwrap();
    assert_eq!(error["error"], "unsupported_type");
    assert!(error["message"].is_string());
    let mut query = json!({"header": header, "body": "{\"location\": \"London, UK\"}"});
    query["header"]["type"] = json!("QUERY");
    let reply = exchange(&alice, &bob, "agent-dsl-weather", &query).await;
    let error: Value = serde_json::from_str(reply["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        (&reply["header"]["type"], &error["error"]),
        (&json!("ERROR"), &json!("invalid_body"))
    );

    // The envelope: performative error, content {code, message} from the guide's taxonomy.
    let message_id = uuid::Uuid::new_v4().to_string();
    let inform = json!({"message_id": message_id, "conversation_id": "c", "sender": "alice",
        "receiver": "bob", "timestamp": "2024-09-26T12:00:00Z", "performative": "inform",
        "schema_version": "1.0.0", "content": {"task": "weather_forecast"}});
    let reply = exchange(&alice, &bob, "agent-envelope-weather", &inform).await;
    assert_eq!(reply["performative"], "error", "{reply}");
    assert_eq!(reply["in_reply_to"], message_id.as_str());
    assert_eq!(
        reply["content"]["code"],
        "error.semantic.invalid_transition"
    );
    let mut stale = inform.clone();
    stale["performative"] = json!("query");
    stale["ttl"] = json!(30);
    let reply = exchange(&alice, &bob, "agent-envelope-weather", &stale).await;
    assert_eq!(reply["content"]["code"], "error.timeout", "{reply}");
    let reply = exchange(&alice, &bob, "agent-envelope-weather", &json!({"hello": 1})).await;
    assert_eq!(
        (
            &reply["performative"],
            &reply["content"]["code"],
            &reply["in_reply_to"]
        ),
        (
            &json!("error"),
            &json!("error.semantic.invalid_message"),
            &Value::Null
        )
    );

    // OSNAP: error_handling with the incoming ids, an error_code and a description.
    let task = json!({"sender_agent_id": "alice", "receiver_agent_id": "bob",
        "message_type": "task_request",
        "payload": {"task_id": "t-9", "task_name": "weather_forecast",
            "task_data": {"location": "London, UK"}}});
    let reply = exchange(&alice, &bob, "osnap-weather", &task).await;
    assert_eq!(reply["message_type"], "error_handling", "{reply}");
    assert_eq!(
        (
            &reply["payload"]["task_id"],
            &reply["payload"]["error_code"]
        ),
        (&json!("t-9"), &json!("1004"))
    );
    assert!(reply["payload"]["error_description"].is_string());
    assert_eq!(reply["receiver_agent_id"], "alice");
    let mut unknown = task.clone();
    unknown["message_type"] = json!("task_execution");
    let reply = exchange(&alice, &bob, "osnap-weather", &unknown).await;
    assert_eq!(reply["payload"]["error_code"], "1002", "{reply}");

    assert_no_llm(&alice, &bob, 7).await;
}

/// The weather tool, counting its calls.
struct CountingWeather {
    inner: WeatherForecastTool,
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl Tool for CountingWeather {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.call(arguments).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_envelopes_idempotency_key_gets_the_first_reply_and_one_tool_call() {
    let weather = Arc::new(CountingWeather {
        inner: WeatherForecastTool::new(7),
        calls: AtomicUsize::new(0),
    });
    let (bob_dir, alice_dir) = (temp_dir(), temp_dir());
    let bob = bob(bob_dir.path(), Some(weather.clone() as Arc<dyn Tool>)).await;
    let alice = alice(alice_dir.path()).await;
    let message = |key: Option<&str>, date: &str| {
        let mut message = json!({"message_id": uuid::Uuid::new_v4().to_string(),
            "conversation_id": "c-1", "sender": "alice", "receiver": "bob",
            "timestamp": now(), "performative": "request",
            "schema_version": "1.0.0",
            "content": {"task": "weather_forecast", "location": "Paris, France", "date": date}});
        if let Some(key) = key {
            message["idempotency_key"] = json!(key);
        }
        message
    };
    let send = |message: Value| {
        let (alice, bob) = (&alice, &bob);
        async move { exchange(alice, bob, "agent-envelope-weather", &message).await }
    };

    let first = send(message(Some("forecast-paris-1"), "2024-10-02")).await;
    assert_eq!(first["performative"], "inform", "{first}");
    assert_eq!(weather.calls.load(Ordering::SeqCst), 1);
    // A retry is a new message (its own id and time) with the same key: the first reply, whole.
    let retry = send(message(Some("forecast-paris-1"), "2024-10-02")).await;
    assert_eq!(retry, first);
    // The key alone identifies the message, as the protocol says.
    let changed = send(message(Some("forecast-paris-1"), "2024-10-03")).await;
    assert_eq!(changed, first);
    assert_eq!(
        weather.calls.load(Ordering::SeqCst),
        1,
        "no second tool call"
    );

    // Another key, or none, is answered afresh.
    let other = send(message(Some("forecast-paris-2"), "2024-10-03")).await;
    assert_ne!(other["message_id"], first["message_id"]);
    let expected = expected_forecast("Paris, France", "2024-10-03");
    assert!(same(
        &other["content"]["temperature"],
        &expected["temperature"]
    ));
    let _ = send(message(None, "2024-10-02")).await;
    let again = send(message(None, "2024-10-02")).await;
    assert_eq!(again["performative"], "inform");
    assert_eq!(weather.calls.load(Ordering::SeqCst), 4);

    assert_no_llm(&alice, &bob, 4).await;
}
