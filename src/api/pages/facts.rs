//! What the pages show of one subject besides its index row, read when the view makes the
//! subject's page (`api/view.rs`: the page is then kept in its bounded cache, never these facts
//! per subject): the latest score document, read back with the type that wrote it ([`Latest`]),
//! the daily history, and what only the ledger holds (each check's last receipt, revisions, the
//! newest paid calls, the description the last quote carried), folded from the subject's
//! entries. What is kept is bounded (one receipt per check, at most [`PAID_CALLS_SHOWN`] paid
//! calls).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::checks::attribution::{Attribution, Party, PartyCount, attribute_all, count_by_party};
use crate::checks::findings::{self, Finding, FindingId, FindingsContext};
use crate::checks::history::Declared;
use crate::evidence::paid::{Decision, PaidObservation};
use crate::evidence::{CheckId, Outcome};
use crate::ledger::record::{Record, RecordKind};
use crate::rubric::Verdict;
use crate::score::document::ScoreDocument;
use crate::store::{ReadEntry, ScoreRow, Store, StoreError};

/// How many paid calls a subject page lists (the newest).
pub(crate) const PAID_CALLS_SHOWN: usize = 50;
/// The longest quote description kept (a page shows fewer characters; the rest is cut here).
const DESCRIPTION_CHARS_KEPT: usize = 2_000;
/// The ledger entries a subject page reads.
pub(crate) const PAGE_KINDS: [RecordKind; 3] =
    [RecordKind::Run, RecordKind::Refund, RecordKind::Revision];

/// A subject's latest score as far as a page can tell.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum Latest {
    /// No score published yet.
    #[default]
    None,
    /// A stored document this build cannot read (named, never hidden).
    Unreadable(String),
    /// The published document as stored, read back (without its inputs: the ledger keeps them).
    Doc(Arc<ScoreDocument>),
}

impl Latest {
    /// A stored score document (its ledger form), read back.
    pub(crate) fn of(document: Option<&[u8]>) -> Latest {
        match document {
            None => Latest::None,
            Some(bytes) => match ScoreDocument::from_slice(bytes) {
                Ok(doc) => Latest::Doc(Arc::new(doc)),
                Err(e) => Latest::Unreadable(e.to_string()),
            },
        }
    }

    pub(crate) fn doc(&self) -> Option<&ScoreDocument> {
        match self {
            Latest::Doc(d) => Some(d),
            _ => None,
        }
    }
}

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

impl DayPoint {
    pub(crate) fn of(row: &ScoreRow, doc: &ScoreDocument) -> DayPoint {
        DayPoint {
            day: row.day.clone(),
            as_of_ms: row.as_of_ms,
            capped_score: doc.capped_score.as_f64(),
            low: doc.band.low,
            high: doc.band.high,
            verdict: doc.verdict.verdict,
        }
    }
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

/// Everything a subject page shows besides the subject's row and our outages.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct SubjectFacts {
    /// Oldest first.
    pub history: Vec<DayPoint>,
    pub declared: Option<Declared>,
    /// The description the endpoint gave with its last quote (hostile text).
    pub description: Option<String>,
    /// Check id -> its last receipt.
    pub receipts: BTreeMap<CheckId, LastReceipt>,
    /// Check id -> its last result, kept by the same rule: what agent readiness is read from.
    pub results: BTreeMap<CheckId, crate::evidence::CheckResult>,
    pub revisions: Vec<RevisionMark>,
    /// Newest first, at most [`PAID_CALLS_SHOWN`].
    pub paid_calls: VecDeque<PaidCall>,
    /// How many older paid calls are not listed.
    pub paid_calls_omitted: usize,
    /// The last ledger entry folded in.
    pub through_seq: u64,
    /// What the findings read besides a run (the facilitators we know); set before folding.
    pub findings_ctx: FindingsContext,
    /// The findings of its runs (`probes/findings/`), the last of each kept by the rule the
    /// receipts are kept by.
    pub findings: BTreeMap<FindingId, Finding>,
    /// Whose each kept result (the last of each check, by the receipts' rule) is, when it is a
    /// failed paid check or `unmeasured` (`probes/attribution.md`), and how many each party has.
    pub parties: BTreeMap<CheckId, Attribution>,
    pub party_counts: BTreeMap<Party, PartyCount>,
}

impl SubjectFacts {
    /// Brings the facts of `url` up to date: its daily history as given (read by the caller),
    /// its declaration, and its entries after the last one folded in.
    pub(crate) fn refresh(
        &mut self,
        store: &dyn Store,
        url: &str,
        history: Vec<DayPoint>,
    ) -> Result<(), StoreError> {
        self.history = history;
        self.declared = store.latest_declared(url)?;
        let entries = store.subject_entries(url, &PAGE_KINDS, self.through_seq)?;
        self.fold(&entries);
        Ok(())
    }

    /// Folds entries in, oldest first (each after every entry folded before).
    pub(crate) fn fold(&mut self, entries: &[ReadEntry]) {
        for entry in entries {
            match &entry.record {
                Record::Revision(r) if r.previous.is_some() => self.revisions.push(RevisionMark {
                    id: r.id.clone(),
                    at_ms: r.at_ms,
                    changed: r.changed.clone(),
                }),
                Record::Run(run) => {
                    let parties = attribute_all(&run.results, &run.free, run.paid.as_ref());
                    for r in &run.results {
                        if self.keep(r) {
                            match parties.get(&r.id) {
                                Some(a) => self.parties.insert(r.id, a.clone()),
                                None => self.parties.remove(&r.id),
                            };
                        }
                    }
                    for f in findings::evaluate(&run.free, run.paid.as_ref(), &self.findings_ctx) {
                        let kept_measured = self
                            .findings
                            .get(&f.id)
                            .is_some_and(|k| k.outcome != Outcome::Unmeasured);
                        if f.outcome != Outcome::Unmeasured || !kept_measured {
                            self.findings.insert(f.id, f);
                        }
                    }
                    let kept: Vec<_> = self.results.values().cloned().collect();
                    self.party_counts = count_by_party(&self.parties, &kept);
                    if let Some(paid) = &run.paid {
                        self.paid_calls.push_front(paid_call(
                            run.started_at_ms,
                            &run.revision,
                            paid,
                        ));
                        if self.paid_calls.len() > PAID_CALLS_SHOWN {
                            self.paid_calls.pop_back();
                            self.paid_calls_omitted += 1;
                        }
                        if let Some(d) = quote_description(paid) {
                            self.description =
                                Some(d.chars().take(DESCRIPTION_CHARS_KEPT).collect());
                        }
                    }
                }
                // A refund watch's H9: whose a failed one is, the seller's (its promise).
                Record::Refund(refund) if self.keep(&refund.result) => {
                    self.parties.remove(&refund.result.id);
                    if refund.result.outcome == Outcome::Fail {
                        self.parties.insert(
                            refund.result.id,
                            Attribution {
                                party: Party::Seller,
                                why: "it did not keep its refund promise".into(),
                            },
                        );
                    }
                }
                _ => {}
            }
            self.through_seq = self.through_seq.max(entry.seq);
        }
    }

    /// A check's newer result replaces the one kept, unless it measured nothing and the kept
    /// one did (measured receipts win over later unmeasured ones).
    /// Whether it was kept.
    fn keep(&mut self, result: &crate::evidence::CheckResult) -> bool {
        let unmeasured = matches!(result.outcome, Outcome::Unmeasured);
        let kept_measured = self
            .receipts
            .get(&result.id)
            .is_some_and(|r| !matches!(r.outcome, Outcome::Unmeasured));
        if unmeasured && kept_measured {
            return false;
        }
        self.receipts.insert(result.id, last_receipt(result));
        self.results.insert(result.id, result.clone());
        true
    }

    /// The subject's agent readiness (seed 000) from the last result of each check.
    pub(crate) fn readiness(&self) -> crate::readiness::Assessment {
        let results: Vec<_> = self.results.values().cloned().collect();
        crate::readiness::assess(
            &crate::readiness::ReadinessRubric::embedded(),
            &crate::readiness::evidence::from_checks(&results),
        )
    }
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
    let cost = paid
        .payment
        .as_ref()
        .map(|p| p.cost_usd)
        .or(paid.svm.as_ref().map(|s| s.payment.cost_usd));
    let outcome = match (&paid.decision, cost) {
        (_, Some(cost)) => PaidOutcome::Sent {
            cost_usd: cost.to_string(),
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
            .map(|p| p.sent_at)
            .or(paid.svm.as_ref().map(|s| s.payment.sent_at))
            .map_or(run_started_ms, |at| at.saturating_mul(1000)),
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
