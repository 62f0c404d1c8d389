//! The daemon as a systemd service: the unit in `deploy/` passes `systemd-analyze verify`, rates at
//! most 2.0 on `systemd-analyze security --offline=yes`, and agrees with the configuration and the
//! sysusers file; and the daemon speaks systemd's notify protocol (this test plays systemd's side
//! of the socket: READY=1, STATUS=, watchdog pings within half of the watchdog time, STOPPING=1).

use crate::daemon_support;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use daemon_support::*;

/// Where the unit expects the binary (the README's install steps put it there).
const INSTALLED_BINARY: &str = "/usr/local/bin/x402-probe";
/// The highest exposure the unit may be rated (0 is best, 10 worst).
const MAX_EXPOSURE: f64 = 2.0;

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file)
}

/// Whether `systemd-analyze` can be run. Missing, the unit tests are skipped with a message,
/// except in CI (`.ci/run` installs it), where that is a failure.
fn systemd_analyze_present() -> bool {
    let present = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        assert!(
            std::env::var_os("CI").is_none(),
            "systemd-analyze is missing in CI (.ci/run installs the `systemd` package)"
        );
        eprintln!("SKIPPED: systemd-analyze is not installed (apt-get install systemd)");
    }
    present
}

/// The unit's `Key=value` lines, comments left out.
fn directives(unit: &str) -> Vec<(String, String)> {
    unit.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn values<'a>(directives: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    directives
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Writes the unit into `dir` with the binary path replaced by the one cargo built (verify
/// checks that ExecStart's command exists and is executable).
fn unit_copy(dir: &Path, edit: impl FnOnce(String) -> String) -> PathBuf {
    let unit = std::fs::read_to_string(deploy("x402-probe.service")).unwrap();
    assert_eq!(
        unit.matches(INSTALLED_BINARY).count(),
        1,
        "ExecStart names {INSTALLED_BINARY} once"
    );
    let unit = unit.replace(INSTALLED_BINARY, env!("CARGO_BIN_EXE_x402-probe"));
    let path = dir.join("x402-probe.service");
    std::fs::write(&path, edit(unit)).unwrap();
    path
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().expect("systemd-analyze runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_unit_verifies_clean() {
    if !systemd_analyze_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_copy(dir.path(), |u| u);
    let (ok, text) = run(Command::new("systemd-analyze").arg("verify").arg(&unit));
    // Lines about other units (the host's own) are not ours to judge; every line about this one is.
    let ours: Vec<&str> = text.lines().filter(|l| l.contains("x402-probe")).collect();
    assert!(ok && ours.is_empty(), "systemd-analyze verify:\n{text}");

    // The check can fail: a misspelled directive and a missing binary are both reported.
    let bad = tempfile::tempdir().unwrap();
    let unit = unit_copy(bad.path(), |u| {
        u.replacen("[Service]\n", "[Service]\nProtectSystm=strict\n", 1)
            .replace(env!("CARGO_BIN_EXE_x402-probe"), "/nonexistent/x402-probe")
    });
    let (_, text) = run(Command::new("systemd-analyze").arg("verify").arg(&unit));
    assert!(text.contains("ProtectSystm"), "{text}");
    assert!(text.contains("/nonexistent/x402-probe"), "{text}");
}

#[test]
fn the_unit_rates_at_most_2_on_systemd_analyze_security() {
    if !systemd_analyze_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_copy(dir.path(), |u| u);
    let (_, text) = run(Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&unit));
    let score: f64 = text
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for x402-probe.service:"))
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{text}"));
    eprintln!("systemd-analyze security --offline=yes: {score}");
    assert!(
        score <= MAX_EXPOSURE,
        "exposure {score} > {MAX_EXPOSURE}:\n{text}"
    );
}

#[test]
fn the_unit_agrees_with_the_daemon_the_configuration_and_the_service_user() {
    let unit = std::fs::read_to_string(deploy("x402-probe.service")).unwrap();
    let d = directives(&unit);
    assert_eq!(values(&d, "Type"), ["notify"]);
    assert_eq!(values(&d, "NotifyAccess"), ["main"]);
    assert_eq!(values(&d, "StateDirectory"), ["x402-probe"]);
    assert_eq!(values(&d, "StateDirectoryMode"), ["0700"]);
    assert_eq!(values(&d, "Restart"), ["on-failure"]);
    assert!(values(&d, "ExecReload")[0].contains("-HUP $MAINPID"));
    assert!(
        values(&d, "ExecStart")[0].ends_with("daemon --config /etc/x402-probe/x402-probe.toml"),
        "{d:?}"
    );
    // The stop: the daemon promises exit within 10 s of SIGTERM; systemd must wait longer.
    let stop = values(&d, "TimeoutStopSec")[0];
    let stop: u64 = stop
        .trim_end_matches('s')
        .parse()
        .expect("TimeoutStopSec in seconds");
    assert!(
        stop > 10,
        "TimeoutStopSec={stop}s leaves no margin over the 10 s stop"
    );
    let watchdog = values(&d, "WatchdogSec")[0];
    let watchdog: u64 = watchdog
        .trim_end_matches('s')
        .parse()
        .expect("WatchdogSec in seconds");
    assert!((4..=600).contains(&watchdog), "WatchdogSec={watchdog}s");

    // Every credential the documented configuration reads is loaded under that name.
    let config = std::fs::read_to_string(deploy("x402-probe.toml")).unwrap();
    let wanted: Vec<&str> = config
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once("credential = \""))
        .filter_map(|(_, rest)| rest.split_once('"').map(|(name, _)| name))
        .collect();
    assert_eq!(
        wanted,
        ["reporter-key", "wallet-key"],
        "the configuration's credentials"
    );
    let loaded: Vec<&str> = values(&d, "LoadCredential")
        .iter()
        .filter_map(|v| v.split_once(':').map(|(name, _)| name))
        .collect();
    for name in wanted {
        assert!(
            loaded.contains(&name),
            "no LoadCredential={name}: in the unit"
        );
    }

    // The service user: the sysusers file creates the unit's User= with the state directory as
    // its home (run against a scratch root when systemd-sysusers is here).
    let user = values(&d, "User")[0];
    assert_eq!(values(&d, "Group"), [user]);
    let sysusers = std::fs::read_to_string(deploy("x402-probe.sysusers.conf")).unwrap();
    let line = sysusers
        .lines()
        .find(|l| l.starts_with("u "))
        .expect("a user line");
    assert_eq!(line.split_whitespace().nth(1), Some(user));
    let present = Command::new("systemd-sysusers")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if present {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        let (ok, text) = run(Command::new("systemd-sysusers")
            .arg(format!("--root={}", root.path().display()))
            .arg(deploy("x402-probe.sysusers.conf")));
        assert!(ok, "{text}");
        let passwd = std::fs::read_to_string(root.path().join("etc/passwd")).unwrap();
        let entry = passwd
            .lines()
            .find(|l| l.starts_with(&format!("{user}:")))
            .unwrap_or_else(|| panic!("{user} in {passwd}"));
        let fields: Vec<&str> = entry.split(':').collect();
        assert_ne!(fields[2], "0", "not root");
        assert_eq!(fields[5], "/var/lib/x402-probe");
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "systemd-sysusers is missing in CI (.ci/run installs the `systemd` package)"
        );
        eprintln!(
            "SKIPPED in part: systemd-sysusers is not installed; the sysusers file was not run"
        );
    }
}

/// The recalibration's service and timer, written into `dir` with the binary path replaced.
fn recalibrate_units(dir: &Path) -> (PathBuf, PathBuf) {
    let service = std::fs::read_to_string(deploy("x402-probe-recalibrate.service")).unwrap();
    assert_eq!(service.matches(INSTALLED_BINARY).count(), 1);
    let service_path = dir.join("x402-probe-recalibrate.service");
    std::fs::write(
        &service_path,
        service.replace(INSTALLED_BINARY, env!("CARGO_BIN_EXE_x402-probe")),
    )
    .unwrap();
    let timer_path = dir.join("x402-probe-recalibrate.timer");
    std::fs::copy(deploy("x402-probe-recalibrate.timer"), &timer_path).unwrap();
    (service_path, timer_path)
}

#[test]
fn the_recalibration_units_verify_clean_and_rate_at_most_2() {
    if !systemd_analyze_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (service, timer) = recalibrate_units(dir.path());
    let (ok, text) = run(Command::new("systemd-analyze")
        .arg("verify")
        .arg(&service)
        .arg(&timer));
    let ours: Vec<&str> = text.lines().filter(|l| l.contains("x402-probe")).collect();
    assert!(ok && ours.is_empty(), "systemd-analyze verify:\n{text}");

    let (_, text) = run(Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&service));
    let score: f64 = text
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for x402-probe-recalibrate.service:"))
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{text}"));
    eprintln!("recalibrate: systemd-analyze security --offline=yes: {score}");
    assert!(
        score <= MAX_EXPOSURE,
        "exposure {score} > {MAX_EXPOSURE}:\n{text}"
    );
}

#[test]
fn the_recalibration_reads_the_daemons_state_read_only_and_runs_nightly() {
    let daemon = directives(&std::fs::read_to_string(deploy("x402-probe.service")).unwrap());
    let service =
        directives(&std::fs::read_to_string(deploy("x402-probe-recalibrate.service")).unwrap());
    let timer =
        directives(&std::fs::read_to_string(deploy("x402-probe-recalibrate.timer")).unwrap());
    let state = format!("/var/lib/{}", values(&daemon, "StateDirectory")[0]);
    assert_eq!(values(&service, "ReadOnlyPaths"), [state.as_str()]);
    assert_eq!(values(&service, "User"), values(&daemon, "User"));
    assert_eq!(values(&service, "Type"), ["oneshot"]);
    let exec = values(&service, "ExecStart")[0];
    assert!(exec.contains(&format!(" --state {state} ")), "{exec}");
    // The live rubric is the daemon's: the same configuration file.
    let config = values(&daemon, "ExecStart")[0]
        .split_once("--config ")
        .map(|(_, c)| c.split_whitespace().next().unwrap())
        .unwrap();
    assert!(
        exec.contains(&format!("recalibrate --config {config} ")),
        "{exec}"
    );
    let out = format!("/var/lib/{}", values(&service, "StateDirectory")[0]);
    assert_ne!(out, state, "the output has its own directory");
    assert!(exec.ends_with(&format!("--out {out}")), "{exec}");
    // Nothing to do (3) and refused (4) are not failures of the unit.
    assert_eq!(values(&service, "SuccessExitStatus"), ["3 4"]);
    assert_eq!(values(&service, "PrivateNetwork"), ["yes"]);
    assert_eq!(values(&timer, "Persistent"), ["true"]);
    assert!(!values(&timer, "RandomizedDelaySec").is_empty());
    assert_eq!(values(&timer, "OnCalendar"), ["*-*-* 03:30:00"]);
    assert_eq!(values(&timer, "Unit"), ["x402-probe-recalibrate.service"]);
}

/// One datagram from the daemon, with the time it arrived.
fn hear(socket: &UnixDatagram, deadline: Instant) -> Option<(Instant, String)> {
    let left = deadline.checked_duration_since(Instant::now())?;
    socket
        .set_read_timeout(Some(left.max(Duration::from_millis(1))))
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).ok()?;
    Some((
        Instant::now(),
        String::from_utf8_lossy(&buf[..n]).into_owned(),
    ))
}

fn has_line(message: &str, line: &str) -> bool {
    message.lines().any(|l| l == line)
}

/// The runs count of a `STATUS=` line.
fn runs_in(status: &str) -> Option<u64> {
    status
        .split(", ")
        .find_map(|part| part.strip_prefix("runs since start: "))
        .and_then(|n| n.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_speaks_systemds_notify_protocol() {
    let lab = lab(&["honest-v2"]).await;
    let dir = tempfile::tempdir().unwrap();
    let subject = lab.endpoint("honest-v2").unwrap().url.clone();
    let mut settings = Settings::new(dir.path());
    settings.subjects = vec![subject];
    settings.free_every_secs = 2;
    settings.pay = false;
    // The API on a port known in advance (free a moment ago), to call it as soon as READY=1 comes.
    let api_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    settings.api = format!("[api]\nbind = \"127.0.0.1:{api_port}\"\n");
    let config = write_config(dir.path(), &config_text(&lab, &settings));

    // systemd's side: a datagram socket the daemon is told about.
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    let watchdog = Duration::from_secs(4);
    let log_path = dir.path().join("daemon.log");
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let mut child = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .args(["daemon", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", watchdog.as_micros().to_string())
        // systemd sets WATCHDOG_PID to the main pid, unknown before the spawn; unset is accepted.
        .env_remove("WATCHDOG_PID")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("the daemon starts");

    // READY=1 comes first, with a status line.
    let (ready_at, ready) = hear(&socket, Instant::now() + Duration::from_secs(60))
        .unwrap_or_else(|| panic!("no READY=1 within 60 s:\n{}", log()));
    assert!(
        has_line(&ready, "READY=1"),
        "first message: {ready:?}\n{}",
        log()
    );
    assert!(
        ready.contains("STATUS=subjects: 1, runs since start: 0, in flight: 0, vantage: ok"),
        "{ready:?}"
    );
    // READY=1 means the API is bound and serving.
    let key = reqwest::get(format!("http://127.0.0.1:{api_port}/v1/key"))
        .await
        .unwrap_or_else(|e| panic!("the API answers once READY=1 is sent: {e}\n{}", log()));
    assert_eq!(key.status(), 200);

    // Several seconds of service: pings never further apart than half the watchdog time, and the
    // status line follows the runs.
    let listen_until = ready_at + Duration::from_secs(12);
    let mut pings = vec![ready_at];
    let mut statuses = Vec::new();
    while let Some((at, message)) = hear(&socket, listen_until) {
        assert!(!has_line(&message, "READY=1"), "READY=1 twice: {message:?}");
        if has_line(&message, "WATCHDOG=1") {
            pings.push(at);
        }
        statuses.extend(
            message
                .lines()
                .filter_map(|l| l.strip_prefix("STATUS="))
                .map(str::to_string),
        );
    }
    assert!(
        pings.len() >= 6,
        "{} pings in 12 s with WATCHDOG_USEC of 4 s:\n{}",
        pings.len() - 1,
        log()
    );
    let longest = pings.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    eprintln!("{} pings, longest gap {longest:?}", pings.len() - 1);
    assert!(
        longest <= watchdog / 2,
        "a gap of {longest:?} between pings (watchdog {watchdog:?})"
    );
    assert!(
        statuses.iter().filter_map(|s| runs_in(s)).any(|n| n >= 1),
        "no status line counted a run: {statuses:?}\n{}",
        log()
    );

    // SIGTERM: STOPPING=1, then exit 0.
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let asked = Instant::now();
    let mut stopping = None;
    while let Some((_, message)) = hear(&socket, asked + Duration::from_secs(10)) {
        if has_line(&message, "STOPPING=1") {
            stopping = Some(message);
            break;
        }
    }
    let stopping = stopping.unwrap_or_else(|| panic!("no STOPPING=1 after SIGTERM:\n{}", log()));
    assert!(
        stopping.contains("STATUS=stopping: subjects: 1"),
        "{stopping:?}"
    );
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}:\n{}", log());
}
