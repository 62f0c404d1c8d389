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
