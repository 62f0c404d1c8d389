//! Telling systemd how the daemon is doing, in `sd_notify(3)`'s protocol: one datagram of
//! `KEY=value` lines to the unix socket named by `$NOTIFY_SOCKET` (a path, or an abstract name
//! written `@name`).
//!
//! - `READY=1` once the store is open and the schedule built (the unit is `Type=notify`: systemd
//!   starts what depends on us only then);
//! - `STATUS=` with the counts (`systemctl status` shows it), refreshed while the loop runs;
//! - `WATCHDOG=1` only while the scheduler's loop turns: the loop stamps each turn, and a small
//!   thread pings at a quarter of `WatchdogSec=` as long as the latest stamp is at most half of
//!   it old. A loop that hangs stops the pings and systemd aborts and restarts the service; a loop
//!   slowed for a moment by a busy machine (measured: a turn 0.5-0.7 s late on 2 cores under six
//!   busy processes, in the test profile, where a sleeping thread woke within 26 ms) misses none;
//! - `STOPPING=1` when a stop begins; the pings end there (the stop is bounded by its grace).
//!
//! Without `$NOTIFY_SOCKET` (not under systemd, or a simulated run) every call does nothing. A
//! failed send is logged once and never stops the daemon: being supervised must not make it less
//! available. Written on std (a socket and a few lines of text) rather than taking a crate for it.

use std::ffi::OsStr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use super::{Daemon, TimeSource};

/// How often the status line is recomputed when the watchdog does not ask for it sooner.
const STATUS_EVERY: Duration = Duration::from_secs(5);
/// The longest status line sent (systemd reads one datagram of at most a page).
const STATUS_MAX: usize = 512;

/// Where the notifications go, and the watchdog's pinger.
#[derive(Default)]
pub struct Notifier {
    target: Option<Arc<Target>>,
    /// `$WATCHDOG_USEC`, when the watchdog is on and meant for us.
    watchdog: Option<Duration>,
    /// When the loop last turned: stamped by the loop, read by the pinger.
    turned: Arc<Mutex<Option<Instant>>>,
    /// The pinger thread's stop: dropping it ends the thread.
    pinger: Option<mpsc::Sender<()>>,
    last_status_check: Option<Instant>,
    last_status: Option<String>,
}

struct Target {
    socket: UnixDatagram,
    addr: SocketAddr,
    warned: AtomicBool,
}

/// Whether the loop counts as alive: it turned at most half the watchdog time ago. The pinger
/// pings only then, so after a hang systemd sees no ping within at most the watchdog time plus
/// three quarters of it, and restarts the service.
fn alive(now: Instant, turned: Instant, watchdog: Duration) -> bool {
    now.saturating_duration_since(turned) <= watchdog / 2
}

/// The pinger: every quarter of the watchdog time, `WATCHDOG=1` if the loop is alive; a pause
/// of the pings is logged when it begins. Ends when its stop is sent or dropped.
fn ping(
    target: Arc<Target>,
    turned: Arc<Mutex<Option<Instant>>>,
    watchdog: Duration,
    stop: mpsc::Receiver<()>,
) {
    let every = ping_every(watchdog);
    let mut withheld = false;
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(every) {
        let last = *turned.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        match last {
            Some(last) if alive(now, last, watchdog) => {
                target.send("WATCHDOG=1");
                withheld = false;
            }
            _ if !withheld => {
                withheld = true;
                let since = last.map(|l| now.saturating_duration_since(l));
                tracing::error!(
                    since = ?since,
                    "the scheduler's loop has not turned for over half the watchdog time: \
                     the watchdog pings are withheld"
                );
            }
            _ => {}
        }
    }
}

/// A quarter of the watchdog time (at least 1 ms): a ping skipped by a late wake-up still leaves
/// one within half of it, as `sd_watchdog_enabled(3)` asks.
fn ping_every(watchdog: Duration) -> Duration {
    (watchdog / 4).max(Duration::from_millis(1))
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
            Ok(target) => notifier.target = Some(Arc::new(target)),
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
            notifier.watchdog = Some(Duration::from_micros(usec));
        }
        notifier
    }

    /// The time between two watchdog pings, if systemd watches us.
    pub(crate) fn ping_every(&self) -> Option<Duration> {
        self.target.as_ref().and(self.watchdog).map(ping_every)
    }

    /// `READY=1`, with the first status line; the pinger starts (the loop is about to turn).
    pub(crate) fn ready(&mut self, status: &str) {
        let status = short(status);
        self.send(&format!("READY=1\nSTATUS={status}"));
        self.last_status = Some(status.to_string());
        self.last_status_check = Some(Instant::now());
        self.turn();
        if let (Some(target), Some(watchdog), None) = (&self.target, self.watchdog, &self.pinger) {
            let (stop, stopped) = mpsc::channel();
            let (target, turned) = (target.clone(), self.turned.clone());
            let started = std::thread::Builder::new()
                .name("watchdog".into())
                .spawn(move || ping(target, turned, watchdog, stopped));
            match started {
                Ok(_) => self.pinger = Some(stop),
                Err(e) => tracing::error!(error = %e, "the watchdog's pinger did not start"),
            }
        }
    }

    /// `STOPPING=1`: a stop has begun (systemd shows the unit as deactivating); the pings end.
    pub(crate) fn stopping(&mut self, status: &str) {
        self.pinger = None;
        self.send(&format!("STOPPING=1\nSTATUS={}", short(status)));
    }

    /// The loop turned: what the pinger reads.
    fn turn(&self) {
        if self.watchdog.is_some() {
            *self.turned.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        }
    }

    /// Whether a status check is due (the status line is computed only then).
    pub(crate) fn due(&self) -> bool {
        self.target.is_some()
            && self
                .last_status_check
                .is_none_or(|last| last.elapsed() >= STATUS_EVERY)
    }

    /// Called on every turn of the scheduler's loop: the turn is stamped, and the status line
    /// (computed by the caller only when [`Notifier::due`]) sent when it changed.
    pub(crate) fn tick(&mut self, status: Option<&str>) {
        self.turn();
        let Some(status) = status else {
            return;
        };
        self.last_status_check = Some(Instant::now());
        let status = short(status);
        if self.last_status.as_deref() != Some(status) {
            self.send(&format!("STATUS={status}"));
            self.last_status = Some(status.to_string());
        }
    }

    /// How long the loop may sleep: `wait`, or a quarter of the watchdog time if that is less
    /// (the loop turns at least that often, for the pinger to see it alive).
    pub(crate) fn wait(&self, wait: Duration) -> Duration {
        self.ping_every().map_or(wait, |every| wait.min(every))
    }

    /// One datagram, without blocking (a full socket drops the message rather than stalling the
    /// loop).
    fn send(&self, message: &str) {
        if let Some(target) = &self.target {
            target.send(message);
        }
    }
}

impl Target {
    /// One datagram, without blocking; the first failure is logged, later ones are not.
    fn send(&self, message: &str) {
        if let Err(e) = self.socket.send_to_addr(message.as_bytes(), &self.addr)
            && !self.warned.swap(true, Ordering::Relaxed)
        {
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
    Ok(Target {
        socket,
        addr,
        warned: AtomicBool::new(false),
    })
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
        let status = self.notify.due().then(|| self.status_line(in_flight));
        self.notify.tick(status.as_deref());
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
        n.tick(Some("x"));
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
        // The loop is told to turn at least every ping (a quarter of the watchdog time).
        assert_eq!(n.wait(Duration::from_secs(60)), Duration::from_millis(100));
        n.tick(None);
        assert_eq!(recv(&socket), "WATCHDOG=1");
        // A status check: an unchanged line is not sent again, a changed one is.
        n.tick(Some("subjects: 0"));
        n.tick(Some("subjects: 1"));
        // Pings may come before it on a busy machine: read until the status line comes.
        let mut heard = Vec::new();
        while heard.len() < 20 && !heard.iter().any(|m: &String| m.starts_with("STATUS=")) {
            n.tick(None);
            heard.push(recv(&socket));
        }
        assert!(
            heard.contains(&"STATUS=subjects: 1".to_string()),
            "{heard:?}"
        );
        assert!(
            !heard.contains(&"STATUS=subjects: 0".to_string()),
            "{heard:?}"
        );
        n.stopping("stopping\nsecond line");
        let mut last = recv(&socket);
        while last == "WATCHDOG=1" {
            last = recv(&socket);
        }
        assert_eq!(last, "STOPPING=1\nSTATUS=stopping");
        // No ping after STOPPING=1, however the loop turns.
        socket
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        n.tick(None);
        assert!(
            socket.recv(&mut [0u8; 64]).is_err(),
            "a ping after STOPPING=1"
        );
    }

    #[test]
    fn alive_is_a_turn_within_half_the_watchdog_time() {
        let t = Instant::now();
        let watchdog = Duration::from_secs(4);
        assert!(alive(t + Duration::from_secs(2), t, watchdog));
        assert!(!alive(t + Duration::from_millis(2001), t, watchdog));
        // A turn stamped after `now` was read (the loop and the pinger race): alive.
        assert!(alive(t, t + Duration::from_millis(5), watchdog));
    }

    /// The pings come from a thread, but only while the loop turns: a loop that stops turning
    /// stops them within half the watchdog time (and a ping period), and they come back with it.
    #[test]
    fn a_loop_that_stops_turning_stops_the_pings() {
        let (_dir, socket, path) = receiver();
        // Watchdog 800 ms: a ping every 200 ms while the loop turned within 400 ms.
        let mut n = Notifier::from_vars(Some(path.as_os_str()), Some("800000"), None, 1);
        n.ready("up");
        assert_eq!(recv(&socket), "READY=1\nSTATUS=up");
        let turning = Instant::now();
        while turning.elapsed() < Duration::from_millis(700) {
            n.tick(None);
            std::thread::sleep(Duration::from_millis(20));
        }
        n.tick(None);
        let stopped_turning = Instant::now();
        socket.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 64];
        let pings_while_turning = std::iter::from_fn(|| socket.recv(&mut buf).ok()).count();
        assert!(
            pings_while_turning >= 2,
            "{pings_while_turning} pings in 700 ms of turns"
        );
        socket.set_nonblocking(false).unwrap();
        // The loop hangs: the pings stop once the turn is 400 ms old (a ping read up to 400 ms
        // later is allowed for a busy machine; a pinger that ignores the turns pings on to 2 s).
        let mut last_ping = None;
        socket
            .set_read_timeout(Some(Duration::from_millis(900)))
            .unwrap();
        while stopped_turning.elapsed() < Duration::from_secs(2) && socket.recv(&mut buf).is_ok() {
            last_ping = Some(stopped_turning.elapsed());
        }
        assert!(
            last_ping
                .is_none_or(|at| at <= Duration::from_millis(400) + Duration::from_millis(400)),
            "a ping {last_ping:?} after the loop's last turn (watchdog 800 ms)"
        );
        // It turns again: the pings come back.
        n.tick(None);
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(recv(&socket), "WATCHDOG=1");
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
        n.tick(Some("up"));
        n.stopping("down");
        let target = n.target.as_ref().expect("the socket was named");
        assert!(
            target.warned.load(Ordering::Relaxed),
            "the failure was logged once"
        );
    }

    #[test]
    fn long_status_is_cut_on_a_char_boundary() {
        let long = "é".repeat(400);
        let cut = short(&long);
        assert!(cut.len() <= STATUS_MAX);
        assert!(long.starts_with(cut));
    }
}
