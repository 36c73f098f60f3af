//! Code as action with the real local model, over loopback HTTP: a protocol request is answered
//! by a program the model writes and the real WebAssembly runtime runs with the node's tools,
//! and that program becomes the protocol's routine without another LLM call. Two kinds of
//! request, each judged against the right answer:
//! - a rule with a condition: a restaurant open every day but Tuesday, with a weekday tool;
//! - a recommendation that depends on another tool's answer: a hotel that recommends a
//!   restaurant only when an `isOpen` tool says it is open (the network demo's
//!   suggestRestaurant).
//!
//! Two more kinds were tried and are not here, because the model's programs get them wrong:
//! - a lookup (the weather protocol with the forecast tool): alone, the programs were right;
//!   after the other real-model tests on the same server, the program for Lima (precipitation
//!   0) checked `if (!result.precipitation_mm)` and answered an error. The programmer's guard
//!   takes such checks out of a routine's candidates, but a program answering a request has no
//!   right answer to compare with.
//! - a computed price: for a cab fare ("$30, plus 20% when trafficInfo reports heavy
//!   traffic") the programs returned 30.2 (30 + 0.2); with two surcharges that add up (weather
//!   and traffic, as taxi2 has in the network demo) they read a `price` from the request and
//!   applied the second surcharge only in an `else`.
//!
//! The weekday and opening tools are HTTP tools served by this test on 127.0.0.1.
//!
//! Ignored by plain `cargo test`: `scripts/test.sh` starts llama-server (temperature 0, fixed
//! seed, one slot) and runs it with `AGORA_TEST_LLM_URL` and `AGORA_JS_ENGINE` set.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;
use std::time::Instant;

use agora_node::{ToolConfig, ToolKind};
use agora_protocol::{ProtocolHash, data_uri};
use agora_store::RequestPath;
use agora_testkit::{NodeBuilder, TestServer, temp_dir};
use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};

use crate::fixtures::{js_runtime, print_attempts};
use crate::support::Spawn;

const OPEN_PD: &str = "---\nname: isOpen\ndescription: Whether the restaurant is open on a \
                       date.\nmultiround: false\n---\n\nThe request is a JSON object \
                       {\"date\": \"YYYY-MM-DD\"}. The reply is a JSON object {\"open\": \"yes\"} \
                       or {\"open\": \"no\"}.\n";
/// Worded like the network demo's restaurants. Without "(closed)", "It is open every day but
/// Tuesday" made the model write `day === "Tuesday" ? "yes" : "no"`: a small model can invert a
/// rule, and this test would say so.
const CASA_NOVA: &str = "Casa Nova, an Italian restaurant in Rome, open 12:00-22:00 every day but \
                         Tuesday (closed). The weekday tool gives the weekday of a date.";

const SUGGEST_PD: &str = "---\nname: suggestRestaurant\ndescription: Ask the hotel which \
                          restaurant it recommends for a date.\nmultiround: false\n---\n\nThe \
                          request is a JSON object {\"date\": \"YYYY-MM-DD\"}. The reply is a JSON \
                          object {\"recommendedRestaurant\": string}.\n";
const HOTEL: &str = "Hotel Aurora in Rome. Asked for a restaurant, it recommends Casa Nova \
                     (Italian) if the isOpen tool says it is open on that date, and \"No \
                     restaurant\" otherwise.";

/// The weekday of a `YYYY-MM-DD` date (Sakamoto's method).
fn weekday(date: &str) -> &'static str {
    let parts: Vec<i64> = date.split('-').map(|p| p.parse().unwrap()).collect();
    let (mut y, m, d) = (parts[0], parts[1], parts[2]);
    let offsets = [0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4];
    if m < 3 {
        y -= 1;
    }
    let index = (y + y / 4 - y / 100 + y / 400 + offsets[(m - 1) as usize] + d) % 7;
    [
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
    ][index as usize]
}

/// The weekday and opening tools, served over HTTP; their base URL.
async fn serve_tools() -> String {
    let app = axum::Router::new()
        .route(
            "/weekday",
            post(|Json(args): Json<Value>| async move {
                Json(json!({"day": weekday(args["date"].as_str().unwrap_or("2024-01-01"))}))
            }),
        )
        .route(
            "/open",
            post(|Json(args): Json<Value>| async move {
                let open = weekday(args["date"].as_str().unwrap_or("2024-01-01")) != "Tuesday";
                Json(json!({"isOpen": if open { "yes" } else { "no" }}))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn http_tool(
    name: &str,
    url: String,
    description: &str,
    parameters: Value,
    returns: Value,
) -> ToolConfig {
    ToolConfig {
        name: name.into(),
        description: Some(description.into()),
        parameters: Some(parameters),
        returns: Some(returns),
        kind: ToolKind::Http {
            url,
            timeout_secs: None,
            max_reply_bytes: None,
            read_only: false,
        },
    }
}

/// The weekday tool served under `tools` (see [`serve_tools`]).
fn weekday_tool(tools: &str) -> ToolConfig {
    http_tool(
        "weekday",
        format!("{tools}/weekday"),
        "The weekday of a date.",
        json!({"type": "object", "properties": {"date": {"type": "string",
               "description": "The date, YYYY-MM-DD"}}, "required": ["date"]}),
        json!({"type": "object", "properties": {"day": {"type": "string",
               "description": "Monday to Sunday"}}, "required": ["day"]}),
    )
}

/// A node on the real model that answers protocol requests with programs and writes a routine
/// after two examples.
async fn acting_node(
    dir: &std::path::Path,
    description: &str,
    tools: Vec<ToolConfig>,
) -> TestServer {
    NodeBuilder::new(agora_testkit::local_llm(), dir)
        .config(|c| {
            c.description = description.into();
            c.tools = tools;
            c.responder.code_as_action = true;
            c.thresholds.implementation = 2;
        })
        .routine_engine(Arc::new(js_runtime()))
        .spawn()
        .await
}

/// Sends `body` under `document`; the reply's body as JSON.
async fn ask(server: &TestServer, document: &str, body: Value) -> Value {
    let request = json!({
        "protocolHash": ProtocolHash::of(document.as_bytes()).to_hex(),
        "protocolSources": [data_uri::encode(document)],
        "body": body.to_string(),
    });
    let (status, reply) = server.post("/", &request).await;
    assert_eq!(status, 200);
    assert_eq!(reply["status"], "success", "{reply}");
    serde_json::from_str(reply["body"].as_str().unwrap()).unwrap()
}

/// Whether two replies are the same, numbers up to rounding (`30 * 1.4` is not `42` in floating
/// point).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() < 1e-6
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Asks the first two requests (programs answer them), waits for the programmer, and asks the
/// last one, which the routine must answer with no LLM call. Every reply must be `expected`'s.
async fn answered_then_programmed(
    server: &TestServer,
    document: &str,
    requests: [Value; 3],
    expected: impl Fn(&Value) -> Value,
) {
    let [first, second, last] = requests;
    for body in [first, second] {
        let reply = ask(server, document, body.clone()).await;
        eprintln!("program's reply to {body}: {reply}");
        let right = expected(&body);
        assert!(
            same(&reply, &right),
            "the program's answer to {body}: {reply}, not {right}"
        );
    }
    let requests = agora_testkit::recent_requests(&server.node, 2).await;
    assert!(requests.iter().all(|r| r.path == RequestPath::Llm));
    let started = Instant::now();
    server.node.programmer_idle().await;
    let hash = ProtocolHash::of(document.as_bytes());
    let attempts = agora_testkit::attempts(&server.node, &hash).await;
    print_attempts("programmer", &attempts, started);
    assert!(
        attempts.iter().any(|a| a.outcome.as_str() == "passed"),
        "a routine was written"
    );

    let calls_before = agora_testkit::llm_calls(&server.node).await.len();
    let reply = ask(server, document, last.clone()).await;
    let right = expected(&last);
    assert!(
        same(&reply, &right),
        "the routine's answer to {last}: {reply}, not {right}"
    );
    let request = agora_testkit::recent_requests(&server.node, 1).await;
    assert_eq!(
        (request[0].path, request[0].llm_calls),
        (RequestPath::Routine, 0)
    );
    let calls_after = agora_testkit::llm_calls(&server.node).await.len();
    assert_eq!(calls_after, calls_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_programs_answer_a_rule_and_a_recommendation_and_become_routines() {
    let tools = serve_tools().await;

    let dir = temp_dir();
    let weekday_tool = weekday_tool(&tools);
    let casa_nova = acting_node(dir.path(), CASA_NOVA, vec![weekday_tool]).await;
    answered_then_programmed(
        &casa_nova,
        OPEN_PD,
        [
            json!({"date": "2024-07-23"}), // a Tuesday
            json!({"date": "2024-07-25"}),
            json!({"date": "2024-10-01"}), // a Tuesday
        ],
        |body| {
            let open = weekday(body["date"].as_str().unwrap()) != "Tuesday";
            json!({"open": if open { "yes" } else { "no" }})
        },
    )
    .await;

    let dir = temp_dir();
    let open_tool = http_tool(
        "isOpen",
        format!("{tools}/open"),
        "Whether the linked restaurant is open on a date.",
        json!({"type": "object", "properties": {"date": {"type": "string",
               "description": "The date, YYYY-MM-DD"}}, "required": ["date"]}),
        json!({"type": "object", "properties": {"isOpen": {"type": "string",
               "description": "\"yes\" or \"no\""}}, "required": ["isOpen"]}),
    );
    let hotel = acting_node(dir.path(), HOTEL, vec![open_tool]).await;
    answered_then_programmed(
        &hotel,
        SUGGEST_PD,
        [
            json!({"date": "2024-03-05"}), // a Tuesday
            json!({"date": "2024-03-08"}),
            json!({"date": "2024-03-09"}),
        ],
        |body| {
            let open = weekday(body["date"].as_str().unwrap()) != "Tuesday";
            let name = if open {
                "Casa Nova (Italian)"
            } else {
                "No restaurant"
            };
            json!({"recommendedRestaurant": name})
        },
    )
    .await;
}
