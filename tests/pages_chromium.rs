//! The HTML pages in a real browser. The daemon runs four simulated days against the lab (honest,
//! overcharging and hostile-description endpoints, one whose price rises on day 2 — a revision —
//! and a control endpoint that goes dark for three hours, which is our outage), then its pages are
//! served on a loopback port and headless Chromium (Debian's `chromium`) loads the index and
//! subject pages at desktop and phone widths. Each load must render what the store holds (read
//! back with `--dump-dom`), and Chromium's log must hold no console message and no
//! Content-Security-Policy violation. A deliberately violating page proves the log is read.
//!
//! Screenshots go to `target/tmp/pages-screenshots/`, or to `docs/screenshots/` when
//! `X402_PROBE_WRITE_SCREENSHOTS=1` is set (how the committed ones were made).

mod daemon_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use daemon_support::*;
use x402_lab::dynamic::Timeline;
use x402_probe::api::pages::{CONTENT_SECURITY_POLICY, subject_id};
use x402_probe::clock::ManualClock;
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

/// Serves the pages over `store` on a loopback port, plus one page that breaks the CSP on purpose.
async fn serve(store: Arc<dyn Store>) -> String {
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
    let app: axum::Router = x402_probe::api::pages::router(store).route("/violating", violating);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
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
    let mut lab = lab(&[
        "honest-v2",
        "overcharge",
        "injection-description",
        "hidden-unicode",
        "control",
    ])
    .await;
    let start = start_ms();
    let clock = Arc::new(ManualClock::at_ms(start));
    let at = |d: f64| start + (d * DAY as f64) as i64;
    let price_rise = lab
        .spawn_variant(
            "honest-v2",
            "price-rise",
            Timeline {
                price: vec![(at(2.0), 30_000)],
                ..Timeline::default()
            },
            lab_clock(&clock),
        )
        .await
        .unwrap();
    // Our vantage "loses its network" for three hours on day 1: the control goes dark.
    let control = lab
        .spawn_variant(
            "control",
            "control-dark",
            Timeline {
                down: vec![(at(1.25), at(1.25) + 3 * HOUR)],
                ..Timeline::default()
            },
            lab_clock(&clock),
        )
        .await
        .unwrap();
    let mut subjects = vec![price_rise.clone()];
    for name in [
        "honest-v2",
        "overcharge",
        "injection-description",
        "hidden-unicode",
    ] {
        subjects.push(lab.endpoint(name).unwrap().url.clone());
    }

    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(dir.path());
    settings.subjects = subjects.clone();
    settings.control = Some(control);
    settings.control_every_secs = 900;
    settings.pay_from_first_run = true;
    let text = config_text(&lab, &settings);
    run_simulated(&text, clock.clone(), at(4.0)).await;

    let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
    // What the lab must have given for the pages to show it.
    let revisions = store
        .subject_entries(&price_rise, &[RecordKind::Revision], 0)
        .unwrap();
    assert!(revisions.len() >= 2, "r0 and the price rise");
    let outages = store.entries_of_kind(&[RecordKind::Outage], 0).unwrap();
    assert!(
        !outages.is_empty(),
        "the control's dark hours are our outage"
    );
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

    let base = serve(store.clone()).await;

    // The log is really read: a page that breaks the policy is caught.
    let load = chromium(&format!("{base}/violating"), &["--dump-dom".into()]).await;
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
        let dom = load_dom(&format!("{base}/subjects/{id}")).await;
        let doc = latest_document(&store, url);
        assert!(!dom.contains("<script"), "{url}");
        assert!(dom.contains("<svg class=\"chart\""), "{url}: the chart");
        assert!(dom.contains("class=\"area\""), "{url}: the band");
        assert!(dom.contains("class=\"line\""), "{url}: the score line");
        assert!(dom.contains("class=\"outage\""), "{url}: our outage shaded");
        let score = doc["capped_score"].as_f64().unwrap();
        let shown: f64 = between(&dom, "<div class=\"score\">", "<")[0]
            .parse()
            .unwrap();
        assert!((shown - score).abs() < 0.006, "{url}: {shown} for {score}");
        for dim in doc["dimensions"].as_array().unwrap() {
            for check in dim["checks"].as_array().unwrap() {
                let id = check["id"].as_str().unwrap();
                assert!(
                    dom.contains(&format!("<th scope=\"row\"><code>{id}</code>")),
                    "{url}: check {id}"
                );
            }
        }
        assert!(dom.contains("class=\"outcome outcome-"), "{url}: receipts");
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
    let overcharge = &pages[&lab.endpoint("overcharge").unwrap().url];
    assert!(overcharge.contains("Binding gates") && overcharge.contains("verdict-avoid"));
    // The injected description and hidden characters reach the page as text only.
    for name in ["injection-description", "hidden-unicode"] {
        let dom = &pages[&lab.endpoint(name).unwrap().url];
        assert!(
            !dom.contains('\u{202e}') && !dom.contains('\u{200b}'),
            "{name}: hidden characters shown as escapes"
        );
    }

    // An unknown subject: the 404 page, with the same policy.
    let client = reqwest::Client::new();
    let missing = client
        .get(format!("{base}/subjects/ffffffffffffffff"))
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
    let overcharge_url = format!(
        "{base}/subjects/{}",
        subject_id(&lab.endpoint("overcharge").unwrap().url)
    );
    for (name, url, width, height) in [
        ("index-desktop.png", format!("{base}/"), 1280, 720),
        ("index-phone.png", format!("{base}/"), 390, 844),
        ("subject-desktop.png", rise_url.clone(), 1280, 1500),
        ("subject-phone.png", rise_url.clone(), 390, 2400),
        ("subject-full-desktop.png", rise_url.clone(), 1280, 4900),
        ("subject-avoid-desktop.png", overcharge_url, 1280, 1100),
    ] {
        screenshot(&url, &shots.join(name), width, height).await;
    }
    eprintln!("screenshots in {}", shots.display());
}
