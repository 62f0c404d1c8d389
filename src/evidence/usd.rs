//! US dollar amounts as exact fixed-point numbers.
//!
//! Money is never a float here: caps, prices and running totals are integers of 10^-18 USD, so a
//! sum of many small payments is exact and a comparison against a cap is never off by rounding.
//! Converting a token amount to USD rounds *up*, so a cap can only be met early, never overshot.

use std::fmt;
use std::str::FromStr;

use alloy::primitives::U256;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Decimal places kept.
pub const USD_DECIMALS: u32 = 18;
/// Decimal places of a price in a score's inputs (x402 quotes in 6-decimal dollar tokens).
pub const PRICE_DECIMALS: u32 = 6;
const SCALE: u128 = 1_000_000_000_000_000_000;

/// An amount of US dollars, exact to 10^-18.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd(u128);

impl Usd {
    pub const ZERO: Usd = Usd(0);

    /// From units of 10^-18 USD.
    pub const fn from_atto(atto: u128) -> Usd {
        Usd(atto)
    }

    /// In units of 10^-18 USD.
    pub const fn atto(self) -> u128 {
        self.0
    }

    /// From atomic units of a 6-decimal dollar token (USDC, as x402 quotes), exactly.
    pub fn of_micros(units: u128) -> Option<Usd> {
        units
            .checked_mul(10u128.pow(USD_DECIMALS - PRICE_DECIMALS))
            .map(Usd)
    }

    /// The one text a price has in a score's inputs, and so in its digest and its Monte Carlo
    /// seed: exactly six decimals (`0.010000`), rounded half up beyond them. `probe`, the daemon
    /// and `recompute` all write it so, so the same evidence gives the same inputs; six decimals
    /// is the form every score the daemon published was written in.
    pub fn price_text(self) -> String {
        let unit = 10u128.pow(USD_DECIMALS - PRICE_DECIMALS);
        let micros = self.0 / unit + u128::from(self.0 % unit >= unit / 2);
        format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
    }

    pub fn checked_add(self, other: Usd) -> Option<Usd> {
        self.0.checked_add(other.0).map(Usd)
    }

    /// What `amount` atomic units of a token with `decimals` decimals cost at `usd_per_unit`
    /// dollars per whole token, rounded up to the next 10^-18 USD. `None` when the result does not
    /// fit (an absurd amount: refuse it).
    pub fn of_token_amount(amount: U256, decimals: u8, usd_per_unit: Usd) -> Option<Usd> {
        let divisor = U256::from(10u8).checked_pow(U256::from(decimals))?;
        let numerator = amount.checked_mul(U256::from(usd_per_unit.0))?;
        let (quotient, remainder) = numerator.div_rem(divisor);
        let rounded = if remainder.is_zero() {
            quotient
        } else {
            quotient.checked_add(U256::from(1u8))?
        };
        u128::try_from(rounded).ok().map(Usd)
    }
}

/// Why a text is not a dollar amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a dollar amount ({why}); write it like 0.05 or 10")]
pub struct UsdParseError {
    text: String,
    why: &'static str,
}

impl FromStr for Usd {
    type Err = UsdParseError;

    /// Plain decimal notation only: digits, at most one point, at most 18 decimals. No sign, no
    /// exponent, no thousands separators, no currency symbol.
    fn from_str(text: &str) -> Result<Usd, UsdParseError> {
        let err = |why| UsdParseError {
            text: text.chars().take(40).collect(),
            why,
        };
        let (whole, fraction) = match text.split_once('.') {
            Some((w, f)) => (w, f),
            None => (text, ""),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(err("empty"));
        }
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || !digits(fraction) {
            return Err(err("only digits and one decimal point are allowed"));
        }
        if fraction.len() > USD_DECIMALS as usize {
            return Err(err("more than 18 decimals"));
        }
        let whole_value: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| err("too large"))?
        };
        let mut fraction_value: u128 = 0;
        for b in fraction.bytes() {
            fraction_value = fraction_value * 10 + u128::from(b - b'0');
        }
        fraction_value *= 10u128.pow(USD_DECIMALS - fraction.len() as u32);
        whole_value
            .checked_mul(SCALE)
            .and_then(|w| w.checked_add(fraction_value))
            .map(Usd)
            .ok_or_else(|| err("too large"))
    }
}

impl fmt::Display for Usd {
    /// Plain decimal, trailing zeros dropped: `0.05`, `10`, `0.000001`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / SCALE;
        let fraction = self.0 % SCALE;
        if fraction == 0 {
            return write!(f, "{whole}");
        }
        let digits = format!("{fraction:018}");
        write!(f, "{whole}.{}", digits.trim_end_matches('0'))
    }
}

impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Usd {
    /// A string (`"0.05"`) or a plain JSON number (`0.05`, read from its decimal text).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Usd, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        let text = match &value {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            _ => return Err(serde::de::Error::custom("a dollar amount must be a string")),
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_plain_decimals() {
        for (text, shown) in [
            ("0.05", "0.05"),
            ("10", "10"),
            ("10.", "10"),
            (".5", "0.5"),
            ("0.000001", "0.000001"),
            ("1.000000000000000001", "1.000000000000000001"),
        ] {
            let usd: Usd = text.parse().expect(text);
            assert_eq!(usd.to_string(), shown);
        }
        for bad in [
            "",
            ".",
            "-1",
            "+1",
            "1e3",
            "1,000",
            "$5",
            "0.0000000000000000001",
            "1.2.3",
            " 1",
            "NaN",
        ] {
            assert!(bad.parse::<Usd>().is_err(), "{bad:?} must not parse");
        }
        assert!("999999999999999999999999".parse::<Usd>().is_err());
    }

    #[test]
    fn token_amounts_convert_exactly_and_round_up() {
        let one: Usd = "1".parse().unwrap();
        // 10000 atomic units of a 6-decimal dollar token: exactly one cent.
        let cost = Usd::of_token_amount(U256::from(10_000u64), 6, one).unwrap();
        assert_eq!(cost, "0.01".parse().unwrap());
        // One atomic unit of an 18-decimal token at a third of a dollar rounds up.
        let third: Usd = "0.333333333333333333".parse().unwrap();
        let cost = Usd::of_token_amount(U256::from(1u8), 18, third).unwrap();
        assert_eq!(cost, Usd::from_atto(1));
        let cost = Usd::of_token_amount(U256::from(3u8), 19, third).unwrap();
        assert_eq!(cost, Usd::from_atto(1), "0.0999... atto rounds up to 1");
        // Absurd amounts do not fit and are reported as such, never wrapped.
        assert_eq!(Usd::of_token_amount(U256::MAX, 6, one), None);
    }

    #[test]
    fn a_price_has_one_text_of_six_decimals() {
        let price = |micros| Usd::of_micros(micros).unwrap().price_text();
        assert_eq!(price(10_000), "0.010000");
        assert_eq!(price(0), "0.000000");
        assert_eq!(price(123_456_789), "123.456789");
        // As the daemon always wrote a price of 6-decimal units (its scores recompute).
        for micros in [1u128, 10_000, 30_000, 999_999, 1_000_000, 123_456_789] {
            assert_eq!(price(micros), format!("{:.6}", micros as f64 / 1e6));
        }
        let finer: Usd = "0.0000015".parse().unwrap();
        assert_eq!(
            finer.price_text(),
            "0.000002",
            "half up beyond six decimals"
        );
        assert_eq!(Usd::of_micros(u128::MAX), None);
    }

    #[test]
    fn serde_reads_strings_and_numbers() {
        let usd: Usd = serde_json::from_str("\"0.25\"").unwrap();
        assert_eq!(usd.to_string(), "0.25");
        let usd: Usd = serde_json::from_str("0.25").unwrap();
        assert_eq!(usd.to_string(), "0.25");
        assert!(serde_json::from_str::<Usd>("-0.25").is_err());
        assert_eq!(serde_json::to_string(&usd).unwrap(), "\"0.25\"");
    }
}
