//! The receiver: a request from its envelope to its reply and its row in the ledger, and the
//! follow-ups of its conversations.
//!
//! The request path is: run the protocol's active routine if it has one (no LLM at all; see
//! `dispatch`), otherwise resolve the protocol document (store, then sources), decide
//! suitability (operator policy, cached decision, or the LLM checker) and answer (code as
//! action, then the LLM responder with tools); then record the request, its usage counters,
//! its routine run and its conversation in one store transaction, and hand what it taught to
//! the programmer.
//!
//! Architecture invariant: `handle` never fails with an error. Every outcome, including store
//! and LLM failures, becomes a [`Reply`] in the protocol's error shape, and every request leaves
//! one row in the request ledger.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use agora_protocol::{
    Body, ErrorCode, FollowUp, ProtocolHash, ProtocolRef, Reply, Request, Status, VerifiedDocument,
};
use agora_store::{
    Conversation, ConversationKind, Decision, DecisionOrigin, RequestPath, RequestRecord,
};
use agora_telemetry::conventions as conv;
use serde_json::Value;
use tracing::Instrument;

use super::core::Core;
use super::core::FollowUpError;
use super::programming::FailedRoutine;
use super::programming::{Lesson, Programmer};

use crate::accounting::QueryContext;
use crate::checker;
use crate::config::SuitabilityMode;
use crate::conversation;
use crate::focus::Focus;
use crate::observer::RequestHooks;
use crate::programmer::{PendingExample, grounding};
use crate::resolver::ResolveError;
use crate::responder::{Responder, Subject};
use crate::tools::ToolRegistry;

/// A request's protocol document and the documents it builds on, resolved once per request and
/// passed to every step that reads them (suitability, answering).
pub(super) struct Resolved {
    pub(super) document: VerifiedDocument,
    pub(super) references: Vec<VerifiedDocument>,
}

/// The receiving role of a node. Cloning is cheap.
#[derive(Clone)]
pub(crate) struct Receiver {
    pub(super) core: Arc<Core>,
    pub(super) programmer: Programmer,
    /// Each document's `idempotency_key_field`, once read (see `idempotency`).
    pub(super) idempotency_fields: Arc<IdempotencyFields>,
    /// Shadow checks of the routines' answers (see `shadow`).
    pub(super) shadows: Arc<crate::shadow::Shadows>,
}

/// Each document's `idempotency_key_field`, once read.
pub(super) type IdempotencyFields = Mutex<HashMap<ProtocolHash, Option<String>>>;

/// The LLM's answer, and the program that gave it when code as action answered a protocol.
pub(super) struct Answered {
    pub(super) answer: crate::responder::Answer,
    pub(super) program: Option<String>,
}

/// What the LLM is asked to answer: a request under a protocol or in natural language, with what
/// came before it.
pub(super) struct Question<'a> {
    pub(super) subject: Subject<'a>,
    /// The protocol's references, resolved with it.
    pub(super) references: &'a [VerifiedDocument],
    pub(super) focus: &'a Focus,
    /// The conversation's earlier messages.
    pub(super) history: &'a [agora_llm::Message],
    pub(super) in_conversation: bool,
    /// The request's body as text.
    pub(super) message: &'a str,
}

/// What answering produced, before bookkeeping.
pub(super) struct Outcome {
    pub(super) reply: Reply,
    pub(super) path: RequestPath,
    pub(super) conversation: Option<Conversation>,
    /// The routine that ran, if one did.
    pub(super) routine_id: Option<i64>,
    /// The routine's error, if it failed.
    pub(super) routine_error: Option<String>,
    /// The LLM's single-shot protocol answer, for the programmer's examples.
    pub(super) example: Option<PendingExample>,
    /// The routine the node wrote (the LLM or the compiler) that failed on this request, if one
    /// did.
    pub(super) failed_routine: Option<FailedRoutine>,
    /// The full error behind a failure reply, for the log and the request ledger; the reply
    /// itself carries only a sentence the peer can act on.
    pub(super) error_detail: Option<String>,
}

impl Outcome {
    pub(super) fn new(reply: Reply, path: RequestPath) -> Self {
        Self {
            reply,
            path,
            conversation: None,
            routine_id: None,
            routine_error: None,
            example: None,
            failed_routine: None,
            error_detail: None,
        }
    }

    pub(super) fn failed(code: ErrorCode, error: impl Into<String>) -> Self {
        Self::new(Reply::failure(code, error), RequestPath::Failed)
    }

    /// A failure whose cause the peer must not read (an internal URL, an OS error, a tool's
    /// error): the peer gets `message` and the query id to quote, the log and the request
    /// ledger get `detail`.
    pub(super) fn failed_privately(
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

impl Receiver {
    /// Answers `request` from `client` with the caller's `hooks`: an observer told every step (LLM
    /// and tool calls) as it happens, the id a multiround request's conversation opens under, and
    /// the channel (another protocol's front, e.g. `a2a`) recorded in the request ledger instead of
    /// the request's kind (`natural`, `negotiation`, `protocol`).
    pub(crate) async fn handle_hooked(
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
            { conv::OTEL_NAME } = conv::invoke_agent_name(&self.core.config.name),
            { conv::OPERATION_NAME } = conv::INVOKE_AGENT,
            { conv::AGENT_NAME } = %self.core.config.name,
            query_id = %query_id,
            // Formatted only if a subscriber records the span.
            { conv::PROTOCOL_HASH } = protocol_hash.map(tracing::field::display),
            { conv::PATH } = tracing::field::Empty,
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
            tracing::Span::current().record(conv::PATH, path_name(outcome.path));
            let mut lesson = Lesson {
                example: outcome.example.clone(),
                failed_routine: outcome.failed_routine,
            };
            let reply = self.finish(&context, channel, outcome, started).await;
            if reply.status != Status::Success {
                lesson.example = None;
            }
            if let Some(hash) = protocol_hash
                && (lesson.example.is_some() || lesson.failed_routine.is_some())
            {
                self.programmer.learn(&context.query_id, hash, lesson).await;
            }
            reply
        }
        .instrument(span)
        .await
    }

    /// Answers a follow-up from `client` with the caller's `hooks` (see [`Node::handle_hooked`];
    /// the conversation id is the one followed up; the default channel is `follow_up`). A
    /// negotiation is continued only without a channel: another protocol's front holds no
    /// negotiations, so there it is [`FollowUpError::NotFound`].
    pub(crate) async fn follow_up_hooked(
        &self,
        id: &str,
        follow_up: FollowUp,
        client: Option<&crate::Client>,
        hooks: RequestHooks,
    ) -> Result<Reply, FollowUpError> {
        let now = self.core.clock.now_ms();
        let stored = match self.core.store.conversation(id).await {
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
        let span = tracing::info_span!(
            "agora.node.follow_up",
            { conv::OTEL_NAME } = conv::invoke_agent_name(&self.core.config.name),
            { conv::OPERATION_NAME } = conv::INVOKE_AGENT,
            { conv::AGENT_NAME } = %self.core.config.name,
            { conv::CONVERSATION_ID } = %id,
            { conv::PROTOCOL_HASH } = stored.protocol_hash.map(tracing::field::display),
            query_id = %query_id,
        );
        async move {
            let started = Instant::now();
            let context = QueryContext::new(query_id, stored.protocol_hash)
                .with_client(client)
                .with_hooks(hooks);
            let document = match stored.protocol_hash {
                Some(hash) => match self.core.store.document(&hash).await {
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
            let references = match &document {
                Some(document) => self.stored_references(document).await,
                None => Vec::new(),
            };
            let subject = document
                .as_ref()
                .map(Subject::Protocol)
                .unwrap_or(Subject::Natural);
            let history = conversation::decode(&stored.messages);
            let outcome = self
                .respond(
                    &context,
                    subject,
                    &references,
                    &follow_up.body,
                    history,
                    Some(stored),
                )
                .await;
            Ok(self.finish(&context, channel, outcome, started).await)
        }
        .instrument(span)
        .await
    }

    async fn answer_protocol(
        &self,
        context: &QueryContext,
        request: &Request,
        hash: ProtocolHash,
    ) -> Outcome {
        // Routines are single-shot: a multiround request opens an LLM conversation instead.
        if !request.multiround
            && let Some(active) = self.core.routines.active(&hash)
        {
            return self
                .answer_with_routine(context, request, hash, &active)
                .await;
        }
        let resolved = match self.resolve(request, hash).await {
            Ok(resolved) => resolved,
            Err(outcome) => return outcome,
        };
        match self.suitability(context, &resolved).await {
            Ok(decision) if decision.allowed => {
                self.answer(context, request, Some(&resolved)).await
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

    /// The documents a stored protocol document builds on, from the store (a follow-up's: they
    /// were resolved with the conversation's first request).
    async fn stored_references(&self, document: &VerifiedDocument) -> Vec<VerifiedDocument> {
        let now = self.core.clock.now_ms();
        match self.core.resolver.references(document, now).await {
            Ok(references) => references,
            Err(error) => {
                tracing::warn!(%error, "could not read a protocol's references");
                Vec::new()
            }
        }
    }

    /// The request's protocol document, from the store or its sources, with the documents it
    /// references resolved too (see `resolver`), once per request: a request under a document
    /// whose references cannot be followed fails, saying which.
    pub(super) async fn resolve(
        &self,
        request: &Request,
        hash: ProtocolHash,
    ) -> Result<Resolved, Outcome> {
        let now = self.core.clock.now_ms();
        let resolver = &self.core.resolver;
        let resolved = match resolver.resolve(&hash, &request.sources, now).await {
            Ok(document) => resolver
                .references(&document, now)
                .await
                .map(|references| Resolved {
                    document,
                    references,
                }),
            Err(error) => Err(error),
        };
        match resolved {
            Ok(resolved) => Ok(resolved),
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
        resolved: &Resolved,
    ) -> Result<Decision, Outcome> {
        let document = &resolved.document;
        let hash = document.hash();
        match self.core.store.suitability(&hash).await {
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
        let now = self.core.clock.now_ms();
        let decision = match self.core.config.suitability {
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
                let specs = self.core.tools.specs();
                let verdict = checker::check(
                    &self.core.accountant,
                    context,
                    &self.core.config.description,
                    &specs,
                    document,
                    &resolved.references,
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
        if let Err(error) = self.core.store.set_suitability(&hash, &decision).await {
            tracing::error!(%error, "could not store a suitability decision");
        }
        Ok(decision)
    }

    /// Answers with the LLM, opening a conversation if the request asks for one.
    pub(super) async fn answer(
        &self,
        context: &QueryContext,
        request: &Request,
        resolved: Option<&Resolved>,
    ) -> Outcome {
        let document = resolved.map(|r| &r.document);
        let references = resolved
            .map(|r| r.references.as_slice())
            .unwrap_or_default();
        let subject = document.map(Subject::Protocol).unwrap_or(Subject::Natural);
        let opened = request.multiround.then(|| {
            let now = self.core.clock.now_ms();
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
        self.respond(
            context,
            subject,
            references,
            &request.body,
            Vec::new(),
            opened,
        )
        .await
    }

    async fn respond(
        &self,
        context: &QueryContext,
        subject: Subject<'_>,
        references: &[VerifiedDocument],
        body: &Body,
        history: Vec<agora_llm::Message>,
        conversation: Option<Conversation>,
    ) -> Outcome {
        let focus = self.core.focus(subject);
        let message = body.to_text();
        let answer = match self
            .llm_answer(
                context,
                &Question {
                    subject,
                    references,
                    focus: &focus,
                    history: &history,
                    in_conversation: conversation.is_some(),
                    message: &message,
                },
                &self.core.tools,
            )
            .await
        {
            Ok(answered) => {
                if let (Subject::Protocol(document), Some(source)) = (subject, answered.program)
                    && let Ok(mut programs) = self.programmer.state.programs.lock()
                {
                    programs.insert(document.hash(), source);
                }
                answered.answer
            }
            Err(error) => {
                return Outcome::failed_privately(
                    context,
                    ErrorCode::HandlerFailed,
                    "this node's language model or tools failed to answer; retry later",
                    error,
                );
            }
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
                    tool_calls: tool_calls_json(&answer.tool_calls),
                    reply: reply_text.clone(),
                })
            }
            _ => None,
        };
        let mut reply = Reply::success(reply_body.clone());
        let conversation = conversation.map(|mut c| {
            let now = self.core.clock.now_ms();
            let ttl = self.core.config.conversations.idle_timeout().as_millis() as i64;
            c.messages = conversation::append(
                history,
                &message,
                &reply_text,
                self.core.config.conversations.max_messages,
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

    /// The LLM's answer to `message` with `tools`: code as action on a protocol's first message
    /// outside a conversation (see [`crate::acting`]), when configured and the node has a
    /// routine engine; otherwise, or when no program answered, the tool loop (see
    /// [`crate::responder`]). `in_conversation`: the request opened or continues one.
    pub(super) async fn llm_answer(
        &self,
        context: &QueryContext,
        question: &Question<'_>,
        tools: &ToolRegistry,
    ) -> Result<Answered, crate::responder::RespondError> {
        let Question {
            subject,
            references,
            focus,
            history,
            in_conversation,
            message,
        } = *question;
        let config = &self.core.config.responder;
        if let Subject::Protocol(document) = subject
            && !in_conversation
            && history.is_empty()
            && let Some(actor) = self.actor(focus, tools, config.code_as_action)
            && self.acting_pays(document).await
        {
            let failures = acting_failures(document);
            match actor.act(context, document, message).await {
                Ok(acted) => {
                    if let Err(error) = self.core.store.reset_counter(&failures).await {
                        tracing::warn!(%error, "could not reset the code-as-action failures");
                    }
                    return Ok(Answered {
                        answer: acted.answer,
                        program: Some(acted.source),
                    });
                }
                Err(error) => {
                    tracing::info!(%error, "no program answered; the tool loop answers");
                    if let Err(error) = self.core.store.bump_counter(&failures).await {
                        tracing::warn!(%error, "could not count a code-as-action failure");
                    }
                }
            }
        }
        let responder = Responder {
            accountant: &self.core.accountant,
            tools,
            config,
            focus,
            references,
        };
        let answer = responder
            .respond(context, subject, history, message)
            .await?;
        Ok(Answered {
            answer,
            program: None,
        })
    }

    /// Whether code as action is still worth its calls for the protocol: not after it failed on
    /// the protocol's last [`MAX_ACTING_FAILURES`] requests in a row (the small model writes the
    /// same wrong program again, about a third of such a request's calls); counting starts anew
    /// when a routine is stored for the protocol. A new version of a document is another
    /// protocol, with a count of its own.
    async fn acting_pays(&self, document: &VerifiedDocument) -> bool {
        match self.core.store.counter(&acting_failures(document)).await {
            Ok(failures) => failures < MAX_ACTING_FAILURES,
            Err(error) => {
                tracing::warn!(%error, "could not read the code-as-action failures");
                true
            }
        }
    }

    /// The actor for code as action on `focus` with `tools`, when `on` and the node has a
    /// routine engine.
    fn actor<'a>(
        &'a self,
        focus: &'a Focus,
        tools: &'a ToolRegistry,
        on: bool,
    ) -> Option<crate::acting::Actor<'a>> {
        let engine = self.core.routines.engine().filter(|_| on)?;
        Some(crate::acting::Actor {
            accountant: &self.core.accountant,
            tools,
            focus,
            engine: engine.as_ref(),
            limits: self.core.programmer_limits(),
            config: &self.core.config.responder,
        })
    }

    /// Records the request (and its conversation) and returns the reply.
    pub(super) async fn finish(
        &self,
        context: &QueryContext,
        channel: &str,
        outcome: Outcome,
        started: Instant,
    ) -> Reply {
        let tally = context.tally();
        let record = RequestRecord {
            query_id: context.query_id.clone(),
            node: self.core.config.name.clone(),
            protocol_hash: context.protocol_hash,
            channel: channel.to_string(),
            path: outcome.path,
            status: outcome.reply.status.as_str().to_string(),
            llm_calls: tally.calls,
            prompt_tokens: tally.prompt_tokens,
            completion_tokens: tally.completion_tokens,
            cost_usd: tally.cost_usd,
            latency_ms: started.elapsed().as_millis() as i64,
            created_at_ms: self.core.clock.now_ms(),
            routine_id: outcome.routine_id,
            routine_error: outcome.routine_error.clone(),
            client: context.client.clone(),
            error_detail: outcome.error_detail.clone(),
        };
        // A request that made no LLM call and opened no conversation (a routine's answer, a
        // cached refusal) leaves nothing but this record: it is queued rather than waited for,
        // which keeps a busy routine-served protocol from paying a commit per request (see
        // `Store::requests().record_request_buffered`). Everything else is durable before its reply.
        let recorded = if outcome.conversation.is_none() && record.llm_calls == 0 {
            self.core
                .store
                .requests()
                .record_request_buffered(record)
                .await
        } else {
            self.core
                .store
                .requests()
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
}

/// Failures of code as action in a row after which a protocol goes straight to the tool loop.
const MAX_ACTING_FAILURES: i64 = 3;

/// The store's counter of `document`'s code-as-action failures in a row.
pub(super) fn acting_failures(document: &VerifiedDocument) -> String {
    acting_failures_of(&document.hash())
}

/// [`acting_failures`] by hash.
pub(super) fn acting_failures_of(hash: &agora_protocol::ProtocolHash) -> String {
    format!("acting_failures:{hash}")
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

/// Tool calls as the store keeps them with an example: `tool`, `arguments`, and `result` or
/// `error`.
pub(super) fn tool_calls_json(calls: &[crate::tools::ToolCall]) -> Value {
    Value::Array(
        calls
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
    )
}

/// Shapes the answer like the request: text for text bodies, JSON for JSON bodies.
pub(super) fn reply_body(request: &Body, answer: Value) -> Body {
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
