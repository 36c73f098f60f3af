//! The agora node engine.
//!
//! A [`Node`] answers Agora requests: it resolves and verifies protocol
//! documents, decides whether it can serve them, and answers with a routine
//! when one is active for the protocol, otherwise with its LLM and tools. It
//! knows nothing of HTTP servers, SQL, model APIs or WebAssembly: those live in
//! `agora-server`, `agora-store`, `agora-llm` and `agora-routines`, and reach
//! the engine as typed values and traits.

pub mod accounting;
pub mod acting;
pub mod checker;
pub use agora_store::clock;
pub mod config;
mod conversation;
mod envelope;
pub mod focus;
pub mod negotiation;
mod node;
pub mod observer;
mod programmer;
pub mod resolver;
pub mod responder;
pub mod routine_registry;
mod routine_table;
pub mod routines;
mod sender;
mod shadow;
pub mod task;
#[cfg(test)]
mod test_peer;
mod text;
pub mod tools;

pub use accounting::{Category, Client, Tally};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{
    Activation, ConversationConfig, NodeConfig, OnDisagreement, ProgrammerConfig, ResponderConfig,
    RoutineConfig, SenderConfig, ShadowConfig, SuitabilityMode, Thresholds,
};
pub use focus::Focus;
pub use negotiation::{Negotiated, NegotiationConfig, NegotiationError};
pub use node::{
    Admission, FollowUpError, ForeignSender, MessageReply, Node, NodeError, NodeParts, Review,
    Rung, SenderReviewer, Speaker, TaskRun, Transcript,
};
pub use observer::{Observer, RequestHooks, Step, ToolCaller, observed};
pub use routine_registry::{
    ExampleOutcome, ProtocolInput, RegistryError, RoutineRegistry, RoutineSpec,
};
pub use routine_table::{GrantedTools, SyncReport};
pub use routines::{
    LoadedRoutine, RoutineEngine, RoutineError, RoutineLimits, RoutineManifest, RoutineSource,
    ToolHost,
};
pub use sender::fit::ProtocolFit;
pub use sender::{BadReply, ExchangeError, SendError, SendOutcome, Unreachable};
pub use task::{Task, TaskError};
pub use tools::{McpServerConfig, Tool, ToolConfig, ToolError, ToolKind, ToolRegistry, ToolSpec};
