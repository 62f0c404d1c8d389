//! An MCP server's answer as the MCP client reads it (`x402::mcp`): the HTTP response (JSON or
//! an event stream, bounded by `crate::budget`'s MCP bounds) read as the answer to request 1,
//! then read as a `tools/list` page (which tools a probe calls, with what arguments) and as an
//! unpaid `tools/call` answer (the PaymentRequired of the transport or of the draft -32402
//! form), and the conformance checks the free run applies to it; then as a paid `tools/call`'s
//! answer (delivered or not, its output, its `_meta["x402/payment-response"]`).
//!
//! The body and header values go through `expand` (see `src/lib.rs`), so a short input can stand
//! for a megabyte of tools or events. The fuzzer's first body byte is as sent: seeds have
//! `Content-Type` set, and a cut at the read cap is `x-truncated: 1`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use x402_probe::budget::{MAX_MCP_ARGUMENT_DEPTH, MAX_MCP_JSON_DEPTH, MAX_MCP_TOOLS, MAX_MCP_TOOLS_CALLED};
use x402_probe::checks::conformance::{c1, c2, c4, c5};
use x402_probe::evidence::http::HttpResponse;
use x402_probe::x402::Source;
use x402_probe::x402::mcp::{
    PaidAnswer, RpcMessage, arguments_for, parse_tool_payment, read_answer, read_paid_answer,
    read_tool_page, tools_to_call,
};
use x402_probe_fuzz::{assert_conclusion, assert_deviation, response_expanded};

/// Largest receipt of one check, whatever the answer.
const MAX_RECEIPT_BYTES: usize = 256 * 1024;

fn depth(value: &Value) -> usize {
    // Iterative: a value is at most MAX_MCP_JSON_DEPTH deep, but walk without recursion anyway.
    let mut deepest = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}

fuzz_target!(|data: &[u8]| {
    let r = response_expanded(data);
    let truncated = r.header("x-truncated").is_some();
    let resp = HttpResponse::new(r.status, r.headers.clone(), r.body.clone(), truncated, 0);
    let answer = read_answer(&resp, 1);
    match &answer {
        Ok(a) => {
            if let RpcMessage::Result(result) = &a.message {
                assert!(depth(result) < MAX_MCP_JSON_DEPTH, "a result deeper than the budget");
                if let Ok(page) = read_tool_page(result, MAX_MCP_TOOLS) {
                    assert!(page.tools.len() <= MAX_MCP_TOOLS);
                    assert!(page.tools.len() <= page.sent);
                    let called = tools_to_call(&page.tools, MAX_MCP_TOOLS_CALLED);
                    assert!(called.len() <= MAX_MCP_TOOLS_CALLED);
                    for tool in called {
                        assert!(tool.destructive.is_none(), "a destructive tool would be called");
                        let arguments = arguments_for(tool);
                        assert!(arguments.is_object(), "arguments are an object");
                        // Made from the schema: bounded by the argument depth; the tool's own
                        // example: by the message's.
                        if tool.example_arguments.is_none() {
                            assert!(depth(&arguments) <= MAX_MCP_ARGUMENT_DEPTH + 2);
                        }
                    }
                }
            }
        }
        Err(d) => assert_deviation(d),
    }
    let parsed = parse_tool_payment(&answer);
    match parsed.source {
        Source::None => assert!(parsed.required.is_none()),
        Source::McpResult | Source::McpError => {
            assert!(parsed.required.is_some());
            assert!(parsed.header_object.is_some() || parsed.body_object.is_some());
        }
        other => panic!("an MCP answer read as {other:?}"),
    }
    for d in &parsed.deviations {
        assert_deviation(d);
    }
    let c1 = c1(&parsed, true);
    assert_conclusion("C1", &c1, MAX_RECEIPT_BYTES);
    if parsed.required.is_none() {
        assert_eq!(c1.outcome, x402_probe::evidence::Outcome::Fail);
    }
    if let Some(required) = &parsed.required {
        assert_conclusion("C2", &c2(required), MAX_RECEIPT_BYTES);
        assert_conclusion("C4", &c4(&parsed), MAX_RECEIPT_BYTES);
        assert_conclusion("C5", &c5(required), MAX_RECEIPT_BYTES);
    }
    // The same answer read as a paid call's: an unreadable answer is a deviation and carries no
    // settlement response; a readable one is read whatever it holds.
    let request = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#;
    let (paid, settlement) = read_paid_answer(request, &resp);
    if let PaidAnswer::Unreadable(d) = &paid {
        assert_deviation(d);
        if answer.is_err() {
            assert!(settlement.is_none());
        }
    } else {
        assert!(answer.is_ok(), "a paid answer read where the answer was not");
    }
    if let Some(Err(d)) = &settlement {
        assert_deviation(d);
    }
    assert!(paid.describe().len() <= 4096);
});
