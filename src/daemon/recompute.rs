//! `recompute --ledger`: re-derives every score the daemon published from the ledger alone, in one
//! pass in ledger order, and compares each with what was published: the inputs digest, and the
//! stored document byte for byte. The inputs are rebuilt with the same functions the daemon uses
//! (history rows of each run and refund, revisions, our outage windows, the value population the
//! score named), from the entries up to the one the score says it read.

use std::collections::{BTreeMap, BTreeSet};

use crate::checks::history::declared;
use crate::evidence::run::Provenance;
use crate::ledger::record::{
    OutageRecord, Record, RecordKind, RevisionRecord, ScoreRecord, SubjectChange,
};
use crate::rubric::Rubric;
use crate::score::input::{HistoryEntry, PeerDocument};
use crate::store::{Store, StoreError};

use super::pipeline::{SEQ_STRIDE, history_rows};
use super::scoring::{self, SubjectInputs};

/// Entries read per page of the pass.
const PAGE: usize = 512;

/// What one subject's inputs are built from, as the pass goes.
#[derive(Debug, Default)]
struct SubjectState {
    history: Vec<HistoryEntry>,
    revisions: Vec<RevisionRecord>,
    category: Option<String>,
    price_usd: Option<crate::evidence::usd::Usd>,
    provenance: Option<Provenance>,
}

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
    let mut subjects: BTreeMap<String, SubjectState> = BTreeMap::new();
    // With their seq: a score reads our outages up to the entry it says it read.
    let mut outages: Vec<(u64, OutageRecord)> = Vec::new();
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
            match entry.record {
                Record::Run(run) => {
                    let state = subjects.entry(run.subject.clone()).or_default();
                    let rubric = rubric_for(rubrics, None);
                    state.history.extend(history_rows(rubric, &run)(seq));
                    if let Some(price) =
                        declared(&run.free, run.started_at_ms).and_then(|d| d.price_usd())
                    {
                        state.price_usd = Some(price);
                    }
                    state.provenance = Some(run.provenance);
                }
                Record::Refund(refund) => {
                    let state = subjects.entry(refund.subject.clone()).or_default();
                    let rubric = rubric_for(rubrics, None);
                    state.history.extend(crate::history::run_entries(
                        std::slice::from_ref(&refund.result),
                        rubric,
                        true,
                        &refund.revision,
                        seq * SEQ_STRIDE,
                    ));
                }
                Record::Revision(r) => {
                    subjects
                        .entry(r.subject.clone())
                        .or_default()
                        .revisions
                        .push(r);
                }
                Record::Subject(s) => {
                    if let SubjectChange::Added { category, .. } = s.change {
                        subjects.entry(s.subject.clone()).or_default().category = Some(category);
                    }
                }
                Record::Outage(o) => outages.push((seq, o)),
                Record::Score(score) => {
                    let outcome = check_score(&populations, rubrics, &subjects, &outages, &score);
                    report.scores += 1;
                    match outcome {
                        Ok(()) => report.identical += 1,
                        Err(Check::Differs(why)) => report.mismatches.push(Mismatch {
                            seq,
                            subject: score.subject.clone(),
                            why,
                        }),
                    }
                }
                Record::Catalogue(_)
                | Record::Control(_)
                | Record::Correction(_)
                | Record::Note(_) => {}
            }
        }
    }
    // The history rows the daemon scores from are derived from the same entries: each subject's
    // must be exactly what the pass rebuilt (an edited row would skew every later score).
    for (subject, state) in &subjects {
        let stored = store.history(subject)?;
        if let Some((seq, why)) = history_differs(&state.history, &stored) {
            report.derived.push(Mismatch {
                seq,
                subject: subject.clone(),
                why,
            });
        }
    }
    Ok(report)
}

/// Where a subject's stored history rows first differ from those rebuilt from its entries: the
/// entry the row belongs to, and how.
fn history_differs(rebuilt: &[HistoryEntry], stored: &[Vec<u8>]) -> Option<(u64, String)> {
    let entry_of = |i: usize| {
        rebuilt.get(i).map(|h| h.seq).or_else(|| {
            stored
                .get(i)
                .and_then(|row| serde_json::from_slice::<HistoryEntry>(row).ok())
                .map(|h| h.seq)
        })
    };
    let count = rebuilt.len().max(stored.len());
    let first = (0..count).find(|&i| {
        let ours = rebuilt.get(i).and_then(|h| serde_json::to_vec(h).ok());
        ours.as_deref() != stored.get(i).map(Vec::as_slice)
    })?;
    let seq = entry_of(first).map_or(0, |s| s / SEQ_STRIDE);
    Some((
        seq,
        format!(
            "history row {first} (of {} stored, {} derived from the entries) differs from what \
             the entry derives",
            stored.len(),
            rebuilt.len()
        ),
    ))
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
    subjects: &BTreeMap<String, SubjectState>,
    outages: &[(u64, OutageRecord)],
    score: &ScoreRecord,
) -> Result<(), Check> {
    let Some(rubric) = rubrics.iter().find(|r| r.sha256() == score.rubric_sha256) else {
        return Err(Check::Differs(format!(
            "scored under rubric {}, which was not given",
            score.rubric_sha256
        )));
    };
    let empty = SubjectState::default();
    let state = subjects.get(&score.subject).unwrap_or(&empty);
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
    let read: Vec<OutageRecord> = outages
        .iter()
        .filter(|(seq, _)| *seq <= score.through_seq)
        .map(|(_, o)| o.clone())
        .collect();
    let history = scoring::history_for(
        state.history.clone(),
        &scoring::outage_windows(&read),
        score.as_of_ms,
        score.horizon_days,
    );
    let inputs = scoring::inputs_document(
        rubric,
        SubjectInputs {
            url: score.subject.clone(),
            category: state
                .category
                .clone()
                .unwrap_or_else(|| "uncategorised".into()),
            price_usd: state.price_usd.unwrap_or_default(),
            revisions: scoring::revisions_for(&state.revisions),
            history,
            population,
            as_of_ms: score.as_of_ms,
            provenance: state.provenance.unwrap_or(Provenance::Live),
        },
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
