//! RFC 8785 canonical JSON (JCS).
//!
//! Written here rather than taken from a crate so that its two subtle rules are visible and tested
//! against the RFC's own examples: numbers are IEEE 754 doubles printed the way ECMAScript's
//! `Number.prototype.toString` prints them (shortest round-trip digits, exponent form outside
//! 1e-7..1e21), and object keys are sorted by their UTF-16 code units, not by UTF-8 bytes.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// Why a value could not be canonicalised.
#[derive(Debug, thiserror::Error)]
pub enum CanonicalError {
    #[error("cannot turn the value into JSON: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// The RFC 8785 canonical bytes of a JSON value.
pub fn to_canonical_bytes(value: &serde_json::Value) -> Vec<u8> {
    let mut out = String::new();
    write_value(&mut out, value);
    out.into_bytes()
}

/// The RFC 8785 canonical bytes of anything serde can turn into JSON.
pub fn canonical_bytes_of<T: Serialize>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    let json = serde_json::to_value(value)?;
    Ok(to_canonical_bytes(&json))
}

/// Lowercase hex SHA-256 of the canonical bytes of a JSON value.
pub fn canonical_sha256(value: &serde_json::Value) -> String {
    hex::encode(Sha256::digest(to_canonical_bytes(value)))
}

fn write_value(out: &mut String, value: &serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => match n.as_i64() {
            // An integer of at most 2^53 is an exact double: its digits are its text.
            Some(i) if i.unsigned_abs() <= EXACT_INTEGER => write_integer(out, i),
            // JCS numbers are doubles: an integer beyond 2^53 is printed as the double it becomes.
            _ => {
                let as_double = n.as_f64().unwrap_or(0.0);
                match exact_integer(as_double) {
                    Some(i) => write_integer(out, i),
                    None => out.push_str(&format_number(as_double)),
                }
            }
        },
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| key_order(a.0, b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

/// Keys in the order of their UTF-16 code units. UTF-8 bytes sort like code points, which differs
/// only between a supplementary character and one from U+E000 to U+FFFF: ASCII keys (nearly
/// all) are compared as bytes.
fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    if a.is_ascii() && b.is_ascii() {
        a.cmp(b)
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

/// 2^53: every integer up to it in magnitude is an exact double.
const EXACT_INTEGER: u64 = 1 << 53;

/// A double that is an integer of at most 2^53 in magnitude (ECMAScript prints its digits).
fn exact_integer(x: f64) -> Option<i64> {
    (x.fract() == 0.0 && x.abs() <= EXACT_INTEGER as f64).then_some(x as i64)
}

fn write_integer(out: &mut String, i: i64) {
    use std::fmt::Write;
    let _ = write!(out, "{i}");
}

pub(crate) fn write_string(out: &mut String, s: &str) {
    out.push('"');
    // Runs without an escape are copied whole; every escaped character is ASCII, so the byte
    // offsets are character boundaries.
    let mut from = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            b'\t' => "\\t",
            b'\n' => "\\n",
            0x0c => "\\f",
            b'\r' => "\\r",
            b if b < 0x20 => {
                use std::fmt::Write;
                out.push_str(&s[from..i]);
                let _ = write!(out, "\\u{b:04x}");
                from = i + 1;
                continue;
            }
            _ => continue,
        };
        out.push_str(&s[from..i]);
        out.push_str(escape);
        from = i + 1;
    }
    out.push_str(&s[from..]);
    out.push('"');
}

/// A finite double as ECMAScript's `Number.prototype.toString` prints it (ECMA-262, 7.1.12.1).
///
/// Rust's `{:e}` gives the shortest digits that round-trip (the same digits ECMAScript asks for);
/// only the placement of the decimal point and the exponent differ, and that is done here.
/// Non-finite values cannot occur in a `serde_json::Value`; they print as `null` defensively.
pub fn format_number(x: f64) -> String {
    if !x.is_finite() {
        return "null".to_string();
    }
    if x == 0.0 {
        return "0".to_string(); // also for -0
    }
    if let Some(i) = exact_integer(x) {
        return i.to_string();
    }
    let (digits, exponent) = tie_to_even(x.abs(), scientific(&format!("{:e}", x.abs())));
    let k = digits.len() as i32;
    let n = exponent + 1; // the decimal point sits after n digits
    let mut out = String::new();
    if x < 0.0 {
        out.push('-');
    }
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n >= 1 { '+' } else { '-' });
        out.push_str(&(n - 1).abs().to_string());
    }
    out
}

/// Digits and exponent of Rust's scientific text (`"1.25e3"` -> `("125", 3)`).
fn scientific(text: &str) -> (String, i32) {
    let (mantissa, exponent) = text.split_once('e').unwrap_or((text, "0"));
    let digits = mantissa.chars().filter(|c| *c != '.').collect();
    (digits, exponent.parse().unwrap_or(0))
}

/// ECMAScript breaks a tie between two shortest digit strings equally close to the value by
/// taking the even one; Rust's shortest formatting may take the other. A tie means the value is
/// exactly the midpoint: its exact decimal expansion has one digit more, a 5.
fn tie_to_even(x: f64, shortest: (String, i32)) -> (String, i32) {
    let (digits, exponent) = shortest;
    let k = digits.len();
    let (wide, wide_exp) = scientific(&format!("{:.*e}", k, x));
    if wide.len() != k + 1 || !wide.ends_with('5') || wide_exp != exponent {
        return (digits, exponent);
    }
    // 780 digits hold the exact expansion of any double: exact when the rest are zeros.
    let (exact, _) = scientific(&format!("{:.780e}", x));
    if !exact.starts_with(&wide) || !exact[k + 1..].bytes().all(|b| b == b'0') {
        return (digits, exponent);
    }
    let lower = wide[..k].to_string();
    let lower_is_even = lower
        .bytes()
        .last()
        .is_some_and(|b| (b - b'0').is_multiple_of(2));
    if lower_is_even {
        return (lower, exponent);
    }
    // The upper neighbour: lower + 1 in the last place (a carry out of all nines keeps Rust's).
    let mut upper: Vec<u8> = lower.into_bytes();
    for b in upper.iter_mut().rev() {
        if *b == b'9' {
            *b = b'0';
        } else {
            *b += 1;
            return (String::from_utf8(upper).unwrap_or(digits), exponent);
        }
    }
    (digits, exponent)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical text.
    #[test]
    fn rfc8785_appendix_b_numbers() {
        let cases: [(u64, &str); 24] = [
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for (bits, expected) in cases {
            assert_eq!(
                format_number(f64::from_bits(bits)),
                expected,
                "bits {bits:#018x}"
            );
        }
    }

    /// RFC 8785 section 3.2.2: the worked example of a whole document.
    #[test]
    fn rfc8785_section_3_2_2_example() {
        let input = r#"{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
        let value: serde_json::Value = serde_json::from_str(input).unwrap();
        let expected = "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
        assert_eq!(
            String::from_utf8(to_canonical_bytes(&value)).unwrap(),
            expected
        );
    }

    /// RFC 8785 section 3.2.3: keys sort by UTF-16 code units (the emoji's surrogates sort before
    /// U+FB33 although its UTF-8 bytes would sort after).
    #[test]
    fn rfc8785_section_3_2_3_key_order() {
        let input = r#"{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}"#;
        let value: serde_json::Value = serde_json::from_str(input).unwrap();
        let text = String::from_utf8(to_canonical_bytes(&value)).unwrap();
        let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
            \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
            \"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(text, expected);
    }

    #[test]
    fn integers_and_nesting() {
        let value = serde_json::json!({"b": [1, 2.0, -3, {"z": 1, "a": "x"}], "a": 1e21, "c": 123456789012_i64});
        let text = String::from_utf8(to_canonical_bytes(&value)).unwrap();
        assert_eq!(
            text,
            r#"{"a":1e+21,"b":[1,2,-3,{"a":"x","z":1}],"c":123456789012}"#
        );
    }

    /// The shortcuts (integers printed as integers, strings copied in runs, ASCII keys compared
    /// as bytes) print what the general rules print: numbers around 2^53 and past it, every
    /// control character, escapes beside multi-byte characters, mixed keys.
    #[test]
    fn shortcuts_print_what_the_general_rules_print() {
        let general_number = |x: f64| {
            let (digits, exponent) = tie_to_even(x.abs(), scientific(&format!("{:e}", x.abs())));
            let n = exponent + 1;
            let k = digits.len() as i32;
            let sign = if x < 0.0 { "-" } else { "" };
            assert!(k <= n && n <= 21, "{x} is an integer below 1e21");
            format!("{sign}{digits}{}", "0".repeat((n - k) as usize))
        };
        let two53 = (1u64 << 53) as f64;
        for x in [
            1.0,
            -1.0,
            10.0,
            1e15,
            123456789012.0,
            two53 - 1.0,
            two53,
            -two53,
            1e18,
        ] {
            assert_eq!(format_number(x), general_number(x), "{x}");
            let value = serde_json::json!([x, x as i64]);
            let expected = format!("[{0},{0}]", general_number(x));
            assert_eq!(
                String::from_utf8(to_canonical_bytes(&value)).unwrap(),
                expected
            );
        }
        // Past 2^53 an integer prints as the double it becomes.
        let value = serde_json::json!([9007199254740993_u64, u64::MAX]);
        assert_eq!(
            String::from_utf8(to_canonical_bytes(&value)).unwrap(),
            "[9007199254740992,18446744073709552000]"
        );
        let text: String = (0u8..0x20).map(char::from).collect::<String>() + "é\"\\€a\u{1f600}";
        let mut expected = String::from("\"");
        for c in text.chars() {
            match c {
                '"' => expected.push_str("\\\""),
                '\\' => expected.push_str("\\\\"),
                '\u{8}' => expected.push_str("\\b"),
                '\t' => expected.push_str("\\t"),
                '\n' => expected.push_str("\\n"),
                '\u{c}' => expected.push_str("\\f"),
                '\r' => expected.push_str("\\r"),
                c if (c as u32) < 0x20 => expected.push_str(&format!("\\u{:04x}", c as u32)),
                c => expected.push(c),
            }
        }
        expected.push('"');
        let mut out = String::new();
        write_string(&mut out, &text);
        assert_eq!(out, expected);
        let keys = ["b", "a", "\u{e000}", "\u{1f600}", "A", "aa", ""];
        let mut by_bytes: Vec<&str> = keys.to_vec();
        by_bytes.sort_by(|a, b| key_order(a, b));
        let mut by_utf16 = keys.to_vec();
        by_utf16.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
        assert_eq!(by_bytes, by_utf16);
    }

    fn format_number_general(x: f64) -> String {
        let (digits, exponent) = tie_to_even(x.abs(), scientific(&format!("{:e}", x.abs())));
        let (k, n) = (digits.len() as i32, exponent + 1);
        assert!(k <= n && n <= 21, "{x} is a whole number under 1e21");
        let sign = if x < 0.0 { "-" } else { "" };
        format!("{sign}{digits}{}", "0".repeat((n - k) as usize))
    }

    #[test]
    fn whole_numbers_print_as_the_general_path_prints_them() {
        let mut cases: Vec<f64> = (1..=2_000).map(f64::from).collect();
        for p in 0..53 {
            let two = (1u64 << p) as f64;
            cases.extend([two, two - 1.0, two + 1.0, -two]);
        }
        cases.extend([
            1e15,
            123_456_789_012_345.0,
            9_007_199_254_740_991.0,
            -9_007_199_254_740_991.0,
            1_024.0 * 1_000_003.0,
        ]);
        for x in cases {
            assert_eq!(format_number(x), format_number_general(x), "{x}");
        }
        // 2^53 and beyond take the general path (it is in Appendix B above).
        assert_eq!(format_number(9_007_199_254_740_992.0), "9007199254740992");
        assert_eq!(format_number(1e21), "1e+21");
        assert_eq!(format_number(0.5), "0.5");
    }

    #[test]
    fn strings_without_escapes_are_copied_and_others_escaped() {
        let write = |s: &str| {
            let mut out = String::new();
            write_string(&mut out, s);
            out
        };
        assert_eq!(write("2026-12-01T00:00:00Z"), "\"2026-12-01T00:00:00Z\"");
        assert_eq!(write("é\u{1f600}"), "\"é\u{1f600}\"");
        assert_eq!(write("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        // As serde_json writes them (the same escapes: short ones, else \u00xx).
        for s in ["", "x", "a\"b", "tab\there", "\u{7f}\u{1f}\u{8}\u{c}\r"] {
            assert_eq!(serde_json::to_string(s).unwrap(), write(s), "{s:?}");
        }
    }
}
