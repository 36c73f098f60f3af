//! Tasks: what a sender asks other agents to do.
//!
//! A task has a name, a description, and JSON Schemas for its input (the data the user gives) and
//! its output (what the sender must get back). The sender turns input data into a request body
//! (natural language, or the body a protocol document prescribes) and parses the reply into the
//! output schema. Tasks come from the node configuration (`[[node.tasks]]`) or from JSON files.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Something a sender can ask another agent to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Task {
    /// A unique name, as `agora send --task` refers to it.
    pub name: String,
    /// What the task is, in a sentence or two (the LLM reads it).
    pub description: String,
    /// JSON Schema of the input data.
    #[serde(default = "any_object", alias = "input_schema")]
    pub input_schema: Value,
    /// JSON Schema of the output.
    #[serde(alias = "output_schema")]
    pub output_schema: Value,
}

fn any_object() -> Value {
    json!({"type": "object"})
}

/// Why a task definition cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TaskError {
    /// A schema is not a valid JSON Schema.
    #[error("task {task}: the {which} schema is invalid: {reason}")]
    InvalidSchema {
        /// The task.
        task: String,
        /// `input` or `output`.
        which: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl Task {
    /// Checks `data` against the input schema; the error lists the first few problems.
    pub fn check_input(&self, data: &Value) -> Result<(), String> {
        validate(&self.input_schema, data)
    }

    /// Checks that both schemas compile.
    pub fn check(&self) -> Result<(), TaskError> {
        for (which, schema) in [
            ("input", &self.input_schema),
            ("output", &self.output_schema),
        ] {
            jsonschema::validator_for(schema).map_err(|error| TaskError::InvalidSchema {
                task: self.name.clone(),
                which,
                reason: error.to_string(),
            })?;
        }
        Ok(())
    }
}

/// Checks `value` against a JSON Schema; the error lists the first few problems.
pub(crate) fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema).map_err(|e| format!("bad schema: {e}"))?;
    let problems: Vec<String> = validator
        .iter_errors(value)
        .take(3)
        .map(|error| format!("{} at {}", error, error.instance_path()))
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_reads_from_json_in_either_spelling_and_checks_its_schemas() {
        let task: Task = serde_json::from_value(json!({
            "name": "weather",
            "description": "Forecast for a date and a location.",
            "input_schema": {"type": "object", "properties": {"date": {"type": "string"}}},
            "outputSchema": {"type": "object"}
        }))
        .unwrap();
        assert!(task.check().is_ok());
        let bad = Task {
            output_schema: json!({"type": 12}),
            ..task
        };
        assert!(matches!(
            bad.check(),
            Err(TaskError::InvalidSchema {
                which: "output",
                ..
            })
        ));
    }
}
