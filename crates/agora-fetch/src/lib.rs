//! Fetching protocol documents over HTTP(S) behind an SSRF guard.
//!
//! An Agora request names a protocol document by hash and lists the URLs it
//! can be fetched from. Those URLs come from an untrusted sender, so a node
//! that fetched them naively would let any peer make it talk to its own
//! loopback services, its cloud metadata endpoint or its private network.
//! This crate is the one place where such URLs are dereferenced, and it
//! refuses every non-public address unless the operator allowlisted it.
//!
//! The guard works where the connection is made, not on the URL text:
//!
//! - host names go through [`reqwest`] with a resolver of ours that drops
//!   every refused address, so a name that resolves (or re-resolves, as in DNS
//!   rebinding) to a private address never gets a connection;
//! - IP-literal hosts never reach a resolver, so they are checked before each
//!   request is sent;
//! - the address actually connected to is checked again on the response;
//! - redirects are followed by hand so that every hop goes through the same
//!   checks, and proxies are disabled so that none can stand in between.
//!
//! Bodies are read under a size limit and the whole fetch under a deadline,
//! and text is decoded by the charset the server declares, defaulting to
//! UTF-8 (not ISO-8859-1) because protocol documents are UTF-8 by convention
//! and their hash is taken over the exact bytes.
//!
//! Targets the operator configured (receivers, protocol databases, HTTP
//! tools) are reached through a [`TargetClient`] instead: no address guard,
//! but the same body limit and deadline, and no redirects. It is the one other
//! outbound HTTP path of a node.
//!
//! The crate reads no environment: the operator's choices arrive in a
//! [`FetchPolicy`] and a [`TargetPolicy`].

#![deny(missing_docs)]

mod address;
mod body;
mod decode;
mod error;
mod fetcher;
mod policy;
mod resolve;
mod target;

pub use address::{AddressClass, classify, is_allowed};
pub use error::FetchError;
pub use fetcher::{Fetched, Fetcher};
pub use policy::FetchPolicy;
pub use target::{TargetClient, TargetPolicy, TargetRequest, TargetResponse};
