//! The HTTP edge's defences: what a node does before, around and after its engine answers a
//! stranger.
//!
//! In the order an Agora request (`POST /`, `POST /conversations/{id}`) meets them:
//! 1. **Connections** ([`serve`]): at most `max_connections` open; a client must send its headers
//!    within `header_timeout_secs` (hyper's header timer, which also closes idle keep-alive
//!    connections), so a slow-loris client is cut off instead of holding a socket forever.
//! 2. **The body** must arrive within `body_timeout_secs` (`408 timeout`) and under
//!    `max_body_bytes` (`413`).
//! 3. **The client** is named ([`Edge::identify`]): a bearer token's name when client tokens are
//!    configured, else the peer's address (or the `X-Forwarded-For` hop a trusted proxy gave).
//!    With tokens or allowed networks configured, anyone else gets `401 unauthorized`.
//! 4. **Its budget** ([`Edge::check_rate`], `governor`'s keyed GCRA limiters): requests the node
//!    will answer with a routine spend from a large budget, the others (natural language,
//!    protocols without a routine, negotiation: LLM money) from a small one. Past it,
//!    `429 rate_limited` with `Retry-After`.
//! 5. **Idempotency** ([`idempotency`]): a repeated `Idempotency-Key` gets the stored reply.
//! 6. **The LLM work bound** ([`Edge::llm_slot`]): at most `max_concurrent` LLM-answered requests
//!    at once, `max_queued` more waiting up to `max_wait_secs`; past that, `503 busy`.
//! 7. **The deadline** ([`Edge::within_deadline`]): `request_timeout_secs` for the whole answer,
//!    LLM work included (`503 timeout`); and when a graceful stop's grace runs out, what is
//!    still running is answered `503 busy`.
//!
//! Every refusal is the protocol's failure shape ([`ApiError`]) with a code a peer can match.
//! What failed inside the node never reaches the peer: the engine replies with a sentence and a
//! query id, and keeps the detail for the log and the request ledger.

pub mod idempotency;
pub mod serve;

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use agora_node::Client;
use agora_protocol::ErrorCode;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use ipnet::IpNet;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::config::EdgeSettings;
use crate::error::ApiError;

/// Which budget a request spends from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// The node will answer with a routine: no LLM money.
    Routine,
    /// The node's LLM will answer: natural language, a protocol without a routine, negotiation.
    Llm,
}

/// A setting the edge cannot use.
#[derive(Debug, thiserror::Error)]
pub enum EdgeConfigError {
    /// A network in `edge.clients` does not parse.
    #[error("edge.clients.{field}: {value:?} is not a network like 10.0.0.0/8")]
    BadNetwork {
        /// The list it is in.
        field: &'static str,
        /// The value as written.
        value: String,
    },
    /// A client token is empty.
    #[error("edge.clients.tokens.{0}: the token is empty")]
    EmptyToken(String),
}

/// The edge's state: settings, per-client limiters, the LLM work queue and the drain signal.
pub struct Edge {
    settings: EdgeSettings,
    allow_networks: Vec<IpNet>,
    trusted_proxies: Vec<IpNet>,
    routine_limiter: Option<DefaultKeyedRateLimiter<String>>,
    llm_limiter: Option<DefaultKeyedRateLimiter<String>>,
    checks: AtomicU64,
    llm_work: Arc<Semaphore>,
    llm_waiting: AtomicUsize,
    drain: CancellationToken,
}

impl std::fmt::Debug for Edge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Edge")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Default for Edge {
    /// The edge with [`EdgeSettings::default`]: no client list, so it cannot fail.
    fn default() -> Self {
        Self::with_networks(&EdgeSettings::default(), Vec::new(), Vec::new())
    }
}

/// Forget clients idle long enough to have a full budget again, every this many checks.
const RETAIN_EVERY: u64 = 4096;

impl Edge {
    /// The edge for `settings`.
    pub fn new(settings: &EdgeSettings) -> Result<Self, EdgeConfigError> {
        let networks = |field: &'static str, values: &[String]| {
            values
                .iter()
                .map(|value| {
                    parse_network(value).ok_or_else(|| EdgeConfigError::BadNetwork {
                        field,
                        value: value.clone(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        if let Some((name, _)) = settings.clients.tokens.iter().find(|(_, t)| t.is_empty()) {
            return Err(EdgeConfigError::EmptyToken(name.clone()));
        }
        Ok(Self::with_networks(
            settings,
            networks("allow_networks", &settings.clients.allow_networks)?,
            networks("trusted_proxies", &settings.clients.trusted_proxies)?,
        ))
    }

    fn with_networks(
        settings: &EdgeSettings,
        allow_networks: Vec<IpNet>,
        trusted_proxies: Vec<IpNet>,
    ) -> Self {
        let limiter = |per_minute: u32, burst: u32| {
            let per_minute = NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN);
            let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
            RateLimiter::keyed(Quota::per_minute(per_minute).allow_burst(burst))
        };
        let rates = &settings.rate_limit;
        Self {
            allow_networks,
            trusted_proxies,
            routine_limiter: rates
                .enabled
                .then(|| limiter(rates.routine_per_minute, rates.routine_burst)),
            llm_limiter: rates
                .enabled
                .then(|| limiter(rates.llm_per_minute, rates.llm_burst)),
            checks: AtomicU64::new(0),
            llm_work: Arc::new(Semaphore::new(settings.llm_work.max_concurrent.max(1))),
            llm_waiting: AtomicUsize::new(0),
            drain: CancellationToken::new(),
            settings: settings.clone(),
        }
    }

    /// The settings it was built from.
    pub fn settings(&self) -> &EdgeSettings {
        &self.settings
    }

    /// Fires when a graceful stop's grace has run out: requests still running answer `busy`.
    pub fn drain_token(&self) -> CancellationToken {
        self.drain.clone()
    }

    /// Names the client of a request from `peer` with `headers`, or refuses it.
    pub fn identify(
        &self,
        headers: &HeaderMap,
        peer: Option<SocketAddr>,
    ) -> Result<Client, ApiError> {
        let address = self.client_address(headers, peer);
        let clients = &self.settings.clients;
        if let Some(token) = crate::auth::bearer(headers)
            && let Some((name, _)) = clients
                .tokens
                .iter()
                .find(|(_, expected)| crate::auth::same_secret(token, expected))
        {
            return Ok(Client(format!("token:{name}")));
        }
        let open = clients.tokens.is_empty() && self.allow_networks.is_empty();
        match address {
            Some(ip) if open || self.allow_networks.iter().any(|n| n.contains(&ip)) => {
                Ok(Client(format!("ip:{ip}")))
            }
            None if open => Ok(Client("ip:unknown".into())),
            _ => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                ErrorCode::Unauthorized,
                "this node serves known clients only: send Authorization: Bearer <your client token>",
            )
            .with_header(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))),
        }
    }

    /// The client's address: the peer's, or, when the peer is a trusted proxy, the last
    /// `X-Forwarded-For` hop that is not one.
    fn client_address(&self, headers: &HeaderMap, peer: Option<SocketAddr>) -> Option<IpAddr> {
        let peer = peer.map(|p| canonical(p.ip()))?;
        if !self.trusted_proxies.iter().any(|n| n.contains(&peer)) {
            return Some(peer);
        }
        let hops: Vec<IpAddr> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|hop| hop.trim().parse::<IpAddr>().ok().map(canonical))
            .collect();
        Some(
            hops.into_iter()
                .rev()
                .find(|hop| !self.trusted_proxies.iter().any(|n| n.contains(hop)))
                .unwrap_or(peer),
        )
    }

    /// Spends one request from `client`'s `budget`, or answers `429` with `Retry-After`.
    pub fn check_rate(&self, client: &Client, budget: Budget) -> Result<(), ApiError> {
        let limiter = match budget {
            Budget::Routine => &self.routine_limiter,
            Budget::Llm => &self.llm_limiter,
        };
        let Some(limiter) = limiter else {
            return Ok(());
        };
        if self.checks.fetch_add(1, Ordering::Relaxed) % RETAIN_EVERY == RETAIN_EVERY - 1 {
            if let Some(l) = &self.routine_limiter {
                l.retain_recent();
            }
            if let Some(l) = &self.llm_limiter {
                l.retain_recent();
            }
        }
        limiter.check_key(&client.0).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let what = match budget {
                Budget::Routine => "requests",
                Budget::Llm => "requests answered by the language model",
            };
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::RateLimited,
                format!(
                    "too many {what} from this client; retry in {} s",
                    seconds.max(1)
                ),
            )
            .retry_after(seconds.max(1))
        })
    }

    /// A place among the LLM-answered requests in flight: at once, after a bounded wait in a
    /// bounded queue, or `503 busy`.
    pub async fn llm_slot(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        let busy = |why: &str| {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Busy, why).retry_after(5)
        };
        if let Ok(permit) = self.llm_work.clone().try_acquire_owned() {
            return Ok(permit);
        }
        let limits = &self.settings.llm_work;
        if self.llm_waiting.fetch_add(1, Ordering::AcqRel) >= limits.max_queued {
            self.llm_waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(busy("this node's language model is busy; retry later"));
        }
        let waited = tokio::time::timeout(
            Duration::from_secs(limits.max_wait_secs),
            self.llm_work.clone().acquire_owned(),
        )
        .await;
        self.llm_waiting.fetch_sub(1, Ordering::AcqRel);
        match waited {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(busy("this node's language model stayed busy; retry later")),
        }
    }

    /// Runs `answer` within the request deadline; answers `503 timeout` past it, and `503 busy`
    /// once a graceful stop's grace has run out.
    pub async fn within_deadline<T>(&self, answer: impl Future<Output = T>) -> Result<T, ApiError> {
        let limit = Duration::from_secs(self.settings.request_timeout_secs);
        tokio::select! {
            value = answer => Ok(value),
            _ = tokio::time::sleep(limit) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Timeout,
                format!("this node did not answer within its limit of {} s", limit.as_secs()),
            )),
            _ = self.drain.cancelled() => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Busy,
                "this node is shutting down; retry on another replica or later",
            ).retry_after(5)),
        }
    }

    /// The body timeout.
    pub fn body_timeout(&self) -> Duration {
        Duration::from_secs(self.settings.body_timeout_secs)
    }
}

fn parse_network(value: &str) -> Option<IpNet> {
    value
        .parse::<IpNet>()
        .ok()
        .or_else(|| value.parse::<IpAddr>().ok().map(IpNet::from))
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClientSettings, RateLimitSettings};

    fn edge(clients: ClientSettings) -> Edge {
        Edge::new(&EdgeSettings {
            clients,
            ..EdgeSettings::default()
        })
        .expect("edge")
    }

    fn peer(ip: &str) -> Option<SocketAddr> {
        Some(SocketAddr::new(ip.parse().expect("ip"), 40000))
    }

    #[test]
    fn an_open_node_names_clients_by_address() {
        let edge = edge(ClientSettings::default());
        let client = edge.identify(&HeaderMap::new(), peer("::ffff:192.0.2.7"));
        assert_eq!(client.expect("open").0, "ip:192.0.2.7");
    }

    #[test]
    fn forwarded_for_is_read_only_from_trusted_proxies() {
        let edge = edge(ClientSettings {
            trusted_proxies: vec!["127.0.0.1".into()],
            ..ClientSettings::default()
        });
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-forwarded-for",
            HeaderValue::from_static("6.6.6.6, 198.51.100.9, 127.0.0.1"),
        );
        let via_proxy = edge.identify(&headers, peer("127.0.0.1")).expect("open");
        assert_eq!(via_proxy.0, "ip:198.51.100.9");
        let direct = edge.identify(&headers, peer("203.0.113.5")).expect("open");
        assert_eq!(direct.0, "ip:203.0.113.5", "a stranger cannot name itself");
    }

    #[test]
    fn a_closed_node_takes_its_tokens_and_networks_only() {
        let edge = edge(ClientSettings {
            tokens: [("partner".to_string(), "s3cret".to_string())].into(),
            allow_networks: vec!["10.0.0.0/8".into()],
            ..ClientSettings::default()
        });
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cret"),
        );
        assert_eq!(
            edge.identify(&headers, peer("203.0.113.5"))
                .expect("token")
                .0,
            "token:partner"
        );
        assert_eq!(
            edge.identify(&HeaderMap::new(), peer("10.1.2.3"))
                .expect("net")
                .0,
            "ip:10.1.2.3"
        );
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer wrong"),
        );
        let refused = edge
            .identify(&headers, peer("203.0.113.5"))
            .expect_err("refused");
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        assert!(edge.identify(&HeaderMap::new(), None).is_err());
    }

    #[test]
    fn bad_settings_are_named() {
        let error = Edge::new(&EdgeSettings {
            clients: ClientSettings {
                trusted_proxies: vec!["10.0.0.0/33".into()],
                ..ClientSettings::default()
            },
            ..EdgeSettings::default()
        })
        .expect_err("bad network");
        assert!(error.to_string().contains("trusted_proxies"), "{error}");
    }

    #[test]
    fn budgets_are_per_client_and_per_kind_with_a_retry_time() {
        let edge = Edge::new(&EdgeSettings {
            rate_limit: RateLimitSettings {
                enabled: true,
                routine_per_minute: 60,
                routine_burst: 3,
                llm_per_minute: 1,
                llm_burst: 1,
            },
            ..EdgeSettings::default()
        })
        .expect("edge");
        let alice = Client("ip:192.0.2.1".into());
        let bob = Client("ip:192.0.2.2".into());
        assert!(edge.check_rate(&alice, Budget::Llm).is_ok());
        let refused = edge
            .check_rate(&alice, Budget::Llm)
            .expect_err("over budget");
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        let (_, retry) = refused
            .headers
            .iter()
            .find(|(name, _)| name == header::RETRY_AFTER)
            .expect("retry-after");
        let seconds: u64 = retry.to_str().expect("ascii").parse().expect("seconds");
        assert!((1..=60).contains(&seconds), "{seconds}");
        assert!(
            edge.check_rate(&bob, Budget::Llm).is_ok(),
            "another client's budget"
        );
        for _ in 0..3 {
            assert!(
                edge.check_rate(&alice, Budget::Routine).is_ok(),
                "its own budget"
            );
        }
        assert!(edge.check_rate(&alice, Budget::Routine).is_err());
    }

    #[tokio::test]
    async fn llm_work_queues_a_bounded_number_then_answers_busy() {
        let edge = Arc::new(
            Edge::new(&EdgeSettings {
                llm_work: crate::config::LlmWorkSettings {
                    max_concurrent: 1,
                    max_queued: 1,
                    max_wait_secs: 30,
                },
                ..EdgeSettings::default()
            })
            .expect("edge"),
        );
        let first = edge.llm_slot().await.expect("free");
        let queued = tokio::spawn({
            let edge = edge.clone();
            async move { edge.llm_slot().await.map(drop) }
        });
        while edge.llm_waiting.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        let refused = edge.llm_slot().await.expect_err("queue full");
        assert_eq!(refused.code, ErrorCode::Busy);
        drop(first);
        assert!(
            queued.await.expect("join").is_ok(),
            "the queued request got the place"
        );
    }
}
