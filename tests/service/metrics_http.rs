//! `GET /metrics` on the daemon's API, against a lab-backed daemon that keeps probing: the classic
//! text format by default (what `promtool check metrics` accepts without a warning), OpenMetrics
//! when the scraper asks for it, no rate limit in the way of a scraper, and gauges that are right
//! from the first scrape after a restart.

use crate::api_support;
use crate::metrics_support;

use std::collections::BTreeMap;

use api_support::*;
use metrics_support::*;
use x402_probe::score::document::ScoreDocument;
use x402_probe::store::{SqliteStore, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_in_both_formats_and_pass_promtool() {
    let d = ApiDaemon::start(ApiOptions {
        days: 1,
        scenarios: vec!["honest-v2"],
        price_rise: false,
        declared_outage: false,
        api_extra: "rate_per_second = 1\nrate_burst = 1\n".into(),
        ..ApiOptions::default()
    })
    .await;
    let client = reqwest::Client::new();

    let response = client.get(d.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = response.text().await.unwrap();
    assert!(text.contains("x402_probe_ledger_entries "), "{text}");
    assert!(!text.contains("# EOF"));
    assert_promtool_clean(&text);

    // Scraped again and again: a public rate limit of 1/s does not apply to it.
    for _ in 0..5 {
        let r = client
            .get(d.url("/metrics"))
            .header(
                "accept",
                "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/openmetrics-text; version=1.0.0")
        );
        let body = r.text().await.unwrap();
        assert!(body.ends_with("# EOF\n"));
        assert!(body.contains("# TYPE x402_probe_runs counter"));
    }
    d.stop().await.unwrap();
}

/// The latest stored verdict of every subject with a score, counted by verdict.
fn stored_verdicts(store: &SqliteStore) -> BTreeMap<String, f64> {
    let mut counts = BTreeMap::new();
    for row in store.subjects().unwrap() {
        if let Some(score) = store.latest_score(&row.url).unwrap() {
            let doc = ScoreDocument::from_slice(&score.document).unwrap();
            *counts
                .entry(doc.verdict.verdict.as_str().to_string())
                .or_insert(0.0) += 1.0;
        }
    }
    counts
}

/// The daemon that serves is a restart: the simulated history was scored by another daemon
/// on the same state directory. The verdict gauge counts every scored subject from the first
/// scrape, not only those scored since the start (the serving daemon's cadence is an hour, so
/// few or none are rescored before the scrape).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_verdict_gauge_counts_every_scored_subject() {
    let d = ApiDaemon::start(ApiOptions {
        days: 1,
        scenarios: vec!["honest-v2", "overcharge", "wrong-payee"],
        price_rise: false,
        declared_outage: false,
        pay: false,
        live_free_every_secs: 3600,
        ..ApiOptions::default()
    })
    .await;
    let client = reqwest::Client::new();
    let store = SqliteStore::open(d.dir.path()).unwrap();
    let verdicts = ["ok", "caution", "avoid", "down", "unverified"];
    let mut last = String::new();
    // A run finishing between the scrape and the store read could change one verdict: retry.
    for _ in 0..5 {
        let text = client
            .get(d.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let m = samples(&text);
        let gauge: BTreeMap<String, f64> = verdicts
            .iter()
            .map(|v| {
                let series = format!("x402_probe_subjects{{verdict=\"{v}\"}}");
                (v.to_string(), value(&m, &series))
            })
            .filter(|(_, n)| *n > 0.0)
            .collect();
        let stored = stored_verdicts(&store);
        assert_eq!(
            stored.values().sum::<f64>(),
            3.0,
            "the history scored every subject: {stored:?}"
        );
        if gauge == stored {
            d.stop().await.unwrap();
            return;
        }
        last = format!("gauge {gauge:?}, store {stored:?}");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    panic!("the verdict gauge is not the store's latest verdicts: {last}");
}
