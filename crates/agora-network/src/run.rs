//! Replaying the screenplay on a running network.
//!
//! Queries run one at a time, in screenplay order, with a protocol database sync wherever the
//! screenplay has one (after every 10 queries), on a network hosted by this process or by worker
//! processes (see `hosting`). Routine writing a query triggers waits until the query is done (a
//! job gate shared with every node of a process, held in every process); then the runner waits
//! until no node is still writing a routine, then reads every node's new ledger rows: each
//! LLM call is attributed to the query that caused it, wherever in the network it was made
//! (user, server, helper, the server behind a helper). Running one query at a time (the paper ran
//! 20 workers) keeps that attribution exact and the LLM calls in a fixed order, which is what
//! lets a cassette replay the run; a one-slot local model would not go faster in parallel.
//!
//! A query fails when the user's task errs (the output must be valid against the task's output
//! schema) or takes longer than the query timeout; the run goes on. Each query's output is
//! kept and judged as the run goes (`agora_judge`): the progress line counts correct answers.
//! Where the target server has a database, the runner reads its tables before and after the
//! query (over a read-only connection of its own, so worker processes' servers are read too)
//! and keeps what the query wrote; the judge holds the reply to it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::service_db::{ServiceDatabase, TableRows};
use agora_judge::{Judge, Verdict, Writes};
use agora_llm::Llm;
use agora_node::RoutineEngine;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use crate::hosting::{Hosting, WorkerLaunch, WorkerRun};
use crate::network::{NetworkOptions, TaskQuery, service_db_path};
use crate::record::{CallTotals, Mode, NetworkStats, QueryRecord, RunRecord, Sample};
use crate::setup::ServerSetup;
use crate::spec::{Entry, NetworkSpec};

/// How to run.
pub struct RunOptions {
    /// Queries of the screenplay to run (the first N).
    pub queries: usize,
    /// Set when `entries` are a stratified sample of the screenplay (for the record).
    pub sample: Option<Sample>,
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
    /// How the agents answer and program.
    pub setup: ServerSetup,
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

/// Runs the first `options.queries` queries of `entries` on a fresh network hosted by this
/// process, every node sharing `llm` and `routine_engine`.
pub async fn run_screenplay(
    spec: Arc<NetworkSpec>,
    entries: &[Entry],
    llm: Arc<dyn Llm>,
    routine_engine: Option<Arc<dyn RoutineEngine>>,
    options: RunOptions,
) -> anyhow::Result<RunRecord> {
    let started = Instant::now();
    let hosting = Hosting::one_process(
        spec.clone(),
        &NetworkOptions {
            dir: options.dir.clone(),
            mode: options.mode,
            llm,
            routine_engine,
            seed: options.seed,
            sender_timeout_secs: options.query_timeout.as_secs().max(1),
            native_tools: options.native_tools,
            setup: options.setup.clone(),
        },
    )
    .await?;
    run_on(hosting, spec, entries, options, started).await
}

/// Runs the first `options.queries` queries of `entries` on a fresh network whose agents live in
/// worker processes (see [`crate::hosting`]); the protocol databases and the runner stay here.
pub async fn run_screenplay_in_workers(
    spec: Arc<NetworkSpec>,
    entries: &[Entry],
    launch: &WorkerLaunch,
    options: RunOptions,
) -> anyhow::Result<RunRecord> {
    let started = Instant::now();
    let hosting = Hosting::workers(
        spec.clone(),
        launch,
        WorkerRun {
            dir: options.dir.clone(),
            mode: options.mode,
            seed: options.seed,
            query_timeout_secs: options.query_timeout.as_secs().max(1),
            native_tools: options.native_tools,
            setup: options.setup.clone(),
        },
    )
    .await?;
    run_on(hosting, spec, entries, options, started).await
}

async fn run_on(
    mut hosting: Hosting,
    spec: Arc<NetworkSpec>,
    entries: &[Entry],
    options: RunOptions,
    started: Instant,
) -> anyhow::Result<RunRecord> {
    let result = run_queries(&mut hosting, &spec, entries, &options, started).await;
    hosting.stop().await;
    result
}

async fn run_queries(
    hosting: &mut Hosting,
    spec: &NetworkSpec,
    entries: &[Entry],
    options: &RunOptions,
    started: Instant,
) -> anyhow::Result<RunRecord> {
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
    let (mut calls_so_far, mut failures, mut correct) = (0u64, 0u64, 0u64);
    let mut judge = Judge::new(spec, options.seed);
    for entry in entries {
        // The syncs right after the last query run too, so that a run of N queries ends where
        // the checkpoint at that sync left a longer run (its record, its protocol databases).
        if records.len() >= options.queries && matches!(entry, Entry::Query(_)) {
            break;
        }
        match entry {
            Entry::Sync(db) => {
                hosting.dbs().sync(db).await;
                if let Some(checkpoint) = &options.checkpoint
                    && !records.is_empty()
                {
                    let so_far =
                        run_record(spec, options, records.clone(), hosting, started).await?;
                    if let Err(error) = checkpoint(&so_far) {
                        tracing::warn!(%error, "could not write the checkpoint");
                    }
                }
            }
            Entry::Query(query) => {
                let task_query = TaskQuery {
                    user: query.user.clone(),
                    server: query.server.clone(),
                    task: query.task.clone(),
                    data: spec.normalize_data(&query.task, &query.data),
                };
                let database = spec
                    .server(&query.server)
                    .ok()
                    .and_then(|server| server.database.as_ref())
                    .map(|_| service_db_path(&options.dir, &query.server));
                let before = match database {
                    Some(path) => Some((read_tables(&path).await?, path)),
                    None => None,
                };
                let began = Instant::now();
                // Background routine writing waits until the query is done (see
                // `Node::share_job_gate`), so a replay meets the calls in the recorded order.
                hosting.hold_jobs().await?;
                let outcome = hosting.run_task(&task_query, options.query_timeout).await;
                hosting.release_jobs().await?;
                let outcome = outcome?;
                hosting.idle(options.query_timeout).await?;
                let wall_ms = began.elapsed().as_millis() as u64;
                let (usage, missed) = hosting.read_ledgers().await?;
                let writes = match before {
                    Some((before, path)) => {
                        Some(Writes::between(&before, &read_tables(&path).await?))
                    }
                    None => None,
                };
                let verdict = judge.judge_with_writes(
                    &query.server,
                    &query.task,
                    &query.data,
                    outcome.output.as_ref(),
                    writes.as_ref(),
                );
                correct += u64::from(verdict == Verdict::Correct);
                let answered_by = outcome.output.as_ref().map(|_| {
                    if usage.conversing.contains(&query.server) {
                        "llm".to_string()
                    } else {
                        "routine".to_string()
                    }
                });
                let record = QueryRecord {
                    index: query.index,
                    user: query.user.clone(),
                    server: query.server.clone(),
                    task: query.task.clone(),
                    data: query.data.clone(),
                    success: outcome.success,
                    output: outcome.output,
                    answered_by,
                    writes,
                    verdict: Some(verdict),
                    error: outcome.error,
                    path: outcome.path,
                    wall_ms,
                    llm: usage.totals,
                    by_category: usage.by_category,
                    shadow: usage.shadow,
                };
                progress.inc(1);
                calls_so_far += record.llm.calls;
                failures += u64::from(!record.success);
                progress.set_message(format!(
                    "{correct} correct; LLM calls: {} this query, {:.1}/query; {failures} failed",
                    record.llm.calls,
                    calls_so_far as f64 / (records.len() + 1) as f64,
                ));
                if !options.progress {
                    println!(
                        "{:>4} {:<10} -> {:<15} {:<18} {:<8} {:>4} correct {:<9} {:>3} calls {:>6} tok ${:.4} {:>6.1} s{}",
                        record.index,
                        record.user,
                        record.server,
                        record.task,
                        record.verdict_word(),
                        correct,
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
                let halted = options.halt.as_ref().and_then(|halt| halt()).or(missed);
                if let Some(reason) = halted {
                    progress.abandon();
                    anyhow::bail!("stopped after query {}: {reason}", query.index);
                }
            }
        }
    }
    progress.finish();
    run_record(spec, options, records, hosting, started).await
}

/// The record of the queries done, with the network as it is now, judged.
async fn run_record(
    spec: &NetworkSpec,
    options: &RunOptions,
    queries: Vec<QueryRecord>,
    hosting: &mut Hosting,
    started: Instant,
) -> anyhow::Result<RunRecord> {
    let counts = hosting.counts().await?;
    let mut run = RunRecord {
        mode: options.mode,
        llm: options.llm_description.clone(),
        seed: options.seed,
        queries_planned: options.queries,
        queries,
        totals: CallTotals::default(),
        by_category: BTreeMap::new(),
        network: NetworkStats {
            protocols_per_db: hosting.dbs().protocol_counts().await?,
            negotiations: counts.negotiations,
            server_routines: counts.server_routines,
            sender_routines: counts.sender_routines,
        },
        wall_secs: started.elapsed().as_secs_f64(),
        sample: options.sample,
        setup: Some(options.setup.clone()),
    };
    run.recompute_totals();
    run.judge(spec);
    Ok(run)
}

/// The tables of the service database at `path`, for the judge (see `agora_judge::writes`).
async fn read_tables(path: &std::path::Path) -> anyhow::Result<Vec<TableRows>> {
    ServiceDatabase::read_tables(path)
        .await
        .with_context(|| format!("reading {} for the judge", path.display()))
}
