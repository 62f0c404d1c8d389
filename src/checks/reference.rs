//! R6 against a reference, pure: the reference adapters declared in `probes/references.json`
//! (which endpoints each applies to, where the request names its key, which typed fields are
//! compared, the tolerance), what a request names for an adapter, where the source is read, and
//! the comparison of a paid output with the reads taken right before and after the paid request.

use std::sync::OnceLock;

use alloy::primitives::U256;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::evidence::chain::ChainRead;
use crate::evidence::http::FetchRequest;
use crate::evidence::reference::{ReferenceId, ReferenceRead, ReferenceSeen};
use crate::evidence::{Conclusion, sha256_hex};
use crate::http_url::{percent_decode, percent_encode};

/// `probes/references.json`, embedded.
pub const DECLARATION: &str = include_str!("../../probes/references.json");

/// The calldata of `totalSupply()`.
pub const TOTAL_SUPPLY_CALLDATA: [u8; 4] = [0x18, 0x16, 0x0d, 0xdd];

/// The declaration file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Declaration {
    pub schema: String,
    pub about: String,
    pub references: Vec<Adapter>,
}

/// One reference adapter.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adapter {
    pub id: ReferenceId,
    pub title: String,
    pub source: Source,
    pub applies_to: String,
    pub key: KeySpec,
    pub read: String,
    pub fields: Vec<Field>,
    pub tolerance: String,
}

/// Where an adapter reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    NpmRegistry,
    Chain,
}

/// Where the request names the adapter's key: the first query parameter of `query` present,
/// else the first top-level string field of `body` (a JSON object) present.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySpec {
    pub what: String,
    pub query: Vec<String>,
    pub body: Vec<String>,
}

/// One compared field: the output's top-level key, where the reference holds it, its type.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Field {
    pub output: String,
    /// A JSON pointer into the reference document (HTTP sources), or the call read (chain).
    pub reference: String,
    #[serde(rename = "type")]
    pub kind: FieldType,
}

/// How a field is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldType {
    /// Equal strings.
    String,
    /// Equal versions, a leading `v` or `=` and `+build` metadata ignored.
    Semver,
    /// Equal unsigned integers: a decimal string or a JSON integer in the output.
    Uint256,
}

/// The declaration, parsed once (`Err`: the embedded file does not read, which a unit test
/// rules out).
pub fn declaration() -> Result<&'static Declaration, &'static str> {
    static PARSED: OnceLock<Result<Declaration, String>> = OnceLock::new();
    PARSED
        .get_or_init(|| serde_json::from_str(DECLARATION).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(String::as_str)
}

/// The adapter declared for `id`.
pub fn adapter(id: ReferenceId) -> Option<&'static Adapter> {
    declaration().ok()?.references.iter().find(|a| a.id == id)
}

/// What `request` names for `adapter` (the package, the token), when it names it.
pub fn request_key(adapter: &Adapter, request: &FetchRequest) -> Option<String> {
    let query = request.url.split_once('?').map(|(_, q)| q).unwrap_or("");
    let query = query.split('#').next().unwrap_or("");
    let pairs: Vec<(String, String)> = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| {
            let decode = |s: &str| {
                String::from_utf8_lossy(&percent_decode(&s.replace('+', " "))).into_owned()
            };
            (decode(k), decode(v))
        })
        .collect();
    let from_query = adapter.key.query.iter().find_map(|name| {
        pairs
            .iter()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.clone())
    });
    if from_query.is_some() {
        return from_query;
    }
    let body: Value = serde_json::from_slice(&request.body).ok()?;
    adapter.key.body.iter().find_map(|name| {
        body.get(name)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    })
}

/// The npm registry's URL of a package's latest version document: the registry's base (no
/// trailing slash needed), the name with `/` (of a scoped package) as `%2f`.
pub fn npm_latest_url(registry: &str, package: &str) -> String {
    let name = match package.strip_prefix('@') {
        Some(scoped) => format!("@{}", percent_encode(scoped).replace("%2F", "%2f")),
        None => percent_encode(package),
    };
    format!("{}/{name}/latest", registry.trim_end_matches('/'))
}

/// What one read gives: the reference document (a JSON value) or the number read, or why not.
#[derive(Debug, Clone, PartialEq)]
enum ReadValue {
    Document(Value),
    Number(U256),
    /// The source answered that the key does not exist (HTTP 404 or 410).
    Absent(String),
    /// Could not be read (ours or the source's network, a body that is not JSON...).
    Failed(String),
}

fn read_value(read: &ReferenceRead) -> ReadValue {
    match read {
        ReferenceRead::Http { exchange, .. } => {
            let Some(response) = &exchange.response else {
                return ReadValue::Failed(
                    exchange
                        .error
                        .as_ref()
                        .map(|e| e.to_string())
                        .unwrap_or_else(|| "no response".into()),
                );
            };
            match response.status {
                200 => {}
                404 | 410 => return ReadValue::Absent(format!("HTTP {}", response.status)),
                other => return ReadValue::Failed(format!("HTTP {other}")),
            }
            if response.body_truncated {
                return ReadValue::Failed("the document is larger than our read bound".into());
            }
            match serde_json::from_slice::<Value>(&response.body) {
                Ok(v) if v.is_object() => ReadValue::Document(v),
                Ok(_) => ReadValue::Failed("the document is not a JSON object".into()),
                Err(e) => ReadValue::Failed(format!("the document is not JSON: {e}")),
            }
        }
        ReferenceRead::Chain { result, .. } => match result {
            ChainRead::Read { value } => {
                let digits = value.strip_prefix("0x").unwrap_or(value);
                match hex::decode(digits) {
                    Ok(bytes) if bytes.len() == 32 => {
                        ReadValue::Number(U256::from_be_slice(&bytes))
                    }
                    Ok(bytes) => ReadValue::Failed(format!(
                        "the call returned {} bytes, not one 32-byte word (not an ERC-20?)",
                        bytes.len()
                    )),
                    Err(e) => ReadValue::Failed(format!("the call returned no hex: {e}")),
                }
            }
            ChainRead::Failed { error } => ReadValue::Failed(format!("our RPC: {error}")),
            ChainRead::Skipped { why } => ReadValue::Failed(why.clone()),
        },
    }
}

/// A field's value in one read, typed for the comparison (`None`: the read does not hold it).
fn reference_field(value: &ReadValue, field: &Field) -> Option<Value> {
    match value {
        ReadValue::Document(doc) => doc.pointer(&field.reference).cloned(),
        ReadValue::Number(n) => Some(Value::String(n.to_string())),
        ReadValue::Absent(_) | ReadValue::Failed(_) => None,
    }
}

fn semver_core(v: &str) -> &str {
    let v = v.trim();
    let v = v
        .strip_prefix('v')
        .or_else(|| v.strip_prefix('='))
        .unwrap_or(v);
    v.split('+').next().unwrap_or(v)
}

fn uint_of(v: &Value) -> Option<U256> {
    match v {
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            U256::from_str_radix(s, 10).ok()
        }
        Value::Number(n) => n.as_u64().map(U256::from),
        _ => None,
    }
}

/// Whether the output's value equals the reference's, under the field's type; `Err` when the
/// output's value is not of the field's type.
fn equal(kind: FieldType, output: &Value, reference: &Value) -> Result<bool, String> {
    match kind {
        FieldType::String => {
            let out = output.as_str().ok_or_else(|| {
                format!(
                    "a JSON {}, not a string",
                    crate::x402::parse::json_type(output)
                )
            })?;
            Ok(reference.as_str() == Some(out))
        }
        FieldType::Semver => {
            let out = output.as_str().ok_or_else(|| {
                format!(
                    "a JSON {}, not a version string",
                    crate::x402::parse::json_type(output)
                )
            })?;
            Ok(reference.as_str().map(semver_core) == Some(semver_core(out)))
        }
        FieldType::Uint256 => {
            let out = uint_of(output).ok_or_else(|| {
                "not an unsigned integer (a decimal string or a JSON integer)".to_string()
            })?;
            Ok(uint_of(reference) == Some(out))
        }
    }
}

fn read_detail(read: Option<&ReferenceRead>) -> Value {
    match read {
        None => Value::Null,
        Some(ReferenceRead::Http { at_ms, exchange }) => json!({
            "url": exchange.url,
            "at_ms": at_ms,
            "status": exchange.status(),
            "sha256": exchange.response.as_ref().map(|r| r.body_sha256.clone()),
        }),
        Some(ReferenceRead::Chain {
            at_ms,
            rpc_url,
            to,
            data,
            block,
            sha256,
            ..
        }) => json!({
            "rpc": rpc_url,
            "to": to,
            "data": data,
            "at_ms": at_ms,
            "block": match block { ChainRead::Read { value } => Some(*value), _ => None },
            "sha256": sha256,
        }),
    }
}

/// R6 for a subject linked to a reference: the paid output (`Ok`: the decoded 2xx body; `Err`:
/// why there is none to compare) against the reads. Pass when every declared field the output
/// carries equals the same field of the read before or of the read after, fail when one differs
/// (or has the wrong type) or the output carries none of them; unmeasured when no read could be
/// used or the source does not know the key.
pub fn evaluate(seen: &ReferenceSeen, output: Result<&[u8], String>) -> Conclusion {
    let Some(adapter) = adapter(seen.adapter) else {
        return Conclusion::unmeasured(format!(
            "the reference {} is not declared in this build's probes/references.json",
            seen.adapter
        ));
    };
    let mut detail = json!({
        "reference": seen.adapter.as_str(),
        "key": seen.key,
        "before": read_detail(seen.before.as_ref()),
        "after": read_detail(seen.after.as_ref()),
    });
    if let Some(why) = &seen.skipped {
        return Conclusion::unmeasured(format!("the reference was not read: {why}"))
            .with_detail(detail);
    }
    let reads: Vec<ReadValue> = [seen.before.as_ref(), seen.after.as_ref()]
        .into_iter()
        .flatten()
        .map(read_value)
        .collect();
    let usable: Vec<&ReadValue> = reads
        .iter()
        .filter(|r| matches!(r, ReadValue::Document(_) | ReadValue::Number(_)))
        .collect();
    if usable.is_empty() {
        let why: Vec<String> = reads
            .iter()
            .map(|r| match r {
                ReadValue::Absent(w) => format!("the source does not know it ({w})"),
                ReadValue::Failed(w) => w.clone(),
                _ => String::new(),
            })
            .collect();
        let key = seen.key.as_deref().unwrap_or("?");
        return Conclusion::unmeasured(format!(
            "{} could not be read for {key}: {}",
            adapter.title,
            if why.is_empty() {
                "no read was made".to_string()
            } else {
                why.join("; ")
            }
        ))
        .with_detail(detail);
    }
    let bytes = match output {
        Ok(bytes) => bytes,
        Err(why) => return Conclusion::unmeasured(why).with_detail(detail),
    };
    detail["output_sha256"] = json!(sha256_hex(bytes));
    let Some(object) = serde_json::from_slice::<Value>(bytes)
        .ok()
        .filter(Value::is_object)
    else {
        return Conclusion::fail(format!(
            "the output is not a JSON object: nothing of {} to compare",
            adapter.title
        ))
        .with_detail(detail);
    };
    let mut compared = Vec::new();
    let mut wrong = Vec::new();
    for field in &adapter.fields {
        let Some(out) = object.get(&field.output) else {
            continue;
        };
        let refs: Vec<Value> = usable
            .iter()
            .filter_map(|r| reference_field(r, field))
            .collect();
        if refs.is_empty() {
            compared.push(
                json!({"field": field.output, "output": out, "reference": null, "compared": false}),
            );
            continue;
        }
        let verdicts: Vec<Result<bool, String>> =
            refs.iter().map(|r| equal(field.kind, out, r)).collect();
        let matched = verdicts.iter().any(|v| v == &Ok(true));
        let type_error = verdicts.iter().find_map(|v| v.as_ref().err().cloned());
        compared.push(json!({
            "field": field.output, "output": out, "reference": refs, "matched": matched,
        }));
        if !matched {
            wrong.push(match type_error {
                Some(why) => format!("{} is {why}", field.output),
                None => format!(
                    "{} is {} where the reference says {}",
                    field.output,
                    out,
                    refs.iter()
                        .map(Value::to_string)
                        .collect::<Vec<_>>()
                        .join(" / ")
                ),
            });
        }
    }
    let count = compared
        .iter()
        .filter(|c| c.get("compared") != Some(&json!(false)))
        .count();
    detail["fields"] = Value::Array(compared);
    let key = seen.key.as_deref().unwrap_or("?");
    if count == 0 {
        let names: Vec<&str> = adapter.fields.iter().map(|f| f.output.as_str()).collect();
        return Conclusion::fail(format!(
            "the output carries none of {} ({} for {key}) to compare",
            names.join(", "),
            adapter.title
        ))
        .with_detail(detail);
    }
    if wrong.is_empty() {
        Conclusion::pass(format!(
            "{count} field(s) equal {} for {key}",
            adapter.title
        ))
        .with_detail(detail)
    } else {
        Conclusion::fail(format!("{} for {key}: {}", adapter.title, wrong.join("; ")))
            .with_detail(detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declaration_reads_and_declares_every_adapter_once() {
        let d = declaration().expect("probes/references.json reads");
        assert_eq!(d.schema, "x402-probe.references/1");
        let ids: Vec<ReferenceId> = d.references.iter().map(|a| a.id).collect();
        assert_eq!(ids, ReferenceId::ALL.to_vec());
        for a in &d.references {
            assert!(!a.fields.is_empty(), "{} compares no field", a.id);
            assert!(!a.key.query.is_empty() || !a.key.body.is_empty());
        }
    }

    #[test]
    fn keys_come_from_the_query_then_the_body() {
        let npm = adapter(ReferenceId::Npm).unwrap();
        let get = FetchRequest::get("https://a.example/npm?x=1&package=%40scope%2Fpkg");
        assert_eq!(request_key(npm, &get).as_deref(), Some("@scope/pkg"));
        let mut post = FetchRequest::get("https://a.example/npm");
        post.body = br#"{"name": "left-pad"}"#.to_vec();
        assert_eq!(request_key(npm, &post).as_deref(), Some("left-pad"));
        assert_eq!(
            request_key(npm, &FetchRequest::get("https://a.example/npm?package=")),
            None
        );
    }

    #[test]
    fn npm_urls_encode_the_scope_slash() {
        assert_eq!(
            npm_latest_url("http://127.0.0.1:9/", "@scope/pkg"),
            "http://127.0.0.1:9/@scope%2fpkg/latest"
        );
        assert_eq!(
            npm_latest_url("http://r", "left-pad"),
            "http://r/left-pad/latest"
        );
    }

    #[test]
    fn versions_compare_without_prefix_or_build() {
        assert_eq!(
            equal(FieldType::Semver, &json!("v1.2.3+abc"), &json!("1.2.3")),
            Ok(true)
        );
        assert_eq!(
            equal(FieldType::Semver, &json!("1.2.4"), &json!("1.2.3")),
            Ok(false)
        );
        assert!(equal(FieldType::Semver, &json!(1.2), &json!("1.2")).is_err());
        assert_eq!(
            equal(FieldType::Uint256, &json!(42), &json!("42")),
            Ok(true)
        );
        assert_eq!(
            equal(FieldType::Uint256, &json!("042"), &json!("42")),
            Ok(true)
        );
        assert!(equal(FieldType::Uint256, &json!("4.2"), &json!("42")).is_err());
    }
}
