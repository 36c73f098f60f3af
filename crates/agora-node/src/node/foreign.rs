//! Agents that do not speak Agora, reached through another protocol's sender (the A2A sender
//! in `agora-a2a`). The natural-language rung, and [`Node::send_message`], hand their message
//! to it first; when it does not recognize the target, the node speaks Agora as before. The
//! engine knows only this trait, in plain words: a target, a message, a text answer.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::ladder::{ForeignSender, Sender};
use crate::sender::{self, Answer, SendError};

impl Sender {
    /// Installs `sender` for agents that do not speak Agora; false if the node already has one.
    pub(crate) fn add_foreign_sender(&self, sender: Arc<dyn ForeignSender>) -> bool {
        self.foreign.set(sender).is_ok()
    }

    /// Sends a natural-language `envelope` (whose body is `body`) to `target`: through the
    /// foreign sender if it knows the target, else as an Agora request.
    pub(super) async fn post_natural(
        &self,
        target: &str,
        envelope: &Value,
        body: &str,
    ) -> Result<Answer, SendError> {
        if let Some(foreign) = self.foreign.get()
            && let Some(answer) = foreign.natural(target, body).await
        {
            return answer.map(|text| Answer::Success(text, false));
        }
        self.post_agora(target, envelope).await
    }

    /// Posts `envelope` to the Agora endpoint `target`, within the sender's deadline and reply
    /// size.
    pub(super) async fn post_agora(
        &self,
        target: &str,
        envelope: &Value,
    ) -> Result<Answer, SendError> {
        let config = &self.core.config.sender;
        sender::post(
            &self.core.targets,
            target,
            envelope,
            Duration::from_secs(config.timeout_secs.max(1)),
            config.max_reply_bytes,
        )
        .await
    }
}
