//! The protocol database's `/metrics`, in the Prometheus text format.
//!
//! Catalogue sizes and per-peer cursors and error counts come from the store, so they survive
//! restarts; the `_total` counters (new documents, rejections, sync rounds and errors,
//! notifications) count since start-up, as Prometheus counters do.

use std::fmt::Write as _;

use agora_node::ProtocolDb;
use agora_store::StoreError;

use crate::metrics::esc;

/// Renders every metric of `db`.
pub(crate) async fn render(db: &ProtocolDb) -> Result<String, StoreError> {
    let counts = db.counts().await?;
    let peers = db.peer_states().await?;
    let counters = db.counters();
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, i64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    family(
        "agora_protocol_db_documents",
        "gauge",
        "Documents in the catalogue, by origin.",
        &[
            ("{origin=\"local\"}".into(), counts.local),
            ("{origin=\"peer\"}".into(), counts.from_peers),
        ],
    );
    family(
        "agora_protocol_db_published_total",
        "counter",
        "New documents posted to this database.",
        &[(String::new(), counters.published as i64)],
    );
    family(
        "agora_protocol_db_ingested_total",
        "counter",
        "New documents pulled from peers.",
        &[(String::new(), counters.ingested as i64)],
    );
    let rejected: Vec<(String, i64)> = counters
        .rejected
        .iter()
        .map(|(reason, n)| (format!("{{reason=\"{}\"}}", reason.as_str()), *n as i64))
        .collect();
    family(
        "agora_protocol_db_rejected_total",
        "counter",
        "Documents refused, posted or pulled, by reason.",
        &rejected,
    );
    family(
        "agora_protocol_db_syncs_total",
        "counter",
        "Sync rounds run (one pull from every peer).",
        &[(String::new(), counters.syncs as i64)],
    );
    family(
        "agora_protocol_db_sync_errors_total",
        "counter",
        "Pulls from a peer that failed.",
        &[(String::new(), counters.sync_errors as i64)],
    );
    family(
        "agora_protocol_db_notifications_total",
        "counter",
        "Notifications sent to peers, by outcome.",
        &[
            (
                "{outcome=\"sent\"}".into(),
                counters.notifications_sent as i64,
            ),
            (
                "{outcome=\"failed\"}".into(),
                counters.notification_errors as i64,
            ),
        ],
    );
    let label = |url: &str| format!("{{peer=\"{}\"}}", esc(url));
    family(
        "agora_protocol_db_peer_cursor",
        "gauge",
        "The last seq of each peer's catalogue taken.",
        &peers
            .iter()
            .map(|peer| (label(&peer.url), peer.last_seq))
            .collect::<Vec<_>>(),
    );
    family(
        "agora_protocol_db_peer_errors",
        "gauge",
        "Failed pulls from each peer, ever.",
        &peers
            .iter()
            .map(|peer| (label(&peer.url), peer.errors))
            .collect::<Vec<_>>(),
    );
    family(
        "agora_protocol_db_peer_rejected",
        "gauge",
        "Entries each peer served that failed verification, ever.",
        &peers
            .iter()
            .map(|peer| (label(&peer.url), peer.rejected))
            .collect::<Vec<_>>(),
    );
    Ok(out)
}
