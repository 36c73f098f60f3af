//! A protocol database over HTTP: `agora protocol-db run`.
//!
//! This module builds an [`agora_protocol_db::ProtocolDb`] from a [`ProtocolDbServerConfig`] (store,
//! SSRF-guarded fetcher for the peers, clock), serves its routes (see `routes`), and runs its
//! background loop (periodic pulls, pulls that peers' notifications ask for, notifications to
//! peers) as one tracked task that stops with the server.

mod config;
mod metrics;
mod routes;

use std::sync::Arc;
use std::time::Duration;

use agora_fetch::Fetcher;
use agora_protocol_db::{
    HttpPeerClient, ProtocolDb, ProtocolDbConfig, ProtocolDbParts, SystemClock,
};
use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::ProtocolDbServerConfig;

use crate::runtime::{fetch_policy, open_store};
use routes::{ProtocolDbState, router};

/// A protocol database ready to serve.
pub struct RunningProtocolDb {
    /// The engine.
    pub db: ProtocolDb,
    /// The configuration it was built from.
    pub config: ProtocolDbServerConfig,
}

/// Opens (and migrates) the store, builds the peer fetcher and assembles the database.
pub async fn build_protocol_db(
    config: ProtocolDbServerConfig,
) -> anyhow::Result<RunningProtocolDb> {
    config.validate().context("checking the configuration")?;
    let store = open_store(&config.store).await?;
    let fetcher =
        Fetcher::new(fetch_policy(&config.fetch)?).context("building the peer fetcher")?;
    let db = ProtocolDb::new(ProtocolDbParts {
        config: ProtocolDbConfig {
            public_url: config.public_url(),
            max_document_bytes: config.max_document_bytes,
            peers: config.peers.clone(),
            notify_every_additions: config.sync_every_additions,
            ..ProtocolDbConfig::default()
        },
        store,
        peer_client: Arc::new(HttpPeerClient::new(fetcher)),
        clock: Arc::new(SystemClock),
    });
    Ok(RunningProtocolDb { db, config })
}

/// Serves until `shutdown` fires, then drains in-flight requests and the background loop.
pub async fn serve_protocol_db(
    listener: TcpListener,
    running: &RunningProtocolDb,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let tasks = TaskTracker::new();
    let interval = match running.config.sync_interval_secs {
        0 => None,
        secs => Some(Duration::from_secs(secs)),
    };
    let db = running.db.clone();
    let background = shutdown.clone();
    tasks.spawn(async move { db.run(interval, background).await });
    tasks.close();
    let state = ProtocolDbState {
        db: running.db.clone(),
        token: running.config.token().map(Arc::from),
        open_writes: running.config.open_writes,
        metrics: Arc::new(metrics::ProtocolDbMetrics::new()),
    };
    // The node's connection loop with its default limits: a header timeout against slow-loris
    // clients, a connection cap, and a bounded stop.
    let edge = crate::edge::Edge::default();
    let served = crate::edge::serve::serve(listener, router(state), &edge, shutdown.clone())
        .await
        .context("serving HTTP");
    shutdown.cancel();
    tasks.wait().await;
    served
}
