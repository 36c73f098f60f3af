//! HTTP errors in the protocol's error shape.
//!
//! Every error leaves as JSON `{status: "failure", error, message, code}`
//! with a fitting HTTP status, never as an HTML page or an empty body.

use agora_protocol::{ErrorCode, Reply};
use axum::Json;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// An error answered at the HTTP edge.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The machine-readable code.
    pub code: ErrorCode,
    /// The human-readable message.
    pub message: String,
    /// Headers to send with it (`Retry-After`, `WWW-Authenticate`); a list, not a `HeaderMap`,
    /// to keep the error small.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl ApiError {
    /// A 400 for a malformed request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, message)
    }

    /// A 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, message)
    }

    /// A 500 whose details were logged, not shown.
    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            "internal error; see the node's log",
        )
    }

    /// Any status, code and message.
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            headers: Vec::new(),
        }
    }

    /// The error with a header.
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// The error with `Retry-After: <seconds>`.
    pub fn retry_after(self, seconds: u64) -> Self {
        self.with_header(header::RETRY_AFTER, HeaderValue::from(seconds))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Reply::failure(self.code, self.message).to_json();
        let mut response = (self.status, Json(body)).into_response();
        response.headers_mut().extend(self.headers);
        response
    }
}
