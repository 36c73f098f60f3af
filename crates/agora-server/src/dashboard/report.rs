//! A self-contained HTML page with the dashboard's charts, readable offline: uPlot, the chart
//! code and the data are inlined. The network demo writes one beside its `report.md`.

use serde::Serialize;
use serde_json::json;

use super::{CHARTS_JS, UPLOT_CSS, UPLOT_JS, render};

/// The data behind the three charts, per x (see `assets/dashboard/charts.js`).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChartSeries {
    /// The x values: query numbers here (the dashboard uses Unix seconds).
    pub t: Vec<f64>,
    /// What the x values count, e.g. "query".
    pub x_label: String,
    /// Requests the LLM answered.
    pub llm: Vec<f64>,
    /// Requests a routine answered, with no LLM call.
    pub routine: Vec<f64>,
    /// Requests a routine failed and the LLM answered.
    pub fallback: Vec<f64>,
    /// Requests refused or failed.
    pub other: Vec<f64>,
    /// Their LLM cost, in USD.
    pub cost_usd: Vec<f64>,
    /// Percent answered by routines (`None` when nothing was answered).
    pub routine_share: Vec<Option<f64>>,
    /// Percent judged correct, when known.
    pub correct_share: Option<Vec<Option<f64>>>,
}

/// One block of the report: a heading, a few facts, and the charts of one series.
#[derive(Debug, Clone, Serialize)]
pub struct ReportSection {
    /// The heading.
    pub title: String,
    /// (label, value) lines shown above the charts.
    pub facts: Vec<(String, String)>,
    /// The charts' data.
    pub series: ChartSeries,
}

/// The page: `title`, a lead paragraph, and the sections.
pub fn standalone_html(
    title: &str,
    lead: &str,
    sections: &[ReportSection],
) -> Result<String, String> {
    let sections: Vec<_> = sections
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut series = serde_json::to_value(&s.series).unwrap_or_default();
            series["timeAxis"] = json!(false);
            json!({"id": i, "title": s.title, "facts": s.facts, "series": series})
        })
        .collect();
    render(
        "report.html",
        &json!({
            "title": title, "lead": lead, "sections": sections,
            "uplotJs": UPLOT_JS, "uplotCss": UPLOT_CSS, "chartsJs": CHARTS_JS,
        }),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_inlines_everything_it_needs() {
        let html = standalone_html(
            "A run <1>",
            "lead",
            &[ReportSection {
                title: "agora".into(),
                facts: vec![("correct".into(), "67 of 100".into())],
                series: ChartSeries {
                    t: vec![10.0, 20.0],
                    x_label: "query".into(),
                    llm: vec![8.0, 2.0],
                    routine: vec![2.0, 8.0],
                    fallback: vec![0.0, 0.0],
                    other: vec![0.0, 0.0],
                    cost_usd: vec![0.1, 0.02],
                    routine_share: vec![Some(20.0), Some(80.0)],
                    correct_share: None,
                },
            }],
        )
        .unwrap();
        assert!(html.contains("A run &lt;1&gt;"), "the title is escaped");
        assert!(html.contains("uPlot") && html.contains("agoraCharts"));
        assert!(
            !html.contains("src=\"/") && !html.contains("href=\"/"),
            "no server paths"
        );
        assert!(html.contains("67 of 100"), "the facts are shown");
        let data = html.split("id=\"series-0\">").nth(1).unwrap();
        assert!(
            data.contains("\"routineShare\": [20.0, 80.0]"),
            "{}",
            &data[..200]
        );
    }
}
