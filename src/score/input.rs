//! The inputs document: everything a score is computed from, and nothing else.
//!
//! Its format is described in `rubrics/README.md` ("Inputs"). The document is canonicalised with
//! RFC 8785 and its SHA-256 is the input digest, which names the inputs and seeds the Monte Carlo
//! generator. Unknown fields are refused so that nothing the scorer ignores can ride along.

use crate::evidence::Outcome;
use crate::rubric::Kind;
use serde::Deserialize;
use sha2::{Digest, Sha256};

pub const MS_PER_HOUR: i64 = 3_600_000;
pub const MS_PER_DAY: i64 = 86_400_000;

/// Why an inputs document was refused.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("the inputs are not valid JSON of the expected shape: {0}")]
    Parse(#[from] serde_json::Error),
    #[error("the inputs are invalid: {0}")]
    Invalid(String),
}

fn invalid(message: impl Into<String>) -> InputError {
    InputError::Invalid(message.into())
}

/// Whether a result describes real observations (seed 001's rule: test data never passes for
/// observation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Provenance {
    Live,
    SyntheticFixture,
    TestHarness,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInputs {
    rubric_sha256: String,
    rubric_version: String,
    as_of: String,
    subject: RawSubject,
    history: Vec<RawEntry>,
    #[serde(default)]
    population: Vec<RawPeer>,
    provenance: Provenance,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSubject {
    id: String,
    url: String,
    category: String,
    price_usd: serde_json::Value,
    #[serde(default)]
    revisions: Vec<RawRevision>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRevision {
    id: String,
    at: String,
    #[serde(default)]
    note: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    check: String,
    outcome: Outcome,
    at: String,
    kind: Kind,
    #[serde(default)]
    revision: Option<String>,
    #[serde(default)]
    value: Option<f64>,
    receipt: String,
    #[serde(default)]
    note: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPeer {
    id: String,
    category: String,
    price_usd: serde_json::Value,
    r4_pass_rate: f64,
    r5_pass_rate: f64,
}

/// A point in time: RFC 3339 text (UTC) and milliseconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instant {
    pub text: String,
    pub ms: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Revision {
    pub id: String,
    pub at: Instant,
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Subject {
    pub id: String,
    pub url: String,
    pub category: String,
    pub price_usd: f64,
    /// Sorted by time (stable: equal times keep their order in the document).
    pub revisions: Vec<Revision>,
}

/// One check outcome from one probe run.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub check: String,
    pub outcome: Outcome,
    pub at: Instant,
    /// The kind of probe run that produced it (a paid run's entry proves a paid call happened).
    pub kind: Kind,
    /// Index into `Subject::revisions` of the revision the entry was recorded under.
    pub revision: Option<usize>,
    /// ms for curve checks; output bytes for R5 passes.
    pub value: Option<f64>,
    pub receipt: String,
    /// Position in the document's `history`, used to break ties between equal times.
    pub position: usize,
}

/// Another subject's figures, used only for value (never for the score).
#[derive(Debug, Clone, PartialEq)]
pub struct Peer {
    pub id: String,
    pub category: String,
    pub price_usd: f64,
    pub r4_pass_rate: f64,
    pub r5_pass_rate: f64,
}

/// A parsed, validated inputs document with its canonical form and digest.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub rubric_sha256: String,
    pub rubric_version: String,
    pub as_of: Instant,
    pub subject: Subject,
    /// Sorted by time (stable).
    pub history: Vec<Entry>,
    pub population: Vec<Peer>,
    pub provenance: Provenance,
    /// The document as JSON, embedded in the score document.
    pub document: std::sync::Arc<serde_json::Value>,
    /// SHA-256 of the RFC 8785 canonical bytes of `document`.
    pub digest: [u8; 32],
}

impl Inputs {
    /// Parse and validate an inputs document from JSON bytes (any formatting).
    pub fn from_json_bytes(bytes: &[u8]) -> Result<Inputs, InputError> {
        let document: serde_json::Value = serde_json::from_slice(bytes)?;
        Inputs::from_value(document)
    }

    pub fn from_value(document: serde_json::Value) -> Result<Inputs, InputError> {
        let raw = RawInputs::deserialize(&document)?;
        let canonical = crate::canonical::to_canonical_bytes(&document);
        let digest: [u8; 32] = Sha256::digest(&canonical).into();
        build(raw, document, digest)
    }

    pub fn digest_hex(&self) -> String {
        hex::encode(self.digest)
    }

    /// The canonical bytes of the document (what the digest is taken over).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        crate::canonical::to_canonical_bytes(&self.document)
    }

    /// How many of the subject's revisions came after the given one (or, with no revision named,
    /// after the given time).
    pub fn later_revisions(&self, entry: &Entry) -> u32 {
        let later = match entry.revision {
            Some(index) => self.subject.revisions.len() - index - 1,
            None => self
                .subject
                .revisions
                .iter()
                .filter(|r| r.at.ms > entry.at.ms)
                .count(),
        };
        u32::try_from(later).unwrap_or(u32::MAX)
    }
}

/// Parse RFC 3339 text that must be in UTC (`Z` or `+00:00`).
pub fn parse_instant(what: &str, text: &str) -> Result<Instant, InputError> {
    let parsed = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|e| invalid(format!("{what}: {text:?} is not an RFC 3339 time: {e}")))?;
    if !parsed.offset().is_utc() {
        return Err(invalid(format!("{what}: {text:?} is not in UTC")));
    }
    let ms = parsed.unix_timestamp_nanos().div_euclid(1_000_000);
    let ms = i64::try_from(ms).map_err(|_| invalid(format!("{what}: {text:?} is out of range")))?;
    Ok(Instant {
        text: text.to_string(),
        ms,
    })
}

/// A price: a non-negative decimal, as a string (`"0.01"`) or a JSON number.
fn parse_price(what: &str, value: &serde_json::Value) -> Result<f64, InputError> {
    let text = match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        other => {
            return Err(invalid(format!(
                "{what}: a price is a decimal string or a number, got {other}"
            )));
        }
    };
    let is_decimal = {
        let (int, frac) = text.split_once('.').unwrap_or((text.as_str(), ""));
        !int.is_empty()
            && int.bytes().all(|b| b.is_ascii_digit())
            && frac.bytes().all(|b| b.is_ascii_digit())
            && !(text.contains('.') && frac.is_empty())
    };
    let price: f64 = if is_decimal {
        text.parse().unwrap_or(f64::NAN)
    } else if let serde_json::Value::Number(n) = value {
        n.as_f64().unwrap_or(f64::NAN) // a number in exponent form
    } else {
        f64::NAN
    };
    if !(price.is_finite() && price >= 0.0) {
        return Err(invalid(format!(
            "{what}: {text:?} is not a non-negative decimal USD amount"
        )));
    }
    Ok(price)
}

fn build(
    raw: RawInputs,
    document: serde_json::Value,
    digest: [u8; 32],
) -> Result<Inputs, InputError> {
    let is_hex64 = |s: &str| {
        s.len() == 64
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !is_hex64(&raw.rubric_sha256) {
        return Err(invalid("rubric_sha256 must be 64 lowercase hex digits"));
    }
    crate::rubric::major_version_of(&raw.rubric_version)
        .map_err(|e| invalid(format!("rubric_version: {e}")))?;
    let as_of = parse_instant("as_of", &raw.as_of)?;

    let s = raw.subject;
    if s.id.trim().is_empty() {
        return Err(invalid("subject.id is empty"));
    }
    let price_usd = parse_price("subject.price_usd", &s.price_usd)?;
    let mut revisions = Vec::with_capacity(s.revisions.len());
    for (i, r) in s.revisions.into_iter().enumerate() {
        let at = parse_instant(&format!("subject.revisions[{i}].at"), &r.at)?;
        if at.ms > as_of.ms {
            return Err(invalid(format!(
                "subject.revisions[{i}] ({}) is after as_of",
                r.id
            )));
        }
        if revisions.iter().any(|x: &Revision| x.id == r.id) {
            return Err(invalid(format!("duplicate revision id {:?}", r.id)));
        }
        revisions.push(Revision {
            id: r.id,
            at,
            note: r.note,
        });
    }
    revisions.sort_by_key(|r| r.at.ms);

    let mut history = Vec::with_capacity(raw.history.len());
    for (i, e) in raw.history.into_iter().enumerate() {
        let what = format!("history[{i}] ({} {})", e.check, e.at);
        let at = parse_instant(&what, &e.at)?;
        if at.ms > as_of.ms {
            return Err(invalid(format!("{what} is after as_of {}", as_of.text)));
        }
        if !is_hex64(&e.receipt) {
            return Err(invalid(format!(
                "{what}: receipt must be the receipt's SHA-256 as 64 lowercase hex digits"
            )));
        }
        if let Some(v) = e.value
            && !(v.is_finite() && v >= 0.0)
        {
            return Err(invalid(format!("{what}: value must be a number >= 0")));
        }
        let revision = match &e.revision {
            None => None,
            Some(id) => {
                let index = revisions
                    .iter()
                    .position(|r| &r.id == id)
                    .ok_or_else(|| invalid(format!("{what}: unknown revision {id:?}")))?;
                if revisions[index].at.ms > at.ms {
                    return Err(invalid(format!(
                        "{what} is recorded under revision {id:?}, which came later"
                    )));
                }
                Some(index)
            }
        };
        let _ = e.note;
        history.push(Entry {
            check: e.check,
            outcome: e.outcome,
            at,
            kind: e.kind,
            revision,
            value: e.value,
            receipt: e.receipt,
            position: i,
        });
    }
    history.sort_by_key(|e| (e.at.ms, e.position));

    let mut population = Vec::with_capacity(raw.population.len());
    for (i, p) in raw.population.into_iter().enumerate() {
        let what = format!("population[{i}] ({})", p.id);
        let rate_ok = |r: f64| r.is_finite() && (0.0..=1.0).contains(&r);
        if !rate_ok(p.r4_pass_rate) || !rate_ok(p.r5_pass_rate) {
            return Err(invalid(format!("{what}: pass rates must be in 0..=1")));
        }
        population.push(Peer {
            price_usd: parse_price(&format!("{what}.price_usd"), &p.price_usd)?,
            id: p.id,
            category: p.category,
            r4_pass_rate: p.r4_pass_rate,
            r5_pass_rate: p.r5_pass_rate,
        });
    }

    Ok(Inputs {
        rubric_sha256: raw.rubric_sha256,
        rubric_version: raw.rubric_version,
        as_of,
        subject: Subject {
            id: s.id,
            url: s.url,
            category: s.category,
            price_usd,
            revisions,
        },
        history,
        population,
        provenance: raw.provenance,
        document: std::sync::Arc::new(document),
        digest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn minimal() -> serde_json::Value {
        json!({
            "rubric_sha256": "0".repeat(64),
            "rubric_version": "1.0.0-draft.1",
            "as_of": "2026-11-01T00:00:00Z",
            "subject": {"id": "s1", "url": "https://a.example/x", "category": "search",
                        "price_usd": "0.01",
                        "revisions": [{"id": "r2", "at": "2026-10-20T00:00:00Z"},
                                      {"id": "r1", "at": "2026-10-01T00:00:00Z", "note": "first"}]},
            "history": [
                {"check": "R1", "outcome": "pass", "at": "2026-10-31T00:00:00Z", "kind": "free",
                 "revision": "r2", "receipt": "a".repeat(64)},
                {"check": "R1", "outcome": "fail", "at": "2026-10-10T00:00:00Z", "kind": "free",
                 "revision": "r1", "receipt": "b".repeat(64)},
                {"check": "R1", "outcome": "fail", "at": "2026-09-10T00:00:00Z", "kind": "free",
                 "receipt": "b".repeat(64)}
            ],
            "provenance": "synthetic_fixture"
        })
    }

    fn error_after(mutate: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v = minimal();
        mutate(&mut v);
        Inputs::from_value(v).unwrap_err().to_string()
    }

    #[test]
    fn parses_sorts_and_counts_later_revisions() {
        let inputs = Inputs::from_value(minimal()).unwrap();
        assert_eq!(inputs.subject.revisions[0].id, "r1");
        assert_eq!(inputs.history[0].at.text, "2026-09-10T00:00:00Z");
        assert_eq!(inputs.later_revisions(&inputs.history[0]), 2); // by time: r1 and r2 came later
        assert_eq!(inputs.later_revisions(&inputs.history[1]), 1); // under r1: r2 came later
        assert_eq!(inputs.later_revisions(&inputs.history[2]), 0);
        assert_eq!(inputs.subject.price_usd, 0.01);
        assert_eq!(inputs.as_of.ms, 1_793_491_200_000);
    }

    #[test]
    fn digest_ignores_formatting_and_key_order() {
        let a = Inputs::from_value(minimal()).unwrap();
        let text = serde_json::to_string_pretty(&minimal()).unwrap();
        let b = Inputs::from_json_bytes(text.as_bytes()).unwrap();
        assert_eq!(a.digest, b.digest);
        let mut changed = minimal();
        changed["subject"]["id"] = json!("s2");
        assert_ne!(Inputs::from_value(changed).unwrap().digest, a.digest);
    }

    #[test]
    fn clear_errors() {
        assert!(
            error_after(|v| v["as_of"] = json!("2026-11-01T00:00:00+02:00")).contains("not in UTC")
        );
        assert!(error_after(|v| v["as_of"] = json!("yesterday")).contains("not an RFC 3339"));
        assert!(
            error_after(|v| v["history"][0]["at"] = json!("2026-11-02T00:00:00Z"))
                .contains("after as_of")
        );
        assert!(
            error_after(|v| v["history"][0]["revision"] = json!("r9")).contains("unknown revision")
        );
        assert!(error_after(|v| v["history"][1]["revision"] = json!("r2")).contains("came later"));
        assert!(
            error_after(|v| v["history"][0]["outcome"] = json!("ok")).contains("unknown variant")
        );
        assert!(error_after(|v| v["history"][0]["receipt"] = json!("xyz")).contains("receipt"));
        assert!(error_after(|v| v["history"][0]["value"] = json!(-1)).contains("value"));
        assert!(error_after(|v| v["subject"]["price_usd"] = json!("1e-3x")).contains("decimal"));
        assert!(error_after(|v| v["subject"]["price_usd"] = json!(-0.5)).contains("decimal"));
        assert!(error_after(|v| v["provenance"] = json!("real")).contains("unknown variant"));
        assert!(error_after(|v| v["extra"] = json!(1)).contains("unknown field"));
        assert!(error_after(|v| v["rubric_version"] = json!("one")).contains("rubric_version"));
    }

    #[test]
    fn prices_as_string_or_number() {
        assert_eq!(parse_price("p", &json!("0.005")).unwrap(), 0.005);
        assert_eq!(parse_price("p", &json!(2)).unwrap(), 2.0);
        assert_eq!(parse_price("p", &json!(1e-3)).unwrap(), 0.001);
        assert!(parse_price("p", &json!("1.")).is_err());
        assert!(parse_price("p", &json!(".5")).is_err());
        assert!(parse_price("p", &json!(null)).is_err());
    }
}
