//! The credential checks every front shares: reading a bearer token from a request's headers and
//! comparing secrets in constant time. The admin API, the `/mcp` and Agent Protocol task
//! operations, the edge's known clients, the protocol database's writes and the dashboard's
//! login and session cookie all check through these two functions, so a header is read one way
//! everywhere.

use axum::http::{HeaderMap, header};
use subtle::ConstantTimeEq;

/// The token of an `Authorization: Bearer <token>` header: the scheme in any case (RFC 9110
/// §11.1), the token without surrounding spaces; `None` when there is no such header or its
/// token is empty.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether `presented` is `expected`, in time that depends only on their lengths.
pub(crate) fn same_secret(presented: &str, expected: &str) -> bool {
    presented.as_bytes().ct_eq(expected.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_authorization(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn a_bearer_token_is_read_in_any_case_and_trimmed() {
        for value in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER  s3cret ",
            " Bearer s3cret",
        ] {
            assert_eq!(
                bearer(&with_authorization(value)),
                Some("s3cret"),
                "{value}"
            );
        }
    }

    #[test]
    fn other_schemes_and_empty_tokens_are_no_bearer() {
        for value in [
            "Basic czNjcmV0",
            "Bearer",
            "Bearer   ",
            "s3cret",
            "Bearers3cret",
        ] {
            assert_eq!(bearer(&with_authorization(value)), None, "{value}");
        }
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn secrets_compare_equal_only_when_equal() {
        assert!(same_secret("s3cret", "s3cret"));
        assert!(!same_secret("s3cret", "s3creT"));
        assert!(!same_secret("s3cre", "s3cret"));
        assert!(!same_secret("", "s3cret"));
        assert!(same_secret("", ""));
    }
}
