//! The reporter key: the daemon's ed25519 key that signs the ledger's checkpoints (and, later, the
//! scores it publishes). Read like the wallet key (`secret.rs`): a private file or a systemd
//! credential, re-read for each signature and zeroed after use.

use std::path::Path;

use ed25519_dalek::{Signer, SigningKey};

use crate::secret::{KeySource, SecretError, write_new_key_file};

const WHAT: &str = "reporter key";

/// Where the reporter key is, and its public half. Holds no secret.
#[derive(Debug, Clone)]
pub struct ReporterKey {
    source: KeySource,
    public: [u8; 32],
}

impl ReporterKey {
    pub fn from_key_file(path: &Path) -> Result<ReporterKey, SecretError> {
        Self::open(KeySource::File(path.to_path_buf()))
    }

    pub fn from_credential(name: &str) -> Result<ReporterKey, SecretError> {
        Self::open(KeySource::credential(name)?)
    }

    fn open(source: KeySource) -> Result<ReporterKey, SecretError> {
        let seed = source.read_32(WHAT)?;
        let public = SigningKey::from_bytes(&seed).verifying_key().to_bytes();
        Ok(ReporterKey { source, public })
    }

    pub fn public_key(&self) -> [u8; 32] {
        self.public
    }

    /// Signs `message` with the key read afresh; refuses if the file now holds another key.
    pub fn sign(&self, message: &[u8]) -> Result<[u8; 64], SecretError> {
        let seed = self.source.read_32(WHAT)?;
        let key = SigningKey::from_bytes(&seed);
        if key.verifying_key().to_bytes() != self.public {
            return Err(SecretError::Refused {
                what: WHAT,
                path: self.source.path().display().to_string(),
                why: "the file now holds another key than when the daemon started".into(),
            });
        }
        Ok(key.sign(message).to_bytes())
    }

    /// Makes a new key file (`0600`, never overwriting) and returns the key.
    pub fn generate(path: &Path) -> Result<ReporterKey, SecretError> {
        let seed = zeroize::Zeroizing::new(rand::random::<[u8; 32]>());
        write_new_key_file(path, &seed).map_err(|source| SecretError::Io {
            what: WHAT,
            path: path.display().to_string(),
            source,
        })?;
        Self::from_key_file(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signature, Verifier, VerifyingKey};

    #[test]
    fn a_generated_key_signs_what_its_public_key_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reporter.key");
        let key = ReporterKey::generate(&path).unwrap();
        let sig = key.sign(b"hello").unwrap();
        let public = VerifyingKey::from_bytes(&key.public_key()).unwrap();
        assert!(
            public
                .verify(b"hello", &Signature::from_bytes(&sig))
                .is_ok()
        );
        // Never overwritten.
        assert!(ReporterKey::generate(&path).is_err());
        // Reopened: the same public key.
        assert_eq!(
            ReporterKey::from_key_file(&path).unwrap().public_key(),
            key.public_key()
        );
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }
}
