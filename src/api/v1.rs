//! The public JSON API, version 1: read-only, signed aggregates only (seed 004: the public never
//! gets a raw ledger entry). Every type a handler returns derives `JsonSchema`: the OpenAPI
//! document (`openapi.rs`) is generated from these same types.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::view::SubjectEntry;
use super::{ApiError, ApiState, ErrorCode};
use crate::daemon::scoring::rfc3339_ms;
use crate::daemon::{Command, LoopStatus};
use crate::store::SubjectState;

/// Every public route (the table in `openapi.rs`: what is served is what is documented).
pub(crate) fn routes() -> Router<ApiState> {
    super::openapi::ROUTES
        .iter()
        .fold(Router::new(), |router, r| {
            router.route(r.path, (r.handler)())
        })
}

// ---------------------------------------------------------------------------------------------
// Types

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

impl Verdict {
    pub(crate) fn parse(text: &str) -> Option<Verdict> {
        match text {
            "ok" => Some(Verdict::Ok),
            "caution" => Some(Verdict::Caution),
            "avoid" => Some(Verdict::Avoid),
            "down" => Some(Verdict::Down),
            "unverified" => Some(Verdict::Unverified),
            _ => None,
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
}

impl From<SubjectState> for SubjectStateView {
    fn from(s: SubjectState) -> Self {
        match s {
            SubjectState::Active => SubjectStateView::Active,
            SubjectState::Delisted => SubjectStateView::Delisted,
            SubjectState::Removed => SubjectStateView::Removed,
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
const DEFAULT_PAGE: usize = 100;

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

/// A window in which our own vantage was out: free outcomes inside it count against nobody.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OutageView {
    pub from: String,
    /// Absent while the window is open.
    pub to: Option<String>,
    pub open: bool,
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
    pub subjects_by_state: BTreeMap<String, usize>,
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

// ---------------------------------------------------------------------------------------------
// Handlers

/// A JSON body already serialised (served from the view without re-encoding).
pub(crate) struct JsonBytes(pub(crate) Bytes);

impl IntoResponse for JsonBytes {
    fn into_response(self) -> Response {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            self.0,
        )
            .into_response()
    }
}

fn json<T: Serialize>(value: &T) -> Result<JsonBytes, ApiError> {
    serde_json::to_vec(value)
        .map(|b| JsonBytes(Bytes::from(b)))
        .map_err(|e| ApiError::internal(format!("encoding the answer: {e}")))
}

fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::bad_request(format!("query: {}", e.body_text()))
}

fn bad_path(e: PathRejection) -> ApiError {
    ApiError::bad_request(format!("path: {}", e.body_text()))
}

fn entry(state: &ApiState, id: &str) -> Result<std::sync::Arc<SubjectEntry>, ApiError> {
    if id.len() != 32
        || !id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(ApiError::bad_request(
            "a subject id is 32 lowercase hex characters (see /v1/subjects)",
        ));
    }
    state
        .view
        .current()
        .by_id
        .get(id)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("no subject {id}")))
}

pub(crate) async fn subjects(
    State(state): State<ApiState>,
    query: Result<Query<SubjectQuery>, QueryRejection>,
) -> Result<JsonBytes, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be from 1 to {MAX_PAGE}"
        )));
    }
    let offset = q.offset.unwrap_or(0);
    let view = state.view.current();
    let grade = q.grade.as_deref();
    let mut matching: Vec<&SubjectSummary> = view
        .ordered
        .iter()
        .map(|e| &e.summary)
        .filter(|s| q.category.as_deref().is_none_or(|c| s.category == c))
        .filter(|s| {
            q.verdict
                .is_none_or(|v| s.latest.as_ref().is_some_and(|l| l.verdict == v))
        })
        .filter(|s| {
            grade.is_none_or(|g| {
                s.latest
                    .as_ref()
                    .is_some_and(|l| l.grade.as_deref() == Some(g))
            })
        })
        .collect();
    let sort = q.sort.unwrap_or_default();
    let order = q.order.unwrap_or_default();
    // Ties (and unscored subjects) fall back to the id, so pages are stable.
    matching.sort_by(|a, b| {
        let primary = match sort {
            SortKey::Id => std::cmp::Ordering::Equal,
            SortKey::Url => a.url.cmp(&b.url),
            SortKey::Category => a.category.cmp(&b.category),
            SortKey::Score => {
                let s = |x: &SubjectSummary| x.latest.as_ref().map(|l| l.capped_score);
                s(a).partial_cmp(&s(b)).unwrap_or(std::cmp::Ordering::Equal)
            }
            SortKey::AsOf => {
                let t = |x: &SubjectSummary| x.latest.as_ref().map(|l| l.as_of.clone());
                t(a).cmp(&t(b))
            }
        };
        let primary = match order {
            Order::Asc => primary,
            Order::Desc => primary.reverse(),
        };
        primary.then_with(|| a.id.cmp(&b.id))
    });
    let total = matching.len();
    let page: Vec<SubjectSummary> = matching
        .into_iter()
        .skip(offset)
        .take(limit)
        .cloned()
        .collect();
    let next_offset = (offset.saturating_add(limit) < total).then_some(offset + limit);
    json(&SubjectPage {
        total,
        offset,
        limit,
        next_offset,
        subjects: page,
    })
}

pub(crate) async fn subject(
    State(state): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<JsonBytes, ApiError> {
    let Path(id) = id.map_err(bad_path)?;
    Ok(JsonBytes(entry(&state, &id)?.summary_json.clone()))
}

pub(crate) async fn subject_score(
    State(state): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<JsonBytes, ApiError> {
    let Path(id) = id.map_err(bad_path)?;
    let entry = entry(&state, &id)?;
    match &entry.signed {
        Some(bytes) => Ok(JsonBytes(bytes.clone())),
        None => Err(ApiError::not_found(format!(
            "subject {id} has no score yet (its first run is not scored)"
        ))),
    }
}

pub(crate) async fn subject_history(
    State(state): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<JsonBytes, ApiError> {
    let Path(id) = id.map_err(bad_path)?;
    Ok(JsonBytes(entry(&state, &id)?.history_json.clone()))
}

pub(crate) fn outage_views(state: &ApiState, now_ms: i64) -> Vec<OutageView> {
    state
        .shared
        .outages
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|w| OutageView {
            from: rfc3339_ms(w.from_ms),
            to: w.to_ms.map(rfc3339_ms),
            open: w.from_ms <= now_ms && w.to_ms.is_none_or(|t| now_ms < t),
        })
        .collect()
}

pub(crate) async fn outages(State(state): State<ApiState>) -> Result<JsonBytes, ApiError> {
    let now = state.shared.clock.now_ms();
    json(&OutageList {
        outages: outage_views(&state, now),
    })
}

pub(crate) async fn rubrics(State(state): State<ApiState>) -> Result<JsonBytes, ApiError> {
    let current = state.shared.rubric.sha256();
    let mut list = Vec::new();
    for (sha, bytes) in state.rubrics.iter() {
        let parsed: serde_json::Value = serde_json::from_slice(bytes).unwrap_or_default();
        list.push(RubricRef {
            sha256: sha.clone(),
            id: parsed["id"].as_str().unwrap_or_default().to_string(),
            version: parsed["version"].as_str().unwrap_or_default().to_string(),
            current: sha == current,
            url: format!("/v1/rubrics/{sha}"),
        });
    }
    json(&RubricList { rubrics: list })
}

pub(crate) async fn rubric(
    State(state): State<ApiState>,
    sha: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(sha) = sha.map_err(bad_path)?;
    if sha.len() != 64
        || !sha
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(ApiError::bad_request(
            "a rubric is named by the SHA-256 of its file: 64 lowercase hex characters",
        ));
    }
    match state.rubrics.get(&sha) {
        Some(bytes) => Ok(JsonBytes(bytes.clone()).into_response()),
        None => Err(ApiError::not_found(format!("no rubric {sha} here"))),
    }
}

fn checkpoint_view(c: &crate::ledger::chain::Checkpoint) -> CheckpointView {
    CheckpointView {
        seq: c.seq,
        hash: hex::encode(c.hash),
        at: rfc3339_ms(c.at_ms),
        public_key: hex::encode(c.public_key),
        signature: hex::encode(c.signature),
    }
}

/// Runs a store read off the runtime's workers (the store may be busy writing a batch).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, crate::store::StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ApiError::internal(format!("reading the store: {e}"))),
        Err(e) => Err(ApiError::internal(format!("reading the store: {e}"))),
    }
}

pub(crate) async fn ledger_head(State(state): State<ApiState>) -> Result<JsonBytes, ApiError> {
    let store = state.shared.store.clone();
    let ((seq, hash), checkpoints) =
        blocking(move || Ok((store.head()?, store.checkpoints()?))).await?;
    json(&LedgerHead {
        seq,
        hash: hex::encode(hash),
        checkpoint: checkpoints.last().map(checkpoint_view),
    })
}

pub(crate) async fn checkpoints(
    State(state): State<ApiState>,
    query: Result<Query<CheckpointQuery>, QueryRejection>,
) -> Result<JsonBytes, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be from 1 to {MAX_PAGE}"
        )));
    }
    let after = q.after.unwrap_or(0);
    let store = state.shared.store.clone();
    let all = blocking(move || store.checkpoints()).await?;
    let mut page: Vec<CheckpointView> = all
        .iter()
        .filter(|c| c.seq > after)
        .take(limit + 1)
        .map(checkpoint_view)
        .collect();
    let next_after = (page.len() > limit).then(|| page[limit - 1].seq);
    page.truncate(limit);
    json(&CheckpointList {
        checkpoints: page,
        next_after,
    })
}

pub(crate) async fn key(State(state): State<ApiState>) -> Result<JsonBytes, ApiError> {
    json(&ReporterKeyView {
        algorithm: KeyAlgorithm::Ed25519,
        public_key: hex::encode(state.reporter_public),
        signs: vec![
            super::signed::SIGNED_SCORE_FORMAT.to_string(),
            crate::ledger::chain::CHECKPOINT_DOMAIN.to_string(),
        ],
    })
}

/// How long `/v1/status` waits for the daemon's loop.
const STATUS_WAIT: Duration = Duration::from_secs(3);

pub(crate) async fn status(State(state): State<ApiState>) -> Result<JsonBytes, ApiError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    state
        .commands
        .send_timeout(Command::Status(tx), STATUS_WAIT)
        .await
        .map_err(|_| {
            ApiError::new(
                ErrorCode::Unavailable,
                "the daemon's loop is not taking requests",
            )
        })?;
    let looped: LoopStatus = match tokio::time::timeout(STATUS_WAIT, rx).await {
        Ok(Ok(s)) => s,
        Ok(Err(_)) => {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                "the daemon is stopping",
            ));
        }
        Err(_) => {
            return Err(ApiError::new(
                ErrorCode::Timeout,
                "the daemon's loop did not answer in time",
            ));
        }
    };
    let view = state.view.current();
    let mut by_verdict = BTreeMap::new();
    let mut unscored = 0;
    for e in &view.ordered {
        match &e.summary.latest {
            Some(l) => {
                let key = serde_json::to_value(l.verdict)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                *by_verdict.entry(key).or_insert(0) += 1;
            }
            None => unscored += 1,
        }
    }
    let paid_budget = match state.shared.pay.as_ref() {
        None => None,
        Some(parts) => {
            let spend = parts.spend.clone();
            let now_unix = state.shared.wall.now_ms().div_euclid(1000);
            let cap = parts.policy.max_per_day_usd;
            let totals = tokio::task::spawn_blocking(move || spend.totals("", now_unix))
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?
                .map_err(|e| ApiError::internal(format!("reading the spend store: {e}")))?;
            let left = crate::spend::Usd::from_atto(cap.atto().saturating_sub(totals.day.atto()));
            Some(BudgetView {
                cap_usd: cap.to_string(),
                spent_usd: totals.day.to_string(),
                left_usd: left.to_string(),
                open_reservations: totals.open,
            })
        }
    };
    let outages = outage_views(&state, looped.now_ms);
    let store = state.shared.store.clone();
    let (ledger_seq, _) = blocking(move || store.head()).await?;
    json(&StatusView {
        now: rfc3339_ms(looped.now_ms),
        simulated: looped.simulated,
        runs_in_flight: looped.in_flight,
        subjects_by_state: looped.subjects_by_state,
        subjects_by_verdict: by_verdict,
        unscored,
        next_due: looped
            .next_due
            .into_iter()
            .map(|(due, url)| DueRun {
                subject_id: super::signed::subject_id(&url),
                url,
                due: rfc3339_ms(due),
            })
            .collect(),
        paid_budget,
        outage_open: outages.iter().any(|o| o.open),
        outages,
        ledger_seq,
        rubric_sha256: state.shared.rubric.sha256().to_string(),
    })
}
