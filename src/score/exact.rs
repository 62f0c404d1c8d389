//! Exact sums of decayed weights, for reading weighted quantiles without rounding.
//!
//! A weight is a double, and a double is exactly `m × 2^e` with an integer `m < 2^53`. Over one
//! sample every weight is held as the integer `m × 2^(e - e_min)` (`e_min` the sample's smallest
//! exponent), so sums are exact integers and "the cumulative weight reaches 95% of the total" is
//! decided exactly as `20 × cumulative >= 19 × total`. Summed as doubles one by one, 38 equal
//! weights can land a hair under 95% of 40 of them, and the p95 would skip to the next, slower
//! measurement (`rubrics/README.md`, "Curve checks").

use std::cmp::Ordering;

use smallvec::{SmallVec, smallvec};

/// Limbs kept inline: a sample's weights span a few dozen binary orders at most, so its sums fit
/// in two limbs and a cumulative sum per measurement allocates nothing.
type Limbs = SmallVec<[u64; 2]>;

/// A non-negative integer of any size: little-endian 64-bit limbs, no trailing zero limb.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Natural(Limbs);

impl Natural {
    pub fn zero() -> Natural {
        Natural(Limbs::new())
    }

    /// `m × 2^shift`.
    pub fn shifted(m: u64, shift: u32) -> Natural {
        Natural(smallvec![m]).shl(shift)
    }

    /// The integer `x`.
    pub fn of_u128(x: u128) -> Natural {
        Natural(smallvec![x as u64, (x >> 64) as u64]).trim()
    }

    fn trim(mut self) -> Natural {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
        self
    }

    pub fn add_assign(&mut self, other: &Natural) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        let mut carry = 0u64;
        for (i, limb) in self.0.iter_mut().enumerate() {
            let (s1, c1) = limb.overflowing_add(other.0.get(i).copied().unwrap_or(0));
            let (s2, c2) = s1.overflowing_add(carry);
            *limb = s2;
            carry = u64::from(c1) + u64::from(c2);
            if carry == 0 && i >= other.0.len() {
                break;
            }
        }
        if carry > 0 {
            self.0.push(carry);
        }
    }

    /// `self × k`.
    pub fn mul_small(&self, k: u64) -> Natural {
        let mut out = Limbs::with_capacity(self.0.len() + 1);
        let mut carry = 0u128;
        for limb in &self.0 {
            let product = u128::from(*limb) * u128::from(k) + carry;
            out.push(product as u64);
            carry = product >> 64;
        }
        out.push(carry as u64);
        Natural(out).trim()
    }

    /// `self × 2^bits`.
    pub fn shl(&self, bits: u32) -> Natural {
        if self.0.is_empty() {
            return Natural::zero();
        }
        let (limbs, rest) = ((bits / 64) as usize, bits % 64);
        let mut out: Limbs = smallvec![0u64; limbs];
        if rest == 0 {
            out.extend_from_slice(&self.0);
        } else {
            let mut carry = 0u64;
            for limb in &self.0 {
                out.push((limb << rest) | carry);
                carry = limb >> (64 - rest);
            }
            out.push(carry);
        }
        Natural(out).trim()
    }

    /// The value as a double times a power of two: `(mantissa, exponent)` with the top 64 bits in
    /// `mantissa` (truncated below them), for ratios that need not be exact.
    fn top(&self) -> (f64, i32) {
        let Some(&high) = self.0.last() else {
            return (0.0, 0);
        };
        let n = self.0.len();
        let lead = high.leading_zeros();
        let below = if n >= 2 { self.0[n - 2] } else { 0 };
        let top = if lead == 0 {
            high
        } else {
            (high << lead) | (below >> (64 - lead))
        };
        (top as f64, (n as i32 - 1) * 64 - lead as i32)
    }

    /// `self / other` as a double, to within a few units in the last place (not exact).
    pub fn ratio(&self, other: &Natural) -> f64 {
        let (a, ea) = self.top();
        let (b, eb) = other.top();
        if b == 0.0 {
            return f64::NAN;
        }
        libm::ldexp(a / b, ea - eb)
    }
}

impl PartialOrd for Natural {
    fn partial_cmp(&self, other: &Natural) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Natural {
    fn cmp(&self, other: &Natural) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }
}

/// A positive finite double as `(m, e)` with `value = m × 2^e` exactly.
pub fn decompose(x: f64) -> (u64, i32) {
    let bits = x.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    if exponent == 0 {
        (fraction, -1074) // subnormal
    } else {
        (fraction | (1u64 << 52), exponent - 1075)
    }
}

/// Positive finite weights as integers on one scale (`weight × 2^-e_min`): exact to add.
pub fn scaled(weights: &[f64]) -> Vec<Natural> {
    let parts: Vec<(u64, i32)> = weights.iter().map(|w| decompose(*w)).collect();
    let e_min = parts.iter().map(|(_, e)| *e).min().unwrap_or(0);
    parts
        .into_iter()
        .map(|(m, e)| Natural::shifted(m, (e - e_min) as u32))
        .collect()
}

/// A quantile level as an exact fraction `num / (den × 2^shift)` in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    num: u64,
    den: u64,
    shift: u32,
}

impl Level {
    /// 95%, exactly (19/20).
    pub const P95: Level = Level {
        num: 19,
        den: 20,
        shift: 0,
    };

    /// `percent`% exactly.
    pub fn percent(percent: u64) -> Level {
        Level {
            num: percent.min(100),
            den: 100,
            shift: 0,
        }
    }

    /// A level drawn as a double (the Monte Carlo band's order-statistic level), read exactly as
    /// the dyadic rational it is; clamped to [0, 1].
    pub fn from_f64(u: f64) -> Level {
        if u.is_nan() || u <= 0.0 {
            return Level {
                num: 0,
                den: 1,
                shift: 0,
            };
        }
        if u >= 1.0 {
            return Level {
                num: 1,
                den: 1,
                shift: 0,
            };
        }
        let (m, e) = decompose(u);
        // u < 1, so e < 0: u = m / 2^-e.
        Level {
            num: m,
            den: 1,
            shift: (-e) as u32,
        }
    }

    /// Whether `part / total` reaches this level: `part × den × 2^shift >= num × total`.
    pub fn reached_by(&self, part: &Natural, total: &Natural) -> bool {
        part.mul_small(self.den).shl(self.shift) >= total.mul_small(self.num)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decomposes_exactly() {
        assert_eq!(decompose(1.0), (1 << 52, -52));
        assert_eq!(decompose(0.5), (1 << 52, -53));
        assert_eq!(decompose(f64::MIN_POSITIVE / 4.0), (1 << 50, -1074));
        let x = 0.1f64;
        let (m, e) = decompose(x);
        assert_eq!(libm::ldexp(m as f64, e), x);
    }

    #[test]
    fn sums_and_compares_exactly() {
        // 0.1 + 0.2 != 0.3 in doubles, and also exactly (they are different dyadic rationals);
        // but 40 copies of one weight add up to exactly 40 times it.
        let w = libm::exp2(-30.0 / 24.0 / 14.0);
        let parts = scaled(&vec![w; 40]);
        let mut sum = Natural::zero();
        let mut cumulative = Vec::new();
        for p in &parts {
            sum.add_assign(p);
            cumulative.push(sum.clone());
        }
        assert_eq!(sum, parts[0].mul_small(40));
        // 38 of 40 is exactly 95%: reached; 37 is not.
        assert!(Level::P95.reached_by(&cumulative[37], &sum));
        assert!(!Level::P95.reached_by(&cumulative[36], &sum));
        assert!(Level::percent(95).reached_by(&cumulative[37], &sum));
        // The float running sum of the same weights misses it (the bug this module fixes).
        let float_38: f64 = (0..38).map(|_| w).sum();
        let float_40: f64 = (0..40).map(|_| w).sum();
        assert!(float_38 < 0.95 * float_40);
    }

    #[test]
    fn wide_ranges_carry_across_limbs() {
        let parts = scaled(&[1.0, libm::ldexp(1.0, -700), 1.0]);
        let mut sum = Natural::zero();
        for p in &parts {
            sum.add_assign(p);
        }
        assert!(sum > parts[0].mul_small(2));
        assert!(sum < parts[0].mul_small(3));
        assert!((sum.ratio(&parts[0]) - 2.0).abs() < 1e-15);
        assert_eq!(
            Natural::shifted(u64::MAX, 1).mul_small(2),
            Natural::shifted(u64::MAX, 2)
        );
    }

    #[test]
    fn levels_from_doubles_are_exact() {
        // 0.5 of 2 is exactly 1.
        let one = Natural::shifted(1, 0);
        let two = Natural::shifted(2, 0);
        assert!(Level::from_f64(0.5).reached_by(&one, &two));
        assert!(!Level::from_f64(0.5000000000000001).reached_by(&one, &two));
        assert!(Level::from_f64(0.0).reached_by(&Natural::zero(), &two));
        assert!(Level::from_f64(1.0).reached_by(&two, &two));
        assert!(!Level::from_f64(1.0).reached_by(&one, &two));
    }
}
