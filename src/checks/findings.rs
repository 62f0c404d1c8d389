//! The findings peers publish (`probes/findings/`): facts about a subject that other x402 tools
//! report and the rubric does not score. Pure functions of a run's observations, like the checks,
//! each with a receipt; never a score by themselves (`rubrics/README.md`, "Findings").
//!
//! Outcomes read as the checks' do: `pass` the good fact holds, `fail` it does not, `na` it does
//! not apply, `unmeasured` we could not look. A run's findings are derived again on every read
//! from what the run stored, never stored themselves.

use std::collections::BTreeMap;

use alloy::primitives::Address;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::evidence::free::FreeObservation;
use crate::evidence::http::HttpResponse;
use crate::evidence::http::Sample;
use crate::evidence::paid::{Decision, PaidObservation, PaymentCarrier};
use crate::evidence::{Conclusion, Outcome, Receipt, rfc3339};
use crate::http_url::canonical_resource;
use crate::paid::chain::chain_facts;
use crate::x402::parse::parse_payment_required;
use crate::x402::types::PaymentRequired;

/// The findings this build publishes. A closed set, written as these names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingId {
    /// A machine-readable description: the 402's own (bazaar `info`, v1 `outputSchema`) or an
    /// OpenAPI document at the usual places.
    Described,
    /// The 402's `resource.url` is the probed endpoint.
    ResourceUrl,
    /// A browser's request gets an HTML paywall page.
    BrowserPaywall,
    /// The settlement was sent by a facilitator on our list.
    KnownFacilitator,
    /// The payTo is shared with unrelated subjects (the daemon's, over every subject).
    PaytoCollision,
    /// Charged on chain, then refused with 401 or 403.
    PayThenRefused,
    /// Every vantage is quoted the same terms at the same time (several vantages only:
    /// `super::cloaking`).
    Cloaking,
}

impl FindingId {
    pub const ALL: [FindingId; 7] = [
        FindingId::Described,
        FindingId::ResourceUrl,
        FindingId::BrowserPaywall,
        FindingId::KnownFacilitator,
        FindingId::PaytoCollision,
        FindingId::PayThenRefused,
        FindingId::Cloaking,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FindingId::Described => "described",
            FindingId::ResourceUrl => "resource_url",
            FindingId::BrowserPaywall => "browser_paywall",
            FindingId::KnownFacilitator => "known_facilitator",
            FindingId::PaytoCollision => "payto_collision",
            FindingId::PayThenRefused => "pay_then_refused",
            FindingId::Cloaking => "cloaking",
        }
    }

    /// A few words for reports.
    pub fn title(self) -> &'static str {
        match self {
            FindingId::Described => "Machine-readable description",
            FindingId::ResourceUrl => "resource.url is the endpoint",
            FindingId::BrowserPaywall => "Paywall page for a browser",
            FindingId::KnownFacilitator => "Settled by a known facilitator",
            FindingId::PaytoCollision => "payTo not shared with strangers",
            FindingId::PayThenRefused => "No refusal after a charge",
            FindingId::Cloaking => "Same terms for every vantage",
        }
    }
}

impl std::fmt::Display for FindingId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for FindingId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        FindingId::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| format!("unknown finding {s:?}"))
    }
}

/// One finding of one run, with its receipt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub id: FindingId,
    pub outcome: Outcome,
    pub evidence: String,
    pub receipt: Receipt,
}

/// What the findings need besides the run: the facilitators we know (`[probe] facilitators`,
/// `--facilitator`), by the address that sends their settlements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FindingsContext {
    pub facilitators: Vec<Address>,
}

pub use super::cloaking::{CloakedRun, CloakingContext, cloaking};

/// Every finding of one run, in [`FindingId::ALL`]'s order. `paid` is the run's paid call, when
/// one was attempted. The payTo collision needs the other subjects: here it is `unmeasured`
/// (the daemon publishes it, [`payto_collisions`]).
pub fn evaluate(
    free: &FreeObservation,
    paid: Option<&PaidObservation>,
    ctx: &FindingsContext,
) -> Vec<Finding> {
    let mut out = evaluate_free(free);
    out.extend(evaluate_paid(&free.vantage, free.at, paid, ctx));
    out.sort_by_key(|f| f.id);
    out
}

/// The findings a free run gives (`described`, `resource_url`, `browser_paywall`, and the
/// payTo collision `unmeasured`).
pub fn evaluate_free(free: &FreeObservation) -> Vec<Finding> {
    let primary = primary(free);
    let required = primary.and_then(|(_, r)| required_of(free, r));
    let finding = |id, c: Conclusion, hashes: BTreeMap<String, String>| Finding {
        id,
        outcome: c.outcome,
        evidence: c.evidence,
        receipt: Receipt {
            vantage: free.vantage.clone(),
            at: rfc3339(free.at),
            sha256: hashes,
            tx: None,
            detail: c.detail,
        },
    };
    let (described, described_hashes) = described(free, required.as_ref());
    let (browser, browser_hashes) = browser_paywall(free);
    vec![
        finding(FindingId::Described, described, described_hashes),
        finding(
            FindingId::ResourceUrl,
            resource_url(free, primary.map(|(s, _)| s), required.as_ref()),
            primary_hashes(primary.map(|(_, r)| r)),
        ),
        finding(FindingId::BrowserPaywall, browser, browser_hashes),
        finding(
            FindingId::PaytoCollision,
            Conclusion::unmeasured("needs every subject's latest payTo (the daemon publishes it)"),
            BTreeMap::new(),
        ),
    ]
}

/// The findings a paid call gives (`known_facilitator`, `pay_then_refused`); `unmeasured`
/// without one. `vantage` and `at` are the run's (a paid call's own start is its receipt's time).
pub fn evaluate_paid(
    vantage: &str,
    at: i64,
    paid: Option<&PaidObservation>,
    ctx: &FindingsContext,
) -> Vec<Finding> {
    let (known, known_tx) = known_facilitator(paid, ctx);
    let (refused, refused_tx) = pay_then_refused(paid);
    [
        (FindingId::KnownFacilitator, known, known_tx),
        (FindingId::PayThenRefused, refused, refused_tx),
    ]
    .into_iter()
    .map(|(id, c, tx)| {
        let mut sha256 = BTreeMap::new();
        if let Some(r) = paid.and_then(|p| p.paid.as_ref()?.response.as_ref()) {
            sha256.insert("paid.body".to_string(), r.body_sha256.clone());
        }
        let at = rfc3339(paid.map_or(at, |p| p.started_at));
        let mut f = finding_of(id, c, vantage, &at);
        f.receipt.sha256 = sha256;
        f.receipt.tx = tx;
        f
    })
    .collect()
}

/// The first sample with a usable response (as the free checks choose it).
pub(crate) fn primary(free: &FreeObservation) -> Option<(&Sample, &HttpResponse)> {
    free.samples.iter().find_map(|s| {
        let tls_ok = s.exchange.tls.as_ref().is_none_or(|t| t.verified);
        s.exchange
            .response
            .as_ref()
            .filter(|_| tls_ok)
            .map(|r| (s, r))
    })
}

pub(crate) fn required_of(free: &FreeObservation, r: &HttpResponse) -> Option<PaymentRequired> {
    if free.mcp.is_some() {
        return None;
    }
    parse_payment_required(r.status, &r.headers, &r.body).required
}

fn primary_hashes(r: Option<&HttpResponse>) -> BTreeMap<String, String> {
    r.map(|r| BTreeMap::from([("response.body".to_string(), r.body_sha256.clone())]))
        .unwrap_or_default()
}

/// Where the 402 describes the resource itself, if it does: the v2 bazaar extension's
/// `info.output` (or `info.input`), or a v1 entry's `outputSchema`. Pure; the free run asks the
/// usual places only when this is `None`.
pub fn self_description(required: &PaymentRequired) -> Option<&'static str> {
    let bazaar_info = required
        .extensions
        .as_ref()
        .and_then(|e| e.get("bazaar"))
        .and_then(|b| b.get("info"));
    if bazaar_info.is_some_and(|i| i.get("output").is_some_and(Value::is_object)) {
        return Some("the 402's bazaar extension (info.output)");
    }
    if bazaar_info.is_some_and(|i| i.get("input").is_some_and(Value::is_object)) {
        return Some("the 402's bazaar extension (info.input)");
    }
    if required.accepts.iter().any(|a| a.output_schema.is_some()) {
        return Some("the 402's outputSchema (x402 v1)");
    }
    None
}

/// The parts of an OpenAPI (or Swagger 2) document this finding reads: its version and the
/// names of its paths, nothing else built.
#[derive(Deserialize)]
struct OpenApiHead {
    #[serde(default)]
    openapi: Option<Value>,
    #[serde(default)]
    swagger: Option<Value>,
    #[serde(default)]
    paths: Option<Map<String, Value>>,
}

/// What an answer at a usual place is, as a description: `Ok(version, paths)` or why not.
fn openapi_of(r: &HttpResponse) -> Result<(String, Vec<String>), String> {
    if r.status != 200 {
        return Err(format!("HTTP {}", r.status));
    }
    if r.body_truncated {
        return Err("larger than our read bound".into());
    }
    // The head's keys only: a document of 1 MiB at most (the prober's body bound), nested no
    // deeper than serde_json's own limit.
    let head: OpenApiHead = serde_json::from_slice(&r.body)
        .map_err(|e| format!("not an OpenAPI document in JSON ({e})"))?;
    let version = head
        .openapi
        .or(head.swagger)
        .and_then(|v| v.as_str().map(str::to_string))
        .ok_or("no openapi (or swagger) version string")?;
    let paths = head.paths.ok_or("no paths object")?;
    Ok((version, paths.keys().take(50).cloned().collect()))
}

/// A machine-readable description: the 402's own, else an OpenAPI document at a usual place.
fn described(
    free: &FreeObservation,
    required: Option<&PaymentRequired>,
) -> (Conclusion, BTreeMap<String, String>) {
    if free.mcp.is_some() {
        return (
            Conclusion::na("an MCP tool: its inputSchema in tools/list describes it"),
            BTreeMap::new(),
        );
    }
    let Some(required) = required else {
        return (
            Conclusion::unmeasured("no PaymentRequired could be read (C1 carries that)"),
            BTreeMap::new(),
        );
    };
    if let Some(where_) = self_description(required) {
        return (
            Conclusion::pass(format!("described by {where_}"))
                .with_detail(json!({"source": where_})),
            BTreeMap::new(),
        );
    }
    let Some(peers) = free.peers.as_ref() else {
        return (
            Conclusion::unmeasured("this run did not look for a description"),
            BTreeMap::new(),
        );
    };
    let mut hashes = BTreeMap::new();
    let mut tried = Vec::new();
    for s in &peers.descriptions {
        let Some(r) = s.exchange.response.as_ref() else {
            let why = s
                .exchange
                .error
                .as_ref()
                .map_or("no response".to_string(), |e| e.message.clone());
            tried.push(json!({"url": s.request.url, "problem": why}));
            continue;
        };
        hashes.insert(format!("{}.body", s.request.url), r.body_sha256.clone());
        match openapi_of(r) {
            Ok((version, paths)) => {
                let resource = path_of(&free.subject);
                let covers = paths.contains(&resource);
                return (
                    Conclusion::pass(format!(
                        "an OpenAPI {version} document at {} ({} paths{})",
                        s.request.url,
                        paths.len(),
                        if covers {
                            format!(", {resource} among them")
                        } else {
                            String::new()
                        }
                    ))
                    .with_detail(json!({"url": s.request.url, "version": version, "covers_resource": covers})),
                    hashes,
                );
            }
            Err(why) => tried.push(json!({"url": s.request.url, "problem": why})),
        }
    }
    let detail = json!({"tried": tried});
    let answered = peers
        .descriptions
        .iter()
        .filter(|s| s.exchange.response.is_some())
        .count();
    if peers.skipped.is_some() || peers.cut_short || answered < peers.descriptions.len() {
        let why = peers
            .skipped
            .clone()
            .unwrap_or_else(|| "not every usual place answered".into());
        return (
            Conclusion::unmeasured(format!(
                "the 402 describes nothing itself; the usual places were not all read: {why}"
            ))
            .with_detail(detail),
            hashes,
        );
    }
    if peers.descriptions.is_empty() {
        return (
            Conclusion::unmeasured("the 402 describes nothing itself; no usual place was asked"),
            hashes,
        );
    }
    (
        Conclusion::fail(format!(
            "no machine-readable description: the 402 declares no output or input, and {} \
             answered no OpenAPI document",
            peers
                .descriptions
                .iter()
                .map(|s| s.request.url.as_str())
                .collect::<Vec<_>>()
                .join(" and ")
        ))
        .with_detail(detail),
        hashes,
    )
}

/// The path of a URL (`/` when it has none), without query or fragment.
fn path_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    match rest.find('/') {
        Some(i) => rest[i..].to_string(),
        None => "/".into(),
    }
}

/// The 402's `resource.url` (v1: the entry's `resource`) against the probed endpoint, both in
/// their canonical form without query and trailing slash.
fn resource_url(
    free: &FreeObservation,
    primary: Option<&Sample>,
    required: Option<&PaymentRequired>,
) -> Conclusion {
    if free.mcp.is_some() {
        return Conclusion::na("an MCP tool: its resource is the tool, not a URL");
    }
    let Some(required) = required else {
        return Conclusion::unmeasured("no PaymentRequired could be read (C1 carries that)");
    };
    let Some(named) = required.resource_url() else {
        return Conclusion::na("the 402 names no resource URL (C1 carries that)");
    };
    let ours = canonical_resource(&free.subject);
    let theirs = canonical_resource(named);
    // A same-host redirect answered from another path: that path is the endpoint too.
    let reached = primary.map(|s| canonical_resource(s.exchange.final_url()));
    let detail = json!({"named": named, "probed": free.subject, "compared": [theirs, ours]});
    if theirs == ours || reached.as_deref() == Some(theirs.as_str()) {
        Conclusion::pass(format!("resource.url {named} is the probed endpoint")).with_detail(detail)
    } else {
        Conclusion::fail(format!(
            "resource.url {named} is not the probed endpoint {}: a client that pays for one may \
             be charged for another",
            free.subject
        ))
        .with_detail(detail)
    }
}

/// Whether a response is an HTML page.
fn is_html(r: &HttpResponse) -> bool {
    let declared = r
        .header("content-type")
        .is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("text/html"));
    let start: Vec<u8> = r
        .body
        .iter()
        .copied()
        .skip_while(u8::is_ascii_whitespace)
        .take(64)
        .collect();
    declared && start.first() == Some(&b'<')
}

/// A browser's request (`Accept: text/html`) gets an HTML paywall page: a 402 with an HTML body.
fn browser_paywall(free: &FreeObservation) -> (Conclusion, BTreeMap<String, String>) {
    if free.mcp.is_some() {
        return (
            Conclusion::na("an MCP tool: no browser calls it"),
            BTreeMap::new(),
        );
    }
    let Some(peers) = free.peers.as_ref() else {
        return (
            Conclusion::unmeasured("this run did not ask as a browser"),
            BTreeMap::new(),
        );
    };
    let Some(browser) = peers.browser.as_ref() else {
        let why = peers.skipped.as_deref().unwrap_or(if peers.cut_short {
            "the run's deadline passed first"
        } else {
            "not asked"
        });
        return (
            Conclusion::unmeasured(format!("not asked as a browser: {why}")),
            BTreeMap::new(),
        );
    };
    let Some(r) = browser.exchange.response.as_ref() else {
        let why = browser
            .exchange
            .error
            .as_ref()
            .map_or("no response".to_string(), |e| e.message.clone());
        return (
            Conclusion::unmeasured(format!("the browser's request got no answer: {why}")),
            BTreeMap::new(),
        );
    };
    let hashes = BTreeMap::from([("browser.body".to_string(), r.body_sha256.clone())]);
    let content_type = r.header("content-type").unwrap_or("none").to_string();
    let detail = json!({"status": r.status, "content_type": content_type, "bytes": r.body.len()});
    let c = match (r.status, is_html(r)) {
        (402, true) => Conclusion::pass(format!(
            "a browser gets an HTML paywall page (402, {content_type}, {} bytes)",
            r.body.len()
        )),
        (402, false) => Conclusion::fail(format!(
            "a browser gets the machine answer (402, {content_type}), no paywall page"
        )),
        (status, true) if (200..300).contains(&status) => Conclusion::fail(format!(
            "a browser gets HTTP {status} with an HTML page and no payment asked"
        )),
        (status, _) => Conclusion::fail(format!(
            "a browser gets HTTP {status} ({content_type}), no paywall page"
        )),
    };
    (c.with_detail(detail), hashes)
}

/// Whether a paid call was made on EVM, else the conclusion for a run without one.
fn paid_evm(paid: Option<&PaidObservation>) -> Result<&PaidObservation, Conclusion> {
    let Some(obs) = paid else {
        return Err(Conclusion::unmeasured("this run made no paid call"));
    };
    if obs.svm.is_some() {
        return Err(Conclusion::unmeasured(
            "a Solana payment: its settling fee payer is not read yet",
        ));
    }
    match &obs.decision {
        Decision::Paid { .. } => Ok(obs),
        Decision::Refused { .. } => Err(Conclusion::unmeasured("we refused to pay")),
        Decision::Failed { .. } => Err(Conclusion::unmeasured("our side failed before paying")),
    }
}

/// Who sent the transaction that charged us, against the facilitators we know.
fn known_facilitator(
    paid: Option<&PaidObservation>,
    ctx: &FindingsContext,
) -> (Conclusion, Option<String>) {
    let obs = match paid_evm(paid) {
        Ok(o) => o,
        Err(c) => return (c, None),
    };
    let facts = chain_facts(obs);
    let charge = match &facts.charge {
        Ok(Some(c)) => c,
        Ok(None) => return (Conclusion::na("not charged: nothing was settled"), None),
        Err(why) => {
            return (
                Conclusion::unmeasured(format!("whether we were charged is unknown: {why}")),
                None,
            );
        }
    };
    let tx = charge.tx.map(|t| format!("{t:#x}"));
    let Some(chain) = obs.chain.as_ref() else {
        return (Conclusion::unmeasured("the chain was not read"), tx);
    };
    let receipts = [
        chain.claimed_receipt.value().and_then(Option::as_ref),
        chain.nonce_receipt.value().and_then(Option::as_ref),
    ];
    let sender = receipts
        .into_iter()
        .flatten()
        .find(|r| Some(r.transaction_hash) == charge.tx)
        .and_then(|r| r.from);
    let Some(sender) = sender else {
        return (
            Conclusion::unmeasured("the charging transaction's sender was not read"),
            tx,
        );
    };
    let detail = json!({"sender": sender, "known": ctx.facilitators});
    if ctx.facilitators.is_empty() {
        return (
            Conclusion::unmeasured(format!(
                "settled by {sender:#x}; no list of known facilitators is configured"
            ))
            .with_detail(detail),
            tx,
        );
    }
    let c = if ctx.facilitators.contains(&sender) {
        Conclusion::pass(format!("settled by {sender:#x}, a facilitator we know"))
    } else {
        Conclusion::fail(format!(
            "settled by {sender:#x}, not a facilitator we know: the settlement does not count \
             as one a known facilitator vouches for"
        ))
    };
    (c.with_detail(detail), tx)
}

/// Charged on chain, then refused with 401 or 403: the honeypot pattern (H8 fails on the same
/// evidence; this names it).
fn pay_then_refused(paid: Option<&PaidObservation>) -> (Conclusion, Option<String>) {
    let obs = match paid_evm(paid) {
        Ok(o) => o,
        Err(c) => return (c, None),
    };
    if obs.carrier == PaymentCarrier::McpTool {
        return (
            Conclusion::na("an MCP tool: its answer has no HTTP status to refuse with"),
            None,
        );
    }
    let status = obs.paid.as_ref().and_then(|e| e.status());
    let facts = chain_facts(obs);
    let refused = matches!(status, Some(401 | 403));
    match (&facts.charge, refused) {
        (_, false) => (
            Conclusion::pass(match status {
                Some(s) => format!("the paid request was answered HTTP {s}, not a refusal"),
                None => "the paid request got no answer, so no refusal".into(),
            }),
            None,
        ),
        (Ok(Some(charge)), true) => {
            let tx = charge.tx.map(|t| format!("{t:#x}"));
            (
                Conclusion::fail(format!(
                    "charged {} ({}) and then refused with HTTP {}: pay-then-refuse",
                    charge.amount,
                    tx.as_deref().unwrap_or("transaction not named"),
                    status.unwrap_or_default()
                ))
                .with_detail(json!({"status": status, "amount": charge.amount.to_string()})),
                tx,
            )
        }
        (Ok(None), true) => (
            Conclusion::pass(format!(
                "refused with HTTP {}, and not charged",
                status.unwrap_or_default()
            )),
            None,
        ),
        (Err(why), true) => (
            Conclusion::unmeasured(format!(
                "refused with HTTP {}; whether we were charged is unknown: {why}",
                status.unwrap_or_default()
            )),
            None,
        ),
    }
}

/// How many unrelated hosts sharing one payTo make it a collision.
pub const COLLISION_MIN_HOSTS: usize = 3;

/// One subject as the payTo collision reads it: its key, its host and the payTo its latest
/// evidence quotes (none when it quotes none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayToOf {
    pub subject: String,
    pub host: String,
    pub pay_to: Option<String>,
}

/// The payTo collision of every subject, from each one's latest payTo: subjects on
/// [`COLLISION_MIN_HOSTS`] or more distinct hosts that pay one payTo (compared in lower case) are
/// each `fail`, naming the others' count; a payTo on fewer hosts `pass`; no payTo `unmeasured`.
/// Subjects of one host are one operator's: never a collision among themselves. Pure.
pub fn payto_collisions(subjects: &[PayToOf]) -> BTreeMap<String, Conclusion> {
    let mut hosts: BTreeMap<String, std::collections::BTreeSet<&str>> = BTreeMap::new();
    for s in subjects {
        if let Some(p) = &s.pay_to {
            hosts
                .entry(p.to_ascii_lowercase())
                .or_default()
                .insert(s.host.as_str());
        }
    }
    subjects
        .iter()
        .map(|s| {
            let c = match &s.pay_to {
                None => Conclusion::unmeasured("its latest run quotes no payTo"),
                Some(p) => {
                    let on = hosts.get(&p.to_ascii_lowercase()).map_or(0, |h| h.len());
                    let detail =
                        json!({"pay_to": p, "hosts": on, "threshold": COLLISION_MIN_HOSTS});
                    if on >= COLLISION_MIN_HOSTS {
                        Conclusion::fail(format!(
                            "payTo {p} is also paid by subjects on {} other hosts: one wallet \
                             behind unrelated services",
                            on - 1
                        ))
                        .with_detail(detail)
                    } else {
                        Conclusion::pass(format!(
                            "payTo {p} is paid by subjects on {on} host(s) (a collision takes \
                             {COLLISION_MIN_HOSTS})"
                        ))
                        .with_detail(detail)
                    }
                }
            };
            (s.subject.clone(), c)
        })
        .collect()
}

/// The host of a subject's key, without port or user info, in lower case (an MCP tool's key
/// `mcp+https://host/path#tool` too): subjects on one host are one operator's, whatever port.
pub fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.split(':').next().unwrap_or(authority),
    };
    host.to_ascii_lowercase()
}

/// A finding from a conclusion reached outside a run (the daemon's payTo collision).
pub fn finding_of(id: FindingId, c: Conclusion, vantage: &str, at: &str) -> Finding {
    Finding {
        id,
        outcome: c.outcome,
        evidence: c.evidence,
        receipt: Receipt {
            vantage: vantage.to_string(),
            at: at.to_string(),
            sha256: BTreeMap::new(),
            tx: None,
            detail: c.detail,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(subject: &str, host: &str, pay_to: Option<&str>) -> PayToOf {
        PayToOf {
            subject: subject.into(),
            host: host.into(),
            pay_to: pay_to.map(str::to_string),
        }
    }

    #[test]
    fn a_payto_on_three_hosts_collides_and_one_hosts_many_endpoints_do_not() {
        let shared = "0xAbC0000000000000000000000000000000000001";
        let subjects = vec![
            s("https://a.example/x", "a.example", Some(shared)),
            s("https://a.example/y", "a.example", Some(shared)),
            s("https://a.example/z", "a.example", Some(shared)),
            s(
                "https://b.example/",
                "b.example",
                Some(&shared.to_lowercase()),
            ),
            s(
                "https://c.example/",
                "c.example",
                Some("0x0000000000000000000000000000000000000002"),
            ),
            s("https://d.example/", "d.example", None),
        ];
        let got = payto_collisions(&subjects);
        // Two hosts share it: no collision yet.
        assert_eq!(got["https://a.example/x"].outcome, Outcome::Pass);
        assert_eq!(got["https://b.example/"].outcome, Outcome::Pass);
        assert_eq!(got["https://d.example/"].outcome, Outcome::Unmeasured);
        let mut more = subjects.clone();
        more.push(s("https://e.example/", "e.example", Some(shared)));
        let got = payto_collisions(&more);
        for k in [
            "https://a.example/y",
            "https://b.example/",
            "https://e.example/",
        ] {
            assert_eq!(got[k].outcome, Outcome::Fail, "{k}");
        }
        assert!(got["https://e.example/"].evidence.contains("2 other hosts"));
        assert_eq!(got["https://c.example/"].outcome, Outcome::Pass);
    }

    #[test]
    fn paths_and_ids_read_back() {
        assert_eq!(path_of("https://h.example:8443/a/b?x=1"), "/a/b");
        assert_eq!(path_of("https://h.example"), "/");
        assert_eq!(host_of("https://H.example:8443/a"), "h.example");
        assert_eq!(host_of("mcp+https://u@[::1]:9/x#t"), "::1");
        assert_eq!(host_of("https://127.0.0.1:4431/weather"), "127.0.0.1");
        for id in FindingId::ALL {
            assert_eq!(id.as_str().parse::<FindingId>().unwrap(), id);
        }
    }

    #[test]
    fn openapi_heads_are_read_and_other_json_is_not() {
        let ok = HttpResponse::new(
            200,
            vec![],
            br#"{"openapi":"3.1.0","info":{},"paths":{"/weather":{}}}"#.to_vec(),
            false,
            0,
        );
        assert_eq!(
            openapi_of(&ok).unwrap(),
            ("3.1.0".to_string(), vec!["/weather".to_string()])
        );
        let other = HttpResponse::new(200, vec![], br#"{"hello":1}"#.to_vec(), false, 0);
        assert!(openapi_of(&other).is_err());
        let missing = HttpResponse::new(404, vec![], b"no".to_vec(), false, 0);
        assert_eq!(openapi_of(&missing).unwrap_err(), "HTTP 404");
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let deep = HttpResponse::new(200, vec![], deep.into_bytes(), false, 0);
        assert!(openapi_of(&deep).is_err());
    }
}
