//! The scorer: rubric + outcome history + as_of -> score document. Pure.
//!
//! No clock, no IO, no outside data: the score is a function of the rubric bytes and the inputs
//! document, and its only randomness comes from a generator seeded by the input digest, so anyone
//! can recompute a published score byte for byte (`x402-probe recompute`). Every choice the
//! rubric leaves open is written down in `rubrics/README.md`.

pub mod beta;
pub mod curve;
pub mod decay;
pub mod document;
pub mod exact;
pub mod gates;
pub mod headline;
pub mod input;
pub mod montecarlo;
pub mod outlook;
pub mod points;
pub mod quorum;
pub mod rng;
pub mod summary;
pub mod tally;
pub mod value;
pub mod verdict;

#[cfg(test)]
mod tests;

use crate::rubric::{Metric, Rubric};
use document::{
    Band, CapDoc, CheckDoc, DimensionDoc, GateDoc, PriorHeld, RubricRef, ScoreDocument, SubjectRef,
    WatchBlock,
};
use input::{InputError, Inputs};
use montecarlo::{Posterior, Sampler, Term};
use points::{Points, round4};
use serde::{Deserialize, Serialize};
use tally::{CheckState, Tally};

pub use document::FORMAT;

/// The scorer's method version of inputs with one entry per outcome: named in their documents.
pub const METHOD: &str = "x402-probe.scorer/2";

/// The scorer's method versions this build scores under (`rubrics/README.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Method {
    /// One history entry per outcome (`score --inputs`, and the daemon's scores before `/3`).
    #[default]
    #[serde(rename = "x402-probe.scorer/2")]
    V2,
    /// Per-day summaries of each check (`summary`): the daemon's scores.
    #[serde(rename = "x402-probe.scorer/3")]
    V3,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::V2 => METHOD,
            Method::V3 => "x402-probe.scorer/3",
        }
    }

    /// The default one for absent fields (entries written before `/3` name none).
    pub fn is_v2(&self) -> bool {
        *self == Method::V2
    }
}

/// Why a score could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum ScoreError {
    #[error(transparent)]
    Inputs(#[from] InputError),
    #[error("the inputs are invalid: {0}")]
    Input(String),
    #[error(
        "refusing to score: the inputs claim rubric version {claimed} (major {claimed_major}) \
         but the rubric is {actual} (major {actual_major}); scores never cross major versions"
    )]
    MajorVersion {
        claimed: String,
        claimed_major: u64,
        actual: String,
        actual_major: u64,
    },
    #[error("cannot write the score document: {0}")]
    Canonical(#[from] crate::canonical::CanonicalError),
}

/// Score an inputs document (JSON bytes) under a rubric with the published sampler.
pub fn score_json(rubric: &Rubric, input_bytes: &[u8]) -> Result<ScoreDocument, ScoreError> {
    let inputs = Inputs::from_json_bytes(input_bytes)?;
    score(rubric, &inputs, Sampler::InverseCdfTable)
}

/// Score parsed inputs under a rubric.
pub fn score(
    rubric: &Rubric,
    inputs: &Inputs,
    sampler: Sampler,
) -> Result<ScoreDocument, ScoreError> {
    let claimed_major = crate::rubric::major_version_of(&inputs.rubric_version)
        .map_err(|e| ScoreError::Input(format!("rubric_version: {e}")))?;
    if claimed_major != rubric.major_version() {
        return Err(ScoreError::MajorVersion {
            claimed: inputs.rubric_version.clone(),
            claimed_major,
            actual: rubric.version.clone(),
            actual_major: rubric.major_version(),
        });
    }

    let weights = tally::EntryWeights::new(rubric, inputs);
    let tallies = tally::tally_all(rubric, inputs, &weights, &|_| true)?;
    let split = points::breakdown(rubric, &tallies);
    let gate_states = gates::evaluate(rubric, inputs, &weights);

    let binding_caps: Vec<(f64, &str)> = gate_states
        .iter()
        .filter(|g| g.binding)
        .filter_map(|g| g.gate.cap.map(|c| (c, g.gate.flag.as_str())))
        .collect();
    let cap = binding_caps.iter().map(|(c, _)| *c).reduce(f64::min);
    let capped_score = match cap {
        Some(c) => split.total.min(Points::from_f64(c)),
        None => split.total,
    };

    let terms = draw_terms(rubric, &tallies, &split.max_points);
    let mc = &rubric.monte_carlo;
    let totals = montecarlo::draw_totals(&terms, mc.draws, cap, &inputs.digest, sampler);
    let (low, high) = montecarlo::band(totals, mc.band.0, mc.band.1);
    let (low, high) = (round4(low), round4(high));
    let width = round4(high - low);
    let confidence = rubric.confidence_for(width).to_string();
    let grade = rubric.grade_for(capped_score.as_f64()).to_string();

    let anything_scorable = split.denominator > 0.0;
    let verification = verdict::verification(rubric, inputs, &weights, &tallies, anything_scorable);
    let verdict_block = verdict::decide(rubric, &gate_states, verification, &grade, &confidence);

    let mut watch_reasons = Vec::new();
    for r in &inputs.subject.revisions {
        if r.at.days_until(&inputs.as_of) <= rubric.watch.revision_days {
            watch_reasons.push(verdict::Reason {
                code: "revision".to_string(),
                detail: format!(
                    "revision {} at {} (within {} days)",
                    r.id, r.at.text, rubric.watch.revision_days
                ),
            });
        }
    }
    for g in gate_states.iter().filter(|g| g.binding && g.gate.watch) {
        watch_reasons.push(verdict::Reason {
            code: "gate".to_string(),
            detail: format!("{} ({}): {}", g.gate.flag, g.gate.check, g.reason),
        });
    }

    let dimensions = rubric
        .dimensions
        .iter()
        .enumerate()
        .map(|(d, dim)| {
            let checks: Vec<CheckDoc> = rubric
                .checks
                .iter()
                .enumerate()
                .filter(|(_, c)| c.dimension == dim.id)
                .map(|(i, c)| check_doc(rubric, c, &tallies[i], &split, i))
                .collect();
            DimensionDoc {
                id: dim.id.clone(),
                weight: dim.weight,
                scored: split.dimension_check_weight[d] > 0.0,
                points: round4(if split.dimension_check_weight[d] > 0.0 {
                    100.0 * dim.weight / split.denominator
                } else {
                    0.0
                }),
                contribution: checks.iter().map(|c| c.contribution).sum(),
                checks,
            }
        })
        .collect();

    let prior_held = rubric
        .checks
        .iter()
        .enumerate()
        .filter(|(i, c)| tallies[*i].state == CheckState::Prior && c.weight > 0.0)
        .map(|(i, c)| PriorHeld {
            check: c.id,
            points: round4(split.max_points[i]),
            contribution: split.contributions[i],
            reason: if tallies[i].unmeasured > 0 {
                format!(
                    "no pass or fail on record ({} unmeasured)",
                    tallies[i].unmeasured
                )
            } else {
                "no pass or fail on record".to_string()
            },
        })
        .collect();

    let mut ignored_checks: Vec<String> = weights
        .unknown
        .iter()
        .map(|i| inputs.history[*i].check.to_string())
        .collect();
    ignored_checks.sort();
    ignored_checks.dedup();

    Ok(ScoreDocument {
        format: FORMAT.into(),
        method: inputs.method.as_str().into(),
        rubric: RubricRef {
            id: rubric.id.clone(),
            version: rubric.version.clone(),
            major: rubric.major_version(),
            sha256: rubric.sha256().to_string(),
        },
        inputs_sha256: inputs.digest_hex(),
        provenance: inputs.provenance,
        subject: SubjectRef {
            id: inputs.subject.id.clone(),
            url: inputs.subject.url.clone(),
            category: inputs.subject.category.clone(),
        },
        as_of: inputs.as_of.text.clone(),
        score: split.total,
        capped_score,
        predicted: rubric.calibration.as_ref().map(|c| document::Predicted {
            horizon_days: c.horizon_days,
            failure_rate: round4(c.rate_at(capped_score.as_f64())),
        }),
        denominator: split.denominator,
        band: Band {
            low,
            high,
            width,
            percentiles: mc.band,
            draws: mc.draws,
            sampler,
        },
        confidence,
        grade: verdict_block.verification.verified.then(|| grade.clone()),
        provisional_grade: (!verdict_block.verification.verified).then_some(grade),
        stale: gate_states.iter().any(|g| g.binding && g.gate.stale),
        watch: WatchBlock {
            on_watch: !watch_reasons.is_empty(),
            reasons: watch_reasons,
        },
        verdict: verdict_block,
        dimensions,
        prior_held,
        gates: gate_states.iter().map(GateDoc::from_state).collect(),
        cap: CapDoc {
            cap,
            binding: capped_score < split.total,
            // Each flag once (two gates share `injection`), in rubric order.
            from: binding_caps.iter().fold(Vec::new(), |mut flags, (_, f)| {
                if !flags.iter().any(|x| x == f) {
                    flags.push(f.to_string());
                }
                flags
            }),
        },
        outlook: outlook::outlook(rubric, inputs, &weights)?,
        value: value::value(rubric, inputs, &weights),
        ignored_checks,
        quorum: inputs.quorum.clone(),
        inputs: std::sync::Arc::clone(&inputs.document),
    })
}

fn check_doc(
    rubric: &Rubric,
    check: &crate::rubric::Check,
    tally: &Tally,
    split: &points::Breakdown,
    i: usize,
) -> CheckDoc {
    CheckDoc {
        id: check.id,
        title: check.title.clone(),
        metric: check.metric,
        kind: check.kind,
        weight: check.weight,
        half_life_days: rubric.half_life_days(check),
        on_revision: check.on_revision,
        state: tally.state,
        passes: tally.passes,
        fails: tally.fails,
        nas: tally.nas,
        unmeasured: tally.unmeasured,
        evidence_weight: tally.evidence_weight().map(round4),
        value: (tally.state != CheckState::Na).then(|| round4(100.0 * tally.value)),
        p95_ms: tally.p95_ms.filter(|p| p.is_finite()).map(round4),
        points: round4(split.max_points[i]),
        contribution: split.contributions[i],
    }
}

/// The scorable, weighted checks with their posteriors, in rubric order.
fn draw_terms(rubric: &Rubric, tallies: &[Tally], max_points: &[f64]) -> Vec<Term> {
    rubric
        .checks
        .iter()
        .zip(tallies)
        .zip(max_points)
        .filter(|(_, points)| **points > 0.0)
        .map(|((check, tally), points)| Term {
            points: *points,
            posterior: posterior(check, tally),
        })
        .collect()
}

/// Prior: uniform value. Rate: Beta(1 + passes, 1 + fails) over decayed weights. Curve: the
/// quantile level's order-statistic Beta at the effective sample size, read through the curve.
pub fn posterior(check: &crate::rubric::Check, tally: &Tally) -> Posterior {
    match (tally.state, check.metric, &tally.sample, &check.curve) {
        (CheckState::Scored, Metric::Rate, _, _) => Posterior::Beta {
            a: 1.0 + tally.pass_weight,
            b: 1.0 + tally.fail_weight,
        },
        (CheckState::Scored, Metric::Curve, Some(sample), Some(curve)) => {
            let n = sample.effective_n;
            Posterior::CurveQuantile {
                a: 0.95 * (n + 1.0),
                b: 0.05 * (n + 1.0),
                values: sample
                    .values
                    .iter()
                    .map(|v| curve::interpolate(curve, *v) / 100.0)
                    .collect(),
                sample: sample.clone(),
            }
        }
        _ => Posterior::Uniform,
    }
}

/// The result of recomputing one stored score document.
#[derive(Debug, Clone, PartialEq)]
pub enum Recomputed {
    Identical,
    Differs {
        /// Offset of the first byte that differs (or the shorter length).
        byte: usize,
        /// JSON pointer of the first field that differs, when both parse.
        field: String,
        stored: String,
        recomputed: String,
    },
}

/// Why a stored document could not be recomputed at all.
#[derive(Debug, thiserror::Error)]
pub enum RecomputeError {
    #[error("not a score document: {0}")]
    NotADocument(String),
    #[error("rubric {0} is not available (pass it with --rubric)")]
    RubricUnavailable(String),
    #[error(transparent)]
    Score(#[from] ScoreError),
}

/// Recompute a stored score document from its embedded inputs under the rubric it names (looked
/// up by SHA-256 among `rubrics`) and compare the bytes.
pub fn recompute(stored: &[u8], rubrics: &[Rubric]) -> Result<Recomputed, RecomputeError> {
    let doc: serde_json::Value = serde_json::from_slice(stored)
        .map_err(|e| RecomputeError::NotADocument(format!("not JSON: {e}")))?;
    let sha = doc
        .pointer("/rubric/sha256")
        .and_then(|v| v.as_str())
        .ok_or_else(|| RecomputeError::NotADocument("no rubric.sha256".to_string()))?;
    let rubric = rubrics
        .iter()
        .find(|r| r.sha256() == sha)
        .ok_or_else(|| RecomputeError::RubricUnavailable(sha.to_string()))?;
    let inputs = doc
        .get("inputs")
        .cloned()
        .ok_or_else(|| RecomputeError::NotADocument("no embedded inputs".to_string()))?;
    let sampler = match doc.pointer("/band/sampler").and_then(|v| v.as_str()) {
        Some("gamma_ratio") => Sampler::GammaRatio,
        _ => Sampler::InverseCdfTable,
    };
    let inputs = Inputs::from_value(inputs).map_err(ScoreError::from)?;
    let fresh = score(rubric, &inputs, sampler)?
        .to_bytes()
        .map_err(ScoreError::from)?;
    if fresh == stored {
        return Ok(Recomputed::Identical);
    }
    let byte = fresh
        .iter()
        .zip(stored)
        .position(|(a, b)| a != b)
        .unwrap_or(fresh.len().min(stored.len()));
    let fresh_value: serde_json::Value = serde_json::from_slice(&fresh).unwrap_or_default();
    let (field, a, b) = first_difference(&doc, &fresh_value, String::new()).unwrap_or((
        "(formatting only)".to_string(),
        serde_json::Value::Null,
        serde_json::Value::Null,
    ));
    Ok(Recomputed::Differs {
        byte,
        field,
        stored: a.to_string(),
        recomputed: b.to_string(),
    })
}

/// The JSON pointer and both values of the first difference between two JSON values (object
/// keys in canonical order).
fn first_difference(
    a: &serde_json::Value,
    b: &serde_json::Value,
    path: String,
) -> Option<(String, serde_json::Value, serde_json::Value)> {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort_by(|p, q| p.encode_utf16().cmp(q.encode_utf16()));
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let child = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => first_difference(p, q, child),
                    (p, q) => Some((
                        child,
                        p.cloned().unwrap_or(Value::Null),
                        q.cloned().unwrap_or(Value::Null),
                    )),
                }
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, format!("{path}/{i}"))),
        _ if a == b => None,
        _ => Some((path, a.clone(), b.clone())),
    }
}
