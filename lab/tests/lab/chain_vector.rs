//! The EIP-3009 test vector of the x402 specification (Base Sepolia USDC), checked without a chain, and
//! the committed fixture checked against the committed source.

use alloy::primitives::{B256, Signature, U256, address, b256, hex, keccak256};
use alloy::sol_types::SolCall;
use sha2::{Digest, Sha256};
use x402_lab::token::{
    Authorization, Domain, LabUsdc, TOKEN_SOURCE, authorization_digest, authorization_struct_hash,
    fixture, recover_authorization_signer,
};

fn spec_domain() -> Domain {
    Domain::new(
        "USDC",
        "2",
        84532,
        address!("036CbD53842c5426634e7929541eC2318f3dCF7e"),
    )
}

fn spec_authorization() -> Authorization {
    Authorization {
        from: address!("857b06519E91e3A54538791bDbb0E22373e36b66"),
        to: address!("209693Bc6afc0C5328bA36FaF03C514EF312287C"),
        value: U256::from(10_000u64),
        valid_after: U256::from(1_740_672_089u64),
        valid_before: U256::from(1_740_672_154u64),
        nonce: b256!("f3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"),
    }
}

/// The signature printed in the x402 specification's example payload (v1 and v2).
const SPEC_SIGNATURE: [u8; 65] = hex!(
    "2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c"
);

#[test]
fn struct_hash_and_digest_match_the_vector() {
    assert_eq!(
        authorization_struct_hash(&spec_authorization()),
        b256!("49ad644555c7bdf3ea4fc022a4940ae5589b230b1dde0065c5504fa19bbe39a4")
    );
    assert_eq!(
        authorization_digest(&spec_domain(), &spec_authorization()),
        b256!("f256992871671abcb27ff92885a7afa46218724e5fc0bac35d050115aa1d22e6")
    );
}

#[test]
fn the_spec_signature_recovers_to_from() {
    let signature = Signature::from_raw_array(&SPEC_SIGNATURE).expect("65 bytes, v 28");
    let signer = recover_authorization_signer(&spec_domain(), &spec_authorization(), &signature)
        .expect("recovers");
    assert_eq!(signer, spec_authorization().from);
}

#[test]
fn the_spec_signature_does_not_recover_to_from_under_another_domain() {
    let signature = Signature::from_raw_array(&SPEC_SIGNATURE).expect("65 bytes, v 28");
    for domain in [
        Domain {
            name: "USD Coin".into(),
            ..spec_domain()
        },
        Domain {
            version: "1".into(),
            ..spec_domain()
        },
        Domain {
            chain_id: 8453,
            ..spec_domain()
        },
    ] {
        let signer = recover_authorization_signer(&domain, &spec_authorization(), &signature);
        assert_ne!(signer.ok(), Some(spec_authorization().from), "{domain:?}");
    }
}

#[test]
fn the_domain_separator_follows_the_eip712_formula() {
    // keccak256(domain typehash ‖ keccak256(name) ‖ keccak256(version) ‖ u256(chainId) ‖ pad32(contract))
    let domain = spec_domain();
    let mut encoded = Vec::new();
    encoded.extend_from_slice(
        &keccak256(
            "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)",
        )[..],
    );
    encoded.extend_from_slice(&keccak256(domain.name.as_bytes())[..]);
    encoded.extend_from_slice(&keccak256(domain.version.as_bytes())[..]);
    encoded.extend_from_slice(&U256::from(domain.chain_id).to_be_bytes::<32>());
    encoded.extend_from_slice(&B256::left_padding_from(domain.verifying_contract.as_slice())[..]);
    assert_eq!(domain.separator(), keccak256(&encoded));
    assert_eq!(
        keccak256(
            "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
        ),
        b256!("8b73c3c69bb8fe3d512ecc4cf759cc79239f7b179b0ffacaa9a75d522b39400f")
    );
}

#[test]
fn the_fixture_was_built_from_the_committed_source() {
    let fixture = fixture().expect("the fixture parses");
    let source_sha256 = hex::encode(Sha256::digest(TOKEN_SOURCE.as_bytes()));
    assert_eq!(
        fixture.source_sha256, source_sha256,
        "contracts/LabUSDC.sol changed since the fixture was built: run `node lab/scripts/build-token.mjs`"
    );
    assert!(
        fixture.solc_version.starts_with("0.8."),
        "{}",
        fixture.solc_version
    );
}

#[test]
fn the_fixture_has_every_function_the_rust_side_calls() {
    let fixture = fixture().expect("the fixture parses");
    let compiled: Vec<&str> = fixture
        .method_identifiers
        .values()
        .map(String::as_str)
        .collect();
    let called = [
        (
            LabUsdc::transferWithAuthorization_0Call::SIGNATURE,
            LabUsdc::transferWithAuthorization_0Call::SELECTOR,
        ),
        (
            LabUsdc::transferWithAuthorization_1Call::SIGNATURE,
            LabUsdc::transferWithAuthorization_1Call::SELECTOR,
        ),
        (
            LabUsdc::receiveWithAuthorizationCall::SIGNATURE,
            LabUsdc::receiveWithAuthorizationCall::SELECTOR,
        ),
        (
            LabUsdc::cancelAuthorizationCall::SIGNATURE,
            LabUsdc::cancelAuthorizationCall::SELECTOR,
        ),
        (
            LabUsdc::authorizationStateCall::SIGNATURE,
            LabUsdc::authorizationStateCall::SELECTOR,
        ),
        (
            LabUsdc::eip712DomainCall::SIGNATURE,
            LabUsdc::eip712DomainCall::SELECTOR,
        ),
        (
            LabUsdc::DOMAIN_SEPARATORCall::SIGNATURE,
            LabUsdc::DOMAIN_SEPARATORCall::SELECTOR,
        ),
        (LabUsdc::mintCall::SIGNATURE, LabUsdc::mintCall::SELECTOR),
        (
            LabUsdc::transferFromCall::SIGNATURE,
            LabUsdc::transferFromCall::SELECTOR,
        ),
        (
            LabUsdc::approveCall::SIGNATURE,
            LabUsdc::approveCall::SELECTOR,
        ),
        (
            LabUsdc::transferCall::SIGNATURE,
            LabUsdc::transferCall::SELECTOR,
        ),
        (
            LabUsdc::balanceOfCall::SIGNATURE,
            LabUsdc::balanceOfCall::SELECTOR,
        ),
        (
            LabUsdc::allowanceCall::SIGNATURE,
            LabUsdc::allowanceCall::SELECTOR,
        ),
        (LabUsdc::ownerCall::SIGNATURE, LabUsdc::ownerCall::SELECTOR),
    ];
    for (signature, selector) in called {
        assert!(
            compiled.contains(&hex::encode(selector).as_str()),
            "the compiled token lacks {signature}"
        );
    }
    // The two settlement selectors the x402 facts name.
    assert_eq!(
        LabUsdc::transferWithAuthorization_0Call::SELECTOR,
        hex!("e3ee160e")
    );
    assert_eq!(
        LabUsdc::transferWithAuthorization_1Call::SELECTOR,
        hex!("cf092995")
    );
    assert_eq!(LabUsdc::authorizationStateCall::SELECTOR, hex!("e94a0102"));
}
