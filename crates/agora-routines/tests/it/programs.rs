//! Programs run without compiling them (`load_program`) answer as their components do.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use agora_routine_contract::{LoadedRoutine, RoutineEngine, RoutineError, RoutineSource};
use agora_routines::{RuntimeConfig, WasmRuntime};
use common::{limits, tools};
use serde_json::json;

type RunResult = Result<String, RoutineError>;

/// A runtime whose wall clock is fixed, so that a reply that reads it can be compared.
fn fixed_clock_runtime() -> WasmRuntime {
    WasmRuntime::new(RuntimeConfig {
        fixed_wall_clock: Some(Duration::from_secs(1_726_999_200)),
        ..common::config()
    })
    .expect("runtime")
}

/// `source` loaded both ways: as its compiled component, and as a program.
async fn both(
    runtime: &WasmRuntime,
    source: &str,
) -> (Arc<dyn LoadedRoutine>, Arc<dyn LoadedRoutine>) {
    let source = RoutineSource::JavaScript(source.into());
    let component = runtime.build(&source).await.expect("builds");
    let compiled = runtime.load(&component).await.expect("loads");
    let program = (runtime.load_program(&source).await).expect("loads as a program");
    (compiled, program)
}

async fn run(routine: &Arc<dyn LoadedRoutine>, body: &str, timeout_ms: u64) -> RunResult {
    routine.run(body, tools(), limits(timeout_ms, 16)).await
}

#[tokio::test]
async fn a_program_answers_as_its_component_does() {
    let runtime = fixed_clock_runtime();
    let source = r#"
        const table = { greeting: "hello" };
        async function handle(body) {
          const request = JSON.parse(body);
          switch (request.mode) {
            case "tools": {
              const first = callTool("add", { a: request.a, b: 1 });
              const second = await Promise.resolve(callTool("add", { a: first.sum, b: 1 }));
              return { sum: second.sum, greeting: table.greeting + " " + request.name };
            }
            case "text": return callTool("add", '{"a":1,"b":2}');
            case "refused": return callTool("delete_everything", {});
            case "undefined": return callTool("add", { values: [1, request.missing] });
            case "caught":
              try { callTool("add", { a: "x" }); } catch (e) { return "caught: " + e; }
            case "throw": throw new Error("boom " + request.name);
            case "reject": throw "not today";
            case "random": return [Math.random(), Math.random(), Math.floor(Math.random() * 1e6)];
            case "clock": return { now: Date.now(), day: new Date().toISOString() };
            case "shape": return undefined;
            case "unicode": return "caf\u00e9 \u{1F600} " + "x".repeat(request.n || 0);
            default: return "";
          }
        }
        "#;
    let (compiled, program) = both(&runtime, source).await;
    let bodies = [
        json!({"mode": "tools", "a": 40, "name": "agora"}),
        json!({"mode": "text"}),
        json!({"mode": "refused"}),
        json!({"mode": "undefined"}),
        json!({"mode": "caught"}),
        json!({"mode": "throw", "name": "x"}),
        json!({"mode": "reject"}),
        json!({"mode": "random"}),
        json!({"mode": "random", "other": 1}),
        json!({"mode": "clock"}),
        json!({"mode": "shape"}),
        json!({"mode": "unicode", "n": 100_000}),
        json!({"mode": "empty"}),
    ];
    for body in bodies.iter().map(|b| b.to_string()).chain(["".into()]) {
        let expected = run(&compiled, &body, 1000).await;
        let got = run(&program, &body, 1000).await;
        assert_eq!(got, expected, "request {body}");
    }
    // The replies above are not all errors or all alike: the comparison compared something.
    let tools_reply = run(&program, &bodies[0].to_string(), 1000).await;
    assert_eq!(
        common::parse(&tools_reply.expect("answers")),
        json!({"sum": 42, "greeting": "hello agora"})
    );
    let random = run(&program, &bodies[7].to_string(), 1000).await;
    let other = run(&program, &bodies[8].to_string(), 1000).await;
    assert_ne!(random, other, "each request draws its own numbers");
}

#[tokio::test]
async fn a_program_is_held_to_the_routine_limits() {
    let runtime = common::runtime();
    let (compiled, program) = both(&runtime, include_str!("../data/hostile.js")).await;
    for mode in [
        "loop",
        "alloc",
        "alloc-string",
        "tool-refused",
        "tool-caught",
        "normal",
    ] {
        let body = json!({ "mode": mode }).to_string();
        let expected = run(&compiled, &body, 200).await;
        let got = run(&program, &body, 200).await;
        assert_eq!(got, expected, "mode {mode}");
    }
    assert_eq!(
        run(&program, &json!({"mode": "loop"}).to_string(), 200).await,
        Err(RoutineError::Timeout(Duration::from_millis(200)))
    );
    assert!(matches!(
        run(&program, &json!({"mode": "alloc"}).to_string(), 200).await,
        Err(RoutineError::OutOfMemory { .. })
    ));
}

#[tokio::test]
async fn programs_run_side_by_side_with_tool_calls() {
    // Each run's tool call allocates its reply in the guest on a second stack: a full runtime
    // must still have one for every run it admits.
    let runtime = WasmRuntime::new(RuntimeConfig {
        max_concurrent: 2,
        ..common::config()
    })
    .expect("runtime");
    let (_, program) = both(
        &runtime,
        r#"function handle(body) { callTool("slow", { ms: 100 }); return callTool("add", { a: 1, b: 2 }); }"#,
    )
    .await;
    let runs = (0..2).map(|_| {
        let program = Arc::clone(&program);
        tokio::spawn(async move { run(&program, "{}", 2000).await })
    });
    for handle in runs.collect::<Vec<_>>() {
        let reply = handle.await.expect("joins");
        assert_eq!(common::parse(&reply.expect("answers")), json!({"sum": 3}));
    }
}

#[tokio::test]
async fn a_program_that_does_not_build_fails_as_its_build_does() {
    let runtime = common::runtime();
    for source in [
        "function handle(body) {\n  const a = 1;\n  const a = 2;\n}\n",
        "throw new Error('at the top');\nfunction handle(body) {}\n",
        "function notHandle(body) { return body; }",
        "callTool('add', { a: 1, b: 2 });\nfunction handle(body) {}\n",
    ] {
        let source = RoutineSource::JavaScript(source.into());
        let built = runtime.build(&source).await;
        let loaded = runtime.load_program(&source).await;
        match (built, loaded) {
            (Err(RoutineError::Build(expected)), Err(RoutineError::Build(got))) => {
                assert_eq!(got, expected)
            }
            (built, loaded) => panic!(
                "expected the same build error, got {:?} and {:?}",
                built.map(|_| "a component"),
                loaded.map(|_| "a program")
            ),
        }
    }
}
