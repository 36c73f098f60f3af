//! What the programmer says to the LLM, and how it reads the code back.
//!
//! The prompt is short on purpose: it has to work on a 1.5B-parameter local coder model with a
//! 4096-token context. It gives the routine contract in a few rules, the protocol document, the
//! tools the routine would be granted (with their argument and result schemas), and a few
//! recorded examples with their tool calls. The model answers with a fenced JavaScript block;
//! a repair continues the same conversation with the failure.

use agora_llm::Message;
use agora_protocol::VerifiedDocument;
use agora_store::Example;
use serde_json::Value;

use super::dataflow;
use super::exam::recorded_calls;
use crate::tools::{ToolSpec, catalogue};

/// Characters of a protocol document shown; longer documents are cut.
const MAX_PD_CHARS: usize = 6000;
/// Characters of one example's body, tool result or reply shown.
const MAX_EXAMPLE_CHARS: usize = 600;

/// The rules on `body` and `callTool` that both receiver-side prompts give (the programmer's and
/// code as action's, [`crate::acting`]), as a literal for `concat!`.
macro_rules! body_and_tool_rules {
    () => {
        "- `body` is the request as a string. If the protocol uses JSON, parse it with JSON.parse.\n\
- To use a tool, call `callTool(name, args)` with an object of arguments. It returns the \
tool's result as an object. It is synchronous: do not use await.\n\
"
    };
}
pub(crate) use body_and_tool_rules;

/// The closing rule and the worked example both receiver-side prompts give.
macro_rules! plain_javascript_and_example {
    () => {
        "- Plain JavaScript only: no require, import, fetch, console or timers.\n\
For instance, for a protocol that converts money with a tool `exchange_rate` returning \
{\"rate\": number}, a good routine is:\n\
```javascript\n\
function handle(body) {\n\
  const request = JSON.parse(body);\n\
  const result = callTool(\"exchange_rate\", { from: request.from, to: request.to });\n\
  return { amount: request.amount * result.rate, currency: request.to };\n\
}\n\
```\n\
Answer with the complete code in one ```javascript block and nothing else."
    };
}
pub(crate) use plain_javascript_and_example;

const RULES: &str = concat!(
    "You are an expert JavaScript programmer. Write a function `handle(body)` \
that answers requests of the protocol below exactly like the examples.\n\
Rules:\n",
    body_and_tool_rules!(),
    "- Use tool results as they are: do not check or validate them. A value may be 0 or empty.\n\
- Return the reply: an object for a JSON protocol (it is sent as JSON), otherwise a string.\n\
- Take every fact from the request and the tool results; never copy values from the examples.\n\
",
    plain_javascript_and_example!()
);

/// The first prompt's closing request.
const WRITE_NOW: &str = "Write handle(body) now.";

/// The first request for a routine.
pub(crate) fn first_messages(
    document: &VerifiedDocument,
    tools: &[ToolSpec],
    examples: &[Example],
) -> Vec<Message> {
    let text: String = document.text().chars().take(MAX_PD_CHARS).collect();
    let mut user = format!("Protocol document:\n<<<\n{}\n>>>\n\n", text.trim());
    if !tools.is_empty() {
        user.push_str(&format!("Tools:\n{}\n\n", catalogue(tools)));
    }
    user.push_str("Examples:\n");
    for (index, example) in examples.iter().enumerate() {
        user.push_str(&format!(
            "Example {}\nRequest body: {}\n",
            index + 1,
            clip(&example.body)
        ));
        for call in recorded_calls(&example.tool_calls) {
            let outcome = match &call.result {
                Ok(value) => format!("returned {}", clip(&value.to_string())),
                Err(error) => format!("failed: {}", clip(error)),
            };
            user.push_str(&format!(
                "callTool(\"{}\", {}) {outcome}\n",
                call.tool,
                compact(&call.arguments)
            ));
        }
        user.push_str(&format!("Reply: {}\n\n", clip(&example.reply)));
    }
    let drafts = examples.iter().map(receiver_draft);
    user.push_str(&traced_drafts(drafts));
    user.push_str(WRITE_NOW);
    vec![Message::system(RULES), Message::user(user)]
}

/// `example` as the routine that would have produced it ([`dataflow::receiver_draft`]).
fn receiver_draft(example: &Example) -> Option<String> {
    dataflow::receiver_draft(
        &example.body,
        &recorded_calls(&example.tool_calls),
        &example.reply,
    )
}

/// The distinct drafts of `drafts`, each with the (1-based) numbers of the examples it covers,
/// in the order first seen.
fn distinct(drafts: impl Iterator<Item = Option<String>>) -> Vec<(String, Vec<usize>)> {
    let mut distinct: Vec<(String, Vec<usize>)> = Vec::new();
    for (index, draft) in drafts.enumerate() {
        let Some(draft) = draft else { continue };
        match distinct.iter_mut().find(|(seen, _)| *seen == draft) {
            Some((_, examples)) => examples.push(index + 1),
            None => distinct.push((draft, vec![index + 1])),
        }
    }
    distinct
}

/// The examples' traced code (see [`dataflow`]), one block per distinct draft, naming the
/// examples it covers; empty when no example could be traced.
pub(crate) fn traced_drafts(drafts: impl Iterator<Item = Option<String>>) -> String {
    let distinct = distinct(drafts);
    if distinct.is_empty() {
        return String::new();
    }
    let mut text = String::new();
    for (draft, examples) in &distinct {
        let names: Vec<String> = examples.iter().map(|n| n.to_string()).collect();
        let label = if examples.len() == 1 {
            "Example"
        } else {
            "Examples"
        };
        text.push_str(&format!(
            "{label} {} as code (each value is read from where it came from; a literal matched \
             nothing):\n```javascript\n{draft}\n```\n",
            names.join(", ")
        ));
    }
    text.push_str(if distinct.len() == 1 {
        "If this code fits every example, answer with it unchanged.\n\n"
    } else {
        "Merge these into one handle that fits every example.\n\n"
    });
    text
}

/// The first prompt with the operator's rejection of an earlier routine for the protocol: its
/// reason, and its code when it was JavaScript, before the closing request (`Write {function}
/// now.`, replaced by the request to write `function` so that the reason no longer applies).
pub(crate) fn after_rejection(
    mut messages: Vec<Message>,
    reason: &str,
    source: Option<&str>,
    function: &str,
) -> Vec<Message> {
    let mut note = format!(
        "The operator rejected an earlier routine for this protocol. Their reason: {}\n",
        clip(reason)
    );
    if let Some(source) = source {
        note.push_str(&format!(
            "The rejected code:\n```javascript\n{source}\n```\n"
        ));
    }
    note.push_str(&format!(
        "Write {function} so that the reason no longer applies."
    ));
    if let Some(last) = messages.last_mut() {
        let write_now = format!("Write {function} now.");
        let asked = last
            .content
            .strip_suffix(write_now.as_str())
            .unwrap_or(&last.content);
        last.content = format!("{asked}{note}");
    }
    messages
}

/// The conversation continued with a failed candidate and what went wrong.
pub(crate) fn repair_messages(
    mut messages: Vec<Message>,
    candidate: &str,
    problem: &str,
) -> Vec<Message> {
    messages.push(Message::assistant(format!(
        "```javascript\n{candidate}\n```"
    )));
    messages.push(Message::user(format!(
        "{problem}\nFix the code. Answer with the complete corrected code in one ```javascript \
         block."
    )));
    messages
}

/// The first prompt again, with a candidate that the repairs kept giving back and why it fails:
/// a new start for a conversation that is stuck.
pub(crate) fn fresh_start(mut first: Vec<Message>, candidate: &str, problem: &str) -> Vec<Message> {
    first.push(Message::assistant(format!(
        "```javascript\n{candidate}\n```"
    )));
    first.push(Message::user(format!(
        "This code is wrong, and fixing it in place did not work.\n{problem}\nWrite handle(body) \
         again from the start, in a different way: read every value from the request or from a \
         tool result, and call the tools exactly as the examples do. Answer with the complete \
         code in one ```javascript block."
    )));
    first
}

/// The code in the model's answer: the first fenced block (any language tag), or the whole
/// answer when it has no fence.
pub(crate) fn extract_code(answer: &str) -> String {
    let Some(start) = answer.find("```") else {
        return answer.trim().to_string();
    };
    let after_fence = &answer[start + 3..];
    let body_start = after_fence.find('\n').map(|i| i + 1).unwrap_or(0);
    let body = &after_fence[body_start..];
    let end = body.find("```").unwrap_or(body.len());
    body[..end].trim().to_string()
}

fn compact(value: &Value) -> String {
    clip(&value.to_string())
}

/// `text`, cut after [`MAX_EXAMPLE_CHARS`] characters (marked with `…`).
pub(crate) fn clip(text: &str) -> String {
    crate::text::clip_to(text, MAX_EXAMPLE_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_is_read_from_the_first_fence_or_the_whole_answer() {
        let fenced = "Here it is:\n```javascript\nfunction handle(b) { return b; }\n```\nDone.";
        assert_eq!(extract_code(fenced), "function handle(b) { return b; }");
        let bare = "```\nfunction handle(b) {}\n```";
        assert_eq!(extract_code(bare), "function handle(b) {}");
        let unterminated = "```js\nfunction handle(b) {}\n";
        assert_eq!(extract_code(unterminated), "function handle(b) {}");
        assert_eq!(
            extract_code("  function handle(b) {}  "),
            "function handle(b) {}"
        );
    }

    #[test]
    fn the_prompt_shows_the_document_tools_and_examples() {
        let document = VerifiedDocument::from_text("# Echo\nReply with the body.");
        let example = Example {
            id: 1,
            protocol_hash: document.hash(),
            query_id: "q".into(),
            body: r#"{"x": 1}"#.into(),
            tool_calls: serde_json::json!([{"tool": "t", "arguments": {"a": 5}, "result": {"r": 2}}]),
            reply: r#"{"x": 1}"#.into(),
            created_at_ms: 0,
        };
        let messages = first_messages(&document, &[], &[example]);
        let user = &messages[1].content;
        assert!(user.contains("Reply with the body."));
        assert!(
            user.contains(r#"callTool("t", {"a":5}) returned {"r":2}"#),
            "{user}"
        );
        assert!(user.contains(r#"Reply: {"x": 1}"#));
        assert!(
            user.contains("Example 1 as code")
                && user.contains(r#"const r1 = callTool("t", { a: 5 });"#)
                && user.contains("return { x: request.x };"),
            "{user}"
        );
        let repaired = repair_messages(messages, "function handle(b) {}", "It failed.");
        assert_eq!(repaired.len(), 4);
        assert!(repaired[3].content.starts_with("It failed."));
    }
}
