//! The conformance set (`tests/data/conformance/`): hand-computed cases, at least one per rule of
//! `rubrics/README.md`, each with its arithmetic written out. Every case is scored and its
//! expected figures are compared with the score document; a refused case must be refused.
//!
//! A case file is one JSON object (the folder's README.md describes it): `case`, `rule`, `readme`,
//! `arithmetic` (the hand computation, lines of text: JSON has no comments), `inputs` (an inputs
//! document, passed to the scorer exactly as it is), and either `expect` (figures of the score
//! document) or `refused` (the inputs must be refused; the text is a phrase of our message).
//! The explanation lives beside `inputs`, never inside it, because the inputs format refuses
//! unknown fields.

use serde_json::Value;
use std::path::{Path, PathBuf};
use x402_probe::rubric::Rubric;
use x402_probe::score::input::Inputs;
use x402_probe::score::montecarlo::Sampler;
use x402_probe::score::score;

/// Every rule the set must cover (the `rule` field of a case names one).
const RULES: [&str; 26] = [
    "decay",
    "revision-half",
    "revision-reset",
    "revision-by-time",
    "rate-value",
    "prior",
    "na-and-renormalisation",
    "dimension-leaves",
    "curve",
    "curve-tie",
    "curve-fail",
    "gate-fail-weight",
    "gate-clear-after-passes",
    "gate-failing-for-hours",
    "gate-failed-within-hours",
    "gates-ignore-revisions",
    "caps",
    "verification",
    "verdict-grade-edges",
    "outlook",
    "watch",
    "value",
    "order-equal-times",
    "times",
    "rounding",
    "refusal",
];

fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/conformance")
}

fn cases() -> Vec<(PathBuf, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(folder())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let case = serde_json::from_slice(&std::fs::read(&p).unwrap())
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", p.display()));
            (p, case)
        })
        .collect()
}

/// The case's shape; problems are pushed to `out`.
fn check_shape(case: &Value, out: &mut Vec<String>) {
    let text = |k: &str| case.get(k).and_then(Value::as_str).is_some();
    for k in ["case", "rule", "readme"] {
        if !text(k) {
            out.push(format!("no `{k}` text"));
        }
    }
    if let Some(rule) = case.get("rule").and_then(Value::as_str)
        && !RULES.contains(&rule)
    {
        out.push(format!("unknown rule {rule:?}"));
    }
    let arithmetic = case.get("arithmetic").and_then(Value::as_array);
    if !arithmetic.is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_string)) {
        out.push("`arithmetic` must be a non-empty list of lines".into());
    }
    if !case.get("inputs").is_some_and(Value::is_object) {
        out.push("no `inputs` object".into());
    }
    match (case.get("expect"), case.get("refused")) {
        (Some(Value::Object(e)), None) if !e.is_empty() => {}
        (None, Some(Value::String(_))) => {}
        _ => {
            out.push("needs exactly one of a non-empty `expect` object or a `refused` text".into())
        }
    }
}

/// Compare `expected` with `actual`: objects by the keys given (others are not checked), arrays
/// element by element (same length), numbers as doubles, everything else by equality.
fn compare(expected: &Value, actual: &Value, path: &str, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                match a.get(k) {
                    Some(av) => compare(ev, av, &format!("{path}/{k}"), out),
                    None => out.push(format!("{path}/{k}: missing in the score document")),
                }
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                out.push(format!(
                    "{path}: expected {} elements, got {}: {actual}",
                    e.len(),
                    a.len()
                ));
                return;
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                compare(ev, av, &format!("{path}/{i}"), out);
            }
        }
        (Value::Number(e), Value::Number(a)) if e.as_f64() == a.as_f64() => {}
        _ if expected == actual => {}
        _ => out.push(format!("{path}: expected {expected}, got {actual}")),
    }
}

/// `expect` against the score document. Two keys are read by id rather than by position:
/// `checks` (`{"R1": {...}}`, found in `dimensions[*].checks`) and `gates` (`{"flag check":
/// {...}}`, e.g. `"injection S2"`).
fn compare_document(expect: &Value, doc: &Value, out: &mut Vec<String>) {
    for (key, ev) in expect.as_object().into_iter().flatten() {
        match key.as_str() {
            "checks" => {
                for (id, check) in ev.as_object().into_iter().flatten() {
                    let found = doc["dimensions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .flat_map(|d| d["checks"].as_array().into_iter().flatten())
                        .find(|c| c["id"] == id.as_str());
                    match found {
                        Some(actual) => compare(check, actual, &format!("/checks/{id}"), out),
                        None => out.push(format!("/checks/{id}: no such check")),
                    }
                }
            }
            "gates" => {
                for (name, gate) in ev.as_object().into_iter().flatten() {
                    let (flag, check) = name.split_once(' ').unwrap_or((name, ""));
                    let found = doc["gates"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|g| g["flag"] == flag && g["check"] == check);
                    match found {
                        Some(actual) => compare(gate, actual, &format!("/gates/{name}"), out),
                        None => out.push(format!("/gates/{name}: no such gate")),
                    }
                }
            }
            _ => match doc.get(key) {
                Some(actual) => compare(ev, actual, &format!("/{key}"), out),
                None => out.push(format!("/{key}: missing in the score document")),
            },
        }
    }
}

/// Score one case; every problem found, as lines.
fn run_case(rubric: &Rubric, case: &Value) -> Vec<String> {
    let mut out = Vec::new();
    check_shape(case, &mut out);
    if !out.is_empty() {
        return out;
    }
    let result = Inputs::from_value(case["inputs"].clone())
        .map_err(|e| e.to_string())
        .and_then(|inputs| {
            score(rubric, &inputs, Sampler::InverseCdfTable).map_err(|e| e.to_string())
        });
    match (result, case.get("refused").and_then(Value::as_str)) {
        (Err(message), Some(phrase)) => {
            if !message.contains(phrase) {
                out.push(format!("refused, but for another reason: {message}"));
            }
        }
        (Ok(_), Some(phrase)) => out.push(format!("expected a refusal ({phrase}), got a score")),
        (Err(message), None) => out.push(format!("refused: {message}")),
        (Ok(doc), None) => {
            let printed: Value = serde_json::from_slice(&doc.to_bytes().unwrap()).unwrap();
            compare_document(&case["expect"], &printed, &mut out);
        }
    }
    out
}

#[test]
fn every_case_holds() {
    let rubric = Rubric::embedded_default();
    let all = cases();
    assert!(all.len() >= RULES.len(), "only {} cases", all.len());
    let mut failures = Vec::new();
    for (path, case) in &all {
        assert_eq!(
            case["inputs"]["rubric_sha256"],
            rubric.sha256(),
            "{}: the set is for the shipped rubric",
            path.display()
        );
        for problem in run_case(&rubric, case) {
            failures.push(format!("{}: {problem}", path.display()));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn every_rule_has_a_case_and_names_match_files() {
    let all = cases();
    for rule in RULES {
        assert!(
            all.iter().any(|(_, c)| c["rule"] == rule),
            "no conformance case for rule {rule}"
        );
    }
    for (path, case) in &all {
        let stem = path.file_stem().unwrap().to_string_lossy();
        assert_eq!(case["case"], stem.as_ref(), "{}", path.display());
    }
}

#[test]
fn a_wrong_figure_or_a_wrong_refusal_is_reported() {
    // The comparison can fail: change one expected figure of each kind of case.
    let rubric = Rubric::embedded_default();
    let all = cases();
    let (_, scored) = all
        .iter()
        .find(|(_, c)| c["case"] == "01-decay-free")
        .unwrap();
    let mut wrong = scored.clone();
    wrong["expect"]["checks"]["R1"]["value"] = serde_json::json!(57.1428);
    let problems = run_case(&rubric, &wrong);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("/checks/R1/value: expected 57.1428, got 57.1429"));
    let mut missing = scored.clone();
    missing["expect"]["checks"]["R1"]["colour"] = serde_json::json!("red");
    assert!(run_case(&rubric, &missing)[0].contains("missing"));
    let mut refused = scored.clone();
    refused.as_object_mut().unwrap().remove("expect");
    refused["refused"] = serde_json::json!("duplicate");
    assert!(run_case(&rubric, &refused)[0].contains("expected a refusal"));
    let (_, refusal) = all.iter().find(|(_, c)| c["rule"] == "refusal").unwrap();
    let mut other = refusal.clone();
    other["refused"] = serde_json::json!("no such phrase");
    assert!(run_case(&rubric, &other)[0].contains("for another reason"));
}
