//! The verdict: forced verdicts of binding gates, "unverified" while too little is known, and
//! otherwise the grade and confidence rules, with the most severe candidate winning
//! (down > avoid > caution > unverified > ok).

use super::gates::GateState;
use super::input::Inputs;
use super::tally::{CheckState, EntryWeights, Tally};
use crate::evidence::Outcome;
use crate::rubric::{Kind, Rubric, Verdict};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reason {
    pub code: String,
    pub detail: String,
}

fn reason(code: &str, detail: String) -> Reason {
    Reason {
        code: code.to_string(),
        detail,
    }
}

/// Whether there is enough evidence to state a verdict from the grade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verification {
    pub verified: bool,
    /// Pass or fail outcomes of the probe check (R1): the probes that reached a conclusion.
    pub probes: u32,
    pub probes_needed: u32,
    pub probe_span_days: f64,
    pub probe_span_days_needed: f64,
    /// Days from the latest paid call (a pass or fail from a paid run) to `as_of`.
    pub last_paid_call_days_ago: Option<f64>,
    pub paid_within_days: f64,
    pub reasons: Vec<Reason>,
}

/// Whether the evidence is enough to state a verdict from the grade (`rubrics/README.md`,
/// "Caps, grade and verdict"). Only evidence the score uses counts: outcomes still carrying
/// weight, of checks that are scored.
pub fn verification(
    rubric: &Rubric,
    inputs: &Inputs,
    weights: &EntryWeights,
    tallies: &[Tally],
    anything_scorable: bool,
) -> Verification {
    let rules = &rubric.verdict;
    // An entry may stand for a run of probes (`/3`): from its first to its latest.
    let probe_entries: Vec<&super::input::Entry> = weights
        .weighted_entries_of(rubric, inputs, rules.probe_check)
        .filter(|(e, w)| matches!(e.outcome, Outcome::Pass | Outcome::Fail) && *w > 0.0)
        .map(|(e, _)| e)
        .collect();
    let probes: u32 = probe_entries.iter().map(|e| e.count()).sum();
    let span_days = match (probe_entries.first(), probe_entries.last()) {
        (Some(first), Some(last)) => super::tally::days_between(first.first_ns(), last.at.ns),
        _ => 0.0,
    };
    // The paid call: a pass or fail from a paid run, of a paid check that the rubric weighs and
    // that is scored, still carrying weight. A check the rubric lacks, a weight-0 check (shown,
    // not scored), a free check, or an na check is not scored, so its entries prove nothing here.
    let last_paid = rubric
        .checks
        .iter()
        .zip(tallies)
        .filter(|(c, t)| c.kind == Kind::Paid && c.weight > 0.0 && t.state == CheckState::Scored)
        .flat_map(|(c, _)| weights.weighted_entries_of(rubric, inputs, c.id))
        .filter(|(e, w)| {
            e.kind == Kind::Paid && matches!(e.outcome, Outcome::Pass | Outcome::Fail) && *w > 0.0
        })
        .map(|(e, _)| &e.at)
        .max_by_key(|at| at.ns);
    let paid_days_ago = last_paid.map(|at| at.days_until(&inputs.as_of));
    let scored_from_evidence = rubric
        .checks
        .iter()
        .zip(tallies)
        .any(|(c, t)| c.weight > 0.0 && t.state == CheckState::Scored);
    let mut reasons = Vec::new();
    if probes < rules.min_probes {
        reasons.push(reason(
            "too_few_probes",
            format!(
                "{probes} {} probes, {} needed",
                rules.probe_check, rules.min_probes
            ),
        ));
    }
    if span_days < rules.min_span_days {
        reasons.push(reason(
            "probes_span_too_short",
            format!(
                "{} probes span {span_days:.4} days, {} needed",
                rules.probe_check, rules.min_span_days
            ),
        ));
    }
    match paid_days_ago {
        Some(days) if days <= rules.paid_within_days => {}
        Some(days) => reasons.push(reason(
            "no_recent_paid_call",
            format!(
                "latest paid call {days:.4} days ago, one within {} days needed",
                rules.paid_within_days
            ),
        )),
        None => reasons.push(reason(
            "no_paid_call",
            format!(
                "no paid call on record, one within {} days needed",
                rules.paid_within_days
            ),
        )),
    }
    if !anything_scorable {
        reasons.push(reason(
            "nothing_scorable",
            "every weighted check is na".to_string(),
        ));
    } else if !scored_from_evidence {
        reasons.push(reason(
            "no_evidence",
            "no weighted check is scored from evidence: every one is held at the prior or na"
                .to_string(),
        ));
    }
    Verification {
        verified: reasons.is_empty(),
        probes,
        probes_needed: rules.min_probes,
        probe_span_days: super::points::round4(span_days),
        probe_span_days_needed: rules.min_span_days,
        last_paid_call_days_ago: paid_days_ago.map(super::points::round4),
        paid_within_days: rules.paid_within_days,
        reasons,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Not enough evidence yet: the grade is provisional and never shown as a low grade.
    Provisional,
    Established,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictBlock {
    pub verdict: Verdict,
    pub status: Status,
    /// Why this verdict (the deciding rule first, then any other rule that asked for the same).
    pub reasons: Vec<Reason>,
    pub verification: Verification,
}

pub fn decide(
    rubric: &Rubric,
    gates: &[GateState],
    verification: Verification,
    grade: &str,
    confidence: &str,
) -> VerdictBlock {
    let rules = &rubric.verdict;
    let mut candidates: Vec<(Verdict, Reason)> = Vec::new();
    for g in gates.iter().filter(|g| g.binding) {
        if let Some(v) = g.gate.verdict {
            candidates.push((
                v,
                reason(
                    "gate",
                    format!("{} ({}): {}", g.gate.flag, g.gate.check, g.reason),
                ),
            ));
        }
    }
    if verification.verified {
        if rules.avoid_grades.iter().any(|g| g == grade) {
            candidates.push((Verdict::Avoid, reason("grade", format!("grade {grade}"))));
        }
        if rules.caution_grades.iter().any(|g| g == grade) {
            candidates.push((Verdict::Caution, reason("grade", format!("grade {grade}"))));
        }
        if rules.caution_confidence.iter().any(|c| c == confidence) {
            candidates.push((
                Verdict::Caution,
                reason("confidence", format!("{confidence} confidence")),
            ));
        }
        candidates.push((
            Verdict::Ok,
            reason("ok", "no rule asks for more caution".to_string()),
        ));
    } else {
        for r in &verification.reasons {
            candidates.push((Verdict::Unverified, r.clone()));
        }
    }
    let verdict = candidates
        .iter()
        .map(|(v, _)| *v)
        .min()
        .unwrap_or(Verdict::Unverified);
    VerdictBlock {
        verdict,
        status: if verification.verified {
            Status::Established
        } else {
            Status::Provisional
        },
        reasons: candidates
            .into_iter()
            .filter(|(v, _)| *v == verdict)
            .map(|(_, r)| r)
            .collect(),
        verification,
    }
}
