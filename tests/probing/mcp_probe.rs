//! `probe mcp+URL` against the lab's MCP servers, run as a user runs it: honest servers in both
//! forms of Streamable HTTP, the draft -32402 form, broken carriers, a tool that never asks for
//! payment, and the hostile servers (an endless event stream, a huge tool list, a schema nested
//! 10,000 deep, a 100 MB result, a session id that changes on every answer). Each run ends in a
//! report within a bounded time; what it concludes is compared with the hand-written
//! expectations of `x402_lab::scenarios::mcp_scenarios`; no run ever calls the destructive tool.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use x402_lab::scenarios::{McpScenario, mcp_scenarios};
use x402_lab::{Lab, LabOptions};

/// Far above a bounded run (a few seconds); a run still going after this is hung.
const HUNG_AFTER: Duration = Duration::from_secs(120);
/// The largest report: one bounded report (1 MiB) per paid tool called (3 at most) and the
/// server's lines.
const MCP_REPORT_BYTES: usize = 4 << 20;

struct Run {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
    elapsed: Duration,
}

fn probe(lab: &Lab, subject: &str, extra: &[String]) -> Run {
    let m = lab.manifest();
    let mut child = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .arg("probe")
        .arg(subject)
        .args([
            "--allow-private",
            "--samples",
            "1",
            "--provenance",
            "test_harness",
            "--json",
            "--rpc",
            &m.rpc,
            "--asset",
            &m.token,
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err) = crate::drain_outputs(&mut child);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > HUNG_AFTER {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.and_then(|s| s.code()),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        elapsed: started.elapsed(),
    }
}

/// `--pay` with the lab payer's key, a per-call cap of `max_usd` and the spend store in `state`.
fn pay_args(lab: &Lab, max_usd: &str, state: &std::path::Path) -> Vec<String> {
    [
        "--pay",
        "--max-usd",
        max_usd,
        "--wallet-key-file",
        lab.payer_key_file.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        // The lab's chain mines a block per transaction and none after it.
        "--confirmations",
        "0",
    ]
    .map(String::from)
    .to_vec()
}

fn outcome(report: &Value, id: &str) -> String {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .map(|c| c["outcome"].as_str().unwrap_or("").to_string())
        .unwrap_or_else(|| panic!("no {id} in the report"))
}

fn check_scenario(lab: &Lab, scenario: &McpScenario, server: &x402_lab::mcp::RunningMcp) {
    let name = scenario.name;
    let run = probe(lab, &server.subject(), &[]);
    assert!(
        run.code.is_some(),
        "{name}: the probe was still running after {HUNG_AFTER:?}"
    );
    assert!(
        run.stdout.len() <= MCP_REPORT_BYTES,
        "{name}: a report of {} bytes",
        run.stdout.len()
    );
    let report: Value = serde_json::from_slice(&run.stdout).unwrap_or_else(|e| {
        panic!(
            "{name}: the report is not JSON ({e}); stderr: {}",
            run.stderr
        )
    });
    assert_eq!(run.code, Some(scenario.exit_code), "{name}: {report:#}");
    assert_eq!(
        report["form"].as_str(),
        scenario.form,
        "{name}: the form; failure {}",
        report["failure"]
    );
    let tools: Vec<String> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["subject"].as_str().unwrap().to_string())
        .collect();
    let wanted: Vec<String> = scenario
        .paid_tools
        .iter()
        .map(|t| format!("{}#{t}", server.subject()))
        .collect();
    assert_eq!(tools, wanted, "{name}: the paid tools' subjects");
    if let Some(first) = report["tools"].as_array().unwrap().first() {
        for (id, want) in &scenario.expect {
            assert_eq!(
                outcome(first, id),
                *want,
                "{name}: {id}: {}",
                first["checks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["id"] == *id)
                    .map(|c| c["evidence"].to_string())
                    .unwrap_or_default()
            );
        }
    }
    match scenario.failure_code {
        Some(code) => assert!(
            report["failure"].as_str().is_some_and(|f| f.contains(code)),
            "{name}: the failure should name {code}: {}",
            report["failure"]
        ),
        None => assert!(
            report.get("failure").is_none(),
            "{name}: {}",
            report["failure"]
        ),
    }
    assert_eq!(
        server.destructive_calls(),
        0,
        "{name}: the destructive tool was called"
    );
    eprintln!("{name}: {:?}, exit {:?}", run.elapsed, run.code);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lab_mcp_server_ends_in_its_expected_report() {
    let options = LabOptions {
        scenarios: Some(vec!["honest-v2".into()]),
        ..Default::default()
    };
    let lab = Lab::start_with(options).await.unwrap();
    for scenario in mcp_scenarios() {
        let server = lab.start_mcp(scenario.kind).await.unwrap();
        let lab_ref = &lab;
        tokio::task::block_in_place(|| check_scenario(lab_ref, &scenario, &server));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_tool_is_its_own_subject_and_a_destructive_one_is_never_called() {
    use x402_lab::mcp::{DESTRUCTIVE_TOOL, McpKind, PAID_TOOL};
    let options = LabOptions {
        scenarios: Some(vec!["honest-v2".into()]),
        ..Default::default()
    };
    let lab = Lab::start_with(options).await.unwrap();
    let server = lab.start_mcp(McpKind::Honest).await.unwrap();
    let lab_ref = &lab;
    tokio::task::block_in_place(|| {
        let named = format!("{}#{PAID_TOOL}", server.subject());
        let run = probe(lab_ref, &named, &[]);
        let report: Value =
            serde_json::from_slice(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stderr));
        let tools = report["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0]["subject"], named.as_str());
        assert_eq!(outcome(&tools[0], "R2"), "pass");
        // The one sample was an unpaid call of the named tool, and nothing else was called.
        assert_eq!(server.tool_calls(), 1);
        let destructive = format!("{}#{DESTRUCTIVE_TOOL}", server.subject());
        let run = probe(lab_ref, &destructive, &[]);
        let report: Value = serde_json::from_slice(&run.stdout).unwrap();
        assert!(report["tools"].as_array().unwrap().is_empty());
        assert!(
            report["not_called"][0]["why"]
                .as_str()
                .unwrap()
                .contains("destructiveHint"),
            "{report:#}"
        );
        assert_eq!(server.destructive_calls(), 0);
        assert_eq!(server.tool_calls(), 1);
        // `--pay`: the named tool is paid once (the payment in the tools/call's _meta), its
        // settlement read from the result's _meta, and the paid checks reported.
        let state = tempfile::tempdir().unwrap();
        let pay = pay_args(lab_ref, "0.05", state.path());
        let run = probe(lab_ref, &named, &pay);
        let report: Value =
            serde_json::from_slice(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stderr));
        let tools = report["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 1, "{report:#}");
        for (id, want) in [
            ("R4", "pass"),
            ("C6", "pass"),
            ("H5", "pass"),
            ("H8", "pass"),
        ] {
            assert_eq!(outcome(&tools[0], id), want, "{id}: {:#}", tools[0]["paid"]);
        }
        // The unpaid call, the re-quote, the paid call and the replay of the spent payment.
        assert_eq!(server.paid_calls(), 2);
        assert_eq!(server.tool_calls(), 5);
        assert_eq!(server.destructive_calls(), 0);
        // A per-call cap below the price: refused before anything is signed or sent.
        let low = pay_args(lab_ref, "0.005", state.path());
        let run = probe(lab_ref, &named, &low);
        let report: Value =
            serde_json::from_slice(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stderr));
        assert_eq!(
            outcome(&report["tools"][0], "R4"),
            "unmeasured",
            "{report:#}"
        );
        assert_eq!(server.paid_calls(), 2);
    });
}

/// The SDK server's child process, killed when dropped.
struct SdkServer(std::process::Child);

impl Drop for SdkServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Our client against the reference implementation: a paid tool served by the official MCP SDK
/// from npm (`lab/scripts/mcp-sdk-server.mjs`; its paywall is ours, the transport is the SDK's).
/// The SDK refuses the stateless form (400 without a session), so the probe must fall back to the
/// handshake, keep the SDK's `Mcp-Session-Id` and read its event-stream answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_tool_on_the_official_mcp_sdk_is_read_as_the_reference_serves_it() {
    use std::io::BufRead;
    let options = LabOptions {
        scenarios: Some(vec!["honest-v2".into()]),
        ..Default::default()
    };
    let lab = Lab::start_with(options).await.unwrap();
    let quote = lab
        .mcp_quote("mcp+http://127.0.0.1/mcp#get_weather")
        .unwrap();
    let quote_file = lab.dir().join("mcp-sdk-quote.json");
    std::fs::write(&quote_file, serde_json::to_vec(&quote).unwrap()).unwrap();
    let output_file = lab.dir().join("mcp-sdk-output.json");
    std::fs::write(
        &output_file,
        serde_json::to_vec(&x402_lab::quote::output()).unwrap(),
    )
    .unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new("node")
        .arg(root.join("lab/scripts/mcp-sdk-server.mjs"))
        .arg(&quote_file)
        .arg(&lab.facilitator_urls["honest"])
        .arg(&output_file)
        .current_dir(root)
        .stdout(Stdio::piped())
        .spawn()
        .expect("node runs (npm ci installs the SDK)");
    let stdout = child.stdout.take().unwrap();
    let server = SdkServer(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the SDK server said {line:?}"));
    let subject = format!("mcp+http://127.0.0.1:{port}/mcp");
    let lab_ref = &lab;
    tokio::task::block_in_place(|| {
        let run = probe(lab_ref, &subject, &[]);
        let report: Value =
            serde_json::from_slice(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stderr));
        assert_eq!(report["form"], "session", "{report:#}");
        let tools = report["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 1, "{report:#}");
        assert_eq!(
            tools[0]["subject"],
            format!("{subject}#get_weather").as_str()
        );
        for (id, want) in [
            ("R1", "pass"),
            ("R2", "pass"),
            ("C1", "pass"),
            ("C2", "pass"),
            ("C3", "pass"),
            ("C4", "pass"),
        ] {
            assert_eq!(
                outcome(&tools[0], id),
                want,
                "{id}: {:#}",
                tools[0]["checks"]
            );
        }
        assert_eq!(report["not_called"][0]["tool"], "delete_records");
        // A paid call against the reference: the payment in the SDK's _meta, settled by the
        // lab's facilitator, the settlement read from the SDK's result.
        let state = tempfile::tempdir().unwrap();
        let pay = pay_args(lab_ref, "0.05", state.path());
        let run = probe(lab_ref, &format!("{subject}#get_weather"), &pay);
        let report: Value =
            serde_json::from_slice(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stderr));
        let tool = &report["tools"][0];
        for (id, want) in [
            ("R4", "pass"),
            ("R5", "pass"),
            ("C6", "pass"),
            ("H5", "pass"),
            ("H6", "pass"),
            ("H7", "pass"),
            ("H8", "pass"),
        ] {
            assert_eq!(outcome(tool, id), want, "{id}: {:#}", tool["checks"]);
        }
    });
    drop(server);
}
