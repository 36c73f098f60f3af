//! Whether a protocol document fits a task: a structural check first, then the LLM.
//!
//! The ladder's exploring rung gathers candidate protocols (the target's `/.wellknown`, the
//! sender's protocols for the same task with other targets, a protocol database search) and asks
//! the LLM (`checking`) whether each fits the task. A small model says yes to almost anything,
//! including a protocol written for another task (an `isOpen` protocol for `bookTable`).
//!
//! So before the LLM is asked, [`missing_fields`] checks that the document's text names every
//! field the task must send and get back. It is a necessary condition only, deterministic and
//! free: a protocol whose request cannot say `fullName` cannot book a table.
//!
//! What passes goes to the LLM, which judges what code cannot: the job (a taxi protocol has an
//! `address` and a `status`, yet it does not order food). The question asks the model to name
//! the protocol's job and the task's before it decides, and to say yes only for the same job; a
//! model still leans on names (a renamed taxi protocol accepted for a delivery request). The
//! measurements behind this are in `demo/network/RESULTS.md`.

use agora_llm::Message;
use agora_protocol::VerifiedDocument;
use serde_json::{Value, json};

use super::{MAX_PD_CHARS, schema_summary};
use crate::task::Task;

/// Whether a protocol fits a task ([`crate::Node::protocol_fit`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ProtocolFit {
    /// The document names every field of the task, and the LLM says it fits.
    Fits {
        /// The LLM's reason: the protocol's job and the task's, as it named them.
        reason: String,
    },
    /// The document does not name these fields of the task (inputs first); the LLM was not
    /// asked.
    MissingFields(Vec<String>),
    /// The document names every field, but the LLM says it does not fit (or gave no readable
    /// answer).
    Unsuitable {
        /// The LLM's reason: the protocol's job and the task's, as it named them.
        reason: String,
    },
}

impl ProtocolFit {
    /// Whether the protocol can be used for the task.
    pub fn fits(&self) -> bool {
        matches!(self, ProtocolFit::Fits { .. })
    }
}

/// The task fields that `text` (a protocol document) does not name, inputs first; empty when the
/// document could carry the task.
///
/// The fields are a schema's `required` properties, or all of its `properties` when it requires
/// none: a task whose output is all optional still wants those values, and a protocol that
/// names none of them cannot give them. Only top-level fields count (nested ones are often
/// described in prose). A field is named when its words appear in the text as whole words, in
/// order, matched case-insensitively after splitting camelCase and on any non-alphanumeric
/// character: `startDate` is named by `startDate`, `start_date`, `Start date` or `startdate`,
/// but `date` is not named by `startDate` alone.
pub(crate) fn missing_fields(task: &Task, text: &str) -> Vec<String> {
    let named = NamedWords::of(text);
    fields(&task.input_schema)
        .chain(fields(&task.output_schema))
        .filter(|field| !named.names(field))
        .map(str::to_string)
        .collect()
}

/// The names in a schema's `required` list.
pub(crate) fn required(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// A schema's required fields, or all of its properties when it requires none.
fn fields(schema: &Value) -> impl Iterator<Item = &str> {
    let required = required(schema);
    let fields = if required.is_empty() {
        schema
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|properties| properties.keys().map(String::as_str))
            .collect()
    } else {
        required
    };
    fields.into_iter()
}

/// A text as lowercase words, remembering where each of its tokens (a maximal run of letters and
/// digits) begins and ends.
struct NamedWords {
    words: Vec<String>,
    /// Whether a token begins at word `i`.
    starts: Vec<bool>,
    /// Whether a token ends after word `i`.
    ends: Vec<bool>,
    /// Every token, lowercased whole (`startdate` names `startDate`).
    tokens: std::collections::HashSet<String>,
}

impl NamedWords {
    fn of(text: &str) -> Self {
        let mut named = NamedWords {
            words: Vec::new(),
            starts: Vec::new(),
            ends: Vec::new(),
            tokens: Default::default(),
        };
        for token in tokens(text) {
            let words = camel_words(token);
            let last = words.len().saturating_sub(1);
            for (i, word) in words.into_iter().enumerate() {
                named.words.push(word);
                named.starts.push(i == 0);
                named.ends.push(i == last);
            }
            named.tokens.insert(token.to_lowercase());
        }
        named
    }

    /// Whether the text names `field` (see [`missing_fields`]).
    fn names(&self, field: &str) -> bool {
        let wanted: Vec<String> = tokens(field).flat_map(camel_words).collect();
        if wanted.is_empty() || self.tokens.contains(&wanted.concat()) {
            return true;
        }
        let n = wanted.len();
        self.words
            .windows(n)
            .enumerate()
            .any(|(i, words)| words == wanted && self.starts[i] && self.ends[i + n - 1])
    }
}

/// The maximal runs of letters and digits (`_` and `-` separate, as spaces do).
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|token| !token.is_empty())
}

/// A token's camelCase words, lowercased: `numPeople` → `num`, `people`; `HTTPServer` → `http`,
/// `server`. Digits stay with the word before them.
fn camel_words(token: &str) -> Vec<String> {
    let chars: Vec<char> = token.chars().collect();
    let mut words = Vec::new();
    let mut word = String::new();
    for (i, &c) in chars.iter().enumerate() {
        let boundary = i > 0
            && c.is_uppercase()
            && (!chars[i - 1].is_uppercase()
                || chars.get(i + 1).is_some_and(|next| next.is_lowercase()));
        if boundary && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// The messages asking whether a protocol fits a task (schema `task_fit`).
pub(crate) fn fit_messages(task: &Task, document: &VerifiedDocument) -> Vec<Message> {
    let text: String = document.text().chars().take(MAX_PD_CHARS).collect();
    vec![
        Message::system(
            "You decide whether a protocol between AI agents can be used to do a task. A protocol \
             is written for one job; using it for another job fails even when some fields look \
             alike.\nAnswer as JSON: {\"protocol_job\": \"<the job the protocol is written for, \
             in a few words>\", \"task_job\": \"<the job the task asks for, in a few words>\", \
             \"suitable\": \"yes\" or \"no\"}.\nsuitable is yes only if protocol_job and task_job \
             are the same job; it is no if they are different jobs.",
        ),
        Message::user(format!(
            "Task: {}: {}\nInput: {}\nOutput needed: {}\n\nProtocol document:\n<<<\n{}\n>>>",
            task.name,
            task.description,
            schema_summary(&task.input_schema),
            schema_summary(&task.output_schema),
            text.trim()
        )),
    ]
}

/// The `task_fit` answer schema: the protocol's job and the task's, then the decision (the model
/// names both jobs before it decides).
pub(crate) fn fit_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "protocol_job": {"type": "string", "maxLength": 120},
            "task_job": {"type": "string", "maxLength": 120},
            "suitable": {"type": "string", "enum": ["yes", "no"]}
        },
        "required": ["protocol_job", "task_job", "suitable"],
        "additionalProperties": false
    })
}

/// How many words of a task's name and description a protocol's name and description share
/// (the prefilter before asking the LLM about many candidates).
pub(crate) fn overlap(task: &Task, document: &VerifiedDocument) -> usize {
    let words = |text: &str| -> std::collections::BTreeSet<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() > 2)
            .map(str::to_lowercase)
            .collect()
    };
    let metadata = document.metadata();
    let ours = words(&format!("{} {}", task.name, task.description));
    let theirs = words(&format!(
        "{} {}",
        metadata.name.clone().unwrap_or_default(),
        metadata.description.clone().unwrap_or_default()
    ));
    ours.intersection(&theirs).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(input: Value, output: Value) -> Task {
        Task {
            name: "t".into(),
            description: "A task.".into(),
            input_schema: input,
            output_schema: output,
        }
    }

    fn object(required: &[&str], properties: &[&str]) -> Value {
        let properties: serde_json::Map<String, Value> = properties
            .iter()
            .map(|p| (p.to_string(), json!({"type": "string"})))
            .collect();
        json!({"type": "object", "required": required, "properties": properties})
    }

    /// The fields of a one-field input task that `text` leaves out.
    fn missing(field: &str, text: &str) -> Vec<String> {
        missing_fields(&task(object(&[field], &[field]), json!({})), text)
    }

    #[test]
    fn a_field_is_named_in_any_spelling_of_its_words() {
        for text in [
            "{startDate: string}",
            "start_date",
            "Start-Date",
            "the start date of the stay",
            "STARTDATE",
            "startdate",
            "\"StartDate\": \"2024-01-01\"",
        ] {
            assert!(missing("startDate", text).is_empty(), "{text:?}");
        }
        assert!(missing("start_date", "{startDate: string}").is_empty());
        assert!(missing("numPeople", "numPeople (number)").is_empty());
        assert!(missing("userID", "the user id").is_empty());
    }

    #[test]
    fn a_field_is_not_named_by_part_of_a_word_or_of_a_name() {
        assert_eq!(missing("date", "{startDate, endDate}"), ["date"]);
        assert_eq!(missing("date", "updated"), ["date"]);
        assert_eq!(missing("address", "{deliveryAddress: string}"), ["address"]);
        assert_eq!(missing("startDate", "date"), ["startDate"]);
        assert_eq!(missing("startDate", "the date to start"), ["startDate"]);
        assert_eq!(missing("movies", "{movie: string}"), ["movies"]);
        assert_eq!(missing("numPeople", "the number of people"), ["numPeople"]);
    }

    #[test]
    fn required_fields_count_and_optional_ones_do_not() {
        let booking = task(
            object(&["startDate", "endDate"], &["startDate", "endDate", "note"]),
            object(&["status"], &["status", "roomNumber", "error"]),
        );
        let text = "request: {startDate, endDate}, reply: {status}";
        assert!(missing_fields(&booking, text).is_empty());
        assert_eq!(
            missing_fields(&booking, "request: {date}, reply: {isOpen}"),
            ["startDate", "endDate", "status"]
        );
    }

    #[test]
    fn without_required_fields_every_property_counts() {
        let weather = task(object(&[], &[]), object(&[], &["weather", "windSpeed"]));
        assert!(missing_fields(&weather, "reply: {weather, wind_speed}").is_empty());
        assert_eq!(missing_fields(&weather, "reply: {weather}"), ["windSpeed"]);
        // A schema naming no field at all asks for nothing.
        let anything = task(json!({"type": "object"}), json!({}));
        assert!(missing_fields(&anything, "").is_empty());
    }

    #[test]
    fn protocols_of_the_network_demo_fit_their_own_task_only() {
        let is_open = "---\nname: isOpen\ndescription: A tool to determine if the linked \
            restaurant is open.\nmultiround: false\n---\n\nrequest: {date: string}, reply: \
            {isOpen: string}. The 'date' field should be in the format YYYY-MM-DD, and the \
            'isOpen' field should be either 'yes' or 'no'.";
        let is_open_task = task(
            object(&["date"], &["date"]),
            object(&["isOpen"], &["isOpen"]),
        );
        let get_temperature = task(
            object(&["date", "location"], &["location", "date"]),
            object(&["temperature"], &["temperature"]),
        );
        assert!(missing_fields(&is_open_task, is_open).is_empty());
        assert_eq!(
            missing_fields(&get_temperature, is_open),
            ["location", "temperature"]
        );
    }

    #[test]
    fn the_fit_question_has_no_runs_of_spaces() {
        let document = VerifiedDocument::from_text("request: {date}");
        let task = task(object(&["date"], &["date"]), json!({}));
        for message in fit_messages(&task, &document) {
            assert!(!message.content.contains("  "), "{}", message.content);
        }
    }

    #[test]
    fn camel_case_splits_at_case_changes_and_acronyms() {
        assert_eq!(camel_words("numPeople"), ["num", "people"]);
        assert_eq!(camel_words("HTTPServer"), ["http", "server"]);
        assert_eq!(camel_words("address2Line"), ["address2", "line"]);
        assert_eq!(camel_words("ÉtéDate"), ["été", "date"]);
        assert_eq!(camel_words("date"), ["date"]);
    }
}
