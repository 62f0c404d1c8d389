//! The operator file, `/.well-known/x402-operator.json` at a subject's origin: the wallets its
//! operator declares and its refund rule (`probes/operator-file.md`). Pure parsing; strict, since a
//! file that says something else than we read would make H4 and H9 judge the wrong thing.

use serde_json::Value;

use crate::evidence::paid::{OperatorFile, OperatorWallet, RefundRule, address_any_case};

/// Where the operator file lives at a subject's origin.
pub const OPERATOR_FILE_PATH: &str = "/.well-known/x402-operator.json";

/// The operator file format this build reads (`probes/operator-file.md`).
pub const OPERATOR_FILE_SCHEMA: &str = "x402-probe.operator/1";

pub fn parse_operator_file(bytes: &[u8]) -> Result<OperatorFile, String> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("the operator file is not JSON: {e}"))?;
    let object = value
        .as_object()
        .ok_or_else(|| "the operator file is not a JSON object".to_string())?;
    match object.get("schema").and_then(Value::as_str) {
        Some(OPERATOR_FILE_SCHEMA) => {}
        Some(other) => {
            return Err(format!(
                "the operator file's schema is {other:?}, not {OPERATOR_FILE_SCHEMA:?}"
            ));
        }
        None => {
            return Err(format!(
                "the operator file names no schema ({OPERATOR_FILE_SCHEMA:?})"
            ));
        }
    }
    let wallets = object
        .get("wallets")
        .and_then(Value::as_array)
        .ok_or_else(|| "the operator file has no wallets list".to_string())?;
    let mut parsed = Vec::new();
    for (i, w) in wallets.iter().enumerate() {
        let network = match w.get("network") {
            None | Some(Value::Null) => None,
            Some(Value::String(n)) => Some(n.clone()),
            Some(_) => return Err(format!("wallets[{i}].network is not a string")),
        };
        let address = w
            .get("address")
            .and_then(Value::as_str)
            .and_then(address_any_case)
            .ok_or_else(|| format!("wallets[{i}].address is not a 0x-prefixed 20-byte address"))?;
        parsed.push(OperatorWallet { network, address });
    }
    let refund = match object.get("refund") {
        None | Some(Value::Null) => None,
        Some(r) => {
            let on = r
                .get("on")
                .and_then(Value::as_str)
                .ok_or_else(|| "refund.on is missing".to_string())?;
            let within = r
                .get("within_seconds")
                .and_then(Value::as_u64)
                .filter(|w| *w >= 1)
                .ok_or_else(|| {
                    "refund.within_seconds is not a whole number of at least 1".to_string()
                })?;
            Some(RefundRule {
                on: on.to_string(),
                within_seconds: within,
            })
        }
    };
    Ok(OperatorFile {
        wallets: parsed,
        refund,
    })
}
