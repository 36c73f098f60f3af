//! The per-query moving averages: `curves.csv` and the SVG plots.

use super::*;

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

/// The per-query moving averages of both modes.
pub(super) struct Curves {
    agora_cost: Vec<f64>,
    nl_only_cost: Vec<f64>,
    agora_routine_share: Vec<f64>,
    agora_calls: Vec<f64>,
    nl_only_calls: Vec<f64>,
    agora_correct: Vec<f64>,
    nl_only_correct: Vec<f64>,
}

/// Plots written, as file names relative to the report.
pub(super) struct Plots {
    pub(super) cost: Option<&'static str>,
    pub(super) routine_share: Option<&'static str>,
    pub(super) calls: Option<&'static str>,
    pub(super) correct: Option<&'static str>,
}

impl Curves {
    pub(super) fn new(input: &ReportInput) -> Curves {
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

    pub(super) fn csv(&self) -> Result<String> {
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

    pub(super) fn plot(&self, dir: &Path) -> Result<Plots> {
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
pub(super) fn plot_curves(
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
