//! The stored form of an entry (ledger format 2), pure: what a record becomes on its way into the
//! ledger, and the one way back that every reader takes.
//!
//! - What was observed is kept; what the pure checks conclude from it is not copied. A run entry
//!   keeps its observation, its results' outcome vector, the checks' version (with the rubric
//!   they ran under) and the SHA-256 of its results; the results and their receipts are derived
//!   again on read by [`derive_results`], and the hash proves that they are the ones published.
//!   Results the observation alone does not give (H2 and H3, which compare with earlier runs and
//!   posted notes) or that derive otherwise (a rubric or a build this reader does not have) are
//!   kept as they were, beside the observation.
//! - What a run observed is a blob of its own ([`StoredObservation`], compressed), named in the
//!   entry by its SHA-256: the chained and hashed entry stays a few hundred bytes, and its hash
//!   still covers the observation.
//! - The bytes that repeat from run to run are blobs, kept once by their SHA-256: bodies, header
//!   sets (without the few values that change with every answer, such as `date`, which stay in
//!   the observation at their place), certificate chains and a catalogue's listing as a run saw
//!   it. The observation names each by its digest, so the entry's hash covers them.

use sha2::{Digest, Sha256};

use crate::canonical::{canonical_sha256, canonical_sha256_of};
use crate::evidence::free::{FreeObservation, ListingSeen};
use crate::evidence::http::Exchange;
use crate::evidence::paid::PaidObservation;
use crate::evidence::run::{DerivedResults, RunRecord, StoredObservation, StoredRun};
use crate::evidence::{CheckResult, Outcome};
use crate::rubric::Rubric;

use super::record::{Record, StoredRecord};

/// The version of the checks' conclusions: bumped whenever a check concludes otherwise from the
/// same observation. A run stores it with its results' hash; a build whose checks derive other
/// results for an entry says so by that hash (and names both versions).
pub const CHECKS_VERSION: &str = "x402-probe.checks/2";

/// Bodies at least this long are kept apart as blobs (shorter ones cost less inline than their
/// digest would).
pub const BODY_APART_MIN_BYTES: usize = 64;

/// Response headers whose values change with every answer: kept in the entry, at their place,
/// so that the rest of the header set is one blob for every run that sees it.
const VOLATILE_HEADERS: [&str; 11] = [
    "date",
    "age",
    "expires",
    "last-modified",
    "etag",
    "set-cookie",
    "x-request-id",
    "request-id",
    "x-amzn-requestid",
    "x-amz-cf-id",
    "cf-ray",
];

/// A blob to keep: its SHA-256, its bytes (uncompressed) and what it is. A record's blobs are
/// listed once each, however often it names them (five samples that saw one body name it five
/// times).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBlob {
    pub sha256: [u8; 32],
    pub bytes: Vec<u8>,
    pub kind: BlobKind,
}

/// What a blob holds, for how it is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobKind {
    /// A run's observation ([`StoredObservation`] as JSON): new with every run, alike in its
    /// shape from run to run (compressed with the observation dictionary).
    Observation,
    /// Bytes that repeat from run to run (a body, a header set, a chain, a listing, a population).
    Repeated,
}

/// Why a stored entry could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadBack {
    #[error("it names blob {0}, which the store does not have")]
    MissingBlob(String),
    #[error("its blob {sha} does not read as {what}: {why}")]
    BadBlob {
        sha: String,
        what: &'static str,
        why: String,
    },
    #[error(
        "its results were derived under rubric {rubric} (checks {checks}), which this reader was \
         not given"
    )]
    UnknownRubric { checks: String, rubric: String },
    #[error(
        "its results derive to {derived} with these checks ({ours}), not to the {stored} it \
         stored (checks {checks})"
    )]
    ResultsDiffer {
        ours: &'static str,
        checks: String,
        stored: String,
        derived: String,
    },
}

/// The results of a run, derived from its observation alone: every rubric check once, in rubric
/// order, the free checks from the free observation and the paid ones from the paid call when
/// one was attempted. The one function the daemon's results and every read of a run agree on.
pub fn derive_results(
    free: &FreeObservation,
    paid: Option<&PaidObservation>,
    rubric: &Rubric,
) -> Vec<CheckResult> {
    let mut results = crate::checks::free::evaluate_free(free, rubric);
    if let Some(obs) = paid {
        let paid_results =
            crate::checks::paid::evaluate_with_rubric(obs, rubric, free.at, &free.vantage);
        for r in paid_results {
            if let Some(slot) = results.iter_mut().find(|x| x.id == r.id) {
                *slot = r;
            }
        }
    }
    results
}

/// The checks' version as a run stores it: [`CHECKS_VERSION`] and the first 16 hex digits of the
/// rubric the checks ran under (its curves place R3 and R7).
pub fn checks_version(rubric: &Rubric) -> String {
    format!("{CHECKS_VERSION} {}", &rubric.sha256()[..16])
}

/// SHA-256 (hex) of a run's results: their RFC 8785 JSON.
pub fn results_sha256(results: &[CheckResult]) -> String {
    canonical_sha256_of(results).unwrap_or_else(|_| canonical_sha256(&serde_json::Value::Null))
}

/// A run's results' digest ([`results_sha256`]) and each result's receipt digest
/// (`history::receipt_digest`), in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultsDigests {
    pub results: String,
    pub receipts: Vec<String>,
}

/// [`ResultsDigests`] from one canonical rendering: each receipt's RFC 8785 bytes are made once,
/// hashed alone for its digest and placed unchanged in its result's, whose members are written in
/// their canonical order (every key ASCII, so byte order is UTF-16 order). The same digests as
/// [`results_sha256`] and `history::receipt_digest` (a test holds them to it).
pub fn results_digests(results: &[CheckResult]) -> ResultsDigests {
    fn canonical<T: serde::Serialize + ?Sized>(value: &T) -> Option<Vec<u8>> {
        crate::canonical::canonical_bytes_of(value).ok()
    }
    let one_pass = || {
        let mut all = Sha256::new();
        all.update(b"[");
        let mut receipts = Vec::with_capacity(results.len());
        for (i, result) in results.iter().enumerate() {
            // Every member named: one added to `CheckResult` must be placed here.
            let CheckResult {
                id,
                outcome,
                evidence,
                value,
                receipt,
            } = result;
            let receipt = canonical(receipt)?;
            receipts.push(hex::encode(Sha256::digest(&receipt)));
            if i > 0 {
                all.update(b",");
            }
            all.update(b"{\"evidence\":");
            all.update(canonical(evidence)?);
            all.update(b",\"id\":");
            all.update(canonical(id)?);
            all.update(b",\"outcome\":");
            all.update(canonical(outcome)?);
            all.update(b",\"receipt\":");
            all.update(&receipt);
            if let Some(value) = value {
                all.update(b",\"value\":");
                all.update(canonical(value)?);
            }
            all.update(b"}");
        }
        all.update(b"]");
        Some(ResultsDigests {
            results: hex::encode(all.finalize()),
            receipts,
        })
    };
    // A result serde cannot render canonically: digested as everyone else digests it.
    one_pass().unwrap_or_else(|| ResultsDigests {
        results: results_sha256(results),
        receipts: results
            .iter()
            .map(|r| crate::history::receipt_digest(&r.receipt))
            .collect(),
    })
}

fn outcome_letter(o: Outcome) -> char {
    match o {
        Outcome::Pass => 'p',
        Outcome::Fail => 'f',
        Outcome::Na => 'n',
        Outcome::Unmeasured => 'u',
    }
}

/// One letter per result, in order: `p`ass, `f`ail, `n`a, `u`nmeasured.
pub fn outcome_vector(results: &[CheckResult]) -> String {
    results.iter().map(|r| outcome_letter(r.outcome)).collect()
}

/// A record in its stored form; the bytes it keeps apart are added to `blobs`. `rubric` is the
/// one the run's checks ran under (a run's results that it does not reproduce are kept whole).
pub fn to_stored(record: Record, rubric: &Rubric, blobs: &mut Vec<NewBlob>) -> StoredRecord {
    to_stored_derived(record, rubric, None, None, blobs)
}

/// [`to_stored`], given what a run's results derive to when the caller has just derived them
/// ([`derive_results`] of the same observations under the same rubric): not derived again; and
/// given the results' digest ([`results_digests`]) when the caller has made it: not made again.
pub fn to_stored_derived(
    record: Record,
    rubric: &Rubric,
    derived: Option<Vec<CheckResult>>,
    results_digest: Option<String>,
    blobs: &mut Vec<NewBlob>,
) -> StoredRecord {
    let mut stored = record
        .map_run(|run| {
            Ok::<_, std::convert::Infallible>(Box::new(store_run(
                *run,
                rubric,
                derived,
                results_digest,
                &mut *blobs,
            )))
        })
        .unwrap_or_else(|never| match never {});
    if let Record::Refund(refund) = &mut stored
        && let Some(ex) = refund.refund.operator_exchange.as_mut()
    {
        exchange_apart(ex, blobs);
    }
    stored
}

/// A run's observation as its blob: its exchanges' repeated bytes and its listing apart first.
fn observation_apart(mut observation: StoredObservation, blobs: &mut Vec<NewBlob>) -> String {
    for ex in observation_exchanges_mut(&mut observation) {
        exchange_apart(ex, blobs);
    }
    listing_apart(&mut observation.free, blobs);
    let bytes = serde_json::to_vec(&observation).unwrap_or_default();
    keep_as(blobs, bytes, BlobKind::Observation)
}

fn observation_exchanges_mut(observation: &mut StoredObservation) -> Vec<&mut Exchange> {
    let StoredObservation { free, paid, .. } = observation;
    let mut all: Vec<&mut Exchange> = free.exchanges_mut().collect();
    if let Some(paid) = paid.as_mut() {
        all.extend(paid.exchanges_mut());
    }
    all
}

fn store_run(
    run: RunRecord,
    rubric: &Rubric,
    derived: Option<Vec<CheckResult>>,
    results_digest: Option<String>,
    blobs: &mut Vec<NewBlob>,
) -> StoredRun {
    let derived = derived.unwrap_or_else(|| derive_results(&run.free, run.paid.as_ref(), rubric));
    let same_checks = derived.len() == run.results.len()
        && derived.iter().zip(&run.results).all(|(d, r)| d.id == r.id);
    let (kept, all_kept) = if same_checks {
        let kept = run
            .results
            .iter()
            .zip(&derived)
            .filter(|(r, d)| differ(r, d))
            .map(|(r, _)| r.clone())
            .collect();
        (kept, false)
    } else {
        (run.results.clone(), true)
    };
    StoredRun {
        id: run.id,
        subject: run.subject,
        vantage: run.vantage,
        started_at_ms: run.started_at_ms,
        ended_at_ms: run.ended_at_ms,
        provenance: run.provenance,
        revision: run.revision,
        results: DerivedResults {
            checks: checks_version(rubric),
            outcomes: outcome_vector(&run.results),
            sha256: results_digest.unwrap_or_else(|| results_sha256(&run.results)),
            all_kept,
        },
        observation: observation_apart(
            StoredObservation {
                free: run.free,
                paid: run.paid,
                kept,
            },
            blobs,
        ),
    }
}

/// Whether a result differs from the one derived, as its hash sees it: in canonical JSON (a
/// result read back from JSON holds `46` where the checks computed `46.0`: equal bytes).
fn differ(result: &CheckResult, derived: &CheckResult) -> bool {
    result != derived
        && results_sha256(std::slice::from_ref(result))
            != results_sha256(std::slice::from_ref(derived))
}

/// Reads a stored record back as every reader sees it: blobs put back, a run's results derived
/// again under the rubric it names (one of `rubrics`) and checked against its stored hash.
pub fn from_stored(
    mut stored: StoredRecord,
    rubrics: &[Rubric],
    blob: &mut dyn FnMut(&[u8; 32]) -> Option<Vec<u8>>,
) -> Result<Record, ReadBack> {
    if let Record::Refund(refund) = &mut stored
        && let Some(ex) = refund.refund.operator_exchange.as_mut()
    {
        exchange_back(ex, blob)?;
    }
    stored.map_run(|run| {
        let observation = observation_back(&run.observation, blob)?;
        read_run(*run, observation, rubrics).map(Box::new)
    })
}

/// A run's observation read from its blob (checked to hash to the name the entry gives it), its
/// own blobs put back.
fn observation_back(
    sha: &str,
    blob: &mut dyn FnMut(&[u8; 32]) -> Option<Vec<u8>>,
) -> Result<StoredObservation, ReadBack> {
    let bytes = fetch(blob, sha)?;
    let bad = |why: String| ReadBack::BadBlob {
        sha: sha.to_string(),
        what: "a run's observation",
        why,
    };
    if hex::encode(Sha256::digest(&bytes)) != sha {
        return Err(bad("its bytes do not hash to its name".into()));
    }
    let mut observation: StoredObservation =
        serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    for ex in observation_exchanges_mut(&mut observation) {
        exchange_back(ex, blob)?;
    }
    listing_back(&mut observation.free, blob)?;
    Ok(observation)
}

fn read_run(
    run: StoredRun,
    observation: StoredObservation,
    rubrics: &[Rubric],
) -> Result<RunRecord, ReadBack> {
    let StoredObservation { free, paid, kept } = observation;
    let DerivedResults {
        checks,
        outcomes,
        sha256,
        all_kept,
    } = run.results;
    let results = if all_kept {
        kept
    } else {
        let prefix = checks.rsplit(' ').next().unwrap_or_default();
        let rubric = rubrics
            .iter()
            .find(|r| !prefix.is_empty() && r.sha256().starts_with(prefix))
            .ok_or_else(|| ReadBack::UnknownRubric {
                checks: checks.clone(),
                rubric: prefix.to_string(),
            })?;
        let mut results = derive_results(&free, paid.as_ref(), rubric);
        for k in kept {
            match results.iter_mut().find(|r| r.id == k.id) {
                Some(slot) => *slot = k,
                None => results.push(k),
            }
        }
        results
    };
    let derived = results_sha256(&results);
    if derived != sha256 || outcome_vector(&results) != outcomes {
        return Err(ReadBack::ResultsDiffer {
            ours: CHECKS_VERSION,
            checks,
            stored: sha256,
            derived,
        });
    }
    Ok(RunRecord {
        id: run.id,
        subject: run.subject,
        vantage: run.vantage,
        started_at_ms: run.started_at_ms,
        ended_at_ms: run.ended_at_ms,
        provenance: run.provenance,
        revision: run.revision,
        free,
        paid,
        results,
    })
}

/// The blobs a stored record names itself, as written in it (hex): a run's observation, a
/// refund watch's bodies, header sets and certificate chains, a score's value population.
/// `ledger verify` checks that each is there and hashes to its name; the blobs an observation
/// names are checked when the run is read back (deep verification reads every one).
pub fn blob_references(record: &StoredRecord) -> Vec<String> {
    let mut named = Vec::new();
    match record {
        Record::Run(run) => named.push(run.observation.clone()),
        Record::Refund(refund) => {
            if let Some(ex) = &refund.refund.operator_exchange {
                if let Some(response) = &ex.response {
                    if response.body_stored_apart {
                        named.push(response.body_sha256.clone());
                    }
                    named.extend(response.headers_sha256.clone());
                }
                if let Some(tls) = &ex.tls {
                    named.extend(tls.chain_sha256.clone());
                }
            }
        }
        Record::Score(score) => named.extend(score.population_sha256.clone()),
        Record::Snapshot(snapshot) => named.push(snapshot.sha256.clone()),
        _ => {}
    }
    named
}

fn keep(blobs: &mut Vec<NewBlob>, bytes: Vec<u8>) -> String {
    keep_as(blobs, bytes, BlobKind::Repeated)
}

fn keep_as(blobs: &mut Vec<NewBlob>, bytes: Vec<u8>, kind: BlobKind) -> String {
    // A run's samples mostly repeat one another's bytes (the same 402, header set and chain):
    // bytes equal to a blob already kept are that blob, known without hashing them again.
    if let Some(kept) = blobs.iter().find(|b| b.bytes == bytes) {
        return hex::encode(kept.sha256);
    }
    let sha256: [u8; 32] = Sha256::digest(&bytes).into();
    blobs.push(NewBlob {
        sha256,
        bytes,
        kind,
    });
    hex::encode(sha256)
}

fn is_volatile(name: &str) -> bool {
    VOLATILE_HEADERS
        .iter()
        .any(|v| v.eq_ignore_ascii_case(name))
}

/// Moves an exchange's body, header set and certificate chain into blobs.
fn exchange_apart(ex: &mut Exchange, blobs: &mut Vec<NewBlob>) {
    if let Some(response) = ex.response.as_mut() {
        if response.body.len() >= BODY_APART_MIN_BYTES && !response.body_stored_apart {
            let body = std::mem::take(&mut response.body);
            response.body_sha256 = keep(blobs, body);
            response.body_stored_apart = true;
        }
        if !response.headers.is_empty() && response.headers_sha256.is_none() {
            let mut set: Vec<(String, Option<String>)> = Vec::with_capacity(response.headers.len());
            let mut volatile = Vec::new();
            for (name, value) in std::mem::take(&mut response.headers) {
                if is_volatile(&name) {
                    set.push((name.clone(), None));
                    volatile.push((name, value));
                } else {
                    set.push((name, Some(value)));
                }
            }
            let bytes = serde_json::to_vec(&set).unwrap_or_default();
            response.headers_sha256 = Some(keep(blobs, bytes));
            response.headers = volatile;
        }
    }
    if let Some(tls) = ex.tls.as_mut()
        && !tls.chain_der.is_empty()
        && tls.chain_sha256.is_none()
    {
        let chain = std::mem::take(&mut tls.chain_der);
        tls.chain_sha256 = Some(keep(blobs, encode_chain(&chain)));
    }
}

/// Puts an exchange's blobs back.
fn exchange_back(
    ex: &mut Exchange,
    blob: &mut dyn FnMut(&[u8; 32]) -> Option<Vec<u8>>,
) -> Result<(), ReadBack> {
    if let Some(response) = ex.response.as_mut() {
        if response.body_stored_apart {
            response.body = fetch(blob, &response.body_sha256)?;
            response.body_stored_apart = false;
        }
        if let Some(sha) = response.headers_sha256.take() {
            let bytes = fetch(blob, &sha)?;
            let bad = |why: String| ReadBack::BadBlob {
                sha: sha.clone(),
                what: "a header set",
                why,
            };
            let set: Vec<(String, Option<String>)> =
                serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
            let mut volatile = std::mem::take(&mut response.headers).into_iter();
            let mut headers = Vec::with_capacity(set.len());
            for (name, value) in set {
                match value {
                    Some(value) => headers.push((name, value)),
                    None => match volatile.next() {
                        Some((kept, value)) if kept == name => headers.push((name, value)),
                        _ => return Err(bad(format!("the entry has no value for {name:?}"))),
                    },
                }
            }
            if volatile.next().is_some() {
                return Err(bad(
                    "the entry has more values than the set has places".into()
                ));
            }
            response.headers = headers;
        }
    }
    if let Some(tls) = ex.tls.as_mut()
        && let Some(sha) = tls.chain_sha256.take()
    {
        let bytes = fetch(blob, &sha)?;
        tls.chain_der = decode_chain(&bytes).ok_or_else(|| ReadBack::BadBlob {
            sha,
            what: "a certificate chain",
            why: "a certificate's length runs past the end".into(),
        })?;
    }
    Ok(())
}

fn listing_apart(free: &mut FreeObservation, blobs: &mut Vec<NewBlob>) {
    if matches!(free.listing, ListingSeen::NotAsked) || free.listing_sha256.is_some() {
        return;
    }
    let listing = std::mem::replace(&mut free.listing, ListingSeen::NotAsked);
    let bytes = serde_json::to_vec(&listing).unwrap_or_default();
    free.listing_sha256 = Some(keep(blobs, bytes));
}

fn listing_back(
    free: &mut FreeObservation,
    blob: &mut dyn FnMut(&[u8; 32]) -> Option<Vec<u8>>,
) -> Result<(), ReadBack> {
    let Some(sha) = free.listing_sha256.take() else {
        return Ok(());
    };
    let bytes = fetch(blob, &sha)?;
    free.listing = serde_json::from_slice(&bytes).map_err(|e| ReadBack::BadBlob {
        sha,
        what: "a catalogue listing",
        why: e.to_string(),
    })?;
    Ok(())
}

fn fetch(
    blob: &mut dyn FnMut(&[u8; 32]) -> Option<Vec<u8>>,
    sha: &str,
) -> Result<Vec<u8>, ReadBack> {
    let key: [u8; 32] = hex::decode(sha)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| ReadBack::MissingBlob(sha.to_string()))?;
    blob(&key).ok_or_else(|| ReadBack::MissingBlob(sha.to_string()))
}

/// A certificate chain as one blob: each certificate's length (4 bytes, big-endian), then its DER.
fn encode_chain(chain: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(chain.iter().map(|c| c.len() + 4).sum());
    for cert in chain {
        out.extend_from_slice(&(cert.len() as u32).to_be_bytes());
        out.extend_from_slice(cert);
    }
    out
}

fn decode_chain(mut bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut chain = Vec::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes.split_first_chunk::<4>()?;
        let len = u32::from_be_bytes(*len) as usize;
        if rest.len() < len {
            return None;
        }
        chain.push(rest[..len].to_vec());
        bytes = &rest[len..];
    }
    Some(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_reads_back_and_a_short_one_is_refused() {
        let chain = vec![vec![1u8, 2, 3], Vec::new(), vec![9u8; 300]];
        assert_eq!(decode_chain(&encode_chain(&chain)).unwrap(), chain);
        let mut cut = encode_chain(&chain);
        cut.pop();
        assert!(decode_chain(&cut).is_none());
    }

    #[test]
    fn one_rendering_digests_the_results_and_each_receipt_as_each_alone_would() {
        use crate::evidence::Receipt;
        use serde_json::json;
        let ids = ["R1", "R3", "C1", "C2", "H2", "S1", "R4", "R7"];
        let outcomes = [
            Outcome::Pass,
            Outcome::Fail,
            Outcome::Na,
            Outcome::Unmeasured,
        ];
        let values = [
            None,
            Some(46.0),
            Some(0.1),
            Some(-0.0),
            Some(1e21),
            Some(f64::NAN),
            Some(123.456_789),
        ];
        let details = [
            serde_json::Value::Null,
            json!({"samples": [{"outcome": "pass", "ms": 12.5}], "rule": "é\u{1F600}"}),
            json!({"zeta": 1, "alpha": {"b": [true, null], "a": "\u{7f}\t"}, "\u{e000}": 2, "\u{10000}": 3}),
            json!([1, "two", 3.5]),
        ];
        let evidence = ["", "a \"quoted\" line\n", "ünïcödé and \u{0}", "plain"];
        let mut seed = 7u64;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as usize % n
        };
        for len in [0usize, 1, 2, 5, 27] {
            for _ in 0..20 {
                let results: Vec<CheckResult> = (0..len)
                    .map(|_| {
                        let mut sha256 = std::collections::BTreeMap::new();
                        for k in 0..next(4) {
                            sha256.insert(format!("402.body.{k}"), "ab".repeat(32));
                        }
                        CheckResult {
                            id: ids[next(ids.len())].parse().unwrap(),
                            outcome: outcomes[next(outcomes.len())],
                            evidence: evidence[next(evidence.len())].to_string(),
                            value: values[next(values.len())],
                            receipt: Receipt {
                                vantage: if next(2) == 0 { "v0" } else { "east-1" }.into(),
                                at: "2026-12-04T18:00:00Z".into(),
                                sha256,
                                tx: (next(3) == 0).then(|| format!("0x{}", "cd".repeat(32))),
                                detail: details[next(details.len())].clone(),
                            },
                        }
                    })
                    .collect();
                let digests = results_digests(&results);
                assert_eq!(digests.results, results_sha256(&results), "{results:?}");
                let receipts: Vec<String> = results
                    .iter()
                    .map(|r| crate::history::receipt_digest(&r.receipt))
                    .collect();
                assert_eq!(digests.receipts, receipts);
            }
        }
    }

    #[test]
    fn repeated_bytes_are_one_blob_named_by_their_hash() {
        let mut blobs = Vec::new();
        let a = b"the same 402 body".to_vec();
        let b = b"another body".to_vec();
        let first = keep(&mut blobs, a.clone());
        let other = keep_as(&mut blobs, b.clone(), BlobKind::Observation);
        let again = keep(&mut blobs, a.clone());
        assert_eq!(first, again);
        assert_eq!(first, hex::encode(Sha256::digest(&a)));
        assert_eq!(other, hex::encode(Sha256::digest(&b)));
        assert_eq!(blobs.len(), 2);
        assert!(
            blobs
                .iter()
                .all(|kept| kept.sha256 == <[u8; 32]>::from(Sha256::digest(&kept.bytes)))
        );
        assert_eq!(blobs[1].kind, BlobKind::Observation);
    }
}
