//! The subjects as the API and the pages serve them, in memory: each subject's summary, its signed
//! score envelope and its daily history, serialised once when its score changes (never a store
//! read or a signature per request), and what its page shows (`pages/facts.rs`: the score
//! document read back, receipts, paid calls, revisions), brought up to date at the same time. The pipeline marks subjects whose score it just wrote
//! (`Shared::score_changes`); a task of the view rebuilds those, and re-reads the subject rows
//! every few seconds for subjects added or delisted without a new score. Readers take an `Arc` of
//! the whole view: a request never waits for a rebuild.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;

use super::pages::facts::{DayPoint, Latest, SubjectFacts};
use super::signed::{SignedScore, envelope_parts, subject_id};
use super::types::{
    BandView, DailyScore, OutlookView, ScoreHistory, ScoreSummaryView, SubjectSummary, Trend,
    ValueView, WatchView,
};
use crate::checks::history::OutageWindow;
use crate::daemon::pipeline::Shared;
use crate::ledger::key::ReporterKey;
use crate::score::document::ScoreDocument;
use crate::score::outlook;
use crate::store::{CheckedScores, ScoreRow, SubjectRow, SubjectState, checked_scores};

/// How often subject rows are re-read for changes that bring no new score.
const ROWS_EVERY: Duration = Duration::from_secs(5);

/// One subject, ready to serve.
pub(crate) struct SubjectEntry {
    pub(crate) summary: SubjectSummary,
    pub(crate) summary_json: Bytes,
    /// The signed envelope of the latest score, when there is one.
    pub(crate) signed: Option<Bytes>,
    /// The latest score is withheld: its stored row does not match the ledger's score entry (an
    /// integrity error, logged); served again once the daemon publishes the next score.
    pub(crate) withheld: bool,
    pub(crate) history_json: Bytes,
    pub(crate) state: SubjectState,
    /// What the subject's page shows.
    pub(crate) facts: Arc<SubjectFacts>,
    /// The subject's page as last rendered, with the outage windows it was rendered with: the
    /// page is a pure function of this entry and those windows, so it is rendered once per entry
    /// (an entry is rebuilt, never changed, when the subject's evidence changes) and again only
    /// when our outages change.
    pub(crate) page: Mutex<Option<(Vec<OutageWindow>, Bytes)>>,
}

impl SubjectEntry {
    /// The subject's page under `outages`: the cached bytes when they were rendered under the
    /// same windows, else `render` (outside the lock: two first requests may both render; the
    /// bytes are the same).
    pub(crate) fn page(&self, outages: &[OutageWindow], render: impl FnOnce() -> String) -> Bytes {
        if let Some((seen, bytes)) = &*self.page.lock().unwrap_or_else(|p| p.into_inner())
            && seen == outages
        {
            return bytes.clone();
        }
        let bytes = Bytes::from(render());
        *self.page.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((outages.to_vec(), bytes.clone()));
        bytes
    }
}

/// The whole view at one moment.
#[derive(Default)]
pub(crate) struct ViewData {
    pub(crate) by_id: HashMap<String, Arc<SubjectEntry>>,
    /// Every subject, by id.
    pub(crate) ordered: Vec<Arc<SubjectEntry>>,
}

pub(crate) struct View {
    current: RwLock<Arc<ViewData>>,
}

impl View {
    /// Builds the view from the store now, then keeps it fresh from a task on the current
    /// runtime (it ends when the daemon's shared state is dropped).
    pub(crate) fn start(shared: Arc<Shared>, key: ReporterKey) -> Arc<View> {
        let view = Arc::new(View {
            current: RwLock::new(Arc::new(ViewData::default())),
        });
        let mut builder = Builder {
            shared: Arc::downgrade(&shared),
            key,
            entries: BTreeMap::new(),
            rows: BTreeMap::new(),
            facts: BTreeMap::new(),
        };
        builder.refresh_rows(&shared, true);
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

    fn publish(&self, builder: &Builder) {
        let ordered: Vec<Arc<SubjectEntry>> = builder.entries.values().cloned().collect();
        let by_id = ordered
            .iter()
            .map(|e| (e.summary.id.clone(), e.clone()))
            .collect();
        *self.current.write().unwrap_or_else(|p| p.into_inner()) =
            Arc::new(ViewData { by_id, ordered });
    }
}

struct Builder {
    shared: std::sync::Weak<Shared>,
    key: ReporterKey,
    /// By subject id.
    entries: BTreeMap<String, Arc<SubjectEntry>>,
    /// The rows the entries were built from, by URL.
    rows: BTreeMap<String, SubjectRow>,
    /// The pages' facts by URL, folded forward from the ledger (never re-read from the start).
    facts: BTreeMap<String, SubjectFacts>,
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
                let any_rows = me.refresh_rows(&shared, false);
                let mut any = any_rows;
                for url in changed {
                    if let Some(row) = me.rows.get(&url).cloned() {
                        me.rebuild(&shared, &row);
                        any = true;
                    }
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

    /// Re-reads the subject rows; rebuilds subjects that are new or whose row changed (`all`:
    /// every subject). Returns whether anything changed.
    fn refresh_rows(&mut self, shared: &Shared, all: bool) -> bool {
        let rows = match shared.store.subjects() {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "API view: reading subjects failed");
                return false;
            }
        };
        let mut changed = false;
        for row in rows {
            let differs = self.rows.get(&row.url).is_none_or(|old| {
                old.state != row.state
                    || old.category != row.category
                    || old.revision != row.revision
            });
            if all || differs {
                self.rebuild(shared, &row);
                changed = true;
            }
        }
        changed
    }

    fn rebuild(&mut self, shared: &Shared, row: &SubjectRow) {
        self.rows.insert(row.url.clone(), row.clone());
        let id = subject_id(&row.url);
        // Only rows that hold what the ledger's score entries published are served or signed.
        let scores = checked_scores(shared.store.as_ref(), &row.url).unwrap_or_else(|e| {
            tracing::warn!(subject = %row.url, error = %e, "API view: reading scores failed");
            CheckedScores::default()
        });
        for broken in &scores.mismatches {
            tracing::error!(subject = %row.url, error = %broken, "integrity: a stored score row differs from the ledger; it is not served");
        }
        let withheld = scores.latest.is_none() && !scores.mismatches.is_empty();
        let (latest, days) = (scores.latest, scores.daily);
        // Each stored document is read back once, with the type that wrote it.
        let latest_doc = Latest::of(latest.as_ref().map(|s| s.document.as_slice()));
        let (summary_view, signed) = match (&latest, latest_doc.doc()) {
            (Some(score), Some(doc)) => (Some(summary_of(score, doc)), self.sign(score)),
            (Some(score), None) => (None, self.sign(score)),
            (None, _) => (None, None),
        };
        let mut daily = Vec::with_capacity(days.len());
        let mut points = Vec::with_capacity(days.len());
        for day in &days {
            match ScoreDocument::from_slice(&day.document) {
                Ok(doc) => {
                    daily.push(daily_of(day, &doc));
                    points.push(DayPoint::of(day, &doc));
                }
                Err(e) => {
                    tracing::warn!(subject = %row.url, day = %day.day, error = %e, "API view: a stored daily score does not read back")
                }
            }
        }
        let facts = self.facts.entry(row.url.clone()).or_default();
        if let Err(e) = facts.refresh(shared.store.as_ref(), &row.url, latest_doc, points) {
            // The page keeps what it had; the next rebuild reads from where this one stopped.
            tracing::warn!(subject = %row.url, error = %e, "API view: reading the page's entries failed");
        }
        let facts = Arc::new(facts.clone());
        let summary = SubjectSummary {
            id: id.clone(),
            url: row.url.clone(),
            category: row.category.clone(),
            state: row.state.into(),
            revision: row.revision.clone(),
            latest: summary_view,
            score_url: format!("/v1/subjects/{id}/score"),
        };
        let history = ScoreHistory {
            subject_id: id.clone(),
            url: row.url.clone(),
            days: daily,
        };
        let entry = SubjectEntry {
            summary_json: Bytes::from(serde_json::to_vec(&summary).unwrap_or_default()),
            summary,
            signed,
            withheld,
            history_json: Bytes::from(serde_json::to_vec(&history).unwrap_or_default()),
            state: row.state,
            facts,
            page: Mutex::new(None),
        };
        self.entries.insert(id, Arc::new(entry));
    }

    /// The signed envelope of a stored score (`None`, logged, if it cannot be signed now).
    fn sign(&self, score: &ScoreRow) -> Option<Bytes> {
        let (mut envelope, message): (SignedScore, Vec<u8>) = match envelope_parts(
            &score.document,
            score.seq,
            &self.key.public_key(),
        ) {
            Ok(parts) => parts,
            Err(e) => {
                tracing::warn!(subject = %score.subject, error = %e, "API view: a stored score cannot be enveloped");
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
}

fn trend_of(trend: outlook::Trend) -> Trend {
    match trend {
        outlook::Trend::Improving => Trend::Improving,
        outlook::Trend::Stable => Trend::Stable,
        outlook::Trend::Declining => Trend::Declining,
        outlook::Trend::Unknown => Trend::Unknown,
    }
}

/// A stored score document, summarised.
fn summary_of(row: &ScoreRow, doc: &ScoreDocument) -> ScoreSummaryView {
    let (grade, grade_provisional) = match &doc.grade {
        Some(g) => (Some(g.clone()), false),
        None => (doc.provisional_grade.clone(), true),
    };
    ScoreSummaryView {
        as_of: doc.as_of.clone(),
        score: doc.score.as_f64(),
        capped_score: doc.capped_score.as_f64(),
        band: BandView {
            low: doc.band.low,
            high: doc.band.high,
        },
        grade,
        grade_provisional,
        verdict: doc.verdict.verdict.into(),
        confidence: doc.confidence.clone(),
        outlook: OutlookView {
            trend: trend_of(doc.outlook.trend),
            delta: doc.outlook.delta.map(|d| d.as_f64()),
        },
        watch: WatchView {
            on_watch: doc.watch.on_watch,
            reasons: doc.watch.reasons.iter().map(|r| r.code.clone()).collect(),
        },
        value: ValueView {
            price_usd: Some(doc.value.price_usd),
            price_percentile: doc.value.price_percentile,
            usd_per_valid_kib: doc.value.usd_per_valid_kib,
            peers: u64::from(doc.value.peers),
        },
        rubric_sha256: doc.rubric.sha256.clone(),
        ledger_seq: row.seq,
        document_sha256: crate::evidence::sha256_hex(&row.document),
    }
}

fn daily_of(row: &ScoreRow, doc: &ScoreDocument) -> DailyScore {
    let s = summary_of(row, doc);
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
