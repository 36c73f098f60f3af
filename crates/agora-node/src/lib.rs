//! The agora node engine.
//!
//! A [`Node`] answers Agora requests: it resolves and verifies protocol
//! documents, decides whether it can serve them, and answers with its LLM
//! and tools. It knows nothing of HTTP servers, SQL or model APIs: those
//! live in `agora-server`, `agora-store` and `agora-llm`, and reach the
//! engine as typed values.

pub mod accounting;
pub mod checker;
pub mod clock;
pub mod config;
mod conversation;
mod node;
pub mod resolver;
pub mod responder;
pub mod routines;
pub mod tools;

pub use accounting::{Category, Tally};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{ConversationConfig, NodeConfig, ResponderConfig, SuitabilityMode, Thresholds};
pub use node::{FollowUpError, Node, NodeError, NodeParts};
pub use routines::{
    LoadedRoutine, RoutineEngine, RoutineError, RoutineLimits, RoutineSource, ToolHost,
};
pub use tools::{Tool, ToolConfig, ToolError, ToolKind, ToolRegistry, ToolSpec};
