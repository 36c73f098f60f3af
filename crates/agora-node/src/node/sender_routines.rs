//! The sender's ladder, last rung: sender-side routines (see `crate::sender::routine` for the
//! contract and the examination).
//!
//! Every successful LLM-written protocol run of [`Node::send`] is kept as a sender example
//! (data, body, reply, output; bounded per (target, task, protocol) by
//! `programmer.max_examples`). After `sender.sender_routine_threshold` of them since the key's
//! last job, and while the key has no active sender routine, a background job (the
//! programmer's bounded queue, one job per key, one at a time) asks the LLM (`implementing`)
//! for a routine, builds it with the node's routine engine, examines it on every kept example
//! and sends failures back for up to `programmer.repair_attempts` repairs. A pass is stored and
//! activated; every attempt is stored.
//!
//! [`Node::run_task`] then sends under the protocol with the routine alone: encode, post,
//! decode, validate against the output schema, no LLM call. A routine error, an output that
//! does not validate or a `failure` reply from the target (the body may be wrong) counts a
//! failure on the routine, and that run falls back to the LLM (whose successful run becomes a
//! new example). After `programmer.max_routine_failures` failures the routine is disabled and
//! rewritten. A `rejected` reply or an unreachable target is not the routine's fault and is
//! returned as it is, as the LLM's run would.

use std::sync::{Arc, Weak};
use std::time::Duration;

use agora_protocol::VerifiedDocument;
use agora_store::{SenderExample, SenderKey, SenderRoutineAttempt};
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::programming::{REPEATED, Turn, build_and_load};
use super::{Inner, Node};
use crate::accounting::QueryContext;
use crate::programmer::prompt::repair_messages;
use crate::routines::{LoadedRoutine, RoutineLimits};
use crate::sender::routine::{self, SenderJob, SenderJobReason};
use crate::sender::{self, Answer, SendError, SendOutcome};
use crate::task::Task;

/// How a run under a protocol went with the sender routine.
pub(super) enum RoutineRun {
    /// The key has no active sender routine (or routines are off): ask the LLM.
    NoRoutine,
    /// The routine did the run; the result may still be the target's rejection or an
    /// unreachable target.
    Done(Result<SendOutcome, SendError>),
    /// The routine failed (counted on it and logged); ask the LLM for this run.
    Failed,
}

impl Node {
    /// Waits until no sender routine job is waiting or running (tests, orderly shutdown).
    pub async fn sender_routines_idle(&self) {
        self.inner.sender_routines.queue.idle().await;
    }

    fn sender_routines_on(&self) -> bool {
        self.inner.config.sender.sender_routine_threshold > 0
            && self.inner.config.programmer.enabled
            && self.inner.routines.engine().is_some()
    }

    fn sender_limits(&self) -> RoutineLimits {
        let config = &self.inner.config.programmer;
        RoutineLimits {
            timeout: Duration::from_millis(config.routine_timeout_ms.max(1)),
            memory_bytes: config.routine_memory_bytes,
        }
    }

    /// Keeps a successful LLM-written protocol run and queues a job when the key is due one.
    pub(super) async fn keep_sender_example(
        &self,
        key: SenderKey,
        task: &Task,
        data: &Value,
        body: &str,
        outcome: &SendOutcome,
    ) {
        if !self.sender_routines_on() {
            return;
        }
        let store = &self.inner.store;
        let example = SenderExample {
            id: 0,
            key: key.clone(),
            data: data.clone(),
            body: body.to_string(),
            reply: outcome.reply_body.clone(),
            output: outcome.output.clone(),
            created_at_ms: self.inner.clock.now_ms(),
        };
        let keep = self.inner.config.programmer.max_examples.max(1) as i64;
        if let Err(error) = store.add_sender_example(&example, keep).await {
            tracing::error!(%error, "could not keep a sender example");
            return;
        }
        if self.inner.sender_routines.queue.is_pending(&key) {
            return;
        }
        match store.active_sender_routine(&key).await {
            Ok(None) => {}
            Ok(Some(_)) => return,
            Err(error) => {
                tracing::error!(%error, "could not read the sender routine");
                return;
            }
        }
        let failed = match store.sender_failed_jobs_since_success(&key).await {
            Ok(failed) => failed,
            Err(error) => {
                tracing::error!(%error, "could not count the failed sender routine jobs");
                return;
            }
        };
        let threshold = super::programming::backed_off(
            self.inner.config.sender.sender_routine_threshold.max(1) as u64,
            failed,
        );
        match store.sender_examples_since_last_attempt(&key).await {
            Ok(count) if count.max(0) as u64 >= threshold => self.enqueue_sender_job(SenderJob {
                key,
                task: task.clone(),
                reason: SenderJobReason::Threshold,
            }),
            Ok(_) => {}
            Err(error) => tracing::error!(%error, "could not count the sender examples"),
        }
    }

    /// Runs the task under the protocol with the key's active sender routine, if it has one.
    pub(super) async fn send_by_routine(
        &self,
        key: &SenderKey,
        task: &Task,
        data: &Value,
        document: &VerifiedDocument,
        sources: &[String],
    ) -> RoutineRun {
        if !self.sender_routines_on() {
            return RoutineRun::NoRoutine;
        }
        let store = &self.inner.store;
        let active = match store.active_sender_routine(key).await {
            Ok(Some(active)) => active,
            Ok(None) => return RoutineRun::NoRoutine,
            Err(error) => {
                tracing::error!(%error, "could not read the sender routine");
                return RoutineRun::NoRoutine;
            }
        };
        let loaded = match self.load_sender_routine(active.id).await {
            Ok(loaded) => loaded,
            Err(error) => {
                return self
                    .sender_routine_failed(key, task, active.id, error)
                    .await;
            }
        };
        let limits = self.sender_limits();
        let body = match routine::run(loaded.as_ref(), &routine::encode_input(data), limits).await {
            Ok(body) => body,
            Err(error) => {
                let error = format!("encode: {error}");
                return self
                    .sender_routine_failed(key, task, active.id, error)
                    .await;
            }
        };
        let config = &self.inner.config.sender;
        let envelope = sender::envelope(Some(document), sources, &body);
        let timeout = Duration::from_secs(config.timeout_secs.max(1));
        let (reply, negotiation_requested) = match sender::post(
            &self.inner.targets,
            &key.target,
            &envelope,
            timeout,
            config.max_reply_bytes,
        )
        .await
        {
            Ok(Answer::Success(reply, requested)) => (reply, requested),
            Ok(Answer::Rejected(message)) => {
                return RoutineRun::Done(Err(SendError::Rejected(message)));
            }
            Ok(Answer::Failure(message)) => {
                let error = format!("the target failed on the routine's body: {message}");
                return self
                    .sender_routine_failed(key, task, active.id, error)
                    .await;
            }
            Err(error) => return RoutineRun::Done(Err(error)),
        };
        let output = match routine::run(loaded.as_ref(), &routine::decode_input(&reply), limits)
            .await
            .and_then(|got| routine::read_output(task, &got))
        {
            Ok(output) => output,
            Err(error) => {
                let error = format!("decode: {error}");
                return self
                    .sender_routine_failed(key, task, active.id, error)
                    .await;
            }
        };
        let now = self.inner.clock.now_ms();
        if let Err(error) = store.record_sender_routine_run(active.id, None, now).await {
            tracing::error!(%error, "could not count a sender routine run");
        }
        tracing::info!(routine = active.id, "task answered by the sender routine");
        RoutineRun::Done(Ok(SendOutcome {
            output,
            reply_body: reply,
            llm_calls: 0,
            llm_tokens: 0,
            llm_cost_usd: 0.0,
            negotiation_requested,
        }))
    }

    async fn load_sender_routine(&self, id: i64) -> Result<Arc<dyn LoadedRoutine>, String> {
        if let Some(loaded) = self.inner.sender_routines.loaded(id) {
            return Ok(loaded);
        }
        let engine = self
            .inner
            .routines
            .engine()
            .ok_or_else(|| "no routine engine".to_string())?;
        let component = self
            .inner
            .store
            .sender_routine_component(id)
            .await
            .map_err(|e| format!("could not read the component: {e}"))?;
        let loaded = engine
            .load(&component)
            .await
            .map_err(|e| format!("could not load: {e}"))?;
        self.inner.sender_routines.keep_loaded(id, loaded.clone());
        Ok(loaded)
    }

    /// Counts a failure; disables and rewrites a routine that failed too often.
    async fn sender_routine_failed(
        &self,
        key: &SenderKey,
        task: &Task,
        id: i64,
        error: String,
    ) -> RoutineRun {
        tracing::warn!(routine = id, %error, "the sender routine failed; the LLM does this run");
        let store = &self.inner.store;
        let now = self.inner.clock.now_ms();
        let failures = match store.record_sender_routine_run(id, Some(&error), now).await {
            Ok(failures) => failures,
            Err(store_error) => {
                tracing::error!(error = %store_error, "could not count a sender routine failure");
                return RoutineRun::Failed;
            }
        };
        if failures >= self.inner.config.programmer.max_routine_failures.max(1) {
            tracing::warn!(
                routine = id,
                failures,
                "disabling a sender routine that failed too often; rewriting it"
            );
            if let Err(store_error) = store.disable_sender_routine(id, now).await {
                tracing::error!(error = %store_error, "could not disable a sender routine");
                return RoutineRun::Failed;
            }
            self.inner.sender_routines.forget(id);
            self.enqueue_sender_job(SenderJob {
                key: key.clone(),
                task: task.clone(),
                reason: SenderJobReason::Failures,
            });
        }
        RoutineRun::Failed
    }

    /// Queues a job unless the key has one or the queue is full.
    fn enqueue_sender_job(&self, job: SenderJob) {
        let queue = &self.inner.sender_routines.queue;
        if !queue.claim(job.key.clone()) {
            return;
        }
        let sender = queue.sender.get_or_init(|| {
            let capacity = self.inner.config.programmer.queue_capacity.max(1);
            let (sender, receiver) = mpsc::channel(capacity);
            tokio::spawn(work(Arc::downgrade(&self.inner), receiver));
            sender
        });
        let key = job.key.clone();
        let reason = job.reason.as_str();
        match sender.try_send(job) {
            Ok(()) => {
                tracing::info!(target_url = %key.target, task = %key.task, reason, "sender routine job queued")
            }
            Err(error) => {
                tracing::warn!(%error, "sender routine queue full; the job is dropped");
                queue.release(&key);
            }
        }
    }

    /// One job: candidates, examinations, repairs, and activation of a pass.
    async fn program_sender(&self, job: &SenderJob) {
        let config = self.inner.config.programmer.clone();
        let Some(engine) = self.inner.routines.engine().cloned() else {
            return;
        };
        let store = &self.inner.store;
        let key = &job.key;
        let document = match store.document(&key.protocol_hash).await {
            Ok(Some(stored)) => stored.document,
            Ok(None) => return,
            Err(error) => {
                tracing::error!(%error, "could not read the protocol document");
                return;
            }
        };
        let examples = match store
            .sender_examples(key, config.max_examples.max(1) as i64)
            .await
        {
            Ok(examples) if !examples.is_empty() => examples,
            Ok(_) => return,
            Err(error) => {
                tracing::error!(%error, "could not read the sender examples");
                return;
            }
        };
        let examples_upto = examples.last().map(|e| e.id).unwrap_or_default();
        let limits = self.sender_limits();
        let shown = &examples[examples
            .len()
            .saturating_sub(config.examples_in_prompt.max(1))..];
        let job_id = uuid::Uuid::new_v4().simple().to_string();
        let mut messages = routine::first_messages(&document, &job.task, shown);
        let mut tried: Vec<String> = Vec::new();

        for attempt in 1..=(1 + i64::from(config.repair_attempts)) {
            let context = QueryContext::new(
                format!("sender-programmer-{job_id}-{attempt}"),
                Some(key.protocol_hash),
            );
            let mut record = SenderRoutineAttempt {
                id: 0,
                key: key.clone(),
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
                    self.keep_sender_attempt(record, &context).await;
                    break;
                }
                Turn::LlmFailed(report) => {
                    record.report = report;
                    self.keep_sender_attempt(record, &context).await;
                    return;
                }
            };
            record.source = Some(source.clone());
            let built = build_and_load(engine.as_ref(), &source).await;
            let problem = match built {
                Err(unbuilt) => {
                    record.outcome = "build_failed".into();
                    record.report = unbuilt.report;
                    unbuilt.problem
                }
                Ok((component, loaded)) => {
                    let report =
                        routine::examine(loaded.as_ref(), &job.task, &examples, limits).await;
                    record.report = report.summary();
                    if report.passed() {
                        record.outcome = "passed".into();
                        let now = self.inner.clock.now_ms();
                        match store
                            .add_sender_routine(key, &source, &component, now)
                            .await
                        {
                            Ok(id) => {
                                record.routine_id = Some(id);
                                self.inner.sender_routines.keep_loaded(id, loaded);
                                tracing::info!(
                                    routine = id,
                                    attempt,
                                    "the LLM wrote a sender routine"
                                );
                            }
                            Err(error) => record
                                .report
                                .push_str(&format!("; could not be stored: {error}")),
                        }
                        self.keep_sender_attempt(record, &context).await;
                        return;
                    }
                    record.outcome = "tests_failed".into();
                    report.feedback()
                }
            };
            tracing::info!(attempt, outcome = %record.outcome, report = %record.report, "sender routine candidate rejected");
            self.keep_sender_attempt(record, &context).await;
            messages = repair_messages(messages, &source, &problem);
        }
        tracing::warn!("no sender routine candidate passed; the LLM keeps doing the runs");
    }

    async fn keep_sender_attempt(&self, mut record: SenderRoutineAttempt, context: &QueryContext) {
        let tally = context.tally();
        record.prompt_tokens = tally.prompt_tokens;
        record.completion_tokens = tally.completion_tokens;
        record.cost_usd = tally.cost_usd;
        record.created_at_ms = self.inner.clock.now_ms();
        if let Err(error) = self.inner.store.add_sender_attempt(&record).await {
            tracing::error!(%error, "could not keep a sender routine attempt");
        }
    }
}

/// The background task: one job at a time, until the node is dropped.
async fn work(inner: Weak<Inner>, mut jobs: mpsc::Receiver<SenderJob>) {
    while let Some(job) = jobs.recv().await {
        let Some(inner) = inner.upgrade() else { break };
        let node = Node { inner };
        let span = tracing::info_span!(
            "agora.node.program_sender",
            protocol_hash = %job.key.protocol_hash,
            task = %job.key.task,
            reason = job.reason.as_str()
        );
        let permit = node.job_permit().await;
        node.program_sender(&job).instrument(span).await;
        drop(permit);
        node.inner.sender_routines.queue.release(&job.key);
    }
}
