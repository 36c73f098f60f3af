//! A JavaScript routine's tool arguments on their way to the node: the `undefined` values in them.
//!
//! `JSON.stringify` turns an `undefined` array element into `null`, so `[data.roomNumber, start]`
//! where the data has no `roomNumber` would reach the database as a NULL, and be written (bookings
//! of room NULL, seen in the model's programs). The engine (`routines/engine/engine.c`) sends such
//! an element as the string [`UNDEFINED`] instead, and [`screen`] refuses the call with the
//! element's path, before any tool runs. An undefined object member never gets here: JSON drops
//! it.

use serde_json::Value;

/// What the engine sends for an `undefined` array element: a string no program writes.
pub(crate) const UNDEFINED: &str = "\u{0}undefined";

/// `arguments` as the tool gets them: unchanged when they hold no [`UNDEFINED`] marker;
/// otherwise refused, with a text naming the first marked element.
pub(crate) fn screen(tool: &str, arguments: String) -> Result<String, String> {
    // The marker as JSON writes it: the engine's `\u0000`, or serde's spelling of the same.
    if !arguments.contains("\\u0000undefined") {
        return Ok(arguments);
    }
    let Ok(value) = serde_json::from_str::<Value>(&arguments) else {
        return Ok(arguments);
    };
    match first_marked(&value, String::new()) {
        None => Ok(arguments),
        Some(first) => Err(format!(
            "callTool(\"{tool}\"): {first} is undefined: the code read a value that is not there \
             (a field that the message, the request or a tool result does not have). The tool was \
             not called."
        )),
    }
}

/// The path (`params[1]`, `a.b[0]`) of the first marker under `value`.
fn first_marked(value: &Value, path: String) -> Option<String> {
    match value {
        Value::String(text) if text == UNDEFINED => Some(if path.is_empty() {
            "the arguments".into()
        } else {
            path
        }),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(index, item)| first_marked(item, format!("{path}[{index}]"))),
        Value::Object(members) => members.iter().find_map(|(name, member)| {
            let path = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            first_marked(member, path)
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_without_a_marker_pass_unchanged() {
        let text = r#"{"query":"SELECT 1","params":[null, 1.50]}"#.to_string();
        assert_eq!(screen("run_sql_query", text.clone()), Ok(text));
    }

    #[test]
    fn a_marked_element_is_refused_by_its_path() {
        let text = r#"{"query":"INSERT","params":["\u0000undefined","2024-01-01",{"a":["\u0000undefined"]}]}"#;
        let refused = screen("run_sql_query", text.into()).unwrap_err();
        assert!(
            refused.starts_with("callTool(\"run_sql_query\"): params[0] is undefined"),
            "{refused}"
        );
        let nested = screen("t", r#"{"a":{"b":[1,"\u0000undefined"]}}"#.into()).unwrap_err();
        assert!(nested.contains("a.b[1] is undefined"), "{nested}");
    }

    #[test]
    fn the_words_alone_are_not_a_marker() {
        let text = r#"{"note":"undefined","list":["undefined"]}"#.to_string();
        assert_eq!(screen("t", text.clone()), Ok(text));
    }
}
