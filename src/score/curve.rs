//! Curve checks: the weighted p95 of measurements, mapped through the rubric's points.

use crate::rubric::Curve;

/// The curve's y (points, 0..=100) at `x`, interpolated linearly in `ln x` between points and
/// clamped to the first and last point's y outside them (so +inf reads as the last y).
pub fn interpolate(curve: &Curve, x: f64) -> f64 {
    let points = &curve.points;
    let (first, last) = match (points.first(), points.last()) {
        (Some(f), Some(l)) => (*f, *l),
        _ => return 0.0, // a validated rubric has at least two points
    };
    if x.is_nan() || x >= last.0 {
        return last.1;
    }
    if x <= first.0 {
        return first.1;
    }
    for pair in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
        if x <= x1 {
            let t = (libm::log(x) - libm::log(x0)) / (libm::log(x1) - libm::log(x0));
            return y0 + t * (y1 - y0);
        }
    }
    last.1
}

/// Measurements sorted by value with their cumulative weights: the weighted empirical
/// distribution a curve check's p95 is read from.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightedSample {
    /// Ascending; a failed request is `+inf` (slower than any curve point).
    pub values: Vec<f64>,
    /// `cumulative[i]` = sum of the weights of `values[..=i]`.
    pub cumulative: Vec<f64>,
    /// Kish effective sample size: (sum w)^2 / sum w^2.
    pub effective_n: f64,
}

impl WeightedSample {
    /// From `(value, weight)` pairs; pairs with zero weight are left out. `None` when nothing weighs.
    pub fn new(mut pairs: Vec<(f64, f64)>) -> Option<WeightedSample> {
        pairs.retain(|(_, w)| *w > 0.0);
        if pairs.is_empty() {
            return None;
        }
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut cumulative = Vec::with_capacity(pairs.len());
        let (mut sum, mut sum_sq) = (0.0, 0.0);
        for (_, w) in &pairs {
            sum += w;
            sum_sq += w * w;
            cumulative.push(sum);
        }
        Some(WeightedSample {
            values: pairs.into_iter().map(|(v, _)| v).collect(),
            cumulative,
            effective_n: sum * sum / sum_sq,
        })
    }

    pub fn total_weight(&self) -> f64 {
        self.cumulative.last().copied().unwrap_or(0.0)
    }

    /// The weighted quantile at level `q` (0..=1): the smallest value whose cumulative weight
    /// reaches `q` of the total (the inverse of the weighted empirical distribution function).
    pub fn quantile(&self, q: f64) -> f64 {
        let target = q * self.total_weight();
        let index = self.cumulative.partition_point(|c| *c < target);
        self.values[index.min(self.values.len() - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rubric::Rubric;

    fn r3() -> Curve {
        Rubric::embedded_default()
            .check("R3")
            .unwrap()
            .curve
            .clone()
            .unwrap()
    }

    #[test]
    fn at_the_points() {
        let c = r3();
        assert_eq!(interpolate(&c, 300.0), 100.0);
        assert_eq!(interpolate(&c, 1000.0), 90.0);
        assert_eq!(interpolate(&c, 3000.0), 50.0);
        assert_eq!(interpolate(&c, 10000.0), 0.0);
    }

    #[test]
    fn between_points_in_log_space() {
        let c = r3();
        // sqrt(1000 * 3000) is halfway in log space between 90 and 50.
        let mid = (1000.0f64 * 3000.0).sqrt();
        assert!((interpolate(&c, mid) - 70.0).abs() < 1e-9);
        // 2000 ms: t = ln(2)/ln(3) = 0.6309..., y = 90 - 40 t = 64.7630...
        let expected = 90.0 - 40.0 * (2.0f64.ln() / 3.0f64.ln());
        assert!((interpolate(&c, 2000.0) - expected).abs() < 1e-9);
        assert!((interpolate(&c, 2000.0) - 64.763).abs() < 1e-3);
    }

    #[test]
    fn clamped_at_the_ends() {
        let c = r3();
        assert_eq!(interpolate(&c, 1.0), 100.0);
        assert_eq!(interpolate(&c, 0.0), 100.0);
        assert_eq!(interpolate(&c, 50_000.0), 0.0);
        assert_eq!(interpolate(&c, f64::INFINITY), 0.0);
    }

    #[test]
    fn weighted_p95() {
        // 20 equal weights 1..=20: the 95% target is 19, reached at the 19th value.
        let s = WeightedSample::new((1..=20).map(|i| (f64::from(i), 1.0)).collect()).unwrap();
        assert_eq!(s.quantile(0.95), 19.0);
        assert_eq!(s.effective_n, 20.0);
        // A heavy slow measurement dominates: weights 1 (100 ms) and 19 (900 ms).
        let s = WeightedSample::new(vec![(900.0, 19.0), (100.0, 1.0)]).unwrap();
        assert_eq!(s.quantile(0.05), 100.0);
        assert_eq!(s.quantile(0.0501), 900.0);
        assert_eq!(s.quantile(1.0), 900.0);
        assert!(WeightedSample::new(vec![(1.0, 0.0)]).is_none());
    }
}
