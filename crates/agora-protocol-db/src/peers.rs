//! How a protocol database talks to its peers: the [`PeerClient`] that fetches pages of
//! catalogue changes ([`ChangePage`], a wire type of `agora-protocol`) and sends notifications.
//!
//! The page is served by `GET /protocols?since=<seq>&limit=<n>` and parsed here when pulled, so
//! both sides share one type. The HTTP client goes through `agora-fetch`: peer URLs come from the operator, but the
//! addresses they resolve to are still checked, so a peer name that starts resolving to a cloud
//! metadata address is refused, and every response is read under a size limit and a deadline.
//! A test or an embedder can put any other [`PeerClient`] in its place.

use agora_fetch::Fetcher;
use agora_protocol::ChangePage;

/// A peer that could not be reached or answered nonsense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PeerError(pub String);

/// Pulls pages from peers and notifies them. Peers are named by their base URL
/// (`http://host:port`, no trailing slash).
#[async_trait::async_trait]
pub trait PeerClient: Send + Sync {
    /// The entries of `peer`'s catalogue after `since`, at most `limit` of them.
    async fn changes(&self, peer: &str, since: i64, limit: usize) -> Result<ChangePage, PeerError>;

    /// Tells `peer` that this database has new entries, so it pulls before its next interval.
    async fn notify(&self, peer: &str) -> Result<(), PeerError>;
}

/// The HTTP [`PeerClient`], through the SSRF-guarded fetcher.
#[derive(Debug, Clone)]
pub struct HttpPeerClient {
    fetcher: Fetcher,
}

impl HttpPeerClient {
    /// A client fetching through `fetcher`, whose policy's `max_bytes` bounds one page.
    pub fn new(fetcher: Fetcher) -> Self {
        Self { fetcher }
    }
}

#[async_trait::async_trait]
impl PeerClient for HttpPeerClient {
    async fn changes(&self, peer: &str, since: i64, limit: usize) -> Result<ChangePage, PeerError> {
        let url = format!("{peer}/protocols?since={since}&limit={limit}");
        let fetched = self
            .fetcher
            .fetch_text(&url)
            .await
            .map_err(|error| PeerError(error.to_string()))?;
        serde_json::from_str(&fetched.text)
            .map_err(|error| PeerError(format!("the peer's page is not a change page: {error}")))
    }

    async fn notify(&self, peer: &str) -> Result<(), PeerError> {
        self.fetcher
            .post_empty(&format!("{peer}/sync"))
            .await
            .map_err(|error| PeerError(error.to_string()))
    }
}
