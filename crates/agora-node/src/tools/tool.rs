//! The tool contract: what a tool is ([`ToolSpec`]), how it fails ([`ToolError`]) and how it
//! is called ([`Tool`]). A leaf the tools and the registry share.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a tool is, as shown to an LLM or a routine author.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Unique name (letters, digits, `_` and `-`).
    pub name: String,
    /// What the tool does and what it returns.
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
    /// JSON schema of the result, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returns: Option<Value>,
}

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// No tool by that name is available here.
    #[error("unknown tool {0:?}")]
    Unknown(String),
    /// The arguments do not match the tool's schema.
    #[error("invalid arguments for {tool}: {reason}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// The tool ran and failed.
    #[error("tool {tool} failed: {reason}")]
    Failed {
        /// The tool.
        tool: String,
        /// What went wrong.
        reason: String,
    },
}

impl ToolError {
    /// What the responder tells the model after this error: to fix the arguments or answer
    /// without the tool.
    pub fn feedback(&self) -> String {
        format!("{self}. Fix the arguments, or answer without this tool.")
    }

    /// [`ToolError::Failed`]: `tool` ran and failed for `reason`.
    pub fn failed(tool: impl Into<String>, reason: impl Into<String>) -> Self {
        ToolError::Failed {
            tool: tool.into(),
            reason: reason.into(),
        }
    }
}

/// A callable tool.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// The tool's description.
    fn spec(&self) -> &ToolSpec;
    /// Runs the tool on already-validated arguments.
    async fn call(&self, arguments: Value) -> Result<Value, ToolError>;
    /// Whether a call with `arguments` changes anything: `Some(false)` for a call known only to
    /// read (a SELECT), `Some(true)` for one known to write, `None` (the default) when the tool
    /// cannot tell. The responder's `require_effects` check asks it.
    fn changes_state(&self, _arguments: &Value) -> Option<bool> {
        None
    }
    /// What a shadow check may call in this tool's place (see [`Scratch`]). The default,
    /// [`Scratch::Unsupported`], keeps every routine granted the tool out of shadow checks.
    async fn scratch(&self) -> Result<Scratch, ToolError> {
        Ok(Scratch::Unsupported)
    }
}

/// What a shadow check (an LLM answering again what a routine answered, off the request path)
/// may call in a tool's place, so that nothing is written twice.
pub enum Scratch {
    /// Nothing a call does lasts (a pure function, a read-only view): the tool itself serves.
    Stateless,
    /// A copy of the tool's state, taken now: calls on it change only the copy.
    Copy(Box<dyn ScratchCopy>),
    /// The tool's effects cannot be kept off the real world (an HTTP endpoint, another server).
    Unsupported,
}

impl Scratch {
    /// A tool without state of its own to copy: [`Scratch::Stateless`] when it is declared to
    /// only read, [`Scratch::Unsupported`] otherwise.
    pub fn declared(read_only: bool) -> Self {
        if read_only {
            Self::Stateless
        } else {
            Self::Unsupported
        }
    }
}

/// A tool over a copy of its state (see [`Scratch::Copy`]). Dropping it discards the copy.
#[async_trait::async_trait]
pub trait ScratchCopy: Send + Sync {
    /// The tool, calling on this copy.
    fn tool(&self) -> std::sync::Arc<dyn Tool>;
    /// Another copy of this copy's state as it is now.
    async fn fork(&self) -> Result<Box<dyn ScratchCopy>, ToolError>;
    /// The copy's whole state, so two copies' effects can be compared.
    async fn state(&self) -> Result<Value, ToolError>;
}
