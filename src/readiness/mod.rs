//! The agent-readiness score (seed 000, `rubrics/agent-readiness.json`): how much an agent needs
//! beyond a wallet and HTTP to use a subject. A second rubric beside the x402-endpoint one, never
//! mixed into it: its own file, its own document, shown beside the score.
//!
//! Pure: [`assess`] is arithmetic over a typed [`Evidence`] (which ladder step each dimension's
//! evidence decides, or why it cannot; bonuses; safety findings with the receipts behind them).
//! Where the evidence comes from is [`evidence`]: a probe run's check results (`from_checks`).
//! Decisions are in `rubrics/README.md` ("Agent readiness").

pub mod evidence;
pub mod rubric;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Serialize, Serializer};

use crate::evidence::CheckId;
pub use rubric::{
    BandName, BonusId, Dimension, RUBRIC_ID, ReadinessRubric, ReadinessRubricError, SafetyKind,
    Severity,
};

/// The assessment document's format id.
pub const FORMAT: &str = "x402-probe.agent-readiness/1";

/// What the evidence says about one dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// The ladder step it decides (0 = the top), or `None`: the evidence cannot decide one.
    pub step: Option<usize>,
    /// Why, in one line.
    pub because: String,
    /// The checks it was read from.
    pub checks: Vec<CheckId>,
}

impl Reading {
    pub fn decided(step: usize, because: impl Into<String>, checks: &[CheckId]) -> Reading {
        Reading {
            step: Some(step),
            because: because.into(),
            checks: checks.to_vec(),
        }
    }

    pub fn unmeasured(because: impl Into<String>, checks: &[CheckId]) -> Reading {
        Reading {
            step: None,
            because: because.into(),
            checks: checks.to_vec(),
        }
    }
}

/// What the evidence says about one bonus: granted, not granted, or not known.
#[derive(Debug, Clone, PartialEq)]
pub struct BonusReading {
    pub granted: Option<bool>,
    pub because: String,
}

/// One safety finding, with the evidence it rests on (seed 000: every penalty requires evidence).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SafetyFinding {
    pub kind: SafetyKind,
    #[schemars(with = "String")]
    pub check: CheckId,
    /// SHA-256 of the check's receipt (RFC 8785), as the ledger's history names it.
    pub receipt_sha256: String,
    /// What was seen (a rule id, a status), one line.
    pub what: String,
}

/// Everything [`assess`] reads: one typed struct.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    /// A dimension missing here is unmeasured.
    pub dimensions: BTreeMap<Dimension, Reading>,
    /// A bonus missing here is not known.
    pub bonuses: BTreeMap<BonusId, BonusReading>,
    pub findings: Vec<SafetyFinding>,
}

/// The band shown: one of the rubric's, or `unmeasured` when the evidence leaves the score
/// spanning two bands of a completed probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssessedBand {
    Band(BandName),
    Unmeasured,
}

impl AssessedBand {
    pub fn as_str(self) -> &'static str {
        match self {
            AssessedBand::Band(BandName::Native) => "native",
            AssessedBand::Band(BandName::Ready) => "ready",
            AssessedBand::Band(BandName::Friction) => "friction",
            AssessedBand::Band(BandName::HumanGated) => "human-gated",
            AssessedBand::Band(BandName::Unverified) => "unverified",
            AssessedBand::Band(BandName::AgentProhibited) => "agent-prohibited",
            AssessedBand::Band(BandName::Hostile) => "hostile",
            AssessedBand::Unmeasured => "unmeasured",
        }
    }
}

impl Serialize for AssessedBand {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Whether a dimension or bonus was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Decided,
    Unmeasured,
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct RubricRef {
    pub id: &'static str,
    pub version: String,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct DimensionScore {
    pub dimension: Dimension,
    pub weight: u32,
    pub state: State,
    /// The decided step's points; null when unmeasured.
    pub points: Option<u32>,
    /// The decided step's condition, as the rubric words it.
    pub condition: Option<String>,
    pub because: String,
    #[schemars(with = "Vec<String>")]
    pub checks: Vec<CheckId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct BonusScore {
    pub id: BonusId,
    pub state: State,
    /// What it adds: its points when granted, 0 when not; null when not known.
    pub points: Option<u32>,
    pub because: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Penalty {
    #[serde(flatten)]
    pub finding: SafetyFinding,
    pub severity: Severity,
    /// Points taken off; null for a critical finding (the score is zero).
    pub points: Option<i32>,
}

/// The score as the evidence bounds it: `low` counts every unmeasured step and bonus as nothing,
/// `high` as the most it could be. Equal when everything was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Range {
    pub low: u32,
    pub high: u32,
}

/// The agent-readiness assessment of one subject.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Assessment {
    pub format: &'static str,
    pub rubric: RubricRef,
    pub dimensions: Vec<DimensionScore>,
    pub bonuses: Vec<BonusScore>,
    pub penalties: Vec<Penalty>,
    /// Dimensions and bonuses added up, before the cap at 100, the verification line and
    /// penalties.
    pub sum: Range,
    pub range: Range,
    /// The score, when the evidence decides it (`range.low == range.high`).
    pub score: Option<u32>,
    /// Whether the reference task was completed: null while completion is unmeasured (the probe
    /// did not complete), false when it failed or was blocked.
    pub completed: Option<bool>,
    /// True when a failed reference task held the score at the verification line.
    pub verification_capped: bool,
    /// native, ready, friction, human-gated, unverified, agent-prohibited, hostile or unmeasured.
    #[schemars(with = "String")]
    pub band: AssessedBand,
    /// While `unverified`: the band the rest of the evidence points to, a lead and never a claim
    /// (null when its range spans two bands).
    pub provisional_band: Option<BandName>,
}

/// Score `evidence` under `rubric`. Order: dimensions and bonuses added, the sum held at 100, a
/// failed reference task held at the verification line, then the penalties, floored at 0; a
/// critical finding makes it 0 and the band `hostile`.
pub fn assess(rubric: &ReadinessRubric, evidence: &Evidence) -> Assessment {
    let mut dimensions = Vec::new();
    let (mut low, mut high) = (0u32, 0u32);
    for dim in Dimension::ALL {
        let def = rubric.dimension(dim);
        let reading = evidence.dimensions.get(&dim);
        // A step the ladder does not have decides nothing.
        let step = reading.and_then(|r| r.step).and_then(|i| def.ladder.get(i));
        match step {
            Some(step) => {
                low += step.points;
                high += step.points;
            }
            None => high += def.weight,
        }
        dimensions.push(DimensionScore {
            dimension: dim,
            weight: def.weight,
            state: if step.is_some() {
                State::Decided
            } else {
                State::Unmeasured
            },
            points: step.map(|s| s.points),
            condition: step.map(|s| s.condition.clone()),
            because: reading.map_or_else(
                || "no evidence this build collects decides it".to_string(),
                |r| r.because.clone(),
            ),
            checks: reading.map(|r| r.checks.clone()).unwrap_or_default(),
        });
    }
    let mut bonuses = Vec::new();
    for bonus in &rubric.bonuses {
        let reading = evidence.bonuses.get(&bonus.id);
        let granted = reading.and_then(|r| r.granted);
        match granted {
            Some(true) => {
                low += bonus.points;
                high += bonus.points;
            }
            Some(false) => {}
            None => high += bonus.points,
        }
        bonuses.push(BonusScore {
            id: bonus.id,
            state: if granted.is_some() {
                State::Decided
            } else {
                State::Unmeasured
            },
            points: granted.map(|g| if g { bonus.points } else { 0 }),
            because: reading.map_or_else(
                || "no evidence this build collects decides it".to_string(),
                |r| r.because.clone(),
            ),
        });
    }
    let sum = Range { low, high };
    let mut range = Range {
        low: low.min(100),
        high: high.min(100),
    };
    let completion = dimensions
        .iter()
        .find(|d| d.dimension == Dimension::Completion)
        .and_then(|d| d.points);
    let completed = completion.map(|p| p > 0);
    let verification_capped = completed == Some(false) && range.high > rubric.verification_line;
    if completed == Some(false) {
        range.low = range.low.min(rubric.verification_line);
        range.high = range.high.min(rubric.verification_line);
    }
    let penalties: Vec<Penalty> = evidence
        .findings
        .iter()
        .map(|f| {
            let severity = rubric.severity(f.kind);
            Penalty {
                finding: f.clone(),
                severity,
                points: rubric.penalty(severity),
            }
        })
        .collect();
    let critical = penalties.iter().any(|p| p.severity == Severity::Critical);
    let off: i64 = penalties
        .iter()
        .filter_map(|p| p.points)
        .map(i64::from)
        .sum();
    let floor = |x: u32| (i64::from(x) + off).max(0) as u32;
    range = if critical {
        Range { low: 0, high: 0 }
    } else {
        Range {
            low: floor(range.low),
            high: floor(range.high),
        }
    };
    let span = rubric
        .band_of(range.low)
        .filter(|b| Some(*b) == rubric.band_of(range.high));
    let (band, provisional_band) = if critical {
        (AssessedBand::Band(rubric.critical_band), None)
    } else if completed.is_none() {
        (AssessedBand::Band(BandName::Unverified), span)
    } else {
        (
            span.map_or(AssessedBand::Unmeasured, AssessedBand::Band),
            None,
        )
    };
    Assessment {
        format: FORMAT,
        rubric: RubricRef {
            id: RUBRIC_ID,
            version: rubric.version.clone(),
            sha256: rubric.sha256().to_string(),
        },
        dimensions,
        bonuses,
        penalties,
        sum,
        range,
        score: (range.low == range.high).then_some(range.low),
        completed,
        verification_capped,
        band,
        provisional_band,
    }
}
