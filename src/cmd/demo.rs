//! `x402-probe demo`.

/// Options of `x402-probe demo`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`demo` is not built yet")
}
