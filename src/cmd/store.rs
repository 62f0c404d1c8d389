//! `x402-probe store copy --from DIR --to URL`: move a SQLite ledger into PostgreSQL as one
//! vantage's log (`store::copy`), both verified afterwards.

use std::path::PathBuf;

use anyhow::Result;

use crate::progress::{Counted, Mode};
use crate::store::copy::{CopyError, copy_sqlite_to_postgres};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Copy the ledger of a state directory (entries, blobs, checkpoints) into an empty vantage
    /// log in PostgreSQL, in one transaction, then verify both and compare them (entries, head,
    /// Merkle root, checkpoints). Stop the daemon first. Exit 0 when copied and both verify; 1
    /// when nothing was copied (the ledger does not verify or has no checkpoint, the database is
    /// unreachable, the vantage is refused or its log is not empty) or the copy does not verify
    /// or differs; 2 on usage errors (no ledger there).
    Copy {
        /// The state directory holding `ledger.sqlite`.
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
        /// The database, as a `postgres://user@host:port/db` URL (a password in it is never
        /// printed; prefer the environment variable, which `ps` does not show).
        #[arg(long, value_name = "URL", env = "X402_PROBE_STORE_POSTGRES")]
        to: String,
        /// The vantage the ledger becomes (default: the first 16 hex digits of its reporter key).
        #[arg(long, value_name = "NAME")]
        vantage: Option<String>,
        /// No progress on stderr.
        #[arg(long)]
        quiet: bool,
    },
}

pub fn run(args: Args) -> Result<i32> {
    match args.command {
        Command::Copy {
            from,
            to,
            vantage,
            quiet,
        } => {
            let path = super::ledger::ledger_file(&from)?;
            let mut progress = Counted::new("entries copied", Mode::for_stderr(quiet));
            let copied = copy_sqlite_to_postgres(&path, &to, vantage.as_deref(), &mut |d, t| {
                progress.at(d, t)
            });
            progress.finish();
            match copied {
                Ok(c) => {
                    println!(
                        "ledger {} copied to {} as vantage {:?} (key {}): {} entries, head {} {}, \
                         Merkle root {}, {} checkpoints signed through entry {}, {} blobs; both \
                         verify",
                        path.display(),
                        c.url,
                        c.vantage,
                        hex::encode(c.public_key),
                        c.target.entries,
                        c.target.head_seq,
                        c.target.head_hash,
                        c.target.tree_root,
                        c.target.checkpoints,
                        c.target.signed_through,
                        c.target.blobs_referenced
                    );
                    Ok(0)
                }
                Err(
                    e @ (CopyError::SourceBroken { .. }
                    | CopyError::Unsigned { .. }
                    | CopyError::Target(_)
                    | CopyError::TargetBroken { .. }
                    | CopyError::Differs { .. }),
                ) => {
                    eprintln!("x402-probe: store copy: {e}");
                    Ok(1)
                }
            }
        }
    }
}
