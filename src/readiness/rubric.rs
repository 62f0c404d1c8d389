//! The agent-readiness rubric file (seed 000, `rubrics/agent-readiness.json`): typed, validated,
//! content-addressed like the x402-endpoint rubric. Its shape is its own (not `swarmmemo.rubric/1`):
//! five dimensions scored on ladders, two bonuses, safety penalties by kind, bands. Unknown fields
//! are refused for the same reason as there: a field we do not read could change a score's meaning.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The agent-readiness rubric shipped with the binary, byte for byte.
pub const EMBEDDED: &[u8] = include_bytes!("../../rubrics/agent-readiness.json");

/// The id the report, the API and the pages name this rubric by.
pub const RUBRIC_ID: &str = "agent-readiness";

/// Why an agent-readiness rubric file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReadinessRubricError {
    #[error("the agent-readiness rubric is not valid JSON of the expected shape: {0}")]
    Parse(#[from] serde_json::Error),
    #[error("the agent-readiness rubric is invalid: {0}")]
    Invalid(String),
}

/// The five dimensions of seed 000, in the file's order.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    Access,
    Payment,
    Interface,
    Completion,
    Docs,
}

impl Dimension {
    pub const ALL: [Dimension; 5] = [
        Dimension::Access,
        Dimension::Payment,
        Dimension::Interface,
        Dimension::Completion,
        Dimension::Docs,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Access => "access",
            Dimension::Payment => "payment",
            Dimension::Interface => "interface",
            Dimension::Completion => "completion",
            Dimension::Docs => "docs",
        }
    }

    /// How many steps this build expects on the dimension's ladder. Evidence names a step by its
    /// place on the ladder (0 = the top), so a ladder of another length is another rubric.
    fn ladder_len(self) -> usize {
        match self {
            Dimension::Access => 5,
            Dimension::Payment => 6,
            Dimension::Interface => 6,
            Dimension::Completion => 4,
            Dimension::Docs => 4,
        }
    }
}

/// The bonuses of seed 000.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum BonusId {
    PermissiveTos,
    SecurityPosture,
}

/// How bad a safety finding is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Critical,
    Severe,
    Moderate,
    Minor,
}

/// The kinds of safety finding seed 000 names, each with its severity in the file.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum SafetyKind {
    PromptInjection,
    KeyRequest,
    UnboundedApproval,
    EnvProbe,
    Overcharge,
    MaliciousPayload,
    HiddenText,
    ThirdPartyCredRequest,
    PlaintextSecret,
    Tls,
    OauthScope,
    ExcessPii,
    Pricing,
    RoachMotel,
    InfoLeak,
    SessionHygiene,
    MixedContent,
}

impl SafetyKind {
    const COUNT: usize = 17;

    pub fn as_str(self) -> &'static str {
        match self {
            SafetyKind::PromptInjection => "prompt-injection",
            SafetyKind::KeyRequest => "key-request",
            SafetyKind::UnboundedApproval => "unbounded-approval",
            SafetyKind::EnvProbe => "env-probe",
            SafetyKind::Overcharge => "overcharge",
            SafetyKind::MaliciousPayload => "malicious-payload",
            SafetyKind::HiddenText => "hidden-text",
            SafetyKind::ThirdPartyCredRequest => "third-party-cred-request",
            SafetyKind::PlaintextSecret => "plaintext-secret",
            SafetyKind::Tls => "tls",
            SafetyKind::OauthScope => "oauth-scope",
            SafetyKind::ExcessPii => "excess-pii",
            SafetyKind::Pricing => "pricing",
            SafetyKind::RoachMotel => "roach-motel",
            SafetyKind::InfoLeak => "info-leak",
            SafetyKind::SessionHygiene => "session-hygiene",
            SafetyKind::MixedContent => "mixed-content",
        }
    }
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Severe => "severe",
            Severity::Moderate => "moderate",
            Severity::Minor => "minor",
        }
    }
}

/// The bands of seed 000 (the scored ones and the zero bands).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum BandName {
    Native,
    Ready,
    Friction,
    HumanGated,
    Unverified,
    AgentProhibited,
    Hostile,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub points: u32,
    #[serde(default)]
    pub requires: Option<String>,
    pub condition: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DimensionDef {
    pub weight: u32,
    pub principle: String,
    pub ladder: Vec<Step>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Dimensions {
    access: DimensionDef,
    payment: DimensionDef,
    interface: DimensionDef,
    completion: DimensionDef,
    docs: DimensionDef,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bonus {
    pub id: BonusId,
    pub points: u32,
    pub condition: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Critical {
    effect: String,
    band: BandName,
    #[allow(dead_code)]
    note: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Penalty {
    points: i32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Severities {
    critical: Critical,
    severe: Penalty,
    moderate: Penalty,
    minor: Penalty,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Safety {
    #[allow(dead_code)]
    note: String,
    severities: Severities,
    kinds: BTreeMap<SafetyKind, Severity>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandDef {
    pub band: BandName,
    pub min: Option<u32>,
    pub max: Option<u32>,
    pub meaning: String,
}

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    rubric_version: String,
    #[allow(dead_code)]
    note: String,
    #[allow(dead_code)]
    baseline_agent: String,
    verification_line: u32,
    dimensions: Dimensions,
    bonuses: Vec<Bonus>,
    safety: Safety,
    bands: Vec<BandDef>,
    zero_bands: BTreeMap<BandName, String>,
    #[allow(dead_code)]
    supersedes: String,
    #[allow(dead_code)]
    changelog: Vec<String>,
}

/// A validated agent-readiness rubric.
#[derive(Debug, Clone)]
pub struct ReadinessRubric {
    pub version: String,
    /// The most a subject whose reference task failed can score.
    pub verification_line: u32,
    dimensions: BTreeMap<Dimension, DimensionDef>,
    pub bonuses: Vec<Bonus>,
    kinds: BTreeMap<SafetyKind, Severity>,
    /// The band a critical finding puts a subject in (`hostile`).
    pub critical_band: BandName,
    penalties: BTreeMap<Severity, i32>,
    /// The scored bands, highest first, each with its inclusive range.
    scored_bands: Vec<(BandName, u32, u32)>,
    sha256: String,
}

fn invalid(message: impl Into<String>) -> ReadinessRubricError {
    ReadinessRubricError::Invalid(message.into())
}

impl ReadinessRubric {
    /// Parse and validate; the id is the SHA-256 of exactly these bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<ReadinessRubric, ReadinessRubricError> {
        let file: File = serde_json::from_slice(bytes)?;
        if !file.rubric_version.starts_with("0.") {
            return Err(invalid(format!(
                "rubric_version {:?}: this build scores major version 0 only (scores under \
                 another major version are not comparable)",
                file.rubric_version
            )));
        }
        let d = file.dimensions;
        let dimensions = BTreeMap::from([
            (Dimension::Access, d.access),
            (Dimension::Payment, d.payment),
            (Dimension::Interface, d.interface),
            (Dimension::Completion, d.completion),
            (Dimension::Docs, d.docs),
        ]);
        let mut total = 0;
        for (dim, def) in &dimensions {
            total += def.weight;
            if def.ladder.len() != dim.ladder_len() {
                return Err(invalid(format!(
                    "dimension {} has {} ladder steps; this build reads {}",
                    dim.as_str(),
                    def.ladder.len(),
                    dim.ladder_len()
                )));
            }
            if def.ladder[0].points != def.weight {
                return Err(invalid(format!(
                    "dimension {}: its top step is worth {}, not its weight {}",
                    dim.as_str(),
                    def.ladder[0].points,
                    def.weight
                )));
            }
            if def.ladder.windows(2).any(|w| w[1].points > w[0].points) {
                return Err(invalid(format!(
                    "dimension {}: ladder points rise going down",
                    dim.as_str()
                )));
            }
        }
        if total != 100 {
            return Err(invalid(format!(
                "dimension weights add up to {total}, not 100"
            )));
        }
        let mut bonus_ids: Vec<BonusId> = file.bonuses.iter().map(|b| b.id).collect();
        bonus_ids.sort();
        bonus_ids.dedup();
        if bonus_ids.len() != file.bonuses.len() {
            return Err(invalid("a bonus is listed twice"));
        }
        if file.safety.kinds.len() != SafetyKind::COUNT {
            return Err(invalid(format!(
                "safety names {} kinds; this build knows {}",
                file.safety.kinds.len(),
                SafetyKind::COUNT
            )));
        }
        let s = &file.safety.severities;
        if s.critical.effect != "hard-zero" {
            return Err(invalid(format!(
                "critical effect {:?}: only hard-zero is understood",
                s.critical.effect
            )));
        }
        let penalties = BTreeMap::from([
            (Severity::Severe, s.severe.points),
            (Severity::Moderate, s.moderate.points),
            (Severity::Minor, s.minor.points),
        ]);
        if penalties.values().any(|p| *p >= 0) {
            return Err(invalid("a penalty is not negative"));
        }
        let mut scored_bands = Vec::new();
        for band in &file.bands {
            match (band.min, band.max) {
                (Some(min), Some(max)) if min <= max && max <= 100 => {
                    scored_bands.push((band.band, min, max))
                }
                (None, None) if band.band == BandName::Unverified => {}
                _ => {
                    return Err(invalid(format!(
                        "band {:?}: a scored band needs 0 <= min <= max <= 100, and only \
                         unverified has none",
                        band.band
                    )));
                }
            }
        }
        scored_bands.sort_by_key(|b| std::cmp::Reverse(b.1));
        if scored_bands.windows(2).any(|w| w[1].2 + 1 != w[0].1) || scored_bands.is_empty() {
            return Err(invalid("the scored bands leave a gap or overlap"));
        }
        if file.verification_line > 100 || !file.zero_bands.contains_key(&BandName::Unverified) {
            return Err(invalid(
                "verification_line above 100, or no unverified zero band",
            ));
        }
        Ok(ReadinessRubric {
            version: file.rubric_version,
            verification_line: file.verification_line,
            dimensions,
            bonuses: file.bonuses,
            kinds: file.safety.kinds,
            critical_band: s.critical.band,
            penalties,
            scored_bands,
            sha256: hex::encode(Sha256::digest(bytes)),
        })
    }

    /// The rubric embedded in the binary.
    pub fn embedded() -> ReadinessRubric {
        // Validated by a unit test, so this cannot fail in a built binary.
        ReadinessRubric::from_bytes(EMBEDDED).expect("the embedded agent-readiness rubric is valid")
    }

    /// Lowercase hex SHA-256 of the file's bytes.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    pub fn dimension(&self, dim: Dimension) -> &DimensionDef {
        &self.dimensions[&dim]
    }

    pub fn severity(&self, kind: SafetyKind) -> Severity {
        self.kinds[&kind]
    }

    /// The points a severity takes off (none for critical: it zeroes the score).
    pub fn penalty(&self, severity: Severity) -> Option<i32> {
        self.penalties.get(&severity).copied()
    }

    /// The scored band a score falls in, if any (seed 000's bands start at 1).
    pub fn band_of(&self, score: u32) -> Option<BandName> {
        self.scored_bands
            .iter()
            .find(|(_, min, max)| (*min..=*max).contains(&score))
            .map(|b| b.0)
    }
}
