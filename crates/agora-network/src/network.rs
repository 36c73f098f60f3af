//! One process hosting the whole network on loopback.
//!
//! Every agent is a real agora node with its own SQLite store, served over HTTP on its own
//! 127.0.0.1 port: the 15 servers (their tools, and a SQLite database each where the paper had
//! one), the 85 users, one helper per server with external tools (the server's outbound side:
//! it runs the external tool as a task against the other server), and the 3 protocol databases,
//! peered in a line. All nodes share one LLM client (whose pool bounds the calls in flight) and
//! one WebAssembly routine runtime (one wasmtime engine).
//!
//! Agents are priced as the model the paper gave them, so costs compare with the paper's even
//! though one local model answers for all of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agora_fetch::Fetcher;
use agora_llm::{Llm, PriceTable};
use agora_node::tools::{Tool, ToolSpec};
use agora_node::{Node, NodeConfig, NodeParts, RoutineEngine, SystemClock, ToolRegistry};
use agora_server::protocol_db::{
    ProtocolDbServerConfig, RunningProtocolDb, build_protocol_db, serve_protocol_db,
};
use agora_server::runtime::{fetch_policy, open_store};
use agora_server::{AppState, FetchSettings, serve_state};
use agora_store::{ServiceDatabase, ServiceTable};
use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::record::Mode;
use crate::spec::{NetworkSpec, ToolSpecEntry};
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

/// The running network.
pub struct Network {
    /// The description it was built from.
    pub spec: Arc<NetworkSpec>,
    /// Servers by id.
    pub servers: BTreeMap<String, Agent>,
    /// Users by id.
    pub users: BTreeMap<String, Agent>,
    /// Helpers by the id of the server they serve.
    pub helpers: BTreeMap<String, Agent>,
    /// Protocol databases by id.
    pub databases: BTreeMap<String, Database>,
    /// The servers' own SQL databases.
    service_dbs: Vec<ServiceDatabase>,
    shutdown: CancellationToken,
}

impl Network {
    /// Every agent node: servers, helpers, users.
    pub fn agents(&self) -> impl Iterator<Item = &Agent> {
        self.servers
            .values()
            .chain(self.helpers.values())
            .chain(self.users.values())
    }

    /// Waits until no node has a routine being written.
    pub async fn idle(&self) {
        for agent in self.agents() {
            agent.node.programmer_idle().await;
            agent.node.sender_routines_idle().await;
        }
    }

    /// Stops serving and closes every store.
    pub async fn stop(self) {
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

impl Network {
    /// Builds and starts the whole network.
    pub async fn start(spec: Arc<NetworkSpec>, options: NetworkOptions) -> anyhow::Result<Network> {
        let dir = &options.dir;
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("emptying {}", dir.display()))?;
        }
        for sub in ["servers", "users", "helpers", "protocol-dbs", "service-dbs"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let shutdown = CancellationToken::new();

        // Ports first: every URL is known before any node is built.
        let mut db_ports = BTreeMap::new();
        for db in &spec.protocol_dbs {
            let (listener, url) = bind().await?;
            db_ports.insert(db.id.clone(), Listening { listener, url });
        }
        let mut server_ports = BTreeMap::new();
        for server in &spec.servers {
            let (listener, url) = bind().await?;
            server_ports.insert(server.id.clone(), Listening { listener, url });
        }
        let server_urls: BTreeMap<String, String> = server_ports
            .iter()
            .map(|(id, l)| (id.clone(), format!("{}/", l.url)))
            .collect();
        let server_url = |id: &str| -> anyhow::Result<String> {
            server_urls
                .get(id)
                .cloned()
                .with_context(|| format!("no server {id}"))
        };

        // Protocol databases, peered as the spec says.
        let mut databases = BTreeMap::new();
        let db_urls: BTreeMap<String, String> = db_ports
            .iter()
            .map(|(id, l)| (id.clone(), l.url.clone()))
            .collect();
        for db in &spec.protocol_dbs {
            let Some(listening) = db_ports.remove(&db.id) else {
                continue;
            };
            let peers = db
                .peers
                .iter()
                .filter_map(|peer| db_urls.get(peer).cloned())
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
        let db_url = |id: &str| -> anyhow::Result<String> {
            Ok(databases
                .get(id)
                .with_context(|| format!("no protocol database {id}"))?
                .url
                .clone())
        };

        let builder = AgentBuilder {
            dir: dir.clone(),
            options: &options,
            shutdown: shutdown.clone(),
        };

        // Helpers: senders for their server's external tools.
        let mut helpers = BTreeMap::new();
        for server in spec.helpers() {
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
                    config.tasks.push(spec.task(task)?);
                }
            }
            config.sender.protocol_db = Some(db_url(&server.protocol_db)?);
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

        // Servers: their tools, their databases.
        let mut servers = BTreeMap::new();
        let mut service_dbs = Vec::new();
        for server in &spec.servers {
            let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
            if let Some(kind) = &server.database {
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
                let path = dir.join("service-dbs").join(format!("{}.db", server.id));
                let database = ServiceDatabase::create(&path, &tables)
                    .await
                    .with_context(|| format!("creating {}'s database", server.id))?;
                service_dbs.push(database.clone());
                tools.push(Arc::new(SqlTool::new(database, schema)));
            }
            for tool in &server.tools {
                match tool {
                    ToolSpecEntry::Mock {
                        name,
                        mock,
                        description,
                        input,
                        output,
                    } => {
                        let kind = MockKind::parse(mock)
                            .with_context(|| format!("unknown mock tool {mock}"))?;
                        let mut parameters = input.clone();
                        if kind == MockKind::Weather
                            && let Some(required) = parameters["required"].as_array_mut()
                        {
                            required.retain(|r| r != "location");
                        }
                        let spec_ = ToolSpec {
                            name: name.clone(),
                            description: description.clone(),
                            parameters,
                            returns: Some(output.clone()),
                        };
                        tools.push(Arc::new(MockTool::new(
                            spec_,
                            kind,
                            options.seed,
                            spec.clone(),
                        )));
                    }
                    ToolSpecEntry::External {
                        name,
                        external,
                        task,
                    } => {
                        let helper = helpers
                            .get(&server.id)
                            .with_context(|| format!("{} has no helper", server.id))?;
                        tools.push(Arc::new(ExternalTool::new(
                            name,
                            spec.task(task)?,
                            helper.node.clone(),
                            server_url(external)?,
                        )));
                    }
                }
            }
            let registry = ToolRegistry::from_tools(tools)
                .with_context(|| format!("{}'s tools", server.id))?;
            let config = NodeConfig {
                name: server.id.clone(),
                description: server.description.clone(),
                ..NodeConfig::default()
            };
            let listening = server_ports
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

        // Users: their tasks are whatever the screenplay gives them.
        let mut users = BTreeMap::new();
        for user in &spec.users {
            let mut config = NodeConfig {
                name: user.id.clone(),
                description: format!("{}, a personal assistant agent.", user.id),
                ..NodeConfig::default()
            };
            config.sender.protocol_db = Some(db_url(&user.protocol_db)?);
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

        Ok(Network {
            spec,
            servers,
            users,
            helpers,
            databases,
            service_dbs,
            shutdown,
        })
    }
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
        config.responder.native_tools = self.options.native_tools;
        apply_mode(&mut config, self.options.mode);
        let store_url = sqlite_url(&self.dir, kind, id);
        let store = open_store(&store_url).await?;
        let node = Node::new(NodeParts {
            config,
            store,
            llm: self.options.llm.clone(),
            fetcher: Fetcher::new(fetch_policy(&loopback_fetch())?)?,
            tools,
            prices: price_of(model),
            clock: Arc::new(SystemClock),
            routine_engine: self.options.routine_engine.clone(),
        });
        node.sync_routines().await?;
        let state = AppState::new(node.clone(), None, 1024 * 1024, 64);
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
