//! The node as an A2A client: its natural-language messages to an A2A agent (the sender's
//! first rung, and `Node::send_message`) go as `SendMessage` calls.
//!
//! A target is an A2A agent when `GET <target>/.well-known/agent-card.json` answers a card
//! with a JSON-RPC interface and without the Agora extension; an agent that declares the
//! extension is an Agora node, and is spoken to in Agora. The interface must be on the
//! target's own origin (scheme, host and port), so a card cannot send the node elsewhere.
//! Cards are remembered per target for the process's life (at most [`MAX_CARDS`]); a target
//! that did not answer is asked again next time.
//!
//! The answer is the text of the reply: a `Message`'s parts, or a finished task's artifacts
//! (else its status message). A failed or rejected task, and a JSON-RPC error, are errors
//! with the agent's words; a task still working after the call is an error too (this sender
//! does not poll).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2a::{Message, Part, PartContent, Role, SendMessageResponse, TaskState};
use agora_fetch::TargetClient;
use agora_node::{ForeignSender, SendError, Unreachable};
use serde_json::{Value, json};

use crate::EXTENSION_URI;

/// Most targets whose card (or its absence) is remembered.
pub const MAX_CARDS: usize = 1024;

/// The A2A sender: one per node.
pub struct A2aSender {
    targets: TargetClient,
    timeout: Duration,
    max_bytes: usize,
    /// Target to its JSON-RPC interface URL, or `None` when it is not an A2A agent.
    cards: Mutex<HashMap<String, Option<String>>>,
}

impl A2aSender {
    /// A sender over `targets`, waiting at most `timeout` for each exchange and reading at most
    /// `max_bytes` of each answer (the node's `sender.timeout_secs`, `sender.max_reply_bytes`).
    pub fn new(targets: TargetClient, timeout: Duration, max_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            targets,
            timeout,
            max_bytes,
            cards: Mutex::new(HashMap::new()),
        })
    }

    /// The JSON-RPC interface of `target`, if it is an A2A agent that is not an Agora node.
    async fn interface(&self, target: &str) -> Result<Option<String>, SendError> {
        if let Some(known) = self.cards.lock().ok().and_then(|c| c.get(target).cloned()) {
            return Ok(known);
        }
        let url = format!("{}{}", target.trim_end_matches('/'), crate::CARD_PATH);
        let request = self
            .targets
            .get(&url)
            .timeout(self.timeout)
            .max_bytes(self.max_bytes);
        let response = request.send().await.map_err(|e| unreachable(target, e))?;
        let interface = if response.is_success() {
            let bytes = response.bytes().await.map_err(|e| unreachable(target, e))?;
            serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|card| jsonrpc_interface(target, &card))
        } else {
            None
        };
        if let Ok(mut cards) = self.cards.lock() {
            if cards.len() >= MAX_CARDS {
                cards.clear();
            }
            cards.insert(target.to_string(), interface.clone());
        }
        Ok(interface)
    }

    async fn send(&self, target: &str, interface: &str, text: &str) -> Result<String, SendError> {
        let message = Message::new(Role::User, vec![Part::text(text)]);
        let call = json!({
            "jsonrpc": "2.0",
            "id": uuid::Uuid::new_v4().to_string(),
            "method": a2a::methods::SEND_MESSAGE,
            "params": {"message": message},
        });
        let response = self
            .targets
            .post(interface)
            .header(a2a::SVC_PARAM_VERSION, a2a::VERSION)
            .json(&call)
            .timeout(self.timeout)
            .max_bytes(self.max_bytes)
            .send()
            .await
            .map_err(|e| unreachable(target, e))?;
        let bytes = response.bytes().await.map_err(|e| unreachable(target, e))?;
        let answer: Value = serde_json::from_slice(&bytes)
            .map_err(|_| SendError::Failed("the A2A agent's answer is not JSON".into()))?;
        if let Some(error) = answer.get("error") {
            return Err(SendError::Failed(format!(
                "the A2A agent answered error {}: {}",
                error["code"],
                error["message"].as_str().unwrap_or("no message")
            )));
        }
        let result: SendMessageResponse = serde_json::from_value(
            answer.get("result").cloned().unwrap_or(Value::Null),
        )
        .map_err(|e| {
            SendError::Failed(format!(
                "the A2A agent's answer is not a message or task: {e}"
            ))
        })?;
        match result {
            SendMessageResponse::Message(message) => Ok(text_of(&message.parts)),
            SendMessageResponse::Task(task) => {
                let said = task
                    .status
                    .message
                    .as_ref()
                    .map(|m| text_of(&m.parts))
                    .unwrap_or_default();
                match task.status.state {
                    TaskState::Completed | TaskState::InputRequired => {
                        let artifacts: Vec<Part> = task
                            .artifacts
                            .unwrap_or_default()
                            .into_iter()
                            .flat_map(|a| a.parts)
                            .collect();
                        Ok(if artifacts.is_empty() {
                            said
                        } else {
                            text_of(&artifacts)
                        })
                    }
                    TaskState::Rejected => Err(SendError::Rejected(said)),
                    TaskState::Failed | TaskState::Canceled => Err(SendError::Failed(said)),
                    state => Err(SendError::Failed(format!(
                        "the A2A agent did not finish within the call (task {} is {state:?})",
                        task.id
                    ))),
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl ForeignSender for A2aSender {
    async fn natural(&self, target: &str, message: &str) -> Option<Result<String, SendError>> {
        let interface = match self.interface(target).await {
            Ok(Some(interface)) => interface,
            Ok(None) => return None,
            Err(error) => return Some(Err(error)),
        };
        tracing::debug!(target, "sending to an A2A agent");
        Some(self.send(target, &interface, message).await)
    }
}

/// A card's JSON-RPC interface URL, unless the card is an Agora node's or the interface is on
/// another origin than `target`.
fn jsonrpc_interface(target: &str, card: &Value) -> Option<String> {
    let extensions = card["capabilities"]["extensions"].as_array();
    if extensions.is_some_and(|e| e.iter().any(|x| x["uri"] == EXTENSION_URI)) {
        return None;
    }
    let interface = card["supportedInterfaces"]
        .as_array()?
        .iter()
        .find(|i| i["protocolBinding"] == a2a::TRANSPORT_PROTOCOL_JSONRPC)?["url"]
        .as_str()?
        .to_string();
    let origin = |url: &str| {
        url::Url::parse(url).ok().map(|u| {
            (
                u.scheme().to_string(),
                u.host_str().map(str::to_string),
                u.port_or_known_default(),
            )
        })
    };
    (origin(&interface).is_some() && origin(&interface) == origin(target)).then_some(interface)
}

/// The text of parts: text parts as they are, data parts as JSON, one per line.
fn text_of(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|part| match &part.content {
            PartContent::Text(text) => Some(text.clone()),
            PartContent::Data(data) => Some(data.to_string()),
            PartContent::Raw(_) | PartContent::Url(_) => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn unreachable(target: &str, error: agora_fetch::FetchError) -> SendError {
    SendError::Unreachable(Unreachable {
        target: target.to_string(),
        reason: error.to_string(),
    })
}
