//! What a daily snapshot costs to make and to hold: each subject's last score entry of the day,
//! its inclusion proof against the latest tree checkpoint and the declaration it rated, read
//! through the store, then the file serialised (`snapshot::make::build`, all but the one
//! signature). The baseline, measured in the same run on the same store just before, reads each
//! subject's last score entry of the day alone: the ratio is what the proofs and declarations
//! add. Then the file's size per subject, plain and gzip.
//!
//!   cargo bench --bench snapshot -- --state DIR --day YYYY-MM-DD [--key FILE]   (a daemon's
//!       state directory, opened read-only; the day must be over at its latest tree checkpoint;
//!       the reporter key, DIR/reporter.key by default)
//!   cargo bench --bench snapshot [-- --subjects N]   (a store of N synthetic subjects made here,
//!       8 scores each over one day, default 2,000)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use x402_probe::canonical::canonical_bytes_of;
use x402_probe::clock::day_of;
use x402_probe::ledger::key::ReporterKey;
use x402_probe::ledger::record::{Record, RecordKind, ScoreRecord};
use x402_probe::rubric::Verdict;
use x402_probe::snapshot::day_end_ms;
use x402_probe::snapshot::make::build;
use x402_probe::store::{NewEntry, SqliteStore, Store, SubjectRow, SubjectState};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let keep = tempfile::tempdir().unwrap();
    let (store, public, day, what) = match arg(&args, "--state") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            let store = SqliteStore::open_read_only(&dir.join("ledger.sqlite"))
                .expect("the state directory's ledger opens read-only");
            let key_file = arg(&args, "--key").map_or(dir.join("reporter.key"), PathBuf::from);
            let key = ReporterKey::from_key_file(&key_file).expect("its key (--key FILE)");
            let day = arg(&args, "--day").expect("--day YYYY-MM-DD with --state");
            (store, key.public_key(), day, dir.display().to_string())
        }
        None => {
            let n: usize = arg(&args, "--subjects").map_or(2_000, |s| s.parse().unwrap());
            let (store, public, day) = synthetic(keep.path(), n);
            (store, public, day, format!("{n} synthetic subjects"))
        }
    };
    let day_end = day_end_ms(&day).expect("a UTC day");
    let subjects: Vec<String> = store
        .subjects()
        .unwrap()
        .into_iter()
        .filter(|s| s.state != SubjectState::Removed)
        .map(|s| s.url)
        .collect();
    println!(
        "snapshot of {day} over {what}: {} subjects, {} entries",
        subjects.len(),
        store.head().unwrap().0
    );

    // Baseline: each subject's last score entry of the day, alone; the second of two passes (the
    // first brings the pages a snapshot reads into the cache, as for the passes after it).
    let mut baseline = 0.0;
    let mut seqs = Vec::new();
    for _ in 0..2 {
        seqs.clear();
        let t = Instant::now();
        for url in &subjects {
            if let Some(e) = store
                .latest_subject_entry_before(url, RecordKind::Score, day_end)
                .unwrap()
            {
                seqs.push((url, e.seq));
            }
        }
        baseline = t.elapsed().as_secs_f64();
    }
    let scored = seqs.len();
    // Where the rest goes: the inclusion proofs alone (one store call per subject).
    let t = Instant::now();
    for (url, seq) in &seqs {
        let bundle = store.inclusion_bundle(url, seq - 1, 1).unwrap();
        assert!(bundle.is_some_and(|b| b.entries.len() == 1));
    }
    let proofs = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let snapshot = build(&store, &public, &day, day_end + HOUR)
        .expect("the snapshot reads")
        .expect("a tree checkpoint after the day's end covers it");
    let bytes = canonical_bytes_of(&snapshot).unwrap();
    let made = t.elapsed().as_secs_f64();
    assert_eq!(snapshot.subjects.len(), scored);

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&bytes).unwrap();
    let gz = gz.finish().unwrap();
    let per = |x: f64| x / scored.max(1) as f64;
    println!(
        "  baseline (score entries alone) {:>8.3} s  {:>7.1} us/subject",
        baseline,
        per(baseline) * 1e6
    );
    println!(
        "  of which the inclusion proofs alone {:>8.3} s  {:>7.1} us/subject",
        proofs,
        per(proofs) * 1e6
    );
    println!(
        "  snapshot (proofs, declarations, JSON) {:>8.3} s  {:>7.1} us/subject  ratio {:.2}",
        made,
        per(made) * 1e6,
        made / baseline
    );
    println!(
        "  file: {} subjects, {:.1} MB ({:.0} B/subject), gzip {:.1} MB ({:.0} B/subject)",
        scored,
        bytes.len() as f64 / 1e6,
        per(bytes.len() as f64),
        gz.len() as f64 / 1e6,
        per(gz.len() as f64)
    );
}

/// A store of `n` subjects scored 8 times each over one day, checkpointed after it.
fn synthetic(dir: &Path, n: usize) -> (SqliteStore, [u8; 32], String) {
    let store = SqliteStore::open(dir).unwrap();
    let key = ReporterKey::generate(&dir.join("reporter.key")).unwrap();
    let day0 = 20_400 * DAY;
    let urls: Vec<String> = (0..n)
        .map(|i| format!("https://s{i}.example/weather"))
        .collect();
    let rows: Vec<SubjectRow> = urls
        .iter()
        .map(|url| SubjectRow {
            url: url.clone(),
            category: "weather".into(),
            source: "config".into(),
            state: SubjectState::Active,
            added_ms: day0,
            next_free_ms: day0,
            next_paid_ms: day0,
            failures: 0,
            last_run_ms: None,
            last_paid_ms: None,
            revision: None,
        })
        .collect();
    store.put_subjects(&rows).unwrap();
    for round in 0..8i64 {
        let at = day0 + round * 3 * HOUR;
        let entries: Vec<NewEntry> = urls
            .iter()
            .enumerate()
            .map(|(i, url)| {
                let points = (i % 100) as f64 + 0.25;
                NewEntry::plain(
                    at + i as i64,
                    Record::Score(ScoreRecord {
                        subject: url.clone(),
                        as_of_ms: at + i as i64,
                        through_seq: 1,
                        horizon_days: 30,
                        rubric_sha256: "ab".repeat(32),
                        inputs_sha256: format!("{:064x}", i),
                        document_sha256: format!("{:064x}", i as i64 * 8 + round),
                        score: points,
                        capped_score: points,
                        band: [points - 4.0, points + 3.0],
                        grade: Some("B".into()),
                        verdict: Verdict::Ok,
                        population_sha256: None,
                        method: x402_probe::score::Method::V3,
                        read: None,
                    }),
                )
            })
            .collect();
        let mut entries = entries;
        while !entries.is_empty() {
            let rest = entries.split_off(entries.len().min(4096));
            store.append(std::mem::replace(&mut entries, rest)).unwrap();
        }
    }
    store.checkpoint(&key, day0 + DAY + HOUR).unwrap();
    (store, key.public_key(), day_of(day0))
}
