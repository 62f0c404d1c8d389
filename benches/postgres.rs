//! The PostgreSQL store against SQLite in the same run: appends per second to one vantage's log,
//! to three vantages' logs at once (per vantage and in all), and lease round trips per second,
//! each printed with its ratio to SQLite's appends of the same entries.
//!
//! - PostgreSQL is a throwaway cluster on loopback that syncs its commits (`fsync` on, as a
//!   production server), or the server `X402_PROBE_TEST_POSTGRES` names; SQLite is the embedded
//!   store (WAL, `synchronous = FULL`) in a temporary directory.
//! - Entries: control records (about 300 bytes each) appended with `LedgerLog::append` in
//!   transactions of 64, each store's own (sealing, hashing, tree nodes, one commit per batch).
//!   Run entries with their observation blobs and the daemon's index rows come with the daemon on
//!   PostgreSQL (the benchmark: three vantages, 20,000 subjects).
//! - Leases: a round trip is a `take` of up to 16 pieces of work, a heartbeat of those held, or
//!   their release, in turn, by one leaser and by three at once, over 1,000 offered pieces of work.
//!
//! Run with `cargo bench --bench postgres` (`-- --quick` for fewer entries).

use std::time::{Duration, Instant};

use x402_lab::postgres::Postgres;
use x402_probe::ledger::record::{ControlRecord, Record};
use x402_probe::store::lease::{Leases, WorkKey};
use x402_probe::store::postgres::{PgLedger, PgPool};
use x402_probe::store::{LedgerLog, NewEntry, SqliteStore};

const BATCH: u64 = 64;

fn batch(vantage: &str, from: u64) -> Vec<NewEntry> {
    (from..from + BATCH)
        .map(|n| {
            let at_ms = 1_790_000_000_000 + n as i64;
            NewEntry::plain(
                at_ms,
                Record::Control(ControlRecord {
                    url: format!("https://control.example/{vantage}"),
                    at_ms,
                    ok: true,
                    detail: format!("{vantage}: control probe {n}, 200 in 41 ms"),
                }),
            )
        })
        .collect()
}

/// Appends `entries` to `log` in batches; entries per second.
fn appends(log: &dyn LedgerLog, vantage: &str, entries: u64) -> f64 {
    let started = Instant::now();
    let mut n = 0;
    while n < entries {
        log.append(batch(vantage, n)).expect("an append");
        n += BATCH;
    }
    n as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let entries: u64 = if quick { 2_048 } else { 16_384 };
    let pg = match std::env::var(x402_lab::postgres::TEST_POSTGRES_ENV) {
        Ok(url) if !url.is_empty() => Postgres::start(),
        _ => Postgres::throwaway_durable(),
    }
    .expect("PostgreSQL starts");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let key = |name: &str| {
        x402_probe::ledger::key::ReporterKey::generate(&dir.path().join(format!("{name}.key")))
            .expect("a key")
            .public_key()
    };

    let sqlite = SqliteStore::open(&dir.path().join("state")).expect("SQLite opens");
    let baseline = appends(&sqlite, "sqlite", entries);
    println!("appends, batches of {BATCH}, {entries} entries per log");
    println!("  SQLite, one log (baseline)        {baseline:>9.0} entries/s");

    let url = pg.fresh_database("bench_one").expect("a database");
    let one = PgLedger::open(&url, "one", key("one")).expect("PostgreSQL opens");
    let single = appends(&one, "one", entries);
    println!(
        "  PostgreSQL, one vantage           {single:>9.0} entries/s  ({:.2}x SQLite)",
        single / baseline
    );

    let url = pg.fresh_database("bench_three").expect("a database");
    let logs: Vec<PgLedger> = ["a", "b", "c"]
        .iter()
        .map(|v| PgLedger::open(&url, v, key(v)).expect("PostgreSQL opens"))
        .collect();
    let started = Instant::now();
    let each: Vec<f64> = std::thread::scope(|scope| {
        let runs: Vec<_> = logs
            .iter()
            .map(|log| scope.spawn(move || appends(log, log.vantage(), entries)))
            .collect();
        runs.into_iter()
            .map(|r| r.join().expect("a vantage"))
            .collect()
    });
    let total = (3 * entries) as f64 / started.elapsed().as_secs_f64();
    for (log, rate) in logs.iter().zip(&each) {
        println!(
            "  PostgreSQL, vantage {} of three    {rate:>9.0} entries/s  ({:.2}x SQLite)",
            log.vantage(),
            rate / baseline
        );
    }
    println!(
        "  PostgreSQL, three vantages in all {total:>9.0} entries/s  ({:.2}x SQLite)",
        total / baseline
    );
    for log in &logs {
        log.verify(None, false).expect("each log verifies");
    }

    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let url = pg.fresh_database("bench_lease").expect("a database");
    let window = if quick {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(5)
    };
    runtime.block_on(async {
        let pool = PgPool::connect(&url).await.expect("PostgreSQL opens");
        let work: Vec<WorkKey> = (0..1000)
            .map(|i| WorkKey(format!("free:https://s{i}.example/")))
            .collect();
        Leases::new(pool.clone(), "setup")
            .offer(&work)
            .await
            .unwrap();
        println!("lease round trips (take 16, heartbeat or release), {window:?} each");
        for leasers in [1usize, 3] {
            let tasks: Vec<_> = (0..leasers)
                .map(|i| {
                    let leases = Leases::new(pool.clone(), &format!("v{i}"));
                    tokio::spawn(async move {
                        let until = Instant::now() + window;
                        let mut trips = 0u64;
                        let mut held = Vec::new();
                        let mut beat = false;
                        while Instant::now() < until {
                            if beat {
                                held = leases
                                    .heartbeat(&held, Duration::from_secs(30))
                                    .await
                                    .unwrap();
                                trips += 1;
                            } else {
                                leases.release(&held).await.unwrap();
                                held = leases.take(16, Duration::from_secs(30)).await.unwrap();
                                trips += 2;
                            }
                            beat = !beat;
                        }
                        leases.release(&held).await.unwrap();
                        trips
                    })
                })
                .collect();
            let mut all = 0;
            for t in tasks {
                all += t.await.unwrap();
            }
            println!(
                "  {leasers} leaser(s)                      {:>9.0} round trips/s",
                all as f64 / window.as_secs_f64()
            );
        }
    });
}
