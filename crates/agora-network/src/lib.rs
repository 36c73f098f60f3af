//! The paper's 100-agent network demo on agora nodes.
//!
//! - `spec`: the network (servers, users, helpers, protocol databases, tasks, tools) and the
//!   screenplay, embedded from `demo/network/`.
//! - `tools`: the servers' built-in demo tools: seeded mocks, SQL over the server's own
//!   database, and external tools that go through a helper node to another server.
//! - `network`: one process hosting every node on loopback, sharing one LLM and one routine
//!   runtime.
//! - `run`: replaying the screenplay, attributing every LLM call to its query.
//! - `record`: what a run leaves behind; `report`: the report computed from run records.
//! - `demo`: `agora demo network`'s entry point (the LLM, recording, the run).

pub mod demo;
pub mod network;
pub mod record;
pub mod report;
pub mod run;
pub mod spec;
pub mod tools;

pub use record::{CallTotals, Mode, NetworkStats, QueryRecord, RunRecord};
