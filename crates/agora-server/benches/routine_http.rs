//! Benchmark: the routine-served Agora request path over HTTP, for the shipped JavaScript
//! weather routine and the compiled C one, next to a bare axum JSON echo measured in the same
//! run.
//!
//! Every server runs in this process on 127.0.0.1: the echo, and one node per routine (each with
//! its own SQLite store). One client pool drives each with the same concurrency and request
//! count, in alternating rounds (echo, JS, C, echo, JS, C, ...) so that drift in the machine's
//! load hits all alike. It prints throughput and p50/p99 latency per side and each routine's
//! throughput ratio to the echo. Needs `AGORA_JS_ENGINE`; the C side runs when
//! `AGORA_ROUTINE_WEATHER_C` names the built C routine (source `~/.cache/agora/env.sh`).
//! Run: `cargo bench -p agora-server --bench routine_http` (`AGORA_BENCH_CONCURRENCY=N` for N
//! requests in flight per side instead of 8). The nodes run the whole edge (rate limiter,
//! idempotency, deadlines, client identity) with a per-client budget the bench cannot use up.
//! Not a test: it asserts nothing about speed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails loudly

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agora_protocol::ProtocolHash;
use agora_routines::{RuntimeConfig, WasmRuntime};
use agora_testkit::{NodeBuilder, ScriptedLlm, temp_dir};

use axum::routing::post;
use base64::Engine as _;
use serde_json::{Value, json};

/// Serves a bench node with the node's real router and edge, the per-client budgets on but too
/// large for the bench's one client to use up (the default, 1200 routine requests a minute,
/// refuses it within a second): the bench measures the limiter's cost, not its refusals.
fn serve_unbudgeted(
    served: agora_testkit::Served,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        let mut edge = agora_server::config::EdgeSettings::default();
        edge.rate_limit.routine_per_minute = 1_000_000_000;
        edge.rate_limit.routine_burst = 1_000_000;
        let state =
            agora_server::AppState::new(served.node, served.admin_token, served.max_body_bytes, 64)
                .with_edge(&edge)
                .expect("the bench's edge settings are valid");
        let _ = agora_server::app::serve_state(served.listener, state, served.shutdown).await;
    })
}

/// Requests in flight per side, unless `AGORA_BENCH_CONCURRENCY` says otherwise.
const DEFAULT_CONCURRENCY: usize = 8;
const REQUESTS_PER_ROUND: usize = 2000;
const ROUNDS: usize = 3;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn concurrency() -> usize {
    std::env::var("AGORA_BENCH_CONCURRENCY")
        .ok()
        .and_then(|value| value.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_CONCURRENCY)
}

/// Sends `total` POSTs with [`concurrency`] workers; returns per-request latencies and wall time.
async fn drive(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
    total: usize,
) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let workers_n = concurrency();
    let per_worker = total / workers_n;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..workers_n {
        let client = client.clone();
        let url = url.to_string();
        let body = body.clone();
        workers.spawn(async move {
            let mut latencies = Vec::with_capacity(per_worker);
            for _ in 0..per_worker {
                let t = Instant::now();
                let response = client.post(&url).json(&body).send().await.expect("request");
                let reply: Value = response.json().await.expect("JSON reply");
                assert!(
                    reply.get("status").is_none() || reply["status"] == "success",
                    "{reply}"
                );
                latencies.push(t.elapsed());
            }
            latencies
        });
    }
    let mut all = Vec::with_capacity(total);
    while let Some(latencies) = workers.join_next().await {
        all.extend(latencies.expect("worker"));
    }
    (all, started.elapsed())
}

/// The machine's 1, 5 and 15 minute load averages (Linux), to judge how quiet the run was.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// One server under test and what the rounds measured of it.
struct Side {
    name: &'static str,
    label: &'static str,
    url: String,
    latencies: Vec<Duration>,
    wall: Duration,
}

impl Side {
    fn new(name: &'static str, label: &'static str, url: String) -> Self {
        Self {
            name,
            label,
            url,
            latencies: Vec::new(),
            wall: Duration::ZERO,
        }
    }

    fn report(&mut self) -> f64 {
        self.latencies.sort();
        let throughput = self.latencies.len() as f64 / self.wall.as_secs_f64();
        println!(
            "{:<28} {:>8} req  {:>9.0} req/s  p50 {:>7.1} µs  p99 {:>7.1} µs",
            self.name,
            self.latencies.len(),
            throughput,
            percentile(&self.latencies, 0.50).as_secs_f64() * 1e6,
            percentile(&self.latencies, 0.99).as_secs_f64() * 1e6,
        );
        throughput
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let engine = std::env::var_os("AGORA_JS_ENGINE")
        .map(PathBuf::from)
        .expect("AGORA_JS_ENGINE: run scripts/install.sh and source ~/.cache/agora/env.sh");
    let c_component = std::env::var_os("AGORA_ROUTINE_WEATHER_C")
        .filter(|path| !path.is_empty())
        .map(|path| std::fs::read(path).expect("AGORA_ROUTINE_WEATHER_C is readable"));
    if c_component.is_none() {
        eprintln!("AGORA_ROUTINE_WEATHER_C is not set: measuring the JavaScript routine only");
    }
    if std::env::var_os("RUST_BACKTRACE").is_some()
        && std::env::var_os("RUST_LIB_BACKTRACE").is_none()
    {
        // wasmtime builds an error value when a routine's store is dropped, and with
        // RUST_BACKTRACE set that captures a backtrace on every request.
        eprintln!(
            "note: RUST_BACKTRACE is set: every routine run captures a backtrace; \
             set RUST_LIB_BACKTRACE=0 to measure as a node runs without it"
        );
    }
    println!("load average before: {}", load_average());

    // The baseline: a bare axum JSON echo.
    let echo = axum::Router::new().route(
        "/",
        post(|axum::Json(v): axum::Json<Value>| async move { axum::Json(v) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo_url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, echo).await.unwrap() });

    // The nodes: one per routine, each with its own store, sharing one routine runtime; no LLM
    // (it would panic if called).
    let dir = temp_dir();
    let runtime = Arc::new(
        WasmRuntime::new(RuntimeConfig {
            js_engine: Some(engine),
            artifact_dir: Some(dir.path().join("artifacts")),
            ..RuntimeConfig::default()
        })
        .expect("routine runtime"),
    );
    let pd = std::fs::read_to_string(repo().join("protocols/weather-forecast.md")).unwrap();
    let source =
        std::fs::read_to_string(repo().join("routines/weather-forecast/routine.js")).unwrap();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency())
        .build()
        .unwrap();
    let mut routines = vec![(
        "JS",
        json!({"name": "weather-forecast", "protocolText": pd, "source": source, "tools": ["weather_forecast"]}),
    )];
    if let Some(component) = &c_component {
        routines.push((
            "C",
            json!({"name": "weather-forecast-c", "protocolText": pd,
                   "wasmBase64": base64::engine::general_purpose::STANDARD.encode(component),
                   "tools": ["weather_forecast"]}),
        ));
    }
    let mut servers = Vec::new();
    for (name, routine) in routines {
        let store_dir = tempfile::tempdir_in(dir.path()).unwrap();
        let server = NodeBuilder::new(ScriptedLlm::unreachable(), store_dir.path())
            .config(|c| c.tools = vec![agora_testkit::weather_tool()])
            .routine_engine(runtime.clone())
            .admin_token("bench")
            .spawn_with(serve_unbudgeted)
            .await;
        let added = client
            .post(format!("{}/admin/routines", server.url))
            .bearer_auth("bench")
            .json(&routine)
            .send()
            .await
            .unwrap();
        assert!(added.status().is_success(), "{:?}", added.text().await);
        servers.push((name, server, store_dir));
    }
    let hash = ProtocolHash::of(pd.as_bytes());
    let request = json!({
        "protocolHash": hash.to_base64(),
        "protocolSources": [],
        "body": json!({"location": "London, UK", "date": "2024-09-27"}).to_string(),
    });
    let mut sides = vec![Side::new("axum JSON echo (baseline)", "echo", echo_url)];
    for (label, server, _) in &servers {
        let name = if *label == "JS" {
            "agora JS routine over HTTP"
        } else {
            "agora C routine over HTTP"
        };
        sides.push(Side::new(name, label, format!("{}/", server.url)));
    }

    // Warm-up: connections, caches, the routines' first instances.
    for side in &sides {
        drive(&client, &side.url, &request, 200).await;
    }
    for _ in 0..ROUNDS {
        for side in &mut sides {
            let (latencies, wall) = drive(&client, &side.url, &request, REQUESTS_PER_ROUND).await;
            side.latencies.extend(latencies);
            side.wall += wall;
        }
    }
    println!("load average after:  {}", load_average());
    println!(
        "concurrency {} (AGORA_BENCH_CONCURRENCY), {ROUNDS} alternating rounds of \
         {REQUESTS_PER_ROUND} requests per side",
        concurrency()
    );
    let throughputs: Vec<f64> = sides.iter_mut().map(Side::report).collect();
    for (side, throughput) in sides.iter().zip(&throughputs).skip(1) {
        println!(
            "ratio {} routine/echo throughput: {:.2}x",
            side.label,
            throughput / throughputs[0]
        );
    }
    for (label, server, _) in &servers {
        let calls = server.node.store().ledger().llm_calls(None).await.unwrap();
        println!("LLM calls during the run ({label} node): {}", calls.len());
    }
}
