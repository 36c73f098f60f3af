//! The node as an A2A agent over HTTP: the agent card and the JSON-RPC endpoint (see
//! `agora_a2a` for the mapping onto the engine).
//!
//! | route | what |
//! |---|---|
//! | `GET /.well-known/agent-card.json` | the agent card |
//! | `POST /a2a` | JSON-RPC 2.0: `SendMessage`, `SendStreamingMessage` (SSE), `GetTask`, `CancelTask` |
//!
//! A call meets the same edge as `POST /`, in the same order: the client named (and
//! authenticated, when the node requires it), the body within its time and the router's size
//! limit, the client's budget (the LLM budget unless a routine serves the protocol named),
//! capacity and an LLM place, then the answer within the request deadline. A refusal keeps its
//! HTTP status and `Retry-After`, with a JSON-RPC error body a client can read: `-32600` for a
//! body that is too large or unreadable, `-32603` with the edge's sentence otherwise.
//! `Idempotency-Key` is not honoured here: A2A has no equivalent, and a task is continued by
//! its id.

use std::net::SocketAddr;

use std::convert::Infallible;
use std::time::Duration;

use agora_a2a::{A2aFront, Answer, Call, Started};
use agora_protocol::ErrorCode;
use axum::Json;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{self, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::app::{AppState, Shared};
use crate::edge::Budget;
use crate::error::ApiError;

/// JSON-RPC's "invalid request".
const INVALID_REQUEST: i32 = -32600;
/// JSON-RPC's "internal error", used for the edge's refusals (busy, rate-limited, late).
const REFUSED: i32 = -32603;

/// `GET /.well-known/agent-card.json`.
pub(crate) async fn agent_card(State(state): State<Shared>) -> Result<Response, ApiError> {
    let front = front(&state)?;
    let card = front.card().await.map_err(|error| {
        tracing::error!(%error, "could not build the agent card");
        ApiError::internal()
    })?;
    Ok(Json(card).into_response())
}

/// `POST /a2a`.
pub(crate) async fn jsonrpc(
    State(state): State<Shared>,
    request: axum::extract::Request,
) -> Response {
    let front = match front(&state) {
        Ok(front) => front.clone(),
        Err(error) => return error.into_response(),
    };
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0);
    let client = match state.edge.identify(request.headers(), peer) {
        Ok(client) => client,
        Err(error) => return refused(&Value::Null, error),
    };
    let bytes = match crate::extract::read_bytes_within(request, state.edge.body_timeout()).await {
        Ok(bytes) => bytes,
        Err(error) => return refused(&Value::Null, error),
    };
    let call = match front.parse(&bytes) {
        Ok(call) => call,
        Err(response) => return Json(response).into_response(),
    };
    if call.runs_as_task() {
        return start_task(&state, &front, call, client).await;
    }
    let id = call.id().clone();
    let answered = answer_within_limits(&state, &front, call, &client).await;
    match answered {
        Ok(Answer::Json(response)) => Json(response).into_response(),
        Ok(Answer::Events(events)) => server_sent(&events),
        Err(error) => refused(&id, error),
    }
}

async fn answer_within_limits(
    state: &AppState,
    front: &A2aFront,
    call: Call,
    client: &agora_node::Client,
) -> Result<Answer, ApiError> {
    let budget = if call.may_use_llm(&state.node) {
        Budget::Llm
    } else {
        Budget::Routine
    };
    state.edge.check_rate(client, budget)?;
    let _permit = state.admit()?;
    let _llm = match budget {
        Budget::Llm => Some(state.edge.llm_slot().await?),
        Budget::Routine => None,
    };
    state
        .edge
        .within_deadline(front.answer(call, Some(client)))
        .await
}

/// How often a stream with nothing new to say sends an SSE comment, so that a client's read
/// timeout (the A2A Python SDK's default is 5 s) does not end it while the LLM works.
const KEEP_ALIVE: Duration = Duration::from_secs(2);

/// A message answered as a task (see `agora_a2a::tasks`): the rate and capacity checks now, the
/// task at once (as a stream, or alone for `returnImmediately`), the LLM place and the work on
/// a tracked background task within the request deadline.
async fn start_task(
    state: &AppState,
    front: &A2aFront,
    call: Call,
    client: agora_node::Client,
) -> Response {
    let id = call.id().clone();
    if let Err(error) = state.edge.check_rate(&client, Budget::Llm) {
        return refused(&id, error);
    }
    let permit = match state.admit() {
        Ok(permit) => permit,
        Err(error) => return refused(&id, error),
    };
    let (first, response_id, streaming, return_immediately, events, work) =
        match front.start(call, Some(client)).await {
            Started::Answered(response) => return Json(response).into_response(),
            Started::Running {
                first,
                response_id,
                streaming,
                return_immediately,
                events,
                work,
            } => (
                first,
                response_id,
                streaming,
                return_immediately,
                events,
                work,
            ),
        };
    let background = state.clone();
    let front = front.clone();
    let started = first.clone();
    state.agent_runs.spawn(async move {
        let _permit = permit;
        let _llm = match background.edge.llm_slot().await {
            Ok(slot) => slot,
            Err(error) => {
                front.abandon(&started, &error.message);
                return;
            }
        };
        if background.edge.within_deadline(work).await.is_err() {
            front.abandon(
                &started,
                "the answer took longer than this agent allows; send the message again",
            );
        }
    });
    if !streaming {
        return Json(first).into_response();
    }
    if return_immediately {
        // The task alone; the client reads the rest with `GetTask`.
        return server_sent(&[first]);
    }
    let stream = futures::stream::unfold(events, move |mut events| {
        let response_id = response_id.clone();
        async move {
            let event = events.recv().await?;
            let data = agora_a2a::stream_event(&response_id, &event).to_string();
            Some((
                Ok::<_, Infallible>(sse::Event::default().data(data)),
                events,
            ))
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

fn front(state: &AppState) -> Result<&A2aFront, ApiError> {
    state
        .a2a
        .as_ref()
        .ok_or_else(|| ApiError::not_found("this node does not serve A2A"))
}

/// An edge refusal as a JSON-RPC error, keeping its HTTP status and headers.
fn refused(id: &Value, error: ApiError) -> Response {
    let code = match error.code {
        ErrorCode::BadRequest | ErrorCode::PayloadTooLarge => INVALID_REQUEST,
        _ => REFUSED,
    };
    let body = agora_a2a::error_response(id, code, &error.message);
    let mut response = (error.status, Json(body)).into_response();
    response.headers_mut().extend(error.headers);
    response
}

/// Events as one `text/event-stream` body: each a `data:` line with a JSON-RPC response.
fn server_sent(events: &[Value]) -> Response {
    let body: String = events
        .iter()
        .map(|event| format!("data: {event}\n\n"))
        .collect();
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}
