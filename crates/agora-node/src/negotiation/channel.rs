//! The sender's end of a negotiation conversation over HTTP.
//!
//! The first message opens the conversation (`POST {target}` with `protocolHash:
//! "negotiation"` and `multiround: true`) and the reply must carry a `conversationId`; later
//! messages go to `POST {target}/conversations/{id}` with the same envelope (the Python
//! receiver reads only `body`); closing sends `DELETE {target}/conversations/{id}`. Every call
//! has the node's sender timeout and reply size limit, and redirects are not followed: the
//! target is chosen by the operator and the conversation must stay with it.

use std::sync::OnceLock;
use std::time::Duration;

use agora_protocol::{Body, HashDialect, ProtocolRef, Reply, Request, Status};

use super::NegotiationError;

fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default()
    })
}

/// One negotiation conversation with one receiver.
pub(crate) struct Channel {
    target: String,
    timeout: Duration,
    max_reply_bytes: usize,
    conversation_id: Option<String>,
}

impl Channel {
    pub(crate) fn new(target: &str, timeout: Duration, max_reply_bytes: usize) -> Self {
        Self {
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
        let reply = self.exchange(client().post(&url).json(&envelope)).await?;
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
        let result = client().delete(&url).timeout(self.timeout).send().await;
        if let Err(error) = result {
            tracing::debug!(%error, "could not close a negotiation conversation");
        }
    }

    async fn exchange(&self, request: reqwest::RequestBuilder) -> Result<Reply, NegotiationError> {
        let unreachable = |reason: String| NegotiationError::Unreachable {
            target: self.target.clone(),
            reason,
        };
        let mut response = request
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let status = response.status().as_u16();
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| unreachable(e.to_string()))?
        {
            if bytes.len() + chunk.len() > self.max_reply_bytes {
                return Err(self.bad_reply(
                    status,
                    format!("the reply is over {} bytes", self.max_reply_bytes),
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| self.bad_reply(status, format!("not JSON: {e}")))?;
        Reply::from_json(&value).ok_or_else(|| {
            self.bad_reply(
                status,
                format!("no Agora status in {}", super::clip(&value.to_string())),
            )
        })
    }

    fn bad_reply(&self, status: u16, detail: String) -> NegotiationError {
        NegotiationError::BadReply {
            target: self.target.clone(),
            status,
            detail,
        }
    }
}
