//! `Fetcher::post_empty`, the notification POST, against a real server on 127.0.0.1: the same
//! address guard as a fetch, no redirects followed, non-2xx statuses reported. And the
//! `TargetClient` for operator-configured targets: no address guard, but no redirects, a size
//! limit on every body and a deadline on every exchange.

#![allow(clippy::unwrap_used)]

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Duration;

use agora_fetch::{FetchError, FetchPolicy, Fetcher, TargetClient, TargetPolicy, TargetRequest};
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;

/// Bytes in the `/big` body.
const BIG: usize = 64 * 1024;

/// Serves `/ok`, `/fail`, `/echo`, `/big`, `/slow` and `/moved` on an ephemeral loopback port; returns its base URL and
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
        .route("/echo", post(|body: String| async move { body }))
        .route("/big", post(|| async { "x".repeat(BIG) }))
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
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

/// The test server and a target client with `policy` for it; the server stops when dropped.
struct Target {
    url: String,
    client: TargetClient,
    task: tokio::task::JoinHandle<()>,
}

impl Target {
    async fn start(policy: TargetPolicy) -> Self {
        let (url, _, task) = server().await;
        let client = TargetClient::new(policy).unwrap();
        Self { url, client, task }
    }

    /// `POST {path}` to the test server.
    fn post(&self, path: &str) -> TargetRequest {
        self.client.post(&format!("{}{path}", self.url))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.task.abort();
    }
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

#[tokio::test]
async fn a_target_client_posts_to_loopback_without_following_redirects() {
    let target = Target::start(TargetPolicy::default()).await;
    let response = target.post("/echo").json(&[1, 2, 3]).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await.unwrap(), b"[1,2,3]");

    let moved = target.post("/moved").send().await.unwrap();
    assert_eq!(moved.status(), 307, "the redirect is the caller's to read");
}

#[tokio::test]
async fn a_target_body_over_the_limit_is_refused() {
    let target = Target::start(TargetPolicy {
        max_bytes: BIG - 1,
        ..TargetPolicy::default()
    })
    .await;
    let response = target.post("/big").send().await.unwrap();
    let error = response.bytes().await.unwrap_err();
    assert!(
        matches!(error, FetchError::TooLarge { limit } if limit == BIG - 1),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        format!("response body exceeds {} bytes", BIG - 1)
    );

    let exact = target.post("/big").max_bytes(BIG).send().await.unwrap();
    assert_eq!(
        exact.bytes().await.unwrap().len(),
        BIG,
        "a request sets its own limit"
    );
}

#[tokio::test]
async fn a_target_exchange_has_a_deadline() {
    let target = Target::start(TargetPolicy::default()).await;
    let result = target
        .post("/slow")
        .timeout(Duration::from_millis(100))
        .send()
        .await;
    assert!(matches!(result, Err(FetchError::Timeout)), "{result:?}");
}
