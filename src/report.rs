//! Reports of a probe run: a readable text grouped by dimension, and the versioned JSON document.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::evidence::{CheckResult, Outcome};
use crate::rubric::Rubric;

/// The JSON report's schema id. Bump the suffix on any incompatible change (README documents it).
pub const PROBE_REPORT_SCHEMA: &str = "x402-probe.probe-report/1";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeReport {
    pub schema: String,
    pub subject: String,
    pub vantage: String,
    /// RFC 3339 UTC.
    pub at: String,
    pub rubric: RubricRef,
    pub checks: Vec<ReportedCheck>,
    pub summary: Summary,
    /// `live`, or `test_harness` for runs against a test lab: test data never passes for observation.
    pub provenance: String,
    /// What the paid call did, when `--pay` was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paid: Option<PaidSummary>,
    /// The provisional score from this run's own evidence, when computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<serde_json::Value>,
    pub exit_code: i32,
}

/// The paid call in one paragraph: what was decided, what was signed and spent, where it settled.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PaidSummary {
    /// `paid`, `refused` or `failed`.
    pub decision: String,
    /// Why we did not pay (each rule that declined), or what failed on our side.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_id: Option<i64>,
    /// The reservation's state after the call (`settled`, `released`, `open`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_state: Option<String>,
    /// The signed amount in atomic units, and what it was counted as against the caps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_atomic: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pay_to: Option<String>,
    /// The transaction the endpoint's settlement response names (checked on chain by C6, H5, H6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_tx: Option<String>,
}

impl PaidSummary {
    pub fn of(obs: &crate::probe::paid::PaidObservation) -> PaidSummary {
        use crate::probe::paid::Decision;
        let (decision, reasons) = match &obs.decision {
            Decision::Paid { .. } => ("paid", Vec::new()),
            Decision::Refused { refusals } => (
                "refused",
                refusals
                    .iter()
                    .map(|r| format!("{}: {}", r.code.as_str(), r.message))
                    .collect(),
            ),
            Decision::Failed { stage, error } => ("failed", vec![format!("{stage}: {error}")]),
        };
        let sent = obs.payment.as_ref();
        PaidSummary {
            decision: decision.into(),
            reasons,
            reservation_id: obs
                .reservation
                .as_ref()
                .map(|r| r.id)
                .or(sent.map(|p| p.reservation_id)),
            reservation_state: obs.reservation.as_ref().map(|r| r.state.clone()),
            amount_atomic: sent.map(|p| p.authorization.value.clone()),
            cost_usd: sent.map(|p| p.cost_usd.to_string()),
            asset: sent.map(|p| p.asset.to_checksum(None)),
            chain_id: sent.map(|p| p.chain_id),
            pay_to: sent.map(|p| p.authorization.to.to_checksum(None)),
            claimed_tx: obs.settlement.as_ref().and_then(|s| s.transaction.clone()),
        }
    }

    pub fn line(&self) -> String {
        match self.decision.as_str() {
            "paid" => format!(
                "paid {} atomic units ({} USD against the caps) of {} on chain {} to {}; reservation {} {}; the endpoint names transaction {}",
                self.amount_atomic.as_deref().unwrap_or("?"),
                self.cost_usd.as_deref().unwrap_or("?"),
                self.asset.as_deref().unwrap_or("?"),
                self.chain_id.map_or("?".into(), |c| c.to_string()),
                self.pay_to.as_deref().unwrap_or("?"),
                self.reservation_id.map_or("?".into(), |r| r.to_string()),
                self.reservation_state.as_deref().unwrap_or("?"),
                self.claimed_tx.as_deref().unwrap_or("none")
            ),
            other => format!("{other}, nothing signed: {}", self.reasons.join("; ")),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RubricRef {
    pub id: String,
    pub version: String,
    pub sha256: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReportedCheck {
    pub id: String,
    pub title: String,
    pub dimension: String,
    pub kind: String,
    #[serde(flatten)]
    pub result: CheckResult,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub pass: usize,
    pub fail: usize,
    pub na: usize,
    pub unmeasured: usize,
}

/// Exit codes of `x402-probe probe` (documented in `--help` and the README).
pub mod exit {
    /// No check failed.
    pub const OK: i32 = 0;
    /// At least one check failed.
    pub const CHECK_FAILED: i32 = 1;
    /// Usage or configuration error.
    pub const USAGE: i32 = 2;
    /// The target could not be probed at all (refused by the address guard, or nothing measured).
    pub const NOT_PROBED: i32 = 3;
}

impl ProbeReport {
    pub fn new(
        subject: &str,
        vantage: &str,
        at: &str,
        rubric: &Rubric,
        results: Vec<CheckResult>,
    ) -> ProbeReport {
        let mut summary = Summary::default();
        for r in &results {
            match r.outcome {
                Outcome::Pass => summary.pass += 1,
                Outcome::Fail => summary.fail += 1,
                Outcome::Na => summary.na += 1,
                Outcome::Unmeasured => summary.unmeasured += 1,
            }
        }
        let reachable_unmeasured = results
            .iter()
            .any(|r| r.id == "R1" && r.outcome == Outcome::Unmeasured);
        let exit_code = if reachable_unmeasured {
            exit::NOT_PROBED
        } else if summary.fail > 0 {
            exit::CHECK_FAILED
        } else {
            exit::OK
        };
        let checks = results
            .into_iter()
            .map(|result| {
                let check = rubric.check(&result.id);
                ReportedCheck {
                    title: check.map(|c| c.title.clone()).unwrap_or_default(),
                    dimension: check.map(|c| c.dimension.clone()).unwrap_or_default(),
                    kind: check
                        .map(|c| format!("{:?}", c.kind).to_lowercase())
                        .unwrap_or_default(),
                    id: result.id.clone(),
                    result,
                }
            })
            .collect();
        ProbeReport {
            schema: PROBE_REPORT_SCHEMA.into(),
            subject: subject.into(),
            vantage: vantage.into(),
            at: at.into(),
            rubric: RubricRef {
                id: rubric.id.clone(),
                version: rubric.version.clone(),
                sha256: rubric.sha256().to_string(),
            },
            checks,
            summary,
            provenance: "live".into(),
            paid: None,
            score: None,
            exit_code,
        }
    }

    /// The readable report. `remediation` gives the operator's fix for a failed check; `color` adds
    /// ANSI colours (only on a terminal).
    pub fn render_text(&self, remediation: &dyn Fn(&str) -> Option<String>, color: bool) -> String {
        let paint = |code: &str, s: &str| {
            if color {
                format!("\x1b[{code}m{s}\x1b[0m")
            } else {
                s.to_string()
            }
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}",
            paint("1", &format!("x402-probe report for {}", self.subject))
        );
        let _ = writeln!(
            out,
            "vantage {} at {}, provenance {}, rubric {} {} (sha256 {}...)",
            self.vantage,
            self.at,
            self.provenance,
            self.rubric.id,
            self.rubric.version,
            &self.rubric.sha256[..12.min(self.rubric.sha256.len())]
        );
        let mut dimensions: Vec<&str> = Vec::new();
        for c in &self.checks {
            if !dimensions.contains(&c.dimension.as_str()) {
                dimensions.push(&c.dimension);
            }
        }
        for dim in dimensions {
            let _ = writeln!(out, "\n{}", paint("1", dim));
            for c in self.checks.iter().filter(|c| c.dimension == dim) {
                let (label, code) = match c.result.outcome {
                    Outcome::Pass => ("pass", "32"),
                    Outcome::Fail => ("FAIL", "31;1"),
                    Outcome::Na => ("na", "2"),
                    Outcome::Unmeasured => ("unmeasured", "33"),
                };
                let _ = writeln!(
                    out,
                    "  {:<3} {} {:<28} {}",
                    c.id,
                    paint(code, &format!("{label:<10}")),
                    truncate(&c.title, 28),
                    one_line(&c.result.evidence, 120)
                );
                if c.result.outcome == Outcome::Fail
                    && let Some(fix) = remediation(&c.id)
                {
                    let _ = writeln!(out, "      {} {}", paint("36", "fix:"), one_line(&fix, 140));
                }
            }
        }
        if let Some(paid) = &self.paid {
            let _ = writeln!(out, "\n{}", paint("1", "paid call"));
            let _ = writeln!(out, "  {}", one_line(&paid.line(), 400));
        }
        if let Some(score) = &self.score {
            let _ = writeln!(out, "\n{}", paint("1", "provisional score"));
            let _ = writeln!(out, "  {}", score_line(score));
        }
        let s = &self.summary;
        let _ = writeln!(
            out,
            "\n{} pass, {} fail, {} na, {} unmeasured; exit code {}",
            s.pass, s.fail, s.na, s.unmeasured, self.exit_code
        );
        out
    }
}

/// One line summarising a score document: score, band, grade (provisional while unverified), verdict
/// and why.
pub fn score_line(score: &serde_json::Value) -> String {
    use serde_json::Value;
    if let Some(e) = score.get("error").and_then(Value::as_str) {
        return e.to_string();
    }
    let num = |p: &str| score.pointer(p).and_then(Value::as_f64);
    let text = |p: &str| score.pointer(p).and_then(Value::as_str);
    let band = match (num("/band/low"), num("/band/high")) {
        (Some(lo), Some(hi)) => format!("band [{lo:.1}, {hi:.1}]"),
        _ => "no band".into(),
    };
    let grade = match (text("/grade"), text("/provisional_grade")) {
        (Some(g), _) => format!("grade {g}"),
        (None, Some(g)) => format!("provisional grade {g}"),
        _ => "no grade".into(),
    };
    let reasons = |p: &str| -> Vec<String> {
        score
            .pointer(p)
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|x| x.get("detail").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut why = reasons("/verdict/reasons");
    for r in reasons("/verdict/verification/reasons") {
        if !why.contains(&r) {
            why.push(r);
        }
    }
    format!(
        "{:.1} (capped {:.1}), {band}, {} confidence, {grade}, verdict {} ({}){}",
        num("/score").unwrap_or(f64::NAN),
        num("/capped_score").unwrap_or(f64::NAN),
        text("/confidence").unwrap_or("?"),
        text("/verdict/verdict").unwrap_or("?"),
        text("/verdict/status").unwrap_or("?"),
        if why.is_empty() {
            String::new()
        } else {
            format!(": {}", why.join("; "))
        }
    )
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

/// One line of at most `n` characters, with control and invisible characters made visible: evidence
/// quotes hostile text, which must never drive the terminal.
pub fn one_line(s: &str, n: usize) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| match c {
            '\n' | '\r' | '\t' => ' ',
            c if c.is_control() => '\u{FFFD}',
            '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}'
            | '\u{FEFF}' => '\u{FFFD}',
            c => c,
        })
        .collect();
    truncate(&cleaned, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_evidence_cannot_drive_the_terminal() {
        let s = one_line("ok\x1b[2J\u{202E}evil\nline", 100);
        assert!(!s.contains('\x1b') && !s.contains('\u{202E}') && !s.contains('\n'));
    }
}
