//! What every command that runs the daemon shares: its logs and its signals.

use crate::daemon::Signal;

/// Structured logs on standard error (one line per run); `RUST_LOG` filters them, else `default`
/// (a level: `info`, `warn`, ...).
pub fn init_logs(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// SIGTERM and SIGINT stop the daemon; SIGHUP reloads its configuration.
pub async fn forward_signals(tx: tokio::sync::mpsc::Sender<Signal>) {
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
