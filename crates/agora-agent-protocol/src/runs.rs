//! Runs and their events, in memory and bounded.
//!
//! A run is one request to the node; its events are what the node did for it, told by the
//! engine's [`Observer`] as it happens (`RunObserver`) plus the request, the answer and the end.
//! Each run keeps at most [`RunLimits::max_events`] events and [`RunLimits::max_bytes`] of their
//! JSON (past either, steps are counted and dropped; `RunCompleted` is always kept and says how
//! many were dropped); the registry keeps at most [`RunLimits::max_runs`] runs and forgets a
//! finished run [`RunLimits::keep_finished`] after it ended (or sooner, oldest first, to make
//! room). So the events of this process take at most `max_runs × max_bytes` (128 MiB by
//! default) plus one `RunCompleted` a run.
//!
//! What this costs: the events live in this process only. A restart forgets them, and replicas
//! behind a load balancer do not share them (a client polling another replica gets `404`). The
//! threads themselves are the node's stored conversations and survive both.
//!
//! Every run task is spawned on the registry's [`TaskTracker`] and [`AgentRuns::shutdown`]
//! cancels and drains them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use agora_node::{Observer, Step};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::wire::{Event, EventKind, FinishReason, clip, clip_value};

/// The bounds on what the registry holds.
#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    /// Runs held at once, running or finished.
    pub max_runs: usize,
    /// Events kept per run, `RunCompleted` included.
    pub max_events: usize,
    /// Bytes of event JSON kept per run, `RunCompleted` aside.
    pub max_bytes: usize,
    /// How long a finished run's events stay readable.
    pub keep_finished: Duration,
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            max_runs: 512,
            max_events: 256,
            max_bytes: 256 * 1024,
            keep_finished: Duration::from_secs(3600),
        }
    }
}

/// One run: its identity, its events, and the means to wait for them or cancel it.
pub struct Run {
    /// The run's id (a UUID).
    pub id: String,
    /// Its thread: a stored conversation for a chat, the run's own for an operation.
    pub thread_id: String,
    /// The agent's name, on every event.
    pub agent: String,
    /// The client that started it (as the edge names clients); only it reads the run.
    pub client: String,
    /// Fired by a `CancelRequest`.
    pub cancel: CancellationToken,
    log: Mutex<RunLog>,
    /// The number of events pushed so far; SSE streams wait on it.
    changed: watch::Sender<u64>,
    max_events: usize,
    max_bytes: usize,
}

#[derive(Default)]
struct RunLog {
    events: Vec<Event>,
    /// Bytes of the events' own members, as JSON.
    bytes: usize,
    dropped: u64,
    finished: Option<(FinishReason, Instant)>,
    /// The last event id a plain poll (no `since`) returned.
    polled: u64,
}

impl Run {
    fn log(&self) -> MutexGuard<'_, RunLog> {
        // A panic while holding the lock cannot leave the log half-written (pushes are single
        // statements), so a poisoned lock is still good to read.
        self.log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends an event, unless the run has ended or (but for `RunCompleted`) is at its cap.
    pub fn push(&self, kind: EventKind) {
        let count = {
            let mut log = self.log();
            if log.finished.is_some() {
                return;
            }
            let completed = matches!(kind, EventKind::RunCompleted { .. });
            if !completed {
                let size = serde_json::to_string(&kind).map_or(0, |json| json.len());
                if log.events.len() + 1 >= self.max_events || log.bytes + size > self.max_bytes {
                    log.dropped += 1;
                    return;
                }
                log.bytes += size;
            }
            let kind = match kind {
                EventKind::RunCompleted {
                    finish_reason,
                    result,
                    output,
                    error,
                    ..
                } => {
                    log.finished = Some((finish_reason, Instant::now()));
                    EventKind::RunCompleted {
                        finish_reason,
                        result,
                        output,
                        error,
                        events_dropped: log.dropped,
                    }
                }
                other => other,
            };
            let id = log.events.len() as u64 + 1;
            log.events.push(Event {
                id,
                run_id: self.id.clone(),
                thread_id: self.thread_id.clone(),
                agent: self.agent.clone(),
                role: kind.role(),
                depth: 0,
                kind,
            });
            id
        };
        self.changed.send_replace(count);
    }

    /// Events after `since` (all with `since` 0), and whether the run has ended.
    pub fn events_after(&self, since: u64) -> (Vec<Event>, bool) {
        let log = self.log();
        let start = usize::try_from(since)
            .unwrap_or(usize::MAX)
            .min(log.events.len());
        (log.events[start..].to_vec(), log.finished.is_some())
    }

    /// The events since the last plain poll of this run (the seed's polling without `since`).
    pub fn poll(&self) -> Vec<Event> {
        let mut log = self.log();
        let start = usize::try_from(log.polled)
            .unwrap_or(usize::MAX)
            .min(log.events.len());
        let events = log.events[start..].to_vec();
        log.polled = log.events.len() as u64;
        events
    }

    /// How the run ended, if it has.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.log().finished.map(|(reason, _)| reason)
    }

    /// The last event (the `RunCompleted` of a finished run).
    pub fn last_event(&self) -> Option<Event> {
        self.log().events.last().cloned()
    }

    /// Wakes on every new event.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Waits until the run has ended.
    pub async fn finished(&self) {
        let mut changes = self.subscribe();
        loop {
            changes.borrow_and_update();
            if self.finish_reason().is_some() || changes.changed().await.is_err() {
                return;
            }
        }
    }

    fn expired(&self, now: Instant, keep: Duration) -> bool {
        matches!(self.log().finished, Some((_, at)) if now.duration_since(at) > keep)
    }
}

/// The node's engine steps, as events of one run.
pub struct RunObserver(pub Arc<Run>);

impl Observer for RunObserver {
    fn observe(&self, step: Step) {
        let kind = match step {
            Step::LlmCall { category } => EventKind::CompletionCall {
                category: category.as_str(),
            },
            Step::LlmResult {
                category,
                model,
                content,
                prompt_tokens,
                completion_tokens,
                cost_usd,
                latency_ms,
            } => EventKind::CompletionResult {
                category: category.as_str(),
                model,
                content: clip(&content),
                prompt_tokens,
                completion_tokens,
                cost_usd,
                latency_ms,
                error: None,
            },
            Step::LlmFailed { category } => EventKind::CompletionResult {
                category: category.as_str(),
                model: String::new(),
                content: String::new(),
                prompt_tokens: 0,
                completion_tokens: 0,
                cost_usd: 0.0,
                latency_ms: 0,
                error: Some("the language model call failed".into()),
            },
            Step::ToolCall {
                tool,
                arguments,
                caller,
            } => EventKind::ToolCall {
                function_name: tool,
                args: clip_value(arguments),
                caller: caller.as_str(),
            },
            Step::ToolResult {
                tool,
                result: Ok(value),
                caller,
            } => EventKind::ToolResult {
                text_result: clip(&match value {
                    serde_json::Value::String(text) => text,
                    other => other.to_string(),
                }),
                function_name: tool,
                caller: caller.as_str(),
            },
            Step::ToolResult {
                tool,
                result: Err(error),
                caller,
            } => {
                tracing::debug!(tool = %tool, %error, "a tool failed; the client sees a sentence");
                EventKind::ToolError {
                    content: format!("the tool {tool} failed; the node's log has the details"),
                    function_name: tool,
                    caller: caller.as_str(),
                }
            }
        };
        self.0.push(kind);
    }
}

/// Why a run could not be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RegistryFull {
    /// Every run held is still running.
    #[error("this agent has too many runs in progress; retry later")]
    Full,
}

/// The runs of this process (see the module docs for the bounds and what is lost on restart).
pub struct AgentRuns {
    runs: Mutex<Registry>,
    tracker: TaskTracker,
    limits: RunLimits,
}

#[derive(Default)]
struct Registry {
    by_id: HashMap<String, Arc<Run>>,
    /// Run ids, oldest first.
    order: VecDeque<String>,
}

impl std::fmt::Debug for AgentRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRuns")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Default for AgentRuns {
    fn default() -> Self {
        Self::new(RunLimits::default())
    }
}

impl AgentRuns {
    /// An empty registry with `limits`.
    pub fn new(limits: RunLimits) -> Self {
        Self {
            runs: Mutex::new(Registry::default()),
            tracker: TaskTracker::new(),
            limits,
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a new run, forgetting expired runs and, if still full, the oldest finished one.
    pub fn start(
        &self,
        thread_id: String,
        agent: &str,
        client: &str,
    ) -> Result<Arc<Run>, RegistryFull> {
        let now = Instant::now();
        let mut registry = self.registry();
        let keep = self.limits.keep_finished;
        let Registry { by_id, order } = &mut *registry;
        by_id.retain(|_, run| !run.expired(now, keep));
        order.retain(|id| by_id.contains_key(id));
        if order.len() >= self.limits.max_runs.max(1) {
            let oldest_finished = order
                .iter()
                .position(|id| by_id.get(id).is_some_and(|r| r.finish_reason().is_some()))
                .ok_or(RegistryFull::Full)?;
            if let Some(id) = order.remove(oldest_finished) {
                by_id.remove(&id);
            }
        }
        let run = Arc::new(Run {
            id: uuid::Uuid::new_v4().to_string(),
            thread_id,
            agent: agent.to_string(),
            client: client.to_string(),
            cancel: CancellationToken::new(),
            log: Mutex::new(RunLog::default()),
            changed: watch::channel(0).0,
            max_events: self.limits.max_events.max(2),
            max_bytes: self.limits.max_bytes,
        });
        order.push_back(run.id.clone());
        by_id.insert(run.id.clone(), run.clone());
        Ok(run)
    }

    /// The run `id`, if `client` started it and it has not expired.
    pub fn get(&self, id: &str, client: &str) -> Option<Arc<Run>> {
        let run = self.registry().by_id.get(id).cloned()?;
        (run.client == client && !run.expired(Instant::now(), self.limits.keep_finished))
            .then_some(run)
    }

    /// `client`'s runs on `thread_id`, oldest first.
    pub fn of_thread(&self, thread_id: &str, client: &str) -> Vec<Arc<Run>> {
        let registry = self.registry();
        registry
            .order
            .iter()
            .filter_map(|id| registry.by_id.get(id))
            .filter(|run| run.thread_id == thread_id && run.client == client)
            .cloned()
            .collect()
    }

    /// `client`'s runs, oldest first.
    pub fn of_client(&self, client: &str) -> Vec<Arc<Run>> {
        let registry = self.registry();
        registry
            .order
            .iter()
            .filter_map(|id| registry.by_id.get(id))
            .filter(|run| run.client == client)
            .cloned()
            .collect()
    }

    /// Spawns a run's task, tracked.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.tracker.spawn(task);
    }

    /// Cancels every run and waits for their tasks to end.
    pub async fn shutdown(&self) {
        self.tracker.close();
        for run in self.registry().by_id.values() {
            run.cancel.cancel();
        }
        self.tracker.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed() -> EventKind {
        EventKind::RunCompleted {
            finish_reason: FinishReason::Success,
            result: Some("done".into()),
            output: None,
            error: None,
            events_dropped: 0,
        }
    }

    #[test]
    fn a_run_keeps_its_cap_and_always_its_end() {
        let runs = AgentRuns::new(RunLimits {
            max_events: 3,
            ..RunLimits::default()
        });
        let run = runs.start("t".into(), "agent", "ip:1").expect("room");
        for _ in 0..5 {
            run.push(EventKind::TextOutput {
                content: "x".into(),
            });
        }
        run.push(completed());
        run.push(EventKind::RunStarted);
        let (events, finished) = run.events_after(0);
        assert!(finished);
        assert_eq!(events.len(), 3);
        assert!(matches!(
            events[2].kind,
            EventKind::RunCompleted {
                events_dropped: 3,
                ..
            }
        ));
        assert_eq!(run.events_after(2).0.len(), 1);
        assert_eq!(run.poll().len(), 3);
        assert!(
            run.poll().is_empty(),
            "a poll returns what is new since the last"
        );
    }

    #[test]
    fn a_run_keeps_its_byte_budget() {
        let runs = AgentRuns::new(RunLimits {
            max_bytes: 100,
            ..RunLimits::default()
        });
        let run = runs.start("t".into(), "agent", "ip:1").expect("room");
        run.push(EventKind::TextOutput {
            content: "x".repeat(60),
        });
        run.push(EventKind::TextOutput {
            content: "y".repeat(60),
        });
        run.push(completed());
        let (events, _) = run.events_after(0);
        assert_eq!(events.len(), 2, "the second output is over the budget");
        assert!(matches!(
            events[1].kind,
            EventKind::RunCompleted {
                events_dropped: 1,
                ..
            }
        ));
    }

    #[test]
    fn the_registry_is_bounded_and_runs_are_their_clients() {
        let runs = AgentRuns::new(RunLimits {
            max_runs: 2,
            ..RunLimits::default()
        });
        let first = runs.start("t".into(), "a", "ip:1").expect("room");
        let second = runs.start("t".into(), "a", "ip:1").expect("room");
        assert_eq!(
            runs.start("t".into(), "a", "ip:1").err(),
            Some(RegistryFull::Full),
            "both still running"
        );
        first.push(completed());
        let third = runs
            .start("u".into(), "a", "ip:1")
            .expect("the finished run makes room");
        assert!(runs.get(&first.id, "ip:1").is_none());
        assert!(
            runs.get(&second.id, "ip:2").is_none(),
            "another client's run"
        );
        assert!(runs.get(&third.id, "ip:1").is_some());
        assert_eq!(runs.of_thread("t", "ip:1").len(), 1);
    }
}
