//! `x402-probe recalibrate` end to end: a real SQLite store written through the `Store` trait,
//! whose daily score rows are documents from the real scorer over generated histories (120
//! subjects over 40 days, a seeded population of good, flaky and bad endpoints), labels from the
//! population's hidden truth, and the real binary run on it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::recalibrate_support;

use recalibrate_support::*;
use x402_probe::calibrate::labels::{FORMAT, LabelSource, LabelsDocument, SubjectLabels};
use x402_probe::calibrate::read::{Labels, read_table};
use x402_probe::evidence::run::Provenance;
use x402_probe::rubric::{CheckId, EMBEDDED_DEFAULT, Rubric};
use x402_probe::store::sqlite::{STORE_FILE, SqliteStore};
use x402_probe::store::{ScoreRow, Store, SubjectRow};

const SUBJECTS: u32 = 120;
const DAYS: i64 = 40;

struct Fixture {
    /// The state directory of the base population.
    state: PathBuf,
    /// The same plus subjects scored only under a rubric of major version 2.
    state_with_major_2: PathBuf,
    labels: PathBuf,
    labels_99: PathBuf,
    labels_with_major_2: PathBuf,
    rubric: PathBuf,
    root: PathBuf,
}

fn write_labels(path: &Path, subjects: Vec<SubjectLabels>) {
    let mut subjects = subjects;
    subjects.sort_by(|a, b| a.subject.cmp(&b.subject));
    let doc = LabelsDocument {
        format: FORMAT.into(),
        provenance: Provenance::SyntheticFixture,
        // The same source for every file: the labels of extra subjects change nothing else.
        source: LabelSource::Simulator {
            seed: 7,
            population: SUBJECTS,
        },
        horizon_days: 14,
        subjects,
    };
    std::fs::write(path, doc.to_bytes().unwrap()).unwrap();
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("recalibrate");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let rubric = Rubric::embedded_default();
        let state = root.join("state");
        let store = SqliteStore::open(&state).unwrap();
        let ids: Vec<String> = (0..SUBJECTS).map(|i| url("s", i)).collect();
        let rows: Vec<SubjectRow> = ids
            .iter()
            .map(|u| SubjectRow::new_active(u.clone(), "data".into(), "config".into(), START_MS))
            .collect();
        store.put_subjects(&rows).unwrap();
        for (i, id) in ids.iter().enumerate() {
            score_subject(&store, &rubric, id, i as u32, DAYS);
        }
        drop(store);

        // The same store, plus 10 subjects scored under a major version 2 of the rubric.
        let state_with_major_2 = root.join("state-major-2");
        std::fs::create_dir_all(&state_with_major_2).unwrap();
        std::fs::copy(state.join(STORE_FILE), state_with_major_2.join(STORE_FILE)).unwrap();
        let mut v: serde_json::Value = serde_json::from_slice(EMBEDDED_DEFAULT).unwrap();
        v["version"] = "2.0.0-draft.1".into();
        let major_2 = Rubric::from_bytes(&serde_json::to_vec(&v).unwrap()).unwrap();
        let store = SqliteStore::open(&state_with_major_2).unwrap();
        let other: Vec<String> = (0..10).map(|i| url("m", i)).collect();
        let rows: Vec<SubjectRow> = other
            .iter()
            .map(|u| SubjectRow::new_active(u.clone(), "data".into(), "config".into(), START_MS))
            .collect();
        store.put_subjects(&rows).unwrap();
        for (i, id) in other.iter().enumerate() {
            score_subject(&store, &major_2, id, 1000 + i as u32, DAYS);
        }
        drop(store);

        let labels: Vec<SubjectLabels> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| labels_for(i as u32, &truth(i as u32), id.clone(), DAYS))
            .collect();
        let labels_path = root.join("labels.json");
        write_labels(&labels_path, labels.clone());
        let labels_99 = root.join("labels-99.json");
        write_labels(&labels_99, labels[..99].to_vec());
        let mut with_other = labels;
        with_other.extend(other.iter().enumerate().map(|(i, id)| {
            let n = 1000 + i as u32;
            labels_for(n, &truth(n), id.clone(), DAYS)
        }));
        let labels_with_major_2 = root.join("labels-major-2.json");
        write_labels(&labels_with_major_2, with_other);

        let rubric_path = root.join("rubric.json");
        std::fs::write(&rubric_path, EMBEDDED_DEFAULT).unwrap();
        Fixture {
            state,
            state_with_major_2,
            labels: labels_path,
            labels_99,
            labels_with_major_2,
            rubric: rubric_path,
            root,
        }
    })
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn recalibrate(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .arg("recalibrate")
        .args(args)
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn out_dir(name: &str) -> PathBuf {
    let dir = fixture().root.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Every daily score row of the store, as stored.
fn all_rows(state: &Path) -> Vec<ScoreRow> {
    let store = SqliteStore::open_read_only(&state.join(STORE_FILE)).unwrap();
    let mut rows = Vec::new();
    for s in store.subjects().unwrap() {
        rows.extend(store.daily_scores(&s.url).unwrap());
    }
    rows
}

#[test]
fn refuses_below_100_subjects_and_writes_nothing() {
    let f = fixture();
    let out = out_dir("out-refused");
    let run = recalibrate(&[
        "--state",
        s(&f.state),
        "--labels",
        s(&f.labels_99),
        "--out",
        s(&out),
    ]);
    assert_eq!(run.code, 4, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("99 subject(s) have a label with 14 days of follow-up"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("100 are needed (1 more)"),
        "{}",
        run.stdout
    );
    assert!(!out.exists(), "a refused run writes nothing");

    // Without a labels file the labels are the daemon's own paid calls: this store holds score
    // rows only (no run entries), so no subject has one.
    let run = recalibrate(&["--state", s(&f.state), "--out", s(&out)]);
    assert_eq!(run.code, 4, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("0 subject(s) have a label"),
        "{}",
        run.stdout
    );
}

#[test]
fn a_proposal_is_deterministic_and_never_changes_the_live_rubric() {
    let f = fixture();
    let rubric_before = std::fs::read(&f.rubric).unwrap();
    let rows_before = all_rows(&f.state);
    // The daemon's configuration names the live rubric; the second run finds it there.
    let config = f.root.join("x402-probe.toml");
    let config_text = format!(
        "[daemon]\nreporter_key = {{ key_file = \"/nonexistent/reporter.key\" }}\n\n[probe]\nrubric = {}\n",
        toml_string(s(&f.rubric))
    );
    std::fs::write(&config, &config_text).unwrap();
    let (a, b) = (out_dir("out-a"), out_dir("out-b"));
    let args = |out: &Path, live: [&str; 2]| {
        recalibrate(&[
            "--state",
            s(&f.state),
            "--labels",
            s(&f.labels),
            live[0],
            live[1],
            "--out",
            s(out),
        ])
    };
    let first = args(&a, ["--rubric", s(&f.rubric)]);
    assert_eq!(first.code, 0, "{}{}", first.stdout, first.stderr);
    let second = args(&b, ["--config", s(&config)]);
    assert_eq!(second.code, 0, "{}{}", second.stdout, second.stderr);
    assert_eq!(
        first.stdout.replace(s(&a), ""),
        second.stdout.replace(s(&b), "")
    );
    for name in ["proposal.json", "report.json", "report.html"] {
        let (x, y) = (
            std::fs::read(a.join(name)).unwrap(),
            std::fs::read(b.join(name)).unwrap(),
        );
        assert!(!x.is_empty());
        assert_eq!(x, y, "{name} differs between two runs on the same store");
    }
    // No temporary file is left behind.
    assert_eq!(std::fs::read_dir(&a).unwrap().count(), 3);

    // The live rubric, the configuration, the store and what the daemon scores with are untouched.
    assert_eq!(std::fs::read(&f.rubric).unwrap(), rubric_before);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), config_text);
    let named = x402_probe::config::DaemonConfig::read(&config)
        .unwrap()
        .probe
        .rubric;
    assert_eq!(named.as_deref(), Some(f.rubric.as_path()));
    assert_eq!(all_rows(&f.state), rows_before);
    let live = Rubric::from_bytes(&rubric_before).unwrap();
    assert_eq!(live.sha256(), Rubric::embedded_default().sha256());
    let stored: serde_json::Value = serde_json::from_slice(&rows_before[0].document).unwrap();
    assert_eq!(stored["rubric"]["sha256"], live.sha256());

    // The proposal: a new draft of the same rubric, valid, with monotone curves and calibration.
    let proposal = Rubric::from_bytes(&std::fs::read(a.join("proposal.json")).unwrap()).unwrap();
    assert_eq!(proposal.id, live.id);
    assert_eq!(proposal.version, "1.0.0-draft.2");
    assert_ne!(proposal.sha256(), live.sha256());
    assert_eq!(proposal.changelog.len(), live.changelog.len() + 1);
    assert!(
        proposal
            .changelog
            .last()
            .unwrap()
            .starts_with("1.0.0-draft.2 (")
    );
    for id in [CheckId::R3, CheckId::R7] {
        let (p, l) = (proposal.check(id).unwrap(), live.check(id).unwrap());
        let (pc, lc) = (p.curve.as_ref().unwrap(), l.curve.as_ref().unwrap());
        assert_eq!(
            pc.points.iter().map(|q| q.0).collect::<Vec<_>>(),
            lc.points.iter().map(|q| q.0).collect::<Vec<_>>(),
            "x knots stay fixed"
        );
        assert!(
            pc.points.windows(2).all(|w| w[0].1 >= w[1].1),
            "{id} monotone"
        );
        assert!(pc.points.iter().all(|q| (0.0..=100.0).contains(&q.1)));
    }
    let calibration = proposal.calibration.as_ref().unwrap();
    assert_eq!(calibration.horizon_days, 14);
    assert!(
        calibration
            .points
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 >= w[1].1)
    );
    // Weights and structure are unchanged.
    for (p, l) in proposal.checks.iter().zip(&live.checks) {
        assert_eq!(
            (&p.id, p.weight, &p.dimension),
            (&l.id, l.weight, &l.dimension)
        );
    }
    assert_eq!(proposal.dimensions, live.dimensions);

    // The report holds the figures the issue asks for, and the fast re-scoring matched.
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(a.join("report.json")).unwrap()).unwrap();
    // The live gates stay as they are; a gate is added only on a check the report weighed as a
    // candidate (a kind of paid-call failure the live rubric does not gate), at the threshold and
    // cap the report proposes, with `avoid`.
    assert_eq!(proposal.gates[..live.gates.len()], live.gates[..]);
    let evidence = report["fitted"]["gates"].as_array().unwrap();
    let weighed: Vec<&str> = evidence
        .iter()
        .map(|e| e["check"].as_str().unwrap())
        .collect();
    assert_eq!(weighed, vec!["R4", "R5", "H7"]);
    let proposed: Vec<&serde_json::Value> = evidence
        .iter()
        .filter(|e| !e["proposed"].is_null())
        .collect();
    assert_eq!(proposal.gates.len(), live.gates.len() + proposed.len());
    for (added, e) in proposal.gates[live.gates.len()..].iter().zip(&proposed) {
        assert_eq!(added.check, e["check"].as_str().unwrap());
        assert_eq!(added.flag, e["flag"].as_str().unwrap());
        assert_eq!(Some(added.value), e["proposed"].as_f64());
        assert_eq!(added.cap, e["cap"].as_f64());
        assert_eq!(added.verdict, Some(x402_probe::rubric::Verdict::Avoid));
    }
    assert!(report["verdicts_proposal"]["ok_rows"].is_u64());
    assert_eq!(report["format"], "x402-probe.calibration-report/1");
    assert_eq!(report["counts"]["subjects_followed_up"], 120);
    assert_eq!(report["counts"]["rescoring_mismatches"], 0);
    assert_eq!(
        report["counts"]["rescored_rows_checked"],
        SUBJECTS as u64 * DAYS as u64
    );
    for key in [
        "auc_draft",
        "auc_proposal",
        "brier_draft_linear",
        "brier_proposal",
    ] {
        let x = report["held_out_period"][key].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&x), "{key} {x}");
    }
    // The generated population is separable: the draft's score already ranks it.
    assert!(
        report["all"]["auc_draft"].as_f64().unwrap() > 0.7,
        "{}",
        report["all"]
    );
    assert!(report["held_out_subjects"]["rows"].as_u64().unwrap() > 0);
    assert_eq!(report["goals"].as_array().unwrap().len(), 8);
    // A missed goal says by how much and why (from the report's own figures); a met one does not.
    let mut missed = 0;
    for g in report["goals"].as_array().unwrap() {
        let is_missed = g["met"] == serde_json::json!(false);
        assert_eq!(g.get("why").is_some(), is_missed, "{g}");
        assert_eq!(g.get("shortfall").is_some(), is_missed, "{g}");
        if is_missed {
            missed += 1;
            let target: f64 = g["target"].as_str().unwrap()[3..].parse().unwrap();
            let by = (g["measured"].as_f64().unwrap() - target).abs();
            assert!((g["shortfall"].as_f64().unwrap() - by).abs() < 1e-4, "{g}");
            assert!(
                g["why"].as_str().unwrap().contains("What would fix it"),
                "{g}"
            );
        }
    }
    let html = std::fs::read_to_string(a.join("report.html")).unwrap();
    assert_eq!(html.contains("Missed goals"), missed > 0);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<svg").count(), 4);
    assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("href="));

    // Accepting checks the proposal and prints the configuration line; it changes nothing.
    let accept = recalibrate(&[
        "--rubric",
        s(&f.rubric),
        "--accept",
        s(&a.join("proposal.json")),
    ]);
    assert_eq!(accept.code, 0, "{}{}", accept.stdout, accept.stderr);
    assert!(accept.stdout.contains("rubric = \""), "{}", accept.stdout);
    assert_eq!(std::fs::read(&f.rubric).unwrap(), rubric_before);
    // The live rubric itself is no proposal.
    let same = recalibrate(&["--rubric", s(&f.rubric), "--accept", s(&f.rubric)]);
    assert_eq!(same.code, 2, "{}", same.stdout);
}

#[test]
fn documents_under_another_major_version_change_nothing_but_their_count() {
    let f = fixture();
    let (a, b) = (out_dir("out-major-1"), out_dir("out-major-2"));
    let base = recalibrate(&[
        "--state",
        s(&f.state),
        "--labels",
        s(&f.labels),
        "--out",
        s(&a),
    ]);
    assert_eq!(base.code, 0, "{}{}", base.stdout, base.stderr);
    let mixed = recalibrate(&[
        "--state",
        s(&f.state_with_major_2),
        "--labels",
        s(&f.labels_with_major_2),
        "--out",
        s(&b),
    ]);
    assert_eq!(mixed.code, 0, "{}{}", mixed.stdout, mixed.stderr);
    assert_eq!(
        std::fs::read(a.join("proposal.json")).unwrap(),
        std::fs::read(b.join("proposal.json")).unwrap()
    );
    let read = |dir: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
    };
    let (mut x, mut y) = (read(&a), read(&b));
    assert_eq!(x["counts"]["other_major_documents"], 0);
    assert_eq!(y["counts"]["other_major_documents"], 10 * DAYS as u64);
    x["counts"]["other_major_documents"] = 0.into();
    y["counts"]["other_major_documents"] = 0.into();
    assert_eq!(x, y);
}

#[test]
fn the_fast_rescoring_reproduces_every_stored_score() {
    let f = fixture();
    let live = Rubric::embedded_default();
    let store = SqliteStore::open_read_only(&f.state.join(STORE_FILE)).unwrap();
    let (table, summary) = read_table(&store, &live, Labels::Ledger, None, 14).unwrap();
    assert_eq!(table.rows.len(), (SUBJECTS as i64 * DAYS) as usize);
    assert_eq!(summary.as_of_day, 20_513 + DAYS as i32 - 1);
    let curves: Vec<_> = table
        .curve_checks
        .iter()
        .map(|&c| live.checks[c].curve.as_ref().unwrap())
        .collect();
    let mut moved = 0;
    for (i, row) in table.rows.iter().enumerate() {
        assert_eq!(table.rescore(i, &curves, None), row.capped, "row {i}");
        // A scored curve check moves the score when its curve moves.
        let mut flat = curves[0].clone();
        for p in &mut flat.points {
            p.1 = 0.0;
        }
        let other = [&flat, curves[1]];
        if table.rescore(i, &other, None) != row.capped {
            moved += 1;
        }
    }
    assert!(moved > table.rows.len() / 2, "{moved}");
}

#[test]
fn a_frozen_live_rubric_reports_drift_only() {
    let f = fixture();
    let mut v: serde_json::Value = serde_json::from_slice(EMBEDDED_DEFAULT).unwrap();
    v["version"] = "1.0.0".into();
    let frozen = f.root.join("frozen.json");
    std::fs::write(&frozen, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = out_dir("out-frozen");
    let run = recalibrate(&[
        "--state",
        s(&f.state),
        "--labels",
        s(&f.labels),
        "--rubric",
        s(&frozen),
        "--out",
        s(&out),
    ]);
    assert_eq!(run.code, 3, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("frozen"), "{}", run.stdout);
    assert!(!out.join("proposal.json").exists());
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert!(report["fitted"].is_null());
    assert!(report["proposal"].is_null());
}

/// Bad input is a clear error (exit 2, the problem named) and writes nothing: labels that are
/// not a labels document, a FIFO as the labels (never blocks), a state directory without a
/// ledger, a rubric that is not one.
#[test]
fn bad_input_is_a_clear_error_and_writes_nothing() {
    let f = fixture();
    let dir = out_dir("bad-input");
    std::fs::create_dir_all(&dir).unwrap();
    let not_labels = dir.join("not-labels.json");
    std::fs::write(&not_labels, b"{\"format\":\"something else\"}").unwrap();
    let fifo = dir.join("labels.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let not_rubric = dir.join("rubric.json");
    std::fs::write(&not_rubric, b"[1, 2]").unwrap();
    let empty_state = dir.join("empty-state");
    std::fs::create_dir_all(&empty_state).unwrap();
    let out = dir.join("out");
    let cases: [(&[&str], &str); 4] = [
        (
            &["--state", s(&f.state), "--labels", s(&not_labels)],
            "labels",
        ),
        (&["--state", s(&f.state), "--labels", s(&fifo)], "labels"),
        (
            &["--state", s(&empty_state), "--labels", s(&f.labels)],
            "ledger",
        ),
        (
            &[
                "--state",
                s(&f.state),
                "--labels",
                s(&f.labels),
                "--rubric",
                s(&not_rubric),
            ],
            "rubric",
        ),
    ];
    for (args, names) in cases {
        let mut all = args.to_vec();
        all.extend(["--out", s(&out)]);
        let run = recalibrate(&all);
        assert_eq!(run.code, 2, "{args:?}: {}{}", run.stdout, run.stderr);
        assert!(
            run.stderr.to_lowercase().contains(names),
            "{args:?} should name the {names}: {}",
            run.stderr
        );
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}
