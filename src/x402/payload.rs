//! Building the payment a paid call sends: the authorization to sign, the token domain to sign it
//! under, and the `PAYMENT-SIGNATURE` (v2) / `X-PAYMENT` (v1) header. Pure: the caller passes the
//! time and the signature.
//!
//! Strict when encoding: standard padded base64 of compact JSON, amounts and times as decimal
//! strings, and in v2 the chosen `accepts` entry echoed as received (the reference server looks
//! for an entry deep-equal to `accepted`, so a re-serialised entry could fail to match).

use alloy::primitives::{Address, B256, U256};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::eip712::{Authorization, TokenDomain};
use super::network::chain_id_of;
use super::parse::decode_header_value;
use super::types::{Deviation, PaymentRequired, Requirement};

/// Header names as sent (canonical upper case).
pub const PAYMENT_SIGNATURE_HEADER: &str = "PAYMENT-SIGNATURE";
pub const X_PAYMENT_HEADER: &str = "X-PAYMENT";

/// `validAfter` is set this far back, as every reference client does, to absorb clock skew.
pub const VALID_AFTER_SKEW_SECONDS: u64 = 600;

/// A request header carrying the payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentHeader {
    pub name: &'static str,
    pub value: String,
    /// The `payment-identifier` id the payload carries (only when the 402 advertised the
    /// extension, and only in v2, which has extensions).
    pub payment_id: Option<String>,
}

/// The `payment-identifier` extension's key (x402 v2 extensions): an idempotency id the client
/// puts in `extensions["payment-identifier"].info.id`; a retry with the same id must be answered
/// from the seller's cache, never charged again.
pub const PAYMENT_IDENTIFIER: &str = "payment-identifier";

/// The id of a payment for the `payment-identifier` extension: `pay_` and 32 hex digits taken from
/// `seed` (the authorization's random nonce, or a digest of the signed transaction), so one signed
/// payment has one id and sending it again sends the same id. 36 characters of `[A-Za-z0-9_]`,
/// within the extension's 16 to 128.
pub fn payment_id_from(seed: &[u8]) -> String {
    let take = seed.len().min(16);
    format!("pay_{}", hex::encode(&seed[..take]))
}

/// The v2 extensions to echo, with our payment id put in `payment-identifier`'s `info.id` when the
/// 402 advertised the extension (everything else echoed as received). `None` for the id when it
/// did not.
fn extensions_with_id(
    extensions: Option<&Map<String, Value>>,
    id: &str,
) -> (Option<Map<String, Value>>, Option<String>) {
    let Some(map) = extensions else {
        return (None, None);
    };
    if !map.contains_key(PAYMENT_IDENTIFIER) {
        return (Some(map.clone()), None);
    }
    let mut map = map.clone();
    if let Some(entry) = map.get_mut(PAYMENT_IDENTIFIER) {
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        let info = &mut entry["info"];
        if !info.is_object() {
            *info = Value::Object(Map::new());
        }
        info["id"] = Value::String(id.to_string());
    }
    (Some(map), Some(id.to_string()))
}

#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("accepts[{index}] has no usable {field}")]
    MissingField { index: usize, field: &'static str },
    #[error("accepts[{index}].{field} {value:?} is not valid: {why}")]
    InvalidField {
        index: usize,
        field: &'static str,
        value: String,
        why: &'static str,
    },
    #[error("the authorization pays {to}, the requirement's payTo is {pay_to}")]
    RecipientMismatch { to: Address, pay_to: Address },
    #[error("the authorization moves {value}, the requirement quotes {amount}")]
    AmountMismatch { value: U256, amount: U256 },
    #[error("x402Version {0} has no payment header this build can write")]
    UnsupportedVersion(u8),
    #[error("encoding the payment payload: {0}")]
    Json(#[from] serde_json::Error),
}

/// The token's EIP-712 domain for an entry: `extra.name`, `extra.version`, the network's chain id
/// and the asset.
pub fn token_domain_for(requirement: &Requirement) -> Result<TokenDomain, PayloadError> {
    let index = requirement.index;
    let missing = |field| PayloadError::MissingField { index, field };
    let name = requirement
        .extra_name
        .clone()
        .ok_or(missing("extra.name"))?;
    let version = requirement
        .extra_version
        .clone()
        .ok_or(missing("extra.version"))?;
    let network = requirement.network.as_deref().ok_or(missing("network"))?;
    let chain_id = chain_id_of(network).ok_or_else(|| PayloadError::InvalidField {
        index,
        field: "network",
        value: network.to_string(),
        why: "not an EVM chain this build knows",
    })?;
    let verifying_contract = address_field(requirement, "asset", requirement.asset.as_deref())?;
    Ok(TokenDomain {
        name,
        version,
        chain_id,
        verifying_contract,
    })
}

/// The authorization a reference client would sign for this entry at `now_unix`: pay exactly the
/// quoted amount to `payTo`, valid from ten minutes back until `maxTimeoutSeconds` from now.
pub fn authorization_for(
    requirement: &Requirement,
    from: Address,
    now_unix: u64,
    nonce: B256,
) -> Result<Authorization, PayloadError> {
    let index = requirement.index;
    let to = address_field(requirement, "payTo", requirement.pay_to.as_deref())?;
    let value = quoted_amount(requirement)?;
    let timeout = requirement
        .max_timeout_seconds
        .ok_or(PayloadError::MissingField {
            index,
            field: "maxTimeoutSeconds",
        })?;
    Ok(Authorization {
        from,
        to,
        value,
        valid_after: now_unix.saturating_sub(VALID_AFTER_SKEW_SECONDS),
        valid_before: now_unix.saturating_add(timeout),
        nonce,
    })
}

/// The payment header for `requirement` (an entry of `required`), given the signed authorization.
///
/// Refuses an authorization that pays anyone but `payTo` or anything but the quoted amount: the
/// probe never sends a payment that differs from the quote.
pub fn build_payment_header(
    required: &PaymentRequired,
    requirement: &Requirement,
    authorization: &Authorization,
    signature: &[u8; 65],
) -> Result<PaymentHeader, PayloadError> {
    let pay_to = address_field(requirement, "payTo", requirement.pay_to.as_deref())?;
    if authorization.to != pay_to {
        return Err(PayloadError::RecipientMismatch {
            to: authorization.to,
            pay_to,
        });
    }
    let amount = quoted_amount(requirement)?;
    if authorization.value != amount {
        return Err(PayloadError::AmountMismatch {
            value: authorization.value,
            amount,
        });
    }
    let payload = ExactEvmPayload {
        signature: format!("0x{}", hex::encode(signature)),
        authorization: AuthorizationJson {
            from: authorization.from.to_checksum(None),
            to: authorization.to.to_checksum(None),
            value: authorization.value.to_string(),
            valid_after: authorization.valid_after.to_string(),
            valid_before: authorization.valid_before.to_string(),
            nonce: format!("{:#x}", authorization.nonce),
        },
    };
    let id = payment_id_from(authorization.nonce.as_slice());
    envelope(required, requirement, payload, &id)
}

/// The payment header for a Solana entry: the `exact` SVM payload, `{"transaction": <base64 of
/// the partially signed transaction>}`, in the version's envelope. The transaction is ours
/// (`x402::solana_payment`), built from this very entry.
pub fn build_svm_payment_header(
    required: &PaymentRequired,
    requirement: &Requirement,
    transaction: &[u8],
) -> Result<PaymentHeader, PayloadError> {
    let payload = ExactSvmPayload {
        transaction: STANDARD.encode(transaction),
    };
    use sha2::Digest as _;
    let id = payment_id_from(&sha2::Sha256::digest(transaction));
    envelope(required, requirement, payload, &id)
}

/// The version's envelope around a scheme's payload: v2 echoes the chosen entry as received,
/// the resource and the extensions (with `payment_id` in `payment-identifier` when advertised);
/// v1 names the scheme and the network.
fn envelope<P: Serialize>(
    required: &PaymentRequired,
    requirement: &Requirement,
    payload: P,
    payment_id: &str,
) -> Result<PaymentHeader, PayloadError> {
    let mut sent_id = None;
    let (name, json) = match required.x402_version {
        2 => {
            let accepted = compact_raw(&requirement.raw)?;
            let (extensions, id) = extensions_with_id(required.extensions.as_ref(), payment_id);
            sent_id = id;
            let body = PayloadV2 {
                x402_version: 2,
                resource: required.resource_raw.as_ref(),
                accepted: &accepted,
                payload,
                extensions: extensions.as_ref(),
            };
            (PAYMENT_SIGNATURE_HEADER, serde_json::to_string(&body)?)
        }
        1 => {
            let index = requirement.index;
            let body = PayloadV1 {
                x402_version: 1,
                scheme: requirement
                    .scheme
                    .as_deref()
                    .ok_or(PayloadError::MissingField {
                        index,
                        field: "scheme",
                    })?,
                network: requirement
                    .network
                    .as_deref()
                    .ok_or(PayloadError::MissingField {
                        index,
                        field: "network",
                    })?,
                payload,
            };
            (X_PAYMENT_HEADER, serde_json::to_string(&body)?)
        }
        other => return Err(PayloadError::UnsupportedVersion(other)),
    };
    Ok(PaymentHeader {
        name,
        value: STANDARD.encode(json),
        payment_id: sent_id,
    })
}

/// Decode a payment header value back to its JSON (leniently, as a server would). For tests and
/// the lab's servers.
pub fn decode_payment_header(value: &str) -> Result<Value, Deviation> {
    let mut deviations = Vec::new();
    let Some(bytes) = decode_header_value(value, "payment", &mut deviations) else {
        return Err(deviations.pop().unwrap_or_else(|| {
            Deviation::new("payment.bad_base64", "the header could not be decoded")
        }));
    };
    serde_json::from_slice(&bytes)
        .map_err(|e| Deviation::new("payment.bad_json", format!("not JSON: {e}")))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PayloadV2<'a, P> {
    x402_version: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource: Option<&'a Value>,
    accepted: &'a RawValue,
    payload: P,
    #[serde(skip_serializing_if = "Option::is_none")]
    extensions: Option<&'a Map<String, Value>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PayloadV1<'a, P> {
    x402_version: u8,
    scheme: &'a str,
    network: &'a str,
    payload: P,
}

#[derive(Serialize)]
struct ExactSvmPayload {
    transaction: String,
}

#[derive(Serialize)]
struct ExactEvmPayload {
    signature: String,
    authorization: AuthorizationJson,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AuthorizationJson {
    from: String,
    to: String,
    value: String,
    valid_after: String,
    valid_before: String,
    nonce: String,
}

fn address_field(
    requirement: &Requirement,
    field: &'static str,
    text: Option<&str>,
) -> Result<Address, PayloadError> {
    let index = requirement.index;
    let text = text.ok_or(PayloadError::MissingField { index, field })?;
    super::types::parse_address_any_case(text).ok_or_else(|| PayloadError::InvalidField {
        index,
        field,
        value: text.to_string(),
        why: "not a 0x-prefixed 20-byte hex address",
    })
}

fn quoted_amount(requirement: &Requirement) -> Result<U256, PayloadError> {
    let index = requirement.index;
    let text = requirement
        .amount
        .as_deref()
        .ok_or(PayloadError::MissingField {
            index,
            field: "amount",
        })?;
    requirement
        .amount_value()
        .ok_or_else(|| PayloadError::InvalidField {
            index,
            field: "amount",
            value: text.to_string(),
            why: "not a decimal integer string of at most 256 bits",
        })
}

/// The entry's JSON text without insignificant whitespace, every token kept as written (numbers
/// are not re-formatted, strings not re-escaped).
fn compact_raw(raw: &RawValue) -> Result<Box<RawValue>, serde_json::Error> {
    let text = raw.get();
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    RawValue::from_string(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacting_keeps_strings_and_numbers_as_written() {
        let raw = RawValue::from_string(
            "{ \"a\" : \"x y \\\" z\" ,\n \"b\": [1.50, 2e3 ,\t\"\\\\\"] }".to_string(),
        )
        .expect("valid JSON");
        let compact = compact_raw(&raw).expect("compacts");
        assert_eq!(
            compact.get(),
            "{\"a\":\"x y \\\" z\",\"b\":[1.50,2e3,\"\\\\\"]}"
        );
        let before: Value = serde_json::from_str(raw.get()).expect("json");
        let after: Value = serde_json::from_str(compact.get()).expect("json");
        assert_eq!(before, after);
    }

    #[test]
    fn a_payment_id_goes_only_where_payment_identifier_is_advertised() {
        let id = payment_id_from(&[0xab; 32]);
        assert_eq!(id, format!("pay_{}", "ab".repeat(16)));
        assert!((16..=128).contains(&id.len()));
        assert!(
            id.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
        // Not advertised: echoed untouched, no id.
        let bazaar: Map<String, Value> =
            serde_json::from_str(r#"{"bazaar":{"info":{"x":1}}}"#).unwrap();
        assert_eq!(
            extensions_with_id(Some(&bazaar), &id),
            (Some(bazaar.clone()), None)
        );
        assert_eq!(extensions_with_id(None, &id), (None, None));
        // Advertised: the id in its info, everything else kept.
        let advertised: Map<String, Value> = serde_json::from_str(
            r#"{"bazaar":{"info":{"x":1}},"payment-identifier":{"info":{"required":true},"schema":{"type":"object"}}}"#,
        )
        .unwrap();
        let (echoed, sent) = extensions_with_id(Some(&advertised), &id);
        let echoed = Value::Object(echoed.unwrap());
        assert_eq!(sent.as_deref(), Some(id.as_str()));
        assert_eq!(echoed["payment-identifier"]["info"]["id"], id.as_str());
        assert_eq!(echoed["payment-identifier"]["info"]["required"], true);
        assert_eq!(echoed["payment-identifier"]["schema"]["type"], "object");
        assert_eq!(echoed["bazaar"], advertised["bazaar"]);
        // A malformed advertisement (not an object) still gets a well-formed id.
        let odd: Map<String, Value> =
            serde_json::from_str(r#"{"payment-identifier":"yes"}"#).unwrap();
        let (echoed, _) = extensions_with_id(Some(&odd), &id);
        assert_eq!(
            Value::Object(echoed.unwrap())["payment-identifier"]["info"]["id"],
            id.as_str()
        );
    }
}
