//! From the outcome history to one summary per check: its state (scored, held at the prior, or
//! `na`), its decayed pass and fail weights, and its value in [0, 1] (a rate check's is its
//! posterior mean, a curve check's its weighted p95 read through the curve).

use super::ScoreError;
use super::curve::{WeightedSample, interpolate};
use super::decay::{decay_factor, revision_factor};
use super::exact::Level;
use super::input::{Entry, Inputs};
use crate::evidence::Outcome;
use crate::rubric::{Check, CheckId, Metric, Rubric};

/// The value of a check scored over no evidence: the mean of the uniform prior.
pub const PRIOR_VALUE: f64 = 0.5;

/// A rate check's point value: the mean of its posterior Beta(1 + pass weight, 1 + fail weight)
/// (the uniform prior updated by the decayed evidence), the very distribution the Monte Carlo
/// band draws the check from. The published value is then the mean of what the band samples, so
/// thin evidence is pulled toward 1/2 instead of reading as certainty, and the score (curve
/// checks and caps aside) is the mean of the band's draws rather than a figure outside the band.
/// With much weight it approaches the decayed share of passes; with no weight it is exactly
/// `PRIOR_VALUE`, so holding an unmeasured check at the prior is this same rule at zero
/// evidence, not an exception to it.
pub fn posterior_mean(pass_weight: f64, fail_weight: f64) -> f64 {
    (1.0 + pass_weight) / (2.0 + pass_weight + fail_weight)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckState {
    /// Scored from evidence.
    Scored,
    /// No evidence: held at the prior (value 0.5) and listed as such.
    Prior,
    /// Does not apply to this subject: leaves its dimension, which renormalises.
    Na,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tally {
    pub state: CheckState,
    /// Outcomes counted: those still carrying weight (a `reset` revision drops earlier entries
    /// of every outcome, `unmeasured` included, from every count alike).
    pub passes: u32,
    pub fails: u32,
    pub nas: u32,
    pub unmeasured: u32,
    /// Decayed, revision-adjusted weights.
    pub pass_weight: f64,
    pub fail_weight: f64,
    /// Curve checks: the weighted measurements (fails at +inf).
    pub sample: Option<std::sync::Arc<WeightedSample>>,
    /// Curve checks: the weighted p95 in ms (`inf` when the p95 is a failed request).
    pub p95_ms: Option<f64>,
    /// The check's value in [0, 1].
    pub value: f64,
}

impl Tally {
    /// The decayed weight of the evidence the score uses for this check: none for an `na` check,
    /// which is not scored (its earlier passes and fails are still counted in `passes`/`fails`).
    pub fn evidence_weight(&self) -> Option<f64> {
        (self.state != CheckState::Na).then_some(self.pass_weight + self.fail_weight)
    }
}

/// The weight an entry carries for scoring: decay by the check's half-life times its revision rule.
pub fn entry_weight(rubric: &Rubric, check: &Check, inputs: &Inputs, entry: &Entry) -> f64 {
    base_weight(rubric, check, inputs, entry) * entry.scale()
}

/// The weight of one outcome at the entry's decay time: decay times its revision rule (an
/// entry's weight is this times its scale, 1 for one outcome).
pub fn base_weight(rubric: &Rubric, check: &Check, inputs: &Inputs, entry: &Entry) -> f64 {
    decay_factor(
        days_between(entry.decay_ns(), inputs.as_of.ns),
        rubric.half_life_days(check),
    ) * revision_factor(check.on_revision, inputs.later_revisions(entry))
}

/// Days from `from_ns` to `to_ns`, as [`super::input::Instant::days_until`] computes them.
pub fn days_between(from_ns: i128, to_ns: i128) -> f64 {
    (to_ns - from_ns) as f64 / super::input::NS_PER_DAY as f64
}

/// The history grouped by rubric check, with each entry's scoring weight, computed once per score
/// (the outlook's windows and value reuse it).
pub struct EntryWeights {
    /// Per rubric check (rubric order): indices into `inputs.history`, oldest first.
    pub by_check: Vec<Vec<usize>>,
    /// Per history entry: its scoring weight (0 for checks the rubric does not have). Unmeasured
    /// entries get one too, never added to anything: it says whether a reset dropped them.
    pub weight: Vec<f64>,
    /// Per history entry: the weight of one of its outcomes before its scale (`base_weight`;
    /// the same as `weight` for an entry of one outcome).
    pub base: Vec<f64>,
    /// Indices of entries for checks the rubric does not have.
    pub unknown: Vec<usize>,
    /// Per history entry: days from its decay time to `as_of` ([`days_between`]), which the
    /// outlook's windows compare.
    pub age_days: Vec<f64>,
}

impl EntryWeights {
    pub fn new(rubric: &Rubric, inputs: &Inputs) -> EntryWeights {
        // Each entry's check found by its typed id (thousands of entries in a year's window).
        let mut index = [None; CheckId::ALL.len()];
        for (i, c) in rubric.checks.iter().enumerate() {
            index[c.id as usize] = Some(i);
        }
        let n = inputs.history.len();
        // Each check's list sized once (a year's window holds hundreds of entries of each).
        let mut counts = vec![0usize; rubric.checks.len()];
        for e in &inputs.history {
            if let Some(c) = e.check.id().and_then(|id| index[id as usize]) {
                counts[c] += 1;
            }
        }
        let mut by_check: Vec<Vec<usize>> = counts.into_iter().map(Vec::with_capacity).collect();
        let mut weight = vec![0.0; n];
        let mut base = vec![0.0; n];
        let mut unknown = Vec::new();
        let mut age_days = Vec::with_capacity(n);
        // The decay of the entries of one time, by half-life: a day's cells (`/3`) all decay
        // from the day's start, so a year's window needs one `exp2` per day and half-life, not
        // one per cell (the same function of the same arguments: the same weights). Their age
        // likewise: one conversion of the 128-bit span per time.
        let mut decays: Vec<(i128, u64, f64)> = Vec::new();
        let mut age: Option<(i128, f64)> = None;
        for (i, e) in inputs.history.iter().enumerate() {
            let at = e.decay_ns();
            let days = match age {
                Some((t, d)) if t == at => d,
                _ => {
                    let d = days_between(at, inputs.as_of.ns);
                    age = Some((at, d));
                    d
                }
            };
            age_days.push(days);
            match e.check.id().and_then(|id| index[id as usize]) {
                Some(c) => {
                    by_check[c].push(i);
                    let check = &rubric.checks[c];
                    let half_life = rubric.half_life_days(check);
                    if decays.first().is_some_and(|(t, _, _)| *t != at) {
                        decays.clear();
                    }
                    let decay = match decays.iter().find(|(_, h, _)| *h == half_life.to_bits()) {
                        Some((_, _, d)) => *d,
                        None => {
                            let d = decay_factor(days, half_life);
                            decays.push((at, half_life.to_bits(), d));
                            d
                        }
                    };
                    base[i] = decay * revision_factor(check.on_revision, inputs.later_revisions(e));
                    weight[i] = base[i] * e.scale();
                }
                None => unknown.push(i),
            }
        }
        EntryWeights {
            by_check,
            weight,
            base,
            unknown,
            age_days,
        }
    }

    /// The entries of one check (by id) with their scoring weights, in the inputs' order (time,
    /// then seq); empty for a check the rubric lacks.
    pub fn weighted_entries_of<'a>(
        &'a self,
        rubric: &Rubric,
        inputs: &'a Inputs,
        check: CheckId,
    ) -> impl Iterator<Item = (&'a Entry, f64)> + 'a {
        let indices: &[usize] = match rubric.checks.iter().position(|c| c.id == check) {
            Some(c) => &self.by_check[c],
            None => &[],
        };
        indices
            .iter()
            .map(move |i| (&inputs.history[*i], self.weight[*i]))
    }

    /// The entries of one check (by id), in the inputs' order; empty for a check the rubric lacks.
    pub fn entries_of<'a>(
        &'a self,
        rubric: &Rubric,
        inputs: &'a Inputs,
        check: CheckId,
    ) -> impl Iterator<Item = &'a Entry> + 'a {
        let indices: &[usize] = match rubric.checks.iter().position(|c| c.id == check) {
            Some(c) => &self.by_check[c],
            None => &[],
        };
        indices.iter().map(move |i| &inputs.history[*i])
    }
}

/// One tally per rubric check, in rubric order, over the entries for which `keep` holds (given
/// the entry's index in `inputs.history`).
pub fn tally_all(
    rubric: &Rubric,
    inputs: &Inputs,
    weights: &EntryWeights,
    keep: &dyn Fn(usize) -> bool,
) -> Result<Vec<Tally>, ScoreError> {
    rubric
        .checks
        .iter()
        .zip(&weights.by_check)
        .map(|(check, indices)| {
            let entries = indices
                .iter()
                .filter(|i| keep(**i))
                .map(|i| (&inputs.history[*i], weights.weight[*i], weights.base[*i]));
            tally_check(check, entries)
        })
        .collect()
}

fn tally_check<'a>(
    check: &Check,
    entries: impl Iterator<Item = (&'a Entry, f64, f64)>,
) -> Result<Tally, ScoreError> {
    let mut t = Tally {
        state: CheckState::Prior,
        passes: 0,
        fails: 0,
        nas: 0,
        unmeasured: 0,
        pass_weight: 0.0,
        fail_weight: 0.0,
        sample: None,
        p95_ms: None,
        value: PRIOR_VALUE,
    };
    let mut latest: Option<Outcome> = None;
    let mut measurements = Vec::new();
    for (e, w, base) in entries {
        if w <= 0.0 {
            continue; // dropped by a reset (or decayed past what a double can hold)
        }
        let count = e.count();
        if e.outcome == Outcome::Unmeasured {
            t.unmeasured += count;
            continue;
        }
        latest = Some(e.outcome);
        // A cell's measurements, each with its own weight; one outcome's is its value.
        let cell_measurements = e
            .cell
            .as_ref()
            .map(|c| c.measurements.as_deref().map_or(&[][..], Vec::as_slice));
        match e.outcome {
            Outcome::Pass => {
                t.passes += count;
                t.pass_weight += w;
                if check.metric == Metric::Curve {
                    match cell_measurements {
                        Some(m) => measurements.extend(m.iter().map(|(v, s)| (*v, base * s))),
                        None => {
                            let ms = e.value.ok_or_else(|| {
                                ScoreError::Input(format!(
                                    "history entry seq {}: a pass of curve check {} needs its \
                                     value in ms",
                                    e.seq, check.id
                                ))
                            })?;
                            measurements.push((ms, w));
                        }
                    }
                }
            }
            Outcome::Fail => {
                t.fails += count;
                t.fail_weight += w;
                // A curve check fails when the request never completed: slower than any point.
                match cell_measurements {
                    Some(m) => measurements.extend(m.iter().map(|(v, s)| (*v, base * s))),
                    None => measurements.push((f64::INFINITY, w)),
                }
            }
            Outcome::Na => t.nas += count,
            Outcome::Unmeasured => {}
        }
    }
    match latest {
        // Nothing on record: held at PRIOR_VALUE, which is `posterior_mean(0, 0)`.
        None => {}
        Some(Outcome::Na) => {
            t.state = CheckState::Na;
            t.value = 0.0;
        }
        Some(_) => {
            t.state = CheckState::Scored;
            match (&check.metric, &check.curve) {
                (Metric::Curve, Some(curve)) => {
                    let sample = WeightedSample::new(measurements).map(std::sync::Arc::new);
                    if let Some(s) = &sample {
                        let p95 = s.quantile(&Level::P95);
                        t.p95_ms = Some(p95);
                        t.value = interpolate(curve, p95) / 100.0;
                    }
                    t.sample = sample;
                }
                _ => t.value = posterior_mean(t.pass_weight, t.fail_weight),
            }
        }
    }
    Ok(t)
}
