//! The programmer's parts that know nothing of the node: its job queue, the prompt, and the
//! examination of candidates. The job itself (`node::programming`, one for receiver and sender
//! routines) ties them to the node.
//!
//! Architecture invariant: at most one job per key is waiting or running, and at most
//! `queue_capacity` jobs wait. Jobs run one at a time on a background task, so writing a
//! routine never holds up a request (a local model has one slot anyway). The queue lives in
//! memory: what a job needs (the examples) is in the store, so a job lost to a restart is asked
//! for again by the protocol's next LLM-answered request.

pub(crate) mod compile;
pub(crate) mod dataflow;
pub(crate) mod depends;
pub(crate) mod exam;
pub(crate) mod grounding;
pub(crate) mod guard;
pub(crate) mod prompt;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

use agora_store::JobReason;
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::routines::{LoadedRoutine, RoutineEngine, RoutineError, RoutineSource};

/// Write a routine for `subject`: a protocol (receiver routines), or a target, task and protocol
/// (sender routines, whose task travels with the job). See `node::programming`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Job<S> {
    pub(crate) subject: S,
    pub(crate) reason: JobReason,
}

/// What an LLM-answered single-shot protocol request teaches the programmer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PendingExample {
    /// The request body, as text.
    pub(crate) body: String,
    /// The tool calls, as the store keeps them.
    pub(crate) tool_calls: Value,
    /// The reply body, as text.
    pub(crate) reply: String,
}

/// The waiting and running jobs, one at most per key (a protocol for receiver routines; a
/// target, task and protocol for sender routines, see `node::sender_routines`).
pub(crate) struct ProgrammerQueue<K, J> {
    /// Created with the worker, on the first job (that needs a tokio runtime).
    pub(crate) sender: OnceLock<mpsc::Sender<J>>,
    /// Keys with a job waiting or running.
    pending: Mutex<HashSet<K>>,
    /// Jobs waiting or running, for [`crate::Node::programmer_idle`].
    outstanding: watch::Sender<usize>,
}

impl<K: std::hash::Hash + Eq, J> ProgrammerQueue<K, J> {
    pub(crate) fn new() -> Self {
        Self {
            sender: OnceLock::new(),
            pending: Mutex::new(HashSet::new()),
            outstanding: watch::Sender::new(0),
        }
    }

    /// Whether a job for `hash` is waiting or running.
    pub(crate) fn is_pending(&self, hash: &K) -> bool {
        match self.pending.lock() {
            Ok(pending) => pending.contains(hash),
            Err(poisoned) => poisoned.into_inner().contains(hash),
        }
    }

    /// Marks a job for `hash` as taken; false when one already is.
    pub(crate) fn claim(&self, hash: K) -> bool {
        let inserted = match self.pending.lock() {
            Ok(mut pending) => pending.insert(hash),
            Err(poisoned) => poisoned.into_inner().insert(hash),
        };
        if inserted {
            self.outstanding.send_modify(|n| *n += 1);
        }
        inserted
    }

    /// The job for `hash` is done (or was never queued).
    pub(crate) fn release(&self, hash: &K) {
        let removed = match self.pending.lock() {
            Ok(mut pending) => pending.remove(hash),
            Err(poisoned) => poisoned.into_inner().remove(hash),
        };
        if removed {
            self.outstanding.send_modify(|n| *n = n.saturating_sub(1));
        }
    }

    /// Waits until no job is waiting or running.
    pub(crate) async fn idle(&self) {
        let mut outstanding = self.outstanding.subscribe();
        // The sender lives as long as `self`, so this only ends when the count is zero.
        let _ = outstanding.wait_for(|n| *n == 0).await;
    }
}

/// Code that did not build or load: the error, and what the model is told.
pub(crate) struct Unbuilt {
    pub(crate) report: String,
    pub(crate) problem: String,
}

/// Loads JavaScript `source` for this use alone, a program or a candidate under examination
/// (nothing compiled is kept; a candidate is kept, if at all, as its component: [`build`]).
pub(crate) async fn load_program(
    engine: &dyn RoutineEngine,
    source: &str,
) -> Result<Arc<dyn LoadedRoutine>, Unbuilt> {
    engine
        .load_program(&RoutineSource::JavaScript(source.to_string()))
        .await
        .map_err(|error| match error {
            RoutineError::Build(_) => unbuilt_build(&error),
            other => unbuilt_load(&other),
        })
}

/// Builds JavaScript `source` into the component a kept routine is stored as.
pub(crate) async fn build(engine: &dyn RoutineEngine, source: &str) -> Result<Vec<u8>, Unbuilt> {
    engine
        .build(&RoutineSource::JavaScript(source.to_string()))
        .await
        .map_err(|error| unbuilt_build(&error))
}

fn unbuilt_build(error: &RoutineError) -> Unbuilt {
    Unbuilt {
        report: error.to_string(),
        problem: format!("Your code does not build: {error}"),
    }
}

/// Code that built but could not be loaded.
pub(crate) fn unbuilt_load(error: &RoutineError) -> Unbuilt {
    Unbuilt {
        report: error.to_string(),
        problem: format!("Your code could not be loaded: {error}"),
    }
}
