//! Method `/3`'s inputs: a subject's evidence as per-day summaries of each check, so that a score
//! costs about one entry per check per day of its horizon instead of one per outcome
//! (`rubrics/README.md`, "Method /3"). Pure.
//!
//! A day's summary is its **cells**: for each check, the runs of consecutive outcomes (in ledger
//! order) that share outcome, kind, revision and excuse, each with how many, its first and latest
//! time and seq, its scale (the sum of each outcome's decay relative to the start of the day) and,
//! for curve checks, each measurement with its own scale. The scorer reads a cell as one entry
//! of weight `decay(day start) x revision x scale`; rules that read the order of outcomes (the
//! latest determination, passes since the latest fail, a run of fails, the probes' span) read
//! the order of cells, which is the order of the outcomes they stand for.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::Arc;

use super::input::{CellFacts, CheckName, Entry, InputError, Inputs, InputsDocument, Instant};
use crate::evidence::{CheckId, Outcome};
use crate::rubric::{Kind, Rubric};

/// A day in ms.
pub const DAY_MS: i64 = 86_400_000;

/// A run of consecutive outcomes of one check within one UTC day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cell {
    /// Typed: a cell is read once per score for every day of the window, and an id held inline
    /// costs neither a string of its own nor a hash to look it up.
    pub check: CheckId,
    pub outcome: Outcome,
    pub kind: Kind,
    /// The revision its outcomes were recorded under, as recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The outcome our outage replaced (the cell's outcome is then `unmeasured`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excused: Option<Outcome>,
    pub count: u32,
    /// History seqs (`entry seq x stride + i`) of its first and latest outcome.
    pub first_seq: u64,
    pub last_seq: u64,
    /// Times (ms since the epoch) of its first and latest outcome.
    pub first_ms: i64,
    pub last_ms: i64,
    /// Sum over its outcomes, in order, of `2^((at - day start) / half-life)`.
    pub scale: f64,
    /// Curve checks: each outcome's value in ms (`+inf` for a fail, written `null`) and its own
    /// scale. Shared with the entries of the scores that read the cell, which take them as they
    /// are (a year's window is thousands of cells: no copy of each per score).
    #[serde(
        default,
        skip_serializing_if = "no_measurements",
        with = "measurements_as_written"
    )]
    pub measurements: Arc<Vec<(f64, f64)>>,
    /// Sum over its outcomes with a value (R5 passes' sizes) of scale times value.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub value_sum: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn no_measurements(m: &Arc<Vec<(f64, f64)>>) -> bool {
    m.is_empty()
}

/// A cell's measurements as its JSON has always written them: `[value, scale]` pairs with `null`
/// for the value of a fail (held as `+inf`, which is how every rule reads a fail).
mod measurements_as_written {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::sync::Arc;

    pub fn serialize<S: Serializer>(m: &Arc<Vec<(f64, f64)>>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            m.iter()
                .map(|(v, scale)| ((*v != f64::INFINITY).then_some(*v), *scale)),
        )
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<Vec<(f64, f64)>>, D::Error> {
        let written: Vec<(Option<f64>, f64)> = Vec::deserialize(d)?;
        Ok(Arc::new(
            written
                .into_iter()
                .map(|(v, scale)| (v.unwrap_or(f64::INFINITY), scale))
                .collect(),
        ))
    }
}

/// One outcome as a day summary takes it.
#[derive(Debug, Clone, Copy)]
pub struct Outcome1<'a> {
    pub seq: u64,
    pub check: &'a str,
    pub outcome: Outcome,
    pub kind: Kind,
    pub revision: Option<&'a str>,
    pub value: Option<f64>,
    pub at_ms: i64,
    pub excused: Option<Outcome>,
}

/// The UTC day (days since the epoch) of a time in ms.
pub fn day_of(at_ms: i64) -> i64 {
    at_ms.div_euclid(DAY_MS)
}

/// `2^((at - day start) / half-life)`: one outcome's scale.
pub fn outcome_scale(at_ms: i64, half_life_days: f64) -> f64 {
    let into_day = at_ms - day_of(at_ms) * DAY_MS;
    libm::exp2(into_day as f64 / DAY_MS as f64 / half_life_days)
}

/// Adds one outcome to a day's cells (outcomes of the day in ledger order): to its check's latest
/// cell when that one has the same outcome, kind, revision and excuse, else as a new cell.
///
/// An outcome of an id this build does not know is left out: every outcome a day summary takes
/// is a row derived from a run's typed results, so there is none.
pub fn add_outcome(rubric: &Rubric, cells: &mut Vec<Cell>, o: Outcome1<'_>) {
    let Ok(id) = o.check.parse::<CheckId>() else {
        return;
    };
    let check = rubric.check(id);
    let half_life = check.map_or(rubric.decay.free, |c| rubric.half_life_days(c));
    let is_curve = check.is_some_and(|c| c.metric == crate::rubric::Metric::Curve);
    let s = outcome_scale(o.at_ms, half_life);
    let latest = cells.iter_mut().rev().find(|c| c.check == id);
    let cell = match latest {
        Some(c)
            if c.outcome == o.outcome
                && c.kind == o.kind
                && c.revision.as_deref() == o.revision
                && c.excused == o.excused =>
        {
            c.count += 1;
            c.last_seq = o.seq;
            c.last_ms = o.at_ms;
            c.scale += s;
            c
        }
        _ => {
            cells.push(Cell {
                check: id,
                outcome: o.outcome,
                kind: o.kind,
                revision: o.revision.map(str::to_string),
                excused: o.excused,
                count: 1,
                first_seq: o.seq,
                last_seq: o.seq,
                first_ms: o.at_ms,
                last_ms: o.at_ms,
                scale: s,
                measurements: Arc::default(),
                value_sum: 0.0,
            });
            cells.last_mut().expect("just pushed")
        }
    };
    if is_curve {
        match o.outcome {
            Outcome::Pass => {
                Arc::make_mut(&mut cell.measurements).push((o.value.unwrap_or(f64::INFINITY), s))
            }
            Outcome::Fail => Arc::make_mut(&mut cell.measurements).push((f64::INFINITY, s)),
            Outcome::Na | Outcome::Unmeasured => {}
        }
    } else if let (Outcome::Pass, Some(v)) = (o.outcome, o.value) {
        cell.value_sum += s * v;
    }
}

/// A day's digest: SHA-256 of the RFC 8785 bytes of its cells.
pub fn day_digest(cells: &[Cell]) -> [u8; 32] {
    let bytes = crate::canonical::canonical_bytes_of(cells)
        .unwrap_or_else(|_| crate::canonical::to_canonical_bytes(&serde_json::Value::Null));
    Sha256::digest(bytes).into()
}

/// `YYYY-MM-DD` of a day since the epoch.
pub fn date_of(day: i64) -> String {
    // Years 0 to 9999 by the civil calendar's arithmetic (every score writes 180 of these);
    // the rest as the time crate writes them.
    if let Some(text) = date_text(day) {
        return String::from_utf8_lossy(&text).into_owned();
    }
    let t = time::OffsetDateTime::from_unix_timestamp(day.saturating_mul(86_400))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.format(time::macros::format_description!("[year]-[month]-[day]"))
        .unwrap_or_default()
}

/// 0000-01-01 and 9999-12-31 in days since the epoch.
const FIRST_DAY_OF_YEAR_0: i64 = -719_528;
const LAST_DAY_OF_YEAR_9999: i64 = 2_932_896;

/// `YYYY-MM-DD` of a day of years 0 to 9999, with no allocation; `None` outside them.
fn date_text(day: i64) -> Option<[u8; 10]> {
    if !(FIRST_DAY_OF_YEAR_0..=LAST_DAY_OF_YEAR_9999).contains(&day) {
        return None;
    }
    let (year, month, date) = civil_of(day);
    let digit = |n: i64| b'0' + (n % 10) as u8;
    Some([
        digit(year / 1000),
        digit(year / 100),
        digit(year / 10),
        digit(year),
        b'-',
        digit(month / 10),
        digit(month),
        b'-',
        digit(date / 10),
        digit(date),
    ])
}

/// The proleptic Gregorian (year, month, day) of a day since the epoch: the calendar's 400-year
/// cycle of 146,097 days, each year counted from March so that the leap day ends it.
fn civil_of(day: i64) -> (i64, i64, i64) {
    let z = day + 719_468; // days since 0000-03-01
    let era = z.div_euclid(146_097);
    let of_era = z.rem_euclid(146_097);
    let year_of_era = (of_era - of_era / 1_460 + of_era / 36_524 - of_era / 146_096) / 365;
    let of_year = of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * of_year + 2) / 153;
    let date = of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, date)
}

/// One day of a `/3` score's inputs.
pub struct Day<'a> {
    /// Days since the epoch.
    pub day: i64,
    pub cells: &'a [Cell],
    pub sha256: [u8; 32],
}

/// A day in the digest: its date and its digest in hex.
#[derive(Serialize)]
struct DayRef<'a> {
    day: &'a str,
    sha256: &'a str,
}

/// What a `/3` score's digest is taken over: `meta` (its `history` left out), the method and
/// the days.
#[derive(Serialize)]
struct Digested<'a> {
    #[serde(flatten)]
    meta: &'a InputsDocument,
    method: &'static str,
    days: DayRefs<'a>,
}

/// Each day as its date and digest ([`DayRef`]), made as it is written.
struct DayRefs<'a>(&'a [Day<'a>]);

impl Serialize for DayRefs<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        let mut hex_text = [0u8; 64];
        for d in self.0 {
            let date = date_text(d.day);
            let day = match &date {
                // ASCII digits and dashes: always UTF-8.
                Some(text) => std::str::from_utf8(text).map_err(serde::ser::Error::custom)?,
                None => &date_of(d.day),
            };
            hex::encode_to_slice(d.sha256, &mut hex_text).map_err(serde::ser::Error::custom)?;
            let sha256 = std::str::from_utf8(&hex_text).map_err(serde::ser::Error::custom)?;
            seq.serialize_element(&DayRef { day, sha256 })?;
        }
        seq.end()
    }
}

/// The inputs of a `/3` score: the subject, population and revisions of `meta` (its history
/// must be empty), the cells of `days` (oldest first). The digest is SHA-256 of the RFC 8785
/// bytes of `meta` without `history`, with `method` and `days` (each day's date and digest).
pub fn inputs(meta: InputsDocument, days: &[Day<'_>]) -> Result<Inputs, InputError> {
    if !meta.history.is_empty() {
        return Err(InputError::Invalid(
            "a /3 score reads its history from day summaries".into(),
        ));
    }
    // Written straight to its canonical bytes: no JSON value of the meta and of each day is
    // built (a year's window is 180 days, every score).
    let digested = crate::canonical::canonical_bytes_without(
        &Digested {
            meta: &meta,
            method: super::Method::V3.as_str(),
            days: DayRefs(days),
        },
        &["history"],
    )
    .map_err(|crate::canonical::CanonicalError::Serialize(e)| InputError::Parse(e))?;
    let mut inputs = Inputs::from_document_unembedded(meta)?;
    inputs.digest = Sha256::digest(digested).into();
    inputs.method = super::Method::V3;
    let revisions = &inputs.subject.revisions;
    let mut history = Vec::with_capacity(days.iter().map(|d| d.cells.len()).sum());
    for d in days {
        let day_ns = i128::from(d.day * DAY_MS) * 1_000_000;
        for c in d.cells {
            let first_ns = i128::from(c.first_ms) * 1_000_000;
            let at_ns = i128::from(c.last_ms) * 1_000_000;
            if at_ns > inputs.as_of.ns {
                return Err(InputError::Invalid(format!(
                    "cell of {} from seq {} is after as_of {}",
                    c.check, c.first_seq, inputs.as_of.text
                )));
            }
            // A revision no earlier entry declared is read as none (by time).
            let revision = c.revision.as_ref().and_then(|id| {
                revisions
                    .iter()
                    .position(|r| &r.id == id && r.at.ns <= first_ns)
            });
            history.push(Entry {
                seq: c.first_seq,
                check: CheckName::Id(c.check),
                outcome: c.outcome,
                at: Instant {
                    text: String::new(),
                    ns: at_ns,
                },
                kind: c.kind,
                revision,
                value: None,
                cell: Some(CellFacts {
                    count: c.count,
                    first_ns,
                    day_ns,
                    scale: c.scale,
                    measurements: (!c.measurements.is_empty()).then(|| c.measurements.clone()),
                    value_sum: c.value_sum,
                }),
            });
        }
    }
    inputs.history = history;
    Ok(inputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::input::InputsDocument;
    use crate::score::{Method, montecarlo::Sampler, score};

    /// A golden's inputs with every outcome moved to the start of its day (a revision made later
    /// that day no longer named: it came after), so that each outcome's decay is its day's.
    fn at_day_starts(golden: &str) -> InputsDocument {
        let value: serde_json::Value = serde_json::from_str(golden).unwrap();
        let mut doc: InputsDocument = serde_json::from_value(value["inputs"].clone()).unwrap();
        let ms = |t: &str| {
            time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                .unwrap()
                .unix_timestamp()
                * 1000
        };
        let revisions: Vec<(String, i64)> = doc
            .subject
            .revisions
            .iter()
            .map(|r| (r.id.clone(), ms(&r.at)))
            .collect();
        for e in &mut doc.history {
            let start = day_of(ms(&e.at)) * DAY_MS;
            e.at = format!("{}T00:00:00Z", date_of(day_of(start)));
            if let Some(id) = &e.revision
                && revisions.iter().any(|(r, at)| r == id && *at > start)
            {
                e.revision = None;
            }
        }
        doc
    }

    /// The same outcomes as cells, folded in the `/2` order (time, then seq).
    fn as_cells(rubric: &Rubric, doc: &InputsDocument) -> Vec<(i64, Vec<Cell>)> {
        let mut rows = doc.history.clone();
        let ms = |t: &str| {
            time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                .unwrap()
                .unix_timestamp()
                * 1000
        };
        rows.sort_by_key(|e| (ms(&e.at), e.seq));
        let mut days: std::collections::BTreeMap<i64, Vec<Cell>> = Default::default();
        for e in &rows {
            let at_ms = ms(&e.at);
            let cells = days.entry(day_of(at_ms)).or_default();
            add_outcome(
                rubric,
                cells,
                Outcome1 {
                    seq: e.seq,
                    check: &e.check,
                    outcome: e.outcome,
                    kind: e.kind,
                    revision: e.revision.as_deref(),
                    value: e.value,
                    at_ms,
                    excused: None,
                },
            );
        }
        days.into_iter().collect()
    }

    /// `/3` inputs of `doc`'s subject and population from `days` (its history rows left out).
    fn inputs_of_days(doc: &InputsDocument, days: &[(i64, Vec<Cell>)]) -> Inputs {
        let digests: Vec<[u8; 32]> = days.iter().map(|(_, c)| day_digest(c)).collect();
        let refs: Vec<Day<'_>> = days
            .iter()
            .zip(&digests)
            .map(|((day, cells), sha)| Day {
                day: *day,
                cells,
                sha256: *sha,
            })
            .collect();
        let mut meta = doc.clone();
        meta.history.clear();
        inputs(meta, &refs).unwrap()
    }

    /// Outcomes at the start of their day weigh in `/3` exactly what they weigh in `/2` (each
    /// scale is a sum of ones): every rule must then publish the same figures from the cells as
    /// from the entries, runs of several outcomes read as one cell included. Only the digest
    /// (and so the band's draws) and the method differ.
    #[test]
    fn cells_of_outcomes_at_day_starts_score_as_their_entries() {
        let rubric = Rubric::embedded_default();
        for golden in [
            include_str!("../../tests/data/golden/01-healthy-established.json"),
            include_str!("../../tests/data/golden/05-revisions-na-watch.json"),
        ] {
            let doc = at_day_starts(golden);
            let v2 = Inputs::from_document_unembedded(doc.clone()).unwrap();
            let days = as_cells(&rubric, &doc);
            let merged: usize = days.iter().map(|(_, c)| c.len()).sum();
            assert!(merged < doc.history.len(), "some outcomes share a cell");
            let v3 = inputs_of_days(&doc, &days);
            assert_eq!(v3.method, Method::V3);
            let a = score(&rubric, &v2, Sampler::InverseCdfTable).unwrap();
            let b = score(&rubric, &v3, Sampler::InverseCdfTable).unwrap();
            assert_eq!(b.method, "x402-probe.scorer/3");
            assert_ne!(a.inputs_sha256, b.inputs_sha256);
            assert_eq!(a.score, b.score);
            assert_eq!(a.capped_score, b.capped_score);
            assert_eq!(a.dimensions, b.dimensions);
            assert_eq!(a.gates, b.gates);
            assert_eq!(a.cap, b.cap);
            assert_eq!(a.verdict, b.verdict);
            assert_eq!(a.watch, b.watch);
            assert_eq!(a.outlook, b.outlook);
            assert_eq!(a.value, b.value);
            assert_eq!(a.prior_held, b.prior_held);
        }
    }

    /// A cell's JSON is what it was while measurements were `(value or null, scale)` pairs and
    /// the check a string: a fail's value written `null` (held as `+inf`), the id as its text;
    /// an unknown id is left out of the cells, and a stored cell naming one is refused.
    #[test]
    fn a_cell_is_written_as_before_and_unknown_ids_are_left_out() {
        let rubric = Rubric::embedded_default();
        let mut cells = Vec::new();
        let one = |seq, check, outcome, value| Outcome1 {
            seq,
            check,
            outcome,
            kind: Kind::Free,
            revision: None,
            value,
            at_ms: 0,
            excused: None,
        };
        add_outcome(
            &rubric,
            &mut cells,
            one(0, "R3", Outcome::Pass, Some(250.0)),
        );
        add_outcome(&rubric, &mut cells, one(1, "R3", Outcome::Fail, None));
        add_outcome(&rubric, &mut cells, one(2, "Z9", Outcome::Pass, None));
        assert_eq!(cells.len(), 2, "the unknown id made no cell");
        assert_eq!(cells[1].measurements.as_slice(), &[(f64::INFINITY, 1.0)]);
        let json = serde_json::to_value(&cells).unwrap();
        assert_eq!(json[0]["check"], "R3");
        assert_eq!(json[0]["measurements"], serde_json::json!([[250.0, 1.0]]));
        assert_eq!(json[1]["measurements"], serde_json::json!([[null, 1.0]]));
        let back: Vec<Cell> = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, cells);
        let mut unknown = json;
        unknown[0]["check"] = "Z9".into();
        assert!(serde_json::from_value::<Vec<Cell>>(unknown).is_err());
    }

    #[test]
    fn a_day_digest_names_its_cells_and_the_inputs_digest_its_days() {
        let rubric = Rubric::embedded_default();
        let doc = at_day_starts(include_str!(
            "../../tests/data/golden/01-healthy-established.json"
        ));
        let days = as_cells(&rubric, &doc);
        let digest_of = |days: &[(i64, Vec<Cell>)]| inputs_of_days(&doc, days).digest;
        let base = digest_of(&days);
        assert_eq!(base, digest_of(&days), "deterministic");
        let mut changed = days.clone();
        changed[0].1[0].count += 1;
        assert_ne!(base, digest_of(&changed));
        let mut fewer = days.clone();
        fewer.remove(0);
        assert_ne!(base, digest_of(&fewer));
        // A /3 input never takes history rows beside its days.
        let err = inputs(doc.clone(), &[]).err().unwrap();
        assert!(err.to_string().contains("day summaries"), "{err}");
    }

    /// Every day of years 0 to 9999 is written as the time crate writes it, and so are days
    /// beyond them (by the time crate itself).
    #[test]
    fn dates_are_written_as_the_time_crate_writes_them() {
        let by_time = |day: i64| {
            time::OffsetDateTime::from_unix_timestamp(day.saturating_mul(86_400))
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
                .format(time::macros::format_description!("[year]-[month]-[day]"))
                .unwrap_or_default()
        };
        for day in FIRST_DAY_OF_YEAR_0 - 3..=LAST_DAY_OF_YEAR_9999 + 3 {
            assert_eq!(date_of(day), by_time(day), "day {day}");
        }
        assert_eq!(date_of(FIRST_DAY_OF_YEAR_0), "0000-01-01");
        assert_eq!(date_of(LAST_DAY_OF_YEAR_9999), "9999-12-31");
        assert_eq!(date_of(0), "1970-01-01");
        assert_eq!(date_of(20_788), "2026-12-01");
        for day in [i64::MIN, i64::MAX, -10_000_000, 10_000_000] {
            assert_eq!(date_of(day), by_time(day));
        }
    }

    /// The digest as it was first taken: the meta as a JSON value, `history` removed, `method`
    /// and `days` (each a `{day, sha256}` value) put in, made canonical. Written straight to its
    /// bytes now, it must be the same digest, or no stored `/3` score would recompute.
    #[test]
    fn the_inputs_digest_is_the_one_taken_over_the_json_value() {
        let rubric = Rubric::embedded_default();
        for golden in [
            include_str!("../../tests/data/golden/01-healthy-established.json"),
            include_str!("../../tests/data/golden/02-overcharge-avoid.json"),
            include_str!("../../tests/data/golden/05-revisions-na-watch.json"),
            include_str!("../../tests/data/golden/03-down-stale.json"),
            include_str!("../../tests/data/golden/04-unverified-new.json"),
            include_str!("../../tests/data/golden/06-slow-payto-changed.json"),
            include_str!("../../tests/data/golden/07-injection-flaky.json"),
        ] {
            let doc = at_day_starts(golden);
            let days = as_cells(&rubric, &doc);
            let mut value = serde_json::to_value(&doc).unwrap();
            let map = value.as_object_mut().unwrap();
            map.remove("history");
            map.insert("method".into(), "x402-probe.scorer/3".into());
            let refs: Vec<serde_json::Value> = days
                .iter()
                .map(|(day, cells)| {
                    serde_json::json!({"day": date_of(*day), "sha256": hex::encode(day_digest(cells))})
                })
                .collect();
            map.insert("days".into(), refs.into());
            let want: [u8; 32] =
                Sha256::digest(crate::canonical::to_canonical_bytes(&value)).into();
            assert_eq!(inputs_of_days(&doc, &days).digest, want);
        }
    }
}
