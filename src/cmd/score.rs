//! `x402-probe score`: score an inputs document and print the score document.

use crate::files::{self, caps};
use crate::rubric::Rubric;
use anyhow::Context;
use std::io::Write;
use std::path::PathBuf;

/// Options of `x402-probe score`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The inputs document (JSON; see rubrics/README.md).
    #[arg(long)]
    pub inputs: PathBuf,
    /// Score under this rubric file instead of the embedded default.
    #[arg(long)]
    pub rubric: Option<PathBuf>,
}

/// Prints the score document as RFC 8785 canonical JSON and a newline (the bytes `recompute`
/// compares); pipe it through a JSON pretty-printer to read it.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let rubric = load_rubric(args.rubric.as_deref())?;
    let bytes = files::read_regular(&args.inputs, caps::SCORE_DOCUMENT, "an inputs document")
        .context("--inputs")?;
    let document = crate::score::score_json(&rubric, &bytes)
        .with_context(|| format!("scoring {}", args.inputs.display()))?;
    let out = document.to_bytes()?;
    std::io::stdout().lock().write_all(&out)?;
    Ok(0)
}

/// The embedded rubric, or a rubric file read bounded and without blocking.
pub(crate) fn load_rubric(path: Option<&std::path::Path>) -> anyhow::Result<Rubric> {
    match path {
        None => Ok(Rubric::embedded_default()),
        Some(p) => Ok(crate::config::read_rubric(p).context("--rubric")?),
    }
}
