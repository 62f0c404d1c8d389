//! The pages as pure functions of their views: `fn(&View) -> String`. Every value that came from
//! an endpoint goes through `html::text` (bounded, hidden characters shown, escaped); values of
//! ours (numbers, enums, our times) through `html::escape` or `number`.

use std::fmt::Write as _;

use super::chart::{band_bar, history_chart};
use super::facts::{LastReceipt, Latest, PaidCall, PaidOutcome};
use super::html::{escape, number, text};
use super::view::{Direction, IndexQuery, IndexRow, IndexView, SortKey, SubjectView};
use crate::clock::rfc3339_ms;
use crate::evidence::Outcome;
use crate::score::document::{CheckDoc, ScoreDocument};
use crate::score::outlook::Trend;
use crate::score::tally::CheckState;
use crate::score::verdict::Status;

/// Where the stylesheet is served (by us, the only asset).
pub(crate) const STYLESHEET_PATH: &str = "/pages.css";

/// Bounds on hostile text, in characters.
const URL_CHARS: usize = 200;
const URL_CHARS_IN_TABLE: usize = 90;
const EVIDENCE_CHARS: usize = 400;
const DETAIL_CHARS: usize = 600;
const DESCRIPTION_CHARS: usize = 300;
const FIELD_CHARS: usize = 90;
const REASON_CHARS: usize = 300;

/// One of our times, to the minute: `2026-12-04 16:07Z`.
fn when(ms: i64) -> String {
    let full = rfc3339_ms(ms);
    match full.get(..16) {
        Some(minutes) => format!("{}Z", minutes.replacen('T', " ", 1)),
        None => escape(&full),
    }
}

/// An RFC 3339 time as written in a document or receipt, to the minute when it reads as one.
fn short_time(text_value: &str) -> String {
    match crate::clock::ms_of(text_value) {
        Some(ms) => when(ms),
        None => text(text_value, FIELD_CHARS),
    }
}

fn layout(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · x402-probe</title>\
         <link rel=\"icon\" href=\"data:,\"><link rel=\"stylesheet\" href=\"{STYLESHEET_PATH}\"></head><body>\
         <header class=\"top\"><a class=\"brand\" href=\"/\">x402-probe</a>\
         <span class=\"tagline\">which x402 endpoints a paying agent can trust, with evidence</span>\
         </header><main>{body}</main>\
         <footer>Scores are published with their inputs and can be recomputed byte for byte \
         (<code>x402-probe recompute</code>).</footer></body></html>\n"
    )
}

fn verdict_badge(doc: &ScoreDocument) -> String {
    let v = doc.verdict.verdict.as_str();
    let status = match doc.verdict.status {
        Status::Provisional => " <span class=\"muted\">provisional</span>",
        Status::Established => "",
    };
    format!("<span class=\"verdict verdict-{v}\">{v}</span>{status}")
}

fn grade_cell(doc: &ScoreDocument) -> String {
    match (&doc.grade, &doc.provisional_grade) {
        (Some(g), _) => format!("<span class=\"grade\">{}</span>", text(g, 300)),
        (None, Some(p)) => format!(
            "<span class=\"grade provisional\" title=\"provisional: not enough evidence yet\">{}?</span>",
            text(p, 300)
        ),
        (None, None) => "<span class=\"muted\">–</span>".to_string(),
    }
}

fn outlook_cell(doc: &ScoreDocument) -> String {
    let (arrow, name) = match doc.outlook.trend {
        Trend::Improving => ("↗", "improving"),
        Trend::Stable => ("→", "stable"),
        Trend::Declining => ("↘", "declining"),
        Trend::Unknown => ("·", "unknown"),
    };
    format!("<span class=\"trend trend-{name}\">{arrow} {name}</span>")
}

fn sort_link(query: &IndexQuery, key: SortKey, label: &str) -> String {
    let (direction, mark, aria) = if query.sort == key {
        let d = query.direction.flip();
        let mark = match query.direction {
            Direction::Asc => " ▲",
            Direction::Desc => " ▼",
        };
        let aria = match query.direction {
            Direction::Asc => " aria-sort=\"ascending\"",
            Direction::Desc => " aria-sort=\"descending\"",
        };
        (d, mark, aria)
    } else {
        (key.natural(), "", "")
    };
    format!(
        "<th scope=\"col\"{aria}><a href=\"/?sort={}&amp;dir={}\">{label}{mark}</a></th>",
        key.as_str(),
        direction.as_str()
    )
}

fn index_row(out: &mut String, row: &IndexRow) {
    let link = format!(
        "<a href=\"/subjects/{}\">{}</a>",
        escape(&row.id),
        text(&row.url, URL_CHARS_IN_TABLE)
    );
    let _ = write!(
        out,
        "<tr><th scope=\"row\" class=\"subject\">{link}<div class=\"muted small\">{} · {}</div></th>",
        text(&row.category, FIELD_CHARS),
        row.state.as_str()
    );
    match &row.latest {
        Latest::Doc(doc) => {
            let capped = if doc.capped_score < doc.score {
                format!(
                    " <span class=\"muted small\" title=\"capped from {0}\">capped</span>",
                    number(doc.score.as_f64(), 2)
                )
            } else {
                String::new()
            };
            let _ = write!(
                out,
                "<td class=\"num\" data-label=\"Score\"><strong>{}</strong>{capped}</td>\
                 <td class=\"band\" data-label=\"Band\">{}<div class=\"muted small\">{}–{} · {}</div></td>\
                 <td data-label=\"Grade\">{}</td><td data-label=\"Verdict\">{}</td>\
                 <td data-label=\"Outlook\">{}</td><td class=\"small\" data-label=\"As of\">{}</td></tr>",
                number(doc.capped_score.as_f64(), 2),
                band_bar(doc.capped_score.as_f64(), doc.band.low, doc.band.high),
                number(doc.band.low, 1),
                number(doc.band.high, 1),
                text(&doc.confidence, FIELD_CHARS),
                grade_cell(doc),
                verdict_badge(doc),
                outlook_cell(doc),
                short_time(&doc.as_of),
            );
        }
        Latest::None => out.push_str(
            "<td colspan=\"6\" class=\"muted\">not scored yet: no run recorded</td></tr>",
        ),
        Latest::Unreadable(why) => {
            let _ = write!(
                out,
                "<td colspan=\"6\" class=\"muted\">the stored score could not be read: {}</td></tr>",
                text(why, REASON_CHARS)
            );
        }
    }
}

/// The index: every subject in a table sorted by links (no script).
pub(crate) fn index(view: &IndexView) -> String {
    let q = &view.query;
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>Subjects</h1><p class=\"lead\">{} subject{} watched. The score is out of 100; the \
         bar shows the band the score lies in with the rubric's confidence, the tick the \
         score itself. Click a column to sort.</p>",
        view.total,
        if view.total == 1 { "" } else { "s" }
    );
    body.push_str("<nav class=\"sort-nav\">Sort by ");
    for key in SortKey::ALL {
        let _ = write!(
            body,
            "<a href=\"/?sort={}&amp;dir={}\">{}</a> ",
            key.as_str(),
            if q.sort == key {
                q.direction.flip()
            } else {
                key.natural()
            }
            .as_str(),
            key.as_str()
        );
    }
    body.push_str("</nav>");
    body.push_str("<div class=\"scroll\"><table class=\"subjects cards\"><thead><tr>");
    body.push_str(&sort_link(q, SortKey::Subject, "Subject"));
    body.push_str(&sort_link(q, SortKey::Score, "Score"));
    body.push_str(&sort_link(q, SortKey::Band, "Band"));
    body.push_str(&sort_link(q, SortKey::Grade, "Grade"));
    body.push_str(&sort_link(q, SortKey::Verdict, "Verdict"));
    body.push_str(&sort_link(q, SortKey::Outlook, "Outlook"));
    body.push_str("<th scope=\"col\">As of</th></tr></thead><tbody>");
    if view.rows.is_empty() {
        body.push_str("<tr><td colspan=\"7\" class=\"muted\">No subjects on this page.</td></tr>");
    }
    for row in &view.rows {
        index_row(&mut body, row);
    }
    body.push_str("</tbody></table></div>");
    if view.pages > 1 {
        body.push_str("<nav class=\"pager\">");
        for p in 1..=view.pages {
            if p == q.page {
                let _ = write!(body, "<span class=\"current\">{p}</span> ");
            } else {
                let _ = write!(
                    body,
                    "<a href=\"/?sort={}&amp;dir={}&amp;page={p}\">{p}</a> ",
                    q.sort.as_str(),
                    q.direction.as_str()
                );
            }
        }
        body.push_str("</nav>");
    }
    layout("Subjects", &body)
}

fn summary(out: &mut String, doc: &ScoreDocument) {
    let v = &doc.verdict.verification;
    let _ = write!(
        out,
        "<section class=\"summary\"><div class=\"score-block\">\
         <div class=\"score\">{}</div><div class=\"muted small\">of 100{}</div></div>\
         <div class=\"band-block\">{}<div>band {}–{} <span class=\"muted\">({} confidence)</span></div></div>\
         <dl class=\"facts\"><dt>Grade</dt><dd>{}</dd><dt>Verdict</dt><dd>{}</dd>\
         <dt>Outlook</dt><dd>{} <span class=\"muted small\">{} over the last {} days against {}</span></dd>\
         <dt>Evidence</dt><dd>{} probes over {} days <span class=\"muted small\">({} over {} days verify)</span>; {}</dd>{}\
         <dt>As of</dt><dd>{} <span class=\"muted small\">rubric {} {}</span></dd></dl></section>",
        number(doc.capped_score.as_f64(), 2),
        if doc.cap.binding {
            format!(
                " (capped at {} from {})",
                number(doc.cap.cap.unwrap_or(doc.capped_score.as_f64()), 2),
                number(doc.score.as_f64(), 2)
            )
        } else {
            String::new()
        },
        band_bar(doc.capped_score.as_f64(), doc.band.low, doc.band.high),
        number(doc.band.low, 2),
        number(doc.band.high, 2),
        text(&doc.confidence, FIELD_CHARS),
        grade_cell(doc),
        verdict_badge(doc),
        outlook_cell(doc),
        doc.outlook
            .delta
            .map_or("no comparison".to_string(), |d| format!(
                "{:+.2}",
                d.as_f64()
            )),
        number(doc.outlook.recent_days, 1),
        number(doc.outlook.baseline_days, 1),
        v.probes,
        number(v.probe_span_days, 1),
        v.probes_needed,
        number(v.probe_span_days_needed, 1),
        v.last_paid_call_days_ago
            .map_or("no paid call yet".to_string(), |d| format!(
                "last paid call {} days ago",
                number(d, 1)
            )),
        doc.predicted.as_ref().map_or(String::new(), |p| format!(
            "<dt>Predicted</dt><dd>{}% chance that a paid call fails within {} days \
             <span class=\"muted small\">(the rubric's calibration at this score)</span></dd>",
            number(p.failure_rate * 100.0, 1),
            p.horizon_days
        )),
        short_time(&doc.as_of),
        text(&doc.rubric.id, FIELD_CHARS),
        text(&doc.rubric.version, FIELD_CHARS),
    );
    let reasons: Vec<_> = doc
        .verdict
        .reasons
        .iter()
        .chain(doc.watch.reasons.iter())
        .collect();
    if !reasons.is_empty() {
        out.push_str("<ul class=\"reasons\">");
        for r in reasons {
            let _ = write!(
                out,
                "<li><code>{}</code> {}</li>",
                text(&r.code, FIELD_CHARS),
                text(&r.detail, REASON_CHARS)
            );
        }
        out.push_str("</ul>");
    }
    if doc.stale {
        out.push_str("<p class=\"warn\">Stale: a binding gate says the evidence is too old.</p>");
    }
}

fn gates(out: &mut String, doc: &ScoreDocument) {
    out.push_str("<section id=\"gates\"><h2>Binding gates</h2>");
    let binding: Vec<_> = doc.gates.iter().filter(|g| g.binding).collect();
    if binding.is_empty() {
        out.push_str("<p class=\"muted\">No gate binds: nothing caps the score or forces the verdict.</p></section>");
        return;
    }
    out.push_str(
        "<div class=\"scroll\"><table class=\"cards\"><thead><tr><th scope=\"col\">Gate</th><th scope=\"col\">Check</th>\
         <th scope=\"col\">Cap</th><th scope=\"col\">Verdict</th><th scope=\"col\">Why</th></tr></thead><tbody>",
    );
    for g in binding {
        let _ = write!(
            out,
            "<tr><td data-label=\"Gate\"><code>{}</code></td><td data-label=\"Check\">{}</td>\
             <td class=\"num\" data-label=\"Cap\">{}</td><td data-label=\"Verdict\">{}</td>\
             <td data-label=\"Why\">{}</td></tr>",
            text(&g.flag, FIELD_CHARS),
            text(g.check.as_str(), FIELD_CHARS),
            g.cap.map_or("–".to_string(), |c| number(c, 2)),
            g.verdict.map_or("–".to_string(), |v| format!(
                "<span class=\"verdict verdict-{0}\">{0}</span>",
                v.as_str()
            )),
            text(&g.reason, REASON_CHARS),
        );
    }
    out.push_str("</tbody></table></div></section>");
}

fn outcome_class(o: Outcome) -> &'static str {
    match o {
        Outcome::Pass => "pass",
        Outcome::Fail => "fail",
        Outcome::Na => "na",
        Outcome::Unmeasured => "unmeasured",
    }
}

fn receipt_cell(receipt: Option<&LastReceipt>) -> String {
    let Some(r) = receipt else {
        return "<span class=\"muted\">none recorded</span>".to_string();
    };
    let mut s = format!(
        "<span class=\"outcome outcome-{c}\">{c}</span> <span class=\"muted small\">{}</span>\
         <div class=\"evidence\">{}</div>",
        short_time(&r.at),
        text(&r.evidence, EVIDENCE_CHARS),
        c = outcome_class(r.outcome),
    );
    if r.tx.is_some() || !r.hashes.is_empty() || r.detail.is_some() {
        s.push_str("<details><summary>receipt</summary><dl class=\"receipt\">");
        if let Some(tx) = &r.tx {
            let _ = write!(
                s,
                "<dt>tx</dt><dd><code>{}</code></dd>",
                text(tx, FIELD_CHARS)
            );
        }
        for (label, sha) in r.hashes.iter().take(8) {
            let _ = write!(
                s,
                "<dt>{}</dt><dd><code>{}</code></dd>",
                text(label, FIELD_CHARS),
                text(sha, FIELD_CHARS)
            );
        }
        if let Some(detail) = &r.detail {
            let _ = write!(
                s,
                "<dt>detail</dt><dd><code>{}</code></dd>",
                text(detail, DETAIL_CHARS)
            );
        }
        s.push_str("</dl></details>");
    }
    s
}

fn check_row(out: &mut String, c: &CheckDoc, receipt: Option<&LastReceipt>) {
    let state = match c.state {
        CheckState::Scored => "scored",
        CheckState::Prior => "prior (no evidence)",
        CheckState::Na => "does not apply",
    };
    let _ = write!(
        out,
        "<tr><th scope=\"row\"><code>{}</code> {}<div class=\"muted small\">{} · {}</div></th>\
         <td class=\"num counts\" data-label=\"Outcomes\"><span class=\"outcome-pass\">{}</span>/<span class=\"outcome-fail\">{}</span>/{}/{}</td>\
         <td class=\"num\" data-label=\"Evidence weight\">{}</td><td class=\"num\" data-label=\"Value\">{}</td>\
         <td class=\"num\" data-label=\"Points\">{} <span class=\"muted small\">of {}</span></td>\
         <td class=\"receipt-cell\" data-label=\"Last receipt\">{}</td></tr>",
        text(c.id.as_str(), FIELD_CHARS),
        text(&c.title, FIELD_CHARS),
        match c.kind {
            crate::rubric::Kind::Free => "free",
            crate::rubric::Kind::Paid => "paid",
        },
        state,
        c.passes,
        c.fails,
        c.nas,
        c.unmeasured,
        c.evidence_weight.map_or("–".to_string(), |w| number(w, 2)),
        match (c.value, c.p95_ms) {
            (Some(v), Some(p)) => format!(
                "{} <span class=\"muted small\">p95 {} ms</span>",
                number(v, 1),
                number(p, 0)
            ),
            (Some(v), None) => number(v, 1),
            (None, _) => "–".to_string(),
        },
        number(c.contribution.as_f64(), 2),
        number(c.points, 2),
        receipt_cell(receipt),
    );
}

fn checks(out: &mut String, doc: &ScoreDocument, view: &SubjectView) {
    out.push_str(
        "<section id=\"checks\"><h2>Checks</h2><p class=\"muted small\">Outcomes counted: \
         pass/fail/na/unmeasured. Evidence weight is the decayed weight of the passes and fails \
         the score uses. Unmeasured outcomes (ours, never the subject's) count for nothing.</p>",
    );
    for dim in &doc.dimensions {
        let _ = write!(
            out,
            "<h3>{} <span class=\"muted small\">{} of {} points{}</span></h3>",
            text(&dim.id, FIELD_CHARS),
            number(dim.contribution.as_f64(), 2),
            number(dim.points, 2),
            if dim.scored { "" } else { " · not scored" }
        );
        out.push_str(
            "<div class=\"scroll\"><table class=\"checks cards\"><thead><tr><th scope=\"col\">Check</th>\
             <th scope=\"col\">Outcomes</th><th scope=\"col\">Evidence weight</th>\
             <th scope=\"col\">Value</th><th scope=\"col\">Points</th><th scope=\"col\">Last receipt</th>\
             </tr></thead><tbody>",
        );
        for c in &dim.checks {
            check_row(out, c, view.facts.receipts.get(&c.id));
        }
        out.push_str("</tbody></table></div>");
    }
    out.push_str("</section>");
}

fn history(out: &mut String, view: &SubjectView) {
    out.push_str("<section id=\"history\"><h2>History</h2>");
    match history_chart(&view.facts.history, &view.outages, &view.facts.revisions) {
        Some(svg) => {
            out.push_str("<figure class=\"chart-box\">");
            out.push_str(&svg);
            out.push_str(
                "<figcaption><span class=\"key key-line\"></span> score \
                 <span class=\"key key-area\"></span> band \
                 <span class=\"key key-outage\"></span> our outage \
                 <span class=\"key key-rev\"></span> revision</figcaption></figure>",
            );
        }
        None => out.push_str("<p class=\"muted\">No daily score yet.</p>"),
    }
    if !view.facts.revisions.is_empty() {
        out.push_str("<h3>Revisions</h3><ul>");
        for r in &view.facts.revisions {
            let _ = write!(
                out,
                "<li><code>{}</code> at {}: changed {}</li>",
                text(&r.id, FIELD_CHARS),
                when(r.at_ms),
                text(&r.changed.join(", "), REASON_CHARS)
            );
        }
        out.push_str("</ul>");
    }
    if !view.outages.is_empty() {
        out.push_str(
            "<h3>Our outages</h3><p class=\"muted small\">Free outcomes inside these windows \
             count as unmeasured: they are ours, not the subject's.</p><ul>",
        );
        for w in &view.outages {
            // An RPC window excuses only the checks that read the chain through our RPC.
            let what = match w.of {
                crate::ledger::record::OutageOf::Vantage => "",
                crate::ledger::record::OutageOf::Rpc => " (our RPC: only the chain reads, C3)",
            };
            let _ = write!(
                out,
                "<li>{} to {}{what}</li>",
                when(w.from_ms),
                w.to_ms.map_or("now (open)".to_string(), when)
            );
        }
        out.push_str("</ul>");
    }
    out.push_str("</section>");
}

fn paid_row(out: &mut String, p: &PaidCall) {
    let outcome = match &p.outcome {
        PaidOutcome::Sent { cost_usd } => format!("paid {} USD", text(cost_usd, 300)),
        PaidOutcome::Refused { rules } => format!("declined: {}", text(&rules.join(", "), 300)),
        PaidOutcome::Failed { stage } => format!("our side failed: {}", text(stage, FIELD_CHARS)),
    };
    let settlement = match (&p.settlement_tx, p.settlement_success) {
        (Some(tx), ok) => format!(
            "<code>{}</code>{}",
            text(tx, FIELD_CHARS),
            match ok {
                Some(true) => " <span class=\"muted small\">success</span>",
                Some(false) => " <span class=\"muted small\">says failed</span>",
                None => "",
            }
        ),
        (None, _) => "<span class=\"muted\">none named</span>".to_string(),
    };
    let chain = match (&p.chain_tx, p.chain_ok, p.chain_block) {
        (Some(tx), ok, block) => format!(
            "<code>{}</code> <span class=\"muted small\">{}{}</span>",
            escape(tx),
            block.map_or(String::new(), |b| format!("block {b}, ")),
            match ok {
                Some(true) => "succeeded",
                Some(false) => "reverted",
                None => "status unknown",
            }
        ),
        (None, ..) => {
            "<span class=\"muted\">no transaction used our authorization</span>".to_string()
        }
    };
    let _ = write!(
        out,
        "<tr><td class=\"small\" data-label=\"When\">{}</td><td data-label=\"Revision\"><code>{}</code></td>\
         <td data-label=\"Outcome\">{}</td><td class=\"tx\" data-label=\"Settlement\">{}</td>\
         <td class=\"tx\" data-label=\"On chain\">{}</td></tr>",
        when(p.at_ms),
        text(&p.revision, FIELD_CHARS),
        outcome,
        settlement,
        chain,
    );
}

fn paid_calls(out: &mut String, view: &SubjectView) {
    out.push_str("<section id=\"paid\"><h2>Paid calls</h2>");
    if view.facts.paid_calls.is_empty() {
        out.push_str("<p class=\"muted\">No paid call yet.</p></section>");
        return;
    }
    out.push_str(
        "<p class=\"muted small\">The settlement transaction is what the endpoint named; the \
         chain column is what our RPC shows used our signed authorization.</p>\
         <div class=\"scroll\"><table class=\"paid cards\"><thead><tr><th scope=\"col\">When</th>\
         <th scope=\"col\">Revision</th><th scope=\"col\">Outcome</th>\
         <th scope=\"col\">Settlement (endpoint's word)</th><th scope=\"col\">On chain</th>\
         </tr></thead><tbody>",
    );
    for p in &view.facts.paid_calls {
        paid_row(out, p);
    }
    out.push_str("</tbody></table></div>");
    if view.facts.paid_calls_omitted > 0 {
        let _ = write!(
            out,
            "<p class=\"muted small\">{} earlier paid calls not listed.</p>",
            view.facts.paid_calls_omitted
        );
    }
    out.push_str("</section>");
}

/// The findings peers publish (`probes/findings/`) and whose each check's last gap or failed
/// paid checks are (`probes/attribution.md`): facts beside the score, never in it.
fn findings(out: &mut String, view: &SubjectView) {
    let facts = &view.facts;
    if facts.findings.is_empty() && facts.parties.is_empty() {
        return;
    }
    out.push_str(
        "<section id=\"findings\"><h2>Findings</h2><p class=\"muted small\">Facts other x402 \
         tools publish, each from its last measurement; never part of the score.</p><ul>",
    );
    for f in facts.findings.values() {
        let _ = write!(
            out,
            "<li><code>{}</code> <strong>{}</strong> {}</li>",
            escape(f.id.as_str()),
            escape(f.outcome.as_str()),
            text(&f.evidence, REASON_CHARS)
        );
    }
    out.push_str("</ul>");
    if !facts.parties.is_empty() {
        let counts: Vec<String> = facts
            .party_counts
            .iter()
            .map(|(p, c)| format!("{} {} failed, {} unmeasured", p, c.failed, c.unmeasured))
            .collect();
        let _ = write!(
            out,
            "<h3>Whose, by each check's last result</h3><p class=\"muted small\">{}</p><ul>",
            escape(&counts.join("; "))
        );
        for (id, a) in &facts.parties {
            let _ = write!(
                out,
                "<li><code>{}</code> {}: {}</li>",
                escape(id.as_str()),
                escape(a.party.as_str()),
                text(&a.why, REASON_CHARS)
            );
        }
        out.push_str("</ul>");
    }
    out.push_str("</section>");
}

/// Agent readiness (seed 000), beside the score and never mixed into it: each dimension's
/// points or `unmeasured` with why, the safety findings, the range and the band.
fn readiness(out: &mut String, view: &SubjectView) {
    let a = view.facts.readiness();
    let score = match a.score {
        Some(s) => s.to_string(),
        None => format!("{}–{}", a.range.low, a.range.high),
    };
    let _ = write!(
        out,
        "<section id=\"readiness\"><h2>Agent readiness</h2><p>{} <span class=\"muted small\">of 100</span>, \
         band <strong>{}</strong>{} <span class=\"muted small\">(rubric <code>{}</code> {}, from the last \
         result of each check; a range where the evidence cannot decide a step)</span></p>",
        escape(&score),
        escape(a.band.as_str()),
        a.provisional_band.map_or(String::new(), |b| format!(
            ", provisionally {}",
            escape(crate::readiness::AssessedBand::Band(b).as_str())
        )),
        escape(a.rubric.id),
        escape(&a.rubric.version),
    );
    out.push_str(
        "<div class=\"scroll\"><table class=\"cards\"><thead><tr><th scope=\"col\">Dimension</th>\
         <th scope=\"col\">Points</th><th scope=\"col\">Why</th></tr></thead><tbody>",
    );
    for d in &a.dimensions {
        let _ = write!(
            out,
            "<tr><td data-label=\"Dimension\">{}</td><td class=\"num\" data-label=\"Points\">{}</td>\
             <td data-label=\"Why\">{}</td></tr>",
            escape(d.dimension.as_str()),
            d.points
                .map_or("unmeasured".to_string(), |p| format!("{p} / {}", d.weight)),
            escape(&d.because),
        );
    }
    out.push_str("</tbody></table></div>");
    for p in &a.penalties {
        let _ = write!(
            out,
            "<p class=\"warn\">{} {} finding from {}: {}</p>",
            escape(p.severity.as_str()),
            escape(p.finding.kind.as_str()),
            escape(p.finding.check.as_str()),
            text(&p.finding.what, REASON_CHARS),
        );
    }
    out.push_str("</section>");
}

fn declared(out: &mut String, view: &SubjectView) {
    let Some(d) = &view.facts.declared else {
        return;
    };
    let field = |v: &Option<String>| {
        v.as_deref()
            .map_or("<span class=\"muted\">–</span>".to_string(), |s| {
                format!("<code>{}</code>", text(s, FIELD_CHARS))
            })
    };
    let _ = write!(
        out,
        "<section id=\"declared\"><h2>What it declares</h2><dl class=\"facts\">\
         <dt>Amount</dt><dd>{} <span class=\"muted small\">atomic units</span></dd>\
         <dt>Asset</dt><dd>{}</dd><dt>Network</dt><dd>{}</dd><dt>payTo</dt><dd>{}</dd>{}</dl></section>",
        field(&d.amount),
        field(&d.asset),
        field(&d.network),
        field(&d.pay_to),
        view.facts
            .description
            .as_deref()
            .map_or(String::new(), |s| format!(
                "<dt>Description</dt><dd>{}</dd>",
                text(s, DESCRIPTION_CHARS)
            )),
    );
}

/// One subject's page.
pub(crate) fn subject(view: &SubjectView) -> String {
    let mut body = String::new();
    let _ = write!(
        body,
        "<nav class=\"crumbs\"><a href=\"/\">Subjects</a> /</nav>\
         <h1 class=\"url\">{}</h1><p class=\"muted small\">{} · {} · id <code>{}</code>{}</p>",
        text(&view.url, URL_CHARS),
        text(&view.category, FIELD_CHARS),
        view.state.as_str(),
        escape(&view.id),
        view.revision.as_deref().map_or(String::new(), |r| format!(
            " · revision <code>{}</code>",
            text(r, FIELD_CHARS)
        )),
    );
    match &view.latest {
        Latest::Doc(doc) => {
            summary(&mut body, doc);
            gates(&mut body, doc);
            history(&mut body, view);
            checks(&mut body, doc, view);
        }
        Latest::None => {
            body.push_str("<p class=\"lead\">Not scored yet: no run has been recorded.</p>");
            history(&mut body, view);
        }
        Latest::Unreadable(why) => {
            let _ = write!(
                body,
                "<p class=\"warn\">The stored score could not be read: {}</p>",
                text(why, REASON_CHARS)
            );
            history(&mut body, view);
        }
    }
    readiness(&mut body, view);
    findings(&mut body, view);
    declared(&mut body, view);
    paid_calls(&mut body, view);
    layout(&bounded_title(&view.url), &body)
}

fn bounded_title(url: &str) -> String {
    text(url, 60)
}

/// The page for a subject id that names nothing.
pub(crate) fn not_found(id: &str) -> String {
    let body = format!(
        "<h1>No such subject</h1><p>No subject has the id <code>{}</code>. \
         <a href=\"/\">All subjects</a>.</p>",
        text(id, 80)
    );
    layout("Not found", &body)
}

/// The page for a request the pages cannot answer as asked (a bad query string).
pub(crate) fn bad_request(why: &str) -> String {
    let body = format!(
        "<h1>Bad request</h1><p>{}</p><p><a href=\"/\">All subjects</a>.</p>",
        escape(why)
    );
    layout("Bad request", &body)
}

/// The page for a client over the rate limit.
pub(crate) fn rate_limited(retry_after_secs: u64) -> String {
    let body = format!(
        "<h1>Too many requests</h1><p>This address asked for pages faster than this server \
         answers one client. Try again in {retry_after_secs} s.</p>"
    );
    layout("Too many requests", &body)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::pages::facts::{DayPoint, RevisionMark, SubjectFacts};
    use crate::api::pages::order::sort_rows;
    use crate::checks::history::{Declared, OutageWindow};
    use crate::rubric::Verdict;
    use crate::store::SubjectState;

    const GOLDEN: [&str; 7] = [
        include_str!("../../../tests/data/golden/01-healthy-established.json"),
        include_str!("../../../tests/data/golden/02-overcharge-avoid.json"),
        include_str!("../../../tests/data/golden/03-down-stale.json"),
        include_str!("../../../tests/data/golden/04-unverified-new.json"),
        include_str!("../../../tests/data/golden/05-revisions-na-watch.json"),
        include_str!("../../../tests/data/golden/06-slow-payto-changed.json"),
        include_str!("../../../tests/data/golden/07-injection-flaky.json"),
    ];

    const HOSTILE: &str = "\"><script>alert(1)</script><img src=x onerror=alert(2)>\u{202e}";

    fn doc(i: usize) -> std::sync::Arc<ScoreDocument> {
        std::sync::Arc::new(
            ScoreDocument::from_slice(GOLDEN[i].as_bytes())
                .expect("a published score document reads"),
        )
    }

    /// Every element opened is closed, in order (void elements aside): the page is well formed
    /// enough that no hostile value could have opened or closed one.
    fn assert_balanced(html: &str) {
        let tag = regex::Regex::new(r"<(/?)([a-zA-Z][a-zA-Z0-9]*)[^>]*?(/?)>").unwrap();
        let void = ["meta", "link", "br", "img", "hr", "input"];
        let mut stack: Vec<String> = Vec::new();
        for c in tag.captures_iter(html) {
            let name = c[2].to_ascii_lowercase();
            if c[1].is_empty() {
                if !void.contains(&name.as_str()) && c[3].is_empty() {
                    stack.push(name);
                }
            } else {
                assert_eq!(
                    stack.pop().as_deref(),
                    Some(name.as_str()),
                    "closing {name}"
                );
            }
        }
        assert!(stack.is_empty(), "left open: {stack:?}");
    }

    fn hostile_view(latest: Latest) -> SubjectView {
        let receipt = LastReceipt {
            outcome: Outcome::Fail,
            at: "2026-11-01T00:00:00Z".into(),
            evidence: format!("the description says {HOSTILE}"),
            tx: Some(HOSTILE.into()),
            hashes: vec![(HOSTILE.into(), "ab".repeat(32))],
            detail: Some(format!("{{\"rule\":\"{HOSTILE}\"}}")),
        };
        let mut receipts = BTreeMap::new();
        for id in ["R1", "R4", "S2"] {
            receipts.insert(
                id.parse::<crate::evidence::CheckId>().unwrap(),
                receipt.clone(),
            );
        }
        let facts = SubjectFacts {
            declared: Some(Declared {
                at_ms: 0,
                fingerprint: "f".into(),
                network: Some(HOSTILE.into()),
                asset: Some(HOSTILE.into()),
                amount: Some("10000".into()),
                pay_to: Some(HOSTILE.into()),
                offer_signer: None,
            }),
            description: Some("x".repeat(5_000) + HOSTILE),
            receipts,
            findings_ctx: Default::default(),
            // A finding's evidence and a party's reason are the endpoint's text too.
            findings: [(
                crate::checks::findings::FindingId::Described,
                crate::checks::findings::Finding {
                    id: crate::checks::findings::FindingId::Described,
                    outcome: Outcome::Fail,
                    evidence: HOSTILE.into(),
                    receipt: Default::default(),
                },
            )]
            .into(),
            parties: [(
                crate::evidence::CheckId::R4,
                crate::checks::attribution::Attribution {
                    party: crate::checks::attribution::Party::Seller,
                    why: HOSTILE.into(),
                },
            )]
            .into(),
            party_counts: Default::default(),
            // A screen's finding names its rule in the readiness section: hostile too.
            results: [(
                crate::evidence::CheckId::S2,
                crate::evidence::CheckResult {
                    id: crate::evidence::CheckId::S2,
                    outcome: Outcome::Fail,
                    evidence: HOSTILE.into(),
                    value: None,
                    receipt: crate::evidence::Receipt {
                        detail: serde_json::json!({"findings_by_rule": {
                            HOSTILE: {"category": "injection", "count": 1}
                        }}),
                        ..Default::default()
                    },
                },
            )]
            .into(),
            history: (0..4)
                .map(|d| DayPoint {
                    day: format!("2026-11-0{}", d + 1),
                    as_of_ms: 1_793_491_200_000 + d * 86_400_000,
                    capped_score: 60.0 + d as f64,
                    low: 50.0,
                    high: 70.0,
                    verdict: Verdict::Caution,
                })
                .collect(),
            revisions: vec![RevisionMark {
                id: "r1".into(),
                at_ms: 1_793_491_200_000 + 2 * 86_400_000,
                changed: vec![HOSTILE.into()],
            }],
            paid_calls: [PaidCall {
                at_ms: 1_793_491_200_000,
                revision: "r1".into(),
                outcome: PaidOutcome::Sent {
                    cost_usd: "0.01".into(),
                },
                settlement_tx: Some(HOSTILE.into()),
                settlement_success: Some(true),
                chain_tx: Some(format!("0x{}", "cd".repeat(32))),
                chain_ok: Some(true),
                chain_block: Some(7),
            }]
            .into(),
            paid_calls_omitted: 3,
            through_seq: 0,
        };
        SubjectView {
            id: "0123456789abcdef".repeat(2),
            url: format!("https://x.test/{HOSTILE}"),
            category: HOSTILE.into(),
            state: SubjectState::Active,
            revision: Some("r1".into()),
            latest,
            facts: std::sync::Arc::new(facts),
            outages: vec![OutageWindow {
                from_ms: 1_793_491_200_000 + 86_400_000,
                to_ms: None,
                of: crate::ledger::record::OutageOf::Vantage,
            }],
        }
    }

    #[test]
    fn every_published_document_reads_and_renders() {
        for i in 0..GOLDEN.len() {
            let html = subject(&hostile_view(Latest::Doc(doc(i))));
            assert_balanced(&html);
            assert!(html.contains("<svg class=\"chart\""));
            assert!(html.contains("Binding gates"));
        }
    }

    #[test]
    fn hostile_values_never_reach_the_page_as_markup() {
        let html = subject(&hostile_view(Latest::Doc(doc(1))));
        assert_balanced(&html);
        assert!(!html.contains("<script"), "a script element");
        assert!(!html.contains("<img"), "an img element");
        assert!(
            html.contains("&quot;&gt;&lt;script&gt;"),
            "quotes stay text"
        );
        assert!(!html.contains('\u{202e}'), "a bidi override");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("\\u{202e}"));
        // The 5,000-character description is cut to its bound.
        assert!(!html.contains(&"x".repeat(DESCRIPTION_CHARS + 1)));
        assert!(html.contains(&format!("{}…", "x".repeat(DESCRIPTION_CHARS))));
        // Everything the page promises is there.
        for part in [
            "class=\"outage\"",
            "class=\"rev\"",
            "class=\"area\"",
            "class=\"line\"",
            "Paid calls",
            "3 earlier paid calls not listed",
            "block 7, succeeded",
            "avoid",
        ] {
            assert!(html.contains(part), "{part}");
        }
        let missing = not_found(HOSTILE);
        assert_balanced(&missing);
        assert!(!missing.contains("<script"));
    }

    #[test]
    fn a_subject_without_a_readable_score_says_so() {
        let html = subject(&hostile_view(Latest::None));
        assert_balanced(&html);
        assert!(html.contains("Not scored yet"));
        let html = subject(&hostile_view(Latest::Unreadable(HOSTILE.into())));
        assert_balanced(&html);
        assert!(html.contains("could not be read") && !html.contains("<script"));
    }

    #[test]
    fn an_rpc_window_says_it_excuses_only_the_chain_reads() {
        let mut view = hostile_view(Latest::Doc(doc(0)));
        let vantage = subject(&view);
        assert!(vantage.contains("<h3>Our outages</h3>"));
        assert!(!vantage.contains("(our RPC: only"));
        view.outages[0].of = crate::ledger::record::OutageOf::Rpc;
        let rpc = subject(&view);
        assert_balanced(&rpc);
        assert!(
            rpc.contains("(our RPC: only the chain reads, C3)</li>"),
            "{rpc}"
        );
    }

    fn row(url: &str, latest: Latest) -> IndexRow {
        IndexRow {
            id: crate::api::signed::subject_id(url),
            url: url.into(),
            category: "weather".into(),
            state: SubjectState::Active,
            latest,
        }
    }

    #[test]
    fn the_index_sorts_by_every_column_and_links_the_other_way() {
        let mut rows = vec![
            row("https://c.test/", Latest::Doc(doc(0))),
            row("https://a.test/", Latest::Doc(doc(1))),
            row("https://n.test/", Latest::None),
            row("https://b.test/", Latest::Doc(doc(3))),
        ];
        let score = |r: &IndexRow| r.latest.doc().map(|d| d.capped_score.as_f64());
        sort_rows(&mut rows, SortKey::Score, Direction::Desc);
        let scores: Vec<_> = rows.iter().map(score).collect();
        let mut sorted = scores.clone();
        sorted.sort_by(|a, b| match (a, b) {
            (Some(x), Some(y)) => y.total_cmp(x),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        });
        assert_eq!(scores, sorted);
        assert_eq!(rows.last().unwrap().url, "https://n.test/", "unscored last");
        sort_rows(&mut rows, SortKey::Verdict, Direction::Asc);
        let verdicts: Vec<_> = rows
            .iter()
            .filter_map(|r| r.latest.doc().map(|d| d.verdict.verdict))
            .collect();
        assert!(verdicts.windows(2).all(|w| w[0] <= w[1]), "{verdicts:?}");
        sort_rows(&mut rows, SortKey::Subject, Direction::Asc);
        let urls: Vec<_> = rows.iter().map(|r| r.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "https://a.test/",
                "https://b.test/",
                "https://c.test/",
                "https://n.test/"
            ]
        );

        let view = IndexView {
            query: IndexQuery {
                sort: SortKey::Subject,
                direction: Direction::Asc,
                page: 1,
            },
            rows: vec![row(
                &format!("https://x.test/{HOSTILE}"),
                Latest::Doc(doc(2)),
            )],
            total: 1,
            pages: 1,
        };
        let html = index(&view);
        assert_balanced(&html);
        assert!(!html.contains("<script"));
        // The sorted column links to the other direction, the others to their natural one.
        assert!(html.contains("aria-sort=\"ascending\"><a href=\"/?sort=subject&amp;dir=desc\">"));
        assert!(html.contains("href=\"/?sort=score&amp;dir=desc\""));
        assert!(html.contains("href=\"/?sort=verdict&amp;dir=asc\""));
        assert!(html.contains("<svg class=\"bar\""));
        assert!(html.contains(&format!("href=\"/subjects/{}\"", view.rows[0].id)));
    }
}
