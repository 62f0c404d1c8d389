//! `x402-probe daemon --config FILE`: runs until SIGTERM (or SIGINT); SIGHUP reloads the
//! configuration (subjects added and removed) without losing state.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::config::DaemonConfig;
use crate::daemon::{Daemon, TimeSource};

pub use super::service::{forward_signals, init_logs};

/// Options of `x402-probe daemon`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The daemon's configuration (TOML; a documented example is `deploy/x402-probe.toml`).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "lab",
        conflicts_with = "lab"
    )]
    pub config: Option<PathBuf>,
    /// Run against the embedded lab instead (a configuration written for it; nothing leaves
    /// loopback). The lab's binary only (`x402-probe-lab`): the service build has no lab.
    #[arg(long)]
    pub lab: bool,
    /// With --lab: run this many days on a simulated clock (seconds of real time), then print
    /// each subject's daily score.
    #[arg(long, requires = "lab", value_name = "DAYS",
          value_parser = clap::value_parser!(u32).range(1..=60))]
    pub days: Option<u32>,
    /// With --lab: where to keep the ledger (default: a new directory in the system's temporary
    /// directory; kept, and named at the end).
    #[arg(long, requires = "lab", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// With --lab --days: run this many vantages (daemons on one throwaway PostgreSQL, each its own
    /// name, reporter key and source address 127.0.0.(1+i)), every subject probed by each of them
    /// per cycle; then print who probed what, verify every vantage's log and recompute its scores.
    #[arg(long, requires = "days", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=8))]
    pub vantages: Option<u32>,
}

/// Runs the daemon on the configuration at `config_path` (`--lab` is the lab's binary's, `cmd::cli`).
pub fn run(config_path: PathBuf) -> Result<i32> {
    let config = DaemonConfig::read(&config_path)?;
    init_logs("info");
    limit_malloc_arenas();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let daemon = Daemon::open(config, Some(config_path.clone()), TimeSource::System).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        tokio::spawn(forward_signals(tx).context("listening for signals")?);
        tracing::info!(config = %config_path.display(), "x402-probe daemon started");
        daemon.run(rx).await?;
        anyhow::Ok(0)
    })
}

/// glibc gives each thread that allocates under contention an arena of its own, up to eight per
/// core, and memory freed in one is reused only by the threads on it: the runtime's workers and
/// its blocking threads (store reads, group commits, the API view's rebuilds) each kept their
/// own high-water mark, and the resident set grew by hundreds of MB in minutes with 100,000
/// subjects. Two arenas keep contention low on the daemon's few busy threads and let freed
/// memory be reused (the memory bench, README).
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before the runtime's threads.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
