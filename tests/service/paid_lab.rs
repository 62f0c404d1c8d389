//! The paid acceptance table: pay every lab scenario that promises paid outcomes, through the real
//! lab (anvil, token, facilitator, resource servers), and compare every paid check with the lab's
//! `expect` map; check that balances on chain moved exactly as the scenario implies; check that
//! every refusal case is refused for the right reason and moves nothing.

use crate::paid_support;

use std::collections::BTreeMap;

use x402_lab::scenarios::{FacilitatorKind, Paid, Scenario};
use x402_lab::{Lab, LabOptions};
use x402_probe::checks::paid::{PAID_CHECKS, evaluate};
use x402_probe::evidence::Outcome;
use x402_probe::probe::paid::{Decision, PaidContext, PaidObservation, PaidOptions, paid_call};
use x402_probe::spend::RefusalCode;

use paid_support::*;

/// Why each refusal scenario must be refused (written from the scenario's intent).
fn expected_refusal(scenario: &str) -> Option<RefusalCode> {
    Some(match scenario {
        "expensive" => RefusalCode::OverPerCallCap,
        // `upto`: the caps hold for its maximum; within them, Permit2 (never signed) refuses it.
        "upto-over-cap" => RefusalCode::OverPerCallCap,
        "upto-within-caps" => RefusalCode::UptoNeedsPermit2,
        "permit2-only" => RefusalCode::TransferMethodNotEip3009,
        "off-allowlist-network" => RefusalCode::NetworkNotAllowed,
        "network-not-caip2" => RefusalCode::NetworkNotAllowed,
        "fake-asset" => RefusalCode::AssetNotAllowed,
        "price-rises" => RefusalCode::QuoteChanged,
        "unknown-scheme" => RefusalCode::SchemeNotExact,
        "amount-not-integer" => RefusalCode::AmountInvalid,
        "bad-base64" | "bad-json" | "missing-accepts" => RefusalCode::NoRequirements,
        // Solana: the same guards, by the exact SVM scheme's rules.
        "solana-wrong-mint" => RefusalCode::AssetNotAllowed,
        "solana-bad-base58" => RefusalCode::PayToInvalid,
        "solana-fee-payer-missing" | "solana-memo-too-long" => RefusalCode::SvmTransferInvalid,
        "solana-missing-ata" | "solana-frozen-ata" => RefusalCode::SvmTransferInvalid,
        _ => return None,
    })
}

/// How balances move for one paid call, in multiples of the price: (payer, payTo, attacker).
/// Written by hand from what each facilitator and server kind does.
fn expected_movement(s: &Scenario) -> (i128, i128, i128) {
    if s.name == "timeout-5" {
        // The facilitator refuses an authorization with under 6 s left: nothing settles.
        return (0, 0, 0);
    }
    match (s.facilitator, s.paid) {
        (FacilitatorKind::FakeHash, _) => (0, 0, 0),
        (_, Paid::NoSettlement) => (0, 0, 0),
        // A commitment id: the value moves when the batch closes, never during the lab's run.
        (_, Paid::BatchCommitment) => (0, 0, 0),
        (FacilitatorKind::DoublePull, _) => (-2, 2, 0),
        // The replay (H7) is the retry with the same payment-identifier id: charged again.
        (_, Paid::IdempotencyDoubleCharge) => (-2, 2, 0),
        (FacilitatorKind::Overcharge, _) => (-3, 3, 0),
        (FacilitatorKind::WrongPayee, _) => (-1, 0, 1),
        // Charged, then refunded from payTo within the window (the watch waits for it).
        (FacilitatorKind::Honest, Paid::RefundKept) => (0, 0, 0),
        (FacilitatorKind::Honest, _) => (-1, 1, 0),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_paid_check_agrees_with_the_lab_and_money_moves_as_expected() {
    x402_probe::install_crypto_provider();
    let lab = Lab::start_with(LabOptions::default()).await.unwrap();
    let (_dir, store) = temp_store();
    let wallet = lab_wallet(&lab);
    let mut policy = lab_policy(&lab, "1", "10");
    policy.svm_allowlist = x402_probe::spend::AllowedSvmAsset::canonical_usdc();
    let rpc = lab_rpc(&lab);
    let fetch_cfg = lab_fetch(&lab);
    let (svm_wallet, svm_rpc) = lab_svm(&lab).expect("the lab runs its SVM");
    let solana_payer = svm_wallet.address().to_string();
    let solana_pay_to = lab.svm.as_ref().unwrap().accounts.pay_to.clone();
    let references = lab_references(&lab);
    let ctx = PaidContext {
        wallet: &wallet,
        svm: Some(x402_probe::probe::paid::SvmPay {
            wallet: &svm_wallet,
            rpc: &svm_rpc,
        }),
        store: &store,
        policy: &policy,
        rpc: &rpc,
        fetch: &fetch_cfg,
        options: PaidOptions::lab(),
        clock: &x402_probe::clock::SystemClock,
        wall: &x402_probe::clock::SystemClock,
        on_step: None,
        references: &references,
    };
    let price = x402_lab::quote::PRICE as i128;

    let mut disagreements = Vec::new();
    let mut compared = 0;
    let mut paid_scenarios = 0;
    let mut refused_scenarios = 0;
    let mut findings_compared = 0;
    let mut parties_compared = 0;
    for endpoint in &lab.endpoints {
        let s = &endpoint.scenario;
        let paid_expect: BTreeMap<&str, &str> = s
            .expect
            .iter()
            .filter(|(id, _)| PAID_CHECKS.iter().any(|c| c == **id))
            .map(|(id, want)| (*id, *want))
            .collect();
        let refusal = expected_refusal(s.name);
        if paid_expect.is_empty() && refusal.is_none() {
            continue; // a free-only scenario: it promises nothing about paid calls
        }
        let (request, quote) = documented_quote_of(&fetch_cfg, &endpoint.url).await;
        let payer_before = balance(&lab, lab.payer).await;
        let pay_to_before = balance(&lab, lab.pay_to).await;
        let attacker_before = balance(&lab, lab.attacker).await;
        let svm_before = (
            svm_balance(&lab, &solana_payer),
            svm_balance(&lab, &solana_pay_to),
        );

        let mut obs = paid_call(&ctx, &endpoint.url, &request, &quote).await;
        // A `settlement_pending` answer is followed by the same payment sent again (never a new
        // one: the balances below move by one price at most), until the outcome is final.
        let pending_kind = matches!(
            s.paid,
            Paid::SettlementPending | Paid::PendingForever | Paid::PendingThen402
        );
        assert_eq!(
            !obs.pending.is_empty(),
            pending_kind,
            "{}: {} pending answer(s)",
            s.name,
            obs.pending.len()
        );
        // A 402 advertising `payment-identifier` gets a payment carrying an id (the same one
        // in the replay, which sends the same header); any other gets none.
        if let Some(payment) = &obs.payment {
            assert_eq!(
                payment.payment_id.is_some(),
                s.paid.advertises_payment_identifier(),
                "{}: payment id {:?}",
                s.name,
                payment.payment_id
            );
        }
        if s.paid == Paid::SettlementPending {
            assert!(
                obs.settlement
                    .as_ref()
                    .is_some_and(|r| r.success == Some(true)),
                "{}: the final receipt",
                s.name
            );
        }
        // The refund watch is its own job after the paid call, as the runner and daemon run it.
        obs.refund = Some(match x402_probe::checks::paid::refund_plan(&obs) {
            Ok(plan) => {
                x402_probe::probe::refund::watch_refund(
                    &fetch_cfg,
                    &rpc,
                    &ctx.options,
                    &x402_probe::clock::SystemClock,
                    &plan,
                )
                .await
            }
            Err(why) => x402_probe::evidence::paid::RefundSeen::skipped(why),
        });
        let as_of = now_unix();
        let results = evaluate(&obs, as_of, "test");
        assert_eq!(results.len(), PAID_CHECKS.len());
        // Evidence is collected once and evaluated again later (the ledger): the observation must
        // survive storage unchanged and give the same results.
        let stored = serde_json::to_string(&obs).expect("the observation serialises");
        let back: PaidObservation = serde_json::from_str(&stored).expect("and reads back");
        assert_eq!(back, obs, "{}: the stored observation differs", s.name);
        assert_eq!(evaluate(&back, as_of, "test"), results, "{}", s.name);

        let moved = (
            delta(payer_before, balance(&lab, lab.payer).await),
            delta(pay_to_before, balance(&lab, lab.pay_to).await),
            delta(attacker_before, balance(&lab, lab.attacker).await),
        );
        let svm_moved = (
            svm_balance(&lab, &solana_payer) - svm_before.0,
            svm_balance(&lab, &solana_pay_to) - svm_before.1,
        );
        match refusal {
            Some(code) => {
                refused_scenarios += 1;
                match &obs.decision {
                    Decision::Refused { refusals } => assert!(
                        refusals.iter().any(|r| r.code == code),
                        "{}: refused for {refusals:?}, expected {code:?}",
                        s.name
                    ),
                    other => panic!("{}: expected a refusal ({code:?}), got {other:?}", s.name),
                }
                assert!(!obs.payment_sent(), "{}: nothing may be signed", s.name);
                assert_eq!(moved, (0, 0, 0), "{}: a refusal moved money", s.name);
                assert_eq!(svm_moved, (0, 0), "{}: a refusal moved money", s.name);
                for r in &results {
                    assert_eq!(
                        r.outcome,
                        Outcome::Unmeasured,
                        "{} {}: a refusal measures nothing ({})",
                        s.name,
                        r.id,
                        r.evidence
                    );
                }
            }
            None => {
                paid_scenarios += 1;
                assert!(
                    matches!(obs.decision, Decision::Paid { .. }),
                    "{}: expected to pay, got {:?}",
                    s.name,
                    obs.decision
                );
                let (payer, pay_to, attacker) = expected_movement(s);
                let (evm, svm) = match &obs.svm {
                    // The attacker's Solana account is the lab's own: payer and payTo tell.
                    Some(_) => ((0, 0, 0), (payer * price, pay_to * price)),
                    None => ((payer * price, pay_to * price, attacker * price), (0, 0)),
                };
                assert_eq!(
                    (moved, svm_moved),
                    (evm, svm),
                    "{}: balances ((payer, payTo, attacker), Solana (payer, payTo)) moved unexpectedly",
                    s.name
                );
                // The reservation follows the chain: settled exactly when our authorization was
                // used (on Solana: when the transaction carrying our signature landed).
                let used = match &obs.svm {
                    Some(svm) => svm.chain.window.value().map(|w| {
                        w.iter()
                            .any(|tx| tx.signatures.contains(&svm.payment.signature))
                    }),
                    None => obs
                        .chain
                        .as_ref()
                        .and_then(|c| c.authorization_state.value().copied()),
                };
                let state = obs.reservation.as_ref().map(|r| r.state.as_str());
                let want_state = if used == Some(true) {
                    "settled"
                } else {
                    "open"
                };
                assert_eq!(state, Some(want_state), "{}: reservation state", s.name);
            }
        }
        // The paid findings (the lab's one known facilitator is its honest one's signer).
        let known = x402_probe::checks::findings::FindingsContext {
            facilitators: vec![lab.facilitator_signer],
        };
        for f in x402_probe::checks::findings::evaluate_paid("test", as_of, Some(&obs), &known) {
            if let Some(want) = s.findings.get(f.id.as_str()) {
                compared += 1;
                findings_compared += 1;
                if f.outcome.as_str() != *want {
                    disagreements.push(format!(
                        "{} finding {}: want {want}, got {} ({})",
                        s.name, f.id, f.outcome, f.evidence
                    ));
                }
            }
        }
        // Whose each failure is: a charge refused with 401/403 is the seller's, a settlement
        // that moved the wrong money the facilitator's.
        let free = x402_probe::observation::FreeObservation {
            subject: endpoint.url.clone(),
            vantage: "test".into(),
            at: as_of,
            samples: Vec::new(),
            operator_file: None,
            listing: x402_probe::observation::ListingSeen::NotAsked,
            chain: x402_probe::observation::ChainSeen::NoRpc,
            solana: Default::default(),
            declared_assets: Vec::new(),
            allow_private: true,
            cut_short: None,
            listing_sha256: None,
            mcp: None,
            peers: None,
        };
        let parties = x402_probe::checks::attribution::attribute_all(&results, &free, Some(&obs));
        let want_party = match s.name {
            "pay-then-401" | "pay-then-403" | "charge-without-delivery" => {
                Some(("R4", x402_probe::checks::attribution::Party::Seller))
            }
            "double-pull" => Some(("H7", x402_probe::checks::attribution::Party::Facilitator)),
            "overcharge" => Some(("H5", x402_probe::checks::attribution::Party::Facilitator)),
            "wrong-payee" => Some(("H6", x402_probe::checks::attribution::Party::Facilitator)),
            _ => None,
        };
        if let Some((check, party)) = want_party {
            parties_compared += 1;
            let got = parties
                .iter()
                .find(|(id, _)| id.as_str() == check)
                .map(|(_, a)| a.party);
            if got != Some(party) {
                disagreements.push(format!(
                    "{} {check} party: want {party}, got {got:?}",
                    s.name
                ));
            }
        }
        let by_id: BTreeMap<&str, _> = results.iter().map(|r| (r.id.as_str(), r)).collect();
        // A commitment id instead of a transaction: the chain checks wait (unmeasured, never
        // failed) unless money moved during the call, which is judged as any charge.
        let waiting: &[&str] = match s.paid {
            Paid::BatchCommitment => &["C6", "H5", "H6", "H7"],
            Paid::BatchCommitmentSettled => &["C6"],
            _ => &[],
        };
        for id in waiting {
            let r = by_id[id];
            assert_eq!(
                r.outcome,
                Outcome::Unmeasured,
                "{} {id}: {}",
                s.name,
                r.evidence
            );
            assert!(
                r.evidence.contains("commitment"),
                "{} {id}: {}",
                s.name,
                r.evidence
            );
        }
        for (id, want) in &paid_expect {
            compared += 1;
            let got = by_id[id];
            if got.outcome.as_str() != *want {
                disagreements.push(format!(
                    "{} {id}: want {want}, got {} ({})",
                    s.name, got.outcome, got.evidence
                ));
            }
        }
        for r in &results {
            assert!(!r.receipt.at.is_empty() && r.receipt.vantage == "test");
            if matches!(obs.decision, Decision::Paid { .. }) {
                assert!(
                    r.receipt.sha256.contains_key("paid.payment_header"),
                    "{} {}: the receipt names the bytes sent",
                    s.name,
                    r.id
                );
            }
        }
        if std::env::var_os("PAID_LAB_VERBOSE").is_some() {
            for r in &results {
                eprintln!("{:<24} {} {:<10} {}", s.name, r.id, r.outcome, r.evidence);
            }
        }
    }
    eprintln!(
        "paid {paid_scenarios} scenarios, refused {refused_scenarios}, compared {compared} expectations"
    );
    assert!(paid_scenarios >= 25, "paid only {paid_scenarios} scenarios");
    assert!(refused_scenarios >= 8, "refused only {refused_scenarios}");
    assert!(compared >= 250, "compared only {compared} expectations");
    assert!(
        findings_compared >= 10,
        "compared only {findings_compared} paid findings"
    );
    assert_eq!(parties_compared, 6, "parties compared");
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    // Every refusal is on record with its reason.
    let refusals = store.refusals().unwrap();
    assert!(refusals.len() >= refused_scenarios);
    assert!(refusals.iter().all(|r| !r.reason.is_empty()));

    // A Solana RPC that is down, or that answers something else than Solana (the EVM node): we
    // do not pay what we cannot verify. Nothing is reserved, nothing signed, nothing moves.
    let honest = lab.endpoint("solana-honest-v2").unwrap().url.clone();
    let (request, quote) = quote_of(&fetch_cfg, &honest).await;
    let reserved = store.svm_reservations().unwrap().len();
    let before = svm_balance(&lab, &solana_payer);
    for broken in [
        x402_probe::probe::solana_rpc::SolanaRpc::new("http://127.0.0.1:9/"),
        x402_probe::probe::solana_rpc::SolanaRpc::new(lab.rpc_url()),
    ] {
        let ctx = PaidContext {
            svm: Some(x402_probe::probe::paid::SvmPay {
                wallet: &svm_wallet,
                rpc: &broken,
            }),
            options: PaidOptions::lab(),
            ..ctx
        };
        let obs = paid_call(&ctx, &honest, &request, &quote).await;
        let Decision::Refused { refusals } = &obs.decision else {
            panic!(
                "{}: expected a refusal, got {:?}",
                broken.url(),
                obs.decision
            );
        };
        assert_eq!(
            refusals[0].code,
            RefusalCode::RpcUnavailable,
            "{refusals:?}"
        );
        assert!(!obs.payment_sent());
        for r in evaluate(&obs, now_unix(), "test") {
            assert_eq!(r.outcome, Outcome::Unmeasured, "{} {}", r.id, r.evidence);
        }
    }
    assert_eq!(store.svm_reservations().unwrap().len(), reserved);
    assert_eq!(svm_balance(&lab, &solana_payer), before);
}
