//! The loop's own decisions, on a real daemon (real SQLite store, real catalogue reads over
//! loopback), driven turn by turn: jobs dispatched and their results taken in an order the test
//! chooses, with SIGHUP reloads between them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::*;

/// A discovery catalogue on loopback whose items and answer delay the test changes as it goes.
struct TestCatalogue {
    url: String,
    listing: Arc<Mutex<(Vec<String>, Duration)>>,
    _server: tokio::task::JoinHandle<()>,
}

impl TestCatalogue {
    async fn start(subjects: &[&str], delay: Duration) -> TestCatalogue {
        let listing = Arc::new(Mutex::new((
            subjects.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            delay,
        )));
        let state = listing.clone();
        let app = axum::Router::new().route(
            "/discovery/resources",
            axum::routing::get(move || {
                let state = state.clone();
                async move {
                    let (subjects, delay) = state.lock().unwrap().clone();
                    tokio::time::sleep(delay).await;
                    let items: Vec<Value> = subjects
                        .iter()
                        .map(|s| json!({"resource": s, "type": "http", "accepts": []}))
                        .collect();
                    axum::Json(json!({
                        "x402Version": 2,
                        "items": items,
                        "pagination": {"limit": 100, "offset": 0, "total": subjects.len()},
                    }))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TestCatalogue {
            url: format!("http://{addr}/discovery/resources"),
            listing,
            _server: server,
        }
    }

    fn list(&self, subjects: &[&str]) {
        self.listing.lock().unwrap().0 = subjects.iter().map(|s| s.to_string()).collect();
    }
}

/// Subjects on a loopback port nothing listens on: a run that does start fails at once, locally.
fn subject(n: u32) -> String {
    format!("https://127.0.0.1:9/s{n}")
}

fn config_text(state: &Path, subjects: &[String], catalogues: &[&TestCatalogue]) -> String {
    let mut text = format!(
        "[daemon]\nstate_dir = \"{}\"\nreporter_key = {{ key_file = \"{}\" }}\n\n\
         [probe]\nallow_private = true\nsamples = 1\n\n\
         [schedule]\nfree_every_secs = 10800\n\n[api]\nenabled = false\n",
        state.display(),
        state.join("reporter.key").display()
    );
    for s in subjects {
        text.push_str(&format!("\n[[subject]]\nurl = \"{s}\"\n"));
    }
    for c in catalogues {
        text.push_str(&format!("\n[[catalogue]]\nurl = \"{}\"\n", c.url));
    }
    text
}

/// Writes the configuration file; the daemon reads it at open and at each reload.
fn write_config(
    state: &Path,
    subjects: &[String],
    catalogues: &[&TestCatalogue],
) -> (DaemonConfig, PathBuf) {
    let path = state.join("daemon.toml");
    std::fs::write(&path, config_text(state, subjects, catalogues)).unwrap();
    let (config, _) = DaemonConfig::read_with_table(&path).unwrap();
    (config, path)
}

async fn open(state: &Path, subjects: &[String], catalogues: &[&TestCatalogue]) -> Daemon {
    crate::install_crypto_provider();
    ReporterKey::generate(&state.join("reporter.key")).unwrap();
    let (config, path) = write_config(state, subjects, catalogues);
    Daemon::open(config, Some(path), TimeSource::System)
        .await
        .unwrap()
}

impl Daemon {
    /// One free run of `subject` (unpaid) as the loop starts it, the pipeline then the writer,
    /// outside the loop.
    fn free_run(&self, subject: &str) -> impl Future<Output = pipeline::RunDone> + use<> {
        pipeline::run_subject(
            self.shared().clone(),
            self.writer.clone(),
            subject.to_string(),
            "weather".into(),
            false,
        )
    }

    /// Starts every job due now.
    fn dispatch_due(&mut self, in_flight: &mut JoinSet<Done>) {
        let now = self.shared.clock.now_ms();
        let mut paid = 0;
        self.dispatch(now, in_flight, 8, &mut paid);
    }

    /// Takes the next finished job's result.
    async fn finish_next(&mut self, in_flight: &mut JoinSet<Done>) {
        let done = tokio::time::timeout(Duration::from_secs(30), in_flight.join_next_with_id())
            .await
            .expect("a job finishes")
            .expect("a job is in flight");
        let mut paid = 0;
        self.finish(done, &mut paid).unwrap();
    }

    /// Takes every job's result.
    async fn finish_all(&mut self, in_flight: &mut JoinSet<Done>) {
        while !in_flight.is_empty() {
            self.finish_next(in_flight).await;
        }
    }

    fn state_of(&self, url: &str) -> Option<(SubjectState, String)> {
        self.subjects
            .get(url)
            .map(|s| (s.row.state, s.row.source.clone()))
    }

    /// Free runs of `url` queued.
    fn free_runs_queued(&self, url: &str) -> usize {
        self.queue
            .iter()
            .filter(|Reverse((_, _, job))| matches!(job, Job::Free(u) if u == url))
            .count()
    }
}

/// A catalogue read that lands after a SIGHUP reordered the catalogues is applied to the
/// catalogue it read (before, it was applied to whichever catalogue took its place: its items
/// were added under the other's name and the other's subjects delisted); a catalogue a reload
/// adds is read, and one it drops is read no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalogue_reads_land_on_their_own_catalogue_across_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let slow = TestCatalogue::start(&[&subject(1)], Duration::from_millis(1_500)).await;
    let fast = TestCatalogue::start(&[&subject(2)], Duration::ZERO).await;
    let mut daemon = open(dir.path(), &[], &[&slow, &fast]).await;
    let mut in_flight = JoinSet::new();
    daemon.dispatch_due(&mut in_flight);
    // The fast catalogue answers first; then the catalogues are reordered while the slow one's
    // read is in flight, and its result lands after the reload.
    daemon.finish_next(&mut in_flight).await;
    assert_eq!(
        daemon.state_of(&subject(2)),
        Some((SubjectState::Active, fast.url.clone()))
    );
    write_config(dir.path(), &[], &[&fast, &slow]);
    daemon.reload();
    daemon.finish_all(&mut in_flight).await;
    assert_eq!(
        daemon.state_of(&subject(1)),
        Some((SubjectState::Active, slow.url.clone())),
        "the slow catalogue's subject, under its own catalogue"
    );
    assert_eq!(
        daemon.state_of(&subject(2)),
        Some((SubjectState::Active, fast.url.clone())),
        "the fast catalogue's subject is not delisted by the other's read"
    );

    // A catalogue added in front of the others is read at once.
    let added = TestCatalogue::start(&[&subject(3)], Duration::ZERO).await;
    write_config(dir.path(), &[], &[&added, &fast, &slow]);
    daemon.reload();
    daemon.dispatch_due(&mut in_flight);
    daemon.finish_all(&mut in_flight).await;
    assert_eq!(
        daemon.state_of(&subject(3)),
        Some((SubjectState::Active, added.url.clone())),
        "the added catalogue was read"
    );

    // Dropped from the configuration, a catalogue is read no more: nothing it lists now is added.
    fast.list(&[&subject(4)]);
    write_config(dir.path(), &[], &[&added]);
    daemon.reload();
    let reads_queued = daemon
        .queue
        .iter()
        .filter(|Reverse((_, _, job))| matches!(job, Job::Catalogue(_)))
        .count();
    assert_eq!(
        reads_queued, 1,
        "one read queued, of the one catalogue left"
    );
    let later = daemon.shared.clock.now_ms() + 86_400_000;
    let mut paid = 0;
    daemon.dispatch(later, &mut in_flight, 8, &mut paid);
    daemon.finish_all(&mut in_flight).await;
    assert_eq!(daemon.state_of(&subject(4)), None);
}

/// One chain of runs per subject whatever the order of reloads and catalogue reads: a subject
/// removed by a reload and configured again, or delisted and listed again, keeps one queued
/// run (before, each return queued another beside the one already queued, and both ran on,
/// each scheduling its own next run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_removed_or_delisted_and_back_keeps_one_chain_of_runs() {
    let dir = tempfile::tempdir().unwrap();
    let catalogue = TestCatalogue::start(&[&subject(2)], Duration::ZERO).await;
    let mut daemon = open(dir.path(), &[subject(1)], &[&catalogue]).await;
    assert_eq!(daemon.free_runs_queued(&subject(1)), 1);

    // Removed by a reload, then configured again.
    write_config(dir.path(), &[], &[&catalogue]);
    daemon.reload();
    assert_eq!(
        daemon.state_of(&subject(1)).map(|s| s.0),
        Some(SubjectState::Removed)
    );
    write_config(dir.path(), &[subject(1)], &[&catalogue]);
    daemon.reload();
    assert_eq!(
        daemon.state_of(&subject(1)).map(|s| s.0),
        Some(SubjectState::Active)
    );
    assert_eq!(
        daemon.free_runs_queued(&subject(1)),
        1,
        "one chain after a reload"
    );

    // Listed, delisted, listed again.
    let mut in_flight = JoinSet::new();
    daemon.dispatch_due(&mut in_flight);
    daemon.finish_all(&mut in_flight).await;
    assert_eq!(daemon.free_runs_queued(&subject(2)), 1);
    for (listed, state) in [
        (vec![], SubjectState::Delisted),
        (vec![subject(2)], SubjectState::Active),
    ] {
        let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
        catalogue.list(&listed);
        let now = daemon.shared.clock.now_ms();
        daemon.push(now, Job::Catalogue(catalogue.url.clone()));
        daemon.dispatch_due(&mut in_flight);
        daemon.finish_all(&mut in_flight).await;
        assert_eq!(daemon.state_of(&subject(2)).map(|s| s.0), Some(state));
    }
    assert_eq!(
        daemon.free_runs_queued(&subject(2)),
        1,
        "one chain after a relisting"
    );
}

/// A write of the loop's own that fails (here the subjects' rows, refused by the database) ends
/// the loop as a stop does: the API stops serving, and the ledger is signed at its head (the run
/// that had just been recorded is covered). Before, the `?` left the loop at once: no STOPPING,
/// the API kept answering, the last entries unsigned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_flush_still_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    crate::install_crypto_provider();
    ReporterKey::generate(&dir.path().join("reporter.key")).unwrap();
    let path = dir.path().join("daemon.toml");
    let text = config_text(dir.path(), &[subject(1)], &[])
        .replace("free_every_secs = 10800", "free_every_secs = 1")
        .replace("enabled = false", "bind = \"127.0.0.1:0\"");
    std::fs::write(&path, text).unwrap();
    let (config, _) = DaemonConfig::read_with_table(&path).unwrap();
    let daemon = Daemon::open(config, Some(path), TimeSource::System)
        .await
        .unwrap();
    let api = daemon.api_addr().expect("the API is bound");
    // Once a run is recorded, the database refuses every write of a subject's row. (Refusing
    // them from the start raced the first run: the row of its next due time may be written first,
    // and the loop then stopped on an empty ledger with nothing to sign.)
    let db = rusqlite::Connection::open(dir.path().join("ledger.sqlite")).unwrap();
    db.execute_batch(
        "CREATE TRIGGER refuse_insert BEFORE INSERT ON subject
             WHEN EXISTS (SELECT 1 FROM entry WHERE kind = 'run')
             BEGIN SELECT RAISE(ABORT, 'injected: subject rows refused'); END;
         CREATE TRIGGER refuse_update BEFORE UPDATE ON subject
             WHEN EXISTS (SELECT 1 FROM entry WHERE kind = 'run')
             BEGIN SELECT RAISE(ABORT, 'injected: subject rows refused'); END;",
    )
    .unwrap();
    let (_signals, rx) = tokio::sync::mpsc::channel(1);
    let ended = tokio::time::timeout(Duration::from_secs(60), daemon.run(rx))
        .await
        .expect("the loop ends");
    let error = format!("{:#}", ended.expect_err("the failure is reported"));
    assert!(error.contains("subject rows refused"), "{error}");
    assert!(
        tokio::net::TcpStream::connect(api).await.is_err(),
        "the API stopped serving"
    );
    let store = SqliteStore::open(dir.path()).unwrap();
    let (head, _) = store.head().unwrap();
    let signed = store.last_checkpoint().unwrap().expect("a checkpoint");
    assert!(head > 1, "the run was recorded");
    assert_eq!(signed.seq, head, "the ledger is signed at its head");
}

/// An endpoint on loopback answering every request with a 402 quoting `amount` (atomic units of
/// a 6-decimal token), which the test changes as it goes.
struct Quoting {
    url: String,
    amount: Arc<Mutex<u64>>,
    _server: tokio::task::JoinHandle<()>,
}

/// A daemon in a state directory of its own with one subject: an endpoint quoting 0.01 USDC.
async fn one_subject() -> (tempfile::TempDir, Quoting, String, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = Quoting::start(10_000).await;
    let subject = crate::probe::http::canonical_subject_url(&endpoint.url).unwrap();
    let daemon = open(dir.path(), std::slice::from_ref(&subject), &[]).await;
    (dir, endpoint, subject, daemon)
}

impl Quoting {
    async fn start(amount: u64) -> Quoting {
        use base64::Engine as _;
        let amount = Arc::new(Mutex::new(amount));
        let state = amount.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/paid", listener.local_addr().unwrap());
        let resource = url.clone();
        let app = axum::Router::new().route(
            "/paid",
            axum::routing::get(move || {
                let quoted = *state.lock().unwrap();
                let required = json!({
                    "x402Version": 2,
                    "error": "Payment required",
                    "resource": {"url": resource, "description": "a test endpoint", "mimeType": "application/json"},
                    "accepts": [{
                        "scheme": "exact",
                        "network": "eip155:84532",
                        "amount": quoted.to_string(),
                        "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
                        "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                        "maxTimeoutSeconds": 60,
                        "extra": {"name": "USDC", "version": "2"},
                    }],
                });
                let header = base64::engine::general_purpose::STANDARD
                    .encode(serde_json::to_vec(&required).unwrap());
                async move {
                    (
                        axum::http::StatusCode::PAYMENT_REQUIRED,
                        [("payment-required", header)],
                        axum::Json(json!({})),
                    )
                }
            }),
        );
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Quoting {
            url,
            amount,
            _server: server,
        }
    }
}

/// Revisions of `subject` in the ledger (ids in order), and the revision each run names.
fn revisions_and_runs(state: &Path, subject: &str) -> (Vec<String>, Vec<String>) {
    let store = SqliteStore::open(state).unwrap();
    let mut revisions = Vec::new();
    let mut runs = Vec::new();
    for e in store
        .subject_entries(subject, &[RecordKind::Revision, RecordKind::Run], 0)
        .unwrap()
    {
        match e.record {
            Record::Revision(r) => revisions.push(r.id),
            Record::Run(r) => runs.push(r.revision),
            _ => {}
        }
    }
    (revisions, runs)
}

/// A revision id is the subject's only once its entry is committed: a run whose recording fails
/// (here the database refuses every ledger entry) leaves no revision behind, and the next run
/// records the new revision under that id. Before, the failed run had already made it current
/// in memory: the next run saw nothing new, recorded no revision, and named one the ledger
/// never held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_whose_run_fails_to_record_is_allocated_again_with_its_entry() {
    let (dir, endpoint, subject, daemon) = one_subject().await;
    let run = || daemon.free_run(&subject);

    let first = run().await;
    assert_eq!(first.error, None);
    // The price changes (a new revision) while the ledger refuses entries.
    *endpoint.amount.lock().unwrap() = 20_000;
    let db = rusqlite::Connection::open(dir.path().join("ledger.sqlite")).unwrap();
    db.execute_batch(
        "CREATE TRIGGER refuse_entries BEFORE INSERT ON entry
             BEGIN SELECT RAISE(ABORT, 'injected: entries refused'); END;",
    )
    .unwrap();
    let refused = run().await;
    assert!(
        refused
            .error
            .as_deref()
            .unwrap_or("")
            .contains("entries refused"),
        "{:?}",
        refused.error
    );
    db.execute_batch("DROP TRIGGER refuse_entries").unwrap();
    let again = run().await;
    assert_eq!(again.error, None);

    let (revisions, runs) = revisions_and_runs(dir.path(), &subject);
    assert_eq!(revisions, ["r0", "r1"], "the new revision is recorded");
    assert_eq!(runs, ["r0", "r1"], "each run names a recorded revision");
}

/// A score whose entry fails to record leaves no state kept in memory for its subject: every
/// state the writer keeps is one a score in the ledger records. (With several vantages, the
/// state of a score that failed had folded the other vantages' entries at a point no score
/// records, and the states kept with later scores then differed from `recompute`'s fold.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_score_that_fails_to_record_leaves_no_kept_state() {
    let (dir, _endpoint, subject, daemon) = one_subject().await;
    let kept = |daemon: &Daemon| {
        let mut windows = daemon.shared().windows.lock().unwrap();
        let state = windows.take(&subject);
        let through = state.as_ref().map(|s| s.through_seq);
        if let Some(state) = state {
            windows.put(&subject, state);
        }
        through
    };

    let first = daemon.free_run(&subject).await;
    assert!(
        first.error.is_none() && first.summary.is_some(),
        "{:?}",
        first.error
    );
    let scored_through = kept(&daemon).expect("the scored subject's state is kept");
    // The ledger refuses score entries, not runs.
    let db = rusqlite::Connection::open(dir.path().join("ledger.sqlite")).unwrap();
    db.execute_batch(
        "CREATE TRIGGER refuse_scores BEFORE INSERT ON entry WHEN NEW.kind = 'score'
             BEGIN SELECT RAISE(ABORT, 'injected: scores refused'); END;",
    )
    .unwrap();
    let refused = daemon.free_run(&subject).await;
    assert_eq!(refused.error, None, "the run is recorded");
    assert!(refused.summary.is_none(), "its score is not");
    assert_eq!(
        kept(&daemon),
        None,
        "no state is kept past the last recorded score"
    );
    db.execute_batch("DROP TRIGGER refuse_scores").unwrap();
    // The next score starts from the stored state and the ledger, and is kept again.
    let again = daemon.free_run(&subject).await;
    assert!(again.summary.is_some(), "{:?}", again.error);
    assert!(kept(&daemon).is_some_and(|through| through > scored_through));
}

/// Rows the scoring path reads that do not read back are never used as if they did: a day of a
/// subject's kept state that does not match its digest is refused and the state rebuilt from the
/// ledger (the score is then the ledger's), and a declaration that does not parse is `Corrupt`
/// and fails the run that reads it. Before, unreadable rows were skipped in silence and the score
/// published as if they had never been recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_that_do_not_read_are_corrupt_never_skipped() {
    let (dir, _endpoint, subject, daemon) = one_subject().await;
    let shared = daemon.shared().clone();
    let run = || daemon.free_run(&subject);
    let scores = || {
        shared
            .store
            .subject_entries(&subject, &[RecordKind::Score], 0)
            .unwrap()
            .len()
    };
    let first = run().await;
    assert!(first.error.is_none() && first.summary.is_some());
    assert_eq!(scores(), 1);

    let db = rusqlite::Connection::open(dir.path().join("ledger.sqlite")).unwrap();
    let damaged = db
        .execute(
            "UPDATE subject_days SET body = CAST('{\"cells\": 1' AS BLOB) WHERE subject = ?1",
            [&subject],
        )
        .unwrap();
    assert!(damaged > 0, "the subject's days are stored");
    let stored = shared.store.subject_state(&subject).unwrap().unwrap();
    assert!(
        crate::daemon::subject_state::SubjectState::from_row(&stored).is_err(),
        "the damaged day is refused"
    );
    // The state the writer kept in memory (folded from the entries) would serve the next
    // rescore; as after a restart, the state now comes from the store, and is rebuilt.
    let kept = shared.windows.lock().unwrap().take(&subject);
    assert!(kept.is_some_and(|state| !state.days.is_empty()));
    let second = run().await;
    assert!(second.summary.is_some(), "scored from the ledger's fold");
    assert_eq!(scores(), 2);

    db.execute(
        "UPDATE declared SET body = CAST('not json' AS BLOB) WHERE subject = ?1",
        [&subject],
    )
    .unwrap();
    let third = run().await;
    let error = third
        .error
        .expect("the run reports the unreadable declaration");
    assert!(error.contains("does not read"), "{error}");
}

/// What the daemon's start and the API's view read for every subject (`checked_latest_score`,
/// the newest row alone, and `checked_latest_headline`, its headline) says what the full check
/// of every row (`checked_scores`) says of the latest score: served when intact, withheld and
/// named when the newest row is altered, and a newest score entry without its row named when
/// the row is deleted. The headline served is the document's: the one kept in the row, or
/// derived again from the document when the row keeps none (an older ledger), one of another
/// document, or one edited to say other figures than the ledger's entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latest_score_read_alone_agrees_with_every_row_checked() {
    use crate::score::headline::ScoreHeadline;
    use crate::store::{checked_latest_headline, checked_latest_score, checked_scores};
    let (dir, _endpoint, subject, daemon) = one_subject().await;
    let shared = daemon.shared().clone();
    for _ in 0..2 {
        let done = daemon.free_run(&subject).await;
        assert!(done.error.is_none() && done.summary.is_some());
    }
    let store = shared.store.as_ref();
    let newest = store
        .latest_subject_entry(&subject, RecordKind::Score)
        .unwrap()
        .expect("a score entry")
        .seq;
    let agree = |served: bool, named: Option<u64>| {
        let alone = checked_latest_score(store, &subject).unwrap();
        let every = checked_scores(store, &subject).unwrap();
        assert_eq!(alone.latest, every.latest);
        assert_eq!(alone.latest.is_some(), served, "{alone:?}");
        assert_eq!(
            alone.latest.as_ref().map(|r| r.seq),
            served.then_some(newest)
        );
        let seqs = |c: &crate::store::CheckedScores| -> Vec<u64> {
            c.mismatches.iter().map(|b| b.seq).collect()
        };
        assert_eq!(seqs(&alone), named.into_iter().collect::<Vec<_>>());
        assert_eq!(seqs(&alone), seqs(&every));
        let (headline, mismatches) = checked_latest_headline(store, &subject).unwrap();
        assert_eq!(
            mismatches.iter().map(|b| b.seq).collect::<Vec<_>>(),
            seqs(&every)
        );
        assert_eq!(headline.withheld, !served);
        let derived = every.latest.as_ref().map(|row| {
            (
                row.seq,
                Ok(ScoreHeadline::of_stored(&row.document).unwrap()),
            )
        });
        assert_eq!(headline.latest, derived);
    };
    // The start's one read of every subject: the headline alone when it is the newest entry's
    // (`None`: the subject is read again by the full check).
    let start = || {
        let mut rows = Vec::new();
        store
            .start_rows(&mut |row| {
                if row.subject == subject {
                    rows.push(row);
                }
            })
            .unwrap();
        assert_eq!(rows.len(), 1, "one row per subject");
        crate::store::start_headline(&rows[0])
    };
    agree(true, None);
    let (served, _) = checked_latest_headline(store, &subject).unwrap();
    assert_eq!(start(), Some(served.clone()));
    let db = rusqlite::Connection::open(dir.path().join("ledger.sqlite")).unwrap();
    let kept = || -> Option<Vec<u8>> {
        db.query_row(
            "SELECT h.headline FROM score s LEFT JOIN score_headline h
             ON h.subject = s.subject AND h.day = s.day WHERE s.subject = ?1 AND s.seq = ?2",
            rusqlite::params![&subject, newest as i64],
            |r| r.get(0),
        )
        .unwrap()
    };
    let headline: ScoreHeadline = serde_json::from_slice(&kept().expect("kept")).unwrap();
    let set_headline = |bytes: Option<Vec<u8>>| {
        db.execute(
            "DELETE FROM score_headline WHERE subject = ?1
             AND day = (SELECT day FROM score WHERE subject = ?1 AND seq = ?2)",
            rusqlite::params![&subject, newest as i64],
        )
        .unwrap();
        if let Some(bytes) = bytes {
            db.execute(
                "INSERT INTO score_headline (subject, day, headline)
                 SELECT subject, day, ?1 FROM score WHERE subject = ?2 AND seq = ?3",
                rusqlite::params![bytes, &subject, newest as i64],
            )
            .unwrap();
        }
    };
    // None kept (a ledger from before headlines), one of another document, one edited to say
    // another capped score and verdict: the document's is served all the same.
    let mut other_document = headline.clone();
    other_document.document_sha256 = "0".repeat(64);
    let mut edited = headline.clone();
    edited.capped_score = crate::score::points::Points::from_f64(97.5);
    edited.verdict = match headline.verdict {
        crate::rubric::Verdict::Ok => crate::rubric::Verdict::Avoid,
        _ => crate::rubric::Verdict::Ok,
    };
    for bytes in [
        None,
        Some(b"not json".to_vec()),
        Some(other_document.to_bytes()),
        Some(edited.to_bytes()),
    ] {
        set_headline(bytes);
        agree(true, None);
        assert_eq!(
            start(),
            None,
            "a headline that is not the entry's is not read at the start"
        );
    }
    // `ledger verify` names a kept headline that is not its document's.
    let verify = || {
        store
            .verify(None, true)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    set_headline(Some(headline.to_bytes()));
    assert_eq!(verify(), Ok(()));
    set_headline(Some(edited.to_bytes()));
    let refused = verify().expect_err("an edited headline is named");
    assert!(refused.contains("headline"), "{refused}");
    // A ledger from before headlines (none kept, never derived), opened for writing: the
    // headline is derived.
    set_headline(None);
    db.execute("DELETE FROM meta WHERE key = 'score_headlines'", [])
        .unwrap();
    drop(crate::store::sqlite::SqliteStore::open(dir.path()).unwrap());
    assert_eq!(kept(), Some(headline.to_bytes()));
    assert_eq!(start(), Some(served.clone()));
    // A document edited under an intact headline: the start reads the headline, which says
    // what the entry published; the document is refused where it is read (its page, its
    // envelope), by the check of its hash.
    db.execute(
        "UPDATE score SET document = CAST('{}' AS BLOB) WHERE subject = ?1",
        [&subject],
    )
    .unwrap();
    agree(false, Some(newest));
    assert_eq!(start(), Some(served));
    db.execute("DELETE FROM score WHERE subject = ?1", [&subject])
        .unwrap();
    agree(false, Some(newest));
    assert_eq!(
        start(),
        None,
        "an entry without its row is read by the full check"
    );
}

/// The same evidence gives the same inputs (digest, Monte Carlo seed, band) whether `probe`
/// scores it or the daemon does: one run's evidence scored by the CLI's path
/// (`runner::single_run_inputs`) and by the functions the daemon's rescore and `recompute` use
/// (history rows, revisions, the declared price, `scoring::inputs_document`), numbered and dated
/// alike. Before, the CLI wrote the price `0.01` and the daemon `0.010000`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_and_the_daemon_give_the_same_evidence_the_same_inputs_digest() {
    use crate::evidence::run::RunRecord;
    use crate::score::input::{Inputs, InputsDocument};
    let endpoint = Quoting::start(10_000).await;
    crate::install_crypto_provider();
    let rubric = crate::rubric::Rubric::embedded_default();
    let mut free = crate::probe::free::FreeProbeConfig::default();
    free.fetch.allow_private = true;
    free.samples = 1;
    let out = crate::runner::free_run(&free, &rubric, &endpoint.url, 1_800_000_000).await;
    let cli = crate::runner::single_run_inputs(&rubric, &out, "weather", Provenance::Live);
    assert_eq!(
        serde_json::to_value(&cli.subject.price_usd).unwrap(),
        "0.010000"
    );

    // The daemon's reading of the same run: its record, its history rows (from seq 0, as the
    // CLI numbers them), its first revision, the declared price, as of the CLI's time.
    let at_ms = out.free.at * 1000;
    let record = RunRecord {
        id: "run".into(),
        subject: out.free.subject.clone(),
        vantage: out.free.vantage.clone(),
        started_at_ms: at_ms,
        ended_at_ms: at_ms,
        provenance: Provenance::Live,
        revision: "r0".into(),
        free: out.free.clone(),
        paid: None,
        results: out.results.clone(),
    };
    let declared = crate::checks::history::declared(&out.free, at_ms).expect("a 402 declared");
    let revision = crate::ledger::record::RevisionRecord {
        subject: record.subject.clone(),
        id: "r0".into(),
        at_ms,
        fingerprint: declared.fingerprint.clone(),
        previous: None,
        changed: Vec::new(),
    };
    let daemon = scoring::inputs_document(
        &rubric,
        scoring::SubjectInputs {
            url: record.subject.clone(),
            category: "weather".into(),
            price_usd: declared.price_usd().unwrap_or_default(),
            revisions: scoring::revisions_for(&[revision]),
            history: crate::history::run_rows(&rubric, &record).to_vec(),
            population: Vec::new(),
            as_of_ms: crate::clock::ms_of(&cli.as_of).unwrap(),
            provenance: Provenance::Live,
        },
    );
    let digest = |doc: &InputsDocument| {
        let inputs = Inputs::from_document(doc.clone()).unwrap();
        let scored = crate::score::score(
            &rubric,
            &inputs,
            crate::score::montecarlo::Sampler::InverseCdfTable,
        )
        .unwrap();
        (
            scored.inputs_sha256.clone(),
            scored.band.low,
            scored.band.high,
        )
    };
    assert_eq!(digest(&cli), digest(&daemon));
}

/// Our RPC's window: opened once after `RPC_OUTAGE_AFTER_RUNS` failed reads in a row (from
/// just after the last good one), never again while open, closed once by the next good read.
#[test]
fn the_rpc_window_opens_once_and_closes_once() {
    let mut rpc = RpcHealth::default();
    let failed = RpcRead::Failed("down".into());
    assert_eq!(rpc.step(&RpcRead::Worked, 10), None);
    assert_eq!(rpc.step(&failed, 20), None);
    assert_eq!(rpc.step(&RpcRead::NotAsked, 25), None);
    assert_eq!(rpc.step(&failed, 30), None);
    assert!(matches!(
        rpc.step(&failed, 40),
        Some(OutageRecord::Opened {
            from_ms: 11,
            of: OutageOf::Rpc,
            ..
        })
    ));
    assert_eq!(rpc.step(&failed, 50), None, "open already");
    assert_eq!(
        rpc.step(&RpcRead::Worked, 60),
        Some(OutageRecord::Closed {
            from_ms: 11,
            to_ms: 60,
            of: OutageOf::Rpc
        })
    );
    assert_eq!(rpc.step(&RpcRead::Worked, 70), None, "closed already");
}

/// A subject's paid calls held by a spend limit go again once a reload changes the caps (the
/// cap that declined them may allow them now); a reload that leaves the caps as they were keeps
/// the wait. Against the lab's chain, wallet and endpoint: a daemon that pays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_the_caps_ends_a_spend_limits_wait() {
    crate::install_crypto_provider();
    let lab = x402_lab::Lab::start_with(x402_lab::LabOptions {
        scenarios: Some(vec!["honest-v2".into()]),
        ..Default::default()
    })
    .await
    .unwrap();
    let url = lab.endpoint("honest-v2").unwrap().url.clone();
    let dir = tempfile::tempdir().unwrap();
    ReporterKey::generate(&dir.path().join("reporter.key")).unwrap();
    let mut config = x402_lab::daemon_config::LabDaemonConfig::new(dir.path());
    config.subjects = vec![(url.clone(), "weather".into())];
    config.tail = "[api]\nenabled = false\n".into();
    let path = dir.path().join("daemon.toml");
    let write = |per_subject: &str| {
        let mut c = config.clone();
        c.pay = Some(x402_lab::daemon_config::PayCaps {
            per_subject_per_day: per_subject.into(),
            ..Default::default()
        });
        std::fs::write(&path, c.text(&lab)).unwrap();
    };
    write("0.005");
    let mut daemon = Daemon::open(
        DaemonConfig::read(&path).unwrap(),
        Some(path.clone()),
        TimeSource::System,
    )
    .await
    .unwrap();
    let key = daemon.subjects.keys().next().cloned().expect("the subject");
    let held = Some(i64::MAX);
    daemon.subjects.get_mut(&key).unwrap().paid_held_until_ms = held;

    // The same caps: the wait stays.
    daemon.reload();
    assert_eq!(daemon.subjects[&key].paid_held_until_ms, held);
    // A cap changed: the wait ends.
    write("0.50");
    daemon.reload();
    assert_eq!(daemon.subjects[&key].paid_held_until_ms, None);
}
