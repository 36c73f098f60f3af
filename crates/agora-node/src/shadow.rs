//! Shadow checks' state and judgement, free of the node: which requests are sampled, the queue
//! of sampled requests waiting for their check, the routines that cannot be checked, and how a
//! routine's answer is compared with the LLM's. The checks themselves are the receiver's
//! (`node::shadow`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use agora_protocol::{ProtocolHash, Request};
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::programmer::exam;
use crate::routine_table::ActiveRoutine;
use crate::tools::ScratchTools;

/// A sampled request, waiting for its check.
pub(crate) struct ShadowJob {
    /// The request the routine answered.
    pub(crate) query_id: String,
    pub(crate) routine: Arc<ActiveRoutine>,
    pub(crate) request: Request,
    /// The routine's reply body, as text.
    pub(crate) routine_reply: String,
    /// The tools over copies of the state the routine saw.
    pub(crate) scratch: ScratchTools,
}

/// The node's shadow checks: sampling, the queue and its worker, and the routines that cannot
/// be checked.
pub(crate) struct Shadows {
    /// Routine-answered requests seen, by protocol.
    seen: Mutex<HashMap<ProtocolHash, u64>>,
    /// Why a routine is not checked, by routine id.
    unchecked: Mutex<HashMap<i64, String>>,
    /// Created with the worker, on the first check.
    pub(crate) sender: OnceLock<mpsc::Sender<ShadowJob>>,
    /// Checks waiting or running, for [`Shadows::idle`].
    pub(crate) outstanding: watch::Sender<usize>,
}

impl Shadows {
    pub(crate) fn new() -> Self {
        Self {
            seen: Mutex::new(HashMap::new()),
            unchecked: Mutex::new(HashMap::new()),
            sender: OnceLock::new(),
            outstanding: watch::Sender::new(0),
        }
    }

    /// Whether the next routine-answered request of `hash` is checked: the `n`-th is when
    /// `n * share` passes a whole number.
    pub(crate) fn sample(&self, hash: &ProtocolHash, share: f64) -> bool {
        if share.is_nan() || share <= 0.0 {
            return false;
        }
        let share = share.min(1.0);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let n = seen.entry(*hash).or_insert(0);
        *n += 1;
        (*n as f64 * share).floor() > ((*n - 1) as f64 * share).floor()
    }

    /// Why the routine `routine_id` is not shadow-checked, if a sampled request found out.
    pub(crate) fn unchecked(&self, routine_id: i64) -> Option<String> {
        let unchecked = self.unchecked.lock().unwrap_or_else(|p| p.into_inner());
        unchecked.get(&routine_id).cloned()
    }

    pub(crate) fn note_unchecked(&self, routine_id: i64, reason: String) {
        let mut unchecked = self.unchecked.lock().unwrap_or_else(|p| p.into_inner());
        unchecked.insert(routine_id, reason);
    }

    /// Waits until no check is waiting or running.
    pub(crate) async fn idle(&self) {
        let mut outstanding = self.outstanding.subscribe();
        // The sender lives as long as `self`, so this only ends when the count is zero.
        let _ = outstanding.wait_for(|n| *n == 0).await;
    }

    pub(crate) fn done(&self) {
        self.outstanding.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// How a check's two answers compare.
pub(crate) struct Verdict {
    pub(crate) agreed: bool,
    pub(crate) difference: String,
}

/// Compares a routine's answer with the LLM's: the replies graded as the examination grades a
/// candidate against an example (the LLM's reply is the expected one), then the effects.
pub(crate) fn compare(
    document: &str,
    routine_reply: &str,
    llm_reply: &str,
    llm_tool_calls: &Value,
    routine_states: &BTreeMap<String, Value>,
    llm_states: &BTreeMap<String, Value>,
) -> Verdict {
    let schema = exam::reply_schema(document).and_then(|s| jsonschema::validator_for(&s).ok());
    let calls = exam::recorded_calls(llm_tool_calls);
    if let Err(difference) = exam::grade(llm_reply, routine_reply, &calls, schema.as_ref()) {
        return Verdict {
            agreed: false,
            difference: format!("replies differ: {difference}"),
        };
    }
    let differing: Vec<&str> = routine_states
        .iter()
        .filter(|(tool, state)| {
            !llm_states
                .get(*tool)
                .is_some_and(|other| exam::json_equivalent(state, other))
        })
        .map(|(tool, _)| tool.as_str())
        .collect();
    if !differing.is_empty() {
        return Verdict {
            agreed: false,
            difference: format!(
                "effects differ: the state behind {} is not the same after each",
                differing.join(", ")
            ),
        };
    }
    Verdict {
        agreed: true,
        difference: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sampling_takes_every_nth_request_of_a_protocol() {
        let shadows = Shadows::new();
        let hash = ProtocolHash::of(b"p");
        let taken: Vec<bool> = (0..10).map(|_| shadows.sample(&hash, 0.25)).collect();
        assert_eq!(
            taken,
            [
                false, false, false, true, false, false, false, true, false, false
            ]
        );
        assert!((0..5).all(|_| shadows.sample(&hash, 1.0)));
        assert!((0..5).all(|_| !shadows.sample(&hash, 0.0)));
    }

    #[test]
    fn answers_are_compared_as_values_and_effects_as_states() {
        let none = BTreeMap::new();
        let same = compare(
            "",
            r#"{"a": 1, "b": 2}"#,
            r#"{"b": 2.0, "a": 1}"#,
            &json!([]),
            &none,
            &none,
        );
        assert!(same.agreed, "{}", same.difference);
        let other = compare("", r#"{"a": 1}"#, r#"{"a": 2}"#, &json!([]), &none, &none);
        assert!(!other.agreed);
        assert!(
            other.difference.starts_with("replies differ"),
            "{}",
            other.difference
        );
        let before = BTreeMap::from([("db".to_string(), json!({"t": [1]}))]);
        let after = BTreeMap::from([("db".to_string(), json!({"t": [1, 2]}))]);
        let effects = compare("", "{}", "{}", &json!([]), &before, &after);
        assert!(!effects.agreed);
        assert!(effects.difference.contains("db"), "{}", effects.difference);
    }
}
