//! The public JSON API, version 1: read-only, signed aggregates only (seed 004: the public never
//! gets a raw ledger entry). Every type a handler returns is in `types.rs` and derives
//! `JsonSchema`: the OpenAPI document (`openapi.rs`) is generated from these same types.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;

use super::types::*;
use super::view::{SubjectEntry, SubjectKey, off_runtime};
use super::{ApiError, ApiState, ErrorCode};
use crate::clock::rfc3339_ms;
use crate::control::{Command, LoopStatus};
use crate::store::SubjectState;

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

/// A page's size: `limit` when given (1 ..= [`MAX_PAGE`]), else the default.
fn page_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be from 1 to {MAX_PAGE}"
        )));
    }
    Ok(limit)
}

/// The subject the path's `{id}` names, as the view holds it.
fn entry(
    state: &ApiState,
    id: Result<Path<String>, PathRejection>,
) -> Result<std::sync::Arc<SubjectEntry>, ApiError> {
    let Path(id) = id.map_err(bad_path)?;
    if SubjectKey::parse(&id).is_none() {
        return Err(ApiError::bad_request(
            "a subject id is 32 lowercase hex characters (see /v1/subjects)",
        ));
    }
    state
        .view
        .current()
        .get(&id)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("no subject {id}")))
}

pub(crate) async fn subjects(
    State(state): State<ApiState>,
    query: Result<Query<SubjectQuery>, QueryRejection>,
) -> Result<JsonBytes, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let limit = page_limit(q.limit)?;
    let offset = q.offset.unwrap_or(0);
    let view = state.view.current();
    let grade = q.grade.as_deref();
    // Filtered and sorted by reference; only the page asked for is built.
    let mut matching: Vec<&SubjectEntry> = view
        .ordered
        .iter()
        .map(|e| &**e)
        .filter(|s| q.category.as_deref().is_none_or(|c| *s.category == *c))
        .filter(|s| {
            q.verdict
                .is_none_or(|v| s.latest().is_some_and(|l| l.verdict == v))
        })
        .filter(|s| grade.is_none_or(|g| s.latest().is_some_and(|l| l.grade.as_deref() == Some(g))))
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
                let s = |x: &SubjectEntry| x.latest().map(|l| l.capped_score);
                s(a).partial_cmp(&s(b)).unwrap_or(std::cmp::Ordering::Equal)
            }
            SortKey::AsOf => {
                let (x, y) = (a.latest(), b.latest());
                x.map(|l| &l.as_of).cmp(&y.map(|l| &l.as_of))
            }
        };
        let primary = match order {
            Order::Asc => primary,
            Order::Desc => primary.reverse(),
        };
        primary.then_with(|| a.key.cmp(&b.key))
    });
    let total = matching.len();
    let page: Vec<SubjectSummary> = matching
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(SubjectEntry::summary)
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
    Ok(JsonBytes(entry(&state, id)?.summary_json()))
}

pub(crate) async fn subject_score(
    State(state): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<JsonBytes, ApiError> {
    let entry = entry(&state, id)?;
    let (shown, of) = (state.view.clone(), entry.clone());
    match off_runtime(move || shown.signed(&of)).await {
        Some(bytes) => Ok(JsonBytes(bytes)),
        // Scored, but its row did not read as what the ledger published when it was read
        // now (the start reads headlines, not documents): withheld as well.
        None if entry.withheld || entry.scored.is_some() => Err(ApiError::new(
            ErrorCode::Unavailable,
            format!(
                "subject {}'s stored score does not match the ledger's score entry (an integrity \
                 error on our side); it is withheld until the next score is published",
                entry.id()
            ),
        )),
        None => Err(ApiError::not_found(format!(
            "subject {} has no score yet (its first run is not scored)",
            entry.id()
        ))),
    }
}

pub(crate) async fn subject_history(
    State(state): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<JsonBytes, ApiError> {
    let entry = entry(&state, id)?;
    let shown = state.view.clone();
    Ok(JsonBytes(
        off_runtime(move || shown.history_json(&entry)).await,
    ))
}

pub(crate) async fn subject_findings(
    State(state): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<JsonBytes, ApiError> {
    read_from_entries(state, id, |view, entry| view.findings_json(entry)).await
}

pub(crate) async fn subject_readiness(
    State(state): State<ApiState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<JsonBytes, ApiError> {
    read_from_entries(state, id, |view, entry| view.readiness_json(entry)).await
}

/// A subject's answer made from its ledger entries off the runtime (`None`: they could not be
/// read now, a 503).
async fn read_from_entries(
    state: ApiState,
    id: Result<Path<String>, PathRejection>,
    make: fn(&super::view::View, &SubjectEntry) -> Option<Bytes>,
) -> Result<JsonBytes, ApiError> {
    let entry = entry(&state, id)?;
    let (shown, of) = (state.view.clone(), entry.clone());
    match off_runtime(move || make(&shown, &of)).await {
        Some(bytes) => Ok(JsonBytes(bytes)),
        None => Err(ApiError::new(
            ErrorCode::Unavailable,
            format!(
                "subject {}'s entries could not be read now; try again shortly",
                entry.id()
            ),
        )),
    }
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
            of: w.of,
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
pub(crate) async fn blocking<T: Send + 'static>(
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
    let limit = page_limit(q.limit)?;
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

pub(crate) async fn tree_head(State(state): State<ApiState>) -> Result<JsonBytes, ApiError> {
    let store = state.shared.store.clone();
    let Some(latest) = blocking(move || store.latest_tree_note()).await? else {
        return Err(ApiError::not_found("no tree checkpoint yet"));
    };
    json(&TreeHead {
        size: latest.size,
        at: rfc3339_ms(latest.at_ms),
        note: latest.note,
        verifier_key: crate::ledger::tlog::note_key(&state.reporter_public).verifier_key(),
    })
}

pub(crate) async fn consistency(
    State(state): State<ApiState>,
    query: Result<Query<ConsistencyQuery>, QueryRejection>,
) -> Result<JsonBytes, ApiError> {
    use base64::Engine;
    let Query(q) = query.map_err(bad_query)?;
    let store = state.shared.store.clone();
    let latest = blocking(move || store.latest_tree_note()).await?;
    let signed = latest.map_or(0, |n| n.size);
    let to = q.to.unwrap_or(signed);
    if to > signed || q.from > to {
        return Err(ApiError::bad_request(format!(
            "from ({}) and to ({to}) must satisfy from <= to <= {signed}, the latest tree \
             checkpoint's size",
            q.from
        )));
    }
    let store = state.shared.store.clone();
    let from = q.from;
    let proof = blocking(move || store.consistency_proof(from, to)).await?;
    json(&ConsistencyView {
        from,
        to,
        proof: proof
            .iter()
            .map(|h| base64::engine::general_purpose::STANDARD.encode(h))
            .collect(),
    })
}

pub(crate) async fn key(State(state): State<ApiState>) -> Result<JsonBytes, ApiError> {
    json(&ReporterKeyView {
        algorithm: KeyAlgorithm::Ed25519,
        public_key: hex::encode(state.reporter_public),
        signs: vec![
            super::signed::SIGNED_SCORE_FORMAT.to_string(),
            crate::ledger::chain::CHECKPOINT_DOMAIN.to_string(),
            crate::snapshot::SIGNED_SNAPSHOT_FORMAT.to_string(),
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
    let mut paused: Vec<PausedSubject> = view
        .ordered
        .iter()
        .filter(|e| e.state == SubjectState::Paused)
        .map(|e| PausedSubject {
            subject_id: e.id(),
            url: e.url.to_string(),
        })
        .collect();
    paused.sort_by(|a, b| a.url.cmp(&b.url));
    for e in &view.ordered {
        match e.latest() {
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
    let paid_budget = match state.shared.spend.as_ref() {
        None => None,
        Some(parts) => {
            let spend = parts.spend.clone();
            let now_unix = state.shared.wall.now_ms().div_euclid(1000);
            let cap = crate::probe::paid::PolicySource::current(&*parts.policy).max_per_day_usd;
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
        paused,
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
