//! Sender-side routines over real HTTP between two nodes on 127.0.0.1, with scripted LLMs and a
//! scripted routine engine on the sender: a protocol in use gets a sender routine written and
//! examined after the threshold, and later runs make no LLM call on the sender; a failing
//! candidate is repaired; a routine failing at run time hands the run to the LLM, and is
//! disabled and rewritten after too many failures. Under the `review` activation policy a routine
//! waits for the operator's approval, rejection (its reason reaches the next prompt) or edit
//! (examined first), over the admin API.
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
    assert_eq!(statuses(&routines), [(1, "active")]);
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
    assert_eq!((routine.failures, routine.status.as_str()), (1, "active"));
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
    assert_eq!(statuses(&routines), [(1, "disabled"), (2, "active")]);
    assert_eq!(routines[1].source, "good");
    let attempts = alice.store().sender().sender_attempts().await.unwrap();
    assert_eq!(attempts.last().unwrap().reason.as_str(), "failures");

    let run = weather_run(&alice, &bob, "Bergen, Norway").await;
    assert_eq!(run.outcome.llm_calls, 0);
    let log = rungs(&alice, &bob.url).await;
    let rungs: Vec<&str> = log.iter().map(|(rung, _, _)| rung.as_str()).collect();
    assert_eq!(rungs, ["protocol", "protocol", "protocol", "routine"]);
}

/// Alice under the `review` activation policy, served over HTTP with an admin token.
async fn reviewing_alice(dir: &std::path::Path, llm: Arc<ScriptedLlm>) -> TestServer {
    NodeBuilder::new(llm, dir)
        .routine_engine(Arc::new(engine()))
        .admin_token("secret-token")
        .config(|c| {
            c.sender.explore_threshold = 1;
            c.sender.negotiate_threshold = 100;
            c.programmer.activation = agora_node::Activation::Review;
        })
        .spawn()
        .await
}

/// `POST /admin/sender-routines/{path}` with `body` on `server`: the status and the JSON reply.
async fn admin_post(server: &TestServer, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/admin/sender-routines/{path}", server.url))
        .bearer_auth("secret-token")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn statuses(routines: &[agora_store::SenderRoutine]) -> Vec<(i64, &str)> {
    routines.iter().map(|r| (r.id, r.status.as_str())).collect()
}

/// Under `review`, the routine that passed waits: the runs stay with the LLM until the operator
/// approves it over the admin API, and then Alice's runs make no LLM call. The review page shows
/// the source and the examples it was examined on, and says it is not shadow-checked.
#[tokio::test]
async fn under_review_a_sender_routine_sends_nothing_until_approved() {
    let (a, b) = (temp_dir(), temp_dir());
    let bob = bob(b.path()).await;
    let alice = reviewing_alice(a.path(), alice_llm(&["good"])).await;
    let run = |place| weather_run(&alice.node, &bob, place);
    run("Oslo, Norway").await;
    alice.node.sender_routines_idle().await;
    let store = alice.node.store().sender();
    assert_eq!(
        statuses(&store.sender_routines().await.unwrap()),
        [(1, "pending")]
    );
    let attempts = store.sender_attempts().await.unwrap();
    assert!(
        attempts[0]
            .report
            .ends_with("waiting for the operator's review"),
        "{}",
        attempts[0].report
    );

    let waiting = run("Paris, France").await;
    assert_eq!(waiting.outcome.llm_calls, 2, "the LLM still does the run");

    let page: Value = reqwest::Client::new()
        .get(format!("{}/admin/sender-routines/1/review", alice.url))
        .bearer_auth("secret-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(page["routine"]["source"], "good");
    assert_eq!(page["examples"][0]["data"], data("Oslo, Norway"));
    assert_eq!(page["shadowChecked"], false);

    let (status, approved) = admin_post(&alice, "1/approve", json!({"reviewer": "ada"})).await;
    assert_eq!((status, approved["status"].as_str()), (200, Some("active")));
    let before = llm_calls(&alice.node).await;
    let served = run("Lima, Peru").await;
    assert_eq!(served.outcome.output, json!({"temperature": 3.5}));
    assert_eq!(served.outcome.llm_calls, 0);
    assert_eq!(llm_calls(&alice.node).await, before);
    let reviews = store.sender_reviews(None).await.unwrap();
    let decided: Vec<(i64, &str, &str)> = reviews
        .iter()
        .map(|r| {
            (
                r.sender_routine_id,
                r.decision.as_str(),
                r.reviewer.as_str(),
            )
        })
        .collect();
    assert_eq!(decided, [(1, "approved", "ada")]);
    let (status, again) = admin_post(&alice, "1/approve", json!({"reviewer": "ada"})).await;
    assert_eq!(
        status, 400,
        "an active routine is not reviewed again: {again}"
    );
}

/// A rejection's reason, and the rejected code, reach the key's next programmer prompt.
#[tokio::test]
async fn a_rejected_sender_routines_reason_reaches_the_next_prompt() {
    let (a, b) = (temp_dir(), temp_dir());
    let bob = bob(b.path()).await;
    let llm = alice_llm(&["no_bergen", "good"]);
    let alice = reviewing_alice(a.path(), llm.clone()).await;
    weather_run(&alice.node, &bob, "Oslo, Norway").await;
    alice.node.sender_routines_idle().await;
    let reason = json!({"reviewer": "ada", "reason": "it must handle Bergen"});
    let (status, rejected) = admin_post(&alice, "1/reject", reason).await;
    assert_eq!(
        (status, rejected["status"].as_str()),
        (200, Some("rejected"))
    );
    let (status, _) = admin_post(&alice, "1/reject", json!({"reviewer": "ada"})).await;
    assert_eq!(status, 400, "a rejection needs a reason");

    // The next example queues the next job; its prompt carries the reason and the code.
    weather_run(&alice.node, &bob, "Bergen, Norway").await;
    alice.node.sender_routines_idle().await;
    let prompts: Vec<String> = llm
        .calls()
        .iter()
        .filter(|request| system_prompt(request).contains("handle(input)"))
        .map(|request| last_user_message(request).to_string())
        .collect();
    assert_eq!(prompts.len(), 2, "two programmer jobs");
    assert!(!prompts[0].contains("rejected"), "{}", prompts[0]);
    assert!(
        prompts[1].contains("Their reason: it must handle Bergen")
            && prompts[1].contains("no_bergen")
            && prompts[1].ends_with("Write handle(input) so that the reason no longer applies."),
        "{}",
        prompts[1]
    );
    let routines = alice.node.store().sender().sender_routines().await.unwrap();
    assert_eq!(statuses(&routines), [(1, "rejected"), (2, "pending")]);
}

/// An edit is examined on the task's kept examples: one that fails is refused with its report
/// and stored nowhere, so it cannot be approved; one that passes waits for its own approval.
#[tokio::test]
async fn an_edited_sender_routine_that_fails_its_examination_cannot_be_approved() {
    let (a, b) = (temp_dir(), temp_dir());
    let bob = bob(b.path()).await;
    let alice = reviewing_alice(a.path(), alice_llm(&["good"])).await;
    weather_run(&alice.node, &bob, "Oslo, Norway").await;
    alice.node.sender_routines_idle().await;

    let edit = json!({"reviewer": "ada", "source": "wrong_body"});
    let (status, refused) = admin_post(&alice, "1/edit", edit).await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused.to_string().contains("failed its examination"),
        "{refused}"
    );
    let store = alice.node.store().sender();
    assert_eq!(
        statuses(&store.sender_routines().await.unwrap()),
        [(1, "pending")]
    );

    let edit = json!({"reviewer": "ada", "source": "good"});
    let (status, edited) = admin_post(&alice, "1/edit", edit).await;
    assert_eq!((status, edited["id"].as_i64()), (201, Some(2)), "{edited}");
    assert_eq!(
        statuses(&store.sender_routines().await.unwrap()),
        [(1, "rejected"), (2, "pending")]
    );
    let (status, _) = admin_post(&alice, "1/approve", json!({"reviewer": "ada"})).await;
    assert_eq!(status, 400, "the edited original is not pending");
    let (status, _) = admin_post(&alice, "2/approve", json!({"reviewer": "bo"})).await;
    assert_eq!(status, 200);
    let run = weather_run(&alice.node, &bob, "Lima, Peru").await;
    assert_eq!(run.outcome.llm_calls, 0);
    let decisions: Vec<String> = store
        .sender_reviews(None)
        .await
        .unwrap()
        .iter()
        .map(|r| format!("{} {} {}", r.sender_routine_id, r.decision, r.reviewer))
        .collect();
    assert_eq!(decisions, ["1 edited ada", "2 approved bo"]);
}
