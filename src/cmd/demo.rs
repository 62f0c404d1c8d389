//! The options of `demo`, the main job on the embedded lab. The command itself is the lab's binary's
//! (`x402-probe-lab demo`, crate `probe-lab/`): the service build has no lab.

/// Options of `x402-probe demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only these scenarios (repeatable); all by default.
    #[arg(long = "scenario", value_name = "NAME")]
    pub scenarios: Vec<String>,
    /// Unpaid samples per endpoint, 1-100.
    #[arg(long, default_value_t = crate::config::Samples::new(3).expect("3 is in range"))]
    pub samples: crate::config::Samples,
    /// Free probes only: no paid calls.
    #[arg(long)]
    pub no_pay: bool,
    /// No progress on stderr (free runs and paid calls done of total, rate, time left).
    #[arg(long)]
    pub quiet: bool,
}
