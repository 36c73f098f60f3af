//! Nodes served over HTTP by this crate's router, for the tests that need a real server: the
//! testkit builds the node and binds 127.0.0.1:0, and `serve` plugs in `serve_state`; and
//! [`raw`], a plain request to one.

use std::future::Future;
use std::pin::Pin;

use agora_server::AppState;
use agora_testkit::{NodeBuilder, Served, TestServer};

/// Serves a test node with the node's real router until the test server stops.
pub fn serve(served: Served) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let state = AppState::new(served.node, served.admin_token, served.max_body_bytes, 64);
        let _ = agora_server::app::serve_state(served.listener, state, served.shutdown).await;
    })
}

/// `NodeBuilder::spawn`: builds the node and serves it over HTTP on 127.0.0.1.
pub trait Spawn {
    /// Builds the node and serves it with [`serve`].
    fn spawn(self) -> impl Future<Output = TestServer> + Send;
}

impl Spawn for NodeBuilder {
    fn spawn(self) -> impl Future<Output = TestServer> + Send {
        self.spawn_with(serve)
    }
}

/// A request to `path` on `server`, with `body` as JSON text when given: the status, the body
/// and the content type.
pub async fn raw(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    body: Option<&str>,
) -> (u16, String, Option<String>) {
    let mut request = reqwest::Client::new().request(method, format!("{}{}", server.url, path));
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string());
    (status, response.text().await.unwrap(), content_type)
}
