//! The spend store shared by vantages on a real PostgreSQL (a throwaway cluster, or
//! `X402_PROBE_TEST_POSTGRES`), tried the ways that would break it: vantages in threads and in a
//! child process hammering one tight daily cap at the same instant; two vantages racing to pay one
//! subject; the database's connections cut in the middle of a reservation and the server killed;
//! a vantage killed (`kill -9`) in the middle of a real paid call through the lab, its open
//! reservation counted by the others and reconciled by another vantage by the chain's word.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use alloy::primitives::address;
use x402_lab::postgres::Postgres;
use x402_lab::{Lab, LabOptions};
use x402_probe::spend::{
    PayPolicy, RefusalCode, ReservationState, ReserveError, ReserveRequest, SpendError, SpendStore,
    Usd,
};

use crate::paid_faults::run_child_with;
use crate::paid_store::{policy, quote};

const CHILD_TEST: &str = "spend_shared::child_reserver";
/// Paid calls of one subject at least an hour apart (what `[schedule] paid_min_interval_secs`
/// gives the daemon's store).
const INTERVAL: Duration = Duration::from_secs(3600);
const PAYER: alloy::primitives::Address = address!("0x1111111111111111111111111111111111111111");

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn usd(text: &str) -> Usd {
    text.parse().unwrap()
}

/// One cent (10,000 units of a 6-decimal dollar token) for `subject`.
fn reserve_cent(
    store: &SpendStore,
    policy: &PayPolicy,
    subject: &str,
) -> Result<x402_probe::spend::Reservation, ReserveError> {
    let required = quote("10000");
    store.reserve(
        policy,
        &ReserveRequest {
            subject,
            requirement: &required.accepts[0],
            payer: PAYER,
            from_block: Some(1),
        },
        now_unix(),
    )
}

fn refused(result: Result<x402_probe::spend::Reservation, ReserveError>) -> RefusalCode {
    match result {
        Err(ReserveError::Refused(r)) => r.code,
        Err(e) => panic!("a store error: {e}"),
        Ok(r) => panic!("reserved {} instead of refusing", r.id()),
    }
}

/// Reserves a cent for each of `subjects` as vantage `vantage`, starting at `start_ms` (the
/// others start then too); returns (reserved, refused over the daily cap).
fn hammer(url: &str, vantage: &str, subjects: &[String], start_ms: i64) -> (usize, usize) {
    let store = SpendStore::open_postgres(url, vantage, INTERVAL).unwrap();
    let policy = policy("0.05", "1", "0.10");
    let wait = start_ms - now_ms();
    if wait > 0 {
        std::thread::sleep(Duration::from_millis(wait as u64));
    }
    let (mut reserved, mut over) = (0, 0);
    for subject in subjects {
        match reserve_cent(&store, &policy, subject) {
            Ok(_) => reserved += 1,
            Err(ReserveError::Refused(r)) if r.code == RefusalCode::OverDailyCap => over += 1,
            Err(e) => panic!("{vantage}: {e}"),
        }
    }
    (reserved, over)
}

/// A vantage in a process of its own, hammering with the others.
#[test]
#[ignore = "run only as a child process by vantages_hammering_one_daily_cap_reserve_exactly_what_fits"]
fn child_reserver() {
    let var = |name: &str| std::env::var(name).expect("run by the parent test only");
    let subjects: Vec<String> = (0..10)
        .map(|i| format!("https://child-{i}.example/"))
        .collect();
    let (reserved, over) = hammer(
        &var("SPEND_CHILD_PG"),
        "child",
        &subjects,
        var("SPEND_CHILD_START_MS").parse().unwrap(),
    );
    println!("\nCHILD reserved={reserved} over={over}");
}

#[test]
fn vantages_hammering_one_daily_cap_reserve_exactly_what_fits() {
    let pg = Postgres::start().expect("PostgreSQL starts");
    let url = pg.fresh_database("spend_hammer").unwrap();
    // Migrated once before the race (the migrations have their own lock; not what is tried here).
    drop(SpendStore::open_postgres(&url, "setup", INTERVAL).unwrap());
    let start_ms = now_ms() + 1500;
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            CHILD_TEST,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SPEND_CHILD_PG", &url)
        .env("SPEND_CHILD_START_MS", start_ms.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let url = url.clone();
            std::thread::spawn(move || {
                let subjects: Vec<String> = (0..10)
                    .map(|i| format!("https://v{t}-{i}.example/"))
                    .collect();
                hammer(&url, &format!("vantage-{t}"), &subjects, start_ms)
            })
        })
        .collect();
    let mut reserved = 0;
    let mut over = 0;
    for t in threads {
        let (r, o) = t.join().unwrap();
        reserved += r;
        over += o;
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "the child vantage failed");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("CHILD ").map(|(_, rest)| rest.to_string()))
        .expect("the child reported");
    let field = |name: &str| -> usize {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .unwrap()
            .parse()
            .unwrap()
    };
    let (child_reserved, child_over) = (field("reserved"), field("over"));
    eprintln!("threads reserved {reserved}, the child {child_reserved}");
    assert_eq!(reserved + child_reserved, 10, "ten cents fit under 0.10");
    assert_eq!(over + child_over, 40, "every other attempt was refused");

    let store = SpendStore::open_postgres(&url, "auditor", INTERVAL).unwrap();
    let rows = store.reservations().unwrap();
    assert_eq!(rows.len(), 10);
    let sum = rows
        .iter()
        .fold(Usd::ZERO, |s, r| s.checked_add(r.cost).unwrap());
    assert_eq!(
        sum,
        usd("0.10"),
        "the reserved costs add up to the cap, not past it"
    );
    assert!(rows.iter().all(|r| r.state == ReservationState::Open));
    let refusals = store.refusals().unwrap();
    assert_eq!(refusals.len(), 40);
    assert!(
        refusals.iter().all(|r| r.code == "over_daily_cap"),
        "{refusals:?}"
    );
    assert_eq!(store.totals("x", now_unix()).unwrap().day, usd("0.10"));
    // Every vantage's refusals and reservations are in the one store, named by vantage.
    let by_vantage = vantage_counts(&url);
    assert_eq!(
        by_vantage.values().sum::<i64>(),
        50,
        "reservations and refusals by vantage: {by_vantage:?}"
    );
    assert!(by_vantage.contains_key("child"), "{by_vantage:?}");
}

/// (vantage -> reservations + refusals it wrote), read with a client of the test's own.
fn vantage_counts(url: &str) -> BTreeMap<String, i64> {
    admin(url, |client| {
        Box::pin(async move {
            let rows = client
                .query(
                    "SELECT vantage, count(*) FROM (SELECT vantage FROM spend_reservation
                       UNION ALL SELECT vantage FROM spend_refusal) v GROUP BY vantage",
                    &[],
                )
                .await
                .unwrap();
            rows.iter().map(|r| (r.get(0), r.get(1))).collect()
        })
    })
}

/// Runs `f` with a plain client of the database at `url`, on a runtime and a thread of its own
/// (so that async tests may call it too).
fn admin<T: Send>(
    url: &str,
    f: impl for<'c> FnOnce(
        &'c tokio_postgres::Client,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'c>>
    + Send,
) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                        .await
                        .unwrap();
                    tokio::spawn(connection);
                    f(&client).await
                })
            })
            .join()
            .unwrap()
    })
}

#[test]
fn two_vantages_racing_for_one_subject_reserve_it_once_and_not_again_within_the_interval() {
    let pg = Postgres::start().expect("PostgreSQL starts");
    let url = pg.fresh_database("spend_race").unwrap();
    let a = Arc::new(SpendStore::open_postgres(&url, "a", INTERVAL).unwrap());
    let b = Arc::new(SpendStore::open_postgres(&url, "b", INTERVAL).unwrap());
    let policy = Arc::new(policy("0.05", "1", "10"));
    for round in 0..20 {
        let subject = format!("https://race-{round}.example/");
        let barrier = Arc::new(Barrier::new(2));
        let racers: Vec<_> = [a.clone(), b.clone()]
            .into_iter()
            .map(|store| {
                let (barrier, policy, subject) = (barrier.clone(), policy.clone(), subject.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    reserve_cent(&store, &policy, &subject).map(|r| r.id())
                })
            })
            .collect();
        let results: Vec<_> = racers.into_iter().map(|t| t.join().unwrap()).collect();
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "round {round}: {results:?}");
        let loser = results.into_iter().find(|r| r.is_err()).unwrap();
        assert!(
            matches!(&loser, Err(ReserveError::Refused(r)) if r.code == RefusalCode::SubjectInFlight),
            "round {round}: {loser:?}"
        );
    }
    assert_eq!(a.reservations().unwrap().len(), 20);

    // Settled by one vantage: the other may not pay the subject again within the interval.
    let subject = "https://race-0.example/";
    let id = a.reservations().unwrap()[0].id;
    assert!(
        b.mark_settled(id, None, "used on chain", now_unix())
            .unwrap()
    );
    assert_eq!(
        refused(reserve_cent(&a, &policy, subject)),
        RefusalCode::PaidWithinInterval
    );
    // Released (never sent): nothing was paid, so the subject may be paid again.
    let subject = "https://race-1.example/";
    let id = a.reservations().unwrap()[1].id;
    assert!(a.mark_released(id, "never sent: test", now_unix()).unwrap());
    assert!(reserve_cent(&b, &policy, subject).is_ok());
    // The database itself refuses a second open reservation of a subject, whoever writes it.
    let duplicate = admin(&url, |client| {
        Box::pin(async move {
            client
                .execute(
                    "INSERT INTO spend_reservation (vantage, subject, created_at, network,
                         chain_id, asset, payer, pay_to, amount, cost_usd, valid_after,
                         valid_before, nonce)
                     SELECT 'rogue', subject, created_at, network, chain_id, asset, payer, pay_to,
                         amount, cost_usd, valid_after, valid_before, nonce || 'x'
                     FROM spend_reservation WHERE state = 'open' LIMIT 1",
                    &[],
                )
                .await
        })
    });
    let err = duplicate.expect_err("a second open reservation of a subject");
    assert!(
        err.to_string().contains("spend_one_open_per_subject")
            || err
                .as_db_error()
                .is_some_and(|d| d.constraint() == Some("spend_one_open_per_subject")),
        "{err}"
    );
}

#[test]
fn a_database_lost_in_the_middle_of_a_reservation_fails_it_and_writes_nothing() {
    let pg = Postgres::throwaway().expect("PostgreSQL starts");
    let url = pg.fresh_database("spend_lost").unwrap();
    let store = SpendStore::open_postgres(&url, "a", INTERVAL).unwrap();
    let policy = policy("0.05", "1", "10");
    reserve_cent(&store, &policy, "https://first.example/").unwrap();

    // Another session holds the reservation table so that the next reservation waits inside its
    // transaction (its totals read, its insert not yet made); then every connection of the
    // vantage is cut by the server.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (holder, connection) = runtime
        .block_on(tokio_postgres::connect(&url, tokio_postgres::NoTls))
        .unwrap();
    runtime.spawn(connection);
    runtime
        .block_on(holder.batch_execute("BEGIN; LOCK TABLE spend_reservation IN EXCLUSIVE MODE"))
        .unwrap();
    let reserving = std::thread::spawn(move || {
        let started = Instant::now();
        let result = reserve_cent(&store, &policy, "https://second.example/").map(|r| r.id());
        (result, started.elapsed(), store, policy)
    });
    // Once the reservation waits on the table, cut every other session of this database.
    let cut = runtime.block_on(async {
        for _ in 0..200 {
            let n: i64 = holder
                .query_one(
                    "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                     WHERE c.relname = 'spend_reservation' AND NOT l.granted",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            if n > 0 {
                return holder
                    .execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                         WHERE datname = current_database() AND pid <> pg_backend_pid()",
                        &[],
                    )
                    .await
                    .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the reservation never waited on the table");
    });
    assert!(cut >= 1);
    let (result, took, store, policy) = reserving.join().unwrap();
    let err = result.expect_err("a reservation cut off from its database fails");
    assert!(
        matches!(&err, ReserveError::Store(SpendError::Shared(_))),
        "{err}"
    );
    assert!(err.to_string().contains("PostgreSQL"), "{err}");
    eprintln!("cut off: {err} (after {took:?})");
    runtime.block_on(holder.batch_execute("ROLLBACK")).unwrap();
    // Nothing of it was written: one reservation (the first), no refusal. (A statement on a
    // pooled connection the server cut fails as unreachable; the pool then makes a new one.)
    let mut rows = store.reservations();
    for _ in 0..20 {
        if rows.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        rows = store.reservations();
    }
    let rows = rows.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].subject, "https://first.example/");
    assert!(store.refusals().unwrap().is_empty());
    // With its connections back (the pool makes new ones), it reserves again.
    reserve_cent(&store, &policy, "https://second.example/").unwrap();

    // The server killed: a clear error at once, not a wait.
    let pid = pg.pid().expect("a throwaway server") as i32;
    // SAFETY: kill(2) of the server this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let err = reserve_cent(&store, &policy, "https://third.example/")
        .map(|r| r.id())
        .expect_err("no database, no reservation");
    assert!(err.to_string().contains("PostgreSQL"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "failed after {:?}",
        started.elapsed()
    );
}

/// Every open reservation, on chain (as the daemon's start does, under the call lock).
async fn reconcile_all(
    store: &SpendStore,
    rpc: &x402_probe::probe::rpc::Rpc,
) -> x402_probe::spend::ReconcileReport {
    x402_probe::probe::reconcile::reconcile(
        store,
        rpc,
        now_unix(),
        x402_probe::probe::reconcile::Due::All,
        None,
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vantage_killed_holding_reservations_is_counted_and_reconciled_by_another() {
    x402_probe::install_crypto_provider();
    let pg = Postgres::start().expect("PostgreSQL starts");
    let url = pg.fresh_database("spend_killed").unwrap();
    let lab = Lab::start_with(LabOptions {
        scenarios: Some(vec!["honest-v2".into(), "honest-v1".into()]),
        ..LabOptions::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let paid_url = lab.endpoint("honest-v2").unwrap().url.clone();
    let unsent_url = lab.endpoint("honest-v1").unwrap().url.clone();
    let env = [
        ("PAID_CHILD_PG", url.as_str()),
        ("PAID_CHILD_VANTAGE", "doomed"),
    ];
    // Killed once the paid response is in (money moved, its reservation still open), and once
    // right after reserving (nothing signed).
    let paid = run_child_with(&lab, dir.path(), "pay", &paid_url, "responded", &env).await;
    assert!(paid.killed, "{:?}", paid.lines);
    let unsent = run_child_with(&lab, dir.path(), "pay", &unsent_url, "reserved", &env).await;
    assert!(unsent.killed, "{:?}", unsent.lines);

    let other = SpendStore::open_postgres(&url, "survivor", INTERVAL).unwrap();
    let open = other.open_reservations().unwrap();
    assert_eq!(open.len(), 2, "{open:?}");
    let totals = other.totals(&paid_url, now_unix()).unwrap();
    assert_eq!(
        totals.open, 2,
        "the dead vantage's reservations still count"
    );
    let committed = open
        .iter()
        .fold(Usd::ZERO, |s, r| s.checked_add(r.cost).unwrap());
    assert_eq!(totals.day, committed);
    // And the subject it was paying cannot be paid by another vantage meanwhile.
    let policy = crate::paid_support::lab_policy(&lab, "1", "1");
    let (_, quoted) =
        crate::paid_support::quote_of(&crate::paid_support::lab_fetch(&lab), &paid_url).await;
    let required = quoted.required.expect("a 402");
    let again = other.reserve(
        &policy,
        &ReserveRequest {
            subject: &paid_url,
            requirement: &required.accepts[0],
            payer: lab.payer,
            from_block: None,
        },
        now_unix(),
    );
    assert_eq!(refused(again), RefusalCode::SubjectInFlight);

    // The dead vantage's paid-call lock went with its connection: another vantage takes it.
    let rpc = crate::paid_support::lab_rpc(&lab);
    let lock = tokio::time::timeout(Duration::from_secs(10), other.lock_for_call())
        .await
        .expect("the killed vantage's call lock was released")
        .unwrap();
    let report = reconcile_all(&other, &rpc).await;
    let paid_id = open.iter().find(|r| r.subject == paid_url).unwrap().id;
    let unsent_id = open.iter().find(|r| r.subject == unsent_url).unwrap().id;
    assert_eq!(report.settled, vec![paid_id], "{report:?}");
    assert_eq!(
        report.still_open.len(),
        1,
        "unused and still valid: {report:?}"
    );
    // Once the chain's clock passes its window, the unsent one is released.
    lab.rpc.increase_time(600).await.unwrap();
    lab.rpc.mine().await.unwrap();
    let report = reconcile_all(&other, &rpc).await;
    assert_eq!(report.released, vec![unsent_id], "{report:?}");
    drop(lock);
    assert!(other.open_reservations().unwrap().is_empty());
    let settled = other.reservation(paid_id).unwrap().unwrap();
    assert_eq!(settled.state, ReservationState::Settled);
    assert!(settled.tx.is_some(), "the settling transaction was located");
    let resolved_by = admin(&url, |client| {
        Box::pin(async move {
            let rows = client
                .query(
                    "SELECT vantage, resolved_by FROM spend_reservation ORDER BY id",
                    &[],
                )
                .await
                .unwrap();
            rows.iter()
                .map(|r| (r.get::<_, String>(0), r.get::<_, Option<String>>(1)))
                .collect::<Vec<_>>()
        })
    });
    assert!(
        resolved_by
            .iter()
            .all(|(made, by)| made == "doomed" && by.as_deref() == Some("survivor")),
        "{resolved_by:?}"
    );
}
