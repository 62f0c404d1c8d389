//! The `probe` command as a user runs it: exit codes, the JSON report, and `--pay` against the lab.

use std::process::Command;

use alloy::primitives::U256;
use serde_json::Value;
use x402_lab::{Lab, LabOptions};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_x402-probe"))
}

async fn lab(scenarios: &[&str]) -> Lab {
    let options = LabOptions {
        scenarios: Some(scenarios.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    };
    Lab::start_with(options).await.unwrap()
}

/// `probe` against a lab endpoint with the lab's CA, RPC, token and catalogue.
fn probe(lab: &Lab, scenario: &str, extra: &[&str]) -> std::process::Output {
    let m = lab.manifest();
    let mut cmd = bin();
    cmd.arg("probe")
        .arg(&lab.endpoint(scenario).unwrap().url)
        .args([
            "--allow-private",
            "--samples",
            "2",
            "--spacing-ms",
            "10",
            "--provenance",
            "test_harness",
            "--ca-file",
        ])
        .arg(&m.ca_file)
        .args([
            "--rpc",
            &m.rpc,
            "--asset",
            &m.token,
            "--listing",
            &m.catalogue,
        ])
        .args(extra);
    cmd.output().unwrap()
}

/// The lab serves from this test's runtime, so the child runs on a blocking section.
async fn run(lab: &Lab, scenario: &str, extra: &[&str]) -> std::process::Output {
    tokio::task::block_in_place(|| probe(lab, scenario, extra))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_and_the_json_report() {
    let lab = lab(&["honest-v2", "payto-lowercase"]).await;
    let out = run(&lab, "honest-v2", &["--json"]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["schema"], "x402-probe.probe-report/1");
    assert_eq!(report["checks"].as_array().unwrap().len(), 27);
    assert_eq!(report["rubric"]["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(report["exit_code"], 0);
    assert_eq!(report["provenance"], "test_harness");
    assert_eq!(report["score"]["provenance"], "test_harness");
    assert!(report.get("paid").is_none(), "no paid call without --pay");
    let r1 = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "R1")
        .unwrap();
    assert_eq!(r1["outcome"], "pass");
    assert!(r1["receipt"]["sha256"]["response.body"].is_string());
    assert_eq!(report["score"]["verdict"]["status"], "provisional");
    assert!(
        report["score"]["grade"].is_null(),
        "one run never gets an established grade"
    );

    let out = run(&lab, "payto-lowercase", &[]).await;
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("C2  FAIL") && text.contains("fix:"), "{text}");

    // Without --allow-private the address guard refuses the lab: nothing measured, exit 3.
    let url = lab.endpoint("honest-v2").unwrap().url.clone();
    let out = tokio::task::block_in_place(|| {
        bin()
            .args(["probe", &url, "--samples", "1"])
            .output()
            .unwrap()
    });
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let out = tokio::task::block_in_place(|| bin().args(["probe", "ftp://x"]).output().unwrap());
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_once_within_the_cap_and_record_it() {
    let lab = lab(&["honest-v2", "expensive"]).await;
    let state = lab.dir().join("spend");
    let key = lab.payer_key_file.display().to_string();
    let state_arg = state.display().to_string();
    let pay = [
        "--pay",
        "--max-usd",
        "0.05",
        "--wallet-key-file",
        &key,
        "--state-dir",
        &state_arg,
        "--confirmations",
        "0",
        "--json",
    ];
    let before = lab.token.balance_of(lab.payer).await.unwrap();
    let out = run(&lab, "honest-v2", &pay).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    for id in ["R4", "R5", "R7", "C6", "H5", "H6", "H7", "H8", "S3"] {
        let c = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap();
        assert_eq!(c["outcome"], "pass", "{id}: {}", c["evidence"]);
    }
    assert_eq!(
        lab.token.balance_of(lab.payer).await.unwrap(),
        before - U256::from(10_000u64)
    );
    assert!(state.join("spend.sqlite").exists());
    assert!(report["score"]["verdict"]["verification"]["last_paid_call_days_ago"].is_number());

    // 25 USDC is above the 0.05 cap: refused, nothing moves, paid checks unmeasured.
    let out = run(&lab, "expensive", &pay).await;
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r4 = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "R4")
        .unwrap();
    assert_eq!(r4["outcome"], "unmeasured", "{}", r4["evidence"]);
    assert_eq!(report["paid"]["decision"], "refused");
    assert!(
        report["paid"]["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("over_per_call_cap"),
        "{}",
        report["paid"]
    );
    assert_eq!(
        lab.token.balance_of(lab.payer).await.unwrap(),
        before - U256::from(10_000u64)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_refuses_bad_setups_before_any_traffic() {
    let lab = lab(&["honest-v2"]).await;
    let open_key = lab.dir().join("open.key");
    std::fs::copy(&lab.payer_key_file, &open_key).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&open_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let key = open_key.display().to_string();
    let before = lab.token.balance_of(lab.payer).await.unwrap();
    let out = run(
        &lab,
        "honest-v2",
        &["--pay", "--max-usd", "0.05", "--wallet-key-file", &key],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 600"));
    let out = run(&lab, "honest-v2", &["--pay", "--wallet-key-file", &key]).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "--pay without --max-usd is a usage error"
    );
    assert_eq!(lab.token.balance_of(lab.payer).await.unwrap(), before);
}
