//! The servers' built-in demo tools.
//!
//! - Mocks with the paper's value distributions, made deterministic (seeded by the network's
//!   seed, the tool and its arguments): the pure mocks live in `agora_judge::mocks`, which the
//!   judge uses too; [`MockTool`] adapts them to the node's [`Tool`].
//! - `run_sql_query` over the server's own SQLite database ([`ServiceDatabase`]), which accepts
//!   only single statements on that server's tables.
//! - External tools: another server, reached by the calling server's helper node running the
//!   tool as a task (so server-to-server traffic climbs the same ladder as users' traffic).
//!
use std::sync::Arc;

use crate::service_db::{ServiceDatabase, ServiceDbError};
use agora_node::tools::{Scratch, ScratchCopy, Tool, ToolError, ToolSpec};
use agora_node::{Node, Task};
use serde_json::{Value, json};

use crate::spec::{DatabaseSpec, NetworkSpec};

use agora_judge::mocks::{self, MockError};
pub use agora_judge::mocks::{MockKind, weekday};

/// A seeded mock tool.
pub struct MockTool {
    spec: ToolSpec,
    kind: MockKind,
    seed: u64,
    network: Arc<NetworkSpec>,
}

impl MockTool {
    /// The mock `kind` under `spec`.
    pub fn new(spec: ToolSpec, kind: MockKind, seed: u64, network: Arc<NetworkSpec>) -> MockTool {
        MockTool {
            spec,
            kind,
            seed,
            network,
        }
    }

    /// The mock's answer (pure: same arguments, same answer).
    pub fn answer(&self, arguments: &Value) -> Result<Value, ToolError> {
        mocks::answer(
            self.kind,
            &self.spec.name,
            self.seed,
            arguments,
            &self.network,
        )
        .map_err(|error| match error {
            MockError::InvalidArguments(reason) => ToolError::InvalidArguments {
                tool: self.spec.name.clone(),
                reason,
            },
            MockError::Failed(reason) => ToolError::failed(&self.spec.name, reason),
        })
    }
}

#[async_trait::async_trait]
impl Tool for MockTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        self.answer(&arguments)
    }

    async fn scratch(&self) -> Result<Scratch, ToolError> {
        Ok(Scratch::Stateless)
    }
}

/// `run_sql_query`: one SQL statement on the server's own database. A statement whose `?`
/// placeholders are not matched by as many values in `params` is refused (an unbound placeholder
/// would match NULL, so a lookup would find nothing instead of failing), and so is an array or
/// object among the values (a whole result row where a room number goes would book the row's
/// text). `params` is taken when given but not described in the schema, which stays as the
/// committed runs had it until a measurement decides (`demo/network/RESULTS.md`). A write that
/// returns no rows returns `[{"changes": N}]`, so the model sees what its INSERT did.
pub struct SqlTool {
    spec: ToolSpec,
    database: ServiceDatabase,
}

impl SqlTool {
    /// The tool over `database`, described with the tables of `schema`.
    pub fn new(database: ServiceDatabase, schema: &DatabaseSpec) -> SqlTool {
        let tables: Vec<String> = schema
            .tables
            .iter()
            .map(|(name, table)| {
                let mut columns: Vec<String> = table
                    .columns
                    .iter()
                    .map(|(column, kind)| format!("{column} {}", kind.as_str().unwrap_or("TEXT")))
                    .collect();
                columns.extend(table.constraints.iter().cloned());
                format!("{name}({}): {}", columns.join(", "), table.description)
            })
            .collect();
        let description = format!(
            "Runs one SQL statement (SQLite dialect: LIMIT, not TOP) on this service's database \
             and returns the result rows as JSON objects (for an INSERT, UPDATE or DELETE, \
             [{{\"changes\": N}}]: the rows it changed). Only SELECT, INSERT, UPDATE and DELETE \
             on these tables; the schema cannot be changed. Dates are 'YYYY-MM-DD' text; quote \
             strings with single quotes. Tables: {}",
            tables.join("; ")
        );
        SqlTool {
            spec: ToolSpec {
                name: "run_sql_query".into(),
                description,
                parameters: json!({
                    "type": "object",
                    "properties": {"query": {"type": "string", "description": "One SQL statement"}},
                    "required": ["query"]
                }),
                returns: Some(json!({"type": "array", "items": {"type": "object"}})),
            },
            database,
        }
    }

    fn invalid(&self, reason: impl Into<String>) -> ToolError {
        ToolError::InvalidArguments {
            tool: self.spec.name.clone(),
            reason: reason.into(),
        }
    }
}

/// Why `params` cannot be bound: the first value that is an array or an object.
fn non_scalar(params: &[Value]) -> Option<String> {
    params.iter().enumerate().find_map(|(index, value)| {
        let what = match value {
            Value::Array(_) => {
                "an array: give one value per ? placeholder (for IN, one ? per value)"
            }
            Value::Object(_) => {
                "an object: give the value itself (a member of a result row, not the row)"
            }
            _ => return None,
        };
        Some(format!(
            "params[{index}] is {what}; a placeholder takes a number, a string, a boolean or null"
        ))
    })
}

#[async_trait::async_trait]
impl Tool for SqlTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn changes_state(&self, arguments: &Value) -> Option<bool> {
        ServiceDatabase::writes(arguments.get("query")?.as_str()?)
    }

    async fn scratch(&self) -> Result<Scratch, ToolError> {
        let copy = self
            .database
            .scratch_copy()
            .await
            .map_err(|error| ToolError::failed(&self.spec.name, error.to_string()))?;
        Ok(Scratch::Copy(Box::new(SqlScratch(Arc::new(SqlTool {
            spec: self.spec.clone(),
            database: copy,
        })))))
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let query = arguments
            .get("query")
            .and_then(Value::as_str)
            .ok_or_else(|| self.invalid("query is required and must be a string"))?;
        let params = match arguments.get("params") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(values)) => values.as_slice(),
            Some(_) => {
                return Err(
                    self.invalid("params must be an array of values, one per ? placeholder")
                );
            }
        };
        if let Some(reason) = non_scalar(params) {
            return Err(self.invalid(reason));
        }
        match self.database.run(query, params).await {
            Ok(rows) => Ok(Value::Array(rows.into_iter().map(Value::Object).collect())),
            Err(error @ ServiceDbError::Refused(_)) => Err(self.invalid(error.to_string())),
            Err(error) => Err(ToolError::failed(&self.spec.name, error.to_string())),
        }
    }
}

/// `run_sql_query` over a scratch copy of its database (a shadow check's).
struct SqlScratch(Arc<SqlTool>);

#[async_trait::async_trait]
impl ScratchCopy for SqlScratch {
    fn tool(&self) -> Arc<dyn Tool> {
        self.0.clone()
    }

    async fn fork(&self) -> Result<Box<dyn ScratchCopy>, ToolError> {
        match self.0.scratch().await? {
            Scratch::Copy(copy) => Ok(copy),
            _ => Err(ToolError::failed(&self.0.spec.name, "no copy")),
        }
    }

    async fn state(&self) -> Result<Value, ToolError> {
        let state = self.0.database.state().await;
        state.map_err(|error| ToolError::failed(&self.0.spec.name, error.to_string()))
    }
}

/// A tool answered by another server: the calling server's helper runs it as a task against the
/// target, climbing the helper's own ladder (natural language, protocol, routine).
pub struct ExternalTool {
    spec: ToolSpec,
    helper: Node,
    target: String,
    task: Task,
    /// The task only reads: a shadow check may call it for real.
    read_only: bool,
}

impl ExternalTool {
    /// `task` run by `helper` against `target` (a node URL); `read_only` when the task changes
    /// nothing on the target (a lookup).
    pub fn new(
        name: &str,
        task: Task,
        helper: Node,
        target: String,
        read_only: bool,
    ) -> ExternalTool {
        let mut parameters = task.input_schema.clone();
        if let Some(object) = parameters.as_object_mut() {
            object.insert("type".into(), json!("object"));
        }
        ExternalTool {
            spec: ToolSpec {
                name: name.to_string(),
                description: task.description.clone(),
                parameters,
                returns: Some(task.output_schema.clone()),
            },
            helper,
            target,
            task,
            read_only,
        }
    }
}

#[async_trait::async_trait]
impl Tool for ExternalTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        match self
            .helper
            .run_task(&self.target, &self.task, &arguments)
            .await
        {
            Ok(run) => Ok(run.outcome.output),
            Err(error) => Err(ToolError::failed(&self.spec.name, error.to_string())),
        }
    }

    /// A lookup changes nothing on the target, so a shadow check calls it for real; any other
    /// task may write there, which no copy here can undo.
    async fn scratch(&self) -> Result<Scratch, ToolError> {
        Ok(if self.read_only {
            Scratch::Stateless
        } else {
            Scratch::Unsupported
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service_db::ServiceTable;

    fn mock(kind: &str, name: &str) -> MockTool {
        let network = Arc::new(NetworkSpec::embedded().expect("network"));
        let spec = ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
            returns: None,
        };
        MockTool::new(spec, MockKind::parse(kind).expect("kind"), 42, network)
    }

    /// A database with one table, `Rooms(RoomNumber INTEGER)`, holding `rooms`, in `dir`.
    async fn rooms(dir: &std::path::Path, rooms: &[i64]) -> (ServiceDatabase, DatabaseSpec) {
        let table = ServiceTable {
            name: "Rooms".into(),
            columns: vec![("RoomNumber".into(), "INTEGER".into())],
            constraints: vec![],
            rows: rooms
                .iter()
                .map(|room| {
                    json!({"RoomNumber": room})
                        .as_object()
                        .cloned()
                        .expect("row")
                })
                .collect(),
        };
        let database = ServiceDatabase::create(&dir.join("h.db"), &[table])
            .await
            .expect("database");
        let schema: DatabaseSpec = serde_json::from_value(json!({"tables": {"Rooms": {
            "description": "rooms", "columns": {"RoomNumber": "INTEGER"}}}}))
        .expect("schema");
        (database, schema)
    }

    #[tokio::test]
    async fn the_sql_tool_binds_scalar_params_and_reports_changes() {
        let dir = tempfile::tempdir().expect("dir");
        let (database, schema) = rooms(dir.path(), &[101]).await;
        let tool = SqlTool::new(database, &schema);
        assert!(tool.spec().parameters["properties"].get("params").is_none());
        assert!(tool.spec().description.contains("\"changes\""));

        let lookup = json!({"query": "SELECT * FROM Rooms WHERE RoomNumber = ?", "params": [101]});
        assert_eq!(
            tool.call(lookup.clone()).await.expect("rows"),
            json!([{"RoomNumber": 101}])
        );
        // A placeholder without a value never matches NULL: the statement is refused.
        let unbound = json!({"query": "SELECT * FROM Rooms WHERE RoomNumber = ?"});
        match tool.call(unbound).await {
            Err(ToolError::InvalidArguments { reason, .. }) => {
                assert!(reason.contains("placeholder"), "{reason}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        let not_a_list = json!({"query": "SELECT * FROM Rooms", "params": 101});
        assert!(matches!(
            tool.call(not_a_list).await,
            Err(ToolError::InvalidArguments { .. })
        ));
        // A whole row or a list where a value goes is refused before the statement runs.
        for (params, says) in [
            (json!([{"RoomNumber": 102}]), "params[0] is an object"),
            (json!([102, [101, 102]]), "params[1] is an array"),
        ] {
            let call =
                json!({"query": "INSERT INTO Rooms (RoomNumber) VALUES (?)", "params": params});
            match tool.call(call).await {
                Err(ToolError::InvalidArguments { reason, .. }) => {
                    assert!(reason.starts_with(says), "{reason}")
                }
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
        let count = json!({"query": "SELECT COUNT(*) AS n FROM Rooms"});
        assert_eq!(
            tool.call(count).await.expect("rows"),
            json!([{"n": 1}]),
            "nothing refused was written"
        );

        // A write says how many rows it changed, a read is as before, and the tool tells a read
        // from a write before it runs.
        let insert = json!({"query": "INSERT INTO Rooms (RoomNumber) VALUES (?)", "params": [103]});
        assert_eq!(tool.changes_state(&insert), Some(true));
        assert_eq!(tool.changes_state(&lookup), Some(false));
        assert_eq!(
            tool.call(insert).await.expect("runs"),
            json!([{"changes": 1}])
        );
        let none = json!({"query": "DELETE FROM Rooms WHERE RoomNumber = ?", "params": [999]});
        assert_eq!(
            tool.call(none).await.expect("runs"),
            json!([{"changes": 0}])
        );

        // SQLite's own error, and the gate's refusal of an unknown table naming the tables.
        let wrong_column = json!({"query": "SELECT Floor FROM Rooms"});
        match tool.call(wrong_column).await {
            Err(ToolError::Failed { reason, .. }) => assert_eq!(reason, "no such column: Floor"),
            other => panic!("expected a failure, got {other:?}"),
        }
        match tool.call(json!({"query": "SELECT * FROM Rentals"})).await {
            Err(ToolError::InvalidArguments { reason, .. }) => {
                assert!(reason.ends_with("the tables are: Rooms"), "{reason}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn the_sql_tools_scratch_copy_writes_only_to_itself() {
        let dir = tempfile::tempdir().expect("dir");
        let (database, schema) = rooms(dir.path(), &[]).await;
        let tool = SqlTool::new(database.clone(), &schema);
        let Scratch::Copy(copy) = tool.scratch().await.expect("scratch") else {
            panic!("the SQL tool copies its database");
        };
        let insert = json!({"query": "INSERT INTO Rooms (RoomNumber) VALUES (7)"});
        copy.tool().call(insert).await.expect("insert");
        assert_eq!(
            copy.state().await.expect("state"),
            json!({"Rooms": [{"RoomNumber": 7}]})
        );
        assert_eq!(database.state().await.expect("state"), json!({"Rooms": []}));
        let fork = copy.fork().await.expect("fork");
        assert_eq!(
            fork.state().await.expect("state"),
            json!({"Rooms": [{"RoomNumber": 7}]})
        );
        let delete = json!({"query": "DELETE FROM Rooms"});
        fork.tool().call(delete).await.expect("delete");
        assert_eq!(
            copy.state().await.expect("state"),
            json!({"Rooms": [{"RoomNumber": 7}]})
        );
    }

    #[test]
    fn weekdays_are_right() {
        for (date, day) in [
            ("2024-09-22", Some("Sunday")),
            ("2000-02-29", Some("Tuesday")),
            ("1970-01-01", Some("Thursday")),
            ("2024-13-01", None),
            ("soon", None),
        ] {
            assert_eq!(weekday(date), day, "{date}");
        }
    }

    #[test]
    fn mocks_are_deterministic_and_spread_like_the_papers() {
        let weather = mock("weather", "getWeather");
        let a = weather.answer(&json!({"date": "2024-01-01", "location": "Vienna"}));
        let b = weather.answer(&json!({"location": "Vienna", "date": "2024-01-01"}));
        assert_eq!(a, b);
        let mut kinds = std::collections::BTreeSet::new();
        let mut rainy_or_snowy = 0;
        for day in 1..=200 {
            let date = format!("2024-{:02}-{:02}", 1 + day % 12, 1 + day % 28);
            let w = weather.answer(&json!({"date": date})).expect("weather");
            let t = w["temperature"].as_i64().expect("t");
            assert!((-10..=30).contains(&t));
            let kind = w["weather"].as_str().expect("kind").to_string();
            if kind == "rainy" || kind == "snowy" {
                rainy_or_snowy += 1;
                assert!(w["precipitation"].as_i64().expect("p") > 50);
            }
            kinds.insert(kind);
        }
        assert_eq!(kinds.len(), 4);
        assert!((70..=130).contains(&rainy_or_snowy), "{rainy_or_snowy}");
        let taxi = mock("getAvailableTaxi", "getAvailableTaxi");
        let free = (0..200)
            .filter(|m| {
                let t = taxi
                    .answer(&json!({"time": format!("{}:{}", m / 60, m % 60)}))
                    .expect("taxi");
                t["taxiId"] != json!("000")
            })
            .count();
        assert!((150..=190).contains(&free), "{free}");
        assert!(
            mock("getMenu", "getMenu")
                .answer(&json!({"cuisineType": "Martian"}))
                .is_err()
        );
        assert_eq!(
            mock("getMenu", "getMenu")
                .answer(&json!({"cuisineType": "Italian"}))
                .expect("menu")["menu"]
                .as_array()
                .map(Vec::len),
            Some(3)
        );
    }
}
