//! The free checks over one [`FreeObservation`]: pure, deterministic, re-evaluable under any rubric.
//!
//! One small function per check. The conformance checks (C1-C5) and the screens (S2, S4, S5) live in
//! their own modules; this file applies them to the run's primary response and adds the checks that
//! look across samples (R1, R2, R3), at the listing (H1), the operator file (H4) and the transport
//! (S1). Paid and history checks are reported `unmeasured` with the reason.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::checks::conformance::{self, TokenDomainSeen};
use crate::checks::screen;
use crate::checks::sniff::{self, SniffSample};
use crate::checks::solana::c3_solana;
use crate::evidence::decode::decode_body_bounded;
use crate::evidence::http::{Exchange, FetchError, FetchErrorKind, HttpResponse, Phase};
use crate::evidence::{CheckId, CheckResult, Conclusion, Outcome, Receipt, rfc3339, sha256_hex};
use crate::observation::{ChainSeen, FreeObservation, ListingSeen, Sample};
use crate::rubric::{Kind, Rubric};
use crate::score::curve::interpolate;
use crate::x402::mcp;
use crate::x402::network::{AddressKind, address_kind};
use crate::x402::parse::{ResponseParse, parse_payment_required};
use crate::x402::types::{Parsed402, PaymentRequired, Requirement, Source, printable_prefix};

/// R1's bound: a response head within 10 s.
pub const REACHABLE_WITHIN_MS: f64 = 10_000.0;
/// R3's value for a sample that got no response (the curve's far end).
pub const NO_RESPONSE_MS: f64 = 10_000.0;
/// S1: the certificate must stay valid for more than this.
pub const CERT_MIN_REMAINING_SECS: i64 = 14 * 86_400;
/// The most decoded bytes S5 looks at when a body is compressed.
const SNIFF_DECODE_CAP: usize = 1 << 20;
/// A curve check's outcome label: `pass` when its curve maps the value to at least this.
pub const CURVE_PASS_POINTS: f64 = 50.0;

/// Evaluate every rubric check against a free run, in rubric order.
pub fn evaluate_free(obs: &FreeObservation, rubric: &Rubric) -> Vec<CheckResult> {
    results_of(&Run::new(obs, None), rubric)
}

/// [`evaluate_free`], taking the prober's parse of a sample's answer (`probe::free`) where it is
/// the parse of the run's primary response, rather than parsing that response again. The results
/// are [`evaluate_free`]'s: a parse made from other bytes is not used.
pub fn evaluate_free_parsed(
    obs: &FreeObservation,
    rubric: &Rubric,
    first_parse: Option<ResponseParse>,
) -> Vec<CheckResult> {
    results_of(&Run::new(obs, first_parse), rubric)
}

/// [`evaluate_free`], and what the run saw the subject declare
/// (`checks::history::declared(obs, at_ms)`), from one parse of its first usable 402.
pub fn evaluate_free_declared(
    obs: &FreeObservation,
    rubric: &Rubric,
    at_ms: i64,
    first_parse: Option<ResponseParse>,
) -> (Vec<CheckResult>, Option<crate::checks::history::Declared>) {
    let run = Run::new(obs, first_parse);
    let declared = match obs.mcp {
        // The checks read an MCP tool's answer as MCP; the declaration reads the 402 parser's.
        Some(_) => crate::checks::history::declared(obs, at_ms),
        // The checks' primary response is the declaration's (the first sample with a response
        // over a verified connection, or none), parsed alike.
        None => run
            .required()
            .and_then(|required| crate::checks::history::declared_from(required, at_ms)),
    };
    (results_of(&run, rubric), declared)
}

fn results_of(run: &Run, rubric: &Rubric) -> Vec<CheckResult> {
    let obs = run.obs;
    // The same for every check: made once.
    let primary = run.primary_hashes();
    let at = rfc3339(obs.at);
    rubric
        .checks
        .iter()
        .map(|check| {
            let (conclusion, hashes) = match check.id {
                CheckId::R1 => (r1(run), primary.clone()),
                CheckId::R2 => (r2(run), primary.clone()),
                CheckId::R3 => (r3(run, rubric), BTreeMap::new()),
                CheckId::C1 => (run.c1(), primary.clone()),
                CheckId::C2 => (run.with_required(conformance::c2), primary.clone()),
                CheckId::C3 => (c3(run), primary.clone()),
                CheckId::C4 => (run.c4(), primary.clone()),
                CheckId::C5 => (run.with_required(conformance::c5), primary.clone()),
                CheckId::H1 => (h1(run), listing_hashes(&obs.listing)),
                CheckId::H2 | CheckId::H3 => (
                    Conclusion::unmeasured(
                        "needs this subject's earlier observations (the daemon keeps them)",
                    ),
                    BTreeMap::new(),
                ),
                CheckId::H4 => (
                    h4(run),
                    exchange_hashes("operator-file", obs.operator_file.as_ref()),
                ),
                CheckId::S1 => (s1(run), leaf_hash(run)),
                CheckId::S2 => (s2(run), primary.clone()),
                CheckId::S4 => (s4(run), primary.clone()),
                CheckId::S5 => (s5(run), primary.clone()),
                _ if check.kind == Kind::Paid => (
                    Conclusion::unmeasured("paid check: this run made no paid call (use --pay)"),
                    BTreeMap::new(),
                ),
                other => (
                    Conclusion::unmeasured(format!("no free measurement for {other}")),
                    BTreeMap::new(),
                ),
            };
            CheckResult {
                id: check.id,
                outcome: conclusion.outcome,
                evidence: conclusion.evidence,
                value: conclusion.value,
                receipt: Receipt {
                    vantage: obs.vantage.clone(),
                    at: at.clone(),
                    sha256: hashes,
                    tx: None,
                    detail: conclusion.detail,
                },
            }
        })
        .collect()
}

/// One sample as the checks see it.
struct Seen<'a> {
    exchange: &'a Exchange,
    /// The request's body (an MCP sample's JSON-RPC request, whose id its answer carries).
    request_body: &'a [u8],
    /// A response head arrived over a connection a verifying client would accept.
    usable: Option<&'a HttpResponse>,
    /// Our own failure (the address guard refused to connect, or our resolver failed): says
    /// nothing about the subject.
    ours: Option<OurFailure>,
}

impl<'a> Seen<'a> {
    fn new(sample: &'a Sample) -> Seen<'a> {
        let ex = &sample.exchange;
        let tls_ok = ex.tls.as_ref().is_none_or(|t| t.verified);
        Seen {
            exchange: ex,
            request_body: &sample.request.body,
            usable: ex.response.as_ref().filter(|_| tls_ok),
            ours: ex.error.as_ref().and_then(our_failure),
        }
    }

    fn failure(&self) -> String {
        if let Some(t) = self.exchange.tls.as_ref().filter(|t| !t.verified) {
            return format!(
                "TLS not valid: {}",
                t.verify_error.as_deref().unwrap_or("unverified")
            );
        }
        match &self.exchange.error {
            Some(e) => format!("{:?} during {:?}: {}", e.kind, e.phase, e.message),
            None => "no response".into(),
        }
    }
}

/// The run as the checks see it: every sample, and the primary one (the first usable response)
/// parsed once.
struct Run<'a> {
    obs: &'a FreeObservation,
    seen: Vec<Seen<'a>>,
    primary: Option<&'a HttpResponse>,
    parsed: Option<Parsed402>,
}

impl<'a> Run<'a> {
    /// `first_parse`: the prober's parse of one answer, used when it was made from the primary
    /// response's very bytes (and never for an MCP tool, whose answers the checks read as MCP).
    fn new(obs: &'a FreeObservation, first_parse: Option<ResponseParse>) -> Run<'a> {
        let seen: Vec<Seen> = obs.samples.iter().map(Seen::new).collect();
        let primary_seen = seen.iter().find(|s| s.usable.is_some());
        let primary = primary_seen.and_then(|s| s.usable);
        let parsed = primary_seen.and_then(|s| {
            let response = s.usable?;
            let given = first_parse
                .filter(|_| obs.mcp.is_none())
                .and_then(|p| p.into_parse_of(response));
            Some(given.unwrap_or_else(|| parse_answer(obs, s.request_body, response)))
        });
        Run {
            obs,
            seen,
            primary,
            parsed,
        }
    }

    /// Every sample failed on our side, and how (the guard when any was refused by it).
    fn all_ours(&self) -> Option<OurFailure> {
        if self.seen.is_empty() || self.seen.iter().any(|s| s.ours.is_none()) {
            return None;
        }
        let guard = self.seen.iter().any(|s| s.ours == Some(OurFailure::Guard));
        Some(if guard {
            OurFailure::Guard
        } else {
            OurFailure::Resolver
        })
    }

    /// Why samples are missing, when the run's deadline cut it short.
    fn samples_cut(&self) -> Option<String> {
        let cut = self.obs.cut_short.as_ref()?;
        let missing = cut.samples_planned.saturating_sub(self.seen.len());
        (missing > 0).then(|| {
            format!(
                "{missing} of {} samples not taken: {}",
                cut.samples_planned,
                cut.reason()
            )
        })
    }

    fn required(&self) -> Option<&PaymentRequired> {
        self.parsed.as_ref()?.required.as_ref()
    }

    /// The decoded PaymentRequired as JSON (header first, else body), for the screens.
    fn required_json(&self) -> Option<&Value> {
        let p = self.parsed.as_ref()?;
        p.required.as_ref()?;
        p.header_object.as_ref().or(p.body_object.as_ref())
    }

    fn c1(&self) -> Conclusion {
        match &self.parsed {
            Some(p) => conformance::c1(p, true),
            None => self.no_response_conclusion("no response arrived, so there was no 402 to read"),
        }
    }

    fn c4(&self) -> Conclusion {
        match &self.parsed {
            Some(p) if p.required.is_some() => conformance::c4(p),
            _ => self.not_without_requirements(),
        }
    }

    fn with_required(&self, check: fn(&PaymentRequired) -> Conclusion) -> Conclusion {
        match self.required() {
            Some(r) => check(r),
            None => self.not_without_requirements(),
        }
    }

    fn not_without_requirements(&self) -> Conclusion {
        if self.primary.is_none() {
            return self
                .no_response_conclusion("no response arrived, so there were no requirements");
        }
        Conclusion::unmeasured("no payment requirements could be read (C1 carries that)")
    }

    fn no_response_conclusion(&self, reason: &str) -> Conclusion {
        match self.all_ours() {
            Some(OurFailure::Guard) => {
                return Conclusion::unmeasured(format!(
                    "our address guard refused to connect; {reason}"
                ));
            }
            Some(OurFailure::Resolver) => {
                return Conclusion::unmeasured(format!("our resolver failed; {reason}"));
            }
            None => {}
        }
        Conclusion::unmeasured(reason.to_string())
    }

    fn primary_hashes(&self) -> BTreeMap<String, String> {
        let mut h = BTreeMap::new();
        if let Some(r) = self.primary {
            h.insert("response.body".into(), r.body_sha256.clone());
            // Every PAYMENT-REQUIRED header, so a receipt shows each of two that disagree.
            for (i, v) in r.header_all("payment-required").enumerate() {
                let label = match i {
                    0 => "response.payment-required".to_string(),
                    n => format!("response.payment-required.{}", n + 1),
                };
                h.insert(label, sha256_hex(v.as_bytes()));
            }
        }
        h
    }
}

/// The PaymentRequired a sample's response carries: a 402's (`x402::parse`), or for a paid MCP
/// tool its unpaid `tools/call` answer's (`x402::mcp`).
fn parse_answer(obs: &FreeObservation, request_body: &[u8], resp: &HttpResponse) -> Parsed402 {
    match obs.mcp {
        Some(_) => mcp::parse_tool_response(request_body, resp),
        None => parse_payment_required(resp.status, &resp.headers, &resp.body),
    }
}

/// Aggregate per-sample outcomes: `unmeasured` when none was measured, `fail` when any failed.
fn per_sample(run: &Run, what: &str, judge: impl Fn(&Seen) -> (Outcome, String)) -> Conclusion {
    let judged: Vec<(Outcome, String)> = run.seen.iter().map(&judge).collect();
    let measured: Vec<&(Outcome, String)> = judged
        .iter()
        .filter(|(o, _)| *o != Outcome::Unmeasured)
        .collect();
    let detail = json!({
        "samples": judged.iter().map(|(o, why)| json!({"outcome": o, "evidence": why})).collect::<Vec<_>>(),
    });
    let cut = run.samples_cut();
    if measured.is_empty() {
        let why = judged
            .first()
            .map(|(_, w)| w.clone())
            .or_else(|| cut.clone())
            .unwrap_or_else(|| "no samples".into());
        return Conclusion::unmeasured(why).with_detail(detail);
    }
    // Samples the run's deadline left untaken are named, never counted.
    let cut_note = cut.map(|c| format!(" ({c})")).unwrap_or_default();
    let passes = measured.iter().filter(|(o, _)| *o == Outcome::Pass).count();
    let n = measured.len();
    if passes == n {
        Conclusion::pass(format!("{what} in {n}/{n} samples{cut_note}")).with_detail(detail)
    } else {
        let first_fail = measured
            .iter()
            .find(|(o, _)| *o == Outcome::Fail)
            .map(|(_, w)| w.as_str());
        Conclusion::fail(format!(
            "{what} in {passes}/{n} samples{cut_note}; {}",
            first_fail.unwrap_or("")
        ))
        .with_detail(detail)
    }
}

/// A failure of ours, never counted against the subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OurFailure {
    /// Our address guard refused the destination.
    Guard,
    /// Our resolver could not answer (SERVFAIL, timeout, no nameserver): unlike NXDOMAIN or a
    /// name without addresses, that says nothing about the subject's DNS.
    Resolver,
}

fn our_failure(e: &FetchError) -> Option<OurFailure> {
    match (e.phase, e.kind) {
        (Phase::Guard, _) => Some(OurFailure::Guard),
        (Phase::Dns, FetchErrorKind::NameNotFound | FetchErrorKind::NoAddress) => None,
        (Phase::Dns, _) => Some(OurFailure::Resolver),
        _ => None,
    }
}

fn guard_refusal(s: &Seen) -> (Outcome, String) {
    if s.ours == Some(OurFailure::Resolver) {
        return (
            Outcome::Unmeasured,
            format!("not measured: {}", s.failure()),
        );
    }
    (Outcome::Unmeasured, format!("not probed: {}", s.failure()))
}

/// R1: a connection and a response head within 10 s.
fn r1(run: &Run) -> Conclusion {
    per_sample(run, "reachable", |s| {
        if s.ours.is_some() {
            return guard_refusal(s);
        }
        match s.usable {
            Some(_) => {
                let ttfb = s.exchange.timings.ttfb_ms.unwrap_or(0.0);
                if ttfb <= REACHABLE_WITHIN_MS {
                    (Outcome::Pass, format!("response head after {ttfb:.0} ms"))
                } else {
                    (
                        Outcome::Fail,
                        format!("response head only after {ttfb:.0} ms"),
                    )
                }
            }
            None => (Outcome::Fail, s.failure()),
        }
    })
}

/// R2: the unpaid request answers 402 (for an MCP tool: its unpaid call answers a
/// PaymentRequired, in either MCP form).
fn r2(run: &Run) -> Conclusion {
    if run.obs.mcp.is_some() {
        return per_sample(run, "asked for payment", |s| {
            if s.ours.is_some() {
                return guard_refusal(s);
            }
            let Some(resp) = s.usable else {
                return (Outcome::Fail, s.failure());
            };
            let parsed = mcp::parse_tool_response(s.request_body, resp);
            match (&parsed.required, parsed.source) {
                (Some(_), Source::McpError) => (
                    Outcome::Pass,
                    "JSON-RPC error -32402 with a PaymentRequired".into(),
                ),
                (Some(_), _) => (Outcome::Pass, "a tool result with a PaymentRequired".into()),
                (None, _) => (
                    Outcome::Fail,
                    parsed
                        .deviations
                        .first()
                        .map_or("no PaymentRequired".into(), |d| d.message.clone()),
                ),
            }
        });
    }
    per_sample(run, "answered 402", |s| {
        if s.ours.is_some() {
            return guard_refusal(s);
        }
        match s.usable.map(|r| r.status) {
            Some(402) => (Outcome::Pass, "HTTP 402".into()),
            Some(200..=299) => (
                Outcome::Fail,
                format!("HTTP {} without payment", s.usable.map_or(0, |r| r.status)),
            ),
            Some(status) => (Outcome::Fail, format!("HTTP {status}")),
            None => (Outcome::Fail, s.failure()),
        }
    })
}

/// R3: p95 of the unpaid time to first byte through the rubric's curve. Each sample is kept in the
/// detail as a timed `pass` or a `fail` (no response within the bound), the history's convention.
fn r3(run: &Run, rubric: &Rubric) -> Conclusion {
    let timed: Vec<Option<f64>> = run
        .seen
        .iter()
        .filter(|s| s.ours.is_none())
        .map(|s| {
            s.usable
                .and(s.exchange.timings.ttfb_ms)
                .filter(|ms| *ms <= NO_RESPONSE_MS)
        })
        .collect();
    let values: Vec<f64> = timed.iter().map(|t| t.unwrap_or(NO_RESPONSE_MS)).collect();
    let mut c = latency_conclusion(rubric, CheckId::R3, &values, "unpaid time to first byte");
    if let Value::Object(detail) = &mut c.detail {
        let samples = timed.iter().map(|t| match t {
            Some(ms) => json!({"outcome": "pass", "ms": ms}),
            None => json!({"outcome": "fail"}),
        });
        detail.insert("samples".into(), Value::Array(samples.collect()));
    }
    c
}

/// A curve check's conclusion over measured milliseconds: the p95 (hdrhistogram, 3 significant
/// digits), the curve's points, and the outcome label.
pub fn latency_conclusion(
    rubric: &Rubric,
    id: CheckId,
    values_ms: &[f64],
    what: &str,
) -> Conclusion {
    let Some(p95) = p95_ms(values_ms) else {
        return Conclusion::unmeasured(format!("no {what} measured"));
    };
    let Some(curve) = rubric.check(id).and_then(|c| c.curve.as_ref()) else {
        return Conclusion::unmeasured(format!("the rubric has no curve for {id}"));
    };
    let points = interpolate(curve, p95);
    let detail = json!({"values_ms": values_ms, "p95_ms": p95, "curve_points": points});
    let text = format!(
        "{what} p95 {p95:.0} ms over {} samples -> {points:.1} points",
        values_ms.len()
    );
    let c = if points >= CURVE_PASS_POINTS {
        Conclusion::pass(text)
    } else {
        Conclusion::fail(text)
    };
    c.with_value(p95).with_detail(detail)
}

/// p95 through an HDR histogram of whole milliseconds (1 ms to 1 h, 3 significant digits).
pub fn p95_ms(values_ms: &[f64]) -> Option<f64> {
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000, 3).ok()?;
    for v in values_ms {
        h.saturating_record(v.ceil().clamp(1.0, 3_600_000.0) as u64);
    }
    (!h.is_empty()).then(|| h.value_at_quantile(0.95) as f64)
}

/// C3: every EVM entry's asset is canonical USDC or declared, with the declared EIP-712 domain;
/// every Solana entry's mint is its cluster's USDC and its payTo can be paid (`checks::solana`).
fn c3(run: &Run) -> Conclusion {
    let Some(required) = run.required() else {
        return run.not_without_requirements();
    };
    let is_solana =
        |req: &Requirement| req.network.as_deref().map(address_kind) == Some(AddressKind::Solana);
    if !required.accepts.iter().any(is_solana) {
        return c3_evm(run, required);
    }
    // With a Solana entry, each entry is judged against its own chain's reads.
    let results = required
        .accepts
        .iter()
        .map(|req| {
            if is_solana(req) {
                c3_solana(req, &run.obs.solana)
            } else {
                let one = PaymentRequired {
                    accepts: vec![req.clone()],
                    ..required.clone()
                };
                c3_evm(run, &one)
            }
        })
        .collect();
    worst_of(results, "every asset is real and its payee can be paid")
}

/// C3 of a quote without Solana entries (as it was before Solana, byte for byte).
fn c3_evm(run: &Run, required: &PaymentRequired) -> Conclusion {
    let (chain_id, tokens) = match &run.obs.chain {
        ChainSeen::NoRpc => {
            return Conclusion::unmeasured("no RPC configured (--rpc), so the asset was not read");
        }
        ChainSeen::RpcDown { error, .. } => {
            return Conclusion::unmeasured(format!("the RPC is unavailable: {error}"));
        }
        ChainSeen::Read {
            chain_id, tokens, ..
        } => (*chain_id, tokens),
    };
    let mut results = Vec::new();
    for req in &required.accepts {
        let token = req
            .asset_address()
            .and_then(|a| tokens.iter().find(|t| t.asset == a));
        // Our RPC failing to read the token says nothing about it: unmeasured, with the reason.
        if let Some(error) = token.and_then(|t| t.rpc_error.as_ref()) {
            results.push(Conclusion::unmeasured(format!(
                "accepts[{}]: our RPC failed reading the token: {error}",
                req.index
            )));
            continue;
        }
        let seen = token.map(|t| TokenDomainSeen {
            name: t.name.clone(),
            version: t.version.clone(),
            domain_separator: t.domain_separator,
        });
        let c = match (req.chain_id(), &seen) {
            (Some(id), _) if id != chain_id => Conclusion::unmeasured(format!(
                "accepts[{}] is on chain {id}; our RPC serves chain {chain_id}",
                req.index
            )),
            (None, _) => {
                Conclusion::unmeasured(format!("accepts[{}] names no known EVM chain", req.index))
            }
            _ => conformance::c3_compare(req, chain_id, seen.as_ref(), &run.obs.declared_assets),
        };
        results.push(c);
    }
    worst_of(results, "every asset is real and its domain matches")
}

/// Combine per-entry conclusions: any fail fails, else any unmeasured is unmeasured, else pass.
fn worst_of(results: Vec<Conclusion>, all_pass: &str) -> Conclusion {
    let detail = json!(
        results
            .iter()
            .map(|c| json!({"outcome": c.outcome, "evidence": c.evidence}))
            .collect::<Vec<_>>()
    );
    for wanted in [Outcome::Fail, Outcome::Unmeasured] {
        if let Some(c) = results.iter().find(|c| c.outcome == wanted) {
            return Conclusion::new(wanted, c.evidence.clone())
                .with_detail(json!({"entries": detail}));
        }
    }
    if results.is_empty() {
        return Conclusion::unmeasured("no entries to check");
    }
    if results.iter().all(|c| c.outcome == Outcome::Na) {
        return Conclusion::na(results[0].evidence.clone());
    }
    Conclusion::pass(all_pass).with_detail(json!({"entries": detail}))
}

fn amount_of(entry: &Value) -> Option<&str> {
    entry
        .get("amount")
        .or_else(|| entry.get("maxAmountRequired"))
        .and_then(Value::as_str)
}

fn same_text(a: Option<&str>, b: Option<&str>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a.eq_ignore_ascii_case(b))
}

/// H1: the 402 amount equals the listed price for the same network and asset.
fn h1(run: &Run) -> Conclusion {
    let (url, items_seen, item) = match &run.obs.listing {
        ListingSeen::NotAsked => return Conclusion::unmeasured("no listing given (--listing)"),
        ListingSeen::Failed { url, error, .. } => {
            return Conclusion::unmeasured(format!("the listing {url} could not be read: {error}"));
        }
        ListingSeen::Read {
            url,
            items_seen,
            item,
            ..
        } => (url, items_seen, item),
    };
    let Some(item) = item else {
        return Conclusion::na(format!("not listed in {url} ({items_seen} entries read)"));
    };
    let Some(required) = run.required() else {
        return run.not_without_requirements();
    };
    let listed: Vec<&Value> = item
        .get("accepts")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let mut problems = Vec::new();
    let mut compared = Vec::new();
    for req in &required.accepts {
        let entry = &req.entry;
        let twin = listed.iter().find(|l| {
            same_text(
                l.get("network").and_then(Value::as_str),
                entry.get("network").and_then(Value::as_str),
            ) && same_text(
                l.get("asset").and_then(Value::as_str),
                entry.get("asset").and_then(Value::as_str),
            )
        });
        let quoted = req.amount.as_deref();
        match twin {
            None => problems.push(format!(
                "accepts[{}]: no listed price for this network and asset",
                req.index
            )),
            Some(l) if amount_of(l) == quoted && quoted.is_some() => {
                compared
                    .push(json!({"index": req.index, "quoted": quoted, "listed": amount_of(l)}));
            }
            Some(l) => {
                compared
                    .push(json!({"index": req.index, "quoted": quoted, "listed": amount_of(l)}));
                problems.push(format!(
                    "accepts[{}]: quotes {} but the listing says {}",
                    req.index,
                    quoted.unwrap_or("nothing"),
                    amount_of(l).unwrap_or("nothing")
                ));
            }
        }
    }
    let detail = json!({"listing": url, "compared": compared});
    match problems.first() {
        None => Conclusion::pass(format!(
            "the quoted amount equals the price listed in {url}"
        ))
        .with_detail(detail),
        Some(first) => Conclusion::fail(first.clone()).with_detail(detail),
    }
}

/// H4: the payTo is one of the operator's wallets in its own `/.well-known/x402-operator.json`.
fn h4(run: &Run) -> Conclusion {
    let Some(ex) = &run.obs.operator_file else {
        if let Some(cut) = run
            .obs
            .cut_short
            .as_ref()
            .filter(|c| c.operator_file_not_read)
        {
            return Conclusion::unmeasured(format!(
                "the operator file was not read: {}",
                cut.reason()
            ));
        }
        return Conclusion::unmeasured(
            "the subject URL has no origin to read an operator file from",
        );
    };
    if ex.error.as_ref().is_some_and(|e| e.phase == Phase::Guard) {
        return Conclusion::unmeasured("our address guard refused to fetch the operator file");
    }
    let Some(resp) = ex
        .response
        .as_ref()
        .filter(|_| ex.tls.as_ref().is_none_or(|t| t.verified))
    else {
        return Conclusion::unmeasured("the operator file could not be fetched");
    };
    match resp.status {
        404 | 410 => return Conclusion::na("no operator file (HTTP 404)"),
        200..=299 => {}
        other => return Conclusion::unmeasured(format!("the operator file answered HTTP {other}")),
    }
    let Some(required) = run.required() else {
        return run.not_without_requirements();
    };
    let file = match crate::x402::operator::parse_operator_file(&resp.body) {
        Ok(f) => f,
        Err(why) => return Conclusion::fail(why),
    };
    let mut missing = Vec::new();
    for req in &required.accepts {
        let (Some(pay_to), Some(network)) = (req.pay_to_address(), req.network.as_deref()) else {
            missing.push(format!("accepts[{}] has no readable payTo", req.index));
            continue;
        };
        let listed = file
            .wallets
            .iter()
            .any(|w| w.address == pay_to && w.network.as_deref().is_none_or(|n| n == network));
        if !listed {
            missing.push(format!(
                "accepts[{}] pays {pay_to} on {network}, not a listed wallet",
                req.index
            ));
        }
    }
    let detail = json!({"wallets": file.wallets.len(), "refund": file.refund});
    match missing.first() {
        None => Conclusion::pass("every payTo is a wallet in the operator's own file")
            .with_detail(detail),
        Some(first) => Conclusion::fail(first.clone()).with_detail(detail),
    }
}

/// S1: HTTPS with a valid chain, more than 14 days left, no redirect off the host.
fn s1(run: &Run) -> Conclusion {
    let Some(first) = run.seen.first() else {
        return Conclusion::unmeasured("no samples");
    };
    if first.ours.is_some() {
        return Conclusion::unmeasured(format!("not probed: {}", first.failure()));
    }
    let ex = first.exchange;
    if ex.url.starts_with("http://") {
        return Conclusion::fail("plain HTTP: no TLS at all");
    }
    if let Some(e) = ex
        .error
        .as_ref()
        .filter(|e| e.kind == FetchErrorKind::RedirectOffHost)
    {
        return Conclusion::fail(format!("redirects off the host: {}", e.message));
    }
    let Some(tls) = &ex.tls else {
        return Conclusion::unmeasured(format!("no TLS handshake was seen: {}", first.failure()));
    };
    if !tls.verified {
        return Conclusion::fail(format!(
            "the certificate chain does not verify: {}",
            tls.verify_error.as_deref().unwrap_or("unverified")
        ));
    }
    let Some(not_after) = tls.leaf_not_after else {
        return Conclusion::fail("the leaf certificate has no readable expiry");
    };
    let left = not_after - run.obs.at;
    let detail =
        json!({"leaf_not_after": rfc3339(not_after), "seconds_left": left, "version": tls.version});
    if left <= CERT_MIN_REMAINING_SECS {
        return Conclusion::fail(format!(
            "the certificate expires in {:.1} days",
            left as f64 / 86_400.0
        ))
        .with_detail(detail);
    }
    Conclusion::pass(format!(
        "HTTPS, valid chain, {} days left, no redirect off host",
        left / 86_400
    ))
    .with_detail(detail)
}

fn s2(run: &Run) -> Conclusion {
    match run.required_json() {
        Some(pr) => screen::screen_description(&screen::description_texts(pr)),
        None => run.not_without_requirements(),
    }
}

fn s4(run: &Run) -> Conclusion {
    match run.required_json() {
        Some(pr) => screen::screen_secret_asks(
            &screen::description_texts(pr),
            &screen::declared_headers(pr),
        ),
        None => run.not_without_requirements(),
    }
}

/// S5: the primary response's declared type matches its bytes (decoded within a bound when the
/// server compressed them unasked).
fn s5(run: &Run) -> Conclusion {
    let Some(resp) = run.primary else {
        return run.no_response_conclusion("no response to sniff");
    };
    // Two Content-Type headers that differ declare nothing a client can rely on: which one it
    // honours depends on the client.
    let mut declared = resp.header_all("content-type");
    if let Some(first) = declared.next()
        && let Some(other) = declared.find(|t| !t.trim().eq_ignore_ascii_case(first.trim()))
    {
        return Conclusion::fail(format!(
            "Content-Type headers that disagree ({} and {}): the type a client sees depends on the client",
            printable_prefix(first, 100),
            printable_prefix(other, 100)
        ));
    }
    let encoding = resp
        .header("content-encoding")
        .filter(|e| !e.trim().is_empty() && *e != "identity");
    let decoded;
    let body: &[u8] = match encoding {
        None => &resp.body,
        Some(enc) => match decode_body_bounded(resp, SNIFF_DECODE_CAP) {
            Ok(bytes) => {
                decoded = bytes;
                &decoded
            }
            Err(e) => {
                return Conclusion::fail(format!(
                    "a {enc} body we never asked for and cannot safely decode: {e}"
                ));
            }
        },
    };
    sniff::s5(&[SniffSample {
        label: "402",
        content_type: resp.header("content-type"),
        content_encoding: None,
        body,
        truncated: resp.body_truncated,
    }])
}

fn exchange_hashes(label: &str, ex: Option<&Exchange>) -> BTreeMap<String, String> {
    ex.and_then(|e| e.response.as_ref())
        .map(|r| BTreeMap::from([(format!("{label}.body"), r.body_sha256.clone())]))
        .unwrap_or_default()
}

fn listing_hashes(listing: &ListingSeen) -> BTreeMap<String, String> {
    let pages = match listing {
        ListingSeen::NotAsked => return BTreeMap::new(),
        ListingSeen::Failed { pages, .. } | ListingSeen::Read { pages, .. } => pages,
    };
    pages
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.sha256.clone().map(|h| (format!("listing.page{i}"), h)))
        .collect()
}

fn leaf_hash(run: &Run) -> BTreeMap<String, String> {
    run.seen
        .first()
        .and_then(|s| s.exchange.tls.as_ref())
        .and_then(|t| t.chain_der.first())
        .map(|leaf| BTreeMap::from([("tls.leaf".to_string(), sha256_hex(leaf))]))
        .unwrap_or_default()
}
