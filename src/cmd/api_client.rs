//! The daemon's API as the terminal commands call it (`status`, `preflight`): http only (put the
//! API behind TLS with a proxy), one request on a runtime of its own, a deadline, a bounded answer.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};

const TIMEOUT: Duration = Duration::from_secs(10);
const MAX_BODY: usize = 4 * 1024 * 1024;

/// `api` (the `--api` option) joined with `path_and_query`: an http URL, or why not.
pub(crate) fn uri(api: &str, path_and_query: &str) -> Result<http::Uri> {
    let uri: http::Uri = format!("{}{path_and_query}", api.trim_end_matches('/'))
        .parse()
        .with_context(|| format!("--api {api}: not a URL"))?;
    if uri.scheme_str() != Some("http") {
        bail!("--api {api}: only http:// is spoken (put the daemon's API behind TLS with a proxy)");
    }
    Ok(uri)
}

/// One request to `uri` (a GET, or a POST of `body` as JSON): its status and body, or why the
/// daemon did not answer (connection refused, the deadline passed, an answer too large).
pub(crate) fn call(uri: &http::Uri, body: Option<Vec<u8>>) -> Result<(u16, Bytes), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    match runtime.block_on(async { tokio::time::timeout(TIMEOUT, send(uri, body)).await }) {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(_) => Err(format!("no answer within {TIMEOUT:?}")),
    }
}

/// One request as a command makes it (`command`: `status`, `preflight`), its answer read as a
/// `what` (`T`) with the body it came in; `None` when there is none, the reason said on stderr
/// (no answer, a status other than 200, a body that is not a `what`): the command exits 1.
pub(crate) fn fetch<T: serde::de::DeserializeOwned>(
    command: &str,
    api: &str,
    uri: &http::Uri,
    body: Option<Vec<u8>>,
    what: &str,
) -> Option<(T, Bytes)> {
    let (status, body) = match call(uri, body) {
        Ok(answer) => answer,
        Err(e) => {
            eprintln!("x402-probe {command}: {api} did not answer: {e}");
            return None;
        }
    };
    if status != 200 {
        let text = String::from_utf8_lossy(&body);
        eprintln!(
            "x402-probe {command}: HTTP {status}: {}",
            crate::report::one_line(&text, 300)
        );
        return None;
    }
    match serde_json::from_slice(&body) {
        Ok(answer) => Some((answer, body)),
        Err(e) => {
            eprintln!("x402-probe {command}: the answer is not {what}: {e}");
            None
        }
    }
}

async fn send(uri: &http::Uri, body: Option<Vec<u8>>) -> Result<(u16, Bytes)> {
    let host = uri.host().context("the URL has no host")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .with_context(|| format!("connecting to {host}:{port}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or(host);
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let request = http::Request::builder()
        .uri(target)
        .header(http::header::HOST, authority)
        .header(http::header::ACCEPT, "application/json");
    let request = match body {
        None => request
            .method(http::Method::GET)
            .body(Full::new(Bytes::new()))?,
        Some(body) => request
            .method(http::Method::POST)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?,
    };
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| anyhow::anyhow!("reading the answer: {e}"))?
        .to_bytes();
    Ok((status, body))
}
