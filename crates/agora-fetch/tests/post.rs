//! `Fetcher::post_empty`, the notification POST, against a real server on 127.0.0.1: the same
//! address guard as a fetch, no redirects followed, non-2xx statuses reported.

#![allow(clippy::unwrap_used)]

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agora_fetch::{FetchError, FetchPolicy, Fetcher};
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;

/// Serves `/ok`, `/fail` and `/moved` on an ephemeral loopback port; returns its base URL and
/// the number of POSTs `/ok` and `/fail` received.
async fn server() -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let (ok_hits, fail_hits) = (hits.clone(), hits.clone());
    let router = Router::new()
        .route(
            "/ok",
            post(move || async move {
                ok_hits.fetch_add(1, Ordering::SeqCst);
                StatusCode::ACCEPTED
            }),
        )
        .route(
            "/fail",
            post(move || async move {
                fail_hits.fetch_add(1, Ordering::SeqCst);
                StatusCode::INTERNAL_SERVER_ERROR
            }),
        )
        .route(
            "/moved",
            post(|| async {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, "/ok")],
                    "",
                )
                    .into_response()
            }),
        );
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    (url, hits, task)
}

#[tokio::test]
async fn the_default_policy_refuses_to_post_to_loopback() {
    let (url, hits, task) = server().await;
    let fetcher = Fetcher::new(FetchPolicy::default()).unwrap();
    let result = fetcher.post_empty(&format!("{url}/ok")).await;
    assert!(
        matches!(result, Err(FetchError::AddressRefused { .. })),
        "{result:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing was sent");
    task.abort();
}

#[tokio::test]
async fn allowlisted_posts_arrive_and_report_their_status() {
    let (url, hits, task) = server().await;
    let fetcher = Fetcher::new(FetchPolicy::default().allowing_loopback()).unwrap();
    fetcher.post_empty(&format!("{url}/ok")).await.unwrap();
    assert!(matches!(
        fetcher.post_empty(&format!("{url}/fail")).await,
        Err(FetchError::Status(500))
    ));
    assert!(
        matches!(
            fetcher.post_empty(&format!("{url}/moved")).await,
            Err(FetchError::Status(307))
        ),
        "redirects are not followed"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    task.abort();
}
