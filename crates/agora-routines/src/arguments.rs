//! A JavaScript routine's tool arguments on their way to the node: the `undefined` values in them.
//!
//! `JSON.stringify` turns an `undefined` array element into `null`, so `[data.roomNumber, start]`
//! where the data has no `roomNumber` reached the database as a NULL, and was written (bookings of
//! room NULL, seen in the model's programs for natural-language messages). The engine
//! (`routines/engine/engine.c`) sends such an element as the string [`UNDEFINED`] instead, and
//! [`screen`] either refuses the call with the element's path, before any tool runs, or sends
//! `null` as before (`RuntimeConfig::refuse_undefined_arguments`; the committed network demo runs
//! were recorded with `null`). An undefined object member never gets here: JSON drops it.

use serde_json::Value;

/// What the engine sends for an `undefined` array element: a string no program writes.
pub(crate) const UNDEFINED: &str = "\u{0}undefined";

/// `arguments` as the tool gets them: unchanged when they hold no [`UNDEFINED`] marker;
/// otherwise refused (`refuse`), with a text naming the first marked element, or with every
/// marker replaced by `null`.
pub(crate) fn screen(tool: &str, arguments: String, refuse: bool) -> Result<String, String> {
    // The marker as JSON writes it: the engine's `\u0000`, or serde's spelling of the same.
    if !arguments.contains("\\u0000undefined") {
        return Ok(arguments);
    }
    let Ok(mut value) = serde_json::from_str::<Value>(&arguments) else {
        return Ok(arguments);
    };
    let mut paths = Vec::new();
    mark(&mut value, String::new(), &mut paths);
    let Some(first) = paths.first() else {
        return Ok(arguments);
    };
    if refuse {
        return Err(format!(
            "callTool(\"{tool}\"): {first} is undefined: the code read a value that is not there \
             (a field that the message, the request or a tool result does not have). The tool was \
             not called."
        ));
    }
    Ok(value.to_string())
}

/// Replaces every marker under `value` by `null` and collects its path (`params[1]`, `a.b[0]`).
fn mark(value: &mut Value, path: String, paths: &mut Vec<String>) {
    match value {
        Value::String(text) if text == UNDEFINED => {
            paths.push(if path.is_empty() {
                "the arguments".into()
            } else {
                path
            });
            *value = Value::Null;
        }
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                mark(item, format!("{path}[{index}]"), paths);
            }
        }
        Value::Object(members) => {
            for (name, member) in members.iter_mut() {
                let path = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                mark(member, path, paths);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_without_a_marker_pass_unchanged() {
        let text = r#"{"query":"SELECT 1","params":[null, 1.50]}"#.to_string();
        assert_eq!(screen("run_sql_query", text.clone(), true), Ok(text));
    }

    #[test]
    fn a_marked_element_is_refused_by_its_path_or_sent_as_null() {
        let text = r#"{"query":"INSERT","params":["\u0000undefined","2024-01-01",{"a":["\u0000undefined"]}]}"#;
        let refused = screen("run_sql_query", text.into(), true).unwrap_err();
        assert!(
            refused.starts_with("callTool(\"run_sql_query\"): params[0] is undefined"),
            "{refused}"
        );
        let sent: Value =
            serde_json::from_str(&screen("run_sql_query", text.into(), false).unwrap()).unwrap();
        assert_eq!(
            sent,
            serde_json::json!({"query":"INSERT","params":[null,"2024-01-01",{"a":[null]}]})
        );
        let nested = screen("t", r#"{"a":{"b":[1,"\u0000undefined"]}}"#.into(), true).unwrap_err();
        assert!(nested.contains("a.b[1] is undefined"), "{nested}");
    }

    #[test]
    fn the_words_alone_are_not_a_marker() {
        let text = r#"{"note":"undefined","list":["undefined"]}"#.to_string();
        assert_eq!(screen("t", text.clone(), true), Ok(text));
    }
}
