//! Metrics and webhooks over simulated days against the lab: an honest endpoint that becomes
//! verifiable (its verdict changes), one that rotates its payTo without a note (a payTo change,
//! and the `payto_changed` gate starting to bind), real paid calls. A real receiver on loopback
//! gets the webhooks (refusing the first ones, so retries happen): every signature verifies,
//! every payload matches what the ledger shows. The metrics exposition passes `promtool check
//! metrics` without a warning, and its values are the ledger's and the spend store's.

use crate::daemon_support;
use crate::metrics_support;
use crate::webhook_support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use daemon_support::*;
use metrics_support::*;
use serde_json::Value;
use webhook_support::*;
use x402_lab::dynamic::Timeline;
use x402_probe::clock::{Clock, ManualClock, SystemClock};
use x402_probe::config::DaemonConfig;
use x402_probe::daemon::pipeline::scrape;
use x402_probe::daemon::{Daemon, TimeSource};
use x402_probe::ledger::record::Record;
use x402_probe::metrics::Format;
use x402_probe::spend::SpendStore;
use x402_probe::store::{OutboxState, SqliteStore, Store};

const SECRET: &str = "a-receiver-secret-of-some-length";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_days_give_true_metrics_and_signed_webhooks() {
    let mut lab = lab(&["honest-v2", "control"]).await;
    let start = start_ms();
    let clock = Arc::new(ManualClock::at_ms(start));
    let at = |d: f64| start + (d * DAY as f64) as i64;
    let rotating = lab
        .spawn_variant(
            "honest-v2",
            "payto-unnoted",
            Timeline {
                pay_to: vec![(at(1.0), lab.other_wallet)],
                ..Timeline::default()
            },
            lab_clock(&clock),
        )
        .await
        .unwrap();
    let honest = lab.endpoint("honest-v2").unwrap().url.clone();
    // Our control endpoint stops answering near the end: our outage window is open then.
    let control = lab
        .spawn_variant(
            "control",
            "control-out",
            Timeline {
                down: vec![(at(3.4), at(4.0))],
                ..Timeline::default()
            },
            lab_clock(&clock),
        )
        .await
        .unwrap();
    // The first two deliveries are refused: the retries are part of what is checked.
    let receiver = start_receiver(SocketAddr::from(([127, 0, 0, 1], 0)), 2).await;

    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path(), SECRET);
    let mut settings = Settings::new(dir.path());
    settings.subjects = vec![honest.clone(), rotating.clone()];
    settings.control = Some(control);
    settings.control_every_secs = 1800;
    let mut text = config_text(&lab, &settings);
    text.push_str(&webhook_table(&receiver.url(), &secret, 20));

    x402_probe::cmd::daemon::init_logs("info");
    let config: DaemonConfig = toml::from_str(&text).unwrap();
    config.validate().unwrap();
    let daemon = Daemon::open(
        config,
        None,
        TimeSource::Simulated {
            clock: clock.clone(),
            until_ms: at(3.5),
            lookahead_ms: 0,
        },
    )
    .await
    .unwrap();
    let shared = daemon.shared().clone();
    let (_tx, rx) = tokio::sync::mpsc::channel(1);
    daemon.run(rx).await.unwrap();

    // What the delivery task had not posted when the simulation ended is posted now.
    let client = x402_probe::webhook::deliver::client().unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        x402_probe::webhook::deliver::deliver_due(shared.as_ref(), &client)
            .await
            .unwrap();
        let (pending, dead) = shared.store.outbox_counts().unwrap();
        assert_eq!(dead, 0, "no event died");
        if pending == 0 {
            break;
        }
        assert!(Instant::now() < until, "{pending} events still pending");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let store = SqliteStore::open(dir.path()).unwrap();
    let entries: BTreeMap<u64, Record> = store
        .entries_page(0, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, e.record))
        .collect();

    // ---- Webhooks ----
    let all = receiver.all();
    let accepted = receiver.accepted();
    assert!(
        all.len() >= accepted.len() + 2,
        "the refused ones were retried"
    );
    let mut by_id: BTreeMap<String, Value> = BTreeMap::new();
    for r in &all {
        assert!(
            signature_is_valid(SECRET.as_bytes(), &r.signature, &r.body),
            "signature {} over {}",
            r.signature,
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(r.content_type, "application/json");
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["id"], r.event_id.as_str());
        assert_eq!(body["type"], r.event_type.as_str());
        // A retry is the same event: same id, same payload.
        if let Some(earlier) = by_id.insert(r.event_id.clone(), body.clone()) {
            assert_eq!(earlier, body, "a duplicate differs");
        }
    }
    let accepted_ids: BTreeSet<&str> = accepted.iter().map(|r| r.event_id.as_str()).collect();
    assert_eq!(
        accepted_ids.len(),
        by_id.len(),
        "every event was accepted once at least"
    );
    // Each event names the ledger entry that caused it.
    for (id, e) in &by_id {
        let seq = e["ledger_seq"].as_u64().unwrap();
        let subject = e["subject"].as_str().unwrap();
        match (e["type"].as_str().unwrap(), &entries[&seq]) {
            ("verdict_changed" | "gate_binding", Record::Score(s)) => {
                assert_eq!(s.subject, subject, "{id}")
            }
            ("pay_to_changed", Record::Revision(r)) => assert_eq!(r.subject, subject, "{id}"),
            (kind, other) => panic!("{id}: {kind} caused by {:?}", other.kind()),
        }
    }
    // Verdict changes: exactly the consecutive differences of each subject's published scores.
    let mut expected = BTreeSet::new();
    for subject in [&honest, &rotating] {
        let published = scores(&store, subject);
        for pair in published.windows(2) {
            if pair[0].verdict != pair[1].verdict {
                expected.insert((
                    subject.clone(),
                    pair[1].as_of_ms,
                    pair[0].verdict.as_str().to_string(),
                    pair[1].verdict.as_str().to_string(),
                ));
            }
        }
    }
    let got: BTreeSet<(String, i64, String, String)> = by_id
        .values()
        .filter(|e| e["type"] == "verdict_changed")
        .map(|e| {
            let Record::Score(s) = &entries[&e["ledger_seq"].as_u64().unwrap()] else {
                unreachable!()
            };
            (
                e["subject"].as_str().unwrap().to_string(),
                s.as_of_ms,
                e["data"]["from"].as_str().unwrap().to_string(),
                e["data"]["to"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        !expected.is_empty(),
        "the honest endpoint became verifiable"
    );
    assert_eq!(got, expected);
    // PayTo changes: exactly the revisions that changed it.
    let pay_to_revisions: BTreeSet<u64> = entries
        .iter()
        .filter_map(|(seq, r)| match r {
            Record::Revision(r) if r.changed.iter().any(|c| c == "payTo") => Some(*seq),
            _ => None,
        })
        .collect();
    let pay_to_events: BTreeSet<u64> = by_id
        .values()
        .filter(|e| e["type"] == "pay_to_changed")
        .map(|e| e["ledger_seq"].as_u64().unwrap())
        .collect();
    assert_eq!(pay_to_events.len(), 1, "the one rotation");
    assert_eq!(pay_to_events, pay_to_revisions);
    let rotation = by_id
        .values()
        .find(|e| e["type"] == "pay_to_changed")
        .unwrap();
    assert_eq!(rotation["subject"], rotating.as_str());
    assert_eq!(
        rotation["data"]["to"]
            .as_str()
            .unwrap()
            .to_ascii_lowercase(),
        lab.other_wallet.to_string().to_ascii_lowercase()
    );
    // The payTo gate started binding after the rotation, for that subject only.
    let gates: Vec<&Value> = by_id
        .values()
        .filter(|e| e["type"] == "gate_binding")
        .collect();
    assert!(
        gates.iter().any(|e| e["subject"] == rotating.as_str()
            && e["data"]["flag"] == "payto_changed"
            && e["ledger_seq"].as_u64() > pay_to_events.first().copied()),
        "{gates:#?}"
    );
    assert!(gates.iter().all(|e| e["subject"] != honest.as_str()));
    assert!(
        store
            .outbox_rows()
            .unwrap()
            .iter()
            .all(|r| r.state == OutboxState::Delivered)
    );

    // ---- Metrics ----
    let text = shared
        .metrics
        .render(
            &scrape(&shared.read_side(shared.store.clone())).unwrap(),
            Format::Prometheus,
        )
        .unwrap();
    eprintln!("{text}");
    assert_promtool_clean(&text);
    let open_metrics = shared
        .metrics
        .render(
            &scrape(&shared.read_side(shared.store.clone())).unwrap(),
            Format::OpenMetrics,
        )
        .unwrap();
    assert!(open_metrics.ends_with("# EOF\n"));

    let m = samples(&text);
    let runs: Vec<_> = entries
        .values()
        .filter_map(|r| match r {
            Record::Run(run) => Some(run),
            _ => None,
        })
        .collect();
    assert!(runs.len() > 30);
    assert_eq!(
        value(&m, "x402_probe_runs_total{result=\"recorded\"}"),
        runs.len() as f64
    );
    assert_eq!(
        value(&m, "x402_probe_runs_total{result=\"not_recorded\"}"),
        0.0
    );
    assert_eq!(
        value(&m, "x402_probe_scheduler_lag_seconds_count"),
        runs.len() as f64,
        "one lag per run started"
    );
    for (check, outcome) in [
        ("R1", "pass"),
        ("C1", "pass"),
        ("H5", "pass"),
        ("H3", "fail"),
    ] {
        let n = runs
            .iter()
            .flat_map(|r| r.results.iter())
            .filter(|c| c.id == check && c.outcome.as_str() == outcome)
            .count();
        let series =
            format!("x402_probe_check_outcomes_total{{check=\"{check}\",outcome=\"{outcome}\"}}");
        assert!(n > 0, "{series} happened");
        assert_eq!(value(&m, &series), n as f64, "{series}");
    }
    let paid = runs.iter().filter(|r| r.payment_sent()).count();
    assert!(paid > 0, "paid calls were made");
    assert_eq!(
        value(&m, "x402_probe_paid_calls_total{result=\"paid\"}"),
        paid as f64
    );
    // Every hop of every exchange a recorded run made, with a TLS handshake timed.
    let tls_hops: usize = runs
        .iter()
        .map(|r| {
            let mut exchanges: Vec<&x402_probe::evidence::http::Exchange> =
                r.free.samples.iter().map(|s| &s.exchange).collect();
            exchanges.extend(r.free.operator_file.iter());
            if let Some(p) = &r.paid {
                exchanges.extend(p.requote.iter().map(|q| &q.exchange));
                exchanges.extend(p.paid.iter());
                exchanges.extend(p.replay.iter().filter_map(|q| q.exchange.as_ref()));
            }
            exchanges
                .iter()
                .flat_map(|e| e.hops.iter())
                .filter(|h| h.timings.tls_ms.is_some())
                .count()
        })
        .sum();
    assert!(tls_hops > runs.len());
    assert_eq!(
        value(
            &m,
            "x402_probe_http_phase_duration_seconds_count{phase=\"tls\"}"
        ),
        tls_hops as f64
    );
    let spend = SpendStore::open(dir.path()).unwrap();
    let day = spend.totals("", SystemClock.now_ms() / 1000).unwrap().day;
    assert!(day > x402_probe::spend::Usd::ZERO);
    let spent = value(&m, "x402_probe_spent_last_24h_usd");
    assert!(
        (spent - day.atto() as f64 / 1e18).abs() < 1e-12,
        "{spent} vs {day}"
    );
    assert_eq!(value(&m, "x402_probe_spend_cap_usd{cap=\"per_day\"}"), 5.0);
    assert_eq!(
        value(&m, "x402_probe_spend_cap_usd{cap=\"per_call\"}"),
        0.05
    );
    let (head, _) = store.head().unwrap();
    assert_eq!(value(&m, "x402_probe_ledger_entries"), head as f64);
    let last = store.last_checkpoint().unwrap().unwrap();
    assert_eq!(
        value(&m, "x402_probe_ledger_seconds_since_checkpoint"),
        (clock.now_ms() - last.at_ms) as f64 / 1000.0
    );
    let last_outage = entries.values().rev().find_map(|r| match r {
        Record::Outage(o) => Some(o.clone()),
        _ => None,
    });
    assert!(
        matches!(
            last_outage,
            Some(x402_probe::ledger::record::OutageRecord::Opened { .. })
        ),
        "{last_outage:?}"
    );
    assert_eq!(value(&m, "x402_probe_outage_active"), 1.0);
    for verdict in ["ok", "unverified", "caution", "avoid", "down"] {
        let n = [&honest, &rotating]
            .iter()
            .filter(|s| scores(&store, s).last().unwrap().verdict.as_str() == verdict)
            .count();
        assert_eq!(
            value(&m, &format!("x402_probe_subjects{{verdict=\"{verdict}\"}}")),
            n as f64,
            "{verdict}"
        );
    }
    assert_eq!(
        value(
            &m,
            "x402_probe_webhook_deliveries_total{result=\"delivered\"}"
        ),
        accepted.len() as f64
    );
    assert_eq!(
        value(
            &m,
            "x402_probe_webhook_deliveries_total{result=\"retried\"}"
        ),
        (all.len() - accepted.len()) as f64
    );
    assert_eq!(
        value(&m, "x402_probe_webhook_outbox_events{state=\"pending\"}"),
        0.0
    );
}
