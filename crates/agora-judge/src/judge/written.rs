//! A reply held to what the query wrote to the server's database ([`Writes`]): a reply the
//! rules judged correct stays correct only if the database agrees with it.
//!
//! - A write task's success must have written exactly its row, right in every column the task
//!   names, and nothing else (an `UPDATE` of the screening for tickets).
//! - A write task's failure must have written nothing.
//! - Any other task must have written nothing.

use serde_json::Value;

use super::status;
use crate::Verdict;
use crate::writes::{TableRow, Writes};
pub(super) use crate::writes::{int, text};

/// The task types whose success is a write.
pub(super) const WRITE_TASKS: &[&str] = &["bookRoom", "rentSki", "bookTable", "buyTickets"];

/// How every verdict of these checks begins, so that a report can count the answers that only
/// the database showed to be wrong.
pub const BY_THE_DATABASE: &str = "by the database: ";

/// A wrong verdict of these checks.
pub(super) fn wrong(detail: String) -> Verdict {
    Verdict::Wrong(format!("{BY_THE_DATABASE}{detail}"))
}

/// At most this many rows are quoted in a verdict.
const QUOTED: usize = 3;

/// `rows` as text, the first [`QUOTED`] of them and how many more.
pub(super) fn quote<'a>(rows: impl Iterator<Item = &'a TableRow>) -> String {
    let rows: Vec<String> = rows.map(ToString::to_string).collect();
    let mut text = rows
        .iter()
        .take(QUOTED)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if rows.len() > QUOTED {
        text.push_str(&format!("; and {} more", rows.len() - QUOTED));
    }
    text
}

/// `column` of `row` is `want`, as text.
pub(super) fn is_text(row: &TableRow, column: &str, want: &str) -> Result<(), String> {
    match text(row.get(column)) {
        Some(got) if got == want => Ok(()),
        got => Err(format!("{column} is {}, not {want}", shown(got))),
    }
}

/// `column` of `row` is the whole number `want`.
pub(super) fn is_int(row: &TableRow, column: &str, want: i64) -> Result<(), String> {
    match int(row.get(column)) {
        Some(got) if got == want => Ok(()),
        _ => Err(format!(
            "{column} is {}, not {want}",
            shown(text(row.get(column)))
        )),
    }
}

fn shown(value: Option<String>) -> String {
    value.unwrap_or_else(|| "missing or null".into())
}

/// Any other task: a correct reply wrote nothing.
pub(super) fn nothing(task: &str, writes: &Writes) -> Verdict {
    wrote_nothing(&format!("a {task} writes nothing"), writes)
}

/// Correct if nothing was written; `expected` says why nothing should have been.
fn wrote_nothing(expected: &str, writes: &Writes) -> Verdict {
    if writes.is_empty() {
        Verdict::Correct
    } else {
        wrong(format!(
            "{expected}, but the database changed: {}",
            quote(writes.outside(None))
        ))
    }
}

/// A write task whose success adds one row to `table` (a `what`): the reply's `verdict`, held
/// to `writes` when they were observed; `row_ok` checks the row a success added.
pub(super) fn one_row(
    verdict: Verdict,
    output: &Value,
    writes: Option<&Writes>,
    table: &str,
    what: &str,
    row_ok: impl Fn(&TableRow) -> Result<(), String>,
) -> Verdict {
    let Some(writes) = writes else {
        return verdict;
    };
    if verdict != Verdict::Correct {
        return verdict;
    }
    if status(output) != Ok(true) {
        return failure_wrote_nothing(writes);
    }
    let added: Vec<&TableRow> = writes.added_to(table).collect();
    let row = match added.as_slice() {
        [] => {
            return wrong(format!(
                "the reply says success, but no {what} was written to {table}"
            ));
        }
        [row] => *row,
        rows => {
            return wrong(format!(
                "{} rows were added to {table} for one {what}: {}",
                rows.len(),
                quote(rows.iter().copied())
            ));
        }
    };
    if let Err(why) = row_ok(row) {
        return wrong(format!("the {what} written is wrong ({why}): {row}"));
    }
    let others: Vec<&TableRow> = writes
        .outside(Some(table))
        .chain(writes.removed.iter().filter(|r| r.is_in(table)))
        .collect();
    if others.is_empty() {
        Verdict::Correct
    } else {
        wrong(format!(
            "besides the {what}, the database changed: {}",
            quote(others.into_iter())
        ))
    }
}

/// A failure, held to `writes`: nothing may have been written.
pub(super) fn failure_wrote_nothing(writes: &Writes) -> Verdict {
    wrote_nothing("the reply says failure", writes)
}
