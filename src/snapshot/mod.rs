//! The signed daily snapshot (`state/snapshot.md`): one file per UTC day stating every subject's
//! verdict, grade, score, band, payTo and price as rated at the day's end, with the rubric each was
//! scored under, signed by the reporter key and tied to the ledger: a tree checkpoint made after
//! the day ended, and each subject's `score` entry with its inclusion proof against it. An agent
//! that holds the reporter's public key checks the whole file offline (`verify`, `x402-probe
//! verify-snapshot`), with nothing else from us.
//!
//! This module is pure: the document's types, the message the key signs, and the verification.
//! `make.rs` reads what a snapshot states through the `Store` and keeps it in the ledger.

use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::types::Verdict;
use crate::canonical::{canonical_bytes_of, to_canonical_bytes};
use crate::clock::rfc3339_ms;
use crate::ledger::chain::Envelope;
use crate::ledger::note::Checkpoint;
use crate::ledger::proof::{self, BundleError, InclusionBundle, ProvenEntry};
use crate::ledger::record::{Record, ScoreRecord};
use crate::ledger::tlog;

pub mod make;

/// The snapshot document's format, inside the signed file.
pub const SNAPSHOT_FORMAT: &str = "x402-probe.snapshot/1";
/// The signed file's format, and the first line of what the reporter key signs.
pub const SIGNED_SNAPSHOT_FORMAT: &str = "x402-probe.signed-snapshot/1";
/// The largest snapshot file read (a verifier's bound against a hostile file; about 2 KB per
/// subject, so 100,000 subjects fit).
pub const MAX_SNAPSHOT_BYTES: u64 = 512 * 1024 * 1024;

const DAY_MS: i64 = 86_400_000;

/// The signed file, as served and as kept in the ledger: RFC 8785 JSON, byte for byte.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SignedSnapshot {
    /// Always `x402-probe.signed-snapshot/1`.
    pub format: String,
    /// The reporter key's public half (ed25519, hex).
    pub public_key: String,
    /// ed25519 (hex) over `"x402-probe.signed-snapshot/1\n"` followed by the RFC 8785 bytes of
    /// `snapshot`.
    pub signature: String,
    pub snapshot: Snapshot,
}

/// What a day's snapshot states.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// Always `x402-probe.snapshot/1`.
    pub format: String,
    /// `YYYY-MM-DD` (UTC): each subject's latest score made before this day's end.
    pub day: String,
    /// When the snapshot was made (RFC 3339), after the day ended.
    pub made_at: String,
    /// The log's origin (`x402-probe/<first 8 bytes of the reporter key, hex>`).
    pub origin: String,
    /// The tree checkpoint (a C2SP signed note) every subject's entry is proven in, made after
    /// the day ended.
    pub checkpoint: String,
    /// The reporter's note verifier key (`name+id+key`).
    pub verifier_key: String,
    /// The SHA-256 of each rubric file the subjects were scored under, sorted.
    pub rubrics: Vec<String>,
    /// Every subject scored before the day's end and not removed, by URL.
    pub subjects: Vec<SnapshotSubject>,
}

/// One subject as rated at the day's end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotSubject {
    /// Hex of the first 16 bytes of SHA-256 of `url`.
    pub subject_id: String,
    pub url: String,
    /// The score's time (RFC 3339): before the day's end.
    pub as_of: String,
    pub verdict: Verdict,
    pub grade: Option<String>,
    pub score: f64,
    pub capped_score: f64,
    /// The uncertainty band, low and high.
    pub band: [f64; 2],
    /// The rubric file the score was made under.
    pub rubric_sha256: String,
    /// The score document's SHA-256 (`/v1/subjects/{id}/score` serves it signed while it is the
    /// latest).
    pub document_sha256: String,
    /// What the subject declared in the last run the score read (its first `accepts` entry): the
    /// payTo and price we rated. Absent when no run gave a readable declaration.
    pub rated: Option<Rated>,
    /// The subject's `score` entry (the ledger's bytes) and its inclusion proof against
    /// `checkpoint`: verdict, grade, score, band, rubric and document digest above are the
    /// entry's.
    pub entry: ProvenEntry,
}

/// The payment requirements a score rated, as the subject wrote them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rated {
    pub pay_to: Option<String>,
    pub network: Option<String>,
    pub asset: Option<String>,
    /// In the asset's atomic units.
    pub amount: Option<String>,
    /// The amount read as a 6-decimal dollar token (USDC), in USD.
    pub price_usd: Option<String>,
}

/// The message the reporter key signs for `snapshot`.
pub fn signed_message(snapshot: &Snapshot) -> Result<Vec<u8>, crate::canonical::CanonicalError> {
    let mut message = format!("{SIGNED_SNAPSHOT_FORMAT}\n").into_bytes();
    message.extend(canonical_bytes_of(snapshot)?);
    Ok(message)
}

/// The first ms of `day` (`YYYY-MM-DD`, UTC), or `None` when it is not such a day.
pub fn day_start_ms(day: &str) -> Option<i64> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let date = time::Date::parse(day, &format).ok()?;
    let ms = i64::try_from(date.midnight().assume_utc().unix_timestamp_nanos() / 1_000_000).ok()?;
    // Only the one spelling `day_of` writes (no sign, four digits).
    (day.len() == 10 && crate::clock::day_of(ms) == day).then_some(ms)
}

/// The ms at which `day` is over (the next day's first).
pub fn day_end_ms(day: &str) -> Option<i64> {
    day_start_ms(day).map(|s| s + DAY_MS)
}

/// Why a snapshot file does not verify.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SnapshotError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not in the canonical form it was signed in (RFC 8785): a byte was changed")]
    NotCanonical,
    #[error("not a signed snapshot: {0}")]
    Shape(String),
    #[error("format is {0:?}, not {SIGNED_SNAPSHOT_FORMAT:?}")]
    Format(String),
    #[error("signed by {found}, not by the trusted key {trusted}")]
    OtherKey { found: String, trusted: String },
    #[error("signature is not 64 bytes of hex")]
    SignatureForm,
    #[error("the signature does not verify with the trusted key")]
    Signature,
    #[error("snapshot.format is {0:?}, not {SNAPSHOT_FORMAT:?}")]
    SnapshotFormat(String),
    #[error("day {0:?} is not a UTC day (YYYY-MM-DD)")]
    Day(String),
    #[error("the checkpoint: {0}")]
    Checkpoint(String),
    #[error("the inclusion proofs: {0}")]
    Proof(#[from] BundleError),
    #[error("subject {url}: {why}")]
    Subject { url: String, why: String },
    #[error("{0}")]
    Document(String),
}

/// What a verified snapshot establishes.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    pub snapshot: Snapshot,
    /// The tree checkpoint every subject's entry is proven in.
    pub checkpoint: Checkpoint,
}

/// Checks a snapshot file against the trusted reporter key: its bytes are the canonical form
/// (so no byte can change unseen), the signature, the checkpoint (signed by the same key as
/// this log's note, made after the day ended), every subject's entry proven in it, and every
/// subject's fields equal to its proven `score` entry's.
pub fn verify(bytes: &[u8], trusted: &[u8; 32]) -> Result<Verified, SnapshotError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| SnapshotError::NotJson(e.to_string()))?;
    if to_canonical_bytes(&value) != bytes {
        return Err(SnapshotError::NotCanonical);
    }
    let signed: SignedSnapshot =
        serde_json::from_value(value).map_err(|e| SnapshotError::Shape(e.to_string()))?;
    if signed.format != SIGNED_SNAPSHOT_FORMAT {
        return Err(SnapshotError::Format(signed.format));
    }
    if signed.public_key != hex::encode(trusted) {
        return Err(SnapshotError::OtherKey {
            found: signed.public_key,
            trusted: hex::encode(trusted),
        });
    }
    let signature: [u8; 64] = hex::decode(&signed.signature)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(SnapshotError::SignatureForm)?;
    let key = VerifyingKey::from_bytes(trusted).map_err(|_| SnapshotError::Signature)?;
    let message =
        signed_message(&signed.snapshot).map_err(|e| SnapshotError::Shape(e.to_string()))?;
    key.verify(&message, &Signature::from_bytes(&signature))
        .map_err(|_| SnapshotError::Signature)?;
    let checkpoint = check_snapshot(&signed.snapshot, trusted)?;
    Ok(Verified {
        snapshot: signed.snapshot,
        checkpoint,
    })
}

/// The snapshot's own consistency, once its signature is known good: a signed snapshot that
/// contradicts its proven entries is still refused (the key's holder erred or lied).
fn check_snapshot(s: &Snapshot, trusted: &[u8; 32]) -> Result<Checkpoint, SnapshotError> {
    if s.format != SNAPSHOT_FORMAT {
        return Err(SnapshotError::SnapshotFormat(s.format.clone()));
    }
    let day_end = day_end_ms(&s.day).ok_or_else(|| SnapshotError::Day(s.day.clone()))?;
    let note_key = tlog::note_key(trusted);
    if s.origin != tlog::origin(trusted) || s.verifier_key != note_key.verifier_key() {
        return Err(SnapshotError::Checkpoint(
            "origin or verifier_key is not the trusted key's log".into(),
        ));
    }
    let bundle = InclusionBundle {
        format: proof::FORMAT.to_string(),
        checkpoint: s.checkpoint.clone(),
        verifier_key: s.verifier_key.clone(),
        entries: s.subjects.iter().map(|x| x.entry.clone()).collect(),
    };
    let proven = proof::verify(&bundle, &note_key)?;
    let checkpoint = proven.checkpoint;
    if checkpoint.origin != s.origin {
        return Err(SnapshotError::Checkpoint(format!(
            "its origin is {:?}, not the snapshot's",
            checkpoint.origin
        )));
    }
    if checkpoint.time.saturating_mul(1000) < day_end {
        return Err(SnapshotError::Checkpoint(format!(
            "made at {}, before {} was over",
            rfc3339_ms(checkpoint.time.saturating_mul(1000)),
            s.day
        )));
    }
    let mut rubrics: Vec<String> = Vec::new();
    let mut previous: Option<&str> = None;
    for (subject, (_, body)) in s.subjects.iter().zip(&proven.entries) {
        let bad = |why: String| SnapshotError::Subject {
            url: subject.url.clone(),
            why,
        };
        if previous.is_some_and(|p| p >= subject.url.as_str()) {
            return Err(bad("subjects are not in URL order, or listed twice".into()));
        }
        previous = Some(&subject.url);
        if subject.subject_id != crate::http_url::subject_id(&subject.url) {
            return Err(bad("its subject_id is not its URL's".into()));
        }
        let envelope: Envelope = serde_json::from_slice(body)
            .map_err(|e| bad(format!("its proven entry is not a ledger entry: {e}")))?;
        if envelope.seq != subject.entry.index + 1 {
            return Err(bad("its entry's seq is not its leaf index + 1".into()));
        }
        let Record::Score(score) = envelope.record else {
            return Err(bad("its proven entry is not a score".into()));
        };
        check_subject(subject, &score, day_end).map_err(bad)?;
        if !rubrics.contains(&score.rubric_sha256) {
            rubrics.push(score.rubric_sha256.clone());
        }
    }
    rubrics.sort();
    if rubrics != s.rubrics {
        return Err(SnapshotError::Document(
            "rubrics is not the set of the subjects' rubrics".into(),
        ));
    }
    Ok(checkpoint)
}

/// A subject's stated fields against its proven `score` entry.
fn check_subject(s: &SnapshotSubject, score: &ScoreRecord, day_end: i64) -> Result<(), String> {
    let differs = |field: &str| Err(format!("its {field} is not its proven score entry's"));
    if score.subject != s.url {
        return differs("url");
    }
    if score.as_of_ms >= day_end {
        return Err("its score was made after the day's end".into());
    }
    if rfc3339_ms(score.as_of_ms) != s.as_of {
        return differs("as_of");
    }
    if Verdict::from(score.verdict) != s.verdict {
        return differs("verdict");
    }
    if score.grade != s.grade {
        return differs("grade");
    }
    if score.score.to_bits() != s.score.to_bits() {
        return differs("score");
    }
    if score.capped_score.to_bits() != s.capped_score.to_bits() {
        return differs("capped_score");
    }
    if score.band.map(f64::to_bits) != s.band.map(f64::to_bits) {
        return differs("band");
    }
    if score.rubric_sha256 != s.rubric_sha256 {
        return differs("rubric_sha256");
    }
    if score.document_sha256 != s.document_sha256 {
        return differs("document_sha256");
    }
    Ok(())
}

/// The subject's row for `score` (its proven entry given), with what it rated.
pub(crate) fn subject_row(
    score: &ScoreRecord,
    rated: Option<Rated>,
    entry: ProvenEntry,
) -> SnapshotSubject {
    SnapshotSubject {
        subject_id: crate::http_url::subject_id(&score.subject),
        url: score.subject.clone(),
        as_of: rfc3339_ms(score.as_of_ms),
        verdict: score.verdict.into(),
        grade: score.grade.clone(),
        score: score.score,
        capped_score: score.capped_score,
        band: score.band,
        rubric_sha256: score.rubric_sha256.clone(),
        document_sha256: score.document_sha256.clone(),
        rated,
        entry,
    }
}

#[cfg(test)]
mod tests;
