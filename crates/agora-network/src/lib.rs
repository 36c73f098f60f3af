//! The paper's 100-agent network demo on agora nodes.
//!
//! - `spec`: the network (servers, users, helpers, protocol databases, tasks, tools) and the
//!   screenplay, embedded from `demo/network/`.
//! - `tools`: the servers' built-in demo tools: seeded mocks, SQL over the server's own
//!   database, and external tools that go through a helper node to another server.
//! - `network`: building the nodes on loopback: the protocol databases, and the agents of one
//!   process (all of them, or a shard), sharing one LLM client and one routine runtime.
//! - `hosting`: where the agents run, as the runner sees it: in this process, or in worker
//!   processes driven over their stdin and stdout; `worker`: the worker process's side.
//! - `run`: replaying the screenplay, attributing every LLM call to its query.
//! - `record`: what a run leaves behind (each query's output and verdict); `report`: the report
//!   computed from run records, leading with correctness.
//! - `service_db`: a demo server's own SQL database (its business data), bounded and confined
//!   for statements an LLM writes.
//! - `setup`: how the servers answer and program (a node's defaults unless a run says otherwise).
//! - `judge` (re-exported `agora_judge`): the network and screenplay as data, the seeded mocks,
//!   the judge of every answer and the screenplay generator, as pure code.
//! - `demo`: `agora demo network`'s entry point (the LLM, recording, the run).
//! - `weather`: `agora demo weather`, the paper's two-agent weather demo.

pub mod demo;
pub mod hosting;
pub mod network;
pub mod record;
pub mod report;
pub mod run;
pub mod service_db;
pub mod setup;
pub mod spec;
pub mod tools;
pub mod weather;
pub mod worker;

pub use agora_judge as judge;
pub use record::{CallTotals, Mode, NetworkStats, QueryRecord, RunRecord, Sample, ShadowNote};
pub use setup::ServerSetup;
