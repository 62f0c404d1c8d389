//! The command line, shared by the two binaries: `x402-probe` (the service build, `src/main.rs`)
//! and `x402-probe-lab` (crate `probe-lab/`), the same commands with the embedded lab's behind
//! `demo`, `simulate` and `daemon --lab`. The lab (anvil launcher, dishonest facilitators and
//! servers, the simulated population) is linked into the second alone: the service build neither
//! contains it nor has a code path that starts it, and answers those commands with how to get them.

use anyhow::Result;
use clap::{Parser, Subcommand};

use super::{
    daemon, demo, explain, ledger, outage, preflight, probe, recalibrate, recompute, score,
    simulate, status, store, verify_score, verify_snapshot,
};

/// The commands that run the embedded lab, supplied by the lab's binary.
pub trait LabCommands {
    /// `demo`: bring the lab up, probe, pay and score every lab endpoint, print one line each.
    fn demo(&self, args: demo::Args) -> Result<i32>;
    /// `simulate`: the real daemon on a simulated clock against a seeded population.
    fn simulate(&self, args: simulate::Args) -> Result<i32>;
    /// `daemon --lab [--days N [--vantages N]] [--state-dir DIR]`: the daemon (or several, as
    /// vantages on one PostgreSQL) against the lab's scenarios.
    fn daemon(&self, args: daemon::Args) -> Result<i32>;
}

/// Tells paying AI agents which x402 pay-per-call APIs they can trust, with evidence.
#[derive(Parser)]
#[command(name = "x402-probe", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Probe one URL now and print a report (free checks; paid ones only with --pay).
    Probe(Box<probe::Args>),
    /// Print the definition of one rubric check (e.g. `explain R3`).
    Explain(explain::Args),
    /// Score a subject from an inputs document under a rubric.
    Score(score::Args),
    /// Recompute stored score documents and fail on any byte that differs.
    Recompute(recompute::Args),
    /// Bring the local lab up, probe and score every lab endpoint, print one line each, shut down
    /// (the lab's binary, `x402-probe-lab`).
    Demo(demo::Args),
    /// Run the daemon: probe the configured and discovered subjects on schedule, keep the ledger,
    /// score from history, until SIGTERM.
    Daemon(daemon::Args),
    /// Verify or export the ledger, or make a reporter key.
    Ledger(ledger::Args),
    /// Move a ledger between stores (`store copy`: SQLite into PostgreSQL).
    Store(store::Args),
    /// Declare a window in which our own vantage was out.
    Outage(outage::Args),
    /// Check a signed score document (from the API) offline against the reporter's public key.
    VerifyScore(verify_score::Args),
    /// Check a signed daily snapshot (from the API) offline against the reporter's public key.
    VerifySnapshot(verify_snapshot::Args),
    /// Print the running daemon's status (subjects by verdict, next runs, budget, outages).
    Status(status::Args),
    /// Before paying a URL, ask the running daemon: go, caution, avoid or unrated, and with the
    /// PaymentRequired received, which accepts entry is safe to pay (exit 0 go, 3 caution, 4
    /// avoid, 5 unrated, 1 no answer).
    Preflight(preflight::Args),
    /// Fit the rubric's curves, score-to-failure mapping and grades against the 14 days after
    /// each daily score; write a proposal and a report (exit 0 proposal, 3 nothing to do, 4
    /// refused).
    Recalibrate(recalibrate::Args),
    /// Run the daemon on a simulated clock against a seeded population of lab endpoints with
    /// hidden truths; write its state, the labels and the truth (the lab's binary,
    /// `x402-probe-lab`).
    Simulate(simulate::Args),
}

/// Parses the command line, runs the command and exits with its code (2 on an error, printed).
/// `lab` is `None` in the service build.
pub fn main(lab: Option<&dyn LabCommands>) -> ! {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Probe(a) => probe::run(*a),
        Command::Explain(a) => explain::run(a),
        Command::Score(a) => score::run(a),
        Command::Recompute(a) => recompute::run(a),
        Command::Demo(a) => with_lab(lab, "demo").and_then(|lab| lab.demo(a)),
        Command::Daemon(a) => match a.config {
            Some(config) => daemon::run(config),
            None => with_lab(lab, "daemon --lab").and_then(|lab| lab.daemon(a)),
        },
        Command::Ledger(a) => ledger::run(a),
        Command::Store(a) => store::run(a),
        Command::Outage(a) => outage::run(a),
        Command::VerifyScore(a) => verify_score::run(a),
        Command::VerifySnapshot(a) => verify_snapshot::run(a),
        Command::Status(a) => status::run(a),
        Command::Preflight(a) => preflight::run(a),
        Command::Recalibrate(a) => recalibrate::run(a),
        Command::Simulate(a) => with_lab(lab, "simulate").and_then(|lab| lab.simulate(a)),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("x402-probe: {e:#}");
            std::process::exit(2)
        }
    }
}

/// The lab's commands, or the service build's refusal naming where they are.
fn with_lab<'a>(lab: Option<&'a dyn LabCommands>, command: &str) -> Result<&'a dyn LabCommands> {
    lab.ok_or_else(|| {
        anyhow::anyhow!(
            "`{command}` runs the embedded lab, which is not in the service build; \
             the lab's binary has it: `cargo run --release -p x402-probe-lab -- {command}` \
             (README, \"Quick start\")"
        )
    })
}
