//! Who may see the dashboard: the admin token, presented as a bearer header or exchanged at the
//! login form for a session cookie.
//!
//! The cookie holds no secret and no server-side state: `v1.<expiry ms>.<tag>`, where the tag is
//! HMAC-SHA256 keyed by the admin token over the version and expiry. Every replica that shares the
//! token accepts it, it expires by itself, and changing the token ends every session. It is
//! `HttpOnly` and `SameSite=Strict` always, `Secure` when the node's public URL is `https`.
//!
//! The dashboard's buttons call the admin API with this cookie. A cookie alone never passes the
//! admin API's check: the request must also carry the header `X-Agora-Dashboard: 1`, which a page
//! on another origin cannot add without a CORS preflight this node never grants (and the
//! `SameSite=Strict` cookie is not sent from other sites in the first place).

use axum::http::{HeaderMap, header};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::auth::same_secret;

/// The cookie's name.
pub const COOKIE: &str = "agora_dashboard";
/// The header that must accompany the cookie on the admin API.
pub const DASHBOARD_HEADER: &str = "x-agora-dashboard";
/// How long a login lasts.
pub const SESSION_MS: i64 = 12 * 60 * 60 * 1000;

/// How a request proved it holds the admin token, if it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// `Authorization: Bearer <token>`.
    Bearer,
    /// A valid, unexpired session cookie.
    Session,
    /// Neither.
    None,
}

/// What `headers` present, checked against `token` at `now_ms`.
pub fn credential(headers: &HeaderMap, token: &str, now_ms: i64) -> Credential {
    if crate::auth::bearer(headers).is_some_and(|presented| same_secret(presented, token)) {
        return Credential::Bearer;
    }
    let valid_cookie = cookies(headers)
        .filter(|(name, _)| *name == COOKIE)
        .any(|(_, value)| session_is_valid(value, token, now_ms));
    if valid_cookie {
        Credential::Session
    } else {
        Credential::None
    }
}

/// Whether a cookie-authenticated request also carries the dashboard header (see the module
/// docs): required on the admin API, which changes things.
pub fn has_dashboard_header(headers: &HeaderMap) -> bool {
    headers
        .get(DASHBOARD_HEADER)
        .is_some_and(|value| value.as_bytes() == b"1")
}

/// A new session value for `token`, valid until `now_ms` + [`SESSION_MS`].
pub fn new_session(token: &str, now_ms: i64) -> String {
    let expires = now_ms.saturating_add(SESSION_MS);
    format!("v1.{expires}.{}", hex(&tag(token, expires)))
}

/// The `Set-Cookie` value that stores `session`.
pub fn set_cookie(session: &str, secure: bool) -> String {
    let max_age = SESSION_MS / 1000;
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={session}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}")
}

/// The `Set-Cookie` value that removes the session.
pub fn clear_cookie(secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict{secure}")
}

fn session_is_valid(value: &str, token: &str, now_ms: i64) -> bool {
    let mut parts = value.splitn(3, '.');
    let (Some("v1"), Some(expires), Some(presented)) = (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let Ok(expires) = expires.parse::<i64>() else {
        return false;
    };
    expires > now_ms && same_secret(presented, &hex(&tag(token, expires)))
}

fn tag(token: &str, expires: i64) -> Vec<u8> {
    // HMAC takes a key of any length, so `new_from_slice` cannot fail; an empty tag (never equal
    // to a presented one) keeps this free of panics all the same.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(token.as_bytes()) else {
        return Vec::new();
    };
    mac.update(format!("agora-dashboard|v1|{expires}").as_bytes());
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `name=value` pairs of every `Cookie` header.
fn cookies(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|line| line.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            format!("other=1; {COOKIE}={value}").parse().unwrap(),
        );
        headers
    }

    #[test]
    fn a_session_is_accepted_until_it_expires_and_only_for_its_token() {
        let session = new_session("secret", 1_000);
        let headers = with_cookie(&session);
        assert_eq!(credential(&headers, "secret", 2_000), Credential::Session);
        assert_eq!(credential(&headers, "other-token", 2_000), Credential::None);
        assert_eq!(
            credential(&headers, "secret", 1_000 + SESSION_MS),
            Credential::None
        );
    }

    #[test]
    fn a_forged_or_stretched_session_is_refused() {
        let session = new_session("secret", 1_000);
        let (_, tag) = session.rsplit_once('.').unwrap();
        let stretched = format!("v1.{}.{tag}", i64::MAX);
        for value in [
            stretched.as_str(),
            "v1.99999999999999.00",
            "v2.1.2",
            "garbage",
            "",
        ] {
            assert_eq!(
                credential(&with_cookie(value), "secret", 2_000),
                Credential::None,
                "{value}"
            );
        }
    }

    #[test]
    fn a_bearer_token_is_accepted_and_a_wrong_one_is_not() {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, "Bearer secret".parse().unwrap());
        assert_eq!(credential(&headers, "secret", 0), Credential::Bearer);
        assert_eq!(credential(&headers, "secre", 0), Credential::None);
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_over_tls() {
        let plain = set_cookie("v", false);
        assert!(plain.contains("HttpOnly") && plain.contains("SameSite=Strict"));
        assert!(!plain.contains("Secure"));
        assert!(set_cookie("v", true).ends_with("; Secure"));
        assert!(clear_cookie(false).contains("Max-Age=0"));
    }
}
