//! The suitability checker: can this node serve a protocol?
//!
//! The LLM reads the protocol document next to the node's description and
//! tools and answers a JSON-schema-constrained yes/no with a short reason.
//! The decision is cached per hash by the caller; an operator decision
//! (`agora pd allow|deny`) always wins over the LLM's. A document that builds
//! on others (its `references`) is shown with them, within the same length.

use agora_llm::{ChatRequest, Message};
use agora_protocol::VerifiedDocument;
use serde_json::{Value, json};

use crate::accounting::{Accountant, Category, QueryContext};
use crate::text::first_chars;
use crate::tools::{ToolSpec, catalogue};

/// Characters of a PD shown to the checker; longer documents are cut.
const MAX_PD_CHARS: usize = 8000;

/// The checker's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Whether the node can serve the protocol.
    pub suitable: bool,
    /// Why, in the LLM's words.
    pub reason: String,
}

/// Why the checker could not decide.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The LLM call failed.
    #[error("suitability check failed: {0}")]
    Llm(#[from] agora_llm::LlmError),
    /// The LLM's answer did not match the schema.
    #[error("suitability check gave an unreadable answer: {0}")]
    Unreadable(String),
}

/// Asks the LLM whether the node can serve `document`, which builds on `references`.
pub async fn check(
    accountant: &Accountant,
    context: &QueryContext,
    description: &str,
    tools: &[ToolSpec],
    document: &VerifiedDocument,
    references: &[VerifiedDocument],
) -> Result<Verdict, CheckError> {
    let mut text = document.text().to_string();
    for referenced in references {
        text.push_str(&format!(
            "\n\nIt builds on the protocol document with hash {}:\n{}",
            referenced.hash().to_hex(),
            referenced.text()
        ));
    }
    let text: String = text.chars().take(MAX_PD_CHARS).collect();
    let mut messages = vec![Message::system(SYSTEM)];
    for (pd, answer) in EXAMPLES {
        messages.push(Message::user(question(EXAMPLE_AGENT, EXAMPLE_TOOLS, pd)));
        messages.push(Message::assistant(*answer));
    }
    messages.push(Message::user(question(
        description,
        &catalogue(tools),
        &text,
    )));
    let request = ChatRequest::new(messages)
        .json_schema("suitability", schema())
        .max_tokens(120);
    let response = accountant
        .chat(Category::Checking, context, &request)
        .await?;
    parse_verdict(&response.content)
}

// Measured on Qwen2.5-Coder-1.5B over a probe set of fitting, near-miss and
// unrelated protocols: the decision before the reason, a warning that the
// agent can do no more than its tools, and worked examples from an unrelated
// domain (currency) were the most accurate combination tried; a reason
// written first tends to talk the small model into "yes".
const SYSTEM: &str = "You review protocol documents for an agent in an Agora network. A protocol \
    document describes the messages a sender will send and the replies it expects. Decide whether \
    this agent can serve such requests correctly with its purpose and its tools. Answer yes only \
    when the tools can supply the information or action the protocol asks for; answer no when the \
    protocol is about something the agent cannot do. The agent cannot do anything its tools do not do.";

const EXAMPLE_AGENT: &str = "Carol is a currency service. It converts amounts between currencies.";
const EXAMPLE_TOOLS: &str = "- currency_rates: Returns the exchange rate between two currencies on a date.\n  \
    arguments: {\"type\":\"object\",\"properties\":{\"from\":{\"type\":\"string\"},\"to\":{\"type\":\"string\"},\"date\":{\"type\":\"string\"}}}";
const EXAMPLES: &[(&str, &str)] = &[
    (
        "---\nname: HotelBooking\ndescription: Book a hotel room.\nmultiround: false\n---\n\nRequest: {\"city\": string, \"checkIn\": \"YYYY-MM-DD\", \"nights\": integer}. Reply: {\"reservationId\": string}.\n",
        r#"{"suitable": "no", "reason": "The protocol books hotel rooms; the agent only knows exchange rates."}"#,
    ),
    (
        "---\nname: ConvertAmount\ndescription: Convert an amount of money.\nmultiround: false\n---\n\nRequest: {\"amount\": number, \"from\": string, \"to\": string}. Reply: {\"converted\": number}.\n",
        r#"{"suitable": "yes", "reason": "The currency_rates tool gives the rate needed to convert the amount."}"#,
    ),
    (
        "---\nname: MoneyTransfer\ndescription: Send money to another bank account.\nmultiround: false\n---\n\nRequest: {\"amount\": number, \"currency\": string, \"iban\": string, \"date\": \"YYYY-MM-DD\"}. Reply: {\"transferId\": string}.\n",
        r#"{"suitable": "no", "reason": "The protocol asks for an action, sending money; the tools can only look up rates, so the agent cannot do it."}"#,
    ),
    (
        "---\nname: StockPrice\ndescription: Latest price of a share.\nmultiround: false\n---\n\nRequest: {\"symbol\": string}. Reply: {\"price\": number}.\n",
        r#"{"suitable": "no", "reason": "Share prices are not exchange rates; no tool gives them."}"#,
    ),
];

fn question(description: &str, tools: &str, document: &str) -> String {
    format!(
        "Agent description: {description}\n\nAgent tools:\n{tools}\n\nProtocol document:\n<<<\n{document}\n>>>\n\n\
         Can this agent serve requests that follow this protocol?"
    )
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "suitable": {"type": "string", "enum": ["yes", "no"]},
            "reason": {"type": "string", "maxLength": 200}
        },
        "required": ["suitable", "reason"],
        "additionalProperties": false
    })
}

fn parse_verdict(content: &str) -> Result<Verdict, CheckError> {
    let value: Value = serde_json::from_str(content.trim())
        .map_err(|e| CheckError::Unreadable(format!("{e}: {}", first_chars(content, 200))))?;
    let suitable = match value.get("suitable").and_then(Value::as_str) {
        Some(answer) if answer.eq_ignore_ascii_case("yes") => true,
        Some(answer) if answer.eq_ignore_ascii_case("no") => false,
        _ => return Err(CheckError::Unreadable(first_chars(content, 200))),
    };
    let reason = value
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_string();
    Ok(Verdict { suitable, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_parse() {
        assert_eq!(
            parse_verdict(r#"{"reason": "weather tool", "suitable": "yes"}"#).unwrap(),
            Verdict {
                suitable: true,
                reason: "weather tool".into()
            }
        );
        assert!(!parse_verdict(r#"{"suitable": "NO"}"#).unwrap().suitable);
        assert!(parse_verdict("maybe").is_err());
        assert!(parse_verdict(r#"{"suitable": "perhaps"}"#).is_err());
    }
}
