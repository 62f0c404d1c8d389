//! The JSON-RPC client against a real anvil: the anvil-only helpers the lab uses, and errors that name
//! the method and what the node said.

use alloy::primitives::{Address, Bytes, U256};
use serde_json::{Value, json};
use x402_lab::chain::{Anvil, DEV_ACCOUNTS};
use x402_lab::rpc::{CallRequest, LogFilter, Rpc, RpcError};

async fn node() -> (Anvil, Rpc) {
    let anvil = Anvil::start().await.expect("anvil starts");
    let rpc = anvil.rpc().expect("rpc client");
    (anvil, rpc)
}

#[tokio::test]
async fn set_code_and_set_balance_change_the_state() {
    let (_anvil, rpc) = node().await;
    let stub = Address::repeat_byte(0x40);
    assert!(rpc.code(stub).await.expect("eth_getCode").is_empty());
    rpc.set_code(stub, &[0x00]).await.expect("anvil_setCode");
    assert_eq!(
        rpc.code(stub).await.expect("eth_getCode"),
        Bytes::from_static(&[0x00])
    );

    rpc.set_balance(stub, U256::from(12_345))
        .await
        .expect("anvil_setBalance");
    assert_eq!(
        rpc.balance(stub).await.expect("eth_getBalance"),
        U256::from(12_345)
    );
}

#[tokio::test]
async fn an_impersonated_account_can_send() {
    let (_anvil, rpc) = node().await;
    let stranger = Address::repeat_byte(0x77);
    let recipient = DEV_ACCOUNTS[5].address;
    let before = rpc.balance(recipient).await.expect("balance");
    let payment = CallRequest {
        to: Some(recipient),
        ..CallRequest::default()
    }
    .with_from(stranger)
    .with_value(U256::from(1_000));

    let refused = rpc.send_transaction(&payment).await;
    assert!(refused.is_err(), "anvil holds no key for {stranger}");

    rpc.set_balance(stranger, U256::from(10u64).pow(U256::from(18u64)))
        .await
        .expect("fund");
    rpc.impersonate(stranger).await.expect("impersonate");
    let tx_hash = rpc.send_transaction(&payment).await.expect("sends");
    let receipt = rpc.wait_receipt(tx_hash).await.expect("receipt");
    assert!(receipt.succeeded);
    assert_eq!(receipt.from, stranger);
    assert_eq!(
        rpc.balance(recipient).await.expect("balance"),
        before + U256::from(1_000)
    );
}

#[tokio::test]
async fn time_moves_forward_on_request() {
    let (_anvil, rpc) = node().await;
    let before = rpc.latest_block_timestamp().await.expect("timestamp");
    let height = rpc.block_number().await.expect("height");
    rpc.increase_time(3_600).await.expect("evm_increaseTime");
    rpc.mine().await.expect("evm_mine");
    assert_eq!(rpc.block_number().await.expect("height"), height + 1);
    let after = rpc.latest_block_timestamp().await.expect("timestamp");
    assert!(after >= before + 3_600, "{before} -> {after}");

    rpc.set_next_block_timestamp(after + 10_000)
        .await
        .expect("evm_setNextBlockTimestamp");
    rpc.mine().await.expect("evm_mine");
    assert_eq!(
        rpc.latest_block_timestamp().await.expect("timestamp"),
        after + 10_000
    );
}

#[tokio::test]
async fn node_errors_name_the_method_and_the_message() {
    let (_anvil, rpc) = node().await;
    let error = rpc
        .call::<Value>("eth_noSuchMethod", json!([]))
        .await
        .expect_err("unknown method");
    let RpcError::Node {
        method, message, ..
    } = &error
    else {
        panic!("expected a node error, got {error}");
    };
    assert_eq!(method, "eth_noSuchMethod");
    assert!(!message.is_empty());
    assert!(error.to_string().contains("eth_noSuchMethod"), "{error}");

    // A result of the wrong shape is a decode error naming the method.
    let error = rpc
        .call::<u64>("eth_accounts", json!([]))
        .await
        .expect_err("an array is not a number");
    assert!(matches!(error, RpcError::Decode { .. }), "{error}");
    assert!(error.to_string().contains("eth_accounts"), "{error}");

    // A transaction without a sender is refused before it reaches the node.
    let error = rpc
        .send_transaction(&CallRequest::call(Address::ZERO, Bytes::new()))
        .await
        .expect_err("no sender");
    assert!(error.to_string().contains("no sender"), "{error}");
}

#[tokio::test]
async fn unknown_receipts_and_empty_log_queries_are_not_errors() {
    let (_anvil, rpc) = node().await;
    let unknown = alloy::primitives::B256::repeat_byte(0x99);
    assert_eq!(
        rpc.receipt(unknown)
            .await
            .expect("eth_getTransactionReceipt"),
        None
    );
    let logs = rpc
        .get_logs(&LogFilter {
            address: Some(Address::repeat_byte(0x12)),
            ..LogFilter::default()
        })
        .await
        .expect("eth_getLogs");
    assert!(logs.is_empty());
    let waited = rpc
        .wait_receipt_within(unknown, std::time::Duration::from_millis(50))
        .await
        .expect_err("never mined");
    assert!(matches!(waited, RpcError::Timeout { .. }), "{waited}");
}

#[tokio::test]
async fn an_unreachable_node_is_a_transport_error_naming_the_url() {
    // Bind and drop a listener to get a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let rpc = Rpc::new(&url).expect("client");
    let error = rpc.chain_id().await.expect_err("nothing listens");
    assert!(matches!(error, RpcError::Transport { .. }), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("eth_chainId") && text.contains(&url),
        "{text}"
    );
}
