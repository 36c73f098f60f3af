//! The network and the screenplay, as data.
//!
//! `demo/network/network.json` describes the agents (servers with their tools, databases and
//! tasks; users; protocol databases and their peers) and the task types;
//! `demo/network/screenplay.json` is the paper's 1000-query screenplay with a protocol
//! database sync after every 10 queries. Both are embedded in the binary, so the demo runs from
//! anywhere; `derive_network.py` beside them records how they were derived from the paper's data.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The embedded network description.
pub const NETWORK_JSON: &str = include_str!("../../../demo/network/network.json");
/// The embedded screenplay.
pub const SCREENPLAY_JSON: &str = include_str!("../../../demo/network/screenplay.json");

/// The whole network.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSpec {
    /// The date the screenplay's tasks were generated (the mock `currentDate`).
    pub today: String,
    /// The `getMenu` mock's menus: cuisine → [(dish, price)].
    pub menus: BTreeMap<String, Vec<(String, f64)>>,
    /// Task types by name: users' tasks and helpers' (external tools') tasks.
    pub tasks: BTreeMap<String, TaskSpec>,
    /// Database kinds (`hotel`, `skiResort`, ...) and their tables.
    pub databases: BTreeMap<String, DatabaseSpec>,
    /// The servers, in the paper's order (their ports follow it).
    pub servers: Vec<ServerSpec>,
    /// The users, in the paper's order.
    pub users: Vec<UserSpec>,
    /// The protocol databases.
    pub protocol_dbs: Vec<ProtocolDbSpec>,
}

/// A task type: description and input/output JSON Schemas.
#[derive(Debug, Clone, Deserialize)]
pub struct TaskSpec {
    /// What the task is.
    pub description: String,
    /// The task data's schema.
    pub input: Value,
    /// The output's schema.
    pub output: Value,
}

/// A database kind.
#[derive(Debug, Clone, Deserialize)]
pub struct DatabaseSpec {
    /// Tables by name.
    pub tables: BTreeMap<String, TableSpec>,
}

/// One table.
#[derive(Debug, Clone, Deserialize)]
pub struct TableSpec {
    /// What it holds.
    pub description: String,
    /// Column → SQL type, in order.
    pub columns: Map<String, Value>,
    /// Table constraints.
    #[serde(default)]
    pub constraints: Vec<String>,
    /// Seed rows.
    #[serde(default)]
    pub rows: Vec<Map<String, Value>>,
}

/// A server agent.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerSpec {
    /// Its id (`weatherServer`, `hotel1`, ...).
    pub id: String,
    /// The paper's model for it (prices its LLM calls).
    pub model: String,
    /// Who it is and its house rules.
    pub description: String,
    /// Its database kind, if it has one.
    pub database: Option<String>,
    /// Its tools (besides `run_sql_query`, which every database-backed server has).
    pub tools: Vec<ToolSpecEntry>,
    /// The task types users send it.
    pub tasks: Vec<String>,
    /// The protocol database its helper uses.
    pub protocol_db: String,
}

/// One of a server's tools: a seeded mock, or an external tool run through the server's helper.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ToolSpecEntry {
    /// A built-in mock.
    Mock {
        /// The tool's name as the server sees it.
        name: String,
        /// Which mock (`weather`, `currentDate`, `getMenu`, ...).
        mock: String,
        /// What it does.
        description: String,
        /// Its arguments' schema.
        input: Value,
        /// Its result's schema.
        output: Value,
    },
    /// Another server, reached through the helper as the task `task`.
    External {
        /// The tool's name (also the helper's task type).
        name: String,
        /// The target server's id.
        external: String,
        /// The helper's task type.
        task: String,
        /// The task only reads (a lookup): a call changes nothing on the target server, so a
        /// shadow check may make it for real.
        #[serde(default, rename = "readOnly")]
        read_only: bool,
    },
}

impl ToolSpecEntry {
    /// The tool's name.
    pub fn name(&self) -> &str {
        match self {
            ToolSpecEntry::Mock { name, .. } | ToolSpecEntry::External { name, .. } => name,
        }
    }
}

/// A user agent.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserSpec {
    /// Its id (`bael`, ...).
    pub id: String,
    /// The paper's model for it.
    pub model: String,
    /// Its protocol database.
    pub protocol_db: String,
}

/// A protocol database.
#[derive(Debug, Clone, Deserialize)]
pub struct ProtocolDbSpec {
    /// Its id.
    pub id: String,
    /// The databases it exchanges documents with.
    pub peers: Vec<String>,
}

/// One screenplay entry.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// A user runs a task against a server.
    Query(Query),
    /// A protocol database shares its documents with its peers.
    Sync(String),
}

/// A query of the screenplay.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// 0-based among queries.
    pub index: usize,
    /// The user.
    pub user: String,
    /// The target server.
    pub server: String,
    /// The task type.
    pub task: String,
    /// The task data.
    pub data: Value,
}

/// Why the embedded (or a given) network or screenplay is unusable.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Not the expected JSON.
    #[error("{0}: {1}")]
    Json(&'static str, serde_json::Error),
    /// A reference to something that does not exist.
    #[error("{0}")]
    Dangling(String),
}

impl NetworkSpec {
    /// The embedded network.
    pub fn embedded() -> Result<NetworkSpec, SpecError> {
        NetworkSpec::parse(NETWORK_JSON)
    }

    /// Parses and checks a network description.
    pub fn parse(text: &str) -> Result<NetworkSpec, SpecError> {
        let spec: NetworkSpec =
            serde_json::from_str(text).map_err(|e| SpecError::Json("network.json", e))?;
        spec.check()?;
        Ok(spec)
    }

    fn check(&self) -> Result<(), SpecError> {
        let dbs: Vec<&str> = self.protocol_dbs.iter().map(|d| d.id.as_str()).collect();
        for server in &self.servers {
            for task in &server.tasks {
                self.task_spec(task)?;
            }
            if let Some(db) = &server.database
                && !self.databases.contains_key(db)
            {
                return Err(SpecError::Dangling(format!(
                    "server {} has an unknown database {db}",
                    server.id
                )));
            }
            for tool in &server.tools {
                if let ToolSpecEntry::External { external, task, .. } = tool {
                    self.server(external)?;
                    self.task_spec(task)?;
                }
            }
        }
        for user in &self.users {
            if !dbs.contains(&user.protocol_db.as_str()) {
                return Err(SpecError::Dangling(format!(
                    "user {} has an unknown protocol database {}",
                    user.id, user.protocol_db
                )));
            }
        }
        Ok(())
    }

    /// A server by id.
    pub fn server(&self, id: &str) -> Result<&ServerSpec, SpecError> {
        self.servers
            .iter()
            .find(|s| s.id == id)
            .ok_or_else(|| SpecError::Dangling(format!("no server {id}")))
    }

    /// A task type by name.
    pub fn task_spec(&self, name: &str) -> Result<&TaskSpec, SpecError> {
        self.tasks
            .get(name)
            .ok_or_else(|| SpecError::Dangling(format!("no task type {name}")))
    }

    /// The helpers: servers with external tools, each needing an outbound node.
    pub fn helpers(&self) -> impl Iterator<Item = &ServerSpec> {
        self.servers.iter().filter(|s| {
            s.tools
                .iter()
                .any(|t| matches!(t, ToolSpecEntry::External { .. }))
        })
    }

    /// The task data normalised to the task's input schema: the paper's generator wrote some
    /// dates as one-element lists (`["2024-03-16"]`) where the schema says string; those are
    /// unwrapped (the report says so). Everything else is passed as is.
    pub fn normalize_data(&self, task: &str, data: &Value) -> Value {
        let Some(spec) = self.tasks.get(task) else {
            return data.clone();
        };
        let Value::Object(fields) = data else {
            return data.clone();
        };
        let properties = &spec.input["properties"];
        let mut out = Map::new();
        for (key, value) in fields {
            let wants_string = properties[key]["type"] == json!("string");
            let value = match value {
                Value::Array(items) if wants_string && items.len() == 1 && items[0].is_string() => {
                    items[0].clone()
                }
                other => other.clone(),
            };
            out.insert(key.clone(), value);
        }
        Value::Object(out)
    }
}

/// Parses a screenplay: a JSON list of `[user, [server, task], data]` queries and
/// `[protocolDb, [null, "synchronization"], null]` syncs.
pub fn parse_screenplay(text: &str) -> Result<Vec<Entry>, SpecError> {
    let raw: Vec<(String, (Option<String>, String), Value)> =
        serde_json::from_str(text).map_err(|e| SpecError::Json("screenplay.json", e))?;
    let mut entries = Vec::with_capacity(raw.len());
    let mut index = 0;
    for (agent, (server, task), data) in raw {
        match server {
            None if task == "synchronization" => entries.push(Entry::Sync(agent)),
            None => {
                return Err(SpecError::Dangling(format!(
                    "entry for {agent} has no server and is not a sync"
                )));
            }
            Some(server) => {
                entries.push(Entry::Query(Query {
                    index,
                    user: agent,
                    server,
                    task,
                    data,
                }));
                index += 1;
            }
        }
    }
    Ok(entries)
}

/// The embedded screenplay.
pub fn embedded_screenplay() -> Result<Vec<Entry>, SpecError> {
    parse_screenplay(SCREENPLAY_JSON)
}

/// How many queries of the screenplay go to each (server, task).
pub fn counts_by_server_task(entries: &[Entry]) -> BTreeMap<(String, String), u64> {
    let mut counts = BTreeMap::new();
    for entry in entries {
        if let Entry::Query(query) = entry {
            *counts
                .entry((query.server.clone(), query.task.clone()))
                .or_insert(0) += 1;
        }
    }
    counts
}

/// A stratified sample of a screenplay: of each (server, task)'s queries, `per_pair` drawn at
/// random (a SplitMix64 stream of `seed`), or all of them when it has no more. Every sync is
/// kept, and the queries keep their order and their screenplay indices, so a run of the sample
/// meets them as the whole screenplay would, minus the others.
///
/// This is how the NL-only mode covers the whole screenplay without running all of it: every
/// pair is measured, by at least `per_pair` queries or by all of its own, and the report
/// extrapolates per pair (marked ESTIMATE, with its spread).
pub fn stratified_sample(entries: &[Entry], per_pair: usize, seed: u64) -> Vec<Entry> {
    let mut by_pair: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for entry in entries {
        if let Entry::Query(query) = entry {
            by_pair
                .entry((query.server.as_str(), query.task.as_str()))
                .or_default()
                .push(query.index);
        }
    }
    let mut draws = crate::generator::Draws(seed);
    let mut kept = std::collections::BTreeSet::new();
    for mut indices in by_pair.into_values() {
        if indices.len() > per_pair {
            draws.shuffle(&mut indices);
            indices.truncate(per_pair);
        }
        kept.extend(indices);
    }
    entries
        .iter()
        .filter(|entry| match entry {
            Entry::Query(query) => kept.contains(&query.index),
            Entry::Sync(_) => true,
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stratified_sample_takes_each_pair_up_to_its_quota_in_screenplay_order() {
        let entries = embedded_screenplay().expect("screenplay");
        let counts = counts_by_server_task(&entries);
        let sample = stratified_sample(&entries, 20, 7);
        let sampled = counts_by_server_task(&sample);
        assert_eq!(sampled.len(), counts.len(), "every pair is sampled");
        for (pair, &count) in &counts {
            assert_eq!(sampled[pair], count.min(20), "{pair:?}");
        }
        let syncs = |entries: &[Entry]| {
            entries
                .iter()
                .filter(|e| matches!(e, Entry::Sync(_)))
                .count()
        };
        assert_eq!(syncs(&sample), syncs(&entries), "every sync is kept");
        let indices: Vec<usize> = sample
            .iter()
            .filter_map(|e| match e {
                Entry::Query(q) => Some(q.index),
                Entry::Sync(_) => None,
            })
            .collect();
        assert!(indices.windows(2).all(|w| w[0] < w[1]), "screenplay order");
        let by_index: BTreeMap<usize, &Entry> = entries
            .iter()
            .filter_map(|e| match e {
                Entry::Query(q) => Some((q.index, e)),
                Entry::Sync(_) => None,
            })
            .collect();
        for entry in &sample {
            if let Entry::Query(query) = entry {
                assert_eq!(by_index[&query.index], entry, "queries are unchanged");
            }
        }
        // The big pairs are drawn over the whole screenplay, not its beginning.
        assert!(indices.iter().any(|&i| i > 900), "{indices:?}");
        assert_eq!(stratified_sample(&entries, 20, 7), sample, "seeded");
        assert_ne!(
            stratified_sample(&entries, 20, 8),
            sample,
            "another seed, another draw"
        );
    }

    #[test]
    fn the_embedded_network_and_screenplay_are_the_papers() {
        let network = NetworkSpec::embedded().expect("network");
        assert_eq!(network.servers.len(), 15);
        assert_eq!(network.users.len(), 85);
        assert_eq!(network.protocol_dbs.len(), 3);
        assert_eq!(network.helpers().count(), 8);
        let entries = embedded_screenplay().expect("screenplay");
        let queries = entries
            .iter()
            .filter(|e| matches!(e, Entry::Query(_)))
            .count();
        assert_eq!(queries, 1000);
        assert_eq!(entries.len(), 1100);
        assert_eq!(entries[10], Entry::Sync("protocolDb1".into()));
        let counts = counts_by_server_task(&entries);
        let ski2: u64 = counts
            .iter()
            .filter(|((s, _), _)| s == "skiResort2")
            .map(|(_, n)| n)
            .sum();
        assert_eq!(ski2, 438);
        for entry in &entries {
            if let Entry::Query(q) = entry {
                let user = network.users.iter().any(|u| u.id == q.user);
                assert!(user, "unknown user {}", q.user);
                let server = network.server(&q.server).expect("server");
                assert!(server.tasks.contains(&q.task));
            }
        }
    }

    #[test]
    fn list_dates_are_unwrapped_where_the_schema_wants_a_string() {
        let network = NetworkSpec::embedded().expect("network");
        let data =
            json!({"date": ["2024-03-16"], "hour": 18, "numTickets": 2, "movie": "Stand by Me"});
        let fixed = network.normalize_data("buyTickets", &data);
        assert_eq!(fixed["date"], json!("2024-03-16"));
        assert_eq!(fixed["hour"], json!(18));
    }
}
