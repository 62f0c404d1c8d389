//! x402's `offer-receipt` extension, read and verified: signed offers (a seller's signed
//! commitment to an `accepts` entry, in `extensions["offer-receipt"].info.offers[]`) and the signed
//! receipt a settlement response may carry (`extensions["offer-receipt"].info.receipt`). Pure:
//! parsing, hashing and signature checks only; nothing is resolved over the network.
//!
//! Two signature forms:
//! - `eip712`: `payload` holds the fields, `signature` is 65 bytes (r, s, v) over the EIP-712
//!   hash under the domain `{name: "x402 offer" | "x402 receipt", version: "1", chainId}` (the
//!   chain id from the payload's `eip155:<id>` network) and the spec's fixed types; the signer is
//!   recovered.
//! - `jws`: `signature` is a JWS compact string whose payload is the fields; its header names the
//!   algorithm (`ES256K` or `EdDSA`) and the key (`kid`). A key is read from the `kid` alone:
//!   `did:key` (a secp256k1 or Ed25519 public key) or `did:pkh:eip155:<chain>:<address>` (ES256K,
//!   the signer's address). Any other `kid` (a `did:web`, say) would need a lookup over the
//!   network: the signature is then not checked and the signer not established, which is not a
//!   fault of the seller.
//!
//! The signer is written as one text for every form: an EVM address in EIP-55 form for EIP-712
//! and ES256K signatures (so one key signing in both forms is one signer), and the `did:key` for
//! an Ed25519 key.
//!
//! Nothing here panics on what a seller sends: every problem is a [`Verified::Bad`] or a
//! deviation (`offer_receipt.*`) that C2 reports.

use alloy::primitives::{Address, B256, Signature, U256};
use alloy::sol_types::{Eip712Domain, SolStruct};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use super::network::chain_id_of;
use super::types::{Deviation, Requirement};

/// The extension's key in `extensions`.
pub const OFFER_RECEIPT: &str = "offer-receipt";

/// Offers read from one PaymentRequired at most (one per `accepts` entry is what the spec
/// describes); more are counted, not verified.
pub const MAX_OFFERS: usize = 16;

/// The longest JWS compact string read (a signed offer is a few hundred bytes).
pub const MAX_JWS_BYTES: usize = 8 * 1024;

alloy::sol! {
    /// The offer's EIP-712 type (`extension-offer-and-receipt.md` §4.3), fields in its order.
    #[derive(Debug, PartialEq, Eq)]
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

    /// The receipt's EIP-712 type (§5.3).
    #[derive(Debug, PartialEq, Eq)]
    struct Receipt {
        string network;
        string resourceUrl;
        string payer;
        uint256 issuedAt;
        string transaction;
    }
}

/// How an artifact is signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignatureFormat {
    Eip712,
    Jws,
}

/// What the signature check established.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Verified {
    /// The signature is good; `signer` signed it (an EIP-55 address, or a `did:key`).
    Signer { signer: String },
    /// Well formed, but the key cannot be read without a lookup over the network: not checked.
    Unresolved { why: String },
    /// Malformed, or the signature does not verify.
    Bad { why: String },
}

impl Verified {
    pub fn signer(&self) -> Option<&str> {
        match self {
            Verified::Signer { signer } => Some(signer),
            _ => None,
        }
    }

    fn bad(why: impl Into<String>) -> Verified {
        Verified::Bad { why: why.into() }
    }
}

/// An offer's committed terms (§4.2), as signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OfferTerms {
    pub resource_url: String,
    pub scheme: String,
    pub network: String,
    pub asset: String,
    pub pay_to: String,
    pub amount: String,
    pub max_timeout_seconds: u64,
    pub issued_at: u64,
}

/// A receipt's statement (§5.2), as signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptTerms {
    pub network: String,
    pub resource_url: String,
    pub payer: String,
    pub issued_at: u64,
    /// Empty when the receipt names no transaction (the spec's privacy-minimal form).
    pub transaction: String,
}

/// One signed offer as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OfferSeen {
    /// Its position in `info.offers`.
    pub index: usize,
    pub format: Option<SignatureFormat>,
    /// The terms, when they could be read.
    pub terms: Option<OfferTerms>,
    pub verified: Verified,
}

/// One signed receipt as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptSeen {
    pub format: Option<SignatureFormat>,
    pub terms: Option<ReceiptTerms>,
    pub verified: Verified,
}

/// The offers of a PaymentRequired's `extensions`, or `None` when it has no `offer-receipt`.
/// A malformed extension reads as one bad offer (index 0), never as nothing.
pub fn offers(extensions: Option<&Map<String, Value>>) -> Option<Vec<OfferSeen>> {
    let ext = extensions?.get(OFFER_RECEIPT)?;
    let Some(list) = ext.pointer("/info/offers").and_then(Value::as_array) else {
        return Some(vec![OfferSeen {
            index: 0,
            format: None,
            terms: None,
            verified: Verified::bad("extensions[\"offer-receipt\"].info.offers is not an array"),
        }]);
    };
    Some(
        list.iter()
            .take(MAX_OFFERS)
            .enumerate()
            .map(|(index, offer)| read_offer(index, offer))
            .collect(),
    )
}

/// The signed receipt a settlement response carries, or `None` when it has none.
pub fn receipt(settlement: &Value) -> Option<ReceiptSeen> {
    let ext = settlement.get("extensions")?.get(OFFER_RECEIPT)?;
    let Some(artifact) = ext.pointer("/info/receipt") else {
        return Some(ReceiptSeen {
            format: None,
            terms: None,
            verified: Verified::bad("extensions[\"offer-receipt\"].info.receipt is missing"),
        });
    };
    let (format, read) = read_artifact(artifact, Kind::Receipt);
    let (terms, verified) = match read {
        Ok((Terms::Receipt(t), v)) => (Some(t), v),
        Ok((Terms::Offer(_), _)) => (None, Verified::bad("not a receipt")),
        Err(why) => (None, Verified::Bad { why }),
    };
    Some(ReceiptSeen {
        format,
        terms,
        verified,
    })
}

/// Whether an offer's terms are those of `entry`: same scheme and amount, the same network (CAIP-2,
/// or the v1 name of the same chain), asset and payTo (addresses in any case).
pub fn offer_matches(terms: &OfferTerms, entry: &Requirement) -> bool {
    let same_text = |a: &str, b: Option<&str>| b.is_some_and(|b| a.eq_ignore_ascii_case(b));
    let same_network = entry.network.as_deref().is_some_and(|n| {
        n == terms.network
            || matches!((chain_id_of(n), chain_id_of(&terms.network)), (Some(a), Some(b)) if a == b)
    });
    Some(terms.scheme.as_str()) == entry.scheme.as_deref()
        && Some(terms.amount.as_str()) == entry.amount.as_deref()
        && same_network
        && same_text(&terms.asset, entry.asset.as_deref())
        && same_text(&terms.pay_to, entry.pay_to.as_deref())
}

/// The signer of the offer that commits to `entry` with a good signature, when there is one.
pub fn offer_signer_for(offers: &[OfferSeen], entry: &Requirement) -> Option<String> {
    offers.iter().find_map(|o| {
        let terms = o.terms.as_ref()?;
        let signer = o.verified.signer()?;
        offer_matches(terms, entry).then(|| signer.to_string())
    })
}

/// What is wrong with the offers, as deviations C2 counts: an offer that is malformed or badly
/// signed (`offer_receipt.offer.bad`), and a well-signed one that commits to terms no `accepts`
/// entry carries (`offer_receipt.offer.unmatched`).
pub fn offer_deviations(offers: &[OfferSeen], accepts: &[Requirement]) -> Vec<Deviation> {
    let mut out = Vec::new();
    for offer in offers {
        match (&offer.verified, &offer.terms) {
            (Verified::Bad { why }, _) => out.push(Deviation::new(
                "offer_receipt.offer.bad",
                format!("signed offer {}: {why}", offer.index),
            )),
            (_, Some(terms)) if !accepts.iter().any(|e| offer_matches(terms, e)) => {
                out.push(Deviation::new(
                    "offer_receipt.offer.unmatched",
                    format!(
                        "signed offer {} commits to {} {} to {} on {}, which no accepts entry quotes",
                        offer.index, terms.amount, terms.asset, terms.pay_to, terms.network
                    ),
                ))
            }
            _ => {}
        }
    }
    out
}

#[derive(Clone, Copy)]
enum Kind {
    Offer,
    Receipt,
}

enum Terms {
    Offer(OfferTerms),
    Receipt(ReceiptTerms),
}

fn read_offer(index: usize, offer: &Value) -> OfferSeen {
    let (format, read) = read_artifact(offer, Kind::Offer);
    let (terms, verified) = match read {
        Ok((Terms::Offer(t), v)) => (Some(t), v),
        Ok((Terms::Receipt(_), _)) => (None, Verified::bad("not an offer")),
        Err(why) => (None, Verified::Bad { why }),
    };
    OfferSeen {
        index,
        format,
        terms,
        verified,
    }
}

/// `{format, payload?, signature}` read and verified. `Err` when the terms cannot be read at all.
fn read_artifact(
    artifact: &Value,
    kind: Kind,
) -> (Option<SignatureFormat>, Result<(Terms, Verified), String>) {
    let Some(object) = artifact.as_object() else {
        return (None, Err("not a JSON object".into()));
    };
    let Some(signature) = object.get("signature").and_then(Value::as_str) else {
        return (None, Err("no signature string".into()));
    };
    match object.get("format").and_then(Value::as_str) {
        Some("eip712") => (
            Some(SignatureFormat::Eip712),
            read_eip712(object.get("payload"), signature, kind),
        ),
        Some("jws") => (Some(SignatureFormat::Jws), read_jws(signature, kind)),
        Some(other) => (
            None,
            Err(format!(
                "format {:?} is neither eip712 nor jws",
                other.chars().take(40).collect::<String>()
            )),
        ),
        None => (None, Err("no format".into())),
    }
}

fn terms_of(payload: &Value, kind: Kind) -> Result<Terms, String> {
    let field = |name: &str| -> Result<String, String> {
        match payload.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("{name} is not a string")),
            None => Err(format!("{name} is missing")),
        }
    };
    // Optional numbers: absent is 0 (the spec's rule for EIP-712's fixed schema).
    let number = |name: &str| -> Result<u64, String> {
        match payload.get(name) {
            None | Some(Value::Null) => Ok(0),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| format!("{name} is not a non-negative integer")),
        }
    };
    if !payload.is_object() {
        return Err("the payload is not a JSON object".into());
    }
    Ok(match kind {
        Kind::Offer => Terms::Offer(OfferTerms {
            resource_url: field("resourceUrl")?,
            scheme: field("scheme")?,
            network: field("network")?,
            asset: field("asset")?,
            pay_to: field("payTo")?,
            amount: field("amount")?,
            max_timeout_seconds: number("maxTimeoutSeconds")?,
            issued_at: number("issuedAt")?,
        }),
        Kind::Receipt => Terms::Receipt(ReceiptTerms {
            network: field("network")?,
            resource_url: field("resourceUrl")?,
            payer: field("payer")?,
            issued_at: number("issuedAt")?,
            transaction: match payload.get("transaction") {
                None | Some(Value::Null) => String::new(),
                Some(_) => field("transaction")?,
            },
        }),
    })
}

fn chain_id(network: &str) -> Result<u64, String> {
    network
        .strip_prefix("eip155:")
        .and_then(|id| id.parse::<u64>().ok())
        .ok_or_else(|| {
            format!(
                "network {:?} is not eip155:<chainId>",
                network.chars().take(40).collect::<String>()
            )
        })
}

/// The EIP-712 hash the spec signs: the artifact's domain and type over `terms`.
fn eip712_hash(terms: &Terms) -> Result<B256, String> {
    match terms {
        Terms::Offer(t) => {
            let pay_to: Address = t
                .pay_to
                .parse()
                .map_err(|_| "payTo is not an EVM address".to_string())?;
            let domain = domain("x402 offer", chain_id(&t.network)?);
            let message = Offer {
                resourceUrl: t.resource_url.clone(),
                scheme: t.scheme.clone(),
                network: t.network.clone(),
                asset: t.asset.clone(),
                payTo: pay_to,
                amount: t.amount.clone(),
                maxTimeoutSeconds: U256::from(t.max_timeout_seconds),
                issuedAt: U256::from(t.issued_at),
            };
            Ok(message.eip712_signing_hash(&domain))
        }
        Terms::Receipt(t) => {
            let domain = domain("x402 receipt", chain_id(&t.network)?);
            let message = Receipt {
                network: t.network.clone(),
                resourceUrl: t.resource_url.clone(),
                payer: t.payer.clone(),
                issuedAt: U256::from(t.issued_at),
                transaction: t.transaction.clone(),
            };
            Ok(message.eip712_signing_hash(&domain))
        }
    }
}

fn domain(name: &'static str, chain_id: u64) -> Eip712Domain {
    Eip712Domain {
        name: Some(name.into()),
        version: Some("1".into()),
        chain_id: Some(U256::from(chain_id)),
        verifying_contract: None,
        salt: None,
    }
}

/// The EIP-712 hash of an offer's terms (what a seller signs), for the lab's signing sellers.
pub fn offer_signing_hash(terms: &OfferTerms) -> Result<B256, String> {
    eip712_hash(&Terms::Offer(terms.clone()))
}

/// The EIP-712 hash of a receipt's terms, for the lab's signing sellers.
pub fn receipt_signing_hash(terms: &ReceiptTerms) -> Result<B256, String> {
    eip712_hash(&Terms::Receipt(terms.clone()))
}

fn read_eip712(
    payload: Option<&Value>,
    signature: &str,
    kind: Kind,
) -> Result<(Terms, Verified), String> {
    let payload = payload.ok_or("an eip712 artifact without payload")?;
    let terms = terms_of(payload, kind)?;
    let verified = match eip712_hash(&terms) {
        Err(why) => Verified::Bad { why },
        Ok(hash) => match parse_65(signature) {
            Err(why) => Verified::Bad { why },
            Ok(sig) => match sig.recover_address_from_prehash(&hash) {
                Ok(signer) => Verified::Signer {
                    signer: signer.to_checksum(None),
                },
                Err(e) => Verified::bad(format!("the signature recovers no key: {e}")),
            },
        },
    };
    Ok((terms, verified))
}

fn parse_65(text: &str) -> Result<Signature, String> {
    let hex_part = text
        .strip_prefix("0x")
        .ok_or("the signature is not 0x-prefixed hex")?;
    if hex_part.len() != 130 {
        return Err(format!(
            "the signature is {} hex digits, not 130 (65 bytes)",
            hex_part.len()
        ));
    }
    let bytes = hex::decode(hex_part).map_err(|_| "the signature is not hex".to_string())?;
    Signature::from_raw(&bytes).map_err(|e| format!("the signature does not parse: {e}"))
}

/// A key named by a JWS `kid`.
enum Key {
    /// secp256k1, as the address it controls.
    Secp256k1(Address),
    Ed25519([u8; 32], String),
}

fn read_jws(compact: &str, kind: Kind) -> Result<(Terms, Verified), String> {
    if compact.len() > MAX_JWS_BYTES {
        return Err(format!("the JWS is longer than {MAX_JWS_BYTES} bytes"));
    }
    let mut parts = compact.split('.');
    let (Some(head), Some(body), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("not a JWS compact string (three dot-separated parts)".into());
    };
    let decode = |part: &str, what: &str| {
        URL_SAFE_NO_PAD
            .decode(part.trim_end_matches('='))
            .map_err(|_| format!("the JWS {what} is not base64url"))
    };
    let header: Value = serde_json::from_slice(&decode(head, "header")?)
        .map_err(|_| "the JWS header is not JSON".to_string())?;
    let payload: Value = serde_json::from_slice(&decode(body, "payload")?)
        .map_err(|_| "the JWS payload is not JSON".to_string())?;
    let terms = terms_of(&payload, kind)?;
    let signature = decode(sig, "signature")?;
    let input = &compact[..head.len() + 1 + body.len()];
    let alg = header.get("alg").and_then(Value::as_str).unwrap_or("");
    let Some(kid) = header.get("kid").and_then(Value::as_str) else {
        return Ok((terms, Verified::bad("the JWS header names no kid")));
    };
    let key = match key_of(kid) {
        Ok(Some(key)) => key,
        Ok(None) => {
            return Ok((
                terms,
                Verified::Unresolved {
                    why: format!(
                        "kid {:?} needs a lookup over the network (only did:key and did:pkh are read)",
                        kid.chars().take(80).collect::<String>()
                    ),
                },
            ));
        }
        Err(why) => return Ok((terms, Verified::Bad { why })),
    };
    let verified = match (alg, key) {
        ("ES256K", Key::Secp256k1(address)) => es256k(input.as_bytes(), &signature, address),
        ("EdDSA", Key::Ed25519(public, did)) => eddsa(input.as_bytes(), &signature, &public, did),
        (alg, _) => Verified::bad(format!(
            "alg {:?} does not fit the key its kid names (ES256K: secp256k1, EdDSA: Ed25519)",
            alg.chars().take(20).collect::<String>()
        )),
    };
    Ok((terms, verified))
}

/// The key a `kid` names without a lookup: `did:key` (secp256k1 or Ed25519) or
/// `did:pkh:eip155:<chain>:<address>`; `Ok(None)` for any other DID.
fn key_of(kid: &str) -> Result<Option<Key>, String> {
    let did = kid.split('#').next().unwrap_or(kid);
    if let Some(rest) = did.strip_prefix("did:pkh:eip155:") {
        let address = rest
            .rsplit(':')
            .next()
            .and_then(|a| a.parse::<Address>().ok())
            .ok_or("a did:pkh:eip155 kid without an address")?;
        return Ok(Some(Key::Secp256k1(address)));
    }
    let Some(multibase) = did.strip_prefix("did:key:") else {
        return Ok(None);
    };
    let encoded = multibase
        .strip_prefix('z')
        .ok_or("a did:key that is not base58btc (z...)")?;
    let bytes = bs58::decode(encoded)
        .into_vec()
        .map_err(|_| "a did:key that is not base58".to_string())?;
    match bytes.as_slice() {
        // multicodec secp256k1-pub (0xe7, varint e7 01), a compressed point.
        [0xe7, 0x01, key @ ..] if key.len() == 33 => {
            let vk = alloy::signers::k256::ecdsa::VerifyingKey::from_sec1_bytes(key)
                .map_err(|_| "a did:key whose secp256k1 key is not on the curve".to_string())?;
            Ok(Some(Key::Secp256k1(Address::from_public_key(&vk))))
        }
        // multicodec ed25519-pub (0xed, varint ed 01).
        [0xed, 0x01, key @ ..] if key.len() == 32 => {
            let mut public = [0u8; 32];
            public.copy_from_slice(key);
            Ok(Some(Key::Ed25519(public, did.to_string())))
        }
        _ => Err("a did:key of a key type other than secp256k1 or Ed25519".into()),
    }
}

/// ES256K: r ‖ s (64 bytes) over SHA-256 of the signing input; checked by recovering the key
/// with either parity and comparing its address.
fn es256k(input: &[u8], signature: &[u8], expected: Address) -> Verified {
    if signature.len() != 64 {
        return Verified::bad(format!(
            "an ES256K signature is 64 bytes, not {}",
            signature.len()
        ));
    }
    let digest = B256::from_slice(&Sha256::digest(input));
    let r = U256::from_be_slice(&signature[..32]);
    let s = U256::from_be_slice(&signature[32..]);
    let recovered = [false, true]
        .into_iter()
        .filter_map(|parity| {
            Signature::new(r, s, parity)
                .recover_address_from_prehash(&digest)
                .ok()
        })
        .any(|a| a == expected);
    if recovered {
        Verified::Signer {
            signer: expected.to_checksum(None),
        }
    } else {
        Verified::bad("the ES256K signature does not verify against the kid's key")
    }
}

fn eddsa(input: &[u8], signature: &[u8], public: &[u8; 32], did: String) -> Verified {
    let Ok(signature) = <[u8; 64]>::try_from(signature) else {
        return Verified::bad(format!(
            "an EdDSA signature is 64 bytes, not {}",
            signature.len()
        ));
    };
    let Ok(key) = ed25519_dalek::VerifyingKey::from_bytes(public) else {
        return Verified::bad("the kid's Ed25519 key is not a valid point");
    };
    match key.verify_strict(input, &ed25519_dalek::Signature::from_bytes(&signature)) {
        Ok(()) => Verified::Signer { signer: did },
        Err(_) => Verified::bad("the EdDSA signature does not verify against the kid's key"),
    }
}

/// `did:key` of a compressed secp256k1 public key (for the lab's signing sellers and tests).
pub fn did_key_secp256k1(compressed: &[u8; 33]) -> String {
    let mut bytes = vec![0xe7, 0x01];
    bytes.extend_from_slice(compressed);
    format!("did:key:z{}", bs58::encode(bytes).into_string())
}

/// `did:key` of an Ed25519 public key.
pub fn did_key_ed25519(public: &[u8; 32]) -> String {
    let mut bytes = vec![0xed, 0x01];
    bytes.extend_from_slice(public);
    format!("did:key:z{}", bs58::encode(bytes).into_string())
}

/// The JWS signing input (`base64url(header).base64url(payload)`) for a `kid` and `alg`, for the
/// lab's signing sellers and tests: sign it, then append `.` and the base64url signature.
pub fn jws_signing_input(alg: &str, kid: &str, payload: &Value) -> String {
    let header = serde_json::json!({"alg": alg, "kid": kid});
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(payload.to_string())
    )
}

/// A JWS compact string from its signing input and signature bytes.
pub fn jws_compact(input: &str, signature: &[u8]) -> String {
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::signers::SignerSync as _;
    use alloy::signers::local::PrivateKeySigner;
    use serde_json::json;

    const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
    const ASSET: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";

    fn terms() -> OfferTerms {
        OfferTerms {
            resource_url: "https://api.example/x".into(),
            scheme: "exact".into(),
            network: "eip155:84532".into(),
            asset: ASSET.into(),
            pay_to: PAY_TO.into(),
            amount: "10000".into(),
            max_timeout_seconds: 60,
            issued_at: 1_700_000_000,
        }
    }

    fn signer() -> PrivateKeySigner {
        PrivateKeySigner::from_slice(&[7u8; 32]).unwrap()
    }

    fn eip712_offer(t: &OfferTerms, key: &PrivateKeySigner) -> Value {
        let hash = offer_signing_hash(t).unwrap();
        let sig = key.sign_hash_sync(&hash).unwrap();
        json!({"format": "eip712", "payload": t, "signature": format!("0x{}", hex::encode(sig.as_bytes()))})
    }

    fn es256k_offer(t: &OfferTerms, key: &PrivateKeySigner, kid: &str) -> Value {
        let input = jws_signing_input("ES256K", kid, &serde_json::to_value(t).unwrap());
        let digest = B256::from_slice(&Sha256::digest(input.as_bytes()));
        let sig = key.sign_hash_sync(&digest).unwrap();
        let rs = &sig.as_bytes()[..64];
        json!({"format": "jws", "signature": jws_compact(&input, rs)})
    }

    fn extensions(offers: Vec<Value>) -> Map<String, Value> {
        let mut map = Map::new();
        map.insert(
            OFFER_RECEIPT.into(),
            json!({"info": {"version": 1, "offers": offers}}),
        );
        map
    }

    fn entry(t: &OfferTerms) -> Requirement {
        let pr = json!({"x402Version": 2, "resource": {"url": t.resource_url}, "accepts": [{
            "scheme": t.scheme, "network": t.network, "amount": t.amount, "asset": t.asset,
            "payTo": t.pay_to, "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"}}]});
        let parsed =
            crate::x402::parse::parse_payment_required(402, &[], pr.to_string().as_bytes());
        parsed.required.unwrap().accepts.remove(0)
    }

    #[test]
    fn one_key_signing_eip712_and_es256k_is_one_signer() {
        let key = signer();
        let t = terms();
        let compressed: [u8; 33] = key
            .credential()
            .verifying_key()
            .to_encoded_point(true)
            .as_bytes()
            .try_into()
            .unwrap();
        let did = did_key_secp256k1(&compressed);
        let pkh = format!("did:pkh:eip155:84532:{}", key.address());
        let ext = extensions(vec![
            eip712_offer(&t, &key),
            es256k_offer(&t, &key, &format!("{did}#key-1")),
            es256k_offer(&t, &key, &pkh),
        ]);
        let seen = offers(Some(&ext)).unwrap();
        let want = key.address().to_checksum(None);
        for o in &seen {
            assert_eq!(o.verified.signer(), Some(want.as_str()), "{o:?}");
            assert_eq!(o.terms.as_ref(), Some(&t));
        }
        assert_eq!(offer_signer_for(&seen, &entry(&t)), Some(want));
        assert!(offer_deviations(&seen, &[entry(&t)]).is_empty());
    }

    #[test]
    fn eddsa_did_key_verifies_and_a_flipped_byte_does_not() {
        let sk = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
        let did = did_key_ed25519(sk.verifying_key().as_bytes());
        let t = terms();
        let input = jws_signing_input("EdDSA", &did, &serde_json::to_value(&t).unwrap());
        use ed25519_dalek::Signer as _;
        let sig = sk.sign(input.as_bytes()).to_bytes();
        let good = json!({"format": "jws", "signature": jws_compact(&input, &sig)});
        let mut bad_sig = sig;
        bad_sig[5] ^= 1;
        let bad = json!({"format": "jws", "signature": jws_compact(&input, &bad_sig)});
        let seen = offers(Some(&extensions(vec![good, bad]))).unwrap();
        assert_eq!(seen[0].verified.signer(), Some(did.as_str()));
        assert!(matches!(seen[1].verified, Verified::Bad { .. }));
        let devs = offer_deviations(&seen, &[entry(&t)]);
        assert_eq!(devs.len(), 1);
        assert_eq!(devs[0].code, "offer_receipt.offer.bad");
    }

    #[test]
    fn tampered_terms_recover_another_signer_and_match_no_entry() {
        let key = signer();
        let t = terms();
        let mut offer = eip712_offer(&t, &key);
        offer["payload"]["amount"] = json!("1");
        let seen = offers(Some(&extensions(vec![offer]))).unwrap();
        // EIP-712 recovers some key from any well-formed signature: not ours.
        let signer = seen[0].verified.signer().unwrap().to_string();
        assert_ne!(signer, key.address().to_checksum(None));
        let devs = offer_deviations(&seen, &[entry(&t)]);
        assert_eq!(devs[0].code, "offer_receipt.offer.unmatched");
        assert_eq!(offer_signer_for(&seen, &entry(&t)), None);
    }

    #[test]
    fn malformed_offers_are_bad_never_a_panic() {
        let cases = vec![
            json!(5),
            json!({}),
            json!({"format": "pgp", "signature": "x"}),
            json!({"format": "eip712", "signature": "0x00"}),
            json!({"format": "eip712", "payload": {"scheme": 1}, "signature": "0x00"}),
            json!({"format": "eip712", "payload": terms(), "signature": "0x12"}),
            json!({"format": "jws", "signature": "a.b"}),
            json!({"format": "jws", "signature": "!!.!!.!!"}),
            json!({"format": "jws", "signature": format!("{}.e30.AA", URL_SAFE_NO_PAD.encode("{\"alg\":\"ES256K\"}"))}),
            json!({"format": "jws", "signature": "x".repeat(MAX_JWS_BYTES + 1)}),
        ];
        let seen = offers(Some(&extensions(cases.clone()))).unwrap();
        assert_eq!(seen.len(), cases.len());
        for o in &seen {
            assert!(matches!(o.verified, Verified::Bad { .. }), "{o:?}");
        }
        // Not an array at all: one bad offer.
        let mut odd = Map::new();
        odd.insert(OFFER_RECEIPT.into(), json!({"info": {"offers": "yes"}}));
        assert!(matches!(
            offers(Some(&odd)).unwrap()[0].verified,
            Verified::Bad { .. }
        ));
        assert!(offers(None).is_none());
        assert!(offers(Some(&Map::new())).is_none());
    }

    #[test]
    fn a_kid_that_needs_a_lookup_is_unresolved_not_bad() {
        let key = signer();
        let offer = es256k_offer(&terms(), &key, "did:web:api.example#key-1");
        let seen = offers(Some(&extensions(vec![offer]))).unwrap();
        assert!(matches!(seen[0].verified, Verified::Unresolved { .. }));
        assert!(offer_deviations(&seen, &[entry(&terms())]).is_empty());
    }

    #[test]
    fn a_receipt_reads_and_verifies() {
        let key = signer();
        let r = ReceiptTerms {
            network: "eip155:84532".into(),
            resource_url: "https://api.example/x".into(),
            payer: "0x857b06519E91e3A54538791bDbb0E22373e36b66".into(),
            issued_at: 1_700_000_100,
            transaction: format!("0x{}", "ab".repeat(32)),
        };
        let sig = key
            .sign_hash_sync(&receipt_signing_hash(&r).unwrap())
            .unwrap();
        let settlement = json!({"success": true, "extensions": {"offer-receipt": {"info": {"version": 1,
            "receipt": {"format": "eip712", "payload": r, "signature": format!("0x{}", hex::encode(sig.as_bytes()))}}}}});
        let seen = receipt(&settlement).unwrap();
        assert_eq!(seen.terms.as_ref(), Some(&r));
        assert_eq!(
            seen.verified.signer(),
            Some(key.address().to_checksum(None).as_str())
        );
        assert!(receipt(&json!({"success": true})).is_none());
        let broken = json!({"extensions": {"offer-receipt": {"info": {}}}});
        assert!(matches!(
            receipt(&broken).unwrap().verified,
            Verified::Bad { .. }
        ));
    }
}
