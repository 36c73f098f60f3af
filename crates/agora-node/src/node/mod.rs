//! The receiver: [`Node::handle`] and the conversation endpoints.
//!
//! The request path is: run the protocol's active routine if it has one (no LLM
//! at all; see `dispatch`), otherwise resolve the protocol document (store, then
//! sources), decide suitability (operator policy, cached decision, or the LLM
//! checker) and answer (the LLM responder with tools); then record the request,
//! its usage counters, its routine run and its conversation in one store
//! transaction.
//!
//! Architecture invariant: `handle` never fails with an error. Every outcome,
//! including store and LLM failures, becomes a [`Reply`] in the protocol's
//! error shape, and every request leaves one row in the request ledger.

use std::sync::Arc;
use std::time::Instant;

use agora_fetch::{Fetcher, TargetClient};
use agora_llm::{ChatRequest, ChatResponse, Llm, LlmError, PriceTable};
use agora_protocol::{
    Body, ErrorCode, FollowUp, ProtocolHash, ProtocolRef, Reply, Request, Status, VerifiedDocument,
    WellKnown,
};
use agora_store::{
    Conversation, ConversationKind, Decision, DecisionOrigin, RequestPath, RequestRecord, Store,
    StoreError,
};
use serde_json::Value;
use tracing::Instrument;

use crate::accounting::{Accountant, Category, QueryContext};
use crate::checker;
use crate::clock::Clock;
use crate::config::{NodeConfig, SuitabilityMode};
use crate::conversation;
use crate::focus::Focus;
use crate::observer::RequestHooks;
use crate::programmer::{Job, PendingExample, ProgrammerQueue, grounding};
use crate::resolver::{ResolveError, Resolver};
use crate::responder::{Responder, Subject};
use crate::routine_table::RoutineTable;
use crate::routines::RoutineEngine;
use crate::tools::ToolRegistry;

mod dispatch;
mod foreign;
mod idempotency;
mod inquiry;
mod ladder;
mod negotiating;
mod programming;
mod receiver_routines;
mod registry;
mod sender_routines;
mod sending;
mod transcript;

pub use foreign::ForeignSender;
pub use inquiry::MessageReply;
pub use ladder::{Rung, TaskRun};
pub use transcript::{Speaker, Transcript};

/// Everything a node is built from.
pub struct NodeParts {
    /// Configuration.
    pub config: NodeConfig,
    /// Persistence.
    pub store: Store,
    /// The LLM (already wrapped for recording or replay if wanted).
    pub llm: Arc<dyn Llm>,
    /// The SSRF-guarded fetcher for protocol sources.
    pub fetcher: Fetcher,
    /// The client for operator-configured targets: receivers tasks are sent to, protocol
    /// databases (the same one the HTTP tools were built with).
    pub targets: TargetClient,
    /// The tools.
    pub tools: ToolRegistry,
    /// LLM prices for the ledger.
    pub prices: PriceTable,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// The routine runtime; without one, stored routines are not run (the LLM answers).
    pub routine_engine: Option<Arc<dyn RoutineEngine>>,
}

/// Errors that a node operation outside `handle` reports to its caller.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The store failed.
    #[error("store error: {0}")]
    Store(#[from] StoreError),
    /// A protocol document could not be resolved.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
}

/// Why a follow-up was not answered.
#[derive(Debug, thiserror::Error)]
pub enum FollowUpError {
    /// No such conversation, or it expired.
    #[error("conversation not found or expired")]
    NotFound,
}

/// An Agora node. Cloning is cheap.
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

struct Inner {
    config: NodeConfig,
    store: Store,
    resolver: Resolver,
    targets: TargetClient,
    accountant: Accountant,
    tools: ToolRegistry,
    clock: Arc<dyn Clock>,
    routines: Arc<RoutineTable>,
    programmer: ProgrammerQueue<ProtocolHash, Job<ProtocolHash>>,
    sender_routines: crate::sender::routine::SenderRoutines,
    /// Held by a driver to keep background routine writing for later (see
    /// [`Node::share_job_gate`]).
    job_gate: std::sync::OnceLock<Arc<tokio::sync::RwLock<()>>>,
    /// The last program that answered each protocol (code as action, see [`crate::acting`]),
    /// until a programmer job takes it as its first candidate; so it holds only protocols
    /// waiting for a job. In memory only; a hint, not data.
    programs: std::sync::Mutex<std::collections::HashMap<ProtocolHash, String>>,
    /// Each document's `idempotency_key_field`, once read (see `idempotency`).
    idempotency_fields: std::sync::Mutex<std::collections::HashMap<ProtocolHash, Option<String>>>,
    /// This process's name on the store's job leases (the node's name and a random id), so
    /// replicas sharing a store run each programmer job once (see `programming::work`).
    lease_holder: String,
    /// The sender for agents that do not speak Agora, if one is installed (see `foreign`).
    foreign: std::sync::OnceLock<Arc<dyn foreign::ForeignSender>>,
}

/// What answering produced, before bookkeeping.
struct Outcome {
    reply: Reply,
    path: RequestPath,
    conversation: Option<Conversation>,
    /// The routine that ran, if one did.
    routine_id: Option<i64>,
    /// The routine's error, if it failed.
    routine_error: Option<String>,
    /// The LLM's single-shot protocol answer, for the programmer's examples.
    example: Option<PendingExample>,
    /// The LLM-written routine that failed on this request, if one did.
    failed_llm_routine: Option<i64>,
    /// The full error behind a failure reply, for the log and the request ledger; the reply
    /// itself carries only a sentence the peer can act on.
    error_detail: Option<String>,
}

impl Outcome {
    fn new(reply: Reply, path: RequestPath) -> Self {
        Self {
            reply,
            path,
            conversation: None,
            routine_id: None,
            routine_error: None,
            example: None,
            failed_llm_routine: None,
            error_detail: None,
        }
    }

    fn failed(code: ErrorCode, error: impl Into<String>) -> Self {
        Self::new(Reply::failure(code, error), RequestPath::Failed)
    }

    /// A failure whose cause the peer must not read (an internal URL, an OS error, a tool's
    /// error): the peer gets `message` and the query id to quote, the log and the request
    /// ledger get `detail`.
    fn failed_privately(
        context: &QueryContext,
        code: ErrorCode,
        message: &str,
        detail: impl std::fmt::Display,
    ) -> Self {
        let detail = detail.to_string();
        tracing::warn!(error = %detail, "{message}");
        Self {
            error_detail: Some(detail),
            ..Self::failed(
                code,
                format!(
                    "{message} (query {}; the operator has the details)",
                    context.query_id
                ),
            )
        }
    }
}

impl Node {
    /// Assembles a node.
    pub fn new(parts: NodeParts) -> Self {
        let accountant = Accountant::new(
            parts.llm,
            parts.store.clone(),
            parts.prices,
            parts.config.name.clone(),
            parts.clock.clone(),
        );
        let resolver = Resolver::new(parts.store.clone(), parts.fetcher);
        let facts = crate::tools::NodeFacts {
            name: parts.config.name.clone(),
            url: parts.config.public_url.trim_end_matches('/').to_string(),
            description: parts.config.description.clone(),
            tools: Vec::new(),
            tasks: parts
                .config
                .tasks
                .iter()
                .map(|task| (task.name.clone(), task.description.clone()))
                .collect(),
        };
        // The routine table holds the tools, and `call_protocol` reaches the table: weakly.
        let engine = parts.routine_engine;
        let routines = Arc::new_cyclic(|table: &std::sync::Weak<RoutineTable>| {
            let tools = parts.tools.bind_node(crate::tools::NodeBinding {
                facts,
                store: parts.store.clone(),
                clock: parts.clock.clone(),
                routines: table.clone(),
            });
            RoutineTable::new(engine, tools)
        });
        let tools = routines.tools().clone();
        let lease_holder = format!("{}:{}", parts.config.name, uuid::Uuid::new_v4());
        Self {
            inner: Arc::new(Inner {
                config: parts.config,
                store: parts.store,
                resolver,
                targets: parts.targets,
                accountant,
                tools,
                clock: parts.clock,
                routines,
                programmer: ProgrammerQueue::new(),
                sender_routines: crate::sender::routine::SenderRoutines::new(),
                job_gate: std::sync::OnceLock::new(),
                programs: std::sync::Mutex::new(std::collections::HashMap::new()),
                idempotency_fields: std::sync::Mutex::new(std::collections::HashMap::new()),
                lease_holder,
                foreign: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Shares a gate with a driver: background routine writing (the programmer's and the sender
    /// routines' jobs) starts a job only while it can read-lock the gate, so a driver holding the
    /// write lock keeps jobs waiting. The network demo holds it during each query, so routines
    /// are written between queries and a run replays from a cassette in the same order. Without
    /// a gate jobs start at once. Returns false if the node already has one.
    pub fn share_job_gate(&self, gate: Arc<tokio::sync::RwLock<()>>) -> bool {
        self.inner.job_gate.set(gate).is_ok()
    }

    /// Waits until the job gate, if any, lets a background job start.
    pub(super) async fn job_permit(&self) -> Option<tokio::sync::OwnedRwLockReadGuard<()>> {
        match self.inner.job_gate.get() {
            Some(gate) => Some(gate.clone().read_owned().await),
            None => None,
        }
    }

    /// The node's configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.inner.config
    }

    /// The node's store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The node's tools.
    pub fn tools(&self) -> &ToolRegistry {
        &self.inner.tools
    }

    /// Answers one request. Never fails: errors become error replies.
    pub async fn handle(&self, request: Request) -> Reply {
        self.handle_from(request, None).await
    }

    /// Whether `request` names a protocol this node answers with an active routine, that is,
    /// most likely without its LLM (a failing routine may still fall back to it). The HTTP
    /// edge budgets requests by this.
    pub fn serves_with_routine(&self, request: &Request) -> bool {
        match request.protocol {
            ProtocolRef::Protocol(hash) => self.inner.routines.active(&hash).is_some(),
            _ => false,
        }
    }

    /// [`Node::handle`] for a request from `client`, recorded with it in the request ledger.
    pub async fn handle_from(&self, request: Request, client: Option<&crate::Client>) -> Reply {
        self.handle_hooked(request, client, RequestHooks::default())
            .await
    }

    /// [`Node::handle_from`] with the caller's `hooks`: an observer told every step (LLM and
    /// tool calls) as it happens, the id a multiround request's conversation opens under, and
    /// the channel (another protocol's front, e.g. `a2a`) recorded in the request ledger instead
    /// of the request's kind (`natural`, `negotiation`, `protocol`).
    pub async fn handle_hooked(
        &self,
        request: Request,
        client: Option<&crate::Client>,
        hooks: RequestHooks,
    ) -> Reply {
        let query_id = crate::accounting::new_query_id();
        let protocol_hash = match request.protocol {
            ProtocolRef::Protocol(hash) => Some(hash),
            _ => None,
        };
        let span = tracing::info_span!(
            "agora.node.handle",
            query_id = %query_id,
            // Formatted only if a subscriber records the span.
            protocol_hash = protocol_hash.map(tracing::field::display),
            path = tracing::field::Empty,
            routine = tracing::field::Empty,
        );
        async move {
            let started = Instant::now();
            let channel_override = hooks.channel;
            let context = QueryContext::new(query_id, protocol_hash)
                .with_client(client)
                .with_hooks(hooks);
            let channel = channel_override.unwrap_or(match request.protocol {
                ProtocolRef::NaturalLanguage => "natural",
                ProtocolRef::Negotiation => "negotiation",
                ProtocolRef::Protocol(_) => "protocol",
            });
            let outcome = match request.protocol {
                ProtocolRef::NaturalLanguage => self.answer_natural(&context, &request).await,
                ProtocolRef::Negotiation => self.open_negotiation(&context, &request).await,
                ProtocolRef::Protocol(hash) => self.answer_protocol(&context, &request, hash).await,
            };
            tracing::Span::current().record("path", path_name(outcome.path));
            let mut lesson = receiver_routines::Lesson {
                example: outcome.example.clone(),
                failed_llm_routine: outcome.failed_llm_routine,
            };
            let reply = self.finish(&context, channel, outcome, started).await;
            if reply.status != Status::Success {
                lesson.example = None;
            }
            if let Some(hash) = protocol_hash
                && (lesson.example.is_some() || lesson.failed_llm_routine.is_some())
            {
                self.learn(&context.query_id, hash, lesson).await;
            }
            reply
        }
        .instrument(span)
        .await
    }

    /// Answers a follow-up in a multiround conversation.
    pub async fn follow_up(&self, id: &str, follow_up: FollowUp) -> Result<Reply, FollowUpError> {
        self.follow_up_from(id, follow_up, None).await
    }

    /// [`Node::follow_up`] from `client`, recorded with it in the request ledger.
    pub async fn follow_up_from(
        &self,
        id: &str,
        follow_up: FollowUp,
        client: Option<&crate::Client>,
    ) -> Result<Reply, FollowUpError> {
        self.follow_up_hooked(id, follow_up, client, RequestHooks::default())
            .await
    }

    /// [`Node::follow_up_from`] with the caller's `hooks` (see [`Node::handle_hooked`]; the
    /// conversation id is the one followed up; the default channel is `follow_up`). A
    /// negotiation is continued only without a channel: another protocol's front holds no
    /// negotiations, so there it is [`FollowUpError::NotFound`].
    pub async fn follow_up_hooked(
        &self,
        id: &str,
        follow_up: FollowUp,
        client: Option<&crate::Client>,
        hooks: RequestHooks,
    ) -> Result<Reply, FollowUpError> {
        let now = self.inner.clock.now_ms();
        let stored = match self.inner.store.conversation(id).await {
            Ok(Some(c)) if c.expires_at_ms > now => c,
            Ok(_) => return Err(FollowUpError::NotFound),
            Err(error) => {
                tracing::error!(%error, "could not load a conversation");
                return Ok(Reply::failure(
                    ErrorCode::Internal,
                    "the node's store failed",
                ));
            }
        };
        let channel = hooks.channel;
        if stored.kind == ConversationKind::Negotiation {
            if channel.is_some() {
                return Err(FollowUpError::NotFound);
            }
            return Ok(self.continue_negotiation(stored, follow_up, client).await);
        }
        let channel = channel.unwrap_or("follow_up");
        let query_id = crate::accounting::new_query_id();
        let span = tracing::info_span!("agora.node.follow_up", query_id = %query_id, conversation_id = %id);
        async move {
            let started = Instant::now();
            let context = QueryContext::new(query_id, stored.protocol_hash)
                .with_client(client)
                .with_hooks(hooks);
            let document = match stored.protocol_hash {
                Some(hash) => match self.inner.store.document(&hash).await {
                    Ok(Some(d)) => Some(d.document),
                    _ => None,
                },
                None => None,
            };
            if stored.protocol_hash.is_some() && document.is_none() {
                let outcome = Outcome::failed(
                    ErrorCode::Internal,
                    "the conversation's protocol document is missing",
                );
                return Ok(self.finish(&context, channel, outcome, started).await);
            }
            let subject = document
                .as_ref()
                .map(Subject::Protocol)
                .unwrap_or(Subject::Natural);
            let history = conversation::decode(&stored.messages);
            let outcome = self
                .respond(&context, subject, &follow_up.body, history, Some(stored))
                .await;
            Ok(self.finish(&context, channel, outcome, started).await)
        }
        .instrument(span)
        .await
    }

    /// Ends a conversation. Unknown ids are not an error (`false`).
    pub async fn close_conversation(&self, id: &str) -> Result<bool, NodeError> {
        Ok(self.inner.store.delete_conversation(id).await?)
    }

    /// Deletes expired conversations; returns how many.
    pub async fn purge_expired_conversations(&self) -> Result<u64, NodeError> {
        let now = self.inner.clock.now_ms();
        Ok(self.inner.store.purge_expired_conversations(now).await?)
    }

    /// The protocols this node supports, with sources peers can fetch them from: those it
    /// allows, and those an active routine serves.
    pub async fn wellknown(&self) -> Result<WellKnown, NodeError> {
        let mut listing = WellKnown::new();
        for stored in crate::tools::node_info::served_documents(&self.inner.store).await? {
            let hash = stored.document.hash();
            let mut sources = vec![self.document_url(&hash)];
            sources.extend(stored.sources.into_iter().filter(|s| s.starts_with("http")));
            listing.insert(hash.to_hex(), sources);
        }
        Ok(listing)
    }

    /// Where this node serves a stored document.
    pub fn document_url(&self, hash: &ProtocolHash) -> String {
        format!(
            "{}/protocols/{}",
            self.inner.config.public_url.trim_end_matches('/'),
            hash.to_hex()
        )
    }

    /// Stores a document authored or vetted locally (e.g. `agora pd add`).
    pub async fn add_document(
        &self,
        text: &str,
        sources: &[String],
    ) -> Result<VerifiedDocument, NodeError> {
        let document = VerifiedDocument::from_text(text);
        self.inner
            .store
            .put_document(&document, sources, self.inner.clock.now_ms())
            .await?;
        Ok(document)
    }

    /// Records an operator decision on a protocol; it overrides the LLM's.
    pub async fn set_operator_decision(
        &self,
        hash: &ProtocolHash,
        allowed: bool,
        reason: &str,
    ) -> Result<(), NodeError> {
        let decision = Decision {
            allowed,
            origin: DecisionOrigin::Operator,
            reason: reason.to_string(),
            decided_at_ms: self.inner.clock.now_ms(),
        };
        Ok(self.inner.store.set_suitability(hash, &decision).await?)
    }

    async fn answer_protocol(
        &self,
        context: &QueryContext,
        request: &Request,
        hash: ProtocolHash,
    ) -> Outcome {
        // Routines are single-shot: a multiround request opens an LLM conversation instead.
        if !request.multiround
            && let Some(active) = self.inner.routines.active(&hash)
        {
            return self
                .answer_with_routine(context, request, hash, &active)
                .await;
        }
        let document = match self.resolve(request, hash).await {
            Ok(document) => document,
            Err(outcome) => return outcome,
        };
        match self.suitability(context, &document).await {
            Ok(decision) if decision.allowed => {
                self.answer(context, request, Some(&document)).await
            }
            Ok(decision) => {
                let hash_text = hash.to_dialect(request.hash_dialect);
                let mut message = format!("{hash_text} is not suitable for execution");
                if !decision.reason.is_empty() {
                    message.push_str(&format!(": {}", decision.reason));
                }
                Outcome::new(Reply::rejected(message), RequestPath::Rejected)
            }
            Err(outcome) => outcome,
        }
    }

    /// The request's protocol document, from the store or its sources, with the documents it
    /// references resolved too (see `resolver`): a request under a document whose references
    /// cannot be followed fails, saying which.
    async fn resolve(
        &self,
        request: &Request,
        hash: ProtocolHash,
    ) -> Result<VerifiedDocument, Outcome> {
        let now = self.inner.clock.now_ms();
        let resolver = &self.inner.resolver;
        let resolved = match resolver.resolve(&hash, &request.sources, now).await {
            Ok(document) => resolver.references(&document, now).await.map(|_| document),
            Err(error) => Err(error),
        };
        match resolved {
            Ok(document) => Ok(document),
            Err(ResolveError::Store(error)) => {
                tracing::error!(%error, "store failed while resolving");
                Err(Outcome::failed(
                    ErrorCode::Internal,
                    "the node's store failed",
                ))
            }
            Err(error) => Err(Outcome::failed(
                ErrorCode::ProtocolUnavailable,
                error.to_string(),
            )),
        }
    }

    /// The cached decision, or a new one from the configured mode.
    async fn suitability(
        &self,
        context: &QueryContext,
        document: &VerifiedDocument,
    ) -> Result<Decision, Outcome> {
        let hash = document.hash();
        match self.inner.store.suitability(&hash).await {
            Ok(Some(decision)) => return Ok(decision),
            Ok(None) => {}
            Err(error) => {
                tracing::error!(%error, "could not read a suitability decision");
                return Err(Outcome::failed(
                    ErrorCode::Internal,
                    "the node's store failed",
                ));
            }
        }
        let now = self.inner.clock.now_ms();
        let decision = match self.inner.config.suitability {
            SuitabilityMode::AllowAll => Decision {
                allowed: true,
                origin: DecisionOrigin::Operator,
                reason: "this node accepts every verified protocol".into(),
                decided_at_ms: now,
            },
            SuitabilityMode::OperatorOnly => {
                return Ok(Decision {
                    allowed: false,
                    origin: DecisionOrigin::Operator,
                    reason: "this node only serves protocols its operator allowed".into(),
                    decided_at_ms: now,
                });
            }
            SuitabilityMode::Llm => {
                let specs = self.inner.tools.specs();
                // Resolved with the document (see `resolve`): read from the store here.
                let references = self
                    .inner
                    .resolver
                    .references(document, now)
                    .await
                    .unwrap_or_default();
                let verdict = checker::check(
                    &self.inner.accountant,
                    context,
                    &self.inner.config.description,
                    &specs,
                    document,
                    &references,
                )
                .await
                .map_err(|error| {
                    Outcome::failed_privately(
                        context,
                        ErrorCode::HandlerFailed,
                        "this node could not decide whether it serves the protocol; retry later",
                        error,
                    )
                })?;
                tracing::info!(suitable = verdict.suitable, reason = %verdict.reason, "suitability decided");
                Decision {
                    allowed: verdict.suitable,
                    origin: DecisionOrigin::Llm,
                    reason: verdict.reason,
                    decided_at_ms: now,
                }
            }
        };
        if let Err(error) = self.inner.store.set_suitability(&hash, &decision).await {
            tracing::error!(%error, "could not store a suitability decision");
        }
        Ok(decision)
    }

    /// Answers with the LLM, opening a conversation if the request asks for one.
    async fn answer(
        &self,
        context: &QueryContext,
        request: &Request,
        document: Option<&VerifiedDocument>,
    ) -> Outcome {
        let subject = document.map(Subject::Protocol).unwrap_or(Subject::Natural);
        let opened = request.multiround.then(|| {
            let now = self.inner.clock.now_ms();
            Conversation {
                id: context
                    .hooks
                    .conversation_id
                    .clone()
                    .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                kind: if document.is_some() {
                    ConversationKind::Protocol
                } else {
                    ConversationKind::Natural
                },
                protocol_hash: document.map(VerifiedDocument::hash),
                messages: Value::Array(Vec::new()),
                created_at_ms: now,
                last_active_ms: now,
                expires_at_ms: now,
            }
        });
        self.respond(context, subject, &request.body, Vec::new(), opened)
            .await
    }

    async fn respond(
        &self,
        context: &QueryContext,
        subject: Subject<'_>,
        body: &Body,
        history: Vec<agora_llm::Message>,
        conversation: Option<Conversation>,
    ) -> Outcome {
        let focus = self.focus(subject);
        // The documents a protocol builds on were resolved with it; here they come from the store.
        let references = match subject {
            Subject::Protocol(document) => {
                let now = self.inner.clock.now_ms();
                match self.inner.resolver.references(document, now).await {
                    Ok(references) => references,
                    Err(error) => {
                        tracing::warn!(%error, "could not read a protocol's references");
                        Vec::new()
                    }
                }
            }
            Subject::Natural => Vec::new(),
        };
        let responder = Responder {
            accountant: &self.inner.accountant,
            tools: &self.inner.tools,
            config: &self.inner.config.responder,
            focus: &focus,
            references: &references,
        };
        let message = body.to_text();
        let acted = match subject {
            Subject::Protocol(document) if conversation.is_none() && history.is_empty() => {
                self.act(context, document, &focus, &message).await
            }
            Subject::Natural if history.is_empty() => {
                self.act_on_message(context, &focus, &message).await
            }
            _ => None,
        };
        let answer = match acted {
            Some(answer) => answer,
            None => match responder
                .respond(context, subject, &history, &message)
                .await
            {
                Ok(answer) => answer,
                Err(error) => {
                    return Outcome::failed_privately(
                        context,
                        ErrorCode::HandlerFailed,
                        "this node's language model or tools failed to answer; retry later",
                        error,
                    );
                }
            },
        };
        let reply_body = reply_body(body, answer.value);
        let reply_text = reply_body.to_text();
        let grounded = |document: &VerifiedDocument| {
            let sources =
                grounding::Sources::of(&message, &answer.tool_calls, document.text(), &focus);
            let reply = serde_json::from_str(&reply_text)
                .unwrap_or_else(|_| Value::String(reply_text.clone()));
            match grounding::ungrounded(&reply, &sources) {
                None => true,
                Some(reason) => {
                    tracing::info!(%reason, "the answer is not kept as an example");
                    false
                }
            }
        };
        let example = match subject {
            Subject::Protocol(document) if conversation.is_none() && grounded(document) => {
                Some(PendingExample {
                    body: message.clone(),
                    tool_calls: Value::Array(
                        answer
                            .tool_calls
                            .iter()
                            .map(|call| match &call.result {
                                Ok(result) => serde_json::json!({
                                    "tool": call.tool, "arguments": call.arguments, "result": result
                                }),
                                Err(error) => serde_json::json!({
                                    "tool": call.tool, "arguments": call.arguments, "error": error
                                }),
                            })
                            .collect(),
                    ),
                    reply: reply_text.clone(),
                })
            }
            _ => None,
        };
        let mut reply = Reply::success(reply_body.clone());
        let conversation = conversation.map(|mut c| {
            let now = self.inner.clock.now_ms();
            let ttl = self.inner.config.conversations.idle_timeout().as_millis() as i64;
            c.messages = conversation::append(
                history,
                &message,
                &reply_text,
                self.inner.config.conversations.max_messages,
            );
            c.last_active_ms = now;
            c.expires_at_ms = now + ttl;
            reply = reply
                .clone()
                .with_conversation(c.id.clone(), c.expires_at_ms / 1000);
            c
        });
        Outcome {
            conversation,
            example,
            ..Outcome::new(reply, RequestPath::Llm)
        }
    }

    /// Code as action (see [`crate::acting`]), when configured and the node has a routine
    /// engine: the answer of a program the LLM wrote, or `None` for the tool loop to answer.
    async fn act(
        &self,
        context: &QueryContext,
        document: &VerifiedDocument,
        focus: &Focus,
        body: &str,
    ) -> Option<crate::responder::Answer> {
        let actor = self.actor(focus, self.inner.config.responder.code_as_action)?;
        match actor.act(context, document, body).await {
            Ok(acted) => {
                if let Ok(mut programs) = self.inner.programs.lock() {
                    programs.insert(document.hash(), acted.source);
                }
                Some(acted.answer)
            }
            Err(error) => {
                tracing::info!(%error, "no program answered; the tool loop answers");
                None
            }
        }
    }

    /// Code as action on a natural-language message (`responder.natural_code_as_action`),
    /// when configured and the node has a routine engine: the answer of a program the LLM wrote
    /// for this message, or `None` for the tool loop to answer.
    async fn act_on_message(
        &self,
        context: &QueryContext,
        focus: &Focus,
        message: &str,
    ) -> Option<crate::responder::Answer> {
        let actor = self.actor(focus, self.inner.config.responder.natural_code_as_action)?;
        match actor.act_on_message(context, message).await {
            Ok(acted) => Some(acted.answer),
            Err(error) => {
                tracing::info!(%error, "no program answered the message; the tool loop answers");
                None
            }
        }
    }

    /// The actor for code as action on `focus`, when `on` and the node has a routine engine.
    fn actor<'a>(&'a self, focus: &'a Focus, on: bool) -> Option<crate::acting::Actor<'a>> {
        let engine = self.inner.routines.engine().filter(|_| on)?;
        Some(crate::acting::Actor {
            accountant: &self.inner.accountant,
            tools: &self.inner.tools,
            focus,
            engine: engine.as_ref(),
            limits: self.programmer_limits(),
            config: &self.inner.config.responder,
        })
    }

    /// Takes the last program that answered `hash`'s requests, if one did since the last job.
    pub(super) fn take_answering_program(&self, hash: &ProtocolHash) -> Option<String> {
        self.inner.programs.lock().ok()?.remove(hash)
    }

    /// The description and tools the LLM gets for `subject`: for a protocol, their focus on the
    /// protocol document (see [`crate::focus`]); for natural language, all of both.
    pub(super) fn focus(&self, subject: Subject<'_>) -> Focus {
        let description = &self.inner.config.description;
        let tools = self.inner.tools.specs();
        match subject {
            Subject::Natural => Focus::everything(description, tools),
            Subject::Protocol(document) => Focus::on(description, tools, document.text()),
        }
    }

    /// Records the request (and its conversation) and returns the reply.
    async fn finish(
        &self,
        context: &QueryContext,
        channel: &str,
        outcome: Outcome,
        started: Instant,
    ) -> Reply {
        let tally = context.tally();
        let record = RequestRecord {
            query_id: context.query_id.clone(),
            node: self.inner.config.name.clone(),
            protocol_hash: context.protocol_hash,
            channel: channel.to_string(),
            path: outcome.path,
            status: outcome.reply.status.as_str().to_string(),
            llm_calls: tally.calls,
            prompt_tokens: tally.prompt_tokens,
            completion_tokens: tally.completion_tokens,
            cost_usd: tally.cost_usd,
            latency_ms: started.elapsed().as_millis() as i64,
            created_at_ms: self.inner.clock.now_ms(),
            routine_id: outcome.routine_id,
            routine_error: outcome.routine_error.clone(),
            client: context.client.clone(),
            error_detail: outcome.error_detail.clone(),
        };
        // A request that made no LLM call and opened no conversation (a routine's answer, a
        // cached refusal) leaves nothing but this record: it is queued rather than waited for,
        // which keeps a busy routine-served protocol from paying a commit per request (see
        // `Store::record_request_buffered`). Everything else is durable before its reply.
        let recorded = if outcome.conversation.is_none() && record.llm_calls == 0 {
            self.inner.store.record_request_buffered(record).await
        } else {
            self.inner
                .store
                .record_request(&record, outcome.conversation.as_ref())
                .await
        };
        match recorded {
            Ok(()) => outcome.reply,
            Err(error) => {
                tracing::error!(%error, "could not record a request");
                if outcome.conversation.is_some() {
                    // The conversation was not saved, so its id would not work.
                    Reply::failure(ErrorCode::Internal, "the node's store failed")
                } else {
                    outcome.reply
                }
            }
        }
    }

    /// Asks the LLM through the node's accountant, which records the call under `category`.
    async fn chat(
        &self,
        category: Category,
        context: &QueryContext,
        request: &ChatRequest,
    ) -> Result<ChatResponse, LlmError> {
        self.inner.accountant.chat(category, context, request).await
    }
}

fn path_name(path: RequestPath) -> &'static str {
    match path {
        RequestPath::Llm => "llm",
        RequestPath::Routine => "routine",
        RequestPath::Fallback => "fallback",
        RequestPath::Rejected => "rejected",
        RequestPath::Failed => "failed",
    }
}

/// Shapes the answer like the request: text for text bodies, JSON for JSON bodies.
fn reply_body(request: &Body, answer: Value) -> Body {
    match (request, answer) {
        (Body::Json(_), Value::String(text)) => match serde_json::from_str::<Value>(&text) {
            Ok(value) if !value.is_string() => Body::Json(value),
            _ => Body::Text(text),
        },
        (Body::Json(_), value) => Body::Json(value),
        (Body::Text(_), Value::String(text)) => Body::Text(text),
        (Body::Text(_), value) => Body::Text(value.to_string()),
    }
}
