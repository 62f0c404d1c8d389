//! Hidden Unicode: characters that change what a model reads without changing what a person sees.
//!
//! Each run of such characters is one finding. Legitimate uses are let through: a zero-width
//! joiner inside an emoji sequence, a zero-width non-joiner between letters of a script that uses
//! it (Persian, Indic), a byte order mark at the very start, one variation selector after a
//! character, and tag characters that spell an emoji subdivision flag.

use std::ops::Range;

/// What kind of hidden character a run is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HiddenKind {
    /// Embeddings, overrides and isolates that reorder what is displayed.
    Bidi,
    /// Zero-width and filler characters.
    ZeroWidth,
    /// Tag characters (U+E0000..U+E007F): invisible ASCII.
    Tag,
    /// Runs of variation selectors: invisible bytes.
    VariationSelector,
}

impl HiddenKind {
    pub fn rule_id(self) -> &'static str {
        match self {
            HiddenKind::Bidi => "unicode.bidi",
            HiddenKind::ZeroWidth => "unicode.zero-width",
            HiddenKind::Tag => "unicode.tag",
            HiddenKind::VariationSelector => "unicode.variation-selector",
        }
    }
}

/// One run of hidden characters in the original text.
pub(super) struct HiddenRun {
    pub kind: HiddenKind,
    pub span: Range<usize>,
    /// For tag runs: the ASCII the tags spell, so the receipt shows the smuggled text.
    pub decoded: Option<String>,
}

fn is_emoji_like(c: char) -> bool {
    matches!(c, '\u{2600}'..='\u{27BF}' | '\u{2B00}'..='\u{2BFF}' | '\u{1F000}'..='\u{1FAFF}'
        | '\u{FE0F}')
}

fn is_cjk(c: char) -> bool {
    matches!(c, '\u{3400}'..='\u{4DBF}' | '\u{4E00}'..='\u{9FFF}' | '\u{F900}'..='\u{FAFF}'
        | '\u{20000}'..='\u{3FFFF}')
}

/// Letters of scripts that join, where a zero-width non-joiner is ordinary spelling.
fn uses_joiners(c: char) -> bool {
    c.is_alphabetic() && !c.is_ascii() && !matches!(c, '\u{00C0}'..='\u{024F}')
}

/// Classify one character given its neighbours; `None` when it is not hidden (or is a legitimate
/// use). `prev`/`next` are the nearest characters that are not themselves of the same kind.
fn classify(c: char, at: usize, prev: Option<char>, next: Option<char>) -> Option<HiddenKind> {
    match c {
        '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{061C}' => Some(HiddenKind::Bidi),
        '\u{FEFF}' if at == 0 => None,
        '\u{200D}' if prev.is_some_and(is_emoji_like) && next.is_some_and(is_emoji_like) => None,
        '\u{200C}' if prev.is_some_and(uses_joiners) && next.is_some_and(uses_joiners) => None,
        '\u{200B}'
        | '\u{200C}'
        | '\u{200D}'
        | '\u{2060}'..='\u{2064}'
        | '\u{FEFF}'
        | '\u{180E}'
        | '\u{115F}'
        | '\u{1160}'
        | '\u{3164}'
        | '\u{FFA0}' => Some(HiddenKind::ZeroWidth),
        '\u{E0000}'..='\u{E007F}' => Some(HiddenKind::Tag),
        '\u{E0100}'..='\u{E01EF}' if !prev.is_some_and(is_cjk) => {
            Some(HiddenKind::VariationSelector)
        }
        _ => None,
    }
}

/// The character starting at byte `at` (a character boundary) of `text`.
fn char_at(text: &str, at: usize) -> Option<char> {
    text.get(at..).and_then(|rest| rest.chars().next())
}

/// Most tag characters decoded into a receipt; a longer run is shown up to here.
const MAX_DECODED_CHARS: usize = 120;

/// Find every run of hidden characters in `text`.
#[cfg(test)]
pub(super) fn hidden_runs(text: &str) -> Vec<HiddenRun> {
    let mut runs = Vec::new();
    each_hidden_run(text, |run| runs.push(run));
    runs
}

/// Hand every run of hidden characters in `text` to `emit`, in order. One pass, a constant amount
/// of work per character and no copy of the text.
pub(super) fn each_hidden_run(text: &str, mut emit: impl FnMut(HiddenRun)) {
    let mut at = 0;
    while let Some(c) = char_at(text, at) {
        let next_at = at + c.len_utf8();
        let prev = text[..at].chars().next_back();
        let Some(kind) = classify(c, at, prev, char_at(text, next_at)) else {
            at = next_at;
            continue;
        };
        let mut end = next_at;
        let mut before = c;
        while let Some(c_next) = char_at(text, end) {
            let after = char_at(text, end + c_next.len_utf8());
            if classify(c_next, end, Some(before), after) != Some(kind) {
                break;
            }
            before = c_next;
            end += c_next.len_utf8();
        }
        let span = at..end;
        at = end;
        let run = &text[span.clone()];
        if kind == HiddenKind::Tag && is_subdivision_flag(prev, run) {
            continue;
        }
        // Two variation selectors in a row carry data; one after a character is normal style.
        if kind == HiddenKind::VariationSelector && run.len() <= 4 {
            continue;
        }
        let decoded = (kind == HiddenKind::Tag).then(|| {
            run.chars()
                .filter_map(|t| {
                    let ascii = u32::from(t) - 0xE0000;
                    char::from_u32(ascii).filter(|a| a.is_ascii_graphic() || *a == ' ')
                })
                .take(MAX_DECODED_CHARS)
                .collect()
        });
        emit(HiddenRun {
            kind,
            span,
            decoded,
        });
    }
}

/// `🏴` followed by lower-case tag letters and a cancel tag is a flag such as Scotland's.
fn is_subdivision_flag(prev: Option<char>, run: &str) -> bool {
    prev == Some('\u{1F3F4}')
        && run.ends_with('\u{E007F}')
        && run.chars().all(
            |t| matches!(t, '\u{E0030}'..='\u{E0039}' | '\u{E0061}'..='\u{E007A}' | '\u{E007F}'),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<HiddenKind> {
        hidden_runs(text).into_iter().map(|r| r.kind).collect()
    }

    #[test]
    fn finds_zero_width_runs_as_one_finding() {
        let runs = hidden_runs("a\u{200b}\u{200b}\u{200b}b");
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].kind, HiddenKind::ZeroWidth);
        assert_eq!(runs[0].span, 1..10);
    }

    #[test]
    fn finds_bidi_controls() {
        assert_eq!(
            kinds("x \u{202e}abc\u{202c} y"),
            vec![HiddenKind::Bidi, HiddenKind::Bidi]
        );
        assert_eq!(
            kinds("\u{2066}x\u{2069}"),
            vec![HiddenKind::Bidi, HiddenKind::Bidi]
        );
    }

    #[test]
    fn decodes_tag_characters() {
        let smuggled: String = "hi there"
            .chars()
            .map(|c| char::from_u32(0xE0000 + c as u32).unwrap())
            .collect();
        let runs = hidden_runs(&format!("ok{smuggled}"));
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].decoded.as_deref(), Some("hi there"));
    }

    #[test]
    fn lets_legitimate_uses_through() {
        // Family emoji joined by ZWJ, Persian with ZWNJ, a leading BOM, Scotland's flag.
        assert!(kinds("\u{1F468}\u{200d}\u{1F469}\u{200d}\u{1F467}").is_empty());
        assert!(kinds("می\u{200c}خواهم").is_empty());
        assert!(kinds("\u{feff}hello").is_empty());
        assert!(
            kinds("\u{1F3F4}\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F}").is_empty()
        );
        assert!(kinds("\u{2764}\u{fe0f}").is_empty());
    }

    #[test]
    fn zero_width_joiner_between_latin_letters_is_hidden() {
        assert_eq!(kinds("pay\u{200d}load"), vec![HiddenKind::ZeroWidth]);
        assert_eq!(kinds("a\u{feff}b"), vec![HiddenKind::ZeroWidth]);
    }
}
