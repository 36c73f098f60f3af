//! Turning core modules into routine components, and checking components against the world.
//!
//! A routine written in C (or any language whose toolchain emits a plain core module with the
//! canonical-ABI exports) becomes a component here, in-process: the routine world's WIT is
//! embedded into the module and `wit-component` wraps it, with the WASI preview1 *reactor*
//! adapter standing in for the `wasi_snapshot_preview1` calls that wasi-libc makes. No
//! `wasm-tools` binary is involved, so a node can componentize routines it receives.
//!
//! A component handed in as-is is checked against the world here too (without compiling it):
//! it must export `handle: func(body: string) -> result<string, string>` and import nothing but
//! `agora:routine/host` and WASI interfaces, which the runtime serves with an empty context.

use agora_routine_contract::RoutineError;
use wit_parser::{Resolve, Type, TypeDefKind, WorldId, WorldItem, WorldKey};

/// The routine world, `agora:routine/routine@0.1.0`.
pub(crate) const ROUTINE_WIT: &str = include_str!("../../../routines/wit/routine.wit");

/// The interface routines import tools through, without its version.
const HOST_INTERFACE: &str = "agora:routine/host@";

/// What a blob of WebAssembly is, by its 8-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WasmKind {
    /// A core module (`\0asm`, version 1, layer 0).
    CoreModule,
    /// A component (`\0asm`, layer 1).
    Component,
    /// Not WebAssembly, or a header this runtime does not know.
    Unknown,
}

/// Classifies bytes by the WebAssembly header: magic, then a 16-bit version and a 16-bit layer.
pub fn wasm_kind(bytes: &[u8]) -> WasmKind {
    match bytes {
        [0, b'a', b's', b'm', 1, 0, 0, 0, ..] => WasmKind::CoreModule,
        [0, b'a', b's', b'm', _, _, 1, 0, ..] => WasmKind::Component,
        _ => WasmKind::Unknown,
    }
}

/// The parsed routine world.
pub(crate) fn routine_world() -> Result<(Resolve, WorldId), RoutineError> {
    let mut resolve = Resolve::default();
    let package = resolve
        .push_str("routine.wit", ROUTINE_WIT)
        .map_err(|e| RoutineError::Internal(format!("routine WIT does not parse: {e:#}")))?;
    let world = resolve
        .select_world(&[package], Some("routine"))
        .map_err(|e| RoutineError::Internal(format!("routine WIT has no world: {e:#}")))?;
    Ok((resolve, world))
}

/// Wraps a core module implementing the routine world's canonical ABI into a component.
///
/// The module must export `handle`, `cabi_post_handle`, `cabi_realloc` and `memory`, may import
/// `agora:routine/host@0.1.0` `call-tool`, and may import `wasi_snapshot_preview1` functions
/// (served through the reactor adapter). Anything else is refused as
/// [`RoutineError::InvalidComponent`].
pub fn componentize_core_module(core: &[u8]) -> Result<Vec<u8>, RoutineError> {
    if wasm_kind(core) != WasmKind::CoreModule {
        return Err(RoutineError::InvalidComponent(
            "not a WebAssembly core module".into(),
        ));
    }
    let (resolve, world) = routine_world()?;
    let mut module = core.to_vec();
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .map_err(|e| RoutineError::Internal(format!("embedding the routine world: {e:#}")))?;
    wit_component::ComponentEncoder::default()
        .module(&module)
        .map_err(invalid)?
        .validate(true)
        .adapter(
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )
        .map_err(invalid)?
        .encode()
        .map_err(invalid)
}

/// An error of `wit-component` (an `anyhow::Error`) as an invalid-component error, with its
/// causes.
fn invalid(e: impl std::fmt::Display) -> RoutineError {
    RoutineError::InvalidComponent(format!("{e:#}"))
}

/// Checks, without compiling, that a component targets the routine world.
pub(crate) fn check_component(bytes: &[u8]) -> Result<(), RoutineError> {
    if wasm_kind(bytes) != WasmKind::Component {
        return Err(invalid("not a WebAssembly component"));
    }
    let decoded = wit_component::decode(bytes).map_err(invalid)?;
    let wit_parser::decoding::DecodedWasm::Component(resolve, world) = decoded else {
        return Err(invalid("a WIT package, not a component"));
    };
    let world = &resolve.worlds[world];

    for item in world.imports.values() {
        match item {
            WorldItem::Interface { id, .. } => {
                let name = resolve.id_of(*id).unwrap_or_default();
                if !(name.starts_with(HOST_INTERFACE) || name.starts_with("wasi:")) {
                    return Err(invalid(format!(
                        "imports `{name}`; routines may import only agora:routine/host and WASI"
                    )));
                }
            }
            WorldItem::Function(f) => {
                return Err(invalid(format!(
                    "imports the function `{}`; routines may import only agora:routine/host and WASI",
                    f.name
                )));
            }
            WorldItem::Type { .. } => {}
        }
    }

    let handle = world
        .exports
        .iter()
        .find_map(|(key, item)| match (key, item) {
            (WorldKey::Name(name), WorldItem::Function(f)) if name == "handle" => Some(f),
            _ => None,
        });
    let Some(handle) = handle else {
        return Err(invalid("does not export `handle`"));
    };
    let string_result = match handle.result {
        Some(Type::Id(id)) => matches!(
            &resolve.types[id].kind,
            TypeDefKind::Result(r) if r.ok == Some(Type::String) && r.err == Some(Type::String)
        ),
        _ => false,
    };
    let string_param = handle.params.len() == 1 && handle.params[0].ty == Type::String;
    if !(string_param && string_result) {
        return Err(invalid(
            "exports `handle` with the wrong type; expected func(body: string) -> result<string, string>",
        ));
    }
    Ok(())
}
