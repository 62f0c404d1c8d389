//! The daemon as a separate process, as the service runs it: started from the test binary's
//! sibling `x402-probe`, signalled, and waited on.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `x402-probe daemon --config CONFIG`, its log (stderr) appended to `log`, so a restart
/// keeps what the previous process wrote.
pub fn start_daemon(config: &Path, log: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    Command::new(env!("CARGO_BIN_EXE_x402-probe"))
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
