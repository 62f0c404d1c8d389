#![cfg(feature = "lab")]
//! The fixed-RPC client against a real anvil with the lab token deployed, and against nothing.

use alloy::primitives::{Address, B256};
use x402_lab::Lab;
use x402_probe::probe::rpc::{Rpc, RpcError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_chain_facts_from_the_lab() {
    let lab = Lab::start_with(x402_lab::LabOptions {
        scenarios: Some(vec![]),
        ..Default::default()
    })
    .await
    .unwrap();
    let rpc = Rpc::new(lab.rpc_url());
    assert_eq!(rpc.chain_id().await.unwrap(), lab.chain_id);
    let domain = rpc.token_domain(lab.token.address()).await.unwrap();
    assert_eq!(
        (domain.name.as_str(), domain.version.as_str()),
        ("USDC", "2")
    );
    assert_eq!(
        domain.domain_separator,
        lab.token.domain_separator().await.unwrap()
    );
    let fake = rpc.token_domain(lab.fake_token.address()).await.unwrap();
    assert_ne!(fake.name, "USDC");
    assert!(
        !rpc.authorization_state(lab.token.address(), lab.payer, B256::repeat_byte(7))
            .await
            .unwrap()
    );
    assert_eq!(
        rpc.balance_of(lab.token.address(), lab.payer)
            .await
            .unwrap(),
        lab.token.balance_of(lab.payer).await.unwrap()
    );
    assert_eq!(rpc.receipt(B256::repeat_byte(9)).await.unwrap(), None);
    // A call to an address without code returns nothing, which is not a domain.
    assert!(matches!(
        rpc.token_domain(Address::repeat_byte(1)).await,
        Err(RpcError::BadResponse { .. })
    ));
}

#[tokio::test]
async fn an_rpc_that_is_not_there_is_unreachable_not_a_fact() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = Rpc::new(url).chain_id().await.unwrap_err();
    assert!(matches!(err, RpcError::Unreachable { .. }), "{err}");
}
