//! What a run saw the subject declare, from its first usable 402: the terms H2 and H3 compare
//! over time, kept with each run (the store's `declared` rows) and read by the scorer's value
//! and the webhooks.

use serde::{Deserialize, Serialize};

use super::paid::address_any_case;
use super::usd::Usd;

/// What a run saw the subject declare, from its first usable 402.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Declared {
    pub at_ms: i64,
    /// SHA-256 of the stable parts of the requirements and their description
    /// (`checks::history::fingerprint`).
    pub fingerprint: String,
    /// The first `accepts` entry's network, asset, amount and payTo, as written.
    pub network: Option<String>,
    pub asset: Option<String>,
    pub amount: Option<String>,
    pub pay_to: Option<String>,
    /// Who signed the `offer-receipt` offer committing to the first entry, when one is signed
    /// and its signature verifies (an EIP-55 address or a `did:key`): the key H3 reads as the
    /// seller's continuity across a payTo change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offer_signer: Option<String>,
}

impl Declared {
    /// The price as comparable: network and asset (asset case-insensitive), and the amount.
    pub(crate) fn priced_in(&self) -> Option<(String, String)> {
        Some((
            self.network.clone()?,
            self.asset.as_deref()?.to_ascii_lowercase(),
        ))
    }

    /// The price the first `accepts` entry quotes, its integer amount read as atomic units of a
    /// 6-decimal dollar token (USDC, as x402 quotes): the one reading of a price that scores
    /// (the daemon's, `recompute`'s and `probe`'s) take. `None` without an integer amount.
    pub fn price_usd(&self) -> Option<Usd> {
        Usd::of_micros(self.amount.as_deref()?.parse().ok()?)
    }

    pub(crate) fn amount_value(&self) -> Option<u128> {
        self.amount.as_deref()?.parse().ok()
    }

    pub(crate) fn pay_to_address(&self) -> Option<alloy::primitives::Address> {
        self.pay_to.as_deref().and_then(address_any_case)
    }
}
