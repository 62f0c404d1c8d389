//! Shared by the paid-call tests: a lab-shaped paid context (wallet, spend store, policy, RPC,
//! fetch settings) and small helpers. Everything is real: the lab's chain, servers and key file.

#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use alloy::primitives::{Address, U256};
use x402_lab::Lab;
use x402_probe::probe::http::{FetchConfig, FetchRequest, fetch};
use x402_probe::probe::rpc::Rpc;
use x402_probe::spend::{AllowedAsset, PayPolicy, SpendStore, Usd};
use x402_probe::wallet::Wallet;
use x402_probe::x402::parse::parse_payment_required;
use x402_probe::x402::types::Parsed402;

pub fn usd(text: &str) -> Usd {
    text.parse().expect("a dollar amount")
}

pub fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}

/// The lab's token on the lab's chain, at one dollar per token.
pub fn lab_allowlist(lab: &Lab) -> Vec<AllowedAsset> {
    vec![AllowedAsset {
        network: format!("eip155:{}", lab.chain_id),
        asset: lab.token.address(),
        decimals: 6,
        usd_per_unit: usd("1"),
    }]
}

/// Caps: 5 cents a call, `subject_cap` per subject per day, `day_cap` per day.
pub fn lab_policy(lab: &Lab, subject_cap: &str, day_cap: &str) -> PayPolicy {
    PayPolicy::new(
        usd("0.05"),
        usd(subject_cap),
        usd(day_cap),
        lab_allowlist(lab),
    )
}

/// How the lab's endpoints are fetched: loopback allowed, the lab CA trusted.
pub fn lab_fetch(lab: &Lab) -> FetchConfig {
    let ca = rustls_pki_types::pem::PemObject::from_pem_slice(lab.ca_pem.as_bytes())
        .expect("the lab CA is PEM");
    FetchConfig {
        allow_private: true,
        extra_roots: vec![ca],
        ..FetchConfig::default()
    }
}

/// R6's sources in the lab: its npm-like registry, and each reference endpoint linked to the
/// adapter its scenario names (what `[[subject]] reference` says in a configuration).
pub fn lab_references(lab: &Lab) -> x402_probe::probe::reference::ReferenceConfig {
    let mut references = x402_probe::probe::reference::ReferenceConfig {
        npm_registry: Some(lab.npm_registry_url.clone()),
        links: Default::default(),
    };
    for e in &lab.endpoints {
        if let Some(r) = e.scenario.reference {
            references.link(&e.url, r.adapter().parse().expect("a known adapter"));
        }
    }
    references
}

pub fn lab_wallet(lab: &Lab) -> Wallet {
    let wallet = Wallet::from_key_file(&lab.payer_key_file).expect("the lab key file opens");
    assert_eq!(
        wallet.address(),
        lab.payer,
        "the key file is the lab payer's"
    );
    wallet
}

pub fn lab_rpc(lab: &Lab) -> Rpc {
    Rpc::new(lab.rpc_url())
}

pub fn temp_store() -> (tempfile::TempDir, SpendStore) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = SpendStore::open(&dir.path().join("state")).expect("the store opens");
    (dir, store)
}

/// The unpaid 402 of `url`, as a client sees it before paying.
pub async fn quote_of(fetch_cfg: &FetchConfig, url: &str) -> (FetchRequest, Parsed402) {
    let request = FetchRequest::get(url);
    let exchange = fetch(fetch_cfg, &request).await;
    let parsed = match exchange.response.as_ref() {
        Some(r) => parse_payment_required(r.status, &r.headers, &r.body),
        None => parse_payment_required(0, &[], &[]),
    };
    (request, parsed)
}

/// [`quote_of`], and the request the endpoint documents (its example query), as a free run
/// sends its samples and a paid call after it (the reference endpoints name their key there).
pub async fn documented_quote_of(fetch_cfg: &FetchConfig, url: &str) -> (FetchRequest, Parsed402) {
    let (request, parsed) = quote_of(fetch_cfg, url).await;
    let documented = parsed
        .required
        .as_ref()
        .and_then(|q| x402_probe::probe::free::documented_request(url, q));
    (documented.unwrap_or(request), parsed)
}

pub async fn balance(lab: &Lab, who: Address) -> U256 {
    lab.token.balance_of(who).await.expect("balanceOf")
}

/// Signed difference `after - before` of token balances, in atomic units.
pub fn delta(before: U256, after: U256) -> i128 {
    let (b, a) = (
        u128::try_from(before).unwrap(),
        u128::try_from(after).unwrap(),
    );
    a as i128 - b as i128
}

/// The lab's Solana payer (funded on its SVM) and the SVM's JSON-RPC, when the SVM runs.
pub fn lab_svm(
    lab: &Lab,
) -> Option<(
    x402_probe::solana_wallet::SolanaWallet,
    x402_probe::probe::solana_rpc::SolanaRpc,
)> {
    let key = lab.solana_payer_key_file.as_ref()?;
    let wallet = x402_probe::solana_wallet::SolanaWallet::from_key_file(key)
        .expect("the lab's Solana key file opens");
    assert_eq!(
        Some(wallet.address().to_string()),
        lab.solana_payer,
        "the Solana key file is the lab's Solana payer's"
    );
    let rpc = x402_probe::probe::solana_rpc::SolanaRpc::new(lab.solana_rpc_url()?);
    Some((wallet, rpc))
}

/// A USDC balance on the lab's SVM (0 for an owner without an account).
pub fn svm_balance(lab: &Lab, owner: &str) -> i128 {
    let svm = lab.svm.as_ref().expect("the lab's SVM runs");
    i128::from(
        svm.token_balance(owner, x402_lab::svm::DEVNET_USDC)
            .expect("the SVM answers")
            .unwrap_or(0),
    )
}
