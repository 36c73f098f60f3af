//! HTTP tools: a configured URL that takes the arguments as a JSON POST.
//!
//! The URL comes from the operator's configuration, not from a peer, so it
//! is not behind the SSRF guard that protects protocol fetches.

use std::time::Duration;

use serde_json::Value;

use super::{Tool, ToolError, ToolSpec};

/// A tool implemented by an HTTP endpoint.
#[derive(Debug, Clone)]
pub struct HttpTool {
    spec: ToolSpec,
    url: String,
    client: reqwest::Client,
}

impl HttpTool {
    /// A tool that POSTs its arguments to `url`.
    pub fn new(spec: ToolSpec, url: String, timeout: Duration) -> Self {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .unwrap_or_default();
        Self { spec, url, client }
    }
}

#[async_trait::async_trait]
impl Tool for HttpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let failed = |reason: String| ToolError::Failed {
            tool: self.spec.name.clone(),
            reason,
        };
        let response = self
            .client
            .post(&self.url)
            .json(&arguments)
            .send()
            .await
            .map_err(|e| failed(format!("request failed: {e}")))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| failed(format!("reading the reply failed: {e}")))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            return Err(failed(format!(
                "HTTP {}: {}",
                status.as_u16(),
                text.chars().take(300).collect::<String>()
            )));
        }
        match serde_json::from_slice(&bytes) {
            Ok(value) => Ok(value),
            Err(_) => Ok(Value::String(String::from_utf8_lossy(&bytes).into_owned())),
        }
    }
}
