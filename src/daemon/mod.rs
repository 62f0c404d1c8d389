//! `x402-probe daemon`: keeps probing many subjects, keeps every observation in the ledger, and
//! scores each subject from its whole history.
//!
//! The loop: subjects (from the config and the catalogues it reads) each have a due time; due
//! runs start under a global concurrency limit and per-host politeness; a run records itself and
//! rescores its subject (`pipeline`); a control probe with a known answer opens and closes our own
//! outage windows; the ledger is signed at checkpoints. Time comes from a [`Clock`]: the system's,
//! or a simulated one that jumps to the next due time whenever nothing is in flight (days of a
//! subject's life in seconds, with real HTTP and a real chain).

pub mod admin;
pub mod catalogue;
pub(crate) mod leased;
pub mod notify;
pub mod pipeline;
pub mod recompute;
pub mod reload;
pub mod schedule;
pub(crate) mod scorer;
pub mod scoring;
pub mod storage;
pub mod subject_state;
#[cfg(test)]
mod tests;
pub(crate) mod writer;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::task::JoinSet;

use crate::checks::history::Declared;
use crate::clock::{Clock, ManualClock, Member, SharedSimulatedClock};
use crate::config::{DaemonConfig, KeySourceConfig, WalletSource};
use crate::control::{Command, LoopStatus, NEXT_DUE_SHOWN};
use crate::evidence::paid::RefundPlan;
use crate::evidence::run::Provenance;
use crate::ledger::key::ReporterKey;
use crate::ledger::record::{
    CatalogueRead, OutageOf, OutageRecord, Record, RecordKind, SubjectChange, SubjectRecord,
};
use crate::metrics::ReloadOutcome;
use crate::probe::paid::PolicySource;
use crate::probe::rpc::Rpc;
use crate::probe::solana_rpc::SolanaRpc;
use crate::solana_wallet::SolanaWallet;
use crate::spend::{AllowedAsset, PayPolicy, SpendStore};
use crate::store::{SqliteStore, Store, SubjectRow, SubjectState};
use crate::wallet::Wallet;

use pipeline::{CurrentRevision, PayParts, Population, RpcRead, RunDone, Shared};
use schedule::{
    Cadence, Frontier, SimulatedLoop, SimulatedStep, due_after_restart, next_free_ms, paid_wanted,
    simulated_step,
};
use writer::{LoopWrite, Write, Writer};

/// How often the value population is refreshed (a score names the population it read).
pub const POPULATION_EVERY_MS: i64 = 3_600_000;
/// How long a stop waits for runs in flight before abandoning them (a paid call's reservation is
/// durable before anything is signed, so an abandoned call is reconciled at the next start).
pub const STOP_GRACE: Duration = Duration::from_secs(8);
/// After a paid call, and after a reconciliation that left reservations open (unused but still
/// valid, or the RPC unreadable), the next reconciliation comes this long after, doubling while
/// they stay open up to [`RECONCILE_RETRY_MAX_MS`]: an open reservation is revisited whether or
/// not another paid call comes.
pub const RECONCILE_RETRY_MIN_MS: i64 = 60_000;
pub const RECONCILE_RETRY_MAX_MS: i64 = 3_600_000;

/// Runs in a row (of any subjects) whose read of our RPC failed, with no good read between, before
/// the daemon opens an RPC outage window. One failure is usually a blip (a timeout, a node
/// restart) and that run's C3 is `unmeasured` already; three in a row, across the subjects the
/// schedule interleaves, is our node being out rather than one subject's asset, and a single good
/// read from any subject resets the count (and closes an open window).
pub const RPC_OUTAGE_AFTER_RUNS: u32 = 3;

/// What the daemon is asked to do from outside: stop, or reload its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Stop,
    Reload,
}

/// The daemon's time, and whether it is simulated.
#[derive(Clone)]
pub enum TimeSource {
    /// The system clock; the loop sleeps until the next due time.
    System,
    /// A simulated clock: whenever nothing is in flight, it jumps to the next due time; the run
    /// ends once the next due time is past `until_ms`.
    Simulated {
        clock: Arc<ManualClock>,
        until_ms: i64,
        /// With runs in flight (and no paid call among them), the clock may also jump to the next
        /// due time when it is at most this far past the instant the oldest of them started, so
        /// up to `concurrency` runs overlap instead of going one at a time; a run in flight then
        /// sees the clock move by at most this much. 0: only when nothing is in flight (each run
        /// alone at its instant).
        lookahead_ms: i64,
    },
}

/// A scheduled piece of work.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Job {
    Free(String),
    Control,
    /// A catalogue, by its URL (a reload may reorder, add or drop catalogues meanwhile).
    Catalogue(String),
    Checkpoint,
    Population,
    Refund(String),
    /// Resolve open reservations on chain (at the start, then while any stay open).
    Reconcile,
    /// On PostgreSQL: offer, forget and take leased free runs (`leased.rs`).
    Lease,
}

struct Subject {
    row: SubjectRow,
    runs: u64,
    /// No paid call before this time: the last one was declined by a spend limit of ours
    /// ([`schedule::SPEND_LIMIT_WAIT_MS`]). Not stored: a restart tries once more.
    paid_held_until_ms: Option<i64>,
}

impl Subject {
    fn new(row: SubjectRow) -> Subject {
        Subject {
            row,
            runs: 0,
            paid_held_until_ms: None,
        }
    }
}

/// The running daemon.
pub struct Daemon {
    config_path: Option<PathBuf>,
    config: DaemonConfig,
    /// The configuration file's tables as written when `config` was read (names changed keys).
    config_table: Option<toml::Table>,
    shared: Arc<Shared>,
    /// The ledger's read-only handle (its pool of read connections), for the API.
    reader: Arc<dyn Store>,
    /// Every write goes to the writer thread; its events come back on `writer_events`.
    writer: Writer,
    writer_events: Option<tokio::sync::mpsc::UnboundedReceiver<writer::Event>>,
    key: ReporterKey,
    time: TimeSource,
    cadence: Cadence,
    subjects: BTreeMap<String, Subject>,
    /// Jobs not due yet (and every job but free runs, when due).
    queue: BinaryHeap<Reverse<(i64, u64, Job)>>,
    counter: u64,
    /// Due free runs, in a line per host (politeness: one run per host at once, a gap between).
    frontier: Frontier,
    /// Free runs in flight: what `concurrency` bounds (other jobs take no probe slot).
    probes_in_flight: usize,
    /// The host and subject of each free run's task (a task that panics still gives them back).
    run_tasks: std::collections::HashMap<tokio::task::Id, (String, String)>,
    refunds: BTreeMap<String, (String, RefundPlan)>,
    control_open: Option<i64>,
    control_last_ok: Option<i64>,
    /// Our RPC across runs: failures in a row, the last good read, the open window.
    rpc: RpcHealth,
    /// Subject rows changed by finished runs, not yet sent to the writer.
    dirty: Vec<SubjectRow>,
    /// Subjects with a free run in flight (an admin's run-now or resume must not queue another).
    running: std::collections::BTreeSet<String>,
    /// Catalogues (by URL) with a read in flight.
    catalogues_reading: std::collections::BTreeSet<String>,
    notify: notify::Notifier,
    /// The webhook delivery task, while the loop runs.
    delivery: Option<tokio::task::JoinHandle<()>>,
    /// Requests from the API into the loop; the receiver is taken by `run`.
    commands: tokio::sync::mpsc::Sender<Command>,
    commands_rx: Option<tokio::sync::mpsc::Receiver<Command>>,
    /// The API's listener, bound at open (before READY), served from `run`.
    api_bound: Option<crate::api::Bound>,
    api: Option<crate::api::Running>,
    /// Where the stores live (its filesystem's room decides a full disk).
    state_dir: PathBuf,
    /// Since when (real time) the disk is full, as the writer said: no job starts until it says
    /// a write succeeded again (it keeps the loop's writes meanwhile, and retries them).
    storage_full: Option<std::time::Instant>,
    /// A reconciliation is queued or running.
    reconcile_queued: bool,
    /// The wait before the next one while reservations stay open.
    reconcile_retry_ms: i64,
    /// On PostgreSQL: the free runs are leased work shared with the other vantages.
    leased: Option<leased::Leased>,
    /// Simulated, with other daemons on the same clock (`run_simulated_shared`).
    shared_clock: Option<Arc<SharedSimulatedClock>>,
}

/// Our fixed RPC's health as the runs report it (`RPC_OUTAGE_AFTER_RUNS`).
#[derive(Debug, Default)]
struct RpcHealth {
    failed_in_a_row: u32,
    last_ok_ms: Option<i64>,
    /// The open window's start.
    open: Option<i64>,
}

impl RpcHealth {
    /// One run's read of our RPC: the outage record it opens or closes, if any. Pure: the loop
    /// sends the record to the writer.
    fn step(&mut self, read: &RpcRead, now: i64) -> Option<OutageRecord> {
        match read {
            RpcRead::NotAsked => None,
            RpcRead::Worked => {
                self.failed_in_a_row = 0;
                self.last_ok_ms = Some(now);
                let from_ms = self.open.take()?;
                Some(OutageRecord::Closed {
                    from_ms,
                    to_ms: now,
                    of: OutageOf::Rpc,
                })
            }
            RpcRead::Failed(error) => {
                self.failed_in_a_row = self.failed_in_a_row.saturating_add(1);
                if self.open.is_some() || self.failed_in_a_row < RPC_OUTAGE_AFTER_RUNS {
                    return None;
                }
                // As the control's: the window starts just after the last good read.
                let from_ms = self.last_ok_ms.map_or(now, |t| t + 1);
                self.open = Some(from_ms);
                Some(OutageRecord::Opened {
                    from_ms,
                    cause: format!(
                        "our RPC failed in {} runs in a row: {error}",
                        self.failed_in_a_row
                    ),
                    of: OutageOf::Rpc,
                })
            }
        }
    }
}

/// What one finished job reports to the loop.
enum Done {
    Run {
        host: String,
        done: Box<RunDone>,
        /// The run took the paid slot (one paid call at a time), whether or not it paid.
        paid_slot: bool,
        /// Real time the run took (for its log line; evidence is timed on the run's clock).
        took: std::time::Duration,
    },
    Control(crate::ledger::record::ControlRecord),
    Catalogue(String, catalogue::CatalogueSeen),
    Refund,
    Reconciled(Result<crate::spend::ReconcileReport, crate::spend::SpendError>),
    /// A lease round's free runs taken.
    Leased(
        Result<
            Vec<(crate::store::lease::Lease, crate::store::lease::FreeWork)>,
            crate::store::StoreError,
        >,
    ),
}

/// The daemon's store and its handle for readers: SQLite in the state directory, or the
/// PostgreSQL database of `[store] postgres` (this daemon the vantage `[probe] vantage` in it,
/// its log signed by `key`; a database that cannot be reached fails the start). Runs are stored
/// with their results derived under the daemon's rubric.
fn open_store(
    config: &DaemonConfig,
    state_dir: &std::path::Path,
    key: &ReporterKey,
    rubric: &crate::rubric::Rubric,
) -> Result<(Arc<dyn Store>, Arc<dyn Store>)> {
    match &config.store.postgres {
        None => {
            let sqlite = SqliteStore::open(state_dir)
                .with_context(|| format!("opening the ledger in {}", state_dir.display()))?;
            sqlite.use_rubric(rubric);
            let reader: Arc<dyn Store> = Arc::new(sqlite.reader());
            Ok((Arc::new(sqlite), reader))
        }
        Some(url) => {
            // The spend store, the keys and the API's files stay in the state directory.
            crate::state_dir::open_state_dir(state_dir)?;
            let vantage = config.probe.vantage.to_string();
            let pg =
                crate::store::postgres::PgLedger::open(url.expose(), &vantage, key.public_key())
                    .with_context(|| {
                        format!("opening the store of vantage {vantage:?} in PostgreSQL")
                    })?;
            pg.use_rubric(rubric);
            tracing::info!(url = pg.url(), vantage = %vantage, "the store is PostgreSQL");
            // One pool serves the writer and the readers alike.
            let store: Arc<dyn Store> = Arc::new(pg);
            Ok((store.clone(), store))
        }
    }
}

impl Daemon {
    /// Opens the stores and the keys, and loads the subjects and their schedule.
    pub async fn open(
        config: DaemonConfig,
        config_path: Option<PathBuf>,
        time: TimeSource,
    ) -> Result<Daemon> {
        crate::install_crypto_provider();
        // The text screens' patterns, compiled now rather than by the first run's checks: that
        // took a runtime worker for a fifth of a second while other runs' fetches were timed.
        crate::checks::screen::compile_patterns();
        let clock: Arc<dyn Clock> = match &time {
            TimeSource::System => Arc::new(crate::clock::SystemClock),
            TimeSource::Simulated { clock, .. } => clock.clone(),
        };
        let wall: Arc<dyn Clock> = Arc::new(crate::clock::SystemClock);
        let state_dir = match &config.daemon.state_dir {
            Some(dir) => dir.clone(),
            None => crate::config::default_state_dir()?,
        };
        let key = match &config.daemon.reporter_key {
            KeySourceConfig::KeyFile(path) => ReporterKey::from_key_file(path)?,
            KeySourceConfig::Credential(name) => ReporterKey::from_credential(name)?,
        };
        let prepared = config.probe.prepare()?;
        let (store, reader) = open_store(&config, &state_dir, &key, &prepared.rubric)?;
        let mut free = prepared.free;
        // The daemon reads catalogues on its own schedule; a run never reads one itself.
        free.listing = None;
        free.vantage = config.probe.vantage.to_string();
        let pay = match &config.pay {
            None => None,
            Some(pay) => {
                let wallet = match &pay.wallet {
                    WalletSource::KeyFile(path) => Wallet::from_key_file(path)?,
                    WalletSource::Credential(name) => Wallet::from_credential(name)?,
                };
                // On a shared database every vantage's payments meet one set of caps, one
                // payment per subject at a time and the paid interval (`spend/pg.rs`).
                let spend = Arc::new(match &config.store.postgres {
                    None => SpendStore::open(&state_dir)?,
                    Some(url) => SpendStore::open_postgres(
                        url.expose(),
                        &config.probe.vantage.to_string(),
                        std::time::Duration::from_secs(
                            config.schedule.paid_min_interval_secs.get(),
                        ),
                    )
                    .context("opening the shared spend store in PostgreSQL")?,
                });
                let rpc_url = config
                    .probe
                    .rpc
                    .as_ref()
                    .context("paying needs [probe] rpc")?;
                let rpc = Rpc::new(rpc_url.as_str());
                let (per_call, per_subject, per_day) = pay.caps();
                let mut allowlist = AllowedAsset::canonical_usdc();
                if !config.probe.assets.is_empty() {
                    let chain = rpc.chain_id().await.context(
                        "reading the RPC's chain id (to allow the declared assets on it)",
                    )?;
                    for asset in &config.probe.assets {
                        allowlist.push(AllowedAsset {
                            network: format!("eip155:{chain}"),
                            asset: *asset,
                            decimals: 6,
                            usd_per_unit: "1".parse().expect("1 is a USD amount"),
                        });
                    }
                }
                let mut policy = PayPolicy::new(per_call, per_subject, per_day, allowlist);
                policy
                    .validate()
                    .map_err(|e| anyhow::anyhow!("[pay]: {e}"))?;
                let svm = match &pay.solana_wallet {
                    None => None,
                    Some(source) => {
                        let wallet = match source {
                            WalletSource::KeyFile(path) => SolanaWallet::from_key_file(path)?,
                            WalletSource::Credential(name) => SolanaWallet::from_credential(name)?,
                        };
                        let url = config
                            .probe
                            .solana_rpc
                            .as_ref()
                            .context("paying Solana entries needs [probe] solana_rpc")?;
                        Some((wallet, SolanaRpc::new(url.as_str())))
                    }
                };
                if svm.is_some() {
                    // Circle's USDC of the three clusters, under the same caps.
                    policy.svm_allowlist = crate::spend::AllowedSvmAsset::canonical_usdc();
                }
                Some(PayParts {
                    wallet,
                    svm,
                    spend,
                    policy: Arc::new(RwLock::new(policy)),
                    rpc,
                    options: pay.paid_options(),
                    references: RwLock::new(config.probe.reference_config()),
                })
            }
        };
        // On PostgreSQL, this vantage scores while it holds the scoring role.
        let scorer = (config.store.postgres.is_some())
            .then(|| Arc::new(scorer::ScorerRole::new(&config.schedule)));
        let shared = Arc::new(Shared {
            scorer: scorer.clone(),
            rubric: prepared.rubric,
            free,
            store: store.clone(),
            pay,
            clock,
            wall,
            vantage: config.probe.vantage.to_string(),
            provenance: Provenance::from(config.probe.provenance),
            history_days: config.daemon.history_days.get(),
            outages: Arc::default(),
            outage_fold: Default::default(),
            windows: Default::default(),
            summaries: Arc::default(),
            listings: RwLock::new(BTreeMap::new()),
            revisions: Mutex::new(BTreeMap::new()),
            peer_fetches: Mutex::default(),
            population: RwLock::new(Population::default()),
            metrics: Arc::new(crate::metrics::Metrics::new()),
            webhooks: crate::webhook::Webhooks::from_config(&config.webhooks)?,
            score_changes: Arc::default(),
            start_scores: Arc::default(),
        });
        let s = &config.schedule;
        let leased = match &config.store.postgres {
            None => None,
            Some(url) => {
                // A pool of its own: a busy writer never holds up a heartbeat.
                let pool = crate::store::postgres::PgPool::connect(url.expose())
                    .await
                    .context("connecting the leases to PostgreSQL")?;
                let leases =
                    crate::store::lease::Leases::new(pool, &config.probe.vantage.to_string());
                let lease_for = Duration::from_millis(s.lease_ms.get());
                if let Some(role) = &scorer {
                    // Before any run: a lone vantage scores its first.
                    scorer::take(&leases, role, lease_for).await;
                }
                Some(leased::Leased::new(
                    leases,
                    s.vantages_per_cycle.get() as u32,
                    lease_for,
                    Duration::from_millis(s.heartbeat_ms.get()),
                ))
            }
        };
        let cadence = Cadence {
            free_every_ms: s.free_every_secs.get() as i64 * 1000,
            jitter_percent: s.jitter_percent.get(),
            backoff_max_ms: s.backoff_max_secs.get() as i64 * 1000,
            host_gap_ms: s.per_host_gap_ms.get() as i64,
            paid_min_interval_ms: s.paid_min_interval_secs.get() as i64 * 1000,
        };
        // Bound now, so a port already taken fails the start (exit 2) before any traffic.
        let api_bound = if config.api.enabled {
            Some(crate::api::bind(&config.api)?)
        } else {
            None
        };
        let (commands, commands_rx) = tokio::sync::mpsc::channel(64);
        // The file's tables, to name what a reload changes (the typed values decide whether).
        let config_table = config_path
            .as_deref()
            .and_then(|path| DaemonConfig::read_with_table(path).ok())
            .map(|(_, table)| table);
        let (writer, writer_events) = Writer::start(shared.clone(), key.clone(), state_dir.clone())
            .context("starting the ledger's writer thread")?;
        let mut daemon = Daemon {
            config_table,
            state_dir,
            storage_full: None,
            reader,
            writer,
            writer_events: Some(writer_events),
            commands,
            commands_rx: Some(commands_rx),
            api_bound,
            api: None,
            config_path,
            config,
            shared,
            key,
            notify: notify::Notifier::for_time(&time),
            time,
            cadence,
            subjects: BTreeMap::new(),
            queue: BinaryHeap::new(),
            counter: 0,
            frontier: Frontier::default(),
            probes_in_flight: 0,
            run_tasks: Default::default(),
            refunds: BTreeMap::new(),
            control_open: None,
            control_last_ok: None,
            rpc: RpcHealth::default(),
            dirty: Vec::new(),
            delivery: None,
            running: Default::default(),
            catalogues_reading: Default::default(),
            reconcile_queued: false,
            reconcile_retry_ms: 0,
            leased,
            shared_clock: None,
        };
        daemon.load_state()?;
        Ok(daemon)
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The API's address (bound at open; served once `run` starts), unless `[api]` is disabled.
    pub fn api_addr(&self) -> Option<std::net::SocketAddr> {
        self.api_bound
            .as_ref()
            .map(crate::api::Bound::addr)
            .or(self.api.as_ref().map(crate::api::Running::addr))
    }

    /// Starts serving the API on the listener bound at open.
    fn start_api(&mut self) {
        let Some(bound) = self.api_bound.take() else {
            return;
        };
        // Rubric files by hash: the embedded one, and the configured one when it still has the
        // bytes the daemon scores under.
        let mut rubric_files = vec![crate::rubric::EMBEDDED_DEFAULT.to_vec()];
        if let Some(path) = &self.config.probe.rubric {
            match crate::files::read_regular(path, crate::files::caps::RUBRIC, "a rubric file") {
                Ok(bytes) if crate::evidence::sha256_hex(&bytes) == self.shared.rubric.sha256() => {
                    rubric_files.push(bytes)
                }
                Ok(_) => {
                    tracing::warn!(rubric = %path.display(), "the rubric file changed since the start; the API serves the embedded rubric only")
                }
                Err(e) => tracing::warn!(error = %e, "reading the rubric file for the API failed"),
            }
        }
        let state = crate::api::ApiState::new(
            Arc::new(self.shared.read_side(self.reader.clone())),
            self.key.clone(),
            self.commands.clone(),
            self.config.api.clone(),
            rubric_files,
        );
        self.api = Some(crate::api::spawn(bound, state));
    }

    /// Answers a request from the API.
    fn command(&mut self, command: Command, in_flight: usize) {
        match command {
            Command::Admin(action, reply) => self.admin(action, reply),
            Command::Note(note, reply) => self.note(*note, reply),
            Command::Status(reply) => {
                let mut by_state = BTreeMap::new();
                for s in self.subjects.values() {
                    *by_state
                        .entry(s.row.state.as_str().to_string())
                        .or_insert(0) += 1;
                }
                let mut due: Vec<(i64, String)> = self
                    .queue
                    .iter()
                    .filter_map(|Reverse((due, _, job))| match job {
                        Job::Free(url) => Some((*due, url.clone())),
                        _ => None,
                    })
                    .chain(
                        self.frontier
                            .waiting()
                            .map(|(due, url)| (due, url.to_string())),
                    )
                    .collect();
                due.sort();
                due.truncate(NEXT_DUE_SHOWN);
                let _ = reply.send(LoopStatus {
                    now_ms: self.shared.clock.now_ms(),
                    simulated: matches!(self.time, TimeSource::Simulated { .. }),
                    in_flight,
                    subjects_by_state: by_state,
                    next_due: due,
                });
            }
        }
    }

    /// Subjects, their revisions and outages from the store; the configured subjects synced in;
    /// every job scheduled (overdue subjects spread over one cadence: no burst after a restart).
    fn load_state(&mut self) -> Result<()> {
        let now = self.shared.clock.now_ms();
        let store = self.shared.store.clone();
        // Entries left unsigned by a crash are signed now, before anything new is appended: the
        // unsigned tail is then never longer than one checkpoint interval, which is what
        // `ledger verify --pubkey` holds the ledger to.
        if let Err(e) = store.checkpoint(&self.key, now) {
            tracing::error!(error = %e, "signing the checkpoint at start failed");
        }
        // Revisions: the last of each subject, with what it declared.
        let mut revisions = BTreeMap::new();
        for e in store.entries_of_kind(&[RecordKind::Revision], 0)? {
            if let Record::Revision(r) = e.record {
                let number = r.id.trim_start_matches('r').parse().unwrap_or(0);
                revisions.insert(r.subject.clone(), (r.id, number));
            }
        }
        {
            let mut current = self
                .shared
                .revisions
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            for (subject, (id, number)) in revisions {
                let declared: Option<Declared> = store.latest_declared(&subject)?;
                if let Some(declared) = declared {
                    current.insert(
                        subject,
                        CurrentRevision {
                            id,
                            number,
                            declared,
                        },
                    );
                }
            }
        }
        self.refresh_outages()?;
        for row in store.subjects()? {
            self.subjects.insert(row.url.clone(), Subject::new(row));
        }
        self.retire_other_spellings(now)?;
        self.sync_configured_subjects(now)?;
        self.load_summaries()?;
        let urls: Vec<String> = if self.leased.is_some() {
            // Leased: the first round takes what is due.
            self.want_round(now);
            Vec::new()
        } else {
            self.subjects.keys().cloned().collect()
        };
        for url in urls {
            let subject = &self.subjects[&url];
            if subject.row.state != SubjectState::Active {
                continue;
            }
            let due = due_after_restart(&self.cadence, &url, subject.row.next_free_ms, now);
            self.push(due, Job::Free(url));
        }
        if self.config.control.is_some() {
            self.push(now, Job::Control);
        }
        let catalogues: Vec<String> = self
            .config
            .catalogues
            .iter()
            .map(|c| c.url.to_string())
            .collect();
        for url in catalogues {
            self.push(now, Job::Catalogue(url));
        }
        let checkpoint_ms = self.config.daemon.checkpoint_every_secs.get() as i64 * 1000;
        self.push(now + checkpoint_ms, Job::Checkpoint);
        self.push(now, Job::Population);
        // A paid call cut short (kill -9, power loss, a stop's grace running out) left its
        // reservation open: resolve it now, not only when the next paid call happens.
        if self.shared.pay.is_some() {
            self.reconcile_queued = true;
            self.push(now, Job::Reconcile);
        }
        Ok(())
    }

    /// Each subject's latest published score, read once at the start: the summaries that the
    /// paid-call decisions, the value population and the verdict gauge read are then right from
    /// the first turn after a restart, not only for the subjects scored since. Read from each
    /// latest score row's headline (never the whole document), and handed to the API's view,
    /// when it runs, for its first build (`StartScores`): one read of each subject, not two.
    fn load_summaries(&mut self) -> Result<()> {
        let store = self.shared.store.clone();
        let for_view = self.api_bound.is_some();
        let mut loaded = BTreeMap::new();
        let mut handed = std::collections::HashMap::new();
        // One read of every subject's newest score row, headline, score entry and declaration;
        // a subject whose row does not read as its newest entry's is read again, alone, by the
        // full check, which names what is wrong.
        let mut again = Vec::new();
        store.start_rows(&mut |row| {
            let Some(subject) = self.subjects.get(&row.subject) else {
                return;
            };
            let removed = subject.row.state == SubjectState::Removed;
            if removed && !for_view {
                return;
            }
            let Some(latest) = crate::store::start_headline(&row) else {
                again.push(row.subject);
                return;
            };
            if let Some((_, Ok(headline))) = &latest.latest
                && !removed
            {
                let price = row.declared.and_then(|d| d.price_usd()).unwrap_or_default();
                let summary = scoring::summary_of(
                    &self.shared.rubric,
                    headline,
                    price,
                    &subject.row.category,
                );
                loaded.insert(row.subject.clone(), summary);
            }
            if for_view {
                handed.insert(row.subject, latest);
            }
        })?;
        for url in again {
            let removed = self.subjects[&url].row.state == SubjectState::Removed;
            // Only a row that holds what the ledger published (it feeds paid-call decisions and
            // the value population other subjects' scores read).
            let (latest, mismatches) = crate::store::checked_latest_headline(store.as_ref(), &url)?;
            for broken in &mismatches {
                tracing::error!(subject = %url, error = %broken, "integrity: a stored score row differs from the ledger; it is neither used nor served");
            }
            match &latest.latest {
                Some((_, Ok(headline))) if !removed => {
                    // The price the score read: its subject's latest declaration.
                    let price = pipeline::latest_price(store.as_ref(), &url)?.unwrap_or_default();
                    let category = &self.subjects[&url].row.category;
                    let summary =
                        scoring::summary_of(&self.shared.rubric, headline, price, category);
                    loaded.insert(url.clone(), summary);
                }
                // Not fatal: the subject counts as unscored until its next score.
                Some((_, Err(e))) => tracing::warn!(
                    subject = %url,
                    error = %e,
                    "a stored score does not read back"
                ),
                _ => {}
            }
            if for_view {
                handed.insert(url, latest);
            }
        }
        *self
            .shared
            .summaries
            .write()
            .unwrap_or_else(|p| p.into_inner()) = loaded;
        if for_view {
            self.shared.start_scores.put(handed);
        }
        Ok(())
    }

    fn push(&mut self, due: i64, job: Job) {
        self.counter += 1;
        self.queue.push(Reverse((due, self.counter, job)));
    }

    /// Active subjects recorded under a spelling other than their canonical URL (by a build
    /// before subjects were canonical) are marked removed, their history kept under that
    /// spelling: the configuration or the catalogue that lists the endpoint adds it under its
    /// canonical URL, so one endpoint is never probed (or paid) as two subjects.
    fn retire_other_spellings(&mut self, now: i64) -> Result<()> {
        let mut rows = Vec::new();
        let mut entries = Vec::new();
        for (url, s) in self.subjects.iter_mut() {
            if s.row.state != SubjectState::Active {
                continue;
            }
            let Ok(canonical) = crate::probe::http::canonical_subject_url(url) else {
                continue;
            };
            if &canonical == url {
                continue;
            }
            s.row.state = SubjectState::Removed;
            rows.push(s.row.clone());
            entries.push((
                now,
                Record::Subject(SubjectRecord {
                    subject: url.clone(),
                    at_ms: now,
                    change: SubjectChange::Removed {
                        why: format!("another spelling of {canonical}, its canonical URL"),
                    },
                }),
            ));
        }
        self.write_or_keep(rows, entries);
        Ok(())
    }

    /// Adds configured subjects that are new, and marks removed the ones the configuration no
    /// longer lists (their history stays).
    fn sync_configured_subjects(&mut self, now: i64) -> Result<Vec<String>> {
        if let Some(parts) = &self.shared.pay {
            let mut references = self.config.probe.reference_config();
            for s in &self.config.subjects {
                if let Some(reference) = s.reference {
                    references.link(s.url.as_str(), reference);
                }
            }
            *parts.references.write().unwrap_or_else(|p| p.into_inner()) = references;
        }
        let configured: BTreeMap<String, String> = self
            .config
            .subjects
            .iter()
            .map(|s| {
                (
                    s.url.to_string(),
                    s.category.clone().unwrap_or_else(|| "uncategorised".into()),
                )
            })
            .collect();
        let mut entries = Vec::new();
        let mut rows = Vec::new();
        let mut added = Vec::new();
        for (url, category) in &configured {
            let known = self.subjects.get(url).map(|s| s.row.state);
            // A paused subject stays paused across reloads and restarts (an admin resumes it).
            if matches!(known, Some(SubjectState::Active | SubjectState::Paused)) {
                continue;
            }
            let row = SubjectRow::new_active(url.clone(), category.clone(), "config".into(), now);
            rows.push(row.clone());
            entries.push((
                now,
                Record::Subject(SubjectRecord {
                    subject: url.clone(),
                    at_ms: now,
                    change: SubjectChange::Added {
                        source: "config".into(),
                        category: category.clone(),
                    },
                }),
            ));
            self.subjects.insert(url.clone(), Subject::new(row));
            added.push(url.clone());
        }
        let removed: Vec<String> = self
            .subjects
            .iter()
            .filter(|(url, s)| {
                s.row.source == "config"
                    && s.row.state == SubjectState::Active
                    && !configured.contains_key(*url)
            })
            .map(|(url, _)| url.clone())
            .collect();
        for url in removed {
            if let Some(s) = self.subjects.get_mut(&url) {
                s.row.state = SubjectState::Removed;
                rows.push(s.row.clone());
                entries.push((
                    now,
                    Record::Subject(SubjectRecord {
                        subject: url.clone(),
                        at_ms: now,
                        change: SubjectChange::Removed {
                            why: "no longer in the configuration".into(),
                        },
                    }),
                ));
            }
        }
        // One commit for all the rows (each commit waits for the disk).
        self.write_or_keep(rows, entries);
        Ok(added)
    }

    /// Our outage windows, from the ledger (the control's and those declared by hand, perhaps by
    /// another process), read at the start: what the API shows, and which of our windows are
    /// open. Once the loop runs, it alone opens and closes the control's and the RPC's windows,
    /// and the writer publishes the windows after each write that may change them
    /// ([`writer`]'s `publish_outages`).
    fn refresh_outages(&mut self) -> Result<()> {
        let entries = self
            .shared
            .store
            .entries_of_kind(&[RecordKind::Outage], 0)?;
        let records = outage_records(entries);
        // Each part's window is open when its last opened-or-closed record opened it.
        let last_of = |part: OutageOf| {
            records.iter().rev().find_map(|r| match r {
                OutageRecord::Opened { from_ms, of, .. } if *of == part => Some(Some(*from_ms)),
                OutageRecord::Closed { of, .. } if *of == part => Some(None),
                _ => None,
            })
        };
        if let Some(Some(from_ms)) = last_of(OutageOf::Vantage) {
            self.control_open = Some(from_ms);
        }
        if let Some(Some(from_ms)) = last_of(OutageOf::Rpc) {
            self.rpc.open = Some(from_ms);
        }
        *self
            .shared
            .outages
            .write()
            .unwrap_or_else(|p| p.into_inner()) = scoring::outage_windows(&records);
        Ok(())
    }

    /// Re-reads the configuration file. The subjects, catalogues, control endpoint and spend caps
    /// are applied at once, without losing state; when anything else changed, nothing is applied
    /// and each key that needs a restart is named (`reload.rs`). The outcome is logged and counted.
    fn reload(&mut self) {
        let Some(path) = self.config_path.clone() else {
            return;
        };
        let outcome = match DaemonConfig::read_with_table(&path) {
            Err(e) => {
                tracing::error!(error = %e, "configuration not reloaded: the file does not read; nothing was applied, the running configuration is unchanged");
                ReloadOutcome::Failed
            }
            Ok((config, table)) => {
                let needed = reload::restart_needed(
                    &self.config,
                    &config,
                    self.config_table.as_ref(),
                    Some(&table),
                );
                if !needed.is_empty() {
                    tracing::error!(
                        needs_restart = %needed.join(", "),
                        "configuration not reloaded: these changes take effect only after a restart; nothing was applied, the running configuration is unchanged"
                    );
                    ReloadOutcome::RestartNeeded
                } else {
                    match self.apply_reload(config, table) {
                        Ok(()) => ReloadOutcome::Applied,
                        Err(e) => {
                            tracing::error!(error = %e, "configuration not reloaded: applying it failed");
                            ReloadOutcome::Failed
                        }
                    }
                }
            }
        };
        self.shared.metrics.reload(outcome);
    }

    /// Applies a configuration that differs from the running one only in what a reload applies.
    fn apply_reload(&mut self, config: DaemonConfig, table: toml::Table) -> Result<()> {
        // The caps first, checked before anything changes: a lowered cap holds from here on,
        // for a paid call under way too (it reads them again when it reserves).
        let mut caps_changed = None;
        if let (Some(parts), Some(pay)) = (&self.shared.pay, &config.pay) {
            let (per_call, per_subject, per_day) = pay.caps();
            let mut policy = parts.policy.current();
            let before = (
                policy.max_per_call_usd,
                policy.max_per_subject_per_day_usd,
                policy.max_per_day_usd,
            );
            policy.max_per_call_usd = per_call;
            policy.max_per_subject_per_day_usd = per_subject;
            policy.max_per_day_usd = per_day;
            policy
                .validate()
                .map_err(|e| anyhow::anyhow!("[pay]: {e}"))?;
            if before != (per_call, per_subject, per_day) {
                *parts.policy.write().unwrap_or_else(|p| p.into_inner()) = policy;
                // New caps: a paid call a cap declined may go through now.
                for subject in self.subjects.values_mut() {
                    subject.paid_held_until_ms = None;
                }
                caps_changed = Some(format!(
                    "per call {} -> {per_call}, per subject per day {} -> {per_subject}, per day {} -> {per_day} (USD)",
                    before.0, before.1, before.2
                ));
            }
        }
        let now = self.shared.clock.now_ms();
        let control_before = self.config.control.is_some();
        self.config = config;
        self.config_table = Some(table);
        // Catalogues are known by URL: one no longer configured leaves the queue (a read of it
        // in flight is dropped when it lands), one new is read now.
        let configured: std::collections::BTreeSet<String> = self
            .config
            .catalogues
            .iter()
            .map(|c| c.url.to_string())
            .collect();
        self.queue.retain(
            |Reverse((_, _, job))| !matches!(job, Job::Catalogue(url) if !configured.contains(url)),
        );
        for url in configured {
            self.schedule_catalogue(now, url);
        }
        // A control endpoint where there was none.
        if !control_before && self.config.control.is_some() {
            self.push(now, Job::Control);
        }
        let added = self.sync_configured_subjects(now)?;
        for url in &added {
            // A subject removed and listed again keeps one chain of runs (its old queued run is
            // replaced; with one in flight, that run schedules the next).
            let due = due_after_restart(&self.cadence, url, 0, now);
            self.subject_listed(url, due);
        }
        tracing::info!(
            subjects = self.subjects.len(),
            added = added.len(),
            caps = caps_changed.as_deref().unwrap_or("unchanged"),
            "configuration reloaded"
        );
        Ok(())
    }

    /// Opens a daemon on a simulated clock and runs it to the simulation's end, with no signal
    /// channel (nothing stops it early): `simulate`, `daemon --lab --days`, benchmarks and tests.
    pub async fn run_simulated(
        config: DaemonConfig,
        config_path: Option<PathBuf>,
        clock: Arc<ManualClock>,
        until_ms: i64,
        lookahead_ms: i64,
    ) -> Result<()> {
        let time = TimeSource::Simulated {
            clock,
            until_ms,
            lookahead_ms,
        };
        let daemon = Daemon::open(config, config_path, time).await?;
        let (_tx, rx) = tokio::sync::mpsc::channel(1);
        daemon.run(rx).await
    }

    /// As [`Daemon::run_simulated`], on a clock shared with other daemons (vantages of one
    /// database): it moves only when every one of them waits for it, so none jumps over another's
    /// due work. Each run alone at its instant (no lookahead).
    pub async fn run_simulated_shared(
        config: DaemonConfig,
        config_path: Option<PathBuf>,
        shared: Arc<SharedSimulatedClock>,
        until_ms: i64,
    ) -> Result<()> {
        let member = Member(shared.clone());
        let time = TimeSource::Simulated {
            clock: shared.clock(),
            until_ms,
            lookahead_ms: 0,
        };
        let mut daemon = Daemon::open(config, config_path, time).await?;
        daemon.shared_clock = Some(shared);
        let (_tx, rx) = tokio::sync::mpsc::channel(1);
        let ran = daemon.run(rx).await;
        drop(member);
        ran
    }

    /// Runs until told to stop (or, simulated, until the simulation's end). The loop itself only
    /// sends and receives messages: runs and jobs are tasks, every write goes to the writer
    /// thread, and what the writer has to say (our outage windows, a full disk) comes back as an
    /// event.
    pub async fn run(mut self, mut signals: tokio::sync::mpsc::Receiver<Signal>) -> Result<()> {
        let mut in_flight: JoinSet<Done> = JoinSet::new();
        let mut paid_in_flight = 0usize;
        // Simulated, with a lookahead: the instant the runs in flight began overlapping (the
        // clock never jumps past it by more than the lookahead while they run).
        let mut overlap_from: Option<i64> = None;
        let concurrency = self.config.schedule.concurrency.count();
        let mut commands = self
            .commands_rx
            .take()
            .context("the daemon's loop runs once")?;
        let mut events = self
            .writer_events
            .take()
            .context("the daemon's loop runs once")?;
        if let Some(l) = self.leased.as_mut() {
            l.start_heartbeat();
            if let Some(role) = &self.shared.scorer {
                let writer = self.writer.clone();
                scorer::start(role, l.leases.clone(), writer, l.lease_for, l.beat);
            }
        }
        // The store is open, the schedule built and the API bound and serving: ready.
        self.start_api();
        self.notify_ready();
        if !self.shared.webhooks.is_empty() {
            self.delivery = Some(tokio::spawn(crate::webhook::deliver::run(
                self.shared.clone(),
            )));
        }
        loop {
            // The watchdog's ping comes from this loop, so a loop that hangs stops pinging.
            self.notify_tick(in_flight.len());
            // Outside requests first.
            while let Ok(command) = commands.try_recv() {
                self.command(command, in_flight.len());
            }
            while let Ok(signal) = signals.try_recv() {
                match signal {
                    Signal::Stop => return self.stop(in_flight).await,
                    Signal::Reload => self.reload(),
                }
            }
            // What the writer said, then every job that finished meanwhile; their subjects'
            // rows go to the writer together.
            while let Ok(event) = events.try_recv() {
                if let Err(e) = self.writer_event(event) {
                    return self.stop_failed(in_flight, e).await;
                }
            }
            while let Some(done) = in_flight.try_join_next_with_id() {
                if let Err(e) = self.finish(done, &mut paid_in_flight) {
                    return self.stop_failed(in_flight, e).await;
                }
            }
            self.flush_subjects();
            let now = self.shared.clock.now_ms();
            self.dispatch(now, &mut in_flight, concurrency, &mut paid_in_flight);
            self.shared
                .metrics
                .scheduler(self.queue.len() + self.frontier.len(), in_flight.len());
            let next_due = self.next_due(now);
            let mut finished = None;
            let mut event = None;
            match self.time.clone() {
                // On a simulated clock too, a full disk waits in real time (below).
                TimeSource::Simulated {
                    clock,
                    until_ms,
                    lookahead_ms,
                } if self.storage_full.is_none() => {
                    // `now` is when the runs just dispatched started: the first of an overlap.
                    let overlap_from_ms = if in_flight.is_empty() {
                        overlap_from = None;
                        now
                    } else {
                        *overlap_from.get_or_insert(now)
                    };
                    // Only free runs take a slot: the others in flight count beside them.
                    let others = in_flight.len() - self.probes_in_flight.min(in_flight.len());
                    let step = simulated_step(&SimulatedLoop {
                        now_ms: now,
                        next_due_ms: next_due,
                        until_ms,
                        lookahead_ms,
                        in_flight: in_flight.len(),
                        paid_in_flight,
                        concurrency: concurrency + others,
                        overlap_from_ms,
                    });
                    match step {
                        SimulatedStep::AdvanceTo(due) => {
                            match &self.shared_clock {
                                Some(shared) => shared.advance_to_ms(due).await,
                                None => clock.advance_to_ms(due),
                            }
                            // Let the runs in flight move before the next one starts.
                            if !in_flight.is_empty() {
                                tokio::task::yield_now().await;
                            }
                        }
                        SimulatedStep::AwaitRun => finished = in_flight.join_next_with_id().await,
                        SimulatedStep::End => return self.stop(in_flight).await,
                    }
                }
                _ => {
                    let wait = if self.storage_full.is_some() {
                        // Nothing starts until the writer says a write succeeded again.
                        Duration::from_secs(60)
                    } else {
                        next_due.map_or(Duration::from_secs(60), |due| {
                            Duration::from_millis((due - now).clamp(1, 60_000) as u64)
                        })
                    };
                    let wait = self.notify.wait(wait);
                    tokio::select! {
                        Some(done) = in_flight.join_next_with_id(), if !in_flight.is_empty() => {
                            finished = Some(done);
                        }
                        Some(written) = events.recv() => event = Some(written),
                        Some(command) = commands.recv() => self.command(command, in_flight.len()),
                        signal = signals.recv() => match signal {
                            Some(Signal::Reload) => self.reload(),
                            Some(Signal::Stop) | None => return self.stop(in_flight).await,
                        },
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
            if let Some(event) = event
                && let Err(e) = self.writer_event(event)
            {
                return self.stop_failed(in_flight, e).await;
            }
            if let Some(done) = finished
                && let Err(e) = self.finish(done, &mut paid_in_flight)
            {
                return self.stop_failed(in_flight, e).await;
            }
        }
    }

    /// A failure the loop cannot go on from: stops as a stop does (runs in flight get their
    /// grace, the ledger is signed at its head), then reports it.
    async fn stop_failed(self, in_flight: JoinSet<Done>, error: anyhow::Error) -> Result<()> {
        tracing::error!(error = %format!("{error:#}"), "the daemon's loop stops on an error");
        if let Err(e) = self.stop(in_flight).await {
            tracing::error!(error = %format!("{e:#}"), "stopping after the error failed too");
        }
        Err(error)
    }

    /// When the next job may start: the first timer, or the first host free to take its run.
    fn next_due(&self, now: i64) -> Option<i64> {
        let timer = self.queue.peek().map(|Reverse((due, _, _))| *due);
        match (timer, self.frontier.next_at(now)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// What the writer says: our outage windows read again, a full disk, room again, or a write
    /// of the loop that failed for another reason (the loop stops).
    fn writer_event(&mut self, event: writer::Event) -> Result<()> {
        match event {
            writer::Event::StorageFull(error) => {
                if self.storage_full.is_none() {
                    self.storage_full = Some(std::time::Instant::now());
                    self.shared.metrics.storage_full(true);
                    tracing::error!(
                        state_dir = %self.state_dir.display(),
                        error = %error,
                        retry_secs = storage::RETRY_EVERY.as_secs(),
                        "storage full or the database out of reach: no new runs until a write succeeds again (the API keeps serving; nothing acknowledged is lost)"
                    );
                }
            }
            writer::Event::StorageRoom { full_since } => {
                self.storage_full = None;
                self.shared.metrics.storage_full(false);
                tracing::info!(
                    after_secs = full_since.elapsed().as_secs(),
                    "storage has room again: runs resume"
                );
            }
            writer::Event::Failed(error) => anyhow::bail!("writing the ledger: {error}"),
        }
        Ok(())
    }

    /// Sends the subject rows finished runs changed to the writer, in one write.
    fn flush_subjects(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut self.dirty);
        self.write_or_keep(rows, Vec::new());
    }

    /// Sends rows and plain entries of the loop's own jobs to the writer (which keeps them, in
    /// order, while the disk is full, and writes them first when room returns).
    fn write_or_keep(&mut self, rows: Vec<SubjectRow>, entries: Vec<(i64, Record)>) {
        if rows.is_empty() && entries.is_empty() {
            return;
        }
        self.writer.send(Write::Loop(LoopWrite {
            rows,
            entries,
            ..LoopWrite::default()
        }));
    }

    /// Starts what is due: jobs whose time came (a free run joins its host's line in the
    /// frontier; the other jobs start at once and take no probe slot), then free runs from the
    /// hosts free to take one, while probe slots are left.
    fn dispatch(
        &mut self,
        now: i64,
        in_flight: &mut JoinSet<Done>,
        concurrency: usize,
        paid_in_flight: &mut usize,
    ) {
        if self.storage_full.is_some() {
            // Nothing starts that would write; what is due waits.
            return;
        }
        while let Some(Reverse((due, _, _))) = self.queue.peek() {
            if *due > now {
                break;
            }
            let Some(Reverse((due_ms, _, job))) = self.queue.pop() else {
                break;
            };
            self.start_job(job, due_ms, now, in_flight);
        }
        while self.probes_in_flight < concurrency {
            let Some((host, due_ms, url)) = self.frontier.take(now) else {
                break;
            };
            let Some(subject) = self
                .subjects
                .get(&url)
                .filter(|s| s.row.state == SubjectState::Active)
            else {
                self.frontier.abandon(&host, now);
                continue;
            };
            let summary = self
                .shared
                .summaries
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&url)
                .cloned();
            // One paid call at a time (they share one wallet and lock the spend store).
            let pay = self.shared.pay.is_some()
                && *paid_in_flight == 0
                && paid_wanted(
                    summary.as_ref(),
                    subject.row.last_paid_ms,
                    subject.paid_held_until_ms,
                    now,
                    self.cadence.paid_min_interval_ms,
                    self.config.schedule.pay_from_first_run,
                )
                .is_some();
            if pay {
                *paid_in_flight += 1;
            }
            self.shared.metrics.run_started(now - due_ms);
            let shared = self.shared.clone();
            let writer = self.writer.clone();
            let category = subject.row.category.clone();
            self.running.insert(url.clone());
            self.probes_in_flight += 1;
            let task_of = (host.clone(), url.clone());
            // Leased: only the vantage that takes the subject's paid lease pays.
            let paid_lease = self
                .leased
                .as_ref()
                .filter(|_| pay)
                .map(|l| (l.leases.clone(), l.held.clone(), l.lease_for));
            let paid_interval = Duration::from_millis(self.cadence.paid_min_interval_ms as u64);
            let task = in_flight.spawn(async move {
                let began = std::time::Instant::now();
                let lease = match &paid_lease {
                    Some((leases, held, lease_for)) => {
                        leased::paid_lease(leases, held, &url, paid_interval, *lease_for).await
                    }
                    None => None,
                };
                let pays = pay && (paid_lease.is_none() || lease.is_some());
                let done = pipeline::run_subject(shared, writer, url, category, pays).await;
                if let (Some((leases, held, _)), Some(lease)) = (&paid_lease, lease) {
                    leased::paid_done(leases, held, lease, done.paid).await;
                }
                Done::Run {
                    host,
                    done: Box::new(done),
                    paid_slot: pay,
                    took: began.elapsed(),
                }
            });
            self.run_tasks.insert(task.id(), task_of);
        }
    }

    /// Starts a job whose time came (a free run: into its host's line).
    fn start_job(&mut self, job: Job, due_ms: i64, now: i64, in_flight: &mut JoinSet<Done>) {
        match job {
            Job::Free(url) => {
                let host = host_of(&url);
                self.frontier.push_due(&host, url, due_ms, now);
            }
            Job::Control => {
                let Some(control) = self.config.control.clone() else {
                    return;
                };
                let fetch = self.shared.free.fetch.clone();
                let at = now;
                in_flight.spawn(async move {
                    Done::Control(
                        pipeline::control_probe(
                            &fetch,
                            control.url.as_str(),
                            control.expect_status,
                            control.expect_contains.as_deref(),
                            at,
                        )
                        .await,
                    )
                });
            }
            Job::Catalogue(url) => {
                let Some(c) = self.catalogue(&url).cloned() else {
                    return;
                };
                self.catalogues_reading.insert(url.clone());
                let fetch = self.shared.free.fetch.clone();
                in_flight.spawn(async move {
                    let budget = catalogue::CatalogueBudget {
                        max_pages: c.max_pages.count(),
                        max_bytes: c.max_bytes.count(),
                        deadline: c.deadline_ms.millis(),
                        max_items: c.max_items.count(),
                    };
                    let seen = catalogue::read_catalogue(
                        &fetch,
                        c.url.as_str(),
                        &c.networks,
                        budget,
                        now.div_euclid(1000),
                    )
                    .await;
                    Done::Catalogue(url, seen)
                });
            }
            Job::Checkpoint => {
                // Signed by the writer, which then reads our outage windows again (another
                // process may have declared one).
                self.writer.send(Write::Checkpoint { at_ms: now });
                let every = self.config.daemon.checkpoint_every_secs.get() as i64 * 1000;
                self.push(now + every, Job::Checkpoint);
            }
            Job::Population => {
                self.refresh_population(now);
                self.push(now + POPULATION_EVERY_MS, Job::Population);
            }
            Job::Lease => {
                if self
                    .leased
                    .as_ref()
                    .is_some_and(|l| l.next_round_ms == Some(due_ms))
                {
                    self.lease_round(now, in_flight);
                }
            }
            Job::Reconcile => {
                let shared = self.shared.clone();
                in_flight.spawn(async move { Done::Reconciled(reconcile_spend(&shared).await) });
            }
            Job::Refund(run_id) => {
                let Some((run_id, plan)) = self.refunds.remove(&run_id) else {
                    return;
                };
                let shared = self.shared.clone();
                let writer = self.writer.clone();
                in_flight.spawn(async move {
                    if let Err(e) = pipeline::watch_refund_job(shared, writer, run_id, plan).await {
                        tracing::error!(error = %e, "recording a refund watch failed");
                    }
                    Done::Refund
                });
            }
        }
    }

    /// Takes a finished job's report: the schedule, the outage windows, the catalogue's subjects.
    fn finish(
        &mut self,
        joined: Result<(tokio::task::Id, Done), tokio::task::JoinError>,
        paid_in_flight: &mut usize,
    ) -> Result<()> {
        let now = self.shared.clock.now_ms();
        let done = match joined {
            Ok((id, done)) => {
                self.run_tasks.remove(&id);
                done
            }
            Err(e) => {
                tracing::error!(error = %e, "a job ended abnormally");
                // A free run's slot and host are given back, and its subject scheduled again.
                if let Some((host, url)) = self.run_tasks.remove(&e.id()) {
                    self.running.remove(&url);
                    self.probes_in_flight = self.probes_in_flight.saturating_sub(1);
                    self.frontier
                        .release(&host, now, self.cadence.host_gap_ms, None);
                    if self.leased.is_some() {
                        // Its lease given back: another vantage (or this one) takes it.
                        self.lease_finished(&url, false, now);
                        return Ok(());
                    }
                    if let Some(s) = self.subjects.get(&url)
                        && s.row.state == SubjectState::Active
                    {
                        let due = next_free_ms(&self.cadence, &url, now, 0, s.runs);
                        self.push(due, Job::Free(url));
                    }
                }
                return Ok(());
            }
        };
        match done {
            Done::Run {
                host,
                done,
                paid_slot,
                took,
            } => {
                self.running.remove(&done.url);
                self.probes_in_flight = self.probes_in_flight.saturating_sub(1);
                self.rpc_result(&done.rpc, now)?;
                self.frontier
                    .release(&host, now, self.cadence.host_gap_ms, done.retry_after_ms);
                if let Some(subject) = self.subjects.get_mut(&done.url) {
                    subject.runs += 1;
                    subject.row.failures = if done.reached {
                        0
                    } else {
                        subject.row.failures.saturating_add(1)
                    };
                    subject.row.last_run_ms = Some(now);
                    if done.paid {
                        subject.row.last_paid_ms = Some(now);
                        subject.paid_held_until_ms = None;
                    }
                    if done.paid_held {
                        let until = now + schedule::SPEND_LIMIT_WAIT_MS;
                        subject.paid_held_until_ms = Some(until);
                        tracing::info!(
                            subject = %done.url,
                            until_ms = until,
                            "a spend limit declined the paid call: the subject's next one waits a day"
                        );
                    }
                    subject.row.next_free_ms = next_free_ms(
                        &self.cadence,
                        &done.url,
                        now,
                        subject.row.failures,
                        subject.runs,
                    );
                    if let Some(rev) = self
                        .shared
                        .revisions
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(&done.url)
                    {
                        subject.row.revision = Some(rev.id.clone());
                    }
                    // Written with the others that finished meanwhile (`flush_subjects`).
                    self.dirty.push(subject.row.clone());
                    let due = subject.row.next_free_ms;
                    if subject.row.state == SubjectState::Active && self.leased.is_none() {
                        self.push(due, Job::Free(done.url.clone()));
                    }
                }
                if self.leased.is_some() {
                    self.lease_finished(&done.url, done.error.is_none(), now);
                }
                if paid_slot {
                    *paid_in_flight = paid_in_flight.saturating_sub(1);
                }
                if done.asked_to_pay {
                    // A paid call may leave its reservation open (the chain could not tell yet):
                    // it is looked at again, whether or not another paid call comes.
                    if !self.reconcile_queued {
                        self.reconcile_queued = true;
                        self.push(now + RECONCILE_RETRY_MIN_MS, Job::Reconcile);
                    }
                }
                if let Some((run_id, plan)) = done.refund {
                    self.refunds.insert(run_id.clone(), (run_id.clone(), plan));
                    self.push(now, Job::Refund(run_id));
                }
                if done.error.is_some() {
                    self.shared.metrics.run_not_recorded();
                }
                match &done.error {
                    Some(e) => tracing::error!(
                        subject = %done.url,
                        error = %e,
                        ms = took.as_millis() as u64,
                        "run not recorded"
                    ),
                    None => tracing::info!(
                        subject = %done.url,
                        reached = done.reached,
                        paid = done.paid,
                        verdict = done.summary.as_ref().map_or("-", |s| s.verdict.as_str()),
                        score = done.summary.as_ref().map_or(f64::NAN, |s| s.capped_score),
                        failing = %done.failing.join(","),
                        ms = took.as_millis() as u64,
                        "run"
                    ),
                }
            }
            Done::Control(record) => {
                self.control_result(record)?;
                if let Some(c) = &self.config.control {
                    let every = c.every_secs.get() as i64 * 1000;
                    self.push(now + every, Job::Control);
                }
            }
            Done::Catalogue(url, seen) => {
                self.catalogues_reading.remove(&url);
                // A catalogue the configuration no longer lists: its read is dropped.
                let Some(every) = self
                    .catalogue(&url)
                    .map(|c| c.every_secs.get() as i64 * 1000)
                else {
                    return Ok(());
                };
                self.catalogue_result(&url, seen, now)?;
                self.schedule_catalogue(now + every, url);
            }
            Done::Refund => {}
            Done::Leased(taken) => self.leases_taken(taken, now),
            Done::Reconciled(result) => {
                let open = match &result {
                    Ok(report) => {
                        // Said when something was resolved, not on every retry of a row
                        // still open (retried with a growing wait, up to an hour).
                        if !report.settled.is_empty() || !report.released.is_empty() {
                            tracing::info!(
                                settled = report.settled.len(),
                                released = report.released.len(),
                                open = report.still_open.len(),
                                "reservations reconciled"
                            );
                        }
                        !report.still_open.is_empty()
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "reconciling reservations failed");
                        true
                    }
                };
                self.reconcile_queued = open;
                self.reconcile_retry_ms = if open {
                    (self.reconcile_retry_ms * 2)
                        .clamp(RECONCILE_RETRY_MIN_MS, RECONCILE_RETRY_MAX_MS)
                } else {
                    0
                };
                if open {
                    self.push(now + self.reconcile_retry_ms, Job::Reconcile);
                }
            }
        }
        Ok(())
    }

    /// A control probe's result: records it, and opens or closes our outage window.
    fn control_result(&mut self, record: crate::ledger::record::ControlRecord) -> Result<()> {
        let at = record.at_ms;
        let ok = record.ok;
        let mut entries = vec![(at, Record::Control(record.clone()))];
        match (ok, self.control_open) {
            (false, None) => {
                // The window starts just after the last known answer (the outage began since).
                let from_ms = self.control_last_ok.map_or(at, |t| t + 1);
                self.control_open = Some(from_ms);
                entries.push((
                    at,
                    Record::Outage(OutageRecord::Opened {
                        from_ms,
                        cause: format!("control {} failed: {}", record.url, record.detail),
                        of: OutageOf::Vantage,
                    }),
                ));
                tracing::warn!(control = %record.url, detail = %record.detail, "our vantage is out: outage window opened");
            }
            (true, Some(from_ms)) => {
                self.control_open = None;
                entries.push((
                    at,
                    Record::Outage(OutageRecord::Closed {
                        from_ms,
                        to_ms: at,
                        of: OutageOf::Vantage,
                    }),
                ));
                tracing::info!(control = %record.url, "control answers again: outage window closed");
            }
            _ => {}
        }
        if ok {
            self.control_last_ok = Some(at);
        }
        let outages = entries.len() > 1;
        self.writer.send(Write::Loop(LoopWrite {
            entries,
            outages,
            ..LoopWrite::default()
        }));
        Ok(())
    }

    /// A run's read of our RPC: counts failures in a row, opens our RPC outage window after
    /// `RPC_OUTAGE_AFTER_RUNS` of them, and closes it on the next good read.
    fn rpc_result(&mut self, read: &RpcRead, now: i64) -> Result<()> {
        let Some(record) = self.rpc.step(read, now) else {
            return Ok(());
        };
        match &record {
            OutageRecord::Opened { cause, .. } => {
                tracing::warn!(cause = %cause, "our RPC keeps failing: outage window opened")
            }
            _ => tracing::info!("our RPC answers again: outage window closed"),
        }
        self.writer.send(Write::Loop(LoopWrite {
            entries: vec![(now, Record::Outage(record))],
            outages: true,
            ..LoopWrite::default()
        }));
        Ok(())
    }

    /// A catalogue read: recorded with every page's hash; new subjects added, missing ones
    /// delisted (only after a complete read); each listed subject's item kept for H1.
    fn catalogue_result(
        &mut self,
        url: &str,
        seen: catalogue::CatalogueSeen,
        now: i64,
    ) -> Result<()> {
        let Some(c) = self.catalogue(url).cloned() else {
            return Ok(());
        };
        let source = c.url.to_string();
        let category = c.category.clone().unwrap_or_else(|| "uncategorised".into());
        let max = self.config.daemon.max_subjects.count();
        let mut added = Vec::new();
        let mut entries = Vec::new();
        let mut rows = Vec::new();
        for url in seen.items.keys() {
            if self.subjects.contains_key(url) {
                if let Some(s) = self.subjects.get_mut(url)
                    && s.row.state == SubjectState::Delisted
                {
                    s.row.state = SubjectState::Active;
                    rows.push(s.row.clone());
                    entries.push((
                        now,
                        Record::Subject(SubjectRecord {
                            subject: url.clone(),
                            at_ms: now,
                            change: SubjectChange::Relisted {
                                catalogue: source.clone(),
                            },
                        }),
                    ));
                    // Its run queued before the delisting (or in flight) stays its only one.
                    let due = due_after_restart(&self.cadence, url, 0, now);
                    self.subject_listed(url, due);
                }
                continue;
            }
            if self.subjects.len() >= max {
                break;
            }
            let row = SubjectRow::new_active(url.clone(), category.clone(), source.clone(), now);
            rows.push(row.clone());
            entries.push((
                now,
                Record::Subject(SubjectRecord {
                    subject: url.clone(),
                    at_ms: now,
                    change: SubjectChange::Added {
                        source: source.clone(),
                        category: category.clone(),
                    },
                }),
            ));
            if let Some(l) = self.leased.as_mut() {
                l.offer_again = true;
            } else {
                let due = due_after_restart(&self.cadence, url, 0, now);
                self.push(due, Job::Free(url.clone()));
            }
            self.subjects.insert(url.clone(), Subject::new(row));
            added.push(url.clone());
        }
        let mut delisted = Vec::new();
        if seen.error.is_none() {
            for (url, s) in self.subjects.iter_mut() {
                if s.row.source == source
                    && s.row.state == SubjectState::Active
                    && !seen.items.contains_key(url)
                {
                    s.row.state = SubjectState::Delisted;
                    rows.push(s.row.clone());
                    delisted.push(url.clone());
                    entries.push((
                        now,
                        Record::Subject(SubjectRecord {
                            subject: url.clone(),
                            at_ms: now,
                            change: SubjectChange::Delisted {
                                catalogue: source.clone(),
                            },
                        }),
                    ));
                }
            }
        }
        {
            let mut listings = self
                .shared
                .listings
                .write()
                .unwrap_or_else(|p| p.into_inner());
            for (url, item) in &seen.items {
                listings.insert(
                    url.clone(),
                    pipeline::listing_for(
                        &source,
                        &seen.pages,
                        seen.items_seen,
                        Some(item.clone()),
                    ),
                );
            }
        }
        entries.insert(
            0,
            (
                now,
                Record::Catalogue(CatalogueRead {
                    url: source,
                    at_ms: now,
                    pages: seen.pages,
                    items_seen: seen.items_seen,
                    error: seen.error,
                    added,
                    delisted,
                }),
            ),
        );
        self.write_or_keep(rows, entries);
        Ok(())
    }

    /// The configured catalogue at `url`.
    fn catalogue(&self, url: &str) -> Option<&crate::config::CatalogueConfig> {
        self.config
            .catalogues
            .iter()
            .find(|c| c.url.as_str() == url)
    }

    /// Queues a read of the catalogue at `url` unless one is queued or in flight (one chain of
    /// reads per catalogue, whatever the order of reloads and results).
    fn schedule_catalogue(&mut self, due: i64, url: String) {
        let queued = self
            .queue
            .iter()
            .any(|Reverse((_, _, job))| matches!(job, Job::Catalogue(u) if *u == url));
        if !queued && !self.catalogues_reading.contains(&url) {
            self.push(due, Job::Catalogue(url));
        }
    }

    /// The value population per category, from the latest scores, kept apart by hash.
    fn refresh_population(&mut self, now: i64) {
        let summaries = self
            .shared
            .summaries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut by_category: BTreeMap<String, Vec<(String, schedule::ScoreSummary)>> =
            BTreeMap::new();
        for (url, s) in summaries {
            by_category
                .entry(s.category.clone())
                .or_default()
                .push((url, s));
        }
        let mut categories = Vec::new();
        for (category, peers) in by_category {
            let docs = scoring::population_for("", &category, &peers);
            let bytes = serde_json::to_vec(&docs).unwrap_or_default();
            categories.push((category, docs, bytes));
        }
        // Scores read it once the writer has kept its blobs (a score names the blob).
        self.writer.send(Write::Population {
            at_ms: now,
            categories,
        });
    }

    /// Stops: nothing new starts; runs in flight get a grace to finish and record themselves,
    /// then are abandoned (an abandoned run leaves no entry; a paid call's reservation is already
    /// durable and is reconciled at the next start); the ledger is signed at its head.
    async fn stop(mut self, mut in_flight: JoinSet<Done>) -> Result<()> {
        let status = format!("stopping: {}", self.status_line(in_flight.len()));
        // A delivery cut short is posted again after the restart, with the same event id.
        if let Some(delivery) = self.delivery.take() {
            delivery.abort();
        }
        self.notify.stopping(&status);
        // Requests in flight finish; no new ones (a status would wait for this loop, now gone).
        if let Some(api) = self.api.take() {
            api.shutdown().await;
        }
        let deadline = tokio::time::Instant::now() + STOP_GRACE;
        while !in_flight.is_empty() {
            match tokio::time::timeout_at(deadline, in_flight.join_next()).await {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => {
                    tracing::warn!(
                        abandoned = in_flight.len(),
                        "stopping: abandoning runs in flight"
                    );
                    in_flight.abort_all();
                    while in_flight.join_next().await.is_some() {}
                    break;
                }
            }
        }
        // Leases still held (runs abandoned, work not started) go back to the other vantages.
        if let Some(l) = self.leased.as_mut() {
            l.give_back().await;
            if let Some(role) = &self.shared.scorer {
                scorer::give_back(&l.leases, role).await;
            }
        }
        // The writer writes what it was sent, signs the ledger at its head, then every subject's
        // row (the schedule), and ends.
        let now = self.shared.clock.now_ms();
        let rows: Vec<SubjectRow> = self.subjects.values().map(|s| s.row.clone()).collect();
        let (done, written) = tokio::sync::oneshot::channel();
        self.writer.send(Write::Stop {
            at_ms: now,
            rows,
            done,
        });
        match written.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => anyhow::bail!("writing the schedule at the stop: {e}"),
            Err(_) => anyhow::bail!("the ledger's writer ended before the stop was written"),
        }
        tracing::info!("stopped");
        Ok(())
    }
}

impl Daemon {
    /// A subject listed again (configuration, catalogue): its free run queued, or, leased, the
    /// work offered again at the next round.
    fn subject_listed(&mut self, url: &str, due: i64) {
        match self.leased.as_mut() {
            Some(l) => l.offer_again = true,
            None => self.schedule_free(url, due),
        }
    }

    /// Queues a lease round at `at` unless one is queued earlier.
    fn want_round(&mut self, at: i64) {
        let Some(l) = self.leased.as_mut() else {
            return;
        };
        if l.next_round_ms.is_some_and(|queued| queued <= at) {
            return;
        }
        l.next_round_ms = Some(at);
        self.push(at, Job::Lease);
    }

    /// A lease round: this cycle's and the next's free runs offered (once per cycle, or again
    /// after subjects were added), those a few cycles old forgotten, due runs taken up to the
    /// free probe slots (`leased::round`, a task: the loop never waits on the database).
    fn lease_round(&mut self, now: i64, in_flight: &mut JoinSet<Done>) {
        let concurrency = self.config.schedule.concurrency.count();
        let cadence = self.cadence;
        let Some(l) = self.leased.as_mut() else {
            return;
        };
        l.next_round_ms = None;
        if l.round_in_flight {
            l.round_again = true;
            return;
        }
        let cycle = schedule::cycle_of(&cadence, now);
        let offer = if l.offer_again || l.offered_through.is_none_or(|c| c <= cycle) {
            l.offer_again = false;
            l.offered_through = Some(cycle + 1);
            let active = self
                .subjects
                .iter()
                .filter(|(_, s)| s.row.state == SubjectState::Active)
                .map(|(url, _)| url.as_str());
            schedule::free_work(&cadence, active, cycle..=cycle + 1, l.per_cycle)
        } else {
            Vec::new()
        };
        let lease_ms = l.lease_for.as_millis() as i64;
        let round = leased::Round {
            offer,
            forget_before_ms: now - 3 * cadence.free_every_ms - lease_ms,
            limit: concurrency.saturating_sub(l.taken()),
            now_ms: now,
            // Older runs are stale (the next cycle's cover them).
            from_ms: now - cadence.free_every_ms - lease_ms,
            lease_for: l.lease_for,
        };
        l.round_in_flight = true;
        let leases = l.leases.clone();
        in_flight.spawn(async move { Done::Leased(leased::round(leases, round).await) });
    }

    /// A round's free runs taken: each joins its host's line (a subject not active here is given
    /// back); the next round queued at the next due time, and at least every heartbeat on
    /// system time.
    fn leases_taken(
        &mut self,
        taken: Result<
            Vec<(crate::store::lease::Lease, crate::store::lease::FreeWork)>,
            crate::store::StoreError,
        >,
        now: i64,
    ) {
        let Some(l) = self.leased.as_mut() else {
            return;
        };
        l.round_in_flight = false;
        let mut due = Vec::new();
        match taken {
            Ok(taken) => {
                for (lease, work) in taken {
                    let active = self
                        .subjects
                        .get(&work.subject)
                        .is_some_and(|s| s.row.state == SubjectState::Active);
                    if !active {
                        tokio::spawn(leased::run_done(l.leases.clone(), lease, false));
                        continue;
                    }
                    l.hold(&lease);
                    l.runs
                        .entry(work.subject.clone())
                        .or_default()
                        .push_back(lease);
                    due.push(work.subject);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "a lease round failed: no work taken; tried again at the next round");
                l.offer_again = true;
            }
        }
        let again = std::mem::take(&mut l.round_again);
        let beat = l.beat.as_millis() as i64;
        let per_cycle = l.per_cycle;
        for url in due {
            self.push(now, Job::Free(url));
        }
        let active = self
            .subjects
            .iter()
            .filter(|(_, s)| s.row.state == SubjectState::Active)
            .map(|(url, _)| url.as_str());
        let next_due = schedule::next_replica_due(&self.cadence, active, now, per_cycle);
        let next = match (&self.time, next_due) {
            _ if again => now,
            // Simulated: only when something comes due (a beat of simulated time is nothing).
            (TimeSource::Simulated { .. }, Some(due)) => due,
            (_, Some(due)) => due.min(now + beat),
            (_, None) => now + beat,
        };
        self.want_round(next);
    }

    /// A leased free run ended: its lease marked done when it was recorded, given back when
    /// not; a round soon, for the slot it freed.
    fn lease_finished(&mut self, url: &str, recorded: bool, now: i64) {
        let Some(l) = self.leased.as_mut() else {
            return;
        };
        if let Some(lease) = l.finished(url) {
            tokio::spawn(leased::run_done(l.leases.clone(), lease, recorded));
        }
        self.want_round(now);
    }
}

/// The outage records among `entries` (every outage entry of the ledger, in order).
fn outage_records(entries: Vec<crate::store::ReadEntry>) -> Vec<OutageRecord> {
    entries
        .into_iter()
        .filter_map(|e| match e.record {
            Record::Outage(o) => Some(o),
            _ => None,
        })
        .collect()
}

/// Resolves the open reservations on chain, under the call lock (so none of them belongs to a
/// paid call in flight, here or in a `probe --pay` process sharing the state directory).
async fn reconcile_spend(
    shared: &Shared,
) -> Result<crate::spend::ReconcileReport, crate::spend::SpendError> {
    let Some(parts) = shared.pay.as_ref() else {
        return Ok(Default::default());
    };
    let _one_at_a_time = parts.spend.lock_for_call().await?;
    let mut report = crate::probe::reconcile::reconcile(
        &parts.spend,
        &parts.rpc,
        shared.wall.now(),
        crate::probe::reconcile::Due::All,
        None,
    )
    .await?;
    if let Some((_, rpc)) = &parts.svm {
        let svm =
            crate::probe::reconcile::reconcile_svm(&parts.spend, rpc, shared.wall.now()).await?;
        report.settled.extend(svm.settled);
        report.released.extend(svm.released);
        report.still_open.extend(svm.still_open);
    }
    Ok(report)
}

/// The host (and port) a URL is politeness-limited by.
pub fn host_of(url: &str) -> String {
    url.split_once("://")
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(rest))
        .unwrap_or(url)
        .to_ascii_lowercase()
}
