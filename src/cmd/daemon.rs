//! `x402-probe daemon --config FILE`: runs until SIGTERM (or SIGINT); SIGHUP reloads the
//! configuration (subjects added and removed) without losing state.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::config::DaemonConfig;
use crate::daemon::{Daemon, Signal, TimeSource};

/// Options of `x402-probe daemon`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The daemon's configuration (TOML; a documented example is `deploy/x402-probe.toml`).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
}

pub fn run(args: Args) -> Result<i32> {
    let config = DaemonConfig::read(&args.config)?;
    init_logs();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let daemon = Daemon::open(config, Some(args.config.clone()), TimeSource::System).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        tokio::spawn(forward_signals(tx));
        tracing::info!(config = %args.config.display(), "x402-probe daemon started");
        daemon.run(rx).await?;
        anyhow::Ok(0)
    })
}

/// Structured logs on standard error (one line per run); `RUST_LOG` filters them.
pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// SIGTERM and SIGINT stop the daemon; SIGHUP reloads its configuration.
async fn forward_signals(tx: tokio::sync::mpsc::Sender<Signal>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot listen for signals");
        return;
    };
    loop {
        let signal = tokio::select! {
            _ = term.recv() => Signal::Stop,
            _ = int.recv() => Signal::Stop,
            _ = hup.recv() => Signal::Reload,
        };
        if tx.send(signal).await.is_err() {
            return;
        }
    }
}
