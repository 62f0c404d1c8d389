//! `x402-probe score`.

/// Options of `x402-probe score`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`score` is not built yet")
}
