//! The subjects as the API and the pages serve them, in memory. Each subject is one compact
//! entry: its id as 16 bytes, its URL and category shared (`Arc<str>`, one copy for all the maps
//! that name it), its state and revision, and once it has a score what the index and the list
//! show of it (the latest score summarised, what the index sorts it by, the entry that published
//! it), read at the start from each subject's latest score row alone: never its daily rows, its
//! runs or the rest of the ledger. A scored subject costs about a kilobyte here, so 100,000 fit
//! in a few tens of megabytes. What a subject's own routes show (its page: the latest document,
//! daily history, each check's last receipt, paid calls, revisions; its signed score envelope;
//! its daily history as JSON) is read from the store through the reader pool when asked for and
//! kept in a cache of bounded size ([`CACHE_BYTES`], least recently served out first), never one
//! of each per subject. The pipeline marks subjects whose score it just wrote
//! (`ReadSide::score_changes`); a task of the view rebuilds those, and re-reads the subject rows
//! every few seconds for subjects added or delisted without a new score. Readers take an `Arc`
//! of the whole view: a request never waits for a rebuild.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::pages::facts::{DayPoint, Latest, SubjectFacts};
use super::pages::order::{IndexOrder, IndexQuery};
use super::signed::{SignedScore, envelope_parts};
use super::types::{
    BandView, DailyScore, OutlookView, ScoreHistory, ScoreSummaryView, SubjectReadiness,
    SubjectSummary, Trend, ValueView, WatchView,
};
use crate::checks::history::OutageWindow;
use crate::daemon::pipeline::ReadSide;
use crate::ledger::key::ReporterKey;
use crate::score::document::ScoreDocument;
use crate::score::headline::ScoreHeadline;
use crate::score::outlook;
use crate::store::{
    CheckedScores, LatestHeadline, ScoreRow, Store, SubjectShown, SubjectState,
    checked_latest_headline, checked_latest_score, checked_scores,
};

/// How often subject rows are re-read for changes that bring no new score.
const ROWS_EVERY: Duration = Duration::from_secs(5);
/// The most bytes of rendered subject pages and signed envelopes kept (the least recently served
/// go first).
pub(crate) const CACHE_BYTES: usize = 32 * 1024 * 1024;
/// The most bytes of preflight's answers to a PaymentRequired kept, apart from the pages and
/// envelopes: an agent sends the same 402 again and again, but any client can send new ones, and
/// those must not push the pages out.
pub(crate) const ANSWER_CACHE_BYTES: usize = 8 * 1024 * 1024;

/// A subject's id: the first 16 bytes of the SHA-256 of its URL, written as 32 lowercase hex
/// digits (`signed::subject_id`). Kept as bytes; its order is the hex form's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct SubjectKey([u8; 16]);

impl SubjectKey {
    pub(crate) fn of(url: &str) -> SubjectKey {
        let mut key = [0u8; 16];
        key.copy_from_slice(&Sha256::digest(url.as_bytes())[..16]);
        SubjectKey(key)
    }

    /// An id as written (32 lowercase hex digits); `None` for anything else.
    pub(crate) fn parse(id: &str) -> Option<SubjectKey> {
        if id.len() != 32 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        let mut key = [0u8; 16];
        hex::decode_to_slice(id, &mut key).ok()?;
        Some(SubjectKey(key))
    }

    /// The id as written.
    pub(crate) fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

/// What a subject's latest score brings to the index and the list.
pub(crate) struct Scored {
    /// The latest score, summarised (`None` when its stored document does not read back).
    pub(crate) latest: Option<ScoreSummaryView>,
    /// What the index sorts it by (`None` likewise).
    pub(crate) order: Option<IndexOrder>,
}

/// One subject, ready to serve.
pub(crate) struct SubjectEntry {
    pub(crate) key: SubjectKey,
    pub(crate) url: Arc<str>,
    pub(crate) category: Arc<str>,
    /// The latest score is withheld: its stored row does not match the ledger's score entry (an
    /// integrity error, logged); served again once the daemon publishes the next score.
    pub(crate) withheld: bool,
    pub(crate) state: SubjectState,
    pub(crate) revision: Option<Box<str>>,
    /// Once the subject has a score.
    pub(crate) scored: Option<Box<Scored>>,
    /// The rebuild that made this entry (a cached page is valid for this entry only: an entry is
    /// rebuilt, never changed, when the subject's evidence changes).
    generation: u64,
    /// `url` is its own canonical form (`http_url::canonical_subject_url`): a request naming
    /// this very text names this subject without reading the URL again (preflight).
    pub(crate) url_is_canonical: bool,
}

impl SubjectEntry {
    pub(crate) fn id(&self) -> String {
        self.key.hex()
    }

    /// The latest score, summarised, when there is one that reads back.
    pub(crate) fn latest(&self) -> Option<&ScoreSummaryView> {
        self.scored.as_ref().and_then(|s| s.latest.as_ref())
    }

    pub(crate) fn index_order(&self) -> Option<IndexOrder> {
        self.scored.as_ref().and_then(|s| s.order)
    }

    pub(crate) fn summary(&self) -> SubjectSummary {
        let id = self.id();
        SubjectSummary {
            score_url: format!("/v1/subjects/{id}/score"),
            id,
            url: self.url.to_string(),
            category: self.category.to_string(),
            state: self.state.into(),
            revision: self.revision.as_deref().map(str::to_string),
            latest: self.latest().cloned(),
        }
    }

    pub(crate) fn summary_json(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(&self.summary()).unwrap_or_default())
    }
}

/// What a subject's page shows besides its entry, read from the store when the page is made.
pub(crate) struct Details {
    /// Its latest score document, read back.
    pub(crate) latest: Latest,
    /// Its history, receipts, revisions and paid calls.
    pub(crate) facts: Arc<SubjectFacts>,
}

/// The whole view at one moment.
#[derive(Default)]
pub(crate) struct ViewData {
    /// Every subject, by id.
    pub(crate) ordered: Vec<Arc<SubjectEntry>>,
    /// The rebuilds made when it was published: a later view has a greater version.
    version: u64,
}

impl ViewData {
    /// The subject with this id (as written), if any.
    pub(crate) fn get(&self, id: &str) -> Option<&Arc<SubjectEntry>> {
        self.get_key(SubjectKey::parse(id)?)
    }

    /// The subject with this key, if any.
    pub(crate) fn get_key(&self, key: SubjectKey) -> Option<&Arc<SubjectEntry>> {
        self.ordered
            .binary_search_by(|e| e.key.cmp(&key))
            .ok()
            .map(|i| &self.ordered[i])
    }
}

/// The most index pages kept for one version of the view (one per sort, direction and page
/// asked for; a crawl of more pages renders the others per request).
const INDEX_PAGES_KEPT: usize = 64;

/// The index pages rendered from the view of `version`, by what was asked.
#[derive(Default)]
struct IndexPages {
    version: u64,
    pages: HashMap<IndexQuery, Bytes>,
}

impl IndexPages {
    /// The page kept for `query` when it was rendered from the view of `version`.
    fn get(&self, version: u64, query: IndexQuery) -> Option<Bytes> {
        if self.version != version {
            return None;
        }
        self.pages.get(&query).cloned()
    }

    /// Keeps `page` rendered from the view of `version`: a page of an older view than those kept
    /// is dropped; one of a newer view replaces them all.
    fn keep(&mut self, version: u64, query: IndexQuery, page: Bytes) {
        if version < self.version {
            return;
        }
        if version > self.version {
            self.version = version;
            self.pages.clear();
        }
        if self.pages.len() < INDEX_PAGES_KEPT {
            self.pages.insert(query, page);
        }
    }
}

/// What the cache keeps of a subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Made {
    /// Its page (valid under the outage windows it was rendered with).
    Page,
    /// Its latest score's signed envelope.
    Envelope,
    /// Its daily history as JSON.
    History,
    /// The terms its latest score rated, as preflight compares them (`preflight.rs`).
    Rated,
    /// Preflight's answer for its URL alone (without a PaymentRequired).
    Preflight,
    /// Preflight's answer for its URL and one PaymentRequired, by the SHA-256 of the text sent
    /// (`preflight::SentKey`): kept apart, in the view's cache of answers.
    PreflightWith([u8; 32]),
    /// Its agent readiness as JSON.
    Readiness,
    /// Its findings and whose its gaps and failures are, as JSON.
    Findings,
}

/// Pages and envelopes made on request, least recently served first out, within `limit` bytes
/// ([`CACHE_BYTES`] unless made for something else).
struct Cache {
    made: HashMap<(SubjectKey, Made), Kept>,
    /// Last use -> what.
    used: BTreeMap<u64, (SubjectKey, Made)>,
    tick: u64,
    bytes: usize,
    limit: usize,
}

impl Default for Cache {
    fn default() -> Cache {
        Cache::within(CACHE_BYTES)
    }
}

struct Kept {
    generation: u64,
    outages: Vec<OutageWindow>,
    body: Bytes,
    used: u64,
}

impl Cache {
    fn within(limit: usize) -> Cache {
        Cache {
            made: HashMap::new(),
            used: BTreeMap::new(),
            tick: 0,
            bytes: 0,
            limit,
        }
    }

    fn get(&mut self, entry: &SubjectEntry, made: Made, outages: &[OutageWindow]) -> Option<Bytes> {
        let kept = self.made.get_mut(&(entry.key, made))?;
        if kept.generation != entry.generation || kept.outages != outages {
            return None;
        }
        self.tick += 1;
        self.used.remove(&kept.used);
        kept.used = self.tick;
        self.used.insert(self.tick, (entry.key, made));
        Some(kept.body.clone())
    }

    fn put(&mut self, entry: &SubjectEntry, made: Made, outages: &[OutageWindow], body: Bytes) {
        let id = (entry.key, made);
        self.remove(&id);
        if body.len() > self.limit {
            return;
        }
        while self.bytes + body.len() > self.limit {
            let Some((_, oldest)) = self.used.pop_first() else {
                break;
            };
            self.remove(&oldest);
        }
        self.tick += 1;
        self.bytes += body.len();
        self.used.insert(self.tick, id);
        self.made.insert(
            id,
            Kept {
                generation: entry.generation,
                outages: outages.to_vec(),
                body,
                used: self.tick,
            },
        );
    }

    fn remove(&mut self, id: &(SubjectKey, Made)) {
        if let Some(old) = self.made.remove(id) {
            self.used.remove(&old.used);
            self.bytes -= old.body.len();
        }
    }
}

pub(crate) struct View {
    current: RwLock<Arc<ViewData>>,
    cache: Mutex<Cache>,
    /// Preflight's answers to a PaymentRequired ([`Made::PreflightWith`]), within
    /// [`ANSWER_CACHE_BYTES`].
    answers: Mutex<Cache>,
    /// The index pages rendered from the view of one version, by query.
    index_pages: Mutex<IndexPages>,
    /// Signs envelopes on request.
    key: ReporterKey,
    /// The ledger's read-only handle: what a subject's own routes show is read from it.
    store: Arc<dyn Store>,
    /// What the findings read besides a run (the facilitators we know).
    findings: crate::checks::findings::FindingsContext,
    /// Every subject's latest payTo (its latest declared requirements), by URL, with the
    /// generation of the entry it was read for: read again only for entries rebuilt since (the
    /// payTo collision finding; the first findings request reads every subject's once).
    pay_tos: Mutex<PayTos>,
}

/// Each subject's latest payTo, with the generation of the entry it was read for.
type PayTos = HashMap<Arc<str>, (u64, Option<String>)>;

impl View {
    /// Builds the view from the store now, then keeps it fresh from a task on the current
    /// runtime (it ends when the daemon's shared state is dropped).
    pub(crate) fn start(shared: Arc<ReadSide>, key: ReporterKey) -> Arc<View> {
        let view = Arc::new(View {
            current: RwLock::new(Arc::new(ViewData::default())),
            cache: Mutex::new(Cache::default()),
            answers: Mutex::new(Cache::within(ANSWER_CACHE_BYTES)),
            index_pages: Mutex::default(),
            key,
            store: shared.store.clone(),
            findings: shared.findings.clone(),
            pay_tos: Mutex::default(),
        });
        let mut builder = Builder {
            shared: Arc::downgrade(&shared),
            entries: HashMap::new(),
            categories: BTreeSet::new(),
            generation: 0,
        };
        // The first build reads what the daemon's start read (each subject's latest score, its
        // headline), not the store again.
        let start_scores = shared.start_scores.take().unwrap_or_default();
        builder.refresh_rows(&shared, true, start_scores);
        view.publish(&builder);
        let weak_view = Arc::downgrade(&view);
        drop(shared);
        tokio::spawn(async move { builder.run(weak_view).await });
        view
    }

    /// The view now (cheap: one `Arc` clone under a read lock held for that long).
    pub(crate) fn current(&self) -> Arc<ViewData> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The subject's page under `outages`: from the cache when it was rendered from this very
    /// entry under the same windows, else `render`ed from its details read now (outside the
    /// lock: two first requests may both render; the bytes are the same), kept for the next
    /// request.
    pub(crate) fn page(
        &self,
        entry: &SubjectEntry,
        outages: &[OutageWindow],
        render: impl FnOnce(Details) -> String,
    ) -> Bytes {
        self.made(entry, Made::Page, outages, || {
            Some(Bytes::from(render(self.details(entry))))
        })
        .unwrap_or_default()
    }

    /// The index page for `query` as rendered from `view` (of this view's version), when one is
    /// kept.
    pub(crate) fn index_page(&self, view: &ViewData, query: IndexQuery) -> Option<Bytes> {
        let kept = self.index_pages.lock().unwrap_or_else(|p| p.into_inner());
        kept.get(view.version, query)
    }

    /// Keeps `page` as the index page for `query` rendered from `view` (a view older than the
    /// pages kept is not kept; a newer one replaces them).
    pub(crate) fn keep_index_page(&self, view: &ViewData, query: IndexQuery, page: Bytes) {
        let mut kept = self.index_pages.lock().unwrap_or_else(|p| p.into_inner());
        kept.keep(view.version, query, page);
    }

    /// The signed envelope of the subject's latest score (`None` without a score, or, logged,
    /// if it cannot be made): from the cache, else signed now.
    pub(crate) fn signed(&self, entry: &SubjectEntry) -> Option<Bytes> {
        entry.scored.as_ref()?;
        self.made(entry, Made::Envelope, &[], || {
            let row = self.latest_row(entry)?;
            self.sign(&entry.url, &row.document, row.seq)
        })
    }

    /// The subject's daily history as JSON: from the cache, else read now.
    pub(crate) fn history_json(&self, entry: &SubjectEntry) -> Bytes {
        self.made(entry, Made::History, &[], || {
            let days = match &entry.scored {
                None => Vec::new(),
                Some(_) => self
                    .scores(entry)
                    .daily
                    .iter()
                    .filter_map(|day| read_back(&entry.url, day).map(|doc| daily_of(day, &doc)))
                    .collect(),
            };
            let history = ScoreHistory {
                subject_id: entry.id(),
                url: entry.url.to_string(),
                days,
            };
            serde_json::to_vec(&history).ok().map(Bytes::from)
        })
        .unwrap_or_default()
    }

    /// The subject's agent readiness as JSON: from the cache, else read from its entries now
    /// (`None`, logged, when they cannot be read).
    pub(crate) fn readiness_json(&self, entry: &SubjectEntry) -> Option<Bytes> {
        self.made(entry, Made::Readiness, &[], || {
            let mut facts = SubjectFacts::default();
            if let Err(e) = facts.refresh(self.store.as_ref(), &entry.url, Vec::new()) {
                tracing::warn!(subject = %entry.url, error = %e, "API view: reading readiness failed");
                return None;
            }
            let answer = SubjectReadiness {
                subject_id: entry.id(),
                url: entry.url.to_string(),
                through_seq: facts.through_seq,
                readiness: facts.readiness(),
            };
            serde_json::to_vec(&answer).ok().map(Bytes::from)
        })
    }

    /// The subject's findings (`probes/findings/`) and whose its failed paid checks
    /// and `unmeasured` results are (`probes/attribution.md`), as JSON: from the cache, else
    /// read from its entries now (`None`, logged, when they cannot be read). The payTo collision
    /// is read across every subject's latest payTo as the view holds them now.
    pub(crate) fn findings_json(&self, entry: &SubjectEntry) -> Option<Bytes> {
        self.made(entry, Made::Findings, &[], || {
            let mut facts = SubjectFacts {
                findings_ctx: self.findings.clone(),
                ..SubjectFacts::default()
            };
            if let Err(e) = facts.refresh(self.store.as_ref(), &entry.url, Vec::new()) {
                tracing::warn!(subject = %entry.url, error = %e, "API view: reading findings failed");
                return None;
            }
            let mut findings: Vec<_> = facts.findings.into_values().collect();
            if let Some(collision) = self.payto_collision(&entry.url) {
                let at = findings
                    .first()
                    .map(|f| f.receipt.at.clone())
                    .unwrap_or_default();
                let vantage = findings
                    .first()
                    .map(|f| f.receipt.vantage.clone())
                    .unwrap_or_default();
                findings.retain(|f| f.id != crate::checks::findings::FindingId::PaytoCollision);
                findings.push(crate::checks::findings::finding_of(
                    crate::checks::findings::FindingId::PaytoCollision,
                    collision,
                    &vantage,
                    &at,
                ));
                findings.sort_by_key(|f| f.id);
            }
            let answer = super::types::SubjectFindings::new(
                entry.id(),
                entry.url.to_string(),
                facts.through_seq,
                &findings,
                &facts.parties,
                &facts.party_counts,
            );
            serde_json::to_vec(&answer).ok().map(Bytes::from)
        })
    }

    /// The payTo collision of `url` over every subject's latest payTo (`None` when the store
    /// cannot be read).
    fn payto_collision(&self, url: &str) -> Option<crate::evidence::Conclusion> {
        use crate::checks::findings::{PayToOf, payto_collisions};
        let data = self.current();
        let mut kept = self.pay_tos.lock().unwrap_or_else(|p| p.into_inner());
        let mut all = Vec::with_capacity(data.ordered.len());
        for e in &data.ordered {
            let pay_to = match kept.get(&e.url) {
                Some((generation, pay_to)) if *generation == e.generation => pay_to.clone(),
                _ => {
                    let pay_to = match self.store.latest_declared(&e.url) {
                        Ok(d) => d.and_then(|d| d.pay_to),
                        Err(err) => {
                            tracing::warn!(subject = %e.url, error = %err, "API view: reading a payTo failed");
                            return None;
                        }
                    };
                    kept.insert(e.url.clone(), (e.generation, pay_to.clone()));
                    pay_to
                }
            };
            let host = crate::checks::findings::host_of(&e.url);
            all.push(PayToOf {
                subject: e.url.to_string(),
                host,
                pay_to,
            });
        }
        payto_collisions(&all).remove(url)
    }

    /// The latest score document of a subject as the index shows it, read from the store (the
    /// rows of one index page).
    pub(crate) fn latest_document(&self, entry: &SubjectEntry) -> Latest {
        if entry.scored.is_none() {
            return Latest::None;
        }
        match self.latest_row(entry) {
            Some(row) => Latest::of(Some(&row.document)),
            None => Latest::Unreadable("the stored score could not be read now".into()),
        }
    }

    /// The subject's latest score row as checked against the ledger (a newer one than the
    /// entry's when the daemon published one since: the view rebuilds the entry shortly).
    fn latest_row(&self, entry: &SubjectEntry) -> Option<ScoreRow> {
        match checked_latest_score(self.store.as_ref(), &entry.url) {
            Ok(checked) => {
                // The start read the row's headline, not its document: a document that is not
                // the one its entry published is caught here.
                for broken in &checked.mismatches {
                    tracing::error!(subject = %entry.url, error = %broken, "integrity: a stored score row differs from the ledger; it is not served");
                }
                checked.latest
            }
            Err(e) => {
                tracing::warn!(subject = %entry.url, error = %e, "API view: reading a score failed");
                None
            }
        }
    }

    /// The subject's score rows as checked against the ledger.
    fn scores(&self, entry: &SubjectEntry) -> CheckedScores {
        checked_scores(self.store.as_ref(), &entry.url).unwrap_or_else(|e| {
            tracing::warn!(subject = %entry.url, error = %e, "API view: reading scores failed");
            CheckedScores::default()
        })
    }

    /// What the subject's page shows, read now: its scores and the facts folded from its
    /// entries.
    fn details(&self, entry: &SubjectEntry) -> Details {
        let url = &entry.url;
        let scores = if entry.scored.is_some() {
            self.scores(entry)
        } else {
            CheckedScores::default()
        };
        let latest = Latest::of(scores.latest.as_ref().map(|s| s.document.as_slice()));
        let points = scores
            .daily
            .iter()
            .filter_map(|day| read_back(url, day).map(|doc| DayPoint::of(day, &doc)))
            .collect();
        let mut facts = SubjectFacts {
            findings_ctx: self.findings.clone(),
            ..SubjectFacts::default()
        };
        if let Err(e) = facts.refresh(self.store.as_ref(), url, points) {
            tracing::warn!(subject = %url, error = %e, "API view: reading the page's entries failed");
        }
        if let Some(collision) = self.payto_collision(url) {
            use crate::checks::findings::{FindingId, finding_of};
            let (vantage, at) = facts
                .findings
                .values()
                .next()
                .map(|f| (f.receipt.vantage.clone(), f.receipt.at.clone()))
                .unwrap_or_default();
            facts.findings.insert(
                FindingId::PaytoCollision,
                finding_of(FindingId::PaytoCollision, collision, &vantage, &at),
            );
        }
        Details {
            latest,
            facts: Arc::new(facts),
        }
    }

    /// What the cache keeps of `entry` (made from this very entry), without making it: for a
    /// route that answers on the runtime and goes off it only on a miss.
    pub(crate) fn kept(&self, entry: &SubjectEntry, made: Made) -> Option<Bytes> {
        self.cache_of(made)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(entry, made, &[])
    }

    /// Keeps `body` as what `made` is for `entry`.
    pub(crate) fn keep(&self, entry: &SubjectEntry, made: Made, body: Bytes) {
        self.cache_of(made)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(entry, made, &[], body);
    }

    /// The cache that keeps `made`: answers to a PaymentRequired apart from the rest.
    fn cache_of(&self, made: Made) -> &Mutex<Cache> {
        match made {
            Made::PreflightWith(_) => &self.answers,
            _ => &self.cache,
        }
    }

    /// What the cache keeps of `entry`, else `make` from the store now (blocking: call it off
    /// the runtime) and kept for the next request.
    pub(crate) fn kept_or_made(
        &self,
        entry: &SubjectEntry,
        made: Made,
        make: impl FnOnce(&dyn Store) -> Option<Bytes>,
    ) -> Option<Bytes> {
        self.made(entry, made, &[], || make(self.store.as_ref()))
    }

    fn made(
        &self,
        entry: &SubjectEntry,
        made: Made,
        outages: &[OutageWindow],
        make: impl FnOnce() -> Option<Bytes>,
    ) -> Option<Bytes> {
        let lock = || {
            self.cache_of(made)
                .lock()
                .unwrap_or_else(|p| p.into_inner())
        };
        if let Some(body) = lock().get(entry, made, outages) {
            return Some(body);
        }
        let body = make()?;
        lock().put(entry, made, outages, body.clone());
        Some(body)
    }

    /// The signed envelope of a stored score document.
    fn sign(&self, url: &str, document: &[u8], seq: u64) -> Option<Bytes> {
        let (mut envelope, message): (SignedScore, Vec<u8>) = match envelope_parts(
            document,
            seq,
            &self.key.public_key(),
        ) {
            Ok(parts) => parts,
            Err(e) => {
                tracing::warn!(subject = %url, error = %e, "API view: a stored score cannot be enveloped");
                return None;
            }
        };
        match self.key.sign(&message) {
            Ok(signature) => envelope.signature = hex::encode(signature),
            Err(e) => {
                tracing::error!(error = %e, "API view: signing a score failed");
                return None;
            }
        }
        serde_json::to_vec(&envelope).ok().map(Bytes::from)
    }

    fn publish(&self, builder: &Builder) {
        let mut ordered: Vec<Arc<SubjectEntry>> = builder.entries.values().cloned().collect();
        ordered.sort_unstable_by_key(|e| e.key);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(ViewData {
            ordered,
            version: builder.generation,
        });
    }
}

/// Runs `read` (a store read of one subject's routes, which may take a while for a subject with
/// a long history) on the blocking pool, so the runtime's workers keep serving meanwhile.
pub(crate) async fn off_runtime<T: Send + 'static>(read: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(read).await {
        Ok(made) => made,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// A stored daily score read back (`None`, logged, when it does not).
fn read_back(url: &str, day: &ScoreRow) -> Option<ScoreDocument> {
    ScoreDocument::from_slice(&day.document)
        .inspect_err(|e| {
            tracing::warn!(subject = %url, day = %day.day, error = %e, "API view: a stored daily score does not read back")
        })
        .ok()
}

/// What a subject's row says that the view shows.
type RowView<'a> = SubjectShown<'a>;

fn differs(row: &RowView, entry: &SubjectEntry) -> bool {
    entry.state != row.state
        || *entry.category != *row.category
        || entry.revision.as_deref() != row.revision
}

struct Builder {
    shared: std::sync::Weak<ReadSide>,
    /// By URL (the key is the entry's own `url`).
    entries: HashMap<Arc<str>, Arc<SubjectEntry>>,
    /// Every category seen, shared by the entries (a few strings for any number of subjects).
    categories: BTreeSet<Arc<str>>,
    generation: u64,
}

impl Builder {
    async fn run(mut self, view: std::sync::Weak<View>) {
        loop {
            let Some(shared) = self.shared.upgrade() else {
                return;
            };
            let changes = shared.score_changes.clone();
            drop(shared);
            let _ = tokio::time::timeout(ROWS_EVERY, changes.wait()).await;
            let Some(shared) = self.shared.upgrade() else {
                return;
            };
            let Some(view) = view.upgrade() else {
                return;
            };
            let changed = changes.take();
            // Store reads and signatures block: off the runtime's workers.
            let rebuilt = tokio::task::spawn_blocking(move || {
                let mut me = self;
                let any_rows = me.refresh_rows(&shared, false, HashMap::new());
                let mut any = any_rows;
                for url in changed {
                    let Some(entry) = me.entries.get(url.as_str()).cloned() else {
                        continue;
                    };
                    let row = RowView {
                        url: &entry.url,
                        category: &entry.category,
                        state: entry.state,
                        revision: entry.revision.as_deref(),
                    };
                    me.rebuild(&shared, &row);
                    any = true;
                }
                (any, me)
            })
            .await;
            let (any, builder) = match rebuilt {
                Ok(rebuilt) => rebuilt,
                Err(e) => {
                    // Only a bug gets here; the API keeps serving the last view it had.
                    tracing::error!(error = %e, "API view: a rebuild failed; the view is no longer refreshed");
                    return;
                }
            };
            self = builder;
            if any {
                view.publish(&self);
            }
        }
    }

    /// Re-reads the subject rows (streamed: none kept); rebuilds subjects that are new or whose
    /// row changed (`all`: every subject), from their latest score in `start_scores` when it is there
    /// (what the daemon's start read), else from the store. Returns whether anything changed.
    fn refresh_rows(
        &mut self,
        shared: &ReadSide,
        all: bool,
        mut start_scores: HashMap<String, LatestHeadline>,
    ) -> bool {
        // Rebuilt after the read (a rebuild reads the store, which the read holds meanwhile).
        let mut stale: Vec<(String, String, SubjectState, Option<String>)> = Vec::new();
        let read = shared.store.each_subject_shown(&mut |row| {
            if all
                || self
                    .entries
                    .get(row.url)
                    .is_none_or(|old| differs(&row, old))
            {
                stale.push((
                    row.url.into(),
                    row.category.into(),
                    row.state,
                    row.revision.map(str::to_string),
                ));
            }
        });
        if let Err(e) = read {
            tracing::warn!(error = %e, "API view: reading subjects failed");
        }
        for (url, category, state, revision) in &stale {
            let row = RowView {
                url,
                category,
                state: *state,
                revision: revision.as_deref(),
            };
            match start_scores.remove(url.as_str()) {
                Some(latest) => self.put(&row, latest),
                None => self.rebuild(shared, &row),
            }
        }
        !stale.is_empty()
    }

    fn rebuild(&mut self, shared: &ReadSide, row: &RowView) {
        let url = row.url;
        // Only a row that holds what the ledger's score entries published is served or signed;
        // the latest alone is read, for its headline (the daily rows and the document are read
        // when a page or history asks).
        let latest = match checked_latest_headline(shared.store.as_ref(), url) {
            Ok((latest, mismatches)) => {
                for broken in &mismatches {
                    tracing::error!(subject = %url, error = %broken, "integrity: a stored score row differs from the ledger; it is not served");
                }
                latest
            }
            Err(e) => {
                tracing::warn!(subject = %url, error = %e, "API view: reading scores failed");
                LatestHeadline::default()
            }
        };
        self.put(row, latest);
    }

    /// The subject's entry from its row and its latest score.
    fn put(&mut self, row: &RowView, latest: LatestHeadline) {
        let url = row.url;
        let old = self.entries.get(url);
        // The URL kept once: the old entry's when there is one.
        let url: Arc<str> = old.map_or_else(|| Arc::from(url), |e| e.url.clone());
        let key = old.map_or_else(|| SubjectKey::of(&url), |e| e.key);
        let withheld = latest.withheld;
        let scored = latest.latest.map(|(seq, headline)| {
            let headline = headline.ok();
            Box::new(Scored {
                latest: headline.as_ref().map(|h| summary_of(seq, h)),
                order: headline.as_ref().map(IndexOrder::of_headline),
            })
        });
        let category = match self.categories.get(row.category) {
            Some(c) => c.clone(),
            None => {
                let c: Arc<str> = Arc::from(row.category);
                self.categories.insert(c.clone());
                c
            }
        };
        self.generation += 1;
        let url_is_canonical = old.map_or_else(
            || crate::http_url::canonical_subject_url(&url).is_ok_and(|c| *c == *url),
            |e| e.url_is_canonical,
        );
        let entry = SubjectEntry {
            key,
            url_is_canonical,
            url: url.clone(),
            category,
            withheld,
            state: row.state,
            revision: row.revision.map(Box::from),
            scored,
            generation: self.generation,
        };
        self.entries.insert(url, Arc::new(entry));
    }
}

fn trend_of(trend: outlook::Trend) -> Trend {
    match trend {
        outlook::Trend::Improving => Trend::Improving,
        outlook::Trend::Stable => Trend::Stable,
        outlook::Trend::Declining => Trend::Declining,
        outlook::Trend::Unknown => Trend::Unknown,
    }
}

/// A score published by entry `seq`, summarised from its headline.
fn summary_of(seq: u64, h: &ScoreHeadline) -> ScoreSummaryView {
    let (grade, grade_provisional) = match &h.grade {
        Some(g) => (Some(g.clone()), false),
        None => (h.provisional_grade.clone(), true),
    };
    ScoreSummaryView {
        as_of: h.as_of.clone(),
        score: h.score.as_f64(),
        capped_score: h.capped_score.as_f64(),
        band: BandView {
            low: h.band_low,
            high: h.band_high,
        },
        grade,
        grade_provisional,
        verdict: h.verdict.into(),
        confidence: h.confidence.clone(),
        outlook: OutlookView {
            trend: trend_of(h.trend),
            delta: h.delta.map(|d| d.as_f64()),
        },
        watch: WatchView {
            on_watch: h.on_watch,
            reasons: h.watch_reasons.clone(),
        },
        value: ValueView {
            price_usd: Some(h.price_usd),
            price_percentile: h.price_percentile,
            usd_per_valid_kib: h.usd_per_valid_kib,
            peers: u64::from(h.peers),
        },
        rubric_sha256: h.rubric_sha256.clone(),
        ledger_seq: seq,
        document_sha256: h.document_sha256.clone(),
    }
}

fn daily_of(row: &ScoreRow, doc: &ScoreDocument) -> DailyScore {
    let headline = ScoreHeadline::of(doc, crate::evidence::sha256_hex(&row.document));
    let s = summary_of(row.seq, &headline);
    DailyScore {
        day: row.day.clone(),
        as_of: s.as_of,
        score: s.score,
        capped_score: s.capped_score,
        band: s.band,
        grade: s.grade,
        grade_provisional: s.grade_provisional,
        verdict: s.verdict,
        confidence: s.confidence,
        on_watch: s.watch.on_watch,
        ledger_seq: row.seq,
        document_sha256: s.document_sha256,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_key_is_the_published_id() {
        let url = "https://api.example.com/weather";
        let key = SubjectKey::of(url);
        let id = super::super::signed::subject_id(url);
        assert_eq!(key.hex(), id);
        assert_eq!(SubjectKey::parse(&id), Some(key));
        for bad in [&id[1..], &id.to_uppercase(), &format!("{}g", &id[1..]), ""] {
            assert_eq!(SubjectKey::parse(bad), None, "{bad:?}");
        }
        // Ordered as the ids are: the view's order is by id.
        let mut urls: Vec<String> = (0..50).map(|i| format!("https://s{i}.test/")).collect();
        urls.sort_by_key(|u| SubjectKey::of(u));
        let ids: Vec<String> = urls.iter().map(|u| SubjectKey::of(u).hex()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }

    /// An index page is served only to the view it was rendered from: a newer view (a score
    /// published since) misses and drops it, a page rendered from an older view than the kept
    /// ones is not kept, and no more than the budget's pages are kept for one view.
    #[test]
    fn index_pages_are_kept_for_the_view_they_were_rendered_from() {
        let q = |page| IndexQuery {
            page,
            ..IndexQuery::default()
        };
        let mut kept = IndexPages::default();
        kept.keep(3, q(1), Bytes::from_static(b"v3"));
        assert_eq!(kept.get(3, q(1)).as_deref(), Some(&b"v3"[..]));
        assert_eq!(kept.get(3, q(2)), None, "another query");
        assert_eq!(kept.get(4, q(1)), None, "a newer view");
        // A request that read the older view and rendered late does not replace the newer page.
        kept.keep(4, q(1), Bytes::from_static(b"v4"));
        kept.keep(3, q(1), Bytes::from_static(b"late"));
        assert_eq!(kept.get(4, q(1)).as_deref(), Some(&b"v4"[..]));
        assert_eq!(kept.get(3, q(1)), None);
        for page in 2..=(INDEX_PAGES_KEPT + 10) {
            kept.keep(4, q(page), Bytes::from_static(b"p"));
        }
        assert_eq!(kept.pages.len(), INDEX_PAGES_KEPT);
        assert!(kept.get(4, q(1)).is_some(), "the first pages stay");
    }

    fn entry(url: &str, generation: u64) -> SubjectEntry {
        SubjectEntry {
            key: SubjectKey::of(url),
            url: Arc::from(url),
            category: Arc::from("uncategorised"),
            withheld: false,
            state: SubjectState::Active,
            revision: None,
            scored: None,
            generation,
            url_is_canonical: true,
        }
    }

    /// Every subject's page rendered once (a crawl) keeps at most the budget's bytes; the pages
    /// served last are the ones kept; a rebuilt entry or other outage windows miss.
    #[test]
    fn made_pages_are_kept_within_a_budget_least_recently_served_out_first() {
        let mut cache = Cache::default();
        let page = Bytes::from(vec![b'x'; 100 * 1024]);
        let n = 2 * CACHE_BYTES / page.len();
        let entries: Vec<SubjectEntry> = (0..n)
            .map(|i| entry(&format!("https://s{i}.test/"), 1))
            .collect();
        for (i, e) in entries.iter().enumerate() {
            cache.put(e, Made::Page, &[], page.clone());
            // The first subject is served again and again: it stays.
            if i % 10 == 0 {
                assert!(cache.get(&entries[0], Made::Page, &[]).is_some(), "at {i}");
            }
        }
        assert!(cache.bytes <= CACHE_BYTES, "{} bytes kept", cache.bytes);
        assert_eq!(cache.made.len(), CACHE_BYTES / page.len());
        assert_eq!(cache.used.len(), cache.made.len());
        assert!(
            cache.get(&entries[n - 1], Made::Envelope, &[]).is_none(),
            "a page is not an envelope"
        );
        assert!(cache.get(&entries[0], Made::Page, &[]).is_some());
        assert!(
            cache.get(&entries[1], Made::Page, &[]).is_none(),
            "the oldest went first"
        );
        assert!(cache.get(&entries[n - 1], Made::Page, &[]).is_some());
        let rebuilt = entry("https://s0.test/", 2);
        assert!(
            cache.get(&rebuilt, Made::Page, &[]).is_none(),
            "another entry"
        );
        let outage = [OutageWindow {
            from_ms: 0,
            to_ms: None,
            of: Default::default(),
        }];
        assert!(
            cache.get(&entries[0], Made::Page, &outage).is_none(),
            "other outages"
        );
        // A page larger than the budget is served, not kept.
        cache.put(
            &entries[0],
            Made::Page,
            &[],
            Bytes::from(vec![0; CACHE_BYTES + 1]),
        );
        assert!(cache.get(&entries[0], Made::Page, &[]).is_none());
        assert!(cache.bytes <= CACHE_BYTES);
    }

    #[test]
    fn a_subject_without_entries_serves_an_empty_history_and_its_summary() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::sqlite::SqliteStore::open(dir.path()).unwrap();
        let view = View {
            current: RwLock::default(),
            cache: Mutex::default(),
            answers: Mutex::default(),
            index_pages: Mutex::default(),
            key: ReporterKey::generate(&dir.path().join("reporter.key")).unwrap(),
            store: Arc::new(store.reader()),
            findings: Default::default(),
            pay_tos: Mutex::default(),
        };
        let e = entry("https://s.test/", 1);
        let summary: SubjectSummary = serde_json::from_slice(&e.summary_json()).unwrap();
        assert_eq!(summary.id, e.id());
        assert_eq!(summary.score_url, format!("/v1/subjects/{}/score", e.id()));
        assert!(summary.latest.is_none() && e.scored.is_none());
        assert_eq!(view.latest_document(&e), Latest::None);
        assert!(view.signed(&e).is_none());
        let history: ScoreHistory = serde_json::from_slice(&view.history_json(&e)).unwrap();
        assert!(history.days.is_empty() && history.url == "https://s.test/");
        let details = view.details(&e);
        assert_eq!(details.latest, Latest::None);
        assert_eq!(*details.facts, SubjectFacts::default());
    }
}
