//! The runtime: one wasmtime engine shared by every routine of a node.
//!
//! Why one engine: compiled code, the instance pool and the epoch clock belong to an engine.
//! The pool is sized for `max_concurrent` routines and a semaphore of the same size admits runs,
//! so a burst of requests waits briefly or gets `Busy`, never an allocation failure deep inside
//! wasmtime. The epoch clock is a dedicated thread (not a tokio task) so that it keeps ticking
//! even when every tokio worker is busy; it lives as long as anything that can run a routine
//! (the runtime or a loaded routine) and stops when the last of them is dropped.
//!
//! Memory of finished runs is reset in place where Linux can say which pages were written
//! (PAGEMAP_SCAN, kernel 6.7+), which makes a fresh instance per request much cheaper than
//! decommitting and faulting the pages back in.
//!
//! Slow work (Cranelift compiles, JavaScript builds) runs on the blocking pool, a few at a time,
//! and is awaited by the caller; none of it is on the request path.

use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agora_routine_contract::{LoadedRoutine, RoutineEngine, RoutineError, RoutineSource};
use tokio::sync::{OnceCell, Semaphore};
use tracing::Instrument;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::artifacts::{ArtifactCache, ArtifactStats};
use crate::compile_cache::FunctionCache;
use crate::componentize::{WasmKind, check_component, componentize_core_module, wasm_kind};
use crate::config::RuntimeConfig;
use crate::heap;
use crate::js::JsBuilder;
use crate::program::{ProgramEngine, ProgramRoutine};
use crate::routine::{Loaded, RunState, WasmRoutine, bindings, linker};

/// Per pool slot, how much of a memory (or table) stays resident between runs, reset in place.
/// Bounds the resident memory the pool keeps: slots in use × the pages routines touch, at most
/// this much each.
const KEEP_RESIDENT_BYTES: usize = 16 * 1024 * 1024;

/// The WebAssembly routine runtime (wasmtime), implementing [`RoutineEngine`].
pub struct WasmRuntime {
    shared: Arc<Shared>,
    js_engine: Option<std::path::PathBuf>,
    js_builder: OnceCell<Arc<JsBuilder>>,
    programs: OnceCell<Arc<ProgramEngine>>,
}

/// What the runtime and its loaded routines share.
pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) runs: Semaphore,
    pub(crate) busy_wait: Duration,
    pub(crate) epoch_tick: Duration,
    pub(crate) max_memory_bytes: u64,
    pub(crate) max_tool_wait: Duration,
    pub(crate) fixed_wall_clock: Option<Duration>,
    linker: Linker<RunState>,
    artifacts: ArtifactCache,
    artifact_dir: Option<std::path::PathBuf>,
    /// Admits builds and compiles: each can use a core (and Cranelift's own threads) for a second.
    offload: Arc<Semaphore>,
    _ticker: EpochTicker,
}

impl WasmRuntime {
    /// Creates the engine, its instance pool and its epoch clock.
    pub fn new(config: RuntimeConfig) -> Result<Self, RoutineError> {
        let internal =
            |what: &str, e: wasmtime::Error| RoutineError::Internal(format!("{what}: {e:#}"));
        let max_concurrent = config.max_concurrent.max(1);
        let slots = u32::try_from(max_concurrent).unwrap_or(u32::MAX);
        let max_memory = usize::try_from(config.max_memory_bytes).unwrap_or(usize::MAX);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(slots)
            .total_core_instances(slots.saturating_mul(config.core_instances_per_routine))
            .max_core_instances_per_component(config.core_instances_per_routine)
            .total_memories(slots.saturating_mul(config.memories_per_routine))
            .max_memories_per_component(config.memories_per_routine)
            .total_tables(slots.saturating_mul(config.core_instances_per_routine))
            .max_tables_per_component(config.core_instances_per_routine)
            // A program's tool call allocates its result in the guest with a nested call, on a
            // second stack (program.rs).
            .total_stacks(slots.saturating_mul(2))
            .max_memory_size(max_memory);
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            // Reset a finished run's memory by copying back only the pages it dirtied (found
            // with Linux's PAGEMAP_SCAN) instead of discarding them with madvise: the next run
            // finds its pages resident and takes no page faults (the saving is in RESULTS.md).
            // Without the ioctl, keeping memory resident would mean a memset of the whole range
            // per run, so it stays off.
            pool.pagemap_scan(Enabled::Yes)
                .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
                .table_keep_resident(KEEP_RESIDENT_BYTES);
        }
        let mut wasm_config = Config::new();
        wasm_config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        wasm_config
            .enable_incremental_compilation(FunctionCache::shared())
            .map_err(|e| internal("enabling the compile cache", e))?;
        let engine = Engine::new(&wasm_config).map_err(|e| internal("creating the engine", e))?;
        let linker = linker(&engine).map_err(|e| internal("linking the host", e))?;
        let artifacts = ArtifactCache::new(config.artifact_dir.clone(), &engine);
        let ticker = EpochTicker::start(engine.clone(), config.epoch_tick)?;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Ok(Self {
            shared: Arc::new(Shared {
                engine,
                runs: Semaphore::new(max_concurrent),
                busy_wait: config.busy_wait,
                epoch_tick: config.epoch_tick,
                max_memory_bytes: config.max_memory_bytes,
                max_tool_wait: config.max_tool_wait,
                fixed_wall_clock: config.fixed_wall_clock,
                linker,
                artifacts,
                artifact_dir: config.artifact_dir,
                offload: Arc::new(Semaphore::new(cores)),
                _ticker: ticker,
            }),
            js_engine: config.js_engine,
            js_builder: OnceCell::new(),
            programs: OnceCell::new(),
        })
    }

    /// Counters of the compiled-artifact cache (routine components only).
    pub fn artifact_stats(&self) -> ArtifactStats {
        self.shared.artifacts.stats()
    }

    /// The JavaScript engine's path, which `scripts/install.sh` provides.
    fn js_engine_path(&self) -> Result<std::path::PathBuf, RoutineError> {
        self.js_engine.clone().ok_or_else(|| {
            RoutineError::Internal("no JavaScript engine: run scripts/install.sh".into())
        })
    }

    /// The JavaScript builder, set up on first use (the instrumented engine is compiled, or
    /// loaded from the artifact cache).
    async fn js_builder(&self) -> Result<Arc<JsBuilder>, RoutineError> {
        let builder = self
            .js_builder
            .get_or_try_init(|| async {
                let path = self.js_engine_path()?;
                let artifact_dir = self.shared.artifact_dir.clone();
                self.offload(move || JsBuilder::new(&path, artifact_dir).map(Arc::new))
                    .await
            })
            .await?;
        Ok(Arc::clone(builder))
    }

    /// The engine for programs run without compiling them, set up on first use.
    async fn program_engine(&self) -> Result<Arc<ProgramEngine>, RoutineError> {
        let engine = self
            .programs
            .get_or_try_init(|| async {
                let path = self.js_engine_path()?;
                let shared = Arc::clone(&self.shared);
                self.offload(move || {
                    ProgramEngine::new(&shared.engine, &path, shared.artifact_dir.clone())
                        .map(Arc::new)
                })
                .await
            })
            .await?;
        Ok(Arc::clone(engine))
    }

    /// Runs blocking work on tokio's blocking pool, a few jobs at a time, and waits for it.
    /// The job holds its permit itself, so a caller that gives up waiting does not let more
    /// jobs than cores run.
    async fn offload<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> Result<T, RoutineError> + Send + 'static,
    ) -> Result<T, RoutineError> {
        let permit = (Arc::clone(&self.shared.offload).acquire_owned().await)
            .map_err(|_| RoutineError::Internal("runtime is shutting down".into()))?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            job()
        })
        .await
        .map_err(|e| RoutineError::Internal(format!("build or compile job failed: {e}")))?
    }
}

#[async_trait::async_trait]
impl RoutineEngine for WasmRuntime {
    async fn build(&self, source: &RoutineSource) -> Result<Vec<u8>, RoutineError> {
        let kind = match source {
            RoutineSource::JavaScript(_) => "javascript",
            RoutineSource::Component(_) => "wasm",
        };
        let started = Instant::now();
        let result = self
            .build_source(source)
            .instrument(tracing::debug_span!("agora.routines.build", kind))
            .await;
        tracing::debug!(
            kind,
            elapsed_ms = started.elapsed().as_millis(),
            ok = result.is_ok(),
            "built a routine"
        );
        result
    }

    async fn load(&self, component: &[u8]) -> Result<Arc<dyn LoadedRoutine>, RoutineError> {
        self.load_timed(component, Keep::Artifact).await
    }

    async fn load_program(
        &self,
        source: &RoutineSource,
    ) -> Result<Arc<dyn LoadedRoutine>, RoutineError> {
        match source {
            RoutineSource::JavaScript(text) => {
                // The top level runs as a build runs it, for the build's errors; no snapshot.
                let builder = self.js_builder().await?;
                let checked = text.clone();
                self.offload(move || builder.check(&checked)).await?;
                Ok(Arc::new(Loaded {
                    shared: Arc::clone(&self.shared),
                    invocation: ProgramRoutine {
                        engine: self.program_engine().await?,
                        source: Arc::from(text.as_str()),
                    },
                }))
            }
            RoutineSource::Component(_) => {
                let component = self.build_source(source).await?;
                self.load_timed(&component, Keep::Nothing).await
            }
        }
    }
}

/// Whether a compiled component is kept in the artifact cache.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Kept on disk (when the runtime has an artifact directory), for the next load.
    Artifact,
    /// Compiled for this load alone.
    Nothing,
}

impl WasmRuntime {
    async fn load_timed(
        &self,
        component: &[u8],
        keep: Keep,
    ) -> Result<Arc<dyn LoadedRoutine>, RoutineError> {
        let started = Instant::now();
        let result = self
            .load_component(component, keep)
            .instrument(tracing::debug_span!(
                "agora.routines.load",
                bytes = component.len()
            ))
            .await;
        tracing::debug!(
            elapsed_ms = started.elapsed().as_millis(),
            ok = result.is_ok(),
            "loaded a routine"
        );
        result
    }

    async fn build_source(&self, source: &RoutineSource) -> Result<Vec<u8>, RoutineError> {
        match source {
            RoutineSource::JavaScript(text) => {
                let builder = self.js_builder().await?;
                let text = text.clone();
                self.offload(move || {
                    let built = builder.build(&text);
                    heap::give_back_free_memory();
                    built
                })
                .await
            }
            RoutineSource::Component(bytes) => match wasm_kind(bytes) {
                WasmKind::CoreModule => {
                    let bytes = bytes.clone();
                    self.offload(move || componentize_core_module(&bytes)).await
                }
                WasmKind::Component => {
                    check_component(bytes)?;
                    Ok(bytes.clone())
                }
                WasmKind::Unknown => Err(RoutineError::InvalidComponent(
                    "not WebAssembly (no `\\0asm` header)".into(),
                )),
            },
        }
    }

    async fn load_component(
        &self,
        component: &[u8],
        keep: Keep,
    ) -> Result<Arc<dyn LoadedRoutine>, RoutineError> {
        if wasm_kind(component) != WasmKind::Component {
            return Err(RoutineError::InvalidComponent(
                "not a WebAssembly component (build() turns core modules into components)".into(),
            ));
        }
        let shared = Arc::clone(&self.shared);
        let bytes = component.to_vec();
        let component = self
            .offload(move || {
                let compile = || {
                    let compiled = Component::new(&shared.engine, &bytes)
                        .map_err(|e| RoutineError::InvalidComponent(format!("{e:#}")));
                    heap::give_back_free_memory();
                    compiled
                };
                if keep == Keep::Nothing {
                    return compile();
                }
                shared.artifacts.load_or_compile(
                    "routine",
                    &bytes,
                    |path| deserialize_component(&shared.engine, path),
                    || {
                        let component = compile()?;
                        let serialized = component.serialize().map_err(|e| {
                            RoutineError::Internal(format!("serializing a routine: {e:#}"))
                        })?;
                        Ok((component, serialized))
                    },
                )
            })
            .await?;
        let invalid = |e: wasmtime::Error| RoutineError::InvalidComponent(format!("{e:#}"));
        let pre = self
            .shared
            .linker
            .instantiate_pre(&component)
            .map_err(invalid)?;
        let pre = bindings::RoutinePre::new(pre).map_err(invalid)?;
        Ok(Arc::new(Loaded {
            shared: Arc::clone(&self.shared),
            invocation: WasmRoutine { pre },
        }))
    }
}

/// Maps a cached component artifact.
#[allow(unsafe_code)]
fn deserialize_component(engine: &Engine, path: &std::path::Path) -> wasmtime::Result<Component> {
    // SAFETY: wasmtime requires the file to be its own serialization output for this engine
    // configuration. The file is our own cache entry: written by `Component::serialize` of this
    // engine configuration (the name carries the configuration's fingerprint), renamed into place
    // atomically, and checked against the sha256 recorded next to it just before this call
    // (artifacts.rs). Nothing else writes to the cache directory.
    unsafe { Component::deserialize_file(engine, path) }
}

/// The thread that advances the engine's epoch every tick; stopped and joined on drop.
struct EpochTicker {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    fn start(engine: Engine, tick: Duration) -> Result<Self, RoutineError> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("agora-routines-epoch".into())
            .spawn(move || {
                // Ends when the sender is dropped (Disconnected) or sends.
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(tick) {
                    engine.increment_epoch();
                }
            })
            .map_err(|e| RoutineError::Internal(format!("starting the epoch thread: {e}")))?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
