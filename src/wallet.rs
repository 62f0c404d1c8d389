//! The paying wallet: a secp256k1 key that signs EIP-3009 `TransferWithAuthorization` for a
//! durably written [`Reservation`], and nothing else.
//!
//! - The key comes from a private file (owned by us, no group or other permissions) or a systemd
//!   credential (`$CREDENTIALS_DIRECTORY/<name>`); never from argv or the environment.
//! - The key is held only while signing: the [`Wallet`] keeps where the key is and the address it
//!   derives to; each signature reads the key again (re-checking the file), signs, and drops it.
//!   Read buffers are zeroed ([`Zeroizing`]); the signing key zeroes itself on drop (k256).
//! - The only signing method takes a [`Reservation`], which only the spend store can make, after the
//!   caps allowed it and the reservation was committed. There is no method that signs a hash,
//!   a message or other typed data.
//! - Nothing here prints the key: there is no `Debug` on anything that holds it, and errors
//!   never include file contents.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use alloy::primitives::Address;
use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;
use zeroize::Zeroizing;

use crate::files::{FileError, open_regular};

use crate::spend::Reservation;
use crate::x402::eip712::{Authorization, TokenDomain, recover_signer, transfer_digest};

/// Largest key file read: a hex key with a prefix and a newline is 67 bytes.
const MAX_KEY_FILE_BYTES: u64 = crate::files::caps::KEY_FILE;

#[derive(Debug, thiserror::Error)]
pub enum WalletError {
    #[error("wallet key {path}: {why}")]
    Refused { path: String, why: String },
    #[error("wallet key {path}: cannot read it: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("wallet key {path}: not a secp256k1 private key ({why})")]
    BadKey { path: String, why: &'static str },
    #[error("systemd credential {name:?}: {why}")]
    Credential { name: String, why: String },
    #[error("wallet key {path} now derives to {now}, not {expected} as when the wallet was opened")]
    KeyChanged {
        path: String,
        expected: Address,
        now: Address,
    },
    #[error("reservation {id} pays from {from}, this wallet is {wallet}")]
    NotOurs {
        id: i64,
        from: Address,
        wallet: Address,
    },
    #[error("signing failed: {0}")]
    Sign(String),
}

/// Where the key lives.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeySource {
    /// A file we own that nobody else may read or write.
    File(PathBuf),
    /// A systemd credential; the kernel limits its directory to the unit's user and root.
    Credential(PathBuf),
}

impl KeySource {
    fn path(&self) -> &Path {
        match self {
            KeySource::File(p) | KeySource::Credential(p) => p,
        }
    }
}

/// A paying wallet: where its key is, and its address. Holds no key material.
#[derive(Debug, Clone)]
pub struct Wallet {
    source: KeySource,
    address: Address,
}

/// A signed authorization: public once sent (it is what the payment header carries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedAuthorization {
    pub reservation_id: i64,
    pub domain: TokenDomain,
    pub authorization: Authorization,
    /// r ‖ s ‖ v, v in {27, 28}.
    pub signature: [u8; 65],
}

impl Wallet {
    /// A wallet whose key is in `path`: refused unless the file is a regular file owned by the
    /// current user with no permission bits for group or others (0600 or 0400).
    pub fn from_key_file(path: &Path) -> Result<Wallet, WalletError> {
        let source = KeySource::File(path.to_path_buf());
        let address = with_signer(&source, |signer| Ok(signer.address()))?;
        Ok(Wallet { source, address })
    }

    /// A wallet whose key is the systemd credential `name` (`LoadCredential=name:...` in the unit),
    /// read from `$CREDENTIALS_DIRECTORY/name`.
    pub fn from_credential(name: &str) -> Result<Wallet, WalletError> {
        let bad = |why: &str| WalletError::Credential {
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
        let dir = std::env::var_os("CREDENTIALS_DIRECTORY")
            .ok_or_else(|| bad("$CREDENTIALS_DIRECTORY is not set (not running under systemd with LoadCredential=)"))?;
        let dir = PathBuf::from(dir);
        if !dir.is_absolute() {
            return Err(bad("$CREDENTIALS_DIRECTORY is not an absolute path"));
        }
        let source = KeySource::Credential(dir.join(name));
        let address = with_signer(&source, |signer| Ok(signer.address()))?;
        Ok(Wallet { source, address })
    }

    /// The address payments come from.
    pub fn address(&self) -> Address {
        self.address
    }

    /// Where the key is read from (a path, never its contents).
    pub fn key_path(&self) -> &Path {
        self.source.path()
    }

    /// Signs the reservation's authorization (EIP-712 `TransferWithAuthorization` under the
    /// reservation's token domain). The key is read, used once and dropped.
    pub fn sign(&self, reservation: &Reservation) -> Result<SignedAuthorization, WalletError> {
        let authorization = *reservation.authorization();
        if authorization.from != self.address {
            return Err(WalletError::NotOurs {
                id: reservation.id(),
                from: authorization.from,
                wallet: self.address,
            });
        }
        let domain = reservation.domain().clone();
        let digest = transfer_digest(&domain, &authorization);
        let signature = with_signer(&self.source, |signer| {
            if signer.address() != self.address {
                return Err(WalletError::KeyChanged {
                    path: self.source.path().display().to_string(),
                    expected: self.address,
                    now: signer.address(),
                });
            }
            signer
                .sign_hash_sync(&digest)
                .map_err(|e| WalletError::Sign(e.to_string()))
        })?;
        let bytes: [u8; 65] = signature.as_bytes();
        // Check our own work: the signature must recover to this wallet over this digest.
        match recover_signer(&digest, &bytes) {
            Ok(signer) if signer == self.address => {}
            _ => {
                return Err(WalletError::Sign(
                    "the signature does not recover to the wallet".into(),
                ));
            }
        }
        Ok(SignedAuthorization {
            reservation_id: reservation.id(),
            domain,
            authorization,
            signature: bytes,
        })
    }
}

/// Reads the key, runs `f` with a signer built from it, and drops (zeroes) both.
fn with_signer<T>(
    source: &KeySource,
    f: impl FnOnce(&PrivateKeySigner) -> Result<T, WalletError>,
) -> Result<T, WalletError> {
    let text = read_key_text(source)?;
    let key = decode_key(&text, source.path())?;
    let signer = PrivateKeySigner::from_slice(key.as_slice()).map_err(|_| WalletError::BadKey {
        path: source.path().display().to_string(),
        why: "not a valid secp256k1 scalar",
    })?;
    f(&signer)
}

/// The key file's bytes, after the file passed the access checks (made on the open file, so the
/// file checked is the file read).
fn read_key_text(source: &KeySource) -> Result<Zeroizing<Vec<u8>>, WalletError> {
    let path = source.path();
    let shown = path.display().to_string();
    let io = |source| WalletError::Io {
        path: shown.clone(),
        source,
    };
    let refused = |why: String| WalletError::Refused {
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
    // Opened without blocking (a FIFO here must not hang the probe) and checked on the open file.
    let file = open_regular(path, MAX_KEY_FILE_BYTES, "a wallet key").map_err(from_file)?;
    let meta = file.metadata();
    if let KeySource::File(_) = source {
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
    let mut buf = Zeroizing::new(Vec::with_capacity(MAX_KEY_FILE_BYTES as usize + 1));
    file.read_into(&mut buf).map_err(from_file)?;
    Ok(buf)
}

/// `0x`-prefixed or bare 64 hex digits, surrounding whitespace allowed.
fn decode_key(text: &[u8], path: &Path) -> Result<Zeroizing<[u8; 32]>, WalletError> {
    let bad = |why| WalletError::BadKey {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    fn key_file(dir: &Path, name: &str, mode: u32, contents: &str) -> PathBuf {
        let path = dir.join(name);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .expect("create key file");
        f.write_all(contents.as_bytes()).expect("write key file");
        // The umask may have removed bits; set exactly what the test means.
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .expect("chmod");
        path
    }

    const KEY: &str = "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";

    #[test]
    fn a_private_file_opens_and_derives_the_address() {
        let dir = tempfile::tempdir().unwrap();
        let path = key_file(dir.path(), "k", 0o600, &format!("{KEY}\n"));
        let wallet = Wallet::from_key_file(&path).expect("0600 key file opens");
        let expected = PrivateKeySigner::from_slice(&hex::decode(&KEY[2..]).unwrap())
            .unwrap()
            .address();
        assert_eq!(wallet.address(), expected);
        let bare = key_file(dir.path(), "bare", 0o400, &KEY[2..]);
        assert_eq!(Wallet::from_key_file(&bare).unwrap().address(), expected);
    }

    #[test]
    fn readable_by_others_is_refused_and_the_error_hides_the_key() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o644, 0o640, 0o604, 0o660, 0o602] {
            let path = key_file(dir.path(), &format!("k{mode:o}"), mode, KEY);
            let err = Wallet::from_key_file(&path).expect_err("must be refused");
            let text = format!("{err} {err:?}");
            assert!(text.contains("chmod 600"), "{text}");
            assert!(!text.contains(&KEY[2..20]), "the key leaked: {text}");
        }
    }

    #[test]
    fn bad_keys_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        for (name, contents) in [
            ("short", "0x1234"),
            ("nothex", &format!("0x{}", "zz".repeat(32))),
            ("zero", &format!("0x{}", "00".repeat(32))),
            ("empty", ""),
        ] {
            let path = key_file(dir.path(), name, 0o600, contents);
            let err = Wallet::from_key_file(&path).expect_err(name);
            assert!(matches!(err, WalletError::BadKey { .. }), "{name}: {err}");
        }
        let err = Wallet::from_key_file(&dir.path().join("missing")).expect_err("missing");
        assert!(matches!(err, WalletError::Io { .. }));
        let err = Wallet::from_key_file(dir.path()).expect_err("a directory");
        assert!(matches!(err, WalletError::Refused { .. }), "{err}");
    }

    #[test]
    fn credential_names_are_plain_file_names() {
        for name in ["", "..", "a/b", "../key"] {
            let err = Wallet::from_credential(name).expect_err(name);
            assert!(matches!(err, WalletError::Credential { .. }), "{err}");
        }
    }

    #[test]
    fn debug_shows_no_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = key_file(dir.path(), "k", 0o600, KEY);
        let wallet = Wallet::from_key_file(&path).unwrap();
        let shown = format!("{wallet:?}");
        assert!(!shown.contains(&KEY[2..20]), "{shown}");
        assert!(shown.contains("address"));
    }
}
