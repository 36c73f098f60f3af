//! A peer for unit tests of the outbound HTTP path: a small axum server on 127.0.0.1 that
//! answers every request with the same status and body, so a test can hand the node a reply no
//! well-behaved server would send (an oversized one).

use axum::http::StatusCode;

/// Serves `status` and `body` to every request until the test's runtime ends; returns the base
/// URL.
pub(crate) async fn answering(status: u16, body: Vec<u8>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let status = StatusCode::from_u16(status).unwrap();
    let router = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { (status, body) }
    });
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}
