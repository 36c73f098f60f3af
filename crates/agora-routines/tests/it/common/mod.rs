//! Shared set-up of the routine runtime tests: where the engine and fixtures are, a runtime, and
//! a scripted tool host.
//!
//! The JavaScript engine and the C routine are built by `scripts/install.sh`, which records their
//! paths in `~/.cache/agora/env.sh`; `scripts/test.sh` sources it. Without them these tests fail
//! and say so, rather than passing without having run anything.

#![allow(dead_code)] // each test binary uses a different part

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agora_routine_contract::{
    LoadedRoutine, RoutineEngine, RoutineLimits, RoutineSource, ToolHost,
};
use agora_routines::{RuntimeConfig, WasmRuntime};

mod forecast;
pub use forecast::forecast;
use serde_json::{Value, json};

fn fixture(var: &str) -> PathBuf {
    let hint =
        "run scripts/install.sh, then `source ~/.cache/agora/env.sh` (scripts/test.sh does both)";
    let path = std::env::var_os(var)
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| panic!("{var} is not set: {hint}"));
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "{var}={} does not exist: {hint}",
        path.display()
    );
    path
}

/// `engine.core.wasm`, from `AGORA_JS_ENGINE`.
pub fn js_engine() -> PathBuf {
    fixture("AGORA_JS_ENGINE")
}

/// The C weather routine's core module, from `AGORA_ROUTINE_WEATHER_C`.
pub fn weather_c_core() -> Vec<u8> {
    std::fs::read(fixture("AGORA_ROUTINE_WEATHER_C")).expect("readable C routine")
}

/// A `.cwasm` cache shared by the test runs (compiling a JavaScript routine takes a second).
pub fn shared_artifacts() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("agora-routines-artifacts")
}

/// The configuration the tests start from: the engine, the shared cache.
pub fn config() -> RuntimeConfig {
    RuntimeConfig {
        js_engine: Some(js_engine()),
        artifact_dir: Some(shared_artifacts()),
        ..RuntimeConfig::default()
    }
}

pub fn runtime() -> WasmRuntime {
    WasmRuntime::new(config()).expect("runtime starts")
}

/// Builds and loads a JavaScript routine.
pub async fn load_js(runtime: &WasmRuntime, source: &str) -> Arc<dyn LoadedRoutine> {
    let component = runtime
        .build(&RoutineSource::JavaScript(source.into()))
        .await
        .expect("routine builds");
    runtime.load(&component).await.expect("routine loads")
}

pub fn limits(timeout_ms: u64, memory_mb: u64) -> RoutineLimits {
    RoutineLimits {
        timeout: Duration::from_millis(timeout_ms),
        memory_bytes: memory_mb * 1024 * 1024,
    }
}

/// Tools for the tests: `add` (`{a, b}` → `{sum}`), `weather_forecast` (a generator of the
/// node tool's shape, seed 7), `slow` (sleeps `ms`), and nothing else: any other name is refused, as the
/// node refuses tools it did not grant.
#[derive(Default)]
pub struct TestTools {
    pub calls: AtomicUsize,
}

pub const WEATHER_SEED: u64 = 7;

#[async_trait::async_trait]
impl ToolHost for TestTools {
    async fn call_tool(&self, name: &str, arguments: &str) -> Result<String, String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let args: Value =
            serde_json::from_str(arguments).map_err(|e| format!("bad arguments: {e}"))?;
        match name {
            "add" => {
                let (a, b) = (args["a"].as_f64(), args["b"].as_f64());
                match (a, b) {
                    (Some(a), Some(b)) => Ok(json!({ "sum": a + b }).to_string()),
                    _ => Err("add: a and b must be numbers".into()),
                }
            }
            "weather_forecast" => {
                let (Some(location), Some(date)) =
                    (args["location"].as_str(), args["date"].as_str())
                else {
                    return Err("weather_forecast: location and date are required strings".into());
                };
                Ok(forecast(WEATHER_SEED, location, date).to_string())
            }
            "slow" => {
                let ms = args["ms"].as_u64().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok("\"done\"".into())
            }
            other => Err(format!("tool `{other}` is not granted to this routine")),
        }
    }
}

pub fn tools() -> Arc<TestTools> {
    Arc::new(TestTools::default())
}

/// Checks a weather-protocol reply against the generator the tool uses (numbers compared as
/// numbers: `17.0` and `17` are the same temperature).
pub fn assert_weather(reply: &str, location: &str, date: &str) {
    let forecast = forecast(WEATHER_SEED, location, date);
    let reply = parse(reply);
    let fields = reply.as_object().expect("reply is an object");
    assert_eq!(fields.len(), 3, "exactly the protocol's fields: {reply}");
    assert_eq!(
        reply["temperature"].as_f64(),
        forecast["temperature_c"].as_f64(),
        "{reply}"
    );
    assert_eq!(
        reply["precipitation"].as_f64(),
        forecast["precipitation_mm"].as_f64(),
        "{reply}"
    );
    assert_eq!(reply["weatherCondition"], forecast["condition"], "{reply}");
}

pub fn parse(reply: &str) -> Value {
    serde_json::from_str(reply).unwrap_or_else(|e| panic!("reply is not JSON ({e}): {reply}"))
}
