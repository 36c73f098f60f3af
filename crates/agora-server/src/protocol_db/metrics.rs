//! The protocol database's `/metrics`, through `prometheus-client`.
//!
//! Catalogue sizes and per-peer cursors and error counts come from the store, so they survive
//! restarts; the `_total` counters (new documents, rejections, sync rounds and errors,
//! notifications) count since start-up, as Prometheus counters do. All of them are read at
//! scrape time by the collector of the database's own registry (see [`crate::metrics`]).

use agora_protocol_db::{ProtocolDb, ProtocolDbCounters};
use agora_store::{PeerState, PublishedCounts, StoreError};
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::metrics::{Exposition, Figures, MetricsError, family, single};

/// One protocol database's metrics.
#[derive(Debug)]
pub(crate) struct ProtocolDbMetrics {
    exposition: Exposition<DbFigures>,
}

impl ProtocolDbMetrics {
    pub(crate) fn new() -> Self {
        Self {
            exposition: Exposition::new(Registry::default()),
        }
    }

    /// Renders every metric of `db`, reading its store now.
    pub(crate) async fn render(&self, db: &ProtocolDb) -> Result<String, MetricsError> {
        self.exposition.render(DbFigures::read(db)).await
    }
}

/// A database's figures, read for one scrape.
#[derive(Debug)]
struct DbFigures {
    counts: PublishedCounts,
    peers: Vec<PeerState>,
    counters: ProtocolDbCounters,
}

impl DbFigures {
    async fn read(db: &ProtocolDb) -> Result<Self, StoreError> {
        Ok(Self {
            counts: db.counts().await?,
            peers: db.peer_states().await?,
            counters: db.counters(),
        })
    }
}

impl Figures for DbFigures {
    fn encode(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let counters = &self.counters;
        family(
            encoder,
            "agora_protocol_db_documents",
            "Documents in the catalogue, by origin.",
            [
                ([("origin", "local")], ConstGauge::new(self.counts.local)),
                (
                    [("origin", "peer")],
                    ConstGauge::new(self.counts.from_peers),
                ),
            ],
        )?;
        for (name, help, value) in [
            (
                "agora_protocol_db_published",
                "New documents posted to this database.",
                counters.published,
            ),
            (
                "agora_protocol_db_ingested",
                "New documents pulled from peers.",
                counters.ingested,
            ),
        ] {
            single(encoder, name, help, ConstCounter::new(value))?;
        }
        family(
            encoder,
            "agora_protocol_db_rejected",
            "Documents refused, posted or pulled, by reason.",
            counters
                .rejected
                .iter()
                .map(|(reason, n)| ([("reason", reason.as_str())], ConstCounter::new(*n))),
        )?;
        for (name, help, value) in [
            (
                "agora_protocol_db_syncs",
                "Sync rounds run (one pull from every peer).",
                counters.syncs,
            ),
            (
                "agora_protocol_db_sync_errors",
                "Pulls from a peer that failed.",
                counters.sync_errors,
            ),
        ] {
            single(encoder, name, help, ConstCounter::new(value))?;
        }
        family(
            encoder,
            "agora_protocol_db_notifications",
            "Notifications sent to peers, by outcome.",
            [
                ("sent", counters.notifications_sent),
                ("failed", counters.notification_errors),
            ]
            .map(|(outcome, n)| ([("outcome", outcome)], ConstCounter::new(n))),
        )?;
        for (name, help, value) in [
            (
                "agora_protocol_db_peer_cursor",
                "The last seq of each peer's catalogue taken.",
                (|peer: &PeerState| peer.last_seq) as fn(&PeerState) -> i64,
            ),
            (
                "agora_protocol_db_peer_errors",
                "Failed pulls from each peer, ever.",
                |peer| peer.errors,
            ),
            (
                "agora_protocol_db_peer_rejected",
                "Entries each peer served that failed verification, ever.",
                |peer| peer.rejected,
            ),
        ] {
            family(
                encoder,
                name,
                help,
                self.peers
                    .iter()
                    .map(|peer| ([("peer", peer.url.as_str())], ConstGauge::new(value(peer)))),
            )?;
        }
        Ok(())
    }
}
