//! Where the agents run: all in this process, or split over worker processes.
//!
//! The runner asks the same few things either way: hold background jobs back during a query,
//! run a query on its user, wait until no routine is being written, read the new ledger rows,
//! count routines and negotiations, and sync a protocol database. The protocol databases always
//! live in this (the coordinating) process.
//!
//! With workers, each worker is this program started again (`agora demo network-worker`),
//! hosting one [`Shard`] of the agents with its own tokio runtime, LLM client and wasmtime
//! engine. The coordinator talks to a worker over the worker's stdin and stdout, one JSON line
//! per [`Command`] and per [`Reply`] (see `worker`). Agents talk to each other over HTTP in
//! either mode, so a query crosses processes exactly as it crosses nodes. A worker whose
//! coordinator dies sees its stdin close and stops.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio_util::sync::CancellationToken;

use crate::network::{
    AgentCounts, Agents, LedgerUsage, NetworkOptions, ProtocolDbs, ServerPorts, Shard, TaskOutcome,
    TaskQuery, prepare_dir,
};
use crate::record::Mode;
use crate::setup::ServerSetup;
use crate::spec::NetworkSpec;

/// How to start worker processes.
#[derive(Debug, Clone)]
pub struct WorkerLaunch {
    /// The `agora` executable (it is started as `agora demo network-worker`).
    pub program: PathBuf,
    /// How many workers share the agents (at least 2).
    pub processes: usize,
    /// The LLM every worker uses, as `--llm` takes it: an http(s) base URL, `openai` or
    /// `replay:FILE`.
    pub llm: String,
}

/// How every worker runs, whatever its share.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerRun {
    /// Where the network's stores go (prepared by the coordinator).
    pub dir: PathBuf,
    /// Thresholds.
    pub mode: Mode,
    /// The mock tools' seed.
    pub seed: u64,
    /// Longest a query may take.
    pub query_timeout_secs: u64,
    /// The responder uses the endpoint's native tool calling.
    pub native_tools: bool,
    /// How the agents answer and program.
    pub setup: ServerSetup,
}

/// What one worker needs to build its share of the network.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerSetup {
    /// Its share of the agents.
    pub shard: Shard,
    /// The LLM, as in [`WorkerLaunch::llm`].
    pub llm: String,
    /// Every protocol database's base URL, by id.
    pub db_urls: BTreeMap<String, String>,
    /// How every worker runs.
    pub run: WorkerRun,
}

/// What the coordinator asks a worker, one JSON line each.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Command {
    /// Bind the shard's server ports; answered with [`Reply::Servers`].
    Setup(WorkerSetup),
    /// Every server's URL; build and start the agents; answered with [`Reply::Done`].
    Start {
        /// Server id → base URL (with a trailing `/`).
        servers: BTreeMap<String, String>,
    },
    /// [`Agents::hold_jobs`].
    HoldJobs,
    /// [`Agents::release_jobs`].
    ReleaseJobs,
    /// [`Agents::run_task`]; answered with [`Reply::Task`].
    RunTask(TaskQuery),
    /// [`Agents::idle`], for at most the query timeout.
    Idle,
    /// [`Agents::read_ledgers`]; answered with [`Reply::Usage`].
    ReadLedgers,
    /// [`Agents::counts`]; answered with [`Reply::Counts`].
    Counts,
    /// Stop the agents and exit.
    Stop,
}

/// A worker's answer, one JSON line each.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// Done, nothing to say.
    Done,
    /// The shard's servers' URLs, by id.
    Servers {
        /// Server id → base URL (with a trailing `/`).
        servers: BTreeMap<String, String>,
    },
    /// How a query went.
    Task(TaskOutcome),
    /// New ledger rows, and the first call a replayed cassette could not answer, if any.
    Usage {
        /// The calls.
        usage: LedgerUsage,
        /// Why a replay must stop.
        missed: Option<String>,
    },
    /// Routines and negotiations.
    Counts(AgentCounts),
    /// The command failed.
    Failed {
        /// Why.
        error: String,
    },
}

/// The network as the runner sees it.
pub enum Hosting {
    /// Every agent in this process.
    OneProcess {
        /// The protocol databases.
        dbs: ProtocolDbs,
        /// The agents.
        agents: Box<Agents>,
        /// Stops the databases.
        shutdown: CancellationToken,
    },
    /// The agents in worker processes.
    Workers {
        /// The protocol databases.
        dbs: ProtocolDbs,
        /// The workers, by shard index.
        workers: Vec<Worker>,
        /// User id → the worker hosting it.
        users: BTreeMap<String, usize>,
        /// Stops the databases.
        shutdown: CancellationToken,
    },
}

impl Hosting {
    /// Builds the whole network in this process, emptying `options.dir` first.
    pub async fn one_process(
        spec: Arc<NetworkSpec>,
        options: &NetworkOptions,
    ) -> anyhow::Result<Hosting> {
        prepare_dir(&options.dir)?;
        let shutdown = CancellationToken::new();
        let dbs = ProtocolDbs::start(spec.clone(), &options.dir, &shutdown).await?;
        let ports = ServerPorts::bind(&spec, Shard::WHOLE).await?;
        let server_urls = ports.urls();
        let agents =
            Agents::start(spec, options, Shard::WHOLE, ports, server_urls, &dbs.urls()).await?;
        Ok(Hosting::OneProcess {
            dbs,
            agents: Box::new(agents),
            shutdown,
        })
    }

    /// Starts `launch.processes` workers sharing the agents, and the protocol databases here;
    /// `run.dir` is emptied first.
    pub async fn workers(
        spec: Arc<NetworkSpec>,
        launch: &WorkerLaunch,
        run: WorkerRun,
    ) -> anyhow::Result<Hosting> {
        if launch.processes < 2 {
            bail!("workers need at least 2 processes");
        }
        prepare_dir(&run.dir)?;
        let shutdown = CancellationToken::new();
        let dbs = ProtocolDbs::start(spec.clone(), &run.dir, &shutdown).await?;
        let mut workers = Vec::new();
        let mut server_urls = BTreeMap::new();
        for index in 0..launch.processes {
            let shard = Shard {
                index,
                count: launch.processes,
            };
            let mut worker = Worker::spawn(&launch.program, index)?;
            let reply = worker
                .ask(&Command::Setup(WorkerSetup {
                    shard,
                    llm: launch.llm.clone(),
                    db_urls: dbs.urls(),
                    run: run.clone(),
                }))
                .await?;
            let Reply::Servers { servers } = reply else {
                bail!("worker {index} answered its setup with {reply:?}");
            };
            server_urls.extend(servers);
            workers.push(worker);
        }
        for worker in &mut workers {
            worker
                .expect_done(&Command::Start {
                    servers: server_urls.clone(),
                })
                .await?;
        }
        let users = spec
            .users
            .iter()
            .enumerate()
            .map(|(position, user)| (user.id.clone(), position % launch.processes))
            .collect();
        Ok(Hosting::Workers {
            dbs,
            workers,
            users,
            shutdown,
        })
    }

    /// The protocol databases.
    pub fn dbs(&self) -> &ProtocolDbs {
        match self {
            Hosting::OneProcess { dbs, .. } | Hosting::Workers { dbs, .. } => dbs,
        }
    }

    /// Holds background jobs back everywhere.
    pub async fn hold_jobs(&mut self) -> anyhow::Result<()> {
        match self {
            Hosting::OneProcess { agents, .. } => agents.hold_jobs().await,
            Hosting::Workers { workers, .. } => tell_all(workers, &Command::HoldJobs).await?,
        }
        Ok(())
    }

    /// Lets held jobs go everywhere.
    pub async fn release_jobs(&mut self) -> anyhow::Result<()> {
        match self {
            Hosting::OneProcess { agents, .. } => agents.release_jobs().await,
            Hosting::Workers { workers, .. } => tell_all(workers, &Command::ReleaseJobs).await?,
        }
        Ok(())
    }

    /// Runs one query on its user.
    pub async fn run_task(
        &mut self,
        query: &TaskQuery,
        timeout: Duration,
    ) -> anyhow::Result<TaskOutcome> {
        match self {
            Hosting::OneProcess { agents, .. } => agents.run_task(query, timeout).await,
            Hosting::Workers { workers, users, .. } => {
                let index = *users
                    .get(&query.user)
                    .with_context(|| format!("no user {}", query.user))?;
                let worker = workers
                    .get_mut(index)
                    .with_context(|| format!("no worker {index}"))?;
                match worker.ask(&Command::RunTask(query.clone())).await? {
                    Reply::Task(outcome) => Ok(outcome),
                    other => bail!("worker {index} answered a query with {other:?}"),
                }
            }
        }
    }

    /// Waits until no agent has a routine being written, or `timeout` passes (then warns).
    pub async fn idle(&mut self, timeout: Duration) -> anyhow::Result<()> {
        match self {
            Hosting::OneProcess { agents, .. } => agents.idle(timeout).await,
            // Each worker waits at most its query timeout, and warns, as above.
            Hosting::Workers { workers, .. } => tell_all(workers, &Command::Idle).await?,
        }
        Ok(())
    }

    /// The LLM calls made since the last read, everywhere; and from workers, the first call a
    /// replayed cassette could not answer.
    pub async fn read_ledgers(&mut self) -> anyhow::Result<(LedgerUsage, Option<String>)> {
        match self {
            Hosting::OneProcess { agents, .. } => Ok((agents.read_ledgers().await?, None)),
            Hosting::Workers { workers, .. } => {
                let mut usage = LedgerUsage::default();
                let mut first_miss = None;
                for worker in workers {
                    match worker.ask(&Command::ReadLedgers).await? {
                        Reply::Usage {
                            usage: theirs,
                            missed,
                        } => {
                            usage.add(&theirs);
                            first_miss = first_miss.or(missed);
                        }
                        other => bail!(
                            "worker {} answered a ledger read with {other:?}",
                            worker.index
                        ),
                    }
                }
                Ok((usage, first_miss))
            }
        }
    }

    /// Routines and negotiations over every agent.
    pub async fn counts(&mut self) -> anyhow::Result<AgentCounts> {
        match self {
            Hosting::OneProcess { agents, .. } => agents.counts().await,
            Hosting::Workers { workers, .. } => {
                let mut counts = AgentCounts::default();
                for worker in workers {
                    match worker.ask(&Command::Counts).await? {
                        Reply::Counts(theirs) => counts.add(&theirs),
                        other => bail!("worker {} answered a count with {other:?}", worker.index),
                    }
                }
                Ok(counts)
            }
        }
    }

    /// Stops every agent and database; workers exit.
    pub async fn stop(self) {
        match self {
            Hosting::OneProcess {
                agents, shutdown, ..
            } => {
                agents.stop().await;
                shutdown.cancel();
            }
            Hosting::Workers {
                workers, shutdown, ..
            } => {
                for worker in workers {
                    worker.stop().await;
                }
                shutdown.cancel();
            }
        }
    }
}

/// Sends `command` to every worker in turn, each answering [`Reply::Done`].
async fn tell_all(workers: &mut [Worker], command: &Command) -> anyhow::Result<()> {
    for worker in workers {
        worker.expect_done(command).await?;
    }
    Ok(())
}

/// A worker process, as the coordinator holds it.
pub struct Worker {
    index: usize,
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    fn spawn(program: &std::path::Path, index: usize) -> anyhow::Result<Worker> {
        let mut child = tokio::process::Command::new(program)
            .args(["demo", "network-worker"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting worker {index} ({})", program.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("worker {index} has no stdin or stdout");
        };
        Ok(Worker {
            index,
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
        })
    }

    /// Sends one command and reads its reply; a [`Reply::Failed`] is an error.
    async fn ask(&mut self, command: &Command) -> anyhow::Result<Reply> {
        let mut line = serde_json::to_string(command)?;
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .with_context(|| format!("writing to worker {}", self.index))?;
        self.stdin.flush().await?;
        let Some(answer) = self
            .stdout
            .next_line()
            .await
            .with_context(|| format!("reading from worker {}", self.index))?
        else {
            bail!("worker {} exited (see its errors above)", self.index);
        };
        let reply: Reply = serde_json::from_str(&answer)
            .with_context(|| format!("worker {} said {answer:?}", self.index))?;
        if let Reply::Failed { error } = reply {
            bail!("worker {}: {error}", self.index);
        }
        Ok(reply)
    }

    async fn expect_done(&mut self, command: &Command) -> anyhow::Result<()> {
        match self.ask(command).await? {
            Reply::Done => Ok(()),
            other => bail!("worker {} answered {command:?} with {other:?}", self.index),
        }
    }

    async fn stop(mut self) {
        if let Err(error) = self.expect_done(&Command::Stop).await {
            tracing::warn!(worker = self.index, %error, "a worker did not stop cleanly");
        }
        drop(self.stdin);
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
