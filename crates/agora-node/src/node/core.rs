//! What every role of a node shares: its configuration, store, resolver, target client,
//! accountant (the only door to the LLM), tools, clock and routine table, and the questions all
//! roles ask of them. The roles (the receiver, the sender, the programmer) each hold the core and
//! their own state, so a newcomer can read which role touches what.

use std::sync::{Arc, OnceLock};

use agora_fetch::TargetClient;
use agora_llm::{ChatRequest, ChatResponse, LlmError};
use agora_protocol::{ProtocolHash, VerifiedDocument, WellKnown};
use agora_store::{Decision, DecisionOrigin, RoutineOrigin, RoutineStatus, Store};
use tokio::sync::RwLock;

use crate::accounting::{Accountant, Category, QueryContext};
use crate::clock::Clock;
use crate::config::NodeConfig;
use crate::focus::Focus;
use crate::resolver::ResolveError;
use crate::resolver::Resolver;
use crate::responder::Subject;
use crate::routine_table::RoutineTable;
use crate::routines::RoutineLimits;
use crate::tools::ToolRegistry;
use agora_store::StoreError;

/// Errors that a node operation outside `handle` reports to its caller.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The store failed.
    #[error("store error: {0}")]
    Store(#[from] StoreError),
    /// A protocol document could not be resolved.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
}

/// Why a follow-up was not answered.
#[derive(Debug, thiserror::Error)]
pub enum FollowUpError {
    /// No such conversation, or it expired.
    #[error("conversation not found or expired")]
    NotFound,
}

/// The parts every role of a node uses.
pub(crate) struct Core {
    pub(crate) config: NodeConfig,
    pub(crate) store: Store,
    pub(crate) resolver: Resolver,
    pub(crate) targets: TargetClient,
    pub(crate) accountant: Accountant,
    pub(crate) tools: ToolRegistry,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) routines: Arc<RoutineTable>,
    /// Held by a driver to keep background routine writing for later (see
    /// [`super::Node::share_job_gate`]).
    pub(crate) job_gate: OnceLock<Arc<RwLock<()>>>,
}

impl Core {
    /// Asks the LLM through the node's accountant, which records the call under `category`.
    pub(crate) async fn chat(
        &self,
        category: Category,
        context: &QueryContext,
        request: &ChatRequest,
    ) -> Result<ChatResponse, LlmError> {
        self.accountant.chat(category, context, request).await
    }

    /// Waits until the job gate, if any, lets a background job start.
    pub(crate) async fn job_permit(&self) -> Option<tokio::sync::OwnedRwLockReadGuard<()>> {
        match self.job_gate.get() {
            Some(gate) => Some(gate.clone().read_owned().await),
            None => None,
        }
    }

    /// The description and tools the LLM gets for `subject`: for a protocol, their focus on the
    /// protocol document (see [`crate::focus`]); for natural language, all of both.
    pub(crate) fn focus(&self, subject: Subject<'_>) -> Focus {
        let description = &self.config.description;
        let tools = self.tools.specs();
        match subject {
            Subject::Natural => Focus::everything(description, tools),
            Subject::Protocol(document) => Focus::on(description, tools, document.text()),
        }
    }

    /// Where this node serves a stored document.
    pub(crate) fn document_url(&self, hash: &ProtocolHash) -> String {
        format!(
            "{}/protocols/{}",
            self.config.public_url.trim_end_matches('/'),
            hash.to_hex()
        )
    }

    /// The protocols this node supports, with sources peers can fetch them from: those it
    /// allows, and those an active routine serves.
    pub(crate) async fn wellknown(&self) -> Result<WellKnown, NodeError> {
        let mut listing = WellKnown::new();
        for stored in crate::tools::node_info::served_documents(&self.store).await? {
            let hash = stored.document.hash();
            let mut sources = vec![self.document_url(&hash)];
            sources.extend(stored.sources.into_iter().filter(|s| s.starts_with("http")));
            listing.insert(hash.to_hex(), sources);
        }
        Ok(listing)
    }

    /// Stores a document authored or vetted locally (e.g. `agora pd add`).
    pub(crate) async fn add_document(
        &self,
        text: &str,
        sources: &[String],
    ) -> Result<VerifiedDocument, NodeError> {
        let document = VerifiedDocument::from_text(text);
        self.store
            .put_document(&document, sources, self.clock.now_ms())
            .await?;
        Ok(document)
    }

    /// Records an operator decision on a protocol; it overrides the LLM's.
    pub(crate) async fn set_operator_decision(
        &self,
        hash: &ProtocolHash,
        allowed: bool,
        reason: &str,
    ) -> Result<(), NodeError> {
        let decision = Decision {
            allowed,
            origin: DecisionOrigin::Operator,
            reason: reason.to_string(),
            decided_at_ms: self.clock.now_ms(),
        };
        Ok(self.store.set_suitability(hash, &decision).await?)
    }

    /// Ends a conversation. Unknown ids are not an error (`false`).
    pub(crate) async fn close_conversation(&self, id: &str) -> Result<bool, NodeError> {
        Ok(self.store.delete_conversation(id).await?)
    }

    /// Deletes expired conversations; returns how many.
    pub(crate) async fn purge_expired_conversations(&self) -> Result<u64, NodeError> {
        let now = self.clock.now_ms();
        Ok(self.store.purge_expired_conversations(now).await?)
    }

    /// The time and memory a routine (or a program, or a candidate) may use.
    pub(crate) fn programmer_limits(&self) -> RoutineLimits {
        self.config.programmer.routine_limits()
    }

    /// Whether the node writes and runs sender routines.
    pub(crate) fn sender_routines_on(&self) -> bool {
        self.config.sender.sender_routine_threshold > 0
            && self.config.programmer.enabled
            && self.routines.engine().is_some()
    }

    /// Whether a human-written routine is active for `hash` (a store error counts as yes).
    pub(crate) async fn human_routine_active(&self, hash: &ProtocolHash) -> bool {
        match self.store.routines().await {
            Ok(routines) => routines.iter().any(|r| {
                r.protocol_hash == *hash
                    && r.status == RoutineStatus::Active
                    && r.origin == RoutineOrigin::Human
            }),
            // When in doubt, do not activate over what may be a human routine.
            Err(_) => true,
        }
    }
}
