//! Every rule a rubric file must satisfy before anything is scored under it.

use super::{CheckId, Metric, Rubric, RubricError, SUPPORTED_SCHEMA};
use std::collections::HashSet;

fn invalid(message: impl Into<String>) -> RubricError {
    RubricError::Invalid(message.into())
}

/// Dimension weights must add up to this (within rounding of decimal text).
const DIMENSION_TOTAL: f64 = 100.0;
const TOLERANCE: f64 = 1e-9;

/// `MAJOR.MINOR.PATCH` with an optional `-prerelease`; returns MAJOR.
pub(super) fn major_version(version: &str) -> Result<u64, RubricError> {
    let core = version.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    let numeric = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if parts.len() != 3 || !parts.iter().all(numeric) {
        return Err(invalid(format!(
            "version {version:?} is not MAJOR.MINOR.PATCH[-prerelease]"
        )));
    }
    parts[0]
        .parse()
        .map_err(|_| invalid(format!("version {version:?}: major version too large")))
}

fn finite_positive(what: &str, x: f64) -> Result<(), RubricError> {
    if x.is_finite() && x > 0.0 {
        Ok(())
    } else {
        Err(invalid(format!(
            "{what} must be a positive number, got {x}"
        )))
    }
}

pub(super) fn validate(file: &Rubric) -> Result<(), RubricError> {
    if file.schema != SUPPORTED_SCHEMA {
        return Err(invalid(format!(
            "schema {:?} is not supported (expected {SUPPORTED_SCHEMA:?})",
            file.schema
        )));
    }
    if file.id.trim().is_empty() {
        return Err(invalid("id is empty"));
    }
    if file.subject_types.is_empty() {
        return Err(invalid("subject_types is empty"));
    }
    validate_dimensions(file)?;
    finite_positive("decay.free", file.decay.free)?;
    finite_positive("decay.paid", file.decay.paid)?;
    validate_checks(file)?;
    validate_gates(file)?;
    validate_grades_and_confidence(file)?;
    validate_verdict(file)?;
    validate_calibration(file)?;
    validate_rest(file)
}

/// The optional calibration: a monotone mapping of scores (0..=100, strictly increasing) to
/// failure rates (0..=1, non-increasing).
fn validate_calibration(file: &Rubric) -> Result<(), RubricError> {
    let Some(c) = &file.calibration else {
        return Ok(());
    };
    if !(1..=365).contains(&c.horizon_days) {
        return Err(invalid(format!(
            "calibration.horizon_days must be 1 to 365, got {}",
            c.horizon_days
        )));
    }
    if c.points.len() < 2 {
        return Err(invalid("calibration needs at least 2 points"));
    }
    for &(score, rate) in &c.points {
        if !(score.is_finite() && (0.0..=100.0).contains(&score)) {
            return Err(invalid(format!(
                "calibration score {score} must be in 0..=100"
            )));
        }
        if !(rate.is_finite() && (0.0..=1.0).contains(&rate)) {
            return Err(invalid(format!("calibration rate {rate} must be in 0..=1")));
        }
    }
    for pair in c.points.windows(2) {
        let ((s0, r0), (s1, r1)) = (pair[0], pair[1]);
        if s1 <= s0 {
            return Err(invalid(format!(
                "calibration is not monotone: scores must strictly increase ({s0} then {s1})"
            )));
        }
        if r1 > r0 {
            return Err(invalid(format!(
                "calibration is not monotone: the rate must not rise with the score ({r0} then {r1})"
            )));
        }
    }
    Ok(())
}

fn validate_dimensions(file: &Rubric) -> Result<(), RubricError> {
    if file.dimensions.is_empty() {
        return Err(invalid("no dimensions"));
    }
    let mut seen = HashSet::new();
    let mut total = 0.0;
    for d in &file.dimensions {
        if !seen.insert(d.id.as_str()) {
            return Err(invalid(format!("duplicate dimension id {:?}", d.id)));
        }
        finite_positive(&format!("dimension {:?} weight", d.id), d.weight)?;
        total += d.weight;
    }
    if (total - DIMENSION_TOTAL).abs() > TOLERANCE {
        return Err(invalid(format!(
            "dimension weights add up to {total}, not {DIMENSION_TOTAL}"
        )));
    }
    Ok(())
}

fn validate_checks(file: &Rubric) -> Result<(), RubricError> {
    if file.checks.is_empty() {
        return Err(invalid("no checks"));
    }
    let mut seen = HashSet::new();
    for c in &file.checks {
        if !seen.insert(c.id) {
            return Err(invalid(format!("duplicate check id {:?}", c.id.as_str())));
        }
        if !file.dimensions.iter().any(|d| d.id == c.dimension) {
            return Err(invalid(format!(
                "check {} names unknown dimension {:?}",
                c.id, c.dimension
            )));
        }
        if !(c.weight.is_finite() && c.weight >= 0.0) {
            return Err(invalid(format!(
                "check {} weight must be a number >= 0, got {}",
                c.id, c.weight
            )));
        }
        if let Some(h) = c.half_life_days {
            finite_positive(&format!("check {} half_life_days", c.id), h)?;
        }
        match (c.metric, &c.curve) {
            (Metric::Rate, Some(_)) => {
                return Err(invalid(format!(
                    "check {} is a rate check but has a curve",
                    c.id
                )));
            }
            (Metric::Curve, None) => {
                return Err(invalid(format!(
                    "check {} is a curve check without a curve",
                    c.id
                )));
            }
            (Metric::Curve, Some(curve)) => validate_curve(c.id, &curve.points)?,
            (Metric::Rate, None) => {}
        }
    }
    for d in &file.dimensions {
        let weight: f64 = file
            .checks
            .iter()
            .filter(|c| c.dimension == d.id)
            .map(|c| c.weight)
            .sum();
        if weight <= 0.0 {
            return Err(invalid(format!(
                "dimension {:?} has no check with a positive weight",
                d.id
            )));
        }
    }
    Ok(())
}

fn validate_curve(check: CheckId, points: &[(f64, f64)]) -> Result<(), RubricError> {
    if points.len() < 2 {
        return Err(invalid(format!(
            "check {check}: a curve needs at least 2 points"
        )));
    }
    for (x, y) in points {
        if !(x.is_finite() && *x > 0.0) {
            return Err(invalid(format!(
                "check {check}: curve x {x} must be > 0 (the curve is read in log space)"
            )));
        }
        if !(y.is_finite() && (0.0..=100.0).contains(y)) {
            return Err(invalid(format!(
                "check {check}: curve y {y} must be in 0..=100"
            )));
        }
    }
    for pair in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
        if x1 <= x0 {
            return Err(invalid(format!(
                "check {check}: curve is not monotone: x must strictly increase ({x0} then {x1})"
            )));
        }
        if y1 > y0 {
            return Err(invalid(format!(
                "check {check}: curve is not monotone: y must not increase with latency ({y0} then {y1})"
            )));
        }
    }
    Ok(())
}

fn validate_gates(file: &Rubric) -> Result<(), RubricError> {
    for (i, g) in file.gates.iter().enumerate() {
        let name = format!("gate #{i} ({})", g.flag);
        if g.flag.trim().is_empty() {
            return Err(invalid(format!("gate #{i} has an empty flag")));
        }
        if !file.checks.iter().any(|c| c.id == g.check) {
            return Err(invalid(format!(
                "{name} watches check {:?}, which the rubric does not have",
                g.check.as_str()
            )));
        }
        finite_positive(&format!("{name} value"), g.value)?;
        if let Some(cap) = g.cap
            && !(cap.is_finite() && (0.0..=100.0).contains(&cap))
        {
            return Err(invalid(format!("{name} cap {cap} must be in 0..=100")));
        }
        if g.clear_after_passes == Some(0) {
            return Err(invalid(format!("{name} clear_after_passes must be >= 1")));
        }
        // Only a fail-weight gate needs passes to clear: the other two clear on the next pass
        // (failing_for_hours) or with time (failed_within_hours) by their own definition.
        if g.clear_after_passes.is_some() && g.when != super::GateWhen::FailWeightGte {
            return Err(invalid(format!(
                "{name}: clear_after_passes is only defined for fail_weight_gte gates"
            )));
        }
        if g.cap.is_none() && g.verdict.is_none() && !g.stale && !g.watch {
            return Err(invalid(format!(
                "{name} does nothing (no cap, verdict, stale or watch)"
            )));
        }
    }
    Ok(())
}

fn validate_grades_and_confidence(file: &Rubric) -> Result<(), RubricError> {
    if file.grades.is_empty() {
        return Err(invalid("no grades"));
    }
    let mut seen = HashSet::new();
    for g in &file.grades {
        if !seen.insert(g.grade.as_str()) {
            return Err(invalid(format!("duplicate grade {:?}", g.grade)));
        }
        if !(g.min.is_finite() && (0.0..=100.0).contains(&g.min)) {
            return Err(invalid(format!(
                "grade {} min {} must be in 0..=100",
                g.grade, g.min
            )));
        }
    }
    for pair in file.grades.windows(2) {
        if pair[1].min >= pair[0].min {
            return Err(invalid(format!(
                "bad grade order: {} (min {}) must have a lower min than {} (min {})",
                pair[1].grade, pair[1].min, pair[0].grade, pair[0].min
            )));
        }
    }
    if file.grades.last().map(|g| g.min) != Some(0.0) {
        return Err(invalid(
            "the last grade must have min 0 so every score has a grade",
        ));
    }
    if file.confidence.is_empty() {
        return Err(invalid("no confidence levels"));
    }
    let mut seen = HashSet::new();
    for c in &file.confidence {
        if !seen.insert(c.level.as_str()) {
            return Err(invalid(format!("duplicate confidence level {:?}", c.level)));
        }
        finite_positive(&format!("confidence {} max_width", c.level), c.max_width)?;
    }
    for pair in file.confidence.windows(2) {
        if pair[1].max_width <= pair[0].max_width {
            return Err(invalid(format!(
                "bad confidence order: {} must have a larger max_width than {}",
                pair[1].level, pair[0].level
            )));
        }
    }
    if file.confidence.last().map(|c| c.max_width < 100.0) == Some(true) {
        return Err(invalid(
            "the last confidence level must have max_width >= 100 so every band has a level",
        ));
    }
    Ok(())
}

fn validate_verdict(file: &Rubric) -> Result<(), RubricError> {
    let v = &file.verdict;
    if !file.checks.iter().any(|c| c.id == v.probe_check) {
        return Err(invalid(format!(
            "verdict.probe_check names check {:?}, which the rubric does not have",
            v.probe_check.as_str()
        )));
    }
    if v.min_probes == 0 {
        return Err(invalid("verdict.min_probes must be >= 1"));
    }
    if !(v.min_span_days.is_finite() && v.min_span_days >= 0.0) {
        return Err(invalid("verdict.min_span_days must be >= 0"));
    }
    finite_positive("verdict.paid_within_days", v.paid_within_days)?;
    for g in v.avoid_grades.iter().chain(&v.caution_grades) {
        if !file.grades.iter().any(|s| &s.grade == g) {
            return Err(invalid(format!("verdict names unknown grade {g:?}")));
        }
    }
    for c in &v.caution_confidence {
        if !file.confidence.iter().any(|s| &s.level == c) {
            return Err(invalid(format!(
                "verdict names unknown confidence level {c:?}"
            )));
        }
    }
    Ok(())
}

fn validate_rest(file: &Rubric) -> Result<(), RubricError> {
    let o = &file.outlook;
    finite_positive("outlook.recent_days", o.recent_days)?;
    finite_positive("outlook.baseline_days", o.baseline_days)?;
    finite_positive("outlook.delta", o.delta)?;
    if o.recent_days >= o.baseline_days {
        return Err(invalid(
            "outlook.recent_days must be shorter than baseline_days",
        ));
    }
    finite_positive("watch.revision_days", file.watch.revision_days)?;
    let mc = &file.monte_carlo;
    if mc.draws < 100 {
        return Err(invalid("monte_carlo.draws must be >= 100"));
    }
    let (lo, hi) = mc.band;
    if !(lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo < hi && hi <= 100.0) {
        return Err(invalid(format!(
            "monte_carlo.band [{lo}, {hi}] must be two percentiles 0 <= low < high <= 100"
        )));
    }
    if file.value.inside_score {
        return Err(invalid(
            "value.inside_score is true: this scorer keeps value beside the score, never inside",
        ));
    }
    Ok(())
}
