//! Reading the files a user names (key files, credentials, rubrics, inputs, score documents, CA
//! files): bounded and without blocking.
//!
//! A path on the command line or in a configuration file can name anything: a FIFO (opening one
//! for reading blocks until a writer appears), `/dev/zero` (never ends), a directory, or a file far
//! larger than any input we expect. So every file input goes through [`open_regular`]: the file is
//! opened with `O_NONBLOCK` (an open that would wait for a FIFO's writer returns at once), the
//! *opened* descriptor is checked with `fstat` (so the file checked is the file read, whatever a
//! symlink or a rename does in between), anything but a regular file is refused, and the read stops
//! one byte past the cap. Errors name the file.

use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a file input was not read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: cannot open it: {error}")]
    Open {
        path: PathBuf,
        // Not a `#[source]`: the message already says it, and `{:#}` would say it twice.
        error: std::io::Error,
    },
    #[error("{path}: {what}, not a regular file; refused")]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{path}: {size} bytes is more than the {max} bytes allowed for {purpose}")]
    TooLarge {
        path: PathBuf,
        size: u64,
        max: u64,
        purpose: &'static str,
    },
    #[error("{path}: cannot read it: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl FileError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            FileError::Open { path, .. }
            | FileError::NotRegular { path, .. }
            | FileError::TooLarge { path, .. }
            | FileError::Read { path, .. } => path,
        }
    }
}

/// The caps on each kind of file input, in bytes (documented in the README).
pub mod caps {
    /// A wallet key: 64 hex digits, a prefix and a newline fit many times over.
    pub const KEY_FILE: u64 = 1024;
    /// A PEM file of CA certificates (a full public root bundle is about 220 KB).
    pub const CA_FILE: u64 = 1024 * 1024;
    /// A rubric file (the embedded one is 12 KB).
    pub const RUBRIC: u64 = 1024 * 1024;
    /// A scorer inputs document or a stored score document (a subject's history: the golden
    /// documents are under 100 KB).
    pub const SCORE_DOCUMENT: u64 = 64 * 1024 * 1024;
}

/// A regular file, opened and checked, not yet read.
#[derive(Debug)]
pub struct RegularFile {
    file: File,
    meta: Metadata,
    path: PathBuf,
    max: u64,
    purpose: &'static str,
}

/// Opens `path` for reading without blocking and refuses anything but a regular file of at most
/// `max` bytes. `purpose` names the input in the size error ("a rubric file").
pub fn open_regular(
    path: &Path,
    max: u64,
    purpose: &'static str,
) -> Result<RegularFile, FileError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|error| FileError::Open {
            path: path.to_path_buf(),
            error,
        })?;
    let meta = file.metadata().map_err(|error| FileError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let file_type = meta.file_type();
    if !file_type.is_file() {
        let what = if file_type.is_dir() {
            "a directory"
        } else if file_type.is_fifo() {
            "a FIFO (named pipe)"
        } else if file_type.is_char_device() {
            "a character device"
        } else if file_type.is_block_device() {
            "a block device"
        } else if file_type.is_socket() {
            "a socket"
        } else {
            "a special file"
        };
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            what,
        });
    }
    if meta.len() > max {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
            max,
            purpose,
        });
    }
    Ok(RegularFile {
        file,
        meta,
        path: path.to_path_buf(),
        max,
        purpose,
    })
}

impl RegularFile {
    /// The opened file's metadata (owner, mode), as checked.
    pub fn metadata(&self) -> &Metadata {
        &self.meta
    }

    /// Appends the whole file to `buf` (at most the cap; a file that grew past it since the check
    /// is refused, and `buf` then holds what was read so far, for the caller to zero if secret).
    pub fn read_into(self, buf: &mut Vec<u8>) -> Result<(), FileError> {
        let RegularFile {
            file,
            path,
            max,
            purpose,
            ..
        } = self;
        let start = buf.len();
        file.take(max.saturating_add(1))
            .read_to_end(buf)
            .map_err(|error| FileError::Read {
                path: path.clone(),
                error,
            })?;
        let read = (buf.len() - start) as u64;
        if read > max {
            return Err(FileError::TooLarge {
                path,
                size: read,
                max,
                purpose,
            });
        }
        Ok(())
    }

    /// A reader of the file that stops one byte past the cap (the caller counts what it reads
    /// to tell a file that grew past the cap since the check).
    pub fn reader(self) -> std::io::Take<File> {
        let max = self.max;
        self.file.take(max.saturating_add(1))
    }

    /// The whole file.
    pub fn read_all(self) -> Result<Vec<u8>, FileError> {
        let mut buf = Vec::with_capacity(usize::try_from(self.meta.len()).unwrap_or(0));
        self.read_into(&mut buf)?;
        Ok(buf)
    }
}

/// Reads a regular file of at most `max` bytes (see [`open_regular`]).
pub fn read_regular(path: &Path, max: u64, purpose: &'static str) -> Result<Vec<u8>, FileError> {
    open_regular(path, max, purpose)?.read_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_regular_file_within_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"hello").unwrap();
        assert_eq!(read_regular(&path, 5, "a test file").unwrap(), b"hello");
        let err = read_regular(&path, 4, "a test file").unwrap_err();
        assert!(
            matches!(
                err,
                FileError::TooLarge {
                    size: 5,
                    max: 4,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("a test file"), "{err}");
    }

    #[test]
    fn refuses_special_files_without_blocking_and_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.json");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path and a plain mode.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Without O_NONBLOCK this open would wait for a writer forever.
        let err = read_regular(&fifo, 1024, "a test file").unwrap_err();
        assert!(matches!(err, FileError::NotRegular { .. }), "{err}");
        assert!(err.to_string().contains("pipe.json") && err.to_string().contains("FIFO"));
        let err = read_regular(Path::new("/dev/zero"), 1024, "a test file").unwrap_err();
        assert!(err.to_string().contains("character device"), "{err}");
        let err = read_regular(dir.path(), 1024, "a test file").unwrap_err();
        assert!(err.to_string().contains("directory"), "{err}");
        let err = read_regular(&dir.path().join("missing"), 1024, "a test file").unwrap_err();
        assert!(matches!(err, FileError::Open { .. }), "{err}");
        assert_eq!(err.path(), dir.path().join("missing"));
    }
}
