//! The sender's ladder, last rung: sender-side routines (see `crate::sender::routine` for the
//! contract and the examination).
//!
//! Every successful LLM-written protocol run of [`Node::send`] is kept as a sender example
//! (data, body, reply, output; bounded per (target, task, protocol) by
//! `programmer.max_examples`). After `sender.sender_routine_threshold` of them since the key's
//! last job, and while the key has no active sender routine, the programmer's job
//! (`node::programming`, with its own bounded queue for sender keys) writes a routine: here is
//! what it does for a key (the prompt shows both operations of each example; the examination
//! replays encode and decode). A pass is stored and activated.
//!
//! [`Node::run_task`] then sends under the protocol with the routine alone: encode, post,
//! decode, validate against the output schema, no LLM call. A routine error, an output that
//! does not validate or a `failure` reply from the target (the body may be wrong) counts a
//! failure on the routine, and that run falls back to the LLM (whose successful run becomes a
//! new example). After `programmer.max_routine_failures` failures the routine is disabled and
//! rewritten. A `rejected` reply or an unreachable target is not the routine's fault and is
//! returned as it is, as the LLM's run would.
//!
//! Under the `review` activation policy (`programmer.activation`, per protocol) a pass is kept
//! `pending` and sends nothing until the operator approves it ([`SenderReviewer`]);
//! a rejection's reason goes into the key's next prompt, and an edit is examined on the key's
//! kept examples before it can wait for approval. Sender routines are not shadow-checked: what
//! they do is post to another node, which no scratch state can stand in for.

use std::sync::Arc;
use std::time::Duration;

use agora_protocol::{ProtocolHash, VerifiedDocument};
use agora_store::{JobReason, ReviewDecision, SenderExample, SenderKey};
use serde_json::Value;

use super::ladder::RoutineRun;
use super::ladder::Sender;
use super::programming::{
    Examination, JobSubject, Kept, Passed, Prepared, Programmer, SenderBench, SenderSubject,
    examples_to_work_on,
};
use super::review::SenderReviewer;
use crate::config::{Activation, ProgrammerConfig};
use crate::programmer::{Job, ProgrammerQueue, build, load_program, prompt, unbuilt_load};
use crate::routines::{LoadedRoutine, RoutineEngine, RoutineLimits};
use crate::sender::routine;
use crate::sender::{self, Answer, SendError, SendOutcome};
use crate::task::Task;

impl Programmer {
    /// Waits until no sender routine job is waiting or running (tests, orderly shutdown).
    pub(crate) async fn sender_routines_idle(&self) {
        self.state.sender_routines.queue.idle().await;
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
        if !self.core.sender_routines_on() {
            return;
        }
        let store = &self.core.store;
        let example = SenderExample {
            id: 0,
            key: key.clone(),
            data: data.clone(),
            body: body.to_string(),
            reply: outcome.reply_body.clone(),
            output: outcome.output.clone(),
            created_at_ms: self.core.clock.now_ms(),
        };
        let keep = self.core.config.programmer.max_examples.max(1) as i64;
        if let Err(error) = store.sender().add_sender_example(&example, keep).await {
            tracing::error!(%error, "could not keep a sender example");
            return;
        }
        let threshold = self.core.config.sender.sender_routine_threshold.max(1) as u64;
        let subject = SenderSubject {
            key,
            task: task.clone(),
        };
        self.consider_programming(subject, threshold).await;
    }

    /// What reviews the node's pending sender routines.
    pub(crate) fn sender_reviewer(&self) -> SenderReviewer<'_> {
        let core = &self.core;
        SenderReviewer {
            store: &core.store,
            clock: core.clock.as_ref(),
            engine: core.routines.engine().map(|engine| engine.as_ref()),
            tasks: &core.config.tasks,
            config: &core.config.programmer,
        }
    }

    /// The operator's reason and the rejected source, when the key's latest review was a
    /// rejection: the next prompt reads them.
    async fn last_sender_rejection(&self, key: &SenderKey) -> Option<(String, String)> {
        let store = self.core.store.sender();
        let reviews = store.sender_reviews(Some(key)).await;
        let reviews = reviews
            .inspect_err(|error| tracing::error!(%error, "could not read the sender reviews"))
            .ok()?;
        let last = reviews.last()?;
        if last.decision != ReviewDecision::Rejected {
            return None;
        }
        let routine = store.sender_routine(last.sender_routine_id).await.ok()??;
        Some((last.reason.clone(), routine.source))
    }
}

impl Sender {
    /// Runs the task under the protocol with the key's active sender routine, if it has one.
    pub(super) async fn send_by_routine(
        &self,
        key: &SenderKey,
        task: &Task,
        data: &Value,
        document: &VerifiedDocument,
        sources: &[String],
    ) -> RoutineRun {
        if !self.core.sender_routines_on() {
            return RoutineRun::NoRoutine;
        }
        let store = &self.core.store;
        let active = match store.sender().active_sender_routine(key).await {
            Ok(Some(active)) => active,
            Ok(None) => return RoutineRun::NoRoutine,
            Err(error) => {
                tracing::error!(%error, "could not read the sender routine");
                return RoutineRun::NoRoutine;
            }
        };
        // The routine failed on this run: the LLM does it, and the failure is recorded.
        let failed = |error: String| self.sender_routine_failed(key, task, active.id, error);
        let loaded = match self.load_sender_routine(active.id).await {
            Ok(loaded) => loaded,
            Err(error) => return failed(error).await,
        };
        let limits = self.core.programmer_limits();
        let body = match routine::run(loaded.as_ref(), &routine::encode_input(data), limits).await {
            Ok(body) => body,
            Err(error) => return failed(format!("encode: {error}")).await,
        };
        let config = &self.core.config.sender;
        let envelope = sender::envelope(Some(document), sources, &body);
        let timeout = Duration::from_secs(config.timeout_secs.max(1));
        let (reply, negotiation_requested) = match sender::post(
            &self.core.targets,
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
                return failed(error).await;
            }
            Err(error) => return RoutineRun::Done(Err(error)),
        };
        let output = match routine::run(loaded.as_ref(), &routine::decode_input(&reply), limits)
            .await
            .and_then(|got| routine::read_output(task, &got))
        {
            Ok(output) => output,
            Err(error) => return failed(format!("decode: {error}")).await,
        };
        let now = self.core.clock.now_ms();
        if let Err(error) = store
            .sender()
            .record_sender_routine_run(active.id, None, now)
            .await
        {
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
        if let Some(loaded) = self.programmer.state.sender_routines.loaded(id) {
            return Ok(loaded);
        }
        let engine = self
            .core
            .routines
            .engine()
            .ok_or_else(|| "no routine engine".to_string())?;
        let component = self
            .core
            .store
            .sender()
            .sender_routine_component(id)
            .await
            .map_err(|e| format!("could not read the component: {e}"))?;
        let loaded = engine
            .load(&component)
            .await
            .map_err(|e| format!("could not load: {e}"))?;
        self.programmer
            .state
            .sender_routines
            .keep_loaded(id, loaded.clone());
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
        let store = &self.core.store;
        let now = self.core.clock.now_ms();
        let failures = match store
            .sender()
            .record_sender_routine_run(id, Some(&error), now)
            .await
        {
            Ok(failures) => failures,
            Err(store_error) => {
                tracing::error!(error = %store_error, "could not count a sender routine failure");
                return RoutineRun::Failed;
            }
        };
        if failures >= self.core.config.programmer.max_routine_failures.max(1) {
            tracing::warn!(
                routine = id,
                failures,
                "disabling a sender routine that failed too often; rewriting it"
            );
            if let Err(store_error) = store.sender().disable_sender_routine(id, now).await {
                tracing::error!(error = %store_error, "could not disable a sender routine");
                return RoutineRun::Failed;
            }
            self.programmer.state.sender_routines.forget(id);
            self.programmer.enqueue(Job {
                subject: SenderSubject {
                    key: key.clone(),
                    task: task.clone(),
                },
                reason: JobReason::Failures,
            });
        }
        RoutineRun::Failed
    }
}

/// A sender routine is written for a target, task and protocol.
impl JobSubject for SenderSubject {
    type Key = SenderKey;
    type Bench = SenderBench;
    type Pass = (Vec<u8>, Arc<dyn LoadedRoutine>);

    const QUERY_PREFIX: &'static str = "sender-programmer";
    const WHAT: &'static str = "sender routine";

    fn key(&self) -> &SenderKey {
        &self.key
    }

    fn protocol_hash(&self) -> ProtocolHash {
        self.key.protocol_hash
    }

    fn queue(node: &Programmer) -> &ProgrammerQueue<SenderKey, Job<SenderSubject>> {
        &node.state.sender_routines.queue
    }

    fn span(&self, reason: JobReason) -> tracing::Span {
        tracing::info_span!(
            "agora.node.program_sender",
            protocol_hash = %self.key.protocol_hash,
            task = %self.key.task,
            reason = %reason
        )
    }

    /// An active routine, or one waiting for the operator's review.
    async fn has_routine(&self, node: &Programmer) -> bool {
        let store = node.core.store.sender();
        let found = match store.active_sender_routine(&self.key).await {
            Ok(None) => store.pending_sender_routine(&self.key).await,
            found => found,
        };
        match found {
            Ok(found) => found.is_some(),
            Err(error) => {
                tracing::error!(%error, "could not read the sender routine");
                true
            }
        }
    }

    async fn bench(
        &self,
        node: &Programmer,
        document: &VerifiedDocument,
        config: &ProgrammerConfig,
    ) -> Option<Prepared<SenderBench>> {
        let limit = config.max_examples.max(1) as i64;
        let read = node
            .core
            .store
            .sender()
            .sender_examples(&self.key, limit)
            .await;
        let (examples, shown) = examples_to_work_on(read, config)?;
        let mut messages = routine::first_messages(document, &self.task, &examples[shown..]);
        if let Some((reason, source)) = node.last_sender_rejection(&self.key).await {
            messages = prompt::after_rejection(messages, &reason, Some(&source), "handle(input)");
        }
        Some(Prepared {
            examples_upto: examples.last().map(|e| e.id).unwrap_or_default(),
            messages,
            bench: SenderBench {
                task: self.task.clone(),
                examples,
            },
        })
    }

    async fn examine(
        bench: &SenderBench,
        engine: &dyn RoutineEngine,
        source: &str,
        limits: RoutineLimits,
    ) -> Examination<(Vec<u8>, Arc<dyn LoadedRoutine>)> {
        let program = match load_program(engine, source).await {
            Ok(program) => program,
            Err(unbuilt) => return Examination::Unbuilt(unbuilt),
        };
        let report = routine::examine(program.as_ref(), &bench.task, &bench.examples, limits).await;
        // Only a candidate that passed is kept: it is built into a component and compiled.
        let pass = if report.passed() {
            let kept = match build(engine, source).await {
                Ok(component) => engine
                    .load(&component)
                    .await
                    .map(|loaded| (component, loaded))
                    .map_err(|error| unbuilt_load(&error)),
                Err(unbuilt) => Err(unbuilt),
            };
            match kept {
                Ok(kept) => Some(kept),
                Err(unbuilt) => return Examination::Unbuilt(unbuilt),
            }
        } else {
            None
        };
        Examination::Examined {
            source: source.to_string(),
            report: report.summary(),
            feedback: report.feedback(),
            pass,
        }
    }

    async fn keep_routine(
        &self,
        node: &Programmer,
        _bench: &SenderBench,
        passed: Passed<(Vec<u8>, Arc<dyn LoadedRoutine>)>,
    ) -> Result<Kept, String> {
        let (component, loaded) = passed.pass;
        let now = node.core.clock.now_ms();
        let hash = self.key.protocol_hash;
        let review = node.core.config.programmer.activation_for(&hash) == Activation::Review;
        let id = node
            .core
            .store
            .sender()
            .add_sender_routine(&self.key, &passed.source, &component, now, review)
            .await
            .map_err(|error| error.to_string())?;
        node.state.sender_routines.keep_loaded(id, loaded);
        tracing::info!(
            routine = id,
            attempt = passed.attempt,
            review,
            "the LLM wrote a sender routine"
        );
        Ok(Kept {
            routine_id: id,
            note: review.then_some("; waiting for the operator's review"),
        })
    }
}
