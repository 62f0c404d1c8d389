//! One subject for a simulated year (issue 20): the lab's `honest-v2` endpoint rated by the real
//! daemon on a simulated clock at the default cadence (a free run every 3 hours with the default
//! 5 samples: 2,920 runs; a paid call at the default sampling, at most every 7 days, once its free
//! evidence is verdict-ready), and the daemon's CPU per run in the first and the last 30 days.
//! Goal: the last 30 days' CPU per run at most 1.2 times the first 30 days'.
//!
//! The daemon as it ships: the service binary's allocator and its settings (`tune_allocator`).
//! The per-subject spend cap is raised for the bench: caps count real time, and the simulated
//! year's paid calls all fall inside a few real minutes (see `main`).
//!
//! How the daemon's CPU is told from the lab's: both run in this process. The lab's threads live
//! for the whole run (its runtime `lab-rt`, the servers' `tokio-rt-worker`s, the `anvil-*`
//! readers), so their CPU is the sum of their user and system time read from
//! `/proc/self/task/*/stat`. The daemon's is the process's whole CPU (`/proc/self/stat`, which
//! keeps the time of threads that have exited) less the lab's: its loop on this thread, its
//! runtime's workers and blocking pool (`daemon-rt`), and its writer thread (`ledger-writer`,
//! where every rescore runs), which each leg starts and ends. The chain (anvil) is a child
//! process and counts for neither. The year runs in legs of 30 days on one state directory
//! (days 0-30, 30-60, ..., 300-330, 330-335, 335-365): the CPU and the run
//! entries are read between them, so each figure is a whole leg's CPU over its runs.
//!
//! The figure: the first and the last leg, each run again twice from a copy of the state
//! directory as it was when that leg began (with the clock's instant), alternated (first, last,
//! last, first), so that the two are measured minutes apart. The year's own first and last legs
//! are ten minutes apart, and a shared machine's speed moved by up to a third in that time (the
//! lab's CPU per run, whose work is the same in every leg). Their ratio is printed too, with the
//! lab's, as are the replays' lab CPU per run. The replayed first leg also leaves out what the
//! process does once (its first connections, its allocator's first pages), which the year's first
//! leg carries: the replays' ratio is the stricter.
//! Run with `cargo bench --bench year` (`--days N` for a shorter year, in legs of `N / 12` days;
//! `--replays N` for N of each, 0 for none; `--keep DIR` to keep the year's state directory
//! there, as it was after the year).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

#[path = "../tests/daemon_support/mod.rs"]
#[allow(unused_imports)]
mod daemon_support;

use daemon_support::{DAY, Settings, config_text, start_ms};
use x402_probe::clock::{Clock, ManualClock};
use x402_probe::config::DaemonConfig;
use x402_probe::daemon::Daemon;

/// The service's allocator (`src/main.rs`), so that the year measures the daemon as it ships: the
/// system's allocator, whose arenas the daemon's threads share, costs more and drifts differently.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The lab's threads (see the file's comment).
const LAB_THREADS: [&str; 3] = ["lab-rt", "tokio-rt-worker", "anvil"];

/// utime + stime in seconds from a `stat` line (`pid (comm) state ...`; comm may hold spaces,
/// so the fields are read after the last ')'), with the comm.
fn stat_cpu(stat: &str) -> Option<(&str, f64)> {
    let ticks = 100.0; // USER_HZ on Linux
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let fields: Vec<&str> = stat.get(close + 2..)?.split(' ').collect();
    // Fields 14 and 15 of stat (utime, stime) are 11 and 12 after the state.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((&stat[open + 1..close], (utime + stime) as f64 / ticks))
}

/// CPU seconds of the whole process, exited threads included.
fn cpu_of_process() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| stat_cpu(&stat).map(|(_, cpu)| cpu))
        .unwrap_or(0.0)
}

/// CPU seconds of the lab's threads.
fn cpu_of_lab() -> f64 {
    LAB_THREADS.iter().map(|prefix| cpu_of(prefix)).sum()
}

/// CPU seconds of this process's live threads whose name starts with `prefix`.
fn cpu_of(prefix: &str) -> f64 {
    let mut total = 0.0;
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let Ok(task) = task else { continue };
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        if let Some((comm, cpu)) = stat_cpu(&stat)
            && comm.starts_with(prefix)
        {
            total += cpu;
        }
    }
    total
}

/// One leg of the year: its run entries, the daemon's and the lab's CPU seconds, its wall time.
#[derive(Debug, Clone, Copy)]
struct Leg {
    runs: u64,
    cpu: f64,
    lab: f64,
    wall: f64,
    /// CLOCK_MONOTONIC at its start and end (`perf record -k CLOCK_MONOTONIC` stamps its
    /// samples on the same clock, so a profile of the whole bench can be cut into its legs).
    monotonic: (f64, f64),
}

impl Leg {
    fn per_run(&self) -> f64 {
        self.cpu * 1000.0 / self.runs.max(1) as f64
    }

    fn lab_per_run(&self) -> f64 {
        self.lab * 1000.0 / self.runs.max(1) as f64
    }

    fn line(&self) -> String {
        format!(
            "{} runs, daemon {:.2} s CPU ({:.1} ms a run), lab {:.2} s ({:.1} ms a run), wall {:.0} s (monotonic {:.3} to {:.3})",
            self.runs,
            self.cpu,
            self.per_run(),
            self.lab,
            self.lab_per_run(),
            self.wall,
            self.monotonic.0,
            self.monotonic.1
        )
    }
}

/// CLOCK_MONOTONIC in seconds.
fn monotonic() -> f64 {
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a plain syscall writing into a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Makes `to` a copy of the state directory `from` (its files). The daemon's last connections
/// may still be closing as its run returns (the last to close checkpoints the write-ahead log and
/// removes it), so the copy waits for the directory to hold still and starts over if a file went.
fn copy_dir(from: &Path, to: &Path) {
    let listing = || -> Vec<(std::ffi::OsString, u64, std::time::SystemTime)> {
        let mut files: Vec<_> = std::fs::read_dir(from)
            .expect("the directory reads")
            .filter_map(|f| {
                let f = f.ok()?;
                let meta = f.metadata().ok()?;
                Some((f.file_name(), meta.len(), meta.modified().ok()?))
            })
            .collect();
        files.sort();
        files
    };
    for _ in 0..50 {
        let before = listing();
        std::thread::sleep(std::time::Duration::from_millis(200));
        if listing() != before {
            continue;
        }
        if to.exists() {
            std::fs::remove_dir_all(to).expect("the old copy is removed");
        }
        std::fs::create_dir_all(to).expect("the directory is made");
        let copied =
            before.iter().all(
                |(name, _, _)| match std::fs::copy(from.join(name), to.join(name)) {
                    Ok(_) => true,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
                    Err(e) => panic!("copying {name:?}: {e}"),
                },
            );
        if copied && listing() == before {
            return;
        }
    }
    panic!(
        "{} never held still long enough to be copied",
        from.display()
    );
}

/// Run entries in the ledger (0 before the daemon has made it).
fn runs_in(dir: &Path) -> u64 {
    let Ok(conn) = rusqlite::Connection::open(dir.join("ledger.sqlite")) else {
        return 0;
    };
    conn.query_row("SELECT count(*) FROM entry WHERE kind = 'run'", [], |r| {
        r.get::<_, i64>(0)
    })
    .map_or(0, |n| n.max(0) as u64)
}

/// The value after `name` on the command line, when there is one that parses.
fn option<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1)?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let days: i64 = option(&args, "--days").unwrap_or(365);
    let replays: usize = option(&args, "--replays").unwrap_or(2);
    let leg = (days / 12).max(1);
    x402_probe::tune_allocator();
    x402_probe::install_crypto_provider();
    x402_probe::cmd::daemon::init_logs("warn");

    let lab_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("lab-rt")
        .thread_keep_alive(std::time::Duration::from_secs(86_400))
        .enable_all()
        .build()
        .unwrap();
    let lab = lab_rt.block_on(daemon_support::lab(&["honest-v2"]));
    let subject = lab.endpoint("honest-v2").unwrap().url.clone();

    // `--keep DIR`: the state directory is made there and kept, for reading the year's ledger.
    let kept: Option<std::path::PathBuf> = option(&args, "--keep");
    let temp = tempfile::tempdir().unwrap();
    let dir = kept.as_deref().unwrap_or(temp.path());
    let mut settings = Settings::new(dir);
    settings.subjects = vec![subject];
    settings.samples = 5;
    settings.paid_min_interval_secs = 604_800;
    // The spend caps count real time (they guard money), while the simulated year passes in
    // about ten real minutes: its ~52 paid calls all fall inside one real day. Under the default
    // cap of $0.50 per subject per day the last ~3 weeks' calls would be refused, and every run
    // from then on would try to pay again: another workload than a year at the default
    // sampling. A real year spends about a cent a week on this subject.
    settings.pay_caps.per_subject_per_day = "2".into();
    let text = config_text(&lab, &settings);
    let config: DaemonConfig = toml::from_str(&text).expect("the config parses");
    config.validate().expect("the config is valid");

    let daemon_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("daemon-rt")
        .thread_keep_alive(std::time::Duration::from_secs(86_400))
        .enable_all()
        .build()
        .unwrap();
    let start = start_ms();
    let clock = Arc::new(ManualClock::at_ms(start));
    let run_leg = |until_ms: i64| -> Leg {
        let (all0, lab0, runs0) = (cpu_of_process(), cpu_of_lab(), runs_in(dir));
        let began = monotonic();
        let leg_wall = Instant::now();
        daemon_rt
            .block_on(Daemon::run_simulated(
                config.clone(),
                None,
                clock.clone(),
                until_ms,
                0,
            ))
            .expect("the daemon runs to the end");
        let lab = cpu_of_lab() - lab0;
        Leg {
            runs: runs_in(dir) - runs0,
            cpu: cpu_of_process() - all0 - lab,
            lab,
            wall: leg_wall.elapsed().as_secs_f64(),
            monotonic: (began, monotonic()),
        }
    };
    let snapshots = tempfile::tempdir().unwrap();
    let (first_copy, last_copy) = (
        snapshots.path().join("first"),
        snapshots.path().join("last"),
    );
    let mut legs = Vec::new();
    let wall = Instant::now();
    // Every leg of `leg` days is read on its own (the ones between the first and the last show
    // where in the year the cost per run grows). The state directory is copied as the first and
    // the last leg begin (with the clock's instant), for the replays below.
    let mut ends: Vec<i64> = (1..)
        .map(|i| i * leg)
        .take_while(|&end| end < days - leg)
        .collect();
    ends.extend([days - leg, days]);
    ends.dedup();
    let mut last_from_ms = start;
    for (i, &until_day) in ends.iter().enumerate() {
        if i == 0 {
            copy_dir(dir, &first_copy);
        }
        if i == ends.len() - 1 {
            copy_dir(dir, &last_copy);
            last_from_ms = clock.now_ms();
        }
        let leg = run_leg(start + until_day * DAY);
        eprintln!("to day {until_day}: {}", leg.line());
        legs.push(leg);
    }
    let year_wall = wall.elapsed().as_secs_f64();
    let total_runs = runs_in(dir);
    let bytes = std::fs::metadata(dir.join("ledger.sqlite"))
        .map(|m| m.len())
        .unwrap_or(0);
    let (first, last) = (legs[0], legs[legs.len() - 1]);
    // The replays below reuse the state directory: with `--keep`, the year's is put back after.
    let year_copy = snapshots.path().join("year");
    if kept.is_some() {
        copy_dir(dir, &year_copy);
    }

    // The replays: the first and the last leg run again from their copies, alternated (first,
    // last, last, first, ...), so that both are measured minutes apart on the same machine,
    // never one at the year's start and the other ten minutes later. The year's own legs are
    // read that far apart, and a shared machine's speed moved by up to a third between them (the
    // lab's CPU per run for the same work).
    let mut replayed: [Vec<Leg>; 2] = [Vec::new(), Vec::new()];
    for i in 0..2 * replays {
        let which = if i % 4 == 0 || i % 4 == 3 { 0 } else { 1 };
        let (copy, from_ms, until_ms, name) = if which == 0 {
            (&first_copy, start, start + leg * DAY, "first")
        } else {
            (&last_copy, last_from_ms, start + days * DAY, "last")
        };
        copy_dir(copy, dir);
        clock.set_ms(from_ms);
        let leg_run = run_leg(until_ms);
        eprintln!("replay of the {name} {leg} days: {}", leg_run.line());
        replayed[which].push(leg_run);
    }
    // What a start and a stop cost on each copy, with nothing run (the clock does not move): a
    // part of every leg's CPU, which a daemon running all year pays once.
    let starts: Vec<Leg> = [(&first_copy, start), (&last_copy, last_from_ms)]
        .into_iter()
        .map(|(copy, from_ms)| {
            copy_dir(copy, dir);
            clock.set_ms(from_ms);
            run_leg(from_ms)
        })
        .collect();
    if kept.is_some() {
        copy_dir(&year_copy, dir);
    }
    let mean = |legs: &[Leg], f: fn(&Leg) -> f64| -> f64 {
        legs.iter().map(f).sum::<f64>() / legs.len().max(1) as f64
    };
    let verdict = |ratio: f64| if ratio <= 1.2 { "met" } else { "NOT met" };
    println!("year: {days} simulated days, {total_runs} runs, {year_wall:.0} s wall");
    println!("  ledger file after the year: {:.1} MB", bytes as f64 / 1e6);
    println!(
        "  in the year's order, first {leg} days {:.1} ms a run (the lab {:.1} ms), last {leg} days {:.1} ms (the lab {:.1} ms): ratio {:.2}; the lab's own CPU per run, constant work, moved {:.2}x between them (the machine's drift over the year's {:.0} s)",
        first.per_run(),
        first.lab_per_run(),
        last.per_run(),
        last.lab_per_run(),
        last.per_run() / first.per_run(),
        last.lab_per_run() / first.lab_per_run(),
        year_wall
    );
    if replays > 0 {
        let (a, b) = (&replayed[0], &replayed[1]);
        let ratio = mean(b, Leg::per_run) / mean(a, Leg::per_run);
        let lab_ratio = mean(b, Leg::lab_per_run) / mean(a, Leg::lab_per_run);
        for (name, legs, year_leg) in [("first", a, first), ("last", b, last)] {
            println!(
                "  daemon CPU per run, {name} {leg} days: {:.1} ms ({} replays of {} runs; the lab {:.1} ms per run)",
                mean(legs, Leg::per_run),
                legs.len(),
                year_leg.runs,
                mean(legs, Leg::lab_per_run)
            );
        }
        println!(
            "  ratio last / first, replays alternated: {ratio:.2} (goal at most 1.2: {}); the lab's own CPU per run between them {lab_ratio:.2}x",
            verdict(ratio)
        );
    }
    println!(
        "  a start and a stop with nothing run: {:.0} ms CPU on the first leg's state, {:.0} ms on the last's ({} and {} runs made); over a leg's runs, {:.2} and {:.2} ms a run",
        starts[0].cpu * 1000.0,
        starts[1].cpu * 1000.0,
        starts[0].runs,
        starts[1].runs,
        starts[0].cpu * 1000.0 / first.runs.max(1) as f64,
        starts[1].cpu * 1000.0 / last.runs.max(1) as f64,
    );
    drop(lab);
    drop(lab_rt);
}
