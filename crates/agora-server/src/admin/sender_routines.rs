//! The sender routines over the admin API: the routines this node wrote for its own half of a
//! task (post to a target under a protocol, read the reply), and the operator's review of them
//! under the `review` activation policy.
//!
//! | route | what |
//! |---|---|
//! | `GET /admin/sender-routines` | every sender routine with its key, status and counters |
//! | `GET /admin/sender-routines/{id}/review` | what a reviewer needs: the source, the examination that passed it, the task's kept examples (data, body sent, reply, output), the active routine it would replace, earlier decisions |
//! | `POST /admin/sender-routines/{id}/approve` | `{"reviewer"}`: a pending routine sends from then on |
//! | `POST /admin/sender-routines/{id}/reject` | `{"reviewer", "reason"}`: the programmer reads the reason next time |
//! | `POST /admin/sender-routines/{id}/edit` | `{"reviewer", "source"}`: examined on the kept examples; a pass is a new pending routine (`201`), a failure `422` with the report |

use agora_node::Node;
use agora_protocol::ErrorCode;
use agora_store::{SenderRoutine, StoreError};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::routines::{Verdict, registry_error, review_routes};
use crate::app::Shared;
use crate::error::ApiError;
use crate::extract::JsonBody;

/// The sender routine routes (the caller applies the token check).
pub fn router() -> Router<Shared> {
    Router::new()
        .route("/sender-routines", get(list))
        .route("/sender-routines/{id}/review", get(review_page))
        .merge(review_routes("/sender-routines/{id}", review))
}

/// A sender routine as the admin API lists it (no source).
pub fn routine_json(routine: &SenderRoutine) -> Value {
    shown(routine, false)
}

/// A sender routine as the admin API shows it (`source` too when `with_source`).
fn shown(routine: &SenderRoutine, with_source: bool) -> Value {
    let mut shown = json!({
        "id": routine.id,
        "target": routine.key.target,
        "task": routine.key.task,
        "protocolHash": routine.key.protocol_hash.to_hex(),
        "status": routine.status.as_str(),
        "runs": routine.runs,
        "failures": routine.failures,
        "lastError": routine.last_error,
        "createdAt": routine.created_at_ms,
        "updatedAt": routine.updated_at_ms,
    });
    if with_source {
        shown["source"] = json!(routine.source);
    }
    shown
}

fn store_error(error: StoreError) -> ApiError {
    tracing::error!(%error, "reading sender routines failed");
    ApiError::internal()
}

async fn list(State(state): State<Shared>) -> Result<Json<Value>, ApiError> {
    let store = state.node.store().sender();
    let routines = store.sender_routines().await.map_err(store_error)?;
    let shown = routines.iter().map(routine_json).collect();
    Ok(Json(Value::Array(shown)))
}

/// `POST /admin/sender-routines/{id}/approve`, `.../reject` or `.../edit`.
async fn review(
    State(state): State<Shared>,
    Path(id): Path<i64>,
    JsonBody(value): JsonBody,
    verdict: Verdict,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (reviewer, decision) = verdict.read(&value)?;
    let routine = state
        .node
        .sender_reviewer()
        .review(id, &reviewer, &decision)
        .await
        .map_err(registry_error)?;
    Ok((verdict.status(), Json(shown(&routine, true))))
}

/// `GET /admin/sender-routines/{id}/review`: see [`review_of`].
async fn review_page(
    State(state): State<Shared>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    match review_of(&state.node, id).await.map_err(store_error)? {
        Some(review) => Ok(Json(review)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            format!("no sender routine {id}"),
        )),
    }
}

/// What a reviewer needs of the sender routine `id` (`None` when there is none): the routine
/// with its source, the examination that passed it (the programmer's attempt; none for an
/// edit), the task's kept examples, the active routine it would replace, and the decisions on
/// its key's routines so far.
pub(crate) async fn review_of(node: &Node, id: i64) -> Result<Option<Value>, StoreError> {
    let store = node.store().sender();
    let Some(routine) = store.sender_routine(id).await? else {
        return Ok(None);
    };
    let limit = node.config().programmer.max_examples.max(1) as i64;
    let examples: Vec<Value> = store
        .sender_examples(&routine.key, limit)
        .await?
        .iter()
        .map(|e| json!({"data": e.data, "body": e.body, "reply": e.reply, "output": e.output}))
        .collect();
    let examination = node
        .store()
        .programming()
        .attempts(Some(&routine.key))
        .await?
        .into_iter()
        .find(|attempt| attempt.routine_id == Some(id))
        .map(|attempt| json!({"job": attempt.job, "attempt": attempt.attempt, "report": attempt.report}));
    let replaces = store
        .active_sender_routine(&routine.key)
        .await?
        .filter(|active| active.id != routine.id)
        .map(|active| shown(&active, true));
    let reviews: Vec<Value> = store
        .sender_reviews(Some(&routine.key))
        .await?
        .iter()
        .map(|r| {
            json!({
                "senderRoutineId": r.sender_routine_id, "decision": r.decision.as_str(),
                "reason": r.reason, "reviewer": r.reviewer, "decidedAt": r.decided_at_ms,
            })
        })
        .collect();
    Ok(Some(json!({
        "routine": shown(&routine, true),
        "examination": examination,
        "examples": examples,
        "replaces": replaces,
        "reviews": reviews,
        "shadowChecked": false,
        "shadowUnchecked": "a sender routine posts to another node: no scratch state stands in for it",
    })))
}
