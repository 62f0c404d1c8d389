//! `x402-probe recompute`.

/// Options of `x402-probe recompute`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`recompute` is not built yet")
}
