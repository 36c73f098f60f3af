//! The node as an MCP server: an MCP client (a desktop assistant, an IDE, an agent framework)
//! reaches the Agora network through the node's sender.
//!
//! Tools:
//! - `run_task`: runs one of the node's configured tasks against a target agent, up the
//!   sender's ladder (natural language, an existing protocol, a negotiated one, a sender
//!   routine). The result's structured content has the task's output, the rung used, the
//!   protocol, the ladder's steps, and this node's LLM calls and cost for the run; the point is
//!   that repeated calls get cheaper, down to rung `routine` with zero LLM calls;
//! - `send_message`: one natural-language message to a target agent, and its reply;
//! - `list_protocols`: the protocols a target agent lists at `/.wellknown`;
//! - `search_protocols`: a protocol database search.
//!
//! Every call goes through the node, so its LLM calls are in the node's ledger and each run is
//! in the sender's run log (`agora stats`).
//!
//! Progress: a `tools/call` whose `_meta` carries a `progressToken` gets a
//! `notifications/progress` for each step the node takes while it works (the engine's
//! [`agora_node::Observer`]: its LLM calls, each tool call and its answer), so a client sees a
//! slow answer move. A `notifications/cancelled` for the call stops it: the tool's answer is
//! dropped (what the node already wrote, such as a stored negotiation, stays).
//!
//! Errors: an unknown tool is a JSON-RPC error (`-32602`, as the spec says); everything a
//! model can correct (arguments that do not match the schema, an unknown task, a target that
//! is unreachable, refused or not allowed) is a tool result with `isError: true` and a sentence
//! saying what went wrong. Nothing here panics on input, and a failed call leaves nothing
//! half-written: the sender records a run only once it has ended.
//!
//! Targets: the caller names the agent to talk to, so the node would otherwise fetch any URL
//! for whoever holds the token. A target must be `http(s)`; when `allowed_targets` is set it
//! must start with one of them; and a target whose host is an IP literal (or `localhost`) must
//! be a public address or inside the node's `fetch.allow_networks`, like a protocol source.
//! Host names are not resolved here (a name that resolves to a private address passes; list
//! the targets in `allowed_targets` to close that).

use std::net::IpAddr;
use std::sync::Arc;

use agora_fetch::FetchPolicy;
use agora_node::{Node, SendError};
use agora_telemetry::conventions as conv;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::tower::StreamableHttpService;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// Most hits a protocol search returns.
const MAX_SEARCH_LIMIT: usize = 50;

/// Which targets the front may send to.
#[derive(Debug, Clone, Default)]
pub struct TargetRules {
    /// URL prefixes a target must start with; empty: any `http(s)` target.
    pub allowed_targets: Vec<String>,
    /// The node's fetch policy: an IP-literal target must be public or in its allowed networks.
    pub fetch: FetchPolicy,
}

impl TargetRules {
    /// `Ok` when the front may send to `target`, else why not.
    pub fn check(&self, target: &str) -> Result<(), String> {
        let parsed = url::Url::parse(target).map_err(|_| format!("{target:?} is not a URL"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!("{target:?} is not an http(s) URL"));
        }
        if !self.allowed_targets.is_empty()
            && !self.allowed_targets.iter().any(|p| target.starts_with(p))
        {
            return Err(format!(
                "{target:?} is not one of this node's allowed targets (mcp.allowed_targets)"
            ));
        }
        let ip: Option<IpAddr> = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => Some(ip.into()),
            Some(url::Host::Ipv6(ip)) => Some(ip.into()),
            Some(url::Host::Domain(name)) if name.eq_ignore_ascii_case("localhost") => {
                Some(IpAddr::from([127, 0, 0, 1]))
            }
            _ => None,
        };
        if let Some(ip) = ip {
            agora_fetch::is_allowed(ip, &self.fetch).map_err(|class| {
                format!(
                    "{target:?} is a {} address, which this node does not send to",
                    format!("{class:?}").to_lowercase()
                )
            })?;
        }
        Ok(())
    }
}

/// The node's MCP server: one per node, cheap to clone.
#[derive(Clone)]
pub struct AgoraMcp {
    node: Node,
    rules: Arc<TargetRules>,
    /// The tools and their argument validators, built once: the tasks are fixed at start-up.
    tools: Arc<Vec<FrontTool>>,
}

struct FrontTool {
    tool: Tool,
    validator: jsonschema::Validator,
}

/// A tool of the front whose input schema does not compile (a bug in this crate, or a task
/// name that breaks the schema).
#[derive(Debug, thiserror::Error)]
#[error("the MCP tool {tool} has an invalid input schema: {reason}")]
pub struct SchemaError {
    /// The tool.
    pub tool: String,
    /// Why.
    pub reason: String,
}

/// The streamable-HTTP MCP endpoint, a tower service to mount at `/mcp`.
pub type HttpService = StreamableHttpService<AgoraMcp, LocalSessionManager>;

impl AgoraMcp {
    /// The MCP server of `node`, sending only where `rules` allow.
    pub fn new(node: Node, rules: TargetRules) -> Result<Self, SchemaError> {
        let tools = tools(&node)
            .into_iter()
            .map(|tool| {
                let schema = Value::Object((*tool.input_schema).clone());
                let validator = jsonschema::validator_for(&schema).map_err(|e| SchemaError {
                    tool: tool.name.to_string(),
                    reason: e.to_string(),
                })?;
                Ok(FrontTool { tool, validator })
            })
            .collect::<Result<Vec<_>, SchemaError>>()?;
        Ok(Self {
            node,
            rules: Arc::new(rules),
            tools: Arc::new(tools),
        })
    }

    async fn run(&self, name: &str, arguments: &Map<String, Value>) -> Result<Value, String> {
        let text = |key: &str| -> Result<&str, String> {
            arguments
                .get(key)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("the argument {key:?} (a string) is missing"))
        };
        let target = |key: &str| -> Result<&str, String> {
            let target = text(key)?;
            self.rules.check(target)?;
            Ok(target)
        };
        match name {
            "run_task" => {
                let target = target("target")?;
                let task = self
                    .node
                    .task(text("task")?)
                    .map_err(|e| e.to_string())?
                    .clone();
                let input = arguments
                    .get("input")
                    .filter(|v| v.is_object())
                    .ok_or("the argument \"input\" (an object) is missing")?;
                let run = self
                    .node
                    .run_task(target, &task, input)
                    .await
                    .map_err(sentence)?;
                Ok(json!({
                    "output": run.outcome.output,
                    "rung": run.rung.as_str(),
                    "protocol": run.protocol.map(|h| h.to_hex()),
                    "steps": run.steps,
                    "llmCalls": run.llm_calls,
                    "costUsd": run.cost_usd,
                }))
            }
            "send_message" => {
                let target = target("target")?;
                let message = text("message")?;
                if message.trim().is_empty() {
                    return Err("the message is empty".into());
                }
                let reply = self
                    .node
                    .send_message(target, message)
                    .await
                    .map_err(sentence)?;
                Ok(json!({
                    "reply": reply.body,
                    "negotiationRequested": reply.negotiation_requested,
                }))
            }
            "list_protocols" => {
                let target = target("target")?;
                let listing = self.node.target_listing(target).await.map_err(sentence)?;
                Ok(json!({ "protocols": listing }))
            }
            "search_protocols" => {
                let query = text("query")?;
                let database = match arguments.get("database") {
                    None | Some(Value::Null) => None,
                    Some(_) => Some(target("database")?),
                };
                let limit = match arguments.get("limit") {
                    None | Some(Value::Null) => 10,
                    Some(v) => v
                        .as_u64()
                        .filter(|n| (1..=MAX_SEARCH_LIMIT as u64).contains(n))
                        .ok_or(format!(
                            "\"limit\" must be an integer from 1 to {MAX_SEARCH_LIMIT}"
                        ))? as usize,
                };
                let hits = self
                    .node
                    .search_protocols(database, query, limit)
                    .await
                    .map_err(sentence)?;
                Ok(json!({ "hits": hits }))
            }
            _ => Err(format!("unknown tool {name:?}")),
        }
    }
}

/// The front's tools, with their descriptions and input schemas (the public API an MCP
/// client's model reads).
fn tools(node: &Node) -> Vec<Tool> {
    let tasks = &node.config().tasks;
    let task_names: Vec<&str> = tasks.iter().map(|t| t.name.as_str()).collect();
    let catalogue = if tasks.is_empty() {
        "This node has no tasks configured.".to_string()
    } else {
        tasks
            .iter()
            .map(|t| {
                format!(
                    "- {}: {} Input schema: {}",
                    t.name, t.description, t.input_schema
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    vec![
        tool(
            "run_task",
            &format!(
                "Runs one of this node's tasks against another Agora agent and returns the \
                 task's output, checked against the task's output schema. The node picks the \
                 cheapest way it knows for that agent: natural language at first, then a \
                 protocol the two agree on, then a routine that needs no LLM at all; the \
                 structured result says which (`rung`) and what this run cost (`llmCalls`, \
                 `costUsd`). Repeating a task against the same agent makes it cheaper.\n\
                 Tasks:\n{catalogue}"
            ),
            json!({
                "type": "object",
                "properties": {
                    "task": {
                        "type": "string",
                        "enum": task_names,
                        "description": "The task to run (one of the tasks listed above)."
                    },
                    "target": {
                        "type": "string",
                        "description": "The other agent's Agora endpoint URL, e.g. https://weather.example/."
                    },
                    "input": {
                        "type": "object",
                        "description": "The task's input, matching its input schema."
                    }
                },
                "required": ["task", "target", "input"],
                "additionalProperties": false
            }),
        ),
        tool(
            "send_message",
            "Sends one natural-language message to another Agora agent and returns its reply \
             as text. Use it for a one-off question; use run_task for anything repeated.",
            json!({
                "type": "object",
                "properties": {
                    "target": target_property(),
                    "message": {
                        "type": "string",
                        "minLength": 1,
                        "description": "The message, in plain language."
                    }
                },
                "required": ["target", "message"],
                "additionalProperties": false
            }),
        ),
        tool(
            "list_protocols",
            "Lists the protocols another Agora agent supports (its /.wellknown): an object \
             from each protocol document's SHA-1 hash to the URLs it can be fetched from.",
            json!({
                "type": "object",
                "properties": {
                    "target": target_property()
                },
                "required": ["target"],
                "additionalProperties": false
            }),
        ),
        tool(
            "search_protocols",
            "Searches a protocol database for protocol documents by words in their name and \
             description. Returns the hits: name, description, hash and the URL of each \
             document.",
            json!({
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Words to look for, e.g. \"weather forecast\"."
                    },
                    "database": {
                        "type": "string",
                        "description": "The protocol database's base URL; default: the node's configured one."
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_SEARCH_LIMIT,
                        "description": "Most hits to return (default 10)."
                    }
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        ),
    ]
}

/// The `target` argument of every tool that talks to an agent.
fn target_property() -> Value {
    json!({"type": "string", "description": "The other agent's Agora endpoint URL."})
}

/// A send error as a sentence for the MCP client; no internal addresses or OS errors beyond
/// what the target itself said.
fn sentence(error: SendError) -> String {
    error.public_message()
}

fn tool(name: &'static str, description: &str, schema: Value) -> Tool {
    let Value::Object(schema) = schema else {
        unreachable!("tool schemas are objects")
    };
    Tool::new(name, description.to_string(), Arc::new(schema))
}

/// Progress notes a slow client may lag behind before the newest are dropped.
const PROGRESS_BUFFER: usize = 64;

/// Tells the node's steps to the call's progress forwarder.
struct Progress {
    steps: tokio::sync::mpsc::Sender<String>,
}

impl agora_node::Observer for Progress {
    fn observe(&self, step: agora_node::Step) {
        if let Some(summary) = step.summary() {
            // Best effort: a client that reads slowly loses progress notes, not the answer.
            let _ = self.steps.try_send(summary);
        }
    }
}

/// The error of a call its client cancelled (the client no longer reads it).
fn cancelled() -> McpError {
    McpError::internal_error("the call was cancelled by the client", None)
}

impl ServerHandler for AgoraMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                format!("agora node {}", self.node.config().name),
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "This server is an Agora node: it runs tasks against other agents and sends \
                 them messages. Prefer run_task for anything you do more than once: the node \
                 learns a protocol and a routine for it, and later calls cost no LLM at all.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(
            self.tools.iter().map(|t| t.tool.clone()).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        let Some(tool) = self.tools.iter().find(|t| t.tool.name == name) else {
            let names: Vec<&str> = self.tools.iter().map(|t| t.tool.name.as_ref()).collect();
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool {name:?}; this server has {}",
                    names.join(", ")
                ),
                None,
            ));
        };
        let arguments = request.arguments.unwrap_or_default();
        let instance = Value::Object(arguments.clone());
        if let Some(problem) = agora_node::tools::schema_problems(&tool.validator, &instance) {
            return Ok(error_result(format!("invalid arguments: {problem}")).into());
        }
        let span = tracing::info_span!(
            "agora.mcp.front",
            { conv::OTEL_NAME } = format!("tools/call {name}"),
            { conv::OTEL_KIND } = "server",
            { conv::MCP_METHOD_NAME } = "tools/call",
            { conv::OPERATION_NAME } = conv::EXECUTE_TOOL,
            { conv::TOOL_NAME } = name,
        );
        // SEP-414: the caller's trace context travels in `params._meta`.
        let field = |key: &str| context.meta.get(key).and_then(Value::as_str);
        agora_telemetry::propagation::adopt_parent_from_fields(
            &span,
            field("traceparent"),
            field("tracestate"),
        );
        let run = tracing::Instrument::instrument(self.run(name, &arguments), span);
        let outcome = match context.meta.get_progress_token() {
            Some(token) => {
                let (steps, mut told) = tokio::sync::mpsc::channel::<String>(PROGRESS_BUFFER);
                let observer: Arc<dyn agora_node::Observer> = Arc::new(Progress { steps });
                let run = agora_node::observed(observer, run);
                tokio::pin!(run);
                let mut progress = 0.0;
                let notify = |message: String, progress: f64| {
                    let note = ProgressNotificationParam::new(token.clone(), progress)
                        .with_message(message);
                    context.peer.notify_progress(note)
                };
                let outcome = loop {
                    tokio::select! {
                        outcome = &mut run => break outcome,
                        Some(message) = told.recv() => {
                            progress += 1.0;
                            // A client gone away ends the call through cancellation, not here.
                            let _ = notify(message, progress).await;
                        }
                        () = context.ct.cancelled() => return Err(cancelled()),
                    }
                };
                // Steps told just before the answer still go out before it.
                while let Ok(message) = told.try_recv() {
                    progress += 1.0;
                    let _ = notify(message, progress).await;
                }
                outcome
            }
            None => tokio::select! {
                outcome = run => outcome,
                () = context.ct.cancelled() => return Err(cancelled()),
            },
        };
        Ok(match outcome {
            Ok(value) => {
                let mut result = CallToolResult::success(vec![ContentBlock::text(
                    serde_json::to_string_pretty(&value).unwrap_or_default(),
                )]);
                result.structured_content = Some(value);
                result
            }
            Err(reason) => error_result(reason),
        }
        .into())
    }
}

fn error_result(reason: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(reason)])
}

/// Serves `front` over stdio until the client closes it.
pub async fn serve_stdio(front: AgoraMcp) -> Result<(), std::io::Error> {
    let running = front
        .serve(rmcp::transport::stdio())
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}

/// The streamable-HTTP endpoint for `front`, stateless (any replica can answer any request),
/// answering plain JSON where it can, accepting the `Host` names in `allowed_hosts` (the DNS
/// rebinding guard), and stopping when `shutdown` fires. Authentication is the mounting
/// server's job.
pub fn http_service(
    front: AgoraMcp,
    allowed_hosts: Vec<String>,
    shutdown: CancellationToken,
) -> HttpService {
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts)
        .with_cancellation_token(shutdown);
    config.legacy_session_mode = false;
    config.json_response = true;
    config.sse_keep_alive = None;
    StreamableHttpService::new(
        move || Ok(front.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_follow_the_rules() {
        let open = TargetRules::default();
        assert!(open.check("https://weather.example/").is_ok());
        assert!(open.check("ftp://weather.example/").is_err());
        assert!(open.check("not a url").is_err());
        let loopback = open.check("http://127.0.0.1:9000/").unwrap_err();
        assert!(loopback.contains("does not send to"), "{loopback}");
        assert!(open.check("http://localhost:9000/").is_err());
        assert!(open.check("http://169.254.169.254/").is_err());

        let lab = TargetRules {
            fetch: FetchPolicy::default().allowing_loopback(),
            ..TargetRules::default()
        };
        assert!(lab.check("http://127.0.0.1:9000/").is_ok());

        let listed = TargetRules {
            allowed_targets: vec!["https://weather.example/".into()],
            ..TargetRules::default()
        };
        assert!(listed.check("https://weather.example/").is_ok());
        assert!(listed.check("https://other.example/").is_err());
    }

    #[test]
    fn arguments_are_checked_against_the_schema() {
        let schema = json!({
            "type": "object",
            "properties": {"target": {"type": "string"}},
            "required": ["target"],
            "additionalProperties": false
        });
        let validator = jsonschema::validator_for(&schema).unwrap();
        let check = |arguments: Value| agora_node::tools::schema_problems(&validator, &arguments);
        assert!(check(json!({})).is_some());
        let problem = check(json!({"target": 3})).unwrap();
        assert!(problem.contains("/target"), "{problem}");
    }
}
