//! `x402-probe recompute`: recompute stored score documents from their embedded inputs and fail
//! loudly on any byte that differs.

use crate::rubric::Rubric;
use crate::score::{Recomputed, recompute};
use anyhow::Context;
use std::path::{Path, PathBuf};

/// Options of `x402-probe recompute`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score documents, or directories searched recursively for `*.json`.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Extra rubric files; a document names its rubric by SHA-256 (the embedded default is
    /// always available).
    #[arg(long)]
    pub rubric: Vec<PathBuf>,
}

/// Exit 0 when every document recomputes to identical bytes, 1 when any differs or cannot be
/// recomputed (each named with the first differing byte and field).
pub fn run(args: Args) -> anyhow::Result<i32> {
    let mut rubrics = vec![Rubric::embedded_default()];
    for p in &args.rubric {
        rubrics.push(super::score::load_rubric(Some(p))?);
    }
    let mut files = Vec::new();
    for p in &args.paths {
        collect(p, &mut files)?;
    }
    if files.is_empty() {
        anyhow::bail!("no score documents found");
    }
    let mut failed = 0usize;
    for file in &files {
        let stored = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        match recompute(&stored, &rubrics) {
            Ok(Recomputed::Identical) => println!("ok {}", file.display()),
            Ok(Recomputed::Differs {
                byte,
                field,
                stored,
                recomputed,
            }) => {
                failed += 1;
                eprintln!(
                    "DIFFERS {}: first differing byte at offset {byte}, field {field}: stored {stored}, recomputed {recomputed}",
                    file.display()
                );
            }
            Err(e) => {
                failed += 1;
                eprintln!("FAILED {}: {e}", file.display());
            }
        }
    }
    if failed > 0 {
        eprintln!(
            "{failed} of {} score documents did not recompute",
            files.len()
        );
        return Ok(1);
    }
    println!("{} score documents recomputed byte for byte", files.len());
    Ok(0)
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("listing {}", path.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        entries.sort();
        for e in entries {
            if e.is_dir() || e.extension().is_some_and(|x| x == "json") {
                collect(&e, out)?;
            }
        }
    } else {
        out.push(path.to_path_buf());
    }
    Ok(())
}
