//! The screens (S2, S3, S4): the normaliser (folding, invisible characters, confusables, spacing
//! tricks) and every rule over any text, alone and as several texts of one response.
#![no_main]

use libfuzzer_sys::fuzz_target;
use x402_probe::checks::screen::{
    MAX_FINDINGS_KEPT, MAX_FINDINGS_PER_RULE, MAX_SCREENED_BYTES, SourcedText, screen,
    screen_description, screen_output, screen_secret_asks,
};
use x402_probe_fuzz::assert_conclusion;

/// Longest excerpt a finding shows, in characters: 120 characters of the text, each shown as at
/// most `\u{10ffff}` (10 characters), and the mark of a cut; a decoded note is shorter.
const MAX_EXCERPT_CHARS: usize = 120 * 10 + 1;
/// Largest receipt (conclusion detail) of a screening, whatever the texts.
const MAX_RECEIPT_BYTES: usize = 256 * 1024;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let s = screen(&text);

    assert_eq!(s.truncated, text.len() > MAX_SCREENED_BYTES);
    if s.truncated {
        // Cut at a character boundary at most 3 bytes before the bound.
        assert!(
            s.screened_bytes <= MAX_SCREENED_BYTES && s.screened_bytes + 3 >= MAX_SCREENED_BYTES
        );
    } else {
        assert_eq!(s.screened_bytes, text.len());
    }
    assert!(
        s.findings.len() <= MAX_FINDINGS_KEPT,
        "{} findings kept",
        s.findings.len()
    );
    assert!(s.total >= s.findings.len());
    assert_eq!(s.total, s.by_rule.values().map(|r| r.count).sum::<usize>());
    assert_eq!(s.total == 0, s.is_clean());
    let mut previous_start = 0;
    for f in &s.findings {
        // Spans point into the original text, on character boundaries: the normaliser's map back
        // from folded to original text is exact.
        assert!(f.start < f.end && f.end <= s.screened_bytes, "{f:?}");
        assert!(
            text.get(f.start..f.end).is_some(),
            "span off a character boundary: {f:?}"
        );
        assert!(f.start >= previous_start, "findings out of text order");
        previous_start = f.start;
        assert!(f.excerpt.chars().count() <= MAX_EXCERPT_CHARS, "{f:?}");
        let count = s
            .by_rule
            .get(&f.rule)
            .expect("a kept finding's rule is counted");
        assert_eq!(count.category, f.category);
        let kept = s.findings.iter().filter(|g| g.rule == f.rule).count();
        assert!(
            kept <= MAX_FINDINGS_PER_RULE && kept <= count.count,
            "{}",
            f.rule
        );
    }
    for (rule, count) in &s.by_rule {
        assert!(count.count >= 1, "{rule} counted with no finding");
        // Every rule that fired has its first finding kept while there is room.
        if s.by_rule.len() <= MAX_FINDINGS_KEPT {
            assert!(
                s.findings.iter().any(|f| &f.rule == rule),
                "{rule} has no finding kept"
            );
        }
    }

    // The same text as the texts of one response: split where a NUL was (a fuzzer-friendly
    // separator), as description sources.
    let texts: Vec<SourcedText> = text
        .split('\0')
        .enumerate()
        .map(|(i, t)| SourcedText::new(format!("accepts[{i}].description"), t))
        .collect();
    // One check per input (picked by the length), so that each execution screens the text about
    // twice, not four times: S2 and S3 run the same rules, S4 the rest.
    match data.len() % 3 {
        0 => assert_conclusion("S2", &screen_description(&texts), MAX_RECEIPT_BYTES),
        1 => assert_conclusion("S3", &screen_output(&texts), MAX_RECEIPT_BYTES),
        _ => assert_conclusion("S4", &screen_secret_asks(&texts, &[]), MAX_RECEIPT_BYTES),
    }
});
