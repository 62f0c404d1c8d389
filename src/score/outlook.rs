//! Outlook: the score over the last `recent_days` against the score over the last
//! `baseline_days`, both over the same checks (the weighted checks with evidence in the recent
//! window), so a check probed rarely (paid calls) cannot move the outlook by being absent from one
//! window. What is left out is listed with the reason.

use super::ScoreError;
use super::input::Inputs;
use super::points::{Points, breakdown};
use super::tally::{CheckState, EntryWeights, tally_all};
use crate::rubric::{CheckId, Rubric};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trend {
    Improving,
    Stable,
    Declining,
    /// No weighted check has evidence in the recent window.
    Unknown,
}

/// Why a check is not among the checks the outlook compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeftOutBecause {
    /// Weight 0 in the rubric (shown, not scored): it cannot move a score.
    WeightZero,
    /// Its latest determination in the recent window is `na`.
    Na,
    /// No pass or fail (or na) carrying weight in the recent window.
    NoRecentEvidence,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeftOut {
    pub check: CheckId,
    pub because: LeftOutBecause,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outlook {
    pub trend: Trend,
    pub recent_days: f64,
    pub baseline_days: f64,
    pub recent: Option<Points>,
    pub baseline: Option<Points>,
    /// `recent - baseline`; the trend moves when it reaches the rubric's delta either way.
    pub delta: Option<Points>,
    pub threshold: f64,
    /// The checks both windows are scored over.
    pub checks: Vec<CheckId>,
    /// Every other check of the rubric, with the reason.
    pub left_out: Vec<LeftOut>,
}

pub fn outlook(
    rubric: &Rubric,
    inputs: &Inputs,
    weights: &EntryWeights,
) -> Result<Outlook, ScoreError> {
    let rules = &rubric.outlook;
    // An entry's decay time: its own (`/2`), its day's start (`/3`); its age computed once.
    let within = |days: f64| move |i: usize| weights.age_days[i] <= days;
    let recent_filter = within(rules.recent_days);
    let baseline_filter = within(rules.baseline_days);
    let mut recent = tally_all(rubric, inputs, weights, &recent_filter)?;
    let mut baseline = tally_all(rubric, inputs, weights, &baseline_filter)?;
    let mut checks = Vec::new();
    let mut left_out = Vec::new();
    for (i, check) in rubric.checks.iter().enumerate() {
        // The baseline window holds the recent one, so a check scored in the recent window is
        // scored in the baseline too (its latest determination is the same entry).
        let because = match recent[i].state {
            _ if check.weight <= 0.0 => Some(LeftOutBecause::WeightZero),
            CheckState::Na => Some(LeftOutBecause::Na),
            CheckState::Prior => Some(LeftOutBecause::NoRecentEvidence),
            CheckState::Scored => None,
        };
        match because {
            None => checks.push(check.id),
            Some(because) => {
                recent[i].state = CheckState::Na;
                baseline[i].state = CheckState::Na;
                left_out.push(LeftOut {
                    check: check.id,
                    because,
                });
            }
        }
    }
    let mut result = Outlook {
        trend: Trend::Unknown,
        recent_days: rules.recent_days,
        baseline_days: rules.baseline_days,
        recent: None,
        baseline: None,
        delta: None,
        threshold: rules.delta,
        checks,
        left_out,
    };
    let r = breakdown(rubric, &recent);
    let b = breakdown(rubric, &baseline);
    if r.denominator <= 0.0 {
        return Ok(result);
    }
    let delta = r.total - b.total;
    let threshold = Points::from_f64(rules.delta);
    result.trend = if delta >= threshold {
        Trend::Improving
    } else if delta.0 <= -threshold.0 {
        Trend::Declining
    } else {
        Trend::Stable
    };
    result.recent = Some(r.total);
    result.baseline = Some(b.total);
    result.delta = Some(delta);
    Ok(result)
}
