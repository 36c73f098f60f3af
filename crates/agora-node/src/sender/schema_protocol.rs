//! The schema protocol: a protocol document the sender's node writes itself, from the task's
//! input and output JSON Schemas, instead of having its LLM write one.
//!
//! The request body is the task's input as one JSON object, and the reply body is the task's
//! output as one JSON object; the document lists every field with its type, whether it is
//! required, its allowed values and its description, as the task's schemas give them. The text
//! depends on the task alone, so every sender with the same task proposes the same document (the
//! same hash), and every receiver that serves one of them can serve all of them.
//!
//! Why: on the local model (Qwen2.5-Coder-1.5B), LLM-written documents were the weakest link of
//! the protocol rung. In the committed run of 2026-11 the sender's model copied its own
//! instructions into the document for `isOpen` (no field named at all); the request writer then
//! sent `{"message": "Please provide the restaurant's name."}`, the reply was read as
//! `isOpen: "false"`, and skiResort2 answered "No restaurant" on open days (4/15 correct, while
//! natural language got 15/15). A document written from the schemas cannot lose a field, and it
//! also makes the sender's side free: the body is the data itself and the reply is read with
//! `serde_json` and the output schema, so the protocol rung costs the sender no LLM call and no
//! sender routine is needed ([`is_for`]). A reply that does not parse into the output schema is
//! still read by the LLM, as for any other protocol.
//!
//! It is used when `negotiation.propose_from_schema` is on, which it is not by default: on the
//! network demo's first 100 queries it scored 45/100 against the LLM's negotiation's 56/100
//! (see `crate::negotiation`), because a receiver's small model answered some tasks under it
//! without looking anything up.

use agora_protocol::{ProtocolDocument, VerifiedDocument};
use serde_json::Value;

use crate::task::Task;

/// The task's schema protocol document.
pub(crate) fn document(task: &Task) -> VerifiedDocument {
    let mut body = String::new();
    body.push_str(&format!(
        "# {}\n\n{}\n\n",
        title(&task.name),
        one_line(&task.description)
    ));
    body.push_str("The request body is one JSON object, the task's input, with these fields:\n");
    fields_of(&task.input_schema, 0, &mut body);
    body.push_str("\nThe reply body is one JSON object, the task's output, with these fields:\n");
    fields_of(&task.output_schema, 0, &mut body);
    body.push('\n');
    body.push_str(&on_error(&task.output_schema));
    body.push_str(
        "\nBoth bodies are plain JSON: no other text, no code fence. Dates are YYYY-MM-DD \
         unless a field says otherwise.\n",
    );
    let text = ProtocolDocument::render(
        &title(&task.name),
        &one_line(&task.description),
        false,
        &body,
    );
    VerifiedDocument::from_text(text.trim())
}

/// Whether `document` is the schema protocol of `task`.
pub(crate) fn is_for(task: &Task, document: &VerifiedDocument) -> bool {
    document.hash() == self::document(task).hash()
}

/// The request body for `data`: the data itself.
pub(crate) fn encode(data: &Value) -> String {
    data.to_string()
}

/// The task's output from a reply body, when the reply is a JSON object valid against the output
/// schema (a code fence around it is tolerated); `None` otherwise.
pub(crate) fn decode(task: &Task, reply: &str) -> Option<Value> {
    let value: Value = serde_json::from_str(super::unfence(reply).trim()).ok()?;
    if !value.is_object() {
        return None;
    }
    super::validate(&task.output_schema, &value).ok()?;
    Some(value)
}

/// `callTaxi` → `CallTaxi`: a document name in the CamelCase the negotiators use.
fn title(name: &str) -> String {
    let mut chars = name.trim().chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => "Task".to_string(),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Lists an object schema's properties, one line each, nested objects (and arrays of objects)
/// indented under their field; a schema without properties gets one line saying so.
fn fields_of(schema: &Value, depth: usize, out: &mut String) {
    let indent = "  ".repeat(depth + 1);
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        out.push_str(&format!("{indent}- (any fields)\n"));
        return;
    };
    if properties.is_empty() {
        out.push_str(&format!("{indent}- (no fields)\n"));
        return;
    }
    let required = super::fit::required(schema);
    for (name, property) in properties {
        let mut facts = vec![kind(property)];
        if required.contains(&name.as_str()) {
            facts.push("required".to_string());
        } else {
            facts.push("optional".to_string());
        }
        if let Some(values) = property.get("enum").and_then(Value::as_array) {
            let values: Vec<String> = values.iter().map(Value::to_string).collect();
            facts.push(format!("one of {}", values.join(", ")));
        }
        let description = property
            .get("description")
            .and_then(Value::as_str)
            .map(|d| format!(": {}", one_line(d)))
            .unwrap_or_default();
        out.push_str(&format!(
            "{indent}- `{name}` ({}){description}\n",
            facts.join(", ")
        ));
        if property.get("properties").is_some() {
            fields_of(property, depth + 1, out);
        } else if let Some(items) = property.get("items")
            && items.get("properties").is_some()
        {
            fields_of(items, depth + 1, out);
        }
    }
}

/// A property's JSON type as words: `string`, `array of object`, `number or null`.
fn kind(property: &Value) -> String {
    let base = match property.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ if property.get("enum").is_some() => "string".to_string(),
        _ => "any JSON value".to_string(),
    };
    match property.get("items") {
        Some(items) if base == "array" => format!("array of {}", kind(items)),
        _ => base,
    }
}

/// What the reply is when the request cannot be served: the output's own failure shape when it
/// has one (a `status` that can be "failure", with an `error`), an Agora failure otherwise.
fn on_error(output: &Value) -> String {
    let properties = output.get("properties");
    let status_fails = properties
        .and_then(|p| p.get("status"))
        .and_then(|s| s.get("enum"))
        .and_then(Value::as_array)
        .is_some_and(|values| values.iter().any(|v| v == "failure"));
    let has_error = properties.and_then(|p| p.get("error")).is_some();
    if status_fails && has_error {
        "When the request cannot be served, the reply is {\"status\": \"failure\", \"error\": \
         \"<why>\"}.\n"
            .to_string()
    } else {
        "When the request cannot be served, the receiver answers with an Agora failure (status \
         \"failure\" and a short message) instead of a reply body.\n"
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::sender::fit;

    fn taxi() -> Task {
        Task {
            name: "callTaxi".into(),
            description: "Call a taxi".into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "address": {"type": "string", "description": "The address"},
                    "time": {"type": "string", "description": "HH:MM, 24-hour"}
                },
                "required": ["address", "time"]
            }),
            output_schema: json!({
                "type": "object",
                "properties": {
                    "status": {"type": "string", "enum": ["success", "failure"]},
                    "price": {"type": "number", "description": "The price.\nIn dollars."},
                    "error": {"type": "string"}
                },
                "required": ["status"]
            }),
        }
    }

    #[test]
    fn the_document_names_every_field_and_depends_on_the_task_alone() {
        let task = taxi();
        let document = document(&task);
        let text = document.text();
        assert!(text.starts_with("---\nname: CallTaxi\n"), "{text}");
        assert!(
            text.contains("- `time` (string, required): HH:MM, 24-hour"),
            "{text}"
        );
        assert!(
            text.contains("- `status` (string, required, one of \"success\", \"failure\")"),
            "{text}"
        );
        assert!(text.contains("- `price` (number, optional): The price. In dollars."));
        assert!(text.contains("{\"status\": \"failure\", \"error\": \"<why>\"}"));
        assert!(fit::missing_fields(&task, text).is_empty());
        assert_eq!(document.hash(), self::document(&taxi()).hash());
        assert!(is_for(&task, &document));
        let other = Task {
            description: "Call a cab".into(),
            ..taxi()
        };
        assert!(!is_for(&other, &document));
        assert!(other.check().is_ok());
    }

    #[test]
    fn nested_fields_are_listed_under_theirs_and_other_outputs_fail_the_agora_way() {
        let task = Task {
            name: "menu".into(),
            description: "The menu".into(),
            input_schema: json!({"type": "object", "properties": {}}),
            output_schema: json!({
                "type": "object",
                "properties": {"dishes": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "price": {"type": "number"}}
                }}}
            }),
        };
        let text = document(&task).text().to_string();
        assert!(text.contains("- (no fields)"), "{text}");
        assert!(
            text.contains("- `dishes` (array of object, optional)"),
            "{text}"
        );
        assert!(text.contains("    - `price` (number, optional)"), "{text}");
        assert!(text.contains("an Agora failure"), "{text}");
    }

    #[test]
    fn replies_decode_only_into_the_output_schema() {
        let task = taxi();
        assert_eq!(encode(&json!({"time": "10:00"})), r#"{"time":"10:00"}"#);
        assert_eq!(
            decode(&task, r#"{"status": "success", "price": 36}"#),
            Some(json!({"status": "success", "price": 36}))
        );
        assert_eq!(
            decode(
                &task,
                "```json\n{\"status\": \"failure\", \"error\": \"none free\"}\n```"
            ),
            Some(json!({"status": "failure", "error": "none free"}))
        );
        assert_eq!(decode(&task, r#"{"status": "booked"}"#), None);
        assert_eq!(decode(&task, "The taxi costs $36."), None);
        assert_eq!(decode(&task, "[1]"), None);
    }
}
