//! Protocol hashes: the SHA-1 digest that names a protocol document.
//!
//! Two spellings exist in the wild. The formal spec writes the digest as 40
//! hexadecimal characters; the Python reference library writes it as standard
//! base64 (28 characters with padding). A [`ProtocolHash`] is the digest
//! itself; [`HashDialect`] remembers how a peer spelled it, so a reply or a
//! forwarded request can speak the peer's dialect.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use sha1::{Digest, Sha1};

/// How a protocol hash is spelled on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HashDialect {
    /// 40 lowercase hexadecimal characters (formal spec).
    #[default]
    Hex,
    /// Standard base64 with padding, 28 characters (Python reference library).
    Base64,
}

/// Lowercase hexadecimal digits, by value.
const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// A SHA-1 digest naming a protocol document.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProtocolHash([u8; 20]);

/// Why a string is not a protocol hash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a protocol hash (expected 40 hex characters or 28 base64 characters): {input:?}")]
pub struct HashParseError {
    /// The offending input, truncated to 64 characters.
    pub input: String,
}

impl ProtocolHash {
    /// The hash of exactly these bytes.
    pub fn of(bytes: &[u8]) -> Self {
        let digest = Sha1::digest(bytes);
        Self(digest.into())
    }

    /// Builds a hash from a raw 20-byte digest.
    pub fn from_digest(digest: [u8; 20]) -> Self {
        Self(digest)
    }

    /// The raw digest.
    pub fn digest(&self) -> &[u8; 20] {
        &self.0
    }

    /// Parses either dialect and reports which one was used.
    pub fn parse_with_dialect(input: &str) -> Result<(Self, HashDialect), HashParseError> {
        let trimmed = input.trim();
        let err = || HashParseError {
            input: trimmed.chars().take(64).collect(),
        };
        if trimmed.len() == 40 && trimmed.bytes().all(|b| b.is_ascii_hexdigit()) {
            let mut digest = [0u8; 20];
            for (i, chunk) in trimmed.as_bytes().chunks(2).enumerate() {
                let pair = std::str::from_utf8(chunk).map_err(|_| err())?;
                digest[i] = u8::from_str_radix(pair, 16).map_err(|_| err())?;
            }
            return Ok((Self(digest), HashDialect::Hex));
        }
        if trimmed.len() == 28 || trimmed.len() == 27 {
            let padded = if trimmed.len() == 27 {
                format!("{trimmed}=")
            } else {
                trimmed.to_string()
            };
            let decoded = STANDARD
                .decode(&padded)
                .or_else(|_| URL_SAFE.decode(&padded))
                .map_err(|_| err())?;
            let digest: [u8; 20] = decoded.try_into().map_err(|_| err())?;
            return Ok((Self(digest), HashDialect::Base64));
        }
        Err(err())
    }

    /// Parses either dialect.
    pub fn parse(input: &str) -> Result<Self, HashParseError> {
        Self::parse_with_dialect(input).map(|(hash, _)| hash)
    }

    /// 40 lowercase hexadecimal characters.
    pub fn to_hex(&self) -> String {
        let mut hex = String::with_capacity(40);
        for byte in self.0 {
            hex.push(char::from(HEX_DIGITS[usize::from(byte >> 4)]));
            hex.push(char::from(HEX_DIGITS[usize::from(byte & 0x0f)]));
        }
        hex
    }

    /// Standard base64 with padding, as the Python reference library writes it.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// The hash spelled in the given dialect.
    pub fn to_dialect(&self, dialect: HashDialect) -> String {
        match dialect {
            HashDialect::Hex => self.to_hex(),
            HashDialect::Base64 => self.to_base64(),
        }
    }
}

impl fmt::Display for ProtocolHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ProtocolHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProtocolHash({})", self.to_hex())
    }
}

impl std::str::FromStr for ProtocolHash {
    type Err = HashParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl serde::Serialize for ProtocolHash {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for ProtocolHash {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The negotiated PD captured from the Python library (reference §2.1):
    // the same digest in both dialects.
    const B64: &str = "3HQgjbJjDV+v4Dxx8IpTPTlunqs=";
    const HEX: &str = "dc74208db2630d5fafe03c71f08a533d396e9eab";

    #[test]
    fn the_same_digest_parses_from_hex_and_base64() {
        let (from_b64, d1) = ProtocolHash::parse_with_dialect(B64).unwrap();
        let (from_hex, d2) = ProtocolHash::parse_with_dialect(HEX).unwrap();
        assert_eq!(from_b64, from_hex);
        assert_eq!(d1, HashDialect::Base64);
        assert_eq!(d2, HashDialect::Hex);
        assert_eq!(from_hex.to_base64(), B64);
        assert_eq!(from_b64.to_hex(), HEX);
    }

    #[test]
    fn uppercase_hex_unpadded_and_url_safe_base64_are_accepted() {
        let h = ProtocolHash::parse(HEX).unwrap();
        assert_eq!(ProtocolHash::parse(&HEX.to_uppercase()).unwrap(), h);
        assert_eq!(ProtocolHash::parse(B64.trim_end_matches('=')).unwrap(), h);
        assert_eq!(
            ProtocolHash::parse("3HQgjbJjDV-v4Dxx8IpTPTlunqs=").unwrap(),
            h
        );
    }

    #[test]
    fn hash_of_bytes_matches_known_sha1() {
        // sha1("abc")
        assert_eq!(
            ProtocolHash::of(b"abc").to_hex(),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
    }

    #[test]
    fn garbage_is_rejected() {
        for bad in [
            "",
            "negotiation",
            "zz74208db2630d5fafe03c71f08a533d396e9eab",
            "3HQgjbJjDV+v4Dxx8IpTPTlunq!=",
            "AAAA",
        ] {
            assert!(ProtocolHash::parse(bad).is_err(), "{bad}");
        }
    }
}
