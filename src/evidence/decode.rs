//! Bounded decoding of a response body the server compressed although we never asked it to.
//!
//! The fetcher keeps the raw bytes; a caller that wants the decoded form asks here, with an
//! output cap. A decompression bomb is refused twice over: by the output cap, and by a ratio cap
//! (output / input) that trips long before the output cap on tiny, very repetitive inputs.

use std::io::Read;

use flate2::read::{GzDecoder, ZlibDecoder};

use super::http::HttpResponse;

/// Largest output / input ratio accepted once the output is past [`RATIO_FLOOR_BYTES`]. Real
/// JSON compresses around 5-20x; bombs run at hundreds or a thousand.
pub const MAX_RATIO: usize = 100;
/// Below this much output the ratio is not checked (a tiny body can have any ratio).
pub const RATIO_FLOOR_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("content coding {0:?} is not supported (only gzip, x-gzip, deflate, identity)")]
    Unsupported(String),
    #[error("decoded body exceeds the cap of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("compression ratio above {max}:1 ({output} bytes out of {input}): refused as a bomb")]
    RatioExceeded {
        max: usize,
        input: usize,
        output: usize,
    },
    #[error("compressed body is corrupt or truncated: {0}")]
    Corrupt(String),
}

/// The body with its `Content-Encoding` undone, never producing more than `max_out` bytes.
/// Several codings (`gzip, gzip`) are undone in reverse order, each step under the same caps.
pub fn decode_body_bounded(
    response: &HttpResponse,
    max_out: usize,
) -> Result<Vec<u8>, DecodeError> {
    let codings: Vec<String> = response
        .header("content-encoding")
        .unwrap_or("")
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity")
        .collect();
    let mut bytes = response.body.clone();
    if bytes.len() > max_out {
        return Err(DecodeError::TooLarge { limit: max_out });
    }
    for coding in codings.iter().rev() {
        bytes = match coding.as_str() {
            "gzip" | "x-gzip" => inflate(GzDecoder::new(bytes.as_slice()), bytes.len(), max_out)?,
            "deflate" => inflate(ZlibDecoder::new(bytes.as_slice()), bytes.len(), max_out)?,
            other => return Err(DecodeError::Unsupported(other.to_string())),
        };
    }
    Ok(bytes)
}

fn inflate(mut decoder: impl Read, input: usize, max_out: usize) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = decoder
            .read(&mut chunk)
            .map_err(|e| DecodeError::Corrupt(e.to_string()))?;
        if n == 0 {
            return Ok(out);
        }
        if out.len() + n > max_out {
            return Err(DecodeError::TooLarge { limit: max_out });
        }
        out.extend_from_slice(&chunk[..n]);
        if out.len() > RATIO_FLOOR_BYTES && out.len() > input.saturating_mul(MAX_RATIO) {
            return Err(DecodeError::RatioExceeded {
                max: MAX_RATIO,
                input,
                output: out.len(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::Compression;
    use flate2::write::GzEncoder;

    use super::*;

    fn response(encoding: Option<&str>, body: Vec<u8>) -> HttpResponse {
        let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
        if let Some(e) = encoding {
            headers.push(("content-encoding".to_string(), e.to_string()));
        }
        HttpResponse::new(402, headers, body, false, 0)
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(data).expect("in-memory write");
        enc.finish().expect("in-memory finish")
    }

    #[test]
    fn identity_and_gzip_round_trip() {
        let text = br#"{"x402Version":2,"accepts":[]}"#.to_vec();
        let plain = response(None, text.clone());
        assert_eq!(decode_body_bounded(&plain, 1024), Ok(text.clone()));
        let zipped = response(Some("gzip"), gzip(&text));
        assert_eq!(decode_body_bounded(&zipped, 1024), Ok(text.clone()));
        let twice = response(Some("gzip, gzip"), gzip(&gzip(&text)));
        assert_eq!(decode_body_bounded(&twice, 1024), Ok(text));
    }

    #[test]
    fn refuses_bombs_by_ratio_and_by_size() {
        let bomb = gzip(&vec![0u8; 8 * 1024 * 1024]);
        assert!(bomb.len() < 64 * 1024, "a bomb is small on the wire");
        let r = response(Some("gzip"), bomb);
        assert!(matches!(
            decode_body_bounded(&r, 64 * 1024 * 1024),
            Err(DecodeError::RatioExceeded { .. })
        ));
        assert!(matches!(
            decode_body_bounded(&r, 1000),
            Err(DecodeError::TooLarge { limit: 1000 })
        ));
    }

    #[test]
    fn refuses_unknown_and_corrupt() {
        let r = response(Some("br"), vec![1, 2, 3]);
        assert_eq!(
            decode_body_bounded(&r, 1024),
            Err(DecodeError::Unsupported("br".to_string()))
        );
        let mut cut = gzip(b"hello hello hello hello");
        cut.truncate(cut.len() / 2);
        let r = response(Some("gzip"), cut);
        assert!(matches!(
            decode_body_bounded(&r, 1024),
            Err(DecodeError::Corrupt(_))
        ));
    }
}
