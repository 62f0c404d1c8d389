//! The Monte Carlo band: draws from each check's posterior, summed with the checks' points,
//! capped inside every draw, and read at the rubric's band percentiles.
//!
//! Posteriors (see `rubrics/README.md`, "The prior", "Rate checks" and "Curve checks"):
//! - a check with no evidence: its value is uniform on [0, 1] (the prior, mean 0.5);
//! - a rate check: Beta(1 + decayed passes, 1 + decayed fails);
//! - a curve check: the quantile level `U ~ Beta(0.95 (n + 1), 0.05 (n + 1))` with `n` the
//!   effective sample size, and the value is the curve at the weighted quantile at `U`.
//!
//! Two samplers draw from the same posteriors. The reference draws every Beta as a ratio of two
//! gamma draws; the fast one (published) builds an inverse-CDF table per check once per subject
//! and reads one uniform per check per draw from it. Both use one generator seeded by the
//! input digest, consumed check by check in rubric order (all draws of a check, then the next).

use super::beta::{TABLE_CELLS, beta_by_gammas, incomplete_beta_given, ln_beta, quantile_table};
use super::curve::WeightedSample;
use super::exact::Level;
use super::rng::Xoshiro256StarStar;

/// What one check's value is drawn from.
#[derive(Debug, Clone, PartialEq)]
pub enum Posterior {
    Uniform,
    Beta {
        a: f64,
        b: f64,
    },
    CurveQuantile {
        a: f64,
        b: f64,
        sample: std::sync::Arc<WeightedSample>,
        /// The curve's value (0..=1) at each of `sample.values`.
        values: Vec<f64>,
    },
}

/// One scorable check in the draw: its points (the most it can contribute) and its posterior.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    pub points: f64,
    pub posterior: Posterior,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sampler {
    /// Inverse-CDF tables built once per subject (published).
    InverseCdfTable,
    /// One Beta per check per draw from two gamma draws (the reference).
    GammaRatio,
}

/// `draws` totals (points), each capped at `cap`.
pub fn draw_totals(
    terms: &[Term],
    draws: u32,
    cap: Option<f64>,
    seed: &[u8; 32],
    sampler: Sampler,
) -> Vec<f64> {
    let mut rng = Xoshiro256StarStar::from_digest(seed);
    let mut totals = vec![0.0; draws as usize];
    // Check-major: all draws of the first check, then all of the next. (The order is part of the
    // method: it fixes which uniform feeds which draw.)
    match sampler {
        Sampler::GammaRatio => {
            for term in terms {
                for total in totals.iter_mut() {
                    *total += term.points * reference_draw(&mut rng, &term.posterior);
                }
            }
        }
        Sampler::InverseCdfTable => {
            // Each check's uniforms are drawn first, then read through its table: the
            // generator's chain of dependent steps runs alone, and the table reads, which do
            // not depend on one another, overlap. The same uniforms feed the same draws.
            let mut words = vec![0u64; draws as usize];
            for (term, table) in terms.iter().zip(build_tables(terms)) {
                rng.fill_u64(&mut words);
                table.add_draws(term.points, &words, &mut totals);
            }
        }
    }
    if let Some(cap) = cap {
        for total in totals.iter_mut() {
            *total = total.min(cap);
        }
    }
    totals
}

fn reference_draw(rng: &mut Xoshiro256StarStar, posterior: &Posterior) -> f64 {
    match posterior {
        Posterior::Uniform => rng.next_f64(),
        Posterior::Beta { a, b } => beta_by_gammas(rng, *a, *b),
        Posterior::CurveQuantile {
            a,
            b,
            sample,
            values,
        } => {
            // The same exact quantile function as the point p95, at the drawn level.
            let level = beta_by_gammas(rng, *a, *b);
            values[sample.quantile_index(&Level::from_f64(level))]
        }
    }
}

/// A per-check table read with one uniform.
enum Table {
    Uniform,
    /// Quantiles at `i / TABLE_CELLS`; read by linear interpolation.
    Quantiles(Box<[f64; TABLE_CELLS + 1]>),
    /// A discrete distribution: `values[i]` with cumulative probability `cumulative[i]`.
    Discrete {
        cumulative: Vec<f64>,
        values: Vec<f64>,
    },
}

impl Table {
    /// Add `points * value` of one draw per element of `totals`, reading the generator's output
    /// of the same position in `words` (its uniform is `(word >> 11) * 2^-53`).
    fn add_draws(&self, points: f64, words: &[u64], totals: &mut [f64]) {
        match self {
            Table::Uniform => {
                for (total, word) in totals.iter_mut().zip(words) {
                    *total += points * uniform(*word);
                }
            }
            Table::Quantiles(q) => {
                // The uniform's position in the table, `u * TABLE_CELLS`, is its 53 bits scaled
                // by 2^-45: the cell is the top 8 bits of the word and the fraction within it the
                // 45 bits below, both exact, so this reads the same cell and fraction as the
                // floating-point arithmetic `u * 256`, `floor`, `-` would, without conversions.
                const CELL_BITS: u32 = TABLE_CELLS.trailing_zeros();
                const FRACTION_BITS: u32 = 53 - CELL_BITS;
                const FRACTION_MASK: u64 = (1 << FRACTION_BITS) - 1;
                const FRACTION_SCALE: f64 = 1.0 / (1u64 << FRACTION_BITS) as f64;
                for (total, word) in totals.iter_mut().zip(words) {
                    let m = word >> 11;
                    let i = (m >> FRACTION_BITS) as usize;
                    let t = (m & FRACTION_MASK) as f64 * FRACTION_SCALE;
                    let (low, high) = (q[i], q[i + 1]);
                    *total += points * (low + t * (high - low));
                }
            }
            Table::Discrete { cumulative, values } => {
                let last = values.len() - 1;
                // A short table in order (a few days of samples): the index a binary search finds,
                // the number of levels at or below the uniform, counted without a branch to
                // mispredict. Counting and `partition_point` agree on any table in order.
                if cumulative.len() <= SHORT_TABLE && cumulative.is_sorted() {
                    for (total, word) in totals.iter_mut().zip(words) {
                        let u = uniform(*word);
                        let i = cumulative
                            .iter()
                            .map(|c| usize::from(*c <= u))
                            .sum::<usize>();
                        *total += points * values[i.min(last)];
                    }
                    return;
                }
                for (total, word) in totals.iter_mut().zip(words) {
                    let u = uniform(*word);
                    let i = cumulative.partition_point(|c| *c <= u);
                    *total += points * values[i.min(last)];
                }
            }
        }
    }
}

/// The longest discrete table read by counting (longer ones by binary search).
const SHORT_TABLE: usize = 16;

/// The uniform in [0, 1) of one generator output (as `Xoshiro256StarStar::next_f64`).
#[inline(always)]
fn uniform(word: u64) -> f64 {
    (word >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

// The cell arithmetic above relies on a power-of-two table of at most 2^53 cells.
const _: () = assert!(TABLE_CELLS.is_power_of_two() && TABLE_CELLS.trailing_zeros() < 53);

fn build_tables(terms: &[Term]) -> Vec<Table> {
    // Checks probed together often share a posterior exactly: build each distinct table once.
    let mut built: Vec<((u64, u64), usize)> = Vec::new();
    let mut tables: Vec<Table> = Vec::with_capacity(terms.len());
    for term in terms {
        let table = match &term.posterior {
            Posterior::Uniform => Table::Uniform,
            Posterior::Beta { a, b } => {
                let key = (a.to_bits(), b.to_bits());
                match built.iter().find(|(k, _)| *k == key) {
                    Some((_, i)) => match &tables[*i] {
                        Table::Quantiles(q) => Table::Quantiles(q.clone()),
                        _ => Table::Quantiles(quantile_table(*a, *b)),
                    },
                    None => {
                        built.push((key, tables.len()));
                        Table::Quantiles(quantile_table(*a, *b))
                    }
                }
            }
            Posterior::CurveQuantile {
                a,
                b,
                sample,
                values,
            } => {
                // P(index <= i) = P(U <= cumulative[i] / total), one CDF value per measurement
                // (U is continuous: the fraction's last-place rounding moves a probability by
                // about 1e-16). The last is 1 by construction.
                //
                // Only the last of each run of equal values is kept: a draw reads the first
                // index whose cumulative probability exceeds its uniform, and within a run every
                // index holds the same value, so the run's last index (whose probability is the
                // run's highest) draws exactly what any of them would. A year of fast answers
                // is thousands of measurements that all read as the curve's first point: one
                // distribution function evaluated instead of thousands, the same draws.
                let ln_beta_ab = ln_beta(*a, *b);
                let mut kept_values = Vec::new();
                let mut cumulative = Vec::new();
                for (i, value) in values.iter().enumerate() {
                    if values
                        .get(i + 1)
                        .is_some_and(|next| next.to_bits() == value.to_bits())
                    {
                        continue;
                    }
                    kept_values.push(*value);
                    let f = sample.fraction(i);
                    cumulative.push(incomplete_beta_given(f, *a, *b, ln_beta_ab));
                }
                if let Some(last) = cumulative.last_mut() {
                    *last = 1.0;
                }
                Table::Discrete {
                    cumulative,
                    values: kept_values,
                }
            }
        };
        tables.push(table);
    }
    tables
}

/// The nearest-rank percentile `p` (0..=100) of `sorted` (ascending): the value at rank
/// `ceil(p / 100 * n)`, counting from 1 (rank 0 reads the smallest).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.saturating_sub(1).min(sorted.len() - 1)]
}

/// The band `(low, high)` of the totals at the two percentiles.
pub fn band(mut totals: Vec<f64>, low_pct: f64, high_pct: f64) -> (f64, f64) {
    // Selecting the two ranks gives the same values as sorting, in linear time.
    let n = totals.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let rank = |p: f64| {
        ((p / 100.0 * n as f64).ceil() as usize)
            .saturating_sub(1)
            .min(n - 1)
    };
    let (lo, hi) = (rank(low_pct), rank(high_pct));
    let (_, high, _) = totals.select_nth_unstable_by(hi, f64::total_cmp);
    let high = *high;
    let (_, low, _) = totals[..=hi].select_nth_unstable_by(lo, f64::total_cmp);
    (*low, high)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::beta::regularized_incomplete_beta;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=4000).map(f64::from).collect();
        assert_eq!(percentile(&v, 10.0), 400.0);
        assert_eq!(percentile(&v, 90.0), 3600.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 100.0), 4000.0);
        // band selects the same ranks without sorting: feed it a scrambled copy.
        let scrambled: Vec<f64> = (0..4000u32)
            .map(|i| f64::from((i * 2749) % 4000 + 1))
            .collect();
        assert_eq!(band(scrambled, 10.0, 90.0), (400.0, 3600.0));
    }

    #[test]
    fn same_seed_same_draws_and_caps_bound_every_draw() {
        let terms = vec![
            Term {
                points: 60.0,
                posterior: Posterior::Beta { a: 5.0, b: 2.0 },
            },
            Term {
                points: 40.0,
                posterior: Posterior::Uniform,
            },
        ];
        for sampler in [Sampler::InverseCdfTable, Sampler::GammaRatio] {
            let a = draw_totals(&terms, 500, None, &[3u8; 32], sampler);
            let b = draw_totals(&terms, 500, None, &[3u8; 32], sampler);
            assert_eq!(a, b);
            let capped = draw_totals(&terms, 500, Some(39.0), &[3u8; 32], sampler);
            assert!(capped.iter().all(|t| *t <= 39.0));
            assert!(capped.iter().zip(&a).all(|(c, u)| c <= u));
        }
    }

    #[test]
    fn fast_and_reference_agree_on_a_band() {
        let sample =
            WeightedSample::new((1..=30).map(|i| (f64::from(i * 100), 1.0)).collect()).unwrap();
        let values: Vec<f64> = sample.values.iter().map(|v| 1.0 - v / 3000.0).collect();
        let n = sample.effective_n;
        let terms = vec![
            Term {
                points: 50.0,
                posterior: Posterior::Beta { a: 9.0, b: 3.0 },
            },
            Term {
                points: 30.0,
                posterior: Posterior::CurveQuantile {
                    a: 0.95 * (n + 1.0),
                    b: 0.05 * (n + 1.0),
                    sample: sample.into(),
                    values,
                },
            },
            Term {
                points: 20.0,
                posterior: Posterior::Uniform,
            },
        ];
        let fast = band(
            draw_totals(&terms, 40_000, None, &[1u8; 32], Sampler::InverseCdfTable),
            10.0,
            90.0,
        );
        let slow = band(
            draw_totals(&terms, 40_000, None, &[2u8; 32], Sampler::GammaRatio),
            10.0,
            90.0,
        );
        assert!((fast.0 - slow.0).abs() < 0.5, "{fast:?} vs {slow:?}");
        assert!((fast.1 - slow.1).abs() < 0.5, "{fast:?} vs {slow:?}");
    }

    /// A curve table keeps only the last index of each run of equal values: every draw must be
    /// the draw of the full table (one probability per measurement), to the bit. Samples with
    /// long runs of equal values (fast answers all reading as the curve's first point), ties in
    /// the measurements, fails at +inf and unequal weights.
    #[test]
    fn a_curve_table_of_runs_draws_what_the_full_table_draws() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        for case in 0..40 {
            let n = 5 + case * 97;
            let pairs: Vec<(f64, f64)> = (0..n)
                .map(|_| {
                    let r = next();
                    let value = if r < 0.02 {
                        f64::INFINITY
                    } else if r < 0.7 {
                        2.0 // below the curve's first point
                    } else {
                        (next() * 40.0).floor() * 100.0
                    };
                    (value, 0.1 + next())
                })
                .collect();
            let sample = WeightedSample::new(pairs).unwrap();
            let values: Vec<f64> = sample
                .values
                .iter()
                .map(|v| {
                    if *v < 300.0 {
                        1.0
                    } else {
                        1.0 - v.min(4000.0) / 4000.0
                    }
                })
                .collect();
            let n = sample.effective_n;
            let (a, b) = (0.95 * (n + 1.0), 0.05 * (n + 1.0));
            let mut full: Vec<f64> = (0..sample.values.len())
                .map(|i| regularized_incomplete_beta(sample.fraction(i), a, b))
                .collect();
            *full.last_mut().unwrap() = 1.0;
            let full = Table::Discrete {
                cumulative: full,
                values: values.clone(),
            };
            let terms = [Term {
                points: 30.0,
                posterior: Posterior::CurveQuantile {
                    a,
                    b,
                    sample: sample.into(),
                    values,
                },
            }];
            let kept = build_tables(&terms).remove(0);
            if let Table::Discrete { values, .. } = &kept {
                // At most 38 values of the curve, 1.0 and the fail's 0.0: each run kept once.
                assert!(values.len() <= 40, "{} kept", values.len());
            }
            let seed = [case as u8; 32];
            let draws = |table: &Table| {
                let mut words = vec![0u64; 4000];
                Xoshiro256StarStar::from_digest(&seed).fill_u64(&mut words);
                let mut totals = vec![0.0; 4000];
                table.add_draws(30.0, &words, &mut totals);
                totals
            };
            let (a, b) = (draws(&full), draws(&kept));
            assert!(
                a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()),
                "case {case}"
            );
        }
    }

    #[test]
    fn a_quantile_table_reads_the_cell_and_fraction_of_the_floating_point_arithmetic() {
        // The table read takes the cell and the fraction from the word's bits; the method is
        // written as `u * TABLE_CELLS`, its floor and the difference. Both must read the same
        // levels with the same weights, bit for bit: at the ends, at every cell's edges and
        // just inside them, and at many generator outputs.
        let q: [f64; TABLE_CELLS + 1] =
            std::array::from_fn(|i| ((i * 7919) % 1000) as f64 / 1000.0 + i as f64 * 1e-3);
        let table = Table::Quantiles(Box::new(q));
        let by_floats = |word: u64| {
            let position = uniform(word) * TABLE_CELLS as f64;
            let i = (position as usize).min(TABLE_CELLS - 1);
            let t = position - i as f64;
            2.5 * (q[i] + t * (q[i + 1] - q[i]))
        };
        let mut words: Vec<u64> = vec![0, u64::MAX, 1 << 11, (1 << 11) - 1];
        for cell in 0..TABLE_CELLS as u64 {
            let edge = cell << 56;
            words.extend([
                edge,
                edge | (1 << 11),
                edge.wrapping_sub(1 << 11),
                edge | ((1 << 56) - 1),
            ]);
        }
        let mut rng = Xoshiro256StarStar::from_digest(&[9u8; 32]);
        words.extend((0..100_000).map(|_| rng.next_u64()));
        let mut totals = vec![0.0; words.len()];
        table.add_draws(2.5, &words, &mut totals);
        for (word, total) in words.iter().zip(&totals) {
            assert_eq!(
                total.to_bits(),
                by_floats(*word).to_bits(),
                "word {word:#x}"
            );
        }
    }

    #[test]
    fn a_short_discrete_table_counted_reads_what_a_binary_search_reads() {
        // Levels with repeats, a level of exactly a uniform's value, and the last at 1.
        let mut rng = Xoshiro256StarStar::from_digest(&[4u8; 32]);
        let words: Vec<u64> = (0..20_000).map(|_| rng.next_u64()).collect();
        let exact = uniform(words[7]);
        for cumulative in [
            vec![1.0],
            vec![0.25, 1.0],
            vec![0.1, 0.1, exact, 0.5, 0.5, 0.9, 1.0],
            (1..=16).map(|i| i as f64 / 16.0).collect(),
        ] {
            let values: Vec<f64> = (0..cumulative.len())
                .map(|i| i as f64 * 0.5 + 0.25)
                .collect();
            let table = Table::Discrete {
                cumulative: cumulative.clone(),
                values: values.clone(),
            };
            let mut totals = vec![0.0; words.len()];
            table.add_draws(3.0, &words, &mut totals);
            for (word, total) in words.iter().zip(&totals) {
                let i = cumulative.partition_point(|c| *c <= uniform(*word));
                let expected = 3.0 * values[i.min(values.len() - 1)];
                assert_eq!(total.to_bits(), expected.to_bits(), "{cumulative:?}");
            }
        }
    }
}
