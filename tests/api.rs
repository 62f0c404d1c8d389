//! The daemon's HTTP API against a running daemon with the lab behind it: real HTTP on loopback,
//! a real store filled by simulated days of real probes and paid calls.

mod api_support;

use api_support::*;
use serde_json::Value;

async fn get(client: &reqwest::Client, url: &str) -> (u16, Value) {
    let r = client.get(url).send().await.expect("the API answers");
    let status = r.status().as_u16();
    let body = r.bytes().await.unwrap();
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {}", String::from_utf8_lossy(&body)));
    (status, value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_daemon_serves_its_subjects_and_json_errors_and_stops_cleanly() {
    let d = ApiDaemon::start(ApiOptions {
        days: 0,
        price_rise: false,
        declared_outage: false,
        pay: false,
        ..ApiOptions::default()
    })
    .await;
    let client = reqwest::Client::new();
    let (status, page) = get(&client, &d.url("/v1/subjects")).await;
    assert_eq!(status, 200);
    assert_eq!(page["total"], 3, "{page}");
    let ids: Vec<&str> = page["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&d.id_of("honest-v2").as_str()));

    let (status, key) = get(&client, &d.url("/v1/key")).await;
    assert_eq!(status, 200);
    assert_eq!(key["public_key"], hex::encode(d.public_key));

    let (status, err) = get(&client, &d.url("/v1/nothing-here")).await;
    assert_eq!(status, 404);
    assert_eq!(err["error"]["code"], "not_found", "{err}");
    let (status, err) = get(&client, &d.url("/v1/subjects?limit=0")).await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["code"], "bad_request", "{err}");
    let (status, err) = get(&client, &d.url("/v1/subjects?colour=red")).await;
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["error"]["code"], "bad_request", "{err}");
    let r = client.post(d.url("/v1/subjects")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"]["code"], "method_not_allowed", "{err}");

    let addr = d.addr;
    d.stop().await.expect("the daemon stops cleanly");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the listener is closed after a stop"
    );
}
