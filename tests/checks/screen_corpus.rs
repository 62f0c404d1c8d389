//! The screen against a labelled corpus of x402 descriptions.
//!
//! `tests/data/screen/benign.jsonl` and `malicious.jsonl` hold one `{"text", "note", "split"}`
//! object per line (malicious lines also name their `category`). A line counts as flagged when
//! the screen reports any finding. Precision and recall are printed for the whole corpus and for
//! each split. `dev` and `holdout` were written together before any rule existed; only `dev` was
//! looked at while writing rules. `fresh` was written after the first version of the rules, by the
//! same author, to probe for gaps; its first measurement is recorded in `probes/S2.md`, and the
//! general fixes it prompted are listed there too. `fresh2` was written for issue 8 (evasions:
//! lookalike and styled letters, combining marks, spacing tricks; friendly phrasings; asks behind
//! a negation that governs something else; benign texts that mention keys and seed phrases
//! innocently) before the rules were changed for it; its first measurement is in the README and
//! `probes/S2.md`. `fresh3` (20 + 20 lines) was written after the issue 8 rules, as a blind check
//! of them. `fresh4` (issue 25) was written before the rules changed for the evasions that issue
//! found (HTML character references, encoded instructions with an order to decode them, secret
//! asks in Chinese, Japanese, Korean and Italian, asks split across two fields of a
//! PaymentRequired, asks behind a negation of something else) with benign texts close to each;
//! its lines may hold a whole `payment_required` instead of a `text`, screened as the S2 and S4
//! checks screen a 402 (`description_texts`, then `screen_description` and `screen_secret_asks`).
//! All splits are written by the rules' author, so these numbers overstate how the screen
//! does on text written by someone else. Run with `--nocapture` to see the table and every
//! misclassified line.

use std::collections::BTreeMap;

use serde::Deserialize;
use x402_probe::checks::screen::{
    Category, description_texts, screen, screen_description, screen_secret_asks,
};
use x402_probe::evidence::Outcome;

#[derive(Debug, Deserialize)]
struct Line {
    /// One text, screened alone; or, for a line with `payment_required`, absent.
    #[serde(default)]
    text: Option<String>,
    /// A PaymentRequired screened as the checks screen one: its texts read together.
    #[serde(default)]
    payment_required: Option<serde_json::Value>,
    note: String,
    split: String,
    #[serde(default)]
    category: Option<Category>,
}

fn load(name: &str) -> Vec<Line> {
    let path = format!("{}/tests/data/screen/{name}", env!("CARGO_MANIFEST_DIR"));
    let raw = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    raw.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{name} line {}: {e}", i + 1))
        })
        .collect()
}

/// What screening a line found: the rules that fired and the categories among them.
struct Flagged {
    rules: Vec<String>,
    categories: Vec<Category>,
}

impl Flagged {
    fn is_clean(&self) -> bool {
        self.rules.is_empty()
    }
}

/// Screen a line: its text alone, or its PaymentRequired as S2 and S4 do.
fn flag(line: &Line) -> Flagged {
    if let Some(payment_required) = &line.payment_required {
        let texts = description_texts(payment_required);
        let mut flagged = Flagged {
            rules: Vec::new(),
            categories: Vec::new(),
        };
        for conclusion in [screen_description(&texts), screen_secret_asks(&texts, &[])] {
            if conclusion.outcome != Outcome::Fail {
                continue;
            }
            if let Some(by_rule) = conclusion.detail["findings_by_rule"].as_object() {
                for (rule, count) in by_rule {
                    flagged.rules.push(rule.clone());
                    if let Ok(category) = serde_json::from_value(count["category"].clone()) {
                        flagged.categories.push(category);
                    }
                }
            }
            if flagged.rules.is_empty() {
                flagged.rules.push(conclusion.evidence.clone());
            }
        }
        return flagged;
    }
    let text = line
        .text
        .as_deref()
        .expect("a line has a text or a payment_required");
    let screening = screen(text);
    Flagged {
        rules: screening.findings.iter().map(|f| f.rule.clone()).collect(),
        categories: screening.by_rule.values().map(|r| r.category).collect(),
    }
}

/// What a line shows in a report.
fn shown(line: &Line) -> String {
    match (&line.text, &line.payment_required) {
        (Some(text), _) => format!("{text:?}"),
        (None, Some(pr)) => pr.to_string(),
        (None, None) => String::new(),
    }
}

#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    true_positive: usize,
    false_positive: usize,
    true_negative: usize,
    false_negative: usize,
}

impl Counts {
    fn precision(&self) -> f64 {
        let flagged = self.true_positive + self.false_positive;
        if flagged == 0 {
            1.0
        } else {
            self.true_positive as f64 / flagged as f64
        }
    }
    fn recall(&self) -> f64 {
        let malicious = self.true_positive + self.false_negative;
        if malicious == 0 {
            1.0
        } else {
            self.true_positive as f64 / malicious as f64
        }
    }
}

#[test]
fn screen_corpus_precision_and_recall() {
    let benign = load("benign.jsonl");
    let malicious = load("malicious.jsonl");
    assert!(
        benign.len() >= 150,
        "need at least 150 benign lines, have {}",
        benign.len()
    );
    assert!(
        malicious.len() >= 75,
        "need at least 75 malicious lines, have {}",
        malicious.len()
    );

    let mut by_split: BTreeMap<String, Counts> = BTreeMap::new();
    let mut total = Counts::default();
    let mut right_category = 0usize;
    let mut misclassified = Vec::new();
    let mut other_category = Vec::new();

    for line in &benign {
        let flagged = flag(line);
        let counts = by_split.entry(line.split.clone()).or_default();
        if flagged.is_clean() {
            counts.true_negative += 1;
            total.true_negative += 1;
        } else {
            counts.false_positive += 1;
            total.false_positive += 1;
            misclassified.push(format!(
                "FALSE POSITIVE [{}] {} -- {} fired {:?}",
                line.split,
                line.note,
                shown(line),
                flagged.rules
            ));
        }
    }
    for line in &malicious {
        let flagged = flag(line);
        let counts = by_split.entry(line.split.clone()).or_default();
        if flagged.is_clean() {
            counts.false_negative += 1;
            total.false_negative += 1;
            misclassified.push(format!(
                "FALSE NEGATIVE [{}] {} -- {}",
                line.split,
                line.note,
                shown(line)
            ));
        } else {
            counts.true_positive += 1;
            total.true_positive += 1;
            if line
                .category
                .is_none_or(|c| flagged.categories.contains(&c))
            {
                right_category += 1;
            } else {
                other_category.push(format!(
                    "OTHER CATEGORY [{}] {} (labelled {:?}) fired {:?}",
                    line.split, line.note, line.category, flagged.rules
                ));
            }
        }
    }

    println!(
        "screen corpus: {} benign, {} malicious lines",
        benign.len(),
        malicious.len()
    );
    for (split, c) in by_split
        .iter()
        .chain(std::iter::once((&"all".to_string(), &total)))
    {
        println!(
            "  {split:8} precision {:.3} recall {:.3}  (tp {}, fp {}, tn {}, fn {})",
            c.precision(),
            c.recall(),
            c.true_positive,
            c.false_positive,
            c.true_negative,
            c.false_negative
        );
    }
    println!(
        "  flagged malicious lines whose labelled category fired: {right_category}/{}",
        total.true_positive
    );
    for m in misclassified.iter().chain(&other_category) {
        println!("  {m}");
    }

    // No split may regress: each stays where the rules left it (dev, holdout and fresh before
    // issue 8, fresh2 and fresh3 after the issue 8 rules). Their first measurements, the honest
    // estimates, are in the README.
    for split in ["dev", "holdout", "fresh", "fresh2", "fresh3"] {
        let c = by_split.get(split).copied().unwrap_or_default();
        assert!(
            c.true_positive + c.false_negative > 0 && c.true_negative + c.false_positive > 0,
            "split {split} is empty"
        );
        assert!(
            c.precision() >= 1.0 && c.recall() >= 1.0,
            "split {split} regressed: precision {:.3}, recall {:.3}",
            c.precision(),
            c.recall()
        );
    }
    // fresh4 (issue 25): no benign line may fire; of its 47 malicious lines one is still missed
    // after the issue 25 rules ("you won't need to sign anything except your seed phrase": no
    // ask verb, and the need is four words from the secret). Its first measurement, before the
    // rules changed, is in the README.
    let fresh4 = by_split.get("fresh4").copied().unwrap_or_default();
    assert!(
        fresh4.true_positive + fresh4.false_negative >= 30
            && fresh4.true_negative + fresh4.false_positive >= 30,
        "the fresh4 split needs at least 30 lines of each kind: {fresh4:?}"
    );
    assert!(
        fresh4.false_positive == 0 && fresh4.false_negative <= 1,
        "split fresh4 regressed: {fresh4:?}"
    );
    let fresh2 = by_split.get("fresh2").copied().unwrap_or_default();
    assert!(
        fresh2.true_positive + fresh2.false_negative >= 60
            && fresh2.true_negative + fresh2.false_positive >= 60,
        "the fresh2 split needs at least 60 lines of each kind: {fresh2:?}"
    );
    let fresh3 = by_split.get("fresh3").copied().unwrap_or_default();
    assert!(
        fresh3.true_positive + fresh3.false_negative >= 20
            && fresh3.true_negative + fresh3.false_positive >= 20,
        "the fresh3 split needs at least 20 lines of each kind: {fresh3:?}"
    );
}
