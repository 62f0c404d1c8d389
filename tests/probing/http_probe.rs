//! The HTTP/TLS prober against real servers on loopback, started by each test on its own port:
//! honest ones, TLS ones with a CA made here, and hostile ones.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use x402_probe::probe::http::{
    DecodeError, Exchange, FetchConfig, FetchErrorKind, FetchRequest, Phase, decode_body_bounded,
    fetch,
};

// ---------------------------------------------------------------------------------------------
// Servers

/// A raw TCP server on 127.0.0.1: every connection goes to `handle`. Counts connections.
struct RawServer {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    /// The request heads received, in order.
    requests: Arc<Mutex<Vec<String>>>,
}

impl RawServer {
    async fn start<F, Fut>(handle: F) -> RawServer
    where
        F: Fn(TcpStream, String) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (count, seen) = (connections.clone(), requests.clone());
        let handle = Arc::new(handle);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let (handle, seen) = (handle.clone(), seen.clone());
                tokio::spawn(async move {
                    let head = read_head(&mut stream).await;
                    seen.lock().await.push(head.clone());
                    handle(stream, head).await;
                });
            }
        });
        RawServer {
            addr,
            connections,
            requests,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }
}

/// Reads a request head (up to the blank line, at most 64 KiB).
async fn read_head<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

fn request_path(head: &str) -> &str {
    head.split_whitespace().nth(1).unwrap_or("")
}

const PAYMENT_BODY: &str = r#"{"x402Version":1,"error":"payment required","accepts":[]}"#;

fn response_402() -> Vec<u8> {
    format!(
        "HTTP/1.1 402 Payment Required\r\nContent-Type: application/json\r\n\
         Payment-Required: eyJ4NDAyVmVyc2lvbiI6Mn0=\r\nX-Twice: one\r\nX-Twice: two\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{PAYMENT_BODY}",
        PAYMENT_BODY.len()
    )
    .into_bytes()
}

async fn serve_402(mut stream: TcpStream, _head: String) {
    let _ = stream.write_all(&response_402()).await;
    let _ = stream.shutdown().await;
}

fn redirect(status: u16, location: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} Moved\r\nLocation: {location}\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )
    .into_bytes()
}

/// A test CA and how to issue leaf certificates from it.
struct TestCa {
    der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    fn new() -> TestCa {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "x402-probe test CA");
        let cert = params.self_signed(&key).expect("self-signed CA");
        TestCa {
            der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf for `localhost` and 127.0.0.1, valid over `[not_before, not_after]` (unix seconds).
    fn leaf(
        &self,
        not_before: i64,
        not_after: i64,
    ) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let key = KeyPair::generate().expect("leaf key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .expect("leaf params");
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost test leaf");
        params.not_before = time::OffsetDateTime::from_unix_timestamp(not_before).expect("time");
        params.not_after = time::OffsetDateTime::from_unix_timestamp(not_after).expect("time");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf signed");
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (vec![cert.der().clone(), self.der.clone()], key_der)
    }
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

const DAY: i64 = 86_400;

/// A TLS server on 127.0.0.1 answering every request with the 402.
async fn start_tls_402(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> SocketAddr {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server certificate");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = read_head(&mut tls).await;
                let _ = tls.write_all(&response_402()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    addr
}

fn local_cfg() -> FetchConfig {
    FetchConfig {
        allow_private: true,
        ..FetchConfig::default()
    }
}

fn error_of(ex: &Exchange) -> (Phase, FetchErrorKind, &str) {
    let e = ex
        .error
        .as_ref()
        .unwrap_or_else(|| panic!("expected an error, got {ex:#?}"));
    (e.phase, e.kind, e.message.as_str())
}

/// Runs `fetch` and returns it with the wall time it took.
async fn timed_fetch(cfg: &FetchConfig, req: &FetchRequest) -> (Exchange, Duration) {
    let started = Instant::now();
    let ex = fetch(cfg, req).await;
    (ex, started.elapsed())
}

// ---------------------------------------------------------------------------------------------
// Plain HTTP and TLS

#[tokio::test]
async fn plain_http_402_is_recorded_with_every_timing() {
    let server = RawServer::start(serve_402).await;
    let url = format!("http://localhost:{}/weather?city=Paris", server.port());
    let req = FetchRequest::get(&url).with_header("X-Probe", "1");
    let ex = fetch(&local_cfg(), &req).await;

    assert!(ex.error.is_none(), "unexpected error: {:?}", ex.error);
    let response = ex.response.as_ref().expect("a response");
    assert_eq!(response.status, 402);
    assert_eq!(response.header("CONTENT-TYPE"), Some("application/json"));
    assert_eq!(
        response.header("payment-required"),
        Some("eyJ4NDAyVmVyc2lvbiI6Mn0=")
    );
    assert_eq!(
        response.header_all("x-twice").collect::<Vec<_>>(),
        ["one", "two"]
    );
    assert!(
        response
            .headers
            .iter()
            .all(|(n, _)| *n == n.to_ascii_lowercase())
    );
    assert_eq!(response.body, PAYMENT_BODY.as_bytes());
    assert!(!response.body_truncated);
    assert_eq!(response.body_sha256, sha256_hex(PAYMENT_BODY.as_bytes()));
    assert!(
        response.head_bytes > 100 && response.head_bytes < 400,
        "{}",
        response.head_bytes
    );

    let t = ex.timings;
    for (name, value) in [
        ("dns", t.dns_ms),
        ("connect", t.connect_ms),
        ("ttfb", t.ttfb_ms),
        ("last_byte", t.last_byte_ms),
        ("total", t.total_ms),
    ] {
        let v = value.unwrap_or_else(|| panic!("{name} timing missing: {t:?}"));
        assert!((0.0..5_000.0).contains(&v), "{name} = {v}");
    }
    assert_eq!(t.tls_ms, None, "no TLS on plain HTTP");
    let (ttfb, last, total) = (
        t.ttfb_ms.unwrap_or(0.0),
        t.last_byte_ms.unwrap_or(0.0),
        t.total_ms.unwrap_or(0.0),
    );
    assert!(ttfb <= last && last <= total, "{t:?}");
    assert!(ex.tls.is_none());
    assert_eq!(ex.hops.len(), 1);
    assert!(
        ex.remote_addr
            .as_deref()
            .is_some_and(|a| a.ends_with(&format!(":{}", server.port())))
    );

    // What went on the wire: Host set, our header kept, no compression asked for.
    let requests = server.requests.lock().await;
    let head = requests.first().expect("one request").to_ascii_lowercase();
    assert!(
        head.starts_with("get /weather?city=paris http/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.contains(&format!("host: localhost:{}\r\n", server.port())),
        "{head}"
    );
    assert!(head.contains("x-probe: 1\r\n"), "{head}");
    assert!(head.contains("user-agent: x402-probe/"), "{head}");
    assert!(!head.contains("accept-encoding"), "{head}");
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

#[tokio::test]
async fn post_body_is_sent_and_caller_cannot_ask_for_compression() {
    let server = RawServer::start(|mut stream: TcpStream, head: String| async move {
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap_or(0))
            })
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        let _ = stream.read_exact(&mut body).await;
        let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.write_all(&body).await;
    })
    .await;
    let req = FetchRequest {
        method: "POST".to_string(),
        url: server.url("/echo"),
        headers: vec![
            ("Content-Type".to_string(), "application/json".to_string()),
            ("Accept-Encoding".to_string(), "gzip".to_string()),
        ],
        body: br#"{"q":1}"#.to_vec(),
    };
    let ex = fetch(&local_cfg(), &req).await;
    assert_eq!(ex.status(), Some(200), "{:?}", ex.error);
    assert_eq!(
        ex.response.as_ref().map(|r| r.body.as_slice()),
        Some(&br#"{"q":1}"#[..])
    );
    let head = server.requests.lock().await.concat().to_ascii_lowercase();
    assert!(head.starts_with("post /echo http/1.1"), "{head}");
    assert!(!head.contains("accept-encoding"), "{head}");
}

#[tokio::test]
async fn https_with_a_test_ca_trusted_through_extra_roots() {
    let ca = TestCa::new();
    let not_after = now_unix() + 90 * DAY;
    let (chain, key) = ca.leaf(now_unix() - DAY, not_after);
    let addr = start_tls_402(chain, key).await;
    let cfg = FetchConfig {
        extra_roots: vec![ca.der.clone()],
        ..local_cfg()
    };
    let ex = fetch(
        &cfg,
        &FetchRequest::get(format!("https://localhost:{}/paid", addr.port())),
    )
    .await;

    assert!(ex.error.is_none(), "unexpected error: {:?}", ex.error);
    assert_eq!(ex.status(), Some(402));
    assert_eq!(
        ex.response.as_ref().map(|r| r.body.as_slice()),
        Some(PAYMENT_BODY.as_bytes())
    );
    let tls = ex.tls.as_ref().expect("TLS observed");
    assert!(tls.verified, "{tls:?}");
    assert_eq!(tls.verify_error, None);
    assert_eq!(tls.version.as_deref(), Some("TLSv1.3"));
    assert!(
        tls.cipher
            .as_deref()
            .is_some_and(|c| c.starts_with("TLS13_")),
        "{:?}",
        tls.cipher
    );
    assert_eq!(tls.alpn.as_deref(), Some("http/1.1"));
    assert_eq!(tls.sni.as_deref(), Some("localhost"));
    assert_eq!(tls.chain_der.len(), 2, "leaf and CA as sent");
    assert_eq!(tls.chain_der[1], ca.der.as_ref());
    assert_eq!(tls.leaf_not_after, Some(not_after));
    assert!(
        tls.leaf_subject
            .as_deref()
            .is_some_and(|s| s.contains("localhost test leaf"))
    );
    assert!(
        tls.leaf_issuer
            .as_deref()
            .is_some_and(|s| s.contains("x402-probe test CA"))
    );
    assert!(
        ex.timings.tls_ms.is_some_and(|v| v > 0.0 && v < 5_000.0),
        "{:?}",
        ex.timings
    );
    assert_eq!(ex.hops[0].tls_verified, Some(true));

    // An IP literal: verified against the IP SAN, and no SNI is sent.
    let ex = fetch(
        &cfg,
        &FetchRequest::get(format!("https://127.0.0.1:{}/", addr.port())),
    )
    .await;
    assert!(ex.error.is_none(), "{:?}", ex.error);
    let tls = ex.tls.as_ref().expect("TLS observed");
    assert!(tls.verified);
    assert_eq!(tls.sni, None);
    assert_eq!(ex.timings.dns_ms, None, "no DNS for an IP literal");

    // The receipt form: everything serialises, DER as base64.
    let json = serde_json::to_value(&ex).expect("serialise");
    assert!(
        json["tls"]["chain_der"][0]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    let back: Exchange = serde_json::from_value(json).expect("round trip");
    assert_eq!(back, ex);
}

#[tokio::test]
async fn https_without_the_ca_is_refused_or_observed_as_unverified() {
    let ca = TestCa::new();
    let (chain, key) = ca.leaf(now_unix() - DAY, now_unix() + 90 * DAY);
    let addr = start_tls_402(chain, key).await;
    let url = format!("https://localhost:{}/", addr.port());

    let ex = fetch(&local_cfg(), &FetchRequest::get(&url)).await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Tls, FetchErrorKind::TlsInvalid),
        "{message}"
    );
    assert!(message.contains("UnknownIssuer"), "{message}");
    assert!(
        ex.response.is_none(),
        "no request over an unverified connection"
    );
    let tls = ex.tls.as_ref().expect("the chain is still recorded");
    assert!(!tls.verified);
    assert!(
        tls.verify_error
            .as_deref()
            .is_some_and(|e| e.contains("UnknownIssuer"))
    );
    assert_eq!(tls.chain_der.len(), 2);

    let observing = FetchConfig {
        observe_invalid_tls: true,
        ..local_cfg()
    };
    let ex = fetch(&observing, &FetchRequest::get(&url)).await;
    assert!(ex.error.is_none(), "{:?}", ex.error);
    assert_eq!(ex.status(), Some(402), "the rest is still observed");
    let tls = ex.tls.as_ref().expect("TLS observed");
    assert!(!tls.verified);
    assert!(
        tls.verify_error
            .as_deref()
            .is_some_and(|e| e.contains("UnknownIssuer"))
    );
    assert_eq!(tls.version.as_deref(), Some("TLSv1.3"));
    assert_eq!(ex.hops[0].tls_verified, Some(false));
}

#[tokio::test]
async fn expired_and_soon_expiring_certificates_report_not_after() {
    let ca = TestCa::new();
    let now = now_unix();

    let expired_at = now - 2 * DAY;
    let (chain, key) = ca.leaf(now - 30 * DAY, expired_at);
    let expired = start_tls_402(chain, key).await;
    let cfg = FetchConfig {
        extra_roots: vec![ca.der.clone()],
        ..local_cfg()
    };
    let url = format!("https://localhost:{}/", expired.port());
    let ex = fetch(&cfg, &FetchRequest::get(&url)).await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Tls, FetchErrorKind::TlsInvalid),
        "{message}"
    );
    assert!(
        message.to_ascii_lowercase().contains("expired"),
        "{message}"
    );
    let tls = ex.tls.as_ref().expect("chain recorded");
    assert_eq!(tls.leaf_not_after, Some(expired_at));
    assert_eq!(tls.leaf_not_before, Some(now - 30 * DAY));

    let observing = FetchConfig {
        observe_invalid_tls: true,
        ..cfg.clone()
    };
    let ex = fetch(&observing, &FetchRequest::get(&url)).await;
    assert_eq!(ex.status(), Some(402), "{:?}", ex.error);
    let tls = ex.tls.as_ref().expect("TLS observed");
    assert!(!tls.verified);
    assert_eq!(tls.leaf_not_after, Some(expired_at));

    let soon = now + 5 * DAY;
    let (chain, key) = ca.leaf(now - DAY, soon);
    let expiring = start_tls_402(chain, key).await;
    let ex = fetch(
        &cfg,
        &FetchRequest::get(format!("https://localhost:{}/", expiring.port())),
    )
    .await;
    assert!(ex.error.is_none(), "{:?}", ex.error);
    let tls = ex.tls.as_ref().expect("TLS observed");
    assert!(tls.verified, "still valid for 5 days");
    assert_eq!(tls.leaf_not_after, Some(soon));
    let days_left = (soon - now_unix()) as f64 / DAY as f64;
    assert!((4.9..=5.0).contains(&days_left), "{days_left}");
}

#[tokio::test]
async fn tls_server_that_never_handshakes_times_out() {
    let server = RawServer::start(|stream: TcpStream, _head: String| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(stream);
    })
    .await;
    let mut cfg = local_cfg();
    cfg.timeouts.tls_ms = 500;
    let (ex, took) = timed_fetch(
        &cfg,
        &FetchRequest::get(format!("https://127.0.0.1:{}/", server.port())),
    )
    .await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Tls, FetchErrorKind::Timeout),
        "{message}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test]
async fn plain_http_on_a_tls_port_is_a_tls_protocol_error() {
    let server = RawServer::start(serve_402).await;
    let ex = fetch(
        &local_cfg(),
        &FetchRequest::get(format!("https://127.0.0.1:{}/", server.port())),
    )
    .await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(phase, Phase::Tls, "{message}");
    assert_ne!(kind, FetchErrorKind::TlsInvalid, "{message}");
    assert!(ex.tls.is_none(), "no certificate was ever presented");
}

// ---------------------------------------------------------------------------------------------
// Redirects

#[tokio::test]
async fn same_host_redirect_is_followed() {
    let server = RawServer::start(|mut stream: TcpStream, head: String| async move {
        let answer = match request_path(&head) {
            "/old" => redirect(301, "/middle"),
            "/middle" => redirect(307, "final?x=1"),
            _ => response_402(),
        };
        let _ = stream.write_all(&answer).await;
    })
    .await;
    let ex = fetch(&local_cfg(), &FetchRequest::get(server.url("/old"))).await;
    assert!(ex.error.is_none(), "{:?}", ex.error);
    assert_eq!(ex.status(), Some(402));
    assert_eq!(ex.hops.len(), 3);
    assert_eq!(ex.hops[0].status, Some(301));
    assert_eq!(ex.hops[0].location.as_deref(), Some("/middle"));
    assert_eq!(ex.final_url(), server.url("/final?x=1"));
    let requests = server.requests.lock().await;
    let paths: Vec<&str> = requests.iter().map(|h| request_path(h)).collect();
    assert_eq!(paths, ["/old", "/middle", "/final?x=1"]);
    let t = ex.timings;
    assert!(
        t.ttfb_ms
            .is_some_and(|v| v >= ex.hops[2].timings.ttfb_ms.unwrap_or(f64::MAX))
    );
}

#[tokio::test]
async fn off_host_redirect_is_recorded_not_followed() {
    let other = RawServer::start(serve_402).await;
    let target = format!("http://127.0.0.2:{}/elsewhere", other.port());
    let location = target.clone();
    let server = RawServer::start(move |mut stream: TcpStream, _head: String| {
        let answer = redirect(302, &location);
        async move {
            let _ = stream.write_all(&answer).await;
        }
    })
    .await;
    let ex = fetch(&local_cfg(), &FetchRequest::get(server.url("/pay"))).await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Redirect, FetchErrorKind::RedirectOffHost),
        "{message}"
    );
    assert!(message.contains(&target), "{message}");
    assert_eq!(
        ex.status(),
        Some(302),
        "the redirect itself is kept as evidence"
    );
    assert_eq!(ex.hops.len(), 1);
    assert_eq!(other.connections.load(Ordering::SeqCst), 0);

    // A different port on the same host is off host too.
    let port_hop = format!("http://127.0.0.1:{}/x", other.port());
    let server = RawServer::start(move |mut stream: TcpStream, _head: String| {
        let answer = redirect(308, &port_hop);
        async move {
            let _ = stream.write_all(&answer).await;
        }
    })
    .await;
    let ex = fetch(&local_cfg(), &FetchRequest::get(server.url("/"))).await;
    assert_eq!(error_of(&ex).1, FetchErrorKind::RedirectOffHost);
    assert_eq!(other.connections.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn redirect_loops_and_chains_are_bounded() {
    let server = RawServer::start(|mut stream: TcpStream, head: String| async move {
        let path = request_path(&head).to_string();
        let answer = match path.as_str() {
            "/a" => redirect(302, "/b"),
            "/b" => redirect(302, "/a"),
            "/self" => redirect(307, "/self"),
            p if p.starts_with("/n/") => {
                let n: u32 = p[3..].parse().unwrap_or(0);
                redirect(302, &format!("/n/{}", n + 1))
            }
            _ => response_402(),
        };
        let _ = stream.write_all(&answer).await;
    })
    .await;
    let ex = fetch(&local_cfg(), &FetchRequest::get(server.url("/a"))).await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Redirect, FetchErrorKind::RedirectLoop),
        "{message}"
    );
    assert_eq!(ex.hops.len(), 2);

    let ex = fetch(&local_cfg(), &FetchRequest::get(server.url("/self"))).await;
    assert_eq!(error_of(&ex).1, FetchErrorKind::RedirectLoop);
    assert_eq!(ex.hops.len(), 1);

    let cfg = FetchConfig {
        max_redirects: 3,
        ..local_cfg()
    };
    let ex = fetch(&cfg, &FetchRequest::get(server.url("/n/0"))).await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Redirect, FetchErrorKind::TooManyRedirects),
        "{message}"
    );
    assert_eq!(
        ex.hops.len(),
        4,
        "the first request and 3 followed redirects"
    );
}

// ---------------------------------------------------------------------------------------------
// Hostile servers: each ends as a recorded finding, in bounded time

#[tokio::test]
async fn huge_response_head_is_refused_at_the_cap() {
    let server = RawServer::start(|mut stream: TcpStream, _head: String| async move {
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\n").await;
        let line = format!("X-Pad: {}\r\n", "a".repeat(1000));
        for _ in 0..1024 {
            if stream.write_all(line.as_bytes()).await.is_err() {
                return;
            }
        }
        let _ = stream.write_all(b"Content-Length: 0\r\n\r\n").await;
    })
    .await;
    let (ex, took) = timed_fetch(&local_cfg(), &FetchRequest::get(server.url("/"))).await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Head, FetchErrorKind::TooLarge),
        "{message}"
    );
    assert!(ex.response.is_none());
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[tokio::test]
async fn too_many_headers_are_refused() {
    let server = RawServer::start(|mut stream: TcpStream, _head: String| async move {
        let mut head = String::from("HTTP/1.1 200 OK\r\n");
        for i in 0..150 {
            head.push_str(&format!("X-H{i}: v\r\n"));
        }
        head.push_str("Content-Length: 0\r\n\r\n");
        let _ = stream.write_all(head.as_bytes()).await;
    })
    .await;
    let ex = fetch(&local_cfg(), &FetchRequest::get(server.url("/"))).await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Head, FetchErrorKind::TooLarge),
        "{message}"
    );
}

#[tokio::test]
async fn huge_body_is_truncated_at_the_cap() {
    const SENT: usize = 8 * 1024 * 1024;
    let server = RawServer::start(|mut stream: TcpStream, _head: String| async move {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {SENT}\r\n\r\n");
        let _ = stream.write_all(head.as_bytes()).await;
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..SENT / chunk.len() {
            if stream.write_all(&chunk).await.is_err() {
                return;
            }
        }
    })
    .await;
    let cfg = FetchConfig {
        max_body_bytes: 100_000,
        ..local_cfg()
    };
    let (ex, took) = timed_fetch(&cfg, &FetchRequest::get(server.url("/"))).await;
    assert!(ex.error.is_none(), "{:?}", ex.error);
    let response = ex.response.as_ref().expect("response");
    assert_eq!(response.body.len(), 100_000);
    assert!(response.body_truncated);
    assert_eq!(response.body_sha256, sha256_hex(&vec![b'x'; 100_000]));
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[tokio::test]
async fn body_cap_is_never_exceeded() {
    const BODY: usize = 300_000;
    let server = RawServer::start(|mut stream: TcpStream, _head: String| async move {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\n\r\n");
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(&vec![7u8; BODY]).await;
    })
    .await;
    for cap in [
        0,
        1,
        1000,
        16_384,
        65_536,
        BODY - 1,
        BODY,
        BODY + 1,
        10 * BODY,
    ] {
        let cfg = FetchConfig {
            max_body_bytes: cap,
            ..local_cfg()
        };
        let ex = fetch(&cfg, &FetchRequest::get(server.url("/"))).await;
        let response = ex
            .response
            .as_ref()
            .unwrap_or_else(|| panic!("cap {cap}: {:?}", ex.error));
        assert!(
            response.body.len() <= cap,
            "cap {cap}: stored {}",
            response.body.len()
        );
        assert_eq!(response.body.len(), cap.min(BODY), "cap {cap}");
        assert_eq!(response.body_truncated, cap < BODY, "cap {cap}");
    }
}

#[tokio::test]
async fn slowloris_body_is_stopped_by_the_whole_body_deadline() {
    let server = RawServer::start(|mut stream: TcpStream, _head: String| async move {
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            .await;
        for _ in 0..1000 {
            if stream.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
    .await;
    let mut cfg = local_cfg();
    cfg.timeouts.body_ms = 1_500;
    let (ex, took) = timed_fetch(&cfg, &FetchRequest::get(server.url("/"))).await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Body, FetchErrorKind::Timeout),
        "{message}"
    );
    let response = ex
        .response
        .as_ref()
        .expect("the head and partial body are kept");
    assert!(
        (1..100).contains(&response.body.len()),
        "{}",
        response.body.len()
    );
    assert_eq!(ex.timings.last_byte_ms, None, "the last byte never came");
    assert!(
        took >= Duration::from_millis(1_400) && took < Duration::from_secs(4),
        "{took:?}"
    );
}

#[tokio::test]
async fn slowloris_head_is_stopped_by_the_first_byte_deadline() {
    let server = RawServer::start(|mut stream: TcpStream, _head: String| async move {
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: "
            .iter()
            .chain(b"y".repeat(1000).iter())
        {
            if stream.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let mut cfg = local_cfg();
    cfg.timeouts.first_byte_ms = 1_000;
    let (ex, took) = timed_fetch(&cfg, &FetchRequest::get(server.url("/"))).await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Head, FetchErrorKind::Timeout),
        "{message}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test]
async fn endless_chunked_stream_is_truncated() {
    let server = RawServer::start(|mut stream: TcpStream, _head: String| async move {
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            .await;
        let chunk = format!("1000\r\n{}\r\n", "z".repeat(0x1000));
        while stream.write_all(chunk.as_bytes()).await.is_ok() {}
    })
    .await;
    let (ex, took) = timed_fetch(&local_cfg(), &FetchRequest::get(server.url("/stream"))).await;
    assert!(ex.error.is_none(), "{:?}", ex.error);
    let response = ex.response.as_ref().expect("response");
    assert!(response.body_truncated);
    assert_eq!(response.body.len(), FetchConfig::default().max_body_bytes);
    assert!(took < Duration::from_secs(5), "{took:?}");

    // The same stream, trickled: the whole-body deadline ends it.
    let trickle = RawServer::start(|mut stream: TcpStream, _head: String| async move {
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            .await;
        while stream.write_all(b"1\r\nz\r\n").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let mut cfg = local_cfg();
    cfg.timeouts.body_ms = 1_000;
    let (ex, took) = timed_fetch(&cfg, &FetchRequest::get(trickle.url("/"))).await;
    assert_eq!(error_of(&ex).1, FetchErrorKind::Timeout);
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test]
async fn server_that_accepts_and_never_answers() {
    let server = RawServer::start(|stream: TcpStream, _head: String| async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(stream);
    })
    .await;
    let mut cfg = local_cfg();
    cfg.timeouts.first_byte_ms = 800;
    let (ex, took) = timed_fetch(&cfg, &FetchRequest::get(server.url("/"))).await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Head, FetchErrorKind::Timeout),
        "{message}"
    );
    assert!(ex.timings.connect_ms.is_some());
    assert_eq!(ex.timings.ttfb_ms, None);
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(3),
        "{took:?}"
    );

    // With generous phase limits, the overall deadline still ends it.
    let mut cfg = local_cfg();
    cfg.timeouts.first_byte_ms = 60_000;
    cfg.timeouts.overall_ms = 700;
    let (ex, took) = timed_fetch(&cfg, &FetchRequest::get(server.url("/"))).await;
    assert_eq!(error_of(&ex).1, FetchErrorKind::Timeout);
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test]
async fn gzip_bomb_is_kept_raw_and_refused_by_the_bounded_decoder() {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1024 * 1024];
    for _ in 0..32 {
        encoder.write_all(&zeros).expect("in-memory");
    }
    let bomb = Arc::new(encoder.finish().expect("in-memory"));
    let bomb_len = bomb.len();
    let server = RawServer::start(move |mut stream: TcpStream, _head: String| {
        let bomb = bomb.clone();
        async move {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
                bomb.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(&bomb).await;
        }
    })
    .await;
    let ex = fetch(&local_cfg(), &FetchRequest::get(server.url("/"))).await;
    assert!(ex.error.is_none(), "{:?}", ex.error);
    let response = ex.response.as_ref().expect("response");
    assert_eq!(response.body.len(), bomb_len, "raw bytes kept as sent");
    assert!(
        response.body.len() < 100 * 1024,
        "and they are small: {}",
        response.body.len()
    );
    assert!(!response.body_truncated);
    let refused = decode_body_bounded(response, 1024 * 1024);
    assert!(
        matches!(
            refused,
            Err(DecodeError::RatioExceeded { .. } | DecodeError::TooLarge { .. })
        ),
        "{refused:?}"
    );
}

#[tokio::test]
async fn server_closing_mid_body_is_a_reset_with_the_partial_body() {
    let server = RawServer::start(|mut stream: TcpStream, _head: String| async move {
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            .await;
        let _ = stream.write_all(&[b'p'; 100]).await;
        let _ = stream.shutdown().await;
    })
    .await;
    let (ex, took) = timed_fetch(&local_cfg(), &FetchRequest::get(server.url("/"))).await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Body, FetchErrorKind::Reset),
        "{message}"
    );
    assert_eq!(ex.response.as_ref().map(|r| r.body.len()), Some(100));
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test]
async fn garbage_instead_of_http_is_a_protocol_error() {
    let server = RawServer::start(|mut stream: TcpStream, _head: String| async move {
        let _ = stream
            .write_all(b"\x00\x01\x02 this is not HTTP at all\r\n\r\n")
            .await;
    })
    .await;
    let ex = fetch(&local_cfg(), &FetchRequest::get(server.url("/"))).await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Head, FetchErrorKind::Protocol),
        "{message}"
    );
}

#[tokio::test]
async fn closed_port_is_refused_and_bad_urls_are_errors() {
    // A port bound but not listening refuses connections, and stays ours while the request is
    // made: a listener dropped first could hand its port to another test's server meanwhile.
    let closed = tokio::net::TcpSocket::new_v4().expect("a socket");
    closed.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
    let port = closed.local_addr().expect("addr").port();
    let ex = fetch(
        &local_cfg(),
        &FetchRequest::get(format!("http://127.0.0.1:{port}/")),
    )
    .await;
    drop(closed);
    let (phase, kind, message) = error_of(&ex);
    assert_eq!(
        (phase, kind),
        (Phase::Connect, FetchErrorKind::Refused),
        "{message}"
    );

    for bad in [
        "ftp://example.com/",
        "not a url",
        "http://user:pw@127.0.0.1/",
    ] {
        let ex = fetch(&local_cfg(), &FetchRequest::get(bad)).await;
        let (phase, kind, message) = error_of(&ex);
        assert_eq!(
            (phase, kind),
            (Phase::Request, FetchErrorKind::BadUrl),
            "{bad}: {message}"
        );
        assert!(ex.hops.is_empty());
    }
    let ex = fetch(
        &local_cfg(),
        &FetchRequest::get("http://127.0.0.1:9/").with_header("Bad Header", "x"),
    )
    .await;
    assert_eq!(error_of(&ex).0, Phase::Request);
}

// ---------------------------------------------------------------------------------------------
// SSRF

#[tokio::test]
async fn guard_refuses_private_destinations_before_connecting() {
    let server = RawServer::start(serve_402).await;
    let port = server.port();
    let public_only = FetchConfig::default();
    let cases = [
        format!("http://127.0.0.1:{port}/"),
        format!("http://[::1]:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://[::ffff:7f00:1]:{port}/"),
        format!("http://10.0.0.1:{port}/"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        format!("http://[fd00::1]:{port}/"),
        format!("http://0.0.0.0:{port}/"),
        format!("http://localhost:{port}/"),
        format!("https://localhost:{port}/"),
    ];
    for url in &cases {
        let (ex, took) = timed_fetch(&public_only, &FetchRequest::get(url)).await;
        let (phase, kind, message) = error_of(&ex);
        assert_eq!(
            (phase, kind),
            (Phase::Guard, FetchErrorKind::Blocked),
            "{url}: {message}"
        );
        assert_eq!(ex.timings.connect_ms, None, "{url}: no connect attempted");
        assert_eq!(ex.remote_addr, None, "{url}");
        assert!(took < Duration::from_secs(2), "{url}: {took:?}");
    }
    let ex = fetch(
        &public_only,
        &FetchRequest::get(format!("http://localhost:{port}/")),
    )
    .await;
    assert!(
        error_of(&ex).2.contains("localhost resolves to"),
        "{:?}",
        ex.error
    );
    let ex = fetch(
        &public_only,
        &FetchRequest::get(format!("http://[::ffff:127.0.0.1]:{port}/")),
    )
    .await;
    assert!(error_of(&ex).2.contains("IPv4-mapped"), "{:?}", ex.error);
    assert_eq!(
        server.connections.load(Ordering::SeqCst),
        0,
        "nothing reached the server"
    );

    // The same local server, reached once private addresses are allowed.
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
    ] {
        let ex = fetch(&local_cfg(), &FetchRequest::get(&url)).await;
        assert_eq!(ex.status(), Some(402), "{url}: {:?}", ex.error);
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn numeric_host_forms_are_judged_by_the_address_they_resolve_to() {
    let server = RawServer::start(serve_402).await;
    let port = server.port();
    // 2130706433 and 0x7f.1 are 127.0.0.1 to the system resolver.
    for url in [
        format!("http://2130706433:{port}/"),
        format!("http://0x7f.1:{port}/"),
    ] {
        let ex = fetch(&FetchConfig::default(), &FetchRequest::get(&url)).await;
        let (phase, _, message) = error_of(&ex);
        assert!(
            matches!(phase, Phase::Guard | Phase::Dns),
            "{url}: {phase:?} {message}"
        );
        assert_eq!(ex.timings.connect_ms, None, "{url}");
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn overall_deadline_is_named_when_it_cuts_a_phase() {
    let server = RawServer::start(|stream: TcpStream, _head: String| async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(stream);
    })
    .await;
    let mut cfg = local_cfg();
    cfg.timeouts.overall_ms = 600;
    let (ex, took) = timed_fetch(&cfg, &FetchRequest::get(server.url("/"))).await;
    let (phase, kind, message) = error_of(&ex);
    assert_eq!((phase, kind), (Phase::Head, FetchErrorKind::Timeout));
    assert!(message.contains("overall deadline (600 ms)"), "{message}");
    assert!(
        ex.timings.total_ms.is_some_and(|t| t >= 500.0),
        "{:?}",
        ex.timings
    );
    assert!(ex.hops[0].timings.total_ms.is_some());
    assert!(took < Duration::from_secs(3), "{took:?}");
}
