//! The PostgreSQL store against a real server: a throwaway cluster per test (the system's
//! `initdb`, on a free loopback port), or the server `X402_PROBE_TEST_POSTGRES` names, a database
//! of its own per test. Two vantages append to one database at once, each its own chain and Merkle
//! log under its own key, and both verify; a key or name another vantage has is refused; an entry
//! edited in the database is named; SQLite and PostgreSQL seal the same entries to the same bytes;
//! migrations are versioned, applied once under concurrency, and a newer database is refused; an
//! unreachable database is a clear error at once.

use std::path::Path;
use std::time::{Duration, Instant};

use x402_lab::postgres::Postgres;
use x402_probe::ledger::chain::Trusted;
use x402_probe::ledger::key::ReporterKey;
use x402_probe::ledger::record::{ControlRecord, CorrectionRecord, OutageOf, OutageRecord, Record};
use x402_probe::store::postgres::{MIGRATIONS, PgLedger, PgPool};
use x402_probe::store::{LedgerLog, NewEntry, SqliteStore, StoreError};

fn key(dir: &Path, name: &str) -> ReporterKey {
    ReporterKey::generate(&dir.join(format!("{name}.key"))).expect("a reporter key")
}

fn control(vantage: &str, n: u64) -> NewEntry {
    NewEntry::plain(
        1_790_000_000_000 + n as i64 * 1000,
        Record::Control(ControlRecord {
            url: format!("https://control.example/{vantage}"),
            at_ms: 1_790_000_000_000 + n as i64 * 1000,
            ok: !n.is_multiple_of(7),
            detail: format!("{vantage} probe {n}"),
        }),
    )
}

/// A mix of record kinds, with subjects and without, a value needing escapes.
fn mixed(n: u64) -> Vec<NewEntry> {
    (0..n)
        .map(|i| match i % 3 {
            0 => control("mixed", i),
            1 => NewEntry::plain(
                1_790_000_000_000 + i as i64,
                Record::Outage(OutageRecord::Opened {
                    from_ms: i as i64,
                    cause: "control failed \"twice\" é".into(),
                    of: OutageOf::Vantage,
                }),
            ),
            _ => NewEntry::plain(
                1_790_000_000_000 + i as i64,
                Record::Correction(CorrectionRecord {
                    of_seq: i,
                    subject: Some(format!("https://s{i}.example/\u{2028}")),
                    at_ms: i as i64,
                    reason: "r".into(),
                    detail: serde_json::json!({"z": 1.5, "n": i}),
                }),
            ),
        })
        .collect()
}

fn trusted(key: &ReporterKey) -> Trusted {
    Trusted {
        public_key: key.public_key(),
        max_unsigned_ms: i64::MAX,
    }
}

/// Runs `sql` on the database at `url` (what someone with the database's password can do).
fn psql(url: &str, sql: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client.batch_execute(sql).await.unwrap();
    });
}

#[test]
fn two_vantages_append_at_once_each_to_its_own_log_and_both_verify() {
    let pg = Postgres::start().expect("PostgreSQL starts");
    let url = pg.fresh_database("vantages").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ka, kb) = (key(dir.path(), "a"), key(dir.path(), "b"));
    let a = PgLedger::open(&url, "a", ka.public_key()).unwrap();
    let b = PgLedger::open(&url, "b", kb.public_key()).unwrap();
    std::thread::scope(|scope| {
        for (log, k, name) in [(&a, &ka, "a"), (&b, &kb, "b")] {
            scope.spawn(move || {
                for batch in 0..30u64 {
                    let entries = (0..10).map(|i| control(name, batch * 10 + i)).collect();
                    let seqs = log.append(entries).unwrap();
                    // Each vantage's seqs follow its own head, whatever the other appends.
                    assert_eq!(seqs, (batch * 10 + 1..=batch * 10 + 10).collect::<Vec<_>>());
                    if batch % 10 == 9 {
                        log.checkpoint(k, 1_790_000_000_000 + batch as i64).unwrap();
                    }
                }
            });
        }
    });
    let (sa, sb) = (
        a.verify(Some(&trusted(&ka)), true).unwrap(),
        b.verify(Some(&trusted(&kb)), true).unwrap(),
    );
    for s in [&sa, &sb] {
        assert_eq!((s.entries, s.checkpoints, s.signed_through), (300, 3, 300));
        assert_eq!((s.tree_checkpoints, s.tree_signed_through), (3, 300));
    }
    assert_ne!(sa.tree_root, sb.tree_root);
    assert_eq!(sa.signed_by, Some(hex::encode(ka.public_key())));
    // Read back: each log holds its own vantage's records only, in order.
    let read = a.entries_page(0, 1000).unwrap();
    assert_eq!(read.len(), 300);
    assert!(read.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1
        && matches!(&e.record, Record::Control(c) if c.detail == format!("a probe {i}"))));
    // A's log verified under B's key fails; a checkpoint by B's key on A's log is refused.
    assert!(a.verify(Some(&trusted(&kb)), false).is_err());
    assert!(matches!(
        a.checkpoint(&kb, 1),
        Err(StoreError::Vantage { .. })
    ));
    // A key another vantage has, or a name under another key: refused, naming why.
    let err = PgLedger::open(&url, "c", ka.public_key()).unwrap_err();
    assert!(
        matches!(&err, StoreError::Vantage { why, .. } if why.contains("\"a\"")),
        "{err}"
    );
    let err = PgLedger::open(&url, "a", kb.public_key()).unwrap_err();
    assert!(
        matches!(&err, StoreError::Vantage { why, .. } if why.contains(&hex::encode(ka.public_key()))),
        "{err}"
    );
    // Reopened with its own key, a vantage goes on from its head.
    let again = PgLedger::open(&url, "a", ka.public_key()).unwrap();
    assert_eq!(again.append(vec![control("a", 300)]).unwrap(), vec![301]);
    // An entry of A edited in the database: A's verification names it; B's log still verifies.
    psql(
        &url,
        "UPDATE entry
         SET body = convert_to(replace(convert_from(body, 'UTF8'), 'a probe 149', 'a probe 999'), 'UTF8')
         WHERE vantage = (SELECT id FROM vantage WHERE name = 'a') AND seq = 150",
    );
    let err = a.verify(None, false).unwrap_err();
    assert!(
        matches!(&err, StoreError::Broken(b) if b.seq == 150),
        "{err}"
    );
    b.verify(Some(&trusted(&kb)), true).unwrap();
}

/// The same entries appended to SQLite and to PostgreSQL give the same bytes: the same head, the
/// same Merkle root, checkpoints each store's verification accepts under the same key, the same
/// records read back. An entry with index rows (which only SQLite keeps yet) is refused whole.
#[test]
fn sqlite_and_postgres_seal_the_same_entries_alike() {
    let pg = Postgres::start().expect("PostgreSQL starts");
    let url = pg.fresh_database("alike").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let k = key(dir.path(), "k");
    let sqlite = SqliteStore::open(&dir.path().join("state")).unwrap();
    let postgres = PgLedger::open(&url, "v", k.public_key()).unwrap();
    let logs: [&dyn LedgerLog; 2] = [&sqlite, &postgres];
    for log in logs {
        for chunk in 0..4 {
            log.append(mixed(25).into_iter().skip(chunk * 5).take(5).collect())
                .unwrap();
        }
        log.append(mixed(40)).unwrap();
        log.checkpoint(&k, 1_790_000_123_000).unwrap();
        log.append(mixed(3)).unwrap();
    }
    let s = LedgerLog::verify(&sqlite, Some(&trusted(&k)), true).unwrap();
    let p = postgres.verify(Some(&trusted(&k)), true).unwrap();
    assert_eq!(s.entries, 63);
    assert_eq!(
        (
            &s.head_hash,
            &s.tree_root,
            s.signed_through,
            s.tree_signed_through
        ),
        (
            &p.head_hash,
            &p.tree_root,
            p.signed_through,
            p.tree_signed_through
        )
    );
    assert_eq!(
        LedgerLog::tree_notes(&sqlite).unwrap(),
        postgres.tree_notes().unwrap()
    );
    assert_eq!(
        LedgerLog::entries_page(&sqlite, 10, 100).unwrap(),
        postgres.entries_page(10, 100).unwrap()
    );
    // A batch with an entry that cannot be written: refused whole, nothing of it written.
    let unwritable = NewEntry {
        record: x402_probe::store::NewRecord::Unwritable("a test's".into()),
        ..control("v", 1)
    };
    let err = postgres
        .append(vec![control("v", 0), unwritable])
        .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert_eq!(postgres.head().unwrap().0, 63);
}

#[test]
fn migrations_apply_once_under_concurrency_and_a_newer_database_is_refused() {
    let pg = Postgres::start().expect("PostgreSQL starts");
    let url = pg.fresh_database("migrations").unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // Four processes' worth of opens at once on a new database.
        let opens: Vec<_> = (0..4)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { PgPool::connect(&url).await })
            })
            .collect();
        let mut pools = Vec::new();
        for open in opens {
            pools.push(open.await.unwrap().expect("each open succeeds"));
        }
        let applied = pools[0].applied_migrations().await.unwrap();
        let known: Vec<(i32, String)> = MIGRATIONS
            .iter()
            .map(|m| (m.version, m.name.to_string()))
            .collect();
        assert_eq!(applied, known);
        assert_eq!(applied.len(), MIGRATIONS.len());
    });
    // A migration this build does not know (a newer build ran): refused, nothing applied.
    let future = MIGRATIONS.len() + 1;
    psql(
        &url,
        &format!(
            "INSERT INTO schema_migration (version, name) VALUES ({future}, 'from-the-future')"
        ),
    );
    let err = runtime
        .block_on(PgPool::connect(&url))
        .expect_err("a newer database is refused");
    assert!(
        matches!(&err, StoreError::Schema { found, .. } if found.contains("from-the-future")),
        "{err}"
    );
    // A known number under another name (another build's branch): refused too.
    psql(
        &url,
        &format!(
            "DELETE FROM schema_migration WHERE version = {future};
             UPDATE schema_migration SET name = 'other' WHERE version = 2"
        ),
    );
    let err = runtime.block_on(PgPool::connect(&url)).unwrap_err();
    assert!(matches!(&err, StoreError::Schema { .. }), "{err}");
}

#[test]
fn an_unreachable_database_is_a_clear_error_at_once() {
    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let err = PgLedger::open(
        &format!("postgres://probe:secret-password@127.0.0.1:{port}/ledger"),
        "v",
        [7; 32],
    )
    .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    let text = err.to_string();
    assert!(
        matches!(err, StoreError::PostgresUnreachable { .. }),
        "{text}"
    );
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains("secret-password"), "{text}");
}

/// A throwaway cluster answers on loopback and is gone when dropped: its server stopped and
/// reaped, its directory removed. (Nothing to check with `X402_PROBE_TEST_POSTGRES`: that server
/// is not ours to stop.)
#[test]
fn a_throwaway_cluster_is_stopped_and_removed_when_dropped() {
    let pg = Postgres::start().expect("PostgreSQL starts");
    let (Some(pid), Some(dir)) = (pg.pid(), pg.dir().map(Path::to_path_buf)) else {
        return;
    };
    assert!(pg.admin_url().starts_with("postgres://postgres@127.0.0.1:"));
    let url = pg.fresh_database("dropped").unwrap();
    PgLedger::open(&url, "v", [3; 32]).unwrap();
    assert!(Path::new(&format!("/proc/{pid}")).exists() && dir.exists());
    drop(pg);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the server is gone"
    );
    assert!(!dir.exists(), "its directory is removed");
}

#[test]
fn a_database_lost_and_back_is_told_apart_writes_nothing_half_and_takes_appends_again() {
    let pg = Postgres::start().expect("PostgreSQL starts");
    let url = pg.fresh_database("lost").unwrap();
    let name = url.rsplit('/').next().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let k = key(dir.path(), "lost");
    let log = PgLedger::open(&url, "lost", k.public_key()).unwrap();
    log.append((0..5).map(|i| control("lost", i)).collect())
        .unwrap();
    // The database refuses connections and ends every session (what a server going away looks
    // like to its clients, without stopping the cluster other tests share).
    psql(
        pg.admin_url(),
        &format!(
            "ALTER DATABASE \"{name}\" WITH ALLOW_CONNECTIONS false;
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}';"
        ),
    );
    let err = log
        .append((5..10).map(|i| control("lost", i)).collect())
        .unwrap_err();
    assert!(
        matches!(err, StoreError::PostgresUnreachable { .. }),
        "a lost database is told apart: {err}"
    );
    // What the daemon's writer waits out (no new runs, writes kept, tried again).
    assert!(x402_probe::daemon::storage::is_full(
        &anyhow::Error::new(err),
        dir.path()
    ));
    psql(
        pg.admin_url(),
        &format!("ALTER DATABASE \"{name}\" WITH ALLOW_CONNECTIONS true"),
    );
    // Back (a pooled connection the server ended may fail once more, as unreachable, before
    // the pool replaces it: the daemon tries again every few seconds): nothing of the failed
    // batch was written, and the next append follows the head.
    let mut head = None;
    for _ in 0..50 {
        match log.head() {
            Ok((seq, _)) => {
                head = Some(seq);
                break;
            }
            Err(e) => {
                assert!(matches!(e, StoreError::PostgresUnreachable { .. }), "{e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    assert_eq!(head, Some(5));
    let seqs = log
        .append((5..10).map(|i| control("lost", i)).collect())
        .unwrap();
    assert_eq!(seqs, (6..=10).collect::<Vec<_>>());
    log.checkpoint(&k, 1_790_000_000_000).unwrap();
    assert_eq!(log.verify(Some(&trusted(&k)), true).unwrap().entries, 10);
}
