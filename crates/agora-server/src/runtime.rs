//! Building a node from its configuration, and serving it.
//!
//! This is where configuration meets the world: the store is opened (and
//! migrated), the LLM backend chosen (connecting to or starting the local
//! llama.cpp server, an OpenAI-compatible endpoint, or a cassette), the
//! fetch policy, tools and routine runtime built, and the stored routines
//! loaded. [`serve`] runs the HTTP server and a background task (conversation
//! sweeps, and routine syncs that pick up changes the CLI made) until the
//! shutdown token fires, then drains both.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agora_fetch::{FetchPolicy, Fetcher, TargetClient, TargetPolicy};
use agora_llm::{
    Llm, LocalServer, LocalServerConfig, OpenAiBackend, OpenAiConfig, RecordingLlm, ReplayLlm,
};
use agora_mcp::{AgoraMcp, McpServers, TargetRules};
use agora_node::{Node, NodeParts, RoutineEngine, SyncReport, SystemClock, ToolRegistry};
use agora_routines::{RuntimeConfig, WasmRuntime};
use agora_store::{Store, StoreOptions};
use anyhow::{Context, bail};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::app::{AppState, McpEndpoint, router};
use crate::config::{Config, FetchSettings, LlmBackend, LlmSettings, RoutineRuntimeSettings};

/// A node ready to serve, with whatever it owns (a local LLM server).
pub struct RunningNode {
    /// The engine.
    pub node: Node,
    /// The HTTP state.
    pub state: AppState,
    /// The configuration it was built from.
    pub config: Config,
    /// A short description of the LLM backend in use.
    pub llm_description: String,
    /// The local LLM server this node started, if any; stopped on drop.
    pub local_server: Option<LocalServer>,
    /// The routines loaded at start-up.
    pub routines: SyncReport,
    /// The MCP servers whose tools the node offers; stopped by [`serve`] (or
    /// [`RunningNode::shutdown`]).
    pub mcp_servers: McpServers,
    /// Stops the `/mcp` endpoint's streams.
    pub mcp_shutdown: CancellationToken,
}

impl RunningNode {
    /// Stops what the node started besides HTTP: its MCP servers and `/mcp` streams. [`serve`]
    /// does this when it ends; commands that build a node without serving call it themselves.
    pub async fn shutdown(&self) {
        self.mcp_shutdown.cancel();
        self.mcp_servers.shutdown().await;
    }
}

/// The node's tools: the configured ones, with every MCP server started or connected.
pub async fn build_tools(
    configs: &[agora_node::ToolConfig],
    targets: &TargetClient,
) -> anyhow::Result<(ToolRegistry, McpServers)> {
    let (connected, servers) = agora_mcp::connect(configs)
        .await
        .context("connecting the MCP servers")?;
    let tools = ToolRegistry::from_config_with(configs, targets, connected)
        .context("building the tools")?;
    Ok((tools, servers))
}

/// The node's MCP server, `agora_mcp::front`, with the targets its tools may send to.
pub fn mcp_front(node: &Node, config: &Config) -> anyhow::Result<AgoraMcp> {
    AgoraMcp::new(node.clone(), task_targets(config)?).context("building the MCP front")
}

/// Where a caller (an MCP client, an Agent Protocol task run) may have the node send a task.
pub fn task_targets(config: &Config) -> anyhow::Result<TargetRules> {
    Ok(TargetRules {
        allowed_targets: config.mcp.allowed_targets.clone(),
        fetch: fetch_policy(&config.fetch)?,
    })
}

/// Opens the store, builds the LLM, the HTTP clients and tools, and assembles the node.
pub async fn build_node(config: Config) -> anyhow::Result<RunningNode> {
    let mut config = config;
    match config.llm.native_tools {
        Some(native) => config.node.responder.native_tools = native,
        None if config.llm.backend == LlmBackend::Openai => {
            config.node.responder.native_tools = true
        }
        None => {}
    }
    let options = StoreOptions {
        request_linger: Some(Duration::from_millis(config.request_linger_ms)),
        ..StoreOptions::default()
    };
    let store = open_store_with(&config.store, options).await?;
    let (llm, llm_description, local_server) = build_llm(&config.llm).await?;
    let fetcher =
        Fetcher::new(fetch_policy(&config.fetch)?).context("building the protocol fetcher")?;
    let targets = TargetClient::new(TargetPolicy::default())
        .context("building the client for configured targets")?;
    let (tools, mcp_servers) = build_tools(&config.node.tools, &targets).await?;
    let a2a_targets = targets.clone();
    let routine_engine = build_routine_engine(&config.routine_runtime, &config.store)?;
    let node = Node::new(NodeParts {
        config: config.node.clone(),
        store,
        llm,
        fetcher,
        targets,
        tools,
        prices: config.llm.prices.clone(),
        clock: Arc::new(SystemClock),
        routine_engine: Some(routine_engine),
    });
    // Compiling (or reading the artifact cache) happens here, before the first request.
    let routines = node
        .sync_routines()
        .await
        .context("loading the stored routines")?;
    let mut state = AppState::new(
        node.clone(),
        config.admin_token.clone(),
        config.max_body_bytes,
        config.max_concurrent_requests,
    )
    .with_edge(&config.edge)
    .context("reading the edge settings")?;
    state.task_targets = Arc::new(task_targets(&config)?);
    let mcp_shutdown = CancellationToken::new();
    if config.mcp.enabled {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).into();
        if let Ok(public) = url::Url::parse(&config.node.public_url)
            && let Some(host) = public.host_str()
        {
            hosts.push(host.trim_matches(['[', ']']).to_string());
        }
        hosts.extend(config.mcp.allowed_hosts.iter().cloned());
        state.mcp = Some(McpEndpoint::new(
            agora_mcp::http_service(mcp_front(&node, &config)?, hosts, mcp_shutdown.clone()),
            config.mcp.token.as_deref(),
        ));
    }
    if config.a2a.enabled {
        state.a2a = Some(agora_a2a::A2aFront::new(node.clone(), config.a2a.limits()));
    }
    if config.a2a.send {
        let sender = &config.node.sender;
        node.add_foreign_sender(agora_a2a::A2aSender::new(
            a2a_targets,
            std::time::Duration::from_secs(sender.timeout_secs.max(1)),
            sender.max_reply_bytes,
        ));
    }
    Ok(RunningNode {
        mcp_servers,
        mcp_shutdown,
        node,
        state,
        config,
        llm_description,
        local_server,
        routines,
    })
}

/// The WebAssembly routine runtime from settings; the JavaScript engine defaults to
/// `$AGORA_JS_ENGINE`, the artifact cache to `artifacts/` beside a SQLite store.
pub fn build_routine_engine(
    settings: &RoutineRuntimeSettings,
    store_url: &str,
) -> anyhow::Result<Arc<dyn RoutineEngine>> {
    let mut config = RuntimeConfig {
        js_engine: settings
            .js_engine
            .clone()
            .or_else(|| env_path("AGORA_JS_ENGINE")),
        artifact_dir: settings
            .artifact_dir
            .clone()
            .or_else(|| sqlite_folder(store_url).map(|folder| folder.join("artifacts"))),
        ..RuntimeConfig::default()
    };
    if let Some(max_concurrent) = settings.max_concurrent {
        config.max_concurrent = max_concurrent;
    }
    if let Some(secs) = settings.max_tool_wait_secs {
        config.max_tool_wait = std::time::Duration::from_secs(secs);
    }
    config.fixed_wall_clock = settings
        .fixed_wall_clock_unix_secs
        .map(std::time::Duration::from_secs);
    let runtime = WasmRuntime::new(config).context("starting the routine runtime")?;
    Ok(Arc::new(runtime))
}

/// The folder holding a SQLite store's file (`.` for a bare file name), if the URL is SQLite.
fn sqlite_folder(url: &str) -> Option<PathBuf> {
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = path.split('?').next().unwrap_or(path);
    if path.is_empty() || path.contains(":memory:") {
        return None;
    }
    let parent = std::path::Path::new(path).parent()?;
    Some(if parent.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        parent.to_path_buf()
    })
}

/// Opens (and migrates) the store with default options; creates the SQLite file's folder.
pub async fn open_store(url: &str) -> anyhow::Result<Store> {
    open_store_with(url, StoreOptions::default()).await
}

/// Opens (and migrates) the store; creates the SQLite file's folder.
pub async fn open_store_with(url: &str, options: StoreOptions) -> anyhow::Result<Store> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        let path = path.split('?').next().unwrap_or(path);
        if let Some(parent) = std::path::Path::new(path).parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating the store folder {}", parent.display()))?;
        }
    }
    Store::connect_with(url, options)
        .await
        .with_context(|| format!("opening the store {url}"))
}

/// The fetch policy from settings.
pub fn fetch_policy(settings: &FetchSettings) -> anyhow::Result<FetchPolicy> {
    let mut allowed = Vec::new();
    for network in &settings.allow_networks {
        allowed.push(network.parse().with_context(|| {
            format!("fetch.allow_networks: {network:?} is not a network like 127.0.0.0/8")
        })?);
    }
    Ok(FetchPolicy {
        allowed_networks: allowed,
        allow_http: settings.allow_http,
        timeout: Duration::from_secs(settings.timeout_secs),
        max_bytes: settings.max_bytes,
        max_redirects: settings.max_redirects,
        ..FetchPolicy::default()
    })
}

/// Builds the LLM backend; starts a local server when needed.
pub async fn build_llm(
    settings: &LlmSettings,
) -> anyhow::Result<(Arc<dyn Llm>, String, Option<LocalServer>)> {
    let timeout = Duration::from_secs(settings.timeout_secs);
    let (llm, description, local): (Arc<dyn Llm>, String, Option<LocalServer>) = match settings
        .backend
    {
        LlmBackend::Local => {
            let (url, model, local) = match &settings.local.url {
                Some(url) => {
                    let root = url.trim_end_matches('/').trim_end_matches("/v1");
                    agora_llm::wait_healthy(root, Duration::from_secs(60))
                        .await
                        .with_context(|| format!("waiting for the local LLM server at {url}"))?;
                    (url.clone(), "local".to_string(), None)
                }
                None => {
                    let binary = settings
                        .local
                        .binary
                        .clone()
                        .or_else(|| env_path("AGORA_LLAMA_SERVER"));
                    let model = settings
                        .local
                        .model
                        .clone()
                        .or_else(|| env_path("AGORA_MODEL"));
                    let (Some(binary), Some(model)) = (binary, model) else {
                        bail!(
                            "the local LLM backend needs llama-server and a model: run scripts/install.sh \
                             and source ~/.cache/agora/env.sh, or set llm.local.url, or choose another llm.backend"
                        );
                    };
                    let model_name = model
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_else(|| "local".into());
                    let server = LocalServer::start(LocalServerConfig {
                        context_size: settings.local.context_size.unwrap_or(4096),
                        threads: settings.local.threads.unwrap_or(2),
                        log_file: settings.local.log_file.clone(),
                        startup_timeout: Duration::from_secs(120),
                        ..LocalServerConfig::new(binary, model)
                    })
                    .await
                    .context("starting the local LLM server")?;
                    (server.base_url(), model_name, Some(server))
                }
            };
            let backend = OpenAiBackend::new(OpenAiConfig {
                base_url: url.clone(),
                api_key: "local".into(),
                model: model.clone(),
                timeout,
                max_concurrency: settings.max_concurrency.max(1),
            });
            (
                Arc::new(backend),
                format!("local model {model} at {url}"),
                local,
            )
        }
        LlmBackend::Openai => {
            let key = std::env::var(&settings.openai.api_key_env).with_context(|| {
                format!(
                    "the openai backend reads its key from ${}",
                    settings.openai.api_key_env
                )
            })?;
            let backend = OpenAiBackend::new(OpenAiConfig {
                base_url: settings.openai.base_url.clone(),
                api_key: key,
                model: settings.openai.model.clone(),
                timeout,
                max_concurrency: settings.max_concurrency.max(1),
            });
            let description = format!("{} at {}", settings.openai.model, settings.openai.base_url);
            (Arc::new(backend), description, None)
        }
        LlmBackend::Replay => {
            let path = settings
                .replay
                .clone()
                .context("llm.backend = \"replay\" needs llm.replay = <cassette>")?;
            let replay = ReplayLlm::open(&path)
                .with_context(|| format!("opening the cassette {}", path.display()))?;
            (
                Arc::new(replay),
                format!("replay of {}", path.display()),
                None,
            )
        }
    };
    match &settings.record {
        Some(path) => {
            let recording = RecordingLlm::open(path, llm)
                .with_context(|| format!("opening the recording {}", path.display()))?;
            Ok((
                Arc::new(recording),
                format!("{description}, recording to {}", path.display()),
                local,
            ))
        }
        None => Ok((llm, description, local)),
    }
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Serves until `shutdown` fires, then drains in-flight requests (within the edge's grace) and
/// tasks and writes the request records still queued.
pub async fn serve(
    listener: TcpListener,
    running: &RunningNode,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let tasks = TaskTracker::new();
    let node = running.node.clone();
    let sweep_every = Duration::from_secs(running.config.sweep_interval_secs.max(1));
    let sync_every =
        Duration::from_millis(running.config.routine_runtime.sync_interval_ms.max(100));
    let background_shutdown = shutdown.clone();
    let idempotency_window =
        Duration::from_secs(running.config.edge.idempotency.window_secs).as_millis() as i64;
    tasks.spawn(async move {
        let mut sweep = tokio::time::interval(sweep_every);
        let mut sync = tokio::time::interval(sync_every);
        sync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = background_shutdown.cancelled() => break,
                _ = sweep.tick() => {
                    match node.purge_expired_conversations().await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(purged = n, "expired conversations removed"),
                        Err(error) => tracing::warn!(%error, "conversation sweep failed"),
                    }
                    let before = agora_node::Clock::now_ms(&SystemClock) - idempotency_window;
                    if let Err(error) = node.store().idempotency().purge_idempotency_keys(before).await {
                        tracing::warn!(%error, "idempotency key sweep failed");
                    }
                }
                // One read when nothing changed; loads changed routines off the request path.
                _ = sync.tick() => {
                    if let Err(error) = node.sync_routines().await {
                        tracing::warn!(%error, "routine sync failed");
                    }
                }
            }
        }
    });
    tasks.close();
    let app = router(running.state.clone());
    crate::edge::serve::serve(listener, app, &running.state.edge, shutdown.clone())
        .await
        .context("serving HTTP")?;
    shutdown.cancel();
    tasks.wait().await;
    running.state.agent_runs.shutdown().await;
    running.shutdown().await;
    // Routine-served requests are recorded without waiting for their commit: write them now.
    running.node.store().requests().flush_requests().await;
    Ok(())
}
