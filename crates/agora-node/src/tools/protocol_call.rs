//! `call_protocol`: a routine asks the routine of another protocol on the same node.
//!
//! Protocols build on protocols (a PD's `references`, see `agora_protocol::references`): an
//! OSNAP task whose payload is the weather protocol's request is answered by handing that payload
//! to the weather protocol's routine. A routine granted this tool
//! (`[[node.tools]] builtin = "call_protocol"`, `tools = ["call_protocol"]` in its manifest) calls
//! `callTool("call_protocol", {"protocol": "<hash>", "body": ...})` and gets that routine's reply:
//! parsed JSON when it is JSON, else the text. The body is sent as the text of a JSON value (a
//! string is sent as it is). No LLM is involved: a protocol with no active routine here, or a
//! routine that fails, fails the call (and so, usually, the calling routine, which then falls back
//! to the node's LLM as any failing routine does).
//!
//! The inner run is part of the outer request (one request row, the outer routine's); it runs
//! with its own granted tools and limits. Calls nest at most [`MAX_DEPTH`] deep, counted in a
//! task-local (a routine's tool calls run on the task that runs the routine), so routines that
//! call each other cannot recurse without end.

use std::sync::Weak;

use agora_protocol::ProtocolHash;
use serde_json::{Value, json};

use super::tool::{Tool, ToolError, ToolSpec};

/// The built-in's name in `[[node.tools]] builtin = "..."`.
pub const BUILTIN: &str = "call_protocol";

/// Deepest nesting of routines calling routines.
pub const MAX_DEPTH: usize = 3;

tokio::task_local! {
    static DEPTH: usize;
}

/// The node's active routines, as this tool reaches them.
#[async_trait::async_trait]
pub trait ProtocolRoutines: Send + Sync {
    /// Runs the active routine for `protocol` on `body`; an error when there is none or it
    /// fails.
    async fn run_protocol(&self, protocol: &ProtocolHash, body: &str) -> Result<String, String>;
}

/// The `call_protocol` tool.
pub struct CallProtocolTool {
    spec: ToolSpec,
    /// Held weakly: the routine table holds the tools.
    routines: Weak<dyn ProtocolRoutines>,
}

impl CallProtocolTool {
    /// The tool under `spec`, running the routines of `routines`.
    pub fn new(spec: ToolSpec, routines: Weak<dyn ProtocolRoutines>) -> Self {
        Self { spec, routines }
    }

    /// The default spec.
    pub fn default_spec() -> ToolSpec {
        ToolSpec {
            name: BUILTIN.into(),
            description: "Answers a message under another protocol with that protocol's routine \
                          on this node (no language model). Arguments: protocol (its SHA-1 \
                          hash, hex) and body (the message: a string, or a JSON value sent as \
                          its JSON text). Returns the routine's reply, parsed when it is JSON."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "protocol": {"type": "string", "pattern": "^[0-9a-fA-F]{40}$"},
                    "body": {}
                },
                "required": ["protocol", "body"],
                "additionalProperties": false
            }),
            returns: None,
        }
    }
}

#[async_trait::async_trait]
impl Tool for CallProtocolTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let fail = |reason: String| ToolError::failed(&self.spec.name, reason);
        let protocol = arguments
            .get("protocol")
            .and_then(Value::as_str)
            .and_then(|hash| ProtocolHash::parse(hash).ok())
            .ok_or_else(|| fail("protocol must be a 40-hex SHA-1 hash".into()))?;
        let body = match arguments.get("body") {
            Some(Value::String(text)) => text.clone(),
            Some(value) => value.to_string(),
            None => return Err(fail("body is required".into())),
        };
        let depth = DEPTH.try_with(|depth| *depth).unwrap_or(0);
        if depth >= MAX_DEPTH {
            return Err(fail(format!(
                "routines may call routines at most {MAX_DEPTH} deep"
            )));
        }
        let routines = self
            .routines
            .upgrade()
            .ok_or_else(|| fail("the node is shutting down".into()))?;
        let reply = DEPTH
            .scope(depth + 1, routines.run_protocol(&protocol, &body))
            .await
            .map_err(fail)?;
        Ok(serde_json::from_str(&reply).unwrap_or(Value::String(reply)))
    }
}
