//! The goals the Agora mode is held to, read off the run records: the share of answers judged
//! correct, correctness and cost against NL-only (from the NL-only estimate of the whole
//! screenplay when there is one, else over the queries both runs have), and every (server,
//! task)'s routine answers. Then the pairs that hold the share correct back, most wrong answers
//! first, each with its most frequent reason, so that a report says where a goal is missed and
//! with which verdicts.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Result;
use serde::Serialize;

use super::{ReportSummary, fraction, percent, ratio_or_zero};
use crate::record::RunRecord;

/// Share of all queries the Agora mode answers correctly.
pub const CORRECT_SHARE: f64 = 0.80;
/// NL-only cost over Agora cost (the paper's $36.23 / $7.67, rounded).
pub const COST_RATIO: f64 = 4.7;
/// Agora's cost per correct answer over NL-only's, at most.
pub const COST_PER_CORRECT_VS_NL_ONLY: f64 = 0.20;
/// Share of a pair's routine-answered queries judged correct.
pub const ROUTINE_SHARE: f64 = 0.95;
/// Routine answers a pair needs before its routines are held to the LLM's share on the pair.
pub const ROUTINE_ANSWERS_COMPARED: usize = 10;
/// How far a pair's routines may fall below the NL-only LLM's share on the pair, at most.
pub const ROUTINE_BELOW_LLM: f64 = 0.10;
/// The late part of a run, for a pair's routines as they stand at its end: the last 30 %.
const LATE_FRACTION: f64 = 0.3;
/// Pairs listed as holding the share correct back.
const HELD_BACK_ROWS: usize = 10;

/// One (server, task)'s answers by the server's routines.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RoutinePair {
    /// The server.
    pub server: String,
    /// The task.
    pub task: String,
    /// Queries a routine of the server answered.
    pub answered: usize,
    /// Of those, judged correct.
    pub correct: usize,
    /// Routine-answered queries in the run's last 30 %.
    pub late_answered: usize,
    /// Of those, judged correct.
    pub late_correct: usize,
    /// The NL-only run's queries of this pair (all answered by the server's LLM), when there
    /// is an NL-only run.
    pub llm_answered: usize,
    /// Of those, judged correct.
    pub llm_correct: usize,
    /// The most frequent reason among the routines' answers not judged correct, digits masked.
    pub routine_reason: String,
}

impl RoutinePair {
    /// Whether its routines meet [`ROUTINE_SHARE`] over the whole run.
    pub fn meets_goal(&self) -> bool {
        self.correct as f64 >= ROUTINE_SHARE * self.answered as f64
    }

    /// Whether its routines, having answered at least [`ROUTINE_ANSWERS_COMPARED`] queries, are
    /// more than [`ROUTINE_BELOW_LLM`] below the NL-only LLM's share on the pair.
    pub fn below_the_llm(&self) -> bool {
        self.answered >= ROUTINE_ANSWERS_COMPARED
            && self.llm_answered > 0
            && ratio_or_zero(self.correct as f64, self.answered as f64) + ROUTINE_BELOW_LLM
                < ratio_or_zero(self.llm_correct as f64, self.llm_answered as f64)
    }
}

/// One (server, task) with answers that were not judged correct.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct HeldBack {
    /// The server.
    pub server: String,
    /// The task.
    pub task: String,
    /// Its queries in the run.
    pub queries: usize,
    /// Those not judged correct (wrong, failed or unjudged).
    pub not_correct: usize,
    /// Of those, answered by the server's LLM.
    pub by_llm: usize,
    /// Of those, answered by a routine of the server.
    pub by_routine: usize,
    /// The most frequent reason, digits masked as `#` so that one rule's verdicts group.
    pub reason: String,
    /// How many verdicts gave it.
    pub reason_count: usize,
}

/// The Agora run's routine answers and wrong answers per pair.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Goals {
    /// Pairs a server routine answered, most routine answers first.
    pub routines: Vec<RoutinePair>,
    /// Pairs with answers not judged correct, most first.
    pub held_back: Vec<HeldBack>,
}

/// Reads the goals' per-pair figures off an Agora run, and the NL-only run's LLM on the same
/// pairs when there is one.
pub(super) fn goals(agora: &RunRecord, nl_only: Option<&RunRecord>) -> Goals {
    let end = agora.queries.iter().map(|q| q.index + 1).max().unwrap_or(0);
    let late_from = (end as f64 * (1.0 - LATE_FRACTION)).floor() as usize;
    let mut routines: BTreeMap<(&str, &str), RoutinePair> = BTreeMap::new();
    let mut routine_reasons: BTreeMap<(&str, &str), BTreeMap<String, usize>> = BTreeMap::new();
    let mut held: BTreeMap<(&str, &str), Tallying> = BTreeMap::new();
    for q in &agora.queries {
        let key = (q.server.as_str(), q.task.as_str());
        let by_routine = q.answered_by.as_deref() == Some("routine");
        if by_routine {
            let pair = routines.entry(key).or_insert_with(|| RoutinePair {
                server: q.server.clone(),
                task: q.task.clone(),
                ..RoutinePair::default()
            });
            pair.answered += 1;
            pair.correct += usize::from(q.correct());
            if q.index >= late_from {
                pair.late_answered += 1;
                pair.late_correct += usize::from(q.correct());
            }
        }
        let Tallying { row, reasons } = held.entry(key).or_insert_with(|| Tallying {
            row: HeldBack {
                server: q.server.clone(),
                task: q.task.clone(),
                ..HeldBack::default()
            },
            reasons: BTreeMap::new(),
        });
        row.queries += 1;
        if q.correct() {
            continue;
        }
        row.not_correct += 1;
        row.by_routine += usize::from(by_routine);
        row.by_llm += usize::from(q.answered_by.as_deref() == Some("llm"));
        let reason = masked(
            q.verdict
                .as_ref()
                .and_then(|v| v.reason())
                .unwrap_or(q.verdict_word()),
        );
        if by_routine {
            *routine_reasons
                .entry(key)
                .or_default()
                .entry(reason.clone())
                .or_default() += 1;
        }
        *reasons.entry(reason).or_default() += 1;
    }
    for q in nl_only
        .map(|run| run.queries.as_slice())
        .unwrap_or_default()
    {
        if let Some(pair) = routines.get_mut(&(q.server.as_str(), q.task.as_str())) {
            pair.llm_answered += 1;
            pair.llm_correct += usize::from(q.correct());
        }
    }
    for (key, reasons) in routine_reasons {
        if let (Some(pair), Some((reason, _))) = (routines.get_mut(&key), most_frequent(reasons)) {
            pair.routine_reason = reason;
        }
    }
    let mut routines: Vec<RoutinePair> = routines.into_values().collect();
    routines.sort_by_key(|p| std::cmp::Reverse(p.answered));
    let mut held_back: Vec<HeldBack> = held
        .into_values()
        .filter(|tallying| tallying.row.not_correct > 0)
        .map(|Tallying { mut row, reasons }| {
            if let Some((reason, count)) = most_frequent(reasons) {
                row.reason = reason;
                row.reason_count = count;
            }
            row
        })
        .collect();
    held_back.sort_by_key(|row| std::cmp::Reverse(row.not_correct));
    Goals {
        routines,
        held_back,
    }
}

/// The most frequent reason and its count; among equals, the first in order.
fn most_frequent(reasons: BTreeMap<String, usize>) -> Option<(String, usize)> {
    reasons
        .into_iter()
        .max_by(|(a, m), (b, n)| m.cmp(n).then_with(|| b.cmp(a)))
}

/// A pair's row while its verdicts are counted, with every reason's count.
struct Tallying {
    row: HeldBack,
    reasons: BTreeMap<String, usize>,
}

/// A verdict's reason with its digits masked and its length bounded.
fn masked(reason: &str) -> String {
    reason
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .take(100)
        .collect()
}

fn met(yes: bool) -> &'static str {
    if yes { "yes" } else { "**no**" }
}

/// The goals table, the routines per pair, and the pairs holding the share correct back.
pub(super) fn section(md: &mut String, summary: &ReportSummary, goals: &Goals) -> Result<()> {
    let Some(agora) = &summary.agora else {
        return Ok(());
    };
    writeln!(
        md,
        "## Goals (Agora mode)\n\n| goal | ours | met |\n|---|---|---|\n| at least {} of \
         all queries judged correct | {} ({}/{}, measured) | {} |",
        percent(CORRECT_SHARE),
        percent(agora.correct_rate),
        agora.correct,
        agora.queries,
        met(agora.correct_rate >= CORRECT_SHARE),
    )?;
    let estimate = summary
        .nl_only_estimate
        .as_ref()
        .filter(|e| e.estimated_ratio_vs_agora.is_some());
    if let Some(estimate) = estimate {
        let queries = estimate.screenplay_queries.max(1) as f64;
        let nl_only = estimate.estimated_correct / queries;
        writeln!(
            md,
            "| correct at least as often as NL-only | {} against {} ± {} (ESTIMATE) | {} |",
            percent(agora.correct_rate),
            percent(nl_only),
            percent(estimate.correct_spread / queries),
            met(agora.correct_rate >= nl_only),
        )?;
    } else if let Some(ratio) = &summary.cost_ratio {
        writeln!(
            md,
            "| correct at least as often as NL-only | {} against {} over the {} queries both \
             ran (measured) | {} |",
            ratio.agora_correct,
            ratio.nl_only_correct,
            ratio.shared_queries,
            met(ratio.agora_correct >= ratio.nl_only_correct),
        )?;
    }
    let (cost_ratio, per_correct, figures) = match estimate {
        Some(estimate) => (
            estimate.estimated_ratio_vs_agora,
            estimate.agora_cost_per_correct_vs_nl_only,
            "ESTIMATE",
        ),
        None => match &summary.cost_ratio {
            Some(ratio) => {
                let per_correct =
                    |cost: f64, correct: usize| (correct > 0).then(|| cost / correct as f64);
                let relative = per_correct(ratio.agora_cost_usd, ratio.agora_correct)
                    .zip(per_correct(ratio.nl_only_cost_usd, ratio.nl_only_correct))
                    .map(|(agora, nl_only)| agora / nl_only);
                (ratio.ratio, relative, "measured over the queries both ran")
            }
            None => (None, None, ""),
        },
    };
    if let Some(ratio) = cost_ratio {
        writeln!(
            md,
            "| NL-only / Agora cost at least {COST_RATIO}× | {ratio:.2}× ({figures}) | {} |",
            met(ratio >= COST_RATIO),
        )?;
    }
    if let Some(relative) = per_correct {
        writeln!(
            md,
            "| Agora's cost per correct answer at most {COST_PER_CORRECT_VS_NL_ONLY:.2}× \
             NL-only's | {relative:.2}× ({figures}) | {} |",
            met(relative <= COST_PER_CORRECT_VS_NL_ONLY),
        )?;
    }
    let meeting = goals.routines.iter().filter(|p| p.meets_goal()).count();
    writeln!(
        md,
        "| every pair's routine answers at least {} correct | {meeting} of {} pairs \
         (measured) | {} |",
        percent(ROUTINE_SHARE),
        goals.routines.len(),
        met(meeting == goals.routines.len()),
    )?;
    let below: Vec<&RoutinePair> = goals
        .routines
        .iter()
        .filter(|p| p.below_the_llm())
        .collect();
    let compared = goals
        .routines
        .iter()
        .filter(|p| p.answered >= ROUTINE_ANSWERS_COMPARED && p.llm_answered > 0)
        .count();
    // With no pair to compare (no NL-only run, or none of its answers on such a pair) the goal
    // is unmeasured, not met.
    let (ours, verdict) = match compared {
        0 => (
            format!(
                "not measured: no pair with {ROUTINE_ANSWERS_COMPARED} routine answers has \
                 NL-only answers"
            ),
            "—".to_owned(),
        ),
        _ => (
            format!("{} of {compared} pairs below (measured)", below.len()),
            met(below.is_empty()).to_owned(),
        ),
    };
    writeln!(
        md,
        "| every pair's routines (with at least {ROUTINE_ANSWERS_COMPARED} answers) within {} of \
         the NL-only LLM's share on the pair | {ours} | {verdict} |\n",
        percent(ROUTINE_BELOW_LLM),
    )?;
    writeln!(
        md,
        "Answers by the servers' routines, per (server, task), over the whole run and over its \
         last {:.0} % (closer to the routines active at the end), beside the NL-only run's LLM on \
         the same pair:\n\n| server | task | correct / answered | share | last {:.0} % | at least \
         {} | NL-only LLM |\n|---|---|---|---|---|---|---|",
        LATE_FRACTION * 100.0,
        LATE_FRACTION * 100.0,
        percent(ROUTINE_SHARE),
    )?;
    for pair in &goals.routines {
        let late = fraction(pair.late_correct, pair.late_answered);
        writeln!(
            md,
            "| {} | {} | {}/{} | {} | {late} | {} | {} |",
            pair.server,
            pair.task,
            pair.correct,
            pair.answered,
            percent(ratio_or_zero(pair.correct as f64, pair.answered as f64)),
            met(pair.meets_goal()),
            fraction(pair.llm_correct, pair.llm_answered),
        )?;
    }
    if !below.is_empty() {
        writeln!(
            md,
            "\nThe pairs whose routines fall more than {} below the NL-only LLM's share, with \
             the routines' most frequent wrong reason (digits masked):\n",
            percent(ROUTINE_BELOW_LLM),
        )?;
        for pair in &below {
            writeln!(
                md,
                "- {} {}: routines {}/{}, NL-only LLM {}/{}: {}",
                pair.server,
                pair.task,
                pair.correct,
                pair.answered,
                pair.llm_correct,
                pair.llm_answered,
                pair.routine_reason,
            )?;
        }
    }
    writeln!(
        md,
        "\nThe pairs holding the share correct back, most answers not judged correct first \
         (by whom they were answered, and the most frequent reason, digits masked):\n\n| server \
         | task | not correct / queries | by the server's LLM | by its routine | most frequent \
         reason |\n|---|---|---|---|---|---|"
    )?;
    for row in goals.held_back.iter().take(HELD_BACK_ROWS) {
        writeln!(
            md,
            "| {} | {} | {}/{} | {} | {} | {}× {} |",
            row.server,
            row.task,
            row.not_correct,
            row.queries,
            row.by_llm,
            row.by_routine,
            row.reason_count,
            row.reason.replace('|', "\\|"),
        )?;
    }
    md.push('\n');
    Ok(())
}
