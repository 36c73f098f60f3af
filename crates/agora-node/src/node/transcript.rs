//! A stored conversation as its turns, for fronts that show conversations to their own clients
//! (the A2A front's tasks) without knowing how the engine keeps LLM history.

use agora_protocol::ProtocolHash;
use agora_store::ConversationKind;

use super::core::{Core, NodeError};
use crate::conversation;

/// Who said one turn of a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaker {
    /// The peer that sent the message.
    Peer,
    /// This node.
    Node,
}

/// A live (not expired) conversation: what it follows and what was said.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    /// The conversation id.
    pub id: String,
    /// Natural language, a protocol, or a negotiation.
    pub kind: ConversationKind,
    /// The protocol it follows, if any.
    pub protocol_hash: Option<ProtocolHash>,
    /// The turns kept (the newest `conversations.max_messages`), oldest first.
    pub turns: Vec<(Speaker, String)>,
    /// When it started, Unix ms.
    pub created_at_ms: i64,
    /// When it stops accepting messages if idle, Unix ms.
    pub expires_at_ms: i64,
}

impl Core {
    /// The conversation `id` with its turns, or `None` if it is unknown or expired.
    pub(crate) async fn transcript(&self, id: &str) -> Result<Option<Transcript>, NodeError> {
        let now = self.clock.now_ms();
        let Some(stored) = self.store.conversation(id).await? else {
            return Ok(None);
        };
        if stored.expires_at_ms <= now {
            return Ok(None);
        }
        let turns = conversation::decode(&stored.messages)
            .into_iter()
            .filter_map(|message| match message.role {
                agora_llm::Role::User => Some((Speaker::Peer, message.content)),
                agora_llm::Role::Assistant => Some((Speaker::Node, message.content)),
                agora_llm::Role::System => None,
            })
            .collect();
        Ok(Some(Transcript {
            id: stored.id,
            kind: stored.kind,
            protocol_hash: stored.protocol_hash,
            turns,
            created_at_ms: stored.created_at_ms,
            expires_at_ms: stored.expires_at_ms,
        }))
    }
}
