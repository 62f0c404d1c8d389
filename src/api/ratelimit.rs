//! The per-client rate limit of the public routes: a token bucket per client IP (`rate_per_second`
//! sustained, `rate_burst` at once). Over it, a request gets 429 with `Retry-After`, before any
//! work: a JSON error on the API's routes, an HTML page on the pages. Buckets live in a few shards (one lock each, held for a few arithmetic operations); a
//! shard that grows large forgets its full buckets (clients idle long enough to be back at burst),
//! so memory stays bounded by the clients active within one burst's refill time.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, ApiState, ClientAddr, ErrorCode};

const SHARDS: usize = 16;
/// Buckets one shard keeps before forgetting the full ones.
const SHARD_SOFT_CAP: usize = 4_096;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets by client IP.
pub(crate) struct RateLimiter {
    per_second: f64,
    burst: f64,
    shards: Vec<Mutex<HashMap<IpAddr, Bucket>>>,
    hasher: std::collections::hash_map::RandomState,
}

impl RateLimiter {
    pub(crate) fn new(per_second: u64, burst: u64) -> RateLimiter {
        RateLimiter {
            per_second: per_second.max(1) as f64,
            burst: burst.max(1) as f64,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: Default::default(),
        }
    }

    /// Takes one token for `ip` at `now`: `Ok` or the seconds until one is back.
    pub(crate) fn take(&self, ip: IpAddr, now: Instant) -> Result<(), u64> {
        let shard = &self.shards[(self.hasher.hash_one(ip) as usize) % SHARDS];
        let mut buckets = shard.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= SHARD_SOFT_CAP {
            let (rate, burst) = (self.per_second, self.burst);
            buckets.retain(|_, b| b.tokens + rate * now.duration_since(b.at).as_secs_f64() < burst);
        }
        let bucket = buckets.entry(ip).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let refilled =
            bucket.tokens + self.per_second * now.duration_since(bucket.at).as_secs_f64();
        bucket.tokens = refilled.min(self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - bucket.tokens) / self.per_second;
            Err(wait.ceil().max(1.0) as u64)
        }
    }
}

/// Put on a request whose token was taken before the router (preflight's answers kept in
/// memory, `preflight::from_memory`), so that the router's limit does not take a second one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenTaken;

/// Takes a token for the request's client: `Ok`, or the seconds until one is back.
fn take(state: &ApiState, request: &Request<Body>) -> Result<(), u64> {
    let ip = request
        .extensions()
        .get::<ClientAddr>()
        .map(|c| c.0.ip())
        // A request without a connection's address (none in this server) shares one bucket.
        .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    state.limiter.take(ip, Instant::now())
}

/// The middleware of the public pages: over the limit, an HTML page (a person reads it) with
/// `Retry-After`. The pages and the JSON routes draw on the same bucket per client.
pub(crate) async fn limit_pages(
    State(state): State<ApiState>,
    request: Request<Body>,
    next: Next,
) -> Response {
    match take(&state, &request) {
        Ok(()) => next.run(request).await,
        Err(secs) => super::pages::rate_limited(secs),
    }
}

/// The middleware of the public JSON routes.
pub(crate) async fn limit_public(
    State(state): State<ApiState>,
    request: Request<Body>,
    next: Next,
) -> Response {
    if request.extensions().get::<TokenTaken>().is_some() {
        return next.run(request).await;
    }
    match take(&state, &request) {
        Ok(()) => next.run(request).await,
        Err(secs) => over_limit(&state, secs),
    }
}

/// The answer of a public JSON route to a client over its limit.
pub(crate) fn over_limit(state: &ApiState, secs: u64) -> Response {
    ApiError {
        code: ErrorCode::RateLimited,
        message: format!(
            "over {} requests per second from this address; retry in {secs} s",
            state.config.rate_per_second
        ),
        retry_after: Some(secs),
    }
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_client_gets_its_burst_then_its_rate_and_others_are_apart() {
        let limiter = RateLimiter::new(2, 3);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.take(a, t0), Ok(()));
        }
        assert_eq!(limiter.take(a, t0), Err(1));
        // Another client is not affected.
        assert_eq!(limiter.take(b, t0), Ok(()));
        // Half a second at 2/s is one token back.
        assert_eq!(limiter.take(a, t0 + Duration::from_millis(500)), Ok(()));
        assert_eq!(limiter.take(a, t0 + Duration::from_millis(500)), Err(1));
    }

    #[test]
    fn idle_full_buckets_are_forgotten_when_a_shard_is_large() {
        let limiter = RateLimiter::new(1_000, 1);
        let t0 = Instant::now();
        for i in 0..(SHARDS * SHARD_SOFT_CAP * 2) as u32 {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(i));
            let _ = limiter.take(ip, t0 + Duration::from_millis(u64::from(i)));
        }
        let kept: usize = limiter.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(kept <= SHARDS * (SHARD_SOFT_CAP + 1), "{kept} buckets kept");
    }
}
