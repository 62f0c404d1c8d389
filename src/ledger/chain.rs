//! The hash chain: how an entry is serialised and hashed, how entries link, and how a chain of
//! stored rows is verified. Pure: rows in, a verdict out.
//!
//! An entry's bytes are the RFC 8785 canonical JSON of its [`Envelope`] (format version, sequence
//! number, time, subject, the previous entry's hash, the record); its hash is its leaf hash in the
//! log's Merkle tree, SHA-256(0x00 || bytes), so that one hash serves the chain and the tree (format
//! 1 entries hash to the SHA-256 of their bytes). The first entry's `prev` is 32 zero bytes. A checkpoint is the reporter key's ed25519
//! signature over `x402-probe.checkpoint/1\n<seq>\n<hash hex>`.

use ed25519_dalek::{Signature, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::merkle::leaf_hash;
use super::record::{Record, RecordKind, RunSubject, StoredRecord};
use crate::canonical::to_canonical_bytes;
use crate::evidence::run::{RunRecord, StoredRun};

/// The envelope format version written by this build: 2, runs stored with their results derived
/// (`ledger::stored`).
pub const ENVELOPE_VERSION: u32 = 2;

/// The envelope version of format 1 ledgers (runs kept whole, results and receipts copied):
/// read only by `ledger migrate` and the check of a ledger waiting for it.
pub const ENVELOPE_VERSION_1: u32 = 1;

/// What a checkpoint signs, before the seq and hash.
pub const CHECKPOINT_DOMAIN: &str = "x402-probe.checkpoint/1";

/// One entry as hashed: everything but its own hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope<R = Box<StoredRun>> {
    pub v: u32,
    pub seq: u64,
    pub at_ms: i64,
    pub subject: Option<String>,
    /// The previous entry's hash, hex.
    pub prev: String,
    pub record: Record<R>,
}

/// The columns of a stored entry the chain reads (its bytes hashed apart): what a chain-only
/// verification takes from each row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainLink {
    pub seq: u64,
    pub at_ms: i64,
    pub prev: [u8; 32],
    pub hash: [u8; 32],
    /// The length of its bytes.
    pub bytes: u64,
}

/// An entry as stored: its columns and its canonical bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEntry {
    pub seq: u64,
    pub at_ms: i64,
    pub kind: RecordKind,
    pub subject: Option<String>,
    pub prev: [u8; 32],
    pub hash: [u8; 32],
    pub body: Vec<u8>,
}

impl StoredEntry {
    /// The envelope, parsed back from the canonical bytes (the stored form: a run's results
    /// are read back through `ledger::stored::from_stored`).
    pub fn envelope(&self) -> Result<Envelope, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// The envelope of a format 1 entry (runs kept whole), for `ledger migrate`.
    pub fn envelope_v1(&self) -> Result<Envelope<Box<RunRecord>>, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// Builds the stored form of a new entry after `prev`.
pub fn seal(
    seq: u64,
    at_ms: i64,
    prev: [u8; 32],
    record: &StoredRecord,
) -> Result<StoredEntry, serde_json::Error> {
    Ok(seal_canonical(
        seq,
        at_ms,
        prev,
        record,
        &record_canonical_bytes(record)?,
    ))
}

/// A record's RFC 8785 bytes, as its envelope holds them: made before the writer's transaction
/// ([`seal_canonical`] only places them).
pub fn record_canonical_bytes(record: &StoredRecord) -> Result<Vec<u8>, serde_json::Error> {
    crate::canonical::canonical_bytes_of(record).map_err(|e| match e {
        crate::canonical::CanonicalError::Serialize(e) => e,
    })
}

/// [`seal`] of a record whose canonical bytes are made already: the envelope's canonical JSON
/// is its members in RFC 8785 order (`at_ms`, `prev`, `record`, `seq`, `subject`, `v`), each value
/// canonical, so the bytes are placed rather than serialised again.
pub fn seal_canonical(
    seq: u64,
    at_ms: i64,
    prev: [u8; 32],
    record: &StoredRecord,
    record_bytes: &[u8],
) -> StoredEntry {
    let subject = record.subject();
    let scalar = |v: serde_json::Value| to_canonical_bytes(&v);
    let mut body = Vec::with_capacity(record_bytes.len() + 192);
    body.extend_from_slice(b"{\"at_ms\":");
    body.extend(scalar(at_ms.into()));
    body.extend_from_slice(b",\"prev\":\"");
    body.extend_from_slice(hex::encode(prev).as_bytes());
    body.extend_from_slice(b"\",\"record\":");
    body.extend_from_slice(record_bytes);
    body.extend_from_slice(b",\"seq\":");
    body.extend(scalar(seq.into()));
    body.extend_from_slice(b",\"subject\":");
    body.extend(scalar(subject.map_or(serde_json::Value::Null, Into::into)));
    body.extend_from_slice(format!(",\"v\":{ENVELOPE_VERSION}}}").as_bytes());
    let hash = leaf_hash(&body);
    StoredEntry {
        seq,
        at_ms,
        kind: record.kind(),
        subject: subject.map(str::to_string),
        prev,
        hash,
        body,
    }
}

/// The bytes a checkpoint signs.
pub fn checkpoint_message(seq: u64, hash: &[u8; 32]) -> Vec<u8> {
    format!("{CHECKPOINT_DOMAIN}\n{seq}\n{}", hex::encode(hash)).into_bytes()
}

/// A stored checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub seq: u64,
    pub hash: [u8; 32],
    pub at_ms: i64,
    pub public_key: [u8; 32],
    pub signature: [u8; 64],
}

/// Where and why a chain is broken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ledger entry {seq}: {why}")]
pub struct Broken {
    pub seq: u64,
    pub why: String,
}

/// What a verification saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifySummary {
    pub entries: u64,
    pub bytes: u64,
    pub head_seq: u64,
    pub head_hash: String,
    pub checkpoints: u64,
    /// The last entry a valid checkpoint covers (0: none).
    pub signed_through: u64,
    /// The key every checkpoint is signed with (hex), when there is one.
    pub signed_by: Option<String>,
    /// How much entry time the entries after the last checkpoint span (ms; 0 when at most one).
    pub unsigned_span_ms: i64,
    /// Distinct blobs the entries name, each found and hashing to its name (0 with `--chain-only`).
    pub blobs_referenced: u64,
    /// Derived score rows checked against their ledger entries (0 with `--chain-only`).
    pub score_rows: u64,
    /// Tree checkpoints (signed notes) checked against the entries' Merkle root.
    pub tree_checkpoints: u64,
    /// The largest tree size a valid tree checkpoint covers (0: none).
    pub tree_signed_through: u64,
    /// The Merkle root of all the entries (hex).
    pub tree_root: String,
}

/// The reporter key a verification trusts, and what it then asks of the checkpoints: every one
/// signed by that key, at least one once there are entries, and an unsigned tail no longer than
/// a running daemon leaves (it signs every `checkpoint_every_secs`, at its start and on
/// shutdown). Without an outside copy of the latest checkpoint nothing can prove that entries
/// after the last checkpoint were not dropped or rewritten: the tail rule bounds them to one
/// stretch of `max_unsigned_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trusted {
    pub public_key: [u8; 32],
    /// The longest stretch of entry time (`at_ms` of the first to the last entry after the last
    /// checkpoint) accepted without a signature.
    pub max_unsigned_ms: i64,
}

/// Verifies a chain incrementally: feed every stored row in `seq` order, then the checkpoints.
#[derive(Debug, Default)]
pub struct Verifier {
    summary: VerifySummary,
    prev: [u8; 32],
    /// Hashes at the seqs checkpoints name, collected on the way (checkpoints are few).
    wanted: std::collections::BTreeMap<u64, Option<[u8; 32]>>,
    /// The last seq a checkpoint names: entries after it are the unsigned tail.
    last_named: u64,
    /// The earliest and latest `at_ms` of the unsigned tail.
    tail_ms: Option<(i64, i64)>,
    /// Reads a format 1 ledger (waiting for `ledger migrate`).
    format_1: bool,
}

impl Verifier {
    /// A verifier that will check `checkpoints` against the hashes it sees.
    pub fn new(checkpoints: &[Checkpoint]) -> Verifier {
        Verifier {
            wanted: checkpoints.iter().map(|c| (c.seq, None)).collect(),
            last_named: checkpoints.iter().map(|c| c.seq).max().unwrap_or(0),
            ..Verifier::default()
        }
    }

    /// A verifier of a format 1 ledger (its entries' bytes are format 1 envelopes): what
    /// `ledger migrate` checks before it reads one.
    pub fn new_format_1(checkpoints: &[Checkpoint]) -> Verifier {
        Verifier {
            format_1: true,
            ..Verifier::new(checkpoints)
        }
    }

    /// Checks one row: its position, its link to the previous row, its hash, and (when `deep`)
    /// that its bytes are a canonical entry saying what the columns say. The hash chain alone
    /// already catches any changed, removed or reordered entry; `deep` also catches a column
    /// edited beside intact bytes, and bytes this build cannot read. Returns the parsed envelope
    /// when `deep` (what the entry references is checked from it).
    pub fn feed(&mut self, row: &StoredEntry, deep: bool) -> Result<Option<Envelope>, Broken> {
        let hash = if self.format_1 {
            Sha256::digest(&row.body).into()
        } else {
            leaf_hash(&row.body)
        };
        self.feed_hashed(row, hash, deep)
    }

    /// [`Verifier::feed`] of a row whose bytes' hash is computed already (a verification that
    /// walks the Merkle tree too computes the leaf hash once for both).
    pub fn feed_hashed(
        &mut self,
        row: &StoredEntry,
        hash: [u8; 32],
        deep: bool,
    ) -> Result<Option<Envelope>, Broken> {
        let broken = |why: String| Broken { seq: row.seq, why };
        self.feed_link(
            &ChainLink {
                seq: row.seq,
                at_ms: row.at_ms,
                prev: row.prev,
                hash: row.hash,
                bytes: row.body.len() as u64,
            },
            hash,
        )?;
        // A failure here ends the verification: that the link moved the verifier on is moot.
        Ok(match (deep, self.format_1) {
            (false, _) => None,
            (true, false) => Some(check_columns(row, ENVELOPE_VERSION).map_err(broken)?),
            (true, true) => {
                check_columns::<Box<RunRecord>>(row, ENVELOPE_VERSION_1).map_err(broken)?;
                None
            }
        })
    }

    /// The chain's part of a row's check, from its columns and the hash of its bytes alone:
    /// its position, its link to the previous row, its hash. What a chain-only verification
    /// reads (no kind, no subject, the bytes hashed where they lie).
    pub fn feed_link(&mut self, row: &ChainLink, hash: [u8; 32]) -> Result<(), Broken> {
        let expected = self.summary.entries + 1;
        let broken = |why: String| Broken { seq: row.seq, why };
        if row.seq != expected {
            return Err(Broken {
                seq: expected,
                why: format!("missing: the next stored entry is {}", row.seq),
            });
        }
        if row.prev != self.prev {
            return Err(broken(format!(
                "its previous hash {} is not the hash of entry {} ({})",
                hex::encode(row.prev),
                expected - 1,
                hex::encode(self.prev)
            )));
        }
        if hash != row.hash {
            return Err(broken(format!(
                "its bytes hash to {}, not to its stored hash {}",
                hex::encode(hash),
                hex::encode(row.hash)
            )));
        }
        if let Some(slot) = self.wanted.get_mut(&row.seq) {
            *slot = Some(row.hash);
        }
        if row.seq > self.last_named {
            let (first, last) = self.tail_ms.get_or_insert((row.at_ms, row.at_ms));
            *first = (*first).min(row.at_ms);
            *last = (*last).max(row.at_ms);
        }
        self.prev = row.hash;
        self.summary.entries = expected;
        self.summary.bytes += row.bytes;
        Ok(())
    }

    /// Checks the checkpoints and returns the summary: each signature, that it names the hash
    /// actually at its seq, and that one key made them all (the ledger records no key rotation).
    /// With a `trusted` key, that key made them, and the entries are covered (see [`Trusted`]).
    pub fn finish(
        mut self,
        checkpoints: &[Checkpoint],
        trusted: Option<&Trusted>,
    ) -> Result<VerifySummary, Broken> {
        let mut signer: Option<&Checkpoint> = None;
        for c in checkpoints {
            let broken = |why: String| Broken { seq: c.seq, why };
            let Some(Some(hash)) = self.wanted.get(&c.seq) else {
                return Err(broken(format!(
                    "a checkpoint names entry {}, which the chain does not have",
                    c.seq
                )));
            };
            if *hash != c.hash {
                return Err(broken(
                    "the checkpoint signed another hash than the entry's".into(),
                ));
            }
            if let Some(trusted) = trusted
                && trusted.public_key != c.public_key
            {
                return Err(broken(format!(
                    "the checkpoint is signed by {}, not by the trusted reporter key",
                    hex::encode(c.public_key)
                )));
            }
            if let Some(first) = signer
                && first.public_key != c.public_key
            {
                return Err(broken(format!(
                    "the checkpoints are signed by more than one key ({} through entry {}, then {}), \
                     and the ledger records no key rotation",
                    hex::encode(first.public_key),
                    first.seq,
                    hex::encode(c.public_key)
                )));
            }
            let key = VerifyingKey::from_bytes(&c.public_key)
                .map_err(|e| broken(format!("the checkpoint's public key is invalid: {e}")))?;
            let signature = Signature::from_bytes(&c.signature);
            key.verify(&checkpoint_message(c.seq, &c.hash), &signature)
                .map_err(|_| broken("the checkpoint's signature does not verify".into()))?;
            signer.get_or_insert(c);
            self.summary.checkpoints += 1;
            self.summary.signed_through = self.summary.signed_through.max(c.seq);
        }
        self.summary.signed_by = signer.map(|c| hex::encode(c.public_key));
        self.summary.unsigned_span_ms = self.tail_ms.map_or(0, |(first, last)| last - first);
        self.summary.head_seq = self.summary.entries;
        self.summary.head_hash = hex::encode(self.prev);
        if let Some(trusted) = trusted {
            covered(&self.summary, trusted)?;
        }
        Ok(self.summary)
    }
}

/// With a trusted key: a ledger with entries has a checkpoint, and the entries after the last one
/// span no more entry time than a running daemon leaves unsigned. Deleting the newest checkpoints
/// leaves a long unsigned tail; deleting them all leaves none: both fail here.
fn covered(summary: &VerifySummary, trusted: &Trusted) -> Result<(), Broken> {
    let first_unsigned = summary.signed_through + 1;
    if summary.entries > 0 && summary.checkpoints == 0 {
        return Err(Broken {
            seq: first_unsigned,
            why: format!(
                "no checkpoint covers any of the {} entries (not signed yet, or checkpoints \
                 deleted): nothing here is signed by the trusted key",
                summary.entries
            ),
        });
    }
    if summary.unsigned_span_ms > trusted.max_unsigned_ms {
        return Err(Broken {
            seq: first_unsigned,
            why: format!(
                "entries {first_unsigned} to {} are not signed and span {} s of entry time, more \
                 than the {} s a running daemon leaves unsigned (were checkpoints deleted?)",
                summary.head_seq,
                summary.unsigned_span_ms / 1000,
                trusted.max_unsigned_ms / 1000
            ),
        });
    }
    Ok(())
}

/// The deep part of a row's check: canonical bytes of an entry whose envelope matches the columns.
fn check_columns<R>(row: &StoredEntry, version: u32) -> Result<Envelope<R>, String>
where
    R: serde::de::DeserializeOwned + RunSubject,
{
    let value: serde_json::Value =
        serde_json::from_slice(&row.body).map_err(|e| format!("its bytes are not JSON: {e}"))?;
    if to_canonical_bytes(&value) != row.body {
        return Err("its bytes are not canonical JSON".into());
    }
    if value.get("v").and_then(serde_json::Value::as_u64) != Some(u64::from(version)) {
        return Err(format!(
            "its bytes are not an entry of format {version} (v is {})",
            value.get("v").unwrap_or(&serde_json::Value::Null)
        ));
    }
    let envelope: Envelope<R> =
        serde_json::from_value(value).map_err(|e| format!("its bytes are not an entry: {e}"))?;
    let same = envelope.v == version
        && envelope.seq == row.seq
        && envelope.at_ms == row.at_ms
        && envelope.prev == hex::encode(row.prev)
        && envelope.subject == row.subject
        && envelope.subject.as_deref() == envelope.record.subject()
        && envelope.record.kind() == row.kind;
    if !same {
        return Err(
            "its columns (seq, time, kind, subject or previous hash) differ from its bytes".into(),
        );
    }
    Ok(envelope)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::record::{ControlRecord, OutageOf, OutageRecord};
    use ed25519_dalek::{Signer, SigningKey};

    fn chain(n: u64) -> Vec<StoredEntry> {
        let mut prev = [0u8; 32];
        (1..=n)
            .map(|seq| {
                let record = if seq % 2 == 0 {
                    Record::Control(ControlRecord {
                        url: "https://control.example/".into(),
                        at_ms: seq as i64 * 1000,
                        ok: true,
                        detail: format!("probe {seq}"),
                    })
                } else {
                    Record::Outage(OutageRecord::Opened {
                        from_ms: seq as i64,
                        cause: "control failed".into(),
                        of: OutageOf::Vantage,
                    })
                };
                let e = seal(seq, seq as i64 * 1000, prev, &record).unwrap();
                prev = e.hash;
                e
            })
            .collect()
    }

    fn verify(rows: &[StoredEntry], checkpoints: &[Checkpoint]) -> Result<VerifySummary, Broken> {
        let mut v = Verifier::new(checkpoints);
        for r in rows {
            v.feed(r, true)?;
        }
        v.finish(checkpoints, None)
    }

    fn checkpoint(key: &SigningKey, e: &StoredEntry) -> Checkpoint {
        Checkpoint {
            seq: e.seq,
            hash: e.hash,
            at_ms: 0,
            public_key: key.verifying_key().to_bytes(),
            signature: key.sign(&checkpoint_message(e.seq, &e.hash)).to_bytes(),
        }
    }

    /// The envelope placed around a record's canonical bytes is the canonical JSON of the whole
    /// envelope (what `ledger verify` deep checks), for a subject that needs escaping too.
    #[test]
    fn a_sealed_entry_is_the_canonical_json_of_its_envelope() {
        let records = [
            Record::Control(ControlRecord {
                url: "https://control.example/\"q\"\u{7}é".into(),
                at_ms: -5,
                ok: true,
                detail: "x".into(),
            }),
            Record::Correction(crate::ledger::record::CorrectionRecord {
                of_seq: 3,
                subject: Some("https://a.example/\u{1}\"\\ü\u{2028}".into()),
                at_ms: 9_007_199_254_740_993,
                reason: "r".into(),
                detail: serde_json::json!({"z": 1.5, "a": [1e21, -0.0]}),
            }),
        ];
        for (i, record) in records.iter().enumerate() {
            let e = seal(i as u64 + 1, 1_790_000_000_123, [7u8; 32], record).unwrap();
            let envelope = EnvelopeRef {
                v: ENVELOPE_VERSION,
                seq: e.seq,
                at_ms: e.at_ms,
                subject: record.subject(),
                prev: hex::encode(e.prev),
                record,
            };
            let whole = to_canonical_bytes(&serde_json::to_value(&envelope).unwrap());
            assert_eq!(
                String::from_utf8(e.body.clone()).unwrap(),
                String::from_utf8(whole).unwrap()
            );
            assert!(check_columns::<Box<StoredRun>>(&e, ENVELOPE_VERSION).is_ok());
        }
    }

    /// [`Envelope`] by reference: what [`seal_canonical`]'s bytes must equal.
    #[derive(Serialize)]
    struct EnvelopeRef<'a> {
        v: u32,
        seq: u64,
        at_ms: i64,
        subject: Option<&'a str>,
        prev: String,
        record: &'a StoredRecord,
    }

    #[test]
    fn an_intact_chain_verifies_with_its_checkpoints() {
        let rows = chain(10);
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let cps = vec![checkpoint(&key, &rows[4]), checkpoint(&key, &rows[9])];
        let s = verify(&rows, &cps).unwrap();
        assert_eq!((s.entries, s.checkpoints, s.signed_through), (10, 2, 10));
    }

    #[test]
    fn a_changed_removed_or_reordered_entry_is_named() {
        let rows = chain(6);
        // Changed bytes, hash not updated.
        let mut changed = rows.clone();
        changed[2].body[10] ^= 1;
        assert_eq!(verify(&changed, &[]).unwrap_err().seq, 3);
        // Changed and re-hashed: the next entry's link breaks.
        let mut rehashed = rows.clone();
        let forged = seal(
            3,
            rows[2].at_ms,
            rows[1].hash,
            &Record::Control(ControlRecord {
                url: "x".into(),
                at_ms: 0,
                ok: false,
                detail: "forged".into(),
            }),
        )
        .unwrap();
        rehashed[2] = forged;
        assert_eq!(verify(&rehashed, &[]).unwrap_err().seq, 4);
        // Removed.
        let mut removed = rows.clone();
        removed.remove(3);
        assert_eq!(verify(&removed, &[]).unwrap_err().seq, 4);
        // Reordered.
        let mut swapped = rows.clone();
        swapped.swap(1, 2);
        assert_eq!(verify(&swapped, &[]).unwrap_err().seq, 2);
        // A column that disagrees with the bytes.
        let mut column = rows.clone();
        column[4].kind = RecordKind::Run;
        assert_eq!(verify(&column, &[]).unwrap_err().seq, 5);
    }

    #[test]
    fn the_last_entry_rewritten_is_caught_by_its_checkpoint() {
        let rows = chain(4);
        let key = SigningKey::from_bytes(&[9u8; 32]);
        let cps = vec![checkpoint(&key, &rows[3])];
        let mut rewritten = rows.clone();
        rewritten[3] = seal(
            4,
            rows[3].at_ms,
            rows[2].hash,
            &Record::Outage(OutageRecord::Closed {
                from_ms: 0,
                to_ms: 1,
                of: OutageOf::Vantage,
            }),
        )
        .unwrap();
        let err = verify(&rewritten, &cps).unwrap_err();
        assert_eq!(err.seq, 4);
        // A checkpoint by another key than the trusted one is refused.
        let mut v = Verifier::new(&cps);
        for r in &rows {
            v.feed(r, true).unwrap();
        }
        let other = SigningKey::from_bytes(&[1u8; 32])
            .verifying_key()
            .to_bytes();
        assert!(v.finish(&cps, Some(&trusted(other))).is_err());
    }

    fn trusted(public_key: [u8; 32]) -> Trusted {
        Trusted {
            public_key,
            max_unsigned_ms: 3_000,
        }
    }

    fn verify_trusted(
        rows: &[StoredEntry],
        checkpoints: &[Checkpoint],
        key: &SigningKey,
    ) -> Result<VerifySummary, Broken> {
        let mut v = Verifier::new(checkpoints);
        for r in rows {
            v.feed(r, true)?;
        }
        v.finish(checkpoints, Some(&trusted(key.verifying_key().to_bytes())))
    }

    /// With a trusted key, entries no checkpoint covers fail: none at all (every checkpoint
    /// deleted), or a tail longer than a running daemon leaves (the newest ones deleted). Without
    /// one, the key is named, and two keys fail.
    #[test]
    fn a_trusted_key_needs_checkpoints_covering_the_entries() {
        let rows = chain(10); // entry n at n s
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let all = vec![checkpoint(&key, &rows[4]), checkpoint(&key, &rows[8])];
        // Entry 10 is 0 s of unsigned tail.
        let s = verify_trusted(&rows, &all, &key).unwrap();
        assert_eq!((s.signed_through, s.unsigned_span_ms), (9, 0));
        assert_eq!(
            s.signed_by,
            Some(hex::encode(key.verifying_key().to_bytes()))
        );
        // Every checkpoint deleted.
        let err = verify_trusted(&rows, &[], &key).unwrap_err();
        assert_eq!(err.seq, 1, "{err}");
        assert!(err.why.contains("no checkpoint"), "{err}");
        // Without a trusted key it is only reported.
        assert_eq!(verify(&rows, &[]).unwrap().signed_by, None);
        // The newest deleted: entries 6..10 span 4 s, more than 3.
        let err = verify_trusted(&rows, &all[..1], &key).unwrap_err();
        assert_eq!(err.seq, 6, "{err}");
        assert!(err.why.contains("not signed"), "{err}");
        // Checkpoints by two keys, without a trusted key: refused, both named.
        let other = SigningKey::from_bytes(&[8u8; 32]);
        let mixed = vec![checkpoint(&key, &rows[4]), checkpoint(&other, &rows[8])];
        let err = verify(&rows, &mixed).unwrap_err();
        assert!(err.why.contains("more than one key"), "{err}");
        assert!(
            err.why
                .contains(&hex::encode(other.verifying_key().to_bytes())),
            "{err}"
        );
    }
}
