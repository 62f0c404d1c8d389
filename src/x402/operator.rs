//! The operator file, `/.well-known/x402-operator.json` at a subject's origin: the wallets its
//! operator declares and its refund rule (`probes/operator-file.md`). Pure parsing; strict, since a
//! file that says something else than we read would make H4 and H9 judge the wrong thing.

use serde_json::Value;

use crate::evidence::paid::{
    NoteKind, OperatorFile, OperatorWallet, RefundRule, RevisionNote, address_any_case,
};
use crate::x402::types::{is_decimal_integer, printable_prefix};

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
                "the operator file's schema is {}, not {OPERATOR_FILE_SCHEMA:?}",
                quoted(other)
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
    let notes = match object.get("notes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => parse_notes(items)?,
        Some(_) => return Err("notes is not a list".to_string()),
    };
    let operator_keys = match object.get("operator_keys") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => parse_operator_keys(items)?,
        Some(_) => return Err("operator_keys is not a list".to_string()),
    };
    Ok(OperatorFile {
        wallets: parsed,
        refund,
        notes,
        operator_keys,
    })
}

/// An ERC-8004 agent identity a subject's operator file declares: the registry (CAIP-10, on an
/// EVM chain) and the agent's id there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRegistration {
    pub chain_id: u64,
    pub registry: alloy::primitives::Address,
    pub agent_id: alloy::primitives::U256,
}

impl AgentRegistration {
    /// `eip155:{chainId}:{registry}`, as ERC-8004 writes an `agentRegistry`.
    pub fn agent_registry(&self) -> String {
        format!(
            "eip155:{}:{}",
            self.chain_id,
            self.registry.to_checksum(None)
        )
    }
}

/// The most registrations read from one operator file.
const MAX_REGISTRATIONS: usize = 8;

/// The ERC-8004 agent identities an operator file declares, in its `registrations` list (the
/// form of ERC-8004's registration file: `{"agentId": 22, "agentRegistry":
/// "eip155:1:0x..."}`). A file without the list declares none. Read apart from
/// [`parse_operator_file`]: what H4 and H9 judge does not depend on it.
pub fn parse_agent_registrations(bytes: &[u8]) -> Result<Vec<AgentRegistration>, String> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("the operator file is not JSON: {e}"))?;
    let items = match value.get("registrations") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err("registrations is not a list".to_string()),
    };
    if items.len() > MAX_REGISTRATIONS {
        return Err(format!(
            "registrations lists {} agents, more than {MAX_REGISTRATIONS}",
            items.len()
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let agent_id = match item.get("agentId") {
                Some(Value::Number(n)) => n.as_u64().map(alloy::primitives::U256::from),
                Some(Value::String(s)) if is_decimal_integer(s) => s.parse().ok(),
                _ => None,
            }
            .ok_or_else(|| format!("registrations[{i}].agentId is not a whole number"))?;
            let registry = item
                .get("agentRegistry")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("registrations[{i}].agentRegistry is missing"))?;
            let bad = || {
                format!(
                    "registrations[{i}].agentRegistry is {}, not eip155:<chain id>:<address>",
                    quoted(registry)
                )
            };
            let mut parts = registry.splitn(3, ':');
            let (Some("eip155"), Some(chain), Some(address)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            let chain_id = chain
                .parse::<u64>()
                .ok()
                .filter(|c| *c > 0 && is_decimal_integer(chain))
                .ok_or_else(bad)?;
            let registry = address_any_case(address).ok_or_else(bad)?;
            Ok(AgentRegistration {
                chain_id,
                registry,
                agent_id,
            })
        })
        .collect()
}

/// Most characters of a value from the file quoted in an error: the error goes into H4's receipt,
/// which a file of a megabyte must not fill.
const MAX_QUOTED_CHARS: usize = 64;

/// `text` as an error quotes it: shortened, control characters escaped, in quotes.
fn quoted(text: &str) -> String {
    format!("{:?}", printable_prefix(text, MAX_QUOTED_CHARS))
}

/// Most notes read from one file; a longer list is refused (a file is a statement, not a log).
pub const MAX_NOTES: usize = 64;
/// Longest note text kept, in characters.
pub const MAX_NOTE_TEXT: usize = 500;

/// Most operator keys read from one file.
pub const MAX_OPERATOR_KEYS: usize = 16;

fn parse_operator_keys(items: &[Value]) -> Result<Vec<alloy::primitives::Address>, String> {
    if items.len() > MAX_OPERATOR_KEYS {
        return Err(format!(
            "operator_keys has {} entries, more than {MAX_OPERATOR_KEYS}",
            items.len()
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, k)| {
            k.as_str()
                .and_then(address_any_case)
                .ok_or_else(|| format!("operator_keys[{i}] is not a 0x-prefixed 20-byte address"))
        })
        .collect()
}

fn parse_notes(items: &[Value]) -> Result<Vec<RevisionNote>, String> {
    if items.len() > MAX_NOTES {
        return Err(format!(
            "notes has {} entries, more than {MAX_NOTES}",
            items.len()
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, n)| parse_note(n).map_err(|e| format!("notes[{i}]{e}")))
        .collect()
}

/// One revision note, as the operator file writes it (also what the API takes). An error starts
/// with the field (`.kind ...`, `: ...`) so the caller can prefix where the note was.
pub fn parse_note(n: &Value) -> Result<RevisionNote, String> {
    let at = n
        .get("at")
        .and_then(Value::as_str)
        .ok_or_else(|| ".at is missing".to_string())?;
    let at = time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!(".at is not an RFC 3339 time: {e}"))?;
    let at_ms = i64::try_from(at.unix_timestamp_nanos() / 1_000_000)
        .map_err(|_| ".at is out of range".to_string())?;
    let kind = match n.get("kind").and_then(Value::as_str) {
        Some("price_change") => NoteKind::PriceChange,
        Some("payto_rotation") => NoteKind::PaytoRotation,
        Some(other) => {
            return Err(format!(
                ".kind {} is not price_change or payto_rotation",
                quoted(other)
            ));
        }
        None => return Err(".kind is missing".to_string()),
    };
    let amount = match n.get("amount") {
        None | Some(Value::Null) => None,
        Some(Value::String(a)) if crate::x402::types::is_decimal_integer(a) => Some(a.clone()),
        Some(_) => return Err(".amount is not a decimal integer string".to_string()),
    };
    let pay_to = match n.get("pay_to") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_str()
                .and_then(address_any_case)
                .ok_or_else(|| ".pay_to is not an address".to_string())?,
        ),
    };
    if kind == NoteKind::PaytoRotation && pay_to.is_none() {
        return Err(": a payto_rotation names the new pay_to".to_string());
    }
    let text: String = n
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .chars()
        .take(MAX_NOTE_TEXT)
        .collect();
    Ok(RevisionNote {
        at_ms,
        kind,
        amount,
        pay_to,
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_registrations_are_read_in_the_erc_8004_form() {
        let file = br#"{"schema": "x402-probe.operator/1", "wallets": [],
            "registrations": [{"agentId": 22, "agentRegistry": "eip155:8453:0x8004a169fb4a3325136eb29fa0ceb6d2e539a432"},
                              {"agentId": "7", "agentRegistry": "eip155:1:0x8004A169FB4a3325136EB29fA0ceB6D2e539a432"}]}"#;
        let read = parse_agent_registrations(file).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(
            (read[0].chain_id, read[0].agent_id),
            (8453, alloy::primitives::U256::from(22))
        );
        assert_eq!(
            read[0].agent_registry(),
            "eip155:8453:0x8004A169FB4a3325136EB29fA0ceB6D2e539a432"
        );
        assert_eq!(read[1].agent_id, alloy::primitives::U256::from(7));
        assert!(
            parse_agent_registrations(br#"{"wallets": []}"#)
                .unwrap()
                .is_empty()
        );
        for bad in [
            r#"{"registrations": {}}"#,
            r#"{"registrations": [{"agentId": -1, "agentRegistry": "eip155:1:0x8004A169FB4a3325136EB29fA0ceB6D2e539a432"}]}"#,
            r#"{"registrations": [{"agentId": 1, "agentRegistry": "solana:1:abc"}]}"#,
            r#"{"registrations": [{"agentId": 1, "agentRegistry": "eip155:0:0x8004A169FB4a3325136EB29fA0ceB6D2e539a432"}]}"#,
            r#"{"registrations": [{"agentId": 1, "agentRegistry": "eip155:1:0x1234"}]}"#,
            r#"{"registrations": [{"agentId": 1}]}"#,
        ] {
            assert!(parse_agent_registrations(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn operator_keys_are_read_with_bounds() {
        let file = |keys: &str| {
            format!(r#"{{"schema":"{OPERATOR_FILE_SCHEMA}","wallets":[],"operator_keys":{keys}}}"#)
        };
        let ok = parse_operator_file(
            file(r#"["0x7e5f4552091a69125d5dfcb7b8c2659029395bdf"]"#).as_bytes(),
        )
        .unwrap();
        assert_eq!(
            ok.operator_keys,
            vec![address_any_case("0x7E5F4552091A69125d5DfCb7b8C2659029395Bdf").unwrap()]
        );
        let none = parse_operator_file(
            format!(r#"{{"schema":"{OPERATOR_FILE_SCHEMA}","wallets":[]}}"#).as_bytes(),
        )
        .unwrap();
        assert!(none.operator_keys.is_empty());
        let e = parse_operator_file(file(r#"["0x12"]"#).as_bytes()).unwrap_err();
        assert!(e.starts_with("operator_keys[0]"), "{e}");
        let e = parse_operator_file(file(r#""0x12""#).as_bytes()).unwrap_err();
        assert!(e.contains("not a list"), "{e}");
        let many = format!(
            "[{}]",
            vec![r#""0x7e5f4552091a69125d5dfcb7b8c2659029395bdf""#; MAX_OPERATOR_KEYS + 1]
                .join(",")
        );
        let e = parse_operator_file(file(&many).as_bytes()).unwrap_err();
        assert!(e.contains("more than"), "{e}");
    }

    #[test]
    fn a_note_is_read_alone_as_in_the_file() {
        let n = parse_note(&serde_json::json!({
            "at": "2026-11-02T09:00:00Z", "kind": "price_change", "amount": "20000", "text": "x"
        }))
        .unwrap();
        assert_eq!(n.kind, NoteKind::PriceChange);
        assert_eq!(n.amount.as_deref(), Some("20000"));
        let e = parse_note(
            &serde_json::json!({"at": "2026-11-02T09:00:00Z", "kind": "payto_rotation"}),
        )
        .unwrap_err();
        assert!(e.contains("names the new pay_to"), "{e}");
        // In a file, the error names the note.
        let file = format!(
            r#"{{"schema":"{OPERATOR_FILE_SCHEMA}","wallets":[],"notes":[{{"kind":"price_change"}}]}}"#
        );
        assert_eq!(
            parse_operator_file(file.as_bytes()).unwrap_err(),
            "notes[0].at is missing"
        );
    }

    /// Found by the `operator_file` fuzz target: an error quoted the whole `schema` value, so a
    /// 1 MiB file made a 1 MiB receipt line.
    #[test]
    fn errors_quote_a_bounded_piece_of_the_file() {
        let long = "x".repeat(100_000);
        let schema = format!(r#"{{"schema":"{long}","wallets":[]}}"#);
        let e = parse_operator_file(schema.as_bytes()).unwrap_err();
        assert!(e.len() < 200, "{} bytes: {e}", e.len());
        assert!(
            e.contains("xxx...") && e.contains(OPERATOR_FILE_SCHEMA),
            "{e}"
        );

        let kind = format!(
            r#"{{"schema":"{OPERATOR_FILE_SCHEMA}","wallets":[],"notes":[{{"at":"2026-01-01T00:00:00Z","kind":"{long}\n"}}]}}"#
        );
        let e = parse_operator_file(kind.as_bytes()).unwrap_err();
        assert!(
            e.len() < 200 && e.starts_with("notes[0].kind"),
            "{} bytes: {e}",
            e.len()
        );

        // Short values are quoted whole, as before.
        let e = parse_operator_file(br#"{"schema":"other/1","wallets":[]}"#).unwrap_err();
        assert!(e.contains(r#""other/1""#), "{e}");
    }
}
