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

/// SIGTERM and SIGINT stop the daemon; SIGHUP reloads its configuration. The handlers are
/// installed before this returns (not when the returned future first runs): the daemon announces
/// itself only after, so a supervisor's SIGTERM that follows the announcement is always caught
/// rather than killing the process by the default action.
pub fn forward_signals(
    tx: tokio::sync::mpsc::Sender<Signal>,
) -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    Ok(async move {
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SIGTERM that arrives after `forward_signals` returns but before its future first runs
    /// (the window between the daemon's "started" line and the task's first poll) is delivered as
    /// its message, not the default action that ends the process (SIGHUP's is the same as
    /// SIGTERM's; raising SIGHUP keeps the test about the window, not about stopping).
    #[tokio::test]
    async fn a_signal_before_the_first_poll_is_caught() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        let forward = forward_signals(tx).unwrap();
        // SAFETY: raising a signal to ourselves; its handler is installed above.
        assert_eq!(unsafe { libc::raise(libc::SIGHUP) }, 0);
        tokio::spawn(forward);
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv()).await;
        assert!(matches!(got, Ok(Some(Signal::Reload))), "{got:?}");
    }
}
