//! Broken rubric files are refused with a clear error, by the library and by `score --rubric`.

use std::path::{Path, PathBuf};
use std::process::Command;
use x402_probe::rubric::Rubric;

fn broken(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/inputs/broken-rubrics")
        .join(format!("{name}.json"))
}

const CASES: [(&str, &str); 9] = [
    ("weights-not-100", "dimension weights add up to 105"),
    (
        "gate-unknown-check",
        "unknown check \"H50\" (this build knows",
    ),
    ("curve-x-not-increasing", "x must strictly increase"),
    ("curve-y-increasing", "y must not increase"),
    ("duplicate-check-id", "duplicate check id \"S4\""),
    ("bad-grade-order", "bad grade order"),
    ("unknown-metric", "unknown variant `p99`"),
    ("unknown-dimension", "unknown dimension \"fast\""),
    ("unknown-gate-when", "unknown variant `down_for_hours`"),
];

#[test]
fn library_refuses_each_broken_rubric() {
    for (name, expected) in CASES {
        let bytes = std::fs::read(broken(name)).unwrap();
        let err = Rubric::from_bytes(&bytes).expect_err(name).to_string();
        assert!(err.contains(expected), "{name}: {err}");
    }
}

#[test]
fn score_command_refuses_a_broken_rubric() {
    let inputs =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/inputs/04-unverified-new.json");
    for (name, expected) in CASES {
        let out = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
            .args(["score", "--inputs"])
            .arg(&inputs)
            .arg("--rubric")
            .arg(broken(name))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "{name}: printed a score");
    }
}

#[test]
fn the_shipped_rubric_file_is_the_embedded_one() {
    let file =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("rubrics/x402-endpoint.json"))
            .unwrap();
    let r = Rubric::from_bytes(&file).unwrap();
    assert_eq!(r.sha256(), Rubric::embedded_default().sha256());
}
