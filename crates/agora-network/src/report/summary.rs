//! The arithmetic of the report: every total, ratio, share and estimate, from the run records.

use super::*;

pub(super) fn summarize(input: &ReportInput) -> ReportSummary {
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

pub(super) fn mode_totals(run: &RunRecord) -> ModeTotals {
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

pub(super) fn ratio_or_zero(numerator: f64, denominator: f64) -> f64 {
    if denominator == 0.0 {
        0.0
    } else {
        numerator / denominator
    }
}

/// The screenplay indices of the queries both runs have (a prefix, or a sample's).
pub(super) fn shared_indices(agora: &RunRecord, nl_only: &RunRecord) -> BTreeSet<usize> {
    let indices =
        |run: &RunRecord| -> BTreeSet<usize> { run.queries.iter().map(|q| q.index).collect() };
    indices(agora)
        .intersection(&indices(nl_only))
        .copied()
        .collect()
}

/// `run`'s queries at the screenplay indices `shared`.
pub(super) fn on<'a>(run: &'a RunRecord, shared: &BTreeSet<usize>) -> Vec<&'a QueryRecord> {
    run.queries
        .iter()
        .filter(|q| shared.contains(&q.index))
        .collect()
}

/// Whether the queries both runs have are the screenplay's first ones (both ran a prefix).
pub(super) fn is_prefix(shared: &BTreeSet<usize>) -> bool {
    shared.iter().copied().eq(0..shared.len())
}

/// How a report names the queries both runs have.
pub(super) fn shared_description(shared: &BTreeSet<usize>) -> String {
    describe_shared(shared.len(), is_prefix(shared))
}

pub(super) fn describe_shared(queries: usize, prefix: bool) -> String {
    if prefix {
        format!("the first {queries} queries")
    } else {
        format!("the {queries} queries both runs have (matched by screenplay index)")
    }
}

pub(super) fn cost_ratio(agora: &RunRecord, nl_only: &RunRecord) -> Option<CostRatio> {
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

pub(super) fn category_shares(run: &RunRecord) -> CategoryShares {
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

pub(super) fn nl_only_estimate(
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

pub(super) fn pair_estimate(
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

pub(super) fn runs<'a>(input: &ReportInput<'a>) -> Vec<&'a RunRecord> {
    input.agora.into_iter().chain(input.nl_only).collect()
}
