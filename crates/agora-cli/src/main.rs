//! `agora`: run nodes and protocol databases, manage protocol documents and routines, inspect
//! the ledger.

mod demo_cmd;
mod mcp_cmd;
mod negotiate_cmd;
mod node_cmd;
mod pd_cmd;
mod protocol_db_cmd;
mod routine_cmd;
mod send_cmd;
mod stats_cmd;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "agora",
    version,
    about = "An Agora meta-protocol node for networks of LLM agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node.
    Node {
        #[command(subcommand)]
        command: node_cmd::NodeCommand,
    },
    /// Protocol documents: hash, add, list, allow, deny.
    Pd {
        /// Node configuration file (for the store URL).
        #[arg(long, short, global = true, env = "AGORA_CONFIG")]
        config: Option<PathBuf>,
        #[command(subcommand)]
        command: pd_cmd::PdCommand,
    },
    /// Routines: add, list, show, test, enable, disable, rm.
    Routine {
        /// Node configuration file (for the store URL, the tools and the routine runtime).
        #[arg(long, short, global = true, env = "AGORA_CONFIG")]
        config: Option<PathBuf>,
        #[command(subcommand)]
        command: routine_cmd::RoutineCommand,
    },
    /// Run one task against another agent and print its validated output.
    Send {
        /// Node configuration file (store, LLM, tasks).
        #[arg(long, short, env = "AGORA_CONFIG")]
        config: Option<PathBuf>,
        #[command(flatten)]
        args: send_cmd::SendArgs,
    },
    /// Negotiate a protocol for a task with another agent; print the agreed document.
    Negotiate {
        /// Node configuration file (store, LLM, tasks).
        #[arg(long, short, env = "AGORA_CONFIG")]
        config: Option<PathBuf>,
        #[command(flatten)]
        args: negotiate_cmd::NegotiateArgs,
    },
    /// Print the LLM ledger and per-protocol usage of a node's store.
    Stats {
        /// Node configuration file (for the store URL).
        #[arg(long, short, env = "AGORA_CONFIG")]
        config: Option<PathBuf>,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Run a protocol database: stores, serves, searches and syncs protocol documents.
    ProtocolDb {
        #[command(subcommand)]
        command: protocol_db_cmd::ProtocolDbCommand,
    },
    /// Demos: the paper's weather scenario and its 100-agent network.
    Demo {
        #[command(subcommand)]
        command: demo_cmd::DemoCommand,
    },
    /// The node as an MCP server: `agora mcp serve` speaks MCP over stdio.
    Mcp {
        #[command(subcommand)]
        command: mcp_cmd::McpCommand,
    },
    /// Run the local LLM server (llama.cpp) in the foreground.
    Llm {
        #[command(subcommand)]
        command: node_cmd::LlmCommand,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Node { command } => node_cmd::run(command).await,
        Command::Pd { config, command } => pd_cmd::run(config.as_deref(), command).await,
        Command::Routine { config, command } => routine_cmd::run(config.as_deref(), command).await,
        Command::Send { config, args } => send_cmd::run(config.as_deref(), args).await,
        Command::Negotiate { config, args } => negotiate_cmd::run(config.as_deref(), args).await,
        Command::Stats { config, json } => stats_cmd::run(config.as_deref(), json).await,
        Command::ProtocolDb { command } => protocol_db_cmd::run(command).await,
        Command::Demo { command } => demo_cmd::run(command).await,
        Command::Mcp { command } => mcp_cmd::run(command).await,
        Command::Llm { command } => node_cmd::run_llm(command).await,
    }
}
