//! RPC nodes on loopback for the tests: the pieces of a hostile node (reading a request, answering
//! it), and a proxy in front of the lab's real node that is out while the test says so.
#![allow(dead_code)]

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Reads one whole HTTP request (head, then the body its Content-Length announces), so that
/// closing does not reset the connection under the answer; returns the body.
pub async fn read_request(socket: &mut tokio::net::TcpStream) -> Vec<u8> {
    let mut request = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return Vec::new();
        }
        request.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if request.len() >= end + 4 + length {
                return request[end + 4..].to_vec();
            }
        }
    }
}

pub async fn answer(
    socket: &mut tokio::net::TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
) {
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = socket.write_all(head.as_bytes()).await;
    let _ = socket.write_all(body).await;
    let _ = socket.shutdown().await;
}

/// A proxy on loopback in front of the real node at `upstream`: every call is forwarded while
/// `out()` is false; while it is true, every call is answered with an HTML 502 page (our node, or
/// the gateway in front of it, out).
pub async fn node_out_while(upstream: String, out: Arc<dyn Fn() -> bool + Send + Sync>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        while let Ok((mut socket, _)) = listener.accept().await {
            let (client, upstream, out) = (client.clone(), upstream.clone(), out.clone());
            tokio::spawn(async move {
                let request = read_request(&mut socket).await;
                if out() {
                    let page = b"<html><body>502 Bad Gateway</body></html>";
                    answer(&mut socket, 502, "text/html", page).await;
                    return;
                }
                let Ok(forwarded) = client
                    .post(&upstream)
                    .header("content-type", "application/json")
                    .body(request)
                    .send()
                    .await
                else {
                    return;
                };
                let body = forwarded.bytes().await.unwrap_or_default();
                answer(&mut socket, 200, "application/json", &body).await;
            });
        }
    });
    url
}
