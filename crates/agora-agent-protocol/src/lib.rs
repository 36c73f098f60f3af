//! The node as an agent of the Agent Protocol (supercog-ai's "Agent Protocol (draft - 2025
//! edition)"), free of HTTP: the protocol's JSON ([`wire`]: run requests in, events out) and the
//! runs a node holds in memory, bounded, fed by the engine's [`agora_node::Observer`]
//! ([`runs`]). The routes, the edge and the SSE framing are `agora-server`'s
//! (`agent_protocol/`), as A2A's and MCP's are.

pub mod runs;
pub mod wire;

pub use runs::{AgentRuns, RegistryFull, Run, RunLimits, RunObserver};
pub use wire::{Event, EventKind, FinishReason, MAX_EVENT_TEXT, RunRequest, RunRequestError};
