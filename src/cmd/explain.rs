//! `x402-probe explain`.

/// Options of `x402-probe explain`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`explain` is not built yet")
}
