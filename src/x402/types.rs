//! The normalised view of what an endpoint sent, over both protocol versions.
//!
//! Every typed field is an optional *view* over the JSON as received: a malformed field leaves its
//! view empty and adds a [`Deviation`], it never makes the whole object unreadable.

use alloy::primitives::{Address, U256};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Where the interpreted PaymentRequired came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The v2 `PAYMENT-REQUIRED` response header.
    Header,
    /// A v2-shaped PaymentRequired in the body (without a usable header).
    BodyV2,
    /// A v1 PaymentRequired in the body.
    BodyV1,
    /// An MCP tool's result (`structuredContent`, else `content[0].text`: the x402 MCP transport).
    McpResult,
    /// An MCP JSON-RPC error `-32402` (the draft MCP payment form, `error.data.payment[]`).
    McpError,
    /// Nothing that looks like a PaymentRequired.
    None,
}

/// One way the response departs from the published x402 shape.
///
/// `code` is stable and machine-readable: `<where>.<problem>`, where `<where>` is a JSON path in
/// the protocol's own field names (`x402Version`, `resource.url`, `accepts[1].payTo`) or the
/// carrier (`header`, `body`, `status`). Codes carry an entry index, so they are strings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Deviation {
    pub code: String,
    pub message: String,
}

impl Deviation {
    /// Messages quote what an endpoint sent, so they are bounded and made printable here: a hostile
    /// 60 KiB field must not become a 60 KiB receipt line.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Deviation {
            code: code.into(),
            message: printable_prefix(&message.into(), MAX_MESSAGE_CHARS),
        }
    }

    /// For an `accepts[<i>].<field>...` code: the entry index and the field (`payTo`, `amount`,
    /// ...; `""` for a problem of the entry itself, such as `accepts[2].not_object`).
    pub fn entry_field(&self) -> Option<(usize, &str)> {
        let rest = self.code.strip_prefix("accepts[")?;
        let (index, rest) = rest.split_once(']')?;
        let index = index.parse().ok()?;
        let field = match rest.strip_prefix('.') {
            Some(path) => match path.split_once('.') {
                Some((field, _problem)) => field,
                None => "",
            },
            None => return None,
        };
        Some((index, field))
    }
}

impl std::fmt::Display for Deviation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

pub use crate::budget::MAX_MESSAGE_CHARS;

/// At most `max` characters of `text`, control characters escaped, with `...` when cut. For
/// putting endpoint-supplied text into evidence lines.
pub fn printable_prefix(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut written = 0;
    for c in text.chars() {
        let piece: String = if c.is_control() {
            c.escape_default().collect()
        } else {
            c.to_string()
        };
        written += piece.chars().count();
        if written > max {
            out.push_str("...");
            break;
        }
        out.push_str(&piece);
    }
    out
}

/// What the parser made of one unpaid response.
#[derive(Debug, Clone, Serialize)]
pub struct Parsed402 {
    pub source: Source,
    /// The protocol version the PaymentRequired was interpreted as (1 or 2), when there is one.
    pub version: Option<u8>,
    /// The decoded `PAYMENT-REQUIRED` header, when it decoded to a JSON object.
    pub header_object: Option<Value>,
    /// The body, when it parsed as a JSON object.
    pub body_object: Option<Value>,
    /// `accepts` entries of the header object that were counted but not read (past
    /// `budget::MAX_ACCEPTS_ENTRIES`): `header_object` holds only the ones read.
    pub header_accepts_unread: usize,
    /// The same for the body object.
    pub body_accepts_unread: usize,
    pub required: Option<PaymentRequired>,
    /// Every deviation found, in the order found: the carrier's (header, body, status) and then
    /// the interpreted PaymentRequired's (top level and every entry).
    pub deviations: Vec<Deviation>,
}

impl Parsed402 {
    /// Nothing read as a quote, with the deviations that say why.
    pub(crate) fn nothing(deviations: Vec<Deviation>) -> Parsed402 {
        Parsed402 {
            source: Source::None,
            version: None,
            header_object: None,
            body_object: None,
            header_accepts_unread: 0,
            body_accepts_unread: 0,
            required: None,
            deviations,
        }
    }

    /// Whether a deviation with exactly this code was recorded.
    pub fn has_deviation(&self, code: &str) -> bool {
        self.deviations.iter().any(|d| d.code == code)
    }
}

/// The v2 top-level `resource` object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resource {
    pub url: String,
    pub description: Option<String>,
    pub mime_type: Option<String>,
}

/// A PaymentRequired of either version, normalised.
#[derive(Debug, Clone, Serialize)]
pub struct PaymentRequired {
    /// The version this object was interpreted as: the declared `x402Version` when it is 1 or 2
    /// (a string is accepted with a deviation), otherwise inferred from the carrier and fields.
    pub x402_version: u8,
    pub error: Option<String>,
    /// v2 only: the top-level resource, when it has a string `url`.
    pub resource: Option<Resource>,
    /// v2: the top-level `resource` exactly as received, echoed in the payment payload.
    pub resource_raw: Option<Value>,
    /// The entries read: the first `budget::MAX_ACCEPTS_ENTRIES` of those sent.
    pub accepts: Vec<Requirement>,
    /// How many entries `accepts` had as sent (more than `accepts.len()` when over the budget,
    /// which is the deviation `accepts.too_many`).
    pub accepts_sent: usize,
    /// v2: the `extensions` map as received (key order kept), echoed in the payment payload.
    pub extensions: Option<Map<String, Value>>,
    /// Deviations of this object: the top level and, copied, every entry's.
    pub deviations: Vec<Deviation>,
}

impl PaymentRequired {
    /// The resource URL: v2's top-level `resource.url`, or v1's first entry `resource`.
    pub fn resource_url(&self) -> Option<&str> {
        match &self.resource {
            Some(resource) => Some(resource.url.as_str()),
            None => self.accepts.iter().find_map(|r| r.resource.as_deref()),
        }
    }
}

/// One `accepts[]` entry: the raw JSON as received plus typed, optional views of its fields.
#[derive(Debug, Clone, Serialize)]
pub struct Requirement {
    /// Position in `accepts`.
    pub index: usize,
    /// The entry's exact text as received (whitespace included), to echo in a v2 payment.
    pub raw: Box<RawValue>,
    /// The same entry as a JSON value.
    pub entry: Value,
    pub scheme: Option<String>,
    pub network: Option<String>,
    /// v2 `amount` or v1 `maxAmountRequired`, as the string received. A JSON number is shown in
    /// its decimal text (with a deviation).
    pub amount: Option<String>,
    pub asset: Option<String>,
    pub pay_to: Option<String>,
    pub max_timeout_seconds: Option<u64>,
    pub extra_name: Option<String>,
    pub extra_version: Option<String>,
    /// Solana: `extra.feePayer`, the facilitator's account that pays the transaction's fees.
    pub extra_fee_payer: Option<String>,
    /// Solana: `extra.memo`, which the payment's memo instruction must carry.
    pub extra_memo: Option<String>,
    pub asset_transfer_method: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    /// v1: the paid resource's URL.
    pub resource: Option<String>,
    /// v1: `outputSchema` when it is an object.
    pub output_schema: Option<Value>,
    /// Deviations of this entry (codes start with `accepts[<index>]`).
    pub deviations: Vec<Deviation>,
}

impl Requirement {
    /// The asset as an address, ignoring checksum case (None when it is not a 20-byte hex address).
    pub fn asset_address(&self) -> Option<Address> {
        self.asset.as_deref().and_then(parse_address_any_case)
    }

    /// The payee as an address, ignoring checksum case.
    pub fn pay_to_address(&self) -> Option<Address> {
        self.pay_to.as_deref().and_then(parse_address_any_case)
    }

    /// The amount as a number, when it is a decimal integer string that fits 256 bits.
    pub fn amount_value(&self) -> Option<U256> {
        let amount = self.amount.as_deref()?;
        if !is_decimal_integer(amount) {
            return None;
        }
        U256::from_str_radix(amount, 10).ok()
    }

    /// The EVM chain id of the entry's network.
    pub fn chain_id(&self) -> Option<u64> {
        self.network
            .as_deref()
            .and_then(super::network::chain_id_of)
    }
}

/// A `0x`-prefixed 40-hex-digit address in any letter case.
pub fn parse_address_any_case(text: &str) -> Option<Address> {
    let hex_part = text.strip_prefix("0x")?;
    if hex_part.len() != 40 || !hex_part.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    hex_part.parse().ok()
}

/// A decimal integer string as x402 amounts are written: ASCII digits only, no sign, no point, no
/// exponent, no leading zeros except the single digit "0".
pub fn is_decimal_integer(text: &str) -> bool {
    !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'))
}

/// The settlement receipt from `PAYMENT-RESPONSE` (v2) or `X-PAYMENT-RESPONSE` (v1).
#[derive(Debug, Clone, Serialize)]
pub struct SettlementResponse {
    /// The header it came from, lower-case.
    pub header_name: String,
    pub success: bool,
    pub error_reason: Option<String>,
    pub error_message: Option<String>,
    pub payer: Option<String>,
    /// The transaction hash (`""` on failure in the reference servers; kept as sent).
    pub transaction: Option<String>,
    pub network: Option<String>,
    pub amount: Option<String>,
    pub extensions: Option<Map<String, Value>>,
    /// The decoded object as received.
    pub object: Value,
    pub deviations: Vec<Deviation>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_field_reads_the_code_path() {
        let d = Deviation::new("accepts[12].payTo.not_checksummed", "");
        assert_eq!(d.entry_field(), Some((12, "payTo")));
        let d = Deviation::new("accepts[0].extra.name.missing", "");
        assert_eq!(d.entry_field(), Some((0, "extra")));
        let d = Deviation::new("accepts[3].not_object", "");
        assert_eq!(d.entry_field(), Some((3, "")));
        assert_eq!(Deviation::new("accepts.empty", "").entry_field(), None);
        assert_eq!(Deviation::new("accepts[x].a.b", "").entry_field(), None);
    }

    #[test]
    fn messages_are_bounded_and_printable() {
        let d = Deviation::new("x", format!("a\nb{}", "z".repeat(1000)));
        assert!(d.message.starts_with("a\\nb"));
        assert!(d.message.chars().count() <= MAX_MESSAGE_CHARS + 3);
        assert!(d.message.ends_with("..."));
        assert_eq!(printable_prefix("short", 10), "short");
    }

    #[test]
    fn decimal_integers() {
        for ok in [
            "0",
            "1",
            "10000",
            "115792089237316195423570985008687907853269984665640564039457584007913129639935",
        ] {
            assert!(is_decimal_integer(ok), "{ok}");
        }
        for bad in ["", "01", "-1", "+1", "1.0", "1e6", " 1", "0x10", "１"] {
            assert!(!is_decimal_integer(bad), "{bad}");
        }
    }

    #[test]
    fn addresses_in_any_case() {
        let lower = "0x209693bc6afc0c5328ba36faf03c514ef312287c";
        let checksummed = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
        assert_eq!(
            parse_address_any_case(lower),
            parse_address_any_case(checksummed)
        );
        assert!(parse_address_any_case(lower).is_some());
        assert!(parse_address_any_case("0x209693bc").is_none());
        assert!(parse_address_any_case("209693bc6afc0c5328ba36faf03c514ef312287c").is_none());
        assert!(parse_address_any_case("0xZZ9693bc6afc0c5328ba36faf03c514ef312287c").is_none());
    }
}
