//! `OpenAiBackend` against a fake OpenAI-compatible server on 127.0.0.1:0.
//!
//! The fake records every request body it receives and answers according to
//! the test's `Behavior`, so the tests check what goes on the wire (strict
//! json_schema, temperature, seed) and how each failure maps to `LlmError`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agora_llm::{
    ChatRequest, Llm, LlmError, Message, OpenAiBackend, OpenAiConfig, ToolCallRequest,
    ToolDefinition, Usage,
};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

#[derive(Clone, Copy)]
enum Behavior {
    /// A completion with usage.
    Answer,
    /// A completion without a usage object.
    AnswerWithoutUsage,
    /// A completion with no choices.
    NoChoices,
    /// HTTP 400 with an OpenAI error object.
    BadRequest,
    /// Never answers.
    Hang,
    /// Answers after 100 ms, tracking how many requests overlap.
    Slow,
    /// Answers with a native tool call and no content.
    ToolCall,
}

struct Fake {
    behavior: Behavior,
    bodies: Mutex<Vec<Value>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// The fake server; aborted when dropped so no task outlives its test.
struct FakeServer {
    base_url: String,
    state: Arc<Fake>,
    task: JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    async fn start(behavior: Behavior) -> Self {
        let state = Arc::new(Fake {
            behavior,
            bodies: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(completions))
            .with_state(state.clone());
        let (address, task) = crate::support::serve(app).await;
        FakeServer {
            base_url: format!("http://{address}/v1"),
            state,
            task,
        }
    }

    fn bodies(&self) -> Vec<Value> {
        self.state.bodies.lock().expect("not poisoned").clone()
    }
}

fn completion(content: &str, with_usage: bool) -> Value {
    let mut body = json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "fake-model.gguf",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop"
        }]
    });
    if with_usage {
        body["usage"] = json!({"prompt_tokens": 31, "completion_tokens": 5, "total_tokens": 36,
            "prompt_tokens_details": {"cached_tokens": 24}});
    }
    body
}

async fn completions(State(fake): State<Arc<Fake>>, Json(body): Json<Value>) -> Response {
    fake.bodies.lock().expect("not poisoned").push(body);
    match fake.behavior {
        Behavior::Answer => Json(completion(r#"{"answer": "yes"}"#, true)).into_response(),
        Behavior::AnswerWithoutUsage => Json(completion("12345678", false)).into_response(),
        Behavior::NoChoices => {
            let mut body = completion("", true);
            body["choices"] = json!([]);
            Json(body).into_response()
        }
        Behavior::BadRequest => (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": "schema rejected", "type": "invalid_request_error", "param": null, "code": null}})),
        )
            .into_response(),
        Behavior::ToolCall => {
            let mut body = completion("", true);
            body["choices"][0]["message"] = json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "weather_forecast",
                    "arguments": "{\"location\": \"Paris\", \"date\": \"2024-06-01\"}"
                }}]
            });
            body["choices"][0]["finish_reason"] = json!("tool_calls");
            Json(body).into_response()
        }
        Behavior::Hang => std::future::pending().await,
        Behavior::Slow => {
            let now = fake.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            fake.max_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(100)).await;
            fake.in_flight.fetch_sub(1, Ordering::SeqCst);
            Json(completion("done", true)).into_response()
        }
    }
}

fn backend(base_url: &str, timeout: Duration, max_concurrency: usize) -> OpenAiBackend {
    OpenAiBackend::new(OpenAiConfig {
        base_url: base_url.to_owned(),
        api_key: "sk-test".to_owned(),
        model: "test-model".to_owned(),
        timeout,
        max_concurrency,
    })
}

fn yes_no_request() -> ChatRequest {
    crate::support::yes_no("Answer yes or no.", "Is the sky blue?")
}

#[tokio::test]
async fn json_schema_request_goes_out_strict_with_temperature_and_seed() {
    let server = FakeServer::start(Behavior::Answer).await;
    let llm = backend(&server.base_url, Duration::from_secs(10), 2);

    let response = llm.chat(&yes_no_request()).await.expect("fake answers");

    assert_eq!(response.content, r#"{"answer": "yes"}"#);
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: 31,
            completion_tokens: 5,
            cached_prompt_tokens: 24,
        }
    );
    assert_eq!(response.model, "fake-model.gguf");
    assert_eq!(llm.model(), "test-model");

    let bodies = server.bodies();
    assert_eq!(bodies.len(), 1);
    let body = &bodies[0];
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["name"], "answer");
    assert_eq!(body["response_format"]["json_schema"]["strict"], true);
    assert_eq!(
        body["response_format"]["json_schema"]["schema"]["properties"]["answer"]["enum"],
        json!(["yes", "no"])
    );
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["seed"], 42);
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["max_completion_tokens"], 20);
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "Answer yes or no."})
    );
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "Is the sky blue?"})
    );
}

#[tokio::test]
async fn missing_usage_is_estimated() {
    let server = FakeServer::start(Behavior::AnswerWithoutUsage).await;
    let llm = backend(&server.base_url, Duration::from_secs(10), 1);
    let request = ChatRequest::new(vec![Message::user("1234567890")]);
    let response = llm.chat(&request).await.expect("fake answers");
    assert_eq!(response.content, "12345678");
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: 3,
            completion_tokens: 2,
            cached_prompt_tokens: 0,
        }
    );
}

#[tokio::test]
async fn no_choices_is_a_bad_response() {
    let server = FakeServer::start(Behavior::NoChoices).await;
    let llm = backend(&server.base_url, Duration::from_secs(10), 1);
    let error = llm.chat(&yes_no_request()).await.expect_err("no choices");
    assert!(matches!(error, LlmError::BadResponse(_)), "{error:?}");
}

#[tokio::test]
async fn an_error_answer_is_an_api_error_with_status() {
    let server = FakeServer::start(Behavior::BadRequest).await;
    let llm = backend(&server.base_url, Duration::from_secs(10), 1);
    let error = llm.chat(&yes_no_request()).await.expect_err("400");
    match error {
        LlmError::Api { status, message } => {
            assert_eq!(status, Some(400));
            assert!(message.contains("schema rejected"), "{message}");
        }
        other => panic!("expected Api, got {other:?}"),
    }
}

#[tokio::test]
async fn a_closed_port_is_unavailable() {
    let url = crate::support::closed_url();
    let llm = backend(&format!("{url}/v1"), Duration::from_secs(10), 1);
    let error = llm
        .chat(&yes_no_request())
        .await
        .expect_err("nobody listens");
    assert!(matches!(error, LlmError::Unavailable(_)), "{error:?}");
    assert!(error.is_transient());
}

#[tokio::test]
async fn a_slow_server_times_out() {
    let server = FakeServer::start(Behavior::Hang).await;
    let llm = backend(&server.base_url, Duration::from_millis(300), 1);
    let started = std::time::Instant::now();
    let error = llm.chat(&yes_no_request()).await.expect_err("hangs");
    assert!(matches!(error, LlmError::Timeout), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(server.bodies().len(), 1, "the request reached the server");
}

#[tokio::test]
async fn concurrency_is_bounded_by_the_semaphore() {
    let server = FakeServer::start(Behavior::Slow).await;
    let llm = Arc::new(backend(&server.base_url, Duration::from_secs(10), 2));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..6 {
        let llm = llm.clone();
        tasks.spawn(async move {
            let request = ChatRequest::new(vec![Message::user(format!("call {i}"))]);
            llm.chat(&request).await
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.expect("task ran").expect("fake answers");
    }
    assert_eq!(server.bodies().len(), 6);
    assert_eq!(server.state.max_in_flight.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn native_tools_go_out_as_openai_tools_and_calls_come_back() {
    let server = FakeServer::start(Behavior::ToolCall).await;
    let llm = backend(&server.base_url, Duration::from_secs(10), 1);
    let request = ChatRequest::new(vec![Message::user("Weather in Paris on 2024-06-01?")]).tools(
        vec![ToolDefinition {
            name: "weather_forecast".into(),
            description: "Forecast for a place and a date".into(),
            parameters: json!({"type": "object", "properties": {"location": {"type": "string"}, "date": {"type": "string"}}}),
        }],
    );
    let response = llm.chat(&request).await.expect("fake answers");
    assert_eq!(
        response.tool_calls,
        vec![ToolCallRequest {
            name: "weather_forecast".into(),
            arguments: json!({"location": "Paris", "date": "2024-06-01"}),
        }]
    );
    assert_eq!(response.content, "");
    let sent = &server.bodies()[0];
    assert_eq!(sent["tool_choice"], "auto");
    assert_eq!(sent["tools"][0]["type"], "function");
    assert_eq!(sent["tools"][0]["function"]["name"], "weather_forecast");
    assert!(sent.get("response_format").is_none() || sent["response_format"].is_null());
    // Requests without tools carry neither key, so schema-driven roles are unchanged.
    let plain = FakeServer::start(Behavior::Answer).await;
    backend(&plain.base_url, Duration::from_secs(10), 1)
        .chat(&yes_no_request())
        .await
        .expect("fake answers");
    assert!(plain.bodies()[0].get("tools").is_none());
    assert!(plain.bodies()[0].get("tool_choice").is_none());
}
