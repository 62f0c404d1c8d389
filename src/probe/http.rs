//! HTTP/TLS prober: one request, observed phase by phase, surviving whatever the endpoint does.
//!
//! [`fetch`] never panics and never returns an error: every failure is recorded in the
//! [`Exchange`] with the phase it happened in. Per hop it resolves the name itself, runs every
//! address through the [`netguard`](super::netguard) (unless `allow_private`), connects to the
//! checked address itself (so DNS rebinding cannot bypass the guard), does TLS with a verifier
//! that records webpki's verdict, sends one HTTP/1.1 request over hyper's connection API with a
//! bounded head, then reads the body as a stream under a byte cap and a whole-body deadline.
//! Redirects are followed only on the same scheme, host and port. Every phase has its own
//! timeout, and all of it runs under one overall deadline.
//!
//! Choices worth knowing when reading an [`Exchange`]:
//! - A body cut at `max_body_bytes` is not an error: it is `body_truncated`. A body cut by the
//!   deadline, a reset or bad framing keeps the bytes received *and* sets `error`.
//! - With `observe_invalid_tls`, an unverified certificate shows only in `tls.verified` and
//!   `tls.verify_error`; without it, the handshake stops (`TlsInvalid`) and nothing is sent.
//! - If any address a name resolves to is refused by the guard, the whole hop is refused.
//! - An off-host redirect, a loop or too many redirects keep the redirect response as evidence.
//! - Redirects: 303 (and 301/302 after a POST) continue as GET without a body, as browsers do.
//!
//! A thin driver: nothing here knows about x402.

mod tls;

use std::error::Error as StdError;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls_pki_types::{CertificateDer, ServerName};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use super::netguard;

pub use crate::evidence::decode::{DecodeError, MAX_RATIO, RATIO_FLOOR_BYTES, decode_body_bounded};
// The exchange types are evidence (plain data the checks read and the ledger stores).
pub use crate::evidence::http::{
    Exchange, FetchError, FetchErrorKind, FetchRequest, Hop, HttpResponse, Phase, Timings, TlsSeen,
};
// How a URL is read (pure, shared with the configuration and the spend store).
pub use crate::http_url::{Scheme, Target, canonical_subject_url, parse_given_url, parse_host};

/// hyper refuses a read buffer smaller than this.
const HYPER_MIN_BUF: usize = 8192;
/// The read buffer never needs to be larger than the head cap plus some room for body chunks.
const READ_BUF_ROOM: usize = 16 * 1024;

/// Per-phase time limits, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timeouts {
    pub dns_ms: u64,
    /// Per connection attempt (each resolved address gets its own attempt).
    pub connect_ms: u64,
    pub tls_ms: u64,
    /// From the start of writing the request to the complete response head.
    pub first_byte_ms: u64,
    /// The whole body, from the head to the last byte: total time, not idle time, so a server
    /// that trickles one byte a second is still stopped.
    pub body_ms: u64,
    /// Everything, including redirects.
    pub overall_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            dns_ms: 5_000,
            connect_ms: 5_000,
            tls_ms: 5_000,
            first_byte_ms: 10_000,
            body_ms: 15_000,
            overall_ms: 30_000,
        }
    }
}

/// How to fetch. `Default` is the production setting: public addresses only, webpki roots only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FetchConfig {
    /// Allow loopback, private and other non-public addresses (the local lab and tests only).
    pub allow_private: bool,
    /// Extra trust anchors (DER) added to the webpki roots, e.g. a lab CA. Serialised as base64.
    #[serde(with = "b64::cert_list")]
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// Finish the handshake even when the certificate does not verify, so the rest of the
    /// exchange is still observed. The verdict is then only in `Exchange::tls`
    /// (`verified: false`, `verify_error`); `Exchange::error` stays about the rest.
    pub observe_invalid_tls: bool,
    pub timeouts: Timeouts,
    /// Cap on the response head (status line and headers), in bytes.
    pub max_header_bytes: usize,
    /// Cap on the number of response headers.
    pub max_headers: usize,
    /// Cap on the stored body; more is not read (`body_truncated`).
    pub max_body_bytes: usize,
    /// Same-host redirects followed at most.
    pub max_redirects: usize,
    pub user_agent: String,
    /// The DNS servers names are resolved through (UDP, then TCP on truncation); empty: the
    /// system's configuration (`/etc/resolv.conf`). `/etc/hosts` and `localhost` are honoured
    /// either way.
    pub nameservers: Vec<SocketAddr>,
    /// The address connections leave from (`[probe] source_address`: several vantages on one
    /// machine, each its own); `None`: the system's choice.
    pub source_address: Option<IpAddr>,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            allow_private: false,
            extra_roots: Vec::new(),
            observe_invalid_tls: false,
            timeouts: Timeouts::default(),
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            max_body_bytes: 1024 * 1024,
            max_redirects: 5,
            user_agent: concat!("x402-probe/", env!("CARGO_PKG_VERSION")).to_string(),
            nameservers: Vec::new(),
            source_address: None,
        }
    }
}

/// Fetches `req.url` as configured. Never panics, never fails: see [`Exchange::error`].
pub async fn fetch(cfg: &FetchConfig, req: &FetchRequest) -> Exchange {
    let started = Instant::now();
    let deadline = started + Duration::from_millis(cfg.timeouts.overall_ms);
    let mut exchange = Exchange {
        url: req.url.clone(),
        ..Exchange::default()
    };
    let mut target = match Target::parse(&req.url) {
        Ok(target) => target,
        Err(message) => {
            exchange.error = Some(FetchError::new(
                Phase::Request,
                FetchErrorKind::BadUrl,
                message,
            ));
            exchange.timings.total_ms = Some(ms_since(started));
            return exchange;
        }
    };
    let mut method = req.method.clone();
    let mut body = req.body.clone();
    let mut visited = vec![target.url()];
    loop {
        let hop_started = Instant::now();
        let mut run = HopRun::new(&target, hop_started);
        let opened = run.open(cfg, &method, &req.headers, &body, deadline).await;
        let open = match opened {
            Ok(open) => open,
            Err(error) => {
                exchange.error = Some(error);
                exchange.record(run, started);
                break;
            }
        };
        let decision = redirect_decision(&target, &open, &visited, cfg.max_redirects);
        if let RedirectDecision::Follow(next) = decision {
            let status = open.status;
            drop(open);
            exchange.record(run, started);
            visited.push(next.url());
            target = next;
            if status == 303 || ((status == 301 || status == 302) && method == "POST") {
                if method != "HEAD" {
                    method = "GET".to_string();
                }
                body.clear();
            }
            continue;
        }
        let (response, body_error) = run.read_body(open, cfg, deadline).await;
        exchange.response = Some(response);
        exchange.error = match decision {
            RedirectDecision::Refuse(error) => Some(error),
            _ => body_error,
        };
        exchange.record(run, started);
        break;
    }
    exchange.timings.total_ms = Some(ms_since(started));
    exchange
}

/// One `GET url` hop over an already open `stream`, read as [`fetch`] reads a hop: hyper's
/// HTTP/1.1 client under the head caps, then the body (chunked, sized or until close) under the
/// byte cap and the deadlines. No redirect is followed. The response is `None` when no head was
/// read. Public for the fuzz targets only: it feeds them a server's bytes without a socket.
#[doc(hidden)]
pub async fn read_hop<S>(
    cfg: &FetchConfig,
    url: &str,
    stream: S,
) -> (Option<HttpResponse>, Option<FetchError>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let started = Instant::now();
    let deadline = started + Duration::from_millis(cfg.timeouts.overall_ms);
    let target = match Target::parse(url) {
        Ok(target) => target,
        Err(message) => {
            let error = FetchError::new(Phase::Request, FetchErrorKind::BadUrl, message);
            return (None, Some(error));
        }
    };
    let mut run = HopRun::new(&target, started);
    let opened = match build_request(cfg, &target, "GET", &[], &[]) {
        Ok(request) => run.request(cfg, stream, request, deadline).await,
        Err(error) => Err(error),
    };
    match opened {
        Ok(open) => {
            let (response, error) = run.read_body(open, cfg, deadline).await;
            (Some(response), error)
        }
        Err(error) => (None, Some(error)),
    }
}

impl Exchange {
    /// Adds a finished hop and makes it the exchange's current view (tls, address, timings).
    fn record(&mut self, mut run: HopRun, fetch_started: Instant) {
        if run.hop.timings.total_ms.is_none() {
            run.hop.timings.total_ms = Some(ms_since(run.started));
        }
        let offset = ms_between(fetch_started, run.started);
        let t = run.hop.timings;
        self.timings = Timings {
            dns_ms: t.dns_ms,
            connect_ms: t.connect_ms,
            tls_ms: t.tls_ms,
            ttfb_ms: t.ttfb_ms.map(|v| v + offset),
            last_byte_ms: t.last_byte_ms.map(|v| v + offset),
            total_ms: None,
        };
        self.remote_addr = run.hop.remote_addr.clone();
        self.tls = run.tls;
        self.hops.push(run.hop);
    }
}

enum RedirectDecision {
    /// Not a redirect (or one without `Location`): this is the final response.
    Final,
    Follow(Target),
    /// A redirect we will not follow; the response is still read and kept.
    Refuse(FetchError),
}

fn redirect_decision(
    current: &Target,
    open: &OpenHop,
    visited: &[String],
    max_redirects: usize,
) -> RedirectDecision {
    if !matches!(open.status, 301 | 302 | 303 | 307 | 308) {
        return RedirectDecision::Final;
    }
    let Some(location) = header_value(&open.headers, "location") else {
        return RedirectDecision::Final;
    };
    let refuse = |kind, message: String| {
        RedirectDecision::Refuse(FetchError::new(Phase::Redirect, kind, message))
    };
    let next = match current.resolve(location) {
        Ok(next) => next,
        Err(why) => {
            return refuse(
                FetchErrorKind::BadUrl,
                format!("redirect to {location:?} cannot be followed: {why}"),
            );
        }
    };
    if !current.same_origin(&next) {
        return refuse(
            FetchErrorKind::RedirectOffHost,
            format!(
                "{} redirects off host to {} (only same scheme, host and port are followed)",
                current.origin(),
                next.url()
            ),
        );
    }
    if visited.contains(&next.url()) {
        return refuse(
            FetchErrorKind::RedirectLoop,
            format!("redirect loop: {} was already visited", next.url()),
        );
    }
    // `visited` holds the first URL plus every followed redirect.
    if visited.len() > max_redirects {
        return refuse(
            FetchErrorKind::TooManyRedirects,
            format!(
                "more than {max_redirects} redirects; not following to {}",
                next.url()
            ),
        );
    }
    RedirectDecision::Follow(next)
}

/// The state of one hop while it runs: what has been observed so far, kept even on failure.
struct HopRun {
    target: Target,
    started: Instant,
    hop: Hop,
    tls: Option<TlsSeen>,
}

/// A hop whose response head has arrived; the body is still on the wire.
struct OpenHop {
    status: u16,
    headers: Vec<(String, String)>,
    head_bytes: usize,
    body: Incoming,
    /// Drives the connection; aborting it closes the socket.
    _connection: AbortOnDrop,
}

impl HopRun {
    fn new(target: &Target, started: Instant) -> HopRun {
        HopRun {
            target: target.clone(),
            started,
            hop: Hop {
                url: target.url(),
                ..Hop::default()
            },
            tls: None,
        }
    }

    async fn open(
        &mut self,
        cfg: &FetchConfig,
        method: &str,
        headers: &[(String, String)],
        body: &[u8],
        deadline: Instant,
    ) -> Result<OpenHop, FetchError> {
        // Caller mistakes (bad method or header) are found before any traffic.
        let request = build_request(cfg, &self.target, method, headers, body)?;
        let addrs = self.resolve(cfg, deadline).await?;
        if !cfg.allow_private {
            guard(&self.target.host, &addrs)?;
        }
        let tcp = self.connect(cfg, &addrs, deadline).await?;
        match self.target.scheme {
            Scheme::Http => self.request(cfg, tcp, request, deadline).await,
            Scheme::Https => {
                let tls = self.handshake(cfg, tcp, deadline).await?;
                self.request(cfg, tls, request, deadline).await
            }
        }
    }

    async fn resolve(
        &mut self,
        cfg: &FetchConfig,
        deadline: Instant,
    ) -> Result<Vec<SocketAddr>, FetchError> {
        let port = self.target.port;
        if let Some(ip) = self.target.ip {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let phase_started = Instant::now();
        let limit = PhaseLimit::starting_now(cfg.timeouts.dns_ms, cfg, deadline);
        let host = &self.target.host;
        let lookup = lookup_ip(cfg, host, limit.remaining());
        let result = timeout_at(limit.at, lookup).await;
        self.hop.timings.dns_ms = Some(ms_since(phase_started));
        let addrs = match result {
            Err(_) => {
                return Err(FetchError::new(
                    Phase::Dns,
                    FetchErrorKind::Timeout,
                    format!("{host} not resolved {}", limit.describe()),
                ));
            }
            Ok(Err((kind, message))) => return Err(FetchError::new(Phase::Dns, kind, message)),
            Ok(Ok(found)) => found.into_iter().map(|ip| SocketAddr::new(ip, port)),
        };
        let mut unique: Vec<SocketAddr> = Vec::new();
        for addr in addrs {
            if !unique.contains(&addr) {
                unique.push(addr);
            }
        }
        if unique.is_empty() {
            return Err(FetchError::new(
                Phase::Dns,
                FetchErrorKind::NoAddress,
                format!("{host} resolves to no address"),
            ));
        }
        Ok(unique)
    }

    async fn connect(
        &mut self,
        cfg: &FetchConfig,
        addrs: &[SocketAddr],
        deadline: Instant,
    ) -> Result<TcpStream, FetchError> {
        let phase_started = Instant::now();
        let mut failures = Vec::new();
        let mut last_kind = FetchErrorKind::Other;
        for addr in addrs {
            self.hop.remote_addr = Some(addr.to_string());
            if Instant::now() >= deadline {
                last_kind = FetchErrorKind::Timeout;
                failures.push(format!(
                    "{addr}: overall deadline of {} ms reached",
                    cfg.timeouts.overall_ms
                ));
                break;
            }
            let limit = PhaseLimit::starting_now(cfg.timeouts.connect_ms, cfg, deadline);
            let attempt = timeout_at(limit.at, connect_from(cfg.source_address, *addr)).await;
            match attempt {
                Ok(Ok(stream)) => {
                    self.hop.timings.connect_ms = Some(ms_since(phase_started));
                    // Small request, latency measured: no Nagle delay.
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                Ok(Err(e)) => {
                    last_kind = io_kind(&e);
                    failures.push(format!("{addr}: {e}"));
                }
                Err(_) => {
                    last_kind = FetchErrorKind::Timeout;
                    failures.push(format!("{addr}: no connection {}", limit.describe()));
                }
            }
        }
        self.hop.timings.connect_ms = Some(ms_since(phase_started));
        Err(FetchError::new(
            Phase::Connect,
            last_kind,
            format!(
                "cannot connect to {}: {}",
                self.target.host,
                failures.join("; ")
            ),
        ))
    }

    async fn handshake(
        &mut self,
        cfg: &FetchConfig,
        tcp: TcpStream,
        deadline: Instant,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, FetchError> {
        let (config, verifier) = tls::client_config(&cfg.extra_roots, cfg.observe_invalid_tls)
            .map_err(|message| FetchError::new(Phase::Tls, FetchErrorKind::Other, message))?;
        let (server_name, sni) = match self.target.ip {
            Some(ip) => (ServerName::IpAddress(ip.into()), None),
            None => {
                let name = ServerName::try_from(self.target.host.clone()).map_err(|e| {
                    FetchError::new(
                        Phase::Tls,
                        FetchErrorKind::BadUrl,
                        format!("{:?} is not a valid TLS server name: {e}", self.target.host),
                    )
                })?;
                (name, Some(self.target.host.clone()))
            }
        };
        let connector = tokio_rustls::TlsConnector::from(config);
        let phase_started = Instant::now();
        let limit = PhaseLimit::starting_now(cfg.timeouts.tls_ms, cfg, deadline);
        let result = timeout_at(limit.at, connector.connect(server_name, tcp)).await;
        self.hop.timings.tls_ms = Some(ms_since(phase_started));
        let seen = verifier.seen();
        if let Some(seen) = &seen {
            let leaf = seen
                .chain_der
                .first()
                .map(|der| tls::leaf_facts(der))
                .unwrap_or_default();
            self.tls = Some(TlsSeen {
                sni: sni.clone(),
                chain_der: seen.chain_der.clone(),
                leaf_not_before: leaf.not_before,
                leaf_not_after: leaf.not_after,
                leaf_subject: leaf.subject,
                leaf_issuer: leaf.issuer,
                verified: seen.error.is_none(),
                verify_error: seen.error.clone(),
                ..TlsSeen::default()
            });
            self.hop.tls_verified = Some(seen.error.is_none());
        }
        let stream = match result {
            Err(_) => {
                return Err(FetchError::new(
                    Phase::Tls,
                    FetchErrorKind::Timeout,
                    format!("TLS handshake not done {}", limit.describe()),
                ));
            }
            Ok(Err(e)) => {
                let refused_by_verifier =
                    !cfg.observe_invalid_tls && seen.as_ref().is_some_and(|s| s.error.is_some());
                let kind = if refused_by_verifier {
                    FetchErrorKind::TlsInvalid
                } else {
                    match io_kind(&e) {
                        FetchErrorKind::Other => FetchErrorKind::Protocol,
                        other => other,
                    }
                };
                return Err(FetchError::new(
                    Phase::Tls,
                    kind,
                    format!("TLS handshake with {} failed: {e}", self.target.host),
                ));
            }
            Ok(Ok(stream)) => stream,
        };
        let (_, connection) = stream.get_ref();
        let version = connection.protocol_version().map(tls::version_name);
        let cipher = connection.negotiated_cipher_suite().map(tls::cipher_name);
        let alpn = connection
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned());
        let tls_seen = self.tls.get_or_insert_with(|| TlsSeen {
            sni,
            verified: false,
            verify_error: Some("the certificate verifier was never consulted".to_string()),
            ..TlsSeen::default()
        });
        tls_seen.version = version;
        tls_seen.cipher = cipher;
        tls_seen.alpn = alpn;
        Ok(stream)
    }

    async fn request<S>(
        &mut self,
        cfg: &FetchConfig,
        stream: S,
        request: http::Request<Full<Bytes>>,
        deadline: Instant,
    ) -> Result<OpenHop, FetchError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut builder = hyper::client::conn::http1::Builder::new();
        builder
            .max_buf_size(
                cfg.max_header_bytes
                    .saturating_add(READ_BUF_ROOM)
                    .max(HYPER_MIN_BUF),
            )
            .max_header_size(cfg.max_header_bytes)
            .max_headers(cfg.max_headers);
        let limit = PhaseLimit::starting_now(cfg.timeouts.first_byte_ms, cfg, deadline);
        let (mut sender, connection) =
            match timeout_at(limit.at, builder.handshake(TokioIo::new(stream))).await {
                Ok(Ok(parts)) => parts,
                Ok(Err(e)) => {
                    return Err(FetchError::new(
                        Phase::Request,
                        FetchErrorKind::Other,
                        format!(
                            "cannot start HTTP/1.1 on the connection: {}",
                            error_chain(&e)
                        ),
                    ));
                }
                Err(_) => {
                    return Err(FetchError::new(
                        Phase::Request,
                        FetchErrorKind::Timeout,
                        format!("HTTP/1.1 setup not done {}", limit.describe()),
                    ));
                }
            };
        let connection = AbortOnDrop(tokio::spawn(async move {
            // Its errors reach us through `send_request` and the body.
            let _ = connection.await;
        }));
        let response = match timeout_at(limit.at, sender.send_request(request)).await {
            Err(_) => {
                return Err(FetchError::new(
                    Phase::Head,
                    FetchErrorKind::Timeout,
                    format!("no complete response head {}", limit.describe()),
                ));
            }
            Ok(Err(e)) => return Err(head_error(cfg, &e)),
            Ok(Ok(response)) => response,
        };
        self.hop.timings.ttfb_ms = Some(ms_since(self.started));
        let (parts, body) = response.into_parts();
        let status = parts.status.as_u16();
        let headers: Vec<(String, String)> = parts
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_string(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        self.hop.status = Some(status);
        self.hop.location = header_value(&headers, "location").map(str::to_string);
        let head_bytes = head_size(parts.status, &headers);
        Ok(OpenHop {
            status,
            headers,
            head_bytes,
            body,
            _connection: connection,
        })
    }

    /// Reads the body under the byte cap and the whole-body deadline. A body cut short (by the
    /// deadline, a reset or a protocol error) is still returned, with the error beside it.
    async fn read_body(
        &mut self,
        open: OpenHop,
        cfg: &FetchConfig,
        deadline: Instant,
    ) -> (HttpResponse, Option<FetchError>) {
        let limit = PhaseLimit::starting_now(cfg.timeouts.body_ms, cfg, deadline);
        let cap = cfg.max_body_bytes;
        let OpenHop {
            status,
            headers,
            head_bytes,
            mut body,
            _connection,
        } = open;
        let mut bytes: Vec<u8> = Vec::new();
        let mut truncated = false;
        let mut error = None;
        loop {
            match timeout_at(limit.at, body.frame()).await {
                Err(_) => {
                    error = Some(FetchError::new(
                        Phase::Body,
                        FetchErrorKind::Timeout,
                        format!(
                            "body not complete {} ({} bytes received)",
                            limit.describe(),
                            bytes.len()
                        ),
                    ));
                    break;
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    error = Some(body_error(&e, bytes.len()));
                    break;
                }
                Ok(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue; // trailers carry no body bytes
                    };
                    let room = cap.saturating_sub(bytes.len());
                    if data.len() > room {
                        bytes.extend_from_slice(&data[..room]);
                        truncated = true;
                        break;
                    }
                    bytes.extend_from_slice(&data);
                }
            }
        }
        drop(body);
        drop(_connection);
        let elapsed = ms_since(self.started);
        if error.is_none() {
            self.hop.timings.last_byte_ms = Some(elapsed);
        }
        self.hop.timings.total_ms = Some(elapsed);
        (
            HttpResponse::new(status, headers, bytes, truncated, head_bytes),
            error,
        )
    }
}

/// Resolves `host` (a validated DNS name, never an IP literal) to its A and AAAA addresses through
/// our own stub resolver: the configured nameservers, else the system's. Separates what the
/// subject's DNS says (the name does not exist, or has no address) from our resolver failing.
///
/// A resolver is built per lookup, without a cache: each sample resolves afresh (as each sample
/// connects afresh), and no resolver state outlives the runtime that drives it.
async fn lookup_ip(
    cfg: &FetchConfig,
    host: &str,
    within: Duration,
) -> Result<Vec<IpAddr>, (FetchErrorKind, String)> {
    use hickory_resolver::config::{
        ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig,
    };
    use hickory_resolver::net::runtime::TokioRuntimeProvider;
    use hickory_resolver::{Resolver, TokioResolver};

    let ours = |message: String| (FetchErrorKind::ResolverFailed, message);
    let mut builder = if cfg.nameservers.is_empty() {
        TokioResolver::builder_tokio().map_err(|e| {
            ours(format!(
                "our resolver failed: cannot read the system's resolver configuration: {e}"
            ))
        })?
    } else {
        let servers = cfg
            .nameservers
            .iter()
            .map(|addr| {
                let mut udp = ConnectionConfig::udp();
                udp.port = addr.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = addr.port();
                NameServerConfig::new(addr.ip(), true, vec![udp, tcp])
            })
            .collect();
        Resolver::builder_with_config(
            ResolverConfig::from_name_servers(servers),
            TokioRuntimeProvider::default(),
        )
    };
    let options = builder.options_mut();
    options.use_hosts_file = ResolveHosts::Always;
    options.cache_size = 0;
    options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    // One attempt per server within the phase's limit; the caller's deadline bounds the rest.
    options.timeout = within.max(Duration::from_millis(1));
    options.attempts = 1;
    let resolver = builder
        .build()
        .map_err(|e| ours(format!("our resolver failed: cannot start it: {e}")))?;
    // The URL's host is absolute: no search domains are appended.
    let fqdn = if host.ends_with('.') {
        host.to_string()
    } else {
        format!("{host}.")
    };
    match resolver.lookup_ip(fqdn.as_str()).await {
        Ok(found) => Ok(found.iter().collect()),
        Err(e) if e.is_nx_domain() => Err((
            FetchErrorKind::NameNotFound,
            format!("{host} does not exist (NXDOMAIN)"),
        )),
        Err(e) if e.is_no_records_found() => Err((
            FetchErrorKind::NoAddress,
            format!("{host} has no A or AAAA record"),
        )),
        Err(e) => Err(ours(format!("our resolver failed for {host}: {e}"))),
    }
}

/// Checks extra trust anchors the way every TLS handshake will use them, so a CA file that holds
/// a certificate webpki cannot use is refused when the configuration is read, not at each fetch.
pub fn validate_extra_roots(roots: &[CertificateDer<'static>]) -> Result<(), String> {
    tls::client_config(roots, false).map(|_| ())
}

/// Refuses the hop if any resolved address is not public: a name that mixes public and private
/// addresses is itself suspicious, and the connection could land on either.
fn guard(host: &str, addrs: &[SocketAddr]) -> Result<(), FetchError> {
    for addr in addrs {
        let ip = addr.ip();
        if let Some(reason) = netguard::is_forbidden(ip) {
            let what = match ip {
                IpAddr::V6(v6) => match netguard::embedded_ipv4(v6) {
                    Some((how, v4)) => format!("{ip} ({} of {v4})", how.as_str()),
                    None => ip.to_string(),
                },
                IpAddr::V4(_) => ip.to_string(),
            };
            let subject = if host == ip.to_string() {
                what
            } else {
                format!("{host} resolves to {what}")
            };
            return Err(FetchError::new(
                Phase::Guard,
                FetchErrorKind::Blocked,
                format!("{subject}: {reason}; refused (allow_private is off)"),
            ));
        }
    }
    Ok(())
}

fn build_request(
    cfg: &FetchConfig,
    target: &Target,
    method: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<http::Request<Full<Bytes>>, FetchError> {
    let bad = |message: String| FetchError::new(Phase::Request, FetchErrorKind::Other, message);
    let method = http::Method::from_bytes(method.as_bytes())
        .map_err(|_| bad(format!("invalid HTTP method {method:?}")))?;
    let mut builder = http::Request::builder()
        .method(method)
        .uri(target.path_and_query.as_str())
        .header(http::header::HOST, target.host_header());
    let mut has_user_agent = false;
    for (name, value) in headers {
        let name = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| bad(format!("invalid request header name {name:?}")))?;
        if name == http::header::HOST
            || name == http::header::CONTENT_LENGTH
            || name == http::header::ACCEPT_ENCODING
        {
            continue;
        }
        has_user_agent |= name == http::header::USER_AGENT;
        let value = http::HeaderValue::from_str(value)
            .map_err(|_| bad(format!("invalid value for request header {name}")))?;
        builder = builder.header(name, value);
    }
    if !has_user_agent && !cfg.user_agent.is_empty() {
        let value = http::HeaderValue::from_str(&cfg.user_agent)
            .map_err(|_| bad("invalid user_agent in the fetch configuration".to_string()))?;
        builder = builder.header(http::header::USER_AGENT, value);
    }
    builder
        .body(Full::new(Bytes::copy_from_slice(body)))
        .map_err(|e| bad(format!("cannot build the request: {e}")))
}

fn head_error(cfg: &FetchConfig, e: &hyper::Error) -> FetchError {
    let chain = error_chain(e);
    if e.is_parse_too_large() {
        return FetchError::new(
            Phase::Head,
            FetchErrorKind::TooLarge,
            format!(
                "response head over the cap of {} bytes or {} headers: {chain}",
                cfg.max_header_bytes, cfg.max_headers
            ),
        );
    }
    if e.is_parse() || e.is_parse_status() {
        return FetchError::new(
            Phase::Head,
            FetchErrorKind::Protocol,
            format!("malformed response head: {chain}"),
        );
    }
    if e.is_user() {
        return FetchError::new(
            Phase::Request,
            FetchErrorKind::Other,
            format!("request refused by the HTTP client: {chain}"),
        );
    }
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
        return FetchError::new(
            Phase::Head,
            FetchErrorKind::Reset,
            format!("connection closed before a complete response head: {chain}"),
        );
    }
    let kind = io_source_kind(e).unwrap_or(FetchErrorKind::Other);
    FetchError::new(Phase::Head, kind, format!("no response head: {chain}"))
}

fn body_error(e: &hyper::Error, received: usize) -> FetchError {
    let chain = error_chain(e);
    let (kind, what) = if e.is_incomplete_message() {
        (FetchErrorKind::Reset, "connection closed mid-body")
    } else if e.is_parse() {
        (FetchErrorKind::Protocol, "malformed body framing")
    } else {
        match io_source_kind(e) {
            Some(kind) => (kind, "body read failed"),
            None => (FetchErrorKind::Protocol, "body read failed"),
        }
    };
    FetchError::new(
        Phase::Body,
        kind,
        format!("{what} after {received} bytes: {chain}"),
    )
}

/// The kind of the first `io::Error` in the source chain, if any.
fn io_source_kind(e: &(dyn StdError + 'static)) -> Option<FetchErrorKind> {
    let mut current: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = current {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io_kind(io));
        }
        current = err.source();
    }
    None
}

fn io_kind(e: &std::io::Error) -> FetchErrorKind {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => FetchErrorKind::Refused,
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
            FetchErrorKind::Reset
        }
        K::TimedOut => FetchErrorKind::Timeout,
        _ => FetchErrorKind::Other,
    }
}

/// `outer: inner: innermost`, so the message says what actually went wrong.
fn error_chain(e: &(dyn StdError + 'static)) -> String {
    let mut message = e.to_string();
    let mut current = e.source();
    while let Some(err) = current {
        let text = err.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        current = err.source();
    }
    message
}

fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// `HTTP/1.1 402 Payment Required\r\n`, each `name: value\r\n`, and the final `\r\n`.
fn head_size(status: http::StatusCode, headers: &[(String, String)]) -> usize {
    let reason = status.canonical_reason().unwrap_or("");
    let status_line = "HTTP/1.1 ".len() + 3 + 1 + reason.len() + 2;
    let lines: usize = headers.iter().map(|(n, v)| n.len() + 2 + v.len() + 2).sum();
    status_line + lines + 2
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

fn ms_between(earlier: Instant, later: Instant) -> f64 {
    later.saturating_duration_since(earlier).as_secs_f64() * 1000.0
}

/// When a phase must end: after its own limit, or at the overall deadline if that comes first.
#[derive(Debug, Clone, Copy)]
struct PhaseLimit {
    at: Instant,
    limit_ms: u64,
    overall_ms: u64,
    cut_by_overall: bool,
}

impl PhaseLimit {
    fn starting_now(limit_ms: u64, cfg: &FetchConfig, overall: Instant) -> PhaseLimit {
        let own = Instant::now() + Duration::from_millis(limit_ms);
        PhaseLimit {
            at: own.min(overall),
            limit_ms,
            overall_ms: cfg.timeouts.overall_ms,
            cut_by_overall: overall < own,
        }
    }

    /// Time left until this limit.
    fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// Which limit applies, for messages: `within 5000 ms` or `before the overall deadline...`.
    fn describe(&self) -> String {
        if self.cut_by_overall {
            format!("before the overall deadline ({} ms)", self.overall_ms)
        } else {
            format!("within {} ms", self.limit_ms)
        }
    }
}

/// Aborts the task (here: the connection driver, closing the socket) when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serde helpers: certificate lists as standard base64.
mod b64 {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;

    pub mod cert_list {
        use super::*;
        use rustls_pki_types::CertificateDer;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(
            v: &[CertificateDer<'static>],
            s: S,
        ) -> Result<S::Ok, S::Error> {
            s.collect_seq(v.iter().map(|c| STANDARD.encode(c.as_ref())))
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Vec<CertificateDer<'static>>, D::Error> {
            let texts = Vec::<String>::deserialize(d)?;
            texts
                .into_iter()
                .map(|t| {
                    STANDARD
                        .decode(t)
                        .map(CertificateDer::from)
                        .map_err(serde::de::Error::custom)
                })
                .collect()
        }
    }
}

/// A TCP connection to `addr`, leaving from `source` when one is configured.
async fn connect_from(source: Option<IpAddr>, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let Some(source) = source else {
        return TcpStream::connect(addr).await;
    };
    if source.is_ipv4() != addr.is_ipv4() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not reachable from the source address {source}"),
        ));
    }
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_can_be_spawned_on_a_multi_threaded_runtime() {
        fn assert_send<T: Send>(_: &T) {}
        let cfg = FetchConfig::default();
        let req = FetchRequest::get("http://example.invalid/");
        let future = fetch(&cfg, &req);
        assert_send(&future);
    }

    #[test]
    fn config_round_trips_through_serde_with_defaults() {
        let cfg: FetchConfig =
            serde_json::from_str(r#"{"allow_private": true, "timeouts": {"dns_ms": 1}}"#)
                .expect("partial config parses");
        assert!(cfg.allow_private);
        assert_eq!(cfg.timeouts.dns_ms, 1);
        assert_eq!(cfg.timeouts.body_ms, Timeouts::default().body_ms);
        assert_eq!(cfg.max_body_bytes, 1024 * 1024);
        let with_root = FetchConfig {
            extra_roots: vec![CertificateDer::from(vec![1u8, 2, 3])],
            ..cfg
        };
        let json = serde_json::to_string(&with_root).expect("serialises");
        assert!(json.contains(r#""extra_roots":["AQID"]"#), "{json}");
        let back: FetchConfig = serde_json::from_str(&json).expect("parses back");
        assert_eq!(back, with_root);
    }

    /// A server on an in-memory stream: reads the request head, answers `served`, closes.
    fn serve(served: &'static [u8]) -> tokio::io::DuplexStream {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                match server.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            assert!(request.starts_with(b"GET /x HTTP/1.1\r\n"));
            let _ = server.write_all(served).await;
            let _ = server.shutdown().await;
        });
        client
    }

    /// `read_hop` reads what a server wrote as `fetch` would: a chunked body de-chunked, and
    /// cut at the byte cap; bad framing keeps the bytes before it, with the error beside them.
    #[tokio::test]
    async fn a_hop_read_from_a_stream_dechunks_and_caps_the_body() {
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n\
            5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        for (cap, body, truncated) in [(1024, &b"hello world"[..], false), (7, b"hello w", true)] {
            let cfg = FetchConfig {
                max_body_bytes: cap,
                ..FetchConfig::default()
            };
            let (response, error) = read_hop(&cfg, "http://lab.test/x", serve(chunked)).await;
            let response = response.expect("a head was read");
            assert!(error.is_none(), "{error:?}");
            assert_eq!(response.status, 200);
            assert_eq!(response.body, body);
            assert_eq!(response.body_truncated, truncated);
            assert!(
                response
                    .headers
                    .contains(&("x-a".to_string(), "b".to_string()))
            );
        }
        let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\nzz\r\n";
        let (response, error) =
            read_hop(&FetchConfig::default(), "http://lab.test/x", serve(bad)).await;
        assert_eq!(response.expect("a head").body, b"ok");
        assert_eq!(error.expect("bad framing").phase, Phase::Body);
    }

    #[test]
    fn head_size_counts_status_line_headers_and_blank_line() {
        let headers = vec![("a".to_string(), "b".to_string())];
        // "HTTP/1.1 200 OK\r\n" + "a: b\r\n" + "\r\n"
        assert_eq!(head_size(http::StatusCode::OK, &headers), 17 + 6 + 2);
    }

    #[test]
    fn guard_message_names_the_host_the_address_and_the_reason() {
        let addrs = ["[::ffff:10.1.2.3]:443".parse().expect("literal")];
        let err = guard("internal.example", &addrs).expect_err("private");
        assert_eq!(
            (err.phase, err.kind),
            (Phase::Guard, FetchErrorKind::Blocked)
        );
        assert!(
            err.message
                .contains("internal.example resolves to ::ffff:10.1.2.3")
        );
        assert!(err.message.contains("IPv4-mapped IPv6 of 10.1.2.3"));
        assert!(err.message.contains("private address"));
        let mixed = [
            "93.184.215.14:443".parse().expect("literal"),
            "127.0.0.1:443".parse().expect("literal"),
        ];
        assert!(
            guard("mixed.example", &mixed).is_err(),
            "one bad address refuses the hop"
        );
        let public = ["93.184.215.14:443".parse().expect("literal")];
        assert!(guard("public.example", &public).is_ok());
    }
}
