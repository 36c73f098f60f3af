//! Routines on the real WebAssembly runtime: every shipped routine folder against its cases, and
//! a node over HTTP answering a protocol with the shipped JavaScript routine and no LLM at all.
//!
//! The JavaScript engine comes from `AGORA_JS_ENGINE` and compiled routines from their own
//! variables (`AGORA_ROUTINE_WEATHER_C`), as `scripts/install.sh` writes them to
//! `~/.cache/agora/env.sh` and `scripts/test.sh` sources it. Without the JavaScript engine these
//! tests fail and say so rather than pass without having run; a compiled routine whose module is
//! not built is skipped with a note.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::support::Spawn;
use agora_node::tools::WeatherForecastTool;
use agora_node::{RoutineEngine, RoutineSource, ToolHost};
use agora_protocol::ProtocolHash;
use agora_routines::{RuntimeConfig, WasmRuntime};
use agora_server::manifest::RoutineFolder;
use agora_store::RequestPath;
use agora_testkit::{NodeBuilder, ScriptedLlm, temp_dir, weather_tool};
use serde::Deserialize;
use serde_json::{Value, json};

/// Routine folders built outside agora, and the variable naming their built module.
const BUILT_ROUTINES: &[(&str, &str)] = &[("weather-forecast-c", "AGORA_ROUTINE_WEATHER_C")];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn runtime() -> WasmRuntime {
    let hint =
        "run scripts/install.sh, then `source ~/.cache/agora/env.sh` (scripts/test.sh does both)";
    let engine = std::env::var_os("AGORA_JS_ENGINE")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("AGORA_JS_ENGINE is not set: {hint}"));
    assert!(
        engine.is_file(),
        "AGORA_JS_ENGINE={} does not exist: {hint}",
        engine.display()
    );
    WasmRuntime::new(RuntimeConfig {
        js_engine: Some(engine),
        // Shared by test runs: compiling a JavaScript routine takes about a second.
        artifact_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("agora-artifacts")),
        ..RuntimeConfig::default()
    })
    .expect("the routine runtime starts")
}

#[derive(Debug, Deserialize)]
struct Cases {
    cases: Vec<Case>,
}

#[derive(Debug, Clone, Deserialize)]
struct Case {
    name: String,
    body: String,
    tools: Vec<ToolCall>,
    #[serde(default)]
    reply: Option<Value>,
    /// `true`: a JSON object with a string `error` (the weather protocol's shape); an object:
    /// what the reply must contain (see [`contains`]), for protocols with their own error shape.
    #[serde(default)]
    error_reply: Option<Value>,
    #[serde(default)]
    fails: bool,
}

#[derive(Debug, Clone, Deserialize)]
struct ToolCall {
    name: String,
    arguments: Value,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<String>,
}

/// Answers tool calls from a case's recording, in order, and notes any call it did not expect.
struct RecordedTools {
    expected: Mutex<VecDeque<ToolCall>>,
    surprises: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl ToolHost for RecordedTools {
    async fn call_tool(&self, name: &str, arguments: &str) -> Result<String, String> {
        let next = self.expected.lock().unwrap().pop_front();
        let arguments: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
        match next {
            Some(call) if call.name == name && same(&call.arguments, &arguments) => {
                match (call.result, call.error) {
                    (_, Some(error)) => Err(error),
                    (Some(result), None) => Ok(result.to_string()),
                    (None, None) => panic!("a recorded call of {name} has no result or error"),
                }
            }
            other => {
                let surprise = format!("{name}({arguments}), expected {other:?}");
                self.surprises.lock().unwrap().push(surprise.clone());
                Err(format!("unexpected tool call {surprise}"))
            }
        }
    }
}

/// JSON equality with numbers compared by value (`0`, `0.0` and `0e0` are the same reply), and
/// strings holding JSON objects or arrays (a message body that is JSON text) compared as that JSON.
pub(crate) fn same(a: &Value, b: &Value) -> bool {
    match (embedded(a), embedded(b)) {
        (Some(x), Some(y)) => return same(&x, &y),
        (Some(x), None) => return same(&x, b),
        (None, Some(y)) => return same(a, &y),
        (None, None) => {}
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// The JSON object or array a string holds, if it holds one.
fn embedded(value: &Value) -> Option<Value> {
    let parsed: Value = serde_json::from_str(value.as_str()?).ok()?;
    (parsed.is_object() || parsed.is_array()).then_some(parsed)
}

/// Whether `actual` contains `expected`: every key of an expected object is in the actual one
/// with a value that contains the expected value; anything else is [`same`]. A string holding
/// JSON is read as that JSON.
pub(crate) fn contains(actual: &Value, expected: &Value) -> bool {
    let actual = embedded(actual).unwrap_or_else(|| actual.clone());
    match expected {
        Value::Object(expected) => expected
            .iter()
            .all(|(key, value)| actual.get(key).is_some_and(|v| contains(v, value))),
        _ => same(&actual, expected),
    }
}

/// Every routine folder, with the source to build (or why it is skipped).
fn folders() -> Vec<(RoutineFolder, Option<RoutineSource>)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo().join("routines"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|dir| dir.join("manifest.toml").is_file())
        .collect();
    dirs.sort();
    dirs.iter()
        .map(|dir| {
            let folder = RoutineFolder::read(dir).unwrap();
            let source = match folder.manifest.language.as_str() {
                "javascript" | "wasm" => Some(folder.source().unwrap()),
                language => {
                    let name = folder.name();
                    let (_, var) = BUILT_ROUTINES
                        .iter()
                        .find(|(folder, _)| *folder == name)
                        .unwrap_or_else(|| {
                            panic!("{name} is written in {language}: list its built module in BUILT_ROUTINES")
                        });
                    match std::env::var_os(var).filter(|p| !p.is_empty()) {
                        Some(path) => Some(RoutineSource::Component(std::fs::read(path).unwrap())),
                        None => {
                            eprintln!("skipping {name}: {var} is not set (scripts/install.sh builds it)");
                            None
                        }
                    }
                }
            };
            (folder, source)
        })
        .collect()
}

/// A folder's cases: its own `tests.json`, or those of the folders serving the same protocol.
fn cases_of(folder: &RoutineFolder, all: &[(RoutineFolder, Option<RoutineSource>)]) -> Vec<Case> {
    let read = |folder: &RoutineFolder| -> Option<Vec<Case>> {
        let text = std::fs::read_to_string(folder.dir.join("tests.json")).ok()?;
        Some(serde_json::from_str::<Cases>(&text).unwrap().cases)
    };
    if let Some(cases) = read(folder) {
        return cases;
    }
    let protocol = folder.protocol_path().canonicalize().unwrap();
    let shared: Vec<Case> = all
        .iter()
        .filter(|(other, _)| other.protocol_path().canonicalize().ok() == Some(protocol.clone()))
        .filter_map(|(other, _)| read(other))
        .flatten()
        .collect();
    assert!(
        !shared.is_empty(),
        "{} has no tests.json, nor does any routine of its protocol",
        folder.name()
    );
    shared
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_routines_pass_their_cases() {
    let runtime = runtime();
    let all = folders();
    assert!(
        all.iter().any(|(f, _)| f.name() == "weather-forecast"),
        "the shipped JavaScript routine is missing"
    );
    let mut failures = Vec::new();
    let mut ran = 0;
    for (folder, source) in &all {
        let Some(source) = source else { continue };
        let name = folder.name();
        let component = runtime
            .build(source)
            .await
            .unwrap_or_else(|e| panic!("{name} does not build: {e}"));
        let routine = runtime.load(&component).await.unwrap();
        for case in cases_of(folder, &all) {
            let tools = Arc::new(RecordedTools {
                expected: Mutex::new(case.tools.clone().into()),
                surprises: Mutex::new(Vec::new()),
            });
            let outcome = routine
                .run(&case.body, tools.clone(), folder.limits())
                .await;
            let problem = match (&outcome, &case) {
                (Err(_), Case { fails: true, .. }) => None,
                (Ok(text), Case { fails: false, .. }) => {
                    match serde_json::from_str::<Value>(text) {
                        Err(e) => Some(format!("the reply is not JSON ({e}): {text}")),
                        Ok(reply) if case.error_reply == Some(Value::Bool(true)) => {
                            (!reply.get("error").is_some_and(Value::is_string))
                                .then(|| format!("expected an error reply, got {reply}"))
                        }
                        Ok(reply) if case.error_reply.is_some() => {
                            let expected = case.error_reply.as_ref().unwrap();
                            (!contains(&reply, expected)).then(|| {
                                format!("expected an error containing {expected}, got {reply}")
                            })
                        }
                        Ok(reply) => {
                            let expected = case
                                .reply
                                .as_ref()
                                .expect("a case says reply, error_reply or fails");
                            (!same(&reply, expected))
                                .then(|| format!("expected {expected}, got {reply}"))
                        }
                    }
                }
                (outcome, _) => Some(format!("unexpected outcome {outcome:?}")),
            };
            let surprises = tools.surprises.lock().unwrap().clone();
            let unmade = tools.expected.lock().unwrap().len();
            for problem in problem
                .into_iter()
                .chain(surprises.into_iter().map(|s| format!("tool call {s}")))
                .chain((unmade > 0).then(|| format!("{unmade} recorded tool calls were not made")))
            {
                failures.push(format!("{name}: {}: {problem}", case.name));
            }
            ran += 1;
        }
        eprintln!("{name}: ran its cases");
    }
    assert!(
        failures.is_empty(),
        "{} of {ran} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answers_the_weather_protocol_with_the_shipped_routine_and_no_llm() {
    let dir = temp_dir();
    let server = NodeBuilder::new(ScriptedLlm::unreachable(), dir.path())
        .config(|c| c.tools = vec![weather_tool()])
        .routine_engine(Arc::new(runtime()))
        .admin_token("secret-token")
        .spawn()
        .await;
    let pd = std::fs::read_to_string(repo().join("protocols/weather-forecast.md")).unwrap();
    let source =
        std::fs::read_to_string(repo().join("routines/weather-forecast/routine.js")).unwrap();
    let client = reqwest::Client::new();
    let added = client
        .post(format!("{}/admin/routines", server.url))
        .bearer_auth("secret-token")
        .json(&json!({
            "name": "weather-forecast", "protocolText": pd, "source": source,
            "tools": ["weather_forecast"], "timeoutMs": 1000, "memoryMb": 64,
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(added.status().as_u16(), 201, "{:?}", added.text().await);

    // Both dialects of body; no sources needed, the document was stored with the routine.
    let hash = ProtocolHash::of(pd.as_bytes());
    let forecast = WeatherForecastTool::new(7).forecast("London, UK", "2024-09-27");
    let expected = json!({
        "temperature": forecast["temperature_c"],
        "precipitation": forecast["precipitation_mm"],
        "weatherCondition": forecast["condition"],
    });
    let request = json!({"location": "London, UK", "date": "2024-09-27"});
    let (status, reply) = server
        .post("/", &json!({"protocolHash": hash.to_base64(), "protocolSources": [], "body": request.to_string()}))
        .await;
    assert_eq!(
        (status, reply["status"].as_str()),
        (200, Some("success")),
        "{reply}"
    );
    let body: Value = serde_json::from_str(reply["body"].as_str().unwrap()).unwrap();
    assert!(same(&body, &expected), "{body} != {expected}");
    let (_, reply) = server
        .post(
            "/",
            &json!({"protocolHash": hash.to_hex(), "protocolSources": [], "body": request}),
        )
        .await;
    assert!(same(&reply["body"], &expected), "{reply}");
    let (_, reply) = server
        .post(
            "/",
            &json!({"protocolHash": hash.to_hex(), "protocolSources": [], "body": "not json"}),
        )
        .await;
    assert!(reply["body"].as_str().unwrap().contains("error"), "{reply}");

    let store = server.node.store();
    assert!(store.ledger().llm_calls(None).await.unwrap().is_empty());
    let requests = store.requests().recent_requests(10).await.unwrap();
    assert_eq!(requests.len(), 3);
    assert!(
        requests
            .iter()
            .all(|r| r.path == RequestPath::Routine && r.llm_calls == 0)
    );
    let metrics = server.get_text("/metrics").await;
    assert!(
        metrics.contains(&format!(
            "agora_routine_runs_total{{node=\"test-node\",routine=\"weather-forecast\",protocol=\"{}\",origin=\"human\"}} 3",
            hash.to_hex()
        )),
        "{metrics}"
    );
    let listing: Value = serde_json::from_str(&server.get_text("/.wellknown").await).unwrap();
    assert!(listing.get(hash.to_hex()).is_some(), "{listing}");
}
