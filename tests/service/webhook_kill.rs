//! Webhook events across `kill -9`: the daemon binary runs on the real clock against an endpoint
//! that rotates its payTo every few seconds, while the receiver is down. Events accrue in the
//! outbox (each written with the revision or score that causes it), the daemon is killed, the
//! receiver comes up, the daemon restarts: every event is delivered, none is invented, and a
//! duplicate only ever repeats an id with the same payload.

use crate::daemon_support;
use crate::process_support;
use crate::webhook_support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use daemon_support::*;
use process_support::*;
use serde_json::Value;
use webhook_support::*;
use x402_lab::dynamic::{LabClock, Timeline};
use x402_probe::clock::{Clock, SystemClock};
use x402_probe::ledger::record::Record;
use x402_probe::store::{OutboxRow, OutboxState, SqliteStore, Store};

const SECRET: &str = "kill-test-secret-0123456789";

fn outbox(state: &Path) -> Vec<OutboxRow> {
    SqliteStore::open_file(&state.join("ledger.sqlite"))
        .and_then(|s| s.outbox_rows())
        .unwrap_or_default()
}

/// The outbox matches the ledger exactly: one pay_to_changed event per revision that changed the
/// payTo (none lost), and every event caused by an entry of its kind (none invented).
fn outbox_matches_ledger(state: &Path, subject: &str) -> usize {
    let store = SqliteStore::open_file(&state.join("ledger.sqlite")).unwrap();
    store.verify(None, true).expect("the ledger is intact");
    let entries: BTreeMap<u64, Record> = store
        .entries_page(0, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, e.record))
        .collect();
    let rows = store.outbox_rows().unwrap();
    let mut pay_to_events = BTreeSet::new();
    for row in &rows {
        let body: Value = serde_json::from_slice(&row.event.body).unwrap();
        assert_eq!(body["id"], row.event.event_id.as_str());
        let seq = body["ledger_seq"].as_u64().unwrap();
        match (row.event.kind.as_str(), entries.get(&seq)) {
            ("pay_to_changed", Some(Record::Revision(r))) => {
                assert_eq!(r.subject, subject);
                assert!(pay_to_events.insert(seq), "one event per revision");
            }
            ("verdict_changed" | "gate_binding", Some(Record::Score(s))) => {
                assert_eq!(s.subject, subject)
            }
            (kind, other) => panic!("{kind} event caused by {other:?}"),
        }
    }
    let revisions: BTreeSet<u64> = entries
        .iter()
        .filter_map(|(seq, r)| match r {
            Record::Revision(r) if r.changed.iter().any(|c| c == "payTo") => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(pay_to_events, revisions, "a payTo change without its event");
    rows.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_survive_kill_9_and_are_all_delivered_once_the_receiver_is_up() {
    let mut lab = lab(&["honest-v2"]).await;
    // The payTo alternates every 2 seconds, on the real clock the daemon runs on.
    let now = SystemClock.now_ms();
    let pay_to = (1..150)
        .map(|i| {
            let wallet = if i % 2 == 1 {
                lab.other_wallet
            } else {
                lab.pay_to
            };
            (now + i * 2_000, wallet)
        })
        .collect();
    let wall: LabClock = Arc::new(|| SystemClock.now_ms());
    let subject = lab
        .spawn_variant(
            "honest-v2",
            "payto-rotating",
            Timeline {
                pay_to,
                ..Timeline::default()
            },
            wall,
        )
        .await
        .unwrap();

    // The receiver's address, with nothing listening on it yet.
    let addr: SocketAddr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let url = format!("http://{addr}/hooks/x402");
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let secret = secret_file(state, SECRET);
    let mut settings = Settings::new(state);
    settings.subjects = vec![subject.clone()];
    settings.free_every_secs = 1;
    settings.samples = 1;
    settings.pay = false;
    let mut text = config_text(&lab, &settings);
    text.push_str(&webhook_table(&url, &secret, 100));
    let config = write_config(state, &text);
    let log = state.join("daemon.log");

    // Events accrue while the receiver is down; then kill -9.
    let mut child = start_daemon(&config, &log);
    wait_for("events in the outbox", Duration::from_secs(120), || {
        let rows = outbox(state);
        rows.len() >= 6 && rows.iter().any(|r| r.attempts > 0)
    });
    signal(&child, libc::SIGKILL);
    let _ = child.wait();
    let at_kill = outbox(state);
    assert!(
        at_kill.iter().all(|r| r.state == OutboxState::Pending),
        "nothing could be delivered"
    );
    outbox_matches_ledger(state, &subject);

    // The receiver comes up; the daemon restarts and delivers everything that was pending.
    let receiver = start_receiver(addr, 0).await;
    let mut child = start_daemon(&config, &log);
    let wanted: BTreeSet<String> = at_kill.iter().map(|r| r.event.event_id.clone()).collect();
    wait_for(
        "every event pending at the kill delivered",
        Duration::from_secs(120),
        || {
            let got: BTreeSet<String> = receiver
                .accepted()
                .into_iter()
                .map(|r| r.event_id)
                .collect();
            wanted.is_subset(&got)
        },
    );
    // Once more, kill -9 while deliveries run (new events keep coming), then a clean stop.
    std::thread::sleep(Duration::from_millis(1_500));
    signal(&child, libc::SIGKILL);
    let _ = child.wait();
    let mut child = start_daemon(&config, &log);
    wait_for("the outbox emptied", Duration::from_secs(120), || {
        let rows = outbox(state);
        rows.len() >= at_kill.len() + 4 && rows.iter().all(|r| r.state == OutboxState::Delivered)
    });
    signal(&child, libc::SIGTERM);
    assert!(child.wait().unwrap().success());

    let total = outbox_matches_ledger(state, &subject);
    let rows = outbox(state);
    assert_eq!(rows.len(), total);
    let by_id: BTreeMap<&str, &OutboxRow> = rows
        .iter()
        .map(|r| (r.event.event_id.as_str(), r))
        .collect();
    let received = receiver.all();
    let mut seen = BTreeMap::new();
    for r in &received {
        assert!(
            signature_is_valid(SECRET.as_bytes(), &r.signature, &r.body),
            "signature"
        );
        // Nothing invented: every id received is an event of the outbox, with its payload.
        let row = by_id
            .get(r.event_id.as_str())
            .unwrap_or_else(|| panic!("{} is no event of ours", r.event_id));
        assert_eq!(r.body, row.event.body, "{}", r.event_id);
        *seen.entry(r.event_id.as_str()).or_insert(0) += 1;
    }
    // Nothing lost: every event delivered (a few perhaps twice, with the same id).
    for row in rows.iter().filter(|r| r.state == OutboxState::Delivered) {
        assert!(seen.contains_key(row.event.event_id.as_str()));
    }
    for id in &wanted {
        assert!(
            seen.contains_key(id.as_str()),
            "{id} was pending at the kill"
        );
    }
    // Any still pending are the last few, created while the daemon stopped.
    let pending = rows
        .iter()
        .filter(|r| r.state == OutboxState::Pending)
        .count();
    assert!(pending <= 3, "{pending} left pending");
    let kinds: BTreeSet<&str> = rows.iter().map(|r| r.event.kind.as_str()).collect();
    assert!(
        kinds.contains("pay_to_changed") && kinds.contains("gate_binding"),
        "{kinds:?}"
    );
    let duplicates = seen.values().filter(|n| **n > 1).count();
    eprintln!(
        "{} events, {} requests, {duplicates} ids received more than once",
        rows.len(),
        received.len()
    );
}
