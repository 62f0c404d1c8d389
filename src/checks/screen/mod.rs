//! Screens (S2, S3, S4): deterministic rules with receipts.
//!
//! [`screen`] runs every rule over one text and returns [`Finding`]s, each naming a stable rule id,
//! its category, the byte span in the text as published, and a short excerpt. Matching happens on
//! a folded copy of the text (NFKC, case, Latin diacritics, invisible characters removed,
//! whitespace collapsed, lookalike letters and leetspeak folded, see `normalise`), and spans are
//! mapped back to the original bytes. The check functions wrap a screening into a
//! [`Conclusion`]: [`screen_description`] (S2) and [`screen_output`] (S3) fail on injection,
//! hidden text, phishing and malware; [`screen_secret_asks`] (S4) fails on asks for secrets,
//! including auth headers that the endpoint's discovery input declares as needed.
//!
//! Pure: no IO, no clock. The rules are documented in `probes/S2.md` and `probes/S4.md`.

mod blobs;
mod hidden;
mod links;
mod normalise;
mod rules;

use std::ops::Range;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::evidence::Conclusion;

/// Texts longer than this are screened up to this many bytes, and the receipt says so.
pub const MAX_SCREENED_BYTES: usize = 1 << 20;

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

/// The findings of one screened text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Screening {
    pub findings: Vec<Finding>,
    /// True when the text was longer than [`MAX_SCREENED_BYTES`] and only its start was screened.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl Screening {
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }

    pub fn has(&self, category: Category) -> bool {
        self.findings.iter().any(|f| f.category == category)
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

/// Run every rule over `text`.
pub fn screen(text: &str) -> Screening {
    let truncated = text.len() > MAX_SCREENED_BYTES;
    let text = prefix_at_boundary(text, MAX_SCREENED_BYTES);
    let mut findings = Vec::new();
    let mut push = |rule: &str, category: Category, span: Range<usize>, excerpt: String| {
        findings.push(Finding {
            rule: rule.to_string(),
            category,
            start: span.start,
            end: span.end,
            excerpt,
        });
    };

    for run in hidden::hidden_runs(text) {
        let excerpt = match &run.decoded {
            Some(decoded) => format!("tag characters spelling {decoded:?}"),
            None => excerpt_of(text, run.span.clone()),
        };
        push(run.kind.rule_id(), Category::HiddenText, run.span, excerpt);
    }
    for link in links::link_findings(text) {
        let excerpt = excerpt_of(text, link.span.clone());
        push(
            link.problem.rule_id(),
            Category::Phishing,
            link.span,
            excerpt,
        );
    }
    for blob in blobs::blob_findings(text) {
        let rule = match blob.kind {
            blobs::BlobKind::Script => "malware.base64-script",
            blobs::BlobKind::Executable => "malware.base64-executable",
        };
        let excerpt = format!("decodes to {:?}", blob.decoded_excerpt);
        push(rule, Category::Malware, blob.span, excerpt);
    }

    let plain = normalise::normalise(text, false);
    for word in &plain.mixed_script_words {
        let excerpt = excerpt_of(text, word.clone());
        push(
            "unicode.mixed-script",
            Category::HiddenText,
            word.clone(),
            excerpt,
        );
    }
    let leet = normalise::normalise(text, true);
    let views: Vec<&normalise::Normalised> = if leet.text == plain.text {
        vec![&plain]
    } else {
        vec![&plain, &leet]
    };
    for rule in rules::rules() {
        for (index, view) in views.iter().enumerate() {
            if index > 0 && !rule.leet {
                continue;
            }
            for m in rule.regex.find_iter(&view.text) {
                if m.range().is_empty() {
                    continue;
                }
                if rule.negatable && rules::is_negated(&view.text, m.start(), m.end()) {
                    continue;
                }
                let span = view.original_span(m.range());
                let excerpt = excerpt_of(text, span.clone());
                push(rule.id, rule.category, span, excerpt);
            }
        }
    }

    // One finding per rule and place: several phrasings (or both views) can match the same bytes.
    findings.sort_by(|a, b| (a.start, &a.rule, a.end).cmp(&(b.start, &b.rule, b.end)));
    let mut kept: Vec<Finding> = Vec::with_capacity(findings.len());
    for f in findings {
        let overlaps = kept
            .iter()
            .any(|k| k.rule == f.rule && k.start < f.end && f.start < k.end);
        if !overlaps {
            kept.push(f);
        }
    }
    Screening {
        findings: kept,
        truncated,
    }
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
pub fn description_texts(payment_required: &Value) -> Vec<SourcedText> {
    let mut texts = Vec::new();
    let push = |texts: &mut Vec<SourcedText>, source: String, value: Option<&Value>| {
        if let Some(text) = value.and_then(Value::as_str)
            && !text.trim().is_empty()
        {
            texts.push(SourcedText::new(source, text));
        }
    };
    push(
        &mut texts,
        "resource.description".into(),
        payment_required.pointer("/resource/description"),
    );
    push(&mut texts, "error".into(), payment_required.get("error"));
    if let Some(accepts) = payment_required.get("accepts").and_then(Value::as_array) {
        for (i, entry) in accepts.iter().enumerate() {
            push(
                &mut texts,
                format!("accepts[{i}].description"),
                entry.get("description"),
            );
            if let Some(schema) = entry.get("outputSchema") {
                collect_descriptions(schema, &format!("accepts[{i}].outputSchema"), &mut texts);
            }
        }
    }
    if let Some(bazaar) = payment_required.pointer("/extensions/bazaar") {
        collect_descriptions(bazaar, "extensions.bazaar", &mut texts);
    }
    texts
}

/// Every string under a key named `description` (or `summary`, `title`), depth-first.
fn collect_descriptions(value: &Value, path: &str, texts: &mut Vec<SourcedText>) {
    // Bounded: a hostile schema nests deeply; past this depth nothing is screened and that is fine
    // because nothing a client displays lives that deep.
    fn walk(value: &Value, path: &str, depth: usize, texts: &mut Vec<SourcedText>) {
        if depth > 32 {
            return;
        }
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let child_path = format!("{path}.{key}");
                    match child {
                        Value::String(text)
                            if matches!(key.as_str(), "description" | "summary" | "title")
                                && !text.trim().is_empty() =>
                        {
                            texts.push(SourcedText::new(child_path, text.clone()));
                        }
                        _ => walk(child, &child_path, depth + 1, texts),
                    }
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, &format!("{path}[{i}]"), depth + 1, texts);
                }
            }
            _ => {}
        }
    }
    walk(value, path, 0, texts);
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
pub fn declared_headers(payment_required: &Value) -> Vec<DeclaredHeader> {
    let mut headers = Vec::new();
    if let Some(map) = payment_required
        .pointer("/extensions/bazaar/info/input/headers")
        .and_then(Value::as_object)
    {
        for name in map.keys() {
            headers.push(DeclaredHeader {
                name: name.clone(),
                needed: true,
            });
        }
    }
    if let Some(accepts) = payment_required.get("accepts").and_then(Value::as_array) {
        for entry in accepts {
            let input = entry.pointer("/outputSchema/input");
            let fields =
                input.and_then(|i| i.get("headerFields").or_else(|| i.get("header_fields")));
            if let Some(map) = fields.and_then(Value::as_object) {
                for (name, definition) in map {
                    let needed = definition.get("required") != Some(&Value::Bool(false));
                    headers.push(DeclaredHeader {
                        name: name.clone(),
                        needed,
                    });
                }
            }
        }
    }
    headers
}

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

struct Screened<'a> {
    texts: &'a [SourcedText],
    screenings: Vec<Screening>,
}

fn screen_all(texts: &[SourcedText]) -> Screened<'_> {
    Screened {
        texts,
        screenings: texts.iter().map(|t| screen(&t.text)).collect(),
    }
}

impl Screened<'_> {
    fn findings_in(&self, categories: &[Category]) -> Vec<SourcedFinding<'_>> {
        self.texts
            .iter()
            .zip(&self.screenings)
            .flat_map(|(text, screening)| {
                screening
                    .findings
                    .iter()
                    .filter(|f| categories.contains(&f.category))
                    .map(move |finding| SourcedFinding {
                        source: &text.source,
                        finding,
                    })
            })
            .collect()
    }

    fn screened_detail(&self) -> Value {
        Value::Array(
            self.texts
                .iter()
                .zip(&self.screenings)
                .map(|(text, screening)| {
                    json!({
                        "source": text.source,
                        "bytes": text.text.len(),
                        "sha256": hex::encode(Sha256::digest(text.text.as_bytes())),
                        "truncated": screening.truncated,
                    })
                })
                .collect(),
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

fn summarise(findings: &[SourcedFinding<'_>]) -> String {
    let first = describe(&findings[0]);
    match findings.len() {
        1 => first,
        n => format!("{first} (and {} more)", n - 1),
    }
}

const UNSAFE_CATEGORIES: &[Category] = &[
    Category::Injection,
    Category::HiddenText,
    Category::Phishing,
    Category::Malware,
];

fn unsafe_text_conclusion(texts: &[SourcedText], what: &str) -> Conclusion {
    // Nothing published is nothing unsafe: the check passes, and the receipt says it saw no text.
    if texts.iter().all(|t| t.text.trim().is_empty()) {
        return Conclusion::pass(format!("no {what} text published: nothing to screen"))
            .with_detail(json!({"screened": [], "findings": []}));
    }
    let screened = screen_all(texts);
    let findings = screened.findings_in(UNSAFE_CATEGORIES);
    let detail = json!({
        "screened": screened.screened_detail(),
        "findings": findings,
    });
    let total: usize = texts.iter().map(|t| t.text.len()).sum();
    if findings.is_empty() {
        Conclusion::pass(format!(
            "{} {what} text(s), {total} bytes: no injection, hidden text, phishing or malware",
            texts.len()
        ))
        .with_detail(detail)
    } else {
        Conclusion::fail(summarise(&findings)).with_detail(detail)
    }
}

/// S2: screen the description and docs texts (see [`description_texts`]; add a docs page's text
/// as a `docs` source). Fails on injection, hidden text, phishing or malware; passes otherwise,
/// including when no text was published at all.
pub fn screen_description(texts: &[SourcedText]) -> Conclusion {
    unsafe_text_conclusion(texts, "description")
}

/// S3: screen the text of paid outputs. Same rules and outcomes as S2 (a caller reports
/// `unmeasured` itself when there was no paid output; an output without text passes).
pub fn screen_output(texts: &[SourcedText]) -> Conclusion {
    unsafe_text_conclusion(texts, "output")
}

/// S4: fail when the texts ask for a secret (private key, seed phrase, password, API key, auth
/// header) or when a declared input header that carries a credential is marked as needed.
pub fn screen_secret_asks(texts: &[SourcedText], headers: &[DeclaredHeader]) -> Conclusion {
    let screened = screen_all(texts);
    let findings = screened.findings_in(&[Category::SecretAsk]);
    let secret_headers: Vec<&DeclaredHeader> = headers
        .iter()
        .filter(|h| h.needed && is_secret_header(&h.name))
        .collect();
    let detail = json!({
        "screened": screened.screened_detail(),
        "findings": findings,
        "declared_headers": headers,
        "secret_headers": secret_headers,
    });
    if let Some(header) = secret_headers.first() {
        let more = match (secret_headers.len() - 1, findings.len()) {
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
        return Conclusion::fail(summarise(&findings)).with_detail(detail);
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
