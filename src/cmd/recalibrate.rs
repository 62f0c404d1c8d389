//! `x402-probe recalibrate`: the nightly recalibration job. Reads the daemon's store read-only
//! (safe next to the running daemon), the labels (a labels file, or the daemon's own paid calls),
//! fits what the rubric calibrates and writes a proposal and a report; never changes the live
//! rubric. `--accept` checks a proposal and prints the configuration line that adopts it.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::calibrate::job::{self, Decision, Options};
use crate::calibrate::labels::{DEFAULT_HORIZON_DAYS, LabelSource, LabelsDocument};
use crate::calibrate::read::{Labels, read_table_reporting};
use crate::calibrate::table::day_number;
use crate::files::{self, caps};
use crate::progress::{Counted, Mode};
use crate::rubric::{EMBEDDED_DEFAULT, Rubric};
use crate::store::sqlite::{STORE_FILE, SqliteStore};

/// A proposal was written (with its report).
pub const EXIT_PROPOSAL: i32 = 0;
/// Nothing to do: the live rubric is frozen; the report shows drift only.
pub const EXIT_NOTHING_TO_DO: i32 = 3;
/// Refused: not enough labelled subjects (or the fit period lacks an outcome); nothing written.
pub const EXIT_REFUSED: i32 = 4;

/// A labels file (600,000 subject-days at about 100 bytes each is 60 MB).
const LABELS_CAP: u64 = 1024 * 1024 * 1024;

/// Options of `x402-probe recalibrate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The daemon's state directory (its `ledger.sqlite` is opened read-only).
    #[arg(long, value_name = "DIR", required_unless_present = "accept")]
    pub state: Option<PathBuf>,
    /// Where proposal.json, report.json and report.html are written (atomically).
    #[arg(long, value_name = "DIR", required_unless_present = "accept")]
    pub out: Option<PathBuf>,
    /// A labels document (`x402-probe.labels/1`, e.g. the simulator's); without it the labels
    /// are the daemon's own paid calls in the 14 days after each daily score.
    #[arg(long, value_name = "FILE")]
    pub labels: Option<PathBuf>,
    /// The live rubric file (what the daemon's configuration names with `[probe] rubric = ...`);
    /// default: the embedded one, as the daemon uses without that line.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub rubric: Option<PathBuf>,
    /// The daemon's configuration: the live rubric is the one its `[probe] rubric` names (the
    /// embedded one without it). Only read.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Read the store as of the end of this UTC day (YYYY-MM-DD); default: its latest daily score.
    #[arg(long, value_name = "DAY")]
    pub as_of: Option<String>,
    /// Propose the frozen version (e.g. 1.0.0) instead of the next draft.
    #[arg(long)]
    pub freeze: bool,
    /// Check a proposal file against the live rubric and print the configuration line that
    /// adopts it (nothing is installed or changed).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["state", "out", "labels", "as_of", "freeze"])]
    pub accept: Option<PathBuf>,
    /// No progress on stderr (subjects read of total, rate, time left).
    #[arg(long)]
    pub quiet: bool,
}

/// Exit codes: 0 proposal written, 3 nothing to do (frozen rubric: drift report written), 4
/// refused (too few labelled subjects: nothing written), 2 on an error.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let rubric_path = match &args.config {
        Some(config) => crate::config::DaemonConfig::read(config)?.probe.rubric,
        None => args.rubric.clone(),
    };
    let live_bytes = match &rubric_path {
        None => EMBEDDED_DEFAULT.to_vec(),
        Some(p) => files::read_regular(p, caps::RUBRIC, "a rubric file")
            .with_context(|| format!("the live rubric {}", p.display()))?,
    };
    let live = Rubric::from_bytes(&live_bytes).context("--rubric")?;
    if let Some(path) = &args.accept {
        return accept(path, &live);
    }
    let (Some(state), Some(out)) = (&args.state, &args.out) else {
        bail!("--state and --out are required");
    };
    let as_of = match &args.as_of {
        None => None,
        Some(text) => Some(
            day_number(text)
                .with_context(|| format!("--as-of {text:?} is not a day (YYYY-MM-DD)"))?,
        ),
    };
    let labels_doc = match &args.labels {
        None => None,
        Some(p) => {
            let bytes = files::read_regular(p, LABELS_CAP, "a labels file").context("--labels")?;
            Some(LabelsDocument::from_slice(&bytes).with_context(|| format!("{}", p.display()))?)
        }
    };
    let (labels, horizon, described) = match &labels_doc {
        Some(doc) => (
            Labels::File(doc),
            doc.horizon_days,
            match &doc.source {
                LabelSource::Simulator { seed, population } => format!(
                    "simulator (seed {seed}, population {population}, provenance {})",
                    doc.provenance.as_str()
                ),
                LabelSource::Ledger { through_seq } => {
                    format!("labels file from a ledger through entry {through_seq}")
                }
            },
        ),
        None => (
            Labels::Ledger,
            DEFAULT_HORIZON_DAYS,
            "the daemon's own paid calls (R4, R5, H5, H6, H7, H8)".to_string(),
        ),
    };
    let path = state.join(STORE_FILE);
    files::open_regular(&path, u64::MAX, "a ledger")
        .with_context(|| format!("no ledger in {}", state.display()))?;
    let store = SqliteStore::open_read_only(&path)?;
    let mut progress = Counted::new("subjects read", Mode::for_stderr(args.quiet));
    let read = read_table_reporting(&store, &live, labels, as_of, horizon, &mut |done, total| {
        progress.at(done, total)
    });
    progress.finish();
    let (table, summary) = read?;
    drop(store);

    let mut opts = Options::new(described, horizon);
    opts.freeze = args.freeze;
    let outcome = job::run(&table, &summary, &live, &live_bytes, &opts)?;
    let mut stdout = std::io::stdout().lock();
    if let Decision::Refused(why) = &outcome.decision {
        writeln!(stdout, "refused: {why}")?;
        return Ok(EXIT_REFUSED);
    }
    let report = outcome.report.as_ref().context("a report")?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    if let Some(proposal) = &outcome.proposal {
        write_atomic(&out.join("proposal.json"), proposal)?;
    }
    let mut json = crate::canonical::canonical_bytes_of(report)?;
    json.push(b'\n');
    write_atomic(&out.join("report.json"), &json)?;
    write_atomic(
        &out.join("report.html"),
        crate::calibrate::html::render(report).as_bytes(),
    )?;
    for g in &report.goals {
        let met = match g.met {
            Some(true) => "met",
            Some(false) => "NOT MET",
            None => "reported",
        };
        let measured = g.measured.map_or("n/a".to_string(), |m| m.to_string());
        writeln!(stdout, "{met:>9}  {measured:>8}  {} ({})", g.goal, g.target)?;
        if let (Some(by), Some(why)) = (g.shortfall, &g.why) {
            writeln!(stdout, "           missed by {by}: {why}")?;
        }
    }
    let show = |x: Option<f64>| x.map_or("n/a".to_string(), |x| x.to_string());
    for (name, e) in [
        ("held-out period (later days)", &report.held_out_period),
        ("held-out subjects", &report.held_out_subjects),
    ] {
        writeln!(
            stdout,
            "{name}: {} subject-days, Brier {} (draft, 1 - score/100) / {} (draft, isotonic) -> {} \
             (improvement {}), AUC {} -> {}, ECE {}",
            e.rows,
            show(e.brier_draft_linear),
            show(e.brier_draft_isotonic),
            show(e.brier_proposal),
            show(e.improvement_vs_linear),
            show(e.auc_draft),
            show(e.auc_proposal),
            show(e.ece_proposal),
        )?;
    }
    for (name, v) in [
        ("as published", Some(&report.verdicts)),
        ("under the proposal", report.verdicts_proposal.as_ref()),
    ] {
        let Some(v) = v else { continue };
        writeln!(
            stdout,
            "verdicts {name}: {} avoid subject-days (share that fail {}), {} ok (share that do \
             not fail {}), share of {} failing subjects unverified after 7 days {}",
            v.avoid_rows,
            show(v.avoid_that_fail),
            v.ok_rows,
            show(v.ok_that_do_not_fail),
            v.failing_subjects,
            show(v.failing_unverified_after_7_days),
        )?;
    }
    for e in report.fitted.iter().flat_map(|f| &f.gates) {
        let decision = if e.proposed.is_some() {
            "gate proposed"
        } else {
            "no gate"
        };
        writeln!(stdout, "{} ({}): {decision}: {}", e.check, e.flag, e.why)?;
    }
    let c = &report.counts;
    writeln!(
        stdout,
        "{} subjects followed up, {} labelled subject-days from day 14; {} documents under \
         another major version left out; fast re-scoring mismatches {} of {}",
        c.subjects_followed_up,
        c.eligible_rows,
        c.other_major_documents,
        c.rescoring_mismatches,
        c.rescored_rows_checked
    )?;
    match (&outcome.decision, &report.proposal) {
        (Decision::Proposal, Some(p)) => {
            writeln!(
                stdout,
                "proposal {} (sha256 {}) written to {}; the live rubric is unchanged \
                 (adopt it with `x402-probe recalibrate --accept {}`)",
                p.version,
                p.sha256,
                out.join("proposal.json").display(),
                out.join("proposal.json").display()
            )?;
            Ok(EXIT_PROPOSAL)
        }
        _ => {
            writeln!(
                stdout,
                "the live rubric {} is frozen: drift report only, nothing proposed",
                live.version
            )?;
            Ok(EXIT_NOTHING_TO_DO)
        }
    }
}

/// Checks a proposal: a valid rubric of the live one's id, a newer file, and prints the line.
fn accept(path: &Path, live: &Rubric) -> anyhow::Result<i32> {
    let bytes = files::read_regular(path, caps::RUBRIC, "a rubric file").context("--accept")?;
    let proposal = Rubric::from_bytes(&bytes).with_context(|| format!("{}", path.display()))?;
    if proposal.id != live.id {
        bail!(
            "{} is rubric {:?}, the live rubric is {:?}",
            path.display(),
            proposal.id,
            live.id
        );
    }
    if proposal.sha256() == live.sha256() {
        bail!("{} is the live rubric already", path.display());
    }
    let absolute = std::fs::canonicalize(path).with_context(|| format!("{}", path.display()))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "{} {} (sha256 {}) is valid; the live rubric is {} (sha256 {}).",
        proposal.id,
        proposal.version,
        proposal.sha256(),
        live.version,
        live.sha256()
    )?;
    if proposal.major_version() != live.major_version() {
        writeln!(
            stdout,
            "note: a new major version: its scores are never compared with the live ones"
        )?;
    }
    writeln!(
        stdout,
        "To adopt it, set this line in the [probe] section of the daemon's configuration and \
         restart the daemon:"
    )?;
    writeln!(
        stdout,
        "rubric = {}",
        toml::Value::String(absolute.display().to_string())
    )?;
    Ok(0)
}

/// Writes a file whole or not at all: a temporary file in the same directory, synced, renamed
/// over the name, the directory synced.
fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path.parent().context("an output file has a directory")?;
    let name = path
        .file_name()
        .context("an output file has a name")?
        .to_string_lossy();
    let temp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&temp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&temp, path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        anyhow::anyhow!("writing {}: {e}", path.display())
    })
}
