//! The node, split by role over one shared core (`core`): the receiver (`receiver`, with
//! `dispatch`, `idempotency` and the receiving side of `negotiating`), the sender (`ladder`,
//! with `sending`, `inquiry`, `foreign`, the sending side of `negotiating` and the running of
//! sender routines), and the programmer (`programming`, with its two subjects in
//! `receiver_routines` and `sender_routines`). The routine registry (`registry`) and
//! conversation transcripts (`transcript`) need only the core.
//!
//! [`Node`] is the façade the fronts (HTTP, A2A, MCP, the Agent Protocol, the CLI) call: each of
//! its methods hands the call to the role that does it.

use std::sync::{Arc, OnceLock};

use agora_fetch::{Fetcher, TargetClient};
use agora_llm::{Llm, PriceTable};
use agora_protocol::{
    FollowUp, ProtocolHash, ProtocolRef, Reply, Request, VerifiedDocument, WellKnown,
};
use agora_store::{Routine, Store};
use serde_json::Value;

use crate::accounting::Accountant;
use crate::clock::Clock;
use crate::config::NodeConfig;
use crate::negotiation::{Negotiated, NegotiationError};
use crate::observer::{Observer, RequestHooks};
use crate::resolver::Resolver;
use crate::routine_registry::{RegistryError, RoutineRegistry, RoutineSpec};
use crate::routine_table::{RoutineTable, SyncReport};
use crate::routines::RoutineEngine;
use crate::sender::fit::ProtocolFit;
use crate::sender::{SendError, SendOutcome};
use crate::task::Task;
use crate::tools::ToolRegistry;

mod core;
mod dispatch;
mod foreign;
mod idempotency;
mod inquiry;
mod ladder;
mod negotiating;
mod programming;
mod receiver;
mod receiver_routines;
mod registry;
mod review;
mod sender_routines;
mod sending;
mod shadow;
mod transcript;

use self::core::Core;
pub use self::core::{FollowUpError, NodeError};
pub use inquiry::MessageReply;
use ladder::Sender;
pub use ladder::{ForeignSender, Rung, TaskRun};
use programming::Programmer;
use receiver::Receiver;
pub use review::{Review, SenderReviewer};
pub use transcript::{Speaker, Transcript};

/// Everything a node is built from.
pub struct NodeParts {
    /// Configuration.
    pub config: NodeConfig,
    /// Persistence.
    pub store: Store,
    /// The LLM (already wrapped for recording or replay if wanted).
    pub llm: Arc<dyn Llm>,
    /// The SSRF-guarded fetcher for protocol sources.
    pub fetcher: Fetcher,
    /// The client for operator-configured targets: receivers tasks are sent to, protocol
    /// databases (the same one the HTTP tools were built with).
    pub targets: TargetClient,
    /// The tools.
    pub tools: ToolRegistry,
    /// LLM prices for the ledger.
    pub prices: PriceTable,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// The routine runtime; without one, stored routines are not run (the LLM answers).
    pub routine_engine: Option<Arc<dyn RoutineEngine>>,
}

/// An Agora node. Cloning is cheap.
#[derive(Clone)]
pub struct Node {
    core: Arc<Core>,
    receiver: Receiver,
    sender: Sender,
    programmer: Programmer,
}

/// What the HTTP edge needs to know of a request before it admits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// Whether an active routine serves the request's protocol, that is, most likely without
    /// the LLM (a failing routine may still fall back to it): the edge budgets by this.
    pub by_routine: bool,
    /// The idempotency key the body carries, under a protocol that declares
    /// `idempotency_key_field` (a string of 1 to 255 bytes), for the edge to deduplicate by.
    pub idempotency_key: Option<String>,
}

impl Node {
    /// Assembles a node.
    pub fn new(parts: NodeParts) -> Self {
        let accountant = Accountant::new(
            parts.llm,
            parts.store.clone(),
            parts.prices,
            parts.config.name.clone(),
            parts.clock.clone(),
        );
        let resolver = Resolver::new(parts.store.clone(), parts.fetcher);
        let facts = crate::tools::NodeFacts {
            name: parts.config.name.clone(),
            url: parts.config.public_url.trim_end_matches('/').to_string(),
            description: parts.config.description.clone(),
            tools: Vec::new(),
            tasks: parts
                .config
                .tasks
                .iter()
                .map(|task| (task.name.clone(), task.description.clone()))
                .collect(),
        };
        // The routine table holds the tools, and `call_protocol` reaches the table: weakly.
        let engine = parts.routine_engine;
        let routines = Arc::new_cyclic(|table: &std::sync::Weak<RoutineTable>| {
            let tools = parts.tools.bind_node(crate::tools::NodeBinding {
                facts,
                store: parts.store.clone(),
                clock: parts.clock.clone(),
                routines: table.clone(),
            });
            RoutineTable::new(
                engine,
                tools,
                parts.config.routines.read_only_protocols.clone(),
            )
        });
        let tools = routines.tools().clone();
        let core = Arc::new(Core {
            config: parts.config,
            store: parts.store,
            resolver,
            targets: parts.targets,
            accountant,
            tools,
            clock: parts.clock,
            routines,
            job_gate: OnceLock::new(),
        });
        let programmer = Programmer::new(core.clone());
        Self {
            receiver: Receiver {
                core: core.clone(),
                programmer: programmer.clone(),
                idempotency_fields: Arc::default(),
                shadows: Arc::new(crate::shadow::Shadows::new()),
            },
            sender: Sender {
                core: core.clone(),
                programmer: programmer.clone(),
                foreign: Arc::default(),
            },
            programmer,
            core,
        }
    }

    /// Shares a gate with a driver: background routine writing (the programmer's and the sender
    /// routines' jobs) starts a job only while it can read-lock the gate, so a driver holding the
    /// write lock keeps jobs waiting. The network demo holds it during each query, so routines
    /// are written between queries and a run replays from a cassette in the same order. Without
    /// a gate jobs start at once. Returns false if the node already has one.
    pub fn share_job_gate(&self, gate: Arc<tokio::sync::RwLock<()>>) -> bool {
        self.core.job_gate.set(gate).is_ok()
    }

    /// The node's configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.core.config
    }

    /// The node's store.
    pub fn store(&self) -> &Store {
        &self.core.store
    }

    /// The node's tools.
    pub fn tools(&self) -> &ToolRegistry {
        &self.core.tools
    }

    // ------------------------------------------------------------------ the receiver

    /// Answers one request. Never fails: errors become error replies.
    pub async fn handle(&self, request: Request) -> Reply {
        self.handle_hooked(request, None, RequestHooks::default())
            .await
    }

    /// [`Node::handle`] for a request from `client` (recorded with it in the request ledger),
    /// with the caller's `hooks`: an observer told every step (LLM and
    /// tool calls) as it happens, the id a multiround request's conversation opens under, and
    /// the channel (another protocol's front, e.g. `a2a`) recorded in the request ledger instead
    /// of the request's kind (`natural`, `negotiation`, `protocol`).
    pub async fn handle_hooked(
        &self,
        request: Request,
        client: Option<&crate::Client>,
        hooks: RequestHooks,
    ) -> Reply {
        self.receiver.handle_hooked(request, client, hooks).await
    }

    /// What the edge needs to know of `request` before admitting it: one question, asked once.
    pub async fn admission(&self, request: &Request) -> Admission {
        Admission {
            by_routine: self.serves_with_routine(request),
            idempotency_key: self.receiver.idempotency_key_in(request).await,
        }
    }

    /// Whether `request` names a protocol this node answers with an active routine, that is,
    /// most likely without its LLM (a failing routine may still fall back to it).
    pub fn serves_with_routine(&self, request: &Request) -> bool {
        match request.protocol {
            ProtocolRef::Protocol(hash) => self.core.routines.active(&hash).is_some(),
            _ => false,
        }
    }

    /// Answers a follow-up in a multiround conversation.
    pub async fn follow_up(&self, id: &str, follow_up: FollowUp) -> Result<Reply, FollowUpError> {
        self.follow_up_hooked(id, follow_up, None, RequestHooks::default())
            .await
    }

    /// [`Node::follow_up`] from `client` (recorded with it in the request ledger), with the
    /// caller's `hooks` (see [`Node::handle_hooked`]; the
    /// conversation id is the one followed up; the default channel is `follow_up`). A
    /// negotiation is continued only without a channel: another protocol's front holds no
    /// negotiations, so there it is [`FollowUpError::NotFound`].
    pub async fn follow_up_hooked(
        &self,
        id: &str,
        follow_up: FollowUp,
        client: Option<&crate::Client>,
        hooks: RequestHooks,
    ) -> Result<Reply, FollowUpError> {
        self.receiver
            .follow_up_hooked(id, follow_up, client, hooks)
            .await
    }

    /// Ends a conversation. Unknown ids are not an error (`false`).
    pub async fn close_conversation(&self, id: &str) -> Result<bool, NodeError> {
        self.core.close_conversation(id).await
    }

    /// Deletes expired conversations; returns how many.
    pub async fn purge_expired_conversations(&self) -> Result<u64, NodeError> {
        self.core.purge_expired_conversations().await
    }

    /// The conversation `id` with its turns, or `None` if it is unknown or expired.
    pub async fn transcript(&self, id: &str) -> Result<Option<Transcript>, NodeError> {
        self.core.transcript(id).await
    }

    // ------------------------------------------------------------------ documents

    /// The protocols this node supports, with sources peers can fetch them from: those it
    /// allows, and those an active routine serves.
    pub async fn wellknown(&self) -> Result<WellKnown, NodeError> {
        self.core.wellknown().await
    }

    /// Where this node serves a stored document.
    pub fn document_url(&self, hash: &ProtocolHash) -> String {
        self.core.document_url(hash)
    }

    /// Stores a document authored or vetted locally (e.g. `agora pd add`).
    pub async fn add_document(
        &self,
        text: &str,
        sources: &[String],
    ) -> Result<VerifiedDocument, NodeError> {
        self.core.add_document(text, sources).await
    }

    /// Records an operator decision on a protocol; it overrides the LLM's.
    pub async fn set_operator_decision(
        &self,
        hash: &ProtocolHash,
        allowed: bool,
        reason: &str,
    ) -> Result<(), NodeError> {
        self.core.set_operator_decision(hash, allowed, reason).await
    }

    // ------------------------------------------------------------------ routines

    /// The registry over this node's store, engine and tools.
    pub fn routines(&self) -> RoutineRegistry {
        self.core.routines()
    }

    /// Loads the store's active routines when they changed since the last sync (at start-up,
    /// then every few seconds from the server's background task). Cheap when nothing changed:
    /// one read of the routines version.
    pub async fn sync_routines(&self) -> Result<SyncReport, NodeError> {
        self.core.sync_routines().await
    }

    /// Adds a routine and, if it is active, serves with it at once.
    pub async fn add_routine(&self, spec: RoutineSpec) -> Result<Routine, RegistryError> {
        self.core.add_routine(spec).await
    }

    /// Activates a routine (disabling its protocol's other one) and serves with it at once.
    pub async fn enable_routine(&self, reference: &str) -> Result<Routine, RegistryError> {
        self.core.enable_routine(reference).await
    }

    /// Disables a routine; its protocol goes back to the LLM at once.
    pub async fn disable_routine(&self, reference: &str) -> Result<Routine, RegistryError> {
        self.core.disable_routine(reference).await
    }

    /// The operator's review of a pending routine (the `review` activation policy), recorded
    /// with `reviewer`: an approved routine serves at once; an edit is examined first and, when
    /// it passes, is returned as a new pending routine.
    pub async fn review_routine(
        &self,
        reference: &str,
        reviewer: &str,
        review: &Review,
    ) -> Result<Routine, RegistryError> {
        match review {
            Review::Approve => self.core.approve_routine(reference, reviewer).await,
            Review::Reject { reason } => {
                let registry = self.core.routines();
                registry.reject(reference, reviewer, reason).await
            }
            Review::Edit { source } => {
                let registry = self.core.routines();
                registry.edit(reference, reviewer, source).await
            }
        }
    }

    /// What reviews this node's pending sender routines (the `review` activation policy):
    /// [`SenderReviewer::review`] approves (it sends from then on), rejects or edits one.
    pub fn sender_reviewer(&self) -> SenderReviewer<'_> {
        self.programmer.sender_reviewer()
    }

    /// Removes a routine; its protocol goes back to the LLM at once.
    pub async fn remove_routine(&self, reference: &str) -> Result<Routine, RegistryError> {
        self.core.remove_routine(reference).await
    }

    /// Waits until no shadow check and no programmer job is waiting or running (tests, orderly
    /// shutdown). A suspending shadow check may ask the programmer for a job, so the checks
    /// come first.
    pub async fn programmer_idle(&self) {
        self.receiver.shadows.idle().await;
        self.programmer.programmer_idle().await;
    }

    /// Why the routine `routine_id` is not shadow-checked, once a sampled request found out
    /// (a granted tool that cannot copy its state).
    pub fn shadow_unchecked(&self, routine_id: i64) -> Option<String> {
        self.receiver.shadows.unchecked(routine_id)
    }

    /// Waits until no sender routine job is waiting or running (tests, orderly shutdown).
    pub async fn sender_routines_idle(&self) {
        self.programmer.sender_routines_idle().await;
    }

    // ------------------------------------------------------------------ the sender

    /// The configured task with this name.
    pub fn task(&self, name: &str) -> Result<&Task, SendError> {
        self.core
            .config
            .tasks
            .iter()
            .find(|task| task.name == name)
            .ok_or_else(|| SendError::UnknownTask(name.to_string()))
    }

    /// Runs `task` against `target`, climbing the sender's ladder (see `ladder`).
    pub async fn run_task(
        &self,
        target: &str,
        task: &Task,
        data: &Value,
    ) -> Result<TaskRun, SendError> {
        self.sender.run_task(target, task, data).await
    }

    /// [`Node::run_task`], with `observer` told of every LLM call the run makes.
    pub async fn run_task_observed(
        &self,
        target: &str,
        task: &Task,
        data: &Value,
        observer: Arc<dyn Observer>,
    ) -> Result<TaskRun, SendError> {
        self.sender
            .run_task_observed(target, task, data, observer)
            .await
    }

    /// Runs `task` with `data` against the agent at `target` (its Agora endpoint URL): in
    /// natural language, or under `protocol` (with the `sources` peers can fetch it from).
    pub async fn send(
        &self,
        target: &str,
        task: &Task,
        data: &Value,
        protocol: Option<(&VerifiedDocument, &[String])>,
    ) -> Result<SendOutcome, SendError> {
        self.sender.send(target, task, data, protocol).await
    }

    /// Whether `document` fits `task`, decided as the ladder decides it when exploring: the
    /// document must name every field of the task (no LLM call otherwise), and then the LLM is
    /// asked (ledger category `checking`). Nothing is remembered.
    pub async fn protocol_fit(
        &self,
        task: &Task,
        document: &VerifiedDocument,
    ) -> Result<ProtocolFit, SendError> {
        self.sender.protocol_fit(task, document).await
    }

    /// Negotiates a protocol for `task` with the receiver at `target` (its base URL) and
    /// stores the agreed document. See [`crate::negotiation`].
    pub async fn negotiate(
        &self,
        target: &str,
        task: &Task,
    ) -> Result<Negotiated, NegotiationError> {
        self.sender.negotiate(target, task).await
    }

    /// Sends `message` to the Agora endpoint `target` as a natural-language request and returns
    /// the reply's body. A `rejected` or `failure` reply is an error with the target's message.
    pub async fn send_message(
        &self,
        target: &str,
        message: &str,
    ) -> Result<MessageReply, SendError> {
        self.sender.send_message(target, message).await
    }

    /// Sends `body`, a message the caller composed under `protocol`, to the Agora endpoint
    /// `target`, with the `sources` it can fetch the document from, and returns the reply's
    /// body as it came. No LLM writes or reads anything: the caller speaks the protocol. A
    /// `rejected` or `failure` reply is an error with the target's message.
    pub async fn send_protocol_message(
        &self,
        target: &str,
        protocol: &VerifiedDocument,
        sources: &[String],
        body: &str,
    ) -> Result<MessageReply, SendError> {
        self.sender
            .send_protocol_message(target, protocol, sources, body)
            .await
    }

    /// The protocols `target` lists at `/.wellknown`: a JSON object from protocol hash to the
    /// sources it can be fetched from.
    pub async fn target_listing(&self, target: &str) -> Result<Value, SendError> {
        self.sender.target_listing(target).await
    }

    /// Searches a protocol database (`database`, or the sender's configured one) for `query`;
    /// returns its hits (name, hash, url, ...), at most `limit` of them.
    pub async fn search_protocols(
        &self,
        database: Option<&str>,
        query: &str,
        limit: usize,
    ) -> Result<Value, SendError> {
        self.sender.search_protocols(database, query, limit).await
    }

    /// Installs `sender` for agents that do not speak Agora; false if the node already has one.
    pub fn add_foreign_sender(&self, sender: Arc<dyn ForeignSender>) -> bool {
        self.sender.add_foreign_sender(sender)
    }
}
