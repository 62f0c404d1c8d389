//! The daemon on simulated days against the lab: endpoints that change over time (a price rise,
//! a payTo rotation, each with and without the operator's note; an 86-hour outage; a 30% failure
//! share), honest and dishonest paid endpoints, and a control endpoint. The daemon runs in this
//! process on a simulated clock (days in seconds) with real HTTP, TLS and a real chain; nothing
//! about the timelines reaches it except what the endpoints serve. Assertions read what it
//! published: its score records and documents.

use crate::daemon_support;
use crate::rpc_support;

use std::sync::Arc;

use daemon_support::*;
use x402_lab::dynamic::Timeline;
use x402_probe::clock::ManualClock;
use x402_probe::ledger::record::{OutageOf, OutageRecord, Record, RecordKind};
use x402_probe::store::{SqliteStore, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_simulated_days_reach_the_verdicts_the_lab_promises() {
    let mut lab = lab(&["honest-v2", "overcharge", "wrong-payee"]).await;
    let start = start_ms();
    let clock = Arc::new(ManualClock::at_ms(start));
    let at = |d: f64| start + (d * DAY as f64) as i64;
    let other = lab.other_wallet.to_checksum(None);
    let rise = "30000";
    let variants = [
        (
            "price-noted",
            Timeline {
                price: vec![(at(2.0), 30_000)],
                notes: vec![(at(2.0), note(at(2.0), "price_change", Some(rise), None))],
                ..Timeline::default()
            },
        ),
        (
            "price-unnoted",
            Timeline {
                price: vec![(at(2.0), 30_000)],
                ..Timeline::default()
            },
        ),
        (
            "payto-noted",
            Timeline {
                pay_to: vec![(at(2.0), lab.other_wallet)],
                notes: vec![(at(2.0), note(at(2.0), "payto_rotation", None, Some(&other)))],
                ..Timeline::default()
            },
        ),
        (
            "payto-unnoted",
            Timeline {
                pay_to: vec![(at(2.0), lab.other_wallet)],
                ..Timeline::default()
            },
        ),
        (
            "outage-86h",
            Timeline {
                // Long enough that a failing run must land in the down window, whatever the
                // jitter: the first failing run comes at most 3.3 h into the outage (3 h cadence,
                // 10% jitter), later ones at most 6.6 h apart (6 h backoff cap, 10% jitter), and
                // down needs a failing run 72 h after the first. At 80 h the window could be as
                // short as 4.7 h, and a subject whose URL (its port) jittered badly never showed
                // down. Short enough that a passing run comes before day 5.
                down: vec![(at(1.0), at(1.0) + 86 * HOUR)],
                ..Timeline::default()
            },
        ),
        (
            "flaky-30",
            Timeline {
                fail_share: 0.3,
                ..Timeline::default()
            },
        ),
    ];
    let mut urls = std::collections::BTreeMap::new();
    for (name, timeline) in variants {
        let url = lab
            .spawn_variant("honest-v2", name, timeline, lab_clock(&clock))
            .await
            .unwrap();
        urls.insert(name, url);
    }
    for name in ["honest-v2", "overcharge", "wrong-payee"] {
        urls.insert(name, lab.endpoint(name).unwrap().url.clone());
    }

    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(dir.path());
    settings.subjects = urls.values().cloned().collect();
    let text = config_text(&lab, &settings);
    run_simulated(&text, clock.clone(), at(5.0)).await;

    let store = SqliteStore::open(dir.path()).unwrap();
    let verdict_of = |name: &str| latest_document(&store, &urls[name])["verdict"].clone();

    // An honest endpoint is unverified until it has 8 probes over 3 days and a paid call, then
    // established.
    let honest = scores(&store, &urls["honest-v2"]);
    assert!(
        honest
            .iter()
            .filter(|s| s.as_of_ms < at(3.0) - HOUR)
            .all(|s| s.verdict.as_str() == "unverified"),
        "unverified before 3 days of probes"
    );
    let v = verdict_of("honest-v2");
    assert_eq!(v["status"], "established", "{v}");
    assert!(
        ["ok", "caution"].contains(&v["verdict"].as_str().unwrap()),
        "an honest endpoint: {v}"
    );
    assert!(v["verification"]["last_paid_call_days_ago"].is_number());

    // Overcharge and wrong payee reach avoid once a paid call shows them.
    for name in ["overcharge", "wrong-payee"] {
        assert_eq!(verdict_of(name)["verdict"], "avoid", "{name}");
    }

    // The 86-hour outage reaches down, and recovers.
    let outage = scores(&store, &urls["outage-86h"]);
    let down_at: Vec<i64> = outage
        .iter()
        .filter(|s| s.verdict.as_str() == "down")
        .map(|s| s.as_of_ms)
        .collect();
    assert!(
        down_at
            .iter()
            .any(|t| *t >= at(1.0) + 72 * HOUR && *t <= at(1.0) + 87 * HOUR),
        "down within the outage: {down_at:?}"
    );
    assert!(
        down_at.iter().all(|t| *t >= at(1.0) + 72 * HOUR),
        "not down before 72 hours of failure"
    );
    assert_ne!(verdict_of("outage-86h")["verdict"], "down", "it recovered");

    // An unnoted payTo rotation fails H3 and puts the subject on watch; a noted one does not.
    let unnoted = latest_document(&store, &urls["payto-unnoted"]);
    assert!(check(&unnoted, "H3")["fails"].as_u64().unwrap() > 0);
    let gate = |doc: &serde_json::Value, flag: &str| {
        doc["gates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["flag"] == flag)
            .unwrap()["binding"]
            .as_bool()
            .unwrap()
    };
    assert!(gate(&unnoted, "payto_changed"));
    assert_eq!(unnoted["watch"]["on_watch"], true, "{}", unnoted["watch"]);
    let noted = latest_document(&store, &urls["payto-noted"]);
    assert_eq!(check(&noted, "H3")["fails"], 0, "{}", check(&noted, "H3"));
    assert!(!gate(&noted, "payto_changed"));
    assert!(
        !noted["watch"]["reasons"]
            .to_string()
            .contains("payto_changed"),
        "{}",
        noted["watch"]
    );

    // An unnoted price increase fails H2; a noted one passes.
    let unnoted = latest_document(&store, &urls["price-unnoted"]);
    assert!(check(&unnoted, "H2")["fails"].as_u64().unwrap() > 0);
    let noted = latest_document(&store, &urls["price-noted"]);
    assert_eq!(check(&noted, "H2")["fails"], 0, "{}", check(&noted, "H2"));
    assert!(check(&noted, "H2")["passes"].as_u64().unwrap() > 0);

    // Failing 30% of the time shows as R2's rate.
    let flaky = latest_document(&store, &urls["flaky-30"]);
    let r2 = check(&flaky, "R2");
    let (p, f) = (
        r2["passes"].as_f64().unwrap(),
        r2["fails"].as_f64().unwrap(),
    );
    assert!(f > 0.0 && (0.5..0.9).contains(&(p / (p + f))), "{r2}");

    // The findings' fetches (a browser's request after a clean 402) on the second run and then
    // once a day: the first run (a catalogue's first sweep) and every other run make only the
    // checks' requests, and the findings stay those of the last run that made them.
    let runs: Vec<(i64, bool)> = store
        .subject_entries(&urls["honest-v2"], &[RecordKind::Run], 0)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.record {
            Record::Run(run) => Some((
                run.free.at * 1000,
                run.free.peers.is_some_and(|p| p.browser.is_some()),
            )),
            _ => None,
        })
        .collect();
    let asked: Vec<i64> = runs.iter().filter(|r| r.1).map(|r| r.0).collect();
    assert!(!runs[0].1, "the first run does not ask");
    assert_eq!(
        asked.first(),
        runs.get(1).map(|r| &r.0),
        "the second run asks"
    );
    assert!(
        (5..=6).contains(&asked.len()) && runs.len() >= 4 * asked.len(),
        "about once a day over 5 days: {} of {} runs",
        asked.len(),
        runs.len()
    );
    assert!(
        asked.windows(2).all(|w| w[1] - w[0] >= DAY - 1000),
        "a day apart at least: {asked:?}"
    );

    // The price and payTo changes are revisions.
    let revisions = store
        .subject_entries(&urls["price-unnoted"], &[RecordKind::Revision], 0)
        .unwrap();
    assert_eq!(revisions.len(), 2, "r0 and the price rise");

    // The ledger verifies, and every published score re-derives from it byte for byte.
    let summary = store.verify(None, true).unwrap();
    assert!(summary.entries > 100);
    let recomputed = x402_probe::daemon::recompute::recompute_ledger(
        &store,
        &[x402_probe::rubric::Rubric::embedded_default()],
    )
    .unwrap();
    assert!(recomputed.scores > 100);
    assert_eq!(recomputed.mismatches, vec![], "{recomputed:?}");
    assert_eq!(recomputed.identical, recomputed.scores);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_failure_excuses_every_subject_in_its_window() {
    let mut lab = lab(&["control", "honest-v2"]).await;
    let start = start_ms();
    let clock = Arc::new(ManualClock::at_ms(start));
    // Our vantage "loses its network" for 70 minutes: the control and a subject both fail then.
    let window = (start + 10 * HOUR, start + 10 * HOUR + 70 * 60_000);
    let down = Timeline {
        down: vec![window],
        ..Timeline::default()
    };
    let control = lab
        .spawn_variant("control", "control-out", down.clone(), lab_clock(&clock))
        .await
        .unwrap();
    let subject = lab
        .spawn_variant("honest-v2", "blackout", down, lab_clock(&clock))
        .await
        .unwrap();
    let steady = lab.endpoint("honest-v2").unwrap().url.clone();

    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(dir.path());
    settings.subjects = vec![subject.clone(), steady.clone()];
    settings.control = Some(control);
    settings.control_every_secs = 300;
    settings.free_every_secs = 3600;
    settings.pay = false;
    let text = config_text(&lab, &settings);
    run_simulated(&text, clock.clone(), start + DAY).await;

    let store = SqliteStore::open(dir.path()).unwrap();
    // The window was opened and closed by the control.
    let outages: Vec<OutageRecord> = store
        .entries_of_kind(&[RecordKind::Outage], 0)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.record {
            Record::Outage(o) => Some(o),
            _ => None,
        })
        .collect();
    let closed = outages
        .iter()
        .find_map(|o| match o {
            OutageRecord::Closed { from_ms, to_ms, .. } => Some((*from_ms, *to_ms)),
            _ => None,
        })
        .expect("the window closed");
    assert!(closed.0 <= window.0 + 5 * 60_000 && closed.0 > window.0 - 6 * 60_000);
    assert!(closed.1 >= window.1 && closed.1 <= window.1 + 6 * 60_000);

    // The subject failed R1 inside the window, and none of it counts against it.
    let raw_fails = history(&store, &subject)
        .into_iter()
        .filter(|e| e["check"] == "R1" && e["outcome"] == "fail")
        .filter(|e| {
            let t = ms_of(e["at"].as_str().unwrap());
            t >= closed.0 && t <= closed.1
        })
        .count();
    assert!(raw_fails > 0, "a run fell inside the outage");
    let doc = latest_document(&store, &subject);
    assert_eq!(check(&doc, "R1")["fails"], 0, "{}", check(&doc, "R1"));
    assert!(check(&doc, "R1")["unmeasured"].as_u64().unwrap() >= raw_fails as u64);
    // The steady subject is untouched.
    let doc = latest_document(&store, &steady);
    assert_eq!(check(&doc, "R1")["fails"], 0);
    assert!(store.verify(None, true).is_ok());
    let recomputed = x402_probe::daemon::recompute::recompute_ledger(
        &store,
        &[x402_probe::rubric::Rubric::embedded_default()],
    )
    .unwrap();
    assert_eq!(recomputed.mismatches, vec![], "the excuses re-derive too");
    assert!(recomputed.scores > 20);
}

/// Issue 25, item 11: our RPC out for six hours (every call answered with a 502 page). Each run's
/// C3 is `unmeasured` with the reason; after `RPC_OUTAGE_AFTER_RUNS` runs in a row the daemon
/// opens one of our own outage windows (about the RPC), and the next good read closes it. The
/// window excuses only the checks that read the chain: the honest subjects' other checks keep
/// their passes, and nothing counts against them. Before, no window was opened at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_rpc_failing_run_after_run_opens_our_outage_window_and_a_good_read_closes_it() {
    let lab = lab(&["honest-v2", "honest-v1"]).await;
    let start = start_ms();
    let clock = Arc::new(ManualClock::at_ms(start));
    let out = (start + 6 * HOUR, start + 12 * HOUR);
    let node = {
        let c = clock.clone();
        rpc_support::node_out_while(
            lab.rpc_url().to_string(),
            Arc::new(move || {
                let now = x402_probe::clock::Clock::now_ms(&*c);
                now >= out.0 && now < out.1
            }),
        )
        .await
    };
    let subjects = vec![
        lab.endpoint("honest-v2").unwrap().url.clone(),
        lab.endpoint("honest-v1").unwrap().url.clone(),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(dir.path());
    settings.subjects = subjects.clone();
    settings.free_every_secs = 3600;
    settings.pay = false;
    let text = config_text(&lab, &settings).replace(lab.rpc_url(), &node);
    assert!(text.contains(&node));
    run_simulated(&text, clock.clone(), start + DAY).await;

    let store = SqliteStore::open(dir.path()).unwrap();
    let outages: Vec<OutageRecord> = store
        .entries_of_kind(&[RecordKind::Outage], 0)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.record {
            Record::Outage(o) => Some(o),
            _ => None,
        })
        .collect();
    let opened: Vec<&String> = outages
        .iter()
        .filter_map(|o| match o {
            OutageRecord::Opened { cause, of, .. } if *of == OutageOf::Rpc => Some(cause),
            _ => None,
        })
        .collect();
    assert_eq!(
        opened.len(),
        1,
        "one window for the whole stretch: {outages:?}"
    );
    assert!(opened[0].contains("502"), "{}", opened[0]);
    let closed: Vec<(i64, i64)> = outages
        .iter()
        .filter_map(|o| match o {
            OutageRecord::Closed { from_ms, to_ms, of } if *of == OutageOf::Rpc => {
                Some((*from_ms, *to_ms))
            }
            _ => None,
        })
        .collect();
    assert_eq!(closed.len(), 1, "{outages:?}");
    let (from, to) = closed[0];
    // From just after the last good read before the stretch, to the first good read after it.
    assert!(
        from > out.0 - 2 * HOUR && from <= out.0,
        "{from} vs {}",
        out.0
    );
    assert!(to >= out.1 && to <= out.1 + 2 * HOUR, "{to} vs {}", out.1);

    for subject in &subjects {
        let rows = history(&store, subject);
        let inside = |e: &serde_json::Value| {
            let t = ms_of(e["at"].as_str().unwrap());
            t >= out.0 && t < out.1
        };
        // Our RPC failing is never a fact about the subject.
        let c3_inside: Vec<&serde_json::Value> = rows
            .iter()
            .filter(|e| e["check"] == "C3" && inside(e))
            .collect();
        assert!(!c3_inside.is_empty(), "{subject} ran while the RPC was out");
        assert!(c3_inside.iter().all(|e| e["outcome"] == "unmeasured"));
        assert!(
            rows.iter()
                .any(|e| e["check"] == "C3" && e["outcome"] == "pass")
        );
        let r1_passes_inside = rows
            .iter()
            .filter(|e| e["check"] == "R1" && e["outcome"] == "pass" && inside(e))
            .count();
        assert!(r1_passes_inside > 0);
        let doc = latest_document(&store, subject);
        assert_eq!(check(&doc, "C3")["fails"], 0, "{}", check(&doc, "C3"));
        // The RPC window excuses the chain reads only: the subject's own answers still count.
        assert_eq!(check(&doc, "R1")["fails"], 0, "{}", check(&doc, "R1"));
        assert_eq!(check(&doc, "R1")["unmeasured"], 0, "{}", check(&doc, "R1"));
        let verdict = doc["verdict"]["verdict"].as_str().unwrap();
        assert!(
            !["avoid", "down"].contains(&verdict),
            "{subject}: {verdict}"
        );
    }
    assert!(store.verify(None, true).is_ok());
    let recomputed = x402_probe::daemon::recompute::recompute_ledger(
        &store,
        &[x402_probe::rubric::Rubric::embedded_default()],
    )
    .unwrap();
    assert_eq!(recomputed.mismatches, vec![], "the windows re-derive too");
}

/// A paid call a spend cap of ours declines is not tried again on every run: each attempt would
/// fetch the 402 again, read the chain and write a refusal, and meet the same daily cap. The
/// subject's paid calls wait a day; its free runs go on at their cadence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_call_a_spend_cap_declines_waits_a_day_before_it_is_tried_again() {
    use x402_probe::evidence::paid::{Decision, RefusalCode};
    let lab = lab(&["honest-v2"]).await;
    let url = lab.endpoint("honest-v2").unwrap().url.clone();
    let start = start_ms();
    let clock = Arc::new(ManualClock::at_ms(start));
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(dir.path());
    settings.subjects = vec![url.clone()];
    settings.pay_from_first_run = true;
    settings.paid_min_interval_secs = 3600;
    // Under the endpoint's price ($0.01): every paid call is declined by the cap.
    settings.pay_caps.per_subject_per_day = "0.005".into();
    let text = config_text(&lab, &settings);
    run_simulated(&text, clock.clone(), start + 3 * DAY + HOUR).await;

    let store = SqliteStore::open(dir.path()).unwrap();
    let runs = runs(&store, &url);
    let attempts: Vec<i64> = runs
        .iter()
        .filter_map(|r| r.paid.as_ref().map(|p| (r.started_at_ms, p)))
        .map(|(at, p)| {
            assert!(
                matches!(&p.decision, Decision::Refused { refusals }
                    if refusals.iter().any(|r| r.code == RefusalCode::OverPerSubjectCap)),
                "declined by the cap: {:?}",
                p.decision
            );
            at
        })
        .collect();
    assert!(runs.len() >= 20, "free runs go on: {} runs", runs.len());
    assert!(
        (3..=4).contains(&attempts.len()),
        "one paid attempt a day over 3 days, not one a run: {} attempts in {} runs",
        attempts.len(),
        runs.len()
    );
    assert_eq!(attempts[0], runs[0].started_at_ms, "the first run tries");
    assert!(
        attempts.windows(2).all(|w| w[1] - w[0] >= DAY),
        "a day apart at least: {attempts:?}"
    );
}
