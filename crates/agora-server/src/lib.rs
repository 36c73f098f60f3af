//! The HTTP edge of an agora node.
//!
//! This crate turns HTTP into [`agora_node::Node`] calls and back: the axum
//! router, a JSON extractor that enforces size limits and answers malformed
//! input in the protocol's error shape, admin authentication, the Prometheus
//! `/metrics` text, configuration loading (file, env, flags, routine folders),
//! tracing set-up, the routine runtime, the edge's defences against hostile or heavy use
//! ([`edge`]: timeouts, budgets, client tokens, idempotency, the LLM work bound), and the run loop
//! with a bounded graceful shutdown.
//! [`protocol_db`] serves the protocol database role the same way; [`agent_protocol`] serves the
//! node to Agent Protocol clients under `/agent-protocol`.
//!
//! API boundary: axum, tower and HTTP status codes never leave this crate.

pub mod a2a;
pub mod admin;
pub mod agent_protocol;
pub mod app;
mod auth;
pub mod config;
pub mod dashboard;
pub mod edge;
pub mod error;
pub mod extract;
pub mod manifest;
pub mod metrics;
pub mod protocol_db;
pub mod runtime;
pub mod telemetry;

pub use app::{AppState, serve_state};
pub use config::{
    A2aSettings, Config, EdgeSettings, FetchSettings, LlmBackend, LlmSettings,
    RoutineRuntimeSettings,
};
pub use runtime::{RunningNode, build_node, build_routine_engine, serve};
