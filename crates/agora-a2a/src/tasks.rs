//! Messages answered as tasks that run while the client waits on a stream or polls: the task is
//! returned at once (`TASK_STATE_SUBMITTED`, then `TASK_STATE_WORKING`), a status update tells
//! each step the node takes (an LLM call, a tool call and its answer), and the answer ends it.
//!
//! The steps come from the engine's [`Observer`], the same source as the Agent Protocol's run
//! events and the dashboard. While a task runs (and for [`KEEP_FINISHED`] after it ended),
//! `GetTask` reads it from this process's [`RunningTasks`]; after that from the node's stored
//! conversation, as before. Like the Agent Protocol's runs, a running task lives in one process:
//! a client polling another replica sees it only once its conversation is stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use a2a::{
    Message, Part, Role, StreamResponse, Task, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use agora_node::{Observer, Step};
use tokio::sync::mpsc;

/// How long a finished task stays readable here (its conversation, if it opened one, stays
/// readable from the store until it expires).
pub const KEEP_FINISHED: Duration = Duration::from_secs(600);

/// The most tasks held at once; past it the oldest finished ones go first, and a new task is
/// refused if none has finished.
pub const MAX_TASKS: usize = 1024;

/// Events a stream may lag behind before progress updates are dropped (the answer never is).
pub(crate) const EVENT_BUFFER: usize = 64;

/// Tasks this process is running, or ran a little while ago.
#[derive(Clone, Default)]
pub struct RunningTasks {
    tasks: Arc<Mutex<HashMap<String, Held>>>,
}

struct Held {
    task: Task,
    finished_at: Option<Instant>,
}

impl RunningTasks {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds a new task; `false` when [`MAX_TASKS`] are running.
    pub(crate) fn start(&self, task: Task) -> bool {
        let mut tasks = self.lock();
        tasks.retain(|_, held| {
            held.finished_at
                .is_none_or(|at| at.elapsed() < KEEP_FINISHED)
        });
        if tasks.len() >= MAX_TASKS {
            let oldest = tasks
                .iter()
                .filter_map(|(id, held)| held.finished_at.map(|at| (at, id.clone())))
                .min();
            match oldest {
                Some((_, id)) => {
                    tasks.remove(&id);
                }
                None => return false,
            }
        }
        tasks.insert(
            task.id.clone(),
            Held {
                task,
                finished_at: None,
            },
        );
        true
    }

    /// The task as it stands, if this process holds it.
    pub fn get(&self, id: &str) -> Option<Task> {
        self.lock().get(id).map(|held| held.task.clone())
    }

    /// Whether the task is running here (not yet finished).
    pub fn is_running(&self, id: &str) -> bool {
        self.lock()
            .get(id)
            .is_some_and(|held| held.finished_at.is_none())
    }

    fn set_status(&self, id: &str, status: TaskStatus) {
        if let Some(held) = self.lock().get_mut(id) {
            held.task.status = status;
        }
    }

    /// Records the task's end state.
    pub(crate) fn finish(&self, task: Task) {
        let mut tasks = self.lock();
        if let Some(held) = tasks.get_mut(&task.id) {
            held.task = task;
            held.finished_at = Some(Instant::now());
        }
    }
}

/// Tells a task's steps to its stream and to [`RunningTasks`] as status updates.
pub(crate) struct Progress {
    pub(crate) task_id: String,
    pub(crate) tasks: RunningTasks,
    pub(crate) events: mpsc::Sender<StreamResponse>,
}

impl Progress {
    /// A `TASK_STATE_WORKING` update saying `text`.
    pub(crate) fn working(&self, text: &str) {
        let mut message = Message::new(Role::Agent, vec![Part::text(text.to_string())]);
        message.task_id = Some(self.task_id.clone());
        message.context_id = Some(self.task_id.clone());
        let status = TaskStatus {
            state: TaskState::Working,
            message: Some(message),
            timestamp: None,
        };
        self.tasks.set_status(&self.task_id, status.clone());
        // Best effort: a client that does not read its stream loses progress, not the answer.
        let _ = self
            .events
            .try_send(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: self.task_id.clone(),
                context_id: self.task_id.clone(),
                status,
                metadata: None,
            }));
    }
}

impl Observer for Progress {
    fn observe(&self, step: Step) {
        if let Some(text) = step.summary() {
            self.working(&text);
        }
    }
}
