//! One example as a trace: its tool calls and its reply, every value written as the
//! expressions it could have been computed by.
//!
//! A value is rarely explained one way only: a reply's `"success"` may be a literal or the
//! `status` of an earlier result, a date may be the request's or a row's. So each value keeps
//! every explanation found ([`Traced`]), best first, and [`super::unify`] keeps the ones all
//! examples of a step share. The explanations are: a source value equal to it (a path into the
//! request or an earlier result), a string with source values inside (a template), a date some
//! days after a source date, a number scaled or shifted from a source number, a part of a source
//! string split at a separator, an array that is one member of every row of a result, and the
//! value itself as a literal.

use serde_json::Value;

use super::expr::{Expr, Path, Piece, Root, Seg};
use crate::programmer::exam::{RecordedCall, json_equivalent};

/// How deep inside a source value paths are followed.
const MAX_DEPTH: usize = 6;
/// How many elements of an array are followed.
const MAX_ELEMENTS: usize = 20;
/// Shortest string found inside another string (shorter ones match by accident).
const MIN_FRAGMENT_CHARS: usize = 3;
/// Paths kept per value: the same small number is often in many places.
const MAX_PATHS: usize = 6;
/// Source numbers tried for a number no source equals.
const MAX_NUMBER_SOURCES: usize = 12;
/// Days a derived date may lie from its source date.
const MAX_DAYS: i64 = 31;

/// A value with its explanations, member by member.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Traced {
    /// A scalar, or an empty object or array: its explanations, best first.
    Leaf(Vec<Expr>),
    /// An object: the explanations of the whole (paths to an equal object), and its members.
    Object(Vec<Expr>, Vec<(String, Traced)>),
    /// An array: the explanations of the whole (paths, rows of a result), and its elements.
    Array(Vec<Expr>, Vec<Traced>),
}

/// A named value the code can read: the request or an earlier call's result.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub(crate) root: Root,
    pub(crate) value: Value,
}

/// Every value inside the sources with its path, shallow paths first per source, sources in the
/// order given (the caller puts the preferred one first).
pub(crate) struct Sources {
    entries: Vec<(Path, Value)>,
    /// Strings and numbers long enough to look for inside a string, longest first.
    fragments: Vec<(String, Path)>,
    /// Numbers too short for `fragments` (a room 4), looked for only between non-digits.
    short_numbers: Vec<(String, Path)>,
    /// Date strings (`YYYY-MM-DD`) with their paths.
    dates: Vec<(jiff::civil::Date, Path)>,
}

impl Sources {
    pub(crate) fn of(sources: &[Source]) -> Self {
        let mut entries = Vec::new();
        for source in sources {
            let mut level = vec![(Path::root(source.root), &source.value)];
            for _ in 0..=MAX_DEPTH {
                let mut next = Vec::new();
                for (path, value) in level {
                    entries.push((path.clone(), value.clone()));
                    match value {
                        Value::Object(map) => {
                            for (key, child) in map {
                                next.push((path.child(Seg::Key(key.clone())), child));
                            }
                        }
                        Value::Array(items) => {
                            for (index, child) in items.iter().take(MAX_ELEMENTS).enumerate() {
                                next.push((path.child(Seg::Index(index)), child));
                            }
                        }
                        _ => {}
                    }
                }
                level = next;
            }
        }
        let mut fragments: Vec<(String, Path)> = Vec::new();
        let mut short_numbers: Vec<(String, Path)> = Vec::new();
        let mut dates = Vec::new();
        for (path, value) in &entries {
            let text = match value {
                Value::String(text) => text.clone(),
                Value::Number(number) => number.to_string(),
                _ => continue,
            };
            if let Some(date) = date_of(&text) {
                dates.push((date, path.clone()));
            }
            if text.chars().count() >= MIN_FRAGMENT_CHARS {
                if !fragments.iter().any(|(seen, _)| *seen == text) {
                    fragments.push((text, path.clone()));
                }
            } else if value.is_number() && !short_numbers.iter().any(|(seen, _)| *seen == text) {
                short_numbers.push((text, path.clone()));
            }
        }
        fragments.sort_by_key(|(text, _)| std::cmp::Reverse(text.chars().count()));
        Self {
            entries,
            fragments,
            short_numbers,
            dates,
        }
    }

    /// Paths to a source value equal to `value` (a whole source never stands for an object or
    /// array: a later request's extra members would be passed on).
    fn paths_to(&self, value: &Value) -> Vec<Path> {
        if !traceable(value) {
            return Vec::new();
        }
        let structured = value.is_object() || value.is_array();
        self.entries
            .iter()
            .filter(|(path, _)| !(structured && path.segs.is_empty()))
            .filter(|(_, candidate)| json_equivalent(candidate, value))
            .map(|(path, _)| path.clone())
            .take(MAX_PATHS)
            .collect()
    }
}

/// `value` with every explanation the sources give.
pub(crate) fn trace(value: &Value, sources: &Sources) -> Traced {
    let mut whole: Vec<Expr> = sources
        .paths_to(value)
        .into_iter()
        .map(Expr::Read)
        .collect();
    match value {
        Value::Object(map) if !map.is_empty() => {
            let members = map
                .iter()
                .map(|(key, child)| (key.clone(), trace(child, sources)))
                .collect();
            Traced::Object(whole, members)
        }
        Value::Array(items) => {
            whole.extend(rows(items, sources));
            if items.is_empty() {
                whole.insert(0, Expr::Literal(Value::Array(Vec::new())));
            }
            let elements = items.iter().map(|item| trace(item, sources)).collect();
            Traced::Array(whole, elements)
        }
        Value::String(text) => {
            whole.extend(parts(text, sources));
            whole.extend(shifted_dates(text, sources));
            whole.extend(templates(text, sources));
            whole.push(Expr::Literal(value.clone()));
            Traced::Leaf(whole)
        }
        Value::Number(number) => {
            if whole.is_empty()
                && let Some(n) = number.as_f64()
            {
                whole.extend(arithmetic(n, sources));
            }
            whole.push(Expr::Literal(value.clone()));
            Traced::Leaf(whole)
        }
        other => {
            whole.push(Expr::Literal(other.clone()));
            Traced::Leaf(whole)
        }
    }
}

/// A text that is not JSON: the source string equal to it, a template or the literal.
pub(crate) fn trace_text(text: &str, sources: &Sources) -> Traced {
    trace(&Value::String(text.to_string()), sources)
}

fn traceable(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(_) => false,
        Value::String(text) => !text.is_empty(),
        Value::Array(items) => !items.is_empty(),
        Value::Object(map) => !map.is_empty(),
        Value::Number(_) => true,
    }
}

/// An array that is one member (or the whole) of each row of a source array, in order; an
/// empty array may be the rows of any empty source array.
fn rows(items: &[Value], sources: &Sources) -> Vec<Expr> {
    let mut found = Vec::new();
    for (path, value) in &sources.entries {
        let Value::Array(rows) = value else { continue };
        if rows.len() != items.len() || rows.len() > MAX_ELEMENTS {
            continue;
        }
        if rows.is_empty() {
            found.push(Expr::AnyRows(path.clone()));
            continue;
        }
        if rows
            .iter()
            .zip(items)
            .all(|(row, item)| json_equivalent(row, item))
        {
            found.push(Expr::Rows(path.clone(), None));
        }
        let Some(Value::Object(first)) = rows.first() else {
            continue;
        };
        for key in first.keys() {
            let all = rows.iter().zip(items).all(|(row, item)| {
                row.get(key)
                    .is_some_and(|member| json_equivalent(member, item))
            });
            if all {
                found.push(Expr::Rows(path.clone(), Some(key.clone())));
            }
        }
    }
    found
}

/// `text` as a piece of a source string split at a separator (`"81 Jones Street"` →
/// `"Jones"`), trimmed or not.
fn parts(text: &str, sources: &Sources) -> Vec<Expr> {
    let mut found = Vec::new();
    for (path, value) in &sources.entries {
        let Value::String(whole) = value else {
            continue;
        };
        if whole.len() <= text.len() {
            continue;
        }
        for separator in [",", " ", "-", ":", "/"] {
            for (index, piece) in whole.split(separator).take(8).enumerate() {
                let trim = if piece == text {
                    false
                } else if piece.trim() == text {
                    true
                } else {
                    continue;
                };
                found.push(Expr::Part {
                    source: path.clone(),
                    separator: separator.to_string(),
                    index,
                    trim,
                });
            }
        }
        if found.len() >= MAX_PATHS {
            break;
        }
    }
    found
}

/// A date string as a source date some days before or after.
fn shifted_dates(text: &str, sources: &Sources) -> Vec<Expr> {
    let Some(date) = date_of(text) else {
        return Vec::new();
    };
    sources
        .dates
        .iter()
        .filter_map(|(source, path)| {
            let days = days_between(*source, date);
            (days != 0 && days.abs() <= MAX_DAYS).then(|| Expr::AddDays(path.clone(), days))
        })
        .take(MAX_PATHS)
        .collect()
}

/// A number as a source number times a factor, or plus an amount.
fn arithmetic(n: f64, sources: &Sources) -> Vec<Expr> {
    let mut found = Vec::new();
    let numbers = sources
        .entries
        .iter()
        .filter_map(|(path, value)| Some((path, value.as_f64()?)))
        .filter(|(_, value)| *value != 0.0)
        .take(MAX_NUMBER_SOURCES);
    for (path, source) in numbers {
        found.push(Expr::Scale(path.clone(), round(n / source)));
        found.push(Expr::Shift(path.clone(), round(n - source)));
    }
    found
}

/// `x` to 6 significant digits, so that factors computed from different examples compare equal.
pub(crate) fn round(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let digits = 6 - x.abs().log10().ceil() as i32;
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

/// `YYYY-MM-DD`, exactly.
pub(crate) fn date_of(text: &str) -> Option<jiff::civil::Date> {
    let bytes = text.as_bytes();
    let shaped = bytes.len() == 10
        && bytes.iter().enumerate().all(|(at, byte)| match at {
            4 | 7 => *byte == b'-',
            _ => byte.is_ascii_digit(),
        });
    shaped.then(|| text.parse().ok()).flatten()
}

/// Days from `from` to `to`.
fn days_between(from: jiff::civil::Date, to: jiff::civil::Date) -> i64 {
    to.duration_since(from).as_secs() / 86_400
}

/// `text` with the source values inside it, as templates: the source values matched longest
/// first, then any remaining date some days from a source date. Two orders of preference among
/// equal values (the request's first, the results' first), as the examples may agree on either.
fn templates(text: &str, sources: &Sources) -> Vec<Expr> {
    let mut found = Vec::new();
    // Short numbers are tried as a second reading: a `LIMIT 1` is seldom a source's 1.
    for with_short in [false, true] {
        if with_short && sources.short_numbers.is_empty() {
            continue;
        }
        for request_first in [true, false] {
            let mut fragments = sources.fragments.clone();
            if with_short {
                fragments.extend(sources.short_numbers.iter().cloned());
            }
            // Keep the longest-first order; among equal texts, the preferred root first.
            fragments.sort_by_key(|(fragment, path)| {
                let from_request = matches!(path.root, Root::Request | Root::Body);
                (
                    std::cmp::Reverse(fragment.chars().count()),
                    from_request != request_first,
                )
            });
            fragments.dedup_by(|a, b| a.0 == b.0);
            let pieces = substitute(text, &fragments, sources);
            // A string that is a source value as a whole is read as that path, not a template.
            let whole = matches!(pieces.as_slice(), [Piece::Read(_)]);
            if !whole && pieces.iter().any(|piece| !matches!(piece, Piece::Text(_))) {
                let template = Expr::Template(pieces);
                if !found.contains(&template) {
                    found.push(template);
                }
            }
        }
    }
    found
}

fn substitute(text: &str, fragments: &[(String, Path)], sources: &Sources) -> Vec<Piece> {
    let mut pieces = vec![Piece::Text(text.to_string())];
    for (fragment, path) in fragments {
        let mut next = Vec::new();
        for piece in pieces {
            let Piece::Text(piece) = piece else {
                next.push(piece);
                continue;
            };
            // A number matches only where no digit or point touches it (4 in `(4,` not `14`).
            let numeric = fragment.parse::<f64>().is_ok();
            let apart = |at: usize, end: usize| {
                let bytes = piece.as_bytes();
                let digit = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_digit);
                let before =
                    at > 0 && (digit(at - 1) || (bytes[at - 1] == b'.' && at > 1 && digit(at - 2)));
                let after = digit(end) || (bytes.get(end) == Some(&b'.') && digit(end + 1));
                !numeric || !(before || after)
            };
            let mut start = 0;
            let mut from = 0;
            while let Some(found) = piece[from..].find(fragment.as_str()) {
                let at = from + found;
                let end = at + fragment.len();
                if !apart(at, end) {
                    from = at + 1;
                    while !piece.is_char_boundary(from) {
                        from += 1;
                    }
                    continue;
                }
                if at > start {
                    next.push(Piece::Text(piece[start..at].to_string()));
                }
                next.push(Piece::Read(path.clone()));
                start = end;
                from = end;
            }
            if start < piece.len() {
                next.push(Piece::Text(piece[start..].to_string()));
            }
        }
        pieces = next;
    }
    // A date left in the text may be a source date shifted (an end date the day after).
    let mut dated = Vec::new();
    for piece in pieces {
        let Piece::Text(text) = piece else {
            dated.push(piece);
            continue;
        };
        dated.extend(dates_in(&text, sources));
    }
    dated
}

/// The pieces of `text` with each `YYYY-MM-DD` that lies within [`MAX_DAYS`] of a source date
/// written as that date shifted.
fn dates_in(text: &str, sources: &Sources) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    let mut at = 0;
    while at + 10 <= text.len() {
        let candidate = text.get(at..at + 10);
        let shifted = candidate.and_then(date_of).and_then(|date| {
            sources.dates.iter().find_map(|(source, path)| {
                let days = days_between(*source, date);
                (days != 0 && days.abs() <= MAX_DAYS).then(|| (path.clone(), days))
            })
        });
        let boundary = at == 0 || !bytes[at - 1].is_ascii_digit();
        match shifted {
            Some((path, days)) if boundary => {
                if at > start {
                    pieces.push(Piece::Text(text[start..at].to_string()));
                }
                pieces.push(Piece::AddDays(path, days));
                at += 10;
                start = at;
            }
            _ => at += 1,
        }
    }
    if start < text.len() {
        pieces.push(Piece::Text(text[start..].to_string()));
    }
    pieces
}

/// An example as the trace the compiler works on.
#[derive(Debug, Clone)]
pub(crate) struct Trace {
    /// Whether the request is JSON (read as `request`) or text (`body`).
    pub(crate) json_request: bool,
    pub(crate) steps: Vec<Step>,
    pub(crate) reply: Reply,
}

/// One tool call of a trace.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    pub(crate) tool: String,
    /// The tool and the shape of its arguments: calls of one signature are the same step.
    pub(crate) signature: String,
    pub(crate) arguments: Traced,
    /// The arguments as the example called with them.
    pub(crate) called_with: Value,
    pub(crate) result: Result<Value, String>,
}

/// What the example replied.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    /// The reply parsed, or a string for a text reply.
    pub(crate) value: Value,
    /// Whether it is a JSON object (then member by member) or anything else (as a whole).
    pub(crate) object: bool,
    pub(crate) traced: Traced,
}

impl Trace {
    /// The trace of an example's body, calls and reply.
    pub(crate) fn of(body: &str, calls: &[RecordedCall], reply: &str) -> Self {
        let (request, json_request) = match structured(body) {
            Some(parsed) => (parsed, true),
            None => (Value::String(body.to_string()), false),
        };
        let request_root = if json_request {
            Root::Request
        } else {
            Root::Body
        };
        let request_source = Source {
            root: request_root,
            value: request.clone(),
        };
        let mut results: Vec<Source> = Vec::new();
        let mut steps = Vec::new();
        for (index, call) in calls.iter().enumerate() {
            let mut sources = vec![request_source.clone()];
            sources.extend(results.iter().rev().cloned());
            let arguments = trace(&call.arguments, &Sources::of(&sources));
            steps.push(Step {
                tool: call.tool.clone(),
                signature: signature(&call.tool, &call.arguments),
                arguments,
                called_with: call.arguments.clone(),
                result: call.result.clone(),
            });
            if let Ok(result) = &call.result {
                results.push(Source {
                    root: Root::Step(index),
                    value: result.clone(),
                });
            }
        }
        let mut sources: Vec<Source> = results.into_iter().rev().collect();
        sources.push(request_source);
        let sources = Sources::of(&sources);
        let reply = match serde_json::from_str::<Value>(reply) {
            Ok(value @ Value::Object(_)) => Reply {
                traced: trace(&value, &sources),
                value,
                object: true,
            },
            Ok(value @ Value::Array(_)) => Reply {
                traced: trace(&value, &sources),
                value,
                object: false,
            },
            _ => {
                let text = reply.trim().to_string();
                Reply {
                    traced: trace_text(&text, &sources),
                    value: Value::String(text),
                    object: false,
                }
            }
        };
        Self {
            json_request,
            steps,
            reply,
        }
    }
}

/// A JSON object or array in `text`, or `None` for anything else.
fn structured(text: &str) -> Option<Value> {
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(|value| value.is_object() || value.is_array())
}

/// The tool and the shape of its arguments: their member names, and for a text argument its
/// first word and the table it names (`SELECT … FROM Skis` and `INSERT INTO SkiRentals` are
/// different steps; two SELECTs on `Skis` that differ in their condition are one).
fn signature(tool: &str, arguments: &Value) -> String {
    let mut parts = vec![tool.to_string()];
    if let Value::Object(map) = arguments {
        for (key, value) in map {
            parts.push(match value {
                Value::String(text) => format!("{key}={}", statement_shape(text)),
                _ => key.clone(),
            });
        }
    }
    parts.join(" ")
}

/// `SELECT:skis`, `INSERT:skirentals`; the first word alone for other text.
fn statement_shape(text: &str) -> String {
    let words: Vec<String> = text
        .split(|c: char| c.is_whitespace() || c == '(' || c == ',')
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect();
    let Some(first) = words.first() else {
        return String::new();
    };
    let verb = first.as_str();
    if !matches!(verb, "select" | "insert" | "update" | "delete") {
        return String::new();
    }
    let table = match verb {
        "update" => words.get(1),
        _ => words
            .iter()
            .position(|word| word == "from" || word == "into")
            .and_then(|at| words.get(at + 1)),
    };
    format!("{verb}:{}", table.map(String::as_str).unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sources(request: Value, results: &[Value]) -> Sources {
        let mut all = vec![Source {
            root: Root::Request,
            value: request,
        }];
        for (index, result) in results.iter().enumerate() {
            all.push(Source {
                root: Root::Step(index),
                value: result.clone(),
            });
        }
        Sources::of(&all)
    }

    fn leaf(traced: &Traced) -> &[Expr] {
        match traced {
            Traced::Leaf(alternatives) => alternatives,
            other => panic!("not a leaf: {other:?}"),
        }
    }

    #[test]
    fn a_value_keeps_every_explanation_with_the_literal_last() {
        let s = sources(
            json!({"date": "2024-02-26", "status": "success"}),
            &[json!({"status": "success"})],
        );
        let traced = trace(&json!("success"), &s);
        let alternatives = leaf(&traced);
        assert_eq!(alternatives.len(), 3, "{alternatives:?}");
        assert!(matches!(alternatives.last(), Some(Expr::Literal(_))));
        let next_day = trace(&json!("2024-02-27"), &s);
        assert!(leaf(&next_day).contains(&Expr::AddDays(
            Path::root(Root::Request).child(Seg::Key("date".into())),
            1
        )));
    }

    #[test]
    fn numbers_are_scaled_and_strings_split() {
        let s = sources(
            json!({"address": "81 Jones Street"}),
            &[json!({"fare": 30})],
        );
        let fare = Path::root(Root::Step(0)).child(Seg::Key("fare".into()));
        assert!(leaf(&trace(&json!(36), &s)).contains(&Expr::Scale(fare.clone(), 1.2)));
        assert!(leaf(&trace(&json!(43.2), &s)).contains(&Expr::Scale(fare, 1.44)));
        let street = trace(&json!("Jones"), &s);
        assert!(leaf(&street).iter().any(|e| matches!(
            e,
            Expr::Part { separator, index: 1, trim: false, .. } if separator == " "
        )));
    }

    #[test]
    fn a_statement_becomes_a_template_with_a_shifted_date() {
        let s = sources(
            json!({"date": "2024-06-23", "type": "racing"}),
            &[json!([{"SkiId": "A234"}])],
        );
        let statement = "INSERT INTO SkiRentals VALUES ('A234', '2024-06-23', '2024-06-24')";
        let traced = trace(&json!(statement), &s);
        let Some(Expr::Template(pieces)) = leaf(&traced).first() else {
            panic!("{traced:?}");
        };
        assert!(
            pieces.iter().any(|p| matches!(p, Piece::AddDays(_, 1))),
            "{pieces:?}"
        );
        assert_eq!(
            pieces
                .iter()
                .filter(|p| matches!(p, Piece::Read(_)))
                .count(),
            2
        );
    }

    #[test]
    fn rows_of_a_result_are_found() {
        let s = sources(
            json!({}),
            &[json!([{"Title": "Up"}, {"Title": "Heat"}]), json!([])],
        );
        let Traced::Array(whole, _) = trace(&json!(["Up", "Heat"]), &s) else {
            panic!()
        };
        assert!(whole.contains(&Expr::Rows(Path::root(Root::Step(0)), Some("Title".into()))));
        let Traced::Array(empty, _) = trace(&json!([]), &s) else {
            panic!()
        };
        assert!(empty.contains(&Expr::AnyRows(Path::root(Root::Step(1)))));
    }

    #[test]
    fn signatures_tell_statements_apart() {
        let select = json!({"query": "SELECT SkiId FROM Skis WHERE SkiType = 'racing'"});
        let other = json!({"query": "select * from skis limit 1"});
        let insert = json!({"query": "INSERT INTO SkiRentals (SkiId) VALUES ('A')"});
        assert_eq!(signature("q", &select), signature("q", &other));
        assert_ne!(signature("q", &select), signature("q", &insert));
        assert_ne!(signature("q", &select), signature("p", &select));
    }
}
