//! `x402-probe-lab simulate --out DIR [--subjects N] [--days D] [--seed S]`: the real daemon against
//! a simulated population (issue 11).
//!
//! The lab serves one endpoint per member of a seeded population (`x402_lab::population`), each
//! following its hidden truth on the simulated clock: price and payTo over time (with or without
//! notes), outages, a failure share, latency, an injected description and paid-path misbehaviours
//! switched on at their onsets. The daemon runs on that clock with its real scheduler, probes, paid
//! calls on the lab chain, ledger and scorer; its configuration holds only the endpoints' URLs and
//! categories, with provenance `synthetic_fixture`. Afterwards the simulator writes the labels
//! (`labels.json`, from the truth, never from the daemon) and the truth itself (`truth.json`, for
//! reports; never given to the daemon).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;
use x402_lab::daemon_config::{LabDaemonConfig, PayCaps};
use x402_lab::dynamic::{LabClock, rfc3339_ms};
use x402_lab::population::{CallFailure, DAY_MS, HORIZON_DAYS, Population, Truth};
use x402_lab::{Lab, LabOptions};

use x402_probe::calibrate::labels::{
    DayLabel, FORMAT, FailureKind, LabelSource, LabelsDocument, SubjectLabels,
};
use x402_probe::clock::{Clock, ManualClock, SystemClock};
use x402_probe::cmd::simulate::Args;
use x402_probe::config::DaemonConfig;
use x402_probe::daemon::Daemon;
use x402_probe::evidence::run::Provenance;
use x402_probe::evidence::usd::Usd;
use x402_probe::ledger::key::ReporterKey;
use x402_probe::ledger::record::RecordKind;
use x402_probe::spend::{ReservationState, SpendStore};
use x402_probe::store::{SqliteStore, Store};

/// A free run every 12 hours of 2 samples: the rubric's 8 probes over 3 days are there on
/// day 3. The wall time is about the number of runs times one run's time, divided by how many
/// overlap (`--lookahead-secs`); 200 endpoints over 60 days are 24,000 free runs at this
/// cadence (README: measured).
const FREE_EVERY_SECS: u64 = 12 * 3600;
const SAMPLES: u32 = 2;
/// At most one paid call a day per endpoint (the scheduler pays where a call settles a
/// verdict or can move it).
const PAID_MIN_INTERVAL_SECS: u64 = 86_400;
/// The control endpoint: once an hour.
const CONTROL_EVERY_SECS: u64 = 3600;
/// The spend caps' ceiling (the configuration's range).
const CAP_CEILING_USD: f64 = 1000.0;

pub fn run(args: Args) -> Result<i32> {
    x402_probe::install_crypto_provider();
    x402_probe::cmd::service::init_logs("warn");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(simulate(args))
}

async fn simulate(args: Args) -> Result<i32> {
    let started = Instant::now();
    let state = args.out.join("state");
    if state.exists() {
        anyhow::bail!(
            "{} already holds a state: give a new --out (a simulation starts from nothing)",
            args.out.display()
        );
    }
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&state)
            .with_context(|| format!("creating {}", state.display()))?;
    }

    let population = Population::generate(args.seed, args.subjects, args.days);
    // Day 0 is today's UTC day: the store's daily rows and the labels share day keys.
    let now = SystemClock.now_ms();
    let start = now - now.rem_euclid(DAY_MS);
    let until_ms = start + i64::from(args.days) * DAY_MS;
    let caps = Caps::for_population(&population);

    let mut lab = Lab::start_with(LabOptions {
        scenarios: Some(vec!["control".into()]),
        payer_funds: caps.funds_base_units(),
        ..LabOptions::default()
    })
    .await
    .context("starting the lab (did `npm ci` run?)")?;
    let manual = Arc::new(ManualClock::at_ms(start));
    let lab_clock: LabClock = {
        let c = manual.clone();
        Arc::new(move || c.now_ms())
    };
    let mut urls = Vec::with_capacity(population.subjects.len());
    for truth in &population.subjects {
        let url = lab
            .spawn_variant(
                truth.base.scenario(),
                &format!("sim-{}", truth.index),
                truth.timeline(start, args.latency_scale),
                lab_clock.clone(),
            )
            .await
            .with_context(|| format!("serving endpoint {}", truth.index))?;
        urls.push(url);
    }
    let control = lab
        .endpoint("control")
        .context("the lab has no control scenario")?
        .url
        .clone();

    ReporterKey::generate(&state.join("reporter.key")).context("making a reporter key")?;
    let config_path = state.join("daemon.toml");
    let text = config_text(&lab, &state, &population, &urls, &control, &caps);
    std::fs::write(&config_path, &text)
        .with_context(|| format!("writing {}", config_path.display()))?;
    let config = DaemonConfig::read(&config_path)?;
    println!(
        "simulating {} endpoints over {} days (seed {}), from {}; the daemon's state: {}",
        args.subjects,
        args.days,
        args.seed,
        rfc3339_ms(start),
        state.display()
    );
    if caps.per_day_usd > CAP_CEILING_USD {
        println!(
            "note: daily paid calls could cost {:.2} USD, above the {CAP_CEILING_USD} USD cap: \
             calls past it are refused (their paid checks unmeasured)",
            caps.per_day_usd
        );
    }

    let lookahead_ms = i64::from(args.lookahead_secs) * 1000;
    let shown = SimulatedHours::show(&manual, start, args.days, args.quiet);
    let ran =
        Daemon::run_simulated(config, Some(config_path), manual, until_ms, lookahead_ms).await;
    shown.finish(ran.is_ok());
    ran?;
    drop(lab);
    let daemon_time = started.elapsed();

    let labels = labels_document(&population, &urls, start);
    let labels_path = args.out.join("labels.json");
    std::fs::write(&labels_path, labels.to_bytes()?)
        .with_context(|| format!("writing {}", labels_path.display()))?;
    let truth_path = args.out.join("truth.json");
    let mut truth = serde_json::to_vec_pretty(&TruthDocument::new(
        &population,
        &urls,
        start,
        args.latency_scale,
    ))?;
    truth.push(b'\n');
    std::fs::write(&truth_path, truth)
        .with_context(|| format!("writing {}", truth_path.display()))?;

    let summary = Summary::read(&state)?;
    let (failing, labelled) = labels
        .subjects
        .iter()
        .flat_map(|s| &s.days)
        .fold((0u64, 0u64), |(f, n), d| (f + u64::from(d.fails), n + 1));
    println!("subjects            {}", args.subjects);
    println!("days                {}", args.days);
    println!(
        "runs                {} ({} not synthetic_fixture)",
        summary.runs, summary.foreign
    );
    println!(
        "paid calls          {} settled (of {} reserved)",
        summary.paid_calls, summary.reserved
    );
    println!("USD spent           {}", summary.spent);
    println!(
        "wall time           {:.1} s (daemon and lab {:.1} s)",
        started.elapsed().as_secs_f64(),
        daemon_time.as_secs_f64()
    );
    println!(
        "store               {:.1} MB ({} bytes)",
        summary.store_bytes as f64 / 1e6,
        summary.store_bytes
    );
    println!(
        "labelled failing    {:.3} of {labelled} subject-days",
        if labelled == 0 {
            0.0
        } else {
            failing as f64 / labelled as f64
        }
    );
    println!(
        "written             {}, {}",
        labels_path.display(),
        truth_path.display()
    );
    Ok(0)
}

/// The simulated clock's progress on stderr (`x402_probe::progress`): simulated hours done of
/// the run's, read from the clock every [`SimulatedHours::EVERY`] by a thread of its own (the
/// daemon's loop moves the clock and knows nothing of it).
struct SimulatedHours {
    /// [`Self::RUNNING`], [`Self::FAILED`] or [`Self::COMPLETED`].
    state: Arc<std::sync::atomic::AtomicU8>,
    thread: std::thread::JoinHandle<()>,
}

impl SimulatedHours {
    const EVERY: std::time::Duration = std::time::Duration::from_millis(100);
    const HOUR_MS: i64 = 3_600_000;
    const RUNNING: u8 = 0;
    const FAILED: u8 = 1;
    const COMPLETED: u8 = 2;

    fn show(clock: &Arc<ManualClock>, start: i64, days: u32, quiet: bool) -> SimulatedHours {
        use std::sync::atomic::Ordering::SeqCst;
        let state = Arc::new(std::sync::atomic::AtomicU8::new(Self::RUNNING));
        let (clock, seen) = (clock.clone(), state.clone());
        let thread = std::thread::spawn(move || {
            let mode = x402_probe::progress::Mode::for_stderr(quiet);
            let total = u64::from(days) * 24;
            let mut progress = x402_probe::progress::Progress::new("simulated hours", total, mode);
            let hours = || ((clock.now_ms() - start) / Self::HOUR_MS).max(0) as u64;
            while seen.load(SeqCst) == Self::RUNNING {
                progress.set(hours());
                std::thread::sleep(Self::EVERY);
            }
            // The clock stops at the last run due before the end: a completed simulation has
            // run every simulated hour.
            progress.set(if seen.load(SeqCst) == Self::COMPLETED {
                total
            } else {
                hours()
            });
            progress.finish();
        });
        SimulatedHours { state, thread }
    }

    fn finish(self, completed: bool) {
        let state = if completed {
            Self::COMPLETED
        } else {
            Self::FAILED
        };
        self.state.store(state, std::sync::atomic::Ordering::SeqCst);
        // The thread only writes progress: if it panicked, the simulation's result stands.
        let _ = self.thread.join();
    }
}

/// What the caps must allow for a paid call a day per endpoint. Caps and authorization
/// windows run on the wall clock, and a simulation runs its days in minutes: every paid call
/// of the run falls in one 24 hours of the caps.
struct Caps {
    per_call_usd: f64,
    per_subject_usd: f64,
    per_day_usd: f64,
}

impl Caps {
    fn for_population(population: &Population) -> Caps {
        let calls = (i64::from(population.days) * DAY_MS / (PAID_MIN_INTERVAL_SECS as i64 * 1000)
            + 1) as f64;
        let most = |t: &Truth| {
            t.price_changes
                .iter()
                .map(|c| c.amount)
                .chain([t.price])
                .max()
                .unwrap_or(t.price) as f64
                / 1e6
        };
        let per_call = population.subjects.iter().map(most).fold(0.0, f64::max);
        let per_day: f64 = population.subjects.iter().map(|t| most(t) * calls).sum();
        Caps {
            // Whole cents above the dearest quote.
            per_call_usd: (per_call * 100.0).ceil() / 100.0 + 0.01,
            per_subject_usd: (per_call * calls).ceil().max(1.0),
            per_day_usd: per_day.ceil().max(1.0),
        }
    }

    /// The payer's float: three times the most the caps allow (an overcharging facilitator
    /// pulls three times the quote from the allowance), and the lab's default at least.
    fn funds_base_units(&self) -> u64 {
        let usd = (self.per_day_usd.min(CAP_CEILING_USD) * 3.0).max(1000.0);
        (usd * 1e6) as u64
    }
}

fn config_text(
    lab: &Lab,
    state: &Path,
    population: &Population,
    urls: &[String],
    control: &str,
    caps: &Caps,
) -> String {
    let mut config = LabDaemonConfig::new(state);
    config.written_by =
        "Written by `x402-probe simulate` for the lab it started: only URLs and categories.".into();
    config.checkpoint_every_secs = 86_400;
    config.samples = u64::from(SAMPLES);
    config.provenance = "synthetic_fixture".into();
    config.free_every_secs = FREE_EVERY_SECS;
    config.paid_min_interval_secs = PAID_MIN_INTERVAL_SECS;
    config.pay = Some(PayCaps {
        per_call: format!("{:.2}", caps.per_call_usd),
        per_subject_per_day: format!("{:.2}", caps.per_subject_usd.min(CAP_CEILING_USD)),
        per_day: format!("{:.2}", caps.per_day_usd.min(CAP_CEILING_USD)),
    });
    config.control = Some((control.to_string(), CONTROL_EVERY_SECS));
    config.subjects = population
        .subjects
        .iter()
        .zip(urls)
        .map(|(truth, url)| (url.clone(), truth.category.name().to_string()))
        .collect();
    config.tail = "[api]\nenabled = false\n".into();
    config.text(lab)
}

fn failure_kind(f: CallFailure) -> FailureKind {
    match f {
        CallFailure::NotOk => FailureKind::NotOk,
        CallFailure::InvalidOutput => FailureKind::InvalidOutput,
        CallFailure::Overcharged => FailureKind::Overcharged,
        CallFailure::WrongPayee => FailureKind::WrongPayee,
        CallFailure::ChargedTwice => FailureKind::ChargedTwice,
        CallFailure::ChargedWithoutDelivery => FailureKind::ChargedWithoutDelivery,
    }
}

/// `YYYY-MM-DD` (UTC) of a time in ms: the store's day keys.
fn day_key(ms: i64) -> String {
    rfc3339_ms(ms).chars().take(10).collect()
}

/// The labels, keyed by the daemon's subject ids (the URLs), sorted.
fn labels_document(population: &Population, urls: &[String], start: i64) -> LabelsDocument {
    let mut subjects: Vec<SubjectLabels> = population
        .subjects
        .iter()
        .zip(urls)
        .map(|(truth, url)| SubjectLabels {
            subject: url.clone(),
            days: population
                .labels(truth.index, HORIZON_DAYS)
                .into_iter()
                .map(|d| DayLabel {
                    day: day_key(start + i64::from(d.day) * DAY_MS),
                    fails: d.fails,
                    calls: d.calls,
                    failure_rate: Some(d.failure_rate),
                    failures: d.failures.into_iter().map(failure_kind).collect(),
                })
                .collect(),
        })
        .collect();
    subjects.sort_by(|a, b| a.subject.cmp(&b.subject));
    LabelsDocument {
        format: FORMAT.into(),
        provenance: Provenance::SyntheticFixture,
        source: LabelSource::Simulator {
            seed: population.seed,
            population: population.subjects.len() as u32,
        },
        horizon_days: HORIZON_DAYS,
        subjects,
    }
}

/// `truth.json`: each subject's hidden truth under its URL (for reports, never the daemon).
#[derive(Serialize)]
struct TruthDocument<'a> {
    format: &'static str,
    provenance: Provenance,
    seed: u64,
    days: u32,
    /// Day 0's start (UTC midnight); the truth's days count from it.
    start: String,
    latency_scale: f64,
    subjects: Vec<TruthOf<'a>>,
}

#[derive(Serialize)]
struct TruthOf<'a> {
    subject: &'a str,
    #[serde(flatten)]
    truth: &'a Truth,
}

impl<'a> TruthDocument<'a> {
    fn new(population: &'a Population, urls: &'a [String], start: i64, latency_scale: f64) -> Self {
        TruthDocument {
            format: "x402-probe.simulated-truth/1",
            provenance: Provenance::SyntheticFixture,
            seed: population.seed,
            days: population.days,
            start: rfc3339_ms(start),
            latency_scale,
            subjects: population
                .subjects
                .iter()
                .zip(urls)
                .map(|(truth, url)| TruthOf {
                    subject: url,
                    truth,
                })
                .collect(),
        }
    }
}

/// What the daemon left: runs (and any not marked synthetic), paid calls, spend, store size.
struct Summary {
    runs: u64,
    foreign: u64,
    paid_calls: u64,
    reserved: u64,
    spent: Usd,
    store_bytes: u64,
}

impl Summary {
    fn read(state: &Path) -> Result<Summary> {
        let store = SqliteStore::open(state)?;
        // The stored rows as they are (no parsing): a run's canonical body states its
        // provenance once, at the top level of the record.
        let marked = br#""provenance":"synthetic_fixture""#;
        let (mut runs, mut foreign) = (0u64, 0u64);
        store.scan(0, &mut |e| {
            if e.kind == RecordKind::Run {
                runs += 1;
                foreign += u64::from(!e.body.windows(marked.len()).any(|w| w == marked));
            }
            Ok(())
        })?;
        drop(store);
        let spend = SpendStore::open(state)?;
        let reservations = spend.reservations()?;
        let reserved = reservations.len() as u64;
        let paid_calls = reservations
            .iter()
            .filter(|r| r.state == ReservationState::Settled)
            .count() as u64;
        let spent = reservations
            .iter()
            .filter(|r| r.state == ReservationState::Settled)
            .try_fold(Usd::ZERO, |sum, r| sum.checked_add(r.cost))
            .context("adding up the spend")?;
        let mut store_bytes = 0;
        for entry in std::fs::read_dir(state)? {
            let meta = entry?.metadata()?;
            if meta.is_file() {
                store_bytes += meta.len();
            }
        }
        Ok(Summary {
            runs,
            foreign,
            paid_calls,
            reserved,
            spent,
            store_bytes,
        })
    }
}
