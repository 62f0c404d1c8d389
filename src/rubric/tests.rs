use super::*;
use serde_json::{Value, json};

fn default_json() -> Value {
    serde_json::from_slice(EMBEDDED_DEFAULT).unwrap()
}

/// Parse a mutated copy of the default rubric and return the error text.
fn error_after(mutate: impl FnOnce(&mut Value)) -> String {
    let mut v = default_json();
    mutate(&mut v);
    let bytes = serde_json::to_vec(&v).unwrap();
    match Rubric::from_bytes(&bytes) {
        Ok(_) => panic!("the mutated rubric was accepted"),
        Err(e) => e.to_string(),
    }
}

fn check_mut<'a>(v: &'a mut Value, id: &str) -> &'a mut Value {
    v["checks"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["id"] == id)
        .unwrap()
}

#[test]
fn embedded_default_parses_and_is_content_addressed() {
    let r = Rubric::embedded_default();
    assert_eq!(r.id, "x402-endpoint");
    assert_eq!(r.major_version(), 1);
    assert_eq!(r.checks.len(), 27);
    assert_eq!(r.sha256(), hex::encode(Sha256::digest(EMBEDDED_DEFAULT)));
    assert_eq!(r.check(CheckId::R3).unwrap().metric, Metric::Curve);
    assert_eq!(r.half_life_days(r.check(CheckId::R1).unwrap()), 14.0);
    assert_eq!(r.half_life_days(r.check(CheckId::R4).unwrap()), 30.0);
    assert_eq!(r.half_life_days(r.check(CheckId::H9).unwrap()), 90.0);
    assert_eq!(r.half_life_days(r.check(CheckId::S2).unwrap()), 30.0);
    assert_eq!(r.gates.len(), 7);
    assert_eq!(r.grade_for(90.0), "A");
    assert_eq!(r.grade_for(89.9999), "B");
    assert_eq!(r.grade_for(0.0), "F");
    assert_eq!(r.confidence_for(10.0), "high");
    assert_eq!(r.confidence_for(10.0001), "medium");
    assert_eq!(r.confidence_for(25.0), "medium");
    assert_eq!(r.confidence_for(60.0), "low");
}

#[test]
fn a_changed_byte_changes_the_id() {
    let mut bytes = EMBEDDED_DEFAULT.to_vec();
    let pos = bytes.iter().position(|b| *b == b'\n').unwrap();
    bytes.insert(pos, b' ');
    let r = Rubric::from_bytes(&bytes).unwrap();
    assert_ne!(r.sha256(), Rubric::embedded_default().sha256());
}

#[test]
fn major_versions() {
    assert_eq!(major_version_of("1.0.0-draft.1").unwrap(), 1);
    assert_eq!(major_version_of("2.3.4").unwrap(), 2);
    assert!(major_version_of("1.0").is_err());
    assert!(major_version_of("v1.0.0").is_err());
}

#[test]
fn refuses_unknown_check_in_gate() {
    let e = error_after(|v| v["gates"][0]["check"] = json!("Z9"));
    assert!(e.contains("unknown check \"Z9\""), "{e}");
}

#[test]
fn refuses_a_check_id_this_build_does_not_know_wherever_it_is_named() {
    // A check of the rubric itself, and the verdict's probe check: refused when read, by name.
    let e = error_after(|v| check_mut(v, "R6")["id"] = json!("R8"));
    assert!(e.contains("unknown check \"R8\""), "{e}");
    let e = error_after(|v| v["verdict"]["probe_check"] = json!("r1"));
    assert!(e.contains("unknown check \"r1\""), "{e}");
    // A known check that this rubric leaves out cannot be gated on or probed with.
    let without_c4 = |v: &mut Value| {
        v["checks"]
            .as_array_mut()
            .unwrap()
            .retain(|c| c["id"] != "C4")
    };
    let e = error_after(|v| {
        without_c4(v);
        v["gates"][0]["check"] = json!("C4");
    });
    assert!(
        e.contains("watches check \"C4\", which the rubric does not have"),
        "{e}"
    );
    let e = error_after(|v| {
        without_c4(v);
        v["verdict"]["probe_check"] = json!("C4");
    });
    assert!(e.contains("probe_check names check \"C4\""), "{e}");
}

#[test]
fn refuses_unknown_dimension() {
    let e = error_after(|v| check_mut(v, "R1")["dimension"] = json!("speed"));
    assert!(e.contains("unknown dimension \"speed\""), "{e}");
}

#[test]
fn refuses_duplicate_ids() {
    let e = error_after(|v| check_mut(v, "R2")["id"] = json!("R1"));
    assert!(e.contains("duplicate check id \"R1\""), "{e}");
    let e = error_after(|v| v["dimensions"][1]["id"] = json!("works"));
    assert!(e.contains("duplicate dimension id"), "{e}");
}

#[test]
fn refuses_dimension_weights_not_adding_to_100() {
    let e = error_after(|v| v["dimensions"][0]["weight"] = json!(46));
    assert!(e.contains("add up to 101"), "{e}");
}

#[test]
fn refuses_non_monotone_curves() {
    let e = error_after(|v| {
        check_mut(v, "R3")["curve"]["points"] = json!([[300, 100], [300, 90], [3000, 50]])
    });
    assert!(e.contains("x must strictly increase"), "{e}");
    let e = error_after(|v| {
        check_mut(v, "R7")["curve"]["points"] = json!([[500, 90], [2000, 100], [6000, 50]])
    });
    assert!(e.contains("y must not increase"), "{e}");
    let e = error_after(|v| check_mut(v, "R3")["curve"]["points"] = json!([[0, 100], [10, 0]]));
    assert!(e.contains("must be > 0"), "{e}");
}

#[test]
fn refuses_unknown_enum_values() {
    let e = error_after(|v| check_mut(v, "R1")["metric"] = json!("median"));
    assert!(e.contains("unknown variant `median`"), "{e}");
    let e = error_after(|v| check_mut(v, "R1")["kind"] = json!("cheap"));
    assert!(e.contains("unknown variant `cheap`"), "{e}");
    let e = error_after(|v| check_mut(v, "R1")["on_revision"] = json!("quarter"));
    assert!(e.contains("unknown variant `quarter`"), "{e}");
    let e = error_after(|v| v["gates"][0]["when"] = json!("fail_count_gte"));
    assert!(e.contains("unknown variant `fail_count_gte`"), "{e}");
    let e = error_after(|v| v["gates"][0]["verdict"] = json!("panic"));
    assert!(e.contains("unknown variant `panic`"), "{e}");
}

#[test]
fn refuses_bad_grade_order() {
    let e = error_after(|v| {
        v["grades"] =
            json!([{"grade": "A", "min": 80}, {"grade": "B", "min": 90}, {"grade": "F", "min": 0}])
    });
    assert!(e.contains("bad grade order"), "{e}");
    let e = error_after(|v| {
        v["grades"] = json!([{"grade": "A", "min": 80}, {"grade": "F", "min": 10}])
    });
    assert!(e.contains("min 0"), "{e}");
}

#[test]
fn refuses_verdict_naming_unknown_grade_or_level() {
    let e = error_after(|v| v["verdict"]["avoid_grades"] = json!(["E"]));
    assert!(e.contains("unknown grade \"E\""), "{e}");
    let e = error_after(|v| v["verdict"]["caution_confidence"] = json!(["shaky"]));
    assert!(e.contains("unknown confidence level"), "{e}");
}

#[test]
fn refuses_curve_on_rate_and_missing_curve() {
    let e = error_after(|v| {
        check_mut(v, "R3").as_object_mut().unwrap().remove("curve");
    });
    assert!(e.contains("without a curve"), "{e}");
}

#[test]
fn refuses_unknown_fields_and_value_inside_score() {
    let e = error_after(|v| check_mut(v, "R1")["wieght"] = json!(3));
    assert!(e.contains("unknown field `wieght`"), "{e}");
    let e = error_after(|v| v["value"]["inside_score"] = json!(true));
    assert!(e.contains("beside the score"), "{e}");
}

#[test]
fn refuses_bad_band_and_gate_doing_nothing() {
    let e = error_after(|v| v["monte_carlo"]["band"] = json!([90, 10]));
    assert!(e.contains("monte_carlo.band"), "{e}");
    let e = error_after(|v| {
        v["gates"][6] =
            json!({"flag": "x", "check": "H3", "when": "failed_within_hours", "value": 1})
    });
    assert!(e.contains("does nothing"), "{e}");
}

#[test]
fn refuses_malformed_json() {
    assert!(matches!(
        Rubric::from_bytes(b"{\"schema\": "),
        Err(RubricError::Parse(_))
    ));
}

#[test]
fn the_calibration_section_is_optional_and_checked() {
    assert!(Rubric::embedded_default().calibration.is_none());
    let mut v = default_json();
    v["calibration"] = json!({"horizon_days": 14, "points": [[20, 0.9], [60, 0.3], [95, 0.01]]});
    let r = Rubric::from_bytes(&serde_json::to_vec(&v).unwrap()).unwrap();
    let c = r.calibration.as_ref().unwrap();
    assert_eq!(c.rate_at(0.0), 0.9);
    assert_eq!(c.rate_at(100.0), 0.01);
    assert!((c.rate_at(40.0) - 0.6).abs() < 1e-12);

    let bad = |calibration: Value| error_after(move |v| v["calibration"] = calibration);
    assert!(
        bad(json!({"horizon_days": 14, "points": [[20, 0.1], [60, 0.3]]})).contains("monotone")
    );
    assert!(
        bad(json!({"horizon_days": 14, "points": [[60, 0.3], [60, 0.1]]})).contains("monotone")
    );
    assert!(bad(json!({"horizon_days": 14, "points": [[20, 1.5], [60, 0.3]]})).contains("0..=1"));
    assert!(bad(json!({"horizon_days": 14, "points": [[-1, 0.5], [60, 0.3]]})).contains("0..=100"));
    assert!(bad(json!({"horizon_days": 14, "points": [[20, 0.5]]})).contains("at least 2"));
    assert!(bad(json!({"horizon_days": 0, "points": [[20, 0.5], [60, 0.3]]})).contains("horizon"));
    assert!(bad(json!({"horizon_days": 14, "points": [], "extra": 1})).contains("unknown field"));
}

#[test]
fn every_verdict_reads_back_as_written() {
    for verdict in Verdict::ALL {
        assert_eq!(verdict.as_str().parse::<Verdict>(), Ok(verdict));
        assert_eq!(verdict.to_string(), verdict.as_str());
        let json = serde_json::to_string(&verdict).unwrap();
        assert_eq!(json, format!("\"{}\"", verdict.as_str()));
        assert_eq!(serde_json::from_str::<Verdict>(&json).unwrap(), verdict);
    }
    let mut sorted = Verdict::ALL.to_vec();
    sorted.sort();
    assert_eq!(
        sorted,
        Verdict::ALL.to_vec(),
        "ALL runs from the most severe"
    );
    assert!(
        "fine"
            .parse::<Verdict>()
            .unwrap_err()
            .contains("unknown verdict \"fine\"")
    );
}
