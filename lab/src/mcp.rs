//! MCP servers of the lab (Streamable HTTP over plain HTTP on loopback), honest, broken and
//! hostile, each with paid tools behind the x402 MCP transport.
//!
//! A small HTTP/1.1 server of its own (one request per connection, `Connection: close`) rather
//! than hyper's, so that the hostile kinds can write what no framework would: an event stream
//! that never ends, a 100 MB result, a session id that changes on every answer. Every server has
//! the same three tools: `get_weather` (paid, read-only, with an example), `delete_records`
//! (destructive: a probe must never call it; calls are counted) and `ping` (free). What a probe
//! should conclude about each kind is written by hand in `scenarios::mcp_scenarios`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The path of every lab MCP server's endpoint.
pub const MCP_PATH: &str = "/mcp";
/// The paid tool.
pub const PAID_TOOL: &str = "get_weather";
/// The destructive tool (never to be called by a probe).
pub const DESTRUCTIVE_TOOL: &str = "delete_records";
/// The free tool.
pub const FREE_TOOL: &str = "ping";
/// The newest MCP revision (stateless).
const STATELESS_VERSION: &str = "2026-07-28";
/// The revision the handshake servers speak.
const SESSION_VERSION: &str = "2025-11-25";
/// Largest request read.
const MAX_REQUEST_BYTES: usize = 1 << 20;

/// How a lab MCP server behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpKind {
    /// The stateless form, JSON answers, the transport's PaymentRequired in both carriers.
    Honest,
    /// Only the `initialize` handshake (a request without a session is refused with 400, as the
    /// official SDK does), answers as event streams.
    HonestSession,
    /// The draft MCP payment form: JSON-RPC error -32402 with `data.payment[]`.
    DraftError,
    /// `content[0].text` quotes another amount than `structuredContent`.
    TextDiffers,
    /// The PaymentRequired only as text (no `structuredContent`).
    NoStructuredContent,
    /// The PaymentRequired in a result not marked `isError`.
    NotMarkedError,
    /// The paid-looking tool answers its output without asking for payment.
    Unpaid,
    /// Every answer is an event stream that never ends and never answers.
    EndlessStream,
    /// 5,000 tools, each a paid lookup (the list within the read cap).
    HugeToolList,
    /// A tool whose input schema nests 10,000 deep.
    DeepSchema,
    /// `tools/call` answers a 100 MB result.
    HugeResult,
    /// The handshake form, with a new `Mcp-Session-Id` on every answer.
    SessionChurn,
}

/// A running lab MCP server: its endpoint URL, and how often the destructive tool was called.
pub struct RunningMcp {
    pub url: String,
    pub addr: SocketAddr,
    state: Arc<State>,
    _tasks: JoinSet<()>,
}

impl RunningMcp {
    /// `mcp+http://addr/mcp`: the server as a subject.
    pub fn subject(&self) -> String {
        format!("mcp+{}", self.url)
    }

    /// Calls of `delete_records` so far.
    pub fn destructive_calls(&self) -> u64 {
        self.state.destructive_calls.load(Ordering::SeqCst)
    }

    /// `tools/call` requests so far (any tool).
    pub fn tool_calls(&self) -> u64 {
        self.state.tool_calls.load(Ordering::SeqCst)
    }
}

struct State {
    kind: McpKind,
    /// The PaymentRequired the paid tool answers with.
    payment_required: Value,
    destructive_calls: AtomicU64,
    tool_calls: AtomicU64,
    sessions: AtomicU64,
}

/// Start a server of `kind` whose paid tool asks for the PaymentRequired `quote` makes for the
/// paid tool's subject URL (`mcp+http://addr/mcp#get_weather`).
pub async fn start(kind: McpKind, quote: impl FnOnce(&str) -> Value) -> Result<RunningMcp> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding an MCP server")?;
    let addr = listener.local_addr()?;
    let state = Arc::new(State {
        kind,
        payment_required: quote(&format!("mcp+http://{addr}{MCP_PATH}#{PAID_TOOL}")),
        destructive_calls: AtomicU64::new(0),
        tool_calls: AtomicU64::new(0),
        sessions: AtomicU64::new(0),
    });
    let mut tasks = JoinSet::new();
    let serving = state.clone();
    tasks.spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            while connections.try_join_next().is_some() {}
            connections.spawn(serve(tcp, serving.clone()));
        }
    });
    Ok(RunningMcp {
        url: format!("http://{addr}{MCP_PATH}"),
        addr,
        state,
        _tasks: tasks,
    })
}

/// One request as read.
struct Request {
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn method(&self) -> &str {
        self.body
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    fn id(&self) -> Value {
        self.body.get("id").cloned().unwrap_or(Value::Null)
    }
}

/// What to write back.
enum Reply {
    Json(u16, Value),
    /// A JSON body written as text.
    Raw(String),
    Stream(Value),
    Accepted,
    NotFound,
    EndlessStream,
    HugeResult,
}

async fn serve(mut tcp: TcpStream, state: Arc<State>) {
    let Some(request) = read_request(&mut tcp).await else {
        return;
    };
    let session = match state.kind {
        McpKind::SessionChurn => Some(format!(
            "churn-{}",
            state.sessions.fetch_add(1, Ordering::SeqCst)
        )),
        McpKind::HonestSession => Some("lab-session-1".to_string()),
        _ => None,
    };
    let reply = answer(&state, &request);
    let session_header = session
        .filter(|_| request.method() == "initialize" || state.kind == McpKind::SessionChurn)
        .map(|s| format!("Mcp-Session-Id: {s}\r\n"))
        .unwrap_or_default();
    let _ = write_reply(&mut tcp, reply, &session_header).await;
}

async fn read_request(tcp: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = tcp.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
        .min(MAX_REQUEST_BYTES);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = tcp.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Request {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

fn rpc_error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn rpc_result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn stateless(kind: McpKind) -> bool {
    !matches!(
        kind,
        McpKind::HonestSession | McpKind::SessionChurn | McpKind::EndlessStream
    )
}

fn answer(state: &State, req: &Request) -> Reply {
    if req.path.split('?').next() == Some("/.well-known/x402-operator.json") {
        return Reply::NotFound;
    }
    if req.path != MCP_PATH {
        return Reply::NotFound;
    }
    if state.kind == McpKind::EndlessStream {
        return Reply::EndlessStream;
    }
    let method = req.method();
    let id = req.id();
    if method.starts_with("notifications/") {
        return Reply::Accepted;
    }
    if stateless(state.kind) {
        // The newest revision: the headers must say what the body says (a mismatch is a 400).
        let meta_version = req
            .body
            .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
            .and_then(Value::as_str);
        let name = req.body.pointer("/params/name").and_then(Value::as_str);
        let agrees = req.header("mcp-protocol-version") == Some(STATELESS_VERSION)
            && meta_version == Some(STATELESS_VERSION)
            && req.header("mcp-method") == Some(method)
            && (method != "tools/call" || req.header("mcp-name") == name);
        if !agrees && method != "initialize" {
            return Reply::Json(
                400,
                rpc_error(id, -32600, "Bad Request: headers and body disagree"),
            );
        }
    } else if method != "initialize" && req.header("mcp-session-id").is_none() {
        return Reply::Json(
            400,
            rpc_error(id, -32000, "Bad Request: No valid session ID provided"),
        );
    }
    let reply = match method {
        "initialize" => rpc_result(
            id,
            json!({
                "protocolVersion": SESSION_VERSION,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "x402-lab-mcp", "version": "1"},
            }),
        ),
        "tools/list" if state.kind == McpKind::DeepSchema => {
            return Reply::Raw(deep_tools_list(id));
        }
        "tools/list" => rpc_result(id, json!({"tools": tools(state.kind)})),
        "tools/call" => {
            state.tool_calls.fetch_add(1, Ordering::SeqCst);
            let name = req
                .body
                .pointer("/params/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if name == DESTRUCTIVE_TOOL {
                state.destructive_calls.fetch_add(1, Ordering::SeqCst);
                rpc_result(
                    id,
                    json!({"content": [{"type": "text", "text": "deleted"}]}),
                )
            } else if name == FREE_TOOL {
                rpc_result(id, json!({"content": [{"type": "text", "text": "pong"}]}))
            } else if state.kind == McpKind::HugeResult {
                return Reply::HugeResult;
            } else {
                paid_answer(state, id)
            }
        }
        _ => rpc_error(id, -32601, "Method not found"),
    };
    match state.kind {
        McpKind::HonestSession | McpKind::SessionChurn => Reply::Stream(reply),
        _ => Reply::Json(200, reply),
    }
}

/// The paid tool's answer to an unpaid call, with the kind's fault.
fn paid_answer(state: &State, id: Value) -> Value {
    let pr = state.payment_required.clone();
    let text = serde_json::to_string(&pr).unwrap_or_default();
    match state.kind {
        McpKind::DraftError => json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": -32402,
                "message": "Payment Required",
                "data": {"payment": [{"protocol": "x402", "paymentRequired": pr}]},
            },
        }),
        McpKind::TextDiffers => {
            let mut other = pr.clone();
            if let Some(entry) = other.pointer_mut("/accepts/0/amount") {
                *entry = json!("999999");
            }
            let other_text = serde_json::to_string(&other).unwrap_or_default();
            rpc_result(
                id,
                json!({"isError": true, "structuredContent": pr, "content": [{"type": "text", "text": other_text}]}),
            )
        }
        McpKind::NoStructuredContent => rpc_result(
            id,
            json!({"isError": true, "content": [{"type": "text", "text": text}]}),
        ),
        McpKind::NotMarkedError => rpc_result(
            id,
            json!({"structuredContent": pr, "content": [{"type": "text", "text": text}]}),
        ),
        McpKind::Unpaid => rpc_result(
            id,
            json!({"content": [{"type": "text", "text": "{\"temperature\": 21}"}], "structuredContent": {"temperature": 21}}),
        ),
        _ => rpc_result(
            id,
            json!({"isError": true, "structuredContent": pr, "content": [{"type": "text", "text": text}]}),
        ),
    }
}

/// Where `deep_tools_list` puts the deep schema.
const DEEP_SCHEMA_MARK: &str = "@deep-schema@";
/// Levels of the deep schema.
const DEEP_SCHEMA_LEVELS: usize = 10_000;

/// The `tools/list` answer of `DeepSchema`: the paid tool's input schema nested 10,000 deep.
fn deep_tools_list(id: Value) -> String {
    let text = rpc_result(id, json!({"tools": tools(McpKind::DeepSchema)})).to_string();
    let open = r#"{"type":"object","required":["x"],"properties":{"x":"#.repeat(DEEP_SCHEMA_LEVELS);
    let close = "}}".repeat(DEEP_SCHEMA_LEVELS);
    text.replace(
        &format!("\"{DEEP_SCHEMA_MARK}\""),
        &format!(r#"{open}{{"type":"string"}}{close}"#),
    )
}

fn tools(kind: McpKind) -> Vec<Value> {
    let mut schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        "required": ["city"],
    });
    if kind == McpKind::DeepSchema {
        // Stands for the deep schema, written as text by `deep_tools_list` (a `Value` 10,000
        // deep would overflow the stack of whoever serialises or drops it).
        schema = json!(DEEP_SCHEMA_MARK);
    }
    let mut tools = vec![
        json!({
            "name": PAID_TOOL,
            "description": "Weather for a city, $0.01 USDC per call (x402)",
            "inputSchema": schema,
            "annotations": {"readOnlyHint": true},
            "_meta": {"examples": [{"city": "Lisbon"}]},
        }),
        json!({
            "name": DESTRUCTIVE_TOOL,
            "description": "Deletes records; paid (x402)",
            "inputSchema": {"type": "object"},
            "annotations": {"destructiveHint": true},
        }),
        json!({
            "name": FREE_TOOL,
            "description": "Answers pong",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true},
        }),
    ];
    if kind == McpKind::HugeToolList {
        tools.extend((0..5_000).map(|i| {
            json!({
                "name": format!("lookup_{i}"),
                "description": "A paid lookup (x402)",
                "inputSchema": {"type": "object"},
            })
        }));
    }
    tools
}

async fn write_reply(
    tcp: &mut TcpStream,
    reply: Reply,
    session_header: &str,
) -> std::io::Result<()> {
    let head = |status: &str, content_type: &str, length: Option<usize>| {
        let length = length
            .map(|n| format!("Content-Length: {n}\r\n"))
            .unwrap_or_default();
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{length}{session_header}Connection: close\r\n\r\n"
        )
    };
    match reply {
        Reply::Json(status, value) => {
            let body = serde_json::to_vec(&value).unwrap_or_default();
            let status = if status == 200 { "200 OK" } else { "400 Bad Request" };
            tcp.write_all(head(status, "application/json", Some(body.len())).as_bytes())
                .await?;
            tcp.write_all(&body).await
        }
        Reply::Raw(text) => {
            tcp.write_all(head("200 OK", "application/json", Some(text.len())).as_bytes())
                .await?;
            tcp.write_all(text.as_bytes()).await
        }
        Reply::Stream(value) => {
            let body = format!(
                "event: message\ndata: {}\n\n",
                serde_json::to_string(&value).unwrap_or_default()
            );
            tcp.write_all(head("200 OK", "text/event-stream", None).as_bytes())
                .await?;
            tcp.write_all(body.as_bytes()).await
        }
        Reply::Accepted => {
            tcp.write_all(
                format!("HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n{session_header}Connection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
        }
        Reply::NotFound => {
            tcp.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await
        }
        Reply::EndlessStream => {
            tcp.write_all(head("200 OK", "text/event-stream", None).as_bytes())
                .await?;
            // Notifications and comments (about 2 KB an event, so the read cap comes before the
            // event budget), never the answer, until the client hangs up.
            let notification = format!(
                "event: message\ndata: {}\n\n: {}\n\n",
                json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}),
                "keep-alive ".repeat(200)
            );
            loop {
                tcp.write_all(notification.as_bytes()).await?;
            }
        }
        Reply::HugeResult => {
            // A 100 MB JSON-RPC result: a string of 100 MB, written until the client hangs up.
            const TOTAL: usize = 100 * 1024 * 1024;
            let open = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":""#;
            let close = br#""}]}}"#;
            let length = TOTAL;
            tcp.write_all(head("200 OK", "application/json", Some(length)).as_bytes())
                .await?;
            tcp.write_all(open).await?;
            let block = vec![b'a'; 64 * 1024];
            let mut left = TOTAL - open.len() - close.len();
            while left > 0 {
                let n = left.min(block.len());
                tcp.write_all(&block[..n]).await?;
                left -= n;
            }
            tcp.write_all(close).await
        }
    }
}
