//! The ledger's Merkle tree (RFC 9162): tree building over entries (what `ledger verify` does
//! for every entry), inclusion proofs made and checked, consistency proofs made and checked,
//! each against a baseline measured in the same run: plain SHA-256 over the same entry bytes
//! (what the linear hash chain already costs per entry).
//!
//! Run with `cargo bench --bench merkle` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::time::Instant;

use sha2::{Digest, Sha256};
use x402_probe::ledger::merkle::{
    Frontier, Tree, consistency_proof, inclusion_proof, leaf_hash, root_at, verify_consistency,
    verify_inclusion,
};

/// A small deterministic generator (not the scorer's).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }
}

fn per_second(n: u64, secs: f64) -> f64 {
    n as f64 / secs
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let entries: u64 = if quick { 200_000 } else { 2_000_000 };
    let entry_bytes = 600usize; // a compact run entry's order of size
    let mut rng = Lcg(7);
    // One buffer of entry bytes, sliced per entry, so the allocator is not what is measured.
    let mut buf = vec![0u8; entry_bytes + 4096];
    for b in buf.iter_mut() {
        *b = rng.next() as u8;
    }
    let entry = |i: u64| -> &[u8] {
        let off = (i as usize * 31) % 4096;
        &buf[off..off + entry_bytes]
    };

    // Baseline: SHA-256 of each entry (the linear chain's cost per entry).
    let t = Instant::now();
    let mut acc = [0u8; 32];
    for i in 0..entries {
        let h: [u8; 32] = Sha256::digest(entry(i)).into();
        acc[0] ^= h[0];
    }
    black_box(acc);
    let base = t.elapsed().as_secs_f64();

    // Verification of a whole log: leaf hash + compact-range append per entry, then the root.
    let t = Instant::now();
    let mut frontier = Frontier::new();
    for i in 0..entries {
        frontier.push(leaf_hash(entry(i)));
    }
    let root = frontier.root();
    let verify = t.elapsed().as_secs_f64();

    // Building the stored levels (what the writer keeps for proofs).
    let t = Instant::now();
    let mut tree = Tree::new();
    for i in 0..entries {
        tree.push(leaf_hash(entry(i)));
    }
    let build = t.elapsed().as_secs_f64();
    assert_eq!(tree.root(), root, "the two ways agree");

    // Inclusion proofs at random leaves against the latest root: made, then checked.
    let proofs: u64 = if quick { 20_000 } else { 200_000 };
    let t = Instant::now();
    let mut made = Vec::with_capacity(proofs as usize);
    for _ in 0..proofs {
        let index = rng.next() % entries;
        made.push((
            index,
            inclusion_proof(&tree, index, entries).expect("in range"),
        ));
    }
    let make = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for (index, proof) in &made {
        let leaf = leaf_hash(entry(*index));
        verify_inclusion(*index, entries, &leaf, proof, &root).expect("verifies");
    }
    let check = t.elapsed().as_secs_f64();

    // Consistency proofs between random earlier sizes and the head.
    let pairs: u64 = if quick { 2_000 } else { 20_000 };
    let t = Instant::now();
    for _ in 0..pairs {
        let old = 1 + rng.next() % (entries - 1);
        let old_root = root_at(&tree, old).expect("in range");
        let proof = consistency_proof(&tree, old, entries).expect("in range");
        verify_consistency(old, entries, &old_root, &root, &proof).expect("verifies");
    }
    let consistency = t.elapsed().as_secs_f64();

    println!("merkle bench: {entries} entries of {entry_bytes} bytes");
    println!(
        "  baseline sha256 per entry:        {:>12.0} entries/s",
        per_second(entries, base)
    );
    println!(
        "  tree verification (frontier):     {:>12.0} entries/s  ({:.2}x the baseline's time)",
        per_second(entries, verify),
        verify / base
    );
    println!(
        "  tree levels kept (for proofs):    {:>12.0} entries/s  ({:.2}x the baseline's time)",
        per_second(entries, build),
        build / base
    );
    println!(
        "  inclusion proofs made:            {:>12.0} proofs/s",
        per_second(proofs, make)
    );
    println!(
        "  inclusion proofs checked:         {:>12.0} proofs/s",
        per_second(proofs, check)
    );
    println!(
        "  consistency proofs made+checked:  {:>12.0} pairs/s",
        per_second(pairs, consistency)
    );
}
