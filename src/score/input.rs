//! The inputs document: everything a score is computed from, and nothing else.
//!
//! Its format is described in `rubrics/README.md` ("Inputs"). The document is canonicalised with
//! RFC 8785 and its SHA-256 is the input digest, which names the inputs and seeds the Monte Carlo
//! generator. Unknown fields are refused so that nothing the scorer ignores can ride along.
//!
//! The document is normalised before the digest: history entries in time order, equal times by
//! their `seq` (the ledger's sequence, unique), and the population by id. Nothing a score says
//! therefore depends on the order of an array whose order means nothing.

use crate::evidence::Outcome;
use crate::rubric::Kind;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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
/// observation). One enum for the whole crate, from the evidence model.
pub use crate::evidence::run::{Provenance, UnknownProvenance};

/// The largest `seq` accepted: 2^53 - 1. RFC 8785 writes every number as a double, so a larger
/// integer could not be told apart from its neighbour in the canonical bytes (and the digest).
pub const MAX_SEQ: u64 = (1 << 53) - 1;

/// The inputs document as written: what `score --inputs` reads, what `history.rs` builds, and,
/// normalised (history in time-then-seq order, population by id), what a score document embeds.
/// The format is described in `rubrics/README.md` ("Inputs").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputsDocument {
    /// The rubric the evidence was gathered for: 64 lowercase hex digits.
    pub rubric_sha256: String,
    pub rubric_version: String,
    /// RFC 3339 UTC: the time the score is computed for.
    pub as_of: String,
    pub subject: SubjectDocument,
    pub history: Vec<HistoryEntry>,
    #[serde(default)]
    pub population: Vec<PeerDocument>,
    pub provenance: Provenance,
    /// Several vantages only: the quorum's cycles and disagreements (`super::quorum`). Absent
    /// with one vantage, so a single vantage's inputs (and digest) are as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<super::quorum::QuorumDocument>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectDocument {
    pub id: String,
    pub url: String,
    pub category: String,
    pub price_usd: PriceUsd,
    /// Oldest first (equal times in the order they were made).
    #[serde(default)]
    pub revisions: Vec<RevisionDocument>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevisionDocument {
    pub id: String,
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One outcome of one check from one probe run: one entry of the history (and, in the daemon,
/// of its append-only ledger).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryEntry {
    /// The entry's place in the ledger: unique within the history, and the order of entries
    /// recorded at the same time (lower first).
    pub seq: u64,
    pub check: String,
    pub outcome: Outcome,
    /// RFC 3339 UTC, up to nanoseconds.
    pub at: String,
    /// The kind of probe run that produced it: a `paid` run's entries prove a paid call.
    pub kind: Kind,
    /// The subject revision it was recorded under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// ms for curve checks (R3, R7); the valid output's size in bytes for R5 passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// SHA-256 of the receipt (64 lowercase hex digits).
    pub receipt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A price in USD as written: a decimal string (`"0.01"`) or a JSON number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PriceUsd {
    Decimal(String),
    Number(serde_json::Number),
}

/// Another subject's figures, for value only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerDocument {
    pub id: String,
    pub category: String,
    pub price_usd: PriceUsd,
    pub r4_pass_rate: f64,
    pub r5_pass_rate: f64,
}

pub const NS_PER_HOUR: i128 = 3_600_000_000_000;
pub const NS_PER_DAY: i128 = 24 * NS_PER_HOUR;

/// A point in time: RFC 3339 text (UTC) and nanoseconds since the Unix epoch, exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instant {
    pub text: String,
    pub ns: i128,
}

impl Instant {
    /// Days from `self` to `later` (negative when `later` is earlier). Whole-day spans are exact.
    pub fn days_until(&self, later: &Instant) -> f64 {
        (later.ns - self.ns) as f64 / NS_PER_DAY as f64
    }

    /// Hours from `self` to `later`. Whole-hour spans are exact.
    pub fn hours_until(&self, later: &Instant) -> f64 {
        (later.ns - self.ns) as f64 / NS_PER_HOUR as f64
    }
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
    /// Oldest first, as listed (a list out of time order is refused).
    pub revisions: Vec<Revision>,
}

/// An entry's check: an id of the vocabulary, or the text of one the vocabulary lacks (a
/// document may carry entries of checks this rubric does not have; they are counted, never
/// scored). Reads as its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckName {
    Id(crate::rubric::CheckId),
    Other(std::sync::Arc<str>),
}

impl CheckName {
    /// The typed id, when the text is one.
    pub fn id(&self) -> Option<crate::rubric::CheckId> {
        match self {
            CheckName::Id(id) => Some(*id),
            CheckName::Other(_) => None,
        }
    }
}

impl From<String> for CheckName {
    fn from(text: String) -> CheckName {
        match text.parse() {
            Ok(id) => CheckName::Id(id),
            Err(_) => CheckName::Other(text.into()),
        }
    }
}

impl std::ops::Deref for CheckName {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            CheckName::Id(id) => id.as_str(),
            CheckName::Other(text) => text,
        }
    }
}

impl std::fmt::Display for CheckName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self)
    }
}

impl PartialEq<&str> for CheckName {
    fn eq(&self, other: &&str) -> bool {
        &**self == *other
    }
}

/// One check outcome from one probe run, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub seq: u64,
    /// The check, typed when it is one of the vocabulary (a `/3` score reads thousands of
    /// cells: no text, lookup or shared count per cell).
    pub check: CheckName,
    pub outcome: Outcome,
    pub at: Instant,
    /// The kind of probe run that produced it (a paid run's entry proves a paid call happened).
    pub kind: Kind,
    /// Index into `Subject::revisions` of the revision the entry was recorded under.
    pub revision: Option<usize>,
    /// ms for curve checks; output bytes for R5 passes.
    pub value: Option<f64>,
    /// Under method `/3`, what the entry stands for: a run of consecutive outcomes of one day
    /// (`super::summary`). `None` for one outcome (method `/2`).
    pub cell: Option<CellFacts>,
}

/// What a `/3` cell adds to its entry (`rubrics/README.md`, "Method /3"): `at` is its latest
/// outcome's time, `first_ns` its first's; its weight is `decay(day_ns) x revision x scale`.
#[derive(Debug, Clone, PartialEq)]
pub struct CellFacts {
    pub count: u32,
    pub first_ns: i128,
    /// The start of the cell's UTC day: the time its decay and the windows read.
    pub day_ns: i128,
    /// `sum of 2^((at_i - day_ns) / half-life)` over its outcomes, in ledger order.
    pub scale: f64,
    /// Curve checks: each outcome's value (`+inf` for a fail) with its own scale (the cell's own,
    /// shared). `None` when the cell has none (every cell of a check that is not a curve): no
    /// shared count to move for most cells.
    pub measurements: Option<std::sync::Arc<Vec<(f64, f64)>>>,
    /// `sum of scale_i x value_i` over its outcomes with a value (R5 passes' sizes).
    pub value_sum: f64,
}

impl Entry {
    /// How many outcomes the entry stands for.
    pub fn count(&self) -> u32 {
        self.cell.as_ref().map_or(1, |c| c.count)
    }

    /// The time of its first outcome.
    pub fn first_ns(&self) -> i128 {
        self.cell.as_ref().map_or(self.at.ns, |c| c.first_ns)
    }

    /// The time its decay and the outlook's windows read: its own (`/2`), its day's start (`/3`).
    pub fn decay_ns(&self) -> i128 {
        self.cell.as_ref().map_or(self.at.ns, |c| c.day_ns)
    }

    /// What its decay multiplies: 1 (`/2`), the cell's scale (`/3`).
    pub fn scale(&self) -> f64 {
        self.cell.as_ref().map_or(1.0, |c| c.scale)
    }
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

/// A parsed, validated, normalised inputs document with its canonical form and digest.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub rubric_sha256: String,
    pub rubric_version: String,
    pub as_of: Instant,
    pub subject: Subject,
    /// In time order, equal times by `seq`: the order every rule reads.
    pub history: Vec<Entry>,
    /// By id.
    pub population: Vec<Peer>,
    pub provenance: Provenance,
    /// The normalised document as JSON, embedded in the score document.
    pub document: std::sync::Arc<serde_json::Value>,
    /// SHA-256 of the RFC 8785 canonical bytes of `document` (`/3`: of its day summaries'
    /// digests, `summary::inputs`).
    pub digest: [u8; 32],
    /// The scorer's method the inputs are scored under.
    pub method: super::Method,
    /// The inputs' `quorum` block (several vantages only).
    pub quorum: Option<super::quorum::QuorumDocument>,
}

impl Inputs {
    /// Parse and validate an inputs document from JSON bytes (any formatting).
    pub fn from_json_bytes(bytes: &[u8]) -> Result<Inputs, InputError> {
        Inputs::from_document(serde_json::from_slice(bytes)?)
    }

    pub fn from_value(document: serde_json::Value) -> Result<Inputs, InputError> {
        Inputs::from_document(serde_json::from_value(document)?)
    }

    /// Validate and normalise a typed document. The digest is taken over the normalised
    /// document, so the order of `history` (and `population`) in the file does not matter.
    pub fn from_document(document: InputsDocument) -> Result<Inputs, InputError> {
        build(document, Embed::Document)
    }

    /// As [`Inputs::from_document`] (the same validation, order and digest), without keeping the
    /// normalised document as JSON: `document` is null. For a score whose stored form leaves its
    /// inputs out (the daemon's: the ledger holds them), which would otherwise build a JSON
    /// value of every history row inside the horizon only to drop it.
    pub fn from_document_unembedded(document: InputsDocument) -> Result<Inputs, InputError> {
        build(document, Embed::Nothing)
    }

    pub fn digest_hex(&self) -> String {
        hex::encode(self.digest)
    }

    /// The canonical bytes of the normalised document (what the digest is taken over; null for
    /// inputs built without their document).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        crate::canonical::to_canonical_bytes(&self.document)
    }

    /// How many of the subject's revisions came after the given one (or, with no revision named,
    /// strictly after the given time).
    pub fn later_revisions(&self, entry: &Entry) -> u32 {
        let later = match entry.revision {
            Some(index) => self.subject.revisions.len() - index - 1,
            None => self
                .subject
                .revisions
                .iter()
                .filter(|r| r.at.ns > entry.at.ns)
                .count(),
        };
        u32::try_from(later).unwrap_or(u32::MAX)
    }
}

/// Parse RFC 3339 text that must be in UTC (`Z` or `+00:00`), exactly to the nanosecond.
///
/// More than 9 fractional digits and leap seconds are refused rather than rounded: the parser
/// would cut the digits beyond nanoseconds and read `23:59:60` as `23:59:59.999999999`, which can
/// make two different times equal, and the order of equal times is decided by `seq` instead.
pub fn parse_instant(what: &str, text: &str) -> Result<Instant, InputError> {
    parse_instant_of(&|| what.to_string(), text)
}

/// [`parse_instant`] with what is parsed named only when it is refused (a history row's name is
/// formatted for its error, never for each row that reads).
fn parse_instant_of(what: &dyn Fn() -> String, text: &str) -> Result<Instant, InputError> {
    Ok(Instant {
        text: text.to_string(),
        ns: parse_ns_of(what, text)?,
    })
}

/// The nanoseconds of [`parse_instant_of`], without a copy of the text.
fn parse_ns_of(what: &dyn Fn() -> String, text: &str) -> Result<i128, InputError> {
    let parsed = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|e| invalid(format!("{}: {text:?} is not an RFC 3339 time: {e}", what())))?;
    if !parsed.offset().is_utc() {
        return Err(invalid(format!("{}: {text:?} is not in UTC", what())));
    }
    if let Some((_, fraction)) = text.split_once('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 9 {
            return Err(invalid(format!(
                "{}: {text:?} has {digits} fractional digits; times are kept to the \
                 nanosecond (9 digits) and never rounded",
                what()
            )));
        }
    }
    if text.get(17..19) == Some("60") {
        return Err(invalid(format!(
            "{}: {text:?} is a leap second, which would tie with the nanosecond before it",
            what()
        )));
    }
    Ok(parsed.unix_timestamp_nanos())
}

/// A price: a non-negative decimal, as a string (`"0.01"`) or a JSON number.
fn parse_price(what: &str, value: &PriceUsd) -> Result<f64, InputError> {
    let text = match value {
        PriceUsd::Decimal(s) => s.clone(),
        PriceUsd::Number(n) => n.to_string(),
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
    } else if let PriceUsd::Number(n) = value {
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

fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether the normalised document is kept as JSON in the [`Inputs`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Embed {
    Document,
    Nothing,
}

fn build(mut doc: InputsDocument, embed: Embed) -> Result<Inputs, InputError> {
    if !is_hex64(&doc.rubric_sha256) {
        return Err(invalid("rubric_sha256 must be 64 lowercase hex digits"));
    }
    crate::rubric::major_version_of(&doc.rubric_version)
        .map_err(|e| invalid(format!("rubric_version: {e}")))?;
    let as_of = parse_instant("as_of", &doc.as_of)?;

    let s = &doc.subject;
    if s.id.trim().is_empty() {
        return Err(invalid("subject.id is empty"));
    }
    let price_usd = parse_price("subject.price_usd", &s.price_usd)?;
    let mut revisions: Vec<Revision> = Vec::with_capacity(s.revisions.len());
    for (i, r) in s.revisions.iter().enumerate() {
        let at = parse_instant(&format!("subject.revisions[{i}].at"), &r.at)?;
        if at.ns > as_of.ns {
            return Err(invalid(format!(
                "subject.revisions[{i}] ({}) is after as_of",
                r.id
            )));
        }
        if revisions.iter().any(|x| x.id == r.id) {
            return Err(invalid(format!("duplicate revision id {:?}", r.id)));
        }
        if let Some(previous) = revisions.last()
            && at.ns < previous.at.ns
        {
            return Err(invalid(format!(
                "subject.revisions[{i}] ({}) is earlier than revision {:?} listed before it: \
                 list revisions oldest first",
                r.id, previous.id
            )));
        }
        revisions.push(Revision {
            id: r.id.clone(),
            at,
            note: r.note.clone(),
        });
    }

    // Each row checked and its time and revision read; the rows themselves are moved into the
    // scorer's entries at the end, never copied (a rescore reads tens of thousands of them).
    let mut read: Vec<(i128, Option<usize>)> = Vec::with_capacity(doc.history.len());
    for e in &doc.history {
        // Named only in an error: formatting it for every row was a fifth of a rescore.
        let what = || format!("history entry seq {} ({} {})", e.seq, e.check, e.at);
        if e.seq > MAX_SEQ {
            return Err(invalid(format!(
                "{}: seq must be at most 2^53 - 1 (RFC 8785 keeps integers exact only up to it)",
                what()
            )));
        }
        let at_ns = parse_ns_of(&what, &e.at)?;
        if at_ns > as_of.ns {
            return Err(invalid(format!("{} is after as_of {}", what(), as_of.text)));
        }
        if !is_hex64(&e.receipt) {
            return Err(invalid(format!(
                "{}: receipt must be the receipt's SHA-256 as 64 lowercase hex digits",
                what()
            )));
        }
        if let Some(v) = e.value
            && !(v.is_finite() && v >= 0.0)
        {
            return Err(invalid(format!("{}: value must be a number >= 0", what())));
        }
        let revision = match &e.revision {
            None => None,
            Some(id) => {
                let index = revisions
                    .iter()
                    .position(|r| &r.id == id)
                    .ok_or_else(|| invalid(format!("{}: unknown revision {id:?}", what())))?;
                if revisions[index].at.ns > at_ns {
                    return Err(invalid(format!(
                        "{} is recorded under revision {id:?}, which came later",
                        what()
                    )));
                }
                Some(index)
            }
        };
        read.push((at_ns, revision));
    }
    let rows = &doc.history;
    let mut by_seq: Vec<usize> = (0..rows.len()).collect();
    by_seq.sort_by_key(|&i| rows[i].seq);
    if let Some(pair) = by_seq.windows(2).find(|p| rows[p[0]].seq == rows[p[1]].seq) {
        let (a, b) = (&rows[pair[0]], &rows[pair[1]]);
        return Err(invalid(format!(
            "seq {} is used by two history entries ({} {} and {} {}); each entry needs its own",
            a.seq, a.check, a.at, b.check, b.at
        )));
    }
    // The one order every rule reads: time, then seq. seq is unique, so this order is total and
    // the array order of the file never matters.
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| (read[i].0, rows[i].seq));
    let mut raw_history: Vec<Option<HistoryEntry>> = std::mem::take(&mut doc.history)
        .into_iter()
        .map(Some)
        .collect();
    let mut sorted_read = Vec::with_capacity(order.len());
    for &i in &order {
        doc.history.extend(raw_history[i].take());
        sorted_read.push(read[i]);
    }

    let mut population = Vec::with_capacity(doc.population.len());
    doc.population.sort_by(|a, b| a.id.cmp(&b.id));
    for (i, p) in doc.population.iter().enumerate() {
        let what = format!("population peer {:?}", p.id);
        if i > 0 && doc.population[i - 1].id == p.id {
            return Err(invalid(format!("{what} is listed twice")));
        }
        let rate_ok = |r: f64| r.is_finite() && (0.0..=1.0).contains(&r);
        if !rate_ok(p.r4_pass_rate) || !rate_ok(p.r5_pass_rate) {
            return Err(invalid(format!("{what}: pass rates must be in 0..=1")));
        }
        population.push(Peer {
            price_usd: parse_price(&format!("{what}.price_usd"), &p.price_usd)?,
            id: p.id.clone(),
            category: p.category.clone(),
            r4_pass_rate: p.r4_pass_rate,
            r5_pass_rate: p.r5_pass_rate,
        });
    }

    let digest: [u8; 32] = Sha256::digest(canonical_bytes_of_document(&doc)?).into();
    let document = match embed {
        Embed::Document => serde_json::to_value(&doc)?,
        Embed::Nothing => serde_json::Value::Null,
    };
    let InputsDocument {
        rubric_sha256,
        rubric_version,
        subject,
        provenance,
        history: rows,
        quorum,
        ..
    } = doc;
    let history: Vec<Entry> = rows
        .into_iter()
        .zip(sorted_read)
        .map(|(e, (ns, revision))| Entry {
            seq: e.seq,
            check: CheckName::from(e.check),
            outcome: e.outcome,
            at: Instant { text: e.at, ns },
            kind: e.kind,
            revision,
            value: e.value,
            cell: None,
        })
        .collect();
    Ok(Inputs {
        rubric_sha256,
        rubric_version,
        as_of,
        subject: Subject {
            id: subject.id,
            url: subject.url,
            category: subject.category,
            price_usd,
            revisions,
        },
        history,
        population,
        provenance,
        document: std::sync::Arc::new(document),
        digest,
        method: super::Method::V2,
        quorum,
    })
}

/// The RFC 8785 bytes of a (normalised) inputs document: the same bytes as
/// `to_canonical_bytes(&serde_json::to_value(doc))`, with the history rows (nearly all of a
/// subject's document: about 56,000 of them once its 180-day horizon is full) written straight
/// from their typed form instead of through a JSON value each.
fn canonical_bytes_of_document(doc: &InputsDocument) -> Result<Vec<u8>, InputError> {
    use crate::canonical::{to_canonical_bytes, write_string};
    // The top-level keys in RFC 8785 order: as_of, history, then the rest (all sort after it).
    let mut out = String::with_capacity(doc.history.len() * 240 + 1024);
    out.push_str("{\"as_of\":");
    write_string(&mut out, &doc.as_of);
    out.push_str(",\"history\":[");
    for (i, entry) in doc.history.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_history_entry(&mut out, entry);
    }
    out.push_str("],");
    let mut rest = serde_json::Map::new();
    rest.insert("population".into(), serde_json::to_value(&doc.population)?);
    rest.insert("provenance".into(), serde_json::to_value(doc.provenance)?);
    if let Some(q) = &doc.quorum {
        rest.insert("quorum".into(), serde_json::to_value(q)?);
    }
    rest.insert(
        "rubric_sha256".into(),
        serde_json::Value::String(doc.rubric_sha256.clone()),
    );
    rest.insert(
        "rubric_version".into(),
        serde_json::Value::String(doc.rubric_version.clone()),
    );
    rest.insert("subject".into(), serde_json::to_value(&doc.subject)?);
    let mut bytes = out.into_bytes();
    // `{"population":...}` without its opening brace closes the document.
    bytes.extend_from_slice(&to_canonical_bytes(&serde_json::Value::Object(rest))[1..]);
    Ok(bytes)
}

/// One history row's RFC 8785 object: its keys in order (at, check, kind, note, outcome, receipt,
/// revision, seq, value), the optional ones only when present, numbers as doubles.
fn write_history_entry(out: &mut String, e: &HistoryEntry) {
    use crate::canonical::{format_number, write_string};
    out.push_str("{\"at\":");
    write_string(out, &e.at);
    out.push_str(",\"check\":");
    write_string(out, &e.check);
    out.push_str(match e.kind {
        Kind::Free => ",\"kind\":\"free\"",
        Kind::Paid => ",\"kind\":\"paid\"",
    });
    if let Some(note) = &e.note {
        out.push_str(",\"note\":");
        write_string(out, note);
    }
    out.push_str(",\"outcome\":\"");
    out.push_str(e.outcome.as_str());
    out.push_str("\",\"receipt\":");
    write_string(out, &e.receipt);
    if let Some(revision) = &e.revision {
        out.push_str(",\"revision\":");
        write_string(out, revision);
    }
    out.push_str(",\"seq\":");
    out.push_str(&format_number(e.seq as f64));
    if let Some(value) = e.value {
        out.push_str(",\"value\":");
        out.push_str(&format_number(value));
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The bytes the digest was always taken over: the document as a JSON value, canonicalised.
    fn canonical_through_a_value(doc: &InputsDocument) -> Vec<u8> {
        crate::canonical::to_canonical_bytes(&serde_json::to_value(doc).unwrap())
    }

    #[test]
    fn the_rows_written_straight_are_the_bytes_of_the_document_as_a_value() {
        let mut docs: Vec<InputsDocument> = vec![serde_json::from_value(minimal()).unwrap()];
        // Every optional field, escapes, fractional and whole values, a large seq, a peer.
        let mut full: InputsDocument = serde_json::from_value(minimal()).unwrap();
        full.history[0].note = Some("excused: \"our\" vantage\n\u{1}é".into());
        full.history[0].value = Some(12.5);
        full.history[1].value = Some(1e21);
        full.history[1].kind = Kind::Paid;
        full.history[2].value = Some(0.000_001);
        full.history[2].seq = MAX_SEQ;
        full.history[2].check = "R\\3".into();
        full.population = vec![PeerDocument {
            id: "p".into(),
            category: "c".into(),
            price_usd: PriceUsd::Decimal("0.5".into()),
            r4_pass_rate: 0.25,
            r5_pass_rate: 1.0,
        }];
        docs.push(full);
        // The goldens' inputs, as the scorer embedded them.
        for golden in [
            include_str!("../../tests/data/golden/01-healthy-established.json"),
            include_str!("../../tests/data/golden/05-revisions-na-watch.json"),
        ] {
            let value: serde_json::Value = serde_json::from_str(golden).unwrap();
            docs.push(serde_json::from_value(value["inputs"].clone()).unwrap());
        }
        for doc in &docs {
            assert_eq!(
                String::from_utf8(canonical_bytes_of_document(doc).unwrap()).unwrap(),
                String::from_utf8(canonical_through_a_value(doc)).unwrap()
            );
        }
        // And the digest does not depend on whether the document is kept.
        for doc in docs {
            let kept = Inputs::from_document(doc.clone()).unwrap();
            let unembedded = Inputs::from_document_unembedded(doc).unwrap();
            assert_eq!(kept.digest, unembedded.digest);
            assert_eq!(
                kept.digest,
                <[u8; 32]>::from(Sha256::digest(kept.canonical_bytes()))
            );
            assert!(unembedded.document.is_null());
        }
    }

    fn minimal() -> serde_json::Value {
        json!({
            "rubric_sha256": "0".repeat(64),
            "rubric_version": "1.0.0-draft.1",
            "as_of": "2026-11-01T00:00:00Z",
            "subject": {"id": "s1", "url": "https://a.example/x", "category": "search",
                        "price_usd": "0.01",
                        "revisions": [{"id": "r1", "at": "2026-10-01T00:00:00Z", "note": "first"},
                                      {"id": "r2", "at": "2026-10-20T00:00:00Z"}]},
            "history": [
                {"seq": 3, "check": "R1", "outcome": "pass", "at": "2026-10-31T00:00:00Z",
                 "kind": "free", "revision": "r2", "receipt": "a".repeat(64)},
                {"seq": 2, "check": "R1", "outcome": "fail", "at": "2026-10-10T00:00:00Z",
                 "kind": "free", "revision": "r1", "receipt": "b".repeat(64)},
                {"seq": 1, "check": "R1", "outcome": "fail", "at": "2026-09-10T00:00:00Z",
                 "kind": "free", "receipt": "b".repeat(64)}
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
        assert_eq!(inputs.as_of.ns, 1_793_491_200_000_000_000);
        // The embedded document is the normalised one: history in time order.
        let seqs: Vec<u64> = inputs.document["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, vec![1, 2, 3]);
    }

    #[test]
    fn digest_ignores_formatting_key_order_and_array_order() {
        let a = Inputs::from_value(minimal()).unwrap();
        let text = serde_json::to_string_pretty(&minimal()).unwrap();
        let b = Inputs::from_json_bytes(text.as_bytes()).unwrap();
        assert_eq!(a.digest, b.digest);
        let mut reversed = minimal();
        reversed["history"].as_array_mut().unwrap().reverse();
        let c = Inputs::from_value(reversed).unwrap();
        assert_eq!(a.digest, c.digest);
        assert_eq!(a.document, c.document);
        let mut changed = minimal();
        changed["subject"]["id"] = json!("s2");
        assert_ne!(Inputs::from_value(changed).unwrap().digest, a.digest);
    }

    #[test]
    fn equal_times_are_ordered_by_seq() {
        let mut v = minimal();
        v["history"] = json!([
            {"seq": 9, "check": "S2", "outcome": "pass", "at": "2026-10-31T00:00:00Z",
             "kind": "free", "receipt": "a".repeat(64)},
            {"seq": 4, "check": "S2", "outcome": "fail", "at": "2026-10-31T00:00:00.000Z",
             "kind": "free", "receipt": "a".repeat(64)},
        ]);
        let inputs = Inputs::from_value(v).unwrap();
        let order: Vec<u64> = inputs.history.iter().map(|e| e.seq).collect();
        assert_eq!(order, vec![4, 9]);
    }

    #[test]
    fn times_keep_their_nanoseconds() {
        // An na recorded 0.8 ms before a pass, listed after it, with a higher seq: time decides.
        let mut v = minimal();
        v["history"] = json!([
            {"seq": 1, "check": "H4", "outcome": "pass", "at": "2026-10-31T00:00:00.0009Z",
             "kind": "free", "receipt": "a".repeat(64)},
            {"seq": 2, "check": "H4", "outcome": "na", "at": "2026-10-31T00:00:00.0001Z",
             "kind": "free", "receipt": "a".repeat(64)},
        ]);
        let inputs = Inputs::from_value(v).unwrap();
        assert_eq!(inputs.history[0].outcome, Outcome::Na);
        assert_eq!(inputs.history[1].at.ns - inputs.history[0].at.ns, 800_000);
        // 0.9 ms after as_of is after as_of.
        assert!(
            error_after(|v| v["history"][0]["at"] = json!("2026-11-01T00:00:00.0009Z"))
                .contains("after as_of")
        );
        assert!(
            error_after(|v| v["history"][0]["at"] = json!("2026-11-01T00:00:00.000000001Z"))
                .contains("after as_of")
        );
        // Nanoseconds are the limit: a tenth digit is refused, not cut.
        assert!(
            error_after(|v| v["history"][0]["at"] = json!("2026-10-31T00:00:00.0000000001Z"))
                .contains("10 fractional digits")
        );
        assert!(
            error_after(|v| v["history"][0]["at"] = json!("2016-12-31T23:59:60Z"))
                .contains("leap second")
        );
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
        assert!(
            error_after(|v| v["history"][0]["kind"] = json!("cheap")).contains("unknown variant")
        );
        assert!(error_after(|v| v["history"][0]["receipt"] = json!("xyz")).contains("receipt"));
        assert!(error_after(|v| v["history"][0]["value"] = json!(-1)).contains("value"));
        assert!(error_after(|v| v["subject"]["price_usd"] = json!("1e-3x")).contains("decimal"));
        assert!(error_after(|v| v["subject"]["price_usd"] = json!(-0.5)).contains("decimal"));
        assert!(error_after(|v| v["provenance"] = json!("real")).contains("unknown variant"));
        assert!(error_after(|v| v["extra"] = json!(1)).contains("unknown field"));
        assert!(error_after(|v| v["history"][0]["extra"] = json!(1)).contains("unknown field"));
        assert!(error_after(|v| v["rubric_version"] = json!("one")).contains("rubric_version"));
        // seq: required, unique, a whole number within what canonical JSON keeps exact.
        assert!(
            error_after(|v| {
                v["history"][0].as_object_mut().unwrap().remove("seq");
            })
            .contains("missing field `seq`")
        );
        let twice = error_after(|v| v["history"][0]["seq"] = json!(1));
        assert!(
            twice.contains("seq 1 is used by two history entries"),
            "{twice}"
        );
        assert!(error_after(|v| v["history"][0]["seq"] = json!(-1)).contains("invalid value"));
        assert!(error_after(|v| v["history"][0]["seq"] = json!(1.5)).contains("invalid type"));
        assert!(
            error_after(|v| v["history"][0]["seq"] = json!(1u64 << 53))
                .contains("at most 2^53 - 1")
        );
        // Revisions are listed oldest first.
        assert!(
            error_after(|v| v["subject"]["revisions"].as_array_mut().unwrap().reverse())
                .contains("list revisions oldest first")
        );
        let peer = json!({"id": "p", "category": "c", "price_usd": "1", "r4_pass_rate": 1.0,
                          "r5_pass_rate": 1.0});
        assert!(
            error_after(|v| v["population"] = json!([peer.clone(), peer])).contains("listed twice")
        );
    }

    #[test]
    fn the_typed_document_round_trips() {
        let doc: InputsDocument = serde_json::from_value(minimal()).unwrap();
        let back = serde_json::to_value(&doc).unwrap();
        let again: InputsDocument = serde_json::from_value(back).unwrap();
        assert_eq!(doc, again);
        // Absent optional fields stay absent.
        let text = serde_json::to_string(&doc.history[2]).unwrap();
        assert!(
            !text.contains("revision") && !text.contains("note"),
            "{text}"
        );
        assert_eq!(
            Inputs::from_document(doc).unwrap().digest,
            Inputs::from_value(minimal()).unwrap().digest
        );
    }

    #[test]
    fn prices_as_string_or_number() {
        let p = |v: serde_json::Value| parse_price("p", &serde_json::from_value(v).unwrap());
        assert_eq!(p(json!("0.005")).unwrap(), 0.005);
        assert_eq!(p(json!(2)).unwrap(), 2.0);
        assert_eq!(p(json!(1e-3)).unwrap(), 0.001);
        assert!(p(json!("1.")).is_err());
        assert!(p(json!(".5")).is_err());
        assert!(serde_json::from_value::<PriceUsd>(json!(null)).is_err());
    }
}
