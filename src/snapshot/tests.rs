//! A snapshot made from a real store (SQLite in a temporary directory, the reporter key in a
//! file) verifies offline with the public key alone; a changed byte, a re-signed lie and another
//! key do not.

use super::make::{days_due, make};
use super::*;
use crate::ledger::key::ReporterKey;
use crate::ledger::record::ScoreRecord;
use crate::rubric::Verdict as RubricVerdict;
use crate::store::{Index, NewEntry, ScoreRow, SqliteStore, Store, SubjectRow, SubjectState};

const HOUR: i64 = 3_600_000;
/// A UTC midnight.
const DAY0: i64 = 20_400 * DAY_MS;

/// A score entry with its score row (a document standing for the real one), as the daemon
/// writes them.
fn score(url: &str, as_of_ms: i64, verdict: RubricVerdict, points: f64) -> NewEntry {
    let document = format!("{{\"subject\":\"{url}\",\"as_of_ms\":{as_of_ms}}}").into_bytes();
    let row = ScoreRow {
        subject: url.into(),
        day: crate::clock::day_of(as_of_ms),
        as_of_ms,
        seq: 0,
        document: document.clone(),
    };
    let mut entry = NewEntry::plain(
        as_of_ms,
        Record::Score(ScoreRecord {
            subject: url.into(),
            as_of_ms,
            through_seq: 1,
            horizon_days: 30,
            rubric_sha256: "ab".repeat(32),
            inputs_sha256: "cd".repeat(32),
            document_sha256: crate::evidence::sha256_hex(&document),
            score: points,
            capped_score: points,
            band: [points - 3.5, points + 2.25],
            grade: Some("B".into()),
            verdict,
            population_sha256: None,
            method: crate::score::Method::V3,
            read: None,
        }),
    );
    entry.index = Some(Box::new(move |seq| Index {
        score: Some(ScoreRow { seq, ..row }),
        ..Index::default()
    }));
    entry
}

fn subject(url: &str, state: SubjectState) -> SubjectRow {
    SubjectRow {
        url: url.into(),
        category: "weather".into(),
        source: "config".into(),
        state,
        added_ms: DAY0,
        next_free_ms: DAY0,
        next_paid_ms: DAY0,
        failures: 0,
        last_run_ms: None,
        last_paid_ms: None,
        revision: None,
    }
}

fn url(name: &str) -> String {
    format!("https://{name}.example/weather")
}

#[test]
fn a_snapshot_made_from_the_store_verifies_offline_and_any_change_fails() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let key = ReporterKey::generate(&dir.path().join("reporter.key")).unwrap();
    let public = key.public_key();
    for (name, state) in [
        ("a", SubjectState::Active),
        ("b", SubjectState::Paused),
        ("c", SubjectState::Removed),
        ("d", SubjectState::Active),
    ] {
        store.put_subject(&subject(&url(name), state)).unwrap();
    }
    store
        .append(vec![
            score(&url("a"), DAY0 + HOUR, RubricVerdict::Caution, 61.5),
            score(&url("b"), DAY0 + 5 * HOUR, RubricVerdict::Avoid, 12.0),
            score(&url("c"), DAY0 + 6 * HOUR, RubricVerdict::Ok, 90.0),
            score(&url("a"), DAY0 + 20 * HOUR, RubricVerdict::Ok, 88.25),
        ])
        .unwrap();
    store.checkpoint(&key, DAY0 + 21 * HOUR).unwrap();
    // After the day: a later score of a, d's first.
    store
        .append(vec![
            score(&url("a"), DAY0 + DAY_MS + HOUR, RubricVerdict::Avoid, 5.0),
            score(&url("d"), DAY0 + DAY_MS + HOUR, RubricVerdict::Ok, 95.0),
        ])
        .unwrap();
    let now = DAY0 + DAY_MS + 2 * HOUR;
    let day = crate::clock::day_of(DAY0);
    assert_eq!(days_due(&store, now).unwrap(), vec![day.clone()]);
    // The only checkpoint was made before the day ended: nothing yet.
    assert_eq!(make(&store, &key, &day, now).unwrap(), None);
    store.checkpoint(&key, now).unwrap();
    let record = make(&store, &key, &day, now).unwrap().expect("made");
    assert_eq!(record.subjects, 2);
    assert!(days_due(&store, now).unwrap().is_empty());
    let sha: [u8; 32] = hex::decode(&record.sha256).unwrap().try_into().unwrap();
    let bytes = store.blob(&sha).unwrap().expect("kept as a blob");

    let verified = verify(&bytes, &public).expect("verifies");
    let rows = &verified.snapshot.subjects;
    assert_eq!(
        rows.iter().map(|r| r.url.as_str()).collect::<Vec<_>>(),
        [url("a"), url("b")],
        "removed c and d (scored only after the day) are not listed"
    );
    assert_eq!(rows[0].verdict, Verdict::Ok, "a's last score of the day");
    assert_eq!(rows[0].score, 88.25);
    assert_eq!(rows[1].verdict, Verdict::Avoid);
    assert_eq!(verified.snapshot.rubrics, vec!["ab".repeat(32)]);
    assert!(verified.checkpoint.time * 1000 >= DAY0 + DAY_MS);
    // The ledger's deep verification finds the blob the entry names.
    store.verify(None, true).expect("the ledger verifies");

    // Any byte changed: refused (sampled across the whole file).
    let step = (bytes.len() / 300).max(1);
    for at in (0..bytes.len()).step_by(step) {
        let mut tampered = bytes.clone();
        tampered[at] ^= 0x01;
        assert!(
            verify(&tampered, &public).is_err(),
            "byte {at} ({:?}) changed verifies",
            bytes[at] as char
        );
    }
    // The same JSON in other bytes (a character escaped): what it says is unchanged and still
    // signed, but the file is not the one signed, and a changed byte must never pass.
    let text = String::from_utf8(bytes.clone()).unwrap();
    let escaped = text.replacen("\"day\":\"2", "\"day\":\"\\u0032", 1);
    assert_ne!(escaped, text);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&escaped).unwrap(),
        serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()
    );
    assert_eq!(
        verify(escaped.as_bytes(), &public).unwrap_err(),
        SnapshotError::NotCanonical
    );
    // Another key.
    let other = ReporterKey::generate(&dir.path().join("other.key")).unwrap();
    assert!(matches!(
        verify(&bytes, &other.public_key()),
        Err(SnapshotError::OtherKey { .. })
    ));

    // The key's holder re-signing a better verdict than its ledger entry: the signature holds,
    // the proven entry contradicts it.
    let resign = |snapshot: Snapshot| -> Vec<u8> {
        let signature = key.sign(&signed_message(&snapshot).unwrap()).unwrap();
        canonical_bytes_of(&SignedSnapshot {
            format: SIGNED_SNAPSHOT_FORMAT.into(),
            public_key: hex::encode(public),
            signature: hex::encode(signature),
            snapshot,
        })
        .unwrap()
    };
    let mut lie = verified.snapshot.clone();
    lie.subjects[1].verdict = Verdict::Ok;
    assert!(matches!(
        verify(&resign(lie), &public),
        Err(SnapshotError::Subject { .. })
    ));
    let mut lie = verified.snapshot.clone();
    lie.subjects[1].rated = Some(Rated {
        pay_to: Some("0x0000000000000000000000000000000000000001".into()),
        network: None,
        asset: None,
        amount: None,
        price_usd: None,
    });
    verify(&resign(lie), &public).expect("rated is signed, not in the entry");
    // A day the checkpoint does not follow, a subject listed twice.
    let mut earlier = verified.snapshot.clone();
    earlier.day = crate::clock::day_of(DAY0 + DAY_MS);
    assert!(matches!(
        verify(&resign(earlier), &public),
        Err(SnapshotError::Checkpoint(_) | SnapshotError::Subject { .. })
    ));
    let mut twice = verified.snapshot.clone();
    twice.subjects.push(twice.subjects[0].clone());
    assert!(matches!(
        verify(&resign(twice), &public),
        Err(SnapshotError::Subject { .. })
    ));
    assert!(matches!(
        verify(b"{", &public),
        Err(SnapshotError::NotJson(_))
    ));
}

#[test]
fn days_are_read_in_one_spelling() {
    assert_eq!(day_start_ms("2026-12-01"), Some(1_796_083_200_000));
    assert_eq!(day_end_ms("2026-12-01"), Some(1_796_083_200_000 + DAY_MS));
    for bad in [
        "2026-12-1",
        "2026-13-01",
        "+2026-12-01",
        "20261201",
        "2026-12-01T00",
        "",
    ] {
        assert_eq!(day_start_ms(bad), None, "{bad}");
    }
}
