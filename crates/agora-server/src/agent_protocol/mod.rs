//! The node as an agent of the Agent Protocol (supercog-ai's "Agent Protocol (draft - 2025
//! edition)"), served under `/agent-protocol` so no path can clash with the Agora endpoints.
//!
//! | route | what |
//! |---|---|
//! | `GET /agent-protocol/` | the agents here: `[[name, path]]`, one pair (this node) |
//! | `GET /agent-protocol/{agent}/describe` | the `AgentDescriptor` |
//! | `POST /agent-protocol/{agent}/run?wait=` | a `ChatRequest`, an `OperationRequest` or a `CancelRequest` |
//! | `GET /agent-protocol/{agent}/get_events?run_id=&since=&stream=` | a run's events, polled or over SSE |
//! | `GET /agent-protocol/{agent}/get_events/{id}` | the same for a run id; for a thread id, the events of its runs held here |
//! | `POST /agent-protocol/{agent}/stream_request` | a new run, its events over SSE |
//! | `GET /agent-protocol/{agent}/runs/{run_id}` | a run's status |
//! | `GET /agent-protocol/{agent}/threads` | the caller's threads with runs held here |
//!
//! **Operations.** `chat` is a natural-language Agora request; a chat without `thread_id` opens
//! a multiround conversation whose id is the thread id (named before the node answers, through
//! [`agora_node::RequestHooks`]), and a chat with one is a follow-up in it, so the LLM sees the
//! earlier turns and threads survive restarts like any conversation (until it idles out:
//! `conversations.idle_timeout_secs`). Every other operation is a protocol this node serves (its
//! `/.wellknown` listing), named by its document's `name` (or `protocol-<hash prefix>`; the full
//! hash is accepted too): its `input` is the request body (a string as text, anything else as
//! JSON), so a protocol with an active routine is answered without the LLM. Operation runs are
//! single-shot (a conversation would bypass the routine): their thread is their own and cannot
//! be continued. Each configured task is an operation too (named as the task, `task-chat` for a
//! task named `chat`; a protocol of the same name takes its hash prefix): its `input` is
//! `{"target": <an agent's Agora URL>, "input": <the task's input>}`, and the run is the
//! sender's ladder (`Node::run_task`), so its `CompletionCall`/`CompletionResult` events are the
//! sender's LLM calls and `RunCompleted`'s `output` is the task's output. Running a task makes
//! this node spend on other agents' behalf, so it needs a bearer token (the admin token or
//! `mcp.token`: `401` without, `403` when neither is configured), and its target follows the
//! MCP front's rules (`http(s)`, `mcp.allowed_targets`, no private IP literal unless
//! `fetch.allow_networks` has it; `422` otherwise). A task run is bounded by the sender's own
//! timeouts, not by the request deadline: a negotiation takes several LLM calls.
//!
//! **Events** are what the node does (see `agora_agent_protocol::runs`): `RunStarted`; the request (`ChatRequest`
//! or `OperationRequest`); `CompletionCall`/`CompletionResult` for each LLM call (the ledger's);
//! `ToolCall`/`ToolResult`/`ToolError` for each tool call, with its `caller`: `llm` (the
//! responder), `routine` or `program` (code as action); `TextOutput` with the answer;
//! `RunCompleted` with `finish_reason` `success`, `error` or `canceled`. A tool's error is shown
//! as a sentence: its words stay in the log.
//!
//! **Run.** `wait=false` (the default) answers `202` with the `RunStarted` event (its `run_id`
//! is needed to get the events; the seed says "only the HTTP status code"), `wait=true` answers
//! `200` with the `RunCompleted` event once the run ends. A `CancelRequest` answers the run's
//! status (with `wait=true`, once the run has ended).
//!
//! **Defences.** A run meets the edge as `POST /` does: the client is named (and must be known
//! on a closed node), the body arrives within its time and size, the budget is spent (the
//! routine budget for an operation an active routine serves, else the LLM budget), a place in
//! flight is taken before `202`, the LLM work bound inside the run, and the node answers within
//! the request deadline (past it the run ends `error`). Runs, events and threads are read only
//! by the client that started them; a stranger gets `404`. Bad input is `400` (unreadable),
//! `404` (unknown agent, run or thread), `413` (too large), `422` (an unknown operation, a
//! request type not served).
//!
//! Left out: `configure`, human in the loop (`WaitForInput`, `ResumeWithInput`), artifacts,
//! `ToolTextOutput`, token streaming (`TextOutput` is the whole answer), `depth` above 0, and
//! events of runs held by another replica or before a restart.

mod describe;
mod events;

use std::net::SocketAddr;
use std::sync::Arc;

use agora_node::{Client, FollowUpError, RequestHooks};
use agora_protocol::{Body, ErrorCode, FollowUp, HashDialect, ProtocolRef, Reply, Request, Status};
use agora_store::ConversationKind;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;

use crate::app::{AppState, Shared};
use crate::edge::Budget;
use crate::error::ApiError;
use crate::extract::read_json_within;
use agora_agent_protocol::runs::{Run, RunObserver};
use agora_agent_protocol::wire::{EventKind, FinishReason, RunRequest};
use describe::{Named, agent, named_operation};
use events::{event_stream, run_not_found, status_of};

/// Where the Agent Protocol is mounted.
pub const MOUNT: &str = "/agent-protocol";

/// The channel an Agent Protocol run is recorded under in the request ledger.
pub const CHANNEL: &str = "agent_protocol";

/// The Agent Protocol's routes, to merge into the node's router.
pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route(MOUNT, get(describe::list_agents))
        .route("/agent-protocol/", get(describe::list_agents))
        .route("/agent-protocol/{agent}/describe", get(describe::describe))
        .route("/agent-protocol/{agent}/run", post(run))
        .route(
            "/agent-protocol/{agent}/stream_request",
            post(stream_request),
        )
        .route(
            "/agent-protocol/{agent}/get_events",
            get(events::get_events),
        )
        .route(
            "/agent-protocol/{agent}/get_events/{id}",
            get(events::get_events_of),
        )
        .route(
            "/agent-protocol/{agent}/runs/{run_id}",
            get(events::run_status),
        )
        .route("/agent-protocol/{agent}/threads", get(events::threads))
}

/// The client of a request, as the edge names it (or refuses it).
fn client(state: &AppState, request: &axum::extract::Request) -> Result<Client, ApiError> {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0);
    state.edge.identify(request.headers(), peer)
}

/// The query string's parameters.
struct Params(Vec<(String, String)>);

impl Params {
    fn of(request: &axum::extract::Request) -> Self {
        Self(
            url::form_urlencoded::parse(request.uri().query().unwrap_or_default().as_bytes())
                .into_owned()
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    fn flag(&self, name: &str) -> Result<bool, ApiError> {
        match self.get(name) {
            None => Ok(false),
            Some("true" | "True" | "1" | "") => Ok(true),
            Some("false" | "False" | "0") => Ok(false),
            Some(other) => Err(ApiError::bad_request(format!(
                "{name} must be true or false, not {other:?}"
            ))),
        }
    }

    fn since(&self) -> Result<Option<u64>, ApiError> {
        self.get("since")
            .map(|since| {
                since.parse().map_err(|_| {
                    ApiError::bad_request(format!(
                        "since must be an event id (a whole number), not {since:?}"
                    ))
                })
            })
            .transpose()
    }
}

/// What a run asks the node.
enum Work {
    /// A request; `conversation_id` names the conversation a chat opens.
    Request {
        request: Request,
        conversation_id: Option<String>,
    },
    /// A chat continuing a thread.
    FollowUp { thread_id: String, body: String },
    /// One of the node's tasks, sent to `target`.
    Task {
        task: agora_node::Task,
        target: String,
        input: Value,
    },
}

/// A run request admitted by the edge and registered, ready to run.
struct Admitted {
    run: Arc<Run>,
    work: Work,
    budget: Budget,
    client: Client,
    permit: tokio::sync::OwnedSemaphorePermit,
}

/// The edge's steps for `POST /run` and `/stream_request`, up to a registered run (or a
/// cancel's answer).
async fn admit(
    state: &AppState,
    named: &str,
    request: axum::extract::Request,
) -> Result<Result<Admitted, Response>, ApiError> {
    let name = agent(state, named)?;
    let client = client(state, &request)?;
    let params = Params::of(&request);
    let wait = params.flag("wait")?;
    let token = crate::admin::presented_sender_token(state, request.headers());
    let value = read_json_within(request, state.edge.body_timeout()).await?;
    let parsed = RunRequest::parse(&value).map_err(|error| match error {
        agora_agent_protocol::wire::RunRequestError::UnknownType(_) => {
            unprocessable(error.to_string())
        }
        other => ApiError::bad_request(other.to_string()),
    })?;
    let (thread_id, work, event, budget) = match parsed {
        RunRequest::Cancel { run_id } => {
            state.edge.check_rate(&client, Budget::Routine)?;
            return cancel(state, &client, &run_id, wait).await.map(Err);
        }
        RunRequest::Chat {
            input,
            thread_id: Some(thread_id),
        } => {
            live_thread(state, &thread_id).await?;
            let work = Work::FollowUp {
                thread_id: thread_id.clone(),
                body: input.clone(),
            };
            (
                thread_id,
                work,
                EventKind::ChatRequest { input },
                Budget::Llm,
            )
        }
        RunRequest::Chat {
            input,
            thread_id: None,
        } => {
            let thread_id = uuid::Uuid::new_v4().to_string();
            let request = Request {
                protocol: ProtocolRef::NaturalLanguage,
                hash_dialect: HashDialect::Hex,
                sources: Vec::new(),
                body: Body::Text(input.clone()),
                multiround: true,
            };
            let work = Work::Request {
                request,
                conversation_id: Some(thread_id.clone()),
            };
            (
                thread_id,
                work,
                EventKind::ChatRequest { input },
                Budget::Llm,
            )
        }
        RunRequest::Operation {
            thread_id: Some(_), ..
        } => {
            return Err(unprocessable(
                "operation runs are single-shot and start their own thread; \
                 continue a thread with a ChatRequest",
            ));
        }
        RunRequest::Operation {
            name: operation,
            input,
            thread_id: None,
        } => match named_operation(state, &operation).await? {
            Named::Task(task) => {
                token?;
                let (target, data) = task_input(state, &task, &input)?;
                let work = Work::Task {
                    task,
                    target,
                    input: data,
                };
                let event = EventKind::OperationRequest { operation, input };
                (uuid::Uuid::new_v4().to_string(), work, event, Budget::Llm)
            }
            Named::Protocol(hash) => {
                let request = Request {
                    protocol: ProtocolRef::Protocol(hash),
                    hash_dialect: HashDialect::Hex,
                    sources: Vec::new(),
                    body: match &input {
                        Value::String(text) => Body::Text(text.clone()),
                        other => Body::Json(other.clone()),
                    },
                    multiround: false,
                };
                let budget = if state.node.serves_with_routine(&request) {
                    Budget::Routine
                } else {
                    Budget::Llm
                };
                let work = Work::Request {
                    request,
                    conversation_id: None,
                };
                let event = EventKind::OperationRequest { operation, input };
                (uuid::Uuid::new_v4().to_string(), work, event, budget)
            }
        },
    };
    state.edge.check_rate(&client, budget)?;
    let permit = state.admit()?;
    let run = state
        .agent_runs
        .start(thread_id, &name, &client.0)
        .map_err(|full| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Busy,
                full.to_string(),
            )
            .retry_after(5)
        })?;
    run.push(EventKind::RunStarted);
    run.push(event);
    Ok(Ok(Admitted {
        run,
        work,
        budget,
        client,
        permit,
    }))
}

/// A task operation's input: its target (checked against the node's rules) and the task's data
/// (checked against the task's input schema), or `422`.
fn task_input(
    state: &AppState,
    task: &agora_node::Task,
    input: &Value,
) -> Result<(String, Value), ApiError> {
    let target = input
        .get("target")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            unprocessable(format!(
                "the input of {:?} is {{\"target\": <an agent's Agora URL>, \"input\": <the task's input>}}",
                task.name
            ))
        })?;
    state.task_targets.check(target).map_err(unprocessable)?;
    let data = input.get("input").cloned().unwrap_or(Value::Null);
    task.check_input(&data).map_err(|problems| {
        unprocessable(format!(
            "the input does not match the task's input schema: {problems}"
        ))
    })?;
    Ok((target.to_string(), data))
}

fn unprocessable(message: impl Into<String>) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::BadRequest,
        message,
    )
}

/// `404` unless `thread_id` is a conversation a chat can continue.
async fn live_thread(state: &AppState, thread_id: &str) -> Result<(), ApiError> {
    let stored = state
        .node
        .store()
        .conversation(thread_id)
        .await
        .map_err(|error| {
            tracing::error!(%error, "could not read a conversation");
            ApiError::internal()
        })?;
    match stored {
        Some(conversation) if conversation.kind != ConversationKind::Negotiation => Ok(()),
        _ => Err(thread_not_found()),
    }
}

fn thread_not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::ConversationNotFound,
        "thread not found or expired; start a new one by leaving out thread_id",
    )
}

/// Runs `admitted` on the registry's tracker, until it ends or is canceled.
fn spawn(state: &AppState, admitted: Admitted) {
    let runs = state.agent_runs.clone();
    let state = state.clone();
    let task = async move {
        let Admitted {
            run,
            work,
            budget,
            client,
            permit,
        } = admitted;
        // A panic in the engine ends the run as an error instead of leaving it running.
        let answering = std::panic::AssertUnwindSafe(answer(&state, &run, work, budget, &client));
        let answered = tokio::select! {
            _ = run.cancel.cancelled() => None,
            answered = futures::FutureExt::catch_unwind(answering) => Some(answered),
        };
        let answered = answered.map(|answered| {
            answered.unwrap_or_else(|_| {
                tracing::error!(run_id = %run.id, "an Agent Protocol run panicked");
                Err(ApiError::internal())
            })
        });
        drop(permit);
        finish(&run, answered);
    };
    runs.spawn(task);
}

/// The node's answer to a run's work, within the edge's LLM bound and deadline.
async fn answer(
    state: &AppState,
    run: &Arc<Run>,
    work: Work,
    budget: Budget,
    client: &Client,
) -> Result<Reply, ApiError> {
    let _llm = match budget {
        Budget::Llm => Some(state.edge.llm_slot().await?),
        Budget::Routine => None,
    };
    let node = &state.node;
    let observer = Arc::new(RunObserver(run.clone()));
    match work {
        Work::Request {
            request,
            conversation_id,
        } => {
            let hooks = RequestHooks {
                observer: Some(observer),
                conversation_id,
                channel: Some(CHANNEL),
            };
            state
                .edge
                .within_deadline(node.handle_hooked(request, Some(client), hooks))
                .await
        }
        Work::FollowUp { thread_id, body } => {
            let hooks = RequestHooks {
                observer: Some(observer),
                conversation_id: None,
                channel: Some(CHANNEL),
            };
            let follow_up = FollowUp {
                body: Body::Text(body),
            };
            match state
                .edge
                .within_deadline(node.follow_up_hooked(&thread_id, follow_up, Some(client), hooks))
                .await?
            {
                Ok(reply) => Ok(reply),
                Err(FollowUpError::NotFound) => Err(thread_not_found()),
            }
        }
        Work::Task {
            task,
            target,
            input,
        } => match node
            .run_task_observed(&target, &task, &input, observer)
            .await
        {
            Ok(run) => Ok(Reply::success(Body::Json(run.outcome.output))),
            Err(error) => {
                tracing::warn!(%error, task = %task.name, "an Agent Protocol task run failed");
                Ok(Reply::failure(
                    ErrorCode::HandlerFailed,
                    error.public_message(),
                ))
            }
        },
    }
}

/// The run's last events: the answer and `RunCompleted` (`None`: canceled).
fn finish(run: &Run, answered: Option<Result<Reply, ApiError>>) {
    let completed = |finish_reason, result, output, error| EventKind::RunCompleted {
        finish_reason,
        result,
        output,
        error,
        events_dropped: 0,
    };
    let kind = match answered {
        None => completed(FinishReason::Canceled, None, None, None),
        Some(Ok(reply)) if reply.status == Status::Success => {
            let body = reply.body.unwrap_or(Body::Text(String::new()));
            let text = body.to_text();
            run.push(EventKind::TextOutput {
                content: text.clone(),
            });
            let output = match body {
                Body::Json(value) => Some(value),
                Body::Text(_) => None,
            };
            completed(FinishReason::Success, Some(text), output, None)
        }
        Some(Ok(reply)) => {
            let error = reply
                .error
                .unwrap_or_else(|| format!("the node's reply was {}", reply.status.as_str()));
            completed(FinishReason::Error, None, None, Some(error))
        }
        Some(Err(error)) => completed(FinishReason::Error, None, None, Some(error.message)),
    };
    run.push(kind);
}

/// A `CancelRequest`: cancels `client`'s run `run_id` and answers its status.
async fn cancel(
    state: &AppState,
    client: &Client,
    run_id: &str,
    wait: bool,
) -> Result<Response, ApiError> {
    let run = state
        .agent_runs
        .get(run_id, &client.0)
        .ok_or_else(run_not_found)?;
    run.cancel.cancel();
    if wait {
        run.finished().await;
    }
    Ok(Json(status_of(&run)).into_response())
}

async fn run(
    State(state): State<Shared>,
    Path(named): Path<String>,
    request: axum::extract::Request,
) -> Response {
    let wait = Params::of(&request).flag("wait").unwrap_or(false);
    let run = match start(&state, &named, request).await {
        Ok(run) => run,
        Err(answer) => return answer,
    };
    if wait {
        run.finished().await;
        let completed = run.last_event();
        (StatusCode::OK, Json(completed)).into_response()
    } else {
        let (events, _) = run.events_after(0);
        (StatusCode::ACCEPTED, Json(events.into_iter().next())).into_response()
    }
}

async fn stream_request(
    State(state): State<Shared>,
    Path(named): Path<String>,
    request: axum::extract::Request,
) -> Response {
    match start(&state, &named, request).await {
        Ok(run) => event_stream(run, 0).into_response(),
        Err(answer) => answer,
    }
}

/// Admits `request` and starts its run; a cancel request's answer, or a refusal, otherwise.
async fn start(
    state: &AppState,
    named: &str,
    request: axum::extract::Request,
) -> Result<Arc<Run>, Response> {
    let admitted = match admit(state, named, request).await {
        Ok(Ok(admitted)) => admitted,
        Ok(Err(cancel_answer)) => return Err(cancel_answer),
        Err(error) => return Err(error.into_response()),
    };
    let run = admitted.run.clone();
    spawn(state, admitted);
    Ok(run)
}
