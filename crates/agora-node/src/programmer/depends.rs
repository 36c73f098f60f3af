//! Whether a candidate's reply depends on anything: the examination's last question.
//!
//! Examples that all got the same reply cannot show what the reply depends on, and a candidate
//! that returns that reply as a constant passes them all. restaurant3's `isOpen` routine in the
//! network demo's baseline did: written from three LLM answers that looked up today's weekday
//! (not the requested date's) and said "no", it said "no" to every date. So a candidate that
//! replies one constant to every example is run again twice on the first: once with the request's
//! values changed (its tool calls answered with the recorded results, in order), once with the
//! tool results changed. If it replies the same constant both times, and the changed request did
//! not change its tool calls, it reads neither, and it is refused: the protocol keeps its LLM
//! until examples differ.

use std::sync::{Arc, Mutex};

use agora_store::Example;
use serde_json::Value;

use super::exam::{RecordedCall, json_equivalent, recorded_calls};
use crate::routines::{LoadedRoutine, RoutineLimits, ToolHost};

/// Why the candidate is refused, or `None` when its reply depends on the request or a result
/// (or it does not reply one constant to every example).
pub(crate) async fn ignores_everything(
    routine: &dyn LoadedRoutine,
    examples: &[Example],
    replies: &[Value],
    limits: RoutineLimits,
) -> Option<String> {
    let (first, rest) = replies.split_first()?;
    if examples.is_empty() || !rest.iter().all(|reply| json_equivalent(reply, first)) {
        return None;
    }
    let example = &examples[0];
    let calls = recorded_calls(&example.tool_calls);
    let plain = run(routine, &example.body, &calls, limits).await?;
    let changed_body = match serde_json::from_str::<Value>(&example.body) {
        Ok(value) => changed(&value, 1.0).to_string(),
        Err(_) => format!("{} (changed)", example.body),
    };
    let other_request = run(routine, &changed_body, &calls, limits).await?;
    let other_results: Vec<RecordedCall> = calls
        .iter()
        .map(|call| RecordedCall {
            result: call
                .result
                .as_ref()
                .map(|value| changed(value, 7.0))
                .map_err(Clone::clone),
            ..call.clone()
        })
        .collect();
    let with_other_results = run(routine, &example.body, &other_results, limits).await?;
    let same = |run: &Run| {
        run.reply
            .as_ref()
            .is_some_and(|reply| json_equivalent(reply, first))
    };
    let ignores_request = same(&other_request) && other_request.calls == plain.calls;
    let ignores_results = same(&with_other_results);
    (ignores_request && ignores_results).then(|| {
        format!(
            "it replies {first} to every request, whatever the request and the tool results \
             say: the examples all got that reply, so they do not show what it depends on"
        )
    })
}

/// What one run gave: its reply (`None` when it failed) and the calls it made.
struct Run {
    reply: Option<Value>,
    calls: Vec<(String, String)>,
}

async fn run(
    routine: &dyn LoadedRoutine,
    body: &str,
    calls: &[RecordedCall],
    limits: RoutineLimits,
) -> Option<Run> {
    let tools = Arc::new(InOrder {
        calls: calls.to_vec(),
        made: Mutex::new(Vec::new()),
    });
    let host: Arc<dyn ToolHost> = tools.clone();
    let reply =
        match tokio::time::timeout(limits.timeout * 2, routine.run(body, host, limits)).await {
            Ok(Ok(text)) => Some(serde_json::from_str(&text).unwrap_or(Value::String(text))),
            _ => None,
        };
    let calls = tools.made.lock().ok()?.clone();
    Some(Run { reply, calls })
}

/// Answers the n-th call with the n-th recorded result, whatever was asked.
struct InOrder {
    calls: Vec<RecordedCall>,
    made: Mutex<Vec<(String, String)>>,
}

#[async_trait::async_trait]
impl ToolHost for InOrder {
    async fn call_tool(&self, name: &str, arguments: &str) -> Result<String, String> {
        let index = match self.made.lock() {
            Ok(mut made) => {
                made.push((name.to_string(), arguments.to_string()));
                made.len() - 1
            }
            Err(_) => return Err("the recording is unavailable".to_string()),
        };
        match self.calls.get(index).map(|call| &call.result) {
            Some(Ok(value)) => Ok(value.to_string()),
            Some(Err(error)) => Err(error.clone()),
            None => Err(format!("no result recorded for a call to {name}")),
        }
    }
}

/// `value` with every leaf changed: a date a day later, other text with a letter added, a
/// number plus `step`, a boolean flipped.
fn changed(value: &Value, step: f64) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, child)| (key.clone(), changed(child, step)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|item| changed(item, step)).collect()),
        Value::String(text) => Value::String(match text.parse::<jiff::civil::Date>() {
            Ok(date) if text.len() == 10 => date
                .tomorrow()
                .map(|next| next.to_string())
                .unwrap_or_else(|_| format!("{text}x")),
            _ => format!("{text}x"),
        }),
        Value::Number(number) => number
            .as_f64()
            .and_then(|n| serde_json::Number::from_f64(n + step))
            .map(Value::Number)
            .unwrap_or(Value::Null),
        Value::Bool(flag) => Value::Bool(!flag),
        Value::Null => Value::String("x".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_leaf_changes() {
        let changed = changed(
            &json!({"date": "2024-02-28", "n": 2, "ok": true, "rows": [{"day": "Sunday"}]}),
            1.0,
        );
        assert_eq!(
            changed,
            json!({"date": "2024-02-29", "n": 3.0, "ok": false, "rows": [{"day": "Sundayx"}]})
        );
    }
}
