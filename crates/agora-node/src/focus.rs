//! Task focus: the part of the node's description, and the tools, that bear on one protocol.
//!
//! A node's description often carries rules for several kinds of request ("a room may be booked
//! only if the getTemperature forecast ...; skis are rented from the database; asked for a
//! restaurant, it asks isOpen ..."). A small model given every rule applies the wrong one (a ski
//! rental answered by the room rule's `getTemperature` and the restaurant rule's `isOpen`, then
//! refused). So a protocol request is answered with its focus:
//!
//! - the description's first sentence (who the node is) always stays;
//! - every other sentence stays when it shares a word stem with the protocol document (its name,
//!   description and text, camelCase split, common and format words left out);
//! - a tool that the description names is offered only when a sentence that stays names it; a
//!   tool the description never names is general-purpose and always offered.
//!
//! When no sentence after the first shares a stem with the document, nothing is known about what
//! applies, and the whole description and every tool stay. The focus is pure and deterministic;
//! the same focus is used to answer, to record the programmer's examples and to grant a routine
//! its tools, so that the routine is written for what the responder saw.

use std::collections::BTreeSet;

use crate::tools::ToolSpec;

/// The description and tools for one protocol.
#[derive(Debug, Clone, PartialEq)]
pub struct Focus {
    /// The sentences of the node's description that apply, in their order.
    pub description: String,
    /// The tools offered, in the registry's order.
    pub tools: Vec<ToolSpec>,
    /// The offered tools that a kept sentence names: the rules for this request use them, so
    /// the responder asks for them to be called before it takes an answer (empty when the
    /// focus is everything: nothing is known then about which rules apply).
    pub rule_tools: Vec<String>,
}

impl Focus {
    /// The whole description and every tool.
    pub fn everything(description: &str, tools: Vec<ToolSpec>) -> Focus {
        Focus {
            description: description.to_string(),
            tools,
            rule_tools: Vec::new(),
        }
    }

    /// The focus of `description` and `tools` on `topic` (a protocol document's text).
    pub fn on(description: &str, tools: Vec<ToolSpec>, topic: &str) -> Focus {
        let sentences = sentences(description);
        if sentences.len() < 2 {
            return Focus::everything(description, tools);
        }
        let topic = stems(topic);
        let keep: Vec<bool> = sentences
            .iter()
            .enumerate()
            .map(|(index, sentence)| index == 0 || shares_a_stem(&stems(sentence), &topic))
            .collect();
        if keep.iter().skip(1).all(|kept| !kept) {
            return Focus::everything(description, tools);
        }
        // A tool named by no sentence is general-purpose; a named one goes with its sentences.
        let offered = |tool: &ToolSpec| {
            let mut naming = sentences
                .iter()
                .zip(&keep)
                .filter(|(s, _)| names(s, &tool.name));
            naming.clone().next().is_none() || naming.any(|(_, kept)| *kept)
        };
        let tools: Vec<ToolSpec> = tools.into_iter().filter(|tool| offered(tool)).collect();
        let rule_tools = tools
            .iter()
            .filter(|tool| {
                sentences
                    .iter()
                    .zip(&keep)
                    .any(|(sentence, kept)| *kept && names(sentence, &tool.name))
            })
            .map(|tool| tool.name.clone())
            .collect();
        let description = sentences
            .iter()
            .zip(&keep)
            .filter(|(_, kept)| **kept)
            .map(|(sentence, _)| sentence.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        Focus {
            description,
            tools,
            rule_tools,
        }
    }

    /// The names of the tools offered.
    pub fn tool_names(&self) -> Vec<String> {
        self.tools.iter().map(|tool| tool.name.clone()).collect()
    }
}

/// The sentences of `text`: split after `.`, `!` or `?` followed by white space (so "12:00",
/// "$1.50" and "e.g." inside a sentence stay whole), trimmed, empty ones dropped.
fn sentences(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        current.push(c);
        if matches!(c, '.' | '!' | '?') && chars.peek().is_none_or(|next| next.is_whitespace()) {
            let sentence = current.trim();
            if !sentence.is_empty() {
                found.push(sentence.to_string());
            }
            current.clear();
        }
    }
    let rest = current.trim();
    if !rest.is_empty() {
        found.push(rest.to_string());
    }
    found
}

/// Whether `sentence` names `tool` as a word of its own.
fn names(sentence: &str, tool: &str) -> bool {
    sentence
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
        .any(|word| word == tool)
}

/// Words that say nothing about what a request is for: English function words, and the words
/// every protocol document uses for its format.
const STOP_WORDS: &[&str] = &[
    "about",
    "after",
    "agree",
    "all",
    "also",
    "and",
    "answers",
    "another",
    "answer",
    "any",
    "are",
    "array",
    "ask",
    "asked",
    "been",
    "before",
    "being",
    "between",
    "boolean",
    "both",
    "but",
    "can",
    "date",
    "day",
    "each",
    "either",
    "else",
    "enum",
    "error",
    "false",
    "field",
    "fields",
    "final",
    "for",
    "format",
    "from",
    "get",
    "give",
    "given",
    "has",
    "have",
    "if",
    "integer",
    "into",
    "its",
    "json",
    "may",
    "message",
    "more",
    "multiround",
    "must",
    "name",
    "need",
    "needed",
    "never",
    "new",
    "not",
    "now",
    "null",
    "number",
    "object",
    "one",
    "only",
    "optional",
    "other",
    "otherwise",
    "our",
    "out",
    "over",
    "proposal",
    "protocol",
    "receiver",
    "reply",
    "request",
    "required",
    "response",
    "result",
    "say",
    "says",
    "sender",
    "should",
    "some",
    "status",
    "string",
    "success",
    "such",
    "than",
    "that",
    "the",
    "their",
    "them",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "time",
    "tool",
    "true",
    "two",
    "type",
    "use",
    "used",
    "uses",
    "using",
    "value",
    "was",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "will",
    "with",
    "within",
    "without",
    "would",
    "yes",
    "you",
    "your",
    "yyyy",
    // Words every protocol document's boilerplate uses.
    "agora",
    "bodies",
    "body",
    "cannot",
    "code",
    "dates",
    "failure",
    "fence",
    "input",
    "instead",
    "output",
    "plain",
    "served",
    "short",
    "task",
    "text",
    "unless",
    "why",
];

/// The stems of the content words of `text` (camelCase split, lower-cased, common and format
/// words left out, a plural or verb ending taken off).
fn stems(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .flat_map(camel_words)
        .map(|word| word.to_lowercase())
        .filter(|word| word.len() >= 3 && word.chars().all(char::is_alphabetic))
        .filter(|word| !STOP_WORDS.contains(&word.as_str()))
        .map(|word| one_meaning(stem(&word)))
        .collect()
}

/// Stems that mean the same for what a request is about, and the one that stands for them: a
/// document asks for a ride's `price` where the description says what a ride `costs`.
const SAME_MEANING: &[(&str, &[&str])] = &[(
    "price",
    &["cost", "fare", "fee", "charge", "charg", "pay", "paid"],
)];

fn one_meaning(stem: String) -> String {
    SAME_MEANING
        .iter()
        .find(|(_, words)| words.contains(&stem.as_str()))
        .map(|(meaning, _)| meaning.to_string())
        .unwrap_or(stem)
}

/// `getAvailableTaxi` → `get`, `Available`, `Taxi`.
fn camel_words(word: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in word.chars() {
        if c.is_uppercase() && previous_lower && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        current.push(c);
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

/// A crude English stem: a plural or verb ending off, as long as three letters remain.
fn stem(word: &str) -> String {
    for ending in ["ings", "ing", "ies", "ed", "es", "s"] {
        if let Some(root) = word.strip_suffix(ending)
            && root.len() >= 3
        {
            return match ending {
                "ies" => format!("{root}y"),
                _ => root.to_string(),
            };
        }
    }
    word.to_string()
}

/// Whether two sets of stems meet: the same stem, or one a prefix of the other of at least four
/// letters ("rent" and "rental").
fn shares_a_stem(a: &BTreeSet<String>, b: &BTreeSet<String>) -> bool {
    a.iter().any(|x| {
        b.iter().any(|y| {
            x == y
                || (x.len().min(y.len()) >= 4
                    && (x.starts_with(y.as_str()) || y.starts_with(x.as_str())))
        })
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: json!({"type": "object"}),
            returns: None,
        }
    }

    const RESORT: &str = "A ski resort near Graz. A room may be booked only if it is free and \
        the forecastFor tool gives between -5 and +2 degrees for the date. Skis are rented from \
        the database; no room booking is needed for that. Asked for a cafe, it recommends Kaffeehaus \
        Graz if the cafeOpen tool says it is open on that date.";

    fn resort_tools() -> Vec<ToolSpec> {
        vec![
            tool("forecastFor", "The temperature forecast for a day."),
            tool("cafeOpen", "Whether the linked cafe is open."),
            tool("run_sql_query", "One SQL statement on the database."),
        ]
    }

    #[test]
    fn a_rule_for_another_kind_of_request_and_its_tool_are_left_out() {
        let topic = "---\nname: hireSkis\ndescription: Hire skis for a day\n---\nA JSON object \
                     with date and kind of ski; the reply has status.";
        let focus = Focus::on(RESORT, resort_tools(), topic);
        assert_eq!(
            focus.description,
            "A ski resort near Graz. Skis are rented from the database; no room booking is \
             needed for that."
        );
        assert_eq!(focus.tool_names(), vec!["run_sql_query"]);
        assert!(focus.rule_tools.is_empty());
    }

    #[test]
    fn the_rule_that_applies_keeps_the_tool_it_names() {
        let topic = "name: reserveRoom\ndescription: Book a room for some nights.";
        let focus = Focus::on(RESORT, resort_tools(), topic);
        assert!(focus.description.contains("forecastFor tool"));
        assert!(!focus.description.contains("cafe"));
        assert_eq!(focus.tool_names(), vec!["forecastFor", "run_sql_query"]);
        assert_eq!(focus.rule_tools, vec!["forecastFor"]);

        let topic = "name: cafeTip\ndescription: Which cafe do you recommend on a date?";
        let focus = Focus::on(RESORT, resort_tools(), topic);
        assert_eq!(focus.tool_names(), vec!["cafeOpen", "run_sql_query"]);
        assert_eq!(focus.rule_tools, vec!["cafeOpen"]);
    }

    #[test]
    fn with_nothing_in_common_everything_stays() {
        let focus = Focus::on(
            RESORT,
            resort_tools(),
            "name: weather\ndescription: Forecast.",
        );
        // "forecast" is in the room rule: only that one stays.
        assert_eq!(focus.tool_names(), vec!["forecastFor", "run_sql_query"]);
        let focus = Focus::on(
            RESORT,
            resort_tools(),
            "name: jokes\ndescription: Tell a joke.",
        );
        assert_eq!(focus, Focus::everything(RESORT, resort_tools()));
        let single = "A weather service with a forecast tool.";
        assert_eq!(
            Focus::on(single, resort_tools(), "skis"),
            Focus::everything(single, resort_tools())
        );
    }

    #[test]
    fn a_rule_about_what_a_ride_costs_applies_to_a_request_for_its_price() {
        let cabs = "A cab company. It finds a free cab (freeCab). A ride costs $20, plus 10% \
                    when the skyNow tool says snow.";
        let tools = vec![
            tool("freeCab", "A free cab."),
            tool("skyNow", "The weather now."),
        ];
        let topic = "name: orderCab\ndescription: Order a cab; the reply gives its price.";
        let focus = Focus::on(cabs, tools, topic);
        assert!(
            focus.description.ends_with("says snow."),
            "{}",
            focus.description
        );
        assert_eq!(focus.rule_tools, vec!["freeCab", "skyNow"]);
    }

    #[test]
    fn sentences_split_at_ends_only() {
        assert_eq!(
            sentences("Open 12:00-22:00, $1.50 a cup. Closed Monday! Why? Because"),
            vec![
                "Open 12:00-22:00, $1.50 a cup.",
                "Closed Monday!",
                "Why?",
                "Because"
            ]
        );
        assert_eq!(
            camel_words("getAvailableTaxi"),
            vec!["get", "Available", "Taxi"]
        );
        assert_eq!(stem("rented"), "rent");
        assert_eq!(stem("bookings"), "book");
        assert_eq!(stem("skis"), "ski");
        assert_eq!(stem("ski"), "ski");
        assert!(shares_a_stem(&stems("rental"), &stems("rent")));
        assert!(!shares_a_stem(&stems("the date"), &stems("a date")));
    }
}
