//! The agent card: who the node is, where its JSON-RPC interface is, and its skills.
//!
//! One skill for natural language (the node's description), one per configured task and one
//! per protocol the node lists at `/.wellknown` (allowed, or served by a routine). A protocol's
//! skill names its hash, so an A2A client that knows the Agora extension can send a request
//! under it.

use a2a::{AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentSkill};
use agora_node::{Node, NodeError};
use agora_protocol::ProtocolHash;
use serde_json::Value;

use crate::{EXTENSION_URI, JSONRPC_PATH};

/// The card of `node`, as JSON.
pub async fn agent_card(node: &Node) -> Result<Value, NodeError> {
    let config = node.config();
    let base = config.public_url.trim_end_matches('/');
    let mut skills = vec![AgentSkill {
        id: "natural-language".into(),
        name: "Natural language".into(),
        description: if config.description.trim().is_empty() {
            "Answers questions in plain language.".into()
        } else {
            config.description.clone()
        },
        tags: vec!["agora".into(), "natural-language".into()],
        examples: None,
        input_modes: Some(vec!["text/plain".into()]),
        output_modes: Some(vec!["text/plain".into()]),
        security_requirements: None,
    }];
    skills.extend(config.tasks.iter().map(|task| AgentSkill {
        id: format!("task:{}", task.name),
        name: task.name.clone(),
        description: format!(
            "{} (a task this node runs against other agents as a sender; input schema: {})",
            task.description, task.input_schema
        ),
        tags: vec!["agora".into(), "task".into()],
        examples: None,
        input_modes: None,
        output_modes: None,
        security_requirements: None,
    }));
    for (hash, sources) in node.wellknown().await? {
        let Ok(protocol_hash) = ProtocolHash::parse(&hash) else {
            continue;
        };
        let stored = node.store().document(&protocol_hash).await?;
        let (name, description) = match stored {
            Some(stored) => (
                stored.document.display_name(),
                stored.document.metadata().description.clone(),
            ),
            None => (format!("protocol {}", &hash[..10.min(hash.len())]), None),
        };
        skills.push(AgentSkill {
            id: format!("protocol:{hash}"),
            name,
            description: format!(
                "{} Send a data part {{\"protocolHash\": \"{hash}\", \"protocolSources\": {}, \
                 \"body\": ...}} (extension {EXTENSION_URI}).",
                description.unwrap_or_else(|| "An Agora protocol.".into()),
                serde_json::to_string(&sources).unwrap_or_default(),
            ),
            tags: vec!["agora".into(), "protocol".into(), hash],
            examples: None,
            input_modes: Some(vec!["application/json".into()]),
            output_modes: Some(vec!["application/json".into(), "text/plain".into()]),
            security_requirements: None,
        });
    }
    let card = AgentCard {
        name: config.name.clone(),
        description: config.description.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
        supported_interfaces: vec![AgentInterface::new(
            format!("{base}{JSONRPC_PATH}"),
            a2a::TRANSPORT_PROTOCOL_JSONRPC,
        )],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: Some(vec![AgentExtension {
                uri: EXTENSION_URI.into(),
                description: Some(
                    "Agora: a data part holding an Agora request envelope {protocolHash, \
                     protocolSources, body, multiround?} is answered under that protocol \
                     document; text parts are natural language."
                        .into(),
                ),
                required: Some(false),
                params: None,
            }]),
            extended_agent_card: Some(false),
        },
        default_input_modes: vec!["text/plain".into(), "application/json".into()],
        default_output_modes: vec!["text/plain".into(), "application/json".into()],
        skills,
        provider: None,
        documentation_url: None,
        icon_url: None,
        security_schemes: None,
        security_requirements: None,
        signatures: None,
    };
    Ok(serde_json::to_value(card).unwrap_or(Value::Null))
}
