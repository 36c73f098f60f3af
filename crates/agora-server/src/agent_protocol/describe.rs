//! Discovery: the agents here (this node) and its `AgentDescriptor`, whose operations are `chat`,
//! one per configured task, and the protocols the node serves.

use agora_node::Task;
use agora_protocol::{Body, HashDialect, ProtocolHash, ProtocolRef, Request};
use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use agora_agent_protocol::wire;

use super::{MOUNT, unprocessable};
use crate::app::{AppState, Shared};
use crate::error::ApiError;

/// The endpoints `describe` lists, relative to the agent's path.
const ENDPOINTS: &[&str] = &[
    "/describe",
    "/run",
    "/get_events",
    "/stream_request",
    "/runs/{run_id}",
    "/threads",
];

/// The agent's name: the node's name with anything but letters, digits, `-`, `_` and `.` as `-`.
pub(super) fn agent_name(state: &AppState) -> String {
    state
        .node
        .config()
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The agent named in the path, or `404`.
pub(super) fn agent(state: &AppState, named: &str) -> Result<String, ApiError> {
    let name = agent_name(state);
    if named == name {
        Ok(name)
    } else {
        Err(ApiError::not_found(format!(
            "no agent named {named:?} here; GET {MOUNT}/ lists them"
        )))
    }
}

pub(super) async fn list_agents(State(state): State<Shared>) -> Response {
    let name = agent_name(&state);
    Json(json!([[name.clone(), format!("{MOUNT}/{name}")]])).into_response()
}

/// An operation other than `chat` and the tasks: a protocol the node serves.
struct Operation {
    name: String,
    hash: ProtocolHash,
    description: String,
    routine: bool,
}

/// What an operation's name stands for.
pub(super) enum Named {
    /// One of the node's tasks: the run sends it to the target the input names.
    Task(Task),
    /// A protocol the node serves: the run is a request under it.
    Protocol(ProtocolHash),
}

/// The name a task's operation goes by: its own, unless that is `chat`.
fn task_operation_name(task: &Task) -> String {
    if task.name == "chat" {
        "task-chat".to_string()
    } else {
        task.name.clone()
    }
}

/// The input schema of a task's operation: the target and the task's own input.
pub(super) fn task_input_schema(task: &Task) -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "target": {
                "type": "string",
                "description": "the Agora URL of the agent to send the task to",
            },
            "input": task.input_schema,
        },
        "required": ["target", "input"],
    })
}

/// The protocols this node serves, as operations with names unique among themselves and the
/// tasks' operations.
async fn operations(state: &AppState) -> Result<Vec<Operation>, ApiError> {
    let node = &state.node;
    let failed = |error: &dyn std::fmt::Display| {
        tracing::error!(%error, "could not list the Agent Protocol operations");
        ApiError::internal()
    };
    let listing = node.wellknown().await.map_err(|e| failed(&e))?;
    let mut operations: Vec<Operation> = Vec::new();
    for hex in listing.keys() {
        let Ok(hash) = ProtocolHash::parse(hex) else {
            continue;
        };
        let Some(stored) = node.store().document(&hash).await.map_err(|e| failed(&e))? else {
            continue;
        };
        let metadata = stored.document.metadata();
        let prefix = &hash.to_hex()[..10];
        let description = metadata.description.clone().unwrap_or_else(|| {
            wire::clip(stored.document.document().body.trim())
                .chars()
                .take(300)
                .collect()
        });
        let request = Request {
            protocol: ProtocolRef::Protocol(hash),
            hash_dialect: HashDialect::Hex,
            sources: Vec::new(),
            body: Body::Text(String::new()),
            multiround: false,
        };
        operations.push(Operation {
            name: metadata
                .name
                .clone()
                .filter(|name| !name.trim().is_empty() && name != "chat")
                .unwrap_or_else(|| format!("protocol-{prefix}")),
            hash,
            description,
            routine: node.serves_with_routine(&request),
        });
    }
    // Two documents of one name, or a document named as a task: each such document is named
    // with its hash prefix too.
    let names: Vec<String> = operations.iter().map(|o| o.name.clone()).collect();
    let tasks: Vec<String> = node
        .config()
        .tasks
        .iter()
        .map(task_operation_name)
        .collect();
    for operation in &mut operations {
        if names.iter().filter(|n| **n == operation.name).count() > 1
            || tasks.contains(&operation.name)
        {
            operation.name = format!("{}-{}", operation.name, &operation.hash.to_hex()[..10]);
        }
    }
    Ok(operations)
}

pub(super) async fn describe(
    State(state): State<Shared>,
    Path(named): Path<String>,
) -> Result<Response, ApiError> {
    let name = agent(&state, &named)?;
    let text_schema = |member: &str| {
        json!({
            "type": "object",
            "properties": {member: {"type": "string"}},
            "required": [member],
        })
    };
    let mut listed = vec![json!({
        "name": "chat",
        "description": "send a chat request",
        "input_schema": text_schema("input"),
        "output_schema": text_schema("output"),
    })];
    for task in &state.node.config().tasks {
        listed.push(json!({
            "name": task_operation_name(task),
            "description": format!(
                "{} (a task this node sends to the target agent; needs the admin bearer token)",
                task.description.trim_end_matches('.')
            ),
            "input_schema": task_input_schema(task),
            "output_schema": task.output_schema,
            "task": task.name,
        }));
    }
    for operation in operations(&state).await? {
        listed.push(json!({
            "name": operation.name,
            "description": operation.description,
            "input_schema": null,
            "output_schema": null,
            "protocol_hash": operation.hash.to_hex(),
            "answered_by": if operation.routine { "routine" } else { "llm" },
        }));
    }
    let node = &state.node;
    Ok(Json(json!({
        "name": name,
        "purpose": node.config().description,
        "endpoints": ENDPOINTS,
        "operations": listed,
        "tools": node.tools().specs().into_iter().map(|spec| spec.name).collect::<Vec<_>>(),
    }))
    .into_response())
}

/// The task or protocol an operation names, or `422`.
pub(super) async fn named_operation(state: &AppState, operation: &str) -> Result<Named, ApiError> {
    if let Some(task) = state
        .node
        .config()
        .tasks
        .iter()
        .find(|task| task_operation_name(task) == operation)
    {
        return Ok(Named::Task(task.clone()));
    }
    let operations = operations(state).await?;
    operations
        .iter()
        .find(|o| o.name == operation || o.hash.to_hex() == operation)
        .map(|o| Named::Protocol(o.hash))
        .ok_or_else(|| {
            unprocessable(format!(
                "this agent has no operation {operation:?}; describe lists its operations"
            ))
        })
}
