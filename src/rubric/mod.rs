//! The rubric file: typed, validated, content-addressed.
//!
//! A rubric is the specification of the score: weights, curves, gates, grades, decay, verdict rules
//! and Monte Carlo settings are read from it and never written twice in code. Its id is the SHA-256
//! of the file's bytes, so a score names exactly the rubric it was computed under. Unknown fields are
//! refused: a field this scorer does not understand could change the meaning of a score.

mod validate;

use serde::Deserialize;
use sha2::{Digest, Sha256};

pub use crate::evidence::CheckId;

/// The rubric shipped with the binary, byte for byte `rubrics/x402-endpoint.json`.
pub const EMBEDDED_DEFAULT: &[u8] = include_bytes!("../../rubrics/x402-endpoint.json");

/// Why a rubric file was refused.
#[derive(Debug, thiserror::Error)]
pub enum RubricError {
    #[error("the rubric is not valid JSON of the expected shape: {0}")]
    Parse(#[from] serde_json::Error),
    #[error("the rubric is invalid: {0}")]
    Invalid(String),
}

/// Whether a check's evidence comes from free probes or paid calls (sets its default half-life).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Free,
    Paid,
}

/// How a check's evidence becomes a value in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// The decayed share of passes, published as its posterior mean under the uniform prior.
    Rate,
    /// A measured p95 mapped through the check's curve.
    Curve,
}

/// What a new revision of the subject does to the earlier evidence of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRevision {
    /// Earlier evidence halves its weight at each later revision.
    Half,
    /// Earlier evidence is dropped.
    Reset,
}

/// The condition under which a gate fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateWhen {
    /// The decayed weight of the check's fails is at least `value`.
    FailWeightGte,
    /// The check's latest outcomes are an unbroken run of fails spanning at least `value` hours.
    FailingForHours,
    /// The check failed at most `value` hours before `as_of`.
    FailedWithinHours,
}

/// A verdict, ordered from the most to the least severe.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Down,
    Avoid,
    Caution,
    Unverified,
    Ok,
}

impl Verdict {
    /// Every verdict, from the most to the least severe.
    pub const ALL: [Verdict; 5] = [
        Verdict::Down,
        Verdict::Avoid,
        Verdict::Caution,
        Verdict::Unverified,
        Verdict::Ok,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Down => "down",
            Verdict::Avoid => "avoid",
            Verdict::Caution => "caution",
            Verdict::Unverified => "unverified",
            Verdict::Ok => "ok",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl std::str::FromStr for Verdict {
    type Err = String;
    /// The verdict's own spelling only: text read back from a stored row or document that is
    /// none of them is an error for the reader to name, never a default.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Verdict::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| format!("unknown verdict {s:?} (down, avoid, caution, unverified, ok)"))
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dimension {
    pub id: String,
    pub weight: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decay {
    /// Half-life in days of free-check evidence.
    pub free: f64,
    /// Half-life in days of paid-check evidence.
    pub paid: f64,
}

/// The statistic a curve reads; only `p95` is defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CurveInput {
    P95,
}

/// The space in which a curve interpolates between its points; only `log` (of x) is defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CurveSpace {
    Log,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Curve {
    pub input: CurveInput,
    pub space: CurveSpace,
    /// `(x, y)`: x in ms strictly increasing, y in points (0..=100) non-increasing.
    pub points: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// One of the checks this build knows: a rubric naming another is refused when read.
    pub id: CheckId,
    pub dimension: String,
    pub weight: f64,
    pub kind: Kind,
    pub metric: Metric,
    #[serde(default)]
    pub on_revision: Option<OnRevision>,
    #[serde(default)]
    pub half_life_days: Option<f64>,
    #[serde(default)]
    pub curve: Option<Curve>,
    pub title: String,
    pub measure: String,
    pub validity: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub flag: String,
    pub check: CheckId,
    pub when: GateWhen,
    pub value: f64,
    #[serde(default)]
    pub clear_after_passes: Option<u32>,
    #[serde(default)]
    pub cap: Option<f64>,
    #[serde(default)]
    pub verdict: Option<Verdict>,
    #[serde(default)]
    pub stale: bool,
    #[serde(default)]
    pub watch: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GradeStep {
    pub grade: String,
    pub min: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfidenceStep {
    pub level: String,
    pub max_width: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictRules {
    pub probe_check: CheckId,
    pub min_probes: u32,
    pub min_span_days: f64,
    pub paid_within_days: f64,
    pub avoid_grades: Vec<String>,
    pub caution_grades: Vec<String>,
    pub caution_confidence: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outlook {
    pub recent_days: f64,
    pub baseline_days: f64,
    pub delta: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Watch {
    pub revision_days: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonteCarlo {
    pub draws: u32,
    /// Lower and upper percentile of the band, e.g. `[10, 90]`.
    pub band: (f64, f64),
}

/// The value metrics the scorer knows how to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueMetric {
    PricePercentile,
    UsdPerValidKib,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueRules {
    pub inside_score: bool,
    pub metrics: Vec<ValueMetric>,
    /// Prose; the scorer implements it as: same category, R4 and R5 pass rates >= 0.8.
    pub price_percentile_among: String,
}

/// How the capped score reads as a chance of a failed paid call: `points` are `(score, rate)`,
/// scores strictly increasing in 0..=100, rates in 0..=1 and non-increasing (a higher score never
/// predicts more failures); between points the rate is interpolated linearly, outside them it is
/// the nearest point's.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// The window after the score in which a paid call is predicted to fail.
    pub horizon_days: u32,
    pub points: Vec<(f64, f64)>,
}

impl Calibration {
    /// The predicted failure rate at a capped score.
    pub fn rate_at(&self, score: f64) -> f64 {
        predicted_rate(&self.points, score)
    }
}

/// Linear interpolation in `points` (`(score, rate)`, scores increasing), clamped at both ends.
pub fn predicted_rate(points: &[(f64, f64)], score: f64) -> f64 {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return 0.0;
    };
    if score.is_nan() || score <= first.0 {
        return first.1;
    }
    if score >= last.0 {
        return last.1;
    }
    for pair in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
        if score <= x1 {
            return y0 + (score - x0) / (x1 - x0) * (y1 - y0);
        }
    }
    last.1
}

/// A validated rubric and the SHA-256 of the bytes it was read from. It is read straight from the file
/// (unknown fields refused); the two fields the file does not carry are set after validation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rubric {
    pub schema: String,
    pub id: String,
    pub version: String,
    pub title: String,
    pub description: String,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub notes: Option<String>,
    pub subject_types: Vec<String>,
    pub dimensions: Vec<Dimension>,
    pub decay: Decay,
    pub checks: Vec<Check>,
    pub gates: Vec<Gate>,
    pub grades: Vec<GradeStep>,
    pub confidence: Vec<ConfidenceStep>,
    pub verdict: VerdictRules,
    pub outlook: Outlook,
    pub watch: Watch,
    pub monte_carlo: MonteCarlo,
    pub value: ValueRules,
    #[serde(default)]
    pub changelog: Vec<String>,
    /// The fitted mapping of the capped score to a predicted paid-call failure rate (written by
    /// `x402-probe recalibrate` into a proposal; absent in the draft).
    #[serde(default)]
    pub calibration: Option<Calibration>,
    #[serde(skip)]
    major_version: u64,
    #[serde(skip)]
    sha256: String,
}

/// The schema identifier this scorer understands.
pub const SUPPORTED_SCHEMA: &str = "swarmmemo.rubric/1";

impl Rubric {
    /// Parse and validate a rubric file; the id is the SHA-256 of exactly these bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Rubric, RubricError> {
        let mut rubric: Rubric = serde_json::from_slice(bytes)?;
        rubric.major_version = validate::major_version(&rubric.version)?;
        validate::validate(&rubric)?;
        rubric.sha256 = hex::encode(Sha256::digest(bytes));
        Ok(rubric)
    }

    /// The rubric embedded in the binary (`rubrics/x402-endpoint.json`).
    pub fn embedded_default() -> Rubric {
        // The embedded file is validated by a unit test, so this cannot fail in a built binary.
        Rubric::from_bytes(EMBEDDED_DEFAULT).expect("the embedded rubric is valid")
    }

    /// Lowercase hex SHA-256 of the rubric file's bytes: the rubric's content address.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The major version (`1` for `1.0.0-draft.1`); scores across major versions never compare.
    pub fn major_version(&self) -> u64 {
        self.major_version
    }

    pub fn check(&self, id: CheckId) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }

    pub fn dimension(&self, id: &str) -> Option<&Dimension> {
        self.dimensions.iter().find(|d| d.id == id)
    }

    /// Half-life in days of a check's evidence: its own override, else the decay of its kind.
    pub fn half_life_days(&self, check: &Check) -> f64 {
        check.half_life_days.unwrap_or(match check.kind {
            Kind::Free => self.decay.free,
            Kind::Paid => self.decay.paid,
        })
    }

    /// The grade of a (capped) score: the first step whose `min` it reaches.
    pub fn grade_for(&self, score: f64) -> &str {
        self.grades
            .iter()
            .find(|g| score >= g.min)
            .or(self.grades.last())
            .map(|g| g.grade.as_str())
            .unwrap_or("")
    }

    /// The confidence level of a band width: the first step whose `max_width` it does not exceed.
    pub fn confidence_for(&self, width: f64) -> &str {
        self.confidence
            .iter()
            .find(|c| width <= c.max_width)
            .or(self.confidence.last())
            .map(|c| c.level.as_str())
            .unwrap_or("")
    }
}

/// The major version of a semantic version string (`"1.0.0-draft.1"` -> 1).
pub fn major_version_of(version: &str) -> Result<u64, RubricError> {
    validate::major_version(version)
}

#[cfg(test)]
mod tests;
