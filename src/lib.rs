//! x402-probe: tells paying agents which x402 endpoints they can trust, with evidence.
//!
//! See ARCHITECTURE.md for the map. IO lives in `probe` (one file per kind of IO); `checks`,
//! `x402`, `rubric` and `score` are pure: they never read the clock or touch the network.

pub mod api;
pub mod budget;
pub mod calibrate;
pub mod canonical;
pub mod checks;
pub mod clock;
pub mod cmd;
pub mod config;
pub mod control;
pub mod daemon;
pub mod definitions;
pub mod evidence;
pub mod feedback;
pub mod files;
pub mod history;
pub(crate) mod html;
pub mod http_url;
pub mod ledger;
pub mod metrics;
pub mod paid;
/// The evidence of a free run (kept under its old name while the tree moves to `evidence`).
pub use evidence::free as observation;
pub mod probe;
pub mod progress;
pub mod readiness;
pub mod report;
pub mod rubric;
pub mod runner;
pub mod score;
pub mod secret;
pub mod snapshot;
pub mod solana_wallet;
pub mod spend;
pub mod state_dir;
pub mod store;
pub mod wallet;
pub mod webhook;
pub mod x402;

/// Install rustls' ring provider as the process default (once; later calls are no-ops).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
