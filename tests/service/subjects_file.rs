//! Subjects from a subjects file (`[[subjects_file]]`), through the real binary: a file with a
//! bad URL stops the daemon's start with exit 2 and names the file and the line; a good one (with
//! blank lines and comments) has its subjects added to the ledger like `[[subject]]` tables.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_x402-probe");

fn config(dir: &Path, list: &Path) -> std::path::PathBuf {
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let key = state.join("reporter.key");
    let keygen = Command::new(BIN)
        .args(["ledger", "keygen"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(keygen.status.success(), "{keygen:?}");
    let text = format!(
        "[[subject]]\nurl = \"https://127.0.0.1:9/table\"\n\n[[subjects_file]]\npath = {:?}\ncategory = \"weather\"\n\n[api]\nenabled = false\n\n[daemon]\nstate_dir = {:?}\nreporter_key = {{ key_file = {:?} }}\n\n[probe]\nallow_private = true\n",
        list.display().to_string(),
        state.display().to_string(),
        key.display().to_string(),
    );
    let path = dir.join("daemon.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_bad_line_is_a_usage_error_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("subjects.txt");
    std::fs::write(
        &list,
        "# ours\n\nhttps://127.0.0.1:9/a\nhttps://user@127.0.0.1:9/b\n",
    )
    .unwrap();
    let config = config(dir.path(), &list);
    let out = Command::new(BIN)
        .arg("daemon")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{} line 4:", list.display())),
        "{stderr}"
    );
    assert!(
        !dir.path().join("state/ledger.sqlite").exists(),
        "refused before the ledger is opened"
    );
}

#[test]
fn a_good_file_adds_its_subjects_with_its_category() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("subjects.txt");
    std::fs::write(
        &list,
        "# ours\n\nhttps://127.0.0.1:9/a\r\n  # indented comment\n  https://127.0.0.2:9/b  \n",
    )
    .unwrap();
    let config = config(dir.path(), &list);
    let log = dir.path().join("daemon.log");
    let mut child = Command::new(BIN)
        .arg("daemon")
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut text = String::new();
    while !text.contains("daemon started") {
        assert!(started.elapsed() < Duration::from_secs(60), "{text}");
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the daemon exited ({status}): {text}");
        }
        std::thread::sleep(Duration::from_millis(50));
        text.clear();
        std::fs::File::open(&log)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
    }
    // SAFETY: a plain signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "{status}: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let conn = rusqlite::Connection::open(dir.path().join("state/ledger.sqlite")).unwrap();
    let mut stmt = conn
        .prepare("SELECT url, category, source FROM subject ORDER BY url")
        .unwrap();
    let rows: Vec<(String, String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let config_row = |url: &str, category: &str| (url.into(), category.into(), "config".into());
    assert_eq!(
        rows,
        [
            config_row("https://127.0.0.1:9/a", "weather"),
            config_row("https://127.0.0.1:9/table", "uncategorised"),
            config_row("https://127.0.0.2:9/b", "weather"),
        ]
    );
}
