//! The lab's Solana facilitators, served beside the SVM's JSON-RPC (`/facilitator/<kind>/verify`
//! and `/settle`, the same request and answer shapes as the EVM ones): each decodes the partially
//! signed transaction with the official types, checks it as the scheme's facilitator does (fee
//! payer at account 0, `TransferChecked` of the quoted amount and mint to payTo's ATA), signs as
//! the fee payer and lands it on the lab's SVM. The dishonest ones alter what we signed before
//! landing it (the lab's SVM does not check signatures: see `svm.rs`), or land nothing.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::routing::post;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use solana_address::Address;
use solana_message::VersionedMessage;
use solana_signer::Signer;
use solana_transaction::versioned::VersionedTransaction;

use crate::scenarios::FacilitatorKind;
use crate::svm::{Chain, Svm};

pub(crate) fn router() -> Router<Arc<Mutex<Chain>>> {
    Router::new()
        .route("/facilitator/{kind}/verify", post(verify))
        .route("/facilitator/{kind}/settle", post(settle))
}

/// A base64 wire transaction.
pub fn decode_transaction(text: &str) -> Option<VersionedTransaction> {
    let bytes = STANDARD.decode(text.trim()).ok()?;
    bincode::deserialize(&bytes).ok()
}

/// The first parameter of `simulateTransaction` / `sendTransaction`: a base64 transaction (the
/// lab's node answers no other encoding).
pub(crate) fn decode_param(params: &Value) -> Result<VersionedTransaction, (i64, String)> {
    let encoding = params
        .get(1)
        .and_then(|c| c.get("encoding"))
        .and_then(Value::as_str)
        .unwrap_or("base58");
    if encoding != "base64" {
        return Err((
            -32602,
            format!("this lab node reads base64 only, not {encoding}"),
        ));
    }
    params
        .get(0)
        .and_then(Value::as_str)
        .and_then(decode_transaction)
        .ok_or((-32602, "invalid transaction: does not decode".to_string()))
}

fn kind_of(name: &str) -> Option<FacilitatorKind> {
    FacilitatorKind::ALL.into_iter().find(|k| k.name() == name)
}

/// What a checked payment transfers.
struct Checked {
    tx: VersionedTransaction,
    /// The token authority (our wallet), base58.
    payer: String,
}

fn invalid(reason: &str) -> Value {
    json!({"isValid": false, "invalidReason": reason, "payer": ""})
}

fn check(chain: &Chain, body: &Value) -> Result<Checked, Value> {
    let requirements = &body["paymentRequirements"];
    let text = body
        .pointer("/paymentPayload/payload/transaction")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("invalid_payload"))?;
    let tx = decode_transaction(text).ok_or_else(|| invalid("transaction_could_not_be_decoded"))?;
    let VersionedMessage::V0(message) = &tx.message else {
        return Err(invalid("transaction_not_v0"));
    };
    let keys = &message.account_keys;
    if keys.first() != Some(&chain.fee_payer.pubkey()) {
        return Err(invalid("fee_payer_mismatch"));
    }
    let ixs = &message.instructions;
    if !(3..=7).contains(&ixs.len()) {
        return Err(invalid("transaction_instructions_length"));
    }
    let transfer = &ixs[2];
    let key = |i: u8| keys.get(usize::from(i)).map(Address::to_string);
    let program = key(transfer.program_id_index).unwrap_or_default();
    if program != spl_token_interface::id().to_string()
        || transfer.data.len() != 10
        || transfer.data[0] != 12
        || transfer.accounts.len() != 4
    {
        return Err(invalid("no_transfer_instruction"));
    }
    let amount = u64::from_le_bytes(transfer.data[1..9].try_into().unwrap_or_default());
    let quoted = requirements["amount"]
        .as_str()
        .or(requirements["maxAmountRequired"].as_str())
        .and_then(|a| a.parse::<u64>().ok());
    if Some(amount) != quoted {
        return Err(invalid("amount_mismatch"));
    }
    let (mint, destination, authority) = (
        key(transfer.accounts[1]).unwrap_or_default(),
        key(transfer.accounts[2]).unwrap_or_default(),
        key(transfer.accounts[3]).unwrap_or_default(),
    );
    if Some(mint.as_str()) != requirements["asset"].as_str() {
        return Err(invalid("mint_mismatch"));
    }
    let expected = requirements["payTo"]
        .as_str()
        .and_then(|p| Svm::reference_ata(p, &mint).ok());
    if Some(destination) != expected {
        return Err(invalid("recipient_mismatch"));
    }
    if let Err(failed) = chain.svm.simulate_transaction(tx.clone()) {
        return Err(
            json!({"isValid": false, "invalidReason": "transaction_simulation_failed",
            "invalidMessage": format!("{:?}", failed.err), "payer": authority}),
        );
    }
    Ok(Checked {
        tx,
        payer: authority,
    })
}

async fn verify(
    State(chain): State<Arc<Mutex<Chain>>>,
    Path(kind): Path<String>,
    Json(body): Json<Value>,
) -> Json<Value> {
    if kind_of(&kind).is_none() {
        return Json(invalid("unknown_facilitator"));
    }
    let Ok(chain) = chain.lock() else {
        return Json(invalid("unexpected_verify_error"));
    };
    Json(match check(&chain, &body) {
        Ok(c) => json!({"isValid": true, "payer": c.payer}),
        Err(v) => v,
    })
}

async fn settle(
    State(chain): State<Arc<Mutex<Chain>>>,
    Path(kind): Path<String>,
    Json(body): Json<Value>,
) -> Json<Value> {
    let network = body["paymentRequirements"]["network"].clone();
    let failure = |reason: &str, payer: &str| {
        json!({"success": false, "errorReason": reason, "transaction": "",
            "network": network, "payer": payer})
    };
    let Some(kind) = kind_of(&kind) else {
        return Json(failure("unknown_facilitator", ""));
    };
    let Ok(mut chain) = chain.lock() else {
        return Json(failure("unexpected_settle_error", ""));
    };
    let checked = match check(&chain, &body) {
        Ok(c) => c,
        Err(v) => {
            let reason = v["invalidReason"].as_str().unwrap_or("invalid").to_string();
            return Json(failure(&reason, ""));
        }
    };
    let payer = checked.payer.clone();
    let landed = match kind {
        FacilitatorKind::Honest => land(&mut chain, checked.tx, |_, _| {}),
        FacilitatorKind::FakeHash => {
            Ok(bs58::encode(rand::random::<[u8; 32]>().repeat(2)).into_string())
        }
        FacilitatorKind::Overcharge => land(&mut chain, checked.tx, |m, _| {
            let data = &mut m.instructions[2].data;
            let amount = u64::from_le_bytes(data[1..9].try_into().unwrap_or_default());
            data[1..9].copy_from_slice(&amount.saturating_mul(3).to_le_bytes());
        }),
        FacilitatorKind::WrongPayee => land(&mut chain, checked.tx, |m, attacker| {
            let destination = usize::from(m.instructions[2].accounts[2]);
            m.account_keys[destination] = attacker;
        }),
        FacilitatorKind::DoublePull => {
            let first = land(&mut chain, checked.tx.clone(), |_, _| {});
            // The same transfer again, with another compute price so that it is another
            // transaction (the chain refuses an identical one).
            let _second = land(&mut chain, checked.tx, |m, _| {
                m.instructions[1].data[1] = m.instructions[1].data[1].wrapping_add(1);
            });
            first
        }
    };
    Json(match landed {
        Ok(signature) => json!({"success": true, "transaction": signature,
            "network": network, "payer": payer}),
        Err(e) => {
            let mut v = failure("transaction_failed", &payer);
            v["errorMessage"] = json!(e);
            v
        }
    })
}

/// Alters the message as `alter` says (nothing, for an honest settlement), signs it as the fee
/// payer and lands it.
fn land(
    chain: &mut Chain,
    mut tx: VersionedTransaction,
    alter: impl FnOnce(&mut solana_message::v0::Message, Address),
) -> Result<String, String> {
    let attacker_ata: Address =
        Svm::reference_ata(&chain.attacker.to_string(), crate::svm::DEVNET_USDC)
            .map_err(|e| e.to_string())?
            .parse()
            .map_err(|_| "the attacker's account".to_string())?;
    if let VersionedMessage::V0(m) = &mut tx.message {
        alter(m, attacker_ata);
    }
    let signature = chain.fee_payer.sign_message(&tx.message.serialize());
    if let Some(slot) = tx.signatures.first_mut() {
        *slot = signature;
    }
    chain.send(tx)
}
