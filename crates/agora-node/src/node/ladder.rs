//! The sender's ladder: per (target, task), natural language first, then an existing protocol,
//! then a negotiated one.
//!
//! Each run of a task against a target counts a use in the sender's memory (in the store) and
//! climbs when a threshold is reached:
//! 1. below `explore_threshold` uses, natural language;
//! 2. from `explore_threshold`, once (until something changes): look for an existing protocol in
//!    the target's `/.wellknown`, in the protocols this sender already uses for the task with
//!    other targets, and in its protocol database; skip (and remember as rejected) those whose
//!    text does not name every field of the task (`sender::fit`), prefilter the rest by name and
//!    description when there are more than `max_candidates`, and ask the LLM (`checking`)
//!    whether each fits the task;
//! 3. from `negotiate_threshold` uses, or as soon as the target asked for it
//!    (`negotiationRequested`), negotiate a protocol (`negotiation`), publish it to the protocol
//!    database if one is configured, and send under it from then on, with the database's URL
//!    as the source (a `data:` URI otherwise).
//!
//! A target that rejects the protocol in use has it remembered as refused (never offered to
//! that target again), and the run falls back to natural language. Every run is logged with its
//! rung and steps for `agora stats`.
//! 4. Under a protocol in use, once the LLM has written and examined a sender routine for the
//!    (target, task, protocol), the routine builds the body and reads the reply with no LLM call
//!    (rung `routine`; see `node::sender_routines`). A failing routine hands that run to the
//!    LLM (step `routine_failed`).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agora_llm::{ChatRequest, LlmError};
use agora_protocol::{ProtocolHash, VerifiedDocument, data_uri};
use agora_store::{SenderMemory, SenderRun};
use serde_json::Value;

use super::core::Core;
use super::programming::Programmer;
use crate::accounting::{Category, QueryContext};
use crate::sender::fit::{self, ProtocolFit};
use crate::sender::{self, SendError, SendOutcome};
use crate::task::Task;

/// Largest `/.wellknown` listing or search result read.
pub(super) const MAX_LISTING_BYTES: usize = 256 * 1024;

/// One task run and how the ladder got there.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRun {
    /// The validated output and the run's costs on this side.
    pub outcome: SendOutcome,
    /// The protocol used, if the run went under one.
    pub protocol: Option<ProtocolHash>,
    /// The ladder's steps on the way (`explored`, `found`, `negotiated`, `rejected`, ...).
    pub steps: Vec<String>,
    /// The rung that answered.
    pub rung: Rung,
    /// LLM calls this run made on this side, the ladder's own checks included.
    pub llm_calls: i64,
    /// Their cost, in USD at the node's price table.
    pub cost_usd: f64,
}

/// The rung of the sender's ladder a task run went by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rung {
    /// A natural-language request; the sender's LLM wrote it and read the reply.
    NaturalLanguage,
    /// A request under a protocol, written (and read) by the sender's LLM.
    Protocol,
    /// A request under a protocol, written and read by a sender routine: no LLM call.
    Routine,
}

impl Rung {
    /// The name used in the sender's run log and in reports: `natural`, `protocol`, `routine`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NaturalLanguage => "natural",
            Self::Protocol => "protocol",
            Self::Routine => "routine",
        }
    }
}

/// A sender for agents of another protocol.
#[async_trait::async_trait]
pub trait ForeignSender: Send + Sync {
    /// `None` when `target` is not an agent this sender speaks to (the node then speaks Agora
    /// to it); else the agent's answer to `message` as text, or why there is none.
    async fn natural(&self, target: &str, message: &str) -> Option<Result<String, SendError>>;
}

/// How a run under a protocol went with the sender routine.
pub(super) enum RoutineRun {
    /// The key has no active sender routine (or routines are off): ask the LLM.
    NoRoutine,
    /// The routine did the run; the result may still be the target's rejection or an
    /// unreachable target.
    Done(Result<SendOutcome, SendError>),
    /// The routine failed (counted on it and logged); ask the LLM for this run.
    Failed,
}

/// The sending role of a node: the ladder per (target, task), messages outside a task, and
/// the sender routines' runs. Cloning is cheap.
#[derive(Clone)]
pub(crate) struct Sender {
    pub(super) core: Arc<Core>,
    pub(super) programmer: Programmer,
    /// The sender for agents that do not speak Agora, if one is installed (see `foreign`).
    pub(super) foreign: Arc<OnceLock<Arc<dyn ForeignSender>>>,
}

impl Sender {
    /// [`Node::run_task`], with `observer` told of every LLM call the run makes.
    pub(crate) async fn run_task_observed(
        &self,
        target: &str,
        task: &Task,
        data: &Value,
        observer: std::sync::Arc<dyn crate::Observer>,
    ) -> Result<TaskRun, SendError> {
        crate::observer::scoped(observer, self.run_task(target, task, data)).await
    }

    /// Runs `task` against `target`, climbing the sender's ladder (see the module docs).
    pub(crate) async fn run_task(
        &self,
        target: &str,
        task: &Task,
        data: &Value,
    ) -> Result<TaskRun, SendError> {
        crate::task::validate(&task.input_schema, data).map_err(SendError::InvalidInput)?;
        let config = self.core.config.sender.clone();
        let store = &self.core.store;
        let mut memory = store
            .sender()
            .sender_memory(target, &task.name)
            .await
            .map_err(|e| SendError::Failed(format!("the sender's memory: {e}")))?
            .unwrap_or_else(|| SenderMemory {
                target: target.to_string(),
                task: task.name.clone(),
                next_negotiation_at: config.negotiate_threshold.max(1),
                ..SenderMemory::default()
            });
        memory.uses += 1;
        let mut steps = Vec::new();
        let checking = QueryContext::new(format!("ladder-{}", uuid::Uuid::new_v4().simple()), None);

        if memory.protocol_hash.is_none() {
            if memory.negotiation_requested || memory.uses >= memory.next_negotiation_at {
                self.climb_to_negotiation(target, task, &mut memory, &mut steps)
                    .await;
            } else if memory.uses >= config.explore_threshold.max(1) && !memory.explored {
                memory.explored = true;
                steps.push("explored".to_string());
                if let Some((document, sources)) =
                    self.explore(&checking, target, task, &mut memory).await
                {
                    steps.push(format!("found {}", document.hash()));
                    memory.protocol_hash = Some(document.hash());
                    memory.protocol_sources = sources;
                }
            }
        }

        let mut protocol = None;
        let mut by_routine = false;
        let mut result = match memory.protocol_hash {
            Some(hash) => match self.protocol_in_use(&hash).await {
                Some(document) => {
                    protocol = Some(hash);
                    let sources = memory.protocol_sources.clone();
                    let key = agora_store::SenderKey {
                        target: target.to_string(),
                        task: task.name.clone(),
                        protocol_hash: hash,
                    };
                    match self
                        .send_by_routine(&key, task, data, &document, &sources)
                        .await
                    {
                        RoutineRun::Done(result) => {
                            by_routine = true;
                            result
                        }
                        RoutineRun::Failed => {
                            steps.push("routine_failed".to_string());
                            self.send(target, task, data, Some((&document, &sources)))
                                .await
                        }
                        RoutineRun::NoRoutine => {
                            self.send(target, task, data, Some((&document, &sources)))
                                .await
                        }
                    }
                }
                None => Err(SendError::Failed(format!(
                    "the protocol in use {hash} is no longer in the store"
                ))),
            },
            None => self.send(target, task, data, None).await,
        };
        if let (Err(SendError::Rejected(reason)), Some(hash)) = (&result, protocol) {
            tracing::warn!(%hash, %reason, "the target rejected the protocol; back to natural language");
            steps.push(format!("rejected {hash}"));
            memory.rejected.push(hash);
            memory.protocol_hash = None;
            memory.protocol_sources.clear();
            memory.explored = false;
            protocol = None;
            result = self.send(target, task, data, None).await;
        }
        if let Ok(outcome) = &result
            && outcome.negotiation_requested
        {
            memory.negotiation_requested = true;
        }

        memory.updated_at_ms = self.core.clock.now_ms();
        if let Err(error) = store.sender().put_sender_memory(&memory).await {
            tracing::error!(%error, "could not store the sender's memory");
        }
        let checked = checking.tally();
        let rung = match (protocol, by_routine) {
            (Some(_), true) => Rung::Routine,
            (Some(_), false) => Rung::Protocol,
            (None, _) => Rung::NaturalLanguage,
        };
        let (outcome_word, error, llm_calls, tokens, cost) = match &result {
            Ok(o) => ("success", None, o.llm_calls, o.llm_tokens, o.llm_cost_usd),
            Err(e) => (error_word(e), Some(e.to_string()), 0, 0, 0.0),
        };
        let run = SenderRun {
            target: target.to_string(),
            task: task.name.clone(),
            rung: rung.as_str().to_string(),
            steps: steps.join(","),
            protocol_hash: protocol,
            outcome: outcome_word.to_string(),
            error,
            llm_calls: llm_calls + checked.calls,
            tokens: tokens + checked.prompt_tokens + checked.completion_tokens,
            cost_usd: cost + checked.cost_usd,
            created_at_ms: memory.updated_at_ms,
        };
        if let Err(error) = store.sender().record_sender_run(&run).await {
            tracing::error!(%error, "could not log a task run");
        }
        let (llm_calls, cost_usd) = (run.llm_calls, run.cost_usd);
        result.map(|outcome| TaskRun {
            outcome,
            protocol,
            steps,
            rung,
            llm_calls,
            cost_usd,
        })
    }

    async fn protocol_in_use(&self, hash: &ProtocolHash) -> Option<VerifiedDocument> {
        match self.core.store.document(hash).await {
            Ok(Some(stored)) => Some(stored.document),
            _ => None,
        }
    }

    /// Negotiates, publishes and adopts a protocol; on failure, waits another threshold.
    async fn climb_to_negotiation(
        &self,
        target: &str,
        task: &Task,
        memory: &mut SenderMemory,
        steps: &mut Vec<String>,
    ) {
        let config = &self.core.config.sender;
        memory.negotiation_requested = false;
        match self.negotiate(target, task).await {
            Ok(negotiated) => {
                let document = negotiated.document;
                steps.push(format!("negotiated {}", document.hash()));
                let mut sources = Vec::new();
                if let Some(database) = &config.protocol_db {
                    match sender::publish(
                        &self.core.targets,
                        database,
                        config.protocol_db_token.as_deref(),
                        document.text(),
                        Duration::from_secs(config.timeout_secs.max(1)),
                        config.max_reply_bytes,
                    )
                    .await
                    {
                        Ok(url) => {
                            steps.push("published".to_string());
                            sources.push(url);
                        }
                        Err(error) => {
                            tracing::warn!(%error, "could not publish the negotiated protocol")
                        }
                    }
                }
                if sources.is_empty() {
                    sources.push(data_uri::encode(document.text()));
                }
                memory.protocol_hash = Some(document.hash());
                memory.protocol_sources = sources;
            }
            Err(error) => {
                tracing::warn!(%error, "negotiation failed; natural language for now");
                steps.push("negotiation_failed".to_string());
                memory.next_negotiation_at = memory.uses + config.negotiate_threshold.max(1);
            }
        }
    }

    /// Looks for an existing protocol that fits the task.
    async fn explore(
        &self,
        context: &QueryContext,
        target: &str,
        task: &Task,
        memory: &mut SenderMemory,
    ) -> Option<(VerifiedDocument, Vec<String>)> {
        let config = &self.core.config.sender;
        let timeout = Duration::from_secs(config.timeout_secs.clamp(1, 30));
        let mut candidates: Vec<(ProtocolHash, Vec<String>)> = Vec::new();
        let base = target.trim_end_matches('/');
        match sender::get_json(
            &self.core.targets,
            &format!("{base}/.wellknown"),
            timeout,
            MAX_LISTING_BYTES,
        )
        .await
        {
            Ok(Value::Object(listing)) => {
                for (hash, sources) in listing {
                    let Ok(hash) = hash.parse::<ProtocolHash>() else {
                        continue;
                    };
                    let sources = sources
                        .as_array()
                        .map(|s| {
                            s.iter()
                                .filter_map(|s| s.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default();
                    candidates.push((hash, sources));
                }
            }
            Ok(_) => {}
            Err(error) => tracing::debug!(%error, "no /.wellknown listing"),
        }
        if let Ok(known) = self
            .core
            .store
            .sender()
            .sender_protocols_for_task(&task.name)
            .await
        {
            for other in known.into_iter().filter(|m| m.target != target) {
                if let Some(hash) = other.protocol_hash {
                    candidates.push((hash, other.protocol_sources));
                }
            }
        }
        if let Some(database) = &config.protocol_db {
            let query: String = format!("{} {}", task.name, task.description)
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| w.len() > 3)
                .take(8)
                .collect::<Vec<_>>()
                .join("+");
            let url = format!(
                "{}/protocols?q={query}&limit=10",
                database.trim_end_matches('/')
            );
            match sender::get_json(&self.core.targets, &url, timeout, MAX_LISTING_BYTES).await {
                Ok(Value::Array(hits)) => {
                    for hit in hits {
                        let hash = hit
                            .get("hash")
                            .and_then(Value::as_str)
                            .and_then(|h| h.parse().ok());
                        let url = hit.get("url").and_then(Value::as_str).map(String::from);
                        if let (Some(hash), Some(url)) = (hash, url) {
                            candidates.push((hash, vec![url]));
                        }
                    }
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "the protocol database search failed"),
            }
        }
        let mut seen = std::collections::HashSet::new();
        candidates.retain(|(hash, _)| !memory.rejected.contains(hash) && seen.insert(*hash));

        let now = self.core.clock.now_ms();
        let mut documents = Vec::new();
        for (hash, sources) in candidates {
            match self.core.resolver.resolve(&hash, &sources, now).await {
                Ok(document) => documents.push((document, sources)),
                Err(error) => {
                    tracing::debug!(%hash, %error, "a candidate protocol did not resolve")
                }
            }
        }
        // The structural check before the LLM: free, and it refuses the protocols of other tasks
        // that a small model accepts (see `sender::fit`). Like a target's refusal, the verdict is
        // remembered: the document's text, and so the verdict, never changes.
        documents.retain(|(document, _)| {
            let missing = fit::missing_fields(task, document.text());
            if missing.is_empty() {
                return true;
            }
            let hash = document.hash();
            tracing::info!(%hash, task = %task.name, ?missing, "candidate protocol lacks task fields");
            memory.rejected.push(hash);
            false
        });
        if documents.len() > config.max_candidates.max(1) {
            documents.sort_by_key(|(document, _)| std::cmp::Reverse(fit::overlap(task, document)));
            documents.truncate(config.max_candidates.max(1));
        }
        for (document, sources) in documents {
            let fit = match self.ask_fit(context, task, &document).await {
                Ok(fit) => fit,
                Err(error) => {
                    tracing::warn!(%error, "could not check a candidate protocol");
                    return None;
                }
            };
            tracing::info!(hash = %document.hash(), ?fit, "candidate protocol checked");
            if fit.fits() {
                let sources = if sources.is_empty() {
                    vec![data_uri::encode(document.text())]
                } else {
                    sources
                };
                return Some((document, sources));
            }
        }
        None
    }

    /// Whether `document` fits `task`, decided as the ladder decides it when exploring: the
    /// document must name every field of the task (no LLM call otherwise), and then the LLM is
    /// asked (ledger category `checking`). Nothing is remembered.
    pub(crate) async fn protocol_fit(
        &self,
        task: &Task,
        document: &VerifiedDocument,
    ) -> Result<ProtocolFit, SendError> {
        let missing = fit::missing_fields(task, document.text());
        if !missing.is_empty() {
            return Ok(ProtocolFit::MissingFields(missing));
        }
        let context = QueryContext::new(
            format!("fit-{}", uuid::Uuid::new_v4().simple()),
            Some(document.hash()),
        );
        Ok(self.ask_fit(&context, task, document).await?)
    }

    /// Asks the LLM whether `document` fits `task`; an answer that cannot be read is a no.
    async fn ask_fit(
        &self,
        context: &QueryContext,
        task: &Task,
        document: &VerifiedDocument,
    ) -> Result<ProtocolFit, LlmError> {
        let request = ChatRequest::new(fit::fit_messages(task, document))
            .json_schema("task_fit", fit::fit_schema())
            .max_tokens(160);
        let answer = self
            .core
            .chat(Category::Checking, context, &request)
            .await?;
        let verdict = serde_json::from_str::<Value>(answer.content.trim()).unwrap_or_default();
        let job = |key: &str| verdict.get(key).and_then(Value::as_str).unwrap_or("?");
        let reason = format!(
            "protocol: {}; task: {}",
            job("protocol_job"),
            job("task_job")
        );
        Ok(match verdict.get("suitable").and_then(Value::as_str) {
            Some("yes") => ProtocolFit::Fits { reason },
            _ => ProtocolFit::Unsuitable { reason },
        })
    }
}

fn error_word(error: &SendError) -> &'static str {
    match error {
        SendError::Rejected(_) => "rejected",
        SendError::Failed(_) => "failed",
        SendError::InvalidOutput(_) => "invalid_output",
        SendError::InvalidInput(_) => "invalid_input",
        _ => "error",
    }
}
