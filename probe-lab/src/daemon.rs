//! `x402-probe-lab daemon --lab [--days N]`: the daemon against the embedded lab, to watch evidence
//! accumulate. The lab serves honest and dishonest endpoints, endpoints that change over time (a
//! price rise without a note, a price rise with one, an outage, a 30% failure share), a paid MCP
//! tool (`mcp+http://.../mcp#get_weather`, rated like an endpoint) and a control endpoint; the daemon gets a configuration written for them, in a state directory that is kept so
//! `ledger verify` and `recompute --ledger` can be run on it afterwards.
//!
//! With `--days N` the daemon runs on a simulated clock (N days in seconds of real time; the lab's
//! endpoints follow the same clock) and then prints each subject's daily score: the score, its band
//! and the verdict move as probes, paid calls and days accumulate. Without it the daemon runs in
//! real time until SIGTERM or Ctrl-C, one log line per run.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::Value;
use x402_lab::daemon_config::LabDaemonConfig;
use x402_lab::dynamic::{LabClock, Timeline, rfc3339_ms};
use x402_lab::{Lab, LabOptions};

use x402_probe::clock::{Clock, ManualClock, SystemClock};
use x402_probe::cmd::service;
use x402_probe::config::DaemonConfig;
use x402_probe::daemon::{Daemon, TimeSource};
use x402_probe::ledger::key::ReporterKey;
use x402_probe::store::{SqliteStore, Store};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

/// The lab's own scenarios the daemon probes as they are.
const STEADY: [&str; 4] = ["honest-v2", "overcharge", "wrong-payee", "solana-honest-v2"];

pub fn run(days: Option<u32>, state_dir: Option<PathBuf>) -> Result<i32> {
    x402_probe::install_crypto_provider();
    // A simulated run logs warnings only (its runs are summarised at the end); `RUST_LOG` wins.
    service::init_logs(if days.is_some() { "warn" } else { "info" });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(run_async(days, state_dir))
}

async fn run_async(days: Option<u32>, state_dir: Option<PathBuf>) -> Result<i32> {
    let state = new_state_dir(state_dir, "x402-probe-lab", "ledger.sqlite", "a ledger")?;

    // Simulated days start at today's UTC midnight, so each printed row is a whole day and the
    // timelines' day offsets fall on the same dates whatever the hour the run starts (from the
    // hour alone, a run started at 23:00 had a first "day" of one hour). Real time starts at this
    // hour. Paid calls' authorization windows run on the wall clock either way.
    let now = SystemClock.now_ms();
    let start = now - now.rem_euclid(if days.is_some() { DAY } else { HOUR });
    let manual = Arc::new(ManualClock::at_ms(start));
    let lab_clock: LabClock = match days {
        Some(_) => {
            let c = manual.clone();
            Arc::new(move || c.now_ms())
        }
        None => Arc::new(|| SystemClock.now_ms()),
    };
    let LabUp {
        lab,
        subjects,
        control,
        mcp,
    } = lab_up(start, lab_clock).await?;

    ReporterKey::generate(&state.join("reporter.key")).context("making a reporter key")?;
    let text = config_text(&lab, &state, &subjects, &control, days.is_some());
    let config_path = state.join("daemon.toml");
    std::fs::write(&config_path, &text)
        .with_context(|| format!("writing {}", config_path.display()))?;
    let config = DaemonConfig::read(&config_path)?;

    println!(
        "lab up: chain {} at {}, {} subjects, control {control}",
        lab.chain_id,
        lab.rpc_url(),
        subjects.len()
    );
    for (name, url) in &subjects {
        println!("  {name:<18} {url}");
    }
    println!("state directory: {}", state.display());

    match days {
        Some(days) => {
            let until_ms = start + i64::from(days) * DAY;
            println!("running {days} simulated days...");
            let started = std::time::Instant::now();
            Daemon::run_simulated(config, Some(config_path), manual, until_ms, 0).await?;
            println!(
                "{days} simulated days in {:.1} s of real time\n",
                started.elapsed().as_secs_f64()
            );
            print_timelines(&state, &subjects)?;
        }
        None => {
            let (tx, rx) = tokio::sync::mpsc::channel(8);
            let signals = service::forward_signals(tx).context("listening for signals")?;
            println!(
                "the daemon runs until Ctrl-C (free runs every 60 s per subject, one log line each)"
            );
            let daemon = Daemon::open(config, Some(config_path), TimeSource::System).await?;
            if let Some(addr) = daemon.api_addr() {
                println!("API: http://{addr}/v1/subjects  (x402-probe status --api http://{addr})");
            }
            tokio::spawn(signals);
            daemon.run(rx).await?;
        }
    }
    drop(mcp);
    println!(
        "\nthe ledger is kept: x402-probe ledger verify --state-dir {0}\n\
         \x20                   x402-probe recompute --ledger {0}",
        state.display()
    );
    Ok(0)
}

/// The state directory given (or a new one named `prefix-PID-MS` in the temporary directory),
/// refused when `marker` is in it (a previous run's `what`), and made ours alone (0700, refused
/// if others can write it) before anything is put in it.
pub(crate) fn new_state_dir(
    given: Option<PathBuf>,
    prefix: &str,
    marker: &str,
    what: &str,
) -> Result<PathBuf> {
    let state = match given {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!(
            "{prefix}-{}-{}",
            std::process::id(),
            SystemClock.now_ms()
        )),
    };
    if state.join(marker).exists() {
        anyhow::bail!(
            "{} already holds {what}: give a new --state-dir (the lab is new each time)",
            state.display()
        );
    }
    x402_probe::state_dir::open_state_dir(&state)?;
    Ok(state)
}

/// The lab the daemon probes: the steady scenarios, the endpoints that change over time, a paid MCP
/// tool and the control endpoint.
pub(crate) struct LabUp {
    pub lab: Lab,
    /// `(name, url)` of each subject.
    pub subjects: Vec<(String, String)>,
    pub control: String,
    pub mcp: x402_lab::mcp::RunningMcp,
}

/// Brings the lab up, its changing endpoints on `lab_clock` from `start`.
pub(crate) async fn lab_up(start: i64, lab_clock: LabClock) -> Result<LabUp> {
    let mut scenarios: Vec<String> = STEADY.iter().map(|s| s.to_string()).collect();
    scenarios.push("control".into());
    let mut lab = Lab::start_with(LabOptions {
        scenarios: Some(scenarios),
        ..LabOptions::default()
    })
    .await
    .context("starting the lab (did `npm ci` run?)")?;
    let mut subjects: Vec<(String, String)> = Vec::new();
    for name in STEADY {
        let url = lab
            .endpoint(name)
            .with_context(|| format!("the lab has no {name} scenario"))?
            .url
            .clone();
        subjects.push((name.to_string(), url));
    }
    for (name, timeline) in timelines(start) {
        let url = lab
            .spawn_variant("honest-v2", name, timeline, lab_clock.clone())
            .await
            .with_context(|| format!("serving the {name} endpoint"))?;
        subjects.push((name.to_string(), url));
    }
    // One paid MCP tool, rated like an endpoint (`mcp+http://.../mcp#get_weather`).
    let mcp = lab
        .start_mcp(x402_lab::mcp::McpKind::Honest)
        .await
        .context("serving the MCP server")?;
    subjects.push((
        "mcp-honest".to_string(),
        format!("{}#{}", mcp.subject(), x402_lab::mcp::PAID_TOOL),
    ));
    let control = lab
        .endpoint("control")
        .context("the lab has no control scenario")?
        .url
        .clone();
    Ok(LabUp {
        lab,
        subjects,
        control,
        mcp,
    })
}

/// The endpoints that change over time, relative to `start`.
fn timelines(start: i64) -> Vec<(&'static str, Timeline)> {
    let day = |d: f64| start + (d * DAY as f64) as i64;
    let noted = serde_json::json!({
        "at": rfc3339_ms(day(2.0)), "kind": "price_change", "amount": "30000",
        "text": "New price from day 2: 0.03 per call.",
    });
    vec![
        (
            "price-rise",
            Timeline {
                price: vec![(day(2.0), 30_000)],
                ..Timeline::default()
            },
        ),
        (
            "price-rise-noted",
            Timeline {
                price: vec![(day(2.0), 30_000)],
                notes: vec![(day(2.0), noted)],
                ..Timeline::default()
            },
        ),
        (
            "outage-30h",
            Timeline {
                down: vec![(day(1.0), day(1.0) + 30 * HOUR)],
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
    ]
}

/// The daemon's configuration for the lab: a free run every 3 hours on simulated days (every
/// minute in real time), a paid call once a subject's free evidence is verdict-ready and then
/// daily, small caps.
fn config_text(
    lab: &Lab,
    state: &Path,
    subjects: &[(String, String)],
    control: &str,
    simulated: bool,
) -> String {
    let (free_every, control_every, paid_every, gap) = if simulated {
        (3 * 3600, 600, 86_400, 1000)
    } else {
        (60, 30, 600, 1000)
    };
    let mut config = LabDaemonConfig::new(state);
    config.written_by = "Written by `x402-probe daemon --lab` for the lab it started.".into();
    config.free_every_secs = free_every;
    config.per_host_gap_ms = gap;
    config.paid_min_interval_secs = paid_every;
    config.control = Some((control.to_string(), control_every));
    config.subjects = subjects
        .iter()
        .map(|(_, url)| (url.clone(), "weather".to_string()))
        .collect();
    // The HTTP API (`x402-probe status`, /v1/...): served in real time only.
    config.tail = format!("[api]\nenabled = {}\n", !simulated);
    config.text(lab)
}

/// Each subject's daily score (the last of each day): score, band, grade, verdict.
fn print_timelines(state: &Path, subjects: &[(String, String)]) -> Result<()> {
    let store = SqliteStore::open(state)?;
    for (name, url) in subjects {
        println!("{name} ({url})");
        println!("  {:<10} {}", "day", score_header());
        for row in store.daily_scores(url)? {
            let doc: Value = serde_json::from_slice(&row.document)?;
            println!("  {:<10} {}", row.day, score_cells(&doc));
        }
        println!();
    }
    Ok(())
}

/// The columns [`score_cells`] writes.
pub(crate) fn score_header() -> String {
    format!(
        "{:>6} {:>15}  {:<5} {:<12} {:<11} {:<14} checks with fails (count)",
        "score", "band", "grade", "verdict", "status", "binding gates"
    )
}

/// A score document's row: score, band, grade, verdict, status, binding gates, checks that failed.
pub(crate) fn score_cells(doc: &Value) -> String {
    let band = &doc["band"];
    let grade = doc["grade"]
        .as_str()
        .map(str::to_string)
        .or_else(|| doc["provisional_grade"].as_str().map(|g| format!("({g})")))
        .unwrap_or_else(|| "-".into());
    let gates: Vec<&str> = doc["gates"]
        .as_array()
        .map(|gates| {
            gates
                .iter()
                .filter(|g| g["binding"] == true)
                .filter_map(|g| g["flag"].as_str())
                .collect()
        })
        .unwrap_or_default();
    let fails: Vec<String> = doc["dimensions"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|d| d["checks"].as_array().into_iter().flatten())
        .filter_map(|c| {
            let n = c["fails"].as_u64().filter(|n| *n > 0)?;
            Some(format!("{} {n}", c["id"].as_str()?))
        })
        .collect();
    format!(
        "{:>6.1} {:>15}  {:<5} {:<12} {:<11} {:<14} {}",
        doc["capped_score"].as_f64().unwrap_or(f64::NAN),
        format!(
            "[{:.1}, {:.1}]",
            band["low"].as_f64().unwrap_or(f64::NAN),
            band["high"].as_f64().unwrap_or(f64::NAN)
        ),
        grade,
        doc["verdict"]["verdict"].as_str().unwrap_or("?"),
        doc["verdict"]["status"].as_str().unwrap_or("?"),
        if gates.is_empty() {
            "-".to_string()
        } else {
            gates.join(", ")
        },
        if fails.is_empty() {
            "-".to_string()
        } else {
            fails.join(", ")
        }
    )
}
