//! `x402-probe-lab simulate` as a user runs it: a small population (12 endpoints over 16 days) through
//! the real binary, lab, daemon, chain and store; then what it wrote: labels that validate and
//! follow the truth's window rule, score documents and runs all marked `synthetic_fixture`, and a
//! daemon state that holds nothing of the hidden truth.

use crate::process_support;
use std::path::Path;

use process_support::run;

use serde_json::Value;
use x402_lab::population::{Class, HORIZON_DAYS};
use x402_probe::calibrate::labels::LabelsDocument;
use x402_probe::evidence::run::Provenance;
use x402_probe::ledger::record::Record;
use x402_probe::store::{SqliteStore, Store};

const SUBJECTS: usize = 12;
const DAYS: u32 = 16;

/// Every file of the daemon's state directory, concatenated (the ledger, its WAL, the spend store
/// and the configuration the daemon was given).
fn state_bytes(state: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(state).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            all.extend(std::fs::read(&path).unwrap());
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

#[test]
fn a_small_population_runs_through_the_daemon_and_leaves_labels_truth_and_a_clean_ledger() {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("sim");
    let out_arg = out.to_str().unwrap();
    let (code, text) = run(&[
        "simulate",
        "--out",
        out_arg,
        "--subjects",
        &SUBJECTS.to_string(),
        "--days",
        &DAYS.to_string(),
        "--seed",
        "5",
    ]);
    assert_eq!(code, 0, "{text}");
    for line in [
        "subjects",
        "days",
        "runs",
        "paid calls",
        "USD spent",
        "wall time",
        "labelled failing",
    ] {
        assert!(text.lines().any(|l| l.starts_with(line)), "{line}: {text}");
    }
    assert!(text.contains("(0 not synthetic_fixture)"), "{text}");

    // The labels validate, name every endpoint by the daemon's subject id, and label the days
    // whose whole window lies inside the run: 16 days leave days 0 and 1.
    let labels = LabelsDocument::from_slice(&std::fs::read(out.join("labels.json")).unwrap())
        .expect("labels.json validates");
    assert_eq!(labels.provenance, Provenance::SyntheticFixture);
    assert_eq!(labels.horizon_days, HORIZON_DAYS);
    assert_eq!(labels.subjects.len(), SUBJECTS);
    let truth: Value =
        serde_json::from_slice(&std::fs::read(out.join("truth.json")).unwrap()).unwrap();
    assert_eq!(truth["provenance"], "synthetic_fixture");
    let truths = truth["subjects"].as_array().unwrap();
    assert_eq!(truths.len(), SUBJECTS);
    let start_day = &truth["start"].as_str().unwrap()[..10];

    let state = out.join("state");
    let store = SqliteStore::open(&state).unwrap();
    let mut checked_honest = 0;
    let mut checked_onsets = 0;
    for t in truths {
        let url = t["subject"].as_str().unwrap();
        let class = t["class"].as_str().unwrap();
        let days = &labels
            .subjects
            .iter()
            .find(|s| s.subject == url)
            .unwrap_or_else(|| panic!("{url} is labelled"))
            .days;
        assert_eq!(days.len(), (DAYS - HORIZON_DAYS) as usize, "{url}");
        assert_eq!(days[0].day, start_day);
        assert!(days.iter().all(|d| d.calls == HORIZON_DAYS));

        // Every daily score of every endpoint says what it is.
        let scores = store.daily_scores(url).unwrap();
        assert!(scores.len() >= DAYS as usize - 1, "{url}: {}", scores.len());
        for row in &scores {
            let doc: Value = serde_json::from_slice(&row.document).unwrap();
            assert_eq!(doc["provenance"], "synthetic_fixture", "{url} {}", row.day);
        }

        if class == Class::Honest.name() {
            assert!(days.iter().all(|d| !d.fails && d.failure_rate == Some(0.0)));
            checked_honest += 1;
        }
        // An endpoint whose only failures come from one paid-path fault from day k: exactly the
        // days whose window D+1..=D+14 reaches k are labelled failing.
        let faults = t["paid_faults"].as_array().unwrap();
        let shares_before = |k: u64| {
            t["reliability"]
                .as_array()
                .unwrap()
                .iter()
                .all(|s| s["from_day"].as_u64().unwrap() >= k || s["share"] == 0.0)
        };
        if let [fault] = &faults[..]
            && t["outages"].as_array().unwrap().is_empty()
        {
            let onset = fault["onset_day"].as_u64().unwrap();
            if shares_before(onset) {
                for (d, label) in days.iter().enumerate() {
                    let reaches = d as u64 + u64::from(HORIZON_DAYS) >= onset;
                    assert_eq!(label.fails, reaches, "{url} ({class}) day {d}: {label:?}");
                }
                checked_onsets += 1;
            }
        }
    }
    assert!(
        checked_honest >= 1,
        "the population holds an honest endpoint"
    );
    assert!(
        checked_onsets >= 2,
        "turns_bad and paid_path_broken at least"
    );

    // Every run in the ledger is a synthetic fixture.
    let mut runs = 0;
    let mut after = 0;
    loop {
        let page = store.entries_page(after, 256).unwrap();
        let Some(last) = page.last() else { break };
        after = last.seq;
        for e in &page {
            if let Record::Run(r) = &e.record {
                assert_eq!(r.provenance, Provenance::SyntheticFixture);
                runs += 1;
            }
        }
    }
    // Two free runs a day per endpoint, give or take the jitter and a failing endpoint's backoff.
    assert!(runs >= SUBJECTS * (DAYS as usize) * 3 / 2, "{runs} runs");
    drop(store);

    // Nothing of the truth reached the daemon: no class name, no truth field, anywhere in its
    // state (the ledger, its WAL, the spend store, the configuration).
    let bytes = state_bytes(&state);
    assert!(
        contains(&bytes, "synthetic_fixture"),
        "the scan reads the ledger"
    );
    for class in Class::ALL {
        assert!(!contains(&bytes, class.name()), "{} leaked", class.name());
    }
    for field in [
        "onset_day",
        "vantage_only",
        "paid_faults",
        "latency_free",
        "truth",
    ] {
        assert!(!contains(&bytes, field), "{field} leaked");
    }

    // The same --out again is refused: a simulation starts from nothing.
    let (code, text) = run(&[
        "simulate",
        "--out",
        out_arg,
        "--subjects",
        "1",
        "--days",
        "15",
    ]);
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("already holds a state"), "{text}");
    // Out-of-range sizes are usage errors.
    let other = root.path().join("other");
    let other_arg = other.to_str().unwrap();
    for bad in [
        ["--subjects", "0"],
        ["--subjects", "5001"],
        ["--days", "14"],
        ["--days", "366"],
        ["--lookahead-secs", "3601"],
        ["--lookahead-secs", "-1"],
    ] {
        let (code, text) = run(&["simulate", "--out", other_arg, bad[0], bad[1]]);
        assert_eq!(code, 2, "{bad:?}: {text}");
    }
    assert!(!other.exists(), "a usage error writes nothing");
}
