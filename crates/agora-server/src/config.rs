//! Node configuration: a TOML file, overridden by `AGORA_*` environment
//! variables, overridden by command-line flags.
//!
//! Every value has a default, so `agora node run` works with no file at
//! all. Nested keys map to environment variables with `__`, e.g.
//! `AGORA_NODE__DESCRIPTION` or `AGORA_LLM__BACKEND=openai`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use agora_llm::PriceTable;
use agora_node::NodeConfig;
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// The whole configuration of one node process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Store URL: `sqlite://path` (created if missing) or `postgres://...`.
    pub store: String,
    /// Milliseconds a request answered without the LLM (by a routine) may wait to be written
    /// with others. Its reply does not wait for the write: a crash can lose this much of the
    /// request log; a clean stop (Ctrl-C, SIGTERM) loses nothing.
    pub request_linger_ms: u64,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// Most Agora requests handled at once; more get `503 busy`.
    pub max_concurrent_requests: usize,
    /// Bearer token for `/admin`. Without one the admin API is off.
    pub admin_token: Option<String>,
    /// Seconds between sweeps of expired conversations.
    pub sweep_interval_secs: u64,
    /// The engine's settings.
    pub node: NodeConfig,
    /// The LLM backend.
    pub llm: LlmSettings,
    /// The protocol fetch policy.
    pub fetch: FetchSettings,
    /// The WebAssembly routine runtime.
    pub routine_runtime: RoutineRuntimeSettings,
    /// The node as an MCP server (`/mcp`, `agora mcp serve`).
    pub mcp: McpSettings,
    /// The node as an A2A agent (the agent card and `/a2a`).
    pub a2a: A2aSettings,
    /// The HTTP edge: timeouts, connection and rate limits, client authentication, the LLM work
    /// bound, idempotency and the shutdown deadline (see `crate::edge`).
    pub edge: EdgeSettings,
    /// Span export over OTLP (`docs/tracing.md`); the standard `OTEL_*` variables override it.
    pub telemetry: agora_telemetry::TelemetrySettings,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            store: "sqlite://.agora/node.db".into(),
            request_linger_ms: 5,
            max_body_bytes: 1024 * 1024,
            max_concurrent_requests: 64,
            admin_token: None,
            sweep_interval_secs: 60,
            node: NodeConfig::default(),
            llm: LlmSettings::default(),
            fetch: FetchSettings::default(),
            routine_runtime: RoutineRuntimeSettings::default(),
            mcp: McpSettings::default(),
            a2a: A2aSettings::default(),
            edge: EdgeSettings::default(),
            telemetry: agora_telemetry::TelemetrySettings::default(),
        }
    }
}

impl Config {
    /// Loads defaults, then the file (if given), then `AGORA_*` variables.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        // Only keys of this struct are read; other AGORA_* variables (paths
        // exported by the installer, test settings) are ignored.
        let keys = [
            "listen",
            "store",
            "request_linger_ms",
            "max_body_bytes",
            "max_concurrent_requests",
            "admin_token",
            "sweep_interval_secs",
            "node",
            "llm",
            "fetch",
            "routine_runtime",
            "mcp",
            "a2a",
            "edge",
            "telemetry",
        ];
        // `UncasedStr::as_str` keeps the variable's case, so compare uncased.
        figment = figment.merge(Env::prefixed("AGORA_").split("__").filter(move |key| {
            let top = key.as_str().split('.').next().unwrap_or("");
            keys.iter().any(|k| top.eq_ignore_ascii_case(k))
        }));
        let mut config: Config = figment.extract().map_err(|e| ConfigError(e.to_string()))?;
        if config.node.public_url == NodeConfig::default().public_url {
            config.node.public_url = format!("http://{}", config.listen);
        }
        Ok(config)
    }
}

/// The HTTP edge's limits (`docs/running-a-node.md`, "Limits and timeouts").
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EdgeSettings {
    /// Seconds one Agora request may take, from its first header byte to its reply, LLM work
    /// included (default 300, the sender's own default wait). Past it the reply is
    /// `503 timeout`.
    pub request_timeout_secs: u64,
    /// Seconds a client has to send a request's headers; an idle keep-alive connection is closed
    /// after as long (default 10). This is what cuts off a slow-loris client.
    pub header_timeout_secs: u64,
    /// Seconds a client has to send a request's body (default 15); past it, `408 timeout`.
    pub body_timeout_secs: u64,
    /// Most open connections (default 1024); more wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Seconds a graceful stop (SIGTERM, Ctrl-C) waits for requests in flight (default 10);
    /// those still running are then answered `503 busy`.
    pub shutdown_grace_secs: u64,
    /// Per-client request budgets.
    pub rate_limit: RateLimitSettings,
    /// The bound on Agora requests answered by the LLM at once.
    pub llm_work: LlmWorkSettings,
    /// Client authentication for the Agora endpoints, and the proxies trusted to name clients.
    pub clients: ClientSettings,
    /// `Idempotency-Key` handling.
    pub idempotency: IdempotencySettings,
}

impl Default for EdgeSettings {
    fn default() -> Self {
        Self {
            request_timeout_secs: 300,
            header_timeout_secs: 10,
            body_timeout_secs: 15,
            max_connections: 1024,
            shutdown_grace_secs: 10,
            rate_limit: RateLimitSettings::default(),
            llm_work: LlmWorkSettings::default(),
            clients: ClientSettings::default(),
            idempotency: IdempotencySettings::default(),
        }
    }
}

/// Per-client budgets (a generic cell rate: a steady rate and a burst), kept apart for requests
/// the node answers with a routine and for those its LLM answers (natural language, protocols
/// without a routine, negotiation), which cost money.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitSettings {
    /// Whether budgets apply (default true).
    pub enabled: bool,
    /// Routine-served requests per minute, per client (default 60 000, 1000 a second: a small
    /// share of what a 2-core node serves with a JavaScript routine, so one busy partner is
    /// served at full speed and no single client takes the node; docs/running-a-node.md).
    pub routine_per_minute: u32,
    /// Routine-served requests a client may send at once (default 1000).
    pub routine_burst: u32,
    /// LLM-answered requests per minute, per client (default 30).
    pub llm_per_minute: u32,
    /// LLM-answered requests a client may send at once (default 10).
    pub llm_burst: u32,
}

impl Default for RateLimitSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            routine_per_minute: 60_000,
            routine_burst: 1000,
            llm_per_minute: 30,
            llm_burst: 10,
        }
    }
}

/// How many LLM-answered requests run at once, and how many wait.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LlmWorkSettings {
    /// LLM-answered requests in flight (default 4).
    pub max_concurrent: usize,
    /// Requests waiting for a place (default 32); more are answered `503 busy` at once.
    pub max_queued: usize,
    /// Seconds a request waits for a place before it is answered `503 busy` (default 60).
    pub max_wait_secs: u64,
}

impl Default for LlmWorkSettings {
    fn default() -> Self {
        Self {
            max_concurrent: 4,
            max_queued: 32,
            max_wait_secs: 60,
        }
    }
}

/// Client authentication for `POST /` and `/conversations/...`. With neither `tokens` nor
/// `allow_networks` set, every client is served and named by its address.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ClientSettings {
    /// Client names to bearer tokens (`Authorization: Bearer <token>`); a client so named is
    /// `token:<name>` in the request ledger and has its own budget.
    pub tokens: std::collections::BTreeMap<String, String>,
    /// Networks whose peers are served without a token, e.g. `["10.0.0.0/8"]`.
    pub allow_networks: Vec<String>,
    /// Proxies (load balancers) whose `X-Forwarded-For` names the client, e.g.
    /// `["127.0.0.1/32"]`; other peers' headers are ignored.
    pub trusted_proxies: Vec<String>,
}

/// `Idempotency-Key` handling (seed 001's guide): a repeat within the window gets the stored
/// reply with no second LLM or tool call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct IdempotencySettings {
    /// Whether the header is honoured (default true).
    pub enabled: bool,
    /// Seconds a key and its reply are kept (default 86400, a day).
    pub window_secs: u64,
}

impl Default for IdempotencySettings {
    fn default() -> Self {
        Self {
            enabled: true,
            window_secs: 86_400,
        }
    }
}

/// Why the configuration could not be loaded (file, key and reason).
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

/// The node as an MCP server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpSettings {
    /// Serve `/mcp` (streamable HTTP). It is served only behind a token: `token`, or else
    /// `admin_token`; with neither it answers 403.
    pub enabled: bool,
    /// A bearer token for `/mcp` alone, so MCP clients need not hold the admin token. The
    /// admin token is accepted too.
    pub token: Option<String>,
    /// URL prefixes the MCP tools may send to; empty: any http(s) target whose address the
    /// fetch policy allows (see `agora_mcp::front`).
    pub allowed_targets: Vec<String>,
    /// `Host` header values `/mcp` accepts besides the loopback names and the public URL's
    /// host (the DNS-rebinding guard).
    pub allowed_hosts: Vec<String>,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            token: None,
            allowed_targets: Vec::new(),
            allowed_hosts: Vec::new(),
        }
    }
}

/// The node as an A2A agent: `GET /.well-known/agent-card.json` and JSON-RPC at `POST /a2a`,
/// open like `POST /` (the edge's client authentication and budgets apply).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct A2aSettings {
    /// Serve the agent card and `/a2a`.
    pub enabled: bool,
    /// Send natural-language messages to A2A agents as A2A (`SendMessage`), when a target's
    /// agent card shows one (see `agora_a2a::sender`).
    pub send: bool,
    /// Most bytes of text and data in one A2A message's parts (within `max_body_bytes`).
    pub max_message_bytes: usize,
    /// Most parts in one A2A message.
    pub max_parts: usize,
}

impl Default for A2aSettings {
    fn default() -> Self {
        let limits = agora_a2a::Limits::default();
        Self {
            enabled: true,
            send: true,
            max_message_bytes: limits.max_message_bytes,
            max_parts: limits.max_parts,
        }
    }
}

impl A2aSettings {
    /// The front's limits.
    pub fn limits(&self) -> agora_a2a::Limits {
        agora_a2a::Limits {
            max_message_bytes: self.max_message_bytes,
            max_parts: self.max_parts,
        }
    }
}

/// Which LLM answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LlmBackend {
    /// The local llama.cpp server: connect to `local.url`, or start one.
    #[default]
    Local,
    /// Any OpenAI-compatible endpoint.
    Openai,
    /// A recorded cassette; unrecorded calls fail.
    Replay,
}

/// LLM settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmSettings {
    /// The backend.
    pub backend: LlmBackend,
    /// Seconds before one LLM call times out.
    pub timeout_secs: u64,
    /// Most LLM calls in flight from this process.
    pub max_concurrency: usize,
    /// Record every call to this cassette (JSONL); resumes if it exists.
    pub record: Option<PathBuf>,
    /// The local backend.
    pub local: LocalSettings,
    /// The OpenAI-compatible backend.
    pub openai: OpenAiSettings,
    /// The cassette to replay (`backend = "replay"`).
    pub replay: Option<PathBuf>,
    /// Prices for the ledger.
    pub prices: PriceTable,
    /// Native tool calling for the responder; by default on for the
    /// `openai` backend and off for `local` (small local models do not
    /// produce native tool calls) and `replay` (set it as when recording).
    pub native_tools: Option<bool>,
}

impl Default for LlmSettings {
    fn default() -> Self {
        Self {
            backend: LlmBackend::Local,
            timeout_secs: 180,
            max_concurrency: 1,
            record: None,
            local: LocalSettings::default(),
            openai: OpenAiSettings::default(),
            replay: None,
            prices: PriceTable::default(),
            native_tools: None,
        }
    }
}

/// The local llama.cpp server.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct LocalSettings {
    /// An already running server's OpenAI base URL (`http://127.0.0.1:8011/v1`).
    /// When absent the node starts one.
    pub url: Option<String>,
    /// The `llama-server` binary (default: `$AGORA_LLAMA_SERVER`).
    pub binary: Option<PathBuf>,
    /// The GGUF model (default: `$AGORA_MODEL`).
    pub model: Option<PathBuf>,
    /// Context size in tokens (default 4096).
    pub context_size: Option<u32>,
    /// CPU threads (default 2).
    pub threads: Option<u32>,
    /// The server's log file (default: none).
    pub log_file: Option<PathBuf>,
}

/// An OpenAI-compatible endpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiSettings {
    /// Base URL, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// The environment variable holding the API key.
    pub api_key_env: String,
}

impl Default for OpenAiSettings {
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o".into(),
            api_key_env: "OPENAI_API_KEY".into(),
        }
    }
}

/// The WebAssembly routine runtime (`agora-routines`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoutineRuntimeSettings {
    /// The JavaScript engine `engine.core.wasm` (default: `$AGORA_JS_ENGINE`, exported by
    /// `scripts/install.sh`). Without it JavaScript routines cannot be built; stored ones
    /// still run.
    pub js_engine: Option<PathBuf>,
    /// Where compiled routines are cached (default: `artifacts/` beside a SQLite store; none,
    /// so compiled at every start, with Postgres).
    pub artifact_dir: Option<PathBuf>,
    /// Routine runs at once; more wait briefly, then fall back as busy (default: twice the
    /// cores, at least 4).
    pub max_concurrent: Option<usize>,
    /// Milliseconds between checks for routines changed by another process (the CLI).
    pub sync_interval_ms: u64,
    /// Seconds one routine run may wait on its tool calls, all together (default 120). Waits
    /// do not count against a routine's own deadline; tools bound themselves, this is the
    /// backstop.
    pub max_tool_wait_secs: Option<u64>,
    /// A fixed wall clock for routines, in seconds since the Unix epoch (default: none, the
    /// host's clock). For reproducible runs: the network demo sets its screenplay's day, so a
    /// routine reading `Date` answers the same in a replay as in its recording.
    pub fixed_wall_clock_unix_secs: Option<u64>,
}

impl Default for RoutineRuntimeSettings {
    fn default() -> Self {
        Self {
            js_engine: None,
            artifact_dir: None,
            max_concurrent: None,
            sync_interval_ms: 3000,
            max_tool_wait_secs: None,
            fixed_wall_clock_unix_secs: None,
        }
    }
}

/// The protocol fetch policy.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FetchSettings {
    /// Networks that may be fetched from although they are special
    /// (loopback, private, ...), e.g. `["127.0.0.0/8"]` for loopback demos.
    pub allow_networks: Vec<String>,
    /// Whether plain `http://` sources are allowed (https always is).
    pub allow_http: bool,
    /// Seconds for one fetch, body included.
    pub timeout_secs: u64,
    /// Largest accepted document, in bytes.
    pub max_bytes: usize,
    /// Most redirects followed.
    pub max_redirects: usize,
}

impl Default for FetchSettings {
    fn default() -> Self {
        Self {
            allow_networks: Vec::new(),
            allow_http: true,
            timeout_secs: 10,
            max_bytes: 256 * 1024,
            max_redirects: 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every test that loads configuration runs inside a figment `Jail`: jails
    // are serialized, so one test's environment variables never leak into
    // another's load.
    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn defaults_load_without_a_file() {
        figment::Jail::expect_with(|_| {
            let config = Config::load(None).map_err(|e| e.0)?;
            assert_eq!(config.listen.port(), 8080);
            assert_eq!(config.node.public_url, "http://127.0.0.1:8080");
            assert_eq!(config.llm.backend, LlmBackend::Local);
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn the_shipped_example_configuration_loads() {
        figment::Jail::expect_with(|_| {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../node.example.toml");
            let config = Config::load(Some(&path)).map_err(|e| e.0)?;
            assert_eq!(config.node.name, "bob");
            assert_eq!(config.node.thresholds.implementation, 5);
            assert_eq!(config.node.programmer.max_routine_failures, 3);
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn a_key_the_node_no_longer_has_is_refused_by_name() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("node.toml", "[node.programmer]\ngrading = \"lenient\"\n")?;
            let error = Config::load(Some(Path::new("node.toml"))).unwrap_err().0;
            assert!(error.to_string().contains("grading"), "{error}");
            Ok(())
        });
    }

    /// The TOML blocks of the guide `docs/<file>`'s section under `heading`, up to the next
    /// `## ` heading.
    fn guide_toml(file: &str, heading: &str) -> Result<String, String> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs")
            .join(file);
        let guide = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        let section = guide
            .split(heading)
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .ok_or(format!("docs/{file} has no {heading} section"))?;
        Ok(section
            .split("```toml\n")
            .skip(1)
            .filter_map(|block| block.split("```").next())
            .collect())
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn the_a2a_guides_configuration_loads() {
        let toml = guide_toml("a2a-and-agent-protocol.md", "## Using A2A");
        figment::Jail::expect_with(|jail| {
            jail.create_file("node.toml", &toml?)?;
            let config = Config::load(Some(Path::new("node.toml"))).map_err(|e| e.0)?;
            assert!(config.a2a.enabled);
            assert_eq!(config.a2a.limits().max_message_bytes, 32768);
            assert_eq!(config.a2a.limits().max_parts, 8);
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn the_mcp_guides_configuration_loads() {
        let toml = guide_toml("mcp.md", "## Using MCP");
        figment::Jail::expect_with(|jail| {
            jail.create_file("node.toml", &toml?)?;
            let config = Config::load(Some(Path::new("node.toml"))).map_err(|e| e.0)?;
            let servers: Vec<&agora_node::McpServerConfig> = config
                .node
                .tools
                .iter()
                .filter_map(|t| match &t.kind {
                    agora_node::ToolKind::Mcp(server) => Some(server),
                    _ => None,
                })
                .collect();
            assert_eq!(servers.len(), 2);
            assert_eq!(servers[0].command[0], "mcp-server-time");
            assert_eq!(servers[0].call_timeout_secs, Some(30));
            assert_eq!(servers[1].url.as_deref(), Some("http://127.0.0.1:3001/mcp"));
            assert_eq!(servers[1].tools.as_ref().map(Vec::len), Some(2));
            assert_eq!(config.mcp.token.as_deref(), Some("change-me"));
            assert!(config.mcp.enabled);
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn the_limits_guides_configuration_loads_and_builds_the_edge() {
        let toml = guide_toml("running-a-node.md", "## Limits and timeouts");
        figment::Jail::expect_with(|jail| {
            jail.create_file("node.toml", &toml?)?;
            jail.set_env("AGORA_EDGE__RATE_LIMIT__LLM_BURST", "3");
            let config = Config::load(Some(Path::new("node.toml"))).map_err(|e| e.0)?;
            let edge = &config.edge;
            assert_eq!(edge.request_timeout_secs, 120);
            assert_eq!(edge.rate_limit.llm_per_minute, 10);
            assert_eq!(
                edge.rate_limit.llm_burst, 3,
                "the environment overrides the file"
            );
            assert_eq!(
                edge.rate_limit.routine_burst, 1000,
                "defaults fill the rest"
            );
            assert_eq!(edge.clients.tokens["partner-a"], "a-long-random-token");
            crate::edge::Edge::new(edge).map_err(|e| e.to_string())?;
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn an_unknown_mcp_server_key_is_an_error() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "node.toml",
                "[[node.tools]]\nname = \"t\"\nkind = \"mcp\"\ncommand = [\"x\"]\ncomand = [\"y\"]\n",
            )?;
            let error = Config::load(Some(Path::new("node.toml"))).unwrap_err();
            assert!(error.0.contains("comand"), "{}", error.0);
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn file_values_override_defaults() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "node.toml",
                r#"
listen = "127.0.0.1:9100"
[node]
description = "Weather node"
[[node.tools]]
name = "weather"
kind = "builtin"
builtin = "weather_forecast"
[llm]
backend = "replay"
replay = "x.jsonl"
[fetch]
allow_networks = ["127.0.0.0/8"]
"#,
            )?;
            let config = Config::load(Some(Path::new("node.toml"))).map_err(|e| e.0)?;
            assert_eq!(config.listen.port(), 9100);
            assert_eq!(config.node.public_url, "http://127.0.0.1:9100");
            assert_eq!(config.node.description, "Weather node");
            assert_eq!(config.node.tools.len(), 1);
            assert_eq!(config.llm.backend, LlmBackend::Replay);
            assert_eq!(config.fetch.allow_networks, vec!["127.0.0.0/8".to_string()]);
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn environment_overrides_the_file() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "node.toml",
                "store = \"sqlite://from-file.db\"\n[node]\nname = \"file\"\n",
            )?;
            jail.set_env("AGORA_STORE", "sqlite://from-env.db");
            jail.set_env("AGORA_NODE__DESCRIPTION", "from env");
            jail.set_env("AGORA_MODEL", "/not/a/config/key.gguf");
            let config = Config::load(Some(Path::new("node.toml"))).map_err(|e| e.0)?;
            assert_eq!(config.store, "sqlite://from-env.db");
            assert_eq!(config.node.name, "file");
            assert_eq!(config.node.description, "from env");
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's `Jail` API fixes the error type
    fn unknown_keys_in_sections_are_errors() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("node.toml", "[llm]\nbakend = \"openai\"\n")?;
            assert!(Config::load(Some(Path::new("node.toml"))).is_err());
            Ok(())
        });
    }
}
