//! Leased work shared by three vantages in network namespaces of their own, on one PostgreSQL
//! reached over each vantage's link: all three hold work at once and never the same; one vantage
//! cut off (`ip link set down`) and another killed with `kill -9` lose their leases to the third
//! within the lease time (by the database's clock: the cut one is never told); the cut one,
//! joined again, learns at its next heartbeat that it holds nothing, and takes work again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use x402_lab::postgres::{Postgres, url_at};
use x402_lab::vantage_net::VantageNet;
use x402_probe::store::lease::{Lease, Leases, WorkKey};
use x402_probe::store::postgres::PgPool;

const LEASE: Duration = Duration::from_secs(2);
/// How often a leaser takes work and heart-beats.
const BEAT: Duration = Duration::from_millis(250);
const WORK: usize = 30;
/// Work a leaser takes at most per round (so that all three get some).
const TAKE: usize = 10;
const CHILD_TEST: &str = "vantage_leases::child_leaser";

fn work() -> Vec<WorkKey> {
    (0..WORK)
        .map(|i| WorkKey(format!("free:https://s{i:02}.example/")))
        .collect()
}

/// One vantage's leasing loop: take what is free (up to [`TAKE`] a round, and `cap` in all),
/// heart-beat what it holds, until `stop`. What it holds after each round is in `held`; a failed round (the database
/// unreachable) keeps what it believed it held, as a vantage cut off would.
async fn lease_loop(
    url: String,
    holder: String,
    cap: usize,
    held: Arc<Mutex<Vec<Lease>>>,
    lost: Arc<Mutex<usize>>,
    stop: Arc<AtomicBool>,
) {
    let mut pool: Option<PgPool> = None;
    while !stop.load(Ordering::Relaxed) {
        if pool.is_none() {
            let connect = PgPool::connect(&url);
            pool = tokio::time::timeout(Duration::from_secs(1), connect)
                .await
                .ok()
                .and_then(Result::ok);
        }
        if let Some(p) = &pool {
            let leases = Leases::new(p.clone(), &holder);
            let mine = held.lock().unwrap().clone();
            let round = async {
                let kept = leases.heartbeat(&mine, LEASE).await?;
                let room = cap.saturating_sub(kept.len()).min(TAKE);
                let taken = if room == 0 {
                    Vec::new()
                } else {
                    leases.take(room, LEASE).await?
                };
                Ok::<_, x402_probe::store::StoreError>((kept, taken))
            };
            match tokio::time::timeout(Duration::from_secs(1), round).await {
                Ok(Ok((kept, taken))) => {
                    *lost.lock().unwrap() += mine.len() - kept.len();
                    let mut now = kept;
                    now.extend(taken);
                    *held.lock().unwrap() = now;
                }
                // Unreachable: what it holds is as it believes; a new connection next round.
                _ => pool = None,
            }
        }
        tokio::time::sleep(BEAT).await;
    }
}

/// The leasing loop as a process of its own, in a vantage's namespace, killed by the parent.
#[tokio::test(flavor = "current_thread")]
#[ignore = "run only as a child process by three_vantages_share_leases_and_lose_them_when_cut_or_killed"]
async fn child_leaser() {
    let url = std::env::var("VANTAGE_CHILD_URL").expect("VANTAGE_CHILD_URL");
    let holder = std::env::var("VANTAGE_CHILD_HOLDER").expect("VANTAGE_CHILD_HOLDER");
    let stop = Arc::new(AtomicBool::new(false));
    lease_loop(url, holder, TAKE, Arc::default(), Arc::default(), stop).await;
}

/// Live leases by holder, and the addresses each holder's connections come from, as the
/// database sees them.
async fn by_holder(
    admin: &Leases,
    pool: &PgPool,
) -> (BTreeMap<String, usize>, BTreeMap<String, String>) {
    let mut held = BTreeMap::new();
    for row in admin.rows().await.unwrap() {
        if let (Some(holder), true) = (row.holder, row.live) {
            *held.entry(holder).or_default() += 1;
        }
    }
    let client = pool.client("reading connections").await.unwrap();
    let addresses = client
        .query(
            "SELECT DISTINCT application_name, host(client_addr) FROM pg_stat_activity
             WHERE application_name LIKE 'vantage-%' AND client_addr IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
        .collect();
    (held, addresses)
}

#[test]
fn three_vantages_share_leases_and_lose_them_when_cut_or_killed() {
    let net = VantageNet::create(3).expect("three vantages (needs root and iproute2)");
    let service = net.service_address();
    let pg = Postgres::throwaway_reachable(&net.postgres_reach())
        .expect("a throwaway PostgreSQL (needs the postgresql package)");
    let local_url = pg.fresh_database("vantage_leases").unwrap();
    let vantage_url = |i: usize| {
        format!(
            "{}?application_name=vantage-{i}",
            url_at(&local_url, service)
        )
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pool = runtime
        .block_on(PgPool::connect(&local_url))
        .expect("the database opens");
    let admin = Leases::new(pool.clone(), "admin");
    runtime.block_on(admin.offer(&work())).unwrap();

    // Vantage 2: a process in its namespace.
    let mut child = Some(
        net.command(2, std::env::current_exe().unwrap())
            .unwrap()
            .args([CHILD_TEST, "--exact", "--ignored", "--test-threads=1"])
            .env("VANTAGE_CHILD_URL", vantage_url(2))
            .env("VANTAGE_CHILD_HOLDER", "vantage-2")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("the child leaser starts"),
    );
    // Vantages 0 and 1: threads in theirs.
    let stop = Arc::new(AtomicBool::new(false));
    let held: Vec<Arc<Mutex<Vec<Lease>>>> = (0..2).map(|_| Arc::default()).collect();
    let lost: Vec<Arc<Mutex<usize>>> = (0..2).map(|_| Arc::default()).collect();
    let holds = |holder: &str, n: usize| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while runtime.block_on(by_holder(&admin, &pool)).0.get(holder) != Some(&n) {
            assert!(Instant::now() < deadline, "{holder} holds {n} within 20 s");
            std::thread::sleep(BEAT);
        }
    };
    // Vantage 2 takes its share first, then vantage 0 (at most a share each), then vantage 1
    // (the rest, and later whatever the others lose).
    let mut cleanup = Cleanup {
        stop: &stop,
        child: &mut child,
    };
    holds("vantage-2", TAKE);
    std::thread::scope(|scope| {
        // Dropped first when anything below panics: the threads stop, so the scope can end.
        let stop_threads = Cleanup {
            stop: &stop,
            child: &mut None,
        };
        for (i, cap) in [(0, TAKE), (1, WORK)] {
            let (url, held, lost, stop) = (
                vantage_url(i),
                held[i].clone(),
                lost[i].clone(),
                stop.clone(),
            );
            let net = &net;
            scope.spawn(move || {
                net.run_in(i, move || {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap()
                        .block_on(lease_loop(
                            url,
                            format!("vantage-{i}"),
                            cap,
                            held,
                            lost,
                            stop,
                        ))
                })
                .expect("enter the vantage's namespace")
            });
            if i == 0 {
                holds("vantage-0", TAKE);
            }
        }
        // All three hold work, from their own addresses, and all of it is held.
        holds("vantage-1", TAKE);
        let (counts, addresses) = runtime.block_on(by_holder(&admin, &pool));
        assert_eq!(counts.values().sum::<usize>(), WORK, "{counts:?}");
        for (i, vantage) in net.vantages().iter().enumerate() {
            assert_eq!(
                addresses.get(&format!("vantage-{i}")),
                Some(&vantage.address.to_string()),
                "vantage {i} reaches the database from its own address: {addresses:?}"
            );
        }
        // No lease is held twice: the rows say one holder each, and the two threads' views
        // are disjoint.
        let mine: Vec<Vec<String>> = held
            .iter()
            .map(|h| h.lock().unwrap().iter().map(|l| l.work.0.clone()).collect())
            .collect();
        assert!(mine[0].iter().all(|w| !mine[1].contains(w)));

        // Vantage 0 cut off, vantage 2 killed: vantage 1 holds everything within the lease
        // time (plus a round of its loop and a margin for a loaded machine).
        net.cut(0).unwrap();
        cleanup.kill_child();
        let cut_at = Instant::now();
        let bound = LEASE + BEAT * 2 + Duration::from_millis(1500);
        let mut counts = runtime.block_on(by_holder(&admin, &pool)).0;
        while counts.get("vantage-1") != Some(&WORK) && cut_at.elapsed() < bound * 2 {
            std::thread::sleep(Duration::from_millis(50));
            counts = runtime.block_on(by_holder(&admin, &pool)).0;
        }
        let moved = cut_at.elapsed();
        assert_eq!(
            counts.get("vantage-1"),
            Some(&WORK),
            "all work moved to vantage 1: {counts:?}"
        );
        assert!(
            moved <= bound,
            "moved {moved:?} after the cut and the kill; bound {bound:?}"
        );
        assert!(
            moved >= LEASE - Duration::from_millis(500),
            "moved {moved:?}: before the leases expired"
        );
        // The cut vantage still believes it holds its leases: it was never told.
        assert!(!held[0].lock().unwrap().is_empty());

        // Joined again, its next heartbeat tells it it holds nothing of what it had.
        net.restore(0).unwrap();
        let back = Instant::now();
        while *lost[0].lock().unwrap() == 0 && back.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(BEAT);
        }
        assert_eq!(
            *lost[0].lock().unwrap(),
            TAKE,
            "vantage 0 learnt it lost its leases"
        );
        let rows = runtime.block_on(admin.rows()).unwrap();
        assert!(
            rows.iter()
                .all(|r| r.holder.as_deref() == Some("vantage-1") && r.live)
        );
        drop(stop_threads);
    });
}

/// Stops the leasing threads and kills the child leaser, also when a test assertion panics.
struct Cleanup<'a> {
    stop: &'a AtomicBool,
    child: &'a mut Option<std::process::Child>,
}

impl Cleanup<'_> {
    fn kill_child(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
        }
    }
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.kill_child();
    }
}
