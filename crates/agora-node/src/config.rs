//! The node's configuration, as plain data.
//!
//! The engine never reads files or the environment: the server crate layers
//! file, env and flags into a [`NodeConfig`] and passes it in. Every field
//! has a default so a node runs on an empty configuration.

use std::collections::BTreeMap;
use std::time::Duration;

use agora_protocol::ProtocolHash;

use serde::{Deserialize, Serialize};

use crate::task::Task;
use crate::tools::ToolConfig;

/// Everything the engine needs to know about its node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// The node's name in the ledger and logs.
    pub name: String,
    /// What this node does, in a sentence or two. The suitability checker
    /// and the responder read it.
    pub description: String,
    /// The public base URL (without a trailing slash) peers reach this node at.
    pub public_url: String,
    /// The tools the LLM may use.
    pub tools: Vec<ToolConfig>,
    /// How suitability of unknown protocols is decided.
    pub suitability: SuitabilityMode,
    /// Multiround conversation settings.
    pub conversations: ConversationConfig,
    /// Responder limits.
    pub responder: ResponderConfig,
    /// Usage thresholds (later issues use more of them).
    pub thresholds: Thresholds,
    /// How routines are run.
    pub routines: RoutineConfig,
    /// How the node writes its own routines.
    pub programmer: ProgrammerConfig,
    /// Protocol negotiation, as sender and as receiver.
    pub negotiation: NegotiationConfig,
    /// The tasks this node can send to other agents (`agora send --task NAME`).
    pub tasks: Vec<Task>,
    /// How the node sends tasks.
    pub sender: SenderConfig,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            name: "agora-node".into(),
            description: "A general-purpose Agora node.".into(),
            public_url: "http://127.0.0.1:8080".into(),
            tools: Vec::new(),
            suitability: SuitabilityMode::Llm,
            conversations: ConversationConfig::default(),
            responder: ResponderConfig::default(),
            thresholds: Thresholds::default(),
            routines: RoutineConfig::default(),
            programmer: ProgrammerConfig::default(),
            negotiation: Default::default(),
            tasks: Vec::new(),
            sender: SenderConfig::default(),
        }
    }
}

/// How the node decides whether it can serve a protocol it has not seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SuitabilityMode {
    /// Ask the LLM once per protocol and cache the decision.
    #[default]
    Llm,
    /// Accept every protocol that verifies.
    AllowAll,
    /// Accept only protocols the operator allowed (`agora pd allow`).
    OperatorOnly,
}

/// Multiround conversation settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConversationConfig {
    /// Idle time after which a conversation expires, in seconds.
    pub idle_timeout_secs: u64,
    /// Most messages kept in a conversation's history.
    pub max_messages: usize,
}

impl Default for ConversationConfig {
    fn default() -> Self {
        Self {
            idle_timeout_secs: 300,
            max_messages: 40,
        }
    }
}

impl ConversationConfig {
    /// The idle timeout as a duration.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_secs)
    }
}

/// Limits on the LLM responder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResponderConfig {
    /// Most tool calls the LLM may make while answering one message.
    pub max_tool_calls: usize,
    /// Most tokens for one LLM step.
    pub max_step_tokens: u32,
    /// Characters of a tool result shown to the LLM (longer results are cut).
    pub max_tool_result_chars: usize,
    /// Use the endpoint's native tool calling instead of schema-constrained
    /// steps. Only for backends known to support it (OpenAI); small local
    /// models behind llama-server do not produce native tool calls.
    pub native_tools: bool,
    /// Answer a single-shot protocol request with a program the LLM writes and the routine
    /// sandbox runs (see [`crate::acting`]) before trying the tool loop. Applies only where the
    /// node has a routine engine.
    pub code_as_action: bool,
    /// Programs written for one request: the first, and repairs after a failed run (a repeated
    /// program starts the conversation over once).
    pub program_attempts: u32,
    /// Most tokens for one program.
    pub max_program_tokens: u32,
    /// Check a protocol answer before it is sent, and send it back to the LLM once for each of:
    /// numbers that no tool returned when no tool was called (they come from nowhere), and a
    /// request's envelope dropped (the payload alone; see [`crate::envelope`]). Each costs one
    /// more LLM call, only when it fires.
    pub check_answers: bool,
    /// Send a protocol answer back once when it says the request was done (a `status` of
    /// `success`) while every tool call made only read ([`crate::tools::Tool::changes_state`]:
    /// a SELECT), with [`crate::responder::NOT_DONE`]: a small model answers a booking with the
    /// room it looked up and never books it, and a routine learned from that answer would do
    /// the same for every later request. Its default is decided by measurement
    /// (`demo/network/RESULTS.md`).
    pub require_effects: bool,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        Self {
            max_tool_calls: 5,
            max_step_tokens: 512,
            max_tool_result_chars: 4000,
            native_tools: false,
            code_as_action: true,
            program_attempts: 3,
            max_program_tokens: 600,
            check_answers: true,
            require_effects: true,
        }
    }
}

/// How routines are run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoutineConfig {
    /// When a routine fails (error, trap, timeout, out of memory, busy), answer with the LLM
    /// instead. Off: the peer gets a `failure` reply carrying the routine's error.
    pub fallback_to_llm: bool,
    /// Shadow checks: the LLM answering again, off the request path and on scratch copies of
    /// the tools' state, a share of the requests routines answered.
    pub shadow: ShadowConfig,
    /// Protocols the operator declares questions (by hash): their routines may only read, so
    /// a tool call not known to only read ([`crate::tools::Tool::changes_state`]) fails, and
    /// no routine is written from examples that acted. A document saying `read_only: true` in
    /// its front matter is a question too.
    #[serde(skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub read_only_protocols: std::collections::BTreeSet<ProtocolHash>,
}

impl Default for RoutineConfig {
    fn default() -> Self {
        Self {
            fallback_to_llm: true,
            shadow: ShadowConfig::default(),
            read_only_protocols: std::collections::BTreeSet::new(),
        }
    }
}

/// Shadow checks of active routines (`[node.routines.shadow]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShadowConfig {
    /// The share of routine-answered requests checked, from 0 (none) to 1 (all); every
    /// `1 / share`-th request of a protocol is taken, so a check's place in traffic is
    /// repeatable.
    pub share: f64,
    /// What a disagreement does.
    pub on_disagreement: OnDisagreement,
    /// Checks waiting at most; a request sampled while the queue is full is not checked.
    pub queue_capacity: usize,
}

impl Default for ShadowConfig {
    fn default() -> Self {
        Self {
            share: 0.02,
            on_disagreement: OnDisagreement::Flag,
            queue_capacity: 16,
        }
    }
}

/// What a shadow check's disagreement does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDisagreement {
    /// Record it (the dashboard and the metrics show it); the routine keeps answering.
    #[default]
    Flag,
    /// Record it and disable the routine: the LLM answers again, and the disagreeing request,
    /// as the LLM answered it, is an example for the routine's successor. A human-written
    /// routine is only flagged.
    Suspend,
}

/// How the node writes its own routines (the programmer).
///
/// After `thresholds.implementation` LLM-answered requests of a protocol, the LLM writes a
/// JavaScript routine for it in the background; the routine is examined against the recorded
/// requests and activated only if it passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProgrammerConfig {
    /// Write routines at all (it also needs a routine engine).
    pub enabled: bool,
    /// Repairs asked for after a failed first candidate.
    pub repair_attempts: u32,
    /// Run-time failures after which an LLM-written routine is deactivated and rewritten.
    pub max_routine_failures: i64,
    /// Recorded examples kept per protocol (the candidate is examined on all of them).
    pub max_examples: usize,
    /// Examples shown to the LLM in the prompt.
    pub examples_in_prompt: usize,
    /// Programmer jobs waiting at most; more are dropped until a slot frees (the next
    /// LLM-answered request of that protocol asks again).
    pub queue_capacity: usize,
    /// Most tokens for one candidate.
    pub max_tokens: u32,
    /// Deadline of an LLM-written routine, in milliseconds.
    pub routine_timeout_ms: u64,
    /// Memory cap of an LLM-written routine, in bytes.
    pub routine_memory_bytes: u64,
    /// Whether a routine the programmer wrote and examined answers at once (`auto`) or waits,
    /// `pending`, for the operator to approve it (`review`). Left out of a written
    /// configuration when `auto`, so records written before the policy existed stay as they are.
    #[serde(skip_serializing_if = "Activation::is_auto")]
    pub activation: Activation,
    /// Protocols with another policy than `activation`, by SHA-1 hash (hex or base64).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub activation_per_protocol: BTreeMap<ProtocolHash, Activation>,
}

/// When a routine the programmer wrote starts answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// As soon as it passes its examination.
    #[default]
    Auto,
    /// Once the operator approves it.
    Review,
}

impl Activation {
    fn is_auto(&self) -> bool {
        *self == Activation::Auto
    }
}

impl ProgrammerConfig {
    /// The activation policy for the protocol `hash`.
    pub fn activation_for(&self, hash: &ProtocolHash) -> Activation {
        let chosen = self.activation_per_protocol.get(hash).copied();
        chosen.unwrap_or(self.activation)
    }

    /// The limits the routines it writes run under (examinations, and at run time).
    pub fn routine_limits(&self) -> crate::routines::RoutineLimits {
        crate::routines::RoutineLimits {
            timeout: Duration::from_millis(self.routine_timeout_ms.max(1)),
            memory_bytes: self.routine_memory_bytes,
        }
    }
}

impl Default for ProgrammerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            repair_attempts: 3,
            max_routine_failures: 3,
            max_examples: 20,
            examples_in_prompt: 3,
            queue_capacity: 16,
            max_tokens: 1024,
            routine_timeout_ms: 1000,
            routine_memory_bytes: 64 * 1024 * 1024,
            activation: Activation::Auto,
            activation_per_protocol: BTreeMap::new(),
        }
    }
}

/// How the node sends tasks to other agents.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SenderConfig {
    /// How long to wait for a receiver's reply, in seconds (LLM receivers can be slow).
    pub timeout_secs: u64,
    /// Largest reply accepted, in bytes.
    pub max_reply_bytes: usize,
    /// Most tokens for one querier step (writing a body, reading a reply).
    pub max_tokens: u32,
    /// Uses of a task on a target from which the sender looks for an existing protocol (the
    /// target's `/.wellknown`, its own memory, its protocol database).
    pub explore_threshold: i64,
    /// Uses from which the sender negotiates a protocol (also when the target asks for it).
    pub negotiate_threshold: i64,
    /// Protocols the LLM is asked about at most per exploration (the rest are prefiltered by
    /// name and description).
    pub max_candidates: usize,
    /// The protocol database to search and publish negotiated protocols to (base URL).
    pub protocol_db: Option<String>,
    /// The bearer token for publishing to it.
    pub protocol_db_token: Option<String>,
    /// Successful LLM-written protocol runs of a (target, task, protocol) after which the LLM
    /// writes a sender routine for it (the paper's demo: 1, on the next use); 0 turns sender
    /// routines off. Repairs, examples kept and failures tolerated come from `[programmer]`.
    pub sender_routine_threshold: i64,
}

impl Default for SenderConfig {
    fn default() -> Self {
        Self {
            timeout_secs: 300,
            max_reply_bytes: 1 << 20,
            max_tokens: 512,
            explore_threshold: 3,
            negotiate_threshold: 5,
            max_candidates: 3,
            protocol_db: None,
            protocol_db_token: None,
            sender_routine_threshold: 1,
        }
    }
}

/// Usage thresholds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Thresholds {
    /// LLM-answered requests on a protocol before the node writes a routine (the paper's demo
    /// wrote one on first use: 1). Counted since the protocol's last programmer run.
    pub implementation: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self { implementation: 5 }
    }
}

/// Negotiation settings (`[node.negotiation]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NegotiationConfig {
    /// Most sender turns in one negotiation; the receiver refuses to go on past as many of its
    /// own turns (or half of `conversations.max_messages`, the history it keeps, if lower).
    pub max_rounds: u32,
    /// Natural-language conversations after which this node, as a receiver, asks its senders
    /// to negotiate (`negotiationRequested` in its replies); 0 never asks.
    pub receiver_threshold: u64,
    /// Most tokens for one sender turn (it may hold the whole PD).
    pub max_sender_tokens: u32,
    /// Most tokens for one receiver turn.
    pub max_receiver_tokens: u32,
}

impl Default for NegotiationConfig {
    fn default() -> Self {
        Self {
            max_rounds: 10,
            receiver_threshold: 10,
            max_sender_tokens: 1024,
            max_receiver_tokens: 400,
        }
    }
}
