//! Examining a candidate routine against the recorded examples before it may serve anyone.
//!
//! Each example is replayed on a fresh instance of the candidate. Its tool calls are answered
//! from the recording ([`RecordedTools`]): a call to the same tool with equivalent arguments gets
//! the recorded result; any other call fails the example with a message naming what was
//! recorded. The reply passes when it equals the recorded reply as JSON (key order, whitespace
//! and `1` versus `1.0` ignored). Where the protocol document declares a JSON Schema for its
//! reply, a reply valid against it that carries the same tool-derived values (the recorded
//! reply's values that came from a tool result) passes too, so wording a free-text field
//! differently from the LLM is not a failure. Without a schema, a JSON reply passes when it has
//! the recorded members with the recorded values, except that a member holding a sentence (four
//! words or more) may hold any other non-empty text: the LLM's wording of a message is not part
//! of the protocol, its status and data are.
//!
//! The examination also forgives what the model's own replies vary in from one request to the
//! next ([`Grading::Lenient`]): an empty member that one example has and another has not
//! (`"error": ""`), and a two- or three-word text worded differently but keeping its words. A
//! tool call whose arguments differ is not forgiven: no grading of the reply can.

use std::sync::{Arc, Mutex};

use agora_store::Example;
use serde_json::Value;

use crate::routines::{LoadedRoutine, RoutineLimits, ToolHost};

/// One recorded tool call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecordedCall {
    pub(crate) tool: String,
    pub(crate) arguments: Value,
    pub(crate) result: Result<Value, String>,
}

/// The calls recorded with an example (entries that are not call objects are skipped).
pub(crate) fn recorded_calls(tool_calls: &Value) -> Vec<RecordedCall> {
    let Some(calls) = tool_calls.as_array() else {
        return Vec::new();
    };
    calls
        .iter()
        .filter_map(|call| {
            let tool = call.get("tool")?.as_str()?.to_string();
            let arguments = call.get("arguments").cloned().unwrap_or(Value::Null);
            let result = match call.get("error") {
                Some(error) => Err(error.as_str().unwrap_or_default().to_string()),
                None => Ok(call.get("result").cloned().unwrap_or(Value::Null)),
            };
            Some(RecordedCall {
                tool,
                arguments,
                result,
            })
        })
        .collect()
}

/// Answers a candidate's tool calls from one example's recording.
pub(crate) struct RecordedTools {
    calls: Vec<RecordedCall>,
    unexpected: Mutex<Vec<String>>,
}

impl RecordedTools {
    pub(crate) fn new(calls: Vec<RecordedCall>) -> Self {
        Self {
            calls,
            unexpected: Mutex::new(Vec::new()),
        }
    }

    fn unexpected(&self) -> Vec<String> {
        self.unexpected
            .lock()
            .map(|calls| calls.clone())
            .unwrap_or_default()
    }

    fn listing(&self) -> String {
        if self.calls.is_empty() {
            return "none".to_string();
        }
        self.calls
            .iter()
            .map(|call| format!("{}({})", call.tool, call.arguments))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[async_trait::async_trait]
impl ToolHost for RecordedTools {
    async fn call_tool(&self, name: &str, arguments: &str) -> Result<String, String> {
        let parsed: Option<Value> = serde_json::from_str(arguments).ok();
        let found = parsed.as_ref().and_then(|arguments| {
            self.calls
                .iter()
                .find(|call| call.tool == name && arguments_equivalent(&call.arguments, arguments))
        });
        if let Some(call) = found {
            return match &call.result {
                Ok(value) => Ok(value.to_string()),
                Err(error) => Err(error.clone()),
            };
        }
        let message = format!(
            "unexpected tool call {name}({arguments}); the recorded calls were: {}",
            self.listing()
        );
        if let Ok(mut unexpected) = self.unexpected.lock() {
            unexpected.push(message.clone());
        }
        Err(message)
    }
}

/// Equality of tool arguments: [`json_equivalent`], with strings compared up to white space
/// (`SkiType='racing'` and `SkiType = 'racing'`, a line break in a long query) and the kind of
/// quote, so that a routine's query that differs from the recording only in layout is answered.
pub(crate) fn arguments_equivalent(recorded: &Value, called: &Value) -> bool {
    equivalent(recorded, called, |x, y| {
        x == y || layout_free(x) == layout_free(y)
    })
}

/// `text` without white space, with `"` for every `'`, and without a final `;`.
fn layout_free(text: &str) -> String {
    text.trim()
        .trim_end_matches(';')
        .chars()
        .filter(|c| !c.is_whitespace())
        .map(|c| if c == '\'' { '"' } else { c })
        .collect()
}

/// Equality of JSON values ignoring key order and the spelling of numbers.
pub(crate) fn json_equivalent(a: &Value, b: &Value) -> bool {
    equivalent(a, b, |x, y| x == y)
}

/// Equality of JSON values ignoring key order and the spelling of numbers, with strings
/// compared by `same_text`.
fn equivalent(a: &Value, b: &Value, same_text: fn(&str, &str) -> bool) -> bool {
    match (a, b) {
        (Value::String(x), Value::String(y)) => same_text(x, y),
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| equivalent(x, y, same_text))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, x)| y.get(key).is_some_and(|y| equivalent(x, y, same_text)))
        }
        _ => a == b,
    }
}

/// How one example went.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExampleResult {
    /// The request body.
    pub(crate) body: String,
    /// The recorded reply.
    pub(crate) expected: String,
    /// The recorded tool calls, as the candidate saw them answered.
    pub(crate) calls: String,
    /// What the candidate returned, or its error.
    pub(crate) got: Result<String, String>,
    /// Why it failed; `None` when it passed.
    pub(crate) failure: Option<String>,
}

/// How a candidate did on every example.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ExamReport {
    pub(crate) results: Vec<ExampleResult>,
}

impl ExamReport {
    pub(crate) fn passed(&self) -> bool {
        !self.results.is_empty() && self.results.iter().all(|r| r.failure.is_none())
    }

    fn first_failure(&self) -> Option<(usize, &ExampleResult)> {
        self.results
            .iter()
            .enumerate()
            .find(|(_, r)| r.failure.is_some())
    }

    /// How many examples passed.
    pub(crate) fn passed_count(&self) -> usize {
        self.results.iter().filter(|r| r.failure.is_none()).count()
    }

    /// The first error reply the candidate gave to an example whose recorded reply was no error:
    /// it rejected a valid request.
    pub(crate) fn rejected_valid_request(&self) -> Option<Value> {
        self.results
            .iter()
            .filter(|result| result.failure.is_some())
            .filter_map(|result| {
                let reply = result.got.as_ref().ok()?;
                (reply_is_error(reply) && !reply_is_error(&result.expected))
                    .then(|| serde_json::from_str(reply).ok())
                    .flatten()
            })
            .next()
    }

    /// One paragraph for people: how many passed, and the first failure.
    pub(crate) fn summary(&self) -> String {
        let mut text = format!(
            "{}/{} examples passed",
            self.passed_count(),
            self.results.len()
        );
        if let Some((index, result)) = self.first_failure() {
            text.push_str(&format!(
                "; example {} failed: {}",
                index + 1,
                result.failure.as_deref().unwrap_or_default()
            ));
        }
        text
    }

    /// What the LLM is told about the first failure, to repair it.
    pub(crate) fn feedback(&self) -> String {
        let Some((_, result)) = self.first_failure() else {
            return "All examples passed.".to_string();
        };
        let got = match &result.got {
            Ok(reply) if reply_is_error(reply) && !reply_is_error(&result.expected) => format!(
                "Your handle returned: {reply}\nThat is an error reply, but this request is valid: \
                 remove the check that produced it."
            ),
            Ok(reply) => format!("Your handle returned: {reply}"),
            Err(error) => format!("Your handle failed: {error}"),
        };
        format!(
            "Your code gave a wrong result.\nRequest body: {}\n{}Expected reply: {}\n{got}\n\
             Problem: {}",
            result.body,
            result.calls,
            result.expected,
            result.failure.as_deref().unwrap_or_default()
        )
    }
}

/// Whether a reply is a JSON object with an `error` member (the common error shape of PDs).
fn reply_is_error(reply: &str) -> bool {
    serde_json::from_str::<Value>(reply)
        .ok()
        .is_some_and(|value| value.get("error").is_some())
}

/// Replays every example on `routine`.
pub(crate) async fn examine(
    routine: &dyn LoadedRoutine,
    examples: &[Example],
    reply_schema: Option<&jsonschema::Validator>,
    limits: RoutineLimits,
) -> ExamReport {
    let mut report = ExamReport::default();
    for example in examples {
        let calls = recorded_calls(&example.tool_calls);
        let tools = Arc::new(RecordedTools::new(calls.clone()));
        let host: Arc<dyn ToolHost> = tools.clone();
        let run = routine.run(&example.body, host, limits);
        let got = match tokio::time::timeout(limits.timeout + limits.timeout, run).await {
            Ok(result) => result.map_err(|error| error.to_string()),
            Err(_) => Err(format!("timed out after {:?}", limits.timeout)),
        };
        let unexpected = tools.unexpected();
        let failure = if let Some(call) = unexpected.first() {
            Some(call.clone())
        } else {
            match &got {
                Ok(reply) => grade(&example.reply, reply, &calls, reply_schema).err(),
                Err(error) => Some(format!("the routine failed: {error}")),
            }
        };
        let listing: String = calls
            .iter()
            .map(|call| match &call.result {
                Ok(value) => format!(
                    "callTool(\"{}\", {}) returned {value}\n",
                    call.tool, call.arguments
                ),
                Err(error) => format!(
                    "callTool(\"{}\", {}) failed: {error}\n",
                    call.tool, call.arguments
                ),
            })
            .collect();
        report.results.push(ExampleResult {
            body: example.body.clone(),
            expected: example.reply.clone(),
            calls: listing,
            got,
            failure,
        });
    }
    report
}

/// How closely a reply must follow the recorded one, beyond key order, layout and the spelling
/// of numbers. Where the protocol document declares a reply schema, tool-derived values are what
/// is compared either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grading {
    /// The recorded members with the recorded values; a text of four words or more may be
    /// worded differently (a sender routine's output against its example's).
    Recorded,
    /// As `Recorded`, and: a member holding `""` or `null` is the same as no member, and a text
    /// of two or three words may be worded differently as long as it keeps every one of those
    /// words ("Table already booked" and "The table is already booked."). The model's own
    /// replies differ in exactly these ways from one request to the next (a candidate routine
    /// against the examples).
    Lenient,
}

/// Whether `got` is an acceptable reply where `expected` was recorded ([`Grading::Lenient`]).
pub(crate) fn grade(
    expected: &str,
    got: &str,
    calls: &[RecordedCall],
    reply_schema: Option<&jsonschema::Validator>,
) -> Result<(), String> {
    grade_as(expected, got, calls, reply_schema, Grading::Lenient)
}

fn grade_as(
    expected: &str,
    got: &str,
    calls: &[RecordedCall],
    reply_schema: Option<&jsonschema::Validator>,
    grading: Grading,
) -> Result<(), String> {
    let (Ok(expected_json), Ok(got_json)) = (
        serde_json::from_str::<Value>(expected),
        serde_json::from_str::<Value>(got),
    ) else {
        return if expected.trim() == got.trim() {
            Ok(())
        } else {
            Err(format!("expected {expected:?}, got {got:?}"))
        };
    };
    if json_equivalent(&expected_json, &got_json) {
        return Ok(());
    }
    let differences = differences(&expected_json, &got_json);
    if let Some(schema) = reply_schema {
        if let Some(error) = schema.iter_errors(&got_json).next() {
            return Err(format!(
                "the reply does not match the protocol's reply schema: {error} ({differences})"
            ));
        }
        let missed = tool_values_missed(&expected_json, &got_json, calls);
        if missed.is_empty() {
            return Ok(());
        }
        return Err(format!(
            "values taken from tool results differ: {}",
            missed.join("; ")
        ));
    }
    // Without a schema the recorded reply is the schema: the same members, the same values,
    // except that a sentence written for people may be worded differently.
    let mut found = Vec::new();
    collect_differences("", &expected_json, &got_json, Some(grading), &mut found);
    if found.is_empty() {
        return Ok(());
    }
    found.truncate(5);
    Err(found.join("; "))
}

/// Whether `got` has `expected`'s members with its values, a sentence inside an object excepted
/// (it may be any non-empty text).
pub(crate) fn same_but_wording(expected: &Value, got: &Value) -> bool {
    let mut found = Vec::new();
    collect_differences("", expected, got, Some(Grading::Recorded), &mut found);
    found.is_empty()
}

/// Whether `got` is an acceptable rewording of the recorded text `expected`: any non-empty text
/// for a sentence written for people (four words or more); under [`Grading::Lenient`] also, for
/// a text of two or three words, any text that has each of its words (case and punctuation
/// aside), so that "Table already booked" may be "The table is already booked." but not "Table
/// booked".
fn reworded(grading: Grading, expected: &Value, got: &Value) -> bool {
    let (Some(recorded), Some(text)) = (expected.as_str(), got.as_str()) else {
        return false;
    };
    if text.trim().is_empty() {
        return false;
    }
    if recorded.split_whitespace().count() >= PROSE_WORDS {
        return true;
    }
    let recorded_words = words(recorded);
    grading == Grading::Lenient && recorded_words.len() >= 2 && {
        let got_words = words(text);
        recorded_words.iter().all(|word| got_words.contains(word))
    }
}

/// `text`'s words, lower-cased, without the punctuation around them.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|word| {
            word.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|word| !word.is_empty())
        .collect()
}

/// Words from which a recorded string counts as prose (see [`reworded`]).
const PROSE_WORDS: usize = 4;

/// `""` or `null`: under [`Grading::Lenient`], the same as a member that is not there.
fn is_empty_member(value: &Value) -> bool {
    value.is_null() || value.as_str().is_some_and(|text| text.trim().is_empty())
}

/// Where two JSON values differ, in words (at most a few places).
fn differences(expected: &Value, got: &Value) -> String {
    let mut found = Vec::new();
    collect_differences("", expected, got, None, &mut found);
    if found.is_empty() {
        return "the replies differ".to_string();
    }
    found.truncate(5);
    found.join("; ")
}

/// Where `got` differs from `expected`; with a `grading`, a recorded text inside an object may
/// be [`reworded`], and under [`Grading::Lenient`] an empty member matches a missing one.
fn collect_differences(
    path: &str,
    expected: &Value,
    got: &Value,
    grading: Option<Grading>,
    found: &mut Vec<String>,
) {
    let here = if path.is_empty() { "the reply" } else { path };
    let lenient = grading == Some(Grading::Lenient);
    match (expected, got) {
        _ if !path.is_empty() && grading.is_some_and(|g| reworded(g, expected, got)) => {}
        _ if lenient && is_empty_member(expected) && is_empty_member(got) => {}
        (Value::Object(x), Value::Object(y)) => {
            for (key, x_value) in x {
                let child = format!("{path}.{key}");
                match y.get(key) {
                    Some(y_value) => collect_differences(&child, x_value, y_value, grading, found),
                    None if lenient && is_empty_member(x_value) => {}
                    None => found.push(format!("{child} is missing (expected {x_value})")),
                }
            }
            for (key, y_value) in y.iter().filter(|(key, _)| !x.contains_key(*key)) {
                if !(lenient && is_empty_member(y_value)) {
                    found.push(format!("{path}.{key} should not be there"));
                }
            }
        }
        _ if json_equivalent(expected, got) => {}
        _ => found.push(format!("{here} should be {expected}, not {got}")),
    }
}

/// The recorded reply's leaves that equal a leaf of a tool result, and that `got` does not carry
/// at the same place.
fn tool_values_missed(expected: &Value, got: &Value, calls: &[RecordedCall]) -> Vec<String> {
    let mut tool_leaves = Vec::new();
    for call in calls {
        if let Ok(result) = &call.result {
            leaves("", result, &mut tool_leaves);
        }
    }
    let mut expected_leaves = Vec::new();
    leaves("", expected, &mut expected_leaves);
    expected_leaves
        .into_iter()
        .filter(|(_, value)| {
            matches!(value, Value::Number(_) | Value::String(_))
                && tool_leaves
                    .iter()
                    .any(|(_, tool)| json_equivalent(tool, value))
        })
        .filter(|(path, value)| {
            !pointer(got, path).is_some_and(|found| json_equivalent(found, value))
        })
        .map(|(path, value)| format!("{path} should be {value}"))
        .collect()
}

fn leaves(path: &str, value: &Value, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                leaves(&format!("{path}/{key}"), child, out);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                leaves(&format!("{path}/{index}"), child, out);
            }
        }
        leaf => out.push((path.to_string(), leaf.clone())),
    }
}

fn pointer<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    if path.is_empty() {
        Some(value)
    } else {
        value.pointer(path)
    }
}

/// A value the candidate `source` writes as a literal although an example's reply took it from
/// a tool result (and neither the request nor the protocol document has it): a routine that
/// returns a constant where the data came from a tool passes examples whose tool always said the
/// same, and is wrong on the next. Returns what the model is told. Small integers (|n| <= 2) are
/// left out: they are indexes and counts in any code.
pub(crate) fn hard_coded(source: &str, examples: &[Example], document: &str) -> Option<String> {
    // A comment writes nothing, nor does a message of the compiler's `uncovered`: they say which
    // examples a step came from ("examples 1-3", "step 3"), and a request's 3 people is not
    // written by them. Numbers in other strings are (an hour in an SQL text).
    let code = Code {
        strings: without_comments(source, false),
        numbers: without_comments(source, true),
    };
    if let Some(problem) = request_value_written(&code, examples, document) {
        return Some(problem);
    }
    let document = document.to_lowercase();
    for (index, example) in examples.iter().enumerate() {
        let Ok(reply) = serde_json::from_str::<Value>(&example.reply) else {
            continue;
        };
        let mut reply_leaves = Vec::new();
        leaves("", &reply, &mut reply_leaves);
        let body = example.body.to_lowercase();
        for call in recorded_calls(&example.tool_calls) {
            let Ok(result) = &call.result else { continue };
            let mut tool_leaves = Vec::new();
            leaves("", result, &mut tool_leaves);
            for (_, value) in &reply_leaves {
                if !tool_leaves
                    .iter()
                    .any(|(_, tool)| json_equivalent(tool, value))
                {
                    continue;
                }
                let literal = match value {
                    Value::String(text) if text.len() >= 2 => {
                        let lower = text.to_lowercase();
                        if body.contains(&lower) || document.contains(&lower) {
                            continue;
                        }
                        writes_string(&code.strings, text).then(|| format!("{text:?}"))
                    }
                    Value::Number(number) => {
                        let Some(n) = number.as_f64() else { continue };
                        if n.abs() <= 2.0 || body.contains(&number.to_string()) {
                            continue;
                        }
                        writes_number(&code.numbers, n).then(|| number.to_string())
                    }
                    _ => None,
                };
                if let Some(literal) = literal {
                    return Some(format!(
                        "Your code writes {literal} as a literal, but in example {} that value came \
                         from the result of {}. Read it from the tool's result instead of writing \
                         it in the code.",
                        index + 1,
                        call.tool
                    ));
                }
            }
        }
    }
    None
}

/// A value of a request that the candidate `source` writes as a literal although the example
/// passed it on (in a tool call's arguments or the reply): a date or a price that was the
/// request's is the next request's too. Only values that are data (a date, a number above 2,
/// a text with a digit) count, so that a routine may still compare the request with a word the
/// protocol allows; values the protocol document names are left out.
fn request_value_written(source: &Code, examples: &[Example], document: &str) -> Option<String> {
    let document = document.to_lowercase();
    for (index, example) in examples.iter().enumerate() {
        let Ok(request) = serde_json::from_str::<Value>(&example.body) else {
            continue;
        };
        let mut request_leaves = Vec::new();
        leaves("", &request, &mut request_leaves);
        let mut passed_on = example.reply.clone();
        for call in recorded_calls(&example.tool_calls) {
            passed_on.push_str(&call.arguments.to_string());
        }
        for (_, value) in &request_leaves {
            let literal = match value {
                Value::String(text)
                    if text.chars().count() >= 3
                        && text.chars().any(|c| c.is_ascii_digit())
                        && !document.contains(&text.to_lowercase())
                        && passed_on.contains(text.as_str()) =>
                {
                    writes_string(&source.strings, text).then(|| format!("{text:?}"))
                }
                Value::Number(number) => {
                    let Some(n) = number.as_f64() else { continue };
                    if n.abs() <= 2.0 || !passed_on.contains(&number.to_string()) {
                        continue;
                    }
                    writes_number(&source.numbers, n).then(|| number.to_string())
                }
                _ => None,
            };
            if let Some(literal) = literal {
                return Some(format!(
                    "Your code writes {literal} as a literal, but in example {} that value came \
                     from the request. Read it from the request instead of writing it in the code.",
                    index + 1
                ));
            }
        }
    }
    None
}

/// `source` with its JavaScript comments (`// ...` and `/* ... */`) blanked out; with
/// `messages`, the contents of the strings given to the compiler's `uncovered(...)` too (quotes
/// kept). Numbers in other strings stay: a request's hour written into an SQL text is written.
fn without_comments(source: &str, messages: bool) -> String {
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars().peekable();
    // The open quote, and whether its contents are blanked.
    let mut quote: Option<(char, bool)> = None;
    while let Some(c) = chars.next() {
        if let Some((q, blank)) = quote {
            if !blank || c == q {
                out.push(c);
            }
            if c == '\\' {
                if let Some(next) = chars.next()
                    && !blank
                {
                    out.push(next);
                }
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match (c, chars.peek()) {
            ('/', Some('/')) => {
                while chars.peek().is_some_and(|&next| next != '\n') {
                    chars.next();
                }
                out.push(' ');
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for next in chars.by_ref() {
                    if last == '*' && next == '/' {
                        break;
                    }
                    last = next;
                }
                out.push(' ');
            }
            ('"' | '\'' | '`', _) => {
                quote = Some((c, messages && out.trim_end().ends_with("uncovered(")));
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// A candidate's source as the literal checks read it: with its comments blanked for strings,
/// and the compiler's `uncovered` messages blanked too for numbers.
struct Code {
    strings: String,
    numbers: String,
}

/// Whether `source` has `text` as a quoted string literal.
fn writes_string(source: &str, text: &str) -> bool {
    ['"', '\'', '`']
        .iter()
        .any(|quote| source.contains(&format!("{quote}{text}{quote}")))
}

/// Whether `source` has a number literal equal to `n` (not part of a longer word or number).
fn writes_number(source: &str, n: f64) -> bool {
    let bytes = source.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at].is_ascii_digit()
            && (at == 0
                || !(bytes[at - 1].is_ascii_alphanumeric() || matches!(bytes[at - 1], b'_' | b'.')))
        {
            let start = at;
            while at < bytes.len() && (bytes[at].is_ascii_digit() || bytes[at] == b'.') {
                at += 1;
            }
            let followed_by_word =
                at < bytes.len() && (bytes[at].is_ascii_alphabetic() || bytes[at] == b'_');
            if !followed_by_word
                && let Ok(found) = source[start..at].trim_end_matches('.').parse::<f64>()
                && found == n
            {
                return true;
            }
        } else {
            at += 1;
        }
    }
    false
}

/// The JSON Schema the protocol document gives for its reply, if it gives one: a fenced JSON
/// block that is a schema (`$schema`, or `type` with `properties`) under a heading that names
/// the reply (reply, response, output or result).
pub(crate) fn reply_schema(document: &str) -> Option<Value> {
    let mut heading = String::new();
    let mut block: Option<String> = None;
    for line in document.lines() {
        let trimmed = line.trim_start();
        if let Some(code) = block.as_mut() {
            if trimmed.starts_with("```") {
                let text = block.take().unwrap_or_default();
                if names_reply(&heading)
                    && let Some(schema) = as_schema(&text)
                {
                    return Some(schema);
                }
            } else {
                code.push_str(line);
                code.push('\n');
            }
            continue;
        }
        if trimmed.starts_with("```") {
            block = Some(String::new());
        } else if trimmed.starts_with('#') {
            heading = trimmed.to_lowercase();
        }
    }
    None
}

fn names_reply(heading: &str) -> bool {
    ["reply", "response", "output", "result"]
        .iter()
        .any(|word| heading.contains(word))
}

fn as_schema(text: &str) -> Option<Value> {
    let value: Value = serde_json::from_str(text).ok()?;
    let object = value.as_object()?;
    let is_schema = object.contains_key("$schema")
        || (object.contains_key("type") && object.get("properties").is_some_and(Value::is_object));
    (is_schema && jsonschema::validator_for(&value).is_ok()).then_some(value)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// [`super::grade_as`] with the recorded grading (a sender routine's).
    fn grade(
        expected: &str,
        got: &str,
        calls: &[RecordedCall],
        reply_schema: Option<&jsonschema::Validator>,
    ) -> Result<(), String> {
        super::grade_as(expected, got, calls, reply_schema, Grading::Recorded)
    }

    /// [`super::grade`], as a candidate routine is examined.
    fn lenient(expected: &str, got: &str) -> Result<(), String> {
        super::grade(expected, got, &[], None)
    }

    #[test]
    fn lenient_grading_forgives_empty_members_and_reworded_short_texts_only() {
        let booked = r#"{"status": "success", "error": ""}"#;
        // An empty member and a missing one are the same, both ways, and "" is null.
        for (expected, got) in [
            (booked, r#"{"status": "success"}"#),
            (r#"{"status": "success"}"#, booked),
            (booked, r#"{"status": "success", "error": null}"#),
        ] {
            assert!(lenient(expected, got).is_ok(), "{expected} against {got}");
            assert!(
                grade(expected, got, &[], None).is_err(),
                "{expected} against {got}"
            );
        }
        // But not a member with something in it, nor a different status.
        assert!(lenient(booked, r#"{"status": "success", "error": "full"}"#).is_err());
        assert!(lenient(r#"{"status": "success"}"#, r#"{"status": "failure"}"#).is_err());
        assert!(
            lenient(
                r#"{"status": "success", "room": 4}"#,
                r#"{"status": "success"}"#
            )
            .is_err()
        );

        let taken = r#"{"status": "failure", "error": "Table already booked"}"#;
        for got in [
            r#"{"status": "failure", "error": "The table is already booked."}"#,
            r#"{"status": "failure", "error": "Table already booked for the specified date and time."}"#,
        ] {
            assert!(lenient(taken, got).is_ok(), "{got}");
            assert!(grade(taken, got, &[], None).is_err(), "{got}");
        }
        // A word of the recorded text missing (the meaning may have turned), a single word, a
        // changed number: still wrong.
        assert!(lenient(taken, r#"{"status": "failure", "error": "Table booked"}"#).is_err());
        assert!(lenient(r#"{"room": "not available"}"#, r#"{"room": "available"}"#).is_err());
        assert!(lenient(r#"{"room": "double"}"#, r#"{"room": "twin"}"#).is_err());
        assert!(lenient(r#"{"room": "Room 12"}"#, r#"{"room": "Room 13"}"#).is_err());
        assert!(lenient(r#"{"room": "Room 12"}"#, r#"{"room": "room 12, booked"}"#).is_ok());
        // A whole reply is never free text.
        assert!(lenient(r#""Table already booked""#, r#""Already booked, table""#).is_err());
    }

    fn call(tool: &str, arguments: Value, result: Value) -> RecordedCall {
        RecordedCall {
            tool: tool.into(),
            arguments,
            result: Ok(result),
        }
    }

    #[test]
    fn without_a_schema_a_sentence_may_be_worded_differently_but_nothing_else() {
        let expected =
            r#"{"status": "failure", "message": "The shop is not open on May 5, 2024."}"#;
        assert!(
            grade(
                expected,
                r#"{"status": "failure", "message": "Closed on 2024-05-05, sorry."}"#,
                &[],
                None
            )
            .is_ok()
        );
        let error = grade(
            expected,
            r#"{"status": "success", "message": "Closed on 2024-05-05, sorry."}"#,
            &[],
            None,
        )
        .unwrap_err();
        assert_eq!(error, r#".status should be "failure", not "success""#);
        assert!(
            grade(
                expected,
                r#"{"status": "failure", "message": ""}"#,
                &[],
                None
            )
            .is_err()
        );
        assert!(grade(expected, r#"{"status": "failure"}"#, &[], None).is_err());
        assert!(
            grade(
                expected,
                r#"{"status": "failure", "message": 3}"#,
                &[],
                None
            )
            .is_err()
        );
        // Short strings are values, not sentences; a whole prose reply is never free.
        assert!(
            grade(
                r#"{"room": "twin suite"}"#,
                r#"{"room": "double"}"#,
                &[],
                None
            )
            .is_err()
        );
        assert!(grade("It is sunny in Oslo today.", "Sunny in Oslo.", &[], None).is_err());
        assert!(grade(r#""It is sunny in Oslo today.""#, r#""Sunny.""#, &[], None).is_err());
    }

    #[test]
    fn equivalence_ignores_key_order_and_number_spelling() {
        assert!(json_equivalent(
            &json!({"a": 1, "b": [1.0, "x"]}),
            &json!({"b": [1, "x"], "a": 1.0})
        ));
        assert!(!json_equivalent(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
        assert!(!json_equivalent(&json!("1"), &json!(1)));
    }

    #[test]
    fn equal_json_passes_and_a_difference_is_named() {
        assert!(
            grade(
                r#"{"t": 1.0, "c": "sunny"}"#,
                r#"{"c":"sunny","t":1}"#,
                &[],
                None
            )
            .is_ok()
        );
        let error = grade(r#"{"t": 1, "c": "sunny"}"#, r#"{"t": 2}"#, &[], None).unwrap_err();
        assert!(error.contains(".t should be 1, not 2"), "{error}");
        assert!(error.contains(".c is missing"), "{error}");
        assert!(grade("hello", " hello ", &[], None).is_ok());
        assert!(grade("hello", "bye", &[], None).is_err());
    }

    #[test]
    fn with_a_reply_schema_only_tool_derived_values_must_match() {
        let schema = jsonschema::validator_for(&json!({
            "type": "object",
            "properties": {"temperature": {"type": "number"}, "summary": {"type": "string"}},
            "required": ["temperature", "summary"]
        }))
        .unwrap();
        let calls = [call("weather", json!({}), json!({"temperature_c": 21.5}))];
        let expected = r#"{"temperature": 21.5, "summary": "Warm and dry."}"#;
        assert!(
            grade(
                expected,
                r#"{"temperature": 21.5, "summary": "dry"}"#,
                &calls,
                Some(&schema)
            )
            .is_ok()
        );
        let wrong = grade(
            expected,
            r#"{"temperature": 20, "summary": "dry"}"#,
            &calls,
            Some(&schema),
        )
        .unwrap_err();
        assert!(wrong.contains("/temperature should be 21.5"), "{wrong}");
        let invalid = grade(expected, r#"{"temperature": 21.5}"#, &calls, Some(&schema));
        assert!(invalid.unwrap_err().contains("reply schema"));
    }

    #[test]
    fn the_reply_schema_is_found_under_a_reply_heading_only() {
        let document = "# P\n\n## Request\n\n```json\n{\"type\": \"object\", \"properties\": \
                        {\"q\": {\"type\": \"string\"}}}\n```\n\n## Response\n\n```json\n\
                        {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"number\"}}}\n```\n";
        let schema = reply_schema(document).unwrap();
        assert!(schema["properties"].get("a").is_some());
        let shipped = include_str!("../../../../protocols/weather-forecast.md");
        assert_eq!(reply_schema(shipped), None, "an example is not a schema");
    }

    fn example(body: &str, calls: Value, reply: &str) -> Example {
        Example {
            id: 0,
            protocol_hash: "0000000000000000000000000000000000000000".parse().unwrap(),
            query_id: "q".into(),
            body: body.into(),
            tool_calls: calls,
            reply: reply.into(),
            created_at_ms: 0,
        }
    }

    #[test]
    fn a_tool_value_written_as_a_literal_is_found() {
        let examples = [example(
            r#"{"date": "2024-01-05", "type": "racing"}"#,
            json!([{"tool": "rent", "arguments": {}, "result": {"skiId": "A234", "price": 45}}]),
            r#"{"status": "success", "skiId": "A234", "price": 45}"#,
        )];
        let document = "reply: status (success or failure), skiId, price";
        let constant = "function handle(b) { callTool('rent', {}); \
                        return { status: 'success', skiId: 'A234', price: r.price }; }";
        let problem = hard_coded(constant, &examples, document).unwrap();
        assert!(
            problem.contains("\"A234\"") && problem.contains("rent"),
            "{problem}"
        );
        let priced = "function handle(b) { const r = callTool('rent', {}); \
                      return { status: 'success', skiId: r.skiId, price: 45 }; }";
        assert!(
            hard_coded(priced, &examples, document)
                .unwrap()
                .contains("45")
        );
        let read = "function handle(b) { const r = callTool('rent', {}); \
                    return { status: 'success', skiId: r.skiId, price: r.price + 0 }; }";
        assert_eq!(hard_coded(read, &examples, document), None);
        // Part of a longer number, or a word: not the literal.
        assert!(!writes_number("x = 450; y = a45; z = 4.5", 45.0));
        assert!(writes_number("return [45];", 45.0));
    }

    /// The compiler's provenance comments ("as in examples 1-3") and `uncovered` messages
    /// ("step 3") name no value: a booking for 3 people compiled from 3 examples is not refused
    /// for writing 3. Written into an SQL text, 3 is written.
    #[test]
    fn a_number_in_a_comment_is_not_a_literal() {
        let examples = [example(
            r#"{"fullName": "Nina Jones", "numPeople": 3, "date": "2024-10-02"}"#,
            json!([{"tool": "sql", "arguments": {"params": ["Nina Jones", 3]}, "result": []}]),
            r#"{"status": "success"}"#,
        )];
        let document = "reply: status (success or failure)";
        let compiled = "// Compiled from 3 examples.\nfunction handle(b) {\n  /* examples 1-3 */\n  \
                        // Step 1: sql, as in examples 1-3.\n  \
                        callTool('sql', {params: [r.fullName, r.numPeople]});\n}";
        assert_eq!(hard_coded(compiled, &examples, document), None);
        let written = "// from the request\nfunction handle(b) { callTool('sql', {params: [r.fullName, 3]}); }";
        assert!(
            hard_coded(written, &examples, document)
                .unwrap()
                .contains("writes 3 as a literal")
        );
        let message = "function handle(b) { uncovered('step 3 found nothing'); }";
        assert_eq!(hard_coded(message, &examples, document), None);
        // In an SQL text it is written.
        let sql = "function handle(b) { callTool('sql', {query: 'INSERT INTO T VALUES (3)'}); }";
        assert!(hard_coded(sql, &examples, document).is_some());
        let source = "a // 3\nb /* 4 */ c 'd // 5' uncovered( `e /* 6 */`)";
        assert_eq!(
            without_comments(source, false),
            "a  \nb   c 'd // 5' uncovered( `e /* 6 */`)"
        );
        assert_eq!(
            without_comments(source, true),
            "a  \nb   c 'd // 5' uncovered( ``)"
        );
    }

    #[tokio::test]
    async fn recorded_tools_answer_equivalent_calls_and_refuse_others() {
        let tools = RecordedTools::new(vec![call(
            "weather",
            json!({"location": "Paris", "date": "2024-01-01"}),
            json!({"t": 3}),
        )]);
        let ok = tools
            .call_tool("weather", r#"{"date":"2024-01-01","location":"Paris"}"#)
            .await;
        assert_eq!(ok.unwrap(), r#"{"t":3}"#);
        let refused = tools
            .call_tool("weather", r#"{"location":"Rome","date":"2024-01-01"}"#)
            .await
            .unwrap_err();
        assert!(
            refused.contains("unexpected tool call weather"),
            "{refused}"
        );
        assert!(refused.contains("Paris"), "{refused}");
        assert_eq!(tools.unexpected().len(), 1);
    }

    #[test]
    fn arguments_match_up_to_layout_but_not_content() {
        let recorded = json!({"query": "SELECT SkiId FROM Skis WHERE SkiType = 'racing';"});
        assert!(arguments_equivalent(
            &recorded,
            &json!({"query": "SELECT SkiId FROM Skis\n  WHERE SkiType=\"racing\""})
        ));
        assert!(!arguments_equivalent(
            &recorded,
            &json!({"query": "SELECT SkiId FROM Skis WHERE SkiType = 'carving'"})
        ));
        assert!(arguments_equivalent(&json!({"n": 1}), &json!({"n": 1.0})));
    }
}
