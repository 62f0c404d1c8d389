//! Paying on Solana against the lab's SVM: the transaction we build (reserved durably, signed by
//! our Solana wallet) verified by the official x402 SVM facilitator (`@x402/svm` from npm,
//! `lab/scripts/x402-svm-verify.mjs`) against the lab's JSON-RPC; then settled by each of the
//! lab's Solana facilitators, the settlement read back from the chain through our Solana RPC
//! client and judged (C6, H5, H6, H7) against expectations written here by hand.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use base64::Engine as _;
use serde_json::{Value, json};
use x402_lab::scenarios::FacilitatorKind;
use x402_lab::svm::{BLOCKHASH_VALID_BLOCKS, DEVNET_CAIP2, DEVNET_USDC, Svm};
use x402_probe::evidence::Outcome;
use x402_probe::evidence::chain::ChainRead;
use x402_probe::evidence::svm::SvmPaidChainSeen;
use x402_probe::paid::svm_chain;
use x402_probe::probe::reconcile::reconcile_svm;
use x402_probe::probe::solana_rpc::SolanaRpc;
use x402_probe::solana_wallet::SolanaWallet;
use x402_probe::spend::{
    AllowedSvmAsset, PayPolicy, RefusalCode, ReservationState, ReserveError, SpendStore,
    SvmReservation, SvmReserveRequest, Usd,
};
use x402_probe::x402::parse::parse_payment_required;
use x402_probe::x402::payload::{build_svm_payment_header, decode_payment_header};
use x402_probe::x402::solana::{MintState, SolanaAddress};
use x402_probe::x402::solana_payment::partially_signed_transaction;
use x402_probe::x402::types::PaymentRequired;

const PRICE: u64 = 10_000;
const SUBJECT: &str = "https://svm.example/weather";

fn usd(text: &str) -> Usd {
    text.parse().unwrap()
}

fn policy(per_call: &str, per_day: &str) -> PayPolicy {
    let mut policy = PayPolicy::new(usd(per_call), usd(per_day), usd(per_day), Vec::new());
    policy.svm_allowlist = AllowedSvmAsset::canonical_usdc();
    policy
}

/// The lab endpoint's quote, as its honest Solana scenario writes it.
fn quote(svm: &Svm) -> PaymentRequired {
    let body = json!({"x402Version": 2, "resource": {"url": SUBJECT},
        "accepts": [{"scheme": "exact", "network": DEVNET_CAIP2, "amount": PRICE.to_string(),
            "asset": DEVNET_USDC, "payTo": svm.accounts.pay_to, "maxTimeoutSeconds": 60,
            "extra": {"feePayer": svm.accounts.fee_payer}}]});
    parse_payment_required(402, &[], body.to_string().as_bytes())
        .required
        .expect("the quote parses")
}

fn wallet(dir: &Path) -> SolanaWallet {
    let path = dir.join("solana.key");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    f.write_all(hex::encode(rand::random::<[u8; 32]>()).as_bytes())
        .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    SolanaWallet::from_key_file(&path).unwrap()
}

/// One payment of the quote, reserved and signed as the paid driver does it: what our RPC reads
/// (the mint, a blockhash, the height), the reservation committed, the signature committed.
struct Signed {
    payload: Value,
    signature: String,
    transaction: Vec<u8>,
    transfer: x402_probe::x402::solana_payment::SvmTransfer,
}

async fn pay(
    svm: &Svm,
    rpc: &SolanaRpc,
    store: &SpendStore,
    policy: &PayPolicy,
    wallet: &SolanaWallet,
) -> Result<Signed, ReserveError> {
    let (required, reservation) = reserve(svm, rpc, store, policy, wallet).await?;
    let requirement = &required.accepts[0];
    let signed = wallet.sign(&reservation).unwrap();
    store
        .record_svm_signature(reservation.id(), &signed.signature)
        .unwrap();
    let header = build_svm_payment_header(&required, requirement, &signed.transaction).unwrap();
    Ok(Signed {
        payload: decode_payment_header(&header.value).unwrap(),
        signature: bs58::encode(signed.signature).into_string(),
        transaction: signed.transaction,
        transfer: reservation.transfer().clone(),
    })
}

/// The reservation alone (what a paid call has committed when it is killed before signing).
async fn reserve(
    svm: &Svm,
    rpc: &SolanaRpc,
    store: &SpendStore,
    policy: &PayPolicy,
    wallet: &SolanaWallet,
) -> Result<(PaymentRequired, SvmReservation), ReserveError> {
    let required = quote(svm);
    let requirement = &required.accepts[0];
    let mint = rpc.account(DEVNET_USDC).await.unwrap().expect("the mint");
    let data = base64::engine::general_purpose::STANDARD
        .decode(&mint.data)
        .unwrap();
    let decimals = MintState::read(&data).unwrap().decimals;
    let (blockhash, last_valid) = rpc.latest_blockhash().await.unwrap();
    let request = SvmReserveRequest {
        subject: SUBJECT,
        requirement,
        payer: wallet.address(),
        token_program: SolanaAddress::parse(&mint.owner).unwrap(),
        mint_decimals: decimals,
        recent_blockhash: blockhash,
        last_valid_block_height: last_valid,
        block_height: rpc.block_height().await.unwrap(),
    };
    let reservation = store.reserve_svm(policy, &request, now())?;
    Ok((required, reservation))
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The official facilitator's verdict on a payload (`isValid`, `invalidReason`).
fn official_verify(svm: &Svm, payload: &Value) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let input = json!({
        "rpcUrl": svm.rpc_url,
        "feePayerKeypair": svm.fee_payer_keypair_bytes().unwrap(),
        "paymentPayload": payload,
        "paymentRequirements": payload["accepted"],
    });
    let mut child = Command::new("node")
        .arg(root.join("lab/scripts/x402-svm-verify.mjs"))
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node runs (npm ci installs @x402/svm)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Our transaction passes the reference implementation's verification (instruction layout,
/// fee payer, our signature over the message, the transfer's mint, destination and amount, and
/// its simulation on the lab's SVM); the same transaction with one byte of its memo changed
/// under our old signature does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_svm_facilitator_verifies_the_transaction_we_build() {
    let dir = tempfile::tempdir().unwrap();
    let svm = Svm::start().await.unwrap();
    let wallet = wallet(dir.path());
    svm.fund_usdc(&wallet.address().to_string(), 1_000_000)
        .unwrap();
    let rpc = SolanaRpc::new(&svm.rpc_url);
    let store = SpendStore::open(&dir.path().join("state")).unwrap();
    let signed = pay(&svm, &rpc, &store, &policy("0.05", "1"), &wallet)
        .await
        .unwrap();
    let verdict = official_verify(&svm, &signed.payload);
    assert_eq!(verdict["isValid"], true, "{verdict}");
    assert_eq!(verdict["payer"], wallet.address().to_string(), "{verdict}");

    let mut altered = signed.transfer.clone();
    altered.memo[0] ^= 1;
    let mut signature = [0u8; 64];
    signature.copy_from_slice(&signed.transaction[65..129]);
    let forged = partially_signed_transaction(&altered.message(), &signature);
    let mut payload = signed.payload.clone();
    payload["payload"]["transaction"] =
        json!(base64::engine::general_purpose::STANDARD.encode(forged));
    let verdict = official_verify(&svm, &payload);
    assert_eq!(verdict["isValid"], false, "{verdict}");
}

/// Each lab facilitator settles one payment; the chain, read through our RPC client, says what
/// happened, and the pure judging reads it as written here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlements_are_read_from_the_chain_and_judged() {
    use Outcome::{Fail, Na, Pass};
    let dir = tempfile::tempdir().unwrap();
    let svm = Svm::start().await.unwrap();
    let wallet = wallet(dir.path());
    let source = svm
        .fund_usdc(&wallet.address().to_string(), 1_000_000)
        .unwrap();
    let destination = Svm::reference_ata(&svm.accounts.pay_to, DEVNET_USDC).unwrap();
    let rpc = SolanaRpc::new(&svm.rpc_url);
    let store = SpendStore::open(&dir.path().join("state")).unwrap();
    let policy = policy("0.05", "1");
    x402_lab::install_crypto_provider();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    // (C6, H5, H6, H7), by hand.
    let expected: BTreeMap<FacilitatorKind, [Outcome; 4]> = [
        (FacilitatorKind::Honest, [Pass, Pass, Pass, Pass]),
        (FacilitatorKind::Overcharge, [Pass, Fail, Pass, Pass]),
        (FacilitatorKind::WrongPayee, [Pass, Pass, Fail, Pass]),
        (FacilitatorKind::DoublePull, [Pass, Pass, Pass, Fail]),
        (FacilitatorKind::FakeHash, [Fail, Na, Na, Na]),
    ]
    .into_iter()
    .collect();
    for (kind, outcomes) in expected {
        let before = rpc.transactions_of(&source, None, 1).await.unwrap();
        let until = before.first().map(|t| t.id().to_string());
        let signed = pay(&svm, &rpc, &store, &policy, &wallet).await.unwrap();
        let body = json!({"x402Version": 2, "paymentPayload": signed.payload,
            "paymentRequirements": signed.payload["accepted"]});
        let settlement: Value = http
            .post(format!("{}/settle", svm.facilitator_urls[&kind]))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let named = settlement["transaction"].as_str();
        let claimed = match named {
            Some(s) if bs58::decode(s).into_vec().is_ok_and(|b| b.len() == 64) => {
                ChainRead::from_result(rpc.transaction(s).await)
            }
            _ => ChainRead::skipped("no signature named"),
        };
        let seen = SvmPaidChainSeen {
            rpc_url: svm.rpc_url.clone(),
            our_signature: signed.signature.clone(),
            source: source.clone(),
            destination: destination.clone(),
            mint: DEVNET_USDC.into(),
            amount: PRICE,
            claimed,
            window: ChainRead::from_result(
                rpc.transactions_of(&source, until.as_deref(), 50).await,
            ),
        };
        let got = [
            svm_chain::c6(&seen, settlement["success"].as_bool(), named),
            svm_chain::h5(&seen),
            svm_chain::h6(&seen),
            svm_chain::h7(&seen),
        ];
        for (name, (c, want)) in ["C6", "H5", "H6", "H7"]
            .iter()
            .zip(got.iter().zip(outcomes))
        {
            assert_eq!(
                c.outcome,
                want,
                "{} {name}: {} ({settlement})",
                kind.name(),
                c.evidence
            );
        }
    }
    // Every payment was reserved, signed and its signature committed before it left.
    let rows = store.svm_reservations().unwrap();
    assert_eq!(rows.len(), 5);
    assert!(rows.iter().all(|r| r.signature.is_some()));

    // Reconciliation, as after a crash: one more reservation, killed before it was signed.
    let (_, unsigned) = reserve(&svm, &rpc, &store, &policy, &wallet).await.unwrap();
    let report = reconcile_svm(&store, &rpc, now()).await.unwrap();
    // The four that landed are settled by the transaction carrying our signature; the unsigned
    // one was never sent; the fake signature's payment is not on chain while its blockhash lives.
    assert_eq!(report.settled, [1, 2, 3, 4], "{report:?}");
    assert_eq!(report.released, [unsigned.id()], "{report:?}");
    assert_eq!(report.still_open.len(), 1, "{report:?}");
    svm.advance_blocks(2 * BLOCKHASH_VALID_BLOCKS).unwrap();
    let report = reconcile_svm(&store, &rpc, now()).await.unwrap();
    assert_eq!(report.released, [5], "{report:?}");
    let rows = store.svm_reservations().unwrap();
    for row in &rows[..4] {
        assert_eq!(row.state, ReservationState::Settled);
        assert!(row.transaction_id.is_some());
    }
    assert_eq!(store.totals(SUBJECT, now()).unwrap().open, 0);
}

/// The caps count Solana reservations: the per-call cap refuses before anything is reserved,
/// and the subject's 24-hour cap counts the open ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn solana_payments_meet_the_same_caps() {
    let dir = tempfile::tempdir().unwrap();
    let svm = Svm::start().await.unwrap();
    let wallet = wallet(dir.path());
    svm.fund_usdc(&wallet.address().to_string(), 1_000_000)
        .unwrap();
    let rpc = SolanaRpc::new(&svm.rpc_url);
    let store = SpendStore::open(&dir.path().join("state")).unwrap();
    let refused = pay(&svm, &rpc, &store, &policy("0.005", "1"), &wallet).await;
    assert!(
        matches!(&refused, Err(ReserveError::Refused(r)) if r.code == RefusalCode::OverPerCallCap),
        "{:?}",
        refused.err()
    );
    let day = policy("0.05", "0.025");
    for _ in 0..2 {
        pay(&svm, &rpc, &store, &day, &wallet).await.unwrap();
    }
    let third = pay(&svm, &rpc, &store, &day, &wallet).await;
    assert!(
        matches!(&third, Err(ReserveError::Refused(r)) if r.code == RefusalCode::OverPerSubjectCap),
        "{:?}",
        third.err()
    );
    assert_eq!(store.totals(SUBJECT, now()).unwrap().open, 2);
    assert_eq!(store.refusals().unwrap().len(), 2);
}
