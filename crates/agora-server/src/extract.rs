//! Request body extraction with limits and protocol-shaped errors.
//!
//! axum's own `Json` extractor answers with plain-text errors and insists on
//! a content type. Agora peers send JSON with various content types (or
//! none), and must get errors they can parse, so bodies are read as bytes
//! (under the router's size limit) and parsed here.

use agora_protocol::ErrorCode;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde_json::Value;

use crate::error::ApiError;

/// A JSON body of any content type, within the size limit.
#[derive(Debug, Clone)]
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, Self::Rejection> {
        read_json(request).await.map(JsonBody)
    }
}

/// Reads a request's JSON body as [`JsonBody`] does, within `limit`: a body that has not
/// arrived by then is `408 timeout` (a slow-loris client trickling its body).
pub async fn read_json_within(
    request: Request,
    limit: std::time::Duration,
) -> Result<Value, ApiError> {
    tokio::time::timeout(limit, read_json(request))
        .await
        .unwrap_or_else(|_| Err(late(limit)))
}

/// Reads a request's body as bytes within `limit` (time) and the router's size limit, with the
/// errors of [`read_json_within`]; an empty body is not an error here.
pub(crate) async fn read_bytes_within(
    request: Request,
    limit: std::time::Duration,
) -> Result<Bytes, ApiError> {
    tokio::time::timeout(limit, read_bytes(request))
        .await
        .unwrap_or_else(|_| Err(late(limit)))
}

fn late(limit: std::time::Duration) -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        ErrorCode::Timeout,
        format!(
            "the request body did not arrive within {} s",
            limit.as_secs()
        ),
    )
}

async fn read_bytes(request: Request) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, &())
        .await
        .map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    ErrorCode::PayloadTooLarge,
                    "request body is larger than this node accepts",
                )
            } else {
                // The transport's words (a reset, an OS error) are for the log only.
                tracing::debug!(%rejection, "reading a request body failed");
                ApiError::bad_request("could not read the request body")
            }
        })
}

async fn read_json(request: Request) -> Result<Value, ApiError> {
    let bytes = read_bytes(request).await?;
    if bytes.is_empty() {
        return Err(ApiError::bad_request(
            "request body is empty; expected a JSON object",
        ));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("request body is not valid JSON: {e}")))
}
