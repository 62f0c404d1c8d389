//! From a probe run's results to the scorer's history entries and inputs document (`rubrics/README.md`
//! documents the format). Pure: the run's time is in the results.
//!
//! Per-sample checks give one entry per sample (R1, R2 from their samples; R3 one timed `pass` or
//! never-completed `fail` per sample, the history's curve convention); every other check gives one
//! entry per run. `unmeasured` results are kept: they record nothing against the subject, and the
//! document shows that they were looked for. Entries are the scorer's own typed `HistoryEntry`, so
//! what is written here is what `score` reads.

use std::sync::Arc;

use serde_json::Value;

use crate::canonical::{canonical_sha256, canonical_sha256_of};
use crate::evidence::run::RunRecord;
use crate::evidence::usd::Usd;
use crate::evidence::{CheckId, CheckResult, Outcome};
use crate::rubric::{Kind, Rubric};
use crate::score::input::{
    HistoryEntry, InputsDocument, PriceUsd, Provenance, RevisionDocument, SubjectDocument,
};

/// SHA-256 (hex) of a receipt's RFC 8785 form: how the history, and everything citing a receipt,
/// names it.
pub fn receipt_digest(receipt: &crate::evidence::Receipt) -> String {
    canonical_sha256_of(receipt).unwrap_or_else(|_| canonical_sha256(&Value::Null))
}

/// The history entries of one run, numbered `first_seq`, `first_seq + 1`, ... in the order the
/// run produced them (checks in rubric order, samples in the order they were taken): entries of
/// one run share its time, and `seq` is what orders them. `paid_run` is true when the run made a
/// paid call (its paid entries then prove a paid call happened, which the verdict needs).
pub fn run_entries(
    results: &[CheckResult],
    rubric: &Rubric,
    paid_run: bool,
    revision: &str,
    first_seq: u64,
) -> Vec<HistoryEntry> {
    run_entries_digested(
        results,
        &receipt_digests(results),
        rubric,
        paid_run,
        revision,
        first_seq,
    )
}

/// Each result's [`receipt_digest`], in order.
pub fn receipt_digests(results: &[CheckResult]) -> Vec<String> {
    results.iter().map(|r| receipt_digest(&r.receipt)).collect()
}

/// [`run_entries`] with each result's receipt digest given (`receipts[i]` is `results[i]`'s, as
/// `ledger::stored::results_digests` makes them beside the results' own digest).
pub fn run_entries_digested(
    results: &[CheckResult],
    receipts: &[String],
    rubric: &Rubric,
    paid_run: bool,
    revision: &str,
    first_seq: u64,
) -> Vec<HistoryEntry> {
    let mut entries: Vec<HistoryEntry> = Vec::new();
    for (r, receipt) in results.iter().zip(receipts) {
        let Some(check) = rubric.check(r.id) else {
            continue;
        };
        let kind = match (check.kind, paid_run) {
            (Kind::Paid, true) => Kind::Paid,
            _ => Kind::Free,
        };
        let mut push = |outcome: Outcome, value: Option<f64>| {
            entries.push(HistoryEntry {
                seq: first_seq + entries.len() as u64,
                check: r.id.as_str().to_string(),
                outcome,
                at: r.receipt.at.clone(),
                kind,
                revision: Some(revision.to_string()),
                value,
                receipt: receipt.clone(),
                note: None,
            })
        };
        // Free checks keep their detail at the top of the receipt; paid ones under `check`.
        let detail = &r.receipt.detail;
        let samples = detail
            .get("samples")
            .or_else(|| detail.pointer("/check/samples"))
            .and_then(Value::as_array);
        // A sample's outcome as our checks write it; one that does not read as an outcome says
        // nothing about the subject: unmeasured.
        let sample_outcome = |s: &Value| {
            s.get("outcome")
                .and_then(Value::as_str)
                .map(|o| o.parse::<Outcome>().unwrap_or(Outcome::Unmeasured))
        };
        match (r.id, samples) {
            (CheckId::R1 | CheckId::R2, Some(samples)) => {
                for s in samples {
                    if let Some(o) = sample_outcome(s) {
                        push(o, None);
                    }
                }
            }
            (CheckId::R3 | CheckId::R7, Some(samples)) => {
                for s in samples {
                    match (sample_outcome(s), s.get("ms").and_then(Value::as_f64)) {
                        (Some(Outcome::Pass), Some(ms)) => push(Outcome::Pass, Some(ms)),
                        (Some(Outcome::Fail), _) => push(Outcome::Fail, None),
                        _ => {}
                    }
                }
            }
            _ => push(r.outcome, r.value.filter(|_| r.id == CheckId::R5)),
        }
    }
    entries
}

/// The subject as the scorer needs it.
#[derive(Debug, Clone)]
pub struct SubjectFacts {
    pub id: String,
    pub url: String,
    pub category: String,
    pub price_usd: Usd,
    /// `(id, RFC 3339 time)` of each revision, oldest first.
    pub revisions: Vec<(String, String)>,
}

/// A complete inputs document for `score`.
pub fn inputs_document(
    rubric: &Rubric,
    as_of: &str,
    subject: &SubjectFacts,
    history: Vec<HistoryEntry>,
    provenance: Provenance,
) -> InputsDocument {
    InputsDocument {
        rubric_sha256: rubric.sha256().to_string(),
        rubric_version: rubric.version.clone(),
        as_of: as_of.to_string(),
        subject: SubjectDocument {
            id: subject.id.clone(),
            url: subject.url.clone(),
            category: subject.category.clone(),
            price_usd: PriceUsd::Decimal(subject.price_usd.price_text()),
            revisions: subject
                .revisions
                .iter()
                .map(|(id, at)| RevisionDocument {
                    id: id.clone(),
                    at: at.clone(),
                    note: None,
                })
                .collect(),
        },
        history,
        population: Vec::new(),
        provenance,
        quorum: None,
    }
}

/// The price the run's first usable 402 quotes for its first entry, read as the daemon reads a
/// declaration's ([`crate::evidence::declared::Declared::price_usd`]). `None` when there was no
/// quote.
pub fn quoted_price_usd(obs: &crate::observation::FreeObservation) -> Option<Usd> {
    crate::checks::history::declared(obs, 0)?.price_usd()
}

// ---------------------------------------------------------------- a ledger entry's rows

/// History entries of one ledger entry are numbered `seq * SEQ_STRIDE + i`: the ledger's order,
/// and room for every entry of a run.
pub const SEQ_STRIDE: u64 = 1024;

/// A run's history entries numbered from 0 (made once: a row's seq is its ledger entry's seq
/// times [`SEQ_STRIDE`] plus its own, [`rows_at`]), for its index and its subject's state.
pub fn run_rows(rubric: &Rubric, record: &RunRecord) -> Arc<[HistoryEntry]> {
    run_rows_digested(rubric, record, &receipt_digests(&record.results))
}

/// [`run_rows`] with the receipts' digests given (`ledger::stored::results_digests`).
pub fn run_rows_digested(
    rubric: &Rubric,
    record: &RunRecord,
    receipts: &[String],
) -> Arc<[HistoryEntry]> {
    run_entries_digested(
        &record.results,
        receipts,
        rubric,
        record.payment_sent(),
        &record.revision,
        0,
    )
    .into()
}

/// Rows numbered from 0 ([`run_rows`]) as the rows of ledger entry `seq`.
pub fn rows_at(rows: &[HistoryEntry], seq: u64) -> impl Iterator<Item = HistoryEntry> + '_ {
    rows.iter().map(move |row| HistoryEntry {
        seq: row.seq + seq * SEQ_STRIDE,
        ..row.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Receipt;
    use serde_json::json;

    fn result(id: &str, outcome: Outcome, detail: Value) -> CheckResult {
        CheckResult {
            id: id.parse().expect("a check id"),
            outcome,
            evidence: String::new(),
            value: None,
            receipt: Receipt {
                vantage: "v".into(),
                at: "2026-11-29T00:00:00Z".into(),
                detail,
                ..Receipt::default()
            },
        }
    }

    #[test]
    fn per_sample_checks_expand_and_others_give_one_entry() {
        let rubric = Rubric::embedded_default();
        let results = vec![
            result(
                "R1",
                Outcome::Fail,
                json!({"samples": [{"outcome": "pass"}, {"outcome": "fail"}, {"outcome": "unmeasured"}]}),
            ),
            result(
                "R3",
                Outcome::Pass,
                json!({"samples": [{"outcome": "pass", "ms": 12.0}, {"outcome": "fail"}]}),
            ),
            // Paid checks keep their own detail under `check`.
            result(
                "R7",
                Outcome::Pass,
                json!({"check": {"samples": [{"outcome": "pass", "ms": 40.0}]}}),
            ),
            result("C1", Outcome::Pass, Value::Null),
            result("H2", Outcome::Unmeasured, Value::Null),
            result("R4", Outcome::Pass, Value::Null),
        ];
        let entries = run_entries(&results, &rubric, true, "r0", 100);
        let summary: Vec<(String, Outcome, Option<f64>, Kind)> = entries
            .iter()
            .map(|e| (e.check.clone(), e.outcome, e.value, e.kind))
            .collect();
        let s = |c: &str, o: &str, v: Option<f64>, k: &str| {
            let kind = if k == "paid" { Kind::Paid } else { Kind::Free };
            (c.to_string(), o.parse::<Outcome>().unwrap(), v, kind)
        };
        assert_eq!(
            summary,
            vec![
                s("R1", "pass", None, "free"),
                s("R1", "fail", None, "free"),
                s("R1", "unmeasured", None, "free"),
                s("R3", "pass", Some(12.0), "free"),
                s("R3", "fail", None, "free"),
                s("R7", "pass", Some(40.0), "paid"),
                s("C1", "pass", None, "free"),
                s("H2", "unmeasured", None, "free"),
                s("R4", "pass", None, "paid"),
            ]
        );
        assert!(
            entries
                .iter()
                .all(|e| e.receipt.len() == 64 && e.revision.as_deref() == Some("r0"))
        );
        // seq in run order from the first given.
        let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (100..109).collect::<Vec<u64>>());
    }

    #[test]
    fn a_run_makes_an_inputs_document_the_scorer_reads() {
        let rubric = Rubric::embedded_default();
        let results = vec![
            result(
                "R1",
                Outcome::Fail,
                json!({"samples": [{"outcome": "pass"}, {"outcome": "fail"}]}),
            ),
            result("C1", Outcome::Pass, Value::Null),
        ];
        let subject = SubjectFacts {
            id: "s".into(),
            url: "https://s.example/x".into(),
            category: "c".into(),
            price_usd: Usd::of_micros(10_000).unwrap(),
            revisions: vec![("r0".into(), "2026-11-29T00:00:00Z".into())],
        };
        let doc = inputs_document(
            &rubric,
            "2026-11-29T00:00:00Z",
            &subject,
            run_entries(&results, &rubric, false, "r0", 0),
            Provenance::TestHarness,
        );
        let text = serde_json::to_value(&doc).unwrap();
        assert_eq!(text["history"][0]["seq"], 0);
        assert_eq!(text["history"][2]["check"], "C1");
        assert_eq!(text["provenance"], "test_harness");
        assert_eq!(text["subject"]["price_usd"], "0.010000");
        let inputs = crate::score::input::Inputs::from_document(doc).unwrap();
        assert_eq!(inputs.history.len(), 3);
        // Both R1 samples share the run's time: seq keeps the fail after the pass.
        assert_eq!(inputs.history[1].outcome, Outcome::Fail);
    }

    /// The daemon's rows, named by the digests of its one rendering of the results, are the rows
    /// every reader (`recompute`, the folded state) makes from the results alone.
    #[test]
    fn rows_named_from_one_rendering_are_the_rows_made_from_the_results() {
        let rubric = Rubric::embedded_default();
        let mut results = vec![
            result(
                "R1",
                Outcome::Fail,
                json!({"samples": [{"outcome": "pass"}, {"outcome": "fail"}]}),
            ),
            result("C1", Outcome::Pass, Value::Null),
            result("C2", Outcome::Pass, json!({"rule": "a"})),
            result("H2", Outcome::Unmeasured, Value::Null),
            result("R4", Outcome::Unmeasured, Value::Null),
        ];
        results[1]
            .receipt
            .sha256
            .insert("402.body".into(), "ab".repeat(32));
        results[4].value = Some(12.5);
        let digests = crate::ledger::stored::results_digests(&results);
        assert_eq!(digests.receipts, receipt_digests(&results));
        for paid_run in [false, true] {
            assert_eq!(
                run_entries_digested(&results, &digests.receipts, &rubric, paid_run, "r0", 7),
                run_entries(&results, &rubric, paid_run, "r0", 7)
            );
        }
    }

    #[test]
    fn paid_entries_count_as_a_paid_call_only_when_a_payment_was_sent() {
        let rubric = Rubric::embedded_default();
        let results = vec![result("R4", Outcome::Unmeasured, Value::Null)];
        assert_eq!(
            run_entries(&results, &rubric, false, "r0", 0)[0].kind,
            Kind::Free
        );
        assert_eq!(
            run_entries(&results, &rubric, true, "r0", 0)[0].kind,
            Kind::Paid
        );
    }
}
