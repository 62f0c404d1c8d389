//! Private keys on disk: the wallet's secp256k1 key and the reporter's ed25519 seed are both 32
//! bytes read under one set of rules. A key comes from a private file (a regular file owned by the
//! current user with no permission for group or others, like ssh's private keys) or a systemd
//! credential (`$CREDENTIALS_DIRECTORY/<name>`); never from argv or the environment. The checks are
//! made on the opened file (so the file checked is the file read), the read is bounded, buffers
//! are zeroed, and no error ever includes the file's contents.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use crate::files::{FileError, caps, open_regular};

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("{what} {path}: {why}")]
    Refused {
        what: &'static str,
        path: String,
        why: String,
    },
    #[error("{what} {path}: cannot read it: {source}")]
    Io {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} {path}: not a 32-byte private key ({why})")]
    BadKey {
        what: &'static str,
        path: String,
        why: &'static str,
    },
    #[error("{what} {path}: not a usable token ({why})")]
    BadToken {
        what: &'static str,
        path: String,
        why: &'static str,
    },
    #[error("systemd credential {name:?}: {why}")]
    Credential { name: String, why: String },
}

/// The shortest bearer token read (`openssl rand -hex 32` gives 64).
pub const MIN_TOKEN_CHARS: usize = 32;
/// The longest bearer token read.
pub const MAX_TOKEN_CHARS: usize = 256;

/// Where a key lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A file we own that nobody else may read or write.
    File(PathBuf),
    /// A systemd credential; the kernel limits its directory to the unit's user and root.
    Credential(PathBuf),
}

impl KeySource {
    pub fn path(&self) -> &Path {
        match self {
            KeySource::File(p) | KeySource::Credential(p) => p,
        }
    }

    /// The systemd credential `name` (`LoadCredential=name:...` in the unit).
    pub fn credential(name: &str) -> Result<KeySource, SecretError> {
        let bad = |why: &str| SecretError::Credential {
            name: name.chars().take(64).collect(),
            why: why.to_string(),
        };
        let valid_name = !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains('/')
            && !name.contains('\0');
        if !valid_name {
            return Err(bad("a credential name is a plain file name"));
        }
        let dir = std::env::var_os("CREDENTIALS_DIRECTORY").ok_or_else(|| {
            bad("$CREDENTIALS_DIRECTORY is not set (not running under systemd with LoadCredential=)")
        })?;
        let dir = PathBuf::from(dir);
        if !dir.is_absolute() {
            return Err(bad("$CREDENTIALS_DIRECTORY is not an absolute path"));
        }
        Ok(KeySource::Credential(dir.join(name)))
    }

    /// Reads the 32-byte key (64 hex digits, `0x` optional, surrounding whitespace allowed).
    /// `what` names the key in errors ("wallet key", "reporter key").
    pub fn read_32(&self, what: &'static str) -> Result<Zeroizing<[u8; 32]>, SecretError> {
        let text = self.read_text(what)?;
        decode_key(&text, self.path(), what)
    }

    /// A shared secret (a webhook's): the file's bytes, surrounding whitespace dropped, under the
    /// same access checks as a key (at most `caps::KEY_FILE` bytes).
    pub fn read_secret(&self, what: &'static str) -> Result<Zeroizing<Vec<u8>>, SecretError> {
        let text = self.read_text(what)?;
        Ok(Zeroizing::new(text.trim_ascii().to_vec()))
    }

    /// Reads a bearer token: printable ASCII without spaces, 32 to 256 characters, surrounding
    /// whitespace (a trailing newline) ignored. `what` names it in errors.
    pub fn read_token(&self, what: &'static str) -> Result<Zeroizing<Vec<u8>>, SecretError> {
        let text = self.read_text(what)?;
        let trimmed = text.trim_ascii();
        let bad = |why| SecretError::BadToken {
            what,
            path: self.path().display().to_string(),
            why,
        };
        if !(MIN_TOKEN_CHARS..=MAX_TOKEN_CHARS).contains(&trimmed.len()) {
            return Err(bad("a token has 32 to 256 characters"));
        }
        if !trimmed.iter().all(u8::is_ascii_graphic) {
            return Err(bad("a token is printable ASCII without spaces"));
        }
        Ok(Zeroizing::new(trimmed.to_vec()))
    }

    /// The file's bytes, after it passed the access checks.
    fn read_text(&self, what: &'static str) -> Result<Zeroizing<Vec<u8>>, SecretError> {
        let path = self.path();
        let shown = path.display().to_string();
        let io = |source| SecretError::Io {
            what,
            path: shown.clone(),
            source,
        };
        let refused = |why: String| SecretError::Refused {
            what,
            path: shown.clone(),
            why,
        };
        let from_file = |e: FileError| match e {
            FileError::Open { error, .. } | FileError::Read { error, .. } => io(error),
            FileError::NotRegular { what, .. } => refused(format!("{what}, not a regular file")),
            FileError::TooLarge { size, .. } => {
                refused(format!("{size} bytes is too large for a key file"))
            }
        };
        // Opened without blocking (a FIFO here must not hang us) and checked on the open file.
        let file = open_regular(path, caps::KEY_FILE, what).map_err(from_file)?;
        let meta = file.metadata();
        if let KeySource::File(_) = self {
            // SAFETY: geteuid has no preconditions and cannot fail.
            let euid = unsafe { libc::geteuid() };
            if meta.uid() != euid {
                return Err(refused(format!(
                    "owned by uid {}, not by the current user (uid {euid})",
                    meta.uid()
                )));
            }
            let mode = meta.mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(refused(format!(
                    "mode {mode:04o} lets group or others read or write it; chmod 600 it"
                )));
            }
        }
        let mut buf = Zeroizing::new(Vec::with_capacity(caps::KEY_FILE as usize + 1));
        file.read_into(&mut buf).map_err(from_file)?;
        Ok(buf)
    }
}

/// `0x`-prefixed or bare 64 hex digits, surrounding whitespace allowed.
fn decode_key(
    text: &[u8],
    path: &Path,
    what: &'static str,
) -> Result<Zeroizing<[u8; 32]>, SecretError> {
    let bad = |why| SecretError::BadKey {
        what,
        path: path.display().to_string(),
        why,
    };
    let trimmed = text.trim_ascii();
    let digits = trimmed
        .strip_prefix(b"0x")
        .or_else(|| trimmed.strip_prefix(b"0X"))
        .unwrap_or(trimmed);
    if digits.len() != 64 {
        return Err(bad("expected 64 hex digits"));
    }
    let mut key = Zeroizing::new([0u8; 32]);
    hex::decode_to_slice(digits, key.as_mut_slice()).map_err(|_| bad("not hexadecimal"))?;
    Ok(key)
}

/// Writes a new key file (`0600`, created exclusively: an existing file is never overwritten).
pub fn write_new_key_file(path: &Path, key: &[u8; 32]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    let text = Zeroizing::new(format!("{}\n", hex::encode(key)));
    file.write_all(text.as_bytes())?;
    file.sync_all()
}
