//! An MCP tool result (`CallToolResult`, as JSON) read into the value a node tool returns.
//!
//! Pure code over the wire's JSON, so that what a node's LLM or routine sees of an MCP result is
//! decided in one place and tested without a server:
//! - `isError: true` is a tool error, with the result's text as the reason (cut to 500 chars);
//! - `structuredContent`, when present, is the value;
//! - otherwise one text block is the value, parsed as JSON when it is JSON (most servers
//!   serialise their data into text) and kept as a string when it is not;
//! - several blocks are an array of them; an image or audio block is described by its type, MIME
//!   type and size, never passed on as base64 (a routine cannot use it, an LLM should not pay
//!   for it); an embedded resource keeps its URI and text;
//! - a value over the byte limit fails the call, naming the limit.

use serde_json::{Value, json};

/// Longest reason kept from an MCP error result.
const MAX_REASON_CHARS: usize = 500;

/// Why an MCP result gives no value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResultError {
    /// The server said the call failed (`isError: true`).
    #[error("{0}")]
    ToolFailed(String),
    /// The result is larger than the configured limit.
    #[error("the result is {size} bytes of JSON, over the limit of {limit}")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The result has neither content nor structured content.
    #[error("the result has no content")]
    Empty,
}

/// The value of a `CallToolResult` (in its JSON form), within `max_bytes`.
pub fn tool_value(result: &Value, max_bytes: usize) -> Result<Value, ResultError> {
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let text = blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        let text = if text.trim().is_empty() {
            "the MCP server reported an error without a message".to_string()
        } else {
            text.chars().take(MAX_REASON_CHARS).collect()
        };
        return Err(ResultError::ToolFailed(text));
    }
    let value = match result.get("structuredContent") {
        Some(structured) if !structured.is_null() => structured.clone(),
        _ => match blocks.as_slice() {
            [] => return Err(ResultError::Empty),
            [one] => block_value(one),
            many => Value::Array(many.iter().map(block_value).collect()),
        },
    };
    let size = value.to_string().len();
    if size > max_bytes {
        return Err(ResultError::TooLarge {
            size,
            limit: max_bytes,
        });
    }
    Ok(value)
}

fn block_value(block: &Value) -> Value {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => {
            let text = block.get("text").and_then(Value::as_str).unwrap_or("");
            match serde_json::from_str::<Value>(text) {
                Ok(value @ (Value::Object(_) | Value::Array(_))) => value,
                _ => Value::String(text.to_string()),
            }
        }
        "image" | "audio" => json!({
            "type": kind,
            "mimeType": block.get("mimeType").cloned().unwrap_or(Value::Null),
            // base64: four characters carry three bytes
            "bytes": block.get("data").and_then(Value::as_str).map_or(0, |d| d.len() / 4 * 3),
        }),
        "resource" => {
            let resource = block.get("resource").cloned().unwrap_or(Value::Null);
            json!({
                "type": "resource",
                "uri": resource.get("uri").cloned().unwrap_or(Value::Null),
                "text": resource.get("text").cloned().unwrap_or(Value::Null),
            })
        }
        "resource_link" => json!({
            "type": "resource_link",
            "uri": block.get("uri").cloned().unwrap_or(Value::Null),
            "name": block.get("name").cloned().unwrap_or(Value::Null),
        }),
        _ => json!({ "type": kind }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> Value {
        json!({"type": "text", "text": t})
    }

    #[test]
    fn structured_content_wins_over_text() {
        let result = json!({"content": [text("{\"a\":1}")], "structuredContent": {"a": 2}});
        assert_eq!(tool_value(&result, 1000), Ok(json!({"a": 2})));
    }

    #[test]
    fn one_text_block_is_parsed_when_it_is_json_and_kept_when_not() {
        let json_text = json!({"content": [text("{\"timezone\":\"UTC\"}")]});
        assert_eq!(tool_value(&json_text, 1000), Ok(json!({"timezone": "UTC"})));
        let plain = json!({"content": [text("Echo: hi")]});
        assert_eq!(tool_value(&plain, 1000), Ok(json!("Echo: hi")));
        // A bare JSON scalar in text stays text: "42" is what the server wrote.
        let number = json!({"content": [text("42")]});
        assert_eq!(tool_value(&number, 1000), Ok(json!("42")));
    }

    #[test]
    fn images_are_described_not_passed_on() {
        let result = json!({"content": [
            text("a picture"),
            {"type": "image", "mimeType": "image/png", "data": "AAAA"},
        ]});
        assert_eq!(
            tool_value(&result, 1000),
            Ok(json!(["a picture", {"type": "image", "mimeType": "image/png", "bytes": 3}]))
        );
    }

    #[test]
    fn an_error_result_is_a_tool_error_with_its_text() {
        let result = json!({"isError": true, "content": [text("Invalid timezone: Mars/Base")]});
        assert_eq!(
            tool_value(&result, 1000),
            Err(ResultError::ToolFailed(
                "Invalid timezone: Mars/Base".into()
            ))
        );
        let silent = json!({"isError": true, "content": []});
        assert!(matches!(
            tool_value(&silent, 1000),
            Err(ResultError::ToolFailed(reason)) if reason.contains("without a message")
        ));
    }

    #[test]
    fn an_oversized_result_fails_with_the_limit_named() {
        let result = json!({"content": [text(&"x".repeat(100))]});
        assert_eq!(
            tool_value(&result, 50),
            Err(ResultError::TooLarge {
                size: 102,
                limit: 50
            })
        );
    }

    #[test]
    fn an_empty_result_is_an_error() {
        assert_eq!(
            tool_value(&json!({"content": []}), 100),
            Err(ResultError::Empty)
        );
    }
}
