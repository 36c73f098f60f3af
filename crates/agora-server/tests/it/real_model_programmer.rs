//! The node writing its own routine with the real local model, end to end over loopback HTTP,
//! under the `review` activation policy: five weather-protocol requests answered by the LLM with
//! the weather tool, a JavaScript routine the node compiles from the LLM's tool calls with no LLM
//! call, built by the real WebAssembly runtime and examined on those requests, waiting while the
//! LLM answers, then approved through the admin API and answering the next requests with no LLM
//! call at all. (The `auto` policy's real-model path is `real_model_acting`'s.) And a shadow
//! check: the model answering again what the shipped weather routine answered, off the request
//! path.
//!
//! Ignored by plain `cargo test`: `scripts/test.sh` starts llama-server (temperature 0, fixed
//! seed, one slot) and runs it with `AGORA_TEST_LLM_URL` and `AGORA_JS_ENGINE` set.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;
use std::time::Instant;

use crate::fixtures::{expected_forecast, js_runtime, print_attempts, real_model_bob};
use crate::support::Spawn;
use agora_node::Activation;
use agora_protocol::{ProtocolHash, data_uri};
use agora_store::Routine;
use agora_store::{RequestPath, RoutineOrigin, RoutineStatus};
use agora_testkit::{TestServer, temp_dir};
use serde_json::{Value, json};

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");
/// A weather request over HTTP for `location` on `date`.
fn request(location: &str, date: &str) -> Value {
    json!({
        "protocolHash": ProtocolHash::of(WEATHER_PD.as_bytes()).to_hex(),
        "protocolSources": [data_uri::encode(WEATHER_PD)],
        "body": json!({"location": location, "date": date}).to_string(),
    })
}

/// Bob with the real model and the real routine runtime, writing routines after five
/// LLM-answered requests, under review.
async fn bob(dir: &std::path::Path) -> TestServer {
    real_model_bob(dir)
        .config(|c| {
            c.thresholds.implementation = 5;
            c.programmer.activation = Activation::Review;
        })
        .routine_engine(Arc::new(js_runtime()))
        .admin_token("review-token")
        .spawn()
        .await
}

/// Five requests answered by the LLM, then the programmer's job: the routine it wrote.
async fn five_answers_and_a_routine(server: &TestServer) -> Routine {
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    // `AGORA_TEST_TRIAL=n` picks other places (other forecasts, so other examples) for measuring
    // the pass rate over several runs; the default run is the same every time.
    let places = [
        "London, UK",
        "Paris, France",
        "Tokyo, Japan",
        "Lima, Peru",
        "Oslo, Norway",
        "Nairobi, Kenya",
        "Quito, Ecuador",
        "Perth, Australia",
    ];
    let trial: usize = std::env::var("AGORA_TEST_TRIAL")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    for i in 0..5 {
        let location = places[(i + trial * 3) % places.len()];
        let date = format!("2025-{:02}-{:02}", 1 + (i + trial) % 12, 3 + 5 * i);
        let (status, reply) = server.post("/", &request(location, &date)).await;
        assert_eq!(status, 200);
        assert_eq!(reply["status"], "success", "{reply}");
        eprintln!("LLM reply for {location} {date}: {}", reply["body"]);
    }
    let started = Instant::now();
    server.node.programmer_idle().await;
    let attempts = agora_testkit::attempts(&server.node, &hash).await;
    print_attempts("programmer", &attempts, started);
    let passed = attempts
        .iter()
        .find(|a| a.outcome.as_str() == "passed")
        .expect("a candidate passed its examination");
    let routine = server
        .node
        .store()
        .routine(passed.routine_id.unwrap())
        .await;
    routine.unwrap().unwrap()
}

/// The next two requests are answered by the routine with the tool's data, with no LLM call.
async fn the_routine_answers_without_the_llm(server: &TestServer) {
    let calls_before = agora_testkit::llm_calls(&server.node).await.len();
    for (location, date) in [
        ("Berlin, Germany", "2025-03-10"),
        ("Cairo, Egypt", "2025-07-04"),
    ] {
        let (status, reply) = server.post("/", &request(location, date)).await;
        assert_eq!(status, 200);
        assert_eq!(reply["status"], "success", "{reply}");
        let body: Value = serde_json::from_str(reply["body"].as_str().unwrap()).unwrap();
        assert_eq!(
            body,
            expected_forecast(location, date),
            "the routine's reply carries the tool data"
        );
    }
    let calls_after = agora_testkit::llm_calls(&server.node).await.len();
    assert_eq!(
        calls_after, calls_before,
        "no LLM call once the routine serves"
    );
    let requests = agora_testkit::recent_requests(&server.node, 2).await;
    assert!(
        requests
            .iter()
            .all(|r| r.path == RequestPath::Routine && r.llm_calls == 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_routine_under_review_answers_once_approved_over_the_admin_api() {
    let dir = temp_dir();
    let server = bob(dir.path()).await;
    let routine = five_answers_and_a_routine(&server).await;
    assert_eq!(
        (routine.origin, routine.status),
        (RoutineOrigin::Compiled, RoutineStatus::Pending),
        "compiled from the LLM's tool calls"
    );
    let categories = agora_testkit::llm_categories(&server.node).await;
    assert!(
        !categories.iter().any(|c| c == "implementing"),
        "no programmer call: {categories:?}"
    );
    // Waiting: the LLM answers.
    let calls = agora_testkit::llm_calls(&server.node).await.len();
    let (_, reply) = server
        .post("/", &request("Rome, Italy", "2025-05-05"))
        .await;
    assert_eq!(reply["status"], "success", "{reply}");
    assert!(agora_testkit::llm_calls(&server.node).await.len() > calls);

    let approve = format!("{}/admin/routines/{}/approve", server.url, routine.id);
    let response = reqwest::Client::new()
        .post(approve)
        .bearer_auth("review-token")
        .json(&json!({"reviewer": "ada"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    the_routine_answers_without_the_llm(&server).await;
}

/// A shadow check with the real model: the shipped weather routine answers, and the model,
/// answering the same request again off the request path (every request is checked), agrees
/// with it; its calls are in the ledger under `shadow`, none on the request path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_shadow_check_agrees_with_a_right_routine() {
    const WEATHER_JS: &str = include_str!("../../../../routines/weather-forecast/routine.js");
    let dir = temp_dir();
    let server = real_model_bob(dir.path())
        .config(|c| c.routines.shadow.share = 1.0)
        .routine_engine(Arc::new(js_runtime()))
        .spawn()
        .await;
    let spec =
        agora_testkit::human_routine("weather", WEATHER_PD, WEATHER_JS, &["weather_forecast"]);
    let routine = server.node.add_routine(spec).await.unwrap();
    let (location, date) = ("Berlin, Germany", "2025-03-10");
    let (status, reply) = server.post("/", &request(location, date)).await;
    assert_eq!(
        (status, reply["status"].as_str()),
        (200, Some("success")),
        "{reply}"
    );
    let requests = agora_testkit::recent_requests(&server.node, 1).await;
    assert_eq!(
        (requests[0].path, requests[0].llm_calls),
        (RequestPath::Routine, 0)
    );

    server.node.programmer_idle().await;
    let checks = server.node.store().programming();
    let checks = checks.shadow_checks(routine.id, false, 10).await.unwrap();
    assert_eq!(checks.len(), 1, "{checks:?}");
    let check = &checks[0];
    eprintln!(
        "routine: {}\nLLM:     {}\n{}",
        check.routine_reply, check.llm_reply, check.difference
    );
    let routine_reply: Value = serde_json::from_str(&check.routine_reply).unwrap();
    assert_eq!(routine_reply, expected_forecast(location, date));
    assert!(check.agreed, "{}", check.difference);
    let calls = agora_testkit::llm_calls(&server.node).await;
    assert!(
        !calls.is_empty() && calls.iter().all(|c| c.category == "shadow"),
        "{calls:?}"
    );
}
