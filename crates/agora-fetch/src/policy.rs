//! What the operator lets the fetcher do.
//!
//! The policy is plain data handed in by the caller (the node reads it from
//! its configuration); the defaults are the safe ones, so that a node which
//! configures nothing fetches only from public addresses, with small bodies
//! and a short deadline.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// Limits and exceptions that govern every fetch.
#[derive(Debug, Clone)]
pub struct FetchPolicy {
    /// Networks the operator allows even though they are not public (for
    /// example `127.0.0.0/8` for a loopback demo). An address is matched as
    /// written: `::ffff:127.0.0.1` is not inside `127.0.0.0/8`.
    pub allowed_networks: Vec<IpNet>,
    /// Whether plain `http` URLs may be fetched; `https` always may.
    pub allow_http: bool,
    /// Deadline for the whole fetch: every redirect hop, connection and the
    /// full body.
    pub timeout: Duration,
    /// Largest body accepted, in bytes.
    pub max_bytes: usize,
    /// Most redirects followed before giving up.
    pub max_redirects: usize,
    /// `User-Agent` header sent with every request.
    pub user_agent: String,
}

impl Default for FetchPolicy {
    fn default() -> Self {
        FetchPolicy {
            allowed_networks: Vec::new(),
            allow_http: true,
            timeout: Duration::from_secs(10),
            max_bytes: 256 * 1024,
            max_redirects: 3,
            user_agent: concat!("agora/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

impl FetchPolicy {
    /// Adds the loopback networks (`127.0.0.0/8` and `::1/128`) to the
    /// allowlist, for demos and tests that serve documents from this host.
    pub fn allowing_loopback(mut self) -> Self {
        let loopback = [
            IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(127, 0, 0, 0), 8)),
            IpNet::V6(Ipv6Net::new_assert(Ipv6Addr::LOCALHOST, 128)),
        ];
        for network in loopback {
            if !self.allowed_networks.contains(&network) {
                self.allowed_networks.push(network);
            }
        }
        self
    }
}
