//! The folded subject state: what a subject's score is built from, folded forward entry by entry
//! by one pure function ([`SubjectState::fold`]), so a rescore reads its subject's state instead
//! of its whole history. A subject's evidence is kept as per-day summaries of each check (the
//! cells of `score::summary`, method `/3`), so a rescore reads about one cell per check per day
//! of its horizon, never one row per outcome. The daemon persists the state with the
//! `through_seq` it reflects (the `subject_state` table, and each day's summary in
//! `subject_days`, written in the transaction of the score that read it, only the days that
//! changed); `recompute --ledger` folds the ledger with the same function and must agree with
//! every published score byte for byte.
//!
//! Our outages are global entries: one [`OutageFold`] for all subjects, never copied into each.

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::checks::history::{Declared, OutageWindow, declared};
use crate::evidence::run::{Provenance, RunRecord};
use crate::ledger::record::{OutageRecord, Record, RecordKind, RevisionRecord, SubjectChange};
use crate::rubric::{Kind, Rubric};
use crate::score::input::{HistoryEntry, Inputs};
use crate::score::summary::{self, Cell, DAY_MS};
use crate::store::{DayRow, StateRow, Store, StoreError};

use super::scoring::{self, SubjectInputs};
use crate::history::{SEQ_STRIDE, rows_at, run_rows};

mod vantages;
pub use vantages::{VantageEntry, VantageOutages, Vantages, entries_of, fold_others};

/// The state's stored form's version: a row of another version is rebuilt from the ledger.
pub const STATE_FORMAT: u32 = 2;

/// One day of a subject's evidence: its cells (each check's runs of outcomes, in ledger order,
/// as recorded: no outage excused) and the ledger entries they came from (to derive the day's
/// rows again when one of our outage windows touches it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DaySummary {
    pub cells: Vec<Cell>,
    pub entries: Vec<EntryRef>,
}

/// A ledger entry a day came from: of the state's own log (its seq, written as a bare number, as
/// every state of one log), or of another vantage's log (its name and seq).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EntryRef {
    Own(u64),
    Of(String, u64),
}

/// One subject's scoring state as of ledger entry `through_seq`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubjectState {
    pub format: u32,
    /// The last ledger entry folded in (entries of other subjects count too: nothing of them
    /// changes this state).
    pub through_seq: u64,
    /// The day summaries of the window, by day (days since the epoch). Not in the stored form's
    /// body: each day is a row of its own, written when it changed.
    #[serde(skip)]
    pub days: BTreeMap<i64, DaySummary>,
    /// The SHA-256 of each day's stored body, by day: what the stored day rows must match.
    pub day_sha256: BTreeMap<i64, String>,
    /// Days changed since the state was last stored.
    #[serde(skip)]
    dirty: std::collections::BTreeSet<i64>,
    /// Each unchanged day's digest for a score (`summary::day_digest`), computed once.
    #[serde(skip)]
    digests: BTreeMap<i64, [u8; 32]>,
    /// The first day inside the window (0 until a day was dropped): every day before it is older
    /// than the horizon of every score made since (it only moves forward).
    pub window_from: i64,
    /// The longest horizon the window was moved for: a longer one needs the days it dropped.
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
    /// Several vantages: each other vantage's log folded through this seq (absent: a state of
    /// its own log alone).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub others: BTreeMap<String, u64>,
}

/// Two states are the same when what they fold is: their days and facts (not the digests kept of
/// their days, nor which days are yet to be stored).
impl PartialEq for SubjectState {
    fn eq(&self, other: &SubjectState) -> bool {
        (
            self.format,
            self.through_seq,
            &self.days,
            self.window_from,
            self.horizon_days,
        ) == (
            other.format,
            other.through_seq,
            &other.days,
            other.window_from,
            other.horizon_days,
        ) && (
            &self.revisions,
            &self.category,
            self.price_usd,
            self.provenance,
        ) == (
            &other.revisions,
            &other.category,
            other.price_usd,
            other.provenance,
        ) && (self.paid_calls, self.last_paid, &self.others)
            == (other.paid_calls, other.last_paid, &other.others)
    }
}

impl Default for SubjectState {
    /// The state before any entry: of this build's format.
    fn default() -> SubjectState {
        SubjectState {
            format: STATE_FORMAT,
            through_seq: 0,
            days: BTreeMap::new(),
            day_sha256: BTreeMap::new(),
            dirty: Default::default(),
            digests: BTreeMap::new(),
            window_from: 0,
            horizon_days: 0,
            revisions: Vec::new(),
            category: None,
            price_usd: None,
            provenance: None,
            paid_calls: 0,
            last_paid: None,
            others: BTreeMap::new(),
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

/// The most a day's summary may unpack to (a day of runs every second is a few megabytes).
const MAX_DAY_BYTES: usize = 256 << 20;

impl SubjectState {
    pub fn new() -> SubjectState {
        SubjectState::default()
    }

    /// Folds ledger entry `seq` (a record about this subject, read with its bodies) into the
    /// state. Pure; entries must come in ledger order.
    pub fn fold(&mut self, rubric: &Rubric, seq: u64, record: &Record) {
        match record {
            Record::Run(run) => self.fold_run(rubric, seq, RunFold::of(rubric, run)),
            Record::Refund(refund) => {
                let rows = crate::history::run_entries(
                    std::slice::from_ref(&refund.result),
                    rubric,
                    true,
                    &refund.revision,
                    seq * SEQ_STRIDE,
                );
                self.fold_rows(rubric, EntryRef::Own(seq), &rows);
            }
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
    pub fn fold_run(&mut self, rubric: &Rubric, seq: u64, run: RunFold) {
        let rows: Vec<HistoryEntry> = rows_at(&run.rows, seq).collect();
        self.fold_rows(rubric, EntryRef::Own(seq), &rows);
        self.fold_run_facts(&run, seq);
        self.through_seq = self.through_seq.max(seq);
    }

    /// A run's price, provenance and paid call.
    fn fold_run_facts(&mut self, run: &RunFold, seq: u64) {
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
    }

    /// Adds entry `entry`'s history rows to the summaries of their days (a row whose time does
    /// not read is left out, as a score leaves it out).
    fn fold_rows(&mut self, rubric: &Rubric, entry: EntryRef, rows: &[HistoryEntry]) {
        for row in rows {
            let Some(at_ms) = crate::clock::ms_of(&row.at) else {
                continue;
            };
            let day = summary::day_of(at_ms);
            let summary = self.days.entry(day).or_default();
            if summary.entries.last() != Some(&entry) {
                summary.entries.push(entry.clone());
            }
            summary::add_outcome(rubric, &mut summary.cells, outcome_of(row, at_ms, None));
            self.dirty.insert(day);
            self.digests.remove(&day);
        }
    }

    /// Drops the days that start more than `horizon_days` (and a day) before `as_of_ms`: no
    /// score from now on reads them. Returns the new `window_from`.
    pub fn advance_window(&mut self, as_of_ms: i64, horizon_days: u64) -> i64 {
        self.horizon_days = self.horizon_days.max(horizon_days);
        let from = summary::day_of(as_of_ms) - self.horizon_days as i64 - 1;
        if from > self.window_from {
            let kept = self.days.split_off(&from);
            for day in std::mem::replace(&mut self.days, kept).into_keys() {
                self.day_sha256.remove(&day);
                self.digests.remove(&day);
                self.dirty.remove(&day);
            }
            self.window_from = from;
        }
        self.window_from
    }

    /// How many cells and measurements the state holds in memory (what [`Windows`] bounds).
    pub fn size(&self) -> usize {
        self.days
            .values()
            .flat_map(|d| &d.cells)
            .map(|c| 1 + c.measurements.len())
            .sum()
    }

    /// The inputs of this state's `/3` score of `url` as of `score.as_of_ms`: the days whose start
    /// is at most the horizon before it, their cells with our outage windows applied. A day that
    /// one of our windows touches is summarised again from its entries' rows (`rows_of`, which
    /// derives them from the ledger), each free pass or fail inside a window excused.
    pub fn score_inputs(
        &mut self,
        rubric: &Rubric,
        url: &str,
        score: ScoreAt<'_>,
        rows_of: &mut RowsOf<'_>,
    ) -> Result<Inputs, ScoreInputsError> {
        // Every day inside the horizon is at or after this one (checked exactly below).
        let first = summary::day_of(score.as_of_ms) - score.horizon_days as i64;
        let as_of_ms = score.as_of_ms;
        let mut rebuilt: Vec<(i64, Vec<Cell>)> = Vec::new();
        let mut plain: Vec<i64> = Vec::new();
        for (day, summary) in self.days.range(first..) {
            // A day starting more than the horizon before as_of is out (`from_day` may start
            // less than the horizon before it: the day must start at or after as_of - horizon).
            if day * DAY_MS < as_of_ms - score.horizon_days as i64 * DAY_MS {
                continue;
            }
            if *day * DAY_MS > as_of_ms {
                break;
            }
            let start = day * DAY_MS;
            let touched = score
                .outages
                .iter()
                .any(|w| w.from_ms < start + DAY_MS && w.to_ms.is_none_or(|to| to >= start));
            if touched {
                let seqs: Vec<u64> = summary
                    .entries
                    .iter()
                    .filter_map(|e| match e {
                        EntryRef::Own(seq) => Some(*seq),
                        EntryRef::Of(..) => None,
                    })
                    .collect();
                let rows = rows_of(&seqs)?;
                let mut cells = Vec::new();
                for row in &rows {
                    let Some(at_ms) = crate::clock::ms_of(&row.at) else {
                        continue;
                    };
                    if summary::day_of(at_ms) != *day {
                        continue;
                    }
                    let excused = (row.kind == Kind::Free)
                        .then(|| {
                            crate::checks::history::excused(
                                &row.check,
                                row.outcome,
                                at_ms,
                                score.outages,
                            )
                        })
                        .flatten()
                        .map(|_| row.outcome);
                    summary::add_outcome(rubric, &mut cells, outcome_of(row, at_ms, excused));
                }
                rebuilt.push((*day, cells));
            } else {
                plain.push(*day);
            }
        }
        for day in &plain {
            if !self.digests.contains_key(day) {
                let digest = summary::day_digest(&self.days[day].cells);
                self.digests.insert(*day, digest);
            }
        }
        let rebuilt_digests: Vec<[u8; 32]> = rebuilt
            .iter()
            .map(|(_, c)| summary::day_digest(c))
            .collect();
        let mut days: Vec<summary::Day<'_>> = plain
            .iter()
            .map(|day| summary::Day {
                day: *day,
                cells: &self.days[day].cells,
                sha256: self.digests[day],
            })
            .chain(
                rebuilt
                    .iter()
                    .zip(&rebuilt_digests)
                    .map(|((day, cells), sha)| summary::Day {
                        day: *day,
                        cells,
                        sha256: *sha,
                    }),
            )
            .collect();
        days.sort_by_key(|d| d.day);
        // Cells after as_of are not yet known to this score.
        let late: Vec<Vec<Cell>>;
        if days
            .last()
            .is_some_and(|d| d.cells.iter().any(|c| c.last_ms > as_of_ms))
        {
            let d = days.pop().expect("a last day");
            late = vec![
                d.cells
                    .iter()
                    .filter(|c| c.last_ms <= as_of_ms)
                    .cloned()
                    .collect(),
            ];
            days.push(summary::Day {
                day: d.day,
                cells: &late[0],
                sha256: summary::day_digest(&late[0]),
            });
        }
        let meta = self.inputs_meta(rubric, url, score, &self.revisions);
        Ok(summary::inputs(meta, &days)?)
    }

    /// A score's inputs document without its history: the subject (its category the daemon's
    /// or its `added` entry's), `revisions`, the population.
    fn inputs_meta(
        &self,
        rubric: &Rubric,
        url: &str,
        score: ScoreAt<'_>,
        revisions: &[RevisionRecord],
    ) -> crate::score::input::InputsDocument {
        scoring::inputs_document(
            rubric,
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
                revisions: scoring::revisions_for(revisions),
                history: Vec::new(),
                population: score.population,
                as_of_ms: score.as_of_ms,
                provenance: self.provenance.unwrap_or(Provenance::Live),
            },
        )
    }

    /// The stored form: its body and digest, with the days changed since it was last stored
    /// (their digests then kept in the body).
    pub fn to_row(&mut self, subject: &str) -> StateRow {
        let mut days = Vec::with_capacity(self.dirty.len());
        for day in std::mem::take(&mut self.dirty) {
            let Some(summary) = self.days.get(&day) else {
                continue;
            };
            let json = serde_json::to_vec(summary).unwrap_or_default();
            let sha = sha256(&json);
            self.day_sha256.insert(day, hex::encode(sha));
            days.push(DayRow {
                day,
                sha256: sha,
                body: crate::store::packed::pack(&json),
            });
        }
        let body = serde_json::to_vec(&*self).unwrap_or_default();
        StateRow {
            subject: subject.to_string(),
            through_seq: self.through_seq,
            sha256: sha256(&body),
            body,
            days,
            days_from: self.window_from,
        }
    }

    /// Reads a stored state back with all its days: refused when it or a day does not match its
    /// digest, a day is missing, it does not decode, or is of another format.
    pub fn from_row(row: &StateRow) -> Result<SubjectState, StateError> {
        let decode = |why: String| StateError::Decode {
            subject: row.subject.clone(),
            why,
        };
        if sha256(&row.body) != row.sha256 {
            return Err(StateError::Digest {
                subject: row.subject.clone(),
            });
        }
        let mut state: SubjectState =
            serde_json::from_slice(&row.body).map_err(|e| decode(e.to_string()))?;
        if state.format != STATE_FORMAT {
            return Err(StateError::Format {
                subject: row.subject.clone(),
                found: state.format,
            });
        }
        if state.through_seq != row.through_seq {
            return Err(decode(format!(
                "it says entry {} where its row says {}",
                state.through_seq, row.through_seq
            )));
        }
        for day in &row.days {
            // A body that does not unpack is a body that does not match its digest.
            let json = crate::store::packed::unpack(&day.body, MAX_DAY_BYTES).unwrap_or_default();
            if state.day_sha256.get(&day.day) != Some(&hex::encode(sha256(&json)))
                || day.sha256 != sha256(&json)
            {
                if day.day < state.window_from || !state.day_sha256.contains_key(&day.day) {
                    continue; // a day the state no longer holds
                }
                return Err(StateError::Digest {
                    subject: row.subject.clone(),
                });
            }
            let summary: DaySummary =
                serde_json::from_slice(&json).map_err(|e| decode(e.to_string()))?;
            state.days.insert(day.day, summary);
        }
        if state.days.len() != state.day_sha256.len() {
            return Err(decode(format!(
                "{} of its {} days are stored",
                state.days.len(),
                state.day_sha256.len()
            )));
        }
        Ok(state)
    }
}

/// How a score reads the history rows of ledger entries (a day our outage touches).
pub type RowsOf<'a> = dyn FnMut(&[u64]) -> Result<Vec<HistoryEntry>, StoreError> + 'a;

/// Why a `/3` score's inputs could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ScoreInputsError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Inputs(#[from] crate::score::input::InputError),
}

/// One history row as a day summary takes it.
fn outcome_of(
    row: &HistoryEntry,
    at_ms: i64,
    excused: Option<crate::evidence::Outcome>,
) -> summary::Outcome1<'_> {
    summary::Outcome1 {
        seq: row.seq,
        check: &row.check,
        outcome: if excused.is_some() {
            crate::evidence::Outcome::Unmeasured
        } else {
            row.outcome
        },
        kind: row.kind,
        revision: row.revision.as_deref(),
        value: row.value,
        at_ms,
        excused,
    }
}

/// Every history row of `subject`, in ledger order, derived from its run and refund entries (no
/// index of them is kept: the entries are the record).
pub fn subject_rows(
    store: &dyn Store,
    rubric: &Rubric,
    subject: &str,
) -> Result<Vec<HistoryEntry>, StoreError> {
    let seqs: Vec<u64> = store
        .subject_stored_entries(subject, 0, usize::MAX)?
        .into_iter()
        .filter(|e| matches!(e.kind, RecordKind::Run | RecordKind::Refund))
        .map(|e| e.seq)
        .collect();
    rows_of_entries(store, rubric, &seqs)
}

/// The history rows of ledger entries `seqs` (runs and refunds of one subject), derived from the
/// entries as the fold derives them: how a day touched by our outage is summarised again.
pub fn rows_of_entries(
    store: &dyn Store,
    rubric: &Rubric,
    seqs: &[u64],
) -> Result<Vec<HistoryEntry>, StoreError> {
    let mut rows = Vec::new();
    for entry in store.entries_at(seqs)? {
        match &entry.record {
            Record::Run(run) => rows.extend(rows_at(&run_rows(rubric, run), entry.seq)),
            Record::Refund(refund) => rows.extend(crate::history::run_entries(
                std::slice::from_ref(&refund.result),
                rubric,
                true,
                &refund.revision,
                entry.seq * SEQ_STRIDE,
            )),
            _ => {}
        }
    }
    Ok(rows)
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

/// The states, day summaries included, of the subjects the writer scored most recently, kept in
/// memory up to [`Windows::MAX_SIZE`] cells and measurements in all (least recently scored out
/// first), so that a rescore neither reads nor decodes its days again. Only the writer thread
/// scores, so a state taken from here is the one its last score kept (or newer than the stored
/// one, when that score's batch did not commit: the fold of the same committed entries).
#[derive(Debug, Default)]
pub struct Windows {
    /// By subject: when it was last put (a tick), its size, and its state.
    states: std::collections::HashMap<String, (u64, usize, SubjectState)>,
    /// Subjects by the tick they were put at, oldest first.
    by_tick: std::collections::BTreeMap<u64, String>,
    tick: u64,
    size: usize,
}

impl Windows {
    /// Cells and measurements: a subject's full 180-day window at the default cadence (about
    /// 13,000: a few thousand cells and the curve checks' measurements) many times over.
    pub const MAX_SIZE: usize = 262_144;

    /// Takes `url`'s state out (it is put back once its score has read it).
    pub fn take(&mut self, url: &str) -> Option<SubjectState> {
        let (tick, size, state) = self.states.remove(url)?;
        self.by_tick.remove(&tick);
        self.size -= size;
        Some(state)
    }

    /// Keeps `url`'s state, then drops the least recently scored states past the bound.
    pub fn put(&mut self, url: &str, state: SubjectState) {
        self.take(url);
        self.tick += 1;
        let size = state.size();
        self.size += size;
        self.by_tick.insert(self.tick, url.to_string());
        self.states
            .insert(url.to_string(), (self.tick, size, state));
        while self.size > Self::MAX_SIZE {
            let Some((_, oldest)) = self.by_tick.pop_first() else {
                break;
            };
            if let Some((_, size, _)) = self.states.remove(&oldest) {
                self.size -= size;
            }
        }
    }

    /// The cells and measurements kept in all.
    pub fn size(&self) -> usize {
        self.size
    }
}

/// What a run entry adds to its subject's state, taken from the run itself: the writer folds the
/// runs it has just written from these, never reading them back.
pub struct RunFold {
    /// Numbered from 0 (`history::run_rows`).
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

/// `url`'s state as of entry `through` (the ledger's head): the stored one with its days,
/// brought forward over the subject's entries after it. A
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

/// As [`load`], starting from `kept` (the state the writer kept in memory with its days, see
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
    let state = stored.unwrap_or_default();
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
                Some(Known::Run(run)) => state.fold_run(rubric, seq, run),
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

    fn with_cells(through_seq: u64, cells: usize) -> SubjectState {
        let cell = Cell {
            check: crate::evidence::CheckId::R1,
            outcome: crate::evidence::Outcome::Pass,
            kind: Kind::Free,
            revision: None,
            excused: None,
            count: 1,
            first_seq: 0,
            last_seq: 0,
            first_ms: 0,
            last_ms: 0,
            scale: 1.0,
            measurements: Default::default(),
            value_sum: 0.0,
        };
        let mut state = SubjectState {
            through_seq,
            ..SubjectState::default()
        };
        state.days.insert(
            0,
            DaySummary {
                cells: vec![cell; cells],
                entries: vec![EntryRef::Own(0)],
            },
        );
        state
    }

    #[test]
    fn the_kept_windows_stay_under_their_bound_least_recently_scored_out_first() {
        let mut windows = Windows::default();
        let half = Windows::MAX_SIZE / 2;
        windows.put("a", with_cells(1, half));
        windows.put("b", with_cells(2, half));
        assert_eq!(windows.size(), 2 * half);
        // `a` scored again: `b` is now the least recently scored, and goes when `c` comes.
        let a = windows.take("a").unwrap();
        assert_eq!((a.through_seq, windows.size()), (1, half));
        windows.put("a", with_cells(3, half));
        windows.put("c", with_cells(4, 10));
        assert!(windows.take("b").is_none(), "b was dropped");
        assert_eq!(windows.size(), half + 10);
        assert_eq!(windows.take("a").unwrap().through_seq, 3);
        assert_eq!(windows.take("c").unwrap().size(), 10);
        assert_eq!(windows.size(), 0);
        // A window larger than the bound is not kept at all.
        windows.put("huge", with_cells(5, Windows::MAX_SIZE + 1));
        assert!(windows.take("huge").is_none());
        assert_eq!(windows.size(), 0);
    }

    #[test]
    fn a_stored_state_reads_back_and_a_damaged_one_is_refused() {
        let mut state = with_cells(7, 3);
        state.dirty.insert(0);
        state.category = Some("c".into());
        state.price_usd = crate::evidence::usd::Usd::of_micros(10_000);
        let row = state.to_row("https://s.example/x");
        assert_eq!(row.days.len(), 1, "the changed day is written");
        let read = SubjectState::from_row(&row).unwrap();
        assert_eq!(read.days, state.days);
        assert_eq!(read.day_sha256, state.day_sha256);
        // Stored again unchanged: no day is written again.
        assert!(state.to_row("https://s.example/x").days.is_empty());

        let mut flipped = row.clone();
        flipped.body[3] ^= 1;
        assert!(matches!(
            SubjectState::from_row(&flipped),
            Err(StateError::Digest { .. })
        ));
        let mut day_flipped = row.clone();
        day_flipped.days[0].body[3] ^= 1;
        assert!(
            SubjectState::from_row(&day_flipped).is_err(),
            "a damaged day"
        );
        let mut day_missing = row.clone();
        day_missing.days.clear();
        assert!(
            SubjectState::from_row(&day_missing).is_err(),
            "a missing day"
        );
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

    /// A day's JSON is kept packed when that is smaller, and its digest names the JSON: a packed
    /// day reads back, a day kept as plain JSON (as written before packing) reads back alike, and
    /// a packed day damaged anywhere is refused.
    #[test]
    fn a_day_is_kept_packed_and_its_digest_names_its_json() {
        let mut state = with_cells(7, 200);
        state.dirty.insert(0);
        let row = state.to_row("https://s.example/x");
        let day = &row.days[0];
        assert!(day.body.starts_with(&crate::store::packed::ZSTD_MAGIC));
        let json = serde_json::to_vec(&state.days[&0]).unwrap();
        assert!(
            day.body.len() * 3 < json.len(),
            "{} of {}",
            day.body.len(),
            json.len()
        );
        assert_eq!(day.sha256, sha256(&json));
        assert_eq!(SubjectState::from_row(&row).unwrap().days, state.days);

        let mut plain = row.clone();
        plain.days[0].body = json;
        assert_eq!(SubjectState::from_row(&plain).unwrap().days, state.days);

        // A damaged day never reads as other evidence: refused, or (a bit zstd ignores) the
        // very JSON its digest names. Damage inside the compressed data is refused.
        let mut refused = 0;
        for at in 0..row.days[0].body.len() {
            let mut damaged = row.clone();
            damaged.days[0].body[at] ^= 0x10;
            match SubjectState::from_row(&damaged) {
                Ok(read) => assert_eq!(read.days, state.days, "byte {at}"),
                Err(_) => refused += 1,
            }
        }
        assert!(refused + 8 >= row.days[0].body.len(), "{refused} refused");
    }
}
