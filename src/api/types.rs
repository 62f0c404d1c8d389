//! The public API's request and answer types: what the handlers (`v1.rs`) serialise, what the
//! in-memory view (`view.rs`) builds, and what the OpenAPI document (`openapi.rs`) describes
//! with schemars. One definition for all three, in a module that imports none of them.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::store::SubjectState;

/// A verdict, as the rubric defines them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Ok,
    Caution,
    Avoid,
    Down,
    Unverified,
}

impl From<crate::rubric::Verdict> for Verdict {
    fn from(v: crate::rubric::Verdict) -> Verdict {
        match v {
            crate::rubric::Verdict::Ok => Verdict::Ok,
            crate::rubric::Verdict::Caution => Verdict::Caution,
            crate::rubric::Verdict::Avoid => Verdict::Avoid,
            crate::rubric::Verdict::Down => Verdict::Down,
            crate::rubric::Verdict::Unverified => Verdict::Unverified,
        }
    }
}

/// Where a subject's recent scores are heading, against its longer baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trend {
    Improving,
    Stable,
    Declining,
    Unknown,
}

/// Whether a subject is still probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SubjectStateView {
    Active,
    Delisted,
    Removed,
    /// Paused by an admin: not probed until resumed.
    Paused,
}

impl From<SubjectState> for SubjectStateView {
    fn from(s: SubjectState) -> Self {
        match s {
            SubjectState::Active => SubjectStateView::Active,
            SubjectState::Delisted => SubjectStateView::Delisted,
            SubjectState::Removed => SubjectStateView::Removed,
            SubjectState::Paused => SubjectStateView::Paused,
        }
    }
}

/// The score's uncertainty band (percentiles of the simulated draws).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BandView {
    pub low: f64,
    pub high: f64,
}

/// The outlook block: recent against baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OutlookView {
    pub trend: Trend,
    /// Recent minus baseline, in points (absent when unknown).
    pub delta: Option<f64>,
}

/// Whether the subject is on watch, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WatchView {
    pub on_watch: bool,
    /// The reasons' codes.
    pub reasons: Vec<String>,
}

/// What the subject's answers are worth for their price, among its category's peers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ValueView {
    /// The declared price of one call, USD.
    pub price_usd: Option<f64>,
    /// Its price's percentile among peers (lower is cheaper).
    pub price_percentile: Option<f64>,
    pub usd_per_valid_kib: Option<f64>,
    pub peers: u64,
}

/// The latest score of a subject, summarised (the signed document has every detail).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScoreSummaryView {
    /// When the score was computed (RFC 3339).
    pub as_of: String,
    /// 0..100, before any gate's cap.
    pub score: f64,
    /// 0..100, what the grade reads (gates applied).
    pub capped_score: f64,
    pub band: BandView,
    /// The grade, once verified; else the provisional grade with `grade_provisional` true.
    pub grade: Option<String>,
    pub grade_provisional: bool,
    pub verdict: Verdict,
    /// `high`, `medium` or `low` (the rubric's confidence levels, by band width).
    pub confidence: String,
    pub outlook: OutlookView,
    pub watch: WatchView,
    pub value: ValueView,
    /// The rubric it was scored under (SHA-256 of the rubric file).
    pub rubric_sha256: String,
    /// The ledger entry that published it.
    pub ledger_seq: u64,
    /// SHA-256 of the signed document (as in the ledger's `score` entry).
    pub document_sha256: String,
}

/// A subject and its latest score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SubjectSummary {
    /// Stable id: hex of the first 16 bytes of SHA-256 of the URL.
    pub id: String,
    pub url: String,
    pub category: String,
    pub state: SubjectStateView,
    /// The subject's current revision (`r0`, `r1`...), once one was seen.
    pub revision: Option<String>,
    /// Absent until the first run is scored.
    pub latest: Option<ScoreSummaryView>,
    /// Where this subject's signed score document is.
    pub score_url: String,
}

/// One page of subjects.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SubjectPage {
    /// Subjects matching the filters, all pages together.
    pub total: usize,
    pub offset: usize,
    pub limit: usize,
    /// The `offset` of the next page, when there is one.
    pub next_offset: Option<usize>,
    pub subjects: Vec<SubjectSummary>,
}

/// How the subject list is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SortKey {
    /// By capped score (unscored subjects last).
    #[default]
    Score,
    Id,
    Url,
    Category,
    /// By the latest score's time.
    AsOf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    Asc,
    #[default]
    Desc,
}

/// Most subjects on one page.
pub const MAX_PAGE: usize = 500;
pub(crate) const DEFAULT_PAGE: usize = 100;

/// The subject list's query parameters.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubjectQuery {
    pub verdict: Option<Verdict>,
    /// A grade letter (matches provisional grades too).
    pub grade: Option<String>,
    pub category: Option<String>,
    pub sort: Option<SortKey>,
    pub order: Option<Order>,
    /// 1 ..= 500 (default 100).
    pub limit: Option<usize>,
    /// Subjects to skip (from `next_offset`).
    pub offset: Option<usize>,
}

/// One day of a subject's scores: the last score of that UTC day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DailyScore {
    /// `YYYY-MM-DD` (UTC).
    pub day: String,
    pub as_of: String,
    pub score: f64,
    pub capped_score: f64,
    pub band: BandView,
    pub grade: Option<String>,
    pub grade_provisional: bool,
    pub verdict: Verdict,
    pub confidence: String,
    pub on_watch: bool,
    pub ledger_seq: u64,
    pub document_sha256: String,
}

/// A subject's daily scores, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ScoreHistory {
    pub subject_id: String,
    pub url: String,
    pub days: Vec<DailyScore>,
}

/// A subject's agent readiness (seed 000, `rubrics/agent-readiness.json`): a second rubric,
/// beside the x402-endpoint score and never mixed into it, read from the last result of each of
/// the subject's checks in the ledger.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SubjectReadiness {
    pub subject_id: String,
    pub url: String,
    /// The last ledger entry read.
    pub through_seq: u64,
    pub readiness: crate::readiness::Assessment,
}

/// A subject's findings (`probes/findings/`: facts other x402 tools publish, never scored) and
/// whose its failed paid checks and `unmeasured` results are
/// (`probes/attribution.md`), read from its ledger entries.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SubjectFindings {
    pub subject_id: String,
    pub url: String,
    /// The last ledger entry read.
    pub through_seq: u64,
    /// The last of each finding (a measured one is kept over a later `unmeasured`); the payTo
    /// collision read across every subject's latest payTo.
    pub findings: Vec<FindingShown>,
    /// Whose each check's last result is, when it is a failed paid check or `unmeasured` (the
    /// last result of each check as the receipts keep it: a measured one over a later
    /// `unmeasured`).
    pub parties: Vec<PartyShown>,
    /// How many each party has among those results (every party named).
    pub party_counts: BTreeMap<String, PartyCountShown>,
}

/// One finding with its receipt.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FindingShown {
    /// `described`, `resource_url`, `browser_paywall`, `known_facilitator`, `payto_collision`
    /// or `pay_then_refused`.
    pub id: String,
    /// `pass` (the good fact holds), `fail`, `na` or `unmeasured`.
    pub outcome: String,
    pub evidence: String,
    pub vantage: String,
    /// RFC 3339 UTC.
    pub at: String,
    /// The transaction, for the paid findings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx: Option<String>,
    /// SHA-256 of each byte string looked at.
    pub sha256: BTreeMap<String, String>,
    /// Finding-specific facts.
    pub detail: serde_json::Value,
}

/// One result's party.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PartyShown {
    /// The check, e.g. `R4` (a failed paid check, or an `unmeasured` result).
    pub check: String,
    /// `seller`, `facilitator`, `chain` or `us`.
    pub party: String,
    /// The evidence that decided it.
    pub why: String,
}

/// One party's share of a run's failed paid checks and `unmeasured` results.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
pub struct PartyCountShown {
    pub failed: usize,
    pub unmeasured: usize,
}

impl SubjectFindings {
    pub(crate) fn new(
        subject_id: String,
        url: String,
        through_seq: u64,
        findings: &[crate::checks::findings::Finding],
        parties: &BTreeMap<crate::evidence::CheckId, crate::checks::attribution::Attribution>,
        counts: &BTreeMap<
            crate::checks::attribution::Party,
            crate::checks::attribution::PartyCount,
        >,
    ) -> SubjectFindings {
        SubjectFindings {
            subject_id,
            url,
            through_seq,
            findings: findings
                .iter()
                .map(|f| FindingShown {
                    id: f.id.as_str().to_string(),
                    outcome: f.outcome.as_str().to_string(),
                    evidence: f.evidence.clone(),
                    vantage: f.receipt.vantage.clone(),
                    at: f.receipt.at.clone(),
                    tx: f.receipt.tx.clone(),
                    sha256: f.receipt.sha256.clone(),
                    detail: f.receipt.detail.clone(),
                })
                .collect(),
            parties: parties
                .iter()
                .map(|(id, a)| PartyShown {
                    check: id.as_str().to_string(),
                    party: a.party.as_str().to_string(),
                    why: a.why.clone(),
                })
                .collect(),
            party_counts: counts
                .iter()
                .map(|(p, c)| {
                    (
                        p.as_str().to_string(),
                        PartyCountShown {
                            failed: c.failed,
                            unmeasured: c.unmeasured,
                        },
                    )
                })
                .collect(),
        }
    }
}

/// A window in which a part of ours was out: our vantage (free outcomes inside it count against
/// nobody) or our RPC (the checks that read the chain, C3, count against nobody).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OutageView {
    pub from: String,
    /// Absent while the window is open.
    pub to: Option<String>,
    pub open: bool,
    /// `vantage` (the control failing, or declared) or `rpc` (our RPC failing run after run).
    pub of: crate::ledger::record::OutageOf,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OutageList {
    pub outages: Vec<OutageView>,
}

/// A rubric the daemon can serve, by the SHA-256 of its file.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RubricRef {
    pub sha256: String,
    pub id: String,
    pub version: String,
    /// The rubric new scores are computed under.
    pub current: bool,
    /// Where the file is, byte for byte.
    pub url: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RubricList {
    pub rubrics: Vec<RubricRef>,
}

/// A signed checkpoint of the ledger: ed25519 by the reporter key over
/// `"x402-probe.checkpoint/1\n" + seq + "\n" + hash` (decimal seq, hex hash).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointView {
    pub seq: u64,
    /// The SHA-256 chain hash of entry `seq` (hex).
    pub hash: String,
    pub at: String,
    pub public_key: String,
    pub signature: String,
}

/// The ledger's head: its last entry's number and chain hash, and the last signed checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LedgerHead {
    pub seq: u64,
    pub hash: String,
    pub checkpoint: Option<CheckpointView>,
}

/// The latest tree checkpoint: the Merkle root of the first `size` entries, signed by the
/// reporter key as a C2SP signed note (`x402-probe/<key id>`, size, root, `time <unix>`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TreeHead {
    pub size: u64,
    pub at: String,
    /// The signed note, byte for byte.
    pub note: String,
    /// The reporter's verifier key in the signed-note text form (`name+id+key`): compare it with
    /// `/v1/key` or the key you already trust.
    pub verifier_key: String,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsistencyQuery {
    /// The older tree size (a checkpoint you hold).
    pub from: u64,
    /// The newer tree size (default: the latest tree checkpoint's); at most that.
    pub to: Option<u64>,
}

/// The RFC 9162 consistency proof that the tree of `to` entries extends the tree of `from`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ConsistencyView {
    pub from: u64,
    pub to: u64,
    /// The proof's hashes, standard base64, in RFC 9162 order.
    pub proof: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointList {
    pub checkpoints: Vec<CheckpointView>,
    /// The `after` of the next page, when there is one.
    pub next_after: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointQuery {
    /// Only checkpoints with `seq` above this.
    pub after: Option<u64>,
    /// 1 ..= 500 (default 100).
    pub limit: Option<usize>,
}

/// The signature algorithm of the reporter key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyAlgorithm {
    Ed25519,
}

/// The reporter key: what signed scores and checkpoints verify against.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReporterKeyView {
    pub algorithm: KeyAlgorithm,
    /// 32 bytes, hex.
    pub public_key: String,
    /// The prefixes of the messages it signs (one per kind), each followed by a newline.
    pub signs: Vec<String>,
}

/// A subject's next free run.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DueRun {
    pub subject_id: String,
    pub url: String,
    pub due: String,
}

/// A subject an admin paused: kept, not probed until resumed.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PausedSubject {
    pub subject_id: String,
    pub url: String,
}

/// What paid calls may still spend in the current 24 hours (open reservations counted).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BudgetView {
    pub cap_usd: String,
    pub spent_usd: String,
    pub left_usd: String,
    pub open_reservations: usize,
}

/// The daemon's view of itself.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StatusView {
    /// The daemon's clock (simulated in tests and `daemon --lab --days`).
    pub now: String,
    pub simulated: bool,
    pub runs_in_flight: usize,
    /// Subjects by state (`active`, `paused`, `delisted`, `removed`).
    pub subjects_by_state: BTreeMap<String, usize>,
    /// The paused subjects, by URL: not probed, so their scores age until an admin resumes them.
    pub paused: Vec<PausedSubject>,
    /// Scored subjects by their latest verdict (`ok`, `caution`, `avoid`, `down`, `unverified`).
    pub subjects_by_verdict: BTreeMap<String, usize>,
    pub unscored: usize,
    /// The soonest due free runs (at most 10).
    pub next_due: Vec<DueRun>,
    /// Absent when the daemon never pays.
    pub paid_budget: Option<BudgetView>,
    /// Whether one of our outage windows is open now.
    pub outage_open: bool,
    pub outages: Vec<OutageView>,
    pub ledger_seq: u64,
    pub rubric_sha256: String,
}
