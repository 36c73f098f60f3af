//! What a run of the screenplay leaves behind: one record per query and the network's final
//! state, as plain serde data. Runs are written as JSON (`demo/network/runs/*.json`) and the
//! report is computed from them alone, so a report can be rebuilt without rerunning anything.
//! Each query keeps its task data and the output the user delivered, so the judge
//! (`agora_judge`) can give its verdict from a record alone ([`RunRecord::judge`]).

use std::collections::BTreeMap;

use agora_judge::{Judge, Verdict, Writes};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::setup::ServerSetup;
use crate::spec::NetworkSpec;

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
    /// Of those, the ones the endpoint read from its prompt cache (absent: none, or a cassette
    /// recorded before they were kept).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Cost at the price table's rates (each agent priced as its model in the paper).
    pub cost_usd: f64,
    /// Wall time the model spent on the calls, in milliseconds (as recorded).
    pub latency_ms: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

impl CallTotals {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &CallTotals) {
        self.calls += other.calls;
        self.prompt_tokens += other.prompt_tokens;
        self.cached_prompt_tokens += other.cached_prompt_tokens;
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
    /// The task data, as the screenplay has it.
    #[serde(default)]
    pub data: Value,
    /// HTTP 200 and an output valid against the task's output schema ("schema-valid"; whether
    /// it is right is [`QueryRecord::verdict`]).
    pub success: bool,
    /// The output the user delivered, if any.
    #[serde(default)]
    pub output: Option<Value>,
    /// Who answered on the target server's side: `llm` (its LLM took part in the conversation)
    /// or `routine` (a routine answered, no LLM); none when no output came.
    #[serde(default)]
    pub answered_by: Option<String>,
    /// What the query wrote to the target server's database, when the server has one: the
    /// judge holds the reply to it (see `agora_judge::writes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes: Option<Writes>,
    /// The judge's verdict on the output (see `agora_judge::judge`).
    #[serde(default)]
    pub verdict: Option<Verdict>,
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
    /// the sender's `querying` and the servers' `shadow`, when present).
    pub by_category: BTreeMap<String, CallTotals>,
    /// The shadow checks servers made of their routines' answers during the query.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<ShadowNote>,
}

/// A shadow check of a server routine's answer: whether the server's LLM, answering again on
/// scratch state, agreed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShadowNote {
    /// The server whose routine was checked.
    pub server: String,
    /// Whether the LLM's answer agreed (reply and effects).
    pub agreed: bool,
    /// How they differ, when they did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub difference: String,
}

impl QueryRecord {
    /// Judged correct.
    pub fn correct(&self) -> bool {
        self.verdict == Some(Verdict::Correct)
    }

    /// The verdict's word (`correct`, `wrong`, `failed`, `unjudged`), `unjudged` before judging.
    pub fn verdict_word(&self) -> &'static str {
        self.verdict
            .as_ref()
            .map(Verdict::word)
            .unwrap_or("unjudged")
    }

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
    /// The mock tools' seed (the judge draws the same mocks).
    #[serde(default = "default_seed")]
    pub seed: u64,
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
    /// Set when the run covered a stratified sample of the screenplay, not a prefix of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<Sample>,
    /// How the agents answered and programmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<ServerSetup>,
}

/// A stratified sample of the screenplay (`agora_judge::spec::stratified_sample`): each
/// (server, task) pair's queries, `per_pair` of them drawn with `seed`, or all it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Queries drawn per pair (a pair with fewer runs all of its own).
    pub per_pair: usize,
    /// The draw's seed.
    pub seed: u64,
}

impl Sample {
    /// The sample's entries of the screenplay `entries`.
    pub fn draw(&self, entries: &[crate::spec::Entry]) -> Vec<crate::spec::Entry> {
        crate::spec::stratified_sample(entries, self.per_pair.max(1), self.seed)
    }
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

    /// Queries whose output was schema-valid.
    pub fn successes(&self) -> usize {
        self.queries.iter().filter(|q| q.success).count()
    }

    /// Queries judged correct.
    pub fn correct(&self) -> usize {
        self.queries.iter().filter(|q| q.correct()).count()
    }

    /// Gives every query the judge's verdict, from the record alone (the queries are the first
    /// of the screenplay, in order, so the judge's reference state is right for each), its
    /// writes included where they were observed.
    pub fn judge(&mut self, network: &NetworkSpec) {
        let mut judge = Judge::new(network, self.seed);
        for query in &mut self.queries {
            let verdict = judge.judge_with_writes(
                &query.server,
                &query.task,
                &query.data,
                query.output.as_ref(),
                query.writes.as_ref(),
            );
            query.verdict = Some(verdict);
        }
    }
}

/// The seed of runs recorded before the seed was: the demo's default.
fn default_seed() -> u64 {
    42
}
