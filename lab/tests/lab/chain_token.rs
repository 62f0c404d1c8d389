//! LabUSDC on a real anvil: deploy, mint, EIP-3009 settlement with both overloads and its logs, replay,
//! time window, foreign domains, malleable signatures, cancel, receive, allowances, domain separator.

use alloy::primitives::{Address, B256, Signature, U256, b256};
use alloy::sol_types::SolCall;
use x402_lab::chain::{Anvil, DEV_ACCOUNTS, DevAccount};
use x402_lab::rpc::{CallRequest, LogFilter, Rpc};
use x402_lab::token::{
    AUTHORIZATION_USED_TOPIC, Authorization, Domain, LabUsdc, Token, TokenError, USDC_NAME,
    USDC_VERSION, authorizations_used, decode_authorization_canceled, recover_authorization_signer,
    sign_authorization, sign_cancel_authorization, sign_receive_authorization,
    transfer_with_authorization_calldata, transfers,
};

const OWNER: DevAccount = DEV_ACCOUNTS[0];
const PAYER: DevAccount = DEV_ACCOUNTS[1];
const PAYEE: DevAccount = DEV_ACCOUNTS[2];
const FACILITATOR: DevAccount = DEV_ACCOUNTS[3];

const FUNDS: u64 = 1_000_000;
const PRICE: u64 = 10_000;

/// The order of the secp256k1 group.
const SECP256K1_N: U256 = U256::from_be_bytes(
    b256!("fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141").0,
);

struct World {
    // Held so the node lives as long as the test.
    _anvil: Anvil,
    rpc: Rpc,
    token: Token,
}

/// A fresh chain with the token deployed as USDC and the payer funded.
async fn world() -> World {
    let anvil = Anvil::start().await.expect("anvil starts");
    let rpc = anvil.rpc().expect("rpc client");
    let token = Token::deploy(&rpc, OWNER.address, USDC_NAME, USDC_VERSION)
        .await
        .expect("the token deploys");
    let balance = token
        .fund_payer(PAYER.address, U256::from(FUNDS))
        .await
        .expect("the payer is funded");
    assert_eq!(balance, U256::from(FUNDS));
    World {
        _anvil: anvil,
        rpc,
        token,
    }
}

impl World {
    async fn chain_now(&self) -> u64 {
        self.rpc
            .latest_block_timestamp()
            .await
            .expect("latest block")
    }

    /// The payer's authorization of PRICE to the payee, valid from 10 minutes ago for 10 minutes.
    async fn authorization(&self) -> Authorization {
        let now = self.chain_now().await;
        Authorization::new(
            PAYER.address,
            PAYEE.address,
            U256::from(PRICE),
            now - 600,
            now + 600,
        )
    }

    async fn balance(&self, account: Address) -> u64 {
        let balance = self.token.balance_of(account).await.expect("balanceOf");
        u64::try_from(balance).expect("a small balance")
    }
}

fn padded(address: Address) -> B256 {
    B256::left_padding_from(address.as_slice())
}

fn expect_revert(result: Result<alloy::primitives::TxHash, TokenError>, reason: &str) {
    let error = result.expect_err("the token must refuse");
    assert_eq!(error.revert_reason(), Some(reason), "{error}");
}

#[tokio::test]
async fn a_signed_authorization_settles_once_with_the_documented_logs() {
    let w = world().await;
    let authorization = w.authorization().await;
    let signature =
        sign_authorization(&PAYER.signer(), w.token.domain(), &authorization).expect("signs");
    assert_eq!(
        recover_authorization_signer(w.token.domain(), &authorization, &signature)
            .expect("recovers"),
        PAYER.address
    );
    w.token
        .simulate_transfer_with_authorization(FACILITATOR.address, &authorization, &signature)
        .await
        .expect("the simulation passes before settlement");
    assert!(
        !w.token
            .authorization_state(PAYER.address, authorization.nonce)
            .await
            .expect("authorizationState")
    );

    let tx_hash = w
        .token
        .transfer_with_authorization(FACILITATOR.address, &authorization, &signature)
        .await
        .expect("settles");

    assert_eq!(w.balance(PAYER.address).await, FUNDS - PRICE);
    assert_eq!(w.balance(PAYEE.address).await, PRICE);
    assert_eq!(w.balance(FACILITATOR.address).await, 0);
    assert!(
        w.token
            .authorization_state(PAYER.address, authorization.nonce)
            .await
            .expect("authorizationState")
    );

    // Both logs come from the token, AuthorizationUsed first, with the exact topics of the facts sheet.
    let receipt = w.rpc.wait_receipt(tx_hash).await.expect("receipt");
    assert!(receipt.succeeded);
    assert_eq!(receipt.from, FACILITATOR.address);
    assert_eq!(receipt.logs.len(), 2, "{:?}", receipt.logs);
    let (used, transfer) = (&receipt.logs[0], &receipt.logs[1]);
    assert_eq!(used.address, w.token.address());
    assert_eq!(
        used.topics,
        vec![
            b256!("98de503528ee59b575ef0c0a2576a82497bfc029a5685b209e9ec333479b10a5"),
            padded(PAYER.address),
            authorization.nonce,
        ]
    );
    assert!(used.data.is_empty());
    assert_eq!(transfer.address, w.token.address());
    assert_eq!(
        transfer.topics,
        vec![
            b256!("ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"),
            padded(PAYER.address),
            padded(PAYEE.address),
        ]
    );
    assert_eq!(transfer.data[..], U256::from(PRICE).to_be_bytes::<32>());

    // The decoders read the same.
    let decoded = w.token.transfers_in(&receipt);
    assert_eq!(decoded.len(), 1);
    assert_eq!(
        (decoded[0].from, decoded[0].to),
        (PAYER.address, PAYEE.address)
    );
    assert_eq!(decoded[0].value, U256::from(PRICE));
    let used = w.token.authorizations_used_in(&receipt);
    assert_eq!(used.len(), 1);
    assert_eq!(
        (used[0].authorizer, used[0].nonce),
        (PAYER.address, authorization.nonce)
    );

    // eth_getLogs finds the settlement by payer and nonce, as the probe does when it has no tx hash.
    let found = w
        .rpc
        .get_logs(&LogFilter {
            address: Some(w.token.address()),
            topics: vec![
                Some(AUTHORIZATION_USED_TOPIC),
                Some(padded(PAYER.address)),
                Some(authorization.nonce),
            ],
            ..LogFilter::default()
        })
        .await
        .expect("eth_getLogs");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].transaction_hash, Some(tx_hash));

    // Replaying the same authorization, through either overload, is refused and moves nothing.
    expect_revert(
        w.token
            .transfer_with_authorization(FACILITATOR.address, &authorization, &signature)
            .await,
        "authorization is used or canceled",
    );
    expect_revert(
        w.token
            .transfer_with_authorization_bytes(
                FACILITATOR.address,
                &authorization,
                &signature.as_bytes(),
            )
            .await,
        "authorization is used or canceled",
    );
    let simulated = w
        .token
        .simulate_transfer_with_authorization(FACILITATOR.address, &authorization, &signature)
        .await
        .expect_err("the simulation of a replay fails");
    assert_eq!(
        simulated.revert_reason(),
        Some("authorization is used or canceled")
    );
    assert_eq!(w.balance(PAYEE.address).await, PRICE);
}

#[tokio::test]
async fn the_bytes_overload_settles_too() {
    let w = world().await;
    let authorization = w.authorization().await;
    let signature =
        sign_authorization(&PAYER.signer(), w.token.domain(), &authorization).expect("signs");
    let tx_hash = w
        .token
        .transfer_with_authorization_bytes(
            FACILITATOR.address,
            &authorization,
            &signature.as_bytes(),
        )
        .await
        .expect("settles");
    let receipt = w.rpc.wait_receipt(tx_hash).await.expect("receipt");
    assert_eq!(authorizations_used(&receipt).len(), 1);
    assert_eq!(transfers(&receipt)[0].value, U256::from(PRICE));
    assert_eq!(w.balance(PAYEE.address).await, PRICE);
    assert!(
        w.token
            .authorization_state(PAYER.address, authorization.nonce)
            .await
            .expect("authorizationState")
    );
}

#[tokio::test]
async fn expired_and_not_yet_valid_authorizations_revert() {
    let w = world().await;
    let now = w.chain_now().await;
    let signer = PAYER.signer();

    // The next block's timestamp is at least `now`, so a window ending at `now` is already closed.
    let expired = Authorization::new(
        PAYER.address,
        PAYEE.address,
        U256::from(PRICE),
        now - 600,
        now,
    );
    let signature = sign_authorization(&signer, w.token.domain(), &expired).expect("signs");
    expect_revert(
        w.token
            .transfer_with_authorization(FACILITATOR.address, &expired, &signature)
            .await,
        "authorization is expired",
    );

    let early = Authorization::new(
        PAYER.address,
        PAYEE.address,
        U256::from(PRICE),
        now + 3600,
        now + 7200,
    );
    let signature = sign_authorization(&signer, w.token.domain(), &early).expect("signs");
    expect_revert(
        w.token
            .transfer_with_authorization(FACILITATOR.address, &early, &signature)
            .await,
        "authorization is not yet valid",
    );

    // Refused authorizations burn nothing.
    for nonce in [expired.nonce, early.nonce] {
        assert!(
            !w.token
                .authorization_state(PAYER.address, nonce)
                .await
                .expect("state")
        );
    }
    assert_eq!(w.balance(PAYER.address).await, FUNDS);
}

#[tokio::test]
async fn the_time_window_is_strict_at_both_ends() {
    let w = world().await;
    let signer = PAYER.signer();
    let start = w.chain_now().await + 100;

    // Mines one settlement in a block whose timestamp is exactly `block_time`. With an explicit gas
    // limit the node does not pre-check the call, so a revert is mined and shows in the receipt.
    let settle_at = |block_time: u64, valid_after: u64, valid_before: u64| {
        let authorization = Authorization::new(
            PAYER.address,
            PAYEE.address,
            U256::from(PRICE),
            valid_after,
            valid_before,
        );
        let signature =
            sign_authorization(&signer, w.token.domain(), &authorization).expect("signs");
        let rpc = w.rpc.clone();
        let token = w.token.address();
        async move {
            rpc.set_next_block_timestamp(block_time)
                .await
                .expect("set the next timestamp");
            let tx = CallRequest::call(
                token,
                transfer_with_authorization_calldata(&authorization, &signature),
            )
            .with_from(FACILITATOR.address)
            .with_gas(200_000);
            let tx_hash = rpc.send_transaction(&tx).await.expect("mined");
            let receipt = rpc.wait_receipt(tx_hash).await.expect("receipt");
            (receipt.succeeded, receipt.block_number)
        }
    };

    let t = start;
    let (succeeded, _) = settle_at(t, t, t + 60).await;
    assert!(!succeeded, "block.timestamp == validAfter must revert");
    let t = start + 10;
    let (succeeded, _) = settle_at(t, t - 60, t).await;
    assert!(!succeeded, "block.timestamp == validBefore must revert");
    let t = start + 20;
    let (succeeded, block) = settle_at(t, t - 1, t + 1).await;
    assert!(
        succeeded,
        "validAfter < block.timestamp < validBefore must settle"
    );

    // The settlement really was mined at `t`.
    let timestamp = w.rpc.latest_block_timestamp().await.expect("timestamp");
    assert_eq!(timestamp, t);
    assert_eq!(w.rpc.block_number().await.expect("block"), block);
    assert_eq!(w.balance(PAYEE.address).await, PRICE);
}

#[tokio::test]
async fn a_signature_for_another_domain_reverts() {
    let w = world().await;
    let authorization = w.authorization().await;
    let real = w.token.domain().clone();
    let signer = PAYER.signer();
    let foreign_domains = [
        Domain {
            name: "USDC".into(),
            ..real.clone()
        },
        Domain {
            version: "1".into(),
            ..real.clone()
        },
        Domain {
            chain_id: 8453,
            ..real.clone()
        },
        Domain {
            verifying_contract: Address::repeat_byte(0x42),
            ..real.clone()
        },
    ];
    for domain in foreign_domains {
        let signature = sign_authorization(&signer, &domain, &authorization).expect("signs");
        expect_revert(
            w.token
                .transfer_with_authorization(FACILITATOR.address, &authorization, &signature)
                .await,
            "invalid signature",
        );
    }
    assert_eq!(w.balance(PAYER.address).await, FUNDS);
}

#[tokio::test]
async fn a_fake_token_differs_only_in_its_domain() {
    let w = world().await;
    let fake = Token::deploy(&w.rpc, OWNER.address, USDC_NAME, "1")
        .await
        .expect("the fake deploys");
    fake.mint(PAYER.address, U256::from(FUNDS))
        .await
        .expect("mint");
    assert_eq!(fake.version().await.expect("version"), "1");
    assert_ne!(
        fake.domain_separator().await.expect("separator"),
        w.token.domain_separator().await.expect("separator")
    );

    // Signed with the domain a 402 would declare for the fake (version "2"): refused.
    let authorization = w.authorization().await;
    let declared = Domain {
        version: USDC_VERSION.into(),
        ..fake.domain().clone()
    };
    let signature = sign_authorization(&PAYER.signer(), &declared, &authorization).expect("signs");
    expect_revert(
        fake.transfer_with_authorization(FACILITATOR.address, &authorization, &signature)
            .await,
        "invalid signature",
    );
    // Signed with the fake's real domain: accepted. So the domain was the only difference.
    let signature =
        sign_authorization(&PAYER.signer(), fake.domain(), &authorization).expect("signs");
    fake.transfer_with_authorization(FACILITATOR.address, &authorization, &signature)
        .await
        .expect("settles on the fake");
    assert_eq!(
        fake.balance_of(PAYEE.address).await.expect("balance"),
        U256::from(PRICE)
    );
    assert_eq!(w.balance(PAYEE.address).await, 0);
}

#[tokio::test]
async fn malleable_and_malformed_signatures_revert() {
    let w = world().await;
    let authorization = w.authorization().await;
    let signature =
        sign_authorization(&PAYER.signer(), w.token.domain(), &authorization).expect("signs");

    // The high-s twin is a valid ECDSA signature of the same digest, yet must be refused.
    let twin = Signature::new(signature.r(), SECP256K1_N - signature.s(), !signature.v());
    assert_eq!(
        recover_authorization_signer(w.token.domain(), &authorization, &twin).expect("recovers"),
        PAYER.address,
        "the twin is a real signature"
    );
    expect_revert(
        w.token
            .transfer_with_authorization(FACILITATOR.address, &authorization, &twin)
            .await,
        "invalid signature s value",
    );

    // v must be 27 or 28; the same signature with v as 0/1 is refused.
    let mut parity_v = signature.as_bytes();
    parity_v[64] -= 27;
    expect_revert(
        w.token
            .transfer_with_authorization_bytes(FACILITATOR.address, &authorization, &parity_v)
            .await,
        "invalid signature v value",
    );
    // Only 65-byte signatures.
    expect_revert(
        w.token
            .transfer_with_authorization_bytes(
                FACILITATOR.address,
                &authorization,
                &signature.as_bytes()[..64],
            )
            .await,
        "invalid signature length",
    );
    // The payer's signature over another amount.
    let more = Authorization {
        value: U256::from(PRICE * 2),
        ..authorization
    };
    expect_revert(
        w.token
            .transfer_with_authorization(FACILITATOR.address, &more, &signature)
            .await,
        "invalid signature",
    );

    // None of that burned the nonce: the genuine signature still settles.
    w.token
        .transfer_with_authorization(FACILITATOR.address, &authorization, &signature)
        .await
        .expect("the genuine signature settles");
    assert_eq!(w.balance(PAYEE.address).await, PRICE);
}

#[tokio::test]
async fn an_authorization_beyond_the_balance_reverts_without_burning_the_nonce() {
    let w = world().await;
    let mut authorization = w.authorization().await;
    authorization.value = U256::from(FUNDS + 1);
    let signature =
        sign_authorization(&PAYER.signer(), w.token.domain(), &authorization).expect("signs");
    expect_revert(
        w.token
            .transfer_with_authorization(FACILITATOR.address, &authorization, &signature)
            .await,
        "transfer amount exceeds balance",
    );
    assert!(
        !w.token
            .authorization_state(PAYER.address, authorization.nonce)
            .await
            .expect("state")
    );
}

#[tokio::test]
async fn cancel_authorization_burns_the_nonce() {
    let w = world().await;
    let authorization = w.authorization().await;
    let signature =
        sign_authorization(&PAYER.signer(), w.token.domain(), &authorization).expect("signs");

    let cancel = sign_cancel_authorization(
        &PAYER.signer(),
        w.token.domain(),
        PAYER.address,
        authorization.nonce,
    )
    .expect("signs the cancel");
    // A cancel signed by someone else is refused.
    let forged = sign_cancel_authorization(
        &PAYEE.signer(),
        w.token.domain(),
        PAYER.address,
        authorization.nonce,
    )
    .expect("signs");
    expect_revert(
        w.token
            .cancel_authorization(
                FACILITATOR.address,
                PAYER.address,
                authorization.nonce,
                &forged,
            )
            .await,
        "invalid signature",
    );

    let tx_hash = w
        .token
        .cancel_authorization(
            FACILITATOR.address,
            PAYER.address,
            authorization.nonce,
            &cancel,
        )
        .await
        .expect("cancels");
    assert!(
        w.token
            .authorization_state(PAYER.address, authorization.nonce)
            .await
            .expect("state")
    );
    let receipt = w.rpc.wait_receipt(tx_hash).await.expect("receipt");
    assert_eq!(receipt.logs.len(), 1);
    assert_eq!(
        receipt.logs[0].topics[0],
        b256!("1cdd46ff242716cdaa72d159d339a485b3438398348d68f09d7c8c0a59353d81")
    );
    let canceled =
        decode_authorization_canceled(&receipt.logs[0]).expect("an AuthorizationCanceled");
    assert_eq!(
        (canceled.authorizer, canceled.nonce),
        (PAYER.address, authorization.nonce)
    );
    assert!(transfers(&receipt).is_empty());

    expect_revert(
        w.token
            .transfer_with_authorization(FACILITATOR.address, &authorization, &signature)
            .await,
        "authorization is used or canceled",
    );
    expect_revert(
        w.token
            .cancel_authorization(
                FACILITATOR.address,
                PAYER.address,
                authorization.nonce,
                &cancel,
            )
            .await,
        "authorization is used or canceled",
    );
    assert_eq!(w.balance(PAYER.address).await, FUNDS);
}

#[tokio::test]
async fn receive_with_authorization_is_for_the_payee_only() {
    let w = world().await;
    let authorization = w.authorization().await;
    let signature = sign_receive_authorization(&PAYER.signer(), w.token.domain(), &authorization)
        .expect("signs");
    expect_revert(
        w.token
            .receive_with_authorization(FACILITATOR.address, &authorization, &signature)
            .await,
        "caller must be the payee",
    );
    // A transferWithAuthorization signature is for another EIP-712 type.
    let transfer_signature =
        sign_authorization(&PAYER.signer(), w.token.domain(), &authorization).expect("signs");
    expect_revert(
        w.token
            .receive_with_authorization(PAYEE.address, &authorization, &transfer_signature)
            .await,
        "invalid signature",
    );
    w.token
        .receive_with_authorization(PAYEE.address, &authorization, &signature)
        .await
        .expect("the payee receives");
    assert_eq!(w.balance(PAYEE.address).await, PRICE);
    assert!(
        w.token
            .authorization_state(PAYER.address, authorization.nonce)
            .await
            .expect("state")
    );
}

#[tokio::test]
async fn transfer_from_moves_funds_within_the_allowance() {
    let w = world().await;
    w.token
        .approve(PAYER.address, FACILITATOR.address, U256::from(5_000))
        .await
        .expect("approve");
    assert_eq!(
        w.token
            .allowance(PAYER.address, FACILITATOR.address)
            .await
            .expect("allowance"),
        U256::from(5_000)
    );
    let tx_hash = w
        .token
        .transfer_from(
            FACILITATOR.address,
            PAYER.address,
            PAYEE.address,
            U256::from(3_000),
        )
        .await
        .expect("transferFrom");
    let receipt = w.rpc.wait_receipt(tx_hash).await.expect("receipt");
    assert_eq!(transfers(&receipt)[0].from, PAYER.address);
    assert_eq!(w.balance(PAYEE.address).await, 3_000);
    assert_eq!(
        w.token
            .allowance(PAYER.address, FACILITATOR.address)
            .await
            .expect("allowance"),
        U256::from(2_000)
    );
    expect_revert(
        w.token
            .transfer_from(
                FACILITATOR.address,
                PAYER.address,
                PAYEE.address,
                U256::from(3_000),
            )
            .await,
        "insufficient allowance",
    );

    // A refund is a plain transfer back.
    w.token
        .transfer(PAYEE.address, PAYER.address, U256::from(3_000))
        .await
        .expect("refund");
    assert_eq!(w.balance(PAYER.address).await, FUNDS);
    assert_eq!(w.balance(PAYEE.address).await, 0);
}

#[tokio::test]
async fn only_the_owner_mints() {
    let w = world().await;
    let call = LabUsdc::mintCall {
        to: PAYER.address,
        value: U256::from(1),
    };
    let tx = CallRequest::call(w.token.address(), call.abi_encode()).with_from(PAYER.address);
    let error = w
        .rpc
        .eth_call(&tx)
        .await
        .expect_err("a stranger cannot mint");
    assert_eq!(
        error.revert_reason(),
        Some("caller is not the owner"),
        "{error}"
    );
    // Mined anyway, it reverts and mints nothing.
    let tx_hash = w
        .rpc
        .send_transaction(&tx.with_gas(100_000))
        .await
        .expect("mined");
    assert!(
        !w.rpc
            .wait_receipt(tx_hash)
            .await
            .expect("receipt")
            .succeeded
    );
    assert_eq!(
        w.token.total_supply().await.expect("supply"),
        U256::from(FUNDS)
    );
}

#[tokio::test]
async fn the_domain_on_chain_is_the_one_computed_locally() {
    let w = world().await;
    assert_eq!(
        w.token.domain_separator().await.expect("DOMAIN_SEPARATOR"),
        w.token.domain().separator()
    );
    let expected = Domain::new(
        USDC_NAME,
        USDC_VERSION,
        w.rpc.chain_id().await.expect("chain id"),
        w.token.address(),
    );
    assert_eq!(w.token.domain(), &expected);
    assert_eq!(
        w.token.onchain_domain().await.expect("eip712Domain"),
        expected
    );
    assert_eq!(w.token.name().await.expect("name"), USDC_NAME);
    assert_eq!(w.token.version().await.expect("version"), USDC_VERSION);
    assert_eq!(w.token.decimals().await.expect("decimals"), 6);

    // Attaching to the deployed token reads the same domain and owner back.
    let attached = Token::at(&w.rpc, w.token.address())
        .await
        .expect("attaches");
    assert_eq!(attached.domain(), &expected);
    assert_eq!(attached.owner(), OWNER.address);
}
