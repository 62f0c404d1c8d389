//! The folded subject state: what a subject's score is built from, folded forward entry by entry
//! by one pure function ([`SubjectState::fold`]), so a rescore reads its subject's state instead
//! of its whole history. The daemon persists the state with the `through_seq` it reflects (the
//! `subject_state` table, written in the transaction of the score that read it; its history rows
//! inside the horizon stay in the `history` index, read by range); `recompute --ledger` folds the
//! ledger with the same function and must agree with every published score byte for byte.
//!
//! Our outages are global entries: one [`OutageFold`] for all subjects, never copied into each.

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::checks::history::{Declared, OutageWindow, declared};
use crate::evidence::run::{Provenance, RunRecord};
use crate::ledger::record::{OutageRecord, Record, RecordKind, RevisionRecord, SubjectChange};
use crate::rubric::Rubric;
use crate::score::input::HistoryEntry;
use crate::store::{Store, StoreError};

use super::pipeline::{SEQ_STRIDE, rows_at, run_rows};
use super::scoring::{self, SubjectInputs};

/// The state's stored form's version: a row of another version is rebuilt from the ledger.
pub const STATE_FORMAT: u32 = 1;

/// One subject's scoring state as of ledger entry `through_seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubjectState {
    pub format: u32,
    /// The last ledger entry folded in (entries of other subjects count too: nothing of them
    /// changes this state).
    pub through_seq: u64,
    /// The history rows of the window, in ledger order: every row at or after `window_from`
    /// (a history seq, `entry seq * SEQ_STRIDE + i`). Not in the stored form: the daemon keeps
    /// them in its history index and reads them by range.
    #[serde(skip)]
    pub rows: Vec<HistoryEntry>,
    /// The first history seq inside the window: every row before it is older than the horizon
    /// of every score made since (it only moves forward).
    pub window_from: u64,
    /// The longest horizon the window was moved for: a longer one needs the rows it dropped.
    pub horizon_days: u64,
    /// The subject's revisions, oldest first.
    pub revisions: Vec<RevisionRecord>,
    /// From the subject's `added` entry (the daemon scores under its configured category).
    pub category: Option<String>,
    /// The price its latest readable declaration quotes, in USD (6-decimal tokens).
    pub price_usd: Option<crate::evidence::usd::Usd>,
    pub provenance: Option<Provenance>,
    /// The paid-call facts: how many runs sent a payment, and the last (its entry and time).
    pub paid_calls: u64,
    pub last_paid: Option<PaidFact>,
}

impl Default for SubjectState {
    /// The state before any entry: of this build's format.
    fn default() -> SubjectState {
        SubjectState {
            format: STATE_FORMAT,
            through_seq: 0,
            rows: Vec::new(),
            window_from: 0,
            horizon_days: 0,
            revisions: Vec::new(),
            category: None,
            price_usd: None,
            provenance: None,
            paid_calls: 0,
            last_paid: None,
        }
    }
}

/// A run that sent a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaidFact {
    pub seq: u64,
    pub at_ms: i64,
}

/// Why a stored state was not used (it is then rebuilt from the ledger).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StateError {
    #[error("the state of {subject} does not match its digest")]
    Digest { subject: String },
    #[error("the state of {subject} does not decode: {why}")]
    Decode { subject: String, why: String },
    #[error("the state of {subject} is of format {found}, this build folds {STATE_FORMAT}")]
    Format { subject: String, found: u32 },
}

/// A stored state: its subject, the entry it reflects, its bytes and their SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRow {
    pub subject: String,
    pub through_seq: u64,
    pub sha256: [u8; 32],
    pub body: Vec<u8>,
}

impl SubjectState {
    pub fn new() -> SubjectState {
        SubjectState::default()
    }

    /// Folds ledger entry `seq` (a record about this subject, read with its bodies) into the
    /// state. Pure; entries must come in ledger order.
    pub fn fold(&mut self, rubric: &Rubric, seq: u64, record: &Record) {
        match record {
            Record::Run(run) => self.fold_run(seq, RunFold::of(rubric, run)),
            Record::Refund(refund) => self.rows.extend(crate::history::run_entries(
                std::slice::from_ref(&refund.result),
                rubric,
                true,
                &refund.revision,
                seq * SEQ_STRIDE,
            )),
            Record::Revision(r) => self.revisions.push(r.clone()),
            Record::Subject(s) => {
                if let SubjectChange::Added { category, .. } = &s.change {
                    self.category = Some(category.clone());
                }
            }
            _ => {}
        }
        self.through_seq = self.through_seq.max(seq);
    }

    /// Folds run entry `seq` from what it adds ([`RunFold`]): the one way a run enters a state.
    pub fn fold_run(&mut self, seq: u64, run: RunFold) {
        self.rows.extend(rows_at(&run.rows, seq));
        if let Some(price) = run.price_usd {
            self.price_usd = Some(price);
        }
        self.provenance = Some(run.provenance);
        if run.paid {
            self.paid_calls += 1;
            self.last_paid = Some(PaidFact {
                seq,
                at_ms: run.started_at_ms,
            });
        }
        self.through_seq = self.through_seq.max(seq);
    }

    /// Moves the window's start past the rows older than `as_of_ms - horizon_days`, a day early
    /// (a clock stepped back a little still finds its rows): rows before the first one inside
    /// the horizon (in ledger order) are dropped. Returns the new `window_from`.
    pub fn advance_window(&mut self, as_of_ms: i64, horizon_days: u64) -> u64 {
        self.horizon_days = self.horizon_days.max(horizon_days);
        let from_ms = as_of_ms.saturating_sub((self.horizon_days as i64 + 1) * 86_400_000);
        let keep = self
            .rows
            .iter()
            .position(|e| scoring::ms_of(&e.at).is_none_or(|at| at >= from_ms))
            .unwrap_or(self.rows.len());
        if keep > 0 {
            let next = self
                .rows
                .get(keep)
                .map_or_else(|| (self.through_seq + 1) * SEQ_STRIDE, |e| e.seq);
            self.rows.drain(..keep);
            self.window_from = self.window_from.max(next);
        }
        self.window_from
    }

    /// The inputs this state gives a score of `url` as of `as_of_ms` (our outage windows as of
    /// the same entry). A row naming a revision no earlier entry declared (a subject that had
    /// never answered: its runs name `r0`) is read under no revision, as the rubric reads
    /// evidence without one.
    pub fn inputs(&self, url: &str, score: ScoreAt<'_>) -> SubjectInputs {
        // Each row's time read once, for the revision and for the horizon and our outages.
        let rows = self.rows.iter().map(|row| {
            let at = scoring::ms_of(&row.at);
            let mut row = row.clone();
            if let Some(id) = &row.revision {
                let at = at.unwrap_or(i64::MAX);
                let declared_before = self.revisions.iter().any(|r| &r.id == id && r.at_ms <= at);
                if !declared_before {
                    row.revision = None;
                }
            }
            (at, row)
        });
        let history =
            scoring::history_for_timed(rows, score.outages, score.as_of_ms, score.horizon_days);
        SubjectInputs {
            url: url.to_string(),
            category: score.category.map_or_else(
                || {
                    self.category
                        .clone()
                        .unwrap_or_else(|| "uncategorised".into())
                },
                str::to_string,
            ),
            price_usd: self.price_usd.unwrap_or_default(),
            revisions: scoring::revisions_for(&self.revisions),
            history,
            population: score.population,
            as_of_ms: score.as_of_ms,
            provenance: self.provenance.unwrap_or(Provenance::Live),
        }
    }

    /// The stored form (without the window's rows) and its digest.
    pub fn to_row(&self, subject: &str) -> StateRow {
        let body = serde_json::to_vec(self).unwrap_or_default();
        StateRow {
            subject: subject.to_string(),
            through_seq: self.through_seq,
            sha256: sha256(&body),
            body,
        }
    }

    /// Reads a stored state back (its rows are then read from the history index): refused when
    /// it does not match its digest, does not decode, or is of another format.
    pub fn from_row(row: &StateRow) -> Result<SubjectState, StateError> {
        if sha256(&row.body) != row.sha256 {
            return Err(StateError::Digest {
                subject: row.subject.clone(),
            });
        }
        let state: SubjectState =
            serde_json::from_slice(&row.body).map_err(|e| StateError::Decode {
                subject: row.subject.clone(),
                why: e.to_string(),
            })?;
        if state.format != STATE_FORMAT {
            return Err(StateError::Format {
                subject: row.subject.clone(),
                found: state.format,
            });
        }
        if state.through_seq != row.through_seq {
            return Err(StateError::Decode {
                subject: row.subject.clone(),
                why: format!(
                    "it says entry {} where its row says {}",
                    state.through_seq, row.through_seq
                ),
            });
        }
        Ok(state)
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// The kinds of entry a subject's state folds.
pub const FOLDED_KINDS: [RecordKind; 4] = [
    RecordKind::Run,
    RecordKind::Refund,
    RecordKind::Revision,
    RecordKind::Subject,
];

/// The states, window rows included, of the subjects the writer scored most recently, kept in
/// memory up to [`Windows::MAX_ROWS`] rows in all (least recently scored out first), so that a
/// rescore neither reads nor parses its window's rows again: once a subject's 180-day horizon is
/// full they are about 56,000, and reading them was most of a rescore's cost. Only the writer
/// thread scores, so a state taken from here is the one its last score kept (or newer than the
/// stored one, when that score's batch did not commit: the fold of the same committed entries).
#[derive(Debug, Default)]
pub struct Windows {
    /// By subject: when it was last put (a tick), and its state.
    states: std::collections::HashMap<String, (u64, SubjectState)>,
    /// Subjects by the tick they were put at, oldest first.
    by_tick: std::collections::BTreeMap<u64, String>,
    tick: u64,
    rows: usize,
}

impl Windows {
    /// About 40 MB of rows: a subject's full 180-day window at the default cadence (56,000 rows)
    /// twice over, or the first runs of thousands of subjects.
    pub const MAX_ROWS: usize = 131_072;

    /// Takes `url`'s state out (it is put back once its score has read it).
    pub fn take(&mut self, url: &str) -> Option<SubjectState> {
        let (tick, state) = self.states.remove(url)?;
        self.by_tick.remove(&tick);
        self.rows -= state.rows.len();
        Some(state)
    }

    /// Keeps `url`'s state, then drops the least recently scored states past the bound.
    pub fn put(&mut self, url: &str, state: SubjectState) {
        self.take(url);
        self.tick += 1;
        self.rows += state.rows.len();
        self.by_tick.insert(self.tick, url.to_string());
        self.states.insert(url.to_string(), (self.tick, state));
        while self.rows > Self::MAX_ROWS {
            let Some((_, oldest)) = self.by_tick.pop_first() else {
                break;
            };
            if let Some((_, dropped)) = self.states.remove(&oldest) {
                self.rows -= dropped.rows.len();
            }
        }
    }

    /// The rows kept in all.
    pub fn rows(&self) -> usize {
        self.rows
    }
}

/// What a run entry adds to its subject's state, taken from the run itself: the writer folds the
/// runs it has just written from these, never reading them back.
pub struct RunFold {
    /// Numbered from 0 (`pipeline::run_rows`).
    rows: Arc<[HistoryEntry]>,
    price_usd: Option<crate::evidence::usd::Usd>,
    provenance: Provenance,
    paid: bool,
    started_at_ms: i64,
}

impl RunFold {
    /// A run's part of the state (its history rows once its seq is known, the price it read).
    pub fn of(rubric: &Rubric, run: &RunRecord) -> RunFold {
        RunFold::with_declared(
            run_rows(rubric, run),
            run,
            declared(&run.free, run.started_at_ms).as_ref(),
        )
    }

    /// The same, with its rows already made ([`run_rows`]) and what the run declared already
    /// read (`checks::history::declared` of its observation at its start).
    pub fn with_declared(
        rows: Arc<[HistoryEntry]>,
        run: &RunRecord,
        declared: Option<&Declared>,
    ) -> RunFold {
        RunFold {
            rows,
            price_usd: declared.and_then(Declared::price_usd),
            provenance: run.provenance,
            paid: run.payment_sent(),
            started_at_ms: run.started_at_ms,
        }
    }
}

/// An entry of a subject that the caller has in memory (the writer, the entries it has just
/// appended): folded as it is instead of read back and decoded.
pub enum Known {
    Run(RunFold),
    Record(Record),
}

/// `url`'s state as of entry `through` (the ledger's head): the stored one with its window's
/// rows read from the history index, brought forward over the subject's entries after it. A
/// stored state that fails its digest or does not decode, or was windowed for a shorter horizon
/// than `horizon_days`, is rebuilt from the ledger (said in the log), never used.
pub fn load(
    store: &dyn Store,
    rubric: &Rubric,
    url: &str,
    through: u64,
    horizon_days: u64,
) -> Result<SubjectState, StoreError> {
    load_known(
        store,
        rubric,
        url,
        through,
        horizon_days,
        None,
        BTreeMap::new(),
    )
}

/// As [`load`], starting from `kept` (the state the writer kept in memory with its rows, see
/// [`Windows`]) instead of the stored one when it is usable: of this horizon or a longer one,
/// and not past `through`; and with entries of the subject the caller holds in memory (by seq:
/// the writer's, just appended) folded from there instead of read back and decoded.
pub fn load_known(
    store: &dyn Store,
    rubric: &Rubric,
    url: &str,
    through: u64,
    horizon_days: u64,
    kept: Option<SubjectState>,
    known: BTreeMap<u64, Known>,
) -> Result<SubjectState, StoreError> {
    let kept = kept.filter(|state| {
        state.through_seq <= through
            && (state.horizon_days >= horizon_days || state.window_from == 0)
    });
    if let Some(state) = kept {
        return fold_after(store, rubric, url, through, horizon_days, state, known);
    }
    let stored = match store.subject_state(url)? {
        None => None,
        Some(row) => match SubjectState::from_row(&row) {
            Ok(state) if state.horizon_days >= horizon_days || state.window_from == 0 => {
                Some(state)
            }
            Ok(_) => {
                tracing::info!(subject = %url, "the subject's state was windowed for a shorter horizon: rebuilt from the ledger");
                None
            }
            Err(e) => {
                tracing::warn!(subject = %url, error = %e, "integrity: the subject's stored state is not used; rebuilt from the ledger");
                None
            }
        },
    };
    let state = match stored {
        Some(mut state) => {
            let rows = store.history_range(
                url,
                state.window_from / SEQ_STRIDE,
                state.through_seq.saturating_add(1),
            )?;
            state.rows = rows
                .iter()
                .map(|b| serde_json::from_slice(b))
                .collect::<Result<_, _>>()
                .map_err(|e| StoreError::Corrupt {
                    path: "the history index".into(),
                    why: format!("a history row of {url} does not read: {e}"),
                })?;
            state
        }
        None => SubjectState::new(),
    };
    fold_after(store, rubric, url, through, horizon_days, state, known)
}

/// `state` brought forward over `url`'s entries after its `through_seq`, up to `through`.
fn fold_after(
    store: &dyn Store,
    rubric: &Rubric,
    url: &str,
    through: u64,
    horizon_days: u64,
    mut state: SubjectState,
    mut known: BTreeMap<u64, Known>,
) -> Result<SubjectState, StoreError> {
    state.horizon_days = state.horizon_days.max(horizon_days);
    if known.is_empty() {
        for entry in store.subject_entries(url, &FOLDED_KINDS, state.through_seq)? {
            if entry.seq > through {
                break;
            }
            fold_read(store, rubric, &mut state, entry)?;
        }
    } else {
        // Which entries come after the state (their kinds, undecoded); those in memory are
        // folded from there, the others read and decoded, all in ledger order.
        let after: Vec<u64> = store
            .subject_stored_entries(url, state.through_seq, usize::MAX)?
            .into_iter()
            .filter(|e| e.seq <= through && FOLDED_KINDS.contains(&e.kind))
            .map(|e| e.seq)
            .collect();
        let unknown: Vec<u64> = after
            .iter()
            .copied()
            .filter(|seq| !known.contains_key(seq))
            .collect();
        let mut read = store.entries_at(&unknown)?.into_iter();
        for seq in after {
            match known.remove(&seq) {
                Some(Known::Run(run)) => state.fold_run(seq, run),
                Some(Known::Record(record)) => state.fold(rubric, seq, &record),
                None => {
                    if let Some(entry) = read.next() {
                        fold_read(store, rubric, &mut state, entry)?;
                    }
                }
            }
        }
    }
    state.through_seq = state.through_seq.max(through);
    Ok(state)
}

/// Folds an entry read from the store (a run's 402 bodies put back first: the declared price
/// as the run read them).
fn fold_read(
    store: &dyn Store,
    rubric: &Rubric,
    state: &mut SubjectState,
    mut entry: crate::store::ReadEntry,
) -> Result<(), StoreError> {
    if let Record::Run(_) = &entry.record {
        store.restore_bodies(&mut entry.record)?;
    }
    state.fold(rubric, entry.seq, &entry.record);
    Ok(())
}

/// What a score adds to a state: its time, horizon, our outages and the value population.
pub struct ScoreAt<'a> {
    pub as_of_ms: i64,
    pub horizon_days: u64,
    pub outages: &'a [OutageWindow],
    /// The category the daemon scores under (`None`: the subject's `added` entry's).
    pub category: Option<&'a str>,
    pub population: Vec<crate::score::input::PeerDocument>,
}

/// Our outages, folded once for every subject: the outage entries with their seq (a score reads
/// those at or before the entry it says it read).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutageFold {
    pub through_seq: u64,
    records: Vec<(u64, OutageRecord)>,
}

impl OutageFold {
    pub fn fold(&mut self, seq: u64, record: &Record) {
        if let Record::Outage(o) = record {
            self.records.push((seq, o.clone()));
        }
        self.through_seq = self.through_seq.max(seq);
    }

    /// Our windows as of entry `through_seq`.
    pub fn windows(&self, through_seq: u64) -> Vec<OutageWindow> {
        let end = self.records.partition_point(|(seq, _)| *seq <= through_seq);
        let read: Vec<OutageRecord> = self.records[..end].iter().map(|(_, o)| o.clone()).collect();
        scoring::outage_windows(&read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_rows(through_seq: u64, rows: usize) -> SubjectState {
        let row = HistoryEntry {
            seq: 0,
            check: "R1".into(),
            outcome: crate::evidence::Outcome::Pass,
            at: "2026-12-01T00:00:00Z".into(),
            kind: crate::rubric::Kind::Free,
            revision: None,
            value: None,
            receipt: "0".repeat(64),
            note: None,
        };
        SubjectState {
            through_seq,
            rows: vec![row; rows],
            ..SubjectState::default()
        }
    }

    #[test]
    fn the_kept_windows_stay_under_their_bound_least_recently_scored_out_first() {
        let mut windows = Windows::default();
        let half = Windows::MAX_ROWS / 2;
        windows.put("a", with_rows(1, half));
        windows.put("b", with_rows(2, half));
        assert_eq!(windows.rows(), 2 * half);
        // `a` scored again: `b` is now the least recently scored, and goes when `c` comes.
        let a = windows.take("a").unwrap();
        assert_eq!((a.through_seq, windows.rows()), (1, half));
        windows.put("a", with_rows(3, half));
        windows.put("c", with_rows(4, 10));
        assert!(windows.take("b").is_none(), "b was dropped");
        assert_eq!(windows.rows(), half + 10);
        assert_eq!(windows.take("a").unwrap().through_seq, 3);
        assert_eq!(windows.take("c").unwrap().rows.len(), 10);
        assert_eq!(windows.rows(), 0);
        // A window larger than the bound is not kept at all.
        windows.put("huge", with_rows(5, Windows::MAX_ROWS + 1));
        assert!(windows.take("huge").is_none());
        assert_eq!(windows.rows(), 0);
    }

    #[test]
    fn a_stored_state_reads_back_and_a_damaged_one_is_refused() {
        let mut state = SubjectState::new();
        state.through_seq = 7;
        state.category = Some("c".into());
        state.price_usd = crate::evidence::usd::Usd::of_micros(10_000);
        let row = state.to_row("https://s.example/x");
        assert_eq!(SubjectState::from_row(&row).unwrap(), state);

        let mut flipped = row.clone();
        flipped.body[3] ^= 1;
        assert!(matches!(
            SubjectState::from_row(&flipped),
            Err(StateError::Digest { .. })
        ));
        let mut garbage = row.clone();
        garbage.body = b"{not json".to_vec();
        garbage.sha256 = sha256(&garbage.body);
        assert!(matches!(
            SubjectState::from_row(&garbage),
            Err(StateError::Decode { .. })
        ));
        let mut moved = row;
        moved.through_seq = 8;
        assert!(SubjectState::from_row(&moved).is_err());
    }
}
