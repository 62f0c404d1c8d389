//! A webhook receiver on loopback for the tests: a real HTTP/1.1 server that keeps every request
//! it gets (headers and body) and answers 503 to the first `fail_first` of them, 204 after. And
//! the receiver's side of the signature, written here from the README's description (not with
//! the daemon's own function).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub event_id: String,
    pub event_type: String,
    pub signature: String,
    pub content_type: String,
    pub body: Vec<u8>,
    /// What the receiver answered.
    pub status: u16,
}

pub struct Receiver {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub fn url(&self) -> String {
        format!("http://{}/hooks/x402", self.addr)
    }

    pub fn all(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Requests answered 2xx.
    pub fn accepted(&self) -> Vec<Received> {
        self.all().into_iter().filter(|r| r.status < 300).collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a receiver on `addr` (port 0: any free port).
pub async fn start_receiver(addr: SocketAddr, fail_first: usize) -> Receiver {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("the receiver binds");
    let addr = listener.local_addr().unwrap();
    let received = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(AtomicUsize::new(0));
    let kept = received.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let kept = kept.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let kept = kept.clone();
                    let seen = seen.clone();
                    async move {
                        let header = |name: &str| {
                            req.headers()
                                .get(name)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_string()
                        };
                        let (event_id, event_type, signature, content_type) = (
                            header("x402-probe-event-id"),
                            header("x402-probe-event-type"),
                            header("x402-probe-signature"),
                            header("content-type"),
                        );
                        let body = req.into_body().collect().await?.to_bytes().to_vec();
                        let n = seen.fetch_add(1, Ordering::SeqCst);
                        let status = if n < fail_first { 503 } else { 204 };
                        kept.lock().unwrap().push(Received {
                            event_id,
                            event_type,
                            signature,
                            content_type,
                            body,
                            status,
                        });
                        Ok::<_, hyper::Error>(
                            hyper::Response::builder()
                                .status(status)
                                .body(Full::new(Bytes::new()))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Receiver {
        addr,
        received,
        task,
    }
}

/// The receiver's check: `t=<unix s>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`, the timestamp
/// within five minutes of now.
pub fn signature_is_valid(secret: &[u8], header: &str, body: &[u8]) -> bool {
    use hmac::{Hmac, Mac};
    let mut t = None;
    let mut v1 = None;
    for part in header.split(',') {
        if let Some(v) = part.strip_prefix("t=") {
            t = Some(v.to_string());
        } else if let Some(v) = part.strip_prefix("v1=") {
            v1 = hex::decode(v).ok();
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return false;
    };
    let Ok(sent) = t.parse::<i64>() else {
        return false;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    if (now - sent).abs() > 300 {
        return false;
    }
    let mut signed = t.into_bytes();
    signed.push(b'.');
    signed.extend_from_slice(body);
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).unwrap();
    mac.update(&signed);
    mac.verify_slice(&v1).is_ok()
}

/// A webhook secret in a private file (0600), as the daemon requires.
pub fn secret_file(dir: &std::path::Path, secret: &str) -> std::path::PathBuf {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("webhook.secret");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, format!("{secret}\n").as_bytes()).unwrap();
    path
}

/// A `[[webhook]]` table.
pub fn webhook_table(url: &str, secret: &std::path::Path, max_attempts: u32) -> String {
    format!(
        "\n[[webhook]]\nurl = \"{url}\"\nsecret = {{ file = \"{}\" }}\nmax_attempts = {max_attempts}\nretry_initial_ms = 100\nretry_max_ms = 800\ntimeout_ms = 2000\n",
        secret.display()
    )
}
