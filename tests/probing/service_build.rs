//! The service build holds no lab (issue 20, item 8): `cargo build --release` builds `x402-probe`,
//! whose dependency graph has no `x402-lab` and whose binary has none of the lab's code, and the
//! lab's commands answer with where they are (the `x402-probe-lab` binary) instead of starting it.

use std::process::Command;

/// `cargo tree` of one package of this workspace: its normal dependencies (what its binary
/// links), one `name vX.Y.Z` a line.
fn normal_dependencies(package: &str) -> String {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "--locked", "--manifest-path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .args(["-p", package, "-e", "normal", "--prefix", "none"])
        .output()
        .expect("cargo runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    regex::bytes::Regex::new(&regex::escape(needle))
        .unwrap()
        .is_match(haystack)
}

#[test]
fn the_service_build_neither_depends_on_nor_contains_the_lab() {
    let service = normal_dependencies("x402-probe");
    assert!(
        service.lines().any(|l| l.starts_with("x402-probe v"))
            && service.lines().any(|l| l.starts_with("rusqlite v")),
        "the graph was read: {service}"
    );
    assert!(
        !service.lines().any(|l| l.starts_with("x402-lab v")),
        "{service}"
    );
    // Nor the local SVM the lab runs (minutes of build, megabytes of programs).
    assert!(
        !service.lines().any(|l| l.starts_with("litesvm v")),
        "{service}"
    );
    // The same question finds the lab where it is.
    let lab = normal_dependencies("x402-probe-lab");
    assert!(lab.lines().any(|l| l.starts_with("x402-lab v")), "{lab}");

    // The binary the tests run is that build: its symbols name the probe's code and none of the
    // lab's (the lab's crate, `x402_lab`, would name every one of its functions).
    let binary = std::fs::read(env!("CARGO_BIN_EXE_x402-probe")).unwrap();
    assert!(contains(&binary, "x402_probe"));
    assert!(!contains(&binary, "x402_lab"));
}

#[test]
fn the_service_binary_refuses_the_lab_commands_and_names_where_they_are() {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("sim");
    let state = root.path().join("state");
    for (command, args) in [
        ("demo", vec!["demo"]),
        ("simulate", vec!["simulate", "--out", out.to_str().unwrap()]),
        (
            "daemon --lab",
            vec![
                "daemon",
                "--lab",
                "--days",
                "1",
                "--state-dir",
                state.to_str().unwrap(),
            ],
        ),
    ] {
        let result = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("not in the service build")
                && stderr.contains(&format!(
                    "`cargo run --release -p x402-probe-lab -- {command}`"
                )),
            "{args:?}: {stderr}"
        );
        assert!(result.stdout.is_empty(), "{args:?}: nothing ran");
    }
    assert!(!out.exists() && !state.exists(), "nothing was written");
}
