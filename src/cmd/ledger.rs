//! `x402-probe ledger verify|export|keygen`: check every hash and signature of a ledger, write a
//! subject's entries as JSON lines, make a reporter key.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::ledger::chain::{Trusted, VerifySummary};
use crate::ledger::key::ReporterKey;
use crate::store::{SqliteStore, Store};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check every entry's hash and link, every checkpoint's signature, every blob and every
    /// score row; name the first broken entry (exit 1) or print a summary with the key the
    /// checkpoints are signed with (exit 0). A ledger that cannot be read is broken too (exit 1);
    /// exit 2 is kept for usage errors (no ledger there, a malformed key).
    Verify {
        /// The state directory holding `ledger.sqlite`.
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        /// The reporter key (64 hex digits) that must have signed every checkpoint; the entries
        /// must then be covered: at least one checkpoint, and an unsigned tail no longer than
        /// `--max-unsigned-secs`.
        #[arg(long, value_name = "HEX")]
        pubkey: Option<String>,
        /// With `--pubkey`: the most entry time the entries after the last checkpoint may span.
        /// The daemon signs every `checkpoint_every_secs` (default 300), at start and on
        /// shutdown; keep this above twice that.
        #[arg(long, value_name = "SECS", default_value_t = DEFAULT_MAX_UNSIGNED_SECS)]
        max_unsigned_secs: u64,
        /// Only the hash chain, checkpoints and stored blobs (faster); by default each entry is
        /// also parsed, its columns compared with its bytes, the blobs it names looked up and
        /// every score row checked against its entry.
        #[arg(long)]
        chain_only: bool,
    },
    /// Write every entry about one subject as JSON lines (`seq`, `hash`, `entry`).
    Export {
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        #[arg(long, value_name = "URL")]
        subject: String,
    },
    /// Make a new reporter key file (0600, never overwriting) and print its public key.
    Keygen {
        #[arg(value_name = "FILE")]
        path: PathBuf,
    },
}

pub fn run(args: Args) -> Result<i32> {
    match args.command {
        Command::Verify {
            state_dir,
            pubkey,
            max_unsigned_secs,
            chain_only,
        } => {
            let trusted = match pubkey {
                None => None,
                Some(hex_key) => {
                    let bytes = hex::decode(hex_key.trim_start_matches("0x"))
                        .context("--pubkey is not hex")?;
                    Some(Trusted {
                        public_key: <[u8; 32]>::try_from(bytes.as_slice())
                            .map_err(|_| anyhow::anyhow!("--pubkey is not 32 bytes"))?,
                        max_unsigned_ms: i64::try_from(max_unsigned_secs)
                            .ok()
                            .and_then(|s| s.checked_mul(1000))
                            .context("--max-unsigned-secs is too large")?,
                    })
                }
            };
            let path = ledger_file(&state_dir)?;
            let verified = SqliteStore::open_read_only(&path)
                .and_then(|store| store.verify(trusted.as_ref(), !chain_only));
            match verified {
                Ok(s) => {
                    println!(
                        "{}",
                        summary_line(&path, &s, trusted.is_some(), !chain_only)
                    );
                    Ok(0)
                }
                Err(e) => {
                    eprintln!("x402-probe: ledger {} is broken: {e}", path.display());
                    Ok(1)
                }
            }
        }
        Command::Export { state_dir, subject } => {
            let store = open_existing(&state_dir)?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let mut failure = None;
            store.scan(0, &mut |row| {
                if row.subject.as_deref() != Some(subject.as_str()) {
                    return Ok(());
                }
                let entry: serde_json::Value =
                    serde_json::from_slice(&row.body).unwrap_or(serde_json::Value::Null);
                let line = serde_json::json!({
                    "seq": row.seq, "hash": hex::encode(row.hash), "entry": entry,
                });
                if let Err(e) = writeln!(out, "{line}") {
                    failure = Some(e);
                }
                Ok(())
            })?;
            if let Some(e) = failure {
                return Err(e).context("writing the export");
            }
            out.flush()?;
            Ok(0)
        }
        Command::Keygen { path } => {
            let key = ReporterKey::generate(&path)?;
            println!("{}", hex::encode(key.public_key()));
            Ok(0)
        }
    }
}

/// The default of `ledger verify --max-unsigned-secs`: an hour, twelve of the daemon's default
/// checkpoint intervals.
pub const DEFAULT_MAX_UNSIGNED_SECS: u64 = 3600;

/// The summary `ledger verify` prints.
fn summary_line(path: &Path, s: &VerifySummary, trusted: bool, deep: bool) -> String {
    let unsigned = s.head_seq - s.signed_through;
    let signer = match (&s.signed_by, trusted) {
        (Some(key), true) => format!(", signed by the trusted key {key}"),
        (Some(key), false) => format!(
            ", signed by {key} (not checked against a trusted key: compare it with the \
             reporter's, or pass --pubkey)"
        ),
        (None, _) => ", not signed by any key".into(),
    };
    let derived = if deep {
        format!(
            "; {} blobs named and found, {} score rows match their entries",
            s.blobs_referenced, s.score_rows
        )
    } else {
        String::new()
    };
    format!(
        "ledger {}: {} entries ({} bytes), head {} {}, {} checkpoints, signed through entry {}{}{}{}",
        path.display(),
        s.entries,
        s.bytes,
        s.head_seq,
        s.head_hash,
        s.checkpoints,
        s.signed_through,
        if unsigned > 0 {
            format!(
                " ({unsigned} entries after it not signed yet, spanning {} s)",
                s.unsigned_span_ms / 1000
            )
        } else {
            String::new()
        },
        signer,
        derived,
    )
}

/// The ledger file of a state directory, which must exist and be a regular file (a usage error
/// otherwise: verifying never creates one).
pub fn ledger_file(state_dir: &Path) -> Result<PathBuf> {
    let path = state_dir.join(crate::store::sqlite::STORE_FILE);
    crate::files::open_regular(&path, u64::MAX, "a ledger")
        .with_context(|| format!("no ledger in {}", state_dir.display()))?;
    Ok(path)
}

/// Opens a ledger that must already exist, to append to it (`outage declare`).
pub fn open_existing(state_dir: &Path) -> Result<SqliteStore> {
    Ok(SqliteStore::open_file(&ledger_file(state_dir)?)?)
}
