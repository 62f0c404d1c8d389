use clap::{Parser, Subcommand};
use x402_probe::cmd;

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
    Probe(Box<cmd::probe::Args>),
    /// Print the definition of one rubric check (e.g. `explain R3`).
    Explain(cmd::explain::Args),
    /// Score a subject from an inputs document under a rubric.
    Score(cmd::score::Args),
    /// Recompute stored score documents and fail on any byte that differs.
    Recompute(cmd::recompute::Args),
    /// Bring the local lab up, probe and score every lab endpoint, print one line each, shut down.
    Demo(cmd::demo::Args),
    /// Run the daemon: probe the configured and discovered subjects on schedule, keep the ledger,
    /// score from history, until SIGTERM.
    Daemon(cmd::daemon::Args),
    /// Verify or export the ledger, or make a reporter key.
    Ledger(cmd::ledger::Args),
    /// Declare a window in which our own vantage was out.
    Outage(cmd::outage::Args),
    /// Check a signed score document (from the API) offline against the reporter's public key.
    VerifyScore(cmd::verify_score::Args),
    /// Print the running daemon's status (subjects by verdict, next runs, budget, outages).
    Status(cmd::status::Args),
    /// Fit the rubric's curves, score-to-failure mapping and grades against the 14 days after
    /// each daily score; write a proposal and a report (exit 0 proposal, 3 nothing to do, 4
    /// refused).
    Recalibrate(cmd::recalibrate::Args),
    /// Run the daemon on a simulated clock against a seeded population of lab endpoints with
    /// hidden truths; write its state, the labels and the truth.
    Simulate(cmd::simulate::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Probe(a) => cmd::probe::run(*a),
        Command::Explain(a) => cmd::explain::run(a),
        Command::Score(a) => cmd::score::run(a),
        Command::Recompute(a) => cmd::recompute::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Daemon(a) => cmd::daemon::run(a),
        Command::Ledger(a) => cmd::ledger::run(a),
        Command::Outage(a) => cmd::outage::run(a),
        Command::VerifyScore(a) => cmd::verify_score::run(a),
        Command::Status(a) => cmd::status::run(a),
        Command::Recalibrate(a) => cmd::recalibrate::run(a),
        Command::Simulate(a) => cmd::simulate::run(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("x402-probe: {e:#}");
            std::process::exit(2)
        }
    }
}
