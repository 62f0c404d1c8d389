//! Preflight: one call for an agent about to pay. `GET /v1/preflight?url=URL` answers `go`,
//! `caution`, `avoid` or `unrated` for the URL, with the reasons, the subject's signed score and
//! the terms we rated (the first `accepts` entry's network, asset, amount and payTo as the run
//! before its latest score saw them). `POST /v1/preflight` takes the PaymentRequired the agent
//! holds (the 402's body, or the `PAYMENT-REQUIRED` header's base64) and says which `accepts`
//! entry is safe to pay: the one whose payTo, asset, network and amount match the rated terms. A
//! PaymentRequired with no such entry (a swapped payTo, a raised amount) is `avoid` with that
//! reason, whatever the score. A URL we do not rate is `unrated`: never a guess from its host or
//! from a neighbour.
//!
//! Served from the in-memory view: the subject's entry, and what the view's cache keeps of it
//! (its signed envelope and its rated terms, made once per entry off the runtime). The judgement
//! itself, [`judge`], is pure. A PaymentRequired is read with the probe's own bounded parser
//! (`x402::parse_payment_required`); one that cannot be read is a 400 with a stable code naming
//! why (`payment_required_not_base64`, `_too_large`, `_too_deep`, `_not_json`, `_missing`).

use std::sync::Arc;

use alloy::primitives::U256;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{Method, Request};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::Digest;

use super::signed::SignedScore;
use super::types::{ScoreSummaryView, Verdict};
use super::v1::JsonBytes;
use super::view::{Made, SubjectEntry, SubjectKey, off_runtime};
use super::{ApiError, ApiState, ClientAddr, ErrorCode};
use crate::checks::history::Declared;
use crate::clock::rfc3339_ms;
use crate::store::SubjectState;
use crate::x402::types::{is_decimal_integer, parse_address_any_case, printable_prefix};
use crate::x402::{PaymentRequired, Requirement, chain_id_of, parse_payment_required};

/// What preflight tells an agent about to pay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PreflightAnswer {
    /// Pay: the verdict is `ok` and (with a PaymentRequired) `safe_accept` names the entry.
    Go,
    /// Pay only if you accept the reasons: a `caution` or `unverified` verdict, a subject we no
    /// longer probe, or terms we never saw.
    Caution,
    /// Do not pay: an `avoid` or `down` verdict, or no `accepts` entry matches what we rated.
    Avoid,
    /// We do not rate this URL (or have no score for it yet): no judgement either way.
    Unrated,
}

impl PreflightAnswer {
    /// The more severe of two judgements (`unrated` is decided before any other).
    fn at_least(self, other: PreflightAnswer) -> PreflightAnswer {
        let rank = |a| match a {
            PreflightAnswer::Go => 0,
            PreflightAnswer::Caution => 1,
            PreflightAnswer::Avoid | PreflightAnswer::Unrated => 2,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// Why preflight answered as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    /// The URL is not one of our subjects.
    NotRated,
    /// We probe it, but its first run is not scored yet.
    NotScoredYet,
    /// Its stored score does not match the ledger (an integrity error on our side): withheld.
    ScoreWithheld,
    /// Its latest verdict is `ok`.
    VerdictOk,
    /// Its latest verdict is `caution` (a low grade, low confidence, or a gate such as a payTo
    /// change within a week).
    VerdictCaution,
    /// Its latest verdict is `unverified`: too little evidence yet, not a judgement.
    VerdictUnverified,
    /// Its latest verdict is `avoid`.
    VerdictAvoid,
    /// Its latest verdict is `down`.
    VerdictDown,
    /// We no longer probe it (paused, delisted or removed): its score ages.
    NotProbed,
    /// We never saw it declare its terms (a 402 over verified TLS): no entry can be matched.
    NoRatedTerms,
    /// An entry pays another payTo than the rated one.
    PayToDiffers,
    /// An entry asks more than the rated amount.
    AmountRaised,
    /// An entry asks less than the rated amount (still not what we rated).
    AmountLowered,
    /// An entry's amount is missing or not an integer, so it cannot be compared.
    AmountDiffers,
    /// An entry pays in another asset than the rated one.
    AssetDiffers,
    /// An entry is on another network than the rated one.
    NetworkDiffers,
    /// No `accepts` entry matches the rated terms.
    NoEntryMatches,
}

/// One reason, with its text for people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PreflightReason {
    pub code: ReasonCode,
    /// For people; may change between versions.
    pub message: String,
}

/// The terms of an `accepts` entry preflight compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Term {
    Network,
    Asset,
    PayTo,
    Amount,
}

/// The terms we rated: what the subject's first `accepts` entry declared in the run before its
/// latest score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RatedTerms {
    pub network: Option<String>,
    pub asset: Option<String>,
    /// In the asset's smallest unit, as the endpoint wrote it.
    pub amount: Option<String>,
    pub pay_to: Option<String>,
    /// The amount read as USD (a 6-decimal dollar token), when it is an integer.
    pub price_usd: Option<String>,
    /// When that run saw it (RFC 3339).
    pub seen_at: String,
}

impl RatedTerms {
    fn of(declared: &Declared) -> RatedTerms {
        RatedTerms {
            network: declared.network.clone(),
            asset: declared.asset.clone(),
            amount: declared.amount.clone(),
            pay_to: declared.pay_to.clone(),
            price_usd: declared.price_usd().map(|p| p.to_string()),
            seen_at: rfc3339_ms(declared.at_ms),
        }
    }

    fn term(&self, term: Term) -> Option<&str> {
        match term {
            Term::Network => self.network.as_deref(),
            Term::Asset => self.asset.as_deref(),
            Term::PayTo => self.pay_to.as_deref(),
            Term::Amount => self.amount.as_deref(),
        }
    }
}

/// One term of an entry that is not what we rated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TermDiff {
    pub term: Term,
    pub rated: Option<String>,
    /// As the PaymentRequired sent wrote it (cut to 120 characters, control characters escaped).
    pub sent: Option<String>,
}

/// One `accepts` entry of the PaymentRequired sent, against the rated terms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AcceptCheck {
    /// Its position in `accepts`.
    pub index: usize,
    /// Its network, asset, payTo and amount are the rated ones.
    pub matches_rated: bool,
    pub differs: Vec<TermDiff>,
}

/// Preflight's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Preflight {
    pub answer: PreflightAnswer,
    /// Why, most severe first.
    pub reasons: Vec<PreflightReason>,
    /// The URL asked about, in the form subjects are known by.
    pub url: String,
    /// The subject's id, when the URL is one of our subjects.
    pub subject_id: Option<String>,
    /// Its latest score, summarised (absent when unrated).
    pub score: Option<ScoreSummaryView>,
    /// The terms we rated (absent when unrated or never seen).
    pub rated: Option<RatedTerms>,
    /// With a PaymentRequired: each entry read against the rated terms (empty otherwise).
    pub accepts: Vec<AcceptCheck>,
    /// With a PaymentRequired: the entry to pay, the first whose terms are the rated ones, when
    /// the answer is `go` or `caution`.
    pub safe_accept: Option<usize>,
    /// The subject's latest score document signed by the reporter key (as
    /// `/v1/subjects/{id}/score` serves it; check it offline with `x402-probe verify-score`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_score: Option<SignedScore>,
}

/// `GET /v1/preflight`'s query.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PreflightQuery {
    /// The URL about to be paid (http or https), as requested.
    pub url: String,
}

/// `POST /v1/preflight`'s body: the URL and what its 402 said. Without a PaymentRequired the
/// answer is the GET's.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PreflightRequest {
    /// The URL about to be paid (http or https), as requested.
    pub url: String,
    /// The 402's body as received, when it carries the PaymentRequired (v1, or v2 without the
    /// header): a JSON object.
    #[serde(default)]
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub payment_required: Option<Box<RawValue>>,
    /// The `PAYMENT-REQUIRED` header's value as received (base64 of the v2 PaymentRequired).
    /// Read first when both are sent, as clients do.
    #[serde(default)]
    pub payment_required_header: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Handlers

pub(crate) async fn get(
    State(state): State<ApiState>,
    query: Result<Query<PreflightQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(format!("query: {}", e.body_text())))?;
    answer(&state, &q.url, None).await
}

pub(crate) async fn post(State(state): State<ApiState>, body: Bytes) -> Result<Response, ApiError> {
    let request: PreflightRequest =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
    let Some(sent) = SentKey::of(&request) else {
        return answer(&state, &request.url, None).await;
    };
    // An agent sends the same 402 again and again: its answer, made once for this entry and
    // this very text, is served without reading the PaymentRequired again (only a text that
    // read was ever answered and kept).
    if let Some(body) = kept_answer(&state, &request.url, Some(sent)) {
        return Ok(JsonBytes(body).into_response());
    }
    let required = read_payment_required(&request)?;
    answer(&state, &request.url, required.as_ref().map(|r| (r, sent))).await
}

/// What keys an answer to a PaymentRequired: the SHA-256 of the texts sent (the header's value
/// and the body's, each as received), so that only the very same text gets the same answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SentKey([u8; 32]);

impl SentKey {
    /// `None` when the request carries no PaymentRequired.
    pub(crate) fn of(request: &PreflightRequest) -> Option<SentKey> {
        let body = request.payment_required.as_deref().map(RawValue::get);
        if request.payment_required_header.is_none() && body.is_none() {
            return None;
        }
        let mut hash = sha2::Sha256::new();
        // Each part with its presence and length, so that no two requests hash alike by
        // moving bytes from one part to the other.
        for part in [request.payment_required_header.as_deref(), body] {
            match part {
                None => hash.update([0]),
                Some(text) => {
                    hash.update([1]);
                    hash.update((text.len() as u64).to_be_bytes());
                    hash.update(text.as_bytes());
                }
            }
        }
        Some(SentKey(hash.finalize().into()))
    }
}

/// The subject's entry for `url` (its canonical form), when it is one of ours.
fn entry_of(state: &ApiState, canonical: &str) -> Option<Arc<SubjectEntry>> {
    state
        .view
        .current()
        .get_key(SubjectKey::of(canonical))
        .filter(|e| *e.url == *canonical)
        .cloned()
}

/// The answer kept for `url` (and the PaymentRequired `sent`, if any), made from the subject's
/// entry as it is now.
fn kept_answer(state: &ApiState, url: &str, sent: Option<SentKey>) -> Option<Bytes> {
    // A URL sent as a subject's canonical URL is that subject (canonical forms are their own):
    // read again only when it is not.
    let entry = match entry_of(state, url).filter(|e| e.url_is_canonical) {
        Some(entry) => entry,
        None => entry_of(state, &crate::http_url::canonical_subject_url(url).ok()?)?,
    };
    let made = sent.map_or(Made::Preflight, |sent| Made::PreflightWith(sent.0));
    state.view.kept(&entry, made)
}

/// Preflight's answers kept in memory, served before the router: an agent asks the same
/// question again and again, and its answer is bytes the view keeps (per entry, and per
/// PaymentRequired text). Only a request the router would answer with those very bytes is
/// answered here (the same route, method, query or body, and rate limit: its client's token is
/// taken first, and a client over its limit gets the router's 429); anything else (another
/// route, an answer not kept yet, a bad query or body, a body without a length or over
/// `[api] max_body_bytes`) goes on to the router as it came, with the token marked as taken.
/// A POST's body is read here within `[api] request_timeout_ms`, as the router would.
pub(crate) async fn from_memory(
    state: &ApiState,
    request: Request<Incoming>,
    client: std::net::SocketAddr,
) -> Result<Response, Request<Body>> {
    let onward = |mut request: Request<Body>| {
        request.extensions_mut().insert(ClientAddr(client));
        request
    };
    let post = match *request.method() {
        Method::GET => false,
        Method::POST => true,
        _ => return Err(onward(request.map(Body::new))),
    };
    if request.uri().path() != "/v1/preflight" {
        return Err(onward(request.map(Body::new)));
    }
    // The body's length as hyper frames it (`None`: chunked).
    let length = hyper::body::Body::size_hint(request.body()).exact();
    if post && length.is_none_or(|n| n > state.config.max_body_bytes.count() as u64) {
        return Err(onward(request.map(Body::new)));
    }
    if let Err(secs) = state.limiter.take(client.ip(), std::time::Instant::now()) {
        return Ok(super::ratelimit::over_limit(state, secs));
    }
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(ClientAddr(client));
    parts.extensions.insert(super::ratelimit::TokenTaken);
    if !post {
        let kept = Query::<PreflightQuery>::try_from_uri(&parts.uri)
            .ok()
            .and_then(|Query(q)| kept_answer(state, &q.url, None));
        return match kept {
            Some(body) => Ok(JsonBytes(body).into_response()),
            None => Err(Request::from_parts(parts, Body::new(body))),
        };
    }
    let timeout = state.config.request_timeout_ms.millis();
    let bytes = match tokio::time::timeout(timeout, body.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        // As the router's body reader and its timeout answer these.
        Ok(Err(e)) => return Ok(ApiError::bad_request(format!("body: {e}")).into_response()),
        Err(_) => {
            return Ok(ApiError::new(ErrorCode::Timeout, "Service Unavailable").into_response());
        }
    };
    let kept = serde_json::from_slice::<PreflightRequest>(&bytes)
        .ok()
        .and_then(|request| kept_answer(state, &request.url, SentKey::of(&request)));
    match kept {
        Some(body) => Ok(JsonBytes(body).into_response()),
        None => Err(Request::from_parts(parts, Body::from(bytes))),
    }
}

/// The PaymentRequired the request carries, read as the probe reads a 402 (`None`: none sent).
fn read_payment_required(request: &PreflightRequest) -> Result<Option<PaymentRequired>, ApiError> {
    let headers: Vec<(String, String)> = request
        .payment_required_header
        .iter()
        .map(|h| {
            (
                crate::x402::parse::PAYMENT_REQUIRED_HEADER.to_string(),
                h.clone(),
            )
        })
        .collect();
    let body = request
        .payment_required
        .as_deref()
        .map_or(&b""[..], |raw| raw.get().as_bytes());
    if headers.is_empty() && body.is_empty() {
        return Ok(None);
    }
    let parsed = parse_payment_required(402, &headers, body);
    match parsed.required {
        Some(required) => Ok(Some(required)),
        None => Err(unreadable(&parsed.deviations)),
    }
}

/// The stable error for a PaymentRequired that does not read, from the parser's deviations.
fn unreadable(deviations: &[crate::x402::Deviation]) -> ApiError {
    let code = deviations
        .iter()
        .find_map(|d| match d.code.split_once('.')? {
            ("header", "bad_base64" | "empty") => Some(ErrorCode::PaymentRequiredNotBase64),
            ("header" | "body", "too_large") => Some(ErrorCode::PaymentRequiredTooLarge),
            ("header" | "body", "too_deep" | "too_complex") => {
                Some(ErrorCode::PaymentRequiredTooDeep)
            }
            ("header" | "body", "bad_json" | "not_object") => {
                Some(ErrorCode::PaymentRequiredNotJson)
            }
            _ => None,
        })
        .unwrap_or(ErrorCode::PaymentRequiredMissing);
    let why: Vec<String> = deviations
        .iter()
        .filter(|d| !d.code.starts_with("status."))
        .take(3)
        .map(ToString::to_string)
        .collect();
    ApiError::new(
        code,
        format!(
            "the PaymentRequired sent cannot be read: {}",
            why.join("; ")
        ),
    )
}

/// The answer for `url` (and the PaymentRequired, if any, with the key of the text it was read
/// from), as JSON with the signed score inline.
async fn answer(
    state: &ApiState,
    url: &str,
    required: Option<(&PaymentRequired, SentKey)>,
) -> Result<Response, ApiError> {
    let canonical = crate::http_url::canonical_subject_url(url)
        .map_err(|e| ApiError::bad_request(format!("url: {e}")))?;
    let entry = entry_of(state, &canonical);
    // The answer depends on the entry and the text sent alone: made once for each.
    let made = match required {
        None => Made::Preflight,
        Some((_, sent)) => Made::PreflightWith(sent.0),
    };
    let required = required.map(|(r, _)| r);
    let cacheable = entry.as_ref().filter(|e| e.latest().is_some());
    if let Some(entry) = cacheable
        && let Some(body) = state.view.kept(entry, made)
    {
        return Ok(JsonBytes(body).into_response());
    }
    let (rated, envelope) = match &entry {
        Some(entry) if entry.latest().is_some() => (
            rated_terms(state, entry).await,
            signed_envelope(state, entry).await,
        ),
        _ => (None, None),
    };
    let subject = entry.as_deref().map(Subject::of);
    let preflight = judge(canonical, subject.as_ref(), rated.as_ref(), required);
    let mut body = serde_json::to_vec(&preflight)
        .map_err(|e| ApiError::internal(format!("encoding the answer: {e}")))?;
    if let Some(envelope) = envelope
        && body.last() == Some(&b'}')
    {
        // The envelope as the view keeps it, spliced in rather than parsed and encoded again.
        body.pop();
        body.extend_from_slice(b",\"signed_score\":");
        body.extend_from_slice(&envelope);
        body.push(b'}');
    }
    let body = Bytes::from(body);
    // Kept only when made from what the view keeps (a store read that failed is not kept).
    if let Some(entry) = cacheable
        && state.view.kept(entry, Made::Rated).is_some()
        && state.view.kept(entry, Made::Envelope).is_some()
    {
        state.view.keep(entry, made, body.clone());
    }
    Ok(JsonBytes(body).into_response())
}

/// The subject's rated terms: kept by the view, else read once for this entry off the runtime.
async fn rated_terms(state: &ApiState, entry: &Arc<SubjectEntry>) -> Option<RatedTerms> {
    let bytes = match state.view.kept(entry, Made::Rated) {
        Some(bytes) => bytes,
        None => {
            let (view, entry) = (state.view.clone(), entry.clone());
            off_runtime(move || {
                let seq = entry.latest()?.ledger_seq;
                view.kept_or_made(&entry, Made::Rated, |store| {
                    match store.declared_before(&entry.url, seq) {
                        Ok(declared) => serde_json::to_vec(&declared.as_ref().map(RatedTerms::of))
                            .ok()
                            .map(Bytes::from),
                        Err(e) => {
                            tracing::warn!(subject = %entry.url, error = %e, "preflight: reading the rated terms failed");
                            None
                        }
                    }
                })
            })
            .await?
        }
    };
    serde_json::from_slice(&bytes).ok().flatten()
}

/// The subject's signed envelope: kept by the view, else made off the runtime.
async fn signed_envelope(state: &ApiState, entry: &Arc<SubjectEntry>) -> Option<Bytes> {
    if let Some(bytes) = state.view.kept(entry, Made::Envelope) {
        return Some(bytes);
    }
    let (view, entry) = (state.view.clone(), entry.clone());
    off_runtime(move || view.signed(&entry)).await
}

// ---------------------------------------------------------------------------------------------
// The judgement (pure)

fn reason(code: ReasonCode, message: impl Into<String>) -> PreflightReason {
    PreflightReason {
        code,
        message: message.into(),
    }
}

/// What the judgement reads of a subject's entry in the view.
pub(crate) struct Subject<'a> {
    pub(crate) id: String,
    pub(crate) state: SubjectState,
    /// Its latest score is withheld (an integrity error on our side).
    pub(crate) withheld: bool,
    /// Its latest score, summarised, when it has one that reads back.
    pub(crate) score: Option<&'a ScoreSummaryView>,
}

impl Subject<'_> {
    fn of(entry: &SubjectEntry) -> Subject<'_> {
        Subject {
            id: entry.id(),
            state: entry.state,
            withheld: entry.withheld,
            score: entry.latest(),
        }
    }
}

/// Preflight's answer for the subject `entry` (`None`: not one of ours) at `url`, with the terms
/// its latest score rated and the PaymentRequired the agent holds, if any.
pub(crate) fn judge(
    url: String,
    entry: Option<&Subject>,
    rated: Option<&RatedTerms>,
    required: Option<&PaymentRequired>,
) -> Preflight {
    let mut preflight = Preflight {
        answer: PreflightAnswer::Unrated,
        reasons: Vec::new(),
        url,
        subject_id: entry.map(|e| e.id.clone()),
        score: None,
        rated: None,
        accepts: Vec::new(),
        safe_accept: None,
        signed_score: None,
    };
    let Some(entry) = entry else {
        preflight.reasons.push(reason(
            ReasonCode::NotRated,
            "this URL is not one of our subjects: we have no evidence about it either way",
        ));
        return preflight;
    };
    let Some(score) = entry.score else {
        preflight.reasons.push(if entry.withheld {
            reason(
                ReasonCode::ScoreWithheld,
                "its stored score does not match the ledger (an integrity error on our side); \
                 it is withheld until the next score is published",
            )
        } else {
            reason(
                ReasonCode::NotScoredYet,
                "we probe it, but its first run is not scored yet",
            )
        });
        return preflight;
    };
    let (mut answer, verdict_reason) = match score.verdict {
        Verdict::Ok => (PreflightAnswer::Go, ReasonCode::VerdictOk),
        Verdict::Caution => (PreflightAnswer::Caution, ReasonCode::VerdictCaution),
        Verdict::Unverified => (PreflightAnswer::Caution, ReasonCode::VerdictUnverified),
        Verdict::Avoid => (PreflightAnswer::Avoid, ReasonCode::VerdictAvoid),
        Verdict::Down => (PreflightAnswer::Avoid, ReasonCode::VerdictDown),
    };
    let grade = score.grade.as_deref().unwrap_or("none");
    let mut reasons = vec![reason(
        verdict_reason,
        format!(
            "its latest score ({}) is {:.1} of 100, grade {grade}{}, confidence {}",
            score.as_of,
            score.capped_score,
            if score.grade_provisional {
                " (provisional)"
            } else {
                ""
            },
            score.confidence
        ),
    )];
    if entry.state != SubjectState::Active {
        answer = answer.at_least(PreflightAnswer::Caution);
        reasons.push(reason(
            ReasonCode::NotProbed,
            format!(
                "we no longer probe it ({}): its score ages",
                match entry.state {
                    SubjectState::Paused => "paused",
                    SubjectState::Delisted => "delisted",
                    SubjectState::Removed => "removed",
                    SubjectState::Active => "active",
                }
            ),
        ));
    }
    match (rated, required) {
        (None, _) => {
            answer = answer.at_least(PreflightAnswer::Caution);
            reasons.push(reason(
                ReasonCode::NoRatedTerms,
                "we never saw it declare its terms over verified TLS: no accepts entry can be \
                 matched against what we rated",
            ));
        }
        (Some(_), None) => {}
        (Some(rated), Some(required)) => {
            preflight.accepts = required
                .accepts
                .iter()
                .map(|entry| accept_check(rated, entry))
                .collect();
            preflight.safe_accept = preflight
                .accepts
                .iter()
                .find(|c| c.matches_rated)
                .map(|c| c.index);
            if preflight.safe_accept.is_none() {
                answer = PreflightAnswer::Avoid;
                reasons.splice(0..0, mismatch_reasons(&preflight.accepts));
            }
        }
    }
    // An entry is named safe only for an answer that allows paying.
    if answer == PreflightAnswer::Avoid {
        preflight.safe_accept = None;
    }
    reasons.sort_by_key(|r| severity(r.code));
    preflight.answer = answer;
    preflight.reasons = reasons;
    preflight.score = Some(score.clone());
    preflight.rated = rated.cloned();
    preflight
}

/// The order reasons are listed in: what makes the answer `avoid` first.
fn severity(code: ReasonCode) -> u8 {
    match code {
        ReasonCode::NoEntryMatches
        | ReasonCode::PayToDiffers
        | ReasonCode::AmountRaised
        | ReasonCode::AmountLowered
        | ReasonCode::AmountDiffers
        | ReasonCode::AssetDiffers
        | ReasonCode::NetworkDiffers => 0,
        ReasonCode::VerdictAvoid | ReasonCode::VerdictDown => 1,
        _ => 2,
    }
}

/// Whether `sent` is the rated value of `term`: addresses in any letter case, networks by chain
/// id (a v1 name and its CAIP-2 id are one network), amounts as integers.
fn same(term: Term, rated: Option<&str>, sent: Option<&str>) -> bool {
    let (Some(rated), Some(sent)) = (rated, sent) else {
        return false;
    };
    match term {
        Term::PayTo | Term::Asset => {
            match (parse_address_any_case(rated), parse_address_any_case(sent)) {
                (Some(a), Some(b)) => a == b,
                _ => rated == sent,
            }
        }
        Term::Network => match (chain_id_of(rated), chain_id_of(sent)) {
            (Some(a), Some(b)) => a == b,
            _ => rated == sent,
        },
        Term::Amount => match (amount_value(rated), amount_value(sent)) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        },
    }
}

fn amount_value(text: &str) -> Option<U256> {
    is_decimal_integer(text)
        .then(|| U256::from_str_radix(text, 10).ok())
        .flatten()
}

fn accept_check(rated: &RatedTerms, entry: &Requirement) -> AcceptCheck {
    let sent = |term| match term {
        Term::Network => entry.network.as_deref(),
        Term::Asset => entry.asset.as_deref(),
        Term::PayTo => entry.pay_to.as_deref(),
        Term::Amount => entry.amount.as_deref(),
    };
    let differs: Vec<TermDiff> = [Term::PayTo, Term::Amount, Term::Asset, Term::Network]
        .into_iter()
        .filter(|&term| !same(term, rated.term(term), sent(term)))
        .map(|term| TermDiff {
            term,
            rated: rated.term(term).map(str::to_string),
            sent: sent(term).map(|s| printable_prefix(s, crate::budget::MAX_QUOTED_VALUE_CHARS)),
        })
        .collect();
    AcceptCheck {
        index: entry.index,
        matches_rated: differs.is_empty(),
        differs,
    }
}

/// Why no entry can be paid: each kind of difference once, naming the entries that have it.
fn mismatch_reasons(accepts: &[AcceptCheck]) -> Vec<PreflightReason> {
    let mut reasons = vec![reason(
        ReasonCode::NoEntryMatches,
        if accepts.is_empty() {
            "the PaymentRequired sent has no accepts entry we could read".to_string()
        } else {
            format!(
                "none of its {} accepts entries has the payTo, asset, network and amount we rated",
                accepts.len()
            )
        },
    )];
    let kinds = [
        ReasonCode::PayToDiffers,
        ReasonCode::AmountRaised,
        ReasonCode::AmountLowered,
        ReasonCode::AmountDiffers,
        ReasonCode::AssetDiffers,
        ReasonCode::NetworkDiffers,
    ];
    for kind in kinds {
        let mut first: Option<&TermDiff> = None;
        let mut entries = Vec::new();
        for check in accepts {
            if let Some(diff) = check.differs.iter().find(|d| diff_code(d) == kind) {
                first.get_or_insert(diff);
                entries.push(check.index.to_string());
            }
        }
        let Some(diff) = first else { continue };
        let shown = |v: &Option<String>| {
            v.as_deref()
                .map_or("nothing".to_string(), |s| format!("{s:?}"))
        };
        reasons.push(reason(
            kind,
            format!(
                "accepts[{}]: {} is {} where we rated {}",
                entries.join(", "),
                match diff.term {
                    Term::PayTo => "payTo",
                    Term::Amount => "amount",
                    Term::Asset => "asset",
                    Term::Network => "network",
                },
                shown(&diff.sent),
                shown(&diff.rated)
            ),
        ));
    }
    reasons
}

/// The reason a term's difference is.
fn diff_code(diff: &TermDiff) -> ReasonCode {
    match diff.term {
        Term::PayTo => ReasonCode::PayToDiffers,
        Term::Asset => ReasonCode::AssetDiffers,
        Term::Network => ReasonCode::NetworkDiffers,
        Term::Amount => {
            match (
                diff.rated.as_deref().and_then(amount_value),
                diff.sent.as_deref().and_then(amount_value),
            ) {
                (Some(rated), Some(sent)) if sent > rated => ReasonCode::AmountRaised,
                (Some(rated), Some(sent)) if sent < rated => ReasonCode::AmountLowered,
                _ => ReasonCode::AmountDiffers,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use serde_json::json;

    use super::*;
    use crate::api::types::{BandView, OutlookView, Trend, ValueView, WatchView};

    const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

    /// The key of a kept answer is the text sent, as sent: another text (or the same text as the
    /// other part, or bytes moved between the parts) is another key.
    #[test]
    fn a_kept_answer_is_keyed_by_the_very_text_sent() {
        let request = |header: Option<&str>, body: Option<&str>| PreflightRequest {
            url: "https://a.test/".into(),
            payment_required: body.map(|b| RawValue::from_string(b.to_string()).unwrap()),
            payment_required_header: header.map(str::to_string),
        };
        assert_eq!(SentKey::of(&request(None, None)), None);
        let keys = [
            SentKey::of(&request(Some("\"e30=\""), None)),
            SentKey::of(&request(Some("\"e30=\"x"), None)),
            SentKey::of(&request(None, Some("\"e30=\""))),
            SentKey::of(&request(Some("\"e30=\""), Some("{}"))),
            // The same bytes in all, moved from one part to the other.
            SentKey::of(&request(Some("x1"), Some("2"))),
            SentKey::of(&request(Some("x"), Some("12"))),
        ];
        for (i, a) in keys.iter().enumerate() {
            assert!(a.is_some());
            for b in &keys[i + 1..] {
                assert_ne!(a, b, "{i}");
            }
        }
        assert_eq!(keys[0], SentKey::of(&request(Some("\"e30=\""), None)));
    }

    const OTHER: &str = "0x1111111111111111111111111111111111111111";
    const USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";

    fn score(verdict: Verdict) -> ScoreSummaryView {
        ScoreSummaryView {
            as_of: "2026-12-01T00:00:00Z".into(),
            score: 90.0,
            capped_score: 90.0,
            band: BandView {
                low: 85.0,
                high: 95.0,
            },
            grade: Some("A".into()),
            grade_provisional: false,
            verdict,
            confidence: "high".into(),
            outlook: OutlookView {
                trend: Trend::Stable,
                delta: None,
            },
            watch: WatchView {
                on_watch: false,
                reasons: Vec::new(),
            },
            value: ValueView {
                price_usd: Some(0.01),
                price_percentile: None,
                usd_per_valid_kib: None,
                peers: 0,
            },
            rubric_sha256: "0".repeat(64),
            ledger_seq: 7,
            document_sha256: "0".repeat(64),
        }
    }

    fn rated() -> RatedTerms {
        RatedTerms::of(&Declared {
            at_ms: 0,
            fingerprint: String::new(),
            network: Some("eip155:84532".into()),
            asset: Some(USDC.into()),
            amount: Some("10000".into()),
            pay_to: Some(PAY_TO.into()),
            offer_signer: None,
        })
    }

    fn entry(network: &str, amount: &str, pay_to: &str) -> serde_json::Value {
        json!({"scheme": "exact", "network": network, "amount": amount, "asset": USDC,
               "payTo": pay_to, "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"}})
    }

    /// A v2 PaymentRequired with these entries, read as preflight reads one sent in the header.
    fn required(entries: Vec<serde_json::Value>) -> PaymentRequired {
        let object =
            json!({"x402Version": 2, "resource": {"url": "https://a.test/x"}, "accepts": entries});
        let header = base64::engine::general_purpose::STANDARD.encode(object.to_string());
        read(&format!(
            r#"{{"url": "https://a.test/x", "payment_required_header": "{header}"}}"#
        ))
        .unwrap()
        .unwrap()
    }

    fn read(body: &str) -> Result<Option<PaymentRequired>, ApiError> {
        let request: PreflightRequest = serde_json::from_str(body).unwrap();
        read_payment_required(&request)
    }

    fn subject(verdict: &ScoreSummaryView) -> Subject<'_> {
        Subject {
            id: "00".repeat(16),
            state: SubjectState::Active,
            withheld: false,
            score: Some(verdict),
        }
    }

    fn codes(p: &Preflight) -> Vec<ReasonCode> {
        p.reasons.iter().map(|r| r.code).collect()
    }

    #[test]
    fn the_answer_follows_the_verdict_and_unknown_urls_are_unrated() {
        for (verdict, answer, code) in [
            (Verdict::Ok, PreflightAnswer::Go, ReasonCode::VerdictOk),
            (
                Verdict::Caution,
                PreflightAnswer::Caution,
                ReasonCode::VerdictCaution,
            ),
            (
                Verdict::Unverified,
                PreflightAnswer::Caution,
                ReasonCode::VerdictUnverified,
            ),
            (
                Verdict::Avoid,
                PreflightAnswer::Avoid,
                ReasonCode::VerdictAvoid,
            ),
            (
                Verdict::Down,
                PreflightAnswer::Avoid,
                ReasonCode::VerdictDown,
            ),
        ] {
            let s = score(verdict);
            let p = judge(
                "https://a.test/x".into(),
                Some(&subject(&s)),
                Some(&rated()),
                None,
            );
            assert_eq!(p.answer, answer, "{verdict:?}");
            assert_eq!(codes(&p), vec![code]);
            assert_eq!(p.rated, Some(rated()));
            assert_eq!(p.safe_accept, None);
        }
        let p = judge("https://b.test/".into(), None, None, None);
        assert_eq!(p.answer, PreflightAnswer::Unrated);
        assert_eq!(codes(&p), vec![ReasonCode::NotRated]);
        assert!(p.subject_id.is_none() && p.score.is_none() && p.rated.is_none());
        // Known but not scored: unrated too, and it says why.
        let unscored = Subject {
            id: "00".repeat(16),
            state: SubjectState::Active,
            withheld: false,
            score: None,
        };
        let p = judge("https://a.test/x".into(), Some(&unscored), None, None);
        assert_eq!(p.answer, PreflightAnswer::Unrated);
        assert_eq!(codes(&p), vec![ReasonCode::NotScoredYet]);
        // A paused subject's `ok` ages: caution.
        let s = score(Verdict::Ok);
        let paused = Subject {
            state: SubjectState::Paused,
            ..subject(&s)
        };
        let p = judge(
            "https://a.test/x".into(),
            Some(&paused),
            Some(&rated()),
            None,
        );
        assert_eq!(p.answer, PreflightAnswer::Caution);
        assert!(codes(&p).contains(&ReasonCode::NotProbed));
        // Terms never seen: caution, whatever the verdict.
        let p = judge("https://a.test/x".into(), Some(&subject(&s)), None, None);
        assert_eq!(p.answer, PreflightAnswer::Caution);
        assert!(codes(&p).contains(&ReasonCode::NoRatedTerms));
    }

    #[test]
    fn the_safe_entry_is_the_one_with_the_rated_terms_and_a_swapped_pay_to_or_raised_amount_is_avoid()
     {
        let ok = score(Verdict::Ok);
        let s = subject(&ok);
        let url = || "https://a.test/x".to_string();
        // As rated (payTo in lower case, the network by its v1 name): go, entry 0.
        let same = required(vec![entry("base-sepolia", "10000", &PAY_TO.to_lowercase())]);
        let p = judge(url(), Some(&s), Some(&rated()), Some(&same));
        assert_eq!(p.answer, PreflightAnswer::Go, "{p:?}");
        assert_eq!(p.safe_accept, Some(0));
        assert!(p.accepts[0].matches_rated && p.accepts[0].differs.is_empty());
        // A swapped payTo: avoid, whatever the score.
        let swapped = required(vec![entry("eip155:84532", "10000", OTHER)]);
        let p = judge(url(), Some(&s), Some(&rated()), Some(&swapped));
        assert_eq!(p.answer, PreflightAnswer::Avoid);
        assert_eq!(p.safe_accept, None);
        assert_eq!(
            codes(&p)[..2],
            [ReasonCode::NoEntryMatches, ReasonCode::PayToDiffers]
        );
        assert_eq!(p.accepts[0].differs[0].term, Term::PayTo);
        assert_eq!(p.accepts[0].differs[0].sent.as_deref(), Some(OTHER));
        // A raised amount, and a lowered one.
        let raised = required(vec![entry("eip155:84532", "10001", PAY_TO)]);
        let p = judge(url(), Some(&s), Some(&rated()), Some(&raised));
        assert_eq!(p.answer, PreflightAnswer::Avoid);
        assert!(codes(&p).contains(&ReasonCode::AmountRaised), "{p:?}");
        let lowered = required(vec![entry("eip155:84532", "9999", PAY_TO)]);
        let p = judge(url(), Some(&s), Some(&rated()), Some(&lowered));
        assert!(codes(&p).contains(&ReasonCode::AmountLowered), "{p:?}");
        // Another network: avoid.
        let other_chain = required(vec![entry("eip155:8453", "10000", PAY_TO)]);
        let p = judge(url(), Some(&s), Some(&rated()), Some(&other_chain));
        assert!(codes(&p).contains(&ReasonCode::NetworkDiffers), "{p:?}");
        // The rated entry second: it is the one to pay.
        let second = required(vec![
            entry("eip155:84532", "10000", OTHER),
            entry("eip155:84532", "10000", PAY_TO),
        ]);
        let p = judge(url(), Some(&s), Some(&rated()), Some(&second));
        assert_eq!(p.answer, PreflightAnswer::Go);
        assert_eq!(p.safe_accept, Some(1));
        assert!(!p.accepts[0].matches_rated);
        // An avoid verdict names no entry to pay even when one matches.
        let avoid = score(Verdict::Avoid);
        let p = judge(url(), Some(&subject(&avoid)), Some(&rated()), Some(&same));
        assert_eq!((p.answer, p.safe_accept), (PreflightAnswer::Avoid, None));
        // A caution verdict names it.
        let caution = score(Verdict::Caution);
        let p = judge(url(), Some(&subject(&caution)), Some(&rated()), Some(&same));
        assert_eq!(
            (p.answer, p.safe_accept),
            (PreflightAnswer::Caution, Some(0))
        );
    }

    #[test]
    fn a_payment_required_that_does_not_read_is_a_stable_code() {
        let code = |body: String| read(&body).map(|_| ()).unwrap_err().code;
        assert_eq!(
            code(r#"{"url": "https://a.test/", "payment_required_header": "not base64!"}"#.into()),
            ErrorCode::PaymentRequiredNotBase64
        );
        assert_eq!(
            code(r#"{"url": "https://a.test/", "payment_required_header": ""}"#.into()),
            ErrorCode::PaymentRequiredNotBase64
        );
        let huge = "A".repeat(100_000);
        assert_eq!(
            code(format!(
                r#"{{"url": "https://a.test/", "payment_required_header": "{huge}"}}"#
            )),
            ErrorCode::PaymentRequiredTooLarge
        );
        let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        assert_eq!(
            code(format!(
                r#"{{"url": "https://a.test/", "payment_required": {{"accepts": {deep}}}}}"#
            )),
            ErrorCode::PaymentRequiredTooDeep
        );
        let not_json = base64::engine::general_purpose::STANDARD.encode("{not json");
        assert_eq!(
            code(format!(
                r#"{{"url": "https://a.test/", "payment_required_header": "{not_json}"}}"#
            )),
            ErrorCode::PaymentRequiredNotJson
        );
        assert_eq!(
            code(r#"{"url": "https://a.test/", "payment_required": {"error": "nothing"}}"#.into()),
            ErrorCode::PaymentRequiredMissing
        );
        // Nothing sent: the GET's answer.
        assert!(read(r#"{"url": "https://a.test/"}"#).unwrap().is_none());
    }
}
