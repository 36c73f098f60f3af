//! The fetch itself: one GET per hop, guarded at every hop.
//!
//! `reqwest` follows redirects and reads whole bodies on its own, but it would
//! do both outside the guard: a redirect to `http://10.0.0.1/` would be sent
//! before this crate could look at it, and a body would be buffered whatever
//! its size. So redirects are disabled in the client and followed here, each
//! hop checked before anything is sent, and the body is read chunk by chunk.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use reqwest::{Client, Response, StatusCode, redirect};
use tracing::Instrument;
use url::{Host, Url};

use crate::body::read_limited;
use crate::decode::decode_text;
use crate::resolve::{GuardError, GuardedResolver};
use crate::{FetchError, FetchPolicy, is_allowed};

/// A fetched text document.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The body as text. When the charset is UTF-8 (declared or assumed),
    /// these are exactly the bytes the server sent.
    pub text: String,
    /// The URL the body came from after redirects, with any user name and
    /// password removed so that it can be logged and stored.
    pub final_url: String,
    /// The address the final response came from, when the client knows it.
    pub remote_addr: Option<SocketAddr>,
    /// The `Content-Type` header of the final response, when present and
    /// readable as text.
    pub content_type: Option<String>,
}

/// Fetches documents under a [`FetchPolicy`]. Cheap to clone; clones share
/// the connection pool.
#[derive(Clone)]
pub struct Fetcher {
    client: Client,
    policy: Arc<FetchPolicy>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Fetcher {
    /// Builds the HTTP client for `policy`: guarded resolver, no proxies (an
    /// environment proxy would connect on our behalf, past the guard), no
    /// automatic redirects.
    pub fn new(policy: FetchPolicy) -> Result<Fetcher, FetchError> {
        let policy = Arc::new(policy);
        let client = Client::builder()
            .no_proxy()
            .redirect(redirect::Policy::none())
            .dns_resolver(GuardedResolver::new(Arc::clone(&policy)))
            .user_agent(policy.user_agent.clone())
            .build()
            .map_err(|error| FetchError::Http(error_chain(error)))?;
        Ok(Fetcher { client, policy })
    }

    /// The policy this fetcher enforces.
    pub fn policy(&self) -> &FetchPolicy {
        &self.policy
    }

    /// Fetches `url` as text, following redirects, within the policy's
    /// deadline, size limit and address rules.
    pub async fn fetch_text(&self, url: &str) -> Result<Fetched, FetchError> {
        let url = Url::parse(url).map_err(|error| FetchError::BadUrl(error.to_string()))?;
        let span = tracing::info_span!(
            "agora.fetch.fetch_text",
            otel.kind = "client",
            url = %redacted(&url)
        );
        let fetch = self.follow_redirects(url).instrument(span);
        tokio::time::timeout(self.policy.timeout, fetch)
            .await
            .unwrap_or(Err(FetchError::Timeout))
    }

    /// POSTs an empty body to `url`, for notifications that carry nothing but their arrival
    /// (a protocol database telling its peers it has news). The same address checks apply and
    /// the same deadline; redirects are not followed (a redirect is a [`FetchError::Status`]),
    /// and the response body is read under the size limit and dropped.
    pub async fn post_empty(&self, url: &str) -> Result<(), FetchError> {
        let url = Url::parse(url).map_err(|error| FetchError::BadUrl(error.to_string()))?;
        let span = tracing::info_span!(
            "agora.fetch.post_empty",
            otel.kind = "client",
            url = %redacted(&url)
        );
        let post = async {
            let request = self.client.post(url.clone()).header(CONTENT_LENGTH, 0);
            let response = self.send_checked(&url, request).await?;
            let status = response.status();
            if !status.is_success() {
                return Err(FetchError::Status(status.as_u16()));
            }
            self.read_text(response, &url).await.map(drop)
        };
        tokio::time::timeout(self.policy.timeout, post.instrument(span))
            .await
            .unwrap_or(Err(FetchError::Timeout))
    }

    /// Sends `request` to `url` once the checks before sending pass, then checks the address it
    /// connected to: the resolver already filtered names; this catches any path to a connection
    /// that went around it.
    async fn send_checked(
        &self,
        url: &Url,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, FetchError> {
        let host = self.check_before_sending(url)?;
        let response = request
            .headers(agora_telemetry::propagation::outgoing_headers())
            .send()
            .await
            .map_err(transport_error)?;
        if let Some(remote) = response.remote_addr() {
            self.check_address(&host, remote.ip())?;
        }
        Ok(response)
    }

    async fn follow_redirects(&self, mut url: Url) -> Result<Fetched, FetchError> {
        let mut redirects = 0;
        loop {
            let response = self
                .send_checked(&url, self.client.get(url.clone()))
                .await?;
            let status = response.status();
            if !is_redirect(status) {
                if !status.is_success() {
                    return Err(FetchError::Status(status.as_u16()));
                }
                return self.read_text(response, &url).await;
            }
            let location = response
                .headers()
                .get(LOCATION)
                .ok_or(FetchError::Status(status.as_u16()))?
                .to_str()
                .map_err(|_| FetchError::BadUrl("redirect Location is not ASCII".to_owned()))?;
            if redirects == self.policy.max_redirects {
                return Err(FetchError::TooManyRedirects(self.policy.max_redirects));
            }
            redirects += 1;
            url = url
                .join(location)
                .map_err(|error| FetchError::BadUrl(format!("redirect Location: {error}")))?;
            tracing::debug!(to = %redacted(&url), hop = redirects, "following redirect");
        }
    }

    /// Checks the scheme, and an IP-literal host (which the client connects to
    /// without asking the resolver), before anything is sent. Returns the host
    /// as written, for error messages.
    fn check_before_sending(&self, url: &Url) -> Result<String, FetchError> {
        match url.scheme() {
            "https" => {}
            "http" if self.policy.allow_http => {}
            scheme => return Err(FetchError::SchemeNotAllowed(scheme.to_owned())),
        }
        let host = url
            .host()
            .ok_or_else(|| FetchError::BadUrl("URL has no host".to_owned()))?;
        let literal = match host {
            Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
            Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
            Host::Domain(_) => None,
        };
        let host = host.to_string();
        if let Some(address) = literal {
            self.check_address(&host, address)?;
        }
        Ok(host)
    }

    fn check_address(&self, host: &str, address: IpAddr) -> Result<(), FetchError> {
        is_allowed(address, &self.policy).map_err(|class| FetchError::AddressRefused {
            host: host.to_owned(),
            address,
            class,
        })
    }

    /// Reads the body under the size limit and decodes it.
    async fn read_text(&self, mut response: Response, url: &Url) -> Result<Fetched, FetchError> {
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let remote_addr = response.remote_addr();
        let body = read_limited(&mut response, self.policy.max_bytes).await?;
        let text = decode_text(body, content_type.as_deref())?;
        Ok(Fetched {
            text,
            final_url: redacted(url).to_string(),
            remote_addr,
            content_type,
        })
    }
}

/// The status codes that carry a `Location` to follow. (300, 304 and 305 do
/// not, and are treated like any other non-2xx status.)
fn is_redirect(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::MOVED_PERMANENTLY
            | StatusCode::FOUND
            | StatusCode::SEE_OTHER
            | StatusCode::TEMPORARY_REDIRECT
            | StatusCode::PERMANENT_REDIRECT
    )
}

/// `url` without user name and password.
pub(crate) fn redacted(url: &Url) -> Url {
    let mut url = url.clone();
    // Both fail only for URLs that cannot have credentials at all.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url
}

/// Maps a client error, recognising the guard's refusals inside it.
pub(crate) fn transport_error(error: reqwest::Error) -> FetchError {
    if let Some(guard) = GuardError::find_in(&error) {
        return guard.into();
    }
    if error.is_timeout() {
        return FetchError::Timeout;
    }
    FetchError::Http(error_chain(error))
}

/// The error and its sources joined by `": "`, without the URL (which may
/// hold credentials).
pub(crate) fn error_chain(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut message = error.to_string();
    let mut current = std::error::Error::source(&error);
    while let Some(source) = current {
        message.push_str(": ");
        message.push_str(&source.to_string());
        current = source.source();
    }
    message
}
