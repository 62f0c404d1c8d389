//! Beta distributions, with libm only (so results are the same on every platform): the
//! regularized incomplete beta function, an inverse-CDF table, and the plain gamma-ratio sampler.

use super::rng::Xoshiro256StarStar;

/// `I_x(a, b)`, the Beta(a, b) distribution function at `x`, by the continued fraction of
/// DLMF 8.17.22 evaluated with the modified Lentz method; the symmetry
/// `I_x(a, b) = 1 - I_{1-x}(b, a)` keeps the fraction in its fast-converging region.
pub fn regularized_incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    incomplete_beta_given(x, a, b, ln_beta(a, b))
}

/// [`regularized_incomplete_beta`] with `ln_beta(a, b)` already computed (the same value, so the
/// same result to the bit): a table of one distribution reads it once, not at every point.
pub fn incomplete_beta_given(x: f64, a: f64, b: f64, ln_beta_ab: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = a * libm::log(x) + b * libm::log1p(-x) - ln_beta_ab;
    let front = libm::exp(ln_front);
    let upper = x > (a + 1.0) / (a + b + 2.0);
    // A front that underflows to zero makes the fraction's value immaterial (zero times a
    // finite number): the same result without evaluating it. A curve check's table asks for
    // thousands of points far out in the tails, where this is most of them.
    if front == 0.0 {
        return if upper { 1.0 } else { 0.0 };
    }
    if upper {
        return 1.0 - front / b * continued_fraction(1.0 - x, b, a);
    }
    front / a * continued_fraction(x, a, b)
}

pub fn ln_beta(a: f64, b: f64) -> f64 {
    libm::lgamma(a) + libm::lgamma(b) - libm::lgamma(a + b)
}

fn continued_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPS: f64 = 1e-15;
    let guard = |v: f64| if v.abs() < TINY { TINY } else { v };
    let mut c = 1.0;
    let mut d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0));
    let mut f = d;
    for m in 1..=500 {
        let m = f64::from(m);
        // Even step: d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m)).
        let even = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
        d = 1.0 / guard(1.0 + even * d);
        c = guard(1.0 + even / c);
        f *= d * c;
        // Odd step: d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)).
        let odd = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
        d = 1.0 / guard(1.0 + odd * d);
        c = guard(1.0 + odd / c);
        let step = d * c;
        f *= step;
        if (step - 1.0).abs() < EPS {
            break;
        }
    }
    f
}

/// Number of equal-probability cells in an inverse-CDF table.
pub const TABLE_CELLS: usize = 256;
/// Grid points on which the density is integrated to build a table.
const GRID_POINTS: usize = 128;
/// The grid spans the mean plus or minus this many standard deviations (clipped to [0, 1]).
const GRID_SPAN_SD: f64 = 12.0;

/// The Beta(a, b) quantiles at levels `i / TABLE_CELLS`, `i = 0..=TABLE_CELLS`, for `a, b >= 1`
/// (a rate check's posterior: a uniform prior plus non-negative evidence, so the density is
/// bounded). Built by integrating the density with the trapezoid rule on a grid around the mean
/// and inverting the resulting distribution function linearly within each grid cell.
pub fn quantile_table(a: f64, b: f64) -> Box<[f64; TABLE_CELLS + 1]> {
    let mean = a / (a + b);
    let sd = libm::sqrt(a * b / ((a + b) * (a + b) * (a + b + 1.0)));
    let lo = (mean - GRID_SPAN_SD * sd).max(0.0);
    let hi = (mean + GRID_SPAN_SD * sd).min(1.0);
    let step = (hi - lo) / (GRID_POINTS - 1) as f64;
    let ln_density = |x: f64| {
        let left = if a == 1.0 {
            0.0
        } else {
            (a - 1.0) * libm::log(x)
        };
        let right = if b == 1.0 {
            0.0
        } else {
            (b - 1.0) * libm::log1p(-x)
        };
        left + right
    };
    let xs: Vec<f64> = (0..GRID_POINTS).map(|i| lo + step * i as f64).collect();
    let ln_d: Vec<f64> = xs.iter().map(|x| ln_density(*x)).collect();
    let peak = ln_d.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let density: Vec<f64> = ln_d.iter().map(|l| libm::exp(l - peak)).collect();
    let mut cdf = Vec::with_capacity(GRID_POINTS);
    cdf.push(0.0);
    for i in 1..GRID_POINTS {
        let prev = cdf[i - 1];
        cdf.push(prev + 0.5 * (density[i - 1] + density[i]) * step);
    }
    let total = cdf[GRID_POINTS - 1];
    let mut table = Box::new([0.0; TABLE_CELLS + 1]);
    let mut k = 0;
    for (i, level) in table.iter_mut().enumerate() {
        let target = total * i as f64 / TABLE_CELLS as f64;
        while k + 2 < GRID_POINTS && cdf[k + 1] < target {
            k += 1;
        }
        let span = cdf[k + 1] - cdf[k];
        let t = if span > 0.0 {
            ((target - cdf[k]) / span).clamp(0.0, 1.0)
        } else {
            0.0
        };
        *level = xs[k] + t * step;
    }
    table
}

/// A standard normal draw (Box-Muller, the cosine half).
fn standard_normal(rng: &mut Xoshiro256StarStar) -> f64 {
    let u1 = rng.next_open_f64();
    let u2 = rng.next_f64();
    libm::sqrt(-2.0 * libm::log(u1)) * libm::cos(2.0 * std::f64::consts::PI * u2)
}

/// A Gamma(shape, 1) draw: Marsaglia and Tsang's squeeze for shape >= 1, and
/// `Gamma(shape + 1) * U^(1 / shape)` below 1.
pub fn gamma(rng: &mut Xoshiro256StarStar, shape: f64) -> f64 {
    if shape < 1.0 {
        let boosted = gamma(rng, shape + 1.0);
        return boosted * libm::pow(rng.next_open_f64(), 1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / libm::sqrt(9.0 * d);
    loop {
        let x = standard_normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = rng.next_open_f64();
        if libm::log(u) < 0.5 * x * x + d - d * v + d * libm::log(v) {
            return d * v;
        }
    }
}

/// A Beta(a, b) draw as the ratio of two gamma draws: the plain reference sampler.
pub fn beta_by_gammas(rng: &mut Xoshiro256StarStar, a: f64, b: f64) -> f64 {
    let x = gamma(rng, a);
    let y = gamma(rng, b);
    if x + y > 0.0 { x / (x + y) } else { 0.5 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_beta_closed_forms() {
        // Beta(1, 1) is uniform; Beta(2, 1) has CDF x^2; Beta(1, 3) has CDF 1 - (1 - x)^3.
        for x in [0.1, 0.25, 0.5, 0.9] {
            assert!((regularized_incomplete_beta(x, 1.0, 1.0) - x).abs() < 1e-12);
            assert!((regularized_incomplete_beta(x, 2.0, 1.0) - x * x).abs() < 1e-12);
            let expected = 1.0 - (1.0 - x) * (1.0 - x) * (1.0 - x);
            assert!((regularized_incomplete_beta(x, 1.0, 3.0) - expected).abs() < 1e-12);
        }
        // Symmetric: I_0.5(a, a) = 0.5.
        assert!((regularized_incomplete_beta(0.5, 7.3, 7.3) - 0.5).abs() < 1e-12);
        // A singular density (b < 1): I_x(1, b) = 1 - (1 - x)^b.
        let expected = 1.0 - libm::pow(0.5, 0.2);
        assert!((regularized_incomplete_beta(0.5, 1.0, 0.2) - expected).abs() < 1e-12);
    }

    /// The early return where the front underflows gives, bit for bit, what evaluating the
    /// continued fraction gives (stored scores recompute byte for byte): over a fine grid, for
    /// the shapes a curve check with a long history asks for and small ones.
    #[test]
    fn the_tails_read_without_the_fraction_are_bit_for_bit_the_same() {
        let evaluated = |x: f64, a: f64, b: f64| {
            let ln_front = a * libm::log(x) + b * libm::log1p(-x) - ln_beta(a, b);
            if x > (a + 1.0) / (a + b + 2.0) {
                1.0 - libm::exp(ln_front) / b * continued_fraction(1.0 - x, b, a)
            } else {
                libm::exp(ln_front) / a * continued_fraction(x, a, b)
            }
        };
        let mut skipped = 0;
        for (a, b) in [
            (1901.95, 100.05),
            (9500.95, 500.05),
            (19.95, 1.05),
            (2.0, 3.0),
        ] {
            for i in 1..20_000 {
                let x = f64::from(i) / 20_000.0;
                let got = regularized_incomplete_beta(x, a, b);
                assert_eq!(
                    got.to_bits(),
                    evaluated(x, a, b).to_bits(),
                    "I_{x}({a}, {b})"
                );
                let front = libm::exp(a * libm::log(x) + b * libm::log1p(-x) - ln_beta(a, b));
                skipped += usize::from(front == 0.0);
            }
        }
        assert!(
            skipped > 20_000,
            "the long-history shapes are mostly tails: {skipped}"
        );
    }

    #[test]
    fn quantile_table_matches_closed_forms() {
        let t = quantile_table(1.0, 1.0);
        assert!((t[128] - 0.5).abs() < 1e-9 && t[0] == 0.0 && (t[256] - 1.0).abs() < 1e-9);
        // Beta(2, 1): quantile sqrt(p).
        let t = quantile_table(2.0, 1.0);
        for (i, q) in t.iter().enumerate().step_by(16) {
            let exact = (i as f64 / 256.0).sqrt();
            assert!((q - exact).abs() < 2e-3, "level {i}: {q} vs {exact}");
        }
        // A concentrated posterior: Beta(201, 3); its median sits where the CDF is 0.5.
        let t = quantile_table(201.0, 3.0);
        assert!((regularized_incomplete_beta(t[128], 201.0, 3.0) - 0.5).abs() < 2e-3);
        assert!(t.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn gamma_ratio_sampler_has_the_right_mean() {
        let mut rng = Xoshiro256StarStar::from_digest(&[7u8; 32]);
        let n = 20_000;
        let mean: f64 = (0..n)
            .map(|_| beta_by_gammas(&mut rng, 3.0, 7.0))
            .sum::<f64>()
            / n as f64;
        assert!((mean - 0.3).abs() < 0.01, "{mean}");
        let mean: f64 = (0..n)
            .map(|_| beta_by_gammas(&mut rng, 0.4, 0.6))
            .sum::<f64>()
            / n as f64;
        assert!((mean - 0.4).abs() < 0.01, "{mean}");
    }
}
