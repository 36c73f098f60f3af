//! Benchmark: the routine-served Agora request path over HTTP, for the shipped JavaScript
//! weather routine and the compiled C one, next to a bare axum JSON echo measured in the same
//! run.
//!
//! Every server runs in this process on 127.0.0.1: the echo, and one node per routine (each with
//! its own SQLite store). One client pool drives each with the same concurrency and request
//! count, in alternating rounds (echo, JS, C, echo, JS, C, ...) so that drift in the machine's
//! load hits all alike. It prints throughput and p50/p99 latency per side and each routine's
//! throughput ratio to the echo. When `wrk` is on the PATH, the same request is then sent by
//! `wrk` (an external load generator, one thread) in alternating rounds, and its throughput,
//! p99 and errors are printed the same way. Last, each node's request ledger is checked to hold
//! every request the bench sent it. Needs `AGORA_JS_ENGINE`; the C side runs when
//! `AGORA_ROUTINE_WEATHER_C` names the built C routine (source `~/.cache/agora/env.sh`).
//! Run: `cargo bench -p agora-server --bench routine_http` (`AGORA_BENCH_CONCURRENCY=N` for N
//! requests in flight per side instead of 8). The nodes run the whole edge (rate limiter,
//! idempotency, deadlines, client identity) with a per-client budget the bench cannot use up.
//! `AGORA_BENCH_ONLY=echo|JS|C|JS+otel` drives that side alone (for a profiler attached to the
//! run).
//!
//! Side `JS+otel` is the JavaScript node again with OpenTelemetry export on and the receiver
//! down (an OTLP endpoint on a closed loopback port): it is served by a runtime of its own whose
//! threads report to a subscriber with the exporter; side `JS+rt` is the same on a second
//! runtime without one, so one run measures export on against off. It prints that ratio and the exporter's span
//! counts (exported, dropped). Not a test: it asserts nothing about speed.

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
/// large for the bench's one client to use up (the default, 1000 routine requests a second,
/// is below what the bench sends): the bench measures the limiter's cost, not its refusals.
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
/// Seconds of each `wrk` round (`AGORA_BENCH_WRK_SECONDS`).
const DEFAULT_WRK_SECONDS: u64 = 5;

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

/// What one `wrk` round measured.
#[derive(Default)]
struct WrkRound {
    requests: u64,
    seconds: f64,
    p99_us: f64,
    errors: u64,
}

/// Runs `wrk` for `seconds` against `url` with `connections` connections, POSTing the body and
/// headers `script` sets; `None` when `wrk` cannot be run.
fn run_wrk(
    url: &str,
    script: &std::path::Path,
    connections: usize,
    seconds: u64,
) -> Option<WrkRound> {
    let output = std::process::Command::new("wrk")
        .args([
            "-t1",
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
            "--latency",
            "-s",
        ])
        .arg(script)
        .arg(url)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let mut round = WrkRound {
        seconds: seconds as f64,
        ..WrkRound::default()
    };
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [n, "requests", "in", took, ..] => {
                round.requests = n.parse().unwrap_or(0);
                round.seconds =
                    parse_wrk_duration(took.trim_end_matches(',')).unwrap_or(round.seconds);
            }
            ["99%", latency] => {
                round.p99_us = parse_wrk_duration(latency).unwrap_or(f64::NAN) * 1e6
            }
            ["Non-2xx", "or", "3xx", "responses:", n] => round.errors += n.parse().unwrap_or(1),
            ["Socket", "errors:", rest @ ..] => {
                round.errors += rest
                    .iter()
                    .filter_map(|word| word.trim_end_matches(',').parse::<u64>().ok())
                    .sum::<u64>();
            }
            _ => {}
        }
    }
    output.status.success().then_some(round)
}

/// Seconds in a `wrk` duration such as `812.00us`, `1.20ms` or `5.00s`.
fn parse_wrk_duration(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match unit {
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        _ => return None,
    };
    Some(number * scale)
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
    /// Requests sent to it in all, warm-up and `wrk` included.
    sent: u64,
    wrk: Vec<WrkRound>,
}

impl Side {
    fn new(name: &'static str, label: &'static str, url: String) -> Self {
        Self {
            name,
            label,
            url,
            latencies: Vec::new(),
            wall: Duration::ZERO,
            sent: 0,
            wrk: Vec::new(),
        }
    }

    /// `wrk`'s throughput over all rounds, after printing it with the worst round's p99.
    fn report_wrk(&self) -> f64 {
        let requests: u64 = self.wrk.iter().map(|round| round.requests).sum();
        let seconds: f64 = self.wrk.iter().map(|round| round.seconds).sum();
        let errors: u64 = self.wrk.iter().map(|round| round.errors).sum();
        let p99 = self
            .wrk
            .iter()
            .map(|round| round.p99_us)
            .fold(0.0, f64::max);
        let throughput = requests as f64 / seconds;
        println!(
            "{:<28} {:>8} req  {:>9.0} req/s  p99 {:>7.1} µs (worst round)  errors {errors}",
            self.name, requests, throughput, p99,
        );
        throughput
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

/// The throughput of the exporter side against the same node on a runtime without one, and what became of
/// the exporter's spans so far.
fn report_export_cost(sides: &[Side], throughputs: &[f64], exporter: &agora_telemetry::Exporter) {
    let of = |label: &str| {
        sides
            .iter()
            .position(|side| side.label == label)
            .map(|i| throughputs[i])
    };
    if let (Some(off), Some(on)) = (of("JS+rt"), of("JS+otel")) {
        // Spans still in the batch are counted once it is sent (or fails).
        exporter.flush();
        let counts = exporter.counts();
        println!(
            "ratio JS+otel/JS+rt throughput (export on, receiver down / export off): {:.3}x; \
             spans exported {}, dropped (export failed) {}, dropped (queue full) {}, waiting {}",
            on / off,
            counts.exported,
            counts.dropped_export_failed,
            counts.dropped_queue_full,
            counts.waiting
        );
        if counts.exported
            + counts.dropped_export_failed
            + counts.dropped_queue_full
            + counts.waiting
            == 0
        {
            println!(
                "WARNING: the exporter saw no span, so this ratio does not measure export; \
                 the JS+otel side's spans did not reach its subscriber"
            );
        }
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
    // The exporter side's runtime: its threads report to a subscriber whose exporter sends to
    // a port nothing listens on.
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let plan = agora_telemetry::TelemetrySettings {
        endpoint: Some(format!("http://127.0.0.1:{closed_port}")),
        export_timeout_secs: 2,
        ..Default::default()
    }
    .plan("agora-bench", |_| None)
    .unwrap()
    .expect("an endpoint is set");
    let exporter = agora_telemetry::Exporter::start(&plan).unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::layer::SubscriberExt::with(
        tracing_subscriber::registry(),
        exporter.layer(),
    ));
    let traced = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("bench-otel")
        .on_thread_start(move || {
            // Kept for the thread's life.
            std::mem::forget(tracing::dispatcher::set_default(&dispatch));
        })
        .build()
        .unwrap();
    let traced_handle = traced.handle().clone();
    // The control: the same node on a second runtime with no subscriber, so the ratio is the
    // exporter's cost and not the second runtime's.
    let plain = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("bench-plain")
        .build()
        .unwrap();
    let plain_handle = plain.handle().clone();
    // The exporter side is set up first: a span's callsite decides once, at its first use,
    // which subscribers want it, and a first use on a thread without the exporter (another
    // side's) would leave the exporter side's spans unseen.
    let js = routines[0].1.clone();
    routines.insert(0, ("JS+rt", js.clone()));
    routines.insert(0, ("JS+otel", js));

    let mut servers = Vec::new();
    for (name, routine) in routines {
        let store_dir = tempfile::tempdir_in(dir.path()).unwrap();
        let server = NodeBuilder::new(ScriptedLlm::unreachable(), store_dir.path())
            .config(|c| {
                c.tools = vec![agora_testkit::weather_tool()];
                // No LLM to check with: the sampled requests' scratch copies are all a shadow
                // check puts on the request path, and the weather tool keeps no state.
                c.routines.shadow.share = 0.0;
            })
            .routine_engine(runtime.clone())
            .admin_token("bench");
        let server = if name == "JS+otel" || name == "JS+rt" {
            let handle = if name == "JS+otel" {
                traced_handle.clone()
            } else {
                plain_handle.clone()
            };
            server
                .spawn_with(move |served| {
                    let serving = handle.spawn(serve_unbudgeted(served));
                    Box::pin(async move {
                        let _ = serving.await;
                    })
                        as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
                })
                .await
        } else {
            server.spawn_with(serve_unbudgeted).await
        };
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
        let name = match *label {
            "JS" => "agora JS routine over HTTP",
            "JS+otel" => "JS routine, 2nd runtime, OTLP on, receiver down",
            "JS+rt" => "JS routine, 2nd runtime, no export",
            _ => "agora C routine over HTTP",
        };
        sides.push(Side::new(name, label, format!("{}/", server.url)));
    }

    if let Ok(only) = std::env::var("AGORA_BENCH_ONLY") {
        sides.retain(|side| side.label.eq_ignore_ascii_case(&only));
        servers.retain(|(label, _, _)| label.eq_ignore_ascii_case(&only));
        assert!(
            !sides.is_empty(),
            "AGORA_BENCH_ONLY={only}: no such side (echo, JS, C)"
        );
    }

    // Warm-up: connections, caches, the routines' first instances.
    for side in &mut sides {
        let (latencies, _) = drive(&client, &side.url, &request, 200).await;
        side.sent += latencies.len() as u64;
    }
    for _ in 0..ROUNDS {
        for side in &mut sides {
            let (latencies, wall) = drive(&client, &side.url, &request, REQUESTS_PER_ROUND).await;
            side.sent += latencies.len() as u64;
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
    let has_echo = sides[0].label == "echo";
    for (side, throughput) in sides.iter().zip(&throughputs).skip(1).filter(|_| has_echo) {
        println!(
            "ratio {} routine/echo throughput: {:.2}x",
            side.label,
            throughput / throughputs[0]
        );
    }
    report_export_cost(&sides, &throughputs, &exporter);

    // The external load generator, the same request, alternating rounds.
    let script = dir.path().join("post.lua");
    std::fs::write(
        &script,
        format!(
            "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.body = {}\n",
            serde_json::to_string(&request.to_string()).unwrap()
        ),
    )
    .unwrap();
    let seconds = std::env::var("AGORA_BENCH_WRK_SECONDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(DEFAULT_WRK_SECONDS);
    let mut wrk_ran = true;
    'rounds: for _ in 0..ROUNDS {
        for side in &mut sides {
            let url = side.url.clone();
            let script = script.clone();
            let connections = concurrency();
            let round =
                tokio::task::spawn_blocking(move || run_wrk(&url, &script, connections, seconds))
                    .await
                    .unwrap();
            let Some(round) = round else {
                eprintln!(
                    "wrk is not on the PATH (apt install wrk): no external load generator run"
                );
                wrk_ran = false;
                break 'rounds;
            };
            side.sent += round.requests;
            side.wrk.push(round);
        }
    }
    if wrk_ran {
        println!(
            "wrk -t1 -c{} --latency, {ROUNDS} alternating rounds of {seconds} s per side",
            concurrency()
        );
        let throughputs: Vec<f64> = sides.iter().map(Side::report_wrk).collect();
        for (side, throughput) in sides.iter().zip(&throughputs).skip(1).filter(|_| has_echo) {
            println!(
                "ratio {} routine/echo throughput (wrk): {:.2}x",
                side.label,
                throughput / throughputs[0]
            );
        }
        report_export_cost(&sides, &throughputs, &exporter);
    }

    // Every request a node answered is in its ledger. wrk counts only the replies it read, so a
    // node may have answered up to one request per connection more at the end of each round.
    let routine_sides = sides.iter().filter(|side| side.label != "echo");
    for ((label, server, _), side) in servers.iter().zip(routine_sides) {
        let usage = server.node.store().requests().usage(&hash).await.unwrap();
        let calls = server.node.store().ledger().llm_calls(None).await.unwrap();
        let slack = (concurrency() * side.wrk.len()) as u64;
        let complete = usage.routine as u64 >= side.sent
            && usage.routine as u64 <= side.sent + slack
            && usage.requests == usage.routine;
        println!(
            "ledger ({label} node): {} requests recorded, {} by the routine, {} sent,              {} LLM calls: {}",
            usage.requests,
            usage.routine,
            side.sent,
            calls.len(),
            if complete { "complete" } else { "INCOMPLETE" }
        );
    }
    exporter.shutdown();
    traced.shutdown_background();
    plain.shutdown_background();
}
