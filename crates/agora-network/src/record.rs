//! What a run of the screenplay leaves behind: one record per query and the network's final
//! state, as plain serde data. Runs are written as JSON (`demo/network/runs/*.json`) and the
//! report is computed from them alone, so a report can be rebuilt without rerunning anything.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Which thresholds the network ran with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The paper's thresholds: natural language, then protocols, negotiation and routines.
    Agora,
    /// Every threshold at infinity: natural language only (the counterfactual).
    NlOnly,
}

impl Mode {
    /// `agora` or `nl-only`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Agora => "agora",
            Mode::NlOnly => "nl-only",
        }
    }
}

/// LLM use: calls, tokens and cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallTotals {
    /// Calls.
    pub calls: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Cost at the price table's rates (each agent priced as its model in the paper).
    pub cost_usd: f64,
    /// Wall time the model spent on the calls, in milliseconds (as recorded).
    pub latency_ms: u64,
}

impl CallTotals {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &CallTotals) {
        self.calls += other.calls;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cost_usd += other.cost_usd;
        self.latency_ms += other.latency_ms;
    }
}

/// One query of the screenplay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryRecord {
    /// 0-based index among the screenplay's queries (sync entries are not counted).
    pub index: usize,
    /// The user agent that ran the task.
    pub user: String,
    /// The target server.
    pub server: String,
    /// The task type.
    pub task: String,
    /// HTTP 200 and an output valid against the task's output schema.
    pub success: bool,
    /// Why it failed (timeouts included), if it did.
    pub error: Option<String>,
    /// How the user's side ran it: its ladder rung (`natural`, `protocol`, `routine`, ...).
    pub path: String,
    /// Wall time of the query (the user's task, the servers' and helpers' work, and the
    /// background routine writing it triggered), in milliseconds.
    pub wall_ms: u64,
    /// All LLM use the query caused, on every agent.
    pub llm: CallTotals,
    /// The same by category (`conversation`, `checking`, `negotiation`, `implementing`, and
    /// the sender's `querying`, when present).
    pub by_category: BTreeMap<String, CallTotals>,
}

impl QueryRecord {
    /// Served entirely by routines: no LLM call anywhere, and it succeeded.
    pub fn routine_only(&self) -> bool {
        self.success && self.llm.calls == 0
    }
}

/// The network's state at the end of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkStats {
    /// Protocol documents held by each protocol database.
    pub protocols_per_db: BTreeMap<String, u64>,
    /// Negotiations that ended in a protocol.
    pub negotiations: u64,
    /// Routines written by servers' programmers (receiver side) and active at the end.
    pub server_routines: u64,
    /// Routines written for users' and helpers' tasks (sender side), active at the end.
    pub sender_routines: u64,
}

/// A whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The thresholds used.
    pub mode: Mode,
    /// The LLM, in words (model, or the cassette replayed).
    pub llm: String,
    /// Queries of the screenplay asked for (the run has that many records unless it stopped).
    pub queries_planned: usize,
    /// One per query, in screenplay order.
    pub queries: Vec<QueryRecord>,
    /// Totals over all queries.
    pub totals: CallTotals,
    /// Totals by category.
    pub by_category: BTreeMap<String, CallTotals>,
    /// The network at the end.
    pub network: NetworkStats,
    /// Wall time of the whole run (start-up included), in seconds.
    pub wall_secs: f64,
}

impl RunRecord {
    /// Recomputes `totals` and `by_category` from the query records.
    pub fn recompute_totals(&mut self) {
        let mut totals = CallTotals::default();
        let mut by_category: BTreeMap<String, CallTotals> = BTreeMap::new();
        for query in &self.queries {
            totals.add(&query.llm);
            for (category, usage) in &query.by_category {
                by_category.entry(category.clone()).or_default().add(usage);
            }
        }
        self.totals = totals;
        self.by_category = by_category;
    }

    /// Queries that succeeded.
    pub fn successes(&self) -> usize {
        self.queries.iter().filter(|q| q.success).count()
    }
}
