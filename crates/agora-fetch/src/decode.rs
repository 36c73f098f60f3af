//! Turning a response body into text.
//!
//! A protocol document's hash is taken over its bytes, so UTF-8 bodies are
//! kept byte for byte: no BOM stripping, no replacement characters, and
//! invalid bytes are an error rather than silently repaired. UTF-8 is also
//! the default when the server declares no charset; the HTTP/1.1 default of
//! ISO-8859-1 (which Python's `requests` still applies) would turn every
//! non-ASCII document into mojibake and break its hash. Other declared
//! charsets are decoded with `encoding_rs`, which follows the WHATWG Encoding
//! Standard (so `iso-8859-1` is read as windows-1252, as browsers do).

use encoding_rs::{Encoding, UTF_8};

use crate::FetchError;

/// Decodes `body` by the charset in `content_type`, or as UTF-8 when there is
/// none.
pub(crate) fn decode_text(body: Vec<u8>, content_type: Option<&str>) -> Result<String, FetchError> {
    let encoding = match content_type.and_then(charset_of) {
        None => UTF_8,
        Some(label) => Encoding::for_label(label.as_bytes())
            .ok_or_else(|| FetchError::Decode(format!("unknown charset {label:?}")))?,
    };
    if encoding == UTF_8 {
        return String::from_utf8(body)
            .map_err(|error| FetchError::Decode(format!("invalid UTF-8: {}", error.utf8_error())));
    }
    encoding
        .decode_without_bom_handling_and_without_replacement(&body)
        .map(|text| text.into_owned())
        .ok_or_else(|| FetchError::Decode(format!("invalid {} text", encoding.name())))
}

/// The value of the `charset` parameter of a media type, unquoted.
fn charset_of(content_type: &str) -> Option<&str> {
    content_type.split(';').skip(1).find_map(|parameter| {
        let (name, value) = parameter.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("charset") {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|value| value.strip_suffix('"'))
            .unwrap_or(value);
        (!value.is_empty()).then_some(value)
    })
}

#[cfg(test)]
mod tests {
    use super::charset_of;

    #[test]
    fn charset_parameter_is_found_case_insensitively_and_unquoted() {
        let cases = [
            ("text/plain", None),
            ("text/plain; charset=utf-8", Some("utf-8")),
            ("text/plain;charset=ISO-8859-1", Some("ISO-8859-1")),
            (
                "text/markdown; variant=GFM; Charset=\"Shift_JIS\"",
                Some("Shift_JIS"),
            ),
            ("text/plain; charset=", None),
            ("text/plain; format=flowed", None),
        ];
        for (content_type, expected) in cases {
            assert_eq!(charset_of(content_type), expected, "{content_type}");
        }
    }
}
