//! Hostile routines are contained, and the same runtime serves the next request normally.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agora_routine_contract::{LoadedRoutine, RoutineEngine, RoutineError, RoutineSource};
use agora_routines::{RuntimeConfig, WasmRuntime, componentize_core_module};
use common::{limits, load_js, parse, runtime, tools};
use serde_json::json;

const HOSTILE: &str = include_str!("../data/hostile.js");

type RunResult = Result<String, RoutineError>;

async fn run(routine: &Arc<dyn LoadedRoutine>, mode: &str) -> RunResult {
    routine
        .run(
            &json!({ "mode": mode }).to_string(),
            tools(),
            limits(200, 64),
        )
        .await
}

/// A fresh runtime with the hostile routine loaded (the runtime is kept alive beside it).
async fn hostile() -> (WasmRuntime, Arc<dyn LoadedRoutine>) {
    hostile_in(runtime()).await
}

/// [`hostile`] in a runtime of the caller's configuration.
async fn hostile_in(runtime: WasmRuntime) -> (WasmRuntime, Arc<dyn LoadedRoutine>) {
    let routine = load_js(&runtime, HOSTILE).await;
    (runtime, routine)
}

/// Starts the hostile routine's endless loop in the background.
fn spawn_loop(routine: &Arc<dyn LoadedRoutine>) -> tokio::task::JoinHandle<RunResult> {
    let routine = Arc::clone(routine);
    tokio::spawn(async move { run(&routine, "loop").await })
}

async fn still_serves(routine: &Arc<dyn LoadedRoutine>) {
    let reply = run(routine, "normal")
        .await
        .expect("a normal request after a hostile one");
    assert_eq!(parse(&reply), json!({"ok": true, "sum": 42}));
}

#[tokio::test]
async fn an_infinite_loop_times_out_at_the_deadline() {
    let (_runtime, routine) = hostile().await;
    let started = Instant::now();
    let result = run(&routine, "loop").await;
    let elapsed = started.elapsed();
    assert_eq!(
        result,
        Err(RoutineError::Timeout(Duration::from_millis(200)))
    );
    assert!(
        elapsed >= Duration::from_millis(200),
        "stopped early: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(600),
        "stopped late: {elapsed:?}"
    );
    still_serves(&routine).await;
}

/// Runs `request` with a 200 ms limit; the outcome and the wall time it took.
async fn timed(
    routine: &Arc<dyn LoadedRoutine>,
    request: serde_json::Value,
) -> (Result<String, RoutineError>, Duration) {
    let started = Instant::now();
    let result = routine
        .run(&request.to_string(), tools(), limits(200, 64))
        .await;
    (result, started.elapsed())
}

/// A timeout at the 200 ms limit, after between 0.5 and 2 s of wall time.
fn assert_timed_out_late(result: Result<String, RoutineError>, elapsed: Duration) {
    assert_eq!(
        result,
        Err(RoutineError::Timeout(Duration::from_millis(200)))
    );
    assert!(
        elapsed >= Duration::from_millis(500) && elapsed < Duration::from_millis(2000),
        "{elapsed:?}"
    );
}

#[tokio::test]
async fn waiting_on_a_slow_tool_does_not_count_as_running_time() {
    let (_runtime, routine) = hostile().await;
    // Two waits of 300 ms each, longer together than the 200 ms the routine may run.
    let (result, elapsed) = timed(&routine, json!({"mode": "slow-tools", "ms": 300})).await;
    assert_eq!(
        result.map(|reply| parse(&reply)),
        Ok(json!(["done", "done"]))
    );
    assert!(elapsed >= Duration::from_millis(600), "{elapsed:?}");
    still_serves(&routine).await;
}

#[tokio::test]
async fn a_tool_that_keeps_the_routine_waiting_is_cut_off_at_the_wait_cap() {
    let runtime = WasmRuntime::new(RuntimeConfig {
        max_tool_wait: Duration::from_millis(300),
        ..common::config()
    })
    .unwrap();
    let routine = load_js(&runtime, HOSTILE).await;
    let (result, elapsed) = timed(&routine, json!({"mode": "slow-tool", "ms": 5000})).await;
    assert_timed_out_late(result, elapsed);
    still_serves(&routine).await;
}

#[tokio::test]
async fn running_time_between_tool_waits_still_counts() {
    let (_runtime, routine) = hostile().await;
    // A wait, then a busy loop: the loop alone must hit the 200 ms deadline.
    let request = json!({"mode": "slow-tool-then-loop", "ms": 300});
    let (result, elapsed) = timed(&routine, request).await;
    assert_timed_out_late(result, elapsed);
    still_serves(&routine).await;
}

#[tokio::test]
async fn a_memory_bomb_runs_out_of_memory() {
    let (_runtime, routine) = hostile().await;
    for mode in ["alloc", "alloc-string", "alloc-objects"] {
        let result = routine
            .run(
                &json!({ "mode": mode }).to_string(),
                tools(),
                limits(2000, 32),
            )
            .await;
        assert_eq!(
            result,
            Err(RoutineError::OutOfMemory {
                limit_bytes: 32 * 1024 * 1024
            }),
            "{mode}"
        );
        still_serves(&routine).await;
    }
}

#[tokio::test]
async fn deep_recursion_is_contained() {
    let (_runtime, routine) = hostile().await;
    // QuickJS has no depth check on WASI: the native stack limit (or the C stack's end) traps.
    match run(&routine, "recurse").await {
        Err(RoutineError::Failed(text)) => assert!(text.contains("RangeError"), "{text}"),
        Err(RoutineError::Trap(text)) => {
            assert!(
                text.contains("stack") || text.contains("out of bounds"),
                "{text}"
            )
        }
        other => panic!("expected a contained failure, got {other:?}"),
    }
    still_serves(&routine).await;
}

#[tokio::test]
async fn a_trap_is_reported_as_a_trap() {
    // A minimal routine in the text format whose handle executes `unreachable`.
    let core = wat::parse_str(
        r#"(module
             (memory (export "memory") 1)
             (func (export "handle") (param i32 i32) (result i32) unreachable)
             (func (export "cabi_post_handle") (param i32))
             (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) i32.const 1024))"#,
    )
    .expect("valid text");
    let runtime = runtime();
    let component = componentize_core_module(&core).expect("componentizes");
    let routine = runtime.load(&component).await.expect("loads");
    match routine.run("{}", tools(), limits(200, 64)).await {
        Err(RoutineError::Trap(text)) => assert!(text.contains("unreachable"), "{text}"),
        other => panic!("expected a trap, got {other:?}"),
    }
    let js = load_js(&runtime, HOSTILE).await;
    still_serves(&js).await;
}

#[tokio::test]
async fn files_environment_and_network_are_out_of_reach() {
    let (_runtime, routine) = hostile().await;
    let probe = parse(&run(&routine, "probe").await.expect("probe answers"));
    for name in [
        "std",
        "os",
        "fetch",
        "require",
        "process",
        "XMLHttpRequest",
        "WebSocket",
    ] {
        assert_eq!(probe[name], "undefined", "{name} is reachable: {probe}");
    }
    for mode in ["read-file", "env", "fetch"] {
        match run(&routine, mode).await {
            Err(RoutineError::Failed(text)) => {
                assert!(text.starts_with("ReferenceError"), "{mode}: {text}")
            }
            other => panic!("{mode}: expected a failure, got {other:?}"),
        }
    }
    still_serves(&routine).await;
}

#[tokio::test]
async fn a_tool_that_was_not_granted_is_refused() {
    let (_runtime, routine) = hostile().await;
    match run(&routine, "tool-refused").await {
        Err(RoutineError::Failed(text)) => {
            assert!(
                text.starts_with("Error: tool `shell` is not granted"),
                "{text}"
            )
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    let caught = parse(
        &run(&routine, "tool-caught")
            .await
            .expect("routine handles the refusal"),
    );
    assert_eq!(
        caught,
        json!({"caught": "Error: tool `shell` is not granted to this routine"})
    );
    still_serves(&routine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_does_not_stall_concurrent_requests() {
    let config = RuntimeConfig {
        max_concurrent: 40,
        ..common::config()
    };
    let (_runtime, routine) = hostile_in(WasmRuntime::new(config).expect("runtime starts")).await;
    let looping = spawn_loop(&routine);
    let started = Instant::now();
    let normal: Vec<_> = (0..32)
        .map(|_| {
            let routine = Arc::clone(&routine);
            tokio::spawn(async move { run(&routine, "normal").await })
        })
        .collect();
    for request in normal {
        let reply = request
            .await
            .expect("task")
            .expect("a normal request succeeds");
        assert_eq!(parse(&reply), json!({"ok": true, "sum": 42}));
    }
    let normal_done = started.elapsed();
    let looped = looping.await.expect("task");
    assert_eq!(
        looped,
        Err(RoutineError::Timeout(Duration::from_millis(200)))
    );
    assert!(
        normal_done < Duration::from_millis(200),
        "normal requests waited for the loop: {normal_done:?}"
    );
}

#[tokio::test]
async fn a_full_runtime_answers_busy() {
    let config = RuntimeConfig {
        max_concurrent: 1,
        busy_wait: Duration::from_millis(20),
        ..common::config()
    };
    let (_runtime, routine) = hostile_in(WasmRuntime::new(config).expect("runtime starts")).await;
    let looping = spawn_loop(&routine);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(run(&routine, "normal").await, Err(RoutineError::Busy));
    assert!(matches!(
        looping.await.expect("task"),
        Err(RoutineError::Timeout(_))
    ));
    still_serves(&routine).await;
}

#[tokio::test]
async fn bytes_that_are_not_webassembly_are_refused() {
    let runtime = runtime();
    let result = runtime
        .build(&RoutineSource::Component(b"#!/bin/sh\nrm -rf /".to_vec()))
        .await;
    assert!(
        matches!(result, Err(RoutineError::InvalidComponent(_))),
        "{result:?}"
    );
    let result = runtime.load(b"\0asm\x01\0\0\0").await.err();
    assert!(
        matches!(result, Some(RoutineError::InvalidComponent(_))),
        "{result:?}"
    );
}

#[tokio::test]
async fn nothing_survives_from_one_request_to_the_next() {
    // Memory of finished runs is reset in place (not discarded), so check that every request,
    // including one after a memory bomb, starts from the built state.
    let runtime = WasmRuntime::new(RuntimeConfig {
        max_concurrent: 1, // one pool slot: every run reuses the same memory
        ..common::config()
    })
    .expect("runtime starts");
    let routine = load_js(
        &runtime,
        "let count = 0;\nconst seen = [];\n\
         function handle(body) {\n  count += 1;\n  seen.push(body);\n  globalThis.marker = body;\n  \
         if (body === 'bomb') { const a = []; for (;;) a.push(new Uint8Array(1 << 20)); }\n  \
         return { count, seen: seen.length };\n}\n",
    )
    .await;
    for round in 0..50 {
        let body = if round == 25 { "bomb" } else { "hello" };
        let reply = routine.run(body, tools(), limits(1000, 32)).await;
        if body == "bomb" {
            assert!(
                matches!(reply, Err(RoutineError::OutOfMemory { .. })),
                "{reply:?}"
            );
        } else {
            assert_eq!(
                parse(&reply.expect("answers")),
                json!({"count": 1, "seen": 1}),
                "round {round}"
            );
        }
    }
}
