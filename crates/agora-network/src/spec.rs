//! The network and the screenplay, as data: defined once in `agora-judge` (which needs them for
//! ground truth and has no node types) and re-exported here, with the one view that does need
//! the node: a task type as the node's [`Task`].

use agora_node::Task;

pub use agora_judge::spec::*;

/// A task type of the network as the node's [`Task`].
pub trait NodeTask {
    /// The task type `name`.
    fn task(&self, name: &str) -> Result<Task, SpecError>;
}

impl NodeTask for NetworkSpec {
    fn task(&self, name: &str) -> Result<Task, SpecError> {
        let spec = self.task_spec(name)?;
        Ok(Task {
            name: name.to_string(),
            description: spec.description.clone(),
            input_schema: spec.input.clone(),
            output_schema: spec.output.clone(),
        })
    }
}
