//! Building the network's nodes on loopback: the protocol databases and the agents.
//!
//! Every agent is a real agora node with its own SQLite store, served over HTTP on its own
//! 127.0.0.1 port: the 15 servers (their tools, and a SQLite database each where the paper had
//! one), the 85 users, one helper per server with external tools (the server's outbound side:
//! it runs the external tool as a task against the other server), and the 3 protocol databases,
//! peered in a line. The agents of one process share one LLM client (whose pool bounds the calls
//! in flight) and one WebAssembly routine runtime (one wasmtime engine).
//!
//! One process may host every agent ([`Shard::WHOLE`]) or a share of them (see `hosting`): a
//! [`Shard`] picks servers and users by their position in the spec, and a server always lives
//! with its helper, whose node its external tools drive. Ports are bound before any node is
//! built ([`ServerPorts`]), so every URL is known first, whichever process holds the port.
//!
//! The servers answer and program as [`ServerSetup`] says: a node's defaults unless a
//! measurement says otherwise. In `nl-only` mode every threshold is infinite and the servers
//! answer with the tool loop alone (the paper's counterfactual).
//!
//! Agents are priced as the model the paper gave them, so costs compare with the paper's even
//! though one local model answers for all of them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agora_fetch::{Fetcher, TargetClient, TargetPolicy};
use agora_llm::{Llm, PriceTable};
use agora_node::tools::{Tool, ToolSpec};
use agora_node::{Node, NodeConfig, NodeParts, RoutineEngine, SystemClock, ToolRegistry};
use agora_server::protocol_db::{
    ProtocolDbServerConfig, RunningProtocolDb, build_protocol_db, serve_protocol_db,
};
use agora_server::runtime::{fetch_policy, open_store_with};
use agora_server::{AppState, FetchSettings, serve_state};
use agora_store::{RoutineStatus, StoreOptions};

use crate::service_db::{ServiceDatabase, ServiceTable};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{Mutex, OwnedRwLockWriteGuard, RwLock};
use tokio_util::sync::CancellationToken;

use crate::record::{CallTotals, Mode, ShadowNote};
use crate::setup::ServerSetup;
use crate::spec::{NetworkSpec, NodeTask, ToolSpecEntry};
use crate::tools::{ExternalTool, MockKind, MockTool, SqlTool};

/// The write token the demo's protocol databases use.
const DB_TOKEN: &str = "network-demo";
/// "Infinity" for the counterfactual's thresholds: large, yet safe to add to.
const NEVER: i64 = 1_000_000_000;

/// The price of each of the paper's models, per million prompt and completion tokens.
/// GPT-4o's are the paper's; Gemini 1.5 Pro's (before 2024-10-01) and Llama 3.1 405B's (on
/// SambaNova Cloud) are list prices of the time, assumed: the paper does not give them.
pub fn price_of(model: &str) -> PriceTable {
    let (prompt, completion) = match model {
        "gemini-1.5-pro" => (3.5, 10.5),
        "llama3-405b" => (5.0, 10.0),
        "gpt-4o-mini" => (0.15, 0.6),
        _ => (5.0, 15.0),
    };
    PriceTable {
        prompt_usd_per_million: prompt,
        completion_usd_per_million: completion,
        cached_prompt_usd_per_million: None,
    }
}

/// How to build the network.
pub struct NetworkOptions {
    /// Where every store and database goes (emptied first).
    pub dir: PathBuf,
    /// Thresholds.
    pub mode: Mode,
    /// The LLM client every node shares.
    pub llm: Arc<dyn Llm>,
    /// The routine runtime every node uses.
    pub routine_engine: Option<Arc<dyn RoutineEngine>>,
    /// The mock tools' seed.
    pub seed: u64,
    /// Seconds a sender waits for a reply.
    pub sender_timeout_secs: u64,
    /// The responder uses the endpoint's native tool calling (OpenAI), not JSON-schema steps.
    pub native_tools: bool,
    /// How the agents answer and program.
    pub setup: ServerSetup,
}

/// Which agents one process hosts: the servers (each with its helper) and the users whose
/// position in the spec is `index` modulo `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// This share's number, from 0.
    pub index: usize,
    /// How many shares the agents are split into.
    pub count: usize,
}

impl Shard {
    /// Every agent.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Whether the agent at `position` (among the spec's servers, or among its users) is here.
    pub fn hosts(self, position: usize) -> bool {
        position % self.count.max(1) == self.index
    }
}

/// A running agent.
#[derive(Clone)]
pub struct Agent {
    /// Its id (`bael`, `hotel3`, `hotel3_helper`).
    pub id: String,
    /// The node.
    pub node: Node,
    /// Its base URL (with a trailing `/`).
    pub url: String,
}

/// A running protocol database.
pub struct Database {
    /// Its id.
    pub id: String,
    /// Its base URL.
    pub url: String,
    /// The database.
    pub running: Arc<RunningProtocolDb>,
}

/// Empties `dir` (a previous run's stores) and makes the folders the stores go in.
pub fn prepare_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("emptying {}", dir.display()))?;
    }
    for sub in ["servers", "users", "helpers", "protocol-dbs", "service-dbs"] {
        let path = dir.join(sub);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
    }
    Ok(())
}

/// Where the server `server`'s own database goes in a network whose stores are in `dir`.
pub fn service_db_path(dir: &Path, server: &str) -> std::path::PathBuf {
    dir.join("service-dbs").join(format!("{server}.db"))
}

/// The running protocol databases, peered as the spec says.
pub struct ProtocolDbs {
    spec: Arc<NetworkSpec>,
    /// By id.
    pub databases: BTreeMap<String, Database>,
}

impl ProtocolDbs {
    /// Starts every protocol database of `spec`, its store under `dir` (see [`prepare_dir`]);
    /// they serve until `shutdown`.
    pub async fn start(
        spec: Arc<NetworkSpec>,
        dir: &Path,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<ProtocolDbs> {
        // Ports first: each database knows its peers' URLs when it is built.
        let mut ports = BTreeMap::new();
        for db in &spec.protocol_dbs {
            let (listener, url) = bind().await?;
            ports.insert(db.id.clone(), Listening { listener, url });
        }
        let urls: BTreeMap<String, String> = ports
            .iter()
            .map(|(id, l)| (id.clone(), l.url.clone()))
            .collect();
        let mut databases = BTreeMap::new();
        for db in &spec.protocol_dbs {
            let Some(listening) = ports.remove(&db.id) else {
                continue;
            };
            let peers = db
                .peers
                .iter()
                .filter_map(|peer| urls.get(peer).cloned())
                .collect();
            let config = ProtocolDbServerConfig {
                listen: listening.listener.local_addr()?,
                store: format!("sqlite://{}/protocol-dbs/{}.db", dir.display(), db.id),
                public_url: Some(listening.url.clone()),
                write_token: Some(DB_TOKEN.into()),
                peers,
                sync_interval_secs: 0,
                sync_every_additions: 0,
                fetch: FetchSettings {
                    max_bytes: 8 * 1024 * 1024,
                    ..loopback_fetch()
                },
                ..ProtocolDbServerConfig::default()
            };
            let running = Arc::new(build_protocol_db(config).await?);
            let serving = running.clone();
            let token = shutdown.clone();
            let listener = listening.listener;
            tokio::spawn(async move {
                if let Err(error) = serve_protocol_db(listener, &serving, token).await {
                    tracing::error!(%error, "a protocol database stopped serving");
                }
            });
            databases.insert(
                db.id.clone(),
                Database {
                    id: db.id.clone(),
                    url: listening.url,
                    running,
                },
            );
        }
        Ok(ProtocolDbs { spec, databases })
    }

    /// Each database's base URL, by id.
    pub fn urls(&self) -> BTreeMap<String, String> {
        self.databases
            .iter()
            .map(|(id, db)| (id.clone(), db.url.clone()))
            .collect()
    }

    /// The screenplay's sync entry for `db`: its neighbours pull what it has (the paper's
    /// databases pushed to their peers; ours pull, so the neighbours do).
    pub async fn sync(&self, db: &str) {
        let Some(spec) = self.spec.protocol_dbs.iter().find(|d| d.id == db) else {
            return;
        };
        for peer in &spec.peers {
            if let Some(peer) = self.databases.get(peer) {
                let report = peer.running.db.sync_now().await;
                if report.errors() > 0 {
                    tracing::warn!(db = %peer.id, errors = report.errors(), "sync had errors");
                }
            }
        }
    }

    /// The protocols each database holds (its own and its peers').
    pub async fn protocol_counts(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let mut counts = BTreeMap::new();
        for (id, db) in &self.databases {
            let held = db.running.db.counts().await?;
            counts.insert(id.clone(), (held.local + held.from_peers).max(0) as u64);
        }
        Ok(counts)
    }
}

/// The listening ports of one shard's servers, bound before any node is built.
pub struct ServerPorts {
    listening: BTreeMap<String, Listening>,
}

impl ServerPorts {
    /// Binds a loopback port for each server in `shard`.
    pub async fn bind(spec: &NetworkSpec, shard: Shard) -> anyhow::Result<ServerPorts> {
        let mut listening = BTreeMap::new();
        for (position, server) in spec.servers.iter().enumerate() {
            if shard.hosts(position) {
                let (listener, url) = bind().await?;
                listening.insert(server.id.clone(), Listening { listener, url });
            }
        }
        Ok(ServerPorts { listening })
    }

    /// Each bound server's base URL (with a trailing `/`), by id.
    pub fn urls(&self) -> BTreeMap<String, String> {
        self.listening
            .iter()
            .map(|(id, l)| (id.clone(), format!("{}/", l.url)))
            .collect()
    }
}

/// One query for a user agent: run `task` against `server` with `data`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskQuery {
    /// The user's id.
    pub user: String,
    /// The target server's id.
    pub server: String,
    /// The task type.
    pub task: String,
    /// The task data, normalised to the task's input schema.
    pub data: Value,
}

/// How a query went, as the user saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskOutcome {
    /// A valid output arrived in time.
    pub success: bool,
    /// Why not.
    pub error: Option<String>,
    /// The rung of the sender's ladder the query took (`natural`, `protocol`, `routine`, ...).
    pub path: String,
    /// The task's output the user delivered, when it did.
    #[serde(default)]
    pub output: Option<Value>,
}

/// LLM use read from the ledgers: in all, and by category.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LedgerUsage {
    /// Every call.
    pub totals: CallTotals,
    /// By call category.
    pub by_category: BTreeMap<String, CallTotals>,
    /// The agents that made `conversation` calls (an LLM answered or asked in words).
    #[serde(default)]
    pub conversing: BTreeSet<String>,
    /// The servers' shadow checks recorded since the last read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<ShadowNote>,
}

impl LedgerUsage {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &LedgerUsage) {
        self.totals.add(&other.totals);
        self.conversing.extend(other.conversing.iter().cloned());
        self.shadow.extend(other.shadow.iter().cloned());
        for (category, usage) in &other.by_category {
            self.by_category
                .entry(category.clone())
                .or_default()
                .add(usage);
        }
    }
}

/// What the agents built and negotiated, counted over some agents.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCounts {
    /// Active LLM-written routines on servers.
    pub server_routines: u64,
    /// Active sender routines on users and helpers.
    pub sender_routines: u64,
    /// Negotiations, once per (target, task) and run step.
    pub negotiations: u64,
}

impl AgentCounts {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &AgentCounts) {
        self.server_routines += other.server_routines;
        self.sender_routines += other.sender_routines;
        self.negotiations += other.negotiations;
    }
}

/// The agents one process hosts, and what the screenplay's runner asks of them.
pub struct Agents {
    spec: Arc<NetworkSpec>,
    /// Servers by id.
    pub servers: BTreeMap<String, Agent>,
    /// Users by id.
    pub users: BTreeMap<String, Agent>,
    /// Helpers by the id of the server they serve.
    pub helpers: BTreeMap<String, Agent>,
    /// Every server's URL, hosted here or not.
    server_urls: BTreeMap<String, String>,
    /// The servers' own SQL databases.
    service_dbs: Vec<ServiceDatabase>,
    /// Background jobs (routine writing) wait while a query holds it (`Node::share_job_gate`).
    gate: Arc<RwLock<()>>,
    held: Mutex<Option<OwnedRwLockWriteGuard<()>>>,
    /// The last ledger row read, by agent id.
    ledger_read: Mutex<BTreeMap<String, i64>>,
    shutdown: CancellationToken,
}

impl Agents {
    /// Builds and starts the agents of `shard`. `ports` holds the shard's servers' ports;
    /// `server_urls` every server's URL (with a trailing `/`); `db_urls` every protocol
    /// database's. Stores go under `options.dir` (see [`prepare_dir`]). In order: the helpers
    /// (a server's external tools go through its helper), the servers with their tools and
    /// databases, the users, then the job gate shared by all.
    pub async fn start(
        spec: Arc<NetworkSpec>,
        options: &NetworkOptions,
        shard: Shard,
        ports: ServerPorts,
        server_urls: BTreeMap<String, String>,
        db_urls: &BTreeMap<String, String>,
    ) -> anyhow::Result<Agents> {
        let shutdown = CancellationToken::new();
        let place = Placement {
            spec: &spec,
            shard,
            server_urls: &server_urls,
            db_urls,
        };
        let builder = AgentBuilder {
            dir: options.dir.clone(),
            options,
            shutdown: shutdown.clone(),
        };
        let helpers = start_helpers(&place, &builder).await?;
        let (servers, service_dbs) = start_servers(&place, &builder, &helpers, ports).await?;
        let users = start_users(&place, &builder).await?;
        let agents = Agents {
            spec: spec.clone(),
            servers,
            users,
            helpers,
            server_urls: server_urls.clone(),
            service_dbs,
            gate: Arc::new(RwLock::new(())),
            held: Mutex::new(None),
            ledger_read: Mutex::new(BTreeMap::new()),
            shutdown,
        };
        for agent in agents.agents() {
            agent.node.share_job_gate(agents.gate.clone());
        }
        Ok(agents)
    }

    /// Every agent node here: servers, helpers, users.
    pub fn agents(&self) -> impl Iterator<Item = &Agent> {
        self.servers
            .values()
            .chain(self.helpers.values())
            .chain(self.users.values())
    }

    /// Holds background jobs (routine writing) back until [`Agents::release_jobs`], so that a
    /// query's LLM calls come in a fixed order whatever the jobs do.
    pub async fn hold_jobs(&self) {
        let mut held = self.held.lock().await;
        if held.is_none() {
            *held = Some(self.gate.clone().write_owned().await);
        }
    }

    /// Lets held jobs go.
    pub async fn release_jobs(&self) {
        self.held.lock().await.take();
    }

    /// Runs one query on its user (hosted here), giving up after `timeout`.
    pub async fn run_task(
        &self,
        query: &TaskQuery,
        timeout: Duration,
    ) -> anyhow::Result<TaskOutcome> {
        let user = self
            .users
            .get(&query.user)
            .with_context(|| format!("no user {} here", query.user))?;
        let server_url = self
            .server_urls
            .get(&query.server)
            .with_context(|| format!("no server {}", query.server))?;
        let task = self.spec.task(&query.task)?;
        let outcome =
            tokio::time::timeout(timeout, user.node.run_task(server_url, &task, &query.data)).await;
        let (success, error, output) = match outcome {
            Ok(Ok(run)) => (true, None, Some(run.outcome.output)),
            Ok(Err(error)) => (false, Some(error.to_string()), None),
            Err(_) => (
                false,
                Some(format!("timed out after {} s", timeout.as_secs())),
                None,
            ),
        };
        let path = user
            .node
            .store()
            .sender()
            .sender_runs(server_url, &task.name, 1)
            .await?
            .pop()
            .map(|run| run.rung)
            .unwrap_or_default();
        Ok(TaskOutcome {
            success,
            error,
            path,
            output,
        })
    }

    /// Waits until no node here has a routine being written, or `timeout` passes (then warns
    /// and goes on: the query's record then misses what that writing costs later).
    pub async fn idle(&self, timeout: Duration) {
        let all_idle = async {
            // One agent's background work can start another's after that one was waited for (a
            // shadow check calling another server's task): passes until one finds every agent
            // idle at once, so a replay meets each call in the same query as its recording.
            loop {
                for agent in self.agents() {
                    agent.node.programmer_idle().await;
                    agent.node.sender_routines_idle().await;
                }
                let mut busy = false;
                for agent in self.agents() {
                    let idle = async {
                        agent.node.programmer_idle().await;
                        agent.node.sender_routines_idle().await;
                    };
                    if tokio::time::timeout(Duration::ZERO, idle).await.is_err() {
                        busy = true;
                        break;
                    }
                }
                if !busy {
                    break;
                }
            }
        };
        if tokio::time::timeout(timeout, all_idle).await.is_err() {
            tracing::warn!("routine writing still running");
        }
    }

    /// The LLM calls in every ledger here that are new since the last read.
    pub async fn read_ledgers(&self) -> anyhow::Result<LedgerUsage> {
        let mut usage = LedgerUsage::default();
        let mut read = self.ledger_read.lock().await;
        for agent in self.agents() {
            let last = read.entry(agent.id.clone()).or_insert(0);
            for (id, call) in agent.node.store().ledger().llm_calls_after(*last).await? {
                *last = id;
                let one = CallTotals {
                    calls: 1,
                    prompt_tokens: call.prompt_tokens.max(0) as u64,
                    cached_prompt_tokens: call.cached_prompt_tokens.max(0) as u64,
                    completion_tokens: call.completion_tokens.max(0) as u64,
                    cost_usd: call.cost_usd,
                    latency_ms: call.latency_ms.max(0) as u64,
                };
                usage.totals.add(&one);
                if call.category == "conversation" {
                    usage.conversing.insert(agent.id.clone());
                }
                usage
                    .by_category
                    .entry(call.category)
                    .or_default()
                    .add(&one);
            }
        }
        for server in self.servers.values() {
            let last = read
                .entry(format!("shadow checks of {}", server.id))
                .or_insert(0);
            let programming = server.node.store().programming();
            for check in programming.shadow_checks_after(*last).await? {
                *last = check.id;
                usage.shadow.push(ShadowNote {
                    server: server.id.clone(),
                    agreed: check.agreed,
                    difference: check.difference,
                });
            }
        }
        Ok(usage)
    }

    /// Routines and negotiations over the agents here.
    pub async fn counts(&self) -> anyhow::Result<AgentCounts> {
        let mut counts = AgentCounts::default();
        for server in self.servers.values() {
            counts.server_routines += server
                .node
                .store()
                .routines()
                .await?
                .iter()
                .filter(|r| r.status == RoutineStatus::Active && r.origin.by_node())
                .count() as u64;
        }
        // Senders' side: active routines, and negotiations from every run's steps, once per
        // (target, task) whatever rungs its runs took.
        for agent in self.users.values().chain(self.helpers.values()) {
            let store = agent.node.store();
            counts.sender_routines += store
                .sender()
                .sender_routines()
                .await?
                .iter()
                .filter(|r| r.status == RoutineStatus::Active)
                .count() as u64;
            let keys: BTreeSet<(String, String)> = store
                .sender()
                .sender_totals()
                .await?
                .into_iter()
                .map(|totals| (totals.target, totals.task))
                .collect();
            for (target, task) in keys {
                for run in store.sender().sender_runs(&target, &task, i64::MAX).await? {
                    counts.negotiations += run
                        .steps
                        .split(',')
                        .filter(|step| step.starts_with("negotiated"))
                        .count() as u64;
                }
            }
        }
        Ok(counts)
    }

    /// Stops serving and closes every store.
    pub async fn stop(&self) {
        self.shutdown.cancel();
        for agent in self.agents() {
            agent.node.store().close().await;
        }
        for db in &self.service_dbs {
            db.close().await;
        }
    }
}

fn loopback_fetch() -> FetchSettings {
    FetchSettings {
        allow_networks: vec!["127.0.0.0/8".into()],
        ..FetchSettings::default()
    }
}

/// Each agent's page cache per SQLite connection: a hundred agents' stores share one process,
/// where SQLite's default (about 2 MB a connection, up to four connections a store) adds up.
const DEMO_PAGE_CACHE_KIB: u32 = 256;

/// How the demo opens each agent's store.
fn demo_store_options() -> StoreOptions {
    StoreOptions {
        page_cache_kib: Some(DEMO_PAGE_CACHE_KIB),
        ..StoreOptions::default()
    }
}

async fn bind() -> anyhow::Result<(TcpListener, String)> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding a loopback port")?;
    let url = format!("http://{}", listener.local_addr()?);
    Ok((listener, url))
}

fn apply_mode(config: &mut NodeConfig, mode: Mode) {
    // The paper's thresholds: explore after 3 conversations, negotiate after 5 (or when the
    // server asks, after 10 natural-language conversations), routines at the first use.
    config.sender.explore_threshold = 3;
    config.sender.negotiate_threshold = 5;
    config.sender.sender_routine_threshold = 1;
    config.negotiation.receiver_threshold = 10;
    config.thresholds.implementation = 1;
    if mode == Mode::NlOnly {
        config.responder.code_as_action = false;
        config.sender.explore_threshold = NEVER;
        config.sender.negotiate_threshold = NEVER;
        config.sender.sender_routine_threshold = NEVER;
        config.negotiation.receiver_threshold = NEVER as u64;
        config.thresholds.implementation = NEVER as u64;
        config.programmer.enabled = false;
    }
}

struct Listening {
    listener: TcpListener,
    url: String,
}

/// Where the agents of one process stand in the network: the spec, the shard hosted here, and
/// every server's and protocol database's URL.
struct Placement<'a> {
    spec: &'a Arc<NetworkSpec>,
    shard: Shard,
    server_urls: &'a BTreeMap<String, String>,
    db_urls: &'a BTreeMap<String, String>,
}

impl Placement<'_> {
    fn server_url(&self, id: &str) -> anyhow::Result<String> {
        self.server_urls
            .get(id)
            .cloned()
            .with_context(|| format!("no server {id}"))
    }

    fn db_url(&self, id: &str) -> anyhow::Result<String> {
        self.db_urls
            .get(id)
            .cloned()
            .with_context(|| format!("no protocol database {id}"))
    }

    /// Whether the server `id` is hosted here.
    fn hosts_server(&self, id: &str) -> bool {
        self.spec
            .servers
            .iter()
            .position(|server| server.id == id)
            .is_some_and(|position| self.shard.hosts(position))
    }
}

/// The helpers of the servers hosted here: senders for their server's external tools.
async fn start_helpers(
    place: &Placement<'_>,
    builder: &AgentBuilder<'_>,
) -> anyhow::Result<BTreeMap<String, Agent>> {
    let mut helpers = BTreeMap::new();
    for server in place.spec.helpers() {
        if !place.hosts_server(&server.id) {
            continue;
        }
        let id = format!("{}_helper", server.id);
        let mut config = NodeConfig {
            name: id.clone(),
            description: format!(
                "The outbound side of {}: it asks other services.",
                server.id
            ),
            ..NodeConfig::default()
        };
        for tool in &server.tools {
            if let ToolSpecEntry::External { task, .. } = tool {
                config.tasks.push(place.spec.task(task)?);
            }
        }
        config.sender.protocol_db = Some(place.db_url(&server.protocol_db)?);
        let agent = builder
            .start(
                &id,
                "helpers",
                config,
                &server.model,
                ToolRegistry::default(),
                None,
            )
            .await?;
        helpers.insert(server.id.clone(), agent);
    }
    Ok(helpers)
}

/// The servers hosted here, each with its tools and its own database.
async fn start_servers(
    place: &Placement<'_>,
    builder: &AgentBuilder<'_>,
    helpers: &BTreeMap<String, Agent>,
    mut ports: ServerPorts,
) -> anyhow::Result<(BTreeMap<String, Agent>, Vec<ServiceDatabase>)> {
    let mut servers = BTreeMap::new();
    let mut service_dbs = Vec::new();
    for server in &place.spec.servers {
        if !place.hosts_server(&server.id) {
            continue;
        }
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        if let Some(kind) = &server.database {
            let database = service_database(place.spec, &builder.dir, &server.id, kind).await?;
            let schema = &place.spec.databases[kind];
            service_dbs.push(database.clone());
            tools.push(Arc::new(SqlTool::new(database, schema)));
        }
        for tool in &server.tools {
            tools.push(server_tool(
                place,
                builder.options.seed,
                helpers,
                &server.id,
                tool,
            )?);
        }
        let registry =
            ToolRegistry::from_tools(tools).with_context(|| format!("{}'s tools", server.id))?;
        let config = NodeConfig {
            name: server.id.clone(),
            description: server.description.clone(),
            ..NodeConfig::default()
        };
        let listening = ports
            .listening
            .remove(&server.id)
            .with_context(|| format!("no port for {}", server.id))?;
        let agent = builder
            .start(
                &server.id,
                "servers",
                config,
                &server.model,
                registry,
                Some(listening),
            )
            .await?;
        servers.insert(server.id.clone(), agent);
    }
    Ok((servers, service_dbs))
}

/// A server's own SQL database of the spec's `kind`, created afresh with its seed rows.
async fn service_database(
    spec: &NetworkSpec,
    dir: &Path,
    server: &str,
    kind: &str,
) -> anyhow::Result<ServiceDatabase> {
    let schema = spec
        .databases
        .get(kind)
        .with_context(|| format!("no database kind {kind}"))?;
    let tables: Vec<ServiceTable> = schema
        .tables
        .iter()
        .map(|(name, table)| ServiceTable {
            name: name.clone(),
            columns: table
                .columns
                .iter()
                .map(|(c, t)| (c.clone(), t.as_str().unwrap_or("TEXT").to_string()))
                .collect(),
            constraints: table.constraints.clone(),
            rows: table.rows.clone(),
        })
        .collect();
    let path = service_db_path(dir, server);
    ServiceDatabase::create(&path, &tables)
        .await
        .with_context(|| format!("creating {server}'s database"))
}

/// One of a server's tools: a seeded mock, or an external tool through its helper.
fn server_tool(
    place: &Placement<'_>,
    seed: u64,
    helpers: &BTreeMap<String, Agent>,
    server: &str,
    tool: &ToolSpecEntry,
) -> anyhow::Result<Arc<dyn Tool>> {
    Ok(match tool {
        ToolSpecEntry::Mock {
            name,
            mock,
            description,
            input,
            output,
        } => {
            let kind =
                MockKind::parse(mock).with_context(|| format!("unknown mock tool {mock}"))?;
            let mut parameters = input.clone();
            if kind == MockKind::Weather
                && let Some(required) = parameters["required"].as_array_mut()
            {
                required.retain(|r| r != "location");
            }
            let spec = ToolSpec {
                name: name.clone(),
                description: description.clone(),
                parameters,
                returns: Some(output.clone()),
            };
            Arc::new(MockTool::new(spec, kind, seed, place.spec.clone()))
        }
        ToolSpecEntry::External {
            name,
            external,
            task,
            read_only,
        } => {
            let helper = helpers
                .get(server)
                .with_context(|| format!("{server} has no helper"))?;
            Arc::new(ExternalTool::new(
                name,
                place.spec.task(task)?,
                helper.node.clone(),
                place.server_url(external)?,
                *read_only,
            ))
        }
    })
}

/// The users hosted here: their tasks are whatever the screenplay gives them.
async fn start_users(
    place: &Placement<'_>,
    builder: &AgentBuilder<'_>,
) -> anyhow::Result<BTreeMap<String, Agent>> {
    let mut users = BTreeMap::new();
    for (position, user) in place.spec.users.iter().enumerate() {
        if !place.shard.hosts(position) {
            continue;
        }
        let mut config = NodeConfig {
            name: user.id.clone(),
            description: format!("{}, a personal assistant agent.", user.id),
            ..NodeConfig::default()
        };
        config.sender.protocol_db = Some(place.db_url(&user.protocol_db)?);
        let agent = builder
            .start(
                &user.id,
                "users",
                config,
                &user.model,
                ToolRegistry::default(),
                None,
            )
            .await?;
        users.insert(user.id.clone(), agent);
    }
    Ok(users)
}

struct AgentBuilder<'a> {
    dir: PathBuf,
    options: &'a NetworkOptions,
    shutdown: CancellationToken,
}

impl AgentBuilder<'_> {
    async fn start(
        &self,
        id: &str,
        kind: &str,
        mut config: NodeConfig,
        model: &str,
        tools: ToolRegistry,
        listening: Option<Listening>,
    ) -> anyhow::Result<Agent> {
        let Listening { listener, url } = match listening {
            Some(listening) => listening,
            None => {
                let (listener, url) = bind().await?;
                Listening { listener, url }
            }
        };
        config.public_url = url.clone();
        config.sender.protocol_db_token = Some(DB_TOKEN.into());
        config.sender.timeout_secs = self.options.sender_timeout_secs;
        self.options.setup.apply(&mut config);
        config.responder.native_tools = self.options.native_tools;
        apply_mode(&mut config, self.options.mode);
        let store_url = sqlite_url(&self.dir, kind, id);
        let store = open_store_with(&store_url, demo_store_options()).await?;
        let node = Node::new(NodeParts {
            config,
            store,
            llm: self.options.llm.clone(),
            fetcher: Fetcher::new(fetch_policy(&loopback_fetch())?)?,
            targets: TargetClient::new(TargetPolicy::default())?,
            tools,
            prices: price_of(model),
            clock: Arc::new(SystemClock),
            routine_engine: self.options.routine_engine.clone(),
        });
        node.sync_routines().await?;
        let state = AppState::new(node.clone(), None, 1024 * 1024, 64).with_edge(&demo_edge())?;
        let token = self.shutdown.clone();
        tokio::spawn(async move {
            if let Err(error) = serve_state(listener, state, token).await {
                tracing::error!(%error, "a network agent stopped serving");
            }
        });
        Ok(Agent {
            id: id.to_string(),
            node,
            url: format!("{url}/"),
        })
    }
}

fn sqlite_url(dir: &Path, kind: &str, id: &str) -> String {
    format!("sqlite://{}/{kind}/{id}.db", dir.display())
}

/// The edge of a network agent. Every agent of the run sends from 127.0.0.1, to servers whose
/// one model slot is shared by the whole network, so per-client budgets and the LLM work bound
/// would throttle the screenplay rather than a stranger: they are lifted, and the deadline is the
/// sender's own wait.
fn demo_edge() -> agora_server::EdgeSettings {
    let mut edge = agora_server::EdgeSettings::default();
    edge.rate_limit.enabled = false;
    edge.llm_work.max_concurrent = 64;
    edge.llm_work.max_queued = 1024;
    edge.llm_work.max_wait_secs = 3600;
    edge.request_timeout_secs = 3600;
    edge
}
