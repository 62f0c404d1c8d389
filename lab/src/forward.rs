//! A TCP forwarder: listens on one address and relays each connection, byte for byte, to a
//! fixed target. Vantages in network namespaces reach the lab only on the service address
//! (`vantage_net`), while anvil listens on the host's loopback; a forwarder on the service address
//! gives them the chain without moving anvil. Plain threads: a connection is two copies, one per
//! direction, each ending when its side closes.

use std::io;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// A running forwarder. Dropping it stops accepting (connections already relayed run to their end).
pub struct TcpForward {
    local: SocketAddr,
    stop: Arc<AtomicBool>,
    accepting: Option<JoinHandle<()>>,
}

impl TcpForward {
    /// Listens on `bind` (a free port) and relays every connection to `to`.
    pub fn start(bind: IpAddr, to: SocketAddr) -> io::Result<TcpForward> {
        let listener = TcpListener::bind(SocketAddr::new(bind, 0))?;
        let local = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let accepting = std::thread::Builder::new()
            .name("lab-forward".into())
            .spawn(move || {
                for incoming in listener.incoming() {
                    if stopping.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = incoming else { continue };
                    // A target that refuses is a closed connection for the client, as if the
                    // target itself had refused it.
                    let Ok(server) = TcpStream::connect(to) else {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    relay(client, server);
                }
            })?;
        Ok(TcpForward {
            local,
            stop,
            accepting: Some(accepting),
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// `http://` and the address it listens on (for an RPC URL).
    pub fn http_url(&self) -> String {
        format!("http://{}", self.local)
    }
}

impl Drop for TcpForward {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.local);
        if let Some(t) = self.accepting.take() {
            let _ = t.join();
        }
    }
}

/// Copies each direction on a thread of its own; each side's write half is shut down when the
/// other side's read ends, so that both ends see the close.
fn relay(client: TcpStream, server: TcpStream) {
    let pairs = [
        (client.try_clone(), server.try_clone()),
        (server.try_clone(), client.try_clone()),
    ];
    for (from, to) in pairs {
        let (Ok(mut from), Ok(mut to)) = (from, to) else {
            return;
        };
        let _ = std::thread::Builder::new()
            .name("lab-forward-copy".into())
            .spawn(move || {
                let _ = io::copy(&mut from, &mut to);
                let _ = to.shutdown(Shutdown::Write);
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn relays_both_ways_and_closes_when_either_side_does() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = echo.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = echo.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            s.write_all(&got.repeat(2)).unwrap();
        });
        let forward = TcpForward::start("127.0.0.1".parse().unwrap(), target).unwrap();
        let mut c = TcpStream::connect(forward.local_addr()).unwrap();
        c.write_all(b"ping").unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).unwrap();
        assert_eq!(back, b"pingping");
        server.join().unwrap();
        let at = forward.local_addr();
        drop(forward);
        // Stopped: nothing listens there any more.
        assert!(TcpStream::connect(at).is_err());
    }
}
