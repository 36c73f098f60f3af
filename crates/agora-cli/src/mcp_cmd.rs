//! `agora mcp serve`: the node as an MCP server over stdio, for MCP clients that start their
//! servers as child processes (desktop assistants, IDEs, agent frameworks).
//!
//! The node is built from its configuration (store, LLM, tasks, tools) without serving HTTP;
//! stdout carries MCP messages only, and the log goes to stderr. The tools are those of
//! `agora_mcp::front`. The same server is served over streamable HTTP at `/mcp` by
//! `agora node run`.

use std::path::PathBuf;

use agora_server::Config;
use anyhow::Context;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum McpCommand {
    /// Speak MCP over stdio until the client closes stdin.
    Serve {
        /// Node configuration file (store, LLM, tasks, tools, mcp.allowed_targets).
        #[arg(long, short, env = "AGORA_CONFIG")]
        config: Option<PathBuf>,
    },
}

pub async fn run(command: McpCommand) -> anyhow::Result<()> {
    match command {
        McpCommand::Serve { config } => {
            let config = Config::load(config.as_deref()).context("loading the configuration")?;
            let _telemetry =
                agora_telemetry::init("warn,agora=info", &config.telemetry, &config.node.name)
                    .context("starting telemetry")?;
            let running = agora_server::runtime::build_node(config).await?;
            let front = agora_server::runtime::mcp_front(&running.node, &running.config)?;
            tracing::info!(node = %running.config.node.name, "serving MCP over stdio");
            let served = agora_mcp::serve_stdio(front)
                .await
                .context("serving MCP over stdio");
            running.shutdown().await;
            // Routine-served requests are recorded without waiting for their commit.
            running.node.store().requests().flush_requests().await;
            served
        }
    }
}
