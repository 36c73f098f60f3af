//! The dashboard in a real browser: Debian's Chromium, driven over WebDriver by Debian's
//! chromedriver through fantoccini, against a node that served traffic with the shipped
//! JavaScript weather routine in wasmtime. It logs in, finds the protocol and its routine, tests
//! and disables the routine with the buttons, sees the next request go to the LLM on the live
//! overview (no reload), visits every page, and checks the browser's console for errors.
//!
//! Each page's screenshot is written to `target/tmp/dashboard-screenshots/` (or
//! `AGORA_SCREENSHOT_DIR`). Ignored in the fast phase: it needs `AGORA_CHROMIUM`,
//! `AGORA_CHROMEDRIVER` and `AGORA_JS_ENGINE` from `~/.cache/agora/env.sh` (scripts/test.sh).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agora_protocol::ProtocolHash;
use agora_store::RequestPath;
use agora_testkit::{NodeBuilder, ScriptedLlm, TestServer, temp_dir, weather_tool};
use fantoccini::{Client, Locator};
use serde_json::{Value, json};

use crate::browser::{self, Browser, console_errors};
use crate::support::Spawn;

const TOKEN: &str = "browser-token";
const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");
const WEATHER_JS: &str = include_str!("../../../../routines/weather-forecast/routine.js");
use browser::WAIT;

fn screenshot_dir() -> PathBuf {
    let dir = std::env::var_os("AGORA_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots")
        });
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn screenshot(client: &Client, name: &str) {
    browser::screenshot(client, &screenshot_dir().join(format!("{name}.png"))).await;
}

/// The text of the first element matching `css`, once `ready` holds for it (or a panic after
/// [`WAIT`]).
async fn wait_text(client: &Client, css: &str, ready: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = String::new();
    while tokio::time::Instant::now() < deadline {
        if let Ok(element) = client.find(Locator::Css(css)).await
            && let Ok(text) = element.text().await
        {
            if ready(&text) {
                return text;
            }
            last = text;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    panic!("{css} never became ready; last text: {last:?}");
}

async fn attribute(client: &Client, css: &str, name: &str) -> Option<String> {
    client
        .find(Locator::Css(css))
        .await
        .unwrap()
        .attr(name)
        .await
        .unwrap()
}

/// An LLM that finds every protocol suitable and answers every weather request alike.
fn sunny_llm() -> Arc<ScriptedLlm> {
    ScriptedLlm::new(|request| match agora_testkit::schema_name(request) {
        Some("suitability") => Ok(r#"{"reason": "fine", "suitable": "yes"}"#.into()),
        _ => {
            let answer =
                json!({"temperature": 1.5, "precipitation": 0.0, "weatherCondition": "sunny"});
            Ok(json!({"tool": "final_answer", "answer": answer.to_string()}).to_string())
        }
    })
}

/// Bob: the weather tool, the real routine runtime, the shipped weather routine, and an LLM
/// that answers in the protocol's shape when asked; three requests served by the routine.
async fn bob(dir: &std::path::Path) -> (TestServer, Arc<ScriptedLlm>) {
    let llm = sunny_llm();
    let server = NodeBuilder::new(llm.clone(), dir)
        .config(|c| {
            c.tools = vec![weather_tool()];
            // Only the routine and the operator's buttons: no programmer in the background.
            c.thresholds.implementation = u64::MAX;
        })
        .routine_engine(Arc::new(crate::fixtures::js_runtime()))
        .admin_token(TOKEN)
        .spawn()
        .await;
    let spec = agora_testkit::human_routine(
        "weather-forecast",
        WEATHER_PD,
        WEATHER_JS,
        &["weather_forecast"],
    );
    server.node.add_routine(spec).await.unwrap();
    for place in ["London, UK", "Paris, France", "Oslo, Norway"] {
        ask(&server, place).await;
    }
    (server, llm)
}

async fn ask(server: &TestServer, place: &str) -> Value {
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    let body = json!({"location": place, "date": "2025-03-04"});
    let (status, reply) = server
        .post(
            "/",
            &json!({"protocolHash": hash.to_hex(), "protocolSources": [], "body": body}),
        )
        .await;
    assert_eq!(
        (status, reply["status"].as_str()),
        (200, Some("success")),
        "{reply}"
    );
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium, chromedriver and the JavaScript engine: scripts/test.sh"]
async fn an_operator_disables_a_routine_in_the_browser_and_sees_the_next_request_go_to_the_llm() {
    let dir = temp_dir();
    let (server, llm) = bob(dir.path()).await;
    let browser = Browser::start().await;
    let c = &browser.client;

    // Not logged in: the login page, and none of the node's data.
    c.goto(&format!("{}/dashboard/protocols", server.url))
        .await
        .unwrap();
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#login-form"))
        .await
        .unwrap();
    let source = c.source().await.unwrap();
    assert!(!source.contains("WeatherForecastQuery") && !source.contains("weather-forecast"));
    screenshot(c, "login").await;
    // The one console error allowed here: the page itself answered 401.
    for error in console_errors(c).await {
        assert!(
            error.contains("401"),
            "console error on the login page: {error}"
        );
    }

    // Log in through the form.
    browser::log_in(c, &format!("{}/dashboard/login", server.url), TOKEN).await;
    let total = wait_text(c, "#total-requests", |t| t == "3").await;
    assert_eq!(total, "3");
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#chart-requests .uplot"))
        .await
        .unwrap();
    screenshot(c, "overview").await;

    // The protocol and its routine.
    browser::click(c, "#nav-protocols").await;
    let name = wait_text(c, "#protocols-table .protocol-name", |t| !t.is_empty()).await;
    assert_eq!(name, "WeatherForecastQuery");
    let routine = wait_text(c, "#protocols-table .routine-link", |t| !t.is_empty()).await;
    assert_eq!(routine, "weather-forecast");
    screenshot(c, "protocols").await;

    // The routine's page: test it with the button on the prefilled body.
    browser::click(c, "#protocols-table .routine-link").await;
    let test_body = c
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#test-body"))
        .await
        .unwrap();
    test_body.clear().await.unwrap();
    test_body
        .send_keys(r#"{"location": "Lima, Peru", "date": "2025-01-02"}"#)
        .await
        .unwrap();
    browser::click(c, "#test-button").await;
    let result = wait_text(c, "#test-result", |t| t.contains("success")).await;
    let expected =
        agora_node::tools::WeatherForecastTool::new(7).forecast("Lima, Peru", "2025-01-02");
    let shown: Value = serde_json::from_str(&result).unwrap();
    let body = &shown["body"];
    // Numbers compared as numbers (the routine writes 0 where the tool has 0.0).
    assert_eq!(
        body["temperature"].as_f64(),
        expected["temperature_c"].as_f64(),
        "{result}"
    );
    assert_eq!(
        body["precipitation"].as_f64(),
        expected["precipitation_mm"].as_f64(),
        "{result}"
    );
    assert_eq!(body["weatherCondition"], expected["condition"], "{result}");
    screenshot(c, "routine").await;

    // Disable it on the routines page; the row changes without a reload.
    browser::click(c, "#nav-routines").await;
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#routines-table button.disable"))
        .await
        .unwrap();
    assert_eq!(
        attribute(c, "#routine-1", "data-status").await.as_deref(),
        Some("active")
    );
    browser::click(c, "#routines-table button.disable").await;
    wait_text(c, "#routine-1 .status", |t| t == "disabled").await;
    wait_text(c, "#action-result", |t| t.starts_with("done")).await;
    screenshot(c, "routines").await;

    // The next request goes to the LLM, and the overview shows it without a reload.
    browser::click(c, "#nav-overview").await;
    wait_text(c, "#total-requests", |t| t == "3").await;
    let calls_before = llm.call_count();
    let reply = ask(&server, "Cairo, Egypt").await;
    assert!(llm.call_count() > calls_before, "the LLM answered: {reply}");
    let last = agora_testkit::recent_requests(&server.node, 1).await;
    assert_eq!(last[0].path, RequestPath::Llm);
    wait_text(c, "#total-requests", |t| t == "4").await;
    let cards = wait_text(c, "#overview-cards", |t| t.contains("1 LLM")).await;
    assert!(cards.contains("3 routine"), "{cards}");
    screenshot(c, "overview-after").await;

    // The other pages render, and the console stayed clean throughout.
    for (nav, ready, name) in [
        ("#nav-ledger", "#ledger-table", "ledger"),
        ("#nav-sender", "#sender-memory", "sender"),
        ("#nav-conversations", "#conversations", "conversations"),
    ] {
        browser::click(c, nav).await;
        c.wait()
            .at_most(WAIT)
            .for_element(Locator::Css(ready))
            .await
            .unwrap();
        screenshot(c, name).await;
    }
    // One more live refresh on the last page, so a failing poll would have logged.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let errors = console_errors(c).await;
    assert!(errors.is_empty(), "console errors: {errors:#?}");

    browser.client.close().await.unwrap();
    server.stop().await;
}

/// What Bob's LLM answers every weather request with, as a routine: it passes an examination on
/// the LLM's examples.
const SAME_AS_THE_LLM: &str = "function handle(body) {\n  // the operator's edit\n  return { temperature: 1.5, precipitation: 0.0, weatherCondition: \"sunny\" };\n}\n";
/// A routine that answers something else.
const NOT_THE_LLM: &str = "function handle(body) {\n  return { temperature: 99, precipitation: 0.0, weatherCondition: \"sunny\" };\n}\n";

/// Bob with no routine answering yet: his LLM answered two requests (the protocol's examples),
/// and three routines wait for review, as the programmer leaves them under
/// `activation = "review"`.
async fn bob_with_pending_routines(
    dir: &std::path::Path,
) -> (TestServer, Vec<agora_store::Routine>) {
    let llm = sunny_llm();
    let server = NodeBuilder::new(llm, dir)
        .config(|c| c.thresholds.implementation = u64::MAX)
        .routine_engine(Arc::new(crate::fixtures::js_runtime()))
        .admin_token(TOKEN)
        .spawn()
        .await;
    server.node.add_document(WEATHER_PD, &[]).await.unwrap();
    for place in ["London, UK", "Paris, France"] {
        ask(&server, place).await;
    }
    let hash = ProtocolHash::of(WEATHER_PD.as_bytes());
    let examples = server.node.store().programming().examples(&hash, 10).await;
    assert_eq!(
        examples.unwrap().len(),
        2,
        "the LLM's answers are kept as examples"
    );
    let mut pending = Vec::new();
    for (name, source) in [
        ("llm-a", SAME_AS_THE_LLM),
        ("llm-b", SAME_AS_THE_LLM),
        ("llm-c", NOT_THE_LLM),
    ] {
        let mut spec = agora_testkit::human_routine(name, WEATHER_PD, source, &[]);
        spec.origin = agora_store::RoutineOrigin::Llm;
        spec.activate = false;
        let routine = server.node.add_routine(spec).await.unwrap();
        let status = agora_store::RoutineStatus::Pending;
        let store = server.node.store();
        pending.push(
            store
                .set_routine_status(routine.id, status, 1)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    server.node.sync_routines().await.unwrap();
    (server, pending)
}

async fn fill(client: &Client, css: &str, text: &str) {
    let element = client.find(Locator::Css(css)).await.unwrap();
    element.clear().await.unwrap();
    element.send_keys(text).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium, chromedriver and the JavaScript engine: scripts/test.sh"]
async fn an_operator_approves_rejects_and_edits_pending_routines_in_the_browser() {
    let dir = temp_dir();
    let (server, pending) = bob_with_pending_routines(dir.path()).await;
    let browser = Browser::start().await;
    let c = &browser.client;
    browser::log_in(c, &format!("{}/dashboard/login", server.url), TOKEN).await;
    let page = |routine: &agora_store::Routine| {
        format!("{}/dashboard/routines/{}", server.url, routine.id)
    };
    let status = |id: i64| {
        let node = server.node.clone();
        async move {
            node.store()
                .routine(id)
                .await
                .unwrap()
                .unwrap()
                .status
                .as_str()
                .to_string()
        }
    };

    // The routines page links each pending routine to its review.
    c.goto(&format!("{}/dashboard/routines", server.url))
        .await
        .unwrap();
    wait_text(c, "#routines-table .review-link", |t| {
        t.starts_with("Review")
    })
    .await;

    // Approve: the routine answers the next request, with no LLM call.
    c.goto(&page(&pending[0])).await.unwrap();
    let examples = wait_text(c, "#review-examples", |t| t.contains("London")).await;
    assert!(
        examples.contains("sunny"),
        "the LLM's replies are shown: {examples}"
    );
    screenshot(c, "review").await;
    browser::click(c, "button.approve").await;
    wait_text(c, "#action-result", |t| t.contains("Reviewer")).await;
    fill(c, "#review-reviewer", "ada").await;
    browser::click(c, "button.approve").await;
    wait_text(c, "#review-decisions", |t| t.contains("ada approved")).await;
    assert_eq!(status(pending[0].id).await, "active");
    ask(&server, "Oslo, Norway").await;
    let last = agora_testkit::recent_requests(&server.node, 1).await;
    assert_eq!(last[0].path, RequestPath::Routine);

    // Reject with a reason; the reviewer is remembered.
    c.goto(&page(&pending[1])).await.unwrap();
    let reviewer = c.find(Locator::Css("#review-reviewer")).await.unwrap();
    assert_eq!(
        reviewer.prop("value").await.unwrap().as_deref(),
        Some("ada")
    );
    fill(c, "#review-reason", "Say the unit of the temperature.").await;
    browser::click(c, "button.reject").await;
    wait_text(c, "#review-decisions", |t| t.contains("Say the unit")).await;
    assert_eq!(status(pending[1].id).await, "rejected");

    // Edit: a failing edit is refused with its report and stored nowhere; a passing one is a
    // new routine waiting for review, whose page opens.
    c.goto(&page(&pending[2])).await.unwrap();
    wait_text(c, "#review-edit summary", |t| t == "Edit").await;
    browser::click(c, "#review-edit summary").await;
    browser::click(c, "button.edit").await;
    let refused = wait_text(c, "#action-result", |t| !t.is_empty()).await;
    assert!(refused.contains("failed its examination"), "{refused}");
    assert_eq!(server.node.routines().list().await.unwrap().len(), 3);
    fill(c, "#review-source", SAME_AS_THE_LLM).await;
    browser::click(c, "button.edit").await;
    let title = wait_text(c, "h1", |t| t.contains("llm-c-edit")).await;
    assert_eq!(title, "Routine llm-c-edit");
    wait_text(c, "#review-decisions", |t| t.contains("ada edited")).await;
    assert_eq!(status(pending[2].id).await, "rejected");
    screenshot(c, "review-edit").await;
    let errors = console_errors(c).await;
    assert!(
        errors.iter().all(|e| e.contains("422")),
        "console errors: {errors:?}"
    );
}

/// A sender routine's JavaScript: the data as the body, the reply's temperature as the output.
const SENDS_THE_DATA: &str = "function handle(input) {\n  const r = JSON.parse(input);\n  if (r.op === \"encode\") return r.data;\n  return { temperature: JSON.parse(r.reply).temperature };\n}\n";
/// One that reads another temperature than the reply's.
const READS_ANOTHER_TEMPERATURE: &str = "function handle(input) {\n  const r = JSON.parse(input);\n  if (r.op === \"encode\") return r.data;\n  return { temperature: 99 };\n}\n";

/// A node with one kept sender example for the weather task at three targets, and a sender
/// routine waiting for review at each, as the programmer leaves them under
/// `activation = "review"`.
async fn alice_with_pending_sender_routines(dir: &std::path::Path) -> TestServer {
    let server = NodeBuilder::new(ScriptedLlm::unreachable(), dir)
        .routine_engine(Arc::new(crate::fixtures::js_runtime()))
        .admin_token(TOKEN)
        .spawn()
        .await;
    let sender = server.node.store().sender();
    for target in ["http://bob", "http://carol", "http://dan"] {
        let key = agora_store::SenderKey {
            target: target.into(),
            task: "weather".into(),
            protocol_hash: ProtocolHash::of(WEATHER_PD.as_bytes()),
        };
        let example = agora_store::SenderExample {
            id: 0,
            key: key.clone(),
            data: json!({"location": "Oslo, Norway"}),
            body: json!({"location": "Oslo, Norway"}).to_string(),
            reply: json!({"temperature": 3.5}).to_string(),
            output: json!({"temperature": 3.5}),
            created_at_ms: 1,
        };
        sender.add_sender_example(&example, 10).await.unwrap();
        let source = SENDS_THE_DATA;
        let component = b"not run before approval";
        sender
            .add_sender_routine(&key, source, component, 1, true)
            .await
            .unwrap();
    }
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium, chromedriver and the JavaScript engine: scripts/test.sh"]
async fn an_operator_approves_rejects_and_edits_pending_sender_routines_in_the_browser() {
    let dir = temp_dir();
    let server = alice_with_pending_sender_routines(dir.path()).await;
    let browser = Browser::start().await;
    let c = &browser.client;
    browser::log_in(c, &format!("{}/dashboard/login", server.url), TOKEN).await;
    let page = |id: i64| format!("{}/dashboard/sender/routines/{id}", server.url);
    let status = |id: i64| {
        let node = server.node.clone();
        async move {
            let routine = node.store().sender().sender_routine(id).await.unwrap();
            routine.unwrap().status.as_str().to_string()
        }
    };

    // The sender page links each pending routine to its review.
    c.goto(&format!("{}/dashboard/sender", server.url))
        .await
        .unwrap();
    wait_text(c, "#sender-routines .review-link", |t| {
        t.starts_with("Review")
    })
    .await;

    // Approve.
    c.goto(&page(1)).await.unwrap();
    let examples = wait_text(c, "#review-examples", |t| t.contains("Oslo")).await;
    assert!(
        examples.contains("3.5"),
        "the reply and output are shown: {examples}"
    );
    let unchecked = wait_text(c, "#shadow-unchecked", |t| !t.is_empty()).await;
    assert!(unchecked.contains("another node"), "{unchecked}");
    screenshot(c, "sender-review").await;
    fill(c, "#review-reviewer", "ada").await;
    browser::click(c, "button.approve").await;
    wait_text(c, "#review-decisions", |t| t.contains("ada approved")).await;
    assert_eq!(status(1).await, "active");

    // Reject with a reason.
    c.goto(&page(2)).await.unwrap();
    fill(c, "#review-reason", "Send the date too.").await;
    browser::click(c, "button.reject").await;
    wait_text(c, "#review-decisions", |t| t.contains("Send the date too.")).await;
    assert_eq!(status(2).await, "rejected");

    // Edit: a failing edit is refused with its report and stored nowhere; a passing one is a
    // new pending routine, whose page opens.
    c.goto(&page(3)).await.unwrap();
    wait_text(c, "#review-edit summary", |t| t == "Edit").await;
    browser::click(c, "#review-edit summary").await;
    fill(c, "#review-source", READS_ANOTHER_TEMPERATURE).await;
    browser::click(c, "button.edit").await;
    let refused = wait_text(c, "#action-result", |t| !t.is_empty()).await;
    assert!(refused.contains("failed its examination"), "{refused}");
    let routines = server.node.store().sender().sender_routines().await;
    assert_eq!(routines.unwrap().len(), 3);
    fill(c, "#review-source", SENDS_THE_DATA).await;
    browser::click(c, "button.edit").await;
    let title = wait_text(c, "h1", |t| t.contains("routine 4")).await;
    assert_eq!(title, "Sender routine 4");
    wait_text(c, "#review-decisions", |t| t.contains("ada edited")).await;
    assert_eq!(
        (status(3).await, status(4).await),
        ("rejected".to_string(), "pending".to_string())
    );
    let errors = console_errors(c).await;
    assert!(
        errors.iter().all(|e| e.contains("422")),
        "console errors: {errors:?}"
    );
}

/// A routine the node compiled from its LLM's tool loop, under review: its page says it was
/// compiled, shows the examples it agrees with, and its source carries the comments that say
/// which examples each step came from, as the operator approves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium, chromedriver and the JavaScript engine: scripts/test.sh"]
async fn the_review_page_shows_a_compiled_routine_with_its_provenance() {
    let dir = temp_dir();
    let server = NodeBuilder::new(crate::compiled_routines::agent(), dir.path())
        .config(|c| {
            c.tools = vec![weather_tool()];
            c.thresholds.implementation = 3;
            c.programmer.activation = agora_node::Activation::Review;
        })
        .routine_engine(Arc::new(crate::fixtures::js_runtime()))
        .admin_token(TOKEN)
        .spawn()
        .await;
    server.node.add_document(WEATHER_PD, &[]).await.unwrap();
    for place in ["London, UK", "Paris, France", "Lima, Peru"] {
        ask(&server, place).await;
    }
    server.node.programmer_idle().await;
    let routines = server.node.store().routines().await.unwrap();
    assert_eq!(routines.len(), 1, "{routines:?}");
    let routine = &routines[0];
    assert_eq!(
        (routine.origin, routine.status),
        (
            agora_store::RoutineOrigin::Compiled,
            agora_store::RoutineStatus::Pending
        )
    );

    let browser = Browser::start().await;
    let c = &browser.client;
    browser::log_in(c, &format!("{}/dashboard/login", server.url), TOKEN).await;
    c.goto(&format!("{}/dashboard/routines/{}", server.url, routine.id))
        .await
        .unwrap();
    wait_text(c, "#routine-summary", |t| t.contains("compiled")).await;
    let examples = wait_text(c, "#review-examples", |t| t.contains("Lima")).await;
    assert_eq!(
        examples.matches("agrees").count(),
        3,
        "the routine agrees with the three answers it was compiled from: {examples}"
    );
    browser::click(c, "#review-edit summary").await;
    let source = c.find(Locator::Css("#review-source")).await.unwrap();
    let source = source.prop("value").await.unwrap().unwrap_or_default();
    for line in [
        "// Compiled by the node, with no LLM, from 3 examples",
        "// Step 1: weather_forecast, as in examples 1-3.",
        "// The reply, as in examples 1-3.",
    ] {
        assert!(source.contains(line), "{line:?} in\n{source}");
    }
    screenshot(c, "review-compiled").await;
    let errors = console_errors(c).await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
}
