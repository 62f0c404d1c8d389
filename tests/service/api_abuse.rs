//! The API under abuse, over real connections on loopback to a running daemon: one client
//! address can neither take every operator challenge nor every connection slot, a stalled
//! connection is closed, a head has its deadline from its first byte while keep-alive lasts the
//! idle timeout, `/metrics` has a per-client limit, and requests hyper cannot parse are
//! answered with the documented JSON error like every other error. Other clients are told apart
//! by their source address (127.0.0.2 and up are loopback too).

use crate::api_support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use api_support::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The limits the README documents (`src/api/operator.rs`).
const CHALLENGES_PER_CLIENT: usize = 8;
const CHALLENGES_PER_SUBJECT: usize = 32;

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// An HTTP client whose connections come from `127.0.0.LAST`.
fn client_from(last: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(loopback(last))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// A TCP connection from `127.0.0.LAST`.
async fn connect_from(last: u8, to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(loopback(last), 0)).unwrap();
    socket.connect(to).await.unwrap()
}

/// A daemon with one honest subject, no history, runs only when asked, and `api_extra` in its
/// `[api]` section.
async fn one_subject_daemon(api_extra: &str) -> ApiDaemon {
    ApiDaemon::start(ApiOptions {
        days: 0,
        scenarios: vec!["honest-v2"],
        price_rise: false,
        declared_outage: false,
        pay: false,
        live_free_every_secs: 3600,
        api_extra: api_extra.into(),
    })
    .await
}

/// Sends `request` as is on a new connection and reads the answer until the server closes it:
/// the status, the head (lowercased) and the body.
async fn raw(to: SocketAddr, request: &[u8]) -> (u16, String, Vec<u8>) {
    let mut stream = connect_from(1, to).await;
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the server answers and closes")
        .expect("the answer reads");
    split_answer(&answer)
}

fn split_answer(answer: &[u8]) -> (u16, String, Vec<u8>) {
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(answer)))
        + 4;
    let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    (status, head, answer[end..].to_vec())
}

async fn challenge(client: &reqwest::Client, d: &ApiDaemon, subject: &str) -> (u16, Value) {
    let r = client
        .post(d.url("/v1/operator/challenge"))
        .json(&json!({"subject": subject, "action": "read_entries"}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let retry = r.headers().get("retry-after").cloned();
    let body: Value = r.json().await.unwrap();
    if status == 429 {
        assert!(retry.is_some(), "429 without Retry-After: {body}");
    }
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_every_operator_challenge() {
    let d = ApiDaemon::start(ApiOptions {
        days: 0,
        scenarios: vec!["honest-v2", "honest-v1"],
        price_rise: false,
        declared_outage: false,
        pay: false,
        live_free_every_secs: 3600,
        // Well within the rate limit: the challenges' own caps are what is tested.
        api_extra: "rate_per_second = 10000\nrate_burst = 10000".into(),
    })
    .await;
    let subject = d.urls["honest-v2"].clone();
    let other_subject = d.urls["honest-v1"].clone();

    // One address gets its share, then 429 naming the limit (it used to get 1024, and then
    // every operator got 503 until they expired).
    let a = client_from(1);
    for i in 0..CHALLENGES_PER_CLIENT {
        let (status, body) = challenge(&a, &d, &subject).await;
        assert_eq!(status, 201, "challenge {i}: {body}");
    }
    let (status, body) = challenge(&a, &d, &subject).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("at most {CHALLENGES_PER_CLIENT}"))
            && message.contains("per client address"),
        "{message}"
    );
    // Hammering on changes nothing for anyone else: another address is served.
    for _ in 0..200 {
        assert_eq!(challenge(&a, &d, &subject).await.0, 429);
    }
    let (status, body) = challenge(&client_from(2), &d, &subject).await;
    assert_eq!(status, 201, "another client: {body}");

    // Many addresses on one subject fill its share, not the others'.
    let mut issued = CHALLENGES_PER_CLIENT + 1;
    let mut last = 3u8;
    let refused = loop {
        let (status, body) = challenge(&client_from(last), &d, &subject).await;
        match status {
            201 => issued += 1,
            429 => break body,
            other => panic!("{other}: {body}"),
        }
        if issued.is_multiple_of(CHALLENGES_PER_CLIENT) {
            last += 1;
        }
        assert!(issued <= 10 * CHALLENGES_PER_SUBJECT, "no per-subject cap");
    };
    assert_eq!(issued, CHALLENGES_PER_SUBJECT);
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("per subject"), "{message}");
    let (status, body) = challenge(&client_from(last + 1), &d, &other_subject).await;
    assert_eq!(status, 201, "another subject: {body}");
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_from_one_address_leave_room_for_others() {
    // Few slots and a long head deadline, so idle connections would hold every slot for a minute.
    let d = one_subject_daemon(
        "max_connections = 64\nmax_connections_per_client = 16\n\
                    header_timeout_ms = 60000\nidle_timeout_ms = 600000",
    )
    .await;
    // Twice the slots, idle, from one address.
    let mut idle = Vec::new();
    for _ in 0..128 {
        idle.push(connect_from(1, d.addr).await);
    }
    // Let the accept loop take them all in.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Another address is served (generous bound: without the per-client cap it waits for a slot,
    // a minute here).
    let other = client_from(2);
    let asked = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        other.get(d.url("/v1/subjects")).send(),
    )
    .await
    .expect("another client is served while one address holds idle connections")
    .unwrap();
    assert_eq!(r.status(), 200);
    eprintln!(
        "another client served in {} ms next to 128 idle connections",
        asked.elapsed().as_millis()
    );
    // One more connection from the crowded address is told why it is closed.
    let mut extra = connect_from(1, d.addr).await;
    let _ = extra
        .write_all(b"GET /v1/subjects HTTP/1.1\r\nhost: x\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), extra.read_to_end(&mut answer)).await;
    let (status, head, body) = split_answer(&answer);
    assert_eq!(status, 429, "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    drop(idle);
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_connection_is_closed_after_the_idle_timeout() {
    let d = one_subject_daemon("header_timeout_ms = 60000\nidle_timeout_ms = 1000").await;
    // Half a head, then nothing: the head deadline is a minute, the idle timeout a second.
    let mut stalled = connect_from(1, d.addr).await;
    stalled
        .write_all(b"GET /v1/subjects HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    // Closed (an end of stream, or a reset): either way the read ends.
    let _ = tokio::time::timeout(Duration::from_secs(15), stalled.read_to_end(&mut rest))
        .await
        .expect("the stalled connection is closed by the server");
    // A keep-alive client that asks again after a pause is served (on a new connection).
    let client = client_from(2);
    assert_eq!(
        client.get(d.url("/v1/key")).send().await.unwrap().status(),
        200
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        client.get(d.url("/v1/key")).send().await.unwrap().status(),
        200
    );
    d.stop().await.unwrap();
}

/// Reads one answer with a `content-length` from `conn`; `None` when the server closed first.
async fn read_one(conn: &mut tokio::net::TcpStream) -> Option<(u16, String)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if got.len() >= end + 4 + length {
                let (status, head, _) = split_answer(&got[..end + 4 + length]);
                return Some((status, head));
            }
        }
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Waits (at most 15 s) for the server to close `conn`; how long it took.
async fn closed_within(conn: &mut tokio::net::TcpStream) -> Duration {
    let from = Instant::now();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), conn.read_to_end(&mut rest))
        .await
        .expect("the server closes the connection")
        .ok();
    from.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_lasts_the_idle_timeout_and_a_head_has_its_deadline_from_its_first_byte() {
    let d = one_subject_daemon("header_timeout_ms = 1000\nidle_timeout_ms = 60000").await;
    let ask = b"GET /v1/key HTTP/1.1\r\nhost: x\r\n\r\n";
    // A keep-alive connection idle for well over the head deadline (and under the idle
    // timeout) still takes the next request: the deadline runs from a head's first byte, not
    // from the previous answer (hyper's own timer closed it here after 1 s).
    let mut kept = connect_from(1, d.addr).await;
    kept.write_all(ask).await.unwrap();
    assert_eq!(read_one(&mut kept).await.expect("the first answer").0, 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    kept.write_all(ask).await.unwrap();
    let again = read_one(&mut kept).await;
    assert_eq!(
        again.map(|a| a.0),
        Some(200),
        "the same connection answers after 2.5 s idle"
    );
    // A head trickled a line at a time makes progress (the idle timeout never comes) but is
    // closed at its deadline.
    let mut trickled = connect_from(2, d.addr).await;
    trickled
        .write_all(b"GET /v1/key HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let from = Instant::now();
    let mut closed = false;
    while from.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if trickled.write_all(b"x-more: 1\r\n").await.is_err() {
            closed = true;
            break;
        }
        let mut probe = [0u8; 64];
        match tokio::time::timeout(Duration::from_millis(1), trickled.read(&mut probe)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            _ => {}
        }
    }
    assert!(closed, "a trickled head is closed at its deadline");
    let took = from.elapsed();
    assert!(took >= Duration::from_millis(900), "closed after {took:?}");
    eprintln!("a trickled head closed after {took:?} (deadline 1 s)");
    // A connection that sends nothing has the head deadline from its accept.
    let mut silent = connect_from(3, d.addr).await;
    let took = closed_within(&mut silent).await;
    assert!(took < Duration::from_secs(10), "{took:?}");
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_rate_limited_and_unparseable_requests_get_json_errors() {
    let d = one_subject_daemon("").await;
    // /metrics: a burst, then 429 JSON with Retry-After; another address still scrapes.
    let a = client_from(1);
    let mut statuses = Vec::new();
    let mut refused = None;
    for _ in 0..40 {
        let r = a.get(d.url("/metrics")).send().await.unwrap();
        statuses.push(r.status().as_u16());
        if r.status() == 429 && refused.is_none() {
            assert!(r.headers().contains_key("retry-after"));
            refused = Some(r.json::<Value>().await.unwrap());
        }
    }
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert!(
        (1..40).contains(&ok),
        "40 scrapes at once: {ok} answered (statuses {statuses:?})"
    );
    let refused = refused.unwrap();
    assert_eq!(refused["error"]["code"], "rate_limited", "{refused}");
    let r = client_from(2).get(d.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("x402_probe_runs_total"));

    // Requests hyper refuses before any route: 400, 414, 431, each with the JSON error.
    let mut many_headers = b"GET /v1/subjects HTTP/1.1\r\nhost: x\r\n".to_vec();
    for i in 0..200 {
        many_headers.extend_from_slice(format!("x-h{i}: v\r\n").as_bytes());
    }
    many_headers.extend_from_slice(b"\r\n");
    let long_uri = format!(
        "GET /v1/subjects?q={} HTTP/1.1\r\nhost: x\r\n\r\n",
        "a".repeat(70_000)
    );
    for (want, request) in [
        (400, b"NOT HTTP AT ALL\r\n\r\n".to_vec()),
        (414, long_uri.into_bytes()),
        (431, many_headers),
    ] {
        let (status, head, body) = raw(d.addr, &request).await;
        assert_eq!(status, want, "{head}");
        assert!(head.contains("content-type: application/json"), "{head}");
        let body: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{want}: {e}: {}", String::from_utf8_lossy(&body)));
        assert_eq!(body["error"]["code"], "bad_request", "{body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }
    // The connection-level rewrite leaves ordinary answers alone.
    let r = a.get(d.url("/v1/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"]["code"], "not_found");
    d.stop().await.unwrap();
}
