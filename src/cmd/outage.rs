//! `x402-probe outage declare --from --to --reason`: declares a window in which our vantage was
//! out. Subjects' free outcomes inside it count against nobody. A window may reach at most 48 hours
//! back (older outcomes are final), and it is a new ledger entry: nothing recorded is rewritten.

use std::path::PathBuf;

use anyhow::Result;

use crate::ledger::record::{OutageRecord, Record};
use crate::store::{NewEntry, Store};

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
    let record = OutageRecord::declared(&from, &to, &reason, now)?;
    let store = crate::cmd::ledger::open_existing(&state_dir)?;
    let seqs = store.append(vec![NewEntry::plain(now, Record::Outage(record))])?;
    println!(
        "declared as ledger entry {}",
        seqs.first().copied().unwrap_or(0)
    );
    Ok(0)
}
