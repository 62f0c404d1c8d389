//! C1, C2, C4, C5 and the pure half of C3: conformance of the 402. Pure functions from what the
//! parser made of a response to a [`Conclusion`] whose detail names every deviation by its code.
//!
//! Decisions where the rubric is silent (kept consistent with the check definitions):
//! - C1 measures the *published* shape. Lenient decoding lets us read more than a strict client
//!   would, but reading it is not passing: URL-safe or unpadded base64, a string `x402Version`,
//!   a v1 object in the header or a v2 object only in the body all fail C1, with their codes. A
//!   broken `PAYMENT-REQUIRED` header fails C1 even beside a valid v1 body (v2 clients read the
//!   header first).
//! - C2 counts only its five rules (scheme, network, amount, payTo, maxTimeoutSeconds) and the
//!   entry's asset being present and an address; other deviations (a lower-case asset, a
//!   missing `extra.name`) are listed as notes and do not fail it. No entries at all fails C2.
//!   For a non-EVM network (e.g. Solana) payTo is checked as that network's address form.
//!   Solana entries add the exact SVM scheme's rules: payTo, the mint and `extra.feePayer` are
//!   base58 of 32 bytes, the fee payer is present, `extra.memo` holds at most 256 bytes, and the
//!   network is one of the three clusters (another `solana:` reference is `network.unknown_solana`).
//!   Whether the mint is the cluster's USDC is C3's question, as the asset's canonicality is on
//!   EVM: C3 is where the tokens the operator declared are known.
//! - C2 and C5 fail, not `na`, when a response arrived without any PaymentRequired: the endpoint
//!   offers nothing well-formed and nothing discoverable.
//! - C4 compares the two decoded objects as JSON values (key order ignored, `1` and `1.0` differ),
//!   exactly as sent; a v2 header beside a different v1 body fails.
//! - C5 v1 reads the first entry that carries an `outputSchema`.

use std::collections::{HashMap, HashSet};

use alloy::primitives::{Address, B256};
use serde_json::{Map, Value, json};

use crate::budget::{
    MAX_ACCEPTS_ENTRIES, MAX_RECEIPT_DEVIATIONS, MAX_REGEX_BACKTRACK, MAX_REGEX_BYTES,
    MAX_SCHEMA_VALUES, MAX_SCHEMA_WORK,
};
use crate::evidence::Conclusion;
use crate::x402::eip712::TokenDomain;
use crate::x402::network::canonical_usdc;
use crate::x402::types::{
    Deviation, Parsed402, PaymentRequired, Requirement, Source, printable_prefix,
};

/// Codes that make C1 fail (besides an entry that is not an object, and for v1 an entry without
/// its `resource`).
const C1_CODES: &[&str] = &[
    "header.empty",
    "header.too_large",
    "header.too_deep",
    "header.too_complex",
    "header.duplicate_disagree",
    "header.bad_base64",
    "header.bad_json",
    "header.not_object",
    "header.base64_url_safe",
    "header.base64_unpadded",
    "header.version_not_2",
    "body.v2_without_header",
    "x402Version.missing",
    "x402Version.string",
    "x402Version.not_integer",
    "x402Version.unsupported",
    "resource.missing",
    "resource.not_object",
    "resource.url.missing",
    "resource.url.not_string",
    "accepts.missing",
    "accepts.not_array",
    "accepts.empty",
    "accepts.too_many",
];

/// Entry fields whose deviations fail C2 (`""` is the entry itself, e.g. not an object).
const C2_FIELDS: &[&str] = &[
    "",
    "scheme",
    "network",
    "amount",
    "payTo",
    "maxTimeoutSeconds",
];

fn is_c1_deviation(deviation: &Deviation, version: u8) -> bool {
    if C1_CODES.contains(&deviation.code.as_str())
        || crate::x402::mcp::C1_CODES.contains(&deviation.code.as_str())
    {
        return true;
    }
    match deviation.entry_field() {
        Some((_, "")) => true,
        Some((_, "resource")) => version == 1,
        _ => false,
    }
}

fn is_c2_deviation(deviation: &Deviation) -> bool {
    if matches!(
        deviation.code.as_str(),
        "accepts.missing" | "accepts.not_array" | "accepts.empty" | "accepts.too_many"
    ) {
        return true;
    }
    match deviation.entry_field() {
        Some((_, "asset")) => !deviation.code.ends_with(".not_checksummed"),
        // The exact SVM scheme's own fields: a client cannot build the transaction without the
        // fee payer, and must carry the memo.
        Some((_, "extra")) => C2_SOLANA_EXTRA
            .iter()
            .any(|field| deviation.code.contains(field)),
        Some((_, field)) => C2_FIELDS.contains(&field),
        None => false,
    }
}

/// `extra` fields whose deviations fail C2 (only Solana entries are read for them).
const C2_SOLANA_EXTRA: &[&str] = &[".extra.feePayer.", ".extra.memo."];

/// C1, PaymentRequired parses: `x402Version`, `resource` and a non-empty `accepts`, from the v2
/// header or the v1 body. `response_arrived` is false when we got no HTTP response at all.
pub fn c1(parsed: &Parsed402, response_arrived: bool) -> Conclusion {
    if !response_arrived {
        return Conclusion::unmeasured("no response arrived, so there was no 402 to read");
    }
    let Some(required) = &parsed.required else {
        let summary = if parsed.has_deviation("header.duplicate_disagree") {
            "the PAYMENT-REQUIRED headers disagree, so no quote is read"
        } else {
            "no PaymentRequired in the PAYMENT-REQUIRED header or the body"
        };
        return failed(summary, &parsed.deviations, &[]).with_detail(detail(
            parsed,
            &parsed.deviations,
            &[],
        ));
    };
    let (counted, notes): (Vec<Deviation>, Vec<Deviation>) = parsed
        .deviations
        .iter()
        .cloned()
        .partition(|d| is_c1_deviation(d, required.x402_version));
    let base = detail(parsed, &counted, &notes);
    if counted.is_empty() {
        let carrier = match parsed.source {
            Source::Header => "the PAYMENT-REQUIRED header",
            Source::McpResult => "the MCP tool result",
            Source::McpError => "the draft MCP -32402 error",
            _ => "the v1 body",
        };
        Conclusion::pass(format!(
            "x402 v{} PaymentRequired from {carrier}: {} accepts entr{}, resource {}",
            required.x402_version,
            required.accepts.len(),
            if required.accepts.len() == 1 {
                "y"
            } else {
                "ies"
            },
            printable_prefix(required.resource_url().unwrap_or("(none)"), 200)
        ))
        .with_detail(base)
    } else {
        failed(
            "the PaymentRequired departs from the published shape",
            &counted,
            &notes,
        )
        .with_detail(base)
    }
}

/// C2, requirements well-formed: every entry has a CAIP-2 network (v1: or a known v1 name), an
/// amount that is a decimal integer string, an EIP-55 checksummed payTo, `maxTimeoutSeconds` in
/// 30..=3600 and a known scheme.
pub fn c2(required: &PaymentRequired) -> Conclusion {
    let (mut counted, notes): (Vec<Deviation>, Vec<Deviation>) = required
        .deviations
        .iter()
        .filter(|d| d.entry_field().is_some() || d.code.starts_with("accepts."))
        .cloned()
        .partition(is_c2_deviation);
    // Signed offers (`offer-receipt`): one malformed, badly signed or committing to terms no
    // entry quotes is a requirement that is not what it claims (`probes/C2.md`).
    let offers = crate::x402::offer_receipt::offers(required.extensions.as_ref());
    if let Some(offers) = &offers {
        counted.extend(crate::x402::offer_receipt::offer_deviations(
            offers,
            &required.accepts,
        ));
    }
    let mut detail = Map::new();
    detail.insert("entries".into(), json!(required.accepts.len()));
    if required.accepts_sent > required.accepts.len() {
        detail.insert("entries_sent".into(), json!(required.accepts_sent));
    }
    put_deviations(&mut detail, "deviations", &counted);
    put_deviations(&mut detail, "notes", &notes);
    if let Some(offers) = offers {
        detail.insert("signed_offers".into(), json!(offers));
    }
    let detail = Value::Object(detail);
    if counted.is_empty() {
        let entries = match required.accepts.len() {
            1 => "the accepts entry is".to_string(),
            n => format!("all {n} accepts entries are"),
        };
        Conclusion::pass(format!("{entries} well-formed")).with_detail(detail)
    } else {
        failed("requirements are not well-formed", &counted, &notes).with_detail(detail)
    }
}

/// C2 from a whole parse: unmeasured without a response, fail without a PaymentRequired.
pub fn c2_of(parsed: &Parsed402, response_arrived: bool) -> Conclusion {
    match (&parsed.required, response_arrived) {
        (_, false) => Conclusion::unmeasured("no response arrived, so there were no requirements"),
        (Some(required), true) => c2(required),
        (None, true) => missing_payment_required(parsed),
    }
}

/// What was read from the token contract through our RPC. A field is `None` when the call
/// reverted or returned nothing usable (the token lacks it), which counts against the endpoint;
/// an RPC that could not be reached is `on_chain: None` in [`c3_compare`] instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenDomainSeen {
    pub name: Option<String>,
    pub version: Option<String>,
    pub domain_separator: Option<B256>,
}

/// C3's pure half, asset real: the asset is the canonical USDC of `chain_id` or a declared token,
/// `extra.name`/`extra.version` equal the token's `name()`/`version()`, and the token's
/// `DOMAIN_SEPARATOR()` equals the one computed from `extra` (so a signature would verify).
pub fn c3_compare(
    requirement: &Requirement,
    chain_id: u64,
    on_chain: Option<&TokenDomainSeen>,
    declared_assets: &[Address],
) -> Conclusion {
    let Some(seen) = on_chain else {
        return Conclusion::unmeasured("the token contract was not read (RPC unavailable)");
    };
    if let Some(network_chain) = requirement.chain_id()
        && network_chain != chain_id
    {
        return Conclusion::unmeasured(format!(
            "the requirement is on chain {network_chain} but the token was read on chain {chain_id}"
        ));
    }
    let at = |field: &str| format!("accepts[{}].{field}", requirement.index);
    let mut problems = Vec::new();
    let Some(asset) = requirement.asset_address() else {
        problems.push(Deviation::new(
            format!("{}.not_address", at("asset")),
            format!("asset {:?} is not an EVM address", requirement.asset),
        ));
        return failed("the asset is not a token address", &problems, &[])
            .with_detail(json!({ "deviations": deviation_list(&problems) }));
    };
    let canonical = canonical_usdc(chain_id).filter(|(address, _, _)| *address == asset);
    let declared = declared_assets.contains(&asset);
    if canonical.is_none() && !declared {
        problems.push(Deviation::new(
            format!("{}.not_recognised", at("asset")),
            format!(
                "{} is neither the canonical USDC of chain {chain_id} nor a declared token",
                asset.to_checksum(None)
            ),
        ));
    }
    for (field, declared_value, seen_value) in [
        ("name", &requirement.extra_name, &seen.name),
        ("version", &requirement.extra_version, &seen.version),
    ] {
        match (declared_value, seen_value) {
            (None, _) => problems.push(Deviation::new(
                format!("{}.missing", at(&format!("extra.{field}"))),
                format!("no extra.{field} to compare with the token's {field}()"),
            )),
            (Some(_), None) => problems.push(Deviation::new(
                format!("token.{field}.unreadable"),
                format!("the token returned no {field}()"),
            )),
            (Some(ours), Some(theirs)) if ours != theirs => problems.push(Deviation::new(
                format!("{}.mismatch", at(&format!("extra.{field}"))),
                format!("extra.{field} is {ours:?}, the token's {field}() is {theirs:?}"),
            )),
            _ => {}
        }
    }
    let expected_separator = match (&requirement.extra_name, &requirement.extra_version) {
        (Some(name), Some(version)) => Some(
            TokenDomain {
                name: name.clone(),
                version: version.clone(),
                chain_id,
                verifying_contract: asset,
            }
            .separator(),
        ),
        _ => None,
    };
    match (expected_separator, seen.domain_separator) {
        (_, None) => problems.push(Deviation::new(
            "token.domain_separator.unreadable",
            "the token returned no DOMAIN_SEPARATOR()",
        )),
        (Some(ours), Some(theirs)) if ours != theirs => problems.push(Deviation::new(
            format!("{}.mismatch", at("extra.domain_separator")),
            format!(
                "the domain from extra hashes to {ours}, the token's DOMAIN_SEPARATOR() is {theirs}"
            ),
        )),
        _ => {}
    }
    let detail = json!({
        "asset": asset.to_checksum(None),
        "chain_id": chain_id,
        "canonical_usdc": canonical.is_some(),
        "declared": declared,
        "expected_domain_separator": expected_separator.map(|s| s.to_string()),
        "seen": {
            "name": seen.name,
            "version": seen.version,
            "domain_separator": seen.domain_separator.map(|s| s.to_string()),
        },
        "deviations": deviation_list(&problems),
    });
    if problems.is_empty() {
        let which = if canonical.is_some() {
            "canonical USDC"
        } else {
            "a declared token"
        };
        Conclusion::pass(format!(
            "{} is {which} on chain {chain_id}; name, version and domain separator match",
            asset.to_checksum(None)
        ))
        .with_detail(detail)
    } else {
        failed(
            "the asset or its EIP-712 domain does not check out",
            &problems,
            &[],
        )
        .with_detail(detail)
    }
}

/// C4, header and body agree: `na` unless there is both a decoded header object and a body that
/// is itself a PaymentRequired (has `x402Version` and `accepts`); then they must be equal.
pub fn c4(parsed: &Parsed402) -> Conclusion {
    // Over MCP the two carriers are the tool result's `structuredContent` and `content[0].text`.
    // (The HTTP texts are those stored results were derived with: they stay byte for byte.)
    let (absent, same, differ) = match parsed.source {
        Source::McpResult | Source::McpError => (
            "structuredContent and a PaymentRequired in content[0].text are not both present",
            "structuredContent and content[0].text decode to the same object",
            "structuredContent and content[0].text differ",
        ),
        _ => (
            "the header and a PaymentRequired body are not both present",
            "the PAYMENT-REQUIRED header and the body decode to the same object",
            "the PAYMENT-REQUIRED header and the body differ",
        ),
    };
    let (Some(header), Some(body)) = (&parsed.header_object, &parsed.body_object) else {
        return Conclusion::na(absent);
    };
    if body.get("x402Version").is_none() || body.get("accepts").is_none() {
        return Conclusion::na("the body is not itself a PaymentRequired");
    }
    // Both objects hold only the accepts entries within the budget; the rest were counted.
    let (header_unread, body_unread) = (parsed.header_accepts_unread, parsed.body_accepts_unread);
    let mut differences = Vec::new();
    collect_differences(header, body, String::new(), &mut differences);
    if differences.is_empty() && header_unread != body_unread {
        differences.push("/accepts (a different number of entries)".to_string());
    }
    if differences.is_empty() {
        if header_unread > 0 {
            return Conclusion::unmeasured(format!(
                "the first {MAX_ACCEPTS_ENTRIES} accepts entries agree; the other {header_unread} were not read, so not compared (C1 carries accepts.too_many)"
            ))
            .with_detail(json!({ "deviations": [], "entries_not_compared": header_unread }));
        }
        return Conclusion::pass(same).with_detail(json!({ "deviations": [] }));
    }
    let problems = vec![Deviation::new(
        "header_body.differ",
        format!("differ at {}", differences.join(", ")),
    )];
    failed(differ, &problems, &[]).with_detail(json!({
        "deviations": deviation_list(&problems),
        "paths": differences,
    }))
}

/// JSON-pointer paths where `a` and `b` differ (at most a few, to keep receipts short).
fn collect_differences(a: &Value, b: &Value, path: String, out: &mut Vec<String>) {
    const MAX_PATHS: usize = 20;
    const MAX_KEY_CHARS: usize = 60;
    if out.len() >= MAX_PATHS || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let shown = printable_prefix(key, MAX_KEY_CHARS);
                let child = format!("{path}/{}", shown.replace('~', "~0").replace('/', "~1"));
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => collect_differences(x, y, child, out),
                    _ if out.len() < MAX_PATHS => out.push(child),
                    _ => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                collect_differences(x, y, format!("{path}/{i}"), out);
            }
        }
        _ => out.push(if path.is_empty() { "/".into() } else { path }),
    }
}

/// C5, discovery schema. v2: `extensions.bazaar` with `info.input` and `info.output`, a `schema`
/// that compiles as JSON Schema (remote references are never fetched) and `info` valid against it.
/// v1: an entry's `outputSchema` with `input` and `output` objects.
pub fn c5(required: &PaymentRequired) -> Conclusion {
    let problems = if required.x402_version == 2 {
        bazaar_problems(required)
    } else {
        output_schema_problems(required)
    };
    let detail = json!({ "deviations": deviation_list(&problems) });
    if problems.is_empty() {
        let what = if required.x402_version == 2 {
            "the bazaar extension has input and output, and its schema compiles and validates them"
        } else {
            "the outputSchema has input and output objects"
        };
        Conclusion::pass(what).with_detail(detail)
    } else {
        failed("no valid discovery schema", &problems, &[]).with_detail(detail)
    }
}

/// C5 from a whole parse: unmeasured without a response, fail without a PaymentRequired.
pub fn c5_of(parsed: &Parsed402, response_arrived: bool) -> Conclusion {
    match (&parsed.required, response_arrived) {
        (_, false) => Conclusion::unmeasured("no response arrived, so there was no schema to read"),
        (Some(required), true) => c5(required),
        (None, true) => missing_payment_required(parsed),
    }
}

fn bazaar_problems(required: &PaymentRequired) -> Vec<Deviation> {
    let mut problems = Vec::new();
    let Some(bazaar) = required
        .extensions
        .as_ref()
        .and_then(|extensions| extensions.get("bazaar"))
    else {
        problems.push(Deviation::new(
            "extensions.bazaar.missing",
            "no bazaar extension (extensions.bazaar)",
        ));
        return problems;
    };
    let Some(bazaar) = bazaar.as_object() else {
        problems.push(Deviation::new(
            "extensions.bazaar.not_object",
            "extensions.bazaar is not an object",
        ));
        return problems;
    };
    let info = bazaar.get("info");
    match info {
        Some(Value::Object(info)) => {
            for part in ["input", "output"] {
                match info.get(part) {
                    Some(Value::Object(_)) => {}
                    None | Some(Value::Null) => problems.push(Deviation::new(
                        format!("extensions.bazaar.info.{part}.missing"),
                        format!("the bazaar info has no {part}"),
                    )),
                    Some(_) => problems.push(Deviation::new(
                        format!("extensions.bazaar.info.{part}.not_object"),
                        format!("the bazaar info's {part} is not an object"),
                    )),
                }
            }
        }
        None | Some(Value::Null) => problems.push(Deviation::new(
            "extensions.bazaar.info.missing",
            "the bazaar extension has no info",
        )),
        Some(_) => problems.push(Deviation::new(
            "extensions.bazaar.info.not_object",
            "the bazaar extension's info is not an object",
        )),
    }
    let Some(schema) = bazaar.get("schema").filter(|s| !s.is_null()) else {
        problems.push(Deviation::new(
            "extensions.bazaar.schema.missing",
            "the bazaar extension has no schema",
        ));
        return problems;
    };
    // `true` is a valid JSON Schema that accepts anything: it describes nothing to discover.
    if !schema.is_object() {
        problems.push(Deviation::new(
            "extensions.bazaar.schema.not_object",
            format!(
                "the schema is a JSON {}; a discovery schema is an object",
                crate::x402::parse::json_type(schema)
            ),
        ));
        return problems;
    }
    let scan = scan_schema(schema);
    if scan.values > MAX_SCHEMA_VALUES {
        problems.push(Deviation::new(
            "extensions.bazaar.schema.too_complex",
            format!(
                "the schema has more than {MAX_SCHEMA_VALUES} JSON values; it was not compiled"
            ),
        ));
        return problems;
    }
    let validator = match compiled(schema) {
        Ok(validator) => validator,
        Err(e) => {
            problems.push(Deviation::new(
                "extensions.bazaar.schema.invalid",
                format!("the schema is not a valid JSON Schema: {e}"),
            ));
            return problems;
        }
    };
    if let Some(info) = info.filter(|i| i.is_object()) {
        // Validation is exponential in the worst case: bound its work before doing it.
        if let Err(why) = validation_work(schema, &scan, info) {
            problems.push(Deviation::new(
                "extensions.bazaar.schema.too_complex",
                format!("info was not validated against the schema: {why}"),
            ));
            return problems;
        }
        let errors: Vec<String> = validator
            .iter_errors(info)
            .take(3)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        if !errors.is_empty() {
            problems.push(Deviation::new(
                "extensions.bazaar.info.does_not_validate",
                format!(
                    "info does not validate against the schema: {}",
                    errors.join("; ")
                ),
            ));
        }
    }
    problems
}

/// A schema compiled, or why it does not compile.
type Compiled = Result<std::sync::Arc<jsonschema::Validator>, String>;

/// Schemas compiled lately, by their exact JSON text: an endpoint sends the same schema with
/// every 402, and compiling it was most of C5's work in a run. The same text compiles to the
/// same validator, so what C5 concludes does not depend on what is kept here.
static COMPILED: std::sync::Mutex<Option<HashMap<Vec<u8>, Compiled>>> = std::sync::Mutex::new(None);

/// Schemas kept at most (then forgotten all at once).
const COMPILED_KEPT: usize = 256;

/// `schema` compiled offline as C5 compiles it (kept in [`COMPILED`]).
fn compiled(schema: &Value) -> Compiled {
    let text = serde_json::to_vec(schema).unwrap_or_default();
    if let Some(found) = COMPILED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|kept| kept.get(&text))
    {
        return found.clone();
    }
    // Offline: a `$ref` to anything outside the schema itself is an error, never a fetch.
    // Patterns run on a linear-time engine unless they need look-around or back-references,
    // which get a bounded number of backtracking steps. Formats are annotations here (as in
    // draft 2020-12): checking them is not what C5 asks.
    let patterns = jsonschema::PatternOptions::fancy_regex()
        .backtrack_limit(MAX_REGEX_BACKTRACK)
        .size_limit(MAX_REGEX_BYTES)
        .dfa_size_limit(MAX_REGEX_BYTES);
    let made: Compiled = jsonschema::options()
        .offline()
        .should_validate_formats(false)
        .with_pattern_options(patterns)
        .build(schema)
        .map(std::sync::Arc::new)
        .map_err(|e| e.to_string());
    let mut kept = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    let kept = kept.get_or_insert_with(HashMap::new);
    if kept.len() >= COMPILED_KEPT {
        kept.clear();
    }
    kept.insert(text, made.clone());
    made
}

/// What C5 needs to know about a schema before compiling it.
struct SchemaScan {
    /// JSON values in it, counted up to one past [`MAX_SCHEMA_VALUES`].
    values: usize,
    /// It names schema resources below its root (`$id`, anchors, or draft 4 `id`), so a `$ref`
    /// may not mean a JSON pointer from the root.
    nested_resources: bool,
}

fn scan_schema(schema: &Value) -> SchemaScan {
    fn walk(value: &Value, root: bool, draft4: bool, scan: &mut SchemaScan) {
        if scan.values > MAX_SCHEMA_VALUES {
            return;
        }
        scan.values += 1;
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let names_resource = matches!(
                        key.as_str(),
                        "$id" | "$anchor" | "$dynamicAnchor" | "$recursiveAnchor"
                    ) || (draft4 && key == "id" && child.is_string());
                    if names_resource && !root {
                        scan.nested_resources = true;
                    }
                    walk(child, false, draft4, scan);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, false, draft4, scan)),
            _ => {}
        }
    }
    let draft4 = schema
        .get("$schema")
        .and_then(Value::as_str)
        .is_some_and(|s| s.contains("draft-04"));
    let mut scan = SchemaScan {
        values: 0,
        nested_resources: false,
    };
    walk(schema, true, draft4, &mut scan);
    scan
}

/// The worst-case work of validating `instance` against `schema`, counted from the two documents
/// alone, or why it is over [`MAX_SCHEMA_WORK`] or cannot be bounded. Every application of a
/// schema node to an instance node counts, through every in-place applicator (`allOf`, `anyOf`,
/// `oneOf`, `not`, `if`/`then`/`else`, `$ref`) and every descending one (`properties`, `items`,
/// ...), as a validator that never short-circuits would do them; strings weigh by their length
/// (patterns scan them), and `const`, `enum` and `uniqueItems` by the instance's size. A cycle
/// that returns to the same schema node at the same instance node without descending is counted
/// once, as validators stop there too. Linear in the budget.
fn validation_work(schema: &Value, scan: &SchemaScan, instance: &Value) -> Result<u64, String> {
    if scan.nested_resources {
        return Err(
            "the schema names resources below its root ($id, anchors), whose references this tool does not follow"
                .into(),
        );
    }
    let mut work = SchemaWork {
        root: schema,
        spent: 0,
        active: HashSet::new(),
    };
    match work.apply(schema, instance) {
        Ok(()) => Ok(work.spent),
        Err(WorkStop::Budget) => Err(format!(
            "validating it could take more than {MAX_SCHEMA_WORK} steps (recursive or repeated subschemas)"
        )),
        Err(WorkStop::Unbounded(what)) => Err(format!(
            "it uses {what}, whose cost this tool does not bound"
        )),
    }
}

enum WorkStop {
    Budget,
    Unbounded(&'static str),
}

struct SchemaWork<'s> {
    root: &'s Value,
    spent: u64,
    /// The (schema node, instance node) pairs being applied, by address.
    active: HashSet<(usize, usize)>,
}

impl<'s> SchemaWork<'s> {
    fn spend(&mut self, units: u64) -> Result<(), WorkStop> {
        self.spent = self.spent.saturating_add(units);
        if self.spent > MAX_SCHEMA_WORK {
            return Err(WorkStop::Budget);
        }
        Ok(())
    }

    fn apply(&mut self, schema: &'s Value, instance: &Value) -> Result<(), WorkStop> {
        let key = (
            schema as *const Value as usize,
            instance as *const Value as usize,
        );
        if !self.active.insert(key) {
            return self.spend(1);
        }
        let result = self.apply_keywords(schema, instance);
        self.active.remove(&key);
        result
    }

    fn apply_keywords(&mut self, schema: &'s Value, instance: &Value) -> Result<(), WorkStop> {
        self.spend(1)?;
        if let Value::String(text) = instance {
            self.spend(text.len() as u64 / 64)?;
        }
        let Some(keywords) = schema.as_object() else {
            return Ok(());
        };
        if keywords.contains_key("const") || keywords.contains_key("uniqueItems") {
            let size = self.size_of(instance)?;
            self.spend(size)?;
        }
        if let Some(options) = keywords.get("enum").and_then(Value::as_array) {
            let size = self.size_of(instance)?;
            self.spend(size.saturating_add(options.len() as u64))?;
        }
        // `unevaluated*` needs the in-place applicators' annotations: count those twice.
        let passes = if keywords.contains_key("unevaluatedProperties")
            || keywords.contains_key("unevaluatedItems")
        {
            2
        } else {
            1
        };
        for _ in 0..passes {
            for (name, sub) in keywords {
                match name.as_str() {
                    "allOf" | "anyOf" | "oneOf" => {
                        for branch in sub.as_array().into_iter().flatten() {
                            self.apply(branch, instance)?;
                        }
                    }
                    "not" | "if" | "then" | "else" => self.apply(sub, instance)?,
                    "$ref" => {
                        let target = self.resolve(sub)?;
                        self.apply(target, instance)?;
                    }
                    "$dynamicRef" | "$recursiveRef" => {
                        return Err(WorkStop::Unbounded("dynamic references"));
                    }
                    "dependentSchemas" | "dependencies" if instance.is_object() => {
                        for dependent in sub.as_object().into_iter().flat_map(|m| m.values()) {
                            if !dependent.is_array() {
                                self.apply(dependent, instance)?;
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        for (name, sub) in keywords {
            match (name.as_str(), instance) {
                ("properties", Value::Object(fields)) => {
                    for (field, property) in sub.as_object().into_iter().flatten() {
                        if let Some(value) = fields.get(field) {
                            self.apply(property, value)?;
                        }
                    }
                }
                ("patternProperties", Value::Object(fields)) => {
                    for property in sub.as_object().into_iter().flat_map(|m| m.values()) {
                        for value in fields.values() {
                            self.apply(property, value)?;
                        }
                    }
                }
                ("additionalProperties" | "unevaluatedProperties", Value::Object(fields)) => {
                    for value in fields.values() {
                        self.apply(sub, value)?;
                    }
                }
                ("propertyNames", Value::Object(fields)) => {
                    for field in fields.keys() {
                        let name = Value::String(field.clone());
                        self.apply(sub, &name)?;
                    }
                }
                ("items" | "prefixItems", Value::Array(items)) if sub.is_array() => {
                    for (item, position) in items.iter().zip(sub.as_array().into_iter().flatten()) {
                        self.apply(position, item)?;
                    }
                }
                (
                    "items" | "additionalItems" | "unevaluatedItems" | "contains",
                    Value::Array(items),
                ) => {
                    for item in items {
                        self.apply(sub, item)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A `$ref` as a JSON pointer from the schema's root (`#`, `#/$defs/x`).
    fn resolve(&self, reference: &Value) -> Result<&'s Value, WorkStop> {
        let target = match reference.as_str() {
            Some("#") => Some(self.root),
            Some(r) => r
                .strip_prefix('#')
                .filter(|pointer| pointer.starts_with('/'))
                .and_then(|pointer| self.root.pointer(pointer)),
            None => None,
        };
        target.ok_or(WorkStop::Unbounded(
            "a $ref that is not a JSON pointer into the schema",
        ))
    }

    /// Values in `value`, counting no further than the work left.
    fn size_of(&self, value: &Value) -> Result<u64, WorkStop> {
        let left = MAX_SCHEMA_WORK.saturating_sub(self.spent);
        let mut count = 0u64;
        let mut stack = vec![value];
        while let Some(v) = stack.pop() {
            count += 1;
            if count > left {
                return Err(WorkStop::Budget);
            }
            match v {
                Value::Array(items) => stack.extend(items),
                Value::Object(map) => stack.extend(map.values()),
                Value::String(text) => count += text.len() as u64 / 64,
                _ => {}
            }
        }
        Ok(count)
    }
}

fn output_schema_problems(required: &PaymentRequired) -> Vec<Deviation> {
    let carrying = required
        .accepts
        .iter()
        .find(|r| r.entry.get("outputSchema").is_some_and(|s| !s.is_null()));
    let Some(requirement) = carrying else {
        return vec![Deviation::new(
            "accepts.outputSchema.missing",
            "no accepts entry carries an outputSchema",
        )];
    };
    let at = format!("accepts[{}].outputSchema", requirement.index);
    let Some(schema) = requirement
        .entry
        .get("outputSchema")
        .and_then(Value::as_object)
    else {
        return vec![Deviation::new(
            format!("{at}.not_object"),
            "outputSchema is not an object",
        )];
    };
    let mut problems = Vec::new();
    for part in ["input", "output"] {
        match schema.get(part) {
            Some(Value::Object(_)) => {}
            None | Some(Value::Null) => problems.push(Deviation::new(
                format!("{at}.{part}.missing"),
                format!("outputSchema has no {part}"),
            )),
            Some(_) => problems.push(Deviation::new(
                format!("{at}.{part}.not_object"),
                format!("outputSchema's {part} is not an object"),
            )),
        }
    }
    problems
}

fn missing_payment_required(parsed: &Parsed402) -> Conclusion {
    let mut detail = Map::new();
    put_deviations(&mut detail, "deviations", &parsed.deviations);
    failed(
        "no PaymentRequired in the response",
        &parsed.deviations,
        &[],
    )
    .with_detail(Value::Object(detail))
}

fn detail(parsed: &Parsed402, counted: &[Deviation], notes: &[Deviation]) -> Value {
    let mut detail = Map::new();
    detail.insert("source".into(), json!(parsed.source));
    detail.insert("version".into(), json!(parsed.version));
    put_deviations(&mut detail, "deviations", counted);
    put_deviations(&mut detail, "notes", notes);
    Value::Object(detail)
}

/// A receipt's list of deviations: the first [`MAX_RECEIPT_DEVIATIONS`], in the order found.
fn deviation_list(deviations: &[Deviation]) -> Value {
    Value::Array(
        deviations
            .iter()
            .take(MAX_RECEIPT_DEVIATIONS)
            .map(|d| json!({ "code": d.code, "message": d.message }))
            .collect(),
    )
}

/// `deviations` under `name` in a receipt's detail, and under `<name>_omitted` how many were not
/// kept (the outcome counts them all).
fn put_deviations(detail: &mut Map<String, Value>, name: &str, deviations: &[Deviation]) {
    detail.insert(name.into(), deviation_list(deviations));
    let omitted = deviations.len().saturating_sub(MAX_RECEIPT_DEVIATIONS);
    if omitted > 0 {
        detail.insert(format!("{name}_omitted"), json!(omitted));
    }
}

/// A fail whose one-line evidence names the codes (the first few; all are in the detail).
fn failed(summary: &str, counted: &[Deviation], notes: &[Deviation]) -> Conclusion {
    const SHOWN: usize = 6;
    let mut codes: Vec<&str> = counted
        .iter()
        .take(SHOWN)
        .map(|d| d.code.as_str())
        .collect();
    if counted.len() > SHOWN {
        codes.push("...");
    }
    let mut evidence = format!("{summary}: {}", codes.join(", "));
    if !notes.is_empty() {
        evidence.push_str(&format!(" (+{} other deviation(s) noted)", notes.len()));
    }
    Conclusion::fail(evidence)
}

/// The codes a conclusion's detail names as counted against the endpoint.
pub fn deviation_codes(conclusion: &Conclusion) -> Vec<String> {
    conclusion
        .detail
        .get("deviations")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|d| d.get("code").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Outcome;
    use crate::x402::parse_payment_required;
    use base64::Engine as _;

    fn c5_for_schema(schema: Value) -> Conclusion {
        let object = json!({
            "x402Version": 2,
            "resource": {"url": "https://weather.example/forecast"},
            "accepts": [],
            "extensions": {"bazaar": {
                "info": {"input": {"type": "http", "method": "GET"}, "output": {"type": "json"}},
                "schema": schema
            }}
        });
        let header = base64::engine::general_purpose::STANDARD
            .encode(serde_json::to_vec(&object).expect("serialise"));
        let parsed = parse_payment_required(402, &[("payment-required".into(), header)], b"");
        c5_of(&parsed, true)
    }

    #[test]
    fn hostile_schemas_are_judged_not_fetched() {
        let cases = [
            // Reference cycles compile and terminate.
            (json!({"$ref": "#"}), Outcome::Pass, None),
            (
                json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                       "properties": {"input": {"$ref": "#/$defs/a"}}}),
                Outcome::Pass,
                None,
            ),
            // Nothing outside the schema is ever read.
            (
                json!({"$ref": "file:///etc/hostname"}),
                Outcome::Fail,
                Some("extensions.bazaar.schema.invalid"),
            ),
            (
                json!({"$ref": "https://schemas.weather.example/b.json"}),
                Outcome::Fail,
                Some("extensions.bazaar.schema.invalid"),
            ),
            (
                json!({"$schema": "https://meta.weather.example/custom", "type": "object"}),
                Outcome::Fail,
                Some("extensions.bazaar.schema.invalid"),
            ),
            (
                json!(true),
                Outcome::Fail,
                Some("extensions.bazaar.schema.not_object"),
            ),
            (
                json!({"properties": {"input": {"properties": {"method": {"pattern": "^(a+)+$"}}}}}),
                Outcome::Fail,
                Some("extensions.bazaar.info.does_not_validate"),
            ),
        ];
        for (schema, outcome, code) in cases {
            let conclusion = c5_for_schema(schema.clone());
            assert_eq!(
                conclusion.outcome, outcome,
                "{schema}: {}",
                conclusion.evidence
            );
            let codes = deviation_codes(&conclusion);
            assert_eq!(codes.first().map(String::as_str), code, "{schema}");
        }
    }

    #[test]
    fn c4_names_the_differing_paths() {
        let header = json!({"x402Version": 2, "accepts": [{"amount": "1"}], "extra": 1});
        let body = json!({"accepts": [{"amount": "2"}], "x402Version": 2, "other": true});
        let parsed = Parsed402 {
            source: Source::Header,
            version: Some(2),
            header_object: Some(header),
            body_object: Some(body),
            header_accepts_unread: 0,
            body_accepts_unread: 0,
            required: None,
            deviations: Vec::new(),
        };
        let conclusion = c4(&parsed);
        assert_eq!(conclusion.outcome, Outcome::Fail);
        assert_eq!(
            conclusion.detail["paths"],
            json!(["/accepts/0/amount", "/extra", "/other"])
        );
    }
}
