//! Protocol document resolution.
//!
//! A request names a PD by hash and lists sources. The resolver looks in the
//! store first; otherwise it tries the sources in order (`data:` URIs, then
//! http(s) through the SSRF-guarded fetcher) and verifies the SHA-1 over the
//! exact bytes. Only a [`VerifiedDocument`] is ever stored.
//!
//! Architecture invariant: one failing source never stops the next one, and
//! every failure is reported back with its reason.
//!
//! A document may build on others: its front matter's `references` names them by hash, with
//! sources (see `agora_protocol::references`). [`Resolver::references`] resolves them with the
//! same code (store, then sources, verified, behind the same SSRF guard), depth first, each
//! document once, within [`MAX_REFERENCE_DEPTH`], [`MAX_REFERENCES`] and
//! [`MAX_REFERENCED_BYTES`]; a reference back to a document on its own path is a cycle. Any of
//! these is an error naming the document, so a request under it fails with a sentence saying
//! which reference could not be followed, rather than being answered without it.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;

use agora_fetch::Fetcher;
use agora_protocol::data_uri;
use agora_protocol::{ProtocolHash, Reference, ReferenceError, VerifiedDocument};
use agora_store::{Store, StoreError};

/// Most sources tried for one request; the rest are ignored.
const MAX_SOURCES_TRIED: usize = 8;
/// Deepest chain of references followed from a request's document.
pub const MAX_REFERENCE_DEPTH: usize = 4;
/// Most documents referenced, directly or not, by one document.
pub const MAX_REFERENCES: usize = 16;
/// Largest total size of the documents one document references, in bytes.
pub const MAX_REFERENCED_BYTES: usize = 256 * 1024;

/// Why a document's references could not be followed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReferenceFailure {
    /// The front matter's `references` is malformed.
    #[error("its references are malformed: {0}")]
    Malformed(#[from] ReferenceError),
    /// A reference leads back to a document on its own path.
    #[error("its references form a cycle: {}", hex_path(.path))]
    Cycle {
        /// The path, from the request's document to the repeated one.
        path: Vec<ProtocolHash>,
    },
    /// The chain of references is longer than [`MAX_REFERENCE_DEPTH`].
    #[error("its references go deeper than {MAX_REFERENCE_DEPTH} levels")]
    TooDeep,
    /// More than [`MAX_REFERENCES`] documents are referenced.
    #[error("it references more than {MAX_REFERENCES} documents")]
    TooMany,
    /// The referenced documents are larger than [`MAX_REFERENCED_BYTES`] together.
    #[error("its referenced documents exceed {MAX_REFERENCED_BYTES} bytes")]
    TooLarge,
    /// A referenced document could not be resolved.
    #[error("the referenced protocol {hash} is unavailable: {reason}")]
    Missing {
        /// The reference.
        hash: ProtocolHash,
        /// Why, from its sources.
        reason: String,
    },
}

fn hex_path(path: &[ProtocolHash]) -> String {
    path.iter()
        .map(ProtocolHash::to_hex)
        .collect::<Vec<_>>()
        .join(" -> ")
}

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
    /// The document's references could not be followed.
    #[error("protocol {hash} cannot be used: {failure}")]
    References {
        /// The document whose references failed.
        hash: ProtocolHash,
        /// Why.
        failure: ReferenceFailure,
    },
    /// The store failed.
    #[error("store error: {0}")]
    Store(#[from] StoreError),
}

/// What following references has found so far.
#[derive(Default)]
struct Walk {
    found: Vec<VerifiedDocument>,
    seen: HashSet<ProtocolHash>,
    bytes: usize,
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

    /// The documents `document` references, directly or not, depth first, each once, resolved
    /// and verified as [`Self::resolve`] does (and so stored). None when it references nothing.
    pub async fn references(
        &self,
        document: &VerifiedDocument,
        now_ms: i64,
    ) -> Result<Vec<VerifiedDocument>, ResolveError> {
        walk_references(self, document, now_ms).await
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

/// Where following references finds a document: the resolver, or a test's table.
#[async_trait::async_trait]
trait Lookup: Sync {
    async fn lookup(
        &self,
        reference: &Reference,
        now_ms: i64,
    ) -> Result<VerifiedDocument, ResolveError>;
}

#[async_trait::async_trait]
impl Lookup for Resolver {
    async fn lookup(
        &self,
        reference: &Reference,
        now_ms: i64,
    ) -> Result<VerifiedDocument, ResolveError> {
        self.resolve(&reference.hash, &reference.sources, now_ms)
            .await
    }
}

/// [`Resolver::references`], over any [`Lookup`].
async fn walk_references(
    lookup: &dyn Lookup,
    document: &VerifiedDocument,
    now_ms: i64,
) -> Result<Vec<VerifiedDocument>, ResolveError> {
    let root = document.hash();
    let mut walk = Walk::default();
    walk.seen.insert(root);
    let mut path = vec![root];
    follow(lookup, document, &mut path, &mut walk, now_ms)
        .await
        .map_err(|failure| match failure {
            Followed::Store(error) => ResolveError::Store(error),
            Followed::Failed(failure) => ResolveError::References {
                hash: root,
                failure,
            },
        })?;
    Ok(walk.found)
}

/// Follows `document`'s references, depth first; `path` is the chain from the root to it.
fn follow<'a>(
    lookup: &'a dyn Lookup,
    document: &'a VerifiedDocument,
    path: &'a mut Vec<ProtocolHash>,
    walk: &'a mut Walk,
    now_ms: i64,
) -> Pin<Box<dyn Future<Output = Result<(), Followed>> + Send + 'a>> {
    Box::pin(async move {
        let references = document
            .metadata()
            .references()
            .map_err(|e| Followed::Failed(e.into()))?;
        for reference in references {
            if path.contains(&reference.hash) {
                let mut cycle = path.clone();
                cycle.push(reference.hash);
                return Err(Followed::Failed(ReferenceFailure::Cycle { path: cycle }));
            }
            if !walk.seen.insert(reference.hash) {
                continue; // reached before by another path: counted once
            }
            if path.len() > MAX_REFERENCE_DEPTH {
                return Err(Followed::Failed(ReferenceFailure::TooDeep));
            }
            if walk.seen.len() > MAX_REFERENCES + 1 {
                return Err(Followed::Failed(ReferenceFailure::TooMany));
            }
            let referenced = match lookup.lookup(&reference, now_ms).await {
                Ok(referenced) => referenced,
                Err(ResolveError::Store(error)) => return Err(Followed::Store(error)),
                Err(error) => {
                    return Err(Followed::Failed(ReferenceFailure::Missing {
                        hash: reference.hash,
                        reason: error.to_string(),
                    }));
                }
            };
            walk.bytes += referenced.text().len();
            if walk.bytes > MAX_REFERENCED_BYTES {
                return Err(Followed::Failed(ReferenceFailure::TooLarge));
            }
            path.push(reference.hash);
            follow(lookup, &referenced, path, walk, now_ms).await?;
            path.pop();
            walk.found.push(referenced);
        }
        Ok(())
    })
}

/// How following a reference ended, before it is put in the request's terms.
enum Followed {
    Store(StoreError),
    Failed(ReferenceFailure),
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Documents by the hash a reference names. The walk keys on the names, so a table can hold
    /// what SHA-1 makes impossible to write down: a cycle.
    struct Table(HashMap<ProtocolHash, String>);

    #[async_trait::async_trait]
    impl Lookup for Table {
        async fn lookup(
            &self,
            reference: &Reference,
            _now_ms: i64,
        ) -> Result<VerifiedDocument, ResolveError> {
            match self.0.get(&reference.hash) {
                Some(text) => Ok(VerifiedDocument::from_text(text)),
                None => Err(ResolveError::Unavailable {
                    hash: reference.hash,
                    failures: Vec::new(),
                }),
            }
        }
    }

    fn referencing(name: &str, hashes: &[ProtocolHash]) -> String {
        let list: Vec<String> = hashes
            .iter()
            .map(|h| format!("{{hash: {}}}", h.to_hex()))
            .collect();
        format!(
            "---\nname: {name}\nreferences: [{}]\n---\nBody.\n",
            list.join(", ")
        )
    }

    fn name(n: usize) -> ProtocolHash {
        ProtocolHash::of(format!("document {n}").as_bytes())
    }

    async fn walk(root: &str, table: Vec<(ProtocolHash, String)>) -> Result<Vec<String>, String> {
        let table = Table(table.into_iter().collect());
        walk_references(&table, &VerifiedDocument::from_text(root), 0)
            .await
            .map(|found| found.iter().map(|d| d.display_name()).collect())
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn references_are_found_depth_first_and_each_once() {
        let (a, b, c) = (name(1), name(2), name(3));
        let table = vec![
            (a, referencing("A", &[c])),
            (b, referencing("B", &[c])),
            (c, "---\nname: C\n---\nLeaf.\n".to_string()),
        ];
        let found = walk(&referencing("Root", &[a, b]), table).await.unwrap();
        assert_eq!(found, ["C", "A", "B"]);
    }

    #[tokio::test]
    async fn a_cycle_is_an_error_naming_the_path() {
        let root = referencing("Root", &[name(1)]);
        let root_hash = ProtocolHash::of(root.as_bytes());
        let table = vec![(name(1), referencing("A", &[root_hash]))];
        let error = walk(&root, table).await.unwrap_err();
        assert!(error.contains("cycle"), "{error}");
        let path = format!(
            "{} -> {} -> {}",
            root_hash.to_hex(),
            name(1).to_hex(),
            root_hash.to_hex()
        );
        assert!(error.contains(&path), "{error}");
    }

    #[tokio::test]
    async fn bounds_and_missing_documents_are_errors() {
        let missing = walk(&referencing("Root", &[name(9)]), vec![])
            .await
            .unwrap_err();
        assert!(
            missing.contains(&name(9).to_hex()) && missing.contains("unavailable"),
            "{missing}"
        );

        let many: Vec<ProtocolHash> = (0..=MAX_REFERENCES).map(name).collect();
        let table = many
            .iter()
            .map(|h| (*h, "---\nname: Leaf\n---\nLeaf.\n".to_string()))
            .collect();
        let error = walk(&referencing("Root", &many), table).await.unwrap_err();
        assert!(error.contains("more than"), "{error}");

        let big = format!(
            "---\nname: Big\n---\n{}\n",
            "x".repeat(MAX_REFERENCED_BYTES)
        );
        let error = walk(&referencing("Root", &[name(1)]), vec![(name(1), big)])
            .await
            .unwrap_err();
        assert!(error.contains("bytes"), "{error}");

        let chain: Vec<(ProtocolHash, String)> = (1..=MAX_REFERENCE_DEPTH + 1)
            .map(|n| (name(n), referencing("Link", &[name(n + 1)])))
            .chain([(name(MAX_REFERENCE_DEPTH + 2), "Leaf.".to_string())])
            .collect();
        let error = walk(&referencing("Root", &[name(1)]), chain)
            .await
            .unwrap_err();
        assert!(error.contains("deeper"), "{error}");
    }
}
