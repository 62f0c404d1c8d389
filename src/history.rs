//! From a probe run's results to the scorer's history entries and inputs document (`rubrics/README.md`
//! documents the format). Pure: the run's time is in the results.
//!
//! Per-sample checks give one entry per sample (R1, R2 from their samples; R3 one timed `pass` or
//! never-completed `fail` per sample, the history's curve convention); every other check gives one
//! entry per run. `unmeasured` results are kept: they record nothing against the subject, and the
//! document shows that they were looked for.

use serde_json::{Value, json};

use crate::canonical::canonical_sha256;
use crate::evidence::CheckResult;
use crate::rubric::{Kind, Rubric};

/// The history entries of one run. `paid_run` is true when the run made a paid call (its paid
/// entries then prove a paid call happened, which the verdict needs).
pub fn run_entries(
    results: &[CheckResult],
    rubric: &Rubric,
    paid_run: bool,
    revision: &str,
) -> Vec<Value> {
    let mut entries = Vec::new();
    for r in results {
        let Some(check) = rubric.check(&r.id) else {
            continue;
        };
        let kind = match (check.kind, paid_run) {
            (Kind::Paid, true) => "paid",
            _ => "free",
        };
        let receipt = canonical_sha256(&serde_json::to_value(&r.receipt).unwrap_or(Value::Null));
        let entry = |outcome: &str, value: Option<f64>| {
            let mut e = json!({
                "check": r.id, "outcome": outcome, "at": r.receipt.at, "kind": kind,
                "revision": revision, "receipt": receipt,
            });
            if let Some(v) = value {
                e["value"] = json!(v);
            }
            e
        };
        // Free checks keep their detail at the top of the receipt; paid ones under `check`.
        let detail = &r.receipt.detail;
        let samples = detail
            .get("samples")
            .or_else(|| detail.pointer("/check/samples"))
            .and_then(Value::as_array);
        match (r.id.as_str(), samples) {
            ("R1" | "R2", Some(samples)) => {
                for s in samples {
                    if let Some(o) = s.get("outcome").and_then(Value::as_str) {
                        entries.push(entry(o, None));
                    }
                }
            }
            ("R3" | "R7", Some(samples)) => {
                for s in samples {
                    match (
                        s.get("outcome").and_then(Value::as_str),
                        s.get("ms").and_then(Value::as_f64),
                    ) {
                        (Some("pass"), Some(ms)) => entries.push(entry("pass", Some(ms))),
                        (Some("fail"), _) => entries.push(entry("fail", None)),
                        _ => {}
                    }
                }
            }
            _ => entries.push(entry(r.outcome.as_str(), r.value.filter(|_| r.id == "R5"))),
        }
    }
    entries
}

/// The subject as the scorer needs it.
#[derive(Debug, Clone)]
pub struct SubjectFacts {
    pub id: String,
    pub url: String,
    pub category: String,
    pub price_usd: f64,
    /// `(id, RFC 3339 time)` of each revision, oldest first.
    pub revisions: Vec<(String, String)>,
}

/// A complete inputs document for `score`.
pub fn inputs_document(
    rubric: &Rubric,
    as_of: &str,
    subject: &SubjectFacts,
    history: Vec<Value>,
    provenance: &str,
) -> Value {
    json!({
        "rubric_sha256": rubric.sha256(),
        "rubric_version": rubric.version,
        "as_of": as_of,
        "subject": {
            "id": subject.id,
            "url": subject.url,
            "category": subject.category,
            "price_usd": format!("{}", subject.price_usd),
            "revisions": subject.revisions.iter().map(|(id, at)| json!({"id": id, "at": at})).collect::<Vec<_>>(),
        },
        "history": history,
        "population": [],
        "provenance": provenance,
    })
}

/// The price the run's first usable 402 quotes for its first entry, in USD, reading the amount in
/// 6-decimal units (USDC and the stablecoins x402 quotes in). `None` when there was no quote.
pub fn quoted_price_usd(obs: &crate::observation::FreeObservation) -> Option<f64> {
    let resp = obs
        .samples
        .iter()
        .filter(|s| s.exchange.tls.as_ref().is_none_or(|t| t.verified))
        .find_map(|s| s.exchange.response.as_ref())?;
    let parsed = crate::x402::parse::parse_payment_required(resp.status, &resp.headers, &resp.body);
    let amount = parsed.required?.accepts.first()?.amount_value()?;
    let micros: u128 = amount.try_into().ok()?;
    Some(micros as f64 / 1e6)
}
