//! The recalibration itself, pure: the table (rows and labels) and the live rubric in, the
//! decision, every figure and the proposal's bytes out. No clock: the as-of day comes with the
//! table, so the same store and labels give the same bytes.
//!
//! What is fitted (the weights stay fixed; the structure too, but for gates the evidence asks for):
//! - the y values of the curve checks' points (R3, R7), x knots fixed, by a bounded coordinate
//!   search (grid of 5 points, at most 3 passes, each curve kept non-increasing in 0..=100);
//! - the mapping of the capped score to a predicted failure rate over the horizon: isotonic
//!   (non-increasing, pool-adjacent-violators over whole-point score bins), reduced to at most 8
//!   knots, written as the rubric's `calibration` section;
//! - new gates on the checks that see a kind of paid-call failure the live rubric does not gate,
//!   where the fit period shows the subject-days on which the check failed go on to fail far more
//!   often than the map predicts (`gates.rs` says exactly when); the map is then refitted under them;
//! - the grade minimums, from target failure rates (A 2%, B 5%, C 10%, D 20%), where at least 30
//!   fitted subject-days lie on each side of the new boundary; otherwise the draft's is kept.
//!
//! The objective is the Brier score of the predicted rate on the fit period (earlier days, subjects
//! not held out). The live gates' thresholds are reported (failure share with the gate binding and
//! not), not changed.

use std::collections::BTreeSet;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::fit::{self, Bins, Decile};
use super::gates::{self, FitDay, GateEvidence, NewGate};
use super::read::ReadSummary;
use super::table::{Table, day_text};
use crate::rubric::{CheckId, Curve, Rubric, Verdict};
use crate::score::points::round4;

/// Names the report's format.
pub const REPORT_FORMAT: &str = "x402-probe.calibration-report/1";
/// The issue's floor: subjects with a label and its whole horizon of follow-up.
pub const MIN_SUBJECTS: usize = 100;
/// Deciles with fewer subject-days are left out of the calibration error.
pub const MIN_DECILE: u64 = 30;
/// Target failure rates per grade (the grades above F, best first).
pub const GRADE_TARGETS: [(&str, f64); 4] = [("A", 0.02), ("B", 0.05), ("C", 0.10), ("D", 0.20)];
/// Subject-days needed on each side of a moved grade boundary.
pub const MIN_SIDE: usize = 30;
/// Labels are used from this many days after the first score on (the scores need history).
pub const WARM_UP_DAYS: i32 = 14;

/// The job's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Propose `MAJOR.MINOR.PATCH` (frozen) instead of the next draft.
    pub freeze: bool,
    pub horizon_days: u32,
    /// What the labels are (for the report and the changelog line).
    pub labels: String,
    pub min_subjects: usize,
    pub knots: usize,
    pub step: f64,
    pub passes: u32,
}

impl Options {
    pub fn new(labels: String, horizon_days: u32) -> Options {
        Options {
            freeze: false,
            horizon_days,
            labels,
            min_subjects: MIN_SUBJECTS,
            knots: 8,
            step: 5.0,
            passes: 3,
        }
    }
}

/// What the job decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// A proposal was made.
    Proposal,
    /// The live rubric is frozen: drift is reported, nothing proposed.
    NothingToDo,
    /// Not enough evidence: why, and what is missing.
    Refused(String),
}

/// The decision, the report and (for a proposal) the proposal's bytes.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub decision: Decision,
    pub report: Option<Report>,
    pub proposal: Option<Vec<u8>>,
}

/// Why a proposal could not be written (a bug, not a data problem: the job validates what it makes).
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("the live rubric file is not JSON: {0}")]
    LiveJson(serde_json::Error),
    #[error("the proposal does not validate: {0}")]
    Proposal(crate::rubric::RubricError),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub format: &'static str,
    pub live_rubric: RubricName,
    pub proposal: Option<RubricName>,
    pub as_of: String,
    pub horizon_days: u32,
    pub labels: String,
    pub counts: Counts,
    pub fitted: Option<Fitted>,
    /// Fit on the earlier days, measured on the later ones (all subjects).
    pub held_out_period: Evaluation,
    /// Fit on the subjects not held out, measured on the held-out subjects (all labelled days).
    pub held_out_subjects: Evaluation,
    /// Every labelled subject-day from the warm-up on.
    pub all: Evaluation,
    /// Verdicts as the stored documents published them.
    pub verdicts: Verdicts,
    /// The same rows under the proposal: `avoid` where a proposed gate binds, the stored verdict
    /// elsewhere (moved grade minimums are not replayed into verdicts).
    pub verdicts_proposal: Option<Verdicts>,
    pub contributions: Vec<Contribution>,
    pub gates: Vec<GateFigure>,
    /// Score histograms (10-point bins, the proposal's score) by outcome, all labelled days.
    pub histogram_fails: Vec<u64>,
    pub histogram_passes: Vec<u64>,
    pub goals: Vec<Goal>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RubricName {
    pub version: String,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Counts {
    pub subjects: u64,
    pub rows: u64,
    pub labelled_rows: u64,
    /// Labelled rows from the warm-up on: what is fitted and measured.
    pub eligible_rows: u64,
    pub subjects_followed_up: u64,
    pub other_major_documents: u64,
    pub unreadable_documents: u64,
    pub rows_after_as_of: u64,
    pub labels_without_row: u64,
    /// Rows under the live rubric whose fast re-scoring missed the stored capped score.
    pub rescoring_mismatches: u64,
    pub rescored_rows_checked: u64,
    pub first_day: String,
    pub split_day: String,
    pub fit_rows: u64,
    pub held_out_subjects: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fitted {
    pub objective: &'static str,
    /// The Brier score on the fit period: the draft's curves with an isotonic map, then the
    /// fitted curves with theirs.
    pub objective_draft: f64,
    pub objective_fitted: f64,
    /// The same with the proposed gates applied (the map refitted under them).
    pub objective_gated: f64,
    pub evaluations: u32,
    pub curves: Vec<CurveFit>,
    pub calibration: Vec<(f64, f64)>,
    /// Each candidate check's evidence, and the gates proposed.
    pub gates: Vec<GateEvidence>,
    pub grades: Vec<GradeFit>,
    pub kept: Vec<&'static str>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurveFit {
    pub check: CheckId,
    pub x_ms: Vec<f64>,
    pub draft_y: Vec<f64>,
    pub fitted_y: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GradeFit {
    pub grade: String,
    pub target_rate: Option<f64>,
    pub draft_min: f64,
    pub proposed_min: f64,
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Evaluation {
    pub rows: u64,
    pub failing_rows: u64,
    /// The draft read as a chance: `1 - capped score / 100` (the draft has no mapping).
    pub brier_draft_linear: Option<f64>,
    /// The draft's curves with an isotonic map fitted on the fit period (the fairer baseline).
    pub brier_draft_isotonic: Option<f64>,
    pub brier_proposal: Option<f64>,
    /// `(before - after) / before`, before = `brier_draft_linear`.
    pub improvement_vs_linear: Option<f64>,
    pub improvement_vs_isotonic: Option<f64>,
    pub auc_draft: Option<f64>,
    pub auc_proposal: Option<f64>,
    pub ece_proposal: Option<f64>,
    pub max_decile_gap_proposal: Option<f64>,
    pub ece_draft_linear: Option<f64>,
    pub deciles_proposal: Vec<Decile>,
    pub deciles_draft_linear: Vec<Decile>,
    pub roc_draft: Vec<(f64, f64)>,
    pub roc_proposal: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdicts {
    pub avoid_rows: u64,
    /// Share of `avoid` subject-days whose next 14 days had a failed paid call.
    pub avoid_that_fail: Option<f64>,
    pub ok_rows: u64,
    /// Share of `ok` subject-days whose next 14 days had none.
    pub ok_that_do_not_fail: Option<f64>,
    /// Subjects with at least one failing label, with a score 7 days after their first.
    pub failing_subjects: u64,
    /// Share of those still `unverified` 7 days after their first score.
    pub failing_unverified_after_7_days: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Contribution {
    pub check: CheckId,
    /// The held-out period's AUC with the check's contribution left out, and what that loses.
    pub auc_without: Option<f64>,
    pub auc_lost: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateFigure {
    pub gate: String,
    pub threshold: f64,
    pub binding_rows: u64,
    pub binding_fail_share: Option<f64>,
    pub other_rows: u64,
    pub other_fail_share: Option<f64>,
    pub decision: &'static str,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Goal {
    pub goal: &'static str,
    pub target: String,
    pub measured: Option<f64>,
    /// `None` for figures with no target (printed only).
    pub met: Option<bool>,
    /// When missed: how far from the target, in the figure's unit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shortfall: Option<f64>,
    /// When missed: why, from this report's own figures, and what would fix it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// What the explanations of missed goals read: how the failure share moved between the fit
/// period and the held-out period, and the checks that rank best.
struct Drift {
    fit_fail_share: Option<f64>,
    later_fail_share: Option<f64>,
    top_checks: Vec<CheckId>,
    /// The worst decile of the held-out period, when at least a quarter of it sits at the cap of
    /// one live gate whose check sees no kind of paid-call failure: the gate, its subject-days
    /// there, the decile's, and the share of those that fail.
    worst_capped_by: Option<(String, u64, u64, f64)>,
}

/// Whether a subject is held out (a stable hash of its id: about a fifth).
pub fn held_out(subject: &str) -> bool {
    Sha256::digest(subject.as_bytes())[0] % 5 == 0
}

/// The live rubric's curves, in the table's curve-check order.
fn live_curves(live: &Rubric, table: &Table) -> Vec<Curve> {
    table
        .curve_checks
        .iter()
        .filter_map(|&c| live.checks[c].curve.clone())
        .collect()
}

/// Runs the recalibration over a read table.
pub fn run(
    table: &Table,
    summary: &ReadSummary,
    live: &Rubric,
    live_bytes: &[u8],
    opts: &Options,
) -> Result<Outcome, JobError> {
    let first_day = table.rows.iter().map(|r| r.day).min().unwrap_or(0);
    let eligible: Vec<usize> = (0..table.rows.len())
        .filter(|&i| table.rows[i].label.is_some() && table.rows[i].day >= first_day + WARM_UP_DAYS)
        .collect();
    let followed: BTreeSet<u32> = table
        .rows
        .iter()
        .filter(|r| r.label.is_some())
        .map(|r| r.subject)
        .collect();
    if followed.len() < opts.min_subjects {
        return Ok(refused(format!(
            "{} subject(s) have a label with {} days of follow-up as of {}; {} are needed ({} \
             more). Labels: {}. {} score row(s) read, {} labelled.",
            followed.len(),
            opts.horizon_days,
            day_text(summary.as_of_day),
            opts.min_subjects,
            opts.min_subjects - followed.len(),
            opts.labels,
            table.rows.len(),
            table.rows.iter().filter(|r| r.label.is_some()).count(),
        )));
    }

    let draft = live_curves(live, table);
    let draft_refs: Vec<&Curve> = draft.iter().collect();
    // The fast re-scoring must give back every stored score under the rubric it was made with.
    let live_index = table
        .rubrics
        .iter()
        .position(|(_, sha)| sha == live.sha256());
    let mut own: Vec<Option<Vec<&Curve>>> = vec![None; table.rubrics.len()];
    if let Some(i) = live_index {
        own[i] = Some(draft_refs.clone());
    }
    let rescoring_mismatches = table.rescoring_mismatches(&own);
    let rescored_rows_checked = live_index.map_or(0, |i| {
        table
            .rows
            .iter()
            .filter(|r| usize::from(r.rubric) == i)
            .count()
    }) as u64;

    let mut days: Vec<i32> = eligible.iter().map(|&i| table.rows[i].day).collect();
    days.sort();
    days.dedup();
    let split_day = days.get(days.len() * 2 / 3).copied().unwrap_or(first_day);
    let is_held_out: Vec<bool> = table.subjects.iter().map(|s| held_out(s)).collect();
    let held = |i: usize| is_held_out[table.rows[i].subject as usize];
    let fit_rows: Vec<usize> = eligible
        .iter()
        .copied()
        .filter(|&i| table.rows[i].day < split_day && !held(i))
        .collect();
    let later: Vec<usize> = eligible
        .iter()
        .copied()
        .filter(|&i| table.rows[i].day >= split_day)
        .collect();
    let held_rows: Vec<usize> = eligible.iter().copied().filter(|&i| held(i)).collect();
    let fails = |i: usize| table.rows[i].label.is_some_and(|l| l.fails);

    let counts = Counts {
        subjects: table.subjects.len() as u64,
        rows: table.rows.len() as u64,
        labelled_rows: table.rows.iter().filter(|r| r.label.is_some()).count() as u64,
        eligible_rows: eligible.len() as u64,
        subjects_followed_up: followed.len() as u64,
        other_major_documents: table.other_major_documents,
        unreadable_documents: table.unreadable_documents,
        rows_after_as_of: summary.rows_after_as_of,
        labels_without_row: summary.labels_without_row,
        rescoring_mismatches,
        rescored_rows_checked,
        first_day: day_text(first_day),
        split_day: day_text(split_day),
        fit_rows: fit_rows.len() as u64,
        held_out_subjects: is_held_out.iter().filter(|h| **h).count() as u64,
    };

    let frozen = !live.version.contains('-');
    let fit_fails = fit_rows.iter().filter(|&&i| fails(i)).count();
    if !frozen && (fit_fails == 0 || fit_fails == fit_rows.len()) {
        return Ok(refused(format!(
            "the fit period (labelled days {} to {} of the subjects not held out: {} subject-days) \
             has {} failing subject-day(s): a fit needs both outcomes",
            day_text(first_day + WARM_UP_DAYS),
            day_text(split_day - 1),
            fit_rows.len(),
            fit_fails
        )));
    }

    // The fit: curves by the search, the isotonic map under them, the gates the evidence asks
    // for, and the map again under those.
    let bins_under = |curves: &[&Curve], new: &[NewGate]| {
        let mut bins = Bins::new();
        for &i in &fit_rows {
            bins.add(
                gated(table, i, table.rescore(i, curves, None), new),
                fails(i),
            );
        }
        bins
    };
    let (curves, new_gates, mapping, draft_mapping, fitted) = if frozen {
        let mapping = live
            .calibration
            .as_ref()
            .map(|c| c.points.clone())
            .unwrap_or_else(|| vec![(0.0, 1.0), (100.0, 0.0)]);
        (draft.clone(), Vec::new(), mapping.clone(), mapping, None)
    } else {
        let objective_draft = fit::isotonic_brier(&fit::isotonic(&bins_under(&draft_refs, &[])));
        let searched = fit::search_curves(&draft, opts.step, opts.passes, |c| {
            fit::isotonic_brier(&fit::isotonic(&bins_under(c, &[])))
        });
        let fitted_refs: Vec<&Curve> = searched.curves.iter().collect();
        let curve_mapping = fit::mapping_points(&fit::reduce(
            fit::isotonic(&bins_under(&fitted_refs, &[])),
            opts.knots,
        ));
        let evidence: Vec<GateEvidence> = table
            .candidates
            .iter()
            .enumerate()
            .map(|(column, c)| {
                let days: Vec<FitDay> = fit_rows
                    .iter()
                    .map(|&i| FitDay {
                        subject: table.rows[i].subject,
                        fail_weight: table.candidate_fail_weight(i, column),
                        predicted: fit::predict(
                            &curve_mapping,
                            table.rescore(i, &fitted_refs, None).as_f64(),
                        ),
                        fails: fails(i),
                    })
                    .collect();
                gates::weigh(table.checks[c.check], c.kind, &days)
            })
            .collect();
        let new_gates: Vec<NewGate> = evidence
            .iter()
            .enumerate()
            .filter_map(|(column, e)| {
                e.proposed.map(|threshold| NewGate {
                    column,
                    threshold,
                    cap: e.cap,
                })
            })
            .collect();
        let gated_bins = bins_under(&fitted_refs, &new_gates);
        let objective_gated = fit::isotonic_brier(&fit::isotonic(&gated_bins));
        let mapping = fit::mapping_points(&fit::reduce(fit::isotonic(&gated_bins), opts.knots));
        let draft_mapping = fit::mapping_points(&fit::reduce(
            fit::isotonic(&bins_under(&draft_refs, &[])),
            opts.knots,
        ));
        let fit_scores: Vec<f64> = fit_rows
            .iter()
            .map(|&i| gated(table, i, table.rescore(i, &fitted_refs, None), &new_gates))
            .collect();
        let grades = fit_grades(live, &mapping, &fit_scores);
        let fitted = Fitted {
            objective: "Brier score of the predicted 14-day paid-call failure rate on the fit \
                        period (labelled days before the split, subjects not held out)",
            objective_draft: round4_sig(objective_draft),
            objective_fitted: round4_sig(searched.objective),
            objective_gated: round4_sig(objective_gated),
            evaluations: searched.evaluations,
            curves: table
                .curve_checks
                .iter()
                .zip(draft.iter().zip(&searched.curves))
                .map(|(&c, (d, f))| CurveFit {
                    check: table.checks[c],
                    x_ms: d.points.iter().map(|p| p.0).collect(),
                    draft_y: d.points.iter().map(|p| p.1).collect(),
                    fitted_y: f.points.iter().map(|p| p.1).collect(),
                })
                .collect(),
            calibration: mapping.clone(),
            gates: evidence,
            grades,
            kept: vec![
                "dimension and check weights",
                "the live gates' thresholds, caps and verdicts (reported below, not refitted)",
                "confidence steps, verdict rules, decay, Monte Carlo settings",
            ],
        };
        (
            searched.curves,
            new_gates,
            mapping,
            draft_mapping,
            Some(fitted),
        )
    };
    let curve_refs: Vec<&Curve> = curves.iter().collect();
    let after_score = |i: usize| gated(table, i, table.rescore(i, &curve_refs, None), &new_gates);
    let before_score = |i: usize| table.rows[i].capped.as_f64();

    let evaluate = |rows: &[usize]| -> Evaluation {
        let mut e = Evaluation {
            rows: rows.len() as u64,
            failing_rows: rows.iter().filter(|&&i| fails(i)).count() as u64,
            ..Evaluation::default()
        };
        if rows.is_empty() {
            return e;
        }
        let linear = |s: f64| (1.0 - s / 100.0).clamp(0.0, 1.0);
        e.brier_draft_linear =
            fit::brier(rows.iter().map(|&i| (linear(before_score(i)), fails(i))));
        e.brier_draft_isotonic = fit::brier(
            rows.iter()
                .map(|&i| (fit::predict(&draft_mapping, before_score(i)), fails(i))),
        );
        e.brier_proposal = fit::brier(
            rows.iter()
                .map(|&i| (fit::predict(&mapping, after_score(i)), fails(i))),
        );
        let gain = |before: Option<f64>, after: Option<f64>| match (before, after) {
            (Some(b), Some(a)) if b > 0.0 => Some((b - a) / b),
            _ => None,
        };
        e.improvement_vs_linear = gain(e.brier_draft_linear, e.brier_proposal);
        e.improvement_vs_isotonic = gain(e.brier_draft_isotonic, e.brier_proposal);
        let mut before: Vec<(f64, bool)> =
            rows.iter().map(|&i| (before_score(i), fails(i))).collect();
        let mut after: Vec<(f64, bool)> =
            rows.iter().map(|&i| (after_score(i), fails(i))).collect();
        e.auc_draft = fit::auc(&mut before);
        e.auc_proposal = fit::auc(&mut after);
        e.roc_draft = fit::roc(&mut before, 101);
        e.roc_proposal = fit::roc(&mut after, 101);
        let mut cal: Vec<(f64, f64, bool)> = rows
            .iter()
            .map(|&i| {
                (
                    after_score(i),
                    fit::predict(&mapping, after_score(i)),
                    fails(i),
                )
            })
            .collect();
        e.deciles_proposal = fit::deciles(&mut cal);
        if let Some((ece, max)) = fit::ece(&e.deciles_proposal, MIN_DECILE) {
            e.ece_proposal = Some(ece);
            e.max_decile_gap_proposal = Some(max);
        }
        let mut lin: Vec<(f64, f64, bool)> = rows
            .iter()
            .map(|&i| (before_score(i), linear(before_score(i)), fails(i)))
            .collect();
        e.deciles_draft_linear = fit::deciles(&mut lin);
        e.ece_draft_linear = fit::ece(&e.deciles_draft_linear, MIN_DECILE).map(|x| x.0);
        rounded(e)
    };
    let held_out_period = evaluate(&later);
    let held_out_subjects = evaluate(&held_rows);
    let all = evaluate(&eligible);

    // Verdicts as published (the stored documents'), over the eligible rows, and under the
    // proposal: a binding gate's `avoid` joins the verdict's candidates and the most severe wins,
    // as `score::verdict::decide` does.
    let share = |hit: usize, of: usize| (of > 0).then(|| round4(hit as f64 / of as f64));
    let verdicts_under = |verdict: &dyn Fn(usize) -> Verdict| {
        let avoid: Vec<usize> = eligible
            .iter()
            .copied()
            .filter(|&i| verdict(i) == Verdict::Avoid)
            .collect();
        let ok: Vec<usize> = eligible
            .iter()
            .copied()
            .filter(|&i| verdict(i) == Verdict::Ok)
            .collect();
        let (failing_subjects, unverified) = failing_unverified(table, verdict);
        Verdicts {
            avoid_rows: avoid.len() as u64,
            avoid_that_fail: share(avoid.iter().filter(|&&i| fails(i)).count(), avoid.len()),
            ok_rows: ok.len() as u64,
            ok_that_do_not_fail: share(ok.iter().filter(|&&i| !fails(i)).count(), ok.len()),
            failing_subjects: failing_subjects as u64,
            failing_unverified_after_7_days: share(unverified, failing_subjects),
        }
    };
    let verdicts = verdicts_under(&|i| table.rows[i].verdict);
    let verdicts_proposal = (!frozen).then(|| {
        verdicts_under(&|i| {
            let stored = table.rows[i].verdict;
            if binds(table, i, &new_gates) {
                stored.min(Verdict::Avoid)
            } else {
                stored
            }
        })
    });

    // Each check's part in the ranking: the held-out period's AUC without it.
    let full_auc = held_out_period.auc_proposal;
    let contributions: Vec<Contribution> = (0..table.checks.len())
        .filter(|&c| {
            later
                .iter()
                .any(|&i| table.contribution(i, c) != Default::default())
        })
        .map(|c| {
            let mut pairs: Vec<(f64, bool)> = later
                .iter()
                .map(|&i| {
                    let without = table.rescore(i, &curve_refs, Some(c));
                    (gated(table, i, without, &new_gates), fails(i))
                })
                .collect();
            let without = fit::auc(&mut pairs).map(round4);
            Contribution {
                check: table.checks[c],
                auc_without: without,
                auc_lost: full_auc.zip(without).map(|(f, w)| round4(f - w)),
            }
        })
        .collect();

    let gates = live
        .gates
        .iter()
        .enumerate()
        .map(|(g, gate)| {
            let binding = |i: usize| g < 32 && table.rows[i].gates_binding & (1 << g) != 0;
            let on: Vec<usize> = eligible.iter().copied().filter(|&i| binding(i)).collect();
            let off: Vec<usize> = eligible.iter().copied().filter(|&i| !binding(i)).collect();
            GateFigure {
                gate: table.gates[g].clone(),
                threshold: gate.value,
                binding_rows: on.len() as u64,
                binding_fail_share: share(on.iter().filter(|&&i| fails(i)).count(), on.len()),
                other_rows: off.len() as u64,
                other_fail_share: share(off.iter().filter(|&&i| fails(i)).count(), off.len()),
                decision: "kept (reported only: a gate threshold moves with the evidence of a \
                           proposal reviewed by hand)",
            }
        })
        .collect();

    let mut histogram_fails = vec![0u64; 10];
    let mut histogram_passes = vec![0u64; 10];
    for &i in &eligible {
        let bin = (after_score(i) / 10.0).floor().clamp(0.0, 9.0) as usize;
        if fails(i) {
            histogram_fails[bin] += 1;
        } else {
            histogram_passes[bin] += 1;
        }
    }

    let share_failing = |rows: &[usize]| {
        (!rows.is_empty())
            .then(|| rows.iter().filter(|&&i| fails(i)).count() as f64 / rows.len() as f64)
    };
    let mut ranked: Vec<&Contribution> = contributions.iter().collect();
    ranked.sort_by(|a, b| {
        b.auc_lost
            .unwrap_or(0.0)
            .total_cmp(&a.auc_lost.unwrap_or(0.0))
            .then_with(|| a.check.cmp(&b.check))
    });
    let drift = Drift {
        fit_fail_share: share_failing(&fit_rows),
        later_fail_share: share_failing(&later),
        top_checks: ranked
            .iter()
            .filter(|c| c.auc_lost.is_some_and(|l| l > 0.0))
            .take(3)
            .map(|c| c.check)
            .collect(),
        worst_capped_by: worst_capped_by(
            table,
            live,
            &later,
            &after_score,
            &drift_period(&held_out_period),
        ),
    };
    let goals = goals(&held_out_period, &verdicts, &drift);
    let proposal_version = next_version(&live.version, opts.freeze);
    let mut report = Report {
        format: REPORT_FORMAT,
        live_rubric: RubricName {
            version: live.version.clone(),
            sha256: live.sha256().to_string(),
        },
        proposal: None,
        as_of: day_text(summary.as_of_day),
        horizon_days: opts.horizon_days,
        labels: opts.labels.clone(),
        counts,
        fitted,
        held_out_period,
        held_out_subjects,
        all,
        verdicts,
        verdicts_proposal,
        contributions,
        gates,
        histogram_fails,
        histogram_passes,
        goals,
    };
    // Frozen: nothing was fitted, drift is all the report shows.
    let Some(fitted) = report.fitted.clone() else {
        return Ok(Outcome {
            decision: Decision::NothingToDo,
            report: Some(report),
            proposal: None,
        });
    };
    let proposal = proposal_bytes(live_bytes, &proposal_version, &fitted, &report, opts)?;
    let parsed = Rubric::from_bytes(&proposal).map_err(JobError::Proposal)?;
    report.proposal = Some(RubricName {
        version: parsed.version.clone(),
        sha256: parsed.sha256().to_string(),
    });
    Ok(Outcome {
        decision: Decision::Proposal,
        report: Some(report),
        proposal: Some(proposal),
    })
}

fn refused(why: String) -> Outcome {
    Outcome {
        decision: Decision::Refused(why),
        report: None,
        proposal: None,
    }
}

/// Rounded to 4 decimals (and to 6 significant digits below 0.01, so a small Brier score keeps
/// its digits).
fn round4_sig(x: f64) -> f64 {
    if x.abs() < 0.01 && x != 0.0 {
        (x * 1e6).round() / 1e6
    } else {
        round4(x)
    }
}

fn rounded(mut e: Evaluation) -> Evaluation {
    let r = |x: Option<f64>| x.map(round4_sig);
    e.brier_draft_linear = r(e.brier_draft_linear);
    e.brier_draft_isotonic = r(e.brier_draft_isotonic);
    e.brier_proposal = r(e.brier_proposal);
    e.improvement_vs_linear = r(e.improvement_vs_linear);
    e.improvement_vs_isotonic = r(e.improvement_vs_isotonic);
    e.auc_draft = r(e.auc_draft);
    e.auc_proposal = r(e.auc_proposal);
    e.ece_proposal = r(e.ece_proposal);
    e.max_decile_gap_proposal = r(e.max_decile_gap_proposal);
    e.ece_draft_linear = r(e.ece_draft_linear);
    for d in e
        .deciles_proposal
        .iter_mut()
        .chain(e.deciles_draft_linear.iter_mut())
    {
        d.score_low = round4(d.score_low);
        d.score_high = round4(d.score_high);
        d.predicted = round4(d.predicted);
        d.observed = round4(d.observed);
    }
    for p in e.roc_draft.iter_mut().chain(e.roc_proposal.iter_mut()) {
        *p = (round4(p.0), round4(p.1));
    }
    e
}

/// The worst decile (largest gap, at least `MIN_DECILE` subject-days) of an evaluation.
fn drift_period(e: &Evaluation) -> Option<Decile> {
    e.deciles_proposal
        .iter()
        .filter(|x| x.n >= MIN_DECILE)
        .max_by(|a, b| {
            (a.observed - a.predicted)
                .abs()
                .total_cmp(&(b.observed - b.predicted).abs())
        })
        .copied()
}

/// Whether at least a quarter of the worst decile's subject-days sit under one live gate whose
/// check sees no kind of paid-call failure (the label does not count its harm), and which.
fn worst_capped_by(
    table: &Table,
    live: &Rubric,
    rows: &[usize],
    score: &dyn Fn(usize) -> f64,
    worst: &Option<Decile>,
) -> Option<(String, u64, u64, f64)> {
    let w = worst.as_ref()?;
    // The deciles' bounds are rounded to 4 decimals.
    let inside: Vec<usize> = rows
        .iter()
        .copied()
        .filter(|&i| (w.score_low - 1e-4..=w.score_high + 1e-4).contains(&score(i)))
        .collect();
    let failure_checks: Vec<CheckId> = super::labels::FailureKind::ALL
        .iter()
        .map(|k| k.check())
        .collect();
    live.gates
        .iter()
        .enumerate()
        .filter(|(g, gate)| *g < 32 && !failure_checks.contains(&gate.check))
        .map(|(g, _)| {
            let capped: Vec<usize> = inside
                .iter()
                .copied()
                .filter(|&i| table.rows[i].gates_binding & (1 << g) != 0)
                .collect();
            let failing = capped
                .iter()
                .filter(|&&i| table.rows[i].label.is_some_and(|l| l.fails))
                .count();
            let share = if capped.is_empty() {
                0.0
            } else {
                failing as f64 / capped.len() as f64
            };
            (
                table.gates[g].clone(),
                capped.len() as u64,
                inside.len() as u64,
                share,
            )
        })
        .filter(|(_, n, of, _)| *of > 0 && *n * 4 >= *of && *n > 0)
        .max_by_key(|(_, n, _, _)| *n)
}

/// A row's capped score with the proposed gates applied (each binding one caps it).
fn gated(table: &Table, row: usize, score: crate::score::points::Points, new: &[NewGate]) -> f64 {
    new.iter()
        .filter(|g| table.candidate_fail_weight(row, g.column) >= g.threshold)
        .fold(score.as_f64(), |s, g| s.min(g.cap))
}

/// Whether a proposed gate binds in a row.
fn binds(table: &Table, row: usize, new: &[NewGate]) -> bool {
    new.iter()
        .any(|g| table.candidate_fail_weight(row, g.column) >= g.threshold)
}

/// Subjects with a failing label, and how many of them were still `unverified` on the day 7 days
/// after their first score (the latest score at or before it), under `verdict` (by row index).
fn failing_unverified(table: &Table, verdict: &dyn Fn(usize) -> Verdict) -> (usize, usize) {
    let (mut failing, mut unverified) = (0, 0);
    let mut start = 0;
    while start < table.rows.len() {
        let subject = table.rows[start].subject;
        let mut end = start;
        while end < table.rows.len() && table.rows[end].subject == subject {
            end += 1;
        }
        let rows = &table.rows[start..end];
        let first = rows.iter().map(|r| r.day).min().unwrap_or(0);
        let bad = rows.iter().any(|r| r.label.is_some_and(|l| l.fails));
        let at_7 = (start..end)
            .filter(|&i| table.rows[i].day <= first + 7)
            .max_by_key(|&i| table.rows[i].day);
        if bad && rows.iter().any(|r| r.day >= first + 7) {
            failing += 1;
            if at_7.is_some_and(|i| verdict(i) == Verdict::Unverified) {
                unverified += 1;
            }
        }
        start = end;
    }
    (failing, unverified)
}

/// Grade minimums from the targets: the lowest whole score whose predicted rate is at most the
/// target, where the fit period has at least `MIN_SIDE` subject-days on each side; the draft's
/// otherwise. Kept strictly decreasing from A down; F stays at 0.
fn fit_grades(live: &Rubric, mapping: &[(f64, f64)], fit_scores: &[f64]) -> Vec<GradeFit> {
    let mut out: Vec<GradeFit> = Vec::new();
    let mut ceiling = 101.0;
    for step in &live.grades {
        let target = GRADE_TARGETS
            .iter()
            .find(|(g, _)| *g == step.grade)
            .map(|t| t.1);
        let (mut proposed, mut why) = match target {
            None => (step.min, "no target: kept".to_string()),
            Some(t) => match (0..=100)
                .map(f64::from)
                // The mapping's rates have 4 decimals: a hair over the target in binary is on it.
                .find(|s| fit::predict(mapping, *s) <= t + 1e-9)
            {
                None => (
                    step.min,
                    format!("the mapping never predicts {t} or less: kept"),
                ),
                Some(s) => {
                    let above = fit_scores.iter().filter(|x| **x >= s).count();
                    let below = fit_scores.len() - above;
                    if above >= MIN_SIDE && below >= MIN_SIDE {
                        (
                            s,
                            format!(
                                "lowest score predicted at or under {t}: {above} fitted \
                                 subject-days at or above, {below} below"
                            ),
                        )
                    } else {
                        (
                            step.min,
                            format!(
                                "score {s} would meet {t} but only {above} fitted subject-days \
                                 lie at or above it and {below} below ({MIN_SIDE} needed each \
                                 side): kept"
                            ),
                        )
                    }
                }
            },
        };
        if proposed >= ceiling {
            // The grade above kept its minimum under the fitted one here: moving this one only
            // to squeeze it a point under would make a grade no wider than a point.
            if step.min < ceiling {
                why.push_str(&format!(
                    "; but {proposed} is not under the grade above ({ceiling}): the draft's {} \
                     kept",
                    step.min
                ));
                proposed = step.min;
            } else {
                proposed = ceiling - 1.0;
                why.push_str("; lowered to stay under the grade above");
            }
        }
        if step.min == 0.0 {
            proposed = 0.0;
        }
        ceiling = proposed;
        out.push(GradeFit {
            grade: step.grade.clone(),
            target_rate: target,
            draft_min: step.min,
            proposed_min: proposed,
            why,
        });
    }
    out
}

/// Why the calibration goals are missed, from the report's own figures.
fn calibration_why(period: &Evaluation, d: &Drift) -> String {
    let pct = |x: f64| format!("{:.1}%", x * 100.0);
    let mut why = String::new();
    if let (Some(fit), Some(later)) = (d.fit_fail_share, d.later_fail_share) {
        if (later - fit).abs() >= 0.02 {
            why.push_str(&format!(
                "the held-out period's subject-days fail at {} against {} in the fit period: the map, \
                 fitted on the earlier days, {} the later ones (the population is not stationary). ",
                pct(later),
                pct(fit),
                if later > fit { "under-predicts" } else { "over-predicts" }
            ));
        } else {
            why.push_str(&format!(
                "the failure share is stable ({} fit, {} held out): the miss is in the map's shape. ",
                pct(fit),
                pct(later)
            ));
        }
    }
    if let Some(w) = drift_period(period) {
        why.push_str(&format!(
            "The worst decile (scores {}-{}, {} subject-days) was predicted {} and observed {}. ",
            w.score_low,
            w.score_high,
            w.n,
            pct(w.predicted),
            pct(w.observed)
        ));
    }
    if let Some((gate, n, of, share)) = &d.worst_capped_by {
        why.push_str(&format!(
            "{n} of its {of} subject-days are held at the cap of the live gate {gate}, whose check \
             sees no kind of paid-call failure, and {} of those fail: the label does not count \
             that harm, so these subject-days score below others that do fail, and no \
             non-increasing map can follow both. What would fix it: a calibration that reads such subject-days on their score \
             before that cap, or a label that counts the harm; either is a change to what the \
             rubric calibrates and belongs in a proposal, with this report as its evidence.",
            pct(*share)
        ));
    } else {
        why.push_str(
            "What would fix it: a map fitted nearest the as-of day (a rolling window) or one that \
             models the drift of the failure share, and more subject-days per decile; a change to \
             what the rubric calibrates belongs in a proposal, with this report as its evidence.",
        );
    }
    why
}

fn goals(period: &Evaluation, v: &Verdicts, d: &Drift) -> Vec<Goal> {
    let atleast = |x: Option<f64>, t: f64| x.map(|x| x >= t);
    let atmost = |x: Option<f64>, t: f64| x.map(|x| x <= t);
    let ranking_why = || {
        format!(
            "The checks that rank best are {}; a failure that starts after the as-of day leaves \
             no evidence before it, so no check can rank it. What would fix it: more paid samples \
             per subject (the paid checks carry the ranking) and a longer follow-up.",
            if d.top_checks.is_empty() {
                "none".to_string()
            } else {
                let ids: Vec<&str> = d.top_checks.iter().map(|c| c.as_str()).collect();
                ids.join(", ")
            }
        )
    };
    let mut goals = vec![
        Goal {
            goal: "AUC of the score for a failed paid call in the next 14 days (held-out period)",
            target: ">= 0.90".into(),
            measured: period.auc_proposal,
            met: atleast(period.auc_proposal, 0.90),
            shortfall: None,
            why: None,
        },
        Goal {
            goal: "expected calibration error over deciles of >= 30 subject-days (held-out period)",
            target: "<= 0.05".into(),
            measured: period.ece_proposal,
            met: atmost(period.ece_proposal, 0.05),
            shortfall: None,
            why: None,
        },
        Goal {
            goal: "largest gap of a decile of >= 30 subject-days (held-out period)",
            target: "<= 0.05".into(),
            measured: period.max_decile_gap_proposal,
            met: atmost(period.max_decile_gap_proposal, 0.05),
            shortfall: None,
            why: None,
        },
        Goal {
            goal: "Brier improvement over the draft (1 - score/100) on the held-out period",
            target: ">= 0.10".into(),
            measured: period.improvement_vs_linear,
            met: atleast(period.improvement_vs_linear, 0.10),
            shortfall: None,
            why: None,
        },
        Goal {
            goal: "Brier improvement over the draft with an isotonic map (held-out period)",
            target: "reported".into(),
            measured: period.improvement_vs_isotonic,
            met: None,
            shortfall: None,
            why: None,
        },
        Goal {
            goal: "share of avoid subject-days that fail",
            target: "reported".into(),
            measured: v.avoid_that_fail,
            met: None,
            shortfall: None,
            why: None,
        },
        Goal {
            goal: "share of ok subject-days that do not fail",
            target: "reported".into(),
            measured: v.ok_that_do_not_fail,
            met: None,
            shortfall: None,
            why: None,
        },
        Goal {
            goal: "share of failing subjects still unverified after 7 days",
            target: "reported".into(),
            measured: v.failing_unverified_after_7_days,
            met: None,
            shortfall: None,
            why: None,
        },
    ];
    for g in &mut goals {
        if g.met != Some(false) {
            continue;
        }
        let Some(measured) = g.measured else { continue };
        let (target, ranking) = match g.target.as_str() {
            ">= 0.90" => (0.90, true),
            "<= 0.05" => (0.05, false),
            ">= 0.10" => (0.10, true),
            _ => continue,
        };
        g.shortfall = Some(round4((measured - target).abs()));
        g.why = Some(if g.target.starts_with("<=") {
            calibration_why(period, d)
        } else if ranking && g.goal.starts_with("AUC") {
            ranking_why()
        } else {
            "The map adds less than the goal over the draft read as a chance; more labelled \
             subject-days in the fit period would steady it."
                .to_string()
        });
    }
    goals
}

/// The proposal's version: the next `-draft.N` (or `-draft.1` after another prerelease), or the
/// version's core when freezing.
pub fn next_version(version: &str, freeze: bool) -> String {
    let (core, pre) = version.split_once('-').unwrap_or((version, ""));
    if freeze {
        return core.to_string();
    }
    match pre
        .strip_prefix("draft.")
        .and_then(|n| n.parse::<u64>().ok())
    {
        Some(n) => format!("{core}-draft.{}", n + 1),
        None => format!("{core}-draft.1"),
    }
}

/// The live rubric file with the fitted parts replaced (key order kept), as pretty JSON.
fn proposal_bytes(
    live_bytes: &[u8],
    version: &str,
    fitted: &Fitted,
    report: &Report,
    opts: &Options,
) -> Result<Vec<u8>, JobError> {
    use serde_json::{Value, json};
    let mut v: Value = serde_json::from_slice(live_bytes).map_err(JobError::LiveJson)?;
    v["version"] = json!(version);
    if let Some(checks) = v["checks"].as_array_mut() {
        for c in checks.iter_mut() {
            if let Some(fit) = fitted.curves.iter().find(|f| c["id"] == f.check.as_str()) {
                c["curve"]["points"] = json!(
                    fit.x_ms
                        .iter()
                        .zip(&fit.fitted_y)
                        .map(|(x, y)| json!([x, y]))
                        .collect::<Vec<_>>()
                );
            }
        }
    }
    if let Some(grades) = v["grades"].as_array_mut() {
        for g in grades.iter_mut() {
            if let Some(fit) = fitted
                .grades
                .iter()
                .find(|f| g["grade"] == f.grade.as_str())
            {
                g["min"] = json!(fit.proposed_min);
            }
        }
    }
    let added: Vec<Value> = fitted.gates.iter().filter_map(gates::gate_json).collect();
    if !added.is_empty() {
        match v["gates"].as_array_mut() {
            Some(list) => list.extend(added.iter().cloned()),
            None => v["gates"] = json!(added),
        }
    }
    v["calibration"] = json!({
        "horizon_days": opts.horizon_days,
        "points": fitted.calibration.iter().map(|(s, r)| json!([s, r])).collect::<Vec<_>>(),
    });
    let p = &report.held_out_period;
    let show = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{x}"));
    let line = format!(
        "{version} ({}): recalibrated against {} ({} subjects, {} labelled subject-days, fit on {} \
         before {}): curve y values {}; a calibration of {} points (score to {}-day paid-call \
         failure rate); grade minimums {}; Brier on the later days {} (draft as 1 - score/100) \
         -> {}; AUC {} -> {}. {}",
        report.as_of,
        opts.labels,
        report.counts.subjects_followed_up,
        report.counts.eligible_rows,
        report.counts.fit_rows,
        report.counts.split_day,
        fitted
            .curves
            .iter()
            .map(|c| format!("{} {:?}", c.check, c.fitted_y))
            .collect::<Vec<_>>()
            .join(", "),
        fitted.calibration.len(),
        opts.horizon_days,
        fitted
            .grades
            .iter()
            .map(|g| format!("{} {}", g.grade, g.proposed_min))
            .collect::<Vec<_>>()
            .join(", "),
        show(p.brier_draft_linear),
        show(p.brier_proposal),
        show(p.auc_draft),
        show(p.auc_proposal),
        gates_line(fitted),
    );
    match v["changelog"].as_array_mut() {
        Some(log) => log.push(json!(line)),
        None => v["changelog"] = json!([line]),
    }
    Ok(rubric_style(&whole_numbers(v)))
}

/// The changelog's sentence on gates: those added, with their evidence, or that none were.
fn gates_line(fitted: &Fitted) -> String {
    let added: Vec<String> = fitted
        .gates
        .iter()
        .filter(|e| e.proposed.is_some())
        .map(|e| format!("{} on {} ({})", e.flag, e.check, e.why))
        .collect();
    if added.is_empty() {
        "Weights, structure and gates unchanged.".to_string()
    } else {
        format!(
            "Gates added: {}. Weights and the other gates unchanged.",
            added.join("; ")
        )
    }
}

/// Whole floats written as integers (`95`, not `95.0`), as the rubric file writes them.
fn whole_numbers(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(x) if n.is_f64() && x.fract() == 0.0 && x.abs() < 1e15 => Value::from(x as i64),
            _ => Value::Number(n),
        },
        Value::Array(a) => Value::Array(a.into_iter().map(whole_numbers).collect()),
        Value::Object(o) => {
            Value::Object(o.into_iter().map(|(k, v)| (k, whole_numbers(v))).collect())
        }
        other => other,
    }
}

/// Compact JSON with a space after each `:` and `,` (the rubric file's spelling).
struct Spaced;

impl serde_json::ser::Formatter for Spaced {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

fn spaced(v: &serde_json::Value) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Spaced);
    // Writing a Value into a Vec cannot fail.
    let _ = serde::Serialize::serialize(v, &mut ser);
    String::from_utf8(out).unwrap_or_default()
}

/// The rubric file's layout: one top-level key a line, the elements of a list of objects (or of
/// the changelog) one a line, each value compact.
fn rubric_style(v: &serde_json::Value) -> Vec<u8> {
    use serde_json::Value;
    let Value::Object(map) = v else {
        return format!("{}\n", spaced(v)).into_bytes();
    };
    let mut out = String::from("{\n");
    for (k, (key, value)) in map.iter().enumerate() {
        let name = spaced(&Value::String(key.clone()));
        match value {
            Value::Array(items)
                if !items.is_empty()
                    && items.iter().all(|i| i.is_object() || i.is_string())
                    && (items.len() > 1 || items[0].is_object()) =>
            {
                out.push_str(&format!("  {name}: [\n"));
                for (j, item) in items.iter().enumerate() {
                    let comma = if j + 1 < items.len() { "," } else { "" };
                    out.push_str(&format!("    {}{comma}\n", spaced(item)));
                }
                out.push_str("  ]");
            }
            _ => out.push_str(&format!("  {name}: {}", spaced(value))),
        }
        out.push_str(if k + 1 < map.len() { ",\n" } else { "\n" });
    }
    out.push_str("}\n");
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proposal_is_laid_out_like_the_rubric_file() {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"id": "x", "points": [[300.0, 95.0], [1000, 0.25]], "list": [{"a": 1}, {"b": [2]}], "log": ["one"]}"#,
        )
        .unwrap();
        let text = String::from_utf8(rubric_style(&whole_numbers(v.clone()))).unwrap();
        assert_eq!(
            text,
            "{\n  \"id\": \"x\",\n  \"points\": [[300, 95], [1000, 0.25]],\n  \"list\": [\n    {\"a\": 1},\n    {\"b\": [2]}\n  ],\n  \"log\": [\"one\"]\n}\n"
        );
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["points"][0][1], 95);
        assert_eq!(back["list"], v["list"]);
    }

    #[test]
    fn versions() {
        assert_eq!(next_version("1.0.0-draft.1", false), "1.0.0-draft.2");
        assert_eq!(next_version("1.0.0-draft.9", true), "1.0.0");
        assert_eq!(next_version("1.0.0-rc", false), "1.0.0-draft.1");
    }

    #[test]
    fn grade_minimums_follow_the_targets_with_evidence_on_both_sides() {
        let live = Rubric::embedded_default();
        // Rate falls from 0.5 at 40 to 0.0 at 90.
        let mapping = vec![(40.0, 0.5), (90.0, 0.0)];
        let scores: Vec<f64> = (0..1000).map(|i| f64::from(i % 101)).collect();
        let g = fit_grades(&live, &mapping, &scores);
        let mins: Vec<f64> = g.iter().map(|g| g.proposed_min).collect();
        // A: rate <= 0.02 from 88; B 0.05 from 85; C 0.10 from 80; D 0.20 from 70.
        assert_eq!(mins, vec![88.0, 85.0, 80.0, 70.0, 0.0]);
        // Too few subject-days above: the draft's minimum stays.
        let g = fit_grades(&live, &mapping, &[10.0; 100]);
        assert_eq!(g[0].proposed_min, 90.0);
        assert!(g[0].why.contains("kept"));
        // A and B cannot move (the map never gets that low), C's fitted boundary (91) lies above
        // B's: C and D keep the draft's minimums rather than being squeezed under B a point apart.
        let mapping = vec![(59.0, 0.9), (92.0, 0.06)];
        let scores: Vec<f64> = (0..1000).map(|i| 50.0 + f64::from(i % 45)).collect();
        let g = fit_grades(&live, &mapping, &scores);
        let mins: Vec<f64> = g.iter().map(|g| g.proposed_min).collect();
        assert_eq!(mins, vec![90.0, 80.0, 70.0, 60.0, 0.0]);
        assert!(
            g[2].why.contains("not under the grade above"),
            "{}",
            g[2].why
        );
    }
}
