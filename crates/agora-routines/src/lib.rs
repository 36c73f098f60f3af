//! The WebAssembly routine runtime of agora: wasmtime behind `agora_routine_contract::RoutineEngine`.
//!
//! A routine answers one protocol's requests without the LLM. It is a component of the
//! `agora:routine/routine` world (`routines/wit/routine.wit`): it exports
//! `handle(body) -> result<string, string>` and imports only `call-tool`. This crate
//!
//! - **builds** routines: JavaScript source into a component (QuickJS-NG, pre-initialized with
//!   Wizer, all in-process: `js.rs`), a core module into a component (`componentize.rs`), or
//!   checks a component against the world;
//! - **loads** them: Cranelift compile, cached as `.cwasm` on disk and run from that file's
//!   mapping (`artifacts.rs`), each function's code also kept in memory for the next routine of
//!   the same engine (`compile_cache.rs`), the allocator trimmed after each build and compile
//!   (`heap.rs`);
//! - **runs** them: a fresh instance per request from a pooled allocator, with a deadline, a
//!   memory cap, and no capabilities besides the tools the node grants (`routine.rs`), whose
//!   arguments a JavaScript routine may not leave `undefined` (`arguments.rs`);
//! - **runs programs** (JavaScript run once, or examined before anything keeps it) on the engine
//!   compiled once, evaluating the source per run instead of compiling it (`program.rs`).
//!
//! **Architecture invariant:** the only crate that names wasmtime; no wasmtime type appears in
//! its public API.

mod arguments;
mod artifacts;
mod compile_cache;
mod componentize;
mod config;
mod heap;
mod js;
mod program;
mod routine;
mod runtime;

pub use artifacts::ArtifactStats;
pub use componentize::{WasmKind, componentize_core_module, wasm_kind};
pub use config::RuntimeConfig;
pub use runtime::WasmRuntime;
