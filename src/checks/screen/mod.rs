//! Screens (S2, S3, S4): deterministic rules with receipts.
//!
//! [`screen`] runs every rule over one text and returns a [`Screening`]: [`Finding`]s, each
//! naming a stable rule id, its category, the byte span in the text as published, and a short
//! excerpt. Matching happens on a folded copy of the text (see `normalise`), and spans are mapped
//! back to the original bytes. The check functions wrap the screening of several texts into a
//! [`Conclusion`]: [`screen_description`] (S2) and [`screen_output`] (S3) fail on injection,
//! hidden text, phishing and malware; [`screen_secret_asks`] (S4) fails on asks for secrets,
//! including auth headers that the endpoint's discovery input declares as needed.
//!
//! Bounded: the work is linear in the text screened and the receipts have a fixed size.
//! - A response's texts are screened up to [`MAX_SCREENED_TEXTS`] texts and
//!   [`MAX_SCREENED_BYTES`] bytes in all (in their published order); past that, nothing is
//!   screened and the receipt says how much was left (S2 and S4 then fail, S3 is unmeasured unless
//!   the screened part already fails).
//! - Findings of one rule that overlap are one finding. Every distinct finding is counted (per
//!   rule, in the receipt), but a screening keeps at most [`MAX_FINDINGS_PER_RULE`] per rule and
//!   [`MAX_FINDINGS_KEPT`] in all (the first of every rule always among them), and a receipt lists
//!   at most [`MAX_FINDINGS_KEPT`] and [`MAX_TEXTS_LISTED`] texts.
//!
//! Pure: no IO, no clock. The rules are documented in `probes/S2.md` and `probes/S4.md`.

mod blobs;
mod hidden;
mod links;
mod negation;
mod normalise;
mod rules;

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::evidence::Conclusion;

/// The most text screened for one response (all its texts together), and for one text alone.
pub const MAX_SCREENED_BYTES: usize = 1 << 20;

/// The most texts screened for one response.
pub const MAX_SCREENED_TEXTS: usize = 1024;

/// The most findings a screening keeps, and a receipt lists.
pub const MAX_FINDINGS_KEPT: usize = 64;

/// The most findings of one rule a screening keeps.
pub const MAX_FINDINGS_PER_RULE: usize = 8;

/// The most texts a receipt lists one by one (the others are counted and hashed together).
pub(crate) const MAX_TEXTS_LISTED: usize = 32;

/// What a finding is evidence of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Instructions aimed at the AI agent that reads the text.
    Injection,
    /// Characters that change what a model reads but not what a person sees.
    HiddenText,
    /// Lures to a wallet drainer, lookalike or disguised links.
    Phishing,
    /// Commands or payloads that would run code.
    Malware,
    /// Asks for private keys, seed phrases, passwords, API keys or auth headers.
    SecretAsk,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Injection => "injection",
            Category::HiddenText => "hidden_text",
            Category::Phishing => "phishing",
            Category::Malware => "malware",
            Category::SecretAsk => "secret_ask",
        }
    }
}

/// Which categories a screening looks for: S2 and S3 need the unsafe ones, S4 the secret asks,
/// and running only those keeps each check's work to its own rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    All,
    Unsafe,
    SecretAsks,
}

impl Scope {
    fn covers(self, category: Category) -> bool {
        match self {
            Scope::All => true,
            Scope::Unsafe => category != Category::SecretAsk,
            Scope::SecretAsks => category == Category::SecretAsk,
        }
    }
}

/// One rule that fired, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable rule id, e.g. `inj.ignore-previous`, `unicode.bidi`, `secret.seed-phrase`.
    pub rule: String,
    pub category: Category,
    /// Byte offset of the first byte in the original text.
    pub start: usize,
    /// Byte offset one past the last byte in the original text.
    pub end: usize,
    /// The matched text as published (invisible characters shown as `\u{..}`), shortened.
    pub excerpt: String,
}

impl Finding {
    pub fn span(&self) -> Range<usize> {
        self.start..self.end
    }
}

/// How many distinct findings one rule had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleCount {
    pub category: Category,
    pub count: usize,
}

/// The findings of one screened text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Screening {
    /// The findings kept, in text order (see [`MAX_FINDINGS_KEPT`]).
    pub findings: Vec<Finding>,
    /// Every distinct finding, kept or not.
    pub total: usize,
    /// Distinct findings per rule id.
    pub by_rule: BTreeMap<String, RuleCount>,
    /// Bytes of the text screened (all of it unless `truncated`).
    pub screened_bytes: usize,
    /// True when the text was longer than the bytes left to screen and only its start was read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl Screening {
    pub fn is_clean(&self) -> bool {
        self.total == 0
    }

    pub fn has(&self, category: Category) -> bool {
        self.by_rule.values().any(|r| r.category == category)
    }

    /// Distinct findings not kept.
    pub fn omitted(&self) -> usize {
        self.total - self.findings.len()
    }
}

const EXCERPT_CHARS: usize = 120;

/// The original bytes of a span, shortened, with invisible characters made visible.
fn excerpt_of(text: &str, span: Range<usize>) -> String {
    let slice = text.get(span).unwrap_or("");
    let mut out = String::new();
    for (count, c) in slice.chars().enumerate() {
        if count >= EXCERPT_CHARS {
            out.push('…');
            break;
        }
        if normalise::is_invisible(c) || c.is_control() {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Cut `text` to at most `max` bytes at a character boundary.
fn prefix_at_boundary(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `range` of `folded` without the spaces at its ends (a boundary made of a character class, see
/// `rules`, can take the space before a word into the match).
fn trim_spaces(folded: &str, range: Range<usize>) -> Range<usize> {
    let matched = &folded[range.clone()];
    let start = range.start + (matched.len() - matched.trim_start_matches(' ').len());
    let end = range.end - (matched.len() - matched.trim_end_matches(' ').len());
    start..end.max(start)
}

/// One place a rule matched, before deduplication.
struct Hit {
    span: Range<usize>,
    /// What the receipt shows instead of the matched bytes (decoded tags, a decoded blob).
    note: Option<Box<str>>,
}

/// One rule's distinct findings: how many, and the first few.
struct RuleHits {
    rule: &'static str,
    category: Category,
    total: usize,
    first: Vec<Hit>,
}

/// Deduplicates one rule's hits (overlapping hits are one finding) and counts them, keeping the
/// first [`MAX_FINDINGS_PER_RULE`]. One sort and one sweep: O(n log n) in the hits.
fn rule_hits(rule: &'static str, category: Category, mut hits: Vec<Hit>) -> Option<RuleHits> {
    hits.retain(|h| !h.span.is_empty());
    if hits.is_empty() {
        return None;
    }
    hits.sort_unstable_by_key(|h| (h.span.start, h.span.end));
    let mut total = 0;
    let mut first = Vec::new();
    // Sorted by start, a hit overlaps a kept one exactly when it starts before the furthest end
    // of the kept ones.
    let mut kept_end = 0;
    for hit in hits {
        if total > 0 && hit.span.start < kept_end {
            continue;
        }
        kept_end = kept_end.max(hit.span.end);
        total += 1;
        if first.len() < MAX_FINDINGS_PER_RULE {
            first.push(hit);
        }
    }
    Some(RuleHits {
        rule,
        category,
        total,
        first,
    })
}

/// Run every rule over `text` (up to [`MAX_SCREENED_BYTES`]).
pub fn screen(text: &str) -> Screening {
    screen_within(text, Scope::All, MAX_SCREENED_BYTES)
}

/// Compiles every pattern the screens use, each once per process (otherwise each is compiled
/// where it is first needed, inside some run's checks).
pub(crate) fn compile_patterns() {
    let _ = rules::rule_groups();
    let _ = rules::secret_nouns();
    links::compile_patterns();
    blobs::compile_patterns();
    negation::compile_patterns();
}

/// Run the rules of `scope` over the first `max_bytes` of `text`.
pub(crate) fn screen_within(text: &str, scope: Scope, max_bytes: usize) -> Screening {
    let truncated = text.len() > max_bytes;
    let text = prefix_at_boundary(text, max_bytes);
    let mut groups: Vec<RuleHits> = Vec::new();
    let mut add = |rule: &'static str, category: Category, hits: Vec<Hit>| {
        groups.extend(rule_hits(rule, category, hits));
    };

    if scope.covers(Category::HiddenText) {
        let mut by_kind: BTreeMap<&'static str, Vec<Hit>> = BTreeMap::new();
        hidden::each_hidden_run(text, |run| {
            let note = run
                .decoded
                .map(|decoded| format!("tag characters spelling {decoded:?}").into_boxed_str());
            by_kind.entry(run.kind.rule_id()).or_default().push(Hit {
                span: run.span,
                note,
            });
        });
        for (rule, hits) in by_kind {
            add(rule, Category::HiddenText, hits);
        }
    }
    if scope.covers(Category::Phishing) {
        let mut by_problem: BTreeMap<&'static str, Vec<Hit>> = BTreeMap::new();
        for link in links::link_findings(text) {
            by_problem
                .entry(link.problem.rule_id())
                .or_default()
                .push(Hit {
                    span: link.span,
                    note: None,
                });
        }
        for (rule, hits) in by_problem {
            add(rule, Category::Phishing, hits);
        }
    }
    if scope.covers(Category::Malware) {
        let mut by_kind: BTreeMap<&'static str, Vec<Hit>> = BTreeMap::new();
        for blob in blobs::blob_findings(text) {
            let rule = match blob.kind {
                blobs::BlobKind::Script => "malware.base64-script",
                blobs::BlobKind::Executable => "malware.base64-executable",
            };
            by_kind.entry(rule).or_default().push(Hit {
                span: blob.span,
                note: Some(format!("decodes to {:?}", blob.decoded_excerpt).into_boxed_str()),
            });
        }
        for (rule, hits) in by_kind {
            add(rule, Category::Malware, hits);
        }
    }

    let plain = normalise::normalise(text);
    if scope.covers(Category::HiddenText) {
        let hits = plain
            .mixed_script_words
            .iter()
            .map(|word| Hit {
                span: word.clone(),
                note: None,
            })
            .collect();
        add("unicode.mixed-script", Category::HiddenText, hits);
        let hits = plain
            .invisible_references
            .iter()
            .map(|reference| Hit {
                span: reference.clone(),
                note: None,
            })
            .collect();
        add("unicode.invisible-reference", Category::HiddenText, hits);
    }
    let rule_groups = rules::rule_groups();
    let mut by_group: Vec<Vec<Hit>> = rule_groups.iter().map(|_| Vec::new()).collect();
    word_rule_matches(&plain, scope, |group, span| {
        by_group[group].push(Hit { span, note: None });
    });
    // What an agent told to decode a run would read: the word rules over the decoded text, each
    // finding on the encoded run (one level: what is decoded is not decoded again).
    for encoded in blobs::encoded_texts(text) {
        let inner = normalise::normalise(&encoded.text);
        let note = format!(
            "{} that decodes to {:?}",
            encoded.encoding,
            blobs::decoded_excerpt(&encoded.text)
        );
        word_rule_matches(&inner, scope, |group, _| {
            by_group[group].push(Hit {
                span: encoded.span.clone(),
                note: Some(note.clone().into_boxed_str()),
            });
        });
    }
    for (group, hits) in rule_groups.iter().zip(by_group) {
        add(group.id, group.category, hits);
    }

    let total = groups.iter().map(|g| g.total).sum();
    let by_rule = groups
        .iter()
        .map(|g| {
            let count = RuleCount {
                category: g.category,
                count: g.total,
            };
            (g.rule.to_string(), count)
        })
        .collect();
    let kept = keep_first(
        groups
            .into_iter()
            .flat_map(|g| {
                let (rule, category) = (g.rule, g.category);
                g.first
                    .into_iter()
                    .enumerate()
                    .map(move |(rank, hit)| (rank, rule, category, hit))
            })
            .collect(),
        |(rank, rule, _, hit)| (*rank, hit.span.start, *rule),
    );
    let mut findings: Vec<Finding> = kept
        .into_iter()
        .map(|(_, rule, category, hit)| Finding {
            rule: rule.to_string(),
            category,
            start: hit.span.start,
            end: hit.span.end,
            excerpt: hit
                .note
                .map_or_else(|| excerpt_of(text, hit.span), String::from),
        })
        .collect();
    findings.sort_by(|a, b| (a.start, &a.rule, a.end).cmp(&(b.start, &b.rule, b.end)));
    Screening {
        findings,
        total,
        by_rule,
        screened_bytes: text.len(),
        truncated,
    }
}

/// Every match of the word rules of `scope` over a normalised text (its plain view, and its loose
/// view for the rules that read it), as the index of the rule's group and the span in the text
/// that was normalised.
fn word_rule_matches(
    plain: &normalise::Normalised,
    scope: Scope,
    mut on_match: impl FnMut(usize, Range<usize>),
) {
    let loose = normalise::loosen(plain);
    for (index, group) in rules::rule_groups().iter().enumerate() {
        if !scope.covers(group.category) {
            continue;
        }
        for rule in &group.rules {
            for m in rule.regex.find_iter(&plain.text) {
                let range = trim_spaces(&plain.text, m.range());
                if !range.is_empty() && rule.accepts(&plain.text, range.clone()) {
                    on_match(index, plain.original_span(range));
                }
            }
            let Some(loose) = loose.as_ref().filter(|_| rule.loose) else {
                continue;
            };
            for m in rule.regex.find_iter(&loose.text) {
                let range = trim_spaces(&loose.text, m.range());
                if !range.is_empty() && rule.accepts(&loose.text, range.clone()) {
                    on_match(index, plain.original_span(loose.plain_span(range)));
                }
            }
        }
    }
}

/// The [`MAX_FINDINGS_KEPT`] items with the smallest `priority` (the first finding of every rule
/// ranks before the second of any).
fn keep_first<T, K: Ord>(mut items: Vec<T>, priority: impl Fn(&T) -> K) -> Vec<T> {
    items.sort_by_key(|item| priority(item));
    items.truncate(MAX_FINDINGS_KEPT);
    items
}

/// One text to screen and where it came from (e.g. `resource.description`, `accepts[0].description`,
/// `docs`, `output`), so the receipt can say which text a finding is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcedText {
    pub source: String,
    pub text: String,
}

impl SourcedText {
    pub fn new(source: impl Into<String>, text: impl Into<String>) -> Self {
        SourcedText {
            source: source.into(),
            text: text.into(),
        }
    }
}

/// The texts of a decoded PaymentRequired (v1 or v2) that S2 and S4 screen: the v2
/// `resource.description`, every accepts entry's `description`, and every `description` string
/// inside `extensions.bazaar` and the v1 `outputSchema`s (schemas describe their fields there).
/// Also the v1/v2 `error` text, which some servers fill with prose.
///
/// Bounded: the collection stops after the first text past [`MAX_SCREENED_TEXTS`] texts or
/// [`MAX_SCREENED_BYTES`] bytes (that text is kept, so the screen sees the bound was passed), and
/// a source path shows at most [`MAX_KEY_CHARS`] characters of each key.
pub fn description_texts(payment_required: &Value) -> Vec<SourcedText> {
    let mut texts = TextCollector::default();
    texts.push(
        || "resource.description".into(),
        payment_required.pointer("/resource/description"),
    );
    texts.push(|| "error".into(), payment_required.get("error"));
    if let Some(accepts) = payment_required.get("accepts").and_then(Value::as_array) {
        for (i, entry) in accepts.iter().enumerate() {
            if texts.full {
                break;
            }
            texts.push(
                || format!("accepts[{i}].description"),
                entry.get("description"),
            );
            if let Some(schema) = entry.get("outputSchema") {
                let root = format!("accepts[{i}].outputSchema");
                collect_descriptions(schema, &root, &mut texts);
            }
        }
    }
    if let Some(bazaar) = payment_required.pointer("/extensions/bazaar") {
        collect_descriptions(bazaar, "extensions.bazaar", &mut texts);
    }
    texts.texts
}

/// Characters of a JSON key shown in a source path.
pub(crate) const MAX_KEY_CHARS: usize = 64;

/// Texts collected within the screen's bounds.
#[derive(Default)]
struct TextCollector {
    texts: Vec<SourcedText>,
    bytes: usize,
    /// A bound was passed: nothing more is collected.
    full: bool,
}

impl TextCollector {
    fn push(&mut self, source: impl FnOnce() -> String, value: Option<&Value>) {
        let Some(text) = value.and_then(Value::as_str) else {
            return;
        };
        if self.full || text.trim().is_empty() {
            return;
        }
        self.texts.push(SourcedText::new(source(), text));
        self.bytes += text.len();
        self.full = self.texts.len() > MAX_SCREENED_TEXTS || self.bytes > MAX_SCREENED_BYTES;
    }
}

/// One step of a path inside a JSON document.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// `root` and the steps, with long keys shortened.
fn render_path(root: &str, steps: &[Step<'_>]) -> String {
    let mut path = root.to_string();
    for step in steps {
        match step {
            Step::Key(key) => {
                path.push('.');
                path.extend(key.chars().take(MAX_KEY_CHARS));
                if key.chars().nth(MAX_KEY_CHARS).is_some() {
                    path.push('…');
                }
            }
            Step::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    path
}

/// Every string under a key named `description` (or `summary`, `title`), depth-first.
fn collect_descriptions(value: &Value, root: &str, texts: &mut TextCollector) {
    // Bounded: a hostile schema nests deeply; past this depth nothing is screened and that is fine
    // because nothing a client displays lives that deep. Paths are rendered only for the texts
    // collected, so a long key costs nothing per child.
    fn walk<'a>(
        value: &'a Value,
        root: &str,
        steps: &mut Vec<Step<'a>>,
        texts: &mut TextCollector,
    ) {
        if steps.len() > 32 || texts.full {
            return;
        }
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    if texts.full {
                        return;
                    }
                    steps.push(Step::Key(key));
                    match child {
                        Value::String(_)
                            if matches!(key.as_str(), "description" | "summary" | "title") =>
                        {
                            texts.push(|| render_path(root, steps), Some(child));
                        }
                        _ => walk(child, root, steps, texts),
                    }
                    steps.pop();
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    if texts.full {
                        return;
                    }
                    steps.push(Step::Index(i));
                    walk(child, root, steps, texts);
                    steps.pop();
                }
            }
            _ => {}
        }
    }
    walk(value, root, &mut Vec::new(), texts);
}

/// A request header that the endpoint's discovery input declares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclaredHeader {
    pub name: String,
    /// Whether the declaration marks it as needed (see [`declared_headers`]).
    pub needed: bool,
}

/// The input headers declared by a PaymentRequired: v2 `extensions.bazaar.info.input.headers`
/// (a map of example values: every header listed there is one the example sends, so needed) and
/// v1 `accepts[].outputSchema.input.headerFields` (name to a type string or a field definition;
/// needed unless the definition says `"required": false`).
///
/// Bounded: at most [`MAX_DECLARED_HEADERS`] declarations are read (in that order), names
/// shortened to [`MAX_KEY_CHARS`] characters.
pub fn declared_headers(payment_required: &Value) -> Vec<DeclaredHeader> {
    let mut headers = Vec::new();
    let push = |headers: &mut Vec<DeclaredHeader>, name: &str, needed: bool| {
        if headers.len() < MAX_DECLARED_HEADERS {
            headers.push(DeclaredHeader {
                name: name.chars().take(MAX_KEY_CHARS).collect(),
                needed,
            });
        }
    };
    if let Some(map) = payment_required
        .pointer("/extensions/bazaar/info/input/headers")
        .and_then(Value::as_object)
    {
        for name in map.keys().take(MAX_DECLARED_HEADERS) {
            push(&mut headers, name, true);
        }
    }
    if let Some(accepts) = payment_required.get("accepts").and_then(Value::as_array) {
        for entry in accepts {
            if headers.len() >= MAX_DECLARED_HEADERS {
                break;
            }
            let input = entry.pointer("/outputSchema/input");
            let fields =
                input.and_then(|i| i.get("headerFields").or_else(|| i.get("header_fields")));
            if let Some(map) = fields.and_then(Value::as_object) {
                for (name, definition) in map.iter().take(MAX_DECLARED_HEADERS) {
                    let needed = definition.get("required") != Some(&Value::Bool(false));
                    push(&mut headers, name, needed);
                }
            }
        }
    }
    headers
}

/// The most declared headers read from one PaymentRequired.
pub(crate) const MAX_DECLARED_HEADERS: usize = 256;

/// Headers that x402 itself uses: declaring them is not asking for a secret.
const X402_HEADERS: &[&str] = &[
    "payment-signature",
    "x-payment",
    "payment-identifier",
    "sign-in-with-x",
];

/// Parts of a header name that carry a credential (`authorization`, `x-api-key`, `cookie`...).
const SECRET_HEADER_PARTS: &[&str] = &[
    "auth",
    "api-key",
    "apikey",
    "api_key",
    "token",
    "secret",
    "password",
    "passwd",
    "private",
    "cookie",
    "session",
    "mnemonic",
    "seed",
    "credential",
];

/// Whether a declared header name carries a credential beyond x402.
pub fn is_secret_header(name: &str) -> bool {
    let name = name.trim().to_ascii_lowercase();
    !X402_HEADERS.contains(&name.as_str()) && SECRET_HEADER_PARTS.iter().any(|p| name.contains(p))
}

/// A finding in one of several screened texts.
#[derive(Debug, Clone, Serialize)]
struct SourcedFinding<'a> {
    source: &'a str,
    #[serde(flatten)]
    finding: &'a Finding,
}

/// The screenings of a response's texts, within the bounds.
struct Screened<'a> {
    texts: &'a [SourcedText],
    /// The screenings of `texts[..screenings.len()]`; the rest were not screened.
    screenings: Vec<Screening>,
    /// Findings that only two texts read together make (see [`seams`]).
    seams: Vec<Seam>,
}

/// The most bytes of each side of a seam screened: the end of one text and the start of the next.
pub(crate) const SEAM_BYTES: usize = 256;

/// The most seams screened for one response.
pub(crate) const MAX_SEAMS: usize = 64;

/// Two texts an agent reads as one message, joined: the last [`SEAM_BYTES`] of the first, a space,
/// the first [`SEAM_BYTES`] of the second; and the findings that cross the join (those inside one
/// text are that text's own).
struct Seam {
    /// `first+second`, e.g. `resource.description+error`.
    source: String,
    screening: Screening,
}

/// Whether a PaymentRequired's text is one an agent reads with the others as one message: the
/// resource's description, the error, and each accepts entry's description.
fn reads_together(source: &str) -> bool {
    source == "resource.description"
        || source == "error"
        || source
            .strip_prefix("accepts[")
            .and_then(|rest| rest.strip_suffix("].description"))
            .is_some_and(|index| !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()))
}

/// Words that cannot end a sentence: a text that ends with one goes on in the next.
const OPEN_ENDED_WORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "your",
    "my",
    "our",
    "their",
    "his",
    "her",
    "its",
    "all",
    "any",
    "every",
    "of",
    "to",
    "for",
    "with",
    "in",
    "into",
    "on",
    "at",
    "by",
    "from",
    "and",
    "or",
    "but",
    "us",
    "me",
    "you",
    "please",
    "just",
    "send",
    "enter",
    "provide",
    "share",
    "paste",
    "ignore",
    "disregard",
    "forget",
    "wallet's",
    "account's",
    "user's",
];

/// Whether `second` reads as the rest of a sentence that `first` began: `first` does not end a
/// sentence, and `second` starts with a lower-case or uncased letter (a Chinese character, a
/// digit), or `first` ends with a word no sentence ends with ("... reply with your" + "Seed
/// phrase"). "X-PAYMENT header is required" followed by a description that starts with a capital
/// is two sentences, the way x402 errors and descriptions are written.
fn continues(first: &str, second: &str) -> bool {
    let first = first.trim_end();
    if first.ends_with(['.', '!', '?', '。', '！', '？', ':', ';']) {
        return false;
    }
    let Some(next) = second.trim_start().chars().next() else {
        return false;
    };
    if !next.is_uppercase() {
        return true;
    }
    let last_word = first
        .rsplit(|c: char| c.is_whitespace())
        .next()
        .unwrap_or("")
        .to_lowercase();
    OPEN_ENDED_WORDS.contains(&last_word.as_str())
}

/// `text` after its first `text.len() - max` bytes, at a character boundary.
fn suffix_at_boundary(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The seams of a response: an ask can start in the description and end in the error (or the
/// other way round: an agent may read the JSON in either order). Each pair of texts that
/// [`reads_together`], in both orders, where one of them is the resource's description or the
/// error, up to [`MAX_SEAMS`]. Bounded: at most `MAX_SEAMS * (2 * SEAM_BYTES + 1)` bytes.
fn seams(texts: &[SourcedText], scope: Scope) -> Vec<Seam> {
    let together: Vec<&SourcedText> = texts
        .iter()
        .take(MAX_SCREENED_TEXTS)
        .filter(|t| reads_together(&t.source))
        .collect();
    let mut seams = Vec::new();
    for first in &together {
        for second in &together {
            let top = |t: &SourcedText| t.source == "resource.description" || t.source == "error";
            if std::ptr::eq(*first, *second)
                || !(top(first) || top(second))
                || !continues(&first.text, &second.text)
            {
                continue;
            }
            if seams.len() >= MAX_SEAMS {
                return seams;
            }
            let tail = suffix_at_boundary(&first.text, SEAM_BYTES);
            let head = prefix_at_boundary(&second.text, SEAM_BYTES);
            let joined = format!("{tail} {head}");
            let join = tail.len();
            let mut screening = screen_within(&joined, scope, joined.len());
            screening
                .findings
                .retain(|f| f.start < join && f.end > join + 1);
            let mut by_rule: BTreeMap<String, RuleCount> = BTreeMap::new();
            for f in &screening.findings {
                by_rule
                    .entry(f.rule.clone())
                    .or_insert(RuleCount {
                        category: f.category,
                        count: 0,
                    })
                    .count += 1;
            }
            screening.total = screening.findings.len();
            screening.by_rule = by_rule;
            seams.push(Seam {
                source: format!("{}+{}", first.source, second.source),
                screening,
            });
        }
    }
    seams
}

fn screen_all(texts: &[SourcedText], scope: Scope) -> Screened<'_> {
    let mut left = MAX_SCREENED_BYTES;
    let mut screenings = Vec::new();
    for text in texts.iter().take(MAX_SCREENED_TEXTS) {
        if left == 0 {
            break;
        }
        let screening = screen_within(&text.text, scope, left);
        left -= screening.screened_bytes;
        screenings.push(screening);
    }
    let seams = seams(texts, scope);
    Screened {
        texts,
        screenings,
        seams,
    }
}

impl Screened<'_> {
    /// Each text's screening with its source, then each seam's.
    fn all_screenings(&self) -> impl Iterator<Item = (&str, &Screening)> {
        let texts = self
            .texts
            .iter()
            .zip(&self.screenings)
            .map(|(t, s)| (t.source.as_str(), s));
        let seams = self.seams.iter().map(|s| (s.source.as_str(), &s.screening));
        texts.chain(seams)
    }

    /// Whether some text was not screened, or only in part.
    fn over_budget(&self) -> bool {
        self.screenings.len() < self.texts.len() || self.screenings.iter().any(|s| s.truncated)
    }

    /// The findings of these categories: the first [`MAX_FINDINGS_KEPT`] (the first of every rule
    /// before the second of any), in text order, and how many there are in all.
    fn findings_in(&self, categories: &[Category]) -> (Vec<SourcedFinding<'_>>, usize) {
        let total = self
            .all_screenings()
            .flat_map(|(_, s)| s.by_rule.values())
            .filter(|r| categories.contains(&r.category))
            .map(|r| r.count)
            .sum();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        let mut candidates = Vec::new();
        for (index, (source, screening)) in self.all_screenings().enumerate() {
            for finding in &screening.findings {
                if !categories.contains(&finding.category) {
                    continue;
                }
                let rank = seen.entry(finding.rule.as_str()).or_default();
                candidates.push((*rank, index, finding.start, source, finding));
                *rank += 1;
            }
        }
        let mut kept = keep_first(candidates, |(rank, index, start, _, _)| {
            (*rank, *index, *start)
        });
        kept.sort_by_key(|(_, index, start, _, _)| (*index, *start));
        let listed = kept
            .into_iter()
            .map(|(_, _, _, source, finding)| SourcedFinding { source, finding })
            .collect();
        (listed, total)
    }

    /// Distinct findings per rule, over every text, for these categories.
    fn counts_in(&self, categories: &[Category]) -> BTreeMap<&str, RuleCount> {
        let mut counts: BTreeMap<&str, RuleCount> = BTreeMap::new();
        for (rule, count) in self.all_screenings().flat_map(|(_, s)| &s.by_rule) {
            if categories.contains(&count.category) {
                counts
                    .entry(rule.as_str())
                    .or_insert(RuleCount {
                        category: count.category,
                        count: 0,
                    })
                    .count += count.count;
            }
        }
        counts
    }

    /// The texts in the receipt: the first [`MAX_TEXTS_LISTED`] one by one, and all of them
    /// counted and hashed together (sha256 over each text's source, a newline, its sha256 in hex
    /// and a newline, in order).
    fn texts_detail(&self) -> Value {
        let mut all = Sha256::new();
        let mut listed = Vec::new();
        for (index, text) in self.texts.iter().enumerate() {
            let sha256 = hex::encode(Sha256::digest(text.text.as_bytes()));
            all.update(text.source.as_bytes());
            all.update(b"\n");
            all.update(sha256.as_bytes());
            all.update(b"\n");
            if index < MAX_TEXTS_LISTED {
                let screening = self.screenings.get(index);
                listed.push(json!({
                    "source": text.source,
                    "bytes": text.text.len(),
                    "sha256": sha256,
                    "screened_bytes": screening.map_or(0, |s| s.screened_bytes),
                    "truncated": screening.is_none_or(|s| s.truncated),
                }));
            }
        }
        json!({
            "listed": listed,
            "count": self.texts.len(),
            "bytes": self.texts.iter().map(|t| t.text.len()).sum::<usize>(),
            "screened": self.screenings.len(),
            "screened_bytes": self.screenings.iter().map(|s| s.screened_bytes).sum::<usize>(),
            "seams": self.seams.len(),
            "all_sha256": hex::encode(all.finalize()),
        })
    }

    fn detail(&self, categories: &[Category]) -> Value {
        let (findings, total) = self.findings_in(categories);
        json!({
            "screened": self.texts_detail(),
            "over_budget": self.over_budget(),
            "findings": findings,
            "findings_total": total,
            "findings_by_rule": self.counts_in(categories),
            "bounds": {
                "max_texts": MAX_SCREENED_TEXTS,
                "max_bytes": MAX_SCREENED_BYTES,
                "max_findings_listed": MAX_FINDINGS_KEPT,
                "max_findings_per_rule_per_text": MAX_FINDINGS_PER_RULE,
            },
        })
    }

    /// What was left unscreened, for an evidence line.
    fn budget_note(&self) -> String {
        let screened_bytes: usize = self.screenings.iter().map(|s| s.screened_bytes).sum();
        format!(
            "past the screening bound ({MAX_SCREENED_TEXTS} texts, {MAX_SCREENED_BYTES} bytes) only {} of {}{} text(s) and {screened_bytes} bytes were screened",
            self.screenings.len(),
            self.texts.len(),
            // The collection of texts stops one past a bound, so there may be more.
            if self.texts.len() > MAX_SCREENED_TEXTS {
                "+"
            } else {
                ""
            },
        )
    }
}

fn describe(finding: &SourcedFinding<'_>) -> String {
    format!(
        "{} ({}) in {} at bytes {}..{}: {}",
        finding.finding.rule,
        finding.finding.category.as_str(),
        finding.source,
        finding.finding.start,
        finding.finding.end,
        finding.finding.excerpt
    )
}

/// The first finding, and how many more there are (and how many the receipt lists).
fn summarise(findings: &[SourcedFinding<'_>], total: usize) -> String {
    let first = describe(&findings[0]);
    match total {
        0 | 1 => first,
        n if n > findings.len() => format!(
            "{first} (and {} more; the receipt lists the first {})",
            n - 1,
            findings.len()
        ),
        n => format!("{first} (and {} more)", n - 1),
    }
}

const UNSAFE_CATEGORIES: &[Category] = &[
    Category::Injection,
    Category::HiddenText,
    Category::Phishing,
    Category::Malware,
];

/// What an unsafe-text check concludes when the texts pass the screening bound and the screened
/// part is clean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OverBudget {
    /// The subject published more description text than any agent could read safely: a finding.
    Fails,
    /// A large output is not the subject's fault; what was not screened is unmeasured.
    Unmeasured,
}

/// The rule id of a screening that could not cover every text.
pub(crate) const TOO_LARGE_RULE: &str = "screen.too-large";

fn unsafe_text_conclusion(texts: &[SourcedText], what: &str, over: OverBudget) -> Conclusion {
    // Nothing published is nothing unsafe: the check passes, and the receipt says it saw no text.
    if texts.iter().all(|t| t.text.trim().is_empty()) {
        return Conclusion::pass(format!("no {what} text published: nothing to screen"))
            .with_detail(json!({"screened": {"listed": [], "count": 0}, "findings": []}));
    }
    let screened = screen_all(texts, Scope::Unsafe);
    let (findings, total) = screened.findings_in(UNSAFE_CATEGORIES);
    let detail = screened.detail(UNSAFE_CATEGORIES);
    if !findings.is_empty() {
        let mut evidence = summarise(&findings, total);
        if screened.over_budget() {
            evidence.push_str(&format!("; {}", screened.budget_note()));
        }
        return Conclusion::fail(evidence).with_detail(detail);
    }
    if screened.over_budget() {
        return match over {
            OverBudget::Fails => Conclusion::fail(format!(
                "{TOO_LARGE_RULE}: {}; nothing unsafe in that part",
                screened.budget_note()
            )),
            OverBudget::Unmeasured => Conclusion::unmeasured(format!(
                "{}; nothing unsafe in that part",
                screened.budget_note()
            )),
        }
        .with_detail(detail);
    }
    let bytes: usize = texts.iter().map(|t| t.text.len()).sum();
    Conclusion::pass(format!(
        "{} {what} text(s), {bytes} bytes: no injection, hidden text, phishing or malware",
        texts.len()
    ))
    .with_detail(detail)
}

/// S2: screen the description and docs texts (see [`description_texts`]; add a docs page's text
/// as a `docs` source). Fails on injection, hidden text, phishing or malware, and when the texts
/// pass the screening bound; passes otherwise, including when no text was published at all.
pub fn screen_description(texts: &[SourcedText]) -> Conclusion {
    unsafe_text_conclusion(texts, "description", OverBudget::Fails)
}

/// S3: screen the text of paid outputs. Same rules as S2 (a caller reports `unmeasured` itself
/// when there was no paid output; an output without text passes); an output past the screening
/// bound whose screened part is clean is `unmeasured`.
pub fn screen_output(texts: &[SourcedText]) -> Conclusion {
    unsafe_text_conclusion(texts, "output", OverBudget::Unmeasured)
}

/// S4: fail when the texts ask for a secret (private key, seed phrase, password, API key, auth
/// header), when a declared input header that carries a credential is marked as needed, or when
/// the texts pass the screening bound.
pub fn screen_secret_asks(texts: &[SourcedText], headers: &[DeclaredHeader]) -> Conclusion {
    let screened = screen_all(texts, Scope::SecretAsks);
    let categories = [Category::SecretAsk];
    let (findings, total) = screened.findings_in(&categories);
    let secret_headers: Vec<&DeclaredHeader> = headers
        .iter()
        .filter(|h| h.needed && is_secret_header(&h.name))
        .collect();
    let mut detail = screened.detail(&categories);
    detail["declared_headers"] = json!({
        "listed": headers.iter().take(MAX_TEXTS_LISTED).collect::<Vec<_>>(),
        "count": headers.len(),
    });
    detail["secret_headers"] = json!({
        "listed": secret_headers.iter().take(MAX_TEXTS_LISTED).collect::<Vec<_>>(),
        "count": secret_headers.len(),
    });
    if let Some(header) = secret_headers.first() {
        let more = match (secret_headers.len() - 1, total) {
            (0, 0) => String::new(),
            (h, f) => format!(" (and {} more)", h + f),
        };
        return Conclusion::fail(format!(
            "secret.declared-header: the discovery input declares the credential header {:?} as needed{more}",
            header.name
        ))
        .with_detail(detail);
    }
    if !findings.is_empty() {
        let mut evidence = summarise(&findings, total);
        if screened.over_budget() {
            evidence.push_str(&format!("; {}", screened.budget_note()));
        }
        return Conclusion::fail(evidence).with_detail(detail);
    }
    if screened.over_budget() {
        return Conclusion::fail(format!(
            "{TOO_LARGE_RULE}: {}; no secret ask in that part",
            screened.budget_note()
        ))
        .with_detail(detail);
    }
    Conclusion::pass(format!(
        "{} text(s) and {} declared header(s): no ask for keys, seed phrases, passwords or auth headers",
        texts.len(),
        headers.len()
    ))
    .with_detail(detail)
}

#[cfg(test)]
mod tests;
