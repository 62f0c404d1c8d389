//! The rubric's gates: each watches one check and, when it binds, caps the score, forces a
//! verdict, marks the subject stale or puts it on watch.
//!
//! Gates read time-decayed weights only: a revision changes what a subject declares, it does not
//! undo what it did, so an overcharge cannot be washed out by publishing new revisions.

use super::decay::decay_factor;
use super::input::{Inputs, Instant, NS_PER_HOUR};
use super::tally::{EntryWeights, days_between};
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

/// One pass or fail entry of a gate's check, as the gate reads it.
struct GateOutcome<'a> {
    first_ns: i128,
    at: &'a Instant,
    decay_ns: i128,
    scale: f64,
    count: u32,
    outcome: Outcome,
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
    // unmeasured say nothing. An entry may stand for a run of outcomes (`/3`): its first and
    // latest time, its decay time and scale, and how many.
    let outcomes: Vec<GateOutcome> = weights
        .entries_of(rubric, inputs, gate.check)
        .filter(|e| matches!(e.outcome, Outcome::Pass | Outcome::Fail))
        .map(|e| GateOutcome {
            first_ns: e.first_ns(),
            at: &e.at,
            decay_ns: e.decay_ns(),
            scale: e.scale(),
            count: e.count(),
            outcome: e.outcome,
        })
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
    let last_fail = outcomes.iter().rposition(|o| o.outcome == Outcome::Fail);
    match gate.when {
        GateWhen::FailWeightGte => {
            let half_life = rubric
                .check(gate.check)
                .map(|c| rubric.half_life_days(c))
                .unwrap_or(rubric.decay.free);
            let weight: f64 = outcomes
                .iter()
                .filter(|o| o.outcome == Outcome::Fail)
                .map(|o| {
                    decay_factor(days_between(o.decay_ns, inputs.as_of.ns), half_life) * o.scale
                })
                // (a fold from +0: an empty f64 sum is -0, which would print as "-0.0000")
                .fold(0.0, |a, b| a + b);
            // Every outcome after the latest fail is a pass.
            let passes_since = last_fail.map(|i| outcomes[i + 1..].iter().map(|o| o.count).sum());
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
            let latest_is_fail = outcomes.last().map(|o| o.outcome == Outcome::Fail) == Some(true);
            if latest_is_fail {
                let run_start = outcomes
                    .iter()
                    .rposition(|o| o.outcome == Outcome::Pass)
                    .map_or(0, |i| i + 1);
                let (first, last) = (
                    outcomes[run_start].first_ns,
                    outcomes[outcomes.len() - 1].at.ns,
                );
                let hours = (last - first) as f64 / NS_PER_HOUR as f64;
                let fails: u32 = outcomes[run_start..].iter().map(|o| o.count).sum();
                state.failing_hours = Some(hours);
                state.binding = hours >= gate.value;
                state.reason = format!(
                    "{} failing for {hours:.4} h ({} fails in a row), threshold {} h",
                    gate.check, fails, gate.value
                );
            } else {
                state.reason = format!("{}: latest outcome is not a fail", gate.check);
            }
        }
        GateWhen::FailedWithinHours => match last_fail {
            Some(i) => {
                let hours = outcomes[i].at.hours_until(&inputs.as_of);
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
