//! The fixed RPC's answers: the JSON-RPC envelope (result, error, junk), then each shape read from
//! a result (quantities, receipts, logs, ABI-encoded strings from `eth_call`), and the message
//! that quotes a result of the wrong shape.
//!
//! The RPC is chosen by the operator, not the subject, but a broken or hostile node must still end
//! as an `RpcError` (so: `unmeasured`), never a panic.
#![no_main]

use alloy::primitives::Bytes;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use x402_probe::evidence::http::HttpResponse;
use x402_probe::probe::rpc::{
    RpcError, decode_string, parse_log, parse_quantity, parse_receipt, read_result,
    unexpected_answer,
};
use x402_probe::probe::solana_rpc::{parse_latest_blockhash, parse_transaction};
use x402_probe_fuzz::response;

/// Longest message of an error about a result of the wrong shape.
const MAX_UNEXPECTED_MESSAGE: usize = 256;

fuzz_target!(|data: &[u8]| {
    let r = response(data);
    let truncated = r.header("x-truncated").is_some();
    let resp = HttpResponse::new(r.status, r.headers.clone(), r.body.clone(), truncated, 0);
    match read_result("eth_call", &resp) {
        Ok(v) => {
            assert!(!truncated);
            read_shapes(&v);
        }
        Err(RpcError::Node { method, .. }) => assert_eq!(method, "eth_call"),
        Err(RpcError::BadResponse { message, .. }) => assert!(message.len() <= 1024, "{message}"),
        Err(e @ RpcError::Unreachable { .. }) => {
            panic!("a body cannot make the node unreachable: {e}")
        }
    }
    // eth_call's bytes, as `token_domain_fields` reads a string from them.
    if let Some(s) = decode_string(&r.body) {
        assert!(s.len() + 64 <= r.body.len());
    }
});

fn read_shapes(v: &Value) {
    // Solana: a paid call's settlement is read from these.
    if let Some(Some(tx)) = parse_transaction(v) {
        assert!(!tx.signatures.is_empty());
        assert!(tx.id() == tx.signatures[0]);
    }
    let _ = parse_latest_blockhash(v);
    if let Some(q) = parse_quantity(v) {
        let text = v.as_str().expect("a quantity is a string");
        assert_eq!(u64::from_str_radix(&text[2..], 16), Ok(q));
    }
    if let Some(receipt) = parse_receipt(v) {
        let logs = v
            .get("logs")
            .and_then(Value::as_array)
            .expect("a receipt has logs");
        assert_eq!(receipt.logs.len(), logs.len());
    }
    if let Some(items) = v.as_array() {
        for item in items {
            if let Some(log) = parse_log(item) {
                let topics = item
                    .get("topics")
                    .and_then(Value::as_array)
                    .expect("topics");
                assert_eq!(log.topics.len(), topics.len());
            }
        }
    }
    if let Some(text) = v.as_str()
        && let Ok(bytes) = text.parse::<Bytes>()
    {
        let _ = decode_string(&bytes);
    }
    match unexpected_answer("eth_chainId", v) {
        RpcError::BadResponse { message, .. } => {
            assert!(
                message.len() <= MAX_UNEXPECTED_MESSAGE,
                "{} bytes",
                message.len()
            )
        }
        other => panic!("{other:?}"),
    }
}
