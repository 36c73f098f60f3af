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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use agora_protocol::{ProtocolHash, Request};
use agora_store::{RoutineOrigin, RoutineStatus, ShadowCheck};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use super::core::Core;
use super::programming::{Lesson, Programmer, ProgrammerState};
use super::receiver::IdempotencyFields;
use super::receiver::{Receiver, reply_body, tool_calls_json};
use crate::accounting::QueryContext;
use crate::config::OnDisagreement;
use crate::programmer::{PendingExample, exam};
use crate::responder::Subject;
use crate::routine_table::ActiveRoutine;
use crate::tools::ScratchTools;

/// A sampled request, waiting for its check.
pub(super) struct ShadowJob {
    /// The request the routine answered.
    pub(super) query_id: String,
    pub(super) routine: Arc<ActiveRoutine>,
    pub(super) request: Request,
    /// The routine's reply body, as text.
    pub(super) routine_reply: String,
    /// The tools over copies of the state the routine saw.
    pub(super) scratch: ScratchTools,
}

/// The node's shadow checks: sampling, the queue and its worker, and the routines that cannot
/// be checked.
pub(crate) struct Shadows {
    /// Routine-answered requests seen, by protocol.
    seen: Mutex<HashMap<ProtocolHash, u64>>,
    /// Why a routine is not checked, by routine id.
    unchecked: Mutex<HashMap<i64, String>>,
    /// Created with the worker, on the first check.
    sender: OnceLock<mpsc::Sender<ShadowJob>>,
    /// Checks waiting or running, for [`Shadows::idle`].
    outstanding: watch::Sender<usize>,
}

impl Shadows {
    pub(crate) fn new() -> Self {
        Self {
            seen: Mutex::new(HashMap::new()),
            unchecked: Mutex::new(HashMap::new()),
            sender: OnceLock::new(),
            outstanding: watch::Sender::new(0),
        }
    }

    /// Whether the next routine-answered request of `hash` is checked: the `n`-th is when
    /// `n * share` passes a whole number.
    fn sample(&self, hash: &ProtocolHash, share: f64) -> bool {
        if share.is_nan() || share <= 0.0 {
            return false;
        }
        let share = share.min(1.0);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let n = seen.entry(*hash).or_insert(0);
        *n += 1;
        (*n as f64 * share).floor() > ((*n - 1) as f64 * share).floor()
    }

    /// Why the routine `routine_id` is not shadow-checked, if a sampled request found out.
    pub(crate) fn unchecked(&self, routine_id: i64) -> Option<String> {
        let unchecked = self.unchecked.lock().unwrap_or_else(|p| p.into_inner());
        unchecked.get(&routine_id).cloned()
    }

    fn note_unchecked(&self, routine_id: i64, reason: String) {
        let mut unchecked = self.unchecked.lock().unwrap_or_else(|p| p.into_inner());
        unchecked.insert(routine_id, reason);
    }

    /// Waits until no check is waiting or running.
    pub(crate) async fn idle(&self) {
        let mut outstanding = self.outstanding.subscribe();
        // The sender lives as long as `self`, so this only ends when the count is zero.
        let _ = outstanding.wait_for(|n| *n == 0).await;
    }

    fn done(&self) {
        self.outstanding.send_modify(|n| *n = n.saturating_sub(1));
    }
}

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

/// How a check's two answers compare.
struct Verdict {
    agreed: bool,
    difference: String,
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
                subject,
                &resolved.references,
                &focus,
                &[],
                false,
                &body,
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
        if routine.origin != RoutineOrigin::Llm {
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
            failed_llm_routine: None,
        };
        self.programmer
            .learn(query_id, routine.protocol_hash, lesson)
            .await;
    }
}

/// Compares a routine's answer with the LLM's: the replies graded as the examination grades a
/// candidate against an example (the LLM's reply is the expected one), then the effects.
fn compare(
    document: &str,
    routine_reply: &str,
    llm_reply: &str,
    llm_tool_calls: &Value,
    routine_states: &std::collections::BTreeMap<String, Value>,
    llm_states: &std::collections::BTreeMap<String, Value>,
) -> Verdict {
    let schema = exam::reply_schema(document).and_then(|s| jsonschema::validator_for(&s).ok());
    let calls = exam::recorded_calls(llm_tool_calls);
    if let Err(difference) = exam::grade(llm_reply, routine_reply, &calls, schema.as_ref()) {
        return Verdict {
            agreed: false,
            difference: format!("replies differ: {difference}"),
        };
    }
    let differing: Vec<&str> = routine_states
        .iter()
        .filter(|(tool, state)| {
            !llm_states
                .get(*tool)
                .is_some_and(|other| exam::json_equivalent(state, other))
        })
        .map(|(tool, _)| tool.as_str())
        .collect();
    if !differing.is_empty() {
        return Verdict {
            agreed: false,
            difference: format!(
                "effects differ: the state behind {} is not the same after each",
                differing.join(", ")
            ),
        };
    }
    Verdict {
        agreed: true,
        difference: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[test]
    fn sampling_takes_every_nth_request_of_a_protocol() {
        let shadows = Shadows::new();
        let hash = ProtocolHash::of(b"p");
        let taken: Vec<bool> = (0..10).map(|_| shadows.sample(&hash, 0.25)).collect();
        assert_eq!(
            taken,
            [
                false, false, false, true, false, false, false, true, false, false
            ]
        );
        assert!((0..5).all(|_| shadows.sample(&hash, 1.0)));
        assert!((0..5).all(|_| !shadows.sample(&hash, 0.0)));
    }

    #[test]
    fn answers_are_compared_as_values_and_effects_as_states() {
        let none = BTreeMap::new();
        let same = compare(
            "",
            r#"{"a": 1, "b": 2}"#,
            r#"{"b": 2.0, "a": 1}"#,
            &json!([]),
            &none,
            &none,
        );
        assert!(same.agreed, "{}", same.difference);
        let other = compare("", r#"{"a": 1}"#, r#"{"a": 2}"#, &json!([]), &none, &none);
        assert!(!other.agreed);
        assert!(
            other.difference.starts_with("replies differ"),
            "{}",
            other.difference
        );
        let before = BTreeMap::from([("db".to_string(), json!({"t": [1]}))]);
        let after = BTreeMap::from([("db".to_string(), json!({"t": [1, 2]}))]);
        let effects = compare("", "{}", "{}", &json!([]), &before, &after);
        assert!(!effects.agreed);
        assert!(effects.difference.contains("db"), "{}", effects.difference);
    }
}
