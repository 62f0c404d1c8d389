//! Reports of a probe run: a readable text grouped by dimension, and the versioned JSON document.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value, json};

use crate::budget::{
    MAX_EVIDENCE_CHARS, MAX_RECEIPT_BYTES, MAX_RECEIPT_ITEMS, MAX_RECEIPT_STRING_CHARS,
    MAX_REPORT_BYTES, MAX_REPORT_CUTS,
};
use crate::checks::attribution::{Attribution, Party, PartyCount, attribute_all, count_by_party};
use crate::evidence::{CheckResult, Outcome, Receipt, sha256_hex};
use crate::rubric::Rubric;
use crate::x402::types::printable_prefix;

/// The JSON report's schema id. Bump the suffix on any incompatible change (README documents it).
pub const PROBE_REPORT_SCHEMA: &str = "x402-probe.probe-report/1";

/// Serialising a report always bounds it (see [`ProbeReport::bounded_json`]): whoever writes the
/// JSON gets at most [`MAX_REPORT_BYTES`], with a `cuts` list naming what was shortened.
#[derive(Debug, Clone, Deserialize)]
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
    /// The agent-readiness assessment (seed 000) of this run's checks: a second rubric, never
    /// mixed into `score`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<serde_json::Value>,
    /// The findings peers publish (`probes/findings/`): facts beside the checks, never scored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<crate::checks::findings::Finding>,
    /// How many failed paid checks and `unmeasured` results each party has
    /// (`probes/attribution.md`), when the run's observations were given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parties: Option<std::collections::BTreeMap<Party, PartyCount>>,
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
    /// A Solana payment's cluster (CAIP-2); `chain_id` is for EVM ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
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
        let svm = obs.svm.as_ref().map(|s| &s.payment);
        PaidSummary {
            decision: decision.into(),
            reasons,
            reservation_id: obs
                .reservation
                .as_ref()
                .map(|r| r.id)
                .or(sent.map(|p| p.reservation_id))
                .or(svm.map(|p| p.reservation_id)),
            reservation_state: obs
                .reservation
                .as_ref()
                .map(|r| r.state.as_str().to_string()),
            amount_atomic: sent
                .map(|p| p.authorization.value.clone())
                .or(svm.map(|p| p.amount.to_string())),
            cost_usd: sent
                .map(|p| p.cost_usd.to_string())
                .or(svm.map(|p| p.cost_usd.to_string())),
            asset: sent
                .map(|p| p.asset.to_checksum(None))
                .or(svm.map(|p| p.mint.clone())),
            chain_id: sent.map(|p| p.chain_id),
            network: svm.map(|p| p.network.clone()),
            pay_to: sent
                .map(|p| p.authorization.to.to_checksum(None))
                .or(svm.map(|p| p.pay_to.clone())),
            claimed_tx: obs.settlement.as_ref().and_then(|s| s.transaction.clone()),
        }
    }

    pub fn line(&self) -> String {
        match self.decision.as_str() {
            "paid" => format!(
                "paid {} atomic units ({} USD against the caps) of {} on {} to {}; reservation {} {}; the endpoint names transaction {}",
                self.amount_atomic.as_deref().unwrap_or("?"),
                self.cost_usd.as_deref().unwrap_or("?"),
                self.asset.as_deref().unwrap_or("?"),
                match (self.chain_id, &self.network) {
                    (Some(c), _) => format!("chain {c}"),
                    (None, Some(n)) => n.clone(),
                    (None, None) => "chain ?".into(),
                },
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

/// One check in the report. Its id is the result's (`result.id`): one `id` key in the JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReportedCheck {
    pub title: String,
    pub dimension: String,
    pub kind: String,
    #[serde(flatten)]
    pub result: CheckResult,
    /// Whose a failed paid check or an `unmeasured` result is (`probes/attribution.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub party: Option<Attribution>,
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
        let readiness = serde_json::to_value(crate::readiness::assess(
            &crate::readiness::ReadinessRubric::embedded(),
            &crate::readiness::evidence::from_checks(&results),
        ))
        .ok();
        let checks = results
            .into_iter()
            .map(|result| {
                let check = rubric.check(result.id);
                ReportedCheck {
                    title: check.map(|c| c.title.clone()).unwrap_or_default(),
                    dimension: check.map(|c| c.dimension.clone()).unwrap_or_default(),
                    kind: check
                        .map(|c| format!("{:?}", c.kind).to_lowercase())
                        .unwrap_or_default(),
                    result,
                    party: None,
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
            readiness,
            findings: Vec::new(),
            parties: None,
            exit_code,
        }
    }

    /// Adds what the run's observations give besides the results: each result's party, the
    /// count by party, and the findings. Derived, like the results, from what the run saw.
    pub fn with_run(
        mut self,
        free: &crate::evidence::free::FreeObservation,
        paid: Option<&crate::evidence::paid::PaidObservation>,
        ctx: &crate::checks::findings::FindingsContext,
    ) -> ProbeReport {
        let results: Vec<CheckResult> = self.checks.iter().map(|c| c.result.clone()).collect();
        let parties = attribute_all(&results, free, paid);
        for c in &mut self.checks {
            c.party = parties.get(&c.result.id).cloned();
        }
        self.parties = Some(count_by_party(&parties, &results));
        self.findings = crate::checks::findings::evaluate(free, paid, ctx);
        self
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
                    c.result.id,
                    paint(code, &format!("{label:<10}")),
                    truncate(&c.title, 28),
                    one_line(&c.result.evidence, 120)
                );
                if let Some(a) = &c.party {
                    let _ = writeln!(
                        out,
                        "      {} {}",
                        paint("2", &format!("whose: {}", a.party)),
                        one_line(&a.why, 120)
                    );
                }
                if c.result.outcome == Outcome::Fail
                    && let Some(fix) = remediation(c.result.id.as_str())
                {
                    let _ = writeln!(out, "      {} {}", paint("36", "fix:"), one_line(&fix, 140));
                }
            }
        }
        if !self.findings.is_empty() {
            let _ = writeln!(
                out,
                "\n{}",
                paint("1", "findings (published beside the score, never in it)")
            );
            for f in &self.findings {
                let (label, code) = match f.outcome {
                    Outcome::Pass => ("yes", "32"),
                    Outcome::Fail => ("NO", "31;1"),
                    Outcome::Na => ("na", "2"),
                    Outcome::Unmeasured => ("unmeasured", "33"),
                };
                let _ = writeln!(
                    out,
                    "  {:<18} {} {}",
                    f.id.as_str(),
                    paint(code, &format!("{label:<10}")),
                    one_line(&f.evidence, 120)
                );
            }
        }
        if let Some(parties) = &self.parties {
            let line: Vec<String> = parties
                .iter()
                .map(|(p, c)| format!("{p} {} failed, {} unmeasured", c.failed, c.unmeasured))
                .collect();
            let _ = writeln!(out, "\n{}", paint("1", "whose failures and gaps"));
            let _ = writeln!(out, "  {}", line.join("; "));
        }
        if let Some(paid) = &self.paid {
            let _ = writeln!(out, "\n{}", paint("1", "paid call"));
            let _ = writeln!(out, "  {}", one_line(&paid.line(), 400));
        }
        if let Some(score) = &self.score {
            let _ = writeln!(out, "\n{}", paint("1", "provisional score"));
            let _ = writeln!(out, "  {}", score_line(score));
        }
        if let Some(readiness) = &self.readiness {
            let _ = writeln!(out, "\n{}", paint("1", "agent readiness (seed 000)"));
            let _ = writeln!(out, "  {}", readiness_line(readiness));
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

impl Serialize for ProbeReport {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.bounded_json()
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}

impl ProbeReport {
    /// The JSON report, at most [`MAX_REPORT_BYTES`] when printed (pretty or compact). Endpoint
    /// text reaches the report through evidence lines and receipts, so each is bounded first
    /// (evidence to [`MAX_EVIDENCE_CHARS`] characters; in a receipt's detail, strings to
    /// [`MAX_RECEIPT_STRING_CHARS`], arrays to [`MAX_RECEIPT_ITEMS`] items, the whole detail to
    /// about [`MAX_RECEIPT_BYTES`]); then, while the report is still too large, the largest
    /// receipt detail (and last the score document) is replaced by a stub naming its size and
    /// sha256. Every place shortened is listed under `cuts`. Copies only what it keeps.
    pub fn bounded_json(&self) -> Result<Value, serde_json::Error> {
        let mut cuts = Cuts::default();
        let checks = self
            .checks
            .iter()
            .map(|check| bounded_check(check, &mut cuts))
            .collect::<Result<Vec<Value>, _>>()?;
        let mut doc = Map::new();
        doc.insert("schema".into(), json!(self.schema));
        doc.insert(
            "subject".into(),
            json!(cut_string(
                &self.subject,
                MAX_RECEIPT_STRING_CHARS,
                "subject",
                &mut cuts
            )),
        );
        doc.insert(
            "vantage".into(),
            json!(cut_string(
                &self.vantage,
                MAX_RECEIPT_STRING_CHARS,
                "vantage",
                &mut cuts
            )),
        );
        doc.insert("at".into(), json!(self.at));
        doc.insert("rubric".into(), serde_json::to_value(&self.rubric)?);
        doc.insert("checks".into(), Value::Array(checks));
        doc.insert("summary".into(), serde_json::to_value(&self.summary)?);
        doc.insert("provenance".into(), json!(self.provenance));
        if let Some(paid) = &self.paid {
            let paid = serde_json::to_value(paid)?;
            doc.insert("paid".into(), Shaper::new("paid", &mut cuts).shape(&paid));
        }
        if let Some(score) = &self.score {
            doc.insert("score".into(), score.clone());
        }
        if let Some(readiness) = &self.readiness {
            doc.insert("readiness".into(), readiness.clone());
        }
        if !self.findings.is_empty() {
            let mut shown = Vec::with_capacity(self.findings.len());
            for f in &self.findings {
                let place = format!("findings[{}]", f.id);
                let mut f = f.clone();
                f.evidence = cut_string(
                    &f.evidence,
                    MAX_EVIDENCE_CHARS,
                    &format!("{place}.evidence"),
                    &mut cuts,
                );
                f.receipt.detail = Shaper::new(&format!("{place}.receipt.detail"), &mut cuts)
                    .shape(&f.receipt.detail);
                shown.push(serde_json::to_value(f)?);
            }
            doc.insert("findings".into(), Value::Array(shown));
        }
        if let Some(parties) = &self.parties {
            doc.insert("parties".into(), serde_json::to_value(parties)?);
        }
        doc.insert("exit_code".into(), json!(self.exit_code));
        fit(&mut doc, &mut cuts)?;
        if !cuts.lines.is_empty() {
            doc.insert("cuts".into(), json!(cuts.lines()));
        }
        Ok(Value::Object(doc))
    }
}

/// The schema of `probe mcp+URL --json`.
pub const MCP_REPORT_SCHEMA: &str = "x402-probe.mcp-report/1";
/// Tools listed by name in the report's `free_tools` and `not_called` at most; the rest counted.
const MAX_REPORTED_TOOL_NOTES: usize = 100;

/// A tool named in the MCP report with why it is there (server text, made printable and bounded).
#[derive(Debug, Clone, Serialize)]
pub struct ToolNote {
    pub tool: String,
    pub why: String,
}

impl ToolNote {
    fn of(tool: &str, why: &str) -> ToolNote {
        ToolNote {
            tool: printable_prefix(tool, 200),
            why: printable_prefix(why, MAX_EVIDENCE_CHARS),
        }
    }
}

/// `probe mcp+URL`: the server as the client saw it, then one [`ProbeReport`] per paid tool.
#[derive(Debug, Clone, Serialize)]
pub struct McpReport {
    pub schema: String,
    /// The server's key (`mcp+https://host/path`, with `#tool` when one was named).
    pub server: String,
    /// `stateless` or `session`; absent when the server answered neither form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub form: Option<crate::evidence::mcp::TransportForm>,
    /// Tools read from `tools/list`, and how many the server sent.
    pub tools_listed: usize,
    pub tools_sent: usize,
    /// One report per tool that asked for payment (or the tool named), its subject its own key.
    pub tools: Vec<ProbeReport>,
    /// Tools called unpaid that did not ask for payment.
    pub free_tools: Vec<ToolNote>,
    /// Tools not called (destructive-looking, past the budget), at most 100; the rest counted.
    pub not_called: Vec<ToolNote>,
    pub not_called_omitted: usize,
    /// Why no tool could be probed, when none could.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    pub notes: Vec<String>,
    pub exit_code: i32,
}

impl McpReport {
    /// The report of one MCP run: `tools` are the paid tools' reports, already made. The exit
    /// code is the worst of theirs; without any: 3 when the server never answered, else 1 (a
    /// server probed for paid tools that shows none fails that probe).
    pub fn new(run: &crate::probe::mcp::McpRun, tools: Vec<ProbeReport>) -> McpReport {
        let exit_code = if tools.is_empty() {
            if run.answered {
                exit::CHECK_FAILED
            } else {
                exit::NOT_PROBED
            }
        } else {
            tools.iter().map(|t| t.exit_code).max().unwrap_or(exit::OK)
        };
        let notes = |list: &[(String, String)]| -> Vec<ToolNote> {
            list.iter()
                .take(MAX_REPORTED_TOOL_NOTES)
                .map(|(t, why)| ToolNote::of(t, why))
                .collect()
        };
        McpReport {
            schema: MCP_REPORT_SCHEMA.into(),
            server: printable_prefix(&run.subject.key(), MAX_RECEIPT_STRING_CHARS),
            form: run.form,
            tools_listed: run.tools.len(),
            tools_sent: run.tools_sent,
            tools,
            free_tools: notes(&run.free_tools),
            not_called: notes(&run.not_called),
            not_called_omitted: run.not_called.len().saturating_sub(MAX_REPORTED_TOOL_NOTES),
            failure: run
                .failure
                .as_deref()
                .map(|f| printable_prefix(f, MAX_EVIDENCE_CHARS)),
            notes: run
                .notes
                .iter()
                .take(MAX_REPORTED_TOOL_NOTES)
                .map(|n| printable_prefix(n, MAX_EVIDENCE_CHARS))
                .collect(),
            exit_code,
        }
    }

    /// The readable report: the server in a few lines, then each paid tool's report.
    pub fn render_text(&self, remediation: &dyn Fn(&str) -> Option<String>, color: bool) -> String {
        let mut out = String::new();
        let form = match self.form {
            Some(crate::evidence::mcp::TransportForm::Stateless) => "stateless form",
            Some(crate::evidence::mcp::TransportForm::Session) => {
                "initialize handshake and session"
            }
            None => "no form answered",
        };
        let _ = writeln!(out, "MCP server {} ({form})", self.server);
        let _ = writeln!(
            out,
            "  tools listed: {} of {} sent; paid tools probed: {}",
            self.tools_listed,
            self.tools_sent,
            self.tools.len()
        );
        if let Some(failure) = &self.failure {
            let _ = writeln!(out, "  not probed: {}", one_line(failure, 400));
        }
        for t in &self.free_tools {
            let _ = writeln!(
                out,
                "  free tool {}: {}",
                one_line(&t.tool, 130),
                one_line(&t.why, 200)
            );
        }
        for t in &self.not_called {
            let _ = writeln!(
                out,
                "  not called {}: {}",
                one_line(&t.tool, 130),
                one_line(&t.why, 200)
            );
        }
        if self.not_called_omitted > 0 {
            let _ = writeln!(out, "  ... and {} more not called", self.not_called_omitted);
        }
        for n in &self.notes {
            let _ = writeln!(out, "  note: {}", one_line(n, 300));
        }
        for tool in &self.tools {
            out.push('\n');
            out.push_str(&tool.render_text(remediation, color));
        }
        let _ = writeln!(out, "\nMCP exit code {}", self.exit_code);
        out
    }
}

/// Printed size of a stub, at most (what replacing a part saves is its size less this).
const STUB_BYTES: usize = 256;
/// Room kept for the `cuts` list itself when fitting the rest.
const CUTS_ROOM: usize = 32 * 1024;

/// Where the report was shortened, in order.
#[derive(Default)]
struct Cuts {
    lines: Vec<String>,
}

impl Cuts {
    fn note(&mut self, line: String) {
        self.lines.push(line);
    }

    fn lines(&self) -> Vec<String> {
        let mut shown: Vec<String> = self
            .lines
            .iter()
            .take(MAX_REPORT_CUTS)
            .map(|l| one_line(l, 300))
            .collect();
        if self.lines.len() > MAX_REPORT_CUTS {
            shown.push(format!(
                "and {} more places cut",
                self.lines.len() - MAX_REPORT_CUTS
            ));
        }
        shown
    }
}

/// At most `max` characters of `text`; a cut is noted under `place`.
fn cut_string(text: &str, max: usize, place: &str, cuts: &mut Cuts) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((end, _)) => {
            cuts.note(format!(
                "{place}: {} characters, the first {max} kept",
                text.chars().count()
            ));
            format!("{}…", &text[..end])
        }
    }
}

/// One check as the report shows it: its evidence and its receipt's detail bounded.
fn bounded_check(check: &ReportedCheck, cuts: &mut Cuts) -> Result<Value, serde_json::Error> {
    let result = &check.result;
    let place = format!("checks[{}]", result.id);
    let receipt = &result.receipt;
    let shown = CheckResult {
        id: result.id,
        outcome: result.outcome,
        evidence: cut_string(
            &result.evidence,
            MAX_EVIDENCE_CHARS,
            &format!("{place}.evidence"),
            cuts,
        ),
        value: result.value,
        receipt: Receipt {
            vantage: receipt.vantage.clone(),
            at: receipt.at.clone(),
            sha256: receipt.sha256.clone(),
            tx: receipt.tx.clone(),
            detail: Shaper::new(&format!("{place}.receipt.detail"), cuts).shape(&receipt.detail),
        },
    };
    // The id first, then what the check is, then what it concluded.
    let mut printed = Map::new();
    printed.insert("id".into(), json!(result.id));
    printed.insert("title".into(), json!(check.title));
    printed.insert("dimension".into(), json!(check.dimension));
    printed.insert("kind".into(), json!(check.kind));
    if let Value::Object(fields) = serde_json::to_value(shown)? {
        printed.extend(fields.into_iter().filter(|(key, _)| key != "id"));
    }
    if let Some(a) = &check.party {
        let why = cut_string(&a.why, MAX_EVIDENCE_CHARS, &format!("{place}.party"), cuts);
        printed.insert("party".into(), json!({"party": a.party, "why": why}));
    }
    Ok(Value::Object(printed))
}

/// Copies a JSON value within the receipt bounds, noting every cut.
struct Shaper<'c> {
    place: String,
    /// Rough serialised bytes still allowed.
    left: usize,
    cuts: &'c mut Cuts,
}

impl<'c> Shaper<'c> {
    fn new(place: &str, cuts: &'c mut Cuts) -> Self {
        Shaper {
            place: place.to_string(),
            left: MAX_RECEIPT_BYTES,
            cuts,
        }
    }

    fn shape(&mut self, value: &Value) -> Value {
        let place = self.place.clone();
        self.shape_at(value, &place)
    }

    fn spend(&mut self, bytes: usize) {
        self.left = self.left.saturating_sub(bytes);
    }

    fn shape_at(&mut self, value: &Value, place: &str) -> Value {
        match value {
            Value::String(text) => {
                let max = MAX_RECEIPT_STRING_CHARS.min(self.left.max(16));
                let kept = cut_string(text, max, place, self.cuts);
                self.spend(kept.len() + 2);
                Value::String(kept)
            }
            Value::Array(items) => {
                let mut kept = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    if i >= MAX_RECEIPT_ITEMS || self.left == 0 {
                        self.cuts.note(format!(
                            "{place}: {} items, the first {i} kept",
                            items.len()
                        ));
                        break;
                    }
                    self.spend(2);
                    kept.push(self.shape_at(item, &format!("{place}[{i}]")));
                }
                Value::Array(kept)
            }
            Value::Object(map) => {
                let mut kept = Map::new();
                for (i, (key, item)) in map.iter().enumerate() {
                    if self.left == 0 {
                        self.cuts
                            .note(format!("{place}: {} fields, the first {i} kept", map.len()));
                        break;
                    }
                    let key = cut_string(key, 200, place, self.cuts);
                    self.spend(key.len() + 4);
                    let child = format!("{place}.{key}");
                    kept.insert(key, self.shape_at(item, &child));
                }
                Value::Object(kept)
            }
            scalar => {
                self.spend(8);
                scalar.clone()
            }
        }
    }
}

/// Pretty-printed bytes of `value` when nested `depth` levels deep in the report.
fn printed_size(value: &Value, depth: usize) -> Result<usize, serde_json::Error> {
    let text = serde_json::to_vec_pretty(value)?;
    let lines = text.iter().filter(|b| **b == b'\n').count();
    Ok(text.len() + lines * 2 * depth)
}

/// Replace the largest receipt details, then the score, by stubs until the report fits.
fn fit(doc: &mut Map<String, Value>, cuts: &mut Cuts) -> Result<(), serde_json::Error> {
    let limit = MAX_REPORT_BYTES - CUTS_ROOM;
    let mut size = serde_json::to_vec_pretty(doc)?.len();
    while size > limit {
        // (printed size, which): receipts first, largest first; the score only after them.
        let mut candidates: Vec<(usize, Option<usize>)> = Vec::new();
        if let Some(Value::Array(checks)) = doc.get("checks") {
            for (i, check) in checks.iter().enumerate() {
                let detail = &check["receipt"]["detail"];
                if !detail.is_null() && detail.get("cut").is_none() {
                    candidates.push((printed_size(detail, 4)?, Some(i)));
                }
            }
        }
        candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
        if let Some(score) = doc.get("score").filter(|s| s.get("cut").is_none()) {
            candidates.push((printed_size(score, 1)?, None));
        }
        let Some(&(bytes, which)) = candidates.first() else {
            break;
        };
        let place = match which {
            Some(i) => format!(
                "checks[{}].receipt.detail",
                doc["checks"][i]["id"].as_str().unwrap_or("?")
            ),
            None => "score".to_string(),
        };
        let slot = match which {
            Some(i) => match doc.get_mut("checks").and_then(|c| c.get_mut(i)) {
                Some(check) => &mut check["receipt"]["detail"],
                None => break,
            },
            None => match doc.get_mut("score") {
                Some(score) => score,
                None => break,
            },
        };
        let digest = sha256_hex(&serde_json::to_vec(&*slot)?);
        *slot = json!({
            "cut": format!("{bytes} bytes left out to keep the report within {MAX_REPORT_BYTES} bytes"),
            "sha256": digest,
        });
        cuts.note(format!("{place}: {bytes} bytes replaced by a stub"));
        // Measure again only when the estimate says it fits (the estimate errs by little).
        size = size.saturating_sub(bytes.saturating_sub(STUB_BYTES));
        if size <= limit {
            size = serde_json::to_vec_pretty(doc)?.len();
        }
    }
    Ok(())
}

/// One line summarising an agent-readiness assessment (as the report keeps it, JSON).
pub fn readiness_line(readiness: &Value) -> String {
    let number = |v: &Value| v.as_u64().map_or("?".to_string(), |n| n.to_string());
    let score = match readiness.get("score").filter(|s| !s.is_null()) {
        Some(s) => number(s),
        None => format!(
            "{}..{}",
            number(&readiness["range"]["low"]),
            number(&readiness["range"]["high"])
        ),
    };
    let mut line = format!(
        "{score}, band {}",
        readiness["band"].as_str().unwrap_or("?")
    );
    if let Some(p) = readiness["provisional_band"].as_str() {
        line.push_str(&format!(" (provisionally {p})"));
    }
    let dims: Vec<String> = readiness["dimensions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            format!(
                "{} {}",
                d["dimension"].as_str().unwrap_or("?"),
                d["points"]
                    .as_u64()
                    .map_or("unmeasured".to_string(), |p| format!(
                        "{p}/{}",
                        number(&d["weight"])
                    ))
            )
        })
        .collect();
    line.push_str(&format!("; {}", dims.join(", ")));
    for p in readiness["penalties"].as_array().into_iter().flatten() {
        line.push_str(&format!(
            "; {} {} ({})",
            p["severity"].as_str().unwrap_or("?"),
            p["kind"].as_str().unwrap_or("?"),
            p["check"].as_str().unwrap_or("?")
        ));
    }
    line
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
    use crate::evidence::CheckId;

    fn result(id: CheckId, evidence: String, detail: Value) -> CheckResult {
        CheckResult {
            id,
            outcome: Outcome::Fail,
            evidence,
            value: None,
            receipt: Receipt {
                vantage: "test".into(),
                at: "2026-11-29T00:00:00Z".into(),
                detail,
                ..Receipt::default()
            },
        }
    }

    fn report_of(results: Vec<CheckResult>, score: Option<Value>) -> ProbeReport {
        let rubric = Rubric::embedded_default();
        let mut report = ProbeReport::new("https://x.example/", "test", "t", &rubric, results);
        report.score = score;
        report
    }

    #[test]
    fn a_small_report_is_printed_whole() {
        let detail = json!({"deviations": [{"code": "a", "message": "b"}], "entries": 1});
        let report = report_of(
            vec![result(CheckId::C1, "fine".into(), detail.clone())],
            None,
        );
        let printed: Value = serde_json::to_value(&report).unwrap();
        assert!(printed.get("cuts").is_none());
        assert_eq!(printed["checks"][0]["receipt"]["detail"], detail);
        assert_eq!(printed["checks"][0]["id"], "C1");
        assert_eq!(printed["checks"][0]["evidence"], "fine");
        // It reads back as a report.
        let back: ProbeReport = serde_json::from_value(printed).unwrap();
        assert_eq!(back.checks[0].result, report.checks[0].result);
    }

    #[test]
    fn the_report_carries_the_runs_agent_readiness_beside_the_score() {
        // S1 failing (plain HTTP) is a severe tls finding; nothing else decides a step.
        let report = report_of(vec![result(CheckId::S1, "http".into(), Value::Null)], None);
        let printed: Value = serde_json::to_value(&report).unwrap();
        let readiness = &printed["readiness"];
        assert_eq!(readiness["format"], "x402-probe.agent-readiness/1");
        assert_eq!(readiness["penalties"][0]["kind"], "tls");
        assert_eq!(
            (&readiness["range"]["low"], &readiness["range"]["high"]),
            (&json!(0), &json!(60))
        );
        assert!(printed.get("score").is_none(), "never mixed into the score");
        let text = report.render_text(&|_| None, false);
        assert!(
            text.contains(
                "agent readiness (seed 000)\n  0..60, band unverified; access unmeasured, \
                 payment unmeasured, interface unmeasured, completion unmeasured, docs \
                 unmeasured; severe tls (S1)"
            ),
            "{text}"
        );
    }

    #[test]
    fn any_report_prints_within_a_mebibyte_and_says_what_was_cut() {
        // Every check with a huge evidence line and a receipt full of findings and long strings,
        // and a large score document.
        let rubric = Rubric::embedded_default();
        let findings: Vec<Value> = (0..20_000)
            .map(|i| json!({"rule": "inj.x", "start": i, "excerpt": "\u{200b}".repeat(40)}))
            .collect();
        let results: Vec<CheckResult> = rubric
            .checks
            .iter()
            .map(|c| {
                result(
                    c.id,
                    "evidence ".repeat(50_000),
                    json!({"findings": findings, "text": "x".repeat(500_000)}),
                )
            })
            .collect();
        let score = json!({"history": vec!["entry"; 200_000]});
        let report = report_of(results, Some(score));
        let pretty = serde_json::to_vec_pretty(&report).unwrap();
        assert!(pretty.len() <= MAX_REPORT_BYTES, "{} bytes", pretty.len());
        let printed: Value = serde_json::from_slice(&pretty).unwrap();
        let cuts = printed["cuts"].as_array().expect("cuts are listed");
        assert!(!cuts.is_empty() && cuts.len() <= MAX_REPORT_CUTS + 1);
        let check = &printed["checks"][0];
        assert!(check["evidence"].as_str().unwrap().chars().count() <= MAX_EVIDENCE_CHARS + 1);
        let detail = &check["receipt"]["detail"];
        let kept = detail["findings"].as_array().map_or(0, Vec::len);
        assert!(kept <= MAX_RECEIPT_ITEMS, "{kept} findings kept");
        assert_eq!(
            printed["checks"].as_array().unwrap().len(),
            rubric.checks.len()
        );
        assert_eq!(printed["summary"]["fail"], rubric.checks.len());
    }

    #[test]
    fn receipts_are_cut_before_the_score() {
        // Details of about 60 KiB each: together over the bound, each within its own.
        let results: Vec<CheckResult> = Rubric::embedded_default()
            .checks
            .iter()
            .map(|c| {
                let items: Vec<String> = (0..30).map(|_| "y".repeat(1_900)).collect();
                result(c.id, "e".into(), json!({ "items": items }))
            })
            .collect();
        let report = report_of(results, Some(json!({"score": 50.0})));
        let printed = report.bounded_json().unwrap();
        assert!(serde_json::to_vec_pretty(&printed).unwrap().len() <= MAX_REPORT_BYTES);
        assert_eq!(printed["score"]["score"], 50.0, "the score is kept");
        let stubs = printed["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["receipt"]["detail"].get("cut").is_some())
            .count();
        assert!(stubs > 0);
        let stub = printed["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["receipt"]["detail"].get("cut").is_some())
            .unwrap();
        assert_eq!(
            stub["receipt"]["detail"]["sha256"].as_str().unwrap().len(),
            64
        );
    }

    #[test]
    fn hostile_evidence_cannot_drive_the_terminal() {
        let s = one_line("ok\x1b[2J\u{202E}evil\nline", 100);
        assert!(!s.contains('\x1b') && !s.contains('\u{202E}') && !s.contains('\n'));
    }
}
