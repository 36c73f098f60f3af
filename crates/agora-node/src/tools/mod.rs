//! Tools: the node's doors to the outside world.
//!
//! A tool has a name, a description, and a JSON schema for its arguments.
//! The responder offers tools to the LLM; routines call them through the
//! host bridge (`GrantedTools`, limited to the tools a routine was granted).
//! Arguments are validated against the schema before any tool runs, so a
//! tool never sees arguments it did not declare.

mod builtin;
mod http;
pub mod node_info;
pub mod protocol_call;
mod tool;

use std::collections::BTreeMap;
use std::sync::Arc;

use agora_fetch::TargetClient;
use agora_telemetry::conventions as conv;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument as _;

pub use builtin::WeatherForecastTool;
pub use http::HttpTool;
pub use node_info::{NodeFacts, NodeInfoTool};
pub use protocol_call::{CallProtocolTool, ProtocolRoutines};
pub use tool::{Scratch, ScratchCopy, Tool, ToolError, ToolSpec};

/// Largest reply an HTTP tool accepts when its configuration names no limit, in bytes.
const DEFAULT_MAX_REPLY_BYTES: usize = 1 << 20;

/// A tool as declared in the node configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolConfig {
    /// Unique name.
    pub name: String,
    /// What the tool does (shown to the LLM).
    #[serde(default)]
    pub description: Option<String>,
    /// JSON schema of the arguments (built-in tools bring their own).
    #[serde(default)]
    pub parameters: Option<Value>,
    /// JSON schema of the result, if known.
    #[serde(default)]
    pub returns: Option<Value>,
    /// How the tool is implemented.
    #[serde(flatten)]
    pub kind: ToolKind,
}

impl ToolConfig {
    /// A built-in tool under a name, with its own description and schema.
    pub fn builtin(name: &str, builtin: &str, seed: u64) -> Self {
        Self {
            name: name.to_string(),
            description: None,
            parameters: None,
            returns: None,
            kind: ToolKind::Builtin {
                builtin: builtin.to_string(),
                seed,
            },
        }
    }
}

/// How a configured tool is implemented.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolKind {
    /// POSTs the arguments as JSON to a URL and returns the JSON reply.
    Http {
        /// The endpoint (operator-configured, so not behind the SSRF guard).
        url: String,
        /// Per-call timeout in seconds (default 10).
        #[serde(default)]
        timeout_secs: Option<u64>,
        /// Largest reply accepted, in bytes (default 1 MiB); a larger one fails the call.
        #[serde(default)]
        max_reply_bytes: Option<usize>,
        /// The endpoint only reads (the operator's word): shadow checks may call it.
        #[serde(default)]
        read_only: bool,
    },
    /// Every tool of an MCP server (the configuration's `name` names the server). MCP servers
    /// are connected by the composition root through `agora-mcp`, which hands the connected
    /// tools to [`ToolRegistry::from_config_with`].
    Mcp(McpServerConfig),
    /// A tool compiled into agora: `weather_forecast` (demo data), `node_info` (the node itself,
    /// see [`node_info`]) or `call_protocol` (another protocol's routine, see
    /// [`protocol_call`]).
    Builtin {
        /// Which one: `weather_forecast`, `node_info` or `call_protocol`.
        builtin: String,
        /// Seed for generated data.
        #[serde(default)]
        seed: u64,
    },
}

/// How to reach an MCP server whose tools a node offers (`[[node.tools]] kind = "mcp"`).
///
/// Exactly one of `command` (a child process speaking MCP over stdio) and `url` (a streamable
/// HTTP endpoint) is given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program and its arguments, for a stdio server.
    #[serde(default)]
    pub command: Vec<String>,
    /// Environment variables for a stdio server. The child gets only these plus `PATH`, `HOME`,
    /// `LANG` and `TMPDIR` from the node's environment, so the node's secrets stay with it.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// The streamable-HTTP endpoint, for a remote server.
    #[serde(default)]
    pub url: Option<String>,
    /// The environment variable holding a bearer token for `url`.
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// Offer only these of the server's tools (by the server's names); default: all of them.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Always prefix the tools' names with the server's name (`<server>_<tool>`); by default
    /// only a name that would clash with another tool is prefixed.
    #[serde(default)]
    pub prefix: bool,
    /// Longest wait for one tool call, in seconds (default 30).
    #[serde(default)]
    pub call_timeout_secs: Option<u64>,
    /// Longest wait for the server to start and list its tools, in seconds (default 30).
    #[serde(default)]
    pub connect_timeout_secs: Option<u64>,
    /// Largest tool result accepted, in bytes of JSON (default 1 MiB); a larger one fails the
    /// call.
    #[serde(default)]
    pub max_result_bytes: Option<usize>,
}

/// Why the tool configuration is unusable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolConfigError {
    /// Two tools share a name.
    #[error("duplicate tool name {0:?}")]
    Duplicate(String),
    /// The name has characters other than letters, digits, `_` and `-`.
    #[error("invalid tool name {0:?}: use letters, digits, '_' and '-'")]
    BadName(String),
    /// No such built-in tool.
    #[error("unknown built-in tool {0:?}")]
    UnknownBuiltin(String),
    /// An HTTP tool without a parameters schema or description.
    #[error("tool {0:?} needs {1}")]
    Missing(String, &'static str),
    /// An MCP server's tools were not connected (see [`ToolRegistry::from_config_with`]).
    #[error("tool server {0:?} is an MCP server; this command cannot connect MCP servers")]
    NotConnected(String),
    /// The parameters schema is not a valid JSON schema.
    #[error("tool {name:?} has an invalid parameters schema: {reason}")]
    BadSchema {
        /// The tool.
        name: String,
        /// Why.
        reason: String,
    },
}

struct RegisteredTool {
    tool: Arc<dyn Tool>,
    /// Compiled once; a scratch copy of the tool shares it.
    validator: Arc<jsonschema::Validator>,
}

/// The tools a node offers, with argument validation.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Arc<BTreeMap<String, Arc<RegisteredTool>>>,
    /// Configured built-ins that need the node itself (`node_info`, `call_protocol`): the
    /// built-in's name and the tool's spec; the node adds them when it is assembled
    /// ([`ToolRegistry::bind_node`]).
    node_bound: Arc<Vec<(&'static str, ToolSpec)>>,
}

/// What the node-bound built-ins are built from (see [`ToolRegistry::bind_node`]).
pub struct NodeBinding {
    /// The node's identity and its tasks.
    pub facts: NodeFacts,
    /// The node's store (for the protocols it serves).
    pub store: agora_store::Store,
    /// The node's clock.
    pub clock: Arc<dyn crate::clock::Clock>,
    /// The node's active routines, for `call_protocol`.
    pub routines: std::sync::Weak<dyn ProtocolRoutines>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolRegistry {
    /// Builds the registry from configuration; HTTP tools call out through `targets`. A
    /// configuration with an MCP server is an error here: use [`Self::from_config_with`].
    pub fn from_config(
        configs: &[ToolConfig],
        targets: &TargetClient,
    ) -> Result<Self, ToolConfigError> {
        if let Some(mcp) = configs.iter().find(|c| matches!(c.kind, ToolKind::Mcp(_))) {
            return Err(ToolConfigError::NotConnected(mcp.name.clone()));
        }
        Self::from_config_with(configs, targets, Vec::new())
    }

    /// Builds the registry from configuration plus `connected`: the tools of the configuration's
    /// MCP servers, already connected (by `agora-mcp`). The MCP entries themselves are skipped.
    pub fn from_config_with(
        configs: &[ToolConfig],
        targets: &TargetClient,
        connected: Vec<Arc<dyn Tool>>,
    ) -> Result<Self, ToolConfigError> {
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        let mut node_bound = Vec::new();
        for config in configs {
            match &config.kind {
                ToolKind::Mcp(_) => {}
                ToolKind::Builtin { builtin, .. } if builtin == node_info::BUILTIN => {
                    let spec = configured_spec(NodeInfoTool::default_spec(), config);
                    node_bound.push((node_info::BUILTIN, spec));
                }
                ToolKind::Builtin { builtin, .. } if builtin == protocol_call::BUILTIN => {
                    let spec = configured_spec(CallProtocolTool::default_spec(), config);
                    node_bound.push((protocol_call::BUILTIN, spec));
                }
                _ => tools.push(build_tool(config, targets)?),
            }
        }
        tools.extend(connected);
        let mut registry = Self::from_tools(tools)?;
        for (_, spec) in &node_bound {
            check_name(&spec.name)?;
            if registry.tools.contains_key(&spec.name)
                || node_bound
                    .iter()
                    .filter(|(_, s)| s.name == spec.name)
                    .count()
                    > 1
            {
                return Err(ToolConfigError::Duplicate(spec.name.clone()));
            }
        }
        registry.node_bound = Arc::new(node_bound);
        Ok(registry)
    }

    /// The registry with its node-bound built-ins (`node_info`, `call_protocol`) built from
    /// `binding`. The node calls this once, when it is assembled; a registry without such
    /// built-ins is returned as it is.
    pub fn bind_node(&self, binding: NodeBinding) -> Self {
        if self.node_bound.is_empty() {
            return self.clone();
        }
        let mut facts = binding.facts;
        facts.tools = self
            .specs()
            .into_iter()
            .map(|spec| (spec.name, spec.description))
            .collect();
        let mut map = (*self.tools).clone();
        for (builtin, spec) in self.node_bound.iter() {
            let tool: Arc<dyn Tool> = if *builtin == protocol_call::BUILTIN {
                Arc::new(CallProtocolTool::new(
                    spec.clone(),
                    binding.routines.clone(),
                ))
            } else {
                Arc::new(NodeInfoTool::new(
                    spec.clone(),
                    facts.clone(),
                    binding.store.clone(),
                    binding.clock.clone(),
                ))
            };
            match jsonschema::validator_for(&spec.parameters) {
                Ok(validator) => {
                    map.insert(
                        spec.name.clone(),
                        Arc::new(RegisteredTool {
                            tool,
                            validator: Arc::new(validator),
                        }),
                    );
                }
                // The schema is the built-in's own; this is a bug, not a configuration error.
                Err(error) => tracing::error!(tool = %spec.name, %error, "a built-in's schema"),
            }
        }
        Self::of(map)
    }

    /// Builds the registry from tool objects.
    pub fn from_tools(tools: Vec<Arc<dyn Tool>>) -> Result<Self, ToolConfigError> {
        let mut map = BTreeMap::new();
        for tool in tools {
            let spec = tool.spec();
            check_name(&spec.name)?;
            let validator = jsonschema::validator_for(&spec.parameters).map_err(|e| {
                ToolConfigError::BadSchema {
                    name: spec.name.clone(),
                    reason: e.to_string(),
                }
            })?;
            let name = spec.name.clone();
            if map
                .insert(
                    name.clone(),
                    Arc::new(RegisteredTool {
                        tool,
                        validator: Arc::new(validator),
                    }),
                )
                .is_some()
            {
                return Err(ToolConfigError::Duplicate(name));
            }
        }
        Ok(Self::of(map))
    }

    /// The specs of every tool, in name order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.tool.spec().clone()).collect()
    }

    /// Whether no tool is configured.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Whether a call of `name` with `arguments` changes anything ([`Tool::changes_state`];
    /// `None` for an unknown tool).
    pub fn changes_state(&self, name: &str, arguments: &Value) -> Option<bool> {
        self.tools.get(name)?.tool.changes_state(arguments)
    }

    /// Validates the arguments and calls the tool.
    pub async fn call(&self, name: &str, arguments: Value) -> Result<Value, ToolError> {
        let span = tracing::info_span!(
            "agora.tool.call",
            { conv::OTEL_NAME } = conv::execute_tool_name(name),
            { conv::OPERATION_NAME } = conv::EXECUTE_TOOL,
            { conv::TOOL_NAME } = name,
            { conv::TOOL_TYPE } = "function",
            { conv::ERROR_TYPE } = tracing::field::Empty,
            { conv::OTEL_STATUS } = tracing::field::Empty,
        );
        let result = async {
            let registered = self
                .tools
                .get(name)
                .ok_or_else(|| ToolError::Unknown(name.to_string()))?;
            if let Some(reason) = schema_problems(&registered.validator, &arguments) {
                return Err(ToolError::InvalidArguments {
                    tool: name.to_string(),
                    reason,
                });
            }
            registered.tool.call(arguments).await
        }
        .instrument(span.clone())
        .await;
        if result.is_err() {
            agora_telemetry::record_error(&span, "tool_error");
        }
        result
    }
}

/// The node's tools as a shadow check calls them (see [`ToolRegistry::scratch`]): stateless
/// tools as they are, stateful ones over copies of their state.
pub struct ScratchTools {
    /// The tools to answer with.
    pub registry: ToolRegistry,
    copies: Vec<(String, Box<dyn ScratchCopy>)>,
}

impl ScratchTools {
    /// The same tools over fresh copies of these copies' states.
    pub async fn fork(&self) -> Result<ScratchTools, ToolError> {
        let mut map = BTreeMap::new();
        let mut copies = Vec::new();
        for (name, registered) in self.registry.tools.iter() {
            match self.copies.iter().find(|(copied, _)| copied == name) {
                Some((_, copy)) => {
                    let forked = copy.fork().await?;
                    map.insert(name.clone(), registered.over(forked.tool()));
                    copies.push((name.clone(), forked));
                }
                None => {
                    map.insert(name.clone(), registered.clone());
                }
            }
        }
        Ok(ScratchTools {
            registry: ToolRegistry::of(map),
            copies,
        })
    }

    /// Each copied tool's state, by tool name.
    pub async fn states(&self) -> Result<BTreeMap<String, Value>, ToolError> {
        let mut states = BTreeMap::new();
        for (name, copy) in &self.copies {
            states.insert(name.clone(), copy.state().await?);
        }
        Ok(states)
    }
}

impl ToolRegistry {
    /// The tools for a shadow check: every tool that is stateless or can copy its state, the
    /// stateful ones over copies taken now. `Err` names the first of `required` (a routine's
    /// granted tools) that cannot keep its effects off the real world; other such tools are left
    /// out, so the LLM cannot call them either.
    pub async fn scratch(&self, required: &[String]) -> Result<ScratchTools, String> {
        let mut map = BTreeMap::new();
        let mut copies = Vec::new();
        for (name, registered) in self.tools.iter() {
            match registered.tool.scratch().await {
                Ok(Scratch::Stateless) => {
                    map.insert(name.clone(), registered.clone());
                }
                Ok(Scratch::Copy(copy)) => {
                    map.insert(name.clone(), registered.over(copy.tool()));
                    copies.push((name.clone(), copy));
                }
                Ok(Scratch::Unsupported) if required.contains(name) => {
                    return Err(format!(
                        "the tool {name} has effects a check cannot keep off the real world"
                    ));
                }
                Ok(Scratch::Unsupported) => {}
                Err(error) if required.contains(name) => {
                    return Err(format!("the tool {name} could not copy its state: {error}"));
                }
                Err(error) => tracing::warn!(tool = %name, %error, "a scratch copy failed"),
            }
        }
        Ok(ScratchTools {
            registry: ToolRegistry::of(map),
            copies,
        })
    }

    /// A registry of these tools, already validated and compiled.
    fn of(tools: BTreeMap<String, Arc<RegisteredTool>>) -> Self {
        Self {
            tools: Arc::new(tools),
            node_bound: Arc::new(Vec::new()),
        }
    }
}

impl RegisteredTool {
    /// `tool` (a scratch copy of this one) registered under this one's spec and validator.
    fn over(&self, tool: Arc<dyn Tool>) -> Arc<Self> {
        Arc::new(Self {
            tool,
            validator: self.validator.clone(),
        })
    }
}

fn check_name(name: &str) -> Result<(), ToolConfigError> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if valid {
        Ok(())
    } else {
        Err(ToolConfigError::BadName(name.to_string()))
    }
}

/// A built-in's own spec under the configured name and description.
fn configured_spec(mut spec: ToolSpec, config: &ToolConfig) -> ToolSpec {
    spec.name = config.name.clone();
    if let Some(description) = &config.description {
        spec.description = description.clone();
    }
    spec
}

/// Why `value` does not match the schema behind `validator`, as one line (the first five
/// problems, each with where it is), or `None` when it matches. Tool arguments are checked with
/// this wherever they arrive (the registry, the MCP front).
pub fn schema_problems(validator: &jsonschema::Validator, value: &Value) -> Option<String> {
    // The common case, answered without building error values.
    if validator.is_valid(value) {
        return None;
    }
    let problems: Vec<String> = validator
        .iter_errors(value)
        .map(|e| format!("{} (at {})", e, e.instance_path()))
        .take(5)
        .collect();
    (!problems.is_empty()).then(|| problems.join("; "))
}

fn build_tool(
    config: &ToolConfig,
    targets: &TargetClient,
) -> Result<Arc<dyn Tool>, ToolConfigError> {
    match &config.kind {
        ToolKind::Mcp(_) => Err(ToolConfigError::NotConnected(config.name.clone())),
        ToolKind::Builtin { builtin, seed } => {
            let spec = match builtin.as_str() {
                "weather_forecast" => WeatherForecastTool::default_spec(),
                other => return Err(ToolConfigError::UnknownBuiltin(other.to_string())),
            };
            let spec = configured_spec(spec, config);
            Ok(Arc::new(WeatherForecastTool::with_spec(spec, *seed)))
        }
        ToolKind::Http {
            url,
            timeout_secs,
            max_reply_bytes,
            read_only,
        } => {
            let description = config
                .description
                .clone()
                .ok_or_else(|| ToolConfigError::Missing(config.name.clone(), "a description"))?;
            let parameters = config.parameters.clone().ok_or_else(|| {
                ToolConfigError::Missing(config.name.clone(), "a parameters schema")
            })?;
            let spec = ToolSpec {
                name: config.name.clone(),
                description,
                parameters,
                returns: config.returns.clone(),
            };
            let timeout = std::time::Duration::from_secs(timeout_secs.unwrap_or(10));
            let max_reply_bytes = max_reply_bytes.unwrap_or(DEFAULT_MAX_REPLY_BYTES);
            Ok(Arc::new(
                HttpTool::new(spec, url.clone(), targets.clone(), timeout, max_reply_bytes)
                    .read_only(*read_only),
            ))
        }
    }
}

/// The tools as a plain-text list for prompts: name, description, argument schema.
pub fn catalogue(specs: &[ToolSpec]) -> String {
    if specs.is_empty() {
        return "(no tools)".to_string();
    }
    specs
        .iter()
        .map(|spec| {
            let mut line = format!(
                "- {}: {}\n  arguments: {}",
                spec.name, spec.description, spec.parameters
            );
            if let Some(returns) = &spec.returns {
                line.push_str(&format!("\n  returns: {returns}"));
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One tool call made while answering.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The tool's name.
    pub tool: String,
    /// The arguments the LLM chose.
    pub arguments: Value,
    /// The tool's result, or its error text.
    pub result: Result<Value, String>,
}
