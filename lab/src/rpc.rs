//! A small JSON-RPC client for the lab's chain: typed helpers for the handful of `eth_*`, `evm_*` and
//! `anvil_*` methods the lab needs, and errors that name the method and what the node said.
//!
//! The lab talks to anvil exactly as the daemon talks to its RPC node in production: plain JSON-RPC over
//! HTTP. A full provider stack (alloy's `provider-http`) would hide the wire and cost build time for no gain.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use alloy::primitives::{Address, B256, Bytes, TxHash, U64, U256};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};

/// How long one HTTP request to the node may take. Anvil answers in milliseconds; this only bounds a hang.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `wait_receipt` polls by default. Anvil mines at once (automine); the wait covers a loaded machine.
pub const DEFAULT_RECEIPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause between two polls for a receipt.
const RECEIPT_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// The largest part of an HTTP error body kept in an error message.
const MAX_ERROR_BODY: usize = 512;

/// What went wrong talking to the node. Every variant names the JSON-RPC method.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("building the HTTP client for the RPC node failed: {0}")]
    Client(#[source] reqwest::Error),
    #[error("{method} to {url}: the node could not be reached: {source}")]
    Transport {
        method: String,
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{method}: the node answered HTTP {status}: {body}")]
    Http {
        method: String,
        status: u16,
        body: String,
    },
    #[error("{method}: RPC error {code}: {message}")]
    Node {
        method: String,
        code: i64,
        message: String,
        /// The error's `data` member, for a revert usually the ABI-encoded reason.
        data: Option<Box<Value>>,
    },
    #[error("{method}: unexpected answer: {detail}")]
    Decode { method: String, detail: String },
    #[error("{method}: nothing after waiting {waited:?}")]
    Timeout { method: String, waited: Duration },
}

impl RpcError {
    /// The revert reason when the node refused a call or transaction because the EVM reverted
    /// (anvil: code 3, message `execution reverted: <reason>`). `Some("")` for a revert without reason.
    pub fn revert_reason(&self) -> Option<&str> {
        let RpcError::Node { message, .. } = self else {
            return None;
        };
        let rest = message.strip_prefix("execution reverted")?;
        Some(rest.trim_start_matches(':').trim())
    }
}

/// A call or a transaction: `eth_call`, `eth_estimateGas` and `eth_sendTransaction` all take this shape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CallRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<Address>,
    /// `None` deploys a contract whose init code is `data`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<Address>,
    pub data: Bytes,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<U256>,
    /// `None` lets the node estimate the gas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gas: Option<U64>,
}

impl CallRequest {
    /// A call of contract `to` with calldata `data`.
    pub fn call(to: Address, data: impl Into<Bytes>) -> Self {
        CallRequest {
            to: Some(to),
            data: data.into(),
            ..CallRequest::default()
        }
    }

    /// A contract creation from `from` with init code `code`.
    pub fn deploy(from: Address, code: impl Into<Bytes>) -> Self {
        CallRequest {
            from: Some(from),
            data: code.into(),
            ..CallRequest::default()
        }
    }

    pub fn with_from(mut self, from: Address) -> Self {
        self.from = Some(from);
        self
    }

    pub fn with_value(mut self, value: U256) -> Self {
        self.value = Some(value);
        self
    }

    pub fn with_gas(mut self, gas: u64) -> Self {
        self.gas = Some(U64::from(gas));
        self
    }
}

/// A transaction receipt, reduced to what the lab reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TxReceipt {
    pub transaction_hash: TxHash,
    #[serde(deserialize_with = "quantity")]
    pub block_number: u64,
    /// `true` when the transaction succeeded, `false` when it was mined but reverted.
    #[serde(rename = "status", deserialize_with = "status_succeeded")]
    pub succeeded: bool,
    pub from: Address,
    pub to: Option<Address>,
    pub contract_address: Option<Address>,
    #[serde(deserialize_with = "quantity")]
    pub gas_used: u64,
    pub logs: Vec<Log>,
}

/// An event log as the node returns it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Log {
    /// The contract that emitted the log.
    pub address: Address,
    pub topics: Vec<B256>,
    pub data: Bytes,
    #[serde(default, deserialize_with = "optional_quantity")]
    pub block_number: Option<u64>,
    #[serde(default)]
    pub transaction_hash: Option<TxHash>,
    #[serde(default, deserialize_with = "optional_quantity")]
    pub log_index: Option<u64>,
    #[serde(default)]
    pub removed: bool,
}

/// An `eth_getLogs` filter. `topics[i] == None` matches anything at position i.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFilter {
    pub address: Option<Address>,
    pub topics: Vec<Option<B256>>,
    /// Defaults to the first block.
    pub from_block: Option<u64>,
    /// Defaults to the latest block.
    pub to_block: Option<u64>,
}

impl LogFilter {
    fn to_json(&self) -> Value {
        let block = |number: Option<u64>, default: &str| match number {
            Some(number) => Value::String(format!("{number:#x}")),
            None => Value::String(default.to_owned()),
        };
        let mut filter = json!({
            "fromBlock": block(self.from_block, "earliest"),
            "toBlock": block(self.to_block, "latest"),
            "topics": self.topics,
        });
        if let Some(address) = self.address {
            filter["address"] = json!(address);
        }
        filter
    }
}

/// A JSON-RPC client for one node. Cheap to clone; clones share the connection pool.
#[derive(Debug, Clone)]
pub struct Rpc {
    url: Arc<str>,
    http: reqwest::Client,
    next_id: Arc<AtomicU64>,
}

impl Rpc {
    /// A client for the node at `url` (for the lab, `http://127.0.0.1:<port>`).
    pub fn new(url: &str) -> Result<Rpc, RpcError> {
        // reqwest is built without a default TLS provider; it needs one installed before the first client
        // even for plain HTTP. Another part of the process may have installed it already, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(2))
            .build()
            .map_err(RpcError::Client)?;
        Ok(Rpc {
            url: Arc::from(url),
            http,
            next_id: Arc::new(AtomicU64::new(1)),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Calls `method` with `params` (a JSON array) and decodes the `result` member into `T`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let request = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let transport = |source| RpcError::Transport {
            method: method.to_owned(),
            url: self.url.to_string(),
            source,
        };
        let response = self
            .http
            .post(&*self.url)
            .json(&request)
            .send()
            .await
            .map_err(transport)?;
        let status = response.status();
        let body = response.bytes().await.map_err(transport)?;
        if !status.is_success() {
            let shown = &body[..body.len().min(MAX_ERROR_BODY)];
            return Err(RpcError::Http {
                method: method.to_owned(),
                status: status.as_u16(),
                body: String::from_utf8_lossy(shown).into_owned(),
            });
        }
        let decode = |detail: String| RpcError::Decode {
            method: method.to_owned(),
            detail,
        };
        let mut envelope: Value =
            serde_json::from_slice(&body).map_err(|e| decode(format!("not JSON: {e}")))?;
        if let Some(error) = envelope.get("error").filter(|e| !e.is_null()) {
            return Err(RpcError::Node {
                method: method.to_owned(),
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("(no message)")
                    .to_owned(),
                data: error.get("data").cloned().map(Box::new),
            });
        }
        let Some(result) = envelope.get_mut("result").map(Value::take) else {
            return Err(decode("neither result nor error in the answer".to_owned()));
        };
        serde_json::from_value(result)
            .map_err(|e| decode(format!("result has the wrong shape: {e}")))
    }

    pub async fn chain_id(&self) -> Result<u64, RpcError> {
        Ok(self.call::<U64>("eth_chainId", json!([])).await?.to())
    }

    pub async fn block_number(&self) -> Result<u64, RpcError> {
        Ok(self.call::<U64>("eth_blockNumber", json!([])).await?.to())
    }

    /// The timestamp of the latest block: the chain's idea of "now", which the token's time checks use.
    pub async fn latest_block_timestamp(&self) -> Result<u64, RpcError> {
        #[derive(Deserialize)]
        struct Block {
            #[serde(deserialize_with = "quantity")]
            timestamp: u64,
        }
        let block: Option<Block> = self
            .call("eth_getBlockByNumber", json!(["latest", false]))
            .await?;
        block.map(|b| b.timestamp).ok_or_else(|| RpcError::Decode {
            method: "eth_getBlockByNumber".to_owned(),
            detail: "the node has no latest block".to_owned(),
        })
    }

    /// The accounts the node holds keys for (anvil: its ten dev accounts).
    pub async fn accounts(&self) -> Result<Vec<Address>, RpcError> {
        self.call("eth_accounts", json!([])).await
    }

    /// The ether balance of `address`, in wei.
    pub async fn balance(&self, address: Address) -> Result<U256, RpcError> {
        self.call("eth_getBalance", json!([address, "latest"]))
            .await
    }

    /// The code deployed at `address` (empty for an account without code).
    pub async fn code(&self, address: Address) -> Result<Bytes, RpcError> {
        self.call("eth_getCode", json!([address, "latest"])).await
    }

    /// Executes `call` against the latest block without making a transaction; returns the output.
    /// A revert comes back as `RpcError::Node` (see [`RpcError::revert_reason`]).
    pub async fn eth_call(&self, call: &CallRequest) -> Result<Bytes, RpcError> {
        self.call("eth_call", json!([call, "latest"])).await
    }

    /// Sends a transaction from an account the node holds the key for (or impersonates) and returns its
    /// hash. Anvil mines a transaction that reverts (receipt status 0) and gives no reason here: run the
    /// same request through [`Rpc::eth_call`] first to learn whether and why it would revert.
    pub async fn send_transaction(&self, tx: &CallRequest) -> Result<TxHash, RpcError> {
        if tx.from.is_none() {
            return Err(RpcError::Decode {
                method: "eth_sendTransaction".to_owned(),
                detail: "the transaction has no sender (from)".to_owned(),
            });
        }
        self.call("eth_sendTransaction", json!([tx])).await
    }

    /// The receipt of `tx_hash`, or `None` while it is not mined (or unknown).
    pub async fn receipt(&self, tx_hash: TxHash) -> Result<Option<TxReceipt>, RpcError> {
        self.call("eth_getTransactionReceipt", json!([tx_hash]))
            .await
    }

    /// Polls for the receipt of `tx_hash` for up to [`DEFAULT_RECEIPT_TIMEOUT`].
    pub async fn wait_receipt(&self, tx_hash: TxHash) -> Result<TxReceipt, RpcError> {
        self.wait_receipt_within(tx_hash, DEFAULT_RECEIPT_TIMEOUT)
            .await
    }

    /// Polls for the receipt of `tx_hash` for up to `timeout`.
    pub async fn wait_receipt_within(
        &self,
        tx_hash: TxHash,
        timeout: Duration,
    ) -> Result<TxReceipt, RpcError> {
        let started = Instant::now();
        loop {
            if let Some(receipt) = self.receipt(tx_hash).await? {
                return Ok(receipt);
            }
            if started.elapsed() >= timeout {
                return Err(RpcError::Timeout {
                    method: "eth_getTransactionReceipt".to_owned(),
                    waited: started.elapsed(),
                });
            }
            tokio::time::sleep(RECEIPT_POLL_INTERVAL).await;
        }
    }

    pub async fn get_logs(&self, filter: &LogFilter) -> Result<Vec<Log>, RpcError> {
        self.call("eth_getLogs", json!([filter.to_json()])).await
    }

    // ---------------------------------------------------------------- anvil-only helpers

    /// Replaces the code at `address` (anvil_setCode), e.g. a stub where a facilitator expects a contract.
    pub async fn set_code(&self, address: Address, code: &[u8]) -> Result<(), RpcError> {
        self.call::<Value>(
            "anvil_setCode",
            json!([address, Bytes::copy_from_slice(code)]),
        )
        .await
        .map(drop)
    }

    /// Sets the ether balance of `address` (anvil_setBalance), e.g. to give gas money to a fresh key.
    pub async fn set_balance(&self, address: Address, wei: U256) -> Result<(), RpcError> {
        self.call::<Value>("anvil_setBalance", json!([address, wei]))
            .await
            .map(drop)
    }

    /// Lets `eth_sendTransaction` send from `address` without its key (anvil_impersonateAccount).
    pub async fn impersonate(&self, address: Address) -> Result<(), RpcError> {
        self.call::<Value>("anvil_impersonateAccount", json!([address]))
            .await
            .map(drop)
    }

    /// Moves the chain's clock forward by `seconds` for the next block (evm_increaseTime).
    /// Remember that facilitators check the wall clock: warp only chains no paid call depends on.
    pub async fn increase_time(&self, seconds: u64) -> Result<(), RpcError> {
        self.call::<Value>("evm_increaseTime", json!([seconds]))
            .await
            .map(drop)
    }

    /// Fixes the timestamp of the next block (evm_setNextBlockTimestamp).
    pub async fn set_next_block_timestamp(&self, timestamp: u64) -> Result<(), RpcError> {
        self.call::<Value>("evm_setNextBlockTimestamp", json!([timestamp]))
            .await
            .map(drop)
    }

    /// Mines one block now (evm_mine).
    pub async fn mine(&self) -> Result<(), RpcError> {
        self.call::<Value>("evm_mine", json!([])).await.map(drop)
    }
}

/// A JSON-RPC quantity ("0x1a") as a u64.
fn quantity<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let value = U64::deserialize(deserializer)?;
    Ok(value.to())
}

fn optional_quantity<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    Ok(Option::<U64>::deserialize(deserializer)?.map(|v| v.to()))
}

/// A receipt's `status`: "0x1" succeeded, "0x0" reverted.
fn status_succeeded<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    let status = U64::deserialize(deserializer)?;
    match status.to::<u64>() {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(serde::de::Error::custom(format!(
            "receipt status {other} is neither 0 nor 1"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_decodes_from_the_node_shape() {
        let raw = json!({
            "transactionHash": format!("0x{}", "ab".repeat(32)),
            "blockNumber": "0x2",
            "status": "0x0",
            "from": "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266",
            "to": null,
            "contractAddress": "0x5fbdb2315678afecb367f032d93f642f64180aa3",
            "gasUsed": "0x5208",
            "logs": [{
                "address": "0x5fbdb2315678afecb367f032d93f642f64180aa3",
                "topics": [format!("0x{}", "11".repeat(32))],
                "data": "0x",
                "blockNumber": "0x2",
                "logIndex": "0x0"
            }]
        });
        let receipt: TxReceipt = serde_json::from_value(raw).expect("decodes");
        assert_eq!(receipt.block_number, 2);
        assert!(!receipt.succeeded);
        assert_eq!(receipt.gas_used, 21_000);
        assert_eq!(receipt.logs.len(), 1);
        assert_eq!(receipt.logs[0].log_index, Some(0));
        assert_eq!(receipt.to, None);
    }

    #[test]
    fn a_status_other_than_0_or_1_is_an_error() {
        let raw = json!({
            "transactionHash": format!("0x{}", "ab".repeat(32)),
            "blockNumber": "0x2", "status": "0x2",
            "from": "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266",
            "gasUsed": "0x1", "logs": []
        });
        assert!(serde_json::from_value::<TxReceipt>(raw).is_err());
    }

    #[test]
    fn revert_reasons_are_read_from_node_errors_only() {
        let reverted = RpcError::Node {
            method: "eth_sendTransaction".into(),
            code: 3,
            message: "execution reverted: authorization is expired".into(),
            data: None,
        };
        assert_eq!(reverted.revert_reason(), Some("authorization is expired"));
        let other = RpcError::Node {
            method: "eth_call".into(),
            code: -32602,
            message: "invalid params".into(),
            data: None,
        };
        assert_eq!(other.revert_reason(), None);
    }

    #[test]
    fn a_log_filter_uses_null_for_wildcard_topics() {
        let filter = LogFilter {
            address: Some(Address::repeat_byte(0x11)),
            topics: vec![Some(B256::repeat_byte(0x22)), None],
            from_block: Some(16),
            to_block: None,
        };
        let json = filter.to_json();
        assert_eq!(json["fromBlock"], "0x10");
        assert_eq!(json["toBlock"], "latest");
        assert_eq!(json["topics"][1], Value::Null);
        assert_eq!(
            json["address"],
            "0x1111111111111111111111111111111111111111"
        );
    }
}
