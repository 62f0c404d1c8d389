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
    /// Requests answered from the first to the last (warm-up included), over `wall_seconds`.
    all_requests: u64,
    wall_seconds: f64,
    /// CPU the client process used meanwhile (all of it: warm-up, connections, its runtime).
    client_cpu_seconds: f64,
    /// CPU the server's process used meanwhile (measured by that process).
    #[serde(default)]
    server_cpu_seconds: f64,
}

impl LoadReport {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.seconds
    }

    /// Microseconds of CPU per request answered: the client's and the server's.
    fn cpu_us(&self) -> (f64, f64) {
        let per = |s: f64| s * 1e6 / self.all_requests.max(1) as f64;
        (per(self.client_cpu_seconds), per(self.server_cpu_seconds))
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
/// warm-up), in this process (the second one): GETs, or POSTs of `post` as JSON. Lean, so that
/// the client does not hide the server's cost on the cores they share: one thread, each
/// request's bytes built once and written raw, each answer read by its `content-length` alone
/// (one request at a time per connection: no pipelining).
fn load_client(url: &str, connections: usize, seconds: f64, post: Option<Bytes>) -> LoadReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cpu0 = cpu_seconds();
    let began = Instant::now();
    let mut report = runtime.block_on(async {
        let uri: http::Uri = url.parse().unwrap();
        let addr: SocketAddr = uri.authority().unwrap().as_str().parse().unwrap();
        let request = std::sync::Arc::new(request_bytes(&uri, post.as_deref()));
        let warm_until = Instant::now() + Duration::from_secs(1);
        let end = warm_until + Duration::from_secs_f64(seconds);
        let mut tasks = Vec::new();
        for _ in 0..connections {
            let request = request.clone();
            tasks.push(tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let mut hist =
                    hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let (mut requests, mut errors, mut non_200, mut all) = (0u64, 0u64, 0u64, 0u64);
                let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                stream.set_nodelay(true).unwrap();
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let began = Instant::now();
                    if began >= end {
                        break;
                    }
                    let ok = match stream.write_all(&request).await {
                        Ok(()) => read_answer(&mut stream, &mut buf).await.map(|s| s == 200),
                        Err(_) => None,
                    };
                    all += 1;
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
                (hist, requests, errors, non_200, all)
            }));
        }
        let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        let (mut requests, mut errors, mut non_200, mut all) = (0, 0, 0, 0);
        for t in tasks {
            let (h, r, e, n, a) = t.await.unwrap();
            hist.add(h).unwrap();
            requests += r;
            errors += e;
            non_200 += n;
            all += a;
        }
        LoadReport {
            requests,
            errors,
            non_200,
            seconds,
            p50_us: hist.value_at_quantile(0.50),
            p99_us: hist.value_at_quantile(0.99),
            max_us: hist.max(),
            all_requests: all,
            wall_seconds: 0.0,
            client_cpu_seconds: 0.0,
            server_cpu_seconds: 0.0,
        }
    });
    report.wall_seconds = began.elapsed().as_secs_f64();
    report.client_cpu_seconds = cpu_seconds() - cpu0;
    report
}

/// CPU seconds this process has used so far (user and system, all threads).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// One request's bytes as the client writes them (built once per load).
fn request_bytes(uri: &http::Uri, post: Option<&[u8]>) -> Vec<u8> {
    let target = uri.path_and_query().unwrap().as_str();
    let host = uri.authority().unwrap().as_str();
    let mut out = match post {
        None => format!("GET {target} HTTP/1.1\r\nhost: {host}\r\n\r\n"),
        Some(body) => format!(
            "POST {target} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        ),
    }
    .into_bytes();
    out.extend_from_slice(post.unwrap_or_default());
    out
}

/// Reads one answer off `stream` (a head with `content-length`, then that many bytes) into
/// `buf`, and returns its status; `None` when the connection fails or the answer does not read.
async fn read_answer(stream: &mut tokio::net::TcpStream, buf: &mut [u8]) -> Option<u16> {
    use tokio::io::AsyncReadExt;
    let mut filled = 0;
    let head_end = loop {
        let n = stream.read(&mut buf[filled..]).await.ok()?;
        if n == 0 {
            return None;
        }
        let from = filled.saturating_sub(3);
        filled += n;
        if let Some(at) = buf[from..filled].windows(4).position(|w| w == b"\r\n\r\n") {
            break from + at + 4;
        }
        if filled == buf.len() {
            return None;
        }
    };
    let head = &buf[..head_end];
    let status: u16 = std::str::from_utf8(head.get(9..12)?).ok()?.parse().ok()?;
    let length: usize = head.split(|&b| b == b'\n').find_map(|line| {
        let (name, value) = line.split_at(line.iter().position(|&b| b == b':')?);
        name.eq_ignore_ascii_case(b"content-length")
            .then(|| std::str::from_utf8(&value[1..]).ok()?.trim().parse().ok())?
    })?;
    // No pipelining: nothing follows the answer's body.
    let mut left = (head_end + length).checked_sub(filled)?;
    while left > 0 {
        let room = left.min(buf.len());
        let n = stream.read(&mut buf[..room]).await.ok()?;
        if n == 0 {
            return None;
        }
        left -= n;
    }
    Some(status)
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
    let cpu0 = cpu_seconds();
    let out = command.output().expect("the load client runs");
    let server_cpu_seconds = cpu_seconds() - cpu0;
    assert!(
        out.status.success(),
        "load client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    let mut report: LoadReport = serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("load client said {line:?}: {e}"));
    report.server_cpu_seconds = server_cpu_seconds;
    report
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

/// The machine's load average as /proc/loadavg says it (1, 5 and 15 minutes).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
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
    let load_before = load_average();
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
    println!(
        "  load average (1, 5, 15 min) before the loads: {load_before}; after: {}",
        load_average()
    );
    for (name, bytes, baseline, ours) in &measured {
        println!("  {name}, {bytes} bytes");
        for (who, r) in [
            ("baseline (bare hyper, same size)", baseline),
            ("x402-probe", ours),
        ] {
            let (client_us, server_us) = r.cpu_us();
            println!(
                "    {who:<34} {:>9.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms  max {:>7.2} ms  ({} errors, {} non-200)  CPU per request: server {server_us:.1} us, client {client_us:.1} us",
                r.rps(),
                ms(r.p50_us),
                ms(r.p99_us),
                ms(r.max_us),
                r.errors,
                r.non_200
            );
        }
        println!(
            "    ratio to its baseline: {:.2} of the requests/s, p99 x{:.2}, server CPU per request x{:.2}",
            ours.rps() / baseline.rps(),
            ours.p99_us as f64 / baseline.p99_us.max(1) as f64,
            ours.cpu_us().1 / baseline.cpu_us().1.max(f64::MIN_POSITIVE)
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
