//! One file per subcommand. Each exposes `Args` (clap) and `run(args) -> anyhow::Result<i32>`,
//! returning the process exit code.

pub(crate) mod api_client;
pub mod cli;
pub mod daemon;
pub mod demo;
pub mod explain;
pub(crate) mod feedback;
pub mod ledger;
pub mod outage;
pub mod preflight;
pub mod probe;
pub mod recalibrate;
pub mod recompute;
pub mod score;
pub mod service;
pub mod simulate;
pub mod status;
pub mod store;
pub mod verify_score;
pub mod verify_snapshot;
