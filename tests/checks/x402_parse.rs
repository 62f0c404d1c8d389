//! The x402 wire format against sample 402s written from the spec shapes (`tests/data/x402/`), the
//! EIP-712 payment path, and a property test that the parser never panics.
//!
//! Each sample file is one unpaid response: a status, an optional `PAYMENT-REQUIRED` header (a JSON
//! value encoded here as the file says, or literal text), an optional body, and the expected
//! source, version, parse deviation codes and C1/C2/C4/C5 outcomes with the codes each names.

use std::path::{Path, PathBuf};

use alloy::primitives::{Address, B256, U256, address, b256};
use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use proptest::prelude::*;
use serde_json::{Value, json};

use x402_probe::checks::conformance::{
    TokenDomainSeen, c1, c2_of, c3_compare, c4, c5_of, deviation_codes,
};
use x402_probe::evidence::{Conclusion, Outcome};
use x402_probe::x402::{
    Authorization, Parsed402, PayloadError, Source, TokenDomain, authorization_for,
    build_payment_header, decode_payment_header, parse_payment_required, recover_signer,
    token_domain_for, transfer_digest,
};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/x402")
}

/// One sample turned into what the HTTP prober would hand the parser.
struct Sample {
    name: String,
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    expect: Value,
}

fn encode_header(name: &str, spec: &Value) -> String {
    let encoding = spec["encoding"].as_str().expect("header.encoding");
    let text = match (&spec["json"], &spec["text"]) {
        (Value::Null, Value::String(text)) => text.clone(),
        (json, Value::Null) => serde_json::to_string(json).expect("serialise"),
        _ => panic!("{name}: header needs exactly one of json or text"),
    };
    let encoded = match encoding {
        "raw" => text,
        "standard" => STANDARD.encode(&text),
        "standard_unpadded" => STANDARD_NO_PAD.encode(&text),
        "url_safe" => URL_SAFE.encode(&text),
        "url_safe_unpadded" => URL_SAFE_NO_PAD.encode(&text),
        other => panic!("{name}: unknown encoding {other}"),
    };
    // Guard the samples themselves: a variant that encodes identically to standard padded
    // base64 would not test what its name says.
    match encoding {
        "url_safe" | "url_safe_unpadded" => assert!(
            encoded.contains(['-', '_']),
            "{name}: the URL-safe sample has no URL-safe characters; change its text"
        ),
        _ => {}
    }
    if encoding.ends_with("_unpadded") {
        assert!(
            !encoded.len().is_multiple_of(4),
            "{name}: the unpadded sample needs no padding; change its text"
        );
    }
    encoded
}

fn load_samples() -> Vec<Sample> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(data_dir())
        .expect("tests/data/x402 exists")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("utf-8 name")
                .to_string();
            let text = std::fs::read_to_string(&path).expect("readable sample");
            let sample: Value = serde_json::from_str(&text).expect("sample is JSON");
            let status = sample["status"].as_u64().expect("status") as u16;
            let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
            if let Some(header) = sample.get("header") {
                let header_name = header["name"].as_str().unwrap_or("payment-required");
                headers.push((header_name.to_string(), encode_header(&name, header)));
            }
            let body = match sample.get("body") {
                None => Vec::new(),
                Some(body) => match (&body["json"], &body["text"]) {
                    (Value::Null, Value::String(text)) => text.clone().into_bytes(),
                    (json, Value::Null) => serde_json::to_vec(json).expect("serialise"),
                    _ => panic!("{name}: body needs exactly one of json or text"),
                },
            };
            Sample {
                name,
                status,
                headers,
                body,
                expect: sample["expect"].clone(),
            }
        })
        .collect()
}

fn sorted(mut codes: Vec<String>) -> Vec<String> {
    codes.sort();
    codes
}

fn expected_codes(value: &Value) -> Vec<String> {
    sorted(
        value
            .as_array()
            .expect("a list of codes")
            .iter()
            .map(|c| c.as_str().expect("a code").to_string())
            .collect(),
    )
}

fn check_conclusion(sample: &str, check: &str, got: &Conclusion, want: &Value) -> Vec<String> {
    let mut failures = Vec::new();
    let outcome: Outcome = want["outcome"]
        .as_str()
        .expect("outcome")
        .parse()
        .expect("known outcome");
    if got.outcome != outcome {
        failures.push(format!(
            "{sample} {check}: outcome {} (want {outcome}); evidence: {}",
            got.outcome, got.evidence
        ));
    }
    let codes = sorted(deviation_codes(got));
    let want_codes = expected_codes(&want["codes"]);
    if codes != want_codes {
        failures.push(format!(
            "{sample} {check}: codes {codes:?} (want {want_codes:?})"
        ));
    }
    if got.evidence.trim().is_empty() {
        failures.push(format!("{sample} {check}: empty evidence"));
    }
    failures
}

#[test]
fn samples_give_the_expected_deviations_and_outcomes() {
    let samples = load_samples();
    assert!(samples.len() >= 20, "only {} samples found", samples.len());
    let mut failures = Vec::new();
    for sample in &samples {
        let parsed = parse_payment_required(sample.status, &sample.headers, &sample.body);
        let expect = &sample.expect;

        let source = serde_json::to_value(parsed.source).expect("source serialises");
        if source != expect["source"] {
            failures.push(format!(
                "{}: source {source} (want {})",
                sample.name, expect["source"]
            ));
        }
        let version = parsed.version.map(u64::from);
        if version != expect["version"].as_u64() {
            failures.push(format!(
                "{}: version {version:?} (want {})",
                sample.name, expect["version"]
            ));
        }
        let codes = sorted(parsed.deviations.iter().map(|d| d.code.clone()).collect());
        let want = expected_codes(&expect["deviations"]);
        if codes != want {
            failures.push(format!(
                "{}: deviations {codes:?} (want {want:?}); all: {:?}",
                sample.name, parsed.deviations
            ));
        }
        for (check, conclusion) in [
            ("c1", c1(&parsed, true)),
            ("c2", c2_of(&parsed, true)),
            ("c4", c4(&parsed)),
            ("c5", c5_of(&parsed, true)),
        ] {
            failures.extend(check_conclusion(
                &sample.name,
                check,
                &conclusion,
                &expect[check],
            ));
        }
        failures.extend(raw_entries_match(&sample.name, &parsed));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every entry's raw text must mean exactly the parsed entry.
fn raw_entries_match(sample: &str, parsed: &Parsed402) -> Vec<String> {
    let Some(required) = &parsed.required else {
        return Vec::new();
    };
    required
        .accepts
        .iter()
        .filter_map(|r| {
            let reparsed: Value = serde_json::from_str(r.raw.get()).ok()?;
            (reparsed != r.entry).then(|| format!("{sample}: accepts[{}] raw differs", r.index))
        })
        .collect()
}

#[test]
fn without_a_response_nothing_is_measured() {
    let parsed = parse_payment_required(0, &[], b"");
    assert_eq!(c1(&parsed, false).outcome, Outcome::Unmeasured);
    assert_eq!(c2_of(&parsed, false).outcome, Outcome::Unmeasured);
    assert_eq!(c5_of(&parsed, false).outcome, Outcome::Unmeasured);
    assert_eq!(c4(&parsed).outcome, Outcome::Na);
}

fn sample_parsed(name: &str) -> Parsed402 {
    let sample = load_samples()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("sample {name}"));
    parse_payment_required(sample.status, &sample.headers, &sample.body)
}

/// A fixed key for the tests (not a secret: it signs nothing of value anywhere).
fn test_signer() -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&b256!(
        "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318"
    ))
    .expect("valid key")
}

const NONCE: B256 = b256!("0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480");

#[test]
fn v2_payment_header_echoes_the_raw_entry_and_verifies() {
    // A pretty-printed header object: the echo must keep the entry's meaning exactly.
    let object = json!({
        "x402Version": 2,
        "resource": {"url": "https://weather.example/forecast", "extra-field": [1, 2.50]},
        "accepts": [
            {"scheme": "upto", "network": "eip155:1", "amount": "5", "asset": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48",
             "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60},
            {"scheme": "exact", "network": "eip155:84532", "amount": "10000",
             "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
             "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60,
             "extra": {"name": "USDC", "version": "2", "z-last": 1.0, "a-first": "x \"quoted\" y"}}
        ],
        "extensions": {"payment-identifier": {"info": {"required": false}}}
    });
    let text = serde_json::to_string_pretty(&object).expect("pretty");
    let headers = vec![("payment-required".to_string(), STANDARD.encode(&text))];
    let parsed = parse_payment_required(402, &headers, b"{}");
    assert!(parsed.deviations.is_empty(), "{:?}", parsed.deviations);
    let required = parsed.required.expect("parsed");
    let requirement = &required.accepts[1];
    assert!(
        requirement.raw.get().contains('\n'),
        "raw keeps the text as sent"
    );

    let signer = test_signer();
    let now = 1_740_672_154;
    let authorization =
        authorization_for(requirement, signer.address(), now, NONCE).expect("authorization");
    assert_eq!(authorization.valid_after, now - 600);
    assert_eq!(authorization.valid_before, now + 60);
    assert_eq!(authorization.value, U256::from(10_000u64));
    let domain = token_domain_for(requirement).expect("domain");
    assert_eq!(domain.chain_id, 84532);
    let digest = transfer_digest(&domain, &authorization);
    let signature = signer.sign_hash_sync(&digest).expect("signs").as_bytes();

    let header =
        build_payment_header(&required, requirement, &authorization, &signature).expect("header");
    assert_eq!(header.name, "PAYMENT-SIGNATURE");
    // Standard padded base64 of compact JSON.
    let bytes = STANDARD
        .decode(&header.value)
        .expect("standard padded base64");
    let json_text = String::from_utf8(bytes).expect("utf-8");
    assert!(!json_text.contains('\n') && !json_text.contains(": "));

    let decoded = decode_payment_header(&header.value).expect("decodes");
    assert_eq!(decoded["x402Version"], json!(2));
    assert_eq!(decoded["accepted"], requirement.entry);
    assert_eq!(decoded["accepted"], object["accepts"][1]);
    assert_eq!(decoded["resource"], object["resource"]);
    // The extensions are echoed, with our payment id put in the advertised `payment-identifier`
    // (`pay_` and the first 16 bytes of the authorization's nonce): the same payment, the same id.
    let id = "pay_f3746613c2d920b5fdabc0856f2aeb2d";
    let mut echoed = object["extensions"].clone();
    echoed["payment-identifier"]["info"]["id"] = json!(id);
    assert_eq!(decoded["extensions"], echoed);
    assert_eq!(header.payment_id.as_deref(), Some(id));
    // Key order and number spelling of the entry survive (1.0 stays 1.0).
    assert!(json_text.contains(r#""z-last":1.0,"a-first":"x \"quoted\" y""#));

    let auth = &decoded["payload"]["authorization"];
    assert_eq!(auth["value"], json!("10000"));
    assert_eq!(auth["validAfter"], json!((now - 600).to_string()));
    assert_eq!(auth["validBefore"], json!((now + 60).to_string()));
    assert_eq!(
        auth["to"],
        json!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
    );
    assert_eq!(auth["nonce"], json!(format!("{NONCE:#x}")));
    let sent_signature = decoded["payload"]["signature"].as_str().expect("signature");
    let sent_bytes = alloy::primitives::hex::decode(sent_signature).expect("hex");
    assert_eq!(sent_bytes.len(), 65);
    assert_eq!(
        recover_signer(&digest, &sent_bytes).expect("recovers"),
        signer.address()
    );
}

#[test]
fn v1_payment_header_names_scheme_and_network() {
    let parsed = sample_parsed("v1_honest_body");
    let required = parsed.required.expect("v1 parsed");
    let requirement = &required.accepts[0];
    let signer = test_signer();
    let authorization =
        authorization_for(requirement, signer.address(), 2_000_000_000, NONCE).expect("auth");
    let digest = transfer_digest(
        &token_domain_for(requirement).expect("domain"),
        &authorization,
    );
    let signature = signer.sign_hash_sync(&digest).expect("signs").as_bytes();
    let header =
        build_payment_header(&required, requirement, &authorization, &signature).expect("header");
    assert_eq!(header.name, "X-PAYMENT");
    let decoded = decode_payment_header(&header.value).expect("decodes");
    assert_eq!(decoded["x402Version"], json!(1));
    assert_eq!(decoded["scheme"], json!("exact"));
    assert_eq!(decoded["network"], json!("base-sepolia"));
    assert!(decoded.get("accepted").is_none());
}

#[test]
fn payment_header_refuses_anything_but_the_quote() {
    let parsed = sample_parsed("v2_honest_header_bazaar");
    let required = parsed.required.expect("parsed");
    let requirement = &required.accepts[0];
    let from = test_signer().address();
    let good = authorization_for(requirement, from, 2_000_000_000, NONCE).expect("auth");
    let signature = [0u8; 65];

    let more = Authorization {
        value: good.value + U256::from(1u8),
        ..good
    };
    assert!(matches!(
        build_payment_header(&required, requirement, &more, &signature),
        Err(PayloadError::AmountMismatch { .. })
    ));
    let elsewhere = Authorization {
        to: address!("0x857b06519E91e3A54538791bDbb0E22373e36b66"),
        ..good
    };
    assert!(matches!(
        build_payment_header(&required, requirement, &elsewhere, &signature),
        Err(PayloadError::RecipientMismatch { .. })
    ));
    // A malformed quote cannot be paid at all.
    let bad = sample_parsed("amount_not_integer_string");
    let bad_required = bad.required.expect("parsed");
    assert!(matches!(
        authorization_for(&bad_required.accepts[0], from, 2_000_000_000, NONCE),
        Err(PayloadError::InvalidField {
            field: "amount",
            ..
        })
    ));
}

#[test]
fn c3_compares_the_token_domain() {
    let parsed = sample_parsed("v2_honest_header_bazaar");
    let required = parsed.required.expect("parsed");
    let requirement = &required.accepts[0];
    let usdc = address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e");
    let domain = TokenDomain {
        name: "USDC".into(),
        version: "2".into(),
        chain_id: 84532,
        verifying_contract: usdc,
    };
    let honest = TokenDomainSeen {
        name: Some("USDC".into()),
        version: Some("2".into()),
        domain_separator: Some(domain.separator()),
    };
    assert_eq!(
        c3_compare(requirement, 84532, None, &[]).outcome,
        Outcome::Unmeasured
    );
    let pass = c3_compare(requirement, 84532, Some(&honest), &[]);
    assert_eq!(pass.outcome, Outcome::Pass, "{}", pass.evidence);

    // The token says another version: the signature would not verify.
    let other_version = TokenDomainSeen {
        version: Some("1".into()),
        domain_separator: Some(
            TokenDomain {
                version: "1".into(),
                ..domain.clone()
            }
            .separator(),
        ),
        ..honest.clone()
    };
    let fail = c3_compare(requirement, 84532, Some(&other_version), &[]);
    assert_eq!(fail.outcome, Outcome::Fail);
    assert_eq!(
        sorted(deviation_codes(&fail)),
        [
            "accepts[0].extra.domain_separator.mismatch",
            "accepts[0].extra.version.mismatch"
        ]
    );

    // On another chain the same address is not canonical USDC, unless declared.
    let mut elsewhere = requirement.clone();
    elsewhere.network = Some("eip155:31337".into());
    let local_domain = TokenDomain {
        chain_id: 31337,
        ..domain.clone()
    };
    let seen_local = TokenDomainSeen {
        domain_separator: Some(local_domain.separator()),
        ..honest.clone()
    };
    let undeclared = c3_compare(&elsewhere, 31337, Some(&seen_local), &[]);
    assert_eq!(
        deviation_codes(&undeclared),
        ["accepts[0].asset.not_recognised"]
    );
    let declared = c3_compare(&elsewhere, 31337, Some(&seen_local), &[usdc]);
    assert_eq!(declared.outcome, Outcome::Pass, "{}", declared.evidence);

    // Reading the wrong chain is our mistake, not the endpoint's.
    assert_eq!(
        c3_compare(requirement, 1, Some(&honest), &[]).outcome,
        Outcome::Unmeasured
    );
    // A token without DOMAIN_SEPARATOR() fails.
    let no_separator = TokenDomainSeen {
        domain_separator: None,
        ..honest
    };
    assert_eq!(
        deviation_codes(&c3_compare(requirement, 84532, Some(&no_separator), &[])),
        ["token.domain_separator.unreadable"]
    );
}

#[test]
fn header_names_are_matched_without_case() {
    let parsed = sample_parsed("v2_honest_header_bazaar");
    let object = parsed.header_object.expect("decoded");
    let value = STANDARD.encode(serde_json::to_vec(&object).expect("json"));
    for name in ["payment-required", "PAYMENT-REQUIRED", "Payment-Required"] {
        let parsed = parse_payment_required(402, &[(name.to_string(), value.clone())], b"");
        assert_eq!(parsed.source, Source::Header, "{name}");
    }
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("exact"),
            Just("eip155:84532"),
            Just("10000"),
            Just("0x209693bc6afc0c5328ba36faf03c514ef312287c"),
            Just("2"),
        ]
        .prop_map(|s| Value::String(s.into())),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("x402Version".to_string()),
                        Just("accepts".to_string()),
                        Just("resource".to_string()),
                        Just("extensions".to_string()),
                        Just("bazaar".to_string()),
                        Just("info".to_string()),
                        Just("schema".to_string()),
                        Just("amount".to_string()),
                        Just("payTo".to_string()),
                        Just("maxTimeoutSeconds".to_string()),
                        Just("extra".to_string()),
                        Just("outputSchema".to_string()),
                        "[a-z]{1,6}",
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

fn run_all_checks(parsed: &Parsed402) {
    for arrived in [true, false] {
        let _ = c1(parsed, arrived);
        let _ = c2_of(parsed, arrived);
        let _ = c5_of(parsed, arrived);
    }
    let _ = c4(parsed);
    if let Some(required) = &parsed.required {
        for requirement in &required.accepts {
            let seen = TokenDomainSeen {
                name: Some("USDC".into()),
                version: None,
                domain_separator: Some(B256::ZERO),
            };
            let _ = c3_compare(requirement, 84532, Some(&seen), &[Address::ZERO]);
        }
    }
}

fn assert_invariants(parsed: &Parsed402) {
    match &parsed.required {
        None => assert_eq!(parsed.source, Source::None),
        Some(required) => {
            assert_ne!(parsed.source, Source::None);
            assert_eq!(parsed.version, Some(required.x402_version));
            for d in &required.deviations {
                assert!(parsed.deviations.contains(d), "{d} missing from the parse");
            }
            for r in &required.accepts {
                let reparsed: Value = serde_json::from_str(r.raw.get()).expect("raw is JSON");
                assert_eq!(reparsed, r.entry);
            }
        }
    }
}

proptest! {
    #[test]
    fn parser_never_panics_on_arbitrary_bytes(
        header in ".{0,200}",
        header_b64 in "[A-Za-z0-9+/=_-]{0,200}",
        body in prop::collection::vec(any::<u8>(), 0..400),
        status in any::<u16>(),
    ) {
        for value in [header, header_b64] {
            let headers = vec![("payment-required".to_string(), value)];
            let parsed = parse_payment_required(status, &headers, &body);
            assert_invariants(&parsed);
            run_all_checks(&parsed);
        }
        let parsed = parse_payment_required(status, &[], &body);
        assert_invariants(&parsed);
        run_all_checks(&parsed);
    }

    #[test]
    fn parser_never_panics_on_arbitrary_json(
        header in json_value(),
        body in json_value(),
        url_safe in any::<bool>(),
    ) {
        let text = serde_json::to_string(&header).expect("serialise");
        let encoded = if url_safe { URL_SAFE_NO_PAD.encode(&text) } else { STANDARD.encode(&text) };
        let body_bytes = serde_json::to_vec(&body).expect("serialise");
        let with_header = parse_payment_required(402, &[("payment-required".into(), encoded)], &body_bytes);
        assert_invariants(&with_header);
        run_all_checks(&with_header);
        let body_only = parse_payment_required(402, &[], &body_bytes);
        assert_invariants(&body_only);
        run_all_checks(&body_only);
    }

    #[test]
    fn mutated_payment_required_never_panics(
        version in json_leaf(),
        amount in json_leaf(),
        pay_to in json_leaf(),
        timeout in json_leaf(),
        extra in json_value(),
        extensions in json_value(),
    ) {
        let object = json!({
            "x402Version": version,
            "resource": {"url": "https://weather.example/forecast"},
            "accepts": [{
                "scheme": "exact", "network": "eip155:84532", "amount": amount,
                "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "payTo": pay_to,
                "maxTimeoutSeconds": timeout, "extra": extra
            }],
            "extensions": {"bazaar": extensions}
        });
        let encoded = STANDARD.encode(serde_json::to_vec(&object).expect("serialise"));
        let parsed = parse_payment_required(402, &[("payment-required".into(), encoded)], b"{}");
        assert_invariants(&parsed);
        run_all_checks(&parsed);
    }
}

// ---------- duplicates and budgets ----------

fn honest_header_object() -> Value {
    sample_parsed("v2_honest_header_bazaar")
        .header_object
        .expect("decoded")
}

fn encoded(object: &Value) -> String {
    STANDARD.encode(serde_json::to_vec(object).expect("json"))
}

fn with_other_payee(object: &Value) -> Value {
    let mut other = object.clone();
    other["accepts"][0]["payTo"] = json!("0x857b06519E91e3A54538791bDbb0E22373e36b66");
    other
}

#[test]
fn repeated_payment_required_headers_that_agree_are_one_quote() {
    let object = honest_header_object();
    let same = encoded(&object);
    // The same text twice, or the same object in two encodings (and any letter case).
    let unpadded = STANDARD_NO_PAD.encode(serde_json::to_vec(&object).expect("json"));
    for (first, second) in [(&same, &same), (&same, &unpadded)] {
        let headers = vec![
            ("payment-required".to_string(), first.clone()),
            ("PAYMENT-REQUIRED".to_string(), second.clone()),
        ];
        let parsed = parse_payment_required(402, &headers, b"{}");
        assert_eq!(parsed.source, Source::Header);
        assert!(
            parsed.has_deviation("header.duplicate"),
            "{:?}",
            parsed.deviations
        );
        assert!(!parsed.has_deviation("header.duplicate_disagree"));
        assert_eq!(c1(&parsed, true).outcome, Outcome::Pass);
    }
}

#[test]
fn repeated_payment_required_headers_that_disagree_offer_nothing() {
    let object = honest_header_object();
    let other = with_other_payee(&object);
    // Another payee, another letter case, or a second header that does not decode: whichever a
    // client reads first decides what it pays, so nothing is read, not even a v1 body.
    let v1_body = serde_json::to_vec(&json!({
        "x402Version": 1,
        "accepts": [object["accepts"][0].clone()]
    }))
    .expect("json");
    for (first, second) in [
        ("payment-required", encoded(&other)),
        ("Payment-Required", encoded(&other)),
        ("payment-required", "%%% not base64".to_string()),
    ] {
        let headers = vec![
            ("PAYMENT-REQUIRED".to_string(), encoded(&object)),
            (first.to_string(), second),
        ];
        let parsed = parse_payment_required(402, &headers, &v1_body);
        assert!(parsed.required.is_none(), "{first}: a quote was read");
        assert_eq!(parsed.source, Source::None);
        assert!(parsed.has_deviation("header.duplicate_disagree"));
        let conclusion = c1(&parsed, true);
        assert_eq!(conclusion.outcome, Outcome::Fail);
        assert!(deviation_codes(&conclusion).contains(&"header.duplicate_disagree".to_string()));
        assert!(
            conclusion.evidence.contains("disagree"),
            "{}",
            conclusion.evidence
        );
        assert_eq!(c2_of(&parsed, true).outcome, Outcome::Fail);
    }
}

#[test]
fn repeated_settlement_responses_must_agree() {
    use x402_probe::x402::parse_settlement_response;
    let receipt = |tx: &str| {
        STANDARD.encode(
            json!({"success": true, "transaction": tx, "network": "eip155:31337"}).to_string(),
        )
    };
    let a = receipt(&format!("0x{}", "11".repeat(32)));
    let b = receipt(&format!("0x{}", "22".repeat(32)));
    let pairs = |x: &str, y: &str, names: (&str, &str)| {
        vec![
            (names.0.to_string(), x.to_string()),
            (names.1.to_string(), y.to_string()),
        ]
    };
    let same = parse_settlement_response(&pairs(&a, &a, ("payment-response", "PAYMENT-RESPONSE")))
        .expect("the same receipt twice is one receipt");
    assert!(
        same.deviations
            .iter()
            .any(|d| d.code == "payment_response.duplicate")
    );
    let both =
        parse_settlement_response(&pairs(&a, &a, ("payment-response", "x-payment-response")))
            .expect("the same receipt under both names");
    assert!(
        both.deviations
            .iter()
            .any(|d| d.code == "payment_response.both_headers")
    );
    for names in [
        ("payment-response", "Payment-Response"),
        ("payment-response", "x-payment-response"),
    ] {
        let err = parse_settlement_response(&pairs(&a, &b, names)).expect_err("two receipts");
        assert_eq!(err.code, "payment_response.duplicate_disagree", "{names:?}");
    }
}

/// A v2 body (no header) whose accepts has `n` copies of `entry`.
fn flood_body(entry: &str, n: usize) -> Vec<u8> {
    let entries = vec![entry; n].join(",");
    format!(
        r#"{{"x402Version":2,"resource":{{"url":"https://weather.example/forecast"}},"accepts":[{entries}]}}"#
    )
    .into_bytes()
}

#[test]
fn an_accepts_flood_reads_the_first_entries_and_counts_the_rest() {
    let body = flood_body("{}", 340_000);
    let parsed = parse_payment_required(402, &[], &body);
    let required = parsed.required.as_ref().expect("read");
    assert_eq!(required.accepts.len(), 64);
    assert_eq!(required.accepts_sent, 340_000);
    assert!(parsed.has_deviation("accepts.too_many"));
    // Only the entries read are checked: 64 entries' worth of deviations, not 340,000.
    assert!(
        parsed.deviations.len() < 64 * 12,
        "{}",
        parsed.deviations.len()
    );
    assert_eq!(
        parsed.body_object.as_ref().unwrap()["accepts"]
            .as_array()
            .unwrap()
            .len(),
        64
    );
    assert_eq!(parsed.body_accepts_unread, 340_000 - 64);

    let first = c1(&parsed, true);
    assert_eq!(first.outcome, Outcome::Fail);
    assert!(deviation_codes(&first).contains(&"accepts.too_many".to_string()));
    let second = c2_of(&parsed, true);
    assert_eq!(second.outcome, Outcome::Fail);
    let detail = &second.detail;
    assert_eq!(detail["entries"], 64);
    assert_eq!(detail["entries_sent"], 340_000);
    assert_eq!(detail["deviations"].as_array().unwrap().len(), 32);
    assert!(detail["deviations_omitted"].as_u64().unwrap() > 0);
    let kept: Vec<String> = deviation_codes(&second);
    assert_eq!(kept[0], "accepts.too_many");
}

#[test]
fn header_and_body_floods_are_compared_as_far_as_they_were_read() {
    let entry = r#"{"scheme":"exact","network":"eip155:84532","amount":"1"}"#;
    let header_object: Value = serde_json::from_slice(&flood_body(entry, 100)).unwrap();
    let header = vec![("payment-required".to_string(), encoded(&header_object))];
    // The same flood in the body: the entries read agree, the rest were not compared.
    let parsed = parse_payment_required(402, &header, &flood_body(entry, 100));
    let agree = c4(&parsed);
    assert_eq!(agree.outcome, Outcome::Unmeasured, "{}", agree.evidence);
    // A body with another number of entries differs.
    let parsed = parse_payment_required(402, &header, &flood_body(entry, 101));
    assert_eq!(c4(&parsed).outcome, Outcome::Fail);
    // A flood that differs within the entries read differs.
    let other = entry.replace("\"1\"", "\"2\"");
    let parsed = parse_payment_required(402, &header, &flood_body(&other, 100));
    assert_eq!(c4(&parsed).outcome, Outcome::Fail);
}

#[test]
fn objects_too_deep_or_too_large_are_refused_whole() {
    let mut object = honest_header_object();
    let chain: Value = serde_json::from_str(&format!("{}{}", "[".repeat(70), "]".repeat(70)))
        .expect("serde_json reads 70 levels");
    object["extensions"]["nest"] = chain;
    let parsed =
        parse_payment_required(402, &[("payment-required".into(), encoded(&object))], b"{}");
    assert!(parsed.required.is_none());
    assert!(
        parsed.has_deviation("header.too_deep"),
        "{:?}",
        parsed.deviations
    );
    assert_eq!(c1(&parsed, true).outcome, Outcome::Fail);

    let wide = format!(
        r#"{{"x402Version":1,"accepts":[],"pad":[{}0]}}"#,
        "0,".repeat(30_000)
    );
    let parsed = parse_payment_required(402, &[], wide.as_bytes());
    assert!(
        parsed.has_deviation("body.too_complex"),
        "{:?}",
        parsed.deviations
    );
    assert!(parsed.required.is_none());
}

#[test]
fn deviation_messages_quote_long_values_by_their_start() {
    let long = format!("0x{}", "ab".repeat(30_000));
    let body = flood_body(&json!({"payTo": long, "network": long}).to_string(), 1);
    let parsed = parse_payment_required(402, &[], &body);
    for d in &parsed.deviations {
        assert!(
            d.message.chars().count() <= 303,
            "{}: {} chars",
            d.code,
            d.message.len()
        );
    }
}

fn c5_with(schema: Value, input: Value) -> Conclusion {
    let object = json!({
        "x402Version": 2,
        "resource": {"url": "https://weather.example/forecast"},
        "accepts": [],
        "extensions": {"bazaar": {
            "info": {"input": input, "output": {"type": "json"}},
            "schema": schema
        }}
    });
    let parsed = parse_payment_required(402, &[("payment-required".into(), encoded(&object))], b"");
    c5_of(&parsed, true)
}

#[test]
fn schemas_whose_validation_could_explode_are_refused_not_run() {
    let nest = |depth: usize| -> Value {
        serde_json::from_str(&format!("{}1{}", "[".repeat(depth), "]".repeat(depth))).unwrap()
    };
    // anyOf over a recursive $ref with two identical branches: 2^depth steps to validate.
    let branch = json!({"type": "array", "items": {"$ref": "#/$defs/nest"}});
    let bomb = json!({
        "$defs": {"nest": {"anyOf": [branch.clone(), branch]}},
        "properties": {"input": {"properties": {"nest": {"$ref": "#/$defs/nest"}}}}
    });
    const TOO_COMPLEX: &str = "extensions.bazaar.schema.too_complex";
    let conclusion = c5_with(bomb.clone(), json!({"type": "http", "nest": nest(40)}));
    assert_eq!(conclusion.outcome, Outcome::Fail);
    assert_eq!(deviation_codes(&conclusion), [TOO_COMPLEX]);
    // The same schema over a shallow instance is cheap, and judged.
    let conclusion = c5_with(bomb, json!({"type": "http", "nest": nest(3)}));
    assert_eq!(
        deviation_codes(&conclusion),
        ["extensions.bazaar.info.does_not_validate"]
    );

    // A diamond of references: no recursion, 2^k paths.
    let mut defs = serde_json::Map::new();
    for i in 0..30 {
        let next = json!({"$ref": format!("#/$defs/d{}", i + 1)});
        defs.insert(format!("d{i}"), json!({"anyOf": [next.clone(), next]}));
    }
    defs.insert("d30".into(), json!({"type": "integer"}));
    let diamond = json!({"$defs": defs, "properties": {"input": {"$ref": "#/$defs/d0"}}});
    let conclusion = c5_with(diamond, json!({"type": "http"}));
    assert_eq!(deviation_codes(&conclusion), [TOO_COMPLEX]);

    // Too large to compile at all.
    let mut properties = serde_json::Map::new();
    for i in 0..1_000 {
        properties.insert(format!("p{i}"), json!({"type": "string"}));
    }
    let big = json!({"properties": {"input": {"properties": properties}}});
    assert_eq!(
        deviation_codes(&c5_with(big, json!({"type": "http"}))),
        [TOO_COMPLEX]
    );

    // References this tool does not follow are not guessed at.
    let anchored = json!({
        "$defs": {"x": {"$anchor": "x", "type": "object"}},
        "properties": {"input": {"$ref": "#x"}}
    });
    assert_eq!(
        deviation_codes(&c5_with(anchored, json!({"type": "http"}))),
        [TOO_COMPLEX]
    );
}
