//! agora-server's integration tests: one test binary (on 2 cores every binary is another link), one
//! module per area.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod a2a;
mod a2a_sender;
mod agent_protocol;
mod browser;
mod compiled_routines;
mod dashboard;
mod dashboard_browser;
mod edge;
mod fixtures;
mod http;
mod ladder;
mod layered_protocols;
mod mcp;
mod negotiation;
mod negotiation_db;
mod protocol_db;
mod python_interop;
mod real_model;
mod real_model_acting;
mod real_model_negotiation;
mod real_model_programmer;
mod real_model_sender_routine;
mod seed_protocols;
mod sender;
mod sender_routines;
mod support;
mod tracing;
mod wasm_routines;
