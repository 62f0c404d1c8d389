//! Operating the daemon as the service runs it (a separate process on the real clock): a SIGHUP
//! applies what it can at once (a lowered spend cap) and refuses, naming each key, a change that
//! needs a restart, keeping the old configuration whole; a full disk under the state directory
//! (a small tmpfs mounted for the test) pauses new runs while the API keeps serving, and runs
//! resume when room returns, across a restart on the full disk too, with the ledger intact.

use crate::daemon_support;
use crate::process_support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use daemon_support::*;
use process_support::*;
use x402_probe::store::{SqliteStore, Store};

/// The API's address the daemon logged (`API listening addr=...`), once it is there.
fn api_addr(log: &Path, after: usize) -> String {
    let mut found = None;
    wait_for(
        "the API's address in the log",
        Duration::from_secs(60),
        || {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            found = text
                .lines()
                .skip(after)
                .filter(|l| l.contains("API listening"))
                .filter_map(|l| l.split("addr=").nth(1))
                .map(|a| a.trim().to_string())
                .last();
            found.is_some()
        },
    );
    found.unwrap()
}

fn log_lines(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .count()
}

async fn get(addr: &str, path: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .get(format!("http://{addr}{path}"))
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

/// One series' value in the exposition (`name` with its labels, as printed). Scrapes are
/// limited per client (2 a second): over it, wait and ask again.
async fn metric(addr: &str, series: &str) -> f64 {
    let text = loop {
        match get(addr, "/metrics").await {
            (200, text) => break text,
            (429, _) => tokio::time::sleep(Duration::from_secs(1)).await,
            (status, text) => panic!("/metrics: {status} {text}"),
        }
    };
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

async fn wait_metric(addr: &str, series: &str, what: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let until = Instant::now() + Duration::from_secs(90);
    loop {
        let v = metric(addr, series).await;
        if ok(v) {
            return v;
        }
        assert!(
            Instant::now() < until,
            "timed out waiting for {what} ({series} = {v})"
        );
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
}

fn stop(child: &mut Child, log: &Path) {
    signal(child, libc::SIGTERM);
    let asked = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(15),
            "still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "{status}: {}",
        std::fs::read_to_string(log).unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_lowered_cap_at_once_and_refuses_restart_only_changes_by_name() {
    let lab = lab(&["honest-v2"]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(dir.path());
    settings.subjects = vec![lab.endpoint("honest-v2").unwrap().url.clone()];
    settings.free_every_secs = 3600;
    let text = config_text(&lab, &settings);
    assert!(text.contains("max_usd_per_day = \"5\""), "{text}");
    let config = write_config(dir.path(), &text);
    let log = dir.path().join("daemon.log");
    let mut child = start_daemon(&config, &log);
    let addr = api_addr(&log, 0);
    let per_day = "x402_probe_spend_cap_usd{cap=\"per_day\"}";
    assert_eq!(metric(&addr, per_day).await, 5.0);

    // A lower daily cap: applied at once (the caps gauge and the status route read the policy
    // the paid calls reserve under).
    let lowered = text.replace("max_usd_per_day = \"5\"", "max_usd_per_day = \"0.01\"");
    write_config(dir.path(), &lowered);
    signal(&child, libc::SIGHUP);
    wait_metric(&addr, per_day, "the lowered cap", |v| v == 0.01).await;
    let (_, status) = get(&addr, "/v1/status").await;
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["paid_budget"]["cap_usd"], "0.01", "{status}");
    assert_eq!(
        metric(
            &addr,
            "x402_probe_config_reloads_total{outcome=\"applied\"}"
        )
        .await,
        1.0
    );
    assert_eq!(
        metric(&addr, "x402_probe_config_last_reload_applied").await,
        1.0
    );

    // A change that needs a restart, with a cap raised beside it: nothing is applied, each key
    // is named, and the old configuration stays whole (the cap stays lowered).
    let restart = lowered
        .replace("max_usd_per_day = \"0.01\"", "max_usd_per_day = \"5\"")
        .replace("bind = \"127.0.0.1:0\"", "bind = \"127.0.0.1:1\"")
        .replace("concurrency = 8", "concurrency = 3");
    assert!(restart.contains("127.0.0.1:1\"") && restart.contains("concurrency = 3"));
    write_config(dir.path(), &restart);
    signal(&child, libc::SIGHUP);
    wait_metric(
        &addr,
        "x402_probe_config_reloads_total{outcome=\"restart_needed\"}",
        "the refused reload",
        |v| v == 1.0,
    )
    .await;
    assert_eq!(
        metric(&addr, "x402_probe_config_last_reload_applied").await,
        0.0
    );
    assert_eq!(metric(&addr, per_day).await, 0.01, "nothing applied");
    let logs = std::fs::read_to_string(&log).unwrap();
    let refused = logs
        .lines()
        .find(|l| l.contains("configuration not reloaded"))
        .unwrap_or_else(|| panic!("no refusal logged:\n{logs}"));
    assert!(
        refused.contains("[api] bind") && refused.contains("[schedule] concurrency"),
        "{refused}"
    );
    assert!(
        !refused.contains("[pay]"),
        "a cap is not a restart: {refused}"
    );
    // Put back as it runs: the next reload applies again.
    write_config(dir.path(), &lowered);
    signal(&child, libc::SIGHUP);
    wait_metric(
        &addr,
        "x402_probe_config_last_reload_applied",
        "a reload applied again",
        |v| v == 1.0,
    )
    .await;
    stop(&mut child, &log);
}

/// A tmpfs of `size` mounted at `dir` for the test, unmounted when dropped; `None` (with the
/// reason printed) where mounting is impossible (not root, no tmpfs).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let out = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs(dir.to_path_buf())),
            Ok(o) => {
                println!(
                    "SKIPPED: cannot mount a tmpfs for the full-disk test: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                println!("SKIPPED: cannot run mount for the full-disk test: {e}");
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fills the filesystem of `dir` with `dir/filler` until a write fails for lack of room.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    for chunk in [1 << 20, 4096, 512] {
        let block = vec![0x5a_u8; chunk];
        loop {
            match file.write_all(&block).and_then(|()| file.sync_data()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
    }
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_pauses_runs_keeps_the_api_and_runs_resume_when_room_returns() {
    let outer = tempfile::tempdir().unwrap();
    let state = outer.path().join("state");
    let Some(_mounted) = Tmpfs::mount(&state, "24m") else {
        return;
    };
    let lab = lab(&["honest-v2"]).await;
    let mut settings = Settings::new(&state);
    settings.subjects = vec![lab.endpoint("honest-v2").unwrap().url.clone()];
    settings.free_every_secs = 1;
    settings.pay = false;
    let config = write_config(outer.path(), &config_text(&lab, &settings));
    let log = outer.path().join("daemon.log");
    let mut child = start_daemon(&config, &log);
    let addr = api_addr(&log, 0);
    let recorded = "x402_probe_runs_total{result=\"recorded\"}";
    let not_recorded = "x402_probe_runs_total{result=\"not_recorded\"}";
    wait_metric(&addr, recorded, "a first run", |v| v >= 1.0).await;
    assert_eq!(metric(&addr, "x402_probe_storage_full").await, 0.0);

    // The disk fills: the daemon stays up, says so, serves, and starts no run.
    let filler = fill(&state);
    wait_metric(
        &addr,
        "x402_probe_storage_full",
        "the full disk seen",
        |v| v == 1.0,
    )
    .await;
    assert!(child.try_wait().unwrap().is_none(), "the daemon exited");
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(logs.contains("storage full"), "{logs}");
    let (status, subjects) = get(&addr, "/v1/subjects").await;
    assert_eq!(status, 200, "{subjects}");
    // Whatever was in flight has ended by now; then nothing starts (a run would be counted,
    // recorded or not) over several cadences.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = (
        metric(&addr, recorded).await,
        metric(&addr, not_recorded).await,
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = (
        metric(&addr, recorded).await,
        metric(&addr, not_recorded).await,
    );
    assert_eq!(before, after, "no run starts while the disk is full");
    assert_eq!(
        metric(&addr, "x402_probe_scheduler_jobs_in_flight").await,
        0.0
    );
    assert!(child.try_wait().unwrap().is_none(), "the daemon exited");

    // Room again: runs resume on their own.
    std::fs::remove_file(&filler).unwrap();
    wait_metric(&addr, "x402_probe_storage_full", "room seen again", |v| {
        v == 0.0
    })
    .await;
    wait_metric(&addr, recorded, "runs resumed", |v| v > after.0).await;

    // Full again, stopped and started on the full disk: it comes up degraded, API and all,
    // and resumes when room returns.
    let filler = fill(&state);
    wait_metric(
        &addr,
        "x402_probe_storage_full",
        "the disk full again",
        |v| v == 1.0,
    )
    .await;
    stop(&mut child, &log);
    let lines = log_lines(&log);
    let mut child = start_daemon(&config, &log);
    let addr = api_addr(&log, lines);
    let (status, _) = get(&addr, "/v1/subjects").await;
    assert_eq!(status, 200);
    wait_metric(
        &addr,
        "x402_probe_storage_full",
        "the full disk seen after the restart",
        |v| v == 1.0,
    )
    .await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the restarted daemon exited"
    );
    std::fs::remove_file(&filler).unwrap();
    wait_metric(&addr, recorded, "runs resumed after the restart", |v| {
        v >= 1.0
    })
    .await;
    stop(&mut child, &log);

    // Nothing acknowledged was lost: the ledger verifies, signed at its head.
    let store = SqliteStore::open_file(&state.join("ledger.sqlite")).unwrap();
    let summary = store.verify(None, true).unwrap();
    assert_eq!(
        summary.signed_through, summary.head_seq,
        "signed at its head"
    );
}
