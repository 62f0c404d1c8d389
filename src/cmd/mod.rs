//! One file per subcommand. Each exposes `Args` (clap) and `run(args) -> anyhow::Result<i32>`,
//! the process exit code.
