//! The lab as a whole: it comes up fast, labs run side by side, its manifest says what it promises, and
//! nothing it starts outlives it.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use x402_lab::Lab;

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_lab_comes_up_fast_and_goes_away_completely() {
    let lab = Lab::start().await.expect("lab starts");
    assert_eq!(lab.endpoints.len(), x402_lab::scenarios::all().len());
    assert!(
        lab.startup_time < Duration::from_secs(3),
        "lab took {:?}",
        lab.startup_time
    );
    let pid = lab.anvil_pid();
    let dir = lab.dir().to_path_buf();
    let url = lab.endpoint("honest-v2").unwrap().url.clone();
    assert!(alive(pid));
    assert!(dir.join("payer.key").exists());
    drop(lab);
    assert!(!alive(pid), "anvil {pid} outlived its lab");
    assert!(!dir.exists(), "lab files outlived the lab");
    // The servers are gone too: nothing answers on the endpoint's port any more.
    let port = reqwest::Url::parse(&url).unwrap().port().unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labs_run_side_by_side_without_clashing() {
    let (a, b) = tokio::join!(common::lab(&["honest-v2"]), common::lab(&["honest-v2"]));
    assert_ne!(a.rpc_url(), b.rpc_url());
    assert_ne!(
        a.endpoint("honest-v2").unwrap().url,
        b.endpoint("honest-v2").unwrap().url
    );
    for lab in [&a, &b] {
        let (resp, _, _) = common::pay(lab, "honest-v2").await;
        assert_eq!(resp.status().as_u16(), 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifest_names_everything_and_every_expectation_is_well_formed() {
    let lab = common::lab(&["honest-v2", "down", "cert-expired"]).await;
    let m: Value = serde_json::to_value(lab.manifest()).unwrap();
    for key in [
        "rpc",
        "token",
        "payer_key_file",
        "ca_file",
        "catalogue",
        "endpoints",
    ] {
        assert!(m.get(key).is_some(), "manifest lacks {key}");
    }
    let key_file = Path::new(m["payer_key_file"].as_str().unwrap());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(key_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let rubric: Value =
        serde_json::from_str(include_str!("../../../rubrics/x402-endpoint.json")).unwrap();
    let ids: Vec<&str> = rubric["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    for s in x402_lab::scenarios::all() {
        for (id, outcome) in &s.expect {
            assert!(ids.contains(id), "{}: {id} is not a rubric check", s.name);
            assert!(["pass", "fail", "na"].contains(outcome));
        }
    }
    let supported: Value = reqwest::get(format!(
        "{}/supported",
        m["facilitators"]["honest"].as_str().unwrap()
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(
        supported["kinds"][1]["network"],
        format!("eip155:{}", lab.chain_id)
    );
}

#[test]
fn every_scenario_is_proved_from_outside() {
    let tests = include_str!("scenarios.rs");
    for s in x402_lab::scenarios::all() {
        assert!(
            tests.contains(&format!("\"{}\"", s.name)),
            "no test looks at scenario {}",
            s.name
        );
    }
}

#[test]
fn lab_up_and_down_start_and_stop_exactly_their_processes() {
    let state = std::env::temp_dir().join(format!("x402-lab-test-{}", std::process::id()));
    let lab_bin = env!("CARGO_BIN_EXE_lab");
    let up = Command::new(lab_bin)
        .args(["up", "--state-dir"])
        .arg(&state)
        .args(["--scenario", "honest-v2"])
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let manifest: Value = serde_json::from_slice(&up.stdout).expect("up prints the manifest");
    assert_eq!(manifest["endpoints"][0]["scenario"], "honest-v2");
    let serve_pid: u32 = std::fs::read_to_string(state.join("lab.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The lab's children (anvil), found by their parent pid in /proc.
    let anvil_pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.split_whitespace().nth(3) == Some(&serve_pid.to_string()))
        })
        .collect();
    assert!(!anvil_pids.is_empty(), "the lab runs anvil as its child");
    let again = Command::new(lab_bin)
        .args(["up", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(
        !again.status.success(),
        "a second `up` on the same state refuses"
    );
    let down = Command::new(lab_bin)
        .args(["down", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(down.status.success());
    assert!(!alive(serve_pid));
    for pid in anvil_pids {
        assert!(!alive(pid), "anvil {pid} outlived `lab down`");
    }
    assert!(!state.join("manifest.json").exists());
    let _ = std::fs::remove_dir_all(&state);
}
