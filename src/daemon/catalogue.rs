//! Reading a discovery catalogue on schedule: every page (bounded in pages, bytes and time), each
//! page's hash kept, the listed endpoints filtered and capped. What was read becomes a ledger entry;
//! its items are what H1 compares each listed subject's 402 with.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::evidence::free::PageSeen;
use crate::probe::http::{FetchConfig, FetchRequest, canonical_subject_url, fetch};
use crate::x402::catalogue::{item_networks, item_resource, read_page};

/// Entries asked for per page.
pub const PAGE_SIZE: usize = 100;

/// What reading one catalogue may cost.
#[derive(Debug, Clone, Copy)]
pub struct CatalogueBudget {
    pub max_pages: usize,
    pub max_bytes: usize,
    pub deadline: Duration,
    pub max_items: usize,
}

/// One catalogue read.
#[derive(Debug, Clone, Default)]
pub struct CatalogueSeen {
    pub pages: Vec<PageSeen>,
    pub items_seen: usize,
    /// Listed endpoints kept (canonical subject URL -> the item as listed; of several spellings of
    /// one endpoint, the last), at most `max_items`.
    pub items: BTreeMap<String, Value>,
    /// Why the read stopped short, when it did: then nothing is delisted on its account.
    pub error: Option<String>,
}

/// Reads `url` page by page within `budget`; `networks` (CAIP-2) filters items when not empty.
pub async fn read_catalogue(
    cfg: &FetchConfig,
    url: &str,
    networks: &[String],
    budget: CatalogueBudget,
    at_s: i64,
) -> CatalogueSeen {
    let mut seen = CatalogueSeen::default();
    let deadline = tokio::time::Instant::now() + budget.deadline;
    let sep = if url.contains('?') { '&' } else { '?' };
    let mut offset = 0usize;
    let mut bytes = 0usize;
    loop {
        if seen.pages.len() >= budget.max_pages {
            seen.error = Some(format!(
                "stopped after {} pages (the budget); items after them are not known",
                seen.pages.len()
            ));
            return seen;
        }
        let room = budget.max_bytes.saturating_sub(bytes);
        if room == 0 {
            seen.error = Some(format!("stopped after {bytes} bytes (the budget)"));
            return seen;
        }
        let page_cfg = FetchConfig {
            max_body_bytes: cfg.max_body_bytes.min(room),
            ..cfg.clone()
        };
        let page_url = format!("{url}{sep}limit={PAGE_SIZE}&offset={offset}");
        let Ok(ex) =
            tokio::time::timeout_at(deadline, fetch(&page_cfg, &FetchRequest::get(&page_url)))
                .await
        else {
            seen.error = Some(format!(
                "the read budget of {} ms passed after {} pages",
                budget.deadline.as_millis(),
                seen.pages.len()
            ));
            return seen;
        };
        let body = ex.response.as_ref().map(|r| r.body.clone());
        bytes += body.as_ref().map_or(0, Vec::len);
        seen.pages.push(PageSeen {
            url: page_url,
            at: at_s,
            status: ex.status(),
            sha256: body.as_ref().map(|b| hex::encode(Sha256::digest(b))),
        });
        if let Some(e) = ex.error {
            seen.error = Some(e.to_string());
            return seen;
        }
        if ex.status() != Some(200) || ex.response.as_ref().is_some_and(|r| r.body_truncated) {
            seen.error = Some(format!(
                "page {} answered HTTP {} or was cut at the byte budget",
                seen.pages.len(),
                ex.status().unwrap_or(0)
            ));
            return seen;
        }
        let page = match read_page(&body.unwrap_or_default()) {
            Ok(page) => page,
            Err(e) => {
                seen.error = Some(format!("page {} {e}", seen.pages.len()));
                return seen;
            }
        };
        let items = &page.items;
        seen.items_seen += items.len();
        for item in items {
            if seen.items.len() >= budget.max_items {
                break;
            }
            // One subject per endpoint, however the catalogue spells it: items are keyed by the
            // canonical URL (an item the fetcher cannot read, or not http(s), is skipped).
            let Some(Ok(subject)) = item_resource(item).map(canonical_subject_url) else {
                continue;
            };
            let quoted_networks = item_networks(item);
            if !networks.is_empty()
                && !quoted_networks
                    .iter()
                    .any(|n| networks.iter().any(|w| w == n))
            {
                continue;
            }
            seen.items.insert(subject, item.clone());
        }
        offset += items.len();
        if items.is_empty() || offset >= page.total || seen.items.len() >= budget.max_items {
            return seen;
        }
    }
}
