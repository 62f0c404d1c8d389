//! The record of one probe run of one subject: who ran it, where from, when, what it saw (free and
//! paid observations) and what the checks concluded. This is what the ledger stores, the scorer's
//! history is built from, and reports print.

use serde::{Deserialize, Serialize};

use super::CheckResult;
use super::free::FreeObservation;
use super::paid::{PaidObservation, RefundSeen};

/// Whether a record describes real observations (seed 001: test data never passes for
/// observation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provenance {
    Live,
    SyntheticFixture,
    TestHarness,
}

impl Provenance {
    pub fn as_str(self) -> &'static str {
        match self {
            Provenance::Live => "live",
            Provenance::SyntheticFixture => "synthetic_fixture",
            Provenance::TestHarness => "test_harness",
        }
    }
}

/// A provenance name that is not one of `live`, `synthetic_fixture`, `test_harness`.
#[derive(Debug, thiserror::Error)]
#[error("unknown provenance {0:?} (expected live, synthetic_fixture or test_harness)")]
pub struct UnknownProvenance(pub String);

impl std::str::FromStr for Provenance {
    type Err = UnknownProvenance;
    fn from_str(s: &str) -> Result<Provenance, UnknownProvenance> {
        match s {
            "live" => Ok(Provenance::Live),
            "synthetic_fixture" => Ok(Provenance::SyntheticFixture),
            "test_harness" => Ok(Provenance::TestHarness),
            other => Err(UnknownProvenance(other.to_string())),
        }
    }
}

/// One run of one subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Unique per vantage: `<vantage>:<started_at_ms>:<subject hash prefix>`.
    pub id: String,
    pub subject: String,
    pub vantage: String,
    /// Our clock at the start and the end of the run, ms since the epoch.
    pub started_at_ms: i64,
    pub ended_at_ms: i64,
    pub provenance: Provenance,
    /// The subject's revision (see `checks::history`) this run was recorded under.
    pub revision: String,
    pub free: FreeObservation,
    pub paid: Option<PaidObservation>,
    /// Every rubric check once, in rubric order.
    pub results: Vec<CheckResult>,
}

impl RunRecord {
    /// Whether a payment was actually sent (a refusal sends nothing): only then do the paid
    /// results count as a paid call for the verdict.
    pub fn payment_sent(&self) -> bool {
        self.paid.as_ref().is_some_and(|p| p.payment_sent())
    }
}

/// A run as the ledger stores it (format 2): what was observed, and what its results derive to
/// instead of the results themselves (`ledger::stored` turns one into the other and back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredRun {
    pub id: String,
    pub subject: String,
    pub vantage: String,
    pub started_at_ms: i64,
    pub ended_at_ms: i64,
    pub provenance: Provenance,
    pub revision: String,
    /// The SHA-256 (hex) of the run's observation blob ([`StoredObservation`]): the entry
    /// names it, so its hash covers what was observed without hashing it again.
    pub observation: String,
    pub results: DerivedResults,
}

/// What a run observed, as its blob keeps it (JSON, compressed): the free observation and the
/// paid call, their bodies, header sets, certificate chains and listing kept apart as blobs of
/// their own (shared with every run that saw the same bytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredObservation {
    pub free: FreeObservation,
    pub paid: Option<PaidObservation>,
    /// The results the observation alone does not give (H2 and H3 compare with earlier runs),
    /// or that the checks derive otherwise, kept whole (the entry's results hash covers them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<CheckResult>,
}

/// What a stored run's results are: derived again from its observation on read, and proven to be
/// the published ones by their hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DerivedResults {
    /// The checks' version and the rubric they ran under (`ledger::stored::checks_version`).
    pub checks: String,
    /// One letter per result in rubric order: `p`ass, `f`ail, `n`a, `u`nmeasured.
    pub outcomes: String,
    /// SHA-256 of the results' RFC 8785 JSON (every result, receipts included).
    pub sha256: String,
    /// The observation's `kept` is every result (the checks gave other ids or another order).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_kept: bool,
}

/// The refund watch of an earlier run's paid call, when it ends (a job of its own).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefundRecord {
    /// The run whose paid call is watched.
    pub run_id: String,
    pub subject: String,
    /// The revision the run was recorded under (the H9 entry keeps it).
    pub revision: String,
    pub at_ms: i64,
    pub refund: RefundSeen,
    /// H9 re-evaluated over the run's paid observation with this refund side.
    pub result: CheckResult,
}

/// A stable id for a run: vantage, start time and a hash of the subject.
pub fn run_id(vantage: &str, subject: &str, started_at_ms: i64) -> String {
    let hash = super::sha256_hex(subject.as_bytes());
    format!("{vantage}:{started_at_ms}:{}", &hash[..12])
}
