//! The HTML pages: an index of subjects and one page per subject, rendered on the server.
//!
//! - `view.rs` builds typed views from the store (the one place pages read data);
//! - `render.rs` and `chart.rs` turn a view into HTML, pure `fn(&View) -> String`;
//! - `html.rs` bounds and escapes every value shown (endpoint text is hostile);
//! - `pages.css` is the only asset, served by us.
//!
//! No script and no third-party asset: every response carries a strict Content-Security-Policy
//! ([`CONTENT_SECURITY_POLICY`]), sorting is done by the server through links, and the history
//! chart is inline SVG styled by the stylesheet.

pub(crate) mod chart;
pub(crate) mod html;
pub(crate) mod render;
pub(crate) mod view;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::ApiState;
use crate::store::{Store, StoreError};

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

fn with_headers(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let mut response = (status, body).into_response();
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

fn page(status: StatusCode, body: String) -> Response {
    let mut response = with_headers(status, "text/html; charset=utf-8", body);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

async fn stylesheet() -> Response {
    let mut response = with_headers(StatusCode::OK, "text/css; charset=utf-8", STYLESHEET.into());
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}

/// Runs a store read off the runtime's workers (SQLite blocks).
async fn read<T: Send + 'static>(
    store: &Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, Response> {
    let store = store.clone();
    match tokio::task::spawn_blocking(move || f(store.as_ref())).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "a page could not read the store");
            Err(page(StatusCode::SERVICE_UNAVAILABLE, render::unavailable()))
        }
        Err(e) => {
            tracing::warn!(error = %e, "a page's store read did not finish");
            Err(page(
                StatusCode::INTERNAL_SERVER_ERROR,
                render::unavailable(),
            ))
        }
    }
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
    match read(&state.shared.store, move |store| {
        view::index_view(store, query)
    })
    .await
    {
        Ok(v) => page(StatusCode::OK, render::index(&v)),
        Err(response) => response,
    }
}

async fn subject_page(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    let wanted = id.clone();
    let found = read(
        &state.shared.store,
        move |store| match view::find_subject(store, &wanted)? {
            Some(row) => view::subject_view(store, row).map(Some),
            None => Ok(None),
        },
    )
    .await;
    match found {
        Ok(Some(v)) => page(StatusCode::OK, render::subject(&v)),
        Ok(None) => page(StatusCode::NOT_FOUND, render::not_found(&id)),
        Err(response) => response,
    }
}
