//! The Solana paying wallet (`[pay] solana_wallet`): an ed25519 key that signs the message of a
//! durably written [`SvmReservation`], and nothing else. The same rules as the EVM wallet
//! (`crate::wallet`): the key comes from a 0600 file or a systemd credential, is read again for
//! each signature and dropped (zeroed) after it, no `Debug` shows it, no error contains it, and
//! the only signing method takes a reservation only the spend store can make.
//!
//! The file holds either the 32-byte seed as 64 hex digits (as the EVM key and the reporter key
//! are written) or the Solana CLI's keypair file, a JSON array of 64 numbers (seed, then the
//! public key, which must be the seed's).

use std::path::Path;

use ed25519_dalek::{Signer, SigningKey, Verifier};
use zeroize::Zeroizing;

use crate::secret::{KeySource, SecretError};
use crate::spend::SvmReservation;
use crate::x402::solana::SolanaAddress;
use crate::x402::solana_payment::partially_signed_transaction;

#[derive(Debug, thiserror::Error)]
pub enum SolanaWalletError {
    #[error(transparent)]
    Key(#[from] SecretError),
    #[error("Solana wallet key {path}: {why}")]
    BadKey { path: String, why: &'static str },
    #[error("Solana wallet key {path} now derives to {now}, not {expected} as when it was opened")]
    KeyChanged {
        path: String,
        expected: SolanaAddress,
        now: SolanaAddress,
    },
    #[error("reservation {id} pays from {from}, this wallet is {wallet}")]
    NotOurs {
        id: i64,
        from: SolanaAddress,
        wallet: SolanaAddress,
    },
    #[error("signing failed: {0}")]
    Sign(&'static str),
}

const WHAT: &str = "Solana wallet key";

/// A Solana paying wallet: where its key is, and its address. Holds no key material.
#[derive(Debug, Clone)]
pub struct SolanaWallet {
    source: KeySource,
    address: SolanaAddress,
}

/// A signed payment: public once sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedSvmPayment {
    pub reservation_id: i64,
    /// Ours (the second signature of the transaction).
    pub signature: [u8; 64],
    /// The wire transaction, the fee payer's signature slot empty.
    pub transaction: Vec<u8>,
}

impl SolanaWallet {
    /// A wallet whose key is in `path` (a regular file of ours, no permission for group or others).
    pub fn from_key_file(path: &Path) -> Result<SolanaWallet, SolanaWalletError> {
        SolanaWallet::open(KeySource::File(path.to_path_buf()))
    }

    /// A wallet whose key is the systemd credential `name`.
    pub fn from_credential(name: &str) -> Result<SolanaWallet, SolanaWalletError> {
        SolanaWallet::open(KeySource::credential(name)?)
    }

    fn open(source: KeySource) -> Result<SolanaWallet, SolanaWalletError> {
        let address = public_of(&read_key(&source)?);
        Ok(SolanaWallet { source, address })
    }

    /// The address payments come from (the token authority).
    pub fn address(&self) -> SolanaAddress {
        self.address
    }

    /// Where the key is read from (a path, never its contents).
    pub fn key_path(&self) -> &Path {
        self.source.path()
    }

    /// Signs the reservation's transfer message. The key is read, used once and dropped.
    pub fn sign(
        &self,
        reservation: &SvmReservation,
    ) -> Result<SignedSvmPayment, SolanaWalletError> {
        let transfer = reservation.transfer();
        if transfer.payer != self.address {
            return Err(SolanaWalletError::NotOurs {
                id: reservation.id(),
                from: transfer.payer,
                wallet: self.address,
            });
        }
        let key = read_key(&self.source)?;
        let now = public_of(&key);
        if now != self.address {
            return Err(SolanaWalletError::KeyChanged {
                path: self.source.path().display().to_string(),
                expected: self.address,
                now,
            });
        }
        let message = transfer.message();
        let signature = key.sign(&message);
        drop(key);
        // Check our own work: the signature verifies under the wallet's address.
        let public = ed25519_dalek::VerifyingKey::from_bytes(&self.address.0)
            .map_err(|_| SolanaWalletError::Sign("the wallet's address is not a public key"))?;
        if public.verify(&message, &signature).is_err() {
            return Err(SolanaWalletError::Sign(
                "the signature does not verify under the wallet's address",
            ));
        }
        let signature = signature.to_bytes();
        Ok(SignedSvmPayment {
            reservation_id: reservation.id(),
            signature,
            transaction: partially_signed_transaction(&message, &signature),
        })
    }
}

fn public_of(key: &SigningKey) -> SolanaAddress {
    SolanaAddress(key.verifying_key().to_bytes())
}

/// The signing key from the file: 64 hex digits of seed, or the Solana CLI's JSON array of 64
/// bytes whose second half is the seed's public key. (`SigningKey` zeroes itself on drop.)
fn read_key(source: &KeySource) -> Result<SigningKey, SolanaWalletError> {
    let text = source.read_secret(WHAT)?;
    let bad = |why| SolanaWalletError::BadKey {
        path: source.path().display().to_string(),
        why,
    };
    if !text.starts_with(b"[") {
        let seed = source.read_32(WHAT)?;
        return Ok(SigningKey::from_bytes(&seed));
    }
    let numbers: Zeroizing<Vec<u8>> = Zeroizing::new(
        serde_json::from_slice::<Vec<u8>>(&text)
            .map_err(|_| bad("a keypair file is a JSON array of 64 numbers from 0 to 255"))?,
    );
    if numbers.len() != 64 {
        return Err(bad(
            "a keypair file is a JSON array of 64 numbers from 0 to 255",
        ));
    }
    let mut seed = Zeroizing::new([0u8; 32]);
    seed.copy_from_slice(&numbers[..32]);
    let key = SigningKey::from_bytes(&seed);
    if key.verifying_key().to_bytes()[..] != numbers[32..] {
        return Err(bad(
            "the keypair file's public half is not its seed's public key",
        ));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn file(dir: &Path, name: &str, mode: u32, contents: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    const SEED: [u8; 32] = [42; 32];

    #[test]
    fn both_key_forms_open_to_the_same_address_and_loose_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let expected = SolanaAddress(SigningKey::from_bytes(&SEED).verifying_key().to_bytes());
        let hex_file = file(dir.path(), "hex", 0o600, &hex::encode(SEED));
        assert_eq!(
            SolanaWallet::from_key_file(&hex_file).unwrap().address(),
            expected
        );
        let mut pair = SEED.to_vec();
        pair.extend_from_slice(&expected.0);
        let json = serde_json::to_string(&pair).unwrap();
        let cli_file = file(dir.path(), "cli.json", 0o600, &json);
        let wallet = SolanaWallet::from_key_file(&cli_file).unwrap();
        assert_eq!(wallet.address(), expected);
        assert!(!format!("{wallet:?}").contains(&json[..20]));
        // A public half that is not the seed's, a short array, a loose mode.
        let mut wrong = pair.clone();
        wrong[40] ^= 1;
        let wrong_file = file(
            dir.path(),
            "wrong.json",
            0o600,
            &serde_json::to_string(&wrong).unwrap(),
        );
        let err = SolanaWallet::from_key_file(&wrong_file).unwrap_err();
        assert!(err.to_string().contains("public half"), "{err}");
        let short = file(dir.path(), "short.json", 0o600, "[1,2,3]");
        assert!(SolanaWallet::from_key_file(&short).is_err());
        let loose = file(dir.path(), "loose", 0o644, &hex::encode(SEED));
        let err = SolanaWallet::from_key_file(&loose).unwrap_err();
        assert!(!err.to_string().contains(&hex::encode(SEED)[..16]), "{err}");
        assert!(matches!(err, SolanaWalletError::Key(_)), "{err}");
    }
}
