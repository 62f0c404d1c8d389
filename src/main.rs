//! `x402-probe`, the service build: every command but the embedded lab's (those are the lab's
//! binary's, `x402-probe-lab`; `cmd::cli` says where to find them).

/// mimalloc, not glibc's malloc: the daemon's runtime workers and its ledger writer allocate
/// and free from several threads at once, and glibc's arenas spent about a fifth of a sweep's
/// CPU on it (README, "Daemon benchmarks").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    x402_probe::tune_allocator();
    x402_probe::cmd::cli::main(None)
}
