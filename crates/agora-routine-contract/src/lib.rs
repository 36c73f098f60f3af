//! The routine contract, between the node and a routine runtime.
//!
//! A routine handles one request of one protocol without the LLM: `handle(body)
//! -> result<string, string>`, calling only the tools it was granted. The
//! node (`agora-node`) knows routines only through these traits; the
//! WebAssembly runtime (`agora-routines`, the only crate that names wasmtime)
//! implements them, and the composition root (`agora-server`) plugs it in.
//! Tests can plug in other implementations.
//!
//! This crate is small on purpose: the runtime depends on it rather than on the
//! node, so wasmtime's crate compiles beside the node instead of after it, and an
//! edit to the node does not rebuild the runtime.
//!
//! It also holds the parsing of a routine folder's manifest ([`RoutineManifest`]), which names
//! a routine's source, tools and limits.

pub mod manifest;

use std::sync::Arc;
use std::time::Duration;

pub use manifest::RoutineManifest;

/// What a routine is made from.
#[derive(Debug, Clone, PartialEq)]
pub enum RoutineSource {
    /// A script defining `function handle(body)`; it may call the global
    /// `callTool(name, argsJson)` and throws a string to fail. (A runtime may refuse a call
    /// whose arguments hold an `undefined` array element: `agora-routines` does by default.)
    JavaScript(String),
    /// A WebAssembly component of the `agora:routine/routine` world.
    Component(Vec<u8>),
}

/// Limits for one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutineLimits {
    /// Deadline for one request's running time: wall time, less the time spent waiting on
    /// tool calls (an engine caps those waits separately).
    pub timeout: Duration,
    /// Most linear memory the routine may grow to, in bytes.
    pub memory_bytes: u64,
}

impl Default for RoutineLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(1),
            memory_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Why a routine could not be built, loaded or run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RoutineError {
    /// The source does not build (syntax or evaluation error, with position).
    #[error("routine does not build: {0}")]
    Build(String),
    /// The component is not a valid routine (wrong world, bad bytes).
    #[error("invalid routine component: {0}")]
    InvalidComponent(String),
    /// The routine ran past its deadline.
    #[error("routine timed out after {0:?}")]
    Timeout(Duration),
    /// The routine tried to grow past its memory limit.
    #[error("routine ran out of memory (limit {limit_bytes} bytes)")]
    OutOfMemory {
        /// The limit.
        limit_bytes: u64,
    },
    /// The routine trapped (a crash inside the sandbox).
    #[error("routine trapped: {0}")]
    Trap(String),
    /// The routine returned an error value.
    #[error("routine failed: {0}")]
    Failed(String),
    /// Too many routines are running; the caller may fall back.
    #[error("routine runtime is busy")]
    Busy,
    /// Anything else (cache I/O, engine set-up).
    #[error("routine runtime error: {0}")]
    Internal(String),
}

/// The node's side of `call-tool`: tools a routine may call, already
/// restricted to the ones granted to it.
#[async_trait::async_trait]
pub trait ToolHost: Send + Sync {
    /// Calls a tool with JSON-text arguments; the ok value is JSON text.
    async fn call_tool(&self, name: &str, arguments: &str) -> Result<String, String>;
}

/// A routine loaded into the runtime, ready to handle requests.
#[async_trait::async_trait]
pub trait LoadedRoutine: Send + Sync {
    /// Runs `handle(body)` on a fresh instance under the limits.
    async fn run(
        &self,
        body: &str,
        tools: Arc<dyn ToolHost>,
        limits: RoutineLimits,
    ) -> Result<String, RoutineError>;
}

/// A routine runtime: builds sources into components and loads them.
#[async_trait::async_trait]
pub trait RoutineEngine: Send + Sync {
    /// Builds a source into component bytes (JavaScript is compiled into a
    /// component; a component is validated against the routine world).
    /// Errors carry positions for JavaScript.
    async fn build(&self, source: &RoutineSource) -> Result<Vec<u8>, RoutineError>;

    /// Prepares component bytes for running (compiling them, or loading a
    /// cached precompiled artifact). Slow on a cache miss: never call it on
    /// the request path.
    async fn load(&self, component: &[u8]) -> Result<Arc<dyn LoadedRoutine>, RoutineError>;

    /// Builds and loads a program that runs once or is examined before anything keeps it (a
    /// program run as an action, a programmer's candidate), with the errors of
    /// [`build`](Self::build) and [`load`](Self::load). Nothing compiled is kept for later, and
    /// an engine may run the source without compiling it. A kept routine is built and loaded
    /// with `build` and `load`.
    async fn load_program(
        &self,
        source: &RoutineSource,
    ) -> Result<Arc<dyn LoadedRoutine>, RoutineError> {
        let component = self.build(source).await?;
        self.load(&component).await
    }
}
