//! Asking other agents things outside a task: a plain natural-language message, a message the
//! caller composed under a protocol, a target's `/.wellknown` listing, a protocol database
//! search.
//!
//! These are the node's outward doors for callers that are not tasks, such as the MCP front
//! (`agora-mcp`), or a program that speaks a protocol's message format itself (the seed protocols'
//! tests send their messages this way). None of them calls this node's LLM; each is logged as a
//! sender run (task `(message)`, `(wellknown)` or `(search)`) so that `agora stats` shows it beside
//! the tasks.

use std::time::Duration;

use agora_protocol::{ProtocolHash, VerifiedDocument};
use agora_store::SenderRun;
use agora_telemetry::conventions as conv;
use serde_json::Value;
use tracing::Instrument as _;

use super::ladder::MAX_LISTING_BYTES;
use super::ladder::Sender;
use crate::sender::{self, Answer, SendError};

/// A target's answer to a natural-language message.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageReply {
    /// The reply body, as text.
    pub body: String,
    /// The target asked to negotiate a protocol (`negotiationRequested`).
    pub negotiation_requested: bool,
}

impl Sender {
    /// Sends `message` to the Agora endpoint `target` as a natural-language request and returns
    /// the reply's body. A `rejected` or `failure` reply is an error with the target's message.
    pub(crate) async fn send_message(
        &self,
        target: &str,
        message: &str,
    ) -> Result<MessageReply, SendError> {
        self.post_message(target, None, &[], message).await
    }

    /// Sends `body`, a message the caller composed under `protocol`, to the Agora endpoint
    /// `target`, with the `sources` it can fetch the document from, and returns the reply's
    /// body as it came. No LLM writes or reads anything: the caller speaks the protocol. A
    /// `rejected` or `failure` reply is an error with the target's message.
    pub(crate) async fn send_protocol_message(
        &self,
        target: &str,
        protocol: &VerifiedDocument,
        sources: &[String],
        body: &str,
    ) -> Result<MessageReply, SendError> {
        self.post_message(target, Some(protocol), sources, body)
            .await
    }

    async fn post_message(
        &self,
        target: &str,
        protocol: Option<&VerifiedDocument>,
        sources: &[String],
        message: &str,
    ) -> Result<MessageReply, SendError> {
        let envelope = sender::envelope(protocol, sources, message);
        let span = tracing::info_span!(
            "agora.node.post_message",
            { conv::OTEL_NAME } = conv::INVOKE_AGENT,
            { conv::OTEL_KIND } = "client",
            { conv::OPERATION_NAME } = conv::INVOKE_AGENT,
            { conv::SERVER_ADDRESS } = target,
            { conv::PROTOCOL_HASH } = protocol.map(|p| tracing::field::display(p.hash())),
        );
        // A natural-language message may go to a foreign agent (A2A); a protocol message is
        // Agora's own.
        let answer = match protocol {
            None => {
                self.post_natural(target, &envelope, message)
                    .instrument(span)
                    .await
            }
            Some(_) => self.post_agora(target, &envelope).instrument(span).await,
        };
        let result = answer.and_then(|answer| match answer {
            Answer::Success(body, negotiation_requested) => Ok(MessageReply {
                body,
                negotiation_requested,
            }),
            Answer::Rejected(reason) => Err(SendError::Rejected(reason)),
            Answer::Failure(reason) => Err(SendError::Failed(reason)),
        });
        let hash = protocol.map(VerifiedDocument::hash);
        self.log_inquiry_under(target, "(message)", hash, result.as_ref().err())
            .await;
        result
    }

    /// The protocols `target` lists at `/.wellknown`: a JSON object from protocol hash to the
    /// sources it can be fetched from.
    pub(crate) async fn target_listing(&self, target: &str) -> Result<Value, SendError> {
        let url = format!("{}/.wellknown", target.trim_end_matches('/'));
        let result = self.get_listing(target, &url).await;
        self.log_inquiry(target, "(wellknown)", result.as_ref().err())
            .await;
        result
    }

    /// Searches a protocol database (`database`, or the sender's configured one) for `query`;
    /// returns its hits (name, hash, url, ...), at most `limit` of them.
    pub(crate) async fn search_protocols(
        &self,
        database: Option<&str>,
        query: &str,
        limit: usize,
    ) -> Result<Value, SendError> {
        let database = database
            .map(str::to_string)
            .or_else(|| self.core.config.sender.protocol_db.clone())
            .ok_or(SendError::NoProtocolDatabase)?;
        let encoded: String = url::form_urlencoded::byte_serialize(query.as_bytes()).collect();
        let url = format!(
            "{}/protocols?q={encoded}&limit={}",
            database.trim_end_matches('/'),
            limit.clamp(1, 100)
        );
        let result = self.get_listing(&database, &url).await;
        self.log_inquiry(&database, "(search)", result.as_ref().err())
            .await;
        result
    }

    async fn get_listing(&self, target: &str, url: &str) -> Result<Value, SendError> {
        let config = &self.core.config.sender;
        sender::get_json(
            &self.core.targets,
            url,
            Duration::from_secs(config.timeout_secs.clamp(1, 30)),
            MAX_LISTING_BYTES.min(config.max_reply_bytes.max(1024)),
        )
        .await
        .map_err(|reason| {
            SendError::Unreachable(sender::Unreachable {
                target: target.to_string(),
                reason,
            })
        })
    }

    async fn log_inquiry(&self, target: &str, what: &str, error: Option<&SendError>) {
        self.log_inquiry_under(target, what, None, error).await;
    }

    async fn log_inquiry_under(
        &self,
        target: &str,
        what: &str,
        protocol_hash: Option<ProtocolHash>,
        error: Option<&SendError>,
    ) {
        let rung = if protocol_hash.is_some() {
            "protocol"
        } else {
            "natural"
        };
        let run = SenderRun {
            target: target.to_string(),
            task: what.to_string(),
            rung: rung.to_string(),
            steps: String::new(),
            protocol_hash,
            outcome: if error.is_some() { "error" } else { "success" }.to_string(),
            error: error.map(ToString::to_string),
            llm_calls: 0,
            tokens: 0,
            cost_usd: 0.0,
            created_at_ms: self.core.clock.now_ms(),
        };
        if let Err(error) = self.core.store.sender().record_sender_run(&run).await {
            tracing::error!(%error, "could not log an inquiry");
        }
    }
}
