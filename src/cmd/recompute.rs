//! `x402-probe recompute`: recompute stored score documents from their embedded inputs and fail
//! loudly on any byte that differs.

use crate::files::{self, caps};
use crate::progress::{Counted, Mode, Progress};
use crate::rubric::Rubric;
use crate::score::{Recomputed, recompute};
use crate::store::{SqliteStore, Store};
use anyhow::Context;
use std::path::{Path, PathBuf};

/// Options of `x402-probe recompute`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score documents, or directories searched recursively for `*.json`.
    #[arg(required_unless_present_any = ["ledger", "postgres"])]
    pub paths: Vec<PathBuf>,
    /// Re-derive every score the daemon published from the ledger in this state directory alone,
    /// and compare each byte for byte.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["paths", "postgres"])]
    pub ledger: Option<PathBuf>,
    /// As `--ledger`, from a vantage's store in PostgreSQL.
    #[command(flatten)]
    pub store: crate::cmd::ledger::PostgresLog,
    /// Extra rubric files; a document names its rubric by SHA-256 (the embedded default is
    /// always available).
    #[arg(long)]
    pub rubric: Vec<PathBuf>,
    /// No progress on stderr (entries or documents done of total, rate, time left).
    #[arg(long)]
    pub quiet: bool,
}

/// A store opened and verified, or why not.
type Opened = Result<Box<dyn Store>, crate::store::StoreError>;

/// Exit 0 when every document recomputes to identical bytes, 1 when any differs or cannot be
/// recomputed (each named with the first differing byte and field); with `--ledger`, 1 also when
/// the ledger does not verify (or cannot be read) or a derived row differs from its entries.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let mut rubrics = vec![Rubric::embedded_default()];
    for p in &args.rubric {
        rubrics.push(super::score::load_rubric(Some(p))?);
    }
    let mode = Mode::for_stderr(args.quiet);
    // The chain, checkpoints, blobs and score rows first, as `ledger verify` checks them: a score
    // recomputed from a ledger with an entry removed or changed proves nothing. A ledger that
    // cannot be read is broken too (exit 1). A run's results are derived again under the rubric
    // it names.
    let opened: Option<(String, Opened)> = if let Some((shown, log)) = args.store.open() {
        let verified = log.and_then(|log| {
            for rubric in &rubrics {
                log.also_read_rubric(rubric);
            }
            Store::verify(&log, None, true).map(|_| Box::new(log) as Box<dyn Store>)
        });
        Some((shown, verified))
    } else if let Some(dir) = &args.ledger {
        let path = crate::cmd::ledger::ledger_file(dir)?;
        let mut progress = Counted::new("entries verified", mode);
        let verified = SqliteStore::open_read_only(&path).and_then(|store| {
            for rubric in &rubrics {
                store.also_read_rubric(rubric);
            }
            store
                .verify_reporting(None, true, &mut |done, total| progress.at(done, total))
                .map(|_| Box::new(store) as Box<dyn Store>)
        });
        progress.finish();
        Some((path.display().to_string(), verified))
    } else {
        None
    };
    if let Some((shown, verified)) = opened {
        let store = match verified {
            Ok(store) => store,
            Err(e) => {
                eprintln!("x402-probe: ledger {shown} is broken: {e}; nothing recomputed");
                return Ok(1);
            }
        };
        let mut progress = Counted::new("entries recomputed", mode);
        let report = crate::daemon::recompute::recompute_ledger_reporting(
            &*store,
            &rubrics,
            &mut |done, total| progress.at(done, total),
        );
        progress.finish();
        let report = match report {
            Ok(report) => report,
            Err(e) => {
                eprintln!("x402-probe: ledger {shown} is broken: {e}");
                return Ok(1);
            }
        };
        for m in &report.mismatches {
            eprintln!("DIFFERS ledger entry {} ({}): {}", m.seq, m.subject, m.why);
        }
        for m in &report.derived {
            eprintln!(
                "DIFFERS the kept state of {} (ledger entry {}): {}",
                m.subject, m.seq, m.why
            );
        }
        if report.scores == 0 {
            anyhow::bail!("the ledger {shown} holds no published score");
        }
        if !report.mismatches.is_empty() || !report.derived.is_empty() {
            eprintln!(
                "{} of {} published scores did not recompute; {} subjects' kept states differ \
                 from their entries",
                report.mismatches.len(),
                report.scores,
                report.derived.len()
            );
            return Ok(1);
        }
        println!(
            "{} published scores recomputed from the ledger byte for byte; every score row and \
             history row matches its entries",
            report.scores
        );
        return Ok(0);
    }
    let mut files = Vec::new();
    for p in &args.paths {
        collect(p, &mut files)?;
    }
    if files.is_empty() {
        anyhow::bail!("no score documents found");
    }
    let mut failed = 0usize;
    let mut progress = Progress::new(
        "score documents",
        files.len() as u64,
        Mode::for_stderr(args.quiet),
    );
    for file in &files {
        // A FIFO, a device or an oversized file among them is a usage error naming it (exit 2).
        let stored = files::read_regular(file, caps::SCORE_DOCUMENT, "a score document")?;
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
        progress.advance(1);
    }
    progress.finish();
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

/// How deep `recompute` descends into directories.
const MAX_DEPTH: usize = 32;

/// The score documents under `path`: the path itself when it is not a directory, else every
/// `*.json` below it, sorted. Symbolic links to directories are not followed (a link cycle must
/// not recurse forever); every file found is opened through `crate::files`, which refuses FIFOs,
/// devices and oversized files by name.
fn collect(path: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    collect_at(path, out, 0)
}

fn collect_at(path: &Path, out: &mut Vec<PathBuf>, depth: usize) -> anyhow::Result<()> {
    // The path given (or a real subdirectory found below it); links below it are not followed.
    let is_dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
    if !is_dir {
        out.push(path.to_path_buf());
        return Ok(());
    }
    if depth >= MAX_DEPTH {
        anyhow::bail!(
            "{}: more than {MAX_DEPTH} directories deep; refused",
            path.display()
        );
    }
    let mut entries: Vec<(PathBuf, bool)> = std::fs::read_dir(path)
        .with_context(|| format!("listing {}", path.display()))?
        .map(|e| {
            e.and_then(|e| {
                let is_dir = e.file_type()?.is_dir();
                Ok((e.path(), is_dir))
            })
        })
        .collect::<Result<_, _>>()
        .with_context(|| format!("listing {}", path.display()))?;
    entries.sort();
    for (entry, is_dir) in entries {
        if is_dir {
            collect_at(&entry, out, depth + 1)?;
        } else if entry.extension().is_some_and(|x| x == "json") {
            out.push(entry);
        }
    }
    Ok(())
}
