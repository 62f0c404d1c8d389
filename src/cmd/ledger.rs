//! `x402-probe ledger verify|export|prove|check-proof|migrate|keygen`: check every hash and signature of
//! a ledger, write a subject's entries as JSON lines or with their inclusion proofs, check such
//! proofs offline, make a reporter key.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::ledger::chain::{Trusted, VerifySummary};
use crate::ledger::key::ReporterKey;
use crate::ledger::proof::{self, InclusionBundle};
use crate::ledger::tlog;
use crate::progress::{Counted, Mode};
use crate::store::postgres::PgLedger;
use crate::store::{SqliteStore, Store};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

/// A vantage's log in PostgreSQL, named on the command line instead of a state directory.
#[derive(Debug, Clone, clap::Args)]
pub struct PostgresLog {
    /// Read the log of a vantage in this PostgreSQL database (the daemon's `[store] postgres`)
    /// instead of a state directory's ledger.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// With `--postgres`: the vantage (the daemon's `[probe] vantage`; default: the only one in
    /// the database).
    #[arg(long, value_name = "NAME", requires = "postgres")]
    pub vantage: Option<String>,
}

impl PostgresLog {
    /// The vantage's log, when `--postgres` names one, with how it is shown.
    pub fn open(&self) -> Option<(String, Result<PgLedger, crate::store::StoreError>)> {
        let url = self.postgres.as_deref()?;
        let opened = PgLedger::open_existing(url, self.vantage.as_deref());
        let shown = match &opened {
            Ok(log) => format!("of vantage {:?} in {}", log.vantage(), log.url()),
            Err(_) => "in PostgreSQL".to_string(),
        };
        Some((shown, opened))
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check every entry's hash and link, every checkpoint's signature, every blob and every
    /// score row; name the first broken entry (exit 1) or print a summary with the key the
    /// checkpoints are signed with (exit 0). A ledger that cannot be read is broken too (exit 1);
    /// exit 2 is kept for usage errors (no ledger there, a malformed key).
    Verify {
        /// The state directory holding `ledger.sqlite`.
        #[arg(
            long,
            value_name = "DIR",
            required_unless_present = "postgres",
            conflicts_with = "postgres"
        )]
        state_dir: Option<PathBuf>,
        #[command(flatten)]
        postgres: PostgresLog,
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
        /// No progress on stderr (entries verified of total, rate, time left).
        #[arg(long)]
        quiet: bool,
    },
    /// Write every entry about one subject as JSON lines (`seq`, `hash`, `entry`).
    Export {
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        #[arg(long, value_name = "URL")]
        subject: String,
    },
    /// Print one subject's entries with their inclusion proofs against the latest tree
    /// checkpoint (a signed note), as JSON (`x402-probe.inclusion/1`), for checking offline with
    /// `ledger check-proof` or any RFC 9162 verifier.
    Prove {
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        #[arg(long, value_name = "URL")]
        subject: String,
        /// Only entries after this sequence number (to page through a long history).
        #[arg(long, value_name = "SEQ", default_value_t = 0)]
        after: u64,
        /// At most this many entries.
        #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        limit: u64,
    },
    /// Check a file written by `ledger prove` (or served to an operator): the checkpoint's
    /// signature by the given reporter key and every entry's inclusion proof. Exit 0 when all
    /// hold, 1 naming the first that does not.
    CheckProof {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// The reporter key (64 hex digits) the checkpoint must be signed by.
        #[arg(long, value_name = "HEX")]
        pubkey: String,
    },
    /// Rewrite a ledger of format 1 (runs kept whole) in format 2 (runs keep their observation;
    /// results derived on read and proven by their hash; repeated bytes kept once, compressed):
    /// verifies it, writes the new ledger beside it with the same entry numbers and checkpoints
    /// signed by the reporter key, verifies that, and only then renames it over the old one (kept
    /// as `ledger-format-1.sqlite`). Stop the daemon first. Exit 0 when migrated, 1 when the old
    /// ledger does not verify or the new one would not (the old one is then left in place).
    Migrate {
        /// The state directory holding `ledger.sqlite`.
        #[arg(long = "state", visible_alias = "state-dir", value_name = "DIR")]
        state_dir: PathBuf,
        /// The reporter key file that signs the new ledger's checkpoints (default:
        /// `DIR/reporter.key`).
        #[arg(long, value_name = "FILE")]
        reporter_key: Option<PathBuf>,
        /// A rubric file the daemon scored under, besides the embedded one (its runs' results
        /// are derived under it).
        #[arg(long, value_name = "FILE")]
        rubric: Vec<PathBuf>,
        /// No progress on stderr (entries migrated of total, rate, time left).
        #[arg(long)]
        quiet: bool,
    },
    /// Write ERC-8004 feedback for each subject whose operator file declares an agent identity
    /// in the configured registry (`[feedback]` of the daemon's file): one `giveFeedback` per
    /// measure the latest score has (`starred`, `reachable`, `uptime`, `successRate`,
    /// `responseTime`), its feedback file (the ledger entries it rests on and the signed score)
    /// written to `--out`, and a JSON line per feedback on stdout. With `--submit`, send them to
    /// the registry from `[feedback]`'s own wallet within its gas caps. Exit 0 when done, 1 when
    /// sending stopped (a cap, the RPC, a revert), 2 for a configuration that cannot be used.
    Feedback {
        /// The daemon's configuration file (its state directory, reporter key, `[pay]` wallet
        /// and `[feedback]`).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Where the feedback files go (and `submitted.jsonl`, the record of what was sent).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Send the feedback to the registry.
        #[arg(long)]
        submit: bool,
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
            postgres,
            pubkey,
            max_unsigned_secs,
            chain_only,
            quiet,
        } => {
            let trusted = match pubkey {
                None => None,
                Some(hex_key) => Some(Trusted {
                    public_key: parse_pubkey(&hex_key)?,
                    max_unsigned_ms: i64::try_from(max_unsigned_secs)
                        .ok()
                        .and_then(|s| s.checked_mul(1000))
                        .context("--max-unsigned-secs is too large")?,
                }),
            };
            if let Some((shown, log)) = postgres.open() {
                return Ok(
                    match log.and_then(|log| Store::verify(&log, trusted.as_ref(), !chain_only)) {
                        Ok(s) => {
                            println!(
                                "{}",
                                summary_line(&shown, &s, trusted.is_some(), !chain_only)
                            );
                            0
                        }
                        Err(e) => {
                            eprintln!("x402-probe: ledger {shown} is broken: {e}");
                            1
                        }
                    },
                );
            }
            let state_dir = state_dir.context("--state-dir or --postgres names the ledger")?;
            let path = ledger_file(&state_dir)?;
            let mut progress = Counted::new("entries verified", Mode::for_stderr(quiet));
            let verified = SqliteStore::open_read_only(&path).and_then(|store| {
                store.verify_reporting(trusted.as_ref(), !chain_only, &mut |done, total| {
                    progress.at(done, total)
                })
            });
            progress.finish();
            if let Err(crate::store::StoreError::NeedsMigration { .. }) = &verified {
                return verify_format_1(&path, &state_dir);
            }
            match verified {
                Ok(s) => {
                    println!(
                        "{}",
                        summary_line(&path.display(), &s, trusted.is_some(), !chain_only)
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
            // A page at a time: each entry as stored (its hash, its envelope) with its record
            // read back as every reader sees it (a run's results derived and checked).
            let mut after = 0;
            loop {
                let stored = store.subject_stored_entries(&subject, after, EXPORT_PAGE)?;
                let Some(last) = stored.last() else { break };
                after = last.seq;
                let seqs: Vec<u64> = stored.iter().map(|e| e.seq).collect();
                let read = store.entries_at(&seqs)?;
                for (row, entry) in stored.iter().zip(read) {
                    let mut envelope: serde_json::Value =
                        serde_json::from_slice(&row.body).context("an entry's bytes")?;
                    envelope["record"] = serde_json::to_value(&entry.record)?;
                    let line = serde_json::json!({
                        "seq": row.seq, "hash": hex::encode(row.hash), "entry": envelope,
                    });
                    writeln!(out, "{line}").context("writing the export")?;
                }
            }
            out.flush()?;
            Ok(0)
        }
        Command::Prove {
            state_dir,
            subject,
            after,
            limit,
        } => {
            let path = ledger_file(&state_dir)?;
            let store = SqliteStore::open_read_only(&path)?;
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            let Some(bundle) = store.inclusion_bundle(&subject, after, limit)? else {
                eprintln!(
                    "x402-probe: ledger {} has no tree checkpoint yet (the daemon signs one \
                     every checkpoint interval)",
                    path.display()
                );
                return Ok(1);
            };
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            serde_json::to_writer_pretty(&mut out, &bundle)?;
            writeln!(out)?;
            out.flush()?;
            Ok(0)
        }
        Command::CheckProof { file, pubkey } => {
            let key = parse_pubkey(&pubkey)?;
            let bytes =
                crate::files::read_regular(&file, MAX_BUNDLE_BYTES, "an inclusion proof file")?;
            let bundle: InclusionBundle = serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not an inclusion proof file", file.display()))?;
            match proof::verify(&bundle, &tlog::note_key(&key)) {
                Ok(v) => {
                    println!(
                        "{}: {} entries proven in the log {} of {} entries (root {}, signed at {})",
                        file.display(),
                        v.entries.len(),
                        v.checkpoint.origin,
                        v.checkpoint.size,
                        hex::encode(v.checkpoint.root),
                        v.checkpoint.time
                    );
                    Ok(0)
                }
                Err(e) => {
                    eprintln!("x402-probe: {}: {e}", file.display());
                    Ok(1)
                }
            }
        }
        Command::Migrate {
            state_dir,
            reporter_key,
            rubric,
            quiet,
        } => {
            ledger_file(&state_dir)?;
            let key_file = reporter_key.unwrap_or_else(|| state_dir.join("reporter.key"));
            let key = ReporterKey::from_key_file(&key_file)
                .with_context(|| format!("reading the reporter key {}", key_file.display()))?;
            let mut rubrics = vec![crate::rubric::Rubric::embedded_default()];
            for p in &rubric {
                rubrics.insert(0, super::score::load_rubric(Some(p))?);
            }
            let mut progress = Counted::new("entries migrated", Mode::for_stderr(quiet));
            let migrated = crate::store::sqlite::migrate_format_1(
                &state_dir,
                &key,
                &rubrics,
                &mut |done, total| progress.at(done, total),
            );
            progress.finish();
            match migrated {
                Ok(m) => {
                    println!(
                        "ledger {}: migrated from {} (head {} {}) to {}: {} entries, {} -> {} \
                         bytes, {} checkpoints signed by {}; the old ledger is kept as {}",
                        state_dir.display(),
                        m.from.format,
                        m.from.head_seq,
                        m.from.head_hash,
                        crate::store::sqlite::SCHEMA_ID,
                        m.after.entries,
                        m.bytes_before,
                        m.bytes_after,
                        m.after.checkpoints,
                        hex::encode(key.public_key()),
                        m.kept.display()
                    );
                    Ok(0)
                }
                Err(e @ crate::store::sqlite::MigrateError::AlreadyCurrent(_)) => {
                    println!("x402-probe: {e}");
                    Ok(0)
                }
                Err(e) => {
                    eprintln!("x402-probe: ledger {}: {e}", state_dir.display());
                    Ok(1)
                }
            }
        }
        Command::Feedback {
            config,
            out,
            submit,
        } => super::feedback::run(&config, &out, submit),
        Command::Keygen { path } => {
            let key = ReporterKey::generate(&path)?;
            println!("{}", hex::encode(key.public_key()));
            Ok(0)
        }
    }
}

/// Entries exported per page.
const EXPORT_PAGE: usize = 512;

/// `ledger verify` of a format 1 ledger: its chain, checkpoints and blobs, and that it waits for
/// `ledger migrate` (no command of this build reads it otherwise).
fn verify_format_1(path: &Path, state_dir: &Path) -> Result<i32> {
    let verified = SqliteStore::open_format_1(path).and_then(|store| store.verify_format_1());
    match verified {
        Ok(s) => {
            println!(
                "{}; format {} (runs kept whole): this build reads it only to migrate it, with \
                 `x402-probe ledger migrate --state {}`",
                summary_line(&path.display(), &s, false, false),
                crate::store::sqlite::SCHEMA_ID_1,
                state_dir.display()
            );
            Ok(0)
        }
        Err(e) => {
            eprintln!("x402-probe: ledger {} is broken: {e}", path.display());
            Ok(1)
        }
    }
}

/// The default of `ledger verify --max-unsigned-secs`: an hour, twelve of the daemon's default
/// checkpoint intervals.
pub const DEFAULT_MAX_UNSIGNED_SECS: u64 = 3600;

/// The largest proof file `ledger check-proof` reads.
const MAX_BUNDLE_BYTES: u64 = 512 * 1024 * 1024;

/// A reporter key given as 64 hex digits (`0x` allowed).
fn parse_pubkey(text: &str) -> Result<[u8; 32]> {
    let bytes = hex::decode(text.trim_start_matches("0x")).context("--pubkey is not hex")?;
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| anyhow::anyhow!("--pubkey is not 32 bytes"))
}

/// The summary `ledger verify` prints.
fn summary_line(
    path: &dyn std::fmt::Display,
    s: &VerifySummary,
    trusted: bool,
    deep: bool,
) -> String {
    let unsigned = s.head_seq - s.signed_through;
    let signer = match (&s.signed_by, trusted) {
        (Some(key), true) => format!(", signed by the trusted key {key}"),
        (Some(key), false) => format!(
            ", signed by {key} (not checked against a trusted key: compare it with the \
             reporter's, or pass --pubkey)"
        ),
        (None, _) => ", not signed by any key".into(),
    };
    let tree = if s.tree_root.is_empty() {
        String::new()
    } else if s.tree_checkpoints > 0 {
        format!(
            "; Merkle root {}, {} tree checkpoints, signed through size {}",
            s.tree_root, s.tree_checkpoints, s.tree_signed_through
        )
    } else {
        format!("; Merkle root {}, no tree checkpoint yet", s.tree_root)
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
        "ledger {}: {} entries ({} bytes), head {} {}, {} checkpoints, signed through entry {}{}{}{}{}",
        path,
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
        tree,
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
