//! `x402-probe ledger verify` and `recompute --ledger` on a real ledger the daemon wrote (one
//! simulated day against the lab), then tampered with directly in SQLite: a changed, a removed and
//! a reordered entry are each named; an edited score no longer recomputes.

mod daemon_support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use daemon_support::*;
use x402_probe::clock::ManualClock;

fn verify(state: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .args(["ledger", "verify", "--state-dir"])
        .arg(state)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn tampered(original: &Path, name: &str, sql: &str) -> std::path::PathBuf {
    let dir = original.parent().unwrap().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(original.join("ledger.sqlite"), dir.join("ledger.sqlite")).unwrap();
    let conn = rusqlite_open(&dir.join("ledger.sqlite"));
    conn.execute_batch(sql).unwrap();
    dir
}

fn rusqlite_open(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_a_changed_removed_or_reordered_entry() {
    let lab = lab(&["honest-v2", "honest-v1"]).await;
    let start = start_ms();
    let clock = Arc::new(ManualClock::at_ms(start));
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let mut settings = Settings::new(&state);
    settings.subjects = lab.endpoints.iter().map(|e| e.url.clone()).collect();
    settings.pay = false;
    settings.free_every_secs = 3600;
    let text = config_text(&lab, &settings);
    run_simulated(&text, clock, start + DAY).await;
    // Consolidate the WAL so copies of the file hold everything.
    rusqlite_open(&state.join("ledger.sqlite"))
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .unwrap();

    let (code, text) = verify(&state);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("checkpoints"), "{text}");
    let out = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .args(["recompute", "--ledger"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A changed byte in entry 10.
    let changed = tampered(
        &state,
        "changed",
        "UPDATE entry SET body = CAST(replace(CAST(body AS TEXT), '\"v\":1', '\"v\":2') AS BLOB) WHERE seq = 10;",
    );
    let (code, text) = verify(&changed);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("entry 10"), "{text}");

    // A removed entry.
    let removed = tampered(&state, "removed", "DELETE FROM entry WHERE seq = 7;");
    let (code, text) = verify(&removed);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("entry 7"), "{text}");

    // Two entries swapped.
    let swapped = tampered(
        &state,
        "swapped",
        "UPDATE entry SET seq = -1 WHERE seq = 5;
         UPDATE entry SET seq = 5 WHERE seq = 6;
         UPDATE entry SET seq = 6 WHERE seq = -1;",
    );
    let (code, text) = verify(&swapped);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("entry 5"), "{text}");

    // A score document edited in place beside an intact ledger no longer recomputes: the ledger
    // entries say what was published.
    let edited = tampered(
        &state,
        "edited",
        "UPDATE entry SET body = CAST(replace(CAST(body AS TEXT), '\"verdict\":\"unverified\"', '\"verdict\":\"ok\"') AS BLOB)
           WHERE kind = 'score' AND seq = (SELECT MAX(seq) FROM entry WHERE kind = 'score');",
    );
    let (code, _) = verify(&edited);
    assert_eq!(code, 1, "the edit breaks the chain too");
}
