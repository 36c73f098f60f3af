//! Test-only helpers: a scripted LLM, a scripted routine engine, nodes over
//! temporary SQLite stores, and nodes served over HTTP on 127.0.0.1 port 0.
//!
//! The fixtures never pull in the HTTP edge or the WebAssembly runtime: a
//! served node (`NodeBuilder::spawn_with`) takes its HTTP server as a
//! function, which `agora-server`'s tests pass in (`serve_state` over the
//! node's router). Node-boundary tests so link neither wasmtime nor `agora-server` (axum only
//! for `serve_text`'s stand-in servers).
//!
//! Architecture invariant: nothing outside tests depends on this crate. The
//! scripted LLM and routine engine exist for deterministic orchestration
//! tests; every LLM role also has a test against the real local model, and
//! routines have end-to-end tests with the real WebAssembly runtime.

mod routines;
mod scripted;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agora_fetch::{FetchPolicy, Fetcher, TargetClient, TargetPolicy};
use agora_llm::{Llm, PriceTable};
use agora_node::{
    Clock, Node, NodeConfig, NodeParts, ProtocolInput, RoutineEngine, RoutineLimits, RoutineSource,
    RoutineSpec, SystemClock, ToolRegistry,
};
use agora_protocol::ProtocolHash;
use agora_store::{Decision, RoutineOrigin, SenderMemory, Store};
use std::future::Future;
use std::pin::Pin;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use routines::ScriptedRoutineEngine;
pub use scripted::{ScriptedLlm, Turn, last_user_message, schema_name, system_prompt};

/// The real local model for `real_model_*` tests: the llama-server `scripts/test.sh` starts
/// (temperature 0, fixed seed, one slot) at `$AGORA_TEST_LLM_URL`.
pub fn local_llm() -> Arc<dyn Llm> {
    let url = std::env::var("AGORA_TEST_LLM_URL").expect(
        "AGORA_TEST_LLM_URL must point at a running llama-server (scripts/test.sh starts one)",
    );
    Arc::new(agora_llm::OpenAiBackend::new(agora_llm::OpenAiConfig {
        base_url: url,
        api_key: "local".into(),
        model: "qwen2.5-coder-1.5b-instruct-q4_k_m".into(),
        timeout: std::time::Duration::from_secs(300),
        max_concurrency: 1,
    }))
}

/// The path of a peer `scripts/install.sh` installed, from its variable in
/// `~/.cache/agora/env.sh` (`AGORA_MCP_NODE`, `AGORA_MCP_PYTHON`, ...); `scripts/test.sh` sources
/// that file. Panics, saying how to get it, when the variable is not set.
pub fn installed_peer(variable: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| {
        panic!("{variable} is not set: run scripts/install.sh and source ~/.cache/agora/env.sh")
    })
}

/// The built-in weather tool as the tests configure it (seed 7).
pub fn weather_tool() -> agora_node::ToolConfig {
    agora_node::ToolConfig::builtin("weather_forecast", "weather_forecast", 7)
}

/// A human-written JavaScript routine `name` for the protocol `protocol` (its text), with
/// default limits, that may call `tools` and is active once added.
pub fn human_routine(name: &str, protocol: &str, source: &str, tools: &[&str]) -> RoutineSpec {
    RoutineSpec {
        name: name.into(),
        protocol: ProtocolInput::Text(protocol.into()),
        source: RoutineSource::JavaScript(source.into()),
        tools: tools.iter().map(|t| t.to_string()).collect(),
        limits: RoutineLimits::default(),
        origin: RoutineOrigin::Human,
        activate: true,
    }
}

/// The categories of the LLM calls `node` recorded (`conversation`, `checking`, ...), oldest
/// first.
pub async fn llm_categories(node: &Node) -> Vec<String> {
    let calls = node.store().ledger().llm_calls(None).await;
    let calls = calls.expect("the ledger of a test store can be read");
    calls.into_iter().map(|call| call.category).collect()
}

/// Every LLM call `node` recorded in its ledger, oldest first.
pub async fn llm_calls(node: &Node) -> Vec<agora_store::LlmCallRecord> {
    let calls = node.store().ledger().llm_calls(None).await;
    calls.expect("the ledger of a test store can be read")
}

/// The newest `limit` requests in `node`'s request ledger, newest first.
pub async fn recent_requests(node: &Node, limit: i64) -> Vec<agora_store::RequestRecord> {
    let requests = node.store().requests().recent_requests(limit).await;
    requests.expect("the request ledger of a test store can be read")
}

/// `node`'s sender log: the newest `limit` runs of `task` to `target`, oldest first.
pub async fn sender_runs(
    node: &Node,
    target: &str,
    task: &str,
    limit: i64,
) -> Vec<agora_store::SenderRun> {
    let runs = node.store().sender().sender_runs(target, task, limit).await;
    runs.expect("the sender log of a test store can be read")
}

/// Every programmer attempt `node` made for the protocol `hash`, oldest first.
pub async fn attempts(node: &Node, hash: &ProtocolHash) -> Vec<agora_store::Attempt<ProtocolHash>> {
    let attempts = node.store().programming().attempts(Some(hash)).await;
    attempts.expect("the programmer's attempts in a test store can be read")
}

/// What `node` has counted of the requests for the protocol `hash`.
pub async fn usage(node: &Node, hash: &ProtocolHash) -> agora_store::ProtocolUsage {
    let usage = node.store().requests().usage(hash).await;
    usage.expect("the usage in a test store can be read")
}

/// What `node` remembers of `task` sent to `target`; panics if it never sent it there.
pub async fn sender_memory(node: &Node, target: &str, task: &str) -> SenderMemory {
    let memory = node.store().sender().sender_memory(target, task).await;
    let memory = memory.expect("the sender memory of a test store can be read");
    memory.expect("the task was sent to the target")
}

/// The suitability decision `node` recorded for `hash`; panics if there is none.
pub async fn suitability(node: &Node, hash: &ProtocolHash) -> Decision {
    let decision = node.store().suitability(hash).await;
    let decision = decision.expect("the decisions of a test store can be read");
    decision.expect("a decision was stored")
}

/// A temporary folder for a test's store; removed on drop.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary folder can be created")
}

/// The SQLite URL of a store file inside `dir`.
pub fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("node.db").display())
}

/// A fresh, empty schema `name` in the PostgreSQL database at `AGORA_TEST_POSTGRES_URL`
/// (dropped and recreated, so reruns start clean), as a store URL. Panics with the way to set
/// the variable when it is missing (`scripts/test.sh` sets it).
pub async fn postgres_schema(name: &str) -> String {
    let base = std::env::var("AGORA_TEST_POSTGRES_URL").expect(
        "AGORA_TEST_POSTGRES_URL is not set: run \
         `export AGORA_TEST_POSTGRES_URL=$(scripts/postgres-test-db.sh)` (scripts/test.sh does)",
    );
    let admin = Store::connect(&base)
        .await
        .expect("the PostgreSQL test database opens");
    admin
        .execute_raw_for_tests(&format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name};"
        ))
        .await
        .expect("a test schema can be created");
    admin.close().await;
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}options=-c%20search_path%3D{name}")
}

/// Builds nodes for tests.
pub struct NodeBuilder {
    /// The node configuration.
    pub config: NodeConfig,
    /// The LLM.
    pub llm: Arc<dyn Llm>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// The fetch policy (default: loopback allowed, as tests serve on 127.0.0.1).
    pub fetch: FetchPolicy,
    /// The folder holding the store.
    pub store_dir: PathBuf,
    /// The admin token.
    pub admin_token: Option<String>,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// The routine engine, if the node runs routines.
    pub routine_engine: Option<Arc<dyn RoutineEngine>>,
    /// Tools built outside the configuration (MCP servers' tools, connected by the test).
    pub connected_tools: Vec<Arc<dyn agora_node::Tool>>,
    /// The store's URL, when it is not the SQLite file in `store_dir` (a PostgreSQL schema).
    pub store_url: Option<String>,
    /// The ledger's prices (the paper's GPT-4o prices by default).
    pub prices: PriceTable,
}

impl NodeBuilder {
    /// A builder with defaults, storing in `store_dir`.
    pub fn new(llm: Arc<dyn Llm>, store_dir: &Path) -> Self {
        Self {
            config: NodeConfig {
                name: "test-node".into(),
                // The scripted LLMs answer the tool loop's steps; a test of code as action (a
                // program the LLM writes first) turns it on.
                responder: agora_node::ResponderConfig {
                    code_as_action: false,
                    ..Default::default()
                },
                ..NodeConfig::default()
            },
            llm,
            clock: Arc::new(SystemClock),
            fetch: FetchPolicy::default().allowing_loopback(),
            store_dir: store_dir.to_path_buf(),
            admin_token: None,
            max_body_bytes: 1024 * 1024,
            routine_engine: None,
            connected_tools: Vec::new(),
            store_url: None,
            prices: PriceTable::default(),
        }
    }

    /// Prices the ledger's calls with this table.
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }

    /// Stores in the database at `url` instead of the SQLite file in the store folder.
    pub fn store_url(mut self, url: &str) -> Self {
        self.store_url = Some(url.to_string());
        self
    }

    /// Adds tools built outside the configuration, such as an MCP server's (the configuration's
    /// `kind = "mcp"` entries are skipped; the test connects them).
    pub fn connected_tools(mut self, tools: Vec<Arc<dyn agora_node::Tool>>) -> Self {
        self.connected_tools = tools;
        self
    }

    /// Changes the configuration.
    pub fn config(mut self, change: impl FnOnce(&mut NodeConfig)) -> Self {
        change(&mut self.config);
        self
    }

    /// Uses another clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Uses another fetch policy.
    pub fn fetch(mut self, policy: FetchPolicy) -> Self {
        self.fetch = policy;
        self
    }

    /// Sets the admin token.
    pub fn admin_token(mut self, token: &str) -> Self {
        self.admin_token = Some(token.to_string());
        self
    }

    /// Runs routines with this engine.
    pub fn routine_engine(mut self, engine: Arc<dyn RoutineEngine>) -> Self {
        self.routine_engine = Some(engine);
        self
    }

    /// Builds the engine alone (no HTTP).
    pub async fn build(self) -> Node {
        self.build_parts().await.0
    }

    async fn build_parts(self) -> (Node, Self) {
        let url = self
            .store_url
            .clone()
            .unwrap_or_else(|| sqlite_url(&self.store_dir));
        let store = Store::connect(&url).await.expect("the test store opens");
        let targets = TargetClient::new(TargetPolicy::default()).expect("the target client builds");
        let tools = ToolRegistry::from_config_with(
            &self.config.tools,
            &targets,
            self.connected_tools.clone(),
        )
        .expect("the test tools are valid");
        let node = Node::new(NodeParts {
            config: self.config.clone(),
            store,
            llm: self.llm.clone(),
            fetcher: Fetcher::new(self.fetch.clone()).expect("the fetcher builds"),
            targets,
            tools,
            prices: self.prices.clone(),
            clock: self.clock.clone(),
            routine_engine: self.routine_engine.clone(),
        });
        // As at a real node's start-up: the stored routines are loaded before serving.
        node.sync_routines()
            .await
            .expect("the stored routines can be read");
        (node, self)
    }

    /// Builds the node and serves it on 127.0.0.1 with an ephemeral port, with the HTTP server
    /// `serve` (the caller's: this crate knows no HTTP server). The node's public URL is the
    /// bound address.
    pub async fn spawn_with(mut self, serve: impl Serve) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding 127.0.0.1:0");
        let address = listener.local_addr().expect("a bound address");
        let url = format!("http://{address}");
        self.config.public_url = url.clone();
        let (node, builder) = self.build_parts().await;
        let served = Served {
            listener,
            node: node.clone(),
            admin_token: builder.admin_token.clone(),
            max_body_bytes: builder.max_body_bytes,
            shutdown: CancellationToken::new(),
        };
        let shutdown = served.shutdown.clone();
        let task = tokio::spawn(serve(served));
        TestServer {
            node,
            url,
            shutdown,
            task: Some(task),
        }
    }
}

/// What an HTTP server gets to serve a test node: the bound listener, the node, the admin token,
/// the largest request body, and the token that stops it.
pub struct Served {
    /// The listener on 127.0.0.1, already bound.
    pub listener: TcpListener,
    /// The node to serve.
    pub node: Node,
    /// The admin token, if the test sets one.
    pub admin_token: Option<String>,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Cancelled when the test server stops.
    pub shutdown: CancellationToken,
}

/// An HTTP server for a test node: serves until `Served::shutdown` is cancelled.
pub trait Serve: FnOnce(Served) -> Pin<Box<dyn Future<Output = ()> + Send>> {}
impl<F: FnOnce(Served) -> Pin<Box<dyn Future<Output = ()> + Send>>> Serve for F {}

/// A node served over HTTP for a test; stopped on drop.
pub struct TestServer {
    /// The engine.
    pub node: Node,
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Stops serving and waits for the server task.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// POSTs JSON to a path and returns (status, JSON body).
    pub async fn post(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let response = reqwest::Client::new()
            .post(format!("{}{}", self.url, path))
            .json(body)
            .send()
            .await
            .expect("the test server answers");
        let status = response.status().as_u16();
        let value = response.json().await.unwrap_or(serde_json::Value::Null);
        (status, value)
    }

    /// GETs a path and returns the body as text (`/metrics`, `/.wellknown`, ...).
    pub async fn get_text(&self, path: &str) -> String {
        let response = reqwest::get(format!("{}{}", self.url, path)).await;
        let response = response.expect("the test server answers");
        response.text().await.expect("the body is text")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A peer on 127.0.0.1 serving one text at `url` (a protocol document's source for the resolver's
/// tests); stopped on drop.
pub struct TextPeer {
    /// Where the text is served: `http://127.0.0.1:PORT/document`.
    pub url: String,
    shutdown: CancellationToken,
}

/// Serves `text` over HTTP on 127.0.0.1 with an ephemeral port.
pub async fn serve_text(text: &str) -> TextPeer {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding 127.0.0.1:0");
    let address = listener.local_addr().expect("a bound address");
    let text = text.to_string();
    let router = axum::Router::new().route(
        "/document",
        axum::routing::get(move || std::future::ready(text.clone())),
    );
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
    });
    TextPeer {
        url: format!("http://{address}/document"),
        shutdown,
    }
}

impl Drop for TextPeer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
