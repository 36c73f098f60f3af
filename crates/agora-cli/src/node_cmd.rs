//! `agora node run` and `agora llm serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agora_llm::{LocalServer, LocalServerConfig};
use agora_server::config::LlmBackend;
use agora_server::{Config, build_node, serve};
use anyhow::Context;
use clap::{Args, Subcommand};
use tokio_util::sync::CancellationToken;

/// Where a server listens and stores, overriding its configuration file.
#[derive(Args)]
pub struct ServeArgs {
    /// Listen address (overrides the file).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Store URL (overrides the file).
    #[arg(long)]
    pub store: Option<String>,
}

#[derive(Subcommand)]
pub enum NodeCommand {
    /// Start a node and serve until Ctrl-C.
    Run {
        /// Configuration file (TOML).
        #[arg(long, short, env = "AGORA_CONFIG")]
        config: Option<PathBuf>,
        #[command(flatten)]
        serve: ServeArgs,
        /// LLM backend: local, openai or replay.
        #[arg(long)]
        llm: Option<String>,
        /// URL of a running OpenAI-compatible local server (skips starting one).
        #[arg(long)]
        llm_url: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum LlmCommand {
    /// Start llama-server with the installed model and wait.
    Serve {
        /// Port (default 8011).
        #[arg(long, default_value_t = 8011)]
        port: u16,
        /// The llama-server binary.
        #[arg(long, env = "AGORA_LLAMA_SERVER")]
        binary: PathBuf,
        /// The GGUF model.
        #[arg(long, env = "AGORA_MODEL")]
        model: PathBuf,
    },
}

pub async fn run(command: NodeCommand) -> anyhow::Result<()> {
    let NodeCommand::Run {
        config,
        serve: ServeArgs { listen, store },
        llm,
        llm_url,
    } = command;
    let mut config = Config::load(config.as_deref()).context("loading the configuration")?;
    let _telemetry = agora_telemetry::init(
        "info,agora=info,tower_http=warn",
        &config.telemetry,
        &config.node.name,
    )
    .context("starting telemetry")?;
    if let Some(listen) = listen {
        if config.node.public_url == format!("http://{}", config.listen) {
            config.node.public_url = format!("http://{listen}");
        }
        config.listen = listen;
    }
    if let Some(store) = store {
        config.store = store;
    }
    if let Some(llm) = llm {
        config.llm.backend = match llm.as_str() {
            "local" => LlmBackend::Local,
            "openai" => LlmBackend::Openai,
            "replay" => LlmBackend::Replay,
            other => anyhow::bail!("--llm must be local, openai or replay, not {other:?}"),
        };
    }
    if let Some(url) = llm_url {
        config.llm.local.url = Some(url);
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let address = listener.local_addr().context("reading the bound address")?;
    let running = build_node(config).await?;
    print_banner(&running, address);
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        eprintln!("shutting down…");
        signal.cancel();
    });
    serve(listener, &running, shutdown).await
}

/// Ctrl-C, or SIGTERM (what service managers and container runtimes send) on Unix.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn print_banner(running: &agora_server::RunningNode, address: SocketAddr) {
    let url = format!("http://{address}");
    println!(
        "agora node {:?} listening on {url}",
        running.config.node.name
    );
    println!("  LLM: {}", running.llm_description);
    println!("  store: {}", running.config.store);
    println!(
        "  tools: {}",
        running
            .node
            .tools()
            .specs()
            .iter()
            .map(|t| t.name.clone())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("  routines: {} active", running.routines.active);
    for (name, reason) in &running.routines.failed {
        println!("  routine {name} could not be loaded (the LLM answers its protocol): {reason}");
    }
    println!();
    println!("Ask it in natural language:");
    println!(
        "  curl -s {url}/ -H 'content-type: application/json' -d '{{\"protocolHash\": null, \"protocolSources\": [], \"body\": \"What is the weather in London, UK on 2024-09-27?\"}}'"
    );
    println!("Use a protocol (the node fetches and checks the document from the data: URI):");
    println!(
        "  scripts/request.sh {url} protocols/weather-forecast.md '{{\"location\": \"London, UK\", \"date\": \"2024-09-27\"}}'"
    );
    println!("Discovery and metrics: {url}/.wellknown  {url}/metrics");
    println!("Press Ctrl-C to stop.");
}

pub async fn run_llm(command: LlmCommand) -> anyhow::Result<()> {
    let LlmCommand::Serve {
        port,
        binary,
        model,
    } = command;
    let server = LocalServer::start(LocalServerConfig {
        port,
        startup_timeout: Duration::from_secs(120),
        ..LocalServerConfig::new(binary, model)
    })
    .await
    .context("starting llama-server")?;
    println!("local LLM server ready: {}", server.base_url());
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    server.stop().await;
    Ok(())
}
