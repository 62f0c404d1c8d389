//! Scores from history: a subject's inputs document built from its ledger history (history rows,
//! revisions, our outages, the value population), scored as of a time. Pure apart from what the
//! caller reads from the store and passes in; `recompute --ledger` uses the same functions on
//! the ledger alone.

use super::schedule::ScoreSummary;
use crate::checks::history::{OutageOf, OutageWindow, excused};
use crate::clock::{ms_of, rfc3339_ms};
use crate::evidence::Outcome;
use crate::evidence::run::Provenance;
use crate::evidence::usd::Usd;
use crate::ledger::record::{OutageRecord, RevisionRecord, ScoreRecord};
use crate::rubric::{Kind, Rubric};
use crate::score::document::ScoreDocument;
use crate::score::headline::ScoreHeadline;
use crate::score::input::{
    HistoryEntry, Inputs, InputsDocument, PeerDocument, PriceUsd, RevisionDocument, SubjectDocument,
};
use crate::score::montecarlo::Sampler;

/// Our outage windows from the ledger's outage records, in order: a window opened by the control
/// (or by our RPC) stays open until the same part closes it; declared windows stand as declared.
pub fn outage_windows(records: &[OutageRecord]) -> Vec<OutageWindow> {
    let mut windows = Vec::new();
    // At most one open window per part: the control and the RPC open and close on their own.
    let mut open: Vec<(OutageOf, i64)> = Vec::new();
    for r in records {
        match r {
            OutageRecord::Opened { from_ms, of, .. } => {
                if !open.iter().any(|(o, _)| o == of) {
                    open.push((*of, *from_ms));
                }
            }
            OutageRecord::Closed { from_ms, to_ms, of } => {
                let opened = open
                    .iter()
                    .position(|(o, _)| o == of)
                    .map(|i| open.remove(i).1);
                windows.push(OutageWindow {
                    from_ms: opened.unwrap_or(*from_ms),
                    to_ms: Some(*to_ms),
                    of: *of,
                });
            }
            OutageRecord::Declared { from_ms, to_ms, .. } => windows.push(OutageWindow {
                from_ms: *from_ms,
                to_ms: Some(*to_ms),
                of: OutageOf::Vantage,
            }),
        }
    }
    for (of, from_ms) in open {
        windows.push(OutageWindow {
            from_ms,
            to_ms: None,
            of,
        });
    }
    windows
}

/// The history the score reads: entries within the horizon and not after `as_of`, each free pass
/// or fail inside one of our outage windows excused (recorded as `unmeasured`, with a note that
/// says why), in ledger order.
pub fn history_for(
    rows: Vec<HistoryEntry>,
    outages: &[OutageWindow],
    as_of_ms: i64,
    horizon_days: u64,
) -> Vec<HistoryEntry> {
    let timed = rows.into_iter().map(|e| (ms_of(&e.at), e));
    history_for_timed(timed, outages, as_of_ms, horizon_days)
}

/// [`history_for`] over rows whose time the caller has already read (`None`: unreadable, left
/// out), so that a rescore parses each row's time once.
pub fn history_for_timed(
    rows: impl Iterator<Item = (Option<i64>, HistoryEntry)>,
    outages: &[OutageWindow],
    as_of_ms: i64,
    horizon_days: u64,
) -> Vec<HistoryEntry> {
    let from = as_of_ms.saturating_sub(horizon_days as i64 * 86_400_000);
    rows.filter_map(|(at, mut e)| {
        let at = at?;
        if at < from || at > as_of_ms {
            return None;
        }
        if e.kind == Kind::Free
            && let Some(w) = excused(&e.check, e.outcome, at, outages)
        {
            let what = match w.of {
                OutageOf::Vantage => "our vantage",
                OutageOf::Rpc => "our RPC",
            };
            e.note = Some(format!(
                "excused: {what} was out from {} to {} ({} kept)",
                rfc3339_ms(w.from_ms),
                w.to_ms.map_or("now".to_string(), rfc3339_ms),
                e.outcome
            ));
            e.outcome = Outcome::Unmeasured;
        }
        Some(e)
    })
    .collect()
}

/// The subject's revisions as the scorer reads them, oldest first.
pub fn revisions_for(records: &[RevisionRecord]) -> Vec<RevisionDocument> {
    records
        .iter()
        .map(|r| RevisionDocument {
            id: r.id.clone(),
            at: rfc3339_ms(r.at_ms),
            note: (!r.changed.is_empty()).then(|| format!("changed: {}", r.changed.join(", "))),
        })
        .collect()
}

/// Peers for value: the other subjects of the same category with a score.
pub fn population_for(
    subject: &str,
    category: &str,
    peers: &[(String, ScoreSummary)],
) -> Vec<PeerDocument> {
    let mut population: Vec<PeerDocument> = peers
        .iter()
        .filter(|(url, s)| url != subject && s.category == category)
        .map(|(url, s)| PeerDocument {
            id: url.clone(),
            category: s.category.clone(),
            price_usd: PriceUsd::Decimal(s.price_usd.price_text()),
            r4_pass_rate: (s.r4 * 10_000.0).round() / 10_000.0,
            r5_pass_rate: (s.r5 * 10_000.0).round() / 10_000.0,
        })
        .collect();
    population.sort_by(|a, b| a.id.cmp(&b.id));
    population
}

/// Everything a subject's inputs document is built from.
#[derive(Debug, Clone)]
pub struct SubjectInputs {
    pub url: String,
    pub category: String,
    pub price_usd: Usd,
    pub revisions: Vec<RevisionDocument>,
    pub history: Vec<HistoryEntry>,
    pub population: Vec<PeerDocument>,
    pub as_of_ms: i64,
    pub provenance: Provenance,
}

pub fn inputs_document(rubric: &Rubric, s: SubjectInputs) -> InputsDocument {
    InputsDocument {
        rubric_sha256: rubric.sha256().to_string(),
        rubric_version: rubric.version.clone(),
        as_of: rfc3339_ms(s.as_of_ms),
        subject: SubjectDocument {
            id: s.url.clone(),
            url: s.url,
            category: s.category,
            price_usd: PriceUsd::Decimal(s.price_usd.price_text()),
            revisions: s.revisions,
        },
        history: s.history,
        population: s.population,
        provenance: s.provenance,
        quorum: None,
    }
}

/// A scored subject: the document, its ledger form (the document without its inputs, which the
/// ledger rebuilds) and the ledger record that publishes it.
#[derive(Debug, Clone)]
pub struct Scored {
    pub document: ScoreDocument,
    pub stored: Vec<u8>,
    pub record: ScoreRecord,
}

/// Why a subject could not be scored (its history is kept; the error is reported).
#[derive(Debug, thiserror::Error)]
pub enum ScoringError {
    #[error("inputs: {0}")]
    Inputs(#[from] crate::score::input::InputError),
    #[error("score: {0}")]
    Score(#[from] crate::score::ScoreError),
    #[error("document: {0}")]
    Canonical(#[from] crate::canonical::CanonicalError),
}

/// Scores an inputs document and builds its ledger form. `through_seq` is the last ledger entry
/// the inputs read.
pub fn score(
    rubric: &Rubric,
    inputs: InputsDocument,
    as_of_ms: i64,
    through_seq: u64,
    horizon_days: u64,
) -> Result<Scored, ScoringError> {
    let inputs = Inputs::from_document_unembedded(inputs)?;
    score_inputs(rubric, &inputs, as_of_ms, through_seq, horizon_days)
}

/// [`score`] of inputs already built (a `/3` score's, from day summaries).
pub fn score_inputs(
    rubric: &Rubric,
    inputs: &Inputs,
    as_of_ms: i64,
    through_seq: u64,
    horizon_days: u64,
) -> Result<Scored, ScoringError> {
    let document = crate::score::score(rubric, inputs, Sampler::InverseCdfTable)?;
    let stored = stored_form(&document)?;
    let record = ScoreRecord {
        subject: document.subject.url.clone(),
        as_of_ms,
        through_seq,
        horizon_days,
        rubric_sha256: rubric.sha256().to_string(),
        inputs_sha256: document.inputs_sha256.clone(),
        document_sha256: crate::evidence::sha256_hex(&stored),
        score: document.score.as_f64(),
        capped_score: document.capped_score.as_f64(),
        band: [document.band.low, document.band.high],
        grade: document
            .grade
            .clone()
            .or_else(|| document.provisional_grade.clone()),
        verdict: document.verdict.verdict,
        population_sha256: None,
        method: inputs.method,
        read: None,
    };
    Ok(Scored {
        document,
        stored,
        record,
    })
}

/// The score document as the ledger keeps it: RFC 8785 bytes without `inputs` (the ledger holds
/// every input; `inputs_sha256` names them).
pub fn stored_form(document: &ScoreDocument) -> Result<Vec<u8>, crate::canonical::CanonicalError> {
    // The inputs are left out as the document is written (never serialised): they are the whole
    // history inside the horizon, and copying them only to drop them made every rescore's cost
    // grow with the subject's age.
    crate::canonical::canonical_bytes_without(document, &["inputs"])
}

/// What the scheduler keeps of a score, read from its headline (the score just made, or the
/// latest one kept, read at the start).
pub fn summary_of(
    rubric: &Rubric,
    headline: &ScoreHeadline,
    price_usd: Usd,
    category: &str,
) -> ScoreSummary {
    ScoreSummary {
        verified: headline.verified,
        verdict: headline.verdict,
        probes: headline.probes,
        probes_needed: headline.probes_needed,
        span_days: headline.probe_span_days,
        span_days_needed: headline.probe_span_days_needed,
        paid_days_ago: headline.last_paid_call_days_ago,
        paid_within_days: headline.paid_within_days,
        band: (headline.band_low, headline.band_high),
        capped_score: headline.capped_score.as_f64(),
        grade_edges: rubric
            .grades
            .iter()
            .map(|g| g.min)
            .filter(|m| *m > 0.0)
            .collect(),
        r4: headline.r4.map_or(0.0, |v| v / 100.0),
        r5: headline.r5.map_or(0.0, |v| v / 100.0),
        price_usd,
        category: category.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_form_reads_back_as_the_document_without_its_inputs() {
        let golden = include_str!("../../tests/data/golden/01-healthy-established.json");
        let document = ScoreDocument::from_slice(golden.as_bytes()).unwrap();
        let stored = stored_form(&document).unwrap();
        assert!(!String::from_utf8_lossy(&stored).contains("\"inputs\""));
        // The bytes of the document's JSON value with its inputs removed (how it was made before
        // it was written straight from the document).
        let mut value = serde_json::to_value(&document).unwrap();
        value.as_object_mut().unwrap().remove("inputs");
        assert_eq!(stored, crate::canonical::to_canonical_bytes(&value));
        let read = ScoreDocument::from_slice(&stored).unwrap();
        assert!(read.inputs.is_null());
        let mut expected = document;
        expected.inputs = std::sync::Arc::new(serde_json::Value::Null);
        assert_eq!(read, expected);
        assert_eq!(stored_form(&read).unwrap(), stored, "byte for byte");
    }

    fn entry(seq: u64, at_ms: i64, outcome: Outcome, kind: Kind) -> HistoryEntry {
        HistoryEntry {
            seq,
            check: "R1".into(),
            outcome,
            at: rfc3339_ms(at_ms),
            kind,
            revision: None,
            value: None,
            receipt: "0".repeat(64),
            note: None,
        }
    }

    #[test]
    fn the_control_and_the_rpc_open_and_close_their_own_windows() {
        let opened = |from_ms, of| OutageRecord::Opened {
            from_ms,
            cause: "x".into(),
            of,
        };
        let closed = |from_ms, to_ms, of| OutageRecord::Closed { from_ms, to_ms, of };
        // The control closing (at 3 000) leaves the RPC's window open; the RPC closes its own.
        let windows = outage_windows(&[
            opened(1_000, OutageOf::Vantage),
            opened(2_000, OutageOf::Rpc),
            closed(1_000, 3_000, OutageOf::Vantage),
            closed(2_000, 4_000, OutageOf::Rpc),
            opened(5_000, OutageOf::Rpc),
        ]);
        let w = |from_ms, to_ms, of| OutageWindow { from_ms, to_ms, of };
        assert_eq!(
            windows,
            vec![
                w(1_000, Some(3_000), OutageOf::Vantage),
                w(2_000, Some(4_000), OutageOf::Rpc),
                w(5_000, None, OutageOf::Rpc),
            ]
        );
        // Inside the RPC's window only, C3 is excused and R1 is not.
        let mut rows = vec![
            entry(1, 3_500, Outcome::Fail, Kind::Free),
            entry(2, 3_500, Outcome::Fail, Kind::Free),
        ];
        rows[0].check = "C3".into();
        let kept = history_for(rows, &windows, 10_000, 180);
        assert_eq!(kept[0].outcome, Outcome::Unmeasured);
        assert!(kept[0].note.as_deref().unwrap().contains("our RPC was out"));
        assert_eq!(kept[1].outcome, Outcome::Fail);
    }

    #[test]
    fn outages_excuse_free_outcomes_inside_them_and_nothing_else() {
        let windows = outage_windows(&[
            OutageRecord::Opened {
                from_ms: 1_000,
                cause: "control failed".into(),
                of: OutageOf::Vantage,
            },
            OutageRecord::Closed {
                from_ms: 1_000,
                to_ms: 2_000,
                of: OutageOf::Vantage,
            },
        ]);
        assert_eq!(
            windows,
            vec![OutageWindow {
                from_ms: 1_000,
                to_ms: Some(2_000),
                of: OutageOf::Vantage,
            }]
        );
        let rows = vec![
            entry(1, 500, Outcome::Fail, Kind::Free),
            entry(2, 1_500, Outcome::Fail, Kind::Free),
            entry(3, 1_500, Outcome::Fail, Kind::Paid),
            entry(4, 2_500, Outcome::Fail, Kind::Free),
        ];
        let kept = history_for(rows, &windows, 10_000, 180);
        let outcomes: Vec<Outcome> = kept.iter().map(|e| e.outcome).collect();
        assert_eq!(
            outcomes,
            vec![
                Outcome::Fail,
                Outcome::Unmeasured,
                Outcome::Fail,
                Outcome::Fail
            ]
        );
        assert!(kept[1].note.as_deref().unwrap().contains("excused"));
        // An open window excuses until now; the horizon and as_of bound the history.
        let open = outage_windows(&[OutageRecord::Opened {
            from_ms: 2_000,
            cause: "x".into(),
            of: OutageOf::Vantage,
        }]);
        assert_eq!(open[0].to_ms, None);
        let rows = vec![
            entry(1, 0, Outcome::Pass, Kind::Free),
            entry(2, 86_400_000 * 200, Outcome::Pass, Kind::Free),
        ];
        assert_eq!(history_for(rows, &[], 86_400_000 * 200, 180).len(), 1);
    }
}
