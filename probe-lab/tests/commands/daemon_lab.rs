//! The README's third command, `x402-probe-lab daemon --lab --days N`, as a user runs it: the binary
//! brings the lab up, runs the daemon on simulated days, prints each subject's daily scores, and
//! leaves a ledger that verifies and recomputes.

use crate::process_support;

use std::os::unix::fs::PermissionsExt;

use process_support::run;

#[test]
fn daemon_lab_days_prints_daily_scores_and_keeps_a_ledger_that_verifies() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let state_arg = state.to_str().unwrap();
    let (code, text) = run(&["daemon", "--lab", "--days", "2", "--state-dir", state_arg]);
    assert_eq!(code, 0, "{text}");
    // The ledger is ours alone: the state directory made 0700, the store 0600.
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join("ledger.sqlite")), 0o600);
    for subject in [
        "honest-v2",
        "overcharge",
        "wrong-payee",
        "solana-honest-v2",
        "price-rise",
        "price-rise-noted",
        "outage-30h",
        "flaky-30",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{subject} (https://127.0.0.1:"))),
            "{subject} has a table: {text}"
        );
    }
    // The paid MCP tool is a subject like the endpoints, scored each day: its quote reads as
    // an honest one (no R2, C1 or C2 failure); only S1 fails (the lab's MCP server is plain HTTP).
    let mcp = text
        .split("mcp-honest (mcp+http://127.0.0.1:")
        .nth(1)
        .unwrap_or_else(|| panic!("mcp-honest has a table: {text}"));
    let mcp_rows: Vec<&str> = mcp
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with("  20"))
        .collect();
    assert!(mcp_rows.len() >= 2, "{mcp}");
    for row in &mcp_rows {
        assert!(
            !row.contains("R2 ") && !row.contains("C1 ") && !row.contains("C2 "),
            "{row}"
        );
    }
    // Two simulated days: a table row per day (the start day and the next), every verdict still
    // unverified (the rubric needs probes over 3 days).
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("  20") && l.contains('['))
        .collect();
    assert!(rows.len() >= 18, "{text}");
    assert!(rows.iter().all(|r| r.contains("unverified")), "{text}");
    // The outage on day 1 shows as R1 failures on the outage endpoint by the second day.
    let outage = text.split("outage-30h (").nth(1).unwrap();
    assert!(
        outage.lines().take(4).any(|l| l.contains("R1 ")),
        "{outage}"
    );

    let (code, text) = run(&["ledger", "verify", "--state-dir", state_arg]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = run(&["recompute", "--ledger", state_arg]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("byte for byte"), "{text}");

    // The state directory is the lab's own: a second run into it is refused, not mixed in.
    let (code, text) = run(&["daemon", "--lab", "--days", "1", "--state-dir", state_arg]);
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("already holds a ledger"), "{text}");
    // --days without --lab is a usage error.
    let (code, _) = run(&["daemon", "--days", "1"]);
    assert_eq!(code, 2);
}

#[test]
fn a_state_directory_others_can_write_is_refused_before_the_ledger_is_made() {
    let root = tempfile::tempdir().unwrap();
    for loose in [0o777, 0o770, 0o1777] {
        let state = root.path().join(format!("loose-{loose:o}"));
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(loose)).unwrap();
        let state_arg = state.to_str().unwrap();
        let (code, text) = run(&["daemon", "--lab", "--days", "1", "--state-dir", state_arg]);
        assert_eq!(code, 2, "{text}");
        assert!(
            text.contains(state_arg) && text.contains("chmod 700"),
            "{text}"
        );
        assert!(
            !state.join("ledger.sqlite").exists() && !state.join("reporter.key").exists(),
            "nothing is made in it"
        );
    }
}

/// The README's several-vantages run, `daemon --lab --vantages 3 --days 1`: three daemons on one
/// throwaway PostgreSQL, each from its own source address, share every subject's cycles; the
/// cloaked endpoint quotes one of them another payTo; every log verifies and every score
/// recomputes.
#[test]
fn daemon_lab_vantages_share_the_cycles_and_see_the_cloaking() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let state_arg = state.to_str().unwrap();
    let vantages_args = [
        "daemon",
        "--lab",
        "--vantages",
        "3",
        "--days",
        "1",
        "--state-dir",
        state_arg,
    ];
    let (code, text) = run(&vantages_args);
    assert_eq!(code, 0, "{text}");
    // Each vantage recorded runs: one per subject and cycle (8 cycles of 3 h), none skipped or
    // doubled.
    let runs = text
        .lines()
        .find(|l| l.starts_with("runs: "))
        .unwrap_or_else(|| panic!("a runs line: {text}"));
    let subjects = 11;
    for v in ["v0", "v1", "v2"] {
        assert!(
            runs.contains(&format!("{v} {}", subjects * 8)),
            "{v} probed every subject 8 times: {runs}"
        );
    }
    assert!(text.contains("no run skipped, none doubled"), "{text}");
    // Every vantage's log verifies and its scores recompute, as the commands say; the holder of
    // the scoring role published them, the others published none.
    let mut holders = 0;
    for v in ["v0", "v1", "v2"] {
        let verify = text
            .lines()
            .find(|l| l.starts_with(&format!("ledger verify {v}: ")))
            .unwrap_or_else(|| panic!("{v} verified: {text}"));
        assert!(verify.contains(&format!("vantage \"{v}\"")), "{verify}");
        let recompute = text
            .lines()
            .find(|l| l.starts_with(&format!("recompute {v}: ")))
            .unwrap_or_else(|| panic!("{v} recomputed: {text}"));
        if recompute.contains("byte for byte") {
            holders += 1;
        } else {
            assert!(recompute.contains("published no score"), "{recompute}");
        }
    }
    assert!(holders >= 1, "some vantage published the scores: {text}");
    assert!(text.contains("every vantage's log verifies: yes"), "{text}");
    assert!(
        text.contains("every published score recomputes: yes"),
        "{text}"
    );
    // The cloaked endpoint quoted v1 (127.0.0.2) another payTo than v0 and v2; no other subject's
    // payTo differed by vantage.
    let cloaked = text
        .split("\ncloaked (")
        .nth(1)
        .unwrap_or_else(|| panic!("a cloaked table: {text}"));
    let quoted = cloaked
        .lines()
        .find_map(|l| l.trim().strip_prefix("payTo quoted by vantage: "))
        .unwrap_or_else(|| panic!("payTo by vantage: {cloaked}"));
    let by: Vec<(&str, &str)> = quoted
        .split(", ")
        .map(|p| p.split_once(' ').unwrap())
        .collect();
    assert_eq!(
        by.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        ["v0", "v1", "v2"],
        "{quoted}"
    );
    assert_eq!(by[0].1, by[2].1, "{quoted}");
    assert_ne!(by[1].1, by[0].1, "{quoted}");
    assert!(
        by.iter()
            .all(|(_, p)| p.starts_with("0x") && !p.contains('/')),
        "{quoted}"
    );
    assert_eq!(text.matches("payTo quoted by vantage").count(), 1, "{text}");
    // The score saw it: the vantages probe a cycle within a minute of each other, so cloaking
    // compares them; v1's runs fail H3 (in most cycles at least) and the rubric's payto_changed
    // gate binds. No other subject fails H3.
    let day = cloaked
        .lines()
        .find(|l| l.starts_with("  20"))
        .unwrap_or_else(|| panic!("a day row: {cloaked}"));
    assert!(day.contains("payto_changed"), "{day}");
    let h3: u32 = day
        .split("H3 ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("H3 fails counted: {day}"));
    // Most of v1's 8 runs; a cycle whose third run fell outside cloaking's 120 s is a tie of two,
    // and a tie marks both runs (the subject's H3 fails either way): at most 16.
    assert!((4..=16).contains(&h3), "v1's runs of 8 cycles: {day}");
    let h3_rows = text
        .lines()
        .filter(|l| l.starts_with("  20") && l.contains(" H3 "))
        .count();
    assert_eq!(h3_rows, 1, "{text}");
    // The regional outage: v2's runs fail R1 (8 of 8), the others' do not.
    let outage = text
        .split("\nregional-outage (")
        .nth(1)
        .unwrap_or_else(|| panic!("a regional-outage table: {text}"));
    let day = outage
        .lines()
        .find(|l| l.starts_with("  20"))
        .unwrap_or_else(|| panic!("a day row: {outage}"));
    assert!(day.contains("v0 8, v1 8, v2 8 (8)"), "{day}");
    // One vantage of three cut off is a disagreement, never down: no R1 fails count and no gate
    // binds.
    assert!(
        !day.contains("R1 ") && !day.contains("down") && !day.contains("avoid"),
        "{day}"
    );

    // The state directories are the lab's own: a second run into them is refused.
    let (code, text) = run(&vantages_args);
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("already holds vantages"), "{text}");
    // --vantages without --days is a usage error.
    let (code, _) = run(&["daemon", "--lab", "--vantages", "3"]);
    assert_eq!(code, 2);
}
