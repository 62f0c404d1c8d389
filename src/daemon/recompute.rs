//! `recompute --ledger`: re-derives every score the daemon published from the ledger alone, in one
//! pass in ledger order, and compares each with what was published: the inputs digest, and the
//! stored document byte for byte. The inputs are rebuilt with the same functions the daemon uses
//! (history rows of each run and refund, revisions, our outage windows, the value population the
//! score named), from the entries up to the one the score says it read.

use std::collections::{BTreeMap, BTreeSet};

use crate::ledger::record::{Record, RecordKind, ScoreRecord};
use crate::rubric::Rubric;
use crate::score::input::{HistoryEntry, PeerDocument};
use crate::store::{Store, StoreError};

use super::scoring;
use super::subject_state::{FOLDED_KINDS, OutageFold, ScoreAt, StateRow, SubjectState};

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
    let populations = populations_named(store)?;
    // Each subject's state folded with the daemon's own function, and our outages once.
    let mut subjects: BTreeMap<String, SubjectState> = BTreeMap::new();
    let mut outages = OutageFold::default();
    // The states the daemon kept, compared when the pass reaches the entry each reflects.
    let mut kept: BTreeMap<String, StateRow> = BTreeMap::new();
    let mut report = LedgerRecompute::default();
    let mut after = 0;
    loop {
        let page = store.entries_page(after, PAGE)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
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
                    let state = subjects.entry(score.subject.clone()).or_insert_with(|| {
                        if let Ok(Some(row)) = store.subject_state(&score.subject) {
                            kept.insert(score.subject.clone(), row);
                        }
                        SubjectState::new()
                    });
                    let outcome = check_score(&populations, rubrics, state, &outages, score);
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
                        let before = state.rows.len();
                        state.fold(rubric, seq, record);
                        // The history rows the daemon scores from are derived from the same
                        // entry: they must be exactly what the fold derived (an edited row
                        // would skew every later score).
                        if matches!(record, Record::Run(_) | Record::Refund(_)) {
                            let stored = store.history_range(subject, seq, seq + 1)?;
                            if let Some(why) = history_differs(&state.rows[before..], &stored) {
                                report.derived.push(Mismatch {
                                    seq,
                                    subject: subject.to_string(),
                                    why,
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(report)
}

/// How an entry's stored history rows differ from those derived from it, if they do.
fn history_differs(rebuilt: &[HistoryEntry], stored: &[Vec<u8>]) -> Option<String> {
    let count = rebuilt.len().max(stored.len());
    let first = (0..count).find(|&i| {
        let ours = rebuilt.get(i).and_then(|h| serde_json::to_vec(h).ok());
        ours.as_deref() != stored.get(i).map(Vec::as_slice)
    })?;
    Some(format!(
        "history row {first} (of {} stored, {} derived from the entry) differs from what the \
         entry derives",
        stored.len(),
        rebuilt.len()
    ))
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
    ours.rows.clear();
    ours.window_from = kept.window_from;
    ours.horizon_days = kept.horizon_days;
    (ours != kept).then(|| {
        format!(
            "the subject's kept state (through entry {}) differs from the ledger's fold",
            kept.through_seq
        )
    })
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

fn check_score(
    populations: &Populations,
    rubrics: &[Rubric],
    state: &SubjectState,
    outages: &OutageFold,
    score: &ScoreRecord,
) -> Result<(), Check> {
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
    let inputs = scoring::inputs_document(
        rubric,
        state.inputs(
            &score.subject,
            ScoreAt {
                as_of_ms: score.as_of_ms,
                horizon_days: score.horizon_days,
                outages: &windows,
                category: None,
                population,
            },
        ),
    );
    let scored = scoring::score(
        rubric,
        inputs,
        score.as_of_ms,
        score.through_seq,
        score.horizon_days,
    )
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
