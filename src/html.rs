//! Escaping and bounding of every value a page shows (the daemon's pages, the calibration report). Anything that came from an endpoint (a URL,
//! a description, a receipt's detail, a transaction hash it named) is hostile: it is cut to a
//! bound, its control and bidirectional-override characters are shown as escapes (so text cannot
//! reorder or hide what surrounds it), and then it is HTML-escaped for text and attribute context
//! alike.

use std::fmt::Write as _;

/// HTML-escapes `text` for element content and for double- or single-quoted attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    escape_into(&mut out, text);
    out
}

pub(crate) fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// Characters that must not reach a page as themselves: controls (C0, DEL, C1) and the invisible
/// format characters that reorder or hide text (bidi embeddings, overrides and isolates, marks,
/// zero-width characters, the BOM, tag characters).
fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

/// At most `max` characters of `text` (counting an escape as its characters), hidden characters
/// shown as `\u{...}`, with `…` when cut. Not yet HTML-escaped: pass the result to [`escape`].
pub(crate) fn bounded(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut written = 0;
    for c in text.chars() {
        let before = out.len();
        if is_hidden(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
        written += out[before..].chars().count();
        if written > max {
            out.truncate(before);
            out.push('…');
            break;
        }
    }
    out
}

/// [`bounded`] then [`escape`]: the usual way a hostile string reaches a page.
pub(crate) fn text(value: &str, max: usize) -> String {
    escape(&bounded(value, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_quotes_are_escaped() {
        assert_eq!(
            escape(r#"<script>alert("x")</script>&'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"
        );
        assert_eq!(escape("\" onmouseover=\"x"), "&quot; onmouseover=&quot;x");
    }

    #[test]
    fn hidden_characters_are_shown_and_text_is_bounded() {
        assert_eq!(bounded("pay\u{202e}lapyap", 100), "pay\\u{202e}lapyap");
        assert_eq!(bounded("a\u{0}b\u{200b}", 100), "a\\u{0}b\\u{200b}");
        assert_eq!(bounded("abcdef", 3), "abc…");
        assert_eq!(bounded("abc", 3), "abc");
        // An escape counts as what it prints, and is never cut in half.
        assert_eq!(bounded("ab\u{202e}", 5), "ab…");
        assert_eq!(text("<b>\u{202e}</b>", 100), "&lt;b&gt;\\u{202e}&lt;/b&gt;");
    }
}
