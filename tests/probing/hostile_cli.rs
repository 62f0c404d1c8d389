//! Hostile and careless input to the real binary (issue 8, findings 5-8): slow servers and
//! catalogues end within the configured deadlines; special files never hang or get read without
//! limit; our own configuration errors are usage errors (exit 2) at start-up, not findings against
//! the subject; our resolver failing is `unmeasured`, the subject's name not existing is a failure;
//! options are bounded; the spend store and its directory are private.
//!
//! Every server here is real and on loopback (HTTP over std sockets, a small DNS server over UDP);
//! every file is real (FIFOs from mkfifo, /dev/zero, chmod'ed directories). A test that would hang
//! on a regression is run under a generous kill timer and fails instead.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

/// 65 characters: one more than a vantage name may have.
const LONG_VANTAGE: &str = "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv";

/// Longer than any run here should take by far; a run still going then is a hang.
const HANG: Duration = Duration::from_secs(60);

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Ran {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not a JSON report ({e}): {}\n{}", self.stdout, self.stderr))
    }
}

/// Runs the binary; kills it after `limit` (then `code` is `None`).
fn run_env(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Ran {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran {
        code,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
        took: started.elapsed(),
    }
}

fn run(args: &[&str]) -> Ran {
    run_env(args, &[], HANG)
}

fn check<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {report}"))
}

fn outcome(report: &Value, id: &str) -> (String, String) {
    let c = check(report, id);
    (
        c["outcome"].as_str().unwrap().to_string(),
        c["evidence"].as_str().unwrap().to_string(),
    )
}

// ---------------------------------------------------------------------------------------------
// A real HTTP server on loopback: one thread per connection, a handler per request path.

#[derive(Clone, Copy)]
enum Reply {
    /// A 402 after `head_ms`, its body `body_ms` after that.
    Slow { head_ms: u64, body_ms: u64 },
    /// A catalogue page after `delay_ms`: entries that are never the subject, `total` in all.
    Catalogue {
        delay_ms: u64,
        total: usize,
        per_page: usize,
    },
}

struct HttpServer {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl HttpServer {
    fn start(route: fn(&str) -> Reply) -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || serve(stream, route));
            }
        });
        HttpServer { addr, connections }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn serve(stream: TcpStream, route: fn(&str) -> Reply) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" => break,
            Ok(_) => {}
        }
    }
    let target = request_line.split(' ').nth(1).unwrap_or("/").to_string();
    let mut stream = stream;
    match route(&target) {
        Reply::Slow { head_ms, body_ms } => {
            let body = br#"{"x402Version":2,"error":"payment required","accepts":[]}"#;
            std::thread::sleep(Duration::from_millis(head_ms));
            let head = format!(
                "HTTP/1.1 402 Payment Required\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            if stream.write_all(head.as_bytes()).is_err() {
                return;
            }
            let _ = stream.flush();
            std::thread::sleep(Duration::from_millis(body_ms));
            let _ = stream.write_all(body);
        }
        Reply::Catalogue {
            delay_ms,
            total,
            per_page,
        } => {
            std::thread::sleep(Duration::from_millis(delay_ms));
            let items: Vec<Value> = (0..per_page)
                .map(|i| {
                    serde_json::json!({"resource": format!("https://elsewhere.example/{i}"),
                                      "accepts": [], "description": "x".repeat(200)})
                })
                .collect();
            let body =
                serde_json::json!({"items": items, "pagination": {"total": total}}).to_string();
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
        }
    }
}

fn quick(_: &str) -> Reply {
    Reply::Slow {
        head_ms: 0,
        body_ms: 0,
    }
}

// ---------------------------------------------------------------------------------------------
// Finding 5: a deadline per run, a budget for catalogue reads.

#[test]
fn a_slow_server_ends_within_the_free_deadline_and_what_was_measured_stands() {
    // Head after 300 ms, body 300 ms later: about three samples fit in 2 s, not ten.
    let server = HttpServer::start(|_| Reply::Slow {
        head_ms: 300,
        body_ms: 300,
    });
    let url = server.url("/weather");
    let ran = run(&[
        "probe",
        &url,
        "--allow-private",
        "--json",
        "--samples",
        "10",
        "--spacing-ms",
        "0",
        "--free-deadline-ms",
        "2000",
    ]);
    assert!(
        ran.code.is_some(),
        "killed after {:?}: {}",
        ran.took,
        ran.stderr
    );
    assert!(ran.took < Duration::from_secs(30), "{:?}", ran.took);
    let report = ran.json();
    let (r1, evidence) = outcome(&report, "R1");
    assert_eq!(r1, "pass", "{evidence}");
    assert!(
        evidence.contains("of 10 samples not taken: the run's deadline of 2000 ms passed first"),
        "{evidence}"
    );
    let taken = check(&report, "R1")["receipt"]["detail"]["samples"]
        .as_array()
        .unwrap()
        .len();
    assert!((1..10).contains(&taken), "{taken} samples taken");
    let (h4, evidence) = outcome(&report, "H4");
    assert_eq!(h4, "unmeasured");
    assert!(evidence.contains("deadline of 2000 ms"), "{evidence}");

    // The issue's server: head at 9.5 s, body at 14 s, ten samples. Nothing fits in 1.5 s: the run
    // still ends, nothing is judged, and the exit code says the target was not probed.
    let server = HttpServer::start(|_| Reply::Slow {
        head_ms: 9_500,
        body_ms: 4_500,
    });
    let url = server.url("/weather");
    let ran = run(&[
        "probe",
        &url,
        "--allow-private",
        "--json",
        "--samples",
        "10",
        "--free-deadline-ms",
        "1500",
    ]);
    assert_eq!(ran.code, Some(3), "{}", ran.stderr);
    assert!(ran.took < Duration::from_secs(9), "{:?}", ran.took);
    let report = ran.json();
    let (r1, evidence) = outcome(&report, "R1");
    assert_eq!(r1, "unmeasured");
    assert!(
        evidence.contains("10 of 10 samples not taken"),
        "{evidence}"
    );
    assert_ne!(outcome(&report, "R3").0, "fail");
}

#[test]
fn a_slow_catalogue_is_read_within_its_time_page_and_byte_budgets() {
    fn slow_pages(path: &str) -> Reply {
        if path.starts_with("/discovery") {
            Reply::Catalogue {
                delay_ms: 400,
                total: 5_000,
                per_page: 100,
            }
        } else {
            quick(path)
        }
    }
    let server = HttpServer::start(slow_pages);
    let (url, catalogue) = (server.url("/weather"), server.url("/discovery/resources"));
    let base = [
        "probe",
        url.as_str(),
        "--allow-private",
        "--json",
        "--samples",
        "1",
        "--listing",
        catalogue.as_str(),
    ];
    let with = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        run(&args)
    };
    // 50 pages at 400 ms would take 20 s; the catalogue's 1.5 s budget ends it after a few.
    let ran = with(&["--listing-deadline-ms", "1500"]);
    assert!(ran.took < Duration::from_secs(15), "{:?}", ran.took);
    let (h1, evidence) = outcome(&ran.json(), "H1");
    assert_eq!(h1, "unmeasured", "{evidence}");
    assert!(
        evidence.contains("the catalogue's read budget of 1500 ms passed after"),
        "{evidence}"
    );
    // The run's deadline bounds the catalogue too.
    let ran = with(&["--free-deadline-ms", "1000"]);
    let (h1, evidence) = outcome(&ran.json(), "H1");
    assert_eq!(h1, "unmeasured");
    assert!(
        evidence.contains("the run's deadline passed after"),
        "{evidence}"
    );
    assert_eq!(
        outcome(&ran.json(), "R1").0,
        "pass",
        "the subject was measured"
    );
    // Pages and bytes.
    let ran = with(&["--listing-max-pages", "2"]);
    let (h1, evidence) = outcome(&ran.json(), "H1");
    assert_eq!(h1, "unmeasured");
    assert!(
        evidence.contains("budget of 2 pages was spent"),
        "{evidence}"
    );
    let pages = check(&ran.json(), "H1")["receipt"]["sha256"]
        .as_object()
        .map_or(0, |m| m.len());
    assert!(pages <= 2, "{pages} pages hashed");
    let ran = with(&["--listing-max-bytes", "30000"]);
    let (h1, evidence) = outcome(&ran.json(), "H1");
    assert_eq!(h1, "unmeasured");
    assert!(
        evidence.contains("byte budget of 30000 bytes"),
        "{evidence}"
    );
}

// ---------------------------------------------------------------------------------------------
// Finding 6: special files never hang and are never read without limit.

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path and a plain mode.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// A usage error (exit 2), quick, naming `what`.
fn assert_refused(ran: &Ran, what: &str) {
    assert!(
        ran.code.is_some(),
        "hung (killed after {:?}) on {what}",
        ran.took
    );
    assert_eq!(ran.code, Some(2), "{what}: {}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stderr.contains(what),
        "{what} not named: {}",
        ran.stderr
    );
}

#[test]
fn special_files_are_refused_by_name_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    mkfifo(&fifo);
    let big = dir.path().join("big.json");
    // Sparse: 65 MiB on paper, nothing on disk.
    std::fs::File::create(&big)
        .unwrap()
        .set_len(65 * 1024 * 1024)
        .unwrap();
    let server = HttpServer::start(quick);
    let url = server.url("/weather");
    let fifo_s = fifo.display().to_string();
    let dir_s = dir.path().display().to_string();
    let big_s = big.display().to_string();
    let short = Duration::from_secs(20);
    for bad in [fifo_s.as_str(), "/dev/zero", dir_s.as_str(), big_s.as_str()] {
        for args in [
            vec!["score", "--inputs", bad],
            vec![
                "score",
                "--inputs",
                "tests/data/inputs/04-unverified-new.json",
                "--rubric",
                bad,
            ],
            vec!["recompute", bad],
            vec!["probe", &url, "--allow-private", "--rubric", bad],
            vec!["probe", &url, "--allow-private", "--ca-file", bad],
        ] {
            if args[0] == "recompute" && bad == dir_s {
                continue; // a directory is what recompute searches; see below
            }
            let ran = run_env(&args, &[], short);
            assert_refused(&ran, bad);
        }
    }
    assert_eq!(server.connections(), 0, "nothing was probed");

    // A FIFO named *.json inside a folder given to recompute.
    let docs = tempfile::tempdir().unwrap();
    std::fs::copy(
        "tests/data/golden/04-unverified-new.json",
        docs.path().join("a.json"),
    )
    .unwrap();
    let hidden = docs.path().join("sub").join("b.json");
    std::fs::create_dir(docs.path().join("sub")).unwrap();
    mkfifo(&hidden);
    let docs_s = docs.path().display().to_string();
    let ran = run_env(&["recompute", &docs_s], &[], short);
    assert_refused(&ran, &hidden.display().to_string());
    // A directory link back to its parent is not followed (it would recurse forever).
    std::fs::remove_file(&hidden).unwrap();
    std::os::unix::fs::symlink(docs.path(), docs.path().join("sub").join("loop")).unwrap();
    let ran = run_env(&["recompute", &docs_s], &[], short);
    assert_eq!(ran.code, Some(0), "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("1 score documents recomputed"),
        "{}",
        ran.stdout
    );

    // The wallet key: a FIFO (as a file and as a systemd credential) is refused before it is read.
    let pay = |wallet: &[&str], env: &[(&str, &str)]| {
        let mut args = vec![
            "probe",
            &url,
            "--allow-private",
            "--pay",
            "--max-usd",
            "0.01",
            "--rpc",
            "http://127.0.0.1:9/",
        ];
        args.extend_from_slice(wallet);
        run_env(&args, env, short)
    };
    let ran = pay(&["--wallet-key-file", &fifo_s], &[]);
    assert_refused(&ran, &fifo_s);
    assert!(ran.stderr.contains("FIFO"), "{}", ran.stderr);
    let ran = pay(&["--wallet-key-file", "/dev/zero"], &[]);
    assert_refused(&ran, "/dev/zero");
    let creds = tempfile::tempdir().unwrap();
    mkfifo(&creds.path().join("wallet-key"));
    let creds_s = creds.path().display().to_string();
    let ran = pay(
        &["--wallet-credential", "wallet-key"],
        &[("CREDENTIALS_DIRECTORY", &creds_s)],
    );
    assert_refused(&ran, "wallet-key");
    assert_eq!(server.connections(), 0, "nothing was probed");
}

// ---------------------------------------------------------------------------------------------
// Finding 7: our configuration errors are usage errors; our resolver is not the subject.

#[test]
fn configuration_errors_are_usage_errors_before_any_traffic() {
    let server = HttpServer::start(quick);
    let url = server.url("/weather");
    let dir = tempfile::tempdir().unwrap();
    // PEM armour around bytes that are not a certificate.
    let bad_der = dir.path().join("bad-der.pem");
    std::fs::write(
        &bad_der,
        "-----BEGIN CERTIFICATE-----\nMIIBAAECAwQFBgcICQoLDA0ODw==\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let bad_der_s = bad_der.display().to_string();
    let ran = run(&["probe", &url, "--allow-private", "--ca-file", &bad_der_s]);
    assert_refused(&ran, &bad_der_s);
    assert!(ran.stderr.contains("--ca-file"), "{}", ran.stderr);
    // A good certificate followed by a bad one: the bad one is named.
    let ca = rcgen::generate_simple_self_signed(vec!["ca.test".to_string()]).unwrap();
    let mixed = dir.path().join("mixed.pem");
    let bad_pem = std::fs::read_to_string(&bad_der).unwrap();
    std::fs::write(&mixed, format!("{}{bad_pem}", ca.cert.pem())).unwrap();
    let mixed_s = mixed.display().to_string();
    let ran = run(&["probe", &url, "--allow-private", "--ca-file", &mixed_s]);
    assert_refused(&ran, "certificate #2 cannot be used");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "no certificates here\n").unwrap();
    let ran = run(&[
        "probe",
        &url,
        "--allow-private",
        "--ca-file",
        &empty.display().to_string(),
    ]);
    assert_refused(&ran, "holds no certificate");

    let port = server.addr.port();
    for (bad, why) in [
        (format!("http://user:secret@127.0.0.1:{port}/"), "user info"),
        (format!("http://exa%00mple.com:{port}/"), "URL"),
        (
            format!("http://127.0.0.1:{port}/a\u{1}b"),
            "control character",
        ),
        (format!("http://127.0.0.1:{port}/ "), "whitespace"),
        (
            "http://exa$mple.com/".to_string(),
            "not allowed in a host name",
        ),
        (
            "http://-bad-.example/".to_string(),
            "starts or ends with '-'",
        ),
        ("http://a..b/".to_string(), "empty label"),
        ("http://256.1.1.1/".to_string(), "not a valid IPv4 address"),
        (
            format!("http://{}.example/", "a".repeat(64)),
            "longer than 63",
        ),
    ] {
        let ran = run(&["probe", &bad, "--allow-private", "--samples", "1"]);
        assert_eq!(ran.code, Some(2), "{bad:?}: {}{}", ran.stdout, ran.stderr);
        assert!(ran.stderr.contains(why), "{bad:?}: {}", ran.stderr);
        // The same URL as a catalogue or an RPC node.
        for option in ["--listing", "--rpc"] {
            let ran = run(&["probe", &url, "--allow-private", option, &bad]);
            assert_eq!(ran.code, Some(2), "{option} {bad:?}: {}", ran.stderr);
            assert!(ran.stderr.contains(option), "{}", ran.stderr);
        }
    }
    assert_eq!(server.connections(), 0, "nothing was probed");
}

/// How the test DNS server answers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dns {
    /// A records point at 127.0.0.1; AAAA queries get no answer (NOERROR, empty).
    Loopback,
    NxDomain,
    ServFail,
    /// NOERROR without answers: the name exists but has no address.
    NoData,
    /// Never answers.
    Silent,
}

/// A small real DNS server on loopback UDP: answers every question as `mode` says.
fn dns_server(mode: Dns) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                return;
            };
            if mode == Dns::Silent || n < 12 {
                continue;
            }
            let query = &buf[..n];
            // The question: labels to the zero byte, then type and class.
            let mut end = 12;
            while end < n && query[end] != 0 {
                end += 1 + query[end] as usize;
            }
            let question_end = end + 5;
            if question_end > n {
                continue;
            }
            let qtype = u16::from_be_bytes([query[end + 1], query[end + 2]]);
            let rcode: u8 = match mode {
                Dns::NxDomain => 3,
                Dns::ServFail => 2,
                _ => 0,
            };
            let answer = mode == Dns::Loopback && qtype == 1;
            let mut reply = Vec::new();
            reply.extend_from_slice(&query[0..2]); // id
            reply.push(0x80 | (query[2] & 0x01)); // QR, RD echoed
            reply.push(0x80 | rcode); // RA, rcode
            reply.extend_from_slice(&[0, 1, 0, u8::from(answer), 0, 0, 0, 0]);
            reply.extend_from_slice(&query[12..question_end]);
            if answer {
                reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
            }
            let _ = socket.send_to(&reply, from);
        }
    });
    addr
}

#[test]
fn the_subjects_missing_name_fails_r1_and_our_resolver_failing_is_unmeasured() {
    let server = HttpServer::start(quick);
    let url = format!("http://subject.test:{}/weather", server.addr.port());
    let probe = |mode: Dns| {
        let ns = dns_server(mode).to_string();
        let ran = run(&[
            "probe",
            &url,
            "--allow-private",
            "--json",
            "--samples",
            "2",
            "--spacing-ms",
            "0",
            "--nameserver",
            &ns,
            "--dns-timeout-ms",
            "500",
        ]);
        assert!(ran.code.is_some(), "{mode:?}: hung");
        (ran.code, ran.json())
    };
    // Through the configured nameserver the name reaches the loopback server: R1 passes.
    let (code, report) = probe(Dns::Loopback);
    assert_eq!(
        outcome(&report, "R1").0,
        "pass",
        "{}",
        outcome(&report, "R1").1
    );
    assert_ne!(code, Some(3));
    assert!(server.connections() >= 2);

    // NXDOMAIN and a name without addresses are the subject's: R1 fails.
    for (mode, says) in [
        (Dns::NxDomain, "does not exist (NXDOMAIN)"),
        (Dns::NoData, "has no A or AAAA record"),
    ] {
        let (code, report) = probe(mode);
        let (r1, evidence) = outcome(&report, "R1");
        assert_eq!(
            (r1.as_str(), code),
            ("fail", Some(1)),
            "{mode:?}: {evidence}"
        );
        assert!(evidence.contains(says), "{mode:?}: {evidence}");
    }

    // SERVFAIL and silence are our resolver failing: nothing is judged, exit 3 (not probed).
    for mode in [Dns::ServFail, Dns::Silent] {
        let (code, report) = probe(mode);
        let (r1, evidence) = outcome(&report, "R1");
        assert_eq!(
            (r1.as_str(), code),
            ("unmeasured", Some(3)),
            "{mode:?}: {evidence}"
        );
        for id in ["R2", "R3", "C1"] {
            assert_eq!(outcome(&report, id).0, "unmeasured", "{mode:?} {id}");
        }
        assert_eq!(
            report["summary"]["fail"], 0,
            "{mode:?}: nothing counts against the subject"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Finding 8: options are bounded; payment options need --pay; the state is private.

#[test]
fn out_of_range_options_and_payment_options_without_pay_are_refused() {
    let server = HttpServer::start(quick);
    let url = server.url("/weather");
    let cases: &[(&[&str], &str)] = &[
        (&["--spacing-ms", "18446744073709551615"], "--spacing-ms"),
        (&["--spacing-ms", "60001"], "from 0 to 60000"),
        (&["--samples", "0"], "from 1 to 100"),
        (&["--samples", "65536"], "--samples"),
        (&["--free-deadline-ms", "99"], "--free-deadline-ms"),
        (&["--dns-timeout-ms", "0"], "--dns-timeout-ms"),
        (&["--nameserver", "127.0.0.1:0"], "port 0"),
        (&["--nameserver", "localhost"], "--nameserver"),
        (&["--asset", "0x1234"], "--asset"),
        (
            &[
                "--listing-max-bytes",
                "1023",
                "--listing",
                "http://127.0.0.1:9/",
            ],
            "from 1024",
        ),
        (&["--vantage", "a\nb"], "vantage"),
        (&["--vantage", LONG_VANTAGE], "vantage"),
        (&["--max-usd", "0.05"], "--max-usd"),
        (&["--max-usd-per-day", "1"], "--max-usd-per-day"),
        (
            &["--max-usd-per-subject-per-day", "1"],
            "--max-usd-per-subject-per-day",
        ),
        (&["--wallet-key-file", "wallet.key"], "--wallet-key-file"),
        (
            &["--wallet-credential", "wallet-key"],
            "--wallet-credential",
        ),
        (&["--state-dir", "state"], "--state-dir"),
        (&["--confirmations", "0"], "--confirmations"),
        (&["--paid-deadline-ms", "5000"], "--paid-deadline-ms"),
        (
            &[
                "--pay",
                "--max-usd",
                "0",
                "--rpc",
                "http://127.0.0.1:9/",
                "--wallet-credential",
                "k",
            ],
            "more than 0",
        ),
        (
            &[
                "--pay",
                "--max-usd",
                "5000",
                "--rpc",
                "http://127.0.0.1:9/",
                "--wallet-credential",
                "k",
            ],
            "at most 1000",
        ),
        (
            &["--pay", "--max-usd", "1", "--wallet-credential", "k"],
            "--rpc",
        ),
    ];
    for (extra, says) in cases {
        let mut args = vec!["probe", url.as_str(), "--allow-private", "--samples", "2"];
        if extra[0] == "--samples" {
            args.truncate(3);
        }
        args.extend_from_slice(extra);
        let ran = run_env(&args, &[], Duration::from_secs(20));
        assert_eq!(ran.code, Some(2), "{extra:?}: {}{}", ran.stdout, ran.stderr);
        assert!(ran.stderr.contains(says), "{extra:?}: {}", ran.stderr);
    }
    // A reference source for an MCP tool would be ignored: refused before anything is sent.
    let mcp = format!("mcp+{}#get_weather", server.url("/mcp"));
    let ran = run_env(
        &[
            "probe",
            &mcp,
            "--allow-private",
            "--pay",
            "--max-usd",
            "1",
            "--rpc",
            "http://127.0.0.1:9/",
            "--wallet-credential",
            "k",
            "--reference",
            "npm",
        ],
        &[],
        Duration::from_secs(20),
    );
    assert_eq!(ran.code, Some(2), "{}{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.contains("--reference"), "{}", ran.stderr);
    assert!(ran.stderr.contains("MCP tool"), "{}", ran.stderr);
    assert_eq!(server.connections(), 0, "nothing was probed");
}

/// Money in the daemon's file is a decimal string (or an integer of atomic units, 10^-6 USD), never a float:
/// `max_usd = 0.1` was taken as the binary fraction it is and summed into 0.30000000000000004.
/// Every refusal names the file's key (`[pay] max_usd`), not the command line's flag, and comes
/// before anything is opened (exit 2, the state directory not created).
#[test]
fn money_in_the_daemons_file_is_exact_and_its_errors_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = dir.path().join("daemon.toml");
    let file = |pay: &str| {
        format!(
            "[daemon]\nstate_dir = {state:?}\nreporter_key = {{ key_file = \"reporter.key\" }}\n\
             [probe]\nrpc = \"http://127.0.0.1:9/\"\n[pay]\nwallet = {{ key_file = \"wallet.key\" }}\n{pay}\n",
            state = state.display().to_string()
        )
    };
    for (pay, says) in [
        ("max_usd = 0.1", "float"),
        (
            "max_usd = \"0.05\"\nmax_usd_per_day = 1.5",
            "[pay] max_usd_per_day",
        ),
        ("max_usd = \"1e2\"", "not a dollar amount"),
        ("max_usd = -5", "negative"),
        ("max_usd = \"5000\"", "at most 1000"),
        (
            "max_usd = \"0.05\"\nmax_usd_per_subject_per_day = \"0\"",
            "more than 0",
        ),
    ] {
        std::fs::write(&config, file(pay)).unwrap();
        let ran = run(&["daemon", "--config", &config.display().to_string()]);
        assert_eq!(ran.code, Some(2), "{pay}: {}{}", ran.stdout, ran.stderr);
        assert!(ran.stderr.contains(says), "{pay}: {}", ran.stderr);
        let key = pay.lines().last().unwrap().split(' ').next().unwrap();
        assert!(
            ran.stderr.contains(&format!("[pay] {key}")),
            "{pay}: the error names the key: {}",
            ran.stderr
        );
        assert!(!ran.stderr.contains("--max-usd"), "{pay}: {}", ran.stderr);
        assert!(!state.exists(), "{pay}: nothing was opened");
    }
}

/// A valid key file, private.
fn key_file(dir: &Path) -> PathBuf {
    let path = dir.join("wallet.key");
    std::fs::write(
        &path,
        "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn the_state_directory_and_the_spend_store_are_private() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path()).display().to_string();
    // A closed port: the free run fails quickly and no paid call is attempted; the store is opened
    // before any traffic all the same.
    let url = "http://127.0.0.1:9/weather";
    let pay = |state: &Path| {
        let state = state.display().to_string();
        run(&[
            "probe",
            url,
            "--allow-private",
            "--samples",
            "1",
            "--pay",
            "--max-usd",
            "0.01",
            "--rpc",
            "http://127.0.0.1:9/",
            "--wallet-key-file",
            &key,
            "--state-dir",
            &state,
        ])
    };
    let state = dir.path().join("new").join("state");
    let ran = pay(&state);
    assert_ne!(ran.code, Some(2), "{}", ran.stderr);
    assert_eq!(mode_of(&state), 0o700);
    assert_eq!(mode_of(&state.join("spend.sqlite")), 0o600);

    // A group- or world-writable state directory is refused, and nothing is created in it.
    for mode in [0o777, 0o770, 0o1777] {
        let loose = dir.path().join(format!("loose-{mode:o}"));
        std::fs::create_dir(&loose).unwrap();
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(mode)).unwrap();
        let ran = pay(&loose);
        assert_refused(&ran, &loose.display().to_string());
        assert!(ran.stderr.contains("chmod 700"), "{}", ran.stderr);
        assert!(!loose.join("spend.sqlite").exists());
    }
    // 0755 (systemd's StateDirectory= default) is accepted.
    let usual = dir.path().join("usual");
    std::fs::create_dir(&usual).unwrap();
    std::fs::set_permissions(&usual, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_ne!(pay(&usual).code, Some(2));
    assert_eq!(mode_of(&usual.join("spend.sqlite")), 0o600);

    // An existing store readable by others (as earlier versions made it) is tightened; one others
    // can write is refused.
    std::fs::set_permissions(
        usual.join("spend.sqlite"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    assert_ne!(pay(&usual).code, Some(2));
    assert_eq!(mode_of(&usual.join("spend.sqlite")), 0o600);
    std::fs::set_permissions(
        usual.join("spend.sqlite"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    let ran = pay(&usual);
    assert_refused(&ran, "spend.sqlite");

    // A state directory owned by someone else (testable as root only).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(4242), Some(4242)).unwrap();
        let ran = pay(&theirs);
        assert_refused(&ran, "owned by uid 4242");
    }
}
