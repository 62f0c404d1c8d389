//! `x402-probe-lab`: the `x402-probe` commands with the embedded lab behind `demo`, `simulate` and
//! `daemon --lab`. The lab (anvil, the token, honest and dishonest facilitators and servers, the
//! simulated population) is linked into this binary alone, never into the service build.

mod daemon;
mod demo;
mod simulate;
mod vantages;

use anyhow::Result;
use x402_probe::cmd::cli::LabCommands;
use x402_probe::cmd::{daemon as daemon_cmd, demo as demo_cmd, simulate as simulate_cmd};

struct EmbeddedLab;

impl LabCommands for EmbeddedLab {
    fn demo(&self, args: demo_cmd::Args) -> Result<i32> {
        demo::run(args)
    }

    fn simulate(&self, args: simulate_cmd::Args) -> Result<i32> {
        simulate::run(args)
    }

    fn daemon(&self, args: daemon_cmd::Args) -> Result<i32> {
        match args.vantages {
            Some(n) => vantages::run(n, args.days.unwrap_or(1), args.state_dir),
            None => daemon::run(args.days, args.state_dir),
        }
    }
}

fn main() {
    x402_probe::cmd::cli::main(Some(&EmbeddedLab))
}
