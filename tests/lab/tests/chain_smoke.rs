//! The shortest path through the lab chain: start anvil, deploy the token, pay with an authorization.

use alloy::primitives::U256;
use x402_lab::chain::{Anvil, DEV_ACCOUNTS};
use x402_lab::token::{Authorization, Token, USDC_NAME, USDC_VERSION, sign_authorization};

#[tokio::test]
async fn deploy_mint_and_settle_an_authorization() {
    let anvil = Anvil::start().await.expect("anvil starts");
    println!("anvil ready in {:?}", anvil.startup_time());
    let rpc = anvil.rpc().expect("rpc client");
    let [owner, payer, payee, facilitator, ..] = DEV_ACCOUNTS;
    let token = Token::deploy(&rpc, owner.address, USDC_NAME, USDC_VERSION)
        .await
        .expect("token deploys");
    token
        .mint(payer.address, U256::from(1_000_000))
        .await
        .expect("mint");
    let now = rpc.latest_block_timestamp().await.expect("timestamp");
    let authorization = Authorization::new(
        payer.address,
        payee.address,
        U256::from(10_000),
        now - 600,
        now + 60,
    );
    let signature =
        sign_authorization(&payer.signer(), token.domain(), &authorization).expect("signs");
    token
        .transfer_with_authorization(facilitator.address, &authorization, &signature)
        .await
        .expect("settles");
    assert_eq!(
        token.balance_of(payee.address).await.expect("balance"),
        U256::from(10_000)
    );
    assert!(
        token
            .authorization_state(payer.address, authorization.nonce)
            .await
            .expect("state")
    );
}
