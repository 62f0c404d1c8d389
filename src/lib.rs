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

// mimalloc's own option setter (`mimalloc.h`); the symbol is in the library the allocator links
// (named here so that it is linked into every program that calls `tune_allocator`).
use mimalloc as _;
unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay`'s place in mimalloc's `mi_option_e` (v3, the crate's default build).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// How long freed memory stays with the process before mimalloc returns it to the system. Its
/// default (1 s) suits short bursts; a sweep keeps ~1,000 runs in flight whose buffers are freed
/// and wanted again a few seconds later, so memory returned after 1 s came straight back as page
/// faults, each zeroing a (huge) page: 22,000 faults on a 4,000-endpoint sweep, 5,100 with 10 s
/// (README, "Daemon benchmarks"). Memory idle for longer still goes back to the system.
const PURGE_DELAY_MS: std::ffi::c_long = 10_000;

/// The service's allocator settings, for a program whose global allocator is mimalloc (the
/// service binary, and the benches that measure the daemon as it ships). Called first thing in
/// `main`; `MIMALLOC_PURGE_DELAY` in the environment, when set, is the operator's choice and wins.
pub fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one integer option; mimalloc reads options atomically and allows setting
        // them at any time.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
}

#[cfg(test)]
mod tests {
    unsafe extern "C" {
        fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    }

    /// The service's purge delay is what `tune_allocator` leaves in mimalloc's options (unless the
    /// operator's environment names one, which then wins untouched).
    #[test]
    fn the_allocator_keeps_freed_memory_for_the_services_delay() {
        super::tune_allocator();
        // SAFETY: reads one integer option.
        let delay = unsafe { mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        match std::env::var("MIMALLOC_PURGE_DELAY") {
            Ok(set) => assert_eq!(delay.to_string(), set.trim()),
            Err(_) => assert_eq!(delay, super::PURGE_DELAY_MS),
        }
    }
}
