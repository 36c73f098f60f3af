//! `report.md`, the report a person reads: correctness first, then goals, totals and costs.

use super::*;

pub(super) fn usd(value: f64) -> String {
    format!("${value:.4}")
}

/// `part/whole` as a table cell, `—` when there is nothing to count.
pub(super) fn fraction(part: usize, whole: usize) -> String {
    if whole == 0 {
        "—".to_owned()
    } else {
        format!("{part}/{whole}")
    }
}

pub(super) fn percent(value: f64) -> String {
    format!("{:.1} %", value * 100.0)
}

pub(super) fn markdown(
    input: &ReportInput,
    summary: &ReportSummary,
    plots: &Plots,
) -> Result<String> {
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
    shadow_section(&mut md, input)?;
    writeln!(
        md,
        "## Files\n\n- `summary.json`: the key numbers above.\n- `per_query.csv`: one row per \
         query and mode, with the cost of each category.\n- `curves.csv`: the moving averages \
         plotted above."
    )?;
    Ok(md)
}

pub(super) fn totals_section(md: &mut String, summary: &ReportSummary) -> Result<()> {
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
    if modes.iter().any(|t| {
        t.as_ref()
            .is_some_and(|t| t.llm_totals.cached_prompt_tokens > 0)
    }) {
        row(md, "of them read from the model's prompt cache", &|t| {
            t.llm_totals.cached_prompt_tokens.to_string()
        })?;
    }
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
         USD per 1M tokens), not taken from the paper; none names a cached-input price, so \
         prompt tokens read from the model's cache are charged in full:\n\n| model | prompt | completion |\n|---|---|---|"
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

pub(super) fn categories_section(md: &mut String, summary: &ReportSummary) -> Result<()> {
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

pub(super) fn ratio_section(md: &mut String, summary: &ReportSummary) -> Result<()> {
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

pub(super) fn estimate_section(md: &mut String, summary: &ReportSummary) -> Result<()> {
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

pub(super) fn curves_section(md: &mut String, plots: &Plots) -> Result<()> {
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

pub(super) fn network_section(md: &mut String, summary: &ReportSummary) -> Result<()> {
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

pub(super) fn tasks_section(md: &mut String, input: &ReportInput) -> Result<()> {
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
pub(super) struct Tally {
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
pub(super) fn correctness_section(
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
pub(super) fn pairs_table(
    md: &mut String,
    input: &ReportInput,
    shared: &BTreeSet<usize>,
) -> Result<()> {
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

/// Shadow checks of the servers' routines: per (server, task), the queries the server's routine
/// answered with the judge's verdicts next to the checks of that routine; per checked server,
/// its checks next to the verdicts on the queries they were made in (a server's routine may
/// answer another server, as a tool); only for a run that made checks.
pub(super) fn shadow_section(md: &mut String, input: &ReportInput) -> Result<()> {
    let Some(run) = input.agora else {
        return Ok(());
    };
    if run.queries.iter().all(|q| q.shadow.is_empty()) {
        return Ok(());
    }
    #[derive(Default)]
    struct Pair {
        routine_answers: usize,
        routine_correct: usize,
        checks: usize,
        disagreements: usize,
    }
    #[derive(Default)]
    struct Checked {
        checks: usize,
        disagreements: usize,
        queries: usize,
        correct: usize,
    }
    let mut pairs: BTreeMap<(&str, &str), Pair> = BTreeMap::new();
    let mut servers: BTreeMap<&str, Checked> = BTreeMap::new();
    for q in &run.queries {
        let pair = pairs.entry((&q.server, &q.task)).or_default();
        if q.answered_by.as_deref() == Some("routine") {
            pair.routine_answers += 1;
            pair.routine_correct += usize::from(q.correct());
        }
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for note in &q.shadow {
            let checked = servers.entry(&note.server).or_default();
            checked.checks += 1;
            checked.disagreements += usize::from(!note.agreed);
            if seen.insert(&note.server) {
                checked.queries += 1;
                checked.correct += usize::from(q.correct());
            }
            if note.server == q.server {
                pair.checks += 1;
                pair.disagreements += usize::from(!note.agreed);
            }
        }
    }
    pairs.retain(|_, p| p.routine_answers > 0 || p.checks > 0);
    let share = run
        .setup
        .as_ref()
        .map(|s| percent(s.routines.shadow.share))
        .unwrap_or_else(|| "a share".into());
    let shadow_cost = run
        .by_category
        .get("shadow")
        .map(|c| c.cost_usd)
        .unwrap_or(0.0);
    writeln!(
        md,
        "## 8. Shadow checks (measured)\n\n\
         The servers' LLMs answered {share} of their routines' answers again on scratch state \
         (`[node.routines.shadow]`); a routine granted a tool that cannot be copied (another \
         server's task, say) is not checked. The checks cost {} of the run's {} ({}).\n\n\
         Per (server, task): the queries the server's routine answered and how many of them the \
         judge found correct, next to the checks of that routine and how many disagreed.\n\n\
         | server | task | routine answers | judged correct | checks | disagreed |\n\
         |---|---|---|---|---|---|",
        usd(shadow_cost),
        usd(run.totals.cost_usd),
        percent(ratio_or_zero(shadow_cost, run.totals.cost_usd)),
    )?;
    let (mut wrong, mut wrong_flagged, mut right, mut right_flagged) = (0, 0, 0, 0);
    for ((server, task), p) in &pairs {
        writeln!(
            md,
            "| {server} | {task} | {} | {} | {} | {} |",
            p.routine_answers,
            fraction(p.routine_correct, p.routine_answers),
            p.checks,
            p.disagreements,
        )?;
        if p.routine_answers == 0 {
            continue;
        }
        let correct = p.routine_correct as f64 / p.routine_answers as f64;
        let flagged = p.disagreements > 0;
        if correct < 0.5 {
            wrong += 1;
            wrong_flagged += usize::from(flagged);
        } else if correct > 0.9 {
            right += 1;
            right_flagged += usize::from(flagged);
        }
    }
    writeln!(
        md,
        "\nFlagged (at least one disagreement): {wrong_flagged} of the {wrong} pairs whose \
         routine answers the judge found below 50 % correct, and {right_flagged} of the {right} \
         above 90 %.\n\n\
         Per checked server (its routine may have answered another server, as a tool): the \
         checks, and the queries they were made in with the judge's verdicts on those queries.\n\n\
         | server | checks | disagreed | queries | judged correct |\n\
         |---|---|---|---|---|"
    )?;
    for (server, c) in &servers {
        writeln!(
            md,
            "| {server} | {} | {} | {} | {} |",
            c.checks,
            c.disagreements,
            c.queries,
            fraction(c.correct, c.queries),
        )?;
    }
    md.push('\n');
    Ok(())
}
