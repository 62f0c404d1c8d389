//! The ledger's costs, so an operator can size the machine and the disk: appends per second
//! (batched), verification per second (the hash chain alone, and deep), and bytes per run entry
//! and per subject per day at the default cadence, each against a baseline measured in the same
//! run.
//!
//! Goals (issue 9): at least 20,000 entries/s appended in batches; at least 500,000 entries/s
//! verified (the hash chain).
//!
//! - The entries are real: the daemon runs two simulated days against the lab (honest endpoints
//!   over HTTPS, the fixed RPC on the lab chain, the default 5 samples and 3-hour cadence), and
//!   its own run and score entries are taken back from its ledger (bodies restored) as templates.
//! - Appends: `Store::append` of run entries with their index rows as the daemon writes them
//!   (run id, declaration), and of score entries with theirs (the daily score row with its
//!   headline, the subject's state row with the day summary the score changed), in transactions
//!   of 1, 64 and 512 entries, on a fresh store each time. Baseline: plain SQLite inserts of the
//!   very rows that append wrote (entry, blobs, tree nodes, run id, declaration, score row,
//!   state and day rows: the same bytes, same schema, same pragmas, same transactions) without
//!   building them (no serialisation, canonical JSON, hashing, head read or tree edge).
//! - Verification: `Store::verify` chain only (`deep = false`) and deep, over a store of run
//!   entries and a store of score entries. Baseline: SHA-256 of the same bodies, already in
//!   memory.
//! - Bytes: the store file's growth (WAL checkpointed) per appended run entry, and per subject
//!   over the second simulated day of the daemon, with what each table holds: every table the
//!   daemon writes (entries, blobs, tree, declarations, run ids, score rows and their headlines,
//!   the subjects' states and day summaries, checkpoints).
//!
//! Run with `cargo bench --bench ledger` (add `-- --quick` for fewer entries and rounds, `--keep`
//! to keep the daemon's ledger for a look, `--only verify,proofs` for some of the measurements:
//! appends, verify, proofs, bytes; `--kinds run,score`, `--rounds N` (N times the verification's
//! rounds and the proofs' calls) and `--no-deep` to narrow them, e.g. for a profile).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rusqlite::{Connection, params};
use sha2::{Digest, Sha256};

#[path = "support/run_entry.rs"]
mod run_entry;

use x402_lab::dynamic::{LabClock, Timeline};
use x402_lab::{Lab, LabOptions};
use x402_probe::clock::{Clock, ManualClock};
use x402_probe::config::{DaemonConfig, HistoryDaysRange, Range};
use x402_probe::daemon::Daemon;
use x402_probe::daemon::subject_state::SubjectState;
use x402_probe::evidence::run::RunRecord;
use x402_probe::ledger::key::ReporterKey;
use x402_probe::ledger::record::{Record, RecordKind, ScoreRecord};
use x402_probe::rubric::Rubric;
use x402_probe::score::headline::ScoreHeadline;
use x402_probe::store::StateRow;
use x402_probe::store::sqlite::{SCHEMA_SQL, STORE_FILE};
use x402_probe::store::{Index, NewEntry, ScoreRow, SqliteStore, Store};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
/// Honest endpoints the daemon runs over its two simulated days.
const SUBJECTS: usize = 8;
const GOAL_APPEND: f64 = 20_000.0;
const GOAL_VERIFY: f64 = 500_000.0;
const GOAL_PROOFS: f64 = 50_000.0;

struct Sizes {
    quick: bool,
    /// `--no-deep`: the chain-only verification alone (the deep one takes most of the time).
    no_deep: bool,
    /// `--kinds run,score`: the kinds of entries verified (all when not given).
    kinds: Option<Vec<String>>,
    /// `--rounds N`: rounds of the verification's measurements (to profile one).
    rounds: Option<usize>,
}

/// The tables that grow with the ledger's time, not with its subjects (its checkpoints).
const LEDGER_WIDE_TABLES: [&str; 2] = ["checkpoint", "tree_checkpoint"];

/// The value after `--flag`.
fn flag_value(flag: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != flag).nth(1)
}

impl Sizes {
    /// Entries appended per measurement for a batch size.
    fn entries(&self, batch: usize) -> usize {
        let (one, many) = if self.quick {
            (60, 2_048)
        } else {
            (250, 8_192)
        };
        if batch == 1 { one } else { many.max(batch) }
    }
    fn rounds(&self) -> usize {
        self.rounds.unwrap_or(if self.quick { 1 } else { 3 })
    }
    fn verify_runs(&self) -> usize {
        if self.quick { 10_000 } else { 50_000 }
    }
    /// Entries in the store the inclusion proofs are made from.
    fn proof_entries(&self) -> usize {
        if self.quick { 100_000 } else { 1_000_000 }
    }
    fn verify_scores(&self) -> usize {
        if self.quick { 20_000 } else { 200_000 }
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let no_deep = std::env::args().any(|a| a == "--no-deep");
    let sizes = Sizes {
        quick,
        no_deep,
        kinds: flag_value("--kinds").map(|l| l.split(',').map(str::to_string).collect()),
        rounds: flag_value("--rounds").and_then(|n| n.parse().ok()),
    };
    x402_probe::install_crypto_provider();
    let root = tempfile::tempdir().expect("a temporary directory");
    let captured = capture(root.path());
    let rubric = Rubric::embedded_default();

    println!(
        "ledger: entries from the daemon's own ledger after two simulated days of {SUBJECTS} honest lab endpoints"
    );
    println!(
        "  run entry: {} bytes of canonical JSON (format 2: results derived on read, the observation a blob it names)",
        captured.run_body_bytes
    );
    println!(
        "  score entry: its score row's headline {} bytes; the subject's state row {} bytes and the day summary a score rewrites {} bytes",
        captured.score_headline.len(),
        captured.state.body.len(),
        captured
            .state
            .days
            .iter()
            .map(|d| d.body.len())
            .sum::<usize>()
    );
    let o = &captured.observation;
    println!(
        "  its observation blob: {} bytes of JSON naming {} blobs of its own (bodies, header sets, certificate chains); kept as {} bytes (codec {}; zstd without a dictionary {}); with a dictionary trained on the daemon's other {} observations {} bytes",
        o.raw, o.refs, o.kept, o.codec, o.zstd, o.trained_on, o.zstd_dict
    );
    // `--only verify,proofs`: some of the measurements (appends, verify, proofs, bytes).
    let only: Option<Vec<String>> =
        flag_value("--only").map(|list| list.split(',').map(str::to_string).collect());
    let wanted = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|n| n == name));
    if wanted("appends") {
        println!();
        appends(&sizes, root.path(), &captured, &rubric);
    }
    if wanted("verify") {
        println!();
        verification(&sizes, root.path(), &captured, &rubric);
    }
    if wanted("proofs") {
        println!();
        proofs(&sizes, root.path(), &captured);
    }
    if wanted("bytes") {
        println!();
        bytes(root.path(), &captured, &rubric);
    }
    if std::env::args().any(|a| a == "--keep") {
        // For a look at the daemon's own ledger (`daemon/ledger.sqlite`) after the run.
        println!("kept: {}", root.keep().display());
    }
}

// ---------- what the daemon wrote ----------

struct Captured {
    run: RunRecord,
    score: ScoreRecord,
    /// The score's document as kept in the daily score row, and its headline.
    score_document: Vec<u8>,
    score_headline: Vec<u8>,
    /// The state the daemon kept for the score's subject, with only its newest day (what a
    /// score of the day rewrites), and where its window starts.
    state: StateRow,
    run_body_bytes: usize,
    observation: ObservationSizes,
    /// The daemon's store: size after day 1 and after day 2 (WAL checkpointed), and the tables'
    /// contents after each.
    day1: TableBytes,
    day2: TableBytes,
}

/// Two simulated days of the daemon against the lab; its ledger read back.
fn capture(root: &Path) -> Captured {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let state = root.join("daemon");
    let (day1, day2) = rt.block_on(async {
        let mut lab = Lab::start_with(LabOptions {
            scenarios: Some(vec!["honest-v2".into(), "honest-v1".into()]),
            ..LabOptions::default()
        })
        .await
        .expect("the lab starts");
        let now = x402_probe::clock::SystemClock.now_ms();
        let start = now - now.rem_euclid(HOUR);
        let clock = Arc::new(ManualClock::at_ms(start));
        let mut urls: Vec<String> = lab.endpoints.iter().map(|e| e.url.clone()).collect();
        for i in urls.len()..SUBJECTS {
            let c = clock.clone();
            let lab_clock: LabClock = Arc::new(move || c.now_ms());
            let url = lab
                .spawn_variant(
                    "honest-v2",
                    &format!("honest-{i}"),
                    Timeline::default(),
                    lab_clock,
                )
                .await
                .expect("a variant starts");
            urls.push(url);
        }
        let text = daemon_config(&lab, &state, &urls);
        let run_until = |until_ms: i64| {
            let config: DaemonConfig = toml::from_str(&text).expect("the config parses");
            config.validate().expect("the config is valid");
            let clock = clock.clone();
            async move {
                Daemon::run_simulated(config, None, clock, until_ms, 0)
                    .await
                    .expect("the daemon runs");
            }
        };
        run_until(start + DAY).await;
        let day1 = table_bytes(&state.join(STORE_FILE));
        run_until(start + 2 * DAY).await;
        let day2 = table_bytes(&state.join(STORE_FILE));
        drop(lab);
        (day1, day2)
    });

    let store = SqliteStore::open(&state).expect("the daemon's store");
    let honest_v2 = store
        .entries_of_kind(&[RecordKind::Run], 0)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.record {
            Record::Run(r) => Some((e.seq, r)),
            _ => None,
        })
        .last()
        .expect("the daemon recorded runs");
    let (seq, stored_run) = honest_v2;
    let body = scan_body(&store, seq);
    let mut record = Record::Run(stored_run);
    store.restore_bodies(&mut record).expect("bodies restored");
    let Record::Run(run) = record else {
        unreachable!()
    };
    let observation = observation_sizes(&store, &body);
    let score = store
        .entries_of_kind(&[RecordKind::Score], 0)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.record {
            Record::Score(s) => Some(s),
            _ => None,
        })
        .last()
        .expect("the daemon published scores");
    let score_document = store
        .latest_score(&score.subject)
        .unwrap()
        .expect("a daily score row")
        .document;
    let score_headline = ScoreHeadline::of_stored(&score_document)
        .expect("the score row's document reads")
        .to_bytes();
    let mut state = store
        .subject_state(&score.subject)
        .unwrap()
        .expect("the daemon kept the scored subject's state");
    state.days_from = SubjectState::from_row(&state)
        .expect("the kept state reads")
        .window_from;
    let newest = state.days.pop().expect("the state holds a day");
    state.days = vec![newest];
    Captured {
        score_document,
        score_headline,
        state,
        run_body_bytes: body.len(),
        observation,
        run: *run,
        score,
        day1,
        day2,
    }
}

/// What a run's observation blob costs, and what a trained dictionary would make of it.
struct ObservationSizes {
    raw: usize,
    /// As the store keeps it, and its codec.
    kept: usize,
    codec: i64,
    zstd: usize,
    refs: usize,
    trained_on: usize,
    zstd_dict: usize,
}

fn observation_sizes(store: &SqliteStore, body: &[u8]) -> ObservationSizes {
    let bytes_of = |sha: &str| -> Vec<u8> {
        let key: [u8; 32] = hex::decode(sha).unwrap().try_into().unwrap();
        store.blob(&key).unwrap().expect("the observation is kept")
    };
    let sha = observation_ref(body).expect("a run entry names its observation");
    let raw = bytes_of(&sha);
    let count = |needle: &[u8]| raw.windows(needle.len()).filter(|w| *w == needle).count();
    let refs = count(b"\"body_stored_apart\":true")
        + count(b"\"headers_sha256\":\"")
        + count(b"\"chain_sha256\":\"")
        + count(b"\"listing_sha256\":\"");
    // The dictionary is trained on every other observation of the daemon's two days.
    let mut samples = Vec::new();
    store
        .scan(0, &mut |row| {
            if let Some(other) = observation_ref(&row.body)
                && other != sha
            {
                samples.push(other);
            }
            Ok(())
        })
        .unwrap();
    let samples: Vec<Vec<u8>> = samples.iter().map(|s| bytes_of(s)).collect();
    let dict = zstd::dict::from_samples(&samples, 16 * 1024).expect("a dictionary");
    if let Some(path) = std::env::args()
        .skip_while(|a| a != "--write-dictionary")
        .nth(1)
    {
        // The observation dictionary the store embeds (src/ledger/observation.dict).
        std::fs::write(&path, &dict).expect("the dictionary is written");
        println!("  wrote a dictionary of {} bytes to {path}", dict.len());
    }
    let (codec, kept): (i64, i64) = Connection::open(store.path())
        .unwrap()
        .query_row(
            "SELECT codec, LENGTH(bytes) FROM blob WHERE lower(hex(sha256)) = ?1",
            [&sha],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let zstd_dict = zstd::bulk::Compressor::with_dictionary(3, &dict)
        .unwrap()
        .compress(&raw)
        .unwrap()
        .len();
    ObservationSizes {
        kept: kept as usize,
        codec,
        zstd: zstd::bulk::compress(&raw, 3).unwrap().len(),
        raw: raw.len(),
        refs,
        trained_on: samples.len(),
        zstd_dict,
    }
}

fn daemon_config(lab: &Lab, state: &Path, urls: &[String]) -> String {
    let key = state.join("reporter.key");
    std::fs::create_dir_all(state).unwrap();
    ReporterKey::generate(&key).expect("a reporter key");
    // Defaults everywhere (5 samples, the 3-hour cadence, checkpoints every 5 minutes) but the
    // spacing between samples, which only costs wall time in a simulation.
    let mut text = format!(
        r#"
[daemon]
state_dir = "{state}"
reporter_key = {{ key_file = "{key}" }}

[probe]
spacing_ms = 0
allow_private = true
ca_files = ["{ca}"]
rpc = "{rpc}"
assets = ["{token}"]
provenance = "test_harness"
vantage = "lab"

[api]
enabled = false
"#,
        state = state.display(),
        key = key.display(),
        ca = lab.ca_file.display(),
        rpc = lab.rpc_url(),
        token = lab.token.address().to_checksum(None),
    );
    for url in urls {
        text.push_str(&format!(
            "\n[[subject]]\nurl = \"{url}\"\ncategory = \"weather\"\n"
        ));
    }
    text
}

fn scan_body(store: &SqliteStore, seq: u64) -> Vec<u8> {
    let mut body = Vec::new();
    store
        .scan(seq - 1, &mut |row| {
            if row.seq == seq {
                body = row.body;
            }
            Ok(())
        })
        .unwrap();
    body
}

/// What a store file holds, WAL checkpointed first.
#[derive(Debug, Clone, Default)]
struct TableBytes {
    file: u64,
    entries: u64,
    entry_bytes: u64,
    runs: u64,
    scores: u64,
    declared_bytes: u64,
    run_ids: u64,
    blobs: u64,
    blob_bytes: u64,
    score_rows: u64,
    score_row_bytes: u64,
    headline_bytes: u64,
    /// The subjects' folded states (`subject_state`) and their day summaries (`subject_days`).
    state_bytes: u64,
    day_rows: u64,
    day_bytes: u64,
    tree_rows: u64,
    /// The pages the subjects' states and day summaries take (SQLite's `dbstat`, slack
    /// included): the scoring window's cost.
    state_cost: u64,
    /// The pages each table and index takes, by name.
    pages: std::collections::BTreeMap<String, u64>,
}

fn table_bytes(path: &Path) -> TableBytes {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .unwrap();
    let one = |sql: &str| -> u64 {
        conn.query_row(sql, [], |r| r.get::<_, Option<i64>>(0))
            .unwrap()
            .unwrap_or(0) as u64
    };
    TableBytes {
        file: std::fs::metadata(path).unwrap().len(),
        entries: one("SELECT COUNT(*) FROM entry"),
        entry_bytes: one("SELECT SUM(LENGTH(body)) FROM entry"),
        runs: one("SELECT COUNT(*) FROM entry WHERE kind = 'run'"),
        scores: one("SELECT COUNT(*) FROM entry WHERE kind = 'score'"),
        declared_bytes: one("SELECT SUM(LENGTH(body)) FROM declared"),
        run_ids: one("SELECT COUNT(*) FROM run_id"),
        blobs: one("SELECT COUNT(*) FROM blob"),
        blob_bytes: one("SELECT SUM(LENGTH(bytes)) FROM blob"),
        score_rows: one("SELECT COUNT(*) FROM score"),
        score_row_bytes: one("SELECT SUM(LENGTH(document)) FROM score"),
        headline_bytes: one("SELECT SUM(LENGTH(headline)) FROM score_headline"),
        state_bytes: one("SELECT SUM(LENGTH(body)) FROM subject_state"),
        day_rows: one("SELECT COUNT(*) FROM subject_days"),
        day_bytes: one("SELECT SUM(LENGTH(body)) FROM subject_days"),
        tree_rows: one("SELECT COUNT(*) FROM tree"),
        state_cost: one("SELECT SUM(pgsize) FROM dbstat WHERE name IN
             ('subject_state', 'sqlite_autoindex_subject_state_1', 'subject_days')"),
        pages: {
            let mut stmt = conn
                .prepare("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
                .unwrap();
            stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        },
    }
}

// ---------- appends ----------

/// Run entry `i`: the template as another subject, with its index rows.
fn run_entry(template: &RunRecord, rubric: &Rubric, i: usize) -> NewEntry {
    let mut run = template.clone();
    run.subject = format!("{}?bench={i}", template.subject);
    run.id = format!("{}:{i}", template.id);
    run.started_at_ms += i as i64;
    run.ended_at_ms += i as i64;
    run_entry::prepared_run(run, rubric)
}

/// Score entry `i`, as the daemon appends it: with its daily score row and the row's headline,
/// and the state it read (the subject's state row and the day summary that changed).
fn score_entry(captured: &Captured, i: usize) -> NewEntry {
    let template = &captured.score;
    let mut score = template.clone();
    // The value population it names is a blob of the daemon's store, not of the bench's fresh
    // ones (verification checks every named blob is there).
    score.population_sha256 = None;
    score.subject = format!("{}?bench={i}", template.subject);
    score.as_of_ms += i as i64;
    let row = ScoreRow {
        subject: score.subject.clone(),
        day: x402_probe::clock::day_of(score.as_of_ms),
        as_of_ms: score.as_of_ms,
        seq: 0,
        document: captured.score_document.clone(),
    };
    let headline = captured.score_headline.clone();
    let state = StateRow {
        subject: score.subject.clone(),
        ..captured.state.clone()
    };
    NewEntry {
        at_ms: score.as_of_ms,
        record: Record::Score(score).into(),
        index: Some(Box::new(move |seq| Index {
            score: Some(ScoreRow { seq, ..row }),
            headline: Some(headline),
            state: Some(state),
            ..Index::default()
        })),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Run,
    Score,
    /// Every other kind, as the daemon writes it (verification only).
    Other(RecordKind),
}

impl Kind {
    /// Every kind of entry, for verification.
    fn all() -> Vec<Kind> {
        RecordKind::ALL
            .into_iter()
            .map(|k| match k {
                RecordKind::Run => Kind::Run,
                RecordKind::Score => Kind::Score,
                other => Kind::Other(other),
            })
            .collect()
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Run => "run",
            Kind::Score => "score",
            Kind::Other(k) => k.as_str(),
        }
    }

    fn entry(self, captured: &Captured, rubric: &Rubric, i: usize) -> NewEntry {
        match self {
            Kind::Run => run_entry(&captured.run, rubric, i),
            Kind::Score => score_entry(captured, i),
            Kind::Other(kind) => NewEntry::plain(
                captured.run.ended_at_ms + i as i64,
                other_record(kind, captured, i),
            ),
        }
    }
}

/// The blob snapshot entries name in the benchmark (the file itself is not what is measured).
const SNAPSHOT_FILE: &[u8] = b"{\"format\":\"x402-probe.signed-snapshot/1\"}";

/// An entry of another kind, of the size the daemon writes it.
fn other_record(kind: RecordKind, captured: &Captured, i: usize) -> Record {
    use x402_probe::ledger::record::{
        CatalogueRead, ControlRecord, CorrectionRecord, NoteRecord, OutageRecord, RevisionRecord,
        SubjectChange, SubjectRecord,
    };
    let at_ms = captured.run.ended_at_ms + i as i64;
    let subject = format!("{}?bench={i}", captured.run.subject);
    match kind {
        RecordKind::Refund => Record::Refund(Box::new(x402_probe::evidence::run::RefundRecord {
            run_id: format!("{}:{i}", captured.run.id),
            subject,
            revision: "r0".into(),
            at_ms,
            refund: x402_probe::evidence::paid::RefundSeen::skipped("nothing to refund"),
            result: captured.run.results.last().cloned().expect("a result"),
        })),
        RecordKind::Catalogue => Record::Catalogue(CatalogueRead {
            url: "https://catalogue.example/discovery/resources".into(),
            at_ms,
            pages: (0..3)
                .map(|p| x402_probe::evidence::free::PageSeen {
                    url: format!("https://catalogue.example/discovery/resources?offset={p}"),
                    at: at_ms / 1000,
                    status: Some(200),
                    sha256: Some(format!("{:064x}", p + i)),
                })
                .collect(),
            items_seen: 250,
            error: None,
            added: vec![subject],
            delisted: Vec::new(),
        }),
        RecordKind::Revision => Record::Revision(RevisionRecord {
            subject,
            id: format!("r{i}"),
            at_ms,
            fingerprint: format!("{:064x}", i),
            previous: Some(format!("r{}", i.saturating_sub(1))),
            changed: vec!["price".into()],
        }),
        RecordKind::Outage => Record::Outage(OutageRecord::Closed {
            from_ms: at_ms - 3_600_000,
            to_ms: at_ms,
            of: Default::default(),
        }),
        RecordKind::Control => Record::Control(ControlRecord {
            url: "https://127.0.0.1:4443/weather".into(),
            at_ms,
            ok: true,
            detail: "402 as expected".into(),
        }),
        RecordKind::Subject => Record::Subject(SubjectRecord {
            subject,
            at_ms,
            change: SubjectChange::Added {
                source: "config".into(),
                category: "weather".into(),
            },
        }),
        RecordKind::Correction => Record::Correction(CorrectionRecord {
            of_seq: i as u64 + 1,
            subject: Some(subject),
            at_ms,
            reason: "the operator's refund arrived after the window".into(),
            detail: serde_json::Value::Null,
        }),
        RecordKind::Note => Record::Note(NoteRecord {
            subject,
            at_ms,
            note: x402_probe::evidence::paid::RevisionNote {
                at_ms,
                kind: x402_probe::evidence::paid::NoteKind::PriceChange,
                amount: Some("20000".into()),
                pay_to: None,
                text: "price up with the new model".into(),
            },
            signer: format!("0x{:040x}", i),
            challenge_id: format!("c{i}"),
        }),
        // One a day; the signed file it names is kept by the verification pass (`SNAPSHOT_FILE`).
        RecordKind::Snapshot => Record::Snapshot(x402_probe::ledger::record::SnapshotRecord {
            day: x402_probe::clock::day_of(at_ms),
            at_ms,
            sha256: hex::encode(Sha256::digest(SNAPSHOT_FILE)),
            subjects: 4000,
            tree_size: i as u64 + 1,
        }),
        RecordKind::Run | RecordKind::Score => unreachable!("built by their own templates"),
    }
}

fn fresh_store(root: &Path, name: &str) -> (PathBuf, SqliteStore) {
    let dir = root.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let store = SqliteStore::open(&dir).expect("a fresh store");
    (dir, store)
}

/// Appends `n` entries of `kind` in transactions of `batch`; the seconds spent in `append`.
fn append_entries(
    store: &SqliteStore,
    kind: Kind,
    captured: &Captured,
    rubric: &Rubric,
    n: usize,
    batch: usize,
) -> f64 {
    let mut spent = 0.0;
    let mut i = 0;
    while i < n {
        let entries: Vec<NewEntry> = (i..(i + batch).min(n))
            .map(|k| kind.entry(captured, rubric, k))
            .collect();
        i += entries.len();
        let t = Instant::now();
        store.append(entries).expect("append");
        spent += t.elapsed().as_secs_f64();
    }
    spent
}

/// An `entry` row: seq, at_ms, kind, subject, prev, hash, body.
type EntryRow = (i64, i64, String, Option<String>, Vec<u8>, Vec<u8>, Vec<u8>);
/// A `blob` row: sha256, codec, bytes.
type BlobRow = (Vec<u8>, i64, Vec<u8>);

/// A `score` row: subject, day, as_of_ms, seq, document (as kept), headline.
type ScoreTableRow = (String, String, i64, i64, Vec<u8>, Option<Vec<u8>>);
/// A `subject_state` or `subject_days` row: subject, through_seq or day, sha256, body.
type StateTableRow = (String, i64, Vec<u8>, Vec<u8>);

/// The rows an append wrote, per entry, as bytes.
struct WrittenRow {
    entry: EntryRow,
    /// The tree nodes the entry completed: level, idx, hash.
    tree: Vec<(i64, i64, Vec<u8>)>,
    run_id: Option<(String, i64)>,
    declared: Option<(String, i64, i64, Vec<u8>)>,
    score: Option<ScoreTableRow>,
    /// A score's subject state and its day rows.
    state: Option<StateTableRow>,
    days: Vec<StateTableRow>,
    /// The blobs the store inserted (or found kept) for the entry: a run's observation, and the
    /// bodies, header sets and chain it names (kept once for every run).
    blobs: Vec<BlobRow>,
}

/// The observation blob a run entry's bytes name (hex), if it is a run.
fn observation_ref(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value["record"]["observation"].as_str().map(str::to_string)
}

fn written_rows(path: &Path) -> Vec<WrittenRow> {
    let conn = Connection::open(path).unwrap();
    let mut blobs = conn
        .prepare("SELECT sha256, codec, bytes FROM blob ORDER BY id")
        .unwrap();
    let blobs: Vec<BlobRow> = blobs
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let named: std::collections::HashSet<String> = {
        let mut stmt = conn.prepare("SELECT body FROM entry").unwrap();
        stmt.query_map([], |r| r.get::<_, Vec<u8>>(0))
            .unwrap()
            .filter_map(|b| observation_ref(&b.unwrap()))
            .collect()
    };
    let by_sha: std::collections::HashMap<String, BlobRow> = blobs
        .iter()
        .map(|b| (hex::encode(&b.0), b.clone()))
        .collect();
    // What every run names besides its observation (the subject's bodies, header sets, chain).
    let shared: Vec<BlobRow> = blobs
        .iter()
        .filter(|b| !named.contains(&hex::encode(&b.0)))
        .cloned()
        .collect();
    let mut entries = conn
        .prepare("SELECT seq, at_ms, kind, subject, prev, hash, body FROM entry ORDER BY seq")
        .unwrap();
    // A node at (level, idx) is completed by leaf (idx + 1) * 2^level - 1: entry seq
    // (idx + 1) << level.
    let mut tree: std::collections::HashMap<i64, Vec<(i64, i64, Vec<u8>)>> = Default::default();
    {
        let mut nodes = conn.prepare("SELECT level, idx, hash FROM tree").unwrap();
        for node in nodes
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
        {
            let (level, idx, hash): (i64, i64, Vec<u8>) = node.unwrap();
            tree.entry((idx + 1) << level)
                .or_default()
                .push((level, idx, hash));
        }
    }
    let mut run_ids = conn
        .prepare("SELECT id, seq FROM run_id WHERE seq = ?1")
        .unwrap();
    let mut declared_rows = conn
        .prepare("SELECT subject, seq, at_ms, body FROM declared WHERE seq = ?1")
        .unwrap();
    let mut score_rows = conn
        .prepare(
            "SELECT s.subject, s.day, s.as_of_ms, s.seq, s.document, h.headline FROM score s
             LEFT JOIN score_headline h ON h.subject = s.subject AND h.day = s.day
             WHERE s.seq = ?1",
        )
        .unwrap();
    // Each bench score entry is of a subject of its own: its state is that subject's.
    let mut state_rows = conn
        .prepare("SELECT subject, through_seq, sha256, body FROM subject_state WHERE subject = ?1")
        .unwrap();
    let mut day_rows = conn
        .prepare("SELECT subject, day, sha256, body FROM subject_days WHERE subject = ?1")
        .unwrap();
    let rows: Vec<WrittenRow> = entries
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .unwrap()
        .map(|e| {
            let entry: EntryRow = e.unwrap();
            let seq = entry.0;
            let run_id = run_ids
                .query_map([seq], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(Result::unwrap)
                .next();
            let declared = declared_rows
                .query_map([seq], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .unwrap()
                .map(Result::unwrap)
                .next();
            let score: Option<ScoreTableRow> = score_rows
                .query_map([seq], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                })
                .unwrap()
                .map(Result::unwrap)
                .next();
            let state_of = |stmt: &mut rusqlite::Statement, subject: &str| -> Vec<StateTableRow> {
                stmt.query_map([subject], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect()
            };
            let (state, days) = match &score {
                Some(row) => (
                    state_of(&mut state_rows, &row.0).into_iter().next(),
                    state_of(&mut day_rows, &row.0),
                ),
                None => (None, Vec::new()),
            };
            let blobs = match observation_ref(&entry.6) {
                Some(sha) => std::iter::once(by_sha[&sha].clone())
                    .chain(shared.iter().cloned())
                    .collect(),
                None => Vec::new(),
            };
            WrittenRow {
                tree: tree.remove(&seq).unwrap_or_default(),
                entry,
                run_id,
                declared,
                score,
                state,
                days,
                blobs,
            }
        })
        .collect();
    rows
}

/// The baseline: the same rows inserted into the same schema, in the same transactions, with the
/// store's pragmas; the seconds spent inserting.
fn plain_inserts(path: &Path, rows: &[WrittenRow], batch: usize) -> f64 {
    let mut conn = Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute_batch(SCHEMA_SQL).unwrap();
    let mut spent = 0.0;
    for chunk in rows.chunks(batch) {
        let t = Instant::now();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        {
            let mut blob = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO blob (sha256, codec, bytes) VALUES (?1, ?2, ?3)",
                )
                .unwrap();
            let mut entry = tx
                .prepare_cached(
                    "INSERT INTO entry (seq, at_ms, kind, subject, prev, hash, body)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .unwrap();
            let mut tree = tx
                .prepare_cached("INSERT INTO tree (level, idx, hash) VALUES (?1, ?2, ?3)")
                .unwrap();
            let mut run_id = tx
                .prepare_cached("INSERT INTO run_id (id, seq) VALUES (?1, ?2)")
                .unwrap();
            let mut state_row = tx
                .prepare_cached(
                    "INSERT INTO subject_state (subject, through_seq, sha256, body)
                     VALUES (?1, ?2, ?3, ?4)",
                )
                .unwrap();
            let mut day_row = tx
                .prepare_cached(
                    "INSERT INTO subject_days (subject, day, sha256, body) VALUES (?1, ?2, ?3, ?4)",
                )
                .unwrap();
            let mut declared_row = tx
                .prepare_cached(
                    "INSERT INTO declared (subject, seq, at_ms, body) VALUES (?1, ?2, ?3, ?4)",
                )
                .unwrap();
            let mut score_row = tx
                .prepare_cached(
                    "INSERT INTO score (subject, day, as_of_ms, seq, document)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (subject, day) DO UPDATE SET as_of_ms = ?3, seq = ?4,
                     document = ?5",
                )
                .unwrap();
            let mut headline_row = tx
                .prepare_cached(
                    "INSERT INTO score_headline (subject, day, headline) VALUES (?1, ?2, ?3)
                     ON CONFLICT (subject, day) DO UPDATE SET headline = ?3",
                )
                .unwrap();
            // The store inserts (or ignores, when kept already) each blob an entry keeps apart,
            // once per entry: so does the baseline.
            for row in chunk {
                for (sha, codec, bytes) in &row.blobs {
                    blob.execute(params![sha, codec, bytes]).unwrap();
                }
                let (seq, at_ms, kind, subject, prev, hash, body) = &row.entry;
                entry
                    .execute(params![seq, at_ms, kind, subject, prev, hash, body])
                    .unwrap();
                for (level, idx, hash) in &row.tree {
                    tree.execute(params![level, idx, hash]).unwrap();
                }
                if let Some((id, seq)) = &row.run_id {
                    run_id.execute(params![id, seq]).unwrap();
                }
                if let Some((subject, seq, at, body)) = &row.declared {
                    declared_row
                        .execute(params![subject, seq, at, body])
                        .unwrap();
                }
                if let Some((subject, day, as_of, seq, document, headline)) = &row.score {
                    score_row
                        .execute(params![subject, day, as_of, seq, document])
                        .unwrap();
                    if let Some(headline) = headline {
                        headline_row
                            .execute(params![subject, day, headline])
                            .unwrap();
                    }
                }
                if let Some((subject, through, sha, body)) = &row.state {
                    state_row
                        .execute(params![subject, through, sha, body])
                        .unwrap();
                }
                for (subject, day, sha, body) in &row.days {
                    day_row.execute(params![subject, day, sha, body]).unwrap();
                }
            }
        }
        tx.commit().unwrap();
        spent += t.elapsed().as_secs_f64();
    }
    spent
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

fn appends(sizes: &Sizes, root: &Path, captured: &Captured, rubric: &Rubric) {
    println!(
        "appends: entries with their index rows as the daemon writes them (a run: its run id and declaration; a score: its daily score row with its headline, the subject's state row and the day summary it changed), per transaction size"
    );
    println!(
        "  (median of {} rounds; every commit on stable storage; a fresh store each time)",
        sizes.rounds()
    );
    println!(
        "  {:<24} {:>6}  {:>8}  {:>16}  {:>16}  {:>6}",
        "entries", "batch", "count", "Store::append /s", "plain inserts /s", "ratio"
    );
    for kind in [Kind::Run, Kind::Score] {
        let mut best = 0.0f64;
        for batch in [1usize, 64, 512] {
            let n = sizes.entries(batch);
            let (mut ours, mut base) = (Vec::new(), Vec::new());
            for round in 0..sizes.rounds() {
                let name = format!("append-{}-{batch}-{round}", kind.name());
                let (dir, store) = fresh_store(root, &name);
                let spent = append_entries(&store, kind, captured, rubric, n, batch);
                drop(store);
                ours.push(n as f64 / spent);
                let rows = written_rows(&dir.join(STORE_FILE));
                let plain = root.join(format!("{name}-plain.sqlite"));
                let spent = plain_inserts(&plain, &rows, batch);
                base.push(n as f64 / spent);
                let _ = std::fs::remove_dir_all(&dir);
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", plain.display()));
                }
            }
            let (o, b) = (median(ours), median(base));
            best = best.max(o);
            println!(
                "  {:<24} {batch:>6}  {n:>8}  {o:>16.0}  {b:>16.0}  {:>6.2}",
                kind.name(),
                b / o
            );
        }
        println!(
            "  goal: at least {GOAL_APPEND:.0} entries/s batched: {} for {} entries (best {best:.0}/s)",
            met(best >= GOAL_APPEND),
            kind.name()
        );
    }
    println!(
        "  ratio = time of Store::append / time of the plain inserts of the same rows (entry, blobs, tree nodes and index rows)"
    );
    // What the run's task does before the writer: the stored form (results derived again and
    // compared, blobs hashed), against deriving the results alone.
    let n = if sizes.quick { 100 } else { 400 };
    let t = Instant::now();
    for i in 0..n {
        std::hint::black_box(run_entry(&captured.run, rubric, i));
    }
    let prepare = t.elapsed().as_secs_f64() / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(x402_probe::ledger::stored::derive_results(
            &captured.run.free,
            captured.run.paid.as_ref(),
            rubric,
        ));
    }
    let derive = t.elapsed().as_secs_f64() / n as f64;
    println!(
        "  a run entry made ready in its run's task, before the writer (NewEntry::prepared): {:.0} us, of which deriving its results {:.0} us ({:.2}x)",
        prepare * 1e6,
        derive * 1e6,
        prepare / derive
    );
}

// ---------- verification ----------

fn verification(sizes: &Sizes, root: &Path, captured: &Captured, rubric: &Rubric) {
    println!(
        "verification: Store::verify over a whole store, against SHA-256 of the same bodies in memory"
    );
    println!(
        "  {:<14} {:>8} {:>10}  {:>14} {:>14} {:>14} {:>14}  {:>6}",
        "entries",
        "count",
        "avg bytes",
        "SHA-256 /s",
        "scan only /s",
        "chain /s",
        "deep /s",
        "ratio"
    );
    let mut chain_rates = Vec::new();
    let kinds = Kind::all().into_iter().filter(|k| {
        sizes
            .kinds
            .as_ref()
            .is_none_or(|wanted| wanted.iter().any(|w| w == k.name()))
    });
    for kind in kinds {
        let (dir, store) = fresh_store(root, &format!("verify-{}", kind.name()));
        let n = if kind == Kind::Run {
            sizes.verify_runs()
        } else {
            sizes.verify_scores()
        };
        let batch = 4096;
        if kind == Kind::Other(RecordKind::Snapshot) {
            store.put_blob(SNAPSHOT_FILE).unwrap();
        }
        let mut i = 0;
        while i < n {
            let entries: Vec<NewEntry> = (i..(i + batch).min(n))
                .map(|k| match kind {
                    // A score with its score row (verification checks each subject's newest).
                    Kind::Run | Kind::Score => kind.entry(captured, rubric, k),
                    // The ledger entry alone.
                    _ => {
                        let e = kind.entry(captured, rubric, k);
                        NewEntry { index: None, ..e }
                    }
                })
                .collect();
            i += entries.len();
            store.append(entries).unwrap();
        }
        // Warm the page cache the same way for every pass.
        let mut bodies = Vec::with_capacity(n);
        store
            .scan(0, &mut |row| {
                bodies.push(row.body);
                Ok(())
            })
            .unwrap();
        let total: usize = bodies.iter().map(Vec::len).sum();
        let rounds = sizes.rounds();
        let (mut sha, mut scan, mut chain, mut deep) = (vec![], vec![], vec![], vec![]);
        for _ in 0..rounds {
            let t = Instant::now();
            for b in &bodies {
                std::hint::black_box(Sha256::digest(b));
            }
            sha.push(n as f64 / t.elapsed().as_secs_f64());
            let t = Instant::now();
            let mut seen = 0usize;
            store
                .scan(0, &mut |row| {
                    seen += row.body.len();
                    Ok(())
                })
                .unwrap();
            std::hint::black_box(seen);
            scan.push(n as f64 / t.elapsed().as_secs_f64());
            let t = Instant::now();
            let summary = store.verify(None, false).expect("the chain verifies");
            chain.push(n as f64 / t.elapsed().as_secs_f64());
            assert_eq!(summary.entries as usize, n);
            if !sizes.no_deep {
                let t = Instant::now();
                store.verify(None, true).expect("the chain verifies deep");
                deep.push(n as f64 / t.elapsed().as_secs_f64());
            }
        }
        // (NaN: not measured, `--no-deep`.)
        let d = if deep.is_empty() {
            f64::NAN
        } else {
            median(deep)
        };
        let (s, sc, c) = (median(sha), median(scan), median(chain));
        chain_rates.push((kind.name(), c, total / n));
        println!(
            "  {:<14} {n:>8} {:>10}  {s:>14.0} {sc:>14.0} {c:>14.0} {d:>14.0}  {:>6.2}",
            format!("{} entries", kind.name()),
            total / n,
            s / c
        );
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
    for (kind, rate, avg) in chain_rates {
        println!(
            "  goal: at least {GOAL_VERIFY:.0} entries/s (chain and tree): {} for {kind} entries ({rate:.0}/s, {:.0} MB/s of {avg}-byte entries)",
            met(rate >= GOAL_VERIFY),
            rate * avg as f64 / 1e6
        );
    }
    println!(
        "  chain = the chain-only verify, which also recomputes the Merkle tree over every entry and checks the stored tree; deep also reads every run back (blobs, results derived and their hash checked)"
    );
    println!("  ratio = time of the chain-only verify / time of SHA-256 over the bodies in memory");
}

// ---------- inclusion proofs ----------

/// Inclusion proofs as the operator's route and `ledger prove` hand them out
/// (`Store::inclusion_bundle`: a subject's entries with their proofs against the latest tree
/// checkpoint, read from the stored tree), one subject's entry per call and a subject's many
/// entries per call. Baseline: the same proofs made from the tree held in memory.
fn proofs(sizes: &Sizes, root: &Path, captured: &Captured) {
    use x402_probe::ledger::merkle::{Tree, inclusion_proof, leaf_hash};
    let n = sizes.proof_entries();
    let subjects = 1_000usize;
    let (dir, store) = fresh_store(root, "proofs");
    let key = ReporterKey::generate(&dir.join("reporter.key")).expect("a reporter key");
    let mut tree = Tree::new();
    let mut i = 0;
    while i < n {
        let entries: Vec<NewEntry> = (i..(i + 8_192).min(n))
            .map(|k| {
                let mut score = captured.score.clone();
                score.population_sha256 = None;
                score.subject = format!("{}?bench={}", captured.score.subject, k % subjects);
                score.as_of_ms += k as i64;
                NewEntry::plain(score.as_of_ms, Record::Score(score))
            })
            .collect();
        i += entries.len();
        store.append(entries).unwrap();
    }
    store
        .scan(0, &mut |row| {
            tree.push(leaf_hash(&row.body));
            Ok(())
        })
        .unwrap();
    store
        .checkpoint(&key, captured.score.as_of_ms + n as i64)
        .unwrap()
        .expect("a checkpoint");
    let subject = |k: usize| format!("{}?bench={}", captured.score.subject, k % subjects);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng as usize
    };
    println!(
        "inclusion proofs: Store::inclusion_bundle over {n} entries of {subjects} subjects, against the latest tree checkpoint"
    );
    // (`--rounds N`: N times as many calls, to profile them.)
    let calls = if sizes.quick { 2_000 } else { 20_000 } * sizes.rounds.unwrap_or(1);
    // One entry per call: what a single proof costs through the store.
    let picks: Vec<(String, u64)> = (0..calls)
        .map(|_| {
            let k = next() % n;
            (subject(k), k as u64)
        })
        .collect();
    let prove_one = |picks: &[(String, u64)]| {
        let t = Instant::now();
        for (subject, seq) in picks {
            // The entry at `seq + 1` is the subject's first after `seq`.
            let bundle = store
                .inclusion_bundle(subject, *seq, 1)
                .unwrap()
                .expect("a bundle");
            assert_eq!(bundle.entries.len(), 1);
        }
        picks.len() as f64 / t.elapsed().as_secs_f64()
    };
    // The store just opened first (its tree's kept levels and SQLite's pages not yet read),
    // four times as many other calls: then the calls measured, as a process serving proofs for
    // a while makes them (measured: the rate climbs over the first 100,000 calls or so).
    let warming: Vec<(String, u64)> = (0..calls * 4)
        .map(|_| {
            let k = next() % n;
            (subject(k), k as u64)
        })
        .collect();
    let cold = prove_one(&warming);
    let one = prove_one(&picks);
    // A subject's whole history per call.
    let whole = if sizes.quick { 20 } else { 200 };
    let t = Instant::now();
    let mut proven = 0usize;
    for _ in 0..whole {
        let bundle = store
            .inclusion_bundle(&subject(next()), 0, usize::MAX >> 1)
            .unwrap()
            .expect("a bundle");
        proven += bundle.entries.len();
    }
    let many = proven as f64 / t.elapsed().as_secs_f64();
    // Baseline: proofs from the tree in memory (no reads, no bundle).
    let t = Instant::now();
    for (_, seq) in &picks {
        std::hint::black_box(inclusion_proof(&tree, *seq, n as u64).unwrap());
    }
    let memory = calls as f64 / t.elapsed().as_secs_f64();
    println!(
        "  one entry per call: {one:.0} proofs/s (the first {} calls after opening the store: {cold:.0}/s); a subject's {} entries per call: {many:.0} proofs/s; from the tree in memory: {memory:.0} proofs/s ({:.2}x / {:.2}x of its time)",
        warming.len(),
        n / subjects,
        memory / one,
        memory / many
    );
    println!(
        "  goal: at least {GOAL_PROOFS:.0} inclusion proofs/s: {} for one entry per call ({one:.0}/s; {cold:.0}/s just opened), {} for a subject's entries per call ({many:.0}/s)",
        met(one >= GOAL_PROOFS),
        met(many >= GOAL_PROOFS),
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------- bytes ----------

fn bytes(root: &Path, captured: &Captured, rubric: &Rubric) {
    println!("bytes: the store file's growth (WAL checkpointed)");
    // Per run entry: many run entries appended to an empty store.
    let n = 2_000;
    let (dir, store) = fresh_store(root, "bytes");
    let path = dir.join(STORE_FILE);
    drop(store);
    let empty = table_bytes(&path);
    let store = SqliteStore::open(&dir).unwrap();
    append_entries(&store, Kind::Run, captured, rubric, n, 256);
    drop(store);
    let full = table_bytes(&path);
    let per = |a: u64, b: u64| (b - a) as f64 / n as f64;
    println!(
        "  per run entry (later runs of a subject: its bodies already kept): {:.0} bytes of file = entry {:.0} + declaration {:.0} + run id + {:.2} tree nodes + b-tree and page overhead",
        per(empty.file, full.file),
        per(empty.entry_bytes, full.entry_bytes),
        per(empty.declared_bytes, full.declared_bytes),
        per(empty.tree_rows, full.tree_rows),
    );
    assert_eq!(
        full.run_ids - empty.run_ids,
        n as u64,
        "a run id per run entry"
    );
    println!(
        "  a subject's first run also keeps its bodies, header sets and certificate chain once (zstd): {} bytes of blobs here, {:.2} blob bytes per later run",
        full.blob_bytes,
        per(empty.blob_bytes, full.blob_bytes)
    );
    let _ = std::fs::remove_dir_all(&dir);

    // Per subject per day: the daemon's second simulated day, every table it writes.
    let (a, b) = (&captured.day1, &captured.day2);
    let s = SUBJECTS as f64;
    let d = |x: u64, y: u64| (y.saturating_sub(x)) as f64 / s;
    println!(
        "  per subject per day at the default cadence (the daemon's second simulated day, {SUBJECTS} subjects, every 3 h +-10%):"
    );
    println!(
        "    {:.0} bytes of file: {:.1} run and {:.1} score entries ({:.0} bytes), blobs {:.0}, declarations {:.0}, daily score rows {:.0} (zstd) + their headlines {:.0}, {:.1} day summaries ({:.0} bytes; {:.0} bytes of each subject's state row), {:.1} tree nodes",
        d(a.file, b.file),
        d(a.runs, b.runs),
        d(a.scores, b.scores),
        d(a.entry_bytes, b.entry_bytes),
        d(a.blob_bytes, b.blob_bytes),
        d(a.declared_bytes, b.declared_bytes),
        d(a.score_row_bytes, b.score_row_bytes),
        d(a.headline_bytes, b.headline_bytes),
        d(a.day_rows, b.day_rows),
        d(a.day_bytes, b.day_bytes),
        b.state_bytes as f64 / s,
        d(a.tree_rows, b.tree_rows),
    );
    let per_day = d(a.file, b.file);
    // The scoring window (states and day summaries) is bounded: a day summary is deleted once
    // it has left every window (the default horizon), its pages reused by later rows; what a
    // store holds after a year is the rest's growth for 365 days and the days of one window.
    let window = <HistoryDaysRange as Range>::DEFAULT as f64;
    let state_per_day = d(a.state_cost, b.state_cost);
    let rest_per_day = per_day - state_per_day;
    println!(
        "    of which the subjects' states and day summaries' pages {:.0} bytes (subject_state, subject_days; slack included): at most {:.1} MB per subject for a {window:.0}-day window; everything else {:.0} bytes",
        state_per_day,
        state_per_day * window / 1e6,
        rest_per_day
    );
    let grown: Vec<String> = b
        .pages
        .iter()
        .map(|(name, after)| {
            let before = a.pages.get(name).copied().unwrap_or(0);
            (name, d(before, *after))
        })
        .filter(|(_, grew)| *grew >= 1.0)
        .map(|(name, grew)| format!("{name} {grew:.0}"))
        .collect();
    println!(
        "    pages per table and index (bytes per subject per day): {}",
        grown.join(", ")
    );
    // The checkpoints (signed heads and tree checkpoints) are the ledger's, one per
    // `checkpoint_every_secs` whatever the number of subjects: shared by every subject, not
    // grown by each. Here they are split out of the per-subject figure and sized per ledger.
    let ledger_per_day: f64 = LEDGER_WIDE_TABLES
        .iter()
        .map(|name| {
            let before = a.pages.get(*name).copied().unwrap_or(0);
            let after = b.pages.get(*name).copied().unwrap_or(0);
            after.saturating_sub(before) as f64
        })
        .sum();
    let subject_rest_per_day = rest_per_day - ledger_per_day / s;
    let year_here = rest_per_day * 365.0 + state_per_day * window.min(365.0);
    let year = subject_rest_per_day * 365.0 + state_per_day * window.min(365.0);
    let ledger_year = ledger_per_day * 365.0;
    println!(
        "    the ledger's own (checkpoint, tree_checkpoint): {ledger_per_day:.0} bytes a day for the whole ledger ({:.1} MB a year whatever the number of subjects; {:.0} bytes a subject a day when {SUBJECTS} share them)",
        ledger_year / 1e6,
        ledger_per_day / s
    );
    println!(
        "    sizing: {:.1} MB per subject per year, all its tables included = {:.1} MB growing all year + {:.1} MB of states and day summaries ({window:.0} days kept; {:.1} MB in all were they kept all year), plus the ledger's {:.1} MB a year; 1,000 subjects {:.1} GB/year; 100,000 subjects {:.0} GB/year; with this bench's {SUBJECTS} subjects sharing the checkpoints {:.1} MB per subject",
        year / 1e6,
        subject_rest_per_day * 365.0 / 1e6,
        state_per_day * window.min(365.0) / 1e6,
        (per_day - ledger_per_day / s) * 365.0 / 1e6,
        ledger_year / 1e6,
        (year * 1_000.0 + ledger_year) / 1e9,
        (year * 100_000.0 + ledger_year) / 1e9,
        year_here / 1e6
    );
    println!(
        "    goal: at most 15 MB per subject per year, all its tables included: {} ({:.1} MB; {:.1} MB with the checkpoints of a ledger of {SUBJECTS} subjects divided among them)",
        met(year <= 15e6),
        year / 1e6,
        year_here / 1e6
    );
    let _ = (b.entries, b.blobs, b.score_rows);
}
