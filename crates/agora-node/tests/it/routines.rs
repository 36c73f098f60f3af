//! Node-boundary tests of routines, with a scripted routine engine and a scripted LLM: dispatch
//! without the LLM, granted tools, fallback and failure accounting, the registry's invariants,
//! persistence across a restart, and changes made by another process.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;
use std::time::Duration;

use agora_node::tools::WeatherForecastTool;
use agora_node::{
    Node, ProtocolInput, RegistryError, RoutineError, RoutineRegistry, RoutineSpec, SystemClock,
    ToolHost, ToolRegistry,
};
use agora_protocol::{Body, HashDialect, ProtocolHash, ProtocolRef, Request, Status};
use agora_store::{RequestPath, RequestRecord, RoutineStatus, Store};
use agora_testkit::{
    NodeBuilder, ScriptedLlm, ScriptedRoutineEngine, human_routine, llm_categories, schema_name,
    sqlite_url, suitability, temp_dir, weather_tool,
};
use serde_json::{Value, json};

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");

/// The routines the tests use, by key.
fn engine() -> ScriptedRoutineEngine {
    ScriptedRoutineEngine::new()
        .routine("echo", |body, _tools| async move {
            Ok(json!({"echo": body}).to_string())
        })
        .routine("text", |_body, _tools| async move {
            Ok("plain words".to_string())
        })
        .routine("weather", |body, tools| async move {
            weather(body, tools).await
        })
        .routine("trap", |_body, _tools| async move {
            Err(RoutineError::Trap("wasm `unreachable` executed".into()))
        })
        .routine("slow", |_body, _tools| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok("too late".to_string())
        })
        // Calls the tool named by the body with `{}` and reports what happened.
        .routine("probe", |body, tools| async move {
            Ok(match tools.call_tool(&body, "{}").await {
                Ok(result) => format!("ok: {result}"),
                Err(error) => format!("refused: {error}"),
            })
        })
}

/// The weather protocol, by hand: what the shipped JavaScript routine does.
async fn weather(body: String, tools: Arc<dyn ToolHost>) -> Result<String, RoutineError> {
    let request: Value =
        serde_json::from_str(&body).map_err(|e| RoutineError::Failed(e.to_string()))?;
    let arguments = json!({"location": request["location"], "date": request["date"]});
    let forecast = tools
        .call_tool("weather_forecast", &arguments.to_string())
        .await
        .map_err(RoutineError::Failed)?;
    let forecast: Value = serde_json::from_str(&forecast).unwrap();
    Ok(json!({
        "temperature": forecast["temperature_c"],
        "precipitation": forecast["precipitation_mm"],
        "weatherCondition": forecast["condition"],
    })
    .to_string())
}

/// An LLM that answers every responder step with a fixed final answer, and fails the test if
/// it is asked about suitability (a routine implies the protocol is allowed).
fn fallback_llm() -> Arc<ScriptedLlm> {
    ScriptedLlm::new(|request| match schema_name(request) {
        Some("step") => {
            Ok(json!({"tool": "final_answer", "answer": {"weatherCondition": "llm"}}).to_string())
        }
        other => panic!("unexpected LLM request {other:?}"),
    })
}

/// Sends `text` under the weather protocol and checks that the echo routine answered it.
async fn assert_echoes(node: &Node, text: &str) {
    let reply = node.handle(weather_request(Body::Text(text.into()))).await;
    assert_eq!(
        reply.body.unwrap().to_text(),
        json!({"echo": text}).to_string()
    );
}

/// The newest request `node` recorded.
async fn last_request(node: &Node) -> RequestRecord {
    agora_testkit::recent_requests(node, 1).await.remove(0)
}

fn spec(name: &str, key: &str, tools: &[&str]) -> RoutineSpec {
    human_routine(name, WEATHER_PD, key, tools)
}

fn weather_request(body: Body) -> Request {
    Request {
        protocol: ProtocolRef::Protocol(ProtocolHash::of(WEATHER_PD.as_bytes())),
        hash_dialect: HashDialect::Hex,
        sources: vec![],
        body,
        multiround: false,
    }
}

fn london() -> Body {
    Body::Json(json!({"location": "London, UK", "date": "2024-09-27"}))
}

/// A node with the weather tool, `llm` and a fresh scripted engine, in a new temporary folder.
async fn scripted_node(llm: Arc<ScriptedLlm>) -> (tempfile::TempDir, ScriptedRoutineEngine, Node) {
    let dir = temp_dir();
    let engine = engine();
    let node = node_with(dir.path(), llm, &engine).await;
    (dir, engine, node)
}

async fn node_with(
    dir: &std::path::Path,
    llm: Arc<ScriptedLlm>,
    engine: &ScriptedRoutineEngine,
) -> agora_node::Node {
    NodeBuilder::new(llm, dir)
        .config(|c| c.tools = vec![weather_tool()])
        .routine_engine(Arc::new(engine.clone()))
        .build()
        .await
}

#[tokio::test]
async fn a_routine_answers_without_the_llm() {
    let (_dir, engine, node) = scripted_node(ScriptedLlm::unreachable()).await;
    let routine = node.add_routine(spec("echo", "echo", &[])).await.unwrap();
    assert_eq!(routine.status, RoutineStatus::Active);
    assert_eq!((engine.builds(), engine.loads()), (1, 1));

    // A JSON body gets a JSON reply, a text body a text reply.
    let reply = node.handle(weather_request(london())).await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
    let expected_echo = london().to_text();
    assert_eq!(reply.body, Some(Body::Json(json!({"echo": expected_echo}))));
    assert_echoes(&node, "hello").await;
    // Nothing was compiled on the request path.
    assert_eq!((engine.loads(), engine.runs()), (1, 2));

    assert!(agora_testkit::llm_calls(&node).await.is_empty());
    let requests = agora_testkit::recent_requests(&node, 10).await;
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.path, RequestPath::Routine);
        assert_eq!(request.llm_calls, 0);
        assert_eq!(request.routine_id, Some(routine.id));
        assert_eq!(request.routine_error, None);
    }
    let listed = node.routines().list().await.unwrap();
    assert_eq!((listed[0].runs, listed[0].failures), (2, 0));
    // Adding the routine stored the PD and allowed the protocol.
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    assert!(node.store().document(&hash).await.unwrap().is_some());
    assert!(suitability(&node, &hash).await.allowed);
}

#[tokio::test]
async fn a_text_answer_to_a_json_body_stays_text() {
    let (_dir, _engine, node) = scripted_node(ScriptedLlm::unreachable()).await;
    node.add_routine(spec("text", "text", &[])).await.unwrap();
    let reply = node.handle(weather_request(london())).await;
    assert_eq!(reply.body, Some(Body::Text("plain words".into())));
}

#[tokio::test]
async fn a_routine_calls_its_granted_tool() {
    let (_dir, _engine, node) = scripted_node(ScriptedLlm::unreachable()).await;
    node.add_routine(spec("weather", "weather", &["weather_forecast"]))
        .await
        .unwrap();
    let reply = node.handle(weather_request(london())).await;
    let forecast = WeatherForecastTool::new(7).forecast("London, UK", "2024-09-27");
    assert_eq!(
        reply.body,
        Some(Body::Json(json!({
            "temperature": forecast["temperature_c"],
            "precipitation": forecast["precipitation_mm"],
            "weatherCondition": forecast["condition"],
        })))
    );
    assert!(agora_testkit::llm_calls(&node).await.is_empty());
}

#[tokio::test]
async fn tools_are_granted_by_name_and_their_arguments_validated() {
    let (_dir, _engine, node) = scripted_node(ScriptedLlm::unreachable()).await;
    node.add_routine(spec("probe", "probe", &[])).await.unwrap();
    let reply = node
        .handle(weather_request(Body::Text("weather_forecast".into())))
        .await;
    assert_eq!(
        reply.body.unwrap().to_text(),
        "refused: tool weather_forecast is not granted to this routine"
    );

    // Granted, the tool runs, but only with arguments its schema accepts.
    node.add_routine(spec("probe-granted", "probe", &["weather_forecast"]))
        .await
        .unwrap();
    let reply = node
        .handle(weather_request(Body::Text("weather_forecast".into())))
        .await;
    let text = reply.body.unwrap().to_text();
    assert!(
        text.starts_with("refused: invalid arguments for weather_forecast"),
        "{text}"
    );
    assert!(agora_testkit::llm_calls(&node).await.is_empty());
}

#[tokio::test]
async fn a_failing_routine_falls_back_to_the_llm_and_the_failure_is_recorded() {
    let llm = fallback_llm();
    let (_dir, _engine, node) = scripted_node(llm.clone()).await;
    let routine = node.add_routine(spec("trap", "trap", &[])).await.unwrap();

    let reply = node.handle(weather_request(london())).await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
    assert_eq!(
        reply.body,
        Some(Body::Json(json!({"weatherCondition": "llm"})))
    );
    // The responder only: no suitability check on the way back.
    assert_eq!(llm.call_count(), 1);
    assert_eq!(llm_categories(&node).await, ["conversation"]);

    let request = last_request(&node).await;
    assert_eq!(request.path, RequestPath::Fallback);
    assert_eq!(request.llm_calls, 1);
    assert_eq!(request.routine_id, Some(routine.id));
    let error = request.routine_error.clone().unwrap();
    assert!(error.contains("trapped"), "{error}");

    // The failure shows in the registry: count, last error, time.
    let listed = node.routines().find("trap").await.unwrap();
    assert_eq!((listed.runs, listed.failures), (1, 1));
    assert_eq!(listed.last_error.as_deref(), Some(error.as_str()));
    assert!(listed.last_failure_at_ms.is_some());
    // A human routine stays active however often it fails.
    assert_eq!(listed.status, RoutineStatus::Active);
    let usage = agora_testkit::usage(&node, &ProtocolHash::of(WEATHER_PD.as_bytes())).await;
    assert_eq!((usage.fallback, usage.routine, usage.llm), (1, 0, 0));
}

#[tokio::test]
async fn a_routine_past_its_deadline_falls_back() {
    let (_dir, _engine, node) = scripted_node(fallback_llm()).await;
    let mut slow = spec("slow", "slow", &[]);
    slow.limits.timeout = Duration::from_millis(20);
    node.add_routine(slow).await.unwrap();
    let reply = node.handle(weather_request(london())).await;
    assert_eq!(
        reply.body,
        Some(Body::Json(json!({"weatherCondition": "llm"})))
    );
    let error = node
        .routines()
        .find("slow")
        .await
        .unwrap()
        .last_error
        .unwrap();
    assert!(error.contains("timed out"), "{error}");
}

#[tokio::test]
async fn without_fallback_a_routine_failure_is_the_reply() {
    let dir = temp_dir();
    let engine = engine();
    let node = NodeBuilder::new(ScriptedLlm::unreachable(), dir.path())
        .config(|c| c.routines.fallback_to_llm = false)
        .routine_engine(Arc::new(engine.clone()))
        .build()
        .await;
    node.add_routine(spec("trap", "trap", &[])).await.unwrap();
    let reply = node.handle(weather_request(london())).await;
    assert_eq!(reply.status, Status::Failure);
    let error = reply.error.unwrap();
    // The peer reads a sentence and the query id; the routine's own error stays with the node.
    assert!(
        error.contains("routine for the protocol failed") && !error.contains("trapped"),
        "{error}"
    );
    let request = last_request(&node).await;
    assert!(error.contains(&request.query_id), "{error}");
    let detail = request.error_detail.clone().unwrap();
    assert!(
        detail.contains("routine trap failed") && detail.contains("trapped"),
        "{detail}"
    );
    assert_eq!(request.path, RequestPath::Routine);
    assert_eq!(request.status, "failure");
    assert_eq!(node.routines().find("trap").await.unwrap().failures, 1);
}

#[tokio::test]
async fn routines_survive_a_restart() {
    let dir = temp_dir();
    {
        let node = node_with(dir.path(), ScriptedLlm::unreachable(), &engine()).await;
        node.add_routine(spec("echo", "echo", &[])).await.unwrap();
    }
    // A new process: a fresh engine, the same store.
    let engine = engine();
    let node = node_with(dir.path(), ScriptedLlm::unreachable(), &engine).await;
    // Loaded at start-up from the stored component, not rebuilt.
    assert_eq!((engine.builds(), engine.loads()), (0, 1));
    assert_echoes(&node, "again").await;
    assert_eq!(last_request(&node).await.path, RequestPath::Routine);
}

#[tokio::test]
async fn one_routine_answers_a_protocol_at_a_time() {
    let llm = fallback_llm();
    let (_dir, _engine, node) = scripted_node(llm.clone()).await;
    let first = node.add_routine(spec("first", "text", &[])).await.unwrap();
    let second = node.add_routine(spec("second", "echo", &[])).await.unwrap();
    let status = |name: &'static str| {
        let node = node.clone();
        async move { node.routines().find(name).await.unwrap().status }
    };
    assert_eq!(status("first").await, RoutineStatus::Disabled);
    assert_eq!(status("second").await, RoutineStatus::Active);
    let text = Body::Text("x".into());
    let answer = |node: agora_node::Node, body: Body| async move {
        node.handle(weather_request(body))
            .await
            .body
            .unwrap()
            .to_text()
    };
    assert_eq!(
        answer(node.clone(), text.clone()).await,
        json!({"echo": "x"}).to_string()
    );

    node.enable_routine(&first.id.to_string()).await.unwrap();
    assert_eq!(status("second").await, RoutineStatus::Disabled);
    assert_eq!(answer(node.clone(), text.clone()).await, "plain words");

    // No active routine: the LLM answers again, on the plain path.
    node.disable_routine("first").await.unwrap();
    assert_eq!(
        answer(node.clone(), text.clone()).await,
        json!({"weatherCondition": "llm"}).to_string()
    );
    assert_eq!(last_request(&node).await.path, RequestPath::Llm);

    node.remove_routine("second").await.unwrap();
    assert!(matches!(
        node.routines().find(&second.id.to_string()).await,
        Err(RegistryError::NotFound(_))
    ));
    assert_eq!(node.routines().list().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_multiround_request_goes_to_the_llm() {
    let (_dir, engine, node) = scripted_node(fallback_llm()).await;
    node.add_routine(spec("echo", "echo", &[])).await.unwrap();
    let mut request = weather_request(london());
    request.multiround = true;
    let reply = node.handle(request).await;
    assert!(reply.conversation_id.is_some());
    assert_eq!(engine.runs(), 0);
}

#[tokio::test]
async fn wellknown_lists_protocols_served_by_routines() {
    let dir = temp_dir();
    let node = node_with(dir.path(), ScriptedLlm::unreachable(), &engine()).await;
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    assert!(node.wellknown().await.unwrap().is_empty());
    node.add_routine(spec("echo", "echo", &[])).await.unwrap();
    // Listed even if the operator's decision is withdrawn later: the routine serves it.
    node.store().clear_suitability(&hash).await.unwrap();
    let listing = node.wellknown().await.unwrap();
    assert_eq!(
        listing.get(&hash.to_hex()),
        Some(&vec![node.document_url(&hash)])
    );
    node.disable_routine("echo").await.unwrap();
    assert!(node.wellknown().await.unwrap().is_empty());
}

#[tokio::test]
async fn changes_from_another_process_are_picked_up_by_the_sync() {
    let (dir, engine, node) = scripted_node(fallback_llm()).await;
    assert!(!node.sync_routines().await.unwrap().changed);

    // What `agora routine add` does: its own store connection, its own engine.
    let cli_store = Store::connect(&sqlite_url(dir.path())).await.unwrap();
    let cli = RoutineRegistry::new(
        cli_store,
        Some(Arc::new(engine.clone())),
        ToolRegistry::default(),
        Arc::new(SystemClock),
    );
    cli.add(spec("echo", "echo", &[])).await.unwrap();

    // Until the node syncs, the LLM answers (the document is now in the store).
    let reply = node.handle(weather_request(Body::Text("x".into()))).await;
    assert_eq!(
        reply.body.unwrap().to_text(),
        json!({"weatherCondition": "llm"}).to_string()
    );
    let report = node.sync_routines().await.unwrap();
    assert!(report.changed);
    assert_eq!((report.active, report.loaded), (1, 1));
    let reply = node.handle(weather_request(Body::Text("x".into()))).await;
    assert_eq!(
        reply.body.unwrap().to_text(),
        json!({"echo": "x"}).to_string()
    );
    // Nothing changed since: the next sync reads one number and loads nothing.
    let loads = engine.loads();
    assert!(!node.sync_routines().await.unwrap().changed);
    assert_eq!(engine.loads(), loads);

    cli.disable("echo").await.unwrap();
    node.sync_routines().await.unwrap();
    let reply = node.handle(weather_request(Body::Text("x".into()))).await;
    assert_eq!(
        reply.body.unwrap().to_text(),
        json!({"weatherCondition": "llm"}).to_string()
    );
}

#[tokio::test]
async fn the_registry_refuses_what_it_cannot_serve() {
    let (_dir, _engine, node) = scripted_node(ScriptedLlm::unreachable()).await;
    let registry = node.routines();

    let result = node
        .add_routine(spec("broken", "no-such-routine", &[]))
        .await;
    assert!(
        matches!(&result, Err(RegistryError::Routine(RoutineError::Build(_)))),
        "{result:?}"
    );
    let result = node.add_routine(spec("tooly", "echo", &["teleport"])).await;
    assert!(
        matches!(&result, Err(RegistryError::UnknownTool { tool, available }) if tool == "teleport" && available == "weather_forecast"),
        "{result:?}"
    );
    let mut by_hash = spec("by-hash", "echo", &[]);
    by_hash.protocol = ProtocolInput::Hash(ProtocolHash::of(b"never stored"));
    assert!(matches!(
        node.add_routine(by_hash).await,
        Err(RegistryError::UnknownProtocol(_))
    ));
    for name in ["", "12", "has space", &"x".repeat(65)] {
        assert!(
            matches!(
                node.add_routine(spec(name, "echo", &[])).await,
                Err(RegistryError::Invalid(_))
            ),
            "{name:?}"
        );
    }
    let mut greedy = spec("greedy", "echo", &[]);
    greedy.limits.memory_bytes = 64 << 30;
    assert!(matches!(
        node.add_routine(greedy).await,
        Err(RegistryError::Invalid(_))
    ));
    // Nothing was stored, and the protocol was not allowed.
    assert!(registry.list().await.unwrap().is_empty());
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    assert!(node.store().suitability(&hash).await.unwrap().is_none());

    node.add_routine(spec("echo", "echo", &[])).await.unwrap();
    assert!(matches!(
        node.add_routine(spec("echo", "text", &[])).await,
        Err(RegistryError::NameTaken(_))
    ));
    // Now the document is stored, a bare hash works.
    let mut by_hash = spec("by-hash", "text", &[]);
    by_hash.protocol = ProtocolInput::Hash(hash);
    by_hash.activate = false;
    let added = node.add_routine(by_hash).await.unwrap();
    assert_eq!(added.status, RoutineStatus::Disabled);

    // A test run uses the routine's tools and limits and records nothing.
    let result = registry.test("by-hash", "{}").await.unwrap();
    assert_eq!(result, Ok("plain words".to_string()));
    assert!(agora_testkit::recent_requests(&node, 10).await.is_empty());
}

#[tokio::test]
async fn a_node_without_an_engine_keeps_routines_but_does_not_run_them() {
    let dir = temp_dir();
    {
        let node = node_with(dir.path(), ScriptedLlm::unreachable(), &engine()).await;
        node.add_routine(spec("echo", "echo", &[])).await.unwrap();
    }
    let node = NodeBuilder::new(fallback_llm(), dir.path()).build().await;
    let report = node.sync_routines().await.unwrap();
    assert_eq!(report.active, 0);
    let reply = node.handle(weather_request(Body::Text("x".into()))).await;
    assert_eq!(
        reply.body.unwrap().to_text(),
        json!({"weatherCondition": "llm"}).to_string()
    );
    assert!(matches!(
        node.add_routine(spec("other", "echo", &[])).await,
        Err(RegistryError::NoEngine)
    ));
}

#[tokio::test]
async fn routines_call_routines_through_call_protocol_at_most_three_deep() {
    // A routine that asks its own protocol's routine again, one level deeper each time, until the
    // tool refuses; the deepest one replies with where it stopped and why.
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes()).to_hex();
    let engine = ScriptedRoutineEngine::new().routine("recurse", move |body, tools| {
        let hash = hash.clone();
        async move {
            let depth: u64 = body.trim().parse().unwrap_or(0);
            let arguments = json!({"protocol": hash, "body": (depth + 1).to_string()});
            match tools
                .call_tool("call_protocol", &arguments.to_string())
                .await
            {
                Ok(inner) => Ok(inner),
                Err(error) => Ok(json!({"stopped_at": depth, "error": error}).to_string()),
            }
        }
    });
    let dir = temp_dir();
    let node = NodeBuilder::new(ScriptedLlm::unreachable(), dir.path())
        .config(|c| {
            c.tools = vec![agora_node::ToolConfig::builtin(
                "call_protocol",
                "call_protocol",
                0,
            )]
        })
        .routine_engine(Arc::new(engine))
        .build()
        .await;
    node.add_routine(spec("recurse", "recurse", &["call_protocol"]))
        .await
        .unwrap();
    let reply = node.handle(weather_request(Body::Text("0".into()))).await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
    let body: Value = serde_json::from_str(&reply.body.unwrap().to_text()).unwrap();
    assert_eq!(body["stopped_at"], 3, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("at most 3 deep"),
        "{body}"
    );
}
