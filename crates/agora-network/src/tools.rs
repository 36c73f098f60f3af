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

use agora_node::tools::{Tool, ToolError, ToolSpec};
use agora_node::{Node, Task};
use agora_store::{ServiceDatabase, ServiceDbError};
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
}

/// `run_sql_query`: one SQL statement on the server's own database.
pub struct SqlTool {
    spec: ToolSpec,
    database: ServiceDatabase,
    /// Whether the tool takes `params` for the statement's `?` placeholders
    /// ([`SqlTool::with_params`]).
    params: bool,
    /// Whether an array or object among the `params` is refused
    /// ([`SqlTool::with_scalar_params`]).
    scalar_params: bool,
    /// A write without result rows returns how many rows it changed
    /// ([`SqlTool::reporting_changes`]).
    report_changes: bool,
    /// A statement naming a column its tables lack is explained ([`SqlTool::explaining_mistakes`]).
    explain_mistakes: bool,
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
             and returns the result rows as JSON objects (an empty list for statements without \
             results). Only SELECT, INSERT, UPDATE and DELETE on these tables; the schema cannot \
             be changed. Dates are 'YYYY-MM-DD' text; quote strings with single quotes. \
             Tables: {}",
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
            params: false,
            scalar_params: false,
            report_changes: false,
            explain_mistakes: false,
        }
    }

    /// The tool taking `params`, values for the statement's `?` placeholders in order, and
    /// refusing a statement whose placeholders the values do not match. Without it, `params` is
    /// not described and is ignored, and a placeholder matches NULL (so a lookup by `?` finds
    /// no rows instead of failing): what the committed recordings were made with.
    pub fn with_params(mut self) -> SqlTool {
        self.params = true;
        self.spec.parameters = json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "One SQL statement"},
                "params": {
                    "type": "array",
                    "description": "Values for the statement's ? placeholders, in order"
                }
            },
            "required": ["query"]
        });
        self
    }

    /// Under [`SqlTool::with_params`] (without it `params` are ignored), refuses an array or an
    /// object among the `params` rather than binding its JSON text. The model passed a whole result row (`{"RoomNumber":101}`) where a
    /// room number goes, which booked "room" `{"RoomNumber":101}`, and a list for `IN (?)`,
    /// which matched nothing; either way the statement ran and its effect was wrong.
    pub fn with_scalar_params(mut self) -> SqlTool {
        self.scalar_params = true;
        self
    }

    /// A statement that names a column its tables lack fails with what the schema says about it
    /// (`ServiceDatabase::explain_mistake`: where the column is, and the join that reaches it) as
    /// a [`ToolError::Mistaken`], after which the responder asks for the statement again instead
    /// of offering an answer without the tool (`--explain-sql-errors`).
    pub fn explaining_mistakes(mut self) -> SqlTool {
        self.explain_mistakes = true;
        self
    }

    /// A statement that writes and returns no rows returns `[{"changes": N}]` instead of `[]`
    /// (`ServiceDatabase::run_reporting_changes`; `--require-effects`): told `[]` after the
    /// INSERT it had been asked for, the local model answered that the rental failed.
    pub fn reporting_changes(mut self) -> SqlTool {
        self.report_changes = true;
        self.spec.description = self.spec.description.replacen(
            "(an empty list for statements without results)",
            "(for an INSERT, UPDATE or DELETE, [{\"changes\": N}]: the rows it changed)",
            1,
        );
        self
    }
}

/// Why `params` cannot be bound under [`SqlTool::with_scalar_params`]: the first value that is
/// an array or an object.
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

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let query = arguments
            .get("query")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::InvalidArguments {
                tool: self.spec.name.clone(),
                reason: "query is required and must be a string".into(),
            })?;
        let params = if self.params {
            let params = match arguments.get("params") {
                None | Some(Value::Null) => &[][..],
                Some(Value::Array(values)) => values.as_slice(),
                Some(_) => {
                    return Err(ToolError::InvalidArguments {
                        tool: self.spec.name.clone(),
                        reason: "params must be an array of values, one per ? placeholder".into(),
                    });
                }
            };
            if let Some(reason) = self.scalar_params.then(|| non_scalar(params)).flatten() {
                return Err(ToolError::InvalidArguments {
                    tool: self.spec.name.clone(),
                    reason,
                });
            }
            Some(params)
        } else {
            None
        };
        let ran = match (self.report_changes, params) {
            (true, params) => self.database.run_reporting_changes(query, params).await,
            (false, Some(params)) => self.database.run_with(query, params).await,
            (false, None) => self.database.run(query).await,
        };
        match ran {
            Ok(rows) => Ok(Value::Array(rows.into_iter().map(Value::Object).collect())),
            Err(error @ ServiceDbError::Refused(_)) => Err(ToolError::InvalidArguments {
                tool: self.spec.name.clone(),
                reason: error.to_string(),
            }),
            Err(ServiceDbError::Sql(error)) => {
                let explained = self
                    .explain_mistakes
                    .then(|| self.database.explain_mistake(query, &error))
                    .flatten();
                match explained {
                    Some(explained) => Err(ToolError::Mistaken {
                        tool: self.spec.name.clone(),
                        reason: format!("{error}. {explained}"),
                    }),
                    None => Err(ToolError::failed(&self.spec.name, error)),
                }
            }
            Err(error) => Err(ToolError::failed(&self.spec.name, error.to_string())),
        }
    }
}

/// A tool answered by another server: the calling server's helper runs it as a task against the
/// target, climbing the helper's own ladder (natural language, protocol, routine).
pub struct ExternalTool {
    spec: ToolSpec,
    helper: Node,
    target: String,
    task: Task,
}

impl ExternalTool {
    /// `task` run by `helper` against `target` (a node URL).
    pub fn new(name: &str, task: Task, helper: Node, target: String) -> ExternalTool {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use agora_store::ServiceTable;

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

    #[tokio::test]
    async fn the_sql_tool_binds_params_only_where_it_offers_them() {
        let dir = tempfile::tempdir().expect("dir");
        let table = ServiceTable {
            name: "Rooms".into(),
            columns: vec![("RoomNumber".into(), "INTEGER".into())],
            constraints: vec![],
            rows: vec![
                json!({"RoomNumber": 101})
                    .as_object()
                    .cloned()
                    .expect("row"),
            ],
        };
        let database = ServiceDatabase::create(&dir.path().join("h.db"), &[table])
            .await
            .expect("database");
        let schema: DatabaseSpec = serde_json::from_value(json!({"tables": {"Rooms": {
            "description": "rooms", "columns": {"RoomNumber": "INTEGER"}}}}))
        .expect("schema");
        let lookup = json!({"query": "SELECT * FROM Rooms WHERE RoomNumber = ?", "params": [101]});

        let plain = SqlTool::new(database.clone(), &schema);
        assert!(
            plain.spec().parameters["properties"]
                .get("params")
                .is_none()
        );
        assert_eq!(plain.call(lookup.clone()).await.expect("rows"), json!([]));

        let with_params = SqlTool::new(database, &schema).with_params();
        assert!(with_params.spec().parameters["properties"]["params"].is_object());
        assert_eq!(
            with_params.call(lookup).await.expect("rows"),
            json!([{"RoomNumber": 101}])
        );
        let unbound = json!({"query": "SELECT * FROM Rooms WHERE RoomNumber = ?"});
        match with_params.call(unbound).await {
            Err(ToolError::InvalidArguments { reason, .. }) => {
                assert!(reason.contains("placeholder"), "{reason}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        let not_a_list = json!({"query": "SELECT * FROM Rooms", "params": 101});
        assert!(matches!(
            with_params.call(not_a_list).await,
            Err(ToolError::InvalidArguments { .. })
        ));

        // A whole row where a value goes: bound as its JSON text, the statement runs (and an
        // INSERT would write that text); with scalar params it is refused before it runs.
        let row = json!({"query": "INSERT INTO Rooms (RoomNumber) VALUES (?)",
            "params": [{"RoomNumber": 101}]});
        assert_eq!(
            with_params.call(row.clone()).await.expect("runs"),
            json!([])
        );
        let scalar = with_params.with_scalar_params();
        for (params, says) in [
            (json!([{"RoomNumber": 102}]), "params[0] is an object"),
            (json!([102, [101, 102]]), "params[1] is an array"),
        ] {
            let call =
                json!({"query": "INSERT INTO Rooms (RoomNumber) VALUES (?)", "params": params});
            match scalar.call(call).await {
                Err(ToolError::InvalidArguments { reason, .. }) => {
                    assert!(reason.starts_with(says), "{reason}")
                }
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
        let count = json!({"query": "SELECT COUNT(*) AS n FROM Rooms", "params": []});
        assert_eq!(
            scalar.call(count).await.expect("rows"),
            json!([{"n": 2}]),
            "the row's text was written once, by the call without scalar params"
        );
        let value = json!({"query": "SELECT * FROM Rooms WHERE RoomNumber = ?", "params": [101]});
        assert_eq!(
            scalar.call(value.clone()).await.expect("rows"),
            json!([{"RoomNumber": 101}])
        );

        // Reporting changes: a write says how many rows it changed, a read is as before, and the
        // tool tells a read from a write before it runs.
        let counting = scalar.reporting_changes();
        assert!(counting.spec().description.contains("\"changes\""));
        let insert = json!({"query": "INSERT INTO Rooms (RoomNumber) VALUES (?)", "params": [103]});
        assert_eq!(counting.changes_state(&insert), Some(true));
        assert_eq!(counting.changes_state(&value), Some(false));
        assert_eq!(
            counting.call(insert).await.expect("runs"),
            json!([{"changes": 1}])
        );
        let none = json!({"query": "DELETE FROM Rooms WHERE RoomNumber = ?", "params": [999]});
        assert_eq!(
            counting.call(none).await.expect("runs"),
            json!([{"changes": 0}])
        );
        assert_eq!(
            counting.call(value).await.expect("rows"),
            json!([{"RoomNumber": 101}])
        );

        // A column the table lacks: SQLite's words alone, or, explained, what the schema says
        // about it as a mistake to fix.
        let wrong_column = json!({"query": "SELECT Floor FROM Rooms"});
        match counting.call(wrong_column.clone()).await {
            Err(ToolError::Failed { reason, .. }) => assert_eq!(reason, "no such column: Floor"),
            other => panic!("expected a failure, got {other:?}"),
        }
        let explaining = counting.explaining_mistakes();
        match explaining.call(wrong_column).await {
            Err(ToolError::Mistaken { reason, .. }) => assert_eq!(
                reason,
                "no such column: Floor. Rooms has no column Floor: its columns are RoomNumber. \
                 No table has a column Floor. Fix the statement and run it again."
            ),
            other => panic!("expected a mistake, got {other:?}"),
        }
        // An unknown table never reaches SQLite: the gate refuses it, naming the tables.
        match explaining
            .call(json!({"query": "SELECT * FROM Rentals"}))
            .await
        {
            Err(ToolError::InvalidArguments { reason, .. }) => {
                assert!(reason.ends_with("the tables are: Rooms"), "{reason}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        let syntax = json!({"query": "SELECT FROM Rooms"});
        assert!(matches!(
            explaining.call(syntax).await,
            Err(ToolError::Failed { .. })
        ));
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
