//! The rubric's gates: each watches one check and, when it binds, caps the score, forces a
//! verdict, marks the subject stale or puts it on watch.
//!
//! Gates read time-decayed weights only: a revision changes what a subject declares, it does not
//! undo what it did, so an overcharge cannot be washed out by publishing new revisions.

use super::decay::decay_factor;
use super::input::{Inputs, Instant};
use super::tally::EntryWeights;
use crate::evidence::Outcome;
use crate::rubric::{Gate, GateWhen, Rubric};

/// What one gate saw and whether it binds.
#[derive(Debug, Clone, PartialEq)]
pub struct GateState {
    pub gate: Gate,
    pub binding: bool,
    /// `fail_weight_gte`: the decayed weight of the check's fails.
    pub fail_weight: Option<f64>,
    /// `fail_weight_gte` with `clear_after_passes`: passes since the latest fail.
    pub passes_since_last_fail: Option<u32>,
    /// `failing_for_hours`: hours from the first to the latest fail of the current run of fails.
    pub failing_hours: Option<f64>,
    /// `failed_within_hours`: hours from the latest fail to `as_of`.
    pub hours_since_last_fail: Option<f64>,
    /// One line a reader can check.
    pub reason: String,
}

pub fn evaluate(rubric: &Rubric, inputs: &Inputs, weights: &EntryWeights) -> Vec<GateState> {
    rubric
        .gates
        .iter()
        .map(|gate| evaluate_one(rubric, inputs, weights, gate))
        .collect()
}

fn evaluate_one(
    rubric: &Rubric,
    inputs: &Inputs,
    weights: &EntryWeights,
    gate: &Gate,
) -> GateState {
    // Pass and fail outcomes of the watched check in the inputs' order (time, then seq); na and
    // unmeasured say nothing.
    let outcomes: Vec<(&Instant, Outcome)> = weights
        .entries_of(rubric, inputs, gate.check)
        .filter(|e| matches!(e.outcome, Outcome::Pass | Outcome::Fail))
        .map(|e| (&e.at, e.outcome))
        .collect();
    let mut state = GateState {
        gate: gate.clone(),
        binding: false,
        fail_weight: None,
        passes_since_last_fail: None,
        failing_hours: None,
        hours_since_last_fail: None,
        reason: String::new(),
    };
    let last_fail = outcomes.iter().rposition(|(_, o)| *o == Outcome::Fail);
    match gate.when {
        GateWhen::FailWeightGte => {
            let half_life = rubric
                .check(gate.check)
                .map(|c| rubric.half_life_days(c))
                .unwrap_or(rubric.decay.free);
            let weight: f64 = outcomes
                .iter()
                .filter(|(_, o)| *o == Outcome::Fail)
                .map(|(at, _)| decay_factor(at.days_until(&inputs.as_of), half_life))
                // (a fold from +0: an empty f64 sum is -0, which would print as "-0.0000")
                .fold(0.0, |a, b| a + b);
            let passes_since = last_fail.map(|i| (outcomes.len() - i - 1) as u32);
            let fires = weight >= gate.value;
            let cleared = match (gate.clear_after_passes, passes_since) {
                (Some(n), Some(p)) => p >= n,
                _ => false,
            };
            state.binding = fires && !cleared;
            state.fail_weight = Some(weight);
            state.passes_since_last_fail = gate.clear_after_passes.and(passes_since);
            state.reason = match (fires, cleared) {
                (false, _) => format!("{} fail weight {:.4} < {}", gate.check, weight, gate.value),
                (true, false) => {
                    format!("{} fail weight {:.4} >= {}", gate.check, weight, gate.value)
                }
                (true, true) => format!(
                    "{} fail weight {:.4} >= {}, cleared by {} passes since the latest fail",
                    gate.check,
                    weight,
                    gate.value,
                    passes_since.unwrap_or(0)
                ),
            };
        }
        GateWhen::FailingForHours => {
            let latest_is_fail = outcomes.last().map(|(_, o)| *o == Outcome::Fail) == Some(true);
            if latest_is_fail {
                let run_start = outcomes
                    .iter()
                    .rposition(|(_, o)| *o == Outcome::Pass)
                    .map_or(0, |i| i + 1);
                let (first, last) = (outcomes[run_start].0, outcomes[outcomes.len() - 1].0);
                let hours = first.hours_until(last);
                state.failing_hours = Some(hours);
                state.binding = hours >= gate.value;
                state.reason = format!(
                    "{} failing for {hours:.4} h ({} fails in a row), threshold {} h",
                    gate.check,
                    outcomes.len() - run_start,
                    gate.value
                );
            } else {
                state.reason = format!("{}: latest outcome is not a fail", gate.check);
            }
        }
        GateWhen::FailedWithinHours => match last_fail {
            Some(i) => {
                let hours = outcomes[i].0.hours_until(&inputs.as_of);
                state.hours_since_last_fail = Some(hours);
                state.binding = hours <= gate.value;
                state.reason = format!(
                    "{} latest fail {hours:.4} h before as_of, threshold {} h",
                    gate.check, gate.value
                );
            }
            None => state.reason = format!("{}: no fail on record", gate.check),
        },
    }
    state
}
