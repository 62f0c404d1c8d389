//! What a reference source said around one paid call (R6): the adapter the subject is linked to,
//! what the request named (a package, a token), and the source read right before and right after
//! the paid request, each read with its URL, time and the SHA-256 of what it answered. Plain data,
//! produced by `probe::reference`, compared with the paid output by `checks::reference`.

use serde::{Deserialize, Serialize};

use super::chain::ChainRead;
use super::http::Exchange;

/// The reference adapters this build knows (declared in `probes/references.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReferenceId {
    /// An npm package's latest version document from an npm registry.
    Npm,
    /// An ERC-20 token's `totalSupply()` read through the fixed RPC.
    Erc20Supply,
}

impl ReferenceId {
    pub const ALL: [ReferenceId; 2] = [ReferenceId::Npm, ReferenceId::Erc20Supply];

    pub fn as_str(self) -> &'static str {
        match self {
            ReferenceId::Npm => "npm",
            ReferenceId::Erc20Supply => "erc20_supply",
        }
    }
}

impl std::fmt::Display for ReferenceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reference name that is none of [`ReferenceId::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown reference {0:?} (expected npm or erc20_supply)")]
pub struct UnknownReference(pub String);

impl std::str::FromStr for ReferenceId {
    type Err = UnknownReference;
    fn from_str(s: &str) -> Result<ReferenceId, UnknownReference> {
        ReferenceId::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownReference(s.to_string()))
    }
}

/// One read of the reference source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "via", rename_all = "snake_case")]
pub enum ReferenceRead {
    /// An HTTP document (the npm registry): the exchange keeps the URL, the body and its SHA-256.
    Http {
        /// Our clock when the read started, unix ms.
        at_ms: i64,
        exchange: Box<Exchange>,
    },
    /// An `eth_call` through the fixed RPC.
    Chain {
        at_ms: i64,
        rpc_url: String,
        /// The contract called and the calldata, hex.
        to: String,
        data: String,
        /// The latest block when the call was made.
        block: ChainRead<u64>,
        /// The returned bytes, hex (`0x...`).
        result: ChainRead<String>,
        /// SHA-256 (hex) of the returned bytes, when there are some.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sha256: Option<String>,
    },
}

impl ReferenceRead {
    pub fn at_ms(&self) -> i64 {
        match self {
            ReferenceRead::Http { at_ms, .. } | ReferenceRead::Chain { at_ms, .. } => *at_ms,
        }
    }
}

/// The reference side of one paid call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReferenceSeen {
    /// The adapter the subject is linked to in the configuration.
    pub adapter: ReferenceId,
    /// What the request names for the adapter (the package name, the token address), when it
    /// names one.
    pub key: Option<String>,
    /// Why the source was not read, when it was not (no key in the request, no registry
    /// configured, no RPC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The read right before the paid request.
    pub before: Option<ReferenceRead>,
    /// The read right after the paid response.
    pub after: Option<ReferenceRead>,
}

impl ReferenceSeen {
    /// The HTTP exchanges of the reads (for storage that keeps bodies apart).
    pub fn exchanges_mut(&mut self) -> impl Iterator<Item = &mut Exchange> {
        [self.before.as_mut(), self.after.as_mut()]
            .into_iter()
            .flatten()
            .filter_map(|r| match r {
                ReferenceRead::Http { exchange, .. } => Some(exchange.as_mut()),
                ReferenceRead::Chain { .. } => None,
            })
    }
}
