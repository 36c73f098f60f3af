//! Envelopes: protocols whose messages all share one frame (a header and a body, routing members
//! and a payload), as the seed message protocols do (the agent DSL, the practical guide's
//! envelope, OSNAP). A small model answering such a request tends to answer with the payload
//! alone (`{"temperature": 4.0, ...}`), which the other side cannot read; the responder tells it
//! once to give the whole message (see [`crate::responder`]).
//!
//! A request is in an envelope when its top-level members are mostly those of an example object
//! the document writes out in a fenced code block, and that example holds an object (the
//! header, the payload). The answer keeps the envelope when its top-level members are mostly the
//! request's. "Mostly": the members in common are at least 3/5 of all the members of either
//! (an answer adds `in_reply_to`, a request leaves out `metadata`).
//!
//! The same model also copies a tool's member names into the reply (`temperature_c` where the
//! protocol says `temperature`): [`unknown_members`] finds the answer's member names that the
//! documents never mention.

use std::collections::BTreeSet;

use serde_json::Value;

/// The least share of members in common for two objects to be in one frame.
const SAME_FRAME: f64 = 0.6;

/// The objects written out in the fenced code blocks of `document`.
fn examples(document: &str) -> Vec<Value> {
    let mut found = Vec::new();
    let mut parts = document.split("```");
    // Text before the first fence is not a block; then blocks and text alternate.
    parts.next();
    while let Some(block) = parts.next() {
        // The block's first line may name its language.
        let code = block
            .split_once('\n')
            .filter(|(first, _)| !first.trim_start().starts_with('{'))
            .map_or(block, |(_, rest)| rest);
        if let Ok(value @ Value::Object(_)) = serde_json::from_str::<Value>(code.trim()) {
            found.push(value);
        }
        parts.next();
    }
    found
}

fn members(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .map(|object| object.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

fn same_frame(a: &BTreeSet<&str>, b: &BTreeSet<&str>) -> bool {
    let all = a.union(b).count();
    all > 0 && a.intersection(b).count() as f64 >= SAME_FRAME * all as f64
}

/// The members of `request`'s envelope when it is in one that `document` writes out (see the
/// module docs); `None` otherwise.
pub(crate) fn envelope_of(document: &str, request: &Value) -> Option<Vec<String>> {
    let asked = members(request);
    if asked.len() < 2 {
        return None;
    }
    examples(document)
        .into_iter()
        .filter(|example| {
            example
                .as_object()
                .is_some_and(|object| object.values().any(Value::is_object))
        })
        .find(|example| same_frame(&members(example), &asked))
        .map(|example| members(&example).into_iter().map(String::from).collect())
}

/// Whether `answer` is in the same envelope as `request`: mostly the same members, and those in
/// common of the same kind (a string stays a string: the agent DSL's `body` is JSON text, not an
/// object).
pub(crate) fn keeps_envelope(request: &Value, answer: &Value) -> bool {
    same_frame(&members(request), &members(answer))
        && members(request)
            .intersection(&members(answer))
            .all(|name| same_kind(&request[*name], &answer[*name]))
}

/// Whether two values are of one JSON kind (`null` goes with anything: an optional member).
fn same_kind(a: &Value, b: &Value) -> bool {
    matches!(
        (a, b),
        (Value::Null, _)
            | (_, Value::Null)
            | (Value::Object(_), Value::Object(_))
            | (Value::Array(_), Value::Array(_))
            | (Value::String(_), Value::String(_))
            | (Value::Number(_), Value::Number(_))
            | (Value::Bool(_), Value::Bool(_))
    )
}

/// The members of `request`'s frame with their kinds, for the model: `header (an object), body
/// (a string)`.
pub(crate) fn describe_frame(request: &Value) -> String {
    let kind = |value: &Value| match value {
        Value::Object(_) => "an object",
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "true or false",
        Value::Null => "null",
    };
    request
        .as_object()
        .map(|object| {
            object
                .iter()
                .map(|(name, value)| format!("{name} ({})", kind(value)))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// The member names in `answer` (at any depth, and inside strings that hold a JSON object) that
/// `documents` never mention, in order and without repeats.
pub(crate) fn unknown_members(documents: &str, answer: &Value) -> Vec<String> {
    fn walk(value: &Value, documents: &str, out: &mut Vec<String>) {
        match value {
            Value::Object(object) => {
                for (name, child) in object {
                    if !documents.contains(name.as_str()) && !out.contains(name) {
                        out.push(name.clone());
                    }
                    walk(child, documents, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|item| walk(item, documents, out)),
            Value::String(text) if text.trim_start().starts_with('{') => {
                if let Ok(inner) = serde_json::from_str::<Value>(text) {
                    walk(&inner, documents, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(answer, documents, &mut out);
    out
}

/// A name `documents` use for the same quantity as `member` (a word of four letters or more in
/// common: `temperature` for `temperature_c`, `weatherCondition` for `condition`), the first in
/// the documents' order.
pub(crate) fn documents_name_for(documents: &str, member: &str) -> Option<String> {
    documents
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .find(|word| {
            !word.is_empty() && *word != member && crate::text::same_quantity(word, member)
        })
        .map(String::from)
}

/// The document's names for `unknown` members, as a parenthesis for the model: ` (temperature
/// for temperature_c, weatherCondition for condition)`; empty when the documents have none.
pub(crate) fn suggested_names(documents: &str, unknown: &[String]) -> String {
    let renames: Vec<String> = unknown
        .iter()
        .filter_map(|member| {
            documents_name_for(documents, member).map(|name| format!("{name} for {member}"))
        })
        .collect();
    if renames.is_empty() {
        String::new()
    } else {
        format!(" ({})", renames.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const DSL: &str = "# A DSL\n\n```json\n{\"header\": {\"type\": \"QUERY\"}, \"body\": \"{}\"}\n```\n\n\
                       The body:\n\n```json\n{\"location\": \"London, UK\", \"date\": \"2024-09-27\"}\n```\n";

    #[test]
    fn a_request_in_a_written_out_envelope_names_its_members() {
        let request = json!({"header": {"type": "QUERY", "id": "m1"}, "body": "{}"});
        assert_eq!(
            envelope_of(DSL, &request),
            Some(vec!["body".to_string(), "header".to_string()])
        );
        // A flat request matches the flat example, which is no envelope.
        let flat = json!({"location": "Lima", "date": "2025-01-01"});
        assert_eq!(envelope_of(DSL, &flat), None);
        // A document without examples has no envelope.
        assert_eq!(envelope_of("reply: {temperature: number}", &request), None);
    }

    #[test]
    fn member_names_the_documents_never_mention_are_found_inside_json_text_too() {
        let answer = json!({"header": {"type": "RESPONSE"},
            "body": "{\"temperature_c\": 4.0, \"condition\": \"sunny\"}"});
        assert_eq!(
            unknown_members(DSL, &answer),
            vec!["temperature_c".to_string(), "condition".to_string()]
        );
        let named = json!({"header": {"type": "RESPONSE"}, "body": "{\"location\": \"Lima\"}"});
        assert!(unknown_members(DSL, &named).is_empty());
        let documents = "`temperature` (number) and `weatherCondition`: sunny or rainy";
        assert_eq!(
            documents_name_for(documents, "temperature_c").as_deref(),
            Some("temperature")
        );
        assert_eq!(
            documents_name_for(documents, "condition").as_deref(),
            Some("weatherCondition")
        );
        assert_eq!(documents_name_for(documents, "wind_kmh"), None);
        let unknown = ["temperature_c".to_string(), "wind_kmh".to_string()];
        assert_eq!(
            suggested_names(documents, &unknown),
            " (temperature for temperature_c)"
        );
        assert_eq!(suggested_names(documents, &unknown[1..]), "");
    }

    #[test]
    fn most_members_in_common_is_the_same_frame() {
        let document = "```\n{\"sender_agent_id\": \"a\", \"receiver_agent_id\": \"b\", \
                        \"message_type\": \"task_request\", \"payload\": {}, \"metadata\": {}}\n```";
        let request = json!({"sender_agent_id": "a", "receiver_agent_id": "b",
            "message_type": "task_request", "payload": {"task_id": "t"}});
        assert!(envelope_of(document, &request).is_some());
        let answer = json!({"sender_agent_id": "b", "receiver_agent_id": "a",
            "message_type": "status_update", "payload": {}, "metadata": {}});
        assert!(keeps_envelope(&request, &answer));
        let payload_only = json!({"task_id": "t", "task_status": "completed", "task_result": {}});
        assert!(!keeps_envelope(&request, &payload_only));
        assert!(!keeps_envelope(&request, &json!("completed")));
        // A string member answered as an object is out of the frame.
        let dsl = json!({"header": {"type": "QUERY"}, "body": "{}"});
        assert!(!keeps_envelope(
            &dsl,
            &json!({"header": {}, "body": {"t": 1}})
        ));
        assert!(keeps_envelope(
            &dsl,
            &json!({"header": {}, "body": "{\"t\": 1}"})
        ));
        assert_eq!(describe_frame(&dsl), "header (an object), body (a string)");
    }
}
