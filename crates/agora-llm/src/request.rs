//! The request and response values that cross the [`crate::Llm`] trait.
//!
//! They are plain data with serde derives because cassettes store them
//! verbatim and the ledger records their usage. The defaults (temperature 0,
//! seed 42) make local runs reproducible; a caller who wants variety says so.
//! The serde form (lowercase roles, `{"type": "json_schema", ...}` formats) is
//! the cassette format, so changing it invalidates recorded cassettes.

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::LlmError;

/// Who wrote a message of the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions from the node to the model.
    System,
    /// The input the model is asked about.
    User,
    /// An earlier answer of the model (multi-turn conversations).
    Assistant,
}

/// One message of a chat conversation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// The text of the message.
    pub content: String,
}

impl Message {
    /// A system message (instructions).
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
        }
    }

    /// An assistant message (an earlier answer of the model).
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// What shape the completion must have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputFormat {
    /// Free text.
    Text,
    /// JSON valid against `schema`, enforced by the endpoint (OpenAI strict
    /// structured outputs; a grammar on llama.cpp).
    JsonSchema {
        /// Schema name: `a-z`, `A-Z`, `0-9`, `_` and `-`, at most 64 characters.
        name: String,
        /// The JSON Schema. For OpenAI strict mode every property must be
        /// required and objects must set `additionalProperties: false`.
        schema: serde_json::Value,
    },
}

/// One chat completion request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// The required shape of the answer.
    pub format: OutputFormat,
    /// Upper bound on generated tokens; `None` leaves it to the endpoint.
    pub max_tokens: Option<u32>,
    /// Sampling temperature; 0 (the default) is greedy decoding.
    pub temperature: f32,
    /// Sampling seed; `Some(42)` by default so local runs are reproducible.
    pub seed: Option<i64>,
    /// Tools offered through the endpoint's native tool calling (OpenAI
    /// `tools`, with `tool_choice: auto`). Empty for every schema-driven
    /// role; omitted from the serde form when empty, so cassette keys of
    /// such requests do not change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
}

/// A tool offered to the model through native tool calling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The tool's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of its arguments object.
    pub parameters: serde_json::Value,
}

/// A tool call the model asked for through native tool calling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The tool's name.
    pub name: String,
    /// Its arguments (a JSON string when the model wrote invalid JSON).
    pub arguments: serde_json::Value,
}

impl ChatRequest {
    /// A free-text request at temperature 0 with seed 42 and no token limit.
    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            messages,
            format: OutputFormat::Text,
            max_tokens: None,
            temperature: 0.0,
            seed: Some(42),
            tools: Vec::new(),
        }
    }

    /// Offers tools through the endpoint's native tool calling.
    pub fn tools(mut self, tools: Vec<ToolDefinition>) -> Self {
        self.tools = tools;
        self
    }

    /// Asks for JSON valid against `schema` (see [`OutputFormat::JsonSchema`]).
    pub fn json_schema(mut self, name: &str, schema: serde_json::Value) -> Self {
        self.format = OutputFormat::JsonSchema {
            name: name.to_owned(),
            schema,
        };
        self
    }

    /// Caps the number of generated tokens.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Sets the sampling temperature.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = temperature;
        self
    }

    /// Sets the sampling seed (`None`: the endpoint picks one).
    pub fn seed(mut self, seed: Option<i64>) -> Self {
        self.seed = seed;
        self
    }
}

/// Token counts of one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt (all messages, as the endpoint counted them).
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
    /// Of the prompt tokens, those the endpoint took from its prompt cache rather than
    /// evaluated (llama-server's `cache_n`, a hosted API's `cached_tokens`); 0 when it did not
    /// say, as in cassettes recorded before it was kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_prompt_tokens: u32,
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

/// The completion of one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The text of the first choice (JSON text for a `JsonSchema` request).
    pub content: String,
    /// Token counts, reported by the endpoint or estimated (characters / 4).
    pub usage: Usage,
    /// The model that answered, as the endpoint named it.
    pub model: String,
    /// Wall-clock time of the call in milliseconds (the recorded one when
    /// replayed from a cassette).
    pub latency_ms: u64,
    /// Native tool calls, when the request offered tools and the model
    /// chose to call them (`content` may then be empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
}

impl ChatResponse {
    /// Parses the content as JSON into `T`; a model that broke the format is a
    /// [`LlmError::BadResponse`].
    pub fn parse_json<T: DeserializeOwned>(&self) -> Result<T, LlmError> {
        serde_json::from_str(&self.content).map_err(|error| {
            LlmError::BadResponse(format!(
                "content is not the expected JSON ({error}): {}",
                preview(&self.content)
            ))
        })
    }
}

/// The start of a possibly long text, for error messages.
pub(crate) fn preview(text: &str) -> String {
    const LIMIT: usize = 200;
    match text.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn new_request_is_deterministic_by_default() {
        let request = ChatRequest::new(vec![Message::user("hi")]);
        assert_eq!(request.temperature, 0.0);
        assert_eq!(request.seed, Some(42));
        assert_eq!(request.format, OutputFormat::Text);
        assert_eq!(request.max_tokens, None);
    }

    #[test]
    fn builders_set_format_and_limits() {
        let schema = json!({"type": "object"});
        let request = ChatRequest::new(vec![Message::system("s"), Message::user("u")])
            .json_schema("answer", schema.clone())
            .max_tokens(8)
            .temperature(0.5)
            .seed(None);
        assert_eq!(
            request.format,
            OutputFormat::JsonSchema {
                name: "answer".into(),
                schema
            }
        );
        assert_eq!(request.max_tokens, Some(8));
        assert_eq!(request.temperature, 0.5);
        assert_eq!(request.seed, None);
    }

    #[test]
    fn serde_form_is_the_cassette_format() {
        let request = ChatRequest::new(vec![Message::assistant("a")])
            .json_schema("n", json!({"type": "string"}));
        let value = serde_json::to_value(&request).expect("plain data serializes");
        assert_eq!(
            value,
            json!({
                "messages": [{"role": "assistant", "content": "a"}],
                "format": {"type": "json_schema", "name": "n", "schema": {"type": "string"}},
                "max_tokens": null,
                "temperature": 0.0,
                "seed": 42
            })
        );
        let back: ChatRequest = serde_json::from_value(value).expect("round trip");
        assert_eq!(back, request);
    }

    #[test]
    fn parse_json_reports_bad_content() {
        let response = ChatResponse {
            content: "{\"answer\": \"yes\"}".into(),
            usage: Usage {
                prompt_tokens: 1,
                completion_tokens: 1,
                cached_prompt_tokens: 0,
            },
            model: "m".into(),
            latency_ms: 1,
            tool_calls: Vec::new(),
        };
        let value: serde_json::Value = response.parse_json().expect("valid JSON");
        assert_eq!(value["answer"], "yes");
        let broken = ChatResponse {
            content: "yes".into(),
            ..response
        };
        let error = broken
            .parse_json::<serde_json::Value>()
            .expect_err("not JSON");
        assert!(matches!(error, LlmError::BadResponse(_)), "{error:?}");
    }

    #[test]
    fn preview_cuts_long_text_on_a_char_boundary() {
        let text = "é".repeat(300);
        let cut = preview(&text);
        assert_eq!(cut.chars().count(), 201);
        assert_eq!(preview("short"), "short");
    }
}
