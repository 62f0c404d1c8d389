//! Each scenario, proved from outside: a plain HTTP client (reqwest), raw sockets for the hostile ones,
//! and chain reads. None of this uses the probe.

use crate::common;

use std::time::{Duration, Instant};

use alloy::primitives::{Address, U256};
use common::*;
use serde_json::Value;
use x402_lab::LabOptions;

fn amount(pr: &Value) -> &str {
    let r = &pr["accepts"][0];
    r.get("amount")
        .or_else(|| r.get("maxAmountRequired"))
        .and_then(Value::as_str)
        .unwrap()
}

// ---------- honest baselines ----------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_v2_quotes_in_the_header_and_settles_exactly_once() {
    let lab = lab(&["honest-v2"]).await;
    let resp = unpaid(&lab, "honest-v2").await;
    assert_eq!(
        header(&resp, "content-type").as_deref(),
        Some("application/json")
    );
    let (pr, body) = quote(resp).await;
    assert_eq!(body, b"{}", "v2 body carries nothing");
    assert_eq!(pr["x402Version"], 2);
    assert_eq!(pr["resource"]["url"], url(&lab, "honest-v2"));
    let req = &pr["accepts"][0];
    assert_eq!(req["scheme"], "exact");
    assert_eq!(req["network"], format!("eip155:{}", lab.chain_id));
    assert_eq!(req["amount"], "10000");
    assert_eq!(req["payTo"], lab.pay_to.to_checksum(None));
    assert_eq!(req["asset"], lab.token.address().to_checksum(None));
    let bazaar = &pr["extensions"]["bazaar"];
    assert!(bazaar["info"]["input"].is_object() && bazaar["info"]["output"].is_object());
    assert_eq!(
        bazaar["schema"]["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );

    let payer_before = balance(&lab, lab.payer).await;
    let payee_before = balance(&lab, lab.pay_to).await;
    let (resp, nonce, (name, value)) = pay(&lab, "honest-v2").await;
    assert_eq!(resp.status().as_u16(), 200);
    let receipt = decode_b64_json(&header(&resp, "payment-response").expect("receipt header"));
    let out: Value = resp.json().await.unwrap();
    assert_eq!(out, x402_lab::quote::output());
    assert_eq!(receipt["success"], true);
    let tx = receipt["transaction"].as_str().unwrap();
    assert_eq!(
        transfers_in(&lab, tx).await,
        vec![(lab.payer, lab.pay_to, price())]
    );
    assert!(
        lab.token
            .authorization_state(lab.payer, nonce)
            .await
            .unwrap()
    );
    assert_eq!(balance(&lab, lab.payer).await, payer_before - price());
    assert_eq!(balance(&lab, lab.pay_to).await, payee_before + price());

    // A replay of the same payment is refused and moves nothing.
    let replay = client(&lab)
        .get(url(&lab, "honest-v2"))
        .header(name, value)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status().as_u16(), 402);
    let again = decode_b64_json(&header(&replay, "payment-required").unwrap());
    assert_eq!(again["error"], "invalid_exact_evm_nonce_already_used");
    assert_eq!(balance(&lab, lab.payer).await, payer_before - price());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_v1_quotes_in_the_body_and_answers_x_payment() {
    let lab = lab(&["honest-v1"]).await;
    let resp = unpaid(&lab, "honest-v1").await;
    assert!(header(&resp, "payment-required").is_none());
    let (pr, _) = quote(resp).await;
    assert_eq!(pr["x402Version"], 1);
    let req = &pr["accepts"][0];
    assert_eq!(req["maxAmountRequired"], "10000");
    assert_eq!(req["resource"], url(&lab, "honest-v1"));
    assert!(req["outputSchema"]["input"].is_object() && req["outputSchema"]["output"].is_object());
    let before = balance(&lab, lab.payer).await;
    let (resp, _, (name, _)) = pay(&lab, "honest-v1").await;
    assert_eq!(name, "x-payment");
    assert_eq!(resp.status().as_u16(), 200);
    let receipt = decode_b64_json(&header(&resp, "x-payment-response").expect("v1 receipt"));
    assert_eq!(receipt["success"], true);
    assert_eq!(balance(&lab, lab.payer).await, before - price());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_gives_its_known_answer() {
    let lab = lab(&["control"]).await;
    let (resp, _, _) = pay(&lab, "control").await;
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        x402_lab::quote::control_output()
    );
}

// ---------- conformance faults ----------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_and_body_agree_or_disagree() {
    let lab = lab(&["header-body-agree", "header-body-disagree"]).await;
    let (pr, body) = quote(unpaid(&lab, "header-body-agree").await).await;
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), pr);
    let (pr, body) = quote(unpaid(&lab, "header-body-disagree").await).await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_ne!(body, pr);
    assert_eq!(amount(&pr), "10000");
    assert_eq!(amount(&body), "20000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_payment_required_headers() {
    use base64::Engine;
    let lab = lab(&["bad-base64", "bad-json", "missing-accepts"]).await;
    let resp = unpaid(&lab, "bad-base64").await;
    assert_eq!(resp.status().as_u16(), 402);
    let h = header(&resp, "payment-required").unwrap();
    assert!(
        base64::engine::general_purpose::STANDARD
            .decode(&h)
            .is_err()
    );
    assert!(
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&h)
            .is_err()
    );

    let resp = unpaid(&lab, "bad-json").await;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(header(&resp, "payment-required").unwrap())
        .unwrap();
    assert!(serde_json::from_slice::<Value>(&bytes).is_err());

    let (pr, _) = quote(unpaid(&lab, "missing-accepts").await).await;
    assert!(pr.get("accepts").is_none());
    assert_eq!(pr["x402Version"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requirement_fields() {
    let names = [
        "amount-not-integer",
        "payto-lowercase",
        "network-not-caip2",
        "timeout-5",
        "timeout-9999",
        "unknown-scheme",
        "permit2-only",
        "expensive",
        "off-allowlist-network",
    ];
    let lab = lab(&names).await;
    let req = |pr: &Value| pr["accepts"][0].clone();
    let q = |n: &'static str| {
        let lab = &lab;
        async move { quote(unpaid(lab, n).await).await.0 }
    };
    assert_eq!(req(&q("amount-not-integer").await)["amount"], "0.01");
    let pay_to = req(&q("payto-lowercase").await)["payTo"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(pay_to, pay_to.to_lowercase());
    assert_ne!(pay_to, lab.pay_to.to_checksum(None));
    assert!(Address::parse_checksummed(&pay_to, None).is_err());
    let network = req(&q("network-not-caip2").await)["network"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!network.contains(':'));
    assert_eq!(req(&q("timeout-5").await)["maxTimeoutSeconds"], 5);
    assert_eq!(req(&q("timeout-9999").await)["maxTimeoutSeconds"], 9999);
    assert_eq!(req(&q("unknown-scheme").await)["scheme"], "stream");
    assert_eq!(
        req(&q("permit2-only").await)["extra"]["assetTransferMethod"],
        "permit2"
    );
    assert_eq!(req(&q("expensive").await)["amount"], "25000000");
    let off = req(&q("off-allowlist-network").await);
    assert_eq!(off["network"], "eip155:8453");
    assert_eq!(off["asset"], x402_lab::quote::BASE_USDC);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_second_timeout_is_too_short_to_settle() {
    let lab = lab(&["timeout-5"]).await;
    let before = balance(&lab, lab.payer).await;
    let (resp, nonce, _) = pay(&lab, "timeout-5").await;
    assert_eq!(resp.status().as_u16(), 402);
    let pr = decode_b64_json(&header(&resp, "payment-required").unwrap());
    assert_eq!(
        pr["error"],
        "invalid_exact_evm_payload_authorization_valid_before"
    );
    assert!(
        !lab.token
            .authorization_state(lab.payer, nonce)
            .await
            .unwrap()
    );
    assert_eq!(balance(&lab, lab.payer).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_asset_declares_a_domain_the_contract_does_not_have() {
    let lab = lab(&["fake-asset"]).await;
    let (pr, _) = quote(unpaid(&lab, "fake-asset").await).await;
    let req = &pr["accepts"][0];
    assert_eq!(req["asset"], lab.fake_token.address().to_checksum(None));
    assert_eq!(req["extra"]["name"], "USDC");
    assert_ne!(lab.fake_token.name().await.unwrap(), "USDC");
    // And a payment signed for the declared domain is refused on chain.
    let before = balance(&lab, lab.payer).await;
    let (resp, _, _) = pay(&lab, "fake-asset").await;
    assert_eq!(resp.status().as_u16(), 402);
    assert_eq!(balance(&lab, lab.payer).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_bazaar_schema_is_not_a_schema() {
    let lab = lab(&["invalid-bazaar-schema"]).await;
    let (pr, _) = quote(unpaid(&lab, "invalid-bazaar-schema").await).await;
    let schema = &pr["extensions"]["bazaar"]["schema"];
    assert_eq!(schema["type"], "objekt");
    assert!(schema["properties"].is_number());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_price_rises_after_the_first_quote_and_old_payments_are_refused() {
    let lab = lab(&["price-rises"]).await;
    let (first, _) = quote(unpaid(&lab, "price-rises").await).await;
    let (second, _) = quote(unpaid(&lab, "price-rises").await).await;
    assert_eq!(amount(&first), "10000");
    assert_eq!(amount(&second), "30000");
    let (name, value, _) = payment(&lab, &first);
    let resp = client(&lab)
        .get(url(&lab, "price-rises"))
        .header(name, value)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 402);
}

// ---------- texts ----------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn texts_carry_injection_secret_asks_and_hidden_characters() {
    let lab = lab(&[
        "injection-description",
        "secret-ask",
        "hidden-unicode",
        "honest-v2",
    ])
    .await;
    let desc = |pr: &Value| pr["resource"]["description"].as_str().unwrap().to_string();
    let d = desc(&quote(unpaid(&lab, "injection-description").await).await.0);
    assert!(d.contains("ignore all previous instructions"));
    let (pr, _) = quote(unpaid(&lab, "secret-ask").await).await;
    assert!(desc(&pr).contains("seed phrase"));
    assert!(pr["extensions"]["bazaar"]["info"]["input"]["headers"]["X-Wallet-Seed"].is_string());
    let docs = client(&lab)
        .get(url(&lab, "secret-ask").replace("/weather", "/docs"))
        .send()
        .await
        .unwrap();
    assert!(docs.text().await.unwrap().contains("seed phrase"));
    let d = desc(&quote(unpaid(&lab, "hidden-unicode").await).await.0);
    assert!(d.contains('\u{200B}') && d.contains('\u{202E}'));
    let d = desc(&quote(unpaid(&lab, "honest-v2").await).await.0);
    assert!(
        d.chars()
            .all(|c| !c.is_control() && c != '\u{200B}' && c != '\u{202E}')
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_type_lies_about_the_bytes() {
    let lab = lab(&["content-type-lies"]).await;
    let resp = unpaid(&lab, "content-type-lies").await;
    assert_eq!(
        header(&resp, "content-type").as_deref(),
        Some("application/json")
    );
    let body = resp.text().await.unwrap();
    assert!(serde_json::from_str::<Value>(&body).is_err());
    assert!(body.starts_with("<!doctype html>") && body.contains("<script>"));
}

// ---------- transport ----------

fn leaf_not_after(resp: &reqwest::Response) -> i64 {
    let info = resp
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .expect("TLS info");
    let der = info.peer_certificate().expect("peer certificate");
    let (_, cert) = x509_parser::parse_x509_certificate(der).expect("X.509");
    cert.validity().not_after.timestamp()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_variants() {
    let lab = lab(&[
        "plain-http",
        "cert-expiring",
        "cert-expired",
        "honest-v2",
        "down",
    ])
    .await;
    assert!(url(&lab, "plain-http").starts_with("http://"));
    assert_eq!(unpaid(&lab, "plain-http").await.status().as_u16(), 402);

    let now = now() as i64;
    let good = unpaid(&lab, "honest-v2").await;
    assert!(leaf_not_after(&good) - now > 300 * 86400);
    let expiring = unpaid(&lab, "cert-expiring").await;
    let left = leaf_not_after(&expiring) - now;
    assert!(
        (4 * 86400..=5 * 86400).contains(&left),
        "expires in {left} s"
    );

    // A verifying client refuses the expired certificate; a blind one sees it expired yesterday.
    let err = client(&lab)
        .get(url(&lab, "cert-expired"))
        .send()
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").to_lowercase().contains("expired"),
        "{err:?}"
    );
    let blind = reqwest::Client::builder()
        .tls_danger_accept_invalid_certs(true)
        .tls_info(true)
        .build()
        .unwrap();
    let resp = blind.get(url(&lab, "cert-expired")).send().await.unwrap();
    assert!(leaf_not_after(&resp) < now);

    let err = client(&lab)
        .get(url(&lab, "down"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_connect(), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects() {
    let lab = lab(&["redirect-off-host", "redirect-loop", "redirect-same-host"]).await;
    let resp = unpaid(&lab, "redirect-off-host").await;
    assert_eq!(resp.status().as_u16(), 302);
    let target = reqwest::Url::parse(&header(&resp, "location").unwrap()).unwrap();
    let origin = reqwest::Url::parse(&url(&lab, "redirect-off-host")).unwrap();
    assert_ne!(target.host_str(), origin.host_str());

    let resp = unpaid(&lab, "redirect-loop").await;
    assert_eq!(resp.status().as_u16(), 302);
    assert_eq!(header(&resp, "location").as_deref(), Some("/weather"));
    let following = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(lab.ca_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let err = following
        .get(url(&lab, "redirect-loop"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_redirect(), "{err:?}");

    let resp = unpaid(&lab, "redirect-same-host").await;
    assert_eq!(resp.status().as_u16(), 307);
    assert_eq!(header(&resp, "location").as_deref(), Some("/v2/weather"));
    let resp = following
        .get(url(&lab, "redirect-same-host"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 402);
}

// ---------- reliability ----------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_waits_before_the_first_byte() {
    let options = LabOptions {
        slow_ms: 1500,
        ..LabOptions::default()
    };
    let lab = lab_with(&["slow"], options).await;
    let started = Instant::now();
    let resp = unpaid(&lab, "slow").await;
    assert!(started.elapsed() >= Duration::from_millis(1500));
    assert_eq!(resp.status().as_u16(), 402);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flaky_fails_its_configured_share() {
    for share in [0.5, 0.25] {
        let lab = lab_with(
            &["flaky"],
            LabOptions {
                flaky_share: share,
                ..LabOptions::default()
            },
        )
        .await;
        let mut failures = 0;
        for _ in 0..20 {
            match unpaid(&lab, "flaky").await.status().as_u16() {
                503 => failures += 1,
                402 => {}
                other => panic!("unexpected status {other}"),
            }
        }
        assert_eq!(failures as f64, 20.0 * share);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_500_and_free_200() {
    let lab = lab(&["status-500", "free-200"]).await;
    assert_eq!(unpaid(&lab, "status-500").await.status().as_u16(), 500);
    let resp = unpaid(&lab, "free-200").await;
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        x402_lab::quote::output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_refuses_connections_and_keeps_its_port_while_the_lab_runs() {
    let lab = lab(&["down", "honest-v2", "status-500"]).await;
    let addr_of = |url: &str| {
        let url = reqwest::Url::parse(url).unwrap();
        std::net::SocketAddr::new(
            url.host_str().unwrap().parse().unwrap(),
            url.port().unwrap(),
        )
    };
    let down = addr_of(&url(&lab, "down"));
    for e in lab.endpoints.iter().filter(|e| e.scenario.name != "down") {
        assert_ne!(
            addr_of(&e.url),
            down,
            "{} got the down port",
            e.scenario.name
        );
    }
    let refused = tokio::net::TcpStream::connect(down).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    // The port is held, not merely closed: a server bound later (as the next endpoint, or another
    // test's) cannot take it and answer in the down endpoint's place.
    let taken = tokio::net::TcpListener::bind(down).await;
    assert!(
        taken.is_err(),
        "the down endpoint's port {down} was free to bind"
    );
}

// ---------- paid behaviour ----------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charge_without_delivery_settles_then_fails() {
    let lab = lab(&["charge-without-delivery"]).await;
    let before = balance(&lab, lab.payer).await;
    let (resp, nonce, _) = pay(&lab, "charge-without-delivery").await;
    assert_eq!(resp.status().as_u16(), 500);
    assert!(header(&resp, "payment-response").is_none());
    assert!(
        lab.token
            .authorization_state(lab.payer, nonce)
            .await
            .unwrap(),
        "the authorization was used"
    );
    assert_eq!(balance(&lab, lab.payer).await, before - price());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_and_invalid_outputs_are_charged() {
    let lab = lab(&["empty-output", "invalid-output"]).await;
    let before = balance(&lab, lab.payer).await;
    let (resp, _, _) = pay(&lab, "empty-output").await;
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.bytes().await.unwrap().is_empty());
    let (resp, _, _) = pay(&lab, "invalid-output").await;
    assert_eq!(resp.status().as_u16(), 200);
    let out: Value = resp.json().await.unwrap();
    assert!(out.get("city").is_none() && out.get("temp_c").is_none());
    assert_eq!(
        balance(&lab, lab.payer).await,
        before - price() * U256::from(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_receipts_name_transactions_that_do_not_exist() {
    let lab = lab(&["fake-payment-response", "facilitator-fake-hash"]).await;
    // The endpoint settles for real but lies in its receipt.
    let before = balance(&lab, lab.payer).await;
    let (resp, nonce, _) = pay(&lab, "fake-payment-response").await;
    assert_eq!(resp.status().as_u16(), 200);
    let receipt = decode_b64_json(&header(&resp, "payment-response").unwrap());
    let tx = receipt["transaction"].as_str().unwrap();
    assert!(
        rpc(&lab, "eth_getTransactionReceipt", serde_json::json!([tx]))
            .await
            .is_null()
    );
    assert!(
        lab.token
            .authorization_state(lab.payer, nonce)
            .await
            .unwrap()
    );
    assert_eq!(balance(&lab, lab.payer).await, before - price());
    // The facilitator claims a settlement it never sent: nothing moves.
    let (resp, nonce, _) = pay(&lab, "facilitator-fake-hash").await;
    assert_eq!(resp.status().as_u16(), 200);
    let receipt = decode_b64_json(&header(&resp, "payment-response").unwrap());
    let tx = receipt["transaction"].as_str().unwrap();
    assert!(
        rpc(&lab, "eth_getTransactionReceipt", serde_json::json!([tx]))
            .await
            .is_null()
    );
    assert!(
        !lab.token
            .authorization_state(lab.payer, nonce)
            .await
            .unwrap()
    );
    assert_eq!(balance(&lab, lab.payer).await, before - price());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_settlement_delivers_for_free() {
    let lab = lab(&["no-settlement"]).await;
    let before = balance(&lab, lab.payer).await;
    let (resp, nonce, _) = pay(&lab, "no-settlement").await;
    assert_eq!(resp.status().as_u16(), 200);
    assert!(header(&resp, "payment-response").is_none());
    assert!(
        !lab.token
            .authorization_state(lab.payer, nonce)
            .await
            .unwrap()
    );
    assert_eq!(balance(&lab, lab.payer).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dishonest_facilitators_move_the_wrong_money_on_chain() {
    let lab = lab(&["double-pull", "overcharge", "wrong-payee"]).await;
    let payee = lab.pay_to;
    // Second pull: the authorization settles, then the same amount is pulled again.
    let before = balance(&lab, lab.payer).await;
    let (resp, nonce, _) = pay(&lab, "double-pull").await;
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        lab.token
            .authorization_state(lab.payer, nonce)
            .await
            .unwrap()
    );
    assert_eq!(
        balance(&lab, lab.payer).await,
        before - price() * U256::from(2)
    );

    // Overcharge: three times the quote, in the transaction the receipt names.
    let before = balance(&lab, lab.payer).await;
    let (resp, _, _) = pay(&lab, "overcharge").await;
    let receipt = decode_b64_json(&header(&resp, "payment-response").unwrap());
    let moved = transfers_in(&lab, receipt["transaction"].as_str().unwrap()).await;
    assert_eq!(moved, vec![(lab.payer, payee, price() * U256::from(3))]);
    assert_eq!(
        balance(&lab, lab.payer).await,
        before - price() * U256::from(3)
    );

    // Wrong payee: the quoted amount, to someone else.
    let payee_before = balance(&lab, payee).await;
    let (resp, _, _) = pay(&lab, "wrong-payee").await;
    let receipt = decode_b64_json(&header(&resp, "payment-response").unwrap());
    let moved = transfers_in(&lab, receipt["transaction"].as_str().unwrap()).await;
    assert_eq!(moved, vec![(lab.payer, lab.attacker, price())]);
    assert_eq!(balance(&lab, payee).await, payee_before);
}

async fn operator_file(lab: &x402_lab::Lab, scenario: &str) -> reqwest::Response {
    let u = url(lab, scenario).replace("/weather", "/.well-known/x402-operator.json");
    client(lab).get(u).send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_kept_and_broken() {
    let lab = lab(&["refund-kept", "refund-broken"]).await;
    for scenario in ["refund-kept", "refund-broken"] {
        let file: Value = operator_file(&lab, scenario).await.json().await.unwrap();
        assert_eq!(file["refund"]["on"], "charged_without_delivery");
        assert_eq!(
            file["refund"]["within_seconds"],
            x402_lab::quote::REFUND_WINDOW_SECS
        );
    }
    let before = balance(&lab, lab.payer).await;
    let (resp, _, _) = pay(&lab, "refund-kept").await;
    assert_eq!(resp.status().as_u16(), 500);
    let deadline = Instant::now() + Duration::from_secs(10);
    while balance(&lab, lab.payer).await != before {
        assert!(Instant::now() < deadline, "no refund within 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (resp, _, _) = pay(&lab, "refund-broken").await;
    assert_eq!(resp.status().as_u16(), 500);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(balance(&lab, lab.payer).await, before - price());
}

// ---------- listing and operator ----------

async fn catalogue(lab: &x402_lab::Lab) -> Vec<Value> {
    let mut items = Vec::new();
    let mut offset = 0;
    loop {
        let page: Value = reqwest::get(format!(
            "{}?type=http&limit=2&offset={offset}",
            lab.manifest().catalogue
        ))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        let got = page["items"].as_array().unwrap().clone();
        offset += got.len();
        items.extend(got);
        if got_all(&page, offset) {
            return items;
        }
    }
}

fn got_all(page: &Value, offset: usize) -> bool {
    page["items"].as_array().unwrap().is_empty()
        || offset as u64 >= page["pagination"]["total"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalogue_lists_prices_some_of_them_wrong() {
    let lab = lab(&[
        "honest-v2",
        "honest-v1",
        "price-mismatch",
        "unlisted",
        "expensive",
    ])
    .await;
    let items = catalogue(&lab).await;
    assert_eq!(
        items.len(),
        4,
        "all but the unlisted one, over several pages"
    );
    let listed = |s: &str| {
        items
            .iter()
            .find(|i| i["resource"] == url(&lab, s))
            .cloned()
    };
    assert!(listed("unlisted").is_none());
    for s in ["honest-v2", "honest-v1", "expensive"] {
        let (pr, _) = quote(unpaid(&lab, s).await).await;
        assert_eq!(amount(&listed(s).unwrap()), amount(&pr), "{s}");
    }
    let (pr, _) = quote(unpaid(&lab, "price-mismatch").await).await;
    assert_eq!(amount(&listed("price-mismatch").unwrap()), "5000");
    assert_eq!(amount(&pr), "10000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_files() {
    let lab = lab(&[
        "honest-v2",
        "operator-mismatch",
        "no-operator-file",
        "operator-file-malformed",
    ])
    .await;
    let wallets = |v: Value| -> Vec<String> {
        v["wallets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["address"].as_str().unwrap().to_string())
            .collect()
    };
    let honest: Value = operator_file(&lab, "honest-v2").await.json().await.unwrap();
    assert_eq!(honest["schema"], "x402-probe.operator/1");
    assert_eq!(wallets(honest), vec![lab.pay_to.to_checksum(None)]);
    let other: Value = operator_file(&lab, "operator-mismatch")
        .await
        .json()
        .await
        .unwrap();
    assert!(!wallets(other).contains(&lab.pay_to.to_checksum(None)));
    assert_eq!(
        operator_file(&lab, "no-operator-file")
            .await
            .status()
            .as_u16(),
        404
    );
    let broken = operator_file(&lab, "operator-file-malformed").await;
    assert_eq!(broken.status().as_u16(), 200);
    assert!(serde_json::from_str::<Value>(&broken.text().await.unwrap()).is_err());
}

// ---------- hostile ----------

/// A raw TLS connection to a lab endpoint that has sent a GET, for reading bytes as they come.
async fn raw_get(
    lab: &x402_lab::Lab,
    scenario: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use tokio::io::AsyncWriteExt;
    let u = reqwest::Url::parse(&url(lab, scenario)).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    let der = rustls_pki_types::pem::PemObject::from_pem_slice(lab.ca_pem.as_bytes()).unwrap();
    roots.add(der).unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect((u.host_str().unwrap(), u.port().unwrap()))
        .await
        .unwrap();
    let name = rustls_pki_types::ServerName::try_from(u.host_str().unwrap().to_string()).unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    tls.write_all(format!("GET {} HTTP/1.1\r\nhost: x\r\n\r\n", u.path()).as_bytes())
        .await
        .unwrap();
    tls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_header_sends_a_megabyte_before_the_blank_line() {
    use tokio::io::AsyncReadExt;
    let lab = lab(&["huge-header"]).await;
    let mut s = raw_get(&lab, "huge-header").await;
    let mut head = Vec::new();
    let mut buf = [0u8; 16384];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed early");
        head.extend_from_slice(&buf[..n]);
    }
    assert!(head.len() > 1 << 20, "head is {} bytes", head.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_sends_one_byte_a_second() {
    use tokio::io::AsyncReadExt;
    let lab = lab(&["slowloris"]).await;
    let mut s = raw_get(&lab, "slowloris").await;
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while got.len() < 3 {
        let n = s.read(&mut buf).await.unwrap();
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        started.elapsed()
    );
    assert!(got.len() <= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_body_and_endless_chunks_keep_coming() {
    let lab = lab(&["huge-body", "endless-chunked"]).await;
    let resp = unpaid(&lab, "huge-body").await;
    assert_eq!(resp.status().as_u16(), 402);
    assert_eq!(resp.content_length(), Some(64 << 20));
    let mut resp = unpaid(&lab, "endless-chunked").await;
    assert_eq!(resp.status().as_u16(), 402);
    assert_eq!(
        header(&resp, "transfer-encoding").as_deref(),
        Some("chunked")
    );
    let mut read = 0usize;
    while read < 4 << 20 {
        let chunk = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
            .await
            .unwrap()
            .unwrap();
        read += chunk.expect("still going").len();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_bomb_inflates_a_thousandfold() {
    use std::io::Read;
    let lab = lab(&["gzip-bomb"]).await;
    let resp = unpaid(&lab, "gzip-bomb").await;
    assert_eq!(header(&resp, "content-encoding").as_deref(), Some("gzip"));
    let compressed = resp.bytes().await.unwrap();
    assert!(
        compressed.len() < 2 << 20,
        "{} bytes on the wire",
        compressed.len()
    );
    let inflated = tokio::task::spawn_blocking(move || {
        let mut dec = flate2::read::GzDecoder::new(&compressed[..]);
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            match dec.read(&mut buf).unwrap() {
                0 => return total,
                n => total += n as u64,
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(inflated, x402_lab::server::GZIP_BOMB_INFLATED as u64);
}

// ---------- hostile x402: within the read caps, too costly to evaluate naively ----------

/// How deep a JSON value nests (a scalar is 0).
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepts_floods_fill_the_body_and_the_header() {
    let lab = lab(&["accepts-flood-body", "accepts-flood-header"]).await;
    let resp = unpaid(&lab, "accepts-flood-body").await;
    assert!(header(&resp, "payment-required").is_none());
    let (pr, body) = quote(resp).await;
    assert!(
        body.len() <= 1 << 20,
        "{} bytes: within the probe's body cap",
        body.len()
    );
    assert!(body.len() > (1 << 20) - 2048, "{} bytes", body.len());
    assert_eq!(pr["x402Version"], 2);
    let entries = pr["accepts"].as_array().unwrap();
    assert!(entries.len() > 340_000, "{} entries", entries.len());
    assert!(entries.iter().all(|e| e == &serde_json::json!({})));

    let resp = unpaid(&lab, "accepts-flood-header").await;
    let raw = header(&resp, "payment-required").unwrap();
    assert!(
        raw.len() < 64 * 1024,
        "the header fits the probe's head cap"
    );
    let (pr, body) = quote(resp).await;
    assert_eq!(body, b"{}");
    assert_eq!(pr["accepts"].as_array().unwrap().len(), 10_000);
    assert_eq!(pr["resource"]["url"], url(&lab, "accepts-flood-header"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_nesting_and_the_schema_bomb_are_otherwise_honest_quotes() {
    let lab = lab(&["deep-nesting", "schema-bomb"]).await;
    let (pr, _) = quote(unpaid(&lab, "deep-nesting").await).await;
    assert_eq!(depth(&pr["extensions"]["nest"]), 100);
    assert_eq!(pr["accepts"][0]["amount"], "10000");
    assert_eq!(pr["accepts"][0]["payTo"], lab.pay_to.to_checksum(None));

    let (pr, _) = quote(unpaid(&lab, "schema-bomb").await).await;
    let bazaar = &pr["extensions"]["bazaar"];
    let branches = bazaar["schema"]["$defs"]["nest"]["anyOf"]
        .as_array()
        .unwrap();
    assert_eq!(branches.len(), 2);
    assert_eq!(branches[0], branches[1], "two identical recursive branches");
    assert_eq!(branches[0]["items"]["$ref"], "#/$defs/nest");
    assert_eq!(depth(&bazaar["info"]["input"]["nest"]), 40);
    assert_eq!(pr["accepts"][0]["amount"], "10000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deviation_flood_gets_every_field_wrong() {
    let lab = lab(&["deviation-flood"]).await;
    let (pr, body) = quote(unpaid(&lab, "deviation-flood").await).await;
    assert!(body.len() <= 1 << 20 && body.len() > (1 << 20) - 2048);
    let entries = pr["accepts"].as_array().unwrap();
    assert!(entries.len() > 6_000, "{} entries", entries.len());
    for entry in entries {
        assert!(entry["scheme"].is_number() && entry["payTo"].is_number());
        assert!(entry["amount"].is_array() && entry["maxTimeoutSeconds"].is_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_payment_required_headers() {
    let lab = lab(&["dup-header-disagree", "dup-header-agree", "dup-header-case"]).await;
    let all = |resp: &reqwest::Response| -> Vec<Value> {
        resp.headers()
            .get_all("payment-required")
            .iter()
            .map(|v| decode_b64_json(v.to_str().unwrap()))
            .collect()
    };
    let resp = unpaid(&lab, "dup-header-agree").await;
    let quotes = all(&resp);
    assert_eq!(quotes.len(), 2);
    assert_eq!(quotes[0], quotes[1]);

    let resp = unpaid(&lab, "dup-header-disagree").await;
    let quotes = all(&resp);
    assert_eq!(quotes.len(), 2);
    assert_eq!(
        quotes[0]["accepts"][0]["payTo"],
        lab.pay_to.to_checksum(None)
    );
    assert_eq!(quotes[0]["accepts"][0]["amount"], "10000");
    assert_ne!(
        quotes[1]["accepts"][0]["payTo"],
        quotes[0]["accepts"][0]["payTo"]
    );
    assert_eq!(quotes[1]["accepts"][0]["amount"], "20000");
    // The first quote is real: paying it settles on chain.
    let before = balance(&lab, lab.payer).await;
    let (resp, _, _) = pay(&lab, "dup-header-disagree").await;
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(balance(&lab, lab.payer).await, before - price());

    // The case variants are distinct on the wire.
    use tokio::io::AsyncReadExt;
    let mut s = raw_get(&lab, "dup-header-case").await;
    let mut head = Vec::new();
    let mut buf = [0u8; 16384];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed early");
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let value = |name: &str| {
        let line = head
            .lines()
            .find(|l| l.starts_with(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} line in {head}"));
        decode_b64_json(&line[name.len() + 2..])
    };
    let (mixed, upper) = (value("Payment-Required"), value("PAYMENT-REQUIRED"));
    assert_ne!(mixed["accepts"][0]["payTo"], upper["accepts"][0]["payTo"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dup_content_type_declares_two_types() {
    let lab = lab(&["dup-content-type"]).await;
    let resp = unpaid(&lab, "dup-content-type").await;
    let types: Vec<&str> = resp
        .headers()
        .get_all("content-type")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(types, ["application/json", "text/html"]);
    let (pr, body) = quote(resp).await;
    assert_eq!(body, b"{}");
    assert_eq!(pr["accepts"][0]["payTo"], lab.pay_to.to_checksum(None));
}

// ---------- the chain's clock after idle time ----------

/// Issue 25, item 15: anvil mines only when a transaction comes, so after ten idle minutes its
/// latest block is older than the `now - 600 s` a payer signs as `validAfter`, and the
/// facilitator's simulation (run at the latest block) refused every honest payment. Here the
/// latest block is made an hour old at once (the chain's clock set back for one block, then put
/// back on the wall clock, as idle time leaves it), and an honest payment must still settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_after_the_chain_sat_idle_settles() {
    let lab = lab(&["honest-v2"]).await;
    rpc(&lab, "evm_setTime", serde_json::json!([now() - 3600])).await;
    rpc(&lab, "evm_mine", serde_json::json!([])).await;
    rpc(&lab, "evm_setTime", serde_json::json!([now()])).await;
    let latest = lab.token.rpc().latest_block_timestamp().await.unwrap();
    assert!(
        latest + 600 < now(),
        "the latest block is older than validAfter"
    );

    let payee_before = balance(&lab, lab.pay_to).await;
    let (resp, _, _) = pay(&lab, "honest-v2").await;
    assert_eq!(resp.status().as_u16(), 200, "{:?}", resp.headers());
    assert_eq!(balance(&lab, lab.pay_to).await, payee_before + price());
}

// ---------- Solana (the lab's SVM, as devnet) ----------

/// A JSON-RPC call to the lab's SVM.
async fn svm_rpc(lab: &x402_lab::Lab, method: &str, params: Value) -> Value {
    let answer: Value = reqwest::Client::new()
        .post(lab.solana_rpc_url().expect("the SVM runs"))
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["result"].clone()
}

/// The SPL token account at `address` as (mint, owner, state byte), read from the SVM.
async fn token_account(lab: &x402_lab::Lab, address: &str) -> Option<(String, String, u8)> {
    use base64::Engine as _;
    let info = svm_rpc(
        lab,
        "getAccountInfo",
        serde_json::json!([address, {"encoding": "base64"}]),
    )
    .await;
    let data = info["value"]["data"][0].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    let b58 = |b: &[u8]| bs58::encode(b).into_string();
    Some((b58(&bytes[..32]), b58(&bytes[32..64]), bytes[108]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn solana_scenarios_quote_devnet_and_their_accounts_are_as_they_say() {
    use x402_lab::svm::{DEVNET_CAIP2, DEVNET_GENESIS_HASH, DEVNET_USDC, DEVNET_V1, Svm};
    let names = [
        "solana-honest-v2",
        "solana-honest-v1",
        "solana-wrong-mint",
        "solana-missing-ata",
        "solana-frozen-ata",
        "solana-bad-base58",
        "solana-fee-payer-missing",
        "solana-memo-too-long",
        "solana-overcharge",
        "solana-wrong-payee",
        "solana-double-pull",
        "solana-fake-signature",
        "solana-charge-without-delivery",
    ];
    let lab = lab(&names).await;
    assert_eq!(
        svm_rpc(&lab, "getGenesisHash", serde_json::json!([])).await,
        DEVNET_GENESIS_HASH
    );
    let accounts = lab.svm.as_ref().unwrap().accounts.clone();
    let mut entries = std::collections::BTreeMap::new();
    for name in names {
        let (pr, _) = quote(unpaid(&lab, name).await).await;
        entries.insert(name, pr["accepts"][0].clone());
    }
    let honest = &entries["solana-honest-v2"];
    assert_eq!(honest["network"], DEVNET_CAIP2);
    assert_eq!(honest["asset"], DEVNET_USDC);
    assert_eq!(honest["payTo"], accounts.pay_to.as_str());
    assert_eq!(honest["extra"]["feePayer"], accounts.fee_payer.as_str());
    // The paid faults are the facilitator's or the server's after payment, not the quote's: each
    // quotes the honest terms (what each then lands is paid and read back from the chain in
    // tests/service/paid_lab.rs).
    for name in [
        "solana-overcharge",
        "solana-wrong-payee",
        "solana-double-pull",
        "solana-fake-signature",
        "solana-charge-without-delivery",
    ] {
        for field in ["network", "asset", "payTo", "amount"] {
            assert_eq!(entries[name][field], honest[field], "{name}: {field}");
        }
        assert_eq!(
            entries[name]["extra"]["feePayer"], honest["extra"]["feePayer"],
            "{name}: feePayer"
        );
    }
    assert_eq!(entries["solana-honest-v1"]["network"], DEVNET_V1);
    assert_eq!(entries["solana-honest-v1"]["maxAmountRequired"], "10000");

    // The honest payee's USDC account is open; the others' are missing or frozen, as named.
    let ata = |owner: &str| Svm::reference_ata(owner, DEVNET_USDC).unwrap();
    assert_eq!(
        token_account(&lab, &ata(&accounts.pay_to)).await,
        Some((DEVNET_USDC.to_string(), accounts.pay_to.clone(), 1))
    );
    let missing = entries["solana-missing-ata"]["payTo"].as_str().unwrap();
    assert_eq!(token_account(&lab, &ata(missing)).await, None);
    let frozen = entries["solana-frozen-ata"]["payTo"].as_str().unwrap();
    assert_eq!(
        token_account(&lab, &ata(frozen)).await.map(|a| a.2),
        Some(2)
    );
    let lookalike = entries["solana-wrong-mint"]["asset"].as_str().unwrap();
    assert_ne!(lookalike, DEVNET_USDC);
    let mint = svm_rpc(
        &lab,
        "getAccountInfo",
        serde_json::json!([lookalike, {"encoding": "base64"}]),
    )
    .await;
    assert_eq!(
        mint["value"]["owner"],
        "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
    );

    // The quote faults, as sent.
    assert!(
        bs58::decode(entries["solana-bad-base58"]["payTo"].as_str().unwrap())
            .into_vec()
            .is_err()
    );
    assert!(
        entries["solana-fee-payer-missing"]["extra"]
            .get("feePayer")
            .is_none()
    );
    assert_eq!(
        entries["solana-memo-too-long"]["extra"]["memo"]
            .as_str()
            .unwrap()
            .len(),
        300
    );
}

// ---------- settlement_pending ----------

/// The `settlement_pending` kinds settle at once but first answer a 402 whose receipt says
/// `settlement_pending` (naming the transaction that took the payment); the same payment sent
/// again is answered by the kind (the output; pending again; a fresh 402), never charged again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlement_pending_kinds_answer_pending_then_their_kind_and_charge_once() {
    let lab = lab(&["settlement-pending", "pending-forever", "pending-then-402"]).await;
    for (scenario, again_status, again_pending) in [
        ("settlement-pending", 200, false),
        ("pending-forever", 402, true),
        ("pending-then-402", 402, false),
    ] {
        let before = balance(&lab, lab.payer).await;
        let (resp, nonce, (name, value)) = pay(&lab, scenario).await;
        assert_eq!(resp.status().as_u16(), 402, "{scenario}");
        let pending = decode_b64_json(&header(&resp, "payment-response").expect(scenario));
        assert_eq!(pending["success"], false, "{scenario}");
        assert_eq!(pending["errorReason"], "settlement_pending", "{scenario}");
        let tx = pending["transaction"]
            .as_str()
            .expect("a transaction")
            .to_string();
        assert_eq!(
            transfers_in(&lab, &tx).await,
            vec![(lab.payer, lab.pay_to, price())],
            "{scenario}: the pending receipt names the transaction that took the payment"
        );
        assert!(
            lab.token
                .authorization_state(lab.payer, nonce)
                .await
                .unwrap()
        );
        assert_eq!(
            balance(&lab, lab.payer).await,
            before - price(),
            "{scenario}"
        );

        let again = client(&lab)
            .get(format!("{}?city=Paris", url(&lab, scenario)))
            .header(name, &value)
            .send()
            .await
            .expect("the same payment sent again");
        assert_eq!(again.status().as_u16(), again_status, "{scenario}");
        let receipt = header(&again, "payment-response").map(|h| decode_b64_json(&h));
        match (again_status, again_pending) {
            (200, _) => {
                let receipt = receipt.expect("a receipt with the output");
                assert_eq!(receipt["success"], true, "{scenario}");
                assert_eq!(receipt["transaction"], tx.as_str(), "{scenario}");
            }
            (_, true) => {
                let receipt = receipt.expect("pending again");
                assert_eq!(receipt["errorReason"], "settlement_pending", "{scenario}");
                assert_eq!(receipt["transaction"], tx.as_str(), "{scenario}");
            }
            _ => {
                assert!(receipt.is_none(), "{scenario}: a fresh 402, no receipt");
                let (pr, _) = quote(again).await;
                assert!(pr["accepts"].as_array().is_some_and(|a| !a.is_empty()));
            }
        }
        assert_eq!(
            balance(&lab, lab.payer).await,
            before - price(),
            "{scenario}: charged once"
        );
    }
}

// ---------- R6's references ----------

/// The lab's npm-like registry serves the package's latest version document; the honest npm
/// endpoint answers it after payment and the stale one the version before. The supply endpoints
/// answer the lab token's `totalSupply()` read from the chain, or twice it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_endpoints_answer_the_source_or_miss_it() {
    use x402_lab::reference::{LATEST, PACKAGE, PREVIOUS};
    let lab = lab(&[
        "npm-honest",
        "npm-stale-version",
        "supply-honest",
        "supply-doubled",
    ])
    .await;
    let registry: Value = reqwest::get(format!("{}/{PACKAGE}/latest", lab.npm_registry_url))
        .await
        .expect("the lab registry answers")
        .json()
        .await
        .unwrap();
    assert_eq!(registry["name"], PACKAGE);
    assert_eq!(registry["version"], LATEST);
    let missing = reqwest::get(format!("{}/no-such-package/latest", lab.npm_registry_url))
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);

    let paid_json = |scenario: &'static str| {
        let lab = &lab;
        async move {
            let (resp, _, _) = pay(lab, scenario).await;
            assert_eq!(resp.status().as_u16(), 200, "{scenario}");
            resp.json::<Value>().await.expect("a JSON output")
        }
    };
    let honest = paid_json("npm-honest").await;
    assert_eq!(
        honest, registry,
        "the honest endpoint answers the registry's document"
    );
    let stale = paid_json("npm-stale-version").await;
    assert_eq!(stale["version"], PREVIOUS);
    assert_eq!(stale["name"], registry["name"]);

    let supply = lab.token.total_supply().await.unwrap();
    let honest = paid_json("supply-honest").await;
    assert_eq!(honest["totalSupply"], supply.to_string());
    let doubled = paid_json("supply-doubled").await;
    assert_eq!(doubled["totalSupply"], (supply * U256::from(2)).to_string());
}

// ---------- payment-identifier ----------

/// A payment with `extensions["payment-identifier"].info.id` set to `id` (the signed
/// authorization is not touched: the id travels beside it).
fn with_payment_id(value: &str, id: &str) -> String {
    let mut payload = decode_b64_json(value);
    payload["extensions"]["payment-identifier"]["info"]["id"] = Value::String(id.to_string());
    base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        payload.to_string(),
    )
}

/// Both `payment-identifier` kinds advertise the extension as required and refuse a payment
/// without an id; the honest one answers the same payment sent again with the same id from its
/// cache (the first receipt, charged once) and a conflict for the id with another payment; the
/// dishonest one charges the retry again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payment_identifier_kinds_require_an_id_and_answer_retries_by_their_kind() {
    let lab = lab(&["payment-id-honest", "payment-id-double-charge"]).await;
    for (scenario, charged_again) in [
        ("payment-id-honest", false),
        ("payment-id-double-charge", true),
    ] {
        let (pr, _) = quote(unpaid(&lab, scenario).await).await;
        let ext = &pr["extensions"]["payment-identifier"];
        assert_eq!(ext["info"]["required"], true, "{scenario}");
        assert!(ext["schema"].is_object(), "{scenario}");
        let get = |value: String| {
            let lab = &lab;
            async move {
                client(lab)
                    .get(format!("{}?city=Paris", url(lab, scenario)))
                    .header("payment-signature", value)
                    .send()
                    .await
                    .expect("a paid answer")
            }
        };

        // Without an id: refused before anything is verified or settled.
        let before = balance(&lab, lab.payer).await;
        let (_, without_id, _) = payment(&lab, &pr);
        assert_eq!(get(without_id).await.status().as_u16(), 400, "{scenario}");
        assert_eq!(balance(&lab, lab.payer).await, before, "{scenario}");

        let (_, value, nonce) = payment(&lab, &pr);
        let id = format!("pay_{}", hex::encode(&nonce[..16]));
        let paid = with_payment_id(&value, &id);
        let first = get(paid.clone()).await;
        assert_eq!(first.status().as_u16(), 200, "{scenario}");
        let receipt = decode_b64_json(&header(&first, "payment-response").expect("a receipt"));
        let tx = receipt["transaction"].as_str().unwrap().to_string();
        assert_eq!(
            transfers_in(&lab, &tx).await,
            vec![(lab.payer, lab.pay_to, price())]
        );
        assert_eq!(
            balance(&lab, lab.payer).await,
            before - price(),
            "{scenario}"
        );

        // The retry: the very same payment, the same id.
        let again = get(paid).await;
        assert_eq!(again.status().as_u16(), 200, "{scenario}");
        let second = decode_b64_json(&header(&again, "payment-response").expect("a receipt"));
        let out: Value = again.json().await.unwrap();
        assert_eq!(out, x402_lab::quote::output(), "{scenario}");
        if charged_again {
            let second_tx = second["transaction"].as_str().unwrap();
            assert_ne!(second_tx, tx, "{scenario}: a new transaction");
            assert_eq!(
                transfers_in(&lab, second_tx).await,
                vec![(lab.payer, lab.pay_to, price())],
                "{scenario}: the retry pulled the amount again"
            );
            assert_eq!(
                balance(&lab, lab.payer).await,
                before - price() * U256::from(2)
            );
        } else {
            assert_eq!(
                second, receipt,
                "{scenario}: the first receipt, from the cache"
            );
            assert_eq!(
                balance(&lab, lab.payer).await,
                before - price(),
                "charged once"
            );
            // The same id with another payment: a conflict, nothing moves.
            let (_, other, _) = payment(&lab, &pr);
            let conflict = get(with_payment_id(&other, &id)).await;
            assert_eq!(conflict.status().as_u16(), 409);
            assert_eq!(balance(&lab, lab.payer).await, before - price());
        }
    }
}

// ---------- upto ----------

/// The `upto` scenarios quote scheme `upto`: the amount a maximum (the honest price, or 25 USDC),
/// the facilitator the Permit2 witness binds in `extra.facilitatorAddress`, the token's domain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upto_scenarios_quote_a_maximum_for_permit2() {
    let lab = lab(&["upto-within-caps", "upto-over-cap"]).await;
    for (scenario, maximum) in [
        ("upto-within-caps", x402_lab::quote::PRICE),
        ("upto-over-cap", x402_lab::quote::EXPENSIVE_PRICE),
    ] {
        let (pr, _) = quote(unpaid(&lab, scenario).await).await;
        let req = &pr["accepts"][0];
        assert_eq!(req["scheme"], "upto", "{scenario}");
        assert_eq!(req["amount"], maximum.to_string(), "{scenario}");
        assert_eq!(req["payTo"], lab.pay_to.to_checksum(None));
        assert_eq!(req["asset"], lab.token.address().to_checksum(None));
        let facilitator: Address = req["extra"]["facilitatorAddress"]
            .as_str()
            .expect("a facilitator address")
            .parse()
            .unwrap();
        assert_ne!(facilitator, Address::ZERO);
        assert_eq!(req["extra"]["name"], x402_lab::quote::TOKEN_NAME);
    }
}

// ---------- offer-receipt ----------

/// The `offer-receipt` extension of a scenario's 402: its one offer.
async fn offer_of(lab: &x402_lab::Lab, scenario: &str) -> (Value, Value) {
    let (pr, _) = quote(unpaid(lab, scenario).await).await;
    let offers = pr["extensions"]["offer-receipt"]["info"]["offers"]
        .as_array()
        .unwrap_or_else(|| panic!("{scenario}: offers"))
        .clone();
    assert_eq!(offers.len(), 1, "{scenario}");
    (pr["accepts"][0].clone(), offers[0].clone())
}

/// A JWS's payload, and whether its ES256K signature (over SHA-256 of the signing input, r ‖ s)
/// recovers the address its `did:pkh` kid names.
fn jws_check(compact: &str) -> (Value, bool) {
    use alloy::primitives::{B256, Signature};
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use sha2::Digest as _;
    let parts: Vec<&str> = compact.split('.').collect();
    assert_eq!(parts.len(), 3);
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
    let payload: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    assert_eq!(header["alg"], "ES256K");
    let kid = header["kid"].as_str().unwrap();
    let named: Address = kid.rsplit(':').next().unwrap().parse().unwrap();
    let sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
    let digest = B256::from_slice(&sha2::Sha256::digest(
        format!("{}.{}", parts[0], parts[1]).as_bytes(),
    ));
    let (r, s) = (
        U256::from_be_slice(&sig[..32]),
        U256::from_be_slice(&sig[32..]),
    );
    let good = [false, true].into_iter().any(|parity| {
        Signature::new(r, s, parity)
            .recover_address_from_prehash(&digest)
            .is_ok_and(|a| a == named)
    });
    (payload, good)
}

/// The signing scenarios commit to their entry (EIP-712 with the payload beside the signature,
/// JWS with it inside), the bad one with a signature that does not verify, the unmatched one to
/// half the price; after payment the receipt names the settling transaction, except the liar's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_offers_commit_to_their_entry_and_receipts_name_the_settlement() {
    let lab = lab(&[
        "signed-offer-eip712",
        "signed-offer-jws",
        "signed-offer-bad-signature",
        "signed-offer-unmatched",
        "signed-receipt-lies",
    ])
    .await;
    let signer = x402_lab::offers::offer_signer();
    for scenario in ["signed-offer-eip712", "signed-receipt-lies"] {
        let (entry, offer) = offer_of(&lab, scenario).await;
        assert_eq!(offer["format"], "eip712", "{scenario}");
        let p = &offer["payload"];
        for (a, b) in [("payTo", "payTo"), ("amount", "amount"), ("asset", "asset")] {
            assert_eq!(p[a], entry[b], "{scenario}: {a}");
        }
        assert_eq!(p["resourceUrl"], url(&lab, scenario));
        assert_eq!(offer["signature"].as_str().unwrap().len(), 132);
    }
    let (entry, offer) = offer_of(&lab, "signed-offer-unmatched").await;
    assert_eq!(
        offer["payload"]["amount"],
        (x402_lab::quote::PRICE / 2).to_string()
    );
    assert_ne!(offer["payload"]["amount"], entry["amount"]);
    for (scenario, verifies) in [
        ("signed-offer-jws", true),
        ("signed-offer-bad-signature", false),
    ] {
        let (entry, offer) = offer_of(&lab, scenario).await;
        assert_eq!(offer["format"], "jws");
        assert!(
            offer.get("payload").is_none(),
            "a JWS carries its payload inside"
        );
        let (payload, good) = jws_check(offer["signature"].as_str().unwrap());
        assert_eq!(good, verifies, "{scenario}");
        assert_eq!(payload["payTo"], entry["payTo"]);
        assert_eq!(payload["amount"], entry["amount"]);
    }

    for (scenario, names_settlement) in [
        ("signed-offer-eip712", true),
        ("signed-offer-jws", true),
        ("signed-receipt-lies", false),
    ] {
        let (resp, _, _) = pay(&lab, scenario).await;
        assert_eq!(resp.status().as_u16(), 200, "{scenario}");
        let settled = decode_b64_json(&header(&resp, "payment-response").unwrap());
        let tx = settled["transaction"].as_str().unwrap();
        assert_eq!(
            transfers_in(&lab, tx).await,
            vec![(lab.payer, lab.pay_to, price())]
        );
        let receipt = &settled["extensions"]["offer-receipt"]["info"]["receipt"];
        let payload = match receipt["format"].as_str() {
            Some("eip712") => receipt["payload"].clone(),
            Some("jws") => {
                let (payload, good) = jws_check(receipt["signature"].as_str().unwrap());
                assert!(good, "{scenario}: the receipt's JWS verifies");
                payload
            }
            other => panic!("{scenario}: receipt format {other:?}"),
        };
        assert_eq!(payload["payer"], lab.payer.to_checksum(None), "{scenario}");
        assert_eq!(payload["network"], format!("eip155:{}", lab.chain_id));
        assert_eq!(payload["transaction"] == tx, names_settlement, "{scenario}");
    }
    assert_ne!(
        signer, lab.pay_to,
        "the offer key is the seller's own, not payTo's"
    );
}

// ---------- batch or credit-backed settlement ----------

/// Both batch scenarios answer the output with a receipt whose transaction is a commitment id;
/// the honest one moves nothing during the call (our authorization stays unused), the other's
/// facilitator pulls the amount twice at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_commitments_name_no_transaction() {
    let lab = lab(&["batch-commitment", "batch-commitment-double-pull"]).await;
    for (scenario, moved) in [
        ("batch-commitment", U256::ZERO),
        ("batch-commitment-double-pull", price() * U256::from(2)),
    ] {
        let before = balance(&lab, lab.payer).await;
        let (resp, nonce, _) = pay(&lab, scenario).await;
        assert_eq!(resp.status().as_u16(), 200, "{scenario}");
        let receipt = decode_b64_json(&header(&resp, "payment-response").unwrap());
        assert_eq!(receipt["success"], true);
        let id = receipt["transaction"].as_str().unwrap();
        assert!(id.starts_with("batch_") && !id.starts_with("0x"), "{id}");
        let out: Value = resp.json().await.unwrap();
        assert_eq!(out, x402_lab::quote::output());
        assert_eq!(balance(&lab, lab.payer).await, before - moved, "{scenario}");
        assert_eq!(
            lab.token
                .authorization_state(lab.payer, nonce)
                .await
                .unwrap(),
            moved > U256::ZERO,
            "{scenario}: our authorization used"
        );
    }
}

// ---------- the findings peers publish ----------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn findings_scenarios_describe_redirect_browsers_and_refuse_after_paying() {
    let lab = lab(&[
        "openapi-described",
        "undescribed",
        "html-paywall",
        "resource-elsewhere",
        "pay-then-401",
        "pay-then-403",
        "honest-v2",
        "double-pull",
    ])
    .await;
    let origin = |scenario: &str| {
        let u = url(&lab, scenario);
        u.trim_end_matches("/weather").to_string()
    };
    let get = |u: String| {
        let c = client(&lab);
        async move { c.get(u).send().await.unwrap() }
    };

    // A described 402 (the honest one), one without a bazaar extension but with an OpenAPI
    // document, and one with neither.
    let (pr, _) = quote(unpaid(&lab, "honest-v2").await).await;
    assert!(pr["extensions"]["bazaar"]["info"]["output"].is_object());
    for scenario in ["openapi-described", "undescribed"] {
        let (pr, _) = quote(unpaid(&lab, scenario).await).await;
        assert!(pr.get("extensions").is_none(), "{scenario}");
        assert_eq!(pr["resource"]["url"], url(&lab, scenario));
        assert_eq!(amount(&pr), "10000");
    }
    let doc = get(format!("{}/openapi.json", origin("openapi-described"))).await;
    assert_eq!(doc.status().as_u16(), 200);
    let doc: Value = doc.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["paths"]["/weather"]["get"].is_object());
    for path in ["/openapi.json", "/.well-known/openapi.json"] {
        let none = get(format!("{}{path}", origin("undescribed"))).await;
        assert_eq!(none.status().as_u16(), 404, "{path}");
    }

    // A browser's request: an HTML paywall page (402) from one, the JSON 402 from the others.
    let browser = |scenario: &str| {
        let c = client(&lab);
        let u = url(&lab, scenario);
        async move {
            c.get(u)
                .header("accept", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8")
                .send()
                .await
                .unwrap()
        }
    };
    let page = browser("html-paywall").await;
    assert_eq!(page.status().as_u16(), 402);
    assert!(
        header(&page, "content-type")
            .unwrap()
            .starts_with("text/html")
    );
    assert!(page.text().await.unwrap().starts_with("<!doctype html>"));
    let (pr, _) = quote(unpaid(&lab, "html-paywall").await).await;
    assert_eq!(pr["x402Version"], 2, "an agent still gets the JSON 402");
    let machine = browser("honest-v2").await;
    assert_eq!(machine.status().as_u16(), 402);
    assert_eq!(
        header(&machine, "content-type").as_deref(),
        Some("application/json")
    );

    // resource.url names another host's endpoint.
    let (pr, _) = quote(unpaid(&lab, "resource-elsewhere").await).await;
    assert_eq!(pr["resource"]["url"], x402_lab::server::ELSEWHERE);
    assert_ne!(pr["resource"]["url"], url(&lab, "resource-elsewhere"));

    // Pay-then-refuse: the authorization is used, the money moves, the answer is 401 or 403.
    for (scenario, status) in [("pay-then-401", 401), ("pay-then-403", 403)] {
        let before = balance(&lab, lab.payer).await;
        let (resp, nonce, _) = pay(&lab, scenario).await;
        assert_eq!(resp.status().as_u16(), status, "{scenario}");
        assert!(header(&resp, "payment-response").is_none());
        assert!(
            lab.token
                .authorization_state(lab.payer, nonce)
                .await
                .unwrap()
        );
        assert_eq!(
            balance(&lab, lab.payer).await,
            before - price(),
            "{scenario}"
        );
    }

    // Who sends the settlements: the honest facilitator's signer, and another account for the
    // dishonest kinds (the known_facilitator finding's two sides).
    for (scenario, known) in [("honest-v2", true), ("double-pull", false)] {
        let (resp, _, _) = pay(&lab, scenario).await;
        let receipt = decode_b64_json(&header(&resp, "payment-response").unwrap());
        let tx = receipt["transaction"].as_str().unwrap().to_string();
        let got = rpc(&lab, "eth_getTransactionByHash", serde_json::json!([tx])).await;
        let from: Address = got["from"].as_str().unwrap().parse().unwrap();
        assert_eq!(from == lab.facilitator_signer, known, "{scenario}: {from}");
    }
}
