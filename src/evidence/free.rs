//! Observations: the raw evidence of one probe run, collected once by the probers and evaluated (many
//! times, under any rubric) by the pure checks. Everything here is plain data that serialises into the
//! ledger.

use alloy::primitives::Address;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use alloy::primitives::B256;

use super::chain::ChainRead;
use super::http::Exchange;
// One unpaid request and its answer: a free run's samples, and an MCP setup's and the findings'.
pub use super::http::Sample;

/// Everything one free probe run saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FreeObservation {
    /// The subject URL, as given.
    pub subject: String,
    /// Where the probe ran from.
    pub vantage: String,
    /// When the run started, unix seconds (the clock is read by the driver, never by the checks).
    pub at: i64,
    /// The unpaid requests, in order. The first uses the URL as given; later ones use the documented
    /// example input when the first 402 declared one.
    pub samples: Vec<Sample>,
    /// `GET /.well-known/x402-operator.json` at the subject's origin (H4, H9).
    pub operator_file: Option<Exchange>,
    /// The discovery catalogue read for H1, if one was given.
    pub listing: ListingSeen,
    /// What the fixed RPC said about each asset the 402 names (C3).
    pub chain: ChainSeen,
    /// What the fixed Solana RPC said about the mints and payout accounts of the Solana entries
    /// (C3). Left out of the stored form when no Solana RPC is configured, so a run without one
    /// is stored byte for byte as before.
    #[serde(default, skip_serializing_if = "SolanaSeen::is_no_rpc")]
    pub solana: SolanaSeen,
    /// Tokens the user declared as real besides the canonical USDC deployments (`--asset`).
    pub declared_assets: Vec<Address>,
    /// Whether the address guard was off for this run (the lab): recorded so a receipt shows it.
    pub allow_private: bool,
    /// Set when the run's own deadline cut it short: what was not measured. Ours, never the
    /// subject's: what was measured before it stands, the rest is `unmeasured`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_short: Option<CutShort>,
    /// The ledger (format 2) keeps the listing (the catalogue's pages as read and the subject's
    /// item) once, addressed by this SHA-256 (hex): `listing` is then `not_asked` here and read
    /// back from the ledger's blobs. Every run between two reads of a catalogue names one blob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listing_sha256: Option<String>,
    /// Set when the subject is a paid MCP tool (`mcp+https://host/path#tool`): the samples are
    /// its unpaid `tools/call` requests, and this is the rest of what the run saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<super::mcp::McpToolSeen>,
    /// What was fetched for the findings peers publish (a browser's request, the usual places of
    /// a description): `checks::findings`. Left out of the stored form when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers: Option<super::peers::PeersSeen>,
}

/// What the free run's deadline left unmeasured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutShort {
    /// The free run's deadline, ms.
    pub deadline_ms: u64,
    /// Samples asked for; `samples` holds those taken. A sample still in flight at the deadline
    /// is dropped, not judged.
    pub samples_planned: usize,
    /// The operator file was not read in time (`operator_file` is then `None`).
    pub operator_file_not_read: bool,
}

impl CutShort {
    /// Why something was not measured, for evidence lines.
    pub fn reason(&self) -> String {
        format!("the run's deadline of {} ms passed first", self.deadline_ms)
    }
}

impl FreeObservation {
    /// Every exchange this run made (samples, then the operator file), for storage that keeps
    /// bodies apart.
    pub fn exchanges_mut(&mut self) -> impl Iterator<Item = &mut Exchange> {
        let setup = self.mcp.iter_mut().flat_map(|m| m.setup.iter_mut());
        let peers = self
            .peers
            .iter_mut()
            .flat_map(|p| p.browser.iter_mut().chain(p.descriptions.iter_mut()));
        self.samples
            .iter_mut()
            .chain(setup)
            .chain(peers)
            .map(|s| &mut s.exchange)
            .chain(self.operator_file.iter_mut())
    }
}

/// A page of a discovery catalogue as fetched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageSeen {
    pub url: String,
    pub at: i64,
    pub status: Option<u16>,
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ListingSeen {
    /// No catalogue was given.
    NotAsked,
    /// The catalogue could not be read (our problem or the catalogue's, not the subject's).
    Failed {
        url: String,
        error: String,
        pages: Vec<PageSeen>,
    },
    /// Read in full; `item` is the entry whose `resource` is the subject, if any.
    Read {
        url: String,
        pages: Vec<PageSeen>,
        items_seen: usize,
        item: Option<Value>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ChainSeen {
    /// No RPC configured.
    NoRpc,
    /// The RPC did not answer its chain id.
    RpcDown { url: String, error: String },
    /// The RPC's chain, and what each asset's contract said (or why it could not be read).
    Read {
        url: String,
        chain_id: u64,
        tokens: Vec<TokenSeen>,
    },
}

/// What an asset's contract answered. A field is `None` when its call reverted or returned nothing
/// usable (the contract lacks it: that counts against the endpoint); `rpc_error` is set instead when
/// the RPC itself failed (that counts against nobody).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenSeen {
    pub asset: Address,
    pub name: Option<String>,
    pub version: Option<String>,
    pub domain_separator: Option<B256>,
    pub rpc_error: Option<String>,
}

/// What the fixed Solana RPC answered for one run: the cluster it serves and each account read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SolanaSeen {
    /// No Solana RPC configured (`--solana-rpc`).
    #[default]
    NoRpc,
    /// The RPC did not answer its genesis hash.
    RpcDown { url: String, error: String },
    /// The cluster's genesis hash, and each account read, in the order read.
    Read {
        url: String,
        genesis_hash: String,
        accounts: Vec<SolanaAccountSeen>,
    },
}

impl SolanaSeen {
    pub fn is_no_rpc(&self) -> bool {
        matches!(self, SolanaSeen::NoRpc)
    }

    /// What was read at `address` (base58), if it was asked for.
    pub fn account(&self, address: &str) -> Option<&ChainRead<Option<SolanaAccount>>> {
        match self {
            SolanaSeen::Read { accounts, .. } => accounts
                .iter()
                .find(|a| a.address == address)
                .map(|a| &a.read),
            _ => None,
        }
    }
}

/// One `getAccountInfo`: the account, `None` when the cluster has no account at the address (a
/// fact about the subject), or why it was not read (ours).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SolanaAccountSeen {
    /// Base58.
    pub address: String,
    pub read: ChainRead<Option<SolanaAccount>>,
}

/// An account as the RPC gave it: its owner program and the start of its data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SolanaAccount {
    /// The owner program, base58.
    pub owner: String,
    pub lamports: u64,
    /// The data's full length.
    pub data_len: usize,
    /// Base64 of the data's first `budget::MAX_SOLANA_ACCOUNT_BYTES` bytes (every field the
    /// checks read lies in them).
    pub data: String,
}
