//! x402-probe: tells paying agents which x402 endpoints they can trust, with evidence.
//!
//! See ARCHITECTURE.md for the map. IO lives in `probe` (one file per kind of IO); `checks`,
//! `x402`, `rubric` and `score` are pure: they never read the clock or touch the network.

pub mod budget;
pub mod canonical;
pub mod checks;
pub mod cmd;
pub mod definitions;
pub mod evidence;
pub mod history;
pub mod observation;
pub mod probe;
pub mod report;
pub mod rubric;
pub mod runner;
pub mod score;
pub mod spend;
pub mod wallet;
pub mod x402;

/// Install rustls' ring provider as the process default (once; later calls are no-ops).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
