//! Progress on long work, as a user sees it: `x402-probe-lab demo` on two lab endpoints with its
//! stderr on a pseudo-terminal (one line redrawn in place: carriage returns, the rest of the line
//! cleared, the last state kept), in a pipe (plain lines, no control characters), and `--quiet`
//! (none); then `simulate`, and `ledger verify`, `recompute --ledger` and `recalibrate` on the
//! ledger it leaves, the same three ways.

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

/// The command's stderr as a terminal shows it, with whether it exited 0.
fn on_terminal(args: &[&str]) -> (bool, String) {
    let (mut master, slave) = pty();
    let mut child = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::from(slave))
        .spawn()
        .expect("the command starts");
    // Our copy of the slave went to the child (moved into `Stdio`): once it exits, reading the
    // master ends (EIO).
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match master.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    let ok = child.wait().unwrap().success();
    (ok, String::from_utf8_lossy(&seen).into_owned())
}

/// The command's stderr in a pipe, with its exit code.
fn in_pipe(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let piped = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !piped.contains('\r') && !piped.contains('\x1b'),
        "{args:?}: {piped:?}"
    );
    (out.status.code(), piped)
}

/// Some line of `text` starts with `start` and contains `also`.
fn has_line(text: &str, start: &str, also: &str) -> bool {
    text.lines()
        .any(|l| l.starts_with(start) && l.contains(also))
}

#[test]
fn the_demo_shows_progress_on_a_terminal_as_lines_in_a_pipe_and_none_when_quiet() {
    // On a terminal.
    let (ok, terminal) = on_terminal(&DEMO);
    assert!(ok);
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

#[test]
fn simulate_and_the_ledger_walks_show_progress_on_a_terminal_in_a_pipe_and_not_when_quiet() {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("sim");
    let out_arg = out.to_str().unwrap();
    let simulate = [
        "simulate",
        "--out",
        out_arg,
        "--subjects",
        "2",
        "--days",
        "15",
    ];
    // On a terminal: the simulated clock's hours, redrawn in place to the last.
    let (ok, terminal) = on_terminal(&simulate);
    assert!(ok, "{terminal}");
    assert!(
        terminal.contains("\rsimulated hours: 0/360"),
        "{terminal:?}"
    );
    assert!(
        terminal.contains("\rsimulated hours: 360/360 (100%)") && terminal.contains("\x1b[K"),
        "{terminal:?}"
    );

    let state = out.join("state");
    let state = state.to_str().unwrap();
    let verify = ["ledger", "verify", "--state-dir", state];
    let (ok, terminal) = on_terminal(&verify);
    assert!(ok, "{terminal}");
    assert!(
        terminal.contains("\rentries verified: ") && terminal.contains("(100%)"),
        "{terminal:?}"
    );
    let (code, piped) = in_pipe(&verify);
    assert_eq!(code, Some(0), "{piped}");
    assert!(has_line(&piped, "entries verified: ", "(100%)"), "{piped}");
    let (code, quiet) = in_pipe(&[&verify[..], &["--quiet"]].concat());
    assert_eq!(code, Some(0), "{quiet}");
    assert!(!quiet.contains("entries verified"), "{quiet:?}");

    // recompute --ledger: the verification's walk, then the recomputation's.
    let (code, piped) = in_pipe(&["recompute", "--ledger", state]);
    assert_eq!(code, Some(0), "{piped}");
    assert!(has_line(&piped, "entries verified: ", "(100%)"), "{piped}");
    assert!(
        has_line(&piped, "entries recomputed: ", "(100%)"),
        "{piped}"
    );
    let (_, quiet) = in_pipe(&["recompute", "--ledger", state, "--quiet"]);
    assert!(!quiet.contains("entries"), "{quiet:?}");

    // recalibrate: the subjects it reads (the two; the control endpoint is not a subject),
    // whatever it then decides about so small a population.
    let labels = out.join("labels.json");
    let rec = out.join("recalibration");
    let recalibrate = [
        "recalibrate",
        "--state",
        state,
        "--out",
        rec.to_str().unwrap(),
        "--labels",
        labels.to_str().unwrap(),
    ];
    let (_, piped) = in_pipe(&recalibrate);
    assert!(
        has_line(&piped, "subjects read: 2/2 (100%)", "done in"),
        "{piped}"
    );
    let (_, quiet) = in_pipe(&[&recalibrate[..], &["--quiet"]].concat());
    assert!(!quiet.contains("subjects read"), "{quiet:?}");
}
