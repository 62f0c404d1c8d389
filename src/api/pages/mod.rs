//! The HTML pages: an index of subjects and one page per subject, rendered on the server.
//!
//! - `facts.rs` is what the API's in-memory view keeps for each subject's page (folded forward
//!   from the ledger as scores are published); `view.rs` builds the pages' typed views from that
//!   view (the one place pages read data: no store read per request);
//! - `render.rs` and `chart.rs` turn a view into HTML, pure `fn(&View) -> String`;
//! - `html.rs` bounds and escapes every value shown (endpoint text is hostile);
//! - `pages.css` is the only asset, served by us.
//!
//! No script and no third-party asset: every response carries a strict Content-Security-Policy
//! ([`CONTENT_SECURITY_POLICY`]), sorting is done by the server through links, and the history
//! chart is inline SVG styled by the stylesheet.

pub(crate) mod chart;
pub(crate) mod facts;
pub(crate) mod html;
pub(crate) mod order;
pub(crate) mod render;
pub(crate) mod view;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use bytes::Bytes;

use super::ApiState;
use crate::api::view::off_runtime;
use facts::Latest;

/// Sent with every page and the stylesheet: nothing but our own stylesheet and inline images
/// (`data:`, the favicon) may load; no script at all, no framing, no form posts.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; \
     img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The stylesheet, embedded in the binary.
pub const STYLESHEET: &str = include_str!("pages.css");

/// The pages' routes (`/`, `/subjects/{id}`, the stylesheet), public, mounted by `api::router`.
pub(crate) fn routes() -> Router<ApiState> {
    Router::new()
        .route("/", get(index_page))
        .route("/subjects/{id}", get(subject_page))
        .route(render::STYLESHEET_PATH, get(stylesheet))
}

fn with_headers(status: StatusCode, content_type: &'static str, body: impl Into<Body>) -> Response {
    let mut response = (status, body.into()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

fn page(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut response = with_headers(status, "text/html; charset=utf-8", body);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The page a client over the rate limit gets, with `Retry-After` (seconds).
pub(crate) fn rate_limited(retry_after_secs: u64) -> Response {
    let mut response = page(
        StatusCode::TOO_MANY_REQUESTS,
        render::rate_limited(retry_after_secs),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
    response
}

async fn stylesheet() -> Response {
    let mut response = with_headers(StatusCode::OK, "text/css; charset=utf-8", STYLESHEET);
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}

async fn index_page(
    State(state): State<ApiState>,
    query: Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(pairs)) => {
            view::IndexQuery::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| e.to_string())
        }
        Err(e) => Err(e.body_text()),
    };
    let query = match query {
        Ok(q) => q,
        Err(why) => return page(StatusCode::BAD_REQUEST, render::bad_request(&why)),
    };
    // The page is a function of the view and the query alone: rendered once for each view
    // published (its rows' documents read from the store), then served from memory.
    let now = state.view.current();
    if let Some(body) = state.view.index_page(&now, query) {
        return page(StatusCode::OK, body);
    }
    let shown = state.view.clone();
    let body = off_runtime(move || {
        let v = view::index_view(&now, query, |e| shown.latest_document(e));
        let body = Bytes::from(render::index(&v));
        // A row whose document could not be read now is not kept.
        if !v
            .rows
            .iter()
            .any(|r| matches!(r.latest, Latest::Unreadable(_)))
        {
            shown.keep_index_page(&now, query, body.clone());
        }
        body
    })
    .await;
    page(StatusCode::OK, body)
}

async fn subject_page(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    let Some(entry) = state.view.current().get(&id).cloned() else {
        return page(StatusCode::NOT_FOUND, render::not_found(&id));
    };
    let outages = state
        .shared
        .outages
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let shown = state.view.clone();
    let body = off_runtime(move || {
        shown.page(&entry, &outages, |details| {
            render::subject(&view::subject_view(&entry, details, outages.clone()))
        })
    })
    .await;
    page(StatusCode::OK, body)
}
