//! Preflight against a running daemon with the lab behind it: four simulated days of real probes
//! and paid calls, then `GET` and `POST /v1/preflight` for subjects the daemon rates `ok`,
//! `caution` and `avoid`, for a URL it does not rate, and with the lab's real 402 as received,
//! as is, with its payTo swapped and with its amount raised; hostile bodies. Every request and
//! response is validated against the OpenAPI document the daemon serves; the signed score inside
//! an answer verifies with the reporter key; the CLI's exit codes follow the answers.

use crate::api_support;

use std::process::Command;

use api_support::*;
use base64::Engine;
use serde_json::{Value, json};
use x402_probe::api::signed::{SignedScore, verify};
use x402_probe::probe::http::{FetchConfig, FetchRequest, fetch};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

struct Client {
    http: reqwest::Client,
    doc: Value,
}

impl Client {
    async fn get(&self, d: &ApiDaemon, url: &str) -> (u16, Value) {
        let r = self
            .http
            .get(d.url(&format!("/v1/preflight?url={}", percent_encoded(url))))
            .send()
            .await
            .unwrap();
        self.answer("get", r).await
    }

    async fn post(&self, d: &ApiDaemon, body: &Value) -> (u16, Value) {
        validate_request(&self.doc, "post", "/v1/preflight", body).unwrap();
        self.post_raw(d, body.to_string().into_bytes()).await
    }

    /// A body as is (not necessarily one the document allows).
    async fn post_raw(&self, d: &ApiDaemon, body: Vec<u8>) -> (u16, Value) {
        let r = self
            .http
            .post(d.url("/v1/preflight"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        self.answer("post", r).await
    }

    async fn answer(&self, method: &str, r: reqwest::Response) -> (u16, Value) {
        let url = r.url().to_string();
        let (status, content_type, body) = read_answer(r).await;
        validate_response(
            &self.doc,
            method,
            "/v1/preflight",
            &url,
            status,
            &content_type,
            &body,
        )
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        (status, serde_json::from_slice(&body).unwrap())
    }
}

/// `text` as a query value: every byte but the unreserved ones percent-encoded.
fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn codes(answer: &Value) -> Vec<String> {
    answer["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap().to_string())
        .collect()
}

fn cli(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The lab endpoint's unpaid 402 as a client receives it: its `PAYMENT-REQUIRED` header.
async fn payment_required_header(d: &ApiDaemon, url: &str) -> String {
    let ca = rustls_pki_types::pem::PemObject::from_pem_slice(d.lab.ca_pem.as_bytes()).unwrap();
    let config = FetchConfig {
        allow_private: true,
        extra_roots: vec![ca],
        ..FetchConfig::default()
    };
    let exchange = fetch(&config, &FetchRequest::get(url)).await;
    let response = exchange.response.expect("the lab endpoint answers");
    assert_eq!(response.status, 402);
    response
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("payment-required"))
        .map(|(_, v)| v.clone())
        .expect("a v2 402 carries PAYMENT-REQUIRED")
}

/// The header's object with `change` applied to its first entry, as a header again.
fn altered(header: &str, change: impl FnOnce(&mut Value)) -> String {
    let mut object: Value = serde_json::from_slice(&B64.decode(header).unwrap()).unwrap();
    change(&mut object["accepts"][0]);
    B64.encode(object.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_answers_go_caution_avoid_and_unrated_and_matches_the_rated_terms() {
    let d = ApiDaemon::start(ApiOptions {
        scenarios: vec!["honest-v2", "injection-description", "overcharge"],
        price_rise: false,
        declared_outage: false,
        // Room for a PaymentRequired over x402's own bounds, so that bound is the one refusing.
        api_extra: "max_body_bytes = 262144".into(),
        ..ApiOptions::default()
    })
    .await;
    let http = reqwest::Client::new();
    let doc: Value = http
        .get(d.url("/v1/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let c = Client { http, doc };

    // Each subject's answer follows its verdict; the lab's three give one of each.
    let mut answers = Vec::new();
    for (name, expected) in [
        ("honest-v2", "go"),
        ("injection-description", "caution"),
        ("overcharge", "avoid"),
    ] {
        let url = &d.urls[name];
        let summary: Value = c
            .http
            .get(d.url(&format!("/v1/subjects/{}", d.id_of(name))))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let verdict = summary["latest"]["verdict"].as_str().unwrap().to_string();
        let (status, p) = c.get(&d, url).await;
        assert_eq!(status, 200, "{p}");
        assert_eq!(p["answer"], expected, "{name} (verdict {verdict}): {p}");
        assert_eq!(codes(&p)[0], format!("verdict_{verdict}"), "{p}");
        assert_eq!(p["subject_id"], d.id_of(name));
        assert_eq!(p["score"]["verdict"], verdict.as_str(), "{p}");
        assert!(p["safe_accept"].is_null() && p["accepts"] == json!([]));
        // The rated terms are the ones the endpoint declares.
        let declared: Value =
            serde_json::from_slice(&B64.decode(payment_required_header(&d, url).await).unwrap())
                .unwrap();
        assert_eq!(p["rated"]["pay_to"], declared["accepts"][0]["payTo"], "{p}");
        assert_eq!(
            p["rated"]["amount"], declared["accepts"][0]["amount"],
            "{p}"
        );
        // The signed score verifies with the reporter key and is the subject's latest.
        let envelope: SignedScore = serde_json::from_value(p["signed_score"].clone()).unwrap();
        let signed = verify(&envelope, &d.public_key).expect("the signed score verifies");
        assert_eq!(signed["verdict"]["verdict"], verdict.as_str());
        assert_eq!(envelope.subject_id, d.id_of(name));
        answers.push((name, p));
    }

    // A URL we do not rate: unrated, and no guess.
    let unknown = format!("{}/not-a-subject", d.urls["honest-v2"]);
    let (status, p) = c.get(&d, &unknown).await;
    assert_eq!(status, 200);
    assert_eq!(p["answer"], "unrated", "{p}");
    assert_eq!(codes(&p), vec!["not_rated"]);
    assert!(p["score"].is_null() && p["rated"].is_null() && p["signed_score"].is_null());

    // The honest endpoint's 402 as received: go, and entry 0 is the one to pay; in the body as
    // well as in the header.
    let honest = d.urls["honest-v2"].clone();
    let header = payment_required_header(&d, &honest).await;
    let (status, p) = c
        .post(
            &d,
            &json!({"url": honest, "payment_required_header": header}),
        )
        .await;
    assert_eq!(status, 200, "{p}");
    assert_eq!(
        (&p["answer"], &p["safe_accept"]),
        (&json!("go"), &json!(0)),
        "{p}"
    );
    assert_eq!(p["accepts"][0]["matches_rated"], true);
    let object: Value = serde_json::from_slice(&B64.decode(&header).unwrap()).unwrap();
    let (_, p) = c
        .post(&d, &json!({"url": honest, "payment_required": object}))
        .await;
    assert_eq!(
        (&p["answer"], &p["safe_accept"]),
        (&json!("go"), &json!(0)),
        "{p}"
    );

    // Its payTo swapped: avoid, whatever the score, and nothing to pay.
    let thief = "0x1111111111111111111111111111111111111111";
    let swapped = altered(&header, |e| e["payTo"] = json!(thief));
    let (_, p) = c
        .post(
            &d,
            &json!({"url": honest, "payment_required_header": swapped}),
        )
        .await;
    assert_eq!(p["answer"], "avoid", "{p}");
    assert!(p["safe_accept"].is_null());
    assert_eq!(
        codes(&p)[..2],
        ["no_entry_matches", "pay_to_differs"],
        "{p}"
    );
    assert_eq!(p["accepts"][0]["differs"][0]["sent"], thief);
    // Its amount raised: avoid.
    let raised = altered(&header, |e| {
        let amount: u128 = e["amount"].as_str().unwrap().parse().unwrap();
        e["amount"] = json!((amount + 1).to_string());
    });
    let (_, p) = c
        .post(
            &d,
            &json!({"url": honest, "payment_required_header": raised}),
        )
        .await;
    assert_eq!(p["answer"], "avoid", "{p}");
    assert!(codes(&p).contains(&"amount_raised".to_string()), "{p}");
    // Each answer is kept for the text sent: the honest 402 again is the same go, the swapped
    // one again the same avoid (never the other's answer).
    let again = |text: &str| {
        let body = json!({"url": honest, "payment_required_header": text});
        let c = &c;
        let d = &d;
        async move { c.post(d, &body).await.1 }
    };
    let (_, first) = c
        .post(
            &d,
            &json!({"url": honest, "payment_required_header": header}),
        )
        .await;
    // (The whole answer may differ only if the daemon scored the subject in between.)
    let judged = |p: &Value| {
        ["answer", "safe_accept", "accepts", "rated", "subject_id"].map(|k| p[k].clone())
    };
    for _ in 0..2 {
        assert_eq!(judged(&again(&header).await), judged(&first));
        let p = again(&swapped).await;
        assert_eq!(
            (&p["answer"], &p["safe_accept"]),
            (&json!("avoid"), &json!(null)),
            "{p}"
        );
        assert_eq!(again(&raised).await["answer"], "avoid");
    }

    // Hostile bodies: 400 (or the API's 413) with stable codes.
    let error = |v: &Value| v["error"]["code"].as_str().unwrap().to_string();
    let (status, e) = c
        .post(
            &d,
            &json!({"url": honest, "payment_required_header": "%%% not base64 %%%"}),
        )
        .await;
    assert_eq!(
        (status, error(&e)),
        (400, "payment_required_not_base64".into())
    );
    let deep = format!(
        r#"{{"url": "{honest}", "payment_required": {{"accepts": {}{}}}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let (status, e) = c.post_raw(&d, deep.into_bytes()).await;
    assert_eq!(
        (status, error(&e)),
        (400, "payment_required_too_deep".into())
    );
    let huge = B64.encode(vec![b' '; 100 * 1024]);
    let (status, e) = c
        .post(&d, &json!({"url": honest, "payment_required_header": huge}))
        .await;
    assert_eq!(
        (status, error(&e)),
        (400, "payment_required_too_large".into())
    );
    let (status, e) = c
        .post(
            &d,
            &json!({"url": honest, "payment_required_header": B64.encode("{\"accepts\": [")}),
        )
        .await;
    assert_eq!(
        (status, error(&e)),
        (400, "payment_required_not_json".into())
    );
    let (status, e) = c
        .post(
            &d,
            &json!({"url": honest, "payment_required": {"hello": 1}}),
        )
        .await;
    assert_eq!(
        (status, error(&e)),
        (400, "payment_required_missing".into())
    );
    let (status, e) = c.post_raw(&d, b"{\"url\": ".to_vec()).await;
    assert_eq!((status, error(&e)), (400, "bad_request".into()));
    let (status, e) = c.post_raw(&d, vec![b' '; 300 * 1024]).await;
    assert_eq!((status, error(&e)), (413, "payload_too_large".into()));
    let (status, e) = c.get(&d, "ftp://example.com/").await;
    assert_eq!((status, error(&e)), (400, "bad_request".into()));

    // The CLI: exit codes by answer.
    for (name, expected) in [
        ("honest-v2", 0),
        ("injection-description", 3),
        ("overcharge", 4),
    ] {
        let (code, out) = cli(&["preflight", &d.urls[name], "--api", &d.base]);
        assert_eq!(code, expected, "{name}: {out}");
    }
    let (code, out) = cli(&["preflight", &unknown, "--api", &d.base]);
    assert_eq!(code, 5, "{out}");
    assert!(out.starts_with("UNRATED"), "{out}");
    let file = d.dir.path().join("swapped.b64");
    std::fs::write(&file, &swapped).unwrap();
    let (code, out) = cli(&[
        "preflight",
        &honest,
        "--api",
        &d.base,
        "--payment-required",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 4, "{out}");
    assert!(
        out.contains("pay_to_differs") && out.contains("no accepts entry is safe"),
        "{out}"
    );
    std::fs::write(&file, &header).unwrap();
    let (code, out) = cli(&[
        "preflight",
        &honest,
        "--api",
        &d.base,
        "--payment-required",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("pay accepts[0]"), "{out}");
    let (code, _) = cli(&["preflight", &honest, "--api", "http://127.0.0.1:1"]);
    assert_eq!(code, 1, "no daemon");

    // Agents find it.
    let llms = c
        .http
        .get(d.url("/llms.txt"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(llms.contains("/v1/preflight"), "{llms}");
    let description: Value = c
        .http
        .get(d.url("/v1/description.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(description.to_string().contains("/v1/preflight"));
    d.stop().await.unwrap();
}
