//! Conversation history as stored between turns.
//!
//! A multiround conversation keeps its user and assistant turns (not the
//! tool steps, which are rebuilt each turn) as JSON in the store, so it
//! survives a restart. History is capped so prompts stay bounded.

use agora_llm::Message;
use serde_json::Value;

/// Reads stored history; unreadable history counts as empty.
pub fn decode(messages: &Value) -> Vec<Message> {
    serde_json::from_value(messages.clone()).unwrap_or_default()
}

/// Appends one exchange and keeps at most `max` messages (oldest dropped).
pub fn append(mut history: Vec<Message>, user: &str, assistant: &str, max: usize) -> Value {
    history.push(Message::user(user.to_string()));
    history.push(Message::assistant(assistant.to_string()));
    if history.len() > max {
        let excess = history.len() - max;
        history.drain(..excess);
    }
    serde_json::to_value(history).unwrap_or(Value::Array(Vec::new()))
}
