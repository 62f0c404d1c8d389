//! The fixed Solana RPC (`--solana-rpc`, `[probe] solana_rpc`): the Solana JSON-RPC methods this
//! tool calls, over the same client as the EVM RPC ([`Rpc::call`]: fresh connection, timeouts,
//! bounded body, one request id). Every failure is an [`RpcError`], which C3 turns into
//! `unmeasured`; an account that does not exist is the one answer that is a fact (`Ok(None)`).
//!
//! Accounts are asked for in base64 and their layouts read by `x402::solana`, so nothing here
//! depends on a node's `jsonParsed` support.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::budget::MAX_SOLANA_ACCOUNT_BYTES;
use crate::evidence::free::SolanaAccount;
use crate::evidence::svm::{SvmTokenBalance, SvmTransactionSeen};
use crate::probe::rpc::{Rpc, RpcError, unexpected_answer};

/// The commitment every read asks for: what a facilitator's simulation sees.
const COMMITMENT: &str = "confirmed";

#[derive(Debug, Clone)]
pub struct SolanaRpc {
    rpc: Rpc,
}

impl SolanaRpc {
    pub fn new(url: impl Into<String>) -> SolanaRpc {
        SolanaRpc { rpc: Rpc::new(url) }
    }

    pub fn url(&self) -> &str {
        self.rpc.url()
    }

    /// `getGenesisHash`: the cluster the node serves (base58; its first 32 characters are the
    /// CAIP-2 reference).
    pub async fn genesis_hash(&self) -> Result<String, RpcError> {
        let v = self.rpc.call("getGenesisHash", json!([])).await?;
        parse_genesis_hash(&v).ok_or_else(|| unexpected_answer("getGenesisHash", &v))
    }

    /// `getAccountInfo` in base64: the account, or `None` when the cluster has none there.
    pub async fn account(&self, address: &str) -> Result<Option<SolanaAccount>, RpcError> {
        let v = self
            .rpc
            .call(
                "getAccountInfo",
                json!([address, {"encoding": "base64", "commitment": COMMITMENT}]),
            )
            .await?;
        parse_account_info(&v).ok_or_else(|| unexpected_answer("getAccountInfo", &v))
    }
}

impl SolanaRpc {
    /// `getLatestBlockhash`: the blockhash a payment is built on, and the block height past
    /// which a transaction on it can never land.
    pub async fn latest_blockhash(&self) -> Result<([u8; 32], u64), RpcError> {
        let v = self
            .rpc
            .call("getLatestBlockhash", json!([{"commitment": COMMITMENT}]))
            .await?;
        parse_latest_blockhash(&v).ok_or_else(|| unexpected_answer("getLatestBlockhash", &v))
    }

    /// `getBlockHeight`.
    pub async fn block_height(&self) -> Result<u64, RpcError> {
        let v = self
            .rpc
            .call("getBlockHeight", json!([{"commitment": COMMITMENT}]))
            .await?;
        v.as_u64()
            .ok_or_else(|| unexpected_answer("getBlockHeight", &v))
    }

    /// `getTransaction` in `jsonParsed`: the transaction, or `None` when the node does not know
    /// the signature.
    pub async fn transaction(
        &self,
        signature: &str,
    ) -> Result<Option<SvmTransactionSeen>, RpcError> {
        let v = self
            .rpc
            .call(
                "getTransaction",
                json!([signature, {"encoding": "jsonParsed", "commitment": COMMITMENT,
                    "maxSupportedTransactionVersion": 0}]),
            )
            .await?;
        parse_transaction(&v).ok_or_else(|| unexpected_answer("getTransaction", &v))
    }

    /// `getSignaturesForAddress` with a limit of 1: the newest transaction that touched
    /// `address`, or `None` when none ever did.
    pub async fn newest_signature(&self, address: &str) -> Result<Option<String>, RpcError> {
        let v = self
            .rpc
            .call(
                "getSignaturesForAddress",
                json!([address, {"limit": 1, "commitment": COMMITMENT}]),
            )
            .await?;
        let newest = match v.as_array().map(Vec::as_slice) {
            Some([]) => Some(None),
            Some([one]) => one
                .get("signature")
                .and_then(Value::as_str)
                .filter(|s| s.len() <= 88)
                .map(|s| Some(s.to_string())),
            _ => None,
        };
        newest.ok_or_else(|| unexpected_answer("getSignaturesForAddress", &v))
    }

    /// The transactions that touched `address` after the one named `until` (all of them when
    /// `None`), newest first, at most `limit`, each read with `getTransaction`; one the node lists
    /// but cannot give is an error, never skipped.
    pub async fn transactions_of(
        &self,
        address: &str,
        until: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SvmTransactionSeen>, RpcError> {
        let mut config = json!({"limit": limit, "commitment": COMMITMENT});
        if let Some(until) = until {
            config["until"] = json!(until);
        }
        let v = self
            .rpc
            .call("getSignaturesForAddress", json!([address, config]))
            .await?;
        let signatures = v
            .as_array()
            .filter(|list| list.len() <= limit)
            .and_then(|list| {
                list.iter()
                    .map(|s| s.get("signature").and_then(Value::as_str))
                    .collect::<Option<Vec<&str>>>()
            })
            .ok_or_else(|| unexpected_answer("getSignaturesForAddress", &v))?;
        let mut out = Vec::with_capacity(signatures.len());
        for signature in signatures {
            match self.transaction(signature).await? {
                Some(tx) => out.push(tx),
                None => {
                    return Err(unexpected_answer(
                        "getTransaction",
                        &json!({"listed but unknown": signature}),
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// `{"context": .., "value": {"blockhash", "lastValidBlockHeight"}}`. Public for the fuzz
/// targets only.
#[doc(hidden)]
pub fn parse_latest_blockhash(v: &Value) -> Option<([u8; 32], u64)> {
    let value = v.get("value")?;
    let text = value.get("blockhash")?.as_str()?;
    // A hash is 32 bytes: at most 44 base58 characters.
    if text.len() > 44 {
        return None;
    }
    let hash = bs58::decode(text).into_vec().ok()?;
    Some((
        hash.try_into().ok()?,
        value.get("lastValidBlockHeight")?.as_u64()?,
    ))
}

/// `getTransaction`'s answer in `jsonParsed`: `null`, or the signatures, the slot, `meta.err`
/// and the token balances (their account resolved from `transaction.message.accountKeys`).
/// `None` for an answer of another shape. Public for the fuzz targets only.
#[doc(hidden)]
pub fn parse_transaction(v: &Value) -> Option<Option<SvmTransactionSeen>> {
    if v.is_null() {
        return Some(None);
    }
    let signatures = v
        .pointer("/transaction/signatures")?
        .as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_string))
        .collect::<Option<Vec<_>>>()?;
    if signatures.is_empty() {
        return None;
    }
    let keys = v
        .pointer("/transaction/message/accountKeys")?
        .as_array()?
        .iter()
        .map(|k| {
            k.get("pubkey")
                .and_then(Value::as_str)
                .or(k.as_str())
                .map(str::to_string)
        })
        .collect::<Option<Vec<_>>>()?;
    let meta = v.get("meta")?;
    let err = match meta.get("err")? {
        Value::Null => None,
        other => Some(other.to_string()),
    };
    let balances = |key: &str| -> Option<Vec<SvmTokenBalance>> {
        meta.get(key)?
            .as_array()?
            .iter()
            .map(|b| {
                let index = usize::try_from(b.get("accountIndex")?.as_u64()?).ok()?;
                Some(SvmTokenBalance {
                    account: keys.get(index)?.clone(),
                    mint: b.get("mint")?.as_str()?.to_string(),
                    owner: b.get("owner").and_then(Value::as_str).map(str::to_string),
                    amount: b.pointer("/uiTokenAmount/amount")?.as_str()?.parse().ok()?,
                })
            })
            .collect()
    };
    Some(Some(SvmTransactionSeen {
        signatures,
        slot: v.get("slot")?.as_u64()?,
        err,
        pre: balances("preTokenBalances")?,
        post: balances("postTokenBalances")?,
    }))
}

/// Public for the fuzz targets only.
#[doc(hidden)]
pub fn parse_genesis_hash(v: &Value) -> Option<String> {
    let text = v.as_str()?;
    // A hash is 32 bytes of base58: at most 44 characters, never the empty string.
    let ok = (32..=44).contains(&text.len()) && bs58::decode(text).into_vec().ok()?.len() == 32;
    ok.then(|| text.to_string())
}

/// `{"context": {...}, "value": null | {"data": [base64, "base64"], "owner", "lamports", ...}}`.
/// `Some(None)` for no account; `None` for an answer of another shape. Public for the fuzz
/// targets only.
#[doc(hidden)]
pub fn parse_account_info(v: &Value) -> Option<Option<SolanaAccount>> {
    let value = v.get("value")?;
    if value.is_null() {
        return Some(None);
    }
    let owner = value.get("owner")?.as_str()?;
    crate::x402::solana::SolanaAddress::parse(owner).ok()?;
    let lamports = value.get("lamports")?.as_u64()?;
    let data = value.get("data")?.as_array()?;
    let (encoded, encoding) = (data.first()?.as_str()?, data.get(1)?.as_str()?);
    if encoding != "base64" {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let kept = &bytes[..bytes.len().min(MAX_SOLANA_ACCOUNT_BYTES)];
    Some(Some(SolanaAccount {
        owner: owner.to_string(),
        lamports,
        data_len: bytes.len(),
        data: base64::engine::general_purpose::STANDARD.encode(kept),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_answers_of_every_shape() {
        assert_eq!(
            parse_account_info(&json!({"context": {"slot": 1}, "value": null})),
            Some(None)
        );
        let long = vec![7u8; 400];
        let encoded = base64::engine::general_purpose::STANDARD.encode(&long);
        let account = parse_account_info(&json!({"context": {"slot": 1}, "value": {
            "data": [encoded, "base64"], "executable": false, "lamports": 2039280,
            "owner": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA", "rentEpoch": 0, "space": 400
        }}))
        .unwrap()
        .unwrap();
        assert_eq!(account.data_len, 400);
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(&account.data)
                .unwrap()
                .len(),
            MAX_SOLANA_ACCOUNT_BYTES
        );
        for bad in [
            json!(null),
            json!({"value": {"data": ["AA==", "base58"], "owner": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA", "lamports": 1}}),
            json!({"value": {"data": ["not base64!", "base64"], "owner": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA", "lamports": 1}}),
            json!({"value": {"data": ["AA==", "base64"], "owner": "nobody", "lamports": 1}}),
            json!({"value": {"data": ["AA==", "base64"], "owner": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA", "lamports": -1}}),
        ] {
            assert_eq!(parse_account_info(&bad), None, "{bad}");
        }
    }

    #[test]
    fn genesis_hashes_are_32_bytes_of_base58() {
        let devnet = "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG";
        assert_eq!(parse_genesis_hash(&json!(devnet)).as_deref(), Some(devnet));
        for bad in [
            json!(""),
            json!(1),
            json!("0x00"),
            json!("EtWTRABZaYq6iMfeYKouRu166VU2xqa1"),
        ] {
            assert_eq!(parse_genesis_hash(&bad), None, "{bad}");
        }
    }
}
