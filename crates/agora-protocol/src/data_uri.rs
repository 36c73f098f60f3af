//! `data:` URIs carrying a protocol document inline.
//!
//! Two forms are in use: `data:text/plain;charset=utf-8,<percent-encoded>`
//! (what the Python library writes) and
//! `data:text/plain;charset=utf-8;base64,<base64>`. Both are accepted, as are
//! the same URIs without a media type or with `us-ascii`; anything that is not
//! plain text is refused with a reason.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Why a `data:` URI cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataUriError {
    /// The URI does not start with `data:` or has no comma.
    #[error("not a data: URI")]
    NotDataUri,
    /// The media type is not plain text in UTF-8.
    #[error("unsupported data: URI media type {0:?} (expected text/plain with charset utf-8)")]
    UnsupportedMediaType(String),
    /// The base64 payload does not decode.
    #[error("data: URI has invalid base64")]
    BadBase64,
}

/// Whether a source string is a `data:` URI (case-insensitive scheme).
pub fn is_data_uri(source: &str) -> bool {
    // Bytes, not `&source[..5]`: the fifth byte of a stranger's source may fall inside a
    // character (found by fuzzing).
    source
        .as_bytes()
        .get(..5)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case(b"data:"))
}

/// Decodes a `data:` URI into the exact bytes it carries.
pub fn decode(uri: &str) -> Result<Vec<u8>, DataUriError> {
    if !is_data_uri(uri) {
        return Err(DataUriError::NotDataUri);
    }
    let rest = &uri[5..];
    let (header, payload) = rest.split_once(',').ok_or(DataUriError::NotDataUri)?;
    let mut params = header.split(';').map(str::trim);
    let media_type = params.next().unwrap_or("").to_ascii_lowercase();
    if !(media_type.is_empty() || media_type == "text/plain") {
        return Err(DataUriError::UnsupportedMediaType(header.to_string()));
    }
    let mut base64 = false;
    for param in params {
        let lower = param.to_ascii_lowercase();
        if lower == "base64" {
            base64 = true;
        } else if let Some(charset) = lower.strip_prefix("charset=") {
            let charset = charset.trim_matches('"');
            if !matches!(charset, "utf-8" | "utf8" | "us-ascii") {
                return Err(DataUriError::UnsupportedMediaType(header.to_string()));
            }
        }
    }
    if base64 {
        let cleaned: String = percent_decode_str(payload)
            .decode_utf8_lossy()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        STANDARD
            .decode(cleaned.as_bytes())
            .map_err(|_| DataUriError::BadBase64)
    } else {
        Ok(percent_decode_str(payload).collect())
    }
}

/// Characters Python's `urllib.parse.quote` leaves alone: unreserved plus `/`.
const PYTHON_QUOTE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'_')
    .remove(b'.')
    .remove(b'-')
    .remove(b'~')
    .remove(b'/');

/// Encodes text as `data:text/plain;charset=utf-8,<percent-encoded>`, exactly
/// as the Python library does, so both sides produce the same source string.
pub fn encode(text: &str) -> String {
    format!(
        "data:text/plain;charset=utf-8,{}",
        utf8_percent_encode(text, PYTHON_QUOTE)
    )
}

/// Encodes text as `data:text/plain;charset=utf-8;base64,<base64>`.
pub fn encode_base64(text: &str) -> String {
    format!(
        "data:text/plain;charset=utf-8;base64,{}",
        STANDARD.encode(text)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_round_trip() {
        let text = "---\nname: Température\n---\nSend {\"a\": 1} / 100%+x";
        assert_eq!(decode(&encode(text)).unwrap(), text.as_bytes());
        assert_eq!(decode(&encode_base64(text)).unwrap(), text.as_bytes());
    }

    #[test]
    fn python_quote_compatibility() {
        // urllib.parse.quote("---\nname: A/B c") == '---%0Aname%3A%20A/B%20c'
        assert_eq!(
            encode("---\nname: A/B c"),
            "data:text/plain;charset=utf-8,---%0Aname%3A%20A/B%20c"
        );
    }

    #[test]
    fn variants_accepted() {
        assert_eq!(decode("data:,hello%20world").unwrap(), b"hello world");
        assert_eq!(decode("DATA:text/plain;base64,aGk=").unwrap(), b"hi");
        assert_eq!(decode("data:text/plain;charset=UTF-8,a+b").unwrap(), b"a+b");
    }

    #[test]
    fn refusals() {
        assert_eq!(decode("http://x"), Err(DataUriError::NotDataUri));
        assert_eq!(decode("data:text/plain"), Err(DataUriError::NotDataUri));
        assert!(matches!(
            decode("data:image/png;base64,AAAA"),
            Err(DataUriError::UnsupportedMediaType(_))
        ));
        assert!(matches!(
            decode("data:text/plain;charset=iso-8859-1,x"),
            Err(DataUriError::UnsupportedMediaType(_))
        ));
        assert_eq!(decode("data:;base64,!!!"), Err(DataUriError::BadBase64));
    }

    #[test]
    fn a_character_across_the_fifth_byte_is_not_a_data_uri() {
        // Found by fuzzing: slicing the first five bytes of "d%20Òa" cut 'Ò' in two and panicked.
        assert!(!is_data_uri("d%20\u{d2}a"));
        assert_eq!(decode("d%20\u{d2}a"), Err(DataUriError::NotDataUri));
        assert!(is_data_uri("data:\u{d2}"));
        assert_eq!(decode("data:,\u{d2}").unwrap(), "\u{d2}".as_bytes());
    }
}
