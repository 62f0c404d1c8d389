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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{Outcome, Receipt};

    fn result(id: &str, outcome: Outcome, detail: Value) -> CheckResult {
        CheckResult {
            id: id.into(),
            outcome,
            evidence: String::new(),
            value: None,
            receipt: Receipt {
                vantage: "v".into(),
                at: "2026-11-29T00:00:00Z".into(),
                detail,
                ..Receipt::default()
            },
        }
    }

    #[test]
    fn per_sample_checks_expand_and_others_give_one_entry() {
        let rubric = Rubric::embedded_default();
        let results = vec![
            result(
                "R1",
                Outcome::Fail,
                json!({"samples": [{"outcome": "pass"}, {"outcome": "fail"}, {"outcome": "unmeasured"}]}),
            ),
            result(
                "R3",
                Outcome::Pass,
                json!({"samples": [{"outcome": "pass", "ms": 12.0}, {"outcome": "fail"}]}),
            ),
            // Paid checks keep their own detail under `check`.
            result(
                "R7",
                Outcome::Pass,
                json!({"check": {"samples": [{"outcome": "pass", "ms": 40.0}]}}),
            ),
            result("C1", Outcome::Pass, Value::Null),
            result("H2", Outcome::Unmeasured, Value::Null),
            result("R4", Outcome::Pass, Value::Null),
        ];
        let entries = run_entries(&results, &rubric, true, "r0");
        let summary: Vec<(String, String, Option<f64>, String)> = entries
            .iter()
            .map(|e| {
                (
                    e["check"].as_str().unwrap().to_string(),
                    e["outcome"].as_str().unwrap().to_string(),
                    e.get("value").and_then(Value::as_f64),
                    e["kind"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let s = |c: &str, o: &str, v: Option<f64>, k: &str| {
            (c.to_string(), o.to_string(), v, k.to_string())
        };
        assert_eq!(
            summary,
            vec![
                s("R1", "pass", None, "free"),
                s("R1", "fail", None, "free"),
                s("R1", "unmeasured", None, "free"),
                s("R3", "pass", Some(12.0), "free"),
                s("R3", "fail", None, "free"),
                s("R7", "pass", Some(40.0), "paid"),
                s("C1", "pass", None, "free"),
                s("H2", "unmeasured", None, "free"),
                s("R4", "pass", None, "paid"),
            ]
        );
        assert!(
            entries
                .iter()
                .all(|e| e["receipt"].as_str().unwrap().len() == 64 && e["revision"] == "r0")
        );
    }

    #[test]
    fn paid_entries_count_as_a_paid_call_only_when_a_payment_was_sent() {
        let rubric = Rubric::embedded_default();
        let results = vec![result("R4", Outcome::Unmeasured, Value::Null)];
        assert_eq!(
            run_entries(&results, &rubric, false, "r0")[0]["kind"],
            "free"
        );
        assert_eq!(
            run_entries(&results, &rubric, true, "r0")[0]["kind"],
            "paid"
        );
    }
}
