//! Protocol documents (PDs) and their metadata.
//!
//! A PD is free text. By convention it may open with YAML front matter:
//!
//! * the Python library's form, `---\n<yaml>\n---\n<body>`;
//! * the formal spec's form, `<yaml>\n---\n<body>`;
//! * or no metadata at all.
//!
//! Parsing never fails: text that does not look like front matter is body.
//! Unknown metadata keys are kept in [`Metadata::extra`].
//!
//! [`VerifiedDocument`] is the only form in which a PD leaves the resolver:
//! its constructors guarantee that its hash is the SHA-1 of its exact bytes.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::hash::ProtocolHash;

/// Metadata from a PD's front matter.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Metadata {
    /// The protocol's short name, if the PD declares one.
    pub name: Option<String>,
    /// A one-paragraph description, if the PD declares one.
    pub description: Option<String>,
    /// Whether a conversation under this protocol spans several rounds.
    pub multiround: bool,
    /// Every other front-matter key, as JSON.
    pub extra: BTreeMap<String, serde_json::Value>,
}

impl Metadata {
    /// The front-matter key naming the body field that carries a message's idempotency key.
    pub const IDEMPOTENCY_KEY_FIELD: &'static str = "idempotency_key_field";

    /// The front-matter key by which a document says its requests change nothing.
    pub const READ_ONLY: &'static str = "read_only";

    /// Whether the document says its requests change nothing (`read_only: true`): they are
    /// questions, and a routine answering them may only read. A peer's document can only
    /// take capabilities away with it, never grant one.
    pub fn read_only(&self) -> bool {
        match self.extra.get(Self::READ_ONLY) {
            Some(serde_json::Value::Bool(read_only)) => *read_only,
            Some(serde_json::Value::String(text)) => text.trim().eq_ignore_ascii_case("true"),
            _ => false,
        }
    }

    /// The top-level field of a JSON message body that carries its idempotency key, when the
    /// document declares one (`idempotency_key_field: <field>`): a receiver answers a message
    /// whose key it has seen from the same sender with its first reply (see the HTTP edge's
    /// `idempotency` module).
    pub fn idempotency_key_field(&self) -> Option<&str> {
        self.extra
            .get(Self::IDEMPOTENCY_KEY_FIELD)
            .and_then(serde_json::Value::as_str)
            .map(str::trim)
            .filter(|field| !field.is_empty())
    }
}

/// A parsed protocol document: its metadata and the text after the front matter.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtocolDocument {
    /// Front-matter metadata (empty when the PD has none).
    pub metadata: Metadata,
    /// The text after the front matter (the whole text when there is none).
    pub body: String,
}

impl ProtocolDocument {
    /// Parses a PD's text. Never fails.
    pub fn parse(text: &str) -> Self {
        if let Some((yaml, body)) = split_fenced(text)
            && let Some(metadata) = metadata_from_yaml(yaml)
        {
            return Self {
                metadata,
                body: body.to_string(),
            };
        }
        if let Some((yaml, body)) = split_spec_form(text)
            && let Some(metadata) = metadata_from_yaml(yaml)
            && (metadata.name.is_some() || metadata.description.is_some())
        {
            return Self {
                metadata,
                body: body.to_string(),
            };
        }
        Self {
            metadata: Metadata::default(),
            body: text.to_string(),
        }
    }

    /// Renders a PD in the canonical front-matter form the Python library writes.
    pub fn render(name: &str, description: &str, multiround: bool, body: &str) -> String {
        let yaml = serde_norway::to_string(&serde_json::json!({
            "name": name,
            "description": description,
            "multiround": multiround,
        }))
        .unwrap_or_default();
        format!("---\n{}---\n\n{}", yaml, body.trim_start_matches('\n'))
    }
}

/// `---\n<yaml>\n---\n<body>`, with optional leading blank lines.
fn split_fenced(text: &str) -> Option<(&str, &str)> {
    let start = text.trim_start_matches(['\n', '\r', ' ', '\t', '\u{feff}']);
    let rest = start.strip_prefix("---")?;
    let rest = rest
        .strip_prefix("\r\n")
        .or_else(|| rest.strip_prefix('\n'))?;
    let (yaml, body) = split_at_fence_line(rest)?;
    Some((yaml, body))
}

/// `<yaml>\n---\n<body>`.
fn split_spec_form(text: &str) -> Option<(&str, &str)> {
    split_at_fence_line(text)
}

/// Splits at the first line that is exactly `---` (trailing spaces allowed).
fn split_at_fence_line(text: &str) -> Option<(&str, &str)> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" {
            let yaml = &text[..offset];
            let body = &text[offset + line.len()..];
            return Some((yaml, body));
        }
        offset += line.len();
    }
    None
}

fn metadata_from_yaml(yaml: &str) -> Option<Metadata> {
    let value: serde_norway::Value = serde_norway::from_str(yaml).ok()?;
    let serde_norway::Value::Mapping(mapping) = value else {
        return None;
    };
    let mut metadata = Metadata::default();
    for (key, value) in mapping {
        let Some(key) = key.as_str().map(str::to_string) else {
            continue;
        };
        let json = serde_json::to_value(&value).unwrap_or(serde_json::Value::Null);
        match key.to_ascii_lowercase().as_str() {
            "name" => metadata.name = scalar_text(&json),
            "description" => metadata.description = scalar_text(&json),
            "multiround" => {
                metadata.multiround = match &json {
                    serde_json::Value::Bool(b) => *b,
                    serde_json::Value::String(s) => s.eq_ignore_ascii_case("true"),
                    _ => false,
                }
            }
            _ => {
                metadata.extra.insert(key, json);
            }
        }
    }
    Some(metadata)
}

fn scalar_text(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.trim().to_string()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Why fetched bytes are not the document a hash names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The SHA-1 of the bytes differs from the expected hash.
    #[error("hash mismatch: expected {expected}, got {actual}")]
    HashMismatch {
        /// The hash the sender named.
        expected: ProtocolHash,
        /// The hash of the bytes received.
        actual: ProtocolHash,
    },
    /// The bytes are not UTF-8 text.
    #[error("protocol document is not valid UTF-8")]
    NotUtf8,
}

/// A protocol document whose hash is known to be the SHA-1 of its exact bytes.
///
/// Cloning is cheap: the text is shared.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedDocument {
    hash: ProtocolHash,
    text: Arc<str>,
    document: Arc<ProtocolDocument>,
}

impl VerifiedDocument {
    /// Checks bytes against the hash that names them.
    pub fn verify(expected: &ProtocolHash, bytes: &[u8]) -> Result<Self, VerifyError> {
        let actual = ProtocolHash::of(bytes);
        if actual != *expected {
            return Err(VerifyError::HashMismatch {
                expected: *expected,
                actual,
            });
        }
        let text = std::str::from_utf8(bytes).map_err(|_| VerifyError::NotUtf8)?;
        Ok(Self::from_parts(actual, text))
    }

    /// A document authored locally: its hash is computed from its text.
    pub fn from_text(text: &str) -> Self {
        Self::from_parts(ProtocolHash::of(text.as_bytes()), text)
    }

    fn from_parts(hash: ProtocolHash, text: &str) -> Self {
        Self {
            hash,
            text: Arc::from(text),
            document: Arc::new(ProtocolDocument::parse(text)),
        }
    }

    /// The document's hash.
    pub fn hash(&self) -> ProtocolHash {
        self.hash
    }

    /// The exact text the hash covers.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The parsed document.
    pub fn document(&self) -> &ProtocolDocument {
        &self.document
    }

    /// The parsed metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.document.metadata
    }

    /// A display name: the declared name, or the short hash.
    pub fn display_name(&self) -> String {
        self.metadata()
            .name
            .clone()
            .unwrap_or_else(|| format!("protocol {}", &self.hash.to_hex()[..10]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_says_it_changes_nothing_with_read_only() {
        let read_only = |front: &str| {
            ProtocolDocument::parse(&format!("---\nname: Q\n{front}---\n\nBody\n"))
                .metadata
                .read_only()
        };
        assert!(read_only("read_only: true\n"));
        assert!(read_only("read_only: \"true\"\n"));
        assert!(!read_only("read_only: false\n"));
        assert!(!read_only("read_only: maybe\n"));
        assert!(!read_only(""));
    }

    #[test]
    fn python_front_matter() {
        let pd = ProtocolDocument::parse(
            "---\nname: Weather\ndescription: Forecasts\nmultiround: false\nversion: 2\n---\n\nBody text\n",
        );
        assert_eq!(pd.metadata.name.as_deref(), Some("Weather"));
        assert_eq!(pd.metadata.description.as_deref(), Some("Forecasts"));
        assert!(!pd.metadata.multiround);
        assert_eq!(pd.metadata.extra["version"], serde_json::json!(2));
        assert_eq!(pd.body, "\nBody text\n");
    }

    #[test]
    fn spec_form_without_leading_fence() {
        let pd = ProtocolDocument::parse("name: Q\ndescription: d\nmultiround: true\n---\nspec");
        assert_eq!(pd.metadata.name.as_deref(), Some("Q"));
        assert!(pd.metadata.multiround);
        assert_eq!(pd.body, "spec");
    }

    #[test]
    fn the_idempotency_key_field_is_read_from_front_matter() {
        let declared = ProtocolDocument::parse(
            "---\nname: X\nidempotency_key_field: idempotency_key\n---\n\nBody.\n",
        );
        assert_eq!(
            declared.metadata.idempotency_key_field(),
            Some("idempotency_key")
        );
        let blank = ProtocolDocument::parse("---\nname: X\nidempotency_key_field: ''\n---\nB\n");
        assert_eq!(blank.metadata.idempotency_key_field(), None);
        let none = ProtocolDocument::parse("---\nname: X\n---\nB\n");
        assert_eq!(none.metadata.idempotency_key_field(), None);
    }

    #[test]
    fn no_front_matter_is_all_body() {
        let text = "Just a protocol.\nSend JSON.";
        let pd = ProtocolDocument::parse(text);
        assert_eq!(pd.metadata, Metadata::default());
        assert_eq!(pd.body, text);
    }

    #[test]
    fn broken_front_matter_never_crashes() {
        for text in [
            "---\n",
            "---\n: : :\n---\nbody",
            "---\n- a list\n---\nbody",
            "---\nname: [unclosed\n---\n",
            "---",
            "",
            "a\n---\n---\n",
            "Title\n---\nThis is a markdown rule, not metadata",
            "---\r\nname: crlf\r\n---\r\nbody",
        ] {
            let _ = ProtocolDocument::parse(text);
        }
        let crlf = ProtocolDocument::parse("---\r\nname: crlf\r\n---\r\nbody");
        assert_eq!(crlf.metadata.name.as_deref(), Some("crlf"));
        // A markdown rule under a plain title is not metadata.
        let md = ProtocolDocument::parse("Title\n---\nText");
        assert_eq!(md.metadata.name, None);
    }

    #[test]
    fn render_round_trips() {
        let text = ProtocolDocument::render("Weather", "Forecasts: by date", false, "Send {}.");
        assert!(text.starts_with("---\n"));
        let pd = ProtocolDocument::parse(&text);
        assert_eq!(pd.metadata.name.as_deref(), Some("Weather"));
        assert_eq!(
            pd.metadata.description.as_deref(),
            Some("Forecasts: by date")
        );
        assert_eq!(pd.body.trim_start(), "Send {}.");
    }

    #[test]
    fn verify_checks_the_exact_bytes() {
        let text = "---\nname: x\n---\nbody";
        let hash = ProtocolHash::of(text.as_bytes());
        let doc = VerifiedDocument::verify(&hash, text.as_bytes()).unwrap();
        assert_eq!(doc.hash(), hash);
        assert_eq!(doc.metadata().name.as_deref(), Some("x"));
        let tampered = "---\nname: x\n---\nbody!";
        assert!(matches!(
            VerifiedDocument::verify(&hash, tampered.as_bytes()),
            Err(VerifyError::HashMismatch { .. })
        ));
        assert_eq!(
            VerifiedDocument::verify(&ProtocolHash::of(&[0xff]), &[0xff]),
            Err(VerifyError::NotUtf8)
        );
    }
}
