//! What a paid call's chain reads establish: the transfers out of our wallet, the use of our
//! authorization, the charge. Pure: read from the [`PaidObservation`]'s chain reads, never from
//! the endpoint's own word.

use alloy::primitives::{Address, B256, U256, b256};
use serde_json::{Value, json};

use crate::evidence::chain::{LogEntry, TxReceipt};
use crate::evidence::paid::PaidObservation;

/// keccak256("Transfer(address,address,uint256)").
pub const TRANSFER_TOPIC: B256 =
    b256!("0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");

/// keccak256("AuthorizationUsed(address,bytes32)"): emitted by an EIP-3009 token when an
/// authorization is used.
pub const AUTHORIZATION_USED_TOPIC: B256 =
    b256!("0x98de503528ee59b575ef0c0a2576a82497bfc029a5685b209e9ec333479b10a5");

/// An ERC-20 `Transfer` log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferLog {
    /// The contract that emitted it.
    pub token: Address,
    pub from: Address,
    pub to: Address,
    pub value: U256,
    pub tx: Option<B256>,
    pub block: Option<u64>,
}

impl TransferLog {
    pub fn detail(&self) -> Value {
        json!({
            "token": self.token, "from": self.from, "to": self.to,
            "value": self.value.to_string(), "tx": self.tx, "block": self.block,
        })
    }
}

/// Decodes an ERC-20 `Transfer(address indexed, address indexed, uint256)` log (not ERC-721's,
/// which indexes a fourth topic).
pub fn decode_transfer(log: &LogEntry) -> Option<TransferLog> {
    if log.topics.len() != 3 || log.topics[0] != TRANSFER_TOPIC || log.data.len() != 32 {
        return None;
    }
    Some(TransferLog {
        token: log.address,
        from: Address::from_word(log.topics[1]),
        to: Address::from_word(log.topics[2]),
        value: U256::from_be_slice(&log.data),
        tx: log.transaction_hash,
        block: log.block_number,
    })
}

/// Decodes `AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)`: the authorizer
/// and the nonce.
pub fn decode_authorization_used(log: &LogEntry) -> Option<(Address, B256)> {
    if log.topics.len() != 3 || log.topics[0] != AUTHORIZATION_USED_TOPIC {
        return None;
    }
    Some((Address::from_word(log.topics[1]), log.topics[2]))
}

/// How a charge was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChargeSource {
    /// The transaction whose `AuthorizationUsed` log carries our nonce.
    OurNonce,
    /// The transaction the settlement response names (our nonce unused).
    Claimed,
    /// Transfers from our wallet in the call's blocks, linked to no transaction anyone named.
    Window,
}

impl ChargeSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ChargeSource::OurNonce => "the transaction that used our nonce",
            ChargeSource::Claimed => "the transaction the settlement response names",
            ChargeSource::Window => "transfers from our wallet in the call's blocks",
        }
    }
}

/// What we were charged for the call, as the chain shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub source: ChargeSource,
    pub tx: Option<B256>,
    pub block: u64,
    /// Every `Transfer` out of our wallet in the charge (any token).
    pub transfers: Vec<TransferLog>,
    /// Their sum in the quoted asset.
    pub amount: U256,
}

/// What the chain reads of one call establish, each `Err(why)` when a read needed is missing.
#[derive(Debug, Clone)]
pub struct ChainFacts {
    /// Whether our authorization (nonce) was spent.
    pub nonce_used: Result<bool, String>,
    /// The charge (`None`: not charged).
    pub charge: Result<Option<Charge>, String>,
    /// Transfers out of our wallet in the call's blocks, except settlements of our other
    /// authorizations (other calls): every pull this call caused.
    pub pulls: Result<Vec<TransferLog>, String>,
    /// Why the reads are not final (the settlement lacks the confirmations asked for).
    pub not_final: Option<String>,
}

/// The facts of one observation. Pure.
pub fn chain_facts(obs: &PaidObservation) -> ChainFacts {
    let unknown = |why: &str| ChainFacts {
        nonce_used: Err(why.to_string()),
        charge: Err(why.to_string()),
        pulls: Err(why.to_string()),
        not_final: None,
    };
    let (Some(chain), Some(payment)) = (obs.chain.as_ref(), obs.payment.as_ref()) else {
        return unknown("nothing was paid");
    };
    let wallet = obs.wallet;
    let nonce = payment.authorization.nonce;
    let asset = payment.asset;

    let nonce_receipt = chain.nonce_receipt.value().and_then(|r| r.as_ref());
    let nonce_used = match (nonce_receipt, chain.authorization_state.value()) {
        (Some(_), _) => Ok(true),
        (None, Some(state)) => Ok(*state),
        (None, None) => Err(format!(
            "authorizationState unread: {}",
            chain.authorization_state.missing_because().unwrap_or("")
        )),
    };

    let pulls = match (
        chain.transfers_from_wallet.value(),
        chain.authorizations_used.value(),
    ) {
        (Some(transfers), Some(used)) => Ok(attributable(transfers, used, wallet, nonce)),
        (None, _) => Err(format!(
            "transfers from our wallet unread: {}",
            chain.transfers_from_wallet.missing_because().unwrap_or("")
        )),
        (_, None) => Err(format!(
            "AuthorizationUsed logs unread: {}",
            chain.authorizations_used.missing_because().unwrap_or("")
        )),
    };

    let charge_in = |receipt: &TxReceipt, source| {
        let transfers: Vec<TransferLog> = receipt
            .logs
            .iter()
            .filter_map(decode_transfer)
            .filter(|t| t.from == wallet)
            .collect();
        (!transfers.is_empty()).then(|| Charge {
            source,
            tx: Some(receipt.transaction_hash),
            block: receipt.block_number,
            amount: sum_in(&transfers, asset),
            transfers,
        })
    };
    let claimed = chain.claimed_receipt.value().and_then(|r| r.as_ref());
    let charge =
        if let Some(charge) = nonce_receipt.and_then(|r| charge_in(r, ChargeSource::OurNonce)) {
            Ok(Some(charge))
        } else if let Some(charge) = claimed.and_then(|r| charge_in(r, ChargeSource::Claimed)) {
            Ok(Some(charge))
        } else {
            match (&pulls, &nonce_used) {
                (Ok(pulls), _) if !pulls.is_empty() => Ok(Some(Charge {
                    source: ChargeSource::Window,
                    tx: pulls[0].tx,
                    block: pulls[0].block.unwrap_or(0),
                    amount: sum_in(pulls, asset),
                    transfers: pulls.clone(),
                })),
                (Ok(_), Ok(false)) => Ok(None),
                (Ok(_), Ok(true)) => Err(
                    "our authorization is spent, but its transfer was not found in the blocks read"
                        .to_string(),
                ),
                (Err(e), _) | (_, Err(e)) => Err(e.clone()),
            }
        };

    let not_final = match chain.settlement_depth {
        Some(depth) if depth < chain.confirmations_required => Some(format!(
            "the settlement has {depth} of the {} confirmations asked for",
            chain.confirmations_required
        )),
        _ => None,
    };
    ChainFacts {
        nonce_used,
        charge,
        pulls,
        not_final,
    }
}

/// Transfers from `wallet` that are not settlements of another of our authorizations.
pub fn attributable(
    transfers: &[LogEntry],
    used: &[LogEntry],
    wallet: Address,
    our_nonce: B256,
) -> Vec<TransferLog> {
    let other_settlements: Vec<B256> = used
        .iter()
        .filter_map(|l| {
            let (authorizer, nonce) = decode_authorization_used(l)?;
            (authorizer == wallet && nonce != our_nonce)
                .then_some(l.transaction_hash)
                .flatten()
        })
        .collect();
    transfers
        .iter()
        .filter_map(decode_transfer)
        .filter(|t| t.from == wallet)
        .filter(|t| t.tx.is_none_or(|tx| !other_settlements.contains(&tx)))
        .collect()
}

pub fn sum_in(transfers: &[TransferLog], asset: Address) -> U256 {
    transfers
        .iter()
        .filter(|t| t.token == asset)
        .fold(U256::ZERO, |sum, t| sum.saturating_add(t.value))
}
