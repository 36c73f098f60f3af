//! How the routine runtime is sized and where it keeps its files.
//!
//! Everything is passed in by the composition root (the server reads files and environment; this
//! crate reads neither). The defaults suit one node on a small machine.

use std::path::PathBuf;
use std::time::Duration;

/// Configuration of a [`WasmRuntime`](crate::WasmRuntime).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Routine runs at once. Each run holds one slot of wasmtime's instance pool, so this also
    /// sizes the pool. A run that finds no slot within `busy_wait` fails with `Busy`.
    /// Default: twice the number of cores, at least 4.
    pub max_concurrent: usize,
    /// Core instances one routine component may hold (QuickJS and C routines have 4: the
    /// routine, the WASI adapter and two shims). Pool size: `max_concurrent` × this.
    pub core_instances_per_routine: u32,
    /// Linear memories one routine component may hold. Pool size: `max_concurrent` × this.
    pub memories_per_routine: u32,
    /// The most linear memory any routine may grow to, in bytes. A run's
    /// `RoutineLimits::memory_bytes` is capped at this; it sizes the pool's memory slots.
    pub max_memory_bytes: u64,
    /// How long a run waits for a free slot before failing with `Busy`.
    pub busy_wait: Duration,
    /// Where compiled routines (`.cwasm`) are cached, e.g. `~/.cache/agora/artifacts` or a
    /// node's data directory. `None`: compile on every load.
    pub artifact_dir: Option<PathBuf>,
    /// The JavaScript engine, `engine.core.wasm` (built by `scripts/install.sh`). `None`: only
    /// components and core modules can be built.
    pub js_engine: Option<PathBuf>,
    /// Interval of the epoch clock that interrupts running routines: a routine yields to the
    /// async executor every tick and is stopped at the first tick past its deadline, so this is
    /// also the precision of timeouts.
    pub epoch_tick: Duration,
    /// The most time one run may spend waiting on its tool calls, all together. A routine's
    /// own `RoutineLimits::timeout` counts only the time it runs, not these waits: a tool that
    /// asks another agent may take seconds, and bounds itself (HTTP and query timeouts); this is
    /// the backstop.
    pub max_tool_wait: Duration,
    /// The wall clock routines see (`Date` in JavaScript, `clock_gettime` in C), as time since
    /// the Unix epoch. `None`: the host's clock. A fixed clock makes a routine's answer a
    /// function of its request and tool results alone, which replayed runs (the network demo)
    /// need: a routine that read the hour from `Date` took another branch in a replay than in
    /// its recording.
    pub fixed_wall_clock: Option<Duration>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self {
            max_concurrent: (2 * cores).max(4),
            core_instances_per_routine: 8,
            memories_per_routine: 2,
            max_memory_bytes: 256 * 1024 * 1024,
            busy_wait: Duration::from_millis(100),
            artifact_dir: None,
            js_engine: None,
            epoch_tick: Duration::from_millis(10),
            max_tool_wait: Duration::from_secs(120),
            fixed_wall_clock: None,
        }
    }
}
