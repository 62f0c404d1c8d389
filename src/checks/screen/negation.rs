//! Whether a matched ask for a secret is really an ask to the reader.
//!
//! A negation cancels an ask only when it scopes the ask itself:
//! - it governs the ask's verb: the negation, then nothing but auxiliaries, pronouns and adverbs
//!   ("we will never ask you to enter", "do not share", "no need to paste"), or another verb joined
//!   by "or" ("never store or share"), up to the verb;
//! - it governs the secret: the negation, then nothing but determiners and at most one other word,
//!   up to the noun ("not a private key", "without your seed phrase", "no API key needed"); or,
//!   when the noun comes first, a negation between the noun and the need ("API key not
//!   required", "your seed phrase is never needed").
//!
//! Both look only inside the clause of the ask. A clause ends at punctuation (`, ; : . ! ?`,
//! brackets, quotes, dashes) and at a word that starts a new one ("but", "just", "only",
//! "simply", "instead", "then", "so", "however"...): in "No KYC, just enter your seed phrase" the
//! negation governs KYC, not the ask.
//!
//! A negation before the ask's verb does not cancel it when a word that starts a new clause stands
//! between that verb and the secret: in "we don't need much, just send your seed phrase" (or "we
//! do not need anything but your private key") the negation governs the need, and the clause
//! that names the secret asks for it.
//!
//! Chinese, Japanese and Korean put the negation after the verb as often as before it ("秘密鍵を
//! 入力しないでください", "입력하지 마세요"): the rules for them take a few characters after the
//! verb into the match, and a negation there cancels the ask.
//!
//! An ask made by someone else and described in a conditional or relative clause ("if a site asks
//! for your 12 words", "pages that ask visitors to enter a seed phrase", "anyone who asks for your
//! key") is reported speech, not an ask to the reader.
//!
//! Work per match is bounded: at most [`LOOK_BACK`] bytes before it are read.

use std::ops::Range;
use std::sync::OnceLock;

use regex::Regex;

/// Bytes before a match that are read to find its clause.
pub(super) const LOOK_BACK: usize = 160;

/// Words (folded) that negate what follows them.
fn is_negation(word: &str) -> bool {
    matches!(
        word,
        "never"
            | "not"
            | "no"
            | "nor"
            | "neither"
            | "none"
            | "don't"
            | "dont"
            | "doesn't"
            | "doesnt"
            | "didn't"
            | "won't"
            | "wont"
            | "wouldn't"
            | "shouldn't"
            | "mustn't"
            | "can't"
            | "cant"
            | "cannot"
            | "isn't"
            | "aren't"
            | "without"
            | "nunca"
            | "jamas"
            | "jamais"
            | "ne"
            | "n'"
            | "pas"
            | "sin"
            | "sans"
            | "sem"
            | "nao"
            | "non"
            | "nie"
            | "niemals"
            | "nicht"
            | "kein"
            | "keine"
            | "keinen"
            | "keinesfalls"
            | "никогда"
            | "не"
            | "нет"
            | "без"
            | "нельзя"
            | "mai"
    )
}

/// Words that may stand between a negation and the verb it governs.
fn is_verb_filler(word: &str) -> bool {
    matches!(
        word,
        "we" | "you"
            | "i"
            | "they"
            | "he"
            | "she"
            | "it"
            | "us"
            | "one"
            | "anyone"
            | "anybody"
            | "ever"
            | "will"
            | "would"
            | "should"
            | "shall"
            | "must"
            | "may"
            | "might"
            | "can"
            | "could"
            | "need"
            | "needs"
            | "to"
            | "have"
            | "has"
            | "had"
            | "be"
            | "been"
            | "being"
            | "is"
            | "are"
            | "was"
            | "were"
            | "do"
            | "does"
            | "did"
            | "going"
            | "want"
            | "wants"
            | "ask"
            | "asks"
            | "asked"
            | "asking"
            | "required"
            | "requested"
            | "expected"
            | "allowed"
            | "supposed"
            | "please"
            | "here"
            | "even"
            | "really"
            | "actually"
            | "again"
            | "also"
            | "at"
            | "all"
            | "under"
            | "any"
            | "circumstances"
            | "we'll"
            | "you'll"
            | "we're"
            | "you're"
            | "they'll"
            | "i'll"
            | "te"
            | "le"
            | "les"
            | "se"
            | "nos"
            | "nous"
            | "vous"
            | "tu"
            | "il"
            | "on"
            | "du"
            | "sie"
            | "wir"
            | "ich"
            | "bitte"
            | "jemals"
            | "voce"
            | "debes"
            | "debe"
            | "devez"
            | "doit"
            | "faut"
            | "musst"
            | "mussen"
            | "precisa"
            | "deve"
            | "que"
            | "мы"
            | "вы"
            | "ты"
    )
}

/// Words that may stand between a negation and the secret it governs.
fn is_determiner(word: &str) -> bool {
    matches!(
        word,
        "a" | "an"
            | "the"
            | "your"
            | "any"
            | "our"
            | "their"
            | "its"
            | "my"
            | "his"
            | "her"
            | "own"
            | "need"
            | "for"
            | "of"
            | "such"
            | "single"
            | "real"
            | "actual"
            | "extra"
            | "separate"
            | "other"
            | "additional"
            | "votre"
            | "ton"
            | "ta"
            | "tes"
            | "vos"
            | "le"
            | "la"
            | "les"
            | "un"
            | "une"
            | "de"
            | "du"
            | "des"
            | "d'"
            | "tu"
            | "su"
            | "sus"
            | "tus"
            | "el"
            | "una"
            | "dein"
            | "deine"
            | "deinen"
            | "ihr"
            | "ihre"
            | "ihren"
            | "den"
            | "die"
            | "das"
            | "einen"
            | "eine"
            | "sua"
            | "seu"
            | "suas"
            | "seus"
            | "o"
            | "os"
            | "as"
            | "твой"
            | "ваш"
            | "свой"
            | "свою"
            | "вашу"
            | "твою"
            | "tua"
            | "tuo"
            | "tue"
            | "il"
    )
}

/// Words that start a new clause.
fn starts_clause(word: &str) -> bool {
    matches!(
        word,
        "but"
            | "just"
            | "only"
            | "simply"
            | "instead"
            | "then"
            | "so"
            | "however"
            | "yet"
            | "though"
            | "although"
            | "except"
            | "otherwise"
            | "rather"
            | "-"
            | "pero"
            | "solo"
            | "mais"
            | "simplement"
            | "aber"
            | "einfach"
            | "nur"
            | "mas"
            | "apenas"
            | "но"
            | "просто"
            | "только"
    )
}

fn is_clause_punctuation(c: char) -> bool {
    matches!(
        c,
        ',' | ';'
            | ':'
            | '!'
            | '?'
            | '('
            | ')'
            | '['
            | ']'
            | '"'
            | '…'
            | '，'
            | '。'
            | '；'
            | '：'
            | '！'
            | '？'
            | '、'
    )
}

fn is_cjk(c: char) -> bool {
    matches!(c, '\u{3000}'..='\u{9FFF}' | '\u{F900}'..='\u{FAFF}' | '\u{FF00}'..='\u{FFEF}')
}

/// Start of the look-back window: `pos - LOOK_BACK`, moved to a character boundary.
fn floor_of(folded: &str, pos: usize) -> usize {
    let mut floor = pos.saturating_sub(LOOK_BACK);
    while !folded.is_char_boundary(floor) {
        floor += 1;
    }
    floor
}

/// The words of the clause that ends at byte `pos`, in reading order.
fn clause_before(folded: &str, pos: usize) -> Vec<&str> {
    let window = &folded[floor_of(folded, pos)..pos];
    // After the last clause punctuation, or the last full stop followed by a space.
    let mut start = 0;
    let mut previous: Option<(usize, char)> = None;
    for (i, c) in window.char_indices() {
        if is_clause_punctuation(c) {
            start = i + c.len_utf8();
        } else if c == ' '
            && let Some((at, '.')) = previous
        {
            start = at + 1;
        }
        previous = Some((i, c));
    }
    let words: Vec<&str> = window[start..]
        .split(' ')
        .filter(|w| !w.is_empty())
        .collect();
    match words.iter().rposition(|w| starts_clause(w)) {
        Some(at) => words[at + 1..].to_vec(),
        None => words,
    }
}

/// Chinese negations that govern the verb after them, unless "please" or "just" follows.
fn cjk_negated(token: &str) -> bool {
    const NEGATIONS: &[&str] = &[
        "不要",
        "不会",
        "不會",
        "绝不",
        "絕不",
        "从不",
        "從不",
        "无需",
        "無需",
        "无须",
        "無須",
        "不需要",
        "不用",
        "不必",
        "勿",
        "别",
        "別",
        "不得",
        "决不",
        "決不",
        "永不",
    ];
    const IMPERATIVE: &[&str] = &["请", "請", "只需", "只要", "就", "直接"];
    // One-character negations count only right before the verb ("不需要", "无需").
    if ["不", "无", "無", "没", "沒", "未"]
        .iter()
        .any(|n| token.ends_with(n))
    {
        return true;
    }
    let Some(at) = NEGATIONS.iter().filter_map(|n| token.rfind(n)).max() else {
        return false;
    };
    !IMPERATIVE.iter().any(|p| token[at..].contains(p))
}

/// Negations that follow the verb in Chinese, Japanese and Korean, or stand before it.
const CJK_NEGATIONS: &[&str] = &[
    "ないで",
    "ません",
    "しない",
    "不要",
    "禁止",
    "決して",
    "絶対に",
    "不需要",
    "无需",
    "無需",
    "不用",
    "不必",
    "勿",
    "别",
    "別",
    "不会",
    "不會",
    "绝不",
    "絕不",
    "永不",
    "않",
    "마세요",
    "마십시오",
    "말고",
    "말아",
    "금지",
    "절대",
];

/// Whether a CJK or Korean negation stands in `text`.
fn cjk_text_negated(text: &str) -> bool {
    CJK_NEGATIONS.iter().any(|n| text.contains(n))
}

/// Whether the words between the start of a verb-first ask and its secret open a new clause
/// ("need much, just send your ...", "need anything but your ..."): then a negation before the
/// verb governs another clause than the one that names the secret.
fn clause_reopens(folded: &str, between: Range<usize>) -> bool {
    folded[between]
        .split(|c: char| c == ' ' || is_clause_punctuation(c))
        .skip(1)
        .any(|w| starts_clause(w) || matches!(w, "but" | "except" | "besides"))
}

/// Whether a negation governs the verb that starts at `verb_at`.
fn verb_negated(folded: &str, verb_at: usize) -> bool {
    let words = clause_before(folded, verb_at);
    let mut skip_coordinated = false;
    for word in words.iter().rev().take(8) {
        let word = word.trim_matches(['\'', '"']);
        if word.chars().any(is_cjk) {
            return cjk_negated(word);
        }
        if is_negation(word) || word.ends_with("n't") {
            return true;
        }
        if skip_coordinated {
            // The other verb of "store or share".
            skip_coordinated = false;
            continue;
        }
        if matches!(word, "or" | "and/or") {
            skip_coordinated = true;
            continue;
        }
        if !is_verb_filler(word) {
            return false;
        }
    }
    false
}

/// Whether a negation governs the noun that starts at `noun_at`.
fn noun_negated(folded: &str, noun_at: usize) -> bool {
    let words = clause_before(folded, noun_at);
    let mut free_words = 1;
    for word in words.iter().rev().take(6) {
        let word = word.trim_matches(['\'', '"']);
        if word.chars().any(is_cjk) {
            return cjk_negated(word);
        }
        if is_negation(word) {
            return true;
        }
        if is_determiner(word) {
            continue;
        }
        if matches!(word, "or" | "nor") {
            // "no private key or seed phrase": the other noun of the pair, up to three words.
            free_words = 3;
            continue;
        }
        if free_words == 0 {
            return false;
        }
        free_words -= 1;
    }
    false
}

/// Compiles this module's patterns now (`screen::compile_patterns`).
pub(super) fn compile_patterns() {
    let _ = reported_speech();
}

fn reported_speech() -> &'static Regex {
    static REPORTED: OnceLock<Regex> = OnceLock::new();
    REPORTED.get_or_init(|| {
        Regex::new(
            r"(?:\b(?:if|when|whenever|once|should)\b(?: \S+){0,3}? (?:asks?|asking|asked|prompts?|requests?|wants?|tells?|says?|demands?)\b|\b(?:that|which|who|whoever|anyone|anybody|someone|somebody|scammers?|phishers?|attackers?|drainers?|impostors?|imposters?|fraudsters?|(?:(?:a|an|any|the|some|our|this|my) )?(?:websites?|sites?|pages?|apps?|services?|strangers?|messages?|e-?mails?|dms?|pop-?ups?|forms?|bots?))\b(?: \S+)?? (?:asks?|asking|prompts?|prompt|requests?|request|tells?|tell|wants?|want|tries|try|tricks?|trick|lures?|lure|urges?|urge|demands?|demand)\b)",
        )
        .expect("the reported-speech pattern is a valid regex")
    })
}

/// Whether the ask at `m` is someone else's, described: the clause before it and its first two
/// words read "if a site asks", "pages that ask", "anyone who asks" (and the subject is not the
/// reader or the writer).
fn is_reported(folded: &str, m: &Range<usize>) -> bool {
    let mut words = clause_before(folded, m.start);
    words.extend(folded[m.clone()].split(' ').take(2));
    let clause = words.join(" ");
    reported_speech().find_iter(&clause).any(|r| {
        !r.as_str().split(' ').any(|w| {
            matches!(
                w,
                "you" | "your" | "we" | "us" | "i" | "our" | "this" | "my"
            )
        })
    })
}

/// Whether the match is the writer offering something rather than asking: "我们提供私钥安全存储"
/// (we provide private-key storage), "we provide private key backups". The verb "provide" (提供)
/// asks only when the reader is its subject.
fn is_offer(folded: &str, m: &Range<usize>) -> bool {
    const WRITER: &[&str] = &[
        "我们",
        "我們",
        "本服务",
        "本服務",
        "本接口",
        "本平台",
        "本站",
        "我司",
        "本工具",
        "本产品",
        "本產品",
    ];
    let before = &folded[floor_of(folded, m.start)..m.start];
    let matched = &folded[m.clone()];
    if matched.starts_with("提供") {
        return WRITER.iter().any(|w| before.ends_with(w));
    }
    let before = before.trim_end();
    matched.starts_with("provide ") && (before == "we" || before.ends_with(" we"))
}

/// The shape of a secret-ask match, found from where its noun stands.
enum AskShape {
    /// The ask's verb first, the secret last ("enter your seed phrase"); `noun_at` is where the
    /// last secret noun of the match starts.
    VerbFirst { noun_at: Option<usize> },
    /// The secret first, then what is said of it ("API key required", "seed phrase goes in the
    /// X-Seed header"); `noun_end` is where the noun ends.
    NounFirst { noun_end: usize },
    /// The secret, then an ask for "it" ("your seed phrase ... just enter it"); `verb_at` is where
    /// the verb before "it" starts.
    Pronoun { verb_at: usize },
}

fn shape_of(folded: &str, m: &Range<usize>, nouns: &Regex) -> AskShape {
    let text = &folded[m.clone()];
    let found: Vec<Range<usize>> = nouns.find_iter(text).map(|n| n.range()).collect();
    match found.first() {
        Some(first) if first.start == 0 => {
            if let Some(rest) = text
                .strip_suffix(" it")
                .or_else(|| text.strip_suffix(" them"))
            {
                let verb_at = rest.rfind(' ').map_or(0, |i| i + 1);
                // "type in it", "give us it": the verb may be two words.
                let verb_at = match rest[..verb_at.saturating_sub(1)].rfind(' ') {
                    Some(i) if matches!(&rest[verb_at..], "in" | "us" | "over") => i + 1,
                    _ => verb_at,
                };
                return AskShape::Pronoun {
                    verb_at: m.start + verb_at,
                };
            }
            AskShape::NounFirst {
                noun_end: m.start + first.end,
            }
        }
        _ => AskShape::VerbFirst {
            noun_at: found.last().map(|n| m.start + n.start),
        },
    }
}

/// Whether the secret-ask match `m` of the folded text is cancelled: a negation that scopes the
/// ask, or an ask reported as someone else's. `nouns` finds the secret nouns of every language.
pub(super) fn ask_is_cancelled(folded: &str, m: Range<usize>, nouns: &Regex) -> bool {
    if is_reported(folded, &m) || is_offer(folded, &m) {
        return true;
    }
    match shape_of(folded, &m, nouns) {
        AskShape::VerbFirst { noun_at } => {
            let verb_governs = noun_at.is_none_or(|at| !clause_reopens(folded, m.start..at));
            (verb_governs && verb_negated(folded, m.start))
                || noun_at.is_some_and(|at| noun_negated(folded, at))
                || cjk_text_negated(&folded[m.clone()])
        }
        AskShape::NounFirst { noun_end } => {
            noun_negated(folded, m.start)
                || folded[noun_end..m.end]
                    .split(' ')
                    .any(|w| is_negation(w) || w.ends_with("n't"))
                || cjk_text_negated(&folded[noun_end..m.end])
        }
        AskShape::Pronoun { verb_at } => verb_negated(folded, verb_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nouns() -> Regex {
        Regex::new(r"(?:private keys?|seed phrases?|api keys?|passwords?|私钥)").unwrap()
    }

    /// Cancelled when the ask starts at `ask` (a substring of `text`).
    fn cancelled(text: &str, ask: &str) -> bool {
        let at = text.find(ask).expect("the ask is in the text");
        ask_is_cancelled(text, at..at + ask.len(), &nouns())
    }

    #[test]
    fn a_negation_of_the_verb_cancels() {
        assert!(cancelled(
            "do not share your private key",
            "share your private key"
        ));
        assert!(cancelled(
            "we will never ask you to enter your seed phrase",
            "enter your seed phrase"
        ));
        assert!(cancelled(
            "no need to paste your api key",
            "paste your api key"
        ));
        assert!(cancelled(
            "never store or share your seed phrase",
            "share your seed phrase"
        ));
        assert!(cancelled(
            "you don't have to send a password",
            "send a password"
        ));
    }

    #[test]
    fn a_negation_of_the_noun_cancels() {
        assert!(cancelled(
            "enter a public address, not a private key",
            "enter a public address, not a private key"
        ));
        assert!(cancelled("no api key needed", "api key needed"));
        assert!(cancelled("api key not required", "api key not required"));
        assert!(cancelled("requires no api key", "requires no api key"));
        assert!(cancelled(
            "no private key or seed phrase is required",
            "seed phrase is required"
        ));
    }

    #[test]
    fn a_negation_of_something_else_does_not_cancel() {
        assert!(!cancelled(
            "fast wallet api. no kyc, just enter your seed phrase here.",
            "enter your seed phrase"
        ));
        assert!(!cancelled(
            "don't worry about gas, just share your private key",
            "share your private key"
        ));
        assert!(!cancelled(
            "never miss a payment: give us your private key",
            "give us your private key"
        ));
        assert!(!cancelled(
            "no signup needed send your private key",
            "send your private key"
        ));
        assert!(!cancelled(
            "we never log. enter your private key",
            "enter your private key"
        ));
    }

    #[test]
    fn a_new_clause_between_a_negated_verb_and_the_secret_reopens_the_ask() {
        let text = "we don't need much, just send your seed phrase";
        assert!(!cancelled(text, "need much, just send your seed phrase"));
        let text = "we do not need anything but your private key";
        assert!(!cancelled(text, "need anything but your private key"));
        // Without a new clause the negation still governs: a list of what is not needed.
        let text = "we do not need your email, password or private key";
        assert!(cancelled(text, "need your email, password or private key"));
    }

    #[test]
    fn the_pronoun_form_looks_at_its_own_verb() {
        let text = "your seed phrase is never stored, just enter it here";
        let ask = "seed phrase is never stored, just enter it";
        assert!(!cancelled(text, ask));
        let text = "your private key stays with you: never paste it";
        assert!(cancelled(
            text,
            "private key stays with you: never paste it"
        ));
    }

    #[test]
    fn reported_asks_are_not_asks() {
        assert!(cancelled(
            "if a site asks for your seed phrase, it is a scam",
            "asks for your seed phrase"
        ));
        assert!(cancelled(
            "flags pages that ask visitors to enter a seed phrase",
            "enter a seed phrase"
        ));
        assert!(!cancelled(
            "if you want a refund enter your seed phrase",
            "enter your seed phrase"
        ));
        assert!(cancelled(
            "quiz: 'a website asks for your seed phrase. what do you do?'",
            "asks for your seed phrase"
        ));
        // The writer's own site asking is the writer asking.
        assert!(!cancelled(
            "our website asks for your seed phrase once",
            "asks for your seed phrase"
        ));
    }

    #[test]
    fn the_writer_offering_is_not_an_ask() {
        assert!(cancelled("我们提供私钥安全存储的文档", "提供私钥"));
        assert!(!cancelled("请提供私钥", "提供私钥"));
        assert!(cancelled(
            "we provide private key backups",
            "provide private key"
        ));
        assert!(!cancelled(
            "you must provide your private key",
            "provide your private key"
        ));
    }

    #[test]
    fn chinese_negation_and_imperative() {
        let text = "公钥。我们绝不会要求您提供私钥";
        assert!(cancelled(text, "提供私钥"));
        let text = "不要担心请提供私钥";
        assert!(!cancelled(text, "提供私钥"));
    }

    #[test]
    fn look_back_is_bounded_and_boundary_safe() {
        let long = format!("{} enter your private key", "é".repeat(500));
        assert!(!cancelled(&long, "enter your private key"));
    }
}
