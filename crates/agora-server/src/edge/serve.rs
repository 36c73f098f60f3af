//! The connection loop: hyper with a header timer, a connection cap and a shutdown deadline.
//!
//! `axum::serve` sets no timer on hyper, so hyper's header read timeout never fires there: a
//! client that sends a header byte every few seconds holds its connection (and a file
//! descriptor) forever (demo/network/RESULTS.md, "Findings behind the node's checks"). Here
//! every connection gets hyper's `TokioTimer` and `header_read_timeout`, the number of open
//! connections is capped (further clients wait in the kernel's accept queue), and each request
//! carries the peer's address as axum's `ConnectInfo`.
//!
//! A stop is graceful with a deadline: the listener closes, connections finish their requests
//! and close; after `shutdown_grace_secs` the edge's drain token fires, so requests still running
//! are answered `503 busy` (see [`super::Edge::within_deadline`]), and a second later whatever
//! remains is dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::Edge;

/// How long requests answered `busy` at the end of the grace get to be written.
const LAST_WORDS: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` under `edge`'s connection limits until `shutdown` fires, then stops
/// within the grace (see the module docs).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    edge: &Edge,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let settings = edge.settings();
    let connections = Arc::new(Semaphore::new(settings.max_connections.max(1)));
    let header_timeout = Duration::from_secs(settings.header_timeout_secs.max(1));
    let graceful = GracefulShutdown::new();
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        while tasks.try_join_next().is_some() {}
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors, or a connection reset before accept: not fatal.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            app.clone(),
            move |mut request: axum::http::Request<Incoming>| {
                request
                    .extensions_mut()
                    .insert(ConnectInfo::<SocketAddr>(peer));
                request
            },
        ));
        let mut builder = Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout);
        builder.http2().timer(TokioTimer::new());
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tasks.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, %peer, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    let closed = graceful.shutdown();
    tokio::pin!(closed);
    let grace = Duration::from_secs(settings.shutdown_grace_secs);
    tokio::select! {
        _ = &mut closed => {}
        _ = tokio::time::sleep(grace) => {
            tracing::warn!(grace_secs = grace.as_secs(), "requests still running at the end of the grace are answered busy");
            edge.drain_token().cancel();
            if tokio::time::timeout(LAST_WORDS, closed).await.is_err() {
                tracing::warn!(open = tasks.len(), "connections still open after the grace were dropped");
                tasks.abort_all();
            }
        }
    }
    Ok(())
}
