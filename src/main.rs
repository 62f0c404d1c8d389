use clap::{Parser, Subcommand};

/// Tells paying AI agents which x402 pay-per-call APIs they can trust, with evidence.
#[derive(Parser)]
#[command(name = "x402-probe", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {};
    #[allow(unreachable_code)]
    std::process::exit(code)
}
