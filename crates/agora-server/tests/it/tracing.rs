//! One trace across three agents, exported to a real OTLP receiver no one here wrote: Arize
//! Phoenix (`AGORA_PHOENIX`, installed by `scripts/install.sh`), started by the test and asked
//! for the spans it stored over its REST API.
//!
//! Alice sends a `relay` request to Bob; Bob's JavaScript routine asks Carol's weather protocol
//! through an HTTP tool; Carol has no routine, so her (scripted) LLM answers with the weather
//! tool. The spans must form one trace whose parents follow that story.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agora_node::{ToolConfig, ToolKind};
use agora_telemetry::Exporter;
use agora_telemetry::conventions as conv;
use agora_testkit::{NodeBuilder, ScriptedLlm, TestServer, temp_dir, weather_tool};
use serde_json::{Value, json};
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;

use crate::fixtures::js_runtime;
use crate::support::Spawn as _;

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");

const RELAY_PD: &str = "# Weather summary\n\n\
    The request is a JSON object `{\"city\": string, \"day\": \"YYYY-MM-DD\"}`. The reply is \
    `{\"summary\": string}`: the city, a colon and the day's weather condition.\n";

/// A Phoenix server on free loopback ports, stopped when dropped.
pub(crate) struct Phoenix {
    child: tokio::process::Child,
    pub(crate) http: String,
    pub(crate) grpc: String,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

impl Phoenix {
    pub(crate) async fn start() -> Phoenix {
        let binary = agora_testkit::installed_peer("AGORA_PHOENIX");
        let dir = temp_dir();
        let (http_port, grpc_port) = (free_port(), free_port());
        let log = std::fs::File::create(dir.path().join("phoenix.log")).unwrap();
        let child = tokio::process::Command::new(binary)
            .arg("serve")
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", http_port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc_port.to_string())
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .env("DO_NOT_TRACK", "1")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let phoenix = Phoenix {
            child,
            http: format!("http://127.0.0.1:{http_port}"),
            grpc: format!("http://127.0.0.1:{grpc_port}"),
            _dir: dir,
        };
        let client = reqwest::Client::new();
        for _ in 0..240 {
            let up = client
                .get(format!("{}/v1/projects", phoenix.http))
                .send()
                .await;
            if up.is_ok_and(|r| r.status().is_success()) {
                return phoenix;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let log = std::fs::read_to_string(phoenix._dir.path().join("phoenix.log"));
        panic!("Phoenix did not start within 120 s: {log:?}");
    }

    /// How many spans of `trace_id` Phoenix holds now.
    async fn count(&self, trace_id: &str) -> usize {
        let url = format!(
            "{}/v1/projects/default/spans/otlpv1?trace_id={trace_id}&limit=1000",
            self.http
        );
        let body: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
        body["data"].as_array().map_or(0, Vec::len)
    }

    /// The spans of `trace_id` Phoenix stored, once `expected` of them arrived.
    pub(crate) async fn spans(&self, trace_id: &str, expected: usize) -> Vec<Span> {
        let client = reqwest::Client::new();
        let url = format!(
            "{}/v1/projects/default/spans/otlpv1?trace_id={trace_id}&limit=1000",
            self.http
        );
        let mut spans = Vec::new();
        for _ in 0..120 {
            let response = client.get(&url).send().await.unwrap();
            if response.status().is_success() {
                let body: Value = response.json().await.unwrap();
                spans = body["data"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(Span::of)
                    .collect();
                if spans.len() >= expected {
                    return spans;
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!(
            "Phoenix holds {} spans of the trace, not {expected}: {spans:#?}",
            spans.len()
        );
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// A span as Phoenix returns it in OTLP form.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub(crate) name: String,
    pub(crate) trace_id: String,
    pub(crate) span_id: String,
    pub(crate) parent: Option<String>,
    pub(crate) attributes: HashMap<String, Value>,
}

impl Span {
    fn of(value: &Value) -> Span {
        let attributes = value["attributes"]
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|kv| {
                        let value = &kv["value"];
                        // Phoenix writes every kind of value, the unused ones as null.
                        let field = |name: &str| value.get(name).filter(|v| !v.is_null());
                        let plain = field("string_value")
                            .cloned()
                            .or_else(|| {
                                // OTLP JSON writes 64-bit integers as strings.
                                field("int_value").map(|i| match i {
                                    Value::String(s) => json!(s.parse::<i64>().unwrap()),
                                    other => other.clone(),
                                })
                            })
                            .or_else(|| field("double_value").cloned())
                            .or_else(|| field("bool_value").cloned())
                            .unwrap_or_else(|| value.clone());
                        (kv["key"].as_str().unwrap().to_string(), plain)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let parent = value["parent_span_id"]
            .as_str()
            .filter(|p| !p.is_empty())
            .map(str::to_string);
        Span {
            name: value["name"].as_str().unwrap().to_string(),
            trace_id: value["trace_id"].as_str().unwrap().to_string(),
            span_id: value["span_id"].as_str().unwrap().to_string(),
            parent,
            attributes,
        }
    }

    pub(crate) fn int(&self, key: &str) -> i64 {
        self.attributes
            .get(key)
            .and_then(Value::as_i64)
            .unwrap_or_else(|| panic!("{} has no integer {key}: {:?}", self.name, self.attributes))
    }

    pub(crate) fn text(&self, key: &str) -> &str {
        self.attributes
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// The spans' names from `span` up to the root.
fn ancestry(spans: &[Span], span: &Span) -> Vec<String> {
    ancestry_up_to(spans, span, None)
}

/// The spans' names from `span` up to the one whose parent is `caller` (a span of the caller's,
/// not exported here), or to the root.
fn ancestry_up_to(spans: &[Span], span: &Span, caller: Option<&str>) -> Vec<String> {
    let by_id: HashMap<&str, &Span> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let mut names = vec![span.name.clone()];
    let mut next = span.parent.as_deref().filter(|id| Some(*id) != caller);
    while let Some(id) = next {
        let parent = by_id
            .get(id)
            .unwrap_or_else(|| panic!("{}'s parent {id} is not in the trace", span.name));
        names.push(parent.name.clone());
        next = parent.parent.as_deref().filter(|id| Some(*id) != caller);
    }
    names
}

/// An exporter to `phoenix` as `service`, and this thread's subscriber reporting to it (the
/// tests' runtimes are one thread: every node's task reports to it).
fn traced_to(phoenix: &Phoenix, service: &str) -> (Exporter, tracing::subscriber::DefaultGuard) {
    let exporter = exporter_to(phoenix, service);
    let guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(exporter.layer()));
    (exporter, guard)
}

fn exporter_to(phoenix: &Phoenix, service: &str) -> Exporter {
    let plan = agora_telemetry::TelemetrySettings {
        endpoint: Some(phoenix.http.clone()),
        ..Default::default()
    }
    .plan(service, |_| None)
    .unwrap()
    .unwrap();
    Exporter::start(&plan).unwrap()
}

async fn carol(dir: &std::path::Path) -> TestServer {
    NodeBuilder::new(crate::compiled_routines::agent(), dir)
        .config(|c| {
            c.name = "carol".into();
            c.tools = vec![weather_tool()];
        })
        .spawn()
        .await
}

async fn bob(dir: &std::path::Path, carol: &TestServer, weather: &str) -> TestServer {
    let bob = NodeBuilder::new(ScriptedLlm::unreachable(), dir)
        .routine_engine(Arc::new(js_runtime()))
        .config(|c| {
            c.name = "bob".into();
            c.tools = vec![ToolConfig {
                name: "ask_carol".into(),
                description: Some("Sends an Agora request to Carol".into()),
                parameters: Some(json!({"type": "object"})),
                returns: None,
                kind: ToolKind::Http {
                    url: format!("{}/", carol.url),
                    timeout_secs: Some(30),
                    max_reply_bytes: None,
                    read_only: true,
                },
            }];
        })
        .spawn()
        .await;
    let source = format!(
        r#"function handle(body) {{
  const request = JSON.parse(body);
  const reply = callTool("ask_carol", {{
    protocolHash: "{weather}",
    protocolSources: [],
    body: JSON.stringify({{ location: request.city, date: request.day }}),
  }});
  const forecast = JSON.parse(reply.body);
  return {{ summary: request.city + ": " + forecast.weatherCondition }};
}}"#
    );
    let spec = agora_testkit::human_routine("relay", RELAY_PD, &source, &["ask_carol"]);
    bob.node.add_routine(spec).await.unwrap();
    bob
}

#[tokio::test]
async fn a_chain_of_three_agents_is_one_trace_in_a_real_receiver() {
    let phoenix = Phoenix::start().await;
    let (exporter, _subscriber) = traced_to(&phoenix, "agora-chain-test");

    let (alice_dir, bob_dir, carol_dir) = (temp_dir(), temp_dir(), temp_dir());
    let carol = carol(carol_dir.path()).await;
    let weather = carol.node.add_document(WEATHER_PD, &[]).await.unwrap();
    let bob = bob(bob_dir.path(), &carol, &weather.hash().to_hex()).await;
    let relay = bob.node.add_document(RELAY_PD, &[]).await.unwrap();
    let alice = NodeBuilder::new(ScriptedLlm::unreachable(), alice_dir.path())
        .config(|c| c.name = "alice".into())
        .build()
        .await;

    let user =
        tracing::info_span!(target: "agora::test", "agora.test.user", otel.name = "user asks");
    let (reply, trace_id) = async {
        let body = json!({"city": "Oslo, Norway", "day": "2025-02-03"}).to_string();
        let reply = alice
            .send_protocol_message(&bob.url, &relay, &[], &body)
            .await
            .unwrap();
        (reply, agora_telemetry::current_trace_id().unwrap())
    }
    .instrument(user)
    .await;
    let reply: Value = serde_json::from_str(&reply.body).unwrap();
    assert!(
        reply["summary"]
            .as_str()
            .unwrap()
            .starts_with("Oslo, Norway: "),
        "{reply}"
    );
    exporter.flush();

    let ledger = agora_testkit::llm_calls(&carol.node).await;
    // The user's span; Alice's agent and HTTP client spans; Bob's server, agent, routine, tool
    // and HTTP client spans; Carol's server and agent spans, her weather tool and LLM calls.
    let expected = 11 + ledger.len();
    let spans = phoenix.spans(&trace_id, expected).await;
    assert!(spans.iter().all(|s| s.trace_id == trace_id));
    let roots: Vec<&Span> = spans.iter().filter(|s| s.parent.is_none()).collect();
    assert_eq!(roots.len(), 1, "one root: {roots:#?}");
    assert_eq!(roots[0].name, "user asks");

    let named = |name: &str| find(&spans, name);
    let carol_agent = named("invoke_agent carol");
    assert_eq!(
        ancestry(&spans, carol_agent),
        [
            "invoke_agent carol",
            "POST",
            "POST",
            "execute_tool ask_carol",
            "run_routine relay",
            "invoke_agent bob",
            "POST",
            "POST",
            "invoke_agent",
            "user asks",
        ],
        "Carol's answer descends from Bob's routine, which descends from Alice's request"
    );
    assert_eq!(
        carol_agent.text(conv::PROTOCOL_HASH),
        weather.hash().to_hex()
    );
    assert_eq!(carol_agent.text(conv::PATH), "llm");
    let bob_agent = named("invoke_agent bob");
    assert_eq!(bob_agent.text(conv::PROTOCOL_HASH), relay.hash().to_hex());
    assert_eq!(bob_agent.text(conv::PATH), "routine");
    assert_eq!(bob_agent.text(conv::AGENT_NAME), "bob");

    let tool = named("execute_tool weather_forecast");
    assert_eq!(tool.text(conv::OPERATION_NAME), conv::EXECUTE_TOOL);
    assert!(ancestry(&spans, tool).contains(&"invoke_agent carol".to_string()));

    let mut chats: Vec<&Span> = spans
        .iter()
        .filter(|s| s.text(conv::OPERATION_NAME) == conv::CHAT)
        .collect();
    assert_eq!(
        chats.len(),
        ledger.len(),
        "one chat span per LLM call in the ledger"
    );
    let mut recorded: Vec<(i64, i64)> = ledger
        .iter()
        .map(|c| (c.prompt_tokens, c.completion_tokens))
        .collect();
    let mut exported: Vec<(i64, i64)> = chats
        .iter()
        .map(|s| {
            (
                s.int(conv::USAGE_INPUT_TOKENS),
                s.int(conv::USAGE_OUTPUT_TOKENS),
            )
        })
        .collect();
    recorded.sort();
    exported.sort();
    assert_eq!(
        exported, recorded,
        "the chat spans' token counts are the ledger's"
    );
    chats.sort_by_key(|s| s.name.clone());
    for chat in chats {
        assert!(chat.name.starts_with("chat "), "{}", chat.name);
        assert!(!chat.text(conv::LLM_CATEGORY).is_empty(), "{chat:?}");
        assert!(ancestry(&spans, chat).contains(&"invoke_agent carol".to_string()));
        assert!(
            !chat.attributes.contains_key(conv::INPUT_MESSAGES),
            "content is not captured by default"
        );
    }
    exporter.shutdown();
}

/// Over gRPC the same spans arrive; a malformed `traceparent` starts a new trace and fails
/// nothing; with the receiver stopped, requests are answered as before and the lost spans are
/// counted as dropped.
#[tokio::test]
async fn grpc_export_and_a_stopped_receiver_cost_nothing_but_counted_spans() {
    let phoenix = Phoenix::start().await;
    let plan = agora_telemetry::TelemetrySettings {
        endpoint: Some(phoenix.grpc.clone()),
        protocol: "grpc".into(),
        export_timeout_secs: 2,
        ..Default::default()
    }
    .plan("agora-grpc-test", |_| None)
    .unwrap()
    .unwrap();
    let exporter = Exporter::start(&plan).unwrap();
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(exporter.layer()));
    let dir = temp_dir();
    let carol = carol(dir.path()).await;
    let weather = carol.node.add_document(WEATHER_PD, &[]).await.unwrap();
    let request = json!({
        "protocolHash": weather.hash().to_hex(),
        "protocolSources": [],
        "body": json!({"location": "Lima, Peru", "date": "2024-12-24"}).to_string(),
    });
    // Each request, whatever its trace header, is answered with success.
    let ask = |traceparent: &'static str| {
        let url = format!("{}/", carol.url);
        let request = request.clone();
        async move {
            let response = reqwest::Client::new()
                .post(url)
                .header("traceparent", traceparent)
                .json(&request)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let reply = response.json::<Value>().await.unwrap();
            assert_eq!(
                (status, reply["status"].as_str()),
                (200, Some("success")),
                "{reply}"
            );
        }
    };

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    ask("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").await;
    ask("not a trace context").await;
    exporter.flush();
    let spans = phoenix.spans(trace_id, 2).await;
    let server = spans.iter().find(|s| s.name == "POST").unwrap();
    assert_eq!(
        server.parent.as_deref(),
        Some("00f067aa0ba902b7"),
        "the caller's span is the parent"
    );
    assert!(spans.iter().any(|s| s.name == "invoke_agent carol"));
    let delivered = exporter.counts();
    assert!(
        delivered.exported >= 2 * spans.len() as u64 - 1,
        "{delivered:?}"
    );
    assert_eq!(delivered.dropped_export_failed, 0, "{delivered:?}");

    drop(phoenix);
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..3 {
        ask("").await;
    }
    exporter.flush();
    // The batch fails once its export deadline (2 s) passes.
    let mut after = exporter.counts();
    for _ in 0..60 {
        if after.waiting == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        after = exporter.counts();
    }
    assert!(
        after.dropped_export_failed > 0 && after.exported == delivered.exported,
        "spans for a stopped receiver are counted as dropped: {after:?}"
    );
    exporter.shutdown();
}

/// Waits until Phoenix holds every span named in `names` of `trace_id`; returns them all.
async fn spans_named(phoenix: &Phoenix, trace_id: &str, names: &[&str]) -> Vec<Span> {
    for _ in 0..60 {
        let spans = phoenix.spans(trace_id, 1).await;
        if names.iter().all(|n| spans.iter().any(|s| s.name == *n)) {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let spans = phoenix.spans(trace_id, 1).await;
    panic!("the trace lacks one of {names:?}: {spans:#?}");
}

fn find<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name} span in {spans:#?}"))
}

/// A caller's trace context is honoured on the other fronts too: an A2A request's
/// `traceparent` header, and an MCP tool call's `params._meta.traceparent` (SEP-414) sent by
/// the official Python SDK's client, make the node's spans children of the caller's span; the
/// MCP call's own request to the next agent carries the trace on.
#[tokio::test]
async fn an_a2a_request_and_an_mcp_tool_call_join_the_callers_trace() {
    let phoenix = Phoenix::start().await;
    let (exporter, _subscriber) = traced_to(&phoenix, "agora-fronts-test");
    let (alice_dir, bob_dir) = (temp_dir(), temp_dir());
    let bob = NodeBuilder::new(crate::a2a::llm(), bob_dir.path())
        .config(|c| c.name = "bob".into())
        .spawn_with(crate::a2a::serve)
        .await;
    let alice = NodeBuilder::new(ScriptedLlm::unreachable(), alice_dir.path())
        .config(|c| c.name = "alice".into())
        .spawn_with(crate::mcp::serve_with_mcp)
        .await;

    // A2A: the caller's span rides in the `traceparent` header.
    let (trace, caller) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let request = json!({"jsonrpc": "2.0", "id": 7, "method": "SendMessage",
        "params": crate::a2a::text_message("Will it rain in Oslo?")});
    let sent: Value = reqwest::Client::new()
        .post(format!("{}/a2a", bob.url))
        .header("traceparent", format!("00-{trace}-{caller}-01"))
        .json(&request)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task_id = sent["result"]["task"]["id"].as_str().unwrap().to_string();
    exporter.flush();
    let spans = spans_named(
        &phoenix,
        trace,
        &["POST", "SendMessage", "invoke_agent bob"],
    )
    .await;
    let post = find(&spans, "POST");
    assert_eq!(
        post.parent.as_deref(),
        Some(caller),
        "the caller's span is the parent"
    );
    let call = find(&spans, "SendMessage");
    assert_eq!(call.parent.as_deref(), Some(post.span_id.as_str()));
    assert_eq!(call.text(conv::A2A_METHOD_NAME), "SendMessage");
    assert_eq!(call.text(conv::A2A_TASK_ID), task_id);
    assert_eq!(call.text(conv::A2A_TASK_STATE), "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(call.text(conv::CONVERSATION_ID), task_id);
    assert_eq!(call.text(conv::JSONRPC_REQUEST_ID), "7");
    let agent = find(&spans, "invoke_agent bob");
    assert_eq!(
        ancestry_up_to(&spans, agent, Some(caller)),
        ["invoke_agent bob", "SendMessage", "POST"]
    );

    // A scrape of `/metrics` is not traced, even when it names a trace.
    let scrape = "5b8aa5a2d2c872e8321cf37308d69df2";
    let metrics = reqwest::Client::new()
        .get(format!("{}/metrics", bob.url))
        .header("traceparent", format!("00-{scrape}-{caller}-01"))
        .send()
        .await
        .unwrap();
    assert!(metrics.status().is_success());

    // MCP: the caller's span rides in `_meta`; Alice's message to Bob carries it on.
    let (trace, caller) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let mcp = format!("{}/mcp", alice.url.trim_end_matches('/'));
    let results = crate::mcp::python_client(
        &mcp,
        crate::mcp::TOKEN,
        &json!([{"tool": "send_message",
            "arguments": {"target": bob.url, "message": "Weather in Oslo on 2025-02-03?"},
            "meta": {"traceparent": format!("00-{trace}-{caller}-01")}}]),
    )
    .await;
    assert_eq!(results[0]["isError"], false, "{}", results[0]);
    exporter.flush();
    let spans = spans_named(
        &phoenix,
        trace,
        &["tools/call send_message", "invoke_agent bob"],
    )
    .await;
    let tool = find(&spans, "tools/call send_message");
    assert_eq!(
        tool.parent.as_deref(),
        Some(caller),
        "the caller's span is the parent"
    );
    assert_eq!(tool.text(conv::MCP_METHOD_NAME), "tools/call");
    assert_eq!(tool.text(conv::TOOL_NAME), "send_message");
    let bob_agent = find(&spans, "invoke_agent bob");
    let path = ancestry_up_to(&spans, bob_agent, Some(caller));
    assert_eq!(path.first().map(String::as_str), Some("invoke_agent bob"));
    assert_eq!(
        path.last().map(String::as_str),
        Some("tools/call send_message")
    );

    // The node as an MCP client: its call of an MCP server's tool (here Carol's front, over
    // streamable HTTP) carries the calling span in `_meta`.
    let carol_dir = temp_dir();
    let carol = NodeBuilder::new(ScriptedLlm::unreachable(), carol_dir.path())
        .config(|c| c.name = "carol".into())
        .spawn_with(crate::mcp::serve_with_mcp_token(
            std::env::var("HOME").unwrap_or_default(),
        ))
        .await;
    let front = ToolConfig {
        name: "carol".into(),
        description: None,
        parameters: None,
        returns: None,
        kind: ToolKind::Mcp(agora_node::McpServerConfig {
            url: Some(format!("{}/mcp", carol.url.trim_end_matches('/'))),
            // The token is read from a variable; any one this process has will do.
            bearer_token_env: Some("HOME".into()),
            ..Default::default()
        }),
    };
    let (tools, servers) = agora_mcp::connect(&[front]).await.unwrap();
    let list = tools
        .iter()
        .find(|t| t.spec().name == "list_protocols")
        .expect("Carol's front offers list_protocols");
    let user = tracing::info_span!(target: "agora::test", "agora.test.user", otel.name = "asks");
    let (listed, trace) = async {
        let listed = list.call(json!({"target": bob.url})).await;
        (listed, agora_telemetry::current_trace_id().unwrap())
    }
    .instrument(user)
    .await;
    assert!(listed.is_ok(), "{listed:?}");
    exporter.flush();
    // The client's call span and the front's span share the name.
    let mut spans = Vec::new();
    for _ in 0..60 {
        spans = spans_named(&phoenix, &trace, &["asks", "tools/call list_protocols"]).await;
        if spans
            .iter()
            .filter(|s| s.name == "tools/call list_protocols")
            .count()
            == 2
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let served = spans
        .iter()
        .filter(|s| s.name == "tools/call list_protocols")
        .max_by_key(|s| ancestry(&spans, s).len())
        .unwrap();
    assert_eq!(
        ancestry(&spans, served),
        [
            "tools/call list_protocols",
            "tools/call list_protocols",
            "asks"
        ],
        "Carol's front answers under the client's call span"
    );
    servers.shutdown().await;
    assert_eq!(phoenix.count(scrape).await, 0, "the scrape left no span");
    exporter.shutdown();
}

/// The local model answers a natural-language question (a tool step and an answer): every
/// `chat` span names the model asked for and the one llama-server says answered, and carries
/// the ledger's prompt, cached and completion tokens.
#[tokio::test]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_chat_spans_carry_the_local_models_name_and_tokens() {
    let phoenix = Phoenix::start().await;
    let (exporter, _subscriber) = traced_to(&phoenix, "agora-real-model-test");
    let llm_url = std::env::var("AGORA_TEST_LLM_URL").unwrap();
    let models: Value = reqwest::get(format!("{}/models", llm_url.trim_end_matches('/')))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let served = models["data"][0]["id"].as_str().unwrap().to_string();
    let dir = temp_dir();
    let bob = crate::fixtures::real_model_bob(dir.path())
        .config(|c| c.name = "bob".into())
        .spawn()
        .await;

    let (trace, caller) = ("6e0c63257de34c926f9efcd03899a2a8", "1f2e3d4c5b6a7988");
    let reply: Value = reqwest::Client::new()
        .post(format!("{}/", bob.url))
        .header("traceparent", format!("00-{trace}-{caller}-01"))
        .json(&json!({"protocolHash": null, "protocolSources": [],
            "body": "What is the weather forecast for London, UK on 2024-09-27?"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(reply["status"], "success", "{reply}");
    exporter.flush();

    let ledger = agora_testkit::llm_calls(&bob.node).await;
    assert!(!ledger.is_empty());
    let mut chats = Vec::new();
    for _ in 0..60 {
        let spans = spans_named(&phoenix, trace, &["invoke_agent bob"]).await;
        chats = spans
            .into_iter()
            .filter(|s| s.text(conv::OPERATION_NAME) == conv::CHAT)
            .collect::<Vec<_>>();
        if chats.len() >= ledger.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(chats.len(), ledger.len(), "one chat span per LLM call");
    let tokens = |s: &Span| {
        (
            s.int(conv::USAGE_INPUT_TOKENS),
            s.int(conv::USAGE_CACHE_READ_INPUT_TOKENS),
            s.int(conv::USAGE_OUTPUT_TOKENS),
        )
    };
    let mut exported: Vec<_> = chats.iter().map(tokens).collect();
    let mut recorded: Vec<_> = ledger
        .iter()
        .map(|c| (c.prompt_tokens, c.cached_prompt_tokens, c.completion_tokens))
        .collect();
    exported.sort();
    recorded.sort();
    assert_eq!(exported, recorded, "the spans' tokens are the ledger's");
    for chat in &chats {
        let asked = chat.text(conv::REQUEST_MODEL);
        assert_eq!(chat.name, format!("chat {asked}"));
        assert_eq!(asked, agora_testkit::local_llm().model());
        assert_eq!(chat.text(conv::RESPONSE_MODEL), served, "{chat:?}");
        assert_eq!(
            ledger[0].model, served,
            "the ledger names the model that answered"
        );
        assert!(chat.int(conv::USAGE_INPUT_TOKENS) > 0 && chat.int(conv::USAGE_OUTPUT_TOKENS) > 0);
    }
    exporter.shutdown();
}
