//! The daemon at scale, as a separate process (`x402-probe daemon --config`, built by this bench):
//!
//! - `sweep`: a full free sweep of 20,000 lab endpoints, each on its own loopback address
//!   (127.0.0.0/8), served over HTTPS by child processes (a per-process limit of open files keeps
//!   20,000 listeners out of one process): the wall time until every subject's first free run is
//!   in the ledger, and the daemon's CPU per run against the same requests made bare (a reqwest
//!   GET with a fresh TLS handshake, our prober's `fetch` alone, that fetch on a runtime like
//!   the daemon's: multi-threaded, its concurrency in flight, and a run's fetches spaced as the
//!   daemon spaces them), measured in the same run; the servers count the connections, handshakes
//!   and requests each side made.
//!   Goal (issue 9): at most 60 s on this 2-core machine.
//! - `memory`: resident memory of the daemon with 100,000 subjects from subjects files, scheduled,
//!   on loopback addresses where nothing listens (runs are refused at once, and each is scored),
//!   with its API on and asked for pages every 10 s, at start (once the API serves every subject)
//!   and after `--memory-secs`, against the same daemon with no subject. The subjects are
//!   scored, each with its runs and scores in the ledger: a store built once by the real daemon
//!   (`scored_store`). Goal (issue 20): at most 500 MB, started in under 10 s.
//!
//! Each endpoint answers like the lab's `honest-v2`: the same 402 (its `PAYMENT-REQUIRED` header
//! and `{}` body, built by the lab's own quote functions for its URL), the same operator file, a
//! certificate of its own address signed by a CA made for the run.
//!
//! The daemon's configuration is the default but for what a sweep needs: `concurrency` (default
//! 1024 here, 32 by default), loopback allowed, the CA, and `free_every_secs = 1` so that every
//! subject is due at once (the daemon spreads new subjects over one cadence, so at the default
//! 3-hour cadence a first sweep takes 3 hours by design).
//!
//! Run with `cargo bench --bench daemon` (both), `-- sweep` or `-- memory`. Options:
//! `--subjects N` (sweep, 20000), `--concurrency N` (1024), `--servers N` (3), `--baseline N`
//! (endpoints the baselines visit, 3000), `--http` (plain HTTP endpoints), `--memory-subjects N`
//! (100000), `--memory-secs N` (seconds the daemon runs after its start before memory is read
//! again, 300).
//! Not part of CI: it takes a few minutes and most of the machine.

use std::collections::HashSet;
use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy::primitives::Address;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;

use x402_lab::quote::{self, QuoteContext};
use x402_lab::server::RESOURCE_PATH;
use x402_probe::probe::http::{FetchConfig, FetchRequest, fetch};

const SERVER_ENV: &str = "X402_PROBE_BENCH_SWEEP_SERVER";
const OPERATOR_PATH: &str = "/.well-known/x402-operator.json";
/// The port every endpoint listens on (each on its own address).
const PORT: u16 = 8402;
/// Requests a subject's first free run makes by default: 5 samples and the operator file (the
/// findings' fetches wait for its second run).
const REQUESTS_PER_RUN: f64 = 6.0;
const SWEEP_GOAL_SECS: f64 = 60.0;
/// Issue 20: 100,000 scored subjects in at most 500 MB, started in under 10 s.
const MEMORY_GOAL_MB: f64 = 500.0;
const STARTUP_GOAL_SECS: f64 = 10.0;

// ---------- options ----------

struct Options {
    sweep: bool,
    memory: bool,
    subjects: usize,
    concurrency: usize,
    servers: usize,
    baseline: usize,
    plain_http: bool,
    memory_subjects: usize,
    memory_secs: u64,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(|v| {
                v.parse()
                    .unwrap_or_else(|_| panic!("{name} takes a number"))
            })
            .unwrap_or(default)
    };
    let sweep = args.iter().any(|a| a == "sweep");
    let memory = args.iter().any(|a| a == "memory");
    Options {
        sweep: sweep || !memory,
        memory: memory || !sweep,
        subjects: value("--subjects", 20_000),
        concurrency: value("--concurrency", 1024),
        servers: value("--servers", 3),
        baseline: value("--baseline", 3_000),
        plain_http: args.iter().any(|a| a == "--http"),
        memory_subjects: value("--memory-subjects", 100_000),
        memory_secs: value("--memory-secs", 300) as u64,
    }
}

fn main() {
    if let Ok(spec) = std::env::var(SERVER_ENV) {
        return serve(&spec);
    }
    let options = options();
    x402_probe::install_crypto_provider();
    if options.sweep {
        sweep(&options);
    }
    if options.memory {
        memory(&options);
    }
}

// ---------- addresses ----------

/// The loopback network of this run (127.N.0.0/15, by process id, so two runs do not collide).
fn network() -> u8 {
    20 + (std::process::id() % 100) as u8 * 2
}

/// Endpoint `i`'s address: 250 per /24, host parts 1 to 250.
fn address(net: u8, i: usize) -> Ipv4Addr {
    let block = i / 250;
    Ipv4Addr::new(
        127,
        net + (block / 256) as u8,
        (block % 256) as u8,
        (1 + i % 250) as u8,
    )
}

fn url(scheme: &str, net: u8, i: usize, port: u16) -> String {
    format!("{scheme}://{}:{port}{RESOURCE_PATH}", address(net, i))
}

// ---------- the endpoints (child processes) ----------

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "x402-probe daemon bench CA");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(30);
    params
}

/// What one endpoint answers, built once.
struct Answers {
    payment_required: HeaderValue,
    operator_file: Bytes,
}

impl Answers {
    fn new(resource: String) -> Answers {
        let scenario = x402_lab::scenarios::by_name("honest-v2").expect("the honest-v2 scenario");
        let ctx = QuoteContext {
            chain_id: 31_337,
            token: Address::repeat_byte(0x11),
            fake_token: Address::repeat_byte(0x22),
            pay_to: Address::repeat_byte(0x33),
            other_wallet: Address::repeat_byte(0x44),
            resource,
            solana: None,
            agent: None,
        };
        let pr = quote::payment_required(&scenario, &ctx, 0);
        Answers {
            payment_required: HeaderValue::from_str(&quote::encode_header(&scenario, &pr))
                .expect("a header value"),
            operator_file: Bytes::from(
                quote::operator_file(&scenario, &ctx).expect("honest-v2 has an operator file"),
            ),
        }
    }

    /// The lab's honest-v2 answers: the 402 (header, `{}` body), the operator file, 404 else.
    fn answer(&self, path: &str) -> Response<Full<Bytes>> {
        let json = HeaderValue::from_static("application/json");
        let (status, body) = match path {
            RESOURCE_PATH => (StatusCode::PAYMENT_REQUIRED, Bytes::from_static(b"{}")),
            OPERATOR_PATH => (StatusCode::OK, self.operator_file.clone()),
            _ => (StatusCode::NOT_FOUND, Bytes::from_static(b"not found\n")),
        };
        let mut resp = Response::new(Full::new(body));
        *resp.status_mut() = status;
        resp.headers_mut().insert(http::header::CONTENT_TYPE, json);
        if status == StatusCode::PAYMENT_REQUIRED {
            resp.headers_mut()
                .insert("payment-required", self.payment_required.clone());
        }
        resp
    }
}

/// What an endpoint server saw: connections accepted, TLS handshakes completed, requests answered.
static SEEN: [std::sync::atomic::AtomicU64; 3] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 3];

const CONNECTIONS: usize = 0;
const HANDSHAKES: usize = 1;
const REQUESTS: usize = 2;

fn seen(i: usize) {
    SEEN[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// A child: serves endpoints `first..first + count` until its standard input closes; each line
/// it reads is answered with its counts (`connections handshakes requests`).
/// `spec` is `net,first,count,port,https,ca_key_file`.
fn serve(spec: &str) {
    let parts: Vec<&str> = spec.split(',').collect();
    let net: u8 = parts[0].parse().unwrap();
    let first: usize = parts[1].parse().unwrap();
    let count: usize = parts[2].parse().unwrap();
    let port: u16 = parts[3].parse().unwrap();
    let https = parts[4] == "https";
    x402_probe::install_crypto_provider();
    let tls = https.then(|| {
        let ca_key = KeyPair::from_pem(&std::fs::read_to_string(parts[5]).unwrap()).unwrap();
        let ca_der = ca_params().self_signed(&ca_key).unwrap().der().clone();
        (
            Issuer::new(ca_params(), ca_key),
            ca_der,
            KeyPair::generate().unwrap(),
        )
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        for i in first..first + count {
            let ip = address(net, i);
            let scheme = if https { "https" } else { "http" };
            let answers = Arc::new(Answers::new(url(scheme, net, i, port)));
            let acceptor = tls.as_ref().map(|(issuer, ca_der, key)| {
                let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
                params.subject_alt_names = vec![SanType::IpAddress(IpAddr::V4(ip))];
                let mut dn = DistinguishedName::new();
                dn.push(DnType::CommonName, ip.to_string());
                params.distinguished_name = dn;
                params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
                params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
                let now = time::OffsetDateTime::now_utc();
                params.not_before = now - time::Duration::days(1);
                params.not_after = now + time::Duration::days(365);
                let leaf = params.signed_by(key, issuer).unwrap();
                let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
                let mut config = rustls::ServerConfig::builder()
                    .with_no_client_auth()
                    .with_single_cert(vec![leaf.der().clone(), ca_der.clone()], key_der)
                    .unwrap();
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                TlsAcceptor::from(Arc::new(config))
            });
            let listener = std::net::TcpListener::bind(SocketAddr::from((ip, port)))
                .unwrap_or_else(|e| panic!("binding {ip}:{port}: {e}"));
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            tokio::spawn(async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    seen(CONNECTIONS);
                    let answers = answers.clone();
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        match acceptor {
                            Some(acceptor) => {
                                if let Ok(tls) = acceptor.accept(tcp).await {
                                    seen(HANDSHAKES);
                                    serve_connection(tls, answers).await;
                                }
                            }
                            None => serve_connection(tcp, answers).await,
                        }
                    });
                }
            });
        }
        println!("ready");
        std::io::stdout().flush().unwrap();
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                let [c, h, r] = SEEN
                    .each_ref()
                    .map(|a| a.load(std::sync::atomic::Ordering::Relaxed));
                println!("{c} {h} {r}");
                std::io::stdout().flush().unwrap();
                line.clear();
            }
        })
        .await
        .unwrap();
    });
}

async fn serve_connection<S>(stream: S, answers: Arc<Answers>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req: Request<Incoming>| {
        let answers = answers.clone();
        seen(REQUESTS);
        async move { Ok::<_, Infallible>(answers.answer(req.uri().path())) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

struct Servers {
    children: Vec<Child>,
}

impl Servers {
    fn cpu_seconds(&self) -> f64 {
        self.children.iter().map(|c| proc_cpu_seconds(c.id())).sum()
    }

    /// What the servers have seen so far, summed.
    fn seen(&mut self) -> Seen {
        let mut total = Seen::default();
        for child in &mut self.children {
            let stdin = child.stdin.as_mut().unwrap();
            stdin.write_all(b"count\n").unwrap();
            stdin.flush().unwrap();
            let mut line = String::new();
            BufReader::new(child.stdout.as_mut().unwrap())
                .read_line(&mut line)
                .unwrap();
            let n: Vec<u64> = line
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            total.connections += n[0];
            total.handshakes += n[1];
            total.requests += n[2];
        }
        total
    }
}

/// Connections, TLS handshakes and requests the endpoint servers saw.
#[derive(Default, Clone, Copy)]
struct Seen {
    connections: u64,
    handshakes: u64,
    requests: u64,
}

impl Seen {
    fn since(self, before: Seen) -> Seen {
        Seen {
            connections: self.connections - before.connections,
            handshakes: self.handshakes - before.handshakes,
            requests: self.requests - before.requests,
        }
    }

    /// Per `n` (runs, or baseline requests).
    fn per(self, n: f64) -> String {
        format!(
            "{:.2} connections, {:.2} TLS handshakes, {:.2} requests",
            self.connections as f64 / n,
            self.handshakes as f64 / n,
            self.requests as f64 / n
        )
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for child in &mut self.children {
            drop(child.stdin.take());
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
    }
}

fn start_servers(o: &Options, net: u8, ca_key: &Path) -> Servers {
    let per = o.subjects.div_ceil(o.servers);
    let mut children = Vec::new();
    for s in 0..o.servers {
        let first = s * per;
        let count = per.min(o.subjects.saturating_sub(first));
        if count == 0 {
            continue;
        }
        let spec = format!(
            "{net},{first},{count},{PORT},{},{}",
            if o.plain_http { "http" } else { "https" },
            ca_key.display()
        );
        let child = Command::new(std::env::current_exe().unwrap())
            .env(SERVER_ENV, spec)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("an endpoint server process");
        children.push(child);
    }
    for child in &mut children {
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "an endpoint server did not start");
    }
    Servers { children }
}

// ---------- process accounting ----------

/// User and system CPU time of a process, from /proc (clock ticks).
fn proc_cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let after = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the command.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// CPU seconds so far of each of a process's threads, summed by thread name (the writer thread,
/// the runtime's threads, the main thread): where the daemon's CPU goes without a profiler. The
/// runtime's workers and its blocking pool share one name, so they are counted together; threads
/// that ended are not counted (a blocking thread idle for ten seconds ends, with its CPU).
fn thread_cpu_seconds(pid: u32) -> std::collections::BTreeMap<String, f64> {
    let mut by_name = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return by_name;
    };
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_string();
        let fields: Vec<&str> = stat
            .get(close + 2..)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let field = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // utime and stime (fields 14 and 15 of stat, 12 and 13 after the command).
        let ticks = field(11) + field(12);
        *by_name.entry(name).or_insert(0.0) += ticks / tick;
    }
    by_name
}

/// Minor page faults of a process so far, from /proc (field 10 of stat): memory the process got
/// back from the system, each a page (or a huge page) zeroed by the kernel.
fn proc_minor_faults(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let after = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
    // Field 10 of stat (minflt) is 8 after the command.
    after
        .split_whitespace()
        .nth(7)
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

/// A `/proc/PID/status` line in kB (VmRSS, VmHWM).
fn proc_status_kb(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU time of this process, all threads.
fn own_cpu_seconds() -> f64 {
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

// ---------- the daemon (child process) ----------

struct DaemonProcess {
    child: Child,
    log: PathBuf,
    spawned: Instant,
}

impl DaemonProcess {
    fn start(config: &Path, dir: &Path) -> DaemonProcess {
        let log = dir.join("daemon.log");
        // `X402_PROBE_BENCH_DAEMON`: another build's binary (to measure a change against).
        let binary = std::env::var_os("X402_PROBE_BENCH_DAEMON")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_x402-probe").into());
        let child = Command::new(binary)
            .arg("daemon")
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the daemon starts");
        DaemonProcess {
            child,
            log,
            spawned: Instant::now(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the log's "daemon started" (the schedule is built); `None` if it exited first.
    fn wait_started(&mut self, limit: Duration) -> Option<Duration> {
        loop {
            let mut text = String::new();
            if let Ok(mut f) = std::fs::File::open(&self.log) {
                let _ = f.read_to_string(&mut text);
            }
            if text.contains("daemon started") {
                return Some(self.spawned.elapsed());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                eprintln!("the daemon exited ({status}):\n{text}");
                return None;
            }
            if self.spawned.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the time it takes to stop (killed after `limit`).
    fn stop(mut self, limit: Duration) -> (Duration, bool) {
        let t = Instant::now();
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return (t.elapsed(), true);
            }
            if t.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return (t.elapsed(), false);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn reporter_key(dir: &Path) -> PathBuf {
    let key = dir.join("reporter.key");
    x402_probe::ledger::key::ReporterKey::generate(&key).expect("a reporter key");
    key
}

// ---------- the sweep ----------

fn sweep(o: &Options) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let net = network();
    let scheme = if o.plain_http { "http" } else { "https" };
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params().self_signed(&ca_key).unwrap();
    let ca_key_file = dir.path().join("ca.key");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_key_file, ca_key.serialize_pem()).unwrap();
    std::fs::write(&ca_file, ca_cert.pem()).unwrap();
    let ca_der: CertificateDer<'static> = ca_cert.der().clone();

    let t = Instant::now();
    let mut servers = start_servers(o, net, &ca_key_file);
    let urls: Vec<String> = (0..o.subjects).map(|i| url(scheme, net, i, PORT)).collect();
    println!(
        "sweep: {} endpoints ({scheme}, honest-v2's answers), one per loopback address 127.{net}.x.y, served by {} child processes (up in {:.1} s)",
        o.subjects,
        servers.children.len(),
        t.elapsed().as_secs_f64()
    );

    // Baselines: the requests a first run makes (5 samples and the operator file), made bare, from
    // this process, to endpoints spread over the whole set.
    let step = (o.subjects / o.baseline.max(1)).max(1);
    let picked: Vec<usize> = (0..o.subjects).step_by(step).take(o.baseline).collect();
    let requests: Vec<String> = picked
        .iter()
        .flat_map(|&i| {
            let base = format!("{scheme}://{}:{PORT}", address(net, i));
            let mut r: Vec<String> = (0..5).map(|_| format!("{base}{RESOURCE_PATH}")).collect();
            r.push(format!("{base}{OPERATOR_PATH}"));
            r
        })
        .collect();
    let bare = baseline_reqwest(&requests, &ca_der, &mut servers);
    let ours = baseline_fetch(&requests, &ca_der, &mut servers, Runtime::Bench);
    // The same fetches as the daemon makes them: its runtime (multi-threaded, a worker per core)
    // and its concurrency in flight, so that what the fetches cost on that runtime is not counted
    // as the rest of the run.
    let as_daemon = baseline_fetch(
        &requests,
        &ca_der,
        &mut servers,
        Runtime::Daemon {
            in_flight: o.concurrency,
        },
    );

    let bases: Vec<String> = picked
        .iter()
        .map(|&i| format!("{scheme}://{}:{PORT}", address(net, i)))
        .collect();
    let as_runs = baseline_runs(&bases, &ca_der, &mut servers, o.concurrency);

    // The daemon.
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let key = reporter_key(&state);
    let mut text = format!(
        r#"[daemon]
state_dir = "{state}"
reporter_key = {{ key_file = "{key}" }}

[probe]
allow_private = true
ca_files = ["{ca}"]
vantage = "bench"
provenance = "test_harness"

[schedule]
free_every_secs = 1
concurrency = {concurrency}

[api]
enabled = false
"#,
        state = state.display(),
        key = key.display(),
        ca = ca_file.display(),
        concurrency = o.concurrency,
    );
    for u in &urls {
        text.push_str(&format!("\n[[subject]]\nurl = \"{u}\"\n"));
    }
    let config = dir.path().join("daemon.toml");
    std::fs::write(&config, text).unwrap();

    let servers_cpu0 = servers.cpu_seconds();
    let mut daemon = DaemonProcess::start(&config, dir.path());
    let Some(startup) = daemon.wait_started(Duration::from_secs(1800)) else {
        panic!("the daemon did not start");
    };
    let started = Instant::now();
    let cpu_started = proc_cpu_seconds(daemon.pid());
    let threads_started = thread_cpu_seconds(daemon.pid());
    let faults_started = proc_minor_faults(daemon.pid());
    let servers_cpu1 = servers.cpu_seconds();
    let seen1 = servers.seen();
    // Every subject's first run in the ledger.
    let ledger = state.join("ledger.sqlite");
    let conn =
        rusqlite::Connection::open_with_flags(&ledger, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("the daemon's ledger");
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    let mut seen: HashSet<String> = HashSet::with_capacity(o.subjects);
    // Every run entry, first or later: with `free_every_secs = 1` a subject's second run starts a
    // second after its first lands, and its work is in the daemon's CPU too.
    let mut landed = 0u64;
    let mut after = 0i64;
    let limit = Duration::from_secs(1800);
    let mut progress = Vec::new();
    let mut next_mark = 0.25;
    loop {
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, subject FROM entry WHERE kind = 'run' AND seq > ?1 ORDER BY seq",
            )
            .unwrap();
        let rows: Vec<(i64, String)> = stmt
            .query_map([after], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for (seq, subject) in rows {
            after = seq;
            landed += 1;
            seen.insert(subject);
        }
        let share = seen.len() as f64 / o.subjects as f64;
        while share >= next_mark && next_mark <= 1.0 {
            progress.push((next_mark, started.elapsed().as_secs_f64()));
            next_mark += 0.25;
        }
        if seen.len() >= o.subjects || started.elapsed() > limit {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let sweep_secs = started.elapsed().as_secs_f64();
    let daemon_cpu = proc_cpu_seconds(daemon.pid()) - cpu_started;
    let threads = thread_cpu_seconds(daemon.pid());
    let faults = proc_minor_faults(daemon.pid()).saturating_sub(faults_started);
    let servers_cpu = servers.cpu_seconds() - servers_cpu1;
    let served = servers.seen().since(seen1);
    let hwm = proc_status_kb(daemon.pid(), "VmHWM").unwrap_or(0);
    let done = seen.len();
    let checked = check_runs(&conn, &ledger, 200);
    drop(conn);
    let (stop, clean) = daemon.stop(Duration::from_secs(600));
    drop(servers);

    let runs = done as f64;
    let per_run = daemon_cpu / runs;
    println!(
        "  daemon: concurrency {}, 5 samples 200 ms apart and the operator file per first run (the defaults), free_every_secs = 1",
        o.concurrency
    );
    println!(
        "  startup (config read, subjects stored, schedule built): {:.1} s, {:.1} s of CPU",
        startup.as_secs_f64(),
        cpu_started
    );
    println!(
        "  sweep: {done} of {} first runs in the ledger in {sweep_secs:.1} s ({:.0} runs/s); quarters at {}",
        o.subjects,
        runs / sweep_secs,
        progress
            .iter()
            .map(|(s, t)| format!("{:.0}%: {t:.1} s", s * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  goal: at most {SWEEP_GOAL_SECS:.0} s: {} (sweep alone {sweep_secs:.1} s; from the process's start {:.1} s)",
        if done == o.subjects && sweep_secs + startup.as_secs_f64() <= SWEEP_GOAL_SECS {
            "met"
        } else {
            "NOT met"
        },
        sweep_secs + startup.as_secs_f64()
    );
    println!(
        "  sampled runs: {}/{} answered 402 on every sample",
        checked.0, checked.1
    );
    println!(
        "  CPU during the sweep: daemon {daemon_cpu:.1} s, endpoint servers {servers_cpu:.1} s, of {:.1} s available on 2 cores (daemon peak RSS {:.0} MB)",
        sweep_secs * 2.0,
        hwm as f64 / 1024.0
    );
    println!(
        "  daemon's minor page faults during the sweep: {faults} ({:.1} a run)",
        faults as f64 / runs
    );
    println!("  the servers saw, per run: {}", served.per(runs));
    println!(
        "  stop (SIGTERM to exit): {:.1} s{}",
        stop.as_secs_f64(),
        if clean {
            ""
        } else {
            " (killed: did not stop in time)"
        }
    );
    println!(
        "  CPU per request (the baselines: {} endpoints x {REQUESTS_PER_RUN} requests each, same servers, this run):",
        picked.len()
    );
    println!(
        "    bare reqwest GET, fresh TLS handshake   {:8.0} µs   (servers {:6.0} µs; {:.0} requests/s)",
        bare.client_cpu * 1e6,
        bare.server_cpu * 1e6,
        bare.rate
    );
    println!(
        "    our prober's fetch alone                {:8.0} µs   (servers {:6.0} µs; {:.0} requests/s)   ratio {:.2}",
        ours.client_cpu * 1e6,
        ours.server_cpu * 1e6,
        ours.rate,
        ours.client_cpu / bare.client_cpu
    );
    println!(
        "    our fetch on the daemon's runtime       {:8.0} µs   (servers {:6.0} µs; {:.0} requests/s)   ratio {:.2}   (multi-threaded, {} in flight)",
        as_daemon.client_cpu * 1e6,
        as_daemon.server_cpu * 1e6,
        as_daemon.rate,
        as_daemon.client_cpu / bare.client_cpu,
        o.concurrency
    );
    println!(
        "    a run's fetches as the daemon spaces them {:6.0} µs   (servers {:6.0} µs; {:.0} requests/s)   ratio {:.2}   (5 samples {} ms apart, then the operator file; {} runs at a time)",
        as_runs.client_cpu * 1e6,
        as_runs.server_cpu * 1e6,
        as_runs.rate,
        as_runs.client_cpu / bare.client_cpu,
        x402_probe::config::SpacingMs::default().get(),
        o.concurrency
    );
    println!(
        "    the servers saw, per baseline request: bare {}; ours {}; on the daemon's runtime {}; as runs {}",
        bare.seen.per(bare.requests),
        ours.seen.per(ours.requests),
        as_daemon.seen.per(as_daemon.requests),
        as_runs.seen.per(as_runs.requests)
    );
    println!(
        "    daemon, per request of a run            {:8.0} µs   (servers {:6.0} µs)                       ratio {:.2}",
        per_run / REQUESTS_PER_RUN * 1e6,
        servers_cpu / runs / REQUESTS_PER_RUN * 1e6,
        per_run / REQUESTS_PER_RUN / bare.client_cpu
    );
    println!(
        "    daemon CPU per run {:.2} ms = {REQUESTS_PER_RUN} fetches {:.2} ms + the rest of the run (checks, ledger, rescoring, schedule) {:.2} ms",
        per_run * 1e3,
        ours.client_cpu * REQUESTS_PER_RUN * 1e3,
        (per_run - ours.client_cpu * REQUESTS_PER_RUN) * 1e3
    );
    println!(
        "    against the fetches on the daemon's runtime: {REQUESTS_PER_RUN} fetches {:.2} ms + the rest {:.2} ms",
        as_daemon.client_cpu * REQUESTS_PER_RUN * 1e3,
        (per_run - as_daemon.client_cpu * REQUESTS_PER_RUN) * 1e3
    );
    println!(
        "    against a run's fetches as the daemon spaces them: {REQUESTS_PER_RUN} fetches {:.2} ms + the rest {:.2} ms (an upper bound: the later runs' CPU and their fetches are counted as first runs' rest; the line below is the goal's figure)",
        as_runs.client_cpu * REQUESTS_PER_RUN * 1e3,
        (per_run - as_runs.client_cpu * REQUESTS_PER_RUN) * 1e3,
    );
    // Every run the daemon made, against every request the servers saw: the runs that landed
    // (first and later) share the daemon's CPU, and the fetches are those the servers answered
    // (runs still in flight at the end included, so their fetches are not counted as the rest).
    let all_runs = landed as f64;
    let per_landed = daemon_cpu / all_runs;
    let fetches_per_landed = served.requests as f64 / all_runs;
    let rest_landed = per_landed - as_runs.client_cpu * fetches_per_landed;
    println!(
        "    every run that landed ({landed}: {done} first, {} later): daemon CPU per run {:.2} ms = {fetches_per_landed:.2} fetches as the daemon spaces them {:.2} ms + the rest {:.2} ms (goal: at most 1 ms: {})",
        landed - done as u64,
        per_landed * 1e3,
        as_runs.client_cpu * fetches_per_landed * 1e3,
        rest_landed * 1e3,
        if rest_landed <= 1e-3 {
            "met"
        } else {
            "NOT met"
        }
    );
    println!(
        "    by thread, per run that landed: {}",
        threads
            .iter()
            .map(|(name, cpu)| {
                let before = threads_started.get(name).copied().unwrap_or(0.0);
                format!("{name} {:.2} ms", (cpu - before) / all_runs * 1e3)
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = servers_cpu0;
}

/// Whether sampled runs got a 402 on every sample: (good, sampled).
/// `n` run entries picked at random, read back as the daemon's readers read them (format 2 keeps
/// a run's observation in a blob: its samples exist only once the entry is read through the store):
/// how many have five samples that all answered 402, of how many read.
fn check_runs(conn: &rusqlite::Connection, ledger: &Path, n: usize) -> (usize, usize) {
    let mut stmt = conn
        .prepare("SELECT seq FROM entry WHERE kind = 'run' ORDER BY random() LIMIT ?1")
        .unwrap();
    let mut seqs: Vec<u64> = stmt
        .query_map([n as i64], |r| r.get::<_, i64>(0))
        .unwrap()
        .map(|seq| seq.unwrap() as u64)
        .collect();
    seqs.sort_unstable();
    let store =
        x402_probe::store::SqliteStore::open_read_only(ledger).expect("the daemon's ledger");
    let entries = x402_probe::store::Store::entries_at(&store, &seqs).expect("its run entries");
    let good = entries
        .iter()
        .filter(|e| match &e.record {
            x402_probe::ledger::record::Record::Run(run) => {
                run.free.samples.len() == 5
                    && run
                        .free
                        .samples
                        .iter()
                        .all(|s| s.exchange.response.as_ref().map(|r| r.status) == Some(402))
            }
            _ => false,
        })
        .count();
    (good, seqs.len())
}

struct Baseline {
    /// CPU seconds per request: this process, and the endpoint servers.
    client_cpu: f64,
    server_cpu: f64,
    rate: f64,
    /// What the servers saw of the measured requests, and how many were made.
    seen: Seen,
    requests: f64,
}

/// Up to this many baseline requests in flight.
const BASELINE_IN_FLIGHT: usize = 128;

fn baseline_reqwest(
    requests: &[String],
    ca: &CertificateDer<'static>,
    servers: &mut Servers,
) -> Baseline {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let mut tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.resumption = rustls::client::Resumption::disabled();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .pool_max_idle_per_host(0)
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    run_baseline(requests, servers, move |url| {
        let client = client.clone();
        async move {
            let resp = client.get(&url).send().await.expect("a bare request");
            assert!([200, 402].contains(&resp.status().as_u16()));
            std::hint::black_box(resp.bytes().await.unwrap());
        }
    })
}

/// The prober's configuration for the bench's endpoints: loopback allowed, the run's CA trusted.
fn fetch_config(ca: &CertificateDer<'static>) -> Arc<FetchConfig> {
    Arc::new(FetchConfig {
        allow_private: true,
        extra_roots: vec![ca.clone()],
        ..FetchConfig::default()
    })
}

fn baseline_fetch(
    requests: &[String],
    ca: &CertificateDer<'static>,
    servers: &mut Servers,
    runtime: Runtime,
) -> Baseline {
    let cfg = fetch_config(ca);
    run_baseline_on(runtime, requests, 1, servers, move |url| {
        let cfg = cfg.clone();
        async move {
            let exchange = fetch(&cfg, &FetchRequest::get(url)).await;
            assert!(
                matches!(exchange.status(), Some(200 | 402)),
                "{:?}",
                exchange.error
            );
            std::hint::black_box(exchange);
        }
    })
}

/// A first run's fetches as the daemon makes them, and nothing else: for each endpoint (`bases`,
/// scheme and authority), 5 samples of the resource, each the daemon's spacing after the last one
/// ended, then the operator file, on a runtime like the daemon's with `in_flight` endpoints at a
/// time. The other baselines make an endpoint's six requests back to back; a run spreads them
/// over a second, among the other runs' requests, which costs the servers more per request (and
/// our client about the same).
/// (The spacing is the daemon's default, `[probe] spacing_ms`.)
fn baseline_runs(
    bases: &[String],
    ca: &CertificateDer<'static>,
    servers: &mut Servers,
    in_flight: usize,
) -> Baseline {
    let cfg = fetch_config(ca);
    let spacing = x402_probe::config::SpacingMs::default().millis();
    run_baseline_on(
        Runtime::Daemon { in_flight },
        bases,
        REQUESTS_PER_RUN as usize,
        servers,
        move |base| {
            let cfg = cfg.clone();
            async move {
                let resource = FetchRequest::get(format!("{base}{RESOURCE_PATH}"));
                for i in 0..5 {
                    if i > 0 {
                        tokio::time::sleep(spacing).await;
                    }
                    let exchange = fetch(&cfg, &resource).await;
                    assert_eq!(exchange.status(), Some(402), "{:?}", exchange.error);
                    std::hint::black_box(exchange);
                }
                let operator =
                    fetch(&cfg, &FetchRequest::get(format!("{base}{OPERATOR_PATH}"))).await;
                assert_eq!(operator.status(), Some(200), "{:?}", operator.error);
                std::hint::black_box(operator);
            }
        },
    )
}

/// Where a baseline's requests run.
#[derive(Clone, Copy)]
enum Runtime {
    /// One thread, [`BASELINE_IN_FLIGHT`] requests in flight.
    Bench,
    /// As the daemon's: multi-threaded (a worker per core), `in_flight` requests in flight.
    Daemon { in_flight: usize },
}

fn run_baseline<F, Fut>(requests: &[String], servers: &mut Servers, one: F) -> Baseline
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    run_baseline_on(Runtime::Bench, requests, 1, servers, one)
}

/// `items` are requests, or, with `per_item` above 1, what makes that many requests each.
fn run_baseline_on<F, Fut>(
    runtime: Runtime,
    items: &[String],
    per_item: usize,
    servers: &mut Servers,
    one: F,
) -> Baseline
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (rt, in_flight) = match runtime {
        Runtime::Bench => (
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            BASELINE_IN_FLIGHT,
        ),
        Runtime::Daemon { in_flight } => (
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap(),
            in_flight.max(1),
        ),
    };
    let go = |list: &[String]| {
        rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for url in list {
                if set.len() >= in_flight {
                    set.join_next().await.unwrap().unwrap();
                }
                set.spawn(one(url.clone()));
            }
            while let Some(r) = set.join_next().await {
                r.unwrap();
            }
        })
    };
    // Warm up (lazy statics, the servers' first connections).
    go(&items[..items.len().min(300 / per_item.max(1))]);
    let seen0 = servers.seen();
    let (c0, s0, t0) = (own_cpu_seconds(), servers.cpu_seconds(), Instant::now());
    go(items);
    let wall = t0.elapsed().as_secs_f64();
    let n = (items.len() * per_item) as f64;
    Baseline {
        client_cpu: (own_cpu_seconds() - c0) / n,
        server_cpu: (servers.cpu_seconds() - s0) / n,
        rate: n / wall,
        seen: servers.seen().since(seen0),
        requests: n,
    }
}

// ---------- memory ----------

/// How often the memory run reads the daemon's resident set and asks its API for pages.
const MEMORY_SAMPLE_EVERY: Duration = Duration::from_secs(10);

fn memory(o: &Options) {
    println!(
        "memory: the daemon's resident set with {} subjects from subjects files (categories of 1,000; default cadence; nothing listens at their addresses) and its API on, asked for the index, a page of /v1/subjects and a few subject pages every {} s; against the same daemon with no subject",
        o.memory_subjects,
        MEMORY_SAMPLE_EVERY.as_secs()
    );
    let store = scored_store(o.memory_subjects);
    println!("  scored store: {}", store.summary);
    let empty = memory_run(0, o.memory_secs.min(30), None);
    let full = memory_run(o.memory_subjects, o.memory_secs, Some(&store));
    for (label, m) in [("no subject", &empty), ("subjects", &full)] {
        println!(
            "  {label:<11} {:>7} subjects: started in {:6.1} s ({:.1} s of CPU), API serving every subject {:6.1} s later ({:.1} s of CPU); VmRSS {:6.1} MB at start, {:6.1} MB after {} s (highest sample {:6.1} MB); VmHWM {:6.1} MB; {} runs, {} subjects scored, {} API requests; stop {:.1} s{}",
            m.subjects,
            m.startup,
            m.startup_cpu,
            m.view_ready,
            m.view_ready_cpu,
            kb_mb(m.rss_start_kb),
            kb_mb(m.rss_end_kb),
            m.secs,
            kb_mb(m.rss_max_kb),
            kb_mb(m.hwm_kb),
            m.runs,
            m.scored,
            m.requests,
            m.stop,
            if m.stopped { "" } else { " (killed)" }
        );
    }
    let per = |full_kb: u64, empty_kb: u64| {
        (full_kb as f64 - empty_kb as f64) / full.subjects.max(1) as f64
    };
    println!(
        "  per subject: {:.2} kB resident at start, {:.2} kB at the end ({:.2} kB at the peak); subjects file {:.1} MB",
        per(full.rss_start_kb, empty.rss_start_kb),
        per(full.rss_end_kb, empty.rss_end_kb),
        per(full.hwm_kb, empty.hwm_kb),
        full.list_bytes as f64 / 1e6
    );
    if full.scored > 0 {
        println!(
            "  growth from start to end per subject scored meanwhile: {:.2} kB ({} scored)",
            (full.rss_end_kb as f64 - full.rss_start_kb as f64) / full.scored as f64,
            full.scored
        );
    }
    let startup = full.startup + full.view_ready;
    println!(
        "  goal: started (the API serving every subject) in under {STARTUP_GOAL_SECS:.0} s: {} ({startup:.1} s)",
        if startup < STARTUP_GOAL_SECS {
            "met"
        } else {
            "NOT met"
        },
    );
    let worst = kb_mb(full.rss_max_kb.max(full.hwm_kb));
    println!(
        "  goal: at most {MEMORY_GOAL_MB:.0} MB resident, at start and after {} s: {} (start {:.1} MB, end {:.1} MB, peak {worst:.1} MB)",
        full.secs,
        if worst <= MEMORY_GOAL_MB {
            "met"
        } else {
            "NOT met"
        },
        kb_mb(full.rss_start_kb),
        kb_mb(full.rss_end_kb),
    );
}

fn kb_mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

struct Memory {
    subjects: usize,
    secs: u64,
    startup: f64,
    /// The daemon's CPU time until it started, and from then until the API served every subject.
    startup_cpu: f64,
    view_ready: f64,
    view_ready_cpu: f64,
    rss_start_kb: u64,
    rss_end_kb: u64,
    rss_max_kb: u64,
    hwm_kb: u64,
    runs: u64,
    scored: u64,
    requests: u64,
    stop: f64,
    stopped: bool,
    list_bytes: u64,
}

/// A GET on the daemon's API over a plain TCP connection: the status and the body.
fn api_get(addr: SocketAddr, path: &str) -> (u16, Vec<u8>) {
    let mut stream = std::net::TcpStream::connect(addr).expect("the API accepts");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("the API answers");
    let head_end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP head");
    let status = std::str::from_utf8(&answer[9..12])
        .unwrap()
        .parse()
        .unwrap();
    let head = String::from_utf8_lossy(&answer[..head_end]).to_ascii_lowercase();
    let mut body = answer[head_end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = unchunk(&body);
    }
    (status, body)
}

fn unchunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..line_end]).unwrap().trim(), 16)
                .unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[line_end + 2..line_end + 2 + size]);
        data = &data[line_end + 4 + size..];
    }
}

/// The API's address, from the daemon's log ("API listening").
fn api_addr(log: &Path) -> Option<SocketAddr> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().find(|l| l.contains("API listening"))?;
    let at = line.find("addr=")? + 5;
    line[at..].split_whitespace().next()?.parse().ok()
}

/// The loopback network of the memory bench's subjects: fixed, since a cached store names them
/// (127.240.0.0/15; nothing listens on their port 9).
const MEMORY_NET: u8 = 240;

fn memory_subject(i: usize) -> String {
    format!("https://{}:9/", address(MEMORY_NET, i))
}

/// Subjects per category (and per subjects file): a score reads its category's value
/// population, so one category of 100,000 would make every score read 100,000 peers.
const SUBJECTS_PER_CATEGORY: usize = 1_000;

/// Writes the memory subjects into `dir`, one subjects file (one URL a line) per category of
/// [`SUBJECTS_PER_CATEGORY`] (the configuration file's 4 MiB cap fits about 60,000 realistic
/// [[subject]] tables), and returns their `[[subjects_file]]` tables and their bytes.
fn memory_subjects_files(dir: &Path, subjects: usize) -> (String, u64) {
    let mut tables = String::new();
    let mut bytes = 0;
    for (n, first) in (0..subjects).step_by(SUBJECTS_PER_CATEGORY).enumerate() {
        let mut list = format!("# the memory bench's subjects, category {n}\n");
        for i in first..subjects.min(first + SUBJECTS_PER_CATEGORY) {
            list.push_str(&memory_subject(i));
            list.push('\n');
        }
        let file = dir.join(format!("subjects-{n}.txt"));
        std::fs::write(&file, &list).unwrap();
        bytes += list.len() as u64;
        tables.push_str(&format!(
            "[[subjects_file]]\npath = \"{}\"\ncategory = \"bench-{n}\"\n\n",
            file.display()
        ));
    }
    (tables, bytes)
}

/// Days of runs each subject of the scored store has (one free run a day).
const SCORED_DAYS: i64 = 2;
const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// What a scored store holds, as written next to it once it is built and verified.
struct ScoredStore {
    dir: PathBuf,
    summary: String,
}

/// A state directory in which `subjects` subjects are scored, each with history: built once by
/// the real daemon (in this process, on a simulated clock: `SCORED_DAYS` days at one free run a
/// day, every run refused at its address and scored) into the target's temporary directory,
/// checked with `x402-probe ledger verify` against the reporter key, and reused by later runs
/// (each of which works on a copy).
fn scored_store(subjects: usize) -> ScoredStore {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("memory-store-{subjects}"));
    let built = dir.join("built.txt");
    if let Ok(summary) = std::fs::read_to_string(&built) {
        // Kept by an earlier build: brought to this build's stored form (what an open for
        // writing derives, such as the score rows' headlines) once, here, not in every copy.
        let began = Instant::now();
        x402_probe::store::SqliteStore::open(&dir.join("state"))
            .expect("the scored store opens for writing");
        println!(
            "  scored store opened for writing (this build's stored form) in {:.1} s",
            began.elapsed().as_secs_f64()
        );
        return ScoredStore { dir, summary };
    }
    let _ = std::fs::remove_dir_all(&dir);
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let key = reporter_key(&dir);
    let (files, _) = memory_subjects_files(&dir, subjects);
    let text = format!(
        "{files}[api]\nenabled = false\n\n[daemon]\nstate_dir = \"{}\"\nreporter_key = {{ key_file = \"{}\" }}\n\n[probe]\nallow_private = true\n\n[schedule]\nfree_every_secs = 86400\nconcurrency = 256\n",
        state.display(),
        key.display(),
    );
    let config_file = dir.join("build.toml");
    std::fs::write(&config_file, &text).unwrap();
    let config = x402_probe::config::DaemonConfig::read(&config_file)
        .expect("the build's configuration reads");
    eprintln!(
        "memory: building a store of {subjects} scored subjects ({SCORED_DAYS} simulated days, one run a day each) into {}",
        dir.display()
    );
    let began = Instant::now();
    let progress_state = state.clone();
    let building = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let still = building.clone();
    let progress = std::thread::spawn(move || {
        let mut next_report = Duration::from_secs(60);
        while still.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_secs(1));
            if began.elapsed() >= next_report {
                next_report += Duration::from_secs(60);
                let (runs, scored, scores) = ledger_counts(&progress_state);
                eprintln!(
                    "  {:.0} s: {runs} runs, {scores} scores, {scored} subjects scored",
                    began.elapsed().as_secs_f64()
                );
            }
        }
    });
    let now = x402_probe::clock::Clock::now_ms(&x402_probe::clock::SystemClock);
    // Simulated days ending about now: the bench's daemon then finds them due again soon.
    let start = now - now.rem_euclid(HOUR_MS) - SCORED_DAYS * DAY_MS;
    let clock = Arc::new(x402_probe::clock::ManualClock::at_ms(start));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(x402_probe::daemon::Daemon::run_simulated(
            config,
            None,
            clock,
            start + SCORED_DAYS * DAY_MS,
            // Runs overlap: the clock moves on to the next due run while up to 256 are refused
            // (in real time) and scored.
            DAY_MS,
        ))
        .expect("the daemon scores the subjects");
    drop(runtime);
    building.store(false, std::sync::atomic::Ordering::Relaxed);
    let _ = progress.join();
    let build_secs = began.elapsed().as_secs_f64();
    let pubkey = hex::encode(
        x402_probe::ledger::key::ReporterKey::from_key_file(&key)
            .expect("the reporter key reads")
            .public_key(),
    );
    let verified = Instant::now();
    let verify = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .args(["ledger", "verify", "--state-dir"])
        .arg(&state)
        .args(["--pubkey", &pubkey, "--max-unsigned-secs"])
        .arg((SCORED_DAYS * 86_400).to_string())
        .output()
        .expect("ledger verify runs");
    let said = String::from_utf8_lossy(&verify.stdout).trim().to_string();
    assert!(
        verify.status.success(),
        "ledger verify refuses the built store: {said}\n{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    let (runs, scored, scores) = ledger_counts(&state);
    let bytes = std::fs::metadata(state.join("ledger.sqlite"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert_eq!(scored, subjects as u64, "every subject is scored");
    let summary = format!(
        "{subjects} subjects, {runs} runs, {scores} scores ({scored} subjects scored), ledger {:.0} MB; built by the daemon in {build_secs:.0} s, `ledger verify` in {:.0} s: {said}",
        bytes as f64 / 1e6,
        verified.elapsed().as_secs_f64(),
    );
    std::fs::write(&built, &summary).unwrap();
    ScoredStore { dir, summary }
}

/// Run entries, subjects scored and score entries in a state directory's ledger.
fn ledger_counts(state: &Path) -> (u64, u64, u64) {
    rusqlite::Connection::open_with_flags(
        state.join("ledger.sqlite"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .and_then(|c| {
        c.busy_timeout(Duration::from_secs(10))?;
        let count = |sql: &str| {
            c.query_row(sql, [], |r| r.get::<_, i64>(0))
                .map(|n| n as u64)
        };
        Ok((
            count("SELECT COUNT(*) FROM entry WHERE kind = 'run'")?,
            count("SELECT COUNT(DISTINCT subject) FROM score")?,
            count("SELECT COUNT(*) FROM entry WHERE kind = 'score'")?,
        ))
    })
    .unwrap_or((0, 0, 0))
}

/// The daemon with `subjects` subjects for `secs` after its API serves them all: with no ledger,
/// or on a copy of `scored`'s state directory (its subjects scored, each with history).
fn memory_run(subjects: usize, secs: u64, scored: Option<&ScoredStore>) -> Memory {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let net = MEMORY_NET;
    let state = dir.path().join("state");
    let key = match scored {
        None => {
            std::fs::create_dir_all(&state).unwrap();
            reporter_key(&state)
        }
        Some(store) => {
            let copied = Command::new("cp")
                .arg("-a")
                .arg(store.dir.join("state"))
                .arg(&state)
                .status()
                .expect("cp runs");
            assert!(copied.success(), "the scored store is copied");
            let key = state.join("reporter.key");
            let copied = Command::new("cp")
                .arg("-a")
                .arg(store.dir.join("reporter.key"))
                .arg(&key)
                .status()
                .expect("cp runs");
            assert!(copied.success(), "the reporter key is copied");
            key
        }
    };
    // Nothing listens on port 9 of these addresses: every run is refused at once. The subjects
    // come from a subjects file.
    let (files, list_bytes) = memory_subjects_files(dir.path(), subjects);
    let text = format!(
        "{files}[api]\nbind = \"127.0.0.1:0\"\n\n[daemon]\nstate_dir = \"{}\"\nreporter_key = {{ key_file = \"{}\" }}\n\n[probe]\nallow_private = true\n",
        state.display(),
        key.display(),
    );
    let config = dir.path().join("daemon.toml");
    std::fs::write(&config, &text).unwrap();
    let mut daemon = DaemonProcess::start(&config, dir.path());
    let startup = daemon
        .wait_started(Duration::from_secs(3600))
        .expect("the daemon starts")
        .as_secs_f64();
    let startup_cpu = proc_cpu_seconds(daemon.pid());
    // The API serves once its view holds every subject.
    let ready = Instant::now();
    let addr = loop {
        if let Some(addr) = api_addr(&daemon.log) {
            let (status, body) = api_get(addr, "/v1/subjects?limit=1");
            if status == 200 {
                let page: serde_json::Value = serde_json::from_slice(&body).unwrap();
                if page["total"].as_u64() == Some(subjects as u64) {
                    break addr;
                }
            }
        }
        assert!(
            ready.elapsed() < Duration::from_secs(3600),
            "the API never served every subject"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let view_ready = ready.elapsed().as_secs_f64();
    let view_ready_cpu = proc_cpu_seconds(daemon.pid()) - startup_cpu;
    let rss = || proc_status_kb(daemon.pid(), "VmRSS").unwrap_or(0);
    let rss_start_kb = rss();
    let mut rss_max_kb = rss_start_kb;
    let mut requests = 0u64;
    let began = Instant::now();
    let mut round = 0usize;
    while began.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(MEMORY_SAMPLE_EVERY.min(Duration::from_secs(secs)));
        // What a visitor and an agent ask: the index (sorted by score), a page of the list, and
        // a few subjects' pages and summaries, different ones each round.
        for path in [
            "/",
            "/?sort=subject&page=3",
            "/v1/subjects?limit=100&sort=score",
        ] {
            let (status, _) = api_get(addr, path);
            assert_eq!(status, 200, "{path}");
            requests += 1;
        }
        if subjects > 0 {
            for k in 0..5 {
                let url = format!(
                    "https://{}:9/",
                    address(net, (round * 7919 + k * 104_729) % subjects)
                );
                let id = x402_probe::api::signed::subject_id(&url);
                for path in [format!("/subjects/{id}"), format!("/v1/subjects/{id}")] {
                    let (status, _) = api_get(addr, &path);
                    assert_eq!(status, 200, "{path}");
                    requests += 1;
                }
            }
        }
        round += 1;
        rss_max_kb = rss_max_kb.max(rss());
    }
    let rss_end_kb = rss();
    rss_max_kb = rss_max_kb.max(rss_end_kb);
    let hwm_kb = proc_status_kb(daemon.pid(), "VmHWM").unwrap_or(0);
    let (runs, scored, _) = ledger_counts(&state);
    let (stop, stopped) = daemon.stop(Duration::from_secs(900));
    Memory {
        subjects,
        secs,
        startup,
        startup_cpu,
        view_ready,
        view_ready_cpu,
        rss_start_kb,
        rss_end_kb,
        rss_max_kb,
        hwm_kb,
        runs,
        scored,
        requests,
        stop: stop.as_secs_f64(),
        stopped,
        list_bytes,
    }
}
