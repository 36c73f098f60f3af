//! Why a fetch failed, in terms a caller can branch on.
//!
//! The node turns these into its own refusal reasons, so the variants follow
//! what the caller does next (try another source, tell the operator, tell the
//! sender) rather than where in the stack the failure happened. Messages
//! never contain URL credentials.

use std::net::IpAddr;

use crate::AddressClass;

/// A failed fetch.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL (or a redirect's `Location`) could not be parsed or has no host.
    #[error("bad URL: {0}")]
    BadUrl(String),
    /// The URL's scheme is not `https`, or not `http` when plain HTTP is allowed.
    #[error("scheme {0:?} is not allowed")]
    SchemeNotAllowed(String),
    /// The host is, or resolves only to, an address the policy refuses.
    #[error(
        "refusing to fetch from {}; the operator can allow it",
        describe_target(host, address, class)
    )]
    AddressRefused {
        /// The host as written in the URL (an IPv6 literal keeps its brackets).
        host: String,
        /// The refused address (the first one, when a name had several).
        address: IpAddr,
        /// Why the address was refused.
        class: AddressClass,
    },
    /// The host name could not be resolved.
    #[error("cannot resolve {0}")]
    Resolve(String),
    /// More redirects than the policy's `max_redirects` (the value) were offered.
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    /// The body is larger than the policy's `max_bytes`.
    #[error("response body exceeds {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The whole fetch did not finish within the policy's `timeout`.
    #[error("fetch timed out")]
    Timeout,
    /// The server answered with a status other than 2xx (or a redirect
    /// without a `Location`).
    #[error("server answered with status {0}")]
    Status(u16),
    /// The body is not valid text in its declared (or assumed UTF-8) charset.
    #[error("cannot decode body: {0}")]
    Decode(String),
    /// Any other transport failure (connection refused, TLS, broken body).
    #[error("HTTP transport error: {0}")]
    Http(String),
}

impl FetchError {
    /// The reason in words fit for a remote peer: no resolved address, no OS error, no
    /// transport detail. The full error ([`Display`](std::fmt::Display)) is for the log.
    pub fn peer_reason(&self) -> String {
        match self {
            // The class, but not the address a name resolved to (internal DNS is not the
            // peer's business); an IP literal is the peer's own words.
            FetchError::AddressRefused {
                host,
                address,
                class,
            } => {
                let bare_host = host.trim_start_matches('[').trim_end_matches(']');
                if bare_host.parse::<IpAddr>().ok() == Some(*address) {
                    format!("refusing to fetch from {address} ({class}); the operator can allow it")
                } else {
                    format!(
                        "refusing to fetch from {host}, a {class} address; the operator can allow it"
                    )
                }
            }
            FetchError::Decode(_) => "the body is not valid text".into(),
            FetchError::Http(_) => "the connection to the source failed".into(),
            other => other.to_string(),
        }
    }
}

/// Names the target as `127.0.0.1 (loopback)` for an IP-literal host, or as
/// `localhost (127.0.0.1, loopback)` for a name.
fn describe_target(host: &str, address: &IpAddr, class: &AddressClass) -> String {
    let bare_host = host.trim_start_matches('[').trim_end_matches(']');
    if bare_host.parse::<IpAddr>().ok() == Some(*address) {
        format!("{address} ({class})")
    } else {
        format!("{host} ({address}, {class})")
    }
}
