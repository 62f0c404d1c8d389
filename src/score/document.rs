//! The score document: everything a reader needs to check a score, and the inputs to recompute
//! it. The format is described in `rubrics/README.md` ("The score document"). It is published as
//! RFC 8785 canonical JSON followed by one newline, so it can be compared byte for byte.

use super::gates::GateState;
use super::input::Provenance;
use super::montecarlo::Sampler;
use super::outlook::Outlook;
use super::points::Points;
use super::tally::CheckState;
use super::value::Value;
use super::verdict::{Reason, VerdictBlock};
use crate::rubric::{CheckId, GateWhen, Kind, Metric, OnRevision, Verdict};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// Names this document format.
pub const FORMAT: &str = "x402-probe.score/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreDocument {
    pub format: Cow<'static, str>,
    /// The scorer's method version; a change to how a score is computed changes it.
    pub method: Cow<'static, str>,
    pub rubric: RubricRef,
    /// SHA-256 of the canonical inputs (also the Monte Carlo seed).
    pub inputs_sha256: String,
    pub provenance: Provenance,
    pub subject: SubjectRef,
    pub as_of: String,
    /// Exactly the sum of the dimensions' (and so the checks') contributions.
    pub score: Points,
    /// `score` after every binding cap: what the grade is read from.
    pub capped_score: Points,
    /// What the capped score predicts under the rubric's `calibration` (absent when the rubric has
    /// none, as the draft has not: its documents are unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted: Option<Predicted>,
    /// Sum of the weights of the dimensions scored (100 when none left the total).
    pub denominator: f64,
    pub band: Band,
    pub confidence: String,
    /// The grade of `capped_score`; null while the subject is unverified, so that a lack of
    /// evidence is never shown as a low grade.
    pub grade: Option<String>,
    /// While unverified: the grade the evidence so far would give, labelled as provisional.
    pub provisional_grade: Option<String>,
    pub verdict: VerdictBlock,
    pub stale: bool,
    pub watch: WatchBlock,
    pub dimensions: Vec<DimensionDoc>,
    /// Checks scored over no evidence, held at the prior (value 50).
    pub prior_held: Vec<PriorHeld>,
    /// Every gate of the rubric, binding or not.
    pub gates: Vec<GateDoc>,
    pub cap: CapDoc,
    pub outlook: Outlook,
    pub value: Value,
    /// Checks in the history that this rubric does not have (kept, not scored).
    pub ignored_checks: Vec<String>,
    /// Several vantages only: the quorum's cycles and disagreements, as the inputs record them
    /// (`rubrics/README.md`, "Several vantages"). Absent with one vantage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<super::quorum::QuorumDocument>,
    /// The inputs exactly as scored (shared with the parsed inputs, not copied). Null when read
    /// back from the store's form, which leaves them out (the ledger holds them).
    #[serde(
        default,
        serialize_with = "serialize_shared",
        deserialize_with = "deserialize_shared"
    )]
    pub inputs: std::sync::Arc<serde_json::Value>,
}

/// The chance that a paid call to the subject fails within the horizon after the score, read
/// from the rubric's calibration at the capped score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Predicted {
    pub horizon_days: u32,
    /// 0..=1, rounded to 4 decimals.
    pub failure_rate: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RubricRef {
    pub id: String,
    pub version: String,
    pub major: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubjectRef {
    pub id: String,
    pub url: String,
    pub category: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Band {
    pub low: f64,
    pub high: f64,
    pub width: f64,
    pub percentiles: (f64, f64),
    pub draws: u32,
    pub sampler: Sampler,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchBlock {
    pub on_watch: bool,
    pub reasons: Vec<Reason>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DimensionDoc {
    pub id: String,
    pub weight: f64,
    /// False when nothing in it is scorable: it left the total.
    pub scored: bool,
    /// The most it can contribute on the published scale.
    pub points: f64,
    pub contribution: Points,
    pub checks: Vec<CheckDoc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckDoc {
    pub id: CheckId,
    pub title: String,
    pub metric: Metric,
    pub kind: Kind,
    pub weight: f64,
    pub half_life_days: f64,
    pub on_revision: Option<OnRevision>,
    pub state: CheckState,
    pub passes: u32,
    pub fails: u32,
    pub nas: u32,
    pub unmeasured: u32,
    /// Decayed, revision-adjusted weight of the pass and fail outcomes the score uses (null for
    /// `na`: not scored).
    pub evidence_weight: Option<f64>,
    /// 0..=100 (null for `na`).
    pub value: Option<f64>,
    /// Curve checks: the weighted p95 in ms (null when the p95 is a failed request or no data).
    pub p95_ms: Option<f64>,
    /// The most it can contribute on the published scale (0 when not scorable).
    pub points: f64,
    pub contribution: Points,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriorHeld {
    pub check: CheckId,
    pub points: f64,
    pub contribution: Points,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateDoc {
    pub flag: String,
    pub check: CheckId,
    pub when: GateWhen,
    pub threshold: f64,
    pub binding: bool,
    pub cap: Option<f64>,
    pub verdict: Option<Verdict>,
    pub stale: bool,
    pub watch: bool,
    pub clear_after_passes: Option<u32>,
    pub fail_weight: Option<f64>,
    pub passes_since_last_fail: Option<u32>,
    pub failing_hours: Option<f64>,
    pub hours_since_last_fail: Option<f64>,
    pub reason: String,
}

impl GateDoc {
    pub fn from_state(s: &GateState) -> GateDoc {
        use super::points::round4;
        GateDoc {
            flag: s.gate.flag.clone(),
            check: s.gate.check,
            when: s.gate.when,
            threshold: s.gate.value,
            binding: s.binding,
            cap: s.gate.cap,
            verdict: s.gate.verdict,
            stale: s.gate.stale,
            watch: s.gate.watch,
            clear_after_passes: s.gate.clear_after_passes,
            fail_weight: s.fail_weight.map(round4),
            passes_since_last_fail: s.passes_since_last_fail,
            failing_hours: s.failing_hours.map(round4),
            hours_since_last_fail: s.hours_since_last_fail.map(round4),
            reason: s.reason.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapDoc {
    /// The lowest cap among binding gates, if any.
    pub cap: Option<f64>,
    /// Whether it held the score down (`capped_score < score`).
    pub binding: bool,
    /// Flags of the binding gates with a cap, each once, in rubric order.
    pub from: Vec<String>,
}

fn serialize_shared<S: serde::Serializer>(
    value: &std::sync::Arc<serde_json::Value>,
    s: S,
) -> Result<S::Ok, S::Error> {
    value.as_ref().serialize(s)
}

fn deserialize_shared<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<std::sync::Arc<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(std::sync::Arc::new)
}

impl ScoreDocument {
    /// Reads a published document back (the daemon's stored snapshots, the pages, the
    /// recalibration): the same type that wrote it, so reader and writer cannot drift apart.
    pub fn from_slice(bytes: &[u8]) -> Result<ScoreDocument, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The published bytes: canonical JSON and a newline.
    pub fn to_bytes(&self) -> Result<Vec<u8>, crate::canonical::CanonicalError> {
        let mut bytes = crate::canonical::canonical_bytes_of(self)?;
        bytes.push(b'\n');
        Ok(bytes)
    }
}
