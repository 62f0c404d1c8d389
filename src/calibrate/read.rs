//! Reading the store into the compact table, subject by subject: each subject's daily score rows
//! (documents parsed and dropped at once) and the label that follows each day, from a labels file
//! or from the daemon's own paid calls. Reads through the `Store` trait only, and only reads.

use std::collections::BTreeMap;

use super::labels::LabelsDocument;
use super::table::{Label, Table, day_number};
use crate::clock::ms_of;
use crate::evidence::Outcome;
use crate::history::SEQ_STRIDE;
use crate::rubric::{CheckId, Kind, Rubric};
use crate::score::input::HistoryEntry;
use crate::store::{Store, StoreError};

const DAY_MS: i64 = 86_400_000;

/// The checks whose failure on a paid call is a failed paid call (not 2xx, invalid output,
/// overcharged, wrong payee, charged twice, charged without delivery): one per failure kind.
pub const PAID_FAILURE_CHECKS: [CheckId; 6] = [
    CheckId::R4,
    CheckId::R5,
    CheckId::H5,
    CheckId::H6,
    CheckId::H7,
    CheckId::H8,
];

/// Where the labels come from.
#[derive(Debug, Clone, Copy)]
pub enum Labels<'a> {
    /// A labels document (the simulator's).
    File(&'a LabelsDocument),
    /// The daemon's own paid calls in the store (its history index of the ledger's run entries).
    Ledger,
}

/// What was read besides the table.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadSummary {
    /// The day the reading stands at: `--as-of`, else the latest daily score in the store.
    pub as_of_day: i32,
    /// Score rows after `as_of_day`, left out.
    pub rows_after_as_of: u64,
    /// Score rows whose day key is not a date (counted, left out).
    pub bad_days: u64,
    /// Label days in the labels file with no score row (the simulator labels days the daemon
    /// may not have scored).
    pub labels_without_row: u64,
}

/// Why reading failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading the store: {0}")]
    Store(#[from] StoreError),
    #[error("the store has no daily score rows")]
    Empty,
}

/// Reads every subject's daily scores (and labels) into a table, in subject order.
pub fn read_table(
    store: &dyn Store,
    live: &Rubric,
    labels: Labels<'_>,
    as_of_day: Option<i32>,
    horizon_days: u32,
) -> Result<(Table, ReadSummary), ReadError> {
    read_table_reporting(store, live, labels, as_of_day, horizon_days, &mut |_, _| {})
}

/// [`read_table`], telling `read(subjects read, subjects in all)` as it goes.
pub fn read_table_reporting(
    store: &dyn Store,
    live: &Rubric,
    labels: Labels<'_>,
    as_of_day: Option<i32>,
    horizon_days: u32,
    read: &mut dyn FnMut(u64, u64),
) -> Result<(Table, ReadSummary), ReadError> {
    let mut subjects: Vec<String> = store.subjects()?.into_iter().map(|s| s.url).collect();
    subjects.sort();
    subjects.dedup();
    let as_of_day = match as_of_day {
        Some(d) => d,
        None => {
            let mut latest = None;
            for s in &subjects {
                if let Some(row) = store.latest_score(s)? {
                    latest = latest.max(day_number(&row.day));
                }
            }
            latest.ok_or(ReadError::Empty)?
        }
    };
    // A label needs its whole horizon before the end of the as-of day.
    let cutoff_ms = (i64::from(as_of_day) + 1) * DAY_MS;
    let horizon_ms = i64::from(horizon_days) * DAY_MS;
    let mut summary = ReadSummary {
        as_of_day,
        rows_after_as_of: 0,
        bad_days: 0,
        labels_without_row: 0,
    };
    let mut table = Table::new(live);
    let total = subjects.len() as u64;
    for (done, url) in subjects.iter().enumerate() {
        read(done as u64, total);
        let rows = store.daily_scores(url)?;
        if rows.is_empty() {
            continue;
        }
        // The subject's index, taken only once one of its documents is kept (a subject with only
        // documents of another major version changes nothing but that count).
        let subject = table.subjects.len() as u32;
        let paid_calls = match labels {
            Labels::Ledger => paid_calls(&crate::daemon::subject_state::subject_rows(
                store, live, url,
            )?),
            Labels::File(_) => Vec::new(),
        };
        let file_days: BTreeMap<&str, Label> = match labels {
            Labels::File(doc) => doc
                .subjects
                .binary_search_by(|s| s.subject.as_str().cmp(url))
                .ok()
                .map(|i| {
                    doc.subjects[i]
                        .days
                        .iter()
                        .map(|d| {
                            (
                                d.day.as_str(),
                                Label {
                                    fails: d.fails,
                                    rate: d.failure_rate.map(|r| r as f32),
                                },
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
            Labels::Ledger => BTreeMap::new(),
        };
        let mut matched = 0u64;
        for row in rows {
            let Some(day) = day_number(&row.day) else {
                summary.bad_days += 1;
                continue;
            };
            if day > as_of_day {
                summary.rows_after_as_of += 1;
                continue;
            }
            let followed_up = match labels {
                Labels::File(_) => i64::from(day) * DAY_MS + DAY_MS + horizon_ms <= cutoff_ms,
                Labels::Ledger => row.as_of_ms + horizon_ms <= cutoff_ms,
            };
            let label = if !followed_up {
                None
            } else {
                match labels {
                    Labels::File(_) => file_days.get(row.day.as_str()).copied(),
                    Labels::Ledger => label_from_calls(&paid_calls, row.as_of_ms, horizon_ms),
                }
            };
            if file_days.contains_key(row.day.as_str()) {
                matched += 1;
            }
            if table
                .push_document(live, subject, day, &row.document)
                .is_ok()
                && let Some(last) = table.rows.last_mut()
            {
                last.label = label;
            }
        }
        if table.rows.last().is_some_and(|r| r.subject == subject) {
            table.subjects.push(url.clone());
        }
        summary.labels_without_row += file_days.len() as u64 - matched;
    }
    read(total, total);
    Ok((table, summary))
}

/// The subject's paid calls from its history rows: `(at_ms, failed)` per run that observed a paid
/// call (a pass or fail of one of `PAID_FAILURE_CHECKS` in a paid run), in time order. A run is
/// one ledger entry: its history entries are numbered `seq * SEQ_STRIDE + i`.
pub fn paid_calls(history: &[HistoryEntry]) -> Vec<(i64, bool)> {
    let mut by_run: BTreeMap<u64, (i64, bool)> = BTreeMap::new();
    for e in history {
        if e.kind != Kind::Paid || !PAID_FAILURE_CHECKS.iter().any(|c| c == e.check.as_str()) {
            continue;
        }
        if !matches!(e.outcome, Outcome::Pass | Outcome::Fail) {
            continue;
        }
        let Some(at) = ms_of(&e.at) else { continue };
        let call = by_run.entry(e.seq / SEQ_STRIDE).or_insert((at, false));
        call.0 = call.0.min(at);
        call.1 |= e.outcome == Outcome::Fail;
    }
    let mut calls: Vec<(i64, bool)> = by_run.into_values().collect();
    calls.sort();
    calls
}

/// The label of a day scored at `as_of_ms`: whether any paid call in `(as_of_ms, as_of_ms +
/// horizon]` failed; none when there was no paid call in the window.
pub fn label_from_calls(calls: &[(i64, bool)], as_of_ms: i64, horizon_ms: i64) -> Option<Label> {
    let start = calls.partition_point(|c| c.0 <= as_of_ms);
    let end = calls.partition_point(|c| c.0 <= as_of_ms + horizon_ms);
    let window = &calls[start..end];
    (!window.is_empty()).then(|| Label {
        fails: window.iter().any(|c| c.1),
        rate: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, check: &str, outcome: Outcome, at: &str, kind: Kind) -> HistoryEntry {
        HistoryEntry {
            seq,
            check: check.into(),
            outcome,
            at: at.into(),
            kind,
            revision: None,
            value: None,
            receipt: "0".repeat(64),
            note: None,
        }
    }

    #[test]
    fn paid_calls_are_runs_with_a_paid_observation() {
        let run = |ledger_seq: u64, i: u64| ledger_seq * SEQ_STRIDE + i;
        let history = vec![
            entry(
                run(5, 0),
                "R4",
                Outcome::Pass,
                "2026-01-02T00:00:00Z",
                Kind::Paid,
            ),
            entry(
                run(5, 1),
                "H5",
                Outcome::Fail,
                "2026-01-02T00:00:00Z",
                Kind::Paid,
            ),
            entry(
                run(7, 0),
                "R1",
                Outcome::Fail,
                "2026-01-03T00:00:00Z",
                Kind::Free,
            ),
            entry(
                run(9, 0),
                "R4",
                Outcome::Unmeasured,
                "2026-01-04T00:00:00Z",
                Kind::Paid,
            ),
            entry(
                run(11, 0),
                "R5",
                Outcome::Pass,
                "2026-01-20T00:00:00Z",
                Kind::Paid,
            ),
        ];
        let calls = paid_calls(&history);
        let t = |s: &str| ms_of(s).unwrap();
        assert_eq!(
            calls,
            vec![
                (t("2026-01-02T00:00:00Z"), true),
                (t("2026-01-20T00:00:00Z"), false)
            ]
        );
        let h = 14 * DAY_MS;
        // From Jan 1, the failing call on Jan 2 is in the window.
        assert_eq!(
            label_from_calls(&calls, t("2026-01-01T00:00:00Z"), h).map(|l| l.fails),
            Some(true)
        );
        // From Jan 2 (the call itself is not after), only Jan 20 is... not within 14 days: none.
        assert_eq!(label_from_calls(&calls, t("2026-01-02T00:00:00Z"), h), None);
        assert_eq!(
            label_from_calls(&calls, t("2026-01-10T00:00:00Z"), h).map(|l| l.fails),
            Some(false)
        );
    }
}
