//! Progress of long work (`demo`'s free runs and paid calls, `simulate`'s simulated hours,
//! `recalibrate`'s subjects, the entries `ledger verify`, `recompute --ledger` and `ledger migrate`
//! walk): items done of total, rate and time left, on stderr. On a terminal one line redrawn
//! in place (at most every [`TERMINAL_EVERY`]); otherwise (journald, CI, a pipe) a plain line every
//! [`LINES_EVERY`] and one when the work ends; nothing with `--quiet`. The line itself is a pure
//! function of the counts and the time elapsed ([`line`]).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often a terminal's line is redrawn, at most.
pub const TERMINAL_EVERY: Duration = Duration::from_millis(100);
/// How often a plain line is written when output is not a terminal.
pub const LINES_EVERY: Duration = Duration::from_secs(10);

/// Where progress goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A terminal: one line redrawn in place.
    Terminal,
    /// Not a terminal: plain periodic lines.
    Lines,
    /// `--quiet`: nothing.
    Quiet,
}

impl Mode {
    /// The mode for stderr as it is now, unless `quiet`.
    pub fn for_stderr(quiet: bool) -> Mode {
        if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            Mode::Terminal
        } else {
            Mode::Lines
        }
    }
}

/// `what: done/total (percent), rate/s, time left`: the progress line, pure.
pub fn line(what: &str, done: u64, total: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    let percent = if total > 0 {
        100.0 * done as f64 / total as f64
    } else {
        100.0
    };
    let left = if done >= total {
        format!("done in {}", duration(secs))
    } else if rate > 0.0 {
        format!("{} left", duration((total - done) as f64 / rate))
    } else {
        "time left unknown".to_string()
    };
    format!("{what}: {done}/{total} ({percent:.0}%), {rate:.1}/s, {left}")
}

/// Seconds for people: `4.2 s`, `3 min 5 s`, `2 h 10 min`.
fn duration(secs: f64) -> String {
    let whole = secs.round() as u64;
    if secs < 60.0 {
        format!("{secs:.1} s")
    } else if whole < 3600 {
        format!("{} min {} s", whole / 60, whole % 60)
    } else {
        format!("{} h {} min", whole / 3600, (whole % 3600) / 60)
    }
}

/// The progress of one piece of work.
pub struct Progress {
    what: String,
    total: u64,
    done: u64,
    mode: Mode,
    started: Instant,
    shown: Option<Instant>,
    out: Box<dyn Write + Send>,
}

impl Progress {
    /// `total` items of `what`, shown on stderr in `mode`.
    pub fn new(what: impl Into<String>, total: u64, mode: Mode) -> Progress {
        Progress::to(what, total, mode, Box::new(std::io::stderr()))
    }

    /// The same, written to `out`.
    pub fn to(
        what: impl Into<String>,
        total: u64,
        mode: Mode,
        out: Box<dyn Write + Send>,
    ) -> Progress {
        let mut progress = Progress {
            what: what.into(),
            total,
            done: 0,
            mode,
            started: Instant::now(),
            shown: None,
            out,
        };
        progress.show(false);
        progress
    }

    /// `n` more items done.
    pub fn advance(&mut self, n: u64) {
        self.done = self.done.saturating_add(n).min(self.total);
        self.show(false);
    }

    /// `done` items done in all (for work that counts as it goes).
    pub fn set(&mut self, done: u64) {
        self.done = done.min(self.total);
        self.show(false);
    }

    /// The work ended (the last line is written whatever the interval).
    pub fn finish(mut self) {
        self.show(true);
    }

    fn show(&mut self, last: bool) {
        let now = Instant::now();
        let every = match self.mode {
            Mode::Quiet => return,
            Mode::Terminal => TERMINAL_EVERY,
            Mode::Lines => LINES_EVERY,
        };
        let due = self.shown.is_none_or(|at| now.duration_since(at) >= every);
        if !(last || due) {
            return;
        }
        self.shown = Some(now);
        let text = line(&self.what, self.done, self.total, now - self.started);
        // Progress is a courtesy: a closed stderr must not stop the work.
        let _ = match (self.mode, last) {
            // Redrawn in place: back to the start of the line, the line, the rest cleared.
            (Mode::Terminal, false) => write!(self.out, "\r{text}\x1b[K"),
            (Mode::Terminal, true) => writeln!(self.out, "\r{text}\x1b[K"),
            _ => writeln!(self.out, "{text}"),
        };
        let _ = self.out.flush();
    }
}

/// Progress of work that learns its total when it starts (a walk over a ledger's entries, read
/// in one transaction): nothing is shown before the first count.
pub struct Counted {
    what: &'static str,
    mode: Mode,
    shown: Option<Progress>,
}

impl Counted {
    pub fn new(what: &'static str, mode: Mode) -> Counted {
        Counted {
            what,
            mode,
            shown: None,
        }
    }

    /// `done` of `total` items done (the total as first told).
    pub fn at(&mut self, done: u64, total: u64) {
        let (what, mode) = (self.what, self.mode);
        self.shown
            .get_or_insert_with(|| Progress::new(what, total, mode))
            .set(done);
    }

    /// The work ended: its last line, when it was ever shown.
    pub fn finish(self) {
        if let Some(progress) = self.shown {
            progress.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_done_of_total_rate_and_time_left() {
        let l = line("paid calls", 10, 40, Duration::from_secs(5));
        assert_eq!(l, "paid calls: 10/40 (25%), 2.0/s, 15.0 s left");
        assert_eq!(
            line("runs", 40, 40, Duration::from_secs(200)),
            "runs: 40/40 (100%), 0.2/s, done in 3 min 20 s"
        );
        assert_eq!(
            line("runs", 0, 40, Duration::ZERO),
            "runs: 0/40 (0%), 0.0/s, time left unknown"
        );
        assert_eq!(
            line("entries", 1, 10_000, Duration::from_secs(2)),
            "entries: 1/10000 (0%), 0.5/s, 5 h 33 min left"
        );
        assert_eq!(
            line("none", 0, 0, Duration::ZERO),
            "none: 0/0 (100%), 0.0/s, done in 0.0 s"
        );
    }

    #[derive(Clone, Default)]
    struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn written(mode: Mode) -> String {
        let out = Shared::default();
        let mut p = Progress::to("items", 3, mode, Box::new(out.clone()));
        for _ in 0..3 {
            p.advance(1);
        }
        p.finish();
        String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn counted_work_shows_nothing_before_its_first_count_and_ends_at_its_last() {
        // What it writes is `Progress`'s (tested below); here, that nothing is made before the
        // first count, that the total is the first one told, and that the count never passes it.
        let mut counted = Counted::new("entries", Mode::Quiet);
        assert!(counted.shown.is_none());
        counted.at(0, 10);
        counted.at(25, 12);
        let shown = counted.shown.as_ref().unwrap();
        assert_eq!((shown.done, shown.total), (10, 10));
        counted.finish();
    }

    #[test]
    fn a_terminal_redraws_one_line_a_pipe_gets_plain_lines_and_quiet_gets_nothing() {
        let terminal = written(Mode::Terminal);
        assert!(terminal.starts_with("\ritems: 0/3"), "{terminal:?}");
        assert!(terminal.ends_with("done in 0.0 s\x1b[K\n"), "{terminal:?}");
        assert_eq!(terminal.matches('\n').count(), 1, "{terminal:?}");
        let lines = written(Mode::Lines);
        // The first line at once, then none until the interval, then the last.
        assert_eq!(
            lines.lines().collect::<Vec<_>>(),
            [
                "items: 0/3 (0%), 0.0/s, time left unknown",
                lines.lines().last().unwrap()
            ],
            "{lines:?}"
        );
        assert!(
            lines
                .lines()
                .last()
                .unwrap()
                .starts_with("items: 3/3 (100%)")
        );
        assert!(!lines.contains('\r') && !lines.contains('\x1b'));
        assert_eq!(written(Mode::Quiet), "");
    }
}
