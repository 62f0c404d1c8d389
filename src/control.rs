//! The command channel between the API and the daemon's loop: what the API may ask of the loop
//! and what the loop answers. Both sides import this module and it imports neither, so the
//! daemon can start the API while the API talks to the daemon without a cycle between them.
//!
//! The loop owns the subjects and the schedule; the API checks tokens and proofs, then asks.

use std::collections::BTreeMap;

use tokio::sync::oneshot;

use crate::ledger::record::NoteRecord;

/// A request into the daemon's loop from its API (answered by the loop, which owns the schedule).
#[derive(Debug)]
pub enum Command {
    /// The loop's view of itself now.
    Status(oneshot::Sender<LoopStatus>),
    /// An admin action (the API checked the admin token).
    Admin(
        AdminAction,
        oneshot::Sender<Result<AdminDone, ActionRefused>>,
    ),
    /// A revision note its operator posted (the API checked the proof): its ledger entry's seq.
    Note(Box<NoteRecord>, oneshot::Sender<Result<u64, ActionRefused>>),
}

/// What only the loop knows: its clock, its queue, its runs in flight.
#[derive(Debug, Clone)]
pub struct LoopStatus {
    pub now_ms: i64,
    pub simulated: bool,
    pub in_flight: usize,
    /// Subjects by state (`active`, `paused`, `delisted`, `removed`).
    pub subjects_by_state: BTreeMap<String, usize>,
    /// The soonest due free runs: (due, subject URL), at most [`NEXT_DUE_SHOWN`].
    pub next_due: Vec<(i64, String)>,
}

/// How many due runs a status shows.
pub const NEXT_DUE_SHOWN: usize = 10;

/// What an admin may ask of the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminAction {
    /// Start probing a subject (or probe again one that was removed or delisted).
    AddSubject {
        url: String,
        category: String,
    },
    /// Stop probing a subject until it is resumed (its history stays).
    Pause {
        url: String,
        reason: String,
    },
    Resume {
        url: String,
        reason: String,
    },
    /// One of our own outage windows (RFC 3339 times), as `x402-probe outage declare` records it.
    DeclareOutage {
        from: String,
        to: String,
        reason: String,
    },
    /// Run a subject's free probe now (its next run is scheduled from this one).
    RunNow {
        url: String,
    },
}

/// What an action did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminDone {
    /// The subject the action was about, if any.
    pub subject: Option<String>,
    /// The ledger entry that records it (none for a run started now: the run records itself).
    pub seq: Option<u64>,
    /// What was done, in words.
    pub detail: String,
}

/// Why the loop refused an action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionRefused {
    #[error("{0}")]
    UnknownSubject(String),
    /// The action contradicts the subject's state (already active, not paused, ...).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    /// Ours: the store failed.
    #[error("{0}")]
    Internal(String),
}
