//! The operator API under `/admin`, guarded by a bearer token.
//!
//! Without a configured token every admin route answers 403: the API is
//! off rather than open. A wrong or missing token answers 401. The dashboard's session cookie
//! is accepted too, only with the `X-Agora-Dashboard: 1` header (see
//! [`crate::dashboard::session`]).
//!
//! | route | what |
//! |---|---|
//! | `GET /admin/protocols` | stored documents with their decisions |
//! | `POST /admin/protocols` | add a document: `{"text": ..., "sources": [...]}` |
//! | `PUT /admin/protocols/{hash}/decision` | operator decision `{"allowed": bool, "reason": ...}` |
//! | `DELETE /admin/protocols/{hash}/decision` | forget the decision (the checker decides again) |
//! | `GET /admin/stats` | the LLM ledger and per-protocol usage |
//! | `/admin/routines...` | the routine registry (see [`routines`]) |
//! | `/admin/sender-routines...` | the node's sender routines and their review (see [`sender_routines`]) |

use agora_protocol::{ErrorCode, ProtocolHash};
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::app::{AppState, Shared};
use crate::dashboard::session::{self, Credential};
use crate::error::ApiError;
use crate::extract::JsonBody;

pub mod routines;
pub mod sender_routines;

/// The admin routes, with the token check applied.
pub fn router(state: Shared) -> Router<Shared> {
    Router::new()
        .route("/protocols", get(list_protocols).post(add_protocol))
        .route(
            "/protocols/{hash}/decision",
            put(set_decision).delete(clear_decision),
        )
        .route("/stats", get(stats))
        .merge(routines::router())
        .merge(sender_routines::router())
        .route_layer(axum::middleware::from_fn_with_state(state, require_token))
}

async fn require_token(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let Some(expected) = state.admin_token.as_deref() else {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::Unauthorized,
            "the admin API is disabled: configure admin_token",
        )
        .into_response();
    };
    let now_ms = agora_store::clock::Clock::now_ms(&agora_store::clock::SystemClock);
    match session::credential(request.headers(), expected, now_ms) {
        Credential::Bearer => next.run(request).await,
        // The dashboard's buttons: the cookie counts only with the header a cross-site page
        // cannot send (see `crate::dashboard::session`).
        Credential::Session if session::has_dashboard_header(request.headers()) => {
            next.run(request).await
        }
        Credential::Session | Credential::None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "missing or wrong bearer token",
        )
        .into_response(),
    }
}

/// What a request's bearer header is worth against the tokens that send on the node's behalf:
/// `mcp.token` and the admin token.
enum SenderToken {
    /// Neither token is configured.
    Disabled,
    /// No bearer header.
    Missing,
    /// A bearer header with neither token.
    Wrong,
    /// One of the tokens.
    Accepted,
}

fn sender_token(state: &AppState, headers: &header::HeaderMap) -> SenderToken {
    let own = state.mcp.as_ref().and_then(|m| m.token.clone());
    let accepted: Vec<&str> = [own.as_deref(), state.admin_token.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    if accepted.is_empty() {
        return SenderToken::Disabled;
    }
    match crate::auth::bearer(headers) {
        Some(token)
            if accepted
                .iter()
                .any(|expected| crate::auth::same_secret(token, expected)) =>
        {
            SenderToken::Accepted
        }
        Some(_) => SenderToken::Wrong,
        None => SenderToken::Missing,
    }
}

/// The token check of the Agent Protocol's task operations (they make the node send, as the
/// MCP front's `run_task` does): the admin token or `mcp.token`, as a bearer header; `403` when
/// neither is configured, `401` when it is missing or wrong.
pub(crate) fn presented_sender_token(
    state: &AppState,
    headers: &header::HeaderMap,
) -> Result<(), ApiError> {
    let refuse = |status, message: &str| ApiError::new(status, ErrorCode::Unauthorized, message);
    match sender_token(state, headers) {
        SenderToken::Accepted => Ok(()),
        SenderToken::Disabled => Err(refuse(
            StatusCode::FORBIDDEN,
            "running a task is disabled: configure admin_token or mcp.token",
        )),
        SenderToken::Missing | SenderToken::Wrong => Err(refuse(
            StatusCode::UNAUTHORIZED,
            "running a task needs Authorization: Bearer <admin_token or mcp.token>",
        )),
    }
}

/// The token check of `/mcp`: its own token or the admin token, as a bearer header. Refusals
/// are JSON-RPC errors (an MCP client reads those), with 403 when no token is configured and
/// 401 (and `WWW-Authenticate: Bearer`) when the presented one is missing or wrong.
pub(crate) async fn require_mcp_token(
    State(state): State<Shared>,
    request: Request,
    next: Next,
) -> Response {
    let refuse = |status: StatusCode, message: &str| {
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32001, "message": message},
        });
        let mut response = (status, axum::Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    };
    match sender_token(&state, request.headers()) {
        SenderToken::Accepted => next.run(request).await,
        SenderToken::Disabled => refuse(
            StatusCode::FORBIDDEN,
            "the MCP endpoint is disabled: configure mcp.token or admin_token",
        ),
        SenderToken::Wrong => refuse(StatusCode::UNAUTHORIZED, "wrong bearer token for /mcp"),
        SenderToken::Missing => refuse(
            StatusCode::UNAUTHORIZED,
            "missing bearer token: send Authorization: Bearer <mcp.token or admin_token>",
        ),
    }
}

fn internal(error: impl std::fmt::Display) -> ApiError {
    tracing::error!(%error, "admin operation failed");
    ApiError::internal()
}

fn parse_hash(text: &str) -> Result<ProtocolHash, ApiError> {
    ProtocolHash::parse(text).map_err(|e| ApiError::bad_request(e.to_string()))
}

async fn list_protocols(State(state): State<Shared>) -> Result<Json<Value>, ApiError> {
    let store = state.node.store();
    let mut out = Vec::new();
    for stored in store.documents().await.map_err(internal)? {
        let hash = stored.document.hash();
        let decision = store.suitability(&hash).await.map_err(internal)?;
        let usage = store.requests().usage(&hash).await.map_err(internal)?;
        out.push(json!({
            "hash": hash.to_hex(),
            "name": stored.document.metadata().name,
            "description": stored.document.metadata().description,
            "sources": stored.sources,
            "decision": decision.map(|d| json!({"allowed": d.allowed, "origin": format!("{:?}", d.origin).to_lowercase(), "reason": d.reason})),
            "requests": usage.requests,
        }));
    }
    Ok(Json(Value::Array(out)))
}

async fn add_protocol(
    State(state): State<Shared>,
    JsonBody(value): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let text = value.get("text").and_then(Value::as_str).ok_or_else(|| {
        ApiError::bad_request("expected {\"text\": <protocol document>, \"sources\": [...]}")
    })?;
    let sources: Vec<String> = value
        .get("sources")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let document = state
        .node
        .add_document(text, &sources)
        .await
        .map_err(internal)?;
    Ok(Json(json!({
        "hash": document.hash().to_hex(),
        "base64": document.hash().to_base64(),
        "url": state.node.document_url(&document.hash()),
    })))
}

async fn set_decision(
    State(state): State<Shared>,
    Path(hash): Path<String>,
    JsonBody(value): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let hash = parse_hash(&hash)?;
    let allowed = value
        .get("allowed")
        .and_then(Value::as_bool)
        .ok_or_else(|| {
            ApiError::bad_request("expected {\"allowed\": true|false, \"reason\": \"...\"}")
        })?;
    let reason = value
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("operator decision");
    state
        .node
        .set_operator_decision(&hash, allowed, reason)
        .await
        .map_err(internal)?;
    Ok(Json(json!({"status": "success"})))
}

async fn clear_decision(
    State(state): State<Shared>,
    Path(hash): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let hash = parse_hash(&hash)?;
    let cleared = state
        .node
        .store()
        .clear_suitability(&hash)
        .await
        .map_err(internal)?;
    Ok(Json(json!({"status": "success", "cleared": cleared})))
}

async fn stats(State(state): State<Shared>) -> Result<Json<Value>, ApiError> {
    let store = state.node.store();
    let ledger = store.ledger().ledger_totals().await.map_err(internal)?;
    let usage = store.requests().usage_all().await.map_err(internal)?;
    Ok(Json(json!({
        "ledger": ledger.iter().map(|t| json!({
            "node": t.node, "category": t.category, "model": t.model, "calls": t.calls,
            "promptTokens": t.prompt_tokens, "cachedPromptTokens": t.cached_prompt_tokens, "completionTokens": t.completion_tokens, "costUsd": t.cost_usd,
        })).collect::<Vec<_>>(),
        "protocols": usage.iter().map(|(hash, u)| json!({
            "hash": hash.to_hex(), "requests": u.requests, "llm": u.llm, "routine": u.routine,
            "fallback": u.fallback, "rejected": u.rejected, "failed": u.failed,
            "llmCostUsd": u.llm_cost_usd,
        })).collect::<Vec<_>>(),
    })))
}
