//! `node_info`: what a reply may need to know about the node that sends it.
//!
//! Message formats such as the seed protocols (`protocols/agent-dsl-weather.md`,
//! `agent-envelope-weather.md`, `osnap-weather.md`) put the replying agent's identity, the time
//! and a fresh message id in every reply, and OSNAP's `capabilities_response` lists what the agent
//! offers. A routine keeps no state and must not hard-code who it runs on, so it asks this tool,
//! granted like any other (`tools = ["node_info"]` in its manifest, and
//! `[[node.tools]] name = "node_info" kind = "builtin" builtin = "node_info"` in the node's
//! configuration).
//!
//! The tool is built by [`ToolRegistry::bind_node`](super::ToolRegistry) when the node is
//! assembled, because it reads the node's configuration, store and clock. It answers:
//! - `name`, `url`, `description`: the node's configured name, public URL and description;
//! - `time`: the node's clock, RFC 3339 in UTC to the second;
//! - `fresh_id`: a new random UUID (v4, lowercase, hyphenated) for the reply's message id;
//! - `tools`: the node's other tools (name, description);
//! - `tasks`: the tasks the node sends to other agents (name, description);
//! - `protocols`: the protocols it serves, as `/.wellknown` lists them (hash, name, description).

use std::sync::Arc;

use agora_store::{RoutineStatus, Store, StoreError, StoredDocument};
use serde_json::{Value, json};

use super::tool::{Tool, ToolError, ToolSpec};
use crate::clock::Clock;

/// The built-in's name in `[[node.tools]] builtin = "..."`.
pub const BUILTIN: &str = "node_info";

/// What the node is, fixed when it is assembled.
#[derive(Debug, Clone, Default)]
pub struct NodeFacts {
    /// The node's name.
    pub name: String,
    /// Its public base URL.
    pub url: String,
    /// What it does.
    pub description: String,
    /// Its tools other than this one: (name, description).
    pub tools: Vec<(String, String)>,
    /// The tasks it sends: (name, description).
    pub tasks: Vec<(String, String)>,
}

/// The `node_info` tool.
pub struct NodeInfoTool {
    spec: ToolSpec,
    facts: NodeFacts,
    store: Store,
    clock: Arc<dyn Clock>,
}

impl NodeInfoTool {
    /// The tool under `spec`, answering from `facts`, the store's protocols and `clock`.
    pub fn new(spec: ToolSpec, facts: NodeFacts, store: Store, clock: Arc<dyn Clock>) -> Self {
        Self {
            spec,
            facts,
            store,
            clock,
        }
    }

    /// The default spec: no arguments.
    pub fn default_spec() -> ToolSpec {
        ToolSpec {
            name: BUILTIN.into(),
            description: "Describes this node: its name, public url and description, the current \
                          time (RFC 3339, UTC), a fresh_id (a new UUID for a message id), its \
                          tools, the tasks it sends, and the protocols it serves (hash, name, \
                          description)."
                .into(),
            parameters: json!({"type": "object", "properties": {}, "additionalProperties": false}),
            returns: Some(json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"}, "url": {"type": "string"},
                    "description": {"type": "string"}, "time": {"type": "string"},
                    "fresh_id": {"type": "string"},
                    "tools": {"type": "array"}, "tasks": {"type": "array"},
                    "protocols": {"type": "array"}
                }
            })),
        }
    }

    fn time(&self) -> String {
        let seconds = self.clock.now_ms().div_euclid(1000);
        jiff::Timestamp::from_second(seconds)
            .map(|t| t.to_string())
            .unwrap_or_default()
    }
}

fn named(pairs: &[(String, String)]) -> Value {
    pairs
        .iter()
        .map(|(name, description)| json!({"name": name, "description": description}))
        .collect()
}

#[async_trait::async_trait]
impl Tool for NodeInfoTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn scratch(&self) -> Result<super::Scratch, ToolError> {
        Ok(super::Scratch::Stateless)
    }

    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        let protocols: Vec<Value> = served_documents(&self.store)
            .await
            .map_err(|error| ToolError::failed(&self.spec.name, error.to_string()))?
            .iter()
            .map(|stored| {
                let metadata = stored.document.metadata();
                json!({
                    "hash": stored.document.hash().to_hex(),
                    "name": stored.document.display_name(),
                    "description": metadata.description.clone().unwrap_or_default(),
                })
            })
            .collect();
        Ok(json!({
            "name": self.facts.name,
            "url": self.facts.url,
            "description": self.facts.description,
            "time": self.time(),
            "fresh_id": uuid::Uuid::new_v4().to_string(),
            "tools": named(&self.facts.tools),
            "tasks": named(&self.facts.tasks),
            "protocols": protocols,
        }))
    }
}

/// The documents a node serves: those an active routine answers and those allowed by a
/// suitability decision, in the order they were stored. `/.wellknown` lists the same.
pub(crate) async fn served_documents(store: &Store) -> Result<Vec<StoredDocument>, StoreError> {
    let served: std::collections::HashSet<_> = store
        .routines()
        .await?
        .into_iter()
        .filter(|r| r.status == RoutineStatus::Active)
        .map(|r| r.protocol_hash)
        .collect();
    let mut documents = Vec::new();
    for stored in store.documents().await? {
        let hash = stored.document.hash();
        let allowed = served.contains(&hash)
            || matches!(store.suitability(&hash).await?, Some(d) if d.allowed);
        if allowed {
            documents.push(stored);
        }
    }
    Ok(documents)
}
