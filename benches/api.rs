//! The API under load while the daemon keeps probing: a daemon with the lab behind it (free runs
//! every 2 s per subject, real HTTP/TLS to the lab, the ledger written) serves its API on
//! loopback; a SECOND PROCESS (this binary re-executed with `--load-client`) loads one route at a
//! time over keep-alive connections and reports requests/s and latency percentiles
//! (hdrhistogram): the subject route `/v1/subjects/{id}/score`, then the pages (`/subjects/{id}`
//! and the index `/`, rendered from the in-memory view), then preflight (`GET /v1/preflight?url=`
//! and `POST /v1/preflight` with the subject's real 402 header). Each route's baseline, measured
//! in the same run on the same machine by the same client just before it, is a bare hyper server
//! answering a body of the same size: the ratio says what the route costs over the HTTP stack
//! itself. The goal lines are the issues': for the subject route >= 5,000 requests/s with p99
//! under 20 ms; for preflight >= 20,000 requests/s with p99 under 5 ms.
//!
//!   cargo bench --bench api [-- --connections 32 --seconds 5 --only preflight]
//!
//! `--only TEXT` loads only the routes whose name contains TEXT (to profile one route alone).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde::{Deserialize, Serialize};
use x402_lab::{Lab, LabOptions};
use x402_probe::config::DaemonConfig;
use x402_probe::daemon::{Daemon, Signal, TimeSource};
use x402_probe::ledger::key::ReporterKey;

const GOAL_RPS: f64 = 5_000.0;
const GOAL_P99_MS: f64 = 20.0;
const PREFLIGHT_GOAL_RPS: f64 = 20_000.0;
const PREFLIGHT_GOAL_P99_MS: f64 = 5.0;

/// What the load client reports (one JSON line on stdout).
#[derive(Debug, Serialize, Deserialize)]
struct LoadReport {
    requests: u64,
    errors: u64,
    non_200: u64,
    seconds: f64,
    p50_us: u64,
    p99_us: u64,
    max_us: u64,
}

impl LoadReport {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.seconds
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(url) = arg(&args, "--load-client") {
        let connections: usize = arg(&args, "--connections").unwrap().parse().unwrap();
        let seconds: f64 = arg(&args, "--seconds").unwrap().parse().unwrap();
        let post = arg(&args, "--post-file").map(|f| Bytes::from(std::fs::read(f).unwrap()));
        let report = load_client(&url, connections, seconds, post);
        println!("{}", serde_json::to_string(&report).unwrap());
        return;
    }
    let connections: usize = arg(&args, "--connections").map_or(32, |c| c.parse().unwrap());
    let seconds: f64 = arg(&args, "--seconds").map_or(5.0, |s| s.parse().unwrap());
    let only = arg(&args, "--only");
    // The daemon's process as in production on this machine: one worker per core.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench(connections, seconds, only.as_deref()));
}

/// Loads `url` from `connections` keep-alive connections for `seconds` (after a second of
/// warm-up), in this process (the second one): GETs, or POSTs of `post` as JSON.
fn load_client(url: &str, connections: usize, seconds: f64, post: Option<Bytes>) -> LoadReport {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let uri: http::Uri = url.parse().unwrap();
        let addr: SocketAddr = uri.authority().unwrap().as_str().parse().unwrap();
        let warm_until = Instant::now() + Duration::from_secs(1);
        let end = warm_until + Duration::from_secs_f64(seconds);
        let mut tasks = Vec::new();
        for _ in 0..connections {
            let uri = uri.clone();
            let post = post.clone();
            tasks.push(tokio::spawn(async move {
                let mut hist =
                    hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let (mut requests, mut errors, mut non_200) = (0u64, 0u64, 0u64);
                let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                stream.set_nodelay(true).unwrap();
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                        .await
                        .unwrap();
                tokio::spawn(conn);
                loop {
                    let now = Instant::now();
                    if now >= end {
                        break;
                    }
                    let target = uri.path_and_query().unwrap().as_str();
                    let request = match &post {
                        None => http::Request::get(target),
                        Some(_) => http::Request::post(target)
                            .header(http::header::CONTENT_TYPE, "application/json"),
                    }
                    .header(http::header::HOST, uri.authority().unwrap().as_str())
                    .body(Full::new(post.clone().unwrap_or_default()))
                    .unwrap();
                    let began = Instant::now();
                    let ok = match sender.send_request(request).await {
                        Ok(response) => {
                            let status = response.status();
                            match response.into_body().collect().await {
                                Ok(_) => Some(status == 200),
                                Err(_) => None,
                            }
                        }
                        Err(_) => None,
                    };
                    if began < warm_until {
                        if ok.is_none() {
                            break;
                        }
                        continue;
                    }
                    let took = began.elapsed().as_micros() as u64;
                    match ok {
                        Some(true) => {
                            requests += 1;
                            hist.record(took.max(1)).unwrap();
                        }
                        Some(false) => non_200 += 1,
                        None => {
                            errors += 1;
                            break;
                        }
                    }
                }
                (hist, requests, errors, non_200)
            }));
        }
        let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        let (mut requests, mut errors, mut non_200) = (0, 0, 0);
        for t in tasks {
            let (h, r, e, n) = t.await.unwrap();
            hist.add(h).unwrap();
            requests += r;
            errors += e;
            non_200 += n;
        }
        LoadReport {
            requests,
            errors,
            non_200,
            seconds,
            p50_us: hist.value_at_quantile(0.50),
            p99_us: hist.value_at_quantile(0.99),
            max_us: hist.max(),
        }
    })
}

/// Runs the load client as a second process against `url` (POSTing the file `post`, if any).
fn load_from_second_process(
    url: &str,
    connections: usize,
    seconds: f64,
    post: Option<&std::path::Path>,
) -> LoadReport {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command.args([
        "--load-client",
        url,
        "--connections",
        &connections.to_string(),
        "--seconds",
        &seconds.to_string(),
    ]);
    if let Some(post) = post {
        command.arg("--post-file").arg(post);
    }
    let out = command.output().expect("the load client runs");
    assert!(
        out.status.success(),
        "load client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("load client said {line:?}: {e}"))
}

/// A bare hyper server answering every request with `body` (the baseline).
async fn bare_server(body: Bytes) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let body = body.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: http::Request<_>| {
                    let body = body.clone();
                    async move {
                        // The request's body read, as the API reads a POST's.
                        let _ = BodyExt::collect(req.into_body()).await;
                        Ok::<_, std::convert::Infallible>(
                            http::Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(body))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

async fn get(url: &str) -> (u16, Bytes) {
    request(url, None).await
}

/// One GET of `url`, or a POST of `post` as JSON.
async fn request(url: &str, post: Option<Bytes>) -> (u16, Bytes) {
    let uri: http::Uri = url.parse().unwrap();
    let addr: SocketAddr = uri.authority().unwrap().as_str().parse().unwrap();
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let target = uri.path_and_query().unwrap().as_str();
    let request = match &post {
        None => http::Request::get(target),
        Some(_) => {
            http::Request::post(target).header(http::header::CONTENT_TYPE, "application/json")
        }
    }
    .header(http::header::HOST, uri.authority().unwrap().as_str())
    .body(Full::new(post.unwrap_or_default()))
    .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    (
        status,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

async fn bench(connections: usize, seconds: f64, only: Option<&str>) {
    x402_probe::install_crypto_provider();
    let lab = Lab::start_with(LabOptions {
        scenarios: Some(
            ["honest-v2", "overcharge", "wrong-payee"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ),
        ..LabOptions::default()
    })
    .await
    .expect("the lab starts (did `npm ci` run?)");
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("reporter.key");
    ReporterKey::generate(&key).unwrap();
    let urls: Vec<String> = ["honest-v2", "overcharge", "wrong-payee"]
        .iter()
        .map(|n| lab.endpoint(n).unwrap().url.clone())
        .collect();
    let mut text = format!(
        r#"[daemon]
state_dir = "{state}"
reporter_key = {{ key_file = "{key}" }}

[probe]
samples = 2
spacing_ms = 0
allow_private = true
ca_files = ["{ca}"]
rpc = "{rpc}"
provenance = "test_harness"
vantage = "bench"

[schedule]
free_every_secs = 2
jitter_percent = 0
per_host_gap_ms = 0

[api]
bind = "127.0.0.1:0"
# The bench client is one address: its limit is raised out of the way.
rate_per_second = 1000000
rate_burst = 1000000
"#,
        state = dir.path().display(),
        key = key.display(),
        ca = lab.ca_file.display(),
        rpc = lab.rpc_url(),
    );
    for u in &urls {
        text.push_str(&format!("\n[[subject]]\nurl = \"{u}\"\n"));
    }
    let config: DaemonConfig = toml::from_str(&text).unwrap();
    config.validate().unwrap();
    let daemon = Daemon::open(config, None, TimeSource::System)
        .await
        .unwrap();
    let api = daemon.api_addr().expect("the API is bound");
    let (stop, rx) = tokio::sync::mpsc::channel(1);
    let running = tokio::spawn(daemon.run(rx));

    // The subject route, once the subject has a score.
    let id = x402_probe::api::signed::subject_id(&urls[0]);
    let route = format!("http://{api}/v1/subjects/{id}/score");
    let began = Instant::now();
    let body = loop {
        let (status, body) = get(&route).await;
        if status == 200 {
            break body;
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "no score within a minute"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let head = |b: Bytes| -> u64 {
        serde_json::from_slice::<serde_json::Value>(&b).unwrap()["seq"]
            .as_u64()
            .unwrap()
    };

    let page = format!("http://{api}/subjects/{id}");
    let index = format!("http://{api}/");
    // Preflight: by URL, and with the subject's own 402 header as an agent received it.
    let encoded: String = urls[0]
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let preflight = format!("http://{api}/v1/preflight?url={encoded}");
    let preflight_post = format!("http://{api}/v1/preflight");
    let post_file = dir.path().join("preflight.json");
    let header = payment_required_header(&lab, &urls[0]).await;
    let post_body = serde_json::json!({"url": urls[0], "payment_required_header": header});
    std::fs::write(&post_file, post_body.to_string()).unwrap();
    let (status, answer) = request(&preflight_post, Some(post_body.to_string().into())).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert!(
        answer["safe_accept"] == 0,
        "the honest 402 matches: {answer}"
    );
    let routes = [
        (
            "GET /v1/subjects/{id}/score (signed envelope)",
            route.clone(),
            body,
            None,
        ),
        (
            "GET /subjects/{id} (subject page, HTML)",
            page.clone(),
            get(&page).await.1,
            None,
        ),
        (
            "GET / (index page, HTML)",
            index.clone(),
            get(&index).await.1,
            None,
        ),
        (
            "GET /v1/preflight?url= (signed score inline)",
            preflight.clone(),
            get(&preflight).await.1,
            None,
        ),
        (
            "POST /v1/preflight (the subject's 402 header)",
            preflight_post.clone(),
            request(&preflight_post, Some(post_body.to_string().into()))
                .await
                .1,
            Some(post_file.as_path()),
        ),
    ];
    let mut measured = Vec::new();
    let seq0 = head(get(&format!("http://{api}/v1/ledger/head")).await.1);
    for (name, url, body, post) in &routes {
        assert!(!body.is_empty(), "{name} answers");
        if only.is_some_and(|only| !name.contains(only)) {
            continue;
        }
        let bare = bare_server(Bytes::from(vec![b' '; body.len()])).await;
        // The baseline is loaded the same way (a POST carries the same body to the bare server).
        let baseline =
            load_from_second_process(&format!("http://{bare}/"), connections, seconds, *post);
        let ours = load_from_second_process(url, connections, seconds, *post);
        measured.push((*name, body.len(), baseline, ours));
    }
    let seq1 = head(get(&format!("http://{api}/v1/ledger/head")).await.1);
    let _ = stop.send(Signal::Stop).await;
    running.await.unwrap().unwrap();

    println!(
        "api bench: {connections} keep-alive connections from a second process, {seconds} s per load after 1 s warm-up"
    );
    println!(
        "  the daemon kept probing {} subjects every 2 s: {} ledger entries written during the loads",
        urls.len(),
        seq1 - seq0
    );
    for (name, bytes, baseline, ours) in &measured {
        println!("  {name}, {bytes} bytes");
        for (who, r) in [
            ("baseline (bare hyper, same size)", baseline),
            ("x402-probe", ours),
        ] {
            println!(
                "    {who:<34} {:>9.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms  max {:>7.2} ms  ({} errors, {} non-200)",
                r.rps(),
                ms(r.p50_us),
                ms(r.p99_us),
                ms(r.max_us),
                r.errors,
                r.non_200
            );
        }
        println!(
            "    ratio to its baseline: {:.2} of the requests/s, p99 x{:.2}",
            ours.rps() / baseline.rps(),
            ours.p99_us as f64 / baseline.p99_us.max(1) as f64
        );
    }
    for (name, _, _, ours) in &measured {
        let (goal_rps, goal_p99_ms) = if name.contains("preflight") {
            (PREFLIGHT_GOAL_RPS, PREFLIGHT_GOAL_P99_MS)
        } else if name.starts_with("GET /v1/subjects/") {
            (GOAL_RPS, GOAL_P99_MS)
        } else {
            continue;
        };
        let met = ours.rps() >= goal_rps
            && ms(ours.p99_us) < goal_p99_ms
            && ours.errors == 0
            && ours.non_200 == 0;
        println!(
            "  goal ({name}): >= {goal_rps:.0} req/s with p99 < {goal_p99_ms:.0} ms: {} ({:.0} req/s, p99 {:.2} ms)",
            if met { "MET" } else { "NOT MET" },
            ours.rps(),
            ms(ours.p99_us)
        );
    }
    drop(lab);
}

/// The lab endpoint's `PAYMENT-REQUIRED` header, as an agent receives it before paying.
async fn payment_required_header(lab: &Lab, url: &str) -> String {
    use x402_probe::probe::http::{FetchConfig, FetchRequest, fetch};
    let ca = rustls_pki_types::pem::PemObject::from_pem_slice(lab.ca_pem.as_bytes()).unwrap();
    let config = FetchConfig {
        allow_private: true,
        extra_roots: vec![ca],
        ..FetchConfig::default()
    };
    let exchange = fetch(&config, &FetchRequest::get(url)).await;
    let response = exchange.response.expect("the lab endpoint answers");
    response
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("payment-required"))
        .map(|(_, v)| v.clone())
        .expect("a v2 402 carries PAYMENT-REQUIRED")
}
