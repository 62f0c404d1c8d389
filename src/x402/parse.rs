//! Lenient parsing, strict reporting: read whatever an endpoint sent as far as it can be read, and
//! record every departure from the published shape as a [`Deviation`].
//!
//! Order of carriers (as the reference clients, made more tolerant): the v2 `PAYMENT-REQUIRED`
//! header, then the body as v2, then the body as v1. The body is only held against the server when
//! there is no usable header: with v2 the body is the server's own business.

use alloy::primitives::Address;
use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::bounded::{DecodeError, Decoded, decode_object};
use super::network::{AddressKind, address_kind, is_caip2, is_known_v1_name};
use super::solana::{MAX_MEMO_BYTES, SolanaAddress, SolanaNetwork};
use super::types::{
    Deviation, Parsed402, PaymentRequired, Requirement, Resource, SettlementResponse, Source,
    is_decimal_integer, printable_prefix,
};
pub use crate::budget::{MAX_ACCEPTS_ENTRIES, MAX_BODY_BYTES, MAX_HEADER_DECODED_BYTES};
use crate::budget::{MAX_JSON_DEPTH, MAX_JSON_VALUES, MAX_QUOTED_VALUE_CHARS};
use crate::evidence::http::HttpResponse;

/// Schemes this build knows. Other schemes are recorded (`scheme.unknown`) and not paid.
pub const KNOWN_SCHEMES: &[&str] = &["exact", "upto"];
/// v2 `extra.assetTransferMethod` values of the exact EVM scheme.
pub const KNOWN_TRANSFER_METHODS: &[&str] = &["eip3009", "permit2", "erc7710"];
/// `maxTimeoutSeconds` outside this range is a deviation (C2).
pub const MAX_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 30..=3600;

/// Header names (lower case).
pub const PAYMENT_REQUIRED_HEADER: &str = "payment-required";
pub const PAYMENT_RESPONSE_HEADER: &str = "payment-response";
pub const X_PAYMENT_RESPONSE_HEADER: &str = "x-payment-response";

/// The parse of one response, kept with what it was made from. The prober parses its first
/// sample's 402 (for the documented request and the chain reads) and hands that parse on; the
/// checks take it instead of parsing the same bytes again, and only for a response with the very
/// status, headers and body it was made from ([`ResponseParse::into_parse_of`]): what they
/// conclude stays a function of the observation alone.
#[derive(Debug)]
pub struct ResponseParse {
    status: u16,
    headers: Vec<(String, String)>,
    body_sha256: String,
    parsed: Parsed402,
}

impl ResponseParse {
    pub fn of(response: &HttpResponse) -> ResponseParse {
        ResponseParse {
            status: response.status,
            headers: response.headers.clone(),
            body_sha256: response.body_sha256.clone(),
            parsed: parse_payment_required(response.status, &response.headers, &response.body),
        }
    }

    pub fn parsed(&self) -> &Parsed402 {
        &self.parsed
    }

    /// The parse, when `response` has the status, headers and body (held here, not stored apart)
    /// it was made from: what [`parse_payment_required`] would make of it. `None` otherwise.
    pub fn into_parse_of(self, response: &HttpResponse) -> Option<Parsed402> {
        let same = !response.body_stored_apart
            && response.status == self.status
            && response.body_sha256 == self.body_sha256
            && response.headers == self.headers;
        same.then_some(self.parsed)
    }
}

/// Read an unpaid response. `headers` are `(name, value)` pairs; names are compared without regard
/// to case. Never panics and never fails: what could not be read is in `deviations`. The work is
/// linear in the input and bounded by `crate::budget`: at most [`MAX_ACCEPTS_ENTRIES`] entries
/// are read, an object nested too deep or with too many values is refused whole, and every bound
/// reached is a deviation.
pub fn parse_payment_required(status: u16, headers: &[(String, String)], body: &[u8]) -> Parsed402 {
    let mut deviations = Vec::new();
    if status != 402 {
        deviations.push(Deviation::new(
            "status.not_402",
            format!("HTTP status {status}; an unpaid x402 call answers 402"),
        ));
    }

    let header = match read_header_object(headers, &mut deviations) {
        HeaderRead::Usable(decoded) => Some(decoded),
        HeaderRead::Absent | HeaderRead::Unusable => None,
        // Two quotes at once: which one a client pays depends on the client. Neither is read, and
        // the body is not offered in their place.
        HeaderRead::Disagree => {
            return Parsed402::nothing(deviations);
        }
    };
    let body = read_body_object(body, header.is_none(), &mut deviations);

    let header_accepts_unread = header.as_ref().map_or(0, Decoded::accepts_unread);
    let body_accepts_unread = body.as_ref().map_or(0, Decoded::accepts_unread);

    let chosen = match (&header, &body) {
        (Some(decoded), _) => Some((Carrier::Header, decoded)),
        (None, Some(decoded)) if looks_like_payment_required(&decoded.object) => {
            Some((Carrier::Body, decoded))
        }
        (None, _) => None,
    };
    // The quote is read from the chosen object in place; the objects themselves are then moved,
    // whole, into what the checks compare (no copy of either).
    let read = chosen.map(|(carrier, decoded)| (carrier, interpret(carrier, decoded)));
    let header_object = header.map(|d| Value::Object(d.object));
    let body_object = body.map(|d| Value::Object(d.object));

    let Some((carrier, required)) = read else {
        deviations.push(Deviation::new(
            "payment_required.missing",
            "no usable PAYMENT-REQUIRED header and no PaymentRequired (x402Version, accepts) in the body",
        ));
        return Parsed402 {
            source: Source::None,
            version: None,
            header_object,
            body_object,
            header_accepts_unread,
            body_accepts_unread,
            required: None,
            deviations,
        };
    };

    let source = match (carrier, required.x402_version) {
        (Carrier::Header, _) => Source::Header,
        (Carrier::Body, 2) => Source::BodyV2,
        (Carrier::Body, _) => Source::BodyV1,
    };
    match (carrier, required.x402_version) {
        (Carrier::Header, 1) => deviations.push(Deviation::new(
            "header.version_not_2",
            "the PAYMENT-REQUIRED header carries a v1 object; the header is v2's carrier",
        )),
        (Carrier::Body, 2) => deviations.push(Deviation::new(
            "body.v2_without_header",
            "a v2 PaymentRequired only in the body; v2 clients read it from the PAYMENT-REQUIRED header",
        )),
        _ => {}
    }
    deviations.extend(required.deviations.iter().cloned());
    Parsed402 {
        source,
        version: Some(required.x402_version),
        header_object,
        body_object,
        header_accepts_unread,
        body_accepts_unread,
        required: Some(required),
        deviations,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Carrier {
    Header,
    Body,
}

/// A body object is taken for a PaymentRequired when it has either of the two keys only a
/// PaymentRequired has; `{}` or `{"error": ...}` is not one.
pub(crate) fn looks_like_payment_required(object: &Map<String, Value>) -> bool {
    object.contains_key("x402Version") || object.contains_key("accepts")
}

/// `text` as a quoted Rust string of at most [`MAX_QUOTED_VALUE_CHARS`] characters, for deviation
/// messages: a 60 KiB payee is quoted by its start, never copied whole.
pub(crate) fn quoted(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_VALUE_CHARS) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &text[..cut], text.len()),
    }
}

/// Every value of the header with this name, ignoring case, in order.
fn header_values<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// What the `PAYMENT-REQUIRED` header(s) gave.
enum HeaderRead {
    Absent,
    /// Present, but not a readable object (the reason is recorded).
    Unusable,
    Usable(Decoded),
    /// Several headers that do not say the same thing (recorded as `header.duplicate_disagree`).
    Disagree,
}

/// Decode the `PAYMENT-REQUIRED` header to a JSON object. Repeated headers (in any letter case)
/// that all decode to the same object are read once, with a `header.duplicate` note; repeated
/// headers that do not are `header.duplicate_disagree`, and none of them is read.
fn read_header_object(headers: &[(String, String)], deviations: &mut Vec<Deviation>) -> HeaderRead {
    let values = header_values(headers, PAYMENT_REQUIRED_HEADER);
    let Some(first) = values.first() else {
        return HeaderRead::Absent;
    };
    if values.len() > 1 {
        if let Some(why) = disagreement(&values) {
            deviations.push(Deviation::new(
                "header.duplicate_disagree",
                format!(
                    "{} PAYMENT-REQUIRED headers that do not say the same thing ({why}): clients would be shown different requirements, so none is read",
                    values.len()
                ),
            ));
            return HeaderRead::Disagree;
        }
        deviations.push(Deviation::new(
            "header.duplicate",
            format!(
                "{} PAYMENT-REQUIRED headers, all decoding to the same object; the first was read",
                values.len()
            ),
        ));
    }
    match decode_header_object(first, deviations) {
        Some(decoded) => HeaderRead::Usable(decoded),
        None => HeaderRead::Unusable,
    }
}

/// Why repeated header values do not say the same thing, or `None` when they do: the same text,
/// or objects equal as JSON values with every `accepts` entry read (entries past the budget
/// cannot be compared, so only identical text agrees then).
fn disagreement(values: &[&str]) -> Option<String> {
    let first = values[0].trim();
    if values.iter().all(|v| v.trim() == first) {
        return None;
    }
    let mut scratch = Vec::new();
    let decode = |text: &str, scratch: &mut Vec<Deviation>| {
        decode_header_value(text, "header", scratch).and_then(|bytes| decode_object(&bytes).ok())
    };
    let Some(reference) = decode(first, &mut scratch) else {
        return Some("the first does not decode to an object".into());
    };
    for (n, value) in values.iter().enumerate().skip(1) {
        let Some(other) = decode(value, &mut scratch) else {
            return Some(format!("header {} does not decode to an object", n + 1));
        };
        if reference.accepts_unread() > 0 || other.accepts_unread() > 0 {
            return Some(format!(
                "header {} is other text with more accepts entries than can be compared",
                n + 1
            ));
        }
        if other.object != reference.object {
            let keys: Vec<String> = reference
                .object
                .keys()
                .chain(other.object.keys())
                .filter(|k| reference.object.get(*k) != other.object.get(*k))
                .take(5)
                .map(|k| printable_prefix(k, 40))
                .collect();
            return Some(format!(
                "headers 1 and {} differ in {}",
                n + 1,
                keys.join(", ")
            ));
        }
    }
    None
}

/// Decode one header value to a JSON object within the budget.
fn decode_header_object(text: &str, deviations: &mut Vec<Deviation>) -> Option<Decoded> {
    let bytes = decode_header_value(text, "header", deviations)?;
    decoded_or_deviation(
        decode_object(&bytes),
        "header",
        "the decoded PAYMENT-REQUIRED header",
        deviations,
    )
}

/// The decoded object, or the deviation saying why there is none (`<carrier>.bad_json`,
/// `.not_object`, `.too_deep`, `.too_complex`).
fn decoded_or_deviation(
    decoded: Result<Decoded, DecodeError>,
    carrier: &str,
    what: &str,
    deviations: &mut Vec<Deviation>,
) -> Option<Decoded> {
    let (code, message) = match decoded {
        Ok(decoded) => return Some(decoded),
        Err(DecodeError::Syntax(e)) => ("bad_json", format!("{what} is not JSON: {e}")),
        Err(DecodeError::NotObject(kind)) => (
            "not_object",
            format!("{what} is a JSON {kind}, not an object"),
        ),
        Err(DecodeError::TooDeep) => (
            "too_deep",
            format!("{what} nests deeper than {MAX_JSON_DEPTH} levels; nothing of it was read"),
        ),
        Err(DecodeError::TooComplex) => (
            "too_complex",
            format!(
                "{what} holds more than {MAX_JSON_VALUES} JSON values (besides accepts entries past the first {MAX_ACCEPTS_ENTRIES}); nothing of it was read"
            ),
        ),
    };
    deviations.push(Deviation::new(format!("{carrier}.{code}"), message));
    None
}

/// Decode a base64 header value leniently: standard or URL-safe alphabet, with or without padding.
/// Anything but standard padded base64 is recorded under `code_prefix`.
pub(crate) fn decode_header_value(
    text: &str,
    code_prefix: &str,
    deviations: &mut Vec<Deviation>,
) -> Option<Vec<u8>> {
    let text = text.trim();
    if text.is_empty() {
        deviations.push(Deviation::new(
            format!("{code_prefix}.empty"),
            "the header is present but empty",
        ));
        return None;
    }
    // Four characters carry three bytes; allow the padding slack before refusing unread.
    let max_encoded = MAX_HEADER_DECODED_BYTES.div_ceil(3) * 4;
    if text.len() > max_encoded {
        deviations.push(Deviation::new(
            format!("{code_prefix}.too_large"),
            format!(
                "{} base64 characters; the limit is {max_encoded} ({MAX_HEADER_DECODED_BYTES} bytes decoded)",
                text.len()
            ),
        ));
        return None;
    }
    let url_safe = text.contains(['-', '_']);
    let standard_only = text.contains(['+', '/']);
    if url_safe && standard_only {
        deviations.push(Deviation::new(
            format!("{code_prefix}.bad_base64"),
            "mixes the standard (+/) and URL-safe (-_) base64 alphabets",
        ));
        return None;
    }
    let indifferent =
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    let engine = if url_safe {
        GeneralPurpose::new(&alphabet::URL_SAFE, indifferent)
    } else {
        GeneralPurpose::new(&alphabet::STANDARD, indifferent)
    };
    let bytes = match engine.decode(text) {
        Ok(bytes) => bytes,
        Err(e) => {
            deviations.push(Deviation::new(
                format!("{code_prefix}.bad_base64"),
                format!("not base64: {e}"),
            ));
            return None;
        }
    };
    if url_safe {
        deviations.push(Deviation::new(
            format!("{code_prefix}.base64_url_safe"),
            "uses the URL-safe base64 alphabet; x402 specifies standard base64",
        ));
    }
    if !text.len().is_multiple_of(4) {
        deviations.push(Deviation::new(
            format!("{code_prefix}.base64_unpadded"),
            "base64 without '=' padding; x402 specifies padded standard base64",
        ));
    }
    if bytes.len() > MAX_HEADER_DECODED_BYTES {
        deviations.push(Deviation::new(
            format!("{code_prefix}.too_large"),
            format!(
                "{} bytes decoded; the limit is {MAX_HEADER_DECODED_BYTES}",
                bytes.len()
            ),
        ));
        return None;
    }
    Some(bytes)
}

/// Parse the body as a JSON object within the budget. Problems are recorded only when
/// `held_against` (no usable header), because a v2 server may send any body it likes.
fn read_body_object(
    body: &[u8],
    held_against: bool,
    deviations: &mut Vec<Deviation>,
) -> Option<Decoded> {
    let mut noted = Vec::new();
    let body = match body.strip_prefix(b"\xEF\xBB\xBF") {
        Some(rest) => {
            noted.push(Deviation::new(
                "body.bom",
                "the body starts with a UTF-8 byte order mark",
            ));
            rest
        }
        None => body,
    };
    let decoded = if body.trim_ascii().is_empty() {
        None
    } else if body.len() > MAX_BODY_BYTES {
        noted.push(Deviation::new(
            "body.too_large",
            format!(
                "{} bytes; the parser reads bodies up to {MAX_BODY_BYTES}",
                body.len()
            ),
        ));
        None
    } else {
        decoded_or_deviation(decode_object(body), "body", "the body", &mut noted)
    };
    if held_against {
        deviations.extend(noted);
    }
    decoded
}

/// Interpret one decoded object as a PaymentRequired.
pub(crate) fn interpret(carrier: Carrier, decoded: &Decoded) -> PaymentRequired {
    let Decoded {
        object,
        accepts_raw,
        accepts_sent,
    } = decoded;
    let accepts_sent = *accepts_sent;
    let mut deviations = Vec::new();
    let declared = read_version(object, &mut deviations);
    let version = declared.unwrap_or_else(|| infer_version(carrier, object));

    let error = match object.get("error") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            deviations.push(Deviation::new(
                "error.not_string",
                format!("error is a JSON {}, not a string", json_type(other)),
            ));
            None
        }
    };

    let resource_raw = object.get("resource").cloned();
    let resource = if version == 2 {
        read_resource(object.get("resource"), &mut deviations)
    } else {
        None
    };

    let accepts = read_accepts(object, accepts_raw, accepts_sent, version, &mut deviations);
    let accepts_sent = accepts_sent.unwrap_or(accepts.len());

    let extensions = match object.get("extensions") {
        None | Some(Value::Null) => None,
        Some(Value::Object(map)) => Some(map.clone()),
        Some(other) => {
            deviations.push(Deviation::new(
                "extensions.not_object",
                format!("extensions is a JSON {}, not an object", json_type(other)),
            ));
            None
        }
    };

    PaymentRequired {
        x402_version: version,
        error,
        resource,
        resource_raw,
        accepts,
        accepts_sent,
        extensions,
        deviations,
    }
}

/// The declared version when it is 1 or 2 (a string is accepted with a deviation).
fn read_version(object: &Map<String, Value>, deviations: &mut Vec<Deviation>) -> Option<u8> {
    let version = match object.get("x402Version") {
        None | Some(Value::Null) => {
            deviations.push(Deviation::new(
                "x402Version.missing",
                "no x402Version; the version was inferred",
            ));
            return None;
        }
        Some(Value::Number(n)) => match n.as_u64() {
            Some(v) => v,
            None => {
                deviations.push(Deviation::new(
                    "x402Version.not_integer",
                    format!("x402Version {n} is not a positive integer"),
                ));
                return None;
            }
        },
        Some(Value::String(s)) => match s.trim().parse::<u64>() {
            Ok(v) if (1..=2).contains(&v) => {
                deviations.push(Deviation::new(
                    "x402Version.string",
                    format!(
                        "x402Version is the string {}; it is a JSON number",
                        quoted(s)
                    ),
                ));
                v
            }
            _ => {
                deviations.push(Deviation::new(
                    "x402Version.not_integer",
                    format!("x402Version is the string {}", quoted(s)),
                ));
                return None;
            }
        },
        Some(other) => {
            deviations.push(Deviation::new(
                "x402Version.not_integer",
                format!("x402Version is a JSON {}", json_type(other)),
            ));
            return None;
        }
    };
    match version {
        1 => Some(1),
        2 => Some(2),
        other => {
            deviations.push(Deviation::new(
                "x402Version.unsupported",
                format!("x402Version {other} is neither 1 nor 2; read by its fields"),
            ));
            None
        }
    }
}

/// Without a usable declared version: the header is v2's carrier; a body is read as v2 when its
/// entries use v2's `amount` and not v1's `maxAmountRequired`, else as v1.
fn infer_version(carrier: Carrier, object: &Map<String, Value>) -> u8 {
    if carrier == Carrier::Header {
        return 2;
    }
    let entries = object.get("accepts").and_then(Value::as_array);
    let uses =
        |field: &str| entries.is_some_and(|entries| entries.iter().any(|e| e.get(field).is_some()));
    if uses("amount") && !uses("maxAmountRequired") {
        2
    } else {
        1
    }
}

fn read_resource(value: Option<&Value>, deviations: &mut Vec<Deviation>) -> Option<Resource> {
    let object = match value {
        None | Some(Value::Null) => {
            deviations.push(Deviation::new(
                "resource.missing",
                "no top-level resource object",
            ));
            return None;
        }
        Some(Value::Object(object)) => object,
        Some(Value::String(url)) => {
            deviations.push(Deviation::new(
                "resource.not_object",
                "resource is a bare string; v2 wants {url, description, mimeType}",
            ));
            return Some(Resource {
                url: url.clone(),
                description: None,
                mime_type: None,
            });
        }
        Some(other) => {
            deviations.push(Deviation::new(
                "resource.not_object",
                format!("resource is a JSON {}, not an object", json_type(other)),
            ));
            return None;
        }
    };
    let url = optional_string(object, "url", "resource.url", deviations);
    let description = optional_string(object, "description", "resource.description", deviations);
    let mime_type = optional_string(object, "mimeType", "resource.mimeType", deviations);
    match url {
        Some(url) => Some(Resource {
            url,
            description,
            mime_type,
        }),
        None => {
            if !object.contains_key("url") {
                deviations.push(Deviation::new(
                    "resource.url.missing",
                    "the resource object has no url",
                ));
            }
            None
        }
    }
}

/// The entries read (at most [`MAX_ACCEPTS_ENTRIES`]); `raws` are their exact texts and `sent`
/// how many the array had.
fn read_accepts(
    object: &Map<String, Value>,
    raws: &[Box<RawValue>],
    sent: Option<usize>,
    version: u8,
    deviations: &mut Vec<Deviation>,
) -> Vec<Requirement> {
    let entries = match object.get("accepts") {
        None | Some(Value::Null) => {
            deviations.push(Deviation::new("accepts.missing", "no accepts array"));
            return Vec::new();
        }
        Some(Value::Array(entries)) => entries,
        Some(other) => {
            deviations.push(Deviation::new(
                "accepts.not_array",
                format!("accepts is a JSON {}, not an array", json_type(other)),
            ));
            return Vec::new();
        }
    };
    if entries.is_empty() {
        deviations.push(Deviation::new(
            "accepts.empty",
            "accepts is an empty array: nothing can be paid",
        ));
        return Vec::new();
    }
    let sent = sent.unwrap_or(entries.len());
    if sent > entries.len() {
        deviations.push(Deviation::new(
            "accepts.too_many",
            format!(
                "accepts has {sent} entries, more than the {MAX_ACCEPTS_ENTRIES} a client is asked to read; the first {} were read, the other {} only counted",
                entries.len(),
                sent - entries.len()
            ),
        ));
    }
    let mut raws = raws.iter();
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            let raw = raws
                .next()
                .cloned()
                .or_else(|| serde_json::value::to_raw_value(entry).ok())
                .unwrap_or_else(|| RawValue::NULL.to_owned());
            let requirement = read_requirement(index, raw, entry, version);
            deviations.extend(requirement.deviations.iter().cloned());
            requirement
        })
        .collect()
}

/// Read one entry into typed views, recording every deviation under `accepts[<index>]`.
fn read_requirement(index: usize, raw: Box<RawValue>, entry: &Value, version: u8) -> Requirement {
    let at = |field: &str| format!("accepts[{index}].{field}");
    let mut deviations = Vec::new();
    let mut requirement = Requirement {
        index,
        raw,
        entry: entry.clone(),
        scheme: None,
        network: None,
        amount: None,
        asset: None,
        pay_to: None,
        max_timeout_seconds: None,
        extra_name: None,
        extra_version: None,
        extra_fee_payer: None,
        extra_memo: None,
        asset_transfer_method: None,
        description: None,
        mime_type: None,
        resource: None,
        output_schema: None,
        deviations: Vec::new(),
    };
    let Some(fields) = entry.as_object() else {
        requirement.deviations.push(Deviation::new(
            format!("accepts[{index}].not_object"),
            format!("the entry is a JSON {}, not an object", json_type(entry)),
        ));
        return requirement;
    };

    requirement.scheme = required_string(fields, "scheme", &at("scheme"), &mut deviations);
    if let Some(scheme) = &requirement.scheme
        && !KNOWN_SCHEMES.contains(&scheme.as_str())
    {
        deviations.push(Deviation::new(
            format!("{}.unknown", at("scheme")),
            format!("scheme {} is not one of {KNOWN_SCHEMES:?}", quoted(scheme)),
        ));
    }

    requirement.network = required_string(fields, "network", &at("network"), &mut deviations);
    if let Some(network) = &requirement.network {
        check_network(network, version, &at("network"), &mut deviations);
        check_solana_network(network, &at("network"), &mut deviations);
    }

    requirement.amount = read_amount(fields, version, &at("amount"), &mut deviations);

    let kind = requirement
        .network
        .as_deref()
        .map_or(AddressKind::Evm, address_kind);
    requirement.asset = required_string(fields, "asset", &at("asset"), &mut deviations);
    if let Some(asset) = &requirement.asset {
        check_address(asset, kind, &at("asset"), &mut deviations);
    }
    requirement.pay_to = required_string(fields, "payTo", &at("payTo"), &mut deviations);
    if let Some(pay_to) = &requirement.pay_to {
        check_address(pay_to, kind, &at("payTo"), &mut deviations);
    }

    requirement.max_timeout_seconds =
        read_max_timeout(fields, &at("maxTimeoutSeconds"), &mut deviations);

    read_extra(
        &mut requirement,
        fields,
        kind,
        &at("extra"),
        &mut deviations,
    );

    requirement.description =
        optional_string(fields, "description", &at("description"), &mut deviations);
    requirement.mime_type = optional_string(fields, "mimeType", &at("mimeType"), &mut deviations);
    requirement.resource = if version == 1 {
        required_string(fields, "resource", &at("resource"), &mut deviations)
    } else {
        optional_string(fields, "resource", &at("resource"), &mut deviations)
    };
    requirement.output_schema = match fields.get("outputSchema") {
        None | Some(Value::Null) => None,
        Some(schema @ Value::Object(_)) => Some(schema.clone()),
        Some(other) => {
            deviations.push(Deviation::new(
                format!("{}.not_object", at("outputSchema")),
                format!("outputSchema is a JSON {}, not an object", json_type(other)),
            ));
            None
        }
    };

    requirement.deviations = deviations;
    requirement
}

/// A Solana network must be one of the clusters x402 names: another `solana:` reference is a
/// chain no client can pay on (and no facilitator settles on), so it is a finding, not a guess.
fn check_solana_network(network: &str, at: &str, deviations: &mut Vec<Deviation>) {
    if address_kind(network) == AddressKind::Solana
        && SolanaNetwork::from_network(network).is_none()
    {
        deviations.push(Deviation::new(
            format!("{at}.unknown_solana"),
            format!(
                "network {} is not Solana mainnet, devnet or testnet (solana:<genesis hash prefix> or solana, solana-devnet, solana-testnet)",
                quoted(network)
            ),
        ));
    }
}

fn check_network(network: &str, version: u8, at: &str, deviations: &mut Vec<Deviation>) {
    if is_caip2(network) {
        return;
    }
    if version == 1 {
        if !is_known_v1_name(network) {
            deviations.push(Deviation::new(
                format!("{at}.unknown"),
                format!(
                    "network {} is neither CAIP-2 nor a known v1 network name",
                    quoted(network)
                ),
            ));
        }
    } else {
        let hint = if is_known_v1_name(network) {
            " (a v1 name)"
        } else {
            ""
        };
        deviations.push(Deviation::new(
            format!("{at}.not_caip2"),
            format!(
                "network {}{hint} is not a CAIP-2 chain id such as eip155:8453",
                quoted(network)
            ),
        ));
    }
}

/// v2's `amount` or v1's `maxAmountRequired`; the other version's name is read with a deviation.
fn read_amount(
    fields: &Map<String, Value>,
    version: u8,
    at: &str,
    deviations: &mut Vec<Deviation>,
) -> Option<String> {
    let (own, other) = if version == 2 {
        ("amount", "maxAmountRequired")
    } else {
        ("maxAmountRequired", "amount")
    };
    let value = match (fields.get(own), fields.get(other)) {
        (Some(value), _) if !value.is_null() => value,
        (_, Some(value)) if !value.is_null() => {
            deviations.push(Deviation::new(
                format!("{at}.wrong_field"),
                format!("the price is in {other}; a v{version} requirement names it {own}"),
            ));
            value
        }
        _ => {
            deviations.push(Deviation::new(
                format!("{at}.missing"),
                format!("no {own} (the price)"),
            ));
            return None;
        }
    };
    let text = match value {
        Value::String(text) => text.clone(),
        Value::Number(n) => {
            deviations.push(Deviation::new(
                format!("{at}.not_string"),
                format!("the price is the JSON number {n}; it is a decimal string"),
            ));
            return Some(n.to_string());
        }
        other => {
            deviations.push(Deviation::new(
                format!("{at}.not_string"),
                format!("the price is a JSON {}, not a string", json_type(other)),
            ));
            return None;
        }
    };
    if !is_decimal_integer(&text) {
        deviations.push(Deviation::new(
            format!("{at}.not_integer_string"),
            format!(
                "the price {} is not a decimal integer of atomic units (digits only, no sign, point, exponent or leading zero)",
                quoted(&text)
            ),
        ));
    } else if alloy::primitives::U256::from_str_radix(&text, 10).is_err() {
        deviations.push(Deviation::new(
            format!("{at}.too_large"),
            format!("the price {text} does not fit 256 bits"),
        ));
    }
    Some(text)
}

fn check_address(text: &str, kind: AddressKind, at: &str, deviations: &mut Vec<Deviation>) {
    match kind {
        AddressKind::Evm => {
            let Some(hex_part) = text.strip_prefix("0x") else {
                deviations.push(Deviation::new(
                    format!("{at}.not_address"),
                    format!("{} is not a 0x-prefixed EVM address", quoted(text)),
                ));
                return;
            };
            if hex_part.len() != 40 || !hex_part.bytes().all(|b| b.is_ascii_hexdigit()) {
                deviations.push(Deviation::new(
                    format!("{at}.not_address"),
                    format!("{} is not 20 bytes of hex", quoted(text)),
                ));
                return;
            }
            if Address::parse_checksummed(text, None).is_err() {
                let expected = hex_part
                    .parse::<Address>()
                    .map(|a| a.to_checksum(None))
                    .unwrap_or_default();
                deviations.push(Deviation::new(
                    format!("{at}.not_checksummed"),
                    format!("{text} is not EIP-55 checksummed (expected {expected})"),
                ));
            }
        }
        AddressKind::Solana => {
            if let Err(why) = SolanaAddress::parse(text) {
                deviations.push(Deviation::new(
                    format!("{at}.not_address"),
                    format!("{} {why}: not a Solana address", quoted(text)),
                ));
            }
        }
        AddressKind::Other => {}
    }
}

/// An integer number of seconds. An integral float or a digit string is read, with a deviation.
fn read_max_timeout(
    fields: &Map<String, Value>,
    at: &str,
    deviations: &mut Vec<Deviation>,
) -> Option<u64> {
    let seconds = match fields.get("maxTimeoutSeconds") {
        None | Some(Value::Null) => {
            deviations.push(Deviation::new(
                format!("{at}.missing"),
                "no maxTimeoutSeconds",
            ));
            return None;
        }
        Some(Value::Number(n)) => match n.as_u64() {
            Some(seconds) => seconds,
            None => {
                let integral = n
                    .as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u32::MAX as f64);
                deviations.push(Deviation::new(
                    format!("{at}.not_integer"),
                    format!("maxTimeoutSeconds {n} is not a non-negative JSON integer"),
                ));
                // Safe: the filter bounds it to a whole number within u32.
                integral.map(|f| f as u64)?
            }
        },
        Some(Value::String(text)) => {
            deviations.push(Deviation::new(
                format!("{at}.not_integer"),
                format!(
                    "maxTimeoutSeconds is the string {}; it is a JSON integer",
                    quoted(text)
                ),
            ));
            if !is_decimal_integer(text) {
                return None;
            }
            text.parse().ok()?
        }
        Some(other) => {
            deviations.push(Deviation::new(
                format!("{at}.not_integer"),
                format!("maxTimeoutSeconds is a JSON {}", json_type(other)),
            ));
            return None;
        }
    };
    if !MAX_TIMEOUT_RANGE.contains(&seconds) {
        deviations.push(Deviation::new(
            format!("{at}.out_of_range"),
            format!(
                "maxTimeoutSeconds {seconds} is outside {}..={} seconds",
                MAX_TIMEOUT_RANGE.start(),
                MAX_TIMEOUT_RANGE.end()
            ),
        ));
    }
    Some(seconds)
}

/// `extra`: the EIP-712 domain name and version the exact EVM scheme signs with.
fn read_extra(
    requirement: &mut Requirement,
    fields: &Map<String, Value>,
    kind: AddressKind,
    at: &str,
    deviations: &mut Vec<Deviation>,
) {
    let extra = match fields.get("extra") {
        None | Some(Value::Null) => None,
        Some(Value::Object(extra)) => Some(extra),
        Some(other) => {
            deviations.push(Deviation::new(
                format!("{at}.not_object"),
                format!("extra is a JSON {}, not an object", json_type(other)),
            ));
            if kind == AddressKind::Solana {
                read_solana_extra(requirement, &Map::new(), at, deviations);
            }
            return;
        }
    };
    let empty = Map::new();
    let extra_fields = extra.unwrap_or(&empty);
    requirement.extra_name =
        optional_string(extra_fields, "name", &format!("{at}.name"), deviations);
    requirement.extra_version = optional_string(
        extra_fields,
        "version",
        &format!("{at}.version"),
        deviations,
    );
    requirement.asset_transfer_method = optional_string(
        extra_fields,
        "assetTransferMethod",
        &format!("{at}.assetTransferMethod"),
        deviations,
    );
    if let Some(method) = &requirement.asset_transfer_method
        && !KNOWN_TRANSFER_METHODS.contains(&method.as_str())
    {
        deviations.push(Deviation::new(
            format!("{at}.assetTransferMethod.unknown"),
            format!(
                "assetTransferMethod {} is not one of {KNOWN_TRANSFER_METHODS:?}",
                quoted(method)
            ),
        ));
    }
    if kind == AddressKind::Solana {
        read_solana_extra(requirement, extra_fields, at, deviations);
    }
    // Clients refuse to sign an exact EVM payment without the token's EIP-712 domain.
    let signs_eip712 = kind == AddressKind::Evm && requirement.scheme.as_deref() == Some("exact");
    if signs_eip712 {
        for (field, view) in [
            ("name", &requirement.extra_name),
            ("version", &requirement.extra_version),
        ] {
            if view.is_none() && !extra_fields.contains_key(field) {
                deviations.push(Deviation::new(
                    format!("{at}.{field}.missing"),
                    format!("no extra.{field}: the EIP-712 domain to sign with is not given"),
                ));
            }
        }
    }
}

/// `extra.feePayer` (required by the exact SVM scheme: the facilitator's account that pays the
/// fees, which the client must name in the transaction) and `extra.memo` (optional, at most
/// [`MAX_MEMO_BYTES`], which the client must put in the memo instruction).
fn read_solana_extra(
    requirement: &mut Requirement,
    extra_fields: &Map<String, Value>,
    at: &str,
    deviations: &mut Vec<Deviation>,
) {
    let fee_payer_at = format!("{at}.feePayer");
    requirement.extra_fee_payer = if requirement.scheme.as_deref() == Some("exact") {
        required_string(extra_fields, "feePayer", &fee_payer_at, deviations)
    } else {
        optional_string(extra_fields, "feePayer", &fee_payer_at, deviations)
    };
    if let Some(fee_payer) = &requirement.extra_fee_payer {
        check_address(fee_payer, AddressKind::Solana, &fee_payer_at, deviations);
    }
    let memo_at = format!("{at}.memo");
    requirement.extra_memo = optional_string(extra_fields, "memo", &memo_at, deviations);
    if let Some(memo) = &requirement.extra_memo
        && memo.len() > MAX_MEMO_BYTES
    {
        deviations.push(Deviation::new(
            format!("{memo_at}.too_long"),
            format!(
                "extra.memo is {} bytes; the exact SVM scheme allows at most {MAX_MEMO_BYTES}",
                memo.len()
            ),
        ));
    }
}

fn required_string(
    fields: &Map<String, Value>,
    key: &str,
    at: &str,
    deviations: &mut Vec<Deviation>,
) -> Option<String> {
    if matches!(fields.get(key), None | Some(Value::Null)) {
        deviations.push(Deviation::new(format!("{at}.missing"), format!("no {key}")));
        return None;
    }
    optional_string(fields, key, at, deviations)
}

fn optional_string(
    fields: &Map<String, Value>,
    key: &str,
    at: &str,
    deviations: &mut Vec<Deviation>,
) -> Option<String> {
    match fields.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(other) => {
            deviations.push(Deviation::new(
                format!("{at}.not_string"),
                format!("{key} is a JSON {}, not a string", json_type(other)),
            ));
            None
        }
    }
}

pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Read the settlement receipt of a paid call from `PAYMENT-RESPONSE` (v2) or `X-PAYMENT-RESPONSE`
/// (v1; some v1 servers use the v2 name, so both are tried, v2's first). Header names are compared
/// without regard to case. A receipt that cannot be read, or lacks a boolean `success`, is an error;
/// lesser departures are in the receipt's `deviations`.
pub fn parse_settlement_response(
    headers: &[(String, String)],
) -> Result<SettlementResponse, Deviation> {
    let mut deviations = Vec::new();
    let v2 = header_values(headers, PAYMENT_RESPONSE_HEADER);
    let v1 = header_values(headers, X_PAYMENT_RESPONSE_HEADER);
    let (header_name, text) = match (v2.first(), v1.first()) {
        (Some(text), _) => (PAYMENT_RESPONSE_HEADER, *text),
        (None, Some(text)) => (X_PAYMENT_RESPONSE_HEADER, *text),
        (None, None) => {
            return Err(Deviation::new(
                "payment_response.missing",
                "no PAYMENT-RESPONSE or X-PAYMENT-RESPONSE header",
            ));
        }
    };
    // Several receipts (under either name, in any letter case) must say the same thing; receipts
    // that differ leave nothing to believe.
    let all: Vec<&str> = v2.iter().chain(&v1).copied().collect();
    if all.len() > 1 {
        if let Some(why) = disagreement(&all) {
            return Err(Deviation::new(
                "payment_response.duplicate_disagree",
                format!(
                    "{} settlement response headers that do not say the same thing ({why})",
                    all.len()
                ),
            ));
        }
        if v2.len() > 1 || v1.len() > 1 {
            deviations.push(Deviation::new(
                "payment_response.duplicate",
                "the settlement response header is repeated, with the same content; the first was read",
            ));
        }
        if !v2.is_empty() && !v1.is_empty() {
            deviations.push(Deviation::new(
                "payment_response.both_headers",
                "both PAYMENT-RESPONSE and X-PAYMENT-RESPONSE, with the same content; PAYMENT-RESPONSE was read",
            ));
        }
    }
    let Some(bytes) = decode_header_value(text, "payment_response", &mut deviations) else {
        // A failed decode always records its reason last.
        return Err(deviations.pop().unwrap_or_else(|| {
            Deviation::new(
                "payment_response.bad_base64",
                "the header could not be decoded",
            )
        }));
    };
    let what = format!("the decoded {header_name} header");
    let mut refused = Vec::new();
    let Some(decoded) = decoded_or_deviation(
        decode_object(&bytes),
        "payment_response",
        &what,
        &mut refused,
    ) else {
        return Err(refused.pop().unwrap_or_else(|| {
            Deviation::new("payment_response.bad_json", format!("{what} is not JSON"))
        }));
    };
    settlement_fields(header_name, decoded.object, deviations)
}

/// A settlement response carried as a JSON object rather than a header: MCP's
/// `result._meta["x402/payment-response"]` (the x402 MCP transport), read by the same rules as the
/// decoded header. `carrier` names where it was found.
pub fn parse_settlement_object(
    carrier: &str,
    value: &Value,
) -> Result<SettlementResponse, Deviation> {
    match value {
        Value::Object(fields) => settlement_fields(carrier, fields.clone(), Vec::new()),
        other => Err(Deviation::new(
            "payment_response.not_object",
            format!("{carrier} is a JSON {}, not an object", json_type(other)),
        )),
    }
}

/// The fields of a decoded settlement response (`carrier`: the header or `_meta` key it came from).
fn settlement_fields(
    header_name: &str,
    fields: Map<String, Value>,
    mut deviations: Vec<Deviation>,
) -> Result<SettlementResponse, Deviation> {
    let success = match fields.get("success") {
        Some(Value::Bool(success)) => *success,
        Some(other) => {
            return Err(Deviation::new(
                "payment_response.success.not_bool",
                format!("success is a JSON {}, not a boolean", json_type(other)),
            ));
        }
        None => {
            return Err(Deviation::new(
                "payment_response.success.missing",
                "the receipt has no success field",
            ));
        }
    };
    let mut string = |key: &str| {
        optional_string(
            &fields,
            key,
            &format!("payment_response.{key}"),
            &mut deviations,
        )
    };
    let error_reason = string("errorReason");
    let error_message = string("errorMessage");
    let payer = string("payer");
    let transaction = string("transaction");
    let network = string("network");
    let amount = string("amount");
    let extensions = match fields.get("extensions") {
        Some(Value::Object(map)) => Some(map.clone()),
        _ => None,
    };
    if success {
        let is_hash = transaction.as_deref().is_some_and(|tx| {
            tx.strip_prefix("0x")
                .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        });
        if !is_hash {
            deviations.push(Deviation::new(
                "payment_response.transaction.not_hash",
                format!(
                    "a successful settlement names no 0x 32-byte transaction hash ({})",
                    transaction.as_deref().map_or("none".to_string(), quoted)
                ),
            ));
        }
    }
    Ok(SettlementResponse {
        header_name: header_name.to_string(),
        success,
        error_reason,
        error_message,
        payer,
        transaction,
        network,
        amount,
        extensions,
        object: Value::Object(fields),
        deviations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn codes(deviations: &[Deviation]) -> Vec<&str> {
        deviations.iter().map(|d| d.code.as_str()).collect()
    }

    #[test]
    fn base64_variants_decode_with_the_right_deviations() {
        let payload = br#"{"a":"???>>>"}"#;
        let standard = STANDARD.encode(payload);
        assert!(standard.contains(['+', '/']));
        let mut found = Vec::new();
        assert_eq!(
            decode_header_value(&standard, "header", &mut found).as_deref(),
            Some(&payload[..])
        );
        assert!(found.is_empty());

        let url = URL_SAFE_NO_PAD.encode(payload);
        assert!(url.contains(['-', '_']));
        let mut found = Vec::new();
        assert_eq!(
            decode_header_value(&url, "header", &mut found).as_deref(),
            Some(&payload[..])
        );
        assert_eq!(
            codes(&found),
            ["header.base64_url_safe", "header.base64_unpadded"]
        );

        let mut found = Vec::new();
        assert_eq!(decode_header_value("ab+c-d", "header", &mut found), None);
        assert_eq!(codes(&found), ["header.bad_base64"]);
    }

    #[test]
    fn oversized_header_is_refused_unread() {
        let big = "A".repeat(MAX_HEADER_DECODED_BYTES * 2);
        let parsed = parse_payment_required(402, &headers(&[("PAYMENT-REQUIRED", &big)]), b"");
        assert!(parsed.has_deviation("header.too_large"));
        assert!(parsed.required.is_none());
    }

    #[test]
    fn raw_entries_are_the_exact_text() {
        let body = br#"{"x402Version": 1, "accepts": [ {"scheme" : "exact",
            "maxTimeoutSeconds": 60.50} ]}"#;
        let parsed = parse_payment_required(402, &[], body);
        let required = parsed.required.expect("v1 body");
        assert_eq!(
            required.accepts[0].raw.get(),
            "{\"scheme\" : \"exact\",\n            \"maxTimeoutSeconds\": 60.50}"
        );
    }

    #[test]
    fn header_wins_over_body_and_body_is_not_held_against_it() {
        let header = STANDARD
            .encode(br#"{"x402Version":2,"resource":{"url":"https://a.example/x"},"accepts":[]}"#);
        let parsed = parse_payment_required(
            402,
            &headers(&[("Payment-Required", &header)]),
            b"<html>pay</html>",
        );
        assert_eq!(parsed.source, Source::Header);
        assert_eq!(codes(&parsed.deviations), ["accepts.empty"]);
    }

    #[test]
    fn settlement_response_both_names() {
        let receipt = STANDARD.encode(
            br#"{"success":true,"transaction":"0x1111111111111111111111111111111111111111111111111111111111111111","network":"eip155:31337","payer":"0x857b06519E91e3A54538791bDbb0E22373e36b66"}"#,
        );
        for name in ["PAYMENT-RESPONSE", "x-payment-response", "Payment-Response"] {
            let parsed =
                parse_settlement_response(&headers(&[(name, &receipt)])).expect("a valid receipt");
            assert!(parsed.success);
            assert_eq!(parsed.network.as_deref(), Some("eip155:31337"));
            assert!(parsed.deviations.is_empty(), "{:?}", parsed.deviations);
        }
        let err =
            parse_settlement_response(&headers(&[("content-type", "x")])).expect_err("no receipt");
        assert_eq!(err.code, "payment_response.missing");
        let err = parse_settlement_response(&headers(&[("payment-response", "%%%")]))
            .expect_err("bad base64");
        assert_eq!(err.code, "payment_response.bad_base64");
        let no_success = STANDARD.encode(br#"{"transaction":""}"#);
        let err = parse_settlement_response(&headers(&[("payment-response", &no_success)]))
            .expect_err("no success");
        assert_eq!(err.code, "payment_response.success.missing");
        let failed = STANDARD
            .encode(br#"{"success":false,"errorReason":"insufficient_funds","transaction":""}"#);
        let parsed = parse_settlement_response(&headers(&[("X-PAYMENT-RESPONSE", &failed)]))
            .expect("a failed settlement is still a receipt");
        assert!(!parsed.success);
        assert_eq!(parsed.error_reason.as_deref(), Some("insufficient_funds"));
        assert_eq!(parsed.header_name, "x-payment-response");
    }
}

#[cfg(test)]
mod response_parse_tests {
    use super::*;

    fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> HttpResponse {
        let headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        HttpResponse::new(status, headers, body.as_bytes().to_vec(), false, 0)
    }

    /// A parse is handed on only for the answer it was made from: any other status, header set
    /// or body, or a body stored apart (empty here), gets `None`, so the caller parses.
    #[test]
    fn a_parse_is_taken_only_for_the_bytes_it_was_made_from() {
        let body = r#"{"x402Version":1,"accepts":[{"scheme":"exact","network":"base","maxAmountRequired":"1000","resource":"https://a.example/x","payTo":"0x1111111111111111111111111111111111111111","asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","maxTimeoutSeconds":60}]}"#;
        let headers = [("content-type", "application/json")];
        let made_from = answer(402, &headers, body);
        let same = answer(402, &headers, body);
        let taken = ResponseParse::of(&made_from).into_parse_of(&same);
        let again = parse_payment_required(same.status, &same.headers, &same.body);
        assert_eq!(format!("{taken:?}"), format!("{:?}", Some(again)));

        let others = [
            answer(200, &headers, body),
            answer(402, &[("content-type", "text/plain")], body),
            answer(402, &headers, &body.replace("1000", "2000")),
            answer(402, &[], body),
            HttpResponse {
                body: Vec::new(),
                body_stored_apart: true,
                ..answer(402, &headers, body)
            },
        ];
        for other in &others {
            assert!(
                ResponseParse::of(&made_from).into_parse_of(other).is_none(),
                "{other:?}"
            );
        }
    }
}
