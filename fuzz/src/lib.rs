//! What the fuzz targets share: how a fuzz input is read as an HTTP response, and the invariants
//! that every receipt-bound value keeps whatever the input.
//!
//! A target's input is an HTTP response written as text, so that seeds are readable and the
//! fuzzer mutates heads and bodies alike:
//!
//! ```text
//! 402
//! PAYMENT-REQUIRED: eyJ4NDAyVmVyc2lvbiI6Mn0=
//! Content-Type: application/json
//!
//! {"x402Version":1,"accepts":[]}
//! ```
//!
//! The first line is the status (a line that is not a number means 402), the next lines up to the
//! first empty line are headers, the rest is the body. An input without an empty line is all body.

use x402_probe::evidence::Conclusion;
use x402_probe::x402::Deviation;
use x402_probe::x402::types::MAX_MESSAGE_CHARS;

/// One fuzz input read as an HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Names lower-cased, values trimmed, both lossy UTF-8 (as the prober keeps them).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads `data` as described in the crate documentation. Total: every input is some response.
pub fn response(data: &[u8]) -> Response {
    let Some(split) = find(data, b"\n\n") else {
        return Response {
            status: 402,
            headers: Vec::new(),
            body: data.to_vec(),
        };
    };
    let head = String::from_utf8_lossy(&data[..split]);
    let body = data[split + 2..].to_vec();
    let mut lines = head.split('\n');
    let status = lines
        .next()
        .and_then(|l| l.trim().parse::<u16>().ok())
        .unwrap_or(402);
    let headers = lines
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            Some((name.trim().to_ascii_lowercase(), value.trim().to_string()))
        })
        .collect();
    Response {
        status,
        headers,
        body,
    }
}

/// Largest value [`expand`] makes: past the 1 MiB body budget, so that every bound is reachable.
pub const MAX_EXPANDED_BYTES: usize = 1024 * 1024 + 64 * 1024;

/// A short input standing for a large one: each `\x01M\x01N` in `data` (up to 4 of them) is `M`
/// written `N` times (`N` decimal digits; none means 2), the whole capped at
/// [`MAX_EXPANDED_BYTES`]. With it a 4 KiB input reaches the budgets of a megabyte (20,000 JSON
/// values, 64 accepts entries, 64 levels, the size caps), which libFuzzer's length limit would
/// otherwise keep out of reach. A byte 0x01 is never valid outside a JSON string nor inside one,
/// so a marker takes no input the parsers could accept away from the fuzzer.
pub fn expand(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut rest = data;
    for _ in 0..4 {
        let Some(open) = rest.iter().position(|&b| b == 1) else {
            break;
        };
        let Some(close) = rest[open + 1..].iter().position(|&b| b == 1) else {
            break;
        };
        let close = open + 1 + close;
        let digits = rest[close + 1..]
            .iter()
            .take(7)
            .take_while(|b| b.is_ascii_digit())
            .count();
        let count = std::str::from_utf8(&rest[close + 1..close + 1 + digits])
            .ok()
            .and_then(|d| d.parse::<usize>().ok())
            .unwrap_or(2);
        out.extend_from_slice(&rest[..open]);
        let unit = &rest[open + 1..close];
        // At most what fits (an empty unit, any count, adds nothing).
        let fits = MAX_EXPANDED_BYTES.saturating_sub(out.len()) / unit.len().max(1);
        for _ in 0..count.min(fits) {
            out.extend_from_slice(unit);
        }
        rest = &rest[close + 1 + digits..];
    }
    out.extend_from_slice(rest);
    out.truncate(MAX_EXPANDED_BYTES);
    out
}

/// [`response`], with [`expand`] applied to the body and to every header value.
pub fn response_expanded(data: &[u8]) -> Response {
    let mut r = response(data);
    r.body = expand(&r.body);
    for (_, value) in &mut r.headers {
        if value.contains('\x01') {
            *value = String::from_utf8_lossy(&expand(value.as_bytes())).into_owned();
        }
    }
    r
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Longest message a [`Deviation`] may carry: [`MAX_MESSAGE_CHARS`] and the `...` that marks a cut.
pub const MAX_DEVIATION_MESSAGE_CHARS: usize = MAX_MESSAGE_CHARS + 3;

/// A deviation as receipts need it: a stable machine-readable code (`<where>.<problem>`, no spaces
/// or control characters, short) and a bounded message with no control characters in it (endpoint
/// text in messages is escaped, so a receipt line cannot be forged with a newline or a bidi control
/// code... the bidi ones are neutralised at printing; here: no C0/C1 controls).
pub fn assert_deviation(d: &Deviation) {
    assert!(!d.code.is_empty(), "empty deviation code: {d:?}");
    assert!(
        d.code.len() <= 128,
        "deviation code longer than 128 bytes: {:?}",
        d.code
    );
    assert!(
        d.code
            .chars()
            .all(|c| c.is_ascii() && !c.is_ascii_whitespace() && !c.is_ascii_control()),
        "deviation code is not a plain ASCII token: {:?}",
        d.code
    );
    assert!(
        d.code.contains('.'),
        "deviation code is not <where>.<problem>: {:?}",
        d.code
    );
    let chars = d.message.chars().count();
    assert!(
        chars <= MAX_DEVIATION_MESSAGE_CHARS,
        "deviation message of {chars} characters (cap {MAX_DEVIATION_MESSAGE_CHARS}): {:?}",
        d.code
    );
    assert!(
        !d.message.chars().any(char::is_control),
        "deviation message carries a control character: {d:?}"
    );
}

/// A conclusion as a receipt needs it: it serialises, and its evidence line and detail stay within
/// `max_bytes` each.
pub fn assert_conclusion(what: &str, c: &Conclusion, max_bytes: usize) {
    let detail = serde_json::to_vec(&c.detail)
        .unwrap_or_else(|e| panic!("{what}: the detail does not serialise: {e}"));
    assert!(
        detail.len() <= max_bytes,
        "{what}: a detail of {} bytes (bound {max_bytes})",
        detail.len()
    );
    assert!(
        c.evidence.len() <= max_bytes,
        "{what}: an evidence line of {} bytes (bound {max_bytes})",
        c.evidence.len()
    );
    serde_json::to_vec(c)
        .unwrap_or_else(|e| panic!("{what}: the conclusion does not serialise: {e}"));
}
