//! `GET /metrics` on the daemon's API, against a lab-backed daemon that keeps probing: the classic
//! text format by default (what `promtool check metrics` accepts without a warning), OpenMetrics
//! when the scraper asks for it, and no rate limit in the way of a scraper.

mod api_support;

use std::process::{Command, Stdio};

use api_support::*;

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
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package) is installed");
    std::io::Write::write_all(promtool.stdin.as_mut().unwrap(), text.as_bytes()).unwrap();
    let checked = promtool.wait_with_output().unwrap();
    let lint = format!(
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(
        checked.status.success() && lint.trim().is_empty(),
        "promtool: {lint}\n{text}"
    );

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
