//! Points on the published scale, and how a set of check values becomes them.
//!
//! Every check's contribution is rounded once to 4 decimals and held as an integer number of
//! ten-thousandths; the score is defined as the sum of those integers, so the published
//! contributions add up to the published score exactly, digit for digit.

use super::tally::{CheckState, Tally};
use crate::rubric::Rubric;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Ten-thousandths of a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Points(pub i64);

pub const SCALE: f64 = 10_000.0;

impl Points {
    /// Round half away from zero to the nearest ten-thousandth.
    pub fn from_f64(x: f64) -> Points {
        Points((x * SCALE).round() as i64)
    }
    pub fn as_f64(self) -> f64 {
        self.0 as f64 / SCALE
    }
}

impl std::ops::Add for Points {
    type Output = Points;
    fn add(self, other: Points) -> Points {
        Points(self.0 + other.0)
    }
}

impl std::ops::Sub for Points {
    type Output = Points;
    fn sub(self, other: Points) -> Points {
        Points(self.0 - other.0)
    }
}

impl std::iter::Sum for Points {
    fn sum<I: Iterator<Item = Points>>(iter: I) -> Points {
        Points(iter.map(|p| p.0).sum())
    }
}

impl Serialize for Points {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.as_f64())
    }
}

/// Read back from the published decimal: exact, since every published value is a whole number
/// of ten-thousandths well inside 2^53.
impl<'de> Deserialize<'de> for Points {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Points, D::Error> {
        f64::deserialize(d).map(Points::from_f64)
    }
}

/// Magnitudes from which a double has no digit below 1e-4 left to round: 2^53 / 10^4. Above it
/// `x * 10^4` is already a whole number (and could overflow), so the value is kept as it is.
const ROUND4_LIMIT: f64 = 9_007_199_254_740_992.0 / SCALE;

/// A float rounded to 4 decimals (half away from zero), for every other published number. Done in
/// doubles, not through `Points` (an `i64`), so nothing saturates: a p95 of 1e15 ms stays 1e15.
pub fn round4(x: f64) -> f64 {
    if x.is_finite() && x.abs() < ROUND4_LIMIT {
        (x * SCALE).round() / SCALE
    } else {
        x
    }
}

/// How the checks' values became points.
#[derive(Debug, Clone, PartialEq)]
pub struct Breakdown {
    /// Sum of the weights of the dimensions with something scorable (100 when all are).
    pub denominator: f64,
    /// Per dimension (rubric order): its check weight total over scorable checks (0 = left out).
    pub dimension_check_weight: Vec<f64>,
    /// Per check (rubric order): the most it can contribute (0 when not scorable).
    pub max_points: Vec<f64>,
    /// Per check: its rounded contribution.
    pub contributions: Vec<Points>,
    /// The score: the sum of `contributions`.
    pub total: Points,
}

/// A check is scorable when it applies to the subject (not `na`) and carries weight.
pub fn is_scorable(weight: f64, tally: &Tally) -> bool {
    tally.state != CheckState::Na && weight > 0.0
}

/// One check as the renormalisation sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// Its dimension's index (None: a dimension the rubric does not have, never scored).
    pub dimension: Option<usize>,
    pub weight: f64,
    pub scorable: bool,
}

/// The renormalisation over what is scorable, in one place: each dimension's scorable check
/// weight, the denominator (the weights of dimensions with any) and each check's maximum points,
/// with the same operations in the same order wherever it is computed (the scorer here, the
/// recalibration's fast re-scoring from a stored document), so both get the same doubles.
pub fn renormalise(dimension_weights: &[f64], checks: &[Share]) -> (Vec<f64>, f64, Vec<f64>) {
    let dimension_check_weight: Vec<f64> = (0..dimension_weights.len())
        .map(|d| {
            checks
                .iter()
                .filter(|c| c.dimension == Some(d) && c.scorable)
                .map(|c| c.weight)
                .fold(0.0, |a, b| a + b)
        })
        .collect();
    let denominator: f64 = dimension_weights
        .iter()
        .zip(&dimension_check_weight)
        .filter(|(_, w)| **w > 0.0)
        .map(|(d, _)| *d)
        .fold(0.0, |a, b| a + b);
    let max_points = checks
        .iter()
        .map(|c| match c.dimension {
            Some(i) if denominator > 0.0 && c.scorable => {
                100.0
                    * (dimension_weights[i] / denominator)
                    * (c.weight / dimension_check_weight[i])
            }
            _ => 0.0,
        })
        .collect();
    (dimension_check_weight, denominator, max_points)
}

/// Renormalise over what is scorable and turn values into rounded contributions.
pub fn breakdown(rubric: &Rubric, tallies: &[Tally]) -> Breakdown {
    let dimension_weights: Vec<f64> = rubric.dimensions.iter().map(|d| d.weight).collect();
    let shares: Vec<Share> = rubric
        .checks
        .iter()
        .zip(tallies)
        .map(|(check, tally)| Share {
            dimension: rubric
                .dimensions
                .iter()
                .position(|d| d.id == check.dimension),
            weight: check.weight,
            scorable: is_scorable(check.weight, tally),
        })
        .collect();
    let (dimension_check_weight, denominator, max_points) =
        renormalise(&dimension_weights, &shares);
    let contributions: Vec<Points> = max_points
        .iter()
        .zip(tallies)
        .map(|(points, tally)| Points::from_f64(points * tally.value))
        .collect();
    let total = contributions.iter().copied().sum();
    Breakdown {
        denominator,
        dimension_check_weight,
        max_points,
        contributions,
        total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_exact_sums() {
        assert_eq!(Points::from_f64(12.34567).0, 123_457);
        assert_eq!(Points::from_f64(-12.34567).0, -123_457);
        assert_eq!(Points::from_f64(0.00004).0, 0);
        assert_eq!(Points::from_f64(0.00005).0, 1);
        assert_eq!(round4(1.0 / 3.0), 0.3333);
        let parts = [Points(3333), Points(3333), Points(3334)];
        assert_eq!(parts.iter().copied().sum::<Points>().as_f64(), 1.0);
        assert_eq!(serde_json::to_string(&Points(1_234_500)).unwrap(), "123.45");
    }

    #[test]
    fn round4_never_saturates() {
        // Through an i64 of ten-thousandths this read 922337203685477.6 for anything larger.
        assert_eq!(round4(1e15), 1e15);
        assert_eq!(round4(922_337_203_685_477.6 * 2.0), 1_844_674_407_370_955.2);
        assert_eq!(round4(1e300), 1e300);
        assert_eq!(round4(f64::MAX), f64::MAX);
        assert_eq!(round4(123_456_789.123_456), 123_456_789.123_5);
        assert_eq!(round4(-0.00005), -0.0001);
        // Below the limit it agrees with the points' rounding.
        for x in [0.00005, 12.34567, 99.99995, 1e11 + 0.123_45] {
            assert_eq!(round4(x), Points::from_f64(x).as_f64(), "{x}");
        }
    }
}
