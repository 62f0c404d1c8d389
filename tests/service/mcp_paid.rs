//! Paid calls of MCP tools: `probe --pay` on an `mcp+...#tool` subject sends the payment in the
//! `tools/call`'s `_meta["x402/payment"]` and reads the settlement from the result's
//! `_meta["x402/payment-response"]`, through the very money path of an HTTP endpoint (caps,
//! allowlist, the reservation before the signature, the re-quote, the chain read back). Each lab
//! paid MCP scenario is paid through the real lab (anvil, token, facilitator) and judged against
//! its hand-written expectations (`x402_lab::mcp::mcp_paid_scenarios`); the caps are tried
//! against a paid tool as they are against an endpoint.

use crate::paid_support::*;

use std::time::Duration;

use x402_lab::mcp::{McpKind, PAID_TOOL, RunningMcp, mcp_paid_scenarios};
use x402_lab::{Lab, LabOptions};
use x402_probe::evidence::paid::PaymentCarrier;
use x402_probe::evidence::{CheckId, Outcome};
use x402_probe::http_url::McpSubject;
use x402_probe::probe::free::FreeProbeConfig;
use x402_probe::probe::paid::{Decision, PaidContext, PaidObservation, PaidOptions};
use x402_probe::rubric::Rubric;
use x402_probe::runner::{RunOutput, run_mcp};
use x402_probe::spend::{PayPolicy, RefusalCode, ReservationState, SpendStore};

fn free_config(lab: &Lab) -> FreeProbeConfig {
    FreeProbeConfig {
        fetch: lab_fetch(lab),
        samples: 1,
        spacing: Duration::from_millis(0),
        rpc: Some(lab_rpc(lab)),
        declared_assets: vec![lab.token.address()],
        vantage: "test".into(),
        ..FreeProbeConfig::default()
    }
}

fn tool_of(server: &RunningMcp) -> McpSubject {
    McpSubject::parse(&format!("{}#{PAID_TOOL}", server.subject()))
        .expect("an MCP subject")
        .expect("a valid one")
}

/// One paid run of the server's paid tool under `policy`, as `probe --pay` runs it.
async fn pay_tool(
    lab: &Lab,
    store: &SpendStore,
    policy: &PayPolicy,
    server: &RunningMcp,
) -> RunOutput {
    let wallet = lab_wallet(lab);
    let rpc = lab_rpc(lab);
    let fetch_cfg = lab_fetch(lab);
    let ctx = PaidContext {
        wallet: &wallet,
        svm: None,
        store,
        policy,
        rpc: &rpc,
        fetch: &fetch_cfg,
        options: PaidOptions::lab(),
        clock: &x402_probe::clock::SystemClock,
        wall: &x402_probe::clock::SystemClock,
        on_step: None,
        references: &Default::default(),
    };
    let rubric = Rubric::embedded_default();
    let (run, mut outputs) = run_mcp(
        &free_config(lab),
        Some(&ctx),
        &rubric,
        &tool_of(server),
        now_unix(),
    )
    .await;
    assert_eq!(outputs.len(), 1, "one paid tool: {:?}", run.failure);
    outputs.remove(0)
}

/// The lab with one endpoint (its quote's terms are the MCP tools'); MCP servers on demand.
async fn lab() -> Lab {
    x402_probe::install_crypto_provider();
    Lab::start_with(LabOptions {
        scenarios: Some(vec!["honest-v2".into()]),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn outcome(out: &RunOutput, id: &str) -> (Outcome, String) {
    let id: CheckId = id.parse().unwrap();
    let r = out.results.iter().find(|r| r.id == id).unwrap();
    (r.outcome, r.evidence.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_paid_mcp_scenario_is_judged_as_written_and_money_moves_as_expected() {
    let lab = lab().await;
    let (_dir, store) = temp_store();
    let policy = lab_policy(&lab, "1", "10");
    let price = x402_lab::quote::PRICE as i128;
    for scenario in mcp_paid_scenarios() {
        let name = scenario.name;
        let server = lab.start_mcp(scenario.kind).await.unwrap();
        let (payer_before, pay_to_before) = (
            balance(&lab, lab.payer).await,
            balance(&lab, lab.pay_to).await,
        );
        let out = pay_tool(&lab, &store, &policy, &server).await;
        let obs = out.paid.as_ref().expect("a paid call was made");
        assert_eq!(obs.carrier, PaymentCarrier::McpTool, "{name}");
        assert!(
            matches!(obs.decision, Decision::Paid { .. }),
            "{name}: {:?}",
            obs.decision
        );
        // The payment went in the tools/call's _meta, never in a header.
        let sent: serde_json::Value =
            serde_json::from_slice(&obs.request.body).expect("the request is JSON");
        assert_eq!(sent["method"], "tools/call", "{name}");
        assert_eq!(sent["params"]["name"], PAID_TOOL, "{name}");
        for (id, want) in scenario.expect {
            let (got, evidence) = outcome(&out, id);
            assert_eq!(got.as_str(), *want, "{name} {id}: {evidence}");
        }
        // Observed once, evaluated again from storage: the same results.
        let stored = serde_json::to_string(obs).unwrap();
        let back: PaidObservation = serde_json::from_str(&stored).unwrap();
        assert_eq!(&back, obs, "{name}: the stored observation differs");
        let at = out.free.at;
        assert_eq!(
            x402_probe::checks::paid::evaluate(&back, at, "test"),
            x402_probe::checks::paid::evaluate(obs, at, "test"),
            "{name}"
        );
        let moved = (
            delta(payer_before, balance(&lab, lab.payer).await),
            delta(pay_to_before, balance(&lab, lab.pay_to).await),
        );
        let (payer, pay_to) = scenario.movement;
        assert_eq!(moved, (payer * price, pay_to * price), "{name}: balances");
        // The call, then the replay of the spent authorization (refused by the facilitator).
        assert_eq!(server.paid_calls(), 2, "{name}: paid tools/call requests");
        assert_eq!(server.destructive_calls(), 0, "{name}");
        // The reservation was the tool's, and follows the chain.
        let reservation = store
            .reservations()
            .unwrap()
            .into_iter()
            .find(|r| Some(r.id) == obs.reservation.as_ref().map(|s| s.id))
            .expect("the call's reservation");
        assert_eq!(reservation.subject, tool_of(&server).key(), "{name}");
        assert_eq!(reservation.state, ReservationState::Settled, "{name}");
        eprintln!("{name}: as written");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_and_the_allowlist_bind_a_paid_tool_as_they_bind_an_endpoint() {
    let lab = lab().await;
    let (_dir, store) = temp_store();
    let server = lab.start_mcp(McpKind::Honest).await.unwrap();
    let payer_before = balance(&lab, lab.payer).await;
    let refused = |out: &RunOutput| match &out.paid.as_ref().unwrap().decision {
        Decision::Refused { refusals } => refusals.iter().map(|r| r.code).collect::<Vec<_>>(),
        other => panic!("expected a refusal, got {other:?}"),
    };
    // A per-call cap below the price ($0.01).
    let mut policy = lab_policy(&lab, "1", "10");
    policy.max_per_call_usd = usd("0.005");
    let out = pay_tool(&lab, &store, &policy, &server).await;
    assert_eq!(refused(&out), vec![RefusalCode::OverPerCallCap]);
    // An asset off the allowlist.
    let mut policy = lab_policy(&lab, "1", "10");
    policy.allowlist.clear();
    let out = pay_tool(&lab, &store, &policy, &server).await;
    assert!(
        refused(&out).contains(&RefusalCode::AssetNotAllowed)
            || refused(&out).contains(&RefusalCode::NetworkNotAllowed),
        "{:?}",
        refused(&out)
    );
    assert_eq!(server.paid_calls(), 0, "nothing refused may reach the tool");
    assert_eq!(delta(payer_before, balance(&lab, lab.payer).await), 0);
    // A per-subject cap of one call: the first pays, the second is refused (the first one's
    // reservation counts against the tool's own key).
    let policy = lab_policy(&lab, "0.01", "10");
    let out = pay_tool(&lab, &store, &policy, &server).await;
    assert!(matches!(
        out.paid.as_ref().unwrap().decision,
        Decision::Paid { .. }
    ));
    let out = pay_tool(&lab, &store, &policy, &server).await;
    assert_eq!(refused(&out), vec![RefusalCode::OverPerSubjectCap]);
    // The daily cap counts every subject: another tool of another server is refused too.
    let other = lab.start_mcp(McpKind::HonestSession).await.unwrap();
    let policy = lab_policy(&lab, "1", "0.01");
    let out = pay_tool(&lab, &store, &policy, &other).await;
    assert_eq!(refused(&out), vec![RefusalCode::OverDailyCap]);
    assert_eq!(other.paid_calls(), 0);
    // Only the one call (and its replay) reached a tool, and one price left the wallet.
    assert_eq!(server.paid_calls(), 2);
    assert_eq!(
        delta(payer_before, balance(&lab, lab.payer).await),
        -(x402_lab::quote::PRICE as i128)
    );
    // Every refusal measured nothing.
    for id in ["R4", "C6", "H8"] {
        assert_eq!(outcome(&out, id).0, Outcome::Unmeasured, "{id}");
    }
}

/// The daemon rates an MCP tool over days like an endpoint: free runs of the tool, a paid call
/// (its observation an MCP one, settled on chain), scores each day; the ledger verifies and every
/// score recomputes from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_rates_a_paid_mcp_tool_over_days() {
    use crate::daemon_support::{DAY, Settings, config_text, latest_document, run_simulated};
    use std::sync::Arc;
    use x402_probe::clock::{Clock, ManualClock, SystemClock};
    use x402_probe::store::{SqliteStore, Store};

    let lab = lab().await;
    let server = lab.start_mcp(McpKind::Honest).await.unwrap();
    let tool = tool_of(&server).key();
    let now = SystemClock.now_ms();
    let start = now - now.rem_euclid(DAY);
    let clock = Arc::new(ManualClock::at_ms(start));
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(dir.path());
    settings.subjects = vec![tool.clone()];
    settings.pay_from_first_run = true;
    let text = config_text(&lab, &settings);
    run_simulated(&text, clock.clone(), start + 2 * DAY).await;

    let store = SqliteStore::open(dir.path()).unwrap();
    let runs = crate::daemon_support::runs(&store, &tool);
    assert!(runs.len() >= 8, "{} runs of the tool", runs.len());
    assert!(
        runs.iter().all(|r| r.free.mcp.is_some()),
        "every run spoke MCP"
    );
    let paid: Vec<_> = runs.iter().filter_map(|r| r.paid.as_ref()).collect();
    assert!(!paid.is_empty(), "the daemon paid the tool");
    for obs in &paid {
        assert_eq!(obs.carrier, PaymentCarrier::McpTool);
        assert!(
            matches!(obs.decision, Decision::Paid { .. }),
            "{:?}",
            obs.decision
        );
    }
    assert!(server.paid_calls() >= 1);
    let doc = latest_document(&store, &tool);
    for id in ["R2", "R4", "C6", "H5"] {
        let check = crate::daemon_support::check(&doc, id);
        assert!(check["passes"].as_u64().unwrap_or(0) >= 1, "{id}: {check}");
        assert_eq!(check["fails"], 0, "{id}: {check}");
    }
    store.verify(None, true).expect("the ledger verifies");
    let rubric = Rubric::embedded_default();
    let recomputed =
        x402_probe::daemon::recompute::recompute_ledger(&store, std::slice::from_ref(&rubric))
            .unwrap();
    assert_eq!(recomputed.mismatches, vec![]);
    assert!(recomputed.scores >= 8, "{} scores", recomputed.scores);
}
