//! What the scenario tests use to look at the lab from outside: a plain HTTP client (reqwest, which is
//! not the probe), a tiny x402 payer built on the token's signing helper, and chain reads.

#![allow(dead_code)]

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy::primitives::{Address, B256, U256};
use alloy::signers::local::PrivateKeySigner;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use x402_lab::token::{Authorization, Domain, sign_authorization};
use x402_lab::{Lab, LabOptions};

pub async fn lab(scenarios: &[&str]) -> Lab {
    lab_with(scenarios, LabOptions::default()).await
}

pub async fn lab_with(scenarios: &[&str], mut options: LabOptions) -> Lab {
    options.scenarios = Some(scenarios.iter().map(|s| s.to_string()).collect());
    Lab::start_with(options).await.expect("lab starts")
}

pub fn url(lab: &Lab, scenario: &str) -> String {
    lab.endpoint(scenario).expect("scenario runs").url.clone()
}

/// A client that trusts the lab CA, follows no redirects and shows TLS details.
pub fn client(lab: &Lab) -> reqwest::Client {
    x402_lab::install_crypto_provider();
    let ca = reqwest::Certificate::from_pem(lab.ca_pem.as_bytes()).expect("CA parses");
    reqwest::Client::builder()
        .add_root_certificate(ca)
        .redirect(reqwest::redirect::Policy::none())
        .tls_info(true)
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client builds")
}

/// An unpaid GET of the resource (with the documented example input).
pub async fn unpaid(lab: &Lab, scenario: &str) -> reqwest::Response {
    client(lab)
        .get(format!("{}?city=Paris", url(lab, scenario)))
        .send()
        .await
        .expect("response")
}

pub fn header(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().expect("ascii header").to_string())
}

pub fn decode_b64_json(value: &str) -> Value {
    let bytes = STANDARD.decode(value).expect("standard base64");
    serde_json::from_slice(&bytes).expect("JSON")
}

/// The PaymentRequired of a 402, from the v2 header or the v1 body, and the body bytes.
pub async fn quote(resp: reqwest::Response) -> (Value, Vec<u8>) {
    assert_eq!(resp.status().as_u16(), 402);
    let header = header(&resp, "payment-required");
    let body = resp.bytes().await.expect("body").to_vec();
    match header {
        Some(h) => (decode_b64_json(&h), body),
        None => (
            serde_json::from_slice(&body).expect("v1 body is JSON"),
            body,
        ),
    }
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

pub fn payer(lab: &Lab) -> PrivateKeySigner {
    let key = std::fs::read_to_string(&lab.payer_key_file).expect("key file");
    PrivateKeySigner::from_str(key.trim()).expect("key parses")
}

/// A signed payment for `accepts[0]` of `pr`: the header name, its value and the nonce.
pub fn payment(lab: &Lab, pr: &Value) -> (&'static str, String, B256) {
    let req = &pr["accepts"][0];
    let signer = payer(lab);
    let amount = req
        .get("amount")
        .or_else(|| req.get("maxAmountRequired"))
        .and_then(Value::as_str)
        .unwrap();
    let pay_to: Address = req["payTo"].as_str().unwrap().parse().unwrap();
    let asset: Address = req["asset"].as_str().unwrap().parse().unwrap();
    let timeout = req["maxTimeoutSeconds"].as_u64().unwrap();
    let auth = Authorization::new(
        signer.address(),
        pay_to,
        U256::from_str(amount).unwrap(),
        now() - 600,
        now() + timeout,
    );
    let domain = Domain::new(
        req["extra"]["name"].as_str().unwrap(),
        req["extra"]["version"].as_str().unwrap(),
        lab.chain_id,
        asset,
    );
    let sig = sign_authorization(&signer, &domain, &auth).expect("signs");
    let inner = json!({
        "signature": format!("0x{}", hex::encode(sig.as_bytes())),
        "authorization": {
            "from": auth.from.to_checksum(None),
            "to": auth.to.to_checksum(None),
            "value": auth.value.to_string(),
            "validAfter": auth.valid_after.to_string(),
            "validBefore": auth.valid_before.to_string(),
            "nonce": format!("{:#x}", auth.nonce),
        }
    });
    let (name, payload) = if pr["x402Version"] == 2 {
        let mut p = json!({"x402Version": 2, "accepted": req, "payload": inner, "resource": pr["resource"]});
        if let Some(ext) = pr.get("extensions") {
            p["extensions"] = ext.clone();
        }
        ("payment-signature", p)
    } else {
        (
            "x-payment",
            json!({"x402Version": 1, "scheme": req["scheme"], "network": req["network"], "payload": inner}),
        )
    };
    (name, STANDARD.encode(payload.to_string()), auth.nonce)
}

/// Fetch the quote and pay it once. Returns the paid response and the nonce used.
pub async fn pay(lab: &Lab, scenario: &str) -> (reqwest::Response, B256, (&'static str, String)) {
    let (pr, _) = quote(unpaid(lab, scenario).await).await;
    let (name, value, nonce) = payment(lab, &pr);
    let resp = client(lab)
        .get(format!("{}?city=Paris", url(lab, scenario)))
        .header(name, &value)
        .send()
        .await
        .expect("paid response");
    (resp, nonce, (name, value))
}

pub async fn balance(lab: &Lab, who: Address) -> U256 {
    lab.token.balance_of(who).await.expect("balanceOf")
}

pub fn price() -> U256 {
    U256::from(x402_lab::quote::PRICE)
}

/// Raw JSON-RPC through a plain client, to read the chain without the lab's own helpers.
pub async fn rpc(lab: &Lab, method: &str, params: Value) -> Value {
    let resp: Value = reqwest::Client::new()
        .post(lab.rpc_url())
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .expect("rpc")
        .json()
        .await
        .expect("rpc json");
    assert!(resp.get("error").is_none(), "{method}: {resp}");
    resp["result"].clone()
}

/// The `Transfer` logs (from, to, value) of a transaction, read with eth_getTransactionReceipt.
pub async fn transfers_in(lab: &Lab, tx: &str) -> Vec<(Address, Address, U256)> {
    let receipt = rpc(lab, "eth_getTransactionReceipt", json!([tx])).await;
    assert_eq!(receipt["status"], "0x1", "transaction {tx} succeeded");
    let topic = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";
    receipt["logs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["topics"][0] == topic)
        .map(|l| {
            let t = |i: usize| {
                Address::from_word(l["topics"][i].as_str().unwrap().parse::<B256>().unwrap())
            };
            let v = U256::from_str(l["data"].as_str().unwrap()).unwrap();
            (t(1), t(2), v)
        })
        .collect()
}
