//! One subject for a simulated year (issue 20): the lab's `honest-v2` endpoint rated by the real
//! daemon on a simulated clock at the default cadence (a free run every 3 hours with the default
//! 5 samples: 2,920 runs; a paid call at the default sampling, at most every 7 days, once its free
//! evidence is verdict-ready), and the daemon's CPU per run in the first and the last 30 days.
//! Goal: the last 30 days' CPU per run at most 1.2 times the first 30 days'.
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
//! Baselines (same run): the first 30 days; and the lab's own CPU per run in each leg, whose work
//! is constant, so that a machine slower in one leg than in the other is told apart from growth.
//! Run with `cargo bench --bench year` (`--days N` for a shorter year, in legs of `N / 12` days,
//! the figure read from the first and the last).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

#[path = "../tests/daemon_support/mod.rs"]
#[allow(unused_imports)]
mod daemon_support;

use daemon_support::{DAY, Settings, config_text, start_ms};
use x402_probe::clock::ManualClock;
use x402_probe::config::DaemonConfig;
use x402_probe::daemon::Daemon;

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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let days: i64 = args
        .iter()
        .position(|a| a == "--days")
        .and_then(|i| args.get(i + 1))
        .and_then(|d| d.parse().ok())
        .unwrap_or(365);
    let leg = (days / 12).max(1);
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

    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(dir.path());
    settings.subjects = vec![subject];
    settings.samples = 5;
    settings.paid_min_interval_secs = 604_800;
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
    let mut legs = Vec::new();
    let wall = Instant::now();
    // Every leg of `leg` days is read on its own (the first and the last are the figure; the ones
    // between show where in the year the cost per run grows).
    let mut ends: Vec<i64> = (1..)
        .map(|i| i * leg)
        .take_while(|&end| end < days - leg)
        .collect();
    ends.extend([days - leg, days]);
    ends.dedup();
    for &until_day in &ends {
        let (all0, lab0, runs0) = (cpu_of_process(), cpu_of_lab(), runs_in(dir.path()));
        let leg_wall = Instant::now();
        daemon_rt
            .block_on(Daemon::run_simulated(
                config.clone(),
                None,
                clock.clone(),
                start + until_day * DAY,
                0,
            ))
            .expect("the daemon runs to the end");
        let runs = runs_in(dir.path()) - runs0;
        let lab_cpu = cpu_of_lab() - lab0;
        let cpu = cpu_of_process() - all0 - lab_cpu;
        eprintln!(
            "to day {until_day}: {runs} runs, daemon {cpu:.2} s CPU ({:.1} ms a run), lab {lab_cpu:.2} s ({:.1} ms a run), wall {:.0} s",
            cpu * 1000.0 / runs.max(1) as f64,
            lab_cpu * 1000.0 / runs.max(1) as f64,
            leg_wall.elapsed().as_secs_f64()
        );
        legs.push((runs, cpu, lab_cpu));
    }
    let per_run = |(runs, cpu, _): (u64, f64, f64)| cpu * 1000.0 / runs.max(1) as f64;
    let lab_per_run = |(runs, _, lab): (u64, f64, f64)| lab * 1000.0 / runs.max(1) as f64;
    let (first, last) = (legs[0], legs[legs.len() - 1]);
    let ratio = per_run(last) / per_run(first);
    let total_runs = runs_in(dir.path());
    let bytes = std::fs::metadata(dir.path().join("ledger.sqlite"))
        .map(|m| m.len())
        .unwrap_or(0);
    println!(
        "year: {days} simulated days, {total_runs} runs, {:.0} s wall",
        wall.elapsed().as_secs_f64()
    );
    println!(
        "  daemon CPU per run, first {leg} days: {:.1} ms ({} runs; the lab {:.1} ms per run)",
        per_run(first),
        first.0,
        lab_per_run(first)
    );
    println!(
        "  daemon CPU per run, last {leg} days:  {:.1} ms ({} runs; the lab {:.1} ms per run)",
        per_run(last),
        last.0,
        lab_per_run(last)
    );
    println!(
        "  ratio last / first: {ratio:.2} (goal at most 1.2: {})",
        if ratio <= 1.2 { "met" } else { "NOT met" }
    );
    // The lab's work per run is the same in every leg (the same requests served, the same paid
    // call at the same interval), so its CPU per run says how fast the machine ran each leg: the
    // daemon's ratio over the lab's is the daemon's growth with the machine's drift taken out.
    let lab_ratio = lab_per_run(last) / lab_per_run(first);
    let against_lab = ratio / lab_ratio;
    println!(
        "  the lab's own CPU per run, last / first: {lab_ratio:.2} (constant work: the machine's drift between the legs); the daemon's ratio against it: {against_lab:.2} (goal at most 1.2: {})",
        if against_lab <= 1.2 { "met" } else { "NOT met" }
    );
    println!("  ledger file after the year: {:.1} MB", bytes as f64 / 1e6);
    drop(lab);
    drop(lab_rt);
}
