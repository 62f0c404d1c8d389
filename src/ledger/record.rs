//! What the ledger records: one typed [`Record`] per event, each in an [`Envelope`] that chains it
//! to the previous entry. Both the writer (the daemon) and every reader (scoring from history,
//! `ledger verify`, `ledger export`, `recompute --ledger`) use these types.

use serde::{Deserialize, Serialize};

use crate::evidence::free::PageSeen;
use crate::evidence::http::Exchange;
use crate::evidence::run::{RefundRecord, RunRecord, StoredRun};

/// One ledger event. `R` is how a run is held: in memory (and in format 1 entries) the whole
/// [`RunRecord`], results included; in the stored form of format 2 ([`StoredRecord`]) a
/// [`StoredRun`], whose results are derived from its observation on read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record<R = Box<RunRecord>> {
    /// A probe run of one subject (free, and paid when one was made).
    Run(R),
    /// The refund watch of an earlier run's paid call.
    Refund(Box<RefundRecord>),
    /// A discovery catalogue read.
    Catalogue(CatalogueRead),
    /// A subject's declared requirements changed: a new revision.
    Revision(RevisionRecord),
    /// Our vantage's own outages.
    Outage(OutageRecord),
    /// A control probe: a known answer from an endpoint we run ourselves.
    Control(ControlRecord),
    /// A subject added, removed, delisted or paused.
    Subject(SubjectRecord),
    /// A correction of an earlier entry: never an edit, always a new entry.
    Correction(CorrectionRecord),
    /// A score published for a subject (the document itself is kept beside, by digest).
    Score(ScoreRecord),
    /// A revision note its operator posted through the API, after proving control.
    Note(NoteRecord),
    /// A UTC day's signed snapshot of every subject's verdict, made once the day is over (the
    /// signed file itself is kept beside, as a blob, by `sha256`).
    Snapshot(SnapshotRecord),
}

/// The `kind` of a record, as stored beside it for indexing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    Run,
    Refund,
    Catalogue,
    Revision,
    Outage,
    Control,
    Subject,
    Correction,
    Score,
    Note,
    Snapshot,
}

impl RecordKind {
    pub const ALL: [RecordKind; 11] = [
        RecordKind::Run,
        RecordKind::Refund,
        RecordKind::Catalogue,
        RecordKind::Revision,
        RecordKind::Outage,
        RecordKind::Control,
        RecordKind::Subject,
        RecordKind::Correction,
        RecordKind::Score,
        RecordKind::Note,
        RecordKind::Snapshot,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Run => "run",
            RecordKind::Refund => "refund",
            RecordKind::Catalogue => "catalogue",
            RecordKind::Revision => "revision",
            RecordKind::Outage => "outage",
            RecordKind::Control => "control",
            RecordKind::Subject => "subject",
            RecordKind::Correction => "correction",
            RecordKind::Score => "score",
            RecordKind::Note => "note",
            RecordKind::Snapshot => "snapshot",
        }
    }

    pub fn parse(text: &str) -> Option<RecordKind> {
        RecordKind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

/// A record as format 2 stores it: a run keeps its observation and what its results derive to
/// (`evidence::run::StoredRun`); every other kind is stored as it is held.
pub type StoredRecord = Record<Box<StoredRun>>;

/// What a run must say for the record's indexing columns, however it is held.
pub trait RunSubject {
    fn run_subject(&self) -> &str;
}

impl RunSubject for Box<RunRecord> {
    fn run_subject(&self) -> &str {
        &self.subject
    }
}

impl RunSubject for Box<StoredRun> {
    fn run_subject(&self) -> &str {
        &self.subject
    }
}

impl<R: RunSubject> Record<R> {
    pub fn kind(&self) -> RecordKind {
        match self {
            Record::Run(_) => RecordKind::Run,
            Record::Refund(_) => RecordKind::Refund,
            Record::Catalogue(_) => RecordKind::Catalogue,
            Record::Revision(_) => RecordKind::Revision,
            Record::Outage(_) => RecordKind::Outage,
            Record::Control(_) => RecordKind::Control,
            Record::Subject(_) => RecordKind::Subject,
            Record::Correction(_) => RecordKind::Correction,
            Record::Score(_) => RecordKind::Score,
            Record::Note(_) => RecordKind::Note,
            Record::Snapshot(_) => RecordKind::Snapshot,
        }
    }

    /// The subject this entry is about, when it is about one (an operator may read those).
    pub fn subject(&self) -> Option<&str> {
        match self {
            Record::Run(r) => Some(r.run_subject()),
            Record::Refund(r) => Some(&r.subject),
            Record::Revision(r) => Some(&r.subject),
            Record::Subject(r) => Some(&r.subject),
            Record::Score(r) => Some(&r.subject),
            Record::Note(r) => Some(&r.subject),
            Record::Correction(r) => r.subject.as_deref(),
            Record::Catalogue(_) | Record::Outage(_) | Record::Control(_) | Record::Snapshot(_) => {
                None
            }
        }
    }

    /// The same record with its run held another way (`f` converts it); every other kind is
    /// moved as it is.
    pub fn map_run<S, E>(self, f: impl FnOnce(R) -> Result<S, E>) -> Result<Record<S>, E> {
        Ok(match self {
            Record::Run(r) => Record::Run(f(r)?),
            Record::Refund(r) => Record::Refund(r),
            Record::Catalogue(r) => Record::Catalogue(r),
            Record::Revision(r) => Record::Revision(r),
            Record::Outage(r) => Record::Outage(r),
            Record::Control(r) => Record::Control(r),
            Record::Subject(r) => Record::Subject(r),
            Record::Correction(r) => Record::Correction(r),
            Record::Score(r) => Record::Score(r),
            Record::Note(r) => Record::Note(r),
            Record::Snapshot(r) => Record::Snapshot(r),
        })
    }
}

impl Record {
    /// Every HTTP exchange the record keeps (a run's free and paid ones, a refund watch's
    /// operator file): where bodies are kept apart as blobs and put back.
    pub(crate) fn exchanges_mut(&mut self) -> Vec<&mut Exchange> {
        match self {
            Record::Run(run) => {
                let RunRecord { free, paid, .. } = &mut **run;
                let mut all: Vec<&mut Exchange> = free.exchanges_mut().collect();
                if let Some(paid) = paid.as_mut() {
                    all.extend(paid.exchanges_mut());
                }
                all
            }
            Record::Refund(refund) => refund.refund.operator_exchange.iter_mut().collect(),
            _ => Vec::new(),
        }
    }
}

/// A discovery catalogue read: every page's hash, what was added and what was delisted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogueRead {
    pub url: String,
    pub at_ms: i64,
    pub pages: Vec<PageSeen>,
    pub items_seen: usize,
    /// Why the read stopped short, when it did (the subjects it would delist are then kept).
    pub error: Option<String>,
    /// Subjects first seen in this read.
    pub added: Vec<String>,
    /// Subjects listed before and missing now (only after a complete read).
    pub delisted: Vec<String>,
}

/// A new revision of a subject: what it declares changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RevisionRecord {
    pub subject: String,
    /// `r0`, `r1`, ... in order.
    pub id: String,
    pub at_ms: i64,
    /// SHA-256 of what the subject declares (see `checks::history::fingerprint`).
    pub fingerprint: String,
    pub previous: Option<String>,
    /// What changed, in words (`price`, `payTo`, `description`, ...).
    pub changed: Vec<String>,
}

/// Our own outages. A window opens when the control probe fails and closes when it passes again,
/// or is declared by hand (at most 48 hours back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum OutageRecord {
    Opened {
        from_ms: i64,
        cause: String,
        /// Which of our parts failed (absent in the ledger for the vantage, as before RPC windows).
        #[serde(default, skip_serializing_if = "OutageOf::is_vantage")]
        of: OutageOf,
    },
    Closed {
        from_ms: i64,
        to_ms: i64,
        #[serde(default, skip_serializing_if = "OutageOf::is_vantage")]
        of: OutageOf,
    },
    Declared {
        from_ms: i64,
        to_ms: i64,
        reason: String,
        declared_at_ms: i64,
    },
}

/// How far back, and ahead, a window may be declared: outcomes older than that are final.
pub const MAX_DECLARE_BACK_MS: i64 = 48 * 3_600_000;

/// Why a declared outage window was refused (the words name the command line's flags, which the
/// admin API's fields mirror).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeclareError {
    #[error("--{what} {text:?} is not an RFC 3339 time")]
    Time { what: &'static str, text: String },
    #[error("--to must be after --from")]
    Order,
    #[error("--from is more than 48 hours back: outcomes older than that are final")]
    TooOld,
    #[error("--to is more than 48 hours ahead")]
    TooFar,
    #[error("--reason must say why, in at most 500 characters")]
    Reason,
}

impl OutageRecord {
    /// A window declared by hand, checked against the rules (pure: `now_ms` given); the same for
    /// `outage declare` and the admin API.
    pub fn declared(
        from: &str,
        to: &str,
        reason: &str,
        now_ms: i64,
    ) -> Result<OutageRecord, DeclareError> {
        let ms = |what: &'static str, text: &str| {
            crate::clock::ms_of(text).ok_or_else(|| DeclareError::Time {
                what,
                text: text.to_string(),
            })
        };
        let (from_ms, to_ms) = (ms("from", from)?, ms("to", to)?);
        if to_ms <= from_ms {
            return Err(DeclareError::Order);
        }
        if from_ms < now_ms - MAX_DECLARE_BACK_MS {
            return Err(DeclareError::TooOld);
        }
        if to_ms > now_ms + MAX_DECLARE_BACK_MS {
            return Err(DeclareError::TooFar);
        }
        let reason = reason.trim();
        if reason.is_empty() || reason.chars().count() > 500 {
            return Err(DeclareError::Reason);
        }
        Ok(OutageRecord::Declared {
            from_ms,
            to_ms,
            reason: reason.to_string(),
            declared_at_ms: now_ms,
        })
    }
}

/// What of ours an opened window is about: each opens and closes on its own evidence, so the
/// control answering again never closes a window our RPC keeps open, nor the reverse.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OutageOf {
    /// Our vantage: the control endpoint failed (our network, as the subjects see it, was out),
    /// or an operator declared the window.
    #[default]
    Vantage,
    /// Our fixed RPC node kept failing across runs (`daemon::RPC_OUTAGE_AFTER_RUNS`): only the
    /// checks that read the chain are excused.
    Rpc,
}

impl OutageOf {
    pub fn is_vantage(&self) -> bool {
        *self == OutageOf::Vantage
    }
}

/// One control probe and whether it gave the known answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlRecord {
    pub url: String,
    pub at_ms: i64,
    pub ok: bool,
    pub detail: String,
}

/// A change to the set of subjects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubjectRecord {
    pub subject: String,
    pub at_ms: i64,
    pub change: SubjectChange,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum SubjectChange {
    Added {
        source: String,
        category: String,
    },
    Removed {
        why: String,
    },
    Delisted {
        catalogue: String,
    },
    Relisted {
        catalogue: String,
    },
    /// Paused by an admin action: kept with its history, not probed until resumed.
    Paused {
        why: String,
    },
    Resumed {
        why: String,
    },
}

/// A dated revision note its operator posted through the API (the same note an operator file
/// may carry; H2 and H3 read both), with the key that proved control.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoteRecord {
    pub subject: String,
    /// When it was posted (the note's own date is `note.at_ms`).
    pub at_ms: i64,
    pub note: crate::evidence::paid::RevisionNote,
    /// The address that signed the challenge: the subject's payTo or a declared operator key.
    pub signer: String,
    /// The challenge the signature was over (single use).
    pub challenge_id: String,
}

/// A correction: names the entry it corrects and why; what it changes is in `detail`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorrectionRecord {
    pub of_seq: u64,
    pub subject: Option<String>,
    pub at_ms: i64,
    pub reason: String,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub detail: serde_json::Value,
}

/// A published score. The full document (without its inputs, which the ledger rebuilds) is kept
/// beside the ledger by `document_sha256`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreRecord {
    pub subject: String,
    pub as_of_ms: i64,
    /// The last ledger entry the score read.
    pub through_seq: u64,
    /// How many days of history the score read (the daemon's `history_days`).
    pub horizon_days: u64,
    pub rubric_sha256: String,
    pub inputs_sha256: String,
    pub document_sha256: String,
    pub score: f64,
    pub capped_score: f64,
    pub band: [f64; 2],
    pub grade: Option<String>,
    pub verdict: crate::rubric::Verdict,
    /// The value population the score read (a blob, by hash), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub population_sha256: Option<String>,
    /// The scorer's method (absent: `/2`, which every score before `/3` used).
    #[serde(default, skip_serializing_if = "crate::score::Method::is_v2")]
    pub method: crate::score::Method,
    /// Several vantages: every other vantage's log as far as the score read it, and the quorum it
    /// read R1 and R2 through (absent: the score read this log alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<crate::score::quorum::VantagesRead>,
}

/// A daily snapshot published (`src/snapshot/`, `state/snapshot.md`): which UTC day it is of, the
/// signed file's SHA-256 (the blob that holds it), and what it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// `YYYY-MM-DD` (UTC): the day whose end the snapshot states.
    pub day: String,
    pub at_ms: i64,
    /// SHA-256 (hex) of the signed snapshot file, kept as a blob under it.
    pub sha256: String,
    /// How many subjects it lists.
    pub subjects: u64,
    /// The tree checkpoint's size its inclusion proofs are against.
    pub tree_size: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;
    const HOUR: i64 = 3_600_000;

    fn at(ms: i64) -> String {
        crate::clock::rfc3339_ms(ms)
    }

    #[test]
    fn a_declared_window_keeps_to_the_rules() {
        let ok = OutageRecord::declared(&at(NOW - 2 * HOUR), &at(NOW - HOUR), " dns down ", NOW);
        assert_eq!(
            ok,
            Ok(OutageRecord::Declared {
                from_ms: NOW - 2 * HOUR,
                to_ms: NOW - HOUR,
                reason: "dns down".into(),
                declared_at_ms: NOW,
            })
        );
        // The limits themselves are inside.
        assert!(
            OutageRecord::declared(&at(NOW - 48 * HOUR), &at(NOW + 48 * HOUR), "x", NOW).is_ok()
        );
        let refused = |from: &str, to: &str, reason: &str| {
            OutageRecord::declared(from, to, reason, NOW).unwrap_err()
        };
        assert_eq!(
            refused("yesterday", &at(NOW), "x"),
            DeclareError::Time {
                what: "from",
                text: "yesterday".into()
            }
        );
        assert_eq!(
            refused(&at(NOW), "", "x").to_string(),
            "--to \"\" is not an RFC 3339 time"
        );
        assert_eq!(refused(&at(NOW), &at(NOW), "x"), DeclareError::Order);
        assert_eq!(
            refused(&at(NOW - 48 * HOUR - 1), &at(NOW), "x"),
            DeclareError::TooOld
        );
        assert_eq!(
            refused(&at(NOW - HOUR), &at(NOW + 48 * HOUR + 1), "x"),
            DeclareError::TooFar
        );
        assert_eq!(
            refused(&at(NOW - HOUR), &at(NOW), "  "),
            DeclareError::Reason
        );
        assert_eq!(
            refused(&at(NOW - HOUR), &at(NOW), &"y".repeat(501)),
            DeclareError::Reason
        );
        assert!(OutageRecord::declared(&at(NOW - HOUR), &at(NOW), &"é".repeat(500), NOW).is_ok());
    }
}
