//! The calibration report as one self-contained HTML page: inline SVG plots (ROC curves before and
//! after, the reliability diagram, score distributions by outcome, each check's contribution) and
//! the figures' tables. No script, no style sheet or font from anywhere else. Pure.

use std::fmt::Write;

use super::gates::GateEvidence;
use super::job::{Evaluation, Report};

const W: f64 = 360.0;
const H: f64 = 300.0;
const PAD: f64 = 40.0;

/// Every text the report shows, escaped and bounded as the daemon's pages do it (hidden
/// characters shown as escapes): the rubric's names come from an operator's file.
fn esc(text: &str) -> String {
    crate::html::text(text, 16_384)
}

fn num(x: Option<f64>) -> String {
    x.map_or("n/a".to_string(), |x| format!("{x}"))
}

/// Plot coordinates of a unit-square point.
fn at(x: f64, y: f64) -> (f64, f64) {
    (
        PAD + x.clamp(0.0, 1.0) * (W - 2.0 * PAD),
        H - PAD - y.clamp(0.0, 1.0) * (H - 2.0 * PAD),
    )
}

fn frame(out: &mut String, title: &str, x_label: &str, y_label: &str) {
    let (x0, y0) = at(0.0, 0.0);
    let (x1, y1) = at(1.0, 1.0);
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{t}\">\
         <title>{t}</title>\
         <rect x=\"{x0}\" y=\"{y1}\" width=\"{w}\" height=\"{h}\" fill=\"none\" stroke=\"#888\"/>\
         <text x=\"{cx}\" y=\"{by}\" text-anchor=\"middle\" font-size=\"11\">{xl}</text>\
         <text x=\"12\" y=\"{cy}\" text-anchor=\"middle\" font-size=\"11\" \
         transform=\"rotate(-90 12 {cy})\">{yl}</text>\
         <text x=\"{x0}\" y=\"{ly}\" font-size=\"10\">0</text>\
         <text x=\"{x1}\" y=\"{ly}\" font-size=\"10\" text-anchor=\"end\">1</text>",
        t = esc(title),
        w = x1 - x0,
        h = y0 - y1,
        cx = (x0 + x1) / 2.0,
        by = H - 8.0,
        cy = (y0 + y1) / 2.0,
        xl = esc(x_label),
        yl = esc(y_label),
        ly = y0 + 12.0,
    );
}

fn polyline(out: &mut String, points: &[(f64, f64)], colour: &str, dash: bool) {
    let pts: Vec<String> = points
        .iter()
        .map(|(x, y)| {
            let (px, py) = at(*x, *y);
            format!("{px:.1},{py:.1}")
        })
        .collect();
    let _ = write!(
        out,
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{}/>",
        pts.join(" "),
        if dash {
            " stroke-dasharray=\"4 3\""
        } else {
            ""
        }
    );
}

fn legend(out: &mut String, items: &[(&str, &str)]) {
    for (k, (label, colour)) in items.iter().enumerate() {
        // Above the plot's frame, so no curve is hidden.
        let y = 4.0 + 14.0 * k as f64;
        let _ = write!(
            out,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{colour}\"/>\
             <text x=\"{}\" y=\"{}\" font-size=\"10\">{}</text>",
            W - PAD - 120.0,
            y,
            W - PAD - 106.0,
            y + 9.0,
            esc(label)
        );
    }
}

fn roc_svg(e: &Evaluation) -> String {
    let mut out = String::new();
    frame(
        &mut out,
        "ROC: failed paid call in 14 days",
        "false positive rate",
        "true positive rate",
    );
    polyline(&mut out, &[(0.0, 0.0), (1.0, 1.0)], "#bbb", true);
    polyline(&mut out, &e.roc_draft, "#c0392b", false);
    polyline(&mut out, &e.roc_proposal, "#2471a3", false);
    let draft = format!("draft, AUC {}", num(e.auc_draft));
    let proposal = format!("proposal, AUC {}", num(e.auc_proposal));
    legend(
        &mut out,
        &[(draft.as_str(), "#c0392b"), (proposal.as_str(), "#2471a3")],
    );
    out.push_str("</svg>");
    out
}

fn reliability_svg(e: &Evaluation) -> String {
    let mut out = String::new();
    frame(
        &mut out,
        "Reliability: predicted against observed failure rate",
        "predicted rate",
        "observed rate",
    );
    polyline(&mut out, &[(0.0, 0.0), (1.0, 1.0)], "#bbb", true);
    for (deciles, colour) in [
        (&e.deciles_draft_linear, "#c0392b"),
        (&e.deciles_proposal, "#2471a3"),
    ] {
        let pts: Vec<(f64, f64)> = deciles.iter().map(|d| (d.predicted, d.observed)).collect();
        polyline(&mut out, &pts, colour, false);
        for d in deciles {
            let (x, y) = at(d.predicted, d.observed);
            let r = if d.n >= super::job::MIN_DECILE {
                4.0
            } else {
                2.0
            };
            let _ = write!(
                out,
                "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{r}\" fill=\"{colour}\"><title>score {} to \
                 {}: {} subject-days, predicted {}, observed {}</title></circle>",
                d.score_low, d.score_high, d.n, d.predicted, d.observed
            );
        }
    }
    legend(
        &mut out,
        &[
            ("draft (1 - score/100)", "#c0392b"),
            ("proposal", "#2471a3"),
        ],
    );
    out.push_str("</svg>");
    out
}

fn histogram_svg(fails: &[u64], passes: &[u64]) -> String {
    let mut out = String::new();
    frame(
        &mut out,
        "Score distribution by outcome (share of each outcome per 10 points)",
        "score / 100",
        "share",
    );
    let total_f = fails.iter().sum::<u64>().max(1) as f64;
    let total_p = passes.iter().sum::<u64>().max(1) as f64;
    let top = fails
        .iter()
        .map(|c| *c as f64 / total_f)
        .chain(passes.iter().map(|c| *c as f64 / total_p))
        .fold(0.01, f64::max);
    for (k, (f, p)) in fails.iter().zip(passes).enumerate() {
        for (j, (count, total, colour)) in [(f, total_f, "#c0392b"), (p, total_p, "#27ae60")]
            .into_iter()
            .enumerate()
        {
            let share = *count as f64 / total;
            let x = k as f64 / 10.0 + j as f64 * 0.045 + 0.005;
            let (x0, y0) = at(x, share / top);
            let (x1, y1) = at(x + 0.045, 0.0);
            let _ = write!(
                out,
                "<rect x=\"{x0:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{:.1}\" \
                 fill=\"{colour}\"><title>{}-{}: {count}</title></rect>",
                x1 - x0,
                y1 - y0,
                k * 10,
                k * 10 + 10
            );
        }
    }
    legend(
        &mut out,
        &[("failed", "#c0392b"), ("did not fail", "#27ae60")],
    );
    out.push_str("</svg>");
    out
}

fn contributions_svg(r: &Report) -> String {
    let rows = &r.contributions;
    let height = 30.0 + 16.0 * rows.len() as f64;
    let top = rows
        .iter()
        .filter_map(|c| c.auc_lost)
        .map(f64::abs)
        .fold(0.001, f64::max);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" \
         viewBox=\"0 0 {W} {height}\" role=\"img\" aria-label=\"AUC lost without each check\">\
         <title>AUC lost without each check</title>"
    );
    let zero = 120.0;
    let span = W - zero - 20.0;
    for (k, c) in rows.iter().enumerate() {
        let y = 20.0 + 16.0 * k as f64;
        let lost = c.auc_lost.unwrap_or(0.0);
        let w = (lost.abs() / top) * span / 2.0;
        let x = if lost >= 0.0 {
            zero + span / 2.0
        } else {
            zero + span / 2.0 - w
        };
        let _ = write!(
            out,
            "<text x=\"4\" y=\"{}\" font-size=\"10\">{} ({})</text>\
             <rect x=\"{x:.1}\" y=\"{}\" width=\"{w:.1}\" height=\"11\" fill=\"{}\"/>",
            y + 9.0,
            esc(c.check.as_str()),
            num(c.auc_lost),
            y,
            if lost >= 0.0 { "#2471a3" } else { "#c0392b" }
        );
    }
    let _ = write!(
        out,
        "<line x1=\"{m}\" y1=\"14\" x2=\"{m}\" y2=\"{height}\" stroke=\"#888\"/></svg>",
        m = zero + span / 2.0
    );
    out
}

fn evaluation_rows(out: &mut String, name: &str, e: &Evaluation) {
    let _ = write!(
        out,
        "<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
         <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        esc(name),
        e.rows,
        e.failing_rows,
        num(e.brier_draft_linear),
        num(e.brier_draft_isotonic),
        num(e.brier_proposal),
        num(e.improvement_vs_linear),
        num(e.auc_draft),
        num(e.auc_proposal),
        num(e.ece_proposal),
        num(e.max_decile_gap_proposal),
    );
}

/// The page.
/// The candidate checks' evidence: one row per threshold, the decision under it.
fn gate_evidence(out: &mut String, evidence: &[GateEvidence]) {
    if evidence.is_empty() {
        out.push_str("<h2>Gates the evidence asks for</h2><p>Every kind of paid-call failure is gated by the live rubric: no candidate.</p>");
        return;
    }
    out.push_str(
        "<h2>Gates the evidence asks for</h2><p>For each check that sees a kind of paid-call \
         failure the live rubric does not gate: the fit period's subject-days with the check's \
         fail weight at or over each threshold, how often they fail in the horizon, and what the \
         map predicts for their scores. A gate is proposed at the lowest threshold holding at \
         least 30 subject-days of 3 subjects that fail at least half the time and 10 points \
         more often than predicted.</p><table><tr><th>check</th><th>failure</th><th>threshold</th>\
         <th>subject-days</th><th>subjects</th><th>observed</th><th>predicted</th></tr>",
    );
    for e in evidence {
        for (k, rule) in e.rules.iter().enumerate() {
            let chosen = e.proposed == Some(rule.threshold);
            let _ = write!(
                out,
                "<tr{}><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                if chosen {
                    " style=\"background:#fde\""
                } else {
                    ""
                },
                if k == 0 {
                    esc(e.check.as_str())
                } else {
                    String::new()
                },
                if k == 0 { esc(e.flag) } else { String::new() },
                rule.threshold,
                rule.rows,
                rule.subjects,
                num(rule.observed),
                num(rule.predicted),
            );
        }
        let _ = write!(
            out,
            "<tr><td colspan=\"7\" style=\"text-align:left\">{}</td></tr>",
            esc(&e.why)
        );
    }
    out.push_str("</table>");
}

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let proposal = r
        .proposal
        .as_ref()
        .map_or("none (report only)".to_string(), |p| {
            format!("{} (sha256 {})", esc(&p.version), esc(&p.sha256))
        });
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>Calibration report {as_of}</title>\
         <style>body{{font-family:sans-serif;max-width:60em;margin:1em auto;padding:0 1em}}\
         table{{border-collapse:collapse;margin:.5em 0}}td,th{{border:1px solid #ccc;padding:2px 6px;\
         text-align:right;font-size:13px}}th{{text-align:left}}svg{{margin:4px}}</style></head><body>\
         <h1>Calibration report</h1>\
         <p>As of {as_of}; live rubric {lv} (sha256 {ls}); proposal {proposal}. Labels: {labels}; \
         horizon {h} days.</p>",
        as_of = esc(&r.as_of),
        lv = esc(&r.live_rubric.version),
        ls = esc(&r.live_rubric.sha256),
        labels = esc(&r.labels),
        h = r.horizon_days,
    );
    out.push_str(
        "<h2>Goals</h2><table><tr><th>goal</th><th>target</th><th>measured</th><th>met</th></tr>",
    );
    for g in &r.goals {
        let _ = write!(
            out,
            "<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(g.goal),
            esc(&g.target),
            num(g.measured),
            match g.met {
                Some(true) => "met",
                Some(false) => "not met",
                None => "reported",
            }
        );
    }
    out.push_str("</table>");
    let missed: Vec<&crate::calibrate::job::Goal> =
        r.goals.iter().filter(|g| g.why.is_some()).collect();
    if !missed.is_empty() {
        out.push_str("<h2>Missed goals: by how much, why, what would fix it</h2><ul>");
        for g in missed {
            let _ = write!(
                out,
                "<li><b>{}</b>: missed by {}. {}</li>",
                esc(g.goal),
                num(g.shortfall),
                esc(g.why.as_deref().unwrap_or_default())
            );
        }
        out.push_str("</ul>");
    }
    out.push_str("<h2>Plots</h2><div>");
    for (caption, svg) in [
        (
            "ROC, held-out period: the score as a detector of a failed paid call in 14 days",
            roc_svg(&r.held_out_period),
        ),
        (
            "Reliability, held-out period: predicted against observed failure rate per score decile \
             (large dots: at least 30 subject-days)",
            reliability_svg(&r.held_out_period),
        ),
        (
            "Proposal's score by outcome, every labelled day from day 14 (share of each outcome \
             per 10 points)",
            histogram_svg(&r.histogram_fails, &r.histogram_passes),
        ),
        (
            "Each check's contribution: AUC lost without it (held-out period)",
            contributions_svg(r),
        ),
    ] {
        let _ = write!(
            out,
            "<figure style=\"display:inline-block;vertical-align:top;width:{W}px;margin:4px\">\
             <figcaption style=\"font-size:12px\">{}</figcaption>{svg}</figure>",
            esc(caption)
        );
    }
    out.push_str(
        "</div><p>The last plot is the AUC lost on the held-out period when a check's contribution \
         is left out of the score (negative: the score ranks better without it).</p>\
         <h2>Validation</h2><table><tr><th>set</th><th>subject-days</th><th>failing</th>\
         <th>Brier draft (1 - s/100)</th><th>Brier draft (isotonic)</th><th>Brier proposal</th>\
         <th>improvement</th><th>AUC draft</th><th>AUC proposal</th><th>ECE</th>\
         <th>max decile gap</th></tr>",
    );
    evaluation_rows(&mut out, "held-out period (later days)", &r.held_out_period);
    evaluation_rows(&mut out, "held-out subjects", &r.held_out_subjects);
    evaluation_rows(&mut out, "all labelled days from day 14", &r.all);
    out.push_str("</table>");
    if let Some(f) = &r.fitted {
        let _ = write!(
            out,
            "<h2>What was fitted</h2><p>Objective: {} (draft curves {}, fitted {}, with the proposed \
             gates {}; {} evaluations).</p>\
             <table><tr><th>curve</th><th>x (ms)</th><th>draft y</th><th>fitted y</th></tr>",
            esc(f.objective),
            f.objective_draft,
            f.objective_fitted,
            f.objective_gated,
            f.evaluations
        );
        for c in &f.curves {
            let _ = write!(
                out,
                "<tr><th>{}</th><td>{:?}</td><td>{:?}</td><td>{:?}</td></tr>",
                esc(c.check.as_str()),
                c.x_ms,
                c.draft_y,
                c.fitted_y
            );
        }
        let _ = write!(
            out,
            "</table><p>Calibration (score, 14-day failure rate): {}</p><table><tr><th>grade</th>\
             <th>target rate</th><th>draft min</th><th>proposed min</th><th>why</th></tr>",
            esc(&format!("{:?}", f.calibration))
        );
        for g in &f.grades {
            let _ = write!(
                out,
                "<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
                esc(&g.grade),
                num(g.target_rate),
                g.draft_min,
                g.proposed_min,
                esc(&g.why)
            );
        }
        out.push_str("</table><p>Kept: ");
        out.push_str(&esc(&f.kept.join("; ")));
        out.push_str("</p>");
        gate_evidence(&mut out, &f.gates);
    }
    out.push_str(
        "<h2>Verdicts</h2><table><tr><th></th><th>avoid subject-days</th><th>that fail</th>\
         <th>ok subject-days</th><th>that do not fail</th><th>failing subjects</th>\
         <th>unverified after 7 days</th></tr>",
    );
    for (name, v) in [
        ("as published", Some(&r.verdicts)),
        ("under the proposal", r.verdicts_proposal.as_ref()),
    ] {
        let Some(v) = v else { continue };
        let _ = write!(
            out,
            "<tr><th>{name}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            v.avoid_rows,
            num(v.avoid_that_fail),
            v.ok_rows,
            num(v.ok_that_do_not_fail),
            v.failing_subjects,
            num(v.failing_unverified_after_7_days),
        );
    }
    out.push_str(
        "</table><p>Under the proposal, a binding proposed gate's <code>avoid</code> joins each \
         stored verdict's candidates (the most severe wins, as the scorer decides); moved grade \
         minimums are not replayed into verdicts.</p><h2>Live gates (reported, kept)</h2><table>\
         <tr><th>gate</th><th>threshold</th><th>binding subject-days</th><th>their fail share</th>\
         <th>other subject-days</th><th>their fail share</th></tr>",
    );
    for g in &r.gates {
        let _ = write!(
            out,
            "<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&g.gate),
            g.threshold,
            g.binding_rows,
            num(g.binding_fail_share),
            g.other_rows,
            num(g.other_fail_share)
        );
    }
    let c = &r.counts;
    let _ = writeln!(
        out,
        "</table><h2>Counts</h2><p>{} subjects, {} score rows ({} labelled, {} from day 14 on), \
         {} subjects followed up; fit on {} subject-days before {} ({} subjects held out). \
         Documents under another major version: {} (never compared); unreadable: {}. Fast \
         re-scoring mismatches: {} of {} rows checked.</p></body></html>",
        c.subjects,
        c.rows,
        c.labelled_rows,
        c.eligible_rows,
        c.subjects_followed_up,
        c.fit_rows,
        esc(&c.split_day),
        c.held_out_subjects,
        c.other_major_documents,
        c.unreadable_documents,
        c.rescoring_mismatches,
        c.rescored_rows_checked
    );
    out
}
