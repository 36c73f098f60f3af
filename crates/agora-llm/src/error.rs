//! The one error type of this crate.
//!
//! Callers branch on it: a node answers `Unavailable` and `Timeout` with a
//! retryable failure, treats `Api` and `BadResponse` as a failed LLM step, and
//! a replayed demo run must stop loudly on `NotRecorded` rather than silently
//! call a model. No async-openai or reqwest type appears here, so the variants
//! carry rendered messages.

/// Why an LLM call, or setting up a backend, failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The endpoint could not be reached: connection refused, server down,
    /// connection dropped, or a local server that failed to start.
    #[error("llm unavailable: {0}")]
    Unavailable(String),
    /// The per-call timeout elapsed before the completion arrived.
    #[error("llm call timed out")]
    Timeout,
    /// The endpoint answered with an error (HTTP status when there was one).
    #[error("llm api error{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Api {
        /// HTTP status code of the error answer, if any.
        status: Option<u16>,
        /// The error message the endpoint gave, or why the call was refused.
        message: String,
    },
    /// The endpoint answered, but with no choices, empty content, or a body
    /// that could not be decoded.
    #[error("bad llm response: {0}")]
    BadResponse(String),
    /// Replay: the request is not in the cassette, or all its recorded
    /// answers have been used.
    #[error("request not recorded in the cassette (key {key})")]
    NotRecorded {
        /// The request key ([`crate::request_key`]) that was looked up.
        key: String,
    },
    /// The cassette file could not be read, written, or parsed.
    #[error("cassette error: {0}")]
    Cassette(String),
}

impl LlmError {
    /// Whether trying the same call again later may succeed (the endpoint was
    /// down, slow, or answered with a 5xx/429).
    pub fn is_transient(&self) -> bool {
        match self {
            LlmError::Unavailable(_) | LlmError::Timeout => true,
            LlmError::Api {
                status: Some(status),
                ..
            } => *status == 429 || *status >= 500,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_error_display_names_the_status() {
        let error = LlmError::Api {
            status: Some(400),
            message: "bad schema".into(),
        };
        assert_eq!(error.to_string(), "llm api error (HTTP 400): bad schema");
        let error = LlmError::Api {
            status: None,
            message: "refused".into(),
        };
        assert_eq!(error.to_string(), "llm api error: refused");
    }

    #[test]
    fn transient_errors_are_the_retryable_ones() {
        assert!(LlmError::Timeout.is_transient());
        assert!(LlmError::Unavailable("down".into()).is_transient());
        let overloaded = LlmError::Api {
            status: Some(503),
            message: "loading model".into(),
        };
        assert!(overloaded.is_transient());
        let bad_request = LlmError::Api {
            status: Some(400),
            message: "bad".into(),
        };
        assert!(!bad_request.is_transient());
        assert!(!LlmError::NotRecorded { key: "k".into() }.is_transient());
    }
}
