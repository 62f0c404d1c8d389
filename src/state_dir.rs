//! The state directory and the stores in it are ours alone, as ssh treats a key.
//!
//! The ledger and the spend store hold what we saw, what we signed and what we spent; whoever can
//! write them can erase evidence, or make a cap look unspent. So both stores open the state
//! directory the same way: a missing one is created 0700; an existing one must be a directory owned
//! by the current user that neither group nor others can write (0755, as systemd's
//! `StateDirectory=` makes it, is accepted), else it is refused before anything is created in it.
//! A new store file is created 0600 before SQLite opens it (SQLite would make it 0644, and gives its
//! `-wal` and `-shm` files the database file's mode). An existing store file, `-wal` or `-shm` must
//! be a regular file owned by the current user: one group or others can write is refused (it may
//! have been altered); one they can only read (as earlier versions created them) is tightened to
//! 0600.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Why the state directory or a store file in it was not used.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("{path}: {context}: {source}")]
    Io {
        path: String,
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// Not private to us: the message says why and what to do.
    #[error("{path}: {why}; refused")]
    NotPrivate { path: String, why: String },
}

/// Creates the state directory 0700 if it is missing, else checks it is ours and writable by
/// nobody else.
pub fn open_state_dir(dir: &Path) -> Result<(), StateDirError> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| StateDirError::Io {
                path: dir.display().to_string(),
                context: "creating the state directory",
                source,
            })?;
    }
    let shown = dir.display().to_string();
    let refuse = |why: String| StateDirError::NotPrivate {
        path: shown.clone(),
        why,
    };
    let meta = std::fs::metadata(dir).map_err(|source| StateDirError::Io {
        path: shown.clone(),
        context: "reading the state directory",
        source,
    })?;
    if !meta.is_dir() {
        return Err(refuse("the state directory is not a directory".into()));
    }
    if meta.uid() != euid() {
        return Err(refuse(format!(
            "the state directory is owned by uid {}, not by the current user (uid {})",
            meta.uid(),
            euid()
        )));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(refuse(format!(
            "the state directory has mode {mode:04o}: group or others can write it; chmod 700 it"
        )));
    }
    Ok(())
}

/// Makes the SQLite store at `path` private before it is opened: created 0600 if missing; the file,
/// its `-wal` and its `-shm` checked (and tightened) if they exist.
pub fn private_store_file(path: &Path) -> Result<(), StateDirError> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(StateDirError::Io {
                path: path.display().to_string(),
                context: "creating the store file",
                source,
            });
        }
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        make_private_file(Path::new(&file))?;
    }
    Ok(())
}

/// An existing store file (or `-wal`, `-shm`) is ours and private; a missing one is fine.
fn make_private_file(path: &Path) -> Result<(), StateDirError> {
    let shown = path.display().to_string();
    let refuse = |why: String| StateDirError::NotPrivate {
        path: shown.clone(),
        why,
    };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(StateDirError::Io {
                path: shown.clone(),
                context: "reading the store file's permissions",
                source,
            });
        }
    };
    if !meta.file_type().is_file() {
        return Err(refuse("not a regular file".into()));
    }
    if meta.uid() != euid() {
        return Err(refuse(format!(
            "owned by uid {}, not by the current user (uid {})",
            meta.uid(),
            euid()
        )));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(refuse(format!(
            "mode {mode:04o}: group or others can write it, so it may have been altered; check it, then chmod 600 it"
        )));
    }
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(
            |source| StateDirError::Io {
                path: shown.clone(),
                context: "tightening the store file to 0600",
                source,
            },
        )?;
    }
    Ok(())
}

/// The current user's uid.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_missing_state_directory_is_made_private_and_a_loose_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("a").join("state");
        open_state_dir(&state).unwrap();
        assert_eq!(mode(&state), 0o700);
        for loose in [0o777, 0o770, 0o757, 0o1777] {
            std::fs::set_permissions(&state, std::fs::Permissions::from_mode(loose)).unwrap();
            let err = open_state_dir(&state).unwrap_err();
            assert!(matches!(err, StateDirError::NotPrivate { .. }), "{err}");
            assert!(err.to_string().contains("chmod 700"), "{err}");
        }
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
        open_state_dir(&state).unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let err = open_state_dir(&file).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[test]
    fn store_files_are_created_private_tightened_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store.sqlite");
        private_store_file(&store).unwrap();
        assert_eq!(mode(&store), 0o600);
        // Readable by others (as earlier versions made it): tightened, for the -wal too.
        let wal = dir.path().join("store.sqlite-wal");
        std::fs::write(&wal, b"").unwrap();
        for file in [&store, &wal] {
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        private_store_file(&store).unwrap();
        assert_eq!((mode(&store), mode(&wal)), (0o600, 0o600));
        // Writable by others: refused, and left as it is for the operator to look at.
        let shm = dir.path().join("store.sqlite-shm");
        std::fs::write(&shm, b"").unwrap();
        std::fs::set_permissions(&shm, std::fs::Permissions::from_mode(0o620)).unwrap();
        let err = private_store_file(&store).unwrap_err();
        assert!(err.to_string().contains("may have been altered"), "{err}");
        assert!(err.to_string().contains("store.sqlite-shm"), "{err}");
        assert_eq!(mode(&shm), 0o620);
        // Not a regular file.
        std::fs::remove_file(&shm).unwrap();
        std::os::unix::fs::symlink(&store, &shm).unwrap();
        let err = private_store_file(&store).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
