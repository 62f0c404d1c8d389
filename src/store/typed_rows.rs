//! Stored columns and bodies that hold a closed set (an entry's kind, a score's verdict, an outbox
//! row's event kind): text that names none of its values is an error naming the row when read,
//! never a default.

use super::*;
use crate::ledger::record::{ControlRecord, ScoreRecord};
use crate::rubric::Verdict;
use crate::store::event_kind::EventKind;

fn control(at_ms: i64) -> NewEntry {
    NewEntry::plain(
        at_ms,
        Record::Control(ControlRecord {
            url: "https://control.example/".into(),
            at_ms,
            ok: true,
            detail: format!("probe at {at_ms}"),
        }),
    )
}

fn score(at_ms: i64, verdict: Verdict) -> NewEntry {
    NewEntry::plain(
        at_ms,
        Record::Score(ScoreRecord {
            subject: "https://a.example/x".into(),
            as_of_ms: at_ms,
            through_seq: 0,
            horizon_days: 90,
            rubric_sha256: "0".repeat(64),
            inputs_sha256: "0".repeat(64),
            document_sha256: "0".repeat(64),
            score: 50.0,
            capped_score: 50.0,
            band: [40.0, 60.0],
            grade: None,
            verdict,
            population_sha256: None,
            method: Default::default(),
            read: None,
        }),
    )
}

/// A fresh ledger and a second connection to its file, to write what this build never would.
fn ledger() -> (tempfile::TempDir, SqliteStore, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let store = SqliteStore::open(&state).unwrap();
    let raw = rusqlite::Connection::open(state.join(sqlite::STORE_FILE)).unwrap();
    (dir, store, raw)
}

#[test]
fn an_entry_whose_kind_column_names_no_record_kind_is_named() {
    let (_dir, store, raw) = ledger();
    Store::append(&store, (1..=3).map(control).collect()).unwrap();
    let mut kinds = Vec::new();
    Store::scan(&store, 0, &mut |e| {
        kinds.push(e.kind);
        Ok(())
    })
    .unwrap();
    assert_eq!(kinds, vec![RecordKind::Control; 3]);

    raw.execute("UPDATE entry SET kind = 'contrl' WHERE seq = 2", [])
        .unwrap();
    let err = Store::scan(&store, 0, &mut |_| Ok(())).unwrap_err();
    assert!(matches!(&err, StoreError::Broken(b) if b.seq == 2), "{err}");
    assert!(
        err.to_string()
            .contains("ledger entry 2: its kind column \"contrl\" names no record kind"),
        "{err}"
    );
    let err = Store::verify(&store, None, true).unwrap_err();
    assert!(err.to_string().contains("ledger entry 2"), "{err}");
}

#[test]
fn a_score_entry_naming_an_unknown_verdict_does_not_read() {
    let (_dir, store, raw) = ledger();
    Store::append(&store, vec![score(1, Verdict::Caution)]).unwrap();
    let read = store.entries_of_kind(&[RecordKind::Score], 0).unwrap();
    assert!(matches!(&read[0].record, Record::Score(s) if s.verdict == Verdict::Caution));

    let body: Vec<u8> = raw
        .query_row("SELECT body FROM entry WHERE seq = 1", [], |r| r.get(0))
        .unwrap();
    let text = String::from_utf8(body).unwrap();
    assert!(text.contains("\"verdict\":\"caution\""), "{text}");
    let edited = text.replace("\"verdict\":\"caution\"", "\"verdict\":\"fine\"");
    raw.execute(
        "UPDATE entry SET body = ?1 WHERE seq = 1",
        [edited.into_bytes()],
    )
    .unwrap();
    let err = store.entries_of_kind(&[RecordKind::Score], 0).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("entry 1 does not parse") && text.contains("unknown variant `fine`"),
        "{text}"
    );
}

#[test]
fn outbox_rows_read_back_their_event_kind_and_an_unknown_one_is_named() {
    let (_dir, store, raw) = ledger();
    let insert = |event_id: &str, kind: &str| {
        raw.execute(
            "INSERT INTO webhook_outbox (event_id, webhook, kind, created_ms, body, state,
                 attempts, next_attempt_ms)
             VALUES (?1, 'http://127.0.0.1:9/hook', ?2, 0, x'7b7d', 'pending', 0, 0)",
            [event_id, kind],
        )
        .unwrap();
    };
    for kind in EventKind::ALL {
        insert(&format!("evt_{}", kind.as_str()), kind.as_str());
    }
    let kinds: Vec<EventKind> = store
        .outbox_rows()
        .unwrap()
        .into_iter()
        .map(|r| r.event.kind)
        .collect();
    assert_eq!(kinds, EventKind::ALL.to_vec());

    insert("evt_odd", "verdict_flipped");
    for err in [
        store.outbox_rows().unwrap_err(),
        store.outbox_due(i64::MAX, 100).unwrap_err(),
    ] {
        assert!(
            matches!(&err, StoreError::Corrupt { why, .. }
                if why == "outbox row 4: unknown event kind \"verdict_flipped\""),
            "{err}"
        );
    }
}

#[test]
fn record_kinds_read_back_as_written() {
    for kind in RecordKind::ALL {
        assert_eq!(RecordKind::parse(kind.as_str()), Some(kind));
        let json = serde_json::to_string(&kind).unwrap();
        assert_eq!(json, format!("\"{}\"", kind.as_str()));
        assert_eq!(serde_json::from_str::<RecordKind>(&json).unwrap(), kind);
    }
    assert_eq!(RecordKind::parse("Run"), None);
}
