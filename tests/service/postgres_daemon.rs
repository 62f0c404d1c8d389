//! The daemon on PostgreSQL (`[store] postgres`): two simulated days against the lab with its
//! whole store in a real database (a throwaway cluster, or `X402_PROBE_TEST_POSTGRES`); the
//! vantage's log verifies with `ledger verify --postgres` under the reporter key, every published
//! score recomputes byte for byte with `recompute --postgres`, and a database that cannot be
//! reached fails the daemon's start with a clear error.

use crate::daemon_support;

use std::process::{Command, Output};
use std::sync::Arc;

use daemon_support::*;
use x402_lab::postgres::Postgres;
use x402_probe::clock::ManualClock;
use x402_probe::ledger::key::ReporterKey;
use x402_probe::store::Store;
use x402_probe::store::postgres::PgLedger;

fn probe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn a_daemon_on_postgres_over_two_days_verifies_and_its_scores_recompute() {
    let pg = Postgres::start().expect("PostgreSQL starts");
    let url = pg.fresh_database("daemon").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let subjects = runtime.block_on(async {
        let lab = lab(&["honest-v2", "honest-v1"]).await;
        let start = start_ms();
        let clock = Arc::new(ManualClock::at_ms(start));
        let mut settings = Settings::new(&state);
        settings.subjects = lab.endpoints.iter().map(|e| e.url.clone()).collect();
        settings.pay = false;
        settings.free_every_secs = 3 * 3600;
        let config = format!(
            "{}\n[store]\npostgres = \"{url}\"\n",
            config_text(&lab, &settings)
        );
        run_simulated(&config, clock, start + 2 * DAY).await;
        settings.subjects.clone()
    });
    drop(runtime);
    // Nothing of the ledger in the state directory: the store is the database.
    assert!(!state.join("ledger.sqlite").exists());
    let key = ReporterKey::from_key_file(&state.join("reporter.key")).unwrap();

    let log = PgLedger::open_existing(&url, Some("lab")).unwrap();
    assert_eq!(log.public_key(), key.public_key());
    for subject in &subjects {
        let canonical = x402_probe::http_url::canonical_subject_url(subject).unwrap();
        let row = log.latest_score(&canonical).unwrap();
        assert!(row.is_some(), "{canonical} has a score row");
    }
    assert_eq!(log.subjects().unwrap().len(), subjects.len());
    let (head, _) = log.head().unwrap();
    assert!(head > 20, "{head} entries");
    drop(log);

    let pubkey = hex::encode(key.public_key());
    let out = probe(&[
        "ledger",
        "verify",
        "--postgres",
        &url,
        "--vantage",
        "lab",
        "--pubkey",
        &pubkey,
        "--quiet",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("vantage \"lab\""), "{said}");
    assert!(said.contains("signed by the trusted key"), "{said}");

    // The only vantage: found without --vantage.
    let out = probe(&["recompute", "--postgres", &url, "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("recomputed from the ledger byte for byte"),
        "{said}"
    );

    // Another vantage's name: refused, naming the ones there.
    let out = probe(&["ledger", "verify", "--postgres", &url, "--vantage", "nope"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("lab"), "{}", text(&out.stderr));
}

#[test]
fn an_unreachable_database_fails_the_daemons_start_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    ReporterKey::generate(&state.join("reporter.key")).unwrap();
    // A port nothing listens on, held for the test.
    let port = refusing_addr().port();
    let config = format!(
        "[daemon]\nstate_dir = \"{}\"\nreporter_key = {{ key_file = \"{}\" }}\n\
         [api]\nenabled = false\n\
         [store]\npostgres = \"postgres://probe:secret@127.0.0.1:{port}/x402\"\n",
        state.display(),
        state.join("reporter.key").display()
    );
    let path = write_config(dir.path(), &config);
    let started = std::time::Instant::now();
    let out = probe(&["daemon", "--config", path.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert!(stderr.contains("PostgreSQL"), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
    assert!(
        !stderr.contains("secret"),
        "the password is never shown: {stderr}"
    );
}
