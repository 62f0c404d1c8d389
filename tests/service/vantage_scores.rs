//! Scores from every vantage: three `x402-probe daemon` processes as vantages on one PostgreSQL
//! (a 4-second cycle, every vantage probing every subject each cycle), one of them the scorer.
//! Only the role's holder publishes scores, each read from every vantage's log (`read` names the
//! others' positions) with a `quorum` block; the holder stopped (SIGSTOP) past its lease, another
//! takes the role and the old one, woken, publishes nothing; the holder killed with `kill -9`,
//! another takes the role within the lease time and scores on; one vantage whose control fails records its own
//! outage, in its own log only; and every score of every vantage recomputes byte for byte from
//! the shared store. With root and `ip`, the vantages run in network namespaces and one endpoint
//! resets the third vantage's connections (a regional outage): its R1 failing alone is a
//! disagreement in the quorum block, not a failed cycle.

use crate::daemon_support;
use crate::process_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::vantage_support::{Daemons, spawn_daemon, vantage_setup};
use daemon_support::*;
use serde_json::Value;
use x402_lab::server::{BySource, Placement};
use x402_probe::checks::history::OutageOf;
use x402_probe::ledger::record::{OutageRecord, Record, RecordKind, ScoreRecord};
use x402_probe::store::Store;
use x402_probe::store::postgres::{PgLedger, PgPool};

const EVERY_MS: i64 = 4_000;
const LEASE_MS: i64 = 3_000;
const BEAT_MS: i64 = 500;
const VANTAGES: usize = 3;
/// Room for a loaded machine (2 cores shared by several builds) on every time bound.
const SLACK_MS: i64 = 4_000;

fn config(lab: &x402_lab::Lab, dir: &Path, name: &str, url: &str, s: &[String]) -> PathBuf {
    let state = dir.join(name);
    let mut settings = Settings::new(&state);
    settings.subjects = s.to_vec();
    settings.pay = false;
    settings.samples = 1;
    settings.free_every_secs = (EVERY_MS / 1000) as u64;
    // The second vantage's control: nothing listens there, so its own outage opens.
    if name == "v1" {
        settings.control = Some(format!("http://{}/control", refusing_addr()));
        settings.control_every_secs = 10;
    }
    let extra = format!(
        "vantages_per_cycle = {VANTAGES}\nlease_ms = {LEASE_MS}\nheartbeat_ms = {BEAT_MS}\nper_host_gap_ms = 0"
    );
    settings.extra = &extra;
    settings.api = "[api]\nenabled = false\n".into();
    let text = config_text(lab, &settings)
        .replace("per_host_gap_ms = 1000\n", "")
        .replace("vantage = \"lab\"", &format!("vantage = \"{name}\""));
    let text = format!("{text}\n[store]\npostgres = \"{url}\"\n");
    let path = state.join("daemon.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Who holds the scoring role now, by the database's clock.
fn scorer(runtime: &tokio::runtime::Runtime, pool: &PgPool) -> Option<String> {
    runtime.block_on(async {
        let client = pool.client("reading the role").await.unwrap();
        client
            .query_opt(
                "SELECT holder FROM lease WHERE work = 'role:scorer' AND expires_at > now()",
                &[],
            )
            .await
            .unwrap()
            .and_then(|r| r.get(0))
    })
}

/// Every score entry of vantage `name`'s log about `subjects`.
fn scores(url: &str, name: &str, subjects: &[String]) -> Vec<ScoreRecord> {
    let log = PgLedger::open_existing(url, Some(name)).unwrap();
    subjects
        .iter()
        .flat_map(|s| daemon_support::scores(&log, s))
        .collect()
}

/// Vantage `name`'s latest score document of `subject` (as stored: without its inputs).
fn latest(url: &str, name: &str, subject: &str) -> Option<Value> {
    let log = PgLedger::open_existing(url, Some(name)).unwrap();
    let row = log.latest_score(subject).unwrap()?;
    Some(serde_json::from_slice(&row.document).unwrap())
}

/// The windows vantage `name`'s control opened in its log (not its RPC's).
fn control_outages(url: &str, name: &str) -> usize {
    let log = PgLedger::open_existing(url, Some(name)).unwrap();
    log.entries_of_kind(&[RecordKind::Outage], 0)
        .unwrap()
        .into_iter()
        .filter(|e| {
            matches!(
                &e.record,
                Record::Outage(OutageRecord::Opened {
                    of: OutageOf::Vantage,
                    ..
                })
            )
        })
        .count()
}

fn recompute(url: &str, name: &str) {
    let (code, said) =
        process_support::run(&["recompute", "--postgres", url, "--vantage", name, "--quiet"]);
    assert_eq!(code, 0, "vantage {name}'s scores: {said}");
    assert!(said.contains("byte for byte"), "{said}");
}

/// Waits until `ok` holds, at most `ms`.
fn wait_for(ms: i64, what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_millis(ms as u64);
    while !ok() {
        assert!(Instant::now() < deadline, "{what} within {ms} ms");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn one_vantage_scores_every_vantages_runs_and_the_role_moves_when_its_holder_is_killed() {
    let setup = vantage_setup(VANTAGES, "vantage_scores", "the regional outage");
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
    let (lab, subjects, regional) = runtime.block_on(async {
        let mut lab = lab(&["honest-v2", "honest-v1"]).await;
        let mut subjects: Vec<String> = lab.endpoints.iter().map(|e| e.url.clone()).collect();
        let mut regional = None;
        if let Some(net) = &net {
            subjects.clear();
            let third = std::net::IpAddr::V4(net.vantages()[2].address);
            for (i, (base, by_source)) in [
                ("honest-v2", BySource::Alike),
                ("honest-v1", BySource::Unreachable(vec![third])),
            ]
            .into_iter()
            .enumerate()
            {
                let placement = Placement {
                    bind: net.service_address().into(),
                    by_source,
                };
                let url = lab
                    .spawn_placed(base, &format!("placed-{i}"), &placement)
                    .await
                    .expect("a placed endpoint");
                if i == 1 {
                    regional = Some(url.clone());
                }
                subjects.push(url);
            }
        }
        (lab, subjects, regional)
    });
    let canonical = |s: &str| x402_probe::http_url::canonical_subject_url(s).unwrap();
    let subjects: Vec<String> = subjects.iter().map(|s| canonical(s)).collect();
    let regional = regional.map(|s| canonical(&s));
    let pool = runtime.block_on(PgPool::connect(local_url)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    eprintln!("vantages' logs in {}", dir.path().display());
    let names: Vec<String> = (0..VANTAGES).map(|i| format!("v{i}")).collect();
    let mut daemons = Daemons(Vec::new());
    for (i, name) in names.iter().enumerate() {
        let config = config(&lab, dir.path(), name, vantage_url, &subjects);
        let log = dir.path().join(format!("{name}.log"));
        daemons.0.push(Some(spawn_daemon(net, i, &config, &log)));
    }

    // One vantage holds the role; its scores read the two others' logs and carry the quorum.
    let mut first = None;
    wait_for(30_000, "a vantage holds the scoring role", || {
        first = scorer(&runtime, &pool);
        first.is_some()
    });
    let first = first.unwrap();
    let read_all = |s: &ScoreRecord| {
        s.read
            .as_ref()
            .is_some_and(|r| r.through.len() == VANTAGES - 1 && r.through.values().all(|&p| p > 0))
    };
    wait_for(
        40_000,
        "every subject scored from every vantage's log",
        || {
            let scored = scores(local_url, &first, &subjects);
            subjects
                .iter()
                .all(|s| scored.iter().any(|r| &r.subject == s && read_all(r)))
        },
    );
    // Once every vantage has probed each subject, its quorum block names all three.
    wait_for(
        20_000,
        "every subject's quorum block names every vantage",
        || {
            subjects.iter().all(|s| {
                latest(local_url, &first, s)
                    .is_some_and(|doc| doc["quorum"]["vantages"] == serde_json::json!(names))
            })
        },
    );
    // Only the holder published scores; the others recorded runs.
    for name in names.iter().filter(|n| **n != first) {
        assert!(
            scores(local_url, name, &subjects).is_empty(),
            "{name} published scores"
        );
    }
    // v1's control fails: its outage is in its own log, in no other.
    wait_for(20_000, "v1's outage recorded", || {
        control_outages(local_url, "v1") > 0
    });
    for name in names.iter().filter(|n| *n != "v1") {
        assert_eq!(control_outages(local_url, name), 0, "{name}'s log");
    }

    // The regional outage: the third vantage alone fails R1 of one subject, every cycle.
    if let Some(regional) = &regional {
        wait_for(20_000, "the third vantage's lone failures shown", || {
            latest(local_url, &first, regional).is_some_and(|doc| {
                doc["quorum"]["disagreements"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|d| d["vantage"] == "v2" && d["check"] == "R1"))
            })
        });
        let doc = latest(local_url, &first, regional).unwrap();
        let q = &doc["quorum"];
        eprintln!("the regional subject's quorum: {q}");
        assert_eq!(q["failed_cycles"], 0, "{q}");
        let d = q["disagreements"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["vantage"] == "v2" && d["check"] == "R1")
            .unwrap();
        assert_eq!(d["saw"], "fail", "{d}");
        assert_ne!(doc["verdict"]["verdict"], "down", "{doc}");
    }

    // SIGSTOP the holder past its lease: another vantage takes the role. Woken, the old holder
    // publishes no score (the role is its own only within the lease its last beat was granted,
    // by its own monotonic clock), even before its next beat tells it the role is gone.
    let i = names.iter().position(|n| *n == first).unwrap();
    process_support::signal(daemons.0[i].as_ref().unwrap(), libc::SIGSTOP);
    let mut holder = None;
    wait_for(
        LEASE_MS + 2 * BEAT_MS + SLACK_MS,
        "the role taken from a stopped holder",
        || {
            holder = scorer(&runtime, &pool).filter(|h| *h != first);
            holder.is_some()
        },
    );
    let holder = holder.unwrap();
    // The taker publishes, so there are runs whose scores the stopped one would have published.
    let taken = scores(local_url, &holder, &subjects).len();
    wait_for(20_000, "the taker scores", || {
        scores(local_url, &holder, &subjects).len() > taken
    });
    let before_wake = scores(local_url, &first, &subjects).len();
    process_support::signal(daemons.0[i].as_ref().unwrap(), libc::SIGCONT);
    std::thread::sleep(Duration::from_millis((EVERY_MS + 4 * BEAT_MS) as u64));
    assert_eq!(
        scores(local_url, &first, &subjects).len(),
        before_wake,
        "{first}, stopped past its lease and woken, published a score while {holder} held the role"
    );
    assert_eq!(scorer(&runtime, &pool).as_deref(), Some(holder.as_str()));

    // kill -9 the holder: another vantage takes the role within the lease time and scores on.
    let first_holder = first.clone();
    let first = holder;
    let i = names.iter().position(|n| *n == first).unwrap();
    let mut child = daemons.0[i].take().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let killed = Instant::now();
    let mut second = None;
    wait_for(
        LEASE_MS + 2 * BEAT_MS + SLACK_MS,
        "the role taken by another",
        || {
            second = scorer(&runtime, &pool).filter(|h| *h != first);
            second.is_some()
        },
    );
    let second = second.unwrap();
    eprintln!(
        "the role moved from {first} to {second} {} ms after the kill (lease {LEASE_MS} ms)",
        killed.elapsed().as_millis()
    );
    let before = scores(local_url, &second, &subjects).len();
    wait_for(20_000, "the new holder scores", || {
        let scored = scores(local_url, &second, &subjects);
        scored.len() > before
            && subjects
                .iter()
                .all(|s| scored.iter().any(|r| &r.subject == s && read_all(r)))
    });

    // Stopped; every vantage's scores (the killed one's too) recompute from the shared store.
    for (j, child) in daemons.0.iter_mut().enumerate() {
        if let Some(child) = child.take() {
            process_support::signal(&child, libc::SIGTERM);
            let mut child = child;
            let status = child.wait().unwrap();
            assert!(status.success(), "vantage {j} stopped with {status}");
        }
    }
    let counts: BTreeMap<&str, usize> = names
        .iter()
        .map(|n| (n.as_str(), scores(local_url, n, &subjects).len()))
        .collect();
    eprintln!("score entries by vantage: {counts:?}");
    assert!(
        counts[first_holder.as_str()] > 0
            && counts[first.as_str()] > 0
            && counts[second.as_str()] > 0
    );
    for (name, count) in &counts {
        // A vantage that never held the role published nothing (`recompute` says so, exit 2).
        if *count > 0 {
            recompute(local_url, name);
        }
    }
}
