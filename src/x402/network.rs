//! Network identifiers (CAIP-2 and the v1 short names) and the canonical USDC deployments.
//!
//! Facts restated from the protocol digest: v1 names map to chain ids as the TypeScript and Rust
//! references do (where the Python SDK disagrees for a few minor chains, the majority value is used).

use alloy::primitives::{Address, address};

/// v1 short network names of EVM chains and their chain ids.
const V1_EVM_NAMES: &[(&str, u64)] = &[
    ("ethereum", 1),
    ("base", 8453),
    ("base-sepolia", 84532),
    ("avalanche", 43114),
    ("avalanche-fuji", 43113),
    ("polygon", 137),
    ("polygon-amoy", 80002),
    ("sei", 1329),
    ("sei-testnet", 1328),
    ("iotex", 4689),
    ("peaq", 3338),
    ("abstract", 2741),
    ("abstract-testnet", 11124),
    ("xdc", 50),
    ("celo", 42220),
    ("monad", 143),
    ("megaeth", 4326),
    ("stable", 988),
    ("story", 1514),
    ("educhain", 41923),
    ("skale-base-sepolia", 324705682),
];

/// v1 short names of non-EVM networks (known, but without an EVM chain id).
const V1_OTHER_NAMES: &[&str] = &["solana", "solana-devnet", "solana-testnet"];

/// One canonical USDC deployment: the token contract and its EIP-712 domain name and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsdcDeployment {
    pub chain_id: u64,
    pub address: Address,
    pub name: &'static str,
    pub version: &'static str,
}

/// Canonical USDC by chain. Polygon's domain name is disputed between sources ("USD Coin" vs
/// "USDC"); the majority value is listed, and C3 compares against the chain anyway. Optimism is
/// left out because no source gives its domain name.
const USDC: &[UsdcDeployment] = &[
    usdc(
        1,
        address!("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
        "USD Coin",
        "2",
    ),
    usdc(
        8453,
        address!("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
        "USD Coin",
        "2",
    ),
    usdc(
        84532,
        address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
        "USDC",
        "2",
    ),
    usdc(
        137,
        address!("0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"),
        "USD Coin",
        "2",
    ),
    usdc(
        80002,
        address!("0x41E94Eb019C0762f9Bfcf9Fb1E58725BfB0e7582"),
        "USDC",
        "2",
    ),
    usdc(
        43114,
        address!("0xB97EF9Ef8734C71904D8002F8b6Bc66Dd9c48a6E"),
        "USD Coin",
        "2",
    ),
    usdc(
        43113,
        address!("0x5425890298aed601595a70AB815c96711a31Bc65"),
        "USD Coin",
        "2",
    ),
    usdc(
        42161,
        address!("0xaf88d065e77c8cC2239327C5EDb3A432268e5831"),
        "USD Coin",
        "2",
    ),
    usdc(
        421614,
        address!("0x75faf114eafb1BDbe2F0316DF893fd58CE46AA4d"),
        "USD Coin",
        "2",
    ),
    usdc(
        1329,
        address!("0xe15fC38F6D8c56aF07bbCBe3BAf5708A2Bf42392"),
        "USDC",
        "2",
    ),
    usdc(
        4689,
        address!("0xcdf79194c6c285077a58da47641d4dbe51f63542"),
        "Bridged USDC",
        "2",
    ),
    usdc(
        143,
        address!("0x754704Bc059F8C67012fEd69BC8A327a5aafb603"),
        "USD Coin",
        "2",
    ),
];

const fn usdc(
    chain_id: u64,
    address: Address,
    name: &'static str,
    version: &'static str,
) -> UsdcDeployment {
    UsdcDeployment {
        chain_id,
        address,
        name,
        version,
    }
}

/// The canonical USDC contract on `chain_id` with its EIP-712 domain name and version.
pub fn canonical_usdc(chain_id: u64) -> Option<(Address, &'static str, &'static str)> {
    USDC.iter()
        .find(|d| d.chain_id == chain_id)
        .map(|d| (d.address, d.name, d.version))
}

/// Every canonical USDC deployment this build knows.
pub fn usdc_deployments() -> &'static [UsdcDeployment] {
    USDC
}

/// The EVM chain id of a network: `eip155:<id>` (CAIP-2) or a known v1 short name.
pub fn chain_id_of(network: &str) -> Option<u64> {
    if let Some(reference) = network.strip_prefix("eip155:") {
        return parse_chain_reference(reference);
    }
    V1_EVM_NAMES
        .iter()
        .find(|(name, _)| *name == network)
        .map(|(_, id)| *id)
}

/// A CAIP-2 chain reference of the eip155 namespace is the decimal chain id, written without a
/// sign or leading zeros; chain id 0 is not a chain.
fn parse_chain_reference(reference: &str) -> Option<u64> {
    let canonical = !reference.is_empty()
        && reference.bytes().all(|b| b.is_ascii_digit())
        && !reference.starts_with('0');
    if !canonical {
        return None;
    }
    reference.parse().ok()
}

/// Whether `network` is a syntactically valid CAIP-2 chain id: `namespace:reference` with a
/// namespace of 3-8 characters `[-a-z0-9]` and a reference of 1-32 characters `[-_a-zA-Z0-9]`.
/// For the eip155 namespace the reference must also be a canonical chain id.
pub fn is_caip2(network: &str) -> bool {
    let Some((namespace, reference)) = network.split_once(':') else {
        return false;
    };
    let namespace_ok = (3..=8).contains(&namespace.len())
        && namespace
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let reference_ok = (1..=32).contains(&reference.len())
        && reference
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !(namespace_ok && reference_ok) {
        return false;
    }
    namespace != "eip155" || parse_chain_reference(reference).is_some()
}

/// Whether `network` is one of the v1 short names (EVM or not).
pub fn is_known_v1_name(network: &str) -> bool {
    V1_EVM_NAMES.iter().any(|(name, _)| *name == network) || V1_OTHER_NAMES.contains(&network)
}

/// What kind of addresses a network uses, which decides how payTo and asset are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressKind {
    /// 20-byte hex addresses with EIP-55 checksums.
    Evm,
    /// Base58 public keys.
    Solana,
    /// A network this build does not know the address format of.
    Other,
}

/// The address kind of a network given as CAIP-2 or a v1 name. An unrecognised string counts as
/// EVM: every network a v1 server could mean without naming Solana is an EVM chain.
pub fn address_kind(network: &str) -> AddressKind {
    if network.starts_with("solana:") || V1_OTHER_NAMES.contains(&network) {
        return AddressKind::Solana;
    }
    match network.split_once(':') {
        Some(("eip155", _)) | None => AddressKind::Evm,
        Some(_) => AddressKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_ids_from_caip2_and_v1_names() {
        assert_eq!(chain_id_of("eip155:8453"), Some(8453));
        assert_eq!(chain_id_of("eip155:31337"), Some(31337));
        assert_eq!(chain_id_of("base-sepolia"), Some(84532));
        assert_eq!(chain_id_of("sei-testnet"), Some(1328));
        assert_eq!(chain_id_of("eip155:0"), None);
        assert_eq!(chain_id_of("eip155:08453"), None);
        assert_eq!(chain_id_of("eip155:-1"), None);
        assert_eq!(chain_id_of("eip155:99999999999999999999999"), None);
        assert_eq!(chain_id_of("solana"), None);
        assert_eq!(chain_id_of("Base"), None);
    }

    #[test]
    fn caip2_syntax() {
        assert!(is_caip2("eip155:84532"));
        assert!(is_caip2("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"));
        assert!(!is_caip2("base"));
        assert!(!is_caip2("eip155:"));
        assert!(!is_caip2("EIP155:1"));
        assert!(!is_caip2("eip155:abc"));
        assert!(!is_caip2("ab:1"));
        assert!(!is_caip2("eip155:1:2"));
    }

    #[test]
    fn usdc_table_is_checksummed_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for d in usdc_deployments() {
            assert!(seen.insert(d.chain_id), "chain {} listed twice", d.chain_id);
            assert!(!d.name.is_empty() && !d.version.is_empty());
        }
        let (address, name, version) = canonical_usdc(84532).expect("base sepolia listed");
        assert_eq!(
            address.to_checksum(None),
            "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
        );
        assert_eq!((name, version), ("USDC", "2"));
        assert_eq!(canonical_usdc(10), None);
    }

    #[test]
    fn address_kinds() {
        assert_eq!(address_kind("eip155:1"), AddressKind::Evm);
        assert_eq!(address_kind("base"), AddressKind::Evm);
        assert_eq!(address_kind("solana-devnet"), AddressKind::Solana);
        assert_eq!(
            address_kind("solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1"),
            AddressKind::Solana
        );
        assert_eq!(address_kind("cosmos:cosmoshub-4"), AddressKind::Other);
    }
}
