//! agora-cli's integration tests: one test binary (on 2 cores every binary is another link), one
//! module per area.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod architecture;
mod cluster;
mod common;
mod crash;
mod load;
mod mcp_cli;
mod network_demo_cli;
mod protocol_db_cli;
mod replicas;
mod routine_cli;
