//! Properties of the scorer over generated outcome histories.

use proptest::prelude::*;
use serde_json::{Value, json};
use x402_probe::rubric::{Metric, Rubric};
use x402_probe::score::document::ScoreDocument;
use x402_probe::score::input::Inputs;
use x402_probe::score::montecarlo::Sampler;
use x402_probe::score::points::Points;
use x402_probe::score::score;
use x402_probe::score::tally::CheckState;

const AS_OF_MS: i64 = 1_793_491_200_000; // 2026-11-01T00:00:00Z
const OUTCOMES: [&str; 4] = ["pass", "fail", "na", "unmeasured"];

fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// One generated outcome: (check index, outcome index, minutes before as_of, value).
type Gen = (usize, usize, i64, u32);

fn entry(rubric: &Rubric, seq: usize, (check, outcome, minutes, value): Gen) -> Value {
    let c = &rubric.checks[check % rubric.checks.len()];
    json!({
        "seq": seq, "check": c.id, "outcome": OUTCOMES[outcome % 4],
        "at": rfc3339(AS_OF_MS - minutes * 60_000),
        "kind": if c.kind == x402_probe::rubric::Kind::Paid { "paid" } else { "free" },
        "value": value, "receipt": format!("{:064x}", minutes)
    })
}

fn inputs(rubric: &Rubric, history: &[Gen], revisions: &[i64]) -> Value {
    // Revisions are listed oldest first (most minutes before as_of first).
    let mut revisions = revisions.to_vec();
    revisions.sort_by(|a, b| b.cmp(a));
    let revisions: Vec<Value> = revisions
        .iter()
        .enumerate()
        .map(|(i, m)| json!({"id": format!("r{i}"), "at": rfc3339(AS_OF_MS - m * 60_000)}))
        .collect();
    json!({
        "rubric_sha256": rubric.sha256(), "rubric_version": rubric.version,
        "as_of": rfc3339(AS_OF_MS),
        "subject": {"id": "p", "url": "https://p.example", "category": "c", "price_usd": "0.01",
                    "revisions": revisions},
        "history": history.iter().enumerate().map(|(i, g)| entry(rubric, i, *g)).collect::<Vec<_>>(),
        "population": [], "provenance": "test_harness"
    })
}

fn score_value(rubric: &Rubric, v: Value) -> ScoreDocument {
    score(
        rubric,
        &Inputs::from_value(v).unwrap(),
        Sampler::InverseCdfTable,
    )
    .unwrap()
}

fn checks(doc: &ScoreDocument) -> impl Iterator<Item = &x402_probe::score::document::CheckDoc> {
    doc.dimensions.iter().flat_map(|d| &d.checks)
}

fn history() -> impl Strategy<Value = Vec<Gen>> {
    prop::collection::vec(
        (0usize..27, 0usize..4, 0i64..90 * 24 * 60, 50u32..20_000),
        0..80,
    )
}

fn revisions() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(0i64..60 * 24 * 60, 0..3)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn contributions_add_up_to_the_score(h in history(), r in revisions()) {
        let rubric = Rubric::embedded_default();
        let doc = score_value(&rubric, inputs(&rubric, &h, &r));
        let by_check: Points = checks(&doc).map(|c| c.contribution).sum();
        let by_dimension: Points = doc.dimensions.iter().map(|d| d.contribution).sum();
        prop_assert_eq!(by_check, doc.score);
        prop_assert_eq!(by_dimension, doc.score);
        // And in the printed document: the decimal texts add up exactly (in ten-thousandths).
        let printed: Value = serde_json::from_slice(&doc.to_bytes().unwrap()).unwrap();
        let tenths = |v: &Value| (v.as_f64().unwrap() * 10_000.0).round() as i64;
        let sum: i64 = printed["dimensions"].as_array().unwrap().iter()
            .flat_map(|d| d["checks"].as_array().unwrap().iter())
            .map(|c| tenths(&c["contribution"])).sum();
        prop_assert_eq!(sum, tenths(&printed["score"]));
    }

    #[test]
    fn same_inputs_give_the_same_bytes(h in history(), r in revisions()) {
        let rubric = Rubric::embedded_default();
        let v = inputs(&rubric, &h, &r);
        let a = score_value(&rubric, v.clone()).to_bytes().unwrap();
        // Reformatted text of the same inputs: same digest, same bytes.
        let pretty = serde_json::to_vec_pretty(&v).unwrap();
        let b = score(&rubric, &Inputs::from_json_bytes(&pretty).unwrap(), Sampler::InverseCdfTable)
            .unwrap().to_bytes().unwrap();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn one_more_pass_never_lowers_a_rate_check(
        h in history(), r in revisions(), check in 0usize..27, minutes in 0i64..90 * 24 * 60,
    ) {
        let rubric = Rubric::embedded_default();
        let c = &rubric.checks[check];
        prop_assume!(c.metric == Metric::Rate);
        let before = score_value(&rubric, inputs(&rubric, &h, &r));
        let mut more = h.clone();
        more.push((check, 0, minutes, 100));
        let after = score_value(&rubric, inputs(&rubric, &more, &r));
        let find = |d: &ScoreDocument| checks(d).find(|x| x.id == c.id).unwrap().clone();
        let (b, a) = (find(&before), find(&after));
        prop_assume!(b.state != CheckState::Na && a.state != CheckState::Na);
        prop_assert!(a.value.unwrap() >= b.value.unwrap(), "{} {:?} -> {:?}", c.id, b.value, a.value);
    }

    #[test]
    fn na_keeps_the_relative_weights_of_its_dimension(
        h in history(), r in revisions(), check in 0usize..27,
    ) {
        let rubric = Rubric::embedded_default();
        let c = &rubric.checks[check];
        let before = score_value(&rubric, inputs(&rubric, &h, &r));
        let mut with_na = h.clone();
        with_na.push((check, 2, 0, 100)); // the latest determination: na
        let after = score_value(&rubric, inputs(&rubric, &with_na, &r));
        prop_assert_eq!(checks(&after).find(|x| x.id == c.id).unwrap().state, CheckState::Na);
        let others: Vec<_> = checks(&after)
            .filter(|x| x.id != c.id && x.points > 0.0)
            .filter(|x| rubric.check(x.id).unwrap().dimension == c.dimension)
            .collect();
        for pair in others.windows(2) {
            let (i, j) = (pair[0], pair[1]);
            let (bi, bj) = (
                checks(&before).find(|x| x.id == i.id).unwrap(),
                checks(&before).find(|x| x.id == j.id).unwrap(),
            );
            prop_assume!(bi.points > 0.0 && bj.points > 0.0);
            // points are rounded to 4 decimals: compare the ratios with that tolerance.
            let ratio_before = bi.points / bj.points;
            let ratio_after = i.points / j.points;
            prop_assert!((ratio_before - i.weight / j.weight).abs() < 1e-2);
            prop_assert!((ratio_after - ratio_before).abs() < 1e-2, "{} {}: {} vs {}", i.id, j.id, ratio_before, ratio_after);
        }
    }

    #[test]
    fn a_score_of_rate_checks_lies_inside_its_band(h in history(), r in revisions()) {
        // A rate check's value is the mean of the very posterior the band draws it from (and an
        // unmeasured check's is the uniform prior's mean), so without curve checks the score is
        // the mean of the draws, which lies between their 10th and 90th percentiles; a cap
        // applies to both sides alike (min(score, cap) and min(draw, cap)), at worst putting the
        // capped score at the band's edge. Curve checks read a p95 rather than a mean: left out.
        let rubric = Rubric::embedded_default();
        let curve = |g: &Gen| rubric.checks[g.0 % rubric.checks.len()].metric == Metric::Curve;
        let rate_only: Vec<Gen> = h.into_iter().filter(|g| !curve(g)).collect();
        let doc = score_value(&rubric, inputs(&rubric, &rate_only, &r));
        let capped = doc.capped_score.as_f64();
        // 0.001: the score and the band are each rounded to 4 decimals.
        prop_assert!(
            doc.band.low - 0.001 <= capped && capped <= doc.band.high + 0.001,
            "capped score {} outside its band [{}, {}]", capped, doc.band.low, doc.band.high
        );
    }

    #[test]
    fn caps_never_raise_a_score(h in history(), r in revisions()) {
        let rubric = Rubric::embedded_default();
        // The same rubric without caps: same inputs, same digest, same draws.
        let mut uncapped: Value = serde_json::from_slice(x402_probe::rubric::EMBEDDED_DEFAULT).unwrap();
        for g in uncapped["gates"].as_array_mut().unwrap() {
            g.as_object_mut().unwrap().remove("cap");
        }
        let uncapped = Rubric::from_bytes(&serde_json::to_vec(&uncapped).unwrap()).unwrap();
        let v = inputs(&rubric, &h, &r);
        let capped_doc = score_value(&rubric, v.clone());
        let free_doc = score_value(&uncapped, v);
        prop_assert!(capped_doc.capped_score <= capped_doc.score);
        prop_assert_eq!(capped_doc.score, free_doc.score);
        prop_assert!(capped_doc.capped_score <= free_doc.capped_score);
        prop_assert!(capped_doc.band.low <= free_doc.band.low);
        prop_assert!(capped_doc.band.high <= free_doc.band.high);
        if let Some(cap) = capped_doc.cap.cap {
            prop_assert!(capped_doc.band.high <= cap);
        }
    }
}

/// Probe runs: each at its own time (minutes before as_of, so decayed weights are not dyadic and
/// do not add up exactly), with several outcomes sharing that time, as every run's samples do.
/// A run: minutes before as_of, and its outcomes (check index, outcome index, value).
type Run = (i64, Vec<(usize, usize, u32)>);

fn runs() -> impl Strategy<Value = Vec<Run>> {
    prop::collection::vec(
        (
            0i64..60 * 24 * 60,
            prop::collection::vec((0usize..27, 0usize..4, 50u32..20_000), 1..14),
        ),
        1..10,
    )
}

fn runs_history(runs: &[Run]) -> Vec<Gen> {
    runs.iter()
        .flat_map(|(minutes, outcomes)| outcomes.iter().map(|(c, o, v)| (*c, *o, *minutes, *v)))
        .collect()
}

/// A deterministic shuffle from a seed (Fisher-Yates over a small LCG).
fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut state = seed | 1;
    for i in (1..items.len()).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        items.swap(i, (state >> 33) as usize % (i + 1));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn permuting_entries_that_share_a_time_never_changes_the_document(
        r in runs(), revs in revisions(), seed in any::<u64>(),
    ) {
        // seq is assigned once (in generation order) and kept with its entry; only the array
        // order of the history changes.
        let rubric = Rubric::embedded_default();
        let v = inputs(&rubric, &runs_history(&r), &revs);
        let original = score_value(&rubric, v.clone()).to_bytes().unwrap();
        // Within each group of entries sharing a time, in place.
        let mut within = v.clone();
        let history = within["history"].as_array_mut().unwrap();
        let mut start = 0;
        for (k, (_, outcomes)) in r.iter().enumerate() {
            let end = start + outcomes.len();
            shuffle(&mut history[start..end], seed.wrapping_add(k as u64));
            start = end;
        }
        prop_assert_eq!(&score_value(&rubric, within).to_bytes().unwrap(), &original);
        // And across the whole array.
        let mut across = v;
        shuffle(across["history"].as_array_mut().unwrap(), seed);
        prop_assert_eq!(&score_value(&rubric, across).to_bytes().unwrap(), &original);
    }

    #[test]
    fn a_p95_at_exactly_95_percent_is_the_last_fast_measurement(
        times in prop::collection::vec((0i64..60 * 24 * 60, 1usize..4), 1..5),
        fast in 100u32..3000, slow_extra in 1u32..5000,
    ) {
        // At each time, 19 m R3 measurements at or below `fast` ms and m above it: all times
        // together, the fast ones hold exactly 19/20 of the weight however the times decay, so
        // the p95 is the slowest fast measurement, `fast` itself.
        let rubric = Rubric::embedded_default();
        let r3 = rubric.checks.iter().position(|c| c.id == "R3").unwrap();
        let mut history = Vec::new();
        for (minutes, m) in &times {
            for k in 0..19 * m {
                history.push((r3, 0, *minutes, fast - (k as u32 % 50)));
            }
            for _ in 0..*m {
                history.push((r3, 0, *minutes, fast + slow_extra));
            }
        }
        let doc = score_value(&rubric, inputs(&rubric, &history, &[]));
        let r3doc = checks(&doc).find(|c| c.id == "R3").unwrap();
        prop_assert_eq!(r3doc.p95_ms, Some(f64::from(fast)));
    }
}
