//! Leased work on a real PostgreSQL (a throwaway cluster, or `X402_PROBE_TEST_POSTGRES`): two
//! vantages never take the same work at once (`FOR UPDATE SKIP LOCKED`); one that stops
//! heart-beating loses its leases to the other within the lease time, and learns it at its next
//! heartbeat; a vantage whose clock runs ahead cannot take a lease that is live by the database's
//! clock, and one whose clock runs behind cannot keep one past its expiry.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use x402_lab::postgres::Postgres;
use x402_probe::clock::{Clock, ManualClock, SystemClock};
use x402_probe::store::lease::{Lease, Leases, WorkKey};
use x402_probe::store::postgres::PgPool;

const LEASE: Duration = Duration::from_secs(2);

fn work(n: usize) -> Vec<WorkKey> {
    (0..n)
        .map(|i| WorkKey(format!("free:https://s{i:02}.example/")))
        .collect()
}

fn keys(leases: &[Lease]) -> BTreeSet<String> {
    leases.iter().map(|l| l.work.0.clone()).collect()
}

async fn leasers(pg: &Postgres, name: &str) -> (Leases, Leases) {
    let url = pg.fresh_database(name).unwrap();
    let pool = PgPool::connect(&url).await.expect("the database opens");
    (Leases::new(pool.clone(), "a"), Leases::new(pool, "b"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_leasers_never_share_work_and_a_silent_one_loses_its_leases_within_the_lease_time() {
    let pg = Postgres::start().expect("PostgreSQL starts");
    let (a, b) = leasers(&pg, "leasers").await;
    a.offer(&work(20)).await.unwrap();
    b.offer(&work(20)).await.unwrap(); // offered twice: still 20 rows

    // Taking at the same moment, ten rounds: never the same work twice, all of it taken.
    for _ in 0..10 {
        let (ta, tb) = tokio::join!(a.take(12, LEASE), b.take(12, LEASE));
        let (ta, tb) = (ta.unwrap(), tb.unwrap());
        assert!(keys(&ta).is_disjoint(&keys(&tb)));
        assert_eq!(ta.len() + tb.len(), 20);
        a.release(&ta).await.unwrap();
        b.release(&tb).await.unwrap();
    }

    // A takes everything and heart-beats for longer than a lease: B gets nothing meanwhile.
    let mut held = a.take(20, LEASE).await.unwrap();
    assert_eq!(held.len(), 20);
    let until = Instant::now() + LEASE + LEASE / 2;
    while Instant::now() < until {
        assert!(b.take(20, LEASE).await.unwrap().is_empty());
        held = a.heartbeat(&held, LEASE).await.unwrap();
        assert_eq!(held.len(), 20, "a live lease is kept by its heartbeat");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // A stops heart-beating (as a vantage killed or cut off). Its last heartbeat set every
    // expiry to the database's now + LEASE, at or before `silent`.
    held = a.heartbeat(&held, LEASE).await.unwrap();
    let silent = Instant::now();
    let mut moved = Vec::new();
    while moved.len() < 20 && silent.elapsed() < LEASE * 3 {
        moved.extend(b.take(20, LEASE).await.unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = silent.elapsed();
    moved.sort_by(|x, y| x.work.cmp(&y.work));
    assert_eq!(moved.len(), 20, "every lease moved to B");
    assert!(
        after <= LEASE + Duration::from_millis(600),
        "moved {after:?} after A fell silent, lease {LEASE:?}"
    );
    assert!(
        after >= LEASE - Duration::from_millis(400),
        "moved {after:?} after A fell silent: before its leases expired"
    );
    // Each was taken anew (its generation raised); A learns it lost them all.
    for (old, new) in held.iter().zip(&moved) {
        assert_eq!((&old.work, old.generation + 1), (&new.work, new.generation));
    }
    assert!(a.heartbeat(&held, LEASE).await.unwrap().is_empty());
    assert!(!a.holds(&held[0]).await.unwrap());
    assert!(b.holds(&moved[0]).await.unwrap());
    let rows = b.rows().await.unwrap();
    assert!(
        rows.iter()
            .all(|r| r.holder.as_deref() == Some("b") && r.live)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skewed_clock_can_neither_steal_a_lease_nor_keep_one() {
    let pg = Postgres::start().expect("PostgreSQL starts");
    let (a, b) = leasers(&pg, "skew").await;
    let hour = 3_600_000;
    a.offer(&work(2)).await.unwrap();

    // A holds the first piece of work for a minute.
    let held = a.take(1, Duration::from_secs(60)).await.unwrap();
    assert_eq!(held.len(), 1);
    // B's clock runs an hour ahead: by it, A's lease expired long ago.
    let b_clock = ManualClock::at_ms(SystemClock.now_ms() + hour);
    let row = b.rows().await.unwrap().into_iter().next().unwrap();
    assert!(row.expires_at_ms < b_clock.now_ms(), "expired by B's clock");
    // The database does not agree: B gets the other piece of work only, never A's.
    let taken = b.take(2, Duration::from_secs(60)).await.unwrap();
    assert_eq!(keys(&taken), BTreeSet::from([work(2)[1].0.clone()]));
    assert!(a.holds(&held[0]).await.unwrap());

    // A's clock runs an hour behind: by it, a one-second lease is still live long after.
    b.release(&taken).await.unwrap();
    let short = a.take(1, Duration::from_secs(1)).await.unwrap();
    assert_eq!(short.len(), 1);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let a_clock = ManualClock::at_ms(SystemClock.now_ms() - hour);
    assert!(
        short[0].expires_at_ms > a_clock.now_ms(),
        "live by A's clock"
    );
    // Its heartbeat is refused by the database's time, and B may take the work.
    assert!(
        a.heartbeat(&short, Duration::from_secs(60))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(!a.holds(&short[0]).await.unwrap());
    let stolen = b.take(1, Duration::from_secs(60)).await.unwrap();
    assert_eq!(keys(&stolen), keys(&short));
}

/// The scoring role's writes are fenced by its lease in their own transaction: a vantage whose
/// role expired, was taken again (a new generation) or was taken by another writes nothing,
/// whatever it believes; while it holds the role, its fenced appends land.
#[test]
fn a_fenced_append_lands_only_while_its_lease_is_held() {
    use x402_probe::ledger::key::ReporterKey;
    use x402_probe::ledger::record::{ControlRecord, Record};
    use x402_probe::store::lease::Fence;
    use x402_probe::store::postgres::PgLedger;
    use x402_probe::store::{NewEntry, Store, StoreError};

    let pg = Postgres::start().expect("PostgreSQL starts");
    let url = pg.fresh_database("fenced").unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pool = runtime.block_on(PgPool::connect(&url)).unwrap();
    let (a, b) = (Leases::new(pool.clone(), "a"), Leases::new(pool, "b"));
    let dir = tempfile::tempdir().unwrap();
    let key = ReporterKey::generate(&dir.path().join("a.key")).unwrap();
    let ledger = PgLedger::open(&url, "a", key.public_key()).unwrap();
    let control = |n: i64| {
        vec![NewEntry::plain(
            1_790_000_000_000 + n,
            Record::Control(ControlRecord {
                url: "https://control.example/".into(),
                at_ms: 1_790_000_000_000 + n,
                ok: true,
                detail: format!("probe {n}"),
            }),
        )]
    };
    let fence = |lease: &Lease| Fence {
        lease: lease.clone(),
        idle_limit: Duration::from_millis(500),
    };
    let lost = |r: Result<Vec<u64>, StoreError>| matches!(r, Err(StoreError::LeaseLost { .. }));

    // Long enough for two small appends on a busy machine; waited out below.
    let short = Duration::from_secs(3);
    let first = runtime
        .block_on(a.take_role(short))
        .unwrap()
        .expect("the role is free");
    assert_eq!(
        ledger.append_fenced(control(1), &fence(&first)).unwrap(),
        vec![1]
    );
    // Taken again by the same vantage: the old generation's fence no longer holds.
    let second = runtime
        .block_on(a.take_role(short))
        .unwrap()
        .expect("a's own role");
    assert!(second.generation > first.generation);
    assert!(lost(ledger.append_fenced(control(2), &fence(&first))));
    assert_eq!(
        ledger.append_fenced(control(2), &fence(&second)).unwrap(),
        vec![2]
    );
    // Expired, though no one took it yet: refused by the database's clock.
    std::thread::sleep(short + Duration::from_millis(300));
    assert!(lost(ledger.append_fenced(control(3), &fence(&second))));
    // Taken by another vantage: refused, and a fence in the other's name is not a's either.
    let taken = runtime
        .block_on(b.take_role(LEASE))
        .unwrap()
        .expect("expired: b takes it");
    assert!(lost(ledger.append_fenced(control(3), &fence(&second))));
    assert!(lost(ledger.append_fenced(control(3), &fence(&taken))));
    // Nothing refused was written; an unfenced append follows on from the last that landed.
    assert_eq!(Store::head(&ledger).unwrap().0, 2);
    assert_eq!(Store::append(&ledger, control(3)).unwrap(), vec![3]);
}

/// A fenced transaction whose writer stops (paused, swapped out) after the check: the lease's
/// row stays locked, so no one takes the lease though it expired, until the server ends the
/// idle transaction at the fence's limit; then another takes it, and the stopped writer's
/// commit fails: nothing it wrote lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_transaction_left_idle_keeps_the_lease_until_the_server_ends_it() {
    use x402_probe::store::lease::{Fence, hold_fence};

    let pg = Postgres::start().expect("PostgreSQL starts");
    let url = pg.fresh_database("idle").unwrap();
    let pool = PgPool::connect(&url).await.expect("the database opens");
    let (a, b) = (
        Leases::new(pool.clone(), "a"),
        Leases::new(pool.clone(), "b"),
    );
    let lease = a
        .take_role(Duration::from_millis(100))
        .await
        .unwrap()
        .expect("the role is free");
    let idle_limit = Duration::from_millis(1500);
    let mut client = pool.client("the stopped writer").await.unwrap();
    let tx = client.transaction().await.unwrap();
    let fence = Fence { lease, idle_limit };
    assert!(
        hold_fence(&*tx, &fence, "a").await.unwrap(),
        "held when checked"
    );
    let checked = Instant::now();
    // Nothing more is sent on a's transaction. Its lease expires within 100 ms, yet b's take
    // waits on the row until the server ends a's transaction.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let taken = tokio::time::timeout(Duration::from_secs(20), b.take_role(LEASE))
        .await
        .expect("the server ends the idle transaction")
        .unwrap();
    let after = checked.elapsed();
    assert!(taken.is_some(), "b takes the expired lease");
    assert!(
        after >= idle_limit - Duration::from_millis(100),
        "taken {after:?} after a's check, before its transaction was ended"
    );
    assert!(
        tx.commit().await.is_err(),
        "the ended transaction commits nothing"
    );
    // Its own fence no longer holds in a new transaction either.
    let mut client = pool.client("a again").await.unwrap();
    let tx = client.transaction().await.unwrap();
    assert!(!hold_fence(&*tx, &fence, "a").await.unwrap());
}
