//! `x402-probe verify-score FILE --pubkey HEX|FILE`: checks a signed score document (what
//! `/v1/subjects/{id}/score` serves) offline, against the reporter's public key obtained out of
//! band. Exit codes: 0 valid, 1 invalid (the reason on stderr), 2 usage (unreadable file, a key
//! that is not 32 bytes of hex).

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::api::signed::{SignedScore, verify};
use crate::files;

/// Options of `x402-probe verify-score`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The signed score (JSON, as the API serves it).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The reporter's ed25519 public key: 64 hex characters, or a file holding them.
    #[arg(long, value_name = "HEX|FILE")]
    pub pubkey: String,
}

/// The largest envelope read (a score document is far smaller).
const MAX_ENVELOPE_BYTES: u64 = 16 * 1024 * 1024;

pub fn run(args: Args) -> Result<i32> {
    let trusted = public_key(&args.pubkey)?;
    let bytes = files::read_regular(&args.file, MAX_ENVELOPE_BYTES, "a signed score")
        .with_context(|| format!("reading {}", args.file.display()))?;
    let envelope: SignedScore = match serde_json::from_slice(&bytes) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("invalid: not a signed score envelope: {e}");
            return Ok(1);
        }
    };
    match verify(&envelope, &trusted) {
        Ok(document) => {
            let line = crate::report::score_line(&document);
            println!(
                "valid: {} as of {}, signed by {}",
                crate::report::one_line(&envelope.subject_url, 200),
                crate::report::one_line(&envelope.as_of, 40),
                envelope.public_key
            );
            println!("{line}");
            Ok(0)
        }
        Err(e) => {
            eprintln!("invalid: {e}");
            Ok(1)
        }
    }
}

/// A key given as hex, or as a file holding the hex (surrounding whitespace ignored).
pub(crate) fn public_key(given: &str) -> Result<[u8; 32]> {
    let parse = |text: &str| -> Option<[u8; 32]> {
        let text = text.trim();
        let text = text.strip_prefix("0x").unwrap_or(text);
        hex::decode(text).ok()?.try_into().ok()
    };
    if let Some(key) = parse(given) {
        return Ok(key);
    }
    let path = std::path::Path::new(given);
    if path.exists() {
        let bytes = files::read_regular(path, 4096, "a public key file")
            .with_context(|| format!("reading {given}"))?;
        let text = String::from_utf8_lossy(&bytes);
        if let Some(key) = parse(&text) {
            return Ok(key);
        }
        bail!("--pubkey {given}: the file does not hold 64 hex characters");
    }
    bail!("--pubkey: give 64 hex characters (32 bytes) or a file holding them")
}
