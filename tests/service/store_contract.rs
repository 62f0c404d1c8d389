//! The `Store` contract, run against both stores: SQLite in a state directory and PostgreSQL (a
//! throwaway cluster, or `X402_PROBE_TEST_POSTGRES`). One script of appends with their index rows
//! (declarations, scores and headlines, folded states, run ids, webhook events), subjects, blobs,
//! checkpoints and proofs; each result checked against what the script wrote, and the whole
//! transcript of one store equal to the other's (the same entries seal to the same bytes, so
//! hashes, roots and proofs agree too).

use std::fmt::Write as _;

use x402_lab::postgres::Postgres;
use x402_probe::checks::history::Declared;
use x402_probe::ledger::key::ReporterKey;
use x402_probe::ledger::record::{
    ControlRecord, CorrectionRecord, Record, RecordKind, ScoreRecord,
};
use x402_probe::ledger::{proof, tlog};
use x402_probe::rubric::Verdict;
use x402_probe::store::postgres::PgLedger;
use x402_probe::store::{DayRow, StateRow};
use x402_probe::store::{
    Index, NewEntry, NewOutboxEvent, OutboxState, OutboxUpdate, ScoreRow, SqliteStore, Store,
    SubjectRow, SubjectState,
};
use x402_probe::webhook::EventKind;

const T0: i64 = 1_790_000_000_000;
const A: &str = "https://a.example/x";
const B: &str = "https://b.example/y";

fn control(n: i64) -> NewEntry {
    NewEntry::plain(
        T0 + n,
        Record::Control(ControlRecord {
            url: "https://control.example/".into(),
            at_ms: T0 + n,
            ok: n % 3 != 0,
            detail: format!("control {n}"),
        }),
    )
}

fn declared(at_ms: i64, amount: &str) -> Declared {
    Declared {
        at_ms,
        fingerprint: format!("fp-{amount}"),
        network: Some("eip155:8453".into()),
        asset: Some("0xasset".into()),
        amount: Some(amount.into()),
        pay_to: Some("0xpayto".into()),
        // A signed offer's signer rides in the stored declaration (H3 reads it back).
        offer_signer: (amount == "2000").then(|| "did:key:z6Mk-lab".to_string()),
    }
}

/// A correction about `subject` carrying `index` (a declaration, a run id, a state, an event).
fn about(subject: &str, n: i64, index: Index) -> NewEntry {
    NewEntry {
        at_ms: T0 + n,
        record: Record::Correction(CorrectionRecord {
            of_seq: 0,
            subject: Some(subject.into()),
            at_ms: T0 + n,
            reason: "contract".into(),
            detail: serde_json::json!({ "n": n }),
        })
        .into(),
        index: Some(Box::new(move |_| index)),
    }
}

/// A score entry of `subject` publishing `document`, with its row.
fn score(subject: &str, n: i64, document: &[u8]) -> NewEntry {
    let as_of_ms = T0 + n;
    let row = ScoreRow {
        subject: subject.into(),
        day: "2026-09-21".into(),
        as_of_ms,
        seq: 0,
        document: document.to_vec(),
    };
    NewEntry {
        at_ms: as_of_ms,
        record: Record::Score(ScoreRecord {
            subject: subject.into(),
            as_of_ms,
            through_seq: 0,
            horizon_days: 90,
            rubric_sha256: "0".repeat(64),
            inputs_sha256: "0".repeat(64),
            document_sha256: x402_probe::evidence::sha256_hex(document),
            score: 50.0,
            capped_score: 50.0,
            band: [40.0, 60.0],
            grade: None,
            verdict: Verdict::Caution,
            population_sha256: None,
            method: Default::default(),
            read: None,
        })
        .into(),
        index: Some(Box::new(move |_| Index {
            score: Some(row),
            ..Index::default()
        })),
    }
}

fn subject_row(url: &str, n: i64) -> SubjectRow {
    SubjectRow {
        failures: n as u32,
        last_run_ms: Some(T0 + n),
        revision: (n % 2 == 0).then(|| format!("r{n}")),
        ..SubjectRow::new_active(url.into(), "weather".into(), "config".into(), T0)
    }
}

/// The script: every call of the trait, each result checked and written to the transcript.
fn exercise(store: &dyn Store, key: &ReporterKey) -> String {
    let mut out = String::new();
    let mut say = |what: &str, value: &dyn std::fmt::Debug| {
        writeln!(out, "{what}: {value:?}").unwrap();
    };
    assert_eq!(store.head().unwrap(), (0, [0; 32]));
    assert_eq!(store.checkpoint(key, T0).unwrap(), None, "nothing to sign");

    let mut seqs = store.append((0..5).map(control).collect()).unwrap();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
    let event = NewOutboxEvent {
        event_id: "ev-1".into(),
        webhook: "https://hooks.example/in".into(),
        kind: EventKind::VerdictChanged,
        created_ms: T0,
        body: b"{\"event\":1}".to_vec(),
    };
    let state = StateRow {
        subject: A.into(),
        through_seq: 6,
        sha256: [7; 32],
        body: b"{\"state\":1}".to_vec(),
        days: vec![
            DayRow {
                day: 20_000,
                sha256: [1; 32],
                body: b"day 1".to_vec(),
            },
            DayRow {
                day: 20_001,
                sha256: [2; 32],
                body: b"day 2".to_vec(),
            },
        ],
        days_from: i64::MIN,
    };
    seqs = store
        .append(vec![
            about(
                A,
                10,
                Index {
                    declared: Some((
                        T0 + 10,
                        serde_json::to_vec(&declared(T0 + 10, "1000")).unwrap(),
                    )),
                    run_id: Some("run-a-1".into()),
                    state: Some(state.clone()),
                    outbox: vec![event.clone()],
                    ..Index::default()
                },
            ),
            about(
                B,
                11,
                Index {
                    declared: Some((
                        T0 + 11,
                        serde_json::to_vec(&declared(T0 + 11, "5")).unwrap(),
                    )),
                    ..Index::default()
                },
            ),
            score(A, 12, b"{\"document\":\"a\"}"),
            about(
                A,
                13,
                Index {
                    declared: Some((
                        T0 + 13,
                        serde_json::to_vec(&declared(T0 + 13, "2000")).unwrap(),
                    )),
                    // Day 20,000 leaves the window; day 20,001 is rewritten.
                    state: Some(StateRow {
                        through_seq: 9,
                        days: vec![DayRow {
                            day: 20_001,
                            sha256: [3; 32],
                            body: b"day 2 again".to_vec(),
                        }],
                        days_from: 20_001,
                        ..state.clone()
                    }),
                    ..Index::default()
                },
            ),
            score(A, 14, b"{\"document\":\"a2\"}"),
        ])
        .unwrap();
    assert_eq!(seqs, vec![6, 7, 8, 9, 10]);
    let (head, hash) = store.head().unwrap();
    assert_eq!(head, 10);
    say("head", &hex::encode(hash));

    // Reads of entries.
    let of_a = store.subject_entries(A, &[], 0).unwrap();
    assert_eq!(
        of_a.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [6, 8, 9, 10]
    );
    let corrections = store
        .subject_entries(A, &[RecordKind::Correction], 6)
        .unwrap();
    assert_eq!(corrections.iter().map(|e| e.seq).collect::<Vec<_>>(), [9]);
    say("subject entries", &of_a);
    let stored = store.subject_stored_entries(A, 6, 2).unwrap();
    assert_eq!(stored.iter().map(|e| e.seq).collect::<Vec<_>>(), [8, 9]);
    say("stored entries", &stored);
    let latest = store.latest_subject_entry(A, RecordKind::Score).unwrap();
    assert_eq!(latest.as_ref().map(|e| e.seq), Some(10));
    assert_eq!(
        store
            .latest_subject_entry_before(A, RecordKind::Score, T0 + 14)
            .unwrap()
            .map(|e| e.seq),
        Some(8)
    );
    assert_eq!(
        store
            .latest_entry_of_kind(RecordKind::Control)
            .unwrap()
            .map(|e| e.seq),
        Some(5)
    );
    assert_eq!(
        store.latest_entry_of_kind(RecordKind::Outage).unwrap(),
        None
    );
    let at = store.entries_at(&[9, 2, 42]).unwrap();
    assert_eq!(at.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 9]);
    let scores = store.entries_of_kind(&[RecordKind::Score], 8).unwrap();
    assert_eq!(scores.iter().map(|e| e.seq).collect::<Vec<_>>(), [10]);
    assert_eq!(store.entries_of_kind(&[], 0).unwrap().len(), 10);
    let page = store.entries_page(3, 4).unwrap();
    assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), [4, 5, 6, 7]);
    let mut scanned = Vec::new();
    store
        .scan(7, &mut |e| {
            scanned.push((e.seq, e.kind, e.subject.clone(), hex::encode(e.hash)));
            Ok(())
        })
        .unwrap();
    assert_eq!(scanned.len(), 3);
    say("scan", &scanned);

    // Index rows.
    assert_eq!(
        store.run_by_id("run-a-1").unwrap().map(|e| e.seq),
        Some(6),
        "the entry its index row names"
    );
    assert_eq!(store.run_by_id("run-none").unwrap(), None);
    let decl = store.declared(A, T0 + 11).unwrap();
    assert_eq!(decl, vec![declared(T0 + 13, "2000")]);
    assert_eq!(
        store.latest_declared(A).unwrap(),
        Some(declared(T0 + 13, "2000"))
    );
    assert_eq!(
        store.declared_before(A, 9).unwrap(),
        Some(declared(T0 + 10, "1000"))
    );
    assert_eq!(
        store.declared_through(A, 9).unwrap(),
        Some(declared(T0 + 13, "2000"))
    );
    assert_eq!(
        store.latest_declared("https://none.example/").unwrap(),
        None
    );
    let kept = store.subject_state(A).unwrap().expect("a state");
    assert_eq!(kept.through_seq, 9);
    assert_eq!(
        kept.days
            .iter()
            .map(|d| (d.day, d.sha256[0]))
            .collect::<Vec<_>>(),
        [(20_001, 3)]
    );
    say("state", &kept);
    assert_eq!(store.subject_state(B).unwrap(), None);

    // Scores: the day's row is the newest entry's, checked against the ledger.
    let row = store.latest_score(A).unwrap().expect("a score row");
    assert_eq!(
        (row.seq, row.document.as_slice()),
        (10, &b"{\"document\":\"a2\"}"[..])
    );
    assert_eq!(store.daily_scores(A).unwrap(), vec![row.clone()]);
    let (with, headline) = store.latest_score_with_headline(A).unwrap().unwrap();
    assert_eq!(
        (with, headline),
        (row, None),
        "a document that is no score keeps no headline"
    );

    // Subjects, shared: written, read, shown, and in the start's one read.
    store
        .put_subjects(&[subject_row(A, 2), subject_row(B, 3)])
        .unwrap();
    store
        .put_subject(&SubjectRow {
            state: SubjectState::Paused,
            ..subject_row(B, 4)
        })
        .unwrap();
    let subjects = store.subjects().unwrap();
    assert_eq!(subjects.len(), 2);
    assert_eq!(subjects[1].state, SubjectState::Paused);
    assert_eq!(store.subject(A).unwrap(), Some(subject_row(A, 2)));
    assert_eq!(store.subject("https://none.example/").unwrap(), None);
    let mut shown = Vec::new();
    store
        .each_subject_shown(&mut |s| {
            shown.push((s.url.to_string(), s.state, s.revision.map(str::to_string)))
        })
        .unwrap();
    say("shown", &shown);
    let mut starts = Vec::new();
    store.start_rows(&mut |r| starts.push(r)).unwrap();
    assert_eq!(starts.len(), 2);
    assert_eq!(starts[0].row, Some((10, T0 + 14)));
    assert_eq!(starts[0].newest.as_ref().map(|e| e.seq), Some(10));
    assert_eq!(starts[0].declared, Some(declared(T0 + 13, "2000")));
    assert_eq!((starts[1].row, starts[1].newest.is_none()), (None, true));
    say("start rows", &starts);

    // Blobs.
    let sha = store.put_blob(&[42u8; 5000]).unwrap();
    let key_bytes: [u8; 32] = hex::decode(&sha).unwrap().try_into().unwrap();
    assert_eq!(store.blob(&key_bytes).unwrap(), Some(vec![42u8; 5000]));
    assert_eq!(store.blob(&[9; 32]).unwrap(), None);

    // Outbox: pending, due, retried, delivered.
    let rows = store.outbox_rows().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].state, &rows[0].event),
        (OutboxState::Pending, &event)
    );
    assert_eq!(store.outbox_counts().unwrap(), (1, 0));
    assert_eq!(store.outbox_next_due().unwrap(), Some(0));
    let due = store.outbox_due(T0, 10).unwrap();
    store
        .outbox_update(
            due[0].id,
            &OutboxUpdate::Retry {
                attempts: 1,
                next_attempt_ms: T0 + 5000,
                error: "503".into(),
            },
        )
        .unwrap();
    assert!(store.outbox_due(T0, 10).unwrap().is_empty());
    assert_eq!(store.outbox_next_due().unwrap(), Some(T0 + 5000));
    store
        .outbox_update(
            due[0].id,
            &OutboxUpdate::Delivered {
                attempts: 2,
                at_ms: T0 + 6000,
            },
        )
        .unwrap();
    let rows = store.outbox_rows().unwrap();
    assert_eq!(
        (
            rows[0].state,
            rows[0].attempts,
            rows[0].last_error.as_deref()
        ),
        (OutboxState::Delivered, 2, Some("503"))
    );
    assert_eq!(store.outbox_counts().unwrap(), (0, 0));
    assert_eq!(store.outbox_next_due().unwrap(), None);
    say("outbox", &rows);

    // Checkpoints, tree checkpoints and proofs.
    assert_eq!(
        store.inclusion_bundle(A, 0, 10).unwrap(),
        None,
        "not signed yet"
    );
    let cp = store.checkpoint(key, T0 + 20).unwrap().expect("signed");
    assert_eq!(cp.seq, 10);
    assert_eq!(
        store.checkpoint(key, T0 + 21).unwrap(),
        None,
        "signed already"
    );
    store.append(vec![control(30)]).unwrap();
    store
        .checkpoint(key, T0 + 31)
        .unwrap()
        .expect("signed again");
    assert_eq!(store.checkpoints().unwrap().len(), 2);
    assert_eq!(store.last_checkpoint().unwrap().map(|c| c.seq), Some(11));
    let notes = store.tree_notes().unwrap();
    assert_eq!(notes.iter().map(|n| n.size).collect::<Vec<_>>(), [10, 11]);
    assert_eq!(store.latest_tree_note().unwrap().as_ref(), notes.last());
    say("checkpoints", &store.checkpoints().unwrap());
    let bundle = store.inclusion_bundle(A, 0, 10).unwrap().expect("a bundle");
    let verified = proof::verify(&bundle, &tlog::note_key(&key.public_key())).unwrap();
    say("bundle", &bundle);
    say("verified", &verified);
    let consistency = store.consistency_proof(5, 11).unwrap();
    assert!(!consistency.is_empty());
    say("consistency", &consistency);
    assert!(store.consistency_proof(5, 12).is_err(), "beyond the head");

    let summary = store.verify(None, true).unwrap();
    assert_eq!(
        (summary.entries, summary.signed_through, summary.score_rows),
        (11, 11, 1)
    );
    assert_eq!(summary.signed_by, Some(hex::encode(key.public_key())));
    say("verify", &summary);
    out
}

#[test]
fn the_store_contract_holds_for_sqlite_and_postgres_alike() {
    let pg = Postgres::start().expect("PostgreSQL starts");
    let url = pg.fresh_database("contract").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = ReporterKey::generate(&dir.path().join("reporter.key")).unwrap();
    let sqlite = SqliteStore::open(&dir.path().join("state")).unwrap();
    let postgres = PgLedger::open(&url, "contract", key.public_key()).unwrap();
    let on_sqlite = exercise(&sqlite, &key);
    let on_postgres = exercise(&postgres, &key);
    // Line by line, so a difference is named.
    for (s, p) in on_sqlite.lines().zip(on_postgres.lines()) {
        assert_eq!(s, p, "SQLite and PostgreSQL differ");
    }
    assert_eq!(on_sqlite.lines().count(), on_postgres.lines().count());
}
