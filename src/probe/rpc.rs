//! The fixed RPC: one configured JSON-RPC URL through which every chain fact is read.
//!
//! It is reached with the same HTTP prober as the endpoints (fresh connection, timeouts, bounded
//! bodies), but the address guard does not apply: the operator chose this URL. Every failure is an
//! [`RpcError`], which chain-dependent checks turn into `unmeasured`, never `fail`: an HTTP status
//! other than 2xx, a body that is not JSON (HTML, nesting past serde_json's depth limit), a body
//! past the cap, an answer to another request id, no `result`, a result of the wrong shape, and
//! every JSON-RPC error object but one. The one exception is a call the node executed and the
//! contract reverted ([`RpcError::is_revert`]): that is the contract's answer, a fact about it.

use alloy::primitives::{Address, B256, Bytes, U256};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::probe::http::{FetchConfig, FetchRequest, HttpResponse, fetch};

/// Why a chain read failed. None of these says anything about the subject.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RpcError {
    #[error("RPC {url} unreachable during {method}: {message}")]
    Unreachable {
        url: String,
        method: String,
        message: String,
    },
    #[error("RPC {method} failed with code {code}: {message}")]
    Node {
        method: String,
        code: i64,
        message: String,
    },
    #[error("RPC {method} answered something that is not a JSON-RPC result: {message}")]
    BadResponse { method: String, message: String },
}

impl RpcError {
    /// Whether the node ran the call and the contract reverted: the EIP-1474 code 3 ("execution
    /// reverted", with revert data: geth, anvil, erigon), or a node error whose message says the
    /// execution reverted (geth's -32000 "execution reverted" without revert data, Nethermind's
    /// "VM execution error... revert"). Every other node error (rate limits, "header not found",
    /// missing trie nodes, internal errors) is the node's trouble, not the contract's.
    pub fn is_revert(&self) -> bool {
        match self {
            RpcError::Node { code, message, .. } => {
                *code == 3 || message.to_ascii_lowercase().contains("revert")
            }
            _ => false,
        }
    }
}

pub use crate::evidence::chain::{LogEntry, TxReceipt};

#[derive(Debug, Clone)]
pub struct Rpc {
    url: String,
    http: FetchConfig,
}

impl Rpc {
    pub fn new(url: impl Into<String>) -> Rpc {
        let http = FetchConfig {
            allow_private: true,
            ..FetchConfig::default()
        };
        Rpc {
            url: url.into(),
            http,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut req =
            FetchRequest::get(self.url.clone()).with_header("content-type", "application/json");
        req.method = "POST".into();
        req.body = body.to_string().into_bytes();
        let ex = fetch(&self.http, &req).await;
        let unreachable = |message: String| RpcError::Unreachable {
            url: self.url.clone(),
            method: method.to_string(),
            message,
        };
        if let Some(e) = &ex.error {
            return Err(unreachable(e.message.clone()));
        }
        let resp = ex
            .response
            .ok_or_else(|| unreachable("no response".into()))?;
        read_result(method, &resp)
    }

    pub async fn chain_id(&self) -> Result<u64, RpcError> {
        let v = self.call("eth_chainId", json!([])).await?;
        parse_quantity(&v).ok_or_else(|| self.bad("eth_chainId", &v))
    }

    pub async fn block_number(&self) -> Result<u64, RpcError> {
        let v = self.call("eth_blockNumber", json!([])).await?;
        parse_quantity(&v).ok_or_else(|| self.bad("eth_blockNumber", &v))
    }

    /// `eth_call` at the latest block.
    pub async fn eth_call(&self, to: Address, data: &[u8]) -> Result<Bytes, RpcError> {
        let params = json!([{"to": to, "data": format!("0x{}", hex::encode(data))}, "latest"]);
        let v = self.call("eth_call", params).await?;
        v.as_str()
            .and_then(|s| s.parse::<Bytes>().ok())
            .ok_or_else(|| self.bad("eth_call", &v))
    }

    /// The receipt, or `None` when the node does not know the transaction.
    pub async fn receipt(&self, tx: B256) -> Result<Option<TxReceipt>, RpcError> {
        let v = self.call("eth_getTransactionReceipt", json!([tx])).await?;
        if v.is_null() {
            return Ok(None);
        }
        parse_receipt(&v)
            .map(Some)
            .ok_or_else(|| self.bad("eth_getTransactionReceipt", &v))
    }

    /// Logs of `address` with the given topics (None = any) over a block range.
    pub async fn logs(
        &self,
        address: Address,
        topics: &[Option<B256>],
        from_block: u64,
        to_block: u64,
    ) -> Result<Vec<LogEntry>, RpcError> {
        let topics: Vec<Value> = topics
            .iter()
            .map(|t| t.map_or(Value::Null, |t| json!(t)))
            .collect();
        let filter = json!({
            "address": address,
            "topics": topics,
            "fromBlock": format!("0x{from_block:x}"),
            "toBlock": format!("0x{to_block:x}"),
        });
        let v = self.call("eth_getLogs", json!([filter])).await?;
        let arr = v.as_array().ok_or_else(|| self.bad("eth_getLogs", &v))?;
        arr.iter()
            .map(|l| parse_log(l).ok_or_else(|| self.bad("eth_getLogs", l)))
            .collect()
    }

    /// Latest block timestamp (unix seconds).
    /// A block's timestamp (unix seconds).
    pub async fn block_timestamp(&self, block: u64) -> Result<u64, RpcError> {
        let v = self
            .call(
                "eth_getBlockByNumber",
                json!([format!("0x{block:x}"), false]),
            )
            .await?;
        v.get("timestamp")
            .and_then(Value::as_str)
            .and_then(|s| u64::from_str_radix(s.strip_prefix("0x")?, 16).ok())
            .ok_or_else(|| RpcError::BadResponse {
                method: "eth_getBlockByNumber".into(),
                message: format!("block {block} has no readable timestamp"),
            })
    }

    pub async fn latest_timestamp(&self) -> Result<u64, RpcError> {
        let v = self
            .call("eth_getBlockByNumber", json!(["latest", false]))
            .await?;
        v.get("timestamp")
            .and_then(parse_quantity)
            .ok_or_else(|| self.bad("eth_getBlockByNumber", &v))
    }

    fn bad(&self, method: &str, v: &Value) -> RpcError {
        unexpected_answer(method, v)
    }
}

/// The `result` of one JSON-RPC answer, or why there is none. Pure: the parsing half of
/// [`Rpc::call`] (public for the fuzz targets only).
#[doc(hidden)]
pub fn read_result(method: &str, resp: &HttpResponse) -> Result<Value, RpcError> {
    let bad = |message: String| RpcError::BadResponse {
        method: method.to_string(),
        message,
    };
    if resp.body_truncated {
        return Err(bad("response larger than the body cap".into()));
    }
    if !(200..300).contains(&resp.status) {
        return Err(bad(format!("HTTP {}", resp.status)));
    }
    let v: Value = serde_json::from_slice(&resp.body).map_err(|e| {
        bad(format!(
            "HTTP {} with a body that is not JSON: {e}",
            resp.status
        ))
    })?;
    // One request, id 1: an answer to another id (or a batch, or no id) is not ours.
    if v.get("id") != Some(&json!(1)) {
        let id = v.get("id").map_or("none".to_string(), |id| {
            let text = id.to_string();
            text[..text.floor_char_boundary(MAX_QUOTED_BYTES)].to_string()
        });
        return Err(bad(format!("an answer to request id {id}, not 1")));
    }
    if let Some(err) = v.get("error") {
        return Err(RpcError::Node {
            method: method.to_string(),
            code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        });
    }
    v.get("result")
        .cloned()
        .ok_or_else(|| bad("no result".into()))
}

/// Most bytes of a result of the wrong shape quoted in an error.
const MAX_QUOTED_BYTES: usize = 200;

/// A result of the wrong shape, quoted in part (public for the fuzz targets only).
#[doc(hidden)]
pub fn unexpected_answer(method: &str, v: &Value) -> RpcError {
    let text = v.to_string();
    // Cut at a character boundary: the node's JSON may hold any text (found by the
    // `rpc_response` fuzz target: `String::truncate` inside a character panicked).
    let shown = &text[..text.floor_char_boundary(MAX_QUOTED_BYTES)];
    RpcError::BadResponse {
        method: method.to_string(),
        message: format!("unexpected {shown}"),
    }
}

/// Public for the fuzz targets only.
#[doc(hidden)]
pub fn parse_quantity(v: &Value) -> Option<u64> {
    u64::from_str_radix(v.as_str()?.strip_prefix("0x")?, 16).ok()
}

/// Public for the fuzz targets only.
#[doc(hidden)]
pub fn parse_log(v: &Value) -> Option<LogEntry> {
    Some(LogEntry {
        address: v.get("address")?.as_str()?.parse().ok()?,
        topics: v
            .get("topics")?
            .as_array()?
            .iter()
            .map(|t| t.as_str()?.parse().ok())
            .collect::<Option<Vec<B256>>>()?,
        data: v.get("data")?.as_str()?.parse().ok()?,
        transaction_hash: v
            .get("transactionHash")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok()),
        block_number: v.get("blockNumber").and_then(parse_quantity),
    })
}

/// Public for the fuzz targets only.
#[doc(hidden)]
pub fn parse_receipt(v: &Value) -> Option<TxReceipt> {
    Some(TxReceipt {
        transaction_hash: v.get("transactionHash")?.as_str()?.parse().ok()?,
        block_number: parse_quantity(v.get("blockNumber")?)?,
        block_hash: v.get("blockHash")?.as_str()?.parse().ok()?,
        status_ok: v.get("status").and_then(parse_quantity) == Some(1),
        logs: v
            .get("logs")?
            .as_array()?
            .iter()
            .map(parse_log)
            .collect::<Option<Vec<_>>>()?,
        from: v
            .get("from")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok()),
    })
}

/// ABI-decode a `string` return value.
pub fn decode_string(data: &[u8]) -> Option<String> {
    if data.len() < 64 {
        return None;
    }
    let offset = usize::try_from(U256::from_be_slice(&data[..32])).ok()?;
    let len_end = offset.checked_add(32)?;
    let len = usize::try_from(U256::from_be_slice(data.get(offset..len_end)?)).ok()?;
    let bytes = data.get(len_end..len_end.checked_add(len)?)?;
    String::from_utf8(bytes.to_vec()).ok()
}

/// Function selectors of the token reads this tool makes.
pub mod selector {
    /// `name()`
    pub const NAME: [u8; 4] = [0x06, 0xfd, 0xde, 0x03];
    /// `version()`
    pub const VERSION: [u8; 4] = [0x54, 0xfd, 0x4d, 0x50];
    /// `DOMAIN_SEPARATOR()`
    pub const DOMAIN_SEPARATOR: [u8; 4] = [0x36, 0x44, 0xe5, 0x15];
    /// `authorizationState(address,bytes32)`
    pub const AUTHORIZATION_STATE: [u8; 4] = [0xe9, 0x4a, 0x01, 0x02];
    /// `balanceOf(address)`
    pub const BALANCE_OF: [u8; 4] = [0x70, 0xa0, 0x82, 0x31];
}

/// A token's EIP-712 domain fields, each `None` when the contract reverted or returned something that
/// is not the expected ABI value (it lacks the function).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenDomainFields {
    pub name: Option<String>,
    pub version: Option<String>,
    pub domain_separator: Option<B256>,
}

/// What a token says its EIP-712 domain is (C3's chain read).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenDomainRead {
    pub name: String,
    pub version: String,
    pub domain_separator: B256,
}

impl Rpc {
    /// An `eth_call` whose revert is a fact about the contract (`Ok(None)`); every other failure
    /// is the RPC's (an error: the read is unmeasured, never held against the token).
    async fn call_or_none(&self, to: Address, data: &[u8]) -> Result<Option<Bytes>, RpcError> {
        match self.eth_call(to, data).await {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.is_revert() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Each domain field on its own, so a token lacking one is told apart from an RPC outage.
    pub async fn token_domain_fields(&self, token: Address) -> Result<TokenDomainFields, RpcError> {
        let name = self.call_or_none(token, &selector::NAME).await?;
        let version = self.call_or_none(token, &selector::VERSION).await?;
        let sep = self
            .call_or_none(token, &selector::DOMAIN_SEPARATOR)
            .await?;
        Ok(TokenDomainFields {
            name: name.as_ref().and_then(|b| decode_string(b)),
            version: version.as_ref().and_then(|b| decode_string(b)),
            domain_separator: sep.filter(|s| s.len() == 32).map(|s| B256::from_slice(&s)),
        })
    }

    pub async fn token_domain(&self, token: Address) -> Result<TokenDomainRead, RpcError> {
        let name = self.eth_call(token, &selector::NAME).await?;
        let version = self.eth_call(token, &selector::VERSION).await?;
        let sep = self.eth_call(token, &selector::DOMAIN_SEPARATOR).await?;
        let bad = |what: &str| RpcError::BadResponse {
            method: "eth_call".into(),
            message: format!("{what} of {token} is not ABI-encoded as expected"),
        };
        Ok(TokenDomainRead {
            name: decode_string(&name).ok_or_else(|| bad("name()"))?,
            version: decode_string(&version).ok_or_else(|| bad("version()"))?,
            domain_separator: (sep.len() == 32)
                .then(|| B256::from_slice(&sep))
                .ok_or_else(|| bad("DOMAIN_SEPARATOR()"))?,
        })
    }

    /// `authorizationState(authorizer, nonce)`: true once the nonce is used or canceled.
    pub async fn authorization_state(
        &self,
        token: Address,
        authorizer: Address,
        nonce: B256,
    ) -> Result<bool, RpcError> {
        let mut data = selector::AUTHORIZATION_STATE.to_vec();
        data.extend_from_slice(authorizer.into_word().as_slice());
        data.extend_from_slice(nonce.as_slice());
        let out = self.eth_call(token, &data).await?;
        if out.len() != 32 {
            return Err(RpcError::BadResponse {
                method: "eth_call".into(),
                message: "authorizationState did not return one word".into(),
            });
        }
        Ok(out[31] == 1)
    }

    pub async fn balance_of(&self, token: Address, owner: Address) -> Result<U256, RpcError> {
        let mut data = selector::BALANCE_OF.to_vec();
        data.extend_from_slice(owner.into_word().as_slice());
        let out = self.eth_call(token, &data).await?;
        (out.len() == 32)
            .then(|| U256::from_be_slice(&out))
            .ok_or_else(|| RpcError::BadResponse {
                method: "eth_call".into(),
                message: "balanceOf did not return one word".into(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `rpc_response` fuzz target (its input is in fuzz/regressions/rpc_response/):
    /// the quote was cut with `String::truncate` at byte 200, which panics inside a character.
    #[test]
    fn a_quoted_result_is_cut_on_a_character_boundary() {
        // One to four bytes per character, shifted by 0..4 bytes of padding: every way a
        // character can straddle the cut.
        for wide in ["é", "€", "😀"] {
            for pad in 0..4 {
                let v = Value::String(format!("{}{}", "a".repeat(pad), wide.repeat(300)));
                let RpcError::BadResponse { method, message } = unexpected_answer("eth_call", &v)
                else {
                    panic!("not a bad response")
                };
                assert_eq!(method, "eth_call");
                let quoted = message.strip_prefix("unexpected ").expect("the prefix");
                assert!(
                    quoted.len() <= MAX_QUOTED_BYTES && quoted.len() + 4 > MAX_QUOTED_BYTES,
                    "{} bytes quoted",
                    quoted.len()
                );
                assert!(v.to_string().starts_with(quoted));
            }
        }
        // A short result is quoted whole.
        let RpcError::BadResponse { message, .. } = unexpected_answer("eth_call", &Value::Null)
        else {
            panic!("not a bad response")
        };
        assert_eq!(message, "unexpected null");
    }
}
