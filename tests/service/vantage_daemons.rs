//! Three `x402-probe daemon` processes as three vantages on one PostgreSQL, against the lab, with
//! a 4-second cycle and `vantages_per_cycle = 2`: every subject's cycle is probed by two distinct
//! vantages (the lease rows say who did each replica); a vantage killed with `kill -9` while it
//! holds work loses it to the others within the lease time (by the database's clock), and no
//! subject goes unprobed for more than one cycle plus the lease time (measured from the
//! vantages' run entries in the shared store); every vantage's log verifies and every published
//! score recomputes. Every vantage pays from its first run: one payment per subject per interval
//! whichever vantage makes it, and the day's cap holds across all of them (the chain reached
//! through a forwarder on the service address in namespaces). With root and `ip`,
//! the vantages run in network namespaces of their own (the lab's endpoints and the database on
//! the service address) and one more is cut off (`ip link set down`): the last one carries on.

use crate::daemon_support;
use crate::process_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::vantage_support::{Daemons, spawn_daemon, vantage_setup};
use daemon_support::*;
use x402_lab::server::{BySource, Placement};
use x402_probe::store::postgres::PgPool;

const EVERY_MS: i64 = 4_000;
const LEASE_MS: i64 = 3_000;
const BEAT_MS: i64 = 500;
const VANTAGES: usize = 3;
/// The spend cap per day, shared by every vantage: two of the three subjects' calls (the lab
/// quotes 0.01 USD).
const PAY_DAY_USD: &str = "0.02";
/// Room for a loaded machine (2 cores shared by several builds) on every time bound.
const SLACK_MS: i64 = 2_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A replica's run done: by whom, and when (the database's clock).
#[derive(Debug, Clone)]
struct Done {
    holder: String,
    at_ms: i64,
}

/// A reservation in the shared spend store: subject, vantage, state, cost in USD.
type Reserved = (String, String, String, String);
/// A refusal in the shared spend store: subject, vantage, code.
type Refused = (String, String, String);

/// What the test reads of the shared store.
struct Shared {
    runtime: tokio::runtime::Runtime,
    pool: PgPool,
    /// Every replica seen done, by (subject, cycle, replica) (the rows are forgotten after a few
    /// cycles: the test reads them often).
    done: BTreeMap<(String, i64, i32), Done>,
}

impl Shared {
    fn poll(&mut self) {
        let pool = self.pool.clone();
        let rows = self.runtime.block_on(async move {
            let client = pool.client("reading leases").await.unwrap();
            client
                .query(
                    "SELECT subject, cycle, replica, holder,
                            (extract(epoch FROM done_at) * 1000)::bigint
                     FROM lease WHERE cycle IS NOT NULL AND done_at IS NOT NULL",
                    &[],
                )
                .await
                .unwrap()
        });
        for r in rows {
            self.done
                .entry((r.get(0), r.get(1), r.get(2)))
                .or_insert(Done {
                    holder: r.get(3),
                    at_ms: r.get(4),
                });
        }
    }

    /// Free runs `holder` holds now (live, not done).
    fn holding(&self, holder: &str) -> Vec<(String, i64, i32)> {
        let pool = self.pool.clone();
        let holder = holder.to_string();
        self.runtime.block_on(async move {
            let client = pool.client("reading leases").await.unwrap();
            client
                .query(
                    "SELECT subject, cycle, replica FROM lease WHERE cycle IS NOT NULL
                       AND done_at IS NULL AND holder = $1 AND expires_at > now()",
                    &[&holder],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect()
        })
    }

    /// Every run entry of every vantage: (vantage, subject, at_ms).
    fn runs(&self) -> Vec<(String, String, i64)> {
        let pool = self.pool.clone();
        self.runtime.block_on(async move {
            let client = pool.client("reading runs").await.unwrap();
            client
                .query(
                    "SELECT v.name, e.subject, e.at_ms FROM entry e
                     JOIN vantage v ON v.id = e.vantage WHERE e.kind = 'run' ORDER BY e.at_ms",
                    &[],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect()
        })
    }

    /// Every payment reserved by any vantage: (subject, vantage, state, cost in USD), and every
    /// refusal: (subject, vantage, code).
    fn spend(&self) -> (Vec<Reserved>, Vec<Refused>) {
        let pool = self.pool.clone();
        self.runtime.block_on(async move {
            let client = pool.client("reading the spend store").await.unwrap();
            let reserved = client
                .query(
                    "SELECT subject, vantage, state, cost_usd FROM spend_reservation ORDER BY id",
                    &[],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect();
            let refused = client
                .query(
                    "SELECT subject, vantage, code FROM spend_refusal ORDER BY id",
                    &[],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect();
            (reserved, refused)
        })
    }

    /// Polls for `ms`.
    fn watch(&mut self, ms: i64) {
        let until = Instant::now() + Duration::from_millis(ms as u64);
        while Instant::now() < until {
            self.poll();
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The cycles of `subjects` in `cycles` whose replicas were not all done by distinct
    /// vantages (`per_cycle` of them), and the pairs done by one vantage twice (never allowed).
    fn incomplete(
        &self,
        subjects: &[String],
        cycles: std::ops::RangeInclusive<i64>,
        per_cycle: usize,
    ) -> Vec<String> {
        let mut missing = Vec::new();
        for subject in subjects {
            for cycle in cycles.clone() {
                let holders: BTreeSet<&str> = (0..per_cycle as i32)
                    .filter_map(|r| self.done.get(&(subject.clone(), cycle, r)))
                    .map(|d| d.holder.as_str())
                    .collect();
                if holders.len() < per_cycle {
                    missing.push(format!("{subject} cycle {cycle}: {holders:?}"));
                }
            }
        }
        missing
    }
}

/// Each subject's longest time without a run (any vantage) between `from_ms` and `to_ms`.
fn longest_gaps(
    runs: &[(String, String, i64)],
    subjects: &[String],
    from_ms: i64,
    to_ms: i64,
) -> BTreeMap<String, i64> {
    subjects
        .iter()
        .map(|s| {
            let mut at: Vec<i64> = runs
                .iter()
                .filter(|(_, subject, t)| subject == s && *t >= from_ms && *t <= to_ms)
                .map(|(_, _, t)| *t)
                .collect();
            at.insert(0, from_ms);
            at.push(to_ms);
            let gap = at.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
            (s.clone(), gap)
        })
        .collect()
}

fn vantage_config(
    lab: &x402_lab::Lab,
    dir: &Path,
    name: &str,
    url: &str,
    subjects: &[String],
    rpc: &str,
) -> PathBuf {
    let state = dir.join(name);
    let mut settings = Settings::new(&state);
    settings.subjects = subjects.to_vec();
    // Paid calls from the first run, one per subject per minute at most (the least interval):
    // the three vantages want to pay every subject at once; the paid lease and the shared spend
    // store must let one of them pay each, and the day's cap (`PAY_DAY_USD`) only as many as fit.
    settings.pay = true;
    settings.pay_from_first_run = true;
    settings.paid_min_interval_secs = 60;
    settings.samples = 1;
    settings.free_every_secs = (EVERY_MS / 1000) as u64;
    let extra = format!(
        "vantages_per_cycle = 2\nlease_ms = {LEASE_MS}\nheartbeat_ms = {BEAT_MS}\nper_host_gap_ms = 0"
    );
    settings.extra = &extra;
    settings.api = "[api]\nenabled = false\n".into();
    let text = config_text(lab, &settings);
    let day_cap = "max_usd_per_day = \"5\"";
    assert!(
        text.contains(day_cap) && text.contains(lab.rpc_url()),
        "{text}"
    );
    let text = text
        .replace(day_cap, &format!("max_usd_per_day = \"{PAY_DAY_USD}\""))
        .replace(lab.rpc_url(), rpc)
        .replace("per_host_gap_ms = 1000\n", "")
        .replace("vantage = \"lab\"", &format!("vantage = \"{name}\""));
    let text = format!("{text}\n[store]\npostgres = \"{url}\"\n");
    let path = state.join("daemon.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// SIGTERM to vantage `i`, and its exit awaited (the log signed at its head).
fn stop(daemons: &mut Daemons, i: usize) {
    if let Some(mut child) = daemons.0[i].take() {
        process_support::signal(&child, libc::SIGTERM);
        let status = child.wait().unwrap();
        assert!(status.success(), "vantage {i} stopped with {status}");
    }
}

fn verify(url: &str, name: &str) {
    let (code, said) = process_support::run(&[
        "ledger",
        "verify",
        "--postgres",
        url,
        "--vantage",
        name,
        "--quiet",
    ]);
    assert_eq!(code, 0, "vantage {name}'s log: {said}");
    assert!(said.contains(&format!("vantage \"{name}\"")), "{said}");
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[test]
fn three_vantages_share_each_cycle_and_take_over_a_killed_ones_work() {
    // Namespaces when root and `ip` can make them; loopback otherwise (the cut is skipped).
    let setup = vantage_setup(VANTAGES, "vantage_daemons", "the link cut");
    let (net, local_url, vantage_url) = (
        &setup.net,
        setup.local_url.as_str(),
        setup.vantage_url.as_str(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (_lab, subjects) = runtime.block_on(async {
        let mut lab = lab(&["honest-v2", "honest-v1"]).await;
        let mut subjects: Vec<String> = lab.endpoints.iter().map(|e| e.url.clone()).collect();
        if let Some(net) = &net {
            // The vantages reach the lab on the service address only.
            subjects.clear();
            for (i, base) in ["honest-v2", "honest-v1", "honest-v2"].iter().enumerate() {
                let placement = Placement {
                    bind: net.service_address().into(),
                    by_source: BySource::Alike,
                };
                let url = lab
                    .spawn_placed(base, &format!("placed-{i}"), &placement)
                    .await
                    .expect("a placed endpoint");
                subjects.push(url);
            }
        }
        (lab, subjects)
    });
    let subjects: Vec<String> = subjects
        .iter()
        .map(|s| x402_probe::http_url::canonical_subject_url(s).unwrap())
        .collect();
    let pool = runtime
        .block_on(PgPool::connect(local_url))
        .expect("the database opens");
    let mut shared = Shared {
        runtime,
        pool,
        done: BTreeMap::new(),
    };
    // The chain: in namespaces through a forwarder on the service address (anvil listens on
    // the host's loopback, out of a namespace's reach).
    let forward = net.as_ref().map(|net| {
        let anvil: std::net::SocketAddr = _lab
            .rpc_url()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("anvil's RPC URL is an address");
        x402_lab::forward::TcpForward::start(net.service_address().into(), anvil)
            .expect("a forwarder to anvil")
    });
    let rpc = forward
        .as_ref()
        .map_or(_lab.rpc_url().to_string(), |f| f.http_url());
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..VANTAGES).map(|i| format!("v{i}")).collect();
    let mut daemons = Daemons(Vec::new());
    for (i, name) in names.iter().enumerate() {
        let config = vantage_config(&_lab, dir.path(), name, vantage_url, &subjects, &rpc);
        let log = dir.path().join(format!("{name}.log"));
        daemons.0.push(Some(spawn_daemon(net, i, &config, &log)));
    }
    let cycle_of = |ms: i64| ms.div_euclid(EVERY_MS);
    // The last cycle whose runs have all had time to land: a cycle's last replica may be due in
    // its last moment, and a busy machine finishes that run well into the next cycle.
    let settled_cycle = || cycle_of(now_ms() - SLACK_MS) - 1;

    // Three vantages: wait for two whole cycles in which every subject's two replicas were done
    // by two distinct vantages.
    let started = now_ms();
    let deadline = Instant::now() + Duration::from_secs(45);
    let steady = loop {
        shared.poll();
        let now = cycle_of(now_ms());
        let complete = |c: i64| shared.incomplete(&subjects, c..=c, 2).is_empty();
        if let Some(c) = (cycle_of(started)..now - 1).find(|&c| complete(c) && complete(c + 1)) {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "no two whole cycles by distinct vantages within 45 s: {:?}",
            shared.incomplete(&subjects, cycle_of(started)..=now, 2)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // One more cycle, all three running: every cycle since the first whole one is whole.
    shared.watch(EVERY_MS + SLACK_MS);
    let before_kill = settled_cycle();
    let missing = shared.incomplete(&subjects, steady..=before_kill, 2);
    assert!(
        missing.is_empty(),
        "cycles not probed by 2 vantages: {missing:?}"
    );
    let by: BTreeSet<&str> = shared.done.values().map(|d| d.holder.as_str()).collect();
    assert_eq!(by.len(), VANTAGES, "every vantage took work: {by:?}");

    // kill -9 vantage 0 while it holds work.
    let deadline = Instant::now() + Duration::from_secs(20);
    let held = loop {
        let held = shared.holding("v0");
        if !held.is_empty() {
            break held;
        }
        assert!(Instant::now() < deadline, "v0 never held work");
        std::thread::sleep(Duration::from_millis(20));
    };
    daemons.kill(0);
    let killed_at = now_ms();
    shared.watch(LEASE_MS + 2 * EVERY_MS + SLACK_MS);
    // Its work was done by the others within the lease time (plus a round and the run).
    for key in &held {
        let done = shared.done.get(key);
        let done = done.unwrap_or_else(|| panic!("{key:?}, held by v0 at the kill, never done"));
        assert_ne!(done.holder, "v0", "{key:?}");
        let after = done.at_ms - killed_at;
        eprintln!(
            "v0's {key:?} done by {} {after} ms after the kill (lease {LEASE_MS} ms; load {})",
            done.holder,
            load()
        );
        assert!(
            after <= LEASE_MS + EVERY_MS + SLACK_MS,
            "{key:?}: {after} ms"
        );
    }
    // The cycles since the lease ran out: two replicas each, by the two left.
    let from = cycle_of(killed_at + LEASE_MS) + 1;
    let to = settled_cycle();
    assert!(to >= from, "a whole cycle watched after the kill");
    let missing = shared.incomplete(&subjects, from..=to, 2);
    assert!(missing.is_empty(), "after the kill: {missing:?}");
    for c in from..=to {
        for s in &subjects {
            for r in 0..2 {
                assert_ne!(shared.done[&(s.clone(), c, r)].holder, "v0");
            }
        }
    }

    // With namespaces: vantage 1 cut off; vantage 2 alone does one replica of every cycle.
    let mut cut_window = None;
    if let Some(net) = &net {
        net.cut(1).unwrap();
        let cut_at = now_ms();
        shared.watch(LEASE_MS + 2 * EVERY_MS + SLACK_MS);
        let from = cycle_of(cut_at + LEASE_MS) + 1;
        let to = settled_cycle();
        assert!(to >= from);
        for c in from..=to {
            for s in &subjects {
                let by: Vec<&str> = (0..2)
                    .filter_map(|r| shared.done.get(&(s.clone(), c, r)))
                    .map(|d| d.holder.as_str())
                    .collect();
                assert_eq!(by, ["v2"], "{s} cycle {c} while v1 is cut off");
            }
        }
        net.restore(1).unwrap();
        cut_window = Some((cut_at, now_ms()));
        // Back, it takes work again.
        let back = now_ms();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !shared
            .done
            .values()
            .any(|d| d.holder == "v1" && d.at_ms > back)
        {
            assert!(Instant::now() < deadline, "v1 takes work again once joined");
            shared.watch(200);
        }
    }

    // No subject went unprobed for more than one cycle plus the lease time, from the first
    // whole cycle to now, across the kill (and the cut).
    let end = now_ms();
    let runs = shared.runs();
    let gaps = longest_gaps(&runs, &subjects, steady * EVERY_MS + EVERY_MS, end);
    eprintln!(
        "longest time without a run, by subject (ms): {gaps:?}; cycle {EVERY_MS} ms, lease \
         {LEASE_MS} ms, cut {cut_window:?}; load {}",
        load()
    );
    for (subject, gap) in &gaps {
        assert!(
            *gap <= EVERY_MS + LEASE_MS + SLACK_MS,
            "{subject} went {gap} ms without a run"
        );
    }
    let by_vantage: BTreeMap<&str, usize> = runs.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.0.as_str()).or_default() += 1;
        m
    });
    eprintln!("runs by vantage: {by_vantage:?}");

    for i in 1..VANTAGES {
        stop(&mut daemons, i);
    }
    // Every log verifies; the scores (the scorer's log, whichever vantage held the role, and
    // one that held it before a kill too) recompute byte for byte, paid calls included.
    let mut recomputed = 0;
    for name in &names {
        verify(local_url, name);
        let (code, said) = process_support::run(&[
            "recompute",
            "--postgres",
            local_url,
            "--vantage",
            name,
            "--quiet",
        ]);
        if code == 0 {
            assert!(said.contains("byte for byte"), "{name}: {said}");
            recomputed += 1;
        } else {
            assert!(said.contains("holds no published score"), "{name}: {said}");
        }
    }
    assert!(recomputed >= 1, "some vantage published scores");

    // Money, across the kill and the cut: three vantages wanted to pay every subject from their
    // first run; one payment per subject at most (the interval is a minute, longer than the
    // test), and no more than the day's cap across all vantages; the calls the cap refused are
    // on record as refusals.
    let (reserved, refused) = shared.spend();
    eprintln!("reserved: {reserved:?}; refused: {refused:?}");
    let mut per_subject: BTreeMap<&str, usize> = BTreeMap::new();
    for (subject, _, state, _) in &reserved {
        if state != "released" {
            *per_subject.entry(subject.as_str()).or_default() += 1;
        }
    }
    for (subject, n) in &per_subject {
        assert_eq!(
            *n, 1,
            "{subject} paid {n} times within one interval: {reserved:?}"
        );
    }
    let cents: u64 = reserved
        .iter()
        .filter(|r| r.2 != "released")
        .map(|r| {
            let usd: f64 = r.3.parse().unwrap();
            (usd * 100.0).round() as u64
        })
        .sum();
    let cap_cents = (PAY_DAY_USD.parse::<f64>().unwrap() * 100.0).round() as u64;
    assert!(
        cents <= cap_cents,
        "{cents} cents spent, cap {cap_cents}: {reserved:?}"
    );
    let settled = reserved.iter().filter(|r| r.2 == "settled").count();
    assert!(settled >= 1, "some vantage paid: {reserved:?}");
    // Three subjects, room for two: the third was refused by the shared cap, not paid.
    assert_eq!(per_subject.len(), 2, "{reserved:?}");
    let unpaid: Vec<&String> = subjects
        .iter()
        .filter(|s| !per_subject.contains_key(s.as_str()))
        .collect();
    assert!(
        refused
            .iter()
            .any(|(s, _, code)| s == unpaid[0] && code == "over_daily_cap"),
        "{unpaid:?} refused by the day's cap: {refused:?}"
    );
    drop(forward);
}

#[test]
fn leased_work_settings_out_of_range_are_refused_at_the_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    x402_probe::ledger::key::ReporterKey::generate(&state.join("reporter.key")).unwrap();
    let base = format!(
        "[daemon]\nstate_dir = \"{}\"\nreporter_key = {{ key_file = \"{}\" }}\n[api]\nenabled = false\n",
        state.display(),
        state.join("reporter.key").display()
    );
    let postgres = "[store]\npostgres = \"postgres://probe@127.0.0.1:1/x402\"\n";
    for (schedule, store, said) in [
        // Several vantages per cycle need a shared store.
        (
            "vantages_per_cycle = 2",
            "",
            "[schedule] vantages_per_cycle",
        ),
        ("vantages_per_cycle = 0", postgres, "vantages_per_cycle"),
        ("vantages_per_cycle = 17", postgres, "vantages_per_cycle"),
        // Replicas less than a second apart.
        (
            "free_every_secs = 2\nvantages_per_cycle = 3",
            postgres,
            "[schedule] vantages_per_cycle",
        ),
        ("lease_ms = 500", postgres, "lease_ms"),
        // A heartbeat longer than half the lease.
        (
            "lease_ms = 2000\nheartbeat_ms = 1500",
            postgres,
            "[schedule] heartbeat_ms",
        ),
    ] {
        let config = format!("{base}[schedule]\n{schedule}\n{store}");
        let path = dir.path().join("daemon.toml");
        std::fs::write(&path, &config).unwrap();
        let (code, text) = process_support::run(&["daemon", "--config", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{schedule}: {text}");
        assert!(text.contains(said), "{schedule}: {text}");
    }
}
