//! One test per rule, with expectations computed by hand (the arithmetic is in the comments).

use super::*;
use crate::rubric::Verdict;
use serde_json::{Value, json};

const AS_OF: &str = "2026-11-01T00:00:00Z";
const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

fn rubric() -> Rubric {
    Rubric::embedded_default()
}

/// RFC 3339 text `ms` before `AS_OF`.
fn ago_ms(ms: i64) -> String {
    let base =
        time::OffsetDateTime::parse(AS_OF, &time::format_description::well_known::Rfc3339).unwrap();
    (base - time::Duration::milliseconds(ms))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

fn days(d: f64) -> i64 {
    (d * DAY_MS as f64) as i64
}

/// An inputs document under construction.
struct Doc {
    history: Vec<Value>,
    revisions: Vec<Value>,
    population: Vec<Value>,
    price: Value,
}

impl Doc {
    fn new() -> Doc {
        Doc {
            history: vec![],
            revisions: vec![],
            population: vec![],
            price: json!("0.01"),
        }
    }

    /// One outcome of `check` `ago` ms before as_of, with the kind the rubric gives the check.
    fn add(&mut self, check: &str, outcome: &str, ago: i64) -> &mut Value {
        let rubric = rubric();
        let kind = match check
            .parse()
            .ok()
            .and_then(|id| rubric.check(id))
            .map(|c| c.kind)
        {
            Some(crate::rubric::Kind::Paid) => "paid",
            _ => "free",
        };
        // seq in the order the test adds entries (entries at one time: the later added, the later).
        let seq = self.history.len();
        self.history.push(json!({
            "seq": seq, "check": check, "outcome": outcome, "at": ago_ms(ago), "kind": kind,
            "receipt": "ab".repeat(32)
        }));
        self.history.last_mut().unwrap()
    }

    fn add_n(&mut self, check: &str, outcome: &str, n: usize, ago: i64) {
        for _ in 0..n {
            self.add(check, outcome, ago);
        }
    }

    fn revision(&mut self, id: &str, ago: i64) {
        self.revisions.push(json!({"id": id, "at": ago_ms(ago)}));
    }

    fn value(&self) -> Value {
        json!({
            "rubric_sha256": rubric().sha256(),
            "rubric_version": rubric().version,
            "as_of": AS_OF,
            "subject": {"id": "subject-1", "url": "https://api.example/x", "category": "search",
                        "price_usd": self.price, "revisions": self.revisions},
            "history": self.history,
            "population": self.population,
            "provenance": "synthetic_fixture"
        })
    }

    fn score(&self) -> ScoreDocument {
        let inputs = Inputs::from_value(self.value()).unwrap();
        score(&rubric(), &inputs, Sampler::InverseCdfTable).unwrap()
    }
}

fn check<'a>(doc: &'a ScoreDocument, id: &str) -> &'a CheckDoc {
    doc.dimensions
        .iter()
        .flat_map(|d| &d.checks)
        .find(|c| c.id == id)
        .unwrap()
}

fn gate<'a>(doc: &'a ScoreDocument, flag: &str, check: &str) -> &'a GateDoc {
    doc.gates
        .iter()
        .find(|g| g.flag == flag && g.check == check)
        .unwrap()
}

fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-4, "{a} != {b}");
}

/// A subject with enough evidence for every check to be verified and well measured: 40 free
/// probes over 10 days, 12 paid calls over 20 days, all passing (H4 and R6 na).
fn healthy() -> Doc {
    healthy_without(&[])
}

/// `healthy()` without any evidence for the named checks.
fn healthy_without(skip: &[&str]) -> Doc {
    let mut d = Doc::new();
    for c in rubric()
        .checks
        .iter()
        .filter(|c| !skip.contains(&c.id.as_str()))
    {
        let (n, span_days) = match c.kind {
            crate::rubric::Kind::Free => (40, 10.0),
            crate::rubric::Kind::Paid => (12, 20.0),
        };
        for i in 0..n {
            let ago = days(span_days * i as f64 / n as f64);
            let outcome = if c.id == "H4" || c.id == "R6" {
                "na"
            } else {
                "pass"
            };
            let e = d.add(c.id.as_str(), outcome, ago);
            if c.id == "R3" || c.id == "R7" {
                e["value"] = json!(250.0);
            }
            if c.id == "R5" {
                e["value"] = json!(4096);
            }
        }
    }
    d
}

// ---------- decay ----------

// A rate check's value is its posterior mean (1 + pass weight) / (2 + pass weight + fail weight).

#[test]
fn decay_free_check_halves_in_14_days() {
    // R1: a pass now (weight 1) and a fail 14 days ago (weight 0.5):
    // (1 + 1) / (2 + 1 + 0.5) = 2 / 3.5 = 57.1429 (an undecayed fail would give 2 / 4 = 50).
    let mut d = Doc::new();
    d.add("R1", "pass", 0);
    d.add("R1", "fail", days(14.0));
    let doc = d.score();
    close(check(&doc, "R1").value.unwrap(), 57.1429);
    close(check(&doc, "R1").evidence_weight.unwrap(), 1.5);
}

#[test]
fn decay_paid_check_halves_in_30_days() {
    // R4: a pass now and a fail 30 days ago (weight 0.5): 2 / 3.5 = 57.1429. With the free
    // half-life the fail would weigh 2^(-30/14) = 0.2264: 2 / 3.2264 = 61.99.
    let mut d = Doc::new();
    d.add("R4", "pass", 0);
    d.add("R4", "fail", days(30.0));
    close(check(&d.score(), "R4").value.unwrap(), 57.1429);
}

#[test]
fn decay_per_check_override() {
    // H9 (paid, half_life_days 90): a fail 90 days ago weighs 0.5, so 2 / 3.5 = 57.1429; S2
    // (free, half_life_days 30): a fail 30 days ago weighs 0.5 too.
    let mut d = Doc::new();
    d.add("H9", "pass", 0);
    d.add("H9", "fail", days(90.0));
    d.add("S2", "pass", 0);
    d.add("S2", "fail", days(30.0));
    let doc = d.score();
    close(check(&doc, "H9").value.unwrap(), 57.1429);
    close(check(&doc, "S2").value.unwrap(), 57.1429);
    assert_eq!(check(&doc, "H9").points, 0.0); // weight 0: shown, not weighted
    assert_eq!(check(&doc, "H9").contribution, Points(0));
}

// ---------- rate values: the posterior mean ----------

#[test]
fn rate_value_is_the_posterior_mean_and_tends_to_the_share() {
    // Nothing on record is the same rule at zero evidence: (1 + 0) / (2 + 0) = 0.5.
    assert_eq!(tally::posterior_mean(0.0, 0.0), tally::PRIOR_VALUE);
    // 3 passes, 1 fail (all now): (1 + 3) / (2 + 4) = 66.6667, not the share 3 / 4 = 75;
    // 300 and 100: 301 / 402 = 74.8756, 0.12 below the share of 75.
    let mut d = Doc::new();
    d.add_n("S4", "pass", 3, 0);
    d.add("S4", "fail", 0);
    d.add_n("S5", "pass", 300, 0);
    d.add_n("S5", "fail", 100, 0);
    let doc = d.score();
    close(check(&doc, "S4").value.unwrap(), 66.6667);
    close(check(&doc, "S5").value.unwrap(), 74.8756);
}

#[test]
fn one_run_of_passes_scores_inside_its_band() {
    // One pass of every check now (H4 and R6 na, the curves at 250 ms: 100). Denominator 90
    // (good leaves). Every rate check reads (1 + 1) / (2 + 1) = 2/3 of its points: works' rate
    // checks hold 50 - R3 2 - R7 2 = 46 points, as_described 33.3333, safe 16.6667, so the
    // score is 2 + 2 + (46 + 33.3333 + 16.6667) * 2/3 = 68 (the rounded contributions add up
    // to 68.0000 exactly). The old rule (the share, 1 / 1) gave 100, above the whole band:
    // each rate check draws from Beta(2, 1), mean 2/3.
    let mut d = Doc::new();
    for c in rubric().checks.iter() {
        let outcome = if c.id == "H4" || c.id == "R6" {
            "na"
        } else {
            "pass"
        };
        let e = d.add(c.id.as_str(), outcome, 0);
        if c.metric == crate::rubric::Metric::Curve {
            e["value"] = json!(250.0);
        }
    }
    let doc = d.score();
    assert_eq!(doc.score, Points::from_f64(68.0));
    assert!(
        doc.band.low <= doc.score.as_f64() && doc.score.as_f64() <= doc.band.high,
        "score {} outside its band {:?}",
        doc.score.as_f64(),
        doc.band
    );
}

// ---------- revisions ----------

fn revision_doc(check_id: &str) -> Doc {
    // Everything at as_of (no decay): a fail under r1, then revisions r2 and r3, then a pass
    // under r3. Revisions at the same instant keep their document order.
    let mut d = Doc::new();
    d.revision("r1", 0);
    d.revision("r2", 0);
    d.revision("r3", 0);
    d.add(check_id, "fail", 0)["revision"] = json!("r1");
    d.add(check_id, "pass", 0)["revision"] = json!("r3");
    d
}

#[test]
fn revision_half_halves_at_each_later_revision() {
    // R1 (half): the fail has 2 later revisions: weight 0.25; value (1 + 1) / (2 + 1.25)
    // = 2 / 3.25 = 61.5385.
    let doc = revision_doc("R1").score();
    close(check(&doc, "R1").value.unwrap(), 61.5385);
    close(check(&doc, "R1").evidence_weight.unwrap(), 1.25);
}

#[test]
fn revision_reset_drops_earlier_evidence() {
    // C1 (reset): the fail is dropped: (1 + 1) / (2 + 1) = 66.6667, one pass counted (kept, the
    // fail would give 2 / 4 = 50).
    let doc = revision_doc("C1").score();
    close(check(&doc, "C1").value.unwrap(), 66.6667);
    assert_eq!((check(&doc, "C1").passes, check(&doc, "C1").fails), (1, 0));
}

#[test]
fn checks_without_on_revision_ignore_revisions() {
    // S1 has no on_revision: both weigh 1: (1 + 1) / (2 + 1 + 1) = 50.
    let doc = revision_doc("S1").score();
    close(check(&doc, "S1").value.unwrap(), 50.0);
}

#[test]
fn revision_by_time_when_no_id_is_given() {
    // A fail 2 days ago with no revision id, a revision 1 day ago: R2's fail halves.
    // fail weight 2^(-2/14) * 0.5 = 0.9057 * 0.5 = 0.4529, pass now weight 1:
    // (1 + 1) / (2 + 1 + 0.4529) = 57.9230.
    let mut d = Doc::new();
    d.revision("r2", days(1.0));
    d.add("R2", "fail", days(2.0));
    d.add("R2", "pass", 0);
    let fail = libm::exp2(-2.0 / 14.0) * 0.5;
    close(fail, 0.4529);
    close(
        check(&d.score(), "R2").value.unwrap(),
        100.0 * 2.0 / (3.0 + fail),
    );
}

// ---------- na, prior, renormalisation, denominator ----------

#[test]
fn na_leaves_and_its_dimension_renormalises() {
    // H4 na: as_described's scorable weight is 100 - 10 = 90 (H8, H9 weigh 0), so H1 gets
    // 100 * 30/100 * 20/90 = 6.6667 points and H6 the same; H5 100 * .3 * 15/90 = 5.
    let mut d = Doc::new();
    d.add("H4", "pass", days(3.0));
    d.add("H4", "na", 0);
    let doc = d.score();
    assert_eq!(check(&doc, "H4").state, CheckState::Na);
    assert_eq!(check(&doc, "H4").value, None);
    close(check(&doc, "H1").points, 6.6667);
    close(check(&doc, "H5").points, 5.0);
}

#[test]
fn a_dimension_with_nothing_scorable_leaves_the_total() {
    // R6 na: good (10) leaves; denominator 90; works gets 100 * 45/90 = 50 points,
    // R1 50 * 10/100 = 5 points.
    let mut d = Doc::new();
    d.add("R6", "na", 0);
    let doc = d.score();
    assert_eq!(doc.denominator, 90.0);
    let good = doc.dimensions.iter().find(|x| x.id == "good").unwrap();
    assert!(!good.scored);
    assert_eq!(good.contribution, Points(0));
    close(doc.dimensions[0].points, 50.0);
    close(check(&doc, "R1").points, 5.0);
}

#[test]
fn no_evidence_is_held_at_the_prior_and_listed() {
    // Nothing but unmeasured outcomes: every weighted check sits at 50, so the score is 50,
    // and all 25 weighted checks are listed as held at the prior.
    let mut d = Doc::new();
    d.add("C3", "unmeasured", 0);
    let doc = d.score();
    assert_eq!(doc.score.as_f64(), 50.0);
    assert_eq!(doc.prior_held.len(), 25);
    let c3 = doc.prior_held.iter().find(|p| p.check == "C3").unwrap();
    assert!(c3.reason.contains("1 unmeasured"));
    assert_eq!(check(&doc, "C3").state, CheckState::Prior);
    close(check(&doc, "C3").value.unwrap(), 50.0);
}

#[test]
fn latest_determination_decides_na() {
    // H4 na earlier, then a pass: it applies now.
    let mut d = Doc::new();
    d.add("H4", "na", days(2.0));
    d.add("H4", "pass", 0);
    assert_eq!(check(&d.score(), "H4").state, CheckState::Scored);
}

#[test]
fn contributions_add_up_exactly() {
    let mut d = healthy();
    d.add("S1", "fail", days(1.0));
    d.add("H1", "fail", days(2.0));
    let doc = d.score();
    let sum: Points = doc
        .dimensions
        .iter()
        .flat_map(|x| &x.checks)
        .map(|c| c.contribution)
        .sum();
    assert_eq!(sum, doc.score);
    assert_eq!(
        doc.dimensions
            .iter()
            .map(|x| x.contribution)
            .sum::<Points>(),
        doc.score
    );
}

// ---------- curves ----------

#[test]
fn curve_check_p95_through_the_curve() {
    // R3: 20 timings 100, 200, ..., 2000 ms at as_of: the p95 is the 19th, 1900 ms;
    // value 90 - 40 ln(1.9)/ln(3) = 90 - 40 * 0.584239 = 66.6304.
    let mut d = Doc::new();
    for i in 1..=20 {
        d.add("R3", "pass", 0)["value"] = json!(100 * i);
    }
    let doc = d.score();
    assert_eq!(check(&doc, "R3").p95_ms, Some(1900.0));
    close(check(&doc, "R3").value.unwrap(), 66.6304);
}

#[test]
fn curve_check_fails_count_as_slower_than_any_point() {
    // 19 timings of 500 ms and 1 fail: p95 is the 19th value, 500 ms:
    // 100 - 10 ln(5/3)/ln(10/3) = 95.7572. With 2 fails the p95 is a failed request: 0.
    let mut d = Doc::new();
    for _ in 0..19 {
        d.add("R3", "pass", 0)["value"] = json!(500);
    }
    d.add("R3", "fail", 0);
    close(check(&d.score(), "R3").value.unwrap(), 95.7572);
    d.add("R3", "fail", 0);
    let doc = d.score();
    assert_eq!(check(&doc, "R3").value, Some(0.0));
    assert_eq!(check(&doc, "R3").p95_ms, None);
}

#[test]
fn curve_pass_without_value_is_an_error() {
    let mut d = Doc::new();
    d.add("R7", "pass", 0);
    let inputs = Inputs::from_value(d.value()).unwrap();
    let err = score(&rubric(), &inputs, Sampler::InverseCdfTable).unwrap_err();
    assert!(err.to_string().contains("needs its value in ms"), "{err}");
}

// ---------- gates ----------

#[test]
fn overcharge_binds_at_its_boundary_and_fades() {
    // H5 (paid, 30 d): one fail 60 days ago weighs exactly 0.25 >= 0.25: binds, cap 39, avoid.
    let mut d = healthy();
    d.add("H5", "fail", days(60.0));
    let doc = d.score();
    let g = gate(&doc, "overcharge", "H5");
    assert!(g.binding);
    assert_eq!(g.fail_weight, Some(0.25));
    assert_eq!(doc.cap.cap, Some(39.0));
    assert!(doc.capped_score.as_f64() <= 39.0);
    assert!(doc.band.high <= 39.0);
    assert_eq!(doc.verdict.verdict, Verdict::Avoid);
    // One hour older: below 0.25, cleared.
    let mut d = healthy();
    d.add("H5", "fail", days(60.0) + HOUR_MS);
    let doc = d.score();
    assert!(!gate(&doc, "overcharge", "H5").binding);
    assert_eq!(doc.capped_score, doc.score);
    assert_eq!(doc.verdict.verdict, Verdict::Ok);
}

#[test]
fn wrong_payee_binds() {
    let mut d = healthy();
    d.add("H6", "fail", days(1.0));
    let doc = d.score();
    assert!(gate(&doc, "wrong_payee", "H6").binding);
    assert_eq!(doc.verdict.verdict, Verdict::Avoid);
    // H6 is paid (30 d): 0.25 at 60 days binds, at 61 days (0.25 * 2^(-1/30) = 0.2443) it has faded.
    let mut d = healthy();
    d.add("H6", "fail", days(60.0));
    assert!(gate(&d.score(), "wrong_payee", "H6").binding);
    let mut d = healthy();
    d.add("H6", "fail", days(61.0));
    let doc = d.score();
    assert!(!gate(&doc, "wrong_payee", "H6").binding);
    assert_eq!(gate(&doc, "wrong_payee", "H6").fail_weight, Some(0.2443));
    assert_eq!(doc.verdict.verdict, Verdict::Ok);
}

#[test]
fn charged_without_delivery_clears_after_two_passes() {
    // H8 fail now (weight 1 >= 0.5): binds, cap 59, avoid; one pass after: still binds;
    // two passes after: cleared.
    let mut d = healthy();
    d.add("H8", "fail", 0);
    let doc = d.score();
    assert!(gate(&doc, "charged_without_delivery", "H8").binding);
    assert_eq!(doc.cap.cap, Some(59.0));
    assert_eq!(doc.verdict.verdict, Verdict::Avoid);
    d.add("H8", "pass", 0);
    let doc = d.score();
    let g = gate(&doc, "charged_without_delivery", "H8");
    assert!(g.binding);
    assert_eq!(g.passes_since_last_fail, Some(1));
    d.add("H8", "pass", 0);
    let doc = d.score();
    assert!(!gate(&doc, "charged_without_delivery", "H8").binding);
    assert_eq!(doc.verdict.verdict, Verdict::Ok);
    // Without passes, a fail 30 days old still weighs 0.5 and binds; 31 days old does not.
    let mut d = Doc::new();
    d.add("H8", "fail", days(30.0));
    assert!(gate(&d.score(), "charged_without_delivery", "H8").binding);
    let mut d = Doc::new();
    d.add("H8", "fail", days(31.0));
    assert!(!gate(&d.score(), "charged_without_delivery", "H8").binding);
}

#[test]
fn injection_clears_after_one_pass_or_with_decay() {
    // S2 (30 d): a fail now binds (cap 69, caution); one pass after clears it. A fail exactly
    // 30 days ago weighs 0.5: binds; a day older does not.
    let mut d = healthy();
    d.add("S2", "fail", 0);
    let doc = d.score();
    assert!(gate(&doc, "injection", "S2").binding);
    assert_eq!(doc.cap.cap, Some(69.0));
    assert_eq!(doc.verdict.verdict, Verdict::Caution);
    let mut d = healthy();
    d.add("S2", "fail", days(1.0));
    d.add("S2", "pass", 0);
    assert!(!gate(&d.score(), "injection", "S2").binding);
    let mut d = Doc::new();
    d.add("S3", "fail", days(30.0));
    assert!(gate(&d.score(), "injection", "S3").binding);
    let mut d = Doc::new();
    d.add("S3", "fail", days(31.0));
    assert!(!gate(&d.score(), "injection", "S3").binding);
}

/// Verified, with R1 passing 5 to 10 days ago and no R1 evidence since.
fn healthy_then_r1(fail_hours_ago: &[i64]) -> Doc {
    let mut d = healthy_without(&["R1"]);
    for i in 0..10 {
        d.add("R1", "pass", days(5.0 + 0.5 * i as f64));
    }
    for h in fail_hours_ago {
        d.add("R1", "fail", h * HOUR_MS);
    }
    d
}

#[test]
fn down_after_72_hours_of_fails() {
    // R1 fails at 72 h ago, 36 h ago and now: a run spanning exactly 72 h: down, stale.
    let doc = healthy_then_r1(&[72, 36, 0]).score();
    let g = gate(&doc, "down", "R1");
    assert!(g.binding);
    assert_eq!(g.failing_hours, Some(72.0));
    assert!(doc.stale);
    assert_eq!(doc.verdict.verdict, Verdict::Down);
    // A run of 71 h does not bind.
    let doc = healthy_then_r1(&[71, 0]).score();
    assert!(!gate(&doc, "down", "R1").binding);
    assert!(!doc.stale);
    // A pass after the fails breaks the run: cleared.
    let mut d = healthy_then_r1(&[100, 50, 10]);
    d.add("R1", "pass", 0);
    assert!(!gate(&d.score(), "down", "R1").binding);
    // Unmeasured probes neither break nor extend the run.
    let mut d = healthy_then_r1(&[72]);
    d.add("R1", "unmeasured", 36 * HOUR_MS);
    d.add("R1", "fail", 0);
    assert!(gate(&d.score(), "down", "R1").binding);
}

#[test]
fn payto_changed_within_168_hours() {
    // H3 fail exactly 168 h ago: binds (caution, watch); 1 ms older: does not.
    let mut d = healthy();
    d.add("H3", "fail", 168 * HOUR_MS);
    let doc = d.score();
    assert!(gate(&doc, "payto_changed", "H3").binding);
    assert_eq!(doc.verdict.verdict, Verdict::Caution);
    assert!(doc.watch.on_watch);
    let mut d = healthy();
    d.add("H3", "fail", 168 * HOUR_MS + 1);
    let doc = d.score();
    assert!(!gate(&doc, "payto_changed", "H3").binding);
    assert!(!doc.watch.on_watch);
}

#[test]
fn gates_ignore_revisions() {
    // An overcharge under r1 at 1.5 days, then r2, r3, r4 and a pass now under r4: the fail's
    // scoring weight is 2^(-1.5/30) / 8 = 0.965936 / 8 = 0.120742 (value (1 + 1) /
    // (2 + 1 + 0.120742) = 64.0873), but the gate reads time decay only: 2^(-1.5/30) = 0.9659
    // >= 0.25, binding.
    let mut d = Doc::new();
    d.revision("r1", days(2.0));
    d.add("H5", "fail", days(1.5))["revision"] = json!("r1");
    for (i, id) in ["r2", "r3", "r4"].iter().enumerate() {
        d.revision(id, days(1.0) - (i as i64) * HOUR_MS);
    }
    d.add("H5", "pass", 0)["revision"] = json!("r4");
    let doc = d.score();
    let g = gate(&doc, "overcharge", "H5");
    assert!(g.binding);
    assert_eq!(g.fail_weight, Some(0.9659));
    close(check(&doc, "H5").value.unwrap(), 64.0873);
}

#[test]
fn every_gate_is_published() {
    let doc = Doc::new().score();
    assert_eq!(doc.gates.len(), 7);
    assert!(doc.gates.iter().all(|g| !g.binding));
}

// ---------- verdict ----------

#[test]
fn verdict_ok_for_a_healthy_subject() {
    let doc = healthy().score();
    assert_eq!(doc.grade.as_deref(), Some("A"));
    assert_eq!(doc.verdict.verdict, Verdict::Ok, "{:?}", doc.verdict);
    assert_eq!(doc.provisional_grade, None);
    assert_eq!(doc.verdict.status, verdict::Status::Established);
}

#[test]
fn unverified_with_too_few_probes() {
    // Seven R1 probes over 6 days: unverified, grade provisional (never shown as low).
    let mut d = Doc::new();
    for i in 0..7 {
        d.add("R1", "pass", days(i as f64));
    }
    d.add("R4", "pass", days(1.0));
    let doc = d.score();
    assert_eq!(doc.verdict.verdict, Verdict::Unverified);
    assert_eq!(doc.grade, None);
    assert!(doc.provisional_grade.is_some());
    assert_eq!(doc.verdict.reasons[0].code, "too_few_probes");
}

#[test]
fn unverified_when_probes_span_less_than_3_days() {
    let mut d = Doc::new();
    for i in 0..10 {
        d.add("R1", "pass", days(0.29 * i as f64)); // spans 2.61 days
    }
    d.add("R4", "pass", 0);
    let doc = d.score();
    assert_eq!(doc.verdict.verdict, Verdict::Unverified);
    assert_eq!(doc.verdict.reasons[0].code, "probes_span_too_short");
    // 3 days exactly is enough.
    d.add("R1", "pass", days(3.0));
    assert!(d.score().verdict.verification.verified);
}

#[test]
fn unverified_without_a_paid_call_within_30_days() {
    let mut d = Doc::new();
    for i in 0..10 {
        d.add("R1", "pass", days(i as f64));
    }
    d.add("R4", "pass", days(30.0) + 1);
    let doc = d.score();
    assert_eq!(doc.verdict.verdict, Verdict::Unverified);
    assert_eq!(doc.verdict.reasons[0].code, "no_recent_paid_call");
    d.add("R4", "pass", days(30.0));
    assert!(d.score().verdict.verification.verified);
}

#[test]
fn evidence_gates_bind_on_unverified_subjects() {
    // Too little evidence to verify, but an overcharge on record: avoid, still provisional.
    let mut d = Doc::new();
    d.add("H5", "fail", days(1.0));
    let doc = d.score();
    assert_eq!(doc.verdict.verdict, Verdict::Avoid);
    assert_eq!(doc.verdict.status, verdict::Status::Provisional);
    assert_eq!(doc.grade, None);
    assert!(doc.provisional_grade.is_some());
}

#[test]
fn avoid_for_grade_f() {
    // Verified (R1 passes, paid calls) but every other check fails: grade F, avoid.
    let mut d = healthy();
    for c in rubric()
        .checks
        .iter()
        .filter(|c| c.id != "R1" && c.weight > 0.0)
    {
        if c.id != "H4" && c.id != "R6" {
            d.add_n(c.id.as_str(), "fail", 60, 0);
        }
    }
    let doc = d.score();
    assert_eq!(doc.grade.as_deref(), Some("F"));
    assert_eq!(doc.verdict.verdict, Verdict::Avoid);
    assert!(doc.verdict.reasons.iter().any(|r| r.code == "grade"));
}

#[test]
fn caution_for_grade_c() {
    // healthy(): R6 na, so good leaves and the denominator is 90; every check passes. The free
    // checks' pass weight is sum_{i<40} 2^(-i/4/14) = 31.7440, value (1 + 31.7440) / 33.7440
    // = 0.970365; S2's (half-life 30) 35.8185, value 0.973558; the paid checks' is
    // sum_{i<12} 2^(-(20i/12)/30) = 9.7956, value 10.7956 / 11.7956 = 0.915222; the curves read
    // 250 ms: 100. Points are 100/90 * dimension weight * check weight / scorable weight: the
    // score is 94.7802 (sum of the 23 rounded contributions). Fail C1 (5.5 points), C2 (4.5),
    // H1 (7.4074) and S1 (5.0), none of which has a gate, 400 times now: each such check's
    // value falls to 32.7440 / 433.7440 = 0.075491, so the contributions 5.3370 + 4.3666
    // + 7.1879 + 4.8518 = 21.7433 become 0.4152 + 0.3397 + 0.5592 + 0.3775 = 1.6916:
    // 94.7802 - 21.7433 + 1.6916 = 74.7285: grade C, and with this much evidence the band is
    // narrow, so the grade alone asks for caution.
    let mut d = healthy();
    for id in ["C1", "C2", "H1", "S1"] {
        d.add_n(id, "fail", 400, 0);
    }
    let doc = d.score();
    assert_eq!(doc.score, Points::from_f64(74.7285));
    assert_eq!(
        doc.grade.as_deref(),
        Some("C"),
        "score {}",
        doc.score.as_f64()
    );
    assert_eq!(doc.verdict.verdict, Verdict::Caution);
    assert_eq!(doc.verdict.reasons[0].code, "grade");
}

#[test]
fn caution_for_low_confidence() {
    // Verified (10 R1 passes over 4.5 days, one R4 pass now), with every other check na except
    // H1, S1 and R6, held at the prior. Points: R1 45*10/31 = 14.5, R4 45*21/31 = 30.5, H1 30,
    // S1 15, R6 10. Draw variance: (30^2 + 15^2 + 10^2)/12 for the uniforms plus
    // 30.5^2 * Var(Beta(2, 1)) = 30.5^2/18: 153.8, sd 12.4, so the 10-90 band is about
    // 2.56 * 12.4 = 31.7 points wide: low confidence, caution.
    let mut d = Doc::new();
    for i in 0..10 {
        d.add("R1", "pass", days(i as f64 * 0.5));
    }
    d.add("R4", "pass", 0);
    for c in rubric().checks.iter() {
        if !["R1", "R4", "H1", "S1", "R6"].contains(&c.id.as_str()) {
            d.add(c.id.as_str(), "na", 0);
        }
    }
    let doc = d.score();
    assert_eq!(doc.confidence, "low", "width {}", doc.band.width);
    assert!(
        doc.band.width > 25.0 && doc.band.width < 40.0,
        "{}",
        doc.band.width
    );
    assert_eq!(doc.verdict.verdict, Verdict::Caution);
    assert!(doc.verdict.reasons.iter().any(|r| r.code == "confidence"));
}

#[test]
fn down_outranks_avoid() {
    let mut d = healthy_then_r1(&[80, 0]);
    d.add("H5", "fail", days(1.0));
    let doc = d.score();
    assert_eq!(doc.verdict.verdict, Verdict::Down);
    assert_eq!(doc.cap.cap, Some(39.0));
    assert!(gate(&doc, "overcharge", "H5").binding);
}

// ---------- outlook ----------

fn outlook_doc(passes_now: usize, fails_now: usize, pass_28: usize, fail_28: usize) -> Doc {
    let mut d = Doc::new();
    d.add_n("R2", "pass", passes_now, 0);
    d.add_n("R2", "fail", fails_now, 0);
    d.add_n("R2", "pass", pass_28, days(28.0));
    d.add_n("R2", "fail", fail_28, days(28.0));
    d
}

#[test]
fn outlook_improving() {
    // Only R2 has recent evidence, so it carries all 100 points in both windows. Recent: one
    // pass, (1 + 1) / (2 + 1) = 66.6667; baseline adds a fail 28 days ago (weight 0.25):
    // 2 / 3.25 = 61.5385. Delta +5.1282 >= 5: improving.
    let o = outlook_doc(1, 0, 0, 1).score().outlook;
    assert_eq!(o.trend, outlook::Trend::Improving);
    assert_eq!(o.recent, Some(Points::from_f64(66.6667)));
    assert_eq!(o.baseline, Some(Points::from_f64(61.5385)));
    assert_eq!(o.delta, Some(Points::from_f64(5.1282)));
    assert_eq!(o.checks, vec![crate::rubric::CheckId::R2]);
}

#[test]
fn outlook_stable_below_the_delta() {
    // 2 passes now, a fail 28 days ago (weight 0.25): recent (1 + 2) / (2 + 2) = 75, baseline
    // 3 / 4.25 = 70.5882; delta 4.4118 < 5: stable.
    let o = outlook_doc(2, 0, 0, 1).score().outlook;
    assert_eq!(o.trend, outlook::Trend::Stable);
    assert_eq!(o.delta, Some(Points::from_f64(75.0 - 70.5882)));
    // 1 pass: recent 2 / 3 = 66.6667, baseline 2 / 3.25 = 61.5385; delta 5.1282: improving.
    assert_eq!(
        outlook_doc(1, 0, 0, 1).score().outlook.trend,
        outlook::Trend::Improving
    );
}

#[test]
fn outlook_declining() {
    // A fail now, a pass 28 days ago (weight 0.25): recent (1 + 0) / (2 + 1) = 33.3333,
    // baseline (1 + 0.25) / (2 + 1.25) = 38.4615: delta -5.1282 <= -5: declining.
    let o = outlook_doc(0, 1, 1, 0).score().outlook;
    assert_eq!(o.trend, outlook::Trend::Declining);
    assert_eq!(o.recent, Some(Points::from_f64(33.3333)));
    assert_eq!(o.delta, Some(Points::from_f64(-5.1282)));
}

#[test]
fn outlook_unknown_without_recent_evidence() {
    let o = outlook_doc(0, 0, 3, 0).score().outlook;
    assert_eq!(o.trend, outlook::Trend::Unknown);
    assert_eq!(o.delta, None);
}

// ---------- watch ----------

#[test]
fn watch_for_a_revision_within_7_days() {
    let mut d = Doc::new();
    d.revision("r1", days(7.0));
    assert!(d.score().watch.on_watch);
    let mut d = Doc::new();
    d.revision("r1", days(7.0) + 1);
    assert!(!d.score().watch.on_watch);
}

// ---------- value ----------

#[test]
fn value_beside_the_score() {
    // Peers in "search" with R4 and R5 >= 0.8: 0.005, 0.01, 0.02, 0.01; excluded: one at 0.001
    // with R5 0.79, one in another category. Subject at 0.01: 1 cheaper, 2 equal:
    // (1 + 2/2) / 4 = 50th percentile.
    // R5: two passes of 2048 bytes and one fail, all now: 0.01 * 3 calls / 4 KiB = 0.0075.
    let mut d = Doc::new();
    let peer = |id: &str, cat: &str, price: &str, r5: f64| json!({"id": id, "category": cat, "price_usd": price, "r4_pass_rate": 0.9, "r5_pass_rate": r5});
    d.population = vec![
        peer("a", "search", "0.005", 0.9),
        peer("b", "search", "0.01", 0.8),
        peer("c", "search", "0.02", 1.0),
        peer("d", "search", "0.01", 0.95),
        peer("e", "search", "0.001", 0.79),
        peer("f", "weather", "0.0001", 1.0),
    ];
    d.add("R5", "pass", 0)["value"] = json!(2048);
    d.add("R5", "pass", 0)["value"] = json!(2048);
    d.add("R5", "fail", 0);
    let without_value = {
        let mut e = d.population.clone();
        e.clear();
        e
    };
    let doc = d.score();
    assert_eq!(doc.value.price_percentile, Some(50.0));
    assert_eq!(doc.value.peers, 4);
    assert_eq!(doc.value.usd_per_valid_kib, Some(0.0075));
    assert!(!doc.value.inside_score);
    // The score does not move with the population or the price.
    let score = doc.score;
    d.population = without_value;
    d.price = json!("5");
    assert_eq!(d.score().score, score);
}

// ---------- determinism, versions, samplers ----------

#[test]
fn same_inputs_same_bytes() {
    let a = healthy().score().to_bytes().unwrap();
    let b = healthy().score().to_bytes().unwrap();
    assert_eq!(a, b);
    let stored = a.clone();
    assert_eq!(
        recompute(&stored, &[rubric()]).unwrap(),
        Recomputed::Identical
    );
}

#[test]
fn recompute_names_the_first_difference() {
    let doc = healthy().score();
    let mut text = String::from_utf8(doc.to_bytes().unwrap()).unwrap();
    text = text.replacen("\"subject-1\"", "\"subject-2\"", 1);
    match recompute(text.as_bytes(), &[rubric()]).unwrap() {
        Recomputed::Differs { field, byte, .. } => {
            assert!(byte > 0);
            assert!(
                field.starts_with("/band") || field.starts_with("/inputs"),
                "{field}"
            );
        }
        Recomputed::Identical => panic!("a changed input recomputed identical"),
    }
}

#[test]
fn refuses_a_different_major_version() {
    let mut v = Doc::new().value();
    v["rubric_version"] = json!("2.0.0");
    let inputs = Inputs::from_value(v).unwrap();
    let err = score(&rubric(), &inputs, Sampler::InverseCdfTable).unwrap_err();
    assert!(matches!(err, ScoreError::MajorVersion { .. }), "{err}");
}

#[test]
fn fast_and_reference_bands_agree() {
    let mut d = healthy();
    d.add_n("R4", "fail", 2, days(3.0));
    let inputs = Inputs::from_value(d.value()).unwrap();
    let fast = score(&rubric(), &inputs, Sampler::InverseCdfTable).unwrap();
    let slow = score(&rubric(), &inputs, Sampler::GammaRatio).unwrap();
    assert_eq!(fast.score, slow.score);
    assert!(
        (fast.band.low - slow.band.low).abs() < 0.5,
        "{:?} {:?}",
        fast.band,
        slow.band
    );
    assert!(
        (fast.band.high - slow.band.high).abs() < 0.5,
        "{:?} {:?}",
        fast.band,
        slow.band
    );
}

// ---------- issue 12: broken rules ----------

#[test]
fn p95_finds_a_tie_at_exactly_95_percent_with_decayed_weights() {
    // 40 R3 passes recorded at one time 30 h before as_of: each weighs 2^(-30/24/14), one double
    // that does not add up exactly (summed one by one, 38 of them land a hair under 95% of 40).
    // 37 at 500 ms, 1 at 2000 ms, 2 at 5000 ms: through 2000 ms the cumulative weight is 38 of
    // 40 weights, exactly 95%, so the p95 is 2000 ms: 90 - 40 ln(2)/ln(3) = 90 - 40 * 0.630930
    // = 64.7628. Reading
    // past the tie gave 5000 ms: 50 - 50 ln(5/3)/ln(10/3) = 28.7864.
    let mut d = Doc::new();
    for ms in [vec![500; 37], vec![2000], vec![5000; 2]].concat() {
        d.add("R3", "pass", 30 * HOUR_MS)["value"] = json!(ms);
    }
    let doc = d.score();
    assert_eq!(check(&doc, "R3").p95_ms, Some(2000.0));
    close(check(&doc, "R3").value.unwrap(), 64.7628);
    // The same with the entries listed in reverse: the same document.
    d.history.reverse();
    assert_eq!(d.score().to_bytes().unwrap(), doc.to_bytes().unwrap());
}

#[test]
fn p95_ms_does_not_saturate() {
    // A p95 beyond i64::MAX / 10^4 ms used to print as 922337203685477.6.
    let mut d = Doc::new();
    d.add("R3", "pass", 0)["value"] = json!(1e18);
    let doc = d.score();
    assert_eq!(check(&doc, "R3").p95_ms, Some(1e18));
    assert_eq!(check(&doc, "R3").value, Some(0.0));
}

/// RFC 3339 text `ns` nanoseconds before `AS_OF`.
fn ago_ns(ns: i64) -> String {
    let base =
        time::OffsetDateTime::parse(AS_OF, &time::format_description::well_known::Rfc3339).unwrap();
    (base - time::Duration::nanoseconds(ns))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

#[test]
fn sub_millisecond_times_are_kept_and_never_reordered() {
    // H4: a pass 0.1 ms before as_of listed first (seq 0), an na 0.9 ms before as_of listed
    // after it (seq 1). The pass is the later determination: H4 is scored. (Cut to ms, both were
    // at the same ms and the na, later in the file, won.)
    let mut d = Doc::new();
    d.add("H4", "pass", 0)["at"] = json!(ago_ns(100_000));
    d.add("H4", "na", 0)["at"] = json!(ago_ns(900_000));
    assert_eq!(check(&d.score(), "H4").state, CheckState::Scored);
    // An entry 0.9 ms after as_of is refused like any later one.
    let mut d = Doc::new();
    d.add("R1", "pass", 0)["at"] = json!("2026-11-01T00:00:00.0009Z");
    let err = Inputs::from_value(d.value()).unwrap_err().to_string();
    assert!(err.contains("after as_of"), "{err}");
}

// ---------- issue 12: equal times are ordered by seq ----------

#[test]
fn equal_times_follow_seq_not_the_array() {
    // An S2 fail and an S2 pass at as_of (after healthy()'s S2 entries, which have lower seqs).
    // seq says which came first: fail then pass clears the injection gate (one pass after the
    // latest fail); pass then fail binds its cap of 69. The array order never matters.
    let (fail_first, pass_first) = {
        let mut a = healthy();
        let base = a.history.len();
        a.add("S2", "fail", 0);
        a.add("S2", "pass", 0);
        let mut b = a.history.clone();
        b[base]["seq"] = json!(base + 1);
        b[base + 1]["seq"] = json!(base);
        let mut pass_first = healthy();
        pass_first.history = b;
        (a, pass_first)
    };
    let doc = fail_first.score();
    assert!(!gate(&doc, "injection", "S2").binding);
    let doc = pass_first.score();
    assert!(gate(&doc, "injection", "S2").binding);
    assert_eq!(doc.cap.cap, Some(69.0));
    // Swapping the two entries in the array, seq kept: the very same bytes.
    let mut swapped = pass_first;
    let n = swapped.history.len();
    swapped.history.swap(n - 1, n - 2);
    assert_eq!(swapped.score().to_bytes().unwrap(), doc.to_bytes().unwrap());
}

// ---------- issue 12: choices that change scores ----------

/// R1 probes enough for verification (10 over 4.5 days) but R1's latest determination is na,
/// and paid-run entries only for what does not count as a paid call.
fn probes_but_nothing_scored() -> Doc {
    let mut d = Doc::new();
    for i in 0..10 {
        d.add("R1", "pass", days(1.0 + 0.5 * i as f64));
    }
    d.add("R1", "na", 0);
    d.add("H9", "pass", 0); // paid, weight 0: shown, not scored
    d.add("X9", "pass", 0)["kind"] = json!("paid"); // a check the rubric does not have
    d.add("S1", "unmeasured", 0)["kind"] = json!("paid");
    d
}

#[test]
fn verification_needs_evidence_and_a_scored_paid_call() {
    // Every weighted check is na (R1) or held at the prior; the paid-run entries are of a weight-0
    // check and an unknown one. This used to come out verified with grade F and verdict avoid.
    let doc = probes_but_nothing_scored().score();
    let v = &doc.verdict.verification;
    assert!(!v.verified);
    assert_eq!(v.probes, 10);
    assert_eq!(v.last_paid_call_days_ago, None);
    let codes: Vec<&str> = v.reasons.iter().map(|r| r.code.as_str()).collect();
    assert_eq!(codes, vec!["no_paid_call", "no_evidence"]);
    assert_eq!(doc.verdict.verdict, Verdict::Unverified);
    assert_eq!(doc.grade, None);
    // A free check's entry marked paid is no paid call either.
    let mut d = probes_but_nothing_scored();
    d.add("S1", "pass", 0)["kind"] = json!("paid");
    let v = d.score().verdict.verification;
    assert_eq!(v.last_paid_call_days_ago, None);
    assert!(!v.reasons.iter().any(|r| r.code == "no_evidence"));
    // A pass of a scored paid check from a paid run is.
    d.add("R4", "pass", days(2.0));
    let doc = d.score();
    assert_eq!(doc.verdict.verification.last_paid_call_days_ago, Some(2.0));
    assert!(doc.verdict.verification.verified);
    // ... unless R4 is na by its latest determination: then it is not scored.
    d.add("R4", "na", days(1.0));
    assert_eq!(d.score().verdict.verification.last_paid_call_days_ago, None);
}

#[test]
fn outlook_compares_weighted_checks_and_says_what_it_left_out() {
    // Only H8 and H9 (weight 0) and an na H4 have recent evidence; R2 has evidence 20 days ago.
    // Nothing weighted has recent evidence: unknown, no checks; the left-out list says why.
    let mut d = Doc::new();
    d.add("H8", "pass", days(1.0));
    d.add("H9", "fail", days(1.0));
    d.add("H4", "na", days(1.0));
    d.add("R2", "pass", days(20.0));
    let o = d.score().outlook;
    assert_eq!(o.trend, outlook::Trend::Unknown);
    assert!(o.checks.is_empty());
    let because = |id: &str| o.left_out.iter().find(|l| l.check == id).unwrap().because;
    assert_eq!(because("H8"), outlook::LeftOutBecause::WeightZero);
    assert_eq!(because("H9"), outlook::LeftOutBecause::WeightZero);
    assert_eq!(because("H4"), outlook::LeftOutBecause::Na);
    assert_eq!(because("R2"), outlook::LeftOutBecause::NoRecentEvidence);
    assert_eq!(o.left_out.len() + o.checks.len(), rubric().checks.len());
    // One weighted check with recent evidence: compared, and the trend is known.
    d.add("R1", "pass", days(1.0));
    let o = d.score().outlook;
    assert_eq!(o.checks, vec![crate::rubric::CheckId::R1]);
    assert_eq!(o.trend, outlook::Trend::Stable);
}

#[test]
fn unmeasured_count_follows_reset_like_the_others() {
    // C1 (reset): a fail and an unmeasured under r1, then r2, then a pass under r2. The reset
    // drops both earlier entries: fails 0 and unmeasured 0 alike.
    let mut d = Doc::new();
    d.revision("r1", days(2.0));
    d.revision("r2", days(1.0));
    d.add("C1", "fail", days(1.5))["revision"] = json!("r1");
    d.add("C1", "unmeasured", days(1.5))["revision"] = json!("r1");
    d.add("C1", "pass", 0)["revision"] = json!("r2");
    d.add("C2", "unmeasured", days(1.5))["revision"] = json!("r1");
    let doc = d.score();
    let c1 = check(&doc, "C1");
    assert_eq!((c1.passes, c1.fails, c1.unmeasured), (1, 0, 0));
    // C2 has nothing left: held at the prior, and no unmeasured outcome counted either.
    assert_eq!(check(&doc, "C2").unmeasured, 0);
    let c2 = doc.prior_held.iter().find(|p| p.check == "C2").unwrap();
    assert_eq!(c2.reason, "no pass or fail on record");
    // R1 (half) keeps its unmeasured count through revisions.
    let mut d = Doc::new();
    d.revision("r1", days(2.0));
    d.revision("r2", days(1.0));
    d.add("R1", "unmeasured", days(1.5))["revision"] = json!("r1");
    assert_eq!(check(&d.score(), "R1").unmeasured, 1);
}

#[test]
fn an_na_check_has_no_evidence_weight() {
    // H4: a pass, then na. Not scored: value and evidence_weight null; the pass is still counted.
    let mut d = Doc::new();
    d.add("H4", "pass", days(1.0));
    d.add("H4", "na", 0);
    let doc = d.score();
    let h4 = check(&doc, "H4");
    assert_eq!((h4.value, h4.evidence_weight), (None, None));
    assert_eq!((h4.passes, h4.nas), (1, 1));
    // A check held at the prior has evidence weight 0, not null.
    assert_eq!(check(&doc, "H1").evidence_weight, Some(0.0));
}

#[test]
fn cap_from_names_each_flag_once() {
    // S2 and S3 both bind `injection` (cap 69): from lists it once.
    let mut d = healthy();
    d.add("S2", "fail", 0);
    d.add("S3", "fail", 0);
    let doc = d.score();
    assert!(gate(&doc, "injection", "S2").binding && gate(&doc, "injection", "S3").binding);
    assert_eq!(doc.cap.from, vec!["injection".to_string()]);
    // With an overcharge too: both flags, in rubric order; the cap is the lowest, 39.
    d.add("H5", "fail", 0);
    let doc = d.score();
    assert_eq!(
        doc.cap.from,
        vec!["overcharge".to_string(), "injection".to_string()]
    );
    assert_eq!(doc.cap.cap, Some(39.0));
}

#[test]
fn a_calibrated_rubric_publishes_the_predicted_failure_rate_and_the_draft_does_not() {
    let inputs = Inputs::from_value(healthy().value()).unwrap();
    let draft = score(&rubric(), &inputs, Sampler::InverseCdfTable).unwrap();
    assert_eq!(draft.predicted, None);
    let text = String::from_utf8(crate::canonical::canonical_bytes_of(&draft).unwrap()).unwrap();
    assert!(
        !text.contains("predicted"),
        "the draft's documents are unchanged"
    );

    // The same rubric with a calibration: 50% at 40, 2% at 100.
    let mut v: Value = serde_json::from_slice(crate::rubric::EMBEDDED_DEFAULT).unwrap();
    v["version"] = json!("1.0.0-draft.2");
    v["calibration"] = json!({"horizon_days": 14, "points": [[40, 0.5], [100, 0.02]]});
    let calibrated = Rubric::from_bytes(&serde_json::to_vec(&v).unwrap()).unwrap();
    let doc = score(&calibrated, &inputs, Sampler::InverseCdfTable).unwrap();
    let p = doc.predicted.as_ref().expect("a prediction");
    assert_eq!(p.horizon_days, 14);
    let s = doc.capped_score.as_f64();
    close(
        p.failure_rate,
        round4(0.5 + (s - 40.0) / 60.0 * (0.02 - 0.5)),
    );
    // It reads back from the document's bytes.
    let bytes = crate::canonical::canonical_bytes_of(&doc).unwrap();
    assert_eq!(
        ScoreDocument::from_slice(&bytes).unwrap().predicted,
        doc.predicted
    );
}
