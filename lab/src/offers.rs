//! Signed offers and receipts (x402's `offer-receipt` extension) as the lab's sellers write them,
//! from the extension's spec (`extension-offer-and-receipt.md`), independently of the probe: an
//! EIP-712 offer or a JWS (ES256K, the key named by `did:pkh`) for the quoted entry, and a signed
//! receipt on a settlement, each signed with the lab's offer key (an external key, as the spec
//! allows, not the payee's).

use alloy::primitives::{Address, B256, U256};
use alloy::signers::SignerSync as _;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{Eip712Domain, SolStruct};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

alloy::sol! {
    struct Offer {
        string resourceUrl;
        string scheme;
        string network;
        string asset;
        address payTo;
        string amount;
        uint256 maxTimeoutSeconds;
        uint256 issuedAt;
    }

    struct Receipt {
        string network;
        string resourceUrl;
        string payer;
        uint256 issuedAt;
        string transaction;
    }
}

/// How a scenario signs its offers and receipts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signing {
    /// No `offer-receipt` extension.
    None,
    /// An EIP-712 offer for the entry, and an EIP-712 receipt naming the transaction.
    Eip712,
    /// A JWS (ES256K) offer and receipt, the key named by `did:pkh`.
    Jws,
    /// A JWS offer whose signature has one byte flipped.
    BadSignature,
    /// An EIP-712 offer, well signed, committing to half the quoted amount.
    Unmatched,
    /// An honest EIP-712 offer; the signed receipt names another transaction than the one that
    /// settled.
    ReceiptLies,
}

/// The lab's offer-signing key: every signing seller signs with it, so a seller that changes its
/// payTo keeps the key (H3's continuity).
pub fn offer_key() -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&B256::repeat_byte(0x0f)).expect("a valid key")
}

/// The address of [`offer_key`].
pub fn offer_signer() -> Address {
    offer_key().address()
}

/// The time the lab's offers say they were issued (fixed, so a quote is the same every time).
pub const ISSUED_AT: u64 = 1_790_000_000;

fn domain(name: &'static str, chain_id: u64) -> Eip712Domain {
    Eip712Domain {
        name: Some(name.into()),
        version: Some("1".into()),
        chain_id: Some(U256::from(chain_id)),
        verifying_contract: None,
        salt: None,
    }
}

fn chain_id_of(network: &str) -> u64 {
    network
        .strip_prefix("eip155:")
        .and_then(|id| id.parse().ok())
        .unwrap_or(0)
}

fn str_of<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or_default()
}

/// The offer payload committing to `entry` (a v2 `accepts` entry) for `resource_url`.
pub fn offer_payload(entry: &Value, resource_url: &str) -> Value {
    json!({
        "resourceUrl": resource_url,
        "scheme": entry["scheme"],
        "network": entry["network"],
        "asset": entry["asset"],
        "payTo": entry["payTo"],
        "amount": entry["amount"],
        "maxTimeoutSeconds": entry["maxTimeoutSeconds"],
        "issuedAt": ISSUED_AT,
    })
}

fn eip712_sign(hash: B256) -> String {
    let sig = offer_key().sign_hash_sync(&hash).expect("signs");
    format!("0x{}", hex::encode(sig.as_bytes()))
}

fn jws(payload: &Value, chain_id: u64, flip: bool) -> String {
    let kid = format!("did:pkh:eip155:{chain_id}:{}", offer_signer());
    let header = json!({"alg": "ES256K", "kid": kid});
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(payload.to_string())
    );
    let digest = B256::from_slice(&Sha256::digest(input.as_bytes()));
    let sig = offer_key().sign_hash_sync(&digest).expect("signs");
    let mut rs = sig.as_bytes()[..64].to_vec();
    if flip {
        rs[10] ^= 0x01;
    }
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(rs))
}

/// The signed offer for `payload`, in the scenario's form.
pub fn signed_offer(signing: Signing, payload: &Value) -> Option<Value> {
    let network = str_of(payload, "network");
    let chain_id = chain_id_of(network);
    let eip712 = |payload: &Value| {
        let message = Offer {
            resourceUrl: str_of(payload, "resourceUrl").into(),
            scheme: str_of(payload, "scheme").into(),
            network: network.into(),
            asset: str_of(payload, "asset").into(),
            payTo: str_of(payload, "payTo").parse().unwrap_or_default(),
            amount: str_of(payload, "amount").into(),
            maxTimeoutSeconds: U256::from(payload["maxTimeoutSeconds"].as_u64().unwrap_or(0)),
            issuedAt: U256::from(payload["issuedAt"].as_u64().unwrap_or(0)),
        };
        let hash = message.eip712_signing_hash(&domain("x402 offer", chain_id));
        json!({"format": "eip712", "payload": payload, "signature": eip712_sign(hash)})
    };
    Some(match signing {
        Signing::None => return None,
        Signing::Eip712 | Signing::ReceiptLies => eip712(payload),
        Signing::Unmatched => {
            let mut half = payload.clone();
            let amount: u64 = str_of(payload, "amount").parse().unwrap_or(0);
            half["amount"] = json!((amount / 2).to_string());
            eip712(&half)
        }
        Signing::Jws => json!({"format": "jws", "signature": jws(payload, chain_id, false)}),
        Signing::BadSignature => {
            json!({"format": "jws", "signature": jws(payload, chain_id, true)})
        }
    })
}

/// The `offer-receipt` extension of a 402 with one offer.
pub fn extension(offer: Value) -> Value {
    json!({"info": {"version": 1, "offers": [offer]}})
}

/// A settlement response with a signed receipt added (`extensions["offer-receipt"].info.receipt`):
/// the payer, the network and the settling transaction (another one when the scenario lies).
pub fn with_receipt(signing: Signing, settled: &Value, resource_url: &str) -> Value {
    let mut out = settled.clone();
    if signing == Signing::None {
        return out;
    }
    let network = str_of(settled, "network").to_string();
    let transaction = match signing {
        Signing::ReceiptLies => format!("0x{}", hex::encode(rand::random::<[u8; 32]>())),
        _ => str_of(settled, "transaction").to_string(),
    };
    let payload = json!({
        "network": network,
        "resourceUrl": resource_url,
        "payer": str_of(settled, "payer"),
        "issuedAt": ISSUED_AT,
        "transaction": transaction,
    });
    let chain_id = chain_id_of(&network);
    let receipt = match signing {
        Signing::Jws | Signing::BadSignature => {
            json!({"format": "jws", "signature": jws(&payload, chain_id, false)})
        }
        _ => {
            let message = Receipt {
                network: network.clone(),
                resourceUrl: resource_url.into(),
                payer: str_of(&payload, "payer").into(),
                issuedAt: U256::from(ISSUED_AT),
                transaction: transaction.clone(),
            };
            let hash = message.eip712_signing_hash(&domain("x402 receipt", chain_id));
            json!({"format": "eip712", "payload": payload, "signature": eip712_sign(hash)})
        }
    };
    out["extensions"]["offer-receipt"] = json!({"info": {"version": 1, "receipt": receipt}});
    out
}
