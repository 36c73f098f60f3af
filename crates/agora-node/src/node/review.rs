//! The operator's decisions on routines the programmer wrote under the `review` activation
//! policy (`programmer.activation`): approve, reject with a reason, or edit. The registry
//! carries them out ([`crate::RoutineRegistry::approve`], `reject`, `edit`): an edit is examined
//! on the protocol's kept examples, and only a pass is stored, as a new pending routine; so no
//! routine answers that failed its examination or that nobody approved.

/// An operator's decision on a pending routine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Review {
    /// It may answer: it becomes active.
    Approve,
    /// It may not; the reason goes into the programmer's next prompt for the protocol.
    Reject {
        /// Why, for the programmer (and the record).
        reason: String,
    },
    /// Replace it with this JavaScript, once it passes the examination; the edit then waits
    /// for its own approval.
    Edit {
        /// The edited source.
        source: String,
    },
}
