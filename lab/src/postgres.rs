//! A throwaway PostgreSQL for the tests and the lab, started the way [`crate::chain`] starts anvil.
//!
//! `X402_PROBE_TEST_POSTGRES` (a `postgres://` URL of a server that lets its user create databases)
//! names a server to use instead; otherwise [`Postgres::start`] makes a cluster in a temporary
//! directory with the system's `initdb` (found on `PATH`, or under Debian's versioned
//! `/usr/lib/postgresql/<version>/bin`) and runs that version's `postgres` on a free loopback
//! port, as the `postgres` user when we are root (PostgreSQL refuses to run as root). Either way each
//! caller takes a database of its own ([`Postgres::fresh_database`]), so tests run in parallel.
//!
//! The server runs in the foreground as our child rather than under `pg_ctl start`, which would
//! detach it: a keeper thread spawns it with `PR_SET_PDEATHSIG(SIGKILL)` (as anvil), so it dies with
//! a test process killed without running destructors. [`Postgres`] dropped asks it for a fast
//! shutdown (SIGINT, what `pg_ctl stop -m fast` sends), waits for it, and removes the directory.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Names a running PostgreSQL server to use instead of a throwaway one.
pub const TEST_POSTGRES_ENV: &str = "X402_PROBE_TEST_POSTGRES";

/// How long the server has to say it accepts connections (about 0.1 s here; a margin for a
/// machine busy compiling).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a fast shutdown may take before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Lines of the server's log kept to explain a failed start.
const LOG_TAIL_LINES: usize = 30;

/// Ports tried when the one picked was taken meanwhile by someone else.
const PORT_ATTEMPTS: usize = 4;

/// The line the server logs once it accepts connections.
const READY_LINE: &str = "database system is ready to accept connections";

#[derive(Debug, thiserror::Error)]
pub enum PostgresError {
    #[error(
        "no PostgreSQL found: `initdb` is neither on PATH nor under /usr/lib/postgresql/*/bin \
         (install Debian's `postgresql` package, or set {TEST_POSTGRES_ENV} to a server's URL)"
    )]
    NotInstalled,
    #[error(
        "running as root, PostgreSQL must run as the `postgres` user, which does not exist \
         (Debian's `postgresql` package makes it)"
    )]
    NoPostgresUser,
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{command} failed ({status}): {output}")]
    Failed {
        command: String,
        status: String,
        output: String,
    },
    #[error("PostgreSQL did not start within {waited:?}: {log}")]
    NotReady { waited: Duration, log: String },
    #[error("PostgreSQL at {url}: {source}")]
    Client {
        url: String,
        #[source]
        source: tokio_postgres::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> PostgresError {
    let what = what.into();
    move |source| PostgresError::Io { what, source }
}

/// A PostgreSQL server for tests: a throwaway cluster we started (stopped and removed when
/// dropped), or the one `X402_PROBE_TEST_POSTGRES` names (its databases made here dropped).
#[derive(Debug)]
pub struct Postgres {
    /// `postgres://user@host:port/postgres`-like URL of the server's maintenance database.
    admin_url: String,
    server: Option<Server>,
    /// The databases made by [`Postgres::fresh_database`] (dropped with us on a server of the
    /// environment's; a throwaway cluster goes whole).
    made: Mutex<Vec<String>>,
}

/// The server process we started, and its directory.
#[derive(Debug)]
struct Server {
    dir: PathBuf,
    port: u16,
    pid: u32,
    startup: Duration,
    stop_signal: Option<mpsc::Sender<()>>,
    keeper: Option<JoinHandle<()>>,
}

/// Tells databases and directories of one process apart.
static NEXT: AtomicU64 = AtomicU64::new(1);

impl Postgres {
    /// The server of `X402_PROBE_TEST_POSTGRES` when it is set, else a throwaway cluster on a
    /// free loopback port (about a second and a half: `initdb` is most of it). Blocks.
    pub fn start() -> Result<Postgres, PostgresError> {
        match std::env::var(TEST_POSTGRES_ENV) {
            Ok(url) if !url.trim().is_empty() => Ok(Postgres {
                admin_url: url.trim().to_owned(),
                server: None,
                made: Mutex::new(Vec::new()),
            }),
            _ => Postgres::throwaway(),
        }
    }

    /// A throwaway cluster, whatever the environment says (no fsync: a test's data need not
    /// outlive it).
    pub fn throwaway() -> Result<Postgres, PostgresError> {
        Postgres::throwaway_with(false)
    }

    /// A throwaway cluster that syncs its commits to disk as a production server does (what a
    /// benchmark compares with SQLite's `synchronous = FULL`).
    pub fn throwaway_durable() -> Result<Postgres, PostgresError> {
        Postgres::throwaway_with(true)
    }

    /// A throwaway cluster that also listens on `reach.addresses` and lets clients of
    /// `reach.clients` in (vantages in network namespaces reach it at the lab's service address,
    /// each from its own address: `vantage_net.rs`). Its admin URL stays on loopback;
    /// [`url_at`] names another of its addresses.
    pub fn throwaway_reachable(reach: &Reach) -> Result<Postgres, PostgresError> {
        let server = Server::start(false, reach)?;
        Ok(Postgres {
            admin_url: format!("postgres://postgres@127.0.0.1:{}/postgres", server.port),
            server: Some(server),
            made: Mutex::new(Vec::new()),
        })
    }

    fn throwaway_with(durable: bool) -> Result<Postgres, PostgresError> {
        let server = Server::start(durable, &Reach::default())?;
        Ok(Postgres {
            admin_url: format!("postgres://postgres@127.0.0.1:{}/postgres", server.port),
            server: Some(server),
            made: Mutex::new(Vec::new()),
        })
    }

    /// The URL of the server's maintenance database (`postgres`).
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }

    /// Whether the server is a throwaway one we started (not the environment's).
    pub fn is_throwaway(&self) -> bool {
        self.server.is_some()
    }

    /// The throwaway server's process id (`None`: the environment's server).
    pub fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(|s| s.pid)
    }

    /// The throwaway cluster's directory (removed when dropped; `None`: the environment's server).
    pub fn dir(&self) -> Option<&Path> {
        self.server.as_ref().map(|s| s.dir.as_path())
    }

    /// From `initdb` to the server accepting connections (`None`: the environment's server).
    pub fn startup_time(&self) -> Option<Duration> {
        self.server.as_ref().map(|s| s.startup)
    }

    /// A new empty database, its URL returned. Blocks for the few milliseconds `CREATE
    /// DATABASE` takes; callable from async code too (the client runs on a thread of its own).
    pub fn fresh_database(&self, prefix: &str) -> Result<String, PostgresError> {
        let clean: String = prefix
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(24)
            .collect();
        let name = format!(
            "x402_{clean}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        self.admin(&format!("CREATE DATABASE {name}"))?;
        self.made
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(name.clone());
        Ok(database_url(&self.admin_url, &name))
    }

    /// Runs one statement on the maintenance database, on a thread of its own.
    fn admin(&self, statement: &str) -> Result<(), PostgresError> {
        let url = self.admin_url.clone();
        let statement = statement.to_owned();
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(io("starting a runtime for the database client"))?;
                    runtime.block_on(async {
                        let client_error = |source| PostgresError::Client {
                            url: url.clone(),
                            source,
                        };
                        let (client, connection) =
                            tokio_postgres::connect(&url, tokio_postgres::NoTls)
                                .await
                                .map_err(client_error)?;
                        let driver = tokio::spawn(connection);
                        let done = client.batch_execute(&statement).await.map_err(client_error);
                        drop(client);
                        let _ = driver.await;
                        done
                    })
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(server) = self.server.as_mut() {
            server.stop();
            return;
        }
        let made = std::mem::take(&mut *self.made.lock().unwrap_or_else(|p| p.into_inner()));
        for name in made {
            // Best effort from a destructor: a database left behind is only clutter.
            let _ = self.admin(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        }
    }
}

/// `url` with its database replaced by `name` (the path of a `postgres://` URL; a
/// `key=value` string gets `dbname`).
pub fn database_url(url: &str, name: &str) -> String {
    if !url.contains("://") {
        return format!("{url} dbname={name}");
    }
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{name}", &base[..authority_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// Where a throwaway cluster listens besides loopback, and whom it lets in from there.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    /// Addresses of this namespace to listen on too.
    pub addresses: Vec<std::net::Ipv4Addr>,
    /// Client networks let in without a password, as `pg_hba.conf` writes them (`10.100.0.0/16`).
    pub clients: Vec<(std::net::Ipv4Addr, u8)>,
}

/// `url` with its host replaced by `host` (a database's URL as another address of the server
/// names it).
pub fn url_at(url: &str, host: std::net::Ipv4Addr) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let authority_end = url[scheme_end..]
        .find(['/', '?'])
        .map_or(url.len(), |i| scheme_end + i);
    let authority = &url[scheme_end..authority_end];
    let user_end = authority.rfind('@').map_or(0, |i| i + 1);
    let port = authority[user_end..]
        .rfind(':')
        .map_or("", |i| &authority[user_end + i..]);
    format!(
        "{}{}{host}{port}{}",
        &url[..scheme_end],
        &authority[..user_end],
        &url[authority_end..]
    )
}

impl Server {
    fn start(durable: bool, reach: &Reach) -> Result<Server, PostgresError> {
        let started = Instant::now();
        let bin = find_bin_dir()?;
        let owner = server_user()?;
        remove_dead_clusters();
        let dir = std::env::temp_dir().join(format!(
            "{CLUSTER_DIR_PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).map_err(io(format!("making {}", dir.display())))?;
        // From here on the directory is ours to remove, whatever fails.
        let mut guard = DirGuard(Some(dir.clone()));
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io(format!("making {} private", dir.display())))?;
        }
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(io(format!("giving {} to the postgres user", dir.display())))?;
        }
        let data = dir.join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .env("LC_ALL", "C")
            .current_dir(&dir)
            .stdin(Stdio::null());
        as_user(&mut initdb, owner);
        let output = initdb
            .output()
            .map_err(io(format!("running {}", bin.join("initdb").display())))?;
        if !output.status.success() {
            return Err(PostgresError::Failed {
                command: "initdb".into(),
                status: output.status.to_string(),
                output: String::from_utf8_lossy(&[output.stdout, output.stderr].concat())
                    .into_owned(),
            });
        }
        if !reach.clients.is_empty() {
            // initdb's own lines let loopback in; the networks asked for come after them.
            let hba = data.join("pg_hba.conf");
            let mut lines =
                std::fs::read_to_string(&hba).map_err(io(format!("reading {}", hba.display())))?;
            for (network, bits) in &reach.clients {
                lines.push_str(&format!("host all all {network}/{bits} trust\n"));
            }
            std::fs::write(&hba, lines).map_err(io(format!("writing {}", hba.display())))?;
        }
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port().map_err(io("finding a free loopback port"))?;
            match launch(&bin, &data, &dir, port, owner, (durable, reach), started) {
                Ok(mut server) => {
                    server.dir = guard.0.take().expect("the directory is kept");
                    return Ok(server);
                }
                // Taken between our probe and the server's bind: another port.
                Err(Launch::PortTaken(log)) => {
                    last = Some(PostgresError::NotReady {
                        waited: started.elapsed(),
                        log,
                    })
                }
                Err(Launch::Failed(e)) => return Err(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    fn stop(&mut self) {
        drop(self.stop_signal.take());
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A throwaway cluster's directory in the temporary directory: this, our pid, a number.
const CLUSTER_DIR_PREFIX: &str = "x402-postgres-";

/// Removes the clusters of test processes that died without dropping theirs (killed: their
/// server died with them, its directory stayed).
fn remove_dead_clusters() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(CLUSTER_DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Removes a directory unless it was taken over.
struct DirGuard(Option<PathBuf>);

impl Drop for DirGuard {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

enum Launch {
    PortTaken(String),
    Failed(PostgresError),
}

/// What the keeper and the log reader report while the server starts.
enum Startup {
    Spawned(u32),
    SpawnFailed(std::io::Error),
    Ready,
    /// The log closed: the server exited.
    Exited,
}

fn launch(
    bin: &Path,
    data: &Path,
    dir: &Path,
    port: u16,
    owner: Option<(u32, u32)>,
    (durable, reach): (bool, &Reach),
    started: Instant,
) -> Result<Server, Launch> {
    let listen: Vec<String> = std::iter::once("127.0.0.1".to_string())
        .chain(reach.addresses.iter().map(|a| a.to_string()))
        .collect();
    let mut command = Command::new(bin.join("postgres"));
    command
        .arg("-D")
        .arg(data)
        .arg("-p")
        .arg(port.to_string())
        // Loopback (and the addresses asked for), no Unix socket.
        .arg("-c")
        .arg(format!("listen_addresses={}", listen.join(",")))
        .args(["-c", "unix_socket_directories="])
        .args(["-c", "max_connections=200"]);
    if !durable {
        // A test database needs no durability.
        command.args(["-c", "fsync=off", "-c", "synchronous_commit=off"]);
        command.args(["-c", "full_page_writes=off"]);
    }
    command
        .env("LC_ALL", "C")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    as_user(&mut command, owner);
    die_with_spawning_thread(&mut command);
    let (events, startup) = mpsc::channel();
    let (stop_signal, stop) = mpsc::channel();
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let keeper = {
        let tail = Arc::clone(&tail);
        std::thread::Builder::new()
            .name("postgres-keeper".into())
            .spawn(move || keep(command, events, stop, tail))
            .map_err(|e| Launch::Failed(io("starting the postgres keeper")(e)))?
    };
    let mut server = Server {
        dir: PathBuf::new(),
        port,
        pid: 0,
        startup: Duration::ZERO,
        stop_signal: Some(stop_signal),
        keeper: Some(keeper),
    };
    let deadline = started + READY_TIMEOUT;
    let log = || {
        tail.lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match startup.recv_timeout(left) {
            Ok(Startup::Spawned(pid)) => server.pid = pid,
            Ok(Startup::SpawnFailed(e)) => {
                return Err(Launch::Failed(io(format!(
                    "running {}",
                    bin.join("postgres").display()
                ))(e)));
            }
            Ok(Startup::Ready) => break,
            Ok(Startup::Exited) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                server.stop();
                let log = log();
                return Err(
                    if log.contains("could not bind") || log.contains("in use") {
                        Launch::PortTaken(log)
                    } else {
                        Launch::Failed(PostgresError::NotReady {
                            waited: started.elapsed(),
                            log,
                        })
                    },
                );
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                server.stop();
                return Err(Launch::Failed(PostgresError::NotReady {
                    waited: started.elapsed(),
                    log: log(),
                }));
            }
        }
    }
    server.startup = started.elapsed();
    Ok(server)
}

/// The keeper thread: spawns the server, reads its log (to the end: a full pipe would stop it),
/// then on the stop signal asks it for a fast shutdown and reaps it (killed if it takes too long).
fn keep(
    mut command: Command,
    events: mpsc::Sender<Startup>,
    stop: mpsc::Receiver<()>,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    let mut child: Child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = events.send(Startup::SpawnFailed(e));
            return;
        }
    };
    let _ = events.send(Startup::Spawned(child.id()));
    let reader = child.stderr.take().map(|stderr| {
        let events = events.clone();
        std::thread::spawn(move || {
            let mut ready = false;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if !ready && line.contains(READY_LINE) {
                    ready = true;
                    let _ = events.send(Startup::Ready);
                }
                let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
                if tail.len() == LOG_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
            let _ = events.send(Startup::Exited);
        })
    });
    // Until the `Server` is dropped (or says stop).
    let _ = stop.recv();
    // SAFETY: kill(2) on our own child's pid, which is not reaped yet (we hold the Child).
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let asked = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if asked.elapsed() < STOP_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
        }
    }
    if let Some(reader) = reader {
        let _ = reader.join();
    }
}

/// The directory of the system's PostgreSQL programs: `initdb`'s on PATH, else the newest of
/// Debian's `/usr/lib/postgresql/<version>/bin` (Debian keeps `initdb` off PATH).
pub fn find_bin_dir() -> Result<PathBuf, PostgresError> {
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("initdb"))
            .collect::<Vec<_>>()
    });
    for candidate in on_path {
        if candidate.is_file() {
            // `/usr/local/bin/initdb` may be a link into the versioned directory, where
            // `postgres` is sure to be beside it.
            let real = std::fs::canonicalize(&candidate).unwrap_or(candidate);
            if let Some(dir) = real.parent()
                && dir.join("postgres").is_file()
            {
                return Ok(dir.to_path_buf());
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file())
                .then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or(PostgresError::NotInstalled)
}

/// The uid and gid to run the server as: the `postgres` user's when we are root, else ours
/// (`None`).
fn server_user() -> Result<Option<(u32, u32)>, PostgresError> {
    // SAFETY: getuid cannot fail; getpwnam returns a pointer into static storage or null, read
    // at once (no other thread of ours calls it meanwhile in a way that matters for two ints).
    unsafe {
        if libc::getuid() != 0 {
            return Ok(None);
        }
        let entry = libc::getpwnam(c"postgres".as_ptr());
        if entry.is_null() {
            return Err(PostgresError::NoPostgresUser);
        }
        Ok(Some(((*entry).pw_uid, (*entry).pw_gid)))
    }
}

fn as_user(command: &mut Command, owner: Option<(u32, u32)>) {
    use std::os::unix::process::CommandExt;
    if let Some((uid, gid)) = owner {
        command.uid(uid).gid(gid);
    }
}

/// A loopback port free at this moment (the server binds it a moment later; a port taken
/// meanwhile is retried).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The server receives SIGKILL when the keeper thread exits (Linux), as anvil does. Set after
/// the uid change (std runs it after `setuid`), which would clear it.
#[cfg(target_os = "linux")]
fn die_with_spawning_thread(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: runs in the forked child before exec; only async-signal-safe calls.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::other(
                    "the parent exited while postgres was starting",
                ));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_spawning_thread(_command: &mut Command) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_url_names_the_new_database() {
        assert_eq!(
            database_url("postgres://u:p@127.0.0.1:5432/postgres", "x1"),
            "postgres://u:p@127.0.0.1:5432/x1"
        );
        assert_eq!(
            database_url("postgresql://h:1/db?sslmode=disable", "x2"),
            "postgresql://h:1/x2?sslmode=disable"
        );
        assert_eq!(database_url("postgres://h", "x3"), "postgres://h/x3");
        assert_eq!(
            database_url("host=h user=u", "x4"),
            "host=h user=u dbname=x4"
        );
    }

    #[test]
    fn a_url_at_another_address_keeps_the_rest() {
        let at = std::net::Ipv4Addr::new(10, 100, 0, 1);
        assert_eq!(
            url_at("postgres://postgres@127.0.0.1:5432/x1", at),
            "postgres://postgres@10.100.0.1:5432/x1"
        );
        assert_eq!(
            url_at("postgres://u:p@h:1/db?sslmode=disable", at),
            "postgres://u:p@10.100.0.1:1/db?sslmode=disable"
        );
        assert_eq!(url_at("postgres://h/db", at), "postgres://10.100.0.1/db");
    }
}
