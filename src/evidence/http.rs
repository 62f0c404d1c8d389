//! What one HTTP exchange looked like: the request sent, every hop, the response head and its
//! bounded body, TLS as seen, phase timings, and where it failed. Plain data, produced by the HTTP
//! prober (`probe::http`), read by the checks, stored in the ledger.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchRequest {
    pub method: String,
    pub url: String,
    /// Sent in order. `Host`, `Content-Length` and `Accept-Encoding` are ignored: the fetcher
    /// sets the first two itself and never asks for compression.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    #[serde(default, with = "b64::bytes")]
    pub body: Vec<u8>,
}

impl FetchRequest {
    /// A `GET` with no extra headers.
    pub fn get(url: impl Into<String>) -> FetchRequest {
        FetchRequest {
            method: "GET".to_string(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Adds a header (builder style).
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// Everything observed while fetching one URL.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// The URL as requested.
    pub url: String,
    /// Every hop tried, in order (several when same-host redirects were followed).
    pub hops: Vec<Hop>,
    /// The last response head seen, with its (bounded) body. Present even when `error` is set
    /// if a head arrived (e.g. an off-host redirect, or a body cut short).
    pub response: Option<HttpResponse>,
    pub error: Option<FetchError>,
    /// TLS as seen on the last hop, when the server presented a certificate chain.
    pub tls: Option<TlsSeen>,
    /// The last hop's phases; `ttfb_ms`, `last_byte_ms` and `total_ms` count from the start of
    /// the whole fetch (redirects included), as the caller experienced it.
    pub timings: Timings,
    /// The address of the last hop's connection (or the last one tried).
    pub remote_addr: Option<String>,
}

/// One unpaid request and what came back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub request: FetchRequest,
    pub exchange: Exchange,
}

impl Exchange {
    /// The URL of the last hop (the requested one when there were no redirects).
    pub fn final_url(&self) -> &str {
        self.hops
            .last()
            .map_or(self.url.as_str(), |h| h.url.as_str())
    }

    /// Every response of this exchange (today only the last hop keeps one).
    pub fn responses_mut(&mut self) -> impl Iterator<Item = &mut HttpResponse> {
        self.response.iter_mut()
    }

    /// The response status, if a head arrived.
    pub fn status(&self) -> Option<u16> {
        self.response.as_ref().map(|r| r.status)
    }
}

/// One request/response on one connection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    pub url: String,
    pub remote_addr: Option<String>,
    pub status: Option<u16>,
    /// The `Location` header of a redirect response.
    pub location: Option<String>,
    /// `Some(verified)` on https hops whose server presented a chain.
    pub tls_verified: Option<bool>,
    /// Phases of this hop; `ttfb_ms`, `last_byte_ms` and `total_ms` count from the hop's start.
    pub timings: Timings,
}

/// Phase timings in milliseconds; `None` where a phase did not happen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Name resolution (`None` for an IP literal).
    pub dns_ms: Option<f64>,
    /// TCP connect, all attempts.
    pub connect_ms: Option<f64>,
    /// TLS handshake.
    pub tls_ms: Option<f64>,
    /// Time to first byte: until the complete response head was received.
    pub ttfb_ms: Option<f64>,
    /// Until the last body byte (or the last byte kept, when truncated at the cap).
    pub last_byte_ms: Option<f64>,
    pub total_ms: Option<f64>,
}

/// A response head and its bounded body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HttpResponse {
    pub status: u16,
    /// Names lower-cased, values as lossy UTF-8; in the order received, except that repeats of
    /// a name are listed together at the first occurrence's place.
    pub headers: Vec<(String, String)>,
    /// The raw body as received (still compressed if the server compressed it), at most
    /// `max_body_bytes`. Serialised as base64.
    #[serde(with = "b64::bytes")]
    pub body: Vec<u8>,
    /// The server sent more than `max_body_bytes` (the rest was not read).
    pub body_truncated: bool,
    /// sha256 (hex) of `body` as stored.
    pub body_sha256: String,
    /// Size of the head as received: status line, header lines and the blank line (computed
    /// from the parsed head, so whitespace variations are not counted exactly).
    pub head_bytes: usize,
    /// The ledger keeps large bodies once, addressed by `body_sha256`: `body` is then empty here
    /// and read back from the ledger's blobs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub body_stored_apart: bool,
    /// The ledger (format 2) keeps the header set once, addressed by this SHA-256 (hex): `headers`
    /// then holds only the values that change from one answer to the next (`date`, ...), in
    /// order, and the blob the rest with those values left out (`ledger::stored`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_sha256: Option<String>,
}

impl HttpResponse {
    pub fn new(
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        body_truncated: bool,
        head_bytes: usize,
    ) -> HttpResponse {
        let body_sha256 = hex::encode(Sha256::digest(&body));
        HttpResponse {
            status,
            headers,
            body,
            body_truncated,
            body_sha256,
            head_bytes,
            body_stored_apart: false,
            headers_sha256: None,
        }
    }

    /// The first value of header `name`, compared case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of header `name`, in order.
    pub fn header_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the TLS handshake showed. Present whenever the server presented a certificate chain,
/// including when verification failed and the handshake was stopped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TlsSeen {
    /// e.g. `TLSv1.3`; `None` when the handshake did not complete.
    pub version: Option<String>,
    /// IANA name, e.g. `TLS13_AES_256_GCM_SHA384`; `None` when the handshake did not complete.
    pub cipher: Option<String>,
    /// The negotiated ALPN protocol, if any.
    pub alpn: Option<String>,
    /// The server name sent (`None` for an IP literal: no SNI then).
    pub sni: Option<String>,
    /// The peer's chain as sent, leaf first; serialised as base64 DER.
    #[serde(with = "b64::bytes_list")]
    pub chain_der: Vec<Vec<u8>>,
    /// Unix seconds.
    pub leaf_not_before: Option<i64>,
    /// Unix seconds.
    pub leaf_not_after: Option<i64>,
    pub leaf_subject: Option<String>,
    pub leaf_issuer: Option<String>,
    /// The chain verified against the webpki roots (plus `extra_roots`) for this host, now.
    pub verified: bool,
    pub verify_error: Option<String>,
    /// The ledger (format 2) keeps the certificate chain once, addressed by this SHA-256 (hex):
    /// `chain_der` is then empty here and read back from the ledger's blobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_sha256: Option<String>,
}

/// Where a fetch failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Dns,
    Guard,
    Connect,
    Tls,
    /// Building or sending the request (a bad URL or header given by the caller is here too).
    Request,
    /// Waiting for and parsing the response head.
    Head,
    Body,
    Redirect,
}

/// What kind of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FetchErrorKind {
    Timeout,
    Refused,
    /// The peer closed or reset the connection early.
    Reset,
    /// The address guard refused the destination.
    Blocked,
    TlsInvalid,
    /// A cap was hit (response head size or header count).
    TooLarge,
    /// The peer broke HTTP or TLS.
    Protocol,
    RedirectOffHost,
    RedirectLoop,
    /// More than `max_redirects` same-host redirects, each to a new URL.
    TooManyRedirects,
    BadUrl,
    /// The name does not exist (NXDOMAIN): the subject's doing.
    NameNotFound,
    /// The name exists but has no A or AAAA record: the subject's doing.
    NoAddress,
    /// Our resolver could not answer (SERVFAIL, REFUSED, no nameserver reachable, no answer in
    /// time): ours, says nothing about the subject.
    ResolverFailed,
    Other,
}

/// A failure, with the phase it happened in and a message a human can act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{phase:?} failed ({kind:?}): {message}")]
pub struct FetchError {
    pub phase: Phase,
    pub kind: FetchErrorKind,
    pub message: String,
}

impl FetchError {
    pub fn new(phase: Phase, kind: FetchErrorKind, message: impl Into<String>) -> FetchError {
        FetchError {
            phase,
            kind,
            message: message.into(),
        }
    }
}

/// Serde helpers: byte strings as standard base64.
pub(crate) mod b64 {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;

    pub mod bytes {
        use super::*;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&STANDARD.encode(v))
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
            let text = String::deserialize(d)?;
            STANDARD.decode(text).map_err(serde::de::Error::custom)
        }
    }

    pub mod bytes_list {
        use super::*;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(v.iter().map(|b| STANDARD.encode(b)))
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
            let texts = Vec::<String>::deserialize(d)?;
            texts
                .into_iter()
                .map(|t| STANDARD.decode(t).map_err(serde::de::Error::custom))
                .collect()
        }
    }
}
