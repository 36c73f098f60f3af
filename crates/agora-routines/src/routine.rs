//! Running a loaded routine: one fresh, limited instance per request.
//!
//! Every request gets a new `Store` and a new instance from the routine's `InstancePre` (cheap
//! with the pooling allocator), so nothing a routine does survives into the next request
//! and a routine that trapped, looped or exhausted its memory costs nothing afterwards.
//!
//! Limits, per run:
//! - **time**: the engine's epoch ticks every `epoch_tick`; at each tick the routine yields to
//!   the async executor (so a busy loop cannot hold a tokio worker) and at the first tick past
//!   `RoutineLimits::timeout` of running time it is interrupted. Running time is wall time
//!   minus the time spent waiting on tool calls ([`ToolClock`]): a tool that asks another agent
//!   may take seconds, and is bounded by its own timeouts, so a routine calling it must not be
//!   cut off for waiting. Waits together are capped at the runtime's `max_tool_wait`. An outer
//!   timer, moved on by the waits, stops a run stuck in a tool past that, where no WebAssembly
//!   runs and no epoch check happens.
//! - **memory**: a `ResourceLimiter` refuses linear-memory growth past
//!   `RoutineLimits::memory_bytes` and remembers that it did, so the outcome can be reported as
//!   out-of-memory whether the guest traps or turns the failed allocation into an error.
//! - **capabilities**: the only host function with effects is `call-tool`, backed by the
//!   `ToolHost` the node passes in (already restricted to the routine's granted tools). WASI is
//!   linked with an empty context: no files, environment, arguments, stdio or network.
//! - **the wall clock** is the host's, or fixed (`RuntimeConfig::fixed_wall_clock`) where runs
//!   must replay.
//! - **randomness** is a function of the request ([`request_randomness`]): a routine's
//!   `Math.random` (or C's `getentropy`) draws the same bytes for the same request body, so a
//!   routine's answer depends only on the request and its tool results. A replayed run then
//!   takes the same path as its recording: a code-as-action program that booked a random hour
//!   made the 1000-query recording diverge from its replay at query 245.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agora_routine_contract::{LoadedRoutine, RoutineError, RoutineLimits, ToolHost};
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::runtime::Shared;

/// Host bindings of the routine world, generated from `routines/wit/routine.wit`.
pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "../../routines/wit",
        world: "routine",
        imports: { default: async },
        exports: { default: async },
    });
}

/// What one component run's `Store` holds.
pub(crate) struct RunState {
    wasi: WasiCtx,
    table: ResourceTable,
    run: Run,
}

/// What every run's `Store` holds besides its WASI context: the granted tools and the state of
/// the run's limits.
pub(crate) struct Run {
    tools: Arc<dyn ToolHost>,
    limiter: MemoryLimiter,
    started: Instant,
    timeout: Duration,
    timed_out: bool,
    tool_clock: Arc<ToolClock>,
}

impl Run {
    /// Calls a granted tool for the guest, its wait counted on the run's tool clock. The future
    /// owns what it needs, so the store stays free while it waits.
    pub(crate) fn tool_call(
        &self,
        name: String,
        args: String,
    ) -> impl Future<Output = Result<String, String>> + Send + 'static {
        let tools = Arc::clone(&self.tools);
        let clock = Arc::clone(&self.tool_clock);
        async move {
            let args = crate::arguments::screen(&name, args)?;
            let _waiting = clock.wait();
            tools.call_tool(&name, &args).await
        }
    }
}

/// One kind of routine instance: what its store holds and how a request calls it. Both kinds
/// run under [`run_limited`]'s limits.
pub(crate) trait Invocation: Sync {
    /// The store's data.
    type State: Send + 'static;

    /// The store's data for one run, from the run's WASI context (not yet built) and limits.
    fn state(&self, wasi: WasiCtxBuilder, run: Run) -> Self::State;

    /// The run's part of the store's data.
    fn run_of(state: &mut Self::State) -> &mut Run;

    /// Instantiates and calls `handle(body)`.
    fn invoke<'a>(
        &'a self,
        store: &'a mut Store<Self::State>,
        body: &'a str,
    ) -> impl Future<Output = Result<Result<String, String>, Failure>> + Send + 'a;
}

/// Time one run has spent waiting on tool calls: finished waits, and the one under way.
#[derive(Default)]
pub(crate) struct ToolClock {
    waits: Mutex<(Duration, Option<Instant>)>,
}

impl ToolClock {
    /// Time waited so far, the wait under way included.
    fn waited(&self) -> Duration {
        let Ok(waits) = self.waits.lock() else {
            return Duration::ZERO;
        };
        waits.0 + waits.1.map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// Starts a wait, which lasts until the returned guard is dropped.
    fn wait(self: &Arc<Self>) -> ToolWait {
        if let Ok(mut waits) = self.waits.lock() {
            waits.1 = Some(Instant::now());
        }
        ToolWait(Arc::clone(self))
    }
}

/// A tool call under way (see [`ToolClock::wait`]).
struct ToolWait(Arc<ToolClock>);

impl Drop for ToolWait {
    fn drop(&mut self) {
        if let Ok(mut waits) = self.0.waits.lock()
            && let Some(since) = waits.1.take()
        {
            waits.0 += since.elapsed();
        }
    }
}

impl WasiView for RunState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl bindings::agora::routine::host::Host for RunState {
    async fn call_tool(&mut self, name: String, args: String) -> Result<String, String> {
        self.run.tool_call(name, args).await
    }
}

/// Caps each linear memory and records whether growth was refused.
struct MemoryLimiter {
    limit_bytes: usize,
    refused: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= self.limit_bytes;
        self.refused |= !allowed;
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// A routine compiled for this runtime.
pub(crate) struct WasmRoutine {
    pub(crate) pre: bindings::RoutinePre<RunState>,
}

/// A loaded routine of either kind (a component, or a program), run under the runtime's limits.
pub(crate) struct Loaded<I> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) invocation: I,
}

#[async_trait::async_trait]
impl<I: Invocation + Send + 'static> LoadedRoutine for Loaded<I> {
    async fn run(
        &self,
        body: &str,
        tools: Arc<dyn ToolHost>,
        limits: RoutineLimits,
    ) -> Result<String, RoutineError> {
        run_limited(&self.invocation, &self.shared, body, tools, limits).await
    }
}

/// Linker for every routine of a runtime: the host import, and WASI with an empty context.
pub(crate) fn linker(
    engine: &wasmtime::Engine,
) -> wasmtime::Result<wasmtime::component::Linker<RunState>> {
    let mut linker = wasmtime::component::Linker::new(engine);
    bindings::Routine::add_to_linker::<RunState, wasmtime::component::HasSelf<RunState>>(
        &mut linker,
        |state| state,
    )?;
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    Ok(linker)
}

/// Why a run produced no value from `handle`.
pub(crate) enum Failure {
    /// Creating the instance failed (pool exhausted, memory limit below the initial size).
    Instantiate(wasmtime::Error),
    /// The call trapped or broke the canonical ABI.
    Call(wasmtime::Error),
}

/// The outcome of a run before it is mapped to the contract's errors; `None` is the outer
/// timeout.
type Outcome = Option<Result<Result<String, String>, Failure>>;

impl Invocation for WasmRoutine {
    type State = RunState;

    fn state(&self, mut wasi: WasiCtxBuilder, run: Run) -> RunState {
        RunState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            run,
        }
    }

    fn run_of(state: &mut RunState) -> &mut Run {
        &mut state.run
    }

    async fn invoke(
        &self,
        store: &mut Store<RunState>,
        body: &str,
    ) -> Result<Result<String, String>, Failure> {
        let routine =
            (self.pre.instantiate_async(&mut *store).await).map_err(Failure::Instantiate)?;
        routine
            .call_handle(&mut *store, body)
            .await
            .map_err(Failure::Call)
    }
}

/// Runs one request on a fresh instance of `invocation` under the limits and maps the outcome
/// to the contract.
pub(crate) async fn run_limited<I: Invocation>(
    invocation: &I,
    shared: &Shared,
    body: &str,
    tools: Arc<dyn ToolHost>,
    limits: RoutineLimits,
) -> Result<String, RoutineError> {
    // Declared before the store, so the store (and its pool slot) is dropped first.
    let _permit = match tokio::time::timeout(shared.busy_wait, shared.runs.acquire()).await {
        Ok(Ok(permit)) => permit,
        _ => return Err(RoutineError::Busy),
    };
    let limit_bytes = limits.memory_bytes.min(shared.max_memory_bytes);
    let mut wasi = WasiCtx::builder();
    wasi.allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .secure_random(request_randomness(body))
        .insecure_random(request_randomness(body));
    if let Some(since_epoch) = shared.fixed_wall_clock {
        wasi.wall_clock(FixedWallClock(since_epoch));
    }
    let started = Instant::now();
    let tool_clock = Arc::new(ToolClock::default());
    let run = Run {
        tools,
        limiter: MemoryLimiter {
            limit_bytes: usize::try_from(limit_bytes).unwrap_or(usize::MAX),
            refused: false,
        },
        started,
        timeout: limits.timeout,
        timed_out: false,
        tool_clock: Arc::clone(&tool_clock),
    };
    let mut store = Store::new(&shared.engine, invocation.state(wasi, run));
    store.limiter(|state| &mut I::run_of(state).limiter);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|mut ctx| {
        let run = I::run_of(ctx.data_mut());
        let running = run
            .started
            .elapsed()
            .saturating_sub(run.tool_clock.waited());
        if running >= run.timeout {
            run.timed_out = true;
            Ok(UpdateDeadline::Interrupt)
        } else {
            // tokio's own yield lets the scheduler poll timers and I/O before resuming us;
            // a plain `Yield` can starve them on a worker that runs only routines.
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            ))
        }
    });

    // The epoch check stops running code at the deadline; this timer stops a routine stuck
    // in a tool, where no epoch check happens. Its deadline moves on by the time waited on
    // tools (up to `max_tool_wait`). Two ticks of grace let the epoch check win when it can.
    let grace = 2 * shared.epoch_tick;
    let max_tool_wait = shared.max_tool_wait;
    let outcome: Outcome = {
        let call = invocation.invoke(&mut store, body);
        tokio::pin!(call);
        let mut waited = Duration::ZERO;
        loop {
            let deadline = started + limits.timeout + grace + waited;
            match tokio::time::timeout_at(deadline.into(), &mut call).await {
                Ok(result) => break Some(result),
                Err(_) => {
                    let waited_now = tool_clock.waited().min(max_tool_wait);
                    if waited_now <= waited {
                        break None;
                    }
                    waited = waited_now;
                }
            }
        }
    };
    let run = I::run_of(store.data_mut());
    classify(
        outcome,
        run.timed_out,
        run.limiter.refused,
        limits,
        limit_bytes,
    )
}

/// Maps the outcome of a run to the contract: timeouts and memory refusals first (they explain
/// whatever error the guest produced), then traps, then the routine's own error value.
fn classify(
    outcome: Outcome,
    timed_out: bool,
    memory_refused: bool,
    limits: RoutineLimits,
    limit_bytes: u64,
) -> Result<String, RoutineError> {
    let out_of_memory = RoutineError::OutOfMemory { limit_bytes };
    match outcome {
        None => Err(RoutineError::Timeout(limits.timeout)),
        Some(Ok(Ok(reply))) => Ok(reply),
        Some(Ok(Err(message))) => {
            // QuickJS turns a refused allocation into `InternalError: out of memory`; C routines
            // say so in their own words. Either way the limiter knows.
            if memory_refused || message.starts_with("InternalError: out of memory") {
                Err(out_of_memory)
            } else {
                Err(RoutineError::Failed(message))
            }
        }
        Some(Err(_)) if timed_out => Err(RoutineError::Timeout(limits.timeout)),
        Some(Err(_)) if memory_refused => Err(out_of_memory),
        Some(Err(Failure::Instantiate(error))) => Err(RoutineError::Internal(format!(
            "cannot instantiate the routine: {error:#}"
        ))),
        Some(Err(Failure::Call(error))) => {
            Err(RoutineError::Trap(match error.downcast_ref::<Trap>() {
                Some(trap) => trap_message(*trap, &error),
                // Not a trap code but still the guest's fault, e.g. an invalid string or pointer
                // handed across the canonical ABI.
                None => format!("{error:#}"),
            }))
        }
    }
}

/// The trap, then where it happened when the module kept its function names (the first frames
/// of the wasm backtrace).
fn trap_message(trap: Trap, error: &wasmtime::Error) -> String {
    let frames: Vec<&str> = error
        .downcast_ref::<wasmtime::WasmBacktrace>()
        .map(|backtrace| {
            backtrace
                .frames()
                .iter()
                .filter_map(|frame| frame.func_name())
                .take(4)
                .collect()
        })
        .unwrap_or_default();
    if frames.is_empty() {
        trap.to_string()
    } else {
        format!("{trap} (in {})", frames.join(" <- "))
    }
}

/// A wall clock that always reads the same time (`RuntimeConfig::fixed_wall_clock`).
struct FixedWallClock(Duration);

impl wasmtime_wasi::HostWallClock for FixedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        self.0
    }
}

/// The WASI random source of a run on `body`: the SHA-256 of the body, cycled. Not secret and
/// not meant to be; a routine has no use for secrets, and the same request must draw the same
/// bytes (see the module docs).
fn request_randomness(body: &str) -> wasmtime_wasi::random::Deterministic {
    use sha2::{Digest, Sha256};
    wasmtime_wasi::random::Deterministic::new(Sha256::digest(body.as_bytes()).to_vec())
}
