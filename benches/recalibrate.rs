//! The recalibration's cost at the size: 10,000 subjects with 60 days of daily scores
//! (`RECALIBRATE_BENCH_SUBJECTS` and `RECALIBRATE_BENCH_DAYS` change it). The store is built by
//! replicating the real scorer's documents of a seeded population under other subject ids (the
//! documents are what is read and parsed; their subject inside is not looked at).
//!
//! Printed: the baseline (reading and parsing the same rows into the table, in this process, no
//! fitting), the whole job (the `x402-probe recalibrate` binary as a child process: reading,
//! fitting, writing the outputs) with its peak memory from the kernel, and their ratio; and whether
//! the bound (5 minutes) is met. Nothing is timed against a fixed number but that bound.

#[path = "../tests/recalibrate_support/mod.rs"]
#[allow(dead_code)]
mod recalibrate_support;

use std::path::Path;
use std::time::Instant;

use recalibrate_support::*;
use x402_probe::calibrate::labels::{FORMAT, LabelSource, LabelsDocument, SubjectLabels};
use x402_probe::calibrate::read::{Labels, read_table};
use x402_probe::evidence::run::Provenance;
use x402_probe::ledger::record::{Record, ScoreRecord};
use x402_probe::rubric::Rubric;
use x402_probe::store::sqlite::{STORE_FILE, SqliteStore};
use x402_probe::store::{Index, NewEntry, ScoreRow, Store, SubjectRow};

/// Distinct generated subjects whose documents are replicated.
const BASE: u32 = 40;

fn env_number(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Exit code, wall time (s) and peak resident memory (KiB) of a child process run to its end (its
/// output goes to ours).
// The child is reaped by wait4, which also reports its peak memory; `Child::wait` would not.
#[allow(clippy::zombie_processes)]
fn run_measured(cmd: &mut std::process::Command) -> (i32, f64, i64) {
    let start = Instant::now();
    let child = cmd.spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data, for which zeroed memory is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for the child we spawned, with valid pointers to our own locals.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let elapsed = start.elapsed().as_secs_f64();
    assert_eq!(waited, pid, "wait4");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, elapsed, usage.ru_maxrss)
}

fn main() {
    let subjects = env_number("RECALIBRATE_BENCH_SUBJECTS", 10_000);
    let days = i64::from(env_number("RECALIBRATE_BENCH_DAYS", 60));
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("recalibrate-bench");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let rubric = Rubric::embedded_default();

    // The base documents, from the real scorer.
    let t = Instant::now();
    let base_state = root.join("base");
    let base = SqliteStore::open(&base_state).unwrap();
    for i in 0..BASE {
        score_subject(&base, &rubric, &url("b", i), i, days);
    }
    let mut documents: Vec<Vec<ScoreRow>> = Vec::new();
    for i in 0..BASE {
        documents.push(base.daily_scores(&url("b", i)).unwrap());
    }
    drop(base);
    eprintln!(
        "scored {BASE} subjects x {days} days in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    // The store: each subject a copy of a base subject's rows, one transaction per 100 subjects.
    let t = Instant::now();
    let state = root.join("state");
    let store = SqliteStore::open(&state).unwrap();
    let ids: Vec<String> = (0..subjects).map(|i| url("s", i)).collect();
    let rows: Vec<SubjectRow> = ids
        .iter()
        .map(|u| SubjectRow::new_active(u.clone(), "data".into(), "config".into(), START_MS))
        .collect();
    store.put_subjects(&rows).unwrap();
    let mut bytes_stored = 0usize;
    for chunk in ids.chunks(100).enumerate() {
        let (c, chunk) = chunk;
        let mut entries = Vec::new();
        for (k, id) in chunk.iter().enumerate() {
            let source = &documents[(c * 100 + k) % BASE as usize];
            for row in source {
                bytes_stored += row.document.len();
                let row = ScoreRow {
                    subject: id.clone(),
                    ..row.clone()
                };
                let record = Record::Score(ScoreRecord {
                    subject: id.clone(),
                    as_of_ms: row.as_of_ms,
                    through_seq: 0,
                    horizon_days: 90,
                    rubric_sha256: rubric.sha256().to_string(),
                    inputs_sha256: "0".repeat(64),
                    document_sha256: "0".repeat(64),
                    score: 0.0,
                    capped_score: 0.0,
                    band: [0.0, 0.0],
                    grade: None,
                    verdict: x402_probe::rubric::Verdict::Ok,
                    population_sha256: None,
                    method: Default::default(),
                    read: None,
                });
                entries.push(NewEntry {
                    at_ms: row.as_of_ms,
                    record: record.into(),
                    index: Some(Box::new(move |seq| Index {
                        score: Some(ScoreRow { seq, ..row }),
                        ..Index::default()
                    })),
                });
            }
        }
        store.append(entries).unwrap();
    }
    drop(store);
    let labels: Vec<SubjectLabels> = ids
        .iter()
        .enumerate()
        .map(|(k, id)| {
            let i = k as u32 % BASE;
            labels_for(i, &truth(i), id.clone(), days)
        })
        .collect();
    let labels_path = root.join("labels.json");
    let doc = LabelsDocument {
        format: FORMAT.into(),
        provenance: Provenance::SyntheticFixture,
        source: LabelSource::Simulator {
            seed: 0,
            population: subjects,
        },
        horizon_days: 14,
        subjects: {
            let mut l = labels;
            l.sort_by(|a, b| a.subject.cmp(&b.subject));
            l
        },
    };
    std::fs::write(&labels_path, doc.to_bytes().unwrap()).unwrap();
    drop(doc);
    eprintln!(
        "built the store: {subjects} subjects x {days} days, {:.0} MB of documents, in {:.1} s",
        bytes_stored as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );

    // Baseline: read and parse the same rows into the table (no labels, no fitting).
    let t = Instant::now();
    let store = SqliteStore::open_read_only(&state.join(STORE_FILE)).unwrap();
    let (table, _) = read_table(&store, &rubric, Labels::Ledger, None, 14).unwrap();
    let baseline = t.elapsed().as_secs_f64();
    let rows = table.rows.len();
    drop(table);
    drop(store);

    // The whole job, as the timer runs it.
    let out = root.join("out");
    let (code, full, peak_kib) = run_measured(
        std::process::Command::new(env!("CARGO_BIN_EXE_x402-probe"))
            .arg("recalibrate")
            .arg("--state")
            .arg(&state)
            .arg("--labels")
            .arg(&labels_path)
            .arg("--out")
            .arg(&out),
    );
    assert_eq!(code, 0, "recalibrate exited {code}");
    println!("recalibrate: {subjects} subjects x {days} days = {rows} daily score rows");
    println!("  baseline (read + parse into the table, in process): {baseline:.2} s");
    println!("  recalibrate (binary: read, labels, fit, figures, outputs): {full:.2} s");
    println!("  ratio to baseline: {:.2}x", full / baseline);
    println!(
        "  peak memory of the job: {:.0} MiB ({:.0} bytes per row)",
        peak_kib as f64 / 1024.0,
        peak_kib as f64 * 1024.0 / rows as f64
    );
    println!(
        "  goal: at most 300 s: {} ({full:.0} s)",
        if full <= 300.0 { "met" } else { "NOT MET" }
    );
    let _ = std::fs::remove_dir_all(&root);
}
