//! Curve checks: the weighted p95 of measurements, mapped through the rubric's points.

use super::exact::{Level, Natural, decompose, scaled};
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
///
/// The cumulative weights are held exactly (`super::exact`), so a level is reached or not without
/// rounding: 38 equal weights out of 40 are exactly 95%, whatever the weight.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightedSample {
    /// Ascending; a failed request is `+inf` (slower than any curve point).
    pub values: Vec<f64>,
    /// `cumulative[i]`: the exact sum of the weights of `values[..=i]` (on a common scale).
    cumulative: Cumulative,
    /// Kish effective sample size: (sum w)^2 / sum w^2.
    pub effective_n: f64,
    total: f64,
}

/// The exact cumulative weights, as 128-bit integers when every sum fits in them (a sample's
/// weights span a few dozen binary orders: always, in practice), else as [`Natural`]s. Both hold
/// the same integers, and every reading goes through a `Natural` of the same value, so which one
/// a sample uses changes no figure.
#[derive(Debug, Clone, PartialEq)]
enum Cumulative {
    Narrow(Vec<u128>),
    Wide(Vec<Natural>),
}

impl Cumulative {
    /// The weights' running sums, exactly, on the common scale `weight x 2^-e_min`.
    fn of(weights: &[f64]) -> Cumulative {
        if weights.is_empty() {
            return Cumulative::Narrow(Vec::new());
        }
        let (e_min, e_max) = weights.iter().fold((i32::MAX, i32::MIN), |(low, high), w| {
            let e = decompose(*w).1;
            (low.min(e), high.max(e))
        });
        // A part is below 2^(53 + span); n of them sum below 2^(53 + span + bits(n)).
        let sum_bits =
            53 + i64::from(e_max - e_min) + i64::from(usize::BITS - weights.len().leading_zeros());
        if sum_bits > 127 {
            let mut running = Natural::zero();
            return Cumulative::Wide(
                scaled(weights)
                    .iter()
                    .map(|part| {
                        running.add_assign(part);
                        running.clone()
                    })
                    .collect(),
            );
        }
        let mut running = 0u128;
        Cumulative::Narrow(
            weights
                .iter()
                .map(|w| {
                    let (m, e) = decompose(*w);
                    running += u128::from(m) << (e - e_min);
                    running
                })
                .collect(),
        )
    }

    fn len(&self) -> usize {
        match self {
            Cumulative::Narrow(c) => c.len(),
            Cumulative::Wide(c) => c.len(),
        }
    }

    fn at(&self, i: usize) -> Natural {
        match self {
            Cumulative::Narrow(c) => Natural::of_u128(c[i]),
            Cumulative::Wide(c) => c[i].clone(),
        }
    }
}

/// `x`'s place in `f64::total_cmp`'s order, as an unsigned integer of the same order: negative
/// numbers (sign bit set) are flipped whole, the others get the sign bit set.
fn total_order_key(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// Below this many measurements the standard library's stable sort is as quick.
const RADIX_FROM: usize = 64;

/// [`total_order_key`]'s inverse: the value back, bit for bit.
fn from_total_order_key(key: u64) -> f64 {
    if key >> 63 == 1 {
        f64::from_bits(key & !(1 << 63))
    } else {
        f64::from_bits(!key)
    }
}

/// The pairs as `(total_order_key(value), weight)`, ascending by key, equal keys in their input
/// order: what a stable sort by value gives. A least-significant-digit radix sort, one byte a
/// pass, over the bytes in which the keys differ only (latencies in whole milliseconds differ in
/// two or three): a year's window of latencies is thousands of measurements, which it orders in
/// a few passes without comparing. Each item carries its weight, so no gather follows.
fn sorted_by_value(pairs: &[(f64, f64)]) -> Vec<(u64, f64)> {
    let mut items: Vec<(u64, f64)> = pairs
        .iter()
        .map(|(v, w)| (total_order_key(*v), *w))
        .collect();
    if items.len() < RADIX_FROM {
        items.sort_by_key(|(k, _)| *k);
        return items;
    }
    let first = items[0].0;
    let differing = items.iter().fold(0u64, |acc, (k, _)| acc | (k ^ first));
    // A byte every key shares would be a pass that keeps the order: skipped.
    let bytes: Vec<u32> = (0..8)
        .filter(|b| (differing >> (8 * b)) & 0xff != 0)
        .collect();
    let mut counts = vec![[0usize; 256]; bytes.len()];
    for (k, _) in &items {
        for (count, byte) in counts.iter_mut().zip(&bytes) {
            count[((k >> (8 * byte)) & 0xff) as usize] += 1;
        }
    }
    let mut spare = vec![(0u64, 0.0); items.len()];
    for (count, byte) in counts.iter().zip(&bytes) {
        let mut next = [0usize; 256];
        let mut at = 0;
        for (slot, c) in next.iter_mut().zip(count) {
            *slot = at;
            at += c;
        }
        for item in &items {
            let slot = &mut next[((item.0 >> (8 * byte)) & 0xff) as usize];
            spare[*slot] = *item;
            *slot += 1;
        }
        std::mem::swap(&mut items, &mut spare);
    }
    items
}

impl WeightedSample {
    /// From `(value, weight)` pairs; pairs without a positive finite weight are left out. `None`
    /// when nothing weighs.
    pub fn new(mut pairs: Vec<(f64, f64)>) -> Option<WeightedSample> {
        pairs.retain(|(_, w)| *w > 0.0 && w.is_finite());
        if pairs.is_empty() {
            return None;
        }
        // Ascending by value under `total_cmp`, equal values in the order given.
        let sorted = sorted_by_value(&pairs);
        let values: Vec<f64> = sorted
            .iter()
            .map(|(k, _)| from_total_order_key(*k))
            .collect();
        let weights: Vec<f64> = sorted.iter().map(|(_, w)| *w).collect();
        let (sum, sum_sq) = weights
            .iter()
            .fold((0.0, 0.0), |(s, q), w| (s + w, q + w * w));
        Some(WeightedSample {
            values,
            cumulative: Cumulative::of(&weights),
            effective_n: sum * sum / sum_sq,
            total: sum,
        })
    }

    /// The cumulative weight through `values[i]` over the total, as a double (within a few ulps;
    /// the last is exactly 1). For the band's Beta distribution function, which is continuous, so
    /// the rounding is immaterial there; levels are compared with `quantile_index`, which is
    /// exact. Computed when asked: the band reads it at one index per run of equal values, a
    /// small part of a year's measurements.
    pub fn fraction(&self, i: usize) -> f64 {
        let last = self.cumulative.len() - 1;
        if i >= last {
            return 1.0;
        }
        self.cumulative.at(i).ratio(&self.cumulative.at(last))
    }

    /// The total weight (a double sum; for display and the effective sample size only).
    pub fn total_weight(&self) -> f64 {
        self.total
    }

    /// The index of the weighted quantile at `level`: the smallest index whose cumulative weight
    /// reaches `level` of the total, decided exactly. The point p95 and the band's reference
    /// sampler both read quantiles through this one function.
    pub fn quantile_index(&self, level: &Level) -> usize {
        let n = self.cumulative.len();
        let total = self.cumulative.at(n - 1);
        // The first index that reaches the level (reaching is monotone in the index).
        let (mut low, mut high) = (0, n);
        while low < high {
            let mid = low + (high - low) / 2;
            if level.reached_by(&self.cumulative.at(mid), &total) {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        low.min(self.values.len() - 1)
    }

    /// The weighted quantile at `level` (the inverse of the weighted empirical distribution
    /// function).
    pub fn quantile(&self, level: &Level) -> f64 {
        self.values[self.quantile_index(level)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rubric::Rubric;
    use proptest::strategy::Strategy;

    fn r3() -> Curve {
        Rubric::embedded_default()
            .check(crate::rubric::CheckId::R3)
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

    /// The construction as it was first written (a comparison sort, every sum a `Natural`): the
    /// radix order and the 128-bit sums must give the very same sample, bit for bit.
    fn reference(mut pairs: Vec<(f64, f64)>) -> Option<(Vec<u64>, Vec<Natural>, u64, u64)> {
        pairs.retain(|(_, w)| *w > 0.0 && w.is_finite());
        if pairs.is_empty() {
            return None;
        }
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let weights: Vec<f64> = pairs.iter().map(|(_, w)| *w).collect();
        let mut running = Natural::zero();
        let cumulative = scaled(&weights)
            .iter()
            .map(|p| {
                running.add_assign(p);
                running.clone()
            })
            .collect();
        let (sum, sum_sq) = weights
            .iter()
            .fold((0.0, 0.0), |(s, q), w| (s + w, q + w * w));
        Some((
            pairs.iter().map(|(v, _)| v.to_bits()).collect(),
            cumulative,
            (sum * sum / sum_sq).to_bits(),
            sum.to_bits(),
        ))
    }

    fn as_reference(s: &WeightedSample) -> (Vec<u64>, Vec<Natural>, u64, u64) {
        (
            s.values.iter().map(|v| v.to_bits()).collect(),
            (0..s.cumulative.len())
                .map(|i| s.cumulative.at(i))
                .collect(),
            s.effective_n.to_bits(),
            s.total.to_bits(),
        )
    }

    proptest::proptest! {
        #[test]
        fn the_sample_is_the_reference_bit_for_bit(
            pairs in proptest::collection::vec(
                (
                    proptest::prop_oneof![
                        // Few distinct values (ties, kept in their order), any double, the ends.
                        (0u8..8).prop_map(|v| f64::from(v) * 250.0),
                        proptest::num::f64::ANY,
                        proptest::prop_oneof![
                            proptest::strategy::Just(f64::INFINITY),
                            proptest::strategy::Just(-0.0),
                            proptest::strategy::Just(0.0),
                            proptest::strategy::Just(f64::NAN),
                        ],
                    ],
                    proptest::prop_oneof![
                        // Decayed weights over a year, any double (most left out), a wide span.
                        (0.0f64..365.0).prop_map(|age| libm::exp2(-age / 14.0)),
                        proptest::num::f64::ANY,
                        (0i32..1000).prop_map(|e| libm::ldexp(1.5, -e)),
                    ],
                ),
                0..400,
            )
        ) {
            let sample = WeightedSample::new(pairs.clone());
            proptest::prop_assert_eq!(sample.as_ref().map(as_reference), reference(pairs));
            if let Some(s) = sample {
                for level in [Level::P95, Level::percent(50), Level::from_f64(0.123_456_789)] {
                    let total = s.cumulative.at(s.cumulative.len() - 1);
                    let cumulative: Vec<Natural> =
                        (0..s.cumulative.len()).map(|i| s.cumulative.at(i)).collect();
                    let first = cumulative.partition_point(|c| !level.reached_by(c, &total));
                    proptest::prop_assert_eq!(
                        s.quantile_index(&level),
                        first.min(s.values.len() - 1)
                    );
                }
            }
        }
    }

    #[test]
    fn both_kinds_of_sums_are_taken() {
        // A year of decayed weights: 128-bit sums. Weights 2^700 apart: sums of any size.
        let year: Vec<(f64, f64)> = (0..2920)
            .map(|i| (f64::from(i % 97), libm::exp2(-f64::from(i) / 8.0 / 14.0)))
            .collect();
        let s = WeightedSample::new(year.clone()).unwrap();
        assert!(matches!(s.cumulative, Cumulative::Narrow(_)));
        assert_eq!(Some(as_reference(&s)), reference(year));
        let wide = vec![(3.0, 1.0), (1.0, libm::ldexp(1.0, -700)), (2.0, 1.0)];
        let s = WeightedSample::new(wide.clone()).unwrap();
        assert!(matches!(s.cumulative, Cumulative::Wide(_)));
        assert_eq!(Some(as_reference(&s)), reference(wide));
        assert_eq!(s.values, vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn weighted_p95() {
        // 20 equal weights 1..=20: the 95% target is 19, reached at the 19th value.
        let s = WeightedSample::new((1..=20).map(|i| (f64::from(i), 1.0)).collect()).unwrap();
        assert_eq!(s.quantile(&Level::P95), 19.0);
        assert_eq!(s.effective_n, 20.0);
        // A heavy slow measurement dominates: weights 1 (100 ms) and 19 (900 ms). 5% of 20 is
        // exactly 1, reached by the first value; 6% is not.
        let s = WeightedSample::new(vec![(900.0, 19.0), (100.0, 1.0)]).unwrap();
        assert_eq!(s.quantile(&Level::percent(5)), 100.0);
        assert_eq!(s.quantile(&Level::percent(6)), 900.0);
        assert_eq!(s.quantile(&Level::percent(100)), 900.0);
        assert!(WeightedSample::new(vec![(1.0, 0.0)]).is_none());
    }

    #[test]
    fn a_tie_at_exactly_95_percent_is_found_with_decayed_weights() {
        // The case: 40 R3 passes recorded at one time 30 h before as_of (each weighs
        // 2^(-30/24/14) = 0.93999, the same double), 37 at 500 ms, 1 at 2000 ms, 2 at 5000 ms.
        // 38 of 40 is exactly 95%: the p95 is 2000 ms. Float running sums put the 38th a hair
        // under 95% of the float total and read 5000 ms.
        let w = libm::exp2(-30.0 / 24.0 / 14.0);
        let mut pairs = vec![(500.0, w); 37];
        pairs.push((2000.0, w));
        pairs.extend([(5000.0, w), (5000.0, w)]);
        let s = WeightedSample::new(pairs).unwrap();
        assert_eq!(s.quantile(&Level::P95), 2000.0);
        let float_38: f64 = (0..38).map(|_| w).sum();
        let float_40: f64 = (0..40).map(|_| w).sum();
        assert!(
            float_38 < 0.95 * float_40,
            "the float sums would miss the tie"
        );
        // Weights that differ per time (decayed at different ages), in any order of the input
        // pairs: the tie at exactly 95% is found as long as the weights match up exactly.
        let (a, b) = (libm::exp2(-1.3 / 14.0), libm::exp2(-2.7 / 14.0));
        // 18 pairs of (a, b) below 1000 ms, one pair at 1500 ms, one at 9000 ms: through 1500 ms
        // the cumulative weight is 19 (a + b), exactly 95% of 20 (a + b): the p95 is 1500 ms.
        let mut pairs = Vec::new();
        for i in 0..18 {
            pairs.push((100.0 + f64::from(i), a));
            pairs.push((200.0 + f64::from(i), b));
        }
        pairs.push((1500.0, a));
        pairs.push((1500.0, b));
        pairs.push((9000.0, a));
        pairs.push((9000.0, b));
        let s = WeightedSample::new(pairs.clone()).unwrap();
        assert_eq!(s.quantile(&Level::P95), 1500.0);
        pairs.reverse();
        assert_eq!(
            WeightedSample::new(pairs).unwrap().quantile(&Level::P95),
            1500.0
        );
    }
}
