//! End to end through the binary: the stored score documents in `tests/data/golden/` recompute
//! byte for byte, scoring their inputs again gives the same bytes, and one changed byte of an
//! embedded input makes `recompute` fail loudly.

use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_x402-probe"))
}

fn data(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(sub)
}

fn golden_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data("golden"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn golden_documents_recompute() {
    let files = golden_files();
    assert!(
        files.len() >= 5,
        "expected several golden documents, found {}",
        files.len()
    );
    let out = bin().arg("recompute").arg(data("golden")).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!(
        "{} score documents recomputed byte for byte",
        files.len()
    )));
}

#[test]
fn golden_documents_are_synthetic_and_varied() {
    let mut verdicts = std::collections::BTreeSet::new();
    for f in golden_files() {
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        assert_eq!(doc["provenance"], "synthetic_fixture", "{}", f.display());
        verdicts.insert(doc["verdict"]["verdict"].as_str().unwrap().to_string());
    }
    for v in ["ok", "avoid", "down", "unverified", "caution"] {
        assert!(
            verdicts.contains(v),
            "no golden document with verdict {v}: {verdicts:?}"
        );
    }
}

#[test]
fn scoring_the_inputs_again_gives_the_stored_bytes() {
    for f in golden_files() {
        let inputs = data("inputs").join(f.file_name().unwrap());
        let out = bin()
            .arg("score")
            .arg("--inputs")
            .arg(&inputs)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, std::fs::read(&f).unwrap(), "{}", f.display());
    }
}

#[test]
fn one_changed_input_byte_fails_recompute() {
    let dir = tempfile::tempdir().unwrap();
    for f in golden_files() {
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    let victim = dir.path().join(golden_files()[0].file_name().unwrap());
    let mut bytes = std::fs::read(&victim).unwrap();
    // Change one digit of the first receipt hash inside the embedded inputs.
    let marker = b"\"receipt\":\"";
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker)
        .unwrap()
        + marker.len();
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    std::fs::write(&victim, &bytes).unwrap();

    let out = bin().arg("recompute").arg(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let name = victim.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        stderr.contains(&format!("DIFFERS {}", victim.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("first differing byte at offset"),
        "{stderr}"
    );
    assert!(stderr.contains("1 of"), "{stderr} ({name})");
}

#[test]
fn recompute_refuses_an_unknown_rubric() {
    let dir = tempfile::tempdir().unwrap();
    let f = &golden_files()[0];
    let text = std::fs::read_to_string(f).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let sha = doc["rubric"]["sha256"].as_str().unwrap();
    let changed = text.replace(sha, &"f".repeat(64));
    let path = dir.path().join("other-rubric.json");
    std::fs::write(&path, changed).unwrap();
    let out = bin().arg("recompute").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is not available"), "{stderr}");
}

#[test]
fn score_refuses_a_different_major_version() {
    let inputs = data("inputs").join("04-unverified-new.json");
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(inputs).unwrap()).unwrap();
    doc["rubric_version"] = serde_json::json!("2.0.0");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.json");
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    let out = bin()
        .arg("score")
        .arg("--inputs")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("never cross major versions"), "{stderr}");
}

/// The score module reads its own documents back with the type that wrote them (the pages and
/// the recalibration do): every golden document parses and serialises to the same bytes.
#[test]
fn golden_documents_read_back_to_the_same_bytes() {
    for file in golden_files() {
        let bytes = std::fs::read(&file).unwrap();
        let doc = x402_probe::score::document::ScoreDocument::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!(
            doc.to_bytes().unwrap(),
            bytes,
            "{} does not read back byte for byte",
            file.display()
        );
    }
}
