//! The fitting and the figures, pure: isotonic regression (pool-adjacent-violators) of failure on
//! the score, its reduction to a few knots, the bounded coordinate search of curve points, and the
//! measures the report prints (Brier score, AUC, ROC, calibration by decile).

use crate::rubric::{Curve, predicted_rate};

/// Scores are binned to whole points for the isotonic fit (101 bins): coarse enough not to chase
/// single subject-days, fine enough for a rubric whose grades sit 10 points apart.
pub const BINS: usize = 101;

/// A block of the isotonic fit: consecutive score bins pooled to one rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Block {
    /// Sum of the scores (weighted mean = `score_sum / n`).
    pub score_sum: f64,
    pub fails: f64,
    pub n: f64,
}

impl Block {
    pub fn rate(&self) -> f64 {
        self.fails / self.n
    }
    pub fn score(&self) -> f64 {
        self.score_sum / self.n
    }
    fn merge(self, o: Block) -> Block {
        Block {
            score_sum: self.score_sum + o.score_sum,
            fails: self.fails + o.fails,
            n: self.n + o.n,
        }
    }
}

/// Per-bin counts of `(score, fails)` pairs, the isotonic fit's input.
#[derive(Debug, Clone, PartialEq)]
pub struct Bins {
    pub blocks: Vec<Block>,
}

impl Bins {
    pub fn new() -> Bins {
        Bins {
            blocks: vec![
                Block {
                    score_sum: 0.0,
                    fails: 0.0,
                    n: 0.0
                };
                BINS
            ],
        }
    }
    pub fn add(&mut self, score: f64, fails: bool) {
        let b = &mut self.blocks[bin_of(score)];
        b.score_sum += score;
        b.n += 1.0;
        if fails {
            b.fails += 1.0;
        }
    }
}

impl Default for Bins {
    fn default() -> Self {
        Bins::new()
    }
}

/// The bin of a score (0..=100, clamped).
pub fn bin_of(score: f64) -> usize {
    if score.is_nan() {
        return 0;
    }
    score.round().clamp(0.0, 100.0) as usize
}

/// Pool-adjacent-violators: the failure rate as a non-increasing function of the score, over the
/// non-empty bins in score order. Minimises the squared error (the in-sample Brier score) among
/// all non-increasing step functions.
pub fn isotonic(bins: &Bins) -> Vec<Block> {
    let mut stack: Vec<Block> = Vec::new();
    for b in bins.blocks.iter().filter(|b| b.n > 0.0) {
        let mut cur = *b;
        while let Some(prev) = stack.last() {
            // A higher score must not predict more failures: pool while it would.
            if cur.rate() > prev.rate() {
                cur = prev.merge(cur);
                stack.pop();
            } else {
                break;
            }
        }
        stack.push(cur);
    }
    stack
}

/// The in-sample Brier score of an isotonic fit (the squared error of each bin's pooled rate).
pub fn isotonic_brier(blocks: &[Block]) -> f64 {
    let (mut sse, mut n) = (0.0, 0.0);
    for b in blocks {
        let p = b.rate();
        // fails * (1 - p)^2 + (n - fails) * p^2
        sse += b.fails * (1.0 - p) * (1.0 - p) + (b.n - b.fails) * p * p;
        n += b.n;
    }
    if n > 0.0 { sse / n } else { 0.0 }
}

/// Merges adjacent blocks (the pair whose pooling adds the least squared error first) until at
/// most `knots` remain. Pooling adjacent blocks of a monotone fit keeps it monotone.
pub fn reduce(mut blocks: Vec<Block>, knots: usize) -> Vec<Block> {
    let knots = knots.max(1);
    while blocks.len() > knots {
        let mut best = (f64::INFINITY, 0);
        for i in 0..blocks.len() - 1 {
            let (a, b) = (blocks[i], blocks[i + 1]);
            let d = a.rate() - b.rate();
            let cost = a.n * b.n / (a.n + b.n) * d * d;
            if cost < best.0 {
                best = (cost, i);
            }
        }
        let i = best.1;
        blocks[i] = blocks[i].merge(blocks[i + 1]);
        blocks.remove(i + 1);
    }
    blocks
}

/// The mapping's points from blocks: `(mean score, rate)` rounded (score to 2 decimals, rate to
/// 4), scores strictly increasing, rates non-increasing; a single block spans 0..=100.
pub fn mapping_points(blocks: &[Block]) -> Vec<(f64, f64)> {
    let round = |x: f64, d: f64| (x * d).round() / d;
    let mut points: Vec<(f64, f64)> = Vec::new();
    for b in blocks {
        let (s, r) = (round(b.score(), 100.0), round(b.rate(), 10_000.0));
        match points.last_mut() {
            // Two blocks whose mean scores round alike: keep the first's score, the lower rate
            // (still non-increasing).
            Some(last) if s <= last.0 => last.1 = last.1.min(r),
            _ => points.push((s, r)),
        }
    }
    // Rounding cannot make rates rise (both are rounded the same way), but guard it anyway.
    for i in 1..points.len() {
        if points[i].1 > points[i - 1].1 {
            points[i].1 = points[i - 1].1;
        }
    }
    match points.len() {
        0 => vec![(0.0, 0.0), (100.0, 0.0)],
        1 => {
            let r = points[0].1;
            vec![(0.0, r), (100.0, r)]
        }
        _ => points,
    }
}

/// The Brier score (mean squared error of a predicted rate against 0/1 outcomes).
pub fn brier(pairs: impl Iterator<Item = (f64, bool)>) -> Option<f64> {
    let (mut sse, mut n) = (0.0, 0u64);
    for (p, fails) in pairs {
        let y = if fails { 1.0 } else { 0.0 };
        sse += (p - y) * (p - y);
        n += 1;
    }
    (n > 0).then(|| sse / n as f64)
}

/// The AUC of a score for not failing: the chance that a subject-day that did not fail scores
/// higher than one that failed (ties count half). `None` without both outcomes.
pub fn auc(pairs: &mut [(f64, bool)]) -> Option<f64> {
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n_fail = pairs.iter().filter(|p| p.1).count() as f64;
    let n_ok = pairs.len() as f64 - n_fail;
    if n_fail == 0.0 || n_ok == 0.0 {
        return None;
    }
    // Mann-Whitney: the ranks (ties averaged) of the subject-days that did not fail.
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < pairs.len() {
        let mut j = i;
        while j < pairs.len() && pairs[j].0 == pairs[i].0 {
            j += 1;
        }
        let mean_rank = (i + 1 + j) as f64 / 2.0;
        rank_sum += mean_rank * pairs[i..j].iter().filter(|p| !p.1).count() as f64;
        i = j;
    }
    Some((rank_sum - n_ok * (n_ok + 1.0) / 2.0) / (n_ok * n_fail))
}

/// The ROC curve of the score as a detector of failure (flag a subject-day when its score is at
/// or below a threshold): `(false positive rate, true positive rate)` from (0, 0) to (1, 1), at
/// most `max_points` points (thinned evenly).
pub fn roc(pairs: &mut [(f64, bool)], max_points: usize) -> Vec<(f64, f64)> {
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n_fail = pairs.iter().filter(|p| p.1).count() as f64;
    let n_ok = pairs.len() as f64 - n_fail;
    if n_fail == 0.0 || n_ok == 0.0 {
        return Vec::new();
    }
    let mut points = vec![(0.0, 0.0)];
    let (mut tp, mut fp) = (0.0, 0.0);
    let mut i = 0;
    while i < pairs.len() {
        let mut j = i;
        while j < pairs.len() && pairs[j].0 == pairs[i].0 {
            if pairs[j].1 {
                tp += 1.0;
            } else {
                fp += 1.0;
            }
            j += 1;
        }
        points.push((fp / n_ok, tp / n_fail));
        i = j;
    }
    if points.len() > max_points.max(2) {
        let step = (points.len() - 1) as f64 / (max_points.max(2) - 1) as f64;
        points = (0..max_points.max(2))
            .map(|k| points[((k as f64 * step).round() as usize).min(points.len() - 1)])
            .collect();
    }
    points
}

/// One decile of the score in the reliability diagram.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Decile {
    pub score_low: f64,
    pub score_high: f64,
    pub n: u64,
    pub predicted: f64,
    pub observed: f64,
}

/// Deciles of the score (by rank; ties kept together so a decile may hold more than a tenth), each
/// with its mean predicted rate and observed failure share.
pub fn deciles(rows: &mut [(f64, f64, bool)]) -> Vec<Decile> {
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = rows.len();
    let mut out = Vec::new();
    let mut start = 0;
    for k in 1..=10 {
        let mut end = (n * k / 10).max(start);
        while end < n && end > 0 && rows[end].0 == rows[end - 1].0 {
            end += 1;
        }
        if end > start {
            let part = &rows[start..end];
            let m = part.len() as f64;
            out.push(Decile {
                score_low: part[0].0,
                score_high: part[part.len() - 1].0,
                n: part.len() as u64,
                predicted: part.iter().map(|r| r.1).sum::<f64>() / m,
                observed: part.iter().filter(|r| r.2).count() as f64 / m,
            });
        }
        start = end;
    }
    out
}

/// Expected calibration error over the deciles holding at least `min_n` subject-days (weighted by
/// their size), and the largest gap among them.
pub fn ece(deciles: &[Decile], min_n: u64) -> Option<(f64, f64)> {
    let kept: Vec<&Decile> = deciles.iter().filter(|d| d.n >= min_n).collect();
    let total: f64 = kept.iter().map(|d| d.n as f64).sum();
    if total == 0.0 {
        return None;
    }
    let ece = kept
        .iter()
        .map(|d| d.n as f64 * (d.predicted - d.observed).abs())
        .sum::<f64>()
        / total;
    let max = kept
        .iter()
        .map(|d| (d.predicted - d.observed).abs())
        .fold(0.0, f64::max);
    Some((ece, max))
}

/// The predicted rate of a score under mapping points.
pub fn predict(points: &[(f64, f64)], score: f64) -> f64 {
    predicted_rate(points, score)
}

/// The result of the curve search.
#[derive(Debug, Clone, PartialEq)]
pub struct Searched {
    pub curves: Vec<Curve>,
    pub objective: f64,
    pub evaluations: u32,
}

/// Bounded coordinate search over the curves' y values (x knots fixed): for each curve and knot in
/// turn, every y on a grid of `step` points between its neighbours (so the curve stays
/// non-increasing and within 0..=100) is tried and the best kept; at most `passes` passes, ending
/// early when a pass changes nothing. Ties keep the current value, so the result is deterministic.
pub fn search_curves(
    start: &[Curve],
    step: f64,
    passes: u32,
    mut objective: impl FnMut(&[&Curve]) -> f64,
) -> Searched {
    let mut curves: Vec<Curve> = start.to_vec();
    let mut evaluations = 0u32;
    let mut best = {
        let refs: Vec<&Curve> = curves.iter().collect();
        evaluations += 1;
        objective(&refs)
    };
    let steps = (100.0 / step).round() as i64;
    for _ in 0..passes {
        let mut changed = false;
        for k in 0..curves.len() {
            for j in 0..curves[k].points.len() {
                let hi = if j == 0 {
                    100.0
                } else {
                    curves[k].points[j - 1].1
                };
                let lo = curves[k].points.get(j + 1).map_or(0.0, |p| p.1);
                let current = curves[k].points[j].1;
                let mut chosen = current;
                for s in 0..=steps {
                    let y = (s as f64 * step).min(100.0);
                    if y < lo || y > hi || y == current {
                        continue;
                    }
                    let mut trial = curves.clone();
                    trial[k].points[j].1 = y;
                    let refs: Vec<&Curve> = trial.iter().collect();
                    evaluations += 1;
                    let value = objective(&refs);
                    if value < best - 1e-12 {
                        best = value;
                        chosen = y;
                    }
                }
                if chosen != current {
                    curves[k].points[j].1 = chosen;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    Searched {
        curves,
        objective: best,
        evaluations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rubric::{CurveInput, CurveSpace};

    #[test]
    fn isotonic_pools_violators_and_is_non_increasing() {
        let mut bins = Bins::new();
        // Rising failure at 40 -> 50 violates; the fit pools them.
        for (score, fails, n) in [(20.0, 8, 10), (40.0, 2, 10), (50.0, 6, 10), (90.0, 0, 10)] {
            for i in 0..n {
                bins.add(score, i < fails);
            }
        }
        let blocks = isotonic(&bins);
        let rates: Vec<f64> = blocks.iter().map(Block::rate).collect();
        assert_eq!(rates, vec![0.8, 0.4, 0.0]);
        assert!(rates.windows(2).all(|w| w[0] >= w[1]));
        // The pooled fit beats any other non-increasing step function, e.g. the raw means clipped.
        let pooled = isotonic_brier(&blocks);
        assert!((pooled - (10.0 * 0.16 + 20.0 * 0.24 + 0.0) / 40.0).abs() < 1e-12);
        let points = mapping_points(&reduce(blocks, 2));
        assert_eq!(points.len(), 2);
        assert!(
            points
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 >= w[1].1)
        );
    }

    #[test]
    fn auc_roc_and_deciles() {
        let mut perfect = vec![(10.0, true), (20.0, true), (80.0, false), (90.0, false)];
        assert_eq!(auc(&mut perfect), Some(1.0));
        let mut inverted = vec![(10.0, false), (90.0, true)];
        assert_eq!(auc(&mut inverted), Some(0.0));
        let mut ties = vec![(50.0, false), (50.0, true)];
        assert_eq!(auc(&mut ties), Some(0.5));
        assert_eq!(auc(&mut [(1.0, true)]), None);
        let r = roc(&mut perfect, 100);
        assert_eq!(r.first(), Some(&(0.0, 0.0)));
        assert_eq!(r.last(), Some(&(1.0, 1.0)));
        assert!(r.contains(&(0.0, 1.0)));

        let mut rows: Vec<(f64, f64, bool)> =
            (0..100).map(|i| (f64::from(i), 0.5, i % 2 == 0)).collect();
        let d = deciles(&mut rows);
        assert_eq!(d.len(), 10);
        assert!(d.iter().all(|x| x.n == 10 && x.observed == 0.5));
        assert_eq!(ece(&d, 10), Some((0.0, 0.0)));
        assert_eq!(ece(&d, 11), None);
        assert_eq!(brier([(0.5, true), (0.5, false)].into_iter()), Some(0.25));
    }

    #[test]
    fn the_search_keeps_curves_monotone_and_finds_a_better_point() {
        let start = Curve {
            input: CurveInput::P95,
            space: CurveSpace::Log,
            points: vec![
                (300.0, 100.0),
                (1000.0, 90.0),
                (3000.0, 50.0),
                (10000.0, 0.0),
            ],
        };
        // Prefers the second y at 80 and the third at 30.
        let found = search_curves(&[start], 5.0, 3, |c| {
            let p = &c[0].points;
            (p[1].1 - 80.0).abs() + (p[2].1 - 30.0).abs()
        });
        let p = &found.curves[0].points;
        assert_eq!((p[1].1, p[2].1), (80.0, 30.0));
        assert_eq!(found.objective, 0.0);
        assert!(p.windows(2).all(|w| w[0].1 >= w[1].1));
        assert!(p.iter().all(|q| (0.0..=100.0).contains(&q.1)));
        assert!(found.evaluations > 1);
    }
}
