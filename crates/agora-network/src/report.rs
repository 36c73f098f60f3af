//! The report of a network demo, computed from run records alone.
//!
//! One `report.md` is meant to be read by a person. It leads with correctness: every query's
//! verdict from the judge (`agora_judge`: `correct`, `wrong`, `failed`, `unjudged`), per mode,
//! per (server, task) pair, per rung of the sender's ladder and per answering side, the cost
//! per correct answer, the judge's rule for each task type and a plot of the share correct over
//! the screenplay, and how many answers only the servers' databases showed to be wrong (a
//! claimed booking never written). "Succeeded" means judged correct; an output valid against the
//! task's schema is "schema-valid". Then the Agora mode's goals (`goals`), totals per mode, Agora's cost split by
//! category, the NL-only/Agora cost ratio, an NL-only estimate for the whole screenplay when the
//! counterfactual run was cut short, per-query curves, the network's final state and success per
//! task. Every figure of the paper is printed next to ours, and every number says whether it was
//! measured or estimated. Beside it: `summary.json` (the [`ReportSummary`]), `per_query.csv`,
//! `curves.csv`, three SVG plots, and `report.html` (the dashboard's charts over the run, with
//! everything inlined, readable offline).
//!
//! Costs are taken as recorded (`cost_usd`, priced by the run at the price table's rates); the
//! report only restates that table. Totals are recomputed from the query records so that the
//! CSV, the curves and the totals always agree; a record whose stored totals disagree is flagged.

pub mod goals;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;
use serde::Serialize;

use agora_judge::{BY_THE_DATABASE, RULES, Verdict};

use crate::record::{CallTotals, Mode, NetworkStats, QueryRecord, RunRecord, Sample};

/// The paper's total cost of the NL-only counterfactual over the whole screenplay, in USD.
pub const PAPER_NL_ONLY_COST_USD: f64 = 36.23;
/// The paper's total cost of the Agora run over the whole screenplay, in USD.
pub const PAPER_AGORA_COST_USD: f64 = 7.67;
/// The paper's cost split of the Agora run: (our category, the paper's name, share).
pub const PAPER_CATEGORY_SHARES: [(&str, &str, f64); 4] = [
    ("conversation", "conversation", 0.54),
    ("checking", "protocolChecking", 0.22),
    ("implementing", "programming", 0.17),
    ("negotiation", "negotiation", 0.06),
];
/// Trailing window of the per-query moving averages.
pub const MOVING_AVERAGE_WINDOW: usize = 100;
/// The price table the runs were priced with (model, USD per 1M prompt, per 1M completion
/// tokens). Restated in the report; the figures are assumed, not taken from the paper.
pub const PRICE_TABLE: [(&str, f64, f64); 3] = [
    ("gpt-4o", 5.0, 15.0),
    ("gemini-1.5-pro", 3.5, 10.5),
    ("llama3-405b", 5.0, 10.0),
];

/// What the report is computed from.
pub struct ReportInput<'a> {
    /// The run's name, e.g. `local`.
    pub name: String,
    /// The Agora run, if any.
    pub agora: Option<&'a RunRecord>,
    /// The NL-only run, if any.
    pub nl_only: Option<&'a RunRecord>,
    /// How many queries of the whole screenplay go to each (server, task): for the NL-only
    /// estimate of the full screenplay.
    pub screenplay_counts: BTreeMap<(String, String), u64>,
}

/// The key numbers of the report (`summary.json`).
#[derive(Debug, Clone, Serialize)]
pub struct ReportSummary {
    /// The run's name.
    pub name: String,
    /// Queries in the whole screenplay (sum of the screenplay counts).
    pub screenplay_queries: u64,
    /// Totals of the Agora run (measured).
    pub agora: Option<ModeTotals>,
    /// Totals of the NL-only run (measured).
    pub nl_only: Option<ModeTotals>,
    /// NL-only/Agora cost over the queries both runs have (measured).
    pub cost_ratio: Option<CostRatio>,
    /// The Agora run's cost by category, next to the paper's (measured).
    pub agora_categories: Option<CategoryShares>,
    /// NL-only cost of the whole screenplay, estimated from the recorded NL-only queries.
    pub nl_only_estimate: Option<NlOnlyEstimate>,
    /// The Agora run's routine answers and wrong answers per pair, for its goals.
    pub goals: Option<goals::Goals>,
}

/// One mode's totals, summed over its query records.
#[derive(Debug, Clone, Serialize)]
pub struct ModeTotals {
    /// The mode.
    pub mode: Mode,
    /// The LLM, in words.
    pub llm: String,
    /// Queries asked for.
    pub queries_planned: usize,
    /// Queries recorded.
    pub queries: usize,
    /// Whether these figures are `measured` (they are: the recorded queries) or estimated.
    pub figures: &'static str,
    /// Queries judged correct (a query "succeeded" when it is).
    pub correct: usize,
    /// Queries judged wrong.
    pub wrong: usize,
    /// Queries whose writes to the server's database the run observed (see
    /// `agora_judge::writes`): their replies were held to the database.
    #[serde(default)]
    pub held_to_database: usize,
    /// Of the wrong, those whose reply alone was right but whose database was not (a booking
    /// claimed and never written, a refusal that wrote one).
    #[serde(default)]
    pub wrong_by_database: usize,
    /// Queries with no output.
    pub failed: usize,
    /// Queries no rule could judge.
    pub unjudged: usize,
    /// Why queries were unjudged, with how many.
    pub unjudged_reasons: BTreeMap<String, usize>,
    /// `correct / queries` (0 when there is no query).
    pub correct_rate: f64,
    /// LLM cost of all queries, in USD.
    pub cost_usd: f64,
    /// `cost_usd / correct`; absent when none is correct.
    pub cost_per_correct_usd: Option<f64>,
    /// Queries whose output was schema-valid (HTTP 200 and valid against the task's schema).
    pub schema_valid: usize,
    /// `schema_valid / queries` (0 when there is no query).
    pub schema_valid_rate: f64,
    /// Queries with no LLM call anywhere that succeeded.
    pub routine_only: usize,
    /// LLM use over all queries.
    pub llm_totals: CallTotals,
    /// Mean recorded LLM latency per query, in milliseconds.
    pub mean_llm_latency_ms_per_query: f64,
    /// Wall time of the whole run, in seconds.
    pub wall_secs: f64,
    /// The network at the end of the run.
    pub network: NetworkStats,
    /// Whether the record's stored totals differ from the sum of its queries.
    pub stored_totals_differ: bool,
}

/// NL-only/Agora cost over the queries both runs have.
#[derive(Debug, Clone, Serialize)]
pub struct CostRatio {
    /// Queries compared: those both runs recorded (by screenplay index).
    pub shared_queries: usize,
    /// Whether those are the screenplay's first `shared_queries` (both runs ran a prefix);
    /// not when one run is a sample.
    pub prefix: bool,
    /// Agora cost over the shared queries.
    pub agora_cost_usd: f64,
    /// NL-only cost over the shared queries.
    pub nl_only_cost_usd: f64,
    /// Agora's correct answers among the shared queries.
    pub agora_correct: usize,
    /// NL-only's correct answers among the shared queries.
    pub nl_only_correct: usize,
    /// `nl_only_cost_usd / agora_cost_usd`; absent when Agora cost nothing.
    pub ratio: Option<f64>,
    /// The paper's ratio over the whole screenplay.
    pub paper_ratio: f64,
}

/// The Agora run's cost by category.
#[derive(Debug, Clone, Serialize)]
pub struct CategoryShares {
    /// Total cost the shares are taken of.
    pub total_cost_usd: f64,
    /// The `querying` cost, counted with `conversation` in `rows`.
    pub querying_cost_usd: f64,
    /// One row per comparable category, then any other recorded category.
    pub rows: Vec<CategoryShare>,
}

/// One category of [`CategoryShares`].
#[derive(Debug, Clone, Serialize)]
pub struct CategoryShare {
    /// Our category (`conversation` includes `querying`; `uncategorised` is cost no category
    /// claims).
    pub category: String,
    /// The paper's name for it, if the paper has one.
    pub paper_name: Option<String>,
    /// Its cost.
    pub cost_usd: f64,
    /// Its share of the total cost.
    pub share: f64,
    /// The paper's share.
    pub paper_share: Option<f64>,
}

/// NL-only cost of the whole screenplay, estimated per (server, task).
#[derive(Debug, Clone, Serialize)]
pub struct NlOnlyEstimate {
    /// Always `ESTIMATE`: extrapolated from the recorded NL-only queries.
    pub figures: &'static str,
    /// The NL-only run's stratified sample, when it was one (else it is a prefix).
    pub sample: Option<Sample>,
    /// Queries of the whole screenplay.
    pub screenplay_queries: u64,
    /// NL-only queries recorded (the samples).
    pub measured_queries: usize,
    /// Their measured cost.
    pub measured_cost_usd: f64,
    /// Mean cost over all recorded NL-only queries, used for pairs without a sample.
    pub overall_mean_usd: f64,
    /// Screenplay queries whose pair had no sample.
    pub unsampled_queries: u64,
    /// Pairs without a sample.
    pub unsampled_pairs: usize,
    /// The estimate: Σ mean(pair) × count(pair).
    pub estimated_cost_usd: f64,
    /// Half-width of the cost estimate's 95 % interval (1.96 standard errors, summed over the
    /// pairs' sampling variances with the finite-population correction; pairs with one
    /// sample, or none, add nothing, so with gaps this understates the spread).
    pub cost_spread_usd: f64,
    /// Correct answers over the whole screenplay: Σ correct share(pair) × count(pair)
    /// (pairs without a sample count none).
    pub estimated_correct: f64,
    /// Half-width of its 95 % interval, as for the cost.
    pub correct_spread: f64,
    /// `estimated_cost_usd / estimated_correct`.
    pub estimated_cost_per_correct_usd: Option<f64>,
    /// The Agora run's measured cost per correct answer over this estimate's, when the Agora
    /// run covered the whole screenplay.
    pub agora_cost_per_correct_vs_nl_only: Option<f64>,
    /// The estimate over the Agora run's measured cost, when that run covered the whole
    /// screenplay (an estimate over a measurement).
    pub estimated_ratio_vs_agora: Option<f64>,
    /// Per pair.
    pub pairs: Vec<PairEstimate>,
}

/// One (server, task) of [`NlOnlyEstimate`].
#[derive(Debug, Clone, Serialize)]
pub struct PairEstimate {
    /// Server.
    pub server: String,
    /// Task.
    pub task: String,
    /// Queries of the screenplay for this pair.
    pub screenplay_queries: u64,
    /// Recorded NL-only queries for this pair.
    pub samples: usize,
    /// Of those, judged correct.
    pub correct: usize,
    /// `correct / samples × screenplay_queries` (0 without samples).
    pub estimated_correct: f64,
    /// Mean cost used (the pair's, or the overall mean when it has no sample).
    pub mean_usd: f64,
    /// Sample standard deviation (at least two samples).
    pub std_usd: Option<f64>,
    /// Smallest sample.
    pub min_usd: Option<f64>,
    /// Largest sample.
    pub max_usd: Option<f64>,
    /// `mean_usd × screenplay_queries`.
    pub estimated_cost_usd: f64,
}

/// Trailing moving average: point `i` averages `values[max(0, i+1-window) ..= i]`.
pub fn moving_average(values: &[f64], window: usize) -> Vec<f64> {
    let window = window.max(1);
    let mut sum = 0.0;
    let mut out = Vec::with_capacity(values.len());
    for (i, value) in values.iter().enumerate() {
        sum += value;
        if i >= window {
            sum -= values[i - window];
        }
        out.push(sum / (i + 1).min(window) as f64);
    }
    out
}

/// Writes report.md, summary.json, CSVs and SVG plots into `dir` (created), returns the summary.
pub fn write_report(dir: &Path, input: &ReportInput) -> Result<ReportSummary> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating report directory {}", dir.display()))?;
    let summary = summarize(input);
    let json = serde_json::to_string_pretty(&summary).context("serializing the summary")?;
    write_file(&dir.join("summary.json"), &json)?;
    write_file(&dir.join("per_query.csv"), &per_query_csv(input)?)?;
    let curves = Curves::new(input);
    write_file(&dir.join("curves.csv"), &curves.csv()?)?;
    let plots = curves.plot(dir)?;
    write_file(&dir.join("report.md"), &markdown(input, &summary, &plots)?)?;
    write_file(&dir.join("report.html"), &html(input, &summary)?)?;
    Ok(summary)
}

/// How many queries one point of `report.html`'s charts sums up: about 20 points per run.
fn html_bucket(queries: usize) -> usize {
    queries.div_ceil(20).max(1)
}

/// `report.html`: the dashboard's charts (requests by answering path, LLM cost, routine share,
/// here with the share judged correct) per run, over the screenplay, readable offline.
fn html(input: &ReportInput, summary: &ReportSummary) -> Result<String> {
    use agora_server::dashboard::report::{ChartSeries, ReportSection, standalone_html};
    let mut sections = Vec::new();
    for (run, totals) in [
        (input.agora, summary.agora.as_ref()),
        (input.nl_only, summary.nl_only.as_ref()),
    ] {
        let (Some(run), Some(totals)) = (run, totals) else {
            continue;
        };
        let bucket = html_bucket(run.queries.len());
        let mut series = ChartSeries {
            x_label: format!("query (points sum {bucket})"),
            correct_share: Some(Vec::new()),
            ..ChartSeries::default()
        };
        for chunk in run.queries.chunks(bucket) {
            let count = |by: &str| {
                chunk
                    .iter()
                    .filter(|q| q.answered_by.as_deref() == Some(by))
                    .count() as f64
            };
            let (llm, routine) = (count("llm"), count("routine"));
            let correct = chunk.iter().filter(|q| q.correct()).count() as f64;
            series.t.push((chunk[0].index + chunk.len()) as f64);
            series.llm.push(llm);
            series.routine.push(routine);
            series.fallback.push(0.0);
            series.other.push(chunk.len() as f64 - llm - routine);
            series
                .cost_usd
                .push(chunk.iter().map(|q| q.llm.cost_usd).sum());
            series
                .routine_share
                .push((llm + routine > 0.0).then(|| 100.0 * routine / (llm + routine)));
            if let Some(shares) = series.correct_share.as_mut() {
                shares.push(Some(100.0 * correct / chunk.len() as f64));
            }
        }
        let facts = vec![
            ("LLM".to_string(), totals.llm.clone()),
            (
                "queries".to_string(),
                format!("{} of {} planned", totals.queries, totals.queries_planned),
            ),
            (
                "judged correct".to_string(),
                format!(
                    "{} ({:.0} %); wrong {}, failed {}, unjudged {}",
                    totals.correct,
                    100.0 * totals.correct_rate,
                    totals.wrong,
                    totals.failed,
                    totals.unjudged
                ),
            ),
            (
                "LLM cost (measured)".to_string(),
                format!("${:.4}", totals.cost_usd),
            ),
            (
                "cost per correct answer".to_string(),
                totals
                    .cost_per_correct_usd
                    .map_or("no correct answer".to_string(), |c| format!("${c:.4}")),
            ),
            (
                "answered by routines alone".to_string(),
                totals.routine_only.to_string(),
            ),
        ];
        sections.push(ReportSection {
            title: format!("{} run", run.mode.as_str()),
            facts,
            series,
        });
    }
    standalone_html(
        &format!("agora network demo: {}", input.name),
        "The charts of the node dashboard's overview, over this run's queries: how the target \
         servers answered (their LLM or a routine; \"rejected or failed\" is no output), the \
         LLM cost of every agent, the share answered by routines and the share judged correct. \
         report.md has the full report.",
        &sections,
    )
    .map_err(|e| anyhow::anyhow!("rendering report.html: {e}"))
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn summarize(input: &ReportInput) -> ReportSummary {
    let screenplay_queries = input.screenplay_counts.values().sum();
    let cost_ratio = match (input.agora, input.nl_only) {
        (Some(agora), Some(nl_only)) => cost_ratio(agora, nl_only),
        _ => None,
    };
    let nl_only_estimate = input
        .nl_only
        .and_then(|nl_only| nl_only_estimate(nl_only, input.agora, &input.screenplay_counts));
    ReportSummary {
        name: input.name.clone(),
        screenplay_queries,
        agora: input.agora.map(mode_totals),
        nl_only: input.nl_only.map(mode_totals),
        cost_ratio,
        agora_categories: input.agora.map(category_shares),
        nl_only_estimate,
        goals: input.agora.map(|agora| goals::goals(agora, input.nl_only)),
    }
}

fn mode_totals(run: &RunRecord) -> ModeTotals {
    let mut llm_totals = CallTotals::default();
    for query in &run.queries {
        llm_totals.add(&query.llm);
    }
    let queries = run.queries.len();
    let schema_valid = run.successes();
    let count = |word: &str| {
        run.queries
            .iter()
            .filter(|q| q.verdict_word() == word)
            .count()
    };
    let correct = count("correct");
    let mut unjudged_reasons = BTreeMap::new();
    for query in &run.queries {
        match &query.verdict {
            Some(Verdict::Unjudged(reason)) => {
                *unjudged_reasons.entry(reason.clone()).or_insert(0) += 1;
            }
            None => *unjudged_reasons.entry("not judged".to_owned()).or_insert(0) += 1,
            _ => {}
        }
    }
    let stored = &run.totals;
    let stored_totals_differ = stored.calls != llm_totals.calls
        || stored.prompt_tokens != llm_totals.prompt_tokens
        || stored.completion_tokens != llm_totals.completion_tokens
        || (stored.cost_usd - llm_totals.cost_usd).abs() > 1e-9 * (1.0 + llm_totals.cost_usd);
    ModeTotals {
        mode: run.mode,
        llm: run.llm.clone(),
        queries_planned: run.queries_planned,
        queries,
        figures: "measured",
        correct,
        wrong: count("wrong"),
        held_to_database: run.queries.iter().filter(|q| q.writes.is_some()).count(),
        wrong_by_database: run
            .queries
            .iter()
            .filter(|q| {
                q.verdict
                    .as_ref()
                    .and_then(Verdict::reason)
                    .is_some_and(|reason| reason.starts_with(BY_THE_DATABASE))
            })
            .count(),
        failed: count("failed"),
        unjudged: count("unjudged"),
        unjudged_reasons,
        correct_rate: ratio_or_zero(correct as f64, queries as f64),
        cost_usd: llm_totals.cost_usd,
        cost_per_correct_usd: (correct > 0).then(|| llm_totals.cost_usd / correct as f64),
        schema_valid,
        schema_valid_rate: ratio_or_zero(schema_valid as f64, queries as f64),
        routine_only: run.queries.iter().filter(|q| q.routine_only()).count(),
        mean_llm_latency_ms_per_query: ratio_or_zero(llm_totals.latency_ms as f64, queries as f64),
        llm_totals,
        wall_secs: run.wall_secs,
        network: run.network.clone(),
        stored_totals_differ,
    }
}

fn ratio_or_zero(numerator: f64, denominator: f64) -> f64 {
    if denominator == 0.0 {
        0.0
    } else {
        numerator / denominator
    }
}

/// The screenplay indices of the queries both runs have (a prefix, or a sample's).
fn shared_indices(agora: &RunRecord, nl_only: &RunRecord) -> BTreeSet<usize> {
    let indices =
        |run: &RunRecord| -> BTreeSet<usize> { run.queries.iter().map(|q| q.index).collect() };
    indices(agora)
        .intersection(&indices(nl_only))
        .copied()
        .collect()
}

/// `run`'s queries at the screenplay indices `shared`.
fn on<'a>(run: &'a RunRecord, shared: &BTreeSet<usize>) -> Vec<&'a QueryRecord> {
    run.queries
        .iter()
        .filter(|q| shared.contains(&q.index))
        .collect()
}

/// Whether the queries both runs have are the screenplay's first ones (both ran a prefix).
fn is_prefix(shared: &BTreeSet<usize>) -> bool {
    shared.iter().copied().eq(0..shared.len())
}

/// How a report names the queries both runs have.
fn shared_description(shared: &BTreeSet<usize>) -> String {
    describe_shared(shared.len(), is_prefix(shared))
}

fn describe_shared(queries: usize, prefix: bool) -> String {
    if prefix {
        format!("the first {queries} queries")
    } else {
        format!("the {queries} queries both runs have (matched by screenplay index)")
    }
}

fn cost_ratio(agora: &RunRecord, nl_only: &RunRecord) -> Option<CostRatio> {
    let shared = shared_indices(agora, nl_only);
    if shared.is_empty() {
        return None;
    }
    let shared_queries = shared.len();
    let prefix = is_prefix(&shared);
    let over_shared = |run: &RunRecord| -> (f64, usize) {
        let queries = on(run, &shared);
        let cost = queries.iter().map(|q| q.llm.cost_usd).sum();
        let correct = queries.iter().filter(|q| q.correct()).count();
        (cost, correct)
    };
    let (agora_cost_usd, agora_correct) = over_shared(agora);
    let (nl_only_cost_usd, nl_only_correct) = over_shared(nl_only);
    Some(CostRatio {
        shared_queries,
        prefix,
        agora_cost_usd,
        nl_only_cost_usd,
        agora_correct,
        nl_only_correct,
        ratio: (agora_cost_usd > 0.0).then(|| nl_only_cost_usd / agora_cost_usd),
        paper_ratio: PAPER_NL_ONLY_COST_USD / PAPER_AGORA_COST_USD,
    })
}

fn category_shares(run: &RunRecord) -> CategoryShares {
    let mut costs: BTreeMap<String, f64> = BTreeMap::new();
    let mut total_cost_usd = 0.0;
    let mut querying_cost_usd = 0.0;
    for query in &run.queries {
        total_cost_usd += query.llm.cost_usd;
        for (category, usage) in &query.by_category {
            let key = if category == "querying" {
                querying_cost_usd += usage.cost_usd;
                "conversation"
            } else {
                category.as_str()
            };
            *costs.entry(key.to_owned()).or_default() += usage.cost_usd;
        }
    }
    let share = |cost: f64| ratio_or_zero(cost, total_cost_usd);
    let mut rows: Vec<CategoryShare> = PAPER_CATEGORY_SHARES
        .iter()
        .map(|&(category, paper_name, paper_share)| {
            let cost_usd = costs.remove(category).unwrap_or(0.0);
            CategoryShare {
                category: category.to_owned(),
                paper_name: Some(paper_name.to_owned()),
                cost_usd,
                share: share(cost_usd),
                paper_share: Some(paper_share),
            }
        })
        .collect();
    let categorised: f64 =
        rows.iter().map(|r| r.cost_usd).sum::<f64>() + costs.values().sum::<f64>();
    for (category, cost_usd) in costs {
        rows.push(CategoryShare {
            category,
            paper_name: None,
            cost_usd,
            share: share(cost_usd),
            paper_share: None,
        });
    }
    let uncategorised = total_cost_usd - categorised;
    if uncategorised.abs() > 1e-9 * (1.0 + total_cost_usd) {
        rows.push(CategoryShare {
            category: "uncategorised".to_owned(),
            paper_name: None,
            cost_usd: uncategorised,
            share: share(uncategorised),
            paper_share: None,
        });
    }
    CategoryShares {
        total_cost_usd,
        querying_cost_usd,
        rows,
    }
}

fn nl_only_estimate(
    nl_only: &RunRecord,
    agora: Option<&RunRecord>,
    counts: &BTreeMap<(String, String), u64>,
) -> Option<NlOnlyEstimate> {
    let screenplay_queries: u64 = counts.values().sum();
    let measured_queries = nl_only.queries.len();
    if measured_queries == 0 || measured_queries as u64 >= screenplay_queries {
        return None;
    }
    let mut samples: BTreeMap<(&str, &str), Vec<(f64, bool)>> = BTreeMap::new();
    for query in &nl_only.queries {
        samples
            .entry((query.server.as_str(), query.task.as_str()))
            .or_default()
            .push((query.llm.cost_usd, query.correct()));
    }
    let measured_cost_usd: f64 = nl_only.queries.iter().map(|q| q.llm.cost_usd).sum();
    let overall_mean_usd = measured_cost_usd / measured_queries as f64;
    let pairs: Vec<PairEstimate> = counts
        .iter()
        .map(|((server, task), &count)| {
            let measured = samples
                .get(&(server.as_str(), task.as_str()))
                .map_or(&[][..], Vec::as_slice);
            pair_estimate(server, task, count, measured, overall_mean_usd)
        })
        .collect();
    // Variances of the two totals (see the fields' docs), per pair with ≥ 2 samples.
    let (mut cost_variance, mut correct_variance) = (0.0, 0.0);
    for pair in pairs.iter().filter(|p| p.samples >= 2) {
        let (n, big_n) = (pair.samples as f64, pair.screenplay_queries as f64);
        let scale = big_n * big_n * (1.0 - n / big_n).max(0.0) / n;
        cost_variance += scale * pair.std_usd.unwrap_or(0.0).powi(2);
        let share = pair.correct as f64 / n;
        correct_variance += scale * share * (1.0 - share) * n / (n - 1.0);
    }
    let estimated_correct: f64 = pairs.iter().map(|p| p.estimated_correct).sum();
    let unsampled = pairs.iter().filter(|p| p.samples == 0);
    let unsampled_pairs = unsampled.clone().count();
    let unsampled_queries = unsampled.map(|p| p.screenplay_queries).sum();
    let estimated_cost_usd: f64 = pairs.iter().map(|p| p.estimated_cost_usd).sum();
    // The Agora run's measured cost and correct answers, when it covered the whole screenplay.
    let whole_agora = agora
        .filter(|run| run.queries.len() as u64 == screenplay_queries)
        .map(|run| {
            let cost: f64 = run.queries.iter().map(|q| q.llm.cost_usd).sum();
            (cost, run.correct())
        });
    let estimated_ratio_vs_agora = whole_agora
        .map(|(cost, _)| cost)
        .filter(|&cost| cost > 0.0)
        .map(|cost| estimated_cost_usd / cost);
    let estimated_cost_per_correct_usd =
        (estimated_correct > 0.0).then(|| estimated_cost_usd / estimated_correct);
    let agora_cost_per_correct_vs_nl_only = whole_agora
        .and_then(|(cost, correct)| (correct > 0).then(|| cost / correct as f64))
        .zip(estimated_cost_per_correct_usd)
        .map(|(agora, nl_only)| agora / nl_only);
    Some(NlOnlyEstimate {
        figures: "ESTIMATE",
        sample: nl_only.sample,
        screenplay_queries,
        measured_queries,
        measured_cost_usd,
        overall_mean_usd,
        unsampled_queries,
        unsampled_pairs,
        estimated_cost_usd,
        cost_spread_usd: 1.96 * cost_variance.sqrt(),
        estimated_correct,
        correct_spread: 1.96 * correct_variance.sqrt(),
        estimated_cost_per_correct_usd,
        agora_cost_per_correct_vs_nl_only,
        estimated_ratio_vs_agora,
        pairs,
    })
}

fn pair_estimate(
    server: &str,
    task: &str,
    count: u64,
    measured: &[(f64, bool)],
    overall_mean_usd: f64,
) -> PairEstimate {
    let costs: Vec<f64> = measured.iter().map(|(cost, _)| *cost).collect();
    let correct = measured.iter().filter(|(_, correct)| *correct).count();
    let n = costs.len();
    let mean_usd = if n == 0 {
        overall_mean_usd
    } else {
        costs.iter().sum::<f64>() / n as f64
    };
    let std_usd = (n >= 2).then(|| {
        let squares: f64 = costs.iter().map(|c| (c - mean_usd).powi(2)).sum();
        (squares / (n - 1) as f64).sqrt()
    });
    PairEstimate {
        server: server.to_owned(),
        task: task.to_owned(),
        screenplay_queries: count,
        samples: n,
        correct,
        estimated_correct: if n == 0 {
            0.0
        } else {
            correct as f64 / n as f64 * count as f64
        },
        mean_usd,
        std_usd,
        min_usd: costs.iter().copied().reduce(f64::min),
        max_usd: costs.iter().copied().reduce(f64::max),
        estimated_cost_usd: mean_usd * count as f64,
    }
}

fn runs<'a>(input: &ReportInput<'a>) -> Vec<&'a RunRecord> {
    input.agora.into_iter().chain(input.nl_only).collect()
}

fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_owned()
    }
}

fn per_query_csv(input: &ReportInput) -> Result<String> {
    let runs = runs(input);
    let categories: BTreeSet<&str> = runs
        .iter()
        .flat_map(|run| &run.queries)
        .flat_map(|q| q.by_category.keys().map(String::as_str))
        .collect();
    let mut csv = String::from(
        "index,user,server,task,mode,success,calls,prompt_tokens,completion_tokens,cost_usd,routine_only,verdict,reason,path,answered_by",
    );
    for category in &categories {
        write!(csv, ",cost_{}", csv_field(category))?;
    }
    csv.push('\n');
    for run in runs {
        for q in &run.queries {
            write!(
                csv,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                q.index,
                csv_field(&q.user),
                csv_field(&q.server),
                csv_field(&q.task),
                run.mode.as_str(),
                q.success,
                q.llm.calls,
                q.llm.prompt_tokens,
                q.llm.completion_tokens,
                q.llm.cost_usd,
                q.routine_only(),
                q.verdict_word(),
                csv_field(q.verdict.as_ref().and_then(Verdict::reason).unwrap_or("")),
                csv_field(&q.path),
                q.answered_by.as_deref().unwrap_or(""),
            )?;
            for category in &categories {
                let cost = q.by_category.get(*category).map_or(0.0, |c| c.cost_usd);
                write!(csv, ",{cost}")?;
            }
            csv.push('\n');
        }
    }
    Ok(csv)
}

/// The per-query moving averages of both modes.
struct Curves {
    agora_cost: Vec<f64>,
    nl_only_cost: Vec<f64>,
    agora_routine_share: Vec<f64>,
    agora_calls: Vec<f64>,
    nl_only_calls: Vec<f64>,
    agora_correct: Vec<f64>,
    nl_only_correct: Vec<f64>,
}

/// Plots written, as file names relative to the report.
struct Plots {
    cost: Option<&'static str>,
    routine_share: Option<&'static str>,
    calls: Option<&'static str>,
    correct: Option<&'static str>,
}

impl Curves {
    fn new(input: &ReportInput) -> Curves {
        let average = |run: Option<&RunRecord>, value: fn(&QueryRecord) -> f64| -> Vec<f64> {
            let values: Vec<f64> =
                run.map_or(Vec::new(), |r| r.queries.iter().map(value).collect());
            moving_average(&values, MOVING_AVERAGE_WINDOW)
        };
        Curves {
            agora_cost: average(input.agora, |q| q.llm.cost_usd),
            nl_only_cost: average(input.nl_only, |q| q.llm.cost_usd),
            agora_routine_share: average(input.agora, |q| f64::from(u8::from(q.routine_only()))),
            agora_calls: average(input.agora, |q| q.llm.calls as f64),
            nl_only_calls: average(input.nl_only, |q| q.llm.calls as f64),
            agora_correct: average(input.agora, |q| f64::from(u8::from(q.correct()))),
            nl_only_correct: average(input.nl_only, |q| f64::from(u8::from(q.correct()))),
        }
    }

    fn csv(&self) -> Result<String> {
        let columns = [
            &self.agora_cost,
            &self.nl_only_cost,
            &self.agora_routine_share,
            &self.agora_calls,
            &self.nl_only_calls,
            &self.agora_correct,
            &self.nl_only_correct,
        ];
        let rows = columns.iter().map(|c| c.len()).max().unwrap_or(0);
        let mut csv = String::from(
            "index,agora_cost_usd_ma,nl_only_cost_usd_ma,agora_routine_only_share_ma,agora_calls_ma,nl_only_calls_ma,agora_correct_share_ma,nl_only_correct_share_ma\n",
        );
        for i in 0..rows {
            write!(csv, "{i}")?;
            for column in columns {
                match column.get(i) {
                    Some(value) => write!(csv, ",{value}")?,
                    None => csv.push(','),
                }
            }
            csv.push('\n');
        }
        Ok(csv)
    }

    fn plot(&self, dir: &Path) -> Result<Plots> {
        let cost = plot_curves(
            dir,
            "cost_per_query.svg",
            "Cost per query (USD), moving average",
            "USD per query",
            &[
                ("agora", RED, &self.agora_cost),
                ("nl-only", BLUE, &self.nl_only_cost),
            ],
        )?;
        let routine_share = plot_curves(
            dir,
            "routine_share.svg",
            "Share of queries served by routines only (agora), moving average",
            "share of queries",
            &[("agora", RED, &self.agora_routine_share)],
        )?;
        let calls = plot_curves(
            dir,
            "llm_calls_per_query.svg",
            "LLM calls per query, moving average",
            "LLM calls per query",
            &[
                ("agora", RED, &self.agora_calls),
                ("nl-only", BLUE, &self.nl_only_calls),
            ],
        )?;
        let correct = plot_curves(
            dir,
            "correct_share.svg",
            "Share of answers judged correct, moving average",
            "share of queries",
            &[
                ("agora", RED, &self.agora_correct),
                ("nl-only", BLUE, &self.nl_only_correct),
            ],
        )?;
        Ok(Plots {
            cost,
            routine_share,
            calls,
            correct,
        })
    }
}

/// Draws `series` (label, colour, values by query index) into `dir/file`; `None` when every
/// series is empty (no file is written).
fn plot_curves(
    dir: &Path,
    file: &'static str,
    title: &str,
    y_desc: &str,
    series: &[(&str, RGBColor, &Vec<f64>)],
) -> Result<Option<&'static str>> {
    let len = series.iter().map(|(_, _, v)| v.len()).max().unwrap_or(0);
    if len == 0 {
        return Ok(None);
    }
    let y_max = series
        .iter()
        .flat_map(|(_, _, v)| v.iter().copied())
        .fold(0.0_f64, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    let path = dir.join(file);
    let root = SVGBackend::new(&path, (900, 500)).into_drawing_area();
    let context = || format!("drawing {}", path.display());
    root.fill(&WHITE).with_context(context)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..(len.max(2) - 1) as f64, 0.0..y_max)
        .with_context(context)?;
    chart
        .configure_mesh()
        .x_desc("query (screenplay order)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_desc(y_desc)
        .draw()
        .with_context(context)?;
    for &(label, color, values) in series {
        if values.is_empty() {
            continue;
        }
        let points = values.iter().enumerate().map(|(i, &v)| (i as f64, v));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .with_context(context)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .with_context(context)?;
    root.present().with_context(context)?;
    Ok(Some(file))
}

fn usd(value: f64) -> String {
    format!("${value:.4}")
}

/// `part/whole` as a table cell, `—` when there is nothing to count.
fn fraction(part: usize, whole: usize) -> String {
    if whole == 0 {
        "—".to_owned()
    } else {
        format!("{part}/{whole}")
    }
}

fn percent(value: f64) -> String {
    format!("{:.1} %", value * 100.0)
}

fn markdown(input: &ReportInput, summary: &ReportSummary, plots: &Plots) -> Result<String> {
    let mut md = String::new();
    writeln!(md, "# Agora network demo: {}\n", input.name)?;
    writeln!(
        md,
        "Computed from the run records alone. The paper (Agora, arXiv 2410.11905) ran 85 user \
         agents and 15 servers through a 1000-query screenplay, once with Agora (negotiated \
         protocols, LLM-written routines) and once in a natural-language-only counterfactual. \
         Every figure below is **measured** on our runs unless it is marked **ESTIMATE**; the \
         paper's figures are given next to ours for comparison, not as targets we claim to \
         reproduce.\n"
    )?;
    if summary.agora.is_none() || summary.nl_only.is_none() {
        writeln!(
            md,
            "Only one mode was recorded: comparisons between the modes are left out.\n"
        )?;
    }
    correctness_section(&mut md, input, summary, plots)?;
    if let Some(goals) = &summary.goals {
        goals::section(&mut md, summary, goals)?;
    }
    totals_section(&mut md, summary)?;
    categories_section(&mut md, summary)?;
    ratio_section(&mut md, summary)?;
    estimate_section(&mut md, summary)?;
    curves_section(&mut md, plots)?;
    network_section(&mut md, summary)?;
    tasks_section(&mut md, input)?;
    writeln!(
        md,
        "## Files\n\n- `summary.json`: the key numbers above.\n- `per_query.csv`: one row per \
         query and mode, with the cost of each category.\n- `curves.csv`: the moving averages \
         plotted above."
    )?;
    Ok(md)
}

fn totals_section(md: &mut String, summary: &ReportSummary) -> Result<()> {
    writeln!(md, "## 1. Totals per mode (measured)\n")?;
    let modes = [&summary.agora, &summary.nl_only];
    let row = |md: &mut String, label: &str, cell: &dyn Fn(&ModeTotals) -> String| -> Result<()> {
        write!(md, "| {label} |")?;
        for mode in modes {
            let text = mode.as_ref().map_or_else(|| "—".to_owned(), cell);
            write!(md, " {text} |")?;
        }
        md.push('\n');
        Ok(())
    };
    writeln!(md, "| | agora | nl-only |\n|---|---|---|")?;
    row(md, "LLM", &|t| t.llm.clone())?;
    row(md, "queries run (of planned)", &|t| {
        format!("{} (of {})", t.queries, t.queries_planned)
    })?;
    row(md, "LLM calls", &|t| t.llm_totals.calls.to_string())?;
    row(md, "prompt tokens", &|t| {
        t.llm_totals.prompt_tokens.to_string()
    })?;
    row(md, "completion tokens", &|t| {
        t.llm_totals.completion_tokens.to_string()
    })?;
    row(md, "cost", &|t| usd(t.llm_totals.cost_usd))?;
    row(md, "judged correct", &|t| {
        format!("{} ({}/{})", percent(t.correct_rate), t.correct, t.queries)
    })?;
    row(md, "schema-valid", &|t| {
        format!(
            "{} ({}/{})",
            percent(t.schema_valid_rate),
            t.schema_valid,
            t.queries
        )
    })?;
    row(md, "served by routines only", &|t| {
        t.routine_only.to_string()
    })?;
    row(md, "wall time of the run", &|t| {
        format!("{:.1} s", t.wall_secs)
    })?;
    row(md, "mean LLM latency per query", &|t| {
        format!("{:.2} s", t.mean_llm_latency_ms_per_query / 1000.0)
    })?;
    writeln!(
        md,
        "\nSchema-valid means HTTP 200 and an output valid against the task's output schema \
         (timeouts count as not); whether it is right is the judge's verdict (section 0). The LLM latency is the recorded model time of all calls a \
         query caused, which may overlap in time.\n"
    )?;
    writeln!(
        md,
        "Costs are the runs' recorded costs: every agent is priced as the model it plays in \
         the paper, whatever model actually answered. The rates are **assumed** (list prices, \
         USD per 1M tokens), not taken from the paper:\n\n| model | prompt | completion |\n|---|---|---|"
    )?;
    for (model, prompt, completion) in PRICE_TABLE {
        writeln!(md, "| {model} | ${prompt:.2} | ${completion:.2} |")?;
    }
    md.push('\n');
    for totals in modes.into_iter().flatten() {
        if totals.stored_totals_differ {
            writeln!(
                md,
                "Note: the {} record's stored totals differ from the sum of its queries; the \
                 sums are shown.\n",
                totals.mode.as_str()
            )?;
        }
    }
    Ok(())
}

fn categories_section(md: &mut String, summary: &ReportSummary) -> Result<()> {
    let Some(shares) = &summary.agora_categories else {
        return Ok(());
    };
    writeln!(
        md,
        "## 2. Agora cost by category (measured), next to the paper's\n\n\
         | category | paper's name | cost | share (ours) | share (paper) |\n|---|---|---|---|---|"
    )?;
    for row in &shares.rows {
        writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            row.category,
            row.paper_name.as_deref().unwrap_or("—"),
            usd(row.cost_usd),
            percent(row.share),
            row.paper_share
                .map_or_else(|| "—".to_owned(), |s| format!("{:.0} %", s * 100.0)),
        )?;
    }
    writeln!(
        md,
        "\nThe paper reports 54 % conversation, 22 % protocol checking, 17 % programming and 6 % \
         negotiation. Our `conversation` row includes the senders' natural-language work \
         (`querying`, {} here), which the paper's split has no separate line for. Shares are of \
         the Agora run's total cost ({}).\n",
        usd(shares.querying_cost_usd),
        usd(shares.total_cost_usd),
    )?;
    Ok(())
}

fn ratio_section(md: &mut String, summary: &ReportSummary) -> Result<()> {
    let Some(ratio) = &summary.cost_ratio else {
        return Ok(());
    };
    let which = describe_shared(ratio.shared_queries, ratio.prefix);
    writeln!(
        md,
        "## 3. Cost ratio NL-only / Agora (measured over {which})\n"
    )?;
    let ours = ratio.ratio.map_or_else(
        || "undefined (Agora cost nothing)".to_owned(),
        |r| format!("**{r:.2}×**"),
    );
    writeln!(
        md,
        "| | NL-only | Agora | ratio |\n|---|---|---|---|\n\
         | ours, {which} (measured) | {} | {} | {} |\n\
         | correct answers there (measured) | {} | {} | |\n\
         | paper, whole screenplay | ${:.2} | ${:.2} | {:.2}× |\n",
        usd(ratio.nl_only_cost_usd),
        usd(ratio.agora_cost_usd),
        ours,
        ratio.nl_only_correct,
        ratio.agora_correct,
        PAPER_NL_ONLY_COST_USD,
        PAPER_AGORA_COST_USD,
        ratio.paper_ratio,
    )?;
    let compared = if ratio.prefix {
        "the common prefix of the screenplay"
    } else {
        "the same screenplay queries, matched by index; the Agora run met them with the history \
         of every query before them, the NL-only sample with the history of the sample's"
    };
    writeln!(
        md,
        "Both runs are compared over the queries both have ({compared}). The paper's ratio is \
         over its whole 1000-query screenplay; in Agora mode the cost per query depends on how \
         far protocols and routines have taken over (see the curves), so a ratio over part of \
         the screenplay need not match a ratio over the whole of it.\n"
    )?;
    Ok(())
}

fn estimate_section(md: &mut String, summary: &ReportSummary) -> Result<()> {
    let Some(estimate) = &summary.nl_only_estimate else {
        return Ok(());
    };
    let drawn = match estimate.sample {
        Some(sample) => format!(
            "a stratified sample ({} queries per (server, task) pair drawn with seed {}, or all \
             of a pair's when it has no more)",
            sample.per_pair, sample.seed
        ),
        None => "a prefix".to_owned(),
    };
    writeln!(
        md,
        "## 4. NL-only cost of the whole screenplay: ESTIMATE\n\n\
         The NL-only run recorded {} of the screenplay's {} queries, {drawn} (measured cost \
         {}). **ESTIMATE**: for each (server, task), the mean measured NL-only cost (and share \
         of correct answers) of its recorded queries times its number of queries in the \
         screenplay; ± is the 95 % interval's half-width from the pairs' sampling variances \
         (a pair with one sample or none adds nothing to it, so for a prefix it understates). \
         {} pair(s) without any sample ({} queries) use the overall mean of {} per query and \
         count no correct answer.\n",
        estimate.measured_queries,
        estimate.screenplay_queries,
        usd(estimate.measured_cost_usd),
        estimate.unsampled_pairs,
        estimate.unsampled_queries,
        usd(estimate.overall_mean_usd),
    )?;
    writeln!(
        md,
        "| | queries | NL-only cost |\n|---|---|---|\n\
         | measured | {} | {} |\n| **ESTIMATE**, whole screenplay | {} | {} ± {} |\n\
         | paper, whole screenplay | 1000 | ${:.2} |\n",
        estimate.measured_queries,
        usd(estimate.measured_cost_usd),
        estimate.screenplay_queries,
        usd(estimate.estimated_cost_usd),
        usd(estimate.cost_spread_usd),
        PAPER_NL_ONLY_COST_USD,
    )?;
    writeln!(
        md,
        "**ESTIMATE** of NL-only's correct answers over the whole screenplay: {:.0} ± {:.0} of \
         {} ({}), so {} per correct answer.\n",
        estimate.estimated_correct,
        estimate.correct_spread,
        estimate.screenplay_queries,
        percent(ratio_or_zero(
            estimate.estimated_correct,
            estimate.screenplay_queries as f64
        )),
        estimate
            .estimated_cost_per_correct_usd
            .map_or_else(|| "nothing".to_owned(), usd),
    )?;
    if let Some(agora) = &summary.agora {
        writeln!(
            md,
            "For reference, the Agora run measured {} over its {} queries (paper: ${:.2} over \
             1000).\n",
            usd(agora.llm_totals.cost_usd),
            agora.queries,
            PAPER_AGORA_COST_USD,
        )?;
    }
    if let Some(ratio) = estimate.estimated_ratio_vs_agora {
        writeln!(
            md,
            "The Agora run covered the whole screenplay: estimated NL-only / measured Agora = \
             **{ratio:.2}× (ESTIMATE)**, paper {:.2}×.\n",
            PAPER_NL_ONLY_COST_USD / PAPER_AGORA_COST_USD
        )?;
    }
    if let Some(ratio) = estimate.agora_cost_per_correct_vs_nl_only {
        writeln!(
            md,
            "Agora's measured cost per correct answer is **{ratio:.2}× (ESTIMATE)** the NL-only \
             estimate's (the goal is at most 0.20×).\n"
        )?;
    }
    writeln!(
        md,
        "| server | task | screenplay queries | samples | correct | mean | std | min–max | \
         estimate |\n|---|---|---|---|---|---|---|---|---|"
    )?;
    for pair in &estimate.pairs {
        let mean = if pair.samples == 0 {
            format!("{} (overall)", usd(pair.mean_usd))
        } else {
            usd(pair.mean_usd)
        };
        let range = match (pair.min_usd, pair.max_usd) {
            (Some(min), Some(max)) => format!("{}–{}", usd(min), usd(max)),
            _ => "—".to_owned(),
        };
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            pair.server,
            pair.task,
            pair.screenplay_queries,
            pair.samples,
            pair.correct,
            mean,
            pair.std_usd.map_or_else(|| "—".to_owned(), usd),
            range,
            usd(pair.estimated_cost_usd),
        )?;
    }
    md.push('\n');
    Ok(())
}

fn curves_section(md: &mut String, plots: &Plots) -> Result<()> {
    writeln!(
        md,
        "## 5. Per-query curves (measured)\n\n\
         Trailing moving averages over {MOVING_AVERAGE_WINDOW} queries: point i averages \
         queries max(0, i−{})..=i, so the first points average fewer queries. The values are in \
         `curves.csv`.\n",
        MOVING_AVERAGE_WINDOW - 1
    )?;
    let entries = [
        (plots.cost, "Cost per query, both modes"),
        (
            plots.routine_share,
            "Share of queries served entirely by routines (no LLM call anywhere, and a \
             success), Agora mode",
        ),
        (plots.calls, "LLM calls per query, both modes"),
        (plots.correct, "Share of answers judged correct, both modes"),
    ];
    for (file, caption) in entries {
        match file {
            Some(file) => writeln!(md, "{caption}:\n\n![{caption}]({file})\n")?,
            None => writeln!(md, "{caption}: no data.\n")?,
        }
    }
    Ok(())
}

fn network_section(md: &mut String, summary: &ReportSummary) -> Result<()> {
    let modes: Vec<&ModeTotals> = [&summary.agora, &summary.nl_only]
        .into_iter()
        .flatten()
        .collect();
    if modes.is_empty() {
        return Ok(());
    }
    writeln!(md, "## 6. The network at the end of each run (measured)\n")?;
    write!(md, "| |")?;
    for totals in &modes {
        write!(md, " {} |", totals.mode.as_str())?;
    }
    writeln!(md, "\n|---|{}", "---|".repeat(modes.len()))?;
    let dbs: BTreeSet<&String> = modes
        .iter()
        .flat_map(|t| t.network.protocols_per_db.keys())
        .collect();
    for db in dbs {
        write!(md, "| protocols in `{db}` |")?;
        for totals in &modes {
            let count = totals
                .network
                .protocols_per_db
                .get(db)
                .copied()
                .unwrap_or(0);
            write!(md, " {count} |")?;
        }
        md.push('\n');
    }
    type Stat = fn(&NetworkStats) -> u64;
    let rows: [(&str, Stat); 3] = [
        ("negotiations that ended in a protocol", |n| n.negotiations),
        ("routines written by servers (active)", |n| {
            n.server_routines
        }),
        ("routines written for senders (active)", |n| {
            n.sender_routines
        }),
    ];
    for (label, value) in rows {
        write!(md, "| {label} |")?;
        for totals in &modes {
            write!(md, " {} |", value(&totals.network))?;
        }
        md.push('\n');
    }
    md.push('\n');
    Ok(())
}

fn tasks_section(md: &mut String, input: &ReportInput) -> Result<()> {
    let runs = runs(input);
    if runs.is_empty() {
        return Ok(());
    }
    writeln!(md, "## 7. Schema-valid outputs per task (measured)\n")?;
    for run in runs {
        // task -> (queries, successes, cost, routine-only)
        let mut tasks: BTreeMap<&str, (usize, usize, f64, usize)> = BTreeMap::new();
        for q in &run.queries {
            let entry = tasks.entry(q.task.as_str()).or_default();
            entry.0 += 1;
            entry.1 += usize::from(q.success);
            entry.2 += q.llm.cost_usd;
            entry.3 += usize::from(q.routine_only());
        }
        writeln!(
            md,
            "{} ({} of {} queries schema-valid, {}):\n\n\
             | task | queries | schema-valid | schema-valid rate | mean cost | routines only |\n\
             |---|---|---|---|---|---|",
            run.mode.as_str(),
            run.successes(),
            run.queries.len(),
            percent(ratio_or_zero(
                run.successes() as f64,
                run.queries.len() as f64
            )),
        )?;
        for (task, (queries, successes, cost, routine_only)) in tasks {
            writeln!(
                md,
                "| {task} | {queries} | {successes} | {} | {} | {routine_only} |",
                percent(ratio_or_zero(successes as f64, queries as f64)),
                usd(ratio_or_zero(cost, queries as f64)),
            )?;
        }
        md.push('\n');
    }
    Ok(())
}

/// Verdict counts over some queries.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    queries: usize,
    correct: usize,
    wrong: usize,
    failed: usize,
    unjudged: usize,
}

impl Tally {
    fn add(&mut self, query: &QueryRecord) {
        self.queries += 1;
        match query.verdict_word() {
            "correct" => self.correct += 1,
            "wrong" => self.wrong += 1,
            "failed" => self.failed += 1,
            _ => self.unjudged += 1,
        }
    }

    fn of<'a>(queries: impl IntoIterator<Item = &'a QueryRecord>) -> Tally {
        let mut tally = Tally::default();
        queries.into_iter().for_each(|q| tally.add(q));
        tally
    }

    /// `correct/queries` and the other verdicts, as table cells.
    fn cells(&self) -> String {
        if self.queries == 0 {
            return "— | — | — | —".to_owned();
        }
        format!(
            "{}/{} | {} | {} | {}",
            self.correct, self.queries, self.wrong, self.failed, self.unjudged
        )
    }
}

/// Section 0: the judge's verdicts, before any cost.
fn correctness_section(
    md: &mut String,
    input: &ReportInput,
    summary: &ReportSummary,
    plots: &Plots,
) -> Result<()> {
    writeln!(
        md,
        "## 0. Correctness (measured; judged by rules, without an LLM)\n\n\
         Every answer is judged against the servers' own rules (`agora_judge`): the seeded \
         mocks, weekdays and opening hours, the seed rows, the fares, and a reference \
         simulation of every server's state in screenplay order, assuming every earlier query \
         was served correctly. Where the run read the server's database around a query, the \
         reply must also agree with what the query wrote: a success wrote exactly its booking, \
         rental, table or tickets, and anything else wrote nothing. A query **succeeded** when \
         its answer is judged correct; `failed` means no output at all; `unjudged` means no \
         rule applies.\n"
    )?;
    let modes = [&summary.agora, &summary.nl_only];
    writeln!(md, "| | agora | nl-only |\n|---|---|---|")?;
    type Cell = fn(&ModeTotals) -> String;
    let rows: [(&str, Cell); 10] = [
        ("queries judged", |t| t.queries.to_string()),
        ("**correct**", |t| {
            format!("**{}** ({})", t.correct, percent(t.correct_rate))
        }),
        ("wrong", |t| t.wrong.to_string()),
        ("of those, wrong by the database", |t| {
            format!(
                "{} (of {} held to it)",
                t.wrong_by_database, t.held_to_database
            )
        }),
        ("failed (no output)", |t| t.failed.to_string()),
        ("unjudged", |t| {
            format!(
                "{} ({})",
                t.unjudged,
                percent(ratio_or_zero(t.unjudged as f64, t.queries as f64))
            )
        }),
        ("cost", |t| usd(t.cost_usd)),
        ("cost per correct answer", |t| {
            t.cost_per_correct_usd.map_or_else(|| "—".to_owned(), usd)
        }),
        ("schema-valid", |t| {
            format!("{} ({})", t.schema_valid, percent(t.schema_valid_rate))
        }),
        ("figures", |t| t.figures.to_owned()),
    ];
    for (label, cell) in rows {
        write!(md, "| {label} |")?;
        for mode in modes {
            let text = mode.as_ref().map_or_else(|| "—".to_owned(), cell);
            write!(md, " {text} |")?;
        }
        md.push('\n');
    }
    md.push('\n');
    let shared = match (input.agora, input.nl_only) {
        (Some(a), Some(n)) => shared_indices(a, n),
        _ => BTreeSet::new(),
    };
    if let (Some(agora), Some(nl_only), false) = (input.agora, input.nl_only, shared.is_empty()) {
        let (agora_shared, nl_only_shared) = (on(agora, &shared), on(nl_only, &shared));
        let a = Tally::of(agora_shared.iter().copied());
        let n = Tally::of(nl_only_shared.iter().copied());
        let cost =
            |queries: &[&QueryRecord]| -> f64 { queries.iter().map(|q| q.llm.cost_usd).sum() };
        let per_correct = |cost: f64, correct: usize| {
            if correct == 0 {
                "—".to_owned()
            } else {
                usd(cost / correct as f64)
            }
        };
        writeln!(
            md,
            "Over {}, which both modes ran: agora {} correct ({} per correct answer), nl-only \
             {} correct ({} per correct answer).\n",
            shared_description(&shared),
            a.correct,
            per_correct(cost(&agora_shared), a.correct),
            n.correct,
            per_correct(cost(&nl_only_shared), n.correct),
        )?;
    }
    pairs_table(md, input, &shared)?;
    for (title, key) in [
        (
            "rung of the sender's ladder (`natural`, `protocol`, `routine`)",
            (|q: &QueryRecord| q.path.clone()) as fn(&QueryRecord) -> String,
        ),
        (
            "answering side (the target server's LLM, or its routine; `none` without output)",
            |q: &QueryRecord| q.answered_by.clone().unwrap_or_else(|| "none".to_owned()),
        ),
    ] {
        writeln!(
            md,
            "Per {title}:\n\n| mode | | correct/queries | wrong | failed | unjudged |\n|---|---|---|---|---|---|"
        )?;
        for run in runs(input) {
            let mut groups: BTreeMap<String, Tally> = BTreeMap::new();
            for q in &run.queries {
                groups.entry(key(q)).or_default().add(q);
            }
            for (group, tally) in groups {
                writeln!(
                    md,
                    "| {} | {group} | {} |",
                    run.mode.as_str(),
                    tally.cells()
                )?;
            }
        }
        md.push('\n');
    }
    match plots.correct {
        Some(file) => writeln!(
            md,
            "Share of answers judged correct over the screenplay (moving average over \
             {MOVING_AVERAGE_WINDOW} queries):\n\n![Share judged correct]({file})\n"
        )?,
        None => writeln!(md, "Share judged correct: no data.\n")?,
    }
    writeln!(md, "The judge's rule for each task type:\n")?;
    for (task, rule) in RULES {
        writeln!(md, "- **{task}**: {rule}.")?;
    }
    writeln!(
        md,
        "\nWhere a mock's answer depends on a free choice of spelling (a place \"London, UK\", \
         \"London\" or none for the weather, a time \"8:5\" or \"08:05\"), an answer right for \
         any of them is accepted; the reference state follows the canonical one. Traffic is \
         the traffic today at the address the query names.\n"
    )?;
    for totals in modes.into_iter().flatten() {
        if totals.unjudged_reasons.is_empty() {
            continue;
        }
        writeln!(md, "Unjudged in {}:\n", totals.mode.as_str())?;
        for (reason, count) in &totals.unjudged_reasons {
            writeln!(md, "- {count}: {reason}")?;
        }
        md.push('\n');
    }
    Ok(())
}

/// Verdicts per (server, task), per mode, and on the queries both modes ran.
fn pairs_table(md: &mut String, input: &ReportInput, shared: &BTreeSet<usize>) -> Result<()> {
    let mut pairs: BTreeMap<(&str, &str), [Tally; 4]> = BTreeMap::new();
    for (slot, run) in [(0, input.agora), (1, input.nl_only)] {
        let Some(run) = run else { continue };
        for q in &run.queries {
            let tallies = pairs.entry((&q.server, &q.task)).or_default();
            tallies[slot].add(q);
            if shared.contains(&q.index) {
                tallies[slot + 2].add(q);
            }
        }
    }
    writeln!(
        md,
        "Per (server, task): correct/queries, wrong, failed, unjudged in each mode's whole run; \
         then correct/queries of each mode over {} (both ran them).\n\n\
         | server | task | agora | wrong | failed | unjudged | nl-only | wrong | failed | unjudged | both ran: agora | nl-only |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|",
        shared_description(shared),
    )?;
    for ((server, task), t) in pairs {
        let head = |t: &Tally| fraction(t.correct, t.queries);
        writeln!(
            md,
            "| {server} | {task} | {} | {} | {} | {} |",
            t[0].cells(),
            t[1].cells(),
            head(&t[2]),
            head(&t[3]),
        )?;
    }
    md.push('\n');
    Ok(())
}
