//! A daemon with the lab behind it and its API on a loopback port, for the API's tests and the
//! pages' and metrics' tests: a few simulated days of history first (real HTTP, TLS and chain on a
//! simulated clock, ending at the wall clock's current hour), then the same state directory served
//! by a daemon on the system clock that keeps probing while the tests call it.
//!
//! ```ignore
//! let d = ApiDaemon::start(ApiOptions::default()).await;
//! let body = reqwest::get(d.url("/v1/subjects")).await?.text().await?;
//! d.stop().await;
//! ```
#![allow(dead_code)]

pub(crate) use crate::daemon_support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use daemon_support::*;
use x402_lab::Lab;
use x402_lab::dynamic::Timeline;
use x402_probe::clock::{Clock, ManualClock, SystemClock};
use x402_probe::config::DaemonConfig;
use x402_probe::daemon::{Daemon, Signal, TimeSource};
use x402_probe::ledger::record::{OutageRecord, Record};
use x402_probe::store::{NewEntry, SqliteStore, Store};

/// What the helper sets up.
pub struct ApiOptions {
    /// Simulated days of history before serving (0: none, the daemon starts fresh).
    pub days: u32,
    /// Lab scenarios probed as they are.
    pub scenarios: Vec<&'static str>,
    /// Also serve an honest endpoint whose price rises (unannounced) halfway through the history:
    /// a revision, and an H2 failure.
    pub price_rise: bool,
    /// Declare one of our outage windows (two hours, a day before the end of the history).
    pub declared_outage: bool,
    /// The free cadence while serving (the history uses 3 hours).
    pub live_free_every_secs: u64,
    /// Lines added to the `[api]` table (bind is set to a free loopback port).
    pub api_extra: String,
    /// Paid calls (the history then reaches verified verdicts).
    pub pay: bool,
}

impl Default for ApiOptions {
    fn default() -> Self {
        ApiOptions {
            days: 4,
            scenarios: vec!["honest-v2", "overcharge", "wrong-payee"],
            price_rise: true,
            declared_outage: true,
            live_free_every_secs: 60,
            api_extra: String::new(),
            pay: true,
        }
    }
}

/// The daemon serving its API.
pub struct ApiDaemon {
    pub lab: Lab,
    pub dir: tempfile::TempDir,
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// Subject URLs by the name the lab gives them (`price-rise` for the varied one).
    pub urls: BTreeMap<String, String>,
    /// The reporter key's public half.
    pub public_key: [u8; 32],
    /// When the simulated history ends (ms).
    pub history_end_ms: i64,
    stop: tokio::sync::mpsc::Sender<Signal>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    clock_sync: tokio::task::JoinHandle<()>,
}

impl ApiDaemon {
    pub async fn start(options: ApiOptions) -> ApiDaemon {
        let mut lab = lab(&options.scenarios).await;
        let end = start_ms();
        let begin = end - i64::from(options.days) * DAY;
        let clock = Arc::new(ManualClock::at_ms(begin));
        let mut urls = BTreeMap::new();
        for name in &options.scenarios {
            urls.insert(name.to_string(), lab.endpoint(name).unwrap().url.clone());
        }
        if options.price_rise {
            let at = begin + (end - begin) / 2;
            let url = lab
                .spawn_variant(
                    "honest-v2",
                    "price-rise",
                    Timeline {
                        price: vec![(at, 30_000)],
                        ..Timeline::default()
                    },
                    lab_clock(&clock),
                )
                .await
                .unwrap();
            urls.insert("price-rise".into(), url);
        }
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::new(dir.path());
        settings.subjects = urls.values().cloned().collect();
        settings.pay = options.pay;
        settings.pay_from_first_run = options.pay;
        settings.api = "[api]\nenabled = false\n".into();
        let history_text = config_text(&lab, &settings);
        if options.days > 0 {
            run_simulated(&history_text, clock.clone(), end).await;
        }
        if options.declared_outage {
            let store = SqliteStore::open(dir.path()).unwrap();
            let from_ms = end - DAY;
            store
                .append(vec![NewEntry::plain(
                    end,
                    Record::Outage(OutageRecord::Declared {
                        from_ms,
                        to_ms: from_ms + 2 * HOUR,
                        reason: "test: our uplink was down".into(),
                        declared_at_ms: end,
                    }),
                )])
                .unwrap();
        }

        // Every subject due again now (the history left them due up to one 3-hour cadence later):
        // the serving daemon spreads them over its own cadence and keeps probing.
        {
            let store = SqliteStore::open(dir.path()).unwrap();
            let mut rows = store.subjects().unwrap();
            for row in &mut rows {
                row.next_free_ms = row.next_free_ms.min(end);
            }
            store.put_subjects(&rows).unwrap();
        }
        // Serving: the system clock; the lab's varied endpoint follows it too.
        clock.advance_to_ms(SystemClock.now_ms());
        let sync = clock.clone();
        let clock_sync = tokio::spawn(async move {
            loop {
                sync.advance_to_ms(SystemClock.now_ms());
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        });
        settings.free_every_secs = options.live_free_every_secs;
        settings.api = format!("[api]\nbind = \"127.0.0.1:0\"\n{}\n", options.api_extra);
        let live_text = config_text(&lab, &settings);
        x402_probe::cmd::daemon::init_logs("info");
        let config: DaemonConfig = toml::from_str(&live_text).expect("the test's config parses");
        config.validate().expect("the test's config is valid");
        let daemon = Daemon::open(config, None, TimeSource::System)
            .await
            .expect("the daemon opens");
        let addr = daemon.api_addr().expect("the API is bound at open");
        let public_key =
            x402_probe::ledger::key::ReporterKey::from_key_file(&dir.path().join("reporter.key"))
                .unwrap()
                .public_key();
        let (stop, rx) = tokio::sync::mpsc::channel(4);
        let task = tokio::spawn(daemon.run(rx));
        let d = ApiDaemon {
            lab,
            dir,
            addr,
            base: format!("http://{addr}"),
            urls,
            public_key,
            history_end_ms: end,
            stop,
            task,
            clock_sync,
        };
        d.wait_until_served().await;
        d
    }

    /// `base + path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The API's id of a subject URL.
    pub fn id_of(&self, name: &str) -> String {
        x402_probe::api::signed::subject_id(&self.urls[name])
    }

    /// Waits until the API lists every subject (the view is built at start; this is a guard).
    async fn wait_until_served(&self) {
        let client = reqwest::Client::new();
        for _ in 0..100 {
            if let Ok(r) = client.get(self.url("/v1/subjects?limit=500")).send().await
                && r.status() == 200
                && let Ok(v) = r.json::<serde_json::Value>().await
                && v["total"].as_u64() == Some(self.urls.len() as u64)
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("the API did not list the subjects");
    }

    /// Stops the daemon (as SIGTERM would) and waits for it; returns its result.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(Signal::Stop).await;
        let result = self.task.await.expect("the daemon's task");
        self.clock_sync.abort();
        result
    }
}

/// What a raw ledger entry would show if a route leaked one: the envelope's shape (an object
/// with `prev` and `record`), and strings only raw entries hold (run ids, revision fingerprints,
/// the reasons and details of outages and control probes).
pub struct LeakCheck {
    markers: Vec<String>,
}

impl LeakCheck {
    /// The markers of every entry in the state directory's ledger.
    pub fn from_store(dir: &std::path::Path) -> LeakCheck {
        let store = SqliteStore::open(dir).unwrap();
        let mut markers = Vec::new();
        let mut after = 0;
        loop {
            let page = store.entries_page(after, 1000).unwrap();
            let Some(last) = page.last() else { break };
            after = last.seq;
            for e in page {
                match e.record {
                    Record::Run(r) => markers.push(r.id.clone()),
                    Record::Refund(r) => markers.push(r.run_id.clone()),
                    Record::Revision(r) => markers.push(r.fingerprint.clone()),
                    Record::Outage(OutageRecord::Declared { reason, .. }) => markers.push(reason),
                    Record::Outage(OutageRecord::Opened { cause, .. }) => markers.push(cause),
                    Record::Control(c) => markers.push(c.detail.clone()),
                    _ => {}
                }
            }
        }
        markers.retain(|m| m.len() >= 12);
        markers.sort();
        markers.dedup();
        LeakCheck { markers }
    }

    pub fn markers(&self) -> usize {
        self.markers.len()
    }

    /// Why `body` looks like it holds a raw ledger entry, if it does.
    pub fn leak_in(&self, body: &[u8]) -> Option<String> {
        let text = String::from_utf8_lossy(body);
        if let Some(m) = self.markers.iter().find(|m| text.contains(m.as_str())) {
            return Some(format!("holds {m:?}, which only a raw ledger entry holds"));
        }
        let value: serde_json::Value = serde_json::from_slice(body).ok()?;
        fn envelope(v: &serde_json::Value) -> bool {
            match v {
                serde_json::Value::Object(o) => {
                    (o.contains_key("prev") && o.contains_key("record")) || o.values().any(envelope)
                }
                serde_json::Value::Array(a) => a.iter().any(envelope),
                _ => false,
            }
        }
        envelope(&value).then(|| "holds an object shaped like a ledger envelope".to_string())
    }
}

/// Validates an answer against the document's operation `method` `template` for its status.
pub fn validate_response(
    doc: &serde_json::Value,
    method: &str,
    template: &str,
    url: &str,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> Result<(), String> {
    let op = &doc["paths"][template][method];
    if !op.is_object() {
        return Err(format!("{method} {template} is not in the document"));
    }
    let code = status.to_string();
    let range = format!("{}XX", &code[..1]);
    let response = [code.as_str(), range.as_str(), "default"]
        .iter()
        .map(|k| &op["responses"][*k])
        .find(|r| r.is_object())
        .ok_or_else(|| format!("{url}: status {status} is not documented"))?;
    let media = content_type.split(';').next().unwrap().trim();
    let schema = &response["content"][media]["schema"];
    if !schema.is_object() {
        return Err(format!(
            "{url}: {status} with {media} is not documented: {response}"
        ));
    }
    let instance: serde_json::Value = if media == "application/json" {
        serde_json::from_slice(body).map_err(|e| e.to_string())?
    } else {
        serde_json::Value::String(String::from_utf8_lossy(body).into_owned())
    };
    check(doc, schema, &instance).map_err(|e| format!("{url} ({status}): {e}"))
}

/// Validates a JSON request body against the document's operation `method` `template`.
pub fn validate_request(
    doc: &serde_json::Value,
    method: &str,
    template: &str,
    body: &serde_json::Value,
) -> Result<(), String> {
    let schema =
        &doc["paths"][template][method]["requestBody"]["content"]["application/json"]["schema"];
    if !schema.is_object() {
        return Err(format!(
            "{method} {template}: no request body is documented"
        ));
    }
    check(doc, schema, body).map_err(|e| format!("{method} {template} request: {e}"))
}

/// `instance` against `schema`, with the document's components beside it so references resolve.
fn check(
    doc: &serde_json::Value,
    schema: &serde_json::Value,
    instance: &serde_json::Value,
) -> Result<(), String> {
    let root = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"].clone(),
        "allOf": [schema],
    });
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(&root)
        .map_err(|e| format!("the document's schema: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// An answer as the validation reads it: status, content type and body.
pub async fn read_answer(r: reqwest::Response) -> (u16, String, bytes::Bytes) {
    let status = r.status().as_u16();
    let content_type = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, content_type, r.bytes().await.unwrap())
}
