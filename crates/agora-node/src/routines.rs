//! The routine contract, as the engine sees it: re-exported from `agora-routine-contract`, the
//! small crate that the node and the WebAssembly runtime (`agora-routines`) both depend on.

pub use agora_routine_contract::{
    LoadedRoutine, RoutineEngine, RoutineError, RoutineLimits, RoutineManifest, RoutineSource,
    ToolHost,
};
