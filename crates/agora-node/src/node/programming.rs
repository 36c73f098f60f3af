//! The node writing its own routines: learning from LLM-answered requests, the programmer job,
//! and retiring LLM-written routines that fail at run time.
//!
//! After each single-shot protocol request the LLM answered (directly, or as a routine's
//! fallback) the request, its tool calls and the reply are kept as an example. When the
//! protocol has no active routine and `thresholds.implementation` examples arrived since its
//! last programmer run, a job is queued (see `crate::programmer`). The job asks the LLM
//! (ledger category `implementing`) for a JavaScript routine, builds it with the routine
//! engine, examines it on every kept example with recorded tool results, and sends failures
//! back for up to `repair_attempts` repairs. A candidate that answers a valid example with an
//! error reply from a check in its code (`if (!r.value) return { error: ... }`, which rejects
//! a 0) gets that check taken out by the node (`programmer::guard`) and is examined again; the
//! edit is kept only where more examples pass. A repair that repeats an earlier candidate ends the
//! job (at temperature 0 the model would only repeat it again). Only a candidate that passes is
//! stored and activated; every attempt is kept with its source, report and tokens.
//!
//! An LLM-written routine that has failed `max_routine_failures` times is disabled and the
//! programmer runs again, now with the failing requests among the examples (the fallback
//! answered them). Human-written routines are never touched: their failures are counted on the
//! routine and reported, nothing more; and a candidate finished while a human routine is active
//! for the protocol is stored disabled.

use std::sync::{Arc, Weak};
use std::time::Duration;

use agora_llm::{ChatRequest, Message};
use agora_protocol::ProtocolHash;
use agora_store::{Example, RoutineAttempt, RoutineOrigin, RoutineStatus};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::{Inner, Node};
use crate::accounting::{Category, QueryContext};
use crate::programmer::{Job, JobReason, PendingExample, exam, guard, prompt};
use crate::routine_registry::{ProtocolInput, RoutineSpec};
use crate::routines::{LoadedRoutine, RoutineEngine, RoutineLimits, RoutineSource};

/// What one protocol request leaves for the programmer.
pub(super) struct Lesson {
    /// The LLM's answer to keep as an example (successful single-shot answers only).
    pub(super) example: Option<PendingExample>,
    /// The LLM-written routine that failed on this request, if one did.
    pub(super) failed_llm_routine: Option<i64>,
}

impl Node {
    /// Waits until the programmer has no job waiting or running (tests, orderly shutdown).
    pub async fn programmer_idle(&self) {
        self.inner.programmer.idle().await;
    }

    /// Keeps the request's example and decides whether the programmer should run.
    pub(super) async fn learn(&self, query_id: &str, hash: ProtocolHash, lesson: Lesson) {
        let config = &self.inner.config.programmer;
        if !config.enabled || self.inner.routines.engine().is_none() {
            return;
        }
        if let Some(example) = lesson.example {
            let example = Example {
                id: 0,
                protocol_hash: hash,
                query_id: query_id.to_string(),
                body: example.body,
                tool_calls: example.tool_calls,
                reply: example.reply,
                created_at_ms: self.inner.clock.now_ms(),
            };
            let keep = config.max_examples.max(1) as i64;
            if let Err(error) = self.inner.store.add_example(&example, keep).await {
                tracing::error!(%error, "could not keep an example for the programmer");
                return;
            }
        }
        match lesson.failed_llm_routine {
            Some(routine_id) => self.count_routine_failure(routine_id, hash).await,
            None => self.consider_programming(hash).await,
        }
    }

    /// Queues a job when the protocol has no routine, no job, and enough new examples.
    async fn consider_programming(&self, hash: ProtocolHash) {
        if self.inner.routines.active(&hash).is_some() || self.inner.programmer.is_pending(&hash) {
            return;
        }
        let failed = match self.inner.store.failed_jobs_since_success(&hash).await {
            Ok(failed) => failed,
            Err(error) => {
                tracing::error!(%error, "could not count the programmer's failed runs");
                return;
            }
        };
        let threshold = backed_off(self.inner.config.thresholds.implementation.max(1), failed);
        match self.inner.store.examples_since_last_attempt(&hash).await {
            Ok(count) if count as u64 >= threshold => {
                self.enqueue(Job {
                    hash,
                    reason: JobReason::Threshold,
                });
            }
            Ok(_) => {}
            Err(error) => tracing::error!(%error, "could not count the programmer's examples"),
        }
    }

    /// Retires an LLM-written routine that failed too often, and asks for a new one.
    async fn count_routine_failure(&self, routine_id: i64, hash: ProtocolHash) {
        let max = self.inner.config.programmer.max_routine_failures.max(1);
        let routine = match self.inner.store.routine(routine_id).await {
            Ok(Some(routine)) => routine,
            Ok(None) => return,
            Err(error) => {
                tracing::error!(%error, "could not read a failing routine");
                return;
            }
        };
        if routine.origin != RoutineOrigin::Llm
            || routine.status != RoutineStatus::Active
            || routine.failures < max
        {
            return;
        }
        tracing::warn!(
            routine = %routine.name,
            failures = routine.failures,
            "deactivating an LLM-written routine that failed too often; rewriting it"
        );
        let now = self.inner.clock.now_ms();
        if let Err(error) = self
            .inner
            .store
            .set_routine_status(routine.id, RoutineStatus::Disabled, now)
            .await
        {
            tracing::error!(%error, "could not deactivate a failing routine");
            return;
        }
        self.sync_after_change().await;
        self.enqueue(Job {
            hash,
            reason: JobReason::Failures,
        });
    }

    /// Queues a job unless the protocol has one or the queue is full.
    fn enqueue(&self, job: Job) -> bool {
        let queue = &self.inner.programmer;
        if !queue.claim(job.hash) {
            return false;
        }
        let sender = queue.sender.get_or_init(|| {
            let capacity = self.inner.config.programmer.queue_capacity.max(1);
            let (sender, receiver) = mpsc::channel(capacity);
            tokio::spawn(work(Arc::downgrade(&self.inner), receiver));
            sender
        });
        match sender.try_send(job) {
            Ok(()) => {
                tracing::info!(protocol_hash = %job.hash, reason = job.reason.as_str(), "programmer job queued");
                true
            }
            Err(error) => {
                tracing::warn!(protocol_hash = %job.hash, %error, "programmer queue full; the job is dropped");
                queue.release(&job.hash);
                false
            }
        }
    }

    /// One programmer job: candidates, examinations, repairs, and activation of a pass.
    async fn program(&self, job: Job) {
        let hash = job.hash;
        let config = self.inner.config.programmer.clone();
        let Some(engine) = self.inner.routines.engine().cloned() else {
            return;
        };
        let store = &self.inner.store;
        let document = match store.document(&hash).await {
            Ok(Some(stored)) => stored.document,
            Ok(None) => {
                tracing::warn!("the protocol document is gone; no routine written");
                return;
            }
            Err(error) => {
                tracing::error!(%error, "could not read the protocol document");
                return;
            }
        };
        let examples = match store
            .examples(&hash, config.max_examples.max(1) as i64)
            .await
        {
            Ok(examples) if !examples.is_empty() => examples,
            Ok(_) => return,
            Err(error) => {
                tracing::error!(%error, "could not read the programmer's examples");
                return;
            }
        };
        let examples_upto = examples.last().map(|e| e.id).unwrap_or_default();
        let tools = self.inner.tools.specs();
        let granted: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
        let reply_schema = exam::reply_schema(document.text())
            .and_then(|schema| jsonschema::validator_for(&schema).ok());
        let limits = RoutineLimits {
            timeout: Duration::from_millis(config.routine_timeout_ms.max(1)),
            memory_bytes: config.routine_memory_bytes,
        };
        let shown = &examples[examples
            .len()
            .saturating_sub(config.examples_in_prompt.max(1))..];
        let job_id = uuid::Uuid::new_v4().simple().to_string();
        let mut messages = prompt::first_messages(&document, &tools, shown);
        let mut tried: Vec<String> = Vec::new();

        for attempt in 1..=(1 + i64::from(config.repair_attempts)) {
            let context = QueryContext::new(format!("programmer-{job_id}-{attempt}"), Some(hash));
            let mut record = RoutineAttempt {
                id: 0,
                protocol_hash: hash,
                job: job_id.clone(),
                attempt,
                reason: job.reason.as_str().to_string(),
                source: None,
                outcome: "llm_failed".into(),
                report: String::new(),
                examples_upto,
                prompt_tokens: 0,
                completion_tokens: 0,
                cost_usd: 0.0,
                routine_id: None,
                created_at_ms: 0,
            };
            let source = match self
                .next_candidate(&context, &messages, config.max_tokens, &mut tried)
                .await
            {
                Turn::Code(source) => source,
                Turn::Repeated(source) => {
                    record.source = Some(source);
                    record.outcome = "repeated".into();
                    record.report = REPEATED.into();
                    self.keep_attempt(record, &context).await;
                    break;
                }
                Turn::LlmFailed(report) => {
                    record.report = report;
                    self.keep_attempt(record, &context).await;
                    return;
                }
            };
            record.source = Some(source.clone());
            let (source, problem) = match examine_candidate(
                engine.as_ref(),
                &source,
                &examples,
                reply_schema.as_ref(),
                limits,
            )
            .await
            {
                Candidate::Unbuilt(unbuilt) => {
                    record.outcome = "build_failed".into();
                    record.report = unbuilt.report;
                    (source, unbuilt.problem)
                }
                Candidate::Examined {
                    source,
                    component,
                    report,
                    checks_removed,
                } => {
                    record.source = Some(source.clone());
                    if !tried.contains(&source) {
                        // An edit the node made: the model giving it back is a repeat too.
                        tried.push(source.clone());
                    }
                    record.report = report.summary();
                    for condition in &checks_removed {
                        record.report.push_str(&format!(
                            "; the node took out the check `if ({condition})`, which rejected a \
                             valid example"
                        ));
                    }
                    if report.passed() {
                        record.outcome = "passed".into();
                        let spec = RoutineSpec {
                            name: format!("llm-{}-{}", &hash.to_hex()[..8], &job_id[..8]),
                            protocol: ProtocolInput::Hash(hash),
                            source: RoutineSource::JavaScript(source.clone()),
                            tools: granted.clone(),
                            limits,
                            origin: RoutineOrigin::Llm,
                            activate: !self.human_routine_active(&hash).await,
                        };
                        let activate = spec.activate;
                        match self.routines().add_built(spec, component).await {
                            Ok(routine) => {
                                record.routine_id = Some(routine.id);
                                if !activate {
                                    record.report.push_str(
                                        "; stored disabled: a human-written routine serves \
                                         this protocol",
                                    );
                                }
                                tracing::info!(routine = %routine.name, attempt, active = activate, "the programmer wrote a routine");
                            }
                            Err(error) => {
                                record
                                    .report
                                    .push_str(&format!("; could not be stored: {error}"));
                            }
                        }
                        self.keep_attempt(record, &context).await;
                        self.sync_after_change().await;
                        return;
                    }
                    record.outcome = "tests_failed".into();
                    (source, report.feedback())
                }
            };
            tracing::info!(attempt, outcome = %record.outcome, report = %record.report, "routine candidate rejected");
            self.keep_attempt(record, &context).await;
            messages = prompt::repair_messages(messages, &source, &problem);
        }
        tracing::warn!("no candidate passed; the protocol stays with the LLM");
    }

    async fn human_routine_active(&self, hash: &ProtocolHash) -> bool {
        match self.inner.store.routines().await {
            Ok(routines) => routines.iter().any(|r| {
                r.protocol_hash == *hash
                    && r.status == RoutineStatus::Active
                    && r.origin == RoutineOrigin::Human
            }),
            // When in doubt, do not activate over what may be a human routine.
            Err(_) => true,
        }
    }

    async fn keep_attempt(&self, mut record: RoutineAttempt, context: &QueryContext) {
        let tally = context.tally();
        record.prompt_tokens = tally.prompt_tokens;
        record.completion_tokens = tally.completion_tokens;
        record.cost_usd = tally.cost_usd;
        record.created_at_ms = self.inner.clock.now_ms();
        if let Err(error) = self.inner.store.add_attempt(&record).await {
            tracing::error!(%error, "could not keep a routine attempt");
        }
    }
}

/// The programmer's background task: one job at a time, until the node is dropped.
async fn work(inner: Weak<Inner>, mut jobs: mpsc::Receiver<Job>) {
    while let Some(job) = jobs.recv().await {
        let Some(inner) = inner.upgrade() else { break };
        let node = Node { inner };
        let span = tracing::info_span!(
            "agora.node.program",
            protocol_hash = %job.hash,
            reason = job.reason.as_str()
        );
        let permit = node.job_permit().await;
        node.program(job).instrument(span).await;
        drop(permit);
        node.inner.programmer.release(&job.hash);
    }
}

/// The examples to wait for before another programmer run, after `failed` runs in a row found no
/// routine: the threshold doubles with each (up to 64 times), so a protocol the model cannot
/// program costs a few runs, not one per request.
pub(super) fn backed_off(threshold: u64, failed: i64) -> u64 {
    let doublings = failed.clamp(0, 6) as u32;
    threshold.saturating_mul(1 << doublings)
}

/// What the model's turn in a programmer conversation gave.
pub(super) enum Turn {
    /// Code this job has not seen yet.
    Code(String),
    /// Code the model already wrote in this job.
    Repeated(String),
    /// The LLM call failed (the report says how).
    LlmFailed(String),
}

/// The report of a [`Turn::Repeated`] attempt.
pub(super) const REPEATED: &str = "the model wrote a candidate it had already written";

impl Node {
    /// Asks the model (ledger category `implementing`) for the next candidate and checks that it
    /// is new: at temperature 0 a model that repeats itself would go on repeating itself. New
    /// code is added to `tried`.
    pub(super) async fn next_candidate(
        &self,
        context: &QueryContext,
        messages: &[Message],
        max_tokens: u32,
        tried: &mut Vec<String>,
    ) -> Turn {
        let request = ChatRequest::new(messages.to_vec()).max_tokens(max_tokens);
        match self
            .inner
            .accountant
            .chat(Category::Implementing, context, &request)
            .await
        {
            Err(error) => Turn::LlmFailed(format!("the LLM failed: {error}")),
            Ok(response) => {
                let source = prompt::extract_code(&response.content);
                if tried.contains(&source) {
                    Turn::Repeated(source)
                } else {
                    tried.push(source.clone());
                    Turn::Code(source)
                }
            }
        }
    }
}

/// Code that did not build or load: the error, and what the model is told.
pub(super) struct Unbuilt {
    pub(super) report: String,
    pub(super) problem: String,
}

/// Builds JavaScript `source` into a component and loads it.
pub(super) async fn build_and_load(
    engine: &dyn RoutineEngine,
    source: &str,
) -> Result<(Vec<u8>, Arc<dyn LoadedRoutine>), Unbuilt> {
    let component = engine
        .build(&RoutineSource::JavaScript(source.to_string()))
        .await
        .map_err(|error| Unbuilt {
            report: error.to_string(),
            problem: format!("Your code does not build: {error}"),
        })?;
    let loaded = engine.load(&component).await.map_err(|error| Unbuilt {
        report: error.to_string(),
        problem: format!("Your code could not be loaded: {error}"),
    })?;
    Ok((component, loaded))
}

/// A candidate after the routine engine and the exam had it.
enum Candidate {
    /// It did not build or load.
    Unbuilt(Unbuilt),
    /// It was examined; `source` may have had rejecting checks taken out (`checks_removed`).
    Examined {
        source: String,
        component: Vec<u8>,
        report: exam::ExamReport,
        checks_removed: Vec<String>,
    },
}

/// Checks the programmer takes out of one candidate at most (see [`guard`]).
const MAX_CHECKS_REMOVED: usize = 3;

/// Builds, loads and examines `source`. While the candidate answers a valid example with an
/// error reply that a check in its code returns, the check is taken out and the result examined
/// again; an edit is kept only when more examples pass.
async fn examine_candidate(
    engine: &dyn RoutineEngine,
    source: &str,
    examples: &[Example],
    reply_schema: Option<&jsonschema::Validator>,
    limits: RoutineLimits,
) -> Candidate {
    let (component, report) =
        match build_and_examine(engine, source, examples, reply_schema, limits).await {
            Ok(examined) => examined,
            Err(unbuilt) => return unbuilt,
        };
    let mut best = (source.to_string(), component, report);
    let mut checks_removed = Vec::new();
    'edits: while checks_removed.len() < MAX_CHECKS_REMOVED {
        let Some(message) = best
            .2
            .rejected_valid_request()
            .as_ref()
            .and_then(guard::error_text)
        else {
            break;
        };
        // Several checks may return the same text: try each until one helps.
        for (edited, condition) in guard::without_rejecting_checks(&best.0, &message) {
            if let Ok((component, report)) =
                build_and_examine(engine, &edited, examples, reply_schema, limits).await
                && report.passed_count() > best.2.passed_count()
            {
                best = (edited, component, report);
                checks_removed.push(condition);
                continue 'edits;
            }
        }
        break;
    }
    let (source, component, report) = best;
    Candidate::Examined {
        source,
        component,
        report,
        checks_removed,
    }
}

async fn build_and_examine(
    engine: &dyn RoutineEngine,
    source: &str,
    examples: &[Example],
    reply_schema: Option<&jsonschema::Validator>,
    limits: RoutineLimits,
) -> Result<(Vec<u8>, exam::ExamReport), Candidate> {
    let (component, loaded) = build_and_load(engine, source)
        .await
        .map_err(Candidate::Unbuilt)?;
    let report = exam::examine(loaded.as_ref(), examples, reply_schema, limits).await;
    Ok((component, report))
}

#[cfg(test)]
mod backoff_tests {
    use super::backed_off;

    #[test]
    fn the_wait_doubles_with_each_failed_run_and_is_capped() {
        assert_eq!(backed_off(1, 0), 1);
        assert_eq!(backed_off(1, 1), 2);
        assert_eq!(backed_off(3, 2), 12);
        assert_eq!(backed_off(1, 6), 64);
        assert_eq!(backed_off(1, 50), 64);
        assert_eq!(backed_off(1, -1), 1);
        assert_eq!(backed_off(u64::MAX / 2, 6), u64::MAX);
    }
}
