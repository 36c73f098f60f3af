//! The protocol database role: a catalogue of protocol documents that anyone can read by hash
//! or search by metadata, that operators (or agents holding the write token) add to, and that
//! pulls what its peer databases learnt.
//!
//! [`ProtocolDb`] is the engine, free of HTTP: `agora-server` maps its routes onto
//! [`ProtocolDb::publish`], [`ProtocolDb::document`], [`ProtocolDb::search`] and
//! [`ProtocolDb::changes`], and runs [`ProtocolDb::run`] in the background.
//!
//! Sharing is pull-based. Every database numbers its entries (`seq`) in the order it learnt
//! them, and serves "the entries after seq N" with their texts. Each database remembers, per
//! peer, the last seq it took (in its store, moved in the same transaction as the entries), so a
//! pull fetches only what is new and a restart loses nothing. Pulls happen every
//! `sync_interval`, and early when a peer notifies: after every `notify_every_additions` new
//! entries (posted or pulled) a database POSTs `/sync` to each peer, which makes that peer pull
//! from all its configured peers. A notification carries nothing and names no URL, so it can
//! only make a database do sooner what it would do anyway; notified pulls are coalesced and
//! spaced at least [`MIN_NOTIFIED_GAP`] apart. Because pulled entries count as additions too, a
//! document crosses a line of databases (1 ↔ 2 ↔ 3) in one notification per hop, and stops: an
//! entry already in the catalogue is not new, so it triggers nothing.
//!
//! Architecture invariant: every document that enters the catalogue, posted or pulled, is a
//! [`VerifiedDocument`] within `max_document_bytes`; a pulled entry whose text does not hash to
//! the hash it was served under is logged, counted and skipped (the cursor moves past it, so a
//! tampered peer cannot stall the sync).

mod peers;
mod search;
mod sync;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agora_protocol::changes::check_document;
use agora_protocol::{ProtocolHash, VerifiedDocument};
use agora_store::{PeerState, PublishedCounts, Store, StoreError};
use tokio::sync::Notify;
use tracing::Instrument;

pub use agora_protocol::changes::Rejection;
pub use agora_protocol::{ChangeEntry, ChangePage};
pub use agora_store::clock::{Clock, ManualClock, SystemClock};
pub use peers::{HttpPeerClient, PeerClient, PeerError};
pub use sync::{PeerSyncReport, SyncReport};

/// Least time between two pulls triggered by peers' notifications.
pub const MIN_NOTIFIED_GAP: Duration = Duration::from_secs(1);
/// Most entries ranked for one search.
const SEARCH_CANDIDATES: i64 = 500;

/// What a protocol database is configured with.
#[derive(Debug, Clone)]
pub struct ProtocolDbConfig {
    /// The base URL others reach this database at; document URLs are `<public_url>/protocols/<hex>`.
    pub public_url: String,
    /// Largest document accepted, posted or pulled, in bytes.
    pub max_document_bytes: usize,
    /// The peers' base URLs.
    pub peers: Vec<String>,
    /// Notify the peers after this many new entries; 0 never notifies.
    pub notify_every_additions: u64,
    /// Entries asked for per pulled page.
    pub pull_page_size: usize,
    /// Most pages pulled from one peer per sync; the rest waits for the next sync.
    pub max_pages_per_sync: usize,
    /// Most entries served per page, whatever the asker wants.
    pub max_page_entries: usize,
    /// Most text served per page, in bytes (a page always has at least one entry).
    pub max_page_bytes: usize,
    /// Most search results, whatever the asker wants.
    pub max_search_results: usize,
}

impl Default for ProtocolDbConfig {
    fn default() -> Self {
        Self {
            public_url: "http://127.0.0.1:8090".into(),
            max_document_bytes: 64 * 1024,
            peers: Vec::new(),
            notify_every_additions: 1,
            pull_page_size: 20,
            max_pages_per_sync: 50,
            max_page_entries: 100,
            max_page_bytes: 1024 * 1024,
            max_search_results: 100,
        }
    }
}

/// Why [`ProtocolDb::publish`] did not store a document.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The document is larger than the database accepts.
    #[error("the document has {size} bytes; this database accepts at most {limit}")]
    TooLarge {
        /// The document's size, in bytes.
        size: usize,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The bytes are not UTF-8 text.
    #[error("the document is not UTF-8 text")]
    NotUtf8,
    /// The document is empty or only white space.
    #[error("the document is empty")]
    Empty,
    /// The store failed.
    #[error("store error: {0}")]
    Store(#[from] StoreError),
}

/// A document in the catalogue, as [`ProtocolDb::publish`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The document's hash.
    pub hash: ProtocolHash,
    /// Where this database serves it.
    pub url: String,
    /// Whether it was new (false: it was already in the catalogue).
    pub created: bool,
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    /// The document's hash.
    pub hash: ProtocolHash,
    /// Its name, if the front matter has one.
    pub name: Option<String>,
    /// Its description, if the front matter has one.
    pub description: Option<String>,
    /// Where this database serves it.
    pub url: String,
    /// How well it matched (0 when the query was empty).
    pub score: u32,
}

/// Counters since start-up, for `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProtocolDbCounters {
    /// New documents posted to this database.
    pub published: u64,
    /// New documents pulled from peers.
    pub ingested: u64,
    /// Refused documents, posted or pulled, by reason (in [`Rejection::ALL`] order).
    pub rejected: Vec<(Rejection, u64)>,
    /// Sync rounds run.
    pub syncs: u64,
    /// Pulls from a peer that failed.
    pub sync_errors: u64,
    /// Notifications sent to peers.
    pub notifications_sent: u64,
    /// Notifications that failed.
    pub notification_errors: u64,
}

/// Everything a protocol database is built from.
pub struct ProtocolDbParts {
    /// Configuration.
    pub config: ProtocolDbConfig,
    /// The catalogue and the peer cursors.
    pub store: Store,
    /// How peers are reached.
    pub peer_client: Arc<dyn PeerClient>,
    /// The clock for stored timestamps.
    pub clock: Arc<dyn Clock>,
}

/// The protocol database engine. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct ProtocolDb {
    inner: Arc<Inner>,
}

struct Inner {
    config: ProtocolDbConfig,
    store: Store,
    peer_client: Arc<dyn PeerClient>,
    clock: Arc<dyn Clock>,
    counters: Counters,
    /// One sync round at a time, so two rounds never pull the same page.
    sync_lock: tokio::sync::Mutex<()>,
    /// A peer asked for a pull (a permit is kept, so requests coalesce and none is lost).
    pull_requested: Notify,
    /// Enough new entries to tell the peers.
    push_requested: Notify,
    /// New entries so far, for `notify_every_additions`.
    additions: AtomicU64,
}

#[derive(Default)]
struct Counters {
    published: AtomicU64,
    ingested: AtomicU64,
    rejected: [AtomicU64; Rejection::ALL.len()],
    syncs: AtomicU64,
    sync_errors: AtomicU64,
    notifications_sent: AtomicU64,
    notification_errors: AtomicU64,
}

impl ProtocolDb {
    /// A protocol database. Peer URLs lose trailing slashes; this database's own URL and
    /// duplicates are dropped from its peers.
    pub fn new(parts: ProtocolDbParts) -> Self {
        let mut config = parts.config;
        config.public_url = config.public_url.trim_end_matches('/').to_string();
        let mut peers: Vec<String> = Vec::new();
        for peer in &config.peers {
            let peer = peer.trim_end_matches('/').to_string();
            if peer != config.public_url && !peers.contains(&peer) {
                peers.push(peer);
            }
        }
        config.peers = peers;
        Self {
            inner: Arc::new(Inner {
                config,
                store: parts.store,
                peer_client: parts.peer_client,
                clock: parts.clock,
                counters: Counters::default(),
                sync_lock: tokio::sync::Mutex::new(()),
                pull_requested: Notify::new(),
                push_requested: Notify::new(),
                additions: AtomicU64::new(0),
            }),
        }
    }

    /// The configuration in use (peers normalized).
    pub fn config(&self) -> &ProtocolDbConfig {
        &self.inner.config
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Where this database serves the document `hash`.
    pub fn document_url(&self, hash: &ProtocolHash) -> String {
        format!(
            "{}/protocols/{}",
            self.inner.config.public_url,
            hash.to_hex()
        )
    }

    /// Adds a document to the catalogue. The hash is computed over exactly `bytes`.
    pub async fn publish(&self, bytes: &[u8]) -> Result<Published, PublishError> {
        let limit = self.inner.config.max_document_bytes;
        let text = check_document(bytes, limit).map_err(|reason| {
            self.reject(reason);
            match reason {
                Rejection::TooLarge => PublishError::TooLarge {
                    size: bytes.len(),
                    limit,
                },
                Rejection::NotUtf8 => PublishError::NotUtf8,
                // `check_document` refuses for no other reason.
                Rejection::Empty | Rejection::BadHash | Rejection::HashMismatch => {
                    PublishError::Empty
                }
            }
        })?;
        let document = VerifiedDocument::from_text(text);
        let hash = document.hash();
        let span = tracing::info_span!("agora.protocol_db.publish", protocol_hash = %hash);
        let (_, created) = self
            .inner
            .store
            .catalogue()
            .publish_document(&document, None, self.inner.clock.now_ms())
            .instrument(span)
            .await?;
        if created {
            tracing::info!(protocol_hash = %hash, name = ?document.metadata().name, "protocol document published");
            self.inner
                .counters
                .published
                .fetch_add(1, Ordering::Relaxed);
            self.added(1);
        }
        Ok(Published {
            hash,
            url: self.document_url(&hash),
            created,
        })
    }

    /// The document `hash`, if the catalogue has it.
    pub async fn document(
        &self,
        hash: &ProtocolHash,
    ) -> Result<Option<VerifiedDocument>, StoreError> {
        Ok(self
            .inner
            .store
            .catalogue()
            .published_document(hash)
            .await?
            .map(|entry| entry.document))
    }

    /// The best matches for `query` by name and description, at most `limit` (capped by
    /// `max_search_results`). An empty query lists the newest entries.
    pub async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, StoreError> {
        let limit = limit.min(self.inner.config.max_search_results);
        let words = search::query_words(query);
        let span = tracing::debug_span!("agora.protocol_db.search", words = words.len());
        let wanted = if words.is_empty() {
            limit as i64
        } else {
            SEARCH_CANDIDATES
        };
        let candidates = self
            .inner
            .store
            .catalogue()
            .search_published(&words, wanted)
            .instrument(span)
            .await?;
        let mut hits: Vec<(i64, SearchHit)> = candidates
            .into_iter()
            .map(|entry| {
                let score =
                    search::score(&words, entry.name.as_deref(), entry.description.as_deref());
                let hit = SearchHit {
                    url: self.document_url(&entry.hash),
                    hash: entry.hash,
                    name: entry.name,
                    description: entry.description,
                    score,
                };
                (entry.seq, hit)
            })
            .filter(|(_, hit)| words.is_empty() || hit.score > 0)
            .collect();
        // Best first; among equals, the newest.
        hits.sort_by(|(seq_a, a), (seq_b, b)| b.score.cmp(&a.score).then(seq_b.cmp(seq_a)));
        Ok(hits.into_iter().take(limit).map(|(_, hit)| hit).collect())
    }

    /// The entries after `since`, with their texts, for peers: at most `limit` (capped by
    /// `max_page_entries`) and about `max_page_bytes` of text, but at least one entry if any.
    pub async fn changes(&self, since: i64, limit: usize) -> Result<ChangePage, StoreError> {
        let limit = limit.clamp(1, self.inner.config.max_page_entries);
        let mut rows = self
            .inner
            .store
            .catalogue()
            .published_since(since, limit as i64 + 1)
            .await?;
        let mut more = rows.len() > limit;
        rows.truncate(limit);
        let mut entries = Vec::with_capacity(rows.len());
        let mut bytes = 0;
        for row in rows {
            let size = row.document.text().len();
            if !entries.is_empty() && bytes + size > self.inner.config.max_page_bytes {
                more = true;
                break;
            }
            bytes += size;
            let metadata = row.document.metadata();
            entries.push(ChangeEntry {
                seq: row.seq,
                hash: row.document.hash().to_hex(),
                name: metadata.name.clone(),
                description: metadata.description.clone(),
                text: row.document.text().to_string(),
            });
        }
        let next = entries.last().map_or(since, |entry| entry.seq);
        Ok(ChangePage {
            entries,
            next,
            more,
        })
    }

    /// How many entries the catalogue holds, by origin.
    pub async fn counts(&self) -> Result<PublishedCounts, StoreError> {
        self.inner.store.catalogue().published_counts().await
    }

    /// What the store remembers about each configured peer.
    pub async fn peer_states(&self) -> Result<Vec<PeerState>, StoreError> {
        let mut states = Vec::with_capacity(self.inner.config.peers.len());
        for peer in &self.inner.config.peers {
            states.push(self.inner.store.catalogue().peer_state(peer).await?);
        }
        Ok(states)
    }

    /// The counters since start-up.
    pub fn counters(&self) -> ProtocolDbCounters {
        let counters = &self.inner.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ProtocolDbCounters {
            published: load(&counters.published),
            ingested: load(&counters.ingested),
            rejected: Rejection::ALL
                .iter()
                .zip(&counters.rejected)
                .map(|(reason, count)| (*reason, load(count)))
                .collect(),
            syncs: load(&counters.syncs),
            sync_errors: load(&counters.sync_errors),
            notifications_sent: load(&counters.notifications_sent),
            notification_errors: load(&counters.notification_errors),
        }
    }

    /// Counts a document refused before it reached the engine (the HTTP edge's body limit).
    pub fn count_rejection(&self, reason: Rejection) {
        self.reject(reason);
    }

    fn reject(&self, reason: Rejection) {
        // Fieldless variants number from 0 in declaration order, which `ALL` follows.
        self.inner.counters.rejected[reason as usize].fetch_add(1, Ordering::Relaxed);
    }
}
