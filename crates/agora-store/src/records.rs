//! The values the store keeps, as plain Rust types.
//!
//! These are what other crates hold: they carry domain types (`ProtocolHash`,
//! `VerifiedDocument`), never rows. Enum-like fields are Rust enums here and lowercase words in
//! the database (`as_str`/`parse` are the single mapping); a word the code does not know is
//! reported as [`StoreError::Corrupt`] when read back. Timestamps are Unix milliseconds chosen by
//! the caller: the store never reads the clock, so tests control time.

use std::fmt;

use agora_protocol::{ProtocolHash, VerifiedDocument};

use crate::StoreError;

/// A protocol document as stored, with where it can be fetched from.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDocument {
    /// The document, re-verified against its hash when read.
    pub document: VerifiedDocument,
    /// Source URLs, in the order they were learnt (duplicates dropped).
    pub sources: Vec<String>,
    /// When the document was first stored (Unix ms).
    pub created_at_ms: i64,
}

/// Whether this node accepts a protocol, and who decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// True when requests under the protocol are accepted.
    pub allowed: bool,
    /// Who made the decision.
    pub origin: DecisionOrigin,
    /// Why, in words (the LLM's verdict or the operator's note).
    pub reason: String,
    /// When the decision was made (Unix ms).
    pub decided_at_ms: i64,
}

/// Who made a suitability [`Decision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecisionOrigin {
    /// The node's LLM judged the protocol.
    Llm,
    /// The node's operator decided, overriding any LLM verdict.
    Operator,
}

/// A multiround conversation and its LLM history.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// The conversation id the peer sends back with follow-ups.
    pub id: String,
    /// What the conversation is about.
    pub kind: ConversationKind,
    /// The protocol the conversation follows, if any.
    pub protocol_hash: Option<ProtocolHash>,
    /// The LLM history, opaque to the store (kept as JSON text).
    pub messages: serde_json::Value,
    /// When the conversation started (Unix ms).
    pub created_at_ms: i64,
    /// When the conversation last saw a message (Unix ms).
    pub last_active_ms: i64,
    /// When the conversation stops accepting follow-ups (Unix ms). The store does not filter on
    /// it except in [`Store::purge_expired_conversations`](crate::Store::purge_expired_conversations).
    pub expires_at_ms: i64,
}

/// What a [`Conversation`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConversationKind {
    /// A natural-language exchange, without a protocol.
    Natural,
    /// An exchange under a protocol document.
    Protocol,
    /// A negotiation of a new protocol.
    Negotiation,
}

/// One finished request, as the node saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    /// The id that ties the request to its LLM calls in the ledger.
    pub query_id: String,
    /// The node that handled the request.
    pub node: String,
    /// The protocol the request used, if any.
    pub protocol_hash: Option<ProtocolHash>,
    /// How the request arrived: `"natural"`, `"protocol"`, `"negotiation"` or `"follow_up"`.
    pub channel: String,
    /// How the request was answered.
    pub path: RequestPath,
    /// The reply status: `"success"`, `"failure"` or `"rejected"`.
    pub status: String,
    /// How many LLM calls the request took.
    pub llm_calls: i64,
    /// Prompt tokens over all of the request's LLM calls.
    pub prompt_tokens: i64,
    /// Completion tokens over all of the request's LLM calls.
    pub completion_tokens: i64,
    /// Cost of the request's LLM calls, in US dollars.
    pub cost_usd: f64,
    /// Wall time from receipt to reply, in milliseconds.
    pub latency_ms: i64,
    /// When the request finished (Unix ms).
    pub created_at_ms: i64,
    /// The routine that ran for the request, if one did (it answered, or it failed and the
    /// request fell back to the LLM). Recording the request counts the run on the routine.
    pub routine_id: Option<i64>,
    /// The routine's error when it failed; recording the request counts the failure on the
    /// routine (count, last error, time).
    pub routine_error: Option<String>,
    /// Who sent the request, as the HTTP edge identified it: a client token's name, or
    /// `ip:<address>`; `None` when the node was called in-process.
    pub client: Option<String>,
    /// The full error behind a failure reply (internal URLs, OS errors): the peer got a sentence
    /// it can act on, this is what the operator reads.
    pub error_detail: Option<String>,
}

/// How a request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestPath {
    /// The LLM answered.
    Llm,
    /// A compiled routine answered, without the LLM.
    Routine,
    /// A routine failed and the LLM answered instead.
    Fallback,
    /// The request was refused (unsuitable protocol, bad input).
    Rejected,
    /// Answering failed.
    Failed,
}

/// A routine as stored, without its code (see [`RoutineCode`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Routine {
    /// The routine's id, assigned by the store.
    pub id: i64,
    /// A unique name chosen by whoever added it.
    pub name: String,
    /// The protocol the routine answers.
    pub protocol_hash: ProtocolHash,
    /// What the routine was written in.
    pub language: RoutineLanguage,
    /// The tools the routine may call, by name.
    pub tools: Vec<String>,
    /// Wall-clock deadline for one run, in milliseconds.
    pub timeout_ms: i64,
    /// Most linear memory one run may use, in bytes.
    pub memory_bytes: i64,
    /// Who wrote the routine.
    pub origin: RoutineOrigin,
    /// Whether the routine answers requests.
    pub status: RoutineStatus,
    /// Requests the routine ran for (answered or failed).
    pub runs: i64,
    /// Runs that failed (error, trap, timeout, out of memory, busy).
    pub failures: i64,
    /// The latest failure's error text.
    pub last_error: Option<String>,
    /// When the latest failure happened (Unix ms).
    pub last_failure_at_ms: Option<i64>,
    /// When the routine was added (Unix ms).
    pub created_at_ms: i64,
    /// When the routine was added or last enabled or disabled (Unix ms).
    pub updated_at_ms: i64,
}

/// A routine's code.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutineCode {
    /// The JavaScript the component was built from, for JavaScript routines.
    pub source: Option<String>,
    /// The built WebAssembly component.
    pub component: Vec<u8>,
}

/// A routine to add with [`Store::add_routine`](crate::Store::add_routine).
#[derive(Debug, Clone, PartialEq)]
pub struct NewRoutine {
    /// A unique name.
    pub name: String,
    /// The protocol the routine answers.
    pub protocol_hash: ProtocolHash,
    /// What the routine was written in.
    pub language: RoutineLanguage,
    /// Its code.
    pub code: RoutineCode,
    /// The tools the routine may call, by name.
    pub tools: Vec<String>,
    /// Wall-clock deadline for one run, in milliseconds.
    pub timeout_ms: i64,
    /// Most linear memory one run may use, in bytes.
    pub memory_bytes: i64,
    /// Who wrote the routine.
    pub origin: RoutineOrigin,
    /// The status it starts in. `Active` disables the protocol's other routines.
    pub status: RoutineStatus,
}

/// What a [`Routine`] was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoutineLanguage {
    /// A JavaScript script, built into a component by the node.
    JavaScript,
    /// A WebAssembly component or core module, from any language.
    Wasm,
}

/// Who wrote a [`Routine`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoutineOrigin {
    /// The node's operator. Never replaced automatically.
    Human,
    /// The node's LLM.
    Llm,
    /// The node's programmer, compiled from the LLM's answers with no LLM call.
    Compiled,
}

impl RoutineOrigin {
    /// Whether the node wrote it (the LLM or the compiler): such a routine is examined, may be
    /// replaced and retired by the node; a human's never is.
    pub fn by_node(&self) -> bool {
        !matches!(self, RoutineOrigin::Human)
    }
}

/// Whether a [`Routine`] answers requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoutineStatus {
    /// It answers its protocol's requests (at most one per protocol).
    Active,
    /// It is kept but not run.
    Disabled,
    /// The programmer wrote it under the `review` activation policy: it waits for the operator
    /// and is not run.
    Pending,
    /// The operator rejected it (or replaced it with an edit); it is kept but never run.
    Rejected,
}

/// What the operator decided about a pending routine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReviewDecision {
    /// It may answer: it became active.
    Approved,
    /// It may not; the reason goes to the programmer's next attempt.
    Rejected,
    /// The operator replaced it with an edited routine (which waits for its own review).
    Edited,
}

/// One shadow check: a request a routine answered, answered again by the LLM on scratch state.
#[derive(Debug, Clone, PartialEq)]
pub struct ShadowCheck {
    /// Assigned by the store (0 in a new check).
    pub id: i64,
    /// The routine checked.
    pub routine_id: i64,
    /// Its protocol.
    pub protocol_hash: ProtocolHash,
    /// The request the routine answered.
    pub query_id: String,
    /// The request body, as text.
    pub body: String,
    /// The routine's reply body, as text.
    pub routine_reply: String,
    /// The LLM's reply body, as text.
    pub llm_reply: String,
    /// Whether the two agreed, replies and effects.
    pub agreed: bool,
    /// How they differ (empty when they agreed).
    pub difference: String,
    /// The check's LLM cost, in US dollars.
    pub cost_usd: f64,
    /// When (Unix ms).
    pub created_at_ms: i64,
}

/// A routine's shadow checks so far.
#[derive(Debug, Clone, PartialEq)]
pub struct ShadowTally {
    /// The routine.
    pub routine_id: i64,
    /// Checks made.
    pub checks: i64,
    /// Checks where the LLM's answer differed.
    pub disagreements: i64,
    /// The checks' LLM cost, in US dollars.
    pub cost_usd: f64,
}

/// One review decision about a routine, with who made it.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutineReview {
    /// Assigned by the store (0 in a new review).
    pub id: i64,
    /// The routine decided on.
    pub routine_id: i64,
    /// Its protocol.
    pub protocol_hash: ProtocolHash,
    /// The decision.
    pub decision: ReviewDecision,
    /// Why, in the reviewer's words (required for a rejection; for an edit, the new routine).
    pub reason: String,
    /// Who decided: the name the operator gave, e.g. their login.
    pub reviewer: String,
    /// When (Unix ms).
    pub decided_at_ms: i64,
}

/// Why a programmer job (receiver or sender routine) was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobReason {
    /// Enough new examples arrived since the key's last job.
    Threshold,
    /// The key's LLM-written routine failed too often and was disabled.
    Failures,
    /// The key's compiled routine met a request its examples did not cover; the LLM answered
    /// it, and the routine is compiled again with that answer among the examples.
    Uncovered,
}

/// How one attempt of a programmer job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptOutcome {
    /// The candidate passed its examination (and was stored, unless the report says otherwise).
    Passed,
    /// The candidate did not build or load.
    BuildFailed,
    /// The candidate failed its examination.
    TestsFailed,
    /// The LLM call failed: no candidate.
    LlmFailed,
    /// The model wrote a candidate it had already written in this job.
    Repeated,
    /// The examples contradict each other on what the protocol document names: no candidate,
    /// and no LLM is asked for one until the examples change.
    Contradicted,
}

/// Running counters for one protocol.
///
/// `requests` counts every recorded request for the protocol; exactly one of `llm`, `routine`,
/// `fallback`, `rejected` and `failed` is bumped per request, according to its path. Tokens and
/// cost are summed from the requests, whatever their path.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProtocolUsage {
    /// Requests recorded under the protocol.
    pub requests: i64,
    /// Requests answered by the LLM.
    pub llm: i64,
    /// Requests answered by a routine.
    pub routine: i64,
    /// Requests where a routine failed and the LLM answered.
    pub fallback: i64,
    /// Requests refused.
    pub rejected: i64,
    /// Requests that failed.
    pub failed: i64,
    /// Prompt tokens summed over the requests.
    pub llm_prompt_tokens: i64,
    /// Completion tokens summed over the requests.
    pub llm_completion_tokens: i64,
    /// LLM cost summed over the requests, in US dollars.
    pub llm_cost_usd: f64,
    /// The latest `created_at_ms` among the requests (0 when none).
    pub last_used_ms: i64,
}

/// One LLM call, for the ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmCallRecord {
    /// The node that made the call.
    pub node: String,
    /// What the call was for: `"conversation"`, `"checking"`, `"negotiation"`,
    /// `"implementing"`, `"querying"`, ...
    pub category: String,
    /// The model that answered.
    pub model: String,
    /// Tokens in the prompt.
    pub prompt_tokens: i64,
    /// Of `prompt_tokens`, those the endpoint read from its prompt cache (0: none, or unknown).
    pub cached_prompt_tokens: i64,
    /// Tokens in the completion.
    pub completion_tokens: i64,
    /// Wall time of the call, in milliseconds.
    pub latency_ms: i64,
    /// Cost of the call, in US dollars.
    pub cost_usd: f64,
    /// The request the call served, if any.
    pub query_id: Option<String>,
    /// The protocol the call concerned, if any.
    pub protocol_hash: Option<ProtocolHash>,
    /// When the call finished (Unix ms).
    pub created_at_ms: i64,
}

/// Ledger totals for one (node, category, model).
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerTotals {
    /// The node that made the calls.
    pub node: String,
    /// What the calls were for.
    pub category: String,
    /// The model that answered.
    pub model: String,
    /// Number of calls.
    pub calls: i64,
    /// Prompt tokens over the calls.
    pub prompt_tokens: i64,
    /// Of those, the ones read from the endpoint's prompt cache.
    pub cached_prompt_tokens: i64,
    /// Completion tokens over the calls.
    pub completion_tokens: i64,
    /// Cost over the calls, in US dollars.
    pub cost_usd: f64,
}

/// The word-per-variant mapping of an enum-like column, written once for every such enum.
macro_rules! stored_words {
    ($name:ident { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl $name {
            /// The word stored in the database (and shown to people).
            pub fn as_str(&self) -> &'static str {
                match self {
                    $(Self::$variant => $word,)+
                }
            }

            /// The variant a stored word names, if any.
            pub fn parse(word: &str) -> Option<Self> {
                match word {
                    $($word => Some(Self::$variant),)+
                    _ => None,
                }
            }

            /// Reads a stored word back, or reports the column as corrupt.
            pub(crate) fn from_column(column: &str, word: &str) -> Result<Self, StoreError> {
                Self::parse(word).ok_or_else(|| {
                    StoreError::corrupt(format!(
                        "{column}: unknown {} {word:?}",
                        stringify!($name)
                    ))
                })
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

stored_words!(DecisionOrigin { Llm => "llm", Operator => "operator" });
stored_words!(ConversationKind {
    Natural => "natural",
    Protocol => "protocol",
    Negotiation => "negotiation",
});
stored_words!(RoutineLanguage { JavaScript => "javascript", Wasm => "wasm" });
stored_words!(RoutineOrigin { Human => "human", Llm => "llm", Compiled => "compiled" });
stored_words!(RoutineStatus {
    Active => "active",
    Disabled => "disabled",
    Pending => "pending",
    Rejected => "rejected",
});
stored_words!(ReviewDecision { Approved => "approved", Rejected => "rejected", Edited => "edited" });
stored_words!(JobReason {
    Threshold => "threshold",
    Failures => "failures",
    Uncovered => "uncovered",
});
stored_words!(AttemptOutcome {
    Passed => "passed",
    BuildFailed => "build_failed",
    TestsFailed => "tests_failed",
    LlmFailed => "llm_failed",
    Repeated => "repeated",
    Contradicted => "contradicted",
});
stored_words!(RequestPath {
    Llm => "llm",
    Routine => "routine",
    Fallback => "fallback",
    Rejected => "rejected",
    Failed => "failed",
});

/// Reads a stored hash back, or reports the column as corrupt.
pub(crate) fn parse_hash(column: &str, text: &str) -> Result<ProtocolHash, StoreError> {
    ProtocolHash::parse(text).map_err(|error| StoreError::corrupt(format!("{column}: {error}")))
}

/// Reads an optional stored hash back.
pub(crate) fn parse_optional_hash(
    column: &str,
    text: Option<String>,
) -> Result<Option<ProtocolHash>, StoreError> {
    text.map(|text| parse_hash(column, &text)).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_words_round_trip() {
        for path in [
            RequestPath::Llm,
            RequestPath::Routine,
            RequestPath::Fallback,
            RequestPath::Rejected,
            RequestPath::Failed,
        ] {
            assert_eq!(RequestPath::parse(path.as_str()), Some(path));
        }
        for kind in [
            ConversationKind::Natural,
            ConversationKind::Protocol,
            ConversationKind::Negotiation,
        ] {
            assert_eq!(ConversationKind::parse(&kind.to_string()), Some(kind));
        }
        assert_eq!(
            DecisionOrigin::parse("operator"),
            Some(DecisionOrigin::Operator)
        );
        assert_eq!(DecisionOrigin::parse("Operator"), None);
        // The words the programmer's attempts were stored with before these were enums.
        let words = [
            "passed",
            "build_failed",
            "tests_failed",
            "llm_failed",
            "repeated",
        ];
        for word in words {
            assert_eq!(AttemptOutcome::parse(word).map(|o| o.as_str()), Some(word));
        }
        for word in ["threshold", "failures"] {
            assert_eq!(JobReason::parse(word).map(|r| r.as_str()), Some(word));
        }
        assert!(matches!(
            AttemptOutcome::from_column("routine_attempts.outcome", "won"),
            Err(StoreError::Corrupt(message))
                if message == "routine_attempts.outcome: unknown AttemptOutcome \"won\""
        ));
        assert!(matches!(
            RequestPath::from_column("requests.path", "teleported"),
            Err(StoreError::Corrupt(message)) if message.contains("teleported")
        ));
    }
}
