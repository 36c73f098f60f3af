//! `agora protocol-db run`: a protocol database in the foreground.

use std::path::PathBuf;

use agora_server::protocol_db::{
    ProtocolDbServerConfig, RunningProtocolDb, build_protocol_db, serve_protocol_db,
};
use anyhow::Context;
use clap::Subcommand;
use tokio_util::sync::CancellationToken;

use crate::node_cmd::ServeArgs;

#[derive(Subcommand)]
pub enum ProtocolDbCommand {
    /// Start a protocol database and serve until Ctrl-C.
    Run {
        /// Configuration file (TOML).
        #[arg(long, short, env = "AGORA_PROTOCOL_DB_CONFIG")]
        config: Option<PathBuf>,
        #[command(flatten)]
        serve: ServeArgs,
        /// The base URL others reach this database at (default http://<listen>).
        #[arg(long)]
        public_url: Option<String>,
        /// A peer database's base URL; repeat for several (replaces the file's peers).
        #[arg(long = "peer")]
        peers: Vec<String>,
    },
}

pub async fn run(command: ProtocolDbCommand) -> anyhow::Result<()> {
    let ProtocolDbCommand::Run {
        config,
        serve: ServeArgs { listen, store },
        public_url,
        peers,
    } = command;
    let _telemetry = agora_server::telemetry::init("info,agora=info,tower_http=warn")
        .context("starting telemetry")?;
    let mut config =
        ProtocolDbServerConfig::load(config.as_deref()).context("loading the configuration")?;
    if let Some(listen) = listen {
        config.listen = listen;
    }
    if let Some(store) = store {
        config.store = store;
    }
    if public_url.is_some() {
        config.public_url = public_url;
    }
    if !peers.is_empty() {
        config.peers = peers;
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    // Port 0 picks a free port; the public URL must name the one picked.
    config.listen = listener.local_addr().context("reading the bound address")?;
    let running = build_protocol_db(config).await?;
    print_banner(&running);
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        eprintln!("shutting down…");
        signal.cancel();
    });
    serve_protocol_db(listener, &running, shutdown).await
}

fn print_banner(running: &RunningProtocolDb) {
    let config = &running.config;
    let url = config.public_url();
    println!(
        "agora protocol database listening on http://{}",
        config.listen
    );
    println!("  public URL: {url}");
    println!("  store: {}", config.store);
    let writes = match (config.token(), config.open_writes) {
        (Some(_), _) => "bearer token",
        (None, true) => "open to anyone",
        (None, false) => "disabled (set write_token, AGORA_PROTOCOL_DB_TOKEN or open_writes)",
    };
    println!("  writes: {writes}");
    if config.peers.is_empty() {
        println!("  peers: none");
    } else {
        println!(
            "  peers: {} (pulled every {} s)",
            config.peers.join(", "),
            config.sync_interval_secs
        );
    }
    println!();
    println!("Publish a protocol document, then search for it:");
    println!(
        "  curl -s {url}/protocols -H \"authorization: Bearer $AGORA_PROTOCOL_DB_TOKEN\" --data-binary @protocols/weather-forecast.md"
    );
    println!("  curl -s '{url}/protocols?q=weather'");
    println!("Metrics: {url}/metrics. Press Ctrl-C to stop.");
}
