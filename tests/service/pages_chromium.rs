//! The HTML pages in a real browser. A daemon with the lab behind it (honest, overcharging and
//! hostile-description endpoints, one whose price rises halfway — a revision) gets four simulated
//! days of history and one of our outages declared, then serves its API and pages on a loopback
//! port while it keeps probing (`tests/api_support`). Headless Chromium (Debian's `chromium`)
//! loads the index and every subject page at desktop and phone widths. Each load must render what
//! the store holds (read back with `--dump-dom`), and Chromium's log must hold no console message
//! and no Content-Security-Policy violation; a deliberately violating page proves the log is read.
//! No page may hold what only a raw ledger entry holds.
//!
//! Screenshots go to `target/tmp/pages-screenshots/`, or to `docs/screenshots/` when
//! `X402_PROBE_WRITE_SCREENSHOTS=1` is set (how the committed ones were made).

use crate::api_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use api_support::daemon_support::*;
use api_support::{ApiDaemon, ApiOptions, LeakCheck};
use x402_probe::api::pages::CONTENT_SECURITY_POLICY;
use x402_probe::api::signed::subject_id;
use x402_probe::ledger::record::{Record, RecordKind};
use x402_probe::store::{SqliteStore, Store};

const CHROMIUM: &str = "chromium";
/// A page load that takes longer than this is a failure (the machine is shared and slow).
const BROWSER_TIMEOUT: Duration = Duration::from_secs(90);

/// What one Chromium run left: its stdout (the DOM, with `--dump-dom`) and log.
struct Load {
    stdout: String,
    log: String,
}

/// Runs headless Chromium once on `url` with a fresh profile.
async fn chromium(url: &str, extra: &[String]) -> Load {
    let profile = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(CHROMIUM);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(BROWSER_TIMEOUT, command.output())
        .await
        .unwrap_or_else(|_| panic!("chromium did not finish {url} within {BROWSER_TIMEOUT:?}"))
        .unwrap_or_else(|e| {
            panic!("running {CHROMIUM} (Debian's chromium package; .ci/run installs it): {e}")
        });
    assert!(
        output.status.success(),
        "chromium on {url}: {:?}",
        output.status
    );
    Load {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        log: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Lines of Chromium's log that a page caused: any console message (the pages run no script, so
/// any is a fault: CSP violations, failed loads), and any refusal.
fn page_problems(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| {
            l.contains(":CONSOLE")
                || l.contains("Refused to")
                || l.contains("Content Security Policy")
        })
        .collect()
}

async fn load_dom(url: &str) -> String {
    let load = chromium(url, &["--dump-dom".to_string()]).await;
    let problems = page_problems(&load.log);
    assert!(problems.is_empty(), "{url}: {problems:#?}");
    assert!(
        load.stdout.contains("</html>"),
        "{url}: no DOM: {}",
        load.stdout
    );
    load.stdout
}

async fn screenshot(url: &str, path: &Path, width: u32, height: u32) {
    let _ = std::fs::remove_file(path);
    let load = chromium(
        url,
        &[
            format!("--window-size={width},{height}"),
            format!("--screenshot={}", path.display()),
        ],
    )
    .await;
    let problems = page_problems(&load.log);
    assert!(problems.is_empty(), "{url} at {width}px: {problems:#?}");
    let png = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        &png[..8],
        b"\x89PNG\r\n\x1a\n",
        "{} is a PNG",
        path.display()
    );
    // The IHDR chunk holds the size: the whole window was drawn.
    let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((w, h), (width, height), "{}", path.display());
}

fn screenshot_dir() -> PathBuf {
    let dir = if std::env::var_os("X402_PROBE_WRITE_SCREENSHOTS").is_some_and(|v| v == "1") {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots")
    } else {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("pages-screenshots")
    };
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Serves one page that breaks our CSP on purpose (an inline style), on a loopback port of its own.
async fn serve_violating_page() -> String {
    let violating = axum::routing::get(|| async {
        (
            [
                (axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (
                    axum::http::header::CONTENT_SECURITY_POLICY,
                    CONTENT_SECURITY_POLICY,
                ),
            ],
            "<!DOCTYPE html><html><head><link rel=\"icon\" href=\"data:,\">\
             <style>p { color: red }</style></head><body><p>inline style</p></body></html>",
        )
    });
    let app: axum::Router = axum::Router::new().route("/violating", violating);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/violating")
}

/// The text between `start` and the next `end`, for each occurrence.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Vec<&'a str> {
    text.split(start)
        .skip(1)
        .filter_map(|rest| rest.split(end).next())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_render_in_chromium_without_console_errors_at_desktop_and_phone_widths() {
    let d = ApiDaemon::start(ApiOptions {
        scenarios: vec![
            "honest-v2",
            "overcharge",
            "injection-description",
            "hidden-unicode",
        ],
        ..ApiOptions::default()
    })
    .await;
    let base = d.base.clone();
    let subjects: Vec<String> = d.urls.values().cloned().collect();
    let price_rise = d.urls["price-rise"].clone();
    let overcharge_url = d.urls["overcharge"].clone();

    // What the history must hold for the pages to show it (read from a second connection while
    // the daemon keeps writing: SQLite in WAL mode).
    let store = SqliteStore::open(d.dir.path()).unwrap();
    let revisions = store
        .subject_entries(&price_rise, &[RecordKind::Revision], 0)
        .unwrap();
    assert!(revisions.len() >= 2, "r0 and the price rise");
    let outages = store.entries_of_kind(&[RecordKind::Outage], 0).unwrap();
    assert!(!outages.is_empty(), "our declared outage");
    let days = store.daily_scores(&price_rise).unwrap();
    assert!(days.len() >= 4, "several days of history: {}", days.len());
    let paid_tx: Vec<String> = store
        .subject_entries(&price_rise, &[RecordKind::Run], 0)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.record {
            Record::Run(r) => r
                .paid?
                .chain?
                .nonce_receipt
                .value()?
                .as_ref()
                .map(|t| t.transaction_hash.to_string()),
            _ => None,
        })
        .collect();
    assert!(!paid_tx.is_empty(), "a settled paid call");

    // The log is really read: a page that breaks the policy is caught.
    let load = chromium(&serve_violating_page().await, &["--dump-dom".into()]).await;
    assert!(
        !page_problems(&load.log).is_empty(),
        "an inline style under our CSP must show in the log: {}",
        load.log
    );

    // The index: every subject once, linked, with its band bar, sorted by score.
    let index = load_dom(&format!("{base}/")).await;
    for url in &subjects {
        let id = subject_id(url);
        assert_eq!(
            index.matches(&format!("href=\"/subjects/{id}\"")).count(),
            1,
            "{url} linked once"
        );
    }
    assert_eq!(index.matches("<svg class=\"bar\"").count(), subjects.len());
    assert!(!index.contains("<script"), "no script anywhere");
    let scores: Vec<f64> = between(&index, "data-label=\"Score\"><strong>", "</strong>")
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(scores.len(), subjects.len());
    assert!(
        scores.windows(2).all(|w| w[0] >= w[1]),
        "best first: {scores:?}"
    );
    // Sorted by verdict through the column's link: the most severe first.
    let by_verdict = load_dom(&format!("{base}/?sort=verdict&dir=asc")).await;
    let verdicts = between(&by_verdict, "<span class=\"verdict verdict-", "\"");
    let order = ["down", "avoid", "caution", "unverified", "ok"];
    let ranks: Vec<usize> = verdicts
        .iter()
        .map(|v| order.iter().position(|o| o == v).unwrap())
        .collect();
    assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "{verdicts:?}");
    assert!(
        verdicts.contains(&"avoid"),
        "the overcharging endpoint: {verdicts:?}"
    );

    // Each subject page: the score and band, every check of the document with a receipt, the
    // chart with its band and line, the outage and (for the price rise) the revision marked.
    let mut pages = BTreeMap::new();
    for url in &subjects {
        let id = subject_id(url);
        // The daemon keeps scoring: the page shows the latest score before or after its load.
        let before = latest_document(&store, url);
        let dom = load_dom(&format!("{base}/subjects/{id}")).await;
        let after = latest_document(&store, url);
        assert!(!dom.contains("<script"), "{url}");
        assert!(dom.contains("<svg class=\"chart\""), "{url}: the chart");
        assert!(dom.contains("class=\"area\""), "{url}: the band");
        assert!(dom.contains("class=\"line\""), "{url}: the score line");
        assert!(dom.contains("class=\"outage\""), "{url}: our outage shaded");
        let shown: f64 = between(&dom, "<div class=\"score\">", "<")[0]
            .parse()
            .unwrap();
        let scores = [&before, &after].map(|d| d["capped_score"].as_f64().unwrap());
        assert!(
            scores.iter().any(|s| (shown - s).abs() < 0.006),
            "{url}: {shown} for {scores:?}"
        );
        for dim in after["dimensions"].as_array().unwrap() {
            for check in dim["checks"].as_array().unwrap() {
                let id = check["id"].as_str().unwrap();
                assert!(
                    dom.contains(&format!("<th scope=\"row\"><code>{id}</code>")),
                    "{url}: check {id}"
                );
            }
        }
        assert!(dom.contains("class=\"outcome outcome-"), "{url}: receipts");
        // The evidence line: probes that reached a conclusion over the days they span, and the
        // rule's needs beside them (in that order: never the probes over the days needed).
        let evidence = between(&dom, "<dt>Evidence</dt><dd>", "</dd>")[0];
        let probes: u64 = evidence
            .split(" probes over ")
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let span: f64 = between(evidence, " probes over ", " days")[0]
            .parse()
            .unwrap();
        assert!(
            [&before, &after].iter().any(|d| {
                let v = &d["verdict"]["verification"];
                v["probes"].as_u64() == Some(probes)
                    && (v["probe_span_days"].as_f64().unwrap() - span).abs() < 0.051
            }),
            "{url}: the evidence line {evidence:?}"
        );
        pages.insert(url.clone(), dom);
    }
    let rise = &pages[&price_rise];
    assert!(rise.contains("class=\"rev\""), "the revision marked");
    assert!(
        rise.contains("changed price") || rise.contains("changed amount"),
        "{rise}"
    );
    for tx in &paid_tx {
        assert!(rise.contains(tx.as_str()), "paid call {tx} listed");
    }
    let overcharge = &pages[&overcharge_url];
    assert!(overcharge.contains("Binding gates") && overcharge.contains("verdict-avoid"));
    // The injected description and hidden characters reach the page as text only.
    for name in ["injection-description", "hidden-unicode"] {
        let dom = &pages[&d.urls[name]];
        assert!(
            !dom.contains('\u{202e}') && !dom.contains('\u{200b}'),
            "{name}: hidden characters shown as escapes"
        );
    }

    // An unknown subject: the 404 page, with the same policy.
    let client = reqwest::Client::new();
    let missing = client
        .get(format!("{base}/subjects/{}", "f".repeat(32)))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.headers()["content-security-policy"],
        CONTENT_SECURITY_POLICY
    );
    assert!(missing.text().await.unwrap().contains("No such subject"));
    let bad = client
        .get(format!("{base}/?sort=%3Cx%3E"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body = bad.text().await.unwrap();
    assert!(body.contains("unknown sort column") && !body.contains("<x>"));
    let css = client
        .get(format!("{base}/pages.css"))
        .send()
        .await
        .unwrap();
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");
    let dom404 = chromium(
        &format!("{base}/subjects/not-an-id"),
        &["--dump-dom".to_string()],
    )
    .await;
    assert!(dom404.stdout.contains("No such subject"));

    // Screenshots, desktop and phone width.
    let shots = screenshot_dir();
    let rise_url = format!("{base}/subjects/{}", subject_id(&price_rise));
    let avoid_url = format!("{base}/subjects/{}", subject_id(&overcharge_url));
    for (name, url, width, height) in [
        ("index-desktop.png", format!("{base}/"), 1280, 720),
        ("index-phone.png", format!("{base}/"), 390, 844),
        ("subject-desktop.png", rise_url.clone(), 1280, 1500),
        ("subject-phone.png", rise_url.clone(), 390, 2400),
        ("subject-full-desktop.png", rise_url.clone(), 1280, 4900),
        ("subject-avoid-desktop.png", avoid_url, 1280, 1100),
    ] {
        screenshot(&url, &shots.join(name), width, height).await;
    }
    eprintln!("screenshots in {}", shots.display());

    // No page holds what only a raw ledger entry holds (run ids, fingerprints, outage reasons).
    let leaks = LeakCheck::from_store(d.dir.path());
    assert!(leaks.markers() > 20, "markers: {}", leaks.markers());
    for (name, dom) in pages
        .iter()
        .map(|(u, dom)| (u.as_str(), dom))
        .chain([("index", &index), ("index by verdict", &by_verdict)])
    {
        if let Some(why) = leaks.leak_in(dom.as_bytes()) {
            panic!("{name} leaks a ledger entry: {why}");
        }
    }
    d.stop().await.unwrap();
}
