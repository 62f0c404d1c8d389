//! Running the daemon against the lab: configuration files, the daemon in process on a simulated
//! clock, and reading what it published back from its store.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use x402_lab::daemon_config::{LabDaemonConfig, PayCaps};
use x402_lab::dynamic::LabClock;
use x402_lab::{Lab, LabOptions};
use x402_probe::clock::{Clock, ManualClock};
use x402_probe::config::DaemonConfig;
use x402_probe::daemon::Daemon;
use x402_probe::ledger::key::ReporterKey;
use x402_probe::ledger::record::{Record, RecordKind};
use x402_probe::store::{SqliteStore, Store};

pub const HOUR: i64 = 3_600_000;
pub const DAY: i64 = 24 * HOUR;

pub async fn lab(scenarios: &[&str]) -> Lab {
    x402_probe::install_crypto_provider();
    Lab::start_with(LabOptions {
        scenarios: Some(scenarios.iter().map(|s| s.to_string()).collect()),
        ..LabOptions::default()
    })
    .await
    .expect("the lab starts")
}

pub fn lab_clock(clock: &Arc<ManualClock>) -> LabClock {
    let c = clock.clone();
    Arc::new(move || c.now_ms())
}

/// The settings the tests vary.
pub struct Settings<'a> {
    pub state_dir: &'a Path,
    pub subjects: Vec<String>,
    pub control: Option<String>,
    pub control_every_secs: u64,
    pub free_every_secs: u64,
    pub pay: bool,
    /// The spend caps when `pay` (default: the lab's usual ones).
    pub pay_caps: PayCaps,
    pub pay_from_first_run: bool,
    pub paid_min_interval_secs: u64,
    pub samples: u64,
    pub extra: &'a str,
    /// The `[api]` table (default: on a free loopback port, so tests never share one).
    pub api: String,
}

impl<'a> Settings<'a> {
    pub fn new(state_dir: &'a Path) -> Settings<'a> {
        Settings {
            state_dir,
            subjects: Vec::new(),
            control: None,
            control_every_secs: 600,
            free_every_secs: 3 * 3600,
            pay: true,
            pay_caps: PayCaps::default(),
            pay_from_first_run: false,
            paid_min_interval_secs: 86_400,
            samples: 2,
            extra: "",
            api: "[api]\nbind = \"127.0.0.1:0\"\n".into(),
        }
    }
}

/// A daemon configuration for `lab` (TOML text), with a fresh reporter key in the state dir.
pub fn config_text(lab: &Lab, s: &Settings) -> String {
    let key = s.state_dir.join("reporter.key");
    if !key.exists() {
        std::fs::create_dir_all(s.state_dir).unwrap();
        ReporterKey::generate(&key).expect("a reporter key");
    }
    let mut config = LabDaemonConfig::new(s.state_dir);
    config.samples = s.samples;
    config.free_every_secs = s.free_every_secs;
    config.paid_min_interval_secs = s.paid_min_interval_secs;
    config.pay_from_first_run = Some(s.pay_from_first_run);
    config.backoff_max_secs = Some(21_600);
    config.schedule_extra = format!("{}\n", s.extra);
    config.pay = s.pay.then(|| s.pay_caps.clone());
    config.control = s.control.clone().map(|url| (url, s.control_every_secs));
    config.subjects = s
        .subjects
        .iter()
        .map(|url| (url.clone(), "weather".to_string()))
        .collect();
    config.tail = s.api.clone();
    config.text(lab)
}

/// A loopback address that refuses connections for the rest of the test process: bound, never
/// listening, and held (a port bound and released at once could be handed to another test's server,
/// which would then answer in its place).
pub fn refusing_addr() -> std::net::SocketAddr {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind("127.0.0.1:0".parse().unwrap())
        .expect("binding a loopback port");
    let addr = socket.local_addr().expect("its address");
    std::mem::forget(socket);
    addr
}

pub fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("daemon.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the daemon in this process on `clock` until `until_ms`.
pub async fn run_simulated(config_text: &str, clock: Arc<ManualClock>, until_ms: i64) {
    x402_probe::cmd::daemon::init_logs("info");
    let config: DaemonConfig = toml::from_str(config_text).expect("the test's config parses");
    config.validate().expect("the test's config is valid");
    Daemon::run_simulated(config, None, clock, until_ms, 0)
        .await
        .expect("the daemon runs to the end");
}

/// Every run the daemon recorded for `subject`, in order.
pub fn runs(store: &dyn Store, subject: &str) -> Vec<x402_probe::evidence::run::RunRecord> {
    store
        .subject_entries(subject, &[RecordKind::Run], 0)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.record {
            Record::Run(run) => Some(*run),
            _ => None,
        })
        .collect()
}

/// Every score the daemon published for `subject`, in order, with the as-of time.
pub fn scores(store: &dyn Store, subject: &str) -> Vec<x402_probe::ledger::record::ScoreRecord> {
    store
        .subject_entries(subject, &[RecordKind::Score], 0)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.record {
            Record::Score(s) => Some(s),
            _ => None,
        })
        .collect()
}

/// The latest full score document of `subject` (without its inputs).
pub fn latest_document(store: &SqliteStore, subject: &str) -> Value {
    let row = store
        .latest_score(subject)
        .unwrap()
        .unwrap_or_else(|| panic!("{subject} has a score"));
    serde_json::from_slice(&row.document).unwrap()
}

/// A check's block in a score document.
pub fn check<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["dimensions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["checks"].as_array().unwrap())
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("{id} in the document"))
}

/// The history rows of a subject, parsed.
pub fn history(store: &SqliteStore, subject: &str) -> Vec<Value> {
    let rubric = x402_probe::rubric::Rubric::embedded_default();
    x402_probe::daemon::subject_state::subject_rows(store, &rubric, subject)
        .unwrap()
        .iter()
        .map(|row| serde_json::to_value(row).unwrap())
        .collect()
}

pub fn ms_of(text: &str) -> i64 {
    x402_probe::clock::ms_of(text).unwrap()
}

/// A note in the operator file's format.
pub fn note(at_ms: i64, kind: &str, amount: Option<&str>, pay_to: Option<&str>) -> Value {
    let mut n = serde_json::json!({
        "at": x402_lab::dynamic::rfc3339_ms(at_ms), "kind": kind, "text": "announced change",
    });
    if let Some(a) = amount {
        n["amount"] = Value::String(a.into());
    }
    if let Some(p) = pay_to {
        n["pay_to"] = Value::String(p.into());
    }
    n
}

/// A start time for simulations: the wall clock, on a whole hour (paid calls' EIP-3009 windows
/// are on the wall clock; evidence is stamped on the simulated one).
pub fn start_ms() -> i64 {
    let now = x402_probe::clock::SystemClock.now_ms();
    now - now.rem_euclid(HOUR)
}
