//! `x402-probe ledger verify|export|keygen`: check every hash and signature of a ledger, write a
//! subject's entries as JSON lines, make a reporter key.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::ledger::key::ReporterKey;
use crate::store::{SqliteStore, Store};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check every entry's hash and link, every checkpoint's signature and every blob; name the
    /// first broken entry (exit 1) or print a summary (exit 0).
    Verify {
        /// The state directory holding `ledger.sqlite`.
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        /// Every checkpoint must be signed by this reporter key (64 hex digits).
        #[arg(long, value_name = "HEX")]
        pubkey: Option<String>,
        /// Only the hash chain (faster); by default each entry is also parsed and its columns
        /// compared with its bytes.
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
            chain_only,
        } => {
            let trusted = match pubkey {
                None => None,
                Some(hex_key) => {
                    let bytes = hex::decode(hex_key.trim_start_matches("0x"))
                        .context("--pubkey is not hex")?;
                    Some(
                        <[u8; 32]>::try_from(bytes.as_slice())
                            .map_err(|_| anyhow::anyhow!("--pubkey is not 32 bytes"))?,
                    )
                }
            };
            let store = open_existing(&state_dir)?;
            match store.verify(trusted.as_ref(), !chain_only) {
                Ok(s) => {
                    println!(
                        "ledger {}: {} entries ({} bytes), head {} {}, {} checkpoints, signed through entry {}{}",
                        store.path().display(),
                        s.entries,
                        s.bytes,
                        s.head_seq,
                        s.head_hash,
                        s.checkpoints,
                        s.signed_through,
                        if s.signed_through < s.head_seq {
                            format!(
                                " ({} entries after it not signed yet)",
                                s.head_seq - s.signed_through
                            )
                        } else {
                            String::new()
                        }
                    );
                    Ok(0)
                }
                Err(e) => {
                    eprintln!(
                        "x402-probe: ledger {} is broken: {e}",
                        store.path().display()
                    );
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

/// Opens a ledger that must already exist (verifying never creates one).
pub fn open_existing(state_dir: &std::path::Path) -> Result<SqliteStore> {
    let path = state_dir.join(crate::store::sqlite::STORE_FILE);
    crate::files::open_regular(&path, u64::MAX, "a ledger")
        .with_context(|| format!("no ledger in {}", state_dir.display()))?;
    Ok(SqliteStore::open_file(&path)?)
}
