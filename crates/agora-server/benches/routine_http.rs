//! Benchmark: the routine-served Agora request path over HTTP, next to a
//! bare axum JSON echo measured in the same run.
//!
//! Both servers run in this process on 127.0.0.1; one client pool drives
//! each with the same concurrency and request count, in alternating rounds
//! (echo, routine, echo, routine, ...) so that drift in the machine's load
//! hits both alike. It prints throughput and p50/p99 latency per side and
//! the routine/echo throughput ratio. Run: `cargo bench -p agora-server`.
//! Not a test: it asserts nothing about speed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails loudly

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agora_protocol::ProtocolHash;
use agora_routines::{RuntimeConfig, WasmRuntime};
use agora_testkit::{NodeBuilder, ScriptedLlm, temp_dir};
use axum::routing::post;
use serde_json::{Value, json};

const CONCURRENCY: usize = 8;
const REQUESTS_PER_ROUND: usize = 2000;
const ROUNDS: usize = 3;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Sends `total` POSTs with `CONCURRENCY` workers; returns per-request latencies and wall time.
async fn drive(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
    total: usize,
) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let per_worker = total / CONCURRENCY;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

struct Side {
    latencies: Vec<Duration>,
    wall: Duration,
}

impl Side {
    fn report(&mut self, name: &str) -> f64 {
        self.latencies.sort();
        let throughput = self.latencies.len() as f64 / self.wall.as_secs_f64();
        println!(
            "{name:<28} {:>8} req  {:>9.0} req/s  p50 {:>7.1} µs  p99 {:>7.1} µs",
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

    // The baseline: a bare axum JSON echo.
    let echo = axum::Router::new().route(
        "/",
        post(|axum::Json(v): axum::Json<Value>| async move { axum::Json(v) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo_url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, echo).await.unwrap() });

    // The node: the shipped JS weather routine, no LLM (it would panic if called).
    let dir = temp_dir();
    let runtime = WasmRuntime::new(RuntimeConfig {
        js_engine: Some(engine),
        artifact_dir: Some(dir.path().join("artifacts")),
        ..RuntimeConfig::default()
    })
    .expect("routine runtime");
    let server = NodeBuilder::new(ScriptedLlm::unreachable(), dir.path())
        .config(|c| c.tools = vec![agora_testkit::weather_tool()])
        .routine_engine(Arc::new(runtime))
        .admin_token("bench")
        .spawn()
        .await;
    let pd = std::fs::read_to_string(repo().join("protocols/weather-forecast.md")).unwrap();
    let source =
        std::fs::read_to_string(repo().join("routines/weather-forecast/routine.js")).unwrap();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CONCURRENCY)
        .build()
        .unwrap();
    let added = client
        .post(format!("{}/admin/routines", server.url))
        .bearer_auth("bench")
        .json(&json!({"name": "weather-forecast", "protocolText": pd, "source": source, "tools": ["weather_forecast"]}))
        .send()
        .await
        .unwrap();
    assert!(added.status().is_success(), "{:?}", added.text().await);
    let hash = ProtocolHash::of(pd.as_bytes());
    let request = json!({
        "protocolHash": hash.to_base64(),
        "protocolSources": [],
        "body": json!({"location": "London, UK", "date": "2024-09-27"}).to_string(),
    });
    let node_url = format!("{}/", server.url);

    // Warm-up: connections, caches, the routine's first instance.
    drive(&client, &echo_url, &request, 200).await;
    drive(&client, &node_url, &request, 200).await;

    let mut echo_side = Side {
        latencies: Vec::new(),
        wall: Duration::ZERO,
    };
    let mut node_side = Side {
        latencies: Vec::new(),
        wall: Duration::ZERO,
    };
    for _ in 0..ROUNDS {
        let (l, w) = drive(&client, &echo_url, &request, REQUESTS_PER_ROUND).await;
        echo_side.latencies.extend(l);
        echo_side.wall += w;
        let (l, w) = drive(&client, &node_url, &request, REQUESTS_PER_ROUND).await;
        node_side.latencies.extend(l);
        node_side.wall += w;
    }
    println!(
        "concurrency {CONCURRENCY}, {ROUNDS} alternating rounds of {REQUESTS_PER_ROUND} requests per side"
    );
    let echo_rps = echo_side.report("axum JSON echo (baseline)");
    let node_rps = node_side.report("agora routine over HTTP");
    println!("ratio routine/echo throughput: {:.2}x", node_rps / echo_rps);
    let calls = server.node.store().llm_calls(None).await.unwrap();
    println!("LLM calls during the run: {}", calls.len());
}
