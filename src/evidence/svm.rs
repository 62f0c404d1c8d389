//! What the fixed Solana RPC showed of a paid call on Solana: the transactions that touched our
//! token account, read with `getTransaction` (`jsonParsed`), as far as the money checks need
//! them. Plain data, read by `paid::svm_chain`.

use serde::{Deserialize, Serialize};

use super::chain::ChainRead;

/// One token account's balance before or after a transaction (`meta.preTokenBalances` /
/// `postTokenBalances`), with its address resolved from the account keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SvmTokenBalance {
    /// The token account, base58.
    pub account: String,
    pub mint: String,
    /// The account's owner, when the node gives it.
    pub owner: Option<String>,
    /// Atomic units.
    pub amount: u64,
}

/// A landed transaction (`getTransaction`): its signatures (the first is its id), `meta.err`
/// and the token balances around it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SvmTransactionSeen {
    pub signatures: Vec<String>,
    pub slot: u64,
    /// `meta.err` as text; `None` when it succeeded.
    pub err: Option<String>,
    pub pre: Vec<SvmTokenBalance>,
    pub post: Vec<SvmTokenBalance>,
}

impl SvmTransactionSeen {
    /// The transaction's id: its first signature.
    pub fn id(&self) -> &str {
        self.signatures.first().map(String::as_str).unwrap_or("")
    }

    /// How much `account`'s balance of `mint` changed (post minus pre; an account missing on one
    /// side counts as 0 there).
    pub fn change(&self, account: &str, mint: &str) -> i128 {
        let amount = |list: &[SvmTokenBalance]| {
            list.iter()
                .filter(|b| b.account == account && b.mint == mint)
                .map(|b| i128::from(b.amount))
                .sum::<i128>()
        };
        amount(&self.post) - amount(&self.pre)
    }

    /// Every token account whose balance of `mint` rose, with by how much.
    pub fn credits(&self, mint: &str) -> Vec<(String, u64)> {
        let mut accounts: Vec<&str> = self
            .pre
            .iter()
            .chain(&self.post)
            .filter(|b| b.mint == mint)
            .map(|b| b.account.as_str())
            .collect();
        accounts.sort_unstable();
        accounts.dedup();
        accounts
            .into_iter()
            .filter_map(|a| {
                let change = self.change(a, mint);
                (change > 0).then(|| (a.to_string(), u64::try_from(change).unwrap_or(u64::MAX)))
            })
            .collect()
    }
}

/// The chain around a Solana payment: the payment as we signed it, and what our RPC showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SvmPaidChainSeen {
    pub rpc_url: String,
    /// Our signature (base58): a transaction carrying it is ours, whoever landed it.
    pub our_signature: String,
    /// Our token account (ATA) the payment is taken from.
    pub source: String,
    /// payTo's token account (ATA) the quote pays.
    pub destination: String,
    pub mint: String,
    /// The quoted amount, atomic units.
    pub amount: u64,
    /// The transaction the settlement response names (`None`: the node does not know it).
    pub claimed: ChainRead<Option<SvmTransactionSeen>>,
    /// Every transaction that touched our token account since the call began (newest first,
    /// from `getSignaturesForAddress`), each read with `getTransaction`.
    pub window: ChainRead<Vec<SvmTransactionSeen>>,
}

/// What was signed and sent on Solana (public once sent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SvmPaymentSent {
    pub reservation_id: i64,
    pub cost_usd: super::usd::Usd,
    /// The cluster, CAIP-2.
    pub network: String,
    /// Our wallet (the token authority), base58.
    pub payer: String,
    /// The facilitator's account that pays the fees (the quote's `extra.feePayer`).
    pub fee_payer: String,
    pub mint: String,
    /// Our token account.
    pub source: String,
    /// payTo's token account.
    pub destination: String,
    pub pay_to: String,
    /// Atomic units.
    pub amount: u64,
    pub memo: String,
    /// The blockhash the transaction was built on, and the block height past which it can never
    /// land.
    pub blockhash: String,
    pub last_valid_block_height: u64,
    /// Ours, base58.
    pub signature: String,
    pub header_name: String,
    pub header_value: String,
    /// Our clock when the request was sent, unix seconds.
    pub sent_at: i64,
}

/// A paid call on Solana: what was sent, and what our Solana RPC showed of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SvmPaidSeen {
    pub payment: SvmPaymentSent,
    pub chain: SvmPaidChainSeen,
    /// The block height read before sending.
    pub block_height_before: u64,
    /// The newest transaction of our token account before the call (the window's reads start
    /// after it); `None` when it had none.
    pub window_after: Option<String>,
}
