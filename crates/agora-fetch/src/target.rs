//! Requests to targets the operator configured: receivers a task is sent to, protocol
//! databases, HTTP tools.
//!
//! Their URLs come from the operator's configuration, not from a peer, so they are not behind
//! the address guard (a target on the operator's own network is the point). What still holds:
//! redirects are never followed (the exchange must stay with the target the operator named,
//! and a `3xx` is the caller's to read as a failed status), every exchange has a deadline that
//! covers the whole body, and every body is read under a size limit. The client is built once,
//! at start-up, and shared: clones share its connection pool.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Client, RequestBuilder, Response, redirect};
use serde::Serialize;
use tracing::Instrument;

use crate::FetchError;
use crate::body::read_limited;
use crate::fetcher::{error_chain, transport_error};

/// Limits for requests to operator-configured targets. A request may set its own deadline and
/// size limit; these are the defaults.
#[derive(Debug, Clone)]
pub struct TargetPolicy {
    /// Deadline for establishing a connection.
    pub connect_timeout: Duration,
    /// Deadline for one whole exchange (connecting, sending and reading the full body), unless
    /// the request sets its own.
    pub timeout: Duration,
    /// Largest response body accepted, in bytes, unless the request sets its own.
    pub max_bytes: usize,
    /// `User-Agent` header sent with every request.
    pub user_agent: String,
}

impl Default for TargetPolicy {
    fn default() -> Self {
        TargetPolicy {
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(30),
            max_bytes: 1024 * 1024,
            user_agent: concat!("agora/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// The HTTP client for operator-configured targets. Cheap to clone.
#[derive(Debug, Clone)]
pub struct TargetClient {
    client: Client,
    policy: Arc<TargetPolicy>,
}

impl TargetClient {
    /// Builds the client for `policy`: no automatic redirects.
    pub fn new(policy: TargetPolicy) -> Result<TargetClient, FetchError> {
        let client = Client::builder()
            .redirect(redirect::Policy::none())
            .connect_timeout(policy.connect_timeout)
            .user_agent(policy.user_agent.clone())
            .build()
            .map_err(|error| FetchError::Http(error_chain(error)))?;
        Ok(TargetClient {
            client,
            policy: Arc::new(policy),
        })
    }

    /// The policy this client applies.
    pub fn policy(&self) -> &TargetPolicy {
        &self.policy
    }

    /// A `GET` of `url`.
    pub fn get(&self, url: &str) -> TargetRequest {
        self.request("GET", self.client.get(url))
    }

    /// A `POST` to `url` (add a body with [`TargetRequest::json`] or [`TargetRequest::text`]).
    pub fn post(&self, url: &str) -> TargetRequest {
        self.request("POST", self.client.post(url))
    }

    /// A `DELETE` of `url`.
    pub fn delete(&self, url: &str) -> TargetRequest {
        self.request("DELETE", self.client.delete(url))
    }

    fn request(&self, method: &'static str, builder: RequestBuilder) -> TargetRequest {
        TargetRequest {
            method,
            builder,
            timeout: self.policy.timeout,
            max_bytes: self.policy.max_bytes,
        }
    }
}

/// One request to a target, with its deadline and size limit.
#[must_use = "a request does nothing until it is sent"]
pub struct TargetRequest {
    method: &'static str,
    builder: RequestBuilder,
    timeout: Duration,
    max_bytes: usize,
}

impl TargetRequest {
    /// Sends `body` as JSON.
    pub fn json<T: Serialize + ?Sized>(mut self, body: &T) -> Self {
        self.builder = self.builder.json(body);
        self
    }

    /// Sends `text` as `text/plain; charset=utf-8`.
    pub fn text(mut self, text: String) -> Self {
        self.builder = self
            .builder
            .header(reqwest::header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(text);
        self
    }

    /// Adds a header another protocol asks for (A2A's `A2A-Version`).
    pub fn header(mut self, name: &'static str, value: &'static str) -> Self {
        self.builder = self.builder.header(name, value);
        self
    }

    /// Authenticates with a bearer token.
    pub fn bearer(mut self, token: &str) -> Self {
        self.builder = self.builder.bearer_auth(token);
        self
    }

    /// The deadline for this whole exchange, body included.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The largest response body accepted, in bytes.
    pub fn max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Sends the request and waits for the response's head. The deadline keeps running while
    /// the body is read with [`TargetResponse::bytes`].
    pub async fn send(self) -> Result<TargetResponse, FetchError> {
        let span = tracing::info_span!(
            "agora.fetch.target",
            otel.name = self.method,
            otel.kind = "client",
            method = self.method
        );
        // The peer's spans are children of this client span.
        let context = span.in_scope(agora_telemetry::propagation::outgoing_headers);
        let response = self
            .builder
            .headers(context)
            .timeout(self.timeout)
            .send()
            .instrument(span)
            .await
            .map_err(|error| {
                if error.is_builder() {
                    // A URL reqwest cannot use, or a body it cannot serialize.
                    FetchError::BadUrl(error_chain(error))
                } else {
                    transport_error(error)
                }
            })?;
        Ok(TargetResponse {
            response,
            max_bytes: self.max_bytes,
        })
    }
}

/// A target's response, its body not read yet.
#[derive(Debug)]
pub struct TargetResponse {
    response: Response,
    max_bytes: usize,
}

impl TargetResponse {
    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        self.response.status().as_u16()
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        self.response.status().is_success()
    }

    /// The body, at most the request's `max_bytes` ([`FetchError::TooLarge`] beyond).
    pub async fn bytes(mut self) -> Result<Vec<u8>, FetchError> {
        read_limited(&mut self.response, self.max_bytes).await
    }
}
