//! `x402-probe outage declare --from --to --reason`: declares a window in which our vantage was
//! out. Subjects' free outcomes inside it count against nobody. A window may reach at most 48 hours
//! back (older outcomes are final), and it is a new ledger entry: nothing recorded is rewritten.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::ledger::record::{OutageRecord, Record};
use crate::store::{NewEntry, Store};

/// How far back a window may be declared.
pub const MAX_DECLARE_BACK_MS: i64 = 48 * 3_600_000;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Declare a window (RFC 3339 UTC times).
    Declare {
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        #[arg(long, value_name = "TIME")]
        from: String,
        #[arg(long, value_name = "TIME")]
        to: String,
        #[arg(long)]
        reason: String,
    },
}

pub fn run(args: Args) -> Result<i32> {
    let Command::Declare {
        state_dir,
        from,
        to,
        reason,
    } = args.command;
    let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    let record = declared_window(&from, &to, &reason, now)?;
    let store = crate::cmd::ledger::open_existing(&state_dir)?;
    let seqs = store.append(vec![NewEntry::plain(now, Record::Outage(record))])?;
    println!(
        "declared as ledger entry {}",
        seqs.first().copied().unwrap_or(0)
    );
    Ok(0)
}

/// Checks a declaration against the rules (pure: `now_ms` given).
pub fn declared_window(from: &str, to: &str, reason: &str, now_ms: i64) -> Result<OutageRecord> {
    let ms = |what: &str, text: &str| {
        crate::clock::ms_of(text)
            .with_context(|| format!("--{what} {text:?} is not an RFC 3339 time"))
    };
    let (from_ms, to_ms) = (ms("from", from)?, ms("to", to)?);
    if to_ms <= from_ms {
        bail!("--to must be after --from");
    }
    if from_ms < now_ms - MAX_DECLARE_BACK_MS {
        bail!("--from is more than 48 hours back: outcomes older than that are final");
    }
    if to_ms > now_ms + MAX_DECLARE_BACK_MS {
        bail!("--to is more than 48 hours ahead");
    }
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > 500 {
        bail!("--reason must say why, in at most 500 characters");
    }
    Ok(OutageRecord::Declared {
        from_ms,
        to_ms,
        reason: reason.to_string(),
        declared_at_ms: now_ms,
    })
}
