//! The daemon as the service runs it: a separate process on the real clock. SIGHUP reloads its
//! subjects, SIGTERM stops it with exit 0 within 10 s, and `kill -9` at random moments (paid calls
//! in flight included) never breaks the ledger, never loses or doubles a reservation, never lets
//! the caps be passed, and the schedule resumes; the next start settles every payment a kill cut
//! short. One endpoint however spelled is one subject under one cap.

use crate::daemon_support;
use crate::process_support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use daemon_support::*;
use process_support::*;
use x402_probe::ledger::record::{Record, RecordKind};
use x402_probe::spend::{ReservationState, SpendStore, Usd};
use x402_probe::store::{SqliteStore, Store};

/// Runs recorded for `subject` so far (reading while the daemon writes: SQLite WAL readers).
fn runs_of(state: &Path, subject: &str) -> usize {
    let Ok(store) = SqliteStore::open_file(&state.join("ledger.sqlite")) else {
        return 0;
    };
    store
        .subject_entries(subject, &[RecordKind::Run], 0)
        .map(|e| e.len())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_subjects_and_sigterm_stops_within_ten_seconds() {
    let lab = lab(&["honest-v2", "honest-v1"]).await;
    let dir = tempfile::tempdir().unwrap();
    let first = lab.endpoint("honest-v2").unwrap().url.clone();
    let second = lab.endpoint("honest-v1").unwrap().url.clone();
    let mut settings = Settings::new(dir.path());
    settings.subjects = vec![first.clone()];
    settings.free_every_secs = 2;
    settings.pay = false;
    let config = write_config(dir.path(), &config_text(&lab, &settings));
    let log = dir.path().join("daemon.log");
    let mut child = start_daemon(&config, &log);
    wait_for("a first run", Duration::from_secs(60), || {
        runs_of(dir.path(), &first) > 0
    });
    assert_eq!(runs_of(dir.path(), &second), 0);

    // SIGHUP: the second subject is added without losing the first one's state.
    settings.subjects = vec![first.clone(), second.clone()];
    write_config(dir.path(), &config_text(&lab, &settings));
    let before = runs_of(dir.path(), &first);
    signal(&child, libc::SIGHUP);
    wait_for(
        "a run of the added subject",
        Duration::from_secs(60),
        || runs_of(dir.path(), &second) > 0,
    );
    assert!(runs_of(dir.path(), &first) >= before);

    // SIGTERM: exit 0 within 10 seconds, the ledger intact and signed at its head.
    let asked = Instant::now();
    signal(&child, libc::SIGTERM);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "{status}: {}",
        std::fs::read_to_string(&log).unwrap()
    );
    let store = SqliteStore::open_file(&dir.path().join("ledger.sqlite")).unwrap();
    let summary = store.verify(None, true).unwrap();
    assert_eq!(
        summary.signed_through, summary.head_seq,
        "signed at its head"
    );
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(logs.contains("configuration reloaded"), "{logs}");
    assert!(logs.contains("subject="), "one line per run: {logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_moments_never_breaks_the_ledger_the_money_or_the_schedule() {
    let lab = lab(&[
        "honest-v2",
        "honest-v1",
        "overcharge",
        "charge-without-delivery",
        "double-pull",
        "wrong-payee",
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let subjects: Vec<String> = lab.endpoints.iter().map(|e| e.url.clone()).collect();
    let mut settings = Settings::new(dir.path());
    settings.subjects = subjects.clone();
    settings.free_every_secs = 1;
    settings.pay_from_first_run = true;
    settings.paid_min_interval_secs = 60;
    settings.samples = 1;
    let config = write_config(dir.path(), &config_text(&lab, &settings));
    let log = dir.path().join("daemon.log");
    let state = dir.path();
    let daily_cap: Usd = "5".parse().unwrap();

    let mut seen_entries = 0u64;
    for round in 0..8u64 {
        let mut child = start_daemon(&config, &log);
        // A moment somewhere in the first seconds, when runs and paid calls are starting.
        let wait =
            400 + (x402_probe::daemon::schedule::unit_fraction("kill", round) * 2600.0) as u64;
        std::thread::sleep(Duration::from_millis(wait));
        signal(&child, libc::SIGKILL);
        let _ = child.wait();

        let store = SqliteStore::open_file(&state.join("ledger.sqlite")).unwrap();
        let summary = store
            .verify(None, true)
            .unwrap_or_else(|e| panic!("round {round}: the ledger is broken after kill -9: {e}"));
        assert!(
            summary.entries >= seen_entries,
            "round {round}: acknowledged entries lost ({} < {seen_entries})",
            summary.entries
        );
        seen_entries = summary.entries;
        // No run recorded twice.
        let mut ids = BTreeSet::new();
        for e in store.entries_of_kind(&[RecordKind::Run], 0).unwrap() {
            if let Record::Run(r) = e.record {
                assert!(ids.insert(r.id.clone()), "run {} recorded twice", r.id);
            }
        }
        // The caps hold, counting every reservation still open.
        let spend = SpendStore::open(state).unwrap();
        let mut committed = Usd::ZERO;
        for r in spend.reservations().unwrap() {
            if r.state != ReservationState::Released {
                committed = committed.checked_add(r.cost).unwrap();
            }
        }
        assert!(
            committed <= daily_cap,
            "round {round}: {committed} > {daily_cap}"
        );
    }

    // A clean run after the kills: the schedule resumes, then a SIGTERM stop.
    let store = SqliteStore::open_file(&state.join("ledger.sqlite")).unwrap();
    let runs_before = store.entries_of_kind(&[RecordKind::Run], 0).unwrap().len();
    let mut child = start_daemon(&config, &log);
    wait_for("runs after the restarts", Duration::from_secs(60), || {
        SqliteStore::open_file(&state.join("ledger.sqlite"))
            .and_then(|s| s.entries_of_kind(&[RecordKind::Run], 0))
            .map(|e| e.len() > runs_before + subjects.len())
            .unwrap_or(false)
    });
    signal(&child, libc::SIGTERM);
    assert!(child.wait().unwrap().success());
    let summary = store.verify(None, true).unwrap();
    assert_eq!(summary.signed_through, summary.head_seq);

    // Money: every authorization of ours that was used on chain has exactly one reservation, and
    // no reservation was settled without its use on chain.
    let spend = SpendStore::open(state).unwrap();
    let reservations = spend.reservations().unwrap();
    assert!(!reservations.is_empty(), "paid calls were made");
    let nonces: BTreeSet<_> = reservations.iter().map(|r| r.nonce).collect();
    assert_eq!(nonces.len(), reservations.len(), "a nonce reserved twice");
    let rpc = x402_probe::probe::rpc::Rpc::new(lab.rpc_url());
    let token = lab.token.address();
    let used = rpc
        .logs(
            token,
            &[
                Some(x402_probe::paid::chain::AUTHORIZATION_USED_TOPIC),
                Some(lab.payer.into_word()),
            ],
            0,
            rpc.block_number().await.unwrap(),
        )
        .await
        .unwrap();
    for log in &used {
        let nonce = log.topics[2];
        assert!(
            nonces.contains(&nonce),
            "an authorization used on chain has no reservation"
        );
    }
    for r in &reservations {
        let on_chain = rpc
            .authorization_state(token, r.payer, r.nonce)
            .await
            .unwrap();
        if r.state == ReservationState::Settled {
            assert!(on_chain, "reservation {} settled but unused on chain", r.id);
        }
        if on_chain {
            // Not released, and not left open either: the clean run's start reconciled every
            // call the kills cut short (before, one stayed open through every restart).
            assert_eq!(
                r.state,
                ReservationState::Settled,
                "reservation {} used on chain but {:?} after a clean run",
                r.id,
                r.state
            );
        }
    }
}

/// One endpoint listed by a catalogue under four spellings of its address (`127.0.0.1`,
/// `0x7f000001`, `127.1`, `2130706433`) and configured under a fifth (`0177.0.0.1`, a dot
/// segment) is one subject under one per-subject cap: a real daemon paying from the first run
/// pays it once. Before, each spelling was a subject of its own with a cap of its own, and each
/// was paid (four payments of 0.01 against a 0.02 cap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_endpoint_spelled_five_ways_is_one_subject_under_one_cap() {
    use x402_lab::daemon_config::{LabDaemonConfig, PayCaps};
    use x402_probe::probe::http::{FetchConfig, FetchRequest, fetch};

    let lab = lab(&["honest-v2"]).await;
    let canonical = lab.endpoint("honest-v2").unwrap().url.clone();
    assert!(canonical.starts_with("https://127.0.0.1:"), "{canonical}");
    let respell = |host: &str| canonical.replacen("127.0.0.1", host, 1);
    // The lab's own catalogue item for the endpoint, listed four times.
    let fetch_cfg = FetchConfig {
        allow_private: true,
        ..FetchConfig::default()
    };
    let page = fetch(
        &fetch_cfg,
        &FetchRequest::get(format!("{}/discovery/resources", lab.catalogue_url)),
    )
    .await;
    let page: serde_json::Value =
        serde_json::from_slice(&page.response.expect("the lab's catalogue answers").body).unwrap();
    let item = page["items"][0].clone();
    assert_eq!(item["resource"], canonical.as_str());
    let items: Vec<serde_json::Value> = ["127.0.0.1", "0x7f000001", "127.1", "2130706433"]
        .iter()
        .map(|host| {
            let mut item = item.clone();
            item["resource"] = respell(host).into();
            item
        })
        .collect();
    let catalogue = x402_lab::catalogue::start(items).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    x402_probe::ledger::key::ReporterKey::generate(&state.join("reporter.key")).unwrap();
    let mut config = LabDaemonConfig::new(state);
    config.samples = 1;
    config.free_every_secs = 1;
    config.paid_min_interval_secs = 60;
    config.pay_from_first_run = Some(true);
    config.pay = Some(PayCaps {
        per_call: "0.05".into(),
        per_subject_per_day: "0.02".into(),
        per_day: "5".into(),
    });
    config.subjects = vec![(
        respell("0177.0.0.1").replace("/weather", "/./weather"),
        "weather".into(),
    )];
    config.tail = format!(
        "[[catalogue]]\nurl = \"{}/discovery/resources\"\n\n[api]\nbind = \"127.0.0.1:0\"\n",
        catalogue.url
    );
    let config = write_config(state, &config.text(&lab));
    let log = state.join("daemon.log");
    let mut child = start_daemon(&config, &log);
    wait_for(
        "a paid call settled and five runs of the endpoint",
        Duration::from_secs(90),
        || {
            let paid = SpendStore::open(state)
                .and_then(|s| s.reservations())
                .is_ok_and(|r| r.iter().any(|r| r.state == ReservationState::Settled));
            paid && runs_of(state, &canonical) >= 5
        },
    );
    signal(&child, libc::SIGTERM);
    assert!(child.wait().unwrap().success());

    let store = SqliteStore::open_file(&state.join("ledger.sqlite")).unwrap();
    let subjects: Vec<String> = store
        .subjects()
        .unwrap()
        .into_iter()
        .map(|s| s.url)
        .collect();
    assert_eq!(subjects, vec![canonical.clone()], "one subject, canonical");
    let spend = SpendStore::open(state).unwrap();
    let reservations = spend.reservations().unwrap();
    assert!(
        reservations.iter().all(|r| r.subject == canonical),
        "{reservations:?}"
    );
    let committed = reservations
        .iter()
        .filter(|r| r.state != ReservationState::Released)
        .fold(Usd::ZERO, |sum, r| sum.checked_add(r.cost).unwrap());
    assert!(
        committed <= "0.02".parse().unwrap(),
        "{committed} USD paid to one endpoint, over its 0.02 cap"
    );
    assert_eq!(
        reservations.len(),
        1,
        "one subject, one paid call a minute at most"
    );
}
