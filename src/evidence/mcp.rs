//! What a probe of one paid MCP tool saw besides its unpaid calls: the server's endpoint, the
//! tool, the form of Streamable HTTP the server answered in, the arguments sent, and the requests
//! that opened the conversation and listed the tools. Plain data, produced by `probe::mcp`, kept
//! in the tool's `FreeObservation` (its samples are the unpaid `tools/call` requests).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::http::Sample;

/// Which form of Streamable HTTP a server answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportForm {
    /// The newest revision: no session, the protocol version on every request.
    Stateless,
    /// `initialize`, then `Mcp-Session-Id` on every request.
    Session,
}

/// One paid tool of an MCP server, as its free run saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpToolSeen {
    /// The server's endpoint: the `http(s)` URL every JSON-RPC request was posted to.
    pub server: String,
    /// The tool's name.
    pub tool: String,
    pub form: TransportForm,
    /// The arguments of every unpaid call (the tool's example, or made from its schema).
    pub arguments: Value,
    /// `initialize`, `notifications/initialized` and `tools/list` as sent and answered, in order.
    pub setup: Vec<Sample>,
    /// What the client noticed on the way (a session id that changed, tools past the budget).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}
