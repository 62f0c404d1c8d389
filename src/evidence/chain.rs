//! What the fixed RPC said: receipts, logs, and reads that may have failed. Plain data.

use alloy::primitives::{Address, B256, Bytes};
use serde::{Deserialize, Serialize};

/// A settled transaction's receipt, as far as the checks need it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TxReceipt {
    pub transaction_hash: B256,
    pub block_number: u64,
    pub block_hash: B256,
    pub status_ok: bool,
    pub logs: Vec<LogEntry>,
    /// The transaction's sender (the receipt's `from`): who settled it. Absent in receipts
    /// stored before it was kept, and left out of the stored form then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Address>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    pub address: Address,
    pub topics: Vec<B256>,
    pub data: Bytes,
    pub transaction_hash: Option<B256>,
    pub block_number: Option<u64>,
}

/// A chain read: its value, or why there is none. A failed read says nothing about the subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "read", rename_all = "snake_case")]
pub enum ChainRead<T> {
    Read {
        value: T,
    },
    /// The RPC failed or answered nonsense.
    Failed {
        error: String,
    },
    /// Not attempted, with why.
    Skipped {
        why: String,
    },
}

impl<T> ChainRead<T> {
    pub fn value(&self) -> Option<&T> {
        match self {
            ChainRead::Read { value } => Some(value),
            _ => None,
        }
    }

    /// Why there is no value (None when there is one).
    pub fn missing_because(&self) -> Option<&str> {
        match self {
            ChainRead::Read { .. } => None,
            ChainRead::Failed { error } => Some(error),
            ChainRead::Skipped { why } => Some(why),
        }
    }

    pub fn skipped(why: impl Into<String>) -> Self {
        ChainRead::Skipped { why: why.into() }
    }

    pub fn from_result<E: std::fmt::Display>(result: Result<T, E>) -> Self {
        match result {
            Ok(value) => ChainRead::Read { value },
            Err(e) => ChainRead::Failed {
                error: e.to_string(),
            },
        }
    }
}
