//! The compact table the recalibration works on: one row per subject and UTC day, read from the
//! daily score documents and nothing else (each document is dropped as soon as its row is kept).
//! Pure: documents in, rows out, and the fast re-scoring of a row under other curve points.
//!
//! The fast re-scoring reproduces the scorer's arithmetic for what a recalibration may change
//! (the curve checks' points): a curve check contributes `Points::from_f64(points * y(p95) / 100)`
//! with `points` recomputed from the document's own dimension and check weights exactly as
//! `score::points::breakdown` does, every other check keeps its published contribution, and the
//! binding cap applies last. `Table::rescoring_mismatches` counts the rows where this does not give
//! back the stored capped score under the document's own curves (a test holds it at zero).

use super::gates::{Candidate, candidates, fail_weight};
use crate::rubric::{CheckId, Curve, Rubric, Verdict};
use crate::score::curve::interpolate;
use crate::score::document::ScoreDocument;
use crate::score::points::{Points, Share, renormalise};
use crate::score::tally::CheckState;

/// A curve check's cell in a row: what its contribution is recomputed from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CurveCell {
    /// The most the check can contribute in this document (exactly as the scorer computed it).
    pub max_points: f64,
    /// The weighted p95 in ms; `None` with a scored state means a failed request (+inf).
    pub p95_ms: Option<f64>,
    /// Only `Scored` cells move with the curve; `Prior` and `Na` keep their contribution.
    pub scored: bool,
    /// The contribution the document published.
    pub stored: Points,
}

/// A label joined to a row: whether a paid call in the horizon after the day failed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Label {
    pub fails: bool,
    /// The simulator's true failure rate over the window (absent for ledger labels).
    pub rate: Option<f32>,
}

/// One subject-day.
#[derive(Debug, Clone, PartialEq)]
pub struct DayRow {
    /// Index into `Table::subjects`.
    pub subject: u32,
    /// Days since 1970-01-01 (UTC).
    pub day: i32,
    /// The published score (before caps) and capped score.
    pub score: Points,
    pub capped: Points,
    /// The lowest cap among binding gates.
    pub cap: Option<Points>,
    pub verdict: Verdict,
    pub verified: bool,
    /// Bit `i`: the live rubric's gate `i` binds in this document.
    pub gates_binding: u32,
    /// Index into `Table::rubrics` (the rubric sha the document names).
    pub rubric: u16,
    pub label: Option<Label>,
}

/// Every row, and the per-check columns kept flat (one allocation per column, not per row).
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// The live rubric's check ids, in its order: the columns of `contributions`.
    pub checks: Vec<CheckId>,
    /// The live rubric's curve checks (indices into `checks`), in its order.
    pub curve_checks: Vec<usize>,
    /// The live rubric's gates, as `flag/check`.
    pub gates: Vec<String>,
    pub subjects: Vec<String>,
    /// Rubric versions and shas of the documents kept (same major only).
    pub rubrics: Vec<(String, String)>,
    pub rows: Vec<DayRow>,
    /// `rows.len() * checks.len()`: each check's published contribution (0 when absent).
    pub contributions: Vec<Points>,
    /// `rows.len() * curve_checks.len()`.
    pub curves: Vec<CurveCell>,
    /// `rows.len() * gates.len()`: each gate's decayed fail weight (0 when not applicable).
    pub gate_fail_weights: Vec<f32>,
    /// The checks a gate may be proposed on (`gates::candidates` of the live rubric).
    pub candidates: Vec<Candidate>,
    /// `rows.len() * candidates.len()`: each candidate's fail weight read from its published
    /// value and evidence weight (`gates::fail_weight`; 0 when not scored or absent).
    pub candidate_fail_weights: Vec<f32>,
    /// Documents under another major version than the live rubric's: counted, never kept.
    pub other_major_documents: u64,
    /// Documents that did not parse as score documents: counted, never kept.
    pub unreadable_documents: u64,
}

/// Why a document was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    OtherMajor,
    Unreadable,
}

impl Table {
    /// An empty table with the live rubric's columns.
    pub fn new(live: &Rubric) -> Table {
        Table {
            checks: live.checks.iter().map(|c| c.id).collect(),
            curve_checks: live
                .checks
                .iter()
                .enumerate()
                .filter(|(_, c)| c.curve.is_some())
                .map(|(i, _)| i)
                .collect(),
            gates: live
                .gates
                .iter()
                .map(|g| format!("{}/{}", g.flag, g.check))
                .collect(),
            candidates: candidates(live),
            ..Table::default()
        }
    }

    /// Keeps one stored document (bytes as the store holds them) as a row of `subject`, or counts
    /// it as skipped. The document is dropped on return.
    pub fn push_document(
        &mut self,
        live: &Rubric,
        subject: u32,
        day: i32,
        bytes: &[u8],
    ) -> Result<(), Skipped> {
        let Ok(doc) = ScoreDocument::from_slice(bytes) else {
            self.unreadable_documents += 1;
            return Err(Skipped::Unreadable);
        };
        if doc.rubric.major != live.major_version() {
            self.other_major_documents += 1;
            return Err(Skipped::OtherMajor);
        }
        self.push_parsed(live, subject, day, &doc);
        Ok(())
    }

    fn push_parsed(&mut self, live: &Rubric, subject: u32, day: i32, doc: &ScoreDocument) {
        let rubric = match self
            .rubrics
            .iter()
            .position(|(_, s)| *s == doc.rubric.sha256)
        {
            Some(i) => i,
            None => {
                self.rubrics
                    .push((doc.rubric.version.clone(), doc.rubric.sha256.clone()));
                self.rubrics.len() - 1
            }
        } as u16;
        let max_points = max_points_of(doc);
        let find = |id: CheckId| {
            doc.dimensions
                .iter()
                .flat_map(|d| d.checks.iter())
                .position(|c| c.id == id)
        };
        let flat: Vec<&crate::score::document::CheckDoc> = doc
            .dimensions
            .iter()
            .flat_map(|d| d.checks.iter())
            .collect();
        for id in &self.checks {
            self.contributions
                .push(find(*id).map_or(Points(0), |i| flat[i].contribution));
        }
        for &c in &self.curve_checks {
            let cell = match find(self.checks[c]) {
                Some(i) => CurveCell {
                    max_points: max_points[i],
                    p95_ms: flat[i].p95_ms,
                    scored: flat[i].state == CheckState::Scored,
                    stored: flat[i].contribution,
                },
                None => CurveCell {
                    max_points: 0.0,
                    p95_ms: None,
                    scored: false,
                    stored: Points(0),
                },
            };
            self.curves.push(cell);
        }
        for c in &self.candidates {
            self.candidate_fail_weights
                .push(find(self.checks[c.check]).map_or(0.0, |i| fail_weight(flat[i]) as f32));
        }
        let mut gates_binding = 0u32;
        for (i, g) in live.gates.iter().enumerate() {
            let found = doc
                .gates
                .iter()
                .find(|d| d.flag == g.flag && d.check == g.check);
            if found.is_some_and(|d| d.binding) && i < 32 {
                gates_binding |= 1 << i;
            }
            self.gate_fail_weights
                .push(found.and_then(|d| d.fail_weight).unwrap_or(0.0) as f32);
        }
        self.rows.push(DayRow {
            subject,
            day,
            score: doc.score,
            capped: doc.capped_score,
            cap: doc.cap.cap.map(Points::from_f64),
            verdict: doc.verdict.verdict,
            verified: doc.verdict.verification.verified,
            gates_binding,
            rubric,
            label: None,
        });
    }

    /// The published contribution of check column `check` in row `row`.
    pub fn contribution(&self, row: usize, check: usize) -> Points {
        self.contributions[row * self.checks.len() + check]
    }

    /// Candidate column `column`'s fail weight in row `row`.
    pub fn candidate_fail_weight(&self, row: usize, column: usize) -> f64 {
        f64::from(self.candidate_fail_weights[row * self.candidates.len() + column])
    }

    /// The curve cells of row `row`, in `curve_checks` order.
    pub fn curve_cells(&self, row: usize) -> &[CurveCell] {
        let n = self.curve_checks.len();
        &self.curves[row * n..(row + 1) * n]
    }

    /// Row `row`'s capped score with the curve checks read through `curves` (in `curve_checks`
    /// order), optionally leaving check column `without` out (its contribution removed).
    pub fn rescore(&self, row: usize, curves: &[&Curve], without: Option<usize>) -> Points {
        let r = &self.rows[row];
        let mut total = r.score;
        for (k, cell) in self.curve_cells(row).iter().enumerate() {
            if cell.scored {
                total = total - cell.stored + curve_contribution(cell, curves[k]);
            }
        }
        if let Some(check) = without {
            let moved = self.curve_checks.iter().position(|c| *c == check);
            total = total
                - match moved {
                    Some(k) if self.curve_cells(row)[k].scored => {
                        curve_contribution(&self.curve_cells(row)[k], curves[k])
                    }
                    _ => self.contribution(row, check),
                };
        }
        match r.cap {
            Some(cap) => total.min(cap),
            None => total,
        }
    }

    /// Rows whose fast re-scoring under their own curves does not give back the stored capped
    /// score (the document's curves are those of the rubric it names; `own` gives them by the
    /// row's rubric index, or `None` when that rubric is not at hand: such rows are not counted).
    pub fn rescoring_mismatches(&self, own: &[Option<Vec<&Curve>>]) -> u64 {
        (0..self.rows.len())
            .filter(|&i| {
                own.get(usize::from(self.rows[i].rubric))
                    .and_then(Option::as_ref)
                    .is_some_and(|curves| self.rescore(i, curves, None) != self.rows[i].capped)
            })
            .count() as u64
    }
}

/// A scored curve check's contribution under `curve`, as `score::points::breakdown` computes it.
pub fn curve_contribution(cell: &CurveCell, curve: &Curve) -> Points {
    let p95 = cell.p95_ms.unwrap_or(f64::INFINITY);
    Points::from_f64(cell.max_points * (interpolate(curve, p95) / 100.0))
}

/// Each check's maximum points in a document (flattened dimension order), recomputed from the
/// document's own weights by the scorer's own renormalisation (the rounded `points` the document
/// shows would not give the stored contributions back exactly).
fn max_points_of(doc: &ScoreDocument) -> Vec<f64> {
    let dimension_weights: Vec<f64> = doc.dimensions.iter().map(|d| d.weight).collect();
    let shares: Vec<Share> = doc
        .dimensions
        .iter()
        .enumerate()
        .flat_map(|(d, dim)| {
            dim.checks.iter().map(move |c| Share {
                dimension: Some(d),
                weight: c.weight,
                scorable: c.state != CheckState::Na && c.weight > 0.0,
            })
        })
        .collect();
    renormalise(&dimension_weights, &shares).2
}

/// Days since 1970-01-01 of `YYYY-MM-DD` (None when it is not a date).
pub fn day_number(day: &str) -> Option<i32> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let date = time::Date::parse(day, &format).ok()?;
    Some(
        date.to_julian_day()
            - time::Date::from_calendar_date(1970, time::Month::January, 1)
                .ok()?
                .to_julian_day(),
    )
}

/// `YYYY-MM-DD` of a day number.
pub fn day_text(day: i32) -> String {
    let epoch = time::Date::from_calendar_date(1970, time::Month::January, 1)
        .map(|d| d.to_julian_day())
        .unwrap_or(2_440_588);
    time::Date::from_julian_day(epoch + day)
        .map(|d| format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_numbers_round_trip() {
        assert_eq!(day_number("1970-01-01"), Some(0));
        assert_eq!(day_number("2026-03-01"), Some(20_513));
        assert_eq!(day_text(20_513), "2026-03-01");
        assert_eq!(day_number("2026-02-30"), None);
        assert_eq!(day_number("nope"), None);
    }
}
