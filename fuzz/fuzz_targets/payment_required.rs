//! The unpaid 402 as the free run reads it: `PAYMENT-REQUIRED` header (v2) and body (v1, or v2
//! without a header) through the bounded reading (`x402::parse` over `crate::budget`), then
//! everything the free run computes from that one response alone: C1, C2, C4, C5 and the S2/S4
//! screens over the texts it publishes.
//!
//! The body and header values go through `expand` (see `src/lib.rs`): a short input can stand for
//! a megabyte, so that every budget (values, depth, entries, sizes) is within the fuzzer's reach.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use x402_probe::budget::{MAX_ACCEPTS_ENTRIES, MAX_RECEIPT_DEVIATIONS};
use x402_probe::checks::conformance::{c1, c2, c4, c5};
use x402_probe::checks::screen::{
    declared_headers, description_texts, screen_description, screen_secret_asks,
};
use x402_probe::evidence::Conclusion;
use x402_probe::x402::{Source, parse_payment_required};
use x402_probe_fuzz::{assert_conclusion, assert_deviation, response_expanded};

/// Deviations of one parse, at most, whatever the input: a bounded number per entry read (at
/// most [`MAX_ACCEPTS_ENTRIES`]) and per top-level field, for the header and the body. The parse
/// used to grow with the input (about 2 deviations per byte for `{},` entries); the budget made
/// it a constant.
const MAX_DEVIATIONS: usize = 64 * MAX_ACCEPTS_ENTRIES + 256;
/// Largest receipt (conclusion detail) of one check, whatever the response: the lists of
/// deviations are cut at [`MAX_RECEIPT_DEVIATIONS`] and each message is bounded.
const MAX_RECEIPT_BYTES: usize = 256 * 1024;

fuzz_target!(|data: &[u8]| {
    let r = response_expanded(data);
    let parsed = parse_payment_required(r.status, &r.headers, &r.body);

    // Where the PaymentRequired came from agrees with what was read.
    match parsed.source {
        Source::None => {
            assert!(parsed.required.is_none() && parsed.version.is_none());
            // Nothing read, or two headers that disagree (neither is read, nor the body).
            assert!(
                parsed.has_deviation("payment_required.missing")
                    || parsed.has_deviation("header.duplicate_disagree"),
                "{:?}",
                parsed.deviations
            );
        }
        Source::Header => assert!(parsed.header_object.is_some() && parsed.required.is_some()),
        Source::BodyV2 => {
            assert!(parsed.body_object.is_some() && parsed.version == Some(2));
        }
        Source::BodyV1 => assert!(parsed.body_object.is_some() && parsed.required.is_some()),
        Source::McpResult | Source::McpError => panic!("an HTTP response read as an MCP answer"),
    }
    if let Some(required) = &parsed.required {
        assert_eq!(parsed.version, Some(required.x402_version));
        assert!(matches!(required.x402_version, 1 | 2), "{parsed:?}");
        assert!(required.accepts.len() <= MAX_ACCEPTS_ENTRIES);
        // Entries past the budget are counted, and that is a finding.
        let unread = match parsed.source {
            Source::Header => parsed.header_accepts_unread,
            _ => parsed.body_accepts_unread,
        };
        assert_eq!(
            unread > 0,
            parsed.has_deviation("accepts.too_many"),
            "{unread} unread"
        );
        for d in &required.deviations {
            assert!(
                parsed.deviations.contains(d),
                "a deviation of the object is not in the parse: {d:?}"
            );
        }
        for req in &required.accepts {
            // `raw` is the entry exactly as received, and parses to `entry`.
            let again: serde_json::Value =
                serde_json::from_str(req.raw.get()).expect("an entry's raw JSON parses");
            assert_eq!(again, req.entry);
        }
    }
    assert_eq!(r.status != 402, parsed.has_deviation("status.not_402"));
    for d in &parsed.deviations {
        assert_deviation(d);
    }
    assert!(
        parsed.deviations.len() <= MAX_DEVIATIONS,
        "{} deviations from {} bytes",
        parsed.deviations.len(),
        data.len()
    );

    // The checks as the free run calls them (`checks::free`).
    let c1 = c1(&parsed, true);
    assert_receipt("C1", &c1);
    // Without a PaymentRequired there is nothing to pass.
    if parsed.required.is_none() {
        assert_eq!(c1.outcome, x402_probe::evidence::Outcome::Fail);
    }
    if let Some(required) = &parsed.required {
        assert_receipt("C2", &c2(required));
        assert_receipt("C4", &c4(&parsed));
        assert_receipt("C5", &c5(required));
    }

    // S2 and S4 read the object the PaymentRequired was interpreted from (as the free run does).
    if parsed.required.is_some()
        && let Some(object) = parsed
            .header_object
            .as_ref()
            .or(parsed.body_object.as_ref())
    {
        let texts = description_texts(object);
        let headers = declared_headers(object);
        assert_conclusion("S2", &screen_description(&texts), MAX_RECEIPT_BYTES);
        assert_conclusion(
            "S4",
            &screen_secret_asks(&texts, &headers),
            MAX_RECEIPT_BYTES,
        );
    }
});

/// A conformance receipt: bounded, and its lists of deviations cut at the budget.
fn assert_receipt(what: &str, c: &Conclusion) {
    assert_conclusion(what, c, MAX_RECEIPT_BYTES);
    if let Value::Object(detail) = &c.detail {
        for key in ["deviations", "notes"] {
            if let Some(Value::Array(list)) = detail.get(key) {
                assert!(
                    list.len() <= MAX_RECEIPT_DEVIATIONS,
                    "{what}: {} {key} kept",
                    list.len()
                );
            }
        }
    }
}
