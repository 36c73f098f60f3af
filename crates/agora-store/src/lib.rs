//! Persistence for an agora node: protocol documents, suitability decisions, conversations, the
//! request log with per-protocol usage, routines, the programmer's examples and attempts, the
//! LLM ledger, and a protocol database's catalogue and peers.
//!
//! API boundary: this is the only crate that names sqlx. Callers see [`Store`], plain record
//! types and [`StoreError`]; rows, pools and driver errors stay inside.
//!
//! One [`Store`] serves SQLite (`sqlite://agora.db`) and Postgres (`postgres://...`) through the
//! same queries; see the `connect` module for how. Timestamps are Unix milliseconds passed in
//! by the caller: the store never reads the clock. The injectable [`clock::Clock`] the callers
//! (the node, a protocol database) stamp records with lives here, beside that convention. Writes that belong together (a document and
//! its sources; a request, its usage counters and its conversation) commit in one transaction,
//! so a kill at any moment loses nothing committed and leaves nothing half-written.
#![deny(missing_docs)]

pub mod clock;
mod connect;
mod conversations;
mod counters;
mod decisions;
mod documents;
mod error;
mod idempotency;
mod leases;
mod ledger;
mod programming;
mod published;
mod records;
mod requests;
mod reviews;
mod routines;
mod sender_memory;
mod sender_routines;
mod shadow_checks;
pub use shadow_checks::SHADOW_CHECKS_KEPT;
mod sql;

pub use connect::{Backend, Store, StoreOptions};
pub use error::StoreError;
pub use idempotency::{IdempotencyClaim, IdempotencyKeys};
pub use ledger::Ledger;
pub use programming::{
    Attempt, Example, ProgrammerKey, Programming, ProgrammingTotals, RoutineAttempt,
    SenderRoutineAttempt,
};
pub use published::{
    Catalogue, PeerPage, PeerState, PublishedCounts, PublishedDocument, PublishedSummary,
};
pub use records::{
    AttemptOutcome, Conversation, ConversationKind, Decision, DecisionOrigin, JobReason,
    LedgerTotals, LlmCallRecord, NewRoutine, ProtocolUsage, RequestPath, RequestRecord,
    ReviewDecision, Routine, RoutineCode, RoutineLanguage, RoutineOrigin, RoutineReview,
    RoutineStatus, ShadowCheck, ShadowTally, StoredDocument,
};
pub use requests::{RequestBucket, Requests};
pub use sender_memory::{SenderMemory, SenderRecords, SenderRun, SenderTotals};
pub use sender_routines::{SenderExample, SenderKey, SenderRoutine, SenderRoutineReview};
