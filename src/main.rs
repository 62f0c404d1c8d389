//! `x402-probe`, the service build: every command but the embedded lab's (those are the lab's
//! binary's, `x402-probe-lab`; `cmd::cli` says where to find them).

fn main() {
    x402_probe::cmd::cli::main(None)
}
