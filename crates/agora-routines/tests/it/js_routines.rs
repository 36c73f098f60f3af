//! JavaScript routines: building (with positions in errors), calling tools, results and errors.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use agora_routine_contract::{RoutineEngine, RoutineError, RoutineSource};
use agora_routines::{RuntimeConfig, WasmRuntime};
use common::{limits, load_js, parse, runtime, tools};
use serde_json::json;

#[tokio::test]
async fn a_routine_calls_a_tool_and_returns_json() {
    let runtime = runtime();
    let routine = load_js(
        &runtime,
        r#"
        function handle(body) {
          const request = JSON.parse(body);
          const result = callTool("add", { a: request.a, b: request.b });
          return JSON.stringify({ sum: result.sum, greeting: "hello " + request.name });
        }
        "#,
    )
    .await;
    let tools = tools();
    let reply = routine
        .run(
            r#"{"a":2,"b":40,"name":"agora"}"#,
            tools.clone(),
            limits(1000, 64),
        )
        .await
        .expect("routine answers");
    assert_eq!(parse(&reply), json!({"sum": 42, "greeting": "hello agora"}));
    assert_eq!(tools.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn values_are_stringified_args_may_be_json_text_and_promises_settle() {
    let runtime = runtime();
    let routine = load_js(
        &runtime,
        r#"
        async function handle(body) {
          const mode = JSON.parse(body).mode;
          if (mode === "text-args") return callTool("add", '{"a":1,"b":2}');
          if (mode === "reject") throw "not today";
          const first = await Promise.resolve(callTool("add", { a: 1, b: 1 }));
          const second = await new Promise((resolve) => resolve(callTool("add", { a: first.sum, b: 1 })));
          return { sum: second.sum, items: [1, "two"] };
        }
        "#,
    )
    .await;
    let reply = routine
        .run(r#"{"mode":"await"}"#, tools(), limits(1000, 64))
        .await;
    assert_eq!(
        parse(&reply.expect("answers")),
        json!({"sum": 3, "items": [1, "two"]})
    );
    let reply = routine
        .run(r#"{"mode":"text-args"}"#, tools(), limits(1000, 64))
        .await;
    assert_eq!(parse(&reply.expect("answers")), json!({"sum": 3}));
    let reply = routine
        .run(r#"{"mode":"reject"}"#, tools(), limits(1000, 64))
        .await;
    assert_eq!(reply, Err(RoutineError::Failed("not today".into())));
}

/// A tool host whose one tool answers with the arguments it was given.
#[derive(Default)]
struct Echo {
    calls: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl agora_routine_contract::ToolHost for Echo {
    async fn call_tool(&self, _name: &str, arguments: &str) -> Result<String, String> {
        self.calls
            .lock()
            .expect("not poisoned")
            .push(arguments.to_string());
        Ok(arguments.to_string())
    }
}

#[tokio::test]
async fn an_undefined_array_element_in_a_tools_arguments_is_refused_or_sent_as_null() {
    let source = r#"
        function handle(body) {
          const request = JSON.parse(body);
          if (request.mode === "member") return callTool("echo", { a: 1, note: request.note });
          if (request.mode === "null") return callTool("echo", { values: [null, "\u0000"] });
          return callTool("echo", { values: [request.start, request.roomNumber] });
        }
        "#;
    let strict = runtime();
    let routine = load_js(&strict, source).await;
    let echo = Arc::new(Echo::default());
    match routine
        .run(r#"{"start":"2024-01-01"}"#, echo.clone(), limits(1000, 64))
        .await
    {
        Err(RoutineError::Failed(text)) => {
            assert!(
                text.starts_with(r#"Error: callTool("echo"): values[1] is undefined"#),
                "{text}"
            );
            assert!(text.contains("routine.js:"), "stack with position: {text}");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    assert!(
        echo.calls.lock().expect("not poisoned").is_empty(),
        "no tool ran"
    );
    // An undefined member is dropped, as JSON does; an explicit null is a value.
    let reply = routine
        .run(r#"{"mode":"member"}"#, echo.clone(), limits(1000, 64))
        .await;
    assert_eq!(parse(&reply.expect("answers")), json!({"a": 1}));
    let reply = routine
        .run(r#"{"mode":"null"}"#, echo.clone(), limits(1000, 64))
        .await;
    assert_eq!(
        parse(&reply.expect("answers")),
        json!({"values": [null, "\u{0}"]})
    );
}

#[tokio::test]
async fn thrown_values_become_failures_with_stack() {
    let runtime = runtime();
    let routine = load_js(
        &runtime,
        "function handle(body) {\n  if (body === 'string') throw 'bad request';\n  throw new Error('boom');\n}\n",
    )
    .await;
    let reply = routine.run("string", tools(), limits(1000, 64)).await;
    assert_eq!(reply, Err(RoutineError::Failed("bad request".into())));
    match routine.run("error", tools(), limits(1000, 64)).await {
        Err(RoutineError::Failed(text)) => {
            assert!(text.starts_with("Error: boom"), "{text}");
            assert!(
                text.contains("routine.js:3:"),
                "stack with position: {text}"
            );
        }
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[tokio::test]
async fn the_weather_routine_answers_the_protocol() {
    let runtime = runtime();
    let source = include_str!("../../../../routines/weather-forecast/routine.js");
    let routine = load_js(&runtime, source).await;
    let reply = routine
        .run(
            r#"{"location":"London, UK","date":"2024-09-27"}"#,
            tools(),
            limits(200, 16),
        )
        .await
        .expect("answers");
    common::assert_weather(&reply, "London, UK", "2024-09-27");
    let reply = routine.run("not json", tools(), limits(200, 16)).await;
    assert_eq!(
        parse(&reply.expect("answers")),
        json!({"error": "the request is not valid JSON"})
    );
}

/// Asserts that `source` does not build, with an error that says every one of `expected`.
async fn assert_build_error(source: &str, expected: &[&str]) {
    let text = match runtime()
        .build(&RoutineSource::JavaScript(source.into()))
        .await
    {
        Err(RoutineError::Build(text)) => text,
        other => panic!("expected a build error, got {other:?}"),
    };
    for part in expected {
        assert!(text.contains(part), "{part:?} in: {text}");
    }
}

#[tokio::test]
async fn a_syntax_error_reports_its_position() {
    assert_build_error(
        "function handle(body) {\n  return (body + );\n}\n",
        &["SyntaxError", "routine.js:2:"],
    )
    .await;
}

#[tokio::test]
async fn a_top_level_throw_reports_its_position() {
    assert_build_error(
        "const config = null;\nconfig.retries;\nfunction handle(body) { return body; }\n",
        &["TypeError", "routine.js:2:"],
    )
    .await;
}

#[tokio::test]
async fn a_routine_without_handle_does_not_build() {
    assert_build_error(
        "function handler(body) { return body; }\n",
        &["handle(body)"],
    )
    .await;
}

#[tokio::test]
async fn top_level_code_may_not_call_tools() {
    assert_build_error(
        "const sum = callTool('add', {a: 1, b: 2});\nfunction handle(body) { return body; }\n",
        &["callTool() may not be called at the top level"],
    )
    .await;
}

#[tokio::test]
async fn top_level_code_is_bounded() {
    assert_build_error(
        "for (;;) {}\nfunction handle(body) { return body; }\n",
        &["ran too long"],
    )
    .await;
}

#[tokio::test]
async fn without_an_engine_javascript_cannot_be_built() {
    let runtime = WasmRuntime::new(RuntimeConfig::default()).expect("runtime starts");
    let result = runtime
        .build(&RoutineSource::JavaScript(
            "function handle(b) { return b; }".into(),
        ))
        .await;
    assert_eq!(
        result,
        Err(RoutineError::Internal(
            "no JavaScript engine: run scripts/install.sh".into()
        ))
    );
}

#[tokio::test]
async fn randomness_is_the_requests_own_and_console_is_harmless() {
    let runtime = runtime();
    // The top level runs before the snapshot: neither its console output nor its random draws
    // may leak into requests.
    let routine = load_js(
        &runtime,
        "const atBuild = Math.random();\nconsole.log('building', { atBuild });\n\
         function handle(body) {\n  console.error('handling', body);\n  \
         return { atBuild, now: Date.now(), draws: [Math.random(), Math.random()] };\n}\n",
    )
    .await;
    let answer = |body: &'static str| {
        let routine = &routine;
        async move {
            parse(
                &routine
                    .run(body, tools(), limits(1000, 16))
                    .await
                    .expect("answers"),
            )
        }
    };
    let first = answer("{}").await;
    let again = answer("{}").await;
    let other = answer("{\"a\":1}").await;
    assert_eq!(first["atBuild"], other["atBuild"], "the top level ran once");
    assert_eq!(
        first["draws"], again["draws"],
        "the same request draws the same numbers"
    );
    assert_ne!(
        first["draws"], other["draws"],
        "another request draws others: Math.random is not frozen by the snapshot"
    );
    assert_ne!(first["draws"][0], first["draws"][1]);
    assert_ne!(first["draws"][0], first["atBuild"]);
    assert!(first["now"].as_f64().expect("Date.now() is a number") > 1.7e12);
}

#[tokio::test]
async fn a_fixed_wall_clock_is_what_routines_see() {
    let ten_am = std::time::Duration::from_secs(1_726_999_200); // 2024-09-22T10:00:00Z
    let runtime = WasmRuntime::new(RuntimeConfig {
        fixed_wall_clock: Some(ten_am),
        ..common::config()
    })
    .expect("runtime");
    let routine = load_js(
        &runtime,
        "function handle(body) { return { now: Date.now(), hour: new Date().getUTCHours() }; }",
    )
    .await;
    let answer = parse(
        &routine
            .run("{}", tools(), limits(1000, 16))
            .await
            .expect("answers"),
    );
    assert_eq!(answer["now"], json!(1_726_999_200_000_i64));
    assert_eq!(answer["hour"], json!(10));
}
