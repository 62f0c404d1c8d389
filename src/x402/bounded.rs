//! Reading a PaymentRequired's JSON within the budget (`crate::budget`), in one pass over the bytes.
//!
//! The top-level object is read value by value, counting values and nesting as they are built:
//! past [`MAX_JSON_VALUES`] or [`MAX_JSON_DEPTH`] the read stops and nothing of the object is kept.
//! `accepts` is read entry by entry: the first [`MAX_ACCEPTS_ENTRIES`] are kept (their exact text
//! and their value), the rest are only syntax-checked and counted, never built. So the work and
//! memory are linear in the input, and no more than the budget is ever materialised.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};

use crate::budget::{MAX_ACCEPTS_ENTRIES, MAX_JSON_DEPTH, MAX_JSON_VALUES};

/// A top-level JSON object read within the budget.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// The object; its `accepts`, when an array, holds only the entries read.
    pub object: Map<String, Value>,
    /// The exact text of each `accepts` entry read (empty unless `accepts` is an array).
    pub accepts_raw: Vec<Box<RawValue>>,
    /// How many entries `accepts` had as sent, when it is an array.
    pub accepts_sent: Option<usize>,
}

impl Decoded {
    /// `accepts` entries sent but not read (over [`MAX_ACCEPTS_ENTRIES`]).
    pub fn accepts_unread(&self) -> usize {
        self.accepts_sent
            .map_or(0, |sent| sent.saturating_sub(self.accepts_raw.len()))
    }
}

/// Why bytes did not decode to a usable object.
#[derive(Debug)]
pub(crate) enum DecodeError {
    /// Not JSON (the parser's message).
    Syntax(String),
    /// JSON, but not an object: the JSON type it is.
    NotObject(&'static str),
    /// Nested deeper than [`MAX_JSON_DEPTH`].
    TooDeep,
    /// More than [`MAX_JSON_VALUES`] values.
    TooComplex,
}

/// Read `bytes` as one JSON object within the budget.
pub(crate) fn decode_object(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    let budget = Budget::default();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let read = TopLevel { budget: &budget }
        .deserialize(&mut de)
        .and_then(|top| de.end().map(|()| top));
    match read {
        Ok(Top::Object(decoded)) => Ok(decoded),
        Ok(Top::Other(kind)) => Err(DecodeError::NotObject(kind)),
        Err(e) => Err(match budget.exceeded.get() {
            Some(Exceeded::Depth) => DecodeError::TooDeep,
            Some(Exceeded::Values) => DecodeError::TooComplex,
            None => DecodeError::Syntax(e.to_string()),
        }),
    }
}

/// Read `bytes` as one JSON value of any type, nested at most `max_depth` deep (the top level
/// is 1) and with at most `max_values` values: the same one pass as [`decode_object`], for
/// messages that are not a PaymentRequired (an MCP server's JSON-RPC answers).
pub(crate) fn decode_value_within(
    bytes: &[u8],
    max_depth: usize,
    max_values: usize,
) -> Result<Value, DecodeError> {
    let budget = Budget::within(max_depth, max_values);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let read = Bounded {
        budget: &budget,
        depth: 1,
    }
    .deserialize(&mut de)
    .and_then(|value| de.end().map(|()| value));
    read.map_err(|e| match budget.exceeded.get() {
        Some(Exceeded::Depth) => DecodeError::TooDeep,
        Some(Exceeded::Values) => DecodeError::TooComplex,
        None => DecodeError::Syntax(e.to_string()),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exceeded {
    Depth,
    Values,
}

/// Values built so far, and which bound stopped the read (the parser's error only says "custom").
struct Budget {
    values: Cell<usize>,
    exceeded: Cell<Option<Exceeded>>,
    max_values: usize,
    max_depth: usize,
}

impl Default for Budget {
    /// A PaymentRequired's bounds.
    fn default() -> Self {
        Budget::within(MAX_JSON_DEPTH, MAX_JSON_VALUES)
    }
}

impl Budget {
    fn within(max_depth: usize, max_values: usize) -> Budget {
        Budget {
            values: Cell::new(0),
            exceeded: Cell::new(None),
            max_values,
            max_depth,
        }
    }

    fn take<E: de::Error>(&self) -> Result<(), E> {
        let next = self.values.get() + 1;
        if next > self.max_values {
            self.exceeded.set(Some(Exceeded::Values));
            return Err(E::custom("more JSON values than the budget"));
        }
        self.values.set(next);
        Ok(())
    }

    /// A container at `depth` (the top-level object is 1).
    fn enter<E: de::Error>(&self, depth: usize) -> Result<(), E> {
        self.take()?;
        if depth > self.max_depth {
            self.exceeded.set(Some(Exceeded::Depth));
            return Err(E::custom("nested deeper than the budget"));
        }
        Ok(())
    }
}

/// One value at `depth`, built as a `serde_json::Value` while the budget lasts.
#[derive(Clone, Copy)]
struct Bounded<'b> {
    budget: &'b Budget,
    depth: usize,
}

impl Bounded<'_> {
    fn child(self) -> Self {
        Bounded {
            budget: self.budget,
            depth: self.depth + 1,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.budget.take()?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.budget.take()?;
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.budget.take()?;
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.budget.take()?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.budget.take()?;
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.budget.take()?;
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.budget.take()?;
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.budget.enter(self.depth)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.child())? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.budget.enter(self.depth)?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self.child())?;
            // A repeated key keeps its first place and its last value, as serde_json does.
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

enum Top {
    Object(Decoded),
    Other(&'static str),
}

/// The top level: an object whose `accepts` is read by [`Accepts`]; anything else is only named.
struct TopLevel<'b> {
    budget: &'b Budget,
}

impl<'de> DeserializeSeed<'de> for TopLevel<'_> {
    type Value = Top;
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Top, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TopLevel<'_> {
    type Value = Top;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Top, E> {
        Ok(Top::Other("boolean"))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Top, E> {
        Ok(Top::Other("number"))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Top, E> {
        Ok(Top::Other("number"))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Top, E> {
        Ok(Top::Other("number"))
    }
    fn visit_str<E>(self, _: &str) -> Result<Top, E> {
        Ok(Top::Other("string"))
    }
    fn visit_unit<E>(self) -> Result<Top, E> {
        Ok(Top::Other("null"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
        // Syntax-checked, never built.
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Top::Other("array"))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        let value = Bounded {
            budget: self.budget,
            depth: 1,
        };
        self.budget.enter(value.depth)?;
        let mut object = Map::new();
        let mut accepts_raw = Vec::new();
        let mut accepts_sent = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "accepts" {
                let (read, entries) = map.next_value_seed(Accepts(value.child()))?;
                // The last `accepts` wins, as in the object itself.
                (accepts_raw, accepts_sent) = match entries {
                    Some((raw, sent)) => (raw, Some(sent)),
                    None => (Vec::new(), None),
                };
                object.insert(key, read);
            } else {
                let read = map.next_value_seed(value.child())?;
                object.insert(key, read);
            }
        }
        Ok(Top::Object(Decoded {
            object,
            accepts_raw,
            accepts_sent,
        }))
    }
}

/// `accepts`: an array is read entry by entry (the first [`MAX_ACCEPTS_ENTRIES`] kept with their
/// exact text, the rest counted); anything else is read as an ordinary value.
struct Accepts<'b>(Bounded<'b>);

type AcceptsRead = (Value, Option<(Vec<Box<RawValue>>, usize)>);

impl<'de> DeserializeSeed<'de> for Accepts<'_> {
    type Value = AcceptsRead;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<AcceptsRead, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Accepts<'_> {
    type Value = AcceptsRead;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the accepts array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AcceptsRead, A::Error> {
        let Accepts(array) = self;
        array.budget.enter(array.depth)?;
        let mut raws: Vec<Box<RawValue>> = Vec::new();
        let mut entries = Vec::new();
        let mut sent = 0usize;
        loop {
            if raws.len() < MAX_ACCEPTS_ENTRIES {
                let Some(raw) = seq.next_element::<Box<RawValue>>()? else {
                    break;
                };
                let mut entry_de = serde_json::Deserializer::from_str(raw.get());
                let entry = array
                    .child()
                    .deserialize(&mut entry_de)
                    .map_err(de::Error::custom)?;
                entries.push(entry);
                raws.push(raw);
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            sent += 1;
        }
        Ok((Value::Array(entries), Some((raws, sent))))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<AcceptsRead, A::Error> {
        Ok((self.0.visit_map(map)?, None))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<AcceptsRead, E> {
        Ok((self.0.visit_bool(v)?, None))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<AcceptsRead, E> {
        Ok((self.0.visit_i64(v)?, None))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<AcceptsRead, E> {
        Ok((self.0.visit_u64(v)?, None))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<AcceptsRead, E> {
        Ok((self.0.visit_f64(v)?, None))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<AcceptsRead, E> {
        Ok((self.0.visit_str(v)?, None))
    }
    fn visit_unit<E: de::Error>(self) -> Result<AcceptsRead, E> {
        Ok((self.0.visit_unit()?, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(text: &str) -> Result<Decoded, DecodeError> {
        decode_object(text.as_bytes())
    }

    #[test]
    fn reads_what_serde_json_reads_within_the_budget() {
        let text = r#"{"b": 1, "a": [1.5, -2, "x", null, true, {"k": {}}], "b": {"c": 3}}"#;
        let decoded = decode(text).expect("decodes");
        let expected: Value = serde_json::from_str(text).unwrap();
        assert_eq!(Value::Object(decoded.object), expected);
        assert_eq!(decoded.accepts_sent, None);
    }

    #[test]
    fn accepts_keeps_the_first_entries_with_their_text_and_counts_the_rest() {
        let entries: Vec<String> = (0..MAX_ACCEPTS_ENTRIES + 10)
            .map(|i| format!("{{ \"n\" : {i} }}"))
            .collect();
        let text = format!(
            r#"{{"x402Version": 2, "accepts": [{}]}}"#,
            entries.join(", ")
        );
        let decoded = decode(&text).expect("decodes");
        assert_eq!(decoded.accepts_sent, Some(MAX_ACCEPTS_ENTRIES + 10));
        assert_eq!(decoded.accepts_raw.len(), MAX_ACCEPTS_ENTRIES);
        assert_eq!(decoded.accepts_unread(), 10);
        assert_eq!(decoded.accepts_raw[3].get(), "{ \"n\" : 3 }");
        let read = decoded.object["accepts"].as_array().unwrap();
        assert_eq!(read.len(), MAX_ACCEPTS_ENTRIES);
        assert_eq!(read[5], serde_json::json!({"n": 5}));
        // The skipped entries are still syntax-checked.
        let broken = format!(r#"{{"accepts": [{}, {{"n": }}]}}"#, entries.join(", "));
        assert!(matches!(decode(&broken), Err(DecodeError::Syntax(_))));
    }

    #[test]
    fn a_million_empty_entries_cost_only_their_count() {
        let text = format!(r#"{{"accepts": [{}{{}}]}}"#, "{},".repeat(1_000_000));
        let decoded = decode(&text).expect("decodes");
        assert_eq!(decoded.accepts_sent, Some(1_000_001));
        assert_eq!(decoded.accepts_raw.len(), MAX_ACCEPTS_ENTRIES);
    }

    #[test]
    fn past_the_depth_or_the_value_count_nothing_is_read() {
        let deep = |n: usize| format!("{{\"a\": {}{}}}", "[".repeat(n), "]".repeat(n));
        assert!(decode(&deep(MAX_JSON_DEPTH - 1)).is_ok());
        assert!(matches!(
            decode(&deep(MAX_JSON_DEPTH)),
            Err(DecodeError::TooDeep)
        ));
        // An entry that is only counted is only syntax-checked (iteratively, at any depth).
        let skipped = format!(
            "{{\"accepts\": [{}{}{}]}}",
            "{},".repeat(MAX_ACCEPTS_ENTRIES),
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert_eq!(decode(&skipped).expect("counted").accepts_unread(), 1);
        // An entry that is read is held to the depth bound.
        let read = format!("{{\"accepts\": [{}{}]}}", "[".repeat(100), "]".repeat(100));
        assert!(matches!(decode(&read), Err(DecodeError::TooDeep)));
        let wide = |n: usize| format!("{{\"a\": [{}0]}}", "0,".repeat(n));
        // The object, the array and n+1 numbers.
        assert!(decode(&wide(MAX_JSON_VALUES - 3)).is_ok());
        assert!(matches!(
            decode(&wide(MAX_JSON_VALUES - 2)),
            Err(DecodeError::TooComplex)
        ));
        // Entries that are read count too.
        let heavy = format!(
            "{{\"accepts\": [{{\"a\": [{}0]}}]}}",
            "0,".repeat(MAX_JSON_VALUES)
        );
        assert!(matches!(decode(&heavy), Err(DecodeError::TooComplex)));
    }

    #[test]
    fn other_json_is_named_not_read() {
        for (text, kind) in [
            ("[1, 2]", "array"),
            ("\"x\"", "string"),
            ("3", "number"),
            ("null", "null"),
            ("true", "boolean"),
        ] {
            assert!(
                matches!(decode(text), Err(DecodeError::NotObject(k)) if k == kind),
                "{text}"
            );
        }
        assert!(matches!(decode("{} x"), Err(DecodeError::Syntax(_))));
        assert!(matches!(decode("{\"a\": "), Err(DecodeError::Syntax(_))));
        // A non-array accepts is an ordinary value.
        let decoded = decode(r#"{"accepts": {"a": 1}}"#).expect("decodes");
        assert_eq!(decoded.object["accepts"], serde_json::json!({"a": 1}));
        assert_eq!(decoded.accepts_sent, None);
    }
}
