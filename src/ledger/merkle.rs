//! The ledger's Merkle tree, as RFC 9162 (section 2.1) defines it: leaves hashed with a 0x00
//! prefix, interior nodes with 0x01, the tree of `n` leaves split at the largest power of two
//! below `n`. Pure: no IO, no clock.
//!
//! Why a tree beside the linear chain: an operator who reads only their own subject's entries can
//! check that each is covered by a signed checkpoint with `log2(n)` hashes (an inclusion proof),
//! without the other subjects' entries, which the API never serves; and anyone holding two
//! checkpoints can check that the later log extends the earlier one (a consistency proof).
//!
//! Proofs and roots are computed from the hashes of *perfect* subtrees (2^level leaves starting at
//! a multiple of 2^level), which is all the RFC's recursion ever asks for on its left side. A
//! store keeps those hashes (see [`PerfectNodes`]); [`Tree`] keeps them in memory. Either way a root
//! or a proof for any tree size costs O(log^2 n) hashes at most, whatever the log's age.

use sha2::{Digest, Sha256};

/// A SHA-256 value: a leaf hash, a node hash, a root.
pub type Hash = [u8; 32];

/// The hash of a leaf: `SHA-256(0x00 || entry)`.
pub fn leaf_hash(entry: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(entry);
    h.finalize().into()
}

/// The hash of an interior node: `SHA-256(0x01 || left || right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The root of the empty tree: `SHA-256("")`.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// Why a proof could not be made or did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("leaf index {index} is not in a tree of {size} leaves")]
    IndexOutOfRange { index: u64, size: u64 },
    #[error("tree size {size} is larger than the log ({log_size} leaves)")]
    SizeOutOfRange { size: u64, log_size: u64 },
    #[error("a consistency proof needs the old size ({old}) at most the new ({new})")]
    SizesOutOfOrder { old: u64, new: u64 },
    #[error("the proof has {found} hashes, a proof for these sizes has {expected}")]
    WrongLength { found: usize, expected: usize },
    #[error("the proof's length does not fit a tree of these sizes")]
    Malformed,
    #[error("the proof does not lead to the root")]
    RootMismatch,
    #[error("the proof does not lead to the old root")]
    OldRootMismatch,
    #[error("the store has no hash for the perfect subtree at level {level}, index {index}")]
    MissingNode { level: u32, index: u64 },
}

/// Where the hashes of perfect subtrees come from: level 0 holds the leaf hashes, level `l` the
/// hash of leaves `[i * 2^l, (i + 1) * 2^l)` at index `i`.
pub trait PerfectNodes {
    /// The number of leaves.
    fn size(&self) -> u64;
    /// The hash of a perfect subtree, or `None` when it is not (yet) complete or not stored.
    fn perfect(&self, level: u32, index: u64) -> Option<Hash>;
    /// Whether the hashes answered are combined into their parents: `false` for a recorder of
    /// what a proof asks for, whose answers are placeholders (hashing them is wasted work).
    fn combines(&self) -> bool {
        true
    }
}

/// Perfect subtrees read ahead of the proofs that need them (each store fetches them its own
/// way, a few per statement): only those complete within `size` answer, a later one may exist
/// but is not this tree's.
pub(crate) struct FetchedNodes {
    pub(crate) size: u64,
    pub(crate) hashes: NodeMap,
}

/// Perfect subtrees' hashes by (level, index).
pub(crate) type NodeMap = std::collections::HashMap<(u32, u64), Hash, NodeKeys>;

/// Hashes a (level, index) key with one multiply: the keys are positions in the tree that the
/// proofs asked for, never chosen freely by a client, and SipHash over them was about 4% of a
/// single inclusion proof's time (`perf` on `cargo bench --bench ledger`; about 2% faster
/// proofs without it).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NodeKeys;

impl std::hash::BuildHasher for NodeKeys {
    type Hasher = NodeKeyHasher;
    fn build_hasher(&self) -> NodeKeyHasher {
        NodeKeyHasher(0)
    }
}

/// See [`NodeKeys`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeKeyHasher(u64);

impl std::hash::Hasher for NodeKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing: the high bits, which hashbrown uses, depend on every bit of `n`.
        self.0 = (self.0.rotate_left(29) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl PerfectNodes for FetchedNodes {
    fn size(&self) -> u64 {
        self.size
    }

    fn perfect(&self, level: u32, index: u64) -> Option<Hash> {
        if (index + 1).checked_shl(level)? > self.size {
            return None;
        }
        self.hashes.get(&(level, index)).copied()
    }
}

/// The largest power of two strictly below `n` (n >= 2): the RFC's split point.
fn split(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1u64 << (63 - (n - 1).leading_zeros())
}

/// The root of leaves `[start, end)`, `start < end`, `start` aligned as the RFC's recursion
/// leaves it (every call below comes from that recursion, or from [`root_at`] with start 0).
fn subtree_root<N: PerfectNodes + ?Sized>(
    nodes: &N,
    start: u64,
    end: u64,
) -> Result<Hash, ProofError> {
    let len = end - start;
    if len.is_power_of_two() && start.is_multiple_of(len) {
        let level = len.trailing_zeros();
        let index = start >> level;
        return nodes
            .perfect(level, index)
            .ok_or(ProofError::MissingNode { level, index });
    }
    let k = split(len);
    let left = subtree_root(nodes, start, start + k)?;
    let right = subtree_root(nodes, start + k, end)?;
    if !nodes.combines() {
        return Ok(left);
    }
    Ok(node_hash(&left, &right))
}

/// The root of the first `size` leaves.
pub fn root_at<N: PerfectNodes + ?Sized>(nodes: &N, size: u64) -> Result<Hash, ProofError> {
    if size > nodes.size() {
        return Err(ProofError::SizeOutOfRange {
            size,
            log_size: nodes.size(),
        });
    }
    if size == 0 {
        return Ok(empty_root());
    }
    subtree_root(nodes, 0, size)
}

/// The inclusion proof of leaf `index` in the tree of the first `size` leaves (RFC 9162
/// 2.1.3.1), the sibling nearest the leaf first.
pub fn inclusion_proof<N: PerfectNodes + ?Sized>(
    nodes: &N,
    index: u64,
    size: u64,
) -> Result<Vec<Hash>, ProofError> {
    if size > nodes.size() {
        return Err(ProofError::SizeOutOfRange {
            size,
            log_size: nodes.size(),
        });
    }
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    let mut proof = Vec::with_capacity(64 - size.leading_zeros() as usize);
    path(nodes, index, 0, size, &mut proof)?;
    Ok(proof)
}

/// The perfect subtrees (`level`, `index`) the inclusion proof of leaf `index` in the tree of
/// `size` leaves reads, so that a store can fetch them at once: [`inclusion_proof`] itself, run
/// over a recorder of what it asks for.
pub fn inclusion_nodes(index: u64, size: u64) -> Vec<(u32, u64)> {
    // Out of range: nothing to read (the proof itself says why).
    asked_nodes(size, |recorder| {
        let _ = inclusion_proof(recorder, index, size);
    })
}

/// The perfect subtrees the consistency proof between the trees of `old` and `new` leaves
/// reads (as [`inclusion_nodes`]).
pub fn consistency_nodes(old: u64, new: u64) -> Vec<(u32, u64)> {
    asked_nodes(new, |recorder| {
        let _ = consistency_proof(recorder, old, new);
    })
}

/// What `prove` asks of a tree of `size` leaves (every node answered with zeros: which nodes a
/// proof reads depends on the sizes and the index only).
fn asked_nodes(size: u64, prove: impl FnOnce(&dyn PerfectNodes)) -> Vec<(u32, u64)> {
    struct Recorder {
        size: u64,
        asked: std::cell::RefCell<Vec<(u32, u64)>>,
    }
    impl PerfectNodes for Recorder {
        fn size(&self) -> u64 {
            self.size
        }
        fn perfect(&self, level: u32, index: u64) -> Option<Hash> {
            self.asked.borrow_mut().push((level, index));
            Some([0u8; 32])
        }
        fn combines(&self) -> bool {
            false
        }
    }
    let recorder = Recorder {
        size,
        asked: Default::default(),
    };
    prove(&recorder);
    recorder.asked.into_inner()
}

/// PATH(m, D[start:end]) with `m` absolute, appended deepest first.
fn path<N: PerfectNodes + ?Sized>(
    nodes: &N,
    m: u64,
    start: u64,
    end: u64,
    out: &mut Vec<Hash>,
) -> Result<(), ProofError> {
    let len = end - start;
    if len <= 1 {
        return Ok(());
    }
    let k = split(len);
    if m < start + k {
        path(nodes, m, start, start + k, out)?;
        out.push(subtree_root(nodes, start + k, end)?);
    } else {
        path(nodes, m, start + k, end, out)?;
        out.push(subtree_root(nodes, start, start + k)?);
    }
    Ok(())
}

/// The consistency proof between the trees of the first `old` and the first `new` leaves
/// (RFC 9162 2.1.4.1).
pub fn consistency_proof<N: PerfectNodes + ?Sized>(
    nodes: &N,
    old: u64,
    new: u64,
) -> Result<Vec<Hash>, ProofError> {
    if new > nodes.size() {
        return Err(ProofError::SizeOutOfRange {
            size: new,
            log_size: nodes.size(),
        });
    }
    if old > new {
        return Err(ProofError::SizesOutOfOrder { old, new });
    }
    let mut proof = Vec::new();
    if old == 0 || old == new {
        return Ok(proof);
    }
    subproof(nodes, old, 0, new, true, &mut proof)?;
    Ok(proof)
}

/// SUBPROOF(m, D[start:end], b) with `m` counted from `start`.
fn subproof<N: PerfectNodes + ?Sized>(
    nodes: &N,
    m: u64,
    start: u64,
    end: u64,
    whole: bool,
    out: &mut Vec<Hash>,
) -> Result<(), ProofError> {
    let len = end - start;
    if m == len {
        if !whole {
            out.push(subtree_root(nodes, start, end)?);
        }
        return Ok(());
    }
    let k = split(len);
    if m <= k {
        subproof(nodes, m, start, start + k, whole, out)?;
        out.push(subtree_root(nodes, start + k, end)?);
    } else {
        subproof(nodes, m - k, start + k, end, false, out)?;
        out.push(subtree_root(nodes, start, start + k)?);
    }
    Ok(())
}

/// Checks that `leaf` is leaf `index` of the tree of `size` leaves whose root is `root`
/// (RFC 9162 2.1.3.2).
pub fn verify_inclusion(
    index: u64,
    size: u64,
    leaf: &Hash,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), ProofError> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    let expected = inclusion_len(index, size);
    if proof.len() != expected {
        return Err(ProofError::WrongLength {
            found: proof.len(),
            expected,
        });
    }
    let (mut f, mut s) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if s == 0 {
            return Err(ProofError::Malformed);
        }
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            if f & 1 == 0 {
                while f & 1 == 0 && f != 0 {
                    f >>= 1;
                    s >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(ProofError::Malformed);
    }
    if &r != root {
        return Err(ProofError::RootMismatch);
    }
    Ok(())
}

/// The length of leaf `index`'s inclusion proof in a tree of `size` leaves: the levels below the
/// leaf's perfect-subtree boundary, plus one per level where the leaf's path has a right
/// neighbour.
fn inclusion_len(index: u64, size: u64) -> usize {
    // The path's length is the depth of the leaf in the RFC's (left-full) tree.
    let mut len = 0;
    let (mut start, mut end) = (0u64, size);
    while end - start > 1 {
        let k = split(end - start);
        if index < start + k {
            end = start + k;
        } else {
            start += k;
        }
        len += 1;
    }
    len
}

/// Checks that the tree of `new` leaves with root `new_root` extends the tree of `old` leaves
/// with root `old_root` (RFC 9162 2.1.4.2). Every tree extends the empty one.
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), ProofError> {
    if old > new {
        return Err(ProofError::SizesOutOfOrder { old, new });
    }
    if old == 0 {
        return match proof.len() {
            0 if *old_root == empty_root() => Ok(()),
            0 => Err(ProofError::OldRootMismatch),
            n => Err(ProofError::WrongLength {
                found: n,
                expected: 0,
            }),
        };
    }
    if old == new {
        if !proof.is_empty() {
            return Err(ProofError::WrongLength {
                found: proof.len(),
                expected: 0,
            });
        }
        return if old_root == new_root {
            Ok(())
        } else {
            Err(ProofError::RootMismatch)
        };
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let (mut f, mut s) = (old - 1, new - 1);
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let Some((first, rest)) = path.split_first() else {
        return Err(ProofError::Malformed);
    };
    let (mut fr, mut sr) = (*first, *first);
    for c in rest {
        if s == 0 {
            return Err(ProofError::Malformed);
        }
        if f & 1 == 1 || f == s {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(ProofError::Malformed);
    }
    if &fr != old_root {
        return Err(ProofError::OldRootMismatch);
    }
    if &sr != new_root {
        return Err(ProofError::RootMismatch);
    }
    Ok(())
}

/// An append-only tree in memory: every perfect subtree's hash, level by level (about two hashes
/// per leaf). Used by the verifier, the tests and the benchmarks; a store keeps the same levels
/// in its own tables.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    levels: Vec<Vec<Hash>>,
}

impl Tree {
    pub fn new() -> Tree {
        Tree::default()
    }

    /// Appends a leaf hash, completing whatever perfect subtrees it closes.
    pub fn push(&mut self, leaf: Hash) {
        if self.levels.is_empty() {
            self.levels.push(Vec::new());
        }
        self.levels[0].push(leaf);
        let mut level = 0;
        while self.levels[level].len().is_multiple_of(2) {
            let n = self.levels[level].len();
            let parent = node_hash(&self.levels[level][n - 2], &self.levels[level][n - 1]);
            if self.levels.len() == level + 1 {
                self.levels.push(Vec::new());
            }
            self.levels[level + 1].push(parent);
            level += 1;
        }
    }

    /// The root of the whole tree.
    pub fn root(&self) -> Hash {
        root_at(self, self.size()).unwrap_or_else(|_| empty_root())
    }
}

impl PerfectNodes for Tree {
    fn size(&self) -> u64 {
        self.levels.first().map_or(0, |l| l.len() as u64)
    }

    fn perfect(&self, level: u32, index: u64) -> Option<Hash> {
        self.levels
            .get(level as usize)?
            .get(usize::try_from(index).ok()?)
            .copied()
    }
}

/// The perfect subtrees (level, index) that make up the first `size` leaves, largest first: what
/// [`Frontier::from_parts`] takes.
pub fn frontier_nodes(size: u64) -> Vec<(u32, u64)> {
    (0..64u32)
        .rev()
        .filter(|level| size >> level & 1 == 1)
        .map(|level| (level, (size >> level) - 1))
        .collect()
}

/// The roots of the perfect subtrees that make up the first `size` leaves, largest first (a
/// "compact range"): enough to append and to compute the root with O(log n) memory, which is
/// what a verifier walking the whole log needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// One hash per set bit of `size`, from the highest bit down.
    stack: Vec<Hash>,
}

impl Frontier {
    pub fn new() -> Frontier {
        Frontier::default()
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// A frontier of `size` leaves from the hashes of its perfect subtrees, largest first (the
    /// nodes [`frontier_nodes`] names): how a store picks up the right edge of the tree it keeps.
    /// `None` when their number does not fit `size`.
    pub fn from_parts(size: u64, stack: Vec<Hash>) -> Option<Frontier> {
        (stack.len() == size.count_ones() as usize).then_some(Frontier { size, stack })
    }

    pub fn push(&mut self, leaf: Hash) {
        self.push_completing(leaf, |_, _, _| {});
    }

    /// Appends a leaf and hands `completed` every perfect subtree of level 1 or more it
    /// completes (level, index, hash), lowest first: exactly the interior nodes a store keeps,
    /// each computed once (a verifier compares them with the stored ones, a writer stores them).
    pub fn push_completing(&mut self, leaf: Hash, mut completed: impl FnMut(u32, u64, Hash)) {
        let index = self.size;
        let mut node = leaf;
        // Each trailing one bit of the old size is a perfect subtree the new leaf completes.
        let mut carry = self.size;
        let mut level = 0u32;
        while carry & 1 == 1 {
            let left = self
                .stack
                .pop()
                .expect("a set bit has its subtree on the stack");
            node = node_hash(&left, &node);
            carry >>= 1;
            level += 1;
            completed(level, index >> level, node);
        }
        self.stack.push(node);
        self.size += 1;
    }

    /// The root of the tree of `size` leaves: the stack folded from the smallest subtree up.
    pub fn root(&self) -> Hash {
        let mut iter = self.stack.iter().rev();
        let Some(last) = iter.next() else {
            return empty_root();
        };
        iter.fold(*last, |right, left| node_hash(left, &right))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(hex_str: &str) -> Hash {
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_str, &mut out).expect("hex");
        out
    }

    /// The reference leaves and roots that RFC 6962's implementations share (certificate
    /// transparency's test data), for every size 0..=8.
    const LEAVES: [&str; 8] = [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ];
    const ROOTS: [&str; 9] = [
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ];

    /// The nodes `inclusion_nodes` names are exactly what a proof reads: a store holding only
    /// those gives the same proof as the whole tree, and one of them missing gives none.
    #[test]
    fn a_proof_reads_only_the_nodes_it_names() {
        struct Only {
            size: u64,
            nodes: std::collections::HashMap<(u32, u64), Hash>,
        }
        impl PerfectNodes for Only {
            fn size(&self) -> u64 {
                self.size
            }
            fn perfect(&self, level: u32, index: u64) -> Option<Hash> {
                self.nodes.get(&(level, index)).copied()
            }
        }
        let mut tree = Tree::new();
        for i in 0u64..77 {
            tree.push(leaf_hash(&i.to_be_bytes()));
        }
        for size in 1..=77u64 {
            for index in 0..size {
                let names = inclusion_nodes(index, size);
                let only = |skip: Option<usize>| Only {
                    size: 77,
                    nodes: names
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| Some(*i) != skip)
                        .map(|(_, &(l, i))| ((l, i), tree.perfect(l, i).unwrap()))
                        .collect(),
                };
                assert_eq!(
                    inclusion_proof(&only(None), index, size).unwrap(),
                    inclusion_proof(&tree, index, size).unwrap()
                );
                if !names.is_empty() {
                    assert!(inclusion_proof(&only(Some(0)), index, size).is_err());
                }
            }
        }
    }

    /// What a writer stores and a verifier compares: the interior nodes a push completes are
    /// exactly the tree's perfect subtrees above the leaves, each once, and a frontier picked up
    /// from the nodes `frontier_nodes` names goes on as the one that pushed them.
    #[test]
    fn pushes_complete_every_interior_node_once_and_a_frontier_resumes_from_its_nodes() {
        let all = leaves(77);
        let mut tree = Tree::new();
        let mut frontier = Frontier::new();
        let mut completed = Vec::new();
        for (i, leaf) in all.iter().enumerate() {
            tree.push(*leaf);
            frontier.push_completing(*leaf, |level, idx, hash| completed.push((level, idx, hash)));
            let size = i as u64 + 1;
            let parts: Vec<Hash> = frontier_nodes(size)
                .into_iter()
                .map(|(level, idx)| tree.perfect(level, idx).expect("a perfect subtree"))
                .collect();
            let resumed = Frontier::from_parts(size, parts).expect("fits the size");
            assert_eq!(resumed, frontier, "size {size}");
            assert_eq!(resumed.root(), mth(&all[..=i]));
        }
        let mut interior = Vec::new();
        for level in 1..8u32 {
            for idx in 0.. {
                match tree.perfect(level, idx) {
                    Some(hash) => interior.push((level, idx, hash)),
                    None => break,
                }
            }
        }
        completed.sort();
        assert_eq!(completed, interior);
        assert!(Frontier::from_parts(5, vec![[0u8; 32]]).is_none());
    }

    fn reference_tree() -> Tree {
        let mut t = Tree::new();
        for l in LEAVES {
            t.push(leaf_hash(&hex::decode(l).expect("hex")));
        }
        t
    }

    /// MTH straight from the RFC's definition, over all leaf hashes: the slow reference the fast
    /// paths are compared with.
    fn mth(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaves[0],
            n => {
                let k = split(n as u64) as usize;
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    fn leaves(n: u64) -> Vec<Hash> {
        (0..n).map(|i| leaf_hash(&i.to_be_bytes())).collect()
    }

    #[test]
    fn roots_match_the_reference_vectors() {
        let t = reference_tree();
        let mut f = Frontier::new();
        assert_eq!(f.root(), h(ROOTS[0]));
        for (size, want) in ROOTS.iter().enumerate() {
            assert_eq!(
                root_at(&t, size as u64).expect("root"),
                h(want),
                "size {size}"
            );
            if size > 0 {
                f.push(t.perfect(0, size as u64 - 1).expect("leaf"));
                assert_eq!(f.root(), h(want), "frontier size {size}");
            }
        }
        assert_eq!(t.root(), h(ROOTS[8]));
    }

    #[test]
    fn inclusion_proofs_match_the_reference_vectors() {
        let t = reference_tree();
        let cases: [(u64, u64, &[&str]); 3] = [
            (
                0,
                8,
                &[
                    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
                ],
            ),
            (
                5,
                8,
                &[
                    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
                ],
            ),
            (0, 1, &[]),
        ];
        for (index, size, want) in cases {
            let proof = inclusion_proof(&t, index, size).expect("proof");
            let want: Vec<Hash> = want.iter().map(|s| h(s)).collect();
            assert_eq!(proof, want, "index {index} size {size}");
            let leaf = t.perfect(0, index).expect("leaf");
            verify_inclusion(index, size, &leaf, &proof, &h(ROOTS[size as usize]))
                .expect("verifies");
        }
    }

    #[test]
    fn consistency_proofs_match_the_reference_vectors() {
        let t = reference_tree();
        let cases: [(u64, u64, &[&str]); 4] = [
            (1, 1, &[]),
            (
                1,
                8,
                &[
                    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
                ],
            ),
            (
                6,
                8,
                &[
                    "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
                ],
            ),
            (
                2,
                5,
                &[
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                ],
            ),
        ];
        for (old, new, want) in cases {
            let proof = consistency_proof(&t, old, new).expect("proof");
            let want: Vec<Hash> = want.iter().map(|s| h(s)).collect();
            assert_eq!(proof, want, "{old} -> {new}");
            verify_consistency(
                old,
                new,
                &h(ROOTS[old as usize]),
                &h(ROOTS[new as usize]),
                &proof,
            )
            .expect("verifies");
        }
    }

    #[test]
    fn every_proof_of_every_small_tree_verifies_and_matches_the_definition() {
        let all = leaves(70);
        let mut t = Tree::new();
        for l in &all {
            t.push(*l);
        }
        for size in 1..=70u64 {
            let root = mth(&all[..size as usize]);
            assert_eq!(root_at(&t, size).expect("root"), root, "size {size}");
            for index in 0..size {
                let proof = inclusion_proof(&t, index, size).expect("proof");
                verify_inclusion(index, size, &all[index as usize], &proof, &root)
                    .unwrap_or_else(|e| panic!("index {index} size {size}: {e}"));
            }
            for old in 0..=size {
                let old_root = mth(&all[..old as usize]);
                let proof = consistency_proof(&t, old, size).expect("proof");
                verify_consistency(old, size, &old_root, &root, &proof)
                    .unwrap_or_else(|e| panic!("{old} -> {size}: {e}"));
            }
        }
    }

    #[test]
    fn forged_and_misapplied_proofs_are_refused() {
        let all = leaves(21);
        let mut t = Tree::new();
        for l in &all {
            t.push(*l);
        }
        let root = t.root();
        let proof = inclusion_proof(&t, 9, 21).expect("proof");
        // Another leaf, another index, a flipped bit in any hash, a hash dropped or added.
        assert_eq!(
            verify_inclusion(9, 21, &all[10], &proof, &root),
            Err(ProofError::RootMismatch)
        );
        assert!(verify_inclusion(10, 21, &all[9], &proof, &root).is_err());
        for i in 0..proof.len() {
            let mut forged = proof.clone();
            forged[i][7] ^= 1;
            assert_eq!(
                verify_inclusion(9, 21, &all[9], &forged, &root),
                Err(ProofError::RootMismatch)
            );
        }
        assert!(verify_inclusion(9, 21, &all[9], &proof[1..], &root).is_err());
        let mut longer = proof.clone();
        longer.push(root);
        assert!(verify_inclusion(9, 21, &all[9], &longer, &root).is_err());
        assert!(verify_inclusion(21, 21, &all[9], &proof, &root).is_err());
        // A leaf of the tree proven against a tree of another size.
        assert!(verify_inclusion(9, 20, &all[9], &proof, &root_at(&t, 20).expect("root")).is_err());

        // Consistency: a log that rewrote an old leaf cannot prove it extends the old checkpoint.
        let old_root = root_at(&t, 13).expect("root");
        let proof = consistency_proof(&t, 13, 21).expect("proof");
        verify_consistency(13, 21, &old_root, &root, &proof).expect("honest");
        let mut rewritten = all.clone();
        rewritten[4] = leaf_hash(b"rewritten");
        let mut t2 = Tree::new();
        for l in &rewritten {
            t2.push(*l);
        }
        let proof2 = consistency_proof(&t2, 13, 21).expect("proof");
        assert!(verify_consistency(13, 21, &old_root, &t2.root(), &proof2).is_err());
        for i in 0..proof.len() {
            let mut forged = proof.clone();
            forged[i][0] ^= 0x80;
            assert!(
                verify_consistency(13, 21, &old_root, &root, &forged).is_err(),
                "hash {i}"
            );
        }
        assert!(verify_consistency(13, 21, &old_root, &root, &proof[1..]).is_err());
        assert_eq!(
            verify_consistency(21, 13, &root, &old_root, &proof),
            Err(ProofError::SizesOutOfOrder { old: 21, new: 13 })
        );
        assert!(verify_consistency(0, 21, &leaf_hash(b"x"), &root, &[]).is_err());
    }

    #[test]
    fn asking_past_the_log_is_an_error_not_a_panic() {
        let mut t = Tree::new();
        for l in leaves(5) {
            t.push(l);
        }
        assert!(matches!(
            root_at(&t, 6),
            Err(ProofError::SizeOutOfRange { .. })
        ));
        assert!(matches!(
            inclusion_proof(&t, 5, 5),
            Err(ProofError::IndexOutOfRange { .. })
        ));
        assert!(matches!(
            inclusion_proof(&t, 0, 9),
            Err(ProofError::SizeOutOfRange { .. })
        ));
        assert!(matches!(
            consistency_proof(&t, 3, 9),
            Err(ProofError::SizeOutOfRange { .. })
        ));
        assert!(matches!(
            consistency_proof(&t, 4, 3),
            Err(ProofError::SizesOutOfOrder { .. })
        ));
        assert_eq!(Tree::new().root(), empty_root());
    }
}
