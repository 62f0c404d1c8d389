//! Checkpoints as signed notes, in the C2SP `tlog-checkpoint` and `signed-note` forms, so that
//! tools written for other transparency logs can read and check ours. Pure: signing is a function
//! the caller passes (the reporter key lives in `key.rs`), and time is a field, never read.
//!
//! A checkpoint's body is three lines (origin, tree size in decimal, root hash in standard base64)
//! and one extension line `time <unix seconds>`: the time is inside what is signed, so a
//! checkpoint cannot be replayed as a newer one. The note is the body, a blank line, and one line
//! per signature: `— <key name> <base64(key id || signature)>`, where an Ed25519 key's id is the
//! first 4 bytes of `SHA-256(name || "\n" || 0x01 || public key)`. A witness adds its own
//! cosignature line to the same note; lines from keys a verifier does not know are ignored, as the
//! signed-note form says.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use sha2::{Digest, Sha256};

use super::merkle::Hash;

/// The signature type byte of Ed25519 keys in the signed-note form.
const ED25519: u8 = 0x01;
/// The em dash and space that start a signature line.
const SIGNATURE_PREFIX: &str = "\u{2014} ";
/// A note is small: refuse anything larger before parsing (a hostile file or API answer).
pub const MAX_NOTE_BYTES: usize = 16 * 1024;

/// What a checkpoint commits to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's name, unique to the log (e.g. `x402-probe/<vantage>`).
    pub origin: String,
    /// The number of entries the tree covers.
    pub size: u64,
    /// The RFC 9162 root of those entries.
    pub root: Hash,
    /// When the checkpoint was made, in Unix seconds (inside the signed body).
    pub time: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    #[error("the note is larger than {MAX_NOTE_BYTES} bytes")]
    TooLarge,
    #[error("the note is malformed: {0}")]
    Malformed(&'static str),
    #[error("the checkpoint body is malformed: {0}")]
    Body(&'static str),
    #[error("the key name {0:?} is not allowed (empty, whitespace or '+')")]
    KeyName(String),
    #[error("the verifier key is malformed: {0}")]
    VerifierKey(&'static str),
    #[error("no signature by {name} ({key_id}) on the note")]
    Unsigned { name: String, key_id: String },
    #[error("the signature by {name} does not verify")]
    BadSignature { name: String },
}

impl Checkpoint {
    /// The signed body: origin, size, root, time, each on its own line.
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\ntime {}\n",
            self.origin,
            self.size,
            STANDARD.encode(self.root),
            self.time
        )
    }

    /// Reads a body written by [`Checkpoint::body`]; other extension lines are refused (our logs
    /// write none, and an unknown line in something we verify is a reason to stop).
    pub fn parse_body(body: &str) -> Result<Checkpoint, NoteError> {
        let Some(text) = body.strip_suffix('\n') else {
            return Err(NoteError::Body("does not end with a newline"));
        };
        let lines: Vec<&str> = text.split('\n').collect();
        let [origin, size, root, time] = lines.as_slice() else {
            return Err(NoteError::Body("not four lines (origin, size, root, time)"));
        };
        if origin.is_empty() || origin.chars().any(char::is_control) {
            return Err(NoteError::Body("empty origin or control characters in it"));
        }
        if size.is_empty()
            || !size.bytes().all(|b| b.is_ascii_digit())
            || (size.len() > 1 && size.starts_with('0'))
        {
            return Err(NoteError::Body("tree size is not a decimal number"));
        }
        let size: u64 = size
            .parse()
            .map_err(|_| NoteError::Body("tree size out of range"))?;
        let root_bytes = STANDARD
            .decode(root)
            .map_err(|_| NoteError::Body("root is not base64"))?;
        let root: Hash = root_bytes
            .try_into()
            .map_err(|_| NoteError::Body("root is not 32 bytes"))?;
        let Some(time) = time.strip_prefix("time ") else {
            return Err(NoteError::Body(
                "the fourth line is not `time <unix seconds>`",
            ));
        };
        if time.is_empty() || !time.bytes().all(|b| b.is_ascii_digit()) {
            return Err(NoteError::Body("time is not a decimal number"));
        }
        let time: i64 = time
            .parse()
            .map_err(|_| NoteError::Body("time out of range"))?;
        Ok(Checkpoint {
            origin: (*origin).to_string(),
            size,
            root,
            time,
        })
    }
}

/// A note signer's public half: name and Ed25519 key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteKey {
    name: String,
    public: [u8; 32],
}

impl NoteKey {
    pub fn new(name: &str, public: [u8; 32]) -> Result<NoteKey, NoteError> {
        if name.is_empty()
            || name.contains('+')
            || name.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(NoteError::KeyName(name.to_string()));
        }
        Ok(NoteKey {
            name: name.to_string(),
            public,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn public(&self) -> [u8; 32] {
        self.public
    }

    /// The key id: `SHA-256(name || "\n" || 0x01 || key)[..4]`.
    pub fn key_id(&self) -> [u8; 4] {
        let mut h = Sha256::new();
        h.update(self.name.as_bytes());
        h.update(b"\n");
        h.update([ED25519]);
        h.update(self.public);
        let d = h.finalize();
        [d[0], d[1], d[2], d[3]]
    }

    /// The verifier key in the signed-note text form: `name+hex(id)+base64(0x01 || key)`.
    pub fn verifier_key(&self) -> String {
        let mut typed = vec![ED25519];
        typed.extend_from_slice(&self.public);
        format!(
            "{}+{}+{}",
            self.name,
            hex::encode(self.key_id()),
            STANDARD.encode(typed)
        )
    }

    /// Reads a verifier key in the text form, checking its id against its name and key.
    pub fn parse_verifier_key(text: &str) -> Result<NoteKey, NoteError> {
        let mut parts = text.trim().split('+');
        let (Some(name), Some(id), Some(key), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(NoteError::VerifierKey("not name+id+key"));
        };
        let typed = STANDARD
            .decode(key)
            .map_err(|_| NoteError::VerifierKey("key is not base64"))?;
        let Some((&ED25519, public)) = typed.split_first() else {
            return Err(NoteError::VerifierKey("not an Ed25519 key"));
        };
        let public: [u8; 32] = public
            .try_into()
            .map_err(|_| NoteError::VerifierKey("key is not 32 bytes"))?;
        let key = NoteKey::new(name, public)?;
        if hex::encode(key.key_id()) != id.to_ascii_lowercase() {
            return Err(NoteError::VerifierKey(
                "the id does not match the name and key",
            ));
        }
        Ok(key)
    }

    fn signature_line(&self, signature: &[u8; 64]) -> String {
        let mut blob = Vec::with_capacity(68);
        blob.extend_from_slice(&self.key_id());
        blob.extend_from_slice(signature);
        format!(
            "{SIGNATURE_PREFIX}{} {}\n",
            self.name,
            STANDARD.encode(blob)
        )
    }
}

/// Signs `body` (which must end with a newline) and returns the note: body, blank line, signature.
pub fn sign_note<E>(
    body: &str,
    key: &NoteKey,
    sign: impl FnOnce(&[u8]) -> Result<[u8; 64], E>,
) -> Result<String, E> {
    let signature = sign(body.as_bytes())?;
    Ok(format!("{body}\n{}", key.signature_line(&signature)))
}

/// Adds a cosignature line (a witness's, say) to a note already signed.
pub fn add_signature<E>(
    note: &str,
    key: &NoteKey,
    sign: impl FnOnce(&[u8]) -> Result<[u8; 64], E>,
) -> Result<Result<String, E>, NoteError> {
    let (body, _) = split_note(note)?;
    Ok(sign(body.as_bytes()).map(|sig| format!("{note}{}", key.signature_line(&sig))))
}

/// Splits a note into its body and its signature lines, checking the form.
fn split_note(note: &str) -> Result<(&str, Vec<&str>), NoteError> {
    if note.len() > MAX_NOTE_BYTES {
        return Err(NoteError::TooLarge);
    }
    let Some(at) = note.rfind("\n\n") else {
        return Err(NoteError::Malformed("no blank line before the signatures"));
    };
    let body = &note[..=at];
    let sigs = &note[at + 2..];
    let Some(sigs) = sigs.strip_suffix('\n') else {
        return Err(NoteError::Malformed("does not end with a newline"));
    };
    if body.chars().any(|c| c.is_control() && c != '\n') {
        return Err(NoteError::Malformed("control characters in the body"));
    }
    let lines: Vec<&str> = sigs.split('\n').collect();
    if lines.iter().any(|l| !l.starts_with(SIGNATURE_PREFIX)) {
        return Err(NoteError::Malformed(
            "a signature line does not start with an em dash",
        ));
    }
    Ok((body, lines))
}

/// The body of a note, its form checked but no signature (for reading a note whose key is not
/// known: what it says is then a claim, not a fact).
pub fn note_body(note: &str) -> Result<&str, NoteError> {
    split_note(note).map(|(body, _)| body)
}

/// Verifies `key`'s signature on the note and returns the body it signs. Lines from other keys
/// are skipped (a witness's cosignature, say); a line of `key`'s name and id that does not verify
/// is an error, never skipped.
pub fn open_note<'n>(note: &'n str, key: &NoteKey) -> Result<&'n str, NoteError> {
    let (body, lines) = split_note(note)?;
    let verifying = VerifyingKey::from_bytes(&key.public)
        .map_err(|_| NoteError::VerifierKey("not a valid Ed25519 point"))?;
    let id = key.key_id();
    for line in lines {
        let rest = &line[SIGNATURE_PREFIX.len()..];
        let Some((name, blob)) = rest.split_once(' ') else {
            return Err(NoteError::Malformed(
                "a signature line has no space after the name",
            ));
        };
        if name != key.name {
            continue;
        }
        let blob = STANDARD
            .decode(blob)
            .map_err(|_| NoteError::Malformed("a signature is not base64"))?;
        if blob.len() < 4 || blob[..4] != id {
            continue;
        }
        let sig: [u8; 64] = blob[4..].try_into().map_err(|_| NoteError::BadSignature {
            name: name.to_string(),
        })?;
        verifying
            .verify(body.as_bytes(), &Signature::from_bytes(&sig))
            .map_err(|_| NoteError::BadSignature {
                name: name.to_string(),
            })?;
        return Ok(body);
    }
    Err(NoteError::Unsigned {
        name: key.name.clone(),
        key_id: hex::encode(id),
    })
}

/// Verifies a checkpoint note signed by `key` and reads its body.
pub fn open_checkpoint(note: &str, key: &NoteKey) -> Result<Checkpoint, NoteError> {
    Checkpoint::parse_body(open_note(note, key)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn signer(seed: u8) -> (SigningKey, NoteKey) {
        let sk = SigningKey::from_bytes(&[seed; 32]);
        let key = NoteKey::new("x402-probe.example/reporter", sk.verifying_key().to_bytes())
            .expect("name");
        (sk, key)
    }

    fn checkpoint() -> Checkpoint {
        Checkpoint {
            origin: "x402-probe.example/local".into(),
            size: 2920,
            root: [7u8; 32],
            time: 1_764_597_600,
        }
    }

    fn signed(sk: &SigningKey, key: &NoteKey, body: &str) -> String {
        sign_note(body, key, |m| {
            Ok::<_, std::convert::Infallible>(sk.sign(m).to_bytes())
        })
        .expect("infallible")
    }

    #[test]
    fn a_checkpoint_round_trips_and_has_the_c2sp_shape() {
        let (sk, key) = signer(1);
        let cp = checkpoint();
        let note = signed(&sk, &key, &cp.body());
        let mut lines = note.lines();
        assert_eq!(lines.next(), Some("x402-probe.example/local"));
        assert_eq!(lines.next(), Some("2920"));
        assert_eq!(lines.next(), Some(STANDARD.encode([7u8; 32]).as_str()));
        assert_eq!(lines.next(), Some("time 1764597600"));
        assert_eq!(lines.next(), Some(""));
        assert!(
            lines
                .next()
                .expect("signature")
                .starts_with("\u{2014} x402-probe.example/reporter ")
        );
        assert_eq!(open_checkpoint(&note, &key).expect("verifies"), cp);
        // The verifier key's text form reads back to the same key.
        assert_eq!(
            NoteKey::parse_verifier_key(&key.verifier_key()).expect("vkey"),
            key
        );
    }

    #[test]
    fn a_changed_byte_anywhere_in_the_body_fails_and_the_time_is_covered() {
        let (sk, key) = signer(2);
        let note = signed(&sk, &key, &checkpoint().body());
        let later = note.replace("time 1764597600", "time 1764597601");
        assert_eq!(
            open_checkpoint(&later, &key),
            Err(NoteError::BadSignature {
                name: key.name().into()
            })
        );
        let bigger = note.replace("\n2920\n", "\n2921\n");
        assert!(open_checkpoint(&bigger, &key).is_err());
        // Signed by another key of the same name: not our signature, so unsigned.
        let (other_sk, other_key) = signer(3);
        let forged = signed(&other_sk, &other_key, &checkpoint().body());
        assert!(matches!(
            open_checkpoint(&forged, &key),
            Err(NoteError::Unsigned { .. })
        ));
    }

    #[test]
    fn a_witness_cosignature_is_added_and_both_verify() {
        let (sk, key) = signer(4);
        let note = signed(&sk, &key, &checkpoint().body());
        let wsk = SigningKey::from_bytes(&[9u8; 32]);
        let witness =
            NoteKey::new("witness.example", wsk.verifying_key().to_bytes()).expect("name");
        let cosigned = add_signature(&note, &witness, |m| {
            Ok::<_, std::convert::Infallible>(wsk.sign(m).to_bytes())
        })
        .expect("form")
        .expect("infallible");
        assert_eq!(
            open_checkpoint(&cosigned, &key).expect("reporter"),
            checkpoint()
        );
        assert_eq!(
            open_checkpoint(&cosigned, &witness).expect("witness"),
            checkpoint()
        );
    }

    #[test]
    fn malformed_notes_and_bodies_are_errors() {
        let (sk, key) = signer(5);
        for body in [
            "origin\n12\n",
            "origin\n012\nAAAA\ntime 1\n",
            "\n12\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\ntime 1\n",
            "origin\n12\nnot base64!\ntime 1\n",
            "origin\n12\nAAAA\ntime 1\n",
            "origin\n12\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\nwhen 1\n",
            "origin\n12\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\ntime 1",
        ] {
            assert!(Checkpoint::parse_body(body).is_err(), "{body:?}");
        }
        assert!(open_checkpoint("no blank line\n", &key).is_err());
        assert!(open_checkpoint(&"x".repeat(MAX_NOTE_BYTES + 1), &key).is_err());
        let note = signed(&sk, &key, &checkpoint().body());
        assert!(open_checkpoint(note.trim_end_matches('\n'), &key).is_err());
        assert!(NoteKey::new("two words", [0; 32]).is_err());
        assert!(NoteKey::new("a+b", [0; 32]).is_err());
        let mut vkey = key.verifier_key();
        vkey.replace_range(
            vkey.find('+').expect("plus") + 1..vkey.find('+').expect("plus") + 3,
            "zz",
        );
        assert!(NoteKey::parse_verifier_key(&vkey).is_err());
    }
}
