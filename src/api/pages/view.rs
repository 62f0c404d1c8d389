//! What the pages show, as typed views, built in this one place from the API's in-memory view
//! (`api/view.rs`, which keeps each subject's page facts up to date as scores are published): a
//! page request reads no store. The renderers (`render.rs`, `chart.rs`) are pure functions of
//! these views; nothing here formats HTML.

use std::sync::Arc;

use super::facts::{Latest, SubjectFacts};
pub(crate) use super::order::{Direction, IndexQuery, SortKey};
use super::order::{IndexOrder, IndexSortable, sort_rows};
use crate::api::view::{Details, SubjectEntry, ViewData};
use crate::checks::history::OutageWindow;
use crate::store::SubjectState;

/// How many index rows one page holds.
pub(crate) const INDEX_PAGE_ROWS: usize = 100;

// ---------------------------------------------------------------- the index

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

impl IndexSortable for IndexRow {
    fn url(&self) -> &str {
        &self.url
    }
    fn order(&self) -> Option<IndexOrder> {
        self.latest.doc().map(IndexOrder::of)
    }
}

impl IndexSortable for &SubjectEntry {
    fn url(&self) -> &str {
        &self.url
    }
    fn order(&self) -> Option<IndexOrder> {
        self.index_order()
    }
}

/// The index: every subject with its latest score, sorted and cut to the asked page (sorted by
/// reference; only the page's rows are built).
pub(crate) fn index_view(
    view: &ViewData,
    query: IndexQuery,
    latest: impl Fn(&SubjectEntry) -> Latest,
) -> IndexView {
    let mut subjects: Vec<&SubjectEntry> = view.ordered.iter().map(|e| &**e).collect();
    sort_rows(&mut subjects, query.sort, query.direction);
    let total = subjects.len();
    let pages = total.div_ceil(INDEX_PAGE_ROWS).max(1);
    let rows = subjects
        .into_iter()
        .skip((query.page - 1).saturating_mul(INDEX_PAGE_ROWS))
        .take(INDEX_PAGE_ROWS)
        .map(|e| IndexRow {
            id: e.id(),
            url: e.url.to_string(),
            category: e.category.to_string(),
            state: e.state,
            latest: latest(e),
        })
        .collect();
    IndexView {
        query,
        rows,
        total,
        pages,
    }
}

// ---------------------------------------------------------------- one subject

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SubjectView {
    pub id: String,
    pub url: String,
    pub category: String,
    pub state: SubjectState,
    pub revision: Option<String>,
    /// Its latest score document, read back.
    pub latest: Latest,
    /// Its history, receipts, revisions and paid calls, as the view keeps them.
    pub facts: Arc<SubjectFacts>,
    pub outages: Vec<OutageWindow>,
}

/// Everything the subject page shows of `entry` with its `details`, with our outage windows now.
pub(crate) fn subject_view(
    entry: &SubjectEntry,
    details: Details,
    outages: Vec<OutageWindow>,
) -> SubjectView {
    SubjectView {
        id: entry.id(),
        url: entry.url.to_string(),
        category: entry.category.to_string(),
        state: entry.state,
        revision: entry.revision.as_deref().map(str::to_string),
        latest: details.latest,
        facts: details.facts,
        outages,
    }
}
