//! Admin actions under `/v1/admin/...`: add a subject, pause or resume one, declare one of our
//! outages, run a subject now. Each needs `Authorization: Bearer TOKEN`, the token read from a
//! credential file (`[api] admin_token_file`, or the systemd credential `admin-token`). Without a
//! configured token every admin route answers 403 and does nothing; a missing or wrong token is
//! 401. The action itself is done by the daemon's loop (the one writer of subjects and schedule),
//! which records it in the ledger; the answer says what was done.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{ApiError, ApiState, ErrorCode};
use crate::config::ApiConfig;
use crate::control::{ActionRefused, AdminAction, AdminDone, Command};
use crate::secret::{KeySource, SecretError};

/// The systemd credential the token is read from when no file is configured.
pub const ADMIN_TOKEN_CREDENTIAL: &str = "admin-token";

/// How long a request waits for the daemon's loop to take and answer an action.
const LOOP_ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The admin token, kept only as its SHA-256 (the token itself is zeroed once read).
pub(crate) struct AdminToken {
    digest: [u8; 32],
}

impl AdminToken {
    fn from_secret(token: &[u8]) -> AdminToken {
        AdminToken {
            digest: Sha256::digest(token).into(),
        }
    }

    /// Whether `presented` is the token, in time independent of where they differ (both sides
    /// are hashed first, so even the length of the token is not compared directly).
    fn matches(&self, presented: &[u8]) -> bool {
        let other: [u8; 32] = Sha256::digest(presented).into();
        let mut diff = 0u8;
        for (a, b) in self.digest.iter().zip(other.iter()) {
            diff |= std::hint::black_box(a ^ b);
        }
        std::hint::black_box(diff) == 0
    }
}

/// Reads the admin token: the configured file, else the systemd credential `admin-token` when
/// the daemon runs with one; `None` when neither is there (admin actions are then refused).
pub(crate) fn load_token(config: &ApiConfig) -> Result<Option<AdminToken>, SecretError> {
    let source = match &config.admin_token_file {
        Some(path) => KeySource::File(path.clone()),
        None => match KeySource::credential(ADMIN_TOKEN_CREDENTIAL) {
            Ok(source) if source.path().exists() => source,
            _ => return Ok(None),
        },
    };
    let token = source.read_token("admin token")?;
    Ok(Some(AdminToken::from_secret(&token)))
}

/// Refuses the request unless it carries the admin token (before its body is read): the layer
/// of every admin route (`api::router`).
pub(crate) async fn require_token(
    State(state): State<ApiState>,
    request: Request<Body>,
    next: Next,
) -> Response {
    let Some(token) = state.admin_token.as_deref() else {
        return ApiError::new(
            ErrorCode::Forbidden,
            "admin actions are off: no admin token is configured ([api] admin_token_file or the credential admin-token)",
        )
        .into_response();
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match presented {
        Some(p) if token.matches(p.as_bytes()) => next.run(request).await,
        Some(_) => unauthorized("the admin token is wrong"),
        None => unauthorized("admin actions need Authorization: Bearer TOKEN"),
    }
}

fn unauthorized(message: &str) -> Response {
    let mut response = ApiError::new(ErrorCode::Unauthorized, message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"x402-probe admin\""),
    );
    response
}

/// `POST /v1/admin/subjects`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddSubject {
    /// The endpoint's URL (`http://` or `https://`).
    pub url: String,
    /// Its category for value (default `uncategorised`).
    #[serde(default)]
    pub category: Option<String>,
}

/// `POST /v1/admin/subjects/pause` and `.../resume`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubjectAction {
    /// The subject's URL or its API id.
    pub subject: String,
    /// Why (recorded in the ledger).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `POST /v1/admin/outages`: one of our outage windows.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeclareOutage {
    /// RFC 3339; at most 48 hours back.
    pub from: String,
    /// RFC 3339; after `from`, at most 48 hours ahead.
    pub to: String,
    /// Why our vantage was out (1 to 500 characters).
    pub reason: String,
}

/// `POST /v1/admin/runs`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunNow {
    /// The subject's URL or its API id.
    pub subject: String,
}

/// What an admin action did.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AdminAnswer {
    pub action: AdminActionName,
    /// The subject's URL, for an action about one.
    pub subject: Option<String>,
    /// The ledger entry that records the action (none for a run queued now: the run records
    /// itself when it ends).
    pub ledger_seq: Option<u64>,
    pub detail: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AdminActionName {
    AddSubject,
    Pause,
    Resume,
    DeclareOutage,
    RunNow,
}

/// Longest reason text kept.
const MAX_REASON_CHARS: usize = 500;

fn reason_of(reason: Option<String>, default: &str) -> Result<String, ApiError> {
    let reason = reason.unwrap_or_else(|| default.to_string());
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON_CHARS {
        return Err(ApiError::bad_request("reason: 1 to 500 characters"));
    }
    Ok(reason.to_string())
}

pub(crate) async fn add_subject(
    State(state): State<ApiState>,
    Json(body): Json<AddSubject>,
) -> Result<(StatusCode, Json<AdminAnswer>), ApiError> {
    let category = body.category.unwrap_or_else(|| "uncategorised".into());
    let action = AdminAction::AddSubject {
        url: body.url,
        category,
    };
    let done = ask(&state, action).await?;
    Ok((
        StatusCode::CREATED,
        Json(answer(AdminActionName::AddSubject, done)),
    ))
}

pub(crate) async fn pause(
    State(state): State<ApiState>,
    Json(body): Json<SubjectAction>,
) -> Result<Json<AdminAnswer>, ApiError> {
    let url = subject_url(&state, &body.subject)?;
    let reason = reason_of(body.reason, "paused by an admin")?;
    let done = ask(&state, AdminAction::Pause { url, reason }).await?;
    Ok(Json(answer(AdminActionName::Pause, done)))
}

pub(crate) async fn resume(
    State(state): State<ApiState>,
    Json(body): Json<SubjectAction>,
) -> Result<Json<AdminAnswer>, ApiError> {
    let url = subject_url(&state, &body.subject)?;
    let reason = reason_of(body.reason, "resumed by an admin")?;
    let done = ask(&state, AdminAction::Resume { url, reason }).await?;
    Ok(Json(answer(AdminActionName::Resume, done)))
}

pub(crate) async fn declare_outage(
    State(state): State<ApiState>,
    Json(body): Json<DeclareOutage>,
) -> Result<(StatusCode, Json<AdminAnswer>), ApiError> {
    let action = AdminAction::DeclareOutage {
        from: body.from,
        to: body.to,
        reason: body.reason,
    };
    let done = ask(&state, action).await?;
    Ok((
        StatusCode::CREATED,
        Json(answer(AdminActionName::DeclareOutage, done)),
    ))
}

pub(crate) async fn run_now(
    State(state): State<ApiState>,
    Json(body): Json<RunNow>,
) -> Result<(StatusCode, Json<AdminAnswer>), ApiError> {
    let url = subject_url(&state, &body.subject)?;
    let done = ask(&state, AdminAction::RunNow { url }).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(answer(AdminActionName::RunNow, done)),
    ))
}

fn answer(action: AdminActionName, done: AdminDone) -> AdminAnswer {
    AdminAnswer {
        action,
        subject: done.subject,
        ledger_seq: done.seq,
        detail: done.detail,
    }
}

/// A subject named by URL or by API id, as the store knows it.
pub(crate) fn subject_url(state: &ApiState, subject: &str) -> Result<String, ApiError> {
    let subject = subject.trim();
    if subject.contains("://") {
        return Ok(subject.to_string());
    }
    let is_id = subject.len() == 32 && subject.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_id {
        return Err(ApiError::bad_request(
            "subject: a URL or a subject id (32 hex digits)",
        ));
    }
    let subject = subject.to_ascii_lowercase();
    let rows = state
        .shared
        .store
        .subjects()
        .map_err(|e| ApiError::internal(format!("reading subjects: {e}")))?;
    rows.into_iter()
        .map(|r| r.url)
        .find(|url| super::signed::subject_id(url) == subject)
        .ok_or_else(|| ApiError::not_found(format!("no subject with id {subject}")))
}

/// Hands `action` to the daemon's loop and waits for its answer.
async fn ask(state: &ApiState, action: AdminAction) -> Result<AdminDone, ApiError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    send(state, Command::Admin(action, tx)).await?;
    receive(rx).await?.map_err(refused)
}

/// Sends a command into the loop (refused when the loop is gone or stopping).
pub(crate) async fn send(state: &ApiState, command: Command) -> Result<(), ApiError> {
    match tokio::time::timeout(LOOP_ANSWER_TIMEOUT, state.commands.send(command)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(ApiError::new(
            ErrorCode::Unavailable,
            "the daemon is stopping",
        )),
        Err(_) => Err(ApiError::new(
            ErrorCode::Timeout,
            "the daemon's loop did not take the request in time",
        )),
    }
}

/// Waits for the loop's answer.
pub(crate) async fn receive<T>(rx: tokio::sync::oneshot::Receiver<T>) -> Result<T, ApiError> {
    match tokio::time::timeout(LOOP_ANSWER_TIMEOUT, rx).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(_)) => Err(ApiError::new(
            ErrorCode::Unavailable,
            "the daemon stopped before answering",
        )),
        Err(_) => Err(ApiError::new(
            ErrorCode::Timeout,
            "the daemon's loop did not answer in time",
        )),
    }
}

/// The API error for a refusal of the loop.
pub(crate) fn refused(e: ActionRefused) -> ApiError {
    match e {
        ActionRefused::UnknownSubject(m) => ApiError::not_found(m),
        ActionRefused::Conflict(m) => ApiError::new(ErrorCode::Conflict, m),
        ActionRefused::Invalid(m) => ApiError::bad_request(m),
        ActionRefused::Internal(m) => ApiError::internal(m),
    }
}

/// Keeps the token type shareable between the router's clones.
pub(crate) type SharedToken = Option<Arc<AdminToken>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_matches_itself_only() {
        let token = AdminToken::from_secret(b"0123456789abcdef0123456789abcdef");
        assert!(token.matches(b"0123456789abcdef0123456789abcdef"));
        assert!(!token.matches(b"0123456789abcdef0123456789abcdeF"));
        assert!(!token.matches(b"0123456789abcdef0123456789abcde"));
        assert!(!token.matches(b""));
    }
}
