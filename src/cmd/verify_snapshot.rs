//! `x402-probe verify-snapshot FILE --pubkey HEX|FILE`: checks a signed daily snapshot (what
//! `/v1/snapshots/{day}` serves, as served or gzip-compressed) offline, against the reporter's
//! public key obtained out of band: the file's bytes, the signature, the tree checkpoint, every
//! subject's inclusion proof and that its fields are its proven score entry's
//! (`snapshot::verify`). Exit codes: 0 valid, 1 invalid (the reason on stderr), 2 usage
//! (unreadable file, a key that is not 32 bytes of hex).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::files;
use crate::snapshot::{MAX_SNAPSHOT_BYTES, verify};

/// Options of `x402-probe verify-snapshot`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The signed snapshot (JSON as the API serves it, or gzip-compressed).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The reporter's ed25519 public key: 64 hex characters, or a file holding them.
    #[arg(long, value_name = "HEX|FILE")]
    pub pubkey: String,
}

pub fn run(args: Args) -> Result<i32> {
    let trusted = super::verify_score::public_key(&args.pubkey)?;
    let bytes = files::read_regular(&args.file, MAX_SNAPSHOT_BYTES, "a signed snapshot")
        .with_context(|| format!("reading {}", args.file.display()))?;
    let bytes = match gunzip(bytes) {
        Ok(b) => b,
        Err(why) => {
            eprintln!("invalid: {why}");
            return Ok(1);
        }
    };
    match verify(&bytes, &trusted) {
        Ok(verified) => {
            let s = &verified.snapshot;
            let mut by_verdict: BTreeMap<String, usize> = BTreeMap::new();
            for subject in &s.subjects {
                let name = serde_json::to_value(subject.verdict)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                *by_verdict.entry(name).or_default() += 1;
            }
            println!(
                "valid: the snapshot of {} (made {}), {} subjects, each proven in the tree \
                 checkpoint of {} entries, signed by {}",
                s.day,
                crate::report::one_line(&s.made_at, 40),
                s.subjects.len(),
                verified.checkpoint.size,
                hex::encode(trusted)
            );
            let counts: Vec<String> = by_verdict.iter().map(|(v, n)| format!("{v} {n}")).collect();
            println!("verdicts: {}", counts.join(", "));
            println!("rubrics: {}", s.rubrics.join(", "));
            Ok(0)
        }
        Err(e) => {
            eprintln!("invalid: {e}");
            Ok(1)
        }
    }
}

/// The file's bytes, decompressed when they are gzip (bounded like the file itself).
fn gunzip(bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes.as_slice())
        .take(MAX_SNAPSHOT_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("the gzip stream does not decompress: {e}"))?;
    if out.len() as u64 > MAX_SNAPSHOT_BYTES {
        return Err(format!(
            "decompresses to more than {MAX_SNAPSHOT_BYTES} bytes"
        ));
    }
    Ok(out)
}
