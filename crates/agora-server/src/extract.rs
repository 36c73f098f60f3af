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

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        ErrorCode::PayloadTooLarge,
                        "request body is larger than this node accepts",
                    )
                } else {
                    ApiError::bad_request(format!("could not read the request body: {rejection}"))
                }
            })?;
        if bytes.is_empty() {
            return Err(ApiError::bad_request(
                "request body is empty; expected a JSON object",
            ));
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("request body is not valid JSON: {e}")))
    }
}
