//! The binary as a separate process, as a user or the service runs it: a command run to its end
//! (`run`), or the daemon started from the test binary's sibling `x402-probe`, signalled, and
//! waited on. probe-lab's tests include this module for `x402-probe-lab`, the same commands with
//! the lab's.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under test: `x402-probe-lab` in probe-lab's tests, `x402-probe` here.
const BIN: &str = match (
    option_env!("CARGO_BIN_EXE_x402-probe-lab"),
    option_env!("CARGO_BIN_EXE_x402-probe"),
) {
    (Some(bin), _) | (None, Some(bin)) => bin,
    (None, None) => panic!("no binary to test"),
};

/// Starts `x402-probe daemon --config CONFIG`, its log (stderr) appended to `log`, so a restart
/// keeps what the previous process wrote.
pub fn start_daemon(config: &Path, log: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    Command::new(BIN)
        .args(["daemon", "--config"])
        .arg(config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("the daemon starts")
}

/// Sends `sig` to the child.
pub fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0);
}

/// Polls `ok` every 100 ms until it holds; panics after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

/// Runs `BIN ARGS` to its end: the exit code and stdout then stderr.
pub fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .expect("the binary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}
