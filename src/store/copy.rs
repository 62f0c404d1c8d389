//! `x402-probe store copy`: a SQLite ledger moved into PostgreSQL as one vantage's log, both
//! verified afterwards. The source is verified first (nothing is copied from a broken ledger); the
//! copy is one transaction (nothing stays of a failed one); the entries keep their bytes, hashes
//! and sequence numbers and the checkpoints their signatures, so the copy verifies under the same
//! reporter key with the same head and Merkle root, which is checked.

use std::path::{Path, PathBuf};

use super::postgres::PgLedger;
use super::{LedgerLog, SqliteStore, StoreError};
use crate::ledger::chain::{Trusted, VerifySummary};

/// What a copy did: the vantage it made, and both verifications after it.
#[derive(Debug, Clone)]
pub struct Copied {
    pub vantage: String,
    pub url: String,
    pub public_key: [u8; 32],
    pub source: VerifySummary,
    pub target: VerifySummary,
}

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("the ledger {path} does not verify, so nothing was copied: {source}")]
    SourceBroken {
        path: PathBuf,
        #[source]
        source: Box<StoreError>,
    },
    #[error(
        "the ledger {path} has no checkpoint, so the key its log is signed with is unknown \
         (the daemon signs one at its start and every checkpoint interval): nothing was copied"
    )]
    Unsigned { path: PathBuf },
    /// The database unreachable, the vantage refused, its log not empty, a write failed:
    /// nothing was copied.
    #[error("nothing was copied: {0}")]
    Target(#[source] Box<StoreError>),
    #[error("the copy in {url} does not verify: {source}")]
    TargetBroken {
        url: String,
        #[source]
        source: Box<StoreError>,
    },
    #[error(
        "the copy differs from the ledger ({what}): was the daemon still writing to it? Stop it \
         first"
    )]
    Differs { what: String },
}

/// The vantage name a copy takes when none is given: the first 8 bytes of its reporter key, as
/// the log's origin names it (unique per key, the database refusing a key under two names).
pub fn default_vantage(public_key: &[u8; 32]) -> String {
    hex::encode(&public_key[..8])
}

/// Copies the ledger file `from` into vantage `vantage`'s empty log in the database at `url`
/// (`None`: [`default_vantage`]), then verifies both. `copied(done, total)` tells the progress.
pub fn copy_sqlite_to_postgres(
    from: &Path,
    url: &str,
    vantage: Option<&str>,
    copied: &mut dyn FnMut(u64, u64),
) -> Result<Copied, CopyError> {
    let broken = |source| CopyError::SourceBroken {
        path: from.to_path_buf(),
        source: Box::new(source),
    };
    let source = SqliteStore::open_read_only(from).map_err(broken)?;
    let before = LedgerLog::verify(&source, None, true).map_err(broken)?;
    let Some(signer) = before.signed_by.as_deref() else {
        return Err(CopyError::Unsigned {
            path: from.to_path_buf(),
        });
    };
    let mut public_key = [0u8; 32];
    hex::decode_to_slice(signer, &mut public_key).map_err(|_| CopyError::Unsigned {
        path: from.to_path_buf(),
    })?;
    let vantage = vantage
        .map(str::to_string)
        .unwrap_or_else(|| default_vantage(&public_key));
    let target =
        PgLedger::open(url, &vantage, public_key).map_err(|e| CopyError::Target(Box::new(e)))?;
    target
        .import_sqlite(&source, copied)
        .map_err(|e| CopyError::Target(Box::new(e)))?;
    // The copy is signed by the same key and covered as the ledger was (no longer unsigned
    // tail than it had).
    let trusted = Trusted {
        public_key,
        max_unsigned_ms: before.unsigned_span_ms,
    };
    let target_summary = LedgerLog::verify(&target, Some(&trusted), true).map_err(|source| {
        CopyError::TargetBroken {
            url: target.url().to_string(),
            source: Box::new(source),
        }
    })?;
    let source_summary = LedgerLog::verify(&source, Some(&trusted), true).map_err(broken)?;
    let differs = [
        ("entries", source_summary.entries == target_summary.entries),
        ("head", source_summary.head_hash == target_summary.head_hash),
        (
            "Merkle root",
            source_summary.tree_root == target_summary.tree_root,
        ),
        (
            "checkpoints",
            (source_summary.checkpoints, source_summary.signed_through)
                == (target_summary.checkpoints, target_summary.signed_through),
        ),
        (
            "tree checkpoints",
            (
                source_summary.tree_checkpoints,
                source_summary.tree_signed_through,
            ) == (
                target_summary.tree_checkpoints,
                target_summary.tree_signed_through,
            ),
        ),
        (
            "blobs",
            source_summary.blobs_referenced == target_summary.blobs_referenced,
        ),
    ];
    if let Some((what, _)) = differs.iter().find(|(_, same)| !same) {
        return Err(CopyError::Differs {
            what: what.to_string(),
        });
    }
    Ok(Copied {
        vantage,
        url: target.url().to_string(),
        public_key,
        source: source_summary,
        target: target_summary,
    })
}
