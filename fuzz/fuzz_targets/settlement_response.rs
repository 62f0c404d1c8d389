//! The settlement receipt of a paid call (`PAYMENT-RESPONSE`, `X-PAYMENT-RESPONSE`), and the
//! payment header decoder the lab's servers use on what a client sends (`PAYMENT-SIGNATURE`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use x402_probe::x402::parse::{PAYMENT_RESPONSE_HEADER, X_PAYMENT_RESPONSE_HEADER};
use x402_probe::x402::{decode_payment_header, parse_settlement_response};
use x402_probe_fuzz::{assert_deviation, response};

fuzz_target!(|data: &[u8]| {
    let r = response(data);
    match parse_settlement_response(&r.headers) {
        Ok(s) => {
            assert!(
                s.header_name == PAYMENT_RESPONSE_HEADER
                    || s.header_name == X_PAYMENT_RESPONSE_HEADER,
                "{:?}",
                s.header_name
            );
            let object = s.object.as_object().expect("a receipt read is an object");
            assert_eq!(object.get("success"), Some(&Value::Bool(s.success)));
            for (key, field) in [
                ("errorReason", &s.error_reason),
                ("errorMessage", &s.error_message),
                ("payer", &s.payer),
                ("transaction", &s.transaction),
                ("network", &s.network),
                ("amount", &s.amount),
            ] {
                // A typed field is a view over the object: present exactly when the object has a
                // string there.
                assert_eq!(
                    field.as_deref(),
                    object.get(key).and_then(Value::as_str),
                    "{key}"
                );
            }
            let tx_is_hash = s.transaction.as_deref().is_some_and(|tx| {
                tx.len() == 66
                    && tx.starts_with("0x")
                    && tx[2..].bytes().all(|b| b.is_ascii_hexdigit())
            });
            let flagged = s
                .deviations
                .iter()
                .any(|d| d.code == "payment_response.transaction.not_hash");
            assert_eq!(flagged, s.success && !tx_is_hash, "{s:?}");
            for d in &s.deviations {
                assert_deviation(d);
                assert!(d.code.starts_with("payment_response."), "{d:?}");
            }
            assert!(
                s.deviations.len() <= 16,
                "{} deviations",
                s.deviations.len()
            );
        }
        Err(d) => {
            assert_deviation(&d);
            assert!(d.code.starts_with("payment_response."), "{d:?}");
        }
    }
    if let Some(value) = r.header("payment-signature") {
        match decode_payment_header(value) {
            Ok(_) => {}
            Err(d) => {
                assert_deviation(&d);
                assert!(d.code.starts_with("payment."), "{d:?}");
            }
        }
    }
});
