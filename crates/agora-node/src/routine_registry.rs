//! The routine registry as an operator sees it: add, list, show, test, enable, disable, remove,
//! and approve or reject a routine waiting for review.
//!
//! These operations work on the store, so the admin API (through [`crate::Node`], which then
//! reloads its routines at once) and the `agora routine` commands (which open the store
//! directly, with no node running in the process) share them. Adding builds the source with the
//! engine first, so a routine that does not build is never stored and the node never compiles
//! JavaScript on the request path; it stores the protocol document, and records an operator
//! decision allowing the protocol, since serving it with a routine is the operator's call.

use std::sync::Arc;

use agora_protocol::{ProtocolHash, VerifiedDocument};
use agora_store::{
    Decision, DecisionOrigin, NewRoutine, ReviewDecision, Routine, RoutineAttempt, RoutineCode,
    RoutineLanguage, RoutineOrigin, RoutineReview, RoutineStatus, Store, StoreError,
};

use crate::clock::Clock;
use crate::programmer::exam;
use crate::routine_table::{GrantedTools, limits_of};
use crate::routines::{LoadedRoutine, RoutineEngine, RoutineError, RoutineLimits, RoutineSource};
use crate::tools::ToolRegistry;

/// Longest deadline a routine may ask for.
const MAX_TIMEOUT_MS: u128 = 60_000;
/// Kept examples [`RoutineRegistry::examine`] runs a routine on at most.
const MAX_EXAMINED: i64 = 20;
/// Least and most memory a routine may ask for.
const MEMORY_BYTES: std::ops::RangeInclusive<u64> = (1 << 20)..=(4 << 30);

/// The protocol a new routine answers.
#[derive(Debug, Clone, PartialEq)]
pub enum ProtocolInput {
    /// The document's text; it is stored.
    Text(String),
    /// The hash of a document already in the store.
    Hash(ProtocolHash),
}

/// A routine to add.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutineSpec {
    /// A unique name: letters, digits, `-`, `_` and `.`, not all digits.
    pub name: String,
    /// The protocol it answers.
    pub protocol: ProtocolInput,
    /// Its code.
    pub source: RoutineSource,
    /// The tools it may call; each must be one of the node's tools.
    pub tools: Vec<String>,
    /// Its deadline and memory cap.
    pub limits: RoutineLimits,
    /// Who wrote it.
    pub origin: RoutineOrigin,
    /// Whether it starts active (disabling the protocol's active routine) or disabled.
    pub activate: bool,
}

/// Why a registry operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No routine has that name or id.
    #[error("no routine {0:?}")]
    NotFound(String),
    /// The name is taken.
    #[error("a routine named {0:?} already exists")]
    NameTaken(String),
    /// The request is malformed (bad name, limits out of range).
    #[error("{0}")]
    Invalid(String),
    /// A bare hash names no stored protocol document.
    #[error("no protocol document {0} in the store: add it first, or pass its file")]
    UnknownProtocol(ProtocolHash),
    /// A granted tool is not one of the node's tools.
    #[error("unknown tool {tool:?}: this node's tools are [{available}]")]
    UnknownTool {
        /// The tool asked for.
        tool: String,
        /// The node's tools, comma-separated.
        available: String,
    },
    /// A reviewed edit did not build or failed its examination; the text is the report.
    #[error("{0}")]
    Rejected(String),
    /// This process has no routine engine to build or run routines with.
    #[error("no routine engine is configured")]
    NoEngine,
    /// The source does not build, or the routine could not be loaded.
    #[error(transparent)]
    Routine(#[from] RoutineError),
    /// The store failed.
    #[error("store error: {0}")]
    Store(StoreError),
}

impl From<StoreError> for RegistryError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Conflict(message) => RegistryError::Invalid(message),
            other => RegistryError::Store(other),
        }
    }
}

/// Operator operations on the stored routines.
#[derive(Clone)]
pub struct RoutineRegistry {
    store: Store,
    engine: Option<Arc<dyn RoutineEngine>>,
    tools: ToolRegistry,
    clock: Arc<dyn Clock>,
}

impl RoutineRegistry {
    /// A registry over `store`, building and running with `engine` (if any) and `tools`.
    pub fn new(
        store: Store,
        engine: Option<Arc<dyn RoutineEngine>>,
        tools: ToolRegistry,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            engine,
            tools,
            clock,
        }
    }

    fn engine(&self) -> Result<&Arc<dyn RoutineEngine>, RegistryError> {
        self.engine.as_ref().ok_or(RegistryError::NoEngine)
    }

    /// The routine engine it builds and runs routines with, if it has one.
    pub fn routine_engine(&self) -> Option<&Arc<dyn RoutineEngine>> {
        self.engine.as_ref()
    }

    /// The store it keeps routines in.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Builds and stores a routine, stores its protocol document and allows the protocol.
    pub async fn add(&self, spec: RoutineSpec) -> Result<Routine, RegistryError> {
        self.add_with(spec, None, false).await
    }

    /// [`RoutineRegistry::add`] with the component already built from `spec.source` (the
    /// programmer builds a candidate once, examines it, then stores that very component).
    /// It starts `pending` instead when `pending` (the `review` activation policy).
    pub(crate) async fn add_built(
        &self,
        spec: RoutineSpec,
        component: Vec<u8>,
        pending: bool,
    ) -> Result<Routine, RegistryError> {
        self.add_with(spec, Some(component), pending).await
    }

    async fn add_with(
        &self,
        spec: RoutineSpec,
        built: Option<Vec<u8>>,
        pending: bool,
    ) -> Result<Routine, RegistryError> {
        check_name(&spec.name)?;
        check_limits(&spec.limits)?;
        let mut tools = spec.tools.clone();
        tools.sort();
        tools.dedup();
        let available = self.tools.specs();
        if let Some(tool) = tools
            .iter()
            .find(|t| !available.iter().any(|s| &s.name == *t))
        {
            return Err(RegistryError::UnknownTool {
                tool: tool.clone(),
                available: available
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        if self.store.routine_named(&spec.name).await?.is_some() {
            return Err(RegistryError::NameTaken(spec.name));
        }
        let document = match &spec.protocol {
            ProtocolInput::Text(text) => VerifiedDocument::from_text(text),
            ProtocolInput::Hash(hash) => match self.store.document(hash).await? {
                Some(stored) => stored.document,
                None => return Err(RegistryError::UnknownProtocol(*hash)),
            },
        };
        let component = match built {
            Some(component) => component,
            None => self.engine()?.build(&spec.source).await?,
        };
        let (language, source) = match spec.source {
            RoutineSource::JavaScript(text) => (RoutineLanguage::JavaScript, Some(text)),
            RoutineSource::Component(_) => (RoutineLanguage::Wasm, None),
        };
        let now = self.clock.now_ms();
        self.store.put_document(&document, &[], now).await?;
        let routine = NewRoutine {
            name: spec.name.clone(),
            protocol_hash: document.hash(),
            language,
            code: RoutineCode { source, component },
            tools,
            timeout_ms: spec.limits.timeout.as_millis() as i64,
            memory_bytes: spec.limits.memory_bytes as i64,
            origin: spec.origin,
            status: match (pending, spec.activate) {
                (true, _) => RoutineStatus::Pending,
                (false, true) => RoutineStatus::Active,
                (false, false) => RoutineStatus::Disabled,
            },
        };
        let routine = match self.store.add_routine(&routine, now).await {
            Err(StoreError::Conflict(_)) => return Err(RegistryError::NameTaken(spec.name)),
            other => other?,
        };
        let decision = Decision {
            allowed: true,
            origin: DecisionOrigin::Operator,
            reason: format!("served by the routine {:?}", routine.name),
            decided_at_ms: now,
        };
        self.store
            .set_suitability(&routine.protocol_hash, &decision)
            .await?;
        tracing::info!(routine = %routine.name, protocol_hash = %routine.protocol_hash, "routine added");
        Ok(routine)
    }

    /// Every routine, oldest first.
    pub async fn list(&self) -> Result<Vec<Routine>, RegistryError> {
        Ok(self.store.routines().await?)
    }

    /// The routine with this name, or this id.
    pub async fn find(&self, reference: &str) -> Result<Routine, RegistryError> {
        if let Some(routine) = self.store.routine_named(reference).await? {
            return Ok(routine);
        }
        if let Ok(id) = reference.parse::<i64>()
            && let Some(routine) = self.store.routine(id).await?
        {
            return Ok(routine);
        }
        Err(RegistryError::NotFound(reference.to_string()))
    }

    /// A routine's code.
    pub async fn code(&self, routine: &Routine) -> Result<RoutineCode, RegistryError> {
        self.store
            .routine_code(routine.id)
            .await?
            .ok_or_else(|| RegistryError::NotFound(routine.name.clone()))
    }

    /// Activates a routine, disabling the protocol's other active routine.
    pub async fn enable(&self, reference: &str) -> Result<Routine, RegistryError> {
        self.set_status(reference, RoutineStatus::Active).await
    }

    /// Disables a routine; its protocol is answered by the LLM again.
    pub async fn disable(&self, reference: &str) -> Result<Routine, RegistryError> {
        self.set_status(reference, RoutineStatus::Disabled).await
    }

    async fn set_status(
        &self,
        reference: &str,
        status: RoutineStatus,
    ) -> Result<Routine, RegistryError> {
        let routine = self.find(reference).await?;
        if matches!(
            routine.status,
            RoutineStatus::Pending | RoutineStatus::Rejected
        ) {
            return Err(RegistryError::Invalid(format!(
                "the routine {:?} is {}: a routine written under review is approved or \
                 rejected, not enabled or disabled",
                routine.name, routine.status
            )));
        }
        self.store
            .set_routine_status(routine.id, status, self.clock.now_ms())
            .await?
            .ok_or_else(|| RegistryError::NotFound(reference.to_string()))
    }

    /// Approves a pending routine: it becomes active (its protocol's active routine is
    /// disabled). The decision is kept with `reviewer`.
    pub async fn approve(&self, reference: &str, reviewer: &str) -> Result<Routine, RegistryError> {
        self.review(reference, reviewer, ReviewDecision::Approved, String::new())
            .await
    }

    /// Rejects a pending routine with `reason`, which the programmer's next attempt at the
    /// protocol reads. The decision is kept with `reviewer`.
    pub async fn reject(
        &self,
        reference: &str,
        reviewer: &str,
        reason: &str,
    ) -> Result<Routine, RegistryError> {
        let reason = rejection_reason(reason)?;
        self.review(reference, reviewer, ReviewDecision::Rejected, reason.into())
            .await
    }

    /// Records a review decision on a pending routine and sets its status.
    pub(crate) async fn review(
        &self,
        reference: &str,
        reviewer: &str,
        decision: ReviewDecision,
        reason: String,
    ) -> Result<Routine, RegistryError> {
        let reviewer = reviewer_name(reviewer)?;
        let routine = self.find(reference).await?;
        let review = RoutineReview {
            id: 0,
            routine_id: routine.id,
            protocol_hash: routine.protocol_hash,
            decision,
            reason,
            reviewer: reviewer.to_string(),
            decided_at_ms: self.clock.now_ms(),
        };
        let reviewed = self.store.programming().review_routine(&review).await?;
        let routine = reviewed.ok_or_else(|| RegistryError::NotFound(reference.to_string()))?;
        tracing::info!(routine = %routine.name, %decision, reviewer, "routine reviewed");
        Ok(routine)
    }

    /// Removes a routine; returns it as it was.
    pub async fn remove(&self, reference: &str) -> Result<Routine, RegistryError> {
        let routine = self.find(reference).await?;
        if !self.store.delete_routine(routine.id).await? {
            return Err(RegistryError::NotFound(reference.to_string()));
        }
        Ok(routine)
    }

    /// The programmer's attempts for a protocol, oldest first.
    pub async fn attempts(
        &self,
        hash: &ProtocolHash,
    ) -> Result<Vec<RoutineAttempt>, RegistryError> {
        Ok(self.store.programming().attempts(Some(hash)).await?)
    }

    /// Runs a routine on its protocol's kept examples as the programmer examines a candidate:
    /// each tool call is answered from the recording (no tool runs, nothing is written), and
    /// each reply is graded against the LLM's. Whatever the routine's status; nothing is
    /// recorded.
    pub async fn examine(&self, reference: &str) -> Result<Vec<ExampleOutcome>, RegistryError> {
        let routine = self.find(reference).await?;
        let code = self.code(&routine).await?;
        let loaded = self.engine()?.load(&code.component).await?;
        let (examples, report) = self.exam(&routine, loaded.as_ref()).await?;
        Ok(examples
            .into_iter()
            .zip(report.results)
            .map(|(example, result)| ExampleOutcome {
                body: result.body,
                tool_calls: example.tool_calls,
                llm_reply: result.expected,
                routine_reply: result.got,
                failure: result.failure,
            })
            .collect())
    }

    /// `loaded` examined on the kept examples of `routine`'s protocol, under its limits; the
    /// examples, and the report in their order.
    async fn exam(
        &self,
        routine: &Routine,
        loaded: &dyn LoadedRoutine,
    ) -> Result<(Vec<agora_store::Example>, exam::ExamReport), RegistryError> {
        let hash = routine.protocol_hash;
        let examples = self
            .store
            .programming()
            .examples(&hash, MAX_EXAMINED)
            .await?;
        let document = self.store.document(&hash).await?;
        let schema = document
            .and_then(|stored| exam::reply_schema(stored.document.text()))
            .and_then(|schema| jsonschema::validator_for(&schema).ok());
        let limits = limits_of(routine);
        let report = exam::examine(loaded, &examples, schema.as_ref(), limits).await;
        Ok((examples, report))
    }

    /// Replaces the pending routine `reference` with the JavaScript `source` once it passes the
    /// examination on the protocol's kept examples: the edit is stored as a new pending routine
    /// (written by a human, with the reviewed one's tools and limits), and the reviewed one is
    /// rejected as replaced, with `reviewer` on record. An edit that does not build or fails is
    /// [`RegistryError::Rejected`] with the report, and nothing is stored.
    pub async fn edit(
        &self,
        reference: &str,
        reviewer: &str,
        source: &str,
    ) -> Result<Routine, RegistryError> {
        let routine = self.find(reference).await?;
        if routine.status != RoutineStatus::Pending {
            return Err(RegistryError::Invalid(format!(
                "the routine {:?} is {}, not pending: only a pending routine can be edited",
                routine.name, routine.status
            )));
        }
        let engine = self.engine()?;
        let edited = RoutineSource::JavaScript(source.to_string());
        let built = match engine.build(&edited).await {
            Ok(component) => engine
                .load(&component)
                .await
                .map(|loaded| (component, loaded)),
            Err(error) => Err(error),
        };
        let (component, loaded) = built.map_err(|error| {
            RegistryError::Rejected(format!("the edit does not build: {error}"))
        })?;
        let (_, report) = self.exam(&routine, loaded.as_ref()).await?;
        if report.results.is_empty() {
            return Err(RegistryError::Invalid(
                "the protocol has no kept examples to examine the edit on".into(),
            ));
        }
        if !report.passed() {
            return Err(RegistryError::Rejected(format!(
                "the edit failed its examination: {}",
                report.summary()
            )));
        }
        let spec = RoutineSpec {
            name: edited_name(&routine.name),
            protocol: ProtocolInput::Hash(routine.protocol_hash),
            source: edited,
            tools: routine.tools.clone(),
            limits: limits_of(&routine),
            origin: RoutineOrigin::Human,
            activate: false,
        };
        let edited = self.add_built(spec, component, true).await?;
        let reason = format!("replaced by the edited routine {:?}", edited.name);
        self.review(reference, reviewer, ReviewDecision::Edited, reason)
            .await?;
        Ok(edited)
    }

    /// Runs a routine once on `body`, with its granted tools and limits, whatever its status.
    /// Nothing is recorded: a test is not a request. The inner result is the routine's.
    pub async fn test(
        &self,
        reference: &str,
        body: &str,
    ) -> Result<Result<String, RoutineError>, RegistryError> {
        let routine = self.find(reference).await?;
        let code = self.code(&routine).await?;
        let loaded = self.engine()?.load(&code.component).await?;
        let tools = Arc::new(GrantedTools::new(self.tools.clone(), &routine.tools));
        Ok(loaded.run(body, tools, limits_of(&routine)).await)
    }
}

/// A routine's answer to one kept example of its protocol, next to the LLM's.
#[derive(Debug, Clone, PartialEq)]
pub struct ExampleOutcome {
    /// The request body.
    pub body: String,
    /// The LLM's tool calls, as recorded (the routine's calls were answered from them).
    pub tool_calls: serde_json::Value,
    /// The LLM's reply, as recorded.
    pub llm_reply: String,
    /// The routine's reply, or its error.
    pub routine_reply: Result<String, String>,
    /// Why the routine's reply does not pass for the LLM's; `None` when it does.
    pub failure: Option<String>,
}

/// The name of an edit of the routine `name`: `name-edit`, or the next `-editN`.
fn edited_name(name: &str) -> String {
    let (base, n) = match name.rsplit_once("-edit") {
        Some((base, "")) => (base, 2),
        Some((base, digits)) if digits.chars().all(|c| c.is_ascii_digit()) => {
            (base, digits.parse::<u32>().unwrap_or(1) + 1)
        }
        _ => (name, 1),
    };
    let suffix = if n == 1 {
        "-edit".to_string()
    } else {
        format!("-edit{n}")
    };
    let base: String = base.chars().take(64 - suffix.len()).collect();
    format!("{base}{suffix}")
}

fn check_name(name: &str) -> Result<(), RegistryError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.chars().all(|c| c.is_ascii_digit());
    if valid {
        Ok(())
    } else {
        Err(RegistryError::Invalid(format!(
            "invalid routine name {name:?}: use up to 64 letters, digits, '-', '_' and '.', \
             not only digits"
        )))
    }
}

fn check_limits(limits: &RoutineLimits) -> Result<(), RegistryError> {
    let timeout_ms = limits.timeout.as_millis();
    if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
        return Err(RegistryError::Invalid(format!(
            "the timeout must be between 1 and {MAX_TIMEOUT_MS} ms, not {timeout_ms}"
        )));
    }
    if !MEMORY_BYTES.contains(&limits.memory_bytes) {
        return Err(RegistryError::Invalid(format!(
            "the memory limit must be between 1 MiB and 4 GiB, not {} bytes",
            limits.memory_bytes
        )));
    }
    Ok(())
}

/// The reviewer's name, trimmed: every decision is kept with one.
pub(crate) fn reviewer_name(reviewer: &str) -> Result<&str, RegistryError> {
    let reviewer = reviewer.trim();
    if reviewer.is_empty() {
        return Err(RegistryError::Invalid(
            "say who reviews: a reviewer name is required".into(),
        ));
    }
    Ok(reviewer)
}

/// A rejection's reason, trimmed: the programmer reads it, so it may not be blank.
pub(crate) fn rejection_reason(reason: &str) -> Result<&str, RegistryError> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(RegistryError::Invalid(
            "a rejection needs a reason: the programmer reads it before its next attempt".into(),
        ));
    }
    Ok(reason)
}

#[cfg(test)]
mod tests {
    use super::edited_name;

    #[test]
    fn an_edit_is_named_after_the_routine_it_replaces() {
        assert_eq!(edited_name("llm-abc"), "llm-abc-edit");
        assert_eq!(edited_name("llm-abc-edit"), "llm-abc-edit2");
        assert_eq!(edited_name("llm-abc-edit9"), "llm-abc-edit10");
        assert_eq!(edited_name(&"x".repeat(64)).len(), 64);
    }
}
