use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::evidence::{CheckResult, Outcome, Receipt};

const CONFORMANCE: &str = include_str!("../../tests/data/agent-readiness/conformance.json");

#[test]
fn the_embedded_rubric_is_seed_000_byte_for_byte_and_valid() {
    let r = ReadinessRubric::embedded();
    // The seed's own digest: the file is content-addressed, so any changed byte is another rubric.
    assert_eq!(
        r.sha256(),
        "b82273dfabe13e3dd396e6ab885735150f61469c92a63e54ad2d643b21f7c80b"
    );
    assert_eq!(r.version, "0.2");
    assert_eq!(r.verification_line, 40);
    assert_eq!(r.severity(SafetyKind::KeyRequest), Severity::Critical);
    assert_eq!(r.penalty(Severity::Severe), Some(-40));
    assert_eq!(r.band_of(90), Some(BandName::Native));
    assert_eq!(r.band_of(40), Some(BandName::HumanGated));
    assert_eq!(r.band_of(0), None);
}

/// The embedded rubric with one change.
fn with(change: impl Fn(&mut Value)) -> Vec<u8> {
    let mut doc: Value = serde_json::from_slice(rubric::EMBEDDED).unwrap();
    change(&mut doc);
    serde_json::to_vec(&doc).unwrap()
}

#[test]
fn a_broken_rubric_is_refused_with_its_reason() {
    let cases = [
        (
            with(|d| {
                d["dimensions"]["docs"]["weight"] = json!(15);
                d["dimensions"]["docs"]["ladder"][0]["points"] = json!(15);
            }),
            "add up to 105",
        ),
        (
            with(|d| d["rubric_version"] = json!("1.0")),
            "major version 0",
        ),
        (
            with(|d| d["safety"]["kinds"]["tls"] = json!("fatal")),
            "unknown variant",
        ),
        (with(|d| d["extra"] = json!(1)), "unknown field"),
        (
            with(|d| d["dimensions"]["access"]["ladder"][0]["points"] = json!(20)),
            "not its weight",
        ),
        (
            with(|d| d["safety"]["severities"]["minor"]["points"] = json!(5)),
            "not negative",
        ),
        (with(|d| d["bands"][1]["min"] = json!(75)), "gap or overlap"),
    ];
    for (bytes, want) in cases {
        let err = ReadinessRubric::from_bytes(&bytes).unwrap_err().to_string();
        assert!(err.contains(want), "{want}: {err}");
    }
}

fn conformance_evidence(case: &Value) -> Evidence {
    let e = &case["evidence"];
    let mut dimensions = BTreeMap::new();
    for (name, step) in e["dimensions"].as_object().unwrap() {
        let dim: Dimension = serde_json::from_value(json!(name)).unwrap();
        dimensions.insert(
            dim,
            Reading::decided(step.as_u64().unwrap() as usize, "by hand", &[]),
        );
    }
    let mut bonuses = BTreeMap::new();
    for (id, granted) in e["bonuses"].as_object().unwrap() {
        bonuses.insert(
            serde_json::from_value(json!(id)).unwrap(),
            BonusReading {
                granted: granted.as_bool(),
                because: "by hand".into(),
            },
        );
    }
    let findings = e["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| SafetyFinding {
            kind: serde_json::from_value(k.clone()).unwrap(),
            check: CheckId::S2,
            receipt_sha256: "0".repeat(64),
            what: "by hand".into(),
        })
        .collect();
    Evidence {
        dimensions,
        bonuses,
        findings,
    }
}

#[test]
fn the_hand_written_conformance_cases_score_as_worked_out() {
    let rubric = ReadinessRubric::embedded();
    let doc: Value = serde_json::from_str(CONFORMANCE).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 2);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let got = serde_json::to_value(assess(&rubric, &conformance_evidence(case))).unwrap();
        let want = &case["expect"];
        assert_eq!(
            json!([got["sum"]["low"], got["sum"]["high"]]),
            want["sum"],
            "{name}"
        );
        assert_eq!(
            json!([got["range"]["low"], got["range"]["high"]]),
            want["range"],
            "{name}"
        );
        for key in [
            "score",
            "completed",
            "verification_capped",
            "band",
            "provisional_band",
        ] {
            assert_eq!(got[key], want[key], "{name}: {key}");
        }
    }
}

fn result(id: CheckId, outcome: Outcome, detail: Value) -> CheckResult {
    CheckResult {
        id,
        outcome,
        evidence: String::new(),
        value: None,
        receipt: Receipt {
            vantage: "test".into(),
            at: "2026-01-01T00:00:00Z".into(),
            detail,
            ..Receipt::default()
        },
    }
}

#[test]
fn a_free_run_decides_access_payment_interface_and_leaves_completion_to_a_paid_call() {
    use CheckId::*;
    let free: Vec<CheckResult> = [R1, R2, C1, C2, C5, S1, S2, S4]
        .into_iter()
        .map(|id| result(id, Outcome::Pass, Value::Null))
        .collect();
    let rubric = ReadinessRubric::embedded();
    let a = assess(&rubric, &evidence::from_checks(&free));
    let points: Vec<Option<u32>> = a.dimensions.iter().map(|d| d.points).collect();
    assert_eq!(points, [Some(25), Some(25), Some(18), None, None]);
    assert_eq!(a.completed, None);
    assert_eq!(a.band, AssessedBand::Band(BandName::Unverified));
    // 68 decided; completion, docs and both bonuses open: 68..100 spans friction to native.
    assert_eq!((a.range.low, a.range.high), (68, 100));
    assert_eq!(a.provisional_band, None);

    let mut paid = free.clone();
    paid.push(result(R4, Outcome::Pass, Value::Null));
    paid.push(result(R5, Outcome::Fail, Value::Null));
    let a = assess(&rubric, &evidence::from_checks(&paid));
    assert_eq!(a.dimensions[3].points, Some(8));
    assert_eq!(a.completed, Some(true));

    // Without a parsable 402 nothing about access or payment is decided.
    let no_402 = vec![result(R2, Outcome::Fail, Value::Null)];
    let a = assess(&rubric, &evidence::from_checks(&no_402));
    assert!(a.dimensions.iter().all(|d| d.state == State::Unmeasured));
    assert_eq!((a.range.low, a.range.high), (0, 100));
}

#[test]
fn screen_fails_become_safety_findings_by_category_with_their_receipts() {
    use CheckId::*;
    let s2 = result(
        S2,
        Outcome::Fail,
        json!({"findings_by_rule": {
            "inj.ignore-previous": {"category": "injection", "count": 2},
            "unicode.bidi": {"category": "hidden_text", "count": 1},
        }}),
    );
    let s4 = result(
        S4,
        Outcome::Fail,
        json!({"findings_by_rule": {
            "secret.api-key": {"category": "secret_ask", "count": 1},
            "secret.seed-phrase": {"category": "secret_ask", "count": 1},
        }}),
    );
    let h5 = result(H5, Outcome::Fail, Value::Null);
    // A pass screen is no finding, whatever its detail says.
    let s3 = result(
        S3,
        Outcome::Pass,
        json!({"findings_by_rule": {"inj.x": {"category": "injection", "count": 1}}}),
    );
    let e = evidence::from_checks(&[s2.clone(), s4, h5, s3]);
    let kinds: Vec<(SafetyKind, CheckId)> = e.findings.iter().map(|f| (f.kind, f.check)).collect();
    assert_eq!(
        kinds,
        [
            (SafetyKind::PromptInjection, S2),
            (SafetyKind::HiddenText, S2),
            (SafetyKind::KeyRequest, S4),
            (SafetyKind::ThirdPartyCredRequest, S4),
            (SafetyKind::Overcharge, H5),
        ]
    );
    assert_eq!(
        e.findings[0].receipt_sha256,
        crate::history::receipt_digest(&s2.receipt)
    );
    let a = assess(&ReadinessRubric::embedded(), &e);
    assert_eq!(a.band, AssessedBand::Band(BandName::Hostile));
    assert_eq!(a.score, Some(0));
}
