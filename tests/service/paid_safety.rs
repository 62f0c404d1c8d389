//! Spend safety against the real lab: caps that bind across calls (open reservations included),
//! refusals that move nothing, a world-readable key file refused, and an RPC that dies mid-run
//! (every chain check `unmeasured`, none `fail`).

use crate::paid_support;

use std::os::unix::fs::PermissionsExt;

use x402_lab::{Lab, LabOptions};
use x402_probe::checks::paid::evaluate;
use x402_probe::evidence::Outcome;
use x402_probe::probe::paid::{Decision, PaidContext, PaidOptions, paid_call, pay, verify};
use x402_probe::spend::{RefusalCode, ReservationState};
use x402_probe::wallet::{Wallet, WalletError};

use paid_support::*;

fn lab_with(names: &[&str]) -> LabOptions {
    LabOptions {
        scenarios: Some(names.iter().map(|s| s.to_string()).collect()),
        ..LabOptions::default()
    }
}

fn refused_code(decision: &Decision) -> Option<RefusalCode> {
    match decision {
        Decision::Refused { refusals } => refusals.first().map(|r| r.code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_bind_across_calls_and_open_reservations_count() {
    x402_probe::install_crypto_provider();
    let lab = Lab::start_with(lab_with(&[
        "honest-v2",
        "honest-v1",
        "control",
        "no-settlement",
    ]))
    .await
    .unwrap();
    let (_dir, store) = temp_store();
    let wallet = lab_wallet(&lab);
    // One cent a call: two calls per subject, three in all.
    let policy = lab_policy(&lab, "0.02", "0.03");
    let (rpc, fetch_cfg) = (lab_rpc(&lab), lab_fetch(&lab));
    let ctx = PaidContext {
        wallet: &wallet,
        svm: None,
        store: &store,
        policy: &policy,
        rpc: &rpc,
        fetch: &fetch_cfg,
        options: PaidOptions::lab(),
        clock: &x402_probe::clock::SystemClock,
        wall: &x402_probe::clock::SystemClock,
        on_step: None,
        references: &Default::default(),
    };
    let payer_before = balance(&lab, lab.payer).await;
    let call = async |scenario: &str| {
        let url = lab.endpoint(scenario).unwrap().url.clone();
        let (request, quote) = quote_of(&fetch_cfg, &url).await;
        paid_call(&ctx, &url, &request, &quote).await
    };

    assert!(matches!(
        call("honest-v2").await.decision,
        Decision::Paid { .. }
    ));
    assert!(matches!(
        call("honest-v2").await.decision,
        Decision::Paid { .. }
    ));
    let third = call("honest-v2").await;
    assert_eq!(
        refused_code(&third.decision),
        Some(RefusalCode::OverPerSubjectCap),
        "{:?}",
        third.decision
    );
    assert!(third.payment.is_none());
    assert!(matches!(
        call("honest-v1").await.decision,
        Decision::Paid { .. }
    ));
    let fourth = call("control").await;
    assert_eq!(
        refused_code(&fourth.decision),
        Some(RefusalCode::OverDailyCap),
        "{:?}",
        fourth.decision
    );
    let price = x402_lab::quote::PRICE as i128;
    assert_eq!(
        delta(payer_before, balance(&lab, lab.payer).await),
        -3 * price,
        "exactly three cents left the wallet"
    );
    let totals = store.totals("nobody", now_unix()).unwrap();
    assert_eq!(totals.day, usd("0.03"));
    assert_eq!(totals.open, 0, "every paid call settled and was marked so");

    // An open reservation counts although nothing was charged: the no-settlement endpoint never
    // uses our authorization, so its reservation stays open until validBefore.
    let (_dir2, store2) = temp_store();
    let tight = lab_policy(&lab, "0.01", "1");
    let ctx2 = PaidContext {
        store: &store2,
        policy: &tight,
        ..ctx
    };
    let url = lab.endpoint("no-settlement").unwrap().url.clone();
    let (request, quote) = quote_of(&fetch_cfg, &url).await;
    let first = paid_call(&ctx2, &url, &request, &quote).await;
    assert!(matches!(first.decision, Decision::Paid { .. }));
    assert_eq!(
        first.reservation.as_ref().unwrap().state,
        ReservationState::Open
    );
    let (request, quote) = quote_of(&fetch_cfg, &url).await;
    let second = paid_call(&ctx2, &url, &request, &quote).await;
    assert_eq!(
        refused_code(&second.decision),
        Some(RefusalCode::OverPerSubjectCap),
        "the open reservation must count: {:?}",
        second.decision
    );
    let refusals = store2.refusals().unwrap();
    assert_eq!(refusals.len(), 1);
    assert_eq!(refusals[0].code, "over_per_subject_cap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overpayment_attempts_are_refused_and_move_nothing() {
    x402_probe::install_crypto_provider();
    let names = [
        "expensive",
        "off-allowlist-network",
        "fake-asset",
        "price-rises",
        "permit2-only",
    ];
    let lab = Lab::start_with(lab_with(&names)).await.unwrap();
    let (_dir, store) = temp_store();
    let wallet = lab_wallet(&lab);
    let policy = lab_policy(&lab, "1", "10");
    let (rpc, fetch_cfg) = (lab_rpc(&lab), lab_fetch(&lab));
    let ctx = PaidContext {
        wallet: &wallet,
        svm: None,
        store: &store,
        policy: &policy,
        rpc: &rpc,
        fetch: &fetch_cfg,
        options: PaidOptions::lab(),
        clock: &x402_probe::clock::SystemClock,
        wall: &x402_probe::clock::SystemClock,
        on_step: None,
        references: &Default::default(),
    };
    let payer_before = balance(&lab, lab.payer).await;
    let want = [
        (
            "expensive",
            RefusalCode::OverPerCallCap,
            "above the per-call cap",
        ),
        (
            "off-allowlist-network",
            RefusalCode::NetworkNotAllowed,
            "not on the allowlist",
        ),
        (
            "fake-asset",
            RefusalCode::AssetNotAllowed,
            "not on the allowlist",
        ),
        (
            "price-rises",
            RefusalCode::QuoteChanged,
            "amount 10000 -> 30000",
        ),
        (
            "permit2-only",
            RefusalCode::TransferMethodNotEip3009,
            "permit2",
        ),
    ];
    for (scenario, code, words) in want {
        let url = lab.endpoint(scenario).unwrap().url.clone();
        let (request, quote) = quote_of(&fetch_cfg, &url).await;
        let obs = paid_call(&ctx, &url, &request, &quote).await;
        let Decision::Refused { refusals } = &obs.decision else {
            panic!("{scenario}: expected a refusal, got {:?}", obs.decision);
        };
        assert_eq!(refusals[0].code, code, "{scenario}: {refusals:?}");
        assert!(
            refusals[0].message.contains(words),
            "{scenario}: {:?} should say {words:?}",
            refusals[0].message
        );
        assert!(
            obs.payment.is_none() && obs.paid.is_none(),
            "{scenario}: nothing sent"
        );
        for r in evaluate(&obs, now_unix(), "test") {
            assert_eq!(r.outcome, Outcome::Unmeasured, "{scenario} {}", r.id);
        }
    }
    assert_eq!(
        balance(&lab, lab.payer).await,
        payer_before,
        "no money moved"
    );
    assert!(
        store.reservations().unwrap().is_empty(),
        "nothing was reserved"
    );
    let codes: Vec<String> = store
        .refusals()
        .unwrap()
        .into_iter()
        .map(|r| r.code)
        .collect();
    assert_eq!(
        codes,
        [
            "over_per_call_cap",
            "network_not_allowed",
            "asset_not_allowed",
            "quote_changed",
            "transfer_method_not_eip3009"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_file_readable_by_others_is_refused() {
    x402_probe::install_crypto_provider();
    let lab = Lab::start_with(lab_with(&["honest-v2"])).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("payer.key");
    std::fs::copy(&lab.payer_key_file, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = Wallet::from_key_file(&copy).expect_err("0644 must be refused");
    assert!(
        matches!(
            err,
            WalletError::Key(x402_probe::secret::SecretError::Refused { .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("0644"), "{err}");
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o600)).unwrap();
    let wallet = Wallet::from_key_file(&copy).expect("0600 opens");
    assert_eq!(wallet.address(), lab.payer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_rpc_down_before_paying_nothing_is_paid() {
    x402_probe::install_crypto_provider();
    let mut lab = Lab::start_with(lab_with(&["honest-v2"])).await.unwrap();
    let (_dir, store) = temp_store();
    let wallet = lab_wallet(&lab);
    let policy = lab_policy(&lab, "1", "10");
    let (rpc, fetch_cfg) = (lab_rpc(&lab), lab_fetch(&lab));
    let url = lab.endpoint("honest-v2").unwrap().url.clone();
    let (request, quote) = quote_of(&fetch_cfg, &url).await;
    lab.stop_chain();
    let ctx = PaidContext {
        wallet: &wallet,
        svm: None,
        store: &store,
        policy: &policy,
        rpc: &rpc,
        fetch: &fetch_cfg,
        options: PaidOptions::lab(),
        clock: &x402_probe::clock::SystemClock,
        wall: &x402_probe::clock::SystemClock,
        on_step: None,
        references: &Default::default(),
    };
    let obs = paid_call(&ctx, &url, &request, &quote).await;
    assert_eq!(
        refused_code(&obs.decision),
        Some(RefusalCode::RpcUnavailable)
    );
    assert!(obs.payment.is_none());
    for r in evaluate(&obs, now_unix(), "test") {
        assert_eq!(r.outcome, Outcome::Unmeasured, "{} {}", r.id, r.evidence);
    }
    assert!(store.reservations().unwrap().is_empty());
}

/// Pay three endpoints, kill the chain, then verify: the chain checks must say `unmeasured`, never
/// `fail`, and the reservations stay open (counted) until a reconciliation can read the chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_rpc_stopped_mid_run_chain_checks_are_unmeasured() {
    x402_probe::install_crypto_provider();
    let names = ["honest-v2", "charge-without-delivery", "refund-broken"];
    let mut lab = Lab::start_with(lab_with(&names)).await.unwrap();
    let (_dir, store) = temp_store();
    let wallet = lab_wallet(&lab);
    let policy = lab_policy(&lab, "1", "10");
    let (rpc, fetch_cfg) = (lab_rpc(&lab), lab_fetch(&lab));
    let ctx = PaidContext {
        wallet: &wallet,
        svm: None,
        store: &store,
        policy: &policy,
        rpc: &rpc,
        fetch: &fetch_cfg,
        options: PaidOptions::lab(),
        clock: &x402_probe::clock::SystemClock,
        wall: &x402_probe::clock::SystemClock,
        on_step: None,
        references: &Default::default(),
    };
    let mut observations = Vec::new();
    for name in names {
        let url = lab.endpoint(name).unwrap().url.clone();
        let (request, quote) = quote_of(&fetch_cfg, &url).await;
        let obs = pay(&ctx, &url, &request, &quote).await;
        assert!(
            matches!(obs.decision, Decision::Paid { .. }),
            "{name}: {:?}",
            obs.decision
        );
        observations.push((name, obs));
    }
    lab.stop_chain();
    for (name, obs) in &mut observations {
        verify(&ctx, obs).await;
        let results = evaluate(obs, now_unix(), "test");
        let outcome = |id: &str| results.iter().find(|r| r.id == id).unwrap();
        for id in ["C6", "H5", "H6", "H7"] {
            assert_eq!(
                outcome(id).outcome,
                Outcome::Unmeasured,
                "{name} {id}: {}",
                outcome(id).evidence
            );
        }
        for r in &results {
            if ["C6", "H5", "H6", "H7", "H8", "H9"].contains(&r.id.as_str()) {
                assert_ne!(r.outcome, Outcome::Fail, "{name} {}: {}", r.id, r.evidence);
            }
        }
        if *name == "honest-v2" {
            // Delivered: R4, R5, S3 and H8 need no chain.
            for id in ["R4", "R5", "S3", "H8"] {
                assert_eq!(outcome(id).outcome, Outcome::Pass, "{name} {id}");
            }
        } else {
            // Not delivered: whether we were charged is a chain fact, so H8 and H9 cannot tell.
            assert_eq!(outcome("R4").outcome, Outcome::Fail, "{name}: HTTP 500");
            assert_eq!(outcome("H8").outcome, Outcome::Unmeasured, "{name} H8");
            assert_eq!(outcome("H9").outcome, Outcome::Unmeasured, "{name} H9");
        }
        assert_eq!(
            obs.reservation.as_ref().map(|r| r.state.as_str()),
            Some("open"),
            "{name}: unknown on chain, so it stays open and counted"
        );
    }
    let rows = store.reservations().unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r.state == ReservationState::Open));
    assert_eq!(store.totals("x", now_unix()).unwrap().day, usd("0.03"));
}

/// A caller that observes invalid TLS (to report S1) must still never pay through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_paid_through_an_unverified_tls_chain() {
    x402_probe::install_crypto_provider();
    let lab = Lab::start_with(lab_with(&["cert-expired"])).await.unwrap();
    let (_dir, store) = temp_store();
    let wallet = lab_wallet(&lab);
    let policy = lab_policy(&lab, "1", "10");
    let rpc = lab_rpc(&lab);
    let mut fetch_cfg = lab_fetch(&lab);
    fetch_cfg.observe_invalid_tls = true;
    let url = lab.endpoint("cert-expired").unwrap().url.clone();
    let (request, quote) = quote_of(&fetch_cfg, &url).await;
    assert!(
        quote.required.is_some(),
        "the 402 is readable through the expired chain"
    );
    let ctx = PaidContext {
        wallet: &wallet,
        svm: None,
        store: &store,
        policy: &policy,
        rpc: &rpc,
        fetch: &fetch_cfg,
        options: PaidOptions::lab(),
        clock: &x402_probe::clock::SystemClock,
        wall: &x402_probe::clock::SystemClock,
        on_step: None,
        references: &Default::default(),
    };
    let payer_before = balance(&lab, lab.payer).await;
    let obs = paid_call(&ctx, &url, &request, &quote).await;
    assert_eq!(
        refused_code(&obs.decision),
        Some(RefusalCode::QuoteChanged),
        "{:?}",
        obs.decision
    );
    assert!(obs.payment.is_none());
    assert_eq!(balance(&lab, lab.payer).await, payer_before);
    assert!(store.reservations().unwrap().is_empty());
}
