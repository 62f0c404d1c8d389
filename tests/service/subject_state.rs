//! The folded subject state (`daemon/subject_state.rs`) after a multi-day daemon run against the
//! lab: the state the daemon kept is the fold of the ledger from scratch, a damaged state is
//! rebuilt from the ledger (never trusted), a subject that never answered is scored, and
//! `recompute --ledger` still re-derives every published score.

use crate::daemon_support;

use std::sync::Arc;

use daemon_support::*;
use x402_lab::dynamic::Timeline;
use x402_probe::clock::ManualClock;
use x402_probe::daemon::subject_state::{self, FOLDED_KINDS, SubjectState};
use x402_probe::ledger::record::Record;
use x402_probe::rubric::Rubric;
use x402_probe::store::{SqliteStore, Store};

/// The subject's state folded from its first entry, with nothing the daemon kept.
fn fold_from_scratch(store: &SqliteStore, rubric: &Rubric, url: &str) -> SubjectState {
    let mut state = SubjectState::new();
    for mut entry in store.subject_entries(url, &FOLDED_KINDS, 0).unwrap() {
        if let Record::Run(_) = &entry.record {
            store.restore_bodies(&mut entry.record).unwrap();
        }
        state.fold(rubric, entry.seq, &entry.record);
    }
    state
}

/// The state as a rescore would read it now (what the daemon kept, brought to the head).
fn loaded(store: &SqliteStore, rubric: &Rubric, url: &str) -> SubjectState {
    let (head, _) = store.head().unwrap();
    subject_state::load(store, rubric, url, head, 180).unwrap()
}

/// What both must agree on (the window's start and the horizon are the kept state's own).
fn comparable(mut state: SubjectState, through: u64) -> SubjectState {
    state.through_seq = through;
    state.window_from = 0;
    state.horizon_days = 0;
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kept_state_is_the_ledgers_fold_a_damaged_one_is_rebuilt_and_a_silent_subject_is_scored()
 {
    let mut lab = lab(&["honest-v2"]).await;
    let start = start_ms();
    let clock = Arc::new(ManualClock::at_ms(start));
    let at = |d: f64| start + (d * DAY as f64) as i64;
    // A noted price rise on day 1: a second revision to fold.
    let rising = lab
        .spawn_variant(
            "honest-v2",
            "price-noted",
            Timeline {
                price: vec![(at(1.0), 30_000)],
                notes: vec![(at(1.0), note(at(1.0), "price_change", Some("30000"), None))],
                ..Timeline::default()
            },
            lab_clock(&clock),
        )
        .await
        .unwrap();
    let steady = lab.endpoint("honest-v2").unwrap().url.clone();
    // Nothing listens there: it never answers, and its runs name a revision no entry declares.
    let silent = "https://127.0.0.1:9/never".to_string();

    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(dir.path());
    settings.subjects = vec![rising.clone(), steady.clone(), silent.clone()];
    settings.pay_from_first_run = true;
    let text = config_text(&lab, &settings);
    run_simulated(&text, clock.clone(), at(3.0)).await;

    let rubric = Rubric::embedded_default();
    let store = SqliteStore::open(dir.path()).unwrap();
    for url in [&rising, &steady, &silent] {
        let kept = store.subject_state(url).unwrap().expect("a kept state");
        let state = SubjectState::from_row(&kept).expect("the kept state reads back");
        let scratch = fold_from_scratch(&store, &rubric, url);
        assert!(!scratch.days.is_empty(), "{url} has history");
        assert_eq!(
            comparable(state.clone(), 0),
            comparable(scratch.clone(), 0),
            "{url}: the kept state is the ledger's fold"
        );
        // With its days read back, it is the whole fold.
        let now = loaded(&store, &rubric, url);
        assert!(now.days == scratch.days, "{url}: the window's days differ");
        assert_eq!(comparable(now, 0), comparable(scratch, 0));
    }
    let folded = fold_from_scratch(&store, &rubric, &rising);
    assert_eq!(folded.revisions.len(), 2, "r0 and the noted rise");
    assert_eq!(
        folded.price_usd,
        x402_probe::evidence::usd::Usd::of_micros(30_000)
    );
    assert!(folded.paid_calls >= 1 && folded.last_paid.is_some());

    // The subject that never answered is scored, as the rubric scores no evidence.
    let silent_scores = scores(&store, &silent);
    assert!(
        silent_scores.len() >= 8,
        "one score per run ({} scores)",
        silent_scores.len()
    );
    let doc = latest_document(&store, &silent);
    assert_eq!(check(&doc, "R1")["passes"], 0);
    assert_ne!(doc["verdict"]["verdict"], "verified", "{}", doc["verdict"]);

    let recomputed =
        x402_probe::daemon::recompute::recompute_ledger(&store, std::slice::from_ref(&rubric))
            .unwrap();
    assert_eq!(recomputed.mismatches, vec![]);
    assert_eq!(recomputed.derived, vec![]);
    assert!(recomputed.scores > 40, "{} scores", recomputed.scores);

    // A kept state altered on disk (it still decodes, its digest no longer matches) is not
    // used: the state is rebuilt from the ledger, and the next scores are still the ledger's.
    let before = loaded(&store, &rubric, &rising);
    let conn = rusqlite::Connection::open(dir.path().join("ledger.sqlite")).unwrap();
    let body: Vec<u8> = conn
        .query_row(
            "SELECT body FROM subject_state WHERE subject = ?1",
            [&rising],
            |r| r.get(0),
        )
        .unwrap();
    let text = String::from_utf8(body).unwrap();
    assert!(text.contains("\"price_usd\":\"0.03\""), "{text}");
    let forged = text.replace("\"price_usd\":\"0.03\"", "\"price_usd\":\"9.99\"");
    conn.execute(
        "UPDATE subject_state SET body = ?1 WHERE subject = ?2",
        rusqlite::params![forged.as_bytes(), &rising],
    )
    .unwrap();
    let rebuilt = loaded(&store, &rubric, &rising);
    assert_eq!(
        rebuilt.price_usd,
        x402_probe::evidence::usd::Usd::of_micros(30_000),
        "the forged price is not read"
    );
    assert!(
        rebuilt.days == before.days,
        "the rebuilt state's days differ"
    );
    assert_eq!(comparable(rebuilt, 0), comparable(before.clone(), 0));
    drop(store);
    run_simulated(&text_of(&lab, &settings), clock.clone(), at(3.5)).await;
    let store = SqliteStore::open(dir.path()).unwrap();
    // A state the writer kept in memory with its rows (here the one read before the run) is
    // brought forward to the same state as the stored one with its rows read from the index.
    let (head, _) = store.head().unwrap();
    assert!(head > before.through_seq, "the run added entries");
    let from_memory = subject_state::load_known(
        &store,
        &rubric,
        &rising,
        head,
        180,
        Some(before.clone()),
        Default::default(),
    )
    .unwrap();
    let from_store = loaded(&store, &rubric, &rising);
    assert!(from_memory.size() > before.size());
    assert!(
        from_memory.days == from_store.days,
        "the days brought forward differ"
    );
    assert_eq!(comparable(from_memory, 0), comparable(from_store, 0));
    let kept = store.subject_state(&rising).unwrap().unwrap();
    let state = SubjectState::from_row(&kept).expect("a good state was kept again");
    assert_eq!(
        state.price_usd,
        x402_probe::evidence::usd::Usd::of_micros(30_000)
    );
    let recomputed =
        x402_probe::daemon::recompute::recompute_ledger(&store, std::slice::from_ref(&rubric))
            .unwrap();
    assert_eq!(recomputed.mismatches, vec![]);
    assert_eq!(recomputed.derived, vec![]);
}

fn text_of(lab: &x402_lab::Lab, settings: &Settings) -> String {
    config_text(lab, settings)
}
