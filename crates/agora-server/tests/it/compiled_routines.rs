//! Routines compiled from the LLM's own tool traces, on the real routine runtime over HTTP on
//! 127.0.0.1 (`agora_node::programmer::compile`): Bob's scripted LLM answers the weather
//! protocol with its tool loop; after the threshold the node compiles a routine from those
//! answers with no programmer call, and the routine answers new places and dates with no LLM
//! call, as the tool says. A request no example covers (a date the tool refuses) goes back to
//! the LLM, and the node compiles again for free.
//!
//! Like `wasm_routines`, this needs the JavaScript engine (`AGORA_JS_ENGINE`).

use std::sync::Arc;

use crate::fixtures::{expected_forecast, js_runtime};
use crate::support::Spawn;
use crate::wasm_routines::same;
use agora_llm::ChatRequest;
use agora_protocol::VerifiedDocument;
use agora_store::{RequestPath, RoutineOrigin, RoutineStatus};
use agora_testkit::{
    NodeBuilder, ScriptedLlm, TestServer, last_user_message, schema_name, system_prompt, temp_dir,
    weather_tool,
};
use serde_json::{Value, json};

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");
/// What the scripted agent replies when the tool refuses the date.
const BAD_DATE: &str = "the date must be YYYY-MM-DD";

/// A weather agent's tool loop: the tool for the request's place and date, then its values
/// under the protocol's names (or an error when the tool refused). It never writes code.
pub(crate) fn agent() -> Arc<ScriptedLlm> {
    ScriptedLlm::new(|request: &ChatRequest| {
        assert!(
            !system_prompt(request).contains("handle(body)"),
            "the programmer's LLM was asked"
        );
        match schema_name(request) {
            Some("suitability") => Ok(r#"{"suitable": "yes", "reason": "weather tool"}"#.into()),
            Some("step") => Ok(step(last_user_message(request))),
            other => panic!("unexpected LLM request {other:?}"),
        }
    })
}

fn step(last: &str) -> String {
    if let Some(body) = last.strip_prefix("Request body:\n") {
        let body: Value = serde_json::from_str(body).unwrap();
        let arguments = json!({"location": body["location"], "date": body["date"]});
        json!({"tool": "weather_forecast", "arguments": arguments}).to_string()
    } else if let Some(result) = last.strip_prefix("Result of weather_forecast: ") {
        let forecast: Value = serde_json::from_str(result).unwrap();
        let answer = json!({
            "temperature": forecast["temperature_c"],
            "precipitation": forecast["precipitation_mm"],
            "weatherCondition": forecast["condition"],
        });
        json!({"tool": "final_answer", "answer": answer}).to_string()
    } else if last.contains("weather_forecast") {
        json!({"tool": "final_answer", "answer": {"error": BAD_DATE}}).to_string()
    } else {
        panic!("unexpected step: {last}")
    }
}

async fn bob(dir: &std::path::Path) -> TestServer {
    NodeBuilder::new(agent(), dir)
        .routine_engine(Arc::new(js_runtime()))
        .config(|c| {
            c.name = "bob".into();
            c.tools = vec![weather_tool()];
            c.thresholds.implementation = 3;
        })
        .spawn()
        .await
}

/// Sends the weather request for `location` and `date` to Bob; his reply and the request's
/// path and LLM calls in his ledger.
async fn ask(
    alice: &agora_node::Node,
    bob: &TestServer,
    document: &VerifiedDocument,
    location: &str,
    date: &str,
) -> (Value, RequestPath, i64) {
    let body = json!({"location": location, "date": date}).to_string();
    let reply = alice
        .send_protocol_message(&bob.url, document, &[], &body)
        .await
        .unwrap();
    let reply: Value = serde_json::from_str(&reply.body).unwrap();
    let request = agora_testkit::recent_requests(&bob.node, 1).await.remove(0);
    (reply, request.path, request.llm_calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routine_compiled_from_the_tool_loop_answers_without_any_llm() {
    let (bob_dir, alice_dir) = (temp_dir(), temp_dir());
    let bob = bob(bob_dir.path()).await;
    let document = bob.node.add_document(WEATHER_PD, &[]).await.unwrap();
    let alice = NodeBuilder::new(ScriptedLlm::unreachable(), alice_dir.path())
        .build()
        .await;

    let taught = [
        ("Paris, France", "2024-09-01"),
        ("Lima, Peru", "2024-12-24"),
        ("Oslo, Norway", "2025-02-03"),
    ];
    for (location, date) in taught {
        let (reply, path, calls) = ask(&alice, &bob, &document, location, date).await;
        assert!(same(&reply, &expected_forecast(location, date)), "{reply}");
        assert_eq!(path, RequestPath::Llm);
        assert!(calls >= 2, "the tool loop: a call, then the answer");
    }
    bob.node.programmer_idle().await;
    let routines = bob.node.store().routines().await.unwrap();
    assert_eq!(routines.len(), 1, "{routines:?}");
    assert_eq!(routines[0].origin, RoutineOrigin::Compiled);
    assert_eq!(routines[0].status, RoutineStatus::Active);
    let attempts = agora_testkit::attempts(&bob.node, &document.hash()).await;
    assert_eq!(
        attempts.len(),
        1,
        "one attempt, the compiler's: {attempts:?}"
    );
    assert_eq!(attempts[0].prompt_tokens, 0);

    // New places and dates: the routine, as the tool says, with no LLM call.
    let llm_calls_before = agora_testkit::llm_calls(&bob.node).await.len();
    for (location, date) in [
        ("Quito, Ecuador", "2025-06-30"),
        ("Tokyo, Japan", "2024-03-15"),
    ] {
        let (reply, path, calls) = ask(&alice, &bob, &document, location, date).await;
        assert!(same(&reply, &expected_forecast(location, date)), "{reply}");
        assert_eq!((path, calls), (RequestPath::Routine, 0));
    }

    // A date the tool refuses, which no example had: the routine leaves it to the LLM. Its
    // answer rests on no tool result, so it is no example; compiling again (no programmer
    // call) gives the same program, and the routine stays.
    let (reply, path, uncovered_calls) =
        ask(&alice, &bob, &document, "Rome, Italy", "tomorrow").await;
    assert_eq!(reply["error"], BAD_DATE, "{reply}");
    assert_eq!(
        path,
        RequestPath::Fallback,
        "the routine gave up, the LLM answered"
    );
    bob.node.programmer_idle().await;
    let now = bob.node.store().routines().await.unwrap();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(
        (now[0].id, now[0].status),
        (routines[0].id, RoutineStatus::Active)
    );
    let attempts = agora_testkit::attempts(&bob.node, &document.hash()).await;
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    assert_eq!(attempts[1].reason.as_str(), "uncovered");
    assert_eq!(attempts[1].prompt_tokens, 0);
    let (reply, path, _) = ask(&alice, &bob, &document, "Cairo, Egypt", "2025-01-15").await;
    assert!(
        same(&reply, &expected_forecast("Cairo, Egypt", "2025-01-15")),
        "{reply}"
    );
    assert_eq!(path, RequestPath::Routine);
    assert_eq!(
        agora_testkit::llm_calls(&bob.node).await.len() as i64,
        llm_calls_before as i64 + uncovered_calls,
        "only the uncovered request went to the LLM"
    );
}
