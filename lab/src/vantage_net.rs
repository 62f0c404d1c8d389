//! Several vantages on one machine: each a network namespace of its own, joined to this one by a
//! veth pair, so that what a vantage sends leaves from its own address (`10.X.N.2`) and a lab
//! server tells vantages apart by the peer address it sees.
//!
//! The lab's servers listen on one service address (`10.X.0.1`, on this namespace's loopback
//! interface, labelled with the net's name): every vantage reaches it through its own link (its default route), so cutting one
//! vantage's link ([`VantageNet::cut`], `ip link set ... down` on this side) cuts that vantage off
//! from everything the lab serves while the others go on. Nothing here routes beyond the machine:
//! the namespaces have no route but their link to this namespace, and forwarding is not enabled.
//!
//! Made with `ip` (iproute2) and `setns(2)`, which need root (CAP_NET_ADMIN and CAP_SYS_ADMIN).
//! Dropped, a [`VantageNet`] deletes its namespaces (their veth pairs go with them) and its service
//! address. A process killed before that leaves them behind: the next [`VantageNet::create`]
//! deletes those whose process is gone (their names and the address's label carry its pid).

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Names start with this letter, then the creating process's pid (6 hex digits) and a counter
/// digit: `x0012ab3`, its vantages' namespaces `x0012ab3-0`, `-1`, ... (an interface name has at
/// most 15 bytes).
const NAME_LETTER: char = 'x';

/// The second octet of the address blocks tried (`10.X.0.0/16`, one per [`VantageNet`]).
const BLOCKS: std::ops::RangeInclusive<u8> = 100..=227;

/// At most this many vantages in one net (the third octet names a vantage's /30).
pub const MAX_VANTAGES: usize = 250;

static NETS_MADE: AtomicU32 = AtomicU32::new(0);

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("`ip {args}` failed ({status}): {stderr} (network namespaces need root and iproute2)")]
    Ip {
        args: String,
        status: String,
        stderr: String,
    },
    #[error("running `ip`: {0} (install iproute2)")]
    Spawn(std::io::Error),
    #[error("entering the namespace {name}: {source}")]
    Enter {
        name: String,
        source: std::io::Error,
    },
    #[error("no free 10.X.0.0/16 block for the vantages' addresses")]
    NoBlock,
    #[error("{0} vantages asked for; at most {MAX_VANTAGES}")]
    TooMany(usize),
}

/// One vantage's place: its namespace, the two ends of its link and their addresses.
#[derive(Debug, Clone)]
pub struct Vantage {
    /// The namespace's name (`ip netns exec NAME ...` runs a command there).
    pub namespace: String,
    /// This namespace's end of the link (what [`VantageNet::cut`] sets down).
    pub host_interface: String,
    /// The address a vantage's traffic leaves from: what a lab server sees as the peer.
    pub address: Ipv4Addr,
    /// This namespace's address on the link (the vantage's default route).
    pub gateway: Ipv4Addr,
}

/// Vantages in namespaces of their own, and the service address they all reach the lab at.
#[derive(Debug)]
pub struct VantageNet {
    prefix: String,
    service: Ipv4Addr,
    /// The service address is on the loopback interface (to be deleted when dropped).
    service_added: bool,
    vantages: Vec<Vantage>,
}

impl VantageNet {
    /// Makes `n` vantages (after deleting what a killed process left behind).
    pub fn create(n: usize) -> Result<VantageNet, NetError> {
        if n > MAX_VANTAGES {
            return Err(NetError::TooMany(n));
        }
        remove_orphans();
        let made = NETS_MADE.fetch_add(1, Ordering::Relaxed);
        let prefix = format!(
            "{NAME_LETTER}{:06x}{:x}",
            std::process::id() & 0xff_ffff,
            made % 16
        );
        let block = free_block(made)?;
        let service = Ipv4Addr::new(10, block, 0, 1);
        let mut net = VantageNet {
            prefix: prefix.clone(),
            service,
            service_added: false,
            vantages: Vec::with_capacity(n),
        };
        // From here on a failure drops `net`, which deletes whatever was made.
        ip(&[
            "addr",
            "add",
            &format!("{service}/32"),
            "dev",
            "lo",
            "label",
            &net.service_label(),
        ])?;
        net.service_added = true;
        for i in 0..n {
            let third = u8::try_from(i + 1).map_err(|_| NetError::TooMany(n))?;
            let vantage = Vantage {
                namespace: format!("{prefix}-{i}"),
                host_interface: format!("{prefix}h{i}"),
                address: Ipv4Addr::new(10, block, third, 2),
                gateway: Ipv4Addr::new(10, block, third, 1),
            };
            let inner = format!("{prefix}n{i}");
            ip(&["netns", "add", &vantage.namespace])?;
            net.vantages.push(vantage.clone());
            ip(&[
                "link",
                "add",
                &vantage.host_interface,
                "type",
                "veth",
                "peer",
                "name",
                &inner,
                "netns",
                &vantage.namespace,
            ])?;
            ip(&[
                "addr",
                "add",
                &format!("{}/30", vantage.gateway),
                "dev",
                &vantage.host_interface,
            ])?;
            ip(&["link", "set", &vantage.host_interface, "up"])?;
            let ns = vantage.namespace.as_str();
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/30", vantage.address),
                "dev",
                &inner,
            ])?;
            ip(&["-n", ns, "link", "set", &inner, "up"])?;
            ip(&[
                "-n",
                ns,
                "route",
                "add",
                "default",
                "via",
                &vantage.gateway.to_string(),
            ])?;
        }
        Ok(net)
    }

    /// The address the lab's servers listen on, reached by every vantage over its own link.
    pub fn service_address(&self) -> Ipv4Addr {
        self.service
    }

    pub fn vantages(&self) -> &[Vantage] {
        &self.vantages
    }

    /// What a throwaway PostgreSQL needs to serve the vantages: listen on the service address
    /// and let in the net's block (`10.X.0.0/16`), so each vantage connects from its own address.
    pub fn postgres_reach(&self) -> crate::postgres::Reach {
        let [a, b, ..] = self.service.octets();
        crate::postgres::Reach {
            addresses: vec![self.service],
            clients: vec![(Ipv4Addr::new(a, b, 0, 0), 16)],
        }
    }

    /// Cuts vantage `i` off: this side of its link set down.
    pub fn cut(&self, i: usize) -> Result<(), NetError> {
        ip(&["link", "set", &self.vantages[i].host_interface, "down"])
    }

    /// Joins vantage `i` again after [`VantageNet::cut`].
    pub fn restore(&self, i: usize) -> Result<(), NetError> {
        ip(&["link", "set", &self.vantages[i].host_interface, "up"])
    }

    /// A command that runs in vantage `i`'s namespace (entered between fork and exec, so the
    /// child is ours directly: a parent-death signal or a kill reaches it, not an `ip` wrapper).
    pub fn command(
        &self,
        i: usize,
        program: impl AsRef<std::ffi::OsStr>,
    ) -> std::io::Result<Command> {
        let file = namespace_file(&self.vantages[i].namespace)?;
        let mut command = Command::new(program);
        // SAFETY: between fork and exec only the async-signal-safe `setns` system call runs; the
        // file is opened before the fork and moved into the closure, which keeps it open.
        unsafe {
            command.pre_exec(move || {
                if libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(command)
    }

    /// Runs `work` on a thread of its own inside vantage `i`'s namespace (the sockets it opens,
    /// and those of any thread it starts, are the vantage's) and returns its result.
    pub fn run_in<T: Send + 'static>(
        &self,
        i: usize,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, NetError> {
        let name = self.vantages[i].namespace.clone();
        let enter = |source| NetError::Enter {
            name: name.clone(),
            source,
        };
        let file = namespace_file(&name).map_err(enter)?;
        let thread = std::thread::Builder::new()
            .name(format!("vantage {i}"))
            .spawn(move || {
                // SAFETY: a plain system call on a descriptor this thread owns; it changes only
                // this thread's network namespace.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(work())
            })
            .map_err(enter)?;
        match thread.join() {
            Ok(result) => result.map_err(enter),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// The service address's label on the loopback interface (`lo:` and the net's name).
    fn service_label(&self) -> String {
        format!("lo:{}s", self.prefix)
    }
}

impl Drop for VantageNet {
    fn drop(&mut self) {
        for vantage in &self.vantages {
            // The namespace's end of the veth pair goes with it, and this end with that.
            let _ = ip(&["netns", "del", &vantage.namespace]);
        }
        if self.service_added {
            let _ = ip(&["addr", "del", &format!("{}/32", self.service), "dev", "lo"]);
        }
    }
}

fn namespace_file(name: &str) -> std::io::Result<std::fs::File> {
    std::fs::File::open(format!("/run/netns/{name}"))
}

/// Runs `ip ARGS`; its error output becomes the error.
fn ip(args: &[&str]) -> Result<(), NetError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(NetError::Spawn)?;
    if out.status.success() {
        return Ok(());
    }
    Err(NetError::Ip {
        args: args.join(" "),
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// A `10.X.0.0/16` block no address of this namespace is in, tried from one the counter picks.
fn free_block(made: u32) -> Result<u8, NetError> {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .map_err(NetError::Spawn)?;
    let shown = String::from_utf8_lossy(&out.stdout);
    let width = u32::from(BLOCKS.end() - BLOCKS.start()) + 1;
    let start = (std::process::id().wrapping_mul(7).wrapping_add(made)) % width;
    (0..width)
        .map(|k| BLOCKS.start() + ((start + k) % width) as u8)
        .find(|block| !shown.contains(&format!(" 10.{block}.")))
        .ok_or(NetError::NoBlock)
}

/// Deletes the namespaces and service addresses a process of ours left behind when it was killed
/// (their names and labels carry its pid; that pid no longer runs).
fn remove_orphans() {
    let gone = |name: &str| -> bool {
        let Some(rest) = name.strip_prefix(NAME_LETTER) else {
            return false;
        };
        let Some(pid) = rest.get(..6).and_then(|h| u32::from_str_radix(h, 16).ok()) else {
            return false;
        };
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    };
    if let Ok(entries) = std::fs::read_dir("/run/netns") {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_ours(&name, '-') && gone(&name) {
                let _ = ip(&["netns", "del", &name]);
            }
        }
    }
    // `1: lo    inet 10.X.0.1/32 scope global lo:x0012ab3s\ ...`
    let Ok(out) = Command::new("ip")
        .args(["-o", "-4", "addr", "show", "dev", "lo"])
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(address), Some(label)) = (
            words
                .iter()
                .position(|w| *w == "inet")
                .and_then(|i| words.get(i + 1)),
            words.iter().find_map(|w| w.strip_prefix("lo:")),
        ) else {
            continue;
        };
        let label = label.trim_end_matches('\\');
        if is_ours(label, 's') && gone(label) {
            let _ = ip(&["addr", "del", address, "dev", "lo"]);
        }
    }
}

/// Whether `name` has the form of one of ours: the letter, 7 hex digits, then `after`.
fn is_ours(name: &str, after: char) -> bool {
    let bytes = name.as_bytes();
    bytes.len() > 8
        && bytes[0] == NAME_LETTER as u8
        && bytes[1..8].iter().all(u8::is_ascii_hexdigit)
        && bytes[8] == after as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_of_our_form_are_taken_for_orphans() {
        assert!(is_ours("x0012ab3-0", '-'));
        assert!(is_ours("x0012ab3s", 's'));
        assert!(!is_ours("x0012ab3h0", 's'));
        assert!(!is_ours("xenial-0", '-'));
        assert!(!is_ours("eth0", 's'));
        assert!(!is_ours("x0012ab3", '-'));
        assert!(!is_ours("xé012ab3-0", '-'));
    }
}
