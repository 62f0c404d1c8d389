//! `GET /v1/snapshots/{day}` and `/v1/snapshots/latest`: the signed daily snapshots
//! (`src/snapshot/`), served byte for byte as the ledger keeps them (its blob), gzip-compressed
//! when the client accepts it. A day's file never changes once made, so it is cacheable for good
//! (`immutable`, its SHA-256 as the ETag); `latest` moves once a day and is cached briefly. A day
//! not over yet, or before the ledger's first day, is a 404 (and so is a day over whose snapshot
//! the next checkpoint has not made yet, with its own message).

use std::io::Write;
use std::sync::Mutex;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::v1::blocking;
use super::{ApiError, ApiState};
use crate::ledger::record::SnapshotRecord;
use crate::snapshot::make::{first_day, snapshots};
use crate::snapshot::{day_end_ms, day_start_ms};

/// How long a cache may keep `latest` (the next day's snapshot replaces it).
const LATEST_MAX_AGE_SECS: u32 = 300;

pub(crate) async fn day(
    State(state): State<ApiState>,
    day: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Path(day) = day.map_err(|e| ApiError::bad_request(format!("path: {}", e.body_text())))?;
    let (Some(_), Some(end)) = (day_start_ms(&day), day_end_ms(&day)) else {
        return Err(ApiError::bad_request(
            "a snapshot is named by its UTC day: YYYY-MM-DD",
        ));
    };
    let now = state.shared.clock.now_ms();
    if end > now {
        return Err(ApiError::not_found(format!(
            "{day} is not over yet (UTC): its snapshot is made after it ends"
        )));
    }
    let store = state.shared.store.clone();
    let (all, first) = blocking(move || Ok((snapshots(&*store)?, first_day(&*store)?))).await?;
    if let Some(record) = all.into_iter().find(|s| s.day == day) {
        return serve(&state, record, &headers, Cache::Immutable).await;
    }
    Err(ApiError::not_found(match first {
        Some(first) if first.as_str() <= day.as_str() => format!(
            "the snapshot of {day} is not made yet: it is made at the first checkpoint after \
             the day ends"
        ),
        Some(first) => format!("{day} is before the ledger began ({first})"),
        None => format!("{day} is before the ledger began (it has no entries yet)"),
    }))
}

pub(crate) async fn latest(
    State(state): State<ApiState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let store = state.shared.store.clone();
    let Some(record) = blocking(move || snapshots(&*store)).await?.pop() else {
        return Err(ApiError::not_found(
            "no snapshot yet: the first is made once the ledger's first day is over",
        ));
    };
    serve(&state, record, &headers, Cache::Latest).await
}

#[derive(Clone, Copy)]
enum Cache {
    Immutable,
    Latest,
}

async fn serve(
    state: &ApiState,
    record: SnapshotRecord,
    headers: &HeaderMap,
    cache: Cache,
) -> Result<Response, ApiError> {
    let Some(sha) = hex::decode(&record.sha256)
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
    else {
        return Err(ApiError::internal(format!(
            "the snapshot entry of {} names no SHA-256",
            record.day
        )));
    };
    let gzip = accepts_gzip(headers);
    let store = state.shared.store.clone();
    let name = record.sha256.clone();
    let body = blocking(move || {
        if gzip && let Some(cached) = cached_gzip(&name) {
            return Ok(Some(cached));
        }
        let Some(bytes) = store.blob(&sha)? else {
            return Ok(None);
        };
        Ok(Some(if gzip {
            let packed = gzip_bytes(&bytes);
            keep_gzip(&name, packed.clone());
            packed
        } else {
            Bytes::from(bytes)
        }))
    })
    .await?
    .ok_or_else(|| {
        ApiError::internal(format!(
            "the snapshot of {} is missing from the ledger's blobs",
            record.day
        ))
    })?;
    let mut response = (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::VARY, HeaderValue::from_static("accept-encoding")),
        ],
        body,
    )
        .into_response();
    let h = response.headers_mut();
    if gzip {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    let etag = format!("\"{}{}\"", record.sha256, if gzip { "-gzip" } else { "" });
    let cache_control = match cache {
        Cache::Immutable => "public, max-age=31536000, immutable".to_string(),
        Cache::Latest => format!("public, max-age={LATEST_MAX_AGE_SECS}"),
    };
    let location = format!("/v1/snapshots/{}", record.day);
    for (name, value) in [
        (header::ETAG, etag),
        (header::CACHE_CONTROL, cache_control),
        (header::CONTENT_LOCATION, location),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    Ok(response)
}

/// Whether `Accept-Encoding` lists gzip (without `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
}

fn gzip_bytes(bytes: &[u8]) -> Bytes {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(bytes);
    Bytes::from(encoder.finish().unwrap_or_default())
}

/// The last few snapshots served compressed, by SHA-256 (content-addressed: right for any
/// daemon in the process): compressing is done once per file, not per request.
static GZIPPED: Mutex<Vec<(String, Bytes)>> = Mutex::new(Vec::new());
const GZIPPED_KEPT: usize = 4;

fn cached_gzip(sha256: &str) -> Option<Bytes> {
    GZIPPED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(k, _)| k == sha256)
        .map(|(_, v)| v.clone())
}

fn keep_gzip(sha256: &str, packed: Bytes) {
    let mut kept = GZIPPED.lock().unwrap_or_else(|p| p.into_inner());
    kept.retain(|(k, _)| k != sha256);
    kept.push((sha256.to_string(), packed));
    if kept.len() > GZIPPED_KEPT {
        kept.remove(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_used_when_accepted_and_not_when_refused() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            accepts_gzip(&h)
        };
        assert!(with("gzip"));
        assert!(with("br, GZIP;q=0.5"));
        assert!(with("*"));
        assert!(!with("gzip;q=0"));
        assert!(!with("br, zstd"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
