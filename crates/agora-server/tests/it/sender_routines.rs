//! Sender-side routines over real HTTP between two nodes on 127.0.0.1, with scripted LLMs and a
//! scripted routine engine on the sender: a protocol in use gets a sender routine written and
//! examined after the threshold, and later runs make no LLM call on the sender; a failing
//! candidate is repaired; a routine failing at run time hands the run to the LLM, and is
//! disabled and rewritten after too many failures.
//!
//! Alice's scripted LLM writes the body as the data itself and reads every reply as
//! `{"temperature": 3.5}`; its programmer hands out the candidates a test lists, by key. Bob
//! serves the weather protocol with a scripted LLM that always forecasts 3.5 degrees.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::fixtures::{temperature_output, weather_task};
use crate::support::Spawn;
use agora_llm::ChatRequest;
use agora_node::{Node, RoutineError, Task, TaskRun};
use agora_testkit::{
    NodeBuilder, ScriptedLlm, ScriptedRoutineEngine, TestServer, last_user_message, llm_categories,
    schema_name, system_prompt, temp_dir, weather_tool,
};
use serde_json::{Value, json};

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");

pub(crate) fn task() -> Task {
    weather_task(temperature_output())
}

fn data(location: &str) -> Value {
    json!({"location": location, "date": "2025-02-03"})
}

/// Alice's LLM: bodies, replies, protocol fit checks, and the candidates in order.
pub(crate) fn alice_llm(candidates: &[&'static str]) -> Arc<ScriptedLlm> {
    let candidates = Arc::new(Mutex::new(
        candidates.iter().copied().collect::<VecDeque<_>>(),
    ));
    ScriptedLlm::new(move |request: &ChatRequest| {
        if schema_name(request).is_none() && system_prompt(request).contains("handle(input)") {
            let key = candidates.lock().unwrap().pop_front().unwrap_or("none");
            return Ok(format!("```javascript\n{key}\n```"));
        }
        match schema_name(request) {
            // The body is the data, as `sender::compose_for_protocol` shows it.
            None => Ok(last_user_message(request)
                .lines()
                .find_map(|line| line.strip_prefix("Data: "))
                .unwrap()
                .to_string()),
            Some("task_output") => Ok(json!({"temperature": 3.5}).to_string()),
            Some("task_fit") => Ok(json!({"suitable": "yes", "reason": "it fits"}).to_string()),
            other => panic!("unexpected sender LLM request {other:?}"),
        }
    })
}

/// Encodes the data as the body and reads `temperature` from the reply; with `fail_for`, fails
/// to encode that location.
fn codec(input: String, fail_for: Option<&str>) -> Result<String, RoutineError> {
    let input: Value = serde_json::from_str(&input).unwrap();
    if input["op"] == "encode" {
        if fail_for.is_some_and(|place| input["data"]["location"] == place) {
            return Err(RoutineError::Failed("cannot encode this place".into()));
        }
        return Ok(input["data"].to_string());
    }
    let reply: Value = serde_json::from_str(input["reply"].as_str().unwrap())
        .map_err(|e| RoutineError::Failed(e.to_string()))?;
    Ok(json!({"temperature": reply["temperature"]}).to_string())
}

pub(crate) fn engine() -> ScriptedRoutineEngine {
    ScriptedRoutineEngine::new()
        .routine("good", |input, _| async move { codec(input, None) })
        .routine("no_bergen", |input, _| async move {
            codec(input, Some("Bergen, Norway"))
        })
        .routine("wrong_body", |input, _| async move {
            let input: Value = serde_json::from_str(&input).unwrap();
            if input["op"] == "encode" {
                return Ok(json!({"place": input["data"]["location"]}).to_string());
            }
            Ok(json!({"temperature": 3.5}).to_string())
        })
}

/// Bob serves the weather protocol with a scripted LLM.
pub(crate) async fn bob(dir: &std::path::Path) -> TestServer {
    let llm = ScriptedLlm::new(|request: &ChatRequest| match schema_name(request) {
        Some("step") => {
            let answer =
                json!({"temperature": 3.5, "precipitation": 0.0, "weatherCondition": "sunny"});
            Ok(json!({"tool": "final_answer", "answer": answer.to_string()}).to_string())
        }
        other => panic!("unexpected receiver LLM request {other:?}"),
    });
    let bob = NodeBuilder::new(llm, dir)
        .config(|c| c.tools = vec![weather_tool()])
        .spawn()
        .await;
    let document = bob.node.add_document(WEATHER_PD, &[]).await.unwrap();
    bob.node
        .set_operator_decision(&document.hash(), true, "served here")
        .await
        .unwrap();
    bob
}

async fn alice(dir: &std::path::Path, candidates: &[&'static str], max_failures: i64) -> Node {
    NodeBuilder::new(alice_llm(candidates), dir)
        .routine_engine(Arc::new(engine()))
        .config(|c| {
            c.sender.explore_threshold = 1;
            c.sender.negotiate_threshold = 100;
            c.programmer.max_routine_failures = max_failures;
        })
        .build()
        .await
}

async fn llm_calls(node: &Node) -> usize {
    agora_testkit::llm_calls(node).await.len()
}

async fn rungs(node: &Node, target: &str) -> Vec<(String, String, i64)> {
    agora_testkit::sender_runs(node, target, "weather", 100)
        .await
        .into_iter()
        .map(|run| (run.rung, run.steps, run.llm_calls))
        .collect()
}

/// Alice runs the weather task for `location` against Bob.
async fn weather_run(alice: &Node, bob: &TestServer, location: &str) -> TaskRun {
    let data = data(location);
    alice.run_task(&bob.url, &task(), &data).await.unwrap()
}

#[tokio::test]
async fn after_the_threshold_a_sender_routine_does_the_runs_without_the_llm() {
    let (a, b) = (temp_dir(), temp_dir());
    let bob = bob(b.path()).await;
    let alice = alice(a.path(), &["good"], 3).await;

    // The first run finds Bob's protocol and sends under it with the LLM; that run is an
    // example, and the threshold (1 by default) queues a job.
    let first = weather_run(&alice, &bob, "Oslo, Norway").await;
    assert!(first.protocol.is_some());
    alice.sender_routines_idle().await;
    let routines = alice.store().sender().sender_routines().await.unwrap();
    assert_eq!(routines.len(), 1);
    assert!(routines[0].active);
    assert_eq!(routines[0].source, "good");
    let attempts = alice.store().sender().sender_attempts().await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome.as_str(), "passed");
    assert_eq!(attempts[0].report, "2/2 checks passed");
    let categories = llm_categories(&alice).await;
    let implementing = categories.iter().filter(|c| *c == "implementing").count();
    assert_eq!(implementing, 1);

    // From now on: no LLM call on Alice's side, other data included.
    let before = llm_calls(&alice).await;
    for place in ["Oslo, Norway", "Paris, France", "Lima, Peru"] {
        let run = weather_run(&alice, &bob, place).await;
        assert_eq!(run.outcome.output, json!({"temperature": 3.5}));
        assert_eq!(run.outcome.llm_calls, 0);
    }
    assert_eq!(llm_calls(&alice).await, before);
    let log = rungs(&alice, &bob.url).await;
    assert_eq!(log[0].0, "protocol");
    assert_eq!(
        &log[1..],
        vec![("routine".to_string(), String::new(), 0); 3]
    );
    let routine = &alice.store().sender().sender_routines().await.unwrap()[0];
    assert_eq!((routine.runs, routine.failures), (3, 0));
    // Bob answered the routine's requests under the protocol (with his LLM).
    let hash = first.protocol.unwrap();
    assert_eq!(agora_testkit::usage(&bob.node, &hash).await.llm, 4);
}

#[tokio::test]
async fn a_failing_candidate_is_repaired() {
    let (a, b) = (temp_dir(), temp_dir());
    let bob = bob(b.path()).await;
    let alice = alice(a.path(), &["does not build", "wrong_body", "good"], 3).await;
    weather_run(&alice, &bob, "Oslo, Norway").await;
    alice.sender_routines_idle().await;
    let attempts = alice.store().sender().sender_attempts().await.unwrap();
    let outcomes: Vec<&str> = attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["build_failed", "tests_failed", "passed"]);
    assert!(
        attempts[1].report.contains("the body differs"),
        "{}",
        attempts[1].report
    );
    assert!(attempts.iter().all(|a| a.job == attempts[0].job));
    assert_eq!(attempts[2].routine_id, Some(1));
    let run = weather_run(&alice, &bob, "Oslo, Norway").await;
    assert_eq!(run.outcome.llm_calls, 0);
}

#[tokio::test]
async fn a_run_time_failure_falls_back_to_the_llm_and_retires_the_routine() {
    let (a, b) = (temp_dir(), temp_dir());
    let bob = bob(b.path()).await;
    let alice = alice(a.path(), &["no_bergen", "good"], 2).await;
    weather_run(&alice, &bob, "Oslo, Norway").await;
    alice.sender_routines_idle().await;

    // Bergen: the routine fails, the LLM does the run, the failure is counted.
    let run = weather_run(&alice, &bob, "Bergen, Norway").await;
    assert_eq!(run.outcome.output, json!({"temperature": 3.5}));
    assert_eq!(
        run.outcome.llm_calls, 2,
        "the LLM wrote the body and read the reply"
    );
    assert_eq!(run.steps, ["routine_failed"]);
    let routine = &alice.store().sender().sender_routines().await.unwrap()[0];
    assert_eq!((routine.failures, routine.active), (1, true));
    assert!(
        routine
            .last_error
            .as_deref()
            .unwrap()
            .contains("cannot encode")
    );

    // The second failure retires it; a new routine is written from the examples, the LLM's
    // fallback runs included.
    weather_run(&alice, &bob, "Bergen, Norway").await;
    alice.sender_routines_idle().await;
    let routines = alice.store().sender().sender_routines().await.unwrap();
    assert_eq!(routines.len(), 2);
    assert!(!routines[0].active);
    assert!(routines[1].active);
    assert_eq!(routines[1].source, "good");
    let attempts = alice.store().sender().sender_attempts().await.unwrap();
    assert_eq!(attempts.last().unwrap().reason.as_str(), "failures");

    let run = weather_run(&alice, &bob, "Bergen, Norway").await;
    assert_eq!(run.outcome.llm_calls, 0);
    let log = rungs(&alice, &bob.url).await;
    let rungs: Vec<&str> = log.iter().map(|(rung, _, _)| rung.as_str()).collect();
    assert_eq!(rungs, ["protocol", "protocol", "protocol", "routine"]);
}
