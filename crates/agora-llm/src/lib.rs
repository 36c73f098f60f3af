//! The LLM abstraction for agora.
//!
//! Every LLM role of a node (protocol checker, responder, programmer,
//! negotiator, querier) talks to one small trait, [`Llm`], so that the same
//! orchestration code runs against OpenAI, a local llama.cpp server, a
//! recorded cassette, or a scripted fake in tests. The request type carries an
//! [`OutputFormat`] because small local models are only dependable when their
//! output is constrained by a JSON schema.
//!
//! Backends:
//! - [`OpenAiBackend`]: any OpenAI-compatible endpoint (OpenAI, vLLM,
//!   llama.cpp's `llama-server`), through async-openai;
//! - [`ReplayLlm`] and [`RecordingLlm`]: JSONL cassettes, so demos and CI can
//!   run without a model and a crashed recording can resume;
//! - [`LocalServer`]: starts and owns a `llama-server` process.
//!
//! API boundary: async-openai is named only in `openai.rs`; no type of it
//! appears in this crate's public API. The crate never reads environment
//! variables: every setting comes in through a config value.
#![deny(missing_docs)]

pub mod cassette;
pub mod error;
pub mod local;
pub mod openai;
pub mod price;
pub mod request;

use std::sync::Arc;

pub use cassette::{RecordingLlm, ReplayLlm, request_key};
pub use error::LlmError;
pub use local::{LocalServer, LocalServerConfig, wait_healthy};
pub use openai::{OpenAiBackend, OpenAiConfig};
pub use price::PriceTable;
pub use request::{
    ChatRequest, ChatResponse, Message, OutputFormat, Role, ToolCallRequest, ToolDefinition, Usage,
};

/// A chat model: one request in, one completion out.
///
/// Implementations must be cheap to share (`Arc<dyn Llm>`) and safe to call
/// concurrently; bounding concurrency is the implementation's job.
#[async_trait::async_trait]
pub trait Llm: Send + Sync {
    /// Sends one chat request and waits for the whole completion.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError>;

    /// The model name to record in the LLM ledger.
    fn model(&self) -> String;
}

/// Lets an `Arc<L>` (including `Arc<dyn Llm>`) stand wherever an `Llm` is
/// expected, so wrappers such as [`RecordingLlm`] can hold shared backends.
#[async_trait::async_trait]
impl<L: Llm + ?Sized> Llm for Arc<L> {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        (**self).chat(request).await
    }

    fn model(&self) -> String {
        (**self).model()
    }
}
