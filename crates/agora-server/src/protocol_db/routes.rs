//! The protocol database's HTTP routes.
//!
//! | route | what |
//! |---|---|
//! | `POST /protocols` | store a PD (`text/plain` body, or JSON `{"text": ...}`); 201 new, 200 known; `{hash, url}` |
//! | `GET /protocols/{hash}` | the exact text, `text/plain; charset=utf-8` (hex or base64 hash) |
//! | `GET /protocols?q=words&limit=n` | search by name and description: `[{hash, name, description, url}]` |
//! | `GET /protocols?since=seq&limit=n` | the catalogue after a cursor, with texts (peer sync): `{entries, next, more}` |
//! | `POST /sync` | a peer's notification: pull from the peers soon (202) |
//! | `POST /sync?wait=true` | pull now and answer the report (a write: token needed) |
//! | `GET /metrics` | Prometheus text |
//! | `GET /healthz` | liveness |
//!
//! Errors use the node's JSON shape (see [`crate::error`]). A body over the transport limit,
//! like a document over `max_document_bytes`, is a 413 and counts as a `too_large` rejection.

use std::sync::Arc;

use agora_protocol::changes::posted_document;
use agora_protocol::{ErrorCode, ProtocolHash};
use agora_protocol_db::{ProtocolDb, PublishError, Rejection};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use tower_http::trace::TraceLayer;

use super::metrics::ProtocolDbMetrics;
use crate::error::ApiError;

/// Results of a search when the asker names no limit.
const DEFAULT_SEARCH_RESULTS: usize = 20;
/// Entries of a page when the asker names no limit.
const DEFAULT_PAGE_ENTRIES: usize = 20;

/// Shared state of the handlers.
#[derive(Clone)]
pub(crate) struct ProtocolDbState {
    pub(crate) db: ProtocolDb,
    /// The write token; `None` leaves writes to `open_writes`.
    pub(crate) token: Option<Arc<str>>,
    /// Whether writes are open when there is no token.
    pub(crate) open_writes: bool,
    /// The database's metrics registry, for `/metrics`.
    pub(crate) metrics: Arc<ProtocolDbMetrics>,
}

/// The router. Its body limit leaves room for a JSON-escaped document of the largest size.
pub(crate) fn router(state: ProtocolDbState) -> Router {
    let body_limit = state
        .db
        .config()
        .max_document_bytes
        .saturating_mul(6)
        .saturating_add(1024);
    let router = Router::new()
        .route("/protocols", get(list).post(publish))
        .route("/protocols/{hash}", get(document))
        .route("/sync", post(sync))
        .route("/metrics", get(metrics));
    crate::app::with_health_and_fallbacks(router)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &Request| {
                let span = tracing::info_span!(
                    "agora.protocol_db.request",
                    otel.name = %request.method(),
                    otel.kind = "server",
                    method = %request.method(),
                    path = %request.uri().path(),
                );
                agora_telemetry::propagation::adopt_parent(&span, request.headers());
                span
            }),
        )
        .with_state(state)
}

/// Whether the request may write: the bearer token when one is configured (401 without it or
/// with a wrong one), otherwise only if writes are open (403 if not).
fn authorize(state: &ProtocolDbState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = state.token.as_deref() else {
        if state.open_writes {
            return Ok(());
        }
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::Unauthorized,
            "writes are disabled: configure write_token (or AGORA_PROTOCOL_DB_TOKEN), \
             or open_writes = true",
        ));
    };
    match crate::auth::bearer(headers) {
        Some(token) if crate::auth::same_secret(token, expected) => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "missing or wrong bearer token",
        )),
    }
}

async fn publish(
    State(state): State<ProtocolDbState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    // The body (bounded by the router's limit) is read before the token is checked: a server
    // that answers without reading it closes the connection on unread bytes, and the client
    // may then see a reset instead of the 401.
    authorize(&state, &headers)?;
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            state.db.count_rejection(Rejection::TooLarge);
            too_large("the request body is larger than this database accepts")
        } else {
            ApiError::bad_request(format!("could not read the request body: {rejection}"))
        }
    })?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok());
    let bytes = posted_document(content_type, &body)
        .map_err(|error| ApiError::bad_request(error.to_string()))?;
    match state.db.publish(&bytes).await {
        Ok(published) => {
            let status = if published.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            let body = json!({"hash": published.hash.to_hex(), "url": published.url});
            Ok((status, Json(body)).into_response())
        }
        Err(error @ PublishError::TooLarge { .. }) => Err(too_large(error.to_string())),
        Err(error @ (PublishError::NotUtf8 | PublishError::Empty)) => {
            Err(ApiError::bad_request(error.to_string()))
        }
        Err(PublishError::Store(error)) => Err(internal("could not publish a document", error)),
    }
}

async fn document(
    State(state): State<ProtocolDbState>,
    Path(hash): Path<String>,
) -> Result<Response, ApiError> {
    let hash = ProtocolHash::parse(&hash).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let document = state
        .db
        .document(&hash)
        .await
        .map_err(|error| internal("could not read a document", error))?
        .ok_or_else(|| ApiError::not_found(format!("no protocol document {hash}")))?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            // The URL names the content, so the answer never changes.
            (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
        ],
        document.text().to_string(),
    )
        .into_response())
}

/// The query of `GET /protocols`. Numbers are read by hand so a bad one gets a JSON error.
#[derive(Debug, Deserialize)]
struct ListQuery {
    q: Option<String>,
    since: Option<String>,
    limit: Option<String>,
}

async fn list(
    State(state): State<ProtocolDbState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let limit = match query.limit.as_deref() {
        None => None,
        Some(text) => Some(text.parse::<usize>().map_err(|_| {
            ApiError::bad_request(format!(
                "limit must be a non-negative integer, not {text:?}"
            ))
        })?),
    };
    match (query.q, query.since) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "give either q (search) or since (changes), not both",
        )),
        (None, Some(since)) => {
            let since = since
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "since must be a non-negative integer, not {since:?}"
                    ))
                })?;
            let page = state
                .db
                .changes(since, limit.unwrap_or(DEFAULT_PAGE_ENTRIES))
                .await
                .map_err(|error| internal("could not list changes", error))?;
            Ok(Json(page).into_response())
        }
        (q, None) => {
            let hits = state
                .db
                .search(
                    q.as_deref().unwrap_or(""),
                    limit.unwrap_or(DEFAULT_SEARCH_RESULTS),
                )
                .await
                .map_err(|error| internal("could not search", error))?;
            let hits: Vec<Value> = hits
                .into_iter()
                .map(|hit| {
                    json!({
                        "hash": hit.hash.to_hex(),
                        "name": hit.name,
                        "description": hit.description,
                        "url": hit.url,
                    })
                })
                .collect();
            Ok(Json(hits).into_response())
        }
    }
}

#[derive(Debug, Deserialize)]
struct SyncQuery {
    wait: Option<String>,
}

/// A peer's notification schedules a pull (anyone may send one: it names no URL and can only
/// make this database pull sooner from the peers it already has); `wait=true` pulls now.
async fn sync(
    State(state): State<ProtocolDbState>,
    headers: HeaderMap,
    query: Result<Query<SyncQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if matches!(query.wait.as_deref(), Some("true" | "1")) {
        authorize(&state, &headers)?;
        let report = state.db.sync_now().await;
        return Ok(Json(report).into_response());
    }
    state.db.request_sync();
    Ok((StatusCode::ACCEPTED, Json(json!({"status": "scheduled"}))).into_response())
}

async fn metrics(
    State(state): State<ProtocolDbState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let text = state
        .metrics
        .render(&state.db)
        .await
        .map_err(|error| internal("could not render metrics", error))?;
    Ok(crate::metrics::response(&headers, text))
}

fn too_large(message: impl Into<String>) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::PayloadTooLarge,
        message,
    )
}

/// Logs `error` (once, here) and answers a 500 that shows nothing of it.
fn internal(what: &str, error: impl std::fmt::Display) -> ApiError {
    tracing::error!(%error, "{what}");
    ApiError::internal()
}
