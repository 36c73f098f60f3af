//! `per_query.csv`: one row per query and mode.

use super::*;

pub(super) fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_owned()
    }
}

pub(super) fn per_query_csv(input: &ReportInput) -> Result<String> {
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
