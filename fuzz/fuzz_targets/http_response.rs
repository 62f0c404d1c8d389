//! A server's bytes as the prober reads a hop: hyper's HTTP/1.1 client with the prober's head
//! caps, then the body (chunked, sized or until close) under the byte cap, through
//! `probe::http::read_hop` over an in-memory stream instead of a socket.
//!
//! The first input byte picks the shape of the rest:
//! - bit 0-1: the body cap (16 bytes, 256 bytes, 4 KiB, 1 MiB);
//! - bit 2: 0: the rest is the server's bytes verbatim; 1: the rest is a body, split into chunks
//!   at every 0xFF byte, that the target sends chunked (with chunk extensions and upper-case hex
//!   on some chunks) and compares with what was read;
//! - bits 3-4: the stream's buffer (64 KiB, 1, 7 or 512 bytes), so that heads and chunk lines
//!   also arrive cut at every place;
//! - bit 5: the server writes as soon as the connection is open instead of after reading the
//!   request head.
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;
use x402_probe::probe::http::{
    FetchConfig, FetchError, FetchErrorKind, HttpResponse, Timeouts, read_hop,
};

const CAPS: [usize; 4] = [16, 256, 4096, 1024 * 1024];
const STREAM_BUFFERS: [usize; 4] = [64 * 1024, 1, 7, 512];
const MAX_HEADERS: usize = 16;
const MAX_HEADER_BYTES: usize = 2048;

/// `FUZZ_DEBUG=1`: print what each input read to (when replaying an input by hand).
static DEBUG: std::sync::LazyLock<bool> =
    std::sync::LazyLock::new(|| std::env::var_os("FUZZ_DEBUG").is_some());

thread_local! {
    // One runtime for all executions: building one per input would dominate the cost. Timers
    // only: the stream is in memory, and an IO driver would poll epoll at every task switch.
    static RUNTIME: RefCell<Runtime> = RefCell::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime"),
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let cap = CAPS[usize::from(control & 3)];
    let chunked = control & 4 != 0;
    let buffer = STREAM_BUFFERS[usize::from((control >> 3) & 3)];
    let early = control & 0x20 != 0;
    let cfg = FetchConfig {
        max_body_bytes: cap,
        max_headers: MAX_HEADERS,
        max_header_bytes: MAX_HEADER_BYTES,
        // The server has written everything and closed before anything waits: no phase may
        // time out. Short limits turn a hang into a failed assertion, not a libFuzzer timeout.
        timeouts: Timeouts {
            first_byte_ms: 2_000,
            body_ms: 2_000,
            overall_ms: 4_000,
            ..Timeouts::default()
        },
        ..FetchConfig::default()
    };
    let served = if chunked {
        chunked_response(rest)
    } else {
        rest.to_vec()
    };
    let (response, error) =
        RUNTIME.with(|rt| rt.borrow().block_on(exchange(&cfg, served, buffer, early)));

    if *DEBUG {
        eprintln!("{response:?}\n{error:?}");
    }
    if let Some(e) = &error {
        assert_ne!(
            e.kind,
            FetchErrorKind::Timeout,
            "a phase waited for nothing: {e:?}"
        );
    }
    let Some(response) = response else {
        return;
    };
    assert_response(&response, cap);
    if chunked && !early {
        // A well-formed chunked body, sent after the request, reads back as the bytes that were
        // chunked, up to the cap. (Sent early, hyper may refuse it as unasked-for.)
        let body: Vec<u8> = rest.split(|&b| b == 0xFF).flatten().copied().collect();
        assert!(error.is_none(), "a well-formed chunked body: {error:?}");
        assert_eq!(response.status, 200);
        assert_eq!(response.body_truncated, body.len() > cap);
        assert_eq!(response.body, body[..body.len().min(cap)]);
        return;
    }
    // A body announced by one Content-Length is read whole or reported: never silently short.
    let lengths: Vec<&str> = response
        .headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.as_str())
        .collect();
    let framed_by_length = !response
        .headers
        .iter()
        .any(|(n, _)| n == "transfer-encoding")
        && !matches!(response.status, 100..=199 | 204 | 304);
    if error.is_none()
        && !response.body_truncated
        && framed_by_length
        && let [length] = lengths[..]
        && let Ok(length) = length.parse::<usize>()
    {
        assert_eq!(
            response.body.len(),
            length,
            "a body shorter than announced, no error"
        );
    }
});

/// The server reads the request head, then writes `served` and closes its side (or, with
/// `early`, writes first, as a server that speaks on connect).
async fn exchange(
    cfg: &FetchConfig,
    served: Vec<u8>,
    buffer: usize,
    early: bool,
) -> (Option<HttpResponse>, Option<FetchError>) {
    let (client, mut server) = tokio::io::duplex(buffer);
    let serve = async move {
        if !early {
            let mut request = Vec::new();
            let mut byte = [0u8; 256];
            while !request.ends_with(b"\r\n\r\n") {
                match server.read(&mut byte).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&byte[..n]),
                }
            }
        }
        let _ = server.write_all(&served).await;
        let _ = server.shutdown().await;
    };
    let (_, read) = tokio::join!(serve, read_hop(cfg, "http://fuzz.test/x", client));
    read
}

fn chunked_response(body: &[u8]) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for (i, chunk) in body
        .split(|&b| b == 0xFF)
        .filter(|c| !c.is_empty())
        .enumerate()
    {
        let line = match i % 3 {
            0 => format!("{:x}\r\n", chunk.len()),
            1 => format!("{:X};name=value\r\n", chunk.len()),
            _ => format!("{:x};ext\r\n", chunk.len()),
        };
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// What every read response keeps, whatever the server sent.
fn assert_response(response: &HttpResponse, cap: usize) {
    assert!(
        response.body.len() <= cap,
        "{} body bytes, cap {cap}",
        response.body.len()
    );
    if response.body_truncated {
        assert_eq!(
            response.body.len(),
            cap,
            "a truncated body is cut at the cap"
        );
    }
    assert!(
        (100..=999).contains(&response.status),
        "{}",
        response.status
    );
    // Repeats of a name are listed together, so the count can only be at most hyper's.
    assert!(
        response.headers.len() <= MAX_HEADERS,
        "{} headers",
        response.headers.len()
    );
    for (name, _) in &response.headers {
        assert!(
            !name.is_empty() && !name.bytes().any(|b| b.is_ascii_uppercase()),
            "header name {name:?}"
        );
    }
}
