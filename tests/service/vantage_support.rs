//! What the tests with several `x402-probe daemon` vantages share: the vantages' network (in
//! namespaces when root and `ip` can make them, on loopback otherwise), a throwaway PostgreSQL
//! they reach, and their processes, killed when a test ends however it ends.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use x402_lab::postgres::{Postgres, url_at};
use x402_lab::vantage_net::VantageNet;

/// The network and the database of `n` vantages.
pub struct VantageSetup {
    /// Dropped before `net`: the database listens on the net's service address.
    pub _pg: Postgres,
    /// `None` on loopback (no root or no `ip`): what needs namespaces is skipped.
    pub net: Option<VantageNet>,
    /// The database, as this process reaches it.
    pub local_url: String,
    /// The database, as the vantages reach it (the service address in namespaces).
    pub vantage_url: String,
}

/// `n` vantages in namespaces (or on loopback, printing that `skipped` is skipped and why), a
/// throwaway PostgreSQL they reach and a fresh database `database` in it.
pub fn vantage_setup(n: usize, database: &str, skipped: &str) -> VantageSetup {
    let net = match VantageNet::create(n) {
        Ok(net) => Some(net),
        Err(e) => {
            eprintln!("SKIPPED: {skipped} (vantages stay on loopback): {e}");
            None
        }
    };
    let pg = match &net {
        Some(net) => Postgres::throwaway_reachable(&net.postgres_reach()),
        None => Postgres::start(),
    }
    .expect("PostgreSQL starts");
    let local_url = pg.fresh_database(database).unwrap();
    let vantage_url = match &net {
        Some(net) => url_at(&local_url, net.service_address()),
        None => local_url.clone(),
    };
    VantageSetup {
        _pg: pg,
        net,
        local_url,
        vantage_url,
    }
}

/// Starts `x402-probe daemon --config CONFIG` as vantage `i` (in its namespace when there is
/// one), its log (RUST_LOG=info) written to `log`.
pub fn spawn_daemon(net: &Option<VantageNet>, i: usize, config: &Path, log: &Path) -> Child {
    let bin = env!("CARGO_BIN_EXE_x402-probe");
    let mut command = match net {
        Some(net) => net.command(i, bin).unwrap(),
        None => Command::new(bin),
    };
    command
        .args(["daemon", "--config"])
        .arg(config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("the daemon starts")
}

/// The vantages' processes, killed when the test ends however it ends.
pub struct Daemons(pub Vec<Option<Child>>);

impl Daemons {
    /// SIGKILL, and the exit awaited.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.0[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for i in 0..self.0.len() {
            self.kill(i);
        }
    }
}
