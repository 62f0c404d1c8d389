//! Making a day's snapshot: what it states read through the `Store` (each subject's last score
//! entry before the day's end, its inclusion proof against the latest tree checkpoint, the
//! declaration that score rated), signed by the reporter key, and kept in the ledger: the signed
//! file as a blob, and a `snapshot` entry naming it. The daemon's writer does it after a
//! checkpoint, for every day that is over and has none yet.

use crate::canonical::canonical_bytes_of;
use crate::clock::{day_of, rfc3339_ms};
use crate::ledger::key::ReporterKey;
use crate::ledger::record::{Record, RecordKind, SnapshotRecord};
use crate::ledger::tlog;
use crate::secret::SecretError;
use crate::store::{NewEntry, ReadEntry, Store, StoreError, SubjectState};

use super::{
    Rated, SIGNED_SNAPSHOT_FORMAT, SNAPSHOT_FORMAT, SignedSnapshot, Snapshot, day_end_ms,
    day_start_ms, signed_message, subject_row,
};

/// At most this many days are made in one pass (a daemon back after a long stop catches up a
/// month per checkpoint, never stalling its writer for all of them at once).
pub(crate) const MAX_DAYS_PER_PASS: usize = 31;

#[derive(Debug, thiserror::Error)]
pub enum MakeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("signing the snapshot: {0}")]
    Sign(#[from] SecretError),
    #[error("the snapshot of {day}: {why}")]
    Inconsistent { day: String, why: String },
}

/// Every snapshot of the ledger, oldest first (one `snapshot` entry per day).
pub(crate) fn snapshots(store: &dyn Store) -> Result<Vec<SnapshotRecord>, StoreError> {
    Ok(store
        .entries_of_kind(&[RecordKind::Snapshot], 0)?
        .into_iter()
        .filter_map(|e| match e.record {
            Record::Snapshot(s) => Some(s),
            _ => None,
        })
        .collect())
}

/// The first day of the ledger (its first entry's), if it has entries.
pub(crate) fn first_day(store: &dyn Store) -> Result<Option<String>, StoreError> {
    Ok(store.entries_page(0, 1)?.first().map(|e| day_of(e.at_ms)))
}

/// The days over at `now_ms` without a snapshot yet, oldest first, at most
/// [`MAX_DAYS_PER_PASS`]: from the day after the newest snapshot's (or the ledger's first day).
pub(crate) fn days_due(store: &dyn Store, now_ms: i64) -> Result<Vec<String>, StoreError> {
    // The newest snapshot alone: this runs at every checkpoint, and a ledger keeps one a day.
    let newest = match store.latest_entry_of_kind(RecordKind::Snapshot)? {
        Some(ReadEntry {
            record: Record::Snapshot(s),
            ..
        }) => Some(s),
        _ => None,
    };
    let from_ms = match newest {
        Some(last) => day_end_ms(&last.day),
        None => first_day(store)?.as_deref().and_then(day_start_ms),
    };
    let Some(mut start) = from_ms else {
        return Ok(Vec::new());
    };
    let mut due = Vec::new();
    while start + super::DAY_MS <= now_ms && due.len() < MAX_DAYS_PER_PASS {
        due.push(day_of(start));
        start += super::DAY_MS;
    }
    Ok(due)
}

/// Makes and keeps the snapshot of every day due at `now_ms`, in order; stops at the first day
/// the latest checkpoint does not cover yet (the next checkpoint's turn). Returns what it kept.
pub(crate) fn make_due(
    store: &dyn Store,
    key: &ReporterKey,
    now_ms: i64,
) -> Result<Vec<SnapshotRecord>, MakeError> {
    let mut made = Vec::new();
    for day in days_due(store, now_ms)? {
        match make(store, key, &day, now_ms)? {
            Some(record) => made.push(record),
            None => break,
        }
    }
    Ok(made)
}

/// Makes, signs and keeps the snapshot of `day` (over at `now_ms`). `None` when the latest tree
/// checkpoint was made before the day ended or does not cover a score entry of the day yet.
pub(crate) fn make(
    store: &dyn Store,
    key: &ReporterKey,
    day: &str,
    now_ms: i64,
) -> Result<Option<SnapshotRecord>, MakeError> {
    let Some(snapshot) = build(store, &key.public_key(), day, now_ms)? else {
        return Ok(None);
    };
    let signature = key.sign(&message(&snapshot, day)?)?;
    let signed = SignedSnapshot {
        format: SIGNED_SNAPSHOT_FORMAT.to_string(),
        public_key: hex::encode(key.public_key()),
        signature: hex::encode(signature),
        snapshot,
    };
    let bytes = canonical_bytes_of(&signed).map_err(|e| MakeError::Inconsistent {
        day: day.to_string(),
        why: e.to_string(),
    })?;
    let sha256 = store.put_blob(&bytes)?;
    let record = SnapshotRecord {
        day: day.to_string(),
        at_ms: now_ms,
        sha256,
        subjects: signed.snapshot.subjects.len() as u64,
        tree_size: tlog_size(&signed.snapshot.checkpoint),
    };
    store.append(vec![NewEntry::plain(
        now_ms,
        Record::Snapshot(record.clone()),
    )])?;
    Ok(Some(record))
}

fn message(snapshot: &Snapshot, day: &str) -> Result<Vec<u8>, MakeError> {
    signed_message(snapshot).map_err(|e| MakeError::Inconsistent {
        day: day.to_string(),
        why: e.to_string(),
    })
}

/// The tree size a checkpoint note states (0 when it does not read, which `build` has ruled out).
fn tlog_size(note: &str) -> u64 {
    crate::ledger::note::note_body(note)
        .and_then(crate::ledger::note::Checkpoint::parse_body)
        .map_or(0, |c| c.size)
}

/// What `day`'s snapshot states, unsigned (see [`make`] for `None`).
pub fn build(
    store: &dyn Store,
    public_key: &[u8; 32],
    day: &str,
    now_ms: i64,
) -> Result<Option<Snapshot>, MakeError> {
    let inconsistent = |why: String| MakeError::Inconsistent {
        day: day.to_string(),
        why,
    };
    let day_end = day_end_ms(day).ok_or_else(|| inconsistent("not a UTC day".into()))?;
    let Some(note) = store.latest_tree_note()? else {
        return Ok(None);
    };
    if note.at_ms < day_end {
        return Ok(None);
    }
    let mut subjects = Vec::new();
    for row in store.subjects()? {
        if row.state == SubjectState::Removed {
            continue;
        }
        let Some(entry) =
            store.latest_subject_entry_before(&row.url, RecordKind::Score, day_end)?
        else {
            continue;
        };
        let Record::Score(score) = entry.record else {
            return Err(inconsistent(format!("entry {} is not a score", entry.seq)));
        };
        let Some(bundle) = store.inclusion_bundle(&row.url, entry.seq - 1, 1)? else {
            return Ok(None);
        };
        if bundle.checkpoint != note.note {
            return Err(inconsistent(
                "a tree checkpoint was signed while the snapshot was read".into(),
            ));
        }
        let Some(proven) = bundle
            .entries
            .into_iter()
            .next()
            .filter(|p| p.index + 1 == entry.seq)
        else {
            // The score entry is newer than the checkpoint: the next one covers it.
            return Ok(None);
        };
        let rated = store
            .declared_through(&row.url, score.through_seq)?
            .map(|d| Rated {
                price_usd: d.price_usd().map(|u| u.to_string()),
                pay_to: d.pay_to,
                network: d.network,
                asset: d.asset,
                amount: d.amount,
            });
        subjects.push(subject_row(&score, rated, proven));
    }
    subjects.sort_by(|a, b| a.url.cmp(&b.url));
    let mut rubrics: Vec<String> = subjects.iter().map(|s| s.rubric_sha256.clone()).collect();
    rubrics.sort();
    rubrics.dedup();
    Ok(Some(Snapshot {
        format: SNAPSHOT_FORMAT.to_string(),
        day: day.to_string(),
        made_at: rfc3339_ms(now_ms),
        origin: tlog::origin(public_key),
        checkpoint: note.note,
        verifier_key: tlog::note_key(public_key).verifier_key(),
        rubrics,
        subjects,
    }))
}
