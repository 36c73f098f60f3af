//! A scripted LLM for deterministic orchestration tests (test code only).
//!
//! A test gives a function from the request to the answer text; the fake
//! records every request so tests can assert on prompts and call counts.
//! Token counts are estimated (4 characters a token) so ledger arithmetic
//! can be checked.

use std::sync::{Arc, Mutex};

use agora_llm::{
    ChatRequest, ChatResponse, Llm, LlmError, OutputFormat, Role, ToolCallRequest, Usage,
};

/// What the script answers to one request.
pub type Turn = Result<String, LlmError>;

type Script =
    dyn Fn(&ChatRequest) -> Result<(String, Vec<ToolCallRequest>), LlmError> + Send + Sync;

/// An LLM that answers from a test's script.
pub struct ScriptedLlm {
    script: Box<Script>,
    calls: Mutex<Vec<ChatRequest>>,
}

impl ScriptedLlm {
    /// An LLM answering with `script`.
    pub fn new(script: impl Fn(&ChatRequest) -> Turn + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            script: Box::new(move |request| script(request).map(|content| (content, Vec::new()))),
            calls: Mutex::new(Vec::new()),
        })
    }

    /// An LLM whose script may also answer with native tool calls.
    pub fn with_tool_calls(
        script: impl Fn(&ChatRequest) -> Result<(String, Vec<ToolCallRequest>), LlmError>
        + Send
        + Sync
        + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            script: Box::new(script),
            calls: Mutex::new(Vec::new()),
        })
    }

    /// An LLM that must not be called: it panics, naming the request.
    pub fn unreachable() -> Arc<Self> {
        Self::new(|request| {
            panic!(
                "the LLM was called, but this test expects no LLM call: {:?}",
                last_user_message(request)
            )
        })
    }

    /// Every request received so far.
    pub fn calls(&self) -> Vec<ChatRequest> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// How many requests were received.
    pub fn call_count(&self) -> usize {
        self.calls.lock().map(|c| c.len()).unwrap_or(0)
    }
}

#[async_trait::async_trait]
impl Llm for ScriptedLlm {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        // As a server with one slot that keeps its prompt cache: the prompt's beginning shared
        // with the previous call's counts as read from the cache.
        let mut cached_chars = 0;
        if let Ok(mut calls) = self.calls.lock() {
            if let Some(previous) = calls.last() {
                cached_chars = shared_prefix_chars(previous, request);
            }
            calls.push(request.clone());
        }
        // A script may block (a test's gate holding the model "busy"). On a multi-thread runtime
        // it runs in `block_in_place`, so the worker hands its queue and the I/O and time
        // drivers to another thread: a blocked worker holding the drivers stalled every timer
        // and socket of a PostgreSQL-backed test. A current-thread runtime has no other
        // thread to hand them to, so there the script runs in place.
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let (content, tool_calls) = if multi_thread {
            tokio::task::block_in_place(|| (self.script)(request))?
        } else {
            (self.script)(request)?
        };
        let prompt_chars: usize = request.messages.iter().map(|m| m.content.len()).sum();
        Ok(ChatResponse {
            usage: Usage {
                prompt_tokens: (prompt_chars / 4) as u32,
                completion_tokens: (content.len() / 4).max(1) as u32,
                cached_prompt_tokens: (cached_chars / 4) as u32,
            },
            content,
            model: "scripted".into(),
            latency_ms: 0,
            tool_calls,
        })
    }

    fn model(&self) -> String {
        "scripted".into()
    }
}

/// The JSON schema's name, if the request asks for one.
pub fn schema_name(request: &ChatRequest) -> Option<&str> {
    match &request.format {
        OutputFormat::JsonSchema { name, .. } => Some(name),
        OutputFormat::Text => None,
    }
}

/// The last user message.
pub fn last_user_message(request: &ChatRequest) -> &str {
    request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| m.content.as_str())
        .unwrap_or("")
}

/// The system prompt.
pub fn system_prompt(request: &ChatRequest) -> &str {
    request
        .messages
        .iter()
        .find(|m| m.role == Role::System)
        .map(|m| m.content.as_str())
        .unwrap_or("")
}

/// How many characters the prompts of `a` and `b` (their messages' contents, in order) share
/// from the start.
fn shared_prefix_chars(a: &ChatRequest, b: &ChatRequest) -> usize {
    let text = |r: &ChatRequest| -> Vec<u8> {
        r.messages
            .iter()
            .flat_map(|m| m.content.as_bytes().iter().copied())
            .collect()
    };
    let (a, b) = (text(a), text(b));
    a.iter().zip(&b).take_while(|(x, y)| x == y).count()
}
