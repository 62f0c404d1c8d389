//! The anvil launcher against the real binary: start, parallel starts, chain id, dev accounts, stop and
//! drop reap the process, the process dies with the test process, and start failures are explained.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use alloy::primitives::U256;
use x402_lab::chain::{ANVIL_CHAIN_ID, ANVIL_ENV, Anvil, AnvilOptions, ChainError, DEV_ACCOUNTS};
use x402_lab::rpc::RpcError;

/// Set in a child copy of this test binary to make `helper_process` play a role.
const ROLE_ENV: &str = "X402_LAB_CHAIN_TEST_ROLE";

/// Whether `pid` is a live process. A zombie counts as dead: it has exited, only its entry is left
/// (for example when its parent died and the reaper that adopted it has not collected it yet).
fn process_is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(true),
        Err(_) => false,
    }
}

/// Whether `pid` is entirely gone: exited *and* reaped.
fn process_is_gone(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists; it sends nothing.
    let exists = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
    !exists && !Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn starts_quickly_and_serves_the_unlocked_dev_accounts() {
    let anvil = Anvil::start().await.expect("anvil starts");
    println!(
        "anvil startup (spawn to first eth_chainId answer): {:?}",
        anvil.startup_time()
    );
    assert!(anvil.startup_time() < Duration::from_secs(15));
    assert!(
        process_is_running(anvil.pid()),
        "anvil pid {} is running",
        anvil.pid()
    );
    assert_eq!(
        anvil.rpc_url(),
        format!("http://127.0.0.1:{}", anvil.port())
    );
    assert_eq!(anvil.chain_id(), ANVIL_CHAIN_ID);

    let rpc = anvil.rpc().expect("rpc client");
    assert_eq!(rpc.chain_id().await.expect("eth_chainId"), ANVIL_CHAIN_ID);
    let node_accounts = rpc.accounts().await.expect("eth_accounts");
    let ours: Vec<_> = anvil.accounts().iter().map(|a| a.address).collect();
    assert_eq!(
        node_accounts, ours,
        "our dev accounts are the ones the node unlocked"
    );
    let ten_thousand_ether = U256::from(10_000u64) * U256::from(10u64).pow(U256::from(18u64));
    assert_eq!(
        rpc.balance(DEV_ACCOUNTS[9].address).await.expect("balance"),
        ten_thousand_ether
    );
}

#[tokio::test]
async fn parallel_starts_get_separate_ports_and_chains() {
    let (a, b, c) = tokio::join!(Anvil::start(), Anvil::start(), Anvil::start());
    let (a, b, c) = (
        a.expect("a starts"),
        b.expect("b starts"),
        c.expect("c starts"),
    );
    println!(
        "three parallel starts: {:?} {:?} {:?}",
        a.startup_time(),
        b.startup_time(),
        c.startup_time()
    );
    assert_ne!(a.port(), b.port());
    assert_ne!(b.port(), c.port());
    assert_ne!(a.port(), c.port());
    assert_ne!(a.pid(), b.pid());

    // Each is its own chain: a block mined on one does not appear on the others.
    let (rpc_a, rpc_b) = (a.rpc().expect("rpc a"), b.rpc().expect("rpc b"));
    let before_b = rpc_b.block_number().await.expect("block b");
    rpc_a.mine().await.expect("mine on a");
    rpc_a.mine().await.expect("mine on a");
    assert_eq!(rpc_a.block_number().await.expect("block a"), before_b + 2);
    assert_eq!(rpc_b.block_number().await.expect("block b"), before_b);
}

#[tokio::test]
async fn stop_kills_and_reaps_the_process() {
    let mut anvil = Anvil::start().await.expect("anvil starts");
    let pid = anvil.pid();
    let rpc = anvil.rpc().expect("rpc client");
    assert!(process_is_running(pid));

    anvil.stop();
    assert!(process_is_gone(pid), "pid {pid} still exists after stop()");
    anvil.stop(); // idempotent
    let error = rpc
        .chain_id()
        .await
        .expect_err("a stopped node does not answer");
    assert!(matches!(error, RpcError::Transport { .. }), "{error}");
    assert!(error.to_string().contains("eth_chainId"), "{error}");
}

#[tokio::test]
async fn drop_kills_and_reaps_the_process() {
    let anvil = Anvil::start().await.expect("anvil starts");
    let pid = anvil.pid();
    assert!(process_is_running(pid));
    drop(anvil);
    assert!(process_is_gone(pid), "pid {pid} still exists after drop");
}

#[tokio::test]
async fn a_chosen_chain_id_is_served() {
    let options = AnvilOptions {
        chain_id: Some(8453),
        ..AnvilOptions::default()
    };
    let anvil = Anvil::start_with(options).await.expect("anvil starts");
    assert_eq!(anvil.chain_id(), 8453);
    let rpc = anvil.rpc().expect("rpc client");
    assert_eq!(rpc.chain_id().await.expect("eth_chainId"), 8453);
}

#[test]
fn anvil_dies_when_the_test_process_is_killed() {
    let mut child = helper_command("hold")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the helper starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let (lines_tx, lines_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let anvil_pid = loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match lines_rx.recv_timeout(remaining) {
            Ok(line) => {
                if let Some((_, pid)) = line.split_once("ANVIL_PID=") {
                    break pid.trim().parse::<u32>().expect("a pid");
                }
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the helper never reported its anvil");
            }
        }
    };
    assert!(process_is_running(anvil_pid));

    // SIGKILL: no destructor runs in the helper, only PDEATHSIG can take anvil down.
    child.kill().expect("kill the helper");
    child.wait().expect("reap the helper");
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_is_running(anvil_pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !process_is_running(anvil_pid),
        "anvil {anvil_pid} survived the test process"
    );
}

#[test]
fn a_missing_binary_is_a_clear_error() {
    let missing = std::env::temp_dir().join(format!("no-anvil-here-{}", std::process::id()));
    let output = helper_command("start")
        .env(ANVIL_ENV, &missing)
        .output()
        .expect("the helper runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = start_error_line(&stdout);
    assert!(line.contains(ANVIL_ENV), "{line}");
    assert!(line.contains("not a file"), "{line}");
    assert!(line.contains(&missing.display().to_string()), "{line}");
}

#[test]
fn a_binary_that_exits_at_once_is_reported_with_its_stderr() {
    let script = write_script("exits", "#!/bin/sh\necho 'this is not anvil' >&2\nexit 3\n");
    let output = helper_command("start")
        .env(ANVIL_ENV, &script)
        .output()
        .expect("the helper runs");
    let _ = std::fs::remove_file(&script);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = start_error_line(&stdout);
    assert!(line.contains("exited before it was listening"), "{line}");
    assert!(line.contains("this is not anvil"), "{line}");
}

#[test]
fn the_not_found_error_says_how_to_install_anvil() {
    let error = ChainError::AnvilNotFound {
        searched: vec![PathBuf::from(
            "a/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil",
        )],
    };
    let text = error.to_string();
    assert!(text.contains("npm ci"), "{text}");
    assert!(text.contains(ANVIL_ENV), "{text}");
    assert!(text.contains("a/node_modules"), "{text}");
}

/// Runs in a child copy of this binary, driven by the tests above; does nothing useful alone.
/// Its reports are `KEY=value` at the end of a line (libtest prints the test name before them).
#[tokio::test]
#[ignore = "a helper the other tests run in a child process"]
async fn helper_process() {
    match std::env::var(ROLE_ENV).as_deref() {
        Ok("hold") => {
            let anvil = Anvil::start().await.expect("anvil starts");
            println!("ANVIL_PID={}", anvil.pid());
            // The parent kills this process long before the sleep ends.
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(anvil);
        }
        Ok("start") => match Anvil::start().await {
            Ok(anvil) => println!("START_OK pid={}", anvil.pid()),
            Err(error) => println!("START_ERROR={error}"),
        },
        other => panic!("{ROLE_ENV} is {other:?}: run this only through the other tests"),
    }
}

fn helper_command(role: &str) -> Command {
    // The helper's name as the harness knows it: its module path without the crate's name.
    let helper = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::helper_process"),
        None => "helper_process".to_string(),
    };
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command
        .args([
            "--exact",
            &helper,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE_ENV, role)
        .stdin(Stdio::null());
    command
}

fn start_error_line(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|line| line.split_once("START_ERROR=").map(|(_, error)| error))
        .unwrap_or_else(|| panic!("the helper reported no start error; its stdout:\n{stdout}"))
        .to_owned()
}

/// The script is written by a child `sh`, never through a file this process holds open: a test
/// on another thread that spawns a process meanwhile would carry that open file into its child
/// until the child's exec, and running the script then fails with "Text file busy".
fn write_script(name: &str, body: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("x402-lab-{name}-{}.sh", std::process::id()));
    let status = std::process::Command::new("sh")
        .args([
            "-c",
            "printf '%s' \"$1\" > \"$2\" && chmod 755 \"$2\"",
            "sh",
            body,
        ])
        .arg(&path)
        .status()
        .expect("sh runs");
    assert!(status.success(), "writing the script: {status}");
    path
}
