//! Labels: for each subject and UTC day, whether a paid call in the following horizon (14 days by
//! default) failed. The recalibration fits the rubric against them; it never derives them from the
//! scores it is fitting. Two sources write this one type: the simulator, from the hidden truth of
//! its population (`x402-probe simulate`), and the recalibration itself, from the daemon's own paid
//! calls in the store. The file format is canonical JSON of `LabelsDocument`.

use serde::{Deserialize, Serialize};

use crate::evidence::run::Provenance;

/// Names this document format.
pub const FORMAT: &str = "x402-probe.labels/1";

/// The rubric's horizon: paid-call failure over the next 14 days.
pub const DEFAULT_HORIZON_DAYS: u32 = 14;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelsDocument {
    /// Always [`FORMAT`].
    pub format: String,
    /// `synthetic_fixture` for a simulated population, `live` for the daemon's own paid calls.
    pub provenance: Provenance,
    pub source: LabelSource,
    /// The window after a day's score in which a failed paid call makes the label true.
    pub horizon_days: u32,
    /// Sorted by subject id.
    pub subjects: Vec<SubjectLabels>,
}

/// Where the labels come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LabelSource {
    /// The simulator's hidden truth (the population's seed and size name it).
    Simulator { seed: u64, population: u32 },
    /// The daemon's own paid calls, read from its ledger up to `through_seq`.
    Ledger { through_seq: u64 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectLabels {
    /// The daemon's subject id (the key of its score rows).
    pub subject: String,
    /// One per day that has a label, oldest first, days unique.
    pub days: Vec<DayLabel>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DayLabel {
    /// `YYYY-MM-DD` (UTC): the day whose score (the store's daily snapshot) this label follows.
    pub day: String,
    /// Whether a paid call in the horizon after that day fails (for the simulator: one call at a
    /// seeded moment of each following day, judged by the hidden truth; for the ledger: any of the
    /// daemon's own paid calls in the window).
    pub fails: bool,
    /// How many paid calls the label rests on (the simulator: the horizon's days; the ledger: the
    /// daemon's paid calls in the window, at least one).
    pub calls: u32,
    /// The simulator's expected share of failing paid calls over the window (the truth, not a
    /// draw); absent for ledger labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_rate: Option<f64>,
    /// Each way a call in the window failed, once, in this enum's order.
    pub failures: Vec<FailureKind>,
}

/// How a paid call fails (the issue's list; each maps to the check that sees it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// No 2xx after settlement (R4).
    NotOk,
    /// The output does not validate (R5).
    InvalidOutput,
    /// Charged more than the quote (H5).
    Overcharged,
    /// Paid to another address than the quoted payTo (H6).
    WrongPayee,
    /// A second pull for one authorization (H7).
    ChargedTwice,
    /// Settled without a 2xx, valid output (H8).
    ChargedWithoutDelivery,
}

/// Why a labels document cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LabelsError {
    #[error("labels: {0}")]
    Json(#[from] serde_json::Error),
    #[error("labels: format is {0:?}, expected {FORMAT:?}")]
    Format(String),
    #[error("labels: horizon_days must be 1 to 365, got {0}")]
    Horizon(u32),
    #[error("labels: subject {0:?} is listed twice or out of order")]
    SubjectOrder(String),
    #[error("labels: subject {subject:?}: day {day:?} is not YYYY-MM-DD, repeated or out of order")]
    DayOrder { subject: String, day: String },
    #[error("labels: subject {subject:?} day {day:?}: {problem}")]
    Day {
        subject: String,
        day: String,
        problem: &'static str,
    },
}

impl LabelsDocument {
    /// Parses and checks a labels file's bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<LabelsDocument, LabelsError> {
        let doc: LabelsDocument = serde_json::from_slice(bytes)?;
        doc.validate()?;
        Ok(doc)
    }

    /// The file's bytes: canonical JSON and a newline.
    pub fn to_bytes(&self) -> Result<Vec<u8>, crate::canonical::CanonicalError> {
        let mut bytes = crate::canonical::canonical_bytes_of(self)?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    pub fn validate(&self) -> Result<(), LabelsError> {
        if self.format != FORMAT {
            return Err(LabelsError::Format(self.format.clone()));
        }
        if !(1..=365).contains(&self.horizon_days) {
            return Err(LabelsError::Horizon(self.horizon_days));
        }
        for (i, s) in self.subjects.iter().enumerate() {
            if i > 0 && self.subjects[i - 1].subject >= s.subject {
                return Err(LabelsError::SubjectOrder(s.subject.clone()));
            }
            for (j, d) in s.days.iter().enumerate() {
                let ordered = is_day(&d.day) && (j == 0 || s.days[j - 1].day < d.day);
                if !ordered {
                    return Err(LabelsError::DayOrder {
                        subject: s.subject.clone(),
                        day: d.day.clone(),
                    });
                }
                let problem = if d.calls == 0 {
                    Some("a label rests on at least one call")
                } else if d.fails == d.failures.is_empty() {
                    Some("fails must be true exactly when failures are listed")
                } else if d.failures.windows(2).any(|w| w[0] >= w[1]) {
                    Some("failures are listed once each, in order")
                } else if d
                    .failure_rate
                    .is_some_and(|r| !(r.is_finite() && (0.0..=1.0).contains(&r)))
                {
                    Some("failure_rate is a share from 0 to 1")
                } else {
                    None
                };
                if let Some(problem) = problem {
                    return Err(LabelsError::Day {
                        subject: s.subject.clone(),
                        day: d.day.clone(),
                        problem,
                    });
                }
            }
        }
        Ok(())
    }
}

/// `YYYY-MM-DD` with digits in place (the store's day keys).
fn is_day(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> LabelsDocument {
        LabelsDocument {
            format: FORMAT.into(),
            provenance: Provenance::SyntheticFixture,
            source: LabelSource::Simulator {
                seed: 7,
                population: 2,
            },
            horizon_days: DEFAULT_HORIZON_DAYS,
            subjects: vec![
                SubjectLabels {
                    subject: "https://a.example/x".into(),
                    days: vec![
                        DayLabel {
                            day: "2026-01-01".into(),
                            fails: false,
                            calls: 14,
                            failure_rate: Some(0.0),
                            failures: vec![],
                        },
                        DayLabel {
                            day: "2026-01-02".into(),
                            fails: true,
                            calls: 14,
                            failure_rate: Some(0.25),
                            failures: vec![FailureKind::NotOk, FailureKind::WrongPayee],
                        },
                    ],
                },
                SubjectLabels {
                    subject: "https://b.example/y".into(),
                    days: vec![],
                },
            ],
        }
    }

    #[test]
    fn a_document_round_trips_through_its_bytes() {
        let d = doc();
        let bytes = d.to_bytes().unwrap();
        assert_eq!(LabelsDocument::from_slice(&bytes).unwrap(), d);
        assert!(
            std::str::from_utf8(&bytes)
                .unwrap()
                .contains(r#""source":{"kind":"simulator","population":2,"seed":7}"#)
        );
    }

    #[test]
    fn inconsistent_documents_are_refused() {
        let mut d = doc();
        d.subjects.swap(0, 1);
        assert!(matches!(d.validate(), Err(LabelsError::SubjectOrder(_))));

        let mut d = doc();
        d.subjects[0].days[1].day = "2026-01-01".into();
        assert!(matches!(d.validate(), Err(LabelsError::DayOrder { .. })));

        let mut d = doc();
        d.subjects[0].days[0].fails = true;
        assert!(matches!(d.validate(), Err(LabelsError::Day { .. })));

        let mut d = doc();
        d.subjects[0].days[1].failures.reverse();
        assert!(matches!(d.validate(), Err(LabelsError::Day { .. })));

        let mut d = doc();
        d.subjects[0].days[1].failure_rate = Some(1.5);
        assert!(matches!(d.validate(), Err(LabelsError::Day { .. })));

        let mut d = doc();
        d.horizon_days = 0;
        assert!(matches!(d.validate(), Err(LabelsError::Horizon(0))));

        let text = String::from_utf8(doc().to_bytes().unwrap())
            .unwrap()
            .replace("\"format\"", "\"extra\":1,\"format\"");
        assert!(matches!(
            LabelsDocument::from_slice(text.as_bytes()),
            Err(LabelsError::Json(_))
        ));
    }
}
