//! The fuzz targets' bodies: one function per parser that takes bytes from strangers, each
//! starting from raw bytes the way the node does (`serde_json::from_slice` for a JSON body,
//! `str::from_utf8` where the bytes are text).
//!
//! Each AFL binary (`src/bin/<target>.rs`) calls one of these in AFL++'s persistent mode; the
//! corpus test (`tests/corpus.rs`) runs every file of `corpus/` through every one of them
//! without instrumentation. A target fails only by panicking. Besides "no panic", a target
//! checks a round trip where one is cheap and must hold (a value the node writes reads back as
//! the same value).
//!
//! Errors are rendered (`to_string`) because the node renders them into its replies and logs.

use agora_protocol::changes::{check_document, posted_document};
use agora_protocol::data_uri;
use agora_protocol::negotiation::{FinalProtocol, Registration};
use agora_protocol::{ChangePage, FollowUp, ProtocolHash, Reply, Request, VerifiedDocument};
use agora_routine_contract::RoutineManifest;
use serde_json::Value;

/// The largest document a protocol database accepts by default (`max_document_bytes`).
const MAX_DOCUMENT_BYTES: usize = 64 * 1024;

/// Renders a value as the node would (into a reply or a log line), keeping the text alive.
fn render(value: &dyn std::fmt::Display) {
    std::hint::black_box(value.to_string());
}

/// A target's body: it returns, or it panics.
pub type Target = fn(&[u8]);

/// Every target, by name: the name is the binary's and the corpus folder's.
pub const TARGETS: &[(&str, Target)] = &[
    ("envelope", envelope),
    ("follow_up", follow_up),
    ("hash", hash),
    ("data_uri", data_uri),
    ("front_matter", front_matter),
    ("negotiation", negotiation),
    ("db_page", db_page),
    ("db_post", db_post),
    ("manifest", manifest),
];

/// `POST /` (either dialect) as the server reads it, and a reply as a sender reads it: the
/// same JSON object family, so one input feeds both. A request or reply the node writes back
/// out reads back as itself.
pub fn envelope(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    match Request::from_json(&value) {
        Ok(request) => {
            let _ = request.body.to_text();
            assert_eq!(Request::from_json(&request.to_json()), Ok(request));
        }
        Err(error) => render(&error),
    }
    if let Some(reply) = Reply::from_json(&value) {
        assert_eq!(Reply::from_json(&reply.to_json()), Some(reply));
    }
}

/// `POST /conversations/{id}`: a follow-up's body, as the server reads it.
pub fn follow_up(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    match FollowUp::from_json(&value) {
        Ok(follow_up) => {
            let text = follow_up.body.to_text();
            if let Some(Value::String(body)) = value.get("body") {
                assert_eq!(&text, body);
            }
        }
        Err(error) => render(&error),
    }
}

/// A protocol hash in either dialect (a request's `protocolHash`, a path's `{hash}`). A parsed
/// hash spelled in its dialect parses back to the same hash and dialect.
pub fn hash(data: &[u8]) {
    let _ = serde_json::from_slice::<ProtocolHash>(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match ProtocolHash::parse_with_dialect(text) {
        Ok((protocol_hash, dialect)) => {
            let spelled = protocol_hash.to_dialect(dialect);
            assert_eq!(
                ProtocolHash::parse_with_dialect(&spelled),
                Ok((protocol_hash, dialect))
            );
            assert_eq!(
                ProtocolHash::parse(&protocol_hash.to_hex()),
                Ok(protocol_hash)
            );
            assert_eq!(
                ProtocolHash::parse(&protocol_hash.to_base64()),
                Ok(protocol_hash)
            );
        }
        Err(error) => render(&error),
    }
}

/// A request's `protocolSources` entry, as the resolver reads it. Text that decodes re-encodes
/// (both forms) and decodes back to the same bytes.
pub fn data_uri(data: &[u8]) {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    if !data_uri::is_data_uri(source) {
        return;
    }
    match data_uri::decode(source) {
        Ok(bytes) => {
            if let Ok(text) = std::str::from_utf8(&bytes) {
                assert_eq!(data_uri::decode(&data_uri::encode(text)), Ok(bytes.clone()));
                assert_eq!(data_uri::decode(&data_uri::encode_base64(text)), Ok(bytes));
            }
        }
        Err(error) => render(&error),
    }
}

/// A protocol document's bytes, as the resolver verifies and parses them (front matter in
/// either form, or none). The body after the front matter is a suffix of the text.
pub fn front_matter(data: &[u8]) {
    let protocol_hash = ProtocolHash::of(data);
    match VerifiedDocument::verify(&protocol_hash, data) {
        Ok(document) => {
            assert!(document.text().ends_with(&document.document().body));
            let _ = document.display_name();
        }
        Err(error) => render(&error),
    }
}

/// A negotiation message's text: the final protocol a sender closes with, and the registration
/// a receiver answers with. Both read back from what the node writes.
pub fn negotiation(data: &[u8]) {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    match FinalProtocol::from_body(body) {
        Some(Ok(final_protocol)) => {
            let written = FinalProtocol::to_body(&final_protocol.document);
            assert_eq!(FinalProtocol::from_body(&written), Some(Ok(final_protocol)));
        }
        Some(Err(error)) => render(&error),
        None => {}
    }
    if let Some(registration) = Registration::from_body(body) {
        assert_eq!(
            Registration::from_body(&registration.to_body()),
            Some(registration)
        );
    }
}

/// A page of a peer protocol database's catalogue (`GET /protocols?since=…`), as a puller
/// reads and verifies it. A page re-serialized reads back as itself.
pub fn db_page(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let page = match serde_json::from_str::<ChangePage>(text) {
        Ok(page) => page,
        Err(error) => return render(&error),
    };
    for entry in &page.entries {
        if let Ok(document) = entry.verify(MAX_DOCUMENT_BYTES) {
            assert_eq!(document.text(), entry.text);
        }
    }
    let written = serde_json::to_string(&page).expect("a page serializes");
    assert_eq!(
        serde_json::from_str::<ChangePage>(&written).ok(),
        Some(page)
    );
}

/// A protocol database's `POST /protocols`: the input's first line is the `Content-Type`
/// header (absent when there is no line break), the rest the body.
pub fn db_post(data: &[u8]) {
    let (content_type, body) = match data.iter().position(|&byte| byte == b'\n') {
        Some(end) => (std::str::from_utf8(&data[..end]).ok(), &data[end + 1..]),
        None => (None, data),
    };
    let bytes = match posted_document(content_type, body) {
        Ok(bytes) => bytes,
        Err(error) => return render(&error),
    };
    match check_document(&bytes, MAX_DOCUMENT_BYTES) {
        Ok(text) => {
            let document = VerifiedDocument::from_text(text);
            assert_eq!(document.hash(), ProtocolHash::of(&bytes));
        }
        Err(rejection) => render(&rejection.as_str()),
    }
}

/// A routine folder's `manifest.toml`.
pub fn manifest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match RoutineManifest::from_toml(text) {
        Ok(manifest) => render(&manifest.protocol.display()),
        Err(error) => render(&error),
    }
}
