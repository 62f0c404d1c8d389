//! What a subject's operator is handed to check, offline, that the entries about their endpoint
//! are in the log a signed checkpoint covers: the checkpoint note, and each entry's bytes with its
//! inclusion proof against that checkpoint. One typed struct for the API, `ledger prove` and the
//! verifier; pure.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use super::merkle::{self, Hash, PerfectNodes, ProofError};
use super::note::{Checkpoint, NoteError, NoteKey, open_checkpoint};

/// The bundle's format identifier.
pub const FORMAT: &str = "x402-probe.inclusion/1";

/// Entries and their inclusion proofs against one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InclusionBundle {
    pub format: String,
    /// The checkpoint note, signed by the reporter key (and any witnesses).
    pub checkpoint: String,
    /// The reporter's verifier key in the signed-note text form (`name+id+key`). A verifier
    /// should compare it with the key it already trusts, never trust it because it is here.
    pub verifier_key: String,
    pub entries: Vec<ProvenEntry>,
}

/// One entry: its position in the log (0-based leaf index = seq - 1), its exact bytes, and the
/// hashes from its leaf to the checkpoint's root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProvenEntry {
    pub index: u64,
    /// The entry's bytes (RFC 8785 JSON), base64.
    pub body: String,
    /// The inclusion proof, base64 hashes, the leaf's sibling first.
    pub proof: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error("not an inclusion bundle of format {FORMAT}")]
    Format,
    #[error("the checkpoint: {0}")]
    Checkpoint(#[from] NoteError),
    #[error("entry {index}: {why}")]
    Entry { index: u64, why: String },
    #[error("entry {index}: {source}")]
    Proof {
        index: u64,
        #[source]
        source: ProofError,
    },
}

/// Builds a bundle for the leaves at `indexes` (with their bytes) against the tree of
/// `checkpoint.size` leaves that `nodes` holds. The caller has checked the note is its own.
pub fn build<N: PerfectNodes + ?Sized>(
    nodes: &N,
    checkpoint_note: String,
    verifier_key: String,
    size: u64,
    entries: impl IntoIterator<Item = (u64, Vec<u8>)>,
) -> Result<InclusionBundle, ProofError> {
    let entries = entries.into_iter();
    let mut out = Vec::with_capacity(entries.size_hint().0);
    for (index, body) in entries {
        let proof = merkle::inclusion_proof(nodes, index, size)?;
        out.push(ProvenEntry {
            index,
            body: STANDARD.encode(&body),
            proof: proof.iter().map(|h| STANDARD.encode(h)).collect(),
        });
    }
    Ok(InclusionBundle {
        format: FORMAT.to_string(),
        checkpoint: checkpoint_note,
        verifier_key,
        entries: out,
    })
}

/// What a verified bundle establishes: the checkpoint, and the entries' bytes, each proven in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub checkpoint: Checkpoint,
    pub entries: Vec<(u64, Vec<u8>)>,
}

/// Checks the checkpoint's signature by `trusted`, then every entry's inclusion proof.
pub fn verify(bundle: &InclusionBundle, trusted: &NoteKey) -> Result<Verified, BundleError> {
    if bundle.format != FORMAT {
        return Err(BundleError::Format);
    }
    let checkpoint = open_checkpoint(&bundle.checkpoint, trusted)?;
    let root: Hash = checkpoint.root;
    let mut entries = Vec::with_capacity(bundle.entries.len());
    for e in &bundle.entries {
        let bad = |why: &str| BundleError::Entry {
            index: e.index,
            why: why.to_string(),
        };
        let body = STANDARD
            .decode(&e.body)
            .map_err(|_| bad("its body is not base64"))?;
        let proof = e
            .proof
            .iter()
            .map(|h| {
                let bytes = STANDARD
                    .decode(h)
                    .map_err(|_| bad("a proof hash is not base64"))?;
                <Hash>::try_from(bytes.as_slice()).map_err(|_| bad("a proof hash is not 32 bytes"))
            })
            .collect::<Result<Vec<Hash>, BundleError>>()?;
        merkle::verify_inclusion(
            e.index,
            checkpoint.size,
            &merkle::leaf_hash(&body),
            &proof,
            &root,
        )
        .map_err(|source| BundleError::Proof {
            index: e.index,
            source,
        })?;
        entries.push((e.index, body));
    }
    Ok(Verified {
        checkpoint,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::merkle::{Tree, leaf_hash};
    use crate::ledger::note::sign_note;
    use ed25519_dalek::{Signer, SigningKey};

    fn log(n: u64) -> (Tree, Vec<Vec<u8>>) {
        let bodies: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("{{\"seq\":{},\"subject\":\"s{}\"}}", i + 1, i % 3).into_bytes())
            .collect();
        let mut t = Tree::new();
        for b in &bodies {
            t.push(leaf_hash(b));
        }
        (t, bodies)
    }

    fn signed(sk: &SigningKey, key: &NoteKey, cp: &Checkpoint) -> String {
        sign_note(&cp.body(), key, |m| {
            Ok::<_, std::convert::Infallible>(sk.sign(m).to_bytes())
        })
        .expect("sign")
    }

    #[test]
    fn a_subjects_entries_verify_against_the_checkpoint_and_tampering_fails() {
        let sk = SigningKey::from_bytes(&[11; 32]);
        let key = NoteKey::new("x402-probe.example/reporter", sk.verifying_key().to_bytes())
            .expect("key");
        let (tree, bodies) = log(37);
        let cp = Checkpoint {
            origin: "x402-probe.example/local".into(),
            size: 37,
            root: tree.root(),
            time: 1_764_600_000,
        };
        let note = signed(&sk, &key, &cp);
        let mine: Vec<(u64, Vec<u8>)> = (0..37u64)
            .filter(|i| i % 3 == 1)
            .map(|i| (i, bodies[i as usize].clone()))
            .collect();
        let bundle =
            build(&tree, note.clone(), key.verifier_key(), 37, mine.clone()).expect("build");
        // Through JSON, as a file or the API hands it over.
        let bundle: InclusionBundle =
            serde_json::from_slice(&serde_json::to_vec(&bundle).expect("json"))
                .expect("reads back");
        let ok = verify(&bundle, &key).expect("verifies");
        assert_eq!(ok.checkpoint, cp);
        assert_eq!(ok.entries, mine);

        // A changed entry byte.
        let mut forged = bundle.clone();
        let mut body = STANDARD.decode(&forged.entries[2].body).expect("b64");
        body[3] ^= 1;
        forged.entries[2].body = STANDARD.encode(body);
        assert!(matches!(
            verify(&forged, &key),
            Err(BundleError::Proof { .. })
        ));
        // An entry moved to another index.
        let mut moved = bundle.clone();
        moved.entries[0].index += 1;
        assert!(matches!(
            verify(&moved, &key),
            Err(BundleError::Proof { .. })
        ));
        // A forged proof hash.
        let mut forged = bundle.clone();
        forged.entries[1].proof[0] = STANDARD.encode([0u8; 32]);
        assert!(matches!(
            verify(&forged, &key),
            Err(BundleError::Proof { .. })
        ));
        // A checkpoint for another tree, signed by another key.
        let other = SigningKey::from_bytes(&[12; 32]);
        let other_key = NoteKey::new(
            "x402-probe.example/reporter",
            other.verifying_key().to_bytes(),
        )
        .expect("key");
        let mut resigned = bundle.clone();
        resigned.checkpoint = signed(&other, &other_key, &cp);
        resigned.verifier_key = other_key.verifier_key();
        assert!(matches!(
            verify(&resigned, &key),
            Err(BundleError::Checkpoint(NoteError::Unsigned { .. }))
        ));
        // Not base64, not 32 bytes, another format.
        let mut junk = bundle.clone();
        junk.entries[0].proof[0] = "!!".into();
        assert!(matches!(
            verify(&junk, &key),
            Err(BundleError::Entry { .. })
        ));
        junk.entries[0].proof[0] = STANDARD.encode([1u8; 31]);
        assert!(matches!(
            verify(&junk, &key),
            Err(BundleError::Entry { .. })
        ));
        let mut fmt = bundle;
        fmt.format = "x402-probe.inclusion/0".into();
        assert_eq!(verify(&fmt, &key), Err(BundleError::Format));
    }
}
