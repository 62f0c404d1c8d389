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

/// The RFC 8785 canonical bytes of anything serde can turn into JSON: the bytes of
/// `to_canonical_bytes(&serde_json::to_value(value)?)`, written straight from the value
/// (`direct`) without building the JSON value first.
pub fn canonical_bytes_of<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    canonical_bytes_without(value, &[])
}

/// [`canonical_bytes_of`] with the outermost object's members named in `left_out` left out (as
/// if removed from the JSON value before it was made canonical).
pub fn canonical_bytes_without<T: Serialize + ?Sized>(
    value: &T,
    left_out: &'static [&'static str],
) -> Result<Vec<u8>, CanonicalError> {
    let mut out = String::new();
    value.serialize(direct::Writer {
        out: &mut out,
        left_out,
    })?;
    Ok(out.into_bytes())
}

/// Lowercase hex SHA-256 of [`canonical_bytes_of`] (the canonical bytes of the value's JSON).
pub fn canonical_sha256_of<T: Serialize + ?Sized>(value: &T) -> Result<String, CanonicalError> {
    Ok(hex::encode(Sha256::digest(canonical_bytes_of(value)?)))
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
        Value::Number(n) => write_number(out, n),
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

/// A JSON number as a double, the way RFC 8785 prints it.
fn write_number(out: &mut String, n: &serde_json::Number) {
    match n.as_i64() {
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
    }
}

/// Keys in the order of their UTF-16 code units. UTF-8 bytes sort like code points, which differs
/// only between a supplementary character and one from U+E000 to U+FFFF: the bytes are compared,
/// and only where the first difference is between the lead bytes of those two (0xF0 to 0xF4
/// against 0xEE or 0xEF) is the order turned around. (A difference in a continuation byte is
/// between two characters of one lead byte, so of one length and one UTF-16 form.)
fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let Some(i) = x.iter().zip(y).position(|(p, q)| p != q) else {
        return x.len().cmp(&y.len());
    };
    let (p, q) = (x[i], y[i]);
    let supplementary = |lead: u8| lead >= 0xF0;
    let high_bmp = |lead: u8| lead == 0xEE || lead == 0xEF;
    if (supplementary(p) && high_bmp(q)) || (high_bmp(p) && supplementary(q)) {
        // A surrogate (0xD800..) sorts before U+E000..U+FFFF in UTF-16.
        q.cmp(&p)
    } else {
        p.cmp(&q)
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
    // Most strings need no escape: checked in one pass over the bytes, then copied whole.
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
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
    // A tie needs the exact expansion to have exactly k + 1 significant digits: most doubles
    // have many more, told from their bits without formatting them twice.
    if exact_digits_exceed(x, k + 1) {
        return (digits, exponent);
    }
    tie_to_even_exact(x, (digits, exponent))
}

/// [`tie_to_even`] by formatting the exact expansion.
fn tie_to_even_exact(x: f64, shortest: (String, i32)) -> (String, i32) {
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

/// Whether the exact decimal expansion of the finite, positive, non-integer `x` certainly has more
/// than `limit` significant digits (`false`: it may not). `x = m * 2^q` with `m` odd and `q < 0`
/// is `m * 5^-q / 10^-q`, whose significant digits are those of the odd integer `m * 5^-q`.
fn exact_digits_exceed(x: f64, limit: usize) -> bool {
    let bits = x.to_bits();
    let field = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    let (mut m, mut q) = match field {
        0 => (fraction, -1074),
        _ => (fraction | (1u64 << 52), field - 1075),
    };
    if m == 0 {
        return false;
    }
    let zeros = m.trailing_zeros();
    m >>= zeros;
    q += zeros as i32;
    if q >= 0 || limit > 38 {
        return false;
    }
    // 5^27 alone has 19 digits; beyond 5^55 the product cannot fit a u128.
    let fives = (-q) as u32;
    if fives > 55 {
        return limit < 39;
    }
    let Some(exact) = 5u128
        .checked_pow(fives)
        .and_then(|p| p.checked_mul(u128::from(m)))
    else {
        return limit < 39;
    };
    exact >= 10u128.pow(limit as u32)
}

/// RFC 8785 bytes written straight from a `Serialize` value, without the `serde_json::Value` in
/// between: the bytes `write_value(&serde_json::to_value(v)?)` gives, by serde_json's value
/// rules (a float that is not finite is `null`, bytes are an array of numbers, enums are tagged
/// externally, map keys are strings or printed integers and booleans, a later duplicate key
/// replaces an earlier one). An object's members are written straight to the output and put in
/// key order in place when it ends.
mod direct {
    use std::borrow::Cow;
    use std::ops::Range;

    use serde::Serialize;
    use serde::ser::{self, Error as _, Impossible};
    use serde_json::{Error, Number};

    use super::{key_order, write_number, write_string, write_value};

    type Result<T> = std::result::Result<T, Error>;

    /// How serde_json's `RawValue` names itself to a serializer (its text is parsed, as
    /// `serde_json::to_value` does).
    const RAW_VALUE: &str = "$serde_json::private::RawValue";

    pub(super) struct Writer<'a> {
        pub out: &'a mut String,
        /// Members left out of this object (the outermost one only).
        pub left_out: &'static [&'static str],
    }

    fn inner(out: &mut String) -> Writer<'_> {
        Writer { out, left_out: &[] }
    }

    impl Writer<'_> {
        fn number(self, n: Number) -> Result<()> {
            write_number(self.out, &n);
            Ok(())
        }
    }

    impl<'a> ser::Serializer for Writer<'a> {
        type Ok = ();
        type Error = Error;
        type SerializeSeq = Seq<'a>;
        type SerializeTuple = Seq<'a>;
        type SerializeTupleStruct = Seq<'a>;
        type SerializeTupleVariant = Seq<'a>;
        type SerializeMap = Object<'a>;
        type SerializeStruct = Object<'a>;
        type SerializeStructVariant = Object<'a>;

        fn serialize_bool(self, v: bool) -> Result<()> {
            self.out.push_str(if v { "true" } else { "false" });
            Ok(())
        }
        fn serialize_i8(self, v: i8) -> Result<()> {
            self.serialize_i64(v.into())
        }
        fn serialize_i16(self, v: i16) -> Result<()> {
            self.serialize_i64(v.into())
        }
        fn serialize_i32(self, v: i32) -> Result<()> {
            self.serialize_i64(v.into())
        }
        fn serialize_i64(self, v: i64) -> Result<()> {
            self.number(v.into())
        }
        fn serialize_i128(self, v: i128) -> Result<()> {
            if let Ok(v) = u64::try_from(v) {
                self.number(v.into())
            } else if let Ok(v) = i64::try_from(v) {
                self.number(v.into())
            } else {
                Err(Error::custom("number out of range"))
            }
        }
        fn serialize_u8(self, v: u8) -> Result<()> {
            self.serialize_u64(v.into())
        }
        fn serialize_u16(self, v: u16) -> Result<()> {
            self.serialize_u64(v.into())
        }
        fn serialize_u32(self, v: u32) -> Result<()> {
            self.serialize_u64(v.into())
        }
        fn serialize_u64(self, v: u64) -> Result<()> {
            self.number(v.into())
        }
        fn serialize_u128(self, v: u128) -> Result<()> {
            match u64::try_from(v) {
                Ok(v) => self.number(v.into()),
                Err(_) => Err(Error::custom("number out of range")),
            }
        }
        fn serialize_f32(self, v: f32) -> Result<()> {
            self.serialize_f64(f64::from(v))
        }
        fn serialize_f64(self, v: f64) -> Result<()> {
            match Number::from_f64(v) {
                Some(n) => self.number(n),
                None => {
                    self.out.push_str("null");
                    Ok(())
                }
            }
        }
        fn serialize_char(self, v: char) -> Result<()> {
            write_string(self.out, v.encode_utf8(&mut [0; 4]));
            Ok(())
        }
        fn serialize_str(self, v: &str) -> Result<()> {
            write_string(self.out, v);
            Ok(())
        }
        fn serialize_bytes(self, v: &[u8]) -> Result<()> {
            self.out.push('[');
            for (i, b) in v.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                super::write_integer(self.out, i64::from(*b));
            }
            self.out.push(']');
            Ok(())
        }
        fn serialize_none(self) -> Result<()> {
            self.serialize_unit()
        }
        fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<()> {
            v.serialize(self)
        }
        fn serialize_unit(self) -> Result<()> {
            self.out.push_str("null");
            Ok(())
        }
        fn serialize_unit_struct(self, _: &'static str) -> Result<()> {
            self.serialize_unit()
        }
        fn serialize_unit_variant(
            self,
            _: &'static str,
            _: u32,
            variant: &'static str,
        ) -> Result<()> {
            self.serialize_str(variant)
        }
        fn serialize_newtype_struct<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            v: &T,
        ) -> Result<()> {
            v.serialize(self)
        }
        fn serialize_newtype_variant<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            _: u32,
            variant: &'static str,
            v: &T,
        ) -> Result<()> {
            let mut object = Object::new(self.out, self.left_out, false, false);
            ser::SerializeStruct::serialize_field(&mut object, variant, v)?;
            ser::SerializeStruct::end(object)
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'a>> {
            self.out.push('[');
            Ok(Seq {
                out: self.out,
                first: true,
                close: "]",
            })
        }
        fn serialize_tuple(self, len: usize) -> Result<Seq<'a>> {
            self.serialize_seq(Some(len))
        }
        fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Seq<'a>> {
            self.serialize_seq(Some(len))
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            variant: &'static str,
            _: usize,
        ) -> Result<Seq<'a>> {
            // `{"variant":[...]}`: one member, nothing to sort.
            self.out.push('{');
            write_string(self.out, variant);
            self.out.push_str(":[");
            Ok(Seq {
                out: self.out,
                first: true,
                close: "]}",
            })
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Object<'a>> {
            Ok(Object::new(self.out, self.left_out, false, false))
        }
        fn serialize_struct(self, name: &'static str, _: usize) -> Result<Object<'a>> {
            Ok(Object::new(
                self.out,
                self.left_out,
                false,
                name == RAW_VALUE,
            ))
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            variant: &'static str,
            _: usize,
        ) -> Result<Object<'a>> {
            // `{"variant":{...}}`: the inner object's members sorted, the outer has one.
            self.out.push('{');
            write_string(self.out, variant);
            self.out.push(':');
            Ok(Object::new(self.out, &[], true, false))
        }
    }

    pub(super) struct Seq<'a> {
        out: &'a mut String,
        first: bool,
        close: &'static str,
    }

    impl Seq<'_> {
        fn element<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<()> {
            if !self.first {
                self.out.push(',');
            }
            self.first = false;
            v.serialize(inner(self.out))
        }
        fn close(self) -> Result<()> {
            self.out.push_str(self.close);
            Ok(())
        }
    }

    /// The four sequence shapes serde has, each written as an array by [`Seq`].
    macro_rules! seq_shape {
        ($($shape:ident :: $method:ident),*) => {$(
            impl ser::$shape for Seq<'_> {
                type Ok = ();
                type Error = Error;
                fn $method<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<()> {
                    self.element(v)
                }
                fn end(self) -> Result<()> {
                    self.close()
                }
            }
        )*};
    }
    seq_shape!(
        SerializeSeq::serialize_element,
        SerializeTuple::serialize_element,
        SerializeTupleStruct::serialize_field,
        SerializeTupleVariant::serialize_field
    );

    /// An object being written: each member (`"key":value`, after a comma but the first) written
    /// straight to the output as it comes, its key and place kept in `members`; at the end the
    /// members are put in key order in place (through one copy of the object's text), unless
    /// they came in order already.
    pub(super) struct Object<'a> {
        out: &'a mut String,
        left_out: &'static [&'static str],
        /// Where the object's members start in `out` (after its `{`).
        start: usize,
        members: Vec<(Cow<'static, str>, Range<usize>)>,
        key: Option<String>,
        /// Closes a struct variant's outer object too.
        variant: bool,
        /// serde_json's `RawValue`: its one field is JSON text, parsed and written canonical.
        raw: bool,
    }

    thread_local! {
        /// An object's text while its members are put in order (reused: objects close one at
        /// a time, innermost first).
        static REORDER: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }

    impl<'a> Object<'a> {
        fn new(
            out: &'a mut String,
            left_out: &'static [&'static str],
            variant: bool,
            raw: bool,
        ) -> Self {
            if !raw {
                out.push('{');
            }
            let start = out.len();
            Object {
                out,
                left_out,
                start,
                members: Vec::new(),
                key: None,
                variant,
                raw,
            }
        }

        fn member<T: ?Sized + Serialize>(&mut self, key: Cow<'static, str>, v: &T) -> Result<()> {
            if self.raw {
                let text = serde_json::to_value(v)?;
                let value: serde_json::Value =
                    serde_json::from_str(text.as_str().unwrap_or_default())?;
                write_value(self.out, &value);
                return Ok(());
            }
            if self.left_out.contains(&key.as_ref()) {
                return Ok(());
            }
            if !self.members.is_empty() {
                self.out.push(',');
            }
            let from = self.out.len();
            write_string(self.out, &key);
            self.out.push(':');
            v.serialize(inner(self.out))?;
            self.members.push((key, from..self.out.len()));
            Ok(())
        }

        fn close(self) -> Result<()> {
            if self.raw {
                return Ok(());
            }
            let Object {
                out,
                start,
                mut members,
                variant,
                ..
            } = self;
            let in_order = members
                .windows(2)
                .all(|w| key_order(&w[0].0, &w[1].0) == std::cmp::Ordering::Less);
            // Written in order with no key twice: the object is already as it should be.
            if !in_order {
                REORDER.with(|text| {
                    let mut text = text.borrow_mut();
                    text.clear();
                    text.push_str(&out[start..]);
                    out.truncate(start);
                    // Stable: of members with one key, the last written is the one kept.
                    members.sort_by(|a, b| key_order(&a.0, &b.0));
                    let mut first = true;
                    for (i, (key, range)) in members.iter().enumerate() {
                        if members.get(i + 1).is_some_and(|next| next.0 == *key) {
                            continue;
                        }
                        if !first {
                            out.push(',');
                        }
                        first = false;
                        out.push_str(&text[range.start - start..range.end - start]);
                    }
                });
            }
            out.push('}');
            if variant {
                out.push('}');
            }
            Ok(())
        }
    }

    impl ser::SerializeMap for Object<'_> {
        type Ok = ();
        type Error = Error;
        fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<()> {
            self.key = Some(key.serialize(Key)?);
            Ok(())
        }
        fn serialize_value<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<()> {
            let key = self
                .key
                .take()
                .ok_or_else(|| Error::custom("a map value without its key"))?;
            self.member(Cow::Owned(key), v)
        }
        fn end(self) -> Result<()> {
            self.close()
        }
    }

    /// A struct and a struct variant's fields: members of an [`Object`].
    macro_rules! struct_shape {
        ($($shape:ident),*) => {$(
            impl ser::$shape for Object<'_> {
                type Ok = ();
                type Error = Error;
                fn serialize_field<T: ?Sized + Serialize>(
                    &mut self,
                    key: &'static str,
                    v: &T,
                ) -> Result<()> {
                    self.member(Cow::Borrowed(key), v)
                }
                fn end(self) -> Result<()> {
                    self.close()
                }
            }
        )*};
    }
    struct_shape!(SerializeStruct, SerializeStructVariant);

    /// A map key as serde_json's value serializer makes it: a string, or a number or boolean
    /// printed; anything else is an error.
    struct Key;

    fn not_a_key() -> Error {
        Error::custom("key must be a string")
    }

    /// Integer and char keys: printed.
    macro_rules! key_printed {
        ($($method:ident: $t:ty),*) => {$(
            fn $method(self, v: $t) -> Result<String> {
                Ok(v.to_string())
            }
        )*};
    }

    impl ser::Serializer for Key {
        type Ok = String;
        type Error = Error;
        type SerializeSeq = Impossible<String, Error>;
        type SerializeTuple = Impossible<String, Error>;
        type SerializeTupleStruct = Impossible<String, Error>;
        type SerializeTupleVariant = Impossible<String, Error>;
        type SerializeMap = Impossible<String, Error>;
        type SerializeStruct = Impossible<String, Error>;
        type SerializeStructVariant = Impossible<String, Error>;

        fn serialize_bool(self, v: bool) -> Result<String> {
            Ok(if v { "true" } else { "false" }.to_string())
        }
        key_printed!(
            serialize_i8: i8,
            serialize_i16: i16,
            serialize_i32: i32,
            serialize_i64: i64,
            serialize_i128: i128,
            serialize_u8: u8,
            serialize_u16: u16,
            serialize_u32: u32,
            serialize_u64: u64,
            serialize_u128: u128,
            serialize_char: char
        );
        fn serialize_f32(self, v: f32) -> Result<String> {
            self.serialize_f64(f64::from(v))
        }
        fn serialize_f64(self, v: f64) -> Result<String> {
            // serde_json prints a finite float key as it prints the float itself.
            if v.is_finite() {
                serde_json::to_string(&v)
            } else {
                Err(Error::custom("float key must be finite"))
            }
        }
        fn serialize_str(self, v: &str) -> Result<String> {
            Ok(v.to_string())
        }
        fn serialize_bytes(self, _: &[u8]) -> Result<String> {
            Err(not_a_key())
        }
        fn serialize_none(self) -> Result<String> {
            Err(not_a_key())
        }
        fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<String> {
            Err(not_a_key())
        }
        fn serialize_unit(self) -> Result<String> {
            Err(not_a_key())
        }
        fn serialize_unit_struct(self, _: &'static str) -> Result<String> {
            Err(not_a_key())
        }
        fn serialize_unit_variant(
            self,
            _: &'static str,
            _: u32,
            variant: &'static str,
        ) -> Result<String> {
            Ok(variant.to_string())
        }
        fn serialize_newtype_struct<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            v: &T,
        ) -> Result<String> {
            v.serialize(self)
        }
        fn serialize_newtype_variant<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result<String> {
            Err(not_a_key())
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> {
            Err(not_a_key())
        }
        fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> {
            Err(not_a_key())
        }
        fn serialize_tuple_struct(
            self,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleStruct> {
            Err(not_a_key())
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleVariant> {
            Err(not_a_key())
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
            Err(not_a_key())
        }
        fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
            Err(not_a_key())
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStructVariant> {
            Err(not_a_key())
        }
    }
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
        // Every pair of keys whose first difference is in any of the places UTF-8 and UTF-16
        // could disagree: lead bytes of each length, the characters around U+D7FF, U+E000,
        // U+FFFF and U+10000, and a difference in a continuation byte.
        let chars = [
            "",
            "a",
            "\u{7f}",
            "\u{80}",
            "\u{7ff}",
            "\u{800}",
            "\u{d7ff}",
            "\u{e000}",
            "\u{efff}",
            "\u{f000}",
            "\u{fffd}",
            "\u{ffff}",
            "\u{10000}",
            "\u{1f600}",
            "\u{1f601}",
            "\u{10ffff}",
        ];
        let keys: Vec<String> = chars
            .iter()
            .flat_map(|c| ["", "x", "\u{e001}", "\u{10001}"].map(|tail| format!("k{c}{tail}")))
            .collect();
        for a in &keys {
            for b in &keys {
                assert_eq!(
                    key_order(a, b),
                    a.encode_utf16().cmp(b.encode_utf16()),
                    "{a:?} against {b:?}"
                );
            }
        }
    }

    fn format_number_general(x: f64) -> String {
        let (digits, exponent) = tie_to_even(x.abs(), scientific(&format!("{:e}", x.abs())));
        let (k, n) = (digits.len() as i32, exponent + 1);
        assert!(k <= n && n <= 21, "{x} is a whole number under 1e21");
        let sign = if x < 0.0 { "-" } else { "" };
        format!("{sign}{digits}{}", "0".repeat((n - k) as usize))
    }

    /// Telling a tie apart from the bits decides as formatting the exact expansion does: random
    /// doubles of every magnitude, short dyadic fractions (the ties), and their neighbours.
    #[test]
    fn ties_told_from_the_bits_as_from_the_exact_expansion() {
        let mut cases: Vec<f64> = Vec::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let x = f64::from_bits(state >> 1);
            if x.is_finite() && x != 0.0 {
                cases.push(x);
            }
        }
        for n in 1..=60 {
            for m in [1u64, 3, 5, 7, 25, 125, 1_001, 123_456_789] {
                let x = m as f64 / (1u64 << n) as f64;
                cases.extend([x, f64::from_bits(x.to_bits() + 1), x * 1e10, x / 3.0]);
            }
        }
        cases.extend([
            0.5, 0.25, 0.125, 2.5e-8, 5e-324, 1.5e300, 0.1, 0.3, 1e-7, 123.456,
        ]);
        for x in cases {
            let x = x.abs();
            if exact_integer(x).is_some() {
                continue;
            }
            let shortest = scientific(&format!("{x:e}"));
            assert_eq!(
                tie_to_even(x, shortest.clone()),
                tie_to_even_exact(x, shortest),
                "{x:e}"
            );
        }
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

    /// Written straight from a value, the bytes are those of its `serde_json::Value`: every
    /// shape serde has (enums of each kind, options, bytes, chars, non-finite floats, integer
    /// and boolean map keys, duplicate keys through `flatten`, a `RawValue`), and JSON values.
    #[test]
    fn direct_bytes_are_the_json_values_bytes() {
        use std::collections::BTreeMap;

        #[derive(Serialize)]
        enum Shape {
            Unit,
            New(f64),
            Tuple(u8, String),
            Fields { z: Option<i32>, a: Vec<Shape> },
        }
        #[derive(Serialize)]
        struct Unit;
        #[derive(Serialize)]
        struct Pair(i64, f32);
        #[derive(Serialize)]
        struct Extra {
            b: &'static str,
            zz: u128,
        }
        #[derive(Serialize)]
        struct All {
            zeta: Vec<Shape>,
            alpha: Option<Box<All>>,
            #[serde(with = "serde_bytes_as_bytes")]
            bytes: Vec<u8>,
            ch: char,
            floats: Vec<f64>,
            single: f32,
            ints: (i8, i16, i32, i64, u8, u16, u32, u64, i128),
            by_int: BTreeMap<i32, bool>,
            by_bool: BTreeMap<bool, Unit>,
            pair: Pair,
            value: serde_json::Value,
            raw: Box<serde_json::value::RawValue>,
            #[serde(flatten)]
            extra: Extra,
            b: &'static str,
            #[serde(rename = "€ü\u{1f600}\u{fb33}")]
            wide: (),
        }
        mod serde_bytes_as_bytes {
            pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(v)
            }
        }
        let leaf = |n: f64| All {
            zeta: vec![
                Shape::Unit,
                Shape::New(n),
                Shape::Tuple(7, "t\"\n".into()),
                Shape::Fields {
                    z: None,
                    a: vec![
                        Shape::New(f64::NAN),
                        Shape::Fields {
                            z: Some(-1),
                            a: vec![],
                        },
                    ],
                },
            ],
            alpha: None,
            bytes: vec![0, 1, 255],
            ch: '\u{1f600}',
            floats: vec![
                0.1,
                -0.0,
                1e21,
                1e-7,
                f64::from_bits(0x41b3_de43_5555_5553),
                f64::INFINITY,
                9007199254740993.0,
                5e-324,
            ],
            single: 0.1,
            ints: (
                i8::MIN,
                i16::MAX,
                -7,
                i64::MIN,
                255,
                65535,
                u32::MAX,
                u64::MAX,
                -5,
            ),
            by_int: [(-3, true), (10, false), (2, true)].into_iter().collect(),
            by_bool: [(true, Unit), (false, Unit)].into_iter().collect(),
            pair: Pair(1 << 60, 1.5),
            value: serde_json::json!({"b": [1, 2.5, {"\r": null}], "a": "x", "": 18446744073709551615_u64}),
            raw: serde_json::value::RawValue::from_string(
                r#"{ "y": [ 1.0, 2E2 ], "x": "\u0041" }"#.into(),
            )
            .unwrap(),
            extra: Extra {
                b: "flattened",
                zz: 12,
            },
            b: "after the flattened one",
            wide: (),
        };
        let mut outer = leaf(2.0);
        outer.alpha = Some(Box::new(leaf(-1e-9)));
        let by_value = to_canonical_bytes(&serde_json::to_value(&outer).unwrap());
        assert_eq!(
            String::from_utf8(canonical_bytes_of(&outer).unwrap()).unwrap(),
            String::from_utf8(by_value).unwrap()
        );
        // A member left out of the outermost object only.
        let mut value = serde_json::to_value(&outer).unwrap();
        value.as_object_mut().unwrap().remove("zeta");
        assert_eq!(
            canonical_bytes_without(&outer, &["zeta"]).unwrap(),
            to_canonical_bytes(&value)
        );
        // JSON values, the RFC's examples among them.
        for text in [
            r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], "literals": [null, true, false]}"#,
            r#"{"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\ud83d\ude00": 5, "\u0080": 6, "\u00f6": 7}"#,
            r#"[[], {}, "", -0, 1e300, 123456789012345678901234567890]"#,
        ] {
            let value: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(
                canonical_bytes_of(&value).unwrap(),
                to_canonical_bytes(&value),
                "{text}"
            );
        }
        // Out of range as serde_json says: an error either way.
        assert!(serde_json::to_value(u128::MAX).is_err());
        assert!(canonical_bytes_of(&u128::MAX).is_err());
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
