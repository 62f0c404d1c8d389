//! x402 over MCP (Streamable HTTP), pure: the JSON-RPC requests a probe sends, an MCP server's
//! answers read as JSON or as a server-sent event stream, `tools/list` read into tools, which
//! tools an unpaid probe may call and with what arguments, and the `PaymentRequired` a paid tool
//! answers an unpaid `tools/call` with.
//!
//! The x402 MCP transport: an unpaid call of a paid tool answers a JSON-RPC **result** with
//! `isError: true`, the PaymentRequired in `structuredContent` and the same JSON as text in
//! `content[0].text`. The draft MCP payment proposal (SEP-2007) answers a JSON-RPC **error**
//! `-32402` whose `data.payment[]` holds `{protocol: "x402", paymentRequired}`; it is read as a
//! documented variant (a note, never a failure by itself).
//!
//! Everything here is bounded by `crate::budget` (`MAX_MCP_*`): one message is read in one pass
//! within a depth and a value count, an event stream is read for at most a number of events, a
//! tool list for at most a number of tools.
//!
//! # Deviation codes (besides the PaymentRequired's own, `x402::parse`)
//!
//! | Where | Problems |
//! |---|---|
//! | `mcp.answer` | `http_status`, `content_type`, `too_large` (the body was cut at the read cap before our answer), `bad_json`, `too_deep`, `too_complex`, `not_jsonrpc`, `no_answer` (an event stream without our answer), `too_many_events`, `unexpected_202` |
//! | `mcp.error` | a JSON-RPC error other than the payment forms |
//! | `mcp.result` | `not_object`, `unpaid` (the tool answered without asking for payment) |
//! | `mcp.is_error` | `not_true` (a PaymentRequired in a result not marked `isError: true`) |
//! | `mcp.structured_content` | `missing` (no PaymentRequired there), `not_object`, `too_deep`, `too_complex` |
//! | `mcp.text` | `missing` (no `content[0].text` PaymentRequired), `bad_json`, `not_object`, `too_deep`, `too_complex` |
//! | `mcp.draft_payment_error` | a note: the draft `-32402` form was read |
//!
//! C1 fails on every `mcp.*` code but the note ([`C1_CODES`]); C4 compares `structuredContent`
//! with `content[0].text` as it compares the header with the body.

use serde_json::{Map, Value, json};

use super::bounded::{DecodeError, Decoded, decode_object, decode_value_within};
use super::parse::{Carrier, interpret, looks_like_payment_required};
use super::types::{Deviation, Parsed402, Source, printable_prefix};
use crate::budget::{
    MAX_MCP_ARGUMENT_DEPTH, MAX_MCP_JSON_DEPTH, MAX_MCP_JSON_VALUES, MAX_MCP_SSE_EVENTS,
    MAX_MCP_TOOL_NAME_CHARS, MAX_MCP_TOOLS, MAX_MESSAGE_CHARS,
};
use crate::evidence::http::HttpResponse;
pub use crate::evidence::mcp::TransportForm;

/// The newest MCP revision, tried first: stateless, each request carries its version.
pub const STATELESS_PROTOCOL_VERSION: &str = "2026-07-28";
/// The revision the `initialize` handshake asks for when the stateless form is refused.
pub const HANDSHAKE_PROTOCOL_VERSION: &str = "2025-11-25";
/// `_meta` key of the per-request protocol version (stateless form).
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of the client's name and version (stateless form).
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key a paid retry carries the PaymentPayload in.
pub const META_PAYMENT: &str = "x402/payment";
/// `_meta` key of the settlement response on a paid result.
pub const META_PAYMENT_RESPONSE: &str = "x402/payment-response";
/// The draft MCP payment error code.
pub const DRAFT_PAYMENT_ERROR: i64 = -32402;
/// The session header of the handshake form.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// What every request accepts: the server chooses JSON or an event stream.
pub const ACCEPT: &str = "application/json, text/event-stream";

/// `mcp.*` codes that make C1 fail (all but the draft form's note).
pub const C1_CODES: &[&str] = &[
    "mcp.answer.http_status",
    "mcp.answer.content_type",
    "mcp.answer.too_large",
    "mcp.answer.bad_json",
    "mcp.answer.too_deep",
    "mcp.answer.too_complex",
    "mcp.answer.not_jsonrpc",
    "mcp.answer.no_answer",
    "mcp.answer.too_many_events",
    "mcp.answer.unexpected_202",
    "mcp.error",
    "mcp.result.not_object",
    "mcp.result.unpaid",
    "mcp.is_error.not_true",
    "mcp.structured_content.missing",
    "mcp.structured_content.not_object",
    "mcp.structured_content.too_deep",
    "mcp.structured_content.too_complex",
    "mcp.text.missing",
    "mcp.text.bad_json",
    "mcp.text.not_object",
    "mcp.text.too_deep",
    "mcp.text.too_complex",
];

/// The MCP methods a probe sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Initialize,
    /// `notifications/initialized` (a notification: no id, no answer but 202).
    Initialized,
    ToolsList,
    ToolsCall,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Initialize => "initialize",
            Method::Initialized => "notifications/initialized",
            Method::ToolsList => "tools/list",
            Method::ToolsCall => "tools/call",
        }
    }
}

/// One JSON-RPC request (or, without `id`, a notification) as bytes. In the stateless form the
/// protocol version and client info go into `params._meta`.
pub fn request_body(
    id: Option<u64>,
    method: Method,
    params: Value,
    form: TransportForm,
) -> Vec<u8> {
    let mut params = match params {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    if form == TransportForm::Stateless {
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(
                META_PROTOCOL_VERSION.into(),
                json!(STATELESS_PROTOCOL_VERSION),
            );
            meta.insert(META_CLIENT_INFO.into(), client_info());
        }
    }
    let mut message = Map::new();
    message.insert("jsonrpc".into(), json!("2.0"));
    if let Some(id) = id {
        message.insert("id".into(), json!(id));
    }
    message.insert("method".into(), json!(method.as_str()));
    if !params.is_empty() {
        message.insert("params".into(), Value::Object(params));
    }
    serde_json::to_vec(&Value::Object(message)).unwrap_or_default()
}

/// Our name and version, as MCP clients state them.
pub fn client_info() -> Value {
    json!({"name": "x402-probe", "version": env!("CARGO_PKG_VERSION")})
}

/// `initialize`'s parameters for the handshake form.
pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": HANDSHAKE_PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": client_info(),
    })
}

/// A JSON-RPC answer to one of our requests.
#[derive(Debug, Clone, PartialEq)]
pub enum RpcMessage {
    Result(Value),
    Error {
        code: i64,
        message: String,
        data: Option<Value>,
    },
}

/// How an answer was framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Json,
    EventStream,
}

/// An answer read from one HTTP response.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub framing: Framing,
    pub message: RpcMessage,
    /// Events before ours that were skipped (server requests, notifications, other ids, events
    /// that were not JSON).
    pub events_skipped: usize,
}

/// Read the answer to request `id` from a response: JSON (`application/json`) or an event
/// stream (`text/event-stream`, the first event carrying our answer; a stream cut after it is
/// fine). Work is linear in the body and bounded by `MAX_MCP_*`.
pub fn read_answer(resp: &HttpResponse, id: u64) -> Result<Answer, Deviation> {
    if !(200..=299).contains(&resp.status) {
        return Err(Deviation::new(
            "mcp.answer.http_status",
            format!("HTTP {} to a JSON-RPC request", resp.status),
        ));
    }
    if resp.status == 202 {
        return Err(Deviation::new(
            "mcp.answer.unexpected_202",
            "HTTP 202 (the answer to a notification) to a request",
        ));
    }
    let content_type = resp
        .header("content-type")
        .map(|t| {
            t.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    match content_type.as_str() {
        "application/json" => {
            if resp.body_truncated {
                return Err(too_large());
            }
            let value = decode_message(&resp.body, "mcp.answer")?;
            let message = rpc_message(&value, id)?.ok_or_else(|| {
                Deviation::new(
                    "mcp.answer.not_jsonrpc",
                    "the JSON answer is not the JSON-RPC response to our request",
                )
            })?;
            Ok(Answer {
                framing: Framing::Json,
                message,
                events_skipped: 0,
            })
        }
        "text/event-stream" => read_event_stream(&resp.body, resp.body_truncated, id),
        other => Err(Deviation::new(
            "mcp.answer.content_type",
            format!(
                "Content-Type {:?}; MCP answers are application/json or text/event-stream",
                printable_prefix(other, 100)
            ),
        )),
    }
}

fn too_large() -> Deviation {
    Deviation::new(
        "mcp.answer.too_large",
        format!(
            "the answer was cut at the read cap before it was complete (more than {} bytes)",
            crate::budget::MAX_BODY_BYTES
        ),
    )
}

/// One message decoded within the MCP bounds; `at` names the carrier in the deviation codes.
fn decode_message(bytes: &[u8], at: &str) -> Result<Value, Deviation> {
    decode_value_within(bytes, MAX_MCP_JSON_DEPTH, MAX_MCP_JSON_VALUES).map_err(|e| match e {
        DecodeError::TooDeep => Deviation::new(
            format!("{at}.too_deep"),
            format!("nested deeper than {MAX_MCP_JSON_DEPTH}; not read"),
        ),
        DecodeError::TooComplex => Deviation::new(
            format!("{at}.too_complex"),
            format!("more than {MAX_MCP_JSON_VALUES} JSON values; not read"),
        ),
        DecodeError::Syntax(why) => Deviation::new(
            format!("{at}.bad_json"),
            format!("not JSON: {}", printable_prefix(&why, MAX_MESSAGE_CHARS)),
        ),
        DecodeError::NotObject(kind) => {
            Deviation::new(format!("{at}.bad_json"), format!("a JSON {kind}"))
        }
    })
}

/// The JSON-RPC response to request `id` in `value`: `Ok(None)` when it is another message (a
/// server request, a notification, another id); an error when it answers `id` malformed.
fn rpc_message(value: &Value, id: u64) -> Result<Option<RpcMessage>, Deviation> {
    let Some(object) = value.as_object() else {
        return Ok(None);
    };
    if object.get("id") != Some(&json!(id)) || object.contains_key("method") {
        return Ok(None);
    }
    let not_jsonrpc = |why: &str| Deviation::new("mcp.answer.not_jsonrpc", why.to_string());
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(not_jsonrpc("the answer lacks \"jsonrpc\": \"2.0\""));
    }
    match (object.get("result"), object.get("error")) {
        (Some(result), None) => Ok(Some(RpcMessage::Result(result.clone()))),
        (None, Some(Value::Object(error))) => {
            let code = error.get("code").and_then(Value::as_i64);
            let Some(code) = code else {
                return Err(not_jsonrpc("the error has no integer code"));
            };
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            Ok(Some(RpcMessage::Error {
                code,
                message,
                data: error.get("data").cloned(),
            }))
        }
        (Some(_), Some(_)) => Err(not_jsonrpc("the answer has both result and error")),
        _ => Err(not_jsonrpc(
            "the answer has neither result nor an error object",
        )),
    }
}

/// An event stream (the WHATWG format: `data:` lines joined by newlines, an event ending at a
/// blank line; lines end in LF, CRLF or CR), read until the event that answers `id`. An event
/// not yet ended when the stream stops is discarded, as the format says.
fn read_event_stream(body: &[u8], truncated: bool, id: u64) -> Result<Answer, Deviation> {
    let mut data: Vec<u8> = Vec::new();
    let mut has_data = false;
    let mut events = 0usize;
    let mut skipped = 0usize;
    let mut rest = body;
    while !rest.is_empty() {
        let end = rest
            .iter()
            .position(|b| *b == b'\n' || *b == b'\r')
            .unwrap_or(rest.len());
        if end == rest.len() {
            // A line without its end: the stream stopped in it.
            break;
        }
        let line = &rest[..end];
        let mut next = end + 1;
        if rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n') {
            next += 1;
        }
        rest = &rest[next..];
        if line.is_empty() {
            if !has_data {
                continue;
            }
            events += 1;
            if events > MAX_MCP_SSE_EVENTS {
                return Err(Deviation::new(
                    "mcp.answer.too_many_events",
                    format!("more than {MAX_MCP_SSE_EVENTS} events before our answer"),
                ));
            }
            let found = decode_message(&data, "mcp.answer")
                .ok()
                .map(|value| rpc_message(&value, id))
                .transpose()?
                .flatten();
            if let Some(message) = found {
                return Ok(Answer {
                    framing: Framing::EventStream,
                    message,
                    events_skipped: skipped,
                });
            }
            skipped += 1;
            data.clear();
            has_data = false;
            continue;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(0) => continue, // a comment
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            if has_data {
                data.push(b'\n');
            }
            data.extend_from_slice(value);
            has_data = true;
        }
    }
    if truncated {
        return Err(too_large());
    }
    Err(Deviation::new(
        "mcp.answer.no_answer",
        format!("the event stream ended after {events} events without the answer to our request"),
    ))
}

/// A tool as `tools/list` described it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// `inputSchema` as sent (`{}` when absent or not an object).
    pub input_schema: Value,
    /// Why it looks paid, if it does.
    pub paid_sign: Option<PaidSign>,
    /// Why it looks destructive, if it does: never called.
    pub destructive: Option<String>,
    /// Arguments the tool documents as an example (`_meta.examples[0]`, `inputSchema.examples[0]`).
    pub example_arguments: Option<Value>,
}

/// What makes a tool look paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PaidSign {
    /// The draft form's `payment` array in the tool.
    DraftPayment,
    /// A `_meta` key naming x402 or payment.
    Meta,
    /// Its description names x402, a price or payment.
    Description,
}

/// The tools of one `tools/list` page.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ToolPage {
    pub tools: Vec<Tool>,
    /// Entries of `tools` as sent (read or not).
    pub sent: usize,
    pub next_cursor: Option<String>,
    /// Notes: entries that are not tools, names too long, entries past the budget.
    pub notes: Vec<Deviation>,
}

/// Read one `tools/list` result; at most `room` tools are read (the rest counted).
pub fn read_tool_page(result: &Value, room: usize) -> Result<ToolPage, Deviation> {
    let Some(tools) = result.get("tools").and_then(Value::as_array) else {
        return Err(Deviation::new(
            "mcp.tools.missing",
            "the tools/list result has no tools array",
        ));
    };
    let mut page = ToolPage {
        sent: tools.len(),
        next_cursor: result
            .get("nextCursor")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .map(str::to_string),
        ..ToolPage::default()
    };
    for (i, entry) in tools.iter().enumerate() {
        if page.tools.len() >= room.min(MAX_MCP_TOOLS) {
            page.notes.push(Deviation::new(
                "mcp.tools.too_many",
                format!(
                    "{} tools past the first {MAX_MCP_TOOLS} were counted, not read",
                    tools.len() - i
                ),
            ));
            break;
        }
        match read_tool(entry) {
            Ok(tool) => page.tools.push(tool),
            Err(why) => page
                .notes
                .push(Deviation::new(format!("mcp.tools[{i}]"), why)),
        }
    }
    Ok(page)
}

fn read_tool(entry: &Value) -> Result<Tool, String> {
    let object = entry.as_object().ok_or("not an object")?;
    let name = object
        .get("name")
        .and_then(Value::as_str)
        .ok_or("no name")?;
    if name.is_empty() || name.chars().count() > MAX_MCP_TOOL_NAME_CHARS {
        return Err(format!(
            "a name of {} characters (1 to {MAX_MCP_TOOL_NAME_CHARS})",
            name.chars().count()
        ));
    }
    let description = object
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_string);
    let input_schema = object
        .get("inputSchema")
        .filter(|s| s.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    let meta = object.get("_meta").and_then(Value::as_object);
    let paid_sign = if object.get("payment").is_some_and(Value::is_array) {
        Some(PaidSign::DraftPayment)
    } else if meta.is_some_and(|m| {
        m.keys().any(|k| {
            let k = k.to_ascii_lowercase();
            k.contains("x402") || k.contains("payment") || k.contains("price")
        })
    }) {
        Some(PaidSign::Meta)
    } else if description.as_deref().is_some_and(mentions_payment) {
        Some(PaidSign::Description)
    } else {
        None
    };
    let example_arguments = meta
        .and_then(|m| m.get("examples"))
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .or_else(|| {
            input_schema
                .get("examples")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
        })
        .filter(|e| e.is_object())
        .cloned();
    Ok(Tool {
        name: name.to_string(),
        description,
        destructive: destructive_reason(name, object.get("annotations")),
        input_schema,
        paid_sign,
        example_arguments,
    })
}

fn mentions_payment(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    [
        "x402", "usdc", "paid", "payment", "price", "per call", "$0.",
    ]
    .iter()
    .any(|w| lower.contains(w))
}

/// Verbs that change or spend something: a tool named with one is not called unpaid, unless the
/// server marks it read-only.
const DESTRUCTIVE_VERBS: &[&str] = &[
    "delete",
    "remove",
    "drop",
    "destroy",
    "purge",
    "wipe",
    "erase",
    "truncate",
    "kill",
    "revoke",
    "withdraw",
    "transfer",
    "send",
    "cancel",
    "reset",
    "overwrite",
    "pay",
    "buy",
    "sell",
    "order",
    "execute",
    "exec",
    "run",
    "deploy",
    "write",
    "update",
    "create",
    "post",
    "submit",
];

/// Why a tool looks destructive, if it does: `annotations.destructiveHint: true`, or a
/// destructive verb among the words of its name without `readOnlyHint: true`.
fn destructive_reason(name: &str, annotations: Option<&Value>) -> Option<String> {
    let hint = |key: &str| {
        annotations
            .and_then(|a| a.get(key))
            .and_then(Value::as_bool)
    };
    if hint("destructiveHint") == Some(true) {
        return Some("annotations.destructiveHint is true".into());
    }
    if hint("readOnlyHint") == Some(true) {
        return None;
    }
    let mut words = Vec::new();
    let mut word = String::new();
    // Words split at non-letters and at lower-to-upper case changes (`deleteFile`).
    let mut previous_lower = false;
    for c in name.chars() {
        let boundary = !c.is_ascii_alphabetic() || (c.is_ascii_uppercase() && previous_lower);
        if boundary && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        if c.is_ascii_alphabetic() {
            word.push(c.to_ascii_lowercase());
        }
        previous_lower = c.is_ascii_lowercase();
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
        .iter()
        .find(|w| DESTRUCTIVE_VERBS.contains(&w.as_str()))
        .map(|w| format!("its name has the verb {w:?} and it is not marked read-only"))
}

/// The tools an unpaid probe calls: non-destructive ones, the paid-looking first, in list
/// order, at most `max`.
pub fn tools_to_call(tools: &[Tool], max: usize) -> Vec<&Tool> {
    let safe = tools.iter().filter(|t| t.destructive.is_none());
    let (paid, other): (Vec<&Tool>, Vec<&Tool>) = safe.partition(|t| t.paid_sign.is_some());
    paid.into_iter().chain(other).take(max).collect()
}

/// Arguments for an unpaid call: the tool's own example, else values made from its input
/// schema (each required property: its `default`, `const`, first `examples` or `enum` value,
/// else a value of its type), following at most `MAX_MCP_ARGUMENT_DEPTH` levels.
pub fn arguments_for(tool: &Tool) -> Value {
    if let Some(example) = &tool.example_arguments {
        return example.clone();
    }
    match value_for(&tool.input_schema, 0) {
        Value::Object(map) => Value::Object(map),
        _ => json!({}),
    }
}

fn value_for(schema: &Value, depth: usize) -> Value {
    let Some(schema) = schema.as_object() else {
        return Value::Null;
    };
    for key in ["default", "const"] {
        if let Some(v) = schema.get(key) {
            return v.clone();
        }
    }
    for key in ["examples", "enum"] {
        if let Some(v) = schema
            .get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        {
            return v.clone();
        }
    }
    let kind = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if schema.contains_key("properties") => "object",
        _ => "",
    };
    match kind {
        "object" if depth < MAX_MCP_ARGUMENT_DEPTH => {
            let mut out = Map::new();
            let properties = schema.get("properties").and_then(Value::as_object);
            let required = schema.get("required").and_then(Value::as_array);
            for name in required.into_iter().flatten().filter_map(Value::as_str) {
                let property = properties.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
                out.insert(name.to_string(), value_for(property, depth + 1));
            }
            Value::Object(out)
        }
        "object" => json!({}),
        "array" => json!([]),
        "string" => json!("example"),
        "integer" | "number" => schema
            .get("minimum")
            .filter(|m| m.is_number())
            .cloned()
            .unwrap_or(json!(1)),
        "boolean" => json!(false),
        _ => Value::Null,
    }
}

/// What an unpaid `tools/call` answered, read as x402: the PaymentRequired of the transport
/// (`structuredContent`, else `content[0].text`) or of the draft `-32402` error, with every
/// departure a deviation. Never panics; bounded like the HTTP carriers (`x402::bounded`).
pub fn parse_tool_payment(answer: &Result<Answer, Deviation>) -> Parsed402 {
    let mut deviations = Vec::new();
    let message = match answer {
        Ok(answer) => &answer.message,
        Err(problem) => {
            deviations.push(problem.clone());
            return Parsed402::nothing(deviations);
        }
    };
    match message {
        RpcMessage::Error {
            code,
            message,
            data,
        } => {
            let payment = (*code == DRAFT_PAYMENT_ERROR)
                .then(|| data.as_ref().and_then(draft_payment_required))
                .flatten();
            let Some(object) = payment else {
                deviations.push(Deviation::new(
                    "mcp.error",
                    format!(
                        "JSON-RPC error {code}: {}",
                        printable_prefix(message, MAX_MESSAGE_CHARS)
                    ),
                ));
                return Parsed402::nothing(deviations);
            };
            deviations.push(Deviation::new(
                "mcp.draft_payment_error",
                "the draft MCP payment form: JSON-RPC error -32402 with data.payment[]",
            ));
            match decode_carried(object, "mcp.error.data") {
                Ok(decoded) => finish(Source::McpError, decoded, None, deviations),
                Err(d) => {
                    deviations.push(d);
                    Parsed402::nothing(deviations)
                }
            }
        }
        RpcMessage::Result(result) => {
            let Some(result) = result.as_object() else {
                deviations.push(Deviation::new(
                    "mcp.result.not_object",
                    "the tools/call result is not an object",
                ));
                return Parsed402::nothing(deviations);
            };
            let structured = match result.get("structuredContent") {
                None | Some(Value::Null) => None,
                Some(v) => match decode_carried(v, "mcp.structured_content") {
                    Ok(decoded) => Some(decoded),
                    Err(d) => {
                        deviations.push(d);
                        None
                    }
                },
            };
            let text = result
                .get("content")
                .and_then(Value::as_array)
                .and_then(|c| c.first())
                .filter(|c| c.get("type").and_then(Value::as_str) == Some("text"))
                .and_then(|c| c.get("text"))
                .and_then(Value::as_str);
            let text = match text {
                None => None,
                Some(text) => match decode_object(text.as_bytes()) {
                    Ok(decoded) => Some(decoded),
                    Err(e) => {
                        // Text that is not JSON is an ordinary tool answer unless no
                        // PaymentRequired is found anywhere (then `mcp.text.missing` says it).
                        if structured.is_some() {
                            deviations.push(carried_error(e, "mcp.text"));
                        }
                        None
                    }
                },
            };
            let structured = structured.filter(|d| looks_like_payment_required(&d.object));
            let text = text.filter(|d| looks_like_payment_required(&d.object));
            let is_error = result.get("isError") == Some(&Value::Bool(true));
            if structured.is_none() && text.is_none() {
                let code = if is_error {
                    "payment_required.missing"
                } else {
                    "mcp.result.unpaid"
                };
                let why = if is_error {
                    "the tool answered an error without a PaymentRequired"
                } else {
                    "the tool answered a result without asking for payment"
                };
                deviations.push(Deviation::new(code, why));
                return Parsed402::nothing(deviations);
            }
            if !is_error {
                deviations.push(Deviation::new(
                    "mcp.is_error.not_true",
                    "a PaymentRequired in a result not marked isError: true (a client takes it for the tool's output)",
                ));
            }
            if structured.is_none() {
                deviations.push(Deviation::new(
                    "mcp.structured_content.missing",
                    "no PaymentRequired in structuredContent (the x402 MCP transport's carrier)",
                ));
            }
            if text.is_none() {
                deviations.push(Deviation::new(
                    "mcp.text.missing",
                    "no PaymentRequired as JSON text in content[0].text (the transport asks for both)",
                ));
            }
            let text_object = text.as_ref().map(|d| Value::Object(d.object.clone()));
            let text_unread = text.as_ref().map_or(0, Decoded::accepts_unread);
            match structured {
                Some(decoded) => {
                    let mut parsed = finish(Source::McpResult, decoded, text_object, deviations);
                    parsed.body_accepts_unread = text_unread;
                    parsed
                }
                None => {
                    let decoded = text.expect("one of the two is present");
                    let mut parsed = finish(Source::McpResult, decoded, None, deviations);
                    // The text is the only carrier: it is the body, not a second copy.
                    parsed.body_object = parsed.header_object.take();
                    parsed.body_accepts_unread = std::mem::take(&mut parsed.header_accepts_unread);
                    parsed
                }
            }
        }
    }
}

/// `data.payment[]`'s x402 entry's `paymentRequired`, else `data` itself when it is one.
fn draft_payment_required(data: &Value) -> Option<&Value> {
    let listed = data
        .get("payment")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p.get("protocol").and_then(Value::as_str) == Some("x402"))
        .and_then(|p| p.get("paymentRequired"));
    listed.or_else(|| {
        data.as_object()
            .filter(|o| looks_like_payment_required(o))
            .map(|_| data)
    })
}

/// A carried object read as a PaymentRequired within the PaymentRequired's own budget (it was
/// already read within the message's: this second pass is linear in it).
fn decode_carried(value: &Value, at: &str) -> Result<Decoded, Deviation> {
    if !value.is_object() {
        return Err(Deviation::new(
            format!("{at}.not_object"),
            format!("a JSON {}, not an object", super::parse::json_type(value)),
        ));
    }
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    decode_object(&bytes).map_err(|e| carried_error(e, at))
}

fn carried_error(e: DecodeError, at: &str) -> Deviation {
    match e {
        DecodeError::TooDeep => {
            Deviation::new(format!("{at}.too_deep"), "nested too deep; not read")
        }
        DecodeError::TooComplex => Deviation::new(
            format!("{at}.too_complex"),
            "too many JSON values; not read",
        ),
        DecodeError::NotObject(kind) => Deviation::new(
            format!("{at}.not_object"),
            format!("a JSON {kind}, not an object"),
        ),
        DecodeError::Syntax(why) => Deviation::new(
            format!("{at}.bad_json"),
            format!("not JSON: {}", printable_prefix(&why, MAX_MESSAGE_CHARS)),
        ),
    }
}

fn finish(
    source: Source,
    decoded: Decoded,
    body_object: Option<Value>,
    mut deviations: Vec<Deviation>,
) -> Parsed402 {
    let header_accepts_unread = decoded.accepts_unread();
    let required = interpret(Carrier::Header, &decoded);
    let header_object = Some(Value::Object(decoded.object));
    deviations.extend(required.deviations.iter().cloned());
    Parsed402 {
        source,
        version: Some(required.x402_version),
        header_object,
        body_object,
        header_accepts_unread,
        body_accepts_unread: 0,
        required: Some(required),
        deviations,
    }
}

/// The id of one of our requests, read back from its body (the checks see each sample's
/// request and response).
pub fn request_id(body: &[u8]) -> Option<u64> {
    serde_json::from_slice::<Value>(body)
        .ok()?
        .get("id")?
        .as_u64()
}

/// A sample's response read as a tool's payment answer to the request sent (`request_body`).
pub fn parse_tool_response(request_body: &[u8], resp: &HttpResponse) -> Parsed402 {
    let answer = match request_id(request_body) {
        Some(id) => read_answer(resp, id),
        None => Err(Deviation::new(
            "mcp.answer.not_jsonrpc",
            "the request sent has no id to match an answer to",
        )),
    };
    parse_tool_payment(&answer)
}

/// The `tools/call` request `body` with the payment in `params._meta["x402/payment"]` (the
/// PaymentPayload as a JSON object, the x402 MCP transport's carrier). `None` when `body` is not
/// one of our JSON-RPC requests.
pub fn with_payment(body: &[u8], payment: &Value) -> Option<Vec<u8>> {
    let mut message: Value = serde_json::from_slice(body).ok()?;
    let params = message
        .as_object_mut()?
        .get_mut("params")?
        .as_object_mut()?;
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    meta.as_object_mut()?
        .insert(META_PAYMENT.into(), payment.clone());
    serde_json::to_vec(&message).ok()
}

/// What a paid `tools/call` was answered, read by the x402 MCP transport's rules.
#[derive(Debug, Clone, PartialEq)]
pub enum PaidAnswer {
    /// A result not marked `isError`: the tool's output, `structuredContent` as JSON when there is
    /// one (`json`), else the text of `content[0]` (empty when neither).
    Delivered { output: Vec<u8>, json: bool },
    /// A result marked `isError: true` (a fresh PaymentRequired when the settlement failed, or a
    /// tool error); `payment_required`: it carries one.
    ToolError {
        text: String,
        payment_required: bool,
    },
    /// A JSON-RPC error (`-32402` is the draft payment form).
    RpcError { code: i64, message: String },
    /// The answer could not be read (status, framing, JSON, bounds).
    Unreadable(Deviation),
}

impl PaidAnswer {
    /// The answer in a few words, for evidence.
    pub fn describe(&self) -> String {
        match self {
            PaidAnswer::Delivered { output, .. } => {
                format!("an MCP tool result ({} bytes of output)", output.len())
            }
            PaidAnswer::ToolError {
                payment_required: true,
                ..
            } => "an MCP tool result with isError: true and a PaymentRequired".into(),
            PaidAnswer::ToolError { text, .. } => format!(
                "an MCP tool result with isError: true ({})",
                printable_prefix(text, 120)
            ),
            PaidAnswer::RpcError { code, message } => format!(
                "MCP JSON-RPC error {code} ({})",
                printable_prefix(message, 120)
            ),
            PaidAnswer::Unreadable(d) => format!("an MCP answer that could not be read ({d})"),
        }
    }
}

/// Where a paid tool's settlement response is found, as evidence names it.
pub const PAYMENT_RESPONSE_CARRIER: &str = "_meta[\"x402/payment-response\"]";

/// A paid `tools/call`'s answer (to `request_body`, our request) and its settlement response
/// (`result._meta["x402/payment-response"]`: `None` when there is none). Bounded as every MCP
/// answer is.
pub fn read_paid_answer(
    request_body: &[u8],
    resp: &HttpResponse,
) -> (
    PaidAnswer,
    Option<Result<crate::x402::types::SettlementResponse, Deviation>>,
) {
    let answer = match request_id(request_body) {
        Some(id) => read_answer(resp, id),
        None => Err(Deviation::new(
            "mcp.answer.not_jsonrpc",
            "the request sent has no id to match an answer to",
        )),
    };
    let message = match answer {
        Ok(answer) => answer.message,
        Err(d) => return (PaidAnswer::Unreadable(d), None),
    };
    let result = match message {
        RpcMessage::Result(result) => result,
        RpcMessage::Error {
            code,
            message,
            data,
        } => {
            let settlement = data
                .as_ref()
                .and_then(|d| d.get(META_PAYMENT_RESPONSE))
                .map(|v| super::parse::parse_settlement_object(PAYMENT_RESPONSE_CARRIER, v));
            return (PaidAnswer::RpcError { code, message }, settlement);
        }
    };
    let settlement = result
        .get("_meta")
        .and_then(|m| m.get(META_PAYMENT_RESPONSE))
        .map(|v| super::parse::parse_settlement_object(PAYMENT_RESPONSE_CARRIER, v));
    let Some(object) = result.as_object() else {
        let d = Deviation::new(
            "mcp.result.not_object",
            "the tools/call result is not an object",
        );
        return (PaidAnswer::Unreadable(d), settlement);
    };
    let text = object
        .get("content")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .and_then(|c| c.get("text"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if object.get("isError") == Some(&Value::Bool(true)) {
        let payment_required = object
            .get("structuredContent")
            .and_then(Value::as_object)
            .is_some_and(looks_like_payment_required)
            || decode_object(text.as_bytes()).is_ok_and(|d| looks_like_payment_required(&d.object));
        let answer = PaidAnswer::ToolError {
            text: printable_prefix(text, MAX_MESSAGE_CHARS),
            payment_required,
        };
        return (answer, settlement);
    }
    let (output, json) = match object.get("structuredContent") {
        Some(v) if !v.is_null() => (serde_json::to_vec(v).unwrap_or_default(), true),
        _ => (text.as_bytes().to_vec(), false),
    };
    (PaidAnswer::Delivered { output, json }, settlement)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(content_type: &str, body: &str) -> HttpResponse {
        HttpResponse::new(
            200,
            vec![("content-type".into(), content_type.into())],
            body.as_bytes().to_vec(),
            false,
            0,
        )
    }

    fn pr() -> Value {
        json!({
            "x402Version": 2,
            "resource": {"url": "mcp+https://tools.example/mcp#get_weather"},
            "accepts": [{"scheme": "exact", "network": "eip155:8453", "amount": "10000",
                "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60,
                "extra": {"name": "USD Coin", "version": "2"}}],
        })
    }

    fn paid_result() -> Value {
        json!({"jsonrpc": "2.0", "id": 7, "result": {"isError": true, "structuredContent": pr(),
            "content": [{"type": "text", "text": pr().to_string()}]}})
    }

    #[test]
    fn an_event_stream_is_read_up_to_our_answer_whatever_its_line_ends() {
        let answer = paid_result().to_string();
        let other = json!({"jsonrpc": "2.0", "method": "notifications/progress"}).to_string();
        for stream in [
            format!("event: message\ndata: {other}\n\n: comment\n\ndata: {answer}\n\n"),
            format!("data: {other}\r\n\r\ndata: {answer}\r\n\r\nnot even finished"),
            format!("data: {other}\r\rdata:{answer}\r\r"),
            // One message split over two data lines (joined with a newline, still JSON).
            "data: {\"jsonrpc\": \"2.0\",\ndata: \"id\": 7, \"result\": {}}\n\n".to_string(),
        ] {
            let read = read_answer(&response("text/event-stream; charset=utf-8", &stream), 7)
                .expect("our answer is found");
            assert_eq!(read.framing, Framing::EventStream);
            assert!(matches!(read.message, RpcMessage::Result(_)));
        }
        // Our answer in an event that never ends is not taken (the format discards it).
        let unfinished = format!("data: {other}\n\ndata: {answer}\n");
        let err = read_answer(&response("text/event-stream", &unfinished), 7).unwrap_err();
        assert_eq!(err.code, "mcp.answer.no_answer");
        // Another id is not ours.
        let err = read_answer(
            &response("text/event-stream", &format!("data: {answer}\n\n")),
            8,
        )
        .unwrap_err();
        assert_eq!(err.code, "mcp.answer.no_answer");
    }

    #[test]
    fn answers_that_cannot_be_read_are_named() {
        let code = |resp: HttpResponse| read_answer(&resp, 7).unwrap_err().code;
        assert_eq!(
            code(response("text/html", "<html/>")),
            "mcp.answer.content_type"
        );
        assert_eq!(
            code(response("application/json", "{")),
            "mcp.answer.bad_json"
        );
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(
            code(response("application/json", &deep)),
            "mcp.answer.too_deep"
        );
        assert_eq!(
            code(response("application/json", r#"{"id": 7, "result": {}}"#)),
            "mcp.answer.not_jsonrpc"
        );
        let mut cut = response("application/json", &paid_result().to_string());
        cut.body_truncated = true;
        assert_eq!(code(cut), "mcp.answer.too_large");
        let mut refused = response("application/json", "{}");
        refused.status = 400;
        assert_eq!(code(refused), "mcp.answer.http_status");
        let events = "data: {}\n\n".repeat(MAX_MCP_SSE_EVENTS + 1);
        assert_eq!(
            code(response("text/event-stream", &events)),
            "mcp.answer.too_many_events"
        );
    }

    #[test]
    fn the_payment_required_of_each_form_and_each_broken_carrier() {
        let parse = |v: Value| {
            parse_tool_response(
                br#"{"id":7}"#,
                &response("application/json", &v.to_string()),
            )
        };
        let honest = parse(paid_result());
        assert_eq!(honest.source, Source::McpResult);
        assert!(honest.required.is_some() && honest.body_object.is_some());
        assert!(
            honest
                .deviations
                .iter()
                .all(|d| !d.code.starts_with("mcp.")),
            "{:?}",
            honest.deviations
        );
        let draft = parse(
            json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32402, "message": "Payment Required",
            "data": {"payment": [{"protocol": "other"}, {"protocol": "x402", "paymentRequired": pr()}]}}}),
        );
        assert_eq!(draft.source, Source::McpError);
        assert!(draft.has_deviation("mcp.draft_payment_error") && draft.required.is_some());
        let text_only = parse(
            json!({"jsonrpc": "2.0", "id": 7, "result": {"isError": true,
            "content": [{"type": "text", "text": pr().to_string()}]}}),
        );
        assert!(text_only.has_deviation("mcp.structured_content.missing"));
        assert!(text_only.header_object.is_none() && text_only.body_object.is_some());
        let unmarked = parse(
            json!({"jsonrpc": "2.0", "id": 7, "result": {"structuredContent": pr(),
            "content": [{"type": "text", "text": pr().to_string()}]}}),
        );
        assert!(unmarked.has_deviation("mcp.is_error.not_true"));
        let unpaid = parse(
            json!({"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "sunny"}]}}),
        );
        assert!(unpaid.required.is_none() && unpaid.has_deviation("mcp.result.unpaid"));
        let other_error = parse(
            json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "bad arguments"}}),
        );
        assert!(other_error.required.is_none() && other_error.has_deviation("mcp.error"));
    }

    #[test]
    fn destructive_tools_are_never_chosen_and_arguments_come_from_examples_or_schemas() {
        let page = read_tool_page(
            &json!({"tools": [
                {"name": "deleteFile", "description": "x402 paid"},
                {"name": "send_email", "annotations": {"readOnlyHint": true}},
                {"name": "wipe", "annotations": {"readOnlyHint": true, "destructiveHint": true}},
                {"name": "free_lookup"},
                {"name": "quote", "_meta": {"x402/price": "0.01"}, "inputSchema": {"type": "object",
                    "required": ["city", "n", "nested", "kind"],
                    "properties": {"city": {"type": "string"}, "n": {"type": "integer", "minimum": 3},
                        "nested": {"type": "object", "required": ["flag"], "properties": {"flag": {"type": "boolean"}}},
                        "kind": {"enum": ["a", "b"]}}}},
                {"name": "example", "description": "$0.01 per call", "_meta": {"examples": [{"q": "x"}]}},
                "not a tool",
            ], "nextCursor": "p2"}),
            MAX_MCP_TOOLS,
        )
        .unwrap();
        assert_eq!(page.sent, 7);
        assert_eq!(page.next_cursor.as_deref(), Some("p2"));
        assert_eq!(page.notes.len(), 1);
        let chosen: Vec<&str> = tools_to_call(&page.tools, 3)
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        // Paid-looking first, then the others; never deleteFile or wipe; send_email is read-only.
        assert_eq!(chosen, ["quote", "example", "send_email"]);
        let quote = page.tools.iter().find(|t| t.name == "quote").unwrap();
        assert_eq!(
            arguments_for(quote),
            json!({"city": "example", "n": 3, "nested": {"flag": false}, "kind": "a"})
        );
        let example = page.tools.iter().find(|t| t.name == "example").unwrap();
        assert_eq!(arguments_for(example), json!({"q": "x"}));
        // A schema deeper than the argument bound ends in `{}`.
        let mut deep = json!({"type": "string"});
        for _ in 0..50 {
            deep = json!({"type": "object", "required": ["x"], "properties": {"x": deep}});
        }
        let tool = Tool {
            name: "deep".into(),
            description: None,
            input_schema: deep,
            paid_sign: None,
            destructive: None,
            example_arguments: None,
        };
        let mut value = arguments_for(&tool);
        let mut levels = 0;
        while let Some(inner) = value.get("x") {
            value = inner.clone();
            levels += 1;
        }
        assert_eq!(levels, MAX_MCP_ARGUMENT_DEPTH);
        assert_eq!(value, json!({}));
    }

    #[test]
    fn requests_carry_the_stateless_meta_only_in_that_form() {
        let body = request_body(
            Some(3),
            Method::ToolsCall,
            json!({"name": "t"}),
            TransportForm::Stateless,
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["id"], 3);
        assert_eq!(
            v["params"]["_meta"][META_PROTOCOL_VERSION],
            STATELESS_PROTOCOL_VERSION
        );
        let body = request_body(None, Method::Initialized, json!({}), TransportForm::Session);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert!(v.get("id").is_none() && v.get("params").is_none());
        assert_eq!(
            request_id(&request_body(
                Some(9),
                Method::ToolsList,
                json!({}),
                TransportForm::Session
            )),
            Some(9)
        );
    }

    #[test]
    fn a_paid_call_carries_the_payment_in_meta_and_its_answer_is_read_by_the_transport() {
        let body = request_body(
            Some(3),
            Method::ToolsCall,
            json!({"name": "get_weather", "arguments": {"city": "Lisbon"}}),
            TransportForm::Stateless,
        );
        let payment = json!({"x402Version": 2, "payload": {"signature": "0x01"}});
        let paid: Value = serde_json::from_slice(&with_payment(&body, &payment).unwrap()).unwrap();
        assert_eq!(paid["params"]["_meta"][META_PAYMENT], payment);
        // The rest of the request is as it was: the stateless form's own _meta keys stay.
        assert_eq!(
            paid["params"]["_meta"][META_PROTOCOL_VERSION],
            STATELESS_PROTOCOL_VERSION
        );
        assert_eq!(paid["params"]["arguments"]["city"], "Lisbon");
        assert_eq!(paid["id"], 3);
        // A notification (no params) cannot carry it.
        assert!(with_payment(br#"{"jsonrpc":"2.0","method":"x"}"#, &payment).is_none());

        let settled = json!({"success": true, "transaction": format!("0x{}", "ab".repeat(32)),
            "network": "eip155:8453"});
        let delivered = json!({"jsonrpc": "2.0", "id": 3, "result": {
            "structuredContent": {"temperature": 21},
            "content": [{"type": "text", "text": "{\"temperature\": 21}"}],
            "_meta": {"x402/payment-response": settled}}});
        let (answer, settlement) =
            read_paid_answer(&body, &response("application/json", &delivered.to_string()));
        assert_eq!(
            answer,
            PaidAnswer::Delivered {
                output: br#"{"temperature":21}"#.to_vec(),
                json: true
            }
        );
        let settlement = settlement.unwrap().unwrap();
        assert!(settlement.success);
        assert_eq!(settlement.header_name, PAYMENT_RESPONSE_CARRIER);
        // A failed settlement: isError with a fresh PaymentRequired, the failure in _meta.
        let failed = json!({"jsonrpc": "2.0", "id": 3, "result": {"isError": true,
            "structuredContent": pr(), "content": [{"type": "text", "text": pr().to_string()}],
            "_meta": {"x402/payment-response": {"success": false, "errorReason": "insufficient_funds"}}}});
        let (answer, settlement) =
            read_paid_answer(&body, &response("application/json", &failed.to_string()));
        assert!(matches!(
            answer,
            PaidAnswer::ToolError {
                payment_required: true,
                ..
            }
        ));
        assert!(!settlement.unwrap().unwrap().success);
        // A settlement response that is not an object is a problem, not a success.
        let odd = json!({"jsonrpc": "2.0", "id": 3, "result": {"content": [],
            "_meta": {"x402/payment-response": "settled"}}});
        let (_, settlement) =
            read_paid_answer(&body, &response("application/json", &odd.to_string()));
        assert_eq!(
            settlement.unwrap().unwrap_err().code,
            "payment_response.not_object"
        );
        // Another id's answer is not ours.
        let (answer, settlement) = read_paid_answer(
            &body,
            &response("application/json", &paid_result().to_string()),
        );
        assert!(matches!(answer, PaidAnswer::Unreadable(_)));
        assert!(settlement.is_none());
    }
}
