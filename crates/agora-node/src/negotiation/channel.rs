//! The sender's end of a negotiation conversation over HTTP.
//!
//! The first message opens the conversation (`POST {target}` with `protocolHash:
//! "negotiation"` and `multiround: true`) and the reply must carry a `conversationId`; later
//! messages go to `POST {target}/conversations/{id}` with the same envelope (the Python
//! receiver reads only `body`); closing sends `DELETE {target}/conversations/{id}`. Every call
//! has the node's sender timeout and reply size limit, and redirects are not followed: the
//! target is chosen by the operator and the conversation must stay with it.

use std::time::Duration;

use agora_fetch::{TargetClient, TargetRequest};
use agora_protocol::{Body, HashDialect, ProtocolRef, Reply, Request, Status};

use super::NegotiationError;
use crate::sender::{BadReply, ExchangeError, exchange};

/// One negotiation conversation with one receiver.
pub(crate) struct Channel {
    targets: TargetClient,
    target: String,
    timeout: Duration,
    max_reply_bytes: usize,
    conversation_id: Option<String>,
}

impl Channel {
    pub(crate) fn new(
        targets: TargetClient,
        target: &str,
        timeout: Duration,
        max_reply_bytes: usize,
    ) -> Self {
        Self {
            targets,
            target: target.trim_end_matches('/').to_string(),
            timeout,
            max_reply_bytes,
            conversation_id: None,
        }
    }

    /// Sends one message; returns the reply's body text, or the receiver's refusal.
    pub(crate) async fn send(&mut self, message: &str) -> Result<String, NegotiationError> {
        let envelope = Request {
            protocol: ProtocolRef::Negotiation,
            hash_dialect: HashDialect::Hex,
            sources: Vec::new(),
            body: Body::Text(message.to_string()),
            multiround: true,
        }
        .to_json();
        let url = match &self.conversation_id {
            Some(id) => format!("{}/conversations/{id}", self.target),
            None => format!("{}/", self.target),
        };
        let reply = self
            .exchange(self.targets.post(&url).json(&envelope))
            .await?;
        match reply.status {
            Status::Success => {}
            Status::Failure | Status::Rejected => {
                return Err(NegotiationError::Refused(
                    reply.error.unwrap_or_else(|| "no reason given".into()),
                ));
            }
        }
        if self.conversation_id.is_none() {
            let id = reply.conversation_id.clone().ok_or_else(|| {
                self.bad_reply(200, "the negotiation reply has no conversationId".into())
            })?;
            self.conversation_id = Some(id);
        }
        Ok(reply.body.map(|b| b.to_text()).unwrap_or_default())
    }

    /// Ends the conversation at the receiver; failures are logged, not returned.
    pub(crate) async fn close(&self) {
        let Some(id) = &self.conversation_id else {
            return;
        };
        let url = format!("{}/conversations/{id}", self.target);
        let result = self
            .targets
            .delete(&url)
            .timeout(self.timeout)
            .max_bytes(self.max_reply_bytes)
            .send()
            .await;
        if let Err(error) = result {
            tracing::debug!(%error, "could not close a negotiation conversation");
        }
    }

    async fn exchange(&self, request: TargetRequest) -> Result<Reply, NegotiationError> {
        let request = request
            .timeout(self.timeout)
            .max_bytes(self.max_reply_bytes);
        Ok(exchange(request, &self.target).await?)
    }

    fn bad_reply(&self, status: u16, detail: String) -> NegotiationError {
        ExchangeError::BadReply(BadReply {
            target: self.target.clone(),
            status,
            detail,
        })
        .into()
    }
}
