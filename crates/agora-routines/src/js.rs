//! Building JavaScript routines into components, in-process.
//!
//! The JavaScript engine (`engine.core.wasm`: QuickJS-NG plus `routines/engine/engine.c`) is the
//! same for every routine. A routine is the engine *after* it has evaluated the routine's source:
//! Wizer runs the engine's `wizer-initialize` export with the source on WASI stdin, then
//! snapshots the memory and globals into a new core module. That module is componentized like
//! any other routine (`componentize.rs`). A request then starts from the evaluated state, which
//! is why a JavaScript request costs tens of microseconds rather than a QuickJS start-up.
//!
//! Top-level code of a routine runs here, at build time, so it runs under limits of its own:
//! a fuel budget (an infinite loop fails the build), a 256 MiB memory cap, and a `call-tool`
//! that fails with a clear message (tools are for requests, not for start-up). Errors are the
//! engine's text with `routine.js:LINE:COL` positions.
//!
//! The instrumented engine does not depend on the routine, so it is compiled once per process
//! (or loaded from the artifact cache) and reused: a build then only evaluates and snapshots.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use agora_routine_contract::RoutineError;
use sha2::{Digest, Sha256};
use wasmtime::{Caller, Config, Engine, Instance, Linker, Module, Store, StoreLimits, Val};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wizer::{InstanceState, ModuleContext, SnapshotVal, ValType, Wizer};

use crate::artifacts::ArtifactCache;
use crate::componentize::componentize_core_module;

/// The engine's pre-initialization export.
pub(crate) const INIT_FUNC: &str = "wizer-initialize";
/// Fuel for a routine's top level: about a second of interpretation.
const BUILD_FUEL: u64 = 2_000_000_000;
/// Memory for a routine's top level.
const BUILD_MEMORY_BYTES: usize = 256 * 1024 * 1024;
/// Most error text kept from the engine's stderr.
const STDERR_BYTES: usize = 64 * 1024;
pub(crate) const TOOL_AT_BUILD_TIME: &str = "callTool() may not be called at the top level of a routine: top-level code runs once, \
     at build time; call tools inside handle(body)";

/// Builds JavaScript routines with one instrumented engine.
pub(crate) struct JsBuilder {
    wizer: Wizer,
    context: ModuleContext<'static>,
    engine: Engine,
    module: Module,
    linker: Linker<BuildState>,
}

struct BuildState {
    wasi: WasiP1Ctx,
    limits: StoreLimits,
    called_tool: bool,
}

impl JsBuilder {
    /// Reads and instruments the engine and compiles (or loads) the instrumented module.
    pub(crate) fn new(
        engine_path: &Path,
        artifact_dir: Option<PathBuf>,
    ) -> Result<Self, RoutineError> {
        let internal = engine_error(engine_path);
        let bytes = std::fs::read(engine_path).map_err(|e| internal("cannot read it", &e))?;
        let mut wizer = Wizer::new();
        wizer.init_func(INIT_FUNC);
        let (context, instrumented) = wizer
            .instrument(leak_engine(bytes))
            .map_err(|e| internal("cannot instrument it", &e))?;

        let mut config = Config::new();
        config.consume_fuel(true);
        let engine = Engine::new(&config).map_err(|e| internal("build engine", &e))?;
        let cache = ArtifactCache::new(artifact_dir, &engine);
        let module = compile_engine(&cache, "js-builder", &engine, &instrumented, &internal)?;
        if module.get_export(INIT_FUNC).is_none() {
            return Err(internal(
                "not an agora engine",
                &format!("no `{INIT_FUNC}` export"),
            ));
        }

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |s: &mut BuildState| &mut s.wasi)
            .map_err(|e| internal("linking WASI", &e))?;
        linker
            .func_wrap(
                "agora:routine/host@0.1.0",
                "call-tool",
                |mut caller: Caller<'_, BuildState>,
                 _: i32,
                 _: i32,
                 _: i32,
                 _: i32,
                 _: i32|
                 -> wasmtime::Result<()> {
                    caller.data_mut().called_tool = true;
                    wasmtime::bail!("{TOOL_AT_BUILD_TIME}")
                },
            )
            .map_err(|e| internal("linking call-tool", &e))?;
        Ok(Self {
            wizer,
            context,
            engine,
            module,
            linker,
        })
    }

    /// Builds one routine: evaluate, snapshot, componentize.
    pub(crate) fn build(&self, source: &str) -> Result<Vec<u8>, RoutineError> {
        let (mut store, instance) = self.evaluate(source)?;
        let internal = |what: &str, e: wasmtime::Error| {
            RoutineError::Internal(format!("JavaScript build: {what}: {e:#}"))
        };
        let mut state = Snapshotting {
            store: &mut store,
            instance,
        };
        let core = block_on(self.wizer.snapshot(&self.context, &mut state))
            .map_err(|e| internal("snapshot", e))?;
        componentize_core_module(&core).map_err(|e| match e {
            // The engine and the world are ours: failing here is our bug, not the routine's.
            RoutineError::InvalidComponent(text) => {
                RoutineError::Internal(format!("componentizing a JavaScript routine: {text}"))
            }
            other => other,
        })
    }

    /// Checks that `source` builds: its top level runs as in [`build`](Self::build), with the
    /// same errors, and nothing is snapshot.
    pub(crate) fn check(&self, source: &str) -> Result<(), RoutineError> {
        self.evaluate(source).map(|_| ())
    }

    /// Runs the engine's initialization on `source` under the build's limits.
    fn evaluate(&self, source: &str) -> Result<(Store<BuildState>, Instance), RoutineError> {
        let stderr = MemoryOutputPipe::new(STDERR_BYTES);
        let wasi = wasmtime_wasi::WasiCtx::builder()
            .stdin(MemoryInputPipe::new(source.as_bytes().to_vec()))
            .stderr(stderr.clone())
            .build_p1();
        let limits = wasmtime::StoreLimitsBuilder::new()
            .memory_size(BUILD_MEMORY_BYTES)
            .build();
        let mut store = Store::new(
            &self.engine,
            BuildState {
                wasi,
                limits,
                called_tool: false,
            },
        );
        store.limiter(|s| &mut s.limits);
        let internal = |what: &str, e: wasmtime::Error| {
            RoutineError::Internal(format!("JavaScript build: {what}: {e:#}"))
        };
        store
            .set_fuel(BUILD_FUEL)
            .map_err(|e| internal("fuel", e))?;
        let instance = self
            .linker
            .instantiate(&mut store, &self.module)
            .map_err(|e| internal("instantiating the engine", e))?;
        let init = instance
            .get_typed_func::<(), ()>(&mut store, INIT_FUNC)
            .map_err(|e| internal("engine export", e))?;

        if let Err(trap) = init.call(&mut store, ()) {
            let text = String::from_utf8_lossy(&stderr.contents())
                .trim()
                .to_string();
            let message = if store.data().called_tool {
                TOOL_AT_BUILD_TIME.to_string()
            } else if !text.is_empty() {
                text
            } else if store.get_fuel().is_ok_and(|fuel| fuel == 0) {
                "top-level code ran too long (an infinite loop?); it runs once, at build time"
                    .to_string()
            } else {
                format!("top-level code trapped: {trap:#}")
            };
            return Err(RoutineError::Build(message));
        }
        Ok((store, instance))
    }
}

/// Wizer's view of the initialized instance.
struct Snapshotting<'a> {
    store: &'a mut Store<BuildState>,
    instance: Instance,
}

impl InstanceState for Snapshotting<'_> {
    fn global_get(&mut self, name: &str, _: ValType) -> impl Future<Output = SnapshotVal> + Send {
        let global = self
            .instance
            .get_global(&mut *self.store, name)
            .expect("wizer asks only for the globals its instrumentation exported");
        let value = match global.get(&mut *self.store) {
            Val::I32(x) => SnapshotVal::I32(x),
            Val::I64(x) => SnapshotVal::I64(x),
            Val::F32(x) => SnapshotVal::F32(x),
            Val::F64(x) => SnapshotVal::F64(x),
            Val::V128(x) => SnapshotVal::V128(x.as_u128()),
            _ => panic!("wizer rejects modules with reference-typed mutable globals"),
        };
        std::future::ready(value)
    }

    fn memory_contents(
        &mut self,
        name: &str,
        contents: impl FnOnce(&[u8]) + Send,
    ) -> impl Future<Output = ()> + Send {
        let memory = self
            .instance
            .get_memory(&mut *self.store, name)
            .expect("wizer asks only for the memories its instrumentation exported");
        contents(memory.data(&*self.store));
        std::future::ready(())
    }
}

/// Drives a future that never waits (Wizer's snapshot is `async` only for runtimes that need
/// it; our `InstanceState` answers immediately).
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
}

/// Engine bytes that live for the rest of the process. Wizer's `ModuleContext` borrows the
/// engine it instrumented, and a builder lives as long as its runtime; leaking once per distinct
/// engine (normally one per process) keeps that simple without a self-referential struct.
fn leak_engine(bytes: Vec<u8>) -> &'static [u8] {
    static LEAKED: Mutex<Option<HashMap<[u8; 32], &'static [u8]>>> = Mutex::new(None);
    let digest: [u8; 32] = Sha256::digest(&bytes).into();
    let mut leaked = LEAKED.lock().unwrap_or_else(PoisonError::into_inner);
    leaked
        .get_or_insert_with(HashMap::new)
        .entry(digest)
        .or_insert_with(|| Box::leak(bytes.into_boxed_slice()))
}

/// What went wrong with the JavaScript engine at `path`, as an internal error.
pub(crate) fn engine_error(path: &Path) -> impl Fn(&str, &dyn std::fmt::Display) -> RoutineError {
    move |what, e| {
        RoutineError::Internal(format!(
            "JavaScript engine {}: {what}: {e:#}",
            path.display()
        ))
    }
}

/// Compiles the engine's core module `wasm` for `engine`, or loads it from `cache` as `kind`.
pub(crate) fn compile_engine(
    cache: &ArtifactCache,
    kind: &str,
    engine: &Engine,
    wasm: &[u8],
    internal: &dyn Fn(&str, &dyn std::fmt::Display) -> RoutineError,
) -> Result<Module, RoutineError> {
    cache.load_or_compile(
        kind,
        wasm,
        |path| deserialize_module(engine, path),
        || {
            let module = Module::new(engine, wasm).map_err(|e| internal("does not compile", &e))?;
            let serialized = module.serialize().map_err(|e| internal("serialize", &e))?;
            Ok::<_, RoutineError>((module, serialized))
        },
    )
}

/// Maps a cached instrumented engine.
#[allow(unsafe_code)]
fn deserialize_module(engine: &Engine, path: &Path) -> wasmtime::Result<Module> {
    // SAFETY: as for routine artifacts (runtime.rs): the file is this cache's own output of
    // `Module::serialize` for this engine configuration, written atomically and checked against
    // its recorded sha256 just before this call.
    unsafe { Module::deserialize_file(engine, path) }
}
