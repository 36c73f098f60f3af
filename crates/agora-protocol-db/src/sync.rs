//! Syncing: a round pulls every peer's new entries, verifies each, stores the good ones and
//! moves the peer's cursor; the background loop runs rounds on the interval and when peers
//! notify, and notifies the peers when enough new entries arrived.
//!
//! A page is taken whole or not at all: its entries must come in increasing seq after the
//! cursor (anything else is a peer error, and nothing of the page is stored). Within a good
//! page, an entry that fails verification is rejected on its own (logged with the peer and the
//! hash, counted), and the cursor still moves past it: refetching it would only fail again.
//! One peer failing never stops the round for the others.

use std::sync::atomic::Ordering;
use std::time::Duration;

use agora_protocol::VerifiedDocument;
use agora_store::PeerPage;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{ChangePage, MIN_NOTIFIED_GAP, ProtocolDb};

/// What one sync round did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SyncReport {
    /// One report per configured peer, in configuration order.
    pub peers: Vec<PeerSyncReport>,
}

impl SyncReport {
    /// New documents stored from all peers.
    pub fn stored(&self) -> usize {
        self.peers.iter().map(|peer| peer.stored).sum()
    }

    /// Entries rejected from all peers.
    pub fn rejected(&self) -> usize {
        self.peers.iter().map(|peer| peer.rejected).sum()
    }

    /// Peers whose pull failed.
    pub fn errors(&self) -> usize {
        self.peers
            .iter()
            .filter(|peer| peer.error.is_some())
            .count()
    }
}

/// What pulling from one peer did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PeerSyncReport {
    /// The peer's base URL.
    pub peer: String,
    /// Pages fetched.
    pub pages: usize,
    /// New documents stored.
    pub stored: usize,
    /// Entries that failed verification.
    pub rejected: usize,
    /// The peer's cursor after the pull.
    pub cursor: i64,
    /// Why the pull stopped early, if it did.
    pub error: Option<String>,
}

/// A page's entries after verification.
struct CheckedPage {
    documents: Vec<VerifiedDocument>,
    rejected: usize,
    last_seq: i64,
}

impl ProtocolDb {
    /// Pulls from every peer now and returns what happened. Rounds never overlap: a call
    /// during another round waits for it, then pulls what is still new.
    pub async fn sync_now(&self) -> SyncReport {
        let _round = self.inner.sync_lock.lock().await;
        self.inner.counters.syncs.fetch_add(1, Ordering::Relaxed);
        let mut report = SyncReport::default();
        for peer in &self.inner.config.peers {
            let span = tracing::info_span!("agora.protocol_db.pull", peer = %peer);
            let pulled = self.pull(peer).instrument(span).await;
            if let Some(error) = &pulled.error {
                tracing::warn!(peer = %peer, %error, "pull from a peer failed");
                self.inner
                    .counters
                    .sync_errors
                    .fetch_add(1, Ordering::Relaxed);
                if let Err(store_error) = self
                    .inner
                    .store
                    .catalogue()
                    .record_peer_error(peer, error)
                    .await
                {
                    tracing::warn!(peer = %peer, error = %store_error, "could not record a peer error");
                }
            }
            report.peers.push(pulled);
        }
        if report.stored() > 0 || report.rejected() > 0 {
            tracing::info!(
                stored = report.stored(),
                rejected = report.rejected(),
                errors = report.errors(),
                "sync round done"
            );
        }
        report
    }

    /// Pulls pages from `peer` until it has nothing more or the round's page budget is spent.
    async fn pull(&self, peer: &str) -> PeerSyncReport {
        let mut report = PeerSyncReport {
            peer: peer.to_string(),
            ..PeerSyncReport::default()
        };
        let config = &self.inner.config;
        report.cursor = match self.inner.store.catalogue().peer_state(peer).await {
            Ok(state) => state.last_seq,
            Err(error) => {
                report.error = Some(format!("store: {error}"));
                return report;
            }
        };
        while report.pages < config.max_pages_per_sync.max(1) {
            let page = match self
                .inner
                .peer_client
                .changes(peer, report.cursor, config.pull_page_size.max(1))
                .await
            {
                Ok(page) => page,
                Err(error) => {
                    report.error = Some(error.to_string());
                    return report;
                }
            };
            report.pages += 1;
            let checked = match self.check_page(peer, report.cursor, &page) {
                Ok(checked) => checked,
                Err(error) => {
                    report.error = Some(error);
                    return report;
                }
            };
            let stored = PeerPage {
                url: peer,
                documents: &checked.documents,
                last_seq: checked.last_seq,
                rejected: checked.rejected as i64,
            };
            match self
                .inner
                .store
                .catalogue()
                .ingest_peer_page(stored, self.inner.clock.now_ms())
                .await
            {
                Ok(added) => {
                    report.stored += added;
                    report.rejected += checked.rejected;
                    report.cursor = checked.last_seq;
                    self.inner
                        .counters
                        .ingested
                        .fetch_add(added as u64, Ordering::Relaxed);
                    self.added(added as u64);
                }
                Err(error) => {
                    report.error = Some(format!("store: {error}"));
                    return report;
                }
            }
            if !page.more || page.entries.is_empty() {
                break;
            }
        }
        report
    }

    /// Verifies a page's entries. A page out of order is an error; a bad entry is a rejection.
    fn check_page(
        &self,
        peer: &str,
        cursor: i64,
        page: &ChangePage,
    ) -> Result<CheckedPage, String> {
        let mut checked = CheckedPage {
            documents: Vec::with_capacity(page.entries.len()),
            rejected: 0,
            last_seq: cursor,
        };
        for entry in &page.entries {
            if entry.seq <= checked.last_seq {
                return Err(format!(
                    "the peer served seq {} after {}: entries must increase past the cursor",
                    entry.seq, checked.last_seq
                ));
            }
            checked.last_seq = entry.seq;
            match entry.verify(self.inner.config.max_document_bytes) {
                Ok(document) => checked.documents.push(document),
                Err(reason) => {
                    tracing::warn!(
                        peer = %peer,
                        protocol_hash = %entry.hash.chars().take(64).collect::<String>(),
                        seq = entry.seq,
                        reason = reason.as_str(),
                        "rejected a document served by a peer"
                    );
                    self.reject(reason);
                    checked.rejected += 1;
                }
            }
        }
        Ok(checked)
    }

    /// Asks the background loop to pull from the peers soon (a peer's notification). Requests
    /// made while one is pending coalesce.
    pub fn request_sync(&self) {
        self.inner.pull_requested.notify_one();
    }

    /// Runs the background work until `shutdown`: a sync every `interval` (the first at once;
    /// `None` syncs only when notified), pulls notified by peers, and notifications to peers.
    pub async fn run(&self, interval: Option<Duration>, shutdown: CancellationToken) {
        let mut ticks =
            interval.map(|every| tokio::time::interval(every.max(Duration::from_millis(100))));
        if let Some(ticks) = ticks.as_mut() {
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        let mut last_notified_pull: Option<tokio::time::Instant> = None;
        loop {
            let tick = async {
                match ticks.as_mut() {
                    Some(ticks) => ticks.tick().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick => {
                    self.sync_now().await;
                }
                _ = self.inner.pull_requested.notified() => {
                    if let Some(last) = last_notified_pull {
                        let wait = tokio::time::sleep_until(last + MIN_NOTIFIED_GAP);
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            _ = wait => {}
                        }
                    }
                    self.sync_now().await;
                    last_notified_pull = Some(tokio::time::Instant::now());
                }
                _ = self.inner.push_requested.notified() => {
                    self.notify_peers().await;
                }
            }
        }
    }

    /// Tells every peer that this database has new entries; failures are logged and counted.
    pub async fn notify_peers(&self) {
        for peer in &self.inner.config.peers {
            match self.inner.peer_client.notify(peer).await {
                Ok(()) => {
                    self.inner
                        .counters
                        .notifications_sent
                        .fetch_add(1, Ordering::Relaxed);
                }
                Err(error) => {
                    tracing::info!(peer = %peer, %error, "could not notify a peer");
                    self.inner
                        .counters
                        .notification_errors
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Counts new entries and asks for a notification each time another
    /// `notify_every_additions` of them arrived.
    pub(super) fn added(&self, new: u64) {
        let every = self.inner.config.notify_every_additions;
        if new == 0 || every == 0 || self.inner.config.peers.is_empty() {
            return;
        }
        let before = self.inner.additions.fetch_add(new, Ordering::Relaxed);
        if before / every != (before + new) / every {
            self.inner.push_requested.notify_one();
        }
    }
}
