//! Sender-side routines without the node: the contract, the prompt, the examination, and the
//! in-memory state (job queue, loaded routines). `node::sender_routines` ties them to the node.
//!
//! The contract is the receiver routines' one (`handle(text) -> text`, no tools granted), used
//! for two operations told apart by the input, so that one script, one build and one
//! examination cover both halves of a run and the model sees the request and the reply side by
//! side:
//! - `{"op": "encode", "data": {...}}` → the request body (an object is sent as JSON text);
//! - `{"op": "decode", "reply": "<reply body text>"}` → the task's output object.
//!
//! A candidate passes when, on every recorded example, encoding the data gives the body sent
//! (as JSON: key order, whitespace and number spelling ignored; as trimmed text for non-JSON
//! bodies) and decoding the reply gives the recorded output (as JSON; a sentence inside it may be
//! worded differently, as in the receiver's exam) that also validates against the task's output
//! schema.

use std::sync::Arc;

use agora_llm::Message;
use agora_protocol::VerifiedDocument;
use agora_store::SenderExample;
use serde_json::Value;

use crate::programmer::dataflow;
use crate::programmer::exam::{RecordedTools, json_equivalent, same_but_wording};
use crate::programmer::prompt::{self, clip};
use crate::routines::{LoadedRoutine, RoutineLimits, ToolHost};
use crate::task::Task;

/// Characters of a protocol document shown; longer documents are cut.
const MAX_PD_CHARS: usize = 5000;

const RULES: &str = "You are an expert JavaScript programmer. Write a function `handle(input)` \
that lets a client talk to an agent with the protocol below, exactly like the examples.\n\
Rules:\n\
- `input` is a string: parse it with JSON.parse. It is {\"op\": \"encode\", \"data\": {...}} or \
{\"op\": \"decode\", \"reply\": \"...\"}.\n\
- encode: build the request body from `data` as the protocol says and return it (an object for \
a JSON protocol, otherwise a string).\n\
- decode: `reply` is the reply body as a string (JSON.parse it for a JSON protocol). Return the \
output object with the properties of the output schema.\n\
- Take every value from `data` or `reply`; never copy values from the examples.\n\
- Plain JavaScript only: no require, import, fetch, console or timers.\n\
For instance, for a protocol whose requests are {\"from\", \"to\", \"amount\"} and whose replies \
are {\"converted\": number}, with data {\"currency\", \"target\", \"sum\"} and output \
{\"result\": number}, a good routine is:\n\
```javascript\n\
function handle(input) {\n\
  const request = JSON.parse(input);\n\
  if (request.op === \"encode\") {\n\
    const data = request.data;\n\
    return { from: data.currency, to: data.target, amount: data.sum };\n\
  }\n\
  const reply = JSON.parse(request.reply);\n\
  return { result: reply.converted };\n\
}\n\
```\n\
Answer with the complete code in one ```javascript block and nothing else.";

/// The routine's input for encoding `data`.
pub(crate) fn encode_input(data: &Value) -> String {
    format!(r#"{{"op":"encode","data":{data}}}"#)
}

/// The routine's input for decoding `reply`.
pub(crate) fn decode_input(reply: &str) -> String {
    format!(r#"{{"op":"decode","reply":{}}}"#, Value::from(reply))
}

/// Runs one operation with no tools granted (any tool call fails).
pub(crate) async fn run(
    routine: &dyn LoadedRoutine,
    input: &str,
    limits: RoutineLimits,
) -> Result<String, String> {
    let tools: Arc<dyn ToolHost> = Arc::new(RecordedTools::new(Vec::new()));
    let run = routine.run(input, tools, limits);
    match tokio::time::timeout(limits.timeout + limits.timeout, run).await {
        Ok(result) => result.map_err(|error| error.to_string()),
        Err(_) => Err(format!("timed out after {:?}", limits.timeout)),
    }
}

/// Reads a decode result into an output valid against the task's output schema.
pub(crate) fn read_output(task: &Task, got: &str) -> Result<Value, String> {
    let output: Value =
        serde_json::from_str(got).map_err(|e| format!("the output is not JSON: {e}"))?;
    crate::task::validate(&task.output_schema, &output)
        .map_err(|e| format!("the output does not match the output schema: {e}"))?;
    Ok(output)
}

/// Whether an encoded body is the recorded one.
fn same_body(expected: &str, got: &str) -> bool {
    match (
        serde_json::from_str::<Value>(expected),
        serde_json::from_str::<Value>(got),
    ) {
        (Ok(expected), Ok(got)) => json_equivalent(&expected, &got),
        _ => expected.trim() == got.trim(),
    }
}

/// One failed check, for people and for the repair prompt.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Failure {
    input: String,
    expected: String,
    got: Result<String, String>,
    problem: String,
}

/// How a candidate did: two checks (encode, decode) per example.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct SenderExamReport {
    checks: usize,
    failures: Vec<Failure>,
}

impl SenderExamReport {
    /// Counts one check, a failure when it found a `problem`.
    fn check(
        &mut self,
        input: String,
        expected: String,
        got: Result<String, String>,
        problem: Option<String>,
    ) {
        self.checks += 1;
        if let Some(problem) = problem {
            self.failures.push(Failure {
                input,
                expected,
                got,
                problem,
            });
        }
    }

    pub(crate) fn passed(&self) -> bool {
        self.checks > 0 && self.failures.is_empty()
    }

    pub(crate) fn summary(&self) -> String {
        let mut text = format!(
            "{}/{} checks passed",
            self.checks - self.failures.len(),
            self.checks
        );
        if let Some(failure) = self.failures.first() {
            text.push_str(&format!("; first failure: {}", failure.problem));
        }
        text
    }

    pub(crate) fn feedback(&self) -> String {
        let Some(failure) = self.failures.first() else {
            return "All examples passed.".to_string();
        };
        let got = match &failure.got {
            Ok(text) => format!("Your handle returned: {text}"),
            Err(error) => format!("Your handle failed: {error}"),
        };
        format!(
            "Your code gave a wrong result.\nInput: {}\nExpected: {}\n{got}\nProblem: {}",
            failure.input, failure.expected, failure.problem
        )
    }
}

/// Replays every example on `routine`: encode the data, decode the reply.
pub(crate) async fn examine(
    routine: &dyn LoadedRoutine,
    task: &Task,
    examples: &[SenderExample],
    limits: RoutineLimits,
) -> SenderExamReport {
    let mut report = SenderExamReport::default();
    for example in examples {
        let input = encode_input(&example.data);
        let got = run(routine, &input, limits).await;
        let problem = match &got {
            Ok(body) if same_body(&example.body, body) => None,
            Ok(_) => Some("the body differs from the expected body".to_string()),
            Err(error) => Some(format!("the routine failed: {error}")),
        };
        report.check(input, example.body.clone(), got, problem);
        let input = decode_input(&example.reply);
        let got = run(routine, &input, limits).await;
        let problem = match &got {
            Ok(text) => match read_output(task, text) {
                Ok(output) if same_but_wording(&example.output, &output) => None,
                Ok(_) => Some("the output differs from the expected output".to_string()),
                Err(problem) => Some(problem),
            },
            Err(error) => Some(format!("the routine failed: {error}")),
        };
        report.check(input, example.output.to_string(), got, problem);
    }
    report
}

/// The first request for a sender routine.
pub(crate) fn first_messages(
    document: &VerifiedDocument,
    task: &Task,
    examples: &[SenderExample],
) -> Vec<Message> {
    let text: String = document.text().chars().take(MAX_PD_CHARS).collect();
    let mut user = format!(
        "Protocol document:\n<<<\n{}\n>>>\n\nTask: {}\nOutput schema: {}\n\nExamples:\n",
        text.trim(),
        task.description,
        task.output_schema
    );
    for (index, example) in examples.iter().enumerate() {
        user.push_str(&format!(
            "Example {}\nhandle({}) returns {}\nhandle({}) returns {}\n\n",
            index + 1,
            clip(&encode_input(&example.data)),
            clip(&example.body),
            clip(&decode_input(&example.reply)),
            clip(&example.output.to_string()),
        ));
    }
    let drafts = examples.iter().map(|example| {
        Some(dataflow::sender_draft(
            &example.data,
            &example.body,
            &example.reply,
            &example.output,
        ))
    });
    user.push_str(&prompt::traced_drafts(drafts));
    user.push_str("Write handle(input) now.");
    vec![Message::system(RULES), Message::user(user)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use agora_store::SenderKey;
    use serde_json::json;

    #[test]
    fn bodies_compare_as_json_or_as_trimmed_text() {
        assert!(same_body(r#"{"a": 1, "b": "x"}"#, r#"{"b":"x","a":1.0}"#));
        assert!(!same_body(r#"{"a": 1}"#, r#"{"a": 2}"#));
        assert!(same_body("Weather in Oslo?", " Weather in Oslo?\n"));
    }

    #[test]
    fn the_prompt_shows_both_operations_of_each_example() {
        let document = VerifiedDocument::from_text("# Echo\nReply with the body.");
        let task = Task {
            name: "echo".into(),
            description: "Echo a value.".into(),
            input_schema: json!({"type": "object"}),
            output_schema: json!({"type": "object"}),
        };
        let example = SenderExample {
            id: 1,
            key: SenderKey {
                target: "http://t".into(),
                task: "echo".into(),
                protocol_hash: document.hash(),
            },
            data: json!({"x": 1}),
            body: r#"{"x":1}"#.into(),
            reply: r#"{"x":1}"#.into(),
            output: json!({"x": 1}),
            created_at_ms: 0,
        };
        let messages = first_messages(&document, &task, &[example]);
        let user = &messages[1].content;
        assert!(
            user.contains(r#"handle({"op":"encode","data":{"x":1}}) returns {"x":1}"#),
            "{user}"
        );
        assert!(
            user.contains(r#"handle({"op":"decode","reply":"{\"x\":1}"}) returns"#),
            "{user}"
        );
    }
}
