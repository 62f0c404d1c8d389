//! The lab's chain: a real anvil node (from the Foundry npm package), one per test, on its own port.
//!
//! Lifetime: a dedicated keeper thread spawns anvil and lives exactly as long as the [`Anvil`] value.
//! On Linux the child is spawned with `PR_SET_PDEATHSIG(SIGKILL)`, so it dies with the test process even
//! when that process is killed without running destructors. PDEATHSIG fires when the *thread* that forked
//! the child exits, not the process; spawning from the keeper thread (rather than a tokio worker, which
//! can retire at any time) makes that moment the same as the one we want. `stop()` and `Drop` kill the
//! child by its handle and reap it, so its PID is gone when they return.
//!
//! Port: anvil listens on port 0 (the kernel picks a free port) and prints the port it got, so parallel
//! tests never race for a port.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use alloy::primitives::{Address, B256, address, b256};
use alloy::signers::local::PrivateKeySigner;
use tokio::sync::mpsc as async_mpsc;

use crate::rpc::{Rpc, RpcError};

/// Environment variable naming the anvil binary to use instead of the npm one.
pub const ANVIL_ENV: &str = "X402_LAB_ANVIL";

/// Environment variable that, when set to anything but "" or "0", echoes anvil's output to stderr.
pub const ANVIL_LOG_ENV: &str = "X402_LAB_ANVIL_LOG";

/// Anvil's default chain id.
pub const ANVIL_CHAIN_ID: u64 = 31337;

/// How long `start` waits for anvil to listen and answer `eth_chainId`. It normally takes ~100 ms; the
/// margin is for a machine busy compiling.
const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(15);

/// Lines of anvil's stderr kept to explain a failed start.
const STDERR_TAIL_LINES: usize = 20;

/// One of anvil's dev accounts: funded with 10000 ether and unlocked, so `eth_sendTransaction` works
/// from it without a key. The keys are public (the well-known test mnemonic): never use them for value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevAccount {
    pub address: Address,
    pub private_key: B256,
}

impl DevAccount {
    /// A local signer for this account, e.g. to sign EIP-3009 authorizations as a payer.
    pub fn signer(&self) -> PrivateKeySigner {
        // A dev key is a valid secp256k1 scalar (checked by a test), so this cannot fail.
        PrivateKeySigner::from_bytes(&self.private_key)
            .unwrap_or_else(|e| unreachable!("dev account key rejected: {e}"))
    }
}

/// Anvil's ten default accounts (mnemonic "test test test test test test test test test test test junk",
/// path m/44'/60'/0'/0/i). A test checks them against the node's `eth_accounts`.
pub const DEV_ACCOUNTS: [DevAccount; 10] = [
    DevAccount {
        address: address!("f39Fd6e51aad88F6F4ce6aB8827279cffFb92266"),
        private_key: b256!("ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"),
    },
    DevAccount {
        address: address!("70997970C51812dc3A010C7d01b50e0d17dc79C8"),
        private_key: b256!("59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"),
    },
    DevAccount {
        address: address!("3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"),
        private_key: b256!("5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a"),
    },
    DevAccount {
        address: address!("90F79bf6EB2c4f870365E785982E1f101E93b906"),
        private_key: b256!("7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6"),
    },
    DevAccount {
        address: address!("15d34AAf54267DB7D7c367839AAf71A00a2C6A65"),
        private_key: b256!("47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a"),
    },
    DevAccount {
        address: address!("9965507D1a55bcC2695C58ba16FB37d819B0A4dc"),
        private_key: b256!("8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba"),
    },
    DevAccount {
        address: address!("976EA74026E726554dB657fA54763abd0C3a0aa9"),
        private_key: b256!("92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e"),
    },
    DevAccount {
        address: address!("14dC79964da2C08b23698B3D3cc7Ca32193d9955"),
        private_key: b256!("4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356"),
    },
    DevAccount {
        address: address!("23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f"),
        private_key: b256!("dbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97"),
    },
    DevAccount {
        address: address!("a0Ee7A142d267C1f36714E4a8F75612F20a79720"),
        private_key: b256!("2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6"),
    },
];

/// Why the chain could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error(
        "the anvil binary was not found (looked for {}); run `npm ci` at the repository root, or set {ANVIL_ENV} to an anvil binary",
        searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    AnvilNotFound { searched: Vec<PathBuf> },
    #[error("{ANVIL_ENV} is set to {}, which is not a file", .path.display())]
    AnvilEnvNotAFile { path: PathBuf },
    #[error(
        "there is no npm anvil package for this platform ({os}/{arch}); set {ANVIL_ENV} to an anvil binary"
    )]
    UnsupportedPlatform {
        os: &'static str,
        arch: &'static str,
    },
    #[error("starting the thread that owns anvil failed: {0}")]
    Thread(#[source] std::io::Error),
    #[error("starting anvil ({}) failed: {source}; run `npm ci` at the repository root if it is missing", .binary.display())]
    Spawn {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("anvil ({}) exited before it was listening; its stderr: {stderr}", .binary.display())]
    ExitedEarly { binary: PathBuf, stderr: String },
    #[error(
        "anvil ({}) was not ready within {waited:?}: {last_error}; if the binary is missing or broken, run `npm ci` at the repository root",
        .binary.display()
    )]
    NotReady {
        binary: PathBuf,
        waited: Duration,
        last_error: String,
    },
    #[error("anvil reports chain id {actual}, expected {expected}")]
    WrongChainId { expected: u64, actual: u64 },
    #[error(transparent)]
    Rpc(#[from] RpcError),
}

/// How to start anvil. `AnvilOptions::default()` is what `Anvil::start` uses.
#[derive(Debug, Clone)]
pub struct AnvilOptions {
    /// `None` keeps anvil's default, 31337.
    pub chain_id: Option<u64>,
    /// Echo anvil's stdout and stderr to our stderr (default: from `X402_LAB_ANVIL_LOG`).
    pub echo_output: bool,
    /// How long to wait for anvil to answer.
    pub ready_timeout: Duration,
    /// Further command-line arguments, e.g. `--block-time 1`.
    pub extra_args: Vec<OsString>,
}

impl Default for AnvilOptions {
    fn default() -> Self {
        let echo_output = std::env::var(ANVIL_LOG_ENV).is_ok_and(|v| !v.is_empty() && v != "0");
        AnvilOptions {
            chain_id: None,
            echo_output,
            ready_timeout: DEFAULT_READY_TIMEOUT,
            extra_args: Vec::new(),
        }
    }
}

/// A running anvil node. Dropping it (or calling [`Anvil::stop`]) kills and reaps the process.
#[derive(Debug)]
pub struct Anvil {
    binary: PathBuf,
    pid: u32,
    port: u16,
    rpc_url: String,
    chain_id: u64,
    startup: Duration,
    /// Dropping or sending on this tells the keeper thread to kill and reap anvil.
    stop_signal: Option<mpsc::Sender<()>>,
    keeper: Option<JoinHandle<()>>,
}

/// What the keeper and output threads report while anvil starts.
enum StartupEvent {
    Spawned {
        pid: u32,
    },
    SpawnFailed(std::io::Error),
    Listening {
        port: u16,
    },
    /// Anvil's stdout closed: it exited.
    OutputClosed,
}

impl Anvil {
    /// Starts anvil with the default options and waits until it answers `eth_chainId`.
    pub async fn start() -> Result<Anvil, ChainError> {
        Anvil::start_with(AnvilOptions::default()).await
    }

    /// Starts anvil with `options` and waits until it answers `eth_chainId`.
    pub async fn start_with(options: AnvilOptions) -> Result<Anvil, ChainError> {
        let started = Instant::now();
        let binary = find_anvil_binary()?;
        let deadline = started + options.ready_timeout;

        let (events_tx, mut events_rx) = async_mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = mpsc::channel();
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let command = anvil_command(&binary, &options);
        let keeper = {
            let stderr_tail = Arc::clone(&stderr_tail);
            let echo = options.echo_output;
            std::thread::Builder::new()
                .name("anvil-keeper".to_owned())
                .spawn(move || keep_anvil(command, events_tx, stop_rx, stderr_tail, echo))
                .map_err(ChainError::Thread)?
        };

        // From here on, every early return drops `anvil`, which stops the keeper and reaps the child.
        let mut anvil = Anvil {
            binary,
            pid: 0,
            port: 0,
            rpc_url: String::new(),
            chain_id: 0,
            startup: Duration::ZERO,
            stop_signal: Some(stop_tx),
            keeper: Some(keeper),
        };

        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let event = tokio::time::timeout(remaining, events_rx.recv()).await;
            match event {
                Ok(Some(StartupEvent::Spawned { pid })) => anvil.pid = pid,
                Ok(Some(StartupEvent::SpawnFailed(source))) => {
                    return Err(ChainError::Spawn {
                        binary: anvil.binary.clone(),
                        source,
                    });
                }
                Ok(Some(StartupEvent::Listening { port })) => {
                    anvil.port = port;
                    break;
                }
                Ok(Some(StartupEvent::OutputClosed)) | Ok(None) => {
                    // Give the stderr reader a moment to collect the last words.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    return Err(ChainError::ExitedEarly {
                        binary: anvil.binary.clone(),
                        stderr: tail_text(&stderr_tail),
                    });
                }
                Err(_elapsed) => {
                    return Err(ChainError::NotReady {
                        binary: anvil.binary.clone(),
                        waited: started.elapsed(),
                        last_error: "it never printed the port it listens on".to_owned(),
                    });
                }
            }
        }

        anvil.rpc_url = format!("http://127.0.0.1:{}", anvil.port);
        let rpc = Rpc::new(&anvil.rpc_url)?;
        anvil.chain_id = wait_until_answering(&rpc, &anvil.binary, started, deadline).await?;
        let expected = options.chain_id.unwrap_or(ANVIL_CHAIN_ID);
        if anvil.chain_id != expected {
            return Err(ChainError::WrongChainId {
                expected,
                actual: anvil.chain_id,
            });
        }
        anvil.startup = started.elapsed();
        Ok(anvil)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn rpc_url(&self) -> &str {
        &self.rpc_url
    }

    /// A JSON-RPC client for this node.
    pub fn rpc(&self) -> Result<Rpc, RpcError> {
        Rpc::new(&self.rpc_url)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// The anvil process id (still valid until `stop()` or drop).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The binary that was started.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// From spawning to the first answer of `eth_chainId`.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The ten funded, unlocked dev accounts.
    pub fn accounts(&self) -> &'static [DevAccount] {
        &DEV_ACCOUNTS
    }

    /// Kills anvil and waits until it is reaped. Idempotent. Blocks the calling thread for the few
    /// milliseconds a SIGKILL takes.
    pub fn stop(&mut self) {
        // Dropping the sender wakes the keeper, which kills and reaps the child, then returns.
        drop(self.stop_signal.take());
        if let Some(keeper) = self.keeper.take() {
            // A keeper that panicked has nothing left for us to clean up: its Child was dropped, and
            // PDEATHSIG still covers the process. Nothing useful to report from a destructor path.
            let _ = keeper.join();
        }
    }
}

impl Drop for Anvil {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where the anvil binary is: `X402_LAB_ANVIL` if set, else the npm package's binary in a
/// `node_modules` found upward from the current directory, then upward from this crate's source.
pub fn find_anvil_binary() -> Result<PathBuf, ChainError> {
    if let Some(path) = std::env::var_os(ANVIL_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(ChainError::AnvilEnvNotAFile { path })
        };
    }
    let relative = npm_binary_path()?;
    let mut starts = Vec::new();
    if let Ok(current) = std::env::current_dir() {
        starts.push(current);
    }
    starts.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let mut searched = Vec::new();
    for start in &starts {
        for dir in start.ancestors() {
            let candidate = dir.join(&relative);
            if candidate.is_file() {
                return Ok(candidate);
            }
            searched.push(candidate);
        }
    }
    Err(ChainError::AnvilNotFound { searched })
}

/// `node_modules/@foundry-rs/anvil-<platform>/bin/anvil` for the platforms the npm package ships.
fn npm_binary_path() -> Result<PathBuf, ChainError> {
    let (os, arch) = (std::env::consts::OS, std::env::consts::ARCH);
    let platform = match (os, arch) {
        ("linux", "x86_64") => "linux-amd64",
        ("linux", "aarch64") => "linux-arm64",
        ("macos", "x86_64") => "darwin-amd64",
        ("macos", "aarch64") => "darwin-arm64",
        _ => return Err(ChainError::UnsupportedPlatform { os, arch }),
    };
    Ok(Path::new("node_modules")
        .join("@foundry-rs")
        .join(format!("anvil-{platform}"))
        .join("bin")
        .join("anvil"))
}

fn anvil_command(binary: &Path, options: &AnvilOptions) -> Command {
    let mut command = Command::new(binary);
    command
        .args(["--host", "127.0.0.1", "--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(chain_id) = options.chain_id {
        command.arg("--chain-id").arg(chain_id.to_string());
    }
    command.args(&options.extra_args);
    die_with_spawning_thread(&mut command);
    command
}

/// Makes the child receive SIGKILL when the thread that spawned it exits (Linux only; elsewhere the
/// child outlives a killed test process, and `Drop` is the only cleanup).
#[cfg(target_os = "linux")]
fn die_with_spawning_thread(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and only calls async-signal-safe
    // functions (prctl, getppid) and builds an io::Error from errno.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl; then no signal will ever come.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::other(
                    "the parent exited while anvil was starting",
                ));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_spawning_thread(_command: &mut Command) {}

/// The keeper thread: spawns anvil, starts the output readers, then waits for the stop signal (or for
/// the `Anvil` to be dropped) and kills and reaps the child.
fn keep_anvil(
    mut command: Command,
    events: async_mpsc::UnboundedSender<StartupEvent>,
    stop: mpsc::Receiver<()>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    echo: bool,
) {
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            let _ = events.send(StartupEvent::SpawnFailed(error));
            return;
        }
    };
    let _ = events.send(StartupEvent::Spawned { pid: child.id() });
    let readers = start_output_readers(&mut child, events, stderr_tail, echo);

    // Blocks until `stop()` or drop of the Anvil (both drop the sender).
    let _ = stop.recv();

    // `Child::kill` never signals a reaped PID: we reap only below, so the PID is still ours here.
    let _ = child.kill();
    let _ = child.wait();
    for reader in readers {
        let _ = reader.join();
    }
}

fn start_output_readers(
    child: &mut Child,
    events: async_mpsc::UnboundedSender<StartupEvent>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    echo: bool,
) -> Vec<JoinHandle<()>> {
    let mut readers = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        let spawned = std::thread::Builder::new()
            .name("anvil-stdout".to_owned())
            .spawn(move || read_stdout(stdout, &events, echo));
        readers.extend(spawned.ok());
    }
    if let Some(stderr) = child.stderr.take() {
        let spawned = std::thread::Builder::new()
            .name("anvil-stderr".to_owned())
            .spawn(move || read_stderr(stderr, &stderr_tail, echo));
        readers.extend(spawned.ok());
    }
    readers
}

/// Reads anvil's stdout to the end (a full pipe would stall anvil): reports the port from the
/// "Listening on 127.0.0.1:<port>" line, echoes when asked, and reports the end of output.
fn read_stdout(stdout: impl Read, events: &async_mpsc::UnboundedSender<StartupEvent>, echo: bool) {
    let mut listening = false;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if echo {
            eprintln!("[anvil] {line}");
        }
        if !listening && let Some(port) = parse_listening_port(&line) {
            listening = true;
            let _ = events.send(StartupEvent::Listening { port });
        }
    }
    let _ = events.send(StartupEvent::OutputClosed);
}

fn read_stderr(stderr: impl Read, tail: &Mutex<VecDeque<String>>, echo: bool) {
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        if echo {
            eprintln!("[anvil stderr] {line}");
        }
        if let Ok(mut tail) = tail.lock() {
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
}

/// The port in anvil's "Listening on 127.0.0.1:8545" line.
fn parse_listening_port(line: &str) -> Option<u16> {
    let address = line.trim().strip_prefix("Listening on ")?;
    let (_host, port) = address.rsplit_once(':')?;
    port.trim().parse().ok().filter(|port| *port != 0)
}

fn tail_text(tail: &Mutex<VecDeque<String>>) -> String {
    match tail.lock() {
        Ok(tail) if !tail.is_empty() => tail.iter().cloned().collect::<Vec<_>>().join("\n"),
        _ => "(nothing)".to_owned(),
    }
}

/// Polls `eth_chainId` until it answers; returns the chain id.
async fn wait_until_answering(
    rpc: &Rpc,
    binary: &Path,
    started: Instant,
    deadline: Instant,
) -> Result<u64, ChainError> {
    loop {
        match rpc.chain_id().await {
            Ok(chain_id) => return Ok(chain_id),
            Err(error) if Instant::now() >= deadline => {
                return Err(ChainError::NotReady {
                    binary: binary.to_owned(),
                    waited: started.elapsed(),
                    last_error: error.to_string(),
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_line_gives_the_port() {
        assert_eq!(
            parse_listening_port("Listening on 127.0.0.1:38151"),
            Some(38151)
        );
        assert_eq!(
            parse_listening_port("  Listening on [::1]:8545  "),
            Some(8545)
        );
        assert_eq!(parse_listening_port("Listening on 127.0.0.1:0"), None);
        assert_eq!(parse_listening_port("Listening on 127.0.0.1:port"), None);
        assert_eq!(parse_listening_port("eth_chainId"), None);
    }

    #[test]
    fn dev_account_addresses_belong_to_their_keys() {
        for account in DEV_ACCOUNTS {
            assert_eq!(account.signer().address(), account.address);
        }
    }
}
