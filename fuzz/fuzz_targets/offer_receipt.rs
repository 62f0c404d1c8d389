//! Signed offers and receipts (x402's `offer-receipt` extension): the offers of a PaymentRequired's
//! `extensions` and the receipt of a settlement response, read and verified, and what C2 makes of
//! them. The input is a JSON value used both ways.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use x402_probe::x402::offer_receipt::{
    MAX_OFFERS, OfferSeen, Verified, offer_deviations, offers, receipt,
};
use x402_probe_fuzz::assert_deviation;

fn signer_is_named(verified: &Verified) {
    if let Some(signer) = verified.signer() {
        let address = signer.len() == 42 && signer.starts_with("0x");
        assert!(address || signer.starts_with("did:key:z"), "{signer:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Some(map) = value.as_object() {
        if let Some(list) = offers(Some(map)) {
            assert!(list.len() <= MAX_OFFERS, "{} offers", list.len());
            for (
                i,
                OfferSeen {
                    index,
                    terms,
                    verified,
                    ..
                },
            ) in list.iter().enumerate()
            {
                assert_eq!(*index, i);
                signer_is_named(verified);
                if verified.signer().is_some() {
                    assert!(terms.is_some(), "a signer of nothing");
                }
            }
            for d in offer_deviations(&list, &[]) {
                assert_deviation(&d);
                assert!(d.code.starts_with("offer_receipt.offer."), "{d:?}");
            }
        } else {
            assert!(!map.contains_key("offer-receipt"));
        }
    }
    if let Some(seen) = receipt(&value) {
        signer_is_named(&seen.verified);
        if seen.verified.signer().is_some() {
            assert!(seen.terms.is_some());
        }
    }
});
