//! Per-request cost of routines: a fresh instance plus one `handle` call, 1000 times, for the
//! JavaScript and the C weather routines, and for two reference JavaScript routines (an echo,
//! the floor; and the feasibility study's `add` routine, to compare with its numbers). Prints
//! the median and p99 (not a test: timings are for people). Needs `AGORA_JS_ENGINE` and `AGORA_ROUTINE_WEATHER_C` (source
//! `~/.cache/agora/env.sh` after `scripts/install.sh`).
//!
//! Run with `cargo bench -p agora-routines`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../tests/it/common/forecast.rs"]
mod forecast;
use agora_routine_contract::{
    LoadedRoutine, RoutineEngine, RoutineLimits, RoutineSource, ToolHost,
};
use agora_routines::{RuntimeConfig, WasmRuntime};

const REQUESTS: usize = 1000;
const WARM_UP: usize = 100;
const WEATHER: &str = r#"{"location":"London, UK","date":"2024-09-27"}"#;
const ECHO_JS: &str = "function handle(body) { return body; }";
const ADD_JS: &str = r#"
function handle(body) {
  const req = JSON.parse(body);
  const r = callTool("add", JSON.stringify({ a: req.a, b: req.b }));
  return JSON.stringify({ sum: r.sum, greeting: "hello " + req.name });
}"#;
const ADD: &str = r#"{"a":2,"b":40,"name":"agora"}"#;

/// `weather_forecast` (a generator of the node tool's shape, seed 7) and `add`.
struct Tools(u64);

#[async_trait::async_trait]
impl ToolHost for Tools {
    async fn call_tool(&self, name: &str, arguments: &str) -> Result<String, String> {
        let args: serde_json::Value = serde_json::from_str(arguments).map_err(|e| e.to_string())?;
        match (name, args["location"].as_str(), args["date"].as_str()) {
            ("weather_forecast", Some(location), Some(date)) => {
                Ok(forecast::forecast(self.0, location, date).to_string())
            }
            ("add", _, _) => {
                let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
                Ok(serde_json::json!({ "sum": sum }).to_string())
            }
            _ => Err(format!("tool `{name}` refused")),
        }
    }
}

fn env_path(var: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => {
            eprintln!(
                "{var} is not set: run scripts/install.sh, then `source ~/.cache/agora/env.sh`"
            );
            std::process::exit(2);
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index]
}

async fn measure(name: &str, routine: &Arc<dyn LoadedRoutine>, body: &str) {
    let tools: Arc<dyn ToolHost> = Arc::new(Tools(7));
    let limits = RoutineLimits::default();
    for _ in 0..WARM_UP {
        routine
            .run(body, Arc::clone(&tools), limits)
            .await
            .expect("routine answers");
    }
    let mut samples = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        let started = Instant::now();
        let reply = routine.run(body, Arc::clone(&tools), limits).await;
        samples.push(started.elapsed());
        reply.expect("routine answers");
    }
    samples.sort();
    println!(
        "{name:<28} fresh instance + handle: median {:>7.1} µs   p99 {:>7.1} µs   ({REQUESTS} requests)",
        percentile(&samples, 0.5).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
    );
}

async fn timed<T>(what: &str, future: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let value = future.await;
    println!(
        "{what:<28} {:>9.1} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    value
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let js_engine = env_path("AGORA_JS_ENGINE");
    let c_core = std::fs::read(env_path("AGORA_ROUTINE_WEATHER_C")).expect("C routine");
    let js_source = include_str!("../../../routines/weather-forecast/routine.js");
    let artifacts = tempfile::tempdir().expect("temp dir");
    let runtime = WasmRuntime::new(RuntimeConfig {
        js_engine: Some(js_engine),
        artifact_dir: Some(artifacts.path().to_path_buf()),
        ..RuntimeConfig::default()
    })
    .expect("runtime");

    let source = RoutineSource::JavaScript(js_source.into());
    let js = timed("JS build (first, + engine)", runtime.build(&source))
        .await
        .expect("build");
    timed("JS build (second)", runtime.build(&source))
        .await
        .expect("build");
    let js = timed("JS load (Cranelift)", runtime.load(&js))
        .await
        .expect("load");
    let c = RoutineSource::Component(c_core);
    let c = timed("C componentize", runtime.build(&c))
        .await
        .expect("componentize");
    let c = timed("C load (Cranelift)", runtime.load(&c))
        .await
        .expect("load");

    measure("weather-forecast-js", &js, WEATHER).await;
    measure("weather-forecast-c", &c, WEATHER).await;
    for (name, source, body) in [
        ("echo-js", ECHO_JS, "{}"),
        ("add-js (feasibility)", ADD_JS, ADD),
    ] {
        let component = runtime
            .build(&RoutineSource::JavaScript(source.into()))
            .await
            .expect("build");
        let routine = runtime.load(&component).await.expect("load");
        measure(name, &routine, body).await;
    }
}
