//! One client connection as the accept loop serves it: its place among the connections of its
//! client address (at most `[api] max_connections_per_client` at once), its progress (a
//! connection that makes none for `[api] idle_timeout_ms` while no request is being answered is
//! closed), its head deadline (a request's head must be whole within `[api] header_timeout_ms`
//! of its first byte, the first request's of the connection's accept), and the answers hyper
//! writes on its own for a request it cannot parse (400, 414, 431, sent with an empty body),
//! rewritten into the API's JSON error form on their way out.
//!
//! The head deadline is kept here, not by hyper's `header_read_timeout`: hyper starts that
//! timer as soon as it waits for a next request, so a keep-alive connection idle between two
//! requests was closed after the head deadline (5 s) instead of the idle timeout, and a client
//! reusing it at that moment lost its request to the close.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{ErrorBody, ErrorCode, ErrorDetail};

/// Connections held per client address.
pub(crate) struct ClientSlots {
    per_client: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place among its client's; given back when dropped.
pub(crate) struct ClientSlot {
    slots: Arc<ClientSlots>,
    ip: IpAddr,
}

impl ClientSlots {
    pub(crate) fn new(per_client: usize) -> Arc<ClientSlots> {
        Arc::new(ClientSlots {
            per_client: per_client.max(1),
            held: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one more connection from `ip`, or `None` when it holds its share already.
    pub(crate) fn take(self: &Arc<Self>, ip: IpAddr) -> Option<ClientSlot> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(ip).or_insert(0);
        if *n >= self.per_client {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            slots: self.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

/// The answer a connection over its client's share gets before it is closed (written once,
/// without waiting: a client that does not read it loses nothing it was promised).
pub(crate) fn over_share_answer(per_client: usize) -> Vec<u8> {
    json_answer(
        StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::RateLimited,
        &format!("at most {per_client} connections at once from one address; close some and retry"),
        &["retry-after: 1"],
    )
}

/// A whole HTTP/1.1 answer with the JSON error body, closing the connection.
fn json_answer(status: StatusCode, code: ErrorCode, message: &str, extra: &[&str]) -> Vec<u8> {
    let body = serde_json::to_vec(&ErrorBody {
        error: ErrorDetail {
            code,
            message: message.to_string(),
        },
    })
    .unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    );
    for line in extra {
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(&body);
    out
}

/// When a connection last made progress, whether a request on it is being answered, and since
/// when a request's head is being read.
#[derive(Default)]
pub(crate) struct Activity {
    started: Option<Instant>,
    /// Milliseconds from `started` to the last byte read or written.
    last_ms: AtomicU64,
    /// Requests being answered (the handler's own time is bounded by the request timeout).
    answering: AtomicUsize,
    /// One more than the milliseconds from `started` to the first byte of the head being read;
    /// 0 while none is (between requests, or while one is answered).
    head_from: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            started: Some(Instant::now()),
            // The first head is awaited from the accept: a connection that sends nothing is
            // closed after the head deadline, not the longer idle timeout.
            head_from: AtomicU64::new(1),
            ..Activity::default()
        })
    }

    fn elapsed_ms(&self) -> u64 {
        self.started.map_or(0, |s| s.elapsed().as_millis() as u64)
    }

    fn touch(&self) {
        self.last_ms.store(self.elapsed_ms(), Ordering::Relaxed);
    }

    /// Bytes arrived: between requests they begin a head, whose deadline runs from now.
    fn read_some(&self) {
        let now = self.elapsed_ms();
        self.last_ms.store(now, Ordering::Relaxed);
        if self.answering.load(Ordering::Relaxed) == 0 {
            let _ =
                self.head_from
                    .compare_exchange(0, now + 1, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// When the head being read is late if it is not whole by then; `None` when no head is
    /// being read.
    pub(crate) fn head_due_at(&self, header_timeout: Duration) -> Option<Instant> {
        let from = self.head_from.load(Ordering::Relaxed).checked_sub(1)?;
        Some(self.started? + Duration::from_millis(from) + header_timeout)
    }

    /// When the connection is to be closed if nothing changes before then: the head deadline
    /// or the idle timeout, whichever comes first; `None` while a request is being answered.
    pub(crate) fn closes_at(&self, idle: Duration, header_timeout: Duration) -> Option<Instant> {
        match (self.stalls_at(idle), self.head_due_at(header_timeout)) {
            (Some(stall), Some(head)) => Some(stall.min(head)),
            (stall, head) => stall.or(head),
        }
    }

    /// When the connection counts as stalled if nothing happens before then; `None` while a
    /// request is being answered.
    pub(crate) fn stalls_at(&self, idle: Duration) -> Option<Instant> {
        if self.answering.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let started = self.started?;
        Some(started + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)) + idle)
    }

    /// Marks a request as being answered until the guard is dropped.
    pub(crate) fn answering(self: &Arc<Self>) -> Answering {
        self.answering.fetch_add(1, Ordering::Relaxed);
        // hyper calls the service once the head is whole.
        self.head_from.store(0, Ordering::Relaxed);
        Answering(self.clone())
    }
}

/// A request being answered (see [`Activity::answering`]).
pub(crate) struct Answering(Arc<Activity>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.answering.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// The connection's stream, as hyper reads and writes it.
pub(crate) struct Conn<S> {
    inner: S,
    activity: Arc<Activity>,
    /// A rejection being written in its JSON form: the bytes, how many are out, and how many
    /// of hyper's bytes they stand for.
    rewriting: Option<(Vec<u8>, usize, usize)>,
}

impl<S> Conn<S> {
    pub(crate) fn new(inner: S, activity: Arc<Activity>) -> Conn<S> {
        activity.touch();
        Conn {
            inner,
            activity,
            rewriting: None,
        }
    }
}

/// hyper's own answer to a request it could not parse: a head alone (status 400, 414 or 431,
/// no content type, no body), rewritten with the JSON error body. `None` for anything else
/// (every answer of the router has a content type).
fn rejection_as_json(buf: &[u8]) -> Option<Vec<u8>> {
    let status = buf.strip_prefix(b"HTTP/1.1 ")?.get(..3)?;
    let (status, message) = match status {
        b"400" => (
            StatusCode::BAD_REQUEST,
            "the request is not well-formed HTTP/1.1",
        ),
        b"414" => (StatusCode::URI_TOO_LONG, "the request's URI is too long"),
        b"431" => (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "the request's header fields are too large or too many",
        ),
        _ => return None,
    };
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    if end != buf.len() {
        return None;
    }
    let head = String::from_utf8_lossy(&buf[..end]);
    let lines: Vec<&str> = head.split("\r\n").collect();
    if lines
        .iter()
        .any(|l| l.to_ascii_lowercase().starts_with("content-type:"))
    {
        return None;
    }
    // hyper's date line is kept.
    let extra: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.to_ascii_lowercase().starts_with("date:"))
        .collect();
    Some(json_answer(status, ErrorCode::BadRequest, message, &extra))
}

impl<S: AsyncRead + Unpin> AsyncRead for Conn<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read_some();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Conn<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.rewriting.is_none()
            && let Some(json) = rejection_as_json(buf)
        {
            this.rewriting = Some((json, 0, buf.len()));
        }
        if let Some((bytes, out, stands_for)) = &mut this.rewriting {
            while *out < bytes.len() {
                match Pin::new(&mut this.inner).poll_write(cx, &bytes[*out..]) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                    }
                    Poll::Ready(Ok(n)) => {
                        *out += n;
                        this.activity.touch();
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            let stands_for = *stands_for;
            this.rewriting = None;
            return Poll::Ready(Ok(stands_for));
        }
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    // Vectored when the socket is: hyper then hands an answer's head and its body as separate
    // buffers instead of copying the body behind the head (a 33 KB signed score per request).
    // hyper's own rejections are a head alone, one buffer: those take `poll_write`'s way, where
    // `rejection_as_json` recognises them.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut filled = bufs.iter().filter(|b| !b.is_empty());
        let first = filled.next();
        if self.rewriting.is_some() || filled.next().is_none() {
            let alone = first.map_or(&[][..], |b| &b[..]);
            return self.poll_write(cx, alone);
        }
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bodiless_rejections_are_rewritten() {
        let head = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 13:00:00 GMT\r\n\r\n";
        let json = String::from_utf8(rejection_as_json(head).unwrap()).unwrap();
        assert!(json.starts_with("HTTP/1.1 431 "), "{json}");
        assert!(
            json.contains("\r\ndate: Tue, 01 Dec 2026 13:00:00 GMT\r\n"),
            "{json}"
        );
        let body = &json[json.find("\r\n\r\n").unwrap() + 4..];
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "bad_request");
        for untouched in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n{}",
            b"HTTP/1.1 404 Not Found\r\n\r\n",
        ] {
            assert!(rejection_as_json(untouched).is_none());
        }
    }

    /// A writer that keeps what it is given and writes vectors, as a socket does.
    #[derive(Default)]
    struct Wire(Vec<u8>);

    impl AsyncWrite for Wire {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let mut n = 0;
            for b in bufs {
                self.0.extend_from_slice(b);
                n += b.len();
            }
            Poll::Ready(Ok(n))
        }
        fn is_write_vectored(&self) -> bool {
            true
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Over a socket that writes vectors, an answer's head and body go out as given, in one
    /// call, and hyper's own rejection (a head alone) is still rewritten as JSON.
    #[tokio::test]
    async fn vectored_answers_pass_and_a_rejection_alone_is_still_rewritten() {
        use tokio::io::AsyncWriteExt;
        let mut conn = Conn::new(Wire::default(), Activity::new());
        assert!(conn.is_write_vectored());
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n";
        let n = conn
            .write_vectored(&[io::IoSlice::new(head), io::IoSlice::new(b"{}")])
            .await
            .unwrap();
        assert_eq!(n, head.len() + 2);
        assert_eq!(conn.inner.0, [&head[..], b"{}"].concat());
        conn.inner.0.clear();
        let rejection =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        let n = conn
            .write_vectored(&[io::IoSlice::new(rejection), io::IoSlice::new(b"")])
            .await
            .unwrap();
        assert_eq!(n, rejection.len(), "it stands for hyper's bytes");
        let wire = String::from_utf8(conn.inner.0.clone()).unwrap();
        assert!(wire.starts_with("HTTP/1.1 431 "), "{wire}");
        assert!(
            wire.contains("\"request_header_fields_too_large\"") || wire.contains("\"code\""),
            "{wire}"
        );
    }

    /// The head deadline runs from the accept, is gone while a request is answered and between
    /// requests (the idle timeout alone then), and runs again from the next head's first byte.
    #[test]
    fn a_heads_deadline_runs_from_its_first_byte_and_idle_keep_alive_has_the_idle_timeout() {
        let (idle, head) = (Duration::from_secs(30), Duration::from_secs(5));
        let a = Activity::new();
        let started = a.started.unwrap();
        assert_eq!(a.head_due_at(head), Some(started + head));
        assert_eq!(a.closes_at(idle, head), Some(started + head));
        a.read_some();
        assert_eq!(a.head_due_at(head), Some(started + head), "the same head");
        let answering = a.answering();
        assert_eq!(a.head_due_at(head), None);
        assert_eq!(
            a.closes_at(idle, head),
            None,
            "bounded by the request's own timeout"
        );
        a.read_some();
        assert_eq!(a.head_due_at(head), None, "a body's bytes begin no head");
        drop(answering);
        let idle_until = a.closes_at(idle, head).unwrap();
        assert!(idle_until >= started + idle, "{:?}", idle_until - started);
        std::thread::sleep(Duration::from_millis(20));
        a.read_some();
        let due = a.head_due_at(head).unwrap();
        assert!(due >= started + Duration::from_millis(20) + head);
        assert_eq!(a.closes_at(idle, head), Some(due));
    }

    #[test]
    fn a_client_holds_its_share_of_connections_and_gets_them_back() {
        let slots = ClientSlots::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = slots.take(a).unwrap();
        let _second = slots.take(a).unwrap();
        assert!(slots.take(a).is_none());
        assert!(slots.take(b).is_some());
        drop(first);
        assert!(slots.take(a).is_some());
    }
}
