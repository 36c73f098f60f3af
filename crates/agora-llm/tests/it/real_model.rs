//! Slow tests against the real local model (Qwen2.5-Coder-1.5B on
//! llama-server). Ignored by plain `cargo test`; `scripts/test.sh` runs them
//! after the build, one at a time, because a compile running beside them
//! makes generation about 30 times slower.
//!
//! The environment is read here, in test code, never by the library:
//! - `AGORA_TEST_LLM_URL`: OpenAI base URL of a running server, e.g.
//!   `http://127.0.0.1:8011/v1`;
//! - `AGORA_LLAMA_SERVER`, `AGORA_MODEL`: the binary and GGUF file that
//!   `scripts/install.sh` writes into `~/.cache/agora/env.sh`.

use std::time::Duration;

use agora_llm::{ChatRequest, Llm, LocalServer, LocalServerConfig, OpenAiBackend, OpenAiConfig};
use serde_json::Value;

fn env(name: &str, why: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: {why}"))
}

fn yes_no_question(question: &str) -> ChatRequest {
    crate::support::yes_no("You answer questions with yes or no.", question)
}

/// Checks the content against `{"answer": enum["yes","no"]}` and returns
/// the answer.
fn answer_of(content: &str) -> String {
    let value: Value = serde_json::from_str(content)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {content}"));
    let object = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {content}"));
    assert_eq!(object.len(), 1, "only `answer` is allowed: {content}");
    let answer = object["answer"]
        .as_str()
        .unwrap_or_else(|| panic!("answer is not a string: {content}"));
    assert!(
        ["yes", "no"].contains(&answer),
        "answer outside the enum: {content}"
    );
    answer.to_owned()
}

#[tokio::test]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_json_schema_yes_no() {
    let base_url = env(
        "AGORA_TEST_LLM_URL",
        "set it to the OpenAI base URL of a running llama-server, e.g. http://127.0.0.1:8011/v1",
    );
    let llm = OpenAiBackend::new(OpenAiConfig {
        base_url,
        api_key: "sk-local".to_owned(),
        model: "local".to_owned(),
        timeout: Duration::from_secs(120),
        max_concurrency: 1,
    });
    let request = yes_no_question("Is Paris the capital of France?");
    assert_eq!(request.temperature, 0.0);
    assert_eq!(request.seed, Some(42));

    let response = llm.chat(&request).await.expect("the local model answers");
    eprintln!(
        "real model: {:?} in {} ms ({} prompt + {} completion tokens, model {})",
        response.content,
        response.latency_ms,
        response.usage.prompt_tokens,
        response.usage.completion_tokens,
        response.model
    );
    assert_eq!(answer_of(&response.content), "yes");
    assert!(response.usage.prompt_tokens > 0 && response.usage.completion_tokens > 0);
}

#[tokio::test]
#[ignore = "needs the local model: run by scripts/test.sh"]
async fn real_model_local_server_starts() {
    let why = "source ~/.cache/agora/env.sh (written by scripts/install.sh)";
    let mut config =
        LocalServerConfig::new(env("AGORA_LLAMA_SERVER", why), env("AGORA_MODEL", why));
    config.startup_timeout = Duration::from_secs(120);
    let server = LocalServer::start(config)
        .await
        .expect("llama-server starts");
    let pid = server.id().expect("running");
    assert!(
        server
            .base_url()
            .ends_with(&format!(":{}/v1", server.port()))
    );

    let llm = OpenAiBackend::new(server.openai_config(Duration::from_secs(120)));
    let response = llm
        .chat(&yes_no_question("Is water wet?"))
        .await
        .expect("the started server answers");
    eprintln!(
        "local server on port {}: {:?} in {} ms",
        server.port(),
        response.content,
        response.latency_ms
    );
    answer_of(&response.content);

    server.stop().await;
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "llama-server {pid} still running after stop"
    );
}
