#![allow(clippy::unwrap_used)]
//! The report, computed from two small hand-built runs.

use std::collections::BTreeMap;

use agora_network::report::{ReportInput, moving_average, write_report};
use agora_network::{CallTotals, Mode, NetworkStats, QueryRecord, RunRecord};

fn usage(calls: u64, cost_usd: f64) -> CallTotals {
    CallTotals {
        calls,
        prompt_tokens: calls * 100,
        cached_prompt_tokens: 0,
        completion_tokens: calls * 10,
        cost_usd,
        latency_ms: calls * 50,
    }
}

fn pair(i: usize) -> (&'static str, &'static str) {
    if i.is_multiple_of(3) {
        ("s2", "booking")
    } else {
        ("s1", "weather")
    }
}

fn query(i: usize, success: bool, categories: &[(&str, u64, f64)]) -> QueryRecord {
    let mut llm = CallTotals::default();
    let mut by_category = BTreeMap::new();
    for &(category, calls, cost) in categories {
        llm.add(&usage(calls, cost));
        by_category.insert(category.to_owned(), usage(calls, cost));
    }
    let (server, task) = pair(i);
    QueryRecord {
        index: i,
        user: format!("u{}", i % 5),
        server: server.to_owned(),
        task: task.to_owned(),
        data: serde_json::Value::Null,
        success,
        output: None,
        answered_by: None,
        writes: None,
        verdict: None,
        error: (!success).then(|| "timeout".to_owned()),
        path: if llm.calls == 0 { "routine" } else { "natural" }.to_owned(),
        wall_ms: 10,
        llm,
        by_category,
        shadow: Vec::new(),
    }
}

fn run(mode: Mode, queries: Vec<QueryRecord>, network: NetworkStats) -> RunRecord {
    let mut record = RunRecord {
        mode,
        llm: "cassette".to_owned(),
        seed: 42,
        queries_planned: queries.len(),
        queries,
        totals: CallTotals::default(),
        by_category: BTreeMap::new(),
        network,
        wall_secs: 12.5,
        sample: None,
        setup: None,
    };
    record.recompute_totals();
    record
}

/// 30 queries: the first 10 negotiate and implement, then every 4th is served by routines.
fn agora_run() -> RunRecord {
    let queries = (0..30)
        .map(|i| {
            if i < 10 {
                query(
                    i,
                    true,
                    &[
                        ("conversation", 2, 0.006),
                        ("checking", 1, 0.002),
                        ("implementing", 1, 0.001),
                        ("negotiation", 1, 0.0005),
                        ("querying", 1, 0.0005),
                    ],
                )
            } else if i.is_multiple_of(4) {
                query(i, true, &[])
            } else {
                query(
                    i,
                    true,
                    &[("conversation", 1, 0.002), ("querying", 1, 0.001)],
                )
            }
        })
        .collect();
    let network = NetworkStats {
        protocols_per_db: BTreeMap::from([("db-1".to_owned(), 3)]),
        negotiations: 2,
        server_routines: 2,
        sender_routines: 4,
    };
    run(Mode::Agora, queries, network)
}

/// 20 queries: booking costs 0.03, weather 0.02 or 0.021; query 5 times out.
fn nl_only_run() -> RunRecord {
    let queries = (0..20)
        .map(|i| {
            let cost = match pair(i).1 {
                "booking" => 0.03,
                _ => 0.02 + 0.001 * (i % 2) as f64,
            };
            query(
                i,
                i != 5,
                &[("conversation", 1, cost / 2.0), ("querying", 1, cost / 2.0)],
            )
        })
        .collect();
    run(Mode::NlOnly, queries, NetworkStats::default())
}

fn counts() -> BTreeMap<(String, String), u64> {
    BTreeMap::from([
        (("s1".to_owned(), "weather".to_owned()), 25),
        (("s2".to_owned(), "booking".to_owned()), 10),
        (("s3".to_owned(), "translate".to_owned()), 5),
    ])
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn moving_average_is_trailing_and_truncated_at_the_start() {
    let values = [1.0, 2.0, 3.0, 4.0, 5.0];
    assert_eq!(moving_average(&values, 2), vec![1.0, 1.5, 2.5, 3.5, 4.5]);
    assert_eq!(moving_average(&values, 100), vec![1.0, 1.5, 2.0, 2.5, 3.0]);
    let long: Vec<f64> = (0..250).map(f64::from).collect();
    let average = moving_average(&long, 100);
    // Point 150 averages 51..=150.
    assert!(close(average[150], 100.5));
    assert!(close(average[99], 49.5));
    assert!(close(average[249], 199.5));
}

#[test]
fn report_of_two_runs() {
    let agora = agora_run();
    let nl_only = nl_only_run();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let input = ReportInput {
        name: "synthetic".to_owned(),
        agora: Some(&agora),
        nl_only: Some(&nl_only),
        screenplay_counts: counts(),
    };
    let summary = write_report(&out, &input).unwrap();

    for file in [
        "report.md",
        "summary.json",
        "per_query.csv",
        "curves.csv",
        "cost_per_query.svg",
        "routine_share.svg",
        "llm_calls_per_query.svg",
        "report.html",
    ] {
        assert!(out.join(file).is_file(), "{file} missing");
    }

    // Totals are the sums of the records.
    let a = summary.agora.as_ref().unwrap();
    let n = summary.nl_only.as_ref().unwrap();
    assert_eq!(a.llm_totals, agora.totals);
    assert_eq!(n.llm_totals, nl_only.totals);
    assert_eq!(a.queries, 30);
    assert_eq!(a.schema_valid, 30);
    assert_eq!(n.schema_valid, 19);
    assert!(close(n.schema_valid_rate, 19.0 / 20.0));
    // Queries 12, 16, 20, 24 and 28 use no LLM.
    assert_eq!(a.routine_only, 5);
    assert!(!a.stored_totals_differ);

    // The ratio is over the first 20 queries.
    let ratio = summary.cost_ratio.as_ref().unwrap();
    assert_eq!(ratio.shared_queries, 20);
    let agora_prefix: f64 = agora.queries[..20].iter().map(|q| q.llm.cost_usd).sum();
    assert!(close(ratio.agora_cost_usd, agora_prefix));
    assert!(close(ratio.nl_only_cost_usd, nl_only.totals.cost_usd));
    assert!(close(
        ratio.ratio.unwrap(),
        nl_only.totals.cost_usd / agora_prefix
    ));
    assert!(close(ratio.paper_ratio, 36.23 / 7.67));

    // Categories: querying is counted with conversation.
    let shares = summary.agora_categories.as_ref().unwrap();
    let conversation = shares
        .rows
        .iter()
        .find(|r| r.category == "conversation")
        .unwrap();
    let expected = 10.0 * 0.0065 + 15.0 * 0.003;
    assert!(close(conversation.cost_usd, expected));
    assert!(close(conversation.share, expected / agora.totals.cost_usd));
    assert_eq!(conversation.paper_share, Some(0.54));
    assert!(close(shares.rows.iter().map(|r| r.share).sum::<f64>(), 1.0));

    // The estimate: 7 booking samples at 0.03; 13 weather samples, 7 at 0.021 and 6 at 0.02;
    // translate has none and takes the overall mean.
    let estimate = summary.nl_only_estimate.as_ref().unwrap();
    let weather_mean = (7.0 * 0.021 + 6.0 * 0.02) / 13.0;
    let overall_mean = (7.0 * 0.03 + 7.0 * 0.021 + 6.0 * 0.02) / 20.0;
    assert!(close(estimate.overall_mean_usd, overall_mean));
    assert!(close(
        estimate.estimated_cost_usd,
        25.0 * weather_mean + 10.0 * 0.03 + 5.0 * overall_mean
    ));
    assert_eq!(estimate.screenplay_queries, 40);
    assert_eq!(estimate.unsampled_pairs, 1);
    assert_eq!(estimate.unsampled_queries, 5);
    let weather = estimate.pairs.iter().find(|p| p.task == "weather").unwrap();
    assert_eq!(weather.samples, 13);
    assert_eq!(weather.min_usd, Some(0.02));
    assert_eq!(weather.max_usd, Some(0.021));
    let booking = estimate.pairs.iter().find(|p| p.task == "booking").unwrap();
    assert!(close(booking.std_usd.unwrap(), 0.0));
    // The Agora run did not cover the 40-query screenplay.
    assert_eq!(estimate.estimated_ratio_vs_agora, None);

    // curves.csv: the window (100) is longer than the runs, so point i averages 0..=i.
    let curves = std::fs::read_to_string(out.join("curves.csv")).unwrap();
    let rows: Vec<Vec<&str>> = curves
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 30);
    let cell = |row: usize, column: usize| rows[row][column].parse::<f64>().unwrap();
    assert!(close(cell(0, 1), agora.queries[0].llm.cost_usd));
    assert!(close(cell(29, 1), agora.totals.cost_usd / 30.0));
    assert!(close(cell(19, 2), nl_only.totals.cost_usd / 20.0));
    assert!(close(cell(29, 3), 5.0 / 30.0));
    assert!(close(cell(0, 4), 6.0));
    assert_eq!(rows[25][2], "", "nl-only has no query 25");

    // per_query.csv: one row per query and mode.
    let per_query = std::fs::read_to_string(out.join("per_query.csv")).unwrap();
    assert_eq!(per_query.lines().count(), 1 + 30 + 20);
    assert!(per_query.lines().next().unwrap().contains("cost_querying"));

    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for needle in [
        "54 %",
        "22 %",
        "17 %",
        "6 %",
        "4.72×",
        "ESTIMATE",
        "first 20 queries",
    ] {
        assert!(md.contains(needle), "report.md lacks {needle:?}");
    }
    for plot in [
        "cost_per_query.svg",
        "routine_share.svg",
        "llm_calls_per_query.svg",
    ] {
        assert!(
            md.contains(&format!("]({plot})")),
            "report.md does not link {plot}"
        );
    }

    // report.html: the dashboard's charts per run, inlined, with the run's own counts.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("agora run") && html.contains("nl-only run"));
    assert!(
        !html.contains("src=\"") && html.contains("uPlot"),
        "readable offline"
    );
    let series = |id: usize| -> serde_json::Value {
        let start = html.find(&format!("id=\"series-{id}\">")).unwrap();
        let text = &html[start..];
        let text = &text[text.find('>').unwrap() + 1..text.find("</script>").unwrap()];
        serde_json::from_str(text).unwrap()
    };
    let sum = |v: &serde_json::Value| -> f64 {
        v.as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.as_f64())
            .sum()
    };
    // About 20 points a run: 30 queries make 15 points of 2, 20 queries 20 points of 1.
    for (id, totals, queries, per_point) in [(0, a, 30.0, 2.0), (1, n, 20.0, 1.0)] {
        let s = series(id);
        assert_eq!(
            sum(&s["llm"]) + sum(&s["routine"]) + sum(&s["other"]),
            queries
        );
        assert!(close(sum(&s["costUsd"]), totals.llm_totals.cost_usd));
        let points = s["t"].as_array().unwrap().len() as f64;
        assert_eq!(points, queries / per_point);
        let correct = sum(&s["correctShare"]) * per_point / 100.0;
        assert!(close(correct, totals.correct as f64), "{correct}");
    }

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(json["cost_ratio"]["shared_queries"], 20);
}

#[test]
fn report_of_one_mode_only() {
    let agora = agora_run();
    let dir = tempfile::tempdir().unwrap();
    let input = ReportInput {
        name: "agora-only".to_owned(),
        agora: Some(&agora),
        nl_only: None,
        screenplay_counts: counts(),
    };
    let summary = write_report(dir.path(), &input).unwrap();
    assert!(summary.cost_ratio.is_none());
    assert!(summary.nl_only_estimate.is_none());
    assert!(dir.path().join("report.md").is_file());
}

/// The report's first table is correctness per mode; summary.json carries the verdict counts,
/// the cost and the cost per correct answer; the plot of the share correct is drawn.
#[test]
fn report_leads_with_correctness() {
    use agora_judge::Verdict;
    let mut agora = agora_run();
    let mut nl_only = nl_only_run();
    for (i, q) in agora.queries.iter_mut().enumerate() {
        q.verdict = Some(match i % 3 {
            0 => Verdict::Correct,
            1 => Verdict::Wrong("status success, expected failure".into()),
            _ => Verdict::Correct,
        });
        q.answered_by = Some(if q.llm.calls == 0 { "routine" } else { "llm" }.into());
    }
    for (i, q) in nl_only.queries.iter_mut().enumerate() {
        q.verdict = Some(if !q.success {
            Verdict::Failed
        } else if i == 2 {
            Verdict::Unjudged("no rule for the task type booking".into())
        } else {
            Verdict::Correct
        });
    }
    let dir = tempfile::tempdir().unwrap();
    let input = ReportInput {
        name: "judged".to_owned(),
        agora: Some(&agora),
        nl_only: Some(&nl_only),
        screenplay_counts: counts(),
    };
    let summary = write_report(dir.path(), &input).unwrap();
    let a = summary.agora.as_ref().unwrap();
    assert_eq!((a.correct, a.wrong, a.failed, a.unjudged), (20, 10, 0, 0));
    assert!(close(
        a.cost_per_correct_usd.unwrap(),
        agora.totals.cost_usd / 20.0
    ));
    let n = summary.nl_only.as_ref().unwrap();
    assert_eq!((n.correct, n.wrong, n.failed, n.unjudged), (18, 0, 1, 1));
    assert_eq!(n.unjudged_reasons.values().sum::<usize>(), 1);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap())
            .unwrap();
    for key in [
        "queries", "correct", "wrong", "failed", "unjudged", "cost_usd", "figures",
    ] {
        assert!(
            !json["agora"][key].is_null(),
            "summary.json lacks agora.{key}"
        );
    }
    assert_eq!(json["agora"]["figures"], "measured");
    assert_eq!(json["nl_only_estimate"]["figures"], "ESTIMATE");
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    let first_table = md.find("\n| ").unwrap();
    let correctness = md.find("## 0. Correctness").unwrap();
    assert!(
        correctness < first_table,
        "the first table is not correctness"
    );
    assert!(
        md[first_table..].starts_with("\n| | agora | nl-only |\n|---|---|---|\n| queries judged |")
    );
    assert!(
        md.contains("| **correct** | **20** (66.7 %) | **18** (90.0 %) |"),
        "{md}"
    );
    assert!(md.contains("](correct_share.svg)"));
    assert!(dir.path().join("correct_share.svg").is_file());
    assert!(md.contains("- **rentSki**: success iff"));
    let curves = std::fs::read_to_string(dir.path().join("curves.csv")).unwrap();
    assert!(
        curves
            .lines()
            .next()
            .unwrap()
            .ends_with("agora_correct_share_ma,nl_only_correct_share_ma")
    );
}

/// An NL-only stratified sample against an Agora run of the whole screenplay: the ratio is over
/// the queries both have (not a prefix), and the estimate extrapolates cost and correct answers
/// per pair, with the 95 % half-widths of both.
#[test]
fn a_sampled_nl_only_run_is_extrapolated_per_pair_with_its_spread() {
    use agora_judge::Verdict;
    let mut agora = agora_run();
    for q in &mut agora.queries {
        q.verdict = Some(Verdict::Correct);
    }
    // Weather (20 in the screenplay): 4 samples at 0.02, 0.02, 0.04, 0.04, two correct.
    // Booking (10): 2 samples at 0.03, both correct.
    let sampled = [(0, 0.03, true), (1, 0.02, true), (2, 0.02, false)]
        .into_iter()
        .chain([(3, 0.03, true), (4, 0.04, true), (29, 0.04, false)]);
    let queries = sampled
        .map(|(i, cost, correct)| {
            let mut q = query(i, true, &[("conversation", 1, cost)]);
            q.verdict = Some(if correct {
                Verdict::Correct
            } else {
                Verdict::Wrong("no".into())
            });
            q
        })
        .collect();
    let mut nl_only = run(Mode::NlOnly, queries, NetworkStats::default());
    nl_only.sample = Some(agora_network::Sample {
        per_pair: 4,
        seed: 9,
    });
    let counts = BTreeMap::from([
        (("s1".to_owned(), "weather".to_owned()), 20),
        (("s2".to_owned(), "booking".to_owned()), 10),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let input = ReportInput {
        name: "sampled".to_owned(),
        agora: Some(&agora),
        nl_only: Some(&nl_only),
        screenplay_counts: counts,
    };
    let summary = write_report(dir.path(), &input).unwrap();

    let ratio = summary.cost_ratio.as_ref().unwrap();
    assert_eq!(ratio.shared_queries, 6);
    assert!(!ratio.prefix);
    let agora_shared: f64 = agora
        .queries
        .iter()
        .filter(|q| [0, 1, 2, 3, 4, 29].contains(&q.index))
        .map(|q| q.llm.cost_usd)
        .sum();
    assert!(close(ratio.agora_cost_usd, agora_shared));
    assert!(close(ratio.nl_only_cost_usd, 0.18));
    assert_eq!((ratio.agora_correct, ratio.nl_only_correct), (6, 4));

    let estimate = summary.nl_only_estimate.as_ref().unwrap();
    assert_eq!(estimate.sample, nl_only.sample);
    assert!(close(
        estimate.estimated_cost_usd,
        20.0 * 0.03 + 10.0 * 0.03
    ));
    assert!(close(estimate.estimated_correct, 20.0 * 0.5 + 10.0));
    // Weather's cost variance: 20² × (1 − 4/20) / 4 × s², s² = 4 × 0.01² / 3; booking's is 0.
    let cost_variance = 80.0 * (4.0 * 0.0001 / 3.0);
    assert!(close(
        estimate.cost_spread_usd,
        1.96 * f64::sqrt(cost_variance)
    ));
    // Weather's correct-count variance: 80 × p(1 − p) × n/(n − 1) with p = 1/2; booking's is 0.
    assert!(close(
        estimate.correct_spread,
        1.96 * f64::sqrt(80.0 * 0.25 * 4.0 / 3.0)
    ));
    assert!(close(
        estimate.estimated_cost_per_correct_usd.unwrap(),
        0.9 / 20.0
    ));
    assert!(close(
        estimate.agora_cost_per_correct_vs_nl_only.unwrap(),
        agora.totals.cost_usd / 30.0 / (0.9 / 20.0)
    ));
    assert!(close(
        estimate.estimated_ratio_vs_agora.unwrap(),
        0.9 / agora.totals.cost_usd
    ));
    let weather = estimate.pairs.iter().find(|p| p.task == "weather").unwrap();
    assert_eq!((weather.samples, weather.correct), (4, 2));

    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(md.contains("the 6 queries both runs have"), "{md}");
    // The correctness comparison is over the same queries too, not the Agora run's first six
    // (those cost $0.0100 each).
    assert!(
        md.contains(
            "Over the 6 queries both runs have (matched by screenplay index), which both modes \
             ran: agora 6 correct ($0.0088 per correct answer), nl-only 4 correct ($0.0450 per \
             correct answer)."
        ),
        "{md}"
    );
    assert!(
        md.contains("| s1 | weather | 20/20 | 0 | 0 | 0 | 2/4 | 2 | 0 | 0 | 4/4 | 2/4 |"),
        "{md}"
    );
    assert!(
        md.contains("a stratified sample (4 queries per (server, task) pair drawn with seed 9"),
        "{md}"
    );
    assert!(
        md.contains("correct answers over the whole screenplay: 20 ± 10 of 30"),
        "{md}"
    );
}

/// The goals section: the share correct, every pair's routine answers against 95 % (over the run
/// and its last 30 %), and the pairs holding the share back with their most frequent reason.
/// [`agora_run`] with its queries from 10 on answered by routines (the first 10 by the LLM),
/// each query's verdict given by `verdict` of its index.
fn agora_run_judged(verdict: impl Fn(usize) -> agora_judge::Verdict) -> RunRecord {
    let mut agora = agora_run();
    for q in &mut agora.queries {
        let i = q.index;
        q.answered_by = Some(if i >= 10 { "routine" } else { "llm" }.to_owned());
        q.verdict = Some(verdict(i));
    }
    agora
}

#[test]
fn the_goals_name_the_routines_and_pairs_that_miss_them() {
    use agora_judge::Verdict;
    let agora = agora_run_judged(|i| match i {
        0 | 3 => Verdict::Wrong("no price".into()),
        1 | 2 => Verdict::Wrong("wrong temperature".into()),
        12 => Verdict::Wrong("price 36, expected 30".into()),
        24 => Verdict::Wrong("price 35, expected 30".into()),
        27 => Verdict::Wrong("price 31, expected 30".into()),
        _ => Verdict::Correct,
    });
    let nl_only = nl_only_run();
    let dir = tempfile::tempdir().unwrap();
    let input = ReportInput {
        name: "goals".to_owned(),
        agora: Some(&agora),
        nl_only: Some(&nl_only),
        screenplay_counts: counts(),
    };
    let summary = write_report(dir.path(), &input).unwrap();

    let goals = summary.goals.as_ref().unwrap();
    let routines: Vec<_> = goals
        .routines
        .iter()
        .map(|p| {
            (
                p.task.as_str(),
                p.correct,
                p.answered,
                p.late_correct,
                p.late_answered,
            )
        })
        .collect();
    // Routines answer queries 10..30; the last 30 % is 21..30.
    assert_eq!(
        routines,
        [("weather", 14, 14, 6, 6), ("booking", 3, 6, 1, 3)]
    );
    let booking = &goals.held_back[0];
    assert_eq!(
        (booking.task.as_str(), booking.not_correct, booking.queries),
        ("booking", 5, 10)
    );
    assert_eq!((booking.by_llm, booking.by_routine), (2, 3));
    assert_eq!(
        (booking.reason.as_str(), booking.reason_count),
        ("price ##, expected ##", 3)
    );

    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    for line in [
        "| at least 80.0 % of all queries judged correct | 76.7 % (23/30, measured) | **no** |",
        "| correct at least as often as NL-only | 15 against 0 over the 20 queries both ran (measured) | yes |",
        "| every pair's routine answers at least 95.0 % correct | 1 of 2 pairs (measured) | **no** |",
        "| s1 | weather | 14/14 | 100.0 % | 6/6 | yes | 0/13 |",
        "| s2 | booking | 3/6 | 50.0 % | 1/3 | **no** | 0/7 |",
        "within 10.0 % of the NL-only LLM's share on the pair | 0 of 1 pairs below (measured) | yes |",
        "| s2 | booking | 5/10 | 2 | 3 | 3× price ##, expected ## |",
        "| s1 | weather | 2/20 | 2 | 0 | 2× wrong temperature |",
    ] {
        assert!(md.contains(line), "missing {line}\n{md}");
    }
    assert!(
        md.contains("| NL-only / Agora cost at least 4.7× |"),
        "{md}"
    );
}

/// Without an NL-only run no pair's routines can be held to the NL-only LLM: the goal is said
/// to be unmeasured, not met.
#[test]
fn without_an_nl_only_run_the_routines_against_the_llm_goal_is_unmeasured() {
    let agora = agora_run_judged(|_| agora_judge::Verdict::Correct);
    let dir = tempfile::tempdir().unwrap();
    let input = ReportInput {
        name: "alone".to_owned(),
        agora: Some(&agora),
        nl_only: None,
        screenplay_counts: counts(),
    };
    write_report(dir.path(), &input).unwrap();
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    let line = "NL-only LLM's share on the pair | not measured: no pair with 10 routine answers \
                has NL-only answers | — |";
    assert!(md.contains(line), "missing {line}\n{md}");
}

/// A pair whose routines answered at least 10 queries and fall more than 10 points below the
/// NL-only LLM on the same pair is named, with the routines' most frequent wrong reason.
#[test]
fn routines_far_below_the_llm_on_their_pair_are_named() {
    use agora_judge::Verdict;
    // Of the 14 weather queries routines answer, 4 are wrong: 71 %.
    let agora = agora_run_judged(|i| match i {
        11 | 13 | 14 | 16 => Verdict::Wrong("stale forecast for 2024-01-0#".into()),
        _ => Verdict::Correct,
    });
    let mut nl_only = nl_only_run();
    for q in &mut nl_only.queries {
        q.verdict = Some(Verdict::Correct);
    }
    let dir = tempfile::tempdir().unwrap();
    let input = ReportInput {
        name: "below".to_owned(),
        agora: Some(&agora),
        nl_only: Some(&nl_only),
        screenplay_counts: counts(),
    };
    let summary = write_report(dir.path(), &input).unwrap();
    let goals = summary.goals.as_ref().unwrap();
    let weather = goals.routines.iter().find(|p| p.task == "weather").unwrap();
    assert_eq!((weather.correct, weather.answered), (10, 14));
    assert_eq!((weather.llm_correct, weather.llm_answered), (13, 13));
    assert!(weather.below_the_llm());
    // Booking's routines answered 6: too few to be held to the LLM.
    let booking = goals.routines.iter().find(|p| p.task == "booking").unwrap();
    assert!(!booking.below_the_llm());
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    for line in [
        "| 1 of 1 pairs below (measured) | **no** |",
        "- s1 weather: routines 10/14, NL-only LLM 13/13: stale forecast for ####-##-##",
    ] {
        assert!(md.contains(line), "missing {line}\n{md}");
    }
}

/// A run with shadow checks: per pair, the routine answers with the judge's verdicts next to the
/// checks and disagreements; the wrong pair (s2, 0/6 correct) is flagged and the right one (s1,
/// 14/14) is not; the checks' cost is a share of the run's. A run without checks has no section.
#[test]
fn shadow_checks_are_shown_next_to_the_judges_verdicts() {
    use agora_judge::Verdict;
    use agora_network::ShadowNote;
    let mut agora = agora_run_judged(|i| match pair(i).0 {
        "s2" => Verdict::Wrong("no booking".into()),
        _ => Verdict::Correct,
    });
    for q in agora.queries.iter_mut().filter(|q| q.index >= 10) {
        let agreed = q.server == "s1";
        q.shadow.push(ShadowNote {
            server: q.server.clone(),
            agreed,
            difference: if agreed {
                String::new()
            } else {
                "replies differ".into()
            },
        });
        q.by_category.insert("shadow".into(), usage(1, 0.001));
    }
    agora.recompute_totals();
    let dir = tempfile::tempdir().unwrap();
    let input = ReportInput {
        name: "shadow".to_owned(),
        agora: Some(&agora),
        nl_only: None,
        screenplay_counts: counts(),
    };
    write_report(dir.path(), &input).unwrap();
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    let section = &report[report.find("## 8. Shadow checks").expect("a section")..];
    assert!(
        section.contains("| s1 | weather | 14 | 14/14 | 14 | 0 |"),
        "{section}"
    );
    assert!(
        section.contains("| s2 | booking | 6 | 0/6 | 6 | 6 |"),
        "{section}"
    );
    assert!(
        section.contains("1 of the 1 pairs whose routine answers the judge found below 50 %"),
        "{section}"
    );
    assert!(section.contains("and 0 of the 1 above 90 %"), "{section}");
    assert!(section.contains("The checks cost $0.0200"), "{section}");
    assert!(
        section.contains("| s1 | 14 | 0 | 14 | 14/14 |"),
        "{section}"
    );
    assert!(section.contains("| s2 | 6 | 6 | 6 | 0/6 |"), "{section}");

    let plain = agora_run();
    write_report(
        dir.path(),
        &ReportInput {
            name: "plain".to_owned(),
            agora: Some(&plain),
            nl_only: None,
            screenplay_counts: counts(),
        },
    )
    .unwrap();
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(!report.contains("Shadow checks"));
}

/// The prompt tokens read from the model's cache get a row once a run has them; the old runs'
/// reports (no cached counts) stay as they were.
#[test]
fn cached_prompt_tokens_get_a_row_when_a_run_has_them() {
    let label = "| of them read from the model's prompt cache |";
    let report = |agora: &RunRecord| {
        let dir = tempfile::tempdir().unwrap();
        let input = ReportInput {
            name: "cache".to_owned(),
            agora: Some(agora),
            nl_only: None,
            screenplay_counts: counts(),
        };
        write_report(dir.path(), &input).unwrap();
        std::fs::read_to_string(dir.path().join("report.md")).unwrap()
    };
    let mut agora = agora_run();
    assert!(!report(&agora).contains(label));
    agora.queries[0].llm.cached_prompt_tokens = 60;
    agora.queries[1].llm.cached_prompt_tokens = 15;
    agora.recompute_totals();
    let markdown = report(&agora);
    assert!(
        markdown.contains(&format!("{label} 75 | — |")),
        "{markdown}"
    );
}
