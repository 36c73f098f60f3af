//! The operator's decisions on routines the programmer wrote under the `review` activation
//! policy (`programmer.activation`): approve, reject with a reason, or edit. The registry
//! carries them out for receiver routines ([`crate::RoutineRegistry::approve`], `reject`,
//! `edit`), [`SenderReviewer`] for sender routines: an edit is examined on the kept examples,
//! and only a pass is stored, as a new pending routine; so no routine answers or sends that
//! failed its examination or that nobody approved.

use agora_store::{ReviewDecision, RoutineStatus, SenderRoutine, SenderRoutineReview, Store};

use crate::clock::Clock;
use crate::config::ProgrammerConfig;
use crate::programmer::{build, load_program};
use crate::routine_registry::{RegistryError, rejection_reason, reviewer_name};
use crate::routines::RoutineEngine;
use crate::sender::routine;
use crate::task::Task;

/// An operator's decision on a pending routine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Review {
    /// It may answer: it becomes active.
    Approve,
    /// It may not; the reason goes into the programmer's next prompt for the protocol.
    Reject {
        /// Why, for the programmer (and the record).
        reason: String,
    },
    /// Replace it with this JavaScript, once it passes the examination; the edit then waits
    /// for its own approval.
    Edit {
        /// The edited source.
        source: String,
    },
}

/// What the operator's review of sender routines needs: the node's store and clock, its routine
/// engine (to examine an edit), its tasks and its programmer's settings. The node gives one for
/// the admin API ([`crate::Node::sender_reviewer`]); `agora routine` builds one over the store.
pub struct SenderReviewer<'a> {
    /// The node's store.
    pub store: &'a Store,
    /// The decisions' time.
    pub clock: &'a dyn Clock,
    /// Builds and runs an edit; `None` refuses edits ([`RegistryError::NoEngine`]).
    pub engine: Option<&'a dyn RoutineEngine>,
    /// The node's configured tasks: an edit's outputs are checked against its task's output
    /// schema, besides the kept examples' outputs.
    pub tasks: &'a [Task],
    /// How many examples are kept, and the routines' limits.
    pub config: &'a ProgrammerConfig,
}

impl SenderReviewer<'_> {
    /// Carries out the operator's decision on the pending sender routine `id`, kept with
    /// `reviewer`: approve (it sends from then on), reject with a reason (the key's next prompt
    /// reads it), or edit (examined on the key's kept examples; a pass is a new pending routine,
    /// returned, and the reviewed one is kept as edited).
    pub async fn review(
        &self,
        id: i64,
        reviewer: &str,
        review: &Review,
    ) -> Result<SenderRoutine, RegistryError> {
        let reviewer = reviewer_name(reviewer)?;
        let store = self.store.sender();
        let routine = store
            .sender_routine(id)
            .await?
            .ok_or_else(|| RegistryError::NotFound(id.to_string()))?;
        if routine.status != RoutineStatus::Pending {
            return Err(RegistryError::Invalid(format!(
                "the sender routine {id} is {}, not pending: only a pending routine can be \
                 reviewed",
                routine.status
            )));
        }
        let built;
        let (decision, reason, edit) = match review {
            Review::Approve => (ReviewDecision::Approved, String::new(), None),
            Review::Reject { reason } => {
                let reason = rejection_reason(reason)?;
                (ReviewDecision::Rejected, reason.into(), None)
            }
            Review::Edit { source } => {
                built = self.examine_edit(&routine, source).await?;
                let edit = (source.as_str(), built.as_slice());
                (ReviewDecision::Edited, String::new(), Some(edit))
            }
        };
        let decided = SenderRoutineReview {
            id: 0,
            sender_routine_id: id,
            key: routine.key.clone(),
            decision,
            reason,
            reviewer: reviewer.to_string(),
            decided_at_ms: self.clock.now_ms(),
        };
        let reviewed = store
            .review_sender_routine(&decided, edit)
            .await?
            .ok_or_else(|| RegistryError::NotFound(id.to_string()))?;
        tracing::info!(routine = id, %decision, reviewer, "sender routine reviewed");
        Ok(reviewed)
    }

    /// Builds an operator's edit of the pending `routine` and examines it on its key's kept
    /// examples; returns the component of a pass.
    async fn examine_edit(
        &self,
        routine: &SenderRoutine,
        source: &str,
    ) -> Result<Vec<u8>, RegistryError> {
        let engine = self.engine.ok_or(RegistryError::NoEngine)?;
        // Each example's output was valid when it was kept, and the examination holds the edit
        // to those outputs; the task's schema is checked as well when the node's configuration
        // names the task (a task sent ad hoc is known by its name alone).
        let task = self.tasks.iter().find(|task| task.name == routine.key.task);
        let task = task.cloned().unwrap_or_else(|| Task {
            name: routine.key.task.clone(),
            description: String::new(),
            input_schema: serde_json::json!({}),
            output_schema: serde_json::json!({}),
        });
        let limit = self.config.max_examples.max(1) as i64;
        let store = self.store.sender();
        let examples = store.sender_examples(&routine.key, limit).await?;
        if examples.is_empty() {
            return Err(RegistryError::Invalid(
                "the routine's task has no kept examples to examine the edit on".into(),
            ));
        }
        let does_not_build = |unbuilt: crate::programmer::Unbuilt| {
            RegistryError::Rejected(format!("the edit does not build: {}", unbuilt.problem))
        };
        let loaded = load_program(engine, source).await.map_err(does_not_build)?;
        let limits = self.config.routine_limits();
        let report = routine::examine(loaded.as_ref(), &task, &examples, limits).await;
        if !report.passed() {
            return Err(RegistryError::Rejected(format!(
                "the edit failed its examination: {}",
                report.summary()
            )));
        }
        build(engine, source).await.map_err(does_not_build)
    }
}
