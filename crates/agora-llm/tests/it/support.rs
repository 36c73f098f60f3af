//! What the test modules share: the yes/no question every backend is asked, and a fake HTTP
//! server on a loopback port.

use std::net::SocketAddr;

use agora_llm::{ChatRequest, Message};
use serde_json::json;
use tokio::task::JoinHandle;

/// A question answered as `{"answer": "yes" | "no"}` under a strict JSON schema.
pub fn yes_no(system: &str, question: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::system(system), Message::user(question)])
        .json_schema(
            "answer",
            json!({
                "type": "object",
                "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
                "required": ["answer"],
                "additionalProperties": false
            }),
        )
        .max_tokens(20)
}

/// `http://127.0.0.1:PORT` with a port nothing listens on (bound, then closed again).
pub fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("loopback port");
    let port = listener.local_addr().expect("bound").port();
    format!("http://127.0.0.1:{port}")
}

/// Serves `app` on 127.0.0.1 with an ephemeral port until the task is aborted.
pub async fn serve(app: axum::Router) -> (SocketAddr, JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("loopback port");
    let address = listener.local_addr().expect("bound");
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("fake server runs");
    });
    (address, task)
}
