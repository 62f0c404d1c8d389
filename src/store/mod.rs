//! The daemon's store, behind one narrow interface: the ledger (entries, blobs, checkpoints), the
//! scorer's history index, subjects and their schedule, scores. The embedded implementation is
//! SQLite ([`sqlite::SqliteStore`], one file in the state directory); a server database can take
//! its place when several vantages share a store, and every SQL detail stays inside the
//! implementation. Money lives in its own store (`spend::SpendStore`), which the daemon opens
//! beside this one.
//!
//! [`LedgerLog`] is the narrower interface a vantage's log needs first (append, read back, sign,
//! verify), kept by both SQLite (the one log of the embedded store) and PostgreSQL
//! ([`postgres::PgLedger`]: one log per vantage in a shared database, `postgres.rs`).

use serde::{Deserialize, Serialize};

use crate::evidence::declared::Declared;
use crate::ledger::chain::{Broken, Checkpoint, StoredEntry, Trusted, VerifySummary};
use crate::ledger::key::ReporterKey;
use crate::ledger::record::{Record, RecordKind, ScoreRecord};
use crate::score::headline::ScoreHeadline;

pub mod copy;
pub mod event_kind;
pub mod lease;
pub(crate) mod packed;
pub mod postgres;
pub mod sqlite;
#[cfg(test)]
mod typed_rows;

pub use sqlite::SqliteStore;

/// What can go wrong in a store: our problem, never the subject's.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: {context}: {source}")]
    Sqlite {
        path: String,
        context: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    /// The state directory or the store file is not private to us (see [`crate::state_dir`]).
    #[error(transparent)]
    StateDir(#[from] crate::state_dir::StateDirError),
    #[error("store {path}: {why}")]
    Corrupt { path: String, why: String },
    #[error("store {path} has schema {found:?}, this build writes {expected:?}")]
    Schema {
        path: String,
        found: String,
        expected: &'static str,
    },
    /// A ledger of the format before this build's (format 1: runs kept whole): never read as
    /// format 2; `ledger migrate` rewrites it.
    #[error(
        "store {path} is a ledger of format {found:?}, which this build does not read: stop the \
         daemon and run `x402-probe ledger migrate --state {state_dir}` (it verifies the ledger, \
         writes it in format {expected:?} beside it and verifies that)"
    )]
    NeedsMigration {
        path: String,
        state_dir: String,
        found: String,
        expected: &'static str,
    },
    #[error("signing a checkpoint: {0}")]
    Sign(String),
    #[error(transparent)]
    Broken(#[from] Broken),
    /// A write through a handle that only reads (the API's).
    #[error("store {path}: this handle only reads")]
    ReadOnly { path: String },
    /// The daemon's writer thread is gone (the daemon is stopping).
    #[error("the ledger's writer has stopped")]
    WriterStopped,
    /// A PostgreSQL statement failed (`url` shown without its password; `why` the server's
    /// message, or the client's error with its causes).
    #[error("PostgreSQL {url}: {context}: {why}")]
    Postgres {
        url: String,
        context: &'static str,
        why: String,
    },
    /// No connection could be had from the pool (the database unreachable, or every connection
    /// busy past the wait).
    #[error("PostgreSQL {url}: {context}: {why}")]
    PostgresUnreachable {
        url: String,
        context: &'static str,
        why: String,
    },
    /// A vantage that another already is: its name under another key, or its key under another
    /// name (each vantage's log is signed by its own key).
    #[error("PostgreSQL {url}: vantage {name:?} refused: {why}")]
    Vantage {
        url: String,
        name: String,
        why: String,
    },
    /// A write fenced by a lease ([`Store::append_fenced`]) found the lease no longer this
    /// vantage's by the database's clock (expired, or taken by another): nothing was written.
    #[error(
        "the lease {work} (generation {generation}) is no longer this vantage's: nothing written"
    )]
    LeaseLost { work: String, generation: i64 },
}

/// Builds an entry's index rows once its sequence number is known.
pub type IndexFn = Box<dyn FnOnce(u64) -> Index + Send>;

/// The index rows one entry adds, written in the same transaction as the entry.
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// A serialised declaration (what the run saw the subject declare), with its time.
    pub declared: Option<(i64, Vec<u8>)>,
    /// The score document a `score` entry publishes, kept as its subject's score of its day
    /// (as [`Store::put_score`] does) in the entry's transaction; its `seq` is the entry's.
    pub score: Option<ScoreRow>,
    /// The headline of that score (`score::headline::ScoreHeadline`'s stored form), kept in its
    /// row; derived from the document when not given.
    pub headline: Option<Vec<u8>>,
    /// Webhook events this entry causes, put in the outbox in the entry's transaction: an event
    /// exists exactly when its cause does, across any crash.
    pub outbox: Vec<NewOutboxEvent>,
    /// The subject's folded scoring state (a score's entry carries the state it read), replacing
    /// the one kept.
    pub state: Option<StateRow>,
    /// A run entry's id (the refund watch reads its run by it).
    pub run_id: Option<String>,
}

/// A stored state: its subject, the entry it reflects, its bytes and their SHA-256, and its days
/// (when written: those changed since it was last stored; when read: all of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRow {
    pub subject: String,
    pub through_seq: u64,
    pub sha256: [u8; 32],
    pub body: Vec<u8>,
    pub days: Vec<DayRow>,
    /// Days before this one are out of every window: their rows go.
    pub days_from: i64,
}

/// One day of a stored state: its summary's JSON as kept (packed: zstd-compressed when that is
/// smaller, `store::packed`; the largest row a score writes, about 5 KB of JSON a day) and the
/// SHA-256 of the JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayRow {
    pub day: i64,
    pub sha256: [u8; 32],
    pub body: Vec<u8>,
}

/// A webhook event for one destination, as written to the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOutboxEvent {
    /// The event's id (the same for every attempt: receivers deduplicate by it).
    pub event_id: String,
    /// The destination's URL (which `[[webhook]]` it goes to).
    pub webhook: String,
    /// The event type (stored as [`EventKind`]'s spelling).
    pub kind: event_kind::EventKind,
    pub created_ms: i64,
    /// The JSON payload, exactly as it will be posted.
    pub body: Vec<u8>,
}

/// Where an outbox event stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxState {
    /// Not delivered yet: tried again at `next_attempt_ms`.
    Pending,
    /// A 2xx answer was received.
    Delivered,
    /// Every attempt allowed failed (or its destination is no longer configured).
    Dead,
}

impl OutboxState {
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxState::Pending => "pending",
            OutboxState::Delivered => "delivered",
            OutboxState::Dead => "dead",
        }
    }

    pub fn parse(text: &str) -> Option<OutboxState> {
        match text {
            "pending" => Some(OutboxState::Pending),
            "delivered" => Some(OutboxState::Delivered),
            "dead" => Some(OutboxState::Dead),
            _ => None,
        }
    }
}

/// An outbox event as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    /// The row's own number (delivery order).
    pub id: i64,
    pub event: NewOutboxEvent,
    pub state: OutboxState,
    /// Attempts made so far.
    pub attempts: u32,
    /// Wall-clock ms of the next attempt (0: at once).
    pub next_attempt_ms: i64,
    pub last_error: Option<String>,
    pub done_ms: Option<i64>,
}

/// What one delivery attempt changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboxUpdate {
    Delivered {
        attempts: u32,
        at_ms: i64,
    },
    Retry {
        attempts: u32,
        next_attempt_ms: i64,
        error: String,
    },
    Dead {
        attempts: u32,
        at_ms: i64,
        error: String,
    },
}

impl OutboxUpdate {
    /// What the attempt writes to its row: state, attempts, next attempt, error (kept when
    /// `None`), done time.
    pub(crate) fn columns(&self) -> (OutboxState, u32, i64, Option<&str>, Option<i64>) {
        match self {
            OutboxUpdate::Delivered { attempts, at_ms } => {
                (OutboxState::Delivered, *attempts, 0, None, Some(*at_ms))
            }
            OutboxUpdate::Retry {
                attempts,
                next_attempt_ms,
                error,
            } => (
                OutboxState::Pending,
                *attempts,
                *next_attempt_ms,
                Some(error.as_str()),
                None,
            ),
            OutboxUpdate::Dead {
                attempts,
                at_ms,
                error,
            } => (
                OutboxState::Dead,
                *attempts,
                0,
                Some(error.as_str()),
                Some(*at_ms),
            ),
        }
    }
}

/// An entry to append, with what it adds to the indexes.
pub struct NewEntry {
    pub at_ms: i64,
    pub record: NewRecord,
    pub index: Option<IndexFn>,
}

/// The record of an entry to append: as it is (the store makes its stored form while
/// appending), or only its stored form, made by the caller ([`NewEntry::prepared`]) so that a
/// run's results are compared with what they derive to outside the writer, and the writer
/// neither receives nor drops the run's whole observation.
pub enum NewRecord {
    Plain(Record),
    Prepared(Prepared),
    /// A record whose stored form could not be made (why): the append refuses it.
    Unwritable(String),
}

impl From<Record> for NewRecord {
    fn from(record: Record) -> NewRecord {
        NewRecord::Plain(record)
    }
}

impl NewRecord {
    /// Its kind (`None`: unwritable).
    pub fn kind(&self) -> Option<RecordKind> {
        match self {
            NewRecord::Plain(record) => Some(record.kind()),
            NewRecord::Prepared(prepared) => Some(prepared.stored.kind()),
            NewRecord::Unwritable(_) => None,
        }
    }
}

/// A record's stored form and the blobs it keeps apart (`ledger::stored::to_stored`), made ready
/// for the writer: blobs compressed, the record's canonical bytes made, so that the transaction
/// only places them in the envelope, hashes and inserts.
pub struct Prepared {
    pub stored: crate::ledger::record::StoredRecord,
    pub blobs: Vec<crate::store::sqlite::KeptBlob>,
    /// The stored record's RFC 8785 bytes (`ledger::chain::seal_canonical` places them).
    pub record_bytes: Vec<u8>,
}

impl Prepared {
    /// The stored form of `record` under `rubric` (the one a run's checks ran under).
    /// `derived`: what a run's results derive to when the caller has just derived them.
    /// `results_digest`: the run's results' digest when the caller has just made it
    /// (`ledger::stored::results_digests`).
    pub fn new(
        record: Record,
        rubric: &crate::rubric::Rubric,
        derived: Option<Vec<crate::evidence::CheckResult>>,
        results_digest: Option<String>,
    ) -> Result<Prepared, serde_json::Error> {
        let mut blobs = Vec::new();
        let stored = crate::ledger::stored::to_stored_derived(
            record,
            rubric,
            derived,
            results_digest,
            &mut blobs,
        );
        let record_bytes = crate::ledger::chain::record_canonical_bytes(&stored)?;
        Ok(Prepared {
            stored,
            blobs: blobs
                .into_iter()
                .map(crate::store::sqlite::KeptBlob::new)
                .collect(),
            record_bytes,
        })
    }
}

impl NewEntry {
    pub fn plain(at_ms: i64, record: Record) -> NewEntry {
        NewEntry {
            at_ms,
            record: record.into(),
            index: None,
        }
    }

    /// An entry whose stored form is made now, on the caller's thread, under `rubric` (the one
    /// the run's checks ran under): a run's results derived again and compared there, not in the
    /// writer's transaction.
    pub fn prepared(
        at_ms: i64,
        record: Record,
        rubric: &crate::rubric::Rubric,
        index: Option<IndexFn>,
    ) -> NewEntry {
        NewEntry::prepared_derived(at_ms, record, rubric, None, None, index)
    }

    /// [`NewEntry::prepared`] for a run whose results the caller has just derived
    /// (`ledger::stored::derive_results` of its observations, before any result was replaced):
    /// they are compared with its results without being derived again; and whose results'
    /// digest it has made (`results_digest`), not made again.
    pub fn prepared_derived(
        at_ms: i64,
        record: Record,
        rubric: &crate::rubric::Rubric,
        derived: Option<Vec<crate::evidence::CheckResult>>,
        results_digest: Option<String>,
        index: Option<IndexFn>,
    ) -> NewEntry {
        let record = match Prepared::new(record, rubric, derived, results_digest) {
            Ok(prepared) => NewRecord::Prepared(prepared),
            // Named by the writer, which refuses the entry as it refuses a record it cannot
            // serialise itself.
            Err(e) => NewRecord::Unwritable(e.to_string()),
        };
        NewEntry {
            at_ms,
            record,
            index,
        }
    }
}

impl std::fmt::Debug for NewEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewEntry")
            .field("at_ms", &self.at_ms)
            .field("kind", &self.record.kind())
            .finish_non_exhaustive()
    }
}

/// What a subject's row says that the API shows, borrowed from the row being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubjectShown<'a> {
    pub url: &'a str,
    pub category: &'a str,
    pub state: SubjectState,
    pub revision: Option<&'a str>,
}

/// A subject as scheduled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubjectRow {
    pub url: String,
    pub category: String,
    /// Where it came from: `config` or a catalogue URL.
    pub source: String,
    pub state: SubjectState,
    pub added_ms: i64,
    pub next_free_ms: i64,
    pub next_paid_ms: i64,
    /// Consecutive runs that could not reach the subject (for backoff).
    pub failures: u32,
    pub last_run_ms: Option<i64>,
    pub last_paid_ms: Option<i64>,
    /// The subject's current revision id (`r0`, `r1`, ...), once one was recorded.
    pub revision: Option<String>,
}

impl SubjectRow {
    /// A subject new to the daemon (from the configuration, a catalogue or an admin), due now.
    pub fn new_active(url: String, category: String, source: String, now_ms: i64) -> SubjectRow {
        SubjectRow {
            url,
            category,
            source,
            state: SubjectState::Active,
            added_ms: now_ms,
            next_free_ms: now_ms,
            next_paid_ms: now_ms,
            failures: 0,
            last_run_ms: None,
            last_paid_ms: None,
            revision: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubjectState {
    /// Probed on schedule.
    Active,
    /// Gone from every source that listed it; kept with its history, no longer probed.
    Delisted,
    /// Removed from the configuration; kept with its history, no longer probed.
    Removed,
    /// Paused by an admin action; kept with its history, not probed until resumed.
    Paused,
}

impl SubjectState {
    pub fn as_str(self) -> &'static str {
        match self {
            SubjectState::Active => "active",
            SubjectState::Delisted => "delisted",
            SubjectState::Removed => "removed",
            SubjectState::Paused => "paused",
        }
    }

    pub fn parse(text: &str) -> Option<SubjectState> {
        match text {
            "active" => Some(SubjectState::Active),
            "delisted" => Some(SubjectState::Delisted),
            "removed" => Some(SubjectState::Removed),
            "paused" => Some(SubjectState::Paused),
            _ => None,
        }
    }
}

/// A score document kept for a subject: the latest of each UTC day is that day's snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScoreRow {
    pub subject: String,
    /// `YYYY-MM-DD` (UTC) of `as_of_ms`.
    pub day: String,
    pub as_of_ms: i64,
    /// The ledger entry (a `score` record) that published it.
    pub seq: u64,
    pub document: Vec<u8>,
}

impl ScoreRow {
    /// Checks the row against the ledger entry it names (`entry`: the entry at `self.seq`, if
    /// any): a `score` entry of the same subject and time that published exactly this document
    /// (its `document_sha256`). The row is derived working state anyone with the file can edit;
    /// the entry is chained and signed. Pure.
    pub(crate) fn check_against(&self, entry: Option<&ReadEntry>) -> Result<(), Broken> {
        let broken = |why: String| Broken {
            seq: self.seq,
            why: format!("the score row of {} ({}) {why}", self.subject, self.day),
        };
        let Some(entry) = entry.filter(|e| e.seq == self.seq) else {
            return Err(broken("names an entry the ledger does not have".into()));
        };
        let Record::Score(score) = &entry.record else {
            return Err(broken(format!(
                "names a {} entry, not a score",
                entry.record.kind().as_str()
            )));
        };
        if score.subject != self.subject || score.as_of_ms != self.as_of_ms {
            return Err(broken(
                "names the score entry of another subject or time".into(),
            ));
        }
        let actual = crate::evidence::sha256_hex(&self.document);
        if actual != score.document_sha256 {
            return Err(broken(format!(
                "holds a document hashing to {actual}, not the {} the entry published",
                score.document_sha256
            )));
        }
        Ok(())
    }
}

/// A subject's score rows as checked against the ledger: what may be served and signed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CheckedScores {
    /// The latest row, when it is the subject's latest `score` entry's document. `None` when the
    /// subject has no score, or when its latest score row is missing, stale or altered.
    pub(crate) latest: Option<ScoreRow>,
    /// The daily rows that hold what their entries published, oldest first.
    pub(crate) daily: Vec<ScoreRow>,
    /// Each row that does not (an integrity error, for the log), and a latest entry without its
    /// row.
    pub(crate) mismatches: Vec<Broken>,
}

/// Reads `subject`'s score rows and checks each against its ledger entry, and the latest against
/// the subject's latest `score` entry (a row rolled back to an older, genuine score is refused
/// too). Whatever is served or signed as the subject's score comes through here.
pub(crate) fn checked_scores(
    store: &dyn Store,
    subject: &str,
) -> Result<CheckedScores, StoreError> {
    // The newest entry first: a score committed meanwhile then shows as a newer row, not as a
    // newest entry without its row.
    let newest_entry = store
        .latest_subject_entry(subject, RecordKind::Score)?
        .map(|e| e.seq);
    let rows = store.daily_scores(subject)?;
    let seqs: Vec<u64> = rows.iter().map(|r| r.seq).collect();
    let entries: std::collections::BTreeMap<u64, ReadEntry> = store
        .entries_at(&seqs)?
        .into_iter()
        .map(|e| (e.seq, e))
        .collect();
    let newest_row = rows.last().map(|r| r.seq);
    let mut checked = CheckedScores::default();
    for row in rows {
        match row.check_against(entries.get(&row.seq)) {
            Ok(()) => checked.daily.push(row),
            Err(e) => checked.mismatches.push(e),
        }
    }
    let newest_intact = checked
        .daily
        .last()
        .filter(|r| Some(r.seq) == newest_row)
        .cloned();
    settle_latest(
        &mut checked,
        subject,
        newest_entry,
        newest_row,
        newest_intact,
    );
    Ok(checked)
}

/// [`checked_scores`] for the latest score alone (`daily` left empty): the subject's newest row,
/// checked against the entry it names and against the subject's newest `score` entry, in two
/// or three indexed reads whatever the subject's age. What a subject's page and signed envelope
/// read.
pub(crate) fn checked_latest_score(
    store: &dyn Store,
    subject: &str,
) -> Result<CheckedScores, StoreError> {
    let row = store.latest_score(subject)?;
    checked_latest(store, subject, row).map(|(checked, _)| checked)
}

/// A subject's latest score without its document: its headline, as the daemon's start and the
/// API's view read it for every subject (the start reads it once and hands it to the view).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LatestHeadline {
    /// The latest score is withheld: its row does not hold what the ledger published (an
    /// integrity error, logged where it was read).
    pub(crate) withheld: bool,
    /// The latest score's entry and headline: the one its row keeps when that names the row's
    /// document, else derived from the document (`Err`: the document does not read back).
    pub(crate) latest: Option<(u64, Result<ScoreHeadline, String>)>,
}

/// The subject's latest score checked as [`checked_latest_score`] checks it (the same rows
/// served, the same ones named in `mismatches`), read for its headline.
pub(crate) fn checked_latest_headline(
    store: &dyn Store,
    subject: &str,
) -> Result<(LatestHeadline, Vec<Broken>), StoreError> {
    let (row, kept) = match store.latest_score_with_headline(subject)? {
        Some((row, kept)) => (Some(row), kept),
        None => (None, None),
    };
    let (checked, published) = checked_latest(store, subject, row)?;
    let latest = checked.latest.as_ref().zip(published).map(|(row, entry)| {
        // The headline kept, when it names this document and says what the entry published
        // of it (a headline edited on its own is caught there, or by `ledger verify`).
        let kept = kept
            .as_deref()
            .and_then(|bytes| ScoreHeadline::read(bytes, &entry.document_sha256))
            .filter(|h| h.agrees_with(&entry));
        let headline = match kept {
            Some(headline) => Ok(headline),
            None => crate::score::document::ScoreDocument::from_slice(&row.document)
                .map(|doc| ScoreHeadline::of(&doc, entry.document_sha256))
                .map_err(|e| e.to_string()),
        };
        (row.seq, headline)
    });
    let withheld = latest.is_none() && !checked.mismatches.is_empty();
    Ok((LatestHeadline { withheld, latest }, checked.mismatches))
}

/// `row` (the subject's newest score row) checked against the entry it names and against the
/// subject's newest `score` entry; with that entry's record when the row is served.
fn checked_latest(
    store: &dyn Store,
    subject: &str,
    row: Option<ScoreRow>,
) -> Result<(CheckedScores, Option<ScoreRecord>), StoreError> {
    // The newest entry first, as in `checked_scores`.
    let newest_entry = store.latest_subject_entry(subject, RecordKind::Score)?;
    let mut checked = CheckedScores::default();
    let newest_row = row.as_ref().map(|r| r.seq);
    let mut intact = None;
    if let Some(row) = row {
        let named = match &newest_entry {
            Some(entry) if entry.seq == row.seq => Some(entry.clone()),
            _ => store.entries_at(&[row.seq])?.into_iter().next(),
        };
        match row.check_against(named.as_ref()) {
            Ok(()) => {
                let published = match named.map(|e| e.record) {
                    Some(Record::Score(score)) => Some(score),
                    _ => None,
                };
                intact = Some((row, published));
            }
            Err(e) => checked.mismatches.push(e),
        }
    }
    let (intact, published) = match intact {
        Some((row, published)) => (Some(row), published),
        None => (None, None),
    };
    settle_latest(
        &mut checked,
        subject,
        newest_entry.map(|e| e.seq),
        newest_row,
        intact,
    );
    let published = published.filter(|_| checked.latest.is_some());
    Ok((checked, published))
}

/// The latest score: the newest row when it is intact and not older than the newest `score`
/// entry; a newest entry without its row is named (an altered newest row already is).
fn settle_latest(
    checked: &mut CheckedScores,
    subject: &str,
    newest_entry: Option<u64>,
    newest_row: Option<u64>,
    newest_intact: Option<ScoreRow>,
) {
    match (newest_entry, newest_intact) {
        (Some(entry), Some(row)) if row.seq >= entry => checked.latest = Some(row),
        // The newest row is altered: named by the caller.
        (Some(_), None) if newest_row.is_some() => {}
        (Some(entry), _) => checked
            .mismatches
            .push(newest_row_stale(subject, entry, newest_row)),
        (None, _) => {}
    }
}

/// The integrity error of a subject whose newest score row is not its newest score entry's.
pub(crate) fn newest_row_stale(subject: &str, entry: u64, newest_row: Option<u64>) -> Broken {
    Broken {
        seq: entry,
        why: format!(
            "the latest score entry of {subject} has no score row: the newest row is {} \
             (deleted or rolled back)",
            newest_row.map_or("missing".into(), |s| format!("entry {s}'s"))
        ),
    }
}

/// A score row checked by a deep verification: against the entry it names (`entries` holds the
/// entries at the rows' seqs), and the headline it keeps (`headline`) against its document (what
/// the start and the API's list read instead of the document).
pub(crate) fn check_score_row(
    row: &ScoreRow,
    headline: Option<&[u8]>,
    entries: &std::collections::BTreeMap<u64, ReadEntry>,
) -> Result<(), Broken> {
    row.check_against(entries.get(&row.seq))?;
    if let Some(kept) = headline {
        let derived = ScoreHeadline::of_stored(&row.document).ok();
        let read = serde_json::from_slice::<ScoreHeadline>(kept).ok();
        if read.is_none() || read != derived {
            return Err(Broken {
                seq: row.seq,
                why: format!(
                    "the score row of {} ({}) keeps a headline that is not its document's",
                    row.subject, row.day
                ),
            });
        }
    }
    Ok(())
}

/// Each subject's newest score row (by day, `newest_rows`: its seq) is its newest score entry
/// (what the walk noted), not an older one.
pub(crate) fn check_newest_rows(
    named: &Named,
    newest_rows: &std::collections::BTreeMap<String, u64>,
) -> Result<(), Broken> {
    for (subject, entry) in &named.newest_score {
        let newest_row = newest_rows.get(subject).copied();
        if newest_row != Some(*entry) {
            return Err(newest_row_stale(subject, *entry, newest_row));
        }
    }
    Ok(())
}

/// A headline kept for a day with no score row (its row deleted, or the headline added).
pub(crate) fn orphan_headline(subject: &str, day: &str) -> Broken {
    Broken {
        seq: 0,
        why: format!("a headline is kept for {subject} ({day}), which has no score row"),
    }
}

/// A subject's newest score as the daemon's start reads it for every subject in one pass
/// ([`Store::start_rows`]), without its document.
#[derive(Debug, Clone, PartialEq)]
pub struct StartRow {
    pub subject: String,
    /// The newest score row's `seq` and `as_of_ms`.
    pub row: Option<(u64, i64)>,
    /// The headline kept for that row.
    pub headline: Option<Vec<u8>>,
    /// The subject's newest `score` entry.
    pub newest: Option<ReadEntry>,
    /// The subject's latest declaration (the price its scores read).
    pub declared: Option<Declared>,
}

/// The start's reading of `row` without its document: the newest row is the newest `score`
/// entry's (same seq, subject and time) and keeps a headline naming the document that entry
/// published and saying what it published of it (score, band, grade, verdict, rubric). The
/// document's own hash is left to the page and envelope reads, which check it when they read
/// it (`checked_latest_score`). `None` for anything else (no headline, a stale or missing row,
/// an entry without a row): the caller then reads the subject through
/// [`checked_latest_headline`], which names what is wrong. Pure.
pub(crate) fn start_headline(row: &StartRow) -> Option<LatestHeadline> {
    let (seq, as_of_ms) = match (&row.row, &row.newest) {
        (None, None) => return Some(LatestHeadline::default()),
        (Some(kept), Some(_)) => *kept,
        _ => return None,
    };
    let entry = row.newest.as_ref().filter(|e| e.seq == seq)?;
    let Record::Score(score) = &entry.record else {
        return None;
    };
    if score.subject != row.subject || score.as_of_ms != as_of_ms {
        return None;
    }
    let headline = ScoreHeadline::read(row.headline.as_deref()?, &score.document_sha256)
        .filter(|h| h.agrees_with(score))?;
    Some(LatestHeadline {
        withheld: false,
        latest: Some((seq, Ok(headline))),
    })
}

/// A score row and the headline it keeps, as stored (`None`: none kept).
pub type RowWithHeadline = (ScoreRow, Option<Vec<u8>>);

/// A ledger entry read back: its sequence number, time and record.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadEntry {
    pub seq: u64,
    pub at_ms: i64,
    pub record: Record,
}

/// A vantage's log, as every store keeps it: entries appended in order and chained, their blobs,
/// signed checkpoints (chain and Merkle tree), read back and verified. Synchronous like
/// [`Store`]; call it from a thread that is not an async runtime's worker (the writer thread, a
/// blocking task, a command).
pub trait LedgerLog: Send + Sync {
    /// Appends entries in one transaction, after the log's head; their sequence numbers.
    fn append(&self, entries: Vec<NewEntry>) -> Result<Vec<u64>, StoreError>;
    /// The last entry's sequence number and hash (0 and zeros when empty).
    fn head(&self) -> Result<(u64, [u8; 32]), StoreError>;
    /// At most `limit` entries with `seq > after`, in order, read back (blobs put back, a run's
    /// results derived and checked).
    fn entries_page(&self, after: u64, limit: usize) -> Result<Vec<ReadEntry>, StoreError>;
    /// Every stored row with `seq > after`, in order, to `f`.
    fn scan(
        &self,
        after: u64,
        f: &mut dyn FnMut(StoredEntry) -> Result<(), Broken>,
    ) -> Result<(), StoreError>;
    /// A blob by its SHA-256, uncompressed.
    fn blob(&self, sha256: &[u8; 32]) -> Result<Option<Vec<u8>>, StoreError>;
    /// Signs a checkpoint (and its tree checkpoint) over the head, when it is not signed yet.
    fn checkpoint(&self, key: &ReporterKey, at_ms: i64) -> Result<Option<Checkpoint>, StoreError>;
    fn checkpoints(&self) -> Result<Vec<Checkpoint>, StoreError>;
    fn tree_notes(&self) -> Result<Vec<crate::ledger::tlog::TreeNote>, StoreError>;
    /// Every entry, checkpoint and tree checkpoint checked (and when `deep`, each entry's bytes
    /// against its columns, the blobs it names, its read back).
    fn verify(&self, trusted: Option<&Trusted>, deep: bool) -> Result<VerifySummary, StoreError>;
}

impl LedgerLog for SqliteStore {
    fn append(&self, entries: Vec<NewEntry>) -> Result<Vec<u64>, StoreError> {
        Store::append(self, entries)
    }
    fn head(&self) -> Result<(u64, [u8; 32]), StoreError> {
        Store::head(self)
    }
    fn entries_page(&self, after: u64, limit: usize) -> Result<Vec<ReadEntry>, StoreError> {
        Store::entries_page(self, after, limit)
    }
    fn scan(
        &self,
        after: u64,
        f: &mut dyn FnMut(StoredEntry) -> Result<(), Broken>,
    ) -> Result<(), StoreError> {
        Store::scan(self, after, f)
    }
    fn blob(&self, sha256: &[u8; 32]) -> Result<Option<Vec<u8>>, StoreError> {
        Store::blob(self, sha256)
    }
    fn checkpoint(&self, key: &ReporterKey, at_ms: i64) -> Result<Option<Checkpoint>, StoreError> {
        Store::checkpoint(self, key, at_ms)
    }
    fn checkpoints(&self) -> Result<Vec<Checkpoint>, StoreError> {
        Store::checkpoints(self)
    }
    fn tree_notes(&self) -> Result<Vec<crate::ledger::tlog::TreeNote>, StoreError> {
        Store::tree_notes(self)
    }
    fn verify(&self, trusted: Option<&Trusted>, deep: bool) -> Result<VerifySummary, StoreError> {
        Store::verify(self, trusted, deep)
    }
}

/// What a verification's walk noted of the entries it read (deep): the blobs they name, each
/// subject's newest score entry, the entries read back through blobs and derived results.
#[derive(Debug, Default)]
pub(crate) struct Named {
    /// Each blob, with the first entry naming it.
    pub(crate) blobs: std::collections::BTreeMap<[u8; 32], u64>,
    pub(crate) newest_score: std::collections::BTreeMap<String, u64>,
    /// The entries read back through their blobs and derived results (runs, refund watches).
    pub(crate) derived: Vec<u64>,
}

impl Named {
    pub(crate) fn note(
        &mut self,
        seq: u64,
        record: crate::ledger::record::StoredRecord,
    ) -> Result<(), Broken> {
        if matches!(record, Record::Run(_) | Record::Refund(_)) {
            self.derived.push(seq);
        }
        for sha in crate::ledger::stored::blob_references(&record) {
            let key: [u8; 32] = hex::decode(&sha)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| Broken {
                    seq,
                    why: format!("it names blob {sha:?}, which is not a SHA-256"),
                })?;
            self.blobs.entry(key).or_insert(seq);
        }
        if let Record::Score(score) = record {
            self.newest_score.insert(score.subject, seq);
        }
        Ok(())
    }
}

/// The tree checkpoints checked against the entries' Merkle root the walk recomputed (signed by
/// the trusted key, or by the key of the chain's checkpoints), into `summary`.
pub(crate) fn check_tree_notes(
    walk: crate::ledger::tlog::TreeWalk,
    notes: &[crate::ledger::tlog::TreeNote],
    trusted: Option<&Trusted>,
    summary: &mut VerifySummary,
) -> Result<(), Broken> {
    summary.tree_root = hex::encode(walk.root());
    if notes.is_empty() {
        return Ok(());
    }
    // The trusted key, or the one the chain's checkpoints name; with neither (every chain
    // checkpoint gone), what the notes claim is still compared with the entries.
    let key = match (trusted, &summary.signed_by) {
        (Some(t), _) => Some(t.public_key),
        (None, Some(signer)) => {
            let mut key = [0u8; 32];
            hex::decode_to_slice(signer, &mut key).map_err(|_| Broken {
                seq: 0,
                why: format!("checkpoint key {signer} is not hex"),
            })?;
            Some(key)
        }
        (None, None) => None,
    };
    summary.tree_signed_through = walk.finish(notes, key.as_ref())?;
    summary.tree_checkpoints = notes.len() as u64;
    Ok(())
}

/// The narrow interface. Everything is synchronous and short; callers in async code keep calls
/// small (one run, one batch).
pub trait Store: Send + Sync {
    /// Appends entries in one transaction (with their history rows), bodies larger than the blob
    /// threshold kept apart by hash. Returns their sequence numbers. Once it returns, the entries
    /// are durable.
    fn append(&self, entries: Vec<NewEntry>) -> Result<Vec<u64>, StoreError>;

    /// As [`Store::append`], only while this vantage holds `fence.lease` by the database's clock,
    /// checked last in the append's own transaction, which keeps the lease from being taken
    /// until it commits ([`StoreError::LeaseLost`] otherwise, nothing written). A store without
    /// leases (SQLite: one vantage) holds none.
    fn append_fenced(
        &self,
        entries: Vec<NewEntry>,
        fence: &lease::Fence,
    ) -> Result<Vec<u64>, StoreError> {
        drop(entries);
        Err(StoreError::LeaseLost {
            work: fence.lease.work.0.clone(),
            generation: fence.lease.generation,
        })
    }

    /// The last entry's sequence number and hash (0 and zeros when empty).
    fn head(&self) -> Result<(u64, [u8; 32]), StoreError>;

    /// Entries about `subject` with `seq > after`, of the given kinds (all kinds when empty), in
    /// order, bodies left apart.
    fn subject_entries(
        &self,
        subject: &str,
        kinds: &[RecordKind],
        after: u64,
    ) -> Result<Vec<ReadEntry>, StoreError>;

    /// At most `limit` entries about `subject` with `seq > after`, in order, as stored: the
    /// canonical bytes and the chain's hashes (what the subject's operator reads and verifies).
    fn subject_stored_entries(
        &self,
        subject: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEntry>, StoreError>;

    /// The last entry about `subject` of `kind`, bodies left apart.
    fn latest_subject_entry(
        &self,
        subject: &str,
        kind: RecordKind,
    ) -> Result<Option<ReadEntry>, StoreError>;

    /// The last entry of `kind`, bodies left apart (one indexed read, whatever the ledger's age).
    fn latest_entry_of_kind(&self, kind: RecordKind) -> Result<Option<ReadEntry>, StoreError>;

    /// The entries at these sequence numbers that exist, in order, bodies left apart.
    fn entries_at(&self, seqs: &[u64]) -> Result<Vec<ReadEntry>, StoreError>;

    /// Entries of the given kinds with `seq > after`, in order (e.g. every outage).
    fn entries_of_kind(
        &self,
        kinds: &[RecordKind],
        after: u64,
    ) -> Result<Vec<ReadEntry>, StoreError>;

    /// At most `limit` entries with `seq > after`, in order, bodies left apart (a pass over the
    /// whole ledger, a page at a time).
    fn entries_page(&self, after: u64, limit: usize) -> Result<Vec<ReadEntry>, StoreError>;

    /// Every stored row with `seq > after`, in order, to `f` (verification, export). Stops at
    /// the first error `f` returns. `f` must not call back into the store: the scan holds it.
    fn scan(
        &self,
        after: u64,
        f: &mut dyn FnMut(StoredEntry) -> Result<(), Broken>,
    ) -> Result<(), StoreError>;

    /// Keeps bytes once, by their SHA-256 (hex returned).
    fn put_blob(&self, bytes: &[u8]) -> Result<String, StoreError>;

    /// A blob by its SHA-256.
    fn blob(&self, sha256: &[u8; 32]) -> Result<Option<Vec<u8>>, StoreError>;

    /// Puts every body kept apart back into a record read from the ledger.
    fn restore_bodies(&self, record: &mut Record) -> Result<(), StoreError> {
        for ex in record.exchanges_mut() {
            for response in ex.responses_mut() {
                if !response.body_stored_apart {
                    continue;
                }
                let key: Option<[u8; 32]> = hex::decode(&response.body_sha256)
                    .ok()
                    .and_then(|b| b.try_into().ok());
                match key.map(|k| self.blob(&k)).transpose()? {
                    Some(Some(bytes)) => {
                        response.body = bytes;
                        response.body_stored_apart = false;
                    }
                    _ => {
                        return Err(StoreError::Corrupt {
                            path: "the store".into(),
                            why: format!("blob {} is missing", response.body_sha256),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Signs a checkpoint over the current head (when it is not signed yet).
    fn checkpoint(&self, key: &ReporterKey, at_ms: i64) -> Result<Option<Checkpoint>, StoreError>;

    fn checkpoints(&self) -> Result<Vec<Checkpoint>, StoreError>;

    /// The tree checkpoints (C2SP signed notes over the entries' Merkle root), by size.
    fn tree_notes(&self) -> Result<Vec<crate::ledger::tlog::TreeNote>, StoreError>;

    /// The latest tree checkpoint, if any.
    fn latest_tree_note(&self) -> Result<Option<crate::ledger::tlog::TreeNote>, StoreError>;

    /// Up to `limit` of `subject`'s entries after `after` and covered by the latest tree
    /// checkpoint, each with its inclusion proof against it (`None`: no tree checkpoint yet).
    fn inclusion_bundle(
        &self,
        subject: &str,
        after: u64,
        limit: usize,
    ) -> Result<Option<crate::ledger::proof::InclusionBundle>, StoreError>;

    /// The consistency proof between the trees of the first `old` and the first `new` entries.
    fn consistency_proof(
        &self,
        old: u64,
        new: u64,
    ) -> Result<Vec<crate::ledger::merkle::Hash>, StoreError>;

    /// Verifies the ledger in one read: every entry's hash and link (and, when `deep`, that its
    /// columns agree with its bytes), every checkpoint (one key; with `trusted`, that key, and
    /// covering the entries: [`Trusted`]), every stored blob against its address, and when
    /// `deep` every blob an entry names and every score row against its entry
    /// ([`ScoreRow::check_against`], each subject's newest row its newest score entry).
    fn verify(&self, trusted: Option<&Trusted>, deep: bool) -> Result<VerifySummary, StoreError>;

    /// The folded scoring state kept for `subject`, as stored (checked by its reader).
    fn subject_state(&self, subject: &str) -> Result<Option<StateRow>, StoreError>;

    /// The run entry with this run id, bodies put back (`None`: no such run indexed).
    fn run_by_id(&self, run_id: &str) -> Result<Option<ReadEntry>, StoreError>;

    /// The declarations of `subject` at or after `since_ms`, in ledger order (a row that does not
    /// read is `Corrupt`).
    fn declared(&self, subject: &str, since_ms: i64) -> Result<Vec<Declared>, StoreError>;

    /// The last declaration of `subject` in ledger order (without reading the others).
    fn latest_declared(&self, subject: &str) -> Result<Option<Declared>, StoreError>;

    /// The last declaration of `subject` recorded before ledger entry `seq` (what a score
    /// published at `seq` was computed after), without reading the others.
    fn declared_before(&self, subject: &str, seq: u64) -> Result<Option<Declared>, StoreError>;

    fn subjects(&self) -> Result<Vec<SubjectRow>, StoreError>;
    /// What each subject's row says that the API shows, one row at a time and borrowed (no row
    /// is kept: the API's view compares 100,000 of them every few seconds).
    fn each_subject_shown(&self, each: &mut dyn FnMut(SubjectShown<'_>)) -> Result<(), StoreError>;
    fn subject(&self, url: &str) -> Result<Option<SubjectRow>, StoreError>;
    fn put_subject(&self, row: &SubjectRow) -> Result<(), StoreError>;
    /// Writes every row in one transaction (one commit instead of one per subject).
    fn put_subjects(&self, rows: &[SubjectRow]) -> Result<(), StoreError>;

    /// Keeps `row` as its subject's score of its day (replacing an earlier one of that day).
    fn put_score(&self, row: &ScoreRow) -> Result<(), StoreError>;
    fn latest_score(&self, subject: &str) -> Result<Option<ScoreRow>, StoreError>;
    /// [`Store::latest_score`] with the headline its row keeps (`None`: none kept).
    fn latest_score_with_headline(
        &self,
        subject: &str,
    ) -> Result<Option<RowWithHeadline>, StoreError>;
    /// Every subject's newest score row (without its document), the headline kept for it, its
    /// newest `score` entry and its latest declaration, one subject at a time in one read: what
    /// the daemon's start reads of every subject ([`start_headline`]).
    fn start_rows(&self, each: &mut dyn FnMut(StartRow)) -> Result<(), StoreError>;
    /// Every kept score of `subject` (one per day), oldest first.
    fn daily_scores(&self, subject: &str) -> Result<Vec<ScoreRow>, StoreError>;

    /// The latest signed checkpoint, without reading the others.
    fn last_checkpoint(&self) -> Result<Option<Checkpoint>, StoreError>;

    /// At most `limit` pending outbox events due at `now_ms` (wall clock), oldest first.
    fn outbox_due(&self, now_ms: i64, limit: usize) -> Result<Vec<OutboxRow>, StoreError>;
    /// When the next pending outbox event is due (`None`: none pending).
    fn outbox_next_due(&self) -> Result<Option<i64>, StoreError>;
    /// Records what a delivery attempt of event row `id` came to (a pending row only).
    fn outbox_update(&self, id: i64, update: &OutboxUpdate) -> Result<(), StoreError>;
    /// Pending and dead events.
    fn outbox_counts(&self) -> Result<(u64, u64), StoreError>;
    /// Every outbox row, oldest first (tests and tools).
    fn outbox_rows(&self) -> Result<Vec<OutboxRow>, StoreError>;

    /// The last entry about `subject` of `kind` made before `before_ms` (a day's end: what a
    /// daily snapshot states), bodies left apart.
    fn latest_subject_entry_before(
        &self,
        subject: &str,
        kind: RecordKind,
        before_ms: i64,
    ) -> Result<Option<ReadEntry>, StoreError>;

    /// The last declaration of `subject` at or before ledger entry `seq` (what a score that read
    /// through `seq` rated).
    fn declared_through(&self, subject: &str, seq: u64) -> Result<Option<Declared>, StoreError>;

    /// Several vantages' logs in one store (PostgreSQL): this log's vantage's name. `None`: the
    /// only log there is (SQLite).
    fn vantage_name(&self) -> Option<&str> {
        None
    }

    /// The other vantages' logs in this store: each one's name and head seq, by name. Empty on
    /// a store of one log.
    fn other_vantages(&self) -> Result<Vec<(String, u64)>, StoreError> {
        Ok(Vec::new())
    }

    /// Vantage `vantage`'s entries (another log of this store) about `subject` with
    /// `after < seq <= through`, of the given kinds (all when empty), in order.
    fn vantage_subject_entries(
        &self,
        vantage: &str,
        subject: &str,
        kinds: &[RecordKind],
        after: u64,
        through: u64,
    ) -> Result<Vec<ReadEntry>, StoreError> {
        let _ = (subject, kinds, after, through);
        Err(no_vantage(vantage))
    }

    /// Vantage `vantage`'s entries at these seqs, in order.
    fn vantage_entries_at(
        &self,
        vantage: &str,
        seqs: &[u64],
    ) -> Result<Vec<ReadEntry>, StoreError> {
        let _ = seqs;
        Err(no_vantage(vantage))
    }

    /// Vantage `vantage`'s entries of the given kinds with `after < seq <= through`, in order.
    fn vantage_entries_of_kind(
        &self,
        vantage: &str,
        kinds: &[RecordKind],
        after: u64,
        through: u64,
    ) -> Result<Vec<ReadEntry>, StoreError> {
        let _ = (kinds, after, through);
        Err(no_vantage(vantage))
    }

    /// The subjects of vantage `vantage`'s entries of the given kinds with `after < seq <=
    /// through`, sorted.
    fn vantage_subjects(
        &self,
        vantage: &str,
        kinds: &[RecordKind],
        after: u64,
        through: u64,
    ) -> Result<Vec<String>, StoreError> {
        let _ = (kinds, after, through);
        Err(no_vantage(vantage))
    }
}

/// A read of another vantage's log from a store of one log.
fn no_vantage(vantage: &str) -> StoreError {
    StoreError::Corrupt {
        path: "the store".into(),
        why: format!("this store holds one log: no vantage {vantage:?}"),
    }
}
