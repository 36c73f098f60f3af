//! `report.html`: the dashboard's charts over a run, readable offline.

use super::*;

/// How many queries one point of `report.html`'s charts sums up: about 20 points per run.
pub(super) fn html_bucket(queries: usize) -> usize {
    queries.div_ceil(20).max(1)
}

/// `report.html`: the dashboard's charts (requests by answering path, LLM cost, routine share,
/// here with the share judged correct) per run, over the screenplay, readable offline.
pub(super) fn html(input: &ReportInput, summary: &ReportSummary) -> Result<String> {
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
