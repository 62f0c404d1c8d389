//! The shared vocabulary of evidence: what one check concluded from one probe run, and the receipt
//! that lets anyone see what was looked at.

use serde::{Deserialize, Serialize};

pub use check_id::{CheckId, UnknownCheck};

pub mod chain;
pub mod check_id;
pub mod declared;
pub mod decode;
pub mod free;
pub mod http;
pub mod mcp;
pub mod paid;
pub mod peers;
pub mod reference;
pub mod run;
pub mod svm;
pub mod usd;

/// What one check concluded from one probe run.
///
/// `Unmeasured` means *we* could not look (our RPC down, our network down, a paid check in a free
/// run): it is never a fail and never an `na`, and it records nothing against the subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Pass,
    Fail,
    /// The check does not apply to this subject (e.g. H4 with no linked wallet).
    Na,
    /// We could not look; says nothing about the subject.
    Unmeasured,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Na => "na",
            Outcome::Unmeasured => "unmeasured",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Outcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pass" => Ok(Outcome::Pass),
            "fail" => Ok(Outcome::Fail),
            "na" => Ok(Outcome::Na),
            "unmeasured" => Ok(Outcome::Unmeasured),
            other => Err(format!(
                "unknown outcome {other:?} (pass, fail, na, unmeasured)"
            )),
        }
    }
}

/// What was seen, so a reader can check the conclusion: hashes of the bytes, the transaction, the
/// vantage and the time. Bytes themselves are kept in the ledger, addressed by these hashes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// Where the observation was made from (this daemon's vantage name).
    pub vantage: String,
    /// When it was made, RFC 3339 UTC.
    pub at: String,
    /// `label -> sha256 hex` of each byte string the check looked at (e.g. `402.body`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sha256: std::collections::BTreeMap<String, String>,
    /// The settlement transaction, for paid checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx: Option<String>,
    /// Check-specific facts (the rule that fired, the fields compared, the block read...).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub detail: serde_json::Value,
}

/// One check's conclusion from one probe run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// Rubric check id, e.g. `R1`.
    pub id: CheckId,
    pub outcome: Outcome,
    /// One line a human can read: what was seen, or why it was not measured.
    pub evidence: String,
    /// For curve checks: the measured value (milliseconds) that the rubric's curve maps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    pub receipt: Receipt,
}

/// What a pure check function returns: the outcome, one readable line, and structured detail for the
/// receipt. The caller (who knows the vantage, the time and the bytes) wraps it into a [`CheckResult`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conclusion {
    pub outcome: Outcome,
    pub evidence: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub detail: serde_json::Value,
}

impl Conclusion {
    pub fn new(outcome: Outcome, evidence: impl Into<String>) -> Self {
        Conclusion {
            outcome,
            evidence: evidence.into(),
            value: None,
            detail: serde_json::Value::Null,
        }
    }
    pub fn pass(evidence: impl Into<String>) -> Self {
        Self::new(Outcome::Pass, evidence)
    }
    pub fn fail(evidence: impl Into<String>) -> Self {
        Self::new(Outcome::Fail, evidence)
    }
    pub fn na(evidence: impl Into<String>) -> Self {
        Self::new(Outcome::Na, evidence)
    }
    pub fn unmeasured(reason: impl Into<String>) -> Self {
        Self::new(Outcome::Unmeasured, reason)
    }
    pub fn with_detail(mut self, detail: serde_json::Value) -> Self {
        self.detail = detail;
        self
    }
    pub fn with_value(mut self, value: f64) -> Self {
        self.value = Some(value);
        self
    }
}

/// Unix seconds as RFC 3339 UTC (`2026-11-29T22:45:01Z`); out-of-range values clamp to the epoch.
pub fn rfc3339(unix: i64) -> String {
    let t =
        time::OffsetDateTime::from_unix_timestamp(unix).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let f = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    t.format(&f).unwrap_or_default()
}

/// sha256 of bytes, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
