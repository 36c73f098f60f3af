//! A protocol database's page of catalogue changes: what one database serves to its peers
//! (`GET /protocols?since=<seq>&limit=<n>`) and what a peer parses when it pulls.
//!
//! Its JSON is the protocol databases' own (snake_case), not the Agora envelope's camelCase;
//! it lives here with the other wire types so that the serving and the pulling side share one
//! type.

use serde::{Deserialize, Serialize};

/// One catalogue entry as served to peers, with its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeEntry {
    /// Its position in the serving database's catalogue.
    pub seq: i64,
    /// The SHA-1 of `text`, as 40 hex digits (a puller checks it).
    pub hash: String,
    /// The name from the front matter, if any.
    #[serde(default)]
    pub name: Option<String>,
    /// The description from the front matter, if any.
    #[serde(default)]
    pub description: Option<String>,
    /// The exact text of the document.
    pub text: String,
}

/// A page of a catalogue: the entries after a cursor, in seq order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangePage {
    /// The entries, in increasing `seq`.
    pub entries: Vec<ChangeEntry>,
    /// The cursor for the next page: the last entry's seq, or the requested cursor when empty.
    pub next: i64,
    /// Whether entries after `next` exist.
    pub more: bool,
}
