//! Shadow checks: a share of the requests routines answered, answered again by the LLM off the
//! request path, on scratch copies of the tools' state, and compared as answers.
//!
//! A request is sampled before its routine runs (every `1 / share`-th routine-answered request
//! of a protocol), so the copies hold the state the routine saw. The check runs later, on one
//! background worker that waits for the job gate as the programmer's jobs do: the routine runs
//! again on a second copy, for its effects; the LLM answers on the first as it would with no
//! routine (code as action, then the tool loop), its calls recorded under the category
//! `shadow`. The replies are graded as the programmer's examination grades a candidate against
//! an example, and the two copies' states must be equal. A routine granted a tool that cannot
//! copy its state is not checked; the reason is kept for the dashboard.
//!
//! Architecture invariant: a shadow check calls no tool on the real state: its registry holds
//! only copies and stateless tools.

use std::sync::{Arc, Weak};

use agora_protocol::ProtocolHash;
use agora_store::{RoutineStatus, ShadowCheck};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::core::Core;
use super::programming::{Lesson, Programmer, ProgrammerState};
use super::receiver::IdempotencyFields;
use super::receiver::{Question, Receiver, reply_body, tool_calls_json};
use crate::accounting::QueryContext;
use crate::config::OnDisagreement;
use crate::programmer::PendingExample;
use crate::responder::Subject;
use crate::routine_table::ActiveRoutine;
use crate::shadow::{ShadowJob, Shadows, compare};
use crate::tools::ScratchTools;

/// The receiver, as the checks' worker holds it: weakly, so that a dropped node ends it.
struct WeakReceiver {
    core: Weak<Core>,
    state: Weak<ProgrammerState>,
    idempotency_fields: Weak<IdempotencyFields>,
    shadows: Weak<Shadows>,
}

impl WeakReceiver {
    fn of(receiver: &Receiver) -> Self {
        Self {
            core: Arc::downgrade(&receiver.core),
            state: Arc::downgrade(&receiver.programmer.state),
            idempotency_fields: Arc::downgrade(&receiver.idempotency_fields),
            shadows: Arc::downgrade(&receiver.shadows),
        }
    }

    fn upgrade(&self) -> Option<Receiver> {
        let core = self.core.upgrade()?;
        Some(Receiver {
            programmer: Programmer {
                core: core.clone(),
                state: self.state.upgrade()?,
            },
            core,
            idempotency_fields: self.idempotency_fields.upgrade()?,
            shadows: self.shadows.upgrade()?,
        })
    }
}

/// Runs the queued checks one at a time, each once the job gate lets it, until the node is gone.
async fn shadow_worker(receiver: WeakReceiver, mut jobs: mpsc::Receiver<ShadowJob>) {
    while let Some(job) = jobs.recv().await {
        let Some(receiver) = receiver.upgrade() else {
            break;
        };
        let permit = receiver.core.job_permit().await;
        let routine = &job.routine.routine;
        let span = tracing::info_span!("agora.node.shadow", routine = %routine.name, query_id = %job.query_id);
        receiver.shadow_check(job).instrument(span).await;
        drop(permit);
        receiver.shadows.done();
    }
}

impl Receiver {
    /// Copies of the tools' state for checking `active` on this request, when it is sampled and
    /// the routine's tools can be copied.
    pub(super) async fn shadow_scratch(
        &self,
        hash: &ProtocolHash,
        active: &ActiveRoutine,
    ) -> Option<ScratchTools> {
        let share = self.core.config.routines.shadow.share;
        if !self.shadows.sample(hash, share) {
            return None;
        }
        match self.core.tools.scratch(&active.routine.tools).await {
            Ok(scratch) => Some(scratch),
            Err(reason) => {
                tracing::info!(routine = %active.routine.name, %reason, "not shadow-checked");
                self.shadows.note_unchecked(active.routine.id, reason);
                None
            }
        }
    }

    /// Queues a check; a full queue drops it, with a warning.
    pub(super) fn queue_shadow_check(&self, job: ShadowJob) {
        let shadows = &self.shadows;
        let sender = shadows.sender.get_or_init(|| {
            let capacity = self.core.config.routines.shadow.queue_capacity.max(1);
            let (sender, receiver) = mpsc::channel(capacity);
            tokio::spawn(shadow_worker(WeakReceiver::of(self), receiver));
            sender
        });
        shadows.outstanding.send_modify(|n| *n += 1);
        if let Err(error) = sender.try_send(job) {
            shadows.done();
            tracing::warn!(%error, "shadow check queue full; a sampled request is not checked");
        }
    }

    async fn shadow_check(&self, job: ShadowJob) {
        let routine = &job.routine.routine;
        let hash = routine.protocol_hash;
        let mut context = QueryContext::new(crate::accounting::new_query_id(), Some(hash));
        context.shadow = true;
        let resolved = match self.resolve(&job.request, hash).await {
            Ok(resolved) => resolved,
            Err(outcome) => {
                tracing::warn!(detail = ?outcome.error_detail, "no shadow check: the document is unavailable");
                return;
            }
        };
        let body = job.request.body.to_text();
        // The routine's effects, on a second copy of the state it saw.
        let routine_states = match job.scratch.fork().await {
            Ok(forked) => {
                if let Err(error) = job.routine.run_on(&body, &forked.registry).await {
                    tracing::info!(%error, "the routine failed on its scratch copy");
                }
                forked.states().await
            }
            Err(error) => Err(error),
        };
        let document = &resolved.document;
        let subject = Subject::Protocol(document);
        let focus = self.core.focus(subject);
        let answered = self
            .llm_answer(
                &context,
                &Question {
                    subject,
                    references: &resolved.references,
                    focus: &focus,
                    history: &[],
                    in_conversation: false,
                    message: &body,
                },
                &job.scratch.registry,
            )
            .await;
        let answer = match answered {
            Ok(answered) => answered.answer,
            Err(error) => {
                tracing::warn!(%error, "no shadow check: the LLM did not answer");
                return;
            }
        };
        let llm_reply = reply_body(&job.request.body, answer.value.clone()).to_text();
        let tool_calls = tool_calls_json(&answer.tool_calls);
        let verdict = match (routine_states, job.scratch.states().await) {
            (Ok(routine_states), Ok(llm_states)) => compare(
                document.text(),
                &job.routine_reply,
                &llm_reply,
                &tool_calls,
                &routine_states,
                &llm_states,
            ),
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(%error, "no shadow check: a scratch copy could not be read");
                return;
            }
        };
        if !verdict.agreed {
            tracing::warn!(difference = %verdict.difference, "a routine and the LLM disagree");
        }
        let check = ShadowCheck {
            id: 0,
            routine_id: routine.id,
            protocol_hash: hash,
            query_id: job.query_id.clone(),
            body: body.clone(),
            routine_reply: job.routine_reply.clone(),
            llm_reply: llm_reply.clone(),
            agreed: verdict.agreed,
            difference: verdict.difference,
            cost_usd: context.tally().cost_usd,
            created_at_ms: self.core.clock.now_ms(),
        };
        let programming = self.core.store.programming();
        if let Err(error) = programming.record_shadow_check(&check).await {
            tracing::error!(%error, "could not record a shadow check");
        }
        if !check.agreed
            && self.core.config.routines.shadow.on_disagreement == OnDisagreement::Suspend
        {
            let example = PendingExample {
                body,
                tool_calls,
                reply: llm_reply,
            };
            self.suspend(&job.routine, &context.query_id, example).await;
        }
    }

    /// Disables an LLM-written routine that disagreed with the LLM, and gives the programmer
    /// the LLM's answer as an example.
    async fn suspend(&self, active: &ActiveRoutine, query_id: &str, example: PendingExample) {
        let routine = &active.routine;
        if !routine.origin.by_node() {
            return;
        }
        let current = self.core.store.routine(routine.id).await;
        if !matches!(current, Ok(Some(ref r)) if r.status == RoutineStatus::Active) {
            return;
        }
        tracing::warn!(routine = %routine.name, "suspending a routine that disagreed with the LLM");
        let now = self.core.clock.now_ms();
        let disabled = self
            .core
            .store
            .set_routine_status(routine.id, RoutineStatus::Disabled, now)
            .await;
        if let Err(error) = disabled {
            tracing::error!(%error, "could not suspend a routine");
            return;
        }
        self.core.sync_after_change().await;
        let lesson = Lesson {
            example: Some(example),
            failed_routine: None,
        };
        self.programmer
            .learn(query_id, routine.protocol_hash, lesson)
            .await;
    }
}
