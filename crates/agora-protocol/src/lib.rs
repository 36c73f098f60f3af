//! The Agora wire protocol, free of I/O.
//!
//! Everything an Agora peer exchanges is defined here: the request envelope
//! (`{protocolHash, protocolSources, body, multiround?}`), the reply
//! (`{status, body, conversationId?, ...}`), protocol hashes in both dialects
//! (40-hex as in the formal spec, base64 as in the Python reference library),
//! protocol documents with their front matter, and `data:` URIs.
//!
//! Architecture invariant: the camelCase JSON of the wire lives only in this
//! crate. Other crates use the typed values.
#![deny(missing_docs)]

pub mod changes;
pub mod data_uri;
pub mod document;
pub mod hash;
pub mod negotiation;
pub mod references;
pub mod wire;

pub use changes::{ChangeEntry, ChangePage};
pub use document::{Metadata, ProtocolDocument, VerifiedDocument, VerifyError};
pub use hash::{HashDialect, HashParseError, ProtocolHash};
pub use references::{Reference, ReferenceError};
pub use wire::{
    Body, ErrorCode, FollowUp, ProtocolRef, Reply, Request, Status, WellKnown, WireError,
};
