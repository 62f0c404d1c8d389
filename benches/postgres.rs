//! Three vantages and 20,000 subjects on one PostgreSQL, against one SQLite store, in the same
//! run (issue 21): run entries appended per second per vantage and in all, and lease round trips
//! per second, each with its ratio to SQLite's figure.
//!
//! - The entries are the daemon's: it runs one simulated day against the lab's `honest-v2`
//!   endpoint (the default 5 samples and 3-hour cadence, no paid call) and its last run entry is
//!   taken back from its ledger (bodies restored) as the template of every subject's run. Each
//!   subject's run is that run under its own URL and id, with its own observation blob (a TLS
//!   time differs, as every real run's timings do), prepared as the daemon's run task prepares it
//!   (`NewEntry::prepared`: stored form, blobs compressed) with the daemon's index rows (run id,
//!   declaration: `pipeline::run_index`), before the clock starts; what is timed is the store.
//! - SQLite (the baseline): one store (WAL, `synchronous = FULL`), the runs appended with
//!   `Store::append` in batches of 32 (the default free probe slots, `[schedule] concurrency`:
//!   the most runs the writer gathers in one batch at the default), no leases (on SQLite the daemon
//!   schedules its own runs).
//! - PostgreSQL: one vantage, then three at once (a thread each, each its own log, key and
//!   connection pool), on a server that syncs its commits (`fsync` on, as a production server;
//!   printed as the server reports it): a throwaway cluster on loopback, or the server
//!   `X402_PROBE_TEST_POSTGRES` names. A cycle's free runs are offered as the daemon's lease
//!   round offers them (`schedule::free_work`); each vantage loops as the daemon does with its
//!   leases: take up to 32 due runs (`take_free`), heart-beat them, append their entries in one
//!   batch, mark each run done (`complete`, one call per run, concurrently, as the daemon's
//!   `leased::run_done` tasks do), until no run is left. With three vantages,
//!   `vantages_per_cycle = 3`: every subject is probed by all three in the cycle (what
//!   `down_quorum` reads), so each vantage's log receives the same 20,000 runs as the SQLite
//!   store and the database three times as many; with one vantage, `vantages_per_cycle = 1`.
//! - Lease round trips: every take, heartbeat and completion a vantage makes, per second of its
//!   run, and the time each takes; compared with SQLite's batch commits per second (a lease round
//!   trip is what a vantage pays instead of, or besides, a batch).
//!
//! Run with `cargo bench --bench postgres` (`-- --quick`: 2,000 subjects; `--subjects N`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[path = "../tests/daemon_support/mod.rs"]
#[allow(unused_imports)]
mod daemon_support;
#[path = "support/run_entry.rs"]
mod run_entry;

use daemon_support::{DAY, Settings, config_text, run_simulated, start_ms};
use x402_lab::postgres::Postgres;
use x402_probe::clock::ManualClock;
use x402_probe::daemon::schedule::{Cadence, cycle_of, free_work};
use x402_probe::evidence::run::RunRecord;
use x402_probe::ledger::key::ReporterKey;
use x402_probe::ledger::record::{Record, RecordKind};
use x402_probe::rubric::Rubric;
use x402_probe::store::lease::{FreeWork, Lease, Leases};
use x402_probe::store::postgres::{PgLedger, PgPool};
use x402_probe::store::{NewEntry, SqliteStore, Store};

/// Runs per batch: the daemon's default free probe slots.
const BATCH: usize = 32;
const FREE_EVERY_MS: i64 = 3 * 3_600_000;
const LEASE_FOR: Duration = Duration::from_secs(60);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let subjects: usize = args
        .iter()
        .position(|a| a == "--subjects")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(if quick { 2_000 } else { 20_000 });
    let load_start = load_average();
    x402_probe::install_crypto_provider();
    x402_probe::cmd::daemon::init_logs("warn");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let rubric = Rubric::embedded_default();
    let template = capture(dir.path());
    let urls: Vec<String> = (0..subjects)
        .map(|i| format!("https://s{i}.bench.example/weather"))
        .collect();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let pg = match std::env::var(x402_lab::postgres::TEST_POSTGRES_ENV) {
        Ok(url) if !url.is_empty() => Postgres::start(),
        _ => Postgres::throwaway_durable(),
    }
    .expect("PostgreSQL starts");
    let settings = runtime.block_on(server_settings(pg.admin_url()));

    let sample = run_entry(&template, &rubric, "sqlite", &urls[0], 0);
    println!(
        "postgres: {subjects} subjects, each one run entry as the daemon writes it (its last run of a simulated day of the lab's honest-v2, 5 samples): {} bytes of record, its observation a blob, run id and declaration rows; batches of {BATCH}",
        record_bytes(&sample)
    );
    println!("  PostgreSQL: {settings}");
    println!("  load average at start: {load_start}");

    // (a) SQLite, the baseline.
    let entries: Vec<NewEntry> = prepare(&template, &rubric, "sqlite", &urls)
        .into_values()
        .collect();
    let sqlite = SqliteStore::open(&dir.path().join("sqlite")).expect("SQLite opens");
    let started = Instant::now();
    let mut batches = 0usize;
    let mut entries = entries.into_iter().peekable();
    while entries.peek().is_some() {
        let batch: Vec<NewEntry> = entries.by_ref().take(BATCH).collect();
        Store::append(&sqlite, batch).expect("an append");
        batches += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    let baseline = subjects as f64 / secs;
    let baseline_commits = batches as f64 / secs;
    Store::verify(&sqlite, None, false).expect("the SQLite store verifies");
    let blob_bytes: i64 = rusqlite::Connection::open(sqlite.path())
        .and_then(|c| c.query_row("SELECT SUM(LENGTH(bytes)) FROM blob", [], |r| r.get(0)))
        .expect("the blobs' size");
    println!(
        "  blobs kept per run: {} bytes (compressed)",
        blob_bytes as usize / subjects
    );
    println!();
    println!("appends (run entries per second; a vantage's figure counts its lease round trips)");
    println!(
        "  SQLite, one store (baseline)            {baseline:>7.0} /s   ({baseline_commits:.0} batch commits/s)"
    );

    // (b) one vantage, (c) three at once.
    let one = leased(
        &pg,
        &runtime,
        &template,
        &rubric,
        &urls,
        &["one"],
        dir.path(),
    );
    let three = leased(
        &pg,
        &runtime,
        &template,
        &rubric,
        &urls,
        &["a", "b", "c"],
        dir.path(),
    );
    let ratio = |x: f64| x / baseline;
    for (label, run) in [("one vantage", &one), ("three vantages", &three)] {
        for v in &run.vantages {
            println!(
                "  PostgreSQL, {label}: {:<5}          {:>7.0} /s   ({:.2}x SQLite; appends alone {:.0} /s, {:.2}x)",
                v.name,
                v.rate(),
                ratio(v.rate()),
                v.append_rate(),
                ratio(v.append_rate())
            );
        }
        if run.vantages.len() > 1 {
            println!(
                "  PostgreSQL, {label}, in all              {:>7.0} /s   ({:.2}x SQLite)",
                run.total_rate(),
                ratio(run.total_rate())
            );
        }
    }
    println!();
    println!(
        "lease round trips (take {BATCH}, heartbeat, complete each run; compared with SQLite's batch commits)"
    );
    for (label, run) in [("one vantage", &one), ("three vantages", &three)] {
        let trips: usize = run.vantages.iter().map(|v| v.trips).sum();
        let in_trips: f64 = run.vantages.iter().map(|v| v.lease_secs).sum();
        let per_sec = trips as f64 / run.secs;
        println!(
            "  {label:<15} {per_sec:>7.0} round trips/s  ({:.2}x SQLite's commits; {:.2} ms each; {} in all, {:.1} per run)",
            per_sec / baseline_commits,
            in_trips * 1e3 / trips.max(1) as f64,
            trips,
            trips as f64 / run.runs() as f64
        );
    }
    println!(
        "  offering the cycle's runs: {:.2} s for {} rows (one vantage), {:.2} s for {} rows (three)",
        one.offer_secs,
        subjects,
        three.offer_secs,
        3 * subjects
    );
    println!("  load average at end: {}", load_average());
}

/// The load average, as `/proc/loadavg` says it.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// What the server says of its durability.
async fn server_settings(url: &str) -> String {
    let pool = PgPool::connect(url).await.expect("PostgreSQL opens");
    let client = pool.client("reading settings").await.expect("a connection");
    let mut said = Vec::new();
    for name in [
        "server_version",
        "fsync",
        "synchronous_commit",
        "wal_sync_method",
    ] {
        let row = client
            .query_one(&format!("SHOW {name}"), &[])
            .await
            .expect("a setting");
        said.push(format!("{name} = {}", row.get::<_, String>(0)));
    }
    said.join(", ")
}

/// The daemon's last run entry after one simulated day of the lab's `honest-v2`, bodies restored.
fn capture(dir: &Path) -> RunRecord {
    let state = dir.join("daemon");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let lab = daemon_support::lab(&["honest-v2"]).await;
        let mut settings = Settings::new(&state);
        settings.subjects = vec![lab.endpoint("honest-v2").unwrap().url.clone()];
        settings.samples = 5;
        settings.pay = false;
        settings.api = "[api]\nenabled = false\n".into();
        let text = config_text(&lab, &settings);
        let start = start_ms();
        run_simulated(&text, Arc::new(ManualClock::at_ms(start)), start + DAY).await;
    });
    let store = SqliteStore::open(&state).expect("the daemon's store");
    let mut record = store
        .latest_entry_of_kind(RecordKind::Run)
        .expect("the daemon's ledger reads")
        .expect("the daemon recorded a run")
        .record;
    store.restore_bodies(&mut record).expect("bodies restored");
    match record {
        Record::Run(run) => *run,
        _ => unreachable!("a run entry holds a run"),
    }
}

/// Subject `url`'s run as vantage `vantage` records it, prepared as the daemon's run task does.
fn run_entry(
    template: &RunRecord,
    rubric: &Rubric,
    vantage: &str,
    url: &str,
    i: usize,
) -> NewEntry {
    let mut run = template.clone();
    run.subject = url.to_string();
    run.vantage = vantage.to_string();
    run.id = format!("{vantage}:{}:{i}", run.started_at_ms);
    run.started_at_ms += i as i64;
    run.ended_at_ms += i as i64;
    // Its own timings, so its own observation blob (the results derive alike: no check reads
    // the TLS handshake's time).
    for sample in &mut run.free.samples {
        let tls = sample.exchange.timings.tls_ms.unwrap_or(1.0);
        sample.exchange.timings.tls_ms = Some(tls + i as f64 / 1024.0);
    }
    run_entry::prepared_run(run, rubric)
}

/// Bytes of an entry's record.
fn record_bytes(entry: &NewEntry) -> usize {
    match &entry.record {
        x402_probe::store::NewRecord::Prepared(p) => p.record_bytes.len(),
        _ => panic!("the run entry does not serialise"),
    }
}

/// Every subject's run as `vantage` records it, by URL (on both cores).
fn prepare(
    template: &RunRecord,
    rubric: &Rubric,
    vantage: &str,
    urls: &[String],
) -> HashMap<String, NewEntry> {
    let half = urls.len().div_ceil(2).max(1);
    std::thread::scope(|scope| {
        let parts: Vec<_> = urls
            .chunks(half)
            .enumerate()
            .map(|(part, chunk)| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .enumerate()
                        .map(|(j, url)| {
                            let i = part * half + j;
                            (url.clone(), run_entry(template, rubric, vantage, url, i))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("preparing entries"))
            .collect()
    })
}

/// One vantage's run: entries, wall time, time in appends and in lease round trips.
struct VantageRun {
    name: String,
    entries: usize,
    secs: f64,
    append_secs: f64,
    lease_secs: f64,
    trips: usize,
}

impl VantageRun {
    fn rate(&self) -> f64 {
        self.entries as f64 / self.secs
    }
    fn append_rate(&self) -> f64 {
        self.entries as f64 / self.append_secs
    }
}

struct LeasedRun {
    vantages: Vec<VantageRun>,
    /// Wall time of the whole run (every vantage).
    secs: f64,
    offer_secs: f64,
}

impl LeasedRun {
    fn runs(&self) -> usize {
        self.vantages.iter().map(|v| v.entries).sum()
    }
    fn total_rate(&self) -> f64 {
        self.runs() as f64 / self.secs
    }
}

/// `names.len()` vantages on one fresh database, `vantages_per_cycle` = that many, each taking
/// one cycle's free runs of `urls` by leases and appending their entries, all at once.
fn leased(
    pg: &Postgres,
    runtime: &tokio::runtime::Runtime,
    template: &RunRecord,
    rubric: &Rubric,
    urls: &[String],
    names: &[&str],
    dir: &Path,
) -> LeasedRun {
    let per_cycle = names.len() as u32;
    let url = pg
        .fresh_database(&format!("bench_{}", names.len()))
        .expect("a database");
    let cadence = Cadence {
        free_every_ms: FREE_EVERY_MS,
        jitter_percent: 0,
        backoff_max_ms: 6 * 3_600_000,
        host_gap_ms: 0,
        paid_min_interval_ms: 86_400_000,
    };
    let now = x402_probe::clock::Clock::now_ms(&x402_probe::clock::SystemClock);
    // Last cycle's runs: every one due (a sweep of the whole catalogue at once).
    let cycle = cycle_of(&cadence, now) - 1;
    let work = free_work(
        &cadence,
        urls.iter().map(String::as_str),
        cycle..=cycle,
        per_cycle,
    );
    let from_ms = cycle * FREE_EVERY_MS;
    let vantages: Vec<(PgLedger, Leases, HashMap<String, NewEntry>)> = names
        .iter()
        .map(|name| {
            let key = ReporterKey::generate(&dir.join(format!("{name}.key")))
                .expect("a key")
                .public_key();
            let log = PgLedger::open(&url, name, key).expect("PostgreSQL opens");
            let pool = runtime
                .block_on(PgPool::connect(&url))
                .expect("PostgreSQL opens");
            let entries = prepare(template, rubric, name, urls);
            (log, Leases::new(pool, name), entries)
        })
        .collect();
    let offered = Instant::now();
    runtime
        .block_on(vantages[0].1.offer_free(&work))
        .expect("the runs are offered");
    let offer_secs = offered.elapsed().as_secs_f64();
    let left = AtomicUsize::new(work.len());
    let started = Instant::now();
    let runs: Vec<VantageRun> = std::thread::scope(|scope| {
        let threads: Vec<_> = vantages
            .into_iter()
            .map(|(log, leases, entries)| {
                let left = &left;
                scope.spawn(move || vantage(runtime, &log, &leases, entries, left, from_ms, now))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a vantage"))
            .collect()
    });
    let secs = started.elapsed().as_secs_f64();
    for name in names {
        let log = PgLedger::open_existing(&url, Some(name)).expect("the log opens");
        Store::verify(&log, None, false).expect("each vantage's log verifies");
        // The batch's index rows are there: each subject's run by its id, and its declaration.
        for (i, subject) in urls.iter().enumerate().step_by(997) {
            let run = Store::latest_subject_entry(&log, subject, RecordKind::Run)
                .expect("a subject's run reads")
                .expect("every subject's run is in each vantage's log");
            let Record::Run(run) = run.record else {
                panic!("a run entry holds a run")
            };
            assert!(run.id.ends_with(&format!(":{i}")), "the run of {subject}");
            let by_id = Store::run_by_id(&log, &run.id).expect("a run id reads");
            assert_eq!(by_id.map(|e| e.seq), Some(run_seq(&log, subject)));
            assert!(
                Store::latest_declared(&log, subject)
                    .expect("a declaration reads")
                    .is_some(),
                "{subject}'s declaration is indexed"
            );
        }
    }
    LeasedRun {
        vantages: runs,
        secs,
        offer_secs,
    }
}

fn run_seq(log: &PgLedger, subject: &str) -> u64 {
    Store::latest_subject_entry(log, subject, RecordKind::Run)
        .expect("a subject's run reads")
        .expect("the subject's run")
        .seq
}

/// One vantage's loop, as the daemon's with leases: take due runs, heart-beat them, record them
/// in one batch, mark each done; until every run offered is done.
fn vantage(
    runtime: &tokio::runtime::Runtime,
    log: &PgLedger,
    leases: &Leases,
    mut entries: HashMap<String, NewEntry>,
    left: &AtomicUsize,
    from_ms: i64,
    now_ms: i64,
) -> VantageRun {
    let started = Instant::now();
    let (mut append_secs, mut lease_secs, mut trips, mut count) = (0.0, 0.0, 0, 0);
    let timed = |secs: &mut f64, t: Instant| *secs += t.elapsed().as_secs_f64();
    while left.load(Ordering::SeqCst) > 0 {
        let t = Instant::now();
        let taken: Vec<(Lease, FreeWork)> = runtime
            .block_on(leases.take_free(BATCH, LEASE_FOR, now_ms, from_ms))
            .expect("taking runs");
        timed(&mut lease_secs, t);
        trips += 1;
        if taken.is_empty() {
            // Every run left is held by another vantage (or is another replica of one of ours).
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        let held: Vec<Lease> = taken.iter().map(|(l, _)| l.clone()).collect();
        let t = Instant::now();
        let kept = runtime
            .block_on(leases.heartbeat(&held, LEASE_FOR))
            .expect("heart-beating");
        timed(&mut lease_secs, t);
        trips += 1;
        assert_eq!(kept.len(), held.len(), "every lease kept");
        let batch: Vec<NewEntry> = taken
            .iter()
            .map(|(_, w)| entries.remove(&w.subject).expect("one run per subject"))
            .collect();
        let t = Instant::now();
        Store::append(log, batch).expect("an append");
        timed(&mut append_secs, t);
        let t = Instant::now();
        let done = runtime.block_on(async {
            let mut each = tokio::task::JoinSet::new();
            for lease in held.iter().cloned() {
                let leases = leases.clone();
                each.spawn(async move { leases.complete(&[lease]).await });
            }
            each.join_all().await
        });
        timed(&mut lease_secs, t);
        trips += done.len();
        for d in done {
            assert_eq!(d.expect("completing a run").len(), 1, "a run completed");
        }
        count += held.len();
        left.fetch_sub(held.len(), Ordering::SeqCst);
    }
    VantageRun {
        name: log.vantage().to_string(),
        entries: count,
        secs: started.elapsed().as_secs_f64(),
        append_secs,
        lease_secs,
        trips,
    }
}
