//! `x402-probe ledger verify` and `recompute --ledger` on a real ledger the daemon wrote (one
//! simulated day against the lab, shared by the tests), then tampered with directly in SQLite: a
//! changed, a removed and a reordered entry are each named; an edited score no longer recomputes;
//! deleted checkpoints, a ledger re-signed with another key, a deleted blob, an edited score row
//! and a truncated file are each caught; a daemon restarted on an edited score row does not serve
//! or sign it.

use crate::daemon_support;
use crate::ledger_support;
use crate::process_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use daemon_support::*;
use process_support::{signal, start_daemon};
use x402_probe::api::signed::subject_id;
use x402_probe::clock::ManualClock;
use x402_probe::ledger::key::ReporterKey;
use x402_probe::ledger::record::{Record, StoredRecord};
use x402_probe::store::{SqliteStore, Store};

/// The day of ledger every test tampers with copies of.
struct DayLedger {
    state: PathBuf,
    /// The daemon's configuration (TOML), naming `state`.
    config: String,
    /// The subjects it probed.
    subjects: Vec<String>,
}

/// One simulated day of two honest endpoints, run once per test binary (in `target/tmp`, replaced
/// on the next run).
fn day_ledger() -> &'static DayLedger {
    static DAY_LEDGER: OnceLock<DayLedger> = OnceLock::new();
    DAY_LEDGER.get_or_init(|| {
        std::thread::spawn(|| {
            let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ledger_tamper_day");
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(&root).unwrap();
            let state = root.join("state");
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let (config, subjects) = runtime.block_on(async {
                let lab = lab(&["honest-v2", "honest-v1"]).await;
                let start = start_ms();
                let clock = Arc::new(ManualClock::at_ms(start));
                let mut settings = Settings::new(&state);
                settings.subjects = lab.endpoints.iter().map(|e| e.url.clone()).collect();
                settings.pay = false;
                settings.free_every_secs = 3600;
                let text = config_text(&lab, &settings);
                run_simulated(&text, clock, start + DAY).await;
                // The lab goes with this runtime; a daemon restarted later on the day's ledger
                // probes nothing before the tests end, but reads the lab's CA file at start.
                let ca = root.join("ca.pem");
                std::fs::copy(&lab.ca_file, &ca).unwrap();
                let text = text.replace(lab.ca_file.to_str().unwrap(), ca.to_str().unwrap());
                (text, settings.subjects)
            });
            // Consolidate the WAL so copies of the file hold everything.
            rusqlite_open(&state.join("ledger.sqlite"))
                .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                .unwrap();
            DayLedger {
                state,
                config,
                subjects,
            }
        })
        .join()
        .expect("the simulated day runs")
    })
}

fn x402_probe(args: &[&str], state: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .args(args)
        .arg(state)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn verify(state: &Path) -> (i32, String) {
    x402_probe(&["ledger", "verify", "--state-dir"], state)
}

fn verify_with_key(state: &Path, key: &str) -> (i32, String) {
    x402_probe(&["ledger", "verify", "--pubkey", key, "--state-dir"], state)
}

fn recompute(state: &Path) -> (i32, String) {
    x402_probe(&["recompute", "--ledger"], state)
}

/// A copy of the day's state directory (ledger and reporter key) under `root`, tampered with by
/// `sql`.
fn tampered(root: &Path, name: &str, sql: &str) -> PathBuf {
    let original = &day_ledger().state;
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["ledger.sqlite", "reporter.key"] {
        std::fs::copy(original.join(file), dir.join(file)).unwrap();
    }
    rusqlite_open(&dir.join("ledger.sqlite"))
        .execute_batch(sql)
        .unwrap();
    dir
}

fn rusqlite_open(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

fn reporter_key_hex(state: &Path) -> String {
    hex::encode(
        ReporterKey::from_key_file(&state.join("reporter.key"))
            .unwrap()
            .public_key(),
    )
}

fn query_u64(state: &Path, sql: &str) -> u64 {
    rusqlite_open(&state.join("ledger.sqlite"))
        .query_row(sql, [], |r| r.get::<_, i64>(0))
        .unwrap() as u64
}

/// Edits entry `from` with `edit` and re-chains every entry from it to the head.
fn rechain(state: &Path, from: u64, edit: impl Fn(&mut StoredRecord)) {
    ledger_support::rechain(&state.join("ledger.sqlite"), from, edit);
}

#[test]
fn verify_names_a_changed_removed_or_reordered_entry() {
    let state = &day_ledger().state;
    let root = tempfile::tempdir().unwrap();
    let (code, text) = verify(state);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("checkpoints"), "{text}");
    let (code, text) = recompute(state);
    assert_eq!(code, 0, "{text}");

    // A changed byte in entry 10.
    let changed = tampered(
        root.path(),
        "changed",
        "UPDATE entry SET body = CAST(replace(CAST(body AS TEXT), '\"v\":2', '\"v\":3') AS BLOB) WHERE seq = 10;",
    );
    let (code, text) = verify(&changed);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("entry 10"), "{text}");

    // A removed entry.
    let removed = tampered(root.path(), "removed", "DELETE FROM entry WHERE seq = 7;");
    let (code, text) = verify(&removed);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("entry 7"), "{text}");

    // Two entries swapped.
    let swapped = tampered(
        root.path(),
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
        root.path(),
        "edited",
        "UPDATE entry SET body = CAST(replace(CAST(body AS TEXT), '\"verdict\":\"unverified\"', '\"verdict\":\"ok\"') AS BLOB)
           WHERE kind = 'score' AND seq = (SELECT MAX(seq) FROM entry WHERE kind = 'score');",
    );
    let (code, _) = verify(&edited);
    assert_eq!(code, 1, "the edit breaks the chain too");
}

/// Item 4 of issue 25: deleting checkpoints no longer defeats the signatures. With `--pubkey`, a
/// ledger whose checkpoints were all deleted (or the newest ones), then an entry changed and the
/// tail re-chained, fails; without it, the key the checkpoints are signed with is printed, and
/// checkpoints by two keys fail.
#[test]
fn deleted_checkpoints_and_another_key_are_caught() {
    let state = &day_ledger().state;
    let root = tempfile::tempdir().unwrap();
    let key = reporter_key_hex(state);

    // As the daemon left it: signed by the trusted key, and the summary says by which.
    let (code, text) = verify_with_key(state, &key);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&format!("signed by the trusted key {key}")),
        "{text}"
    );
    let (code, text) = verify(state);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&format!("signed by {key}")), "{text}");

    // The case: every checkpoint deleted, the last score's entry changed (capped score
    // 97.5), the tail re-chained. The chain is consistent; nothing is signed.
    let last_score = query_u64(state, "SELECT MAX(seq) FROM entry WHERE kind = 'score'");
    let inflate = |record: &mut StoredRecord| {
        if let Record::Score(score) = record {
            score.capped_score = 97.5;
        }
    };
    let unsigned = tampered(
        root.path(),
        "unsigned",
        "DELETE FROM checkpoint; DELETE FROM tree_checkpoint;",
    );
    rechain(&unsigned, last_score, inflate);
    let (code, text) = verify(&unsigned);
    assert_eq!(code, 0, "consistent, and said to be unsigned: {text}");
    assert!(text.contains("not signed by any key"), "{text}");
    let (code, text) = verify_with_key(&unsigned, &key);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("no checkpoint covers"), "{text}");

    // Only the first checkpoint kept: the day after it is unsigned, far more than an hour.
    let first = query_u64(state, "SELECT MIN(seq) FROM checkpoint");
    assert!(
        first < last_score,
        "the first checkpoint is early in the day"
    );
    let newest_deleted = tampered(
        root.path(),
        "newest-deleted",
        &format!(
            "DELETE FROM checkpoint WHERE seq > {first}; DELETE FROM tree_checkpoint WHERE size > {first};"
        ),
    );
    rechain(&newest_deleted, last_score, inflate);
    let (code, text) = verify_with_key(&newest_deleted, &key);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!("entry {}", first + 1)) && text.contains("not signed"),
        "{text}"
    );

    // Wholly re-signed with another key: consistent, but the other key is what is printed, and
    // `--pubkey` refuses it.
    let other = ReporterKey::generate(&root.path().join("other.key")).unwrap();
    let other_hex = hex::encode(other.public_key());
    let resigned = tampered(
        root.path(),
        "resigned",
        "DELETE FROM checkpoint; DELETE FROM tree_checkpoint;",
    );
    rechain(&resigned, last_score, inflate);
    SqliteStore::open_file(&resigned.join("ledger.sqlite"))
        .unwrap()
        .checkpoint(&other, start_ms() + DAY)
        .unwrap()
        .expect("the head signed");
    let (code, text) = verify(&resigned);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&format!("signed by {other_hex}")) && !text.contains(&key),
        "{text}"
    );
    let (code, text) = verify_with_key(&resigned, &key);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("not by the trusted reporter key"), "{text}");

    // The newest checkpoint replaced by one of another key: two keys, no recorded rotation.
    let mixed = tampered(
        root.path(),
        "mixed",
        "DELETE FROM checkpoint WHERE seq = (SELECT MAX(seq) FROM checkpoint);",
    );
    SqliteStore::open_file(&mixed.join("ledger.sqlite"))
        .unwrap()
        .checkpoint(&other, start_ms() + DAY)
        .unwrap()
        .expect("the head signed");
    let (code, text) = verify(&mixed);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("more than one key") && text.contains(&other_hex),
        "{text}"
    );
}

/// Items 5 and 7 of issue 25: a deleted evidence blob fails `ledger verify` (not only
/// `recompute`); `recompute --ledger` checks the chain before recomputing; a truncated ledger is
/// an integrity failure (exit 1), not a usage error (2).
#[test]
fn a_missing_blob_a_removed_entry_and_a_truncated_file_fail_verify_and_recompute() {
    let state = &day_ledger().state;
    let root = tempfile::tempdir().unwrap();
    let (code, text) = verify(state);
    assert_eq!(code, 0, "{text}");
    let named: u64 = text
        .split(" blobs named")
        .next()
        .and_then(|t| t.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no blob count: {text}"));
    assert!(named > 0, "the runs kept bodies apart: {text}");

    // Every blob a run entry names, deleted.
    let no_blobs = tampered(
        root.path(),
        "no-blobs",
        "DELETE FROM blob WHERE EXISTS (SELECT 1 FROM entry WHERE kind = 'run'
             AND instr(CAST(body AS TEXT), lower(hex(blob.sha256))) > 0);",
    );
    assert!(
        query_u64(state, "SELECT COUNT(*) FROM blob")
            > query_u64(&no_blobs, "SELECT COUNT(*) FROM blob")
    );
    let (code, text) = verify(&no_blobs);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("which the store does not have"), "{text}");

    // A score entry from the middle removed (every other score still recomputes: before, this
    // exited 0): recompute refuses to recompute from a broken chain.
    let middle = query_u64(
        state,
        "SELECT MIN(seq) FROM entry WHERE kind = 'score' AND seq > 20",
    );
    let removed = tampered(
        root.path(),
        "removed",
        &format!("DELETE FROM entry WHERE seq = {middle};"),
    );
    let (code, text) = recompute(&removed);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!("entry {middle}")) && text.contains("nothing recomputed"),
        "{text}"
    );

    // A day of a subject's kept state (what the daemon scores from) edited so that it still
    // reads (its digest, and the state row naming it, made to match): recompute names it.
    let days = tampered(root.path(), "days", "");
    let db = rusqlite_open(&days.join("ledger.sqlite"));
    // Day rows are kept packed (zstd) when that is smaller; the digests name their JSON, and a
    // row kept as plain JSON reads too: the edit is written back as plain JSON.
    let (subject, day, body): (String, i64, Vec<u8>) = db
        .prepare("SELECT subject, day, body FROM subject_days ORDER BY day DESC")
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Vec<u8>>(2)?,
            ))
        })
        .unwrap()
        .map(|row| {
            let (subject, day, kept) = row.unwrap();
            (
                subject,
                day,
                zstd::stream::decode_all(kept.as_slice()).unwrap_or(kept),
            )
        })
        .find(|(_, _, json)| String::from_utf8_lossy(json).contains("\"outcome\":\"pass\""))
        .expect("a kept day with a pass");
    assert!(
        db.query_row(
            "SELECT COUNT(*) FROM subject_days WHERE substr(body, 1, 4) = x'28b52ffd'",
            [],
            |r| r.get::<_, i64>(0)
        )
        .unwrap()
            > 0,
        "day rows are kept packed"
    );
    let edited = String::from_utf8(body.clone()).unwrap().replacen(
        "\"outcome\":\"pass\"",
        "\"outcome\":\"fail\"",
        1,
    );
    let (old_sha, new_sha) = (
        x402_probe::evidence::sha256_hex(&body),
        x402_probe::evidence::sha256_hex(edited.as_bytes()),
    );
    db.execute(
        "UPDATE subject_days SET body = ?1, sha256 = ?2 WHERE subject = ?3 AND day = ?4",
        rusqlite::params![
            edited.as_bytes(),
            hex::decode(&new_sha).unwrap(),
            subject,
            day
        ],
    )
    .unwrap();
    let state: Vec<u8> = db
        .query_row(
            "SELECT body FROM subject_state WHERE subject = ?1",
            [&subject],
            |r| r.get(0),
        )
        .unwrap();
    let state = String::from_utf8(state).unwrap();
    assert!(state.contains(&old_sha), "the state row names its days");
    let state = state.replace(&old_sha, &new_sha);
    db.execute(
        "UPDATE subject_state SET body = ?1, sha256 = ?2 WHERE subject = ?3",
        rusqlite::params![
            state.as_bytes(),
            hex::decode(x402_probe::evidence::sha256_hex(state.as_bytes())).unwrap(),
            subject
        ],
    )
    .unwrap();
    drop(db);
    let (code, text) = recompute(&days);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!("DIFFERS the kept state of {subject}")),
        "{text}"
    );

    // The file cut in half, and cut to nothing: broken, exit 1, for both commands.
    for (name, fraction) in [("half", 0.5), ("empty", 0.0)] {
        let dir = tampered(root.path(), name, "");
        let file = dir.join("ledger.sqlite");
        let len = std::fs::metadata(&file).unwrap().len();
        let cut = (len as f64 * fraction) as u64;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .unwrap()
            .set_len(cut)
            .unwrap();
        let (code, text) = verify(&dir);
        assert_eq!(code, 1, "{name}: {text}");
        assert!(text.contains("is broken"), "{name}: {text}");
        let (code, text) = recompute(&dir);
        assert_eq!(code, 1, "{name}: {text}");
    }
    // No ledger at all is still a usage error.
    let (code, text) = verify(&root.path().join("nowhere"));
    assert_eq!(code, 2, "{text}");
}

/// Item 6 of issue 25: a latest-score row edited in SQLite (capped score 97.5) fails `verify` and
/// `recompute`, and a daemon restarted on it neither serves nor signs it: the subject's score is
/// withheld (503) with the integrity error logged, the other subject is served and verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_score_row_is_caught_and_never_served() {
    let day = tokio::task::spawn_blocking(day_ledger).await.unwrap();
    let root = tempfile::tempdir().unwrap();
    let (edited_subject, intact_subject) = (&day.subjects[0], &day.subjects[1]);

    let served = tampered(root.path(), "served", "");
    let row = SqliteStore::open_file(&served.join("ledger.sqlite"))
        .unwrap()
        .latest_score(edited_subject)
        .unwrap()
        .expect("a score row");
    let mut document: serde_json::Value = serde_json::from_slice(&row.document).unwrap();
    assert_ne!(document["capped_score"], serde_json::json!(97.5));
    document["capped_score"] = serde_json::json!(97.5);
    rusqlite_open(&served.join("ledger.sqlite"))
        .execute(
            "UPDATE score SET document = ?1 WHERE subject = ?2 AND day = ?3",
            rusqlite::params![
                x402_probe::canonical::to_canonical_bytes(&document),
                edited_subject,
                row.day
            ],
        )
        .unwrap();

    let (code, text) = verify(&served);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!("entry {}", row.seq)) && text.contains("score row"),
        "{text}"
    );
    let (code, text) = recompute(&served);
    assert_eq!(code, 1, "{text}");

    // The daemon restarted on it (real clock: the subjects are next due after the simulated day,
    // so nothing is probed or rescored meanwhile).
    let addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let config_text = day
        .config
        .replace(day.state.to_str().unwrap(), served.to_str().unwrap())
        .replace("bind = \"127.0.0.1:0\"", &format!("bind = \"{addr}\""));
    assert!(config_text.contains(&addr.to_string()), "{config_text}");
    let config = write_config(&served, &config_text);
    let log = served.join("daemon.log");
    let mut child = start_daemon(&config, &log);
    let client = reqwest::Client::new();
    let get = |subject: &str| {
        let url = format!("http://{addr}/v1/subjects/{}/score", subject_id(subject));
        let client = client.clone();
        async move {
            let response = client.get(url).send().await.ok()?;
            let status = response.status().as_u16();
            Some((status, response.bytes().await.ok()?.to_vec()))
        }
    };
    let mut answers = None;
    for _ in 0..600 {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if let (Some(edited), Some(intact)) = (get(edited_subject).await, get(intact_subject).await)
            && intact.0 == 200
        {
            answers = Some((edited, intact));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    signal(&child, libc::SIGTERM);
    let _ = child.wait();
    let logs = std::fs::read_to_string(&log).unwrap();
    let ((edited_status, edited_body), (_, intact_body)) =
        answers.unwrap_or_else(|| panic!("the API never answered: {logs}"));
    let edited_text = String::from_utf8_lossy(&edited_body);
    assert_eq!(edited_status, 503, "{edited_text}");
    assert!(edited_text.contains("\"unavailable\""), "{edited_text}");
    assert!(!edited_text.contains("97.5"), "{edited_text}");
    assert!(
        logs.contains("integrity: a stored score row differs from the ledger"),
        "{logs}"
    );

    // The intact subject's envelope verifies offline against the reporter key.
    let envelope = root.path().join("intact.json");
    std::fs::write(&envelope, &intact_body).unwrap();
    let key = reporter_key_hex(&served);
    let (code, text) = x402_probe(&["verify-score", "--pubkey", &key], &envelope);
    assert_eq!(code, 0, "{text}");
    assert!(text.starts_with("valid"), "{text}");
}

/// Issue 20, the transparency log: `ledger prove` hands one subject's entries over with their
/// inclusion proofs against the latest signed tree checkpoint, and `ledger check-proof` checks
/// them offline against the reporter key alone; a changed entry byte, a forged proof hash, or
/// another key fail.
#[test]
fn a_subjects_entries_are_proven_in_the_signed_tree_and_checked_offline() {
    let day = day_ledger();
    let state = &day.state;
    let root = tempfile::tempdir().unwrap();
    let key = reporter_key_hex(state);
    let (code, text) = verify_with_key(state, &key);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("tree checkpoints, signed through size"),
        "{text}"
    );

    let subject = &day.subjects[0];
    let out = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .args(["ledger", "prove", "--subject", subject, "--state-dir"])
        .arg(state)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bundle: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entries = bundle["entries"].as_array().unwrap();
    let subject_entries = query_u64(
        state,
        &format!(
            "SELECT COUNT(*) FROM entry WHERE subject = '{subject}' \
             AND seq <= (SELECT MAX(size) FROM tree_checkpoint)"
        ),
    );
    assert_eq!(
        entries.len() as u64,
        subject_entries,
        "every entry of the subject it covers"
    );
    assert!(subject_entries > 10);
    let check = |name: &str, bundle: &serde_json::Value, key: &str| {
        let file = root.path().join(name);
        std::fs::write(&file, serde_json::to_vec(bundle).unwrap()).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
            .args(["ledger", "check-proof", "--pubkey", key])
            .arg(&file)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code().unwrap_or(-1), text)
    };
    let (code, text) = check("intact.json", &bundle, &key);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&format!("{} entries proven", entries.len())),
        "{text}"
    );

    // One byte of one entry changed (its capped score, say): its proof no longer leads to the root.
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut forged = bundle.clone();
    let mut body = b64
        .decode(forged["entries"][3]["body"].as_str().unwrap())
        .unwrap();
    let at = body.len() / 2;
    body[at] ^= 0x01;
    forged["entries"][3]["body"] = b64.encode(body).into();
    let (code, text) = check("changed-entry.json", &forged, &key);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("does not lead to the root"), "{text}");
    // A forged proof hash.
    let mut forged = bundle.clone();
    forged["entries"][0]["proof"][0] = b64.encode([7u8; 32]).into();
    let (code, text) = check("forged-proof.json", &forged, &key);
    assert_eq!(code, 1, "{text}");
    // Checked against another key: the checkpoint is not its.
    let other = ReporterKey::generate(&root.path().join("other.key")).unwrap();
    let (code, text) = check("other-key.json", &bundle, &hex::encode(other.public_key()));
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("no signature"), "{text}");
}

/// Issue 20, the transparency log: every chain checkpoint deleted and an entry changed with the
/// tail re-chained (the case issue 25 item 4 found) still fails without `--pubkey` while the
/// signed tree checkpoints stand: the entries' Merkle root is not the signed one. A tree
/// checkpoint signed by the reporter key over another root (an inconsistent checkpoint) fails
/// too, and so does an edited node of the stored tree the proofs are read from.
#[test]
fn the_signed_tree_catches_what_the_chain_alone_would_not() {
    let state = &day_ledger().state;
    let root = tempfile::tempdir().unwrap();
    let last_score = query_u64(state, "SELECT MAX(seq) FROM entry WHERE kind = 'score'");
    let first_tree = query_u64(state, "SELECT MIN(size) FROM tree_checkpoint");
    assert!(first_tree < last_score);

    let rewritten = tampered(root.path(), "rewritten", "DELETE FROM checkpoint;");
    rechain(&rewritten, last_score, |record| {
        if let Record::Score(score) = record {
            score.capped_score = 97.5;
        }
    });
    let (code, text) = verify(&rewritten);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("tree checkpoint") && text.contains("Merkle root differs"),
        "{text}"
    );

    // A tree checkpoint the reporter key signed over a root the entries do not give: the
    // newest note replaced.
    let inconsistent = tampered(root.path(), "inconsistent", "");
    let reporter = ReporterKey::from_key_file(&inconsistent.join("reporter.key")).unwrap();
    let (size, at_ms) = {
        let conn = rusqlite_open(&inconsistent.join("ledger.sqlite"));
        conn.query_row(
            "SELECT size, at_ms FROM tree_checkpoint ORDER BY size DESC LIMIT 1",
            [],
            |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)?)),
        )
        .unwrap()
    };
    let note = x402_probe::ledger::tlog::sign_tree_note(
        &reporter.public_key(),
        size,
        [9u8; 32],
        at_ms,
        |m| reporter.sign(m),
    )
    .unwrap();
    rusqlite_open(&inconsistent.join("ledger.sqlite"))
        .execute(
            "UPDATE tree_checkpoint SET note = ?1 WHERE size = ?2",
            rusqlite::params![note, size as i64],
        )
        .unwrap();
    let (code, text) = verify_with_key(&inconsistent, &reporter_key_hex(state));
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!("tree checkpoint of size {size}")),
        "{text}"
    );

    // One stored node of the tree edited: the proofs it gives would not verify. (The leaves are
    // the entries' own hashes, which the chain checks.)
    let node = tampered(
        root.path(),
        "node",
        "UPDATE tree SET hash = zeroblob(32) WHERE level = 1 AND idx = 2;",
    );
    let (code, text) = verify(&node);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("stored Merkle tree's node 2 at level 1 is not the hash its entries give"),
        "{text}"
    );
}
