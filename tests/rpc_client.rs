#![cfg(feature = "lab")]
//! The fixed-RPC client against a real anvil with the lab token deployed, and against nothing.

use alloy::primitives::{Address, B256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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

/// A node on loopback that answers every request with `body` (HTTP 200), one connection at a time.
async fn node_answering(body: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            // Read the whole request (head, then the body its Content-Length announces), so that
            // closing does not reset the connection under the answer.
            let mut request = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let n = socket.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if request.len() >= end + 4 + length {
                        break;
                    }
                }
            }
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    });
    url
}

/// Found by the `rpc_response` fuzz target: a result of the wrong shape was quoted by cutting its
/// JSON at byte 200, which panicked when a character straddled that byte.
#[tokio::test]
async fn a_result_of_the_wrong_shape_is_a_bad_response_whatever_its_characters() {
    for pad in 0..4 {
        // "é" is two bytes: with 0..4 bytes of padding one of them straddles byte 200 of the
        // quoted JSON.
        let result = format!("{}{}", "a".repeat(pad), "é".repeat(300));
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": result}).to_string();
        let url = node_answering(body).await;
        match Rpc::new(url).chain_id().await {
            Err(RpcError::BadResponse { message, .. }) => {
                assert!(
                    message.starts_with("unexpected \"") && message.len() <= 220,
                    "{message}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
