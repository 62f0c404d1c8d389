//! S5: does the declared content type match the bytes.
//!
//! [`sniff`] looks at one response: its `Content-Type`, its `Content-Encoding` and the bytes the
//! prober kept. It names what the bytes look like (JSON, HTML, an executable, gzip, an image...)
//! and lists every way the declaration and the bytes disagree. [`s5`] folds the sampled responses
//! of one probe run (the 402 and any paid outputs) into a [`Conclusion`].
//!
//! The decisions (also in `probes/S5.md`):
//! - JSON declared (`application/json`, `*/*+json`, `text/json`): the bytes must parse as JSON
//!   (after an optional UTF-8 byte order mark), and must not be HTML, a script or an executable.
//!   When the prober cut the body at its size bound, only the start is checked.
//! - An empty body contradicts nothing: a v2 402 may have no body at all.
//! - A non-empty body without a `Content-Type` is a mismatch: nothing was declared.
//! - Gzip magic without a `Content-Encoding` (and not declared as a gzip file) is a mismatch: a
//!   client would read compressed bytes as the declared type.
//! - Executable magic (ELF, PE `MZ`, Mach-O) or a shebang under any non-executable type is a
//!   mismatch; so is HTML or JSON declared as the other, and an image or PDF whose magic is wrong.
//!
//! Pure: no IO.

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::evidence::Conclusion;

/// What the bytes look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Detected {
    Empty,
    Json,
    Html,
    Xml,
    /// A `#!` line: a script meant to be run.
    Shebang,
    /// ELF, PE or Mach-O.
    Executable,
    Gzip,
    Zip,
    Pdf,
    Png,
    Jpeg,
    Gif,
    Webp,
    /// UTF-8 text that is none of the above.
    Text,
    /// Anything else.
    Binary,
}

/// The outcome of sniffing one response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SniffResult {
    /// The declared media type, lower case, without parameters (`None` when absent).
    pub declared: Option<String>,
    pub detected: Detected,
    /// Every disagreement between the declaration and the bytes; empty when they match.
    pub mismatches: Vec<String>,
}

impl SniffResult {
    pub fn matches(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// One sampled response, as the prober kept it.
#[derive(Debug, Clone, Copy)]
pub struct SniffSample<'a> {
    /// Which response this is, for the receipt (e.g. `402`, `paid output 1`).
    pub label: &'a str,
    pub content_type: Option<&'a str>,
    pub content_encoding: Option<&'a str>,
    pub body: &'a [u8],
    /// True when the prober stopped reading at its size bound: the bytes are only a prefix.
    pub truncated: bool,
}

const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes)
}

fn trim_start_ascii_ws(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    &bytes[start..]
}

fn starts_with_ignore_case(bytes: &[u8], prefix: &[u8]) -> bool {
    bytes.len() >= prefix.len() && bytes[..prefix.len()].eq_ignore_ascii_case(prefix)
}

fn is_executable(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
        || bytes.starts_with(b"MZ")
        || [
            [0xfe, 0xed, 0xfa, 0xce],
            [0xfe, 0xed, 0xfa, 0xcf],
            [0xce, 0xfa, 0xed, 0xfe],
            [0xcf, 0xfa, 0xed, 0xfe],
        ]
        .iter()
        .any(|magic| bytes.starts_with(magic))
}

fn looks_like_html(text: &[u8]) -> bool {
    const MARKERS: &[&[u8]] = &[
        b"<!doctype html",
        b"<html",
        b"<head",
        b"<body",
        b"<script",
        b"<iframe",
        b"<meta",
        b"<title",
        b"<div",
        b"<p>",
        b"<a ",
        b"<style",
        b"<!--",
    ];
    MARKERS.iter().any(|m| starts_with_ignore_case(text, m))
}

/// A JSON value could start here (the prefix check used for truncated bodies).
fn json_could_start(text: &[u8]) -> bool {
    matches!(
        text.first(),
        Some(b'{' | b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n')
    )
}

/// Name what `bytes` look like, by magic numbers and then by text shape.
pub fn detect(bytes: &[u8], truncated: bool) -> Detected {
    if bytes.is_empty() {
        return Detected::Empty;
    }
    if is_executable(bytes) {
        return Detected::Executable;
    }
    if bytes.starts_with(&[0x1f, 0x8b]) {
        return Detected::Gzip;
    }
    if bytes.starts_with(b"PK\x03\x04") {
        return Detected::Zip;
    }
    if bytes.starts_with(b"%PDF-") {
        return Detected::Pdf;
    }
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Detected::Png;
    }
    if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        return Detected::Jpeg;
    }
    if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        return Detected::Gif;
    }
    if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        return Detected::Webp;
    }
    let text = trim_start_ascii_ws(strip_bom(bytes));
    if text.starts_with(b"#!") {
        return Detected::Shebang;
    }
    if looks_like_html(text) {
        return Detected::Html;
    }
    if starts_with_ignore_case(text, b"<?xml") {
        return Detected::Xml;
    }
    let parses = if truncated {
        json_could_start(text) && matches!(text.first(), Some(b'{' | b'['))
    } else {
        serde_json::from_slice::<serde::de::IgnoredAny>(strip_bom(bytes)).is_ok()
    };
    if parses {
        return Detected::Json;
    }
    // A cut body may end inside a multi-byte character; judge the part that decodes.
    let decodable = match std::str::from_utf8(bytes) {
        Ok(_) => true,
        Err(e) => truncated && e.error_len().is_none(),
    };
    if decodable && !bytes.contains(&0) {
        Detected::Text
    } else {
        Detected::Binary
    }
}

/// The media type of a `Content-Type` value: lower case, parameters dropped. `None` when it has
/// no `type/subtype` shape.
fn media_type(content_type: &str) -> Option<String> {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let (kind, subtype) = essence.split_once('/')?;
    (!kind.is_empty() && !subtype.is_empty() && !subtype.contains('/')).then_some(essence)
}

fn is_json_type(media: &str) -> bool {
    media == "application/json" || media == "text/json" || media.ends_with("+json")
}

fn is_executable_type(media: &str) -> bool {
    matches!(
        media,
        "application/octet-stream"
            | "application/x-executable"
            | "application/x-elf"
            | "application/x-msdownload"
            | "application/vnd.microsoft.portable-executable"
            | "application/x-mach-binary"
            | "application/x-sh"
            | "text/x-shellscript"
    )
}

fn is_gzip_type(media: &str) -> bool {
    matches!(
        media,
        "application/gzip" | "application/x-gzip" | "application/octet-stream"
    )
}

/// The magic a declared binary type must carry, if we know it.
fn expected_magic(media: &str) -> Option<Detected> {
    Some(match media {
        "image/png" => Detected::Png,
        "image/jpeg" | "image/jpg" => Detected::Jpeg,
        "image/gif" => Detected::Gif,
        "image/webp" => Detected::Webp,
        "application/pdf" => Detected::Pdf,
        "application/zip" => Detected::Zip,
        "application/gzip" | "application/x-gzip" => Detected::Gzip,
        _ => return None,
    })
}

/// Sniff one response: what the bytes are, and whether that is what was declared.
pub fn sniff(
    content_type: Option<&str>,
    content_encoding: Option<&str>,
    bytes: &[u8],
    truncated: bool,
) -> SniffResult {
    let detected = detect(bytes, truncated);
    let declared = content_type.and_then(media_type);
    let mut mismatches = Vec::new();
    if detected == Detected::Empty {
        return SniffResult {
            declared,
            detected,
            mismatches,
        };
    }
    let Some(media) = declared.clone() else {
        mismatches.push(match content_type {
            Some(raw) => format!("Content-Type {raw:?} is not a media type"),
            None => "no Content-Type declared for a non-empty body".to_string(),
        });
        return SniffResult {
            declared,
            detected,
            mismatches,
        };
    };
    let encoded = content_encoding
        .map(|e| e.trim().to_ascii_lowercase())
        .is_some_and(|e| !e.is_empty() && e != "identity");

    if detected == Detected::Gzip && !encoded && !is_gzip_type(&media) {
        mismatches.push(format!(
            "gzip bytes without a Content-Encoding, declared as {media}"
        ));
    }
    if matches!(detected, Detected::Executable | Detected::Shebang) && !is_executable_type(&media) {
        mismatches.push(format!(
            "{} bytes declared as {media}",
            if detected == Detected::Executable {
                "executable"
            } else {
                "script (#!)"
            }
        ));
    }
    if is_json_type(&media) && !encoded {
        match detected {
            Detected::Json => {}
            Detected::Html => mismatches.push(format!("HTML declared as {media}")),
            Detected::Executable | Detected::Shebang | Detected::Gzip => {}
            other => mismatches.push(format!(
                "declared {media} but the bytes do not parse as JSON (they look like {})",
                detected_name(other)
            )),
        }
    }
    if media == "text/html" && detected == Detected::Json {
        mismatches.push("JSON declared as text/html".to_string());
    }
    if let Some(expected) = expected_magic(&media)
        && detected != expected
        && !(encoded && detected == Detected::Gzip)
        && !matches!(detected, Detected::Executable | Detected::Shebang)
    {
        mismatches.push(format!(
            "declared {media} but the bytes look like {}",
            detected_name(detected)
        ));
    }
    SniffResult {
        declared,
        detected,
        mismatches,
    }
}

fn detected_name(detected: Detected) -> &'static str {
    match detected {
        Detected::Empty => "nothing",
        Detected::Json => "JSON",
        Detected::Html => "HTML",
        Detected::Xml => "XML",
        Detected::Shebang => "a script (#!)",
        Detected::Executable => "an executable",
        Detected::Gzip => "gzip",
        Detected::Zip => "zip",
        Detected::Pdf => "PDF",
        Detected::Png => "PNG",
        Detected::Jpeg => "JPEG",
        Detected::Gif => "GIF",
        Detected::Webp => "WebP",
        Detected::Text => "text",
        Detected::Binary => "binary data",
    }
}

/// S5 over the sampled responses of one probe run: pass when every declaration matches its
/// bytes, fail otherwise; `unmeasured` when there is no response to look at (R1 carries that).
pub fn s5(samples: &[SniffSample<'_>]) -> Conclusion {
    if samples.is_empty() {
        return Conclusion::unmeasured("no response bytes to sniff");
    }
    let results: Vec<(&str, SniffResult)> = samples
        .iter()
        .map(|s| {
            (
                s.label,
                sniff(s.content_type, s.content_encoding, s.body, s.truncated),
            )
        })
        .collect();
    let detail = json!({
        "samples": results.iter().map(|(label, r)| json!({
            "label": label,
            "declared": r.declared,
            "detected": r.detected,
            "mismatches": r.mismatches,
        })).collect::<Vec<_>>(),
    });
    let failures: Vec<String> = results
        .iter()
        .flat_map(|(label, r)| r.mismatches.iter().map(move |m| format!("{label}: {m}")))
        .collect();
    if failures.is_empty() {
        Conclusion::pass(format!(
            "{} response(s): declared content types match the bytes",
            samples.len()
        ))
        .with_detail(detail)
    } else {
        Conclusion::fail(failures.join("; ")).with_detail(detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Outcome;

    fn mismatches(ct: Option<&str>, ce: Option<&str>, body: &[u8]) -> Vec<String> {
        sniff(ct, ce, body, false).mismatches
    }

    #[test]
    fn json_declared_and_json_sent_matches() {
        assert!(
            mismatches(Some("application/json; charset=utf-8"), None, br#"{"a":1}"#).is_empty()
        );
        assert!(mismatches(Some("application/problem+json"), None, b"[1,2]").is_empty());
        // A UTF-8 byte order mark before JSON is tolerated.
        assert!(mismatches(Some("application/json"), None, b"\xef\xbb\xbf {\"a\":1}").is_empty());
    }

    #[test]
    fn json_declared_but_not_json() {
        let m = mismatches(Some("application/json"), None, b"{\"a\":");
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].contains("do not parse as JSON"));
        let m = mismatches(Some("application/json"), None, b"hello");
        assert!(m[0].contains("look like text"), "{m:?}");
    }

    #[test]
    fn json_declared_but_html_or_script() {
        let m = mismatches(
            Some("application/json"),
            None,
            b"<!DOCTYPE html><html></html>",
        );
        assert_eq!(m, vec!["HTML declared as application/json"]);
        let m = mismatches(
            Some("application/json"),
            None,
            b"  <script>alert(1)</script>",
        );
        assert_eq!(m, vec!["HTML declared as application/json"]);
    }

    #[test]
    fn executables_under_a_data_type() {
        for body in [
            &b"\x7fELF\x02\x01\x01"[..],
            b"MZ\x90\x00\x03",
            b"\xcf\xfa\xed\xfe\x07",
            b"#!/bin/sh\nrm -rf ~\n",
        ] {
            let m = mismatches(Some("application/json"), None, body);
            assert_eq!(m.len(), 1, "{body:?}: {m:?}");
            let m = mismatches(Some("text/plain"), None, body);
            assert_eq!(m.len(), 1, "{body:?}: {m:?}");
        }
        // Declared honestly as a download, an executable is not a content-type mismatch.
        assert!(mismatches(Some("application/octet-stream"), None, b"\x7fELF\x02").is_empty());
    }

    #[test]
    fn html_declared_but_json() {
        assert_eq!(
            mismatches(Some("text/html"), None, br#"{"ok":true}"#),
            vec!["JSON declared as text/html"]
        );
        assert!(mismatches(Some("text/html"), None, b"<html><body>hi</body></html>").is_empty());
    }

    #[test]
    fn gzip_without_content_encoding() {
        let gz = b"\x1f\x8b\x08\x00\x00\x00\x00\x00";
        let m = mismatches(Some("application/json"), None, gz);
        assert_eq!(
            m,
            vec!["gzip bytes without a Content-Encoding, declared as application/json"]
        );
        assert!(mismatches(Some("application/json"), Some("gzip"), gz).is_empty());
        assert!(mismatches(Some("application/gzip"), None, gz).is_empty());
    }

    #[test]
    fn images_must_carry_their_magic() {
        assert!(mismatches(Some("image/png"), None, b"\x89PNG\r\n\x1a\n\0\0").is_empty());
        let m = mismatches(Some("image/png"), None, b"<html>");
        assert_eq!(m, vec!["declared image/png but the bytes look like HTML"]);
    }

    #[test]
    fn missing_or_broken_declarations() {
        assert_eq!(
            mismatches(None, None, b"{}"),
            vec!["no Content-Type declared for a non-empty body"]
        );
        assert_eq!(mismatches(Some("json"), None, b"{}").len(), 1);
        // An empty body contradicts nothing, declared or not.
        assert!(mismatches(None, None, b"").is_empty());
        assert!(mismatches(Some("application/json"), None, b"").is_empty());
    }

    #[test]
    fn truncated_json_is_judged_by_its_start() {
        assert!(sniff(Some("application/json"), None, br#"{"items":[1,2,"#, true).matches());
        assert!(!sniff(Some("application/json"), None, b"oops", true).matches());
    }

    #[test]
    fn s5_folds_samples() {
        let ok = SniffSample {
            label: "402",
            content_type: Some("application/json"),
            content_encoding: None,
            body: b"{}",
            truncated: false,
        };
        let bad = SniffSample {
            label: "paid output 1",
            body: b"<html>",
            ..ok
        };
        assert_eq!(s5(&[ok]).outcome, Outcome::Pass);
        let c = s5(&[ok, bad]);
        assert_eq!(c.outcome, Outcome::Fail);
        assert_eq!(
            c.evidence,
            "paid output 1: HTML declared as application/json"
        );
        assert_eq!(c.detail["samples"][1]["detected"], "html");
        assert_eq!(s5(&[]).outcome, Outcome::Unmeasured);
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        use proptest::prelude::*;
        proptest!(|(body in proptest::collection::vec(any::<u8>(), 0..64), ct in "[a-z/+;= -]{0,24}", cut in any::<bool>())| {
            let _ = sniff(Some(&ct), None, &body, cut);
        });
    }
}
