//! Outlook: the score over the last `recent_days` against the score over the last
//! `baseline_days`, both over the same checks (those with evidence in the recent window), so a
//! check probed rarely (paid calls) cannot move the outlook by being absent from one window.

use super::ScoreError;
use super::input::{Inputs, MS_PER_DAY};
use super::points::{Points, breakdown};
use super::tally::{CheckState, EntryWeights, tally_all};
use crate::rubric::Rubric;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trend {
    Improving,
    Stable,
    Declining,
    /// No check has evidence in the recent window.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
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
    pub checks: Vec<String>,
}

pub fn outlook(
    rubric: &Rubric,
    inputs: &Inputs,
    weights: &EntryWeights,
) -> Result<Outlook, ScoreError> {
    let rules = &rubric.outlook;
    let within = |days: f64| {
        let start = inputs.as_of.ms as f64 - days * MS_PER_DAY as f64;
        move |e: &super::input::Entry| e.at.ms as f64 >= start
    };
    let recent_filter = within(rules.recent_days);
    let baseline_filter = within(rules.baseline_days);
    let mut recent = tally_all(rubric, inputs, weights, &recent_filter)?;
    let mut baseline = tally_all(rubric, inputs, weights, &baseline_filter)?;
    let mut checks = Vec::new();
    for (i, check) in rubric.checks.iter().enumerate() {
        if recent[i].state == CheckState::Scored && baseline[i].state == CheckState::Scored {
            checks.push(check.id.clone());
        } else {
            recent[i].state = CheckState::Na;
            baseline[i].state = CheckState::Na;
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
