//! What the pages show, as typed views, built from the store in this one place. The renderers
//! (`render.rs`, `chart.rs`) are pure functions of these views; nothing here formats HTML.
//!
//! Score documents are read back from their stored form (the published JSON) into the narrow
//! types below, which name only what a page shows: the published document is the contract, so a
//! page can never show something the document does not say.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::checks::history::{Declared, OutageWindow};
use crate::daemon::scoring::outage_windows;
use crate::evidence::Outcome;
use crate::evidence::paid::{Decision, PaidObservation};
use crate::ledger::record::{Record, RecordKind};
use crate::rubric::{Kind, Verdict};
use crate::store::{Store, StoreError, SubjectRow, SubjectState};

pub(crate) use crate::api::signed::subject_id;

/// How many paid calls a subject page lists (the newest).
pub(crate) const PAID_CALLS_SHOWN: usize = 50;
/// How many index rows one page holds.
pub(crate) const INDEX_PAGE_ROWS: usize = 100;

// ---------------------------------------------------------------- the score document, as read

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct ScoreDoc {
    pub as_of: String,
    pub score: f64,
    pub capped_score: f64,
    pub band: BandDoc,
    pub confidence: String,
    pub grade: Option<String>,
    pub provisional_grade: Option<String>,
    pub verdict: VerdictDoc,
    pub stale: bool,
    pub watch: WatchDoc,
    pub dimensions: Vec<DimensionDoc>,
    pub gates: Vec<GateDoc>,
    pub cap: CapDoc,
    pub outlook: OutlookDoc,
    pub rubric: RubricDoc,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct RubricDoc {
    pub id: String,
    pub version: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub(crate) struct BandDoc {
    pub low: f64,
    pub high: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct VerdictDoc {
    pub verdict: Verdict,
    pub status: VerdictStatus,
    pub reasons: Vec<ReasonDoc>,
    pub verification: VerificationDoc,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum VerdictStatus {
    Provisional,
    Established,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct VerificationDoc {
    pub verified: bool,
    pub probes: u32,
    pub probes_needed: u32,
    pub probe_span_days: f64,
    pub probe_span_days_needed: f64,
    pub last_paid_call_days_ago: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct ReasonDoc {
    pub code: String,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct WatchDoc {
    pub on_watch: bool,
    pub reasons: Vec<ReasonDoc>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct DimensionDoc {
    pub id: String,
    pub scored: bool,
    pub points: f64,
    pub contribution: f64,
    pub checks: Vec<CheckDoc>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct CheckDoc {
    pub id: String,
    pub title: String,
    pub kind: Kind,
    pub state: CheckState,
    pub passes: u32,
    pub fails: u32,
    pub nas: u32,
    pub unmeasured: u32,
    pub evidence_weight: Option<f64>,
    pub value: Option<f64>,
    pub p95_ms: Option<f64>,
    pub points: f64,
    pub contribution: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CheckState {
    Scored,
    Prior,
    Na,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct GateDoc {
    pub flag: String,
    pub check: String,
    pub binding: bool,
    pub cap: Option<f64>,
    pub verdict: Option<Verdict>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct CapDoc {
    pub cap: Option<f64>,
    pub binding: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct OutlookDoc {
    pub trend: Trend,
    pub recent_days: f64,
    pub baseline_days: f64,
    pub delta: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Trend {
    Declining,
    Stable,
    Improving,
    Unknown,
}

impl Trend {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Trend::Declining => "declining",
            Trend::Stable => "stable",
            Trend::Improving => "improving",
            Trend::Unknown => "unknown",
        }
    }
}

/// A subject's latest score as far as a page can tell.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Latest {
    /// No score published yet.
    None,
    /// A stored document this build cannot read (named, never hidden).
    Unreadable(String),
    Doc(Box<ScoreDoc>),
}

impl Latest {
    fn of(document: Option<&[u8]>) -> Latest {
        match document {
            None => Latest::None,
            Some(bytes) => match serde_json::from_slice::<ScoreDoc>(bytes) {
                Ok(doc) => Latest::Doc(Box::new(doc)),
                Err(e) => Latest::Unreadable(e.to_string()),
            },
        }
    }

    pub(crate) fn doc(&self) -> Option<&ScoreDoc> {
        match self {
            Latest::Doc(d) => Some(d),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------- the index

/// The index's sort columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SortKey {
    Subject,
    Score,
    Band,
    Grade,
    Verdict,
    Outlook,
}

impl SortKey {
    pub(crate) const ALL: [SortKey; 6] = [
        SortKey::Subject,
        SortKey::Score,
        SortKey::Band,
        SortKey::Grade,
        SortKey::Verdict,
        SortKey::Outlook,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SortKey::Subject => "subject",
            SortKey::Score => "score",
            SortKey::Band => "band",
            SortKey::Grade => "grade",
            SortKey::Verdict => "verdict",
            SortKey::Outlook => "outlook",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<SortKey> {
        SortKey::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// The direction a first click sorts in: best first for scores, A to Z for names, the most
    /// severe verdict and the declining outlook first.
    pub(crate) fn natural(self) -> Direction {
        match self {
            SortKey::Score | SortKey::Grade => Direction::Desc,
            SortKey::Subject | SortKey::Band | SortKey::Verdict | SortKey::Outlook => {
                Direction::Asc
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Asc,
    Desc,
}

impl Direction {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Direction::Asc => "asc",
            Direction::Desc => "desc",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Direction> {
        match text {
            "asc" => Some(Direction::Asc),
            "desc" => Some(Direction::Desc),
            _ => None,
        }
    }

    pub(crate) fn flip(self) -> Direction {
        match self {
            Direction::Asc => Direction::Desc,
            Direction::Desc => Direction::Asc,
        }
    }
}

/// What the index was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexQuery {
    pub sort: SortKey,
    pub direction: Direction,
    /// 1-based.
    pub page: usize,
}

impl Default for IndexQuery {
    fn default() -> Self {
        IndexQuery {
            sort: SortKey::Score,
            direction: Direction::Desc,
            page: 1,
        }
    }
}

/// Why a query string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum QueryError {
    #[error("unknown sort column {0:?} (one of subject, score, band, grade, verdict, outlook)")]
    Sort(String),
    #[error("unknown direction {0:?} (asc or desc)")]
    Direction(String),
    #[error("page {0:?} is not a page number (1, 2, ...)")]
    Page(String),
    #[error("unknown parameter {0:?} (sort, dir, page)")]
    Unknown(String),
}

impl IndexQuery {
    /// Reads `sort`, `dir` and `page` from decoded query pairs; anything else is refused.
    pub(crate) fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<IndexQuery, QueryError> {
        let mut q = IndexQuery::default();
        let mut direction = None;
        for (name, value) in pairs {
            match name {
                "sort" => {
                    q.sort = SortKey::parse(value).ok_or_else(|| QueryError::Sort(value.into()))?
                }
                "dir" => {
                    direction = Some(
                        Direction::parse(value)
                            .ok_or_else(|| QueryError::Direction(value.into()))?,
                    )
                }
                "page" => {
                    q.page = value
                        .parse::<usize>()
                        .ok()
                        .filter(|p| *p >= 1)
                        .ok_or_else(|| QueryError::Page(value.into()))?
                }
                other => return Err(QueryError::Unknown(other.into())),
            }
        }
        q.direction = direction.unwrap_or(q.sort.natural());
        Ok(q)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IndexRow {
    pub id: String,
    pub url: String,
    pub category: String,
    pub state: SubjectState,
    pub latest: Latest,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IndexView {
    pub query: IndexQuery,
    /// This page's rows, sorted.
    pub rows: Vec<IndexRow>,
    pub total: usize,
    pub pages: usize,
}

/// Sorts rows by the query; subjects without a readable score always come last, ties by URL.
pub(crate) fn sort_rows(rows: &mut [IndexRow], key: SortKey, direction: Direction) {
    use std::cmp::Ordering;
    rows.sort_by(|a, b| {
        let by_key = match (a.latest.doc(), b.latest.doc()) {
            (Some(x), Some(y)) => {
                let o = match key {
                    SortKey::Subject => a.url.cmp(&b.url),
                    SortKey::Score | SortKey::Grade => x.capped_score.total_cmp(&y.capped_score),
                    SortKey::Band => {
                        (x.band.high - x.band.low).total_cmp(&(y.band.high - y.band.low))
                    }
                    SortKey::Verdict => x.verdict.verdict.cmp(&y.verdict.verdict),
                    SortKey::Outlook => x.outlook.trend.cmp(&y.outlook.trend),
                };
                match direction {
                    Direction::Asc => o,
                    Direction::Desc => o.reverse(),
                }
            }
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) if key == SortKey::Subject && direction == Direction::Desc => {
                b.url.cmp(&a.url)
            }
            (None, None) => Ordering::Equal,
        };
        by_key.then_with(|| a.url.cmp(&b.url))
    });
}

/// The index: every subject with its latest score, sorted and cut to the asked page.
pub(crate) fn index_view(store: &dyn Store, query: IndexQuery) -> Result<IndexView, StoreError> {
    let subjects = store.subjects()?;
    let mut rows = Vec::with_capacity(subjects.len());
    for s in subjects {
        let latest = store.latest_score(&s.url)?;
        rows.push(IndexRow {
            id: subject_id(&s.url),
            latest: Latest::of(latest.as_ref().map(|r| r.document.as_slice())),
            url: s.url,
            category: s.category,
            state: s.state,
        });
    }
    sort_rows(&mut rows, query.sort, query.direction);
    let total = rows.len();
    let pages = total.div_ceil(INDEX_PAGE_ROWS).max(1);
    let rows = rows
        .into_iter()
        .skip((query.page - 1).saturating_mul(INDEX_PAGE_ROWS))
        .take(INDEX_PAGE_ROWS)
        .collect();
    Ok(IndexView {
        query,
        rows,
        total,
        pages,
    })
}

// ---------------------------------------------------------------- one subject

/// One day's published score (the last of the day).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DayPoint {
    pub day: String,
    pub as_of_ms: i64,
    pub capped_score: f64,
    pub low: f64,
    pub high: f64,
    pub verdict: Verdict,
}

/// A new revision of what the subject declares (after its first).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RevisionMark {
    pub id: String,
    pub at_ms: i64,
    pub changed: Vec<String>,
}

/// The last result recorded for a check: the newest that measured something (pass, fail or
/// `na`), else the newest at all.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LastReceipt {
    pub outcome: Outcome,
    pub at: String,
    pub evidence: String,
    pub tx: Option<String>,
    /// `label -> sha256` of the bytes the check looked at.
    pub hashes: Vec<(String, String)>,
    /// The receipt's detail as compact JSON (bounded when shown).
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PaidOutcome {
    /// A payment was sent, costing this many USD.
    Sent { cost_usd: String },
    /// We declined; the rules that declined.
    Refused { rules: Vec<String> },
    /// Our side failed before anything was sent.
    Failed { stage: String },
}

/// One paid call (or a declined attempt) with the transactions that settle it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PaidCall {
    pub at_ms: i64,
    pub revision: String,
    pub outcome: PaidOutcome,
    /// What the endpoint's settlement response named (its word, not a chain fact).
    pub settlement_tx: Option<String>,
    pub settlement_success: Option<bool>,
    /// The transaction that used our authorization's nonce, as the chain says (our RPC).
    pub chain_tx: Option<String>,
    pub chain_ok: Option<bool>,
    pub chain_block: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SubjectView {
    pub id: String,
    pub url: String,
    pub category: String,
    pub state: SubjectState,
    pub revision: Option<String>,
    pub latest: Latest,
    pub declared: Option<Declared>,
    /// The description the endpoint gave with its last quote (hostile text).
    pub description: Option<String>,
    /// Check id -> its last receipt.
    pub receipts: BTreeMap<String, LastReceipt>,
    pub history: Vec<DayPoint>,
    pub outages: Vec<OutageWindow>,
    pub revisions: Vec<RevisionMark>,
    /// Newest first, at most [`PAID_CALLS_SHOWN`].
    pub paid_calls: Vec<PaidCall>,
    /// How many older paid calls are not listed.
    pub paid_calls_omitted: usize,
}

/// The subject whose [`subject_id`] is `id`, when there is one.
pub(crate) fn find_subject(store: &dyn Store, id: &str) -> Result<Option<SubjectRow>, StoreError> {
    // Ids are 32 lowercase hex digits; anything else names nothing (and costs no scan).
    if id.len() != 32 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Ok(None);
    }
    Ok(store
        .subjects()?
        .into_iter()
        .find(|s| subject_id(&s.url) == id))
}

/// Everything the subject page shows of `row`.
pub(crate) fn subject_view(store: &dyn Store, row: SubjectRow) -> Result<SubjectView, StoreError> {
    let url = row.url.clone();
    let latest = store.latest_score(&url)?;
    let history = store
        .daily_scores(&url)?
        .into_iter()
        .filter_map(|r| {
            let doc: ScoreDoc = serde_json::from_slice(&r.document).ok()?;
            Some(DayPoint {
                day: r.day,
                as_of_ms: r.as_of_ms,
                capped_score: doc.capped_score,
                low: doc.band.low,
                high: doc.band.high,
                verdict: doc.verdict.verdict,
            })
        })
        .collect();
    let outages = outage_windows(
        &store
            .entries_of_kind(&[RecordKind::Outage], 0)?
            .into_iter()
            .filter_map(|e| match e.record {
                Record::Outage(o) => Some(o),
                _ => None,
            })
            .collect::<Vec<_>>(),
    );
    let entries = store.subject_entries(
        &url,
        &[RecordKind::Run, RecordKind::Refund, RecordKind::Revision],
        0,
    )?;
    let mut revisions = Vec::new();
    let mut measured: BTreeMap<String, LastReceipt> = BTreeMap::new();
    let mut any: BTreeMap<String, LastReceipt> = BTreeMap::new();
    let mut paid_calls = Vec::new();
    let mut description = None;
    let mut keep = |result: &crate::evidence::CheckResult| {
        let receipt = last_receipt(result);
        let slot = if matches!(result.outcome, Outcome::Unmeasured) {
            &mut any
        } else {
            &mut measured
        };
        slot.insert(result.id.clone(), receipt);
    };
    for entry in &entries {
        match &entry.record {
            Record::Revision(r) if r.previous.is_some() => revisions.push(RevisionMark {
                id: r.id.clone(),
                at_ms: r.at_ms,
                changed: r.changed.clone(),
            }),
            Record::Run(run) => {
                run.results.iter().for_each(&mut keep);
                if let Some(paid) = &run.paid {
                    paid_calls.push(paid_call(run.started_at_ms, &run.revision, paid));
                    if let Some(d) = quote_description(paid) {
                        description = Some(d);
                    }
                }
            }
            Record::Refund(refund) => keep(&refund.result),
            _ => {}
        }
    }
    // Measured receipts win over later unmeasured ones.
    any.extend(measured);
    paid_calls.reverse();
    let paid_calls_omitted = paid_calls.len().saturating_sub(PAID_CALLS_SHOWN);
    paid_calls.truncate(PAID_CALLS_SHOWN);
    let declared = store
        .latest_declared(&url)?
        .and_then(|b| serde_json::from_slice::<Declared>(&b).ok());
    Ok(SubjectView {
        id: subject_id(&url),
        latest: Latest::of(latest.as_ref().map(|r| r.document.as_slice())),
        url,
        category: row.category,
        state: row.state,
        revision: row.revision,
        declared,
        description,
        receipts: any,
        history,
        outages,
        revisions,
        paid_calls,
        paid_calls_omitted,
    })
}

fn last_receipt(result: &crate::evidence::CheckResult) -> LastReceipt {
    LastReceipt {
        outcome: result.outcome,
        at: result.receipt.at.clone(),
        evidence: result.evidence.clone(),
        tx: result.receipt.tx.clone(),
        hashes: result
            .receipt
            .sha256
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        detail: (!result.receipt.detail.is_null()).then(|| result.receipt.detail.to_string()),
    }
}

fn paid_call(run_started_ms: i64, revision: &str, paid: &PaidObservation) -> PaidCall {
    let outcome = match (&paid.decision, &paid.payment) {
        (_, Some(sent)) => PaidOutcome::Sent {
            cost_usd: sent.cost_usd.to_string(),
        },
        (Decision::Refused { refusals }, None) => PaidOutcome::Refused {
            rules: refusals
                .iter()
                .map(|r| r.code.as_str().to_string())
                .collect(),
        },
        (Decision::Failed { stage, .. }, None) => PaidOutcome::Failed {
            stage: stage.clone(),
        },
        (Decision::Paid { .. }, None) => PaidOutcome::Failed {
            stage: "no payment recorded".to_string(),
        },
    };
    let nonce = paid
        .chain
        .as_ref()
        .and_then(|c| c.nonce_receipt.value())
        .and_then(|r| r.as_ref());
    PaidCall {
        at_ms: paid
            .payment
            .as_ref()
            .map_or(run_started_ms, |p| p.sent_at.saturating_mul(1000)),
        revision: revision.to_string(),
        outcome,
        settlement_tx: paid.settlement.as_ref().and_then(|s| s.transaction.clone()),
        settlement_success: paid.settlement.as_ref().and_then(|s| s.success),
        chain_tx: nonce.map(|r| r.transaction_hash.to_string()),
        chain_ok: nonce.map(|r| r.status_ok),
        chain_block: nonce.map(|r| r.block_number),
    }
}

/// The description the quote paid carried (v2: the resource's; v1: the entry's).
fn quote_description(paid: &PaidObservation) -> Option<String> {
    let quote = paid.quote.as_ref()?;
    quote
        .resource
        .as_ref()
        .and_then(|r| r.get("description"))
        .or_else(|| quote.entry.get("description"))
        .and_then(|d| d.as_str())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_read_strictly() {
        assert_eq!(IndexQuery::from_pairs([]), Ok(IndexQuery::default()));
        let q = IndexQuery::from_pairs([("sort", "verdict"), ("page", "2")]).unwrap();
        assert_eq!(
            (q.sort, q.direction, q.page),
            (SortKey::Verdict, Direction::Asc, 2)
        );
        let q = IndexQuery::from_pairs([("sort", "subject"), ("dir", "desc")]).unwrap();
        assert_eq!(q.direction, Direction::Desc);
        assert!(matches!(
            IndexQuery::from_pairs([("sort", "<x>")]),
            Err(QueryError::Sort(_))
        ));
        assert!(matches!(
            IndexQuery::from_pairs([("page", "0")]),
            Err(QueryError::Page(_))
        ));
        assert!(matches!(
            IndexQuery::from_pairs([("dir", "up")]),
            Err(QueryError::Direction(_))
        ));
        assert!(matches!(
            IndexQuery::from_pairs([("q", "1")]),
            Err(QueryError::Unknown(_))
        ));
    }
}
