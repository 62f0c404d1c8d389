//! Normalisation before matching, with a map back to the original bytes.
//!
//! Rules match on a folded copy of the text, but a receipt must name the bytes the subject
//! actually published. So every byte of the folded copy remembers the byte range of the original
//! character (with its combining marks) it came from.
//!
//! What is folded, each in one linear pass (the work per character is bounded):
//! - HTML character references are read as the character they stand for, once, as a browser or
//!   an agent reading HTML would (`&#73;gnore`, `&#x49;`, `&nbsp;` between words, `&iacute;`):
//!   numeric ones with or without the semicolon, named ones with it (a few common ones without);
//!   the span of the decoded character is the whole reference;
//! - invisible characters (zero-width, soft hyphen, bidi controls, tags, variation selectors) are
//!   dropped, so `ig\u{200b}nore` and `ig\u{ad}nore` read as `ignore`;
//! - compatibility forms (NFKD, then the base letters kept when they are ASCII): fullwidth,
//!   mathematical, circled and styled letters, ligatures, and Latin diacritics (`précédentes`);
//! - combining marks after an ASCII character are dropped (`i̵g̵n̵o̵r̵e̵`), after any other letter
//!   they are composed with it when Unicode has the composed letter (`и` + breve is `й`), and past
//!   [`MAX_MARKS_PER_BASE`] on one character they are dropped (a stack that high shows nothing);
//! - case, with the letters that case folding leaves apart read as the Latin letter they show:
//!   dotless `ı`, small capitals (`ᴇɴᴛᴇʀ`), `ɡ`, `ɑ`, `ø`, `ł` and the like;
//! - typographic quotes and dashes, `ß`;
//! - letters spelled out one by one (`i g n o r e`, `i.g.n.o.r.e`, one letter per line): the most
//!   common gap inside such a run is dropped and any longer gap becomes a word break;
//! - Cyrillic, Greek and Armenian letters that look like Latin ones, inside words that mix them with
//!   Latin letters (reported as `unicode.mixed-script`) and in whole words of lookalikes next to
//!   Latin words (`private кеу`); a Russian or Greek sentence keeps its letters;
//! - whitespace runs become one space.
//!
//! A second, looser view serves the rules about words: leetspeak digits inside words read as
//! letters (`1gn0r3`), and dots, hyphens, underscores and asterisks between two letters removed
//! (`ig.no.re`). It would spoil addresses and commands, so the other rules never see it.

use std::collections::HashMap;
use std::ops::Range;

use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::{compose, decompose_compatible, is_combining_mark};

/// Combining marks kept or composed on one character; the rest are dropped before matching.
pub(super) const MAX_MARKS_PER_BASE: usize = 4;

/// A folded copy of a text and, for each of its bytes, the original bytes it came from.
pub(super) struct Normalised {
    pub text: String,
    /// `origin[i]` is the byte range, in the original, of the character that produced byte `i`.
    origin: Vec<(u32, u32)>,
    /// Words that mix Latin letters with Cyrillic, Greek or Armenian lookalikes (original bytes).
    pub mixed_script_words: Vec<Range<usize>>,
    /// HTML character references to an invisible character (zero-width, bidi, tags; not the soft
    /// hyphen, which hyphenation uses), in original bytes: hidden text spelled so that the
    /// hidden-text rules, which read the characters as published, do not see it.
    pub invisible_references: Vec<Range<usize>>,
}

impl Normalised {
    /// The original byte range that produced the folded bytes `folded` (a non-empty range).
    pub fn original_span(&self, folded: Range<usize>) -> Range<usize> {
        if folded.is_empty() || folded.end > self.origin.len() {
            return 0..0;
        }
        self.origin[folded.start].0 as usize..self.origin[folded.end - 1].1 as usize
    }
}

/// The looser view of a [`Normalised`] text: byte `i` of `text` comes from byte `to_plain[i]` of
/// the plain view.
pub(super) struct Loose {
    pub text: String,
    to_plain: Vec<u32>,
}

impl Loose {
    /// The plain view's byte range for the loose bytes `loose` (a non-empty range).
    pub fn plain_span(&self, loose: Range<usize>) -> Range<usize> {
        if loose.is_empty() || loose.end > self.to_plain.len() {
            return 0..0;
        }
        self.to_plain[loose.start] as usize..self.to_plain[loose.end - 1] as usize + 1
    }
}

/// Characters that render as nothing (or nearly nothing): they are dropped before matching so
/// that `ig\u{200b}nore` reads as `ignore`. The hidden-text rules report them separately.
pub(super) fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{180E}'
        | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{206F}'
        | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}'
        | '\u{E0000}'..='\u{E007F}' | '\u{E0100}'..='\u{E01EF}')
}

/// Cyrillic, Greek and Armenian letters (lower case) that look like a Latin letter.
fn latin_lookalike(c: char) -> Option<char> {
    Some(match c {
        'а' | 'α' => 'a',
        'в' | 'β' | 'ь' => 'b',
        'с' | 'ϲ' => 'c',
        'ԁ' => 'd',
        'е' | 'ё' | 'ε' => 'e',
        'һ' | 'н' | 'հ' => 'h',
        'і' | 'ї' | 'ι' | 'ӏ' => 'i',
        'ј' | 'ϳ' => 'j',
        'к' | 'κ' => 'k',
        'м' => 'm',
        'η' | 'ո' => 'n',
        'о' | 'ο' | 'σ' | 'օ' => 'o',
        'р' | 'ρ' => 'p',
        'ԛ' | 'զ' => 'q',
        'ѕ' | 'ς' => 's',
        'т' | 'τ' => 't',
        'υ' | 'ս' => 'u',
        'ν' | 'ѵ' => 'v',
        'ԝ' | 'ѡ' => 'w',
        'х' | 'χ' => 'x',
        'у' | 'γ' | 'ү' => 'y',
        _ => return None,
    })
}

fn is_lookalike_script(c: char) -> bool {
    matches!(c, '\u{0370}'..='\u{03FF}' | '\u{0400}'..='\u{052F}' | '\u{0530}'..='\u{058F}')
}

/// Latin letters (lower case) that case folding and NFKD leave apart from the letter they show:
/// dotless i, small capitals, IPA forms, stroked letters. Always folded: they are Latin script.
fn latin_variant(c: char) -> Option<&'static str> {
    Some(match c {
        'ı' | 'ɪ' | 'ɩ' | 'ɨ' => "i",
        'ȷ' | 'ᴊ' => "j",
        'ɑ' | 'ᴀ' => "a",
        'ʙ' | 'ƀ' => "b",
        'ᴄ' => "c",
        'ᴅ' | 'đ' => "d",
        'ᴇ' | 'ɇ' => "e",
        'ꜰ' => "f",
        'ɡ' | 'ɢ' => "g",
        'ʜ' | 'ħ' => "h",
        'ᴋ' => "k",
        'ʟ' | 'ł' => "l",
        'ᴍ' => "m",
        'ɴ' => "n",
        'ᴏ' | 'ø' | 'ɵ' => "o",
        'ᴘ' => "p",
        'ꞯ' => "q",
        'ʀ' => "r",
        'ꜱ' => "s",
        'ᴛ' | 'ŧ' => "t",
        'ᴜ' | 'ʉ' => "u",
        'ᴠ' | 'ʋ' => "v",
        'ᴡ' => "w",
        'ʏ' => "y",
        'ᴢ' => "z",
        'ß' => "ss",
        'æ' => "ae",
        'œ' => "oe",
        _ => return None,
    })
}

/// Digits and symbols that stand for letters in leetspeak.
fn leet_letter(c: u8) -> Option<u8> {
    Some(match c {
        b'0' => b'o',
        b'1' => b'i',
        b'3' => b'e',
        b'4' => b'a',
        b'5' => b's',
        b'7' => b't',
        b'@' => b'a',
        b'$' => b's',
        _ => return None,
    })
}

/// Punctuation with many spellings folded to one, so that rules can write `don't` once.
fn fold_punctuation(c: char) -> char {
    match c {
        '\u{2018}' | '\u{2019}' | '\u{201B}' | '\u{02BC}' | '\u{2032}' | '`' | '\u{00B4}' => '\'',
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{00AB}' | '\u{00BB}' => '"',
        '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
        other => other,
    }
}

/// One folded character and the original bytes it came from.
#[derive(Clone, Copy)]
struct Folded {
    c: char,
    from: (u32, u32),
}

/// The first pass: characters folded one by one.
struct Folder {
    out: Vec<Folded>,
    /// Scratch space for one character's decomposition (reused: no allocation per character).
    parts: Vec<char>,
    /// Combining marks seen on the current base character.
    marks: usize,
}

impl Folder {
    fn push_lower(&mut self, c: char, from: (u32, u32)) {
        let c = fold_punctuation(c);
        if c.is_ascii() {
            self.out.push(Folded {
                c: c.to_ascii_lowercase(),
                from,
            });
            return;
        }
        for lower in c.to_lowercase() {
            match latin_variant(lower) {
                Some(latin) => self.out.extend(latin.chars().map(|c| Folded { c, from })),
                None => self.out.push(Folded { c: lower, from }),
            }
        }
    }

    /// A combining mark: dropped after ASCII, composed with its base when Unicode has the letter,
    /// kept otherwise; in every case the base's origin grows to cover it.
    fn push_mark(&mut self, mark: char, from: (u32, u32)) {
        self.marks += 1;
        let Some(last) = self.out.last_mut() else {
            return;
        };
        // Marks that follow the base directly extend the base's span, so a receipt shows them.
        if last.from.1 == from.0 {
            last.from.1 = from.1;
        }
        if last.c.is_ascii() || self.marks > MAX_MARKS_PER_BASE {
            return;
        }
        if let Some(composed) = compose(last.c, mark) {
            last.c = composed;
            return;
        }
        let from = last.from;
        self.out.push(Folded { c: mark, from });
    }

    fn push(&mut self, c: char, from: (u32, u32)) {
        if is_invisible(c) {
            return;
        }
        if c.is_ascii() {
            self.marks = 0;
            self.push_lower(c, from);
            return;
        }
        if is_combining_mark(c) {
            self.push_mark(c, from);
            return;
        }
        self.marks = 0;
        self.parts.clear();
        decompose_compatible(c, |d| self.parts.push(d));
        if self.parts.len() == 1 && self.parts[0] == c {
            self.push_lower(c, from);
            return;
        }
        // Latin letters lose their diacritics and styled forms their style (`é`, `𝐢`, `ｉ` read
        // as `e`, `i`, `i`); other scripts keep their marks, because there the mark can change
        // the letter (Cyrillic `й` is not `и`), and take their compatibility form (NFKC).
        let ascii_base = self
            .parts
            .iter()
            .filter(|d| !is_combining_mark(**d))
            .all(char::is_ascii)
            && self.parts.iter().any(|d| !is_combining_mark(*d));
        if ascii_base {
            for i in 0..self.parts.len() {
                let d = self.parts[i];
                if !is_combining_mark(d) {
                    self.push_lower(d, from);
                }
            }
        } else {
            for composed in std::iter::once(c).nfkc() {
                self.push_lower(composed, from);
            }
        }
    }
}

/// The longest HTML character reference read (`&#x10FFFF;`, `&ZeroWidthSpace;` and the like).
const MAX_REFERENCE_BYTES: usize = 20;

/// Named references read without their semicolon too, as browsers read them in text.
const LEGACY_NAMES: &[&str] = &["nbsp", "amp", "lt", "gt", "quot", "shy", "copy", "reg"];

/// Named references that stand for one character (besides the accented letters, see
/// [`accented`]): spaces and invisible characters first, which a disguise uses most.
fn named_reference(name: &str) -> Option<char> {
    Some(match name {
        "nbsp" | "NonBreakingSpace" => '\u{A0}',
        "ensp" => '\u{2002}',
        "emsp" => '\u{2003}',
        "emsp13" => '\u{2004}',
        "emsp14" => '\u{2005}',
        "numsp" => '\u{2007}',
        "puncsp" => '\u{2008}',
        "thinsp" | "ThinSpace" => '\u{2009}',
        "hairsp" | "VeryThinSpace" => '\u{200A}',
        "ZeroWidthSpace" | "NegativeThinSpace" | "NegativeMediumSpace" => '\u{200B}',
        "zwnj" => '\u{200C}',
        "zwj" => '\u{200D}',
        "lrm" => '\u{200E}',
        "rlm" => '\u{200F}',
        "NoBreak" | "NoBreakSpace" => '\u{2060}',
        "shy" => '\u{AD}',
        "Tab" => '\t',
        "NewLine" => '\n',
        "amp" | "AMP" => '&',
        "lt" | "LT" => '<',
        "gt" | "GT" => '>',
        "quot" | "QUOT" => '"',
        "apos" => '\'',
        "lsquo" | "rsquo" | "sbquo" => '\'',
        "ldquo" | "rdquo" | "bdquo" | "laquo" | "raquo" => '"',
        "hyphen" | "dash" | "ndash" | "mdash" | "minus" => '-',
        "hellip" => '…',
        "period" => '.',
        "comma" => ',',
        "colon" => ':',
        "semi" => ';',
        "excl" => '!',
        "quest" => '?',
        "num" => '#',
        "dollar" => '$',
        "percnt" => '%',
        "lpar" => '(',
        "rpar" => ')',
        "ast" | "midast" => '*',
        "plus" => '+',
        "sol" => '/',
        "bsol" => '\\',
        "lowbar" => '_',
        "verbar" | "vert" => '|',
        "commat" => '@',
        "equals" => '=',
        "middot" => '·',
        "bull" => '•',
        "szlig" => 'ß',
        "aelig" => 'æ',
        "AElig" => 'Æ',
        "oslash" => 'ø',
        "Oslash" => 'Ø',
        "copy" => '©',
        "reg" => '®',
        "deg" => '°',
        "times" => '×',
        "divide" => '÷',
        "euro" => '€',
        "pound" => '£',
        "rarr" => '→',
        "larr" => '←',
        _ => return None,
    })
}

/// `&iacute;`, `&Ccedil;`, `&ntilde;`...: a letter and the name of its mark, composed.
fn accented(name: &str) -> Option<char> {
    let mut chars = name.chars();
    let base = chars.next().filter(char::is_ascii_alphabetic)?;
    let mark = match chars.as_str() {
        "grave" => '\u{300}',
        "acute" => '\u{301}',
        "circ" => '\u{302}',
        "tilde" => '\u{303}',
        "macr" => '\u{304}',
        "breve" => '\u{306}',
        "dot" => '\u{307}',
        "uml" => '\u{308}',
        "ring" => '\u{30A}',
        "dblac" => '\u{30B}',
        "caron" => '\u{30C}',
        "cedil" => '\u{327}',
        "ogon" => '\u{328}',
        _ => return None,
    };
    compose(base, mark)
}

/// The HTML character reference at the start of `text` (which starts with `&`): the character it
/// stands for and its length in bytes. Bounded: at most [`MAX_REFERENCE_BYTES`] bytes are read.
fn char_reference(text: &str) -> Option<(char, usize)> {
    let bytes = &text.as_bytes()[..text.len().min(MAX_REFERENCE_BYTES)];
    if bytes.get(1) == Some(&b'#') {
        let (radix, digits_at) = match bytes.get(2) {
            Some(b'x' | b'X') => (16, 3),
            _ => (10, 2),
        };
        let digits = bytes[digits_at..]
            .iter()
            .take_while(|b| b.is_ascii_digit() || (radix == 16 && b.is_ascii_hexdigit()))
            .count();
        let end = digits_at + digits;
        // No digits, or more than any code point has (or than was read): not a reference read here.
        if digits == 0 || digits > 7 || end >= MAX_REFERENCE_BYTES {
            return None;
        }
        let value = u32::from_str_radix(text.get(digits_at..end)?, radix).ok()?;
        let c = char::from_u32(value).filter(|c| *c != '\0')?;
        let len = if bytes.get(end) == Some(&b';') {
            end + 1
        } else {
            end
        };
        return Some((c, len));
    }
    let name_len = bytes[1..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric())
        .count();
    let name = text.get(1..1 + name_len)?;
    if bytes.get(1 + name_len) == Some(&b';') {
        let c = named_reference(name).or_else(|| accented(name))?;
        return Some((c, name_len + 2));
    }
    // Without the semicolon: the longest legacy name the text starts with.
    LEGACY_NAMES
        .iter()
        .filter(|legacy| name.starts_with(*legacy))
        .max_by_key(|legacy| legacy.len())
        .and_then(|legacy| Some((named_reference(legacy)?, legacy.len() + 1)))
}

/// What may stand between two letters spelled out one by one.
fn is_letter_gap(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '-' | '.' | '_' | '*' | '\u{00B7}' | '\u{2022}' | '/' | '|'
        )
}

/// Longest gap between two spelled-out letters.
const MAX_LETTER_GAP: usize = 3;

/// Join words spelled out as separate letters (`i-g-n-o-r-e`, `i g n o r e   a l l`): at least
/// four single letters, each gap one to three gap characters. Inside such a run the most common
/// gap (the shortest on a tie) is dropped, and any other gap becomes one space.
fn join_spelled_out_letters(chars: &mut Vec<Folded>) {
    let n = chars.len();
    let single_letter = |chars: &[Folded], i: usize| {
        chars[i].c.is_alphabetic()
            && (i == 0 || !chars[i - 1].c.is_alphanumeric())
            && chars
                .get(i + 1)
                .is_none_or(|next| !next.c.is_alphanumeric())
    };
    // What to do with each character: keep it, drop it, or turn it into a space.
    #[derive(Clone, Copy, PartialEq)]
    enum Fate {
        Keep,
        Drop,
        Space,
    }
    let mut fate = vec![Fate::Keep; n];
    // The gap after the single letter at `letter`, when another single letter follows it.
    let gap_after = |letter: usize| {
        let start = letter + 1;
        let mut end = start;
        while end < n && end - start < MAX_LETTER_GAP && is_letter_gap(chars[end].c) {
            end += 1;
        }
        (end > start && end < n && single_letter(chars, end)).then_some(start..end)
    };
    // A gap's shape: its characters, padded.
    let shape = |gap: &Range<usize>| {
        let mut key = ['\0'; MAX_LETTER_GAP];
        for (slot, f) in key.iter_mut().zip(&chars[gap.clone()]) {
            *slot = f.c;
        }
        key
    };
    // Shape -> (count, length, first index): a handful of shapes per run.
    let mut counts: HashMap<[char; MAX_LETTER_GAP], (usize, usize, usize)> = HashMap::new();
    let mut i = 0;
    while i < n {
        if !single_letter(chars, i) {
            i += 1;
            continue;
        }
        // Two passes over the run, nothing stored per gap: count the gaps' shapes, then decide.
        counts.clear();
        let mut last = i;
        let mut gaps = 0;
        while let Some(gap) = gap_after(last) {
            counts.entry(shape(&gap)).or_insert((0, gap.len(), gaps)).0 += 1;
            gaps += 1;
            last = gap.end;
        }
        if gaps >= 3 {
            // The gap inside words: the most common shape, the shortest on a tie, the first on a
            // tie of both. Any other gap is a word break.
            let inner = counts
                .iter()
                .min_by_key(|(_, (count, len, first))| (std::cmp::Reverse(*count), *len, *first))
                .map(|(key, _)| *key);
            let mut letter = i;
            while letter < last {
                let Some(gap) = gap_after(letter) else {
                    break;
                };
                let word_gap = Some(shape(&gap)) != inner;
                for (offset, at) in gap.clone().enumerate() {
                    fate[at] = if word_gap && offset == 0 {
                        Fate::Space
                    } else {
                        Fate::Drop
                    };
                }
                letter = gap.end;
            }
        }
        i = last + 1;
    }
    let mut index = 0;
    chars.retain_mut(|f| {
        let keep = match fate[index] {
            Fate::Keep => true,
            Fate::Drop => false,
            Fate::Space => {
                f.c = ' ';
                true
            }
        };
        index += 1;
        keep
    });
}

/// How a word's letters read.
#[derive(Clone, Copy, PartialEq)]
enum WordScript {
    /// Latin letters only (after folding), or digits and symbols.
    Latin,
    /// Latin letters and lookalikes from another script: a disguise.
    Mixed,
    /// Only letters that look like Latin ones, from another script (`кеу`, or Russian `все`).
    LookalikesOnly,
    /// Another script with letters of its own (Russian, Greek, CJK...).
    Other,
}

/// Rewrite lookalike letters inside words that mix scripts, and inside whole words of lookalikes
/// that stand next to Latin words.
fn fold_lookalikes(chars: &mut [Folded], mixed: &mut Vec<Range<usize>>) {
    // (start, end, script) per word, compact: a text of short words has many of them.
    let mut words: Vec<(u32, u32, WordScript)> = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        if !chars[start].c.is_alphanumeric() {
            start += 1;
            continue;
        }
        let mut end = start;
        let (mut latin, mut lookalike, mut other) = (0usize, 0usize, 0usize);
        while end < chars.len() && chars[end].c.is_alphanumeric() {
            let c = chars[end].c;
            if c.is_ascii_alphabetic() {
                latin += 1;
            } else if is_lookalike_script(c) && latin_lookalike(c).is_some() {
                lookalike += 1;
            } else if c.is_alphabetic() {
                other += 1;
            }
            end += 1;
        }
        // Latin letters and lookalikes: two Latin letters at least, or one with nothing but
        // lookalikes around it; a lone letter next to a symbol (`ÅΩ`, `kΩ`) is not a disguise,
        // nor a stray Latin letter in a Russian word (`cпасибо`).
        let disguised =
            lookalike > 0 && (latin >= 2 || (latin == 1 && other == 0 && latin + lookalike >= 3));
        let script = if disguised {
            WordScript::Mixed
        } else if lookalike >= 2 && latin == 0 && other == 0 {
            WordScript::LookalikesOnly
        } else if other > 0 || lookalike > 0 {
            WordScript::Other
        } else {
            WordScript::Latin
        };
        // Texts are at most a few MiB (the screen's byte bound), far below u32::MAX.
        words.push((start as u32, end as u32, script));
        start = end;
    }
    // A word of lookalikes only is read as Latin when a neighbour is Latin (or is read so).
    let mut as_latin: Vec<bool> = words
        .iter()
        .map(|(_, _, s)| matches!(s, WordScript::Latin | WordScript::Mixed))
        .collect();
    let reads_latin = |script: WordScript, neighbour: Option<bool>| {
        script == WordScript::LookalikesOnly && neighbour == Some(true)
    };
    for k in 1..words.len() {
        if reads_latin(words[k].2, Some(as_latin[k - 1])) {
            as_latin[k] = true;
        }
    }
    for k in (0..words.len().saturating_sub(1)).rev() {
        if reads_latin(words[k].2, Some(as_latin[k + 1])) {
            as_latin[k] = true;
        }
    }
    for (k, (start, end, script)) in words.into_iter().enumerate() {
        let range = start as usize..end as usize;
        let fold = match script {
            WordScript::Mixed => {
                mixed
                    .push(chars[range.start].from.0 as usize..chars[range.end - 1].from.1 as usize);
                true
            }
            WordScript::LookalikesOnly => as_latin[k],
            WordScript::Latin | WordScript::Other => false,
        };
        if fold {
            for f in &mut chars[range] {
                if is_lookalike_script(f.c)
                    && let Some(latin) = latin_lookalike(f.c)
                {
                    f.c = latin;
                }
            }
        }
    }
}

/// Fold `original` for matching (see the module documentation).
pub(super) fn normalise(original: &str) -> Normalised {
    let mut folder = Folder {
        out: Vec::with_capacity(original.len()),
        parts: Vec::with_capacity(18),
        marks: 0,
    };
    let mut invisible_references = Vec::new();
    let mut chars = original.char_indices();
    while let Some((at, c)) = chars.next() {
        // Texts are at most a few MiB (the screen's byte bound), far below u32::MAX.
        if c == '&'
            && let Some((decoded, len)) = char_reference(&original[at..])
        {
            if is_invisible(decoded) && decoded != '\u{AD}' {
                invisible_references.push(at..at + len);
            }
            folder.push(decoded, (at as u32, (at + len) as u32));
            // A reference is ASCII: skip its other bytes, one character each.
            for _ in 1..len {
                chars.next();
            }
            continue;
        }
        let from = (at as u32, (at + c.len_utf8()) as u32);
        folder.push(c, from);
    }
    let mut chars = folder.out;
    join_spelled_out_letters(&mut chars);
    let mut mixed_script_words = Vec::new();
    fold_lookalikes(&mut chars, &mut mixed_script_words);

    let mut text = String::with_capacity(original.len());
    let mut origin = Vec::with_capacity(original.len());
    let mut pending_space: Option<(u32, u32)> = None;
    for f in chars {
        if f.c.is_whitespace() {
            // A run of whitespace becomes one space, attributed to the run's first character.
            pending_space.get_or_insert(f.from);
            continue;
        }
        if let Some(space) = pending_space.take()
            && !text.is_empty()
        {
            text.push(' ');
            origin.push(space);
        }
        let mut buf = [0u8; 4];
        let encoded = f.c.encode_utf8(&mut buf);
        text.push_str(encoded);
        origin.extend(std::iter::repeat_n(f.from, encoded.len()));
    }
    Normalised {
        text,
        origin,
        mixed_script_words,
        invisible_references,
    }
}

/// Punctuation removed between two letters in the loose view.
fn is_joiner_punctuation(b: u8) -> bool {
    matches!(b, b'.' | b'-' | b'_' | b'*')
}

/// The loose view of a plain view (leetspeak read as letters inside words that have two Latin
/// letters, punctuation between two letters removed), or `None` when it would be the same text.
pub(super) fn loosen(plain: &Normalised) -> Option<Loose> {
    let bytes = plain.text.as_bytes();
    let is_word_byte = |b: u8| b.is_ascii_alphanumeric() || b == b'@' || b == b'$';
    // First the leet substitution, byte for byte (every substitution is ASCII for ASCII).
    let mut leet = bytes.to_vec();
    let mut start = 0;
    while start < bytes.len() {
        if !is_word_byte(bytes[start]) {
            start += 1;
            continue;
        }
        let mut end = start;
        while end < bytes.len() && is_word_byte(bytes[end]) {
            end += 1;
        }
        let word = &bytes[start..end];
        let latin = word.iter().filter(|b| b.is_ascii_alphabetic()).count();
        if latin >= 2 && word.iter().any(|b| leet_letter(*b).is_some()) {
            for (k, b) in word.iter().enumerate() {
                if let Some(letter) = leet_letter(*b) {
                    leet[start + k] = letter;
                }
            }
        }
        start = end;
    }
    // Then the punctuation between two letters.
    let mut text = Vec::with_capacity(leet.len());
    let mut to_plain = Vec::with_capacity(leet.len());
    for (i, &b) in leet.iter().enumerate() {
        let between_letters = is_joiner_punctuation(b)
            && i > 0
            && leet[i - 1].is_ascii_alphabetic()
            && leet.get(i + 1).is_some_and(u8::is_ascii_alphabetic);
        if !between_letters {
            text.push(b);
            to_plain.push(i as u32);
        }
    }
    if text == bytes {
        return None;
    }
    // Only ASCII bytes were changed or removed, and never inside a multi-byte character.
    let text = String::from_utf8(text).ok()?;
    Some(Loose { text, to_plain })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(text: &str) -> String {
        normalise(text).text
    }

    fn loose(text: &str) -> String {
        let plain = normalise(text);
        loosen(&plain).map_or(plain.text, |l| l.text)
    }

    #[test]
    fn folds_case_width_diacritics_and_whitespace() {
        assert_eq!(
            fold("  IGNORE\t\tＡll  Précédentes "),
            "ignore all precedentes"
        );
    }

    #[test]
    fn reads_html_character_references() {
        assert_eq!(fold("&#73;gnore &#x70;rior"), "ignore prior");
        assert_eq!(fold("&#73gnore all"), "ignore all");
        assert_eq!(fold("please&nbsp;enter&ensp;your"), "please enter your");
        assert_eq!(
            fold("&Iacute;gnore caf&eacute; &Ccedil;a"),
            "ignore cafe ca"
        );
        assert_eq!(fold("ig&shy;nore a&#8203;b"), "ignore ab");
        assert_eq!(fold("&lt;b&gt; &amp; &ampx &nbspx"), "<b> & &x x");
        // Not references: unknown names, no digits, too long, zero, a surrogate; left as written.
        assert_eq!(
            fold("AT&T &foo; &#; &#x; &#12345678; &#0; &#xD800;"),
            "at&t &foo; &#; &#x; &#12345678; &#0; &#xd800;"
        );
        // A decoded character's span is its whole reference.
        let original = "x &#x49;gnore";
        let n = normalise(original);
        assert_eq!(n.text, "x ignore");
        assert_eq!(&original[n.original_span(2..8)], "&#x49;gnore");
    }

    #[test]
    fn drops_invisible_characters_and_maps_spans_back() {
        let original = "x ig\u{200b}nore y";
        let n = normalise(original);
        assert_eq!(n.text, "x ignore y");
        let at = n.text.find("ignore").expect("folded word");
        let span = n.original_span(at..at + "ignore".len());
        assert_eq!(&original[span], "ig\u{200b}nore");
    }

    #[test]
    fn folds_lookalikes_in_mixed_script_words() {
        let n = normalise("\u{0406}gn\u{043e}r\u{0435} эти правила");
        assert_eq!(n.text, "ignore эти правила");
        assert_eq!(n.mixed_script_words.len(), 1);
    }

    #[test]
    fn folds_whole_lookalike_words_next_to_latin_words_only() {
        assert_eq!(
            fold("your private \u{043a}\u{0435}\u{0443} now"),
            "your private key now"
        );
        // A chain of lookalike words next to a Latin one.
        assert_eq!(
            fold("send \u{0443}\u{043e}\u{0443} \u{0455}\u{0435}\u{0435}\u{0501}"),
            "send yoy seed"
        );
        // Russian keeps its letters, even the words made of lookalikes only.
        assert_eq!(fold("все сообщения"), "все сообщения");
        assert_eq!(fold("Игнорируй"), "игнорируй");
        assert_eq!(
            fold(
                "\u{03a1}r\u{043e}v\u{0456}d\u{0435} \u{0443}\u{043e}\u{0443}r \u{0455}\u{0435}\u{0435}\u{0501} \u{0440}\u{04bb}r\u{0430}\u{0455}\u{0435}"
            ),
            "provide yoyr seed phrase"
        );
    }

    #[test]
    fn folds_case_tricks_and_styled_letters() {
        assert_eq!(fold("\u{0131}gnore prev\u{0131}ous"), "ignore previous");
        assert_eq!(fold("\u{0130}GNORE"), "ignore");
        assert_eq!(fold("ᴇɴᴛᴇʀ ʏᴏᴜʀ ꜱᴇᴇᴅ"), "enter your seed");
        assert_eq!(fold("𝐏𝐚𝐬𝐭𝐞 ⓚⓔⓨ 𝘐𝘨𝘯𝘰𝘳𝘦"), "paste key ignore");
        assert_eq!(fold("Don’t Straße"), "don't strasse");
    }

    #[test]
    fn drops_combining_marks_on_ascii_and_composes_others() {
        assert_eq!(fold("Igno\u{0308}re previo\u{0301}us"), "ignore previous");
        assert_eq!(fold("i\u{0332}g\u{0332} \u{0332}x"), "ig x");
        assert_eq!(fold("и\u{0306}"), "й");
        // A stack of marks costs nothing past the bound and keeps the span whole.
        let zalgo = format!("a{}b", "\u{0301}".repeat(1000));
        let n = normalise(&zalgo);
        assert_eq!(n.text, "ab");
        assert_eq!(n.original_span(0..1), 0..2001);
        let cyrillic = format!("и{}", "\u{0301}".repeat(1000));
        assert!(normalise(&cyrillic).text.chars().count() <= 1 + MAX_MARKS_PER_BASE);
    }

    #[test]
    fn joins_spelled_out_letters() {
        assert_eq!(fold("I-g-n-o-r-e all"), "ignore all");
        assert_eq!(fold("s e n d funds"), "send funds");
        assert_eq!(fold("i g n o r e   a l l   r u l e s"), "ignore all rules");
        assert_eq!(fold("s.e.e.d p.h.r.a.s.e"), "seed phrase");
        assert_eq!(fold("i\ng\nn\no\nr\ne all"), "ignore all");
        assert_eq!(fold("I-G-N-O-R-E / P-R-E-V"), "ignore prev");
        assert_eq!(
            fold("U.S. and E.U. rates, a b c"),
            "u.s. and e.u. rates, a b c"
        );
    }

    #[test]
    fn loose_view_reads_leet_and_joins_split_words() {
        assert_eq!(loose("1gn0r3 4ll 2024"), "ignore all 2024");
        assert_eq!(fold("1gn0r3 4ll"), "1gn0r3 4ll");
        assert_eq!(loose("Ig.no.re prev.ious"), "ignore previous");
        assert!(loosen(&normalise("plain words")).is_none());
        let plain = normalise("x ig.no.re");
        let l = loosen(&plain).expect("differs");
        let at = l.text.find("ignore").expect("joined");
        let span = plain.original_span(l.plain_span(at..at + 6));
        assert_eq!(span, 2..10);
    }
}
