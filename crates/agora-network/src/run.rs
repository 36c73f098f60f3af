//! Replaying the screenplay on a running network.
//!
//! Queries run one at a time, in screenplay order, with a protocol database sync wherever the
//! screenplay has one (after every 10 queries). Routine writing a query triggers waits until the
//! query is done (a job gate shared with every node); then the runner waits until no node is
//! still writing a routine, then reads every node's new ledger rows: each
//! LLM call is attributed to the query that caused it, wherever in the network it was made
//! (user, server, helper, the server behind a helper). Running one query at a time (the paper ran
//! 20 workers) keeps that attribution exact and the LLM calls in a fixed order, which is what
//! lets a cassette replay the run; a one-slot local model would not go faster in parallel.
//!
//! A query fails when the user's task errs (the output must be valid against the task's output
//! schema) or takes longer than the query timeout; the run goes on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agora_llm::Llm;
use agora_node::RoutineEngine;
use agora_store::{RoutineOrigin, RoutineStatus};
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use crate::network::{Network, NetworkOptions};
use crate::record::{CallTotals, Mode, NetworkStats, QueryRecord, RunRecord};
use crate::spec::{Entry, NetworkSpec};

/// How to run.
pub struct RunOptions {
    /// Queries of the screenplay to run (the first N).
    pub queries: usize,
    /// Thresholds.
    pub mode: Mode,
    /// Where the network's stores go (emptied first).
    pub dir: std::path::PathBuf,
    /// The mock tools' seed.
    pub seed: u64,
    /// Longest a query may take before it counts as a failure.
    pub query_timeout: Duration,
    /// The LLM, in words, for the record.
    pub llm_description: String,
    /// Show a progress bar on the terminal.
    pub progress: bool,
    /// The responder uses the endpoint's native tool calling.
    pub native_tools: bool,
    /// Asked after every query: a reason stops the run with an error (a replay whose cassette
    /// lacked a call, for instance).
    pub halt: Option<Halt>,
    /// Given the record of the queries done so far at every protocol database sync (every 10
    /// queries), so that a run killed with its session leaves what it finished.
    pub checkpoint: Option<Checkpoint>,
}

/// See [`RunOptions::halt`].
pub type Halt = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// See [`RunOptions::checkpoint`].
pub type Checkpoint = Arc<dyn Fn(&RunRecord) -> anyhow::Result<()> + Send + Sync>;

/// Runs the first `options.queries` queries of `entries` on a fresh network.
pub async fn run_screenplay(
    spec: Arc<NetworkSpec>,
    entries: &[Entry],
    llm: Arc<dyn Llm>,
    routine_engine: Option<Arc<dyn RoutineEngine>>,
    options: RunOptions,
) -> anyhow::Result<RunRecord> {
    let started = Instant::now();
    let network = Network::start(
        spec.clone(),
        NetworkOptions {
            dir: options.dir.clone(),
            mode: options.mode,
            llm,
            routine_engine,
            seed: options.seed,
            sender_timeout_secs: options.query_timeout.as_secs().max(1),
            native_tools: options.native_tools,
        },
    )
    .await?;
    let gate = Arc::new(tokio::sync::RwLock::new(()));
    for agent in network.agents() {
        agent.node.share_job_gate(gate.clone());
    }
    let mut ledger = LedgerReader::default();
    let progress = if options.progress {
        let bar = ProgressBar::new(options.queries as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} queries, ETA {eta}  {msg}",
            )
            .map_err(|e| anyhow::anyhow!("progress template: {e}"))?
            .progress_chars("=> "),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut records: Vec<QueryRecord> = Vec::new();
    let (mut calls_so_far, mut failures) = (0u64, 0u64);
    for entry in entries {
        if records.len() >= options.queries {
            break;
        }
        match entry {
            Entry::Sync(db) => {
                sync(&network, db).await;
                if let Some(checkpoint) = &options.checkpoint
                    && !records.is_empty()
                {
                    let so_far = run_record(&options, records.clone(), &network, started).await?;
                    if let Err(error) = checkpoint(&so_far) {
                        tracing::warn!(%error, "could not write the checkpoint");
                    }
                }
            }
            Entry::Query(query) => {
                let user = network
                    .users
                    .get(&query.user)
                    .with_context(|| format!("no user {}", query.user))?;
                let server = network
                    .servers
                    .get(&query.server)
                    .with_context(|| format!("no server {}", query.server))?;
                let task = spec.task(&query.task)?;
                let data = spec.normalize_data(&query.task, &query.data);
                let began = Instant::now();
                // Background routine writing waits until the query is done (see
                // `Node::share_job_gate`), so a replay meets the calls in the recorded order.
                let hold = gate.clone().write_owned().await;
                let outcome = tokio::time::timeout(
                    options.query_timeout,
                    user.node.run_task(&server.url, &task, &data),
                )
                .await;
                let (success, error) = match outcome {
                    Ok(Ok(_)) => (true, None),
                    Ok(Err(error)) => (false, Some(error.to_string())),
                    Err(_) => (
                        false,
                        Some(format!(
                            "timed out after {} s",
                            options.query_timeout.as_secs()
                        )),
                    ),
                };
                drop(hold);
                if tokio::time::timeout(options.query_timeout, network.idle())
                    .await
                    .is_err()
                {
                    tracing::warn!(query = query.index, "routine writing still running");
                }
                let wall_ms = began.elapsed().as_millis() as u64;
                let (llm, by_category) = ledger.read_new(&network).await?;
                let path = user
                    .node
                    .store()
                    .sender_runs(&server.url, &task.name, 1)
                    .await?
                    .pop()
                    .map(|run| run.rung)
                    .unwrap_or_default();
                let record = QueryRecord {
                    index: query.index,
                    user: query.user.clone(),
                    server: query.server.clone(),
                    task: query.task.clone(),
                    success,
                    error,
                    path,
                    wall_ms,
                    llm,
                    by_category,
                };
                progress.inc(1);
                calls_so_far += record.llm.calls;
                failures += u64::from(!record.success);
                progress.set_message(format!(
                    "LLM calls: {} this query, {:.1}/query; {failures} failed",
                    record.llm.calls,
                    calls_so_far as f64 / (records.len() + 1) as f64,
                ));
                if !options.progress {
                    println!(
                        "{:>4} {:<10} -> {:<15} {:<18} {:<4} {:<9} {:>3} calls {:>6} tok ${:.4} {:>6.1} s{}",
                        record.index,
                        record.user,
                        record.server,
                        record.task,
                        if record.success { "ok" } else { "FAIL" },
                        record.path,
                        record.llm.calls,
                        record.llm.prompt_tokens + record.llm.completion_tokens,
                        record.llm.cost_usd,
                        record.wall_ms as f64 / 1000.0,
                        record
                            .error
                            .as_deref()
                            .map(|e| format!("  {}", e.chars().take(120).collect::<String>()))
                            .unwrap_or_default()
                    );
                }
                records.push(record);
                if let Some(reason) = options.halt.as_ref().and_then(|halt| halt()) {
                    progress.abandon();
                    network.stop().await;
                    anyhow::bail!("stopped after query {}: {reason}", query.index);
                }
            }
        }
    }
    progress.finish();
    let run = run_record(&options, records, &network, started).await;
    network.stop().await;
    run
}

/// The record of the queries done, with the network as it is now.
async fn run_record(
    options: &RunOptions,
    queries: Vec<QueryRecord>,
    network: &Network,
    started: Instant,
) -> anyhow::Result<RunRecord> {
    let mut run = RunRecord {
        mode: options.mode,
        llm: options.llm_description.clone(),
        queries_planned: options.queries,
        queries,
        totals: CallTotals::default(),
        by_category: BTreeMap::new(),
        network: stats(network).await?,
        wall_secs: started.elapsed().as_secs_f64(),
    };
    run.recompute_totals();
    Ok(run)
}

/// The screenplay's sync entry for `db`: its neighbours pull what it has (the paper's databases
/// pushed to their peers; ours pull, so the neighbours do).
async fn sync(network: &Network, db: &str) {
    let Some(spec) = network.spec.protocol_dbs.iter().find(|d| d.id == db) else {
        return;
    };
    for peer in &spec.peers {
        if let Some(peer) = network.databases.get(peer) {
            let report = peer.running.db.sync_now().await;
            if report.errors() > 0 {
                tracing::warn!(db = %peer.id, errors = report.errors(), "sync had errors");
            }
        }
    }
}

/// Reads each node's ledger rows that are new since the last read.
#[derive(Default)]
struct LedgerReader {
    last_ids: BTreeMap<String, i64>,
}

impl LedgerReader {
    async fn read_new(
        &mut self,
        network: &Network,
    ) -> anyhow::Result<(CallTotals, BTreeMap<String, CallTotals>)> {
        let mut totals = CallTotals::default();
        let mut by_category: BTreeMap<String, CallTotals> = BTreeMap::new();
        for agent in network.agents() {
            let last = self.last_ids.entry(agent.id.clone()).or_insert(0);
            for (id, call) in agent.node.store().llm_calls_after(*last).await? {
                *last = id;
                let usage = CallTotals {
                    calls: 1,
                    prompt_tokens: call.prompt_tokens.max(0) as u64,
                    completion_tokens: call.completion_tokens.max(0) as u64,
                    cost_usd: call.cost_usd,
                    latency_ms: call.latency_ms.max(0) as u64,
                };
                totals.add(&usage);
                by_category.entry(call.category).or_default().add(&usage);
            }
        }
        Ok((totals, by_category))
    }
}

async fn stats(network: &Network) -> anyhow::Result<NetworkStats> {
    let mut protocols_per_db = BTreeMap::new();
    for (id, db) in &network.databases {
        let counts = db.running.db.counts().await?;
        protocols_per_db.insert(id.clone(), (counts.local + counts.from_peers).max(0) as u64);
    }
    let mut server_routines = 0;
    for server in network.servers.values() {
        server_routines += server
            .node
            .store()
            .routines()
            .await?
            .iter()
            .filter(|r| r.status == RoutineStatus::Active && r.origin == RoutineOrigin::Llm)
            .count() as u64;
    }
    // Senders' side: active routines, and negotiations from every run's steps, once per
    // (target, task) whatever rungs its runs took.
    let mut sender_routines = 0;
    let mut negotiations = 0;
    for agent in network.users.values().chain(network.helpers.values()) {
        let store = agent.node.store();
        sender_routines += store
            .sender_routines()
            .await?
            .iter()
            .filter(|r| r.active)
            .count() as u64;
        let keys: BTreeSet<(String, String)> = store
            .sender_totals()
            .await?
            .into_iter()
            .map(|totals| (totals.target, totals.task))
            .collect();
        for (target, task) in keys {
            for run in store.sender_runs(&target, &task, i64::MAX).await? {
                negotiations += run
                    .steps
                    .split(',')
                    .filter(|step| step.starts_with("negotiated"))
                    .count() as u64;
            }
        }
    }
    Ok(NetworkStats {
        protocols_per_db,
        negotiations,
        server_routines,
        sender_routines,
    })
}
