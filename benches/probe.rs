//! CPU time per free probe against a bare reqwest request with a fresh TLS handshake, to the same lab
//! server, measured in the same run (goal: ratio at most 1.3).
//!
//! The lab runs in a child process (this same binary, re-executed), so the CPU counted with
//! `CLOCK_PROCESS_CPUTIME_ID` is the client's alone. Both sides use a current-thread runtime, rustls
//! with ring, TLS 1.3, a fresh connection and a full handshake per request (the baseline client keeps
//! no idle connection and resumes no session). Batches alternate and the medians are compared.
//!
//! What a free probe costs per request: `probe` makes N unpaid requests (fetch with the address guard,
//! the recording TLS verifier, the leaf's parsing, per-phase timings and a bounded body) and then
//! parses the 402 and evaluates every free check once over the run. Two figures are printed: a run of
//! the default 5 samples, per request, and a run of a single sample (the evaluation not shared).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use x402_probe::checks::free::evaluate_free;
use x402_probe::observation::{ChainSeen, FreeObservation, ListingSeen, Sample};
use x402_probe::probe::http::{FetchConfig, FetchRequest, fetch};
use x402_probe::rubric::Rubric;

const SERVER_ENV: &str = "X402_PROBE_BENCH_SERVER";
/// Requests per batch (a multiple of every run size measured).
const BATCH: usize = 40;
const ROUNDS: usize = 7;
/// `probe`'s default `--samples`.
const DEFAULT_SAMPLES: usize = 5;

/// CPU time of this process, all threads: exact scheduler time (getrusage apportions by ticks, which
/// misattributes short intervals).
fn cpu_seconds() -> f64 {
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn serve() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let options = x402_lab::LabOptions {
            scenarios: Some(vec!["honest-v2".into()]),
            ..Default::default()
        };
        let lab = x402_lab::Lab::start_with(options).await.expect("lab");
        println!("{}", lab.endpoint("honest-v2").unwrap().url);
        println!("{}", lab.ca_file.display());
        std::io::stdout().flush().unwrap();
        // Serve until the parent closes our stdin.
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
        })
        .await
        .unwrap();
    });
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if std::env::var_os(SERVER_ENV).is_some() {
        return serve();
    }
    x402_probe::install_crypto_provider();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(SERVER_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("server process");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = lines.next().unwrap().unwrap();
    let ca_file = lines.next().unwrap().unwrap();
    let ca_der: rustls_pki_types::CertificateDer<'static> =
        rustls_pki_types::pem::PemObject::from_pem_file(&ca_file).unwrap();
    let rubric = Rubric::embedded_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cfg = FetchConfig {
        allow_private: true,
        extra_roots: vec![ca_der.clone()],
        ..FetchConfig::default()
    };

    // A batch of probe runs of `samples` requests each: the fetches, then one evaluation per run.
    let ours = |samples: usize| {
        rt.block_on(async {
            for _ in 0..BATCH / samples {
                let mut taken = Vec::with_capacity(samples);
                for _ in 0..samples {
                    let request = FetchRequest::get(url.clone());
                    let exchange = fetch(&cfg, &request).await;
                    assert_eq!(exchange.status(), Some(402), "{:?}", exchange.error);
                    taken.push(Sample { request, exchange });
                }
                let obs = FreeObservation {
                    subject: url.clone(),
                    vantage: "bench".into(),
                    at: 0,
                    samples: taken,
                    operator_file: None,
                    listing: ListingSeen::NotAsked,
                    chain: ChainSeen::NoRpc,
                    solana: Default::default(),
                    declared_assets: vec![],
                    allow_private: true,
                    cut_short: None,
                    listing_sha256: None,
                    mcp: None,
                    peers: None,
                };
                std::hint::black_box(evaluate_free(&obs, &rubric));
            }
        })
    };
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca_der).unwrap();
    let mut tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.resumption = rustls::client::Resumption::disabled();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .pool_max_idle_per_host(0)
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let baseline = || {
        rt.block_on(async {
            for _ in 0..BATCH {
                let resp = client.get(&url).send().await.unwrap();
                assert_eq!(resp.status().as_u16(), 402);
                std::hint::black_box(resp.bytes().await.unwrap());
            }
        })
    };
    // Warm up every path (lazy statics, page faults).
    ours(1);
    baseline();
    let (mut base, mut five, mut one) = (Vec::new(), Vec::new(), Vec::new());
    let per_request = |t0: f64, t1: f64| (t1 - t0) / BATCH as f64;
    for _ in 0..ROUNDS {
        let t0 = cpu_seconds();
        baseline();
        let t1 = cpu_seconds();
        ours(DEFAULT_SAMPLES);
        let t2 = cpu_seconds();
        ours(1);
        let t3 = cpu_seconds();
        base.push(per_request(t0, t1));
        five.push(per_request(t1, t2));
        one.push(per_request(t2, t3));
    }
    drop(child.stdin.take());
    let _ = child.wait();
    let (b, f, o) = (median(base), median(five), median(one));
    println!(
        "free probe: CPU per request (median of {ROUNDS} batches of {BATCH}, same server, same run)"
    );
    println!(
        "  baseline: bare reqwest request, fresh TLS handshake        {:8.1} µs",
        b * 1e6
    );
    println!(
        "  x402-probe, {DEFAULT_SAMPLES}-sample run (the default), per request    {:8.1} µs   ratio {:.2}",
        f * 1e6,
        f / b
    );
    println!(
        "  x402-probe, 1-sample run                                  {:8.1} µs   ratio {:.2}",
        o * 1e6,
        o / b
    );
    println!("  goal: ratio <= 1.30 for the default run");
}
