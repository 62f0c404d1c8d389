//! The Solana side of the prober against the lab's local SVM (litesvm behind the lab's JSON-RPC):
//! the fixed Solana RPC client, our associated token account derivation against the official
//! crate's, and C3 of a Solana entry when our Solana RPC works, dies, or is not Solana at all.

use std::time::Duration;

use x402_lab::svm::{DEVNET_GENESIS_HASH, DEVNET_USDC, Svm};
use x402_lab::{Lab, LabOptions};
use x402_probe::checks::free::evaluate_free;
use x402_probe::evidence::{CheckId, Outcome};
use x402_probe::observation::SolanaSeen;
use x402_probe::probe::free::{FreeProbeConfig, probe_free};
use x402_probe::probe::http::FetchConfig;
use x402_probe::probe::rpc::RpcError;
use x402_probe::probe::solana_rpc::SolanaRpc;
use x402_probe::rubric::Rubric;
use x402_probe::x402::solana::{MintState, SolanaAddress, TOKEN_PROGRAM};

#[test]
fn our_associated_token_accounts_are_the_official_ones() {
    let usdc = SolanaAddress::parse(DEVNET_USDC).unwrap();
    let token = SolanaAddress::token_program();
    for _ in 0..200 {
        let owner = SolanaAddress(rand::random());
        let mint = if rand::random::<bool>() {
            usdc
        } else {
            SolanaAddress(rand::random())
        };
        let ours = SolanaAddress::associated_token_account(&owner, &mint, &token).unwrap();
        let reference = Svm::reference_ata(&owner.to_string(), &mint.to_string()).unwrap();
        assert_eq!(ours.to_string(), reference, "owner {owner}, mint {mint}");
    }
}

fn config(lab: &Lab, solana_rpc: Option<SolanaRpc>) -> FreeProbeConfig {
    let ca = rustls_pki_types::pem::PemObject::from_pem_slice(lab.ca_pem.as_bytes()).unwrap();
    FreeProbeConfig {
        fetch: FetchConfig {
            allow_private: true,
            extra_roots: vec![ca],
            ..FetchConfig::default()
        },
        samples: 1,
        spacing: Duration::from_millis(0),
        solana_rpc,
        vantage: "test".into(),
        ..FreeProbeConfig::default()
    }
}

async fn c3_of(lab: &Lab, scenario: &str, solana_rpc: Option<SolanaRpc>) -> (Outcome, String) {
    let url = &lab.endpoint(scenario).unwrap().url;
    let observation = probe_free(&config(lab, solana_rpc), url, 0).await;
    let c3 = evaluate_free(&observation, &Rubric::embedded_default())
        .into_iter()
        .find(|r| r.id == CheckId::C3)
        .unwrap();
    (c3.outcome, c3.evidence)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c3_reads_the_mint_and_the_payout_account_through_the_solana_rpc() {
    x402_probe::install_crypto_provider();
    let mut lab = Lab::start_with(LabOptions {
        scenarios: Some(vec!["solana-honest-v2".into(), "solana-missing-ata".into()]),
        ..Default::default()
    })
    .await
    .unwrap();
    let url = lab.solana_rpc_url().unwrap().to_string();
    let rpc = SolanaRpc::new(&url);

    // The client against the node.
    assert_eq!(rpc.genesis_hash().await.unwrap(), DEVNET_GENESIS_HASH);
    let mint = rpc
        .account(DEVNET_USDC)
        .await
        .unwrap()
        .expect("USDC exists");
    assert_eq!(mint.owner, TOKEN_PROGRAM);
    let data = base64_decode(&mint.data);
    assert_eq!(MintState::read(&data).map(|m| m.decimals), Some(6));
    let nobody = SolanaAddress(rand::random()).to_string();
    assert_eq!(rpc.account(&nobody).await.unwrap(), None);

    // C3 through it: the honest payee can be paid, the one without an account cannot.
    let (outcome, evidence) = c3_of(&lab, "solana-honest-v2", Some(rpc.clone())).await;
    assert_eq!(outcome, Outcome::Pass, "{evidence}");
    let (outcome, evidence) = c3_of(&lab, "solana-missing-ata", Some(rpc.clone())).await;
    assert_eq!(outcome, Outcome::Fail, "{evidence}");
    assert!(evidence.contains("payTo.ata_missing"), "{evidence}");

    // Without a Solana RPC, with the EVM node in its place (it knows no Solana method), and with
    // ours dead: unmeasured, never a fail.
    let (outcome, evidence) = c3_of(&lab, "solana-missing-ata", None).await;
    assert_eq!(outcome, Outcome::Unmeasured, "{evidence}");
    assert!(evidence.contains("--solana-rpc"), "{evidence}");
    let evm = SolanaRpc::new(lab.rpc_url());
    assert!(matches!(
        evm.genesis_hash().await,
        Err(RpcError::Node { .. } | RpcError::BadResponse { .. })
    ));
    let (outcome, evidence) = c3_of(&lab, "solana-missing-ata", Some(evm)).await;
    assert_eq!(outcome, Outcome::Unmeasured, "{evidence}");
    lab.svm.as_mut().unwrap().stop_rpc();
    let observation = probe_free(
        &config(&lab, Some(rpc.clone())),
        &lab.endpoint("solana-missing-ata").unwrap().url,
        0,
    )
    .await;
    assert!(
        matches!(observation.solana, SolanaSeen::RpcDown { .. }),
        "{:?}",
        observation.solana
    );
    let (outcome, evidence) = c3_of(&lab, "solana-missing-ata", Some(rpc)).await;
    assert_eq!(outcome, Outcome::Unmeasured, "{evidence}");
    assert!(evidence.contains("unavailable"), "{evidence}");
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}
