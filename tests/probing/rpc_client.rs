//! The fixed-RPC client against a real anvil with the lab token deployed, against nothing, and
//! behind a hostile proxy that forwards everything but `eth_call`, which it answers badly.

use alloy::primitives::{Address, B256};
use x402_lab::Lab;
use x402_probe::probe::rpc::{Rpc, RpcError};

use crate::rpc_support;
use rpc_support::{answer, read_request};

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
    // Bound but not listening: refused, and the port stays ours (a listener dropped first could
    // hand it to another test's server meanwhile).
    let closed = tokio::net::TcpSocket::new_v4().unwrap();
    closed.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    let err = Rpc::new(url).chain_id().await.unwrap_err();
    drop(closed);
    assert!(matches!(err, RpcError::Unreachable { .. }), "{err}");
}

/// A node on loopback that answers every request with `body` (HTTP 200), one connection at a time.
async fn node_answering(body: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            read_request(&mut socket).await;
            answer(&mut socket, 200, "application/json", body.as_bytes()).await;
        }
    });
    url
}

/// A proxy on loopback in front of the real node at `upstream`: every call is forwarded, except
/// `eth_call`, which is answered with `status`, `content_type` and `body`.
async fn node_misanswering_eth_call(
    upstream: String,
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let body = std::sync::Arc::new(body);
    tokio::spawn(async move {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        while let Ok((mut socket, _)) = listener.accept().await {
            let (client, upstream, body) = (client.clone(), upstream.clone(), body.clone());
            tokio::spawn(async move {
                let request = read_request(&mut socket).await;
                let call: serde_json::Value = serde_json::from_slice(&request).unwrap_or_default();
                if call["method"] == "eth_call" {
                    answer(&mut socket, status, content_type, &body).await;
                    return;
                }
                let forwarded = client
                    .post(&upstream)
                    .header("content-type", "application/json")
                    .body(request)
                    .send()
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap();
                answer(&mut socket, 200, "application/json", &forwarded).await;
            });
        }
    });
    url
}

/// Issue 25, item 11: whatever our RPC does wrong when C3 reads the token (HTML, a status that is
/// not 2xx, a body that is not JSON, a JSON-RPC error that is not a revert, a body past the cap,
/// nesting past the parser's depth, an answer to another id, no result, a result that is not
/// bytes), C3 on an honest subject is `unmeasured` with the reason, never a failure of the token.
/// Before, each of these made C3 fail with `token.name.unreadable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_rpc_leaves_c3_unmeasured_never_failed() {
    use x402_probe::checks::free::evaluate_free;
    use x402_probe::evidence::Outcome;
    use x402_probe::probe::free::{FreeProbeConfig, probe_free};
    use x402_probe::probe::http::FetchConfig;

    x402_probe::install_crypto_provider();
    let lab = Lab::start_with(x402_lab::LabOptions {
        scenarios: Some(vec!["honest-v2".into()]),
        ..Default::default()
    })
    .await
    .unwrap();
    let endpoint = lab.endpoint("honest-v2").unwrap().url.clone();
    let rubric = x402_probe::rubric::Rubric::embedded_default();
    let ca: rustls_pki_types::CertificateDer<'static> =
        rustls_pki_types::pem::PemObject::from_pem_slice(lab.ca_pem.as_bytes()).unwrap();
    let c3_through = |rpc_url: String| {
        let config = FreeProbeConfig {
            fetch: FetchConfig {
                allow_private: true,
                observe_invalid_tls: true,
                extra_roots: vec![ca.clone()],
                ..FetchConfig::default()
            },
            samples: 1,
            rpc: Some(Rpc::new(rpc_url)),
            declared_assets: vec![lab.token.address()],
            vantage: "test".into(),
            ..FreeProbeConfig::default()
        };
        let (endpoint, rubric) = (endpoint.clone(), rubric.clone());
        async move {
            let observation = probe_free(&config, &endpoint, 0).await;
            evaluate_free(&observation, &rubric)
                .into_iter()
                .find(|r| r.id == "C3")
                .expect("C3 is a free check")
        }
    };
    // Through the real node, the honest subject passes C3: the proxy is what changes below.
    let honest = c3_through(lab.rpc_url().to_string()).await;
    assert_eq!(honest.outcome, Outcome::Pass, "{}", honest.evidence);

    let json_rpc = |v: serde_json::Value| v.to_string().into_bytes();
    let deep = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}0{}}}",
        "[".repeat(400),
        "]".repeat(400)
    );
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"0x{}\"}}",
        "00".repeat(1 << 20)
    );
    let cases: Vec<(&str, u16, &'static str, Vec<u8>)> = vec![
        (
            "an HTML page",
            200,
            "text/html",
            b"<html><body><h1>502 Bad Gateway</h1></body></html>".to_vec(),
        ),
        (
            "HTTP 503",
            503,
            "application/json",
            json_rpc(
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32005, "message": "rate limited"}}),
            ),
        ),
        (
            "a body that is not JSON",
            200,
            "application/json",
            b"ok".to_vec(),
        ),
        (
            "a JSON-RPC error that is not a revert",
            200,
            "application/json",
            json_rpc(
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "header not found"}}),
            ),
        ),
        (
            "a body past the cap",
            200,
            "application/json",
            huge.into_bytes(),
        ),
        (
            "nesting past the depth limit",
            200,
            "application/json",
            deep.into_bytes(),
        ),
        (
            "an answer to another id",
            200,
            "application/json",
            json_rpc(serde_json::json!({"jsonrpc": "2.0", "id": 7, "result": "0x"})),
        ),
        (
            "no result",
            200,
            "application/json",
            json_rpc(serde_json::json!({"jsonrpc": "2.0", "id": 1})),
        ),
        (
            "a result that is not bytes",
            200,
            "application/json",
            json_rpc(serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"data": "0x"}})),
        ),
    ];
    for (what, status, content_type, body) in cases {
        let proxy =
            node_misanswering_eth_call(lab.rpc_url().to_string(), status, content_type, body).await;
        let c3 = c3_through(proxy).await;
        assert_eq!(c3.outcome, Outcome::Unmeasured, "{what}: {}", c3.evidence);
        assert!(
            c3.evidence.contains("our RPC failed reading the token"),
            "{what}: {}",
            c3.evidence
        );
    }
}

/// A revert from a real node is the contract's answer (a fact C3 may hold against a token), and
/// told apart from the node's own errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revert_from_a_real_node_is_the_contracts_answer() {
    let lab = Lab::start_with(x402_lab::LabOptions {
        scenarios: Some(vec![]),
        ..Default::default()
    })
    .await
    .unwrap();
    let rpc = Rpc::new(lab.rpc_url());
    let err = rpc
        .eth_call(lab.token.address(), &[0xde, 0xad, 0xbe, 0xef])
        .await
        .expect_err("the token has no such function");
    assert!(err.is_revert(), "{err:?}");
    let not_a_revert = RpcError::Node {
        method: "eth_call".into(),
        code: -32000,
        message: "header not found".into(),
    };
    assert!(!not_a_revert.is_revert());
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
