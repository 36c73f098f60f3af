//! Node-boundary tests of the programmer, with a scripted LLM and a scripted routine engine:
//! the threshold queues a job whose passing candidate is activated; a failed candidate is
//! repaired; when every attempt fails the protocol stays with the LLM; an LLM-written routine
//! that fails at run time falls back, is deactivated and rewritten; a human-written routine is
//! never replaced; and one protocol never has two jobs at once.
//!
//! The scripted LLM plays a correct weather agent (a tool call, then the tool's values under the
//! protocol's names) and hands out the candidates a test lists, by key; the scripted engine
//! builds a key into the routine registered under it, or refuses it as code that does not build.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

use agora_llm::{ChatRequest, LlmError};
use agora_node::{Node, NodeConfig, RoutineError, ToolHost};
use agora_protocol::{Body, HashDialect, ProtocolHash, ProtocolRef, Reply, Request, Status};
use agora_store::{RequestPath, RoutineAttempt, RoutineOrigin, RoutineStatus};
use agora_testkit::{
    NodeBuilder, ScriptedLlm, ScriptedRoutineEngine, human_routine, last_user_message, schema_name,
    system_prompt, temp_dir, weather_tool,
};
use serde_json::{Value, json};
use tempfile::TempDir;

const WEATHER_PD: &str = include_str!("../../../../protocols/weather-forecast.md");

pub(crate) fn hash() -> ProtocolHash {
    ProtocolHash::of(WEATHER_PD.as_bytes())
}

/// The candidates the scripted programmer hands out, in order, and a gate that can hold it.
#[derive(Clone, Default)]
pub(crate) struct Programmer {
    candidates: Arc<Mutex<VecDeque<&'static str>>>,
    gate: Arc<(Mutex<bool>, Condvar)>,
}

impl Programmer {
    pub(crate) fn with(candidates: &[&'static str]) -> Self {
        let programmer = Self::default();
        programmer
            .candidates
            .lock()
            .unwrap()
            .extend(candidates.iter().copied());
        *programmer.gate.0.lock().unwrap() = true;
        programmer
    }

    fn close_gate(&self) {
        *self.gate.0.lock().unwrap() = false;
    }

    fn open_gate(&self) {
        *self.gate.0.lock().unwrap() = true;
        self.gate.1.notify_all();
    }

    fn answer(&self) -> String {
        let (open, changed) = &*self.gate;
        let mut open_now = open.lock().unwrap();
        while !*open_now {
            open_now = changed.wait(open_now).unwrap();
        }
        let key = self
            .candidates
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or("none");
        format!("Here is the routine:\n```javascript\n{key}\n```\n")
    }
}

pub(crate) fn is_programmer_call(request: &ChatRequest) -> bool {
    schema_name(request).is_none() && system_prompt(request).contains("handle(body)")
}

/// A correct weather agent, and the scripted programmer.
pub(crate) fn llm(programmer: &Programmer) -> Arc<ScriptedLlm> {
    weather_agent(Some(programmer.clone()), correct_step)
}

/// A correct weather agent's step after `last`: a tool call for the request, then the tool's
/// values under the protocol's names.
fn correct_step(last: &str) -> String {
    if let Some(body) = last.strip_prefix("Request body:\n") {
        forecast_call(body)
    } else if let Some(result) = last.strip_prefix("Result of weather_forecast: ") {
        let forecast: Value = serde_json::from_str(result).unwrap();
        let answer = json!({
            "temperature": forecast["temperature_c"],
            "precipitation": forecast["precipitation_mm"],
            "weatherCondition": forecast["condition"],
        });
        json!({"tool": "final_answer", "answer": answer}).to_string()
    } else {
        panic!("unexpected step: {last}")
    }
}

/// A weather agent that finds every protocol suitable and answers each step with `step` of
/// the last user message; with a `programmer`, it also writes routines.
fn weather_agent(
    programmer: Option<Programmer>,
    step: impl Fn(&str) -> String + Send + Sync + 'static,
) -> Arc<ScriptedLlm> {
    ScriptedLlm::new(move |request| {
        if let Some(programmer) = programmer.as_ref().filter(|_| is_programmer_call(request)) {
            return Ok(programmer.answer());
        }
        agent_turn(request, &step)
    })
}

/// The weather agent's answer to a request that is not the programmer's.
fn agent_turn(request: &ChatRequest, step: &dyn Fn(&str) -> String) -> Result<String, LlmError> {
    match schema_name(request) {
        Some("suitability") => Ok(r#"{"suitable": "yes", "reason": "weather tool"}"#.into()),
        Some("step") => Ok(step(last_user_message(request))),
        other => panic!("unexpected LLM request {other:?}"),
    }
}

/// The weather agent's step for a request body: a call of the forecast tool for its place and
/// date.
fn forecast_call(body: &str) -> String {
    let body: Value = serde_json::from_str(body).unwrap();
    let arguments = json!({"location": body["location"], "date": body["date"]});
    json!({"tool": "weather_forecast", "arguments": arguments}).to_string()
}

/// The forecast for the request's place and date, from the weather tool.
async fn forecast(body: &str, tools: &dyn ToolHost) -> Result<Value, RoutineError> {
    let request: Value =
        serde_json::from_str(body).map_err(|e| RoutineError::Failed(e.to_string()))?;
    let arguments = json!({"location": request["location"], "date": request["date"]});
    let forecast = tools
        .call_tool("weather_forecast", &arguments.to_string())
        .await
        .map_err(RoutineError::Failed)?;
    Ok(serde_json::from_str(&forecast).unwrap())
}

/// What the weather agent replies.
pub(crate) async fn good(body: String, tools: Arc<dyn ToolHost>) -> Result<String, RoutineError> {
    let forecast = forecast(&body, tools.as_ref()).await?;
    Ok(json!({
        "temperature": forecast["temperature_c"],
        "precipitation": forecast["precipitation_mm"],
        "weatherCondition": forecast["condition"],
    })
    .to_string())
}

/// A candidate that drops two fields of the reply.
pub(crate) async fn wrong(body: String, tools: Arc<dyn ToolHost>) -> Result<String, RoutineError> {
    let forecast = forecast(&body, tools.as_ref()).await?;
    Ok(json!({"temperature": forecast["temperature_c"]}).to_string())
}

/// A candidate whose check rejects Lima's request: the check is the middle line, which the node
/// may take out (leaving [`UNGUARDED`], which behaves like "good").
const GUARDED: &str =
    "guarded\n  if (!r1.precipitation_mm) { return { error: \"Invalid forecast\" }; }\ngood";
const UNGUARDED: &str = "guarded\ngood";
/// A check that rejects Lima in front of code that is wrong except for Lima; without the check
/// ([`HALF_UNGUARDED`]) one more example passes, but not all.
const HALF_GUARDED: &str =
    "half\n  if (!r1.precipitation_mm) { return { error: \"Invalid forecast\" }; }\nhalf";
const HALF_UNGUARDED: &str = "half\nhalf";
/// Two checks returning the same error; only the second one rejects Lima.
const TWICE_GUARDED: &str = "twice\n  if (!request) { return { error: \"Invalid forecast\" }; }\n  \
     if (!r1.precipitation_mm) { return { error: \"Invalid forecast\" }; }\ngood";
const TWICE_GUARDED_FIRST_OUT: &str =
    "twice\n  if (!r1.precipitation_mm) { return { error: \"Invalid forecast\" }; }\ngood";
const TWICE_GUARDED_SECOND_OUT: &str =
    "twice\n  if (!request) { return { error: \"Invalid forecast\" }; }\ngood";
/// The same check in front of a candidate that is wrong anyway: taking it out does not help.
const GUARDED_WRONG: &str =
    "guarded\n  if (!r1.precipitation_mm) { return { error: \"Invalid forecast\" }; }\nwrong";

async fn rejects_lima(body: String, tools: Arc<dyn ToolHost>) -> Result<String, RoutineError> {
    if body.contains("Lima") {
        return Ok(json!({"error": "Invalid forecast"}).to_string());
    }
    good(body, tools).await
}

async fn rejects_lima_else_wrong(
    body: String,
    tools: Arc<dyn ToolHost>,
) -> Result<String, RoutineError> {
    if body.contains("Lima") {
        return Ok(json!({"error": "Invalid forecast"}).to_string());
    }
    wrong(body, tools).await
}

/// The candidates, by key. "good" does what the weather agent does; "wrong" (and "wrong again",
/// "wrong once more": other code, same behaviour) drops a field;
/// "flaky" is right except for Atlantis, where it fails; [`GUARDED`] rejects Lima; anything else
/// does not build.
pub(crate) fn engine() -> ScriptedRoutineEngine {
    ScriptedRoutineEngine::new()
        .routine("good", good)
        .routine(GUARDED, rejects_lima)
        .routine(UNGUARDED, good)
        .routine(TWICE_GUARDED, rejects_lima)
        .routine(HALF_GUARDED, rejects_lima_else_wrong)
        .routine(HALF_UNGUARDED, |body, tools| async move {
            if body.contains("Lima") {
                return good(body, tools).await;
            }
            wrong(body, tools).await
        })
        .routine(TWICE_GUARDED_FIRST_OUT, rejects_lima)
        .routine(TWICE_GUARDED_SECOND_OUT, good)
        .routine(GUARDED_WRONG, rejects_lima_else_wrong)
        .routine("guarded\nwrong", wrong)
        .routine("wrong", wrong)
        .routine("wrong again", wrong)
        .routine("wrong once more", wrong)
        .routine("flaky", |body, tools| async move {
            if body.contains("Atlantis") {
                return Err(RoutineError::Failed("no such place".into()));
            }
            good(body, tools).await
        })
}

pub(crate) async fn node(dir: &std::path::Path, programmer: &Programmer, threshold: u64) -> Node {
    node_with(llm(programmer), engine(), dir, |c| {
        c.thresholds.implementation = threshold;
    })
    .await
}

/// A node with the weather tool and document, `llm` and `engine`, configured by `configure`.
pub(crate) async fn node_with(
    llm: Arc<ScriptedLlm>,
    engine: ScriptedRoutineEngine,
    dir: &std::path::Path,
    configure: impl FnOnce(&mut NodeConfig),
) -> Node {
    let node = NodeBuilder::new(llm, dir)
        .config(|c| {
            c.tools = vec![weather_tool()];
            configure(c);
        })
        .routine_engine(Arc::new(engine))
        .build()
        .await;
    with_document(node).await
}

/// The node knows the weather document (the requests carry no sources).
async fn with_document(node: Node) -> Node {
    node.add_document(WEATHER_PD, &[]).await.unwrap();
    node
}

pub(crate) async fn ask(node: &Node, location: &str, day: u32) -> Reply {
    let reply = node
        .handle(Request {
            protocol: ProtocolRef::Protocol(hash()),
            hash_dialect: HashDialect::Hex,
            sources: vec![],
            body: Body::Json(json!({"location": location, "date": format!("2024-09-{day:02}")})),
            multiround: false,
        })
        .await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
    reply
}

/// Asserts that `holds` is true of the attempt's report, and shows the report when not.
fn assert_report(attempt: &RoutineAttempt, holds: impl FnOnce(&str) -> bool) {
    assert!(holds(&attempt.report), "{}", attempt.report);
}

/// The LLM's attempts for the weather protocol, oldest first: see [`llm_attempts`].
pub(crate) async fn attempts_of(node: &Node) -> Vec<RoutineAttempt> {
    llm_attempts(agora_testkit::attempts(node, &hash()).await)
}

/// The attempts after each job's first, which is always the compiler's (the scripted engine
/// cannot build a compiled program, so here it is recorded as not built and the LLM is asked;
/// agora-server's `compiled_routines` runs compiled programs on the real engine).
pub(crate) fn llm_attempts(all: Vec<RoutineAttempt>) -> Vec<RoutineAttempt> {
    let mut jobs = std::collections::HashSet::new();
    all.into_iter()
        .filter(|attempt| {
            if !jobs.insert(attempt.job.clone()) {
                return true;
            }
            assert!(
                attempt.report.starts_with("compiled from")
                    || attempt.report.starts_with("nothing compiled"),
                "a job opens with the compiler's attempt: {}",
                attempt.report
            );
            false
        })
        .collect()
}

/// The outcome of every attempt, in order.
pub(crate) fn outcomes(attempts: &[RoutineAttempt]) -> Vec<&str> {
    attempts.iter().map(|a| a.outcome.as_str()).collect()
}

pub(crate) async fn paths(node: &Node) -> Vec<RequestPath> {
    let mut requests = agora_testkit::recent_requests(node, 100).await;
    requests.reverse();
    requests.into_iter().map(|r| r.path).collect()
}

pub(crate) async fn implementing_calls(node: &Node) -> usize {
    agora_testkit::llm_calls(node)
        .await
        .iter()
        .filter(|c| c.category == "implementing")
        .count()
}

/// A node whose programmer (threshold 2) ran on a Paris and a Lima request with `candidates`,
/// and its attempts.
async fn programmed_after_paris_and_lima(
    candidates: &[&'static str],
) -> (TempDir, Node, Vec<RoutineAttempt>) {
    let dir = temp_dir();
    let programmer = Programmer::with(candidates);
    let node = node(dir.path(), &programmer, 2).await;
    ask(&node, "Paris", 1).await;
    ask(&node, "Lima", 2).await;
    node.programmer_idle().await;
    let attempts = attempts_of(&node).await;
    (dir, node, attempts)
}

/// The one attempt of a job after Paris and Lima, once checked that it passed.
async fn passed_once(candidates: &[&'static str]) -> (TempDir, Node, RoutineAttempt) {
    let (dir, node, mut attempts) = programmed_after_paris_and_lima(candidates).await;
    assert_eq!(outcomes(&attempts), ["passed"]);
    (dir, node, attempts.remove(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_threshold_queues_a_job_whose_passing_routine_answers_from_then_on() {
    let dir = temp_dir();
    let programmer = Programmer::with(&["good"]);
    let node = node(dir.path(), &programmer, 5).await;
    for day in 1..=4 {
        ask(&node, "Paris", day).await;
    }
    node.programmer_idle().await;
    assert_eq!(implementing_calls(&node).await, 0, "below the threshold");

    ask(&node, "Paris", 5).await;
    node.programmer_idle().await;
    let attempts = attempts_of(&node).await;
    assert_eq!(attempts.len(), 1);
    let attempt = &attempts[0];
    assert_eq!(
        (attempt.outcome.as_str(), attempt.reason.as_str()),
        ("passed", "threshold")
    );
    assert_eq!(attempt.report, "5/5 examples passed");
    assert_eq!(attempt.source.as_deref(), Some("good"));
    assert!(attempt.prompt_tokens > 0 && attempt.completion_tokens > 0);
    let routine = node
        .routines()
        .find(&format!("{}", attempt.routine_id.unwrap()))
        .await
        .unwrap();
    assert_eq!(
        (routine.origin, routine.status),
        (RoutineOrigin::Llm, RoutineStatus::Active)
    );
    assert_eq!(routine.tools, vec!["weather_forecast".to_string()]);

    // The programmer's prompt had the document, the tool and recorded tool calls.
    let calls = agora_testkit::llm_calls(&node).await;
    let llm_calls_before = calls.len();
    assert_eq!(implementing_calls(&node).await, 1);

    let expected = ask(&node, "Paris", 1).await; // a request seen before: same reply
    let replay = ask(&node, "Oslo", 6).await;
    assert_eq!(
        agora_testkit::llm_calls(&node).await.len(),
        llm_calls_before
    );
    let paths = paths(&node).await;
    assert_eq!(&paths[5..], &[RequestPath::Routine, RequestPath::Routine]);
    assert!(expected.body.is_some() && replay.body.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_candidate_is_repaired_with_its_failure() {
    let (_dir, node, attempts) = programmed_after_paris_and_lima(&["wrong", "good"]).await;
    assert_eq!(outcomes(&attempts), ["tests_failed", "passed"]);
    assert_report(&attempts[0], |report| {
        report.starts_with("0/2 examples passed; example 1 failed: ")
    });
    assert!(attempts[0].report.contains(".precipitation is missing"));
    assert_eq!(attempts[0].job, attempts[1].job);
    assert!(attempts[1].routine_id.is_some() && attempts[0].routine_id.is_none());

    assert_eq!(implementing_calls(&node).await, 2);
    let reply = ask(&node, "Lima", 3).await;
    assert!(reply.body.is_some());
    assert_eq!(paths(&node).await.last(), Some(&RequestPath::Routine));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_rejects_a_valid_example_is_taken_out_without_asking_the_llm() {
    let (_dir, node, attempt) = passed_once(&[GUARDED]).await;
    assert_eq!(
        attempt.report,
        "2/2 examples passed; the node took out the check `if (!r1.precipitation_mm)`, which \
         rejected a valid example"
    );
    assert_eq!(attempt.source.as_deref(), Some(UNGUARDED));
    assert_eq!(implementing_calls(&node).await, 1);
    ask(&node, "Lima", 3).await;
    assert_eq!(paths(&node).await.last(), Some(&RequestPath::Routine));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_checks_with_the_same_error_the_one_that_rejects_is_taken_out() {
    let (_dir, _node, attempt) = passed_once(&[TWICE_GUARDED]).await;
    assert_eq!(attempt.source.as_deref(), Some(TWICE_GUARDED_SECOND_OUT));
    assert_report(&attempt, |report| {
        report.ends_with(
            "took out the check `if (!r1.precipitation_mm)`, which rejected a valid example",
        )
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_that_helps_but_does_not_pass_goes_to_the_repair_and_counts_as_tried() {
    // The model's repair gives back the node's edit: a repeat. The job starts over once from
    // the first prompt with the failure explained; the scripted model then has nothing ("none",
    // which does not build), and its next answer repeats that, which ends the job.
    let (_dir, _node, attempts) =
        programmed_after_paris_and_lima(&[HALF_GUARDED, HALF_UNGUARDED]).await;
    assert_eq!(
        outcomes(&attempts),
        ["tests_failed", "repeated", "build_failed", "repeated"]
    );
    assert_eq!(attempts[0].source.as_deref(), Some(HALF_UNGUARDED));
    assert_report(&attempts[0], |report| {
        report.starts_with("1/2 examples passed") && report.contains("took out the check")
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_is_kept_when_taking_it_out_does_not_help() {
    let (_dir, node, attempts) = programmed_after_paris_and_lima(&[GUARDED_WRONG, "good"]).await;
    assert_eq!(outcomes(&attempts), ["tests_failed", "passed"]);
    assert_eq!(attempts[0].source.as_deref(), Some(GUARDED_WRONG));
    assert_report(&attempts[0], |report| !report.contains("took out"));
    // Trying the edit cost no LLM call: one for the candidate, one for the repair.
    assert_eq!(implementing_calls(&node).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repair_prompt_carries_the_failing_example() {
    let dir = temp_dir();
    let programmer = Programmer::with(&["wrong", "good"]);
    let scripted = llm(&programmer);
    let node = node_with(scripted.clone(), engine(), dir.path(), |c| {
        c.thresholds.implementation = 1;
    })
    .await;
    ask(&node, "Paris", 1).await;
    node.programmer_idle().await;
    let programming: Vec<ChatRequest> = scripted
        .calls()
        .into_iter()
        .filter(is_programmer_call)
        .collect();
    assert_eq!(programming.len(), 2);
    let first = last_user_message(&programming[0]);
    assert!(first.contains("weather_forecast"), "{first}");
    assert!(first.contains("Reply: {"), "{first}");
    assert!(
        first.contains(r#"callTool("weather_forecast", {"#),
        "{first}"
    );
    // The example is also shown as code, each value traced to where it came from.
    assert!(first.contains("Example 1 as code"), "{first}");
    assert!(
        first.contains(r#"const r1 = callTool("weather_forecast", { location: request.location"#),
        "{first}"
    );
    let repair = &programming[1].messages;
    assert_eq!(repair.len(), 4, "system, task, candidate, failure");
    assert!(repair[2].content.contains("wrong"));
    let failure = &repair[3].content;
    assert!(failure.contains("Expected reply:"), "{failure}");
    assert!(failure.contains(r#""location":"Paris""#), "{failure}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_attempt_fails_the_protocol_stays_with_the_llm() {
    let dir = temp_dir();
    let programmer =
        Programmer::with(&["wrong", "does not build", "wrong again", "wrong once more"]);
    let node = node(dir.path(), &programmer, 2).await;
    ask(&node, "Paris", 1).await;
    ask(&node, "Lima", 2).await;
    node.programmer_idle().await;

    let attempts = attempts_of(&node).await;
    assert_eq!(
        outcomes(&attempts),
        [
            "tests_failed",
            "build_failed",
            "tests_failed",
            "tests_failed"
        ],
        "the first candidate and repair_attempts = 3 repairs"
    );
    assert_report(&attempts[1], |report| report.contains("does not build"));
    assert!(node.routines().list().await.unwrap().is_empty());

    // The LLM keeps answering; one more request is not enough for another job.
    ask(&node, "Oslo", 3).await;
    node.programmer_idle().await;
    assert_eq!(implementing_calls(&node).await, 4);
    assert_eq!(paths(&node).await.last(), Some(&RequestPath::Llm));
    // After a job that found nothing the wait doubles: two more are not enough either...
    ask(&node, "Rome", 4).await;
    node.programmer_idle().await;
    assert_eq!(implementing_calls(&node).await, 4);
    // ...four are: the next job sees the examples recorded since the last one.
    ask(&node, "Quito", 5).await;
    ask(&node, "Perth", 6).await;
    node.programmer_idle().await;
    let attempts = attempts_of(&node).await;
    assert_ne!(attempts[4].job, attempts[3].job);
    assert_eq!(attempts[4].examples_upto, attempts[3].examples_upto + 4);
    // The scripted model has run out of ideas and answers "none" every time: the first repeat
    // starts the job over once with a fresh prompt, the second repeat ends it instead of asking
    // once more.
    let second: Vec<&str> = attempts[4..].iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(second, ["build_failed", "repeated", "repeated"]);
    assert_eq!(implementing_calls(&node).await, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routine_failing_at_run_time_falls_back_is_deactivated_and_rewritten() {
    let dir = temp_dir();
    let programmer = Programmer::with(&["flaky", "good"]);
    let node = node(dir.path(), &programmer, 1).await;
    ask(&node, "Paris", 1).await;
    node.programmer_idle().await;
    let flaky = node.routines().list().await.unwrap().remove(0);
    assert_eq!(flaky.status, RoutineStatus::Active);

    // Three failures: each is answered by the LLM fallback and becomes an example.
    for day in 2..=4 {
        let reply = ask(&node, "Atlantis", day).await;
        assert!(reply.body.unwrap().to_text().contains("temperature"));
    }
    node.programmer_idle().await;
    let routines = node.routines().list().await.unwrap();
    assert_eq!(routines.len(), 2);
    let retired = &routines[0];
    assert_eq!(
        (retired.status, retired.failures, retired.runs),
        (RoutineStatus::Disabled, 3, 3)
    );
    assert!(
        retired
            .last_error
            .as_deref()
            .unwrap()
            .contains("no such place")
    );
    let rewritten = &routines[1];
    assert_eq!(
        (rewritten.origin, rewritten.status),
        (RoutineOrigin::Llm, RoutineStatus::Active)
    );
    let attempts = attempts_of(&node).await;
    let reasons: Vec<&str> = attempts.iter().map(|a| a.reason.as_str()).collect();
    assert_eq!(reasons, ["threshold", "failures"]);
    assert_eq!(
        attempts[1].report, "4/4 examples passed",
        "the failing requests are examples"
    );

    ask(&node, "Atlantis", 5).await;
    assert_eq!(
        paths(&node).await,
        [
            RequestPath::Llm,
            RequestPath::Fallback,
            RequestPath::Fallback,
            RequestPath::Fallback,
            RequestPath::Routine
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_routine_is_never_replaced() {
    let dir = temp_dir();
    let programmer = Programmer::with(&["good"]);
    let node = node(dir.path(), &programmer, 1).await;
    let human = node
        .add_routine(human_routine(
            "human-weather",
            WEATHER_PD,
            "flaky",
            &["weather_forecast"],
        ))
        .await
        .unwrap();
    for day in 1..=5 {
        ask(&node, "Atlantis", day).await;
    }
    node.programmer_idle().await;
    let routines = node.routines().list().await.unwrap();
    assert_eq!(routines.len(), 1);
    assert_eq!(routines[0].id, human.id);
    assert_eq!(
        (routines[0].status, routines[0].failures),
        (RoutineStatus::Active, 5)
    );
    assert_eq!(implementing_calls(&node).await, 0);
    assert!(
        paths(&node)
            .await
            .iter()
            .all(|p| *p == RequestPath::Fallback)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_protocol_never_has_two_jobs_at_once() {
    let dir = temp_dir();
    let programmer = Programmer::with(&["wrong"]);
    programmer.close_gate();
    let node = node_with(llm(&programmer), engine(), dir.path(), |c| {
        c.thresholds.implementation = 1;
        c.programmer.repair_attempts = 0;
    })
    .await;
    // The first request queues a job, held at its LLM call; the next ones find it pending.
    for day in 1..=3 {
        ask(&node, "Paris", day).await;
    }
    programmer.open_gate();
    node.programmer_idle().await;
    let attempts = attempts_of(&node).await;
    assert_eq!(attempts.len(), 1);
    assert_eq!(implementing_calls(&node).await, 1);
}

#[tokio::test]
async fn examples_keep_the_tool_calls_and_are_bounded() {
    let dir = temp_dir();
    let programmer = Programmer::with(&[]);
    let node = node_with(llm(&programmer), engine(), dir.path(), |c| {
        c.thresholds.implementation = 100;
        c.programmer.max_examples = 3;
    })
    .await;
    for day in 1..=4 {
        ask(&node, "Quito", day).await;
    }
    let examples = node
        .store()
        .programming()
        .examples(&hash(), 10)
        .await
        .unwrap();
    assert_eq!(examples.len(), 3, "only the newest are kept");
    let first = &examples[0];
    assert!(first.body.contains("2024-09-02"), "{}", first.body);
    let call = &first.tool_calls[0];
    assert_eq!(call["tool"], "weather_forecast");
    assert_eq!(call["arguments"]["location"], "Quito");
    assert!(call["result"]["temperature_c"].is_number());
    let reply: Value = serde_json::from_str(&first.reply).unwrap();
    assert_eq!(reply["temperature"], call["result"]["temperature_c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_programmer_runs_again_after_repeated_failed_jobs() {
    let dir = temp_dir();
    // Nothing the scripted model writes builds. Three examples are kept: the doubling wait
    // (2, 4, 8, ...) is capped at 3, so every third new example brings another job.
    let programmer = Programmer::with(&[]);
    let node = node_with(llm(&programmer), engine(), dir.path(), |c| {
        c.thresholds.implementation = 2;
        c.programmer.max_examples = 3;
    })
    .await;
    let mut day = 0;
    let mut ask_next = async |n: u32| {
        for _ in 0..n {
            day += 1;
            ask(&node, "Paris", day).await;
        }
        node.programmer_idle().await;
    };
    ask_next(2).await;
    for _ in 0..3 {
        ask_next(3).await;
    }
    let attempts = attempts_of(&node).await;
    let mut jobs: Vec<&str> = attempts.iter().map(|a| a.job.as_str()).collect();
    jobs.dedup();
    assert_eq!(jobs.len(), 4, "a job after 2 examples, then one per 3 more");
    assert!(attempts.iter().all(|a| a.routine_id.is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examination_forgives_an_empty_member_the_model_wrote_once() {
    let dir = temp_dir();
    let programmer = Programmer::with(&["good", "good", "good", "good"]);
    // The agent adds an empty "error" to Paris's reply, and not to Lima's; "good" never writes
    // one.
    let llm = weather_agent(Some(programmer), |last| {
        let step = correct_step(last);
        if !last.contains("Paris") || !step.contains("final_answer") {
            return step;
        }
        let mut step: Value = serde_json::from_str(&step).unwrap();
        step["answer"]["error"] = json!("");
        step.to_string()
    });
    let node = node_with(llm, engine(), dir.path(), |c| {
        c.thresholds.implementation = 2;
    })
    .await;
    ask(&node, "Paris", 1).await;
    ask(&node, "Lima", 2).await;
    node.programmer_idle().await;
    let attempts = attempts_of(&node).await;
    assert_eq!(outcomes(&attempts), ["passed"]);
}

/// The node's weather tool, to know what it answers.
fn forecast_of(location: &str, day: u32) -> Value {
    agora_node::tools::WeatherForecastTool::new(7).forecast(location, &format!("2024-09-{day:02}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examination_rejects_a_candidate_that_hard_codes_a_tool_value() {
    let dir = temp_dir();
    // A day whose forecast is no small number: a routine returning its temperature as a
    // constant passes the one example.
    let day = (1..=28)
        .find(|day| {
            forecast_of("Paris", *day)["temperature_c"]
                .as_f64()
                .unwrap()
                .abs()
                > 2.0
        })
        .unwrap();
    let temperature = forecast_of("Paris", day)["temperature_c"].clone();
    let constant: &'static str = Box::leak(
        format!("constant\n  return {{ temperature: {temperature}, precipitation: r1.precipitation_mm }};")
            .into_boxed_str(),
    );
    let programmer = Programmer::with(&[constant, "good"]);
    let node = node_with(
        llm(&programmer),
        engine().routine(constant, good),
        dir.path(),
        |c| {
            c.thresholds.implementation = 1;
        },
    )
    .await;
    ask(&node, "Paris", day).await;
    node.programmer_idle().await;
    let attempts = attempts_of(&node).await;
    assert_eq!(outcomes(&attempts), ["tests_failed", "passed"]);
    assert_report(&attempts[0], |report| {
        report.starts_with("1/1 examples passed; rejected: Your code writes")
            && report.contains(&temperature.to_string())
            && report.contains("weather_forecast")
    });
    assert_eq!(attempts[1].source.as_deref(), Some("good"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_routine_is_written_from_fewer_distinct_requests_than_the_threshold() {
    let dir = temp_dir();
    let programmer = Programmer::with(&["good"]);
    let node = node_with(
        llm(&programmer),
        engine().routine("good", good),
        dir.path(),
        |c| {
            c.thresholds.implementation = 2;
        },
    )
    .await;
    // The same request twice is one distinct example: no job writes anything from it.
    ask(&node, "Paris", 3).await;
    ask(&node, "Paris", 3).await;
    node.programmer_idle().await;
    assert!(agora_testkit::attempts(&node, &hash()).await.is_empty());
    // A different request makes two: now the programmer writes one.
    ask(&node, "Paris", 4).await;
    node.programmer_idle().await;
    assert_eq!(outcomes(&attempts_of(&node).await), ["passed"]);
}

/// A weather agent that looks the forecast up and then answers with a temperature of its own,
/// or (with `look` false) answers at once without any tool.
fn inventing_llm(look: bool) -> Arc<ScriptedLlm> {
    weather_agent(None, move |last| {
        match last.strip_prefix("Request body:\n") {
            Some(body) if look => forecast_call(body),
            _ => json!({"tool": "final_answer", "answer": {
                "temperature": 99, "precipitation": 0, "weatherCondition": "sunny"}})
            .to_string(),
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grounding_keeps_no_example_of_an_invented_or_unlooked_answer() {
    for look in [true, false] {
        let dir = temp_dir();
        let node = node_with(inventing_llm(look), engine(), dir.path(), |c| {
            c.thresholds.implementation = 1;
        })
        .await;
        for day in 1..=3 {
            // The peer still gets the answer: grounding decides what the programmer learns from.
            let reply = ask(&node, "Paris", day).await;
            assert!(reply.body.unwrap().to_text().contains("99"));
        }
        node.programmer_idle().await;
        assert!(
            node.store()
                .programming()
                .examples(&hash(), 10)
                .await
                .unwrap()
                .is_empty(),
            "look: {look}"
        );
        assert_eq!(implementing_calls(&node).await, 0, "look: {look}");
    }
}

/// A node that answers protocol requests with programs (code as action) and programs at the
/// first example.
async fn acting_node(dir: &std::path::Path, programmer: &Programmer, threshold: u64) -> Node {
    node_with(llm(programmer), engine(), dir, |c| {
        c.thresholds.implementation = threshold;
        c.responder.code_as_action = true;
        c.responder.program_attempts = 2;
    })
    .await
}

async fn conversation_calls(node: &Node) -> usize {
    agora_testkit::llm_categories(node)
        .await
        .iter()
        .filter(|category| *category == "conversation")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_as_action_answers_with_a_program_that_becomes_the_routine_without_an_llm_call() {
    let dir = temp_dir();
    let programmer = Programmer::with(&["good"]);
    let node = acting_node(dir.path(), &programmer, 1).await;
    let reply = ask(&node, "Paris", 1).await;
    node.programmer_idle().await;

    // One LLM call wrote the program (the tool loop takes two: a tool call, then the answer).
    assert_eq!(conversation_calls(&node).await, 1);
    let body = reply.body.unwrap().to_text();
    let body: Value = serde_json::from_str(&body).unwrap();
    for field in ["temperature", "precipitation", "weatherCondition"] {
        assert!(body.get(field).is_some(), "{body}");
    }
    // The program's tool call was recorded for the example, and the program was examined on
    // it as the first candidate, with no implementing call.
    let attempts = attempts_of(&node).await;
    assert_eq!(outcomes(&attempts), ["passed"]);
    assert_eq!(attempts[0].report, "1/1 examples passed");
    assert_eq!(attempts[0].source.as_deref(), Some("good"));
    assert_eq!(attempts[0].prompt_tokens, 0);
    assert_eq!(implementing_calls(&node).await, 0);

    let calls_before = agora_testkit::llm_calls(&node).await.len();
    ask(&node, "Oslo", 2).await;
    assert_eq!(paths(&node).await, [RequestPath::Llm, RequestPath::Routine]);
    assert_eq!(agora_testkit::llm_calls(&node).await.len(), calls_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_fails_is_repaired_once_and_then_the_tool_loop_answers() {
    let dir = temp_dir();
    // "flaky" fails on Atlantis; its repair, "none", does not build.
    let programmer = Programmer::with(&["flaky", "none"]);
    let node = acting_node(dir.path(), &programmer, 5).await;
    let reply = ask(&node, "Atlantis", 1).await;
    assert!(reply.body.is_some());
    // Two programs, then the tool loop's two steps.
    assert_eq!(conversation_calls(&node).await, 4);
    assert_eq!(paths(&node).await, [RequestPath::Llm]);
    assert!(programmer.candidates.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answering_program_that_fails_the_examination_goes_to_the_model_for_repair() {
    let dir = temp_dir();
    // Paris: "flaky" answers. Atlantis: "flaky" fails, its repair "none" does not build, and the
    // tool loop answers. The job then examines "flaky" on both examples (no LLM call), and
    // the model's repair of it, "good", passes.
    let programmer = Programmer::with(&["flaky", "flaky", "none", "good"]);
    let node = acting_node(dir.path(), &programmer, 2).await;
    ask(&node, "Paris", 1).await;
    ask(&node, "Atlantis", 2).await;
    node.programmer_idle().await;
    let attempts = attempts_of(&node).await;
    assert_eq!(outcomes(&attempts), ["tests_failed", "passed"]);
    assert_eq!(attempts[0].source.as_deref(), Some("flaky"));
    assert_eq!(attempts[0].prompt_tokens, 0);
    assert_report(&attempts[0], |report| {
        report.starts_with("1/2 examples passed")
    });
    assert_eq!(attempts[1].source.as_deref(), Some("good"));
    assert_eq!(implementing_calls(&node).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_repeated_in_its_repair_starts_the_conversation_over_once() {
    let dir = temp_dir();
    // "flaky" fails on Atlantis and comes back as its repair; the conversation starts over from
    // the first request, and the model's next program, "good", answers.
    let programmer = Programmer::with(&["flaky", "flaky", "good"]);
    let node = node_with(llm(&programmer), engine(), dir.path(), |c| {
        c.thresholds.implementation = 5;
        c.responder.code_as_action = true;
        c.responder.program_attempts = 3;
    })
    .await;
    ask(&node, "Atlantis", 1).await;
    assert_eq!(conversation_calls(&node).await, 3);
    assert!(programmer.candidates.lock().unwrap().is_empty());
}

/// Two replicas of a node (two `Node`s on one store, as two processes on one PostgreSQL would
/// be): replica A's job holds the job lease while its model works, so replica B, whose requests
/// cross the threshold too, runs no second job. When A stops renewing (it died: here the clock
/// passes the lease), B's next job takes the lease and writes the routine; A, woken later, adds no
/// second routine or attempt. (Which guard stops A there, the lease check before storing or the
/// routine B already made active, this test does not tell apart.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_run_a_programmer_job_once_and_take_up_a_dead_replicas_job() {
    replicas_share_one_programmer_job(None).await;
}

/// The same on PostgreSQL, the store replicas share in production (`docs/replicas.md`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs AGORA_TEST_POSTGRES_URL (scripts/test.sh's slow phase)"]
async fn replicas_on_postgres_run_a_programmer_job_once_and_take_up_a_dead_replicas_job() {
    let url = agora_testkit::postgres_schema("agora_node_replica_jobs").await;
    replicas_share_one_programmer_job(Some(&url)).await;
}

/// Two replicas on one store (`store_url`, else a SQLite file): see the test above.
async fn replicas_share_one_programmer_job(store_url: Option<&str>) {
    let dir = temp_dir();
    let clock = Arc::new(agora_node::ManualClock::new(1_700_000_000_000));
    let stalled = Programmer::with(&["good"]);
    stalled.close_gate();
    let llm_a = llm(&stalled);
    let a = with_document(replica(llm_a.clone(), dir.path(), store_url, clock.clone()).await).await;
    let llm_b = llm(&Programmer::with(&["good"]));
    let b = replica(llm_b.clone(), dir.path(), store_url, clock.clone()).await;
    let programmer_calls = |llm: &ScriptedLlm| {
        llm.calls()
            .iter()
            .filter(|request| is_programmer_call(request))
            .count()
    };

    ask(&a, "Paris", 1).await;
    ask(&a, "Lima", 2).await;
    // A's job is now waiting on its model, with the lease.
    let started = std::time::Instant::now();
    while programmer_calls(&llm_a) == 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "A's job never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    ask(&b, "Oslo", 3).await;
    b.programmer_idle().await;
    assert_eq!(programmer_calls(&llm_b), 0, "B ran no second job");
    assert!(llm_attempts(agora_testkit::attempts(&b, &hash()).await).is_empty());

    // A stops renewing; past the lease, B's next job takes it up. A's job already counts as
    // one that found nothing (its compiled candidate failed), so the threshold has doubled: four
    // examples since its attempt.
    clock.advance(std::time::Duration::from_secs(61));
    for (location, day) in [("Rome", 4), ("Cairo", 5), ("Quito", 6)] {
        ask(&b, location, day).await;
    }
    b.programmer_idle().await;
    assert_eq!(programmer_calls(&llm_b), 1);
    let attempts = llm_attempts(agora_testkit::attempts(&b, &hash()).await);
    assert_eq!(outcomes(&attempts), ["passed"]);

    // A wakes and adds nothing.
    stalled.open_gate();
    a.programmer_idle().await;
    let routines = a.store().routines().await.unwrap();
    assert_eq!(routines.len(), 1, "{routines:?}");
    assert_eq!(
        llm_attempts(agora_testkit::attempts(&a, &hash()).await).len(),
        1
    );
}

/// A replica: a node with the weather tool on the store at `store_url` (else in `dir`),
/// threshold 2, on `clock`.
async fn replica(
    llm: Arc<ScriptedLlm>,
    dir: &std::path::Path,
    store_url: Option<&str>,
    clock: Arc<agora_node::ManualClock>,
) -> Node {
    let builder = NodeBuilder::new(llm, dir);
    let builder = match store_url {
        Some(url) => builder.store_url(url),
        None => builder,
    };
    builder
        .clock(clock)
        .config(|c| {
            c.tools = vec![weather_tool()];
            c.thresholds.implementation = 2;
        })
        .routine_engine(Arc::new(engine()))
        .build()
        .await
}

fn message(text: &str) -> Request {
    Request {
        protocol: ProtocolRef::NaturalLanguage,
        hash_dialect: HashDialect::Hex,
        sources: vec![],
        body: Body::Text(text.into()),
        multiround: false,
    }
}

/// The weather agent's tool loop on a natural-language message: it answers at once, "sunny".
fn sunny_step(_last: &str) -> String {
    json!({"tool": "final_answer", "answer": "sunny"}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_natural_language_message_is_answered_by_the_tool_loop_not_a_program() {
    let dir = temp_dir();
    let programmer = Programmer::with(&[]);
    let scripted = weather_agent(Some(programmer.clone()), sunny_step);
    let node = node_with(scripted.clone(), engine(), dir.path(), |_| {}).await;
    let reply = node
        .handle(message("What will the weather be in Paris on 2024-09-01?"))
        .await;
    assert_eq!(reply.status, Status::Success, "{reply:?}");
    assert_eq!(reply.body.unwrap().to_text(), "sunny");
    // One LLM call, the tool loop's answer; no program was asked for.
    assert_eq!(conversation_calls(&node).await, 1);
    assert!(!scripted.calls().iter().any(is_programmer_call));
    assert_eq!(paths(&node).await, [RequestPath::Llm]);
    // A message's answer is never an example for a routine.
    node.programmer_idle().await;
    assert!(
        node.store()
            .programming()
            .attempts(None::<&ProtocolHash>)
            .await
            .unwrap()
            .is_empty()
    );
}
