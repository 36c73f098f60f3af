//! MCP both ways, and the only crate that names `rmcp` (the official Rust SDK).
//!
//! - [`servers`]: the node as an MCP client. Every `[[node.tools]] kind = "mcp"` server, over
//!   stdio or streamable HTTP, has its tools offered as ordinary node tools.
//! - [`front`]: the node as an MCP server. Its tools run the node's tasks up the sender's ladder,
//!   send natural-language messages, list what an agent supports and search a protocol database;
//!   served over stdio (`agora mcp serve`) or streamable HTTP (`/mcp`, mounted by the server
//!   crate behind a token).
//! - [`result`]: what a node tool returns for an MCP tool result (pure).
//!
//! Spec revision: rmcp 3.11 speaks MCP 2026-07-28 and negotiates the older revisions its peers
//! ask for (the Python SDK and the Inspector used in the tests do).

pub mod front;
pub mod result;
pub mod servers;

pub use front::{AgoraMcp, HttpService, SchemaError, TargetRules, http_service, serve_stdio};
pub use servers::{ConnectError, McpServers, connect};
