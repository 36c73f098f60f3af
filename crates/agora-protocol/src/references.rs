//! Protocols built on protocols: a PD may reference other PDs by hash.
//!
//! The front-matter key `references` lists them, each with the sources it can be fetched from,
//! in the same form a request names its own protocol:
//!
//! ```yaml
//! references:
//!   - hash: 7c2e0f...          # SHA-1, 40 hex digits or base64
//!     sources: [https://db.example/protocols/7c2e0f..., "data:text/plain;..."]
//! ```
//!
//! A referenced document is resolved and verified exactly as a request's protocol is (the node's
//! resolver, behind the same SSRF guard), within bounds on depth, count and total size, and a
//! cycle is an error. Reading the list here is pure: a malformed list is a [`ReferenceError`], so
//! that a PD that means to build on others and says so badly is not served as if it stood alone.

use crate::document::Metadata;
use crate::hash::ProtocolHash;

/// The front-matter key.
pub const REFERENCES_KEY: &str = "references";

/// One referenced protocol document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// Its hash.
    pub hash: ProtocolHash,
    /// Where it can be fetched, in order (`http(s)://` or `data:`); may be empty when the
    /// receiver is expected to have it.
    pub sources: Vec<String>,
}

/// Why a PD's `references` cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// `references` is not a list of `{hash, sources}` objects.
    #[error("references[{index}]: {reason}")]
    Malformed {
        /// The entry (0-based); the list itself is entry 0 when it is not a list.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

impl Metadata {
    /// The documents this one references, in order; none when it has no `references` key.
    pub fn references(&self) -> Result<Vec<Reference>, ReferenceError> {
        let Some(value) = self.extra.get(REFERENCES_KEY) else {
            return Ok(Vec::new());
        };
        let malformed = |index: usize, reason: &str| ReferenceError::Malformed {
            index,
            reason: reason.to_string(),
        };
        let entries = value
            .as_array()
            .ok_or_else(|| malformed(0, "references must be a list of {hash, sources}"))?;
        entries
            .iter()
            .enumerate()
            .map(|(index, entry)| {
                let hash = entry
                    .get("hash")
                    .and_then(serde_json::Value::as_str)
                    .ok_or_else(|| malformed(index, "hash is required, a string"))?;
                let hash = ProtocolHash::parse(hash.trim())
                    .map_err(|error| malformed(index, &error.to_string()))?;
                let sources = match entry.get("sources") {
                    None | Some(serde_json::Value::Null) => Vec::new(),
                    Some(serde_json::Value::Array(sources)) => sources
                        .iter()
                        .map(|s| s.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| malformed(index, "sources must be strings"))?,
                    Some(_) => return Err(malformed(index, "sources must be a list")),
                };
                Ok(Reference { hash, sources })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::document::ProtocolDocument;

    use super::*;

    #[test]
    fn references_are_read_in_order_with_their_sources() {
        let weather = ProtocolHash::of(b"weather");
        let other = ProtocolHash::of(b"other");
        let text = format!(
            "---\nname: X\nreferences:\n  - hash: {}\n    sources: [https://db.test/w, 'data:,x']\n  - hash: {}\n---\nBody\n",
            weather.to_hex(),
            other.to_base64()
        );
        let references = ProtocolDocument::parse(&text)
            .metadata
            .references()
            .unwrap();
        assert_eq!(
            references,
            vec![
                Reference {
                    hash: weather,
                    sources: vec!["https://db.test/w".into(), "data:,x".into()]
                },
                Reference {
                    hash: other,
                    sources: vec![]
                },
            ]
        );
        assert_eq!(
            ProtocolDocument::parse("---\nname: X\n---\nB\n")
                .metadata
                .references(),
            Ok(vec![])
        );
    }

    #[test]
    fn a_malformed_list_is_an_error_not_an_empty_one() {
        for yaml in [
            "references: 3",
            "references:\n  - sources: []",
            "references:\n  - hash: nothex",
            "references:\n  - hash: 0123456789012345678901234567890123456789\n    sources: 4",
        ] {
            let text = format!("---\nname: X\n{yaml}\n---\nB\n");
            let parsed = ProtocolDocument::parse(&text);
            assert!(parsed.metadata.references().is_err(), "{yaml}");
        }
    }
}
