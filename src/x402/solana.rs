//! Solana (SVM) facts of the `exact` scheme, pure: the three networks and their USDC mints,
//! base58 addresses of 32 bytes, the associated token account (ATA) an agent pays into, and the
//! SPL Token layouts of a mint and a token account as our Solana RPC returns them (base64 bytes).
//!
//! The ATA is derived here (a program-derived address: SHA-256 of the seeds, the first bump whose
//! hash is off the ed25519 curve), not taken from any SDK, so what the probe reads is our own
//! reading of the scheme; the lab places its accounts with the official
//! `spl-associated-token-account-interface`, which checks this derivation against the reference.

use std::fmt;

use curve25519_dalek::edwards::CompressedEdwardsY;
use sha2::{Digest, Sha256};

/// The SPL Token program.
pub const TOKEN_PROGRAM: &str = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";
/// The SPL Token-2022 program.
pub const TOKEN_2022_PROGRAM: &str = "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb";
/// The associated token account program.
pub const ASSOCIATED_TOKEN_PROGRAM: &str = "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL";
/// The most bytes `extra.memo` may hold (the exact SVM scheme's bound).
pub const MAX_MEMO_BYTES: usize = 256;
/// USDC's decimals: the quote's atomic units assume them.
pub const USDC_DECIMALS: u8 = 6;

/// The Solana clusters x402 names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SolanaNetwork {
    Mainnet,
    Devnet,
    Testnet,
}

impl SolanaNetwork {
    const ALL: [SolanaNetwork; 3] = [
        SolanaNetwork::Mainnet,
        SolanaNetwork::Devnet,
        SolanaNetwork::Testnet,
    ];

    /// The network an entry names, as CAIP-2 (`solana:<genesis hash prefix>`) or a v1 name.
    pub fn from_network(network: &str) -> Option<SolanaNetwork> {
        Self::ALL.into_iter().find(|n| {
            network == n.v1_name() || network.strip_prefix("solana:") == Some(n.reference())
        })
    }

    /// The CAIP-2 reference: the first 32 characters of the cluster's genesis hash.
    pub fn reference(self) -> &'static str {
        match self {
            SolanaNetwork::Mainnet => "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
            SolanaNetwork::Devnet => "EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
            SolanaNetwork::Testnet => "4uhcVJyU9pJkvQyS88uRDiswHXSCkY3z",
        }
    }

    pub fn v1_name(self) -> &'static str {
        match self {
            SolanaNetwork::Mainnet => "solana",
            SolanaNetwork::Devnet => "solana-devnet",
            SolanaNetwork::Testnet => "solana-testnet",
        }
    }

    /// The canonical USDC mint of the cluster (devnet and testnet share Circle's test mint).
    pub fn usdc_mint(self) -> &'static str {
        match self {
            SolanaNetwork::Mainnet => "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
            SolanaNetwork::Devnet | SolanaNetwork::Testnet => {
                "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU"
            }
        }
    }

    /// Whether a node whose `getGenesisHash` answered `genesis_hash` serves this cluster.
    pub fn is_served_by(self, genesis_hash: &str) -> bool {
        genesis_hash.starts_with(self.reference())
    }
}

impl fmt::Display for SolanaNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "solana:{}", self.reference())
    }
}

/// A Solana address: 32 bytes, written in base58.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SolanaAddress(pub [u8; 32]);

/// Why a text is not a Solana address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("is not base58")]
    NotBase58,
    #[error("decodes to {0} bytes, not 32")]
    WrongLength(usize),
}

/// The longest base58 text of 32 bytes (44 characters), with room for a few leading zeros'
/// `1`s: anything longer is refused before decoding.
const MAX_ADDRESS_CHARS: usize = 48;

impl SolanaAddress {
    pub fn parse(text: &str) -> Result<SolanaAddress, AddressError> {
        if text.len() > MAX_ADDRESS_CHARS {
            return Err(AddressError::WrongLength(text.len() * 3 / 4));
        }
        let bytes = bs58::decode(text)
            .into_vec()
            .map_err(|_| AddressError::NotBase58)?;
        let array: [u8; 32] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| AddressError::WrongLength(bytes.len()))?;
        Ok(SolanaAddress(array))
    }

    /// A constant written in this file (always valid).
    fn known(text: &str) -> SolanaAddress {
        SolanaAddress::parse(text).expect("a constant of this file is a Solana address")
    }

    pub fn token_program() -> SolanaAddress {
        Self::known(TOKEN_PROGRAM)
    }

    pub fn token_2022_program() -> SolanaAddress {
        Self::known(TOKEN_2022_PROGRAM)
    }

    /// Whether the address is a point of the ed25519 curve (a key pair's public key can be;
    /// a program-derived address never is).
    pub fn is_on_curve(&self) -> bool {
        CompressedEdwardsY(self.0).decompress().is_some()
    }

    /// The associated token account of `owner` for `mint` under `token_program`: the program
    /// address of the ATA program with seeds (owner, token program, mint), found as Solana's
    /// `find_program_address` does (bump 255 down to the first hash off the curve).
    pub fn associated_token_account(
        owner: &SolanaAddress,
        mint: &SolanaAddress,
        token_program: &SolanaAddress,
    ) -> Option<SolanaAddress> {
        let program = Self::known(ASSOCIATED_TOKEN_PROGRAM);
        (0..=u8::MAX).rev().find_map(|bump| {
            let mut hasher = Sha256::new();
            for seed in [&owner.0[..], &token_program.0[..], &mint.0[..], &[bump][..]] {
                hasher.update(seed);
            }
            hasher.update(program.0);
            hasher.update(b"ProgramDerivedAddress");
            let candidate = SolanaAddress(hasher.finalize().into());
            (!candidate.is_on_curve()).then_some(candidate)
        })
    }
}

impl fmt::Display for SolanaAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&bs58::encode(self.0).into_string())
    }
}

impl fmt::Debug for SolanaAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SolanaAddress({self})")
    }
}

/// The base of an SPL mint (Token and Token-2022 alike: Token-2022's extensions follow it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MintState {
    pub decimals: u8,
    pub is_initialized: bool,
}

/// Length of a mint's base layout.
pub const MINT_LEN: usize = 82;
/// Length of a token account's base layout.
pub const TOKEN_ACCOUNT_LEN: usize = 165;

impl MintState {
    /// Read from an account's data: mint authority (COption, 36 bytes), supply (8), decimals,
    /// is_initialized, freeze authority (36). None when the data is shorter than that.
    pub fn read(data: &[u8]) -> Option<MintState> {
        if data.len() < MINT_LEN {
            return None;
        }
        Some(MintState {
            decimals: data[44],
            is_initialized: data[45] == 1,
        })
    }
}

/// A token account's state byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenAccountState {
    Uninitialized,
    Initialized,
    Frozen,
    /// A value the layout does not define.
    Invalid(u8),
}

/// The base of an SPL token account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenAccount {
    pub mint: SolanaAddress,
    pub owner: SolanaAddress,
    pub amount: u64,
    pub state: TokenAccountState,
}

impl TokenAccount {
    /// Read from an account's data: mint (32), owner (32), amount (8, little-endian), delegate
    /// (COption, 36), state (1), ... 165 bytes in all. None when the data is shorter.
    pub fn read(data: &[u8]) -> Option<TokenAccount> {
        if data.len() < TOKEN_ACCOUNT_LEN {
            return None;
        }
        let address = |at: usize| {
            let mut bytes = [0u8; 32];
            bytes.copy_from_slice(&data[at..at + 32]);
            SolanaAddress(bytes)
        };
        let mut amount = [0u8; 8];
        amount.copy_from_slice(&data[64..72]);
        let state = match data[108] {
            0 => TokenAccountState::Uninitialized,
            1 => TokenAccountState::Initialized,
            2 => TokenAccountState::Frozen,
            other => TokenAccountState::Invalid(other),
        };
        Some(TokenAccount {
            mint: address(0),
            owner: address(32),
            amount: u64::from_le_bytes(amount),
            state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_by_caip2_and_v1_name() {
        assert_eq!(
            SolanaNetwork::from_network("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"),
            Some(SolanaNetwork::Mainnet)
        );
        assert_eq!(
            SolanaNetwork::from_network("solana-devnet"),
            Some(SolanaNetwork::Devnet)
        );
        assert_eq!(
            SolanaNetwork::from_network("solana-testnet"),
            Some(SolanaNetwork::Testnet)
        );
        assert_eq!(SolanaNetwork::from_network("solana:unknowncluster"), None);
        assert_eq!(SolanaNetwork::from_network("eip155:8453"), None);
        assert!(SolanaNetwork::Devnet.is_served_by("EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG"));
        assert!(
            !SolanaNetwork::Mainnet.is_served_by("EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG")
        );
    }

    #[test]
    fn addresses_are_32_bytes_of_base58() {
        let usdc = SolanaAddress::parse(SolanaNetwork::Mainnet.usdc_mint()).unwrap();
        assert_eq!(usdc.to_string(), SolanaNetwork::Mainnet.usdc_mint());
        assert_eq!(
            SolanaAddress::parse("11111111111111111111111111111111").unwrap(),
            SolanaAddress([0; 32])
        );
        // 0, O, I and l are not base58.
        assert_eq!(
            SolanaAddress::parse("0PjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"),
            Err(AddressError::NotBase58)
        );
        // Valid base58, the wrong length: 31 zero bytes, 33 bytes, and a short name.
        assert_eq!(
            SolanaAddress::parse(&"1".repeat(31)),
            Err(AddressError::WrongLength(31))
        );
        assert_eq!(
            SolanaAddress::parse(&"1".repeat(33)),
            Err(AddressError::WrongLength(33))
        );
        assert!(matches!(
            SolanaAddress::parse("PayeeAddr1"),
            Err(AddressError::WrongLength(_))
        ));
        assert!(matches!(
            SolanaAddress::parse(&"z".repeat(10_000)),
            Err(AddressError::WrongLength(_))
        ));
    }

    /// A well-known ATA, as the Solana explorers and `spl-token address` give it: the USDC
    /// account of the wallet `9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM` (the address of
    /// the Solana docs' examples); and the curve test on both kinds of address.
    #[test]
    fn associated_token_accounts_are_off_curve_program_addresses() {
        let owner = SolanaAddress::parse("9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM").unwrap();
        let mint = SolanaAddress::parse(SolanaNetwork::Mainnet.usdc_mint()).unwrap();
        let ata =
            SolanaAddress::associated_token_account(&owner, &mint, &SolanaAddress::token_program())
                .unwrap();
        assert!(!ata.is_on_curve());
        assert!(owner.is_on_curve());
        // The other token program gives another account.
        let ata_2022 = SolanaAddress::associated_token_account(
            &owner,
            &mint,
            &SolanaAddress::token_2022_program(),
        )
        .unwrap();
        assert_ne!(ata, ata_2022);
    }

    #[test]
    fn layouts_read_their_fields_and_refuse_short_data() {
        let mut mint = vec![0u8; MINT_LEN];
        mint[44] = 6;
        mint[45] = 1;
        assert_eq!(
            MintState::read(&mint),
            Some(MintState {
                decimals: 6,
                is_initialized: true
            })
        );
        assert_eq!(MintState::read(&mint[..81]), None);
        let mut account = vec![0u8; TOKEN_ACCOUNT_LEN];
        account[..32].copy_from_slice(&[7; 32]);
        account[32..64].copy_from_slice(&[9; 32]);
        account[64..72].copy_from_slice(&5u64.to_le_bytes());
        account[108] = 2;
        let read = TokenAccount::read(&account).unwrap();
        assert_eq!(read.mint, SolanaAddress([7; 32]));
        assert_eq!(read.owner, SolanaAddress([9; 32]));
        assert_eq!(read.amount, 5);
        assert_eq!(read.state, TokenAccountState::Frozen);
        account[108] = 9;
        assert_eq!(
            TokenAccount::read(&account).unwrap().state,
            TokenAccountState::Invalid(9)
        );
        assert_eq!(TokenAccount::read(&account[..164]), None);
    }
}
