//! `x402-probe probe`.

/// Options of `x402-probe probe`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`probe` is not built yet")
}
