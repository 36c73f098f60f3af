//! The node as an MCP server at `/mcp`, driven by MCP clients no one here wrote: the official
//! Python SDK's client and the MCP Inspector's CLI (installed by `scripts/install.sh`).
//!
//! Alice serves `/mcp` and runs the weather task against Bob over real HTTP. Her LLM and her
//! routine engine are scripted (as in `sender_routines`), so the ladder is deterministic: the
//! first run finds Bob's protocol and goes under it with the LLM, a sender routine is written
//! and examined, and from then on the MCP client sees rung `routine` and zero LLM calls.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use agora_fetch::FetchPolicy;
use agora_mcp::{AgoraMcp, TargetRules};
use agora_server::AppState;
use agora_server::app::McpEndpoint;
use agora_testkit::{NodeBuilder, Served, TestServer, temp_dir};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::fixtures::{ProtocolDb, js_runtime};
use crate::sender_routines::{alice_llm, bob, engine, task};
use agora_node::{McpServerConfig, ToolConfig, ToolKind};
use agora_protocol::{ProtocolHash, Request};
use agora_server::protocol_db::ProtocolDbServerConfig;
use agora_store::RequestPath;
use agora_testkit::{ScriptedLlm, human_routine, installed_peer, local_llm};

pub(crate) const TOKEN: &str = "mcp-test-token";

/// The front's tools, in the order it lists them.
const FRONT_TOOLS: [&str; 4] = [
    "run_task",
    "send_message",
    "list_protocols",
    "search_protocols",
];

/// The tool names of a `tools/list` result.
fn tool_names(listing: &Value) -> Vec<&str> {
    listing["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

/// Bob, and Alice serving `/mcp` (at `mcp`), each with its own store. Bind every field: a
/// server or store left out of a pattern is dropped, and stopped, at once.
struct Pair {
    bob: TestServer,
    alice: TestServer,
    mcp: String,
    _stores: (tempfile::TempDir, tempfile::TempDir),
}

async fn pair() -> Pair {
    let (a, b) = (temp_dir(), temp_dir());
    let bob = bob(b.path()).await;
    let alice = alice(a.path()).await;
    let mcp = format!("{}/mcp", alice.url.trim_end_matches('/'));
    Pair {
        bob,
        alice,
        mcp,
        _stores: (a, b),
    }
}

/// Serves a node with `/mcp` behind `TOKEN`, sending to loopback targets.
pub(crate) fn serve_with_mcp(served: Served) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    serve_with_mcp_token(TOKEN.to_string())(served)
}

/// Serves a node with `/mcp` behind `token`, sending to loopback targets.
pub(crate) fn serve_with_mcp_token(
    token: String,
) -> impl FnOnce(Served) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    move |served| {
        Box::pin(async move {
            let mut state = AppState::new(served.node.clone(), None, served.max_body_bytes, 64);
            let rules = TargetRules {
                allowed_targets: Vec::new(),
                fetch: FetchPolicy::default().allowing_loopback(),
            };
            state.mcp = Some(McpEndpoint::new(
                agora_mcp::http_service(
                    AgoraMcp::new(served.node, rules).unwrap(),
                    vec!["127.0.0.1".into(), "localhost".into()],
                    CancellationToken::new(),
                ),
                Some(&token),
            ));
            let _ = agora_server::app::serve_state(served.listener, state, served.shutdown).await;
        })
    }
}

async fn alice(dir: &std::path::Path) -> TestServer {
    NodeBuilder::new(alice_llm(&["good"]), dir)
        .routine_engine(Arc::new(engine()))
        .config(|c| {
            c.tasks = vec![task()];
            c.sender.explore_threshold = 1;
            c.sender.negotiate_threshold = 100;
        })
        .spawn_with(serve_with_mcp)
        .await
}

/// Runs the Python SDK's client over streamable HTTP with `calls`; one JSON value per call.
pub(crate) async fn python_client(url: &str, token: &str, calls: &Value) -> Vec<Value> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/python/mcp_client.py"
    );
    // Async: the node under test is served by this test's runtime.
    let output = tokio::process::Command::new(installed_peer("AGORA_MCP_PYTHON"))
        .args([
            script,
            "--http",
            url,
            "--token",
            token,
            "--",
            &calls.to_string(),
        ])
        .output()
        .await;
    String::from_utf8(succeeded(output, "the Python MCP client"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn run_weather(target: &str, location: &str) -> Value {
    json!({"tool": "run_task", "arguments": {
        "task": "weather",
        "target": target,
        "input": {"location": location, "date": "2025-02-03"},
    }})
}

#[tokio::test]
#[ignore = "needs the MCP peers from scripts/install.sh"]
async fn mcp_interop_python_client_runs_a_task_until_a_routine_answers() {
    let Pair {
        bob,
        alice,
        mcp,
        _stores,
    } = pair().await;

    let mut with_progress = run_weather(&bob.url, "Oslo, Norway");
    with_progress["progress"] = json!(true);
    let first = python_client(&mcp, TOKEN, &json!([{"list": true}, with_progress])).await;
    assert_eq!(tool_names(&first[0]), FRONT_TOOLS);
    assert_eq!(
        first[0]["tools"][0]["inputSchema"]["properties"]["task"]["enum"],
        json!(["weather"])
    );
    let run = &first[1];
    assert_eq!(run["isError"], false, "{run}");
    assert_eq!(run["structured"]["output"], json!({"temperature": 3.5}));
    assert_eq!(run["structured"]["rung"], "protocol");
    assert!(run["structured"]["llmCalls"].as_i64().unwrap() > 0, "{run}");
    // The run's steps came as progress notifications before its result, in order.
    let progress = run["progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "{run}");
    assert!(
        progress
            .iter()
            .any(|p| p["message"].as_str().unwrap().contains("language model")),
        "{run}"
    );
    let counts: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");

    // The run was an example; the sender routine is written and examined in the background.
    alice.node.sender_routines_idle().await;
    let ledger_before = agora_testkit::llm_calls(&alice.node).await.len();
    let later = python_client(
        &mcp,
        TOKEN,
        &json!([
            run_weather(&bob.url, "Paris, France"),
            run_weather(&bob.url, "Lima, Peru"),
        ]),
    )
    .await;
    for run in &later {
        assert_eq!(run["isError"], false, "{run}");
        assert_eq!(run["structured"]["rung"], "routine", "{run}");
        assert_eq!(run["structured"]["llmCalls"], 0, "{run}");
        assert_eq!(run["structured"]["costUsd"], 0.0, "{run}");
        assert_eq!(run["structured"]["output"], json!({"temperature": 3.5}));
    }
    let ledger_after = agora_testkit::llm_calls(&alice.node).await.len();
    assert_eq!(
        ledger_before, ledger_after,
        "no LLM call once the routine answers"
    );
    // Every run is in the sender's log, with its rung.
    let runs = agora_testkit::sender_runs(&alice.node, &bob.url, "weather", 10).await;
    let mut rungs: Vec<&str> = runs.iter().map(|r| r.rung.as_str()).collect();
    rungs.sort_unstable();
    assert_eq!(rungs, ["protocol", "routine", "routine"]);
}

#[tokio::test]
#[ignore = "needs the MCP peers from scripts/install.sh"]
async fn mcp_interop_python_client_gets_clear_errors() {
    let Pair {
        bob,
        alice: _alice,
        mcp,
        _stores,
    } = pair().await;
    let results = python_client(
        &mcp,
        TOKEN,
        &json!([
            {"tool": "no_such_tool", "arguments": {}},
            {"tool": "run_task", "arguments": {"task": "weather", "target": bob.url}},
            {"tool": "run_task", "arguments": {
                "task": "weather", "target": bob.url, "input": {"location": 3}}},
            run_weather("http://127.0.0.1:9/", "Oslo, Norway"),
            run_weather("http://169.254.169.254/", "Oslo, Norway"),
            {"tool": "send_message", "arguments": {"target": "file:///etc/passwd", "message": "hi"}},
            {"tool": "list_protocols", "arguments": {"target": bob.url}},
        ]),
    ).await;
    assert_eq!(results[0]["rpcError"]["code"], -32602, "{}", results[0]);
    assert!(
        results[0]["rpcError"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool \"no_such_tool\"")
    );
    let text = |i: usize| results[i]["text"].as_str().unwrap().to_string();
    for result in &results[1..=5] {
        assert_eq!(result["isError"], true, "{result}");
    }
    assert!(
        text(1).contains("\"input\" is a required property"),
        "{}",
        text(1)
    );
    assert!(text(2).contains("input schema"), "{}", text(2));
    assert!(
        text(3).contains("could not reach http://127.0.0.1:9/"),
        "{}",
        text(3)
    );
    assert!(!text(3).contains("os error"), "{}", text(3));
    assert!(text(4).contains("does not send to"), "{}", text(4));
    assert!(text(5).contains("not an http(s) URL"), "{}", text(5));
    // Bob lists the weather protocol.
    let listing = &results[6]["structured"]["protocols"];
    assert_eq!(listing.as_object().unwrap().len(), 1, "{listing}");

    // No token, a wrong token: 401 with a JSON-RPC error, and nothing reaches the node.
    let client = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}});
    for token in [None, Some("wrong")] {
        let mut request = client
            .post(&mcp)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], -32001, "{body}");
    }
}

#[tokio::test]
#[ignore = "needs the MCP peers from scripts/install.sh"]
async fn mcp_interop_python_client_sends_a_message_and_searches_a_protocol_database() {
    let Pair {
        bob,
        alice,
        mcp,
        _stores,
    } = pair().await;
    let db = ProtocolDb::start(ProtocolDbServerConfig {
        write_token: Some("t0ken".into()),
        ..ProtocolDbServerConfig::default()
    })
    .await;
    let weather_pd = include_str!("../../../../protocols/weather-forecast.md");
    let published = reqwest::Client::new()
        .post(format!("{}/protocols", db.url.trim_end_matches('/')))
        .bearer_auth("t0ken")
        .body(weather_pd)
        .send()
        .await
        .unwrap();
    assert!(published.status().is_success(), "{published:?}");

    let results = python_client(
        &mcp,
        TOKEN,
        &json!([
            {"tool": "send_message", "arguments": {
                "target": bob.url, "message": "Weather in Oslo on 2025-02-03?"}},
            {"tool": "search_protocols", "arguments": {"query": "weather", "database": db.url}},
            {"tool": "search_protocols", "arguments": {"query": "weather"}},
        ]),
    )
    .await;
    assert_eq!(results[0]["isError"], false, "{}", results[0]);
    let reply = results[0]["structured"]["reply"].as_str().unwrap();
    assert!(reply.contains("3.5"), "{reply}");

    let hash = ProtocolHash::of(weather_pd.as_bytes()).to_hex();
    let hits = results[1]["structured"]["hits"].as_array().unwrap();
    assert!(
        hits.iter().any(|hit| hit["hash"] == hash.as_str()),
        "{}",
        results[1]
    );
    // Alice has no protocol database configured, and the call says so.
    assert_eq!(results[2]["isError"], true, "{}", results[2]);
    assert!(
        results[2]["text"]
            .as_str()
            .unwrap()
            .contains("sender.protocol_db"),
        "{}",
        results[2]
    );
    // Both inquiries are in Alice's run log.
    let message_runs = agora_testkit::sender_runs(&alice.node, &bob.url, "(message)", 10).await;
    assert_eq!(message_runs.len(), 1);
    assert_eq!(message_runs[0].llm_calls, 0);
}

#[tokio::test]
#[ignore = "needs the MCP peers from scripts/install.sh"]
async fn mcp_interop_inspector_cli_lists_and_calls_the_tools() {
    let Pair {
        bob,
        alice: _alice,
        mcp,
        _stores,
    } = pair().await;
    let inspector = async |extra: &[&str]| -> Value {
        let output = tokio::process::Command::new(installed_peer("AGORA_MCP_NODE"))
            .arg(installed_peer("AGORA_MCP_INSPECTOR"))
            .args(["--cli", &mcp, "--transport", "http"])
            .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
            .args(extra)
            .output()
            .await;
        serde_json::from_slice(&succeeded(output, "the Inspector")).unwrap()
    };
    let listed = inspector(&["--method", "tools/list"]).await;
    assert_eq!(tool_names(&listed), FRONT_TOOLS);
    let called = inspector(&[
        "--method",
        "tools/call",
        "--tool-name",
        "list_protocols",
        "--tool-arg",
        &format!("target={}", bob.url),
    ])
    .await;
    assert_ne!(called["isError"], true, "{called}");
    let protocols = &called["structuredContent"]["protocols"];
    assert_eq!(protocols.as_object().unwrap().len(), 1, "{called}");
}

/// A protocol answered by a routine that calls the reference time server's tool.
const TIME_PD: &str = "---\nname: time-in-zone\ndescription: The current time in a time zone.\n---\n\n\
Request body: a JSON object {\"timezone\": IANA name}. Reply: {\"timezone\": the same name, \
\"datetime\": the current ISO 8601 time there}, or {\"error\": reason}.\n";

const TIME_ROUTINE: &str = r#"
function handle(body) {
  const request = JSON.parse(body);
  if (typeof request.timezone !== "string") {
    return { error: "timezone is required" };
  }
  const now = callTool("get_current_time", { timezone: request.timezone });
  return { timezone: now.timezone, datetime: now.datetime };
}
"#;

fn time_server() -> ToolConfig {
    ToolConfig {
        name: "time".into(),
        description: None,
        parameters: None,
        returns: None,
        kind: ToolKind::Mcp(McpServerConfig {
            command: vec![
                installed_peer("AGORA_MCP_TIME_SERVER"),
                "--local-timezone".into(),
                "UTC".into(),
            ],
            ..McpServerConfig::default()
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the MCP peers from scripts/install.sh"]
async fn mcp_interop_a_routine_answers_through_an_mcp_tool_without_the_llm() {
    let time_server = time_server();
    let (mcp_tools, servers) = agora_mcp::connect(std::slice::from_ref(&time_server))
        .await
        .unwrap();
    let dir = temp_dir();
    let node = NodeBuilder::new(ScriptedLlm::unreachable(), dir.path())
        .config(|c| c.tools = vec![time_server])
        .connected_tools(mcp_tools)
        .routine_engine(Arc::new(js_runtime()))
        .build()
        .await;
    node.add_routine(human_routine(
        "time-in-zone",
        TIME_PD,
        TIME_ROUTINE,
        &["get_current_time"],
    ))
    .await
    .unwrap();

    let hash = ProtocolHash::of(TIME_PD.as_bytes());
    let request = |zone: &str| {
        Request::from_json(&json!({
            "protocolHash": hash.to_hex(),
            "protocolSources": [],
            "body": json!({"timezone": zone}).to_string(),
        }))
        .unwrap()
    };
    for zone in ["Europe/Oslo", "America/Lima"] {
        let reply = node.handle(request(zone)).await.to_json();
        assert_eq!(reply["status"], "success", "{reply}");
        let body: Value = serde_json::from_str(reply["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["timezone"], zone, "{body}");
        assert!(
            body["datetime"].as_str().unwrap().starts_with("20"),
            "{body}"
        );
    }
    node.store().requests().flush_requests().await;
    assert!(agora_testkit::llm_calls(&node).await.is_empty());
    let requests = agora_testkit::recent_requests(&node, 10).await;
    assert_eq!(requests.len(), 2);
    assert!(
        requests
            .iter()
            .all(|r| r.path == RequestPath::Routine && r.llm_calls == 0),
        "{requests:?}"
    );
    servers.shutdown().await;
}

/// The local model answers a natural-language question with the reference time server's
/// `convert_time` tool. The expected time is what the tool itself says for the same question
/// (London's offset depends on the date), read before the node is asked.
#[tokio::test]
#[ignore = "needs the local model and the MCP peers: run by scripts/test.sh"]
async fn real_model_answers_a_question_through_an_mcp_tool() {
    let time_server = time_server();
    let (mcp_tools, servers) = agora_mcp::connect(std::slice::from_ref(&time_server))
        .await
        .unwrap();
    let convert = mcp_tools
        .iter()
        .find(|t| t.spec().name == "convert_time")
        .unwrap()
        .clone();
    let expected = convert
        .call(json!({
            "source_timezone": "Europe/London", "time": "14:30", "target_timezone": "Asia/Tokyo"}))
        .await
        .unwrap();
    let datetime = expected["target"]["datetime"].as_str().unwrap().to_string();
    let hh_mm = &datetime[11..16];

    let dir = temp_dir();
    let node = NodeBuilder::new(local_llm(), dir.path())
        .config(|c| {
            c.description = "A time-zone assistant. Answer with the tools' data.".into();
            c.tools = vec![time_server];
        })
        .connected_tools(mcp_tools)
        .build()
        .await;
    let request = Request::from_json(&json!({
        "protocolHash": null,
        "protocolSources": [],
        "body": "When it is 14:30 in the Europe/London time zone, what time is it in the Asia/Tokyo time zone?",
    }))
    .unwrap();
    let reply = node.handle(request).await.to_json();
    servers.shutdown().await;
    assert_eq!(reply["status"], "success", "{reply}");
    let answer = reply["body"].as_str().unwrap();
    assert!(
        answer.contains(hh_mm),
        "the answer should give {hh_mm} (the tool's {datetime}): {answer}"
    );
}

/// The standard output of a peer process that ran and exited with success (else a panic with its
/// standard error).
pub(crate) fn succeeded(output: std::io::Result<std::process::Output>, peer: &str) -> Vec<u8> {
    let output = output.unwrap_or_else(|e| panic!("{peer} did not start: {e}"));
    assert!(
        output.status.success(),
        "{peer} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}
