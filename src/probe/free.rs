//! The free probe run: the unpaid samples, the operator file, the listing and the chain reads that the
//! free checks need, collected once into a [`FreeObservation`]. Nothing here decides an outcome.
//!
//! The whole run ends by its deadline ([`FreeProbeConfig::deadline`]), however slow the subject:
//! what was measured by then stands, a request still in flight is dropped (not judged), and what was
//! not done is recorded in [`FreeObservation::cut_short`] (samples, operator file), in the listing's
//! failure (catalogue) or in the chain reads' failure, so the checks say `unmeasured` with the
//! reason. The catalogue, another host, is read while the subject is sampled, under its own budget
//! of pages, bytes and time ([`ListingBudget`]); the chain reads run beside the later samples.

use std::time::Duration;

use alloy::primitives::Address;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::time::{Instant, sleep_until, timeout_at};

use crate::budget::MAX_SOLANA_ACCOUNTS;
use crate::evidence::chain::ChainRead;
use crate::evidence::peers::{BROWSER_ACCEPT, DESCRIPTION_PATHS, PeersSeen};
use crate::http_url::{canonical_resource, percent_encode};
use crate::observation::{
    ChainSeen, CutShort, FreeObservation, ListingSeen, PageSeen, Sample, SolanaAccountSeen,
    SolanaSeen, TokenSeen,
};
use crate::probe::http::{Exchange, FetchConfig, FetchRequest, fetch};
use crate::probe::rpc::Rpc;
use crate::probe::solana_rpc::SolanaRpc;
use crate::x402::catalogue::{item_resource, read_page};
use crate::x402::parse::ResponseParse;
use crate::x402::solana::{SolanaAddress, SolanaNetwork};
use crate::x402::types::PaymentRequired;

/// The path of the operator file (format: `probes/operator-file.md`).
pub use crate::x402::operator::OPERATOR_FILE_PATH;
/// Entries asked for per catalogue page.
const LISTING_PAGE_SIZE: usize = 100;

/// What reading a discovery catalogue may cost, all pages together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListingBudget {
    /// Pages read at most before giving up on finding the subject.
    pub max_pages: usize,
    /// Body bytes read at most.
    pub max_bytes: usize,
    /// Time for the whole read (and never past the run's deadline).
    pub deadline: Duration,
}

impl Default for ListingBudget {
    fn default() -> Self {
        ListingBudget {
            max_pages: 50,
            max_bytes: 16 * 1024 * 1024,
            deadline: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone)]
pub struct FreeProbeConfig {
    pub fetch: FetchConfig,
    /// Unpaid requests per run (R1, R2, R3 are measured on each).
    pub samples: usize,
    /// Pause between samples, so a run is not a burst.
    pub spacing: Duration,
    /// The whole free run (samples, operator file, catalogue, chain reads) ends by then.
    pub deadline: Duration,
    /// A discovery catalogue (`.../discovery/resources`) to read the listed price from (H1).
    pub listing: Option<String>,
    /// What reading the catalogue may cost.
    pub listing_budget: ListingBudget,
    /// The fixed RPC (C3).
    pub rpc: Option<Rpc>,
    /// The fixed Solana RPC (C3 of Solana entries).
    pub solana_rpc: Option<SolanaRpc>,
    /// Tokens accepted as real besides the canonical USDC deployments.
    pub declared_assets: Vec<Address>,
    pub vantage: String,
    /// The facilitators we know, by the address that sends their settlements (the
    /// `known_facilitator` finding reads it; the probe itself does not).
    pub facilitators: Vec<Address>,
}

impl Default for FreeProbeConfig {
    fn default() -> Self {
        FreeProbeConfig {
            fetch: FetchConfig::default(),
            samples: 5,
            spacing: Duration::from_millis(200),
            deadline: Duration::from_secs(120),
            listing: None,
            listing_budget: ListingBudget::default(),
            rpc: None,
            solana_rpc: None,
            declared_assets: Vec::new(),
            vantage: "local".into(),
            facilitators: Vec::new(),
        }
    }
}

/// What was seen of the subject itself (and the chain reads its quote needs).
struct SubjectSeen {
    samples: Vec<Sample>,
    operator_file: Option<Exchange>,
    operator_file_not_read: bool,
    chain: ChainSeen,
    solana: SolanaSeen,
    peers: PeersSeen,
    /// The first sample's parse, handed on to the checks.
    first_parse: Option<ResponseParse>,
}

/// Whether a free run makes the findings' fetches (`probes/findings/`) after a clean 402. The
/// findings are never scored and change slowly: the daemon makes them on a subject's second run
/// and then about once a day (`daemon::pipeline`), so most runs cost only the checks' requests;
/// `probe URL` always makes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerFetches {
    Make,
    /// Not this run: the observation carries no `peers` (its findings are `unmeasured`, and the
    /// subject's findings stay those of its last run that made them).
    Skip,
}

/// Probe `url` for free, the findings' fetches included. `now` is the run's start (unix
/// seconds), passed in so tests control time.
pub async fn probe_free(cfg: &FreeProbeConfig, url: &str, now: i64) -> FreeObservation {
    probe_free_with(cfg, url, now, PeerFetches::Make).await
}

/// [`probe_free`], with or without the findings' fetches.
pub async fn probe_free_with(
    cfg: &FreeProbeConfig,
    url: &str,
    now: i64,
    peer_fetches: PeerFetches,
) -> FreeObservation {
    probe_free_parsed(cfg, url, now, peer_fetches).await.0
}

/// [`probe_free_with`], and the prober's parse of the first sample's answer, for the checks
/// (`checks::free::evaluate_free_parsed`) so that they do not parse it again.
pub async fn probe_free_parsed(
    cfg: &FreeProbeConfig,
    url: &str,
    now: i64,
    peer_fetches: PeerFetches,
) -> (FreeObservation, Option<ResponseParse>) {
    let deadline = Instant::now() + cfg.deadline;
    let listing = async {
        match &cfg.listing {
            None => ListingSeen::NotAsked,
            Some(listing_url) => {
                read_listing(
                    &cfg.fetch,
                    listing_url,
                    url,
                    now,
                    &cfg.listing_budget,
                    deadline,
                )
                .await
            }
        }
    };
    let (listing, seen) = tokio::join!(listing, probe_subject(cfg, url, deadline, peer_fetches));
    let planned = cfg.samples.max(1);
    let cut_short =
        (seen.samples.len() < planned || seen.operator_file_not_read).then(|| CutShort {
            deadline_ms: u64::try_from(cfg.deadline.as_millis()).unwrap_or(u64::MAX),
            samples_planned: planned,
            operator_file_not_read: seen.operator_file_not_read,
        });
    let observation = FreeObservation {
        subject: url.to_string(),
        vantage: cfg.vantage.clone(),
        at: now,
        samples: seen.samples,
        operator_file: seen.operator_file,
        listing,
        chain: seen.chain,
        solana: seen.solana,
        declared_assets: cfg.declared_assets.clone(),
        allow_private: cfg.fetch.allow_private,
        cut_short,
        listing_sha256: None,
        mcp: None,
        peers: match peer_fetches {
            PeerFetches::Make => Some(seen.peers),
            PeerFetches::Skip => None,
        },
    };
    (observation, seen.first_parse)
}

/// The samples, then the operator file, all by `deadline`; the chain reads beside the later
/// samples once the first one has shown which assets the 402 names.
async fn probe_subject(
    cfg: &FreeProbeConfig,
    url: &str,
    deadline: Instant,
    peer_fetches: PeerFetches,
) -> SubjectSeen {
    let mut samples = Vec::with_capacity(cfg.samples.max(1));
    let first = FetchRequest::get(url);
    let Ok(exchange) = timeout_at(deadline, fetch(&cfg.fetch, &first)).await else {
        return SubjectSeen {
            samples,
            operator_file: None,
            operator_file_not_read: origin_of(url).is_some(),
            chain: chain_not_read(cfg),
            solana: solana_not_read(cfg),
            peers: PeersSeen::skipped(DEADLINE_FIRST),
            first_parse: None,
        };
    };
    let first_parse = exchange.response.as_ref().map(ResponseParse::of);
    let quote = first_parse
        .as_ref()
        .and_then(|p| p.parsed().required.as_ref());
    let documented = quote.and_then(|q| documented_request(url, q));
    // The findings' fetches follow a clean 402 only: an endpoint that does not answer one (or
    // answers slowly, hugely, endlessly) costs no more requests than the checks make.
    let peers_plan = match (&exchange.response, &exchange.error) {
        (Some(r), None) if r.status == 402 => Ok(quote
            .and_then(crate::checks::findings::self_description)
            .is_some()),
        _ => Err("the first unpaid request got no complete 402"),
    };
    samples.push(Sample {
        request: first,
        exchange,
    });
    let template = documented.unwrap_or_else(|| FetchRequest::get(url));
    let chain = async {
        match &cfg.rpc {
            None => ChainSeen::NoRpc,
            Some(rpc) => match timeout_at(deadline, read_chain(rpc, quote)).await {
                Ok(chain) => chain,
                Err(_) => chain_not_read(cfg),
            },
        }
    };
    let solana = async {
        match &cfg.solana_rpc {
            None => SolanaSeen::NoRpc,
            Some(rpc) => match timeout_at(deadline, read_solana(rpc, quote)).await {
                Ok(solana) => solana,
                Err(_) => solana_not_read(cfg),
            },
        }
    };
    let rest = async {
        let mut in_time = true;
        for _ in 1..cfg.samples.max(1) {
            let wake = Instant::now() + cfg.spacing;
            if wake >= deadline {
                in_time = false;
                break;
            }
            sleep_until(wake).await;
            match timeout_at(deadline, fetch(&cfg.fetch, &template)).await {
                Ok(exchange) => samples.push(Sample {
                    request: template.clone(),
                    exchange,
                }),
                Err(_) => {
                    in_time = false;
                    break;
                }
            }
        }
        let Some(origin) = origin_of(url) else {
            return (None, false, PeersSeen::skipped("the URL has no origin"));
        };
        if !in_time {
            return (None, true, PeersSeen::skipped(DEADLINE_FIRST));
        }
        let request = FetchRequest::get(format!("{origin}{OPERATOR_FILE_PATH}"));
        let (operator, not_read) = match timeout_at(deadline, fetch(&cfg.fetch, &request)).await {
            Ok(exchange) => (Some(exchange), false),
            Err(_) => (None, true),
        };
        let peers = match (not_read, peers_plan) {
            _ if peer_fetches == PeerFetches::Skip => PeersSeen::default(),
            (true, _) => PeersSeen::skipped(DEADLINE_FIRST),
            (false, Err(why)) => PeersSeen::skipped(why),
            (false, Ok(described)) => {
                probe_peers(cfg, url, &origin, &template, described, deadline).await
            }
        };
        (operator, not_read, peers)
    };
    let (chain, solana, (operator_file, operator_file_not_read, peers)) =
        tokio::join!(chain, solana, rest);
    SubjectSeen {
        samples,
        operator_file,
        operator_file_not_read,
        chain,
        solana,
        peers,
        first_parse,
    }
}

/// Why the findings' fetches were not made when the run's deadline came first.
const DEADLINE_FIRST: &str = "the run's deadline passed first";

/// The findings' fetches (`probes/findings/`): the subject's request as a browser sends it, then,
/// when the 402 describes nothing itself, the usual places of a description at the origin until
/// one answers 200. Each is one bounded fetch through the same prober, by the run's deadline.
async fn probe_peers(
    cfg: &FreeProbeConfig,
    url: &str,
    origin: &str,
    template: &FetchRequest,
    described: bool,
    deadline: Instant,
) -> PeersSeen {
    let mut seen = PeersSeen::default();
    let mut browser = template.clone();
    if browser.method != "GET" {
        browser = FetchRequest::get(url);
    }
    browser
        .headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case("accept"));
    browser
        .headers
        .push(("accept".into(), BROWSER_ACCEPT.into()));
    match timeout_at(deadline, fetch(&cfg.fetch, &browser)).await {
        Ok(exchange) => {
            seen.browser = Some(Sample {
                request: browser,
                exchange,
            })
        }
        Err(_) => {
            seen.cut_short = true;
            return seen;
        }
    }
    if described {
        return seen;
    }
    for path in DESCRIPTION_PATHS {
        let request =
            FetchRequest::get(format!("{origin}{path}")).with_header("accept", "application/json");
        match timeout_at(deadline, fetch(&cfg.fetch, &request)).await {
            Ok(exchange) => {
                let found = exchange.status() == Some(200);
                seen.descriptions.push(Sample { request, exchange });
                if found {
                    break;
                }
            }
            Err(_) => {
                seen.cut_short = true;
                break;
            }
        }
    }
    seen
}

/// The chain reads the deadline left undone (ours: C3 is `unmeasured`).
pub(crate) fn chain_not_read(cfg: &FreeProbeConfig) -> ChainSeen {
    match &cfg.rpc {
        None => ChainSeen::NoRpc,
        Some(rpc) => ChainSeen::RpcDown {
            url: rpc.url().to_string(),
            error: format!(
                "not read: the run's deadline of {} ms passed first",
                cfg.deadline.as_millis()
            ),
        },
    }
}

/// The Solana reads the deadline left undone (ours: C3 is `unmeasured`).
pub(crate) fn solana_not_read(cfg: &FreeProbeConfig) -> SolanaSeen {
    match &cfg.solana_rpc {
        None => SolanaSeen::NoRpc,
        Some(rpc) => SolanaSeen::RpcDown {
            url: rpc.url().to_string(),
            error: format!(
                "not read: the run's deadline of {} ms passed first",
                cfg.deadline.as_millis()
            ),
        },
    }
}

/// `scheme://host[:port]` of a URL.
pub fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    (!authority.is_empty()).then(|| format!("{scheme}://{authority}"))
}

/// The request the endpoint documents (v2 bazaar `info.input`): its method and example query or body.
pub fn documented_request(url: &str, quote: &PaymentRequired) -> Option<FetchRequest> {
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

async fn read_listing(
    cfg: &FetchConfig,
    listing_url: &str,
    subject: &str,
    now: i64,
    budget: &ListingBudget,
    run_deadline: Instant,
) -> ListingSeen {
    let want = canonical_resource(subject);
    let deadline = run_deadline.min(Instant::now() + budget.deadline);
    let mut pages = Vec::new();
    let mut offset = 0usize;
    let mut items_seen = 0usize;
    let mut bytes_read = 0usize;
    let sep = if listing_url.contains('?') { '&' } else { '?' };
    let fail = |error: String, pages: Vec<PageSeen>| ListingSeen::Failed {
        url: listing_url.to_string(),
        error,
        pages,
    };
    for _ in 0..budget.max_pages {
        let room = budget.max_bytes.saturating_sub(bytes_read);
        if room == 0 {
            break;
        }
        // A page may use what is left of the byte budget, never more.
        let page_cfg = FetchConfig {
            max_body_bytes: cfg.max_body_bytes.min(room),
            ..cfg.clone()
        };
        let page_url = format!("{listing_url}{sep}limit={LISTING_PAGE_SIZE}&offset={offset}");
        let Ok(ex) = timeout_at(
            deadline,
            fetch(&page_cfg, &FetchRequest::get(page_url.clone())),
        )
        .await
        else {
            let which = if deadline < run_deadline {
                format!(
                    "the catalogue's read budget of {} ms",
                    budget.deadline.as_millis()
                )
            } else {
                "the run's deadline".to_string()
            };
            return fail(
                format!(
                    "not read in full: {which} passed after {} pages ({bytes_read} bytes), before finding the subject",
                    pages.len()
                ),
                pages,
            );
        };
        let status = ex.status();
        let body = ex.response.as_ref().map(|r| r.body.clone());
        let truncated = ex.response.as_ref().is_some_and(|r| r.body_truncated);
        bytes_read += body.as_ref().map_or(0, Vec::len);
        pages.push(PageSeen {
            url: page_url.clone(),
            at: now,
            status,
            sha256: body.as_ref().map(|b| hex::encode(Sha256::digest(b))),
        });
        if let Some(e) = ex.error {
            return fail(
                format!("{:?} during {:?}: {}", e.kind, e.phase, e.message),
                pages,
            );
        }
        if status != Some(200) {
            return fail(format!("HTTP {}", status.unwrap_or(0)), pages);
        }
        if truncated && room < cfg.max_body_bytes {
            return fail(
                format!(
                    "not read in full: the catalogue's byte budget of {} bytes was spent after {} pages, before finding the subject",
                    budget.max_bytes,
                    pages.len()
                ),
                pages,
            );
        }
        let page = match read_page(&body.unwrap_or_default()) {
            Ok(page) => page,
            Err(e) => return fail(format!("the page {e}"), pages),
        };
        let items = &page.items;
        items_seen += items.len();
        if let Some(item) = items
            .iter()
            .find(|i| item_resource(i).map(canonical_resource).as_deref() == Some(want.as_str()))
        {
            return ListingSeen::Read {
                url: listing_url.to_string(),
                pages,
                items_seen,
                item: Some(item.clone()),
            };
        }
        offset += items.len();
        if items.is_empty() || offset >= page.total {
            return ListingSeen::Read {
                url: listing_url.to_string(),
                pages,
                items_seen,
                item: None,
            };
        }
    }
    let error = if pages.len() >= budget.max_pages {
        format!(
            "not read in full: the catalogue's budget of {} pages was spent before finding the subject",
            budget.max_pages
        )
    } else {
        format!(
            "not read in full: the catalogue's byte budget of {} bytes was spent after {} pages, before finding the subject",
            budget.max_bytes,
            pages.len()
        )
    };
    fail(error, pages)
}

pub(crate) async fn read_chain(rpc: &Rpc, quote: Option<&PaymentRequired>) -> ChainSeen {
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

/// The cluster the Solana RPC serves, then for each Solana entry on that cluster its mint and,
/// once the mint's owner program is known, the payTo's associated token account under it. Each
/// account is read once; past [`MAX_SOLANA_ACCOUNTS`] the rest are left unread (C3 says which).
pub(crate) async fn read_solana(rpc: &SolanaRpc, quote: Option<&PaymentRequired>) -> SolanaSeen {
    let genesis_hash = match rpc.genesis_hash().await {
        Ok(hash) => hash,
        Err(e) => {
            return SolanaSeen::RpcDown {
                url: rpc.url().to_string(),
                error: e.to_string(),
            };
        }
    };
    let mut accounts: Vec<SolanaAccountSeen> = Vec::new();
    for req in quote.map(|q| q.accepts.as_slice()).unwrap_or_default() {
        let served = req
            .network
            .as_deref()
            .and_then(SolanaNetwork::from_network)
            .is_some_and(|n| n.is_served_by(&genesis_hash));
        let parse = |text: Option<&String>| text.and_then(|t| SolanaAddress::parse(t).ok());
        let (Some(mint), Some(pay_to)) = (parse(req.asset.as_ref()), parse(req.pay_to.as_ref()))
        else {
            continue;
        };
        if !served {
            continue;
        }
        let mint_read = read_account(rpc, &mint, &mut accounts).await;
        let program = mint_read
            .and_then(|read| read.value().cloned().flatten())
            .and_then(|account| SolanaAddress::parse(&account.owner).ok());
        if let Some(program) = program
            && let Some(ata) = SolanaAddress::associated_token_account(&pay_to, &mint, &program)
        {
            read_account(rpc, &ata, &mut accounts).await;
        }
    }
    SolanaSeen::Read {
        url: rpc.url().to_string(),
        genesis_hash,
        accounts,
    }
}

/// Read `address` unless it was read already or the budget is spent; what is known of it.
async fn read_account(
    rpc: &SolanaRpc,
    address: &SolanaAddress,
    accounts: &mut Vec<SolanaAccountSeen>,
) -> Option<ChainRead<Option<crate::observation::SolanaAccount>>> {
    let text = address.to_string();
    if let Some(seen) = accounts.iter().find(|a| a.address == text) {
        return Some(seen.read.clone());
    }
    if accounts.len() >= MAX_SOLANA_ACCOUNTS {
        return None;
    }
    let read = ChainRead::from_result(rpc.account(&text).await);
    accounts.push(SolanaAccountSeen {
        address: text,
        read: read.clone(),
    });
    Some(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        assert_eq!(
            origin_of("https://a.example:8443/x?y=1").as_deref(),
            Some("https://a.example:8443")
        );
        assert_eq!(origin_of("not a url"), None);
    }

    #[test]
    fn percent_encoding_keeps_unreserved_only() {
        assert_eq!(percent_encode("São Paulo&x=1"), "S%C3%A3o%20Paulo%26x%3D1");
    }
}
