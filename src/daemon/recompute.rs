//! `recompute --ledger`: re-derives every score the daemon published from the ledger alone, in one
//! pass in ledger order, and compares each with what was published: the inputs digest, and the
//! stored document byte for byte. The inputs are rebuilt with the same functions the daemon uses
//! (history rows of each run and refund, revisions, our outage windows, the value population the
//! score named), from the entries up to the one the score says it read.

use std::collections::{BTreeMap, BTreeSet};

use crate::checks::history::OutageWindow;
use crate::ledger::record::{Record, RecordKind, ScoreRecord};
use crate::rubric::Rubric;
use crate::score::Method;
use crate::score::input::{HistoryEntry, PeerDocument};
use crate::store::{StateRow, Store, StoreError};

use super::scoring::{self, SubjectInputs};
use super::subject_state::{
    self, FOLDED_KINDS, OutageFold, ScoreAt, SubjectState, VantageOutages, rows_of_entries,
};
use crate::history::{SEQ_STRIDE, rows_at, run_rows};

/// Entries read per page of the pass.
const PAGE: usize = 512;

/// One score that did not recompute.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub seq: u64,
    pub subject: String,
    pub why: String,
}

/// What a ledger recompute found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LedgerRecompute {
    pub scores: u64,
    pub identical: u64,
    pub mismatches: Vec<Mismatch>,
    /// History rows (the index scoring reads) that differ from what their entries derive.
    pub derived: Vec<Mismatch>,
}

/// Recomputes every published score of the ledger in `store` under the rubrics given (a score
/// names its rubric by sha256).
pub fn recompute_ledger(
    store: &dyn Store,
    rubrics: &[Rubric],
) -> Result<LedgerRecompute, StoreError> {
    recompute_ledger_reporting(store, rubrics, &mut |_, _| {})
}

/// [`recompute_ledger`], telling `walked(entries read, entries in all)` after each page.
pub fn recompute_ledger_reporting(
    store: &dyn Store,
    rubrics: &[Rubric],
    walked: &mut dyn FnMut(u64, u64),
) -> Result<LedgerRecompute, StoreError> {
    let total = store.head()?.0;
    walked(0, total);
    let populations = populations_named(store)?;
    // Each subject's state folded with the daemon's own function, and our outages once.
    let mut subjects: BTreeMap<String, SubjectState> = BTreeMap::new();
    // Each subject's history rows inside the horizon, for the scores of method `/2`.
    let mut rows: BTreeMap<String, RowWindow> = BTreeMap::new();
    let mut outages = OutageFold::default();
    // Several vantages: the other vantages' outages, as far as each score read their logs.
    let mut others = VantageOutages::default();
    // The states the daemon kept, compared when the pass reaches the entry each reflects.
    let mut kept: BTreeMap<String, StateRow> = BTreeMap::new();
    let mut looked_up: std::collections::BTreeSet<String> = Default::default();
    let mut report = LedgerRecompute::default();
    let mut after = 0;
    loop {
        let page = store.entries_page(after, PAGE)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        walked(after, total);
        for mut entry in page {
            let seq = entry.seq;
            if let Record::Run(_) = &entry.record {
                // The run's 402 bodies (the declared price) as the daemon read them.
                store.restore_bodies(&mut entry.record)?;
            }
            let rubric = rubric_for(rubrics, None);
            match &entry.record {
                Record::Outage(_) => outages.fold(seq, &entry.record),
                Record::Score(score) => {
                    // The kept state is read at the subject's first score (its other entries
                    // usually come first and start its fold).
                    if looked_up.insert(score.subject.clone())
                        && let Some(row) = store.subject_state(&score.subject)?
                    {
                        kept.insert(score.subject.clone(), row);
                    }
                    let state = subjects.entry(score.subject.clone()).or_default();
                    let window = rows.entry(score.subject.clone()).or_default();
                    let logs = Logs {
                        ours: &outages,
                        others: &mut others,
                    };
                    let outcome =
                        check_score(store, &populations, rubrics, state, window, logs, score);
                    report.scores += 1;
                    match outcome {
                        Ok(()) => report.identical += 1,
                        Err(Check::Differs(why)) => report.mismatches.push(Mismatch {
                            seq,
                            subject: score.subject.clone(),
                            why,
                        }),
                    }
                    // As the daemon keeps it once this score has read it.
                    state.through_seq = score.through_seq;
                    state.advance_window(score.as_of_ms, score.horizon_days);
                    window.advance(score.as_of_ms, score.horizon_days);
                    if let Some(row) = kept
                        .get(&score.subject)
                        .filter(|row| row.through_seq == score.through_seq)
                        && let Some(why) = state_differs(state, row)
                    {
                        report.derived.push(Mismatch {
                            seq,
                            subject: score.subject.clone(),
                            why,
                        });
                    }
                }
                record => {
                    if let Some(subject) = record.subject()
                        && FOLDED_KINDS.contains(&record.kind())
                    {
                        let state = subjects.entry(subject.to_string()).or_default();
                        state.fold(rubric, seq, record);
                        rows.entry(subject.to_string())
                            .or_default()
                            .fold(rubric, seq, record);
                    }
                }
            }
        }
    }
    Ok(report)
}

/// How the state the daemon kept differs from the fold of the ledger at the same entry, if it
/// does (where its window starts aside: a horizon changed between runs moves it differently).
fn state_differs(folded: &SubjectState, kept: &StateRow) -> Option<String> {
    let kept = match SubjectState::from_row(kept) {
        Ok(state) => state,
        // Not trusted by the daemon either: it rebuilds it from the ledger.
        Err(_) => return None,
    };
    let mut ours = folded.clone();
    ours.window_from = kept.window_from;
    ours.horizon_days = kept.horizon_days;
    // The days both hold (the daemon's window may start later) must be the same.
    ours.days.retain(|day, _| kept.days.contains_key(day));
    let same = ours == kept;
    (!same).then(|| {
        format!(
            "the subject's kept state (through entry {}) differs from the ledger's fold",
            kept.through_seq
        )
    })
}

/// A subject's history rows inside the horizon, in ledger order: what a score of method `/2`
/// read (every score published before `/3`).
#[derive(Debug, Default)]
struct RowWindow {
    rows: Vec<HistoryEntry>,
}

impl RowWindow {
    fn fold(&mut self, rubric: &Rubric, seq: u64, record: &Record) {
        match record {
            Record::Run(run) => self.rows.extend(rows_at(&run_rows(rubric, run), seq)),
            Record::Refund(refund) => self.rows.extend(crate::history::run_entries(
                std::slice::from_ref(&refund.result),
                rubric,
                true,
                &refund.revision,
                seq * SEQ_STRIDE,
            )),
            _ => {}
        }
    }

    /// Drops the rows older than `as_of_ms - horizon_days` (and a day).
    fn advance(&mut self, as_of_ms: i64, horizon_days: u64) {
        let from_ms = as_of_ms.saturating_sub((horizon_days as i64 + 1) * 86_400_000);
        let keep = self
            .rows
            .iter()
            .position(|e| crate::clock::ms_of(&e.at).is_none_or(|at| at >= from_ms))
            .unwrap_or(self.rows.len());
        self.rows.drain(..keep);
    }

    /// The `/2` inputs: the rows inside the horizon with our outages applied, a row naming a
    /// revision no earlier entry declared read under none.
    fn inputs(
        &self,
        state: &SubjectState,
        url: &str,
        score: ScoreAt<'_>,
        outages: &[OutageWindow],
    ) -> SubjectInputs {
        let rows = self.rows.iter().map(|row| {
            let at = crate::clock::ms_of(&row.at);
            let mut row = row.clone();
            if let Some(id) = &row.revision {
                let at = at.unwrap_or(i64::MAX);
                let declared_before = state.revisions.iter().any(|r| &r.id == id && r.at_ms <= at);
                if !declared_before {
                    row.revision = None;
                }
            }
            (at, row)
        });
        let history = scoring::history_for_timed(rows, outages, score.as_of_ms, score.horizon_days);
        SubjectInputs {
            url: url.to_string(),
            category: state
                .category
                .clone()
                .unwrap_or_else(|| "uncategorised".into()),
            price_usd: state.price_usd.unwrap_or_default(),
            revisions: scoring::revisions_for(&state.revisions),
            history,
            population: score.population,
            as_of_ms: score.as_of_ms,
            provenance: state
                .provenance
                .unwrap_or(crate::evidence::run::Provenance::Live),
        }
    }
}

enum Check {
    Differs(String),
}

/// The value populations scores name, by sha256: `None` for one that is missing or unreadable
/// (that score then differs). Read before the pass, because `scan` holds the store while it feeds
/// its callback.
type Populations = BTreeMap<String, Result<Vec<PeerDocument>, String>>;

fn populations_named(store: &dyn Store) -> Result<Populations, StoreError> {
    let mut named = BTreeSet::new();
    for entry in store.entries_of_kind(&[RecordKind::Score], 0)? {
        if let Record::Score(score) = entry.record
            && let Some(sha) = score.population_sha256
        {
            named.insert(sha);
        }
    }
    let mut populations = Populations::new();
    for sha in named {
        let key: Option<[u8; 32]> = hex::decode(&sha).ok().and_then(|b| b.try_into().ok());
        let peers = match key {
            None => Err(format!("population {sha} is not a hash")),
            Some(key) => match store.blob(&key)? {
                None => Err(format!("population {sha} is missing")),
                Some(bytes) => serde_json::from_slice::<Vec<PeerDocument>>(&bytes)
                    .map_err(|e| format!("population {sha}: {e}")),
            },
        };
        populations.insert(sha, peers);
    }
    Ok(populations)
}

fn rubric_for<'a>(rubrics: &'a [Rubric], sha256: Option<&str>) -> &'a Rubric {
    sha256
        .and_then(|sha| rubrics.iter().find(|r| r.sha256() == sha))
        .unwrap_or(&rubrics[0])
}

/// Our outages, and the other vantages' (a score of several vantages).
struct Logs<'a> {
    ours: &'a OutageFold,
    others: &'a mut VantageOutages,
}

fn check_score(
    store: &dyn Store,
    populations: &Populations,
    rubrics: &[Rubric],
    state: &mut SubjectState,
    rows: &RowWindow,
    logs: Logs<'_>,
    score: &ScoreRecord,
) -> Result<(), Check> {
    let outages = logs.ours;
    let Some(rubric) = rubrics.iter().find(|r| r.sha256() == score.rubric_sha256) else {
        return Err(Check::Differs(format!(
            "scored under rubric {}, which was not given",
            score.rubric_sha256
        )));
    };
    let population: Vec<PeerDocument> = match &score.population_sha256 {
        None => Vec::new(),
        Some(sha) => match populations.get(sha) {
            Some(Ok(peers)) => peers
                .iter()
                .filter(|p| p.id != score.subject)
                .cloned()
                .collect(),
            Some(Err(why)) => return Err(Check::Differs(why.clone())),
            None => return Err(Check::Differs(format!("population {sha} was not read"))),
        },
    };
    let windows = outages.windows(score.through_seq);
    let at = ScoreAt {
        as_of_ms: score.as_of_ms,
        horizon_days: score.horizon_days,
        outages: &windows,
        category: None,
        population,
    };
    let scored = match score.method {
        Method::V2 => {
            let inputs =
                scoring::inputs_document(rubric, rows.inputs(state, &score.subject, at, &windows));
            scoring::score(
                rubric,
                inputs,
                score.as_of_ms,
                score.through_seq,
                score.horizon_days,
            )
        }
        Method::V3 => {
            let inputs = match &score.read {
                None => state.score_inputs(rubric, &score.subject, at, &mut |seqs| {
                    rows_of_entries(store, rubric, seqs)
                }),
                Some(read) => {
                    let differs =
                        |e: StoreError| Check::Differs(format!("the vantages' logs: {e}"));
                    subject_state::fold_others(store, rubric, &score.subject, state, &read.through)
                        .map_err(differs)?;
                    let others = logs.others.windows(store, &read.through).map_err(differs)?;
                    let own = store.vantage_name().unwrap_or_default();
                    let cloaking = crate::checks::cloaking::CloakingContext::default();
                    let vantages = subject_state::Vantages {
                        own,
                        outages: &others,
                        read,
                        cloaking: &cloaking,
                    };
                    state.score_inputs_vantages(rubric, &score.subject, at, vantages, &mut |refs| {
                        subject_state::entries_of(store, rubric, own, refs)
                    })
                }
            }
            .map_err(|e| Check::Differs(format!("its inputs do not rebuild: {e}")))?;
            scoring::score_inputs(
                rubric,
                &inputs,
                score.as_of_ms,
                score.through_seq,
                score.horizon_days,
            )
        }
    }
    .map_err(|e| Check::Differs(format!("does not score: {e}")))?;
    if scored.record.inputs_sha256 != score.inputs_sha256 {
        return Err(Check::Differs(format!(
            "inputs rebuild to {}, the score read {}",
            scored.record.inputs_sha256, score.inputs_sha256
        )));
    }
    if scored.record.document_sha256 != score.document_sha256 {
        return Err(Check::Differs(format!(
            "the document recomputes to {}, {} was published",
            scored.record.document_sha256, score.document_sha256
        )));
    }
    Ok(())
}
