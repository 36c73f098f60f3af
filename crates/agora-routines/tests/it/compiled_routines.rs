//! Routines compiled from other languages: a C core module, componentized in-process.

use crate::common;

use agora_routine_contract::{RoutineEngine, RoutineError, RoutineSource};
use agora_routines::{WasmKind, componentize_core_module, wasm_kind};
use common::{limits, parse, runtime, tools, weather_c_core};
use serde_json::json;

#[tokio::test]
async fn the_c_weather_routine_answers_the_protocol() {
    let core = weather_c_core();
    assert_eq!(wasm_kind(&core), WasmKind::CoreModule);
    let runtime = runtime();
    // build() recognises a core module by its header and componentizes it.
    let component = runtime
        .build(&RoutineSource::Component(core))
        .await
        .expect("componentizes");
    assert_eq!(wasm_kind(&component), WasmKind::Component);
    let routine = runtime.load(&component).await.expect("loads");

    for (location, date) in [
        ("London, UK", "2024-09-27"),
        ("Zürich \\\"CH\\\"", "2025-01-03"),
    ] {
        let body = format!(r#"{{"location": "{location}", "date": "{date}"}}"#);
        let reply = routine
            .run(&body, tools(), limits(200, 16))
            .await
            .expect("answers");
        let location: String =
            serde_json::from_str(&format!("\"{location}\"")).expect("JSON string");
        common::assert_weather(&reply, &location, date);
    }
    let reply = routine
        .run(r#"{"date":"2024-09-27"}"#, tools(), limits(200, 16))
        .await;
    assert_eq!(
        parse(&reply.expect("answers")),
        json!({"error": "the request needs string fields location and date"})
    );
}

#[tokio::test]
async fn a_component_is_checked_against_the_world() {
    let runtime = runtime();
    let component = componentize_core_module(&weather_c_core()).expect("componentizes");
    // A component passes through build() unchanged.
    let built = runtime
        .build(&RoutineSource::Component(component.clone()))
        .await
        .expect("valid routine component");
    assert_eq!(built, component);

    // A module that imports something outside the world is refused.
    let core = wat::parse_str(
        r#"(module
             (import "env" "system" (func (param i32)))
             (memory (export "memory") 1)
             (func (export "handle") (param i32 i32) (result i32) i32.const 0)
             (func (export "cabi_post_handle") (param i32))
             (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) i32.const 0))"#,
    )
    .expect("valid text");
    let result = runtime.build(&RoutineSource::Component(core)).await;
    assert!(
        matches!(result, Err(RoutineError::InvalidComponent(_))),
        "{result:?}"
    );

    // A module without `handle` is refused.
    let core = wat::parse_str(r#"(module (memory (export "memory") 1))"#).expect("valid text");
    let result = runtime.build(&RoutineSource::Component(core)).await;
    assert!(
        matches!(result, Err(RoutineError::InvalidComponent(_))),
        "{result:?}"
    );
}
