//! The node's loaded routines: at most one per protocol, ready to run, kept in step with the
//! store.
//!
//! The store is the truth (routines survive restarts, and the `agora` CLI changes them while
//! the node runs); this table is what the request path reads, without touching the store.
//! [`RoutineTable::sync`] compares the store's routines version with the one it last loaded and
//! does nothing when they agree, so the server can call it every few seconds. When they differ it
//! rebuilds the table, reusing routines already loaded (a routine's code never changes under its
//! id) and loading the others with the engine. Loading may compile, so it happens here, in the
//! background, never on the request path.
//!
//! A routine reaches the outside world only through [`GrantedTools`]: the node's tools, with
//! their argument validation, restricted to the ones its manifest grants, and for a question
//! (a protocol declared read-only, [`answers_a_question`]) to calls known only to read.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use agora_protocol::ProtocolHash;
use agora_store::{Routine, RoutineStatus, Store, StoreError};
use agora_telemetry::conventions as conv;
use serde_json::Value;
use tracing::Instrument as _;

use crate::observer::{Observer, Step, ToolCaller};
use crate::routines::{LoadedRoutine, RoutineEngine, RoutineError, RoutineLimits, ToolHost};
use crate::tools::ToolRegistry;

/// How long past its deadline a run may take before the node stops waiting for it. The engine
/// enforces the deadline itself; this only bounds what a misbehaving engine can cost a request.
const DEADLINE_GRACE: Duration = Duration::from_millis(250);

/// The limits a routine's manifest asks for.
pub(crate) fn limits_of(routine: &Routine) -> RoutineLimits {
    RoutineLimits {
        timeout: Duration::from_millis(routine.timeout_ms.max(1) as u64),
        memory_bytes: routine.memory_bytes.max(0) as u64,
    }
}

/// Whether `hash`'s requests are questions: the operator lists it in
/// `routines.read_only_protocols`, or its document says `read_only: true`. A routine answering
/// a question may only read.
pub(crate) fn answers_a_question(
    read_only: &BTreeSet<ProtocolHash>,
    hash: &ProtocolHash,
    document: Option<&agora_protocol::VerifiedDocument>,
) -> bool {
    read_only.contains(hash) || document.is_some_and(|d| d.metadata().read_only())
}

/// The tools a routine may call: the node's registry, restricted to the granted names.
#[derive(Debug, Clone)]
pub struct GrantedTools {
    tools: ToolRegistry,
    granted: BTreeSet<String>,
    only_reads: bool,
}

impl GrantedTools {
    /// The node's `tools`, of which only `granted` may be called.
    pub fn new(tools: ToolRegistry, granted: &[String]) -> Self {
        Self {
            tools,
            granted: granted.iter().cloned().collect(),
            only_reads: false,
        }
    }

    /// For a routine answering a question: only calls known to read
    /// ([`crate::tools::Tool::changes_state`] `Some(false)`) go through.
    pub fn only_reading(mut self, only_reads: bool) -> Self {
        self.only_reads = only_reads;
        self
    }
}

#[async_trait::async_trait]
impl ToolHost for GrantedTools {
    async fn call_tool(&self, name: &str, arguments: &str) -> Result<String, String> {
        if !self.granted.contains(name) {
            return Err(format!("tool {name} is not granted to this routine"));
        }
        let arguments: Value = serde_json::from_str(arguments)
            .map_err(|error| format!("the arguments for {name} are not JSON: {error}"))?;
        if self.only_reads && self.tools.changes_state(name, &arguments) != Some(false) {
            return Err(format!(
                "this call of {name} may change something, and this routine answers a question \
                 (its protocol is read-only): it may only read"
            ));
        }
        let result = self.tools.call(name, arguments).await;
        tracing::debug!(tool = name, ok = result.is_ok(), "routine tool call");
        result
            .map(|value| value.to_string())
            .map_err(|error| error.to_string())
    }
}

/// A routine loaded and ready to answer its protocol.
pub(crate) struct ActiveRoutine {
    /// The routine as stored when it was loaded.
    pub(crate) routine: Routine,
    loaded: Arc<dyn LoadedRoutine>,
    tools: Arc<dyn ToolHost>,
    limits: RoutineLimits,
    /// It answers a question: its tool calls may only read.
    question: bool,
}

impl ActiveRoutine {
    /// Prepares a loaded routine to run with its granted tools and limits; for a `question`,
    /// calls that may change something fail.
    pub(crate) fn new(
        routine: Routine,
        loaded: Arc<dyn LoadedRoutine>,
        tools: &ToolRegistry,
        question: bool,
    ) -> Self {
        let limits = limits_of(&routine);
        let tools =
            Arc::new(GrantedTools::new(tools.clone(), &routine.tools).only_reading(question));
        Self {
            routine,
            loaded,
            tools,
            limits,
            question,
        }
    }

    /// Runs the routine once on a fresh instance; `observer`, if any, is told of its tool calls.
    pub(crate) async fn run(
        &self,
        body: &str,
        observer: Option<Arc<dyn Observer>>,
    ) -> Result<String, RoutineError> {
        let tools = match observer {
            Some(observer) => Arc::new(ObservedTools {
                tools: self.tools.clone(),
                observer,
            }) as Arc<dyn ToolHost>,
            None => self.tools.clone(),
        };
        let span = tracing::info_span!(
            "agora.routine.run",
            { conv::OTEL_NAME } = format!("run_routine {}", self.routine.name),
            { conv::ROUTINE } = %self.routine.name,
            { conv::ROUTINE_ID } = self.routine.id,
            { conv::ROUTINE_ORIGIN } = ?self.routine.origin,
            { conv::ERROR_TYPE } = tracing::field::Empty,
            { conv::OTEL_STATUS } = tracing::field::Empty,
        );
        let result = run_within(self.loaded.as_ref(), body, tools, self.limits)
            .instrument(span.clone())
            .await;
        if result.is_err() {
            agora_telemetry::record_error(&span, "routine_error");
        }
        result
    }

    /// Runs the routine once with `tools` instead of the node's (a shadow check's copies),
    /// granted as the routine is.
    pub(crate) async fn run_on(
        &self,
        body: &str,
        tools: &ToolRegistry,
    ) -> Result<String, RoutineError> {
        let tools = Arc::new(
            GrantedTools::new(tools.clone(), &self.routine.tools).only_reading(self.question),
        );
        run_within(self.loaded.as_ref(), body, tools, self.limits).await
    }
}

/// A routine's tools, each call and its result told to an observer.
struct ObservedTools {
    tools: Arc<dyn ToolHost>,
    observer: Arc<dyn Observer>,
}

#[async_trait::async_trait]
impl ToolHost for ObservedTools {
    async fn call_tool(&self, name: &str, arguments: &str) -> Result<String, String> {
        let caller = ToolCaller::Routine;
        self.observer.observe(Step::ToolCall {
            tool: name.to_string(),
            arguments: serde_json::from_str(arguments)
                .unwrap_or_else(|_| Value::String(arguments.to_string())),
            caller,
        });
        let result = self.tools.call_tool(name, arguments).await;
        self.observer.observe(Step::ToolResult {
            tool: name.to_string(),
            result: result
                .as_ref()
                .map(|text| {
                    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
                })
                .map_err(Clone::clone),
            caller,
        });
        result
    }
}

/// Runs `loaded` on `body`, and stops waiting for it at its running-time limit plus
/// [`DEADLINE_GRACE`] plus the time it spent waiting on tools. The engine excludes those waits
/// from the limit too: a routine that asks another agent through a tool waits seconds for the
/// agent's LLM, and is not late for that. (A plain timer here once cut such a routine off at
/// 1.25 s under load, while its examination, on recorded tools, passed.)
pub(crate) async fn run_within(
    loaded: &dyn LoadedRoutine,
    body: &str,
    tools: Arc<dyn ToolHost>,
    limits: RoutineLimits,
) -> Result<String, RoutineError> {
    let timed = Arc::new(TimedTools {
        tools,
        waits: std::sync::Mutex::new(Waits::default()),
    });
    let started = tokio::time::Instant::now();
    let run = loaded.run(body, timed.clone(), limits);
    tokio::pin!(run);
    loop {
        let deadline = started + limits.timeout + DEADLINE_GRACE + timed.waited();
        match tokio::time::timeout_at(deadline, &mut run).await {
            Ok(result) => return result,
            Err(_) if started + limits.timeout + DEADLINE_GRACE + timed.waited() <= deadline => {
                return Err(RoutineError::Timeout(limits.timeout));
            }
            Err(_) => {} // a tool call moved the deadline on
        }
    }
}

/// Time spent in tool calls: finished calls, and the one in progress.
#[derive(Default)]
struct Waits {
    done: Duration,
    since: Option<tokio::time::Instant>,
}

/// A routine's tools, timed.
struct TimedTools {
    tools: Arc<dyn ToolHost>,
    waits: std::sync::Mutex<Waits>,
}

impl TimedTools {
    fn waits(&self) -> std::sync::MutexGuard<'_, Waits> {
        self.waits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn waited(&self) -> Duration {
        let waits = self.waits();
        waits.done + waits.since.map(|s| s.elapsed()).unwrap_or_default()
    }

    fn mark(&self, start: bool) {
        let mut waits = self.waits();
        if start {
            waits.since = Some(tokio::time::Instant::now());
        } else if let Some(since) = waits.since.take() {
            waits.done += since.elapsed();
        }
    }
}

#[async_trait::async_trait]
impl ToolHost for TimedTools {
    async fn call_tool(&self, name: &str, arguments: &str) -> Result<String, String> {
        self.mark(true);
        let result = self.tools.call_tool(name, arguments).await;
        self.mark(false);
        result
    }
}

#[async_trait::async_trait]
impl crate::tools::protocol_call::ProtocolRoutines for RoutineTable {
    async fn run_protocol(&self, protocol: &ProtocolHash, body: &str) -> Result<String, String> {
        let active = self
            .active(protocol)
            .ok_or_else(|| format!("this node has no active routine for protocol {protocol}"))?;
        // The nested routine's own tool calls are not observed: the observer sees the outer
        // routine's `call_protocol` call and its result.
        active
            .run(body, None)
            .await
            .map_err(|error| format!("the routine {} failed: {error}", active.routine.name))
    }
}

/// What one [`RoutineTable::sync`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncReport {
    /// The store's routines version the table now reflects.
    pub version: i64,
    /// False when the version had not moved and nothing was read.
    pub changed: bool,
    /// Active routines in the table.
    pub active: usize,
    /// Routines loaded with the engine by this sync (the others were reused).
    pub loaded: usize,
    /// Active routines that could not be loaded, by name, with the reason. Their protocols are
    /// answered by the LLM until the next change.
    pub failed: Vec<(String, String)>,
}

type Table = HashMap<ProtocolHash, Arc<ActiveRoutine>>;

/// The active routines by protocol.
pub(crate) struct RoutineTable {
    engine: Option<Arc<dyn RoutineEngine>>,
    tools: ToolRegistry,
    /// `routines.read_only_protocols`: the operator's questions.
    read_only: BTreeSet<ProtocolHash>,
    table: RwLock<Arc<Table>>,
    /// The version last loaded; the lock also makes syncs one at a time.
    synced: tokio::sync::Mutex<Option<i64>>,
}

impl RoutineTable {
    pub(crate) fn new(
        engine: Option<Arc<dyn RoutineEngine>>,
        tools: ToolRegistry,
        read_only: BTreeSet<ProtocolHash>,
    ) -> Self {
        Self {
            engine,
            tools,
            read_only,
            table: RwLock::new(Arc::new(Table::new())),
            synced: tokio::sync::Mutex::new(None),
        }
    }

    pub(crate) fn engine(&self) -> Option<&Arc<dyn RoutineEngine>> {
        self.engine.as_ref()
    }

    /// The node's tools, as routines are granted them.
    pub(crate) fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// The operator's questions (`routines.read_only_protocols`).
    pub(crate) fn read_only(&self) -> &BTreeSet<ProtocolHash> {
        &self.read_only
    }

    /// The active routine for a protocol, if one is loaded.
    pub(crate) fn active(&self, protocol_hash: &ProtocolHash) -> Option<Arc<ActiveRoutine>> {
        let table = match self.table.read() {
            Ok(table) => table,
            Err(poisoned) => poisoned.into_inner(),
        };
        table.get(protocol_hash).cloned()
    }

    fn snapshot(&self) -> Arc<Table> {
        match self.table.read() {
            Ok(table) => table.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Brings the table in step with the store when the store's routines version moved.
    pub(crate) async fn sync(&self, store: &Store) -> Result<SyncReport, StoreError> {
        let mut synced = self.synced.lock().await;
        // The version is read before the routines, so a change made in between is seen again
        // at the next sync rather than missed.
        let version = store.routines_version().await?;
        let current = self.snapshot();
        if *synced == Some(version) {
            return Ok(SyncReport {
                version,
                changed: false,
                active: current.len(),
                ..SyncReport::default()
            });
        }
        let mut report = SyncReport {
            version,
            changed: true,
            ..SyncReport::default()
        };
        let by_id: HashMap<i64, &Arc<ActiveRoutine>> = current
            .values()
            .map(|active| (active.routine.id, active))
            .collect();
        let mut next = Table::new();
        for routine in store.routines().await? {
            if routine.status != RoutineStatus::Active {
                continue;
            }
            let (loaded, question) = match by_id.get(&routine.id) {
                Some(active) => (active.loaded.clone(), active.question),
                None => match self.load(store, &routine).await {
                    Ok(loaded) => {
                        report.loaded += 1;
                        let document = store.document(&routine.protocol_hash).await?;
                        let question = answers_a_question(
                            &self.read_only,
                            &routine.protocol_hash,
                            document.as_ref().map(|stored| &stored.document),
                        );
                        (loaded, question)
                    }
                    Err(reason) => {
                        tracing::error!(routine = %routine.name, %reason, "could not load a routine");
                        report.failed.push((routine.name.clone(), reason));
                        continue;
                    }
                },
            };
            next.insert(
                routine.protocol_hash,
                Arc::new(ActiveRoutine::new(routine, loaded, &self.tools, question)),
            );
        }
        report.active = next.len();
        match self.table.write() {
            Ok(mut table) => *table = Arc::new(next),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(next),
        }
        *synced = Some(version);
        tracing::info!(
            version,
            active = report.active,
            loaded = report.loaded,
            "routines synced"
        );
        Ok(report)
    }

    async fn load(
        &self,
        store: &Store,
        routine: &Routine,
    ) -> Result<Arc<dyn LoadedRoutine>, String> {
        let Some(engine) = &self.engine else {
            return Err("this node has no routine engine".into());
        };
        let code = store
            .routine_code(routine.id)
            .await
            .map_err(|error| error.to_string())?
            .ok_or_else(|| "the routine was removed while loading".to_string())?;
        engine
            .load(&code.component)
            .await
            .map_err(|error| error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls `tool` first when set, then sleeps `own` of its own running time.
    struct Sleeper {
        own: Duration,
        tool: bool,
    }

    #[async_trait::async_trait]
    impl LoadedRoutine for Sleeper {
        async fn run(
            &self,
            _body: &str,
            tools: Arc<dyn ToolHost>,
            _limits: RoutineLimits,
        ) -> Result<String, RoutineError> {
            if self.tool {
                tools
                    .call_tool("slow", "{}")
                    .await
                    .map_err(RoutineError::Failed)?;
            }
            tokio::time::sleep(self.own).await;
            Ok("done".into())
        }
    }

    /// A tool that answers after 400 ms, like another agent's LLM.
    struct SlowTool;

    #[async_trait::async_trait]
    impl ToolHost for SlowTool {
        async fn call_tool(&self, _name: &str, _arguments: &str) -> Result<String, String> {
            tokio::time::sleep(Duration::from_millis(400)).await;
            Ok("{}".into())
        }
    }

    const LIMITS: RoutineLimits = RoutineLimits {
        timeout: Duration::from_millis(50),
        memory_bytes: 1 << 20,
    };

    #[tokio::test]
    async fn time_waiting_on_a_tool_does_not_count_against_the_deadline() {
        let waiting = Sleeper {
            own: Duration::ZERO,
            tool: true,
        };
        let result = run_within(&waiting, "", Arc::new(SlowTool), LIMITS).await;
        assert_eq!(result, Ok("done".to_string()));
    }

    #[tokio::test]
    async fn a_routine_running_past_its_deadline_is_stopped() {
        let running = Sleeper {
            own: Duration::from_secs(5),
            tool: true,
        };
        let started = std::time::Instant::now();
        let result = run_within(&running, "", Arc::new(SlowTool), LIMITS).await;
        assert_eq!(result, Err(RoutineError::Timeout(LIMITS.timeout)));
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
