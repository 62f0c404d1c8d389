//! Telling systemd how the daemon is doing, in `sd_notify(3)`'s protocol: one datagram of
//! `KEY=value` lines to the unix socket named by `$NOTIFY_SOCKET` (a path, or an abstract name
//! written `@name`).
//!
//! - `READY=1` once the store is open and the schedule built (the unit is `Type=notify`: systemd
//!   starts what depends on us only then);
//! - `STATUS=` with the counts (`systemctl status` shows it), refreshed while the loop runs;
//! - `WATCHDOG=1` from the scheduler's loop itself, never from a timer of its own: a loop that
//!   hangs stops pinging, and systemd aborts and restarts the service (`WatchdogSec=`);
//! - `STOPPING=1` when a stop begins.
//!
//! Without `$NOTIFY_SOCKET` (not under systemd, or a simulated run) every call does nothing. A
//! failed send is logged once and never stops the daemon: being supervised must not make it less
//! available. Written on std (a socket and a few lines of text) rather than taking a crate for it.

use std::ffi::OsStr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

use super::{Daemon, TimeSource};

/// How often the status line is recomputed when the watchdog does not ask for it sooner.
const STATUS_EVERY: Duration = Duration::from_secs(5);
/// The longest status line sent (systemd reads one datagram of at most a page).
const STATUS_MAX: usize = 512;

/// Where the notifications go, and when the watchdog wants its next ping.
#[derive(Default)]
pub struct Notifier {
    target: Option<Target>,
    /// Time between two pings: a quarter of `$WATCHDOG_USEC`, so that a wake-up delayed by a
    /// loaded machine still pings within half of it (what `sd_watchdog_enabled(3)` asks).
    ping_every: Option<Duration>,
    last_ping: Option<Instant>,
    last_status_check: Option<Instant>,
    last_status: Option<String>,
    warned: bool,
}

struct Target {
    socket: UnixDatagram,
    addr: SocketAddr,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET`, `$WATCHDOG_USEC` and `$WATCHDOG_PID` (for the system clock only: a
    /// simulated run is not the service).
    pub(crate) fn for_time(time: &TimeSource) -> Notifier {
        match time {
            TimeSource::System => Notifier::from_env(),
            TimeSource::Simulated { .. } => Notifier::default(),
        }
    }

    pub(crate) fn from_env() -> Notifier {
        let watchdog_usec = std::env::var("WATCHDOG_USEC").ok();
        let watchdog_pid = std::env::var("WATCHDOG_PID").ok();
        Notifier::from_vars(
            std::env::var_os("NOTIFY_SOCKET").as_deref(),
            watchdog_usec.as_deref(),
            watchdog_pid.as_deref(),
            std::process::id(),
        )
    }

    /// The variables' meaning, as `sd_notify(3)` and `sd_watchdog_enabled(3)` define it: the
    /// watchdog is on when `WATCHDOG_USEC` is a positive number and `WATCHDOG_PID`, if set, is
    /// our pid (else it is meant for another process).
    pub(crate) fn from_vars(
        notify_socket: Option<&OsStr>,
        watchdog_usec: Option<&str>,
        watchdog_pid: Option<&str>,
        our_pid: u32,
    ) -> Notifier {
        let mut notifier = Notifier::default();
        let Some(name) = notify_socket.filter(|n| !n.is_empty()) else {
            return notifier;
        };
        match target(name) {
            Ok(target) => notifier.target = Some(target),
            Err(why) => {
                tracing::warn!(socket = %name.to_string_lossy(), %why, "cannot notify systemd");
                return notifier;
            }
        }
        let usec = watchdog_usec
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|u| *u > 0);
        let ours = match watchdog_pid {
            None => true,
            Some(pid) => pid.trim().parse::<u32>().ok() == Some(our_pid),
        };
        if let (Some(usec), true) = (usec, ours) {
            notifier.ping_every =
                Some(Duration::from_micros(usec / 4).max(Duration::from_millis(1)));
        }
        notifier
    }

    /// The time between two watchdog pings, if systemd watches us.
    pub(crate) fn ping_every(&self) -> Option<Duration> {
        self.target.as_ref().and(self.ping_every)
    }

    /// `READY=1`, with the first status line.
    pub(crate) fn ready(&mut self, status: &str) {
        let status = short(status);
        self.send(&format!("READY=1\nSTATUS={status}"));
        self.last_status = Some(status.to_string());
        self.last_status_check = Some(Instant::now());
        self.last_ping = Some(Instant::now());
    }

    /// `STOPPING=1`: a stop has begun (systemd shows the unit as deactivating).
    pub(crate) fn stopping(&mut self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={}", short(status)));
    }

    /// Whether a ping or a status check is due (the status line is computed only then).
    pub(crate) fn due(&self) -> bool {
        if self.target.is_none() {
            return false;
        }
        let now = Instant::now();
        self.ping_due(now)
            || self
                .last_status_check
                .is_none_or(|last| now.duration_since(last) >= STATUS_EVERY)
    }

    fn ping_due(&self, now: Instant) -> bool {
        self.ping_every().is_some_and(|every| {
            self.last_ping
                .is_none_or(|last| now.duration_since(last) >= every)
        })
    }

    /// Called on every turn of the scheduler's loop: the watchdog ping when one is due, and the
    /// status line when it changed.
    pub(crate) fn tick(&mut self, status: &str) {
        if !self.due() {
            return;
        }
        let now = Instant::now();
        let mut message = String::new();
        if self.ping_due(now) {
            message.push_str("WATCHDOG=1\n");
            self.last_ping = Some(now);
        }
        self.last_status_check = Some(now);
        let status = short(status);
        if self.last_status.as_deref() != Some(status) {
            message.push_str(&format!("STATUS={status}\n"));
            self.last_status = Some(status.to_string());
        }
        if !message.is_empty() {
            self.send(message.trim_end());
        }
    }

    /// How long the loop may sleep: `wait`, or less when the watchdog's next ping is sooner.
    pub(crate) fn wait(&self, wait: Duration) -> Duration {
        match (self.ping_every(), self.last_ping) {
            (Some(every), Some(last)) => {
                let next = (last + every).saturating_duration_since(Instant::now());
                wait.min(next.max(Duration::from_millis(1)))
            }
            (Some(_), None) => Duration::from_millis(1),
            _ => wait,
        }
    }

    /// One datagram, without blocking (a full socket drops the message rather than stalling the
    /// loop); the first failure is logged, later ones are not.
    fn send(&mut self, message: &str) {
        let Some(target) = &self.target else {
            return;
        };
        if let Err(e) = target.socket.send_to_addr(message.as_bytes(), &target.addr)
            && !self.warned
        {
            self.warned = true;
            tracing::warn!(error = %e, "notifying systemd failed (further failures are not logged)");
        }
    }
}

/// The socket to send from and the address to send to.
fn target(name: &OsStr) -> Result<Target, String> {
    let bytes = name.as_bytes();
    let addr = match bytes.first() {
        Some(b'/') => SocketAddr::from_pathname(name).map_err(|e| e.to_string())?,
        Some(b'@') => SocketAddr::from_abstract_name(&bytes[1..]).map_err(|e| e.to_string())?,
        _ => return Err("not an absolute path nor an abstract name (@...)".into()),
    };
    let socket = UnixDatagram::unbound().map_err(|e| format!("creating a socket: {e}"))?;
    socket
        .set_nonblocking(true)
        .map_err(|e| format!("making the socket non-blocking: {e}"))?;
    Ok(Target { socket, addr })
}

/// At most [`STATUS_MAX`] bytes, on one line.
fn short(status: &str) -> &str {
    let line = status.lines().next().unwrap_or("");
    if line.len() <= STATUS_MAX {
        return line;
    }
    let mut end = STATUS_MAX;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

impl Daemon {
    /// What `systemctl status` shows: subjects probed, runs finished since this start, jobs in
    /// flight, and whether our own outage window is open.
    pub(super) fn status_line(&self, in_flight: usize) -> String {
        let active = self
            .subjects
            .values()
            .filter(|s| s.row.state == crate::store::SubjectState::Active)
            .count();
        let runs: u64 = self.subjects.values().map(|s| s.runs).sum();
        let vantage = if self.control_open.is_some() {
            "out (outage window open)"
        } else {
            "ok"
        };
        // A full disk says so first: nothing runs until it has room again.
        let storage = if self.storage_full.is_some() {
            "storage full, runs paused; "
        } else {
            ""
        };
        let rpc = if self.rpc.open.is_some() {
            "out (outage window open)"
        } else {
            "ok"
        };
        format!(
            "{storage}subjects: {active}, runs since start: {runs}, in flight: {in_flight}, vantage: {vantage}, rpc: {rpc}"
        )
    }

    /// `READY=1`: the store is open and the schedule built.
    pub(super) fn notify_ready(&mut self) {
        let status = self.status_line(0);
        self.notify.ready(&status);
    }

    /// One turn of the scheduler's loop: the watchdog ping and the status line.
    pub(super) fn notify_tick(&mut self, in_flight: usize) {
        if self.notify.due() {
            let status = self.status_line(in_flight);
            self.notify.tick(&status);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receiver() -> (tempfile::TempDir, UnixDatagram, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        (dir, socket, path)
    }

    fn recv(socket: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = socket.recv(&mut buf).expect("a notification");
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn unset_or_empty_socket_does_nothing() {
        let mut n = Notifier::from_vars(None, Some("1000000"), None, 1);
        assert!(n.ping_every().is_none());
        n.ready("x");
        assert!(!n.due(), "no status is computed without a socket");
        n.tick("x");
        assert_eq!(n.wait(Duration::from_secs(60)), Duration::from_secs(60));
        let n = Notifier::from_vars(Some(OsStr::new("")), None, None, 1);
        assert!(n.target.is_none());
    }

    #[test]
    fn a_relative_name_is_refused_without_panicking() {
        let mut n = Notifier::from_vars(Some(OsStr::new("relative/sock")), None, None, 1);
        assert!(n.target.is_none());
        n.stopping("x");
    }

    #[test]
    fn watchdog_follows_sd_watchdog_enabled() {
        let (_dir, _socket, path) = receiver();
        let on = |usec: Option<&str>, pid: Option<&str>| {
            Notifier::from_vars(Some(path.as_os_str()), usec, pid, 42).ping_every()
        };
        assert_eq!(on(Some("2000000"), None), Some(Duration::from_millis(500)));
        assert_eq!(
            on(Some("2000000"), Some("42")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            on(Some("2000000"), Some("43")),
            None,
            "meant for another process"
        );
        assert_eq!(on(Some("2000000"), Some("x")), None);
        assert_eq!(on(Some("0"), None), None);
        assert_eq!(on(Some("soon"), None), None);
        assert_eq!(on(None, None), None);
    }

    #[test]
    fn ready_status_pings_and_stopping_reach_a_path_socket() {
        let (_dir, socket, path) = receiver();
        let mut n = Notifier::from_vars(Some(path.as_os_str()), Some("400000"), None, 1);
        n.ready("subjects: 0");
        assert_eq!(recv(&socket), "READY=1\nSTATUS=subjects: 0");
        // The loop is told to wake by the next ping.
        assert!(n.wait(Duration::from_secs(60)) <= Duration::from_millis(100));
        std::thread::sleep(Duration::from_millis(110));
        n.tick("subjects: 0");
        assert_eq!(
            recv(&socket),
            "WATCHDOG=1",
            "an unchanged status is not sent again"
        );
        std::thread::sleep(Duration::from_millis(110));
        n.tick("subjects: 1");
        assert_eq!(recv(&socket), "WATCHDOG=1\nSTATUS=subjects: 1");
        n.stopping("stopping\nsecond line");
        assert_eq!(recv(&socket), "STOPPING=1\nSTATUS=stopping");
    }

    #[test]
    fn abstract_names_are_reached() {
        let name = format!("x402-probe-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let socket = UnixDatagram::bind_addr(&addr).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let at = format!("@{name}");
        let mut n = Notifier::from_vars(Some(OsStr::new(&at)), None, None, 1);
        n.ready("up");
        assert_eq!(recv(&socket), "READY=1\nSTATUS=up");
    }

    #[test]
    fn a_vanished_socket_is_survived() {
        let (dir, socket, path) = receiver();
        let mut n = Notifier::from_vars(Some(path.as_os_str()), Some("4000"), None, 1);
        drop(socket);
        drop(dir);
        n.ready("up");
        std::thread::sleep(Duration::from_millis(2));
        n.tick("up");
        n.stopping("down");
        assert!(n.warned, "the failure was logged once");
    }

    #[test]
    fn long_status_is_cut_on_a_char_boundary() {
        let long = "é".repeat(400);
        let cut = short(&long);
        assert!(cut.len() <= STATUS_MAX);
        assert!(long.starts_with(cut));
    }
}
