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
//! The arithmetic is in `summary` (and `goals`); each file has its own writer: `markdown`,
//! `csv`, `plots` (the curves and SVGs) and `html`.
//!
//! Costs are taken as recorded (`cost_usd`, priced by the run at the price table's rates); the
//! report only restates that table. Totals are recomputed from the query records so that the
//! CSV, the curves and the totals always agree; a record whose stored totals disagree is flagged.

mod csv;
pub mod goals;
mod html;
mod markdown;
mod plots;
mod summary;

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

use csv::per_query_csv;
use html::html;
use markdown::markdown;
use markdown::{fraction, percent};
use plots::Curves;
use plots::Plots;
pub use plots::moving_average;
use summary::{
    describe_shared, on, ratio_or_zero, runs, shared_description, shared_indices, summarize,
};

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

fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
