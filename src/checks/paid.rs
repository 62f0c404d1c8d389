//! The paid checks (R4, R5, R6, R7, C6, H5, H6, H7, H8, H9, S3): pure functions of one
//! [`PaidObservation`]. No clock, no IO: the evaluation time is passed in.
//!
//! Money facts come from the chain, never from the endpoint's word: the `Transfer` and
//! `AuthorizationUsed` logs of the settlement, found by our nonce when the settlement response
//! lies or is missing. A chain read that failed makes every check that needs it `unmeasured`,
//! never `fail`. Definitions: `probes/<ID>.md`.

use std::collections::BTreeMap;

use alloy::primitives::{B256, U256};
use serde_json::{Value, json};

use crate::checks::screen::{SourcedText, screen_output};
use crate::evidence::chain::ChainRead;
use crate::evidence::decode::decode_body_bounded;
use crate::evidence::http::HttpResponse;
use crate::evidence::paid::{
    Decision, OperatorFileSeen, PaidObservation, PaymentCarrier, QuoteSeen, RefundPlan,
};
use crate::evidence::svm::SvmPaidSeen;
use crate::evidence::{CheckId, CheckResult, Conclusion, Outcome, Receipt, rfc3339, sha256_hex};
use crate::paid::chain::{ChainFacts, Charge, TransferLog, chain_facts, decode_transfer, sum_in};
use crate::paid::refund::refunds;
use crate::paid::svm_chain;
use crate::rubric::Rubric;
use crate::score::curve::interpolate;
use crate::x402::mcp::PaidAnswer;
use crate::x402::network::chain_id_of;
use crate::x402::solana::SolanaNetwork;

/// The paid checks, in the order [`evaluate`] returns them.
pub const PAID_CHECKS: [CheckId; 11] = [
    CheckId::R4,
    CheckId::R5,
    CheckId::R6,
    CheckId::R7,
    CheckId::C6,
    CheckId::H5,
    CheckId::H6,
    CheckId::H7,
    CheckId::H8,
    CheckId::H9,
    CheckId::S3,
];

use crate::checks::free::CURVE_PASS_POINTS;

/// Largest decoded output examined (R5, S3), bytes.
pub const MAX_OUTPUT_BYTES: usize = 4 * 1024 * 1024;

/// The refund rule this tool checks (H9).
pub const REFUND_ON_CHARGED_WITHOUT_DELIVERY: &str = "charged_without_delivery";

/// Evaluates every paid check under the embedded rubric (for R7's curve).
pub fn evaluate(obs: &PaidObservation, as_of_unix: i64, vantage: &str) -> Vec<CheckResult> {
    evaluate_with_rubric(obs, &Rubric::embedded_default(), as_of_unix, vantage)
}

/// Evaluates every paid check; `rubric` supplies R7's curve.
pub fn evaluate_with_rubric(
    obs: &PaidObservation,
    rubric: &Rubric,
    as_of_unix: i64,
    vantage: &str,
) -> Vec<CheckResult> {
    let facts = chain_facts(obs);
    let money = match &obs.svm {
        Some(svm) => [
            c6_svm(obs, svm),
            not_paid(obs).unwrap_or_else(|| svm_chain::h5(&svm.chain)),
            not_paid(obs).unwrap_or_else(|| svm_chain::h6(&svm.chain)),
            not_paid(obs).unwrap_or_else(|| svm_chain::h7(&svm.chain)),
            h8_with(obs, || svm_charged(svm)),
            h9_svm(obs, svm),
        ],
        None => {
            // Batch or credit-backed settlement: a commitment id instead of a transaction. The
            // money checks wait for value that moves later, unless it already moved.
            let deferred = deferred_settlement(obs)
                .filter(|_| !matches!(&facts.pulls, Ok(pulls) if !pulls.is_empty()));
            let wait = |c: Conclusion| match &deferred {
                Some(why) if c.outcome != Outcome::Unmeasured => {
                    Conclusion::unmeasured(why.clone())
                }
                _ => c,
            };
            let delivered = matches!(delivery(obs), Delivery::Delivered(_));
            [
                signed_receipt(obs, c6(obs, &facts)),
                wait(h5(obs, &facts)),
                wait(h6(obs, &facts)),
                wait(h7(obs, &facts)),
                if delivered {
                    h8(obs, &facts)
                } else {
                    wait(h8(obs, &facts))
                },
                h9(obs, &facts),
            ]
        }
    };
    let [c6_, h5_, h6_, h7_, h8_, h9_] = money;
    let conclusions = [
        (CheckId::R4, r4(obs)),
        (CheckId::R5, r5(obs)),
        (CheckId::R6, r6(obs)),
        (CheckId::R7, r7(obs, rubric)),
        (CheckId::C6, c6_),
        (CheckId::H5, h5_),
        (CheckId::H6, h6_),
        (CheckId::H7, h7_),
        (CheckId::H8, h8_),
        (CheckId::H9, h9_),
        (CheckId::S3, s3(obs)),
    ];
    conclusions
        .into_iter()
        .map(|(id, conclusion)| CheckResult {
            id,
            outcome: conclusion.outcome,
            evidence: conclusion.evidence,
            value: conclusion.value,
            receipt: receipt(obs, &facts, vantage, as_of_unix, conclusion.detail),
        })
        .collect()
}

/// Whether the paid call delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// 2xx with a valid output.
    Delivered(String),
    /// No response, a non-2xx, or an empty or invalid output.
    NotDelivered(String),
    /// Could not tell (e.g. an output larger than we read).
    Unknown(String),
}

/// What a paid request (or its replay) was answered, by the carrier's rules: over HTTP a 2xx
/// status delivers; over MCP a JSON-RPC result not marked `isError` (its status is 200 either way).
struct Answered {
    delivered: bool,
    /// The answer in a few words ("HTTP 500", "an MCP tool result with isError: true ...").
    what: String,
    /// Over MCP: the tool's output, and whether it is JSON (`structuredContent`).
    mcp_output: Option<(Vec<u8>, bool)>,
}

fn answered(obs: &PaidObservation, request_body: &[u8], response: &HttpResponse) -> Answered {
    match obs.carrier {
        PaymentCarrier::Http => Answered {
            delivered: (200..300).contains(&response.status),
            what: format!("HTTP {}", response.status),
            mcp_output: None,
        },
        PaymentCarrier::McpTool => {
            let (answer, _) = crate::x402::mcp::read_paid_answer(request_body, response);
            let what = answer.describe();
            match answer {
                PaidAnswer::Delivered { output, json } => Answered {
                    delivered: true,
                    what,
                    mcp_output: Some((output, json)),
                },
                _ => Answered {
                    delivered: false,
                    what,
                    mcp_output: None,
                },
            }
        }
    }
}

/// The paid request's answer (`None` when it got no response).
fn paid_answer(obs: &PaidObservation) -> Option<(Answered, &HttpResponse)> {
    let response = obs.paid.as_ref()?.response.as_ref()?;
    Some((answered(obs, &obs.request.body, response), response))
}

/// Whether the paid call delivered. Pure.
pub fn delivery(obs: &PaidObservation) -> Delivery {
    let Some(exchange) = obs.paid.as_ref() else {
        return Delivery::Unknown("the paid request was not sent".into());
    };
    let Some(response) = exchange.response.as_ref() else {
        let why = exchange
            .error
            .as_ref()
            .map(|e| e.to_string())
            .unwrap_or_else(|| "no response".into());
        return Delivery::NotDelivered(format!("no response: {why}"));
    };
    let answer = answered(obs, &obs.request.body, response);
    if !answer.delivered {
        return Delivery::NotDelivered(answer.what);
    }
    match output_verdict(obs) {
        OutputVerdict::Valid { evidence, .. } => Delivery::Delivered(evidence),
        OutputVerdict::Invalid { evidence, .. } => Delivery::NotDelivered(evidence),
        OutputVerdict::Unmeasured(why) => Delivery::Unknown(why),
    }
}

// ---------------------------------------------------------------------------------------------
// Output (R5, S3)

/// R5's verdict on the paid output.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputVerdict {
    Valid { evidence: String, detail: Value },
    Invalid { evidence: String, detail: Value },
    Unmeasured(String),
}

/// What the quote declares about the output.
#[derive(Debug, Clone, PartialEq, Default)]
struct DeclaredOutput {
    /// A JSON Schema (v2 bazaar `info.output.schema`, or a v1 `outputSchema.output` that is one).
    schema: Option<Value>,
    /// An example (v2 bazaar `info.output.example`, or a v1 `outputSchema.output` that is not a
    /// schema).
    example: Option<Value>,
    /// JSON is promised (output type `json`, or a JSON mime type).
    json: bool,
    /// A declared size bound (`maxBytes`; this tool's convention, see `probes/R5.md`).
    max_bytes: Option<u64>,
    /// Where it was declared.
    source: &'static str,
}

fn declared_output(quote: &QuoteSeen) -> DeclaredOutput {
    let mut declared = DeclaredOutput::default();
    let mime_json = quote
        .resource
        .as_ref()
        .and_then(|r| r.get("mimeType"))
        .or_else(|| quote.entry.get("mimeType"))
        .and_then(Value::as_str)
        .is_some_and(|m| m.to_ascii_lowercase().contains("json"));
    if let Some(output) = quote
        .extensions
        .as_ref()
        .and_then(|e| e.pointer("/bazaar/info/output"))
        .filter(|o| o.is_object())
    {
        declared.source = "extensions.bazaar.info.output";
        declared.schema = output.get("schema").filter(|s| s.is_object()).cloned();
        declared.example = output.get("example").filter(|e| !e.is_null()).cloned();
        declared.json = output
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.eq_ignore_ascii_case("json"));
        declared.max_bytes = output.get("maxBytes").and_then(Value::as_u64);
    } else if let Some(output_schema) = quote.entry.get("outputSchema").filter(|o| o.is_object()) {
        declared.source = "outputSchema";
        match output_schema.get("output") {
            Some(output) if looks_like_schema(output) => declared.schema = Some(output.clone()),
            Some(output) if !output.is_null() => declared.example = Some(output.clone()),
            _ => {}
        }
        declared.max_bytes = output_schema.get("maxBytes").and_then(Value::as_u64);
    }
    declared.json |= mime_json || declared.schema.is_some() || declared.example.is_some();
    declared
}

/// A JSON Schema rather than an example: an object with schema keywords whose `type`, when
/// present, names JSON Schema types (an example like `{"type": "cloudy"}` does not).
fn looks_like_schema(value: &Value) -> bool {
    const TYPES: [&str; 7] = [
        "object", "array", "string", "number", "integer", "boolean", "null",
    ];
    let Some(object) = value.as_object() else {
        return false;
    };
    let type_ok = match object.get("type") {
        None => true,
        Some(Value::String(t)) => TYPES.contains(&t.as_str()),
        Some(Value::Array(ts)) => ts
            .iter()
            .all(|t| t.as_str().is_some_and(|t| TYPES.contains(&t))),
        Some(_) => false,
    };
    let keywords = [
        "$schema",
        "type",
        "properties",
        "items",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "enum",
        "const",
    ];
    type_ok && keywords.iter().any(|k| object.contains_key(*k))
}

use crate::x402::parse::json_type;

/// How `actual` departs from the example's shape: the same JSON type at the top level and, for
/// objects, the same keys with the same JSON types (a `null` in the example allows anything).
fn shape_mismatch(example: &Value, actual: &Value) -> Option<String> {
    if json_type(example) != json_type(actual) {
        return Some(format!(
            "the example is a JSON {}, the output a JSON {}",
            json_type(example),
            json_type(actual)
        ));
    }
    if let (Some(want), Some(got)) = (example.as_array(), actual.as_array())
        && !want.is_empty()
        && got.is_empty()
    {
        return Some("an empty array where the example shows items".into());
    }
    let (Some(want), Some(got)) = (example.as_object(), actual.as_object()) else {
        return None;
    };
    let mut problems = Vec::new();
    for (key, value) in want {
        match got.get(key) {
            None => problems.push(format!("missing key {key:?}")),
            Some(v) if !value.is_null() && json_type(v) != json_type(value) => {
                problems.push(format!(
                    "{key:?} is a {} (example: {})",
                    json_type(v),
                    json_type(value)
                ))
            }
            Some(_) => {}
        }
    }
    for key in got.keys() {
        if !want.contains_key(key) {
            problems.push(format!("unexpected key {key:?}"));
        }
    }
    (!problems.is_empty()).then(|| {
        problems.truncate(6);
        problems.join(", ")
    })
}

/// The paid output's bytes with any content coding undone, when there is a delivered output to
/// read, and whether it says it is JSON (its content type; over MCP, `structuredContent`).
fn output_bytes(obs: &PaidObservation) -> Result<(bool, Vec<u8>), OutputVerdict> {
    let no_output = || {
        OutputVerdict::Unmeasured(match obs.carrier {
            PaymentCarrier::Http => "no 2xx output to examine (R4 carries that)".into(),
            PaymentCarrier::McpTool => {
                "no delivered tool output to examine (R4 carries that)".into()
            }
        })
    };
    let (answer, response) = paid_answer(obs).ok_or_else(no_output)?;
    if !answer.delivered {
        return Err(no_output());
    }
    if response.body_truncated {
        return Err(OutputVerdict::Unmeasured(
            "the output is larger than our read bound; its end was not seen".into(),
        ));
    }
    if let Some((output, json)) = answer.mcp_output {
        return Ok((json, output));
    }
    let bytes =
        decode_body_bounded(response, MAX_OUTPUT_BYTES).map_err(|e| OutputVerdict::Invalid {
            evidence: format!("the output's content coding could not be undone: {e}"),
            detail: json!({"decode_error": e.to_string()}),
        })?;
    let content_type_json = response
        .header("content-type")
        .is_some_and(|t| t.to_ascii_lowercase().contains("json"));
    Ok((content_type_json, bytes))
}

/// R5's rule on the paid output. Pure.
pub fn output_verdict(obs: &PaidObservation) -> OutputVerdict {
    let (content_type_json, bytes) = match output_bytes(obs) {
        Ok(found) => found,
        Err(verdict) => return verdict,
    };
    let quote = obs.paid_entry.as_ref().or(obs.quote.as_ref());
    let declared = quote.map(declared_output).unwrap_or_default();
    let mut detail = json!({
        "bytes": bytes.len(),
        "declared_in": declared.source,
        "max_bytes": declared.max_bytes,
    });
    let invalid = |evidence: String, detail: Value| OutputVerdict::Invalid { evidence, detail };
    if bytes.is_empty() {
        return invalid("the paid output is empty".into(), detail);
    }
    if let Some(max) = declared.max_bytes
        && bytes.len() as u64 > max
    {
        return invalid(
            format!("{} bytes, above the declared {max}", bytes.len()),
            detail,
        );
    }
    if !(declared.json || content_type_json) {
        return OutputVerdict::Valid {
            evidence: format!(
                "{} bytes, non-empty; nothing declared to validate against",
                bytes.len()
            ),
            detail,
        };
    }
    let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    let value: Value = match serde_json::from_slice(text) {
        Ok(v) => v,
        Err(e) => {
            return invalid(
                format!("JSON was promised; the output is not JSON ({e})"),
                detail,
            );
        }
    };
    if let Some(schema) = &declared.schema {
        match jsonschema::options().offline().build(schema) {
            Ok(validator) => {
                let errors: Vec<String> = validator
                    .iter_errors(&value)
                    .take(5)
                    .map(|e| format!("{e} at {}", e.instance_path()))
                    .collect();
                detail["rule"] = json!("schema");
                if errors.is_empty() {
                    return OutputVerdict::Valid {
                        evidence: format!(
                            "{} bytes of JSON valid against the declared schema ({})",
                            bytes.len(),
                            declared.source
                        ),
                        detail,
                    };
                }
                detail["errors"] = json!(errors);
                return invalid(
                    format!(
                        "the output does not validate against the declared schema: {}",
                        errors.join("; ")
                    ),
                    detail,
                );
            }
            Err(e) => {
                // An unusable schema is C5's finding; fall back to the example or to parsing.
                detail["schema_error"] = json!(e.to_string());
            }
        }
    }
    if let Some(example) = &declared.example {
        detail["rule"] = json!("example_shape");
        return match shape_mismatch(example, &value) {
            None => OutputVerdict::Valid {
                evidence: format!(
                    "{} bytes of JSON with the documented example's shape",
                    bytes.len()
                ),
                detail,
            },
            Some(why) => invalid(
                format!("the output does not have the documented example's shape: {why}"),
                detail,
            ),
        };
    }
    detail["rule"] = json!("parses");
    OutputVerdict::Valid {
        evidence: format!(
            "{} bytes of JSON; no usable schema or example declared",
            bytes.len()
        ),
        detail,
    }
}

// ---------------------------------------------------------------------------------------------
// The checks

/// Why a paid check has nothing to look at, when it has nothing.
fn not_paid(obs: &PaidObservation) -> Option<Conclusion> {
    match &obs.decision {
        Decision::Paid { .. } => None,
        Decision::Refused { refusals } => {
            let codes: Vec<&str> = refusals.iter().map(|r| r.code.as_str()).collect();
            let first = refusals
                .first()
                .map(|r| r.message.clone())
                .unwrap_or_else(|| "nothing to pay".into());
            Some(
                Conclusion::unmeasured(format!("we did not pay: {first}"))
                    .with_detail(json!({"refused": codes})),
            )
        }
        Decision::Failed { stage, error } => Some(Conclusion::unmeasured(format!(
            "our side failed before paying ({stage}): {error}"
        ))),
    }
}

fn quoted_amount(obs: &PaidObservation) -> Option<U256> {
    obs.payment
        .as_ref()
        .and_then(|p| p.authorization.value_u256())
}

/// R4: the paid request answered 2xx.
fn r4(obs: &PaidObservation) -> Conclusion {
    if let Some(c) = not_paid(obs) {
        return c;
    }
    let Some(exchange) = obs.paid.as_ref() else {
        return Conclusion::unmeasured("the paid request was not sent");
    };
    match (&exchange.response, &exchange.error) {
        (Some(r), _) => {
            let answer = answered(obs, &obs.request.body, r);
            if answer.delivered {
                Conclusion::pass(format!("{} to the paid request", answer.what))
            } else {
                Conclusion::fail(format!("{} to the paid request", answer.what))
                    .with_detail(json!({"status": r.status}))
            }
        }
        (None, Some(e)) if e.phase == crate::evidence::http::Phase::Guard => {
            Conclusion::unmeasured(format!("our address guard refused the request: {e}"))
        }
        (None, error) => Conclusion::fail(format!(
            "no response to the paid request: {}",
            error
                .as_ref()
                .map(|e| e.to_string())
                .unwrap_or_else(|| "unknown".into())
        )),
    }
}

/// R5: the output parses and validates against what the quote declares.
fn r5(obs: &PaidObservation) -> Conclusion {
    if let Some(c) = not_paid(obs) {
        return c;
    }
    match output_verdict(obs) {
        OutputVerdict::Valid { evidence, detail } => Conclusion::pass(evidence).with_detail(detail),
        OutputVerdict::Invalid { evidence, detail } => {
            Conclusion::fail(evidence).with_detail(detail)
        }
        OutputVerdict::Unmeasured(why) => Conclusion::unmeasured(why),
    }
}

/// R6: the output against the reference source the subject is linked to (`probes/R6.md`,
/// `checks::reference`); `na` for a subject linked to none.
fn r6(obs: &PaidObservation) -> Conclusion {
    if let Some(c) = not_paid(obs) {
        return c;
    }
    let Some(seen) = &obs.reference else {
        return Conclusion::na(
            "no independent reference source is known for this endpoint (probes/R6.md)",
        );
    };
    let output = match output_bytes(obs) {
        Ok((_, bytes)) => Ok(bytes),
        Err(OutputVerdict::Unmeasured(why)) => Err(why),
        Err(OutputVerdict::Invalid { evidence, .. } | OutputVerdict::Valid { evidence, .. }) => {
            Err(evidence)
        }
    };
    crate::checks::reference::evaluate(seen, output.as_deref().map_err(Clone::clone))
}

/// R7: paid latency to the last byte, labelled by the rubric's curve.
fn r7(obs: &PaidObservation, rubric: &Rubric) -> Conclusion {
    if let Some(c) = not_paid(obs) {
        return c;
    }
    let Some(exchange) = obs.paid.as_ref() else {
        return Conclusion::unmeasured("the paid request was not sent");
    };
    let (ms, what) = match &exchange.response {
        Some(_) => (
            exchange
                .timings
                .last_byte_ms
                .or(exchange.timings.total_ms)
                .unwrap_or(obs.paid_timeout_ms as f64),
            "to the last byte",
        ),
        None => (
            obs.paid_timeout_ms as f64,
            "no response: recorded as the paid timeout",
        ),
    };
    let Some(curve) = rubric.check(CheckId::R7).and_then(|c| c.curve.as_ref()) else {
        return Conclusion::unmeasured("the rubric has no curve for R7");
    };
    let points = interpolate(curve, ms);
    let text = format!("paid request {ms:.0} ms {what} -> {points:.1} points");
    // `samples` in the history's curve convention: a timed pass, or a fail that never completed.
    let sample = match exchange.response {
        Some(_) => json!({"outcome": "pass", "ms": ms}),
        None => json!({"outcome": "fail"}),
    };
    let detail = json!({"ms": ms, "curve_points": points, "pass_at": CURVE_PASS_POINTS, "samples": [sample]});
    let c = if exchange.response.is_some() && points >= CURVE_PASS_POINTS {
        Conclusion::pass(text)
    } else {
        Conclusion::fail(text)
    };
    c.with_value(ms).with_detail(detail)
}

/// C6: the settlement response decodes and its transaction is on chain, succeeded, on the quoted
/// chain, and moved money from our wallet.
fn c6(obs: &PaidObservation, facts: &ChainFacts) -> Conclusion {
    if let Some(c) = not_paid(obs) {
        return c;
    }
    let (Some(exchange), Some(payment), Some(chain)) =
        (obs.paid.as_ref(), obs.payment.as_ref(), obs.chain.as_ref())
    else {
        return Conclusion::unmeasured("the paid request was not sent");
    };
    let charged = facts
        .charge
        .as_ref()
        .map(|c| c.as_ref().map(|c| show_tx(c.tx)))
        .map_err(Clone::clone);
    let (settlement, header) = match settlement_read(exchange, obs, charged) {
        Ok(read) => read,
        Err(c) => return c,
    };
    if let Some(why) = deferred_settlement(obs) {
        return Conclusion::unmeasured(why);
    }
    let Some(tx) = settlement.transaction_hash() else {
        return Conclusion::fail(format!(
            "{header} reports success without a transaction hash ({:?})",
            settlement.transaction.clone().unwrap_or_default()
        ));
    };
    if let Some(network) = settlement.network.as_deref().filter(|n| !n.is_empty())
        && chain_id_of(network) != Some(payment.chain_id)
    {
        return Conclusion::fail(format!(
            "{header} names network {network:?}; we paid on chain {}",
            payment.chain_id
        ));
    }
    if let Some(why) = &facts.not_final {
        return Conclusion::unmeasured(why.clone());
    }
    let receipt = match &chain.claimed_receipt {
        ChainRead::Read { value } => value,
        other => {
            return Conclusion::unmeasured(format!(
                "the named transaction could not be looked up: {}",
                other.missing_because().unwrap_or("")
            ));
        }
    };
    let Some(receipt) = receipt else {
        return Conclusion::fail(format!(
            "{header} names transaction {tx:#x}, which the chain does not know"
        ));
    };
    if chain.chain_id.value() != Some(&payment.chain_id) {
        return Conclusion::unmeasured("the RPC's chain id is unknown or not the quote's");
    }
    if !receipt.status_ok {
        return Conclusion::fail(format!(
            "transaction {tx:#x} (block {}) reverted",
            receipt.block_number
        ));
    }
    let ours: Vec<TransferLog> = receipt
        .logs
        .iter()
        .filter_map(decode_transfer)
        .filter(|t| t.from == obs.wallet && t.token == payment.asset)
        .collect();
    if ours.is_empty() {
        return Conclusion::fail(format!(
            "transaction {tx:#x} (block {}) moves nothing from our wallet",
            receipt.block_number
        ));
    }
    Conclusion::pass(format!(
        "{header} names transaction {tx:#x}: block {}, succeeded, chain {}, {} from our wallet",
        receipt.block_number,
        payment.chain_id,
        sum_in(&ours, payment.asset)
    ))
    .with_detail(json!({"transfers": ours.iter().map(TransferLog::detail).collect::<Vec<_>>()}))
}

/// C6 with the settlement's signed receipt (`offer-receipt`), when it carries one: kept as
/// evidence (its signer, its terms), and held to the chain's settlement once C6 passed: a receipt
/// that is malformed or badly signed, or that names another payer, network or transaction than
/// the settlement the chain confirmed, fails C6. A receipt whose key needs a lookup over the
/// network is recorded, not judged.
fn signed_receipt(obs: &PaidObservation, c6: Conclusion) -> Conclusion {
    use crate::x402::offer_receipt::{Verified, receipt};
    let Some(seen) = obs
        .settlement
        .as_ref()
        .and_then(|s| s.object.as_ref())
        .and_then(receipt)
    else {
        return c6;
    };
    let mut c6 = c6;
    let mut detail = match std::mem::take(&mut c6.detail) {
        Value::Object(map) => map,
        Value::Null => serde_json::Map::new(),
        other => {
            let mut map = serde_json::Map::new();
            map.insert("detail".into(), other);
            map
        }
    };
    detail.insert("signed_receipt".into(), json!(seen));
    c6.detail = Value::Object(detail);
    if c6.outcome != Outcome::Pass {
        return c6;
    }
    let fail = |why: String, c6: Conclusion| Conclusion::fail(why).with_detail(c6.detail);
    let terms = match (&seen.verified, &seen.terms) {
        (Verified::Bad { why }, _) => {
            return fail(
                format!("the settlement's signed receipt is not valid: {why}"),
                c6,
            );
        }
        (Verified::Unresolved { .. }, _) | (_, None) => return c6,
        (Verified::Signer { .. }, Some(terms)) => terms,
    };
    let settled_tx = obs
        .settlement
        .as_ref()
        .and_then(|s| s.transaction.as_deref())
        .unwrap_or_default();
    let paid_chain = obs.payment.as_ref().map(|p| p.chain_id);
    if crate::evidence::paid::address_any_case(&terms.payer) != Some(obs.wallet) {
        return fail(
            format!(
                "the signed receipt names payer {:?}, not our wallet",
                terms.payer
            ),
            c6,
        );
    }
    if chain_id_of(&terms.network) != paid_chain {
        return fail(
            format!(
                "the signed receipt names network {:?}, not the chain we paid on",
                terms.network
            ),
            c6,
        );
    }
    if !terms.transaction.is_empty() && !terms.transaction.eq_ignore_ascii_case(settled_tx) {
        return fail(
            format!(
                "the signed receipt names transaction {}, the settlement (confirmed on chain) {settled_tx}",
                crate::x402::types::printable_prefix(&terms.transaction, 80)
            ),
            c6,
        );
    }
    let signer = seen.verified.signer().unwrap_or_default();
    Conclusion {
        evidence: format!("{}; its signed receipt (by {signer}) agrees", c6.evidence),
        ..c6
    }
}

/// A settlement that reports success with a commitment id where the transaction belongs (batch
/// settlement, a credit-backed network): text that is neither empty nor `0x`-prefixed (a malformed
/// hash stays a malformed hash), at most 256 characters. Value moves later, so no per-call
/// transaction can be read: `Some(why)` for the chain checks' `unmeasured`.
pub fn deferred_settlement(obs: &PaidObservation) -> Option<String> {
    let settlement = obs.settlement.as_ref()?;
    if settlement.success != Some(true) {
        return None;
    }
    let id = settlement.transaction.as_deref()?.trim();
    if id.is_empty() || id.starts_with("0x") || id.starts_with("0X") || id.len() > 256 {
        return None;
    }
    let network = settlement
        .network
        .as_deref()
        .filter(|n| !n.is_empty())
        .map(|n| format!(" on {n}"))
        .unwrap_or_default();
    Some(format!(
        "settled by commitment {}{network} (batch or credit-backed settlement): the value moves \
         later, so there is no per-call transaction to read",
        crate::x402::types::printable_prefix(id, 80)
    ))
}

/// What C6 concludes before the named transaction is looked at, on either network: no
/// response, no settlement header, one that does not decode, or one that reports failure
/// (believed only when the chain agrees nothing was taken). `charged`: the transaction that
/// took from us, when one did. `Ok`: a settlement that reports success, and its header's name.
fn settlement_read<'o>(
    exchange: &crate::evidence::http::Exchange,
    obs: &'o PaidObservation,
    charged: Result<Option<String>, String>,
) -> Result<(&'o crate::evidence::paid::SettlementSeen, String), Conclusion> {
    let Some(response) = exchange.response.as_ref() else {
        return Err(Conclusion::unmeasured(
            "no response to the paid request: nothing to read",
        ));
    };
    let answer = answered(obs, &obs.request.body, response);
    let status = &answer.what;
    let Some(settlement) = obs.settlement.as_ref() else {
        if answer.delivered {
            let carriers = match obs.carrier {
                PaymentCarrier::Http => "PAYMENT-RESPONSE or X-PAYMENT-RESPONSE",
                PaymentCarrier::McpTool => crate::x402::mcp::PAYMENT_RESPONSE_CARRIER,
            };
            return Err(Conclusion::fail(format!(
                "{status} to a paid request without {carriers}"
            )));
        }
        return Err(match charged {
            Ok(Some(tx)) => Conclusion::fail(format!(
                "charged on chain ({tx}) but {status} carries no settlement response"
            )),
            Ok(None) => Conclusion::na(format!(
                "the payment was not taken ({status}) and nothing was charged: no settlement to report"
            )),
            Err(why) => Conclusion::unmeasured(format!(
                "{status} without a settlement response; whether we were charged is unknown: {why}"
            )),
        });
    };
    let header = settlement.header_name.clone().unwrap_or_default();
    if let Some(problem) = &settlement.problem {
        return Err(Conclusion::fail(format!(
            "{header} does not decode: {problem}"
        )));
    }
    if settlement.pending() {
        // Not terminal: still pending after our re-checks. The chain decides (a receipt that
        // says pending is not a lie), or nothing is decided yet.
        let named = settlement.transaction.clone().unwrap_or_default();
        let rechecks = obs.pending.len();
        return Err(match charged {
            Ok(Some(tx)) if tx.eq_ignore_ascii_case(&named) => Conclusion::pass(format!(
                "{header} still reports settlement_pending after {rechecks} re-check(s) of the same payment; the transaction it names ({named}) is final on chain and took the payment"
            )),
            Ok(Some(tx)) => Conclusion::fail(format!(
                "{header} reports settlement_pending with {named:?}, but the payment was taken by {tx}"
            )),
            Ok(None) => Conclusion::unmeasured(format!(
                "{header} still reports settlement_pending ({named:?}) after {rechecks} re-check(s) of the same payment, and nothing was taken on chain by our deadline: not final"
            )),
            Err(why) => Conclusion::unmeasured(format!(
                "{header} reports settlement_pending; the chain could not confirm it: {why}"
            )),
        });
    }
    if settlement.success != Some(true) {
        let reason = settlement.error_reason.clone().unwrap_or_default();
        if answer.delivered {
            return Err(Conclusion::fail(format!(
                "{status} to a paid request, but {header} reports the settlement failed ({reason})"
            )));
        }
        return Err(match charged {
            Ok(None) => Conclusion::pass(format!(
                "{header} reports failure ({reason}) and the chain agrees nothing was charged"
            )),
            Ok(Some(tx)) => Conclusion::fail(format!(
                "{header} reports failure ({reason}) but we were charged ({tx})"
            )),
            Err(why) => Conclusion::unmeasured(format!(
                "{header} reports failure; the chain could not confirm it: {why}"
            )),
        });
    }
    Ok((settlement, header))
}

/// The Solana charge as C6, H8 and H9 read it: the transaction that took from our token account,
/// its amount and detail.
fn svm_charged(svm: &SvmPaidSeen) -> Result<Option<(String, String, Value)>, String> {
    svm_chain::charge(&svm.chain).map(|c| {
        c.map(|d| {
            (
                d.amount.to_string(),
                d.id.clone(),
                json!({"transaction": d.id, "amount": d.amount.to_string()}),
            )
        })
    })
}

/// C6 on Solana: the settlement header read as on EVM, then the named transaction judged from
/// the chain (`paid::svm_chain::c6`): a base58 signature of a transaction that landed, succeeded
/// and took from our token account, on the quoted cluster.
fn c6_svm(obs: &PaidObservation, svm: &SvmPaidSeen) -> Conclusion {
    if let Some(c) = not_paid(obs) {
        return c;
    }
    let Some(exchange) = obs.paid.as_ref() else {
        return Conclusion::unmeasured("the paid request was not sent");
    };
    let charged = svm_charged(svm).map(|c| c.map(|(_, tx, _)| tx));
    let (settlement, header) = match settlement_read(exchange, obs, charged) {
        Ok(read) => read,
        Err(c) => return c,
    };
    if let Some(network) = settlement.network.as_deref().filter(|n| !n.is_empty())
        && SolanaNetwork::from_network(network) != SolanaNetwork::from_network(&svm.payment.network)
    {
        return Conclusion::fail(format!(
            "{header} names network {network:?}; we paid on {}",
            svm.payment.network
        ));
    }
    svm_chain::c6(&svm.chain, Some(true), settlement.transaction.as_deref())
}

/// H9 on Solana: nothing to refund when delivered or not charged; a charge without delivery is
/// not watched for a refund on Solana yet, so it stays `unmeasured`.
fn h9_svm(obs: &PaidObservation, svm: &SvmPaidSeen) -> Conclusion {
    if let Some(c) = not_paid(obs) {
        return c;
    }
    match (svm_charged(svm), delivery(obs)) {
        (_, Delivery::Delivered(_)) => {
            Conclusion::na("the output was delivered: nothing to refund")
        }
        (Err(why), _) => {
            Conclusion::unmeasured(format!("whether we were charged is unknown: {why}"))
        }
        (Ok(None), _) => Conclusion::na("we were not charged: nothing to refund"),
        (Ok(Some(_)), Delivery::Unknown(why)) => {
            Conclusion::unmeasured(format!("charged; delivery unknown: {why}"))
        }
        (Ok(Some(_)), Delivery::NotDelivered(_)) => Conclusion::unmeasured(SVM_REFUND_NOT_WATCHED),
    }
}

/// Why a Solana charge without delivery has no refund watch.
const SVM_REFUND_NOT_WATCHED: &str = "charged without delivery on Solana: the refund watch reads EVM chains only, so a Solana refund is not watched yet";

fn show_tx(tx: Option<B256>) -> String {
    tx.map(|t| format!("{t:#x}"))
        .unwrap_or_else(|| "transaction unknown".into())
}

/// The charge, or the conclusion a money check reaches without one.
fn charge_or<'a>(obs: &PaidObservation, facts: &'a ChainFacts) -> Result<&'a Charge, Conclusion> {
    if let Some(c) = not_paid(obs) {
        return Err(c);
    }
    if let Some(why) = &facts.not_final {
        return Err(Conclusion::unmeasured(why.clone()));
    }
    match &facts.charge {
        Ok(Some(charge)) => Ok(charge),
        Ok(None) => Err(Conclusion::na(
            "we were not charged: no transfer from our wallet, our authorization unused",
        )),
        Err(why) => Err(Conclusion::unmeasured(format!(
            "the chain could not be read: {why}"
        ))),
    }
}

fn charge_detail(charge: &Charge) -> Value {
    json!({
        "found_by": charge.source.as_str(),
        "tx": charge.tx,
        "block": charge.block,
        "transfers": charge.transfers.iter().map(TransferLog::detail).collect::<Vec<_>>(),
    })
}

/// H5: the amount that left our wallet equals the quote.
fn h5(obs: &PaidObservation, facts: &ChainFacts) -> Conclusion {
    let charge = match charge_or(obs, facts) {
        Ok(charge) => charge,
        Err(c) => return c,
    };
    let Some(quoted) = quoted_amount(obs) else {
        return Conclusion::unmeasured("the quoted amount is unknown");
    };
    let text = format!(
        "{} moved {} from our wallet; the quote was {quoted}",
        charge.source.as_str(),
        charge.amount
    );
    let c = if charge.amount == quoted {
        Conclusion::pass(text)
    } else {
        Conclusion::fail(text)
    };
    c.with_detail(charge_detail(charge))
}

/// H6: every transfer of the charge went to the quoted payTo, in the quoted asset, on the quoted
/// chain.
fn h6(obs: &PaidObservation, facts: &ChainFacts) -> Conclusion {
    let charge = match charge_or(obs, facts) {
        Ok(charge) => charge,
        Err(c) => return c,
    };
    let (Some(payment), Some(chain)) = (obs.payment.as_ref(), obs.chain.as_ref()) else {
        return Conclusion::unmeasured("nothing was paid");
    };
    let pay_to = payment.authorization.to;
    let wrong: Vec<String> = charge
        .transfers
        .iter()
        .filter(|t| t.to != pay_to || t.token != payment.asset)
        .map(|t| format!("{} of token {} to {}", t.value, t.token, t.to))
        .collect();
    if chain.chain_id.value() != Some(&payment.chain_id) {
        return Conclusion::unmeasured("the RPC's chain id is unknown or not the quote's");
    }
    let c = if wrong.is_empty() {
        Conclusion::pass(format!(
            "{} paid {pay_to} (the quoted payTo) in {} on chain {}",
            charge.source.as_str(),
            payment.asset,
            payment.chain_id
        ))
    } else {
        Conclusion::fail(format!(
            "the quoted payTo is {pay_to}, but {} moved {}",
            charge.source.as_str(),
            wrong.join("; ")
        ))
    };
    c.with_detail(charge_detail(charge))
}

/// H7: one pull for one authorization, and the replay moved nothing.
fn h7(obs: &PaidObservation, facts: &ChainFacts) -> Conclusion {
    if let Some(c) = not_paid(obs) {
        return c;
    }
    if let Some(why) = &facts.not_final {
        return Conclusion::unmeasured(why.clone());
    }
    let pulls = match &facts.pulls {
        Ok(pulls) => pulls,
        Err(why) => {
            return Conclusion::unmeasured(format!("the chain could not be read: {why}"));
        }
    };
    let mut detail = json!({
        "pulls": pulls.iter().map(TransferLog::detail).collect::<Vec<_>>(),
    });
    // The `payment-identifier` id (when the 402 advertised the extension): the replay is the
    // retry that id makes idempotent.
    let payment_id = obs.payment.as_ref().and_then(|p| p.payment_id.as_deref());
    if let Some(id) = payment_id {
        detail["payment_id"] = json!(id);
    }
    if pulls.len() > 1 {
        return Conclusion::fail(format!(
            "{} transfers left our wallet for one authorization: a second pull",
            pulls.len()
        ))
        .with_detail(detail);
    }
    let replay_text = match obs.replay.as_ref() {
        None => "no replay was observed".to_string(),
        Some(replay) => match &replay.exchange {
            None => format!(
                "replay not sent ({})",
                replay.skipped.clone().unwrap_or_default()
            ),
            Some(exchange) => {
                let (Some(transfers), Some(used)) = (
                    replay.transfers_after.value(),
                    replay.authorizations_used_after.value(),
                ) else {
                    let why = replay
                        .transfers_after
                        .missing_because()
                        .or(replay.authorizations_used_after.missing_because())
                        .unwrap_or("");
                    return Conclusion::unmeasured(format!(
                        "the replay was sent but the chain after it could not be read: {why}"
                    ));
                };
                let nonce = obs
                    .payment
                    .as_ref()
                    .map(|p| p.authorization.nonce)
                    .unwrap_or_default();
                let after = crate::paid::chain::attributable(transfers, used, obs.wallet, nonce);
                detail["replay_pulls"] =
                    json!(after.iter().map(TransferLog::detail).collect::<Vec<_>>());
                if !after.is_empty() {
                    return Conclusion::fail(format!(
                        "the replay of a spent authorization moved money again: {}",
                        after
                            .iter()
                            .map(|t| format!("{} to {}", t.value, t.to))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ))
                    .with_detail(detail);
                }
                match &exchange.response {
                    Some(r) => {
                        // The replay sends the same payment on the same request as the call.
                        let answer = answered(obs, &obs.request.body, r);
                        if answer.delivered {
                            format!(
                                "the replay was served again ({}) without a new charge: idempotent",
                                answer.what
                            )
                        } else {
                            format!("the replay was refused ({})", answer.what)
                        }
                    }
                    None => "the replay got no response".to_string(),
                }
            }
        },
    };
    let id_text = match payment_id {
        Some(id) => {
            format!(" (the payment carried the payment-identifier id {id}, the replay the same)")
        }
        None => String::new(),
    };
    Conclusion::pass(format!(
        "{} transfer(s) from our wallet for the call; {replay_text}{id_text}",
        pulls.len()
    ))
    .with_detail(detail)
}

/// H8: charged, yet no 2xx with a valid output.
fn h8(obs: &PaidObservation, facts: &ChainFacts) -> Conclusion {
    h8_with(obs, || match (&facts.not_final, &facts.charge) {
        (Some(why), _) => Err(why.clone()),
        (None, Ok(charge)) => Ok(charge
            .as_ref()
            .map(|c| (c.amount.to_string(), show_tx(c.tx), charge_detail(c)))),
        (None, Err(why)) => Err(why.clone()),
    })
}

/// H8 on either network: `charged` gives the charge (amount, transaction, detail), when there
/// was one.
fn h8_with(
    obs: &PaidObservation,
    charged: impl Fn() -> Result<Option<(String, String, Value)>, String>,
) -> Conclusion {
    if let Some(c) = not_paid(obs) {
        return c;
    }
    match delivery(obs) {
        Delivery::Delivered(how) => Conclusion::pass(format!("delivered: {how}")),
        Delivery::NotDelivered(why) => match charged() {
            Ok(Some((amount, tx, detail))) => {
                Conclusion::fail(format!("charged {amount} ({tx}) without delivery: {why}"))
                    .with_detail(detail)
            }
            Ok(None) => Conclusion::pass(format!("not delivered ({why}), and not charged")),
            Err(e) => Conclusion::unmeasured(format!(
                "not delivered ({why}); whether we were charged is unknown: {e}"
            )),
        },
        Delivery::Unknown(why) => match charged() {
            Ok(None) => Conclusion::pass(format!("not charged (delivery unknown: {why})")),
            Ok(Some(_)) => Conclusion::unmeasured(format!("charged; delivery unknown: {why}")),
            Err(e) => Conclusion::unmeasured(format!("delivery unknown ({why}); chain: {e}")),
        },
    }
}

/// What a refund watch needs, when this paid call charged without delivering: `Err(why not)`
/// otherwise. The runner (or the daemon's scheduler) runs the watch as its own job with it.
pub fn refund_plan(obs: &PaidObservation) -> Result<RefundPlan, String> {
    if let Some(c) = not_paid(obs) {
        return Err(c.evidence);
    }
    if obs.svm.is_some() {
        return Err(SVM_REFUND_NOT_WATCHED.into());
    }
    let facts = chain_facts(obs);
    let charge = match (&facts.charge, delivery(obs)) {
        (_, Delivery::Delivered(_)) => {
            return Err("the output was delivered: nothing to refund".into());
        }
        (Err(why), _) => return Err(format!("whether we were charged is unknown: {why}")),
        (Ok(None), _) => return Err("we were not charged: nothing to refund".into()),
        (Ok(Some(_)), Delivery::Unknown(why)) => {
            return Err(format!("charged; delivery unknown: {why}"));
        }
        (Ok(Some(charge)), Delivery::NotDelivered(_)) => charge.clone(),
    };
    plan_for(obs, &charge).ok_or_else(|| "nothing was paid".to_string())
}

fn plan_for(obs: &PaidObservation, charge: &Charge) -> Option<RefundPlan> {
    let payment = obs.payment.as_ref()?;
    let mut senders: Vec<_> = charge.transfers.iter().map(|t| t.to).collect();
    senders.push(payment.authorization.to);
    Some(RefundPlan {
        subject: obs.subject.clone(),
        wallet: obs.wallet,
        asset: payment.asset,
        chain_id: payment.chain_id,
        charge_block: charge.block,
        charge_amount: charge.amount,
        senders,
        sent_at: payment.sent_at,
    })
}

/// H9: a declared refund rule kept after a charge without delivery.
fn h9(obs: &PaidObservation, facts: &ChainFacts) -> Conclusion {
    if let Some(c) = not_paid(obs) {
        return c;
    }
    let charge = match (&facts.charge, delivery(obs)) {
        (_, Delivery::Delivered(_)) => {
            return Conclusion::na("the output was delivered: nothing to refund");
        }
        (Err(why), _) => {
            return Conclusion::unmeasured(format!("whether we were charged is unknown: {why}"));
        }
        (Ok(None), _) => return Conclusion::na("we were not charged: nothing to refund"),
        (Ok(Some(_)), Delivery::Unknown(why)) => {
            return Conclusion::unmeasured(format!("charged; delivery unknown: {why}"));
        }
        (Ok(Some(charge)), Delivery::NotDelivered(_)) => charge,
    };
    let Some(refund) = obs.refund.as_ref() else {
        return Conclusion::unmeasured(
            "charged without delivery; the refund watch has not reported yet",
        );
    };
    let file = match &refund.operator {
        None => {
            return Conclusion::unmeasured(format!(
                "the operator file was not read: {}",
                refund.skipped.clone().unwrap_or_default()
            ));
        }
        Some(OperatorFileSeen::Absent { status }) => {
            return Conclusion::na(format!(
                "no operator file (HTTP {status}): no refund promised"
            ));
        }
        Some(OperatorFileSeen::Unreadable { why }) => {
            return Conclusion::unmeasured(format!("the operator file could not be read: {why}"));
        }
        Some(OperatorFileSeen::Malformed { why }) => {
            return Conclusion::na(format!(
                "the operator file is malformed, so no refund rule can be read ({why}); H4 carries it"
            ));
        }
        Some(OperatorFileSeen::Read { file }) => file,
    };
    let Some(rule) = file.refund.as_ref() else {
        return Conclusion::na("the operator file declares no refund rule");
    };
    if rule.on != REFUND_ON_CHARGED_WITHOUT_DELIVERY {
        return Conclusion::na(format!(
            "the refund rule is for {:?}, not a charge without delivery",
            rule.on
        ));
    }
    let Some(watch) = refund.watch.as_ref() else {
        return Conclusion::unmeasured(format!(
            "no refund watch: {}",
            refund.skipped.clone().unwrap_or_default()
        ));
    };
    let Some(plan) = plan_for(obs, charge) else {
        return Conclusion::unmeasured("nothing was paid");
    };
    let transfers = match &watch.transfers_to_wallet {
        ChainRead::Read { value } => value,
        other => {
            return Conclusion::unmeasured(format!(
                "transfers to our wallet could not be read: {}",
                other.missing_because().unwrap_or("")
            ));
        }
    };
    let mut in_window = Vec::new();
    let mut late = Vec::new();
    for t in transfers {
        let Some(refund) = refunds(std::iter::once(&t.log), &plan, file).pop() else {
            continue;
        };
        match t.block_timestamp.value() {
            Some(ts) if i64::try_from(*ts).unwrap_or(i64::MAX) <= watch.window_end => {
                in_window.push(refund)
            }
            Some(_) => late.push(refund),
            None => {
                return Conclusion::unmeasured(format!(
                    "a refund's block time could not be read: {}",
                    t.block_timestamp.missing_because().unwrap_or("")
                ));
            }
        }
    }
    let refunded = sum_in(&in_window, plan.asset);
    let detail = json!({
        "rule": {"on": rule.on, "within_seconds": rule.within_seconds},
        "charge": charge_detail(charge),
        "window_end": watch.window_end,
        "watched": {"from": watch.started_at, "to": watch.ended_at, "complete": watch.complete},
        "refunds": in_window.iter().map(TransferLog::detail).collect::<Vec<_>>(),
        "late": late.iter().map(TransferLog::detail).collect::<Vec<_>>(),
    });
    if !charge.amount.is_zero() && refunded >= charge.amount {
        return Conclusion::pass(format!(
            "refunded {refunded} of {} within the declared {} s",
            charge.amount, rule.within_seconds
        ))
        .with_detail(detail);
    }
    if !watch.complete {
        return Conclusion::unmeasured(format!(
            "no full refund seen while watching until {}; the declared window ends at {}",
            watch.ended_at, watch.window_end
        ))
        .with_detail(detail);
    }
    Conclusion::fail(format!(
        "charged {} without delivery; refunded {refunded} within the declared {} s",
        charge.amount, rule.within_seconds
    ))
    .with_detail(detail)
}

/// S3: the screen over the paid output text.
fn s3(obs: &PaidObservation) -> Conclusion {
    if let Some(c) = not_paid(obs) {
        return c;
    }
    let bytes = match output_bytes(obs) {
        Ok((_, bytes)) => bytes,
        Err(OutputVerdict::Unmeasured(why)) => return Conclusion::unmeasured(why),
        Err(_) => return Conclusion::unmeasured("the output could not be decoded to screen it"),
    };
    if bytes.is_empty() {
        return Conclusion::unmeasured("the paid output is empty: nothing to screen");
    }
    match std::str::from_utf8(&bytes) {
        Ok(text) => screen_output(&[SourcedText::new("paid.body", text)]),
        Err(_) => Conclusion::pass(format!(
            "{} bytes that are not UTF-8 text: nothing to screen",
            bytes.len()
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Receipts

/// Every paid check's receipt names the same evidence: the bytes seen (hashes), the settlement
/// transaction and the blocks read, plus the check's own detail.
fn receipt(
    obs: &PaidObservation,
    facts: &ChainFacts,
    vantage: &str,
    as_of_unix: i64,
    check_detail: Value,
) -> Receipt {
    let mut sha256 = BTreeMap::new();
    if let Some(r) = obs
        .requote
        .as_ref()
        .and_then(|q| q.exchange.response.as_ref())
    {
        sha256.insert("requote.body".to_string(), r.body_sha256.clone());
    }
    if let Some(header) = obs.payment_header() {
        sha256.insert(
            "paid.payment_header".to_string(),
            sha256_hex(header.as_bytes()),
        );
    }
    if let Some(r) = obs.paid.as_ref().and_then(|e| e.response.as_ref()) {
        sha256.insert("paid.body".to_string(), r.body_sha256.clone());
        for name in ["payment-response", "x-payment-response"] {
            if let Some(v) = r.header(name) {
                sha256.insert(format!("paid.{name}"), sha256_hex(v.as_bytes()));
            }
        }
    }
    if let Some(r) = obs
        .replay
        .as_ref()
        .and_then(|r| r.exchange.as_ref())
        .and_then(|e| e.response.as_ref())
    {
        sha256.insert("replay.body".to_string(), r.body_sha256.clone());
    }
    let charge_tx = facts.charge.as_ref().ok().and_then(|c| c.as_ref()?.tx);
    let claimed_tx = obs.settlement.as_ref().and_then(|s| s.transaction_hash());
    let mut tx = charge_tx.or(claimed_tx).map(|t| format!("{t:#x}"));
    if let Some(svm) = &obs.svm {
        let charge = svm_chain::charge(&svm.chain).ok().flatten().map(|d| d.id);
        tx = charge.or_else(|| obs.settlement.as_ref().and_then(|s| s.transaction.clone()));
    }
    let blocks = obs.chain.as_ref().map(|c| {
        json!({
            "before": c.block_before.value(),
            "after": c.block_after.value(),
            "settlement": facts.charge.as_ref().ok().and_then(|c| c.as_ref().map(|c| c.block)),
            "depth": c.settlement_depth,
            "replay_after": obs.replay.as_ref().and_then(|r| r.block_after.value().copied()),
        })
    });
    let mut detail = json!({
        "subject": obs.subject,
        "evaluated_at": rfc3339(as_of_unix),
        "decision": match &obs.decision {
            Decision::Paid { .. } => "paid",
            Decision::Refused { .. } => "refused",
            Decision::Failed { .. } => "failed",
        },
        "reservation": obs.payment.as_ref().map(|p| p.reservation_id),
        "nonce": obs.payment.as_ref().map(|p| p.authorization.nonce),
        "blocks": blocks,
    });
    if !check_detail.is_null() {
        detail["check"] = check_detail;
    }
    Receipt {
        vantage: vantage.to_string(),
        at: rfc3339(obs.started_at),
        sha256,
        tx,
        detail,
    }
}

/// Outcomes by check id, for callers that compare (tests, reports).
pub fn outcomes(results: &[CheckResult]) -> BTreeMap<CheckId, Outcome> {
    results.iter().map(|r| (r.id, r.outcome)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::chain::{LogEntry, TxReceipt};
    use crate::evidence::http::Exchange;
    use crate::evidence::paid::{AuthorizationSeen, PaidChainSeen, PaymentSent, RefundRule};
    use crate::evidence::usd::Usd;
    use crate::paid::chain::{AUTHORIZATION_USED_TOPIC, TRANSFER_TOPIC};
    use crate::paid::steps::settlement_of;
    use crate::x402::operator::parse_operator_file;
    use alloy::primitives::Address;
    use proptest::prelude::*;

    const WALLET: Address = Address::repeat_byte(0x11);
    const PAY_TO: Address = Address::repeat_byte(0x22);
    const ASSET: Address = Address::repeat_byte(0xaa);
    const NONCE: B256 = B256::repeat_byte(0x33);

    fn transfer(from: Address, to: Address, value: u64, tx: u8) -> LogEntry {
        LogEntry {
            address: ASSET,
            topics: vec![TRANSFER_TOPIC, from.into_word(), to.into_word()],
            data: U256::from(value).to_be_bytes::<32>().to_vec().into(),
            transaction_hash: Some(B256::repeat_byte(tx)),
            block_number: Some(10),
        }
    }

    fn receipt_with(logs: Vec<LogEntry>, tx: u8) -> TxReceipt {
        TxReceipt {
            transaction_hash: B256::repeat_byte(tx),
            block_number: 10,
            block_hash: B256::ZERO,
            status_ok: true,
            logs,
            from: None,
        }
    }

    /// A paid v2 call of 10000 units whose response is `status`, `headers`, `body`, and whose chain
    /// shows `transfers` from our wallet (our nonce used when `used`).
    fn observation(
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        transfers: Vec<LogEntry>,
        used: bool,
    ) -> PaidObservation {
        let entry = json!({
            "scheme": "exact", "network": "eip155:8453", "amount": "10000",
            "asset": ASSET.to_string(), "payTo": PAY_TO.to_string(), "maxTimeoutSeconds": 60
        });
        let quote = QuoteSeen {
            x402_version: 2,
            index: 0,
            entry: entry.clone(),
            resource: None,
            extensions: Some(json!({"bazaar": {"info": {"output": {
                "type": "json", "example": {"city": "Paris", "temp_c": 1.5}
            }}}})),
            scheme: Some("exact".into()),
            network: Some("eip155:8453".into()),
            asset: Some(ASSET.to_string()),
            pay_to: Some(PAY_TO.to_string()),
            amount: Some("10000".into()),
            max_timeout_seconds: Some(60),
        };
        let mut exchange = Exchange {
            response: Some(HttpResponse::new(status, headers, body, false, 100)),
            ..Exchange::default()
        };
        exchange.timings.last_byte_ms = Some(800.0);
        let used_logs = if used {
            vec![LogEntry {
                address: ASSET,
                topics: vec![AUTHORIZATION_USED_TOPIC, WALLET.into_word(), NONCE],
                data: Default::default(),
                transaction_hash: Some(B256::repeat_byte(1)),
                block_number: Some(10),
            }]
        } else {
            Vec::new()
        };
        let nonce_receipt = used.then(|| {
            let mut logs = used_logs.clone();
            logs.extend(
                transfers
                    .iter()
                    .filter(|t| t.transaction_hash == Some(B256::repeat_byte(1)))
                    .cloned(),
            );
            receipt_with(logs, 1)
        });
        let settlement = settlement_of(&exchange);
        PaidObservation {
            carrier: Default::default(),
            pending: Vec::new(),
            subject: "https://api.example/weather".into(),
            request: crate::evidence::http::FetchRequest::get("https://api.example/weather"),
            wallet: WALLET,
            started_at: 1_800_000_000,
            quote: Some(quote.clone()),
            requote: None,
            decision: Decision::Paid { reservation_id: 1 },
            paid_entry: Some(quote),
            payment: Some(PaymentSent {
                reservation_id: 1,
                cost_usd: Usd::from_atto(10_000_000_000_000_000),
                authorization: AuthorizationSeen {
                    from: WALLET,
                    to: PAY_TO,
                    value: "10000".into(),
                    valid_after: 1_799_999_400,
                    valid_before: 1_800_000_060,
                    nonce: NONCE,
                },
                domain_name: "USD Coin".into(),
                domain_version: "2".into(),
                chain_id: 8453,
                asset: ASSET,
                signature: "0x".into(),
                header_name: "PAYMENT-SIGNATURE".into(),
                header_value: "e30=".into(),
                sent_at: 1_800_000_000,
                payment_id: None,
            }),
            paid_timeout_ms: 30_000,
            settlement,
            paid: Some(exchange),
            chain: Some(PaidChainSeen {
                rpc_url: "http://rpc".into(),
                chain_id: ChainRead::Read { value: 8453 },
                block_before: ChainRead::Read { value: 9 },
                block_after: ChainRead::Read { value: 10 },
                claimed_receipt: ChainRead::Skipped { why: "none".into() },
                authorizations_used: ChainRead::Read { value: used_logs },
                nonce_receipt: ChainRead::Read {
                    value: nonce_receipt,
                },
                authorization_state: ChainRead::Read { value: used },
                transfers_from_wallet: ChainRead::Read { value: transfers },
                confirmations_required: 0,
                settlement_depth: used.then_some(1),
            }),
            replay: None,
            refund: None,
            reservation: None,
            reconciled: None,
            notes: Vec::new(),
            svm: None,
            reference: None,
        }
    }

    fn outcome_of(obs: &PaidObservation, id: &str) -> Outcome {
        evaluate(obs, 1_800_000_100, "unit")
            .into_iter()
            .find(|r| r.id == id)
            .map(|r| r.outcome)
            .expect("every paid check is evaluated")
    }

    fn json_ok() -> (Vec<(String, String)>, Vec<u8>) {
        (
            vec![("content-type".into(), "application/json".into())],
            br#"{"city":"Oslo","temp_c":3}"#.to_vec(),
        )
    }

    /// The paid call of `observation` made on Solana: our token account debited `debit` (and
    /// payTo's credited as much) by a transaction carrying our signature, when `debit` > 0.
    fn on_solana(mut obs: PaidObservation, debit: u64, network: &str) -> PaidObservation {
        use crate::evidence::svm::{
            SvmPaidChainSeen, SvmPaymentSent, SvmTokenBalance, SvmTransactionSeen,
        };
        let signature = bs58::encode([9u8; 64]).into_string();
        let balance = |account: &str, amount: u64| SvmTokenBalance {
            account: account.into(),
            mint: "Mint".into(),
            owner: None,
            amount,
        };
        let landed = SvmTransactionSeen {
            signatures: vec![signature.clone()],
            slot: 5,
            err: None,
            pre: vec![balance("Ours", 50_000), balance("Theirs", 0)],
            post: vec![balance("Ours", 50_000 - debit), balance("Theirs", debit)],
        };
        let window = if debit > 0 {
            vec![landed.clone()]
        } else {
            Vec::new()
        };
        let payment = SvmPaymentSent {
            reservation_id: 1,
            cost_usd: Usd::from_atto(10_000_000_000_000_000),
            network: network.into(),
            payer: "Us".into(),
            fee_payer: "Fees".into(),
            mint: "Mint".into(),
            source: "Ours".into(),
            destination: "Theirs".into(),
            pay_to: "Them".into(),
            amount: 10_000,
            memo: "m".into(),
            blockhash: "Hash".into(),
            last_valid_block_height: 150,
            signature: signature.clone(),
            header_name: "PAYMENT-SIGNATURE".into(),
            header_value: "e30=".into(),
            sent_at: 1_800_000_000,
        };
        obs.svm = Some(SvmPaidSeen {
            chain: SvmPaidChainSeen {
                rpc_url: "http://solana".into(),
                our_signature: signature,
                source: "Ours".into(),
                destination: "Theirs".into(),
                mint: "Mint".into(),
                amount: 10_000,
                claimed: ChainRead::Read {
                    value: (debit > 0).then_some(landed),
                },
                window: ChainRead::Read { value: window },
            },
            payment,
            block_height_before: 1,
            window_after: None,
        });
        obs.payment = None;
        obs.chain = None;
        obs
    }

    fn solana_receipt(network: &str) -> (String, String) {
        use base64::Engine as _;
        let receipt = json!({"success": true, "transaction": bs58::encode([9u8; 64]).into_string(),
            "network": network, "payer": "Us"});
        (
            "payment-response".to_string(),
            base64::engine::general_purpose::STANDARD.encode(receipt.to_string()),
        )
    }

    #[test]
    fn a_solana_payment_is_judged_from_its_token_balances() {
        let devnet = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
        let (mut headers, body) = json_ok();
        headers.push(solana_receipt("solana-devnet"));
        let honest = on_solana(
            observation(200, headers.clone(), body.clone(), vec![], false),
            10_000,
            devnet,
        );
        for id in ["R4", "C6", "H5", "H6", "H7", "H8"] {
            assert_eq!(outcome_of(&honest, id), Outcome::Pass, "{id}");
        }
        assert_eq!(outcome_of(&honest, "H9"), Outcome::Na);
        let results = evaluate(&honest, 1_800_000_100, "unit");
        assert!(
            results
                .iter()
                .all(|r| r.receipt.sha256.contains_key("paid.payment_header"))
        );
        // The receipt names another cluster: C6 fails.
        let mainnet = on_solana(
            observation(200, headers, body.clone(), vec![], false),
            10_000,
            "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
        );
        assert_eq!(outcome_of(&mainnet, "C6"), Outcome::Fail);
        // Charged, then a 500: H8 fails; H9 cannot be watched on Solana yet.
        let broken = on_solana(
            observation(500, vec![], b"upstream failed".to_vec(), vec![], false),
            10_000,
            devnet,
        );
        assert_eq!(outcome_of(&broken, "H8"), Outcome::Fail);
        assert_eq!(outcome_of(&broken, "H9"), Outcome::Unmeasured);
        assert_eq!(outcome_of(&broken, "C6"), Outcome::Fail);
        assert!(refund_plan(&broken).is_err());
        // Not charged and not delivered: H8 passes, C6 is na (nothing to report).
        let untaken = on_solana(
            observation(500, vec![], Vec::new(), vec![], false),
            0,
            devnet,
        );
        assert_eq!(outcome_of(&untaken, "H8"), Outcome::Pass);
        assert_eq!(outcome_of(&untaken, "C6"), Outcome::Na);
        assert_eq!(outcome_of(&untaken, "H5"), Outcome::Na);
        // The observation survives storage.
        let back: PaidObservation =
            serde_json::from_str(&serde_json::to_string(&broken).unwrap()).unwrap();
        assert_eq!(back, broken);
    }

    /// A receipt header of `transaction` on Base, success.
    fn receipt_naming(transaction: &str) -> (String, String) {
        use base64::Engine as _;
        let receipt =
            json!({"success": true, "transaction": transaction, "network": "eip155:8453"});
        (
            "payment-response".to_string(),
            base64::engine::general_purpose::STANDARD.encode(receipt.to_string()),
        )
    }

    #[test]
    fn a_commitment_id_waits_for_the_value_unless_money_moved() {
        let commitment = |status: u16, transfers: Vec<LogEntry>, used: bool, tx: &str| {
            let (mut headers, body) = json_ok();
            headers.push(receipt_naming(tx));
            observation(status, headers, body, transfers, used)
        };
        // Delivered, nothing moved yet: the money checks wait, H8 passes.
        let batch = commitment(200, vec![], false, "batch_7f3a");
        assert!(deferred_settlement(&batch).is_some());
        for id in ["C6", "H5", "H6", "H7"] {
            assert_eq!(outcome_of(&batch, id), Outcome::Unmeasured, "{id}");
        }
        assert_eq!(outcome_of(&batch, "H8"), Outcome::Pass);
        assert_eq!(outcome_of(&batch, "R4"), Outcome::Pass);
        // Not delivered: whether we will be charged is not known yet.
        let failed = commitment(500, vec![], false, "batch_7f3a");
        assert_eq!(outcome_of(&failed, "H8"), Outcome::Unmeasured);
        // Money moved twice for the call: judged as any charge, C6 still waits.
        let pulled = commitment(
            200,
            vec![
                transfer(WALLET, PAY_TO, 10_000, 1),
                transfer(WALLET, PAY_TO, 10_000, 2),
            ],
            true,
            "batch_7f3a",
        );
        assert_eq!(outcome_of(&pulled, "C6"), Outcome::Unmeasured);
        assert_eq!(outcome_of(&pulled, "H7"), Outcome::Fail);
        assert_eq!(outcome_of(&pulled, "H5"), Outcome::Pass);
        // A malformed hash is no commitment: C6 fails as before; so does an empty one.
        for tx in ["0x12", ""] {
            let bad = commitment(200, vec![], false, tx);
            assert!(deferred_settlement(&bad).is_none(), "{tx:?}");
            assert_eq!(outcome_of(&bad, "C6"), Outcome::Fail, "{tx:?}");
        }
    }

    #[test]
    fn money_checks_read_the_chain_not_the_endpoint() {
        let (headers, body) = json_ok();
        // Honest: one transfer of the quote to payTo, our nonce used.
        let honest = observation(
            200,
            headers.clone(),
            body.clone(),
            vec![transfer(WALLET, PAY_TO, 10_000, 1)],
            true,
        );
        for id in ["R4", "R5", "H5", "H6", "H7", "H8", "S3", "R7"] {
            assert_eq!(outcome_of(&honest, id), Outcome::Pass, "{id}");
        }
        assert_eq!(
            outcome_of(&honest, "C6"),
            Outcome::Fail,
            "a paid 2xx without a receipt"
        );
        assert_eq!(outcome_of(&honest, "R6"), Outcome::Na);
        assert_eq!(outcome_of(&honest, "H9"), Outcome::Na);
        // Overcharge through a second transaction: H7 sees a second pull, H5 the settlement only.
        let double = observation(
            200,
            headers.clone(),
            body.clone(),
            vec![
                transfer(WALLET, PAY_TO, 10_000, 1),
                transfer(WALLET, PAY_TO, 10_000, 2),
            ],
            true,
        );
        assert_eq!(outcome_of(&double, "H5"), Outcome::Pass);
        assert_eq!(outcome_of(&double, "H7"), Outcome::Fail);
        // Paid to someone else without our nonce: found in the window.
        let wrong = observation(
            200,
            headers.clone(),
            body.clone(),
            vec![transfer(WALLET, Address::repeat_byte(0x66), 30_000, 5)],
            false,
        );
        assert_eq!(outcome_of(&wrong, "H5"), Outcome::Fail);
        assert_eq!(outcome_of(&wrong, "H6"), Outcome::Fail);
        // Not charged, not delivered.
        let nothing = observation(500, vec![], b"oops".to_vec(), vec![], false);
        assert_eq!(outcome_of(&nothing, "R4"), Outcome::Fail);
        assert_eq!(outcome_of(&nothing, "H5"), Outcome::Na);
        assert_eq!(outcome_of(&nothing, "H8"), Outcome::Pass);
        assert_eq!(outcome_of(&nothing, "C6"), Outcome::Na);
        // Charged, not delivered.
        let charged = observation(
            500,
            vec![],
            b"oops".to_vec(),
            vec![transfer(WALLET, PAY_TO, 10_000, 1)],
            true,
        );
        assert_eq!(outcome_of(&charged, "H8"), Outcome::Fail);
        assert_eq!(outcome_of(&charged, "C6"), Outcome::Fail);
        // The chain unreadable: money checks unmeasured, never failed.
        let mut down = charged.clone();
        if let Some(chain) = down.chain.as_mut() {
            let error = "connection refused".to_string();
            chain.authorizations_used = ChainRead::Failed {
                error: error.clone(),
            };
            chain.nonce_receipt = ChainRead::Failed {
                error: error.clone(),
            };
            chain.authorization_state = ChainRead::Failed {
                error: error.clone(),
            };
            chain.transfers_from_wallet = ChainRead::Failed { error };
            chain.settlement_depth = None;
        }
        for id in ["C6", "H5", "H6", "H7", "H8", "H9"] {
            assert_eq!(outcome_of(&down, id), Outcome::Unmeasured, "{id}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Whatever the endpoint sends back (status, receipt header, body) and whatever the chain
        /// logs look like, evaluation returns eleven results and never panics.
        #[test]
        fn evaluation_never_panics(
            status in 0u16..700,
            header in proptest::option::of(".{0,200}"),
            body in proptest::collection::vec(any::<u8>(), 0..512),
            topics in proptest::collection::vec(proptest::collection::vec(any::<[u8; 32]>(), 0..5), 0..4),
            data in proptest::collection::vec(any::<u8>(), 0..70),
            used in any::<bool>(),
        ) {
            let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
            if let Some(h) = header {
                headers.push(("payment-response".to_string(), h));
            }
            let logs: Vec<LogEntry> = topics
                .into_iter()
                .map(|t| LogEntry {
                    address: ASSET,
                    topics: t.into_iter().map(B256::from).collect(),
                    data: data.clone().into(),
                    transaction_hash: None,
                    block_number: None,
                })
                .collect();
            let obs = observation(status, headers, body, logs, used);
            let results = evaluate(&obs, 0, "fuzz");
            prop_assert_eq!(results.len(), PAID_CHECKS.len());
        }
    }

    fn log(topics: Vec<B256>, data: Vec<u8>) -> LogEntry {
        LogEntry {
            address: Address::repeat_byte(0xaa),
            topics,
            data: data.into(),
            transaction_hash: Some(B256::repeat_byte(1)),
            block_number: Some(7),
        }
    }

    #[test]
    fn transfer_logs_decode_and_nft_transfers_do_not() {
        let from = Address::repeat_byte(1);
        let to = Address::repeat_byte(2);
        let value = U256::from(10_000u64).to_be_bytes::<32>().to_vec();
        let t = decode_transfer(&log(
            vec![TRANSFER_TOPIC, from.into_word(), to.into_word()],
            value.clone(),
        ))
        .expect("an ERC-20 transfer");
        assert_eq!((t.from, t.to, t.value), (from, to, U256::from(10_000u64)));
        let nft = log(
            vec![TRANSFER_TOPIC, from.into_word(), to.into_word(), B256::ZERO],
            Vec::new(),
        );
        assert!(decode_transfer(&nft).is_none());
        assert!(decode_transfer(&log(vec![TRANSFER_TOPIC], value)).is_none());
    }

    #[test]
    fn schemas_are_told_from_examples() {
        assert!(looks_like_schema(
            &json!({"type": "object", "properties": {"a": {"type": "string"}}})
        ));
        assert!(looks_like_schema(&json!({"type": ["string", "null"]})));
        assert!(!looks_like_schema(&json!({"type": "cloudy", "temp": 3})));
        assert!(!looks_like_schema(&json!({"city": "Paris"})));
        assert!(!looks_like_schema(&json!("string")));
    }

    #[test]
    fn example_shapes_compare_keys_and_types() {
        let example = json!({"city": "Paris", "temp_c": 12.5, "note": null});
        assert_eq!(
            shape_mismatch(&example, &json!({"city": "Oslo", "temp_c": 3, "note": [1]})),
            None
        );
        let why = shape_mismatch(&example, &json!({"city": 5, "temp_c": 1, "x": 1})).unwrap();
        assert!(why.contains("\"city\" is a number"), "{why}");
        assert!(why.contains("missing key \"note\""), "{why}");
        assert!(why.contains("unexpected key \"x\""), "{why}");
        assert!(shape_mismatch(&example, &json!([1])).is_some());
        assert!(shape_mismatch(&json!([{"a": 1}]), &json!([])).is_some());
        assert_eq!(shape_mismatch(&json!([]), &json!([])), None);
    }

    #[test]
    fn operator_files_parse_strictly() {
        let file = parse_operator_file(
            br#"{"schema":"x402-probe.operator/1","operator":"x","wallets":[{"network":"eip155:1","address":"0x209693bc6afc0c5328ba36faf03c514ef312287c"}],"refund":{"on":"charged_without_delivery","within_seconds":30}}"#,
        )
        .expect("valid");
        assert_eq!(file.wallets.len(), 1);
        assert_eq!(
            file.refund,
            Some(RefundRule {
                on: "charged_without_delivery".into(),
                within_seconds: 30
            })
        );
        let file = parse_operator_file(br#"{"schema":"x402-probe.operator/1","wallets": []}"#)
            .expect("no refund is fine");
        assert_eq!(file.refund, None);
        let file = parse_operator_file(
            br#"{"schema":"x402-probe.operator/1","wallets": [{"address": "0x209693bc6afc0c5328ba36faf03c514ef312287c"}]}"#,
        )
        .expect("a wallet without a network is valid on every network");
        assert_eq!(file.wallets[0].network, None);
        for bad in [
            &br#"{"wallets": ["#[..],
            br#"[]"#,
            br#"{"schema":"x402-probe.operator/1","refund": {"on": "x", "within_seconds": 1}}"#,
            br#"{"schema":"x402-probe.operator/1","wallets": [{"network": "eip155:1"}]}"#,
            br#"{"schema":"x402-probe.operator/1","wallets": [{"network": 1, "address": "0x209693bc6afc0c5328ba36faf03c514ef312287c"}]}"#,
            br#"{"schema":"x402-probe.operator/1","wallets": [], "refund": {"on": "x", "within_seconds": -1}}"#,
            br#"{"schema":"x402-probe.operator/1","wallets": [], "refund": {"on": "x", "within_seconds": 0}}"#,
            br#"{"wallets": []}"#,
            br#"{"schema": "x402-probe.operator/2", "wallets": []}"#,
        ] {
            assert!(
                parse_operator_file(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    // R6 against a reference: hand-written reads and outputs.

    fn npm_read(status: u16, body: &str) -> crate::evidence::reference::ReferenceRead {
        crate::evidence::reference::ReferenceRead::Http {
            at_ms: 1_800_000_000_000,
            exchange: Box::new(Exchange {
                url: "http://registry.test/left-pad/latest".into(),
                response: Some(HttpResponse::new(
                    status,
                    Vec::new(),
                    body.as_bytes().to_vec(),
                    false,
                    80,
                )),
                ..Exchange::default()
            }),
        }
    }

    fn supply_read(value: u64) -> crate::evidence::reference::ReferenceRead {
        crate::evidence::reference::ReferenceRead::Chain {
            at_ms: 1_800_000_000_000,
            rpc_url: "http://rpc.test".into(),
            to: ASSET.to_string(),
            data: "0x18160ddd".into(),
            block: ChainRead::Read { value: 10 },
            result: ChainRead::Read {
                value: format!("0x{}", hex::encode(U256::from(value).to_be_bytes::<32>())),
            },
            sha256: None,
        }
    }

    fn with_reference(
        output: &str,
        adapter: crate::evidence::reference::ReferenceId,
        before: crate::evidence::reference::ReferenceRead,
        after: Option<crate::evidence::reference::ReferenceRead>,
    ) -> PaidObservation {
        let (headers, _) = json_ok();
        let mut obs = observation(
            200,
            headers,
            output.as_bytes().to_vec(),
            vec![transfer(WALLET, PAY_TO, 10_000, 1)],
            true,
        );
        obs.reference = Some(crate::evidence::reference::ReferenceSeen {
            adapter,
            key: Some("left-pad".into()),
            skipped: None,
            before: Some(before),
            after,
        });
        obs
    }

    #[test]
    fn r6_compares_typed_fields_with_either_read() {
        use crate::evidence::reference::ReferenceId::{Erc20Supply, Npm};
        let latest =
            r#"{"name":"left-pad","version":"1.3.0","license":"WTFPL","description":"pad"}"#;
        let previous =
            r#"{"name":"left-pad","version":"1.2.0","license":"WTFPL","description":"pad"}"#;
        let honest = r#"{"name":"left-pad","version":"v1.3.0","license":"WTFPL"}"#;
        let stale = r#"{"name":"left-pad","version":"1.2.0"}"#;
        let pass = |o: &PaidObservation| outcome_of(o, "R6");
        assert_eq!(
            pass(&with_reference(honest, Npm, npm_read(200, latest), None)),
            Outcome::Pass
        );
        assert_eq!(
            pass(&with_reference(stale, Npm, npm_read(200, latest), None)),
            Outcome::Fail
        );
        // Published between the reads: the version of either read passes.
        assert_eq!(
            pass(&with_reference(
                stale,
                Npm,
                npm_read(200, previous),
                Some(npm_read(200, latest))
            )),
            Outcome::Pass
        );
        // A version as a number, an output with none of the fields, an output that is not JSON.
        assert_eq!(
            pass(&with_reference(
                r#"{"name":"left-pad","version":1.3}"#,
                Npm,
                npm_read(200, latest),
                None
            )),
            Outcome::Fail
        );
        assert_eq!(
            pass(&with_reference(
                r#"{"city":"Oslo"}"#,
                Npm,
                npm_read(200, latest),
                None
            )),
            Outcome::Fail
        );
        assert_eq!(
            pass(&with_reference("[1,2]", Npm, npm_read(200, latest), None)),
            Outcome::Fail
        );
        // The source does not know the package, or could not be read: ours, never a fail.
        assert_eq!(
            pass(&with_reference(
                stale,
                Npm,
                npm_read(404, "{}"),
                Some(npm_read(404, "{}"))
            )),
            Outcome::Unmeasured
        );
        assert_eq!(
            pass(&with_reference(stale, Npm, npm_read(503, "busy"), None)),
            Outcome::Unmeasured
        );
        // A chain-backed supply, exact in atomic units.
        let supply = |out: &str| {
            with_reference(
                out,
                Erc20Supply,
                supply_read(5_000_000),
                Some(supply_read(5_000_001)),
            )
        };
        assert_eq!(pass(&supply(r#"{"totalSupply":"5000000"}"#)), Outcome::Pass);
        assert_eq!(pass(&supply(r#"{"totalSupply":5000001}"#)), Outcome::Pass);
        assert_eq!(
            pass(&supply(r#"{"totalSupply":"10000000"}"#)),
            Outcome::Fail
        );
        let failed = with_reference(
            r#"{"totalSupply":"5000000"}"#,
            Erc20Supply,
            crate::evidence::reference::ReferenceRead::Chain {
                at_ms: 0,
                rpc_url: "http://rpc.test".into(),
                to: ASSET.to_string(),
                data: "0x18160ddd".into(),
                block: ChainRead::Failed {
                    error: "connection refused".into(),
                },
                result: ChainRead::Failed {
                    error: "connection refused".into(),
                },
                sha256: None,
            },
            None,
        );
        assert_eq!(pass(&failed), Outcome::Unmeasured);
        // A subject linked to a reference whose request named no key.
        let mut unnamed = with_reference(honest, Npm, npm_read(200, latest), None);
        if let Some(r) = unnamed.reference.as_mut() {
            r.skipped = Some("the request names no package name".into());
        }
        assert_eq!(pass(&unnamed), Outcome::Unmeasured);
        // The reference survives storage, and a refused call is unmeasured as before.
        let obs = with_reference(honest, Npm, npm_read(200, latest), None);
        let back: PaidObservation =
            serde_json::from_str(&serde_json::to_string(&obs).unwrap()).unwrap();
        assert_eq!(back, obs);
        let mut refused = obs;
        refused.decision = Decision::Refused {
            refusals: Vec::new(),
        };
        assert_eq!(pass(&refused), Outcome::Unmeasured);
    }
}
