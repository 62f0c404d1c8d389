//! A full disk under the state directory (or a PostgreSQL store out of reach): told apart from
//! other store errors, so the daemon keeps running without starting runs (the API serves, `x402_probe_storage_full` is 1) and
//! resumes when a write succeeds again, instead of stopping on the first failed write.

use std::path::Path;
use std::time::Duration;

use crate::store::StoreError;

/// How often a daemon whose disk is full tries a write again.
pub const RETRY_EVERY: Duration = Duration::from_secs(5);
/// Room the state directory's filesystem must have before runs resume (a batch of runs with
/// their bodies and scores takes hundreds of kilobytes; resuming at the last few pages would
/// only fill it again at once).
pub const RESUME_FREE_BYTES: u64 = 4 * 1024 * 1024;

/// Whether `error` is a write that failed for lack of room: SQLite's `SQLITE_FULL`, `ENOSPC` or
/// `EDQUOT`, or an I/O error while `state_dir`'s filesystem has less than
/// [`RESUME_FREE_BYTES`] left (SQLite reports some failed writes as plain I/O errors).
///
/// A PostgreSQL store that cannot be reached (the server gone, refusing connections, the pool
/// unable to connect) is waited out the same way: no new runs, the loop's writes kept, tried
/// again every [`RETRY_EVERY`], runs resumed once a write succeeds.
pub fn is_full(error: &anyhow::Error, state_dir: &Path) -> bool {
    error.chain().any(|cause| {
        if let Some(StoreError::PostgresUnreachable { .. }) = cause.downcast_ref::<StoreError>() {
            return true;
        }
        let sqlite = cause
            .downcast_ref::<StoreError>()
            .and_then(|e| match e {
                StoreError::Sqlite { source, .. } => Some(source),
                _ => None,
            })
            .or_else(|| cause.downcast_ref::<rusqlite::Error>());
        if let Some(code) = sqlite.and_then(rusqlite::Error::sqlite_error_code) {
            return code == rusqlite::ErrorCode::DiskFull
                || (code == rusqlite::ErrorCode::SystemIoFailure && low_on_room(state_dir));
        }
        cause
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .is_some_and(|errno| errno == libc::ENOSPC || errno == libc::EDQUOT)
    })
}

/// Whether `dir`'s filesystem has less than [`RESUME_FREE_BYTES`] available to us.
pub fn low_on_room(dir: &Path) -> bool {
    available_bytes(dir).is_some_and(|free| free < RESUME_FREE_BYTES)
}

/// Bytes `dir`'s filesystem has available to an unprivileged writer (`statvfs`).
#[allow(clippy::useless_conversion)] // the field types differ between targets
pub fn available_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs(3) with a NUL-terminated path and a zeroed struct it fills.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut stat) };
    if rc != 0 {
        return None;
    }
    Some(u64::from(stat.f_bavail).saturating_mul(u64::from(stat.f_frsize)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_told_apart_from_other_errors() {
        let dir = tempfile::tempdir().unwrap();
        let full = StoreError::Sqlite {
            path: "ledger.sqlite".into(),
            context: "committing",
            source: rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                None,
            ),
        };
        assert!(is_full(
            &anyhow::Error::new(full).context("writing"),
            dir.path()
        ));
        let enospc = std::io::Error::from_raw_os_error(libc::ENOSPC);
        assert!(is_full(&anyhow::Error::new(enospc), dir.path()));
        let corrupt = StoreError::Corrupt {
            path: "ledger.sqlite".into(),
            why: "a broken chain".into(),
        };
        assert!(!is_full(&anyhow::Error::new(corrupt), dir.path()));
        assert!(available_bytes(dir.path()).is_some());
    }
}
