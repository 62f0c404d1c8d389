//! Progress on long work, as a user sees it: `x402-probe-lab demo` on two lab endpoints with its
//! stderr on a pseudo-terminal (one line redrawn in place: carriage returns, the rest of the line
//! cleared, the last state kept), in a pipe (plain lines, no control characters), and `--quiet`
//! (none).

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_x402-probe-lab");
const DEMO: [&str; 5] = [
    "demo",
    "--scenario",
    "honest-v2",
    "--scenario",
    "overcharge",
];

/// A pseudo-terminal: (master, slave).
fn pty() -> (std::fs::File, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty(3) writes two descriptors we then own; no name, termios or size given.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are open and ours alone.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            OwnedFd::from_raw_fd(slave),
        )
    }
}

#[test]
fn the_demo_shows_progress_on_a_terminal_as_lines_in_a_pipe_and_none_when_quiet() {
    // On a terminal.
    let (mut master, slave) = pty();
    let mut child = Command::new(BIN)
        .args(DEMO)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::from(slave))
        .spawn()
        .expect("the demo starts");
    // Our copy of the slave went to the child (moved into `Stdio`): once the demo exits, reading
    // the master ends (EIO).
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match master.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    assert!(child.wait().unwrap().success());
    let terminal = String::from_utf8_lossy(&seen).into_owned();
    assert!(terminal.contains("\rfree runs: 0/2"), "{terminal:?}");
    assert!(terminal.contains("\x1b[K"), "{terminal:?}");
    assert!(
        terminal.contains("\rfree runs: 2/2 (100%)")
            && terminal.contains("\rpaid calls: 2/2 (100%)"),
        "{terminal:?}"
    );

    // In a pipe: plain lines.
    let out = Command::new(BIN)
        .args(DEMO)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    assert!(out.status.success());
    let piped = String::from_utf8_lossy(&out.stderr);
    assert!(
        !piped.contains('\r') && !piped.contains('\x1b'),
        "{piped:?}"
    );
    let lines: Vec<&str> = piped.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with("free runs: 0/2")),
        "{piped}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("free runs: 2/2 (100%)") && l.contains("done in")),
        "{piped}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("paid calls: 2/2 (100%)")),
        "{piped}"
    );
    // The demo's own output is unchanged on stdout.
    assert!(String::from_utf8_lossy(&out.stdout).contains("endpoints behaved as the lab promised"));

    // Quiet: none.
    let out = Command::new(BIN)
        .args(DEMO)
        .arg("--quiet")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    assert!(out.status.success());
    let quiet = String::from_utf8_lossy(&out.stderr);
    assert!(
        !quiet.contains("free runs") && !quiet.contains("paid calls"),
        "{quiet:?}"
    );
}
