//! `x402-probe ledger migrate` on a real ledger of format 1, written by the build before format 2
//! (`tests/data/ledger-v1`, four lab days): before the migration every command refuses it with
//! the way out, `ledger verify` checks it as format 1; after it the ledger verifies against the
//! reporter key, every published score recomputes byte for byte from the stored form (results
//! derived again), and it records what it was migrated from. `kill -9` of a real migrating
//! process at any moment leaves the old ledger or the new one, each verifiable. A blob changed or
//! removed, and a run whose results no longer derive to its stored hash, are named by `verify`.

use crate::ledger_support;
use crate::process_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use process_support::run;
use x402_probe::ledger::key::ReporterKey;
use x402_probe::store::SqliteStore;

/// A private state directory under `root` holding the format 1 fixture and its reporter key.
fn fixture_state(root: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ledger-v1");
    let state = root.join(name);
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let packed = std::fs::read(data.join("ledger.sqlite.zst")).unwrap();
    let mut decoder = zstd::stream::read::Decoder::new(packed.as_slice()).unwrap();
    decoder.window_log_max(27).unwrap();
    let mut ledger = Vec::new();
    std::io::Read::read_to_end(&mut decoder, &mut ledger).unwrap();
    for (file, bytes) in [
        ("ledger.sqlite", ledger),
        (
            "reporter.key",
            std::fs::read(data.join("reporter.key")).unwrap(),
        ),
    ] {
        let path = state.join(file);
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    state
}

fn state_arg(args: &[&str], state: &Path) -> (i32, String) {
    let mut all: Vec<&str> = args.to_vec();
    let shown = state.to_str().unwrap();
    all.push(shown);
    run(&all)
}

fn public_key(state: &Path) -> String {
    hex::encode(
        ReporterKey::from_key_file(&state.join("reporter.key"))
            .unwrap()
            .public_key(),
    )
}

fn schema(state: &Path) -> String {
    rusqlite::Connection::open(state.join("ledger.sqlite"))
        .unwrap()
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })
        .unwrap()
}

/// Every score row (subject, day, document): what the API serves and signs.
fn score_rows(path: &Path) -> Vec<(String, String, Vec<u8>)> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT subject, day, document FROM score ORDER BY subject, day")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn a_format_1_ledger_is_refused_then_migrated_verified_and_recomputed() {
    let root = tempfile::tempdir().unwrap();
    let state = fixture_state(root.path(), "state");
    let key = public_key(&state);
    let old_rows = score_rows(&state.join("ledger.sqlite"));
    assert!(!old_rows.is_empty());

    // Before: verified as format 1 (and said to wait for the migration); refused by every command
    // that would read it as format 2, with the command that migrates it.
    let (code, text) = state_arg(&["ledger", "verify", "--state-dir"], &state);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("1023 entries") && text.contains("x402-probe.ledger/1"),
        "{text}"
    );
    let old_head = text
        .split("head 1023 ")
        .nth(1)
        .and_then(|t| t.split(',').next())
        .unwrap()
        .to_string();
    for args in [
        &["recompute", "--ledger"][..],
        &["ledger", "export", "--subject", "x", "--state-dir"][..],
    ] {
        let (code, text) = state_arg(args, &state);
        assert_ne!(code, 0, "{args:?}: {text}");
        assert!(
            text.contains("ledger migrate --state") && text.contains("x402-probe.ledger/1"),
            "{args:?}: {text}"
        );
    }
    let err = SqliteStore::open(&state).unwrap_err();
    assert!(err.to_string().contains("ledger migrate"), "{err}");
    assert_eq!(
        schema(&state),
        "x402-probe.ledger/1",
        "nothing written into it"
    );

    let (code, text) = state_arg(&["ledger", "migrate", "--state"], &state);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("1023 entries"), "{text}");
    assert_eq!(schema(&state), "x402-probe.ledger/2");
    assert!(state.join("ledger-format-1.sqlite").exists());
    assert!(!state.join("ledger.sqlite.migrating").exists());

    // After: the same entries (seqs) and checkpoints signed by the reporter key, every blob and
    // every run's derived results checked, every score recomputed byte for byte.
    let (code, text) = state_arg(
        &["ledger", "verify", "--pubkey", &key, "--state-dir"],
        &state,
    );
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("1023 entries") && text.contains("97 checkpoints"),
        "{text}"
    );
    let (code, text) = state_arg(&["recompute", "--ledger"], &state);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("215 published scores recomputed from the ledger byte for byte"),
        "{text}"
    );
    assert_eq!(score_rows(&state.join("ledger.sqlite")), old_rows);
    let from = SqliteStore::open_read_only(&state.join("ledger.sqlite"))
        .unwrap()
        .migrated_from()
        .unwrap()
        .expect("the migration is recorded");
    assert_eq!(
        (from.head_seq, from.head_hash.as_str()),
        (1023, old_head.as_str())
    );
    let checkpoint = from.checkpoint.expect("the old ledger's last checkpoint");
    assert_eq!(
        (checkpoint.seq, checkpoint.public_key.as_str()),
        (1023, key.as_str())
    );
    let old_bytes = std::fs::metadata(state.join("ledger-format-1.sqlite"))
        .unwrap()
        .len();
    let new_bytes = std::fs::metadata(state.join("ledger.sqlite"))
        .unwrap()
        .len();
    assert!(new_bytes < old_bytes, "{new_bytes} < {old_bytes}");

    // A run read back has its results (derived again) and its bodies.
    let (code, text) = state_arg(
        &[
            "ledger",
            "export",
            "--subject",
            &old_rows[0].0,
            "--state-dir",
        ],
        &state,
    );
    assert_eq!(code, 0, "{text}");
    let run = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l["entry"]["record"]["kind"] == "run")
        .expect("a run exported");
    assert_eq!(
        run["entry"]["record"]["results"].as_array().unwrap().len(),
        27,
        "every check's result, derived: {run}"
    );

    // Once more: nothing to do.
    let (code, text) = state_arg(&["ledger", "migrate", "--state"], &state);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("nothing to migrate"), "{text}");
}

/// `kill -9` of a real `ledger migrate` process at moments spread over its run: the state
/// directory holds the old ledger (verifying as format 1) or the new one (verifying against the
/// reporter key), never a mix; a migration run again after the kill completes.
#[test]
fn a_migration_killed_at_any_point_leaves_a_verifiable_ledger() {
    let root = tempfile::tempdir().unwrap();
    // How long a whole migration takes here, to spread the kills over it.
    let timing = fixture_state(root.path(), "timing");
    let started = std::time::Instant::now();
    let (code, text) = state_arg(&["ledger", "migrate", "--state"], &timing);
    assert_eq!(code, 0, "{text}");
    let whole = started.elapsed();
    let mut seen = std::collections::BTreeSet::new();
    for (i, fraction) in [0.02, 0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 0.95, 1.1]
        .into_iter()
        .enumerate()
    {
        let state = fixture_state(root.path(), &format!("kill-{i}"));
        let key = public_key(&state);
        let mut child = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
            .args(["ledger", "migrate", "--state"])
            .arg(&state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(whole.mul_f64(fraction));
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        let format = schema(&state);
        let (code, text) = match format.as_str() {
            "x402-probe.ledger/1" => state_arg(&["ledger", "verify", "--state-dir"], &state),
            "x402-probe.ledger/2" => state_arg(
                &["ledger", "verify", "--pubkey", &key, "--state-dir"],
                &state,
            ),
            other => panic!("kill at {fraction}: a ledger of schema {other:?}"),
        };
        assert_eq!(code, 0, "kill at {fraction} ({format}): {text}");
        assert!(text.contains("1023 entries"), "kill at {fraction}: {text}");
        seen.insert(format);
        // Run again to its end: migrated (or already), verified.
        let (code, text) = state_arg(&["ledger", "migrate", "--state"], &state);
        assert_eq!(code, 0, "after the kill at {fraction}: {text}");
        let (code, text) = state_arg(
            &["ledger", "verify", "--pubkey", &key, "--state-dir"],
            &state,
        );
        assert_eq!(code, 0, "after the kill at {fraction}: {text}");
        assert!(!state.join("ledger.sqlite.migrating").exists());
    }
    assert!(
        seen.contains("x402-probe.ledger/1"),
        "some kill came before the rename: {seen:?}"
    );
}

/// On the migrated ledger: a blob whose bytes were changed, a blob removed, and a run whose
/// stored results hash no longer matches what its observation derives to, are each named.
#[test]
fn a_changed_or_missing_blob_and_results_that_do_not_derive_are_named() {
    let root = tempfile::tempdir().unwrap();
    let migrated = fixture_state(root.path(), "migrated");
    let (code, text) = state_arg(&["ledger", "migrate", "--state"], &migrated);
    assert_eq!(code, 0, "{text}");
    let copy = |name: &str, sql: &str| -> PathBuf {
        let dir = root.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for file in ["ledger.sqlite", "reporter.key"] {
            std::fs::copy(migrated.join(file), dir.join(file)).unwrap();
        }
        rusqlite::Connection::open(dir.join("ledger.sqlite"))
            .unwrap()
            .execute_batch(sql)
            .unwrap();
        dir
    };
    // A certificate chain every run names: the newest blob a run entry names.
    let named: String = rusqlite::Connection::open(migrated.join("ledger.sqlite"))
        .unwrap()
        .query_row(
            "SELECT lower(hex(sha256)) FROM blob WHERE EXISTS (SELECT 1 FROM entry
                 WHERE kind = 'run' AND instr(CAST(body AS TEXT), lower(hex(blob.sha256))) > 0)
             LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();

    let changed = copy(
        "changed",
        &format!("UPDATE blob SET codec = 0, bytes = X'00' WHERE lower(hex(sha256)) = '{named}';"),
    );
    let (code, text) = state_arg(&["ledger", "verify", "--state-dir"], &changed);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!("blob {named} does not hash to its address")),
        "{text}"
    );

    let missing = copy(
        "missing",
        &format!("DELETE FROM blob WHERE lower(hex(sha256)) = '{named}';"),
    );
    let (code, text) = state_arg(&["ledger", "verify", "--state-dir"], &missing);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!(
            "it names blob {named}, which the store does not have"
        )),
        "{text}"
    );
    let (code, text) = state_arg(&["recompute", "--ledger"], &missing);
    assert_eq!(code, 1, "{text}");

    // A run's observation edited in place (a 402 sample's status) with its entry re-hashed and
    // every later link re-chained, as someone with the file but not the key could: the chain
    // holds, but the results no longer derive to the stored hash (and the signed checkpoints no
    // longer match); `verify --chain-only` passes the chain alone with the checkpoints deleted,
    // the deep verify names the run.
    let edited = copy(
        "edited",
        "DELETE FROM checkpoint; DELETE FROM tree_checkpoint;",
    );
    let path = edited.join("ledger.sqlite");
    let mut rows = Vec::new();
    x402_probe::store::Store::scan(&SqliteStore::open_file(&path).unwrap(), 0, &mut |row| {
        rows.push(row);
        Ok(())
    })
    .unwrap();
    let target = rows
        .iter()
        .find(|r| r.kind == x402_probe::ledger::record::RecordKind::Run)
        .map(|r| r.seq)
        .unwrap();
    ledger_support::rechain(&path, target, |record| {
        if let x402_probe::ledger::record::StoredRecord::Run(run) = record {
            run.results.outcomes = run.results.outcomes.replace('p', "f");
        }
    });
    let (code, text) = state_arg(
        &["ledger", "verify", "--chain-only", "--state-dir"],
        &edited,
    );
    assert_eq!(code, 0, "the chain alone holds: {text}");
    let (code, text) = state_arg(&["ledger", "verify", "--state-dir"], &edited);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!("ledger entry {target}: its results derive to")),
        "{text}"
    );
}
