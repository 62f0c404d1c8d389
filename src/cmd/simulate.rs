//! The options of `simulate`, the real daemon against a simulated population (issue 11). The
//! command itself is the lab's binary's (`x402-probe-lab simulate`, crate `probe-lab/`): the
//! service build has no lab.

use std::path::PathBuf;

/// Options of `x402-probe simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to write: DIR/state (the daemon's state directory), DIR/labels.json, DIR/truth.json.
    /// Refused when DIR/state already exists.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// How many endpoints the population holds.
    #[arg(long, default_value_t = 200, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub subjects: u32,
    /// How many simulated days the daemon runs (a label needs a day and the 14 after it).
    #[arg(long, default_value_t = 60, value_name = "D",
          value_parser = clap::value_parser!(u32).range(15..=365))]
    pub days: u32,
    /// The population's seed: the same seed gives the same population and labels.
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub seed: u64,
    /// Serve each truth's latency at this fraction of its size (0 to 1; 0 serves none). The
    /// daemon measures real time and waits for every delay in turn, so full latency costs wall
    /// time; see the README for what was measured.
    #[arg(long, default_value_t = DEFAULT_LATENCY_SCALE, value_name = "X",
          value_parser = latency_scale)]
    pub latency_scale: f64,
    /// Let runs overlap: with runs in flight (no paid call among them) the simulated clock also
    /// jumps to the next due run when it is at most this many seconds ahead, so up to the
    /// daemon's concurrency (8) run at once; a run in flight may see the clock move by that much.
    /// 0 makes every run alone at its instant (the slowest; 0 to 3600).
    #[arg(long, default_value_t = DEFAULT_LOOKAHEAD_SECS, value_name = "SECS",
          value_parser = clap::value_parser!(u32).range(0..=3600))]
    pub lookahead_secs: u32,
    /// No progress on stderr (simulated hours done of total, rate, time left).
    #[arg(long)]
    pub quiet: bool,
}

/// How far ahead the simulated clock may jump with runs in flight, by default (10 minutes: a
/// free run is due every 12 hours, so a run's evidence moves by at most 1.4% of that interval).
pub const DEFAULT_LOOKAHEAD_SECS: u32 = 600;

/// The served fraction of the truth's latency by default.
pub const DEFAULT_LATENCY_SCALE: f64 = 0.01;

fn latency_scale(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("{text:?} is not a number from 0 to 1")),
    }
}
