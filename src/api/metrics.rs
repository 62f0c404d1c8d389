//! `GET /metrics`: the Prometheus exposition (`crate::metrics`). Not behind the public rate
//! limit (Prometheus scrapes it on its own schedule); like every route it is on the API's bind
//! address, loopback by default.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{ApiError, ApiState};
use crate::metrics::Format;

pub(crate) fn routes() -> Router<ApiState> {
    Router::new().route("/metrics", get(metrics))
}

/// OpenMetrics when the scraper asks for it, the classic text format otherwise. The exposition
/// reads the stores (a few short queries): off the runtime's workers.
async fn metrics(State(state): State<ApiState>, headers: HeaderMap) -> Result<Response, ApiError> {
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
