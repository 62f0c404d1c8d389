//! The resource servers: one listener per scenario, HTTP or HTTPS, speaking x402 v1 or v2 honestly or
//! with the scenario's deliberate faults. Hostile scenarios bypass HTTP framing and write raw bytes.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use alloy::primitives::{Address, U256};
use anyhow::{Context, Result};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::dynamic::Dynamic;
use crate::facilitator::FacilitatorClient;
use crate::quote::{self, QuoteContext};
use crate::scenarios::{Hostile, Paid, Protocol, QuoteFault, Reliability, Scenario, Transport};
use crate::token::Token;

/// The path of the paid resource on every endpoint.
pub const RESOURCE_PATH: &str = "/weather";
/// Where `redirect-same-host` sends its clients.
const MOVED_PATH: &str = "/v2/weather";
const OPERATOR_PATH: &str = "/.well-known/x402-operator.json";

/// What every endpoint shares: the facilitators and the chain (for refunds).
pub struct Shared {
    pub facilitators: FacilitatorClient,
    pub token: Token,
}

struct Endpoint {
    scenario: Scenario,
    quote: QuoteContext,
    shared: Arc<Shared>,
    /// Requests answered so far (flaky's deterministic pattern).
    requests: AtomicU64,
    /// 402s served so far (the price that rises after the first).
    quotes: AtomicU64,
    /// How this endpoint changes over time, when it does (`dynamic.rs`).
    dynamic: Option<Arc<Dynamic>>,
    /// `settlement_pending` kinds: the final receipt of each payment settled, by its header value.
    settled: std::sync::Mutex<std::collections::HashMap<String, Value>>,
    /// `payment-identifier` kinds: each settled payment's header value and receipt, by its id.
    by_payment_id: std::sync::Mutex<std::collections::HashMap<String, (String, Value)>>,
}

/// A running endpoint: its subject URL and the task that serves it (aborted on drop).
pub struct RunningEndpoint {
    pub url: String,
    pub addr: SocketAddr,
    _tasks: JoinSet<()>,
    /// A down endpoint's port, bound but never listening: connections to it are refused, and no
    /// other endpoint of the lab can be given the same port while the lab runs.
    _closed_port: Option<TcpSocket>,
}

impl Endpoint {
    /// The scenario as it behaves now: the timeline's text, paid behaviour and facilitator at the
    /// lab clock's time replace the scenario's own, when it sets them.
    fn scenario_now(&self) -> std::borrow::Cow<'_, Scenario> {
        let Some(d) = self.dynamic.as_ref() else {
            return std::borrow::Cow::Borrowed(&self.scenario);
        };
        let timeline = d.timeline();
        let now = d.now();
        let (text, paid, facilitator) = (
            timeline.text_at(now),
            timeline.paid_at(now),
            timeline.facilitator_at(now),
        );
        if text.is_none() && paid.is_none() && facilitator.is_none() {
            return std::borrow::Cow::Borrowed(&self.scenario);
        }
        let mut scenario = self.scenario.clone();
        scenario.text = text.unwrap_or(scenario.text);
        scenario.paid = paid.unwrap_or(scenario.paid);
        scenario.facilitator = facilitator.unwrap_or(scenario.facilitator);
        std::borrow::Cow::Owned(scenario)
    }

    /// The delay the timeline asks before answering request `n` (unpaid or paid).
    fn delay(&self, n: u64, paid: bool) -> Option<Duration> {
        let timeline = self.dynamic.as_ref()?.timeline();
        let delay = if paid {
            timeline.paid_delay
        } else {
            timeline.free_delay
        };
        delay.map(|d| d.for_request(n))
    }
}

/// Start the listener of one scenario. `tls` is the server configuration for HTTPS scenarios.
pub async fn start(
    scenario: Scenario,
    tls: Option<Arc<rustls::ServerConfig>>,
    quote: QuoteContext,
    shared: Arc<Shared>,
) -> Result<RunningEndpoint> {
    start_with(scenario, tls, quote, shared, None).await
}

/// Start the listener of one scenario whose behaviour follows `dynamic` over time.
pub async fn start_with(
    scenario: Scenario,
    tls: Option<Arc<rustls::ServerConfig>>,
    quote: QuoteContext,
    shared: Arc<Shared>,
    dynamic: Option<Arc<Dynamic>>,
) -> Result<RunningEndpoint> {
    start_placed(
        scenario,
        tls,
        quote,
        shared,
        dynamic,
        &Placement::loopback(),
    )
    .await
}

/// Where an endpoint listens and how it treats a connection by the address it comes from:
/// vantages in network namespaces (`vantage_net.rs`) reach the lab from addresses of their own,
/// and an endpoint can answer some of them differently from the rest.
#[derive(Debug, Clone)]
pub struct Placement {
    pub bind: IpAddr,
    pub by_source: BySource,
}

/// What an endpoint does differently for some source addresses.
#[derive(Debug, Clone, Default)]
pub enum BySource {
    /// Every source is answered alike.
    #[default]
    Alike,
    /// Connections from these sources are reset before a byte is answered: a regional outage
    /// (the endpoint is up for everyone else).
    Unreachable(Vec<IpAddr>),
    /// These sources are quoted `pay_to` instead of the scenario's payee (and paid there):
    /// cloaking, an answer for some observers that differs from everyone else's at the same time.
    Cloak { from: Vec<IpAddr>, pay_to: Address },
}

impl Placement {
    /// The lab's default: the loopback address, every source alike.
    pub fn loopback() -> Placement {
        Placement {
            bind: IpAddr::from([127, 0, 0, 1]),
            by_source: BySource::Alike,
        }
    }
}

/// Start the listener of one scenario at `placement` (its address and its rule by source).
pub async fn start_placed(
    scenario: Scenario,
    tls: Option<Arc<rustls::ServerConfig>>,
    mut quote: QuoteContext,
    shared: Arc<Shared>,
    dynamic: Option<Arc<Dynamic>>,
    placement: &Placement,
) -> Result<RunningEndpoint> {
    let scheme = match scenario.transport {
        Transport::Https(_) => "https",
        Transport::Http => "http",
    };
    let mut tasks = JoinSet::new();
    if scenario.reliability == Reliability::Down {
        // Nothing listens, so connections are refused. The port stays bound (a socket that never
        // listens) for the lab's life: a port closed again at once could be handed to the next
        // endpoint bound, and the down endpoint would answer as that one.
        let socket = match placement.bind {
            std::net::IpAddr::V4(_) => TcpSocket::new_v4(),
            std::net::IpAddr::V6(_) => TcpSocket::new_v6(),
        }
        .context("creating a socket for a down scenario")?;
        socket
            .bind(SocketAddr::new(placement.bind, 0))
            .with_context(|| format!("binding a down scenario's port at {}", placement.bind))?;
        let addr = socket.local_addr()?;
        return Ok(RunningEndpoint {
            url: format!("{scheme}://{addr}{RESOURCE_PATH}"),
            addr,
            _tasks: tasks,
            _closed_port: Some(socket),
        });
    }
    let listener = TcpListener::bind(SocketAddr::new(placement.bind, 0))
        .await
        .with_context(|| format!("binding a scenario listener at {}", placement.bind))?;
    let addr = listener.local_addr()?;
    let url = format!("{scheme}://{addr}{RESOURCE_PATH}");
    quote.resource = url.clone();
    let endpoint_for = |quote: QuoteContext| {
        Arc::new(Endpoint {
            scenario: scenario.clone(),
            quote,
            shared: shared.clone(),
            requests: AtomicU64::new(0),
            quotes: AtomicU64::new(0),
            dynamic: dynamic.clone(),
            settled: Default::default(),
            by_payment_id: Default::default(),
        })
    };
    // A cloaked source is served by a twin of the endpoint whose quote names the other payee, so
    // its 402s, its paid answers and its counters are consistent with what that source was told.
    let routes = match &placement.by_source {
        BySource::Alike => Routes::Alike,
        BySource::Unreachable(from) => Routes::Unreachable(from.clone()),
        BySource::Cloak { from, pay_to } => Routes::Cloak {
            from: from.clone(),
            twin: endpoint_for(QuoteContext {
                pay_to: *pay_to,
                ..quote.clone()
            }),
        },
    };
    let endpoint = endpoint_for(quote);
    let acceptor = match endpoint.scenario.transport {
        Transport::Https(_) => Some(TlsAcceptor::from(
            tls.context("an HTTPS scenario needs a TLS config")?,
        )),
        Transport::Http => None,
    };
    tasks.spawn(accept_loop(listener, acceptor, endpoint, routes));
    Ok(RunningEndpoint {
        url,
        addr,
        _tasks: tasks,
        _closed_port: None,
    })
}

/// Which endpoint serves a connection, by its source address ([`BySource`], resolved).
enum Routes {
    Alike,
    Unreachable(Vec<IpAddr>),
    Cloak {
        from: Vec<IpAddr>,
        twin: Arc<Endpoint>,
    },
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    main: Arc<Endpoint>,
    routes: Routes,
) {
    // Connections live in this set, so aborting the loop closes them all.
    let mut connections = JoinSet::new();
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(_) => continue,
        };
        while connections.try_join_next().is_some() {}
        let endpoint = match &routes {
            Routes::Unreachable(from) if from.contains(&peer.ip()) => {
                // A reset, as a path that is down answers: linger 0 makes the close an RST.
                let _ = tcp.set_zero_linger();
                drop(tcp);
                continue;
            }
            Routes::Cloak { from, twin } if from.contains(&peer.ip()) => twin,
            _ => &main,
        };
        if let Some(d) = endpoint.dynamic.as_ref()
            && d.timeline().down_at(d.now())
        {
            // Down: the connection is dropped before a byte is answered.
            drop(tcp);
            continue;
        }
        let acceptor = acceptor.clone();
        let endpoint = endpoint.clone();
        connections.spawn(async move {
            match acceptor {
                Some(acceptor) => {
                    // A client that refuses our certificate ends the handshake; nothing to do then.
                    let handshake =
                        tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp));
                    if let Ok(Ok(tls)) = handshake.await {
                        serve(tls, endpoint).await;
                    }
                }
                None => serve(tcp, endpoint).await,
            }
        });
    }
}

async fn serve<S>(stream: S, endpoint: Arc<Endpoint>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if let Some(hostile) = endpoint.scenario.hostile.filter(|h| h.is_raw()) {
        let _ = hostile_response(stream, hostile, &endpoint).await;
        return;
    }
    let service = service_fn(move |req| {
        let endpoint = endpoint.clone();
        async move { Ok::<_, Infallible>(handle(endpoint, req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

type Resp = Response<Full<Bytes>>;

fn respond(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Resp {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

fn json_response(status: StatusCode, body: &Value) -> Resp {
    respond(status, "application/json", body.to_string())
}

fn with_header(mut resp: Resp, name: &'static str, value: &str) -> Resp {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
    resp
}

async fn handle(endpoint: Arc<Endpoint>, req: Request<Incoming>) -> Resp {
    let scenario_now = endpoint.scenario_now();
    let scenario = &*scenario_now;
    let path = req.uri().path().to_string();
    if path == OPERATOR_PATH {
        return match quote::operator_file(scenario, &endpoint.quote) {
            Some(file) => {
                let file = match (endpoint.dynamic.as_ref(), serde_json::from_str(&file)) {
                    (Some(d), Ok(mut value)) => {
                        d.timeline().apply_operator_file(&mut value, d.now());
                        value.to_string()
                    }
                    _ => file,
                };
                respond(StatusCode::OK, "application/json", file)
            }
            None => respond(StatusCode::NOT_FOUND, "text/plain", "no operator file\n"),
        };
    }
    if let Some(resp) = peer_route(&endpoint, scenario, &path, &req) {
        return resp;
    }
    if path == "/docs" {
        return respond(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            quote::docs(scenario.text),
        );
    }
    // A browser's request is not one of the probe's samples: it does not move the count the
    // flaky and dynamic scenarios fail by.
    let n = if is_browser(&req) {
        endpoint.requests.load(Ordering::SeqCst)
    } else {
        endpoint.requests.fetch_add(1, Ordering::SeqCst)
    };
    if endpoint
        .dynamic
        .as_ref()
        .is_some_and(|d| d.timeline().fails(n, d.now()))
    {
        return respond(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "try again later\n",
        );
    }
    match scenario.reliability {
        Reliability::SlowTtfb(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Reliability::Flaky(share)
            if ((n + 1) as f64 * share).floor() > (n as f64 * share).floor() =>
        {
            return respond(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                "try again later\n",
            );
        }
        Reliability::Status500 => {
            return respond(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                "internal error\n",
            );
        }
        Reliability::RedirectOffHost if path == RESOURCE_PATH => {
            let port = endpoint.quote.resource.rsplit(':').next().unwrap_or("443");
            let port = port.split('/').next().unwrap_or("443");
            let target = format!("https://127.0.0.2:{port}{RESOURCE_PATH}");
            return with_header(
                respond(StatusCode::FOUND, "text/plain", ""),
                "location",
                &target,
            );
        }
        Reliability::RedirectLoop => {
            return with_header(
                respond(StatusCode::FOUND, "text/plain", ""),
                "location",
                RESOURCE_PATH,
            );
        }
        Reliability::RedirectSameHost if path == RESOURCE_PATH => {
            return with_header(
                respond(StatusCode::TEMPORARY_REDIRECT, "text/plain", ""),
                "location",
                MOVED_PATH,
            );
        }
        _ => {}
    }
    let serves_resource = path == RESOURCE_PATH
        || (scenario.reliability == Reliability::RedirectSameHost && path == MOVED_PATH);
    if !serves_resource {
        return respond(StatusCode::NOT_FOUND, "text/plain", "not found\n");
    }
    if scenario.reliability == Reliability::Free200 {
        return json_response(StatusCode::OK, &resource_output(scenario));
    }
    let payment = req
        .headers()
        .get("payment-signature")
        .or_else(|| req.headers().get("x-payment"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // Drain a small request body; nothing here reads it.
    let _ = Limited::new(req.into_body(), 64 * 1024).collect().await;
    if let Some(delay) = endpoint.delay(n, payment.is_some()) {
        tokio::time::sleep(delay).await;
    }
    match payment {
        None => payment_required(&endpoint, None),
        Some(p) => paid(&endpoint, &p).await,
    }
}

fn resource_output(scenario: &Scenario) -> Value {
    if scenario.name == "control" {
        quote::control_output()
    } else {
        quote::output()
    }
}

/// A request without payment that asks for HTML first, as a browser's does.
fn is_browser(req: &Request<Incoming>) -> bool {
    let asks_html = req
        .headers()
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| {
            a.split(',')
                .next()
                .unwrap_or("")
                .trim()
                .starts_with("text/html")
        });
    asks_html
        && req.headers().get("payment-signature").is_none()
        && req.headers().get("x-payment").is_none()
}

/// Where the findings' fetches go (`PeerTraits`): the usual places of an OpenAPI document, and
/// the browser's paywall page. `None`: the request is the endpoint's as usual.
fn peer_route(
    endpoint: &Endpoint,
    scenario: &Scenario,
    path: &str,
    req: &Request<Incoming>,
) -> Option<Resp> {
    if path == "/openapi.json" || path == "/.well-known/openapi.json" {
        return Some(if scenario.peer.openapi && path == "/openapi.json" {
            json_response(StatusCode::OK, &openapi_document())
        } else {
            respond(StatusCode::NOT_FOUND, "text/plain", "not found\n")
        });
    }
    if scenario.peer.html_paywall && path == RESOURCE_PATH && is_browser(req) {
        let pr = quote_at(endpoint, endpoint.quotes.load(Ordering::SeqCst));
        let page = format!(
            "<!doctype html><html><head><title>Payment required</title></head><body>\
             <h1>Lab Weather</h1><p>This resource costs {} USDC per call, paid with x402.</p>\
             <button id=\"pay\">Connect a wallet and pay</button></body></html>",
            quote::PRICE as f64 / 1e6
        );
        let resp = respond(
            StatusCode::PAYMENT_REQUIRED,
            "text/html; charset=utf-8",
            page,
        );
        return Some(with_header(
            resp,
            "payment-required",
            &quote::encode_header(scenario, &pr),
        ));
    }
    None
}

/// The OpenAPI 3.1 document the `openapi-described` scenario serves.
fn openapi_document() -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Lab Weather", "version": "1.0.0"},
        "paths": {
            RESOURCE_PATH: {
                "get": {
                    "parameters": [{"name": "city", "in": "query", "required": true, "schema": {"type": "string"}}],
                    "responses": {
                        "200": {"description": "the weather", "content": {"application/json": {"schema": quote::output_schema()}}},
                        "402": {"description": "payment required (x402)"}
                    }
                }
            }
        }
    })
}

/// The current PaymentRequired of this endpoint (advancing the quote counter).
fn current_quote(endpoint: &Endpoint) -> Value {
    let nth = endpoint.quotes.fetch_add(1, Ordering::SeqCst);
    quote_at(endpoint, nth)
}

/// The PaymentRequired for the `nth` quote, with the endpoint's timeline applied.
fn quote_at(endpoint: &Endpoint, nth: u64) -> Value {
    let scenario = endpoint.scenario_now();
    let mut pr = quote::payment_required(&scenario, &endpoint.quote, nth);
    if let Some(d) = endpoint.dynamic.as_ref() {
        d.timeline().apply_quote(&mut pr, d.now());
    }
    if scenario.peer.undescribed_402
        && let Some(obj) = pr.as_object_mut()
    {
        obj.remove("extensions");
    }
    if scenario.peer.resource_elsewhere && pr.pointer("/resource/url").is_some() {
        pr["resource"]["url"] = json!(ELSEWHERE);
    }
    pr
}

/// The resource URL the `resource-elsewhere` scenario's 402 names.
pub const ELSEWHERE: &str = "https://weather.elsewhere.example/weather";

/// A 402 carrying the current requirements, optionally with an error string.
fn payment_required(endpoint: &Endpoint, error: Option<&str>) -> Resp {
    let scenario = &endpoint.scenario;
    let mut pr = current_quote(endpoint);
    if let Some(e) = error {
        pr["error"] = Value::String(e.into());
    }
    match scenario.protocol {
        Protocol::V1 => json_response(StatusCode::PAYMENT_REQUIRED, &pr),
        Protocol::V2 => {
            let body = match (scenario.quote, scenario.reliability) {
                (_, Reliability::ContentTypeLies) => Bytes::from_static(
                    b"<!doctype html><html><body><script>fetch('/steal?c='+document.cookie)</script></body></html>",
                ),
                (QuoteFault::HeaderAndBodyAgree, _) => Bytes::from(pr.to_string()),
                (QuoteFault::HeaderBodyDisagree, _) => {
                    let mut other = pr.clone();
                    if let Some(first) = other["accepts"].get_mut(0) {
                        first["amount"] = Value::String((quote::PRICE * 2).to_string());
                    }
                    Bytes::from(other.to_string())
                }
                _ => Bytes::from_static(b"{}"),
            };
            let resp = respond(StatusCode::PAYMENT_REQUIRED, "application/json", body);
            let resp = with_header(
                resp,
                "payment-required",
                &quote::encode_header(scenario, &pr),
            );
            match scenario.hostile {
                Some(Hostile::DuplicateHeadersAgree) => append_header(
                    resp,
                    "payment-required",
                    &quote::encode_header(scenario, &pr),
                ),
                Some(Hostile::DuplicateHeadersDisagree) => {
                    let other = other_payee_quote(&pr, &endpoint.quote);
                    append_header(
                        resp,
                        "payment-required",
                        &STANDARD.encode(other.to_string()),
                    )
                }
                _ => resp,
            }
        }
    }
}

/// A second header line with the same name (`with_header` replaces).
fn append_header(mut resp: Resp, name: &'static str, value: &str) -> Resp {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().append(name, v);
    }
    resp
}

/// The same PaymentRequired with every entry paying another wallet twice the price: what a second,
/// disagreeing `PAYMENT-REQUIRED` header says.
fn other_payee_quote(pr: &Value, ctx: &QuoteContext) -> Value {
    let mut other = pr.clone();
    if let Some(entries) = other["accepts"].as_array_mut() {
        for entry in entries {
            entry["payTo"] = Value::String(ctx.other_wallet.to_checksum(None));
            entry["amount"] = Value::String((quote::PRICE * 2).to_string());
        }
    }
    other
}

fn decode_payment(value: &str) -> Option<Value> {
    let bytes = STANDARD.decode(value.trim()).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The requirement the payload pays, or None. v2 matches `accepted` by deep equality (as the reference
/// server does); v1 by scheme and network.
fn matching_requirement(endpoint: &Endpoint, payload: &Value) -> Option<Value> {
    // Match against the price this endpoint quotes now.
    let pr = quote_at(endpoint, endpoint.quotes.load(Ordering::SeqCst));
    let accepts = pr.get("accepts")?.as_array()?.clone();
    match endpoint.scenario.protocol {
        Protocol::V2 => {
            let accepted = payload.get("accepted")?;
            accepts.into_iter().find(|a| a == accepted)
        }
        Protocol::V1 => accepts.into_iter().find(|a| {
            a.get("scheme") == payload.get("scheme") && a.get("network") == payload.get("network")
        }),
    }
}

fn receipt_header(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::V2 => "payment-response",
        Protocol::V1 => "x-payment-response",
    }
}

async fn paid(endpoint: &Arc<Endpoint>, header_value: &str) -> Resp {
    let scenario_now = endpoint.scenario_now();
    let scenario = &*scenario_now;
    // A payment already settled, sent again (the `settlement_pending` kinds): answered by the
    // kind, never verified or settled a second time.
    let known = endpoint
        .settled
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(header_value)
        .cloned();
    if let Some(receipt) = known {
        let header = receipt_header(scenario.protocol);
        return match scenario.paid {
            Paid::PendingForever => with_header(
                payment_required(endpoint, Some("settlement pending")),
                header,
                &STANDARD.encode(pending_receipt(&receipt).to_string()),
            ),
            Paid::PendingThen402 => payment_required(endpoint, Some("payment required")),
            _ => with_header(
                json_response(StatusCode::OK, &resource_output(scenario)),
                header,
                &STANDARD.encode(receipt.to_string()),
            ),
        };
    }
    let Some(payload) = decode_payment(header_value) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": "malformed payment header"}),
        );
    };
    let payment_id = payment_id_of(&payload);
    if scenario.paid.advertises_payment_identifier()
        && let Some(resp) = idempotent_retry(endpoint, scenario, header_value, &payload).await
    {
        return resp;
    }
    let Some(requirement) = matching_requirement(endpoint, &payload) else {
        return payment_required(endpoint, Some("No matching payment requirements"));
    };
    let version = payload
        .get("x402Version")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let facilitator = &endpoint.shared.facilitators;
    let kind = scenario.facilitator;
    match facilitator
        .verify(kind, version, &payload, &requirement)
        .await
    {
        Ok(v) if v.get("isValid").and_then(Value::as_bool) == Some(true) => {}
        Ok(v) => {
            let reason = v
                .get("invalidReason")
                .and_then(Value::as_str)
                .unwrap_or("invalid_payment");
            return payment_required(endpoint, Some(reason));
        }
        Err(e) => {
            return json_response(
                StatusCode::BAD_GATEWAY,
                &json!({"error": format!("facilitator: {e:#}")}),
            );
        }
    }
    let output = match scenario.reference {
        Some(r) => r.output(&endpoint.shared.token).await,
        None => resource_output(scenario),
    };
    if scenario.paid == Paid::NoSettlement {
        return json_response(StatusCode::OK, &output);
    }
    if scenario.paid == Paid::BatchCommitment {
        // Kept for the batch: nothing is settled during the call.
        let receipt = json!({
            "success": true,
            "transaction": format!("batch_{}", hex::encode(rand::random::<[u8; 16]>())),
            "network": requirement.get("network").cloned().unwrap_or(Value::Null),
            "payer": payload.pointer("/payload/authorization/from").cloned().unwrap_or(Value::Null),
        });
        return with_header(
            json_response(StatusCode::OK, &output),
            receipt_header(scenario.protocol),
            &STANDARD.encode(receipt.to_string()),
        );
    }
    let settled = match facilitator
        .settle(kind, version, &payload, &requirement)
        .await
    {
        Ok(s) => s,
        Err(e) => {
            return json_response(
                StatusCode::BAD_GATEWAY,
                &json!({"error": format!("facilitator: {e:#}")}),
            );
        }
    };
    if settled.get("success").and_then(Value::as_bool) != Some(true) {
        let resp = payment_required(endpoint, Some("settlement failed"));
        let header = STANDARD.encode(settled.to_string());
        return with_header(resp, receipt_header(scenario.protocol), &header);
    }
    let mut receipt =
        crate::offers::with_receipt(scenario.offers, &settled, &endpoint.quote.resource);
    if matches!(
        scenario.paid,
        Paid::BatchCommitment | Paid::BatchCommitmentSettled
    ) {
        // The commitment the value will move under, in place of a transaction.
        receipt["transaction"] =
            json!(format!("batch_{}", hex::encode(rand::random::<[u8; 16]>())));
    }
    if matches!(
        scenario.paid,
        Paid::SettlementPending | Paid::PendingForever | Paid::PendingThen402
    ) {
        endpoint
            .settled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(header_value.to_string(), receipt.clone());
        return with_header(
            payment_required(endpoint, Some("settlement pending")),
            receipt_header(scenario.protocol),
            &STANDARD.encode(pending_receipt(&receipt).to_string()),
        );
    }
    if let Some(status) = scenario.peer.refuse_after_pay {
        // Pay-then-refuse: charged, then shut out as if the payment were no credential.
        return json_response(
            StatusCode::from_u16(status).unwrap_or(StatusCode::UNAUTHORIZED),
            &json!({"error": "unauthorized"}),
        );
    }
    match scenario.paid {
        Paid::SettleThen500 | Paid::RefundBroken => {
            return respond(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                "upstream failed\n",
            );
        }
        Paid::RefundKept => {
            refund_later(endpoint.clone(), &payload, &requirement);
            return respond(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                "upstream failed\n",
            );
        }
        Paid::FakePaymentResponse => {
            receipt["transaction"] =
                Value::String(format!("0x{}", hex::encode(rand::random::<[u8; 32]>())));
        }
        _ => {}
    }
    if let Some(id) = payment_id.filter(|_| scenario.paid.advertises_payment_identifier()) {
        endpoint
            .by_payment_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (header_value.to_string(), receipt.clone()));
    }
    let header = STANDARD.encode(receipt.to_string());
    let resp = match scenario.paid {
        Paid::EmptyOutput => respond(StatusCode::OK, "application/json", Bytes::new()),
        Paid::InvalidOutput => {
            json_response(StatusCode::OK, &json!({"temperature": "hot", "ok": 1}))
        }
        _ => json_response(StatusCode::OK, &output),
    };
    with_header(resp, receipt_header(scenario.protocol), &header)
}

/// The `payment-identifier` id a payment payload carries (`extensions["payment-identifier"].info.id`).
fn payment_id_of(payload: &Value) -> Option<String> {
    payload
        .pointer("/extensions/payment-identifier/info/id")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The `payment-identifier` kinds' answer before any verification: a payment without an id is
/// refused (the extension is required); a payment whose id was settled before is a retry,
/// answered by the kind (the honest one from its cache, the dishonest one by charging again);
/// the same id with another payment is a conflict. `None`: a new payment, paid as usual.
async fn idempotent_retry(
    endpoint: &Endpoint,
    scenario: &Scenario,
    header_value: &str,
    payload: &Value,
) -> Option<Resp> {
    let Some(id) = payment_id_of(payload) else {
        return Some(json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": "payment-identifier required: extensions[\"payment-identifier\"].info.id"}),
        ));
    };
    let known = endpoint
        .by_payment_id
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .cloned();
    let (first_header, receipt) = known?;
    if first_header != header_value {
        return Some(json_response(
            StatusCode::CONFLICT,
            &json!({"error": "payment-identifier already used with another payment"}),
        ));
    }
    let header = receipt_header(scenario.protocol);
    let receipt = match scenario.paid {
        Paid::IdempotencyDoubleCharge => {
            let requirement = payload.get("accepted").cloned().unwrap_or(Value::Null);
            match endpoint
                .shared
                .facilitators
                .pull_again(payload, &requirement)
                .await
            {
                Ok(again) => again,
                Err(e) => {
                    return Some(json_response(
                        StatusCode::BAD_GATEWAY,
                        &json!({"error": format!("facilitator: {e:#}")}),
                    ));
                }
            }
        }
        _ => receipt,
    };
    Some(with_header(
        json_response(StatusCode::OK, &resource_output(scenario)),
        header,
        &STANDARD.encode(receipt.to_string()),
    ))
}

/// The non-terminal settle outcome x402 defines for a broadcast transaction not yet confirmed:
/// `success: false`, `errorReason: "settlement_pending"`, the transaction's hash kept.
fn pending_receipt(receipt: &Value) -> Value {
    let mut pending = receipt.clone();
    pending["success"] = json!(false);
    pending["errorReason"] = json!("settlement_pending");
    pending
}

/// Refund the payer from the payee's wallet a moment after the failure (the payee is an unlocked dev
/// account, so the lab can send from it).
fn refund_later(endpoint: Arc<Endpoint>, payload: &Value, requirement: &Value) {
    let payer = payload
        .pointer("/payload/authorization/from")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<Address>().ok());
    let amount = requirement
        .get("amount")
        .or_else(|| requirement.get("maxAmountRequired"))
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<U256>().ok());
    let (Some(payer), Some(amount)) = (payer, amount) else {
        return;
    };
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let token = &endpoint.shared.token;
        if let Err(e) = token.transfer(endpoint.quote.pay_to, payer, amount).await {
            eprintln!("lab: refund failed: {e:#}");
        }
    });
}

/// Read a request head (bounded) so the client has finished sending before we misbehave.
async fn read_request_head<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 64 * 1024 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

async fn hostile_response<S>(
    mut stream: S,
    hostile: Hostile,
    endpoint: &Endpoint,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    tokio::time::timeout(Duration::from_secs(5), read_request_head(&mut stream))
        .await
        .map_err(|_| std::io::Error::other("request head timeout"))??;
    let pr = current_quote(endpoint);
    let pr_header = quote::encode_header(&endpoint.scenario, &pr);
    match hostile {
        Hostile::HugeBody => {
            const SIZE: usize = 64 << 20;
            let head = format!(
                "HTTP/1.1 402 Payment Required\r\npayment-required: {pr_header}\r\ncontent-type: application/json\r\ncontent-length: {SIZE}\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(b"{\"pad\":\"").await?;
            let chunk = vec![b'a'; 64 * 1024];
            let mut sent = 8;
            while sent + chunk.len() <= SIZE - 2 {
                stream.write_all(&chunk).await?;
                sent += chunk.len();
            }
            stream.write_all(&vec![b'a'; SIZE - 2 - sent]).await?;
            stream.write_all(b"\"}").await?;
        }
        Hostile::HugeHeader => {
            stream
                .write_all(b"HTTP/1.1 402 Payment Required\r\n")
                .await?;
            let line = format!("x-pad: {}\r\n", "a".repeat(1000));
            // A little over 1 MiB of header lines.
            for _ in 0..1100 {
                stream.write_all(line.as_bytes()).await?;
            }
            stream.write_all(b"content-length: 2\r\n\r\n{}").await?;
        }
        Hostile::Slowloris => {
            let head = format!(
                "HTTP/1.1 402 Payment Required\r\npayment-required: {pr_header}\r\ncontent-length: 2\r\n\r\n{{}}"
            );
            for b in head.as_bytes() {
                stream.write_all(&[*b]).await?;
                stream.flush().await?;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        Hostile::GzipBomb => {
            let bomb = gzip_bomb().await;
            let head = format!(
                "HTTP/1.1 402 Payment Required\r\npayment-required: {pr_header}\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\ncontent-length: {}\r\n\r\n",
                bomb.len()
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(&bomb).await?;
        }
        Hostile::AcceptsFloodBody => {
            let body = accepts_flood_body(&endpoint.quote.resource);
            write_402(&mut stream, &[], body.as_bytes()).await?;
        }
        Hostile::AcceptsFloodHeader => {
            let object = format!(
                "{{\"x402Version\":2,\"resource\":{{\"url\":{}}},\"accepts\":[{}{{}}]}}",
                Value::String(endpoint.quote.resource.clone()),
                "{},".repeat(ACCEPTS_FLOOD_HEADER_ENTRIES - 1)
            );
            let header = STANDARD.encode(object);
            write_402(&mut stream, &[("payment-required", &header)], b"{}").await?;
        }
        Hostile::DeepNesting => {
            let mut nested = pr.clone();
            let chain = format!(
                "{}{}",
                "[".repeat(DEEP_NESTING_DEPTH),
                "]".repeat(DEEP_NESTING_DEPTH)
            );
            nested["extensions"]["nest"] =
                serde_json::from_str(&chain).map_err(std::io::Error::other)?;
            let header = STANDARD.encode(nested.to_string());
            write_402(&mut stream, &[("payment-required", &header)], b"{}").await?;
        }
        Hostile::DeviationFlood => {
            let body = deviation_flood_body(&endpoint.quote.resource);
            write_402(&mut stream, &[], body.as_bytes()).await?;
        }
        Hostile::DuplicateHeadersCase => {
            let other = STANDARD.encode(other_payee_quote(&pr, &endpoint.quote).to_string());
            write_402(
                &mut stream,
                &[
                    ("Payment-Required", &pr_header),
                    ("PAYMENT-REQUIRED", &other),
                ],
                b"{}",
            )
            .await?;
        }
        Hostile::DuplicateContentType => {
            // write_402 declares application/json first.
            write_402(
                &mut stream,
                &[
                    ("payment-required", &pr_header),
                    ("content-type", "text/html"),
                ],
                b"{}",
            )
            .await?;
        }
        Hostile::SchemaBomb => {
            let mut bomb = pr.clone();
            let branch = json!({"type": "array", "items": {"$ref": "#/$defs/nest"}});
            bomb["extensions"]["bazaar"]["schema"] = json!({
                "$defs": {"nest": {"anyOf": [branch.clone(), branch]}},
                "type": "object",
                "properties": {"input": {"properties": {"nest": {"$ref": "#/$defs/nest"}}}}
            });
            let chain = format!(
                "{}1{}",
                "[".repeat(SCHEMA_BOMB_DEPTH),
                "]".repeat(SCHEMA_BOMB_DEPTH)
            );
            bomb["extensions"]["bazaar"]["info"]["input"]["nest"] =
                serde_json::from_str(&chain).map_err(std::io::Error::other)?;
            let header = STANDARD.encode(bomb.to_string());
            write_402(&mut stream, &[("payment-required", &header)], b"{}").await?;
        }
        Hostile::DuplicateHeadersDisagree | Hostile::DuplicateHeadersAgree => {
            // Served over ordinary HTTP (see `Hostile::is_raw`); never written raw.
        }
        Hostile::EndlessChunked => {
            let head = format!(
                "HTTP/1.1 402 Payment Required\r\npayment-required: {pr_header}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(b"1\r\n[\r\n").await?;
            let piece = "{\"k\":1},".repeat(128);
            let chunk = format!("{:x}\r\n{piece}\r\n", piece.len());
            loop {
                stream.write_all(chunk.as_bytes()).await?;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }
    stream.flush().await?;
    stream.shutdown().await
}

/// The largest body the hostile x402 scenarios send: just under the probe's 1 MiB body cap, so
/// every byte is read.
pub const HOSTILE_BODY_BYTES: usize = (1 << 20) - 1024;
/// `accepts` entries in the `accepts-flood-header` scenario's header.
pub const ACCEPTS_FLOOD_HEADER_ENTRIES: usize = 10_000;
/// How deep the `deep-nesting` scenario nests its arrays.
pub const DEEP_NESTING_DEPTH: usize = 100;
/// How deep the `schema-bomb` scenario nests the array its schema recurses over.
pub const SCHEMA_BOMB_DEPTH: usize = 40;

/// A 402 head with these headers (and a JSON content type), then `body`.
async fn write_402<S: AsyncWrite + Unpin>(
    stream: &mut S,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head =
        String::from("HTTP/1.1 402 Payment Required\r\ncontent-type: application/json\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await
}

/// `{"x402Version":2,"resource":{...},"accepts":[{},{},...]}`, as many entries as fit in
/// [`HOSTILE_BODY_BYTES`].
pub fn accepts_flood_body(resource: &str) -> String {
    let head = format!(
        "{{\"x402Version\":2,\"resource\":{{\"url\":{}}},\"accepts\":[",
        Value::String(resource.to_string())
    );
    let entries = (HOSTILE_BODY_BYTES - head.len() - 2) / 3;
    format!("{head}{}{{}}]}}", "{},".repeat(entries - 1))
}

/// A v2 body whose entries give every field the wrong JSON type, filling [`HOSTILE_BODY_BYTES`].
pub fn deviation_flood_body(resource: &str) -> String {
    const ENTRY: &str = r#"{"scheme":1,"network":2,"amount":[],"asset":4,"payTo":5,"maxTimeoutSeconds":"x","extra":7,"description":8,"mimeType":9,"resource":10,"outputSchema":11}"#;
    let head = format!(
        "{{\"x402Version\":2,\"resource\":{{\"url\":{}}},\"accepts\":[",
        Value::String(resource.to_string())
    );
    let entries = (HOSTILE_BODY_BYTES - head.len() - 2) / (ENTRY.len() + 1);
    let mut body = head;
    for i in 0..entries {
        if i > 0 {
            body.push(',');
        }
        body.push_str(ENTRY);
    }
    body.push_str("]}");
    body
}

/// How many zero bytes the gzip bomb inflates to.
pub const GZIP_BOMB_INFLATED: usize = 1 << 30;

/// A gzip stream of 1 GiB of zeros (about 1 MB), made once per process on first use.
pub async fn gzip_bomb() -> Bytes {
    static BOMB: tokio::sync::OnceCell<Bytes> = tokio::sync::OnceCell::const_new();
    BOMB.get_or_init(|| async {
        tokio::task::spawn_blocking(|| Bytes::from(zeros_gzip(GZIP_BOMB_INFLATED >> 20)))
            .await
            .unwrap_or_default()
    })
    .await
    .clone()
}

/// A gzip stream of `mib` MiB of zeros, made without deflating them all: one MiB is deflated and
/// ended with a full flush (which byte-aligns the output and forgets the window), so the same
/// compressed bytes stand for every further MiB. Deflating the whole GiB took seconds of CPU on
/// the first request, past the prober's 10 s deadline for a response head on a loaded machine.
fn zeros_gzip(mib: usize) -> Vec<u8> {
    use flate2::{Compress, Compression, Crc, FlushCompress};
    let zeros = vec![0u8; 1 << 20];
    let mut deflate = Compress::new(Compression::best(), false);
    // Room for all of it in one call each (a MiB of zeros deflates to about a kilobyte).
    let mut segment = Vec::with_capacity(zeros.len());
    let mut tail = Vec::with_capacity(1 << 10);
    let done = deflate
        .compress_vec(&zeros, &mut segment, FlushCompress::Full)
        .is_ok()
        && deflate.total_in() == zeros.len() as u64
        && deflate
            .compress_vec(&[], &mut tail, FlushCompress::Finish)
            .is_ok();
    if !done {
        return Vec::new();
    }
    let mut one = Crc::new();
    one.update(&zeros);
    let mut crc = Crc::new();
    for _ in 0..mib {
        crc.combine(&one);
    }
    // RFC 1952: the header (no name, no time, unknown OS), the deflate data, CRC-32 and the
    // length modulo 2^32, both little-endian.
    let mut out = Vec::with_capacity(18 + segment.len() * mib + tail.len());
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
    for _ in 0..mib {
        out.extend_from_slice(&segment);
    }
    out.extend_from_slice(&tail);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(((mib as u64) << 20) as u32).to_le_bytes());
    out
}
