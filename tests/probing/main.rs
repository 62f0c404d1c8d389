//! The prober against real servers, in one test binary (one link instead of six): the HTTP
//! client and TLS, the fixed-RPC client, the `probe` command as a user runs it, hostile 402s and
//! hostile command lines, MCP servers (the lab's, honest, broken and hostile, and one on the
//! official MCP SDK), and the service build (no lab in it). The free acceptance table
//! (`probe_lab.rs`) stays a binary of its own: it probes every lab endpoint at once under the
//! prober's real deadlines, and other tests beside it on a loaded machine pushed the gzip bomb's
//! first answer past the 10 s first-byte deadline.

#[path = "../rpc_support/mod.rs"]
mod rpc_support;

mod cli_probe;
mod hostile_402;
mod hostile_cli;
mod http_probe;
mod mcp_probe;
mod rpc_client;
mod service_build;
mod solana_lab;
mod vantages;

/// Reads a child's stdout and stderr to their ends on threads of their own, so that a child
/// writing more than a pipe holds never blocks on us while we wait for it.
fn drain_outputs(
    child: &mut std::process::Child,
) -> (
    std::thread::JoinHandle<Vec<u8>>,
    std::thread::JoinHandle<String>,
) {
    use std::io::Read;
    let mut stdout = child.stdout.take().expect("stdout piped");
    let mut stderr = child.stderr.take().expect("stderr piped");
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    (out, err)
}
