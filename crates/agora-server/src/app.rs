//! The router: Agora endpoints, discovery, documents, metrics and admin.
//!
//! | route | what |
//! |---|---|
//! | `POST /` | an Agora request |
//! | `POST /conversations/{id}` | a follow-up in a multiround conversation |
//! | `DELETE /conversations/{id}` | end a conversation (200 even if unknown, as the Python sender requires) |
//! | `GET /.wellknown`, `GET /wellknown` | supported protocols `{hash: [sources]}` |
//! | `GET /protocols/{hash}` | a stored protocol document as `text/plain; charset=utf-8` |
//! | `GET /metrics` | Prometheus (OpenMetrics) text |
//! | `GET /healthz` | liveness |
//! | `/admin/...` | operator API, bearer token (see [`crate::admin`]) |
//! | `/dashboard/...` | the operator's web dashboard, admin token or its session cookie (see [`crate::dashboard`]) |
//! | `GET /.well-known/agent-card.json`, `POST /a2a` | the node as an A2A agent (see [`crate::a2a`]) |
//! | `/mcp` | the node as an MCP server (streamable HTTP; `agora_mcp::front`), bearer token: `mcp.token` or the admin token |
//! | `/agent-protocol/...` | the node as an agent of the Agent Protocol (see [`crate::agent_protocol`]) |

use std::sync::Arc;

use std::net::SocketAddr;

use agora_node::{Client, FollowUpError, Node, RequestHooks};
use agora_protocol::{ErrorCode, FollowUp, ProtocolHash, Request};
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tokio::sync::Semaphore;
use tower_http::trace::TraceLayer;

use crate::config::EdgeSettings;
use crate::edge::{self, Budget, Edge, EdgeConfigError};
use crate::error::ApiError;
use crate::extract::read_json_within;
use crate::metrics::NodeMetrics;
use agora_agent_protocol::AgentRuns;

/// Shared state of the HTTP handlers.
#[derive(Clone)]
pub struct AppState {
    /// The engine.
    pub node: Node,
    /// The admin bearer token; `None` disables the admin API.
    pub admin_token: Option<Arc<str>>,
    /// Largest accepted body, in bytes.
    pub max_body_bytes: usize,
    /// Bounds the Agora requests in flight.
    pub in_flight: Arc<Semaphore>,
    /// The node's metrics registry, for `/metrics`.
    pub metrics: Arc<NodeMetrics>,
    /// The MCP endpoint, when `/mcp` is served.
    pub mcp: Option<McpEndpoint>,
    /// The A2A front, when the agent card and `/a2a` are served.
    pub a2a: Option<agora_a2a::A2aFront>,
    /// Timeouts, budgets, client authentication and the LLM work bound (see [`crate::edge`]).
    pub edge: Arc<Edge>,
    /// The Agent Protocol's runs and their events (see [`crate::agent_protocol`]).
    pub agent_runs: Arc<AgentRuns>,
    /// Where a caller may have this node send its tasks (the Agent Protocol's task
    /// operations); the default refuses private IP literals.
    pub task_targets: Arc<agora_mcp::TargetRules>,
}

/// The state as the router holds it: axum clones the state for every extractor and middleware
/// of every request, and one `Arc` is one count to bump, where the state's own fields are a few
/// dozen (and a boxed service to clone).
pub(crate) type Shared = Arc<AppState>;

/// The MCP service as this crate mounts it: a boxed tower service over axum's bodies, so no
/// rmcp type is part of this crate's API.
pub type McpService = tower::util::BoxCloneSyncService<
    axum::http::Request<axum::body::Body>,
    Response,
    std::convert::Infallible,
>;

/// `/mcp`: the node's MCP server over streamable HTTP, and the token it takes besides the
/// admin token.
#[derive(Clone)]
pub struct McpEndpoint {
    /// The MCP service.
    pub service: McpService,
    /// Its own bearer token, if configured.
    pub token: Option<Arc<str>>,
}

impl McpEndpoint {
    /// The endpoint for `service` (from `agora_mcp::http_service`), taking `token` (empty: none)
    /// besides the admin token.
    pub fn new(service: agora_mcp::HttpService, token: Option<&str>) -> Self {
        let service = tower::ServiceExt::<axum::http::Request<axum::body::Body>>::map_response(
            service,
            |response| response.map(axum::body::Body::new),
        );
        Self {
            service: McpService::new(service),
            token: token.filter(|t| !t.is_empty()).map(Arc::from),
        }
    }
}

impl AppState {
    /// State with the given limits.
    pub fn new(
        node: Node,
        admin_token: Option<String>,
        max_body_bytes: usize,
        max_concurrent: usize,
    ) -> Self {
        let metrics = Arc::new(NodeMetrics::new(&node.config().name));
        Self {
            node,
            metrics,
            admin_token: admin_token.filter(|t| !t.is_empty()).map(Arc::from),
            max_body_bytes,
            in_flight: Arc::new(Semaphore::new(max_concurrent.max(1))),
            mcp: None,
            a2a: None,
            edge: Arc::new(Edge::default()),
            agent_runs: Arc::new(AgentRuns::default()),
            task_targets: Arc::new(agora_mcp::TargetRules::default()),
        }
    }

    /// The state with the edge built from `settings` instead of the defaults.
    pub fn with_edge(mut self, settings: &EdgeSettings) -> Result<Self, EdgeConfigError> {
        self.edge = Arc::new(Edge::new(settings)?);
        Ok(self)
    }
}

impl AppState {
    /// Admits one Agora request, or answers 503 when the node is at capacity.
    pub(crate) fn admit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
        self.in_flight.clone().try_acquire_owned().map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Busy,
                "this node is at capacity; retry later",
            )
        })
    }
}

/// Adds what every server of this crate answers alike: `GET /healthz`, and the JSON error shape
/// for an unknown path (404) or a method a path does not take (405).
pub(crate) fn with_health_and_fallbacks<S>(router: Router<S>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    router
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                ErrorCode::BadRequest,
                "method not allowed on this endpoint",
            )
        })
}

/// Builds the router. Crate-private so no axum type leaves the crate;
/// embedders and tests serve a node through [`serve_state`] or [`crate::serve`].
pub(crate) fn router(state: AppState) -> Router {
    let state: Shared = Arc::new(state);
    let limit = state.max_body_bytes;
    let router = Router::new()
        .route("/", post(agora_request))
        .route(
            "/conversations/{id}",
            post(follow_up).delete(close_conversation),
        )
        .route("/.wellknown", get(wellknown))
        .route("/wellknown", get(wellknown))
        .route("/protocols/{hash}", get(protocol_document))
        .route("/metrics", get(metrics))
        .route(agora_a2a::CARD_PATH, get(crate::a2a::agent_card))
        .route(agora_a2a::JSONRPC_PATH, post(crate::a2a::jsonrpc))
        .merge(crate::agent_protocol::routes())
        .nest("/admin", crate::admin::router(state.clone()))
        .nest("/dashboard", crate::dashboard::router())
        .route(
            "/dashboard/",
            get(|| async { axum::response::Redirect::permanent("/dashboard") }),
        );
    let router = match &state.mcp {
        Some(endpoint) => router.nest_service(
            "/mcp",
            tower::ServiceBuilder::new()
                .layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    crate::admin::require_mcp_token,
                ))
                .service(endpoint.service.clone()),
        ),
        None => router,
    };
    with_health_and_fallbacks(router)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::metrics::count_request,
        ))
        .layer(DefaultBodyLimit::max(limit))
        .layer(TraceLayer::new_for_http().make_span_with(crate::telemetry::server_span))
        .with_state(state)
}

async fn agora_request(State(state): State<Shared>, request: axum::extract::Request) -> Response {
    answer_agora(state, "/", request, |_, value| {
        let request =
            Request::from_json(value).map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok(Answer::Request(request))
    })
    .await
}

async fn follow_up(
    State(state): State<Shared>,
    Path(id): Path<String>,
    request: axum::extract::Request,
) -> Response {
    let path = format!("/conversations/{id}");
    answer_agora(state, &path, request, |_, value| {
        let follow_up =
            FollowUp::from_json(value).map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok(Answer::FollowUp(id, follow_up))
    })
    .await
}

/// What the engine is asked.
enum Answer {
    Request(Request),
    FollowUp(String, FollowUp),
}

/// The edge's steps around the engine, in order (see [`crate::edge`]): the body within its time,
/// the client named, the request parsed and budgeted, its idempotency key claimed, capacity and
/// an LLM place taken, the answer within the deadline, the key settled.
async fn answer_agora(
    state: Shared,
    path: &str,
    request: axum::extract::Request,
    parse: impl FnOnce(&AppState, &serde_json::Value) -> Result<Answer, ApiError>,
) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0);
    let headers = request.headers().clone();
    let steps = async {
        let client = state.edge.identify(&headers, peer)?;
        let value = read_json_within(request, state.edge.body_timeout()).await?;
        let answer = parse(&state, &value)?;
        // One question to the node: the budget class, and the key the body carries under a
        // protocol that declares one (an `Idempotency-Key` header wins over it).
        let (budget, envelope) = match &answer {
            Answer::Request(request) => {
                let admission = state.node.admission(request).await;
                let budget = if admission.by_routine {
                    Budget::Routine
                } else {
                    Budget::Llm
                };
                let envelope = match (&request.protocol, headers.get(edge::idempotency::HEADER)) {
                    (agora_protocol::ProtocolRef::Protocol(hash), None) => admission
                        .idempotency_key
                        .map(|key| edge::idempotency::EnvelopeKey {
                            protocol_hash: *hash,
                            key,
                        }),
                    _ => None,
                };
                (budget, envelope)
            }
            Answer::FollowUp(..) => (Budget::Llm, None),
        };
        state.edge.check_rate(&client, budget)?;
        let held =
            match edge::idempotency::claim(&state, &headers, &client.0, path, &value, envelope)
                .await?
            {
                edge::idempotency::Claim::Replay(response) => return Ok(response),
                edge::idempotency::Claim::Fresh(held) => held,
            };
        let replied = answer_within_limits(&state, &client, budget, answer).await;
        edge::idempotency::settle(&state, held, &replied).await;
        Ok(Json(replied?.to_json()).into_response())
    };
    steps
        .await
        .unwrap_or_else(|error: ApiError| error.into_response())
}

async fn answer_within_limits(
    state: &AppState,
    client: &Client,
    budget: Budget,
    answer: Answer,
) -> Result<agora_protocol::Reply, ApiError> {
    let _permit = state.admit()?;
    let _llm = match budget {
        Budget::Llm => Some(state.edge.llm_slot().await?),
        Budget::Routine => None,
    };
    let node = &state.node;
    match answer {
        Answer::Request(request) => {
            state
                .edge
                .within_deadline(node.handle_hooked(request, Some(client), RequestHooks::default()))
                .await
        }
        Answer::FollowUp(id, follow_up) => {
            match state
                .edge
                .within_deadline(node.follow_up_hooked(
                    &id,
                    follow_up,
                    Some(client),
                    RequestHooks::default(),
                ))
                .await?
            {
                Ok(reply) => Ok(reply),
                Err(FollowUpError::NotFound) => Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    ErrorCode::ConversationNotFound,
                    "Conversation not found or expired.",
                )),
            }
        }
    }
}

async fn close_conversation(
    State(state): State<Shared>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    state.node.close_conversation(&id).await.map_err(|error| {
        tracing::error!(%error, "could not close a conversation");
        ApiError::internal()
    })?;
    Ok(Json(json!({"status": "success"})).into_response())
}

async fn wellknown(State(state): State<Shared>) -> Result<Response, ApiError> {
    let listing = state.node.wellknown().await.map_err(|error| {
        tracing::error!(%error, "could not list protocols");
        ApiError::internal()
    })?;
    Ok(Json(listing).into_response())
}

async fn protocol_document(
    State(state): State<Shared>,
    Path(hash): Path<String>,
) -> Result<Response, ApiError> {
    let hash = ProtocolHash::parse(&hash).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let stored = state.node.store().document(&hash).await.map_err(|error| {
        tracing::error!(%error, "could not read a document");
        ApiError::internal()
    })?;
    match stored {
        Some(stored) => Ok((
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            stored.document.text().to_string(),
        )
            .into_response()),
        None => Err(ApiError::not_found(format!("no protocol document {hash}"))),
    }
}

async fn metrics(
    State(state): State<Shared>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let text = state
        .metrics
        .render(state.node.store())
        .await
        .map_err(|error| {
            tracing::error!(%error, "could not render metrics");
            ApiError::internal()
        })?;
    Ok(crate::metrics::response(&headers, text))
}

/// Serves a node's state until the token fires (tests and embedders).
pub async fn serve_state(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    let edge = state.edge.clone();
    let agent_runs = state.agent_runs.clone();
    let served = edge::serve::serve(listener, router(state), &edge, shutdown).await;
    agent_runs.shutdown().await;
    served
}
