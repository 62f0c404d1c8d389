//! The ledger (seed 004): every run, catalogue read, revision, outage window, correction and
//! published score is an entry in an append-only, hash-chained log, signed at checkpoints by the
//! daemon's reporter key. A correction is a new entry, never an edit.
//!
//! - [`record`]: what is recorded (typed, one enum for every kind of entry).
//! - [`chain`]: how entries are serialised (RFC 8785), hashed and linked, and how a stored chain
//!   is verified (pure).
//! - [`key`]: the reporter key.
//! - [`merkle`]: the RFC 9162 Merkle tree over the entries: roots, inclusion and consistency
//!   proofs and their verification (pure).
//! - [`note`]: checkpoints as C2SP signed notes (origin, size, root, time), pure.
//! - [`proof`]: a subject's entries with their inclusion proofs against one checkpoint, as handed
//!   to its operator, and their offline verification (pure).
//!
//! - [`stored`]: the stored form of an entry (format 2): a run's results derived, not copied, its
//!   observation a blob the entry names, repeated bytes kept once as blobs; and the one way back
//!   every reader takes (pure).
//! - [`tlog`]: the log's Merkle tree over the entries and its signed tree checkpoints: signing,
//!   and checking them while a verifier walks the entries (pure).
//!
//! Storage lives behind `store::Store` (SQLite by default); the on-disk format is in
//! `state/ledger.md`.

pub mod chain;
pub mod key;
pub mod merkle;
pub mod note;
pub mod proof;
pub mod record;
pub mod stored;
pub mod tlog;
