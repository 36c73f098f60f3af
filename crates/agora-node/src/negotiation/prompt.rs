//! The two negotiators' prompts and output schemas.
//!
//! Both roles answer one JSON object per turn, constrained by a JSON Schema (a grammar on
//! llama.cpp), because a small local model drifts out of free-form conventions such as closing
//! tags. Long strings carry no `maxLength`: llama.cpp turns length bounds into grammar
//! repetitions, and `max_tokens` bounds the turn anyway.

use agora_llm::Message;
use serde_json::{Value, json};

use crate::task::Task;
use crate::tools::{ToolSpec, catalogue};

/// What both sides are told a protocol document must be.
const WHAT_A_PD_IS: &str = "A protocol document fixes exactly what the sender sends and what the \
    receiver replies, so that later both sides can exchange these messages with small programs \
    written from the document alone, without an AI and without seeing this negotiation. \
    One request message, one reply message; both are strings holding JSON objects. \
    The document names every field with its JSON type and its meaning, unit or format \
    (for dates: YYYY-MM-DD), shows one example of each message, and says what the reply is \
    when the request cannot be served.";

/// The sender negotiator's instructions.
const SENDER_SYSTEM: &str = "You negotiate a protocol for an AI agent (the sender) that will \
    send many requests of one task to another agent (the receiver). The receiver knows what it \
    can do; you know what the task needs.";

const SENDER_RULES: &str = "Rules:\n\
    - The request carries the task's input; the reply must give every value the task's output needs.\n\
    - Keep it small and exact. Do not repeat what is already agreed.\n\
    - When the receiver asks for a change, adopt it unless the task cannot work with it.\n\
    - Answer every turn with JSON: \"message\" is what you say to the receiver now.\n\
    - Once the receiver has answered, first say whether its last message accepts your proposal \
    as it stands: \"receiver_agreed\" is \"yes\" or \"no\". With \"no\", \"final_protocol\" \
    is null. With \"yes\", give it as {\"name\": a short CamelCase name, \"description\": one \
    sentence, \"document\": the full protocol text}, and make \"message\" a one-line closing \
    note. The document lists every field of the request and of the reply with its type and its \
    unit, format or allowed values, gives one example request and one example reply, and says \
    what the reply is on an error.";

/// The receiver negotiator's instructions; the node's description and tools follow.
const RECEIVER_SYSTEM: &str = "You negotiate a protocol for an AI agent (the receiver) with \
    another agent (the sender) that wants to send it requests. Agree to a proposal when this \
    agent can serve it with its tools: the request gives every argument the tools need, and the \
    reply asks only for values the tools provide. Otherwise say exactly what to change: field \
    names, types, units, formats. Be brief and do not restate the whole protocol. Answer with \
    JSON: \"verdict\" is \"agree\" or \"change\", \"message\" is what you say to the sender.";

/// The sender's first two messages: instructions, then the task.
pub(crate) fn sender_opening(task: &Task) -> Vec<Message> {
    let pretty = |schema: &Value| {
        serde_json::to_string_pretty(schema).unwrap_or_else(|_| schema.to_string())
    };
    vec![
        Message::system(format!(
            "{SENDER_SYSTEM}\n\n{WHAT_A_PD_IS}\n\n{SENDER_RULES}"
        )),
        Message::user(format!(
            "Task: {}: {}\nInput (JSON Schema):\n{}\nOutput (JSON Schema):\n{}\n\n\
             Write your first message to the receiver: propose the request and reply formats \
             for this task. final_protocol must be null now.",
            task.name,
            task.description,
            pretty(&task.input_schema),
            pretty(&task.output_schema),
        )),
    ]
}

/// How a receiver's reply is shown to the sender's LLM.
pub(crate) fn receiver_said(reply: &str) -> String {
    format!(
        "The receiver answered:\n{reply}\n\nIf the receiver agreed to your proposal, give the \
         final protocol now. Otherwise answer it."
    )
}

/// The words a receiver's agreement starts with. This node's receiver starts every agreeing turn
/// with them and no other turn ([`receiver_text`]).
const AGREEMENT: &str = "I agree.";

/// Whether a receiver's answer agrees: it starts with "I agree" (case and leading space aside).
pub(crate) fn agreed(answer: &str) -> bool {
    let words = AGREEMENT.trim_end_matches('.');
    answer
        .trim_start()
        .get(..words.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(words))
}

/// The text a receiver turn sends: an agreement starts with [`AGREEMENT`]; a request for a
/// change never does, so a sender never reads it as agreement.
pub(crate) fn receiver_text(agrees: bool, message: &str) -> String {
    let message = message.trim();
    match (agrees, agreed(message)) {
        (true, true) | (false, false) => message.to_string(),
        (true, false) => format!("{AGREEMENT} {message}"),
        (false, true) => format!("Not yet. {message}"),
    }
}

/// How a draft final protocol is shown to a receiver that has not answered yet: as a proposal.
pub(crate) fn proposal_with_draft(message: &str, document: &str) -> String {
    format!("{message}\n\nProposed protocol:\n{document}")
}

/// The receiver's instructions, with its description and tools.
pub(crate) fn receiver_system(description: &str, tools: &[ToolSpec]) -> Message {
    Message::system(format!(
        "{RECEIVER_SYSTEM}\n\n{WHAT_A_PD_IS}\n\nThis agent: {description}\n\nIts tools:\n{}",
        catalogue(tools)
    ))
}

/// The schema of the sender's opening turn: a proposal, no final protocol yet.
pub(crate) fn sender_opening_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "message": {"type": "string"},
            "final_protocol": {"type": "null"}
        },
        "required": ["message", "final_protocol"],
        "additionalProperties": false
    })
}

/// The schema of the sender's later turns. The model first says whether the receiver agreed,
/// and the grammar then requires the final protocol (or forbids it): a small model left to
/// choose between a null and an object kept writing null after the receiver had agreed, round
/// after round.
pub(crate) fn sender_schema() -> Value {
    let draft = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "description": {"type": "string"},
            "document": {"type": "string"}
        },
        "required": ["name", "description", "document"],
        "additionalProperties": false
    });
    json!({
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    "receiver_agreed": {"type": "string", "enum": ["no"]},
                    "message": {"type": "string"},
                    "final_protocol": {"type": "null"}
                },
                "required": ["receiver_agreed", "message", "final_protocol"],
                "additionalProperties": false
            },
            {
                "type": "object",
                "properties": {
                    "receiver_agreed": {"type": "string", "enum": ["yes"]},
                    "message": {"type": "string"},
                    "final_protocol": draft
                },
                "required": ["receiver_agreed", "message", "final_protocol"],
                "additionalProperties": false
            }
        ]
    })
}

/// The receiver turn's schema: the verdict first, as for the suitability checker, so the
/// message explains a decision rather than talking the model into one.
pub(crate) fn receiver_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": ["agree", "change"]},
            "message": {"type": "string"}
        },
        "required": ["verdict", "message"],
        "additionalProperties": false
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_is_read_from_the_first_words_and_never_faked_by_a_change() {
        assert!(agreed("I agree. The fields are fine."));
        assert!(agreed("  i agree to this protocol"));
        assert!(!agreed("I do not agree: rename `date`."));
        assert!(!agreed("Agreed, but with `day`."));
        assert_eq!(receiver_text(true, "Fine."), "I agree. Fine.");
        assert_eq!(receiver_text(true, "I agree, fine."), "I agree, fine.");
        assert_eq!(
            receiver_text(false, "I agree with most; rename `date`."),
            "Not yet. I agree with most; rename `date`."
        );
        assert!(!agreed(&receiver_text(false, "I agree")));
    }
}
