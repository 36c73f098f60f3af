//! Programs run without compiling them.
//!
//! A program (JavaScript written for one request, or a candidate routine examined on a few
//! recorded requests) runs a handful of times and is dropped. Loading it as a component would
//! compile the whole QuickJS engine again, for nothing the next program can reuse. Here the
//! engine's core module is compiled once per runtime; each run instantiates it, evaluates the
//! program's source (`wizer-initialize`, as a build does before its snapshot) and calls `handle`
//! through the canonical ABI of `routines/wit/routine.wit`, lowered by hand. The run is the
//! component's run: the same engine and top level, then the same request-time WASI context,
//! limits and tools (`routine.rs`).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agora_routine_contract::RoutineError;
use wasmtime::{Caller, Engine, Extern, InstancePre, Linker, Memory, Store, TypedFunc, bail};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

use crate::artifacts::ArtifactCache;
use crate::js::{INIT_FUNC, TOOL_AT_BUILD_TIME, compile_engine, engine_error};
use crate::routine::{Failure, Invocation, Run};

/// The import module of the routine world's host interface.
const HOST_MODULE: &str = "agora:routine/host@0.1.0";
/// Size of `result<string, string>` in memory: a tag byte, then `(ptr, len)` at offset 4.
const RESULT_BYTES: i32 = 12;

/// The JavaScript engine compiled once for running programs.
pub(crate) struct ProgramEngine {
    pre: InstancePre<ProgramState>,
}

/// What one program run's `Store` holds.
pub(crate) struct ProgramState {
    /// The top level's context (the source on stdin) until `handle` is called, then the
    /// request's.
    wasi: WasiP1Ctx,
    request_wasi: Option<WasiP1Ctx>,
    top_level: bool,
    run: Run,
}

impl ProgramEngine {
    /// Compiles (or loads from the artifact cache) the engine at `engine_path` for `engine` and
    /// links it to WASI and the host's `call-tool`.
    pub(crate) fn new(
        engine: &Engine,
        engine_path: &Path,
        artifact_dir: Option<PathBuf>,
    ) -> Result<Self, RoutineError> {
        let internal = engine_error(engine_path);
        let bytes = std::fs::read(engine_path).map_err(|e| internal("cannot read it", &e))?;
        let cache = ArtifactCache::new(artifact_dir, engine);
        let module = compile_engine(&cache, "js-programs", engine, &bytes, &internal)?;
        let mut linker = Linker::new(engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s: &mut ProgramState| &mut s.wasi)
            .map_err(|e| internal("linking WASI", &e))?;
        linker
            .func_wrap_async(
                HOST_MODULE,
                "call-tool",
                |caller: Caller<'_, ProgramState>, params: (i32, i32, i32, i32, i32)| {
                    Box::new(call_tool(caller, params))
                },
            )
            .map_err(|e| internal("linking call-tool", &e))?;
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|e| internal("linking", &e))?;
        Ok(Self { pre })
    }
}

/// A program loaded for one use: its source and the engine it runs on.
pub(crate) struct ProgramRoutine {
    pub(crate) engine: Arc<ProgramEngine>,
    pub(crate) source: Arc<str>,
}

impl Invocation for ProgramRoutine {
    type State = ProgramState;

    fn state(&self, mut wasi: WasiCtxBuilder, run: Run) -> ProgramState {
        // The top level gets what a build gives it: the source on stdin, the host's clock and
        // randomness. The request's context replaces it before `handle`, so what the top level
        // draws does not shift what the request draws.
        let top_level = WasiCtx::builder()
            .stdin(MemoryInputPipe::new(self.source.as_bytes().to_vec()))
            .build_p1();
        ProgramState {
            wasi: top_level,
            request_wasi: Some(wasi.build_p1()),
            top_level: true,
            run,
        }
    }

    fn run_of(state: &mut ProgramState) -> &mut Run {
        &mut state.run
    }

    async fn invoke(
        &self,
        store: &mut Store<ProgramState>,
        body: &str,
    ) -> Result<Result<String, String>, Failure> {
        let instance =
            (self.engine.pre.instantiate_async(&mut *store).await).map_err(Failure::Instantiate)?;
        let exports = Exports::of(&instance, &mut *store).map_err(Failure::Instantiate)?;
        exports
            .init
            .call_async(&mut *store, ())
            .await
            .map_err(Failure::Call)?;
        let state = store.data_mut();
        state.top_level = false;
        if let Some(wasi) = state.request_wasi.take() {
            state.wasi = wasi;
        }
        let len = i32::try_from(body.len()).map_err(|e| Failure::Call(e.into()))?;
        let ptr = (exports
            .realloc
            .call_async(&mut *store, (0, 0, 1, len))
            .await)
            .map_err(Failure::Call)?;
        write(exports.memory.data_mut(&mut *store), ptr, body.as_bytes()).map_err(Failure::Call)?;
        let retptr =
            (exports.handle.call_async(&mut *store, (ptr, len)).await).map_err(Failure::Call)?;
        let reply = lift_result(exports.memory.data(&*store), retptr).map_err(Failure::Call)?;
        (exports.post.call_async(&mut *store, retptr).await).map_err(Failure::Call)?;
        Ok(reply)
    }
}

/// The engine's exports a run calls.
struct Exports {
    init: TypedFunc<(), ()>,
    realloc: TypedFunc<(i32, i32, i32, i32), i32>,
    handle: TypedFunc<(i32, i32), i32>,
    post: TypedFunc<i32, ()>,
    memory: Memory,
}

impl Exports {
    fn of(
        instance: &wasmtime::Instance,
        store: &mut Store<ProgramState>,
    ) -> wasmtime::Result<Self> {
        let Some(memory) = instance.get_memory(&mut *store, "memory") else {
            bail!("the JavaScript engine exports no memory");
        };
        Ok(Self {
            init: instance.get_typed_func(&mut *store, INIT_FUNC)?,
            realloc: instance.get_typed_func(&mut *store, "cabi_realloc")?,
            handle: instance.get_typed_func(&mut *store, "handle")?,
            post: instance.get_typed_func(&mut *store, "cabi_post_handle")?,
            memory,
        })
    }
}

/// The host's `call-tool(name, args) -> result<string, string>`, lowered: two strings in, the
/// result written at `retptr` with its string allocated by the guest's `cabi_realloc`.
async fn call_tool(
    mut caller: Caller<'_, ProgramState>,
    (name_ptr, name_len, args_ptr, args_len, retptr): (i32, i32, i32, i32, i32),
) -> wasmtime::Result<()> {
    if caller.data().top_level {
        bail!("{TOOL_AT_BUILD_TIME}");
    }
    let Some(memory) = caller.get_export("memory").and_then(Extern::into_memory) else {
        bail!("the JavaScript engine exports no memory");
    };
    let name = read_string(memory.data(&caller), name_ptr, name_len)?;
    let args = read_string(memory.data(&caller), args_ptr, args_len)?;
    let call = caller.data().run.tool_call(name, args);
    let (tag, text) = match call.await {
        Ok(reply) => (0u8, reply),
        Err(error) => (1u8, error),
    };
    let Some(realloc) = caller
        .get_export("cabi_realloc")
        .and_then(Extern::into_func)
    else {
        bail!("the JavaScript engine exports no cabi_realloc");
    };
    let realloc = realloc.typed::<(i32, i32, i32, i32), i32>(&caller)?;
    let len = i32::try_from(text.len())?;
    let ptr = realloc.call_async(&mut caller, (0, 0, 1, len)).await?;
    let data = memory.data_mut(&mut caller);
    write(data, ptr, text.as_bytes())?;
    let mut record = [0u8; RESULT_BYTES as usize];
    record[0] = tag;
    record[4..8].copy_from_slice(&ptr.to_le_bytes());
    record[8..12].copy_from_slice(&len.to_le_bytes());
    write(data, retptr, &record)
}

/// The range of guest memory at `ptr` (an unsigned 32-bit address) of `len` bytes.
fn span(ptr: i32, len: i32) -> Option<Range<usize>> {
    let start = usize::try_from(ptr as u32).ok()?;
    let len = usize::try_from(len as u32).ok()?;
    Some(start..start.checked_add(len)?)
}

fn write(memory: &mut [u8], ptr: i32, bytes: &[u8]) -> wasmtime::Result<()> {
    let len = i32::try_from(bytes.len())?;
    match span(ptr, len).and_then(|range| memory.get_mut(range)) {
        Some(target) => {
            target.copy_from_slice(bytes);
            Ok(())
        }
        None => bail!("pointer out of bounds"),
    }
}

fn read_string(memory: &[u8], ptr: i32, len: i32) -> wasmtime::Result<String> {
    let Some(bytes) = span(ptr, len).and_then(|range| memory.get(range)) else {
        bail!("string pointer/length out of bounds of memory");
    };
    Ok(std::str::from_utf8(bytes)?.to_owned())
}

/// Reads `handle`'s `result<string, string>` at `retptr`.
fn lift_result(memory: &[u8], retptr: i32) -> wasmtime::Result<Result<String, String>> {
    let Some(record) = span(retptr, RESULT_BYTES).and_then(|range| memory.get(range)) else {
        bail!("pointer out of bounds of memory");
    };
    let word = |at: usize| {
        i32::from_le_bytes([record[at], record[at + 1], record[at + 2], record[at + 3]])
    };
    let text = read_string(memory, word(4), word(8))?;
    match record[0] {
        0 => Ok(Ok(text)),
        1 => Ok(Err(text)),
        _ => bail!("invalid variant discriminant for `result`"),
    }
}
