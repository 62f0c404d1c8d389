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

use std::path::Path;

use alloy::primitives::Address;
use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;

use crate::secret::{KeySource, SecretError};
use crate::spend::Reservation;
use crate::x402::eip712::{Authorization, TokenDomain, recover_signer, transfer_digest};

#[derive(Debug, thiserror::Error)]
pub enum WalletError {
    /// The key could not be read (missing, loose permissions, not a key...).
    #[error(transparent)]
    Key(#[from] SecretError),
    #[error("wallet key {path}: not a secp256k1 private key ({why})")]
    BadKey { path: String, why: &'static str },
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

const WHAT: &str = "wallet key";

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
        let source = KeySource::credential(name)?;
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
pub(crate) fn with_signer<T>(
    source: &KeySource,
    f: impl FnOnce(&PrivateKeySigner) -> Result<T, WalletError>,
) -> Result<T, WalletError> {
    let key = source.read_32(WHAT)?;
    let signer = PrivateKeySigner::from_slice(key.as_slice()).map_err(|_| WalletError::BadKey {
        path: source.path().display().to_string(),
        why: "not a valid secp256k1 scalar",
    })?;
    f(&signer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::PathBuf;

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
            assert!(
                matches!(
                    err,
                    WalletError::BadKey { .. } | WalletError::Key(SecretError::BadKey { .. })
                ),
                "{name}: {err}"
            );
        }
        let err = Wallet::from_key_file(&dir.path().join("missing")).expect_err("missing");
        assert!(matches!(err, WalletError::Key(SecretError::Io { .. })));
        let err = Wallet::from_key_file(dir.path()).expect_err("a directory");
        assert!(
            matches!(err, WalletError::Key(SecretError::Refused { .. })),
            "{err}"
        );
    }

    #[test]
    fn credential_names_are_plain_file_names() {
        for name in ["", "..", "a/b", "../key"] {
            let err = Wallet::from_credential(name).expect_err(name);
            assert!(
                matches!(err, WalletError::Key(SecretError::Credential { .. })),
                "{err}"
            );
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
