//! Gates the evidence asks for, pure. The draft rubric gates three of the six ways a paid call
//! fails (overcharge H5, wrong payee H6, charge without delivery H8); a check that sees one of the
//! other three (no 2xx R4, invalid output R5, a second pull H7) only moves the score by its weight,
//! so a subject seen pulling twice can keep an `ok` verdict. This module measures, on the fit
//! period, how often the subject-days on which such a check has failed go on to fail, against what
//! the fitted map predicts for their score, and proposes a gate where the difference is a reason:
//! - candidates: the checks of the label's failure kinds ([`FailureKind::check`]) that the live
//!   rubric has no `fail_weight_gte` gate on;
//! - a rule "fail weight >= t" for t on [`THRESHOLDS`]; the lowest t whose subject-days number at
//!   least [`MIN_ROWS`] from at least [`MIN_SUBJECTS`] subjects, fail at least [`MIN_OBSERVED`] of
//!   the time (more likely than not: what `avoid` means) and fail at least [`MIN_UNDERPREDICTION`]
//!   more often than the map predicts is proposed, with the cap and verdict of the live gates of
//!   the same kind of harm (money taken wrongly: 39; nothing delivered: 59) and `avoid`.
//!
//! The check's fail weight is read from what the score document publishes for every check (its
//! value, the posterior mean `(1 + pass) / (2 + pass + fail)`, and its evidence weight
//! `pass + fail`), so it is the tally's weight, which halves on a revision for `on_revision: half`
//! checks where the scorer's gates read the un-halved one: the proposal's figures are a forecast
//! until the daemon scores under the accepted rubric.

use serde::Serialize;

use super::labels::FailureKind;
use crate::rubric::{CheckId, GateWhen, Rubric, Verdict};
use crate::score::document::CheckDoc;
use crate::score::points::round4;
use crate::score::tally::CheckState;

/// Fail-weight thresholds tried, lowest first.
pub const THRESHOLDS: [f64; 5] = [0.25, 0.5, 1.0, 2.0, 4.0];
/// Subject-days a proposed rule must hold in the fit period.
pub const MIN_ROWS: usize = 30;
/// Distinct subjects among them (one subject's history is an anecdote, not a rule).
pub const MIN_SUBJECTS: usize = 3;
/// Their failure share: more likely than not, which is what `avoid` tells an agent.
pub const MIN_OBSERVED: f64 = 0.5;
/// How much more often they fail than the map predicts for their scores.
pub const MIN_UNDERPREDICTION: f64 = 0.1;

impl FailureKind {
    /// Every kind, in the enum's order.
    pub const ALL: [FailureKind; 6] = [
        FailureKind::NotOk,
        FailureKind::InvalidOutput,
        FailureKind::Overcharged,
        FailureKind::WrongPayee,
        FailureKind::ChargedTwice,
        FailureKind::ChargedWithoutDelivery,
    ];

    /// The rubric check that sees this failure on a paid call.
    pub fn check(self) -> CheckId {
        match self {
            FailureKind::NotOk => CheckId::R4,
            FailureKind::InvalidOutput => CheckId::R5,
            FailureKind::Overcharged => CheckId::H5,
            FailureKind::WrongPayee => CheckId::H6,
            FailureKind::ChargedTwice => CheckId::H7,
            FailureKind::ChargedWithoutDelivery => CheckId::H8,
        }
    }

    /// The flag a gate on it raises (the draft's names where it has the gate).
    pub fn flag(self) -> &'static str {
        match self {
            FailureKind::NotOk => "paid_call_fails",
            FailureKind::InvalidOutput => "invalid_output",
            FailureKind::Overcharged => "overcharge",
            FailureKind::WrongPayee => "wrong_payee",
            FailureKind::ChargedTwice => "charged_twice",
            FailureKind::ChargedWithoutDelivery => "charged_without_delivery",
        }
    }

    /// The cap of a gate on it: the draft's caps for the same harm (money taken wrongly is capped
    /// at 39 like an overcharge; nothing usable delivered at 59 like a charge without delivery).
    pub fn cap(self) -> f64 {
        match self {
            FailureKind::Overcharged | FailureKind::WrongPayee | FailureKind::ChargedTwice => 39.0,
            FailureKind::NotOk
            | FailureKind::InvalidOutput
            | FailureKind::ChargedWithoutDelivery => 59.0,
        }
    }
}

/// A check the recalibration may propose a gate on: its column in the table and its kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub check: usize,
    pub kind: FailureKind,
}

/// The candidates under `live`: checks of a failure kind with no `fail_weight_gte` gate.
pub fn candidates(live: &Rubric) -> Vec<Candidate> {
    FailureKind::ALL
        .iter()
        .filter(|k| {
            !live
                .gates
                .iter()
                .any(|g| g.check == k.check() && g.when == GateWhen::FailWeightGte)
        })
        .filter_map(|&kind| {
            let check = live.checks.iter().position(|c| c.id == kind.check())?;
            // A check that never counts (weight 0 and no gate) is the rubric's choice to show only.
            (live.checks[check].weight > 0.0).then_some(Candidate { check, kind })
        })
        .collect()
}

/// The tally's fail weight of a scored check from its published value and evidence weight
/// (`value = (1 + p) / (2 + p + f)`, `evidence = p + f`); 0 for a check not scored.
pub fn fail_weight(check: &CheckDoc) -> f64 {
    match (check.state, check.value, check.evidence_weight) {
        (CheckState::Scored, Some(value), Some(evidence)) => {
            let pass = value / 100.0 * (2.0 + evidence) - 1.0;
            (evidence - pass).max(0.0)
        }
        _ => 0.0,
    }
}

/// What one rule ("fail weight >= threshold") holds in the fit period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleFigure {
    pub threshold: f64,
    pub rows: u64,
    pub subjects: u64,
    /// Share of those subject-days that fail in the horizon.
    pub observed: Option<f64>,
    /// Mean rate the fitted map predicts for their scores.
    pub predicted: Option<f64>,
}

/// The evidence for one candidate and what is proposed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateEvidence {
    pub check: CheckId,
    pub failure: FailureKind,
    pub flag: &'static str,
    pub cap: f64,
    pub rules: Vec<RuleFigure>,
    /// The threshold proposed, when a rule meets every condition.
    pub proposed: Option<f64>,
    pub why: String,
}

/// A gate the proposal adds, as the fast re-scoring applies it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NewGate {
    /// Index into the table's candidate columns.
    pub column: usize,
    pub threshold: f64,
    pub cap: f64,
}

/// One fit-period subject-day as the rule search reads it.
#[derive(Debug, Clone, Copy)]
pub struct FitDay {
    pub subject: u32,
    pub fail_weight: f64,
    pub predicted: f64,
    pub fails: bool,
}

/// The evidence table of one candidate and its proposed threshold, if any.
pub fn weigh(check: CheckId, kind: FailureKind, days: &[FitDay]) -> GateEvidence {
    let rules: Vec<RuleFigure> = THRESHOLDS
        .iter()
        .map(|&t| {
            let hit: Vec<&FitDay> = days.iter().filter(|d| d.fail_weight >= t).collect();
            let mut subjects: Vec<u32> = hit.iter().map(|d| d.subject).collect();
            subjects.sort_unstable();
            subjects.dedup();
            let n = hit.len() as f64;
            RuleFigure {
                threshold: t,
                rows: hit.len() as u64,
                subjects: subjects.len() as u64,
                observed: (n > 0.0)
                    .then(|| round4(hit.iter().filter(|d| d.fails).count() as f64 / n)),
                predicted: (n > 0.0)
                    .then(|| round4(hit.iter().map(|d| d.predicted).sum::<f64>() / n)),
            }
        })
        .collect();
    let meets = |r: &RuleFigure| {
        r.rows as usize >= MIN_ROWS
            && r.subjects as usize >= MIN_SUBJECTS
            && r.observed.is_some_and(|o| o >= MIN_OBSERVED)
            && r.observed
                .zip(r.predicted)
                .is_some_and(|(o, p)| o - p >= MIN_UNDERPREDICTION)
    };
    let chosen = rules.iter().find(|r| meets(r));
    let why = match chosen {
        Some(r) => format!(
            "fit period: {} subject-days of {} subjects with {check} fail weight >= {} fail at {} \
             where the map predicts {} for their scores: a gate (cap {}, avoid) is proposed",
            r.rows,
            r.subjects,
            r.threshold,
            pct(r.observed),
            pct(r.predicted),
            kind.cap(),
        ),
        None => {
            let busiest = rules.first();
            match busiest {
                Some(r) if r.rows > 0 => format!(
                    "fit period: {} subject-days of {} subjects with {check} fail weight >= {} \
                     fail at {} (map {}); a gate needs {MIN_ROWS} subject-days of \
                     {MIN_SUBJECTS} subjects failing at {} or more and {} points over the map: \
                     none proposed",
                    r.rows,
                    r.subjects,
                    r.threshold,
                    pct(r.observed),
                    pct(r.predicted),
                    pct(Some(MIN_OBSERVED)),
                    MIN_UNDERPREDICTION * 100.0,
                ),
                _ => format!("fit period: {check} never failed: none proposed"),
            }
        }
    };
    GateEvidence {
        check,
        failure: kind,
        flag: kind.flag(),
        cap: kind.cap(),
        proposed: chosen.map(|r| r.threshold),
        rules,
        why,
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or("n/a".into(), |x| format!("{:.1}%", x * 100.0))
}

/// The gate as the proposal's rubric writes it.
pub fn gate_json(e: &GateEvidence) -> Option<serde_json::Value> {
    let t = e.proposed?;
    Some(serde_json::json!({
        "flag": e.flag,
        "check": e.check,
        "when": "fail_weight_gte",
        "value": t,
        "cap": e.cap,
        "verdict": Verdict::Avoid,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn days(n: u32, subjects: u32, fw: f64, fails_every: u32, predicted: f64) -> Vec<FitDay> {
        (0..n)
            .map(|i| FitDay {
                subject: i % subjects,
                fail_weight: fw,
                predicted,
                fails: fails_every > 0 && i % fails_every == 0,
            })
            .collect()
    }

    #[test]
    fn the_draft_leaves_three_failure_kinds_ungated() {
        let live = Rubric::embedded_default();
        let ids: Vec<&str> = candidates(&live)
            .iter()
            .map(|c| live.checks[c.check].id.as_str())
            .collect();
        assert_eq!(ids, vec!["R4", "R5", "H7"]);
    }

    #[test]
    fn a_gate_needs_rows_subjects_failures_and_a_miss_of_the_map() {
        // 40 subject-days of 4 subjects, all failing, the map predicting 40%: proposed at the
        // lowest threshold that holds them.
        let mut d = days(40, 4, 1.0, 1, 0.4);
        d.extend(days(200, 20, 0.0, 0, 0.05));
        let e = weigh(CheckId::H7, FailureKind::ChargedTwice, &d);
        assert_eq!(e.proposed, Some(0.25));
        assert_eq!(e.cap, 39.0);
        assert_eq!(e.rules[0].rows, 40);
        assert_eq!(e.rules[0].observed, Some(1.0));
        assert_eq!(e.rules[3].rows, 0);
        assert!(e.why.contains("40 subject-days of 4 subjects"), "{}", e.why);
        let g = gate_json(&e).unwrap();
        assert_eq!(g["verdict"], "avoid");
        assert_eq!(g["when"], "fail_weight_gte");

        // Two subjects only: an anecdote.
        assert_eq!(
            weigh(
                CheckId::H7,
                FailureKind::ChargedTwice,
                &days(40, 2, 1.0, 1, 0.4)
            )
            .proposed,
            None
        );
        // Too few subject-days.
        assert_eq!(
            weigh(
                CheckId::H7,
                FailureKind::ChargedTwice,
                &days(29, 4, 1.0, 1, 0.4)
            )
            .proposed,
            None
        );
        // Failing less often than not.
        assert_eq!(
            weigh(CheckId::R4, FailureKind::NotOk, &days(40, 4, 1.0, 3, 0.1)).proposed,
            None
        );
        // The map already predicts it.
        let e = weigh(CheckId::R4, FailureKind::NotOk, &days(40, 4, 1.0, 1, 0.95));
        assert_eq!(e.proposed, None);
        assert!(e.why.contains("none proposed"), "{}", e.why);
        assert!(gate_json(&e).is_none());
    }

    #[test]
    fn the_fail_weight_is_read_back_from_value_and_evidence() {
        // pass 30, fail 7: value (1 + 30) / (2 + 37) * 100.
        let value = 31.0 / 39.0 * 100.0;
        let mut c: CheckDoc = serde_json::from_value(serde_json::json!({
            "id": "H7", "title": "Charged once", "metric": "rate", "kind": "paid", "weight": 15,
            "half_life_days": 14, "on_revision": "half", "state": "scored", "passes": 30,
            "fails": 7, "nas": 0, "unmeasured": 0, "evidence_weight": 37.0,
            "value": value, "p95_ms": null, "points": 5.0, "contribution": 4.0
        }))
        .unwrap();
        assert!((fail_weight(&c) - 7.0).abs() < 1e-9);
        c.state = CheckState::Na;
        assert_eq!(fail_weight(&c), 0.0);
    }
}
