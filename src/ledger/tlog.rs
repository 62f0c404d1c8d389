//! The ledger as a transparency log: the Merkle tree over the entries' bytes (leaf `i` is entry
//! `seq = i + 1`) and the tree checkpoints the reporter key signs as C2SP notes beside the chain's
//! own checkpoints. Pure: what is read and written is the store's business.
//!
//! The log's origin and the note key's name are both `x402-probe/<first 8 bytes of the reporter's
//! public key, hex>`: unique to one reporter key, stable across restarts, and with no machine
//! name in it.

use std::collections::BTreeMap;

use super::chain::Broken;
use super::merkle::{Frontier, Hash, leaf_hash};
use super::note::{Checkpoint, NoteKey, note_body, open_checkpoint, sign_note};

/// A tree checkpoint as stored: the tree size it covers, when it was made, the signed note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeNote {
    pub size: u64,
    pub at_ms: i64,
    pub note: String,
}

/// The log's origin line and note key name for a reporter key.
pub fn origin(public_key: &[u8; 32]) -> String {
    format!("x402-probe/{}", hex::encode(&public_key[..8]))
}

/// The note key of a reporter key (its name is the log's origin).
pub fn note_key(public_key: &[u8; 32]) -> NoteKey {
    NoteKey::new(&origin(public_key), *public_key).expect("the origin is a valid key name")
}

/// Signs the tree checkpoint of `size` entries with root `root`, made at `at_ms`, with `sign`
/// (the reporter key's signature over the note's body).
pub fn sign_tree_note<E>(
    public_key: &[u8; 32],
    size: u64,
    root: Hash,
    at_ms: i64,
    sign: impl FnOnce(&[u8]) -> Result<[u8; 64], E>,
) -> Result<String, E> {
    let checkpoint = Checkpoint {
        origin: origin(public_key),
        size,
        root,
        time: at_ms.div_euclid(1000),
    };
    sign_note(&checkpoint.body(), &note_key(public_key), sign)
}

/// Recomputes the tree while a verifier walks every entry in order, keeping the roots at the sizes
/// the stored tree checkpoints name; then checks each checkpoint against them.
#[derive(Debug, Default)]
pub struct TreeWalk {
    frontier: Frontier,
    wanted: BTreeMap<u64, Option<Hash>>,
}

impl TreeWalk {
    pub fn new(notes: &[TreeNote]) -> TreeWalk {
        TreeWalk {
            frontier: Frontier::new(),
            wanted: notes.iter().map(|n| (n.size, None)).collect(),
        }
    }

    /// The next entry's bytes (entries must come in `seq` order, every one of them).
    pub fn feed(&mut self, body: &[u8]) {
        self.feed_leaf(leaf_hash(body));
    }

    /// The next entry's leaf hash (its bytes hashed already).
    pub fn feed_leaf(&mut self, leaf: Hash) {
        self.feed_leaf_completing(leaf, |_, _, _| {});
    }

    /// [`TreeWalk::feed_leaf`], handing `completed` every interior node the leaf completes
    /// (level, index, hash; what a stored tree must hold: see `Frontier::push_completing`).
    pub fn feed_leaf_completing(&mut self, leaf: Hash, completed: impl FnMut(u32, u64, Hash)) {
        self.frontier.push_completing(leaf, completed);
        if let Some(slot) = self.wanted.get_mut(&self.frontier.size()) {
            *slot = Some(self.frontier.root());
        }
    }

    /// The root of every entry fed so far.
    pub fn root(&self) -> Hash {
        self.frontier.root()
    }

    pub fn size(&self) -> u64 {
        self.frontier.size()
    }

    /// Checks every tree checkpoint: signed by `public_key` as this log's note (when a key is
    /// known; without one only what the notes claim is compared), at the size it is stored under,
    /// with the root the entries give at that size, its time the stored time. Returns the largest
    /// size checked (0: none).
    pub fn finish(self, notes: &[TreeNote], public_key: Option<&[u8; 32]>) -> Result<u64, Broken> {
        let key = public_key.map(note_key);
        let mut largest = 0;
        for n in notes {
            let broken = |why: String| Broken {
                seq: n.size,
                why: format!("the tree checkpoint of size {}: {why}", n.size),
            };
            let checkpoint = match &key {
                Some(key) => open_checkpoint(&n.note, key),
                None => note_body(&n.note).and_then(Checkpoint::parse_body),
            }
            .map_err(|e| broken(e.to_string()))?;
            if let Some(public_key) = public_key
                && checkpoint.origin != origin(public_key)
            {
                return Err(broken(format!(
                    "its origin is {:?}, not this log's",
                    checkpoint.origin
                )));
            }
            if checkpoint.size != n.size || checkpoint.time != n.at_ms.div_euclid(1000) {
                return Err(broken(
                    "its signed size or time differs from its row".into(),
                ));
            }
            let Some(Some(root)) = self.wanted.get(&n.size) else {
                return Err(broken(format!(
                    "the ledger has {} entries, fewer than it covers",
                    self.frontier.size()
                )));
            };
            if *root != checkpoint.root {
                return Err(broken(
                    "the entries' Merkle root differs from the signed root (an entry at or before \
                     it was changed, removed or inserted)"
                        .into(),
                ));
            }
            largest = largest.max(n.size);
        }
        Ok(largest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::merkle::{Tree, root_at};
    use ed25519_dalek::{Signer, SigningKey};

    fn bodies(n: u64) -> Vec<Vec<u8>> {
        (1..=n)
            .map(|s| format!("{{\"seq\":{s}}}").into_bytes())
            .collect()
    }

    fn note(sk: &SigningKey, tree: &Tree, size: u64, at_ms: i64) -> TreeNote {
        let public = sk.verifying_key().to_bytes();
        let root = root_at(tree, size).expect("size");
        let note = sign_tree_note(&public, size, root, at_ms, |m| {
            Ok::<_, std::convert::Infallible>(sk.sign(m).to_bytes())
        })
        .expect("sign");
        TreeNote { size, at_ms, note }
    }

    fn walk(bodies: &[Vec<u8>], notes: &[TreeNote], public: &[u8; 32]) -> Result<u64, Broken> {
        let mut w = TreeWalk::new(notes);
        for b in bodies {
            w.feed(b);
        }
        w.finish(notes, Some(public))
    }

    #[test]
    fn notes_over_the_entries_verify_and_any_rewrite_under_them_fails() {
        let sk = SigningKey::from_bytes(&[5; 32]);
        let public = sk.verifying_key().to_bytes();
        let all = bodies(40);
        let mut tree = Tree::new();
        for b in &all {
            tree.push(leaf_hash(b));
        }
        let notes = vec![
            note(&sk, &tree, 17, 1_000_000),
            note(&sk, &tree, 40, 2_000_500),
        ];
        assert_eq!(walk(&all, &notes, &public), Ok(40));

        // An entry under the first note rewritten (and everything after rechained: the tree
        // does not care about the chain's links).
        let mut rewritten = all.clone();
        rewritten[3] = b"{\"seq\":4,\"x\":1}".to_vec();
        let err = walk(&rewritten, &notes, &public).unwrap_err();
        assert_eq!(err.seq, 17, "{err}");
        // An entry removed, or the log cut short.
        let mut removed = all.clone();
        removed.remove(30);
        assert_eq!(walk(&removed, &notes, &public).unwrap_err().seq, 40);
        assert!(
            walk(&all[..39], &notes, &public)
                .unwrap_err()
                .why
                .contains("fewer")
        );
        // Another key's notes, a row whose size or time was edited.
        let other = SigningKey::from_bytes(&[6; 32]);
        assert!(walk(&all, &notes, &other.verifying_key().to_bytes()).is_err());
        // Without a key, what the notes claim is still compared with the entries.
        let mut w = TreeWalk::new(&notes);
        for b in &rewritten {
            w.feed(b);
        }
        assert_eq!(w.finish(&notes, None).unwrap_err().seq, 17);
        let mut moved = notes.clone();
        moved[0].size = 18;
        assert!(walk(&all, &moved, &public).is_err());
        let mut later = notes.clone();
        later[1].at_ms += 5_000;
        assert!(walk(&all, &later, &public).is_err());
    }
}
