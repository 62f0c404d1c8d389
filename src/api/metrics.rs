//! `GET /metrics`: the Prometheus exposition (`crate::metrics`). Not behind the public rate
//! limit (Prometheus scrapes it on its own schedule, and must not lose to the public) but behind
//! one of its own: [`SCRAPES_PER_SECOND`] per client address with bursts of [`SCRAPE_BURST`]
//! (over it, 429 JSON with `Retry-After`), and at most [`RENDERS_AT_ONCE`] renders at once (each
//! reads the stores); like every route it is on the API's bind address, loopback by default.

use std::net::IpAddr;
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::ratelimit::RateLimiter;
use super::{ApiError, ApiState, ClientAddr, ErrorCode};
use crate::metrics::Format;

/// Scrapes one client address may make per second, sustained (Prometheus asks every 15 s or so).
pub const SCRAPES_PER_SECOND: u64 = 2;
/// Scrapes one client may make at once above that.
pub const SCRAPE_BURST: u64 = 10;
/// Renders of the exposition at once, all clients together (more wait their turn).
pub const RENDERS_AT_ONCE: usize = 2;

/// `/metrics`' limits.
pub(crate) struct ScrapeLimit {
    per_client: RateLimiter,
    renders: tokio::sync::Semaphore,
}

impl ScrapeLimit {
    pub(crate) fn new() -> ScrapeLimit {
        ScrapeLimit {
            per_client: RateLimiter::new(SCRAPES_PER_SECOND, SCRAPE_BURST),
            renders: tokio::sync::Semaphore::new(RENDERS_AT_ONCE),
        }
    }
}

pub(crate) fn routes() -> Router<ApiState> {
    Router::new().route("/metrics", get(metrics))
}

/// OpenMetrics when the scraper asks for it, the classic text format otherwise. The exposition
/// reads the stores (a few short queries): off the runtime's workers.
async fn metrics(
    State(state): State<ApiState>,
    axum::Extension(client): axum::Extension<ClientAddr>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let ip: IpAddr = client.0.ip();
    if let Err(secs) = state.scrapes.per_client.take(ip, Instant::now()) {
        return Err(ApiError {
            code: ErrorCode::RateLimited,
            message: format!(
                "over {SCRAPES_PER_SECOND} scrapes per second from this address; retry in {secs} s"
            ),
            retry_after: Some(secs),
        });
    }
    // Closed never (the semaphore lives as long as the state).
    let _render = state
        .scrapes
        .renders
        .acquire()
        .await
        .map_err(|e| ApiError::internal(format!("waiting to render the metrics: {e}")))?;
    let format = Format::from_accept(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let shared = state.shared.clone();
    let text = tokio::task::spawn_blocking(move || {
        crate::daemon::pipeline::scrape(&shared)
            .and_then(|scrape| shared.metrics.render(&scrape, format))
    })
    .await
    .map_err(|e| ApiError::internal(format!("rendering the metrics: {e}")))?
    .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        )],
        text,
    )
        .into_response())
}
