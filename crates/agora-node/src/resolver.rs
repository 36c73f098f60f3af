//! Protocol document resolution.
//!
//! A request names a PD by hash and lists sources. The resolver looks in the
//! store first; otherwise it tries the sources in order (`data:` URIs, then
//! http(s) through the SSRF-guarded fetcher) and verifies the SHA-1 over the
//! exact bytes. Only a [`VerifiedDocument`] is ever stored.
//!
//! Architecture invariant: one failing source never stops the next one, and
//! every failure is reported back with its reason.

use agora_fetch::Fetcher;
use agora_protocol::data_uri;
use agora_protocol::{ProtocolHash, VerifiedDocument};
use agora_store::{Store, StoreError};

/// Most sources tried for one request; the rest are ignored.
const MAX_SOURCES_TRIED: usize = 8;

/// Why one source did not yield the document.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceFailure {
    /// The source, shortened for display (`data:` URIs are cut).
    pub source: String,
    /// What went wrong, in words fit for the peer (no OS error or resolved address; see
    /// `FetchError::peer_reason`).
    pub reason: String,
}

/// Why a protocol document could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// No source gave a document with the right hash.
    #[error("{}", describe_failures(.hash, .failures))]
    Unavailable {
        /// The requested hash.
        hash: ProtocolHash,
        /// One entry per source tried.
        failures: Vec<SourceFailure>,
    },
    /// The store failed.
    #[error("store error: {0}")]
    Store(#[from] StoreError),
}

fn describe_failures(hash: &ProtocolHash, failures: &[SourceFailure]) -> String {
    if failures.is_empty() {
        return format!("unknown protocol {hash} and no sources were given");
    }
    let parts: Vec<String> = failures
        .iter()
        .map(|f| format!("{}: {}", f.source, f.reason))
        .collect();
    format!(
        "could not obtain protocol {hash} from any source ({})",
        parts.join("; ")
    )
}

/// Finds and verifies protocol documents.
#[derive(Clone)]
pub struct Resolver {
    store: Store,
    fetcher: Fetcher,
}

impl Resolver {
    /// A resolver over a store and a fetcher.
    pub fn new(store: Store, fetcher: Fetcher) -> Self {
        Self { store, fetcher }
    }

    /// Resolves a hash to its verified document, fetching it if needed.
    pub async fn resolve(
        &self,
        hash: &ProtocolHash,
        sources: &[String],
        now_ms: i64,
    ) -> Result<VerifiedDocument, ResolveError> {
        if let Some(stored) = self.store.document(hash).await? {
            let new_urls: Vec<String> = sources
                .iter()
                .filter(|s| !data_uri::is_data_uri(s) && !stored.sources.contains(s))
                .take(MAX_SOURCES_TRIED)
                .cloned()
                .collect();
            if !new_urls.is_empty() {
                // Remembered but not trusted: they are only offered onwards
                // (in /.wellknown) after this node verified the document.
                self.store.add_sources(hash, &new_urls).await?;
            }
            return Ok(stored.document);
        }
        let mut failures = Vec::new();
        for source in sources.iter().take(MAX_SOURCES_TRIED) {
            match self.try_source(hash, source).await {
                Ok(document) => {
                    let urls: Vec<String> = sources
                        .iter()
                        .filter(|s| !data_uri::is_data_uri(s))
                        .take(MAX_SOURCES_TRIED)
                        .cloned()
                        .collect();
                    self.store.put_document(&document, &urls, now_ms).await?;
                    tracing::info!(protocol_hash = %hash, source = %short(source), "protocol document verified and stored");
                    return Ok(document);
                }
                Err(reason) => {
                    tracing::info!(protocol_hash = %hash, source = %short(source), %reason, "protocol source failed");
                    failures.push(SourceFailure {
                        source: short(source),
                        reason,
                    });
                }
            }
        }
        Err(ResolveError::Unavailable {
            hash: *hash,
            failures,
        })
    }

    async fn try_source(
        &self,
        hash: &ProtocolHash,
        source: &str,
    ) -> Result<VerifiedDocument, String> {
        let bytes = if data_uri::is_data_uri(source) {
            data_uri::decode(source).map_err(|e| e.to_string())?
        } else if source.starts_with("http://") || source.starts_with("https://") {
            self.fetcher
                .fetch_text(source)
                .await
                .map_err(|error| {
                    // The peer reads the reason; the transport detail stays in the log.
                    tracing::info!(source = %short(source), %error, "fetching a protocol document failed");
                    error.peer_reason()
                })?
                .text
                .into_bytes()
        } else {
            return Err("unsupported source (expected http(s):// or data:)".into());
        };
        VerifiedDocument::verify(hash, &bytes).map_err(|e| e.to_string())
    }
}

/// A source as shown in messages: `data:` URIs are cut to their header.
fn short(source: &str) -> String {
    if data_uri::is_data_uri(source) {
        let header = source.split(',').next().unwrap_or("data:");
        format!("{header},…")
    } else {
        source.chars().take(200).collect()
    }
}
