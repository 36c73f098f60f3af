//! Interop: the Python reference library (`agora-protocol` 0.2.0) as a client of this node.
//!
//! Its `Sender` runs in a subprocess (`scripts/python/interop_sender.py`, with the interop venv's
//! python from `AGORA_PYTHON_INTEROP`) against our node served over HTTP on 127.0.0.1. The
//! Sender's own LLM is `scripts/python/openai_stub.py`, a scripted OpenAI-compatible server whose
//! rules (`tests/data/python-interop/*.json`) make the library's LangGraph querier call
//! `send_query` once and then `deliverStructuredOutput` only when the tool result holds our
//! node's scripted answer, so every run is deterministic and checks our wire behaviour.
//! Our node's LLM is a `ScriptedLlm`.
//!
//! The other way round, the library's `ReceiverServer` (`scripts/python/interop_receiver.py`,
//! one Python weather tool) is the target of our sender: negotiation, `Node::send` in natural
//! language and under the weather protocol, and `Node::run_task` (its ladder). The receiver's
//! LLM is the same stub; `receiver-server.json` makes its checker say YES (NO to a tide
//! protocol) and its responders call the tool once and answer.
//!
//! These tests are ignored by default; `scripts/test.sh` runs them with `AGORA_PYTHON_INTEROP`
//! and `AGORA_REPO_ROOT` set:
//!
//! ```sh
//! source ~/.cache/agora/env.sh
//! AGORA_REPO_ROOT=$PWD cargo test -p agora-server --test it python_interop -- --ignored --test-threads=1
//! ```

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use crate::fixtures;
use crate::support::Spawn;
use agora_llm::ChatRequest;
use agora_protocol::{ProtocolHash, data_uri};
use agora_testkit::{
    NodeBuilder, ScriptedLlm, TestServer, last_user_message, llm_categories, schema_name,
    sender_memory, suitability, system_prompt, temp_dir,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");
const NL_ANSWER: &str =
    "The forecast for London, UK on 2024-09-27: rainy, 11 degrees, 12 mm of rain.";

/// The interop venv's python, or a panic saying how to get one.
fn python() -> PathBuf {
    match std::env::var_os("AGORA_PYTHON_INTEROP") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => panic!(
            "AGORA_PYTHON_INTEROP is not set: it must name the python of a venv with agora-protocol 0.2.0 \
             and langchain-openai (scripts/install.sh makes one; `source ~/.cache/agora/env.sh` exports it, \
             and scripts/test.sh runs these tests)"
        ),
    }
}

/// The repository root: `AGORA_REPO_ROOT`, else two levels above this crate.
fn repo_root() -> PathBuf {
    match std::env::var_os("AGORA_REPO_ROOT") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
    }
}

/// What one interop test runs on: the venv's python, the repository root, a temporary folder.
struct Interop {
    python: PathBuf,
    root: PathBuf,
    dir: tempfile::TempDir,
}

impl Interop {
    fn new() -> Self {
        Self {
            python: python(),
            root: repo_root(),
            dir: temp_dir(),
        }
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Our node served on 127.0.0.1, its LLM `llm`.
    async fn node(&self, llm: Arc<ScriptedLlm>) -> TestServer {
        NodeBuilder::new(llm, self.dir()).spawn().await
    }

    /// The scripted OpenAI-compatible server with the rules file `rules`.
    async fn stub(&self, rules: &str) -> Stub {
        Stub::start(&self.python, &self.root, rules, self.dir()).await
    }

    /// The Python `ReceiverServer`, its LLM a stub with the rules file `rules`.
    async fn receiver(&self, rules: &str) -> (Stub, PythonReceiver) {
        let stub = self.stub(rules).await;
        let receiver = PythonReceiver::start(&self.python, &self.root, &stub, self.dir()).await;
        (stub, receiver)
    }

    /// One run of the Python Sender against `node`, its LLM `stub`, in `mode`.
    async fn run_sender(&self, node: &TestServer, stub: &Stub, mode: &str) -> SenderRun {
        run_sender(&self.python, &self.root, node, stub, self.dir(), mode).await
    }
}

/// A command running the interop venv's python on `script` in `dir`, which reaches 127.0.0.1
/// without a proxy, shows no Python warnings and has no OpenAI endpoint from the environment.
fn python_command(python: &Path, script: PathBuf, dir: &Path) -> Command {
    let mut command = Command::new(python);
    command
        .arg(script)
        .current_dir(dir)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .env("PYTHONWARNINGS", "ignore")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_BASE")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Our node's LLM: the suitability checker says yes; the responder answers in one step, with
/// words for natural language and with the protocol's JSON reply under the weather protocol.
fn node_llm() -> Arc<ScriptedLlm> {
    node_llm_judging(true)
}

/// [`node_llm`], with the suitability checker saying `suitable`.
fn node_llm_judging(suitable: bool) -> Arc<ScriptedLlm> {
    ScriptedLlm::new(move |request: &ChatRequest| match schema_name(request) {
        Some("suitability") if suitable => Ok(
            r#"{"reason": "a weather forecast is what this node gives", "suitable": "yes"}"#.into(),
        ),
        Some("suitability") => {
            Ok(r#"{"reason": "this node gives no forecasts", "suitable": "no"}"#.into())
        }
        Some("step") => {
            let answer = if system_prompt(request).contains("Protocol document") {
                json!({"temperature": 11.0, "precipitation": 12.0, "weatherCondition": "rainy"})
            } else {
                json!(NL_ANSWER)
            };
            Ok(json!({"tool": "final_answer", "answer": answer}).to_string())
        }
        other => panic!("unexpected request kind {other:?}"),
    })
}

/// The scripted OpenAI-compatible server, killed when dropped.
struct Stub {
    _child: Child,
    base_url: String,
    log: PathBuf,
}

impl Stub {
    async fn start(python: &Path, root: &Path, rules: &str, dir: &Path) -> Stub {
        let log = dir.join("stub-requests.jsonl");
        let mut child = Command::new(python)
            .arg(root.join("scripts/python/openai_stub.py"))
            .args(["--port", "0", "--script"])
            .arg(
                root.join("crates/agora-server/tests/data/python-interop")
                    .join(rules),
            )
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("the OpenAI stub starts");
        let stdout = child.stdout.take().expect("the stub's stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let port = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(line) = lines.next_line().await.expect("the stub's stdout reads") {
                if let Some(port) = line.strip_prefix("ready ") {
                    return port
                        .trim()
                        .parse::<u16>()
                        .expect("the stub prints its port");
                }
            }
            panic!("the OpenAI stub exited before printing \"ready <port>\"");
        })
        .await
        .expect("the OpenAI stub is ready within 20 s");
        Stub {
            _child: child,
            base_url: format!("http://127.0.0.1:{port}/v1"),
            log,
        }
    }

    /// Every chat request the Sender's LLM received, as the stub logged them.
    fn requests(&self) -> Vec<Value> {
        read_jsonl(&self.log)
    }
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: bad JSON line {line}: {e}", path.display()))
        })
        .collect()
}

/// What one run of the Python Sender gave.
struct SenderRun {
    /// `{"result": ...}` or `{"error": ...}`.
    outcome: Value,
    /// Every HTTP exchange between the Sender and our node.
    wire: Vec<Value>,
    stderr: String,
}

async fn run_sender(
    python: &Path,
    root: &Path,
    node: &TestServer,
    stub: &Stub,
    dir: &Path,
    mode: &str,
) -> SenderRun {
    let wire_log = dir.join("wire.jsonl");
    let mut command = python_command(python, root.join("scripts/python/interop_sender.py"), dir);
    command
        .args([
            "--target",
            &node.url,
            "--llm-url",
            &stub.base_url,
            "--mode",
            mode,
        ])
        .arg("--storage")
        .arg(dir.join("sender-storage"))
        .arg("--wire-log")
        .arg(&wire_log)
        .env_remove("LANGCHAIN_TRACING_V2")
        .env_remove("LANGSMITH_TRACING");
    if mode == "protocol" {
        command
            .arg("--pd")
            .arg(root.join("protocols/weather-forecast.md"));
    }
    let output = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .expect("the Python sender finishes within 30 s")
        .expect("the Python sender runs");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    let last = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let outcome: Value = serde_json::from_str(last).unwrap_or_else(|e| {
        panic!("the Python sender's last stdout line is not JSON ({e}); status {}\nstdout:\n{stdout}\nstderr:\n{stderr}", output.status)
    });
    let wire = read_jsonl(&wire_log);
    // Shown with --nocapture, and by the test harness when a test fails.
    eprintln!(
        "python sender ({mode}): {outcome}\nwire:\n{}",
        pretty(&wire)
    );
    assert_eq!(
        output.status.success(),
        outcome.get("result").is_some(),
        "exit status {} disagrees with {outcome}\nstderr:\n{stderr}",
        output.status
    );
    SenderRun {
        outcome,
        wire,
        stderr,
    }
}

impl SenderRun {
    /// The task's result, or a panic with everything needed to see why there is none.
    fn result(&self, stub: &Stub) -> &Value {
        match self.outcome.get("result") {
            Some(result) if !result.is_null() => result,
            _ => panic!(
                "the Python sender gave no result: {} (wire log above)\nthe Sender's LLM was asked {} time(s)\nstderr:\n{}",
                self.outcome,
                stub.requests().len(),
                self.stderr
            ),
        }
    }
}

fn pretty(values: &[Value]) -> String {
    values
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text of every message of one logged chat request, in order.
fn message_texts(logged: &Value) -> Vec<String> {
    logged["request"]["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .map(|m| m["content"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The tool the stub told the querier to call in one logged response, if any.
fn called_tool(logged: &Value) -> Option<String> {
    logged["response"]["tool_calls"][0]["function"]["name"]
        .as_str()
        .map(str::to_string)
}

/// The Sender's LLM requests, once checked that its querier called `send_query` once and then
/// delivered.
fn queried_once_then_delivered(stub: &Stub) -> Vec<Value> {
    let asked = stub.requests();
    let tools: Vec<Option<String>> = asked.iter().map(called_tool).collect();
    assert_eq!(
        tools,
        [
            Some("send_query".to_string()),
            Some("deliverStructuredOutput".to_string()),
            None
        ],
        "{}",
        pretty(&asked)
    );
    asked
}

/// The requests our node recorded, once checked that there is one.
async fn one_request(node: &TestServer) -> Vec<agora_store::RequestRecord> {
    let requests = agora_testkit::recent_requests(&node.node, 10).await;
    assert_eq!(requests.len(), 1, "{requests:?}");
    requests
}

/// The schema of every call, in order.
fn schema_names(calls: &[ChatRequest]) -> Vec<Option<&str>> {
    calls.iter().map(schema_name).collect()
}

async fn metrics(node: &TestServer) -> String {
    let response = reqwest::get(format!("{}/metrics", node.url))
        .await
        .expect("GET /metrics answers");
    response.text().await.expect("the metrics are text")
}

#[tokio::test]
#[ignore = "needs the Python reference library: run by scripts/test.sh"]
async fn python_interop_sender_gets_a_natural_language_answer() {
    let interop = Interop::new();
    let llm = node_llm();
    let node = interop.node(llm.clone()).await;
    let stub = interop.stub("nl.json").await;

    let run = interop.run_sender(&node, &stub, "nl").await;
    assert_eq!(run.result(&stub), &json!(NL_ANSWER));

    // On the wire: one natural-language POST / opening a multiround conversation, then the
    // DELETE that closes it, answered 200.
    assert_eq!(run.wire.len(), 2, "{}", pretty(&run.wire));
    let (opening, closing) = (&run.wire[0], &run.wire[1]);
    assert_eq!(opening["method"], "POST");
    assert_eq!(opening["url"], node.url.as_str());
    assert_eq!(
        opening["request"],
        json!({
            "protocolHash": null,
            "protocolSources": [],
            "body": "What is the weather forecast for London, UK on 2024-09-27?",
            "multiround": true
        })
    );
    assert_eq!(opening["status"], 200);
    let reply: Value = serde_json::from_str(opening["response"].as_str().unwrap()).unwrap();
    assert_eq!(reply["status"], "success", "{reply}");
    assert_eq!(reply["body"], NL_ANSWER);
    let conversation = reply["conversationId"]
        .as_str()
        .expect("a conversationId for multiround")
        .to_string();
    assert_eq!(closing["method"], "DELETE");
    assert_eq!(
        closing["url"],
        format!("{}/conversations/{conversation}", node.url)
    );
    assert_eq!(
        closing["status"], 200,
        "the Python sender raises on any other status"
    );
    assert_eq!(
        serde_json::from_str::<Value>(closing["response"].as_str().unwrap()).unwrap()["status"],
        "success"
    );

    // What our node recorded: one natural-language request answered by the LLM, the
    // conversation gone after the DELETE, and the DELETE counted as a 200.
    let requests = one_request(&node).await;
    assert_eq!(requests[0].channel, "natural");
    assert_eq!(requests[0].protocol_hash, None);
    assert_eq!(requests[0].path, agora_store::RequestPath::Llm);
    assert_eq!(requests[0].status, "success");
    assert_eq!(requests[0].llm_calls, 1);
    assert!(
        node.node
            .store()
            .conversation(&conversation)
            .await
            .unwrap()
            .is_none(),
        "the DELETE removed the conversation"
    );
    let text = metrics(&node).await;
    assert!(
        text.contains(r#"method="DELETE",route="/conversations/{id}",status="200"} 1"#),
        "DELETE /conversations/{{id}} answered 200 once:\n{text}"
    );

    // Our LLM: one responder step, no suitability check, with the Sender's words as the question.
    assert_eq!(llm.call_count(), 1);
    let call = &llm.calls()[0];
    assert_eq!(schema_name(call), Some("step"));
    assert!(
        last_user_message(call)
            .contains("What is the weather forecast for London, UK on 2024-09-27?")
    );

    // The Sender's LLM: the querier asked without a protocol document, then delivered our answer.
    let asked = queried_once_then_delivered(&stub);
    assert!(
        !message_texts(&asked[0])
            .concat()
            .contains("Protocol document:")
    );
    assert!(
        message_texts(&asked[1]).last().unwrap().contains(NL_ANSWER),
        "the tool result is our reply"
    );

    node.stop().await;
}

#[tokio::test]
#[ignore = "needs the Python reference library: run by scripts/test.sh"]
async fn python_interop_sender_gets_a_protocol_answer_through_a_data_uri() {
    let interop = Interop::new();
    let llm = node_llm();
    let node = interop.node(llm.clone()).await;
    let stub = interop.stub("protocol.json").await;
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    assert!(
        node.node.store().document(&hash).await.unwrap().is_none(),
        "our node starts without the document"
    );

    let run = interop.run_sender(&node, &stub, "protocol").await;
    assert_eq!(
        run.result(&stub),
        &json!({"temperature": 11.0, "precipitation": 12.0, "weatherCondition": "rainy"})
    );

    // On the wire: exactly one single-round POST / with the base64 hash, the document inline
    // as a percent-encoded data URI, and the protocol's JSON request as a string body.
    assert_eq!(run.wire.len(), 1, "{}", pretty(&run.wire));
    let exchange = &run.wire[0];
    assert_eq!(exchange["method"], "POST");
    assert_eq!(exchange["url"], node.url.as_str());
    let sent = &exchange["request"];
    let keys: Vec<&str> = sent
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        ["protocolHash", "protocolSources", "body"],
        "no multiround key: the PD says multiround: false"
    );
    assert_eq!(sent["protocolHash"], hash.to_base64());
    let sources = sent["protocolSources"].as_array().unwrap();
    assert_eq!(sources.len(), 1, "{sent}");
    let source = sources[0].as_str().unwrap();
    assert!(
        source.starts_with("data:text/plain;charset=utf-8,"),
        "{source}"
    );
    assert_eq!(
        source,
        data_uri::encode(WEATHER_PD),
        "the Python percent-encoding matches ours"
    );
    assert_eq!(data_uri::decode(source).unwrap(), WEATHER_PD.as_bytes());
    assert_eq!(
        sent["body"],
        r#"{"location": "London, UK", "date": "2024-09-27"}"#
    );
    assert_eq!(exchange["status"], 200);
    let reply: Value = serde_json::from_str(exchange["response"].as_str().unwrap()).unwrap();
    assert_eq!(reply["status"], "success", "{reply}");
    assert!(reply.get("conversationId").is_none(), "{reply}");
    let body = reply["body"]
        .as_str()
        .expect("a string body for a string request");
    assert_eq!(
        serde_json::from_str::<Value>(body).unwrap(),
        json!({"temperature": 11.0, "precipitation": 12.0, "weatherCondition": "rainy"})
    );

    // What our node recorded: the document from the data URI, verified under the hash the
    // Python side computed; the LLM's suitability decision; one protocol request.
    let stored = node
        .node
        .store()
        .document(&hash)
        .await
        .unwrap()
        .expect("the document was stored");
    assert_eq!(stored.document.text(), WEATHER_PD);
    let decision = suitability(&node.node, &hash).await;
    assert!(decision.allowed);
    assert_eq!(decision.origin, agora_store::DecisionOrigin::Llm);
    let requests = one_request(&node).await;
    assert_eq!(requests[0].channel, "protocol");
    assert_eq!(requests[0].protocol_hash, Some(hash));
    assert_eq!(requests[0].path, agora_store::RequestPath::Llm);
    assert_eq!(requests[0].status, "success");
    assert_eq!(requests[0].llm_calls, 2);
    let usage = agora_testkit::usage(&node.node, &hash).await;
    assert_eq!((usage.requests, usage.llm), (1, 1));

    // Our LLM: the suitability check, then one responder step under the protocol.
    let calls = llm.calls();
    let kinds = schema_names(&calls);
    assert_eq!(kinds, [Some("suitability"), Some("step")]);
    assert!(last_user_message(&calls[0]).contains("name: WeatherForecastQuery"));
    assert!(system_prompt(&calls[1]).contains("Protocol document"));
    assert!(
        last_user_message(&calls[1])
            .contains(r#"{"location": "London, UK", "date": "2024-09-27"}"#)
    );

    // The Sender's LLM: the querier had the protocol document, sent one query, delivered.
    let asked = queried_once_then_delivered(&stub);
    assert!(
        message_texts(&asked[0])
            .concat()
            .contains("Protocol document:\n\n---\nname: WeatherForecastQuery")
    );
    assert_eq!(
        message_texts(&asked[1]).last().unwrap(),
        body,
        "the tool result is our reply, verbatim"
    );

    node.stop().await;
}

#[tokio::test]
#[ignore = "needs the Python reference library: run by scripts/test.sh"]
async fn python_interop_sender_sees_a_rejected_protocol_as_an_error() {
    let interop = Interop::new();
    let llm = node_llm_judging(false);
    let node = interop.node(llm.clone()).await;
    let stub = interop.stub("protocol.json").await;
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());

    let run = interop.run_sender(&node, &stub, "protocol").await;
    // The querier's send_query saw an error (the stub then registers it), not a success.
    assert_eq!(
        run.outcome,
        json!({"error": "ExecutionError: stub: send_query failed (Error calling the tool)"})
    );

    // On the wire: HTTP 200 and our rejection shape, which names the reason under both keys.
    assert_eq!(run.wire.len(), 1, "{}", pretty(&run.wire));
    assert_eq!(run.wire[0]["request"]["protocolHash"], hash.to_base64());
    assert_eq!(run.wire[0]["status"], 200);
    let reply: Value = serde_json::from_str(run.wire[0]["response"].as_str().unwrap()).unwrap();
    assert_eq!(reply["status"], "rejected", "{reply}");
    assert!(
        reply["message"].is_string() && reply["error"].is_string(),
        "{reply}"
    );

    // The library's transporter keeps only `status` and `body` of a reply, so its querier can
    // show the LLM no reason whatever the receiver says (the Python receiver's own errors end
    // the same way): the tool result is the KeyError on `body`.
    let asked = stub.requests();
    assert_eq!(asked.len(), 3, "{}", pretty(&asked));
    let tool_result = message_texts(&asked[1]).last().unwrap().clone();
    assert_eq!(tool_result, "Error calling the tool: 'body'");

    // What our node recorded: the document (it verified), the LLM's "no", one rejected request.
    assert!(node.node.store().document(&hash).await.unwrap().is_some());
    let decision = suitability(&node.node, &hash).await;
    assert!(!decision.allowed);
    let requests = one_request(&node).await;
    assert_eq!(requests[0].path, agora_store::RequestPath::Rejected);
    let calls = llm.calls();
    let kinds = schema_names(&calls);
    assert_eq!(kinds, [Some("suitability")]);

    node.stop().await;
}

#[tokio::test]
#[ignore = "needs the Python reference library: run by scripts/test.sh"]
async fn python_interop_venv_has_the_reference_library() {
    // AGORA_PYTHON_INTEROP must name an interpreter with the library (and langchain-openai), so
    // a broken venv fails here with a clear message rather than deep inside a Sender run.
    let python = python();
    let output = Command::new(&python)
        .args(["-c", "import agora, langchain_openai, importlib.metadata as m; print(m.version('agora-protocol'))"])
        .output()
        .await
        .unwrap_or_else(|e| panic!("AGORA_PYTHON_INTEROP={} does not run: {e}", python.display()));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "0.2.0");
}

/// The Python library's `SenderNegotiator` negotiates with our receiver, then uses the agreed
/// protocol. The library never tells the receiver the final document, so our node meets it on
/// the first protocol request (from the data URI) and judges it with its checker then.
#[tokio::test]
#[ignore = "needs the Python reference library: run by scripts/test.sh"]
async fn python_interop_sender_negotiates_a_protocol_with_our_receiver() {
    let interop = Interop::new();
    let llm = ScriptedLlm::new(|request: &ChatRequest| {
        match schema_name(request) {
        Some("negotiation_reply") => Ok(json!({
            "verdict": "agree",
            "message": "Your weather protocol suits this service."
        })
        .to_string()),
        Some("suitability") => {
            Ok(r#"{"reason": "a weather forecast is what this node gives", "suitable": "yes"}"#.into())
        }
        Some("step") => Ok(json!({"tool": "final_answer", "answer": {"temperature": 11.0, "precipitation": 12.0, "weatherCondition": "rainy"}}).to_string()),
        other => panic!("unexpected request kind {other:?}"),
    }
    });
    let node = interop.node(llm.clone()).await;
    let stub = interop.stub("negotiation.json").await;

    let run = interop.run_sender(&node, &stub, "negotiate").await;
    assert_eq!(
        run.result(&stub),
        &json!({"temperature": 11.0, "precipitation": 12.0, "weatherCondition": "rainy"})
    );

    // On the wire: the negotiation opens on the `negotiation` channel as a multiround
    // conversation, which the Sender DELETEs; then the protocol request names the agreed
    // document (the Python side strips it) by its base64 hash.
    let negotiation = &run.wire[0];
    assert_eq!(negotiation["request"]["protocolHash"], "negotiation");
    assert_eq!(negotiation["request"]["multiround"], true);
    let opened: Value = serde_json::from_str(negotiation["response"].as_str().unwrap()).unwrap();
    assert_eq!(opened["status"], "success", "{opened}");
    assert!(
        opened["body"]
            .as_str()
            .unwrap()
            .contains("suits this service")
    );
    let id = opened["conversationId"].as_str().unwrap();
    assert!(
        run.wire.iter().any(|e| e["method"] == "DELETE"
            && e["url"].as_str().unwrap().ends_with(id)
            && e["status"] == 200),
        "{}",
        pretty(&run.wire)
    );
    let agreed = WEATHER_PD.trim();
    let hash = ProtocolHash::of(agreed.as_bytes());
    let used = run.wire.last().unwrap();
    assert_eq!(used["request"]["protocolHash"], hash.to_base64());

    // Our node: one negotiation turn in the ledger, then the checker and the responder for
    // the document it first saw in the protocol request.
    let categories = llm_categories(&node.node).await;
    assert_eq!(
        categories.iter().filter(|c| *c == "negotiation").count(),
        1,
        "{categories:?}"
    );
    assert!(categories.iter().any(|c| c == "checking"), "{categories:?}");
    let stored = node.node.store().document(&hash).await.unwrap().unwrap();
    assert_eq!(stored.document.text(), agreed);
    node.stop().await;
}

/// Our sender negotiates with the Python library's `Receiver`: it opens on the `negotiation`
/// channel, the Python negotiator agrees, and our closing final-protocol message is answered
/// with words (the library has no such message), so the sender keeps the document as not
/// registered by the receiver.
#[tokio::test]
#[ignore = "needs the Python reference library: run by scripts/test.sh"]
async fn python_interop_our_sender_negotiates_with_a_python_receiver() {
    let interop = Interop::new();
    let (stub, receiver) = interop.receiver("negotiation-receiver.json").await;
    let target = receiver.url.clone();

    let sender_llm = ScriptedLlm::new(|request: &ChatRequest| {
        assert_eq!(schema_name(request), Some("negotiation_turn"));
        Ok(negotiation_turn(request))
    });
    let sender = NodeBuilder::new(sender_llm.clone(), interop.dir())
        .build()
        .await;
    let task: agora_node::Task = serde_json::from_value(json!({
        "name": "weather_forecast",
        "description": "The weather forecast for a location on a date.",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object"}
    }))
    .unwrap();
    let negotiated = sender
        .negotiate(&target, &task)
        .await
        .unwrap_or_else(|error| receiver.fail(error));
    assert!(!negotiated.registered_by_receiver);
    assert_eq!(negotiated.rounds, 2);
    assert!(
        last_user_message(&sender_llm.calls()[1]).contains("weather_forecast tool"),
        "the Python negotiator's words reached our sender's LLM"
    );
    let stored = sender
        .store()
        .document(&negotiated.document.hash())
        .await
        .unwrap()
        .expect("the sender stored the document");
    assert!(
        stored
            .document
            .text()
            .starts_with("---\nname: WeatherForecastQuery\n")
    );
    // The Python receiver's LLM was asked twice: the proposal, then our closing message.
    let asked = stub.requests();
    assert_eq!(asked.len(), 2, "{}", pretty(&asked));
}

/// The Python library's `ReceiverServer` (`scripts/python/interop_receiver.py`: its `Receiver`
/// with one tool, `weather_forecast`) on 127.0.0.1, its LLM the stub; killed when dropped.
struct PythonReceiver {
    _child: Child,
    /// The receiver's Agora endpoint (`POST /`).
    url: String,
    /// Its stderr (Flask's request log and any traceback).
    log: PathBuf,
    /// Its JSON storage.
    storage: PathBuf,
}

impl PythonReceiver {
    async fn start(python: &Path, root: &Path, stub: &Stub, dir: &Path) -> PythonReceiver {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let log = dir.join("python-receiver.log");
        let storage = dir.join("python-receiver-storage");
        let child = python_command(python, root.join("scripts/python/interop_receiver.py"), dir)
            .args(["--port", &port.to_string(), "--llm-url", &stub.base_url])
            .arg("--storage")
            .arg(&storage)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the Python receiver starts");
        tokio::time::timeout(Duration::from_secs(30), async {
            while tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await
        .expect("the Python receiver listens within 30 s");
        PythonReceiver {
            _child: child,
            url: format!("http://127.0.0.1:{port}"),
            log,
            storage,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `sender`'s ladder run of `task` for London against this receiver.
    async fn run(&self, sender: &agora_node::Node, task: &agora_node::Task) -> agora_node::TaskRun {
        sender
            .run_task(&self.url, task, &london())
            .await
            .unwrap_or_else(|e| self.fail(e))
    }

    /// `sender`'s logged runs of the weather task against this receiver, newest first.
    async fn runs_of(&self, sender: &agora_node::Node) -> Vec<agora_store::SenderRun> {
        let runs = sender
            .store()
            .sender()
            .sender_runs(&self.url, "weather", 10)
            .await;
        runs.unwrap()
    }

    /// Panics with `error` and the receiver's log.
    fn fail(&self, error: impl std::fmt::Display) -> ! {
        panic!("{error}\nPython receiver log:\n{}", self.log())
    }

    /// The protocols the Receiver registered, by the hash string it was sent, as it stores them.
    fn protocols(&self) -> serde_json::Map<String, Value> {
        let text = std::fs::read_to_string(self.storage.join("receiver.json")).unwrap_or_default();
        let stored: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        stored["protocols"].as_object().cloned().unwrap_or_default()
    }
}

/// A protocol for another job whose text still names every field of the weather task (a field
/// check passes it), so that only the receiver's checker can refuse it.
const TIDE_PD: &str = "---\nname: TideTableQuery\ndescription: Ask for the high and low tides at a harbour on a date.\nmultiround: false\n---\n\n# Tide table query\n\nRequest: {\"location\": harbour name, \"date\": \"YYYY-MM-DD\"}.\nReply: {\"highTides\": [\"HH:MM\"], \"lowTides\": [\"HH:MM\"]}; unlike a forecast it gives no temperature, precipitation or weatherCondition.\n";
const PY_NL_ANSWER: &str = "The forecast for London, UK on 2024-09-27: rainy, 11.0 degrees Celsius, 12.0 mm of precipitation.";

fn weather_task() -> agora_node::Task {
    let mut task = fixtures::weather_task(fixtures::forecast_output());
    task.output_schema["additionalProperties"] = json!(false);
    task
}

fn london() -> Value {
    json!({"location": "London, UK", "date": "2024-09-27"})
}

fn rainy() -> Value {
    json!({"temperature": 11.0, "precipitation": 12.0, "weatherCondition": "rainy"})
}

/// Our sender's querier: the protocol body is the task data as JSON, the natural-language
/// message a question; replies are read back faithfully (JSON as it is, words by their numbers
/// and condition); every candidate protocol fits; a negotiation proposes, then finishes with a
/// weather protocol once the receiver answered.
fn our_sender_llm() -> Arc<ScriptedLlm> {
    ScriptedLlm::new(|request: &ChatRequest| {
        match schema_name(request) {
        None if system_prompt(request).contains("request bodies for a protocol") => {
            Ok(london().to_string())
        }
        None => Ok("What is the weather forecast for London, UK on 2024-09-27? Please give the temperature, the precipitation and the sky condition.".into()),
        Some("task_output") => {
            let reply = last_user_message(request).split("Reply: ").nth(1).unwrap();
            if let Ok(value) = serde_json::from_str::<Value>(reply) {
                return Ok(value.to_string());
            }
            let numbers: Vec<f64> = reply
                .split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .filter_map(|t| t.parse().ok())
                .collect();
            let condition = ["sunny", "cloudy", "rainy", "snowy"]
                .into_iter()
                .find(|c| reply.contains(c))
                .unwrap();
            Ok(json!({"temperature": numbers[numbers.len() - 2], "precipitation": numbers[numbers.len() - 1], "weatherCondition": condition}).to_string())
        }
        Some("task_fit") => Ok(json!({"suitable": "yes", "reason": "it fits"}).to_string()),
        Some("negotiation_turn") => Ok(negotiation_turn(request)),
        other => panic!("unexpected request to our sender's LLM {other:?}"),
    }
    })
}

/// The (rung, outcome) of every run.
fn rungs_and_outcomes(runs: &[agora_store::SenderRun]) -> Vec<(&str, &str)> {
    runs.iter()
        .map(|r| (r.rung.as_str(), r.outcome.as_str()))
        .collect()
}

/// Our sender's negotiation turn: a proposal, then a weather protocol once the receiver
/// answered.
fn negotiation_turn(request: &ChatRequest) -> String {
    if last_user_message(request).contains("The receiver answered") {
        json!({"message": "Here is the final protocol.", "final_protocol": {
            "name": "WeatherForecastQuery",
            "description": "Forecast for a location on a date.",
            "document": "Request: {\"location\": string, \"date\": \"YYYY-MM-DD\"}. Reply: {\"temperature\": number, \"precipitation\": number, \"weatherCondition\": string}."
        }})
        .to_string()
    } else {
        json!({"message": "I propose: request {\"location\", \"date\"}, reply {\"temperature\", \"precipitation\", \"weatherCondition\"}.", "final_protocol": null}).to_string()
    }
}

/// The messages of every request the Python receiver's LLM got, as (role, text) pairs.
fn conversations(stub: &Stub) -> Vec<Vec<(String, String)>> {
    stub.requests()
        .iter()
        .map(|logged| {
            logged["request"]["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    (
                        m["role"].as_str().unwrap_or("").to_string(),
                        m["content"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .collect()
}

/// Our sender runs the weather task against the Python library's `ReceiverServer`, in natural
/// language and then under the weather protocol (its document inline as a `data:` URI). Both
/// outputs are valid against the task's output schema. The Python receiver verifies our hash
/// (base64, which it compares as a string), registers the document under it, judges it with its
/// checker and answers with its tool.
#[tokio::test]
#[ignore = "needs the Python reference library: run by scripts/test.sh"]
async fn python_interop_our_sender_runs_a_task_against_a_python_receiver_server() {
    let interop = Interop::new();
    let (stub, receiver) = interop.receiver("receiver-server.json").await;
    let llm = our_sender_llm();
    let sender = NodeBuilder::new(llm.clone(), interop.dir()).build().await;
    let task = weather_task();

    // Natural language.
    let outcome = sender
        .send(&receiver.url, &task, &london(), None)
        .await
        .unwrap_or_else(|e| receiver.fail(e));
    assert_eq!(outcome.output, rainy());
    assert_eq!(outcome.reply_body, PY_NL_ANSWER);
    assert_eq!(outcome.llm_calls, 2, "our querier wrote and read");
    let asked = conversations(&stub);
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[0][0].1.contains("NaturalLanguageResponderGPT"));
    assert_eq!(asked[0].last().unwrap().0, "user");
    assert!(
        asked[0]
            .last()
            .unwrap()
            .1
            .starts_with("What is the weather forecast for London, UK"),
        "our message reached the Python responder: {asked:?}"
    );
    let tool_result = &asked[1].last().unwrap();
    assert_eq!(tool_result.0, "tool");
    assert!(
        tool_result.1.contains("\"weatherCondition\": \"rainy\""),
        "the Python tool ran: {tool_result:?}"
    );

    // Under the weather protocol, the document inline.
    let document = agora_protocol::VerifiedDocument::from_text(WEATHER_PD);
    let sources = vec![data_uri::encode(WEATHER_PD)];
    let outcome = sender
        .send(&receiver.url, &task, &london(), Some((&document, &sources)))
        .await
        .unwrap_or_else(|e| receiver.fail(e));
    assert_eq!(outcome.output, rainy());
    assert_eq!(
        serde_json::from_str::<Value>(&outcome.reply_body).unwrap(),
        rainy(),
        "the protocol's JSON reply, as a string body"
    );
    let asked = conversations(&stub);
    assert_eq!(asked.len(), 5, "{asked:?}");
    let (checker, responder, tool) = (&asked[2], &asked[3], &asked[4]);
    assert!(checker[0].1.contains("ProtocolCheckerGPT"));
    assert!(
        checker[1].1.contains(WEATHER_PD),
        "the checker saw the document from our data: URI, byte for byte"
    );
    assert!(responder[0].1.contains("You are ResponderGPT"));
    assert!(responder[0].1.contains("name: WeatherForecastQuery"));
    assert_eq!(
        serde_json::from_str::<Value>(&responder.last().unwrap().1).unwrap(),
        london(),
        "our body reached the Python responder as the protocol's JSON request"
    );
    assert_eq!(tool.last().unwrap().0, "tool");

    // The Python receiver registered the document under our base64 hash, with our source.
    let protocols = receiver.protocols();
    let base64 = document.hash().to_base64();
    let registered = protocols
        .get(&base64)
        .unwrap_or_else(|| panic!("no protocol under {base64}: {protocols:?}"));
    assert_eq!(registered["document"], WEATHER_PD);
    assert_eq!(registered["sources"], json!(sources));
    assert_eq!(protocols.len(), 1, "{protocols:?}");

    // Our ledger: two conversation calls per task run.
    let calls = agora_testkit::llm_calls(&sender).await;
    assert_eq!(calls.len(), 4);
    assert!(calls.iter().all(|c| c.category == "conversation"));
}

/// `Node::run_task` (the sender's ladder) against the Python `ReceiverServer`, which serves no
/// `/.wellknown`: exploring meets its 404 and the runs carry on in natural language.
#[tokio::test]
#[ignore = "needs the Python reference library: run by scripts/test.sh"]
async fn python_interop_our_ladder_explores_a_python_receiver_and_stays_natural() {
    let interop = Interop::new();
    let (stub, receiver) = interop.receiver("receiver-server.json").await;
    let sender = fixtures::ladder_sender(our_sender_llm(), interop.dir(), 2, 100).await;
    let task = weather_task();

    let mut steps = Vec::new();
    for _ in 0..3 {
        let run = receiver.run(&sender, &task).await;
        assert_eq!(run.outcome.output, rainy());
        assert_eq!(run.protocol, None);
        steps.push(run.steps);
    }
    assert_eq!(
        steps,
        [vec![], vec!["explored".to_string()], vec![]],
        "explored once, found nothing"
    );
    assert!(
        receiver
            .log()
            .lines()
            .any(|line| line.contains("GET /.wellknown HTTP/1.1") && line.contains("\" 404 ")),
        "the ladder asked the Python receiver for its /.wellknown:\n{}",
        receiver.log()
    );

    let memory = sender_memory(&sender, &receiver.url, "weather").await;
    assert_eq!((memory.uses, memory.explored), (3, true));
    assert_eq!(memory.protocol_hash, None);
    let runs = receiver.runs_of(&sender).await;
    assert_eq!(rungs_and_outcomes(&runs), [("natural", "success"); 3]);
    // Three natural-language conversations on the Python side (a tool call and an answer
    // each), and no protocol checked.
    let asked = conversations(&stub);
    assert_eq!(asked.len(), 6, "{asked:?}");
    assert!(
        asked
            .iter()
            .all(|messages| messages[0].1.contains("NaturalLanguageResponderGPT"))
    );
    assert!(receiver.protocols().is_empty());
}

/// The ladder against the Python `ReceiverServer` with protocols this sender uses for the task
/// with other targets: the first candidate (a tide protocol) is refused by the Python checker,
/// whose generic error ("... is not suitable for execution") our sender reads as a rejection, so
/// the run falls back to natural language and the refusal is remembered; the next run explores
/// again and goes under the weather protocol.
#[tokio::test]
#[ignore = "needs the Python reference library: run by scripts/test.sh"]
async fn python_interop_our_ladder_learns_a_python_rejection_then_uses_a_protocol() {
    let interop = Interop::new();
    let (stub, receiver) = interop.receiver("receiver-server.json").await;
    let sender = fixtures::ladder_sender(our_sender_llm(), interop.dir(), 1, 100).await;
    let task = weather_task();
    let tide = agora_protocol::VerifiedDocument::from_text(TIDE_PD);
    let weather = agora_protocol::VerifiedDocument::from_text(WEATHER_PD);
    for (other, text) in [("http://a.test/", TIDE_PD), ("http://b.test/", WEATHER_PD)] {
        let document = agora_protocol::VerifiedDocument::from_text(text);
        sender
            .store()
            .sender()
            .put_sender_memory(&agora_store::SenderMemory {
                target: other.to_string(),
                task: "weather".to_string(),
                uses: 10,
                protocol_hash: Some(document.hash()),
                protocol_sources: vec![data_uri::encode(text)],
                next_negotiation_at: 100,
                ..Default::default()
            })
            .await
            .unwrap();
    }

    let first = receiver.run(&sender, &task).await;
    assert_eq!(first.outcome.output, rainy());
    assert_eq!(first.protocol, None, "back to natural language");
    assert_eq!(
        first.steps,
        [
            "explored".to_string(),
            format!("found {}", tide.hash()),
            format!("rejected {}", tide.hash())
        ]
    );
    let second = receiver.run(&sender, &task).await;
    assert_eq!(second.outcome.output, rainy());
    assert_eq!(second.protocol, Some(weather.hash()));
    assert_eq!(
        second.steps,
        ["explored".to_string(), format!("found {}", weather.hash())]
    );

    let memory = sender_memory(&sender, &receiver.url, "weather").await;
    assert_eq!(memory.rejected, [tide.hash()]);
    assert_eq!(memory.protocol_hash, Some(weather.hash()));
    let runs = receiver.runs_of(&sender).await;
    assert_eq!(
        rungs_and_outcomes(&runs),
        [("natural", "success"), ("protocol", "success")]
    );

    // The Python side: the tide document judged unsuitable, a natural-language answer, then
    // the weather document judged suitable and answered under.
    let protocols = receiver.protocols();
    assert_eq!(protocols.len(), 2, "{protocols:?}");
    assert_eq!(
        protocols[&tide.hash().to_base64()]["suitability"],
        "inadequate",
        "{protocols:?}"
    );
    assert_eq!(
        protocols[&weather.hash().to_base64()]["suitability"],
        "adequate",
        "{protocols:?}"
    );
    let firsts: Vec<String> = conversations(&stub)
        .iter()
        .map(|messages| messages[0].1.split('.').next().unwrap().to_string())
        .collect();
    assert_eq!(
        firsts,
        [
            "You are ProtocolCheckerGPT",
            "You are NaturalLanguageResponderGPT",
            "You are NaturalLanguageResponderGPT",
            "You are ProtocolCheckerGPT",
            "You are ResponderGPT",
            "You are ResponderGPT",
        ]
    );
}

/// The ladder's top rung against the Python `ReceiverServer`: at the negotiation threshold our
/// sender negotiates with the library's `ReceiverNegotiator` (which agrees, and answers our
/// closing final-protocol message with words), then sends under the agreed document, inline as a
/// `data:` URI; the Python receiver verifies it under our base64 hash, judges it and answers.
#[tokio::test]
#[ignore = "needs the Python reference library: run by scripts/test.sh"]
async fn python_interop_our_ladder_negotiates_with_a_python_receiver_then_uses_the_protocol() {
    let interop = Interop::new();
    let (stub, receiver) = interop.receiver("receiver-server.json").await;
    let sender = fixtures::ladder_sender(our_sender_llm(), interop.dir(), 100, 1).await;
    let task = weather_task();

    let mut hashes = Vec::new();
    for expected_steps in [1, 0] {
        let run = receiver.run(&sender, &task).await;
        assert_eq!(run.outcome.output, rainy());
        let hash = run
            .protocol
            .expect("the run went under the negotiated protocol");
        assert_eq!(run.steps.len(), expected_steps, "{:?}", run.steps);
        if expected_steps == 1 {
            assert_eq!(run.steps[0], format!("negotiated {hash}"));
        }
        hashes.push(hash);
    }
    assert_eq!(hashes[0], hashes[1], "the second run keeps the protocol");

    let document = sender
        .store()
        .document(&hashes[0])
        .await
        .unwrap()
        .expect("the sender stored the negotiated document")
        .document;
    let protocols = receiver.protocols();
    assert_eq!(protocols.len(), 1, "{protocols:?}");
    let registered = &protocols[&hashes[0].to_base64()];
    assert_eq!(registered["document"], document.text());
    assert_eq!(
        registered["sources"],
        json!([data_uri::encode(document.text())])
    );
    assert_eq!(registered["suitability"], "adequate");
    assert_eq!(registered["conversations"], 2);

    // The Python side: two negotiation turns, then the checker once and the responder (a tool
    // call and an answer) per run.
    let kinds: Vec<&str> = conversations(&stub)
        .iter()
        .map(|messages| {
            let system = &messages[0].1;
            [
                "ProtocolNegotiatorGPT",
                "ProtocolCheckerGPT",
                "You are ResponderGPT",
                "NaturalLanguageResponderGPT",
            ]
            .into_iter()
            .find(|kind| system.contains(kind))
            .unwrap_or("other")
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "ProtocolNegotiatorGPT",
            "ProtocolNegotiatorGPT",
            "ProtocolCheckerGPT",
            "You are ResponderGPT",
            "You are ResponderGPT",
            "You are ResponderGPT",
            "You are ResponderGPT",
        ]
    );
    let runs = receiver.runs_of(&sender).await;
    assert_eq!(rungs_and_outcomes(&runs), [("protocol", "success"); 2]);
}
