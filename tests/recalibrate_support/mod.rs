//! A seeded population for the recalibration's test and benchmark: hidden truths (good, flaky and
//! bad endpoints, a few turning bad midway), histories drawn from them, labels from the truth, and
//! daily score rows from the real scorer appended through the `Store` trait.

use x402_probe::calibrate::labels::{DayLabel, FailureKind, SubjectLabels};
use x402_probe::clock::rfc3339_ms;
use x402_probe::daemon::scoring::{self, SubjectInputs};
use x402_probe::evidence::Outcome;
use x402_probe::evidence::run::Provenance;
use x402_probe::ledger::record::Record;
use x402_probe::rubric::{Kind, Rubric};
use x402_probe::score::input::HistoryEntry;
use x402_probe::store::sqlite::SqliteStore;
use x402_probe::store::{Index, NewEntry, ScoreRow, Store};

pub const DAY_MS: i64 = 86_400_000;
/// 2026-03-01T00:00:00Z.
pub const START_MS: i64 = 20_513 * DAY_MS;

/// splitmix64: a seeded stream, so the population is the same on every run.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A subject's hidden truth: how often its calls fail and how slow it is; a few turn bad midway.
pub struct Truth {
    fail: f64,
    slow_ms: f64,
    turns_bad_on: Option<i64>,
}

impl Truth {
    fn fail_on(&self, day: i64) -> f64 {
        match self.turns_bad_on {
            Some(d) if day >= d => 0.7,
            _ => self.fail,
        }
    }
}

pub fn truth(i: u32) -> Truth {
    let mut r = Rng(0xC0FFEE ^ u64::from(i));
    let kind = r.unit();
    let (fail, slow_ms) = if kind < 0.65 {
        (0.01 + 0.03 * r.unit(), 200.0 + 600.0 * r.unit())
    } else if kind < 0.88 {
        (0.15 + 0.25 * r.unit(), 800.0 + 2500.0 * r.unit())
    } else {
        (0.5 + 0.4 * r.unit(), 2000.0 + 8000.0 * r.unit())
    };
    let turns_bad_on = (r.unit() < 0.08).then(|| 18 + (r.next() % 10) as i64);
    Truth {
        fail,
        slow_ms,
        turns_bad_on,
    }
}

pub fn url(prefix: &str, i: u32) -> String {
    format!("https://{prefix}{i:03}.example/api")
}

pub fn entry(
    seq: u64,
    check: &str,
    pass: bool,
    at_ms: i64,
    kind: Kind,
    value: Option<f64>,
) -> HistoryEntry {
    HistoryEntry {
        seq,
        check: check.into(),
        outcome: if pass { Outcome::Pass } else { Outcome::Fail },
        at: rfc3339_ms(at_ms),
        kind,
        revision: None,
        value: if pass { value } else { None },
        receipt: "0".repeat(64),
        note: None,
    }
}

/// One free run a day and a paid call every other day, drawn from the truth.
pub fn history(i: u32, t: &Truth, days: i64) -> Vec<HistoryEntry> {
    let mut r = Rng(0xBEEF ^ (u64::from(i) << 8));
    let mut out = Vec::new();
    let mut seq = 0;
    for day in 0..days {
        let p = t.fail_on(day);
        let at = START_MS + day * DAY_MS + 6 * 3_600_000;
        seq += 1;
        let ms = (t.slow_ms * (0.5 + r.unit())).round();
        out.push(entry(seq, "R1", r.unit() >= p / 2.0, at, Kind::Free, None));
        out.push(entry(seq, "R2", r.unit() >= p / 3.0, at, Kind::Free, None));
        out.push(entry(
            seq,
            "R3",
            r.unit() >= p / 3.0,
            at,
            Kind::Free,
            Some(ms),
        ));
        out.push(entry(seq, "S1", true, at, Kind::Free, None));
        if day % 2 == 0 {
            let at = at + 6 * 3_600_000;
            seq += 1;
            let ok = r.unit() >= p;
            let ms = (t.slow_ms * (1.0 + r.unit())).round();
            out.push(entry(seq, "R4", ok, at, Kind::Paid, None));
            out.push(entry(
                seq,
                "R5",
                ok || r.unit() < 0.5,
                at,
                Kind::Paid,
                Some(512.0),
            ));
            out.push(entry(seq, "R7", ok, at, Kind::Paid, Some(ms)));
            out.push(entry(seq, "H5", r.unit() >= p / 4.0, at, Kind::Paid, None));
            out.push(entry(seq, "H6", true, at, Kind::Paid, None));
        }
    }
    // Each entry its own number (a run's entries share its time; seq orders them).
    for (k, e) in out.iter_mut().enumerate() {
        e.seq = k as u64 + 1;
    }
    out
}

/// The labels from the truth: for each day with 14 following days in the population's span, one
/// paid call on each following day, failing with that day's rate.
pub fn labels_for(i: u32, t: &Truth, id: String, days: i64) -> SubjectLabels {
    let mut r = Rng(0xFACE ^ (u64::from(i) << 16));
    let draws: Vec<bool> = (0..days).map(|d| r.unit() < t.fail_on(d)).collect();
    let labelled = (0..days - 14)
        .map(|d| {
            let window = (d + 1)..=(d + 14);
            let fails = window.clone().any(|k| draws[k as usize]);
            let rate = window.map(|k| t.fail_on(k)).sum::<f64>() / 14.0;
            DayLabel {
                day: rfc3339_ms(START_MS + d * DAY_MS)[..10].to_string(),
                fails,
                calls: 14,
                failure_rate: Some((rate * 1e4).round() / 1e4),
                failures: if fails {
                    vec![FailureKind::NotOk]
                } else {
                    vec![]
                },
            }
        })
        .collect();
    SubjectLabels {
        subject: id,
        days: labelled,
    }
}

/// Scores subject `i`'s history as of the end of each day under `rubric` and appends the score
/// entries (one transaction per subject) with their daily rows.
pub fn score_subject(store: &SqliteStore, rubric: &Rubric, id: &str, i: u32, days: i64) {
    let t = truth(i);
    let all = history(i, &t, days);
    let mut entries = Vec::new();
    for day in 0..days {
        let as_of_ms = START_MS + day * DAY_MS + 23 * 3_600_000;
        let history = scoring::history_for(all.clone(), &[], as_of_ms, 90);
        let inputs = scoring::inputs_document(
            rubric,
            SubjectInputs {
                url: id.to_string(),
                category: "data".into(),
                price_usd: x402_probe::evidence::usd::Usd::of_micros(10_000).unwrap(),
                revisions: vec![],
                history,
                population: vec![],
                as_of_ms,
                provenance: Provenance::SyntheticFixture,
            },
        );
        let scored = scoring::score(rubric, inputs, as_of_ms, 0, 90).expect("scores");
        let row = ScoreRow {
            subject: id.to_string(),
            day: rfc3339_ms(as_of_ms)[..10].to_string(),
            as_of_ms,
            seq: 0,
            document: scored.stored,
        };
        entries.push(NewEntry {
            at_ms: as_of_ms,
            record: Record::Score(scored.record).into(),
            index: Some(Box::new(move |seq| Index {
                score: Some(ScoreRow { seq, ..row }),
                ..Index::default()
            })),
        });
    }
    store.append(entries).expect("appends");
}
