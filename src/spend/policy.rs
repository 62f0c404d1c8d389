//! What we are willing to pay: the caps and the allowlist, and the pure check of one `accepts`
//! entry against them. The running totals (subject and daily caps) are checked by the store, inside
//! the same transaction that writes the reservation.

use alloy::primitives::{Address, U256};
use serde::{Deserialize, Serialize};

use crate::evidence::paid::{Refusal, RefusalCode};
use crate::evidence::usd::Usd;
use crate::x402::Requirement;
use crate::x402::network::{chain_id_of, is_caip2, usdc_deployments};
use crate::x402::solana::{SolanaAddress, SolanaNetwork};
use crate::x402::solana_payment::{SvmPaymentError, SvmQuote};
use crate::x402::types::{is_decimal_integer, parse_address_any_case};

/// Longest authorization window signed by default (`maxTimeoutSeconds`), in seconds. A longer one
/// keeps a signed authorization usable in someone else's hands, and our reservation open and
/// counted against the caps, for that long.
pub const DEFAULT_MAX_TIMEOUT_SECONDS: u64 = 86_400;

/// The spending rules. Every payment must satisfy all of them; see `state/spend.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PayPolicy {
    /// Most one call may cost.
    pub max_per_call_usd: Usd,
    /// Most one subject (endpoint URL) may cost over the last 24 hours, open reservations included.
    pub max_per_subject_per_day_usd: Usd,
    /// Most all payments together may cost over the last 24 hours, open reservations included.
    pub max_per_day_usd: Usd,
    /// The only (network, asset) pairs we pay in.
    pub allowlist: Vec<AllowedAsset>,
    /// Longest `maxTimeoutSeconds` we sign for.
    #[serde(default = "default_max_timeout")]
    pub max_timeout_seconds: u64,
    /// The only (Solana cluster, mint) pairs we pay in; the same caps count both lists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub svm_allowlist: Vec<AllowedSvmAsset>,
}

/// One SPL token we pay in on Solana, and what it is worth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllowedSvmAsset {
    /// The cluster: `solana:<genesis hash prefix>` (or a v1 name of the same cluster).
    pub network: String,
    /// The mint, base58.
    pub mint: String,
    pub decimals: u8,
    pub usd_per_unit: Usd,
}

impl AllowedSvmAsset {
    /// Circle's USDC on the three clusters, 6 decimals, one dollar each.
    pub fn canonical_usdc() -> Vec<AllowedSvmAsset> {
        [
            SolanaNetwork::Mainnet,
            SolanaNetwork::Devnet,
            SolanaNetwork::Testnet,
        ]
        .into_iter()
        .map(|n| AllowedSvmAsset {
            network: n.to_string(),
            mint: n.usdc_mint().to_string(),
            decimals: 6,
            usd_per_unit: Usd::from_atto(1_000_000_000_000_000_000),
        })
        .collect()
    }
}

fn default_max_timeout() -> u64 {
    DEFAULT_MAX_TIMEOUT_SECONDS
}

/// One token we pay in, and what it is worth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllowedAsset {
    /// CAIP-2, e.g. `eip155:8453`.
    pub network: String,
    /// The token contract.
    pub asset: Address,
    /// Decimals of the token's atomic unit (6 for USDC).
    pub decimals: u8,
    /// Dollars per whole token (1 for USDC).
    pub usd_per_unit: Usd,
}

impl AllowedAsset {
    /// The canonical USDC deployments this build knows (x402-facts section 6), 6 decimals, one
    /// dollar each: the usual allowlist for real use.
    pub fn canonical_usdc() -> Vec<AllowedAsset> {
        usdc_deployments()
            .iter()
            .map(|d| AllowedAsset {
                network: format!("eip155:{}", d.chain_id),
                asset: d.address,
                decimals: 6,
                usd_per_unit: Usd::from_atto(1_000_000_000_000_000_000),
            })
            .collect()
    }
}

impl PayPolicy {
    /// A policy with the given caps and allowlist, and the default longest timeout.
    pub fn new(
        max_per_call_usd: Usd,
        max_per_subject_per_day_usd: Usd,
        max_per_day_usd: Usd,
        allowlist: Vec<AllowedAsset>,
    ) -> PayPolicy {
        PayPolicy {
            max_per_call_usd,
            max_per_subject_per_day_usd,
            max_per_day_usd,
            allowlist,
            max_timeout_seconds: DEFAULT_MAX_TIMEOUT_SECONDS,
            svm_allowlist: Vec::new(),
        }
    }

    /// Checks the policy itself: CAIP-2 eip155 networks, sane decimals, no duplicate (network, asset).
    pub fn validate(&self) -> Result<(), String> {
        for entry in &self.allowlist {
            if !is_caip2(&entry.network) || chain_id_of(&entry.network).is_none() {
                return Err(format!(
                    "allowlist network {:?} is not a CAIP-2 eip155 chain id",
                    entry.network
                ));
            }
            if entry.decimals > 36 {
                return Err(format!("allowlist decimals {} is absurd", entry.decimals));
            }
        }
        for (i, a) in self.allowlist.iter().enumerate() {
            if self.allowlist[..i]
                .iter()
                .any(|b| b.network == a.network && b.asset == a.asset)
            {
                return Err(format!(
                    "allowlist lists {} on {} twice",
                    a.asset, a.network
                ));
            }
        }
        for (i, a) in self.svm_allowlist.iter().enumerate() {
            if SolanaNetwork::from_network(&a.network).is_none() {
                return Err(format!(
                    "Solana allowlist network {:?} is not Solana mainnet, devnet or testnet",
                    a.network
                ));
            }
            if let Err(e) = SolanaAddress::parse(&a.mint) {
                return Err(format!("Solana allowlist mint {:?} {e}", a.mint));
            }
            if a.decimals > 19 {
                return Err(format!(
                    "Solana allowlist decimals {} is absurd for a 64-bit amount",
                    a.decimals
                ));
            }
            if self.svm_allowlist[..i].iter().any(|b| {
                SolanaNetwork::from_network(&b.network) == SolanaNetwork::from_network(&a.network)
                    && b.mint == a.mint
            }) {
                return Err(format!(
                    "Solana allowlist lists {} on {} twice",
                    a.mint, a.network
                ));
            }
        }
        // Caps in any order are consistent: the smallest one that applies binds.
        Ok(())
    }

    /// The allowlist entry for a quoted network (CAIP-2, or a v1 name of the same chain) and asset.
    pub fn allowed(&self, network: &str, asset: Address) -> Option<&AllowedAsset> {
        let chain = chain_id_of(network)?;
        self.allowlist
            .iter()
            .find(|a| chain_id_of(&a.network) == Some(chain) && a.asset == asset)
    }
}

/// An `accepts` entry that passed every per-entry rule: what it asks, in checked form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Priced {
    pub network: String,
    pub chain_id: u64,
    pub asset: Address,
    pub pay_to: Address,
    pub amount: U256,
    pub cost: Usd,
    pub max_timeout_seconds: u64,
}

/// Checks one `accepts` entry against the policy's per-entry rules (scheme, transfer method,
/// allowlist, amount, per-call cap, timeout). Pure. The caps that depend on what was already spent
/// are checked by [`super::SpendStore::reserve`].
pub fn assess(policy: &PayPolicy, requirement: &Requirement) -> Result<Priced, Refusal> {
    let refuse = |code, message: String| Err(Refusal::new(code, message));
    let shown = |value: &Option<String>| match value {
        Some(v) => format!("{:?}", v.chars().take(80).collect::<String>()),
        None => "missing".to_string(),
    };
    // `upto`: the amount is a maximum and the charge is settled later, up to it. Every rule
    // below holds for the maximum (the caps included), so a refusal says which one an `upto`
    // entry breaks; one that breaks none is still refused: on EVM `upto` settles only through
    // Permit2, which this wallet does not sign (nothing is reserved or signed).
    let upto = requirement.scheme.as_deref() == Some("upto");
    if requirement.scheme.as_deref() != Some("exact") && !upto {
        return refuse(
            RefusalCode::SchemeNotExact,
            format!(
                "scheme is {}; only \"exact\" is paid",
                shown(&requirement.scheme)
            ),
        );
    }
    let method_ok = upto
        || match requirement.asset_transfer_method.as_deref() {
            None => requirement
                .entry
                .pointer("/extra/assetTransferMethod")
                .is_none(),
            Some(method) => method == "eip3009",
        };
    if !method_ok {
        let asked = requirement
            .entry
            .pointer("/extra/assetTransferMethod")
            .map(|v| v.to_string())
            .unwrap_or_default();
        return refuse(
            RefusalCode::TransferMethodNotEip3009,
            format!(
                "extra.assetTransferMethod is {}; only EIP-3009 transferWithAuthorization is signed",
                asked.chars().take(80).collect::<String>()
            ),
        );
    }
    let Some(network) = requirement.network.clone() else {
        return refuse(RefusalCode::NetworkNotAllowed, "network is missing".into());
    };
    let Some(chain_id) = chain_id_of(&network) else {
        return refuse(
            RefusalCode::NetworkNotAllowed,
            format!(
                "network {} is not an EVM chain this build knows",
                shown(&requirement.network)
            ),
        );
    };
    let Some(asset) = requirement
        .asset
        .as_deref()
        .and_then(parse_address_any_case)
    else {
        return refuse(
            RefusalCode::AssetNotAllowed,
            format!("asset {} is not an address", shown(&requirement.asset)),
        );
    };
    if !policy
        .allowlist
        .iter()
        .any(|a| chain_id_of(&a.network) == Some(chain_id))
    {
        return refuse(
            RefusalCode::NetworkNotAllowed,
            format!("network {network} (chain {chain_id}) is not on the allowlist"),
        );
    }
    let Some(allowed) = policy.allowed(&network, asset) else {
        return refuse(
            RefusalCode::AssetNotAllowed,
            format!("asset {asset} is not on the allowlist for {network}"),
        );
    };
    let amount = match requirement.amount.as_deref() {
        Some(text) if is_decimal_integer(text) => match U256::from_str_radix(text, 10) {
            Ok(amount) => amount,
            Err(_) => {
                return refuse(
                    RefusalCode::AmountInvalid,
                    "amount does not fit 256 bits".into(),
                );
            }
        },
        _ => {
            return refuse(
                RefusalCode::AmountInvalid,
                format!(
                    "amount {} is not a decimal integer string",
                    shown(&requirement.amount)
                ),
            );
        }
    };
    let Some(cost) = Usd::of_token_amount(amount, allowed.decimals, allowed.usd_per_unit) else {
        return refuse(
            RefusalCode::OverPerCallCap,
            format!("amount {amount} is too large to price"),
        );
    };
    if cost > policy.max_per_call_usd {
        return refuse(
            RefusalCode::OverPerCallCap,
            format!(
                "the quote costs {cost} USD, above the per-call cap of {} USD",
                policy.max_per_call_usd
            ),
        );
    }
    let Some(pay_to) = requirement
        .pay_to
        .as_deref()
        .and_then(parse_address_any_case)
    else {
        return refuse(
            RefusalCode::PayToInvalid,
            format!("payTo {} is not an address", shown(&requirement.pay_to)),
        );
    };
    if requirement.extra_name.is_none() || requirement.extra_version.is_none() {
        return refuse(
            RefusalCode::DomainMissing,
            "extra.name and extra.version (the token's EIP-712 domain) are required to sign".into(),
        );
    }
    let max_timeout_seconds = match requirement.max_timeout_seconds {
        Some(0) | None => {
            return refuse(
                RefusalCode::TimeoutInvalid,
                "maxTimeoutSeconds is missing or zero".into(),
            );
        }
        Some(t) if t > policy.max_timeout_seconds => {
            return refuse(
                RefusalCode::TimeoutInvalid,
                format!(
                    "maxTimeoutSeconds {t} is longer than the {} s we sign for",
                    policy.max_timeout_seconds
                ),
            );
        }
        Some(t) => t,
    };
    if upto {
        return refuse(
            RefusalCode::UptoNeedsPermit2,
            format!(
                "scheme \"upto\" (a maximum of {amount}, {cost} USD, within the per-call cap): on EVM it \
                 settles only through Permit2's permitWitnessTransferFrom, which this wallet does \
                 not sign; nothing was reserved or signed"
            ),
        );
    }
    Ok(Priced {
        network,
        chain_id,
        asset,
        pay_to,
        amount,
        cost,
        max_timeout_seconds,
    })
}

/// A Solana `accepts` entry that passed every per-entry rule: the quote in checked form and what
/// it costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PricedSvm {
    pub quote: SvmQuote,
    /// The allowlist entry's decimals: the mint must have exactly these on chain.
    pub decimals: u8,
    pub cost: Usd,
}

/// Checks one Solana `accepts` entry against the policy's per-entry rules (scheme, the entry
/// read strictly, the Solana allowlist, the per-call cap). Pure. The running totals are the
/// store's, counted over EVM and Solana reservations alike.
pub fn assess_svm(policy: &PayPolicy, requirement: &Requirement) -> Result<PricedSvm, Refusal> {
    if requirement.scheme.as_deref() != Some("exact") {
        return Err(Refusal::new(
            RefusalCode::SchemeNotExact,
            "only the \"exact\" scheme is paid",
        ));
    }
    let quote = SvmQuote::read(requirement).map_err(|e| {
        let field = match &e {
            SvmPaymentError::Missing { field, .. } | SvmPaymentError::Invalid { field, .. } => {
                *field
            }
        };
        let code = match field {
            "network" => RefusalCode::NetworkNotAllowed,
            "asset" => RefusalCode::AssetNotAllowed,
            "amount" => RefusalCode::AmountInvalid,
            "payTo" => RefusalCode::PayToInvalid,
            _ => RefusalCode::SvmTransferInvalid,
        };
        Refusal::new(code, e.to_string())
    })?;
    let mint = quote.mint.to_string();
    let Some(allowed) = policy
        .svm_allowlist
        .iter()
        .find(|a| SolanaNetwork::from_network(&a.network) == Some(quote.network) && a.mint == mint)
    else {
        return Err(Refusal::new(
            RefusalCode::AssetNotAllowed,
            format!(
                "mint {mint} on {} is not on the Solana allowlist",
                quote.network
            ),
        ));
    };
    let Some(cost) = Usd::of_token_amount(
        U256::from(quote.amount),
        allowed.decimals,
        allowed.usd_per_unit,
    ) else {
        return Err(Refusal::new(
            RefusalCode::OverPerCallCap,
            format!("amount {} is too large to price", quote.amount),
        ));
    };
    if cost > policy.max_per_call_usd {
        return Err(Refusal::new(
            RefusalCode::OverPerCallCap,
            format!(
                "the quote costs {cost} USD, above the per-call cap of {} USD",
                policy.max_per_call_usd
            ),
        ));
    }
    Ok(PricedSvm {
        quote,
        decimals: allowed.decimals,
        cost,
    })
}
