//! MCP servers as node tools: the node as an MCP client.
//!
//! [`connect`] starts (stdio) or connects to (streamable HTTP) every `kind = "mcp"` entry of the
//! node's tool configuration, lists its tools and returns one [`Tool`] per MCP tool, which the
//! composition root hands to `ToolRegistry::from_config_with`. From there an MCP tool is an
//! ordinary node tool: the registry validates its arguments against the server's input schema,
//! the responder offers it, routines call it through `callTool` when granted, and programmer
//! examples record its calls.
//!
//! Names: an MCP tool keeps its own name, with characters other than letters, digits, `_` and
//! `-` written as `_`; a name that another tool already has (or that two servers share) is
//! prefixed with the server's name, `<server>_<tool>`, and `prefix = true` prefixes them all.
//!
//! Lifecycle, per server (a supervisor task each):
//! - a server that is down (its process died, its connection closed) is started again, first
//!   after 1 s, then after twice the previous wait, up to 60 s; a success resets the wait;
//! - a call while it is down fails at once with "the MCP server ... is not running"; every call
//!   has a deadline (`call_timeout_secs`, default 30 s), so a slow server fails that call and
//!   never holds the node;
//! - `notifications/tools/list_changed` refreshes the server's list. The node's registry is
//!   fixed at start-up: a tool that disappeared fails its calls with a clear error, a new one is
//!   logged and offered from the next start;
//! - [`McpServers::shutdown`] closes every connection; a stdio child gets the spec's shutdown
//!   (stdin closed, then SIGTERM, then SIGKILL).
//!
//! A stdio child does not inherit the node's environment: it gets `PATH`, `HOME`, `LANG` and
//! `TMPDIR` plus the configured `env`, so the node's tokens and keys stay with the node. Its
//! stderr goes to the node's log (target `agora_mcp::server_log`, debug level).
//!
//! Bad input from a server becomes a tool error with a reason: a tool whose input schema is not
//! a valid JSON Schema is offered with an open object schema and fails every call saying so; a
//! result that is an error, too large or not an MCP result fails the call (see `result`).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use agora_node::tools::Scratch;
use agora_node::{McpServerConfig, Tool, ToolConfig, ToolError, ToolKind, ToolSpec};
use agora_telemetry::conventions as conv;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::result::{self, ResultError};

/// Default deadline of one tool call.
const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Default deadline for starting a server and listing its tools.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default largest result, in bytes of JSON.
const DEFAULT_MAX_RESULT_BYTES: usize = 1 << 20;
/// First wait before restarting a server that went down; doubled after each failed start.
const FIRST_RESTART_WAIT: Duration = Duration::from_secs(1);
/// Longest wait between restarts.
const MAX_RESTART_WAIT: Duration = Duration::from_secs(60);
/// How often a supervisor looks at its server.
const SUPERVISOR_TICK: Duration = Duration::from_millis(250);
/// Environment variables a stdio server inherits from the node.
const INHERITED_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TMPDIR"];
/// Longest stderr line of a server that is logged.
const MAX_LOG_LINE: usize = 2000;

/// Why the MCP servers could not be connected at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The configuration of a server is unusable.
    #[error("MCP server {server:?}: {reason}")]
    BadConfig {
        /// The server's name.
        server: String,
        /// What is wrong.
        reason: String,
    },
    /// The server did not start, or did not list its tools in time.
    #[error("MCP server {server:?} did not start: {reason}")]
    Start {
        /// The server's name.
        server: String,
        /// Why.
        reason: String,
    },
}

/// The running MCP servers of a node; stop them with [`McpServers::shutdown`].
#[derive(Default)]
pub struct McpServers {
    connections: Vec<Arc<Connection>>,
    supervisors: TaskTracker,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.connections.iter().map(|c| &c.server))
            .finish()
    }
}

impl McpServers {
    /// Whether any MCP server is configured.
    pub fn is_empty(&self) -> bool {
        self.connections.is_empty()
    }

    /// The process id of a stdio server's current child (for tests and operators).
    pub fn child_pid(&self, server: &str) -> Option<u32> {
        let connection = self.connections.iter().find(|c| c.server == server)?;
        *connection.pid.lock().ok()?
    }

    /// Closes every connection and stops every stdio child, waiting for them.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        self.supervisors.close();
        self.supervisors.wait().await;
    }
}

/// Connects every MCP server in `configs` and returns their tools (named as the module docs
/// say) and the handle that keeps them running. Other tools in `configs` are only read for
/// their names.
pub async fn connect(
    configs: &[ToolConfig],
) -> Result<(Vec<Arc<dyn Tool>>, McpServers), ConnectError> {
    let mut servers = McpServers::default();
    let mut listed = Vec::new();
    for config in configs {
        let ToolKind::Mcp(mcp) = &config.kind else {
            continue;
        };
        check_config(&config.name, mcp)?;
        let connection = Arc::new(Connection::new(
            config.name.clone(),
            mcp.clone(),
            servers.shutdown.child_token(),
        ));
        let tools = connection
            .start()
            .await
            .map_err(|reason| ConnectError::Start {
                server: config.name.clone(),
                reason,
            })?;
        let wanted: Option<BTreeSet<&String>> = mcp.tools.as_ref().map(|t| t.iter().collect());
        if let Some(wanted) = &wanted {
            let offered: BTreeSet<&String> = tools.iter().map(|t| &t.name).collect();
            if let Some(missing) = wanted.iter().find(|name| !offered.contains(**name)) {
                return Err(ConnectError::BadConfig {
                    server: config.name.clone(),
                    reason: format!("it has no tool {missing:?} (configured in `tools`)"),
                });
            }
        }
        let tools: Vec<RemoteTool> = tools
            .into_iter()
            .filter(|t| wanted.as_ref().is_none_or(|w| w.contains(&t.name)))
            .collect();
        tracing::info!(
            server = %config.name,
            tools = tools.len(),
            "MCP server connected"
        );
        listed.push((connection.clone(), tools));
        let supervised = connection.clone();
        servers
            .supervisors
            .spawn(async move { supervised.supervise().await });
        servers.connections.push(connection);
    }
    let taken: BTreeSet<String> = configs
        .iter()
        .filter(|c| !matches!(c.kind, ToolKind::Mcp(_)))
        .map(|c| c.name.clone())
        .collect();
    let names = local_names(&taken, &listed);
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for ((connection, remote_tools), names) in listed.into_iter().zip(names) {
        for (remote, name) in remote_tools.into_iter().zip(names) {
            tools.push(Arc::new(McpTool::new(name, remote, connection.clone())));
        }
    }
    Ok((tools, servers))
}

fn check_config(server: &str, config: &McpServerConfig) -> Result<(), ConnectError> {
    let bad = |reason: &str| ConnectError::BadConfig {
        server: server.to_string(),
        reason: reason.to_string(),
    };
    match (config.command.is_empty(), &config.url) {
        (true, None) => Err(bad("give `command` (stdio) or `url` (streamable HTTP)")),
        (false, Some(_)) => Err(bad("give `command` or `url`, not both")),
        (false, None) if config.bearer_token_env.is_some() => {
            Err(bad("`bearer_token_env` is for `url` servers"))
        }
        (true, Some(url)) if !(url.starts_with("http://") || url.starts_with("https://")) => {
            Err(bad("`url` must be http:// or https://"))
        }
        _ => Ok(()),
    }
}

/// A tool as a server listed it.
#[derive(Debug, Clone)]
struct RemoteTool {
    name: String,
    description: String,
    input_schema: Value,
    output_schema: Option<Value>,
    /// The server's `readOnlyHint`: the tool does not modify its environment.
    read_only: bool,
}

/// Local names for every listed tool, in order (see the module docs).
fn local_names(
    taken: &BTreeSet<String>,
    listed: &[(Arc<Connection>, Vec<RemoteTool>)],
) -> Vec<Vec<String>> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (_, tools) in listed {
        for tool in tools {
            *counts.entry(sanitize(&tool.name)).or_default() += 1;
        }
    }
    listed
        .iter()
        .map(|(connection, tools)| {
            tools
                .iter()
                .map(|tool| {
                    let plain = sanitize(&tool.name);
                    let clashes = taken.contains(&plain) || counts[&plain] > 1;
                    if connection.config.prefix || clashes {
                        format!("{}_{plain}", sanitize(&connection.server))
                    } else {
                        plain
                    }
                })
                .collect()
        })
        .collect()
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The client side of one connection: answers the server's notifications.
struct Listener {
    connection: Weak<Connection>,
}

impl ClientHandler for Listener {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let Some(connection) = self.connection.upgrade() else {
            return;
        };
        let timeout = connection.connect_timeout();
        match tokio::time::timeout(timeout, context.peer.list_all_tools()).await {
            Ok(Ok(tools)) => {
                let tools = tools.into_iter().map(remote_tool).collect::<Vec<_>>();
                connection.set_listed(&tools);
                tracing::info!(server = %connection.server, tools = tools.len(), "MCP tool list refreshed");
            }
            Ok(Err(error)) => {
                tracing::warn!(server = %connection.server, %error, "MCP tool list refresh failed")
            }
            Err(_) => {
                tracing::warn!(server = %connection.server, "MCP tool list refresh timed out")
            }
        }
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("agora", env!("CARGO_PKG_VERSION")),
        )
    }
}

type Client = RunningService<RoleClient, Listener>;

/// One MCP server: its current client, if it is up, and its restart schedule.
struct Connection {
    server: String,
    config: McpServerConfig,
    client: tokio::sync::Mutex<Option<Client>>,
    /// The names the server lists now.
    listed: RwLock<BTreeSet<String>>,
    /// The current stdio child's pid.
    pid: Mutex<Option<u32>>,
    health: Mutex<Health>,
    shutdown: CancellationToken,
}

#[derive(Debug)]
struct Health {
    /// Failed starts since the last success.
    failures: u32,
    /// The earliest next start.
    next_start: Instant,
    /// Why it is down, if it is.
    last_error: Option<String>,
}

impl Connection {
    fn new(server: String, config: McpServerConfig, shutdown: CancellationToken) -> Self {
        Self {
            server,
            config,
            client: tokio::sync::Mutex::new(None),
            listed: RwLock::new(BTreeSet::new()),
            pid: Mutex::new(None),
            health: Mutex::new(Health {
                failures: 0,
                next_start: Instant::now(),
                last_error: None,
            }),
            shutdown,
        }
    }

    fn connect_timeout(&self) -> Duration {
        self.config
            .connect_timeout_secs
            .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_secs)
    }

    fn call_timeout(&self) -> Duration {
        self.config
            .call_timeout_secs
            .map_or(DEFAULT_CALL_TIMEOUT, Duration::from_secs)
    }

    fn max_result_bytes(&self) -> usize {
        self.config
            .max_result_bytes
            .unwrap_or(DEFAULT_MAX_RESULT_BYTES)
    }

    fn set_listed(&self, tools: &[RemoteTool]) {
        if let Ok(mut listed) = self.listed.write() {
            *listed = tools.iter().map(|t| t.name.clone()).collect();
        }
    }

    fn is_listed(&self, name: &str) -> bool {
        self.listed.read().map(|l| l.contains(name)).unwrap_or(true)
    }

    /// Starts the server and lists its tools, within the connect deadline.
    async fn start(self: &Arc<Self>) -> Result<Vec<RemoteTool>, String> {
        let listener = Listener {
            connection: Arc::downgrade(self),
        };
        let deadline = self.connect_timeout();
        let started = tokio::time::timeout(deadline, async {
            let client = match &self.config.url {
                Some(url) => {
                    let mut transport = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                    if let Some(variable) = &self.config.bearer_token_env {
                        let token = std::env::var(variable).map_err(|_| {
                            format!("the environment variable {variable} is not set")
                        })?;
                        transport = transport.auth_header(token);
                    }
                    listener
                        .serve(StreamableHttpClientTransport::from_config(transport))
                        .await
                        .map_err(|e| e.to_string())?
                }
                None => {
                    let (transport, pid) = self.spawn_child()?;
                    if let Ok(mut slot) = self.pid.lock() {
                        *slot = pid;
                    }
                    listener.serve(transport).await.map_err(|e| e.to_string())?
                }
            };
            let tools = client
                .peer()
                .list_all_tools()
                .await
                .map_err(|e| format!("listing its tools failed: {e}"))?;
            Ok::<_, String>((client, tools))
        })
        .await
        .map_err(|_| format!("no answer within {} s", deadline.as_secs()))?;
        let (client, tools) = started?;
        let tools: Vec<RemoteTool> = tools.into_iter().map(remote_tool).collect();
        self.set_listed(&tools);
        *self.client.lock().await = Some(client);
        if let Ok(mut health) = self.health.lock() {
            health.failures = 0;
            health.last_error = None;
        }
        Ok(tools)
    }

    fn spawn_child(&self) -> Result<(TokioChildProcess, Option<u32>), String> {
        let (program, args) = self
            .config
            .command
            .split_first()
            .ok_or_else(|| "no command".to_string())?;
        let mut command = tokio::process::Command::new(program);
        command.args(args).env_clear();
        for variable in INHERITED_ENV {
            if let Ok(value) = std::env::var(variable) {
                command.env(variable, value);
            }
        }
        command.envs(&self.config.env);
        let (transport, stderr) = TokioChildProcess::builder(command)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("could not run {program}: {e}"))?;
        let pid = transport.id();
        if let Some(stderr) = stderr {
            let server = self.server.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let line: String = line.chars().take(MAX_LOG_LINE).collect();
                    tracing::debug!(target: "agora_mcp::server_log", %server, "{line}");
                }
            });
        }
        Ok((transport, pid))
    }

    /// Whether the current client is up.
    async fn is_up(&self) -> bool {
        match self.client.lock().await.as_ref() {
            Some(client) => !client.is_closed() && !client.peer().is_transport_closed(),
            None => false,
        }
    }

    /// Restarts the server when it is down and its wait is over, until shutdown.
    async fn supervise(self: Arc<Self>) {
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => break,
                () = tokio::time::sleep(SUPERVISOR_TICK) => {}
            }
            if self.is_up().await {
                continue;
            }
            let due = self
                .health
                .lock()
                .map(|h| Instant::now() >= h.next_start)
                .unwrap_or(true);
            if !due {
                continue;
            }
            if let Some(mut old) = self.client.lock().await.take() {
                let _ = old.close_with_timeout(Duration::from_secs(5)).await;
                tracing::warn!(server = %self.server, "MCP server went down; starting it again");
            }
            match self.start().await {
                Ok(tools) => {
                    tracing::info!(server = %self.server, tools = tools.len(), "MCP server restarted")
                }
                Err(error) => {
                    if let Ok(mut health) = self.health.lock() {
                        health.failures = health.failures.saturating_add(1);
                        let wait = FIRST_RESTART_WAIT
                            .saturating_mul(1 << health.failures.min(6))
                            .min(MAX_RESTART_WAIT);
                        health.next_start = Instant::now() + wait;
                        tracing::warn!(server = %self.server, %error, retry_in_s = wait.as_secs(), "MCP server did not start");
                        health.last_error = Some(error);
                    }
                }
            }
        }
        if let Some(mut client) = self.client.lock().await.take() {
            let _ = client.close_with_timeout(Duration::from_secs(5)).await;
        }
    }

    /// Calls one tool of the server, within the call deadline.
    async fn call(&self, remote: &str, arguments: Value) -> Result<Value, String> {
        if !self.is_listed(remote) {
            return Err(format!(
                "the MCP server {} no longer offers this tool",
                self.server
            ));
        }
        let peer = {
            let client = self.client.lock().await;
            match client.as_ref() {
                Some(c) if !c.is_closed() && !c.peer().is_transport_closed() => c.peer().clone(),
                _ => {
                    let why = self
                        .health
                        .lock()
                        .ok()
                        .and_then(|h| h.last_error.clone())
                        .map(|e| format!(" (last start: {e})"))
                        .unwrap_or_default();
                    return Err(format!(
                        "the MCP server {} is not running; it is being restarted{why}",
                        self.server
                    ));
                }
            }
        };
        let mut params = CallToolRequestParams::new(remote.to_string());
        if let Value::Object(arguments) = arguments {
            params.arguments = Some(arguments);
        }
        // SEP-414: the tool span's trace context travels in `params._meta`, on any transport.
        let trace = agora_telemetry::propagation::outgoing_fields();
        if !trace.is_empty() {
            let mut meta = params.meta.take().unwrap_or_default();
            for (key, value) in trace {
                meta.insert(key, Value::String(value));
            }
            params.meta = Some(meta);
        }
        let timeout = self.call_timeout();
        let result = tokio::time::timeout(timeout, peer.call_tool(params))
            .await
            .map_err(|_| format!("no answer within {} s", timeout.as_secs()))?
            .map_err(|e| format!("the call failed: {e}"))?;
        let result = serde_json::to_value(&result).map_err(|e| e.to_string())?;
        result::tool_value(&result, self.max_result_bytes()).map_err(|e| match e {
            ResultError::ToolFailed(reason) => reason,
            other => other.to_string(),
        })
    }
}

fn remote_tool(tool: rmcp::model::Tool) -> RemoteTool {
    RemoteTool {
        name: tool.name.to_string(),
        description: tool
            .description
            .map(|d| d.to_string())
            .or(tool.title)
            .unwrap_or_default(),
        input_schema: Value::Object((*tool.input_schema).clone()),
        output_schema: tool.output_schema.map(|s| Value::Object((*s).clone())),
        read_only: tool
            .annotations
            .and_then(|annotations| annotations.read_only_hint)
            .unwrap_or(false),
    }
}

/// One MCP tool as a node tool.
struct McpTool {
    spec: ToolSpec,
    remote: String,
    connection: Arc<Connection>,
    /// Why the server's input schema was not usable, if it was not.
    bad_schema: Option<String>,
    /// The server says the tool only reads: a shadow check may call it.
    read_only: bool,
}

impl McpTool {
    fn new(name: String, remote: RemoteTool, connection: Arc<Connection>) -> Self {
        let bad_schema = match jsonschema::validator_for(&remote.input_schema) {
            Ok(_) if remote.input_schema.get("type") == Some(&json!("object")) => None,
            Ok(_) => Some("its input schema is not an object schema".to_string()),
            Err(error) => Some(format!("its input schema is invalid: {error}")),
        };
        let parameters = match &bad_schema {
            None => remote.input_schema.clone(),
            Some(_) => json!({"type": "object"}),
        };
        let description = if remote.description.trim().is_empty() {
            format!(
                "Tool {} of the MCP server {}.",
                remote.name, connection.server
            )
        } else {
            remote.description.clone()
        };
        Self {
            spec: ToolSpec {
                name,
                description,
                parameters,
                returns: remote.output_schema,
            },
            remote: remote.name,
            connection,
            bad_schema,
            read_only: remote.read_only,
        }
    }
}

#[async_trait::async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let failed = |reason: String| ToolError::failed(&self.spec.name, reason);
        if let Some(problem) = &self.bad_schema {
            return Err(failed(format!(
                "the MCP server {} gave this tool an unusable schema ({problem})",
                self.connection.server
            )));
        }
        let span = tracing::info_span!(
            "agora.mcp.call",
            { conv::OTEL_NAME } = format!("tools/call {}", self.remote),
            { conv::OTEL_KIND } = "client",
            { conv::MCP_METHOD_NAME } = "tools/call",
            { conv::TOOL_NAME } = %self.remote,
            server = %self.connection.server,
        );
        tracing::Instrument::instrument(self.connection.call(&self.remote, arguments), span)
            .await
            .map_err(failed)
    }

    /// A tool its server marks `readOnlyHint` runs as it is in a shadow check; any other may
    /// change the server's world, so a routine granted it is not checked. The hint is the
    /// server's word: the operator chose to trust the server when they configured it.
    async fn scratch(&self) -> Result<Scratch, ToolError> {
        Ok(Scratch::declared(self.read_only))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(name: &str) -> RemoteTool {
        RemoteTool {
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            read_only: false,
        }
    }

    fn connection(server: &str, prefix: bool) -> Arc<Connection> {
        Arc::new(Connection::new(
            server.into(),
            McpServerConfig {
                prefix,
                ..McpServerConfig::default()
            },
            CancellationToken::new(),
        ))
    }

    #[test]
    fn names_are_prefixed_only_where_they_would_clash() {
        let taken: BTreeSet<String> = ["echo".to_string()].into();
        let listed = vec![
            (
                connection("time", false),
                vec![remote("get_current_time"), remote("add")],
            ),
            (
                connection("everything", false),
                vec![remote("echo"), remote("add"), remote("a.b/c")],
            ),
            (connection("all", true), vec![remote("solo")]),
        ];
        assert_eq!(
            local_names(&taken, &listed),
            vec![
                vec!["get_current_time".to_string(), "time_add".into()],
                vec![
                    "everything_echo".to_string(),
                    "everything_add".into(),
                    "a_b_c".into()
                ],
                vec!["all_solo".to_string()],
            ]
        );
    }

    #[test]
    fn a_server_needs_exactly_one_way_in() {
        let neither = McpServerConfig::default();
        assert!(matches!(
            check_config("x", &neither),
            Err(ConnectError::BadConfig { reason, .. }) if reason.contains("give `command`")
        ));
        let both = McpServerConfig {
            command: vec!["x".into()],
            url: Some("http://127.0.0.1:1/mcp".into()),
            ..McpServerConfig::default()
        };
        assert!(check_config("x", &both).is_err());
        let file = McpServerConfig {
            url: Some("file:///etc/passwd".into()),
            ..McpServerConfig::default()
        };
        assert!(check_config("x", &file).is_err());
    }

    #[tokio::test]
    async fn an_invalid_input_schema_fails_every_call_with_the_reason() {
        let bad = RemoteTool {
            input_schema: json!({"type": "object", "properties": {"a": {"type": 7}}}),
            ..remote("broken")
        };
        let tool = McpTool::new("broken".into(), bad, connection("srv", false));
        assert_eq!(tool.spec().parameters, json!({"type": "object"}));
        let error = tool.call(json!({})).await.unwrap_err();
        assert!(error.to_string().contains("unusable schema"), "{error}");
    }

    #[tokio::test]
    async fn a_call_to_a_server_that_is_down_fails_at_once() {
        let connection = connection("srv", false);
        connection.set_listed(&[remote("t")]);
        let tool = McpTool::new("t".into(), remote("t"), connection);
        let error = tool.call(json!({})).await.unwrap_err();
        assert!(error.to_string().contains("is not running"), "{error}");
    }

    #[tokio::test]
    async fn only_a_tool_its_server_marks_read_only_is_called_in_shadow_checks() {
        let listed = |hint: Option<bool>| {
            let mut tool = rmcp::model::Tool::new(
                "t",
                "a tool",
                Arc::new(serde_json::Map::from_iter([(
                    "type".to_string(),
                    json!("object"),
                )])),
            );
            tool.annotations = hint.map(|hint| rmcp::model::ToolAnnotations::new().read_only(hint));
            McpTool::new("t".into(), remote_tool(tool), connection("srv", false))
        };
        assert!(matches!(
            listed(Some(true)).scratch().await,
            Ok(Scratch::Stateless)
        ));
        assert!(matches!(
            listed(Some(false)).scratch().await,
            Ok(Scratch::Unsupported)
        ));
        assert!(matches!(
            listed(None).scratch().await,
            Ok(Scratch::Unsupported)
        ));
    }
}
