//! The free probe run: the unpaid samples, the operator file, the listing and the chain reads that the
//! free checks need, collected once into a [`FreeObservation`]. Nothing here decides an outcome.

use std::time::Duration;

use alloy::primitives::Address;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::observation::{ChainSeen, FreeObservation, ListingSeen, PageSeen, Sample, TokenSeen};
use crate::probe::http::{FetchConfig, FetchRequest, fetch};
use crate::probe::rpc::Rpc;
use crate::x402::parse::parse_payment_required;
use crate::x402::types::PaymentRequired;

/// The path of the operator file (format: `probes/operator-file.md`).
pub use crate::x402::operator::OPERATOR_FILE_PATH;
/// Catalogue pages read at most (100 items each) before giving up on finding the subject.
const MAX_LISTING_PAGES: usize = 50;
const LISTING_PAGE_SIZE: usize = 100;

#[derive(Debug, Clone)]
pub struct FreeProbeConfig {
    pub fetch: FetchConfig,
    /// Unpaid requests per run (R1, R2, R3 are measured on each).
    pub samples: usize,
    /// Pause between samples, so a run is not a burst.
    pub spacing: Duration,
    /// A discovery catalogue (`.../discovery/resources`) to read the listed price from (H1).
    pub listing: Option<String>,
    /// The fixed RPC (C3).
    pub rpc: Option<Rpc>,
    /// Tokens accepted as real besides the canonical USDC deployments.
    pub declared_assets: Vec<Address>,
    pub vantage: String,
}

impl Default for FreeProbeConfig {
    fn default() -> Self {
        FreeProbeConfig {
            fetch: FetchConfig::default(),
            samples: 5,
            spacing: Duration::from_millis(200),
            listing: None,
            rpc: None,
            declared_assets: Vec::new(),
            vantage: "local".into(),
        }
    }
}

/// Probe `url` for free. `now` is the run's start (unix seconds), passed in so tests control time.
pub async fn probe_free(cfg: &FreeProbeConfig, url: &str, now: i64) -> FreeObservation {
    let mut samples = Vec::with_capacity(cfg.samples.max(1));
    let first = FetchRequest::get(url);
    let exchange = fetch(&cfg.fetch, &first).await;
    let quote = exchange
        .response
        .as_ref()
        .and_then(|r| parse_payment_required(r.status, &r.headers, &r.body).required);
    let documented = quote.as_ref().and_then(|q| documented_request(url, q));
    samples.push(Sample {
        request: first,
        exchange,
    });
    let template = documented.unwrap_or_else(|| FetchRequest::get(url));
    for _ in 1..cfg.samples.max(1) {
        tokio::time::sleep(cfg.spacing).await;
        let exchange = fetch(&cfg.fetch, &template).await;
        samples.push(Sample {
            request: template.clone(),
            exchange,
        });
    }

    let operator_file = match origin_of(url) {
        Some(origin) => Some(
            fetch(
                &cfg.fetch,
                &FetchRequest::get(format!("{origin}{OPERATOR_FILE_PATH}")),
            )
            .await,
        ),
        None => None,
    };
    let listing = match &cfg.listing {
        None => ListingSeen::NotAsked,
        Some(listing_url) => read_listing(&cfg.fetch, listing_url, url, now).await,
    };
    let chain = match &cfg.rpc {
        None => ChainSeen::NoRpc,
        Some(rpc) => read_chain(rpc, quote.as_ref()).await,
    };
    FreeObservation {
        subject: url.to_string(),
        vantage: cfg.vantage.clone(),
        at: now,
        samples,
        operator_file,
        listing,
        chain,
        declared_assets: cfg.declared_assets.clone(),
        allow_private: cfg.fetch.allow_private,
    }
}

/// `scheme://host[:port]` of a URL.
pub fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    (!authority.is_empty()).then(|| format!("{scheme}://{authority}"))
}

/// The URL without query or fragment, and without a trailing slash: how listings are matched.
pub fn canonical_resource(url: &str) -> String {
    let base = url.split(['?', '#']).next().unwrap_or(url);
    base.trim_end_matches('/').to_string()
}

/// The request the endpoint documents (v2 bazaar `info.input`): its method and example query or body.
fn documented_request(url: &str, quote: &PaymentRequired) -> Option<FetchRequest> {
    let input = quote
        .extensions
        .as_ref()?
        .get("bazaar")?
        .pointer("/info/input")?;
    if input.get("type").and_then(Value::as_str) != Some("http") {
        return None;
    }
    let method = input
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("GET")
        .to_ascii_uppercase();
    let mut target = canonical_resource(url);
    if let Some(params) = input.get("queryParams").and_then(Value::as_object) {
        let pairs: Vec<String> = params
            .iter()
            .filter_map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => return None,
                };
                Some(format!("{}={}", percent_encode(k), percent_encode(&v)))
            })
            .collect();
        if !pairs.is_empty() {
            target = format!("{target}?{}", pairs.join("&"));
        }
    }
    let mut req = FetchRequest::get(target);
    req.method = method.clone();
    if matches!(method.as_str(), "POST" | "PUT" | "PATCH")
        && let Some(body) = input.get("body")
    {
        req.body = match body {
            Value::String(s) => s.clone().into_bytes(),
            other => other.to_string().into_bytes(),
        };
        let content_type = match input.get("bodyType").and_then(Value::as_str) {
            Some("text") => "text/plain",
            Some("form-data") => "application/x-www-form-urlencoded",
            _ => "application/json",
        };
        req.headers
            .push(("content-type".into(), content_type.into()));
    }
    Some(req)
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

async fn read_listing(
    cfg: &FetchConfig,
    listing_url: &str,
    subject: &str,
    now: i64,
) -> ListingSeen {
    let want = canonical_resource(subject);
    let mut pages = Vec::new();
    let mut offset = 0usize;
    let mut items_seen = 0usize;
    let sep = if listing_url.contains('?') { '&' } else { '?' };
    for _ in 0..MAX_LISTING_PAGES {
        let page_url = format!("{listing_url}{sep}limit={LISTING_PAGE_SIZE}&offset={offset}");
        let ex = fetch(cfg, &FetchRequest::get(page_url.clone())).await;
        let status = ex.status();
        let body = ex.response.as_ref().map(|r| r.body.clone());
        pages.push(PageSeen {
            url: page_url.clone(),
            at: now,
            status,
            sha256: body.as_ref().map(|b| hex::encode(Sha256::digest(b))),
        });
        let fail = |error: String, pages: Vec<PageSeen>| ListingSeen::Failed {
            url: listing_url.to_string(),
            error,
            pages,
        };
        if let Some(e) = ex.error {
            return fail(
                format!("{:?} during {:?}: {}", e.kind, e.phase, e.message),
                pages,
            );
        }
        if status != Some(200) {
            return fail(format!("HTTP {}", status.unwrap_or(0)), pages);
        }
        let Ok(page) = serde_json::from_slice::<Value>(&body.unwrap_or_default()) else {
            return fail("the page is not JSON".into(), pages);
        };
        let Some(items) = page.get("items").and_then(Value::as_array) else {
            return fail("the page has no items array".into(), pages);
        };
        items_seen += items.len();
        if let Some(item) = items.iter().find(|i| {
            i.get("resource")
                .and_then(Value::as_str)
                .map(canonical_resource)
                .as_deref()
                == Some(want.as_str())
        }) {
            return ListingSeen::Read {
                url: listing_url.to_string(),
                pages,
                items_seen,
                item: Some(item.clone()),
            };
        }
        let total = page
            .pointer("/pagination/total")
            .and_then(Value::as_u64)
            .unwrap_or(0) as usize;
        offset += items.len();
        if items.is_empty() || offset >= total {
            return ListingSeen::Read {
                url: listing_url.to_string(),
                pages,
                items_seen,
                item: None,
            };
        }
    }
    ListingSeen::Failed {
        url: listing_url.to_string(),
        error: format!("more than {MAX_LISTING_PAGES} pages; stopped before finding the subject"),
        pages,
    }
}

async fn read_chain(rpc: &Rpc, quote: Option<&PaymentRequired>) -> ChainSeen {
    let chain_id = match rpc.chain_id().await {
        Ok(id) => id,
        Err(e) => {
            return ChainSeen::RpcDown {
                url: rpc.url().to_string(),
                error: e.to_string(),
            };
        }
    };
    let mut assets: Vec<Address> = Vec::new();
    for req in quote.map(|q| q.accepts.as_slice()).unwrap_or_default() {
        if req.chain_id() == Some(chain_id)
            && let Some(asset) = req.asset_address()
            && !assets.contains(&asset)
        {
            assets.push(asset);
        }
    }
    let mut tokens = Vec::new();
    for asset in assets {
        tokens.push(match rpc.token_domain_fields(asset).await {
            Ok(f) => TokenSeen {
                asset,
                name: f.name,
                version: f.version,
                domain_separator: f.domain_separator,
                rpc_error: None,
            },
            Err(e) => TokenSeen {
                asset,
                name: None,
                version: None,
                domain_separator: None,
                rpc_error: Some(e.to_string()),
            },
        });
    }
    ChainSeen::Read {
        url: rpc.url().to_string(),
        chain_id,
        tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_canonical_resources() {
        assert_eq!(
            origin_of("https://a.example:8443/x?y=1").as_deref(),
            Some("https://a.example:8443")
        );
        assert_eq!(origin_of("not a url"), None);
        assert_eq!(
            canonical_resource("https://a.example/x/?q=1#f"),
            "https://a.example/x"
        );
    }

    #[test]
    fn percent_encoding_keeps_unreserved_only() {
        assert_eq!(percent_encode("São Paulo&x=1"), "S%C3%A3o%20Paulo%26x%3D1");
    }
}
