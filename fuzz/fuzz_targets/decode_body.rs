//! Bounded decoding of a body the server compressed unasked (`Content-Encoding`: gzip, x-gzip,
//! deflate, stacked codings, identity), and S5's sniffing of the decoded bytes.
//!
//! The first line of the input picks the output cap (a number of 64-byte units: up to 4 MiB, so
//! both real caps, S5's 1 MiB and the paid output's 4 MiB, are within reach).
#![no_main]

use std::io::Write;

use flate2::Compression;
use flate2::write::{GzEncoder, ZlibEncoder};
use libfuzzer_sys::fuzz_target;
use x402_probe::checks::sniff::{Detected, SniffSample, s5, sniff};
use x402_probe::evidence::decode::{
    DecodeError, MAX_RATIO, RATIO_FLOOR_BYTES, decode_body_bounded,
};
use x402_probe::evidence::http::HttpResponse;
use x402_probe_fuzz::{Response, assert_conclusion, response};

fuzz_target!(|data: &[u8]| {
    let r = response(data);
    let max_out = usize::from(r.status) * 64;
    let http = http_response(&r, r.body.clone());
    let codings: Vec<String> = r
        .header("content-encoding")
        .unwrap_or("")
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity")
        .collect();

    let decoded = decode_body_bounded(&http, max_out);
    match &decoded {
        Ok(out) => {
            assert!(
                out.len() <= max_out,
                "{} bytes out, cap {max_out}",
                out.len()
            );
            // Every step is held to the ratio: the output is at most what the ratio allows over
            // the input of each step (or the floor below which the ratio is not checked).
            let mut bound = r.body.len();
            for _ in &codings {
                bound = bound
                    .saturating_mul(MAX_RATIO)
                    .max(RATIO_FLOOR_BYTES)
                    .min(max_out);
            }
            assert!(
                out.len() <= bound.max(r.body.len()),
                "{} bytes out of {}",
                out.len(),
                r.body.len()
            );
            if codings.is_empty() {
                assert_eq!(out, &r.body, "identity changes nothing");
            }
        }
        Err(DecodeError::TooLarge { limit }) => assert_eq!(*limit, max_out),
        Err(DecodeError::RatioExceeded { max, input, output }) => {
            assert_eq!(*max, MAX_RATIO);
            assert!(
                *output > RATIO_FLOOR_BYTES && *output > input * MAX_RATIO && *output <= max_out
            );
        }
        Err(DecodeError::Unsupported(coding)) => assert!(codings.contains(coding)),
        Err(DecodeError::Corrupt(message)) => assert!(message.len() <= 1024, "{message}"),
    }
    if codings.is_empty() {
        assert_eq!(decoded.is_ok(), r.body.len() <= max_out);
    }

    // Differential: whatever we compress ourselves comes back byte for byte, unless a cap says no.
    for (coding, compressed) in [("gzip", gzip(&r.body)), ("deflate", zlib(&r.body))] {
        let packed = http_response(
            &Response {
                headers: vec![("content-encoding".into(), coding.into())],
                ..r.clone()
            },
            compressed.clone(),
        );
        let expect_ratio_refusal = r.body.len() > RATIO_FLOOR_BYTES
            && r.body.len() > compressed.len().saturating_mul(MAX_RATIO);
        match decode_body_bounded(&packed, max_out) {
            Ok(out) => assert_eq!(out, r.body, "{coding} does not round-trip"),
            Err(DecodeError::TooLarge { .. }) => {
                assert!(r.body.len() > max_out || compressed.len() > max_out)
            }
            Err(DecodeError::RatioExceeded { .. }) => assert!(expect_ratio_refusal, "{coding}"),
            Err(e) => panic!("{coding} of {} bytes refused: {e}", r.body.len()),
        }
    }

    // S5 over what was decoded (or the raw bytes, as the free run does when nothing was coded).
    if let Ok(bytes) = &decoded {
        let content_type = r.header("content-type");
        let seen = sniff(content_type, None, bytes, false);
        assert_eq!(seen.detected == Detected::Empty, bytes.is_empty());
        assert!(seen.mismatches.len() <= 4, "{:?}", seen.mismatches);
        if let Some(media) = &seen.declared {
            assert!(!media.contains(';') && *media == media.to_ascii_lowercase());
        }
        // A mismatch quotes the declared type at most once, escaped (`\u{7f}`: at most 6 bytes
        // for a byte).
        let quoted = content_type.map_or(0, str::len);
        for m in &seen.mismatches {
            assert!(m.len() <= 6 * quoted + 256, "{} bytes", m.len());
        }
        let conclusion = s5(&[SniffSample {
            label: "402",
            content_type,
            content_encoding: None,
            body: bytes,
            truncated: false,
        }]);
        assert_conclusion("S5", &conclusion, 12 * quoted + 64 * 1024);
    }
});

fn http_response(r: &Response, body: Vec<u8>) -> HttpResponse {
    HttpResponse::new(r.status, r.headers.clone(), body, false, 0)
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(data).expect("in memory");
    e.finish().expect("in memory")
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = ZlibEncoder::new(Vec::new(), Compression::fast());
    e.write_all(data).expect("in memory");
    e.finish().expect("in memory")
}
