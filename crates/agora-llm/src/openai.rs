//! The OpenAI-compatible backend: OpenAI itself, vLLM, or llama.cpp's
//! `llama-server`, through async-openai.
//!
//! One code path serves production and the local default, so what is tested
//! offline is what runs against OpenAI. Structured output goes through
//! `response_format: json_schema` with `strict: true`: OpenAI enforces it as
//! structured outputs and llama-server compiles it to a grammar, which is
//! what makes a 1.5B model usable. Native `tools` are not used because small
//! models never emit `tool_calls` on llama-server (see the local-LLM
//! feasibility report); tool choice is a JSON schema instead.
//!
//! A backend is shared as `Arc<dyn Llm>` by every role of a node. It owns one
//! HTTP client (one connection pool) and a semaphore that bounds the calls in
//! flight, so a single-slot local server is never sent more work than it can
//! run, and a hung endpoint costs at most the per-call timeout.
//!
//! API boundary: this is the only module that names async-openai; its types
//! are converted at the edges of [`OpenAiBackend::chat`].

use std::fmt;
use std::time::{Duration, Instant};

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::types::chat::{
    ChatCompletionMessageToolCalls, ChatCompletionRequestAssistantMessage,
    ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestUserMessage, ChatCompletionTool, ChatCompletionToolChoiceOption,
    ChatCompletionTools, CreateChatCompletionRequest, CreateChatCompletionResponse, FinishReason,
    FunctionObject, ResponseFormat, ResponseFormatJsonSchema, ToolChoiceOptions,
};
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::request::preview;
use crate::{ChatRequest, ChatResponse, Llm, LlmError, OutputFormat, Role, ToolCallRequest, Usage};

/// Where and how to reach an OpenAI-compatible endpoint.
#[derive(Clone, PartialEq)]
pub struct OpenAiConfig {
    /// Base URL including the version prefix, e.g. `https://api.openai.com/v1`
    /// or `http://127.0.0.1:8080/v1` for a local llama-server.
    pub base_url: String,
    /// Bearer token; any non-empty string for a local llama-server.
    pub api_key: String,
    /// Model name sent with each request and recorded in the ledger
    /// (llama-server ignores it).
    pub model: String,
    /// Per-call limit, from sending the request to the whole completion.
    /// Waiting for a concurrency permit does not count.
    pub timeout: Duration,
    /// Most calls in flight at once; 0 is treated as 1. Match it to the
    /// server's slots (`-np`) for a local server.
    pub max_concurrency: usize,
}

impl fmt::Debug for OpenAiConfig {
    // Hand-written so the API key never reaches a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &"<redacted>")
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("max_concurrency", &self.max_concurrency)
            .finish()
    }
}

/// An [`Llm`] backed by an OpenAI-compatible chat completions endpoint.
pub struct OpenAiBackend {
    client: Client<OpenAIConfig>,
    model: String,
    base_url: String,
    timeout: Duration,
    permits: Semaphore,
    /// A configuration problem found by [`OpenAiBackend::new`], reported by
    /// every call: async-openai would panic on an API key that is not a
    /// valid HTTP header value.
    config_error: Option<String>,
}

impl fmt::Debug for OpenAiBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiBackend")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("available_permits", &self.permits.available_permits())
            .finish_non_exhaustive()
    }
}

impl OpenAiBackend {
    /// Builds the backend; no network traffic happens until the first call.
    ///
    /// Infallible so that wiring code stays simple: an unusable API key is
    /// reported as [`LlmError::Api`] by every call instead.
    pub fn new(config: OpenAiConfig) -> Self {
        let api_key = config.api_key.trim().to_owned();
        let config_error = reqwest::header::HeaderValue::from_str(&format!("Bearer {api_key}"))
            .err()
            .map(|_| "the API key contains characters not allowed in an HTTP header".to_owned());
        // `OpenAIConfig::new()` fills its fields from OPENAI_* environment
        // variables; every one of them is overwritten here, so the
        // environment has no effect on this library.
        let openai_config = OpenAIConfig::new()
            .with_api_base(config.base_url.trim_end_matches('/'))
            .with_api_key(if config_error.is_some() {
                String::new()
            } else {
                api_key
            })
            .with_org_id("")
            .with_project_id("");
        Self {
            client: Client::with_config(openai_config),
            model: config.model,
            base_url: config.base_url,
            timeout: config.timeout,
            permits: Semaphore::new(config.max_concurrency.max(1)),
            config_error,
        }
    }

    async fn call(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        if let Some(message) = &self.config_error {
            return Err(LlmError::Api {
                status: None,
                message: message.clone(),
            });
        }
        let openai_request = to_openai_request(&self.model, request);
        let _permit = self.permits.acquire().await.map_err(|_| {
            LlmError::Unavailable("the backend's concurrency limiter was closed".into())
        })?;
        let started = Instant::now();
        let outcome =
            tokio::time::timeout(self.timeout, self.client.chat().create(openai_request)).await;
        let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let response = outcome
            .map_err(|_elapsed| LlmError::Timeout)?
            .map_err(map_error)?;
        let response = to_chat_response(request, response, &self.model, latency_ms)?;
        tracing::debug!(
            latency_ms,
            prompt_tokens = response.usage.prompt_tokens,
            completion_tokens = response.usage.completion_tokens,
            "llm call done"
        );
        Ok(response)
    }
}

#[async_trait::async_trait]
impl Llm for OpenAiBackend {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let span = tracing::debug_span!("agora.llm.chat", model = %self.model, messages = request.messages.len());
        self.call(request).instrument(span).await
    }

    fn model(&self) -> String {
        self.model.clone()
    }
}

/// Translates our request into async-openai's. `max_completion_tokens` is
/// the current OpenAI name; llama-server accepts it as an alias of
/// `n_predict`.
// OpenAI marks `seed` deprecated, but llama-server honours it and it is what
// makes local runs reproducible, so it is still sent.
#[allow(deprecated)]
fn to_openai_request(model: &str, request: &ChatRequest) -> CreateChatCompletionRequest {
    let messages = request
        .messages
        .iter()
        .map(|message| {
            let content = message.content.as_str();
            match message.role {
                Role::System => ChatCompletionRequestSystemMessage::from(content).into(),
                Role::User => ChatCompletionRequestUserMessage::from(content).into(),
                Role::Assistant => ChatCompletionRequestAssistantMessage::from(content).into(),
            }
        })
        .collect::<Vec<ChatCompletionRequestMessage>>();
    let response_format = match &request.format {
        OutputFormat::Text => None,
        OutputFormat::JsonSchema { name, schema } => Some(ResponseFormat::JsonSchema {
            json_schema: ResponseFormatJsonSchema {
                description: None,
                name: name.clone(),
                schema: schema.clone(),
                strict: Some(true),
            },
        }),
    };
    let (tools, tool_choice) = if request.tools.is_empty() {
        (None, None)
    } else {
        let tools = request
            .tools
            .iter()
            .map(|tool| {
                ChatCompletionTools::Function(ChatCompletionTool {
                    function: FunctionObject {
                        name: tool.name.clone(),
                        description: Some(tool.description.clone()),
                        parameters: Some(tool.parameters.clone()),
                        strict: None,
                    },
                })
            })
            .collect();
        (
            Some(tools),
            Some(ChatCompletionToolChoiceOption::Mode(
                ToolChoiceOptions::Auto,
            )),
        )
    };
    CreateChatCompletionRequest {
        model: model.to_owned(),
        messages,
        response_format,
        tools,
        tool_choice,
        max_completion_tokens: request.max_tokens,
        temperature: Some(request.temperature),
        seed: request.seed,
        ..Default::default()
    }
}

/// Translates async-openai's response into ours, estimating usage when the
/// endpoint did not report it.
fn to_chat_response(
    request: &ChatRequest,
    response: CreateChatCompletionResponse,
    configured_model: &str,
    latency_ms: u64,
) -> Result<ChatResponse, LlmError> {
    let choice = response
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| LlmError::BadResponse("the completion has no choices".into()))?;
    if choice.finish_reason == Some(FinishReason::Length) {
        tracing::warn!(
            max_tokens = request.max_tokens,
            "completion cut at the token limit; structured output may be incomplete"
        );
    }
    let tool_calls: Vec<ToolCallRequest> = choice
        .message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .filter_map(|call| match call {
            ChatCompletionMessageToolCalls::Function(call) => Some(ToolCallRequest {
                arguments: serde_json::from_str(&call.function.arguments)
                    .unwrap_or(serde_json::Value::String(call.function.arguments)),
                name: call.function.name,
            }),
            ChatCompletionMessageToolCalls::Custom(_) => None,
        })
        .collect();
    let content = match (choice.message.content, choice.message.refusal) {
        (Some(content), _) if !content.is_empty() => content,
        (content, _) if !tool_calls.is_empty() => content.unwrap_or_default(),
        (_, Some(refusal)) => {
            return Err(LlmError::BadResponse(format!(
                "the model refused: {}",
                preview(&refusal)
            )));
        }
        _ => return Err(LlmError::BadResponse("the completion is empty".into())),
    };
    let usage = match response.usage {
        Some(usage) => Usage {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cached_prompt_tokens: usage
                .prompt_tokens_details
                .and_then(|details| details.cached_tokens)
                .unwrap_or(0)
                .min(usage.prompt_tokens),
        },
        None => estimate_usage(request, &content),
    };
    let model = if response.model.is_empty() {
        configured_model.to_owned()
    } else {
        response.model
    };
    Ok(ChatResponse {
        content,
        usage,
        model,
        latency_ms,
        tool_calls,
    })
}

/// About four characters per token: good enough for cost accounting when an
/// endpoint reports no usage.
fn estimate_usage(request: &ChatRequest, content: &str) -> Usage {
    let tokens = |chars: usize| u32::try_from(chars.div_ceil(4)).unwrap_or(u32::MAX);
    let prompt_chars = request
        .messages
        .iter()
        .map(|message| message.content.chars().count())
        .sum();
    Usage {
        prompt_tokens: tokens(prompt_chars),
        completion_tokens: tokens(content.chars().count()),
        cached_prompt_tokens: 0,
    }
}

fn map_error(error: OpenAIError) -> LlmError {
    match error {
        OpenAIError::Reqwest(error) if error.is_timeout() => LlmError::Timeout,
        OpenAIError::Reqwest(error) => LlmError::Unavailable(error_chain(&error)),
        OpenAIError::ApiError(response) => LlmError::Api {
            status: Some(response.status_code.as_u16()),
            message: response.api_error.to_string(),
        },
        OpenAIError::JSONDeserialize(error, body) => {
            LlmError::BadResponse(format!("undecodable answer ({error}): {}", preview(&body)))
        }
        OpenAIError::InvalidArgument(message) => LlmError::Api {
            status: None,
            message: format!("request refused by the client: {message}"),
        },
        other => LlmError::BadResponse(other.to_string()),
    }
}

/// Renders an error with its sources ("error sending request: ...: Connection
/// refused"), since the interesting part of a reqwest error is at the bottom.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;
    use serde_json::json;

    fn request() -> ChatRequest {
        ChatRequest::new(vec![
            Message::system("be brief"),
            Message::user("yes or no?"),
        ])
        .json_schema(
            "answer",
            json!({"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}}),
        )
        .max_tokens(16)
    }

    #[test]
    fn request_carries_strict_schema_temperature_seed_and_limit() {
        let wire = serde_json::to_value(to_openai_request("qwen", &request())).expect("serializes");
        assert_eq!(wire["model"], "qwen");
        assert_eq!(wire["messages"][0]["role"], "system");
        assert_eq!(wire["messages"][1]["role"], "user");
        assert_eq!(wire["messages"][1]["content"], "yes or no?");
        assert_eq!(wire["response_format"]["type"], "json_schema");
        assert_eq!(wire["response_format"]["json_schema"]["name"], "answer");
        assert_eq!(wire["response_format"]["json_schema"]["strict"], true);
        assert_eq!(
            wire["response_format"]["json_schema"]["schema"]["properties"]["answer"]["enum"],
            json!(["yes", "no"])
        );
        assert_eq!(wire["temperature"], 0.0);
        assert_eq!(wire["seed"], 42);
        assert_eq!(wire["max_completion_tokens"], 16);
        assert!(wire.get("stream").is_none());
    }

    #[test]
    fn text_request_has_no_response_format() {
        let text = ChatRequest::new(vec![Message::assistant("earlier"), Message::user("now")]);
        let wire = serde_json::to_value(to_openai_request("m", &text)).expect("serializes");
        assert!(wire.get("response_format").is_none());
        assert!(wire.get("max_completion_tokens").is_none());
        assert_eq!(wire["messages"][0]["role"], "assistant");
    }

    #[test]
    fn usage_is_estimated_as_chars_over_four() {
        let request = ChatRequest::new(vec![Message::system("12345678"), Message::user("123")]);
        let usage = estimate_usage(&request, "12345");
        assert_eq!(usage.prompt_tokens, 3);
        assert_eq!(usage.completion_tokens, 2);
    }

    #[test]
    fn debug_output_hides_the_api_key() {
        let config = OpenAiConfig {
            base_url: "http://127.0.0.1:1/v1".into(),
            api_key: "sk-secret".into(),
            model: "m".into(),
            timeout: Duration::from_secs(1),
            max_concurrency: 0,
        };
        assert!(!format!("{config:?}").contains("sk-secret"));
        let backend = OpenAiBackend::new(config);
        assert!(!format!("{backend:?}").contains("sk-secret"));
        assert_eq!(backend.permits.available_permits(), 1);
    }

    #[tokio::test]
    async fn an_api_key_with_a_newline_inside_fails_every_call() {
        let backend = OpenAiBackend::new(OpenAiConfig {
            base_url: "http://127.0.0.1:1/v1".into(),
            api_key: "sk-\nbroken".into(),
            model: "m".into(),
            timeout: Duration::from_secs(1),
            max_concurrency: 1,
        });
        let error = backend.chat(&request()).await.expect_err("bad key");
        assert!(
            matches!(error, LlmError::Api { status: None, .. }),
            "{error:?}"
        );
    }
}
