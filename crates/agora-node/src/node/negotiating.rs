//! Negotiation on both sides: [`Sender::negotiate`] and the `negotiation` channel in
//! `handle` and `follow_up` (receiver), plus the receiver's request for negotiations in its
//! natural-language replies. The parts that know nothing of the node are in
//! [`crate::negotiation`].
//!
//! Receiver side: a negotiation is a conversation of kind `negotiation` whose stored history is
//! the receiver LLM's (sender messages as user turns, its own answers as assistant turns). Each
//! sender message is one LLM turn, up to `max_rounds`; a final-protocol message is not: it is
//! verified, checked, stored and allowed without the LLM, and answered with the stored hash.

use std::time::{Duration, Instant};

use agora_llm::{ChatRequest, Message};
use agora_protocol::negotiation::{FinalProtocol, FinalProtocolError, Registration};
use agora_protocol::{Body, ErrorCode, FollowUp, Reply, Request, Status, VerifiedDocument};
use agora_store::{Conversation, ConversationKind, Decision, DecisionOrigin, RequestPath};
use serde_json::Value;
use tracing::Instrument;

use super::ladder::Sender;
use super::receiver::{Outcome, Receiver};
use crate::accounting::{Category, QueryContext};
use crate::conversation;
use crate::negotiation::channel::Channel;
use crate::negotiation::{
    NATURAL_SINCE_NEGOTIATION, Negotiated, NegotiationError, asks_to_negotiate, check_document,
    compose_document, parse_receiver_turn, parse_sender_turn, prompt,
};
use crate::sender::fit;
use crate::task::Task;

impl Receiver {
    /// A natural-language request, answered as usual; its reply asks the sender to negotiate
    /// once enough natural-language conversations have gone by.
    pub(super) async fn answer_natural(
        &self,
        context: &QueryContext,
        request: &Request,
    ) -> Outcome {
        let mut outcome = self.answer(context, request, None).await;
        let threshold = self.core.config.negotiation.receiver_threshold;
        if outcome.reply.status != Status::Success || threshold == 0 {
            return outcome;
        }
        match self
            .core
            .store
            .bump_counter(NATURAL_SINCE_NEGOTIATION)
            .await
        {
            Ok(count) if asks_to_negotiate(count, threshold) => {
                outcome.reply = outcome.reply.with_negotiation_request();
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "could not count a natural-language conversation")
            }
        }
        outcome
    }

    /// The first message of a negotiation (`protocolHash: "negotiation"`).
    pub(super) async fn open_negotiation(
        &self,
        context: &QueryContext,
        request: &Request,
    ) -> Outcome {
        let message = request.body.to_text();
        if FinalProtocol::from_body(&message).is_some() {
            return Outcome::failed(
                ErrorCode::BadRequest,
                "a final protocol can only close a negotiation this node took part in",
            );
        }
        let now = self.core.clock.now_ms();
        let conversation = Conversation {
            id: uuid::Uuid::new_v4().to_string(),
            kind: ConversationKind::Negotiation,
            protocol_hash: None,
            messages: Value::Array(Vec::new()),
            created_at_ms: now,
            last_active_ms: now,
            expires_at_ms: now,
        };
        self.negotiation_turn(context, conversation, Vec::new(), &message)
            .await
    }

    /// A later message of a negotiation: one more turn, or the final protocol.
    pub(super) async fn continue_negotiation(
        &self,
        stored: Conversation,
        follow_up: FollowUp,
        client: Option<&crate::Client>,
    ) -> Reply {
        let query_id = crate::accounting::new_query_id();
        let span = tracing::info_span!("agora.node.negotiation", query_id = %query_id, conversation_id = %stored.id);
        async move {
            let started = Instant::now();
            let context = QueryContext::new(query_id, None).with_client(client);
            let history = conversation::decode(&stored.messages);
            let message = follow_up.body.to_text();
            let outcome = match FinalProtocol::from_body(&message) {
                Some(result) => self.register_final(stored, history, &message, result).await,
                None => {
                    let rounds = history
                        .iter()
                        .filter(|m| m.role == agora_llm::Role::Assistant)
                        .count();
                    // The stored history is capped, so the count can never pass half the cap.
                    let max_rounds = (self.core.config.negotiation.max_rounds as usize)
                        .min(self.core.config.conversations.max_messages / 2);
                    if rounds >= max_rounds {
                        Outcome::failed(
                            ErrorCode::BadRequest,
                            format!("this negotiation has used all its {max_rounds} rounds"),
                        )
                    } else {
                        self.negotiation_turn(&context, stored, history, &message)
                            .await
                    }
                }
            };
            self.finish(&context, "negotiation", outcome, started).await
        }
        .instrument(span)
        .await
    }

    /// One receiver turn: the LLM answers the sender's message.
    async fn negotiation_turn(
        &self,
        context: &QueryContext,
        conversation: Conversation,
        history: Vec<Message>,
        message: &str,
    ) -> Outcome {
        let config = &self.core.config.negotiation;
        let mut messages = vec![prompt::receiver_system(
            &self.core.config.description,
            &self.core.tools.specs(),
        )];
        messages.extend(history.iter().cloned());
        messages.push(Message::user(message.to_string()));
        let request = ChatRequest::new(messages)
            .json_schema("negotiation_reply", prompt::receiver_schema())
            .max_tokens(config.max_receiver_tokens);
        let turn = match self
            .core
            .chat(Category::Negotiation, context, &request)
            .await
        {
            Ok(response) => match parse_receiver_turn(&response.content) {
                Ok(turn) => turn,
                Err(error) => {
                    tracing::warn!(%error, "the negotiator gave an unreadable turn");
                    return Outcome::failed(
                        ErrorCode::HandlerFailed,
                        format!("the negotiator gave an unreadable answer: {error}"),
                    );
                }
            },
            Err(error) => {
                return Outcome::failed_privately(
                    context,
                    ErrorCode::HandlerFailed,
                    "this node's language model failed to negotiate; retry later",
                    error,
                );
            }
        };
        // An explicit word of agreement helps the sender's model to close.
        let text = prompt::receiver_text(turn.agrees, &turn.message);
        self.negotiation_reply(conversation, history, message, text, RequestPath::Llm)
    }

    /// Stores and allows the final protocol, and confirms its hash.
    async fn register_final(
        &self,
        conversation: Conversation,
        history: Vec<Message>,
        message: &str,
        result: Result<FinalProtocol, FinalProtocolError>,
    ) -> Outcome {
        let document = match result {
            Ok(final_protocol) => final_protocol.document,
            Err(error) => return Outcome::failed(ErrorCode::BadRequest, error.to_string()),
        };
        if history.is_empty() {
            return Outcome::failed(
                ErrorCode::BadRequest,
                "a final protocol needs at least one negotiation turn first",
            );
        }
        if let Err(reason) = check_document(&document) {
            return Outcome::failed(
                ErrorCode::BadRequest,
                format!("the final protocol document is malformed: {reason}"),
            );
        }
        let now = self.core.clock.now_ms();
        let hash = document.hash();
        let decision = Decision {
            allowed: true,
            origin: DecisionOrigin::Llm,
            reason: format!("agreed in negotiation {}", conversation.id),
            decided_at_ms: now,
        };
        let stored = async {
            self.core.store.put_document(&document, &[], now).await?;
            self.core.store.set_suitability(&hash, &decision).await
        };
        if let Err(error) = stored.await {
            tracing::error!(%error, "could not register a negotiated protocol");
            return Outcome::failed(ErrorCode::Internal, "the node's store failed");
        }
        if let Err(error) = self
            .core
            .store
            .reset_counter(NATURAL_SINCE_NEGOTIATION)
            .await
        {
            tracing::warn!(%error, "could not restart the count of natural-language conversations");
        }
        tracing::info!(protocol_hash = %hash, "registered a negotiated protocol");
        let body = Registration {
            protocol_hash: hash,
        }
        .to_body();
        self.negotiation_reply(conversation, history, message, body, RequestPath::Llm)
    }

    /// The reply, with the conversation's history and expiry brought up to date.
    fn negotiation_reply(
        &self,
        mut conversation: Conversation,
        history: Vec<Message>,
        message: &str,
        text: String,
        path: RequestPath,
    ) -> Outcome {
        let now = self.core.clock.now_ms();
        let ttl = self.core.config.conversations.idle_timeout().as_millis() as i64;
        conversation.messages = conversation::append(
            history,
            message,
            &text,
            self.core.config.conversations.max_messages,
        );
        conversation.last_active_ms = now;
        conversation.expires_at_ms = now + ttl;
        let reply = Reply::success(Body::Text(text))
            .with_conversation(conversation.id.clone(), conversation.expires_at_ms / 1000);
        Outcome {
            conversation: Some(conversation),
            ..Outcome::new(reply, path)
        }
    }
}

impl Sender {
    /// Negotiates a protocol for `task` with the receiver at `target` (its base URL) and
    /// stores the agreed document. See [`crate::negotiation`].
    pub(crate) async fn negotiate(
        &self,
        target: &str,
        task: &Task,
    ) -> Result<Negotiated, NegotiationError> {
        let query_id = crate::accounting::new_query_id();
        let span = tracing::info_span!("agora.node.negotiate", query_id = %query_id, target = %target, task = %task.name);
        async move {
            let context = QueryContext::new(query_id, None);
            let sender = &self.core.config.sender;
            let mut channel = Channel::new(
                self.core.targets.clone(),
                target,
                Duration::from_secs(sender.timeout_secs),
                sender.max_reply_bytes,
            );
            let result = self.negotiate_over(&context, &mut channel, task).await;
            channel.close().await;
            match &result {
                Ok(negotiated) => tracing::info!(
                    protocol_hash = %negotiated.document.hash(),
                    rounds = negotiated.rounds,
                    registered_by_receiver = negotiated.registered_by_receiver,
                    "negotiated a protocol"
                ),
                Err(error) => tracing::warn!(%error, "negotiation failed"),
            }
            result
        }
        .instrument(span)
        .await
    }

    async fn negotiate_over(
        &self,
        context: &QueryContext,
        channel: &mut Channel,
        task: &Task,
    ) -> Result<Negotiated, NegotiationError> {
        let config = &self.core.config.negotiation;
        let mut messages = prompt::sender_opening(task);
        let mut receiver_answered = false;
        for round in 1..=config.max_rounds {
            let schema = if receiver_answered {
                prompt::sender_schema()
            } else {
                prompt::sender_opening_schema()
            };
            let request = ChatRequest::new(messages.clone())
                .json_schema("negotiation_turn", schema)
                .max_tokens(config.max_sender_tokens);
            let response = self
                .core
                .chat(Category::Negotiation, context, &request)
                .await?;
            let turn =
                parse_sender_turn(&response.content).map_err(NegotiationError::Unreadable)?;
            messages.push(Message::assistant(response.content.clone()));
            let outgoing = match turn.final_protocol {
                Some(draft) if receiver_answered => {
                    let document =
                        compose_document(&draft).map_err(NegotiationError::MalformedProtocol)?;
                    // A document that cannot carry the task is never adopted.
                    let missing = fit::missing_fields(task, document.text());
                    if !missing.is_empty() {
                        return Err(NegotiationError::MalformedProtocol(format!(
                            "it does not name the task's fields {}",
                            missing.join(", ")
                        )));
                    }
                    return self.conclude(channel, document, round).await;
                }
                // A final protocol before the receiver said anything is only a proposal.
                Some(draft) => prompt::proposal_with_draft(&turn.message, &draft.document),
                None => turn.message,
            };
            let answer = channel.send(&outgoing).await?;
            receiver_answered = true;
            messages.push(Message::user(prompt::receiver_said(&answer)));
        }
        Err(NegotiationError::RoundLimit {
            rounds: config.max_rounds,
        })
    }

    /// Tells the receiver the final document, checks its confirmation and stores the document.
    async fn conclude(
        &self,
        channel: &mut Channel,
        document: VerifiedDocument,
        rounds: u32,
    ) -> Result<Negotiated, NegotiationError> {
        let answer = channel.send(&FinalProtocol::to_body(&document)).await?;
        let registered_by_receiver = match Registration::from_body(&answer) {
            Some(registration) if registration.protocol_hash == document.hash() => true,
            Some(registration) => {
                return Err(NegotiationError::HashMismatch {
                    ours: document.hash(),
                    theirs: registration.protocol_hash,
                });
            }
            None => false,
        };
        self.core
            .store
            .put_document(&document, &[], self.core.clock.now_ms())
            .await?;
        Ok(Negotiated {
            document,
            rounds,
            registered_by_receiver,
        })
    }
}
