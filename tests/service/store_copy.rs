//! `x402-probe store copy --from DIR --to URL` on a ledger the daemon wrote (six simulated hours
//! against the lab: runs with their observation blobs, scores, checkpoints and tree checkpoints),
//! into a real PostgreSQL (a throwaway cluster, or `X402_PROBE_TEST_POSTGRES`): both verify, the
//! copy reads back entry for entry as the ledger does (runs' results derived again from their
//! blobs), a second copy into the same vantage is refused, and a broken ledger copies nothing.

use crate::daemon_support;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use daemon_support::*;
use x402_lab::postgres::Postgres;
use x402_probe::clock::ManualClock;
use x402_probe::ledger::key::ReporterKey;
use x402_probe::ledger::record::Record;
use x402_probe::store::copy::default_vantage;
use x402_probe::store::postgres::PgLedger;
use x402_probe::store::{LedgerLog, SqliteStore};

fn store_copy(state: &Path, url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .args(["store", "copy", "--from"])
        .arg(state)
        .args(["--quiet", "--to", url])
        .output()
        .expect("the binary runs")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn a_daemon_ledger_copied_into_postgres_verifies_and_reads_back_alike() {
    let pg = Postgres::start().expect("PostgreSQL starts");
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let lab = lab(&["honest-v2", "honest-v1"]).await;
        let start = start_ms();
        let clock = Arc::new(ManualClock::at_ms(start));
        let mut settings = Settings::new(&state);
        settings.subjects = lab.endpoints.iter().map(|e| e.url.clone()).collect();
        settings.pay = false;
        settings.free_every_secs = 3600;
        run_simulated(&config_text(&lab, &settings), clock, start + 6 * HOUR).await;
    });
    drop(runtime);
    let key = ReporterKey::from_key_file(&state.join("reporter.key")).unwrap();

    let url = pg.fresh_database("copy").unwrap();
    let out = store_copy(&state, &url);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("both verify"), "{said}");
    assert!(said.contains(&default_vantage(&key.public_key())), "{said}");

    // Entry for entry, read back as every reader reads them (runs derived from their blobs).
    let sqlite = SqliteStore::open_read_only(&state.join("ledger.sqlite")).unwrap();
    let copy = PgLedger::open(&url, &default_vantage(&key.public_key()), key.public_key()).unwrap();
    let ours = LedgerLog::entries_page(&sqlite, 0, usize::MAX).unwrap();
    let theirs = copy.entries_page(0, usize::MAX).unwrap();
    let runs = ours
        .iter()
        .filter(|e| matches!(e.record, Record::Run(_)))
        .count();
    let scores = ours
        .iter()
        .filter(|e| matches!(e.record, Record::Score(_)))
        .count();
    assert!(runs >= 10 && scores >= 10, "{runs} runs, {scores} scores");
    assert_eq!(ours.len(), theirs.len());
    assert!(ours == theirs, "the copy reads back as the ledger does");
    assert_eq!(LedgerLog::head(&sqlite).unwrap(), copy.head().unwrap());
    // The whole store: subjects, score rows, folded states and declarations read alike.
    {
        use x402_probe::store::Store;
        let subjects = Store::subjects(&sqlite).unwrap();
        assert!(!subjects.is_empty());
        assert_eq!(subjects, Store::subjects(&copy).unwrap());
        for s in &subjects {
            assert_eq!(
                Store::daily_scores(&sqlite, &s.url).unwrap(),
                Store::daily_scores(&copy, &s.url).unwrap()
            );
            assert!(Store::latest_score(&copy, &s.url).unwrap().is_some());
            assert_eq!(
                Store::subject_state(&sqlite, &s.url).unwrap(),
                Store::subject_state(&copy, &s.url).unwrap()
            );
            assert_eq!(
                Store::declared(&sqlite, &s.url, 0).unwrap(),
                Store::declared(&copy, &s.url, 0).unwrap()
            );
        }
        assert_eq!(
            Store::outbox_rows(&sqlite).unwrap(),
            Store::outbox_rows(&copy).unwrap()
        );
        let deep = Store::verify(&copy, None, true).unwrap();
        assert!(deep.score_rows >= subjects.len() as u64, "{deep:?}");
    }
    // Every score recomputes from the copy.
    let out = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .args(["recompute", "--quiet", "--postgres", &url])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The copy goes on as the vantage's log: an append and a checkpoint by its key verify.
    copy.append(vec![x402_probe::store::NewEntry::plain(
        1,
        Record::Control(x402_probe::ledger::record::ControlRecord {
            url: "https://control.example/".into(),
            at_ms: 1,
            ok: true,
            detail: "after the copy".into(),
        }),
    )])
    .unwrap();
    copy.checkpoint(&key, start_ms()).unwrap();
    let summary = copy.verify(None, true).unwrap();
    assert_eq!(summary.entries, ours.len() as u64 + 1);
    assert_eq!(summary.signed_through, summary.entries);

    // Again into the same vantage: refused, nothing written.
    let out = store_copy(&state, &url);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("already has"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(copy.head().unwrap().0, ours.len() as u64 + 1);

    // A ledger with an edited entry: named, and nothing copied into a new database.
    let broken = dir.path().join("broken");
    std::fs::create_dir(&broken).unwrap();
    std::fs::copy(state.join("ledger.sqlite"), broken.join("ledger.sqlite")).unwrap();
    {
        let conn = rusqlite::Connection::open(broken.join("ledger.sqlite")).unwrap();
        // One byte more in a run entry: its hash no longer holds.
        conn.execute_batch(
            "UPDATE entry SET body = CAST(body || x'20' AS BLOB)
             WHERE seq = (SELECT MIN(seq) FROM entry WHERE kind = 'run')",
        )
        .unwrap();
    }
    let fresh = pg.fresh_database("broken").unwrap();
    let out = store_copy(&broken, &fresh);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("does not verify"),
        "{}",
        text(&out.stderr)
    );
    // Nothing there.
    let other = PgLedger::open(
        &fresh,
        &default_vantage(&key.public_key()),
        key.public_key(),
    )
    .unwrap();
    assert_eq!(other.head().unwrap().0, 0);

    // No ledger there: a usage error.
    let out = store_copy(&dir.path().join("nowhere"), &fresh);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}
