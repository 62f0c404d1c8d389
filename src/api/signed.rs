//! Signed score documents: what `/v1/subjects/{id}/score` serves and `x402-probe verify-score`
//! checks, offline, with nothing but the reporter's public key.
//!
//! The envelope carries the score document exactly as the daemon stored it (RFC 8785 JSON, the
//! bytes whose SHA-256 the ledger's `score` entry records as `document_sha256`), base64-encoded in
//! `payload`. The signature is ed25519 by the reporter key over
//! `"x402-probe.signed-score/1\n" || payload bytes` (the prefix keeps a score signature from being
//! mistaken for any other message the key signs, such as a checkpoint). `document` repeats the
//! payload parsed, for reading; a verifier checks that it equals the payload. Pure: no IO.

use base64::Engine;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The envelope's format name, and the first line of what is signed.
pub const SIGNED_SCORE_FORMAT: &str = "x402-probe.signed-score/1";

// The subject id is the URL's (`http_url`), shared with the daily snapshot.
pub use crate::http_url::subject_id;

/// A score document signed by the reporter key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SignedScore {
    /// Always `x402-probe.signed-score/1`.
    pub format: String,
    /// The subject's id (see `subject_id`).
    pub subject_id: String,
    pub subject_url: String,
    /// The document's `as_of` (RFC 3339).
    pub as_of: String,
    /// The ledger entry (a `score` record) that published this document.
    pub ledger_seq: u64,
    /// SHA-256 (hex) of the payload's bytes; the ledger's `score` entry records the same.
    pub document_sha256: String,
    /// The reporter key's public half (ed25519, hex).
    pub public_key: String,
    /// ed25519 (hex) over `"x402-probe.signed-score/1\n"` followed by the payload's bytes.
    pub signature: String,
    /// The score document's bytes as stored (RFC 8785 JSON), base64 (standard, padded).
    pub payload: String,
    /// The payload parsed, for reading (a verifier checks it equals the payload).
    pub document: serde_json::Value,
}

/// The message a score signature covers.
pub fn signed_message(document: &[u8]) -> Vec<u8> {
    let mut message = Vec::with_capacity(SIGNED_SCORE_FORMAT.len() + 1 + document.len());
    message.extend_from_slice(SIGNED_SCORE_FORMAT.as_bytes());
    message.push(b'\n');
    message.extend_from_slice(document);
    message
}

/// Why a document could not be put in an envelope.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    #[error("the stored document is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("the stored document has no subject.url or as_of")]
    Incomplete,
}

/// The unsigned parts of an envelope for `document` (the stored bytes), and the message to sign.
pub fn envelope_parts(
    document: &[u8],
    ledger_seq: u64,
    public_key: &[u8; 32],
) -> Result<(SignedScore, Vec<u8>), EnvelopeError> {
    let parsed: serde_json::Value =
        serde_json::from_slice(document).map_err(EnvelopeError::NotJson)?;
    let url = parsed["subject"]["url"]
        .as_str()
        .ok_or(EnvelopeError::Incomplete)?
        .to_string();
    let as_of = parsed["as_of"]
        .as_str()
        .ok_or(EnvelopeError::Incomplete)?
        .to_string();
    let envelope = SignedScore {
        format: SIGNED_SCORE_FORMAT.to_string(),
        subject_id: subject_id(&url),
        subject_url: url,
        as_of,
        ledger_seq,
        document_sha256: hex::encode(Sha256::digest(document)),
        public_key: hex::encode(public_key),
        signature: String::new(),
        payload: base64::engine::general_purpose::STANDARD.encode(document),
        document: parsed,
    };
    Ok((envelope, signed_message(document)))
}

/// Why an envelope does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("format is {0:?}, not {SIGNED_SCORE_FORMAT:?}")]
    Format(String),
    #[error("public_key is not 32 bytes of hex")]
    PublicKey,
    #[error("signed by {found}, not by the trusted key {trusted}")]
    OtherKey { found: String, trusted: String },
    #[error("signature is not 64 bytes of hex")]
    SignatureForm,
    #[error("payload is not base64: {0}")]
    Payload(String),
    #[error("document_sha256 is {claimed} but the payload hashes to {actual}")]
    Digest { claimed: String, actual: String },
    #[error("the signature does not verify with the trusted key")]
    Signature,
    #[error("the payload is not a JSON score document: {0}")]
    Document(String),
    #[error("{field} says {claimed:?} but the signed document says {signed:?}")]
    Mismatch {
        field: &'static str,
        claimed: String,
        signed: String,
    },
}

/// Checks `envelope` against the trusted public key: the signature over the payload, the payload's
/// digest, and that every readable field repeats what was signed. Returns the signed document.
pub fn verify(
    envelope: &SignedScore,
    trusted: &[u8; 32],
) -> Result<serde_json::Value, VerifyError> {
    if envelope.format != SIGNED_SCORE_FORMAT {
        return Err(VerifyError::Format(envelope.format.clone()));
    }
    let key_bytes: [u8; 32] = hex::decode(&envelope.public_key)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(VerifyError::PublicKey)?;
    if &key_bytes != trusted {
        return Err(VerifyError::OtherKey {
            found: envelope.public_key.clone(),
            trusted: hex::encode(trusted),
        });
    }
    let signature: [u8; 64] = hex::decode(&envelope.signature)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(VerifyError::SignatureForm)?;
    let payload = base64::engine::general_purpose::STANDARD
        .decode(&envelope.payload)
        .map_err(|e| VerifyError::Payload(e.to_string()))?;
    let actual = hex::encode(Sha256::digest(&payload));
    if actual != envelope.document_sha256 {
        return Err(VerifyError::Digest {
            claimed: envelope.document_sha256.clone(),
            actual,
        });
    }
    let key = VerifyingKey::from_bytes(trusted).map_err(|_| VerifyError::PublicKey)?;
    key.verify(
        &signed_message(&payload),
        &Signature::from_bytes(&signature),
    )
    .map_err(|_| VerifyError::Signature)?;
    let document: serde_json::Value =
        serde_json::from_slice(&payload).map_err(|e| VerifyError::Document(e.to_string()))?;
    let signed_url = document["subject"]["url"].as_str().unwrap_or_default();
    let signed_as_of = document["as_of"].as_str().unwrap_or_default();
    let checks = [
        (
            "subject_url",
            envelope.subject_url.as_str(),
            signed_url.to_string(),
        ),
        (
            "subject_id",
            envelope.subject_id.as_str(),
            subject_id(signed_url),
        ),
        ("as_of", envelope.as_of.as_str(), signed_as_of.to_string()),
    ];
    for (field, claimed, signed) in checks {
        if claimed != signed {
            return Err(VerifyError::Mismatch {
                field,
                claimed: claimed.to_string(),
                signed,
            });
        }
    }
    if envelope.document != document {
        return Err(VerifyError::Mismatch {
            field: "document",
            claimed: "a document".into(),
            signed: "another document".into(),
        });
    }
    Ok(document)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn signed(doc: &[u8], key: &SigningKey) -> SignedScore {
        let (mut env, message) = envelope_parts(doc, 7, &key.verifying_key().to_bytes()).unwrap();
        env.signature = hex::encode(key.sign(&message).to_bytes());
        env
    }

    #[test]
    fn an_envelope_verifies_and_any_change_is_caught() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let public = key.verifying_key().to_bytes();
        let doc = br#"{"as_of":"2026-11-01T00:00:00Z","score":91.5,"subject":{"url":"https://a.example/x"}}"#;
        let env = signed(doc, &key);
        assert_eq!(env.subject_id, subject_id("https://a.example/x"));
        assert_eq!(verify(&env, &public).unwrap()["score"], 91.5);

        let other = SigningKey::from_bytes(&[8; 32]).verifying_key().to_bytes();
        assert!(matches!(
            verify(&env, &other),
            Err(VerifyError::OtherKey { .. })
        ));

        let mut tampered = env.clone();
        tampered.document["score"] = serde_json::json!(99.0);
        assert!(matches!(
            verify(&tampered, &public),
            Err(VerifyError::Mismatch {
                field: "document",
                ..
            })
        ));

        let mut tampered = env.clone();
        let forged = br#"{"as_of":"2026-11-01T00:00:00Z","score":99.0,"subject":{"url":"https://a.example/x"}}"#;
        tampered.payload = base64::engine::general_purpose::STANDARD.encode(forged);
        tampered.document_sha256 = hex::encode(Sha256::digest(forged));
        assert_eq!(verify(&tampered, &public), Err(VerifyError::Signature));

        let mut tampered = env.clone();
        tampered.subject_url = "https://b.example/x".into();
        assert!(matches!(
            verify(&tampered, &public),
            Err(VerifyError::Mismatch {
                field: "subject_url",
                ..
            })
        ));

        let mut tampered = env;
        tampered.signature = "00".into();
        assert_eq!(verify(&tampered, &public), Err(VerifyError::SignatureForm));
    }
}
