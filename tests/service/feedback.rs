//! ERC-8004 feedback round-trips on the lab chain: the daemon rates the lab's honest endpoint for
//! two simulated days (real probes and paid calls), whose operator file declares the agent the lab
//! registered for its operator in the lab's registry (`LabAgentRegistry`, deployed from its
//! committed fixture). `x402-probe ledger feedback` writes the `giveFeedback` fields and files;
//! with `--submit` it sends them from a wallet of its own, and the registry gives back exactly
//! what was written (`readFeedback`, the `NewFeedback` events); a second `--submit` sends
//! nothing again; the payment wallet as the feedback wallet is refused.

use crate::daemon_support;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use alloy::primitives::{U256, keccak256};
use alloy::signers::local::PrivateKeySigner;
use daemon_support::*;
use serde_json::Value;
use x402_probe::clock::ManualClock;

fn feedback_table(lab: &x402_lab::Lab, wallet: &Path) -> String {
    format!(
        r#"
[feedback]
registry = "{registry}"
chain_id = {chain}
rpc = "{rpc}"
wallet = {{ key_file = "{wallet}" }}
uri_base = "https://feedback.lab.test/x402-probe/"
max_fee_per_gas_wei = 100000000000
max_wei_per_run = 1000000000000000000
"#,
        registry = lab.agent_registry.address(),
        chain = lab.chain_id,
        rpc = lab.rpc_url(),
        wallet = wallet.display(),
    )
}

/// Runs `ledger feedback`: its exit code and its stdout's JSON lines.
fn feedback(config: &Path, out: &Path, submit: bool) -> (i32, Vec<Value>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_x402-probe"));
    command.args(["ledger", "feedback", "--config"]);
    command.arg(config).arg("--out").arg(out);
    if submit {
        command.arg("--submit");
    }
    let output = command.output().unwrap();
    let lines = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        output.status.code().unwrap(),
        lines,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_round_trips_through_the_lab_registry() {
    let lab = lab(&["honest-v2"]).await;
    let url = lab.endpoint("honest-v2").unwrap().url.clone();
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(dir.path());
    settings.subjects = vec![url.clone()];
    settings.pay_from_first_run = true;
    settings.api = "[api]\nenabled = false\n".into();
    let text = config_text(&lab, &settings);
    let end = start_ms();
    run_simulated(&text, Arc::new(ManualClock::at_ms(end - 2 * DAY)), end).await;

    // The feedback wallet: a key of its own, with gas money.
    let signer = PrivateKeySigner::random();
    let client = signer.address();
    let key_file = dir.path().join("feedback.key");
    let mut file = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&key_file)
        .unwrap();
    writeln!(file, "0x{}", hex::encode(signer.to_bytes())).unwrap();
    lab.rpc
        .set_balance(client, U256::from(10u128.pow(18)))
        .await
        .unwrap();
    let config = write_config(
        dir.path(),
        &(text.clone() + &feedback_table(&lab, &key_file)),
    );
    let out = dir.path().join("feedback");

    // Written, not sent: one feedback per measure, each file hashing to its feedbackHash.
    let (code, written, stderr) = feedback(&config, &out, false);
    assert_eq!(code, 0, "{stderr}");
    let tags: Vec<&str> = written
        .iter()
        .map(|l| l["tag1"].as_str().unwrap())
        .collect();
    for tag in ["reachable", "uptime", "successRate", "responseTime"] {
        assert!(tags.contains(&tag), "{tag} in {written:?}");
    }
    for line in &written {
        assert_eq!(line["agent_id"], lab.agent.agent_id.to_string());
        assert_eq!(line["agent_registry"], lab.agent.caip10());
        assert_eq!(line["endpoint"], url.as_str());
        assert_eq!(line["tag2"], "x402-probe");
        let bytes = std::fs::read(out.join(line["file_name"].as_str().unwrap())).unwrap();
        assert_eq!(
            line["feedback_hash"],
            keccak256(&bytes).to_string(),
            "{line}"
        );
        let file: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            file["clientAddress"],
            format!("eip155:{}:{}", lab.chain_id, client.to_checksum(None))
        );
        assert!(file["x402-probe"]["signed_score"]["signature"].is_string());
        assert_eq!(file["x402-probe"]["evidence"].as_array().unwrap().len(), 2);
    }
    let reachable = written.iter().find(|l| l["tag1"] == "reachable").unwrap();
    assert_eq!(
        (&reachable["value"], &reachable["value_decimals"]),
        (&Value::from(1), &Value::from(0))
    );
    assert!(
        lab.agent_registry
            .feedback(lab.agent.agent_id, client)
            .await
            .unwrap()
            .is_empty(),
        "nothing sent without --submit"
    );

    // Sent, and read back from the chain as written.
    let (code, lines, stderr) = feedback(&config, &out, true);
    assert_eq!(code, 0, "{stderr}");
    let given: Vec<&Value> = lines.iter().filter(|l| l.get("given").is_some()).collect();
    assert_eq!(given.len(), written.len(), "{lines:?}");
    assert!(
        given.iter().all(|g| g["given"]["state"] == "mined"),
        "{given:?}"
    );
    let read = lab
        .agent_registry
        .feedback(lab.agent.agent_id, client)
        .await
        .unwrap();
    assert_eq!(read.len(), written.len());
    for (on_chain, line) in read.iter().zip(&written) {
        assert_eq!(Value::from(on_chain.value as i64), line["value"], "{line}");
        assert_eq!(Value::from(on_chain.value_decimals), line["value_decimals"]);
        assert_eq!(on_chain.tag1, line["tag1"].as_str().unwrap());
        assert_eq!(on_chain.tag2, "x402-probe");
        assert!(!on_chain.revoked);
        assert_eq!(on_chain.endpoint, url);
        assert_eq!(
            on_chain.feedback_uri,
            line["feedback_uri"].as_str().unwrap()
        );
        assert!(
            on_chain
                .feedback_uri
                .ends_with(line["file_name"].as_str().unwrap())
        );
        assert_eq!(on_chain.feedback_hash.to_string(), line["feedback_hash"]);
    }

    // Again: the same score gives the same files, and what was sent is not sent twice.
    let (code, lines, stderr) = feedback(&config, &out, true);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        lines
            .iter()
            .filter_map(|l| l.get("given"))
            .all(|g| g["state"] == "earlier" && g["mined"] == true),
        "{lines:?}"
    );
    assert_eq!(
        lab.agent_registry
            .feedback(lab.agent.agent_id, client)
            .await
            .unwrap()
            .len(),
        written.len()
    );

    // The payment wallet as the feedback wallet: refused before anything is read or sent.
    let config = write_config(
        dir.path(),
        &(text + &feedback_table(&lab, &lab.payer_key_file)),
    );
    let (code, _, stderr) = feedback(&config, &out, true);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("[pay] wallet"), "{stderr}");
}
