//! A protocol database's wire: the page of catalogue changes one database serves to its peers
//! (`GET /protocols?since=<seq>&limit=<n>`) and a peer parses when it pulls, the body of
//! `POST /protocols`, and the checks every document passes before a database stores it.
//!
//! Its JSON is the protocol databases' own (snake_case), not the Agora envelope's camelCase;
//! it lives here with the other wire types so that the serving and the pulling side share one
//! type, and so that the parsing of these untrusted bytes is free of I/O (and fuzzed, see
//! `fuzz/`).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::document::VerifiedDocument;
use crate::hash::ProtocolHash;

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

impl ChangeEntry {
    /// The document this entry serves, if its text is within `max_document_bytes`, not blank,
    /// and what its hash names.
    pub fn verify(&self, max_document_bytes: usize) -> Result<VerifiedDocument, Rejection> {
        check_document(self.text.as_bytes(), max_document_bytes)?;
        let hash = ProtocolHash::parse(&self.hash).map_err(|_| Rejection::BadHash)?;
        VerifiedDocument::verify(&hash, self.text.as_bytes()).map_err(|_| Rejection::HashMismatch)
    }
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

/// Why a protocol database refuses a document, posted or pulled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rejection {
    /// Larger than `max_document_bytes`.
    TooLarge,
    /// Its text does not hash to the hash it was served under.
    HashMismatch,
    /// The hash it was served under is not a hash.
    BadHash,
    /// Not UTF-8 text.
    NotUtf8,
    /// Empty, or only white space.
    Empty,
}

impl Rejection {
    /// Every reason, for metrics.
    pub const ALL: [Rejection; 5] = [
        Rejection::TooLarge,
        Rejection::HashMismatch,
        Rejection::BadHash,
        Rejection::NotUtf8,
        Rejection::Empty,
    ];

    /// The reason as one snake_case word.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::TooLarge => "too_large",
            Rejection::HashMismatch => "hash_mismatch",
            Rejection::BadHash => "bad_hash",
            Rejection::NotUtf8 => "not_utf8",
            Rejection::Empty => "empty",
        }
    }
}

/// The text of a document a database may store: at most `max_document_bytes` bytes of UTF-8
/// that is not only white space. Refuses with [`Rejection::TooLarge`], [`Rejection::NotUtf8`]
/// or [`Rejection::Empty`], checked in that order.
pub fn check_document(bytes: &[u8], max_document_bytes: usize) -> Result<&str, Rejection> {
    if bytes.len() > max_document_bytes {
        return Err(Rejection::TooLarge);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| Rejection::NotUtf8)?;
    if text.trim().is_empty() {
        return Err(Rejection::Empty);
    }
    Ok(text)
}

/// Why a `POST /protocols` body names no document.
#[derive(Debug, thiserror::Error)]
pub enum PostedDocumentError {
    /// The body was sent as JSON but is not JSON.
    #[error("the body is not JSON: {0}")]
    NotJson(serde_json::Error),
    /// The JSON body has no string `text`.
    #[error("expected {{\"text\": <protocol document>}} or a text/plain body")]
    NoText,
}

/// The document a `POST /protocols` body carries: `{"text": ...}` when `content_type` is JSON
/// (`application/json` or any `+json` type, parameters ignored), otherwise the body itself.
/// The bytes are not checked yet (see [`check_document`]).
pub fn posted_document<'a>(
    content_type: Option<&str>,
    body: &'a [u8],
) -> Result<Cow<'a, [u8]>, PostedDocumentError> {
    let is_json = content_type
        .map(|value| {
            value
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .is_some_and(|mime| mime == "application/json" || mime.ends_with("+json"));
    if !is_json {
        return Ok(Cow::Borrowed(body));
    }
    let value: Value = serde_json::from_slice(body).map_err(PostedDocumentError::NotJson)?;
    match value.get("text") {
        Some(Value::String(text)) => Ok(Cow::Owned(text.clone().into_bytes())),
        _ => Err(PostedDocumentError::NoText),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_checked_for_size_then_encoding_then_content() {
        assert_eq!(check_document(b"abc", 3), Ok("abc"));
        assert_eq!(check_document(b"abcd", 3), Err(Rejection::TooLarge));
        assert_eq!(check_document(&[0xff, 0xff], 1), Err(Rejection::TooLarge));
        assert_eq!(check_document(&[0xff], 3), Err(Rejection::NotUtf8));
        assert_eq!(check_document(b" \n\t", 3), Err(Rejection::Empty));
    }

    #[test]
    fn an_entry_is_verified_against_its_hash() {
        let text = "---\nname: Echo\n---\nSend a word.";
        let entry = |hash: String, text: &str| ChangeEntry {
            seq: 1,
            hash,
            name: None,
            description: None,
            text: text.into(),
        };
        let good = entry(ProtocolHash::of(text.as_bytes()).to_hex(), text);
        assert_eq!(
            good.verify(1024).map(|document| document.hash().to_hex()),
            Ok(good.hash.clone())
        );
        assert_eq!(good.verify(4), Err(Rejection::TooLarge));
        assert_eq!(
            entry("nope".into(), text).verify(1024),
            Err(Rejection::BadHash)
        );
        assert_eq!(
            entry(ProtocolHash::of(b"other").to_hex(), text).verify(1024),
            Err(Rejection::HashMismatch)
        );
        assert_eq!(
            entry("nope".into(), " ").verify(1024),
            Err(Rejection::Empty)
        );
    }

    #[test]
    fn a_posted_body_is_the_document_unless_it_is_json() {
        let doc = |content_type, body| posted_document(content_type, body).map(Cow::into_owned);
        assert_eq!(doc(None, &b"{\"text\": 1}"[..]).unwrap(), b"{\"text\": 1}");
        assert_eq!(doc(Some("text/plain"), &b"pd"[..]).unwrap(), b"pd");
        assert_eq!(
            doc(
                Some("Application/JSON; charset=utf-8"),
                &br#"{"text": "pd"}"#[..]
            )
            .unwrap(),
            b"pd"
        );
        assert_eq!(
            doc(Some("application/x+json"), &br#"{"text": "pd"}"#[..]).unwrap(),
            b"pd"
        );
        assert!(matches!(
            doc(Some("application/json"), &b"pd"[..]),
            Err(PostedDocumentError::NotJson(_))
        ));
        let no_text = doc(Some("application/json"), &br#"{"text": 1}"#[..]).unwrap_err();
        assert_eq!(
            no_text.to_string(),
            "expected {\"text\": <protocol document>} or a text/plain body"
        );
    }
}
