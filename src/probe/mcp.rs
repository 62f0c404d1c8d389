//! The MCP client of a free run: an MCP server (Streamable HTTP) probed as an agent would, and
//! each paid tool it has observed as a subject of its own.
//!
//! The newest revision's stateless form first (`tools/list` with the protocol version in
//! `_meta` and the `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` headers); when that does
//! not answer a tool list, the `initialize` handshake, `notifications/initialized`, and
//! `tools/list` again with the `Mcp-Session-Id` the server gave. Then an unpaid `tools/call` of
//! at most `MAX_MCP_TOOLS_CALLED` tools (never one that looks destructive; the paid-looking
//! first), each `samples` times, with arguments from the tool's example or its schema. Every
//! request goes through the HTTP prober (`probe::http`: the address guard, per-phase timeouts,
//! the 1 MiB body cap) and every answer is read within `crate::budget`'s MCP bounds, so a
//! hostile server ends in findings, never in a hang. IO only: what the answers mean is decided by
//! `x402::mcp` and the checks.

use serde_json::{Value, json};
use tokio::time::{Instant, sleep_until, timeout_at};

use super::free::{
    FreeProbeConfig, chain_not_read, origin_of, read_chain, read_solana, solana_not_read,
};
use super::http::{Exchange, FetchRequest, fetch};
use crate::budget::{MAX_MCP_LIST_PAGES, MAX_MCP_TOOLS, MAX_MCP_TOOLS_CALLED};
use crate::evidence::free::{ChainSeen, CutShort, FreeObservation, ListingSeen};
use crate::evidence::http::Sample;
use crate::evidence::mcp::{McpToolSeen, TransportForm};
use crate::http_url::McpSubject;
use crate::x402::mcp::{
    self, ACCEPT, Answer, HANDSHAKE_PROTOCOL_VERSION, Method, RpcMessage, SESSION_HEADER,
    STATELESS_PROTOCOL_VERSION, Tool,
};
use crate::x402::operator::OPERATOR_FILE_PATH;
use crate::x402::parse::ResponseParse;
use crate::x402::types::Deviation;

/// Everything one probe of an MCP server saw.
#[derive(Debug, Clone)]
pub struct McpRun {
    /// The server as given (`mcp+https://host/path`, with `#tool` when one was named).
    pub subject: McpSubject,
    /// The form the server answered `tools/list` in; `None` when neither did.
    pub form: Option<TransportForm>,
    /// Tools listed (read within the budget) and how many the server sent.
    pub tools: Vec<Tool>,
    pub tools_sent: usize,
    /// One observation per tool that asked for payment (or that was named), scored as a subject.
    pub paid: Vec<FreeObservation>,
    /// Tools called that answered without asking for payment, with what they answered.
    pub free_tools: Vec<(String, String)>,
    /// Tools not called, and why (destructive-looking, past the budget).
    pub not_called: Vec<(String, String)>,
    /// Why no tool could be called at all (the server listed none, or answered neither form).
    pub failure: Option<String>,
    /// What the client noticed on the way.
    pub notes: Vec<String>,
    /// Whether any request got a response head (else the server could not be probed at all).
    pub answered: bool,
    /// The conversation's setup requests as sent and answered (initialize, tool list pages).
    pub setup: Vec<Sample>,
}

/// One conversation with the server: the form, the session, the ids.
struct Conversation<'a> {
    cfg: &'a FreeProbeConfig,
    server: &'a str,
    form: TransportForm,
    session: Option<String>,
    /// The version the handshake agreed (sent as `MCP-Protocol-Version` after it).
    version: String,
    next_id: u64,
    deadline: Instant,
    /// The log of every request and answer of the setup (initialize, list pages).
    setup: Vec<Sample>,
    notes: Vec<String>,
    /// The session id changed under us at least once (said once).
    session_changed: bool,
    /// Any response head arrived.
    answered: bool,
    /// The status of the last response head.
    last_status: Option<u16>,
}

impl Conversation<'_> {
    /// Send one request (`id` when it is not a notification) and read its answer. `None` when the
    /// run's deadline passed before it was sent or answered.
    async fn send(
        &mut self,
        method: Method,
        params: Value,
        name: Option<&str>,
    ) -> Option<(FetchRequest, Exchange, Option<u64>)> {
        let id = (method != Method::Initialized).then(|| {
            self.next_id += 1;
            self.next_id
        });
        let mut request = FetchRequest {
            method: "POST".into(),
            url: self.server.to_string(),
            headers: vec![
                ("Content-Type".into(), "application/json".into()),
                ("Accept".into(), ACCEPT.into()),
            ],
            body: mcp::request_body(id, method, params, self.form),
        };
        match self.form {
            TransportForm::Stateless => {
                request = request
                    .with_header("MCP-Protocol-Version", STATELESS_PROTOCOL_VERSION)
                    .with_header("Mcp-Method", method.as_str());
                if let Some(name) = name {
                    request = request.with_header("Mcp-Name", name);
                }
            }
            TransportForm::Session => {
                if method != Method::Initialize {
                    request = request.with_header("MCP-Protocol-Version", self.version.clone());
                }
                if let Some(session) = &self.session {
                    request = request.with_header("Mcp-Session-Id", session.clone());
                }
            }
        }
        if Instant::now() >= self.deadline {
            return None;
        }
        let exchange = timeout_at(self.deadline, fetch(&self.cfg.fetch, &request))
            .await
            .ok()?;
        self.watch_session(&exchange);
        self.answered |= exchange.response.is_some();
        self.last_status = exchange.status();
        Some((request, exchange, id))
    }

    /// Keep the first session id the server gave; say once when it hands out another.
    fn watch_session(&mut self, exchange: &Exchange) {
        let Some(given) = exchange
            .response
            .as_ref()
            .and_then(|r| r.header(SESSION_HEADER))
        else {
            return;
        };
        match &self.session {
            None if self.form == TransportForm::Session => self.session = Some(given.to_string()),
            Some(ours) if ours != given && !self.session_changed => {
                self.session_changed = true;
                self.notes.push(
                    "the server gave another Mcp-Session-Id after the handshake; the first one was kept"
                        .into(),
                );
            }
            _ => {}
        }
    }

    /// A setup request whose answer is kept in the setup log.
    async fn setup_call(&mut self, method: Method, params: Value) -> Result<Answer, Deviation> {
        let Some((request, exchange, id)) = self.send(method, params, None).await else {
            return Err(deadline_passed(self.cfg));
        };
        let answer = answer_of(&exchange, id);
        self.setup.push(Sample { request, exchange });
        answer
    }

    /// `tools/list`, following `nextCursor` within the budget.
    async fn list_tools(&mut self) -> Result<(Vec<Tool>, usize, Vec<String>), Deviation> {
        let mut tools: Vec<Tool> = Vec::new();
        let mut sent = 0usize;
        let mut notes = Vec::new();
        let mut cursor: Option<String> = None;
        for page_number in 0..MAX_MCP_LIST_PAGES {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let answer = self.setup_call(Method::ToolsList, params).await;
            let result = match answer.map(|a| a.message) {
                Ok(RpcMessage::Result(result)) => result,
                Ok(RpcMessage::Error { code, message, .. }) => {
                    return Err(Deviation::new(
                        "mcp.error",
                        format!(
                            "tools/list: JSON-RPC error {code}: {}",
                            crate::x402::types::printable_prefix(&message, 200)
                        ),
                    ));
                }
                Err(d) if page_number == 0 => return Err(d),
                Err(d) => {
                    notes.push(format!(
                        "tools/list page {}: {}",
                        page_number + 1,
                        d.message
                    ));
                    break;
                }
            };
            let page = mcp::read_tool_page(&result, MAX_MCP_TOOLS - tools.len())?;
            sent += page.sent;
            notes.extend(
                page.notes
                    .iter()
                    .map(|d| format!("{}: {}", d.code, d.message)),
            );
            tools.extend(page.tools);
            cursor = page.next_cursor;
            if cursor.is_none() || tools.len() >= MAX_MCP_TOOLS {
                break;
            }
            if page_number + 1 == MAX_MCP_LIST_PAGES {
                notes.push(format!(
                    "tools/list has more than {MAX_MCP_LIST_PAGES} pages; the rest were not read"
                ));
            }
        }
        Ok((tools, sent, notes))
    }
}

/// Whether a failed `tools/list` was the server refusing the form it was asked in: a JSON-RPC
/// error, or a 4xx status (`last_status`, the status of the last answer).
fn refused(failure: &Deviation, last_status: Option<u16>) -> bool {
    failure.code == "mcp.error" || last_status.is_some_and(|s| (400..=499).contains(&s))
}

fn deadline_passed(cfg: &FreeProbeConfig) -> Deviation {
    Deviation::new(
        "mcp.deadline",
        format!(
            "not answered: the run's deadline of {} ms passed first",
            cfg.deadline.as_millis()
        ),
    )
}

fn answer_of(exchange: &Exchange, id: Option<u64>) -> Result<Answer, Deviation> {
    let Some(resp) = exchange.response.as_ref() else {
        let why = exchange
            .error
            .as_ref()
            .map_or("no response".to_string(), |e| {
                format!("{:?} during {:?}: {}", e.kind, e.phase, e.message)
            });
        return Err(Deviation::new("mcp.answer.none", why));
    };
    match id {
        Some(id) => mcp::read_answer(resp, id),
        None => Err(Deviation::new(
            "mcp.answer.none",
            "a notification has no answer",
        )),
    }
}

/// Probe the MCP server `subject` names; `now` is the run's start (unix seconds).
pub async fn probe_mcp(cfg: &FreeProbeConfig, subject: &McpSubject, now: i64) -> McpRun {
    let deadline = Instant::now() + cfg.deadline;
    let mut run = McpRun {
        subject: subject.clone(),
        form: None,
        tools: Vec::new(),
        tools_sent: 0,
        paid: Vec::new(),
        free_tools: Vec::new(),
        not_called: Vec::new(),
        failure: None,
        notes: Vec::new(),
        answered: false,
        setup: Vec::new(),
    };
    let mut talk = Conversation {
        cfg,
        server: &subject.server,
        form: TransportForm::Stateless,
        session: None,
        version: STATELESS_PROTOCOL_VERSION.into(),
        next_id: 0,
        deadline,
        setup: Vec::new(),
        notes: Vec::new(),
        session_changed: false,
        answered: false,
        last_status: None,
    };
    let listed = match talk.list_tools().await {
        Ok(listed) => Ok(listed),
        // Only a refusal of the stateless form (a 4xx, a JSON-RPC error) sends the client to
        // the handshake; an answer that cannot be read is the server's finding as it is.
        Err(stateless) if !refused(&stateless, talk.last_status) => Err(stateless),
        Err(stateless) => {
            talk.form = TransportForm::Session;
            match handshake(&mut talk).await {
                Ok(()) => talk.list_tools().await,
                Err(handshake) => Err(Deviation::new(
                    handshake.code.clone(),
                    format!(
                        "the stateless form: {}; the initialize handshake: {}",
                        stateless.message, handshake.message
                    ),
                )),
            }
        }
    };
    let (tools, sent, notes) = match listed {
        Ok(listed) => listed,
        Err(why) => {
            run.failure = Some(format!("no tool list: {} ({})", why.message, why.code));
            run.notes = talk.notes;
            run.answered = talk.answered;
            run.setup = talk.setup;
            return run;
        }
    };
    run.form = Some(talk.form);
    run.tools_sent = sent;
    run.notes.extend(notes);
    let chosen: Vec<Tool> = match &subject.tool {
        Some(name) => match tools.iter().find(|t| &t.name == name) {
            Some(tool) if tool.destructive.is_some() => {
                run.not_called
                    .push((name.clone(), tool.destructive.clone().unwrap_or_default()));
                Vec::new()
            }
            Some(tool) => vec![tool.clone()],
            None => {
                run.failure = Some(format!("tools/list does not list the tool {name:?}"));
                Vec::new()
            }
        },
        None => {
            let called = mcp::tools_to_call(&tools, MAX_MCP_TOOLS_CALLED);
            for tool in &tools {
                if let Some(why) = &tool.destructive {
                    run.not_called.push((tool.name.clone(), why.clone()));
                } else if !called.iter().any(|c| c.name == tool.name) {
                    run.not_called.push((
                        tool.name.clone(),
                        format!("past the first {MAX_MCP_TOOLS_CALLED} tools called"),
                    ));
                }
            }
            called.into_iter().cloned().collect()
        }
    };
    run.tools = tools;
    // The operator file of the server's origin, read once for every tool.
    let operator_file = match origin_of(&subject.server) {
        Some(origin) if Instant::now() < deadline => {
            let request = FetchRequest::get(format!("{origin}{OPERATOR_FILE_PATH}"));
            timeout_at(deadline, fetch(&cfg.fetch, &request)).await.ok()
        }
        _ => None,
    };
    for tool in chosen {
        let observation = call_tool(&mut talk, &tool, operator_file.clone(), now).await;
        let parsed = observation.samples.iter().find_map(|s| {
            Some(mcp::parse_tool_response(
                &s.request.body,
                s.exchange.response.as_ref()?,
            ))
        });
        let asked = parsed.as_ref().is_some_and(|p| p.required.is_some());
        if asked || subject.tool.is_some() {
            run.paid.push(observation);
        } else {
            let why = parsed
                .and_then(|p| p.deviations.first().map(|d| d.message.clone()))
                .unwrap_or_else(|| "no answer".into());
            run.free_tools.push((tool.name.clone(), why));
        }
    }
    run.notes.extend(talk.notes.iter().cloned());
    run.answered = talk.answered;
    run.setup = talk.setup;
    for obs in &mut run.paid {
        if let Some(seen) = obs.mcp.as_mut() {
            seen.notes.extend(talk.notes.iter().cloned());
        }
    }
    run
}

/// One free run of a subject, whichever it is: an MCP tool's key (`mcp+...#tool`) through
/// [`probe_mcp`], every other URL through `probe::free`. An MCP tool the run could not call (no
/// tool list, the tool not listed or destructive-looking) is observed with the conversation's
/// requests as its samples, so its free checks say what the server answered. With the prober's
/// parse of an HTTP subject's first answer, for its checks (none for an MCP tool: its checks read
/// its answers as MCP).
pub async fn probe_subject(
    cfg: &FreeProbeConfig,
    url: &str,
    now: i64,
    peer_fetches: super::free::PeerFetches,
) -> (FreeObservation, Option<ResponseParse>) {
    let subject = match McpSubject::parse(url) {
        Some(Ok(subject)) if subject.tool.is_some() => subject,
        _ => return super::free::probe_free_parsed(cfg, url, now, peer_fetches).await,
    };
    (probe_tool(cfg, subject, now).await, None)
}

/// An MCP tool's free run: its paid tool's unpaid answer, or the conversation's requests.
async fn probe_tool(cfg: &FreeProbeConfig, subject: McpSubject, now: i64) -> FreeObservation {
    let mut run = probe_mcp(cfg, &subject, now).await;
    if !run.paid.is_empty() {
        return run.paid.swap_remove(0);
    }
    let why = run
        .failure
        .clone()
        .or_else(|| {
            run.not_called
                .first()
                .map(|(tool, why)| format!("{tool} not called: {why}"))
        })
        .unwrap_or_else(|| "the tool was not called".into());
    let mut notes = run.notes;
    notes.push(why);
    FreeObservation {
        subject: subject.key(),
        vantage: cfg.vantage.clone(),
        at: now,
        samples: run.setup,
        operator_file: None,
        listing: ListingSeen::NotAsked,
        chain: ChainSeen::NoRpc,
        solana: crate::evidence::free::SolanaSeen::NoRpc,
        declared_assets: cfg.declared_assets.clone(),
        allow_private: cfg.fetch.allow_private,
        cut_short: None,
        listing_sha256: None,
        mcp: Some(McpToolSeen {
            server: subject.server.clone(),
            tool: subject.tool.clone().unwrap_or_default(),
            form: run.form.unwrap_or(TransportForm::Stateless),
            arguments: Value::Null,
            setup: Vec::new(),
            notes,
        }),
        peers: None,
    }
}

/// `initialize`, then `notifications/initialized` (its 202 is not read as an answer).
async fn handshake(talk: &mut Conversation<'_>) -> Result<(), Deviation> {
    let params = mcp::initialize_params();
    let answer = talk.setup_call(Method::Initialize, params).await?;
    match answer.message {
        RpcMessage::Result(result) => {
            talk.version = result
                .get("protocolVersion")
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty() && v.len() <= 32 && v.is_ascii())
                .unwrap_or(HANDSHAKE_PROTOCOL_VERSION)
                .to_string();
        }
        RpcMessage::Error { code, message, .. } => {
            return Err(Deviation::new(
                "mcp.error",
                format!(
                    "initialize: JSON-RPC error {code}: {}",
                    crate::x402::types::printable_prefix(&message, 200)
                ),
            ));
        }
    }
    if let Some((request, exchange, _)) = talk.send(Method::Initialized, json!({}), None).await {
        talk.setup.push(Sample { request, exchange });
    }
    Ok(())
}

/// The unpaid calls of one tool, and the rest of its free run (operator file, chain reads).
async fn call_tool(
    talk: &mut Conversation<'_>,
    tool: &Tool,
    operator_file: Option<Exchange>,
    now: i64,
) -> FreeObservation {
    let cfg = talk.cfg;
    let arguments = mcp::arguments_for(tool);
    let params = json!({"name": tool.name, "arguments": arguments});
    let planned = cfg.samples.max(1);
    let mut samples = Vec::with_capacity(planned);
    for n in 0..planned {
        if n > 0 {
            let wake = Instant::now() + cfg.spacing;
            if wake >= talk.deadline {
                break;
            }
            sleep_until(wake).await;
        }
        match talk
            .send(Method::ToolsCall, params.clone(), Some(&tool.name))
            .await
        {
            Some((request, exchange, _)) => samples.push(Sample { request, exchange }),
            None => break,
        }
    }
    let quote = samples.iter().find_map(|s| {
        mcp::parse_tool_response(&s.request.body, s.exchange.response.as_ref()?).required
    });
    let chain = match &cfg.rpc {
        None => ChainSeen::NoRpc,
        Some(rpc) => match timeout_at(talk.deadline, read_chain(rpc, quote.as_ref())).await {
            Ok(chain) => chain,
            Err(_) => chain_not_read(cfg),
        },
    };
    // A tool that quotes a Solana entry is read on its cluster, as a 402 is.
    let solana = match &cfg.solana_rpc {
        None => crate::evidence::free::SolanaSeen::NoRpc,
        Some(rpc) => match timeout_at(talk.deadline, read_solana(rpc, quote.as_ref())).await {
            Ok(solana) => solana,
            Err(_) => solana_not_read(cfg),
        },
    };
    let operator_file_not_read = operator_file.is_none() && origin_of(talk.server).is_some();
    let cut_short = (samples.len() < planned || operator_file_not_read).then(|| CutShort {
        deadline_ms: u64::try_from(cfg.deadline.as_millis()).unwrap_or(u64::MAX),
        samples_planned: planned,
        operator_file_not_read,
    });
    FreeObservation {
        subject: McpSubject {
            server: talk.server.to_string(),
            tool: Some(tool.name.clone()),
        }
        .key(),
        vantage: cfg.vantage.clone(),
        at: now,
        samples,
        operator_file,
        listing: ListingSeen::NotAsked,
        chain,
        solana,
        declared_assets: cfg.declared_assets.clone(),
        allow_private: cfg.fetch.allow_private,
        cut_short,
        listing_sha256: None,
        mcp: Some(McpToolSeen {
            server: talk.server.to_string(),
            tool: tool.name.clone(),
            form: talk.form,
            arguments,
            setup: talk.setup.clone(),
            notes: Vec::new(),
        }),
        peers: None,
    }
}
