//! Grounding: an LLM answer is evidence for the programmer only when its data comes from
//! somewhere. A reply whose data no tool returned is not kept as an example, so no routine is
//! examined against it (and none learns to repeat it).
//!
//! A reply is ungrounded when:
//! - tools were on offer, none was called successfully, and nothing in the reply comes from the
//!   node's description: the answer rests on nothing (a small model often answers a booking
//!   "failure" without looking);
//! - a value in it that a program would read (a string with no white space: an id, a code, a
//!   date) is in neither the request, a tool result, the protocol document nor the description;
//! - a number stands under a member name that names the same quantity as a tool result's member
//!   (a word of four letters or more in common: `temperature` and `temperature_c`), with another
//!   value (the model wrote 12 °C where the tool said 3).
//!
//! Free text (a string with spaces) is wording, not data, and numbers under other names may be
//! computed (a fare with its surcharges), so neither is checked further.

use serde_json::Value;

use crate::focus::Focus;
use crate::text::same_quantity;
use crate::tools::ToolCall;

/// What a reply is judged against.
pub(crate) struct Sources<'a> {
    /// The request body.
    pub(crate) request: &'a str,
    /// The successful tool results.
    pub(crate) results: Vec<&'a Value>,
    /// Whether any tool was on offer.
    pub(crate) tools_offered: bool,
    /// The protocol document's text.
    pub(crate) document: &'a str,
    /// The node's description (as the LLM saw it).
    pub(crate) description: &'a str,
}

impl<'a> Sources<'a> {
    /// What an answer to `request` is judged against: the successful results of its `calls`,
    /// and the document and focus it was answered under.
    pub(crate) fn of(
        request: &'a str,
        calls: &'a [ToolCall],
        document: &'a str,
        focus: &'a Focus,
    ) -> Self {
        Self {
            request,
            results: calls
                .iter()
                .filter_map(|call| call.result.as_ref().ok())
                .collect(),
            tools_offered: !focus.tools.is_empty(),
            document,
            description: &focus.description,
        }
    }
}

/// Why `reply` is not grounded in `sources`; `None` when it is.
pub(crate) fn ungrounded(reply: &Value, sources: &Sources<'_>) -> Option<String> {
    if let Some(reason) = rests_on_nothing(reply, sources) {
        return Some(reason);
    }
    let mut leaves = Vec::new();
    collect_leaves(None, reply, &mut leaves);
    let results_text: Vec<String> = sources.results.iter().map(|r| r.to_string()).collect();
    for (name, leaf) in &leaves {
        match leaf {
            Value::String(text) if !text.is_empty() && !text.contains(char::is_whitespace) => {
                let known = found_in(text, sources.request)
                    || results_text.iter().any(|r| found_in(text, r))
                    || found_in(text, sources.document)
                    || found_in(text, sources.description);
                if !known {
                    return Some(format!(
                        "the reply's {text:?} comes from no tool, request or document"
                    ));
                }
            }
            Value::Number(number) => {
                let Some(name) = name else { continue };
                let Some(value) = number.as_f64() else {
                    continue;
                };
                let mut same_name = Vec::new();
                for result in &sources.results {
                    numbers_named(result, name, &mut same_name);
                }
                if !same_name.is_empty() && !same_name.iter().any(|v| (v - value).abs() < 1e-9) {
                    return Some(format!(
                        "the reply's {name} {number} is not what the tool said ({})",
                        same_name
                            .iter()
                            .map(f64::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
            _ => {}
        }
    }
    None
}

/// Why `reply` rests on nothing, if it does: tools were on offer, none was called successfully,
/// and nothing in the reply comes from the node's description (the first rule of
/// [`ungrounded`], and the only one a program for a natural-language message is held to, whose
/// reply names its members as it likes).
pub(crate) fn rests_on_nothing(reply: &Value, sources: &Sources<'_>) -> Option<String> {
    if !sources.tools_offered || !sources.results.is_empty() {
        return None;
    }
    let mut leaves = Vec::new();
    collect_leaves(None, reply, &mut leaves);
    let from_description = leaves.iter().any(|(_, leaf)| match leaf {
        Value::String(text) => text
            .split(|c: char| !c.is_alphanumeric() && c != ':' && c != '-')
            .filter(|word| word.len() >= 4 && !found_in(word, sources.document))
            .any(|word| found_in(word, sources.description)),
        Value::Number(number) => {
            let spelled = number.to_string();
            !found_in(&spelled, sources.document) && found_in(&spelled, sources.description)
        }
        _ => false,
    });
    (!from_description).then(|| {
        "tools were on offer but none was used, and nothing in the reply comes from the node's \
         description"
            .into()
    })
}

/// Whether `haystack` holds `text`, case aside.
fn found_in(text: &str, haystack: &str) -> bool {
    haystack.to_lowercase().contains(&text.to_lowercase())
}

/// A number in `reply` that none of `sources` holds, when tools were on offer and none was
/// called successfully: the answer made it up (a small model answers a forecast without looking
/// it up). Numbers are compared by value (and without their sign) with the runs of digits and
/// dots in the sources' texts.
pub(crate) fn unlooked_number(reply: &Value, sources: &Sources<'_>) -> Option<String> {
    if !sources.tools_offered || !sources.results.is_empty() {
        return None;
    }
    let mut leaves = Vec::new();
    collect_leaves(None, reply, &mut leaves);
    let mut known: Vec<f64> = Vec::new();
    for text in [sources.request, sources.document, sources.description] {
        known.extend(
            text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .filter_map(|token| token.trim_matches('.').parse::<f64>().ok()),
        );
    }
    leaves.iter().find_map(|(_, leaf)| {
        let number = leaf.as_f64()?;
        (!known.iter().any(|k| (k - number.abs()).abs() < 1e-9)).then(|| number.to_string())
    })
}

/// Every scalar leaf of `value`, with the name of the member holding it.
fn collect_leaves<'v>(
    name: Option<&'v str>,
    value: &'v Value,
    out: &mut Vec<(Option<&'v str>, &'v Value)>,
) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                collect_leaves(Some(key), child, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                collect_leaves(name, item, out);
            }
        }
        leaf => out.push((name, leaf)),
    }
}

/// The numbers anywhere in `value` under a member called `name`.
fn numbers_named(value: &Value, name: &str, out: &mut Vec<f64>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if same_quantity(key, name)
                    && let Some(number) = child.as_f64()
                {
                    out.push(number);
                }
                numbers_named(child, name, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| numbers_named(item, name, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const DOCUMENT: &str = "reply: {status: success | failure, temperature: number, code}";
    const DESCRIPTION: &str = "A resort. Open 09:00-17:00 except Sundays.";

    fn sources<'a>(request: &'a str, results: Vec<&'a Value>, tools_offered: bool) -> Sources<'a> {
        Sources {
            request,
            results,
            tools_offered,
            document: DOCUMENT,
            description: DESCRIPTION,
        }
    }

    #[test]
    fn an_answer_without_looking_is_not_evidence() {
        let reply = json!({"status": "failure"});
        assert!(ungrounded(&reply, &sources("{}", vec![], true)).is_some());
        // With no tool to call, the document's words are all there is.
        assert!(ungrounded(&reply, &sources("{}", vec![], false)).is_none());
        // From the description: evidence enough.
        let hours = json!({"openingTimes": "09:00-17:00"});
        assert!(ungrounded(&hours, &sources("{}", vec![], true)).is_none());
        let rows = json!([{"SkiId": "A1"}]);
        assert!(ungrounded(&reply, &sources("{}", vec![&rows], true)).is_none());
    }

    #[test]
    fn a_number_from_nowhere_is_found_only_when_no_tool_was_called() {
        let forecast = json!({"header": {"version": "1.0"}, "body": {"temperature": 15.5}});
        let reason = unlooked_number(&forecast, &sources("{}", vec![], true));
        assert_eq!(reason.as_deref(), Some("15.5"));
        // A number the request, document or description holds is not made up.
        let request = r#"{"nights": 15.5}"#;
        assert_eq!(
            unlooked_number(&forecast, &sources(request, vec![], true)),
            None
        );
        let hours = json!({"opens": 9, "closes": 17});
        assert_eq!(unlooked_number(&hours, &sources("{}", vec![], true)), None);
        // Once a tool was called, or with no tool to call, this check says nothing.
        let rows = json!([{"t": 1}]);
        assert_eq!(
            unlooked_number(&forecast, &sources("{}", vec![&rows], true)),
            None
        );
        assert_eq!(
            unlooked_number(&forecast, &sources("{}", vec![], false)),
            None
        );
    }

    #[test]
    fn an_invented_value_is_refused_and_a_looked_up_one_kept() {
        let rows = json!([{"SkiId": "A1"}]);
        let request = r#"{"date": "2024-01-05"}"#;
        let invented = json!({"status": "success", "code": "B7"});
        let reason = ungrounded(&invented, &sources(request, vec![&rows], true)).unwrap();
        assert!(reason.contains("\"B7\""), "{reason}");
        let looked_up = json!({"status": "success", "code": "A1", "on": "2024-01-05"});
        assert!(ungrounded(&looked_up, &sources(request, vec![&rows], true)).is_none());
        // Wording is not data.
        let worded = json!({"status": "success", "message": "Enjoy your skis!"});
        assert!(ungrounded(&worded, &sources(request, vec![&rows], true)).is_none());
    }

    #[test]
    fn a_number_that_contradicts_the_tool_is_refused() {
        assert!(same_quantity("temperature", "temperature_c"));
        assert!(same_quantity("maxTemperature", "temperature"));
        assert!(!same_quantity("price", "temperature"));
        let forecast = json!({"temperature": 3.0});
        let wrong = json!({"status": "success", "temperature": 12});
        let reason = ungrounded(&wrong, &sources("{}", vec![&forecast], true)).unwrap();
        assert!(reason.contains("temperature 12"), "{reason}");
        let right = json!({"status": "success", "temperature": 3});
        assert!(ungrounded(&right, &sources("{}", vec![&forecast], true)).is_none());
        // A number under a name no tool used may be computed.
        let fare = json!({"status": "success", "price": 36});
        assert!(ungrounded(&fare, &sources("{}", vec![&forecast], true)).is_none());
    }
}
