//! The unpaid 402: `PAYMENT-REQUIRED` header (v2) and body (v1, or v2 without a header), then
//! everything the free run computes from that one response alone: C1, C2, C4, C5 and the S2/S4
//! screens over the texts it publishes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use x402_probe::checks::conformance::{c1, c2_of, c4, c5_of};
use x402_probe::checks::screen::{
    declared_headers, description_texts, screen_description, screen_secret_asks,
};
use x402_probe::x402::{Source, parse_payment_required};
use x402_probe_fuzz::{assert_conclusion, assert_deviation, response};

/// Deviations per byte of input, at most. The densest shape known, an `accepts` list of empty
/// entries (`{},`: 3 bytes each), costs about 2 deviations per byte: the parse is linear. Once the
/// parser caps entries and deviations (issue 8), this becomes a constant cap.
const DEVIATIONS_PER_BYTE: usize = 4;
/// Receipt (conclusion detail) bytes per byte of input, at most, with a floor for small inputs.
const RECEIPT_BYTES_PER_BYTE: usize = 256;
const RECEIPT_FLOOR_BYTES: usize = 64 * 1024;

fuzz_target!(|data: &[u8]| {
    let r = response(data);
    let parsed = parse_payment_required(r.status, &r.headers, &r.body);

    // Where the PaymentRequired came from agrees with what was read.
    match parsed.source {
        Source::None => {
            assert!(parsed.required.is_none() && parsed.version.is_none());
            assert!(parsed.has_deviation("payment_required.missing"));
        }
        Source::Header => assert!(parsed.header_object.is_some() && parsed.required.is_some()),
        Source::BodyV2 => {
            assert!(parsed.body_object.is_some() && parsed.version == Some(2));
        }
        Source::BodyV1 => assert!(parsed.body_object.is_some() && parsed.required.is_some()),
    }
    if let Some(required) = &parsed.required {
        assert_eq!(parsed.version, Some(required.x402_version));
        assert!(matches!(required.x402_version, 1 | 2), "{parsed:?}");
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
        parsed.deviations.len() <= DEVIATIONS_PER_BYTE * data.len() + 16,
        "{} deviations from {} bytes",
        parsed.deviations.len(),
        data.len()
    );

    let receipt_bound = RECEIPT_FLOOR_BYTES.max(RECEIPT_BYTES_PER_BYTE * data.len());
    let c1 = c1(&parsed, true);
    assert_conclusion("C1", &c1, receipt_bound);
    assert_conclusion("C2", &c2_of(&parsed, true), receipt_bound);
    if parsed.required.is_some() {
        assert_conclusion("C4", &c4(&parsed), receipt_bound);
    }
    assert_conclusion("C5", &c5_of(&parsed, true), receipt_bound);
    // Without a PaymentRequired there is nothing to pass.
    if parsed.required.is_none() {
        assert_eq!(c1.outcome, x402_probe::evidence::Outcome::Fail);
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
        assert_conclusion("S2", &screen_description(&texts), receipt_bound);
        assert_conclusion("S4", &screen_secret_asks(&texts, &headers), receipt_bound);
    }
});
