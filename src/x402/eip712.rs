//! EIP-712 typed data of the exact EVM scheme: EIP-3009 `TransferWithAuthorization` under the
//! token's domain (name, version, chain id, token address). Pure: hashing and recovery only.

use alloy::primitives::{Address, B256, Signature, U256, b256};
use alloy::sol_types::{Eip712Domain, SolStruct};

alloy::sol! {
    /// EIP-3009's authorization message, fields in the order of the token's typehash.
    #[derive(Debug, PartialEq, Eq)]
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// keccak256 of the `TransferWithAuthorization(...)` type string (the constant in Circle's token).
pub const TRANSFER_WITH_AUTHORIZATION_TYPEHASH: B256 =
    b256!("0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267");

/// What a payer authorizes: move `value` atomic units from `from` to `to`, valid strictly between
/// `valid_after` and `valid_before` (unix seconds), once (`nonce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authorization {
    pub from: Address,
    pub to: Address,
    pub value: U256,
    pub valid_after: u64,
    pub valid_before: u64,
    pub nonce: B256,
}

impl Authorization {
    fn message(&self) -> TransferWithAuthorization {
        TransferWithAuthorization {
            from: self.from,
            to: self.to,
            value: self.value,
            validAfter: U256::from(self.valid_after),
            validBefore: U256::from(self.valid_before),
            nonce: self.nonce,
        }
    }
}

/// The token's EIP-712 domain: `extra.name`, `extra.version`, the network's chain id, the asset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenDomain {
    pub name: String,
    pub version: String,
    pub chain_id: u64,
    pub verifying_contract: Address,
}

impl TokenDomain {
    pub fn eip712(&self) -> Eip712Domain {
        Eip712Domain::new(
            Some(self.name.clone().into()),
            Some(self.version.clone().into()),
            Some(U256::from(self.chain_id)),
            Some(self.verifying_contract),
            None,
        )
    }

    /// What the token's `DOMAIN_SEPARATOR()` returns when its name and version are these.
    pub fn separator(&self) -> B256 {
        self.eip712().separator()
    }
}

/// The EIP-712 struct hash of the authorization.
pub fn transfer_struct_hash(authorization: &Authorization) -> B256 {
    authorization.message().eip712_hash_struct()
}

/// The digest a payer signs: keccak256(0x19 0x01 ‖ domain separator ‖ struct hash).
pub fn transfer_digest(domain: &TokenDomain, authorization: &Authorization) -> B256 {
    authorization
        .message()
        .eip712_signing_hash(&domain.eip712())
}

/// Why a signature does not recover.
#[derive(Debug, thiserror::Error)]
#[error("signature does not recover: {0}")]
pub struct RecoverError(#[from] alloy::primitives::SignatureError);

/// The address that produced a 65-byte `r ‖ s ‖ v` signature over `digest`.
pub fn recover_signer(digest: &B256, signature: &[u8]) -> Result<Address, RecoverError> {
    let signature = Signature::from_raw(signature)?;
    Ok(signature.recover_address_from_prehash(digest)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::{address, hex, keccak256};

    /// The vector of the x402 specification's exact EVM example (Base Sepolia USDC).
    fn spec_vector() -> (TokenDomain, Authorization) {
        let domain = TokenDomain {
            name: "USDC".into(),
            version: "2".into(),
            chain_id: 84532,
            verifying_contract: address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
        };
        let authorization = Authorization {
            from: address!("0x857b06519E91e3A54538791bDbb0E22373e36b66"),
            to: address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            value: U256::from(10_000u64),
            valid_after: 1_740_672_089,
            valid_before: 1_740_672_154,
            nonce: b256!("0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"),
        };
        (domain, authorization)
    }

    const SPEC_SIGNATURE: &str = "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c";

    #[test]
    fn typehash_matches_the_type_string() {
        let computed = keccak256(
            "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)",
        );
        assert_eq!(computed, TRANSFER_WITH_AUTHORIZATION_TYPEHASH);
        assert_eq!(
            TransferWithAuthorization::eip712_type_hash(&spec_vector().1.message()),
            TRANSFER_WITH_AUTHORIZATION_TYPEHASH
        );
    }

    #[test]
    fn spec_vector_struct_hash_digest_and_signer() {
        let (domain, authorization) = spec_vector();
        assert_eq!(
            transfer_struct_hash(&authorization),
            b256!("0x49ad644555c7bdf3ea4fc022a4940ae5589b230b1dde0065c5504fa19bbe39a4")
        );
        let digest = transfer_digest(&domain, &authorization);
        assert_eq!(
            digest,
            b256!("0xf256992871671abcb27ff92885a7afa46218724e5fc0bac35d050115aa1d22e6")
        );
        let signature = hex::decode(SPEC_SIGNATURE).expect("hex");
        assert_eq!(
            recover_signer(&digest, &signature).expect("recovers"),
            authorization.from
        );
        // A different message must not recover to the payer.
        let mut other = authorization;
        other.value = U256::from(10_001u64);
        let other_digest = transfer_digest(&domain, &other);
        assert_ne!(
            recover_signer(&other_digest, &signature).ok(),
            Some(authorization.from)
        );
    }

    #[test]
    fn domain_separators_of_known_usdc() {
        let cases = [
            (
                "USDC",
                84532,
                address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
                b256!("0x71f17a3b2ff373b803d70a5a07c046c1a2bc8e89c09ef722fcb047abe94c9818"),
            ),
            (
                "USD Coin",
                8453,
                address!("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
                b256!("0x02fa7265e7c5d81118673727957699e4d68f74cd74b7db77da710fe8a2c7834f"),
            ),
            (
                "USD Coin",
                1,
                address!("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
                b256!("0x06c37168a7db5138defc7866392bb87a741f9b3d104deb5094588ce041cae335"),
            ),
        ];
        for (name, chain_id, token, expected) in cases {
            let domain = TokenDomain {
                name: name.into(),
                version: "2".into(),
                chain_id,
                verifying_contract: token,
            };
            assert_eq!(domain.separator(), expected, "{name} on {chain_id}");
        }
    }

    #[test]
    fn malformed_signatures_are_errors() {
        let digest = B256::ZERO;
        assert!(recover_signer(&digest, &[0u8; 10]).is_err());
        assert!(recover_signer(&digest, &[0u8; 65]).is_err());
    }
}
