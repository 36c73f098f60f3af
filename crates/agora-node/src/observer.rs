//! The steps of one request as they happen, for a caller that shows them (the HTTP edge's Agent
//! Protocol front turns them into events).
//!
//! A caller passes an [`Observer`] in [`RequestHooks`] to [`crate::Node::handle_hooked`] or
//! [`crate::Node::follow_up_hooked`]; the engine reports every LLM call (from the accountant, so
//! no call escapes it, as none escapes the ledger) and every tool call (the responder's, an
//! active routine's, and a code-as-action program's) while the request runs. Without an
//! observer nothing is reported and nothing is paid for.
//!
//! A task run ([`crate::Node::run_task_observed`]) has no request of its own: its observer is
//! scoped to the run's task ([`scoped`]), and every context the sender opens inside that scope
//! reports to it (its LLM calls: the sender calls no tools).
//!
//! [`Observer::observe`] is called on the request's task: it must not block (push to a bounded
//! buffer and return). Steps carry what the node's tools and LLM returned; a tool's error text
//! can quote an internal URL or an OS error, so a front that shows steps to strangers decides
//! what of it to show.

use std::sync::Arc;

use serde_json::Value;

/// Who called a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolCaller {
    /// The LLM responder's tool loop.
    Llm,
    /// The protocol's active routine (no LLM involved).
    Routine,
    /// A program the LLM wrote to answer this request (code as action, see [`crate::acting`]).
    Program,
}

impl ToolCaller {
    /// The spelling shown to callers.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolCaller::Llm => "llm",
            ToolCaller::Routine => "routine",
            ToolCaller::Program => "program",
        }
    }
}

/// One step of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// An LLM call is about to be made.
    LlmCall {
        /// What it is for.
        category: Category,
    },
    /// An LLM call returned (it is in the ledger with the same figures).
    LlmResult {
        /// What it was for.
        category: Category,
        /// The model that answered.
        model: String,
        /// The answer's text.
        content: String,
        /// Prompt tokens.
        prompt_tokens: i64,
        /// Completion tokens.
        completion_tokens: i64,
        /// Cost at the price table's rates, in US dollars.
        cost_usd: f64,
        /// Time the call took, in milliseconds.
        latency_ms: i64,
    },
    /// An LLM call failed (the error is in the log, not here: it can name the model's URL).
    LlmFailed {
        /// What it was for.
        category: Category,
    },
    /// A tool is about to be called.
    ToolCall {
        /// The tool's name.
        tool: String,
        /// The arguments (JSON; a routine's unparsable arguments as a JSON string).
        arguments: Value,
        /// Who called it.
        caller: ToolCaller,
    },
    /// A tool call returned: its value, or its error text.
    ToolResult {
        /// The tool's name.
        tool: String,
        /// The tool's value, or its error.
        result: Result<Value, String>,
        /// Who called it.
        caller: ToolCaller,
    },
}

impl Step {
    /// The step in a sentence a client can show while it waits (a front's progress updates), or
    /// `None` for a step not worth one (an LLM call's result follows its start at once).
    pub fn summary(&self) -> Option<String> {
        match self {
            Step::LlmCall { category } => Some(format!(
                "The language model is working ({}).",
                category.as_str()
            )),
            Step::LlmFailed { .. } => {
                Some("A language model call failed; the node goes on.".into())
            }
            Step::ToolCall { tool, caller, .. } => Some(match caller {
                ToolCaller::Routine => format!("A routine calls the tool {tool}."),
                _ => format!("Calling the tool {tool}."),
            }),
            Step::ToolResult { tool, result, .. } => Some(match result {
                Ok(_) => format!("The tool {tool} answered."),
                Err(_) => format!("The tool {tool} failed."),
            }),
            Step::LlmResult { .. } => None,
        }
    }
}

/// Receives the steps of a request as they happen.
pub trait Observer: Send + Sync {
    /// Takes one step. Called on the request's task: must not block.
    fn observe(&self, step: Step);
}

impl std::fmt::Debug for dyn Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// What a caller other than an Agora peer may add to a request.
#[derive(Debug, Clone, Default)]
pub struct RequestHooks {
    /// Told every step of the request as it happens.
    pub observer: Option<Arc<dyn Observer>>,
    /// The id under which a multiround request opens its conversation (a fresh UUID if
    /// `None`), so a caller can name the conversation before the reply arrives. The caller
    /// must make it unique (a UUID).
    pub conversation_id: Option<String>,
    /// The channel the request came through (another protocol's front, e.g. `a2a`), recorded in
    /// the request ledger instead of the request's kind; `None` for an Agora request.
    pub channel: Option<&'static str>,
}

impl RequestHooks {
    /// Hooks that only name the `channel` the request came through.
    pub fn through(channel: &'static str) -> Self {
        RequestHooks {
            channel: Some(channel),
            ..RequestHooks::default()
        }
    }
}

tokio::task_local! {
    /// The observer of the task run in progress on this task, if any.
    static SCOPED: Arc<dyn Observer>;
}

/// Runs `future` (a call into the node, such as [`crate::Node::send_message`]) with `observer`
/// told of every step of the requests and runs it makes.
pub async fn observed<F: std::future::Future>(observer: Arc<dyn Observer>, future: F) -> F::Output {
    scoped(observer, future).await
}

/// Runs `future` with `observer` told of every step of the contexts opened inside it.
pub(crate) async fn scoped<F: std::future::Future>(
    observer: Arc<dyn Observer>,
    future: F,
) -> F::Output {
    SCOPED.scope(observer, future).await
}

/// The observer scoped to the current task, if any (see [`scoped`]).
pub(crate) fn scoped_observer() -> Option<Arc<dyn Observer>> {
    SCOPED.try_with(Arc::clone).ok()
}

/// What an LLM call was for. The names follow the paper's cost breakdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    /// Answering a request (natural language or a protocol without a routine).
    Conversation,
    /// Deciding whether a protocol suits this node.
    Checking,
    /// Negotiating a protocol.
    Negotiation,
    /// Writing a routine.
    Implementing,
    /// A shadow check: answering again what a routine answered, to compare.
    Shadow,
}

impl Category {
    /// The ledger spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            Category::Conversation => "conversation",
            Category::Checking => "checking",
            Category::Negotiation => "negotiation",
            Category::Implementing => "implementing",
            Category::Shadow => "shadow",
        }
    }
}
