//! One probe run of one subject: the free run, then (when asked and allowed) one paid call, their
//! results merged in rubric order, and the history entries the scorer reads. Used by `probe` and
//! `demo` (and later the daemon), so every entry point measures the same way.

use serde_json::Value;

use crate::checks::free::{evaluate_free, evaluate_free_parsed};
use crate::evidence::CheckResult;
use crate::evidence::paid::PaymentCarrier;
use crate::evidence::paid::{RefundPlan, RefundSeen};
use crate::history::{SubjectFacts, inputs_document, quoted_price_usd, run_entries};
use crate::observation::FreeObservation;
use crate::paid::steps::requote_parsed;
use crate::probe::free::{FreeProbeConfig, PeerFetches, probe_free_parsed};
use crate::probe::mcp::{McpRun, probe_mcp};
use crate::probe::paid::{PaidContext, PaidObservation, paid_call};
use crate::probe::refund::watch_refund;
use crate::probe::rpc::Rpc;
use crate::rubric::Rubric;
use crate::score::input::{InputsDocument, Provenance};

/// Everything one run saw and concluded.
#[derive(Debug, Clone)]
pub struct RunOutput {
    pub free: FreeObservation,
    pub paid: Option<PaidObservation>,
    /// Every rubric check once, in rubric order: the paid checks from the paid call when one was
    /// attempted, else `unmeasured`.
    pub results: Vec<CheckResult>,
}

impl RunOutput {
    /// Whether a payment was actually sent (a refusal sends nothing and leaves the paid checks
    /// `unmeasured`); only then do the paid entries count as a paid call for the verdict.
    pub fn payment_sent(&self) -> bool {
        self.paid.as_ref().is_some_and(|p| p.payment_sent())
    }
}

/// Probe `url` for free, then pay once through `pay` when given. `now` is the run's start.
pub async fn run(
    cfg: &FreeProbeConfig,
    pay: Option<&PaidContext<'_>>,
    rubric: &Rubric,
    url: &str,
    now: i64,
) -> RunOutput {
    let mut out = free_run(cfg, rubric, url, now).await;
    if let Some(ctx) = pay
        && let Some(plan) = pay_and_merge(ctx, rubric, &mut out).await
    {
        // A one-off run waits for the refund watch (bounded by `refund_watch_max_secs`); the
        // daemon schedules it as a job of its own.
        let refund = watch_refund(ctx.fetch, ctx.rpc, &ctx.options, ctx.wall, &plan).await;
        merge_refund(rubric, &mut out, refund);
    }
    out
}

/// Probe an MCP server for free (`probe::mcp`), then, through `pay` when given, pay each paid
/// tool it observed once, as `run` pays an endpoint: the same money path, one call at a time.
/// Returns the server's run and one output per paid tool.
pub async fn run_mcp(
    cfg: &FreeProbeConfig,
    pay: Option<&PaidContext<'_>>,
    rubric: &Rubric,
    subject: &crate::http_url::McpSubject,
    now: i64,
) -> (McpRun, Vec<RunOutput>) {
    let run = probe_mcp(cfg, subject, now).await;
    let mut outputs = Vec::with_capacity(run.paid.len());
    for free in &run.paid {
        let results = evaluate_free(free, rubric);
        let mut out = RunOutput {
            free: free.clone(),
            paid: None,
            results,
        };
        if let Some(ctx) = pay
            && let Some(plan) = pay_and_merge(ctx, rubric, &mut out).await
        {
            let refund = watch_refund(ctx.fetch, ctx.rpc, &ctx.options, ctx.wall, &plan).await;
            merge_refund(rubric, &mut out, refund);
        }
        outputs.push(out);
    }
    (run, outputs)
}

/// Puts a refund watch's result into the run and judges the paid checks again with it (H9).
pub fn merge_refund(rubric: &Rubric, out: &mut RunOutput, refund: RefundSeen) {
    let Some(obs) = out.paid.as_mut() else {
        return;
    };
    obs.refund = Some(refund);
    let paid_results =
        crate::checks::paid::evaluate_with_rubric(obs, rubric, out.free.at, &out.free.vantage);
    for r in paid_results {
        if let Some(slot) = out.results.iter_mut().find(|x| x.id == r.id) {
            *slot = r;
        }
    }
}

/// The free part of a run (no wallet involved: runs for many subjects can go concurrently).
pub async fn free_run(cfg: &FreeProbeConfig, rubric: &Rubric, url: &str, now: i64) -> RunOutput {
    let (free, first_parse) = probe_free_parsed(cfg, url, now, PeerFetches::Make).await;
    let results = evaluate_free_parsed(&free, rubric, first_parse);
    RunOutput {
        free,
        paid: None,
        results,
    }
}

/// Pay once for what the free run saw (its first usable 402, for the request its later samples used:
/// the documented example input when there is one) and put the paid outcomes in the results. A run
/// without a usable 402 makes no paid call. When the call charged without delivering, returns
/// what a refund watch needs (H9 stays `unmeasured` until the watch reports).
pub async fn pay_and_merge(
    ctx: &PaidContext<'_>,
    rubric: &Rubric,
    out: &mut RunOutput,
) -> Option<RefundPlan> {
    // Over MCP the quote is the tool's PaymentRequired, read against the call that got it.
    let carrier = PaymentCarrier::of_subject(&out.free.subject);
    let usable = out
        .free
        .samples
        .iter()
        .filter(|s| s.exchange.tls.as_ref().is_none_or(|t| t.verified))
        .find(|s| s.exchange.response.is_some());
    let (Some(sample), Some(last)) = (usable, out.free.samples.last()) else {
        return None;
    };
    let quote = requote_parsed(carrier, &sample.request, &sample.exchange)?;
    let mut obs = paid_call(ctx, &out.free.subject, &last.request, &quote).await;
    // The refund watch is a job of its own, after the paid lane is free again.
    let plan = match crate::checks::paid::refund_plan(&obs) {
        Ok(plan) => Some(plan),
        Err(why) => {
            obs.refund = Some(RefundSeen::skipped(why));
            None
        }
    };
    let paid_results =
        crate::checks::paid::evaluate_with_rubric(&obs, rubric, out.free.at, &out.free.vantage);
    for r in paid_results {
        if let Some(slot) = out.results.iter_mut().find(|x| x.id == r.id) {
            *slot = r;
        }
    }
    out.paid = Some(obs);
    plan
}

/// The scorer's inputs for this one run: its history entries under one revision (`r0`, at the run's
/// time) numbered from 0 in run order, the subject's quoted price, and the provenance the caller
/// states.
pub fn single_run_inputs(
    rubric: &Rubric,
    out: &RunOutput,
    category: &str,
    provenance: Provenance,
) -> InputsDocument {
    let at = crate::evidence::rfc3339(out.free.at);
    let subject = SubjectFacts {
        id: out.free.subject.clone(),
        url: out.free.subject.clone(),
        category: category.into(),
        price_usd: quoted_price_usd(&out.free).unwrap_or_default(),
        revisions: vec![("r0".into(), at.clone())],
    };
    let history = run_entries(&out.results, rubric, out.payment_sent(), "r0", 0);
    // Scored as of the run's last evidence (the paid call ends after the run starts). The times are
    // all RFC 3339 UTC of one format, so their text order is their time order.
    let as_of = history
        .iter()
        .map(|e| e.at.as_str())
        .chain(std::iter::once(at.as_str()))
        .max()
        .unwrap_or(at.as_str())
        .to_string();
    inputs_document(rubric, &as_of, &subject, history, provenance)
}

/// Score inputs; a scoring error is returned as `{"error": ...}` in place of the document, so a
/// report can say it rather than lose the run.
pub fn score_inputs(rubric: &Rubric, inputs: &InputsDocument) -> Value {
    let scored = crate::score::input::Inputs::from_document(inputs.clone())
        .map_err(anyhow::Error::from)
        .and_then(|inputs| {
            Ok(crate::score::score(
                rubric,
                &inputs,
                crate::score::montecarlo::Sampler::InverseCdfTable,
            )?)
        })
        .and_then(|doc| Ok(serde_json::from_slice::<Value>(&doc.to_bytes()?)?));
    scored.unwrap_or_else(|e| serde_json::json!({"error": format!("not scored: {e:#}")}))
}

/// The chain id the fixed RPC serves, for building an allowlist of declared assets.
pub async fn rpc_chain_id(rpc: &Rpc) -> Option<u64> {
    rpc.chain_id().await.ok()
}
