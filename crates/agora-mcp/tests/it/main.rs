//! agora-mcp's integration tests: one test binary, one module per direction.
//!
//! The `mcp_interop_*` tests talk to MCP peers no one here wrote, installed by
//! `scripts/install.sh` (see `AGORA_MCP_*` in `~/.cache/agora/env.sh`); they are `#[ignore]`d and
//! run by `scripts/test.sh`.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod peers;
mod servers;
