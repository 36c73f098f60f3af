//! `agora demo weather`: the paper's weather demo on loopback (see `agora_network::weather`).
//! `agora demo network`: the paper's 100-agent network (see `agora_network`), and
//! `agora demo network-report`: the report from run records (and `--judge RUN`: the verdicts of
//! one record), `agora demo network generate`: a new screenplay with the paper's generator.

use std::path::PathBuf;

use std::time::Duration;

use agora_network::demo::{LlmChoice, NetworkDemo, run_demo, write_run};
use agora_network::judge::generator::{GeneratorConfig, generate, to_text};
use agora_network::report::{ReportInput, write_report};
use agora_network::spec::{
    NetworkSpec, counts_by_server_task, embedded_screenplay, parse_screenplay,
};
use agora_network::weather::{self as demo, WeatherDemo};
use agora_network::{Mode, RunRecord, Sample, ServerSetup};
use agora_server::LlmSettings;
use anyhow::Context;
use anyhow::bail;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum DemoCommand {
    /// Alice asks Bob for forecasts until they negotiate a protocol and both sides answer with
    /// routines; prints a phase-by-phase table of LLM calls, tokens and costs.
    Weather {
        /// Queries Alice sends.
        #[arg(long, default_value_t = 10)]
        queries: usize,
        /// The LLM: `local` (start the installed local model) or the base URL of an
        /// OpenAI-compatible server, e.g. http://127.0.0.1:8011/v1.
        #[arg(long, default_value = "local")]
        llm: String,
        /// Record every LLM call to this cassette (JSONL).
        #[arg(long)]
        record: Option<PathBuf>,
        /// Where the agents' stores go (emptied first).
        #[arg(long, default_value = ".agora/demo-weather")]
        dir: PathBuf,
        /// The JSON report.
        #[arg(long, default_value = ".agora/demo-weather-report.json")]
        report: PathBuf,
        /// After the report, keep Alice and Bob serving (their dashboards included) until Ctrl-C.
        #[arg(long)]
        keep_running: bool,
    },
    /// The paper's 100-agent network (15 servers, 85 users, 8 helpers, 3 protocol databases)
    /// replays its screenplay; writes a run record (JSON) for `network-report`.
    #[command(args_conflicts_with_subcommands = true)]
    Network {
        /// `generate`: write a new screenplay instead of running one.
        #[command(subcommand)]
        action: Option<NetworkAction>,
        /// The screenplay to run (the committed format); the paper's when none.
        #[arg(long)]
        screenplay: Option<PathBuf>,
        /// Queries of the 1000-query screenplay to run (the first N).
        #[arg(long, default_value_t = 100)]
        queries: usize,
        /// `agora` (the paper's thresholds) or `nl-only` (every threshold infinite).
        #[arg(long, default_value = "agora", value_parser = ["agora", "nl-only"])]
        mode: String,
        /// `local` (start the installed local model), an http(s) base URL of an
        /// OpenAI-compatible server, `openai` ($OPENAI_API_KEY), or `replay:FILE` (a cassette,
        /// offline; an unrecorded call fails the run).
        #[arg(long, default_value = "local")]
        llm: String,
        /// Record every LLM call to this cassette (JSONL). Resumable: what the file holds is
        /// replayed, then the run continues live and appends.
        #[arg(long)]
        record: Option<PathBuf>,
        /// Where the network's stores go (emptied first).
        #[arg(long, default_value = ".agora/demo-network")]
        dir: PathBuf,
        /// The run record to write.
        #[arg(long, default_value = ".agora/demo-network-run.json")]
        out: PathBuf,
        /// The mock tools' seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Seconds before a query counts as failed (the run goes on).
        #[arg(long, default_value_t = 900)]
        query_timeout_secs: u64,
        /// No progress bar (log a line per query instead).
        #[arg(long)]
        no_progress: bool,
        /// Processes hosting the agents: 1 hosts the whole network in this process; N > 1
        /// splits the servers (each with its helper) and users over N worker processes, with
        /// the protocol databases and the runner here. Not with --record.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
        processes: u16,
        /// Run a stratified sample of the screenplay: of each (server, task) pair's queries,
        /// this many drawn at random, or all of them when it has no more (every sync kept).
        /// `--queries` then counts the sample's queries. For an NL-only measure of the whole
        /// screenplay; the report extrapolates it per pair as an ESTIMATE.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        sample_per_pair: Option<u64>,
        /// The seed of `--sample-per-pair`'s draw.
        #[arg(long, default_value_t = 1, requires = "sample_per_pair")]
        sample_seed: u64,
        /// A TOML file of `[responder]` and `[programmer]` settings for every agent, in place of
        /// a node's defaults (a key left out keeps its default): for measuring one setting
        /// against the defaults.
        #[arg(long)]
        servers: Option<PathBuf>,
    },
    /// One worker process of `demo network --processes N` (started by it; speaks JSON lines on
    /// stdin and stdout).
    #[command(hide = true)]
    NetworkWorker,
    /// Writes the network demo's report (report.md, CSV, SVG plots) from run records, each
    /// judged again; or, with `--judge RUN`, prints one record's verdicts.
    NetworkReport {
        /// The run record of the `agora` mode.
        #[arg(long)]
        agora: Option<PathBuf>,
        /// The run record of the `nl-only` mode.
        #[arg(long)]
        nl_only: Option<PathBuf>,
        /// The report's folder (`demo/network/reports/<run>`).
        #[arg(long, required_unless_present = "judge")]
        out: Option<PathBuf>,
        /// Judge this run record from the record alone and print its verdicts per (server,
        /// task), and how many differ from the verdicts it stores.
        #[arg(long, conflicts_with_all = ["agora", "nl_only", "out"])]
        judge: Option<PathBuf>,
        /// With `--judge`: write the verdicts back into the record (a record made before the
        /// judge's rules changed, or before records kept verdicts).
        #[arg(long, requires = "judge")]
        update: bool,
        /// The screenplay the runs ran (for the per-pair counts); the paper's when none.
        #[arg(long)]
        screenplay: Option<PathBuf>,
    },
}

/// What `demo network` does instead of running.
#[derive(Subcommand)]
pub enum NetworkAction {
    /// Writes a new screenplay to stdout with the paper's generator (Pareto budgets of shape 0.5,
    /// at least 1 per user; 3 (server, task) pairs per user split with shape 1; a sync every 10
    /// queries cycling the protocol databases).
    Generate {
        /// The generator's seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Queries in all (at least one per user).
        #[arg(long, default_value_t = 1000)]
        queries: usize,
    },
}

fn read_screenplay(path: Option<&PathBuf>) -> anyhow::Result<Vec<agora_network::spec::Entry>> {
    match path {
        None => Ok(embedded_screenplay()?),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            parse_screenplay(&text).with_context(|| format!("parsing {}", path.display()))
        }
    }
}

/// Prints a record's verdicts, judged again from the record alone.
fn print_verdicts(path: &PathBuf, update: bool) -> anyhow::Result<()> {
    let stored = read_run(path)?;
    let mut run = stored.clone();
    run.judge(&NetworkSpec::embedded()?);
    let mut pairs: std::collections::BTreeMap<(&str, &str), [usize; 5]> = Default::default();
    for q in &run.queries {
        let counts = pairs.entry((&q.server, &q.task)).or_default();
        counts[0] += 1;
        let slot = match q.verdict_word() {
            "correct" => 1,
            "wrong" => 2,
            "failed" => 3,
            _ => 4,
        };
        counts[slot] += 1;
    }
    println!(
        "{:<16} {:<18} {:>7} {:>7} {:>5} {:>6} {:>8}",
        "server", "task", "queries", "correct", "wrong", "failed", "unjudged"
    );
    let mut total = [0usize; 5];
    for ((server, task), counts) in &pairs {
        println!(
            "{server:<16} {task:<18} {:>7} {:>7} {:>5} {:>6} {:>8}",
            counts[0], counts[1], counts[2], counts[3], counts[4]
        );
        total.iter_mut().zip(counts).for_each(|(t, c)| *t += c);
    }
    println!(
        "{:<35} {:>7} {:>7} {:>5} {:>6} {:>8}",
        "all", total[0], total[1], total[2], total[3], total[4]
    );
    let differ = run
        .queries
        .iter()
        .zip(&stored.queries)
        .filter(|(a, b)| b.verdict.is_some() && a.verdict != b.verdict)
        .count();
    let unstored = stored
        .queries
        .iter()
        .filter(|q| q.verdict.is_none())
        .count();
    println!(
        "{} mode: {} of {} correct; {differ} verdicts differ from the record's, {unstored} were not stored.",
        run.mode.as_str(),
        run.correct(),
        run.queries.len()
    );
    if update {
        write_run(path, &run)?;
        println!("Verdicts written to {}", path.display());
    }
    Ok(())
}

fn read_run(path: &PathBuf) -> anyhow::Result<RunRecord> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

pub async fn run(command: DemoCommand) -> anyhow::Result<()> {
    match command {
        DemoCommand::Weather {
            queries,
            llm,
            record,
            dir,
            report,
            keep_running,
        } => {
            if queries == 0 {
                bail!("--queries must be at least 1");
            }
            let mut settings = LlmSettings::default();
            match llm.as_str() {
                "local" => {}
                url if url.starts_with("http://") || url.starts_with("https://") => {
                    settings.local.url = Some(url.to_string());
                }
                other => bail!("--llm must be `local` or an http(s) URL, not {other:?}"),
            }
            settings.record = record;
            if let Some(parent) = report.parent() {
                std::fs::create_dir_all(parent)?;
            }
            println!("The weather demo: {queries} queries from Alice to Bob (LLM: {llm}).\n");
            let result = demo::run(WeatherDemo {
                queries,
                llm: settings,
                dir,
                report: report.clone(),
            })
            .await?;
            demo::print_summary(&result.report);
            println!("\nReport: {}", report.display());
            if keep_running {
                println!(
                    "\nAlice and Bob keep running until Ctrl-C. Dashboards: Bob {}, Alice {} \
                     (admin token {}).",
                    result.bob_dashboard, result.alice_dashboard, result.admin_token
                );
                tokio::signal::ctrl_c()
                    .await
                    .context("waiting for Ctrl-C")?;
            }
            Ok(())
        }
        DemoCommand::Network {
            action: Some(NetworkAction::Generate { seed, queries }),
            ..
        } => {
            let network = NetworkSpec::embedded()?;
            let entries = generate(&network, &GeneratorConfig::paper(queries), seed)?;
            print!("{}", to_text(&entries));
            Ok(())
        }
        DemoCommand::Network {
            action: None,
            screenplay,
            queries,
            mode,
            llm,
            record,
            dir,
            out,
            seed,
            query_timeout_secs,
            no_progress,
            processes,
            sample_per_pair,
            sample_seed,
            servers,
        } => {
            let setup = match &servers {
                Some(path) => ServerSetup::from_file(path)?,
                None => ServerSetup::default(),
            };
            let mode = if mode == "nl-only" {
                Mode::NlOnly
            } else {
                Mode::Agora
            };
            let run = run_demo(NetworkDemo {
                queries,
                mode,
                llm: LlmChoice::parse(&llm)?,
                record,
                dir,
                seed,
                query_timeout: Duration::from_secs(query_timeout_secs.max(1)),
                progress: !no_progress,
                checkpoint: Some(out.clone()),
                processes: usize::from(processes),
                worker_program: None,
                screenplay,
                sample: sample_per_pair.map(|per_pair| Sample {
                    per_pair: usize::try_from(per_pair).unwrap_or(usize::MAX),
                    seed: sample_seed,
                }),
                setup,
            })
            .await?;
            write_run(&out, &run)?;
            println!(
                "{} mode, {} queries: {}/{} judged correct ({} schema-valid); {} LLM calls, {} \
                 prompt + {} completion tokens, ${:.4}; {} negotiations, {} server and {} sender \
                 routines; {:.0} s.",
                mode.as_str(),
                run.queries.len(),
                run.correct(),
                run.queries.len(),
                run.successes(),
                run.totals.calls,
                run.totals.prompt_tokens,
                run.totals.completion_tokens,
                run.totals.cost_usd,
                run.network.negotiations,
                run.network.server_routines,
                run.network.sender_routines,
                run.wall_secs
            );
            println!("Run record: {}", out.display());
            Ok(())
        }
        DemoCommand::NetworkWorker => agora_network::worker::serve_worker().await,
        DemoCommand::NetworkReport {
            judge: Some(path),
            update,
            ..
        } => print_verdicts(&path, update),
        DemoCommand::NetworkReport {
            agora,
            nl_only,
            out,
            judge: None,
            screenplay,
            ..
        } => {
            let Some(out) = out else {
                bail!("give --out");
            };
            if agora.is_none() && nl_only.is_none() {
                bail!("give --agora, --nl-only or both");
            }
            // Judged again from the records alone: the report follows the judge's rules.
            let network = NetworkSpec::embedded()?;
            let judged = |path: &PathBuf| -> anyhow::Result<RunRecord> {
                let mut run = read_run(path)?;
                run.judge(&network);
                Ok(run)
            };
            let agora = agora.as_ref().map(judged).transpose()?;
            let nl_only = nl_only.as_ref().map(judged).transpose()?;
            let name = out
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "report".into());
            let summary = write_report(
                &out,
                &ReportInput {
                    name,
                    agora: agora.as_ref(),
                    nl_only: nl_only.as_ref(),
                    screenplay_counts: counts_by_server_task(&read_screenplay(
                        screenplay.as_ref(),
                    )?),
                },
            )?;
            println!("{}", serde_json::to_string_pretty(&summary)?);
            println!(
                "Report: {} (charts: {})",
                out.join("report.md").display(),
                out.join("report.html").display()
            );
            Ok(())
        }
    }
}
