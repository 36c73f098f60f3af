//! The servers' built-in demo tools.
//!
//! - Mocks with the paper's value distributions, made deterministic: each result is drawn from
//!   a SHA-256 stream seeded with the network's seed, the tool and its arguments, so the same
//!   call always gives the same answer (a run can be replayed from a cassette) while different
//!   calls are spread as in the paper.
//! - `run_sql_query` over the server's own SQLite database ([`ServiceDatabase`]), which accepts
//!   only single statements on that server's tables.
//! - External tools: another server, reached by the calling server's helper node running the
//!   tool as a task (so server-to-server traffic climbs the same ladder as users' traffic).
//!
//! Deviations from the paper's mocks, on purpose: `currentDate` returns the screenplay's
//! generation day instead of a random date on every call; `getAvailableTaxi` says `"000"` (as
//! its schema promises) instead of `null` when no taxi is free; `getWeather` does not require a
//! location (its schema marks it optional and it has no effect).

use std::sync::Arc;

use agora_node::tools::{Tool, ToolError, ToolSpec};
use agora_node::{Node, Task};
use agora_store::{ServiceDatabase, ServiceDbError};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::spec::{DatabaseSpec, NetworkSpec};

/// A deterministic stream of draws for one call.
struct Draws {
    seed: Vec<u8>,
    counter: u32,
}

impl Draws {
    fn new(seed: u64, tool: &str, arguments: &Value) -> Draws {
        let mut canonical = arguments.clone();
        canonical.sort_all_objects();
        let mut bytes = seed.to_le_bytes().to_vec();
        bytes.extend_from_slice(tool.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(canonical.to_string().as_bytes());
        Draws {
            seed: bytes,
            counter: 0,
        }
    }

    /// A uniform integer in `low..=high`.
    fn int(&mut self, low: i64, high: i64) -> i64 {
        let mut hasher = Sha256::new();
        hasher.update(&self.seed);
        hasher.update(self.counter.to_le_bytes());
        self.counter += 1;
        let digest = hasher.finalize();
        let mut word = [0u8; 8];
        word.copy_from_slice(&digest[..8]);
        let span = (high - low + 1) as u64;
        low + (u64::from_le_bytes(word) % span) as i64
    }

    fn choose<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.int(0, items.len() as i64 - 1) as usize]
    }
}

/// Which mock a tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MockKind {
    /// `{temperature, precipitation, weather}` for a date.
    Weather,
    /// The screenplay's "today".
    CurrentDate,
    /// A static menu per cuisine.
    Menu,
    /// The weekday of a date.
    DayOfTheWeek,
    /// Always sends a driver.
    SendDriver,
    /// One of five traffic levels.
    Traffic,
    /// A free taxi 85 % of the time.
    AvailableTaxi,
    /// Always assigns.
    AssignTaxi,
}

impl MockKind {
    /// The mock of the paper's name.
    pub fn parse(name: &str) -> Option<MockKind> {
        Some(match name {
            "weather" => MockKind::Weather,
            "currentDate" => MockKind::CurrentDate,
            "getMenu" => MockKind::Menu,
            "dayOfTheWeek" => MockKind::DayOfTheWeek,
            "sendDriver" => MockKind::SendDriver,
            "trafficInfo" => MockKind::Traffic,
            "getAvailableTaxi" => MockKind::AvailableTaxi,
            "assignTaxi" => MockKind::AssignTaxi,
            _ => return None,
        })
    }
}

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

    fn string_arg<'a>(&self, arguments: &'a Value, name: &str) -> Result<&'a str, ToolError> {
        arguments
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::InvalidArguments {
                tool: self.spec.name.clone(),
                reason: format!("{name} is required and must be a string"),
            })
    }

    /// The mock's answer (pure: same arguments, same answer).
    pub fn answer(&self, arguments: &Value) -> Result<Value, ToolError> {
        let mut draws = Draws::new(self.seed, &self.spec.name, arguments);
        Ok(match self.kind {
            MockKind::Weather => {
                self.string_arg(arguments, "date")?;
                let temperature = draws.int(-10, 30);
                let mut precipitation = draws.int(0, 100);
                let weather = if precipitation > 50 {
                    if temperature > 0 { "rainy" } else { "snowy" }
                } else {
                    precipitation = draws.int(0, 100);
                    draws.choose(&["sunny", "cloudy"])
                };
                json!({"temperature": temperature, "precipitation": precipitation, "weather": weather})
            }
            MockKind::CurrentDate => json!({"date": self.network.today}),
            MockKind::Menu => {
                let cuisine = self.string_arg(arguments, "cuisineType")?.to_lowercase();
                let menu = self
                    .network
                    .menus
                    .get(&cuisine)
                    .ok_or_else(|| ToolError::Failed {
                        tool: self.spec.name.clone(),
                        reason: format!("no menu for the cuisine {cuisine:?}"),
                    })?;
                let dishes: Vec<Value> = menu
                    .iter()
                    .map(|(name, price)| json!({"name": name, "price": price}))
                    .collect();
                json!({"menu": dishes})
            }
            MockKind::DayOfTheWeek => {
                let date = self.string_arg(arguments, "date")?;
                let day = weekday(date).ok_or_else(|| ToolError::InvalidArguments {
                    tool: self.spec.name.clone(),
                    reason: format!("{date:?} is not a date like 2024-09-22"),
                })?;
                json!({"day": day})
            }
            MockKind::SendDriver | MockKind::AssignTaxi => json!({"status": "success"}),
            MockKind::Traffic => {
                json!({"traffic": draws.choose(&["clear", "light", "moderate", "heavy", "accident"])})
            }
            MockKind::AvailableTaxi => {
                self.string_arg(arguments, "time")?;
                if draws.int(1, 100) <= 85 {
                    let letters: String = (0..4)
                        .map(|_| char::from(b'A' + draws.int(0, 25) as u8))
                        .collect();
                    let digits: String = (0..2)
                        .map(|_| char::from(b'0' + draws.int(0, 9) as u8))
                        .collect();
                    json!({"taxiId": format!("{letters}{digits}")})
                } else {
                    json!({"taxiId": "000"})
                }
            }
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

/// The weekday of a `YYYY-MM-DD` date (proleptic Gregorian).
pub fn weekday(date: &str) -> Option<&'static str> {
    let mut parts = date.trim().splitn(3, '-');
    let year: i64 = parts.next()?.parse().ok()?;
    let month: i64 = parts.next()?.parse().ok()?;
    let day: i64 = parts.next()?.get(..2)?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // Days since 1970-01-01 (Howard Hinnant's days_from_civil); 1970-01-01 was a Thursday.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    Some(DAYS[days.rem_euclid(7) as usize])
}

/// `run_sql_query`: one SQL statement on the server's own database.
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
        }
    }
}

#[async_trait::async_trait]
impl Tool for SqlTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let query = arguments
            .get("query")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::InvalidArguments {
                tool: self.spec.name.clone(),
                reason: "query is required and must be a string".into(),
            })?;
        match self.database.run(query).await {
            Ok(rows) => Ok(Value::Array(rows.into_iter().map(Value::Object).collect())),
            Err(error @ ServiceDbError::Refused(_)) => Err(ToolError::InvalidArguments {
                tool: self.spec.name.clone(),
                reason: error.to_string(),
            }),
            Err(error) => Err(ToolError::Failed {
                tool: self.spec.name.clone(),
                reason: error.to_string(),
            }),
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
            Err(error) => Err(ToolError::Failed {
                tool: self.spec.name.clone(),
                reason: error.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn weekdays_are_right() {
        assert_eq!(weekday("2024-09-22"), Some("Sunday"));
        assert_eq!(weekday("2000-02-29"), Some("Tuesday"));
        assert_eq!(weekday("1970-01-01"), Some("Thursday"));
        assert_eq!(weekday("2024-13-01"), None);
        assert_eq!(weekday("soon"), None);
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
