//! A score's headline: what the index, the subjects list and the scheduler read of a score
//! document (a few hundred bytes of its 11 KB), kept beside the document in its score row. The
//! daemon's start and the API's view read every subject's latest headline instead of parsing
//! every latest document: with 100,000 subjects that parse was most of the start. Derived from
//! the document by one pure function ([`ScoreHeadline::of`]); the summaries made from a score
//! (the API's, the index's order, the scheduler's) are all read from a headline, so a headline
//! read back and one derived from the document now give the same summaries.

use serde::{Deserialize, Serialize};

use super::document::ScoreDocument;
use super::outlook::Trend;
use super::points::Points;
use crate::evidence::check_id::CheckId;
use crate::ledger::record::ScoreRecord;
use crate::rubric::Verdict;

/// What is read of a score without its document. Its JSON is what a score row keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreHeadline {
    /// SHA-256 (hex) of the stored document it was derived from: the document the ledger's
    /// `score` entry names. A headline naming another document is not this row's.
    pub document_sha256: String,
    pub as_of: String,
    pub score: Points,
    pub capped_score: Points,
    pub band_low: f64,
    pub band_high: f64,
    pub confidence: String,
    pub grade: Option<String>,
    pub provisional_grade: Option<String>,
    pub verdict: Verdict,
    pub verified: bool,
    pub probes: u32,
    pub probes_needed: u32,
    pub probe_span_days: f64,
    pub probe_span_days_needed: f64,
    pub last_paid_call_days_ago: Option<f64>,
    pub paid_within_days: f64,
    pub trend: Trend,
    pub delta: Option<Points>,
    pub on_watch: bool,
    /// The watch reasons' codes, in order.
    pub watch_reasons: Vec<String>,
    pub price_usd: f64,
    pub price_percentile: Option<f64>,
    pub usd_per_valid_kib: Option<f64>,
    pub peers: u32,
    pub rubric_sha256: String,
    /// The values (0..=100) of R4 and R5, when scored (the value population reads them).
    pub r4: Option<f64>,
    pub r5: Option<f64>,
}

impl ScoreHeadline {
    /// The headline of `doc`, whose stored bytes hash to `document_sha256`. Pure.
    pub fn of(doc: &ScoreDocument, document_sha256: String) -> ScoreHeadline {
        let v = &doc.verdict.verification;
        let check_value = |id: CheckId| {
            doc.dimensions
                .iter()
                .flat_map(|d| d.checks.iter())
                .find(|c| c.id == id)
                .and_then(|c| c.value)
        };
        ScoreHeadline {
            document_sha256,
            as_of: doc.as_of.clone(),
            score: doc.score,
            capped_score: doc.capped_score,
            band_low: doc.band.low,
            band_high: doc.band.high,
            confidence: doc.confidence.clone(),
            grade: doc.grade.clone(),
            provisional_grade: doc.provisional_grade.clone(),
            verdict: doc.verdict.verdict,
            verified: v.verified,
            probes: v.probes,
            probes_needed: v.probes_needed,
            probe_span_days: v.probe_span_days,
            probe_span_days_needed: v.probe_span_days_needed,
            last_paid_call_days_ago: v.last_paid_call_days_ago,
            paid_within_days: v.paid_within_days,
            trend: doc.outlook.trend,
            delta: doc.outlook.delta,
            on_watch: doc.watch.on_watch,
            watch_reasons: doc.watch.reasons.iter().map(|r| r.code.clone()).collect(),
            price_usd: doc.value.price_usd,
            price_percentile: doc.value.price_percentile,
            usd_per_valid_kib: doc.value.usd_per_valid_kib,
            peers: doc.value.peers,
            rubric_sha256: doc.rubric.sha256.clone(),
            r4: check_value(CheckId::R4),
            r5: check_value(CheckId::R5),
        }
    }

    /// The headline of a stored document (its bytes as the score row keeps them); `Err` when
    /// the document does not read back.
    pub fn of_stored(document: &[u8]) -> Result<ScoreHeadline, serde_json::Error> {
        let doc = ScoreDocument::from_slice(document)?;
        Ok(ScoreHeadline::of(
            &doc,
            crate::evidence::sha256_hex(document),
        ))
    }

    /// Whether it says what the ledger's `score` entry published of its document: the score,
    /// capped score, band, grade (or provisional grade), verdict and rubric.
    pub fn agrees_with(&self, entry: &ScoreRecord) -> bool {
        self.document_sha256 == entry.document_sha256
            && self.score.as_f64() == entry.score
            && self.capped_score.as_f64() == entry.capped_score
            && [self.band_low, self.band_high] == entry.band
            && self.grade.as_ref().or(self.provisional_grade.as_ref()) == entry.grade.as_ref()
            && self.verdict == entry.verdict
            && self.rubric_sha256 == entry.rubric_sha256
    }

    /// Its stored form (JSON).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a headline is plain data")
    }

    /// A stored headline read back, when it reads and names `document_sha256`; `None` otherwise
    /// (the caller derives it from the document again).
    pub fn read(bytes: &[u8], document_sha256: &str) -> Option<ScoreHeadline> {
        serde_json::from_slice::<ScoreHeadline>(bytes)
            .ok()
            .filter(|h| h.document_sha256 == document_sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A headline survives its stored form exactly (floats included), and names its document.
    #[test]
    fn a_headline_reads_back_as_it_was_derived() {
        for golden in [
            include_str!("../../tests/data/golden/01-healthy-established.json"),
            include_str!("../../tests/data/golden/02-overcharge-avoid.json"),
            include_str!("../../tests/data/golden/05-revisions-na-watch.json"),
        ] {
            let headline = ScoreHeadline::of_stored(golden.as_bytes()).unwrap();
            let sha = crate::evidence::sha256_hex(golden.as_bytes());
            assert_eq!(headline.document_sha256, sha);
            let doc = ScoreDocument::from_slice(golden.as_bytes()).unwrap();
            assert_eq!(headline.capped_score, doc.capped_score);
            assert_eq!(headline.verdict, doc.verdict.verdict);
            let bytes = headline.to_bytes();
            assert_eq!(ScoreHeadline::read(&bytes, &sha), Some(headline.clone()));
            assert_eq!(ScoreHeadline::read(&bytes, &"0".repeat(64)), None);
            assert_eq!(ScoreHeadline::read(b"{}", &sha), None);
        }
    }
}
