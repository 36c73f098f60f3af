//! Reading runs: their events (polled, or over SSE until `RunCompleted`), their status, and the
//! caller's threads.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::sse::{self, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde_json::{Value, json};

use super::{Params, agent, client};
use crate::app::Shared;
use crate::error::ApiError;
use agora_agent_protocol::runs::Run;
use agora_agent_protocol::wire::FinishReason;

pub(super) fn run_not_found() -> ApiError {
    ApiError::not_found("no such run here (runs are held in memory for an hour after they end)")
}

pub(super) fn status_of(run: &Run) -> Value {
    json!({
        "run_id": run.id,
        "thread_id": run.thread_id,
        "status": run.finish_reason().map_or("running", FinishReason::as_str),
    })
}

/// `run`'s events after `since` as server-sent events, ending after `RunCompleted`.
pub(super) fn event_stream(
    run: Arc<Run>,
    since: u64,
) -> Sse<impl Stream<Item = Result<sse::Event, Infallible>>> {
    use futures::StreamExt as _;
    let changes = run.subscribe();
    let batches = futures::stream::unfold(
        (run, changes, since, false),
        |(run, mut changes, since, ended)| async move {
            if ended {
                return None;
            }
            loop {
                changes.borrow_and_update();
                let (events, finished) = run.events_after(since);
                if !events.is_empty() || finished {
                    let last = events.last().map_or(since, |event| event.id);
                    return Some((events, (run, changes, last, finished)));
                }
                if changes.changed().await.is_err() {
                    return None;
                }
            }
        },
    );
    let events = batches.flat_map(|events| {
        futures::stream::iter(events.into_iter().map(|event| {
            Ok(sse::Event::default()
                .event(event.kind.name())
                .id(event.id.to_string())
                .data(serde_json::to_string(&event).unwrap_or_default()))
        }))
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// A run's events: over SSE with `stream=true`; else those after `since`, or without it those
/// since the last poll.
fn events_of(run: Arc<Run>, params: &Params) -> Result<Response, ApiError> {
    let since = params.since()?;
    if params.flag("stream")? {
        return Ok(event_stream(run, since.unwrap_or(0)).into_response());
    }
    let events = match since {
        Some(since) => run.events_after(since).0,
        None => run.poll(),
    };
    Ok(Json(events).into_response())
}

pub(super) async fn get_events(
    State(state): State<Shared>,
    Path(named): Path<String>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    agent(&state, &named)?;
    let client = client(&state, &request)?;
    let params = Params::of(&request);
    let run_id = params
        .get("run_id")
        .ok_or_else(|| ApiError::bad_request("get_events needs run_id"))?;
    let run = state
        .agent_runs
        .get(run_id, &client.0)
        .ok_or_else(run_not_found)?;
    events_of(run, &params)
}

pub(super) async fn get_events_of(
    State(state): State<Shared>,
    Path((named, id)): Path<(String, String)>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    agent(&state, &named)?;
    let client = client(&state, &request)?;
    let params = Params::of(&request);
    if let Some(run) = state.agent_runs.get(&id, &client.0) {
        return events_of(run, &params);
    }
    let runs = state.agent_runs.of_thread(&id, &client.0);
    if runs.is_empty() {
        return Err(ApiError::not_found(
            "no run or thread with that id here (events are held in memory for an hour)",
        ));
    }
    let events: Vec<_> = runs.iter().flat_map(|run| run.events_after(0).0).collect();
    Ok(Json(events).into_response())
}

pub(super) async fn run_status(
    State(state): State<Shared>,
    Path((named, run_id)): Path<(String, String)>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    agent(&state, &named)?;
    let client = client(&state, &request)?;
    let run = state
        .agent_runs
        .get(&run_id, &client.0)
        .ok_or_else(run_not_found)?;
    Ok(Json(status_of(&run)).into_response())
}

pub(super) async fn threads(
    State(state): State<Shared>,
    Path(named): Path<String>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    agent(&state, &named)?;
    let client = client(&state, &request)?;
    let mut threads: Vec<(String, Vec<Value>)> = Vec::new();
    for run in state.agent_runs.of_client(&client.0) {
        let status = status_of(&run);
        match threads.iter_mut().find(|(id, _)| *id == run.thread_id) {
            Some((_, runs)) => runs.push(status),
            None => threads.push((run.thread_id.clone(), vec![status])),
        }
    }
    let listed: Vec<Value> = threads
        .into_iter()
        .map(|(thread_id, runs)| json!({"thread_id": thread_id, "runs": runs}))
        .collect();
    Ok(Json(listed).into_response())
}
