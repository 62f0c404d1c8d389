//! `x402-probe`, the service build: every command but the embedded lab's (those are the lab's
//! binary's, `x402-probe-lab`; `cmd::cli` says where to find them).

/// mimalloc, not glibc's malloc: the daemon's runtime workers and its ledger writer allocate
/// and free from several threads at once, and glibc's arenas spent about a fifth of a sweep's
/// CPU on it (README, "Daemon benchmarks").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// mimalloc's own option setter (`mimalloc.h`); the symbol is in the library the allocator links.
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

fn main() {
    // `MIMALLOC_PURGE_DELAY` in the environment, when set, is the operator's choice and wins.
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one integer option; mimalloc reads options atomically and allows setting
        // them at any time.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
    x402_probe::cmd::cli::main(None)
}
