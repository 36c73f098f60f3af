//! The servers' switches a run may turn on beyond the paper's setup. Each is off by default,
//! because each changes what the committed cassettes replay; a run record carries the ones that
//! were on, and only those, so a record written before a switch existed reads and writes the
//! same bytes.

use std::ops::Not;

use agora_node::{Grading, NodeConfig};
use serde::{Deserialize, Serialize};

/// Switches for every server of a run: from `agora demo network`'s flags, through the workers,
/// into each server's node configuration and the run record (flattened into both).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerSwitches {
    /// Code as action's programs are held to where their data comes from
    /// (`responder.ground_programs`; see `agora_node::acting`).
    #[serde(default, skip_serializing_if = "Not::not")]
    pub ground_programs: bool,
    /// The servers' `run_sql_query` takes `params` for its `?` placeholders and refuses a
    /// statement they do not match (`SqlTool::with_params`); without it a placeholder matches
    /// NULL.
    #[serde(default, skip_serializing_if = "Not::not")]
    pub sql_params: bool,
    /// The fewest examples a server's programmer examines a first routine on (`0` or `1`: the
    /// paper's first use; `programmer.min_examples`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_examples: u32,
    /// A candidate routine's replies may differ from the recorded ones in empty members and in
    /// the wording of short texts (`programmer.grading = "lenient"`).
    #[serde(default, skip_serializing_if = "Not::not")]
    pub lenient_grading: bool,
    /// A repeated candidate is asked for once more at this temperature
    /// (`programmer.resample_temperature`; `0`: not).
    #[serde(default, skip_serializing_if = "is_zero_temperature")]
    pub resample_temperature: f32,
    /// A server answers a natural-language message with a program it writes for that message
    /// before its tool loop (`responder.natural_code_as_action`; in `agora` mode only).
    #[serde(default, skip_serializing_if = "Not::not")]
    pub natural_programs: bool,
    /// Tool arguments are held to their types: a JavaScript program's tool call with an
    /// `undefined` array element is refused (the routine runtime's
    /// `refuse_undefined_arguments`; otherwise it is sent as `null`), and `run_sql_query`
    /// refuses an array or object among its `params` (`SqlTool::with_scalar_params`; otherwise
    /// it is bound as its JSON text).
    #[serde(default, skip_serializing_if = "Not::not")]
    pub strict_arguments: bool,
    /// A server's LLM is told that a request to do something is done only by a tool call that
    /// does it, and answered as done only after it (`responder.require_effects`).
    #[serde(default, skip_serializing_if = "Not::not")]
    pub require_effects: bool,
    /// `run_sql_query` explains a statement that names a column or table the schema lacks
    /// (`SqlTool::explaining_mistakes`), and the responder then asks for the statement again
    /// instead of offering an answer without the tool.
    #[serde(default, skip_serializing_if = "Not::not")]
    pub explain_sql_errors: bool,
    /// A server's programmer examines the examples' traced code before it asks its LLM
    /// (`programmer.examine_drafts`).
    #[serde(default, skip_serializing_if = "Not::not")]
    pub examine_drafts: bool,
}

impl ServerSwitches {
    /// Sets what the switches say in a server's node configuration (the SQL tool is built by
    /// the network, which reads [`ServerSwitches::sql_params`] itself).
    pub fn apply(&self, config: &mut NodeConfig) {
        config.responder.ground_programs = self.ground_programs;
        config.programmer.min_examples = self.min_examples;
        if self.lenient_grading {
            config.programmer.grading = Grading::Lenient;
        }
        config.programmer.resample_temperature = self.resample_temperature;
        config.responder.natural_code_as_action = self.natural_programs;
        config.responder.require_effects = self.require_effects;
        config.programmer.examine_drafts = self.examine_drafts;
    }
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

fn is_zero_temperature(value: &f32) -> bool {
    *value == 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_that_are_off_are_not_written_and_read_back_as_off() {
        assert_eq!(
            serde_json::to_string(&ServerSwitches::default()).unwrap(),
            "{}"
        );
        let on = ServerSwitches {
            ground_programs: true,
            sql_params: true,
            min_examples: 3,
            lenient_grading: true,
            resample_temperature: 0.7,
            natural_programs: true,
            strict_arguments: true,
            require_effects: true,
            explain_sql_errors: true,
            examine_drafts: true,
        };
        let text = serde_json::to_string(&on).unwrap();
        assert!(text.contains(r#""resample_temperature":0.7"#), "{text}");
        assert_eq!(serde_json::from_str::<ServerSwitches>(&text).unwrap(), on);
        assert_eq!(
            serde_json::from_str::<ServerSwitches>("{}").unwrap(),
            ServerSwitches::default()
        );

        let mut config = NodeConfig::default();
        on.apply(&mut config);
        assert!(config.responder.ground_programs);
        assert_eq!(config.programmer.min_examples, 3);
        assert_eq!(config.programmer.grading, Grading::Lenient);
        assert_eq!(config.programmer.resample_temperature, 0.7);
        assert!(config.responder.natural_code_as_action);
        assert!(config.responder.require_effects);
        assert!(config.programmer.examine_drafts);
    }
}
