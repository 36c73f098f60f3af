//! The programmer's job, one for both kinds of routine the node writes: receiver routines
//! (keyed by protocol, `node::receiver_routines`) and sender routines (keyed by target, task and
//! protocol, `node::sender_routines`). A [`JobSubject`] says what differs: where the examples are,
//! the first prompt, how a candidate is examined and where a pass is stored.
//!
//! A job is queued when the key has no active routine, no job, and enough examples arrived since
//! its last job (the wait doubles after each job that found no routine, see [`backed_off`]), or
//! when the key's LLM-written routine failed too often. Each kind has its own bounded queue and
//! background worker, one job at a time. A job asks the LLM (ledger category `implementing`) for
//! a JavaScript routine, builds it with the routine engine, examines it on the kept examples and
//! sends failures back for up to `repair_attempts` repairs. A repair that repeats an earlier
//! candidate starts the conversation over once, from the first prompt with the failure explained
//! (at temperature 0 the same conversation would only repeat it again); a second repeat ends the
//! job. Only a candidate that passes is stored; every attempt is kept with its source, report and
//! tokens.
//!
//! A receiver job whose protocol was answered by a program (code as action, [`crate::acting`])
//! examines that program first, with no LLM call; when it fails, the model repairs it.
//!
//! The back-off never passes `max_examples`: new examples are counted among the kept ones, so a
//! higher threshold could never be met and the key would never be programmed again (in the
//! committed 1000-query run this locked skiResort2's rentSki out after query 94).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};

use agora_llm::{ChatRequest, Message};
use agora_protocol::{ProtocolHash, VerifiedDocument};
use agora_store::{Attempt, AttemptOutcome, JobReason, ProgrammerKey, SenderExample, SenderKey};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::core::Core;
use crate::accounting::{Category, QueryContext};
use crate::config::ProgrammerConfig;
use crate::programmer::{Job, PendingExample, ProgrammerQueue, Unbuilt, prompt};
use crate::routines::{LoadedRoutine, RoutineEngine, RoutineLimits};
use crate::task::Task;

/// What a programmer job writes a routine for, and what differs between the two kinds.
pub(super) trait JobSubject: Send + Sync + Sized + 'static {
    /// The key the queue and the store know the job by.
    type Key: ProgrammerKey + Eq + Hash + std::fmt::Debug + 'static;
    /// What the job examines candidates with (the examples, and what else the kind needs).
    type Bench: Send + Sync;
    /// What a candidate that passed carries to [`JobSubject::keep_routine`].
    type Pass: Send;

    /// The first part of the ledger query ids of the job's LLM calls.
    const QUERY_PREFIX: &'static str;
    /// What the logs call the routine.
    const WHAT: &'static str;

    fn key(&self) -> &Self::Key;
    fn protocol_hash(&self) -> ProtocolHash;
    fn queue(node: &Programmer) -> &ProgrammerQueue<Self::Key, Job<Self>>;
    /// The worker's span for one job.
    fn span(&self, reason: JobReason) -> tracing::Span;

    /// Whether the key has an active routine (a job is then not wanted).
    fn has_routine(&self, node: &Programmer) -> impl Future<Output = bool> + Send;

    /// A candidate compiled from the examples with no LLM call, examined before any other
    /// (receiver routines: [`crate::programmer::compile`]); `None` where the kind has none.
    fn compiled(
        &self,
        node: &Programmer,
        bench: &Self::Bench,
    ) -> impl Future<Output = Option<Compilation<Self::Bench>>> + Send {
        let _ = (node, bench);
        async { None }
    }

    /// A candidate to examine before the model is asked: the program that answered the key's
    /// requests (code as action, see [`crate::acting`]) since the last job, if one did.
    fn answering_program(&self, node: &Programmer) -> Option<String> {
        let _ = node;
        None
    }

    /// The examples and the first prompt; `None` when there is nothing to work on.
    fn bench(
        &self,
        node: &Programmer,
        document: &VerifiedDocument,
        config: &ProgrammerConfig,
    ) -> impl Future<Output = Option<Prepared<Self::Bench>>> + Send;

    /// Builds and examines a candidate.
    fn examine(
        bench: &Self::Bench,
        engine: &dyn RoutineEngine,
        source: &str,
        limits: RoutineLimits,
    ) -> impl Future<Output = Examination<Self::Pass>> + Send;

    /// Stores a candidate that passed; the error says why it could not be.
    fn keep_routine(
        &self,
        node: &Programmer,
        bench: &Self::Bench,
        kept: Passed<Self::Pass>,
    ) -> impl Future<Output = Result<Kept, String>> + Send;

    /// After a pass and its attempt were stored.
    fn passed(node: &Programmer) -> impl Future<Output = ()> + Send {
        let _ = node;
        async {}
    }
}

/// The programming role of a node: the background jobs that write receiver and sender
/// routines, and what they learn from. Cloning is cheap.
#[derive(Clone)]
pub(crate) struct Programmer {
    pub(super) core: Arc<Core>,
    pub(super) state: Arc<ProgrammerState>,
}

/// What only the programmer holds.
pub(crate) struct ProgrammerState {
    /// Receiver routine jobs, by protocol.
    pub(super) queue: ProgrammerQueue<ProtocolHash, Job<ProtocolHash>>,
    /// Sender routine jobs, and the sender routines loaded so far.
    pub(super) sender_routines: SenderRoutines,
    /// The last program that answered each protocol (code as action, see [`crate::acting`]),
    /// until a programmer job takes it as its first candidate; so it holds only protocols
    /// waiting for a job. In memory only; a hint, not data.
    pub(super) programs: std::sync::Mutex<std::collections::HashMap<ProtocolHash, String>>,
    /// This process's name on the store's job leases (the node's name and a random id), so
    /// replicas sharing a store run each programmer job once (see `work`).
    pub(super) lease_holder: String,
}

impl Programmer {
    pub(super) fn new(core: Arc<Core>) -> Self {
        let lease_holder = format!("{}:{}", core.config.name, uuid::Uuid::new_v4());
        Self {
            core,
            state: Arc::new(ProgrammerState {
                queue: ProgrammerQueue::new(),
                sender_routines: SenderRoutines::new(),
                programs: std::sync::Mutex::new(std::collections::HashMap::new()),
                lease_holder,
            }),
        }
    }

    /// Takes the last program that answered `hash`'s requests, if one did since the last job.
    pub(super) fn take_answering_program(&self, hash: &ProtocolHash) -> Option<String> {
        self.state.programs.lock().ok()?.remove(hash)
    }
}

/// What one protocol request leaves for the programmer.
pub(super) struct Lesson {
    /// The LLM's answer to keep as an example (successful single-shot answers only).
    pub(super) example: Option<PendingExample>,
    /// The routine the node wrote that failed on this request, if one did.
    pub(super) failed_routine: Option<FailedRoutine>,
}

/// A routine the node wrote that failed on a request (the LLM answered it instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FailedRoutine {
    pub(super) id: i64,
    pub(super) origin: agora_store::RoutineOrigin,
}

/// What a sender routine job writes for: the key, and the task itself (tasks may come from a
/// file rather than the node's configuration, so the task travels with the job).
#[derive(Debug, Clone)]
pub(crate) struct SenderSubject {
    pub(crate) key: SenderKey,
    pub(crate) task: Task,
}

/// The node's sender-routine state: the job queue (bounded, one job per key, one running at a
/// time) and the routines loaded so far, by store id, so a run loads a component once.
pub(crate) struct SenderRoutines {
    pub(crate) queue: ProgrammerQueue<SenderKey, Job<SenderSubject>>,
    pub(crate) loaded: Mutex<HashMap<i64, Arc<dyn LoadedRoutine>>>,
}

impl SenderRoutines {
    pub(crate) fn new() -> Self {
        Self {
            queue: ProgrammerQueue::new(),
            loaded: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn loaded(&self, id: i64) -> Option<Arc<dyn LoadedRoutine>> {
        self.loaded.lock().ok()?.get(&id).cloned()
    }

    pub(crate) fn keep_loaded(&self, id: i64, routine: Arc<dyn LoadedRoutine>) {
        if let Ok(mut loaded) = self.loaded.lock() {
            loaded.insert(id, routine);
        }
    }

    pub(crate) fn forget(&self, id: i64) {
        if let Ok(mut loaded) = self.loaded.lock() {
            loaded.remove(&id);
        }
    }
}

/// What a sender routine job examines with.
pub(super) struct SenderBench {
    pub(super) task: Task,
    pub(super) examples: Vec<SenderExample>,
}

/// What a job works on, before its first LLM call.
pub(super) struct Prepared<B> {
    pub(super) bench: B,
    /// The id of the newest example the job saw.
    pub(super) examples_upto: i64,
    /// The first request to the model.
    pub(super) messages: Vec<Message>,
}

/// A candidate after the routine engine and the examination had it.
pub(super) enum Examination<P> {
    /// It did not build or load.
    Unbuilt(Unbuilt),
    /// It was examined. `source` is the candidate as examined (the node may have edited it);
    /// `pass` is set when it passed.
    Examined {
        source: String,
        report: String,
        feedback: String,
        pass: Option<P>,
    },
}

/// What compiling the examples gave.
pub(super) enum Compilation<B> {
    /// A program, to be examined on the examples it reproduces.
    Program {
        source: String,
        /// The examples it reproduces.
        bench: B,
        /// For the attempt's report: what it was compiled from, what the majority left out.
        summary: String,
        /// Why it may not serve whatever its examination says (it replies one constant and
        /// reads nothing; too few distinct examples; the same as the active routine).
        refused: Option<String>,
    },
    /// No program: why, and whether because the examples contradict each other on what the
    /// document names (then the LLM is not asked either).
    Nothing { report: String, contradicted: bool },
    /// No routine may be written from these examples at all (a question's examples that act):
    /// the LLM keeps answering and is not asked for a routine either.
    Refused { report: String },
}

/// A candidate that passed, for [`JobSubject::keep_routine`].
pub(super) struct Passed<P> {
    pub(super) source: String,
    /// Who wrote it: the LLM, or the compiler.
    pub(super) origin: agora_store::RoutineOrigin,
    pub(super) pass: P,
    pub(super) job_id: String,
    pub(super) attempt: i64,
    pub(super) limits: RoutineLimits,
}

/// A stored routine.
pub(super) struct Kept {
    pub(super) routine_id: i64,
    /// Added to the attempt's report.
    pub(super) note: Option<&'static str>,
}

impl Programmer {
    /// Queues a job when the subject has no routine, no job, and enough new examples:
    /// `threshold`, doubled after each job since the last pass.
    pub(super) async fn consider_programming<S: JobSubject>(&self, subject: S, threshold: u64) {
        if S::queue(self).is_pending(subject.key()) || subject.has_routine(self).await {
            return;
        }
        let store = &self.core.store;
        let failed = match store
            .programming()
            .failed_jobs_since_success(subject.key())
            .await
        {
            Ok(failed) => failed,
            Err(error) => {
                tracing::error!(%error, "could not count the programmer's failed jobs");
                return;
            }
        };
        // Never more than the examples kept: the count of new ones cannot pass that, and a
        // threshold above it would stop the programmer for good.
        let kept = self.core.config.programmer.max_examples.max(1) as u64;
        let threshold = backed_off(threshold.max(1), failed).min(kept);
        match store
            .programming()
            .examples_since_last_attempt(subject.key())
            .await
        {
            Ok(count) if count.max(0) as u64 >= threshold => self.enqueue(Job {
                subject,
                reason: JobReason::Threshold,
            }),
            Ok(_) => {}
            Err(error) => tracing::error!(%error, "could not count the programmer's examples"),
        }
    }

    /// Queues a job unless the key has one or the queue is full.
    pub(super) fn enqueue<S: JobSubject>(&self, job: Job<S>) {
        let queue = S::queue(self);
        let key = job.subject.key().clone();
        if !queue.claim(key.clone()) {
            return;
        }
        let sender = queue.sender.get_or_init(|| {
            let capacity = self.core.config.programmer.queue_capacity.max(1);
            let (sender, receiver) = mpsc::channel(capacity);
            tokio::spawn(work::<S>(
                Arc::downgrade(&self.core),
                Arc::downgrade(&self.state),
                receiver,
            ));
            sender
        });
        let (protocol_hash, reason) = (job.subject.protocol_hash(), job.reason);
        match sender.try_send(job) {
            Ok(()) => {
                tracing::info!(%protocol_hash, ?key, %reason, "{} job queued", S::WHAT);
            }
            Err(error) => {
                tracing::warn!(%protocol_hash, ?key, %error, "{} queue full; the job is dropped", S::WHAT);
                queue.release(&key);
            }
        }
    }

    /// One job: the compiled candidate, then the LLM's candidates, examinations, repairs, and
    /// storing a pass.
    async fn program<S: JobSubject>(&self, job: &Job<S>) {
        let config = self.core.config.programmer.clone();
        let Some(engine) = self.core.routines.engine().cloned() else {
            return;
        };
        let hash = job.subject.protocol_hash();
        let document = match self.core.store.document(&hash).await {
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
        let Some(Prepared {
            bench,
            examples_upto,
            mut messages,
        }) = job.subject.bench(self, &document, &config).await
        else {
            return;
        };
        let limits = self.core.programmer_limits();
        let job_id = uuid::Uuid::new_v4().simple().to_string();
        let mut attempt = 0;
        let new_attempt = |attempt: i64, source: Option<String>| Attempt {
            id: 0,
            key: job.subject.key().clone(),
            job: job_id.clone(),
            attempt,
            reason: job.reason,
            source,
            outcome: AttemptOutcome::LlmFailed,
            report: String::new(),
            examples_upto,
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_usd: 0.0,
            routine_id: None,
            created_at_ms: 0,
        };
        let context_of = |attempt: i64| {
            QueryContext::new(
                format!("{}-{job_id}-{attempt}", S::QUERY_PREFIX),
                Some(hash),
            )
        };

        // The compiled candidate comes first and costs no LLM call. A contradiction in the
        // examples ends the job: no candidate can pass them, the LLM's neither.
        match job.subject.compiled(self, &bench).await {
            Some(Compilation::Program {
                source,
                bench: reproduced,
                summary,
                refused,
            }) => {
                attempt += 1;
                let context = context_of(attempt);
                let mut record = new_attempt(attempt, Some(source.clone()));
                record.report = summary;
                if let Some(refused) = refused {
                    record.outcome = AttemptOutcome::TestsFailed;
                    record.report.push_str(&format!("; refused: {refused}"));
                    self.keep_attempt(record, &context).await;
                    tracing::info!("the compiled candidate was refused; the LLM keeps the work");
                    return;
                }
                match S::examine(&reproduced, engine.as_ref(), &source, limits).await {
                    Examination::Examined {
                        source,
                        report,
                        pass: Some(pass),
                        ..
                    } => {
                        record.source = Some(source.clone());
                        record.report.push_str(&format!("; {report}"));
                        let passed = Passed {
                            source,
                            origin: agora_store::RoutineOrigin::Compiled,
                            pass,
                            job_id: job_id.clone(),
                            attempt,
                            limits,
                        };
                        self.keep_pass(job, &reproduced, passed, record, &context)
                            .await;
                        return;
                    }
                    Examination::Examined { report, .. } => {
                        record.outcome = AttemptOutcome::TestsFailed;
                        record.report.push_str(&format!("; {report}"));
                    }
                    Examination::Unbuilt(unbuilt) => {
                        record.outcome = AttemptOutcome::BuildFailed;
                        record.report.push_str(&format!("; {}", unbuilt.report));
                    }
                }
                tracing::info!(report = %record.report, "the compiled candidate failed");
                self.keep_attempt(record, &context).await;
            }
            Some(Compilation::Nothing {
                report,
                contradicted,
            }) => {
                attempt += 1;
                let context = context_of(attempt);
                let mut record = new_attempt(attempt, None);
                record.outcome = if contradicted {
                    AttemptOutcome::Contradicted
                } else {
                    AttemptOutcome::TestsFailed
                };
                record.report = report;
                tracing::info!(report = %record.report, "nothing compiled");
                self.keep_attempt(record, &context).await;
                if contradicted {
                    return;
                }
            }
            Some(Compilation::Refused { report }) => {
                attempt += 1;
                let context = context_of(attempt);
                let mut record = new_attempt(attempt, None);
                record.outcome = AttemptOutcome::TestsFailed;
                record.report = report;
                tracing::info!(report = %record.report, "no routine may be written");
                self.keep_attempt(record, &context).await;
                return;
            }
            None => {}
        }
        // A request the compiled routine did not cover is the compiler's to learn from; the
        // routine that covers the rest stays.
        if job.reason == JobReason::Uncovered {
            return;
        }

        let mut tried: Vec<String> = Vec::new();
        let first = messages.clone();
        // The last failure, for a fresh prompt after a repeat.
        let mut last_problem: Option<(String, String)> = None;
        let mut fresh_prompts = 0;

        // A program that answered requests is examined first, without an LLM call; the attempts
        // the model gets stay as many.
        let mut answering = job.subject.answering_program(self);
        let given = i64::from(answering.is_some());
        for _ in 0..(1 + i64::from(config.repair_attempts) + given) {
            attempt += 1;
            let context = context_of(attempt);
            let mut record = new_attempt(attempt, None);
            let turn = if let Some(source) = answering.take() {
                tried.push(source.clone());
                Turn::Code(source)
            } else {
                self.next_candidate(&context, &messages, config.max_tokens, &mut tried)
                    .await
            };
            let source = match turn {
                Turn::Code(source) => source,
                Turn::Repeated(source) => {
                    record.source = Some(source);
                    record.outcome = AttemptOutcome::Repeated;
                    record.report = REPEATED.into();
                    self.keep_attempt(record, &context).await;
                    // The repair conversation is stuck: start over from the first prompt with
                    // the failure explained (a new prompt gets new code at temperature 0). A
                    // second repeat after that ends the job.
                    match last_problem.take() {
                        Some((candidate, problem)) if fresh_prompts == 0 => {
                            fresh_prompts += 1;
                            messages = prompt::fresh_start(first.clone(), &candidate, &problem);
                            continue;
                        }
                        _ => break,
                    }
                }
                Turn::LlmFailed(report) => {
                    record.report = report;
                    self.keep_attempt(record, &context).await;
                    return;
                }
            };
            record.source = Some(source.clone());
            let (source, problem) = match S::examine(&bench, engine.as_ref(), &source, limits).await
            {
                Examination::Unbuilt(unbuilt) => {
                    record.outcome = AttemptOutcome::BuildFailed;
                    record.report = unbuilt.report;
                    (source, unbuilt.problem)
                }
                Examination::Examined {
                    source,
                    report,
                    feedback,
                    pass,
                } => {
                    record.source = Some(source.clone());
                    if !tried.contains(&source) {
                        // An edit the node made: the model giving it back is a repeat too.
                        tried.push(source.clone());
                    }
                    record.report = report;
                    if let Some(pass) = pass {
                        let passed = Passed {
                            source,
                            origin: agora_store::RoutineOrigin::Llm,
                            pass,
                            job_id: job_id.clone(),
                            attempt,
                            limits,
                        };
                        self.keep_pass(job, &bench, passed, record, &context).await;
                        return;
                    }
                    record.outcome = AttemptOutcome::TestsFailed;
                    (source, feedback)
                }
            };
            tracing::info!(attempt, outcome = %record.outcome, report = %record.report, "{} candidate rejected", S::WHAT);
            self.keep_attempt(record, &context).await;
            messages = prompt::repair_messages(messages, &source, &problem);
            last_problem = Some((source, problem));
        }
        tracing::warn!("no {} candidate passed; the LLM keeps the work", S::WHAT);
    }

    /// Stores a candidate that passed, and its attempt.
    async fn keep_pass<S: JobSubject>(
        &self,
        job: &Job<S>,
        bench: &S::Bench,
        passed: Passed<S::Pass>,
        mut record: Attempt<S::Key>,
        context: &QueryContext,
    ) {
        record.outcome = AttemptOutcome::Passed;
        // Fencing: a replica that lost its lease (it stalled, and another took the job up) must
        // not store a second routine.
        if !self
            .renew_job_lease(&lease_name::<S>(job.subject.key()))
            .await
        {
            tracing::warn!(
                "the job's lease was lost before its routine was stored; the replica holding it decides"
            );
            return;
        }
        match job.subject.keep_routine(self, bench, passed).await {
            Ok(kept) => {
                record.routine_id = Some(kept.routine_id);
                record.report.push_str(kept.note.unwrap_or_default());
            }
            Err(error) => {
                record
                    .report
                    .push_str(&format!("; could not be stored: {error}"));
            }
        }
        self.keep_attempt(record, context).await;
        S::passed(self).await;
    }

    async fn keep_attempt<K: ProgrammerKey>(&self, mut record: Attempt<K>, context: &QueryContext) {
        let tally = context.tally();
        record.prompt_tokens = tally.prompt_tokens;
        record.completion_tokens = tally.completion_tokens;
        record.cost_usd = tally.cost_usd;
        record.created_at_ms = self.core.clock.now_ms();
        if let Err(error) = self.core.store.programming().add_attempt(&record).await {
            tracing::error!(%error, "could not keep a routine attempt");
        }
    }
}

/// The examples a job works on, and where the newest that the prompt shows start; `None`
/// (logged) when they could not be read or there are none.
pub(super) fn examples_to_work_on<E>(
    read: Result<Vec<E>, agora_store::StoreError>,
    config: &ProgrammerConfig,
) -> Option<(Vec<E>, usize)> {
    match read {
        Ok(examples) if !examples.is_empty() => {
            let shown = examples
                .len()
                .saturating_sub(config.examples_in_prompt.max(1));
            Some((examples, shown))
        }
        Ok(_) => None,
        Err(error) => {
            tracing::error!(%error, "could not read the programmer's examples");
            None
        }
    }
}

/// A kind's background task: one job at a time, until the node is dropped.
async fn work<S: JobSubject>(
    core: Weak<Core>,
    state: Weak<ProgrammerState>,
    mut jobs: mpsc::Receiver<Job<S>>,
) {
    while let Some(job) = jobs.recv().await {
        let (Some(core), Some(state)) = (core.upgrade(), state.upgrade()) else {
            break;
        };
        let node = Programmer { core, state };
        let span = job.subject.span(job.reason);
        let permit = node.core.job_permit().await;
        let lease = lease_name::<S>(job.subject.key());
        if node.take_job_lease(&lease).await {
            // The job runs while the lease holds; losing it (this replica stalled past the
            // lease) ends the job, because another replica may have taken it up.
            tokio::select! {
                _ = node.program(&job).instrument(span) => {}
                _ = node.keep_job_lease(&lease) => {
                    tracing::warn!(%lease, "the job's lease was lost; the job is left to the replica that holds it");
                }
            }
            node.release_job_lease(&lease).await;
        } else {
            tracing::info!(%lease, "another replica is running this job");
        }
        drop(permit);
        S::queue(&node).release(job.subject.key());
    }
}

/// The name of a job's lease in the store: the kind of routine and its key.
fn lease_name<S: JobSubject>(key: &S::Key) -> String {
    format!("programmer:{}:{key:?}", S::WHAT)
}

/// How long a programmer job's lease lasts without renewal: a replica killed mid-job leaves its
/// job to the others after this long.
const JOB_LEASE_MS: i64 = 60_000;

impl Programmer {
    /// Takes the store's lease on a job for this process; `false` if another replica has it (or
    /// the store failed: the job would fail too).
    async fn take_job_lease(&self, lease: &str) -> bool {
        let now = self.core.clock.now_ms();
        let holder = &self.state.lease_holder;
        match self
            .core
            .store
            .take_lease(lease, holder, now, JOB_LEASE_MS)
            .await
        {
            Ok(taken) => taken,
            Err(error) => {
                tracing::error!(%error, %lease, "could not take a job lease");
                false
            }
        }
    }

    /// Renews the lease every third of its life; returns when it is lost.
    async fn keep_job_lease(&self, lease: &str) {
        let every = std::time::Duration::from_millis((JOB_LEASE_MS / 3) as u64);
        loop {
            tokio::time::sleep(every).await;
            if !self.renew_job_lease(lease).await {
                return;
            }
        }
    }

    /// Extends this process's lease; `false` when it is held no more. A store error counts as
    /// held: the lease still runs until it expires, and the next renewal tries again.
    async fn renew_job_lease(&self, lease: &str) -> bool {
        let now = self.core.clock.now_ms();
        let holder = &self.state.lease_holder;
        match self
            .core
            .store
            .renew_lease(lease, holder, now, JOB_LEASE_MS)
            .await
        {
            Ok(held) => held,
            Err(error) => {
                tracing::warn!(%error, %lease, "could not renew a job lease");
                true
            }
        }
    }

    async fn release_job_lease(&self, lease: &str) {
        let holder = &self.state.lease_holder;
        if let Err(error) = self.core.store.release_lease(lease, holder).await {
            tracing::warn!(%error, %lease, "could not release a job lease; it expires by itself");
        }
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

impl Programmer {
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
            .core
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
