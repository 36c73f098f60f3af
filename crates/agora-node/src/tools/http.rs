//! HTTP tools: a configured URL that takes the arguments as a JSON POST.
//!
//! The URL comes from the operator's configuration, not from a peer, so it
//! is not behind the SSRF guard that protects protocol fetches; it goes
//! through the node's [`TargetClient`], which still bounds the reply's size
//! and the call's time and follows no redirects.

use std::time::Duration;

use agora_fetch::TargetClient;
use serde_json::Value;

use super::tool::{Scratch, Tool, ToolError, ToolSpec};

/// A tool implemented by an HTTP endpoint.
#[derive(Debug, Clone)]
pub struct HttpTool {
    spec: ToolSpec,
    url: String,
    client: TargetClient,
    timeout: Duration,
    max_reply_bytes: usize,
    read_only: bool,
}

impl HttpTool {
    /// A tool that POSTs its arguments to `url` through `client`, waits at most `timeout` for
    /// the whole reply and reads at most `max_reply_bytes` of it.
    pub fn new(
        spec: ToolSpec,
        url: String,
        client: TargetClient,
        timeout: Duration,
        max_reply_bytes: usize,
    ) -> Self {
        Self {
            spec,
            url,
            client,
            timeout,
            max_reply_bytes,
            read_only: false,
        }
    }

    /// Declares that calls only read (the operator's word): a shadow check may then call the
    /// endpoint, and routines granted the tool are checked.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }
}

#[async_trait::async_trait]
impl Tool for HttpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let failed = |reason: String| ToolError::failed(&self.spec.name, reason);
        let response = self
            .client
            .post(&self.url)
            .json(&arguments)
            .timeout(self.timeout)
            .max_bytes(self.max_reply_bytes)
            .send()
            .await
            .map_err(|e| failed(format!("request failed: {e}")))?;
        let status = response.status();
        let success = response.is_success();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| failed(format!("reading the reply failed: {e}")))?;
        if !success {
            let text = String::from_utf8_lossy(&bytes);
            return Err(failed(format!(
                "HTTP {status}: {}",
                text.chars().take(300).collect::<String>()
            )));
        }
        match serde_json::from_slice(&bytes) {
            Ok(value) => Ok(value),
            Err(_) => Ok(Value::String(String::from_utf8_lossy(&bytes).into_owned())),
        }
    }

    /// An endpoint declared read-only is called as it is; any other may change what is behind
    /// it, so routines granted it are not shadow-checked.
    async fn scratch(&self) -> Result<Scratch, ToolError> {
        Ok(Scratch::declared(self.read_only))
    }
}

#[cfg(test)]
mod tests {
    use agora_fetch::TargetPolicy;
    use serde_json::json;

    use super::*;
    use crate::test_peer;

    fn tool(url: String, max_reply_bytes: usize) -> HttpTool {
        let spec = ToolSpec {
            name: "lookup".into(),
            description: "Looks something up.".into(),
            parameters: json!({"type": "object"}),
            returns: None,
        };
        let client = TargetClient::new(TargetPolicy::default()).unwrap();
        HttpTool::new(spec, url, client, Duration::from_secs(5), max_reply_bytes)
    }

    #[tokio::test]
    async fn a_reply_within_the_limit_is_returned() {
        let url = test_peer::answering(200, br#"{"answer": 42}"#.to_vec()).await;
        let value = tool(url, 100).call(json!({})).await.unwrap();
        assert_eq!(value, json!({"answer": 42}));
    }

    #[tokio::test]
    async fn an_oversized_reply_fails_the_call_with_the_limit_named() {
        let url = test_peer::answering(200, vec![b' '; 101]).await;
        let error = tool(url, 100).call(json!({})).await.unwrap_err();
        assert_eq!(
            error,
            ToolError::Failed {
                tool: "lookup".into(),
                reason: "reading the reply failed: response body exceeds 100 bytes".into(),
            }
        );
    }

    #[tokio::test]
    async fn only_an_endpoint_declared_read_only_is_called_in_shadow_checks() {
        let url = "http://127.0.0.1:9/".to_string();
        let plain = tool(url.clone(), 100);
        assert!(matches!(plain.scratch().await, Ok(Scratch::Unsupported)));
        let read_only = tool(url, 100).read_only(true);
        assert!(matches!(read_only.scratch().await, Ok(Scratch::Stateless)));
    }
}
