//! The index's order: what a page of the index asks for (its sort column, direction and page,
//! read from the query string) and what a subject sorts by, kept by the API's view for every
//! scored subject and read by the pages (neither imports the other through this file).

use crate::rubric::Verdict;
use crate::score::document::ScoreDocument;
use crate::score::outlook::Trend;
use crate::score::points::Points;

/// The index's sort columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

/// Where an outlook sorts, ascending: the declining first (what a reader looks for), unknown last.
fn outlook_rank(trend: Trend) -> u8 {
    match trend {
        Trend::Declining => 0,
        Trend::Stable => 1,
        Trend::Improving => 2,
        Trend::Unknown => 3,
    }
}

/// What the index sorts a scored subject by, from its latest score document: kept by the view
/// for every scored subject (the document itself is read back only for the rows shown).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct IndexOrder {
    capped_score: Points,
    band_width: f64,
    verdict: Verdict,
    trend: Trend,
}

impl IndexOrder {
    pub(crate) fn of(doc: &ScoreDocument) -> IndexOrder {
        IndexOrder {
            capped_score: doc.capped_score,
            band_width: doc.band.high - doc.band.low,
            verdict: doc.verdict.verdict,
            trend: doc.outlook.trend,
        }
    }

    /// The same order read from the score's headline (what the view keeps of every subject).
    pub(crate) fn of_headline(h: &crate::score::headline::ScoreHeadline) -> IndexOrder {
        IndexOrder {
            capped_score: h.capped_score,
            band_width: h.band_high - h.band_low,
            verdict: h.verdict,
            trend: h.trend,
        }
    }
}

/// What the index sorts: a row, or a subject of the view before it becomes one.
pub(crate) trait IndexSortable {
    fn url(&self) -> &str;
    /// `None` without a readable score.
    fn order(&self) -> Option<IndexOrder>;
}

/// Sorts rows by the query; subjects without a readable score always come last, ties by URL.
pub(crate) fn sort_rows<R: IndexSortable>(rows: &mut [R], key: SortKey, direction: Direction) {
    use std::cmp::Ordering;
    rows.sort_by(|a, b| {
        let by_key = match (a.order(), b.order()) {
            (Some(x), Some(y)) => {
                let o = match key {
                    SortKey::Subject => a.url().cmp(b.url()),
                    SortKey::Score | SortKey::Grade => x.capped_score.cmp(&y.capped_score),
                    SortKey::Band => x.band_width.total_cmp(&y.band_width),
                    SortKey::Verdict => x.verdict.cmp(&y.verdict),
                    SortKey::Outlook => outlook_rank(x.trend).cmp(&outlook_rank(y.trend)),
                };
                match direction {
                    Direction::Asc => o,
                    Direction::Desc => o.reverse(),
                }
            }
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) if key == SortKey::Subject && direction == Direction::Desc => {
                b.url().cmp(a.url())
            }
            (None, None) => Ordering::Equal,
        };
        by_key.then_with(|| a.url().cmp(b.url()))
    });
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
