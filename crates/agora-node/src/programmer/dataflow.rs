//! Tracing a recorded example's values back to where they came from, written as JavaScript.
//!
//! A small model copies well and generalises badly: shown a request, two tool calls and a reply,
//! it invents calls and field names. So the programmer's prompt also shows each example as the
//! straight-line code that would have produced it: every argument of every tool call and every
//! part of the reply is written as the expression it equals (`request.time`, `r1.taxiId`, a
//! template string around `${request.date}`), or as a literal where nothing matched. The model
//! still writes the routine; the exam still decides.
//!
//! Pure code: values in, JavaScript text out.

use serde_json::Value;

use super::exam::RecordedCall;

/// How deep inside a source value paths are followed.
const MAX_DEPTH: usize = 6;
/// How many elements of an array are followed.
const MAX_ELEMENTS: usize = 20;
/// Shortest string found inside another string (shorter ones match by accident).
const MIN_SUBSTRING_CHARS: usize = 3;

/// A named value the code can read: `request`, `r1`, `data`, ...
#[derive(Debug, Clone)]
pub(crate) struct Source {
    name: String,
    value: Value,
}

impl Source {
    pub(crate) fn new(name: impl Into<String>, value: Value) -> Self {
        Self {
            name: name.into(),
            value,
        }
    }
}

/// Every value inside the sources with the expression that reads it, in the sources' order
/// (the caller puts the preferred source first), shallow paths before deep ones per source.
struct Paths {
    entries: Vec<(String, Value)>,
    roots: Vec<String>,
    /// Source strings and numbers long enough to look for inside a string, longest first, with
    /// the expression that reads each.
    fragments: Vec<(String, String)>,
}

impl Paths {
    fn of(sources: &[Source]) -> Self {
        let mut entries = Vec::new();
        for source in sources {
            let mut level = vec![(source.name.clone(), &source.value)];
            for _ in 0..=MAX_DEPTH {
                let mut next = Vec::new();
                for (path, value) in level {
                    entries.push((path.clone(), value.clone()));
                    match value {
                        Value::Object(map) => {
                            for (key, child) in map {
                                next.push((member(&path, key), child));
                            }
                        }
                        Value::Array(items) => {
                            for (index, child) in items.iter().take(MAX_ELEMENTS).enumerate() {
                                next.push((format!("{path}[{index}]"), child));
                            }
                        }
                        _ => {}
                    }
                }
                level = next;
            }
        }
        let roots = sources.iter().map(|source| source.name.clone()).collect();
        let fragments = fragments(&entries);
        Self {
            entries,
            roots,
            fragments,
        }
    }

    /// The expression of a source value equal to `value`. Nulls, booleans and empty values
    /// equal too many things by accident to be traced. A whole source is never the answer for
    /// an object or array (`callTool("t", request)` would pass on every field a later request
    /// adds): those are built member by member.
    fn find(&self, value: &Value) -> Option<&str> {
        if !traceable(value) {
            return None;
        }
        let structured = value.is_object() || value.is_array();
        self.entries
            .iter()
            .filter(|(path, _)| !(structured && self.roots.contains(path)))
            .find(|(_, candidate)| super::exam::json_equivalent(candidate, value))
            .map(|(path, _)| path.as_str())
    }
}

/// See [`Paths::fragments`].
fn fragments(entries: &[(String, Value)]) -> Vec<(String, String)> {
    let mut fragments: Vec<(String, String)> = Vec::new();
    for (path, value) in entries {
        let text = match value {
            Value::String(text) => text.clone(),
            Value::Number(number) => number.to_string(),
            _ => continue,
        };
        if text.chars().count() >= MIN_SUBSTRING_CHARS
            && !fragments.iter().any(|(seen, _)| *seen == text)
        {
            fragments.push((text, path.clone()));
        }
    }
    fragments.sort_by_key(|(text, _)| std::cmp::Reverse(text.chars().count()));
    fragments
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

/// `path.key`, or `path["key"]` where the key is not an identifier.
fn member(path: &str, key: &str) -> String {
    if is_identifier(key) {
        format!("{path}.{key}")
    } else {
        format!("{path}[{}]", Value::String(key.to_string()))
    }
}

/// Whether `key` can be written bare in JavaScript (`a.key`, `{ key: … }`).
pub(crate) fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// `key` as a JavaScript object literal's key: bare where it can be, else quoted.
pub(crate) fn object_key(key: &str) -> String {
    if is_identifier(key) {
        key.to_string()
    } else {
        Value::String(key.to_string()).to_string()
    }
}

/// The JavaScript expression that builds `value` from the sources.
pub(crate) fn expression(value: &Value, sources: &[Source]) -> String {
    build(value, &Paths::of(sources))
}

/// The expression for a text that is not JSON: a template string with the source values it
/// contains, or a string literal.
pub(crate) fn text_expression(text: &str, sources: &[Source]) -> String {
    let paths = Paths::of(sources);
    if let Some(path) = paths.find(&Value::String(text.to_string())) {
        return path.to_string();
    }
    string(text, &paths)
}

fn build(value: &Value, paths: &Paths) -> String {
    if let Some(path) = paths.find(value) {
        return path.to_string();
    }
    match value {
        Value::Object(map) => {
            if map.is_empty() {
                return "{}".to_string();
            }
            let members: Vec<String> = map
                .iter()
                .map(|(key, child)| format!("{}: {}", object_key(key), build(child, paths)))
                .collect();
            format!("{{ {} }}", members.join(", "))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|item| build(item, paths)).collect();
            format!("[{}]", items.join(", "))
        }
        Value::String(text) => string(text, paths),
        other => other.to_string(),
    }
}

/// A string with source values inside becomes a template string; otherwise a literal.
fn string(text: &str, paths: &Paths) -> String {
    let mut pieces: Vec<(String, bool)> = vec![(text.to_string(), false)];
    for (fragment, path) in &paths.fragments {
        let mut next = Vec::new();
        for (piece, traced) in pieces {
            if traced || !piece.contains(fragment.as_str()) {
                next.push((piece, traced));
                continue;
            }
            let mut rest = piece.as_str();
            while let Some(at) = rest.find(fragment.as_str()) {
                if at > 0 {
                    next.push((rest[..at].to_string(), false));
                }
                next.push((path.to_string(), true));
                rest = &rest[at + fragment.len()..];
            }
            if !rest.is_empty() {
                next.push((rest.to_string(), false));
            }
        }
        pieces = next;
    }
    if !pieces.iter().any(|(_, traced)| *traced) {
        return Value::String(text.to_string()).to_string();
    }
    let mut template = String::from("`");
    for (piece, traced) in pieces {
        if traced {
            template.push_str(&format!("${{{piece}}}"));
        } else {
            template.push_str(
                &piece
                    .replace('\\', "\\\\")
                    .replace('`', "\\`")
                    .replace("${", "\\${"),
            );
        }
    }
    template.push('`');
    template
}

/// A JSON object or array in `text`, or `None` for anything else (prose, a bare string).
fn structured(text: &str) -> Option<Value> {
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(|value| value.is_object() || value.is_array())
}

/// A receiver example as the routine that would have produced it, or `None` when one of its
/// tool calls failed (the code that recovers from a failure cannot be read off the recording).
pub(crate) fn receiver_draft(body: &str, calls: &[RecordedCall], reply: &str) -> Option<String> {
    let mut code = String::from("function handle(body) {\n");
    let request = match structured(body) {
        Some(parsed) => {
            code.push_str("  const request = JSON.parse(body);\n");
            Source::new("request", parsed)
        }
        None => Source::new("body", Value::String(body.to_string())),
    };
    let mut results: Vec<Source> = Vec::new();
    for (index, call) in calls.iter().enumerate() {
        let result = call.result.as_ref().ok()?;
        let mut sources = vec![request.clone()];
        sources.extend(results.iter().rev().cloned());
        code.push_str(&format!(
            "  const r{} = callTool({}, {});\n",
            index + 1,
            Value::String(call.tool.clone()),
            expression(&call.arguments, &sources)
        ));
        results.push(Source::new(format!("r{}", index + 1), result.clone()));
    }
    let mut sources: Vec<Source> = results.into_iter().rev().collect();
    sources.push(request);
    let value = match structured(reply) {
        Some(parsed) => expression(&parsed, &sources),
        None => text_expression(reply.trim(), &sources),
    };
    code.push_str(&format!("  return {value};\n}}"));
    Some(code)
}

/// A sender example as the routine that would have produced it: `data` to the body sent, the
/// reply received to the output.
pub(crate) fn sender_draft(data: &Value, body: &str, reply: &str, output: &Value) -> String {
    let data_source = [Source::new("data", data.clone())];
    let body = match structured(body) {
        Some(parsed) => expression(&parsed, &data_source),
        None => text_expression(body.trim(), &data_source),
    };
    let mut code = format!(
        "function handle(input) {{\n  const request = JSON.parse(input);\n  if (request.op === \"encode\") {{\n    const data = request.data;\n    return {body};\n  }}\n"
    );
    let reply_source = match structured(reply) {
        Some(parsed) => {
            code.push_str("  const reply = JSON.parse(request.reply);\n");
            Source::new("reply", parsed)
        }
        None => Source::new("request.reply", Value::String(reply.trim().to_string())),
    };
    code.push_str(&format!(
        "  return {};\n}}",
        expression(output, &[reply_source])
    ));
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_traced_to_the_request_and_earlier_results() {
        let sources = [
            Source::new(
                "request",
                json!({"address": "31 Johnson Street", "time": "18:46"}),
            ),
            Source::new("r1", json!({"taxiId": "KAYN86"})),
        ];
        let arguments =
            json!({"taxiId": "KAYN86", "address": "31 Johnson Street", "time": "18:46"});
        assert_eq!(
            expression(&arguments, &sources),
            "{ taxiId: r1.taxiId, address: request.address, time: request.time }"
        );
    }

    #[test]
    fn untraced_values_stay_literals_and_the_first_source_wins() {
        let sources = [
            Source::new("r2", json!({"status": "success"})),
            Source::new("request", json!({"status": "success", "n": 3})),
        ];
        let reply = json!({"status": "success", "price": 30, "ok": true, "none": null});
        assert_eq!(
            expression(&reply, &sources),
            "{ status: r2.status, price: 30, ok: true, none: null }"
        );
    }

    #[test]
    fn strings_with_source_values_inside_become_templates() {
        let sources = [Source::new(
            "request",
            json!({"date": "2024-07-25", "room type": "suite"}),
        )];
        let query = json!({"query": "SELECT * FROM Bookings WHERE date = '2024-07-25' AND `x`"});
        assert_eq!(
            expression(&query, &sources),
            "{ query: `SELECT * FROM Bookings WHERE date = '${request.date}' AND \\`x\\`` }"
        );
        assert_eq!(
            text_expression("A suite on 2024-07-25.", &sources),
            "`A ${request[\"room type\"]} on ${request.date}.`"
        );
        assert_eq!(text_expression("no", &sources), "\"no\"");
    }

    #[test]
    fn whole_objects_and_array_elements_are_found() {
        let sources = [Source::new(
            "r1",
            json!({"rows": [{"name": "Ada", "id": 7}, {"name": "Bob", "id": 8}]}),
        )];
        assert_eq!(
            expression(
                &json!({"first": {"name": "Ada", "id": 7}, "second": "Bob"}),
                &sources
            ),
            "{ first: r1.rows[0], second: r1.rows[1].name }"
        );
    }

    #[test]
    fn a_receiver_example_reads_as_straight_line_code() {
        let calls = super::super::exam::recorded_calls(&json!([
            {"tool": "getAvailableTaxi", "arguments": {"time": "18:46"}, "result": {"taxiId": "KAYN86"}},
            {"tool": "assignTaxi", "arguments": {"taxiId": "KAYN86", "address": "31 Johnson Street", "time": "18:46"}, "result": {"status": "success"}}
        ]));
        let draft = receiver_draft(
            r#"{"address": "31 Johnson Street", "time": "18:46"}"#,
            &calls,
            r#"{"status":"success","price":30}"#,
        );
        assert_eq!(
            draft.as_deref(),
            Some(
                "function handle(body) {\n  const request = JSON.parse(body);\n  \
                 const r1 = callTool(\"getAvailableTaxi\", { time: request.time });\n  \
                 const r2 = callTool(\"assignTaxi\", { taxiId: r1.taxiId, address: request.address, time: request.time });\n  \
                 return { status: r2.status, price: 30 };\n}"
            )
        );
        let failed = super::super::exam::recorded_calls(&json!([
            {"tool": "run_sql_query", "arguments": {"query": "SELECT 1"}, "error": "no"}
        ]));
        assert_eq!(receiver_draft("{}", &failed, "sorry"), None);
        let prose = receiver_draft("Weather in Oslo?", &[], "Sunny in Oslo");
        assert_eq!(
            prose.as_deref(),
            Some("function handle(body) {\n  return \"Sunny in Oslo\";\n}")
        );
    }

    #[test]
    fn a_sender_example_reads_as_encode_and_decode() {
        let draft = sender_draft(
            &json!({"date": "2024-07-25"}),
            "{\n  \"date\": \"2024-07-25\"\n}",
            "no",
            &json!({"isOpen": "no"}),
        );
        assert_eq!(
            draft,
            "function handle(input) {\n  const request = JSON.parse(input);\n  \
             if (request.op === \"encode\") {\n    const data = request.data;\n    \
             return { date: data.date };\n  }\n  return { isOpen: request.reply };\n}"
        );
        let json_reply = sender_draft(
            &json!({"city": "Oslo"}),
            r#"{"location": "Oslo"}"#,
            r#"{"temperature": 4, "sky": "grey"}"#,
            &json!({"temp": 4}),
        );
        assert!(
            json_reply.contains(
                "const reply = JSON.parse(request.reply);\n  return { temp: reply.temperature };"
            ),
            "{json_reply}"
        );
    }
}
