//! Sending feedback to the configured registry (`ledger feedback --submit`), under the caps of
//! `[feedback]`: its own wallet (the payment wallet is refused when the configuration is read),
//! a gas limit per transaction and a fee cap per gas, and a total per run counted at each
//! transaction's worst case (limit times fee cap) before it is signed.
//!
//! Each transaction is written to `submitted.jsonl` in the output directory (its feedback hash,
//! nonce and hash, synced to disk) before it is sent, so a run that is cut short never sends the
//! same feedback twice: a later run skips a feedback that file names, and tells whether its
//! transaction was mined.

use std::io::Write;
use std::path::Path;

use alloy::consensus::transaction::RlpEcdsaEncodableTx;
use alloy::consensus::{SignableTransaction, TxEip1559};
use alloy::primitives::{Address, B256, Bytes, TxKind, U256, keccak256};
use alloy::signers::SignerSync;
use alloy::sol;
use alloy::sol_types::SolCall;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::Feedback;
use crate::probe::rpc::{Rpc, parse_quantity};
use crate::secret::KeySource;
use crate::wallet::{WalletError, with_signer};

sol! {
    /// ERC-8004's reputation registry: the one call we make.
    interface ReputationRegistry {
        function giveFeedback(
            uint256 agentId, int128 value, uint8 valueDecimals, string tag1, string tag2,
            string endpoint, string feedbackURI, bytes32 feedbackHash
        ) external;
    }
}

/// The record of what was sent, in the output directory.
pub const SUBMITTED_FILE: &str = "submitted.jsonl";

/// What `--submit` works with: `[feedback]` read and checked.
pub struct Submitter {
    pub rpc: Rpc,
    pub registry: Address,
    pub chain_id: u64,
    pub key: KeySource,
    pub uri_base: Option<String>,
    pub max_gas_per_feedback: u64,
    pub max_fee_per_gas_wei: u64,
    pub max_wei_per_run: u64,
}

/// One line of `submitted.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SentLine {
    feedback_hash: B256,
    nonce: u64,
    tx: B256,
}

/// What became of one feedback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Given {
    /// Sent now and mined.
    Mined { tx: B256, block: u64 },
    /// Sent by an earlier run (its transaction, and whether it was mined).
    Earlier { tx: B256, mined: bool },
}

/// The feedback URI of a file, under `uri_base` (empty without one).
pub fn feedback_uri(uri_base: Option<&str>, feedback: &Feedback) -> String {
    match uri_base {
        None => String::new(),
        Some(base) if base.ends_with('/') => format!("{base}{}", feedback.file_name),
        Some(base) => format!("{base}/{}", feedback.file_name),
    }
}

/// The `giveFeedback` calldata of `feedback`.
pub fn calldata(feedback: &Feedback, uri: &str) -> Result<Vec<u8>> {
    Ok(ReputationRegistry::giveFeedbackCall {
        agentId: feedback.agent_id.parse().context("the agent id")?,
        value: feedback.value,
        valueDecimals: feedback.value_decimals,
        tag1: feedback.tag1.as_str().to_string(),
        tag2: feedback.tag2.to_string(),
        endpoint: feedback.endpoint.clone(),
        feedbackURI: uri.to_string(),
        feedbackHash: feedback.feedback_hash,
    }
    .abi_encode())
}

impl Submitter {
    /// The wallet's address (the feedback's `clientAddress`).
    pub fn address(&self) -> Result<Address, WalletError> {
        with_signer(&self.key, |signer| Ok(signer.address()))
    }

    /// Sends each feedback not sent before, in order, within the caps; stops at the first that
    /// would pass one (an error naming it; what was sent stays sent and recorded).
    pub async fn submit(&self, feedbacks: &[Feedback], out: &Path) -> Result<Vec<Given>> {
        let record = out.join(SUBMITTED_FILE);
        let sent = read_sent(&record)?;
        let from = self.address()?;
        let chain = self.rpc.chain_id().await?;
        if chain != self.chain_id {
            bail!(
                "[feedback] rpc answers chain {chain}, not the configured chain_id {}",
                self.chain_id
            );
        }
        let mut spent: u128 = 0;
        let mut given = Vec::new();
        for feedback in feedbacks {
            if let Some(line) = sent
                .iter()
                .find(|l| l.feedback_hash == feedback.feedback_hash)
            {
                let mined = self
                    .rpc
                    .receipt(line.tx)
                    .await?
                    .is_some_and(|r| r.status_ok);
                given.push(Given::Earlier { tx: line.tx, mined });
                continue;
            }
            let data = calldata(feedback, &feedback_uri(self.uri_base.as_deref(), feedback))?;
            let gas = self.estimate_gas(from, &data).await?;
            // Room over the estimate, within the cap.
            let gas_limit = (gas + gas / 5).min(self.max_gas_per_feedback);
            if gas > self.max_gas_per_feedback {
                bail!(
                    "{} feedback: estimated {gas} gas, over [feedback] max_gas_per_feedback {}",
                    feedback.tag1.as_str(),
                    self.max_gas_per_feedback
                );
            }
            let gas_price = self.quantity("eth_gasPrice", json!([])).await?;
            if gas_price > self.max_fee_per_gas_wei {
                bail!(
                    "the chain asks {gas_price} wei per gas, over [feedback] max_fee_per_gas_wei {}",
                    self.max_fee_per_gas_wei
                );
            }
            let max_fee = gas_price.saturating_mul(2).min(self.max_fee_per_gas_wei);
            let tip = self
                .quantity("eth_maxPriorityFeePerGas", json!([]))
                .await
                .unwrap_or(0)
                .min(max_fee);
            let worst = u128::from(gas_limit) * u128::from(max_fee);
            if spent + worst > u128::from(self.max_wei_per_run) {
                bail!(
                    "{} feedback: up to {worst} wei of gas would pass [feedback] max_wei_per_run {} ({spent} counted already)",
                    feedback.tag1.as_str(),
                    self.max_wei_per_run
                );
            }
            let nonce = self
                .quantity("eth_getTransactionCount", json!([from, "pending"]))
                .await?;
            let tx = TxEip1559 {
                chain_id: self.chain_id,
                nonce,
                gas_limit,
                max_fee_per_gas: u128::from(max_fee),
                max_priority_fee_per_gas: u128::from(tip),
                to: TxKind::Call(self.registry),
                value: U256::ZERO,
                access_list: Default::default(),
                input: Bytes::from(data),
            };
            let raw = self.sign(&tx, from)?;
            let hash = keccak256(&raw);
            // Recorded before it is sent: a run cut short never sends it twice.
            append_sent(
                &record,
                &SentLine {
                    feedback_hash: feedback.feedback_hash,
                    nonce,
                    tx: hash,
                },
            )?;
            spent += worst;
            self.rpc
                .call(
                    "eth_sendRawTransaction",
                    json!([format!("0x{}", hex::encode(&raw))]),
                )
                .await?;
            let receipt = self.wait_receipt(hash).await?;
            if !receipt.status_ok {
                bail!(
                    "{} feedback: transaction {hash} reverted",
                    feedback.tag1.as_str()
                );
            }
            given.push(Given::Mined {
                tx: hash,
                block: receipt.block_number,
            });
        }
        Ok(given)
    }

    /// The signed transaction's EIP-2718 bytes.
    fn sign(&self, tx: &TxEip1559, from: Address) -> Result<Vec<u8>> {
        let signature = with_signer(&self.key, |signer| {
            if signer.address() != from {
                return Err(WalletError::KeyChanged {
                    path: self.key.path().display().to_string(),
                    expected: from,
                    now: signer.address(),
                });
            }
            signer
                .sign_hash_sync(&tx.signature_hash())
                .map_err(|e| WalletError::Sign(e.to_string()))
        })?;
        let mut raw = Vec::new();
        tx.eip2718_encode(&signature, &mut raw);
        Ok(raw)
    }

    async fn estimate_gas(&self, from: Address, data: &[u8]) -> Result<u64> {
        self.quantity(
            "eth_estimateGas",
            json!([{"from": from, "to": self.registry, "data": format!("0x{}", hex::encode(data))}]),
        )
        .await
        .context("estimating the feedback's gas (does the agent exist, and is the wallet not its owner?)")
    }

    async fn quantity(&self, method: &str, params: serde_json::Value) -> Result<u64> {
        let v = self.rpc.call(method, params).await?;
        parse_quantity(&v).with_context(|| format!("{method} answered {v}, not a quantity"))
    }

    async fn wait_receipt(&self, tx: B256) -> Result<crate::probe::rpc::TxReceipt> {
        for _ in 0..600 {
            if let Some(receipt) = self.rpc.receipt(tx).await? {
                return Ok(receipt);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        bail!(
            "transaction {tx} was not mined within a minute (it is recorded: a later run will not send it again)"
        )
    }
}

fn read_sent(path: &Path) -> Result<Vec<SentLine>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| {
                format!("{} line {} is not a sent feedback", path.display(), i + 1)
            })
        })
        .collect()
}

fn append_sent(path: &Path, line: &SentLine) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(file, "{}", serde_json::to_string(line)?)?;
    file.sync_all()
        .with_context(|| format!("syncing {}", path.display()))
}
