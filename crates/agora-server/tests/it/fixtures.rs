//! Fixtures the test modules share: the weather task the sender tests run and the scripted sender
//! that negotiates it, a protocol database served on loopback, and what the real-model tests
//! need (Bob the weather agent, the routine runtime, the expected forecast).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use agora_llm::ChatRequest;
use agora_node::tools::WeatherForecastTool;
use agora_node::{Node, Task};
use agora_routines::{RuntimeConfig, WasmRuntime};
use agora_server::protocol_db::{ProtocolDbServerConfig, build_protocol_db, serve_protocol_db};
use agora_store::Attempt;
use agora_testkit::{NodeBuilder, ScriptedLlm, last_user_message, schema_name, weather_tool};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The sender tests' weather task: a location and a date in, `output_schema` out.
pub fn weather_task(output_schema: Value) -> Task {
    Task {
        name: "weather".into(),
        description: "Get the weather forecast for a location on a date.".into(),
        input_schema: json!({"type": "object", "required": ["location", "date"],
            "properties": {"location": {"type": "string"}, "date": {"type": "string"}}}),
        output_schema,
    }
}

/// An output of a temperature alone.
pub fn temperature_output() -> Value {
    json!({"type": "object", "required": ["temperature"],
        "properties": {"temperature": {"type": "number"}}})
}

/// The weather protocol's full output: temperature, precipitation and the sky's condition.
pub fn forecast_output() -> Value {
    json!({"type": "object",
        "required": ["temperature", "precipitation", "weatherCondition"],
        "properties": {"temperature": {"type": "number"}, "precipitation": {"type": "number"},
            "weatherCondition": {"type": "string", "enum": ["sunny", "cloudy", "rainy", "snowy"]}}})
}

/// A sender's scripted LLM: writes `body` as its message, reads every reply as 3.5 degrees, finds
/// every candidate protocol fit, and negotiates `protocol` (a `final_protocol` object): it
/// proposes the document, then closes with the protocol once the receiver answered.
pub fn negotiating_sender(body: Value, protocol: Value) -> Arc<ScriptedLlm> {
    ScriptedLlm::new(move |request: &ChatRequest| match schema_name(request) {
        None => Ok(body.to_string()),
        Some("task_output") => Ok(json!({"temperature": 3.5}).to_string()),
        Some("task_fit") => Ok(json!({"suitable": "yes", "reason": "it fits"}).to_string()),
        Some("negotiation_turn")
            if last_user_message(request).contains("The receiver answered") =>
        {
            Ok(json!({"message": "Final.", "final_protocol": protocol}).to_string())
        }
        Some("negotiation_turn") => {
            let document = protocol["document"].as_str().unwrap_or_default();
            let proposal = format!("I propose: {document}");
            Ok(json!({"message": proposal, "final_protocol": null}).to_string())
        }
        other => panic!("unexpected sender LLM request {other:?}"),
    })
}

/// A sender for the ladder tests: `llm`, with the explore and negotiate thresholds (runs of a
/// task with one target before each rung).
pub async fn ladder_sender(
    llm: Arc<ScriptedLlm>,
    dir: &Path,
    explore: i64,
    negotiate: i64,
) -> Node {
    NodeBuilder::new(llm, dir)
        .config(|c| {
            c.sender.explore_threshold = explore;
            c.sender.negotiate_threshold = negotiate;
        })
        .build()
        .await
}

/// A protocol database on 127.0.0.1:<ephemeral> with its own SQLite file, stopped on drop.
pub struct ProtocolDb {
    /// Its public URL.
    pub url: String,
    shutdown: CancellationToken,
    _dir: tempfile::TempDir,
}

impl ProtocolDb {
    /// Builds the database from `config` as `agora protocol-db run` does and serves it.
    pub async fn start(mut config: ProtocolDbServerConfig) -> ProtocolDb {
        let dir = agora_testkit::temp_dir();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        config.listen = listener.local_addr().unwrap();
        config.store = format!("sqlite://{}", dir.path().join("pdb.db").display());
        let running = build_protocol_db(config).await.unwrap();
        let url = running.config.public_url();
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        tokio::spawn(async move { serve_protocol_db(listener, &running, token).await });
        ProtocolDb {
            url,
            shutdown,
            _dir: dir,
        }
    }
}

impl Drop for ProtocolDb {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Bob's description in the real-model tests.
pub const BOB: &str = "Bob is a weather service. It gives weather forecasts (temperature, \
                       precipitation, sky condition) for a location and a date.";

/// Bob on the real local model: a weather service with the weather tool.
pub fn real_model_bob(dir: &Path) -> NodeBuilder {
    NodeBuilder::new(agora_testkit::local_llm(), dir).config(|c| {
        c.description = BOB.into();
        c.tools = vec![weather_tool()];
    })
}

/// The real routine runtime with the JavaScript engine `scripts/test.sh` builds.
pub fn js_runtime() -> WasmRuntime {
    let engine = std::env::var_os("AGORA_JS_ENGINE")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .expect("AGORA_JS_ENGINE is not set: source ~/.cache/agora/env.sh");
    WasmRuntime::new(RuntimeConfig {
        js_engine: Some(engine),
        artifact_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("agora-artifacts")),
        ..RuntimeConfig::default()
    })
    .expect("the routine runtime starts")
}

/// The weather protocol's reply for a location and date, from the weather tool (seed 7).
pub fn expected_forecast(location: &str, date: &str) -> Value {
    let forecast = WeatherForecastTool::new(7).forecast(location, date);
    json!({
        "temperature": forecast["temperature_c"],
        "precipitation": forecast["precipitation_mm"],
        "weatherCondition": forecast["condition"],
    })
}

/// Prints a programmer's attempts and how long `who` took, for reading a real-model run.
pub fn print_attempts<K>(who: &str, attempts: &[Attempt<K>], started: Instant) {
    for attempt in attempts {
        eprintln!(
            "attempt {} {}: {} ({} + {} tokens)\n{}\n",
            attempt.attempt,
            attempt.outcome,
            attempt.report,
            attempt.prompt_tokens,
            attempt.completion_tokens,
            attempt.source.as_deref().unwrap_or("(no source)")
        );
    }
    eprintln!(
        "{who}: {} attempt(s) in {:.1} s",
        attempts.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Serves a hand-built peer's `router` on `listener` (bound to 127.0.0.1 by the caller, who may
/// need its address first) until the returned token is cancelled.
pub fn serve_router(
    listener: tokio::net::TcpListener,
    router: axum::Router,
) -> tokio_util::sync::CancellationToken {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(token.cancelled_owned())
            .await
    });
    shutdown
}
