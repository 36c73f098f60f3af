//! The routine registry over the admin API. Changes take effect on this node at once; the
//! `agora routine` commands make the same changes through the store, picked up within seconds.
//!
//! | route | what |
//! |---|---|
//! | `GET /admin/routines` | every routine with its manifest, status and failure counts |
//! | `POST /admin/routines` | add one (see [`add_routine`]) |
//! | `GET /admin/routines/{routine}` | one routine, with its JavaScript source |
//! | `POST /admin/routines/{routine}/enable` | activate it (its protocol's other routine is disabled) |
//! | `POST /admin/routines/{routine}/disable` | disable it (its protocol goes back to the LLM) |
//! | `POST /admin/routines/{routine}/test` | run it once on `{"body": ...}`; nothing is recorded |
//! | `GET /admin/routines/{routine}/review` | what a reviewer needs: source, tools, the examples with the LLM's replies, the examination's report, the active routine it would replace, earlier decisions |
//! | `POST /admin/routines/{routine}/approve` | `{"reviewer"}`: a pending routine answers from then on |
//! | `POST /admin/routines/{routine}/reject` | `{"reviewer", "reason"}`: the programmer reads the reason next time |
//! | `POST /admin/routines/{routine}/edit` | `{"reviewer", "source"}`: examined; a pass is a new pending routine (`201`), a failure `422` with the report |
//! | `DELETE /admin/routines/{routine}` | remove it |
//!
//! `{routine}` is a routine's name or id.

use std::time::Duration;

use agora_node::Node;
use agora_node::RoutineSpec;
use agora_node::{
    ProtocolInput, RegistryError, Review, RoutineError, RoutineLimits, RoutineSource,
};
use agora_protocol::{Body, ErrorCode, ProtocolHash, Reply};
use agora_store::{Routine, RoutineOrigin, RoutineStatus, StoreError};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::app::Shared;
use crate::error::ApiError;
use crate::extract::JsonBody;

/// Largest `POST /admin/routines` body: a base64 component can outgrow the Agora request limit.
const MAX_ROUTINE_BODY_BYTES: usize = 32 * 1024 * 1024;

/// The routine routes (the caller applies the token check).
pub fn router() -> Router<Shared> {
    Router::new()
        .route(
            "/routines",
            get(list_routines)
                .post(add_routine)
                .layer(DefaultBodyLimit::max(MAX_ROUTINE_BODY_BYTES)),
        )
        .route(
            "/routines/{routine}",
            get(show_routine).delete(remove_routine),
        )
        .route(
            "/routines/{routine}/enable",
            post(|state, reference| set_status(state, reference, true)),
        )
        .route(
            "/routines/{routine}/disable",
            post(|state, reference| set_status(state, reference, false)),
        )
        .route("/routines/{routine}/test", post(test_routine))
        .route("/routines/{routine}/review", get(review_page))
        .merge(review_routes("/routines/{routine}", review))
}

/// `POST {prefix}/approve`, `{prefix}/reject` and `{prefix}/edit`, each handled by `review` with
/// its [`Verdict`]; `{prefix}` names the routine in the path as `T`.
pub(super) fn review_routes<T, F, Fut>(prefix: &str, review: F) -> Router<Shared>
where
    T: serde::de::DeserializeOwned + Send + 'static,
    F: Fn(State<Shared>, Path<T>, JsonBody, Verdict) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(StatusCode, Json<Value>), ApiError>> + Send + 'static,
{
    let mut router = Router::new();
    for (name, verdict) in [
        ("approve", Verdict::Approve),
        ("reject", Verdict::Reject),
        ("edit", Verdict::Edit),
    ] {
        let review = review.clone();
        let handler = move |state: State<Shared>, path: Path<T>, body: JsonBody| {
            review(state, path, body, verdict)
        };
        router = router.route(&format!("{prefix}/{name}"), post(handler));
    }
    router
}

/// A routine as the admin API shows it.
pub fn routine_json(routine: &Routine) -> Value {
    json!({
        "id": routine.id,
        "name": routine.name,
        "protocolHash": routine.protocol_hash.to_hex(),
        "language": routine.language.as_str(),
        "tools": routine.tools,
        "timeoutMs": routine.timeout_ms,
        "memoryMb": routine.memory_bytes >> 20,
        "origin": routine.origin.as_str(),
        "status": routine.status.as_str(),
        "runs": routine.runs,
        "failures": routine.failures,
        "lastError": routine.last_error,
        "lastFailureAt": routine.last_failure_at_ms,
        "createdAt": routine.created_at_ms,
        "updatedAt": routine.updated_at_ms,
    })
}

pub(super) fn registry_error(error: RegistryError) -> ApiError {
    let status = match &error {
        RegistryError::NotFound(_) => {
            return ApiError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::NotFound,
                error.to_string(),
            );
        }
        RegistryError::NameTaken(_) => StatusCode::CONFLICT,
        RegistryError::Invalid(_)
        | RegistryError::UnknownProtocol(_)
        | RegistryError::UnknownTool { .. } => StatusCode::BAD_REQUEST,
        RegistryError::Routine(RoutineError::Build(_) | RoutineError::InvalidComponent(_)) => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        RegistryError::NoEngine => StatusCode::SERVICE_UNAVAILABLE,
        RegistryError::Rejected(_) => StatusCode::UNPROCESSABLE_ENTITY,
        RegistryError::Routine(_) | RegistryError::Store(_) => {
            tracing::error!(%error, "routine registry operation failed");
            return ApiError::internal();
        }
    };
    ApiError::new(status, ErrorCode::BadRequest, error.to_string())
}

async fn list_routines(State(state): State<Shared>) -> Result<Json<Value>, ApiError> {
    let routines = state.node.routines().list().await.map_err(registry_error)?;
    Ok(Json(routines.iter().map(routine_json).collect()))
}

/// `POST /admin/routines` with
/// `{"name", "protocolHash" | "protocolText", "source" | "wasmBase64", "tools"?, "timeoutMs"?,
/// "memoryMb"?, "activate"?}`: `source` is JavaScript, `wasmBase64` a component or core module;
/// a `protocolHash` must name a stored document, a `protocolText` is stored. Limits default to
/// 1 s and 64 MiB; the routine starts active unless `"activate": false`.
async fn add_routine(
    State(state): State<Shared>,
    JsonBody(value): JsonBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let text = |key: &str| value.get(key).and_then(Value::as_str);
    let name = text("name").ok_or_else(|| ApiError::bad_request("\"name\" is required"))?;
    let protocol = match (text("protocolHash"), text("protocolText")) {
        (Some(hash), None) => ProtocolInput::Hash(
            ProtocolHash::parse(hash).map_err(|e| ApiError::bad_request(e.to_string()))?,
        ),
        (None, Some(document)) => ProtocolInput::Text(document.to_string()),
        _ => {
            return Err(ApiError::bad_request(
                "give exactly one of \"protocolHash\" and \"protocolText\"",
            ));
        }
    };
    let source = match (text("source"), text("wasmBase64")) {
        (Some(source), None) => RoutineSource::JavaScript(source.to_string()),
        (None, Some(encoded)) => RoutineSource::Component(
            base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .map_err(|e| ApiError::bad_request(format!("\"wasmBase64\": {e}")))?,
        ),
        _ => {
            return Err(ApiError::bad_request(
                "give exactly one of \"source\" (JavaScript) and \"wasmBase64\"",
            ));
        }
    };
    let tools = match value.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::bad_request("\"tools\" must be an array of tool names"))?,
        Some(_) => {
            return Err(ApiError::bad_request(
                "\"tools\" must be an array of tool names",
            ));
        }
    };
    let defaults = RoutineLimits::default();
    let limits = RoutineLimits {
        timeout: match value.get("timeoutMs") {
            None => defaults.timeout,
            Some(ms) => Duration::from_millis(ms.as_u64().ok_or_else(|| {
                ApiError::bad_request("\"timeoutMs\" must be a positive integer")
            })?),
        },
        memory_bytes: match value.get("memoryMb") {
            None => defaults.memory_bytes,
            Some(mb) => {
                let mb = mb.as_u64().ok_or_else(|| {
                    ApiError::bad_request("\"memoryMb\" must be a positive integer")
                })?;
                mb.saturating_mul(1024 * 1024)
            }
        },
    };
    let activate = value
        .get("activate")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let spec = RoutineSpec {
        name: name.to_string(),
        protocol,
        source,
        tools,
        limits,
        origin: RoutineOrigin::Human,
        activate,
    };
    let routine = state.node.add_routine(spec).await.map_err(registry_error)?;
    Ok((StatusCode::CREATED, Json(routine_json(&routine))))
}

async fn show_routine(
    State(state): State<Shared>,
    Path(reference): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let registry = state.node.routines();
    let routine = registry.find(&reference).await.map_err(registry_error)?;
    let code = registry.code(&routine).await.map_err(registry_error)?;
    let mut shown = routine_json(&routine);
    shown["source"] = json!(code.source);
    shown["componentBytes"] = json!(code.component.len());
    Ok(Json(shown))
}

/// `POST /admin/routines/{routine}/enable` (`enable`) or `.../disable`.
async fn set_status(
    State(state): State<Shared>,
    Path(reference): Path<String>,
    enable: bool,
) -> Result<Json<Value>, ApiError> {
    let routine = if enable {
        state.node.enable_routine(&reference).await
    } else {
        state.node.disable_routine(&reference).await
    };
    Ok(Json(routine_json(&routine.map_err(registry_error)?)))
}

async fn remove_routine(
    State(state): State<Shared>,
    Path(reference): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let routine = state
        .node
        .remove_routine(&reference)
        .await
        .map_err(registry_error)?;
    Ok(Json(
        json!({"status": "success", "removed": routine_json(&routine)}),
    ))
}

/// `POST /admin/routines/{routine}/test` with `{"body": ...}`: the reply the routine would give,
/// in the protocol's reply shape (a JSON body gets a JSON reply when the routine returns JSON).
async fn test_routine(
    State(state): State<Shared>,
    Path(reference): Path<String>,
    JsonBody(value): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let body = match value.get("body") {
        Some(Value::String(text)) => Body::Text(text.clone()),
        Some(other) => Body::Json(other.clone()),
        None => return Err(ApiError::bad_request("expected {\"body\": ...}")),
    };
    let result = state
        .node
        .routines()
        .test(&reference, &body.to_text())
        .await
        .map_err(registry_error)?;
    let reply = match result {
        Ok(text) => Reply::success(match (&body, serde_json::from_str::<Value>(&text)) {
            (Body::Json(_), Ok(json)) if !json.is_string() => Body::Json(json),
            _ => Body::Text(text),
        }),
        Err(error) => Reply::failure(ErrorCode::HandlerFailed, error.to_string()),
    };
    Ok(Json(reply.to_json()))
}

/// Which review route was called.
#[derive(Clone, Copy)]
pub(super) enum Verdict {
    Approve,
    Reject,
    Edit,
}

impl Verdict {
    /// The reviewer and the decision a review route's body carries (`{"reviewer"}`, with
    /// `"reason"` to reject and `"source"` to edit).
    pub(super) fn read(self, value: &Value) -> Result<(String, Review), ApiError> {
        let required = |key: &'static str| {
            let text = value.get(key).and_then(Value::as_str).map(str::to_string);
            text.ok_or_else(|| ApiError::bad_request(format!("\"{key}\" is required")))
        };
        let decision = match self {
            Verdict::Approve => Review::Approve,
            Verdict::Reject => Review::Reject {
                reason: required("reason")?,
            },
            Verdict::Edit => Review::Edit {
                source: required("source")?,
            },
        };
        Ok((required("reviewer")?, decision))
    }

    /// `201` for an edit that passed (a new routine), `200` otherwise.
    pub(super) fn status(self) -> StatusCode {
        match self {
            Verdict::Edit => StatusCode::CREATED,
            Verdict::Approve | Verdict::Reject => StatusCode::OK,
        }
    }
}

/// `POST /admin/routines/{routine}/approve`, `.../reject` or `.../edit`: the decision is kept
/// with `reviewer`. An edit that passes its examination answers `201` with the new pending
/// routine; the others answer the reviewed routine.
async fn review(
    State(state): State<Shared>,
    Path(reference): Path<String>,
    JsonBody(value): JsonBody,
    verdict: Verdict,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (reviewer, decision) = verdict.read(&value)?;
    let routine = state
        .node
        .review_routine(&reference, &reviewer, &decision)
        .await
        .map_err(registry_error)?;
    Ok((verdict.status(), Json(routine_json(&routine))))
}

/// `GET /admin/routines/{routine}/review`: see [`review_of`].
async fn review_page(
    State(state): State<Shared>,
    Path(reference): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let routine = state
        .node
        .routines()
        .find(&reference)
        .await
        .map_err(registry_error)?;
    let review = review_of(&state.node, &routine).await.map_err(|error| {
        tracing::error!(%error, "reading a routine's review failed");
        ApiError::internal()
    })?;
    Ok(Json(review))
}

/// What a reviewer needs of `routine`: the routine with its source and tools, the programmer's
/// attempt that wrote it (its examination report), the protocol's kept examples (request, the
/// LLM's tool calls and reply, and the routine's own reply with those calls answered from the
/// recording, graded against the LLM's), the active routine it would replace with its source and a
/// unified diff from it, and the decisions on the protocol's routines so far.
pub(crate) async fn review_of(node: &Node, routine: &Routine) -> Result<Value, StoreError> {
    let store = node.store();
    let hash = routine.protocol_hash;
    let source = |id| async move {
        let code = store.routine_code(id).await?;
        Ok::<_, StoreError>(code.and_then(|code| code.source))
    };
    let programming = store.programming();
    let attempts = programming.attempts(Some(&hash)).await?;
    let attempt = attempts.iter().find(|a| a.routine_id == Some(routine.id));
    let reviews = programming.reviews(Some(&hash)).await?;
    let own = source(routine.id).await?;
    let all = store.routines().await?;
    let active = all.iter().find(|r| {
        r.protocol_hash == hash && r.status == RoutineStatus::Active && r.id != routine.id
    });
    let replaces = match active {
        Some(active) => {
            let theirs = source(active.id).await?;
            let mut shown = routine_json(active);
            shown["source"] = json!(theirs);
            let diff = similar::TextDiff::from_lines(
                theirs.as_deref().unwrap_or_default(),
                own.as_deref().unwrap_or_default(),
            );
            let header = (active.name.as_str(), routine.name.as_str());
            shown["diff"] = json!(diff.unified_diff().header(header.0, header.1).to_string());
            shown
        }
        None => Value::Null,
    };
    let mut shown = routine_json(routine);
    shown["source"] = json!(own);
    // The routine's own answers, with each tool call answered from the recording; the LLM's
    // alone when the routine cannot be run here.
    let (examples, examined_error): (Vec<Value>, _) =
        match node.routines().examine(&routine.name).await {
            Ok(outcomes) => {
                let examples = outcomes.iter().map(|o| {
                    json!({
                        "body": o.body, "toolCalls": o.tool_calls, "llmReply": o.llm_reply,
                        "routineReply": o.routine_reply.as_ref().ok(),
                        "routineError": o.routine_reply.as_ref().err(),
                        "agrees": o.failure.is_none(), "failure": o.failure,
                    })
                });
                (examples.collect(), None)
            }
            Err(error) => {
                let examples = programming.examples(&hash, 20).await?;
                let examples = examples.iter().map(
                    |e| json!({"body": e.body, "toolCalls": e.tool_calls, "llmReply": e.reply}),
                );
                (examples.collect(), Some(error.to_string()))
            }
        };
    let reviews: Vec<Value> = reviews
        .iter()
        .map(|r| {
            json!({
                "routineId": r.routine_id, "decision": r.decision.as_str(), "reason": r.reason,
                "reviewer": r.reviewer, "decidedAt": r.decided_at_ms,
            })
        })
        .collect();
    let examination = attempt.map(|a| {
        json!({"job": a.job, "attempt": a.attempt, "outcome": a.outcome.as_str(), "report": a.report})
    });
    Ok(json!({
        "routine": shown,
        "examination": examination,
        "examples": examples,
        "examinedError": examined_error,
        "replaces": replaces,
        "reviews": reviews,
    }))
}
