//! The HTTP server inside the daemon: the public JSON API under `/v1` (read-only, rate-limited per
//! client, served from an in-memory view of the latest scores), and the routes others mount beside
//! it (pages, metrics, the operator's routes) through [`router`].
//!
//! The listener is bound when the daemon opens (before systemd hears READY=1), served by hyper's
//! http1 on our own accept loop (a cap on connections in all and per client address, a deadline
//! for a request's head, a stalled connection closed, keep-alive; `conn.rs`)
//! and stopped gracefully when the daemon stops: requests in flight finish, idle connections close.
//! Every error is JSON: `{"error": {"code": <ErrorCode>, "message": ...}}`, whoever produced it
//! (a handler, a rejected extractor, the timeout or body-limit layers, an unknown route, hyper's
//! own answer to a request it cannot parse, a connection over its client's share).

pub(crate) mod admin;
pub(crate) mod conn;
pub(crate) mod metrics;
pub mod openapi;
pub(crate) mod operator;
pub mod pages;
pub mod preflight;
pub(crate) mod ratelimit;
pub mod signed;
pub(crate) mod snapshots;
pub(crate) mod types;
pub(crate) mod v1;
pub(crate) mod view;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::config::ApiConfig;
use crate::control::Command;
use crate::daemon::pipeline::ReadSide;
use crate::ledger::key::ReporterKey;

/// How long a stop waits for requests in flight before closing their connections.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// What every route's handler can reach.
#[derive(Clone)]
pub(crate) struct ApiState {
    /// What the API may read of the daemon (the ledger's read-only handle, rubric, outages,
    /// summaries, spend totals): no wallet, no write connection.
    pub(crate) shared: Arc<ReadSide>,
    /// The latest scores as served (rebuilt when scores change, never read per request).
    pub(crate) view: Arc<view::View>,
    /// The reporter key's public half: what signed scores and checkpoints verify against.
    pub(crate) reporter_public: [u8; 32],
    /// Rubric files by their SHA-256 (hex), byte for byte.
    pub(crate) rubrics: Arc<BTreeMap<String, Bytes>>,
    /// Requests into the daemon's loop (its status now; admin actions later).
    pub(crate) commands: mpsc::Sender<Command>,
    pub(crate) config: Arc<ApiConfig>,
    pub(crate) limiter: Arc<ratelimit::RateLimiter>,
    /// The admin token (absent: admin actions are refused), set from [`Bound`].
    pub(crate) admin_token: admin::SharedToken,
    /// Operators' challenges, outstanding.
    pub(crate) challenges: Arc<operator::Challenges>,
    /// `/metrics`' own per-client limit and its renders at once.
    pub(crate) scrapes: Arc<metrics::ScrapeLimit>,
}

impl ApiState {
    /// The state for `shared`: the view built from the store and kept fresh by a task of its own
    /// (started here, on the current runtime).
    pub(crate) fn new(
        shared: Arc<ReadSide>,
        key: ReporterKey,
        commands: mpsc::Sender<Command>,
        config: ApiConfig,
        rubric_files: Vec<Vec<u8>>,
    ) -> ApiState {
        let mut rubrics = BTreeMap::new();
        for bytes in rubric_files {
            let sha = crate::evidence::sha256_hex(&bytes);
            rubrics.insert(sha, Bytes::from(bytes));
        }
        let limiter = Arc::new(ratelimit::RateLimiter::new(
            config.rate_per_second.get(),
            config.rate_burst.get(),
        ));
        let view = view::View::start(shared.clone(), key.clone());
        ApiState {
            shared,
            view,
            reporter_public: key.public_key(),
            rubrics: Arc::new(rubrics),
            commands,
            challenges: Arc::new(operator::Challenges::new(
                config.operator_challenge_ttl_secs.get(),
            )),
            config: Arc::new(config),
            limiter,
            scrapes: Arc::new(metrics::ScrapeLimit::new()),
            admin_token: None,
        }
    }
}

/// Every route. The public routes and the operator's (anyone may ask; a proof decides) sit
/// behind the per-client rate limit, the pages too (answered in HTML); metrics behind a limit of
/// its own (`metrics.rs`); the admin routes behind the admin token.
pub(crate) fn router(state: ApiState) -> Router {
    let public = Router::new()
        .merge(openapi::routes(openapi::Access::Public))
        .merge(openapi::routes(openapi::Access::OperatorProof))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            ratelimit::limit_public,
        ));
    let pages = pages::routes().route_layer(middleware::from_fn_with_state(
        state.clone(),
        ratelimit::limit_pages,
    ));
    let private: Router<ApiState> = Router::new().merge(metrics::routes()).merge(
        openapi::routes(openapi::Access::AdminToken).route_layer(middleware::from_fn_with_state(
            state.clone(),
            admin::require_token,
        )),
    );
    let timeout = state.config.request_timeout_ms.millis();
    let max_body = state.config.max_body_bytes.count();
    Router::new()
        .merge(public)
        .merge(pages)
        .merge(private)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(tower_http::limit::RequestBodyLimitLayer::new(max_body))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            timeout,
        ))
        .layer(middleware::from_fn(json_errors))
        .with_state(state)
}

/// The stable codes of every error the API returns (clients branch on these, not on messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is malformed: a bad parameter, id or cursor.
    BadRequest,
    /// No such route, subject, rubric or checkpoint.
    NotFound,
    /// The route exists but not with this method.
    MethodNotAllowed,
    /// The request body is larger than the API reads.
    PayloadTooLarge,
    /// Over the per-client rate limit; retry after the `Retry-After` header's seconds.
    RateLimited,
    /// Credentials are missing or wrong.
    Unauthorized,
    /// The credentials do not allow this.
    Forbidden,
    /// The request took longer than the API allows, or the daemon did not answer in time.
    Timeout,
    /// The daemon cannot answer this now (e.g. it is stopping).
    Unavailable,
    /// Something failed on our side.
    Internal,
    /// The request contradicts the current state (a subject already probed, not paused, ...).
    Conflict,
    /// No such operator challenge (never issued, or expired long ago).
    ChallengeUnknown,
    /// The challenge expired before its signature was presented.
    ChallengeExpired,
    /// The challenge was already presented once (a challenge is single use).
    ChallengeUsed,
    /// The challenge was issued for another operator action (reading entries, posting a note).
    ChallengeOtherAction,
    /// The signature is malformed or recovers no signer.
    BadSignature,
    /// The signer is neither the subject's payTo nor one of its declared operator keys.
    NotOperator,
    /// Preflight: the `PAYMENT-REQUIRED` value sent is not base64 (or is empty).
    PaymentRequiredNotBase64,
    /// Preflight: the PaymentRequired sent is larger than x402's bounds (64 KiB decoded for the
    /// header, 1 MiB for a body).
    PaymentRequiredTooLarge,
    /// Preflight: the PaymentRequired sent nests deeper (64 levels) or holds more JSON values
    /// (20,000) than x402's bounds.
    PaymentRequiredTooDeep,
    /// Preflight: the PaymentRequired sent is not a JSON object.
    PaymentRequiredNotJson,
    /// Preflight: what was sent holds no PaymentRequired (neither `x402Version` nor `accepts`).
    PaymentRequiredMissing,
}

impl ErrorCode {
    pub(crate) fn status(self) -> StatusCode {
        match self {
            ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::Forbidden => StatusCode::FORBIDDEN,
            ErrorCode::Timeout => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Conflict => StatusCode::CONFLICT,
            ErrorCode::ChallengeUnknown
            | ErrorCode::ChallengeExpired
            | ErrorCode::ChallengeUsed => StatusCode::UNAUTHORIZED,
            ErrorCode::ChallengeOtherAction => StatusCode::FORBIDDEN,
            ErrorCode::BadSignature => StatusCode::BAD_REQUEST,
            ErrorCode::NotOperator => StatusCode::FORBIDDEN,
            ErrorCode::PaymentRequiredNotBase64
            | ErrorCode::PaymentRequiredTooLarge
            | ErrorCode::PaymentRequiredTooDeep
            | ErrorCode::PaymentRequiredNotJson
            | ErrorCode::PaymentRequiredMissing => StatusCode::BAD_REQUEST,
        }
    }

    /// The code for a status some layer produced without a body of ours.
    fn for_status(status: StatusCode) -> ErrorCode {
        match status {
            StatusCode::NOT_FOUND => ErrorCode::NotFound,
            StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
            StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
            StatusCode::TOO_MANY_REQUESTS => ErrorCode::RateLimited,
            StatusCode::UNAUTHORIZED => ErrorCode::Unauthorized,
            StatusCode::FORBIDDEN => ErrorCode::Forbidden,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::REQUEST_TIMEOUT => ErrorCode::Timeout,
            s if s.is_client_error() => ErrorCode::BadRequest,
            _ => ErrorCode::Internal,
        }
    }
}

/// The body of every error response.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    /// For people; may change between versions.
    pub message: String,
}

/// An error a handler returns.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
    /// Seconds, for `Retry-After`.
    pub(crate) retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub(crate) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::NotFound, message)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::BadRequest, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Internal, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
            },
        };
        let mut response = (self.code.status(), axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route (the API's routes: /v1/openapi.json)")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this route does not take this method",
    )
}

/// Rewrites an error response some layer or extractor produced in its own form (plain text or no
/// body) into the JSON error form, keeping its status and headers.
async fn json_errors(request: Request<Body>, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    // Only bodies nobody shaped: none, or plain text (axum's rejections, tower-http's layers).
    // JSON is ours already; an HTML error page (the pages' routes) is left as it is.
    let unshaped = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.starts_with("text/plain"));
    if !unshaped {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // These bodies are short texts from axum or tower-http; a bounded read keeps it so.
    let text = axum::body::to_bytes(body, 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let code = ErrorCode::for_status(status);
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let body = serde_json::to_vec(&ErrorBody {
        error: ErrorDetail { code, message },
    })
    .unwrap_or_default();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}

/// The client's address, as the connection it came on has it (put on every request).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAddr(pub(crate) SocketAddr);

/// Why the API could not start.
#[derive(Debug, thiserror::Error)]
pub enum ApiStartError {
    #[error("[api] admin token: {0}")]
    AdminToken(#[from] crate::secret::SecretError),
    #[error("[api] bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A bound listener, not serving yet.
pub struct Bound {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    /// Read at the start too, so a configured token that cannot be read fails the start.
    admin_token: admin::SharedToken,
}

impl Bound {
    /// The address actually bound (port 0 resolved).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Binds the API's address (call on the runtime).
pub fn bind(config: &ApiConfig) -> Result<Bound, ApiStartError> {
    let err = |source| ApiStartError::Bind {
        addr: config.bind,
        source,
    };
    let std_listener = std::net::TcpListener::bind(config.bind).map_err(err)?;
    std_listener.set_nonblocking(true).map_err(err)?;
    let listener = tokio::net::TcpListener::from_std(std_listener).map_err(err)?;
    let addr = listener.local_addr().map_err(err)?;
    let admin_token = admin::load_token(config)?.map(Arc::new);
    Ok(Bound {
        listener,
        addr,
        admin_token,
    })
}

/// The server while it runs.
pub struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    addr: SocketAddr,
}

impl Running {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets requests in flight finish (at most `SHUTDOWN_GRACE`), closes.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(1), self.task)
            .await
            .is_err()
        {
            tracing::warn!("the API server did not stop in time");
        }
    }
}

/// Serves `router(state)` on `bound` until [`Running::shutdown`].
pub(crate) fn spawn(bound: Bound, mut state: ApiState) -> Running {
    state.admin_token = bound.admin_token;
    let (stop, stopped) = watch::channel(false);
    let addr = bound.addr;
    let config = state.config.clone();
    let app = router(state.clone());
    let task = tokio::spawn(serve(bound.listener, app, Arc::new(state), config, stopped));
    tracing::info!(%addr, "API listening");
    Running { stop, task, addr }
}

async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    state: Arc<ApiState>,
    config: Arc<ApiConfig>,
    mut stopped: watch::Receiver<bool>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(config.max_connections.count()));
    let per_client = conn::ClientSlots::new(config.max_connections_per_client.count());
    let over_share = conn::over_share_answer(config.max_connections_per_client.count());
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = stopped.changed() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: pause rather than spin.
                    tracing::warn!(error = %e, "API accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped.changed() => break,
        };
        let Some(client_slot) = per_client.take(peer.ip()) else {
            // Over its client's share: told so if it listens, and closed (its slot is free).
            let _ = stream.try_write(&over_share);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let state = state.clone();
        let mut stop = stopped.clone();
        let header_timeout = config.header_timeout_ms.millis();
        let idle_timeout = config.idle_timeout_ms.millis();
        connections.spawn(async move {
            let _permit = (permit, client_slot);
            let activity = conn::Activity::new();
            let answering = activity.clone();
            let service =
                hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let busy = answering.answering();
                    let (app, state) = (app.clone(), state.clone());
                    async move {
                        // Preflight's answers kept in memory go out before the router (which
                        // gets the request with its client's address put on).
                        let answer = match preflight::from_memory(&state, request, peer).await {
                            Ok(answer) => Ok(answer),
                            Err(request) => tower::ServiceExt::oneshot(app, request).await,
                        };
                        drop(busy);
                        answer
                    }
                });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                // The head deadline is `conn::Activity`'s (from a head's first byte), not
                // hyper's (from the end of the previous answer: it closed idle keep-alive).
                .header_read_timeout(None)
                .keep_alive(true);
            let io = conn::Conn::new(stream, activity.clone());
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service);
            tokio::pin!(conn);
            loop {
                // A stalled connection (nothing read or written, no request being answered), or
                // one whose head is late, is closed; while a request is answered, its own
                // timeout bounds it. Looked at again at least every head deadline, so that a
                // head begun meanwhile is timed.
                let now = std::time::Instant::now();
                let check = activity
                    .closes_at(idle_timeout, header_timeout)
                    .map_or(now + header_timeout, |at| at.min(now + header_timeout));
                tokio::select! {
                    _ = conn.as_mut() => break,
                    _ = stop.changed() => {
                        conn.as_mut().graceful_shutdown();
                        let _ = conn.await;
                        break;
                    }
                    _ = tokio::time::sleep_until(check.into()) => {
                        if activity
                            .closes_at(idle_timeout, header_timeout)
                            .is_some_and(|at| at <= std::time::Instant::now())
                        {
                            break;
                        }
                    }
                }
            }
        });
    }
    drop(listener);
    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    while !connections.is_empty() {
        match tokio::time::timeout_at(deadline, connections.join_next()).await {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(_) => {
                connections.abort_all();
                while connections.join_next().await.is_some() {}
                break;
            }
        }
    }
    tracing::info!("API stopped");
}
