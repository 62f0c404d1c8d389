//! One scheduled run of one subject, end to end: the free probe, the history-aware checks against
//! the subject's earlier declarations, revision detection, a paid call when the scheduler asked
//! for one, the ledger entries (run, revision) with their index rows in one transaction, and the
//! rescore from the whole history. Also the refund watch (its own job) and the control probe.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use crate::checks::free::evaluate_free_declared;
use crate::checks::history::{self, Declared, OutageWindow};
use crate::clock::{Clock, day_of};
use crate::evidence::free::ListingSeen;
use crate::evidence::paid::{RefundPlan, RefundSeen};
use crate::evidence::run::{Provenance, RefundRecord, RunRecord, run_id};
use crate::evidence::{CheckId, CheckResult, Conclusion, Receipt, rfc3339};
use crate::history::run_rows_digested;
use crate::ledger::record::{ControlRecord, Record, RecordKind, RevisionRecord, ScoreRecord};
use crate::probe::free::FreeProbeConfig;
use crate::probe::free::PeerFetches;
use crate::probe::http::{FetchConfig, FetchRequest, fetch};
use crate::probe::mcp::probe_subject;
use crate::probe::paid::{PaidContext, PaidOptions, PolicySource};
use crate::probe::rpc::Rpc;
use crate::rubric::Rubric;
use crate::runner::RunOutput;
use crate::score::input::PeerDocument;
use crate::spend::{PayPolicy, SpendStore};
use crate::store::{Index, NewEntry, ReadEntry, ScoreRow, Store, StoreError};
use crate::wallet::Wallet;

use super::schedule::{ScoreSummary, retry_after_ms};
use super::scoring;
use super::subject_state::{self, Known, RunFold};
use super::writer::{Write, Writer};

/// What paying needs (absent: the daemon never pays).
pub struct PayParts {
    pub wallet: Wallet,
    /// The Solana wallet and the fixed Solana RPC, when Solana entries are paid.
    pub svm: Option<(
        crate::solana_wallet::SolanaWallet,
        crate::probe::solana_rpc::SolanaRpc,
    )>,
    pub spend: Arc<SpendStore>,
    /// The caps and allowlist; a reload may lower or raise the caps (`PayParts::caps`), and a
    /// paid call reads them again when it reserves. Shared with the API's [`SpendView`].
    pub policy: Arc<RwLock<PayPolicy>>,
    pub rpc: Rpc,
    pub options: PaidOptions,
    /// R6's reference sources and the subjects linked to them (`[[subject]] reference`), set
    /// again when the configured subjects are (start, reload).
    pub references: RwLock<crate::probe::reference::ReferenceConfig>,
}

/// A subject's current revision: its id and what it declared then.
#[derive(Debug, Clone)]
pub struct CurrentRevision {
    pub id: String,
    pub number: u64,
    pub declared: Declared,
}

/// The value population of one category, as of a refresh, kept apart by hash so a score names it.
#[derive(Debug, Clone, Default)]
pub struct Population {
    pub at_ms: i64,
    pub by_category: BTreeMap<String, (String, Vec<PeerDocument>)>,
}

/// What every job shares. The HTTP API gets none of it: it gets a [`ReadSide`].
pub struct Shared {
    pub rubric: Rubric,
    pub free: FreeProbeConfig,
    pub store: Arc<dyn Store>,
    pub pay: Option<PayParts>,
    pub clock: Arc<dyn Clock>,
    pub wall: Arc<dyn Clock>,
    pub vantage: String,
    pub provenance: Provenance,
    pub history_days: u64,
    pub outages: Arc<RwLock<Vec<OutageWindow>>>,
    /// Our outage entries folded once for every subject's score (`subject_state::OutageFold`).
    pub outage_fold: Mutex<subject_state::OutageFold>,
    /// The states with their window rows of the subjects the writer scored last
    /// (`subject_state::Windows`): a rescore starts from its subject's, not from the store.
    pub windows: Mutex<subject_state::Windows>,
    pub summaries: Arc<RwLock<BTreeMap<String, ScoreSummary>>>,
    pub listings: RwLock<BTreeMap<String, ListingSeen>>,
    pub revisions: Mutex<BTreeMap<String, CurrentRevision>>,
    /// Where each subject stands with its findings' fetches (in memory: after a restart, each
    /// subject's second run makes them again).
    pub peer_fetches: Mutex<HashMap<String, PeerFetchState>>,
    /// Written by the writer thread only after its blobs are on disk (a score names it).
    pub population: RwLock<Population>,
    /// The Prometheus metrics (`crate::metrics`).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The webhook receivers, and what their events are detected against (`crate::webhook`).
    pub webhooks: crate::webhook::Webhooks,
    /// Subjects whose score was just written (read by the API's view).
    pub score_changes: Arc<ScoreChanges>,
    /// Every subject's latest score as the daemon's start read it, for the API's view to take.
    pub start_scores: Arc<StartScores>,
    /// On PostgreSQL: the scoring role (this vantage scores only while it holds it). `None`
    /// (SQLite): this daemon always scores.
    pub(crate) scorer: Option<Arc<super::scorer::ScorerRole>>,
}

/// Every subject's latest score (its headline) as the daemon's start read it, kept only when
/// the API runs and until its view takes it for its first build: the start reads 100,000
/// latest scores once, not once for the loop and again for the view. A score written after the
/// start read is marked in [`ScoreChanges`] and rebuilt by the view as any other.
#[derive(Debug, Default)]
pub struct StartScores(Mutex<Option<HashMap<String, crate::store::LatestHeadline>>>);

impl StartScores {
    pub(crate) fn put(&self, scores: HashMap<String, crate::store::LatestHeadline>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(scores);
    }

    /// The scores read at the start, once (`None` after, or when none were kept).
    pub(crate) fn take(&self) -> Option<HashMap<String, crate::store::LatestHeadline>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// What the HTTP API may reach: reads only. Its store is a handle on the ledger's pool of read
/// connections (no write connection, so no write lock to take or wait for); it holds no wallet;
/// anything that changes state is asked of the loop (`crate::control`).
pub struct ReadSide {
    pub rubric: Rubric,
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub wall: Arc<dyn Clock>,
    pub outages: Arc<RwLock<Vec<OutageWindow>>>,
    pub summaries: Arc<RwLock<BTreeMap<String, ScoreSummary>>>,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub score_changes: Arc<ScoreChanges>,
    pub start_scores: Arc<StartScores>,
    /// The spend store's totals against the caps, when the daemon pays.
    pub spend: Option<SpendView>,
    /// What the findings read besides a run (the facilitators we know, `[probe] facilitators`).
    pub findings: crate::checks::findings::FindingsContext,
}

/// The spend store and the caps in force, for the API's status and the metrics (no wallet).
pub struct SpendView {
    pub spend: Arc<SpendStore>,
    pub policy: Arc<RwLock<PayPolicy>>,
}

/// The webhook delivery task works through these parts of the shared state alone.
impl crate::webhook::deliver::Courier for Shared {
    fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }
    fn wall(&self) -> &dyn Clock {
        self.wall.as_ref()
    }
    fn webhooks(&self) -> &crate::webhook::Webhooks {
        &self.webhooks
    }
    fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }
}

impl Shared {
    /// The API's side of this state, reading through `reader` (the store's read-only handle).
    pub fn read_side(&self, reader: Arc<dyn Store>) -> ReadSide {
        ReadSide {
            rubric: self.rubric.clone(),
            store: reader,
            clock: self.clock.clone(),
            wall: self.wall.clone(),
            outages: self.outages.clone(),
            summaries: self.summaries.clone(),
            metrics: self.metrics.clone(),
            score_changes: self.score_changes.clone(),
            start_scores: self.start_scores.clone(),
            spend: self.pay.as_ref().map(|p| SpendView {
                spend: p.spend.clone(),
                policy: p.policy.clone(),
            }),
            findings: crate::checks::findings::FindingsContext {
                facilitators: self.free.facilitators.clone(),
            },
        }
    }
}

/// Subjects whose latest score changed since a reader last took them, and a wake-up for it.
#[derive(Debug, Default)]
pub struct ScoreChanges {
    changed: Mutex<std::collections::BTreeSet<String>>,
    notify: tokio::sync::Notify,
}

impl ScoreChanges {
    pub fn mark(&self, urls: impl IntoIterator<Item = String>) {
        self.changed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(urls);
        self.notify.notify_one();
    }

    /// Waits until something is marked (returns at once if something was since the last wait).
    pub async fn wait(&self) {
        self.notify.notified().await;
    }

    /// Takes every subject marked so far.
    pub fn take(&self) -> std::collections::BTreeSet<String> {
        std::mem::take(&mut *self.changed.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// What a run tells the scheduler.
#[derive(Debug, Clone)]
pub struct RunDone {
    pub url: String,
    /// Whether any sample got an HTTP response (for backoff).
    pub reached: bool,
    pub retry_after_ms: Option<i64>,
    /// The scheduler asked this run to pay.
    pub asked_to_pay: bool,
    /// A payment was sent.
    pub paid: bool,
    /// The paid call was declined by a spend limit of ours (a cap, the wallet's balance).
    pub paid_held: bool,
    pub refund: Option<(String, RefundPlan)>,
    pub summary: Option<ScoreSummary>,
    /// The checks this run failed (for the run's log line).
    pub failing: Vec<String>,
    pub error: Option<String>,
    /// How our RPC did in this run (the loop opens and closes our RPC outage window on it).
    pub rpc: RpcRead,
}

/// How our fixed RPC did in one run's chain read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcRead {
    /// Not asked: no RPC configured, the subject never answered (nothing to read), or the run was
    /// not recorded.
    NotAsked,
    /// It answered the chain id and every token read (a revert is an answer).
    Worked,
    /// It failed (the reason, as C3's `unmeasured` gives it).
    Failed(String),
}

impl RpcRead {
    pub fn of(free: &crate::evidence::free::FreeObservation) -> RpcRead {
        use crate::evidence::free::ChainSeen;
        match &free.chain {
            ChainSeen::NoRpc => RpcRead::NotAsked,
            // With no sample the deadline passed on the subject's first answer, before anything
            // was asked of the RPC; after one, the RPC was asked and did not answer in time.
            ChainSeen::RpcDown { .. } if free.samples.is_empty() => RpcRead::NotAsked,
            ChainSeen::RpcDown { error, .. } => RpcRead::Failed(error.clone()),
            ChainSeen::Read { tokens, .. } => {
                match tokens.iter().find_map(|t| t.rpc_error.as_ref()) {
                    Some(error) => RpcRead::Failed(error.clone()),
                    None => RpcRead::Worked,
                }
            }
        }
    }
}

/// How often the daemon makes a subject's findings' fetches (a browser's request, the usual
/// places of a description): they are never scored and change slowly, and every run making them
/// would add one to three requests to the checks' six.
pub(crate) const PEER_FETCHES_EVERY_MS: i64 = 86_400_000;

/// Where a subject stands with its findings' fetches since the process started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerFetchState {
    /// Its first run made only the checks' requests: the next makes the fetches.
    Deferred,
    /// The fetches were all made by the run that started then (the daemon's clock, ms).
    MadeAt(i64),
}

/// Whether this run of `url` makes the findings' fetches: not on the subject's first run since
/// the process started (a catalogue's first sweep costs only the checks' requests), then on the
/// next run, on every run after one that could not make them all, and a day after the last that
/// did.
fn peer_fetches_due(shared: &Shared, url: &str, now_ms: i64) -> PeerFetches {
    let mut states = shared
        .peer_fetches
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    match states.get(url).copied() {
        None => {
            states.insert(url.to_string(), PeerFetchState::Deferred);
            PeerFetches::Skip
        }
        Some(PeerFetchState::MadeAt(at)) if now_ms.saturating_sub(at) < PEER_FETCHES_EVERY_MS => {
            PeerFetches::Skip
        }
        Some(_) => PeerFetches::Make,
    }
}

/// Runs `url` once; `pay` asks for a paid call. Never panics; a store error is reported in
/// `RunDone::error` (the run then left no entry).
pub(crate) async fn run_subject(
    shared: Arc<Shared>,
    writer: Writer,
    url: String,
    category: String,
    pay: bool,
) -> RunDone {
    let started_ms = shared.clock.now_ms();
    let peer_fetches = peer_fetches_due(&shared, &url, started_ms);
    let (mut free, first_parse) = probe_subject(
        &shared.free,
        &url,
        started_ms.div_euclid(1000),
        peer_fetches,
    )
    .await;
    if free
        .peers
        .as_ref()
        .is_some_and(|p| p.skipped.is_none() && !p.cut_short)
    {
        shared
            .peer_fetches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(url.clone(), PeerFetchState::MadeAt(started_ms));
    }
    if let Some(listing) = shared
        .listings
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&url)
    {
        free.listing = listing.clone();
    }
    let reached = free.samples.iter().any(|s| s.exchange.response.is_some());
    let rpc = RpcRead::of(&free);
    let retry_after = retry_after_ms(&free);
    // The free checks, and what the run saw the subject declare, from one parse of its 402 (the
    // prober's, which the checks take only for the bytes it was made from).
    let (results, declared_now) =
        evaluate_free_declared(&free, &shared.rubric, started_ms, first_parse);
    // What the results derive to, kept for the run's stored form (which would derive them again).
    let derived = results.clone();
    let mut out = RunOutput {
        free,
        paid: None,
        results,
    };

    // History-aware checks, against what earlier runs saw.
    // Read off the runtime's workers (the store may be busy writing a batch to disk), in one
    // trip: the subject's earlier declarations, and the notes its operator posted through the
    // API, which count like the operator file's (H2, H3).
    let read = {
        let store = shared.store.clone();
        let subject = url.clone();
        let since = started_ms - history::STABILITY_WINDOW_MS;
        tokio::task::spawn_blocking(move || {
            let prior = store
                .declared(&subject, since)
                .map_err(|e| format!("reading declarations: {e}"))?;
            let posted = store
                .subject_entries(&subject, &[RecordKind::Note], 0)
                .map_err(|e| format!("reading posted notes: {e}"))?;
            Ok::<_, String>((prior, posted))
        })
        .await
    };
    let (prior, posted): (Vec<Declared>, _) = match read {
        Ok(Ok(read)) => read,
        Ok(Err(e)) => return failed(url, reached, pay, e),
        Err(e) => return failed(url, reached, pay, format!("reading declarations: {e}")),
    };
    let mut notes = history::notes(&out.free);
    notes.extend(posted.into_iter().filter_map(|e| match e.record {
        Record::Note(n) => Some(n.note),
        _ => None,
    }));
    let h2 = history::h2(declared_now.as_ref(), &prior, &notes, started_ms);
    let h3 = history::h3(declared_now.as_ref(), &prior, &notes, started_ms);
    let at = rfc3339(out.free.at);
    for (id, conclusion) in [(CheckId::H2, h2), (CheckId::H3, h3)] {
        put_result(&mut out.results, id, conclusion, &shared.vantage, &at);
    }

    // A new revision when what it declares changed, dated like the run's evidence (whole seconds).
    // It becomes the subject's current one only once its entry is committed (`record_run`): a
    // run that fails to record leaves no revision behind, and the next run allocates its id.
    let evidence_ms = out.free.at.saturating_mul(1000);
    let revision = {
        let current = shared
            .revisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&url)
            .cloned();
        match (&declared_now, current) {
            (Some(now), None) => {
                let record = RevisionRecord {
                    subject: url.clone(),
                    id: "r0".into(),
                    at_ms: evidence_ms,
                    fingerprint: now.fingerprint.clone(),
                    previous: None,
                    changed: Vec::new(),
                };
                let current = CurrentRevision {
                    id: "r0".into(),
                    number: 0,
                    declared: now.clone(),
                };
                (Some((record, current)), "r0".to_string(), None)
            }
            (Some(now), Some(cur)) => {
                let changed = history::revision_change(Some(&cur.declared), now);
                if changed.is_empty() {
                    (None, cur.id, None)
                } else {
                    let number = cur.number + 1;
                    let id = format!("r{number}");
                    let pay_to_event = shared.webhooks.revision_event(
                        &url,
                        &id,
                        Some((&cur.id, &cur.declared)),
                        now,
                        evidence_ms,
                    );
                    let record = RevisionRecord {
                        subject: url.clone(),
                        id: id.clone(),
                        at_ms: evidence_ms,
                        fingerprint: now.fingerprint.clone(),
                        previous: Some(cur.id.clone()),
                        changed,
                    };
                    let current = CurrentRevision {
                        id: id.clone(),
                        number,
                        declared: now.clone(),
                    };
                    (Some((record, current)), id, pay_to_event)
                }
            }
            (None, Some(cur)) => (None, cur.id, None),
            (None, None) => (None, "r0".to_string(), None),
        }
    };
    let (new_revision, revision_id, pay_to_event) = revision;
    let (revision_record, new_current) = new_revision.unzip();

    // A paid call, when asked and possible.
    let mut refund = None;
    if pay && let Some(parts) = shared.pay.as_ref() {
        let references = parts
            .references
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let ctx = PaidContext {
            wallet: &parts.wallet,
            svm: parts
                .svm
                .as_ref()
                .map(|(wallet, rpc)| crate::probe::paid::SvmPay { wallet, rpc }),
            store: &parts.spend,
            policy: &*parts.policy,
            rpc: &parts.rpc,
            fetch: &shared.free.fetch,
            options: parts.options.clone(),
            clock: shared.clock.as_ref(),
            wall: shared.wall.as_ref(),
            on_step: None,
            references: &references,
        };
        refund = crate::runner::pay_and_merge(&ctx, &shared.rubric, &mut out).await;
    }

    let ended_ms = shared.clock.now_ms().max(started_ms);
    let paid_sent = out.paid.as_ref().is_some_and(|p| p.payment_sent());
    let paid_held = out
        .paid
        .as_ref()
        .is_some_and(|p| p.refused_by_spend_limit());
    let record = RunRecord {
        id: run_id(&shared.vantage, &url, started_ms),
        subject: url.clone(),
        vantage: shared.vantage.clone(),
        started_at_ms: started_ms,
        ended_at_ms: ended_ms,
        provenance: shared.provenance,
        revision: revision_id.clone(),
        free: out.free,
        paid: out.paid,
        results: out.results,
    };
    let run_id = record.id.clone();
    let tally = crate::metrics::RunTally::of(&record);
    let failing: Vec<String> = record
        .results
        .iter()
        .filter(|r| r.outcome == crate::evidence::Outcome::Fail)
        .map(|r| r.id.as_str().to_string())
        .collect();

    // Record, then rescore: with the runs that finished meanwhile, in one commit each.
    // Beside each entry, what the writer folds into the subject's state without reading it back.
    let mut entries = Vec::new();
    let mut known = Vec::new();
    if let Some(r) = revision_record {
        // A payTo change is a webhook event, in the outbox with the revision that shows it.
        let routed = shared.webhooks.route(pay_to_event.into_iter().collect());
        known.push(Known::Record(Record::Revision(r.clone())));
        entries.push(NewEntry {
            at_ms: started_ms,
            record: Record::Revision(r).into(),
            index: (!routed.is_empty()).then(|| -> crate::store::IndexFn {
                Box::new(move |seq| Index {
                    outbox: routed.rows(seq),
                    ..Index::default()
                })
            }),
        });
    }
    // The results' digest and their receipts' from one rendering: the history rows name the
    // receipts, the stored form the results.
    let digests = crate::ledger::stored::results_digests(&record.results);
    let rows = run_rows_digested(&shared.rubric, &record, &digests.receipts);
    known.push(Known::Run(RunFold::with_declared(
        rows.clone(),
        &record,
        declared_now.as_ref(),
    )));
    let index = run_index_of(record.id.clone(), declared_now);
    // The run's stored form is made here, in the run's own task: its results compared with what
    // they derive to (`ledger::stored`) outside the writer; a paid call's are derived again.
    let derived = record.paid.is_none().then_some(derived);
    entries.push(NewEntry::prepared_derived(
        ended_ms,
        Record::Run(Box::new(record)),
        &shared.rubric,
        derived,
        Some(digests.results),
        Some(index),
    ));
    let summary = match record_run(&writer, url.clone(), category, entries, known).await {
        Ok(summary) => summary,
        Err(e) => return failed(url, reached, pay, format!("recording the run: {e}")),
    };
    if let Some(current) = new_current {
        shared
            .revisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(url.clone(), current);
    }
    shared.metrics.run_recorded(&tally);
    RunDone {
        url,
        reached,
        retry_after_ms: retry_after,
        asked_to_pay: pay,
        paid: paid_sent,
        paid_held,
        refund: refund.map(|p| (run_id, p)),
        summary,
        failing,
        error: None,
        rpc,
    }
}

/// A finished run's entries waiting to be recorded, and where its outcome goes: the summary of
/// its new score (`None` when rescoring failed), or why the run was not recorded.
pub(crate) struct PendingRun {
    url: String,
    category: String,
    entries: Vec<NewEntry>,
    /// Each entry's part of the subject's state, in the order of `entries`.
    known: Vec<Known>,
    pub(crate) done: tokio::sync::oneshot::Sender<Result<Option<ScoreSummary>, String>>,
}

#[cfg(test)]
impl PendingRun {
    /// A run with no entries (no one awaits its outcome), for the writer's own tests.
    pub(crate) fn empty(url: &str) -> PendingRun {
        PendingRun {
            url: url.to_string(),
            category: String::new(),
            entries: Vec::new(),
            known: Vec::new(),
            done: tokio::sync::oneshot::channel().0,
        }
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}

/// Records a run's entries and rescores its subject, with whatever other runs are waiting: the
/// writer thread takes every run that finished while it wrote the last batch, and those that
/// finish within a short wait (`writer::GATHER`), as the next batch (group commit: every commit
/// waits for stable storage).
async fn record_run(
    writer: &Writer,
    url: String,
    category: String,
    entries: Vec<NewEntry>,
    known: Vec<Known>,
) -> Result<Option<ScoreSummary>, String> {
    let (done, outcome) = tokio::sync::oneshot::channel();
    writer.send(Write::Run(PendingRun {
        url,
        category,
        entries,
        known,
        done,
    }));
    outcome
        .await
        .unwrap_or_else(|_| Err("the recording was abandoned".into()))
}

/// Writes a batch of runs (on the writer thread): every run's entries in one transaction, then
/// every subject rescored and the scores in one transaction. Each score reads the ledger through
/// the batch's runs (a subject's history is its own: the other runs change nothing it reads). A
/// store error fails the whole transaction: every run of the batch reports it, none left an
/// entry; the error is returned too (the writer tells a full disk apart).
pub(crate) fn record_batch(shared: &Shared, batch: Vec<PendingRun>) -> Result<(), StoreError> {
    let mut runs = Vec::with_capacity(batch.len());
    let mut entries = Vec::new();
    for mut run in batch {
        entries.append(&mut run.entries);
        runs.push(run);
    }
    let seqs = match shared.store.append(entries) {
        Ok(seqs) => seqs,
        Err(e) => {
            let why = e.to_string();
            for run in runs {
                let _ = run.done.send(Err(why.clone()));
            }
            return Err(e);
        }
    };
    // The batch's subjects, each with its entries just written (folded from memory, not read
    // back), rescored when this vantage scores.
    let scoring = shared.scorer.as_ref().is_none_or(|r| r.holds());
    let mut seqs = seqs.into_iter();
    let mut subjects = Vec::with_capacity(runs.len());
    for run in &mut runs {
        let known: BTreeMap<u64, Known> = std::mem::take(&mut run.known)
            .into_iter()
            .filter_map(|k| seqs.next().map(|seq| (seq, k)))
            .collect();
        subjects.push((run.url.clone(), run.category.clone(), known));
    }
    let (summaries, failed) = if scoring {
        score_and_publish(shared, subjects)
    } else {
        (runs.iter().map(|_| None).collect(), None)
    };
    for (run, summary) in runs.into_iter().zip(summaries) {
        let _ = run.done.send(Ok(summary));
    }
    failed.map_or(Ok(()), Err)
}

/// Rescores `subjects` (URL, category, entries the caller holds in memory) and writes their
/// scores in one transaction: each subject's summary, `None` where rescoring or the write
/// failed (the write's error returned too). With several vantages (`ScorerRole`), each score
/// reads every vantage's log as far as it stands now.
fn score_and_publish(
    shared: &Shared,
    subjects: Vec<(String, String, BTreeMap<u64, Known>)>,
) -> (Vec<Option<ScoreSummary>>, Option<StoreError>) {
    // With several vantages, the scores are appended under the role's lease: a holder paused
    // after this point and woken past its lease publishes nothing (the database refuses).
    let fence = match &shared.scorer {
        None => None,
        Some(role) => match role.fence() {
            Some(fence) => Some(fence),
            None => return (subjects.iter().map(|_| None).collect(), None),
        },
    };
    let others: BTreeMap<String, u64> = match &shared.scorer {
        None => BTreeMap::new(),
        Some(_) => match shared.store.other_vantages() {
            Ok(others) => others.into_iter().collect(),
            Err(e) => {
                tracing::warn!(error = %e, "reading the other vantages failed: nothing rescored");
                return (subjects.iter().map(|_| None).collect(), None);
            }
        },
    };
    let mut scores = Vec::new();
    let mut outcomes = Vec::with_capacity(subjects.len());
    let mut published = Vec::new();
    for (url, category, known) in subjects {
        match score_subject(shared, &url, &category, known, &others) {
            Ok((entry, summary, now)) => {
                scores.push(entry);
                published.push((url.clone(), now));
                outcomes.push((url, Some(summary)));
            }
            Err(e) => {
                tracing::warn!(subject = %url, error = %e, "rescoring failed");
                outcomes.push((url, None));
            }
        }
    }
    let mut failed = None;
    if !scores.is_empty() {
        let appended = match &fence {
            None => shared.store.append(scores),
            Some(fence) => shared.store.append_fenced(scores, fence),
        };
        if let (Err(StoreError::LeaseLost { .. }), Some(role)) = (&appended, &shared.scorer) {
            tracing::warn!(
                "the scoring role was lost before its scores were written: this vantage stops scoring"
            );
            role.set(false);
        }
        match appended {
            Ok(_) => {
                // What the scores published is what the next ones are compared with.
                for (url, now) in published {
                    shared.webhooks.remember(&url, now);
                }
            }
            Err(e) => {
                // The states these scores folded were not kept with them: the next score of
                // each subject starts from its stored state and the ledger, as a recompute
                // does (a state kept in memory would carry a fold of the other vantages'
                // entries at a point no score in the ledger records).
                let mut windows = shared.windows.lock().unwrap_or_else(|p| p.into_inner());
                for (url, summary) in &mut outcomes {
                    if summary.take().is_some() {
                        windows.take(url);
                        tracing::warn!(subject = %url, error = %e, "recording the score failed");
                    }
                }
                failed = Some(e);
            }
        }
    }
    if !shared.webhooks.is_empty() {
        shared.webhooks.wake.notify_one();
    }
    shared.score_changes.mark(
        outcomes
            .iter()
            .filter(|(_, s)| s.is_some())
            .map(|(url, _)| url.clone()),
    );
    let mut summaries = shared.summaries.write().unwrap_or_else(|p| p.into_inner());
    let mut out = Vec::with_capacity(outcomes.len());
    for (url, summary) in outcomes {
        if let Some(s) = &summary {
            summaries.insert(url, s.clone());
        }
        out.push(summary);
    }
    (out, failed)
}

/// The scoring role's own work (on the writer thread): the subjects of the other vantages'
/// entries written since it last looked (all of them once it has just taken the role),
/// rescored from every vantage's log.
pub(crate) fn score_others(shared: &Shared) -> Result<(), StoreError> {
    let Some(role) = &shared.scorer else {
        return Ok(());
    };
    if !role.holds() {
        return Ok(());
    }
    let store = shared.store.as_ref();
    let heads = store.other_vantages()?;
    let mut scanned = role.scanned();
    let mut urls = std::collections::BTreeSet::new();
    for (vantage, head) in &heads {
        let after = scanned.get(vantage).copied().unwrap_or(0);
        if *head > after {
            urls.extend(store.vantage_subjects(
                vantage,
                &[RecordKind::Run, RecordKind::Refund, RecordKind::Revision],
                after,
                *head,
            )?);
        }
    }
    let mut subjects = Vec::with_capacity(urls.len());
    for url in urls {
        let category = store
            .subject(&url)?
            .map_or_else(|| "uncategorised".to_string(), |row| row.category);
        subjects.push((url, category, BTreeMap::new()));
    }
    if !subjects.is_empty() {
        let (_, failed) = score_and_publish(shared, subjects);
        if let Some(e) = failed {
            return Err(e);
        }
    }
    *scanned = heads.into_iter().collect();
    Ok(())
}

fn failed(url: String, reached: bool, asked_to_pay: bool, error: String) -> RunDone {
    RunDone {
        url,
        reached,
        retry_after_ms: None,
        asked_to_pay,
        paid: false,
        paid_held: false,
        refund: None,
        summary: None,
        failing: Vec::new(),
        error: Some(error),
        rpc: RpcRead::NotAsked,
    }
}

/// Replaces a check's result with a conclusion drawn here (history-aware checks).
fn put_result(results: &mut [CheckResult], id: CheckId, c: Conclusion, vantage: &str, at: &str) {
    if let Some(slot) = results.iter_mut().find(|r| r.id == id) {
        *slot = CheckResult {
            id,
            outcome: c.outcome,
            evidence: c.evidence,
            value: c.value,
            receipt: Receipt {
                vantage: vantage.to_string(),
                at: at.to_string(),
                detail: c.detail,
                ..Receipt::default()
            },
        };
    }
}

/// The index rows of a run: its id and what it saw the subject declare.
pub fn run_index(record: &RunRecord, declared: Option<Declared>) -> crate::store::IndexFn {
    run_index_of(record.id.clone(), declared)
}

/// [`run_index`] from the run's id.
fn run_index_of(run_id: String, declared: Option<Declared>) -> crate::store::IndexFn {
    Box::new(move |_seq| Index {
        run_id: Some(run_id),
        declared: declared
            .as_ref()
            .and_then(|d| serde_json::to_vec(d).ok().map(|b| (d.at_ms, b))),
        ..Index::default()
    })
}

/// Rescores `url` as of now from its history: the score's ledger entry (which also keeps the
/// document as the subject's score of the day) and its summary. Called on the writer thread, so
/// no other write of this daemon comes between its reads and its batch's commit.
fn score_subject(
    shared: &Shared,
    url: &str,
    category: &str,
    known: BTreeMap<u64, Known>,
    others: &BTreeMap<String, u64>,
) -> Result<(NewEntry, ScoreSummary, crate::webhook::Published), String> {
    let now_ms = shared.clock.now_ms();
    let store = shared.store.as_ref();
    // Everything read is at or before `through`, the last entry the score says it read (another
    // process may append an outage declaration meanwhile: it waits for the next score).
    let (through, _) = store.head().map_err(|e| e.to_string())?;
    // The subject's folded state brought up to `through` (never its whole history), and our
    // outages folded once for every subject.
    let kept = shared
        .windows
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take(url);
    let mut state = subject_state::load_known(
        store,
        &shared.rubric,
        url,
        through,
        shared.history_days,
        kept,
        known,
    )
    .map_err(|e| e.to_string())?;
    // Several vantages: the others' entries of the subject folded after ours.
    if !others.is_empty() {
        subject_state::fold_others(store, &shared.rubric, url, &mut state, others)
            .map_err(|e| e.to_string())?;
    }
    let outages = {
        let mut fold = shared.outage_fold.lock().unwrap_or_else(|p| p.into_inner());
        for e in store
            .entries_of_kind(&[RecordKind::Outage], fold.through_seq)
            .map_err(|e| e.to_string())?
        {
            fold.fold(e.seq, &e.record);
        }
        fold.windows(through)
    };
    let (population_sha, population) = {
        let p = shared.population.read().unwrap_or_else(|p| p.into_inner());
        match p.by_category.get(category) {
            Some((sha, peers)) => (
                Some(sha.clone()),
                peers
                    .iter()
                    .filter(|peer| peer.id != url)
                    .cloned()
                    .collect(),
            ),
            None => (None, Vec::new()),
        }
    };
    let at = subject_state::ScoreAt {
        as_of_ms: now_ms,
        horizon_days: shared.history_days,
        outages: &outages,
        category: Some(category),
        population,
    };
    let (inputs, read) = match shared.scorer.as_ref().filter(|_| !others.is_empty()) {
        // Method /3: the state's day summaries (a day our outage touches summarised again from
        // its entries).
        None => (
            state
                .score_inputs(&shared.rubric, url, at, &mut |seqs| {
                    subject_state::rows_of_entries(store, &shared.rubric, seqs)
                })
                .map_err(|e| e.to_string())?,
            None,
        ),
        // Several vantages: every vantage's outcomes of the horizon, each excused by its own
        // outages, through the quorum and the cloaking marks.
        Some(role) => {
            let read = role.read(others.clone());
            let windows = role
                .outages()
                .windows(store, others)
                .map_err(|e| e.to_string())?;
            let own = store.vantage_name().unwrap_or(&shared.vantage);
            let vantages = subject_state::Vantages {
                own,
                outages: &windows,
                read: &read,
                cloaking: &role.cloaking,
            };
            let inputs = state
                .score_inputs_vantages(&shared.rubric, url, at, vantages, &mut |refs| {
                    subject_state::entries_of(store, &shared.rubric, own, refs)
                })
                .map_err(|e| e.to_string())?;
            (inputs, Some(read))
        }
    };
    let price_usd = state.price_usd.unwrap_or_default();
    let mut scored = scoring::score_inputs(
        &shared.rubric,
        &inputs,
        now_ms,
        through,
        shared.history_days,
    )
    .map_err(|e| e.to_string())?;
    scored.record.population_sha256 = population_sha;
    scored.record.read = read;
    // What is read of this score without its document (the start, the API's list), kept with
    // its row.
    let headline = crate::score::headline::ScoreHeadline::of(
        &scored.document,
        scored.record.document_sha256.clone(),
    );
    let summary = scoring::summary_of(&shared.rubric, &headline, price_usd, category);
    let headline = headline.to_bytes();
    // Webhook events of this score (a verdict change, a gate starting to bind), in the outbox
    // with the score's entry.
    let (events, published) = shared
        .webhooks
        .score_events(store, url, &scored.document, now_ms)
        .map_err(|e| e.to_string())?;
    let routed = shared.webhooks.route(events);
    // The state as this score read it, kept with the score (its window moved past the rows the
    // horizon no longer holds).
    state.advance_window(now_ms, shared.history_days);
    let state_row = state.to_row(url);
    shared
        .windows
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .put(url, state);
    let row = ScoreRow {
        subject: url.to_string(),
        day: day_of(now_ms),
        as_of_ms: now_ms,
        seq: 0,
        document: scored.stored,
    };
    let entry = NewEntry {
        at_ms: now_ms,
        record: Record::Score(scored.record).into(),
        index: Some(Box::new(move |seq| Index {
            score: Some(ScoreRow { seq, ..row }),
            headline: Some(headline),
            state: Some(state_row),
            outbox: routed.rows(seq),
            ..Index::default()
        })),
    };
    Ok((entry, summary, published))
}

/// The price the subject's latest declaration quotes ([`Declared::price_usd`]).
pub(crate) fn latest_price(
    store: &dyn Store,
    url: &str,
) -> Result<Option<crate::evidence::usd::Usd>, StoreError> {
    Ok(store.latest_declared(url)?.and_then(|d| d.price_usd()))
}

/// The refund watch of an earlier paid call: its result is a ledger entry of its own, with H9
/// judged again over the run's paid observation.
pub(crate) async fn watch_refund_job(
    shared: Arc<Shared>,
    writer: Writer,
    run_id: String,
    plan: RefundPlan,
) -> Result<(), StoreError> {
    let Some(parts) = shared.pay.as_ref() else {
        return Ok(());
    };
    let refund: RefundSeen = crate::probe::refund::watch_refund(
        &shared.free.fetch,
        &parts.rpc,
        &parts.options,
        shared.wall.as_ref(),
        &plan,
    )
    .await;
    // H9 over the run's paid observation with the refund side now seen: the run read by its id.
    let run = match shared.store.run_by_id(&run_id)? {
        Some(ReadEntry {
            record: Record::Run(run),
            ..
        }) => Some(run),
        // A ledger older than the run id index: the subject's runs, newest first.
        _ => shared
            .store
            .subject_entries(&plan.subject, &[RecordKind::Run], 0)?
            .into_iter()
            .rev()
            .find_map(|e| match e.record {
                Record::Run(r) if r.id == run_id => Some(r),
                _ => None,
            }),
    };
    let Some(run) = run else {
        return Ok(());
    };
    let Some(mut paid) = run.paid.clone() else {
        return Ok(());
    };
    paid.refund = Some(refund.clone());
    let h9 = crate::checks::paid::evaluate_with_rubric(
        &paid,
        &shared.rubric,
        run.free.at,
        &shared.vantage,
    )
    .into_iter()
    .find(|r| r.id == CheckId::H9);
    let Some(h9) = h9 else {
        return Ok(());
    };
    let at_ms = shared.clock.now_ms();
    let record = RefundRecord {
        run_id,
        subject: plan.subject.clone(),
        revision: run.revision.clone(),
        at_ms,
        refund,
        result: h9.clone(),
    };
    let (reply, written) = tokio::sync::oneshot::channel();
    let entries = vec![NewEntry {
        at_ms,
        record: Record::Refund(Box::new(record)).into(),
        index: None,
    }];
    writer.send(Write::Append { entries, reply });
    written.await.map_err(|_| StoreError::WriterStopped)??;
    Ok(())
}

/// One control probe: the known answer or not.
pub async fn control_probe(
    fetch_cfg: &FetchConfig,
    url: &str,
    expect_status: u16,
    expect_contains: Option<&str>,
    at_ms: i64,
) -> ControlRecord {
    let exchange = fetch(fetch_cfg, &FetchRequest::get(url)).await;
    let (ok, detail) = match exchange.response.as_ref() {
        None => (
            false,
            exchange
                .error
                .as_ref()
                .map_or("no response".to_string(), |e| e.to_string()),
        ),
        Some(r) if r.status != expect_status => (
            false,
            format!("HTTP {} where {expect_status} is known", r.status),
        ),
        Some(r) => match expect_contains {
            Some(text) => {
                let in_body = String::from_utf8_lossy(&r.body).contains(text);
                let in_headers = r.headers.iter().any(|(_, v)| v.contains(text));
                if in_body || in_headers {
                    (true, "the known answer".to_string())
                } else {
                    (false, format!("the answer lacks {text:?}"))
                }
            }
            None => (true, format!("HTTP {expect_status}, as known")),
        },
    };
    ControlRecord {
        url: url.to_string(),
        at_ms,
        ok,
        detail,
    }
}

/// The listing of one subject from a catalogue read (what H1 compares with).
pub fn listing_for(
    catalogue_url: &str,
    pages: &[crate::evidence::free::PageSeen],
    items_seen: usize,
    item: Option<serde_json::Value>,
) -> ListingSeen {
    ListingSeen::Read {
        url: catalogue_url.to_string(),
        pages: pages.to_vec(),
        items_seen,
        item,
    }
}

/// A score record as published, for tests and tools.
pub fn score_of(record: &Record) -> Option<&ScoreRecord> {
    match record {
        Record::Score(s) => Some(s),
        _ => None,
    }
}

/// What the metrics' gauges show now, read from the shared state and the stores (a few short
/// queries) when a scrape comes.
pub fn scrape(shared: &ReadSide) -> Result<crate::metrics::Scrape, crate::metrics::MetricsError> {
    use crate::metrics::{MetricsError, Scrape, SpendScrape};
    let now_ms = shared.clock.now_ms();
    let verdicts = shared
        .summaries
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .map(|s| s.verdict)
        .collect();
    let store = shared.store.as_ref();
    let (ledger_head, _) = store.head()?;
    let checkpoint_since_ms = match store.last_checkpoint()? {
        Some(c) => Some(c.at_ms),
        None if ledger_head > 0 => store.entries_page(0, 1)?.first().map(|e| e.at_ms),
        None => None,
    };
    let outage_active = shared
        .outages
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|w| w.contains(now_ms));
    let spend = match &shared.spend {
        Some(pay) => {
            let wall_s = shared.wall.now_ms().div_euclid(1000);
            let totals = pay
                .spend
                .totals("", wall_s)
                .map_err(|e| MetricsError::Spend(e.to_string()))?;
            let policy = pay.policy.current();
            Some(SpendScrape {
                spent_today: totals.day,
                per_call: policy.max_per_call_usd,
                per_subject_per_day: policy.max_per_subject_per_day_usd,
                per_day: policy.max_per_day_usd,
            })
        }
        None => None,
    };
    let (outbox_pending, outbox_dead) = store.outbox_counts()?;
    Ok(Scrape {
        now_ms,
        verdicts,
        ledger_head,
        checkpoint_since_ms,
        outage_active,
        spend,
        outbox_pending,
        outbox_dead,
    })
}
