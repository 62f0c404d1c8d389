//! Numbers and coordinates as the pages write them; the escaping and bounding of every value a
//! page shows is `crate::html` (shared with the calibration report), re-exported here.

pub(crate) use crate::html::{escape, text};

/// A number with at most `decimals` decimals, trailing zeros dropped (`71.25`, `80`).
pub(crate) fn number(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return "–".to_string();
    }
    let s = format!("{x:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" { "0".to_string() } else { s }
}

/// A value for an SVG coordinate: one decimal, always finite.
pub(crate) fn coord(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.1}")
    } else {
        "0".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_drop_trailing_zeros() {
        assert_eq!(number(71.2500, 2), "71.25");
        assert_eq!(number(80.0, 2), "80");
        assert_eq!(number(-0.0001, 2), "0");
        assert_eq!(number(f64::NAN, 2), "–");
    }
}
